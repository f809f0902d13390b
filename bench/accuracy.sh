#!/bin/sh
# bench/accuracy.sh — what kiln's fast arithmetic costs, measured as
# llama.cpp's llama-perplexity measures it, with kiln's exact evaluation as
# the yardstick.
#
# Runs, on one model and one text (default: gemma-3-270m q4_k_m and the GNU
# GPL v3 that Debian's base-files ships, /usr/share/common-licenses/GPL-3),
# chunks of -c 512 tokens:
#   1. kiln --exact: f32 contractions, no tuning DB, no search; its
#      log-probabilities become the base file (llama-perplexity's layout);
#   2. kiln as a user gets it: a fresh tuning DB (in a scratch folder), so
#      the first run's own schedule search (30 s, or $KILN_TUNE) picks the
#      arithmetic, then --kl-divergence against the exact base;
#   3. with --tune B: kiln after `kiln tune --budget B` on that DB, again;
#   4. llama.cpp's llama-perplexity, when bench/.peers/llama.cpp has one
#      (bench/install_llamacpp.sh builds the peer; $LLAMA_PERPLEXITY names
#      another binary): --kl-divergence against the same exact base, and a
#      plain perplexity run over the text for its wall time.
# and prints PPL, mean / 99% / maximum KL, same top p and the time of the
# perplexity runs (the chunks' evaluation, and the whole process) side by side (a Markdown table; --out FILE writes it
# there too, with the CPU named). The ~2 GB base file lives in a scratch
# folder that is removed at the end.
#
# usage: sh bench/accuracy.sh [-m MODEL] [-f TEXT] [-c 512] [-t THREADS]
#                             [--chunks N] [--tune SECONDS] [--out FILE]
# Environment: KILN (default build/kiln), LLAMA_PERPLEXITY, TMPDIR.
# Exit status: 0, 1 when a run failed, 2 on usage errors.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

MODEL="$here/models/gemma-3-270m-q4_k_m.gguf"
TEXT=/usr/share/common-licenses/GPL-3
CTX=512 THREADS=$(nproc) CHUNKS="" TUNE=0 OUT=""
KILN=${KILN:-$here/build/kiln}
LLAMA_PERPLEXITY=${LLAMA_PERPLEXITY:-}
if [ -z "$LLAMA_PERPLEXITY" ]; then
    for c in "$here/bench/.peers/llama.cpp/bin/llama-perplexity" "$here/bench/.peers/llama.cpp/build/bin/llama-perplexity"; do
        if [ -x "$c" ]; then LLAMA_PERPLEXITY=$c; break; fi
    done
fi

