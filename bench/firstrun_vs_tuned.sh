#!/bin/sh
# bench/firstrun_vs_tuned.sh — kiln as a user gets it (a fresh tuning DB and
# the first-run search `kiln bench` does by itself) against the same model
# after a manual `kiln tune --budget 120`, at 1 and 2 threads, the two
# interleaved in each round (issue 26: first run >= 95% of the long tune).
#
# usage: sh bench/firstrun_vs_tuned.sh [-m MODEL.gguf[,MODEL2.gguf]] [-r ROUNDS] [-b BUDGET] [--notune]
# --notune adds a third side to each round: an empty tuning DB with --no-tune
# (the cost model's first choices, no search; issue 26: >= 80% of the tune).
# Environment: KILN (default build/kiln). Prints the searches' own summary
# lines, then one line per measurement:
#   MODEL round R t=T firstrun|tuned|notune pp512|tg128 TOKENS_PER_S
# and at the end the median of firstrun (and notune) / tuned per model, thread count and
# test. After each model's searches it prints the records the two DBs chose
# differently (kernel, bucket, each side's schedule and measured time), so a
# miss can be traced to the kernels the first run settled otherwise. Takes about 6 minutes per model (two 120 s tunes and the rounds).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
K=${KILN:-$here/build/kiln}
MODELS=$here/models/gemma-3-270m-q4_k_m.gguf ROUNDS=3 BUDGET=120 CFGS="firstrun tuned"
die() { echo "firstrun_vs_tuned.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        -m) [ $# -ge 2 ] || die "-m needs a value"; MODELS=$(echo "$2" | tr ',' ' '); shift ;;
        -r) [ $# -ge 2 ] || die "-r needs a value"; ROUNDS=$2; shift ;;
        -b) [ $# -ge 2 ] || die "-b needs a value"; BUDGET=$2; shift ;;
        --notune) CFGS="firstrun tuned notune" ;;
        -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
    shift
done
[ -x "$K" ] || die "no $K (run make)"
for m in $MODELS; do [ -f "$m" ] || die "model not found: $m"; done
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
echo "# $("$K" --version), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
bench() { # name db t -> "pp512 X" and "tg128 Y" lines
    KILN_TUNEDB=$2 "$K" bench -m "$1" -p 512 -n 128 -r 2 -t "$3" $4 2>"$W/err" |
        awk -F'|' '/pp512|tg128/ {gsub(/ /,"",$7); split($8,a," "); print $7, a[1]}'
}
differ() { # first.db tuned.db -> the records whose schedules differ
    KILN_TUNEDB=$1 "$K" tune --show --json > "$W/a.json" 2>/dev/null || true
    KILN_TUNEDB=$2 "$K" tune --show --json > "$W/b.json" 2>/dev/null || true
    python3 - "$W/a.json" "$W/b.json" <<'PY'
import json, sys
def load(p):
    try: return {(r["key"], r["bucket"]): r for r in json.load(open(p)) if r.get("this_machine")}
    except (OSError, ValueError): return {}
a, b = load(sys.argv[1]), load(sys.argv[2])
ms = lambda r: "%.3f ms" % (r["best_s"] * 1e3) if r and r.get("best_s") else "-"
for k in sorted(set(a) | set(b)):
    ra, rb = a.get(k), b.get(k)
    if ra and rb and ra["schedule"] == rb["schedule"]: continue
    print("  differs: %s %s | first run: %s (%s, %s tried) | tuned: %s (%s, %s tried)" % (k[0], k[1],
          ra["schedule"] if ra else "no record", ms(ra), ra["tried"] if ra else 0,
          rb["schedule"] if rb else "no record", ms(rb), rb["tried"] if rb else 0))
PY
}
for m in $MODELS; do
    n=$(basename "$m" .gguf)
    for t in 1 2; do
        s0=$(date +%s)
        bench "$m" "$W/first-$n.db" $t "" > "$W/first0" # the first run: it searches, then measures
        echo "$n t=$t first run (search + bench) $(( $(date +%s) - s0 )) s; $(grep -E 'searched|tuned' "$W/err" | tail -1)"
        KILN_TUNEDB=$W/tuned-$n.db "$K" tune -m "$m" -t $t --budget "$BUDGET" 2>&1 | grep -E "searched|tuned" | tail -1 | sed "s/^/$n t=$t tune: /"
    done
    echo "$n: the records the first run and the tune chose differently:"
    differ "$W/first-$n.db" "$W/tuned-$n.db"
    r=1
    while [ $r -le "$ROUNDS" ]; do
        for t in 1 2; do
            for cfg in $CFGS; do
                case $cfg in firstrun) db=$W/first-$n.db ;; tuned) db=$W/tuned-$n.db ;; notune) db=$W/none-$n.db ;; esac
                bench "$m" "$db" $t --no-tune | sed "s/^/$n round $r t=$t $cfg /"
            done
        done
        r=$((r + 1))
    done | tee -a "$W/all"
done
echo "# medians of firstrun (and notune) / tuned"
awk '{k=$1" "$4" "$6; v[k" "$5]=v[k" "$5]" "$7} END {for (x in v) print x, v[x]}' "$W/all" | sort |
    awk '{n=split($0,a," "); c=0; for(i=5;i<=n;i++) s[++c]=a[i]; for(i=1;i<=c;i++) for(j=i+1;j<=c;j++) if (s[j]<s[i]) {x=s[i];s[i]=s[j];s[j]=x}
          med=(c%2)?s[(c+1)/2]:(s[c/2]+s[c/2+1])/2; key=$1" "$2" "$3; m[key" "$4]=med}
         END {for (k in m) {split(k,b," "); if (b[4]!="tuned") {kk=b[1]" "b[2]" "b[3]; printf "%s %s %s %.1f tuned %.1f ratio %.2f\n", b[1], b[2]" "b[3], b[4], m[k], m[kk" tuned"], m[k]/m[kk" tuned"]}}}' | sort
echo "# done $(date -u +%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
