#!/bin/sh
# bench/notune_vs_tuned.sh — kiln without any search or record (the cost
# model's first choices: a fresh tuning DB and --no-tune) against the same
# model after a `kiln tune --budget 120`, and against kiln's fixed f32
# schedules (KILN_FIXED_DEFAULTS=1), at 1 and 2 threads, the three
# interleaved in each round (issue 26: with no records, >= 80% of tuned).
#
# usage: sh bench/notune_vs_tuned.sh [MODEL.gguf] [ROUNDS]
# Environment: KILN (default build/kiln). Prints one line per measurement:
#   round R t=T notune|tuned|fixed pp512|tg128 TOKENS_PER_S
# and the 120 s tunes' summary lines first. Takes about 10 minutes.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
K=${KILN:-$here/build/kiln}
M=${1:-$here/models/gemma-3-270m-q4_k_m.gguf}
ROUNDS=${2:-3}
[ -x "$K" ] || { echo "notune_vs_tuned.sh: no $K (run make)" >&2; exit 2; }
[ -f "$M" ] || { echo "notune_vs_tuned.sh: no model at $M (sh tools/fetch_model.sh)" >&2; exit 2; }
D=$(mktemp -d); E=$(mktemp -d)
trap 'rm -rf "$D" "$E"' EXIT
for t in 1 2; do KILN_TUNEDB=$D/t.db "$K" tune -m "$M" -t $t --budget 120 2>&1 | grep -E "searched|tuned" | tail -2; done
r=1
while [ $r -le "$ROUNDS" ]; do
    for t in 1 2; do
        for cfg in notune tuned fixed; do
            case $cfg in notune) db=$E/e.db; fd=0 ;; tuned) db=$D/t.db; fd=0 ;; fixed) db=$E/e.db; fd=1 ;; esac
            KILN_FIXED_DEFAULTS=$fd KILN_TUNEDB=$db "$K" bench -m "$M" -p 512 -n 128 -r 2 -t $t --no-tune 2>/dev/null |
                awk -v c=$cfg -v t=$t -v r=$r -F'|' '/pp512|tg128/ {gsub(/ /,"",$7); split($8,a," "); print "round " r, "t=" t, c, $7, a[1]}'
        done
    done
    r=$((r + 1))
done
