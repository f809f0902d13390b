#!/bin/sh
# bench/rewrite_depth.sh — whole-model rewrite time against depth (issue 27:
# the default model's 18 layers and a 36-layer variant must differ by < 20%,
# the block cache saturating each distinct block once). Writes the variant
# with bench/deepen_gguf.py (the same blocks twice; ~470 MB beside the
# model, kept for later runs), builds bench/rewrite_depth.c against
# build/libkiln.a and prints each model's rewrite seconds per round (the
# compile's "e-graph" stage, every program kiln_llm_load compiles, 1 thread,
# no search; the two models interleaved), the medians and their ratio.
#
# usage: sh bench/rewrite_depth.sh [-m MODEL.gguf] [-r ROUNDS]
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
M=$here/models/gemma-3-270m-q4_k_m.gguf R=5
die() { echo "rewrite_depth.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        -m) [ $# -ge 2 ] || die "-m needs a value"; M=$2; shift ;;
        -r) [ $# -ge 2 ] || die "-r needs a value"; R=$2; shift ;;
        -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
    shift
done
[ -f "$M" ] || die "model not found: $M (make run fetches the default one)"
[ -f "$here/build/libkiln.a" ] && [ -f "$here/build/libkiln.so" ] || make -C "$here" -s
PY=$(sh "$here/tools/pyenv.sh") || die "tools/pyenv.sh could not make the Python environment"
deep=${M%.gguf}-x2.gguf
[ -f "$deep" ] || KILN_LIB=$here/build/libkiln.so "$PY" "$here/bench/deepen_gguf.py" "$M" "$deep" --times 2 ||
    die "bench/deepen_gguf.py could not write $deep"
${CC:-cc} -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -I"$here/include" -o "$here/build/rewrite_depth" \
    "$here/bench/rewrite_depth.c" "$here/build/libkiln.a" -lm -ldl -lpthread
echo "# $("$here/build/kiln" --version), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
# the two interleaved, one load each per round (the machine drifts between runs)
out=$(i=0; while [ $i -lt "$R" ]; do
    "$here/build/rewrite_depth" "$M" 1 | grep ' round '
    "$here/build/rewrite_depth" "$deep" 1 | grep ' round '
    i=$((i + 1))
done)
echo "$out"
median() { echo "$out" | grep -F "$1 round" | awk '{print $5}' | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
a=$(median "$M") b=$(median "$deep")
echo "rewrite (medians of $R): $(basename "$M") $a s, $(basename "$deep") $b s, ratio $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", b / a}')"
