"""kiln.nn — the nn functions of include/kiln.h on kiln.Tensor: each builds a
subgraph of primitives (no special kernels). Axes count from the end when
negative; every function is also reachable as kiln.<name>.
"""
import math

from .errors import InvalidArgumentError
from .graph import Tensor


def _g(x):
    if not isinstance(x, Tensor):
        raise InvalidArgumentError("expected a kiln.Tensor, got %r" % type(x).__name__, "ERR_INVALID")
    return x.graph


def _opt(x, t):
    return -1 if t is None else x._other(t)


def softmax(x, axis=-1):
    """exp(x - max) / sum over axis"""
    return _g(x)._t("kiln_softmax", x.id, x._ax(axis))


def log_softmax(x, axis=-1):
    return _g(x)._t("kiln_log_softmax", x.id, x._ax(axis))


def rmsnorm(x, weight=None, eps=1e-6):
    """x / sqrt(mean(x^2) + eps) * weight, over the last axis"""
    return _g(x)._t("kiln_rmsnorm", x.id, _opt(x, weight), float(eps))


def layernorm(x, weight=None, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias, over the last axis"""
    return _g(x)._t("kiln_layernorm", x.id, _opt(x, weight), _opt(x, bias), float(eps))


def gelu(x, approximate="tanh"):
    """GELU: approximate="tanh" (the tanh form) or "none" (erf)"""
    return _g(x)._t("kiln_gelu_tanh" if approximate == "tanh" else "kiln_gelu_erf", x.id)


def _unary(name, doc):
    def f(x):
        return _g(x)._t("kiln_" + name, x.id)
    f.__name__, f.__doc__ = name, doc
    return f


silu = _unary("silu", "x * sigmoid(x)")
relu = _unary("relu", "max(x, 0)")
sigmoid = _unary("sigmoid", "1 / (1 + exp(-x))")
tanh = _unary("tanh", "tanh(x)")
exp = _unary("exp", "e^x")
log = _unary("log", "natural logarithm")
sqrt = _unary("sqrt", "square root")
abs = _unary("abs", "|x|")  # noqa: A001 (kiln.abs, like numpy's)
softplus = _unary("softplus", "log(1 + e^x)")


def matmul(a, b):
    """(..., m, k) @ (..., k, n), batch dims broadcast"""
    return a @ b


def linear(x, weight, bias=None):
    """x (..., in) times weight (out, in) transposed, plus bias (out)"""
    return _g(x)._t("kiln_linear", x.id, weight.id, _opt(x, bias))


def embedding(table, ids):
    """rows of table (vocab, dim) for integer ids"""
    return _g(table)._t("kiln_embedding", table.id, ids.id)


def where(cond, a, b):
    """cond != 0 ? a : b"""
    return _g(cond)._t("kiln_where", cond.id, cond._other(a), cond._other(b))


def maximum(a, b):
    return a._bin("kiln_maximum", b)


def minimum(a, b):
    return a._bin("kiln_minimum", b)


def clamp(x, lo, hi):
    return _g(x)._t("kiln_clamp", x.id, float(lo), float(hi))


def concat(a, b, axis=-1):
    return _g(a)._t("kiln_concat", a.id, b.id, a._ax(axis))


def rope(x, pos=0, base=10000.0, mode="neox"):
    """rotary embedding of x (seq, heads, head_dim); row i at position pos + i
    (pos: an int or a size name); mode "neox" (halves) or "interleaved" (pairs)"""
    g = _g(x)
    return g._t("kiln_rope", x.id, g._sym(str(pos)), float(base), 1 if mode == "neox" else 0)


def attention(q, k, v, pos=0, scale=None, window=0):
    """causal grouped-query attention: q (seq, hq, d), k and v (kv_len, hkv, d);
    query i at position pos + i; window > 0 keeps the last `window` keys"""
    g = _g(q)
    d = q.shape[-1]
    if scale is None:
        if not isinstance(d, int):
            raise InvalidArgumentError("attention: give scale for a symbolic head size", "ERR_INVALID")
        scale = 1.0 / math.sqrt(d)
    return g._t("kiln_attention", q.id, k.id, v.id, g._sym(str(pos)), float(scale), int(window))
