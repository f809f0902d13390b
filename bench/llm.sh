#!/bin/sh
# bench/llm.sh — kiln and llama.cpp side by side on the same GGUF files.
#
# For each model (the default gemma-3-270m q4_k_m and kiln-written random
# Llama-1B-shaped q8_0 / q4_0 / q4_k, bench/make_models.py) and each thread
# count, runs llama.cpp's llama-bench (weights read into memory: -lm none, the
# successor of -mmp 0) and `kiln bench` with the same -p/-n/-t/-r, the two
# sides interleaved (which side goes first alternates from cell to cell and
# round to round), and reports medians over every timed sample of every round:
# absolute times drift by 15-30% on a shared machine, ratios of interleaved
# medians much less (DESIGN.md 10).
#
# Beside the ratio kiln/llama.cpp, every cell is put against this machine's
# measured peaks (`kiln device --json`, measured before every cell; medians):
#   tg: bytes read per token (every weight the token touches, the output head
#       included, plus the f16 KV cache rows read at the mean position) x t/s
#       = achieved GB/s, over the measured read bandwidth at that thread count:
#       from DRAM when the bytes per token exceed the last-level cache, else
#       from cache (the "peak" column says which);
#   pp: operations per prompt token (2 per multiply-add of every block
#       matmul, the attention products at the mean causal length, the output
#       head once per prompt) x t/s = achieved GOP/s, over the fastest int8
#       unit's peak (AMX tdpbssd where the CPU has it, else the int8 dot
#       product; block-quantized weights) or the fp32 FMA peak (f16/f32
#       weights), x threads.
# A share above 100% is marked "!" and a note under the table says why.
#
# usage: sh bench/llm.sh [--quick] [--big] [--json] [-p 512] [-n 128] [-d 0] [-r 5] [-t 1,2]
#                        [--rounds K] [--models A.gguf,B.gguf] [--no-random]
#                        [--no-default] [--only kiln|llama] [--out DIR]
#   --tuned      kiln with the user's tuning DB (e.g. after a long `kiln tune`);
#                by default kiln is measured as a user gets it: a fresh tuning
#                DB (in the --out folder), so each model and thread count gets
#                kiln's own first-run search (30 s, or $KILN_TUNE) inside its
#                first `kiln bench`, before anything is timed
#   --quick      smoke run: -p 64 -n 16 -r 2
#   --big        the long run: instead of the default set, the random Llama-8B-shaped
#                q8_0 (7.56 GB) and q4_k (4.0 GB) models (make_models.py --shape 8b,
#                written once into models/bench: about 10 minutes and 11.6 GB of disk
#                on a 2-core machine, and as much free memory as the larger file);
#                -r 2 unless -r is given. On 2 cores a q8_0 cell takes minutes.
#   -d D[,D..]   depth: each test runs after D tokens already in the KV cache
#                (llama-bench's -d and kiln bench's -d); rows "pp512@d4000"
#   --only SIDE  run one side only (the other's columns stay empty; exit 0)
#   --rounds K   repeat the whole interleaved sweep K times (default 1)
#   --models     benchmark these files instead of the default set
#   --out DIR    keep the raw JSON of every run there (default build/bench-llm)
#   --report DIR print the table (or --json) again from the raw runs in DIR
# Environment: KILN (default build/kiln), LLAMA_BENCH (default
# bench/.peers/llama.cpp/bin/llama-bench), KILN_LIB (libkiln.so for the GGUF
# reader the report uses), RUN_TIMEOUT (seconds per run, default 3600).
# Exit status: 0 when every cell ran on both sides, 1 when some run failed
# (the table still prints, with the failure), 2 on usage or setup errors.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

BIG=0 R_SET=0
P=512 N=128 D=0 R=5 THREADS=1,2 ROUNDS=1 JSON=0 MODELS="" RANDOM_MODELS=1 DEFAULT_MODEL=1 ONLY="" REPORT="" TUNED=0
OUT="$here/build/bench-llm"
KILN=${KILN:-$here/build/kiln}
LLAMA_BENCH=${LLAMA_BENCH:-$here/bench/.peers/llama.cpp/bin/llama-bench}
RUN_TIMEOUT=${RUN_TIMEOUT:-3600}
DEFAULT="$here/models/gemma-3-270m-q4_k_m.gguf"

