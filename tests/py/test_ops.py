"""test_ops.py — every primitive op and every movement view of kiln, run by the
reference interpreter, compared with numpy on random inputs.

What is covered: each op in src/ir/ops.def for every dtype it supports, odd
sizes and size-1 axes, numpy broadcasting, non-contiguous operands (views
feeding ops), symbolic dims bound at run time (one graph, two bindings), random
chains of movement views, GGUF block casts bit-exact against the `gguf` package,
and bad input (each must return the right kiln_status with a message, never
crash: every case runs in a forked child so a crash fails only that case).

Reference values: inputs are drawn already rounded to the dtype under test, the
numpy result is computed in float64 and rounded to the dtype once. Tolerances
per dtype: f32 1e-6 relative, f16 2e-3 (one ulp is 1e-3), bf16 1e-2 (one ulp is
4e-3); integers exact.
"""
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiln_ctypes import (  # noqa: E402
    BF16, ERR_DTYPE, ERR_INVALID, ERR_RANGE, ERR_SHAPE, ERR_UNBOUND, F16, F32, I32, NONE, OK,
    Q4_0, Q4_K, Q5_0, Q6_K, Q8_0, U8, BLOCK_LAYOUT, DTYPE_NAMES, LIB_PATH, STATUS_NAMES, Graph, Suite,
    assert_close, assert_equal, from_bf16, load, round_to, to_bf16, to_storage,
)

FLOATS = (F32, F16, BF16)
ALL = (F32, F16, BF16, I32, U8)
TOL = {F32: (1e-6, 1e-6), F16: (2e-3, 1e-3), BF16: (1e-2, 1e-2), I32: (0, 0), U8: (0, 0)}
NAME = DTYPE_NAMES

suite = Suite("test_ops")
rng = np.random.default_rng(20240611)


def case(name, fn, *args):
    suite.case(name, fn, *args, isolate=True)


# ---------------------------------------------------------------- helpers

def shape_text(shape):
    return ", ".join(str(int(d)) for d in shape)


def rand(shape, t, lo=-3.0, hi=3.0):
    """random values exactly representable in dtype t, as float64"""
    shape = tuple(shape)
    if t == I32:
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(np.float64)
    if t == U8:
        return rng.integers(max(0, int(lo)), int(hi) + 1, size=shape).astype(np.float64)
    return round_to(rng.uniform(lo, hi, size=shape), t)


def feed(g, name, t, vals, shape=None):
    """declare input `name` of dtype t (shape text `shape` or vals' shape) and bind vals"""
    vals = np.asarray(vals, dtype=np.float64)
    x = g.input(name, t, shape if shape is not None else shape_text(vals.shape))
    st = g.bind(name, to_storage(vals, t))
    assert st == OK, "bind %s: %s %s" % (name, STATUS_NAMES[st], g.error())
    return x


def finish(g, y, want_dtype=None, name="y"):
    """mark y as output, check the builder accepted everything, run, return float64 values"""
    if g.status() != OK:
        raise AssertionError("builder error %s: %s" % (STATUS_NAMES[g.status()], g.error()))
    assert y != NONE, "builder returned KILN_NONE without an error"
    if want_dtype is not None:
        got = g.tensor_dtype(y)
        assert got == want_dtype, "result dtype %s, want %s" % (NAME[got], NAME[want_dtype])
    st = g.output(y, name)
    assert st == OK, "kiln_output: %s %s" % (STATUS_NAMES[st], g.error())
    g.run()
    return g.values(name)


def expect(t, got, want, what, rtol=None, atol=None):
    """compare against a float64 reference rounded to dtype t"""
    if t in (I32, U8):
        assert_equal(got, np.asarray(want, dtype=np.float64), what)
        return
    r, a = TOL[t]
    assert_close(got, round_to(want, t), r if rtol is None else rtol, a if atol is None else atol, what)


def saturate(v, t):
    """float -> int conversion as kiln defines it: truncate toward zero, saturate, NaN -> 0"""
    v = np.where(np.isnan(v), 0.0, np.trunc(v))
    if t == I32:
        return np.clip(v, -2147483648.0, 2147483647.0)
    return np.clip(v, 0.0, 255.0)


# ---------------------------------------------------------------- leaves

def t_input_roundtrip(t, shape):
    g = Graph()
    v = rand(shape, t, -100, 100)
    x = feed(g, "x", t, v)
    st = g.output(x, "y")
    assert st == OK, g.error()
    g.run()
    got = g.result("y")
    want = to_storage(v, t)
    assert got.dtype == want.dtype, "storage dtype %s, want %s" % (got.dtype, want.dtype)
    assert_equal(got, want, "input %s %s round trip bits" % (NAME[t], shape))


def t_const(t, value):
    g = Graph()
    c = g.const(value, t)
    assert g.ndim(c) == 0, "const is not 0-d"
    got = finish(g, c, t)
    want = np.array(value, dtype=np.float64)
    if t in (I32, U8):
        want = saturate(want, t)
    expect(t, got, want, "const %r %s" % (value, NAME[t]))


def t_full(t, value, shape):
    g = Graph()
    c = g.full(value, t, list(shape))
    got = finish(g, c, t)
    want = np.full(shape, value, dtype=np.float64)
    if t in (I32, U8):
        want = saturate(want, t)
    expect(t, got, want, "full %r %s %s" % (value, NAME[t], shape))


def t_iota(t, shape, axis):
    g = Graph()
    y = g.iota(t, list(shape), axis)
    got = finish(g, y, t)
    idx = np.arange(shape[axis], dtype=np.float64).reshape([-1 if d == axis else 1 for d in range(len(shape))])
    expect(t, got, np.broadcast_to(idx, shape), "iota %s %s axis %d" % (NAME[t], shape, axis))


def t_iota_symbolic():
    g = Graph()
    y = g.iota(I32, ["seq", 3], 0)
    g.output(y, "y")
    for seq in (4, 1, 7):
        assert g.bind_dim("seq", seq) == OK, g.error()
        g.run()
        got = g.values("y")
        assert_equal(got, np.broadcast_to(np.arange(seq, dtype=np.float64)[:, None], (seq, 3)), "iota seq=%d" % seq)


# ---------------------------------------------------------------- unary

UNARY = {
    "exp2": (np.exp2, (-4.0, 4.0)),
    "log2": (np.log2, (0.05, 40.0)),
    "sin": (np.sin, (-7.0, 7.0)),
    "sqrt": (np.sqrt, (0.0, 50.0)),
    "recip": (lambda v: 1.0 / v, (0.1, 9.0)),
}


def t_unary(op, t, shape, layout):
    fn, (lo, hi) = UNARY[op]
    g = Graph()
    if layout == "dense":
        v = rand(shape, t, lo, hi)
        if op == "recip":
            v = v * rng.choice([-1.0, 1.0], size=v.shape)
        x = feed(g, "x", t, v)
        ref = v
    elif layout == "transposed":  # operand is a transposed view of a (b, a) input
        v = rand(shape[::-1], t, lo, hi)
        x = g.transpose(feed(g, "x", t, v), 0, len(shape) - 1)
        ref = np.swapaxes(v, 0, len(shape) - 1)
    else:  # flipped, strided slice
        big = list(shape)
        big[0] = shape[0] * 2
        v = rand(big, t, lo, hi)
        x = g.flip(g.slice(feed(g, "x", t, v), 0, 0, big[0], 2), 0)
        ref = np.flip(v[0::2], 0)
    y = getattr(g, op)(x)
    got = finish(g, y, t)
    with np.errstate(all="ignore"):
        want = fn(ref)
    expect(t, got, want, "%s %s %s %s" % (op, NAME[t], shape, layout))


def t_unary_special():
    """IEEE edge values in f32: log2(0) = -inf, log2(-1) = NaN, sqrt(-1) = NaN,
    recip(0) = inf, recip(-0) = -inf, exp2(large) = inf"""
    cases = [("log2", [0.0, -1.0, np.inf, 1.0]), ("sqrt", [-1.0, 0.0, np.inf, 4.0]),
             ("recip", [0.0, -0.0, np.inf, 4.0]), ("exp2", [200.0, -200.0, -np.inf, 3.0])]
    for op, vals in cases:
        g = Graph()
        v = np.array(vals, dtype=np.float64)
        y = getattr(g, op)(feed(g, "x", F32, v))
        got = finish(g, y, F32)
        with np.errstate(all="ignore"):
            want = UNARY[op][0](v).astype(np.float32)
        assert_close(got, want, 1e-6, 0, "%s of %s" % (op, vals))
        if op == "recip":
            assert np.signbit(got[1]), "recip(-0) should be -inf"


