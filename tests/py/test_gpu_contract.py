"""test_gpu_contract.py — the GPU backends' contraction kernels (emit_gpu.h
cg_gpu_cform): the tiled SIMT form on every GPU backend with a device (in CI
the PoCL CPU device), and the tensor-core mma forms on a CUDA device of
sm_80 or later (skipped with a message without one; their code is compiled
with NVRTC by test_backend_cuda.py for every contraction of the op suites).

Each case builds a contraction — matmul, batched matmul through 3-D views,
matrix-vector, a linear layer over a q8_0 weight written here — under a
schedule chosen with KILN_GPU_CONTRACT, runs it on the device and compares
with numpy in float64. The tile form sums f32 products in f32, so the
tolerance is 2e-6 * sqrt(K) of the output's largest magnitude; the mma forms
round the operands (bf16 8 bits of mantissa, f16 11, int8 per 32), so theirs
are looser. Bad schedule text and form=mma on OpenCL must be refused with a
clear error at compile time.

The search (gpu_tune.c): compiled with a search budget, the first run
measures the candidates against the generic kernel's result and stores the
winner in the tuning DB (a private $KILN_TUNEDB here) under the device's
fingerprint; a second compile uses the record with zero measurements; a
candidate made wrong on purpose (KILN_TUNE_INJECT_WRONG) is counted as
rejected and never wins; a damaged record is skipped, not trusted.
"""
import contextlib
import ctypes
import os
import re
import sys
import tempfile

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as K  # noqa: E402

os.environ.setdefault("XDG_CACHE_HOME", "/tmp/kiln-test-cache-%d" % os.getuid())
os.environ.setdefault("KILN_CHECK_EGRAPH", "0")
os.environ["KILN_TEST_NOFORK"] = "1"  # OpenCL drivers keep threads: no forked cases

S = K.Suite("test_gpu_contract")
RNG = np.random.default_rng(7)


def probe(backend):
    """None when backend can compile and run a graph, else why not"""
    if backend == "opencl" and os.environ.get("KILN_TEST_OPENCL") == "0":
        return "KILN_TEST_OPENCL=0"
    g = K.Graph()
    x = g.input("x", K.F32, "3")
    g.output(g.add(x, x), "y")
    g.bind("x", np.array([1, 2, 3], np.float32))
    try:
        p = g.compile(backend=backend)
    except K.KilnError as e:
        return str(e)
    try:
        p.run()
        ok = np.array_equal(g.result("y"), np.array([2, 4, 6], np.float32))
    finally:
        p.free()
    return None if ok else "the probe graph computed a wrong result"


