"""test_onnx.py — the ONNX importer inside `make test` (a fast part of what
`make onnx-conformance` and `make onnx-light` run in full):

  - a fixed subset of ONNX's own node cases, through kiln's reference
    interpreter and compiled code, must pass (tests/onnx/conformance.py's
    run_case; fewer under ASan);
  - models built here: symbolic input dims bound to two sizes on one
    compiled program; external data files; a model input folded as a
    load-time constant; outputs compared with numpy;
  - errors: an unknown operator and an unknown attribute are
    KILN_ERR_UNSUPPORTED naming them; every truncation and many bit flips of
    a model load or fail with a message, never crash (each case forked);
  - the command line: kiln run/bench/explain -m MODEL.onnx, and its errors.
"""
import os
import subprocess
import time
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "onnx"))
import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import conformance  # noqa: E402
import kiln_onnx_run as kr  # noqa: E402
from kiln_ctypes import Suite  # noqa: E402

suite = Suite("test_onnx")
ASAN = bool(os.environ.get("KILN_ASAN"))
KILN_BIN = os.environ.get("KILN_BIN") or os.path.join(kr.REPO, "build", "kiln")
F = TensorProto.FLOAT

# one or two cases per operator family; the full list is make onnx-conformance
QUICK = ["test_abs", "test_add_bcast", "test_relu", "test_sigmoid", "test_erf", "test_matmul_3d",
         "test_gemm_all_attributes", "test_conv_with_strides_and_asymmetric_padding", "test_maxpool_2d_pads",
         "test_averagepool_2d_ceil", "test_softmax_axis_1", "test_layer_normalization_4d_axis1",
         "test_reduce_mean_keepdims_example", "test_transpose_all_permutations_2", "test_slice_neg_steps",
         "test_gather_1", "test_concat_3d_axis_1", "test_reshape_negative_dim", "test_where_example",
         "test_argmax_default_axis_example", "test_div", "test_constant_pad", "test_batchnorm_epsilon", "test_split_equal_parts_1d_opset18",
         "test_lrn", "test_tile"]
QUICK_ASAN = ["test_abs", "test_conv_with_strides_and_asymmetric_padding", "test_maxpool_2d_pads", "test_softmax_axis_1",
              "test_reshape_negative_dim", "test_gather_1"]


def node_cases():
    names = set(QUICK_ASAN if ASAN else QUICK)
    cases = conformance.collect(names=names)
    if len(cases) != len(names):
        missing = names - {c.name for c in cases}
        raise AssertionError("the onnx package has no case %s" % sorted(missing))
    return cases


def conformance_case(case):
    status, why = conformance.run_case(case)
    assert status == "passed", "%s: %s" % (status, why)


def model_bytes(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def symbolic_dims():
    w = np.random.default_rng(1).standard_normal((6, 4)).astype(np.float32)
    m = model_bytes([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])],
                    [helper.make_tensor_value_info("x", F, ["batch", 6])],
                    [helper.make_tensor_value_info("y", F, ["batch", 4])], [numpy_helper.from_array(w, "w")])
    k = kr.Model(data=m.SerializeToString())
    assert k.inputs[0][2] == [(-1, "batch"), (6, None)], k.inputs
    for n in (3, 7):  # one compiled program for both sizes
        x = np.random.default_rng(n).standard_normal((n, 6)).astype(np.float32)
        want = np.tanh(x @ w)
        for got in (k.reference({"x": x})["y"], k.compiled({"x": x})["y"]):
            assert kr.close_enough(got, want, 1e-5, 1e-6) is None, kr.close_enough(got, want, 1e-5, 1e-6)
    k.close()


def external_data():
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    m = model_bytes([helper.make_node("Add", ["x", "w"], ["y"])], [helper.make_tensor_value_info("x", F, [3, 4])],
                    [helper.make_tensor_value_info("y", F, [3, 4])], [numpy_helper.from_array(w, "w")])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True, location="m.data",
                        size_threshold=0)
        assert os.path.getsize(os.path.join(d, "m.data")) >= w.nbytes
        x = np.ones((3, 4), np.float32)
        k = kr.Model(path=path)
        got = k.reference({"x": x})["y"]
        k.close()
        assert np.array_equal(got, x + w), got
        os.truncate(os.path.join(d, "m.data"), 8)  # cut short: a clear error
        try:
            kr.Model(path=path)
        except kr.KilnOnnxError as e:
            assert e.status == 8 and "external data" in e.message, e
        else:
            raise AssertionError("a truncated external data file loaded")