def t_unary_symbolic():
    """one graph, run twice with different bindings of seq"""
    g = Graph()
    x = g.input("x", F32, "seq, 3")
    y = g.sqrt(x)
    assert g.shape_str(y) == "(seq, 3)", "shape text %r" % g.shape_str(y)
    g.output(y, "y")
    for seq in (5, 2):
        v = rand((seq, 3), F32, 0, 10)
        g.bind("x", to_storage(v, F32))
        assert g.bind_dim("seq", seq) == OK, g.error()
        g.run()
        assert g.output_shape("y") == (seq, 3), "output shape %s" % (g.output_shape("y"),)
        assert_close(g.values("y"), np.sqrt(v).astype(np.float32), 1e-6, 1e-7, "sqrt seq=%d" % seq)


# ---------------------------------------------------------------- binary

def bin_ref(op, a, b, t):
    with np.errstate(all="ignore"):
        if op == "add":
            r = a + b
        elif op == "mul":
            r = a * b
        elif op == "mod":
            r = np.fmod(a, b)
        else:
            r = (a < b).astype(np.float64)
    return r


def bin_values(op, t, sa, sb):
    if t == U8:
        lo, hi = (1, 15) if op in ("add", "mul", "mod") else (0, 9)
        return rand(sa, t, 0, hi), rand(sb, t, lo, hi)
    if t == I32:
        a = rand(sa, t, -1000, 1000)
        b = rand(sb, t, -1000, 1000)
        if op == "mod":
            b = np.where(b == 0, 7.0, b)
        if op == "lt":  # make equal elements likely
            a = rand(sa, t, -3, 3)
            b = rand(sb, t, -3, 3)
        return a, b
    a = rand(sa, t, -8, 8)
    b = rand(sb, t, -8, 8)
    if op == "mod":
        b = round_to(np.where(np.abs(b) < 0.25, 1.5, b), t)
    if op == "lt" and a.shape == b.shape:  # equal pairs must give 0
        b = np.where(rng.random(b.shape) < 0.3, a, b)
    return a, b


def t_binary(op, t, sa, sb):
    g = Graph()
    a, b = bin_values(op, t, sa, sb)
    x = feed(g, "a", t, a)
    y = feed(g, "b", t, b)
    z = getattr(g, op)(x, y)
    out_shape = np.broadcast_shapes(a.shape, b.shape)
    got = finish(g, z, t)
    want = bin_ref(op, a, b, t)
    assert got.shape == out_shape, "shape %s, want %s" % (got.shape, out_shape)
    expect(t, got, want, "%s %s %s %s" % (op, NAME[t], sa, sb))


def t_binary_views(op, t):
    """operands are a transposed view and a flipped, sliced view"""
    g = Graph()
    a, b = bin_values(op, t, (5, 3), (3, 9))
    x = g.transpose(feed(g, "a", t, a), 0, 1)             # (3, 5)
    y = g.flip(g.slice(feed(g, "b", t, b), 1, 1, 9, 2), 0)  # (3, 4) -> need 5 columns
    y = g.pad(y, 1, 0, 1)                                  # (3, 5), last column 0
    z = getattr(g, op)(x, y)
    bb = np.pad(np.flip(b[:, 1:9:2], 0), ((0, 0), (0, 1)))
    if op == "mod":  # the padded zero column would divide by zero: keep it out
        z = g.slice(z, 1, 0, 4, 1)
        got = finish(g, z, t)
        want = bin_ref(op, a.T[:, :4], bb[:, :4], t)
    else:
        got = finish(g, z, t)
        want = bin_ref(op, a.T, bb, t)
    expect(t, got, want, "%s %s on views" % (op, NAME[t]))


def t_binary_scalar(op, t):
    """a 0-d constant operand broadcasts against a tensor"""
    g = Graph()
    a, _ = bin_values(op, t, (4, 3), (1,))
    c = 3.0
    z = getattr(g, op)(feed(g, "a", t, a), g.const(c, t))
    got = finish(g, z, t)
    expect(t, got, bin_ref(op, a, np.full((), c), t), "%s %s with scalar const" % (op, NAME[t]))


def t_binary_symbolic(op):
    g = Graph()
    x = g.input("a", F32, "seq, 4")
    y = g.input("b", F32, "1, 4")
    z = getattr(g, op)(x, y)
    assert g.shape_str(z) == "(seq, 4)", "shape %r" % g.shape_str(z)
    g.output(z, "y")
    b = rand((1, 4), F32, 1, 5)
    g.bind("b", to_storage(b, F32))
    for seq in (3, 6):
        a = rand((seq, 4), F32, -5, 5)
        g.bind("a", to_storage(a, F32))
        g.bind_dim("seq", seq)
        g.run()
        expect(F32, g.values("y"), bin_ref(op, a, b, F32), "%s seq=%d" % (op, seq))


def t_mod_signs():
    """C fmod / % semantics: the result has the sign of the dividend"""
    for t in (F32, I32):
        g = Graph()
        a = np.array([7, -7, 7, -7, 0, 6, -6], dtype=np.float64)
        b = np.array([3, 3, -3, -3, 5, 3, -3], dtype=np.float64)
        z = g.mod(feed(g, "a", t, a), feed(g, "b", t, b))
        got = finish(g, z, t)
        expect(t, got, np.fmod(a, b), "mod signs %s" % NAME[t])


# ---------------------------------------------------------------- reductions

def t_reduce(op, t, shape, axis, layout="dense"):
    g = Graph()
    if t == U8:
        v = rand(shape, t, 0, 9 if op == "sum" else 255)
    elif t == I32:
        v = rand(shape, t, -10000, 10000)
    else:
        v = rand(shape, t, -4, 4)
    if layout == "transposed":
        x = g.permute(feed(g, "x", t, np.ascontiguousarray(np.moveaxis(v, 0, -1))), [len(shape) - 1] + list(range(len(shape) - 1)))
    else:
        x = feed(g, "x", t, v)
    y = getattr(g, op)(x, axis)
    got = finish(g, y, t)
    want = v.sum(axis=axis) if op == "sum" else v.max(axis=axis)
    if op == "sum" and t in FLOATS:
        # the accumulation may round per step in the dtype: bound by the sum of |v|
        r, a = TOL[t]
        scale = np.abs(v).sum(axis=axis)
        assert_close(got, round_to(want, t), r, a + r * scale.max() * 2, "sum %s %s axis %d %s" % (NAME[t], shape, axis, layout))
    else:
        expect(t, got, want, "%s %s %s axis %d %s" % (op, NAME[t], shape, axis, layout))


def t_reduce_symbolic(op):
    g = Graph()
    x = g.input("x", F32, "3, seq")
    y = getattr(g, op)(x, 1)
    g.output(y, "y")
    for seq in (5, 1, 9):
        v = rand((3, seq), F32, -4, 4)
        g.bind("x", to_storage(v, F32))
        g.bind_dim("seq", seq)
        g.run()
        want = v.sum(axis=1) if op == "sum" else v.max(axis=1)
        assert_close(g.values("y"), want.astype(np.float32), 1e-5, 1e-6, "%s seq=%d" % (op, seq))


def t_max_neg():
    """MAX of all-negative rows must not be 0 (a wrong identity element)"""
    g = Graph()
    v = -rand((4, 6), F32, 1, 9) - 1
    got = finish(g, g.max(feed(g, "x", F32, v), 1), F32)
    expect(F32, got, v.max(axis=1), "max of negatives")


# ---------------------------------------------------------------- gather / scatter

def t_gather(t, tshape, ishape, view=False):
    g = Graph()
    table = rand(tshape, t, -50, 50) if t != U8 else rand(tshape, t, 0, 255)
    idx = rng.integers(0, tshape[0], size=ishape).astype(np.float64)
    if view:  # table is a transposed view of its input
        tb = feed(g, "table", t, np.ascontiguousarray(np.swapaxes(table, 0, 1)))
        tb = g.transpose(tb, 0, 1)
    else:
        tb = feed(g, "table", t, table)
    y = g.gather(tb, feed(g, "idx", I32, idx))
    got = finish(g, y, t)
    want = table[idx.astype(np.int64)]
    assert got.shape == want.shape, "gather shape %s, want %s" % (got.shape, want.shape)
    expect(t, got, want, "gather %s %s by %s" % (NAME[t], tshape, ishape))


