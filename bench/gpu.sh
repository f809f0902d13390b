#!/usr/bin/env bash
# bench/gpu.sh — kiln's GPU check, one script for a machine with one CUDA GPU
# (budget: 6-10 minutes on an H200; every step has its own time limit and the
# script says what it skipped):
#
#   1. build; `kiln device` (the CUDA device and its fingerprint)
#   2. the op and nn suites on the device vs the reference interpreter
#      (tests/py/test_backend_opencl.py with KILN_TEST_GPU_BACKEND=cuda,
#      cases split over the cores because NVRTC compiles one program per case)
#   3. the random-graph fuzz on the device (test_compile_fuzz, KILN_BACKEND)
#   4. tiny models through the KV cache, greedy tokens equal the interpreter's
#   5. bf16 GEMM (4096^3) TFLOP/s against the device's bf16 tensor peak, with
#      the tensor-core contraction form (CUDA: KILN_GPU_CONTRACT="form=mma
#      arith=bf16") and with the default tiled form
#   6. prefill and generation tokens/s (`kiln bench`) on the default model
#      and on a random Llama-1B-shaped q8_0 model (bench/make_models.py)
#
# The device machine has no network: the default model must already be in
# models/ or shared/ (tools/fetch_model.sh's file name); the 1B model is
# generated locally. Environment: BUILD (default build), KILN_GPU_BACKEND
# (default cuda; "opencl" runs the same steps on an OpenCL device, which is
# how the script itself is checked on machines without a GPU), GPU_QUICK=1
# (small sizes, for that check).
# The tests' reference for quantised formats is the Python `gguf` package; a
# device machine without network lacks it, so fetch it here and carry it:
#   pip install --target build-pydeps --no-deps gguf pyyaml tqdm requests
# (build-pydeps/ is put on PYTHONPATH when present).
# Ends with one summary line; exit status 1 when a correctness step failed.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
BUILD=${BUILD:-build}
BE=${KILN_GPU_BACKEND:-cuda}
QUICK=${GPU_QUICK:-0}
NPROC=$(nproc 2>/dev/null || echo 2)
JOBS=$((NPROC > 16 ? 16 : NPROC))
KILN="$here/$BUILD/kiln"
T0=$(date +%s)
fails=0
log() { printf '== [%3ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/kiln-gpu-cache-$(id -u)}
export KILN_CHECK_EGRAPH=0
[ -d "$here/build-pydeps" ] && export PYTHONPATH="$here/build-pydeps${PYTHONPATH:+:$PYTHONPATH}"
python3 -c 'import gguf' 2>/dev/null || echo "gpu.sh: the Python gguf package is missing: the cast and model checks will fail (see the header for build-pydeps)"

# ---- 1. build, device ---------------------------------------------------------
log "build ($BUILD)"
if ! make -s -j"$NPROC" BUILD="$BUILD" all "$BUILD/tests/test_compile_fuzz" "$BUILD/tests/test_opencl" >/tmp/kiln-gpu-build.log 2>&1; then
    tail -20 /tmp/kiln-gpu-build.log
    echo "gpu.sh: the build failed"
    exit 1
fi
log "kiln device ($BE part)"
"$KILN" device --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)["gpu"][sys.argv[1]]
for x in d["devices"]:
    print("  [%d] %s" % (x["index"], x.get("fingerprint") or x.get("error")))
if not d["devices"]:
    print("  none: " + d.get("note", "?"))
    sys.exit(1)
' "$BE" || { echo "gpu.sh: no $BE device; nothing to check"; exit 1; }
DEVTXT=$("$KILN" device 2>/dev/null | sed -n "/^backend $BE:/,/^backend /p")
echo "$DEVTXT" | sed -n '3,6p'

