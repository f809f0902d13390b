"""test_nn.py — every nn function of kiln.h (src/nn/) against an independent
numpy float64 implementation, evaluated by the reference interpreter.

Inputs are rounded to the tested dtype first, and the numpy reference runs in
float64 on those rounded values, so the tolerance only has to cover kiln's
computation in the input dtype. Tolerances per dtype (TOL, times a per-case
factor stated at the case): f32 rtol 1e-5 / atol 1e-6; f16 and bf16 compute
every intermediate in half precision (the interpreter rounds each node to its
dtype), so their bounds are a few units of their epsilon (f16 2^-10,
bf16 2^-7) scaled by the length of the chain.

Covered: odd sizes, size-1 axes, broadcasting, non-contiguous inputs (a
transposed view 'T' and a strided slice 'S' of the bound buffer), symbolic
dims bound at run time, negative axes, special values (inf, large |x|), and
builder errors (sticky status). One PASS/FAIL line per case.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln_ctypes as K  # noqa: E402

F32, F16, BF16, I32 = K.F32, K.F16, K.BF16, K.I32
FLOATS = (F32, F16, BF16)
DT = {F32: "f32", F16: "f16", BF16: "bf16", I32: "i32"}
TOL = {F32: (1e-5, 1e-6), F16: (4e-3, 2e-3), BF16: (3e-2, 1.5e-2)}

rng = np.random.default_rng(1234)
suite = K.Suite("test_nn")


# ------------------------------------------------------------------ harness

def decl_shape(shape):
    return ", ".join(str(d) for d in shape)


def add_input(g, name, arr, dt, mode=None, shape=None):
    """declare and bind input `name` holding arr's values (rounded to dt);
    mode 'T': the buffer holds the transpose of the last two axes and the
    graph transposes it back; 'S': the buffer holds the values at odd
    positions of a (.., 2n+1) last axis and the graph slices them out.
    shape: declared shape text (for symbolic dims) of the logical tensor.
    Returns (tensor, values as numpy)."""
    arr = np.asarray(arr)
    vals = K.round_to(arr, dt) if dt in FLOATS else arr.astype(np.int64)
    if mode is None:
        stored = vals
        t = g.input(name, dt, shape if shape is not None else decl_shape(vals.shape))
    elif mode == "T":
        stored = np.swapaxes(vals, -1, -2)
        tokens = [x.strip() for x in shape.split(",")] if shape is not None else list(vals.shape)
        tokens[-1], tokens[-2] = tokens[-2], tokens[-1]
        t = g.input(name, dt, decl_shape(tokens))
        t = g.transpose(t, -1, -2)
    elif mode == "S":
        n = vals.shape[-1]
        filler = rng.standard_normal(vals.shape[:-1] + (2 * n + 1,))
        stored = K.round_to(filler, dt) if dt in FLOATS else filler.astype(np.int64)
        stored[..., 1::2] = vals
        tokens = [x.strip() for x in shape.split(",")] if shape is not None else list(vals.shape)
        tokens[-1] = 2 * n + 1
        t = g.input(name, dt, decl_shape(tokens))
        t = g.slice(t, -1, 1, 2 * n + 1, 2)
    else:
        raise ValueError(mode)
    st = g.bind(name, K.to_storage(stored, dt))
    assert st == K.OK, "bind %s: %s" % (name, K.STATUS_NAMES[st])
    return t, vals


def run(build, inputs, ref, rtol=0.0, atol=0.0, dims=None, exact=False, out_dtype=None):
    """inputs: list of (array, dtype[, mode[, shape]]); build(g, *tensors) -> tensor;
    ref(*values) -> expected numpy array"""
    with K.Graph() as g:
        ts, vs = [], []
        for i, spec in enumerate(inputs):
            arr, dt = spec[0], spec[1]
            mode = spec[2] if len(spec) > 2 else None
            shape = spec[3] if len(spec) > 3 else None
            t, v = add_input(g, "in%d" % i, arr, dt, mode, shape)
            ts.append(t)
            vs.append(v)
        y = build(g, *ts)
        assert y != K.NONE, "builder failed: %s" % g.error()
        assert g.output(y, "y") == K.OK, g.error()
        if out_dtype is not None:
            got_dt = g.tensor_dtype(y)
            assert got_dt == out_dtype, "dtype %s, want %s" % (K.DTYPE_NAMES[got_dt], K.DTYPE_NAMES[out_dtype])
        for k, v in (dims or {}).items():
            assert g.bind_dim(k, v) == K.OK, g.error()
        g.run()
        got = g.values("y")
        with np.errstate(all="ignore"):
            want = np.asarray(ref(*vs), dtype=np.float64)
        assert got.shape == want.shape, "shape %s, want %s" % (got.shape, want.shape)
        if exact:
            K.assert_equal(got, want)
        else:
            with np.errstate(invalid="ignore"):  # inf - inf where both are inf: checked exactly
                K.assert_close(got, want, rtol=rtol, atol=atol)


def tol(dt, f=1.0):
    r, a = TOL[dt]
    return dict(rtol=r * f, atol=a * f)


def case(name, fn, *args, **kw):
    suite.case(name, fn, *args, isolate=True, **kw)


def rand(*shape, scale=1.0):
    return rng.standard_normal(shape) * scale


# ------------------------------------------------------------------ numpy references

def np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_gelu_erf(x):
    return x * 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def np_gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def np_sigmoid(x):
    with np.errstate(over="ignore"):
        ex = np.exp(-np.abs(x))
        return np.where(x >= 0, 1.0 / (1.0 + ex), ex / (1.0 + ex))


def np_rope(x, pos, base, mode):
    seq, _, d = x.shape
    half = d // 2
    theta = base ** (-2.0 * np.arange(half) / d)
    ang = (pos + np.arange(seq))[:, None] * theta[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = np.empty_like(x)
    if mode == K.ROPE_INTERLEAVED:
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
    else:
        x0, x1 = x[..., :half], x[..., half:]
        out[..., :half] = x0 * c - x1 * s
        out[..., half:] = x0 * s + x1 * c
    return out


def np_attention(q, k, v, q_pos, scale, window):
    seq, hq, _ = q.shape
    kv, hkv, dv = v.shape
    grp = hq // hkv
    out = np.zeros((seq, hq, dv))
    for h in range(hq):
        kh = h // grp
        sc = (q[:, h, :] @ k[:, kh, :].T) * scale
        for i in range(seq):
            p = q_pos + i
            for j in range(kv):
                if j > p or (window > 0 and p - j >= window):
                    sc[i, j] = -np.inf
        out[:, h, :] = np_softmax(sc, -1) @ v[:, kh, :]
    return out


def np_conv2d(x, w, b, stride, pad, dil):
    n, ci, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.zeros((n, ci, h + 2 * pad, wd + 2 * pad))
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, co, oh, ow))
    for b_ in range(n):
        for o in range(co):
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for c in range(ci):
                        for a in range(kh):
                            for e in range(kw):
                                acc += xp[b_, c, i * stride + a * dil, j * stride + e * dil] * w[o, c, a, e]
                    out[b_, o, i, j] = acc + (b[o] if b is not None else 0.0)
    return out


# ------------------------------------------------------------------ elementwise

UNARY = {
    # name: (numpy ref, input generator, tolerance factor per dtype)
    "neg": (lambda x: -x, lambda s: rand(*s, scale=3), {F32: 0, F16: 0, BF16: 0}),
    "exp": (np.exp, lambda s: rand(*s, scale=2), {F32: 1, F16: 1.5, BF16: 1.5}),
    "log": (np.log, lambda s: np.exp(rand(*s, scale=2)), {F32: 1, F16: 1, BF16: 1}),
    "tanh": (np.tanh, lambda s: rand(*s, scale=2), {F32: 1, F16: 1, BF16: 1}),
    "sigmoid": (np_sigmoid, lambda s: rand(*s, scale=3), {F32: 1, F16: 1, BF16: 1}),
    "relu": (lambda x: np.maximum(x, 0), lambda s: rand(*s), {F32: 0, F16: 0, BF16: 0}),
    "gelu_tanh": (np_gelu_tanh, lambda s: rand(*s, scale=2), {F32: 1, F16: 1.5, BF16: 1.5}),
    "gelu_erf": (np_gelu_erf, lambda s: rand(*s, scale=2), {F32: 1, F16: 2, BF16: 2}),
    "silu": (lambda x: x * np_sigmoid(x), lambda s: rand(*s, scale=3), {F32: 1, F16: 1.5, BF16: 1.5}),
    "softplus": (lambda x: np.logaddexp(0.0, x), lambda s: rand(*s, scale=3), {F32: 1, F16: 1, BF16: 1}),
    "abs": (np.abs, lambda s: rand(*s), {F32: 0, F16: 0, BF16: 0}),
}


def t_unary(name, dt, shape, mode, sym):
    ref, gen, fac = UNARY[name]
    x = gen(shape)
    decl = None
    dims = None
    if sym:
        decl = "n, " + decl_shape(shape[1:])
        dims = {"n": shape[0]}
    f = fac[dt]
    kw = dict(exact=True) if f == 0 else tol(dt, f)
    run(lambda g, a: getattr(g, name)(a), [(x, dt, mode, decl)], ref, dims=dims, **kw)


for name in UNARY:
    for dt in FLOATS:
        case("%s_%s_3x7" % (name, DT[dt]), t_unary, name, dt, (3, 7), None, False)
        case("%s_%s_T_5x1x4" % (name, DT[dt]), t_unary, name, dt, (5, 1, 4), "T", False)
        if dt == F32:
            case("%s_%s_sym_S_5x4" % (name, DT[dt]), t_unary, name, dt, (5, 4), "S", True)


def t_special(name, dt, xs, ref, **kw):
    """extreme inputs: the reference is rounded to dt (overflow to inf and
    underflow to 0 are then what kiln must produce too)"""
    x = np.array(xs, dtype=np.float64)
    with np.errstate(all="ignore"):
        run(lambda g, a: getattr(g, name)(a), [(x, dt)], lambda a: K.round_to(ref(a), dt), **kw)


BIGS = [-1e30, -200.0, -50.0, -20.0, -1e-3, -1e-7, 0.0, 1e-7, 1e-3, 20.0, 50.0, 200.0, 1e30]
BIGS16 = [-60000.0, -200.0, -20.0, -1e-3, 0.0, 1e-3, 20.0, 200.0, 60000.0]
case("tanh_f32_saturates_and_small", t_special, "tanh", F32, BIGS + [np.inf, -np.inf], np.tanh, rtol=2e-6, atol=0)
case("tanh_f16_saturates", t_special, "tanh", F16, BIGS16, np.tanh, rtol=2e-3, atol=0)
case("sigmoid_f32_extremes_finite", t_special, "sigmoid", F32, BIGS + [np.inf, -np.inf], np_sigmoid, rtol=2e-6, atol=1e-37)
case("sigmoid_f16_extremes_finite", t_special, "sigmoid", F16, BIGS16, np_sigmoid, rtol=3e-3, atol=1e-7)
case("softplus_f32_tails_relative", t_special, "softplus", F32, BIGS[1:-1] + [-80.0, 80.0],
     lambda x: np.logaddexp(0.0, x), rtol=1e-5, atol=0)
case("softplus_f32_inf", t_special, "softplus", F32, [np.inf, -np.inf, 1e30, -1e30],
     lambda x: np.logaddexp(0.0, x), rtol=1e-6, atol=0)
case("gelu_erf_f32_tails", t_special, "gelu_erf", F32, [-8.0, -5.0, -3.0, -1e-4, 0.0, 1e-4, 3.0, 5.0, 8.0, 1e4],
     np_gelu_erf, rtol=2e-6, atol=1e-12)
case("gelu_tanh_f32_large", t_special, "gelu_tanh", F32, [-1e4, -30.0, -5.0, 0.0, 5.0, 30.0, 1e4],
     np_gelu_tanh, rtol=2e-6, atol=1e-12)
case("exp_f32_inf_and_range", t_special, "exp", F32, [-np.inf, -100.0, -1.0, 0.0, 1.0, 80.0, 100.0, np.inf],
     np.exp, rtol=2e-6, atol=0)
case("log_f32_zero_inf", t_special, "log", F32, [0.0, 1e-30, 1.0, 1e30, np.inf], np.log, rtol=2e-6, atol=0)
case("abs_f32_inf", t_special, "abs", F32, [-np.inf, -2.5, -0.0, 0.0, 3.0, np.inf], np.abs, exact=True)
case("relu_f32_inf", t_special, "relu", F32, [-np.inf, -2.5, 0.0, 3.0, np.inf], lambda x: np.maximum(x, 0), exact=True)


# binary ops, with broadcasting
BIN_SHAPES = [((4, 5), (4, 5), None), ((3, 1, 5), (4, 1), None), ((6,), (2, 3, 6), None), ((4, 3), (4, 3), "T")]


def gen_pair(name, sa, sb):
    a, b = rand(*sa, scale=2), rand(*sb, scale=2)
    if name == "div":
        b = np.sign(b) * (np.abs(b) + 0.5)
    if name == "pow":
        a = np.exp(rand(*sa, scale=0.7))
        b = rand(*sb)
    if name == "eq":
        b = np.round(b)
        a = np.round(a)
    return a, b


BINARY = {
    "sub": (lambda a, b: a - b, 1),
    "div": (lambda a, b: a / b, 1),
    "maximum": (np.maximum, 0),
    "minimum": (np.minimum, 0),
    "eq": (lambda a, b: (a == b).astype(np.float64), 0),
    "pow": (np.power, 2),
}


def t_binary(name, dt, sa, sb, mode):
    ref, fac = BINARY[name]
    a, b = gen_pair(name, sa, sb)
    kw = dict(exact=True) if fac == 0 else tol(dt, fac)
    if name in ("sub",) and dt != F32:
        kw = tol(dt, 0.5)  # one rounding of the result
    run(lambda g, x, y: getattr(g, name)(x, y), [(a, dt, mode), (b, dt, mode)], ref, **kw)


for name in BINARY:
    for dt in FLOATS:
        for k, (sa, sb, mode) in enumerate(BIN_SHAPES):
            if dt != F32 and k in (0, 3):
                continue
            case("%s_%s_%s_%s%s" % (name, DT[dt], "x".join(map(str, sa)), "x".join(map(str, sb)),
                                    "_T" if mode else ""), t_binary, name, dt, sa, sb, mode)


def t_pow_int_exponent(dt):
    x = np.array([[-2.0, -1.5, -1.0, 0.5, 3.0], [2.0, -3.0, 0.0, -0.5, 1.0]])
    y = np.array([[2.0, 3.0, 5.0, -2.0, 0.0], [-1.0, 2.0, 2.0, 3.0, 0.0]])
    run(lambda g, a, b: g.pow(a, b), [(x, dt), (y, dt)], np.power, **tol(dt, 2))


for dt in FLOATS:
    case("pow_%s_negative_base_integer_exponent" % DT[dt], t_pow_int_exponent, dt)
case("pow_f32_zero_base", lambda: run(lambda g, a, b: g.pow(a, b),
                                      [(np.array([0.0, 0.0, 0.0, 4.0]), F32), (np.array([0.0, 2.0, -1.0, 0.5]), F32)],
                                      np.power, rtol=2e-6, atol=0))


def t_int_binary(name, ref):
    a = rng.integers(-5, 5, size=(3, 4))
    b = rng.integers(-5, 5, size=(4,))
    run(lambda g, x, y: getattr(g, name)(x, y), [(a, I32), (b, I32)], ref, exact=True, out_dtype=I32)


case("maximum_i32_broadcast", t_int_binary, "maximum", np.maximum)
case("minimum_i32_broadcast", t_int_binary, "minimum", np.minimum)
case("eq_i32_broadcast", t_int_binary, "eq", lambda a, b: (a == b).astype(np.int64))
case("sub_i32_broadcast", t_int_binary, "sub", lambda a, b: a - b)
case("maximum_f32_inf", lambda: run(lambda g, a, b: g.maximum(a, b),
                                    [(np.array([np.inf, -np.inf, 1.0, -np.inf]), F32),
                                     (np.array([1.0, 2.0, np.inf, -np.inf]), F32)], np.maximum, exact=True))
case("minimum_f32_inf", lambda: run(lambda g, a, b: g.minimum(a, b),
                                    [(np.array([np.inf, -np.inf, 1.0, np.inf]), F32),
                                     (np.array([1.0, 2.0, -np.inf, np.inf]), F32)], np.minimum, exact=True))
case("eq_f32_nan_is_unequal", lambda: run(lambda g, a, b: g.eq(a, b),
                                          [(np.array([np.nan, 1.0, np.nan, np.inf]), F32),
                                           (np.array([np.nan, np.nan, 1.0, np.inf]), F32)],
                                          lambda a, b: (a == b).astype(np.float64), exact=True))


def t_where(dt, cond_dt, shapes, mode=None):
    sc, sa, sb = shapes
    c = (rng.random(sc) < 0.5).astype(np.float64) * rng.integers(1, 4, size=sc)  # non-zero values other than 1
    if cond_dt == F32:
        c = c * np.where(rng.random(sc) < 0.5, -1.0, 1.0)
    a, b = rand(*sa), rand(*sb)
    run(lambda g, cc, x, y: g.where(cc, x, y), [(c, cond_dt), (a, dt, mode), (b, dt)],
        lambda cc, x, y: np.where(cc != 0, x, y), exact=True)


for dt in FLOATS:
    case("where_%s_f32cond_same" % DT[dt], t_where, dt, F32, ((3, 5), (3, 5), (3, 5)))
    case("where_%s_i32cond_broadcast" % DT[dt], t_where, dt, I32, ((3, 1), (1, 5), (5,)))
case("where_f32_T_input", t_where, F32, F32, ((4, 3), (4, 3), (4, 3)), "T")
case("where_i32_values", lambda: run(lambda g, c, a, b: g.where(c, a, b),
                                     [(np.array([1, 0, 2, 0]), I32), (np.array([5, 6, 7, 8]), I32),
                                      (np.array([-1, -2, -3, -4]), I32)],
                                     lambda c, a, b: np.where(c != 0, a, b), exact=True, out_dtype=I32))
case("where_f32_unused_inf_branch", lambda: run(
    lambda g, c, a, b: g.where(c, a, b),
    [(np.array([1.0, 0.0, 1.0, 0.0, 1.0]), F32), (np.array([2.0, np.inf, -np.inf, -np.inf, 3.0]), F32),
     (np.array([np.inf, 5.0, 1.0, -np.inf, -np.inf]), F32)],
    lambda c, a, b: np.where(c != 0, a, b), exact=True))


def t_clamp(dt, mode):
    x = rand(4, 6, scale=3)
    run(lambda g, a: g.clamp(a, -1.25, 2.5), [(x, dt, mode)], lambda a: np.clip(a, -1.25, 2.5), exact=True)


for dt in FLOATS:
    case("clamp_%s" % DT[dt], t_clamp, dt, None)
case("clamp_f32_S", t_clamp, F32, "S")


# ------------------------------------------------------------------ reductions

def t_reduce(name, dt, shape, axis, mode=None, sym=False, fac=1.0):
    x = rand(*shape, scale=2)
    refs = {
        "mean": lambda a: a.mean(axis=axis),
        "var": lambda a: a.var(axis=axis),
        "softmax": lambda a: np_softmax(a, axis),
        "log_softmax": lambda a: np.log(np_softmax(a, axis)),
    }
    decl, dims = None, None
    if sym:
        decl = decl_shape(("n",) + shape[1:])
        dims = {"n": shape[0]}
    run(lambda g, a: getattr(g, name)(a, axis), [(x, dt, mode, decl)], refs[name], dims=dims, **tol(dt, fac))


RED_CASES = [((5, 7), -1, None, False), ((5, 7), 0, None, False), ((3, 1, 4), 1, None, False),
             ((4, 6), 0, "T", False), ((6, 5), -1, None, True), ((6, 5), 0, None, True), ((2, 3, 9), -1, "S", False)]
for name in ("mean", "var", "softmax", "log_softmax"):
    for dt in FLOATS:
        for k, (shape, axis, mode, sym) in enumerate(RED_CASES):
            if dt != F32 and k in (1, 3, 6):
                continue
            fac = 2.0 if name == "var" and dt != F32 else 1.0
            if name == "log_softmax" and dt != F32:
                fac = 2.0
            case("%s_%s_%s_ax%d%s%s" % (name, DT[dt], "x".join(map(str, shape)), axis, "_" + mode if mode else "",
                                        "_sym" if sym else ""), t_reduce, name, dt, shape, axis, mode, sym, fac)


def t_softmax_large(dt):
    x = np.array([[1000.0, 999.0, -1000.0], [-1e4, -1e4 + 1, -1e4 + 2]]) if dt != F16 else \
        np.array([[60000.0, 59999.0, -60000.0], [-100.0, -99.0, -98.0]])
    run(lambda g, a: g.softmax(a, -1), [(x, dt)], lambda a: np_softmax(a, -1), **tol(dt, 2))


case("softmax_f32_large_values", t_softmax_large, F32)
case("softmax_f16_large_values", t_softmax_large, F16)


def t_argmax(dt, shape, axis, ties, mode=None):
    if dt == I32:
        x = rng.integers(-3, 3, size=shape)
    else:
        x = np.round(rand(*shape, scale=2)) if ties else rand(*shape)
    run(lambda g, a: g.argmax(a, axis), [(x, dt, mode)], lambda a: np.argmax(a, axis=axis), exact=True, out_dtype=I32)


for dt in FLOATS:
    case("argmax_%s_ties_last" % DT[dt], t_argmax, dt, (5, 9), -1, True)
case("argmax_f32_axis0", t_argmax, F32, (7, 4), 0, False)
case("argmax_f32_T", t_argmax, F32, (5, 6), -1, False, "T")
case("argmax_i32_ties_3d", t_argmax, I32, (3, 4, 5), 1, True)
case("argmax_f32_size1_axis", t_argmax, F32, (4, 1), 1, False)


def t_argmax_sym():
    x = rand(6, 11)
    run(lambda g, a: g.argmax(a, -1), [(x, F32, None, "6, vocab")], lambda a: np.argmax(a, -1),
        dims={"vocab": 11}, exact=True)


case("argmax_f32_symbolic_axis", t_argmax_sym)


def t_cumsum(dt, shape, axis, sym=False, mode=None):
    x = rng.integers(-4, 5, size=shape).astype(np.float64) if dt == I32 else rand(*shape)
    decl, dims = None, None
    if sym:
        decl = decl_shape(("n",) + shape[1:])
        dims = {"n": shape[0]}
    kw = dict(exact=True) if dt == I32 else tol(dt, 2)
    run(lambda g, a: g.cumsum(a, axis), [(x, dt, mode, decl)], lambda a: np.cumsum(a, axis=axis), dims=dims, **kw)


for dt in FLOATS:
    case("cumsum_%s_last" % DT[dt], t_cumsum, dt, (3, 9), -1)
    case("cumsum_%s_sym_axis0" % DT[dt], t_cumsum, dt, (7, 3), 0, True)
case("cumsum_f32_axis1_3d", t_cumsum, F32, (2, 5, 3), 1)
case("cumsum_f32_size1", t_cumsum, F32, (4, 1), 1)
case("cumsum_f32_T", t_cumsum, F32, (4, 6), -1, False, "T")
case("cumsum_i32", t_cumsum, I32, (3, 6), -1)
case("cumsum_i32_sym", t_cumsum, I32, (6, 2), 0, True)


# ------------------------------------------------------------------ norms

def t_rmsnorm(dt, shape, weight, mode=None, sym=False, w_dt=None):
    x = rand(*shape, scale=2)
    w = rand(shape[-1]) if weight else None
    eps = 1e-5
    inputs = [(x, dt, mode, decl_shape(("n",) + shape[1:]) if sym else None)]
    if weight:
        inputs.append((w, w_dt or dt))

    def ref(a, ww=None):
        y = a / np.sqrt((a * a).mean(-1, keepdims=True) + eps)
        return y * ww if ww is not None else y

    run(lambda g, a, ww=K.NONE: g.rmsnorm(a, ww, eps), inputs, ref, dims={"n": shape[0]} if sym else None,
        **tol(dt, 1.5))


def t_layernorm(dt, shape, weight, bias, mode=None, sym=False):
    x = rand(*shape, scale=2) + 1.0
    eps = 1e-5
    inputs = [(x, dt, mode, decl_shape(("n",) + shape[1:]) if sym else None)]
    if weight:
        inputs.append((rand(shape[-1]), dt))
    if bias:
        inputs.append((rand(shape[-1]), dt))

    def ref(a, *wb):
        y = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + eps)
        i = 0
        if weight:
            y = y * wb[i]
            i += 1
        if bias:
            y = y + wb[i]
        return y

    def build(g, a, *wb):
        i = 0
        w = b = K.NONE
        if weight:
            w = wb[i]
            i += 1
        if bias:
            b = wb[i]
        return g.layernorm(a, w, b, eps)

    run(build, inputs, ref, dims={"n": shape[0]} if sym else None, **tol(dt, 2))


for dt in FLOATS:
    case("rmsnorm_%s_weight" % DT[dt], t_rmsnorm, dt, (4, 16), True)
    case("rmsnorm_%s_noweight_sym" % DT[dt], t_rmsnorm, dt, (3, 7), False, None, True)
    case("layernorm_%s_weight_bias" % DT[dt], t_layernorm, dt, (5, 12), True, True)
    case("layernorm_%s_none_sym" % DT[dt], t_layernorm, dt, (3, 9), False, False, None, True)
case("rmsnorm_f32_T_3d", t_rmsnorm, F32, (2, 5, 5), True, "T")
case("rmsnorm_f16_f32weight", t_rmsnorm, F16, (3, 8), True, None, False, F32)
case("layernorm_f32_weight_only_S", t_layernorm, F32, (3, 6), True, False, "S")
case("layernorm_f32_size1_rows", t_layernorm, F32, (1, 1, 10), False, True)


# ------------------------------------------------------------------ linalg

def t_matmul(dt, sa, sb, mode_a=None, mode_b=None, fac=1.0, sym=None):
    a, b = rand(*sa), rand(*sb)
    decl_a = dims = None
    if sym:  # name the first axis of a symbolically
        decl_a = decl_shape(("m",) + sa[1:])
        dims = {"m": sa[0]}
    run(lambda g, x, y: g.matmul(x, y), [(a, dt, mode_a, decl_a), (b, dt, mode_b)], np.matmul, dims=dims,
        **tol(dt, fac * (1 if dt == F32 else 1.5)))


MM = [((3, 4), (4, 5), None, None), ((1, 7), (7, 1), None, None), ((2, 3, 5), (5, 4), None, None),
      ((2, 1, 3, 4), (5, 4, 2), None, None), ((3, 6), (6,), None, None), ((6,), (2, 6, 3), None, None),
      ((5,), (5,), None, None), ((4, 3), (3, 5), "T", "T"), ((3, 5), (5, 2), "S", None), ((2, 2, 3), (1, 3, 4), None, "T")]
for dt in FLOATS:
    for k, (sa, sb, ma, mb) in enumerate(MM):
        if dt != F32 and k not in (0, 3, 4, 7):
            continue
        case("matmul_%s_%s@%s%s" % (DT[dt], "x".join(map(str, sa)), "x".join(map(str, sb)),
                                     "_" + (ma or "") + (mb or "") if (ma or mb) else ""),
             t_matmul, dt, sa, sb, ma, mb)
case("matmul_f32_sym_rows", t_matmul, F32, (5, 3), (3, 4), None, None, 1.0, True)
case("matmul_f32_long_k", t_matmul, F32, (3, 257), (257, 2), None, None, 3.0)


def t_linear(dt, sx, out, bias, mode=None, sym=False):
    x = rand(*sx)
    w = rand(out, sx[-1]) * 0.3
    inputs = [(x, dt, mode, decl_shape(("s",) + sx[1:]) if sym else None), (w, dt)]
    if bias:
        inputs.append((rand(out), dt))
    run(lambda g, a, ww, b=K.NONE: g.linear(a, ww, b), inputs,
        lambda a, ww, b=None: a @ ww.T + (b if b is not None else 0.0),
        dims={"s": sx[0]} if sym else None, **tol(dt, 1.5))


for dt in FLOATS:
    case("linear_%s_bias" % DT[dt], t_linear, dt, (4, 9), 5, True)
case("linear_f32_nobias_3d", t_linear, F32, (2, 3, 8), 6, False)
case("linear_f32_vector_in", t_linear, F32, (8,), 3, True)
case("linear_f32_sym_T", t_linear, F32, (5, 6), 4, False, "T", True)


def q8_0_encode(w):
    """GGUF q8_0 bytes of a (rows, k) float array (k % 32 == 0), and the
    values they decode to"""
    rows, k = w.shape
    blocks = w.reshape(rows, k // 32, 32)
    amax = np.abs(blocks).max(-1, keepdims=True)
    d = (amax / 127.0).astype(np.float16)
    df = d.astype(np.float64)
    q = np.where(df > 0, np.round(blocks / np.where(df > 0, df, 1)), 0).clip(-127, 127).astype(np.int8)
    raw = np.zeros((rows, k // 32, 34), dtype=np.uint8)
    raw[..., :2] = d.view(np.uint8).reshape(rows, k // 32, 2)
    raw[..., 2:] = q.view(np.uint8)
    return raw.reshape(rows, k // 32 * 34), (df * q.astype(np.float64)).reshape(rows, k)


def t_linear_q8():
    x = rand(3, 64)
    w = rand(5, 64)
    raw, wdeq = q8_0_encode(w)
    with K.Graph() as g:
        xt, xv = add_input(g, "x", x, F32)
        wt = g.input("w", K.Q8_0, "5, 64")
        assert g.bind("w", np.ascontiguousarray(raw)) == K.OK, g.error()
        y = g.linear(xt, wt, K.NONE)
        assert y != K.NONE, g.error()
        g.output(y, "y")
        g.run()
        K.assert_close(g.values("y"), xv @ wdeq.T, rtol=1e-5, atol=1e-5)


case("linear_f32_q8_0_weight", t_linear_q8)


def t_embedding(dt, ids_shape):
    table = rand(11, 6)
    ids = rng.integers(0, 11, size=ids_shape)
    run(lambda g, t, i: g.embedding(t, i), [(table, dt), (ids, I32)], lambda t, i: t[i], exact=True, out_dtype=dt)


for dt in FLOATS:
    case("embedding_%s" % DT[dt], t_embedding, dt, (7,))
case("embedding_f32_2d_ids", t_embedding, F32, (2, 3))


def t_embedding_q8():
    table = rand(6, 32)
    raw, deq = q8_0_encode(table)
    ids = np.array([5, 0, 5, 2], dtype=np.int32)
    with K.Graph() as g:
        tt = g.input("t", K.Q8_0, "6, 32")
        g.bind("t", np.ascontiguousarray(raw))
        it = g.input("i", I32, "4")
        g.bind("i", ids)
        y = g.embedding(tt, it)
        assert y != K.NONE, g.error()
        assert g.tensor_dtype(y) == F32
        g.output(y, "y")
        g.run()
        K.assert_close(g.values("y"), deq[ids], rtol=1e-6, atol=0)


case("embedding_q8_0_dequantised", t_embedding_q8)


def t_concat(dt, sa, sb, axis, mode=None, sym=False):
    a, b = rand(*sa), rand(*sb)
    decl = dims = None
    if sym:
        decl = decl_shape(("n",) + sa[1:])
        dims = {"n": sa[0]}
    run(lambda g, x, y: g.concat(x, y, axis), [(a, dt, mode, decl), (b, dt)],
        lambda x, y: np.concatenate([x, y], axis=axis), dims=dims, exact=True)


for dt in FLOATS:
    case("concat_%s_axis_last" % DT[dt], t_concat, dt, (3, 4), (3, 2), -1)
case("concat_f32_axis0_sym", t_concat, F32, (3, 4), (5, 4), 0, None, True)
case("concat_f32_middle_3d", t_concat, F32, (2, 1, 3), (2, 4, 3), 1)
case("concat_f32_T", t_concat, F32, (4, 3), (4, 5), 1, "T")
case("concat_i32", lambda: run(lambda g, x, y: g.concat(x, y, 0), [(np.arange(6).reshape(2, 3), I32),
                                                                    (np.arange(3).reshape(1, 3) - 7, I32)],
                               lambda x, y: np.concatenate([x, y], 0), exact=True))
case("concat_f32_inf_exact", lambda: run(lambda g, x, y: g.concat(x, y, 0),
                                         [(np.array([np.inf, -1.0]), F32), (np.array([-np.inf]), F32)],
                                         lambda x, y: np.concatenate([x, y]), exact=True))


def t_conv2d(dt, xs, ws, stride, pad, dil, bias, sym=False):
    x, w = rand(*xs), rand(*ws) * 0.5
    b = rand(ws[0]) if bias else None
    inputs = [(x, dt, None, decl_shape(xs[:2] + ("h",) + xs[3:]) if sym else None), (w, dt)]
    if bias:
        inputs.append((b, dt))
    run(lambda g, a, ww, bb=K.NONE: g.conv2d(a, ww, bb, stride, pad, dil), inputs,
        lambda a, ww, bb=None: np_conv2d(a, ww, bb, stride, pad, dil), dims={"h": xs[2]} if sym else None,
        **tol(dt, 2))


CONV = [((1, 1, 5, 5), (1, 1, 3, 3), 1, 0, 1, False), ((2, 3, 7, 6), (4, 3, 3, 2), 1, 1, 1, True),
        ((1, 2, 9, 8), (3, 2, 3, 3), 2, 1, 1, True), ((1, 2, 9, 9), (2, 2, 3, 3), 1, 2, 2, False),
        ((2, 1, 6, 7), (2, 1, 1, 1), 1, 0, 1, True), ((1, 3, 8, 8), (2, 3, 2, 2), 2, 0, 1, False),
        ((1, 2, 10, 7), (2, 2, 3, 2), 3, 2, 2, True)]
for k, (xs, ws, s, p, d, b) in enumerate(CONV):
    case("conv2d_f32_x%s_w%s_s%dp%dd%d%s" % ("x".join(map(str, xs)), "x".join(map(str, ws)), s, p, d, "_bias" if b else ""),
         t_conv2d, F32, xs, ws, s, p, d, b)
case("conv2d_f16_s2p1", t_conv2d, F16, (1, 2, 7, 7), (2, 2, 3, 3), 2, 1, 1, True)
case("conv2d_bf16", t_conv2d, BF16, (1, 2, 6, 6), (3, 2, 3, 3), 1, 1, 1, True)
case("conv2d_f32_symbolic_h", t_conv2d, F32, (1, 2, 7, 5), (2, 2, 3, 3), 1, 1, 1, True, True)


# ------------------------------------------------------------------ rope, attention

def t_rope(dt, seq, heads, d, pos, mode, sym=False, base=10000.0, xmode=None):
    x = rand(seq, heads, d)
    fac = {F32: 10.0, F16: 1.5, BF16: 1.5}[dt]  # f32: angles carry ~1e-6 relative error
    with K.Graph() as g:
        decl = "seq, %d, %d" % (heads, d) if sym else None
        t, xv = add_input(g, "x", x, dt, xmode, decl)
        p = g.sym("pos") if sym else g.sym(pos)
        y = g.rope(t, p, base, mode)
        assert y != K.NONE, g.error()
        g.output(y, "y")
        if sym:
            g.bind_dim("seq", seq)
            g.bind_dim("pos", pos)
        g.run()
        K.assert_close(g.values("y"), np_rope(xv, pos, base, mode), **tol(dt, fac))


for mode, mname in ((K.ROPE_INTERLEAVED, "interleaved"), (K.ROPE_NEOX, "neox")):
    for dt in FLOATS:
        case("rope_%s_%s" % (mname, DT[dt]), t_rope, dt, 5, 3, 8, 0, mode)
    case("rope_%s_f32_sym_pos" % mname, t_rope, F32, 4, 2, 16, 37, mode, True)
    case("rope_%s_f32_base1e6_T" % mname, t_rope, F32, 3, 4, 4, 11, mode, False, 1e6, "T")
    case("rope_%s_f16_pos_500" % mname, t_rope, F16, 2, 2, 8, 500, mode)


def t_attention(dt, seq, hq, hkv, kv, d, q_pos, window, sym=False, qmode=None, fac=1.0):
    q, k, v = rand(seq, hq, d), rand(kv, hkv, d), rand(kv, hkv, d)
    scale = 1.0 / math.sqrt(d)
    with K.Graph() as g:
        qt, qv = add_input(g, "q", q, dt, qmode, "seq, %d, %d" % (hq, d) if sym else None)
        kt, kvv = add_input(g, "k", k, dt, None, "pos+seq, %d, %d" % (hkv, d) if sym else None)
        vt, vv = add_input(g, "v", v, dt, None, "pos+seq, %d, %d" % (hkv, d) if sym else None)
        qp = g.sym("pos") if sym else g.sym(q_pos)
        y = g.attention(qt, kt, vt, qp, scale, window)
        assert y != K.NONE, g.error()
        g.output(y, "y")
        if sym:
            g.bind_dim("seq", seq)
            g.bind_dim("pos", q_pos)
        g.run()
        K.assert_close(g.values("y"), np_attention(qv, kvv, vv, q_pos, scale, window), **tol(dt, 2 * fac))


case("attention_f32_mha_prefill", t_attention, F32, 5, 2, 2, 5, 8, 0, 0)
case("attention_f32_gqa_cache", t_attention, F32, 3, 4, 2, 9, 8, 6, 0)
case("attention_f32_gqa_window", t_attention, F32, 4, 6, 2, 10, 4, 6, 3)
case("attention_f32_mqa_decode_window", t_attention, F32, 1, 4, 1, 12, 8, 11, 5)
case("attention_f32_sym_pos_seq", t_attention, F32, 3, 4, 2, 7, 8, 4, 0, True)
case("attention_f32_sym_window", t_attention, F32, 4, 2, 1, 9, 4, 5, 2, True)
case("attention_f32_q_transposed_view", t_attention, F32, 4, 4, 4, 4, 4, 0, 0, False, "T")
case("attention_f16_gqa_cache", t_attention, F16, 3, 4, 2, 9, 8, 6, 0)
case("attention_bf16_gqa_window", t_attention, BF16, 3, 4, 2, 9, 8, 6, 4)
case("attention_f16_window1", t_attention, F16, 3, 2, 1, 5, 4, 2, 1)
# the keys below q_pos + 1 - window are sliced away (attention.c): a window
# wider than the cache so far (nothing sliced), and one far behind it
case("attention_f32_sym_window_wider", t_attention, F32, 3, 4, 2, 5, 8, 2, 7, True)
case("attention_f32_sym_window_far", t_attention, F32, 6, 4, 1, 46, 8, 40, 4, True)


def t_attention_v_dim():
    # v may have its own head size: result (seq, hq, dv)
    q, k, v = rand(2, 2, 4), rand(3, 1, 4), rand(3, 1, 6)
    run(lambda g, a, b, c: g.attention(a, b, c, 1, 0.5, 0), [(q, F32), (k, F32), (v, F32)],
        lambda a, b, c: np_attention(a, b, c, 1, 0.5, 0), **tol(F32, 2))


case("attention_f32_v_head_dim_differs", t_attention_v_dim)


# ------------------------------------------------------------------ builder errors

def t_error(build, want_status):
    with K.Graph() as g:
        y = build(g)
        assert y == K.NONE, "expected KILN_NONE, got tensor %d" % y
        st = g.status()
        assert st == want_status, "status %s (%s), want %s" % (K.STATUS_NAMES[st], g.error(), K.STATUS_NAMES[want_status])
        assert g.error(), "no error message"
        # sticky: later nn calls build nothing
        x = g.input("late", F32, "3")
        assert g.softmax(x, 0) == K.NONE


case("error_matmul_inner_mismatch", t_error,
     lambda g: g.matmul(g.input("a", F32, "3, 4"), g.input("b", F32, "1, 5")), K.ERR_SHAPE)
case("error_linear_in_mismatch", t_error,
     lambda g: g.linear(g.input("a", F32, "3, 4"), g.input("w", F32, "5, 3")), K.ERR_SHAPE)
case("error_concat_other_axis", t_error,
     lambda g: g.concat(g.input("a", F32, "3, 4"), g.input("b", F32, "2, 5"), 1), K.ERR_SHAPE)
case("error_softmax_axis", t_error, lambda g: g.softmax(g.input("a", F32, "3, 4"), 2), K.ERR_INVALID)
case("error_mean_negative_axis", t_error, lambda g: g.mean(g.input("a", F32, "3, 4"), -3), K.ERR_INVALID)
case("error_attention_heads", t_error,
     lambda g: g.attention(g.input("q", F32, "2, 3, 4"), g.input("k", F32, "5, 2, 4"), g.input("v", F32, "5, 2, 4"),
                           0, 1.0, 0), K.ERR_SHAPE)
case("error_rope_odd_dim", t_error, lambda g: g.rope(g.input("x", F32, "2, 2, 5"), 0), K.ERR_SHAPE)
case("error_rope_symbolic_dim", t_error, lambda g: g.rope(g.input("x", F32, "2, 2, d"), 0), K.ERR_SHAPE)
case("error_conv2d_symbolic_kernel", t_error,
     lambda g: g.conv2d(g.input("x", F32, "1, 1, 5, 5"), g.input("w", F32, "1, 1, k, 3")), K.ERR_SHAPE)
case("error_exp_of_int", t_error, lambda g: g.exp(g.input("a", I32, "3")), K.ERR_DTYPE)
case("error_invalid_tensor_id", t_error, lambda g: g.sigmoid(12345), K.ERR_INVALID)
case("error_maximum_no_broadcast", t_error,
     lambda g: g.maximum(g.input("a", F32, "3, 4"), g.input("b", F32, "2, 4")), K.ERR_SHAPE)

suite.finish()