def t_gather_symbolic():
    g = Graph()
    tv = rand((7, 3), F32)
    tb = feed(g, "table", F32, tv)
    ids = g.input("idx", I32, "n")
    g.output(g.gather(tb, ids), "y")
    for n in (4, 1):
        idx = rng.integers(0, 7, size=(n,)).astype(np.float64)
        g.bind("idx", to_storage(idx, I32))
        g.bind_dim("n", n)
        g.run()
        assert_equal(g.values("y"), tv[idx.astype(np.int64)], "gather n=%d" % n)


def t_scatter(t, rshape, n):
    g = Graph()
    state0 = rand(rshape, t, -50, 50) if t != U8 else rand(rshape, t, 0, 255)
    idx = rng.permutation(rshape[0])[:n].astype(np.float64)
    vals = rand((n,) + tuple(rshape[1:]), t, -50, 50) if t != U8 else rand((n,) + tuple(rshape[1:]), t, 0, 255)
    s = g.state("cache", t, shape_text(rshape))
    buf = to_storage(state0, t)
    assert g.bind("cache", buf) == OK, g.error()
    y = g.scatter(s, feed(g, "idx", I32, idx), feed(g, "vals", t, vals))
    got = finish(g, y, t)
    want = state0.copy()
    want[idx.astype(np.int64)] = vals
    expect(t, got, want, "scatter result %s %s n=%d" % (NAME[t], rshape, n))
    stored = from_bf16(buf).astype(np.float64) if t == BF16 else buf.astype(np.float64)
    expect(t, stored, want, "scatter written back into the state buffer")


def t_scatter_twice():
    """the written-back state is what the next run reads (a KV cache filling up)"""
    g = Graph()
    cache = np.zeros((6, 2), dtype=np.float32)
    s = g.state("cache", F32, "6, 2")
    g.bind("cache", cache)
    pos = g.input("pos", I32, "n")
    val = g.input("val", F32, "n, 2")
    g.output(g.sum(g.sum(g.scatter(s, pos, val), 1), 0), "total")
    want = np.zeros((6, 2))
    for step, rows in enumerate(([0, 1], [2], [5, 3])):
        v = rand((len(rows), 2), F32, 1, 5)
        want[rows] = v
        g.bind("pos", np.array(rows, dtype=np.int32))
        g.bind("val", to_storage(v, F32))
        g.bind_dim("n", len(rows))
        g.run()
        assert_close(cache, want.astype(np.float32), 0, 0, "cache after step %d" % step)
        assert_close(g.values("total"), np.array(want.sum()), 1e-5, 1e-5, "total after step %d" % step)


def t_scatter_input_untouched():
    """SCATTER into a plain input returns the update but leaves the caller's buffer alone"""
    g = Graph()
    st0 = rand((4, 3), F32)
    x = feed(g, "x", F32, st0)
    buf = g._keep["x"].copy()
    vals = rand((1, 3), F32)
    y = g.scatter(x, feed(g, "idx", I32, [2]), feed(g, "v", F32, vals))
    got = finish(g, y, F32)
    want = st0.copy()
    want[2] = vals[0]
    expect(F32, got, want, "scatter result")
    assert_equal(g._keep["x"], buf, "plain input buffer")


# ---------------------------------------------------------------- cast

def cast_values(src, dst):
    n = 41
    if src == U8:
        return rand((n,), U8, 0, 255)
    if src == I32:
        v = rand((n,), I32, -70000, 70000)
        v[:6] = [0, -1, 255, 256, 2147483647, -2147483648]
        return v
    v = rand((n,), src, -300, 300)
    special = [0.0, -0.0, 0.5, -0.5, 1.999, -1.999, 255.5, 256.0, -1e9, 1e9, 65504.0, 70000.0]
    v[:len(special)] = round_to(np.array(special), src)
    return v


def t_cast(src, dst):
    g = Graph()
    v = cast_values(src, dst)
    y = g.cast(feed(g, "x", src, v), dst)
    got = finish(g, y, dst)
    if dst in (I32, U8):
        want = saturate(v, dst)
        assert_equal(got, want, "cast %s -> %s" % (NAME[src], NAME[dst]))
    else:
        # one rounding from the exact value (int -> float too)
        want = round_to(v, dst)
        assert_close(got, want, 0, 0, "cast %s -> %s" % (NAME[src], NAME[dst]))


def t_cast_nan_inf():
    g = Graph()
    v = np.array([np.nan, np.inf, -np.inf, 3e38, -3e38], dtype=np.float64)
    x = feed(g, "x", F32, v)
    g.output(g.cast(x, I32), "i")
    g.output(g.cast(x, U8), "u")
    g.output(g.cast(x, F16), "h")
    g.output(g.cast(x, BF16), "b")
    assert g.status() == OK, g.error()
    g.run()
    assert_equal(g.values("i"), np.array([0, 2147483647, -2147483648, 2147483647, -2147483648], dtype=np.float64), "f32->i32")
    assert_equal(g.values("u"), np.array([0, 255, 0, 255, 0], dtype=np.float64), "f32->u8")
    h = g.values("h")
    assert np.isnan(h[0]) and list(h[1:]) == [np.inf, -np.inf, np.inf, -np.inf], "f32->f16 %s" % h
    b = g.values("b")
    assert np.isnan(b[0]) and list(b[1:3]) == [np.inf, -np.inf], "f32->bf16 %s" % b
    assert_close(b[3:], round_to(v[3:], BF16), 0, 0, "f32->bf16 large")


def t_bf16_rounding():
    """f32 -> bf16 rounds to nearest, ties to even (ties built explicitly)"""
    base = np.array([1.0, 1.0078125, -2.0, 3.0], dtype=np.float32)  # bf16-exact
    bits = base.view(np.uint32)
    ties = (bits + np.uint32(0x8000)).view(np.float32)  # exactly half an ulp above
    above = (bits + np.uint32(0x8001)).view(np.float32)
    v = np.concatenate([ties, above]).astype(np.float64)
    g = Graph()
    got = g.cast(feed(g, "x", F32, v), BF16)
    g.output(got, "y")
    g.run()
    assert_equal(g.result("y"), to_bf16(v.astype(np.float32)), "bf16 bits")


def _gguf():
    import gguf
    return gguf


GGUF_T = {Q8_0: "Q8_0", Q4_0: "Q4_0", Q4_K: "Q4_K", Q6_K: "Q6_K", Q5_0: "Q5_0"}


def t_quantize(q, src, rows, cols):
    """CAST float -> block format: bytes equal to gguf.quants.quantize"""
    gguf = _gguf()
    g = Graph()
    v = rand((rows, cols), src, -4, 4)
    v[0, :5] = 0.0
    if rows > 1:
        v[1, :32] = 0.0  # an all-zero block (scale 0)
    y = g.cast(feed(g, "x", src, v), q)
    if g.status() != OK:
        raise AssertionError("builder: %s" % g.error())
    g.output(y, "q")
    g.run()
    got = g.result("q").reshape(-1)
    want = gguf.quants.quantize(v.astype(np.float32), getattr(gguf.GGMLQuantizationType, GGUF_T[q])).reshape(-1)
    assert_equal(got, want, "%s bytes of %s (%d, %d)" % (NAME[q], NAME[src], rows, cols))


def random_blocks(q, nblocks):
    """valid random block bytes: scale fields set to small finite f16 values"""
    block, nbytes = BLOCK_LAYOUT[q]
    raw = rng.integers(0, 256, size=(nblocks, nbytes), dtype=np.uint8)
    d = np.float16(rng.uniform(0.001, 0.05, size=(nblocks, 2)).astype(np.float16))
    dv = d.view(np.uint8).reshape(nblocks, 4)
    if q in (Q8_0, Q4_0, Q5_0):
        raw[:, 0:2] = dv[:, 0:2]
    elif q == Q4_K:
        raw[:, 0:4] = dv  # d and dmin
    else:
        raw[:, nbytes - 2:nbytes] = dv[:, 0:2]
    return raw, block