# ---- 2-4. correctness on the device ---------------------------------------------
step() { # name, time limit, command...
    local name=$1 limit=$2
    shift 2
    local out=/tmp/kiln-gpu-$name.log
    log "$name (limit ${limit}s)"
    timeout "$limit" "$@" >"$out" 2>&1
    local rc=$?
    local p f
    p=$(grep -c '^PASS ' "$out")
    f=$(grep -c '^FAIL ' "$out")
    grep '^FAIL ' "$out" | head -10 | cut -c1-300
    grep '^SKIP ' "$out" | head -3
    if [ "$rc" -eq 124 ]; then echo "   $name: TIMED OUT after ${limit}s ($p passed so far)"; f=$((f + 1)); fi
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "   $name: exit status $rc"; tail -5 "$out"; f=1; fi
    echo "   $name: $p passed, $f failed"
    [ "$f" -eq 0 ] || fails=$((fails + 1))
}
step ops_on_device 150 env KILN_TEST_GPU_BACKEND="$BE" KILN_TEST_JOBS="$JOBS" python3 tests/py/test_backend_opencl.py
# the fuzz compares the scalar path bit-exactly; SIN/EXP2/LOG2 on a device are
# correctly rounded where libm's f32 functions are within 0.56 ulp, so a few
# 1-ulp differences are expected there (see emit_gpu.h)
step fuzz_on_device 60 env KILN_BACKEND="$BE" KILN_FUZZ_GRAPHS=100 "$BUILD/tests/test_compile_fuzz"
# (on CUDA every case compiles its programs through NVRTC: the 8 cases took longer than
# 120 s on an H200, the bench case the last)
step models_on_device 300 env KILN_TEST_GPU_BACKEND="$BE" python3 tests/py/test_backend_opencl_models.py
# the contraction kernels: tile schedules, and on CUDA the tensor-core forms
step contract_on_device 60 python3 tests/py/test_gpu_contract.py

# ---- 5. bf16 GEMM -------------------------------------------------------------
N=4096
[ "$QUICK" = 1 ] && N=256
SCHEDS=("form=tile")
[ "$BE" = cuda ] && SCHEDS=("form=mma arith=bf16" "form=tile")
for SCHED in "${SCHEDS[@]}"; do
log "bf16 GEMM ${N}^3 on $BE, contractions: $SCHED"
GEMM=$(KILN_GPU_CONTRACT="$SCHED" KILN_GPU_RESIDENT=1 timeout 90 python3 - "$BE" "$N" <<'PY'
import sys, time
import numpy as np
sys.path.insert(0, "tests/py")
import kiln_ctypes as K
be, n = sys.argv[1], int(sys.argv[2])
g = K.Graph()
# c = a b^T: a f32 (the activations; the kernel rounds them to bf16 in
# shared memory), b a bf16 (n, k) weight, c f32 (a contraction's output is
# f32 and its A operand an f32 buffer; other dtypes are the generic reduction)
a = g.input("a", K.F32, "%d,%d" % (n, n))
b = g.input("b", K.BF16, "%d,%d" % (n, n))
g.output(g.linear(a, g.cast(b, K.F32)), "c")
rng = np.random.default_rng(0)
A = rng.standard_normal((n, n)).astype(np.float32)
B = rng.standard_normal((n, n)).astype(np.float32)
g.bind("a", A)
g.bind("b", K.to_storage(B, K.BF16), K.BF16)
p = g.compile(backend=be)
p.run()  # uploads the inputs (then resident), builds the kernels
c = g.result("c").astype(np.float64)
Ar = A.astype(np.float64)
Br = K.from_storage(K.to_storage(B, K.BF16), K.BF16).astype(np.float64)
rows = rng.choice(n, 8, replace=False)
want = Ar[rows] @ Br.T
err = np.max(np.abs(c[rows] - want)) / np.max(np.abs(want))
best = 1e30
for _ in range(3 if n >= 2048 else 10):
    t = time.perf_counter()
    p.run()  # includes downloading the n*n f32 result
    best = min(best, time.perf_counter() - t)
p.free()
print("%.6f %.3e" % (2.0 * n ** 3 / best / 1e12, err))
PY
)
if [ -z "$GEMM" ]; then
    echo "   GEMM: failed or timed out"
    fails=$((fails + 1))
