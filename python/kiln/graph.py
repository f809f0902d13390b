"""kiln.graph — building kiln graphs from Python: kiln.Graph, its tensors
with Python operators, the nn functions, compiling to a callable that takes
and returns numpy arrays, the reference interpreter, and `kiln explain`'s
text.

Conventions: tensors are views into one graph; sizes are ints or names
(symbolic, bound from the arrays at each call: g.input("x", "f32",
("seq", 64)) takes any row count). bf16 values travel as np.uint16 bit
patterns and block formats (q8_0, ...) as raw np.uint8 bytes, as in the C
API. A builder error (mismatched shapes, a bad axis) raises kiln.Error at
the call that caused it and leaves the graph usable.
"""
import ctypes
import re

import numpy as np

from . import _lib
from .errors import DtypeError, Error, InvalidArgumentError, ShapeError, from_status

DTYPES = {"f32": 0, "f16": 1, "bf16": 2, "i32": 3, "u8": 4, "q8_0": 5, "q4_0": 6, "q4_k": 7, "q6_k": 8, "q5_0": 9}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
STORAGE = {0: np.float32, 1: np.float16, 2: np.uint16, 3: np.int32, 4: np.uint8}
_BLOCK = {5, 6, 7, 8, 9}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _dtype(d):
    if isinstance(d, str) and d in DTYPES:
        return DTYPES[d]
    if isinstance(d, int) and d in DTYPE_NAMES:
        return d
    try:
        nd = np.dtype(d)
    except TypeError:
        nd = None
    for k, v in STORAGE.items():
        if nd is not None and nd == np.dtype(v) and k != 2:
            return k
    raise DtypeError("unknown dtype %r: one of %s" % (d, ", ".join(DTYPES)), "ERR_DTYPE")


