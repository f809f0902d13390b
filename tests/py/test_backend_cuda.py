"""test_backend_cuda.py — the CUDA backend.

With a CUDA device: the whole op and nn suites run on it against the
reference interpreter (test_backend_opencl.py with KILN_TEST_GPU_BACKEND=cuda,
same comparison), and the tiny models through test_backend_opencl_models.py.

Without one (the usual CI machine), execution is skipped with a message, and
every kernel the op and nn suites compile is generated as CUDA C (kiln_compile
with backend "cuda" and KILN_GPU_EMIT_ONLY=1) and compiled with NVRTC for
sm_80 and sm_90; each case passes when all of its programs compile for both.
Programs are compiled in batches (each one renamed and wrapped in a namespace
of its own, so one NVRTC call checks many); a failing batch is split until
the failing programs are found. The tiny models of every architecture are
compiled the same way at load (KILN_CUDA_ARCHS makes the backend itself run
NVRTC). Without NVRTC the file prints a SKIP line and checks nothing.
KILN_TEST_CUDA=0 skips it on purpose. Under the sanitizers (KILN_ASAN, make
test-asan) only sm_90 is compiled: the CUDA is the same, NVRTC's time halves.
"""
import concurrent.futures
import contextlib
import ctypes
import io
import os
import runpy
import subprocess
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as K  # noqa: E402

# both architectures; the sanitizer run (tests/run.sh with KILN_ASAN) checks
# sm_90 only: the generated CUDA is the same, and NVRTC's own time is half
# of this file's
ARCHS = [b"sm_80", b"sm_90"]
if os.environ.get("KILN_ASAN"):
    ARCHS = [b"sm_90"]
if os.environ.get("KILN_TEST_CUDA") == "0":
    print("# test_backend_cuda: skipped (KILN_TEST_CUDA=0)")
    sys.exit(0)
os.environ.setdefault("XDG_CACHE_HOME", "/tmp/kiln-test-cache-%d" % os.getuid())
os.environ.setdefault("KILN_CHECK_EGRAPH", "0")

raw = ctypes.CDLL(K.LIB_PATH)
raw.kiln_program_source.restype = ctypes.c_char_p
raw.kiln_program_source.argtypes = [ctypes.c_void_p]
raw.kiln_cuda_nvrtc_version.restype = ctypes.c_char_p
raw.kiln_cuda_compile_check.restype = ctypes.c_int
raw.kiln_cuda_compile_check.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t),
                                      ctypes.c_char_p, ctypes.c_size_t]


def _device_probe():
    g = K.Graph()
    x = g.input("x", K.F32, "3")
    g.output(g.add(x, x), "y")
    try:
        g.compile(backend="cuda").free()
    except K.KilnError as e:
        return str(e)
    return None


why = _device_probe()
if why is None:
    print("# test_backend_cuda: a CUDA device is present: running the suites on it")
    env = dict(os.environ, KILN_TEST_GPU_BACKEND="cuda")
    rc = 0
    for f in ("test_backend_opencl.py", "test_backend_opencl_models.py"):
        rc |= subprocess.call([sys.executable, os.path.join(_HERE, f)], env=env)
    sys.exit(1 if rc else 0)

print("SKIP cuda execution tests: no CUDA device: %s" % why)
nvrtc = raw.kiln_cuda_nvrtc_version()
if not nvrtc:
    print("SKIP test_backend_cuda compile checks: NVRTC (libnvrtc.so) cannot be loaded")
    sys.exit(0)
print("# NVRTC %s: compiling the op suites' kernels for %s" % (nvrtc.decode(), ", ".join(a.decode() for a in ARCHS)))
os.environ["KILN_GPU_EMIT_ONLY"] = "1"
os.environ["KILN_TEST_NOFORK"] = "1"  # sources are collected in this process


def nvrtc_check(src, arch):
    err = ctypes.create_string_buffer(8192)
    n = ctypes.c_size_t(0)
    r = raw.kiln_cuda_compile_check(src, arch, ctypes.byref(n), err, len(err))
    return None if r == 0 and n.value > 0 else (err.value.decode(errors="replace") or "status %d" % r)


# ---- collect every program of the suites ----
sources = []  # (case, source bytes)
current = [None]
_reference_run = K.Graph.run
_case = K.Suite.case


def _collect(self):
    s = _reference_run(self)
    try:
        p = self.compile(backend="cuda")
    except K.KilnError as e:
        sources.append((current[0], None, str(e)))
        return s
    try:
        sources.append((current[0], raw.kiln_program_source(p.ptr), None))
    finally:
        p.free()
    return s


def _named_case(self, name, fn, *args, **kw):
    current[0] = name
    return _case(self, name, fn, *args, **kw)


