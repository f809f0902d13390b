"""onnx_bench.py — kiln against onnxruntime (CPU execution provider) on ONNX
models: the nine light models of the onnx package by default, or --models.

Per model and thread count: both sides load the model and are warmed up
(kiln: compiled, then its first-run schedule search of --budget seconds
unless 0, as `kiln run` does for GGUF; onnxruntime: all graph optimizations,
intra-op threads = the count, one inter-op thread, sequential execution);
then --rounds rounds, each timing -r runs of kiln and -r runs of
onnxruntime back to back (interleaved, each block after a pause of
SETTLE_S and WARM_S of untimed runs), and the medians of all samples are compared. kiln's output is checked against onnxruntime's first (rtol 1e-3).

Prints a table (model, threads, kiln ms, onnxruntime ms, speed ratio =
ort/kiln, so > 1 means kiln is faster) and writes --json when asked.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "onnx"))
import numpy as np  # noqa: E402

import kiln_onnx_run as kr  # noqa: E402


def inputs_of(path):
    import onnx
    m = onnx.load(path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.random(shape, np.float32)
    return feeds


# a pause before each engine's block of runs: onnxruntime's pool threads
# spin for tens of milliseconds after its last run (allow_spinning, its
# default and best setting), and kiln's runs right after shared the cores
# with them: SqueezeNet at 2 threads (Intel Xeon, 2 cores) ran 4.2-4.7 ms for
# the first 6-8 runs after onnxruntime's, 3.3-3.5 ms after a 0.1 s pause or
# alone. The pause is the same before both blocks (kiln's workers spin for
# 0.1 ms); neither engine is timed while the other's threads still run.
# After the pause each engine runs once untimed: its threads (and the
# cores) wake during that run (kiln's first run after a 0.2 s pause took
# 4.0 ms where the next took 3.1-3.3).
SETTLE_S = 0.2
# ... and then runs untimed until WARM_S has passed (at least two runs), the
# same for both engines: one run was not enough where a run takes 3 ms
# (SqueezeNet at 2 threads, Intel Xeon: kiln's first runs after the pause
# took 4.4 and 3.4 ms, the next 2.6-2.9; with 5 timed runs a block, two slow
# ones moved a median by up to 30% from one bench run to the next)
WARM_S = 0.02


def warm(run):
    t0 = time.perf_counter()
    n = 0
    while n < 2 or time.perf_counter() - t0 < WARM_S:
        run()
        n += 1


def bench(path, threads, reps, rounds, budget):
    import onnxruntime as ort
    feeds = inputs_of(path)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0]
    m = kr.Model(path=path)
    t0 = time.time()
    got = m.compiled(feeds, threads, f32=False)[m.outputs[0][0]]  # kiln's defaults, as kiln bench
    compile_s = time.time() - t0
    if budget > 0:
        m.search(budget)
    why = kr.close_enough(got, want, 1e-3, 1e-5)
    for _ in range(3):
        m.run_again()
        sess.run(None, feeds)
    tk, to = [], []
    for _ in range(rounds):
        time.sleep(SETTLE_S)
        warm(m.run_again)  # untimed: the runs after the pause wake the threads
        for _ in range(reps):
            a = time.perf_counter()
            m.run_again()
            tk.append(time.perf_counter() - a)
        time.sleep(SETTLE_S)
        warm(lambda: sess.run(None, feeds))
        for _ in range(reps):
            a = time.perf_counter()
            sess.run(None, feeds)
            to.append(time.perf_counter() - a)
    m.close()
    k, o = float(np.median(tk)) * 1e3, float(np.median(to)) * 1e3
    return {"model": os.path.basename(path), "threads": threads, "kiln_ms": k, "ort_ms": o, "ratio": o / k,
            "compile_s": compile_s, "check": why or "ok", "samples": len(tk)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", help="comma-separated .onnx files (default: the nine light models)")
    ap.add_argument("-t", default="1,2")
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=float(os.environ.get("KILN_TUNE", "30")))
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.models:
        paths = args.models.split(",")
    else:
        import onnx
        d = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
        paths = [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".onnx")]
    rows = []
    print("%-28s %3s %10s %10s %7s  %s" % ("model", "t", "kiln ms", "ort ms", "ratio", "check"))
    for p in paths:
        for t in [int(x) for x in args.t.split(",")]:
            try:
                r = bench(p, t, args.r, args.rounds, args.budget)
            except Exception as e:  # one model's failure is a row, not the end
                r = {"model": os.path.basename(p), "threads": t, "error": str(e)[:200]}
                print("%-28s %3d  error: %s" % (r["model"], t, r["error"]))
            else:
                print("%-28s %3d %10.2f %10.2f %6.2fx  %s" % (r["model"], t, r["kiln_ms"], r["ort_ms"], r["ratio"], r["check"]))
            sys.stdout.flush()
            rows.append(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
