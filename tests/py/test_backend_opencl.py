"""test_backend_opencl.py — the core op and nn suites (test_ops.py,
test_nn.py) run again with every graph also compiled for the OpenCL backend
(kiln_compile with backend "opencl": OpenCL C through the ICD loader; in CI
the PoCL CPU device that .ci/run installs) and compared with the reference
interpreter on the same inputs.

The comparison is test_compiled.py's: integers and block formats bit-exactly,
floats within 1e-6 (f32) / 1e-3 (f16) / 8e-3 (bf16) relative plus the same
factor times the output's largest magnitude (the device's exp2/log2/sin are
within a few ulp of libm's). The device results are left in the graph, so
each suite's own numpy check then judges them too. Case names get an
"opencl_" prefix.

Cases are split across KILN_TEST_JOBS processes (default: the cores, at
most 8). Without an OpenCL driver (no libOpenCL, no platform) the file prints a SKIP
line saying why and checks nothing (no PASS lines). KILN_TEST_OPENCL=0 skips
it on purpose.
"""
import os
import runpy
import subprocess
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as K  # noqa: E402

BACKEND = os.environ.get("KILN_TEST_GPU_BACKEND", "opencl")

if os.environ.get("KILN_TEST_OPENCL") == "0":
    print("# test_backend_opencl: skipped (KILN_TEST_OPENCL=0)")
    sys.exit(0)

os.environ.setdefault("XDG_CACHE_HOME", "/tmp/kiln-test-cache-%d" % os.getuid())
os.environ.setdefault("KILN_CHECK_EGRAPH", "0")
# OpenCL drivers keep threads: a forked child of an initialised process hangs
# in its first OpenCL call, so "isolated" cases run in this process
os.environ["KILN_TEST_NOFORK"] = "1"


def _probe():
    """None when the backend can compile and run a graph, else why not"""
    g = K.Graph()
    x = g.input("x", K.F32, "3")
    g.output(g.add(x, x), "y")
    g.bind("x", np.array([1, 2, 3], np.float32))
    try:
        p = g.compile(backend=BACKEND)
    except K.KilnError as e:
        return str(e)
    try:
        p.run()
        got = g.result("y")
    finally:
        p.free()
    if not np.array_equal(got, np.array([2, 4, 6], np.float32)):
        return "the probe graph computed %r" % (got,)
    return None


# cases are split across KILN_TEST_JOBS processes (default: the cores, at
# most 8): building a program for the device is the slow part, and a
# process keeps only one core busy with it
shard = os.environ.get("KILN_TEST_SHARD")
if shard is None:
    jobs = int(os.environ.get("KILN_TEST_JOBS") or min(os.cpu_count() or 1, 8))
    if jobs > 1:
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__)], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=dict(os.environ, KILN_TEST_SHARD="%d/%d" % (i, jobs)))
                 for i in range(jobs)]
        rc = 0
        for p in procs:
            out, _ = p.communicate()
            sys.stdout.write(out.decode(errors="replace"))
            rc |= p.returncode
        sys.exit(1 if rc else 0)
    shard = "0/1"
SHARD, NSHARDS = (int(v) for v in shard.split("/"))

why = _probe()
if why is not None:
    print("SKIP test_backend_%s: no usable %s device: %s" % (BACKEND, BACKEND, why))
    sys.exit(0)

REL = {K.F32: 1e-6, K.F16: 1e-3, K.BF16: 8e-3}
_reference_run = K.Graph.run


def _compare(name, t, ref, got):
    if ref.shape != got.shape:
        raise AssertionError("%s output %s: shape %s, reference %s" % (BACKEND, name, got.shape, ref.shape))
    if t not in REL:
        if not np.array_equal(ref, got):
            i = tuple(int(v) for v in np.argwhere(ref != got)[0])
            raise AssertionError("%s output %s differs at %s: %r vs reference %r" % (BACKEND, name, i, got[i], ref[i]))
        return
    r = K.from_storage(ref, t).astype(np.float64)
    g = K.from_storage(got, t).astype(np.float64)
    finite = np.isfinite(r)
    scale = float(np.max(np.abs(r[finite]))) if finite.any() else 0.0
    K.assert_close(g, r, rtol=REL[t], atol=REL[t] * scale, what="%s output %s vs reference" % (BACKEND, name))


def _run_on_device_too(self):
    s = _reference_run(self)
    names = list(self._out_dtype.keys())
    ref = {}
    for n in names:
        try:
            ref[n] = self.result(n).copy()
        except K.KilnError:
            return s  # an output the reference did not produce: nothing to compare
    prog = self.compile(backend=BACKEND)
    try:
        prog.run()
        for n in names:
            _compare(n, self._out_dtype[n], ref[n], self.result(n))
    finally:
        prog.free()
    return s


K.Graph.run = _run_on_device_too
_case = K.Suite.case


_ordinal = [0]


def _prefixed_case(self, name, fn, *args, **kw):
    k = _ordinal[0]
    _ordinal[0] += 1
    if k % NSHARDS != SHARD:
        return None  # another process runs this case
    return _case(self, BACKEND + "_" + name, fn, *args, **kw)


K.Suite.case = _prefixed_case

failed = 0
for suite_file in ("test_ops.py", "test_nn.py"):
    try:
        runpy.run_path(os.path.join(_HERE, suite_file), run_name="__main__")
    except SystemExit as e:
        failed |= 1 if e.code else 0
sys.exit(1 if failed else 0)