else
    set -- $GEMM
    tflops=$1 relerr=$2
    # bf16 dense tensor-core FLOP per SM per clock by architecture (A100:
    # 108 SMs x 1.41 GHz x 2048 = 312 TFLOP/s; H100/H200: 132 x 1.83 GHz x 4096 = 989)
    arch=$(echo "$DEVTXT" | sed -n 's/.*arch=sm_\([0-9]*\).*/\1/p' | head -1)
    sms=$(echo "$DEVTXT" | sed -n 's/.*;sms=\([0-9]*\).*/\1/p' | head -1)
    mhz=$(echo "$DEVTXT" | sed -n 's/.* SMs at \([0-9]*\) MHz.*/\1/p' | head -1)
    case "$arch" in
        80) per=2048 ;; 86|87|89) per=512 ;; 90|100|120) per=4096 ;; *) per=0 ;;
    esac
    if [ -n "$sms" ] && [ -n "$mhz" ] && [ "$per" -gt 0 ]; then
        peak=$(python3 -c "print('%.1f' % ($sms * $mhz * 1e6 * $per / 1e12))")
        pct=$(python3 -c "print('%.2f' % (100 * $tflops / $peak))")
        echo "   bf16 GEMM ${N}^3 ($SCHED): $tflops TFLOP/s = ${pct}% of the bf16 tensor peak $peak TFLOP/s (sm_$arch, $sms SMs at $mhz MHz); max rel. error $relerr"
    else
        echo "   bf16 GEMM ${N}^3 ($SCHED): $tflops TFLOP/s (no peak known for this device); max rel. error $relerr"
    fi
    python3 -c "import sys; sys.exit(0 if float('$relerr') < 2e-2 else 1)" || { echo "   GEMM result is wrong"; fails=$((fails + 1)); }
fi
done

# ---- 6. tokens/s ------------------------------------------------------------------
PP=512 TG=128 REPS=2
[ "$QUICK" = 1 ] && PP=16 TG=8 REPS=1
bench_model() { # label, path
    log "kiln bench --backend $BE on $1 (pp$PP, tg$TG)"
    # the first compile of a 1B model through NVRTC took 99 s on an H200 host
    timeout 300 "$KILN" bench --backend "$BE" -m "$2" -p "$PP" -n "$TG" -r "$REPS" -t 1 --json >/tmp/kiln-gpu-bench.json 2>/tmp/kiln-gpu-bench.err
    local rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "   $1: kiln bench failed (exit $rc): $(tail -c 300 /tmp/kiln-gpu-bench.err)"
        return
    fi
    python3 - "$1" <<'PY'
import json, sys
recs = json.load(open("/tmp/kiln-gpu-bench.json"))
print("   %s: " % sys.argv[1] + ", ".join("%s %.1f tokens/s" % (r["test"], r["avg_ts"]) for r in recs))
PY
}
DEFAULT=""
for m in models/gemma-3-270m-q4_k_m.gguf shared/gemma-3-270m-q4_k_m.gguf ../shared/gemma-3-270m-q4_k_m.gguf \
         /work/shared/gemma-3-270m-q4_k_m.gguf; do
    if [ -s "$m" ]; then DEFAULT=$m; break; fi
done
if [ -n "$DEFAULT" ]; then bench_model "default model ($(basename "$DEFAULT"))" "$DEFAULT"
else echo "   default model: not found in models/ or shared/ (no network here to fetch it): skipped"; fi
M1B=/tmp/kiln-gpu-models/llama1b-random-q8_0.gguf
if [ ! -s "$M1B" ]; then
    log "writing a random Llama-1B-shaped q8_0 model (bench/make_models.py)"
    layers=()
    [ "$QUICK" = 1 ] && layers=(--layers 2)
    timeout 120 python3 bench/make_models.py --out /tmp/kiln-gpu-models --types q8_0 "${layers[@]}" >/tmp/kiln-gpu-models.log 2>&1
    M1B=$(ls /tmp/kiln-gpu-models/*q8_0*.gguf 2>/dev/null | head -1)
fi
M1B=$(ls /tmp/kiln-gpu-models/*q8_0*.gguf 2>/dev/null | head -1)
if [ -n "$M1B" ] && [ -s "$M1B" ]; then bench_model "Llama-1B-shaped q8_0" "$M1B"
else echo "   Llama-1B-shaped model: could not be written ($(tail -c 200 /tmp/kiln-gpu-models.log)): skipped"; fi

log "done"
echo "gpu.sh: $fails correctness step(s) failed on $BE"
[ "$fails" -eq 0 ]