class Tensor:
    """A tensor of a kiln.Graph: operators + - * / @ (and reversed), unary -,
    comparisons < > <= >= (1/0 in the operands' dtype), indexing with ints
    and slices (views, no copies), and methods for the nn functions."""

    __array_priority__ = 100  # numpy scalars on the left defer to us

    def __init__(self, graph, tid):
        self.graph = graph
        self.id = tid

    # ---- info
    @property
    def shape(self):
        """the shape: ints for constant sizes, expression text for symbolic ones"""
        return tuple(self.graph._sym_value(self.graph._call("kiln_dim", self.id, i)) for i in range(self.ndim))

    @property
    def ndim(self):
        return self.graph._lib.kiln_ndim(self.graph._ptr(), self.id)

    @property
    def dtype(self):
        return DTYPE_NAMES[self.graph._lib.kiln_tensor_dtype(self.graph._ptr(), self.id)]

    def __repr__(self):
        return "kiln.Tensor(%s, %s)" % (self.dtype, self.shape)

    # ---- operators
    def _other(self, v):
        if isinstance(v, Tensor):
            if v.graph is not self.graph:
                raise InvalidArgumentError("tensors of two different graphs", "ERR_INVALID")
            return v.id
        if isinstance(v, (int, float, np.integer, np.floating, bool)):
            return self.graph._call("kiln_const", float(v), DTYPES[self.dtype])
        return NotImplemented

    def _bin(self, fn, other, swap=False):
        o = self._other(other)
        if o is NotImplemented:
            return NotImplemented
        a, b = (o, self.id) if swap else (self.id, o)
        return self.graph._t(fn, a, b)

    def __add__(self, o): return self._bin("kiln_add", o)
    def __radd__(self, o): return self._bin("kiln_add", o, True)
    def __sub__(self, o): return self._bin("kiln_sub", o)
    def __rsub__(self, o): return self._bin("kiln_sub", o, True)
    def __mul__(self, o): return self._bin("kiln_mul", o)
    def __rmul__(self, o): return self._bin("kiln_mul", o, True)
    def __truediv__(self, o): return self._bin("kiln_div", o)
    def __rtruediv__(self, o): return self._bin("kiln_div", o, True)
    def __mod__(self, o): return self._bin("kiln_mod", o)
    def __pow__(self, o): return self._bin("kiln_pow", o)
    def __matmul__(self, o): return self._bin("kiln_matmul", o)
    def __rmatmul__(self, o): return self._bin("kiln_matmul", o, True)
    def __lt__(self, o): return self._bin("kiln_lt", o)
    def __gt__(self, o): return self._bin("kiln_lt", o, True)
    def __le__(self, o): return 1 - self._bin("kiln_lt", o, True)
    def __ge__(self, o): return 1 - self._bin("kiln_lt", o)
    def __neg__(self): return self.graph._t("kiln_neg", self.id)
    __hash__ = object.__hash__

    def eq(self, o):
        """1 where equal, else 0 (== stays Python identity)"""
        return self._bin("kiln_eq", o)

    def __getitem__(self, idx):
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) > self.ndim:
            raise InvalidArgumentError("%d indices for a %d-d tensor" % (len(idx), self.ndim), "ERR_INVALID")
        t, axis, drop = self, 0, []
        for ix in idx:
            if isinstance(ix, (int, np.integer)):
                t = t._slice(axis, int(ix), int(ix) + 1 if int(ix) != -1 else None, 1)
                drop.append(axis)
            elif isinstance(ix, slice):
                t = t._slice(axis, ix.start, ix.stop, ix.step or 1)
            else:
                raise InvalidArgumentError("index %r: ints and slices only" % (ix,), "ERR_INVALID")
            axis += 1
        for a in reversed(drop):
            t = t.squeeze(a)
        return t

    def _slice(self, axis, start, stop, step):
        if step < 1:
            raise InvalidArgumentError("slice step %d: must be >= 1" % step, "ERR_INVALID")
        g = self.graph
        n = g._sym_text(g._call("kiln_dim", self.id, axis))

        def bound(v, default):
            if v is None:
                return g._sym(default)
            v = int(v)
            return g._sym("(%s) - %d" % (n, -v) if v < 0 else str(v))
        return g._t("kiln_slice", self.id, axis, bound(start, "0"), bound(stop, n), step)

    # ---- movement
    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return self.graph._t("kiln_reshape_str", self.id, _shape_text(shape).encode())

    def permute(self, *perm):
        perm = perm[0] if len(perm) == 1 and isinstance(perm[0], (tuple, list)) else perm
        arr = (ctypes.c_int * max(1, len(perm)))(*perm)
        if len(perm) != self.ndim:
            raise ShapeError("permute: %d axes for a %d-d tensor" % (len(perm), self.ndim), "ERR_SHAPE")
        return self.graph._t("kiln_permute", self.id, arr)

    def transpose(self, a=-2, b=-1):
        n = self.ndim
        return self.graph._t("kiln_transpose", self.id, a % n if n else a, b % n if n else b)

    @property
    def T(self):
        return self.transpose()

    def unsqueeze(self, axis): return self.graph._t("kiln_unsqueeze", self.id, axis)
    def squeeze(self, axis): return self.graph._t("kiln_squeeze", self.id, axis)
    def flip(self, axis): return self.graph._t("kiln_flip", self.id, axis)
    def contiguous(self): return self.graph._t("kiln_contiguous", self.id)
    def cast(self, dtype): return self.graph._t("kiln_cast", self.id, _dtype(dtype))

    # ---- reductions and nn (axis counts from the end when negative)
    def _ax(self, axis):
        return axis % self.ndim if self.ndim and axis < 0 else axis

    def sum(self, axis=-1): return self.graph._t("kiln_sum", self.id, self._ax(axis))
    def max(self, axis=-1): return self.graph._t("kiln_max", self.id, self._ax(axis))
    def mean(self, axis=-1): return self.graph._t("kiln_mean", self.id, self._ax(axis))
    def var(self, axis=-1): return self.graph._t("kiln_var", self.id, self._ax(axis))
    def argmax(self, axis=-1): return self.graph._t("kiln_argmax", self.id, self._ax(axis))
    def cumsum(self, axis=-1): return self.graph._t("kiln_cumsum", self.id, self._ax(axis))


def _shape_text(shape):
    parts = []
    for d in shape:
        if isinstance(d, (int, np.integer)):
            parts.append(str(int(d)))
        elif isinstance(d, str) and d.strip():
            parts.append(d)
        else:
            raise ShapeError("size %r: an int or a name/expression" % (d,), "ERR_SHAPE")
    return ", ".join(parts)


