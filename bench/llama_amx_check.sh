#!/bin/sh
# bench/llama_amx_check.sh — may the AMX build of the llama.cpp peer be trusted?
# (Issue 30 item 4: bench/install_llamacpp.sh patches the pinned llama.cpp's
# AMX tile setup; before its speed counts, its output must match the build
# without AMX.)
#
# Builds both peers if absent (bench/.peers/llama.cpp with AMX,
# bench/.peers/llama.cpp-noamx without), then for a few fixed prompts runs
# llama-simple (greedy) from each on the same model and compares the
# continuations. llama-simple prints text, so equal text means equal greedy
# tokens; where they differ the first differing characters are shown (int8
# tiles and the VNNI path sum in different orders, so a near-tie may flip
# late in a continuation: the report says where, it does not hide it). Then
# one llama-bench pp512 / tg128 at 1 thread per build, side by side.
#
# usage: sh bench/llama_amx_check.sh [-m MODEL.gguf] [-n 32]
# Exit status: 0 when every prompt's first 16 characters agree (and the AMX
# build ran without crashing), 1 otherwise, 2 on setup errors; on a CPU
# without AMX it says so and exits 0 without building anything.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
MODEL="$here/models/gemma-3-270m-q4_k_m.gguf" N=32
die() { echo "llama_amx_check.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        -m) [ $# -ge 2 ] || die "-m needs a value"; MODEL=$2; shift ;;
        -n) [ $# -ge 2 ] || die "-n needs a value"; N=$2; shift ;;
        -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
    shift
done
if ! grep -qw amx_int8 /proc/cpuinfo 2>/dev/null; then
    echo "llama_amx_check.sh: this CPU has no AMX ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')): nothing to check"
    exit 0
fi
[ -f "$MODEL" ] || die "model not found: $MODEL (sh tools/fetch_model.sh fetches the default one)"
AMX="$here/bench/.peers/llama.cpp" NOAMX="$here/bench/.peers/llama.cpp-noamx"
LLAMA_AMX=1 LLAMA_PEER_DIR="$AMX" sh "$here/bench/install_llamacpp.sh" || die "the AMX build failed"
LLAMA_AMX=0 LLAMA_PEER_DIR="$NOAMX" sh "$here/bench/install_llamacpp.sh" || die "the AMX-off build failed"

fail=0
i=0
for prompt in "The three most important inventions in human history are" \
              "def fibonacci(n):" \
              "The capital of France is" \
              "Once upon a time, in a small village,"; do
    i=$((i + 1))
    a=$("$AMX/bin/llama-simple" -m "$MODEL" -n "$N" "$prompt" 2>/dev/null) || { echo "prompt $i: the AMX build failed (exit $?)"; fail=1; continue; }
    b=$("$NOAMX/bin/llama-simple" -m "$MODEL" -n "$N" "$prompt" 2>/dev/null) || { echo "prompt $i: the AMX-off build failed"; fail=1; continue; }
    if [ "$a" = "$b" ]; then
        echo "prompt $i: identical greedy continuation ($N tokens)"
    else
        same=$(python3 -c 'import sys; a, b = sys.argv[1], sys.argv[2]
n = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))); print(n)' "$a" "$b")
        echo "prompt $i: the continuations differ after $same characters"
        echo "  AMX:     $(printf '%s' "$a" | tr '\n' ' ' | cut -c1-160)"
        echo "  AMX off: $(printf '%s' "$b" | tr '\n' ' ' | cut -c1-160)"
        [ "$same" -ge $((${#prompt} + 16)) ] || fail=1
    fi
done

echo "speed, 1 thread (llama-bench -p 512 -n 128 -r 3):"
for peer in "$AMX" "$NOAMX"; do
    echo "  $(grep -o 'AMX o[nf]*' "$peer/VERSION")"
    "$peer/bin/llama-bench" -m "$MODEL" -p 512 -n 128 -r 3 -t 1 2>/dev/null | grep -E '^\| ' | sed 's/^/    /' ||
        { echo "    llama-bench failed"; fail=1; }
done
exit "$fail"
