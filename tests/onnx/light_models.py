"""light_models.py — the nine light models that ship in the onnx package
(onnx/backend/test/data/light: ResNet-50, DenseNet-121, Inception v1/v2,
ShuffleNet, SqueezeNet, VGG-19, ZFNet-512, AlexNet, with constant weights)
through kiln, compared with the expected outputs stored beside them.

The input is what ONNX's backend runner feeds these models: arange(n)/n in
the declared shape (runner.generate_dummy_data with random=False). Each
model runs compiled (and with --reference also through the reference
interpreter, which is slow on these sizes); outputs are compared at ONNX's
default tolerances (rtol 1e-3, atol 1e-7).

Usage: light_models.py [--reference] [--only NAME,...] [-t THREADS]
Prints "PASS light_NAME" / "FAIL light_NAME: why" and a summary line.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402

import kiln_onnx_run as kr  # noqa: E402


def light_dir():
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def models():
    d = light_dir()
    return sorted(f[len("light_"):-len(".onnx")] for f in os.listdir(d) if f.endswith(".onnx"))


def dummy_input(vi):
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def check(name, reference=False, threads=0):
    import onnx
    from onnx import numpy_helper
    path = os.path.join(light_dir(), "light_%s.onnx" % name)
    proto = onnx.load(path)
    inits = {i.name for i in proto.graph.initializer}
    feeds = {vi.name: dummy_input(vi) for vi in proto.graph.input if vi.name not in inits}
    want = numpy_helper.to_array(onnx.load_tensor(os.path.join(light_dir(), "light_%s_output_0.pb" % name)))
    t0 = time.time()
    m = kr.Model(path=path)
    t_load = time.time() - t0
    out_name = m.outputs[0][0]
    times = {"load": t_load}
    paths = ["compiled"] + (["reference"] if reference else [])
    for p in paths:
        t0 = time.time()
        got = (m.compiled(feeds, threads) if p == "compiled" else m.reference(feeds))[out_name]
        times[p] = time.time() - t0
        why = kr.close_enough(got, want, 1e-3, 1e-7)
        if why:
            m.close()
            return "%s: %s" % (p, why), times
    m.close()
    return None, times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--only")
    ap.add_argument("-t", type=int, default=0)
    args = ap.parse_args()
    os.environ.setdefault("KILN_POISON_RESULTS", "1")
    names = args.only.split(",") if args.only else models()
    passed = failed = 0
    for name in names:
        try:
            why, times = check(name, args.reference, args.t)
        except kr.KilnOnnxError as e:
            why, times = str(e), {}
        info = " ".join("%s %.1fs" % kv for kv in times.items())
        if why:
            print("FAIL light_%s: %s" % (name, why))
            failed += 1
        else:
            print("PASS light_%s (%s)" % (name, info))
            passed += 1
        sys.stdout.flush()
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