def t_dequantize(q, dst, rows, blocks_per_row):
    """CAST block format -> float: values equal to gguf.quants.dequantize"""
    gguf = _gguf()
    raw, block = random_blocks(q, rows * blocks_per_row)
    cols = block * blocks_per_row
    g = Graph()
    x = g.input("w", q, "%d, %d" % (rows, cols))
    assert g.bind("w", np.ascontiguousarray(raw.reshape(-1))) == OK, g.error()
    got = finish(g, g.cast(x, dst), dst)
    want = gguf.quants.dequantize(raw.reshape(rows, -1), getattr(gguf.GGMLQuantizationType, GGUF_T[q]))
    want = want.reshape(rows, cols).astype(np.float64)
    if dst == F32:
        assert_close(got, want, 0, 0, "%s -> f32" % NAME[q])
    else:
        assert_close(got, round_to(want, dst), 0, 0, "%s -> %s" % (NAME[q], NAME[dst]))


def t_quant_roundtrip_symbolic():
    """q8_0 round trip on a symbolic row count: error within half a step of each block"""
    g = Graph()
    x = g.input("x", F32, "rows, 64")
    back = g.cast(g.cast(x, Q8_0), F32)
    g.output(back, "y")
    for rows in (3, 1):
        v = rand((rows, 64), F32, -2, 2)
        g.bind("x", to_storage(v, F32))
        g.bind_dim("rows", rows)
        g.run()
        amax = np.abs(v.reshape(rows, 2, 32)).max(axis=2, keepdims=True)
        step = np.broadcast_to(amax / 127.0, (rows, 2, 32)).reshape(rows, 64)
        err = np.abs(g.values("y") - v)
        # half a step, plus |q| <= 127 times the f16 rounding of the scale
        assert (err <= step * (0.5 + 127 * 2.0 ** -11 * 1.01) + 1e-7).all(), "rows=%d max err/step %g" % (rows, (err / step).max())


def t_quant_bad_cols():
    """the quantised axis must be a multiple of the block size"""
    g = Graph()
    x = g.input("x", F32, "2, 40")
    y = g.cast(x, Q8_0)
    assert y == NONE and g.status() != OK, "cast of (2, 40) to q8_0 accepted"
    assert g.error(), "no message"


# ---------------------------------------------------------------- contiguous

def t_contiguous(t, how):
    g = Graph()
    v = rand((4, 5, 3), t, -100, 100) if t != U8 else rand((4, 5, 3), t, 0, 255)
    x = feed(g, "x", t, v)
    if how == "permute":
        x, ref = g.permute(x, [2, 0, 1]), np.transpose(v, [2, 0, 1])
    elif how == "slice":
        x, ref = g.slice(x, 1, 1, 5, 3), v[:, 1:5:3]
    elif how == "expand":
        x = g.expand(g.unsqueeze(x, 1), [4, 2, 5, 3])
        ref = np.broadcast_to(v[:, None], (4, 2, 5, 3))
    else:
        x, ref = g.pad(g.flip(x, 2), 0, 1, 2), np.pad(np.flip(v, 2), ((1, 2), (0, 0), (0, 0)))
    y = g.contiguous(x)
    got = finish(g, y, t)
    expect(t, got, ref, "contiguous %s %s" % (NAME[t], how))


# ---------------------------------------------------------------- movement views

def np_window(a, axis, size, stride, dilation):
    n = a.shape[axis]
    nw = (n - dilation * (size - 1) - 1) // stride + 1
    idx = np.arange(nw)[:, None] * stride + np.arange(size)[None, :] * dilation
    out = np.take(a, idx.reshape(-1), axis=axis)
    return out.reshape(a.shape[:axis] + (nw, size) + a.shape[axis + 1:])


def view_case(build, ref, shape, what):
    """build(g, x) -> tensor; ref(v) -> numpy; the result is read directly and
    also after an ADD with itself (the view feeding a compute op)"""
    g = Graph()
    v = np.arange(1, int(np.prod(shape)) + 1, dtype=np.float64).reshape(shape)
    rng.shuffle(v.reshape(-1))
    x = feed(g, "x", F32, v)
    y = build(g, x)
    if g.status() != OK:
        raise AssertionError("builder: %s" % g.error())
    want = ref(v)
    g.output(y, "view")
    g.output(g.add(y, y), "twice")
    assert g.status() == OK, g.error()
    g.run()
    assert_equal(g.values("view"), want, what)
    assert_equal(g.values("twice"), 2 * want, what + " (+ itself)")


VIEW_CASES = [
    ("reshape split", (6, 4), lambda g, x: g.reshape(x, [2, 3, 4]), lambda v: v.reshape(2, 3, 4)),
    ("reshape merge", (2, 3, 5), lambda g, x: g.reshape(x, [6, 5]), lambda v: v.reshape(6, 5)),
    ("reshape to 1-d", (3, 1, 5), lambda g, x: g.reshape(x, [15]), lambda v: v.reshape(15)),
    ("reshape str", (4, 6), lambda g, x: g.reshape_str(x, "2, 12"), lambda v: v.reshape(2, 12)),
    ("reshape of transposed", (3, 4), lambda g, x: g.reshape(g.transpose(x, 0, 1), [2, 6]), lambda v: v.T.reshape(2, 6)),
    ("reshape of padded", (3, 3), lambda g, x: g.reshape(g.pad(x, 1, 1, 0), [2, 6]), lambda v: np.pad(v, ((0, 0), (1, 0))).reshape(2, 6)),
    ("reshape of sliced", (5, 6), lambda g, x: g.reshape(g.slice(x, 1, 1, 5, 1), [10, 2]), lambda v: v[:, 1:5].reshape(10, 2)),
    ("reshape of flipped", (4, 3), lambda g, x: g.reshape(g.flip(x, 1), [3, 4]), lambda v: np.flip(v, 1).reshape(3, 4)),
    ("reshape of expanded", (3, 1), lambda g, x: g.reshape(g.expand(x, [3, 4]), [2, 6]), lambda v: np.broadcast_to(v, (3, 4)).reshape(2, 6)),
    ("permute 3d", (2, 3, 4), lambda g, x: g.permute(x, [2, 0, 1]), lambda v: np.transpose(v, [2, 0, 1])),
    ("permute 4d", (2, 1, 3, 5), lambda g, x: g.permute(x, [3, 1, 0, 2]), lambda v: np.transpose(v, [3, 1, 0, 2])),
    ("transpose", (3, 7), lambda g, x: g.transpose(x, 0, 1), lambda v: v.T),
    ("transpose 3d outer", (2, 3, 4), lambda g, x: g.transpose(x, 0, 2), lambda v: np.swapaxes(v, 0, 2)),
    ("expand middle", (3, 1, 2), lambda g, x: g.expand(x, [3, 5, 2]), lambda v: np.broadcast_to(v, (3, 5, 2))),
    ("expand two axes", (1, 4, 1), lambda g, x: g.expand(x, [3, 4, 2]), lambda v: np.broadcast_to(v, (3, 4, 2))),
    ("slice start", (7, 3), lambda g, x: g.slice(x, 0, 2, 7, 1), lambda v: v[2:7]),
    ("slice step 2", (9, 2), lambda g, x: g.slice(x, 0, 1, 8, 2), lambda v: v[1:8:2]),
    ("slice step 3 inner", (2, 10), lambda g, x: g.slice(x, 1, 0, 10, 3), lambda v: v[:, 0:10:3]),
    ("slice step > len", (2, 5), lambda g, x: g.slice(x, 1, 1, 5, 7), lambda v: v[:, 1:5:7]),
    ("slice empty", (3, 4), lambda g, x: g.slice(x, 1, 2, 2, 1), lambda v: v[:, 2:2]),
    ("pad before after", (3, 2), lambda g, x: g.pad(x, 0, 2, 1), lambda v: np.pad(v, ((2, 1), (0, 0)))),
    ("pad inner", (2, 3), lambda g, x: g.pad(x, 1, 0, 3), lambda v: np.pad(v, ((0, 0), (0, 3)))),
    ("pad twice", (2, 2), lambda g, x: g.pad(g.pad(x, 0, 1, 1), 1, 1, 2), lambda v: np.pad(v, ((1, 1), (1, 2)))),
    ("pad then slice", (4, 3), lambda g, x: g.slice(g.pad(x, 0, 2, 2), 0, 1, 7, 2), lambda v: np.pad(v, ((2, 2), (0, 0)))[1:7:2]),
    ("window basic", (7,), lambda g, x: g.window(x, 0, 3, 1, 1), lambda v: np_window(v, 0, 3, 1, 1)),
    ("window stride 2", (2, 9), lambda g, x: g.window(x, 1, 3, 2, 1), lambda v: np_window(v, 1, 3, 2, 1)),
    ("window dilation 2", (10, 2), lambda g, x: g.window(x, 0, 3, 1, 2), lambda v: np_window(v, 0, 3, 1, 2)),
    ("window stride dilation", (3, 13), lambda g, x: g.window(x, 1, 4, 3, 2), lambda v: np_window(v, 1, 4, 3, 2)),
    ("window of padded", (6,), lambda g, x: g.window(g.pad(x, 0, 1, 1), 0, 3, 1, 1), lambda v: np_window(np.pad(v, (1, 1)), 0, 3, 1, 1)),
    ("flip 0", (4, 3), lambda g, x: g.flip(x, 0), lambda v: np.flip(v, 0)),
    ("flip 1", (4, 3), lambda g, x: g.flip(x, 1), lambda v: np.flip(v, 1)),
    ("flip twice", (4, 3), lambda g, x: g.flip(g.flip(x, 1), 1), lambda v: v),
    ("flip of slice", (9,), lambda g, x: g.flip(g.slice(x, 0, 1, 9, 3), 0), lambda v: np.flip(v[1:9:3], 0)),
    ("unsqueeze 0", (3, 4), lambda g, x: g.unsqueeze(x, 0), lambda v: v[None]),
    ("unsqueeze mid", (3, 4), lambda g, x: g.unsqueeze(x, 1), lambda v: v[:, None]),
    ("unsqueeze end", (3, 4), lambda g, x: g.unsqueeze(x, 2), lambda v: v[:, :, None]),
    ("squeeze", (3, 1, 4), lambda g, x: g.squeeze(x, 1), lambda v: v[:, 0]),
    ("squeeze to scalar", (1,), lambda g, x: g.squeeze(x, 0), lambda v: v.reshape(())),
    ("unsqueeze expand squeeze", (3,), lambda g, x: g.squeeze(g.expand(g.unsqueeze(x, 0), [1, 3]), 0), lambda v: v),
]


