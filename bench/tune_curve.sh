#!/bin/sh
# bench/tune_curve.sh — how fast kiln runs a model after a search of B seconds
# (issue 26: quality against budget, as a picture).
#
# For each model and each budget B (default 0 5 10 20 30 60 120 s): a fresh
# tuning DB, `kiln tune -m MODEL --budget B -t T` (B = 0: no search at all),
# then `kiln bench -m MODEL -p 512 -n 128 -r R -t T --no-tune` on the records
# it wrote; prints a table (budget, the search's own report of its seconds,
# pp512 and tg128 t/s) and writes an SVG plot of t/s against budget, one line
# per test, with llama.cpp's llama-bench speed on the same file and threads as
# a dashed line where bench/.peers/llama.cpp is built.
#
# usage: sh bench/tune_curve.sh [-m MODEL.gguf[,MODEL2.gguf]] [-t 1] [-r 3]
#                               [--budgets "0 5 10 20 30 60 120"] [--out DIR]
# Writes DIR/tune_curve.md (the table) and DIR/tune_curve-<model>.svg
# (default DIR: build/tune-curve). Takes minutes: every budget is a search
# and a bench. The kernel cache is kept, so compiles are shared between points.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
MODELS="$here/models/gemma-3-270m-q4_k_m.gguf" T=1 R=3 BUDGETS="0 5 10 20 30 60 120"
OUT="$here/build/tune-curve"
KILN=${KILN:-$here/build/kiln}
LLAMA_BENCH=${LLAMA_BENCH:-$here/bench/.peers/llama.cpp/bin/llama-bench}
die() { echo "tune_curve.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        -m) [ $# -ge 2 ] || die "-m needs a value"; MODELS=$(echo "$2" | tr ',' ' '); shift ;;
        -t) [ $# -ge 2 ] || die "-t needs a value"; T=$2; shift ;;
        -r) [ $# -ge 2 ] || die "-r needs a value"; R=$2; shift ;;
        --budgets) [ $# -ge 2 ] || die "--budgets needs a value"; BUDGETS=$2; shift ;;
        --out) [ $# -ge 2 ] || die "--out needs a value"; OUT=$2; shift ;;
        -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
    shift
done
[ -x "$KILN" ] || die "$KILN is missing: run make"
for m in $MODELS; do [ -f "$m" ] || die "model not found: $m"; done
mkdir -p "$OUT"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
table="$OUT/tune_curve.md"
{
    echo "kiln $("$KILN" --version | sed 's/^kiln //'), $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $cpu, $(nproc) cores; $T thread(s); $(date -u +%Y-%m-%d)"
    echo
    echo "| model | budget s | search s (kiln's report) | pp512 t/s | tg128 t/s |"
    echo "|---|---|---|---|---|"
} > "$table"
for m in $MODELS; do
    name=$(basename "$m" .gguf)
    pts="$OUT/$name.points"
    : > "$pts"
    for b in $BUDGETS; do
        db="$OUT/$name-$b.db"
        rm -f "$db"
        spent=0
        if [ "$b" != 0 ]; then
            log=$(KILN_TUNEDB="$db" "$KILN" tune -m "$m" --budget "$b" -t "$T" 2>&1 >/dev/null) || { echo "$log" | tail -5 >&2; die "kiln tune failed at budget $b"; }
            spent=$(echo "$log" | sed -n 's/.*searched [0-9]* kernels\{0,1\} in \([0-9.]*\) s of a.*/\1/p' | tail -n 1)
        fi
        res=$(KILN_TUNEDB="$db" "$KILN" bench -m "$m" -p 512 -n 128 -r "$R" -t "$T" --no-tune --json 2>/dev/null) || die "kiln bench failed at budget $b"
        pp=$(echo "$res" | python3 -c 'import json,sys; print("%.1f" % [r["avg_ts"] for r in json.load(sys.stdin) if r["test"] == "pp512"][0])')
        tg=$(echo "$res" | python3 -c 'import json,sys; print("%.1f" % [r["avg_ts"] for r in json.load(sys.stdin) if r["test"] == "tg128"][0])')
        echo "| $name | $b | ${spent:-?} | $pp | $tg |" >> "$table"
        echo "$b $pp $tg" >> "$pts"
        echo "tune_curve: $name budget $b s: search ${spent:-?} s, pp512 $pp t/s, tg128 $tg t/s" >&2
    done
    lpp="" ltg=""
    if [ -x "$LLAMA_BENCH" ]; then
        lj=$("$LLAMA_BENCH" -m "$m" -p 512 -n 128 -r "$R" -t "$T" -o json 2>/dev/null || true)
        lpp=$(echo "$lj" | python3 -c 'import json,sys; print([r["avg_ts"] for r in json.load(sys.stdin) if r["n_prompt"] > 0][0])' 2>/dev/null || true)
        ltg=$(echo "$lj" | python3 -c 'import json,sys; print([r["avg_ts"] for r in json.load(sys.stdin) if r["n_gen"] > 0][0])' 2>/dev/null || true)
        [ -n "$lpp" ] && echo "| $name | llama.cpp | - | $(printf '%.1f' "$lpp") | $(printf '%.1f' "$ltg") |" >> "$table"
    fi
    # the plot: no plotting library, the SVG written by hand
    python3 - "$pts" "$OUT/tune_curve-$name.svg" "$name, $T thread(s), $cpu" "${lpp:-}" "${ltg:-}" <<'PY'
import sys
pts = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
out, title, lpp, ltg = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
W, H, L, R_, T_, B_ = 640, 420, 70, 20, 40, 50
xs = [p[0] for p in pts]
xmax = max(xs) or 1
def panel(col, peer, top, h, label):
    ys = [p[col] for p in pts] + ([float(peer)] if peer else [])
    ymax = max(ys) * 1.1 or 1
    X = lambda x: L + (W - L - R_) * x / xmax
    Y = lambda y: top + h - h * y / ymax
    s = ['<text x="%d" y="%d" font-size="12">%s (t/s)</text>' % (L, top - 6, label)]
    s.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>' % (L, top + h, W - R_, top + h))
    s.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>' % (L, top, L, top + h))
    for k in range(5):
        v = ymax * k / 4
        s.append('<text x="%d" y="%d" font-size="10" text-anchor="end">%.0f</text>' % (L - 4, Y(v) + 3, v))
    for x in xs:
        s.append('<text x="%d" y="%d" font-size="10" text-anchor="middle">%g</text>' % (X(x), top + h + 12, x))
    s.append('<polyline fill="none" stroke="#c33" stroke-width="2" points="%s"/>' %
             " ".join("%.1f,%.1f" % (X(p[0]), Y(p[col])) for p in pts))
    for p in pts:
        s.append('<circle cx="%.1f" cy="%.1f" r="3" fill="#c33"/>' % (X(p[0]), Y(p[col])))
    if peer:
        s.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#36c" stroke-dasharray="6,4"/>' %
                 (L, Y(float(peer)), W - R_, Y(float(peer))))
        s.append('<text x="%d" y="%.1f" font-size="10" fill="#36c" text-anchor="end">llama.cpp</text>' %
                 (W - R_, Y(float(peer)) - 4))
    return s
h = (H - T_ - B_ - 40) // 2
body = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (W, H),
        '<rect width="100%" height="100%" fill="white"/>',
        '<text x="%d" y="18" font-size="13">kiln after a search of B seconds: %s</text>' % (L, title)]
body += panel(1, lpp, T_, h, "pp512")
body += panel(2, ltg, T_ + h + 40, h, "tg128")
body.append('<text x="%d" y="%d" font-size="11" text-anchor="middle">search budget (s)</text>' % ((W + L) // 2, H - 8))
body.append('</svg>')
open(out, "w").write("\n".join(body) + "\n")
PY
done
cat "$table"
echo "plots: $OUT/tune_curve-*.svg"
