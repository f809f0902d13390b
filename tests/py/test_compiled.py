"""test_compiled.py — the core op and nn suites (test_ops.py, test_nn.py) run
again with every graph also compiled (kiln_compile / kiln_run, the CPU
backend, the machine's best code path) and compared with the reference
interpreter on the same inputs.

How: Graph.run (the reference run the suites call) is wrapped: after the
reference run it keeps every output, compiles the graph, runs the program
and checks each output against the reference — integers and block formats
bit-exactly, floats within 1e-6 (f32) / 1e-3 (f16) / 8e-3 (bf16) relative
(the vector path may sum in another order, and its EXP2 is a polynomial
within 2 ulp of libm's) plus an absolute slack of the
same factor times the output's largest magnitude. The compiled results are
left in the graph, so each suite's own numpy check then also judges the
compiled output. Case names get a "compiled_" prefix.

Cases that check run-time *errors* of the reference (e.g. unbound symbols)
never reach a successful reference run and so are not compiled.
KILN_TEST_COMPILED=0 skips this file (it compiles one C file per case).
"""
import os
import runpy
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as K  # noqa: E402

if os.environ.get("KILN_TEST_COMPILED") == "0":
    print("# test_compiled: skipped (KILN_TEST_COMPILED=0)")
    sys.exit(0)
try:
    K.lib.kiln_compile  # noqa: B018
except AttributeError:
    print("# test_compiled: this libkiln has no kiln_compile (built without WIP=1); skipped")
    sys.exit(0)

# compiled kernels of the test suite go to a private cache; the e-graph
# check of Graph.run already runs in test_ops/test_nn themselves
os.environ.setdefault("XDG_CACHE_HOME", "/tmp/kiln-test-cache-%d" % os.getuid())
os.environ.setdefault("KILN_CHECK_EGRAPH", "0")

REL = {K.F32: 1e-6, K.F16: 1e-3, K.BF16: 8e-3}
_reference_run = K.Graph.run


def _compare(name, t, ref, got):
    if ref.shape != got.shape:
        raise AssertionError("compiled output %s: shape %s, reference %s" % (name, got.shape, ref.shape))
    if t not in REL:
        if not np.array_equal(ref, got):
            i = tuple(int(v) for v in np.argwhere(ref != got)[0])
            raise AssertionError("compiled output %s differs at %s: %r vs reference %r" % (name, i, got[i], ref[i]))
        return
    r = K.from_storage(ref, t).astype(np.float64)
    g = K.from_storage(got, t).astype(np.float64)
    finite = np.isfinite(r)
    scale = float(np.max(np.abs(r[finite]))) if finite.any() else 0.0
    K.assert_close(g, r, rtol=REL[t], atol=REL[t] * scale, what="compiled output %s vs reference" % name)


def _run_compiled_too(self):
    s = _reference_run(self)
    names = list(self._out_dtype.keys())
    ref = {}
    for n in names:
        try:
            ref[n] = self.result(n).copy()
        except K.KilnError:
            return s  # an output the reference did not produce: nothing to compare
    prog = self.compile()
    try:
        prog.run()
        for n in names:
            _compare(n, self._out_dtype[n], ref[n], self.result(n))
    finally:
        prog.free()
    return s


K.Graph.run = _run_compiled_too

_case = K.Suite.case


def _prefixed_case(self, name, fn, *args, **kw):
    return _case(self, "compiled_" + name, fn, *args, **kw)


K.Suite.case = _prefixed_case

failed = 0
for suite_file in ("test_ops.py", "test_nn.py"):
    try:
        runpy.run_path(os.path.join(_HERE, suite_file), run_name="__main__")
    except SystemExit as e:
        failed |= 1 if e.code else 0
sys.exit(1 if failed else 0)