die() { echo "llm.sh: $*" >&2; exit 2; }
need_val() { [ $# -ge 2 ] || die "$1 needs a value"; }
usage() { sed -n '2,/^set -eu/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --quick) P=64 N=16 R=2 ;;
        --big) BIG=1 ;;
        --tuned) TUNED=1 ;;
        --json) JSON=1 ;;
        -p) need_val "$@"; P=$2; shift ;;
        -n) need_val "$@"; N=$2; shift ;;
        -d) need_val "$@"; D=$2; shift ;;
        -r) need_val "$@"; R=$2; R_SET=1; shift ;;
        -t) need_val "$@"; THREADS=$2; shift ;;
        --rounds) need_val "$@"; ROUNDS=$2; shift ;;
        --models) need_val "$@"; MODELS=$2; RANDOM_MODELS=0; DEFAULT_MODEL=0; shift ;;
        --no-random) RANDOM_MODELS=0 ;;
        --no-default) DEFAULT_MODEL=0 ;;
        --out) need_val "$@"; OUT=$2; shift ;;
        --report) need_val "$@"; REPORT=$2; shift ;;
        --only) need_val "$@"; ONLY=$2; shift
                case $ONLY in kiln|llama) ;; *) die "--only takes kiln or llama" ;; esac ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
    shift
done
for v in "$P" "$N" "$D" "$THREADS"; do
    case $v in ''|*[!0-9,]*) die "bad list '$v': want integers, comma-separated" ;; esac
done
for v in "$R" "$ROUNDS"; do
    case $v in ''|*[!0-9]*|0) die "bad count '$v': want an integer >= 1" ;; esac
done

# the report and the model writer read GGUF with numpy: the project's own
# Python environment (tools/pyenv.sh, as make test uses)
PY=$(sh "$here/tools/pyenv.sh") || die "tools/pyenv.sh could not make the Python environment (numpy, gguf)"

if [ -n "$REPORT" ]; then
    [ -f "$REPORT/models.txt" ] && [ -f "$REPORT/meta.txt" ] || die "$REPORT holds no finished llm.sh run"
    OUT=$REPORT
    THREADS=$(sed -n 's/^threads=//p' "$OUT/meta.txt")
    ONLY=$(sed -n 's/^only=//p' "$OUT/meta.txt")
    export KILN_LIB="${KILN_LIB:-$here/build/libkiln.so}"
fi

# ---- the two sides, and what the report needs
if [ -z "$REPORT" ]; then
# kiln is needed even with --only llama: `kiln device` gives the peaks
[ -x "$KILN" ] || die "kiln is missing at $KILN: build it with 'make' (or set KILN)"
if [ "$ONLY" != llama ] && ! "$KILN" bench --help >/dev/null 2>&1; then
    die "'$KILN bench' does not work yet (kiln bench --help failed): build a kiln with the bench command"
fi
[ "$ONLY" = kiln ] || [ -x "$LLAMA_BENCH" ] || die "llama.cpp's llama-bench is missing at $LLAMA_BENCH: run 'sh bench/install_llamacpp.sh' (or set LLAMA_BENCH)"
command -v python3 >/dev/null 2>&1 || die "python3 is required for the report"
lib=${KILN_LIB:-$here/build/libkiln.so}
[ -f "$lib" ] || die "the report reads GGUF files with kiln's reader: $lib is missing (make builds it; or set KILN_LIB)"
export KILN_LIB="$lib"
# llama-bench took -mmp 0 until it became --load-mode; read the file into memory either way
lb_load="-mmp 0"
if [ "$ONLY" != kiln ] && "$LLAMA_BENCH" --help 2>&1 | grep -q -- '--load-mode'; then lb_load="-lm none"; fi
if command -v timeout >/dev/null 2>&1; then tmo="timeout $RUN_TIMEOUT"; else tmo=""; fi

list=""
if [ "$BIG" = 1 ] && [ -z "$MODELS" ]; then
    [ "$R_SET" = 1 ] || R=2
    echo "llm.sh: --big: the Llama-8B-shaped models (bench/make_models.py --shape 8b; the first time writes them)" >&2
    list=$("$PY" "$here/bench/make_models.py" --shape 8b --types q8_0,q4_k) ||
        die "bench/make_models.py --shape 8b could not write the 8B-shaped models"
elif [ -n "$MODELS" ]; then
    list=$(echo "$MODELS" | tr ',' ' ')