def load_time_const():
    m = model_bytes([helper.make_node("Reshape", ["x", "s"], ["y"])],
                    [helper.make_tensor_value_info("x", F, [2, 6]), helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                    [helper.make_tensor_value_info("y", F, None)])
    data = m.SerializeToString()
    try:
        kr.Model(data=data)
    except kr.KilnOnnxError as e:
        assert e.unsupported and "known at load time" in e.message, e
    else:
        raise AssertionError("a runtime shape input was accepted")
    k = kr.Model(data=data, consts={"s": np.array([3, 4], np.int64)})
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    got = k.compiled({"x": x})["y"]
    k.close()
    assert np.array_equal(got, x.reshape(3, 4)), got


def expect_unsupported(m, words):
    try:
        kr.Model(data=m.SerializeToString())
    except kr.KilnOnnxError as e:
        assert e.unsupported, e
        for w in words:
            assert w in e.message, (w, e.message)
        return
    raise AssertionError("loaded")


def unsupported_errors():
    vi = [helper.make_tensor_value_info("x", F, [2, 3])]
    out = [helper.make_tensor_value_info("y", F, None)]
    expect_unsupported(model_bytes([helper.make_node("NonZero", ["x"], ["y"])], vi, out), ["NonZero"])
    expect_unsupported(model_bytes([helper.make_node("Relu", ["x"], ["y"], fancy=3)], vi, out), ["Relu", "fancy"])
    expect_unsupported(model_bytes([helper.make_node("Relu", ["x"], ["y"], domain="com.example")], vi, out), ["com.example"])
    dvi = [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2])]
    expect_unsupported(model_bytes([helper.make_node("Relu", ["x"], ["y"])], dvi, out), ["double"])


def damaged_files():
    w = numpy_helper.from_array(np.ones((2, 3, 3, 3), np.float32), "w")
    m = model_bytes([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                     helper.make_node("Relu", ["c"], ["y"])],
                    [helper.make_tensor_value_info("x", F, ["N", 3, 5, 5])], [helper.make_tensor_value_info("y", F, None)], [w])
    data = m.SerializeToString()
    rng = np.random.default_rng(7)
    variants = [data[:n] for n in range(0, len(data), 1 if ASAN else 1)]
    for _ in range(100 if ASAN else 400):
        b = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(0, len(b)))
            b[i] ^= 1 << int(rng.integers(0, 8))
        variants.append(bytes(b))
    loaded = failed = 0
    for v in variants:
        try:
            k = kr.Model(data=v)
        except kr.KilnOnnxError as e:
            assert e.message, "an error without a message"
            failed += 1
            continue
        k.close()
        loaded += 1
    assert failed > len(data) // 2, (loaded, failed)  # most truncations must be refused


