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
  - a channel shuffle feeding a depthwise convolution, Relu and a stride-1
    max pool (the shuffle copied once; reductions vectorised across output
    points), Relu and a max pool over NaN and inf, LRN read by a max pool
    (computed once, not per window cell);
  - a fire module (1x1 and 3x3 convolutions, bias + Relu, a concatenation,
    a max pool): the elementwise kernels' row and column loops coalesced;
  - a strided convolution's pack (stride 2 and 3) on the vector path;
  - LRN of odd and even sizes, beta in quarters and not: no reduction;
  - padded max and average pools (1-3-D, strides, asymmetric pads, ceil
    mode): one reduction reading a load-time table of the window cells;
  - kiln bench's first-run search on an ONNX model, recorded in the DB;
  - errors: a Resize mode, an Einsum equation and ConvTranspose attributes
    kiln does not cover are load errors naming them.
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "onnx"))
import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import kiln_onnx_run as kr  # noqa: E402
from kiln_ctypes import Suite  # noqa: E402

suite = Suite("test_onnx_conv")
KILN_BIN = os.environ.get("KILN_BIN") or os.path.join(kr.REPO, "build", "kiln")
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


def compiled_kernels(data, feeds):
    """the kernels kiln compiled for the model (its `kernels()` text), after one compiled run"""
    m = kr.Model(data=data)
    try:
        m.compiled(feeds)
        return m.kernels()
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
    ((1, 6, 11, 37), (6, 1, 3, 3), [2, 2], [1, 1, 1, 1], [1, 1], 6),  # depthwise, stride 2: gathered, 19 = 16 + 3 lanes
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
    kernels = compiled_kernels(data, {"x": x})
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


def graph_model(nodes, inputs, inits=()):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, F, list(a.shape)) for n, a in inputs],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def np_maxpool3(x):
    """MaxPool 3x3, stride 1, pads 1 (padding is -inf), NaN propagating"""
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
    h, w = x.shape[2:]
    return np.max(np.stack([xp[:, :, i:i + h, j:j + w] for i in range(3) for j in range(3)]), axis=0)


