"""conformance.py — ONNX's own node test cases through kiln.

The cases are generated from the installed onnx package
(onnx.backend.test.case.node.collect_testcases: per operator, a model with
inputs and expected outputs). Each runs in a forked child (a crash fails
that case only): kiln's importer loads the model, kiln's reference
interpreter and its compiled program both run it, and each output is
compared at the case's tolerances (|got - want| <= atol + rtol*|want|).

  passed       both paths match every output
  failed       a path gives a wrong answer, crashes, times out, or errs
               other than by declaring the case unsupported
  unsupported  the importer (or the compiler) refuses it with
               KILN_ERR_UNSUPPORTED, naming what it cannot do

Integer inputs that fix shapes (Reshape's shape, Slice's starts, ...) must be
known when kiln loads a model; when the importer asks for that, the case is
loaded again with its integer inputs, and any input the error names in
quotes (Resize's float scales), given as load-time constants
(kiln_onnx_options.consts), as a user would for such a model.

Usage: conformance.py [--filter REGEX] [--cases FILE] [--jobs N] [-v]
                      [--timeout S] [--json OUT]
Prints a per-operator table and "N passed, N failed, N unsupported"; exits
1 when anything failed.
"""
import argparse
import collections
import json
import os
import re
import select
import signal
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402

import kiln_onnx_run as kr  # noqa: E402


def collect(pattern=None, names=None):
    warnings.filterwarnings("ignore")
    from onnx.backend.test.case import node
    cases = node.collect_testcases(None)
    if pattern:
        rx = re.compile(pattern)
        cases = [c for c in cases if rx.search(c.name)]
    if names is not None:
        cases = [c for c in cases if c.name in names]
    return cases


def operator_of(case, by_name):
    name = case.name
    if "_expanded" in name:
        base = name[:name.index("_expanded")]
        return by_name.get(base, "?") + " (expanded)"
    ops = sorted({n.op_type for n in case.model.graph.node})
    return ops[0] if len(ops) == 1 else "+".join(ops)


PATHS = ("reference", "compiled")


def as_array(a):
    """a case's value as a numpy array (TensorProto and numpy scalars
    included); None for sequences, maps and optionals"""
    import onnx
    from onnx import numpy_helper
    if isinstance(a, onnx.TensorProto):
        try:
            a = numpy_helper.to_array(a)
        except Exception:
            return None
    if isinstance(a, (np.ndarray, np.generic)):
        a = np.asarray(a)
        return a if a.dtype.kind in "biuf" and a.dtype.itemsize <= 8 and a.dtype.names is None else None
    return None


def run_case(case):
    """(status, why) for one case, in this process"""
    import onnx  # noqa: F401
    model = case.model
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    if not case.data_sets:
        return "unsupported", "the case has no data"
    inputs, expected = case.data_sets[0]
    if len(inputs) > len(names):
        return "unsupported", "more inputs than graph inputs"
    feeds = {}
    for name, a in zip(names, inputs):
        a = as_array(a)
        if a is None:
            return "unsupported", "input %s is not a tensor (a sequence, map or optional)" % name
        feeds[name] = a
    expected = [as_array(a) for a in expected]
    if any(a is None for a in expected):
        return "unsupported", "an output is not a tensor (a sequence, map or optional)"
    data = model.SerializeToString()
    consts = None
    try:
        m = kr.Model(data=data)
    except kr.KilnOnnxError as e:
        # integer inputs, and any input the error names ('scales' of Resize)
        ints = {k: v for k, v in feeds.items() if v.dtype.kind in "biu" or "'%s'" % k in e.message}
        if e.unsupported and "known at load time" in e.message and ints:
            consts = ints
            try:
                m = kr.Model(data=data, consts=consts)
            except kr.KilnOnnxError as e2:
                return ("unsupported" if e2.unsupported else "failed"), "load: " + str(e2)
        else:
            return ("unsupported" if e.unsupported else "failed"), "load: " + str(e)
    if consts:
        feeds = {k: v for k, v in feeds.items() if k not in consts}
    outs = [name for name, _ in m.outputs]
    if len(outs) != len(expected):
        return "failed", "%d outputs, expected %d" % (len(outs), len(expected))
    for path in PATHS:
        try:
            got = m.reference(feeds) if path == "reference" else m.compiled(feeds)
        except kr.KilnOnnxError as e:
            return ("unsupported" if e.unsupported else "failed"), "%s: %s" % (path, e)
        for name, want in zip(outs, expected):
            why = kr.close_enough(got[name], want, case.rtol, case.atol)
            if why:
                return "failed", "%s, output %s: %s" % (path, name, why)
    m.close()
    return "passed", ""


