#!/bin/sh
# bench/kernels.sh — build and run bench/kernels.c (softmax, rmsnorm, a fused
# elementwise chain and a plain reduction, 4 KiB .. 256 MiB) against the
# bandwidth kiln measures for this machine.
#   sh bench/kernels.sh [max_mib] [threads] [rounds]   (defaults 256, all cores, 5)
set -e
cd "$(dirname "$0")/.."
make -s WIP=1 build/libkiln.a
${CC:-cc} -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Iinclude -o build/bench_kernels bench/kernels.c build/libkiln.a -lm -ldl -lpthread
exec ./build/bench_kernels "$@"
