#!/bin/sh
# bench/egraph.sh — times kiln's equality saturation on a gemma3-270m-shaped
# block and on the 18-block model (with reuse of identical blocks), on one
# core. Builds the benchmark against build/libkiln.a (make WIP=1 first while
# src/rewrite is still marked work-in-progress). Extra arguments go to the
# benchmark: --iters N, --nodes N, --full (also saturate 18 blocks as one
# graph, no reuse), --json.
set -e
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CC=${CC:-cc}
[ -f "$BUILD/libkiln.a" ] || make WIP=1 "$BUILD/libkiln.a"
mkdir -p "$BUILD/bench"
$CC -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -g -Wall -Wextra -Wshadow -Wconversion \
    -Iinclude -Isrc/base -Isrc/ir -Isrc/model -Isrc/ref -Isrc/nn -Isrc/rewrite \
    -o "$BUILD/bench/egraph_bench" bench/egraph_bench.c "$BUILD/libkiln.a" -lm -ldl -lpthread
# one core: pin when taskset exists
if command -v taskset >/dev/null 2>&1; then
    exec taskset -c 0 "$BUILD/bench/egraph_bench" "$@"
fi
exec "$BUILD/bench/egraph_bench" "$@"