K.Graph.run = _collect
K.Suite.case = _named_case
with contextlib.redirect_stdout(io.StringIO()):
    for suite_file in ("test_ops.py", "test_nn.py"):
        try:
            runpy.run_path(os.path.join(_HERE, suite_file), run_name="__main__")
        except SystemExit:
            pass
K.Graph.run = _reference_run
K.Suite.case = _case


def batch_source(items):
    parts = []
    for i, (_, src, _) in enumerate(items):
        body = src.decode().replace("kiln_k", "kiln_b%d_k" % i)
        parts.append("namespace kb%d {\n%s\n}\n" % (i, body))
    return "".join(parts).encode()


bad = {}  # case -> why


def check(items, arch):
    """NVRTC over items (all with a source) for arch; failing ones land in bad"""
    why = nvrtc_check(batch_source(items), arch)
    if why is None:
        return
    if len(items) == 1:
        bad.setdefault(items[0][0], "%s: %s" % (arch.decode(), why))
        return
    half = len(items) // 2
    check(items[:half], arch)
    check(items[half:], arch)


good = [x for x in sources if x[1] is not None]
for x in sources:
    if x[1] is None:
        bad.setdefault(x[0], "kiln_compile failed: %s" % x[2])
# NVRTC runs outside the GIL (ctypes releases it), so batches compile in parallel
B = 60
batches = [good[i:i + B] for i in range(0, len(good), B)]
# Under the sanitizers the emitter (kiln's code) runs on every case above, but
# NVRTC (not kiln's code, and the same CUDA as make test's run) checks only the
# first batch: the rest of its time bought nothing the plain suite does not
# check, and CI runs both suites in 30 minutes. The cases it skips pass on
# the emitted source's form alone and say so.
emit_only = set()
if os.environ.get("KILN_ASAN"):
    in_first = {c for c, _, _ in batches[0]} if batches else set()
    for items in batches[1:]:
        for c, src, _ in items:
            if c not in in_first:
                emit_only.add(c)
            if b"__global__" not in src:
                bad.setdefault(c, "the emitted CUDA has no __global__ kernel")
    batches = batches[:1]
tasks = [(items, arch) for items in batches for arch in ARCHS]
with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as ex:
    list(ex.map(lambda t: check(*t), tasks))

failed = 0
seen = []
for c, _, _ in sources:
    if c not in seen:
        seen.append(c)
for c in seen:
    n = sum(1 for x in sources if x[0] == c)
    if c in bad:
        print("FAIL cuda_compile_%s: %s" % (c, " ".join(bad[c].split())[:600]))
        failed += 1
    else:
        checked = "emitted; NVRTC checks it in make test" if c in emit_only else "compiled"
        print("PASS cuda_compile_%s (%d program%s %s)" % (c, n, "" if n == 1 else "s", checked))
if len(seen) < 100:
    print("FAIL cuda_compile_suite: only %d cases produced programs" % len(seen))
    failed += 1


# ---- the tiny models: the backend itself runs NVRTC at load ----
os.environ["KILN_CUDA_ARCHS"] = ",".join(a.decode() for a in ARCHS)
os.environ["KILN_BACKEND"] = "cuda"
import kiln_gguf as kg  # noqa: E402
import test_models as tm  # noqa: E402


def quant_dtypes(name, shape):
    if len(shape) == 1:
        return K.F32
    if shape[-1] % 256 == 0:
        return [K.Q4_K, K.Q6_K][sum(map(ord, name)) % 2]
    return [K.Q4_0, K.Q5_0, K.Q8_0][sum(map(ord, name)) % 3]


def model_compiles(arch, dtypes):
    path, _ = tm.model_file(arch, dtypes=dtypes, seed=13)
    m = kg.Model(path, compiled=True)
    try:
        if not m.compiled:
            raise AssertionError("the model did not compile")
        try:
            m.forward([1, 2], 0)
        except Exception as e:  # noqa: BLE001 - the emit-only program must refuse to run, clearly
            if "KILN_GPU_EMIT_ONLY" not in str(e):
                raise AssertionError("unexpected run error: %s" % e)
        else:
            raise AssertionError("an emit-only program ran")
    finally:
        m.free()


s = K.Suite("test_backend_cuda_models")
for arch in ("llama", "qwen2", "qwen3", "gemma3"):
    s.case("cuda_compile_model_%s" % arch, model_compiles, arch, tm.mixed_dtypes)
s.case("cuda_compile_model_llama_block_formats", model_compiles, "llama", quant_dtypes)
rc = 1 if failed else 0
try:
    s.finish()
except SystemExit as e:
    rc |= 1 if e.code else 0
sys.exit(rc)