class Graph:
    """A kiln graph. Build it with input(), the tensor operators and the
    kiln.* nn functions, name results with output(), then compile() it (or
    evaluate() it on the reference interpreter):

        g = kiln.Graph()
        x = g.input("x", "f32", ("rows", 64))
        g.output(kiln.softmax(x), "y")
        f = g.compile(threads=2)
        y = f(x=np.random.rand(5, 64).astype(np.float32))
    """

    def __init__(self):
        self._lib = _lib.lib()
        self._g = self._lib.kiln_graph_new()
        if not self._g:
            raise Error("kiln_graph_new failed", "ERR_NOMEM")
        self.inputs = []    # (name, dtype id, shape tuple) in declaration order
        self.outputs = []
        self._out_ids = {}  # output name -> tensor id
        self._programs = []

    def _ptr(self):
        if not self._g:
            raise InvalidArgumentError("the graph is freed", "ERR_INVALID")
        return self._g

    def _check(self, what):
        st = self._lib.kiln_graph_status(self._g)
        if st:
            msg = self._lib.kiln_graph_error(self._g).decode(errors="replace")
            self._lib.kiln_graph_clear_error(self._g)
            raise from_status(st, "%s: %s" % (what, msg))

    def _call(self, fn, *args):
        return getattr(self._lib, fn)(self._ptr(), *args)

    def _t(self, fn, *args):
        tid = self._call(fn, *args)
        if tid < 0:
            self._check(fn[5:])
            raise Error("%s failed" % fn[5:])
        return Tensor(self, tid)

    def _sym(self, text):
        s = self._call("kiln_sym_parse", text.encode())
        if s < 0:
            self._check("size %r" % text)
            raise ShapeError("size %r does not parse" % text, "ERR_SHAPE")
        return s

    def _sym_text(self, s):
        buf = ctypes.create_string_buffer(256)
        return self._call("kiln_sym_str", s, buf, 256).decode()

    def _sym_value(self, s):
        v = ctypes.c_int64()
        if self._call("kiln_sym_const_value", s, ctypes.byref(v)):
            return v.value
        return self._sym_text(s)

    # ---- building
    def input(self, name, dtype, shape):
        """a named input; shape: a tuple of ints and size names / expressions"""
        shape = tuple(shape)
        t = self._t("kiln_input", name.encode(), _dtype(dtype), _shape_text(shape).encode())
        self.inputs.append((name, _dtype(dtype), shape))
        return t

    def const(self, value, dtype="f32"):
        """a scalar constant (broadcasts like a number)"""
        return self._t("kiln_const", float(value), _dtype(dtype))

    def output(self, t, name):
        """mark t as the output called name"""
        if not isinstance(t, Tensor) or t.graph is not self:
            raise InvalidArgumentError("output %r: not a tensor of this graph" % name, "ERR_INVALID")
        st = self._call("kiln_output", t.id, name.encode())
        if st:
            self._check("output %r" % name)
        self.outputs.append(name)
        self._out_ids[name] = t.id
        return t

    # ---- running
    def _bind(self, args, kwargs, sizes):
        values = dict(zip([n for n, _, _ in self.inputs], args))
        if len(args) > len(self.inputs):
            raise InvalidArgumentError("%d arguments for %d inputs" % (len(args), len(self.inputs)), "ERR_INVALID")
        for k, v in kwargs.items():
            if k not in [n for n, _, _ in self.inputs]:
                raise InvalidArgumentError("no input named %r (inputs: %s)" % (k, [n for n, _, _ in self.inputs]),
                                           "ERR_INVALID")
            values[k] = v
        keep, dims = [], dict(sizes or {})
        for name, dt, shape in self.inputs:
            if name not in values:
                raise InvalidArgumentError("input %r has no value" % name, "ERR_UNBOUND")
            a = _as_storage(values[name], dt, name)
            if dt not in _BLOCK:
                if a.ndim != len(shape):
                    raise ShapeError("input %r: %d-d array for a %d-d input %s" % (name, a.ndim, len(shape), shape),
                                     "ERR_SHAPE")
                for i, d in enumerate(shape):
                    if isinstance(d, (int, np.integer)) and a.shape[i] != d:
                        raise ShapeError("input %r: size %d of axis %d, want %d" % (name, a.shape[i], i, d),
                                         "ERR_SHAPE")
                    if isinstance(d, str) and _NAME.match(d.strip()):
                        prev = dims.setdefault(d.strip(), a.shape[i])
                        if prev != a.shape[i]:
                            raise ShapeError("size %r is %d in input %r but %d elsewhere" % (d, a.shape[i], name, prev),
                                             "ERR_SHAPE")
            keep.append(a)
            st = self._call("kiln_bind_input", name.encode(), a.ctypes.data, a.nbytes)
            if st:
                self._check("input %r" % name)
        for k, v in dims.items():
            st = self._call("kiln_bind_dim", k.encode(), int(v))
            if st:
                self._check("size %r" % k)
        return keep

    def _results(self):
        out = {}
        for name in self.outputs:
            nd = ctypes.c_int()
            dims = (ctypes.c_int64 * 8)()
            st = self._call("kiln_output_shape", name.encode(), ctypes.byref(nd), dims)
            if st:
                self._check("output %r" % name)
            shape = tuple(dims[i] for i in range(nd.value))
            dt = self._lib.kiln_tensor_dtype(self._g, self._out_ids[name])
            if dt in STORAGE:
                a = np.empty(shape, dtype=STORAGE[dt])
            else:
                a = np.empty(self._lib.kiln_dtype_bytes(dt, int(np.prod(shape))), dtype=np.uint8)
            st = self._call("kiln_read_output", name.encode(), a.ctypes.data, a.nbytes)
            if st:
                self._check("output %r" % name)
            out[name] = a
        return out[self.outputs[0]] if len(out) == 1 else out

    def evaluate(self, *args, sizes=None, **kwargs):
        """run on the reference interpreter (the oracle): inputs by position
        or name; returns the output array, or a dict when there are several"""
        keep = self._bind(args, kwargs, sizes)
        st = self._call("kiln_eval_reference")
        del keep
        if st:
            self._check("evaluate")
        return self._results()

    def compile(self, threads=0, backend=None, search_budget=0.0):
        """compile to native code: a callable f(*arrays, sizes=None, **named_arrays)"""
        if not self.outputs:
            raise InvalidArgumentError("the graph has no outputs (Graph.output)", "ERR_INVALID")
        o = self._lib.kiln_compile_defaults()
        o.threads = int(threads)
        o.search_budget = float(search_budget)
        b = backend.encode() if backend else None
        o.backend = b
        st = ctypes.c_int(0)
        p = self._lib.kiln_compile(self._ptr(), ctypes.byref(o), ctypes.byref(st))
        if not p:
            msg = self._lib.kiln_graph_error(self._g).decode(errors="replace")
            self._lib.kiln_graph_clear_error(self._g)
            raise from_status(st.value or 1, "compile: " + msg)
        c = Compiled(self, p)
        self._programs.append(c)
        return c

    def explain(self, graph=False, egraph=False, optimized=False, json=False, kernels=False, source=False):
        """`kiln explain`'s text for this graph: with no selection the e-graph report"""
        if not (graph or optimized or kernels or source):
            egraph = True
        parts = []
        if graph:
            parts.append(_lib.take_string(self._call("kiln_graph_text")))
        if egraph:
            parts.append(_lib.take_string(self._call("kiln_graph_egraph_report", 1 if json else 0)))
        if optimized:
            o = self._call("kiln_graph_optimize")
            if not o:
                self._check("optimize")
            parts.append(_lib.take_string(self._lib.kiln_graph_text(o)))
            self._lib.kiln_graph_free(o)
        if kernels or source:
            c = self.compile()
            try:
                if kernels:
                    parts.append(_lib.take_string(self._lib.kiln_program_kernels(c._p)))
                if source:
                    parts.append(self._lib.kiln_program_source(c._p).decode())
            finally:
                c.free()
        return "".join(p or "" for p in parts)

    def free(self):
        """release the graph and its compiled programs (also on garbage collection)"""
        for c in self._programs:
            c.free()
        self._programs = []
        if self._g:
            self._lib.kiln_graph_free(self._g)
            self._g = None

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