def q8_0_bytes(w):
    """(n, k) f32, k a multiple of 32 -> (q8_0 storage bytes, the values they hold)"""
    n, k = w.shape
    blocks = w.reshape(n, k // 32, 32).astype(np.float64)
    amax = np.max(np.abs(blocks), axis=2, keepdims=True)
    d = (amax / 127.0).astype(np.float16)
    df = d.astype(np.float64)
    q = np.where(df > 0, np.rint(blocks / np.where(df > 0, df, 1)), 0).clip(-127, 127).astype(np.int8)
    raw = np.concatenate([d.view(np.uint8).reshape(n, k // 32, 2), q.view(np.uint8)], axis=2)
    return np.ascontiguousarray(raw.reshape(n, k // 32 * 34)), (q.astype(np.float64) * df).reshape(n, k)


@contextlib.contextmanager
def env(**values):
    """set (or, with None, unset) environment variables for the block, then
    put back what was there"""
    old = {v: os.environ.get(v) for v in values}
    try:
        for v, val in values.items():
            if val is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = val
        yield
    finally:
        for v, val in old.items():
            if val is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = val


def with_schedule(sched, fn):
    with env(KILN_GPU_CONTRACT=sched):
        return fn()


def run_on(backend, g, name):
    p = g.compile(backend=backend)
    try:
        p.run()
        return g.result(name).astype(np.float64)
    finally:
        p.free()


def check(got, want, k, rel):
    scale = float(np.max(np.abs(want))) or 1.0
    tol = rel * max(1.0, np.sqrt(k)) * scale
    err = float(np.max(np.abs(got - want)))
    if not err <= tol:
        raise AssertionError("max error %.3g > tolerance %.3g (scale %.3g)" % (err, tol, scale))


def case_matmul(backend, sched, rel, m, k, n):
    def go():
        g = K.Graph()
        a = g.input("a", K.F32, "%d,%d" % (m, k))
        b = g.input("b", K.F32, "%d,%d" % (k, n))
        g.output(g.matmul(a, b), "y")
        A = RNG.standard_normal((m, k)).astype(np.float32)
        B = RNG.standard_normal((k, n)).astype(np.float32)
        g.bind("a", A)
        g.bind("b", B)
        check(run_on(backend, g, "y"), A.astype(np.float64) @ B.astype(np.float64), k, rel)
    with_schedule(sched, go)


def case_batched(backend, sched, rel, bt, m, k, n):
    """(bt, m, k) x (bt, k, n): the batch loop beside m and n"""
    def go():
        g = K.Graph()
        a = g.input("a", K.F32, "%d,%d,%d" % (bt, m, k))
        b = g.input("b", K.F32, "%d,%d,%d" % (bt, k, n))
        g.output(g.matmul(a, b), "y")
        A = RNG.standard_normal((bt, m, k)).astype(np.float32)
        B = RNG.standard_normal((bt, k, n)).astype(np.float32)
        g.bind("a", A)
        g.bind("b", B)
        check(run_on(backend, g, "y"), np.matmul(A.astype(np.float64), B.astype(np.float64)), k, rel)
    with_schedule(sched, go)


def case_linear_q8_0(backend, sched, rel, m, k, n):
    """x (m, k) times a q8_0 weight (n, k) transposed: B is a block format
    dequantised on its way into the tiles"""
    def go():
        g = K.Graph()
        x = g.input("x", K.F32, "%d,%d" % (m, k))
        w = g.input("w", K.Q8_0, "%d,%d" % (n, k))
        g.output(g.linear(x, w), "y")
        X = RNG.standard_normal((m, k)).astype(np.float32)
        raw, wv = q8_0_bytes(RNG.standard_normal((n, k)).astype(np.float32))
        g.bind("x", X)
        g.bind_raw("w", raw, raw.nbytes)
        check(run_on(backend, g, "y"), X.astype(np.float64) @ wv.T, k, rel)
    with_schedule(sched, go)


def case_refused(backend, sched, needle):
    def go():
        g = K.Graph()
        a = g.input("a", K.F32, "4,8")
        b = g.input("b", K.F32, "8,4")
        g.output(g.matmul(a, b), "y")
        try:
            g.compile(backend=backend).free()
        except K.KilnError as e:
            if needle not in str(e):
                raise AssertionError("refused, but the message does not say %r: %s" % (needle, e))
            return
        raise AssertionError("KILN_GPU_CONTRACT=%r was accepted" % sched)
    with_schedule(sched, go)


_raw = ctypes.CDLL(K.LIB_PATH)
_raw.kiln_program_measurements.restype = ctypes.c_int
_raw.kiln_program_measurements.argtypes = [ctypes.c_void_p]


def db_records(path):
    if not os.path.exists(path):
        return []
    return [ln for ln in open(path, encoding="utf-8", errors="replace").read().splitlines() if ln.startswith("fp=")]


def searched_linear(backend, budget, m=96, k=128, n=80):
    """x (m, k) times w (n, k)^T compiled with a search budget; returns the
    candidates measured, after checking the result"""
    g = K.Graph()
    x = g.input("x", K.F32, "%d,%d" % (m, k))
    w = g.input("w", K.F32, "%d,%d" % (n, k))
    g.output(g.linear(x, w), "y")
    X = RNG.standard_normal((m, k)).astype(np.float32)
    W = RNG.standard_normal((n, k)).astype(np.float32)
    g.bind("x", X)
    g.bind("w", W)
    p = g.compile(backend=backend, search_budget=budget)
    try:
        p.run()
        want = X.astype(np.float64) @ W.T.astype(np.float64)
        got = g.result("y").astype(np.float64)
        # the winner may be an mma form on CUDA: the loosest of the tolerances
        check(got, want, k, 2e-2 if backend == "cuda" else 2e-6)
        return _raw.kiln_program_measurements(p.ptr)
    finally:
        p.free()


def with_db(fn, inject=None):
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "tune.db")
        with env(KILN_TUNEDB=db, KILN_TUNE_INJECT_WRONG=inject, KILN_GPU_CONTRACT=None):
            fn(db)


def case_search_then_db(backend):
    def go(db):
        meas = searched_linear(backend, 30.0)
        if meas < 2:
            raise AssertionError("the search measured %d candidates" % meas)
        recs = db_records(db)
        if len(recs) != 1 or 'bucket="gpu,m>4,n=80,k=128,b=1"' not in recs[0] or 'sched="form=' not in recs[0]:
            raise AssertionError("tuning DB after the search: %r" % recs)
        if not re.search(r"tried=%d " % meas, recs[0]):
            raise AssertionError("the record's tried count is not the %d measured: %s" % (meas, recs[0]))
        again = searched_linear(backend, 30.0)
        if again != 0:
            raise AssertionError("the second compile measured %d candidates despite the DB record" % again)
    with_db(go)


def case_search_matvec(backend):
    """M = 1 (decode): its own DB bucket, every candidate checked"""
    def go(db):
        meas = searched_linear(backend, 30.0, m=1, k=256, n=300)
        recs = db_records(db)
        if meas < 2 or len(recs) != 1 or 'bucket="gpu,m<=4,n=300,k=256,b=1"' not in recs[0]:
            raise AssertionError("matrix-vector search: %d measured, DB %r" % (meas, recs))
    with_db(go)


def case_wrong_candidate_rejected(backend):
    def go(db):
        searched_linear(backend, 30.0)
        recs = db_records(db)
        m = re.search(r"rejected=(\d+)", recs[0]) if recs else None
        if not m or int(m.group(1)) < 1:
            raise AssertionError("the injected wrong candidate was not rejected: %r" % recs)
        if 'sched="form=tile bm=64 bn=64 bk=16 tm=4 tn=4"' in recs[0]:
            raise AssertionError("the wrong candidate (the first, the default tile) won: %s" % recs[0])
    with_db(go, inject="1")


def case_damaged_record_skipped(backend):
    def go(db):
        searched_linear(backend, 30.0)
        text = open(db, encoding="utf-8").read()
        damaged = text.replace("sched=\"form=", "sched=\"forx=")
        if damaged == text:
            raise AssertionError("no record to damage: %r" % text)
        open(db, "w", encoding="utf-8").write(damaged)
        meas = searched_linear(backend, 0.0)  # no budget: default schedule, no crash
        if meas != 0:
            raise AssertionError("measured %d candidates without a budget" % meas)
    with_db(go)


TILES = [None, "form=tile bm=32 bn=16 bk=8 tm=2 tn=2", "form=tile bm=16 bn=64 bk=32 tm=1 tn=4",
         "form=tile bm=1 bn=256 bk=16 tm=1 tn=1", "form=tile bm=64 bn=64 bk=16 tm=4 tn=4 vw=4",
         "form=tile bm=32 bn=128 bk=8 tm=2 tn=8 vw=4", "form=generic"]
SHAPES = [(1, 64, 96), (7, 33, 70), (130, 100, 67)]


def tile_cases(backend):
    for sched in TILES:
        tag = (sched or "default").replace("form=", "").replace(" ", "_").replace("=", "")
        for (m, k, n) in SHAPES:
            S.case("%s_%s_matmul_%dx%dx%d" % (backend, tag, m, k, n), case_matmul, backend, sched, 2e-6, m, k, n)
        S.case("%s_%s_batched" % (backend, tag), case_batched, backend, sched, 2e-6, 3, 17, 40, 23)
        S.case("%s_%s_linear_q8_0" % (backend, tag), case_linear_q8_0, backend, sched, 2e-6, 5, 64, 48)
    S.case("%s_refuses_bad_schedule" % backend, case_refused, backend, "form=tile bm=99",
           "GPU contraction schedule")
    S.case("%s_refuses_unknown_key" % backend, case_refused, backend, "form=tile warp=4",
           "GPU contraction schedule")
    S.case("%s_refuses_vw_not_dividing_tn" % backend, case_refused, backend, "form=tile tm=4 tn=2 bn=32 vw=4",
           "GPU contraction schedule")
    S.case("%s_search_stores_then_db_is_used" % backend, case_search_then_db, backend)
    S.case("%s_search_rejects_wrong_candidate" % backend, case_wrong_candidate_rejected, backend)
    S.case("%s_search_matvec" % backend, case_search_matvec, backend)
    S.case("%s_search_survives_damaged_record" % backend, case_damaged_record_skipped, backend)


MMA = [("bf16", 1e-2), ("f16", 2e-3), ("i8", 2e-2)]


def mma_cases():
    for arith, rel in MMA:
        sched = "form=mma arith=" + arith
        for (m, k, n) in SHAPES + [(256, 512, 192)]:
            S.case("cuda_mma_%s_matmul_%dx%dx%d" % (arith, m, k, n), case_matmul, "cuda", sched, rel, m, k, n)
        S.case("cuda_mma_%s_batched" % arith, case_batched, "cuda", sched, rel, 3, 17, 40, 23)
        S.case("cuda_mma_%s_linear_q8_0" % arith, case_linear_q8_0, "cuda", sched, rel, 5, 64, 48)


def case_nvrtc_compiles(sched):
    """without a device: the CUDA program under a forced tile schedule is
    accepted by NVRTC for sm_80 and sm_90 (test_backend_cuda.py covers the
    default tile and the mma entry points of every contraction)"""
    with env(KILN_GPU_EMIT_ONLY="1", KILN_CUDA_ARCHS="sm_80,sm_90", KILN_GPU_CONTRACT=sched):
        g = K.Graph()
        x = g.input("x", K.F32, "seq,96")
        w = g.input("w", K.Q8_0, "80,96")
        g.output(g.linear(x, w), "y")
        g.compile(backend="cuda").free()


_raw.kiln_cuda_nvrtc_version.restype = ctypes.c_char_p
if _raw.kiln_cuda_nvrtc_version():
    for sched in ("form=tile bm=64 bn=64 bk=16 tm=4 tn=4 vw=4", "form=tile bm=1 bn=256 bk=16 tm=1 tn=1",
                  "form=tile bm=128 bn=128 bk=8 tm=8 tn=8 vw=4"):
        S.case("nvrtc_" + sched.replace("form=", "").replace(" ", "_").replace("=", ""), case_nvrtc_compiles, sched)
else:
    print("SKIP test_gpu_contract NVRTC checks: libnvrtc cannot be loaded")

ran = False
for be in ("opencl", "cuda"):
    why = probe(be)
    if why is not None:
        print("SKIP test_gpu_contract on %s: no usable device: %s" % (be, why.splitlines()[0][:200]))
        continue
    ran = True
    tile_cases(be)
    if be == "opencl":
        S.case("opencl_refuses_mma", case_refused, "opencl", "form=mma arith=bf16", "CUDA only")
    else:
        mma_cases()
if not ran:
    print("# test_gpu_contract: no GPU backend has a device here; nothing checked")
S.finish()