def shuffle_depthwise():
    """ShuffleNet's unit: a channel shuffle (reshape, transpose, reshape)
    feeding a depthwise convolution, Relu, a stride-1 max pool. The shuffle
    is copied once (a CONTIGUOUS kernel), so the convolution reads a dense
    buffer (no `% 37`, the row length, in its indices); the convolution,
    Relu and pool are reductions the vector path takes across output points
    (37 = 2 x 16 + 5 lanes: whole and masked steps). Both kiln paths
    against numpy."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 12, 9, 37)).astype(np.float32)
    w = rng.standard_normal((12, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    s1 = np.array([1, 3, 4, 9, 37], np.int64)
    s2 = np.array([1, 12, 9, 37], np.int64)
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["a"]),
             helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "s2"], ["sh"]),
             helper.make_node("Conv", ["sh", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=12),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    data = graph_model(nodes, [("x", x)], [("s1", s1), ("s2", s2), ("w", w), ("b", b)])
    sh = x.reshape(1, 3, 4, 9, 37).transpose(0, 2, 1, 3, 4).reshape(1, 12, 9, 37)
    want = np_maxpool3(np.maximum(np_conv(sh, w, b, [1, 1], [1, 1, 1, 1], [1, 1], 12), 0))
    check_both(data, {"x": x}, want)
    kernels = compiled_kernels(data, {"x": x})
    assert "CONTIGUOUS" in kernels, "the shuffle is not copied:\n" + kernels[:3000]
    conv = [k for k in kernels.split("kernel ") if "SUM" in k.split("\n")[0]]
    assert conv and all("% 37)" not in k for k in conv), "the convolution reads the shuffle's view:\n" + kernels[:3000]


def fire_concat():
    """SqueezeNet's fire module: a 1x1 convolution with bias and Relu, then
    a 1x1 and a padded 3x3 one (bias, Relu each), concatenated along the
    channels and max-pooled. The bias + Relu kernels and the concatenation's
    copy read and write every index as row*13 + column, so their row and
    column loops are one loop of 9 x 13 = 117 (7 x 16 + 5 lanes: whole and
    masked vector steps); the pool's window takes the rows apart and keeps
    its loops. Both kiln paths against numpy."""
    rng = np.random.default_rng(15)
    x = rng.standard_normal((1, 4, 9, 13)).astype(np.float32)
    ws = rng.standard_normal((8, 4, 1, 1)).astype(np.float32)
    w1 = rng.standard_normal((6, 8, 1, 1)).astype(np.float32)
    w3 = rng.standard_normal((5, 8, 3, 3)).astype(np.float32)
    bs, b1, b3 = (rng.standard_normal(n).astype(np.float32) for n in (8, 6, 5))
    nodes = [helper.make_node("Conv", ["x", "ws", "bs"], ["s"]), helper.make_node("Relu", ["s"], ["sr"]),
             helper.make_node("Conv", ["sr", "w1", "b1"], ["e1"]), helper.make_node("Relu", ["e1"], ["r1"]),
             helper.make_node("Conv", ["sr", "w3", "b3"], ["e3"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["e3"], ["r3"]),
             helper.make_node("Concat", ["r1", "r3"], ["c"], axis=1),
             helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    data = graph_model(nodes, [("x", x)], [("ws", ws), ("bs", bs), ("w1", w1), ("b1", b1), ("w3", w3), ("b3", b3)])
    relu = lambda a: np.maximum(a, 0)  # noqa: E731
    sr = relu(np_conv(x, ws, bs, [1, 1], [0] * 4, [1, 1], 1))
    c = np.concatenate([relu(np_conv(sr, w1, b1, [1, 1], [0] * 4, [1, 1], 1)),
                        relu(np_conv(sr, w3, b3, [1, 1], [1] * 4, [1, 1], 1))], axis=1)
    check_both(data, {"x": x}, np_maxpool3(c))
    kernels = compiled_kernels(data, {"x": x})
    bodies = kernels.split("kernel ")[1:]
    relus = [k for k in bodies if "for r in [0, 2)" in k]
    assert len(relus) == 3, "three bias + Relu kernels expected:\n" + kernels[:4000]
    for k in relus + [k for k in bodies if k.startswith(tuple("0123456789")) and "map (node" in k.split("\n")[0]
                      and "pack" not in k.split("\n")[0]]:
        assert "in [0, 117)" in k and "in [0, 13)" not in k, "rows and columns not one loop:\n" + k
    pools = [k for k in bodies if "for r in [0, 9)" in k]
    assert pools and all("in [0, 13)" in k for k in pools), "the pool's loops merged:\n" + kernels[:4000]


def strided_pack(stride, ks):
    """A strided, padded convolution with many output channels (a network's
    first layer): its operand is packed by a MAP kernel whose loads step by
    the stride along the output columns. That kernel takes the vector path
    (kld2_* for stride 2: two masked loads and a permute; a gather for
    longer strides; the padding guards as lane masks), the row's last lanes
    masked (23 and 15 output columns). Both kiln paths against numpy; the
    pack's generated C (kiln explain --source) read for its vector loads."""
    rng = np.random.default_rng(16 + stride)
    x = rng.standard_normal((1, 3, 19, 45)).astype(np.float32)
    w = rng.standard_normal((16, 3, ks, ks)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    p = ks // 2
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[stride, stride], pads=[p, p, p, p])
    data = model(node, [("x", x)], [("w", w), ("b", b)])
    check_both(data, {"x": x}, np_conv(x, w, b, [stride, stride], [p] * 4, [1, 1], 1))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        with open(path, "wb") as f:
            f.write(data)
        run = lambda *a: subprocess.run([KILN_BIN, "explain", "-m", path, "-t", "1"] + list(a),  # noqa: E731
                                        capture_output=True, text=True, timeout=120)
        listing, source = run("--kernels"), run("--source")
    assert listing.returncode == 0 and source.returncode == 0, listing.stderr + source.stderr
    packs = re.findall(r"^kernel (\d+): map pack", listing.stdout, re.M)
    assert len(packs) == 1, "one pack expected:\n" + listing.stdout[:3000]
    body = source.stdout.split("int kiln_k%s(" % packs[0])[1].split("\n}\n")[0]
    want = "kld2_" if stride == 2 else "gather_ps"
    assert want in body and "kvm" in body, "the pack is not on the vector path:\n" + body[:3000]


def relu_nan():
    """Relu (a MAX over x and 0, which the vector path takes across output
    points: 21 = 16 + 5 lanes) over NaN, inf and ordinary values: NaN stays
    NaN, as in the scalar loop"""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((1, 3, 5, 21)).astype(np.float32)
    x[0, 0, 2, 3] = np.nan
    x[0, 1, 0, 20] = np.nan
    x[0, 2, 4, 17] = np.inf
    x[0, 2, 1, 0] = -np.inf
    check_both(model(helper.make_node("Relu", ["x"], ["y"]), [("x", x)]), {"x": x}, np.maximum(x, 0))