def _as_storage(v, dt, name):
    """v as the contiguous numpy array kiln reads for dtype dt"""
    a = np.asarray(v)
    if dt in _BLOCK:
        if a.dtype != np.uint8:
            raise DtypeError("input %r (%s): raw np.uint8 block bytes, not %s" % (name, DTYPE_NAMES[dt], a.dtype),
                             "ERR_DTYPE")
        return np.ascontiguousarray(a)
    want = np.dtype(STORAGE[dt])
    if a.dtype == want:
        return np.ascontiguousarray(a)
    if dt == 2:
        raise DtypeError("input %r (bf16): np.uint16 bit patterns, not %s" % (name, a.dtype), "ERR_DTYPE")
    same_kind = (a.dtype.kind == "f" and want.kind == "f") or (a.dtype.kind in "iu" and want.kind in "iu")
    if not same_kind:
        raise DtypeError("input %r is %s: an array of %s is not converted" % (name, DTYPE_NAMES[dt], a.dtype),
                         "ERR_DTYPE")
    return np.ascontiguousarray(a, dtype=want)


class Compiled:
    """A compiled graph: call it with numpy arrays (by position in input
    order, or by name), sizes={"name": n} for sizes no input array shows"""

    def __init__(self, graph, p):
        self.graph = graph
        self._p = p

    def __call__(self, *args, sizes=None, **kwargs):
        if not self._p:
            raise InvalidArgumentError("the compiled program is freed", "ERR_INVALID")
        g = self.graph
        keep = g._bind(args, kwargs, sizes)
        st = g._lib.kiln_run(self._p)
        del keep
        if st:
            g._check("run")
        return g._results()

    def kernels(self):
        """the compiled kernels as text"""
        return _lib.take_string(self.graph._lib.kiln_program_kernels(self._p))

    def source(self):
        """the generated C source"""
        return self.graph._lib.kiln_program_source(self._p).decode()

    def free(self):
        if self._p:
            self.graph._lib.kiln_program_free(self._p)
            self._p = None
