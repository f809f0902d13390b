#!/bin/sh
# bench/openblas.sh — build and run bench/openblas.c: kiln's compiled
# contractions, untuned (search_budget 0) and tuned (search_budget --budget s),
# against OpenBLAS sgemm/sgemv, same inputs and threads, interleaved medians:
#   1. fp32 n x n x n matmul, n = 256 .. max_size (+ one kiln_matmul A.B row)
#   2. LLM shapes M in {1,512} x K,N in {640,2048,4096} (sgemv for M=1)
#   3. q8_0/q4_0/q4_k/q6_k matrix-vector, N=K=4096: GB/s of weights, % of bw
# Every kiln result is checked against OpenBLAS (a WRONG row exits 1).
#
#   sh bench/openblas.sh [threads,..] [max_size] [reps] [--budget S] [--db PATH] [--parts 123]
#   defaults: threads 1,<cores>; max_size 2048 (4096 optional); reps 5;
#   budget 3 s per program; a temporary tuning DB (--db PATH keeps one).
#   sh bench/openblas.sh                       # everything, ~4-5 min on 2 cores
#   sh bench/openblas.sh 2 4096 5 --budget 10  # one thread count, up to 4096
#   sh bench/openblas.sh 1,2 1024 3 --parts 3  # only the quantised part
# Needs libopenblas-dev (apt-get install libopenblas-dev). OPENBLAS_CORETYPE
# defaults to SkylakeX: Debian's OpenBLAS 0.3.21 does not know the newest
# cores (it takes Zen 5 for Haswell, half the speed), and SkylakeX is its
# AVX-512 kernel set (DESIGN.md 10). Override it by setting the variable.
# OPENBLAS_THREAD_TIMEOUT defaults to 18 (idle OpenBLAS threads spin 2^18
# cycles, ~80 us, about as long as kiln's workers): OpenBLAS's own default,
# 2^28 cycles (~80 ms), leaves its threads spinning through the next kiln
# sample, which then ran at 1-thread speed at 2 threads, at random.
set -eu
cd "$(dirname "$0")/.."
inc=""
for d in /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas /usr/include; do
    if [ -f "$d/cblas.h" ]; then inc="$d"; break; fi
done
[ -n "$inc" ] || { echo "openblas.sh: cblas.h not found: apt-get install libopenblas-dev" >&2; exit 2; }
libdir=""
for d in /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/lib/x86_64-linux-gnu /usr/lib; do
    if [ -f "$d/libopenblas.so" ]; then libdir="$d"; break; fi
done
[ -n "$libdir" ] || { echo "openblas.sh: libopenblas.so not found: apt-get install libopenblas-dev" >&2; exit 2; }
if ! make -s build/libkiln.a; then
    [ -f build/libkiln.a ] || { echo "openblas.sh: make build/libkiln.a failed" >&2; exit 2; }
    echo "openblas.sh: warning: make failed; using the existing build/libkiln.a" >&2
fi
${CC:-cc} -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra -Wshadow -Wconversion -Iinclude -Isrc/model -I"$inc" -o build/bench_openblas \
    bench/openblas.c build/libkiln.a -L"$libdir" -Wl,-rpath,"$libdir" -lopenblas -lm -ldl -lpthread
OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX} OPENBLAS_THREAD_TIMEOUT=${OPENBLAS_THREAD_TIMEOUT:-18} \
    exec ./build/bench_openblas "$@"