else
    if [ "$DEFAULT_MODEL" = 1 ]; then
        [ -f "$DEFAULT" ] || die "the default model is missing at $DEFAULT: run 'sh tools/fetch_model.sh' (or pass --no-default)"
        list="$DEFAULT"
    fi
    if [ "$RANDOM_MODELS" = 1 ]; then
        gen=$("$PY" "$here/bench/make_models.py") || die "bench/make_models.py could not write the random models"
        list="$list $gen"
    fi
fi
[ -n "$list" ] || die "no models to benchmark"
for m in $list; do [ -f "$m" ] || die "no such model file: $m"; done

mkdir -p "$OUT"
rm -f "$OUT"/run-*.json "$OUT"/run-*.err "$OUT"/meta.txt
# The peaks: `kiln device` measures them afresh each time, and on a shared
# machine a measurement can come out low (other work) or high (a buffer still
# in the large L3); one before every cell, and the report takes the median.
ndev=0
measure_peaks() {
    ndev=$((ndev + 1))
    "$KILN" device --json >"$OUT/device-$ndev.json" 2>"$OUT/device.err" || die "'$KILN device --json' failed: $(cat "$OUT/device.err")"
}
rm -f "$OUT"/device-*.json
measure_peaks
{
    echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
    echo "kiln=$("$KILN" --version 2>/dev/null | head -n 1 | sed 's/^kiln //') $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$here" diff --quiet HEAD 2>/dev/null || echo '+dirty')"
    if [ -f "$here/bench/.peers/llama.cpp/VERSION" ]; then
        echo "llama.cpp=$(sed -n 's/^llama.cpp commit //p' "$here/bench/.peers/llama.cpp/VERSION") ($(sed -n 's/^llama-cpp-python /llama-cpp-python /p' "$here/bench/.peers/llama.cpp/VERSION"), $(grep -o 'AMX o[nf]*' "$here/bench/.peers/llama.cpp/VERSION" || echo 'AMX ?'))"
    else
        echo "llama.cpp=$("$LLAMA_BENCH" --version 2>&1 | head -n 1)"
    fi
    echo "threads=$THREADS"
    echo "only=$ONLY"
    if [ "$TUNED" = 1 ]; then kmode="kiln with the user's tuning DB (--tuned)"
    else kmode="kiln as a user gets it: a fresh tuning DB, its own first-run search per model and thread count"; fi
    echo "args=-p $P -n $N -d $D -r $R -t $THREADS, $ROUNDS round(s), llama-bench $lb_load${ONLY:+, only $ONLY}; $kmode"
} >"$OUT/meta.txt"

# kiln as a user gets it: its tuning DB starts empty, so the first kiln bench
# of each model and thread count searches (before it times anything)
if [ "$TUNED" != 1 ]; then
    export KILN_TUNEDB="$OUT/tune.db"
    rm -f "$KILN_TUNEDB" "$KILN_TUNEDB.lock" "$KILN_TUNEDB.damaged"
fi

# ---- the interleaved sweep: one file per (round, model, threads, side)
total=0
for m in $list; do for t in $(echo "$THREADS" | tr ',' ' '); do total=$((total + 1)); done; done
total=$((total * ROUNDS))
cell=0
round=1
while [ "$round" -le "$ROUNDS" ]; do
    mi=0
    for m in $list; do
        mi=$((mi + 1))
        for t in $(echo "$THREADS" | tr ',' ' '); do
            cell=$((cell + 1))
            tag="run-r$round-m$mi-t$t"
            if [ $(( (cell + round) % 2 )) -eq 0 ]; then sides="kiln llama"; else sides="llama kiln"; fi
            [ -z "$ONLY" ] || sides=$ONLY
            [ "$cell" -eq 1 ] || measure_peaks
            for side in $sides; do
                echo "llm.sh: [$cell/$total] $side $(basename "$m") -t $t (round $round)" >&2
                if [ "$side" = kiln ]; then
                    # shellcheck disable=SC2086
                    $tmo "$KILN" bench -m "$m" -p "$P" -n "$N" -d "$D" -t "$t" -r "$R" --json \
                        >"$OUT/$tag-kiln.json" 2>"$OUT/$tag-kiln.err" || echo "exit $?" >>"$OUT/$tag-kiln.err"
                else
                    # shellcheck disable=SC2086
                    $tmo "$LLAMA_BENCH" -m "$m" -p "$P" -n "$N" -d "$D" -t "$t" -r "$R" $lb_load -o json \
                        >"$OUT/$tag-llama.json" 2>"$OUT/$tag-llama.err" || echo "exit $?" >>"$OUT/$tag-llama.err"
                fi
            done
        done
    done
    round=$((round + 1))