die() { echo "accuracy.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        -m) [ $# -ge 2 ] || die "-m needs a value"; MODEL=$2; shift ;;
        -f) [ $# -ge 2 ] || die "-f needs a value"; TEXT=$2; shift ;;
        -c) [ $# -ge 2 ] || die "-c needs a value"; CTX=$2; shift ;;
        -t) [ $# -ge 2 ] || die "-t needs a value"; THREADS=$2; shift ;;
        --chunks) [ $# -ge 2 ] || die "--chunks needs a value"; CHUNKS=$2; shift ;;
        --tune) [ $# -ge 2 ] || die "--tune needs a value"; TUNE=$2; shift ;;
        --out) [ $# -ge 2 ] || die "--out needs a value"; OUT=$2; shift ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done
[ -x "$KILN" ] || die "no kiln at $KILN (make first, or set KILN)"
[ -f "$MODEL" ] || die "no model at $MODEL (sh tools/fetch_model.sh fetches the default)"
[ -f "$TEXT" ] || die "no text at $TEXT"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/kiln-accuracy.XXXXXX")
trap 'rm -rf "$scratch"' EXIT INT TERM
base="$scratch/exact.kld"
chunk_args=""
[ -n "$CHUNKS" ] && chunk_args="--chunks $CHUNKS"
rows="$scratch/rows.txt"
: >"$rows"
fail=0

now() { date +%s.%N; }
# kiln_row NAME JSONFILE WALL: one table row from kiln perplexity --json
kiln_row() {
    python3 - "$1" "$2" "$3" >>"$rows" <<'PY'
import json, sys
name, path, wall = sys.argv[1], sys.argv[2], float(sys.argv[3])  # wall: the whole process
j = json.load(open(path))
a = j["arith"]
arith = "decode %d/%d/%d, prefill %d/%d/%d" % (a["decode"]["f32"], a["decode"]["int8"], a["decode"]["bf16"],
                                               a["prefill"]["f32"], a["prefill"]["int8"], a["prefill"]["bf16"])
kl = j.get("kl")
if kl:
    print("| %s | %.4f | %.6f | %.6f | %.6f | %.3f%% | %.1f s (%.0f s) | %s |" % (name, j["ppl"], kl["kld_mean"],
          kl["kld_99"], kl["kld_max"], 100 * kl["same_top_p"], j["seconds"], wall, arith))
else:
    print("| %s | %.4f | (base) | | | | %.1f s (%.0f s) | %s |" % (name, j["ppl"], j["seconds"], wall, arith))
PY
}

run_kiln() { # NAME OUTJSON args...
    name=$1 out=$2
    shift 2
    echo "accuracy.sh: $name ..." >&2
    t0=$(now)
    # shellcheck disable=SC2086
    if "$KILN" perplexity -m "$MODEL" -c "$CTX" -t "$THREADS" $chunk_args --json "$@" >"$out" 2>"$out.err"; then
        t1=$(now)
        kiln_row "$name" "$out" "$(awk "BEGIN { print $t1 - $t0 }")"
    else
        echo "accuracy.sh: $name failed:" >&2
        tail -n 5 "$out.err" >&2
        echo "| $name | failed | | | | | | |" >>"$rows"
        fail=1
    fi
}

export KILN_TUNEDB="$scratch/tune.db"
run_kiln "kiln --exact" "$scratch/exact.json" -f "$TEXT" --exact --kl-divergence-base "$base"
[ -f "$base" ] || { echo "accuracy.sh: no exact base was written" >&2; exit 1; }
run_kiln "kiln default (first-run search)" "$scratch/default.json" -f "$TEXT" --kl-divergence-base "$base" --kl-divergence
if [ "$TUNE" != 0 ]; then
    echo "accuracy.sh: kiln tune --budget $TUNE ..." >&2
    if "$KILN" tune -m "$MODEL" --budget "$TUNE" -t "$THREADS" >"$scratch/tune.out" 2>&1; then
        run_kiln "kiln after tune --budget $TUNE" "$scratch/tuned.json" -f "$TEXT" --kl-divergence-base "$base" --kl-divergence
    else
        tail -n 5 "$scratch/tune.out" >&2
        fail=1
    fi
fi

if [ -n "$LLAMA_PERPLEXITY" ] && [ -x "$LLAMA_PERPLEXITY" ]; then
    echo "accuracy.sh: llama.cpp ($LLAMA_PERPLEXITY) ..." >&2
    lchunks=""
    [ -n "$CHUNKS" ] && lchunks="--chunks $CHUNKS"
    t0=$(now)
    # shellcheck disable=SC2086
    if "$LLAMA_PERPLEXITY" -m "$MODEL" -f "$TEXT" -c "$CTX" -t "$THREADS" $lchunks >"$scratch/llama-ppl.out" 2>&1; then
        t1=$(now)
        ppl_wall=$(awk "BEGIN { print $t1 - $t0 }")
    else
        ppl_wall=""
        fail=1
    fi
    # shellcheck disable=SC2086
    if "$LLAMA_PERPLEXITY" -m "$MODEL" -c "$CTX" -t "$THREADS" $lchunks --kl-divergence-base "$base" --kl-divergence \
        >"$scratch/llama-kl.out" 2>&1; then
        python3 - "$scratch/llama-kl.out" "$scratch/llama-ppl.out" "$ppl_wall" >>"$rows" <<'PY'
import re, sys
kl, ppl_out, wall = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3]
def num(pat, text):
    m = re.search(pat, text)
    return float(m.group(1)) if m else float("nan")
ppl = num(r"Mean PPL\(Q\)\s*:\s*([0-9.]+)", kl)
mean = num(r"Mean\s+KLD:\s*([-0-9.]+)", kl)
p99 = num(r"99\.0%\s+KLD:\s*([-0-9.]+)", kl)
mx = num(r"Maximum KLD:\s*([-0-9.]+)", kl)
top = num(r"Same top p:\s*([0-9.]+)", kl)
final = num(r"Final estimate: PPL = ([0-9.]+)", ppl_out)
# llama.cpp's log lines start with a timestamp, minutes.seconds.milliseconds.microseconds:
# the chunks' time runs from "calculating perplexity" to "Final estimate"
def stamp(pat):
    m = re.search(r"^(\d+)\.(\d+)\.(\d+)\.(\d+) \w " + pat, ppl_out, re.M)
    return 60 * int(m.group(1)) + int(m.group(2)) + int(m.group(3)) / 1e3 + int(m.group(4)) / 1e6 if m else float("nan")
ev = stamp("Final estimate") - stamp("perplexity: calculating perplexity")
w = "%.1f s (%.0f s)" % (ev, float(wall)) if wall else "failed"
print("| llama.cpp llama-perplexity | %.4f | %.6f | %.6f | %.6f | %.3f%% | %s | (its own; PPL without a base: %.4f) |"
      % (ppl, mean, p99, mx, top, w, final))
PY
    else
        echo "accuracy.sh: llama-perplexity --kl-divergence failed:" >&2
        tail -n 5 "$scratch/llama-kl.out" >&2
        echo "| llama.cpp llama-perplexity | failed | | | | | | |" >>"$rows"
        fail=1
    fi
else
    echo "accuracy.sh: no llama-perplexity (bench/install_llamacpp.sh builds the peer; LLAMA_PERPLEXITY names one): kiln only" >&2
fi

cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)
{
    echo "Accuracy against kiln's exact evaluation: $(basename "$MODEL"), $(basename "$TEXT"), -c $CTX, $THREADS thread(s), ${CHUNKS:-all} chunks"
    echo "CPU: ${cpu:-unknown}; kiln $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo
    echo "Time: the perplexity run over the text's chunks (in brackets: the whole process: load, compile, first-run search)"
    echo
    echo "| engine | PPL | mean KL | 99% KL | max KL | same top p | time | contractions f32/int8/bf16 |"
    echo "|---|---|---|---|---|---|---|---|"
    cat "$rows"
} | if [ -n "$OUT" ]; then tee "$OUT"; else cat; fi
exit $fail