def t_view_symbolic():
    """slice/pad/window on a symbolic axis, one graph, two bindings"""
    g = Graph()
    x = g.input("x", F32, "seq, 2")
    a = g.slice(x, 0, 1, "seq", 2)
    b = g.pad(x, 0, 1, 2)
    c = g.window(x, 0, 2, 1, 1)
    d = g.slice(x, 0, "seq-2", "seq", 1)
    for nm, t in (("a", a), ("b", b), ("c", c), ("d", d)):
        assert g.output(t, nm) == OK, g.error()
    for seq in (6, 3):
        v = rand((seq, 2), F32)
        g.bind("x", to_storage(v, F32))
        g.bind_dim("seq", seq)
        g.run()
        assert_equal(g.values("a"), v[1:seq:2], "slice seq=%d" % seq)
        assert_equal(g.values("b"), np.pad(v, ((1, 2), (0, 0))), "pad seq=%d" % seq)
        assert_equal(g.values("c"), np_window(v, 0, 2, 1, 1), "window seq=%d" % seq)
        assert_equal(g.values("d"), v[seq - 2:], "tail slice seq=%d" % seq)


# random chains of movement ops

def random_chain(seed):
    r = np.random.default_rng(seed)
    nd = int(r.integers(1, 5))
    shape = tuple(int(s) for s in r.integers(1, 6, size=nd))
    steps = []
    cur = shape
    for _ in range(int(r.integers(1, 7))):
        ops = ["permute", "transpose", "reshape", "slice", "pad", "flip", "unsqueeze", "window"]
        if 1 in cur:
            ops += ["squeeze", "expand", "expand"]
        op = ops[int(r.integers(len(ops)))]
        n = len(cur)
        size = int(np.prod(cur))
        if op == "permute":
            p = [int(i) for i in r.permutation(n)]
            steps.append((op, p))
            cur = tuple(cur[i] for i in p)
        elif op == "transpose":
            a, b = int(r.integers(n)), int(r.integers(n))
            steps.append((op, a, b))
            c = list(cur)
            c[a], c[b] = c[b], c[a]
            cur = tuple(c)
        elif op == "reshape":
            if size == 0:
                continue
            # a random factorisation of the element count into 1..4 dims
            dims = []
            rest = size
            for _ in range(int(r.integers(0, 3))):
                divs = [d for d in range(1, rest + 1) if rest % d == 0]
                d = divs[int(r.integers(len(divs)))]
                dims.append(d)
                rest //= d
            dims.append(rest)
            r.shuffle(dims)
            steps.append((op, [int(d) for d in dims]))
            cur = tuple(int(d) for d in dims)
        elif op == "slice":
            ax = int(r.integers(n))
            if cur[ax] == 0:
                continue
            st = int(r.integers(0, cur[ax]))
            sp = int(r.integers(st + 1, cur[ax] + 1))
            step = int(r.integers(1, 4))
            steps.append((op, ax, st, sp, step))
            c = list(cur)
            c[ax] = len(range(st, sp, step))
            cur = tuple(c)
        elif op == "pad":
            ax = int(r.integers(n))
            b, a = int(r.integers(0, 3)), int(r.integers(0, 3))
            steps.append((op, ax, b, a))
            c = list(cur)
            c[ax] += a + b
            cur = tuple(c)
        elif op == "flip":
            ax = int(r.integers(n))
            steps.append((op, ax))
        elif op == "unsqueeze":
            if n >= 6:
                continue
            ax = int(r.integers(n + 1))
            steps.append((op, ax))
            cur = cur[:ax] + (1,) + cur[ax:]
        elif op == "squeeze":
            ones = [i for i, d in enumerate(cur) if d == 1]
            ax = ones[int(r.integers(len(ones)))]
            steps.append((op, ax))
            cur = cur[:ax] + cur[ax + 1:]
        elif op == "expand":
            ones = [i for i, d in enumerate(cur) if d == 1]
            ax = ones[int(r.integers(len(ones)))]
            c = list(cur)
            c[ax] = int(r.integers(2, 4))
            steps.append((op, c))
            cur = tuple(c)
        elif op == "window":
            ax = int(r.integers(n))
            if n >= 6 or cur[ax] < 2:
                continue
            dil = int(r.integers(1, 3))
            sz = int(r.integers(1, (cur[ax] - 1) // dil + 2))
            sz = max(1, min(sz, (cur[ax] - 1) // dil + 1))
            stride = int(r.integers(1, 3))
            steps.append((op, ax, sz, stride, dil))
            nw = (cur[ax] - dil * (sz - 1) - 1) // stride + 1
            cur = cur[:ax] + (nw, sz) + cur[ax + 1:]
        if int(np.prod(cur)) > 4000:
            break
    return shape, steps, int(r.integers(3))


def apply_np(v, steps):
    for s in steps:
        op = s[0]
        if op == "permute":
            v = np.transpose(v, s[1])
        elif op == "transpose":
            v = np.swapaxes(v, s[1], s[2])
        elif op == "reshape":
            v = np.reshape(v, s[1])
        elif op == "slice":
            sl = [slice(None)] * v.ndim
            sl[s[1]] = slice(s[2], s[3], s[4])
            v = v[tuple(sl)]
        elif op == "pad":
            pw = [(0, 0)] * v.ndim
            pw[s[1]] = (s[2], s[3])
            v = np.pad(v, pw)
        elif op == "flip":
            v = np.flip(v, s[1])
        elif op == "unsqueeze":
            v = np.expand_dims(v, s[1])
        elif op == "squeeze":
            v = np.squeeze(v, s[1])
        elif op == "expand":
            v = np.broadcast_to(v, s[1])
        elif op == "window":
            v = np_window(v, s[1], s[2], s[3], s[4])
    return v


def apply_kiln(g, x, steps):
    for s in steps:
        op = s[0]
        if op == "permute":
            x = g.permute(x, s[1])
        elif op == "transpose":
            x = g.transpose(x, s[1], s[2])
        elif op == "reshape":
            x = g.reshape(x, s[1])
        elif op == "slice":
            x = g.slice(x, s[1], s[2], s[3], s[4])
        elif op == "pad":
            x = g.pad(x, s[1], s[2], s[3])
        elif op == "flip":
            x = g.flip(x, s[1])
        elif op == "unsqueeze":
            x = g.unsqueeze(x, s[1])
        elif op == "squeeze":
            x = g.squeeze(x, s[1])
        elif op == "expand":
            x = g.expand(x, s[1])
        elif op == "window":
            x = g.window(x, s[1], s[2], s[3], s[4])
    return x


def t_chain(seed):
    shape, steps, sink = random_chain(seed)
    v = np.arange(1, int(np.prod(shape)) + 1, dtype=np.float64).reshape(shape)
    want = apply_np(v, steps)
    g = Graph()
    x = feed(g, "x", F32, v)
    y = apply_kiln(g, x, steps)
    if g.status() != OK:
        raise AssertionError("builder on %s %s: %s" % (shape, steps, g.error()))
    if sink == 1:
        y = g.contiguous(y)
    elif sink == 2:
        y = g.mul(y, g.const(2.0, F32))
        want = want * 2
    got = finish(g, y, F32)
    assert_equal(got, want, "chain %s from %s (sink %d)" % (steps, shape, sink))


# ---------------------------------------------------------------- bad input

def expect_builder_error(g, result, statuses, words=()):
    st = g.status()
    assert result == NONE, "builder call returned %d, want KILN_NONE" % result
    if isinstance(statuses, int):
        statuses = (statuses,)
    assert st in statuses, "status %s, want %s (%s)" % (STATUS_NAMES[st], "/".join(STATUS_NAMES[s] for s in statuses), g.error())
    msg = g.error()
    assert msg, "empty error message"
    for w in words:
        assert w.lower() in msg.lower(), "message %r does not mention %r" % (msg, w)
    return msg


def e_add_shapes():
    g = Graph()
    a = g.input("a", F32, "3, 4")
    b = g.input("b", F32, "5, 4")
    expect_builder_error(g, g.add(a, b), ERR_SHAPE, ("add", "(3, 4)", "(5, 4)"))


def e_add_shapes_symbolic():
    g = Graph()
    a = g.input("a", F32, "seq, 4")
    b = g.input("b", F32, "seq+1, 4")
    expect_builder_error(g, g.mul(a, b), ERR_SHAPE, ("mul", g.shape_str(a), g.shape_str(b)))


def e_exp2_int():
    g = Graph()
    x = g.input("x", I32, "4")
    expect_builder_error(g, g.exp2(x), ERR_DTYPE, ("exp2", "i32"))


def e_unary_u8():
    g = Graph()
    x = g.input("x", U8, "4")
    expect_builder_error(g, g.sin(x), ERR_DTYPE, ("sin",))


def e_add_mixed():
    g = Graph()
    a = g.input("a", F32, "4")
    b = g.input("b", I32, "4")
    expect_builder_error(g, g.add(a, b), ERR_DTYPE, ("add", "f32", "i32"))


def e_block_op():
    g = Graph()
    a = g.input("a", Q8_0, "2, 32")
    expect_builder_error(g, g.add(a, a), ERR_DTYPE)


def e_gather_float_idx():
    g = Graph()
    t = g.input("t", F32, "5, 2")
    i = g.input("i", F32, "3")
    expect_builder_error(g, g.gather(t, i), ERR_DTYPE, ("gather",))


def e_bad_axis_sum():
    g = Graph()
    x = g.input("x", F32, "3, 4")
    expect_builder_error(g, g.sum(x, 2), (ERR_INVALID, ERR_SHAPE), ("sum",))


def e_bad_axis_views():
    for name, call in (("transpose", lambda g, x: g.transpose(x, 0, 5)),
                       ("flip", lambda g, x: g.flip(x, 2)),
                       ("max", lambda g, x: g.max(x, -3)),
                       ("slice", lambda g, x: g.slice(x, 9, 0, 1, 1)),
                       ("permute", lambda g, x: g.permute(x, [0, 0])),
                       ("squeeze", lambda g, x: g.squeeze(x, 0)),
                       ("unsqueeze", lambda g, x: g.unsqueeze(x, 4)),
                       ("window", lambda g, x: g.window(x, 1, 9, 1, 1)),
                       ("iota", lambda g, x: g.iota(I32, [3], 1))):
        g = Graph()
        x = g.input("x", F32, "3, 4")
        r = call(g, x)
        try:
            expect_builder_error(g, r, (ERR_INVALID, ERR_SHAPE))
        except AssertionError as e:
            raise AssertionError("%s: %s" % (name, e))


def e_bad_reshape_expand():
    g = Graph()
    x = g.input("x", F32, "3, 4")
    expect_builder_error(g, g.reshape(x, [5, 2]), ERR_SHAPE, ("reshape",))
    g = Graph()
    x = g.input("x", F32, "3, 4")
    expect_builder_error(g, g.expand(x, [3, 8]), ERR_SHAPE, ("expand",))


def e_bad_slice_step():
    g = Graph()
    x = g.input("x", F32, "6")
    expect_builder_error(g, g.slice(x, 0, 0, 6, 0), (ERR_INVALID, ERR_SHAPE), ("slice",))


def e_bad_shape_text():
    g = Graph()
    x = g.input("x", F32, "3,, 4")
    expect_builder_error(g, x, (ERR_INVALID, ERR_SHAPE))


def e_bad_tensor_id():
    g = Graph()
    x = g.input("x", F32, "3")
    expect_builder_error(g, g.add(x, 12345), ERR_INVALID)


def e_sticky():
    g = Graph()
    a = g.input("a", F32, "3, 4")
    b = g.input("b", F32, "5, 4")
    first = expect_builder_error(g, g.add(a, b), ERR_SHAPE)
    c = g.exp2(a)  # valid on its own
    assert c == NONE, "builder call after an error returned %d" % c
    i = g.input("later", F32, "2")
    assert i == NONE, "input after an error returned %d" % i
    g.exp2(g.input("z", I32, "2"))  # would be a second, different error
    assert g.error() == first, "first message not kept: %r then %r" % (first, g.error())
    assert g.status() == ERR_SHAPE, "status changed to %s" % STATUS_NAMES[g.status()]
    st = g.output(a, "y")
    assert st != OK, "kiln_output after a builder error returned OK"
    st = g.eval_reference()
    assert st != OK, "a run after a builder error returned OK"


def e_unbound_symbol():
    g = Graph()
    x = g.input("x", F32, "seq, 4")
    g.output(g.exp2(x), "y")
    g.bind("x", np.zeros(8, dtype=np.float32))
    st = g.eval_reference()
    assert st == ERR_UNBOUND, "status %s (%s)" % (STATUS_NAMES[st], g.error())
    assert "seq" in g.error(), "message %r does not name seq" % g.error()


def e_input_not_bound():
    g = Graph()
    x = g.input("x", F32, "4")
    w = g.input("weights", F32, "4")
    g.output(g.add(x, w), "y")
    g.bind("x", np.zeros(4, dtype=np.float32))
    st = g.eval_reference()
    assert st == ERR_UNBOUND, "status %s (%s)" % (STATUS_NAMES[st], g.error())
    assert "weights" in g.error(), "message %r does not name the input" % g.error()


def e_wrong_size():
    g = Graph()
    x = g.input("xin_buffer", F32, "seq, 4")
    g.output(g.exp2(x), "y")
    g.bind_dim("seq", 3)
    arr = np.zeros(12, dtype=np.float32)
    st = g.bind_raw("xin_buffer", arr, 11 * 4)
    if st == OK:  # the size can only be checked once seq is known: at run time
        st = g.eval_reference()
    assert st in (ERR_SHAPE, ERR_INVALID), "status %s (%s)" % (STATUS_NAMES[st], g.error())
    msg = g.error()
    assert "xin_buffer" in msg and ("48" in msg or "44" in msg), "message %r names neither the input nor the sizes" % msg


def e_wrong_size_then_fix():
    """after a failed run, binding the right buffer makes the next run succeed"""
    g = Graph()
    x = g.input("x", F32, "4")
    g.output(g.exp2(x), "y")
    g.bind_raw("x", np.zeros(3, dtype=np.float32), 12)
    st = g.eval_reference()
    assert st != OK, "a 12-byte buffer for a (4) f32 input was accepted"
    v = rand((4,), F32)
    g.bind("x", to_storage(v, F32))
    st = g.eval_reference()
    assert st == OK, "run after fixing the binding: %s %s" % (STATUS_NAMES[st], g.error())
    assert_close(g.values("y"), np.exp2(v).astype(np.float32), 1e-6, 0, "exp2 after recovery")


def e_gather_range():
    for bad in (5, -1):
        g = Graph()
        t = feed(g, "t", F32, rand((5, 2), F32))
        i = feed(g, "i", I32, [0, bad, 1])
        g.output(g.gather(t, i), "y")
        st = g.eval_reference()
        assert st == ERR_RANGE, "index %d: status %s (%s)" % (bad, STATUS_NAMES[st], g.error())
        assert str(bad) in g.error(), "message %r does not show the index %d" % (g.error(), bad)


def e_scatter_range():
    for bad in (4, -2):
        g = Graph()
        cache = np.zeros((4, 2), dtype=np.float32)
        s = g.state("cache", F32, "4, 2")
        g.bind("cache", cache)
        y = g.scatter(s, feed(g, "i", I32, [bad]), feed(g, "v", F32, np.ones((1, 2))))
        g.output(y, "y")
        st = g.eval_reference()
        assert st == ERR_RANGE, "index %d: status %s (%s)" % (bad, STATUS_NAMES[st], g.error())
        assert g.error(), "no message"
        assert_equal(cache, np.zeros((4, 2), dtype=np.float32), "state after a failed scatter")


def e_scatter_shapes():
    g = Graph()
    s = g.state("cache", F32, "4, 2")
    i = g.input("i", I32, "2")
    v = g.input("v", F32, "2, 3")
    expect_builder_error(g, g.scatter(s, i, v), ERR_SHAPE, ("scatter",))


def e_output_none():
    g = Graph()
    st = g.lib.kiln_output(g.ptr, NONE, b"y")
    assert st != OK, "kiln_output(KILN_NONE) returned OK"
    assert g.error(), "no message"


def e_read_unknown_output():
    g = Graph()
    x = feed(g, "x", F32, np.ones(3))
    g.output(x, "y")
    g.run()
    buf = np.zeros(3, dtype=np.float32)
    st = g.lib.kiln_read_output(g.ptr, b"nope", buf.ctypes.data, 12)
    assert st != OK, "reading an unknown output returned OK"
    st = g.lib.kiln_read_output(g.ptr, b"y", buf.ctypes.data, 8)
    assert st != OK, "reading 8 bytes of a 12-byte output returned OK"


def e_cast_bad_dtype():
    g = Graph()
    x = g.input("x", F32, "4")
    expect_builder_error(g, g.cast(x, 99), (ERR_INVALID, ERR_DTYPE))


# ---------------------------------------------------------------- odds and ends

def m_sum_empty():
    """SUM over an empty axis is 0 (the identity), the other axis kept"""
    g = Graph()
    x = g.slice(feed(g, "x", F32, rand((3, 4), F32)), 1, 2, 2, 1)  # (3, 0)
    got = finish(g, g.sum(x, 1), F32)
    assert_equal(got, np.zeros(3), "sum of (3, 0) over axis 1")


def m_sum_long():
    g = Graph()
    v = rand((4097,), F32, -1, 1)
    got = finish(g, g.sum(feed(g, "x", F32, v), 0), F32)
    assert_close(got, np.array(v.sum()), 0, 1e-6 * np.abs(v).sum(), "sum of 4097 f32")


def m_lt_nan():
    g = Graph()
    a = np.array([np.nan, 1.0, np.nan, -np.inf])
    b = np.array([1.0, np.nan, np.nan, 0.0])
    got = finish(g, g.lt(feed(g, "a", F32, a), feed(g, "b", F32, b)), F32)
    assert_equal(got, np.array([0.0, 0.0, 0.0, 1.0]), "lt with NaN")


def m_scalars():
    """0-d inputs: binary op of two scalars, and a scalar broadcast into a reduce"""
    g = Graph()
    a = feed(g, "a", F32, np.array(2.5))
    b = feed(g, "b", F32, np.array(-4.0))
    got = finish(g, g.mul(a, b), F32)
    assert got.shape == () and got == -10.0, "2.5 * -4 = %r" % (got,)


def m_gather_scatter_views():
    """index and value operands that are views (flipped, transposed)"""
    g = Graph()
    table = rand((6, 2), F32)
    idx = np.array([4, 0, 5], dtype=np.float64)
    y = g.gather(feed(g, "t", F32, table), g.flip(feed(g, "i", I32, idx), 0))
    got = finish(g, y, F32)
    assert_equal(got, table[idx[::-1].astype(np.int64)], "gather by flipped idx")
    g = Graph()
    st = np.zeros((5, 3), dtype=np.float32)
    s = g.state("s", F32, "5, 3")
    g.bind("s", st)
    vals = rand((3, 2), F32)  # transposed below to (2, 3)
    y = g.scatter(s, feed(g, "i", I32, [3, 1]), g.transpose(feed(g, "v", F32, vals), 0, 1))
    got = finish(g, y, F32)
    want = np.zeros((5, 3))
    want[[3, 1]] = vals.T
    assert_equal(got, want, "scatter of transposed values")
    assert_equal(st, want.astype(np.float32), "state buffer")


def m_two_outputs_one_tensor():
    g = Graph()
    v = rand((2, 3), F32)
    y = g.exp2(feed(g, "x", F32, v))
    assert g.output(y, "a") == OK and g.output(g.transpose(y, 0, 1), "b") == OK, g.error()
    g.run()
    want = np.exp2(v).astype(np.float32)
    assert_close(g.values("a"), want, 1e-6, 0, "output a")
    assert_close(g.values("b"), want.T, 1e-6, 0, "output b (transposed)")


def m_tensor_info():
    g = Graph()
    x = g.input("x", BF16, "seq, 2*seq, 8")
    assert g.ndim(x) == 3, "ndim %d" % g.ndim(x)
    assert g.tensor_dtype(x) == BF16, "dtype"
    assert g.sym_const_value(g.dim(x, 2)) == 8 and g.sym_const_value(g.dim(x, -1)) == 8, "last dim"
    assert g.dim(x, -3) == g.dim(x, 0) and g.sym_str(g.dim(x, 0)) == "seq", "first dim %r" % g.sym_str(g.dim(x, 0))
    assert g.sym_const_value(g.dim(x, 1)) is None, "2*seq is not constant"
    y = g.window(x, 2, 3, 2, 1)
    assert g.ndim(y) == 4 and g.sym_const_value(g.dim(y, 2)) == 3 and g.sym_const_value(g.dim(y, 3)) == 3, g.shape_str(y)
    s = g.sum(y, 1)
    assert g.ndim(s) == 3 and g.dim(s, 0) == g.dim(x, 0), g.shape_str(s)
    assert g.shape_str(g.unsqueeze(x, 0)).startswith("(1, seq, "), g.shape_str(g.unsqueeze(x, 0))
    assert g.status() == OK, g.error()


# ---------------------------------------------------------------- text forms

def x_text():
    """kiln_graph_text: one line per node naming op, dtype, shape and operands;
    a transposed operand carries its view; outputs are marked"""
    g = Graph()
    x = g.input("xq", F32, "seq, 8")
    w = g.input("wk", F16, "8, seq")
    y = g.add(x, g.cast(g.transpose(w, 0, 1), F32))
    s = g.sum(y, 1)
    g.output(s, "total")
    assert g.status() == OK, g.error()
    text = g.text()
    lines = [ln for ln in text.splitlines() if ln.startswith("%")]
    ops = [ln.split()[2] for ln in lines]
    assert ops == ["INPUT", "INPUT", "CAST", "ADD", "SUM"], "ops %s in\n%s" % (ops, text)
    assert '"xq"' in lines[0] and "f32 (seq, 8)" in lines[0], lines[0]
    assert '"wk"' in lines[1] and "f16 (8, seq)" in lines[1], lines[1]
    assert lines[2].startswith("%2 = CAST f32 (seq, 8) %1[view:"), "transposed operand without its view: " + lines[2]
    assert lines[3].startswith("%3 = ADD f32 (seq, 8) %0 %2"), lines[3]
    assert "[view" not in lines[3], "identity operands shown with a view: " + lines[3]
    assert lines[4].startswith("%4 = SUM f32 (seq) %3") and '"total"' in lines[4], lines[4]
    assert re.search(r'^output "total" = %4', text, re.M), "no output line in\n" + text


def x_dot():
    g = Graph()
    x = g.input("x", F32, "3, 4")
    y = g.exp2(g.transpose(x, 0, 1))
    g.output(y, "y")
    d = g.dot()
    assert d.startswith("digraph") and d.rstrip().endswith("}"), d[:100]
    nodes = re.findall(r"^\s*(n\d+) \[label=", d, re.M)
    assert nodes == ["n0", "n1"], "nodes %s" % nodes
    edges = re.findall(r"^\s*(n\d+) -> (\w+)(.*);$", d, re.M)
    assert ("n0", "n1") in [(a, b) for a, b, _ in edges], "no edge n0 -> n1: %s" % edges
    lab = [rest for a, b, rest in edges if (a, b) == ("n0", "n1")][0]
    assert "label=" in lab and "(4, 3)" in lab, "transposed edge not labelled with its view: %r" % lab
    assert ("n1", "out0") in [(a, b) for a, b, _ in edges], "output not drawn"
    assert "label=" not in [rest for a, b, rest in edges if (a, b) == ("n1", "out0")][0], "identity edge labelled"


def x_text_error_and_null():
    g = Graph()
    a = g.input("a", F32, "2")
    g.add(a, g.input("b", F32, "3"))  # builder error
    text = g.text()
    assert text is not None and "error" in text.lower() and "%0 = INPUT" in text, text
    assert g.lib.kiln_graph_text(None) is None and g.lib.kiln_graph_dot(None) is None, "NULL graph"


def x_text_names_quoted():
    """DOT labels escape quotes and backslashes in user names"""
    g = Graph()
    x = g.input('we"ird\\name', F32, "2")
    g.output(g.sqrt(x), "o")
    d = g.dot()
    assert 'we\\"ird' in d, "quote not escaped: " + d
    bare = d.replace("\\\\", "").replace('\\"', "")  # drop escaped backslashes, then escaped quotes
    assert bare.count('"') % 2 == 0, "unbalanced quotes"
    assert 'ird\\\\name' in d, "backslash not escaped: " + d


# ---------------------------------------------------------------- the list

def main():
    try:  # one clear failure instead of one per case when the library is unusable
        load()
    except OSError as e:
        print("FAIL load %s: %s" % (LIB_PATH, e))
        sys.exit(1)
    shapes_small = [(7,), (3, 5), (2, 1, 3)]
    for t in ALL:
        for shape in ((5,), (2, 3, 1)):
            case("input %s %s" % (NAME[t], shape), t_input_roundtrip, t, shape)
    for t, v in ((F32, 0.1), (F32, -2.5), (F16, 0.1), (BF16, 0.1), (I32, -7), (I32, 2.9), (U8, 200), (U8, 300)):
        case("const %s %r" % (NAME[t], v), t_const, t, v)
    for t in ALL:
        case("full %s" % NAME[t], t_full, t, 3.0 if t != BF16 else 1.2, (2, 3))
    for t in (F32, I32, F16):
        for shape, axis in (((4,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 1, 6), 2)):
            case("iota %s %s axis %d" % (NAME[t], shape, axis), t_iota, t, shape, axis)
    case("iota symbolic seq", t_iota_symbolic)

    for op in UNARY:
        for t in FLOATS:
            for shape in shapes_small:
                case("%s %s %s" % (op, NAME[t], shape), t_unary, op, t, shape, "dense")
            case("%s %s transposed" % (op, NAME[t]), t_unary, op, t, (3, 4), "transposed")
            case("%s %s flipped strided" % (op, NAME[t]), t_unary, op, t, (3, 2), "flipped")
    case("unary IEEE specials", t_unary_special)
    case("unary symbolic two runs", t_unary_symbolic)

    for op in ("add", "mul", "mod", "lt"):
        for t in ALL:
            for sa, sb in (((7,), (7,)), ((3, 1, 5), (4, 1)), ((1, 3), (2, 1))):
                case("%s %s %s %s" % (op, NAME[t], sa, sb), t_binary, op, t, sa, sb)
            case("%s %s views" % (op, NAME[t]), t_binary_views, op, t)
        for t in (F32, I32):
            case("%s %s scalar" % (op, NAME[t]), t_binary_scalar, op, t)
        case("%s symbolic two runs" % op, t_binary_symbolic, op)
    case("mod signs", t_mod_signs)

    for op in ("sum", "max"):
        for t in ALL:
            for shape, axis in (((7,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 1, 4), 1), ((2, 3, 4), 2)):
                case("%s %s %s axis %d" % (op, NAME[t], shape, axis), t_reduce, op, t, shape, axis)
            case("%s %s permuted operand" % (op, NAME[t]), t_reduce, op, t, (3, 4, 5), 1, "transposed")
        case("%s symbolic axis" % op, t_reduce_symbolic, op)
    case("max of negatives", t_max_neg)

    for t in ALL:
        case("gather %s 2-d by 1-d" % NAME[t], t_gather, t, (6, 3), (4,))
    for tshape, ishape in (((5,), (3,)), ((4, 2, 3), (2, 3)), ((7, 1), (1,)), ((3, 4), ())):
        case("gather f32 %s by %s" % (tshape, ishape), t_gather, F32, tshape, ishape)
    case("gather from transposed table", t_gather, F32, (5, 4), (6,), True)
    case("gather symbolic index count", t_gather_symbolic)
    for t in ALL:
        case("scatter %s" % NAME[t], t_scatter, t, (6, 3), 2)
    case("scatter 1-d state", t_scatter, F32, (5,), 3)
    case("scatter 3-d state", t_scatter, F32, (4, 2, 3), 1)
    case("scatter twice through state", t_scatter_twice)
    case("scatter into plain input", t_scatter_input_untouched)

    for src in ALL:
        for dst in ALL:
            case("cast %s -> %s" % (NAME[src], NAME[dst]), t_cast, src, dst)
    case("cast NaN and inf", t_cast_nan_inf)
    case("cast bf16 ties to even", t_bf16_rounding)
    for q in (Q8_0, Q4_0, Q5_0):
        for src, rows, cols in ((F32, 3, 64), (F32, 1, 32), (F16, 2, 96), (BF16, 2, 32)):
            case("cast %s -> %s (%d, %d) vs gguf" % (NAME[src], NAME[q], rows, cols), t_quantize, q, src, rows, cols)
    for q in (Q8_0, Q4_0, Q4_K, Q6_K, Q5_0):
        case("cast %s -> f32 vs gguf" % NAME[q], t_dequantize, q, F32, 3, 2)
        case("cast %s -> f16 vs gguf" % NAME[q], t_dequantize, q, F16, 2, 1)
    case("q8_0 round trip symbolic rows", t_quant_roundtrip_symbolic)
    case("q8_0 cast needs whole blocks", t_quant_bad_cols)

    for t in ALL:
        for how in ("permute", "slice", "expand", "pad-flip"):
            case("contiguous %s %s" % (NAME[t], how), t_contiguous, t, how)

    for name, shape, build, ref in VIEW_CASES:
        case("view %s %s" % (name, shape), view_case, build, ref, shape, name)
    case("views symbolic two runs", t_view_symbolic)
    for seed in range(60):
        case("view chain %d" % seed, t_chain, seed)

    for name, fn in (("add mismatched shapes", e_add_shapes), ("mul mismatched symbolic shapes", e_add_shapes_symbolic),
                     ("exp2 of i32", e_exp2_int), ("sin of u8", e_unary_u8), ("add f32 + i32", e_add_mixed),
                     ("add of q8_0", e_block_op), ("gather float index", e_gather_float_idx),
                     ("sum bad axis", e_bad_axis_sum), ("views bad axes", e_bad_axis_views),
                     ("reshape/expand bad shapes", e_bad_reshape_expand), ("slice step 0", e_bad_slice_step),
                     ("bad shape text", e_bad_shape_text), ("bad tensor id", e_bad_tensor_id),
                     ("sticky error", e_sticky), ("unbound symbol", e_unbound_symbol),
                     ("input not bound", e_input_not_bound), ("wrong buffer size", e_wrong_size),
                     ("wrong size then fixed", e_wrong_size_then_fix), ("gather index out of range", e_gather_range),
                     ("scatter index out of range", e_scatter_range), ("scatter shape mismatch", e_scatter_shapes),
                     ("output of KILN_NONE", e_output_none), ("read unknown output", e_read_unknown_output),
                     ("cast to bad dtype", e_cast_bad_dtype)):
        case("error: " + name, fn)
    for name, fn in (("sum over empty axis", m_sum_empty), ("sum of 4097 values", m_sum_long),
                     ("lt with NaN", m_lt_nan), ("scalar inputs", m_scalars),
                     ("gather/scatter operands as views", m_gather_scatter_views),
                     ("two outputs of one tensor", m_two_outputs_one_tensor), ("tensor info", m_tensor_info)):
        case(name, fn)
    case("graph text", x_text)
    case("graph dot", x_dot)
    case("graph text with error, NULL graph", x_text_error_and_null)
    case("graph dot escapes names", x_text_names_quoted)
    suite.finish()


if __name__ == "__main__":
    main()