done

echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')" >>"$OUT/meta.txt"
i=0
for m in $list; do i=$((i + 1)); echo "m$i $m"; done >"$OUT/models.txt"
fi

# ---- the report
exec "$PY" - "$OUT" "$JSON" "$THREADS" "$ONLY" <<'PY'
import glob, json, math, os, re, statistics, sys

out, as_json, threads = sys.argv[1], sys.argv[2] == "1", [int(t) for t in sys.argv[3].split(",")]
only = sys.argv[4]
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "py"))
import kiln_gguf as kg

def device_summary():
    """each peak as the median of this sweep's measurements: a shared machine
    measures some low (other work) and some high (a buffer left in cache)"""
    ds = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "device-*.json")))]
    if not ds:
        return {}, {}
    dev = dict(ds[-1])
    spread = {}
    for k in ("fp32_fma_gflops_1thread", "int8_dot_gops_1thread", "int8_peak_gops_1thread",
              "amx_int8_gops_1thread", "amx_bf16_gflops_1thread"):
        v = [d[k] for d in ds if isinstance(d.get(k), (int, float))]
        if v:
            dev[k], spread[k] = statistics.median(v), (min(v), max(v))
    for key in ("read_bandwidth_gbs", "read_bandwidth_cache_gbs"):
        bw = {}
        for t in {t for d in ds for t in (d.get(key) or {})}:
            v = [d[key][t] for d in ds if t in (d.get(key) or {})]
            bw[t], spread[key + "." + t] = statistics.median(v), (min(v), max(v))
        if bw:
            dev[key] = dict(sorted(bw.items(), key=lambda kv: int(kv[0])))
    return dev, spread


dev, dev_spread = device_summary()
meta = dict(l.rstrip("\n").split("=", 1) for l in open(os.path.join(out, "meta.txt")) if "=" in l)
models = [l.split(" ", 1) for l in open(os.path.join(out, "models.txt")).read().splitlines()]
BLOCK = {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "q8_k", "q2_k", "q3_k"}


def at_threads(table, t):
    """(value, threads it was measured at) of a per-thread-count table: t
    itself, else the closest fewer threads, else the fewest"""
    bw = {int(k): v for k, v in (table or {}).items()}
    if not bw:
        return None, None
    if t in bw:
        return bw[t], t
    below = [k for k in bw if k <= t]
    k = max(below) if below else min(bw)
    return bw[k], k


LLC = 1024 * ((dev.get("cache_kib") or {}).get("l3") or 0)  # bytes; 0 when unknown


def bandwidth(t, nbytes):
    """(GB/s, "DRAM" or "cache", spread key): the DRAM figure when the bytes
    read per token exceed the last-level cache (or it is unknown, or the
    device report has no cache figure), else the cache figure"""
    if LLC and nbytes <= LLC and dev.get("read_bandwidth_cache_gbs"):
        v, k = at_threads(dev["read_bandwidth_cache_gbs"], t)
        return v, "cache", "read_bandwidth_cache_gbs.%s" % k
    v, k = at_threads(dev.get("read_bandwidth_gbs"), t)
    return v, "DRAM", "read_bandwidth_gbs.%s" % k


def over_note(frac, achieved, kind, spread_key, nbytes=None):
    """why a share is above 100% (None when it is not)"""
    if not frac or frac <= 1.0:
        return None
    lo, hi = dev_spread.get(spread_key, (None, None))
    if hi is not None and achieved <= hi:
        return ("within the range of the %s probes (%.4g..%.4g): the peak is their median on a machine whose speed "
                "moves" % (kind, lo, hi))
    rng = " (%.4g..%.4g)" % (lo, hi) if hi is not None else ""
    if kind == "DRAM" and nbytes:
        return ("above every DRAM probe%s: %.0f MB per token is more than the %.0f MiB last-level cache, but the part "
                "of it that stays there between tokens is read at cache speed" % (rng, nbytes / 1e6, LLC / 2**20))
    if kind in ("DRAM", "cache"):
        return "above every %s probe%s: the probe reads slower than the kernels (a probe to fix)" % (kind, rng)
    return "above every %s probe%s: the probe runs slower than the kernels (a probe to fix)" % (kind, rng)


