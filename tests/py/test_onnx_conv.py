"""test_onnx_conv.py — convolutions and the operators of issue 32's second
half through the ONNX importer, both kiln paths (reference interpreter and
compiled code) against numpy:

  - Conv of every geometry that ONNX's own node cases leave out (they have
    one output channel, so no packed contraction): 1-D, 2-D and 3-D,
    groups (depthwise too), strides, dilations, asymmetric pads, batch 2,
    many output channels; the compiled program must hold a contraction
    (explain's kernel listing) where there is reuse to pack for;
  - ConvTranspose with groups, strides, pads and output_padding;
  - Einsum in float32 (ONNX's cases are float64 or bfloat16, which the
    conformance run cannot feed): matmul, batch matmul, inner and outer
    products, sums, transposes, diagonals with an ellipsis, three operands,
    implicit outputs;
  - errors: a Resize mode, an Einsum equation and ConvTranspose attributes
    kiln does not cover are load errors naming them.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "onnx"))
import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import kiln_onnx_run as kr  # noqa: E402
from kiln_ctypes import Suite  # noqa: E402

suite = Suite("test_onnx_conv")
F = TensorProto.FLOAT


def model(node, inputs, inits=()):
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info(n, F, list(a.shape)) for n, a in inputs],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def check_both(data, feeds, want, tol=1e-4):
    m = kr.Model(data=data)
    try:
        for path in ("reference", "compiled"):
            got = (m.reference(feeds) if path == "reference" else m.compiled(feeds))["y"]
            why = kr.close_enough(got, want.astype(np.float32), tol, tol)
            assert why is None, "%s: %s" % (path, why)
    finally:
        m.close()


def np_conv(x, w, b, strides, pads, dils, group):
    """ONNX Conv by definition: every output point a dot product"""
    k = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + k]) for i in range(k)])
    ks = w.shape[2:]
    outs = [(xp.shape[2 + i] - (ks[i] - 1) * dils[i] - 1) // strides[i] + 1 for i in range(k)]
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    y = np.zeros((n, m) + tuple(outs))
    for o in np.ndindex(*outs):
        sl = tuple(slice(o[i] * strides[i], o[i] * strides[i] + (ks[i] - 1) * dils[i] + 1, dils[i]) for i in range(k))
        win = xp[(slice(None), slice(None)) + sl]  # (n, c, k...)
        for gi in range(group):
            mg = m // group
            part = win[:, gi * cg:(gi + 1) * cg]
            wg = w[gi * mg:(gi + 1) * mg].reshape(mg, cg, -1)
            y[(slice(None), slice(gi * mg, (gi + 1) * mg)) + o] = np.einsum("nck,mck->nm", part.reshape(n, cg, -1), wg)
    return y + b.reshape((1, m) + (1,) * k)


CONVS = [  # x shape, w shape, strides, pads (begin..., end...), dilations, group
    ((1, 6, 17), (8, 6, 3), [2], [1, 2], [1], 1),
    ((2, 8, 9, 11), (12, 4, 3, 3), [1, 2], [1, 0, 2, 1], [1, 1], 2),
    ((1, 6, 10, 10), (6, 1, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 6),
    ((1, 5, 12, 12), (16, 5, 3, 3), [1, 1], [2, 2, 2, 2], [2, 2], 1),
    ((1, 4, 5, 6, 7), (8, 4, 2, 3, 3), [1, 2, 1], [0, 1, 1, 1, 0, 1], [1, 1, 2], 1),
    ((2, 16, 7, 7), (24, 16, 1, 1), [1, 1], [0, 0, 0, 0], [1, 1], 1),
]


def conv_case(xs, ws, strides, pads, dils, group):
    rng = np.random.default_rng(len(xs) * 7 + ws[0])
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=strides, pads=pads, dilations=dils, group=group)
    data = model(node, [("x", x)], [("w", w), ("b", b)])
    check_both(data, {"x": x}, np_conv(x, w, b, strides, pads, dils, group))
    m = kr.Model(data=data)
    try:
        m.compiled({"x": x})
        kernels = m.kernels()
    finally:
        m.close()
    if ws[0] // group >= 4:  # reuse: the packed operand feeds a contraction
        assert "contraction" in kernels, "no contraction in:\n" + kernels[:2000]


def np_conv_transpose(x, w, b, strides, pads, opad, group):
    """ONNX ConvTranspose by definition: each input cell scatters its kernel"""
    k = x.ndim - 2
    n, c = x.shape[:2]
    cg, mg = c // group, w.shape[1]
    ks = w.shape[2:]
    full = [strides[i] * (x.shape[2 + i] - 1) + ks[i] + opad[i] for i in range(k)]
    y = np.zeros((n, mg * group) + tuple(full))
    for i in np.ndindex(*x.shape[2:]):
        for kk in np.ndindex(*ks):
            o = tuple(i[d] * strides[d] + kk[d] for d in range(k))
            for gi in range(group):
                xs = x[(slice(None), slice(gi * cg, (gi + 1) * cg)) + i]  # (n, cg)
                ws = w[(slice(gi * cg, (gi + 1) * cg), slice(None)) + kk]  # (cg, mg)
                y[(slice(None), slice(gi * mg, (gi + 1) * mg)) + o] += xs @ ws
    crop = tuple(slice(pads[d], full[d] - pads[d + k]) for d in range(k))
    return y[(slice(None), slice(None)) + crop] + b.reshape((1, -1) + (1,) * k)


def conv_transpose_case(xs, ws, strides, pads, opad, group):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[1] * group).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=strides, pads=pads, output_padding=opad,
                            group=group)
    check_both(model(node, [("x", x)], [("w", w), ("b", b)]), {"x": x},
               np_conv_transpose(x, w, b, strides, pads, opad, group))


EINSUMS = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("i,i", [(6,), (6,)]),
           ("i,j->ij", [(3,), (4,)]), ("ij->i", [(3, 4)]), ("ij->ji", [(3, 4)]), ("...ii->...i", [(2, 3, 4, 4)]),
           ("ii", [(5, 5)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 2)]),
           ("bhqd,bhkd->bhqk", [(1, 2, 3, 8), (1, 2, 5, 8)]), ("...j,kj->...k", [(2, 3, 6), (4, 6)]),
           ("ijk->", [(2, 3, 4)])]


def einsum_case(eq, shapes):
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    names = ["x%d" % i for i in range(len(xs))]
    node = helper.make_node("Einsum", names, ["y"], equation=eq)
    want = np.einsum(eq, *[a.astype(np.float64) for a in xs])
    check_both(model(node, list(zip(names, xs))), dict(zip(names, xs)), np.asarray(want))


def errors():
    x = np.zeros((1, 1, 4, 4), np.float32)
    cases = [
        (helper.make_node("Resize", ["x", "", "s"], ["y"], mode="bilinear"), "mode 'bilinear'", [("s", np.array([1, 1, 2, 2], np.float32))]),
        (helper.make_node("Einsum", ["x"], ["y"], equation="ij->i"), "does not fit", []),
        (helper.make_node("ConvTranspose", ["x", "w"], ["y"], auto_pad="WRONG"), "auto_pad 'WRONG'",
         [("w", np.zeros((1, 1, 3, 3), np.float32))]),
    ]
    for node, text, inits in cases:
        try:
            kr.Model(data=model(node, [("x", x)], inits)).close()
        except kr.KilnOnnxError as e:
            assert text in e.message, e.message
        else:
            raise AssertionError("%s loaded" % node.op_type)


for spec in CONVS:
    suite.case("onnx conv x%s w%s s%s p%s d%s g%d" % spec, conv_case, *spec, isolate=True)
for spec in [((1, 4, 5, 5), (4, 3, 3, 3), [2, 2], [1, 1, 1, 1], [1, 1], 1),
             ((2, 6, 4, 3), (6, 2, 3, 2), [2, 1], [0, 1, 1, 0], [1, 0], 3),
             ((1, 2, 7), (2, 5, 4), [3], [2, 1], [2], 1)]:
    suite.case("onnx conv_transpose x%s w%s s%s p%s op%s g%d" % spec, conv_transpose_case, *spec, isolate=True)
for eq, shapes in EINSUMS:
    suite.case("onnx einsum %s" % eq, einsum_case, eq, shapes, isolate=True)
suite.case("onnx resize/einsum/conv_transpose errors named", errors, isolate=True)
suite.finish()