def lrn_maxpool():
    """LRN (a chain of LOG2/EXP2/RECIP per element) read by a 3x3 max pool
    of stride 1: each element sits in up to 9 windows, so the chain gets a
    buffer of its own (pack.c's window force) instead of being recomputed
    per window cell; both kiln paths against numpy"""
    rng = np.random.default_rng(14)
    x = rng.standard_normal((1, 8, 11, 13)).astype(np.float32)
    nodes = [helper.make_node("LRN", ["x"], ["l"], size=5, alpha=1e-4, beta=0.75, bias=1.0),
             helper.make_node("MaxPool", ["l"], ["y"], kernel_shape=[3, 3])]
    data = graph_model(nodes, [("x", x)])
    sq = np.pad(x.astype(np.float64) ** 2, [(0, 0), (2, 2), (0, 0), (0, 0)])
    l = x / (1.0 + 1e-4 / 5 * sum(sq[:, i:i + 8] for i in range(5))) ** 0.75
    want = np.max(np.stack([l[:, :, i:i + 9, j:j + 11] for i in range(3) for j in range(3)]), axis=0)
    check_both(data, {"x": x}, want)
    kernels = compiled_kernels(data, {"x": x})
    heads = [k.split("\n")[:4] for k in kernels.split("kernel ")[1:]]
    pool = [h for h in heads if "MAX)" in h[0]]
    assert pool and all("EXP2" not in " ".join(h) for h in pool), "LRN recomputed per window:\n" + kernels[:3000]


def lrn_case(size, beta, c):
    """LRN as `size` shifted channel slices added (one vectorised
    elementwise kernel, no reduction over a channel window); beta in
    quarters through SQRT, others through EXP2/LOG2; an even size pads one
    more channel after than before; both kiln paths against numpy"""
    rng = np.random.default_rng(size * 10 + c)
    x = rng.standard_normal((2, c, 5, 19)).astype(np.float32)
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=3e-2, beta=beta, bias=1.5)
    lo = (size - 1) // 2
    sq = np.pad(x.astype(np.float64) ** 2, [(0, 0), (lo, size - 1 - lo), (0, 0), (0, 0)])
    want = x / (1.5 + 3e-2 / size * sum(sq[:, i:i + c] for i in range(size))) ** beta
    data = model(node, [("x", x)])
    check_both(data, {"x": x}, want)
    kernels = compiled_kernels(data, {"x": x})
    assert "reduce" not in kernels and "sum over" not in kernels, "LRN sums through a reduction:\n" + kernels[:3000]


def maxpool_nan():
    """stride-1 and stride-2 max pools (-inf padding: a load-time table
    added per window cell) over NaN, inf and ordinary values: a lane whose window
    holds a NaN is NaN, the others the max"""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((1, 3, 5, 21)).astype(np.float32)
    x[0, 0, 2, 3] = np.nan
    x[0, 1, 0, 20] = np.nan
    x[0, 2, 4, 17] = np.inf
    x[0, 2, 1, 0] = -np.inf
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    check_both(model(node, [("x", x)]), {"x": x}, np_maxpool3(x))
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    data = model(node, [("x", x)])
    check_both(data, {"x": x}, np_maxpool3(x)[:, :, ::2, ::2])
    # the stride-2 window's padding guard moves by 2 per output column: the
    # vector path's lane mask divides by that step (emit_c.c, vec_pred_ok)
    # rather than leaving the pool to the scalar loop
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "pool.onnx")
        with open(f, "wb") as fh:
            fh.write(data)
        src = subprocess.run([KILN_BIN, "explain", "-m", f, "--source"], capture_output=True, text=True, timeout=300)
    assert src.returncode == 0, src.stderr
    if "kvm8(" in src.stdout:  # a vector ISA (AVX2 or AVX-512)
        assert re.search(r"kvm(16|8)\(\(2LL - .*\) / 2LL, (16|8)\)", src.stdout), \
            "the stride-2 pool is not vectorised:\n" + src.stdout[-4000:]