def run_forked(case, timeout):
    """start a child for one case; returns (pid, read fd)"""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            res = run_case(case)
        except Exception as e:  # an exception in the harness or kiln binding
            res = ("failed", "exception: %s: %s" % (type(e).__name__, e))
        os.write(w, json.dumps(res).encode())
        os._exit(0)
    os.close(w)
    return pid, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--filter")
    ap.add_argument("--cases", help="a file of case names, one per line")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json")
    ap.add_argument("-v", action="store_true")
    ap.add_argument("--reference-only", action="store_true",
                    help="triage: skip the compiled path (such a run's passes do not count as conformance)")
    args = ap.parse_args()
    global PATHS
    if args.reference_only:
        PATHS = ("reference",)
    os.environ.setdefault("KILN_POISON_RESULTS", "1")
    names = None
    if args.cases:
        with open(args.cases) as f:
            names = {ln.strip() for ln in f if ln.strip() and not ln.startswith("#")}
    t0 = time.time()
    cases = collect(args.filter, names)
    by_name = {c.name: (sorted({n.op_type for n in c.model.graph.node}) or ["?"])[0] for c in cases}
    results = {}
    pending = list(cases)
    running = {}  # fd -> (pid, case, start, chunks)
    while pending or running:
        while pending and len(running) < max(1, args.jobs):
            c = pending.pop(0)
            pid, fd = run_forked(c, args.timeout)
            running[fd] = (pid, c, time.time(), [])
        ready, _, _ = select.select(list(running), [], [], 1.0)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                running[fd][3].append(chunk)
                continue
            pid, c, _, chunks = running.pop(fd)
            os.close(fd)
            _, status = os.waitpid(pid, 0)
            if chunks:
                res = tuple(json.loads(b"".join(chunks)))
            elif os.WIFSIGNALED(status):
                res = ("failed", "crashed with signal %d" % os.WTERMSIG(status))
            else:
                res = ("failed", "exited with status %d and no result" % os.WEXITSTATUS(status))
            results[c.name] = (operator_of(c, by_name),) + res
            if len(results) % 100 == 0:
                print("... %d of %d cases, %.0f s" % (len(results), len(cases), time.time() - t0), file=sys.stderr)
            if args.v or res[0] == "failed":
                print("%-12s %s %s" % (res[0].upper(), c.name, res[1][:300]))
                sys.stdout.flush()
        now = time.time()
        for fd, (pid, c, start, _) in list(running.items()):
            if now - start > args.timeout:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(fd)
                del running[fd]
                results[c.name] = (operator_of(c, by_name), "failed", "timed out after %.0f s" % args.timeout)
                print("FAILED       %s timed out" % c.name)
    table = collections.defaultdict(lambda: [0, 0, 0])
    col = {"passed": 0, "failed": 1, "unsupported": 2}
    for op, st, _ in results.values():
        table[op][col[st]] += 1
    print("\n%-36s %7s %7s %12s" % ("operator", "passed", "failed", "unsupported"))
    for op in sorted(table):
        p, f, u = table[op]
        print("%-36s %7d %7d %12d" % (op, p, f, u))
    reasons = collections.Counter()
    for op, st, why in results.values():
        if st == "unsupported":
            reasons[re.sub(r"node \d+ \([^)]*\): ", "", why)[:110]] += 1
    if reasons:
        print("\nmost common reasons for unsupported:")
        for why, k in reasons.most_common(25):
            print("%5d  %s" % (k, why))
    n = [sum(1 for r in results.values() if r[1] == s) for s in ("passed", "failed", "unsupported")]
    print("\n%d cases in %.0f s" % (len(results), time.time() - t0))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    print("%d passed, %d failed, %d unsupported" % tuple(n))
    sys.exit(1 if n[1] else 0)


if __name__ == "__main__":
    main()
