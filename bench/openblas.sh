#!/bin/sh
# bench/openblas.sh — build and run bench/openblas.c: kiln's compiled f32
# matmul against OpenBLAS sgemm/sgemv, same inputs and threads, interleaved.
#   sh bench/openblas.sh [threads,..] [max_size] [reps]     (defaults 1,2 1024 7)
# Needs libopenblas-dev (apt-get install libopenblas-dev). OPENBLAS_CORETYPE
# defaults to SkylakeX: Debian's OpenBLAS 0.3.21 does not know the newest
# cores (it takes Zen 5 for Haswell, half the speed), and SkylakeX is its
# AVX-512 kernel set (DESIGN.md 10). Override it by setting the variable.
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
${CC:-cc} -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra -Iinclude -I"$inc" -o build/bench_openblas \
    bench/openblas.c build/libkiln.a -L"$libdir" -Wl,-rpath,"$libdir" -lopenblas -lm -ldl -lpthread
OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX} exec ./build/bench_openblas "$@"