def model_costs(path):
    """bytes read per decoded token and operations per prompt token, from the file"""
    d = kg.dump(path)
    if "error" in d:
        raise RuntimeError("%s: %s" % (path, d["error"]))
    md = {m["key"]: m["value"] for m in d["metadata"]}
    arch = md["general.architecture"]
    g = lambda k, dflt=None: md.get(arch + "." + k, dflt)
    n_embd, n_layer, n_head = g("embedding_length"), g("block_count"), g("attention.head_count")
    n_kv = g("attention.head_count_kv", n_head)
    hk = g("attention.key_length", n_embd // n_head)
    hv = g("attention.value_length", n_embd // n_head)
    ts = {t["name"]: t for t in d["tensors"]}
    tied = "output.weight" not in ts
    emb = ts["token_embd.weight"]
    n_vocab = emb["shape"][0]
    wbytes = 0
    for name, t in ts.items():
        if name == "token_embd.weight" and not tied:
            wbytes += t["bytes"] // n_vocab  # one row looked up
        else:
            wbytes += t["bytes"]
    blk_macs = sum(math.prod(t["shape"]) for n, t in ts.items() if n.startswith("blk.") and len(t["shape"]) == 2)
    head = ts["token_embd.weight" if tied else "output.weight"]
    dtypes = {t["dtype"] for n, t in ts.items() if n.startswith("blk.") and len(t["shape"]) == 2}
    return dict(arch=arch, n_layer=n_layer, n_head=n_head, n_kv=n_kv, hk=hk, hv=hv, n_embd=n_embd,
                n_vocab=n_vocab, wbytes=wbytes, blk_macs=blk_macs, head_macs=math.prod(head["shape"]),
                quantized=bool(dtypes) and dtypes <= BLOCK, size=d["size"])


def tg_bytes(c, n_gen, depth=0):
    mean_pos = depth + (n_gen - 1) / 2 + 1  # rows of K and V read per step, on average
    return c["wbytes"] + c["n_layer"] * c["n_kv"] * (c["hk"] + c["hv"]) * 2 * mean_pos


def pp_ops(c, n_prompt, depth=0):
    mean_ctx = depth + (n_prompt + 1) / 2
    attn = c["n_layer"] * c["n_head"] * (c["hk"] + c["hv"]) * mean_ctx * 2
    return 2 * c["blk_macs"] + attn + 2 * c["head_macs"] / n_prompt


def load_runs(tag, side):
    """(records, error text) of one run's JSON"""
    p = os.path.join(out, "%s-%s.json" % (tag, side))
    errp = os.path.join(out, "%s-%s.err" % (tag, side))
    err = open(errp, errors="replace").read() if os.path.exists(errp) else ""
    try:
        recs = json.load(open(p))
        if not isinstance(recs, list):
            raise ValueError("not a JSON array")
        return recs, None if not re.search(r"^exit \d+", err, re.M) else err
    except (OSError, ValueError) as e:
        lines = [l for l in err.splitlines() if l.strip()]
        return [], (lines[-3:] and " | ".join(lines[-3:])) or str(e)


samples, errors = {}, {}
for f in sorted(glob.glob(os.path.join(out, "run-r*-m*-t*-*.json"))):
    m = re.match(r"(run-r\d+-(m\d+)-t(\d+))-(kiln|llama)\.json$", os.path.basename(f))
    if not m:
        continue
    tag, mid, t, side = m.group(1), m.group(2), int(m.group(3)), m.group(4)
    recs, err = load_runs(tag, side)
    if err and not recs:
        errors.setdefault((mid, t, side), err)
    for r in recs:
        if r.get("n_threads", t) != t:
            continue
        test = "pp%d" % r["n_prompt"] if r.get("n_prompt") else "tg%d" % r["n_gen"]
        if r.get("n_depth"):
            test += "@d%d" % r["n_depth"]
        samples.setdefault((mid, test, t, side), []).extend(r.get("samples_ts") or [r["avg_ts"]])

int8_dot = dev.get("int8_dot_gops_1thread")
fma = dev.get("fp32_fma_gflops_1thread")
# the fastest int8 unit (kiln device names it; an older report has the dot product only)
int8 = dev.get("int8_peak_gops_1thread") or int8_dot
int8_kind = dev.get("int8_peak_kind") or dev.get("int8_dot_kind") or "int8 dot"
int8_key = "int8_peak_gops_1thread" if dev.get("int8_peak_gops_1thread") else "int8_dot_gops_1thread"
notes = []


def short_kind(kind):
    """the peak column's name of a unit: int8 amx, int8 vnni, int8 dot, fp32 fma"""
    if kind.startswith("amx"):
        return "int8 amx"
    if "vnni" in kind:
        return "int8 vnni"
    return kind if kind == "fp32 fma" else "int8 dot"
rows, any_fail = [], bool(errors)
for mid, path in models:
    try:
        c = model_costs(path)
    except Exception as e:  # the report must still print the throughput
        c, any_fail = None, True
        errors.setdefault((mid, 0, "report"), str(e))
    split = lambda s: (int(s[2:].split("@d")[0]), int(s.split("@d")[1]) if "@d" in s else 0)
    tests = sorted({k[1] for k in samples if k[0] == mid}, key=lambda s: (s[:2] != "pp",) + split(s))
    for test in tests:
        for t in threads:
            row = dict(model=os.path.basename(path)[:-5] if path.endswith(".gguf") else os.path.basename(path),
                       file=path, test=test, threads=t)
            for side in ("kiln", "llama"):
                s = samples.get((mid, test, t, side), [])
                row[side + "_ts"] = statistics.median(s) if s else None
                row[side + "_n"] = len(s)
                row[side + "_spread"] = (max(s) - min(s)) / statistics.median(s) if len(s) > 1 else None
                if not s and side != {"kiln": "llama", "llama": "kiln"}.get(only):
                    any_fail = True
            k, l = row["kiln_ts"], row["llama_ts"]
            row["ratio"] = k / l if k and l else None
            n, depth = split(test)
            if c:
                if test.startswith("tg"):
                    b = tg_bytes(c, n, depth)
                    bw, kind, skey = bandwidth(t, b)
                    row.update(bytes_per_token=b, peak=bw, peak_unit="GB/s", peak_kind=kind, peak_label=kind)
                    for side in ("kiln", "llama"):
                        ts = row[side + "_ts"]
                        row[side + "_achieved"] = b * ts / 1e9 if ts else None
                        row[side + "_frac"] = b * ts / 1e9 / bw if ts and bw else None
                        row[side + "_over"] = over_note(row[side + "_frac"], row[side + "_achieved"], kind, skey, b)
                else:
                    ops = pp_ops(c, n, depth)
                    pk = (int8 if c["quantized"] else fma)
                    pk = pk * t if pk else None
                    kind = int8_kind if c["quantized"] else "fp32 fma"
                    skey = int8_key if c["quantized"] else "fp32_fma_gflops_1thread"
                    row.update(ops_per_token=ops, peak=pk, peak_unit="GOP/s", peak_kind=kind,
                               peak_label=short_kind(kind))
                    for side in ("kiln", "llama"):
                        ts = row[side + "_ts"]
                        row[side + "_achieved"] = ops * ts / 1e9 if ts else None
                        row[side + "_frac"] = ops * ts / 1e9 / pk if ts and pk else None
                        # the spread is per thread; the achieved figure is for t threads
                        row[side + "_over"] = over_note(row[side + "_frac"], (row[side + "_achieved"] or 0) / t, kind,
                                                        skey)
            rows.append(row)

err_list = [dict(model=dict(models).get(k[0], k[0]), threads=k[1], side=k[2], error=v.strip()[-400:])
            for k, v in sorted(errors.items())]
if as_json:
    json.dump(dict(meta=meta, device=dict(read_bandwidth_gbs=dev.get("read_bandwidth_gbs"),
                                          read_bandwidth_cache_gbs=dev.get("read_bandwidth_cache_gbs"),
                                          read_buffer_bytes=dev.get("read_buffer_bytes"),
                                          l3_bytes=LLC or None,
                                          measurements=len(glob.glob(os.path.join(out, "device-*.json"))),
                                          ranges=dev_spread,
                                          int8_dot_gops_1thread=int8_dot, int8_peak_gops_1thread=int8,
                                          int8_peak_kind=int8_kind, amx=dev.get("amx"),
                                          fp32_fma_gflops_1thread=fma,
                                          cpu=dev.get("cpu"), cores=dev.get("cores")),
                   rows=rows, errors=err_list), sys.stdout, indent=1)
    print()
else:
    f = lambda v, fmt: "-" if v is None else fmt % v
    pct = lambda v: "-" if v is None else "%.1f%%" % (100 * v)
    pct0 = lambda v: "-" if v is None else "%.0f%%" % (100 * v)
    print("kiln %s | llama.cpp %s" % (meta.get("kiln", "?"), meta.get("llama.cpp", "?")))
    print("%s | %s, %s cores, L3 %s | bandwidth DRAM %s, cache %s GB/s by threads | int8 %s GOP/s (%s), "
          "fp32 fma %s GFLOP/s per thread"
          % (meta.get("args", ""), dev.get("cpu", "?"), dev.get("cores", "?"),
             "%.0f MiB" % (LLC / 2**20) if LLC else "?",
             "/".join("%.1f" % v for v in dev.get("read_bandwidth_gbs", {}).values()),
             "/".join("%.1f" % v for v in (dev.get("read_bandwidth_cache_gbs") or {}).values()) or "-",
             f(int8, "%.1f"), int8_kind, f(fma, "%.1f")))
    print("load average %s at the start, %s at the end (%s cores); peaks: medians of %d measurements (%s)"
          % (meta.get("load_start", "?"), meta.get("load_end", "?"), dev.get("cores", "?"),
             len(glob.glob(os.path.join(out, "device-*.json"))),
             ", ".join("%s %.4g..%.4g" % (k.replace("read_bandwidth_gbs.", "bw t="), lo, hi)
                       for k, (lo, hi) in sorted(dev_spread.items()))))
    print("medians of all timed samples; spread = (max-min)/median; tg: achieved GB/s and share of the measured")
    print("read bandwidth from DRAM, or from cache when a token reads less than the L3 (column peak); pp: achieved")
    print("GOP/s and share of the fastest int8 unit's peak x threads (fp32 fma for float weights)")
    print()
    hdr = ("model", "test", "t", "kiln t/s", "llama.cpp t/s", "kiln/llama", "peak", "kiln GB/s|GOP/s", "kiln %peak",
           "llama GB/s|GOP/s", "llama %peak", "spread k/l")
    w = [max(28, max([len(r["model"]) for r in rows] + [0])), max([6] + [len(r["test"]) for r in rows]), 2, 10, 13, 10,
         max([5] + [len(r.get("peak_label") or "") for r in rows]), 15, 10, 16, 11, 11]
    line = lambda cells: "| " + " | ".join(("%-*s" if i < 2 else "%*s") % (w[i], c) for i, c in enumerate(cells)) + " |"
    print(line(hdr))
    print("|" + "|".join("-" * (x + 2) for x in w) + "|")
    def share(r, side):
        """the share, marked '!' with a numbered note when above 100%"""
        v = pct(r.get(side + "_frac"))
        why = r.get(side + "_over")
        if why:
            notes.append("%s %s -t %d %s %s%%: %s" % (r["model"], r["test"], r["threads"], side,
                                                     v.rstrip("%"), why))
            v += "!"
        return v
    for r in rows:
        print(line((r["model"], r["test"], r["threads"], f(r["kiln_ts"], "%.2f"), f(r["llama_ts"], "%.2f"),
                    f(r["ratio"], "%.2fx"), r.get("peak_label") or "-", f(r.get("kiln_achieved"), "%.1f"),
                    share(r, "kiln"), f(r.get("llama_achieved"), "%.1f"), share(r, "llama"),
                    "%s/%s" % (pct0(r["kiln_spread"]), pct0(r["llama_spread"])))))
    print()
    for n in notes:
        print("! " + n)
    if notes:
        print()
    for mid, path in models:
        try:
            c = model_costs(path)
            print("%s: %s, %d layers, %.0f MB file; tg reads %.1f MB/token; pp %.2f GOP/token"
                  % (os.path.basename(path), c["arch"], c["n_layer"], c["size"] / 1e6, c["wbytes"] / 1e6,
                     2 * c["blk_macs"] / 1e9))
        except Exception:
            pass
    for e in err_list:
        print("FAILED %s -t %s %s: %s" % (os.path.basename(e["model"]), e["threads"], e["side"], e["error"]))
    print("raw runs: %s" % out)
sys.exit(1 if any_fail else 0)
PY