def np_pool(x, ker, strides, pads, is_max, ceil=False):
    """ONNX's MaxPool / AveragePool (count_include_pad=0) by definition:
    each output point over the window's input cells only"""
    k = x.ndim - 2
    ins = x.shape[2:]
    outs = []
    for i in range(k):
        room = ins[i] + pads[i] + pads[i + k] - ker[i]
        o = (-(-room // strides[i]) if ceil else room // strides[i]) + 1
        if ceil and (o - 1) * strides[i] >= ins[i] + pads[i]:
            o -= 1
        outs.append(o)
    y = np.zeros(x.shape[:2] + tuple(outs))
    for o in np.ndindex(*outs):
        lo = [o[i] * strides[i] - pads[i] for i in range(k)]
        sl = tuple(slice(max(lo[i], 0), min(lo[i] + ker[i], ins[i])) for i in range(k))
        win = x[(slice(None), slice(None)) + sl].reshape(x.shape[0], x.shape[1], -1).astype(np.float64)
        y[(slice(None), slice(None)) + o] = win.max(axis=2) if is_max else win.mean(axis=2)
    return y


POOLS = [  # x shape, kernel, strides, pads (begin..., end...), ceil_mode
    ((1, 3, 17), [3], [2], [1, 1], 0),
    ((2, 5, 9, 20), [3, 3], [1, 1], [1, 1, 1, 1], 0),
    ((1, 4, 11, 19), [3, 2], [2, 2], [0, 1, 2, 0], 0),
    ((1, 3, 13, 13), [3, 3], [2, 2], [0, 0, 0, 0], 1),  # ceil mode: the last window reaches past the input
    ((1, 2, 5, 6, 7), [3, 3, 2], [1, 2, 2], [1, 1, 0, 1, 0, 1], 0),
]


def pool_case(xs, ker, strides, pads, ceil, op):
    """a padded MaxPool or AveragePool (count_include_pad=0): one reduction
    per output point reading the input and a load-time table of the window
    cells (0 / -inf to add, or 1 / the window's input cells to multiply),
    no per-run mask or count kernel; both kiln paths against numpy"""
    rng = np.random.default_rng(len(xs) * 7 + sum(ker))
    x = rng.standard_normal(xs).astype(np.float32)
    if op == "MaxPool":
        x.flat[3] = -np.inf  # padding must not win over an input cell of -inf... nor lose to it
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=ker, strides=strides, pads=pads, ceil_mode=ceil)
    data = model(node, [("x", x)])
    check_both(data, {"x": x}, np_pool(x, ker, strides, pads, op == "MaxPool", bool(ceil)))
    kernels = compiled_kernels(data, {"x": x})
    heads = [k.split("\n")[0] for k in kernels.split("kernel ")[1:]]
    red = [h for h in heads if "reduce" in h]
    assert len(red) == 1 and not any(w in kernels for w in ("LOG2", "RECIP", "sum over")), \
        "the pool is not one reduction over the input and a table:\n" + kernels[:3000]


def first_run_search():
    """kiln bench on an ONNX model new to the tuning DB searches its kernels'
    schedules first (KILN_TUNE seconds, as kiln run does for GGUF) and
    records them in the DB"""
    rng = np.random.default_rng(21)
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "conv.onnx")
        with open(f, "wb") as fh:
            fh.write(graph_model(nodes, [("x", x)], [("w", w)]))
        db = os.path.join(d, "tune.db")
        env = dict(os.environ, KILN_TUNE="5", KILN_TUNEDB=db)
        r = subprocess.run([KILN_BIN, "bench", "-m", f, "-t", "1", "-r", "1"], capture_output=True, text=True,
                           env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        m = re.search(r"searched (\d+) kernels, (\d+) candidates", r.stderr)
        assert m and int(m.group(1)) >= 1 and int(m.group(2)) >= 1, "no search:\n" + r.stderr
        assert os.path.exists(db) and os.path.getsize(db) > 0, "nothing recorded:\n" + r.stderr


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
suite.case("onnx channel shuffle -> depthwise conv -> relu -> max pool", shuffle_depthwise, isolate=True)
suite.case("onnx LRN -> max pool: LRN computed once", lrn_maxpool, isolate=True)
suite.case("onnx fire module: bias + Relu and concat rows coalesced", fire_concat, isolate=True)
suite.case("onnx strided pack, stride 2: vector loads", strided_pack, 2, 3, isolate=True)
suite.case("onnx strided pack, stride 3: gathers", strided_pack, 3, 5, isolate=True)
suite.case("onnx relu over NaN and inf", relu_nan, isolate=True)
suite.case("onnx max pool stride 1 over NaN and inf", maxpool_nan, isolate=True)
for spec in POOLS:
    # (AveragePool in ceil mode: ONNX's reference spreads the extra padding
    # over both ends, which np_pool does not; ONNX's node cases cover it)
    for op in ("MaxPool", "AveragePool") if not spec[4] else ("MaxPool",):
        suite.case("onnx %s x%s k%s s%s p%s ceil%d" % ((op,) + spec), pool_case, *spec, op, isolate=True)
for size, beta, c in [(5, 0.75, 8), (4, 1.25, 7), (3, 0.6, 6), (1, 2.0, 3)]:
    suite.case("onnx LRN size %d beta %g channels %d" % (size, beta, c), lrn_case, size, beta, c, isolate=True)
suite.case("onnx kiln bench: the first-run search records", first_run_search, isolate=True)
suite.case("onnx resize/einsum/conv_transpose errors named", errors, isolate=True)
suite.finish()