def run_cli(*args, ok=True, env=None):
    p = subprocess.run([KILN_BIN] + list(args), capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, **env) if env else None)
    if ok and p.returncode != 0:
        raise AssertionError("kiln %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr[-500:]))
    return p


def cli():
    w = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    m = model_bytes([helper.make_node("Gemm", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                    [helper.make_tensor_value_info("x", F, ["N", 4])], [helper.make_tensor_value_info("y", F, ["N", 5])],
                    [numpy_helper.from_array(w, "w")])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        onnx.save_model(m, path)
        x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
        np.save(os.path.join(d, "x.npy"), x)
        out = os.path.join(d, "out")
        run_cli("run", "-m", path, "--input", "x=" + os.path.join(d, "x.npy"), "--output-dir", out)
        got = np.load(os.path.join(out, "y.npy"))
        assert kr.close_enough(got, np.maximum(x @ w, 0), 1e-5, 1e-6) is None
        p = run_cli("bench", "-m", path, "--dim", "N=8", "-r", "3", "--no-tune")
        assert "median" in p.stdout, p.stdout
        p = run_cli("bench", "-m", path, "--dim", "N=8", "-r", "3", "--no-tune", "--profile")
        assert "ms per run" in p.stderr and "median" in p.stdout, p.stderr
        # the first-run search ends when a run searched nothing, not at 1.5x
        # its budget: the Gemm's decode-sized slot (M <= 4) is never launched
        # at N = 8 and stays open
        t0 = time.time()
        p = run_cli("bench", "-m", path, "--dim", "N=8", "-r", "3",
                    env={"KILN_TUNE": "20", "KILN_TUNEDB": os.path.join(d, "tune.db")})
        assert "kiln bench: searched" in p.stderr and time.time() - t0 < 15, (time.time() - t0, p.stderr)
        p = run_cli("explain", "-m", path)
        assert "inputs:" in p.stdout and "x f32 (N, 4)" in p.stdout, p.stdout
        p = run_cli("bench", "-m", path, "-r", "3", ok=False)  # N not given
        assert p.returncode == 1 and "--dim N=" in p.stderr, (p.returncode, p.stderr)
        p = run_cli("run", "-m", path, "--bogus", ok=False)
        assert p.returncode == 2, p.returncode
        p = run_cli("run", "-m", os.path.join(d, "missing.onnx"), ok=False)
        assert p.returncode == 1 and "cannot open" in p.stderr, p.stderr
        with open(os.path.join(d, "bad.onnx"), "wb") as f:
            f.write(b"\xff\xff\xff\xff not a model")
        p = run_cli("explain", "-m", os.path.join(d, "bad.onnx"), ok=False)
        assert p.returncode == 1 and "not an ONNX model" in p.stderr, p.stderr


def python_package():
    sys.path.insert(0, os.path.join(kr.REPO, "python"))
    import kiln
    import kiln.onnx
    w = np.random.default_rng(5).standard_normal((4, 3)).astype(np.float32)
    m = model_bytes([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("ArgMax", ["h"], ["y"], axis=1, keepdims=0)],
                    [helper.make_tensor_value_info("x", F, ["N", 4])],
                    [helper.make_tensor_value_info("y", TensorProto.INT64, None)], [numpy_helper.from_array(w, "w")])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        onnx.save_model(m, path)
        with kiln.onnx.load(path) as km:
            assert km.inputs == [("x", "f32", [("N", None), 4])], km.inputs
            x = np.random.default_rng(6).standard_normal((5, 4)).astype(np.float32)
            for interp in (False, True):
                y = km.run({"x": x}, interpreter=interp)["y"]
                assert y.dtype == np.int64 and np.array_equal(y, np.argmax(x @ w, axis=1)), y
        bad = model_bytes([helper.make_node("NonZero", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [2])],
                          [helper.make_tensor_value_info("y", F, None)])
        onnx.save_model(bad, path)
        try:
            kiln.onnx.load(path)
        except kiln.UnsupportedError as e:
            assert "NonZero" in str(e), e
        else:
            raise AssertionError("NonZero loaded")


def light_squeezenet():
    sys.path.insert(0, os.path.join(kr.REPO, "tests", "onnx"))
    import light_models
    why, _ = light_models.check("squeezenet")
    assert why is None, why


os.environ.setdefault("KILN_POISON_RESULTS", "1")
for case in node_cases():
    suite.case("onnx node " + case.name, conformance_case, case, isolate=True)
suite.case("onnx symbolic dims, one program for two sizes", symbolic_dims, isolate=True)
suite.case("onnx external data", external_data, isolate=True)
suite.case("onnx load-time constant input", load_time_const, isolate=True)
suite.case("onnx unsupported operator/attribute/domain/type named", unsupported_errors, isolate=True)
suite.case("onnx truncations and bit flips never crash", damaged_files, isolate=True)
suite.case("onnx command line run/bench/explain", cli, isolate=True)
suite.case("onnx from the Python package (kiln.onnx)", python_package, isolate=True)
if not ASAN:
    suite.case("onnx light squeezenet compiled matches", light_squeezenet, isolate=True)
suite.finish()
