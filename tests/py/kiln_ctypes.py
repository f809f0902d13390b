"""kiln_ctypes.py — a thin ctypes binding of include/kiln.h for kiln's Python tests.

The library is build/libkiln.so, or the path in $KILN_LIB (tests/run.sh sets it,
so the ASan suite loads the ASan build). `lib` exposes every public C function
with its argtypes/restype; `Graph` wraps one kiln_graph with methods named after
the C functions minus the `kiln_` prefix.

Conventions of the wrapper (so tests read like the C API but stay short):
  - tensor ids are plain ints; symbolic ids are `Sym` (an int subclass), so a
    shape list can mix literal sizes (int), expressions (str, parsed with
    kiln_sym_parse) and existing symbols (Sym) without ambiguity.
  - builder calls never raise: the C API's sticky error is the thing under test;
    g.status() / g.error() read it. Only g.run() raises (KilnError).
  - arrays handed to g.bind() are kept alive by the Graph until it is freed,
    because kiln reads the caller's buffer during the run.
  - bf16 has no numpy dtype: it is carried as np.uint16 bit patterns
    (to_bf16 / from_bf16). Block formats (q8_0, ...) are raw np.uint8 bytes.
"""
import ctypes
import os
import sys
import traceback

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(_HERE))
LIB_PATH = os.environ.get("KILN_LIB") or os.path.join(REPO, "build", "libkiln.so")

# a test file run alone gets the environment tests/run.sh gives the suite
# (its comments say why): poisoned outputs, no first-run search, the fixed
# f32 default schedules (compiled results held to f32 tolerances), and a
# tuning DB of its own, never the user's
for _name, _value in (("KILN_POISON_RESULTS", "1"), ("KILN_TUNE", "0"), ("KILN_FIXED_DEFAULTS", "1")):
    os.environ.setdefault(_name, _value)
if "KILN_TUNEDB" not in os.environ:
    import tempfile
    os.environ["KILN_TUNEDB"] = os.path.join(tempfile.mkdtemp(prefix="kiln_tests_db_"), "tune.db")

def fnv1a64(data):
    """FNV-1a 64 of bytes: the tuning DB's line checksum (src/sched/tunedb.c)"""
    h = 0xcbf29ce484222325
    for c in data:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


MAX_DIMS = 8
NONE = -1

# kiln_status
OK, ERR_INVALID, ERR_SHAPE, ERR_DTYPE, ERR_UNBOUND, ERR_RANGE, ERR_NOMEM, ERR_IO, \
    ERR_FORMAT, ERR_UNSUPPORTED = range(10)
STATUS_NAMES = ["OK", "ERR_INVALID", "ERR_SHAPE", "ERR_DTYPE", "ERR_UNBOUND", "ERR_RANGE",
                "ERR_NOMEM", "ERR_IO", "ERR_FORMAT", "ERR_UNSUPPORTED"]

# kiln_dtype
F32, F16, BF16, I32, U8, Q8_0, Q4_0, Q4_K, Q6_K, Q5_0 = range(10)
DTYPE_COUNT = 10
DTYPE_NAMES = ["f32", "f16", "bf16", "i32", "u8", "q8_0", "q4_0", "q4_k", "q6_k", "q5_0"]
BLOCK_FORMATS = (Q8_0, Q4_0, Q4_K, Q6_K, Q5_0)
# elements per block, bytes per block (GGUF layouts; see src/ir/quant.h)
BLOCK_LAYOUT = {Q8_0: (32, 34), Q4_0: (32, 18), Q4_K: (256, 144), Q6_K: (256, 210), Q5_0: (32, 22)}

# kiln_rope_mode
ROPE_INTERLEAVED, ROPE_NEOX = 0, 1

# numpy storage for each scalar dtype
NP_STORAGE = {F32: np.float32, F16: np.float16, BF16: np.uint16, I32: np.int32, U8: np.uint8}


class Sym(int):
    """A kiln_sym id (distinct from a literal size when building shapes)."""

    def __repr__(self):
        return "Sym(%d)" % int(self)


class KilnError(Exception):
    def __init__(self, status, message):
        self.status = status
        self.status_name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else str(status)
        self.message = message
        super().__init__("%s: %s" % (self.status_name, message))


# ---------------------------------------------------------------- raw binding

_c_graph = ctypes.c_void_p
_t = ctypes.c_int32       # kiln_tensor
_s = ctypes.c_int32       # kiln_sym
_st = ctypes.c_int        # kiln_status
_dt = ctypes.c_int        # kiln_dtype
_i = ctypes.c_int
_i64 = ctypes.c_int64
_d = ctypes.c_double
_str = ctypes.c_char_p
_size = ctypes.c_size_t
_syms = ctypes.POINTER(ctypes.c_int32)
_ints = ctypes.POINTER(ctypes.c_int)
_vp = ctypes.c_void_p



class CompileOptions(ctypes.Structure):
    """kiln_compile_options (include/kiln_compile.h)"""
    _fields_ = [("backend", ctypes.c_char_p), ("threads", ctypes.c_int),
                ("search_budget", ctypes.c_double), ("vector", ctypes.c_int), ("exact", ctypes.c_int),
                ("fixed_defaults", ctypes.c_int),
                # the knobs (kiln_compile_defaults fills them from KILN_*; every field, in order, since
                # the struct is returned by value and must have the C size)
                ("no_egraph", ctypes.c_int), ("eg_plain", ctypes.c_int), ("no_fuse", ctypes.c_int),
                ("no_contract", ctypes.c_int), ("no_split", ctypes.c_int), ("no_pack_copy", ctypes.c_int),
                ("stream_min", ctypes.c_longlong), ("profile", ctypes.c_int), ("poison", ctypes.c_int),
                ("tunedb_off", ctypes.c_int), ("tune_verbose", ctypes.c_int), ("tune_warm", ctypes.c_int),
                ("inject_wrong", ctypes.c_int), ("gtune_inject_wrong", ctypes.c_int),
                ("contract_sched_small", ctypes.c_char_p), ("contract_sched_large", ctypes.c_char_p),
                ("gpu_contract", ctypes.c_char_p), ("gpu_group", ctypes.c_int), ("gpu_resident", ctypes.c_int),
                ("gpu_emit_only", ctypes.c_int), ("cuda_archs", ctypes.c_char_p), ("stream", ctypes.c_int),
                ("no_stream_tile", ctypes.c_int), ("stream_bf16", ctypes.c_int), ("decode_tile_rows", ctypes.c_int), ("no_epilogue", ctypes.c_int)]


# include/kiln_compile.h: bound when the library has them (see _Lib)
COMPILE_SIGNATURES = {
    "kiln_compile_defaults": (CompileOptions, []),
    "kiln_compile": (_vp, [_c_graph, ctypes.POINTER(CompileOptions), ctypes.POINTER(_st)]),
    "kiln_run": (_st, [_vp]),
    "kiln_program_free": (None, [_vp]),
    "kiln_program_kernels": (_vp, [_vp]),          # malloc'd
    "kiln_program_source": (_str, [_vp]),
    "kiln_program_library": (_str, [_vp]),
    "kiln_program_kernel_count": (_i, [_vp]),
    "kiln_program_arena_bytes": (_size, [_vp]),
    "kiln_device_report": (_vp, [_i]),             # malloc'd
    "kiln_device_fingerprint": (_vp, []),          # malloc'd
}

# include/kiln.h. name: (restype, [argtypes])
SIGNATURES = {
    "kiln_status_name": (_str, [_st]),
    "kiln_dtype_name": (_str, [_dt]),
    "kiln_dtype_bytes": (_size, [_dt, _i64]),
    "kiln_dtype_is_float": (_i, [_dt]),
    "kiln_dtype_is_block": (_i, [_dt]),
    "kiln_graph_new": (_c_graph, []),
    "kiln_graph_free": (None, [_c_graph]),
    "kiln_graph_status": (_st, [_c_graph]),
    "kiln_graph_error": (_str, [_c_graph]),
    "kiln_graph_clear_error": (None, [_c_graph]),
    "kiln_sym_int": (_s, [_c_graph, _i64]),
    "kiln_sym_var": (_s, [_c_graph, _str]),
    "kiln_sym_parse": (_s, [_c_graph, _str]),
    "kiln_sym_add": (_s, [_c_graph, _s, _s]),
    "kiln_sym_sub": (_s, [_c_graph, _s, _s]),
    "kiln_sym_mul": (_s, [_c_graph, _s, _s]),
    "kiln_sym_div": (_s, [_c_graph, _s, _s]),
    "kiln_sym_str": (_vp, [_c_graph, _s, _vp, _size]),
    "kiln_sym_const_value": (_i, [_c_graph, _s, ctypes.POINTER(_i64)]),
    "kiln_input": (_t, [_c_graph, _str, _dt, _str]),
    "kiln_input_dims": (_t, [_c_graph, _str, _dt, _i, _syms]),
    "kiln_state": (_t, [_c_graph, _str, _dt, _str]),
    "kiln_const": (_t, [_c_graph, _d, _dt]),
    "kiln_full": (_t, [_c_graph, _d, _dt, _i, _syms]),
    "kiln_iota": (_t, [_c_graph, _dt, _i, _syms, _i]),
    "kiln_exp2": (_t, [_c_graph, _t]),
    "kiln_log2": (_t, [_c_graph, _t]),
    "kiln_sin": (_t, [_c_graph, _t]),
    "kiln_sqrt": (_t, [_c_graph, _t]),
    "kiln_recip": (_t, [_c_graph, _t]),
    "kiln_add": (_t, [_c_graph, _t, _t]),
    "kiln_mul": (_t, [_c_graph, _t, _t]),
    "kiln_mod": (_t, [_c_graph, _t, _t]),
    "kiln_lt": (_t, [_c_graph, _t, _t]),
    "kiln_sum": (_t, [_c_graph, _t, _i]),
    "kiln_max": (_t, [_c_graph, _t, _i]),
    "kiln_gather": (_t, [_c_graph, _t, _t]),
    "kiln_scatter": (_t, [_c_graph, _t, _t, _t]),
    "kiln_cast": (_t, [_c_graph, _t, _dt]),
    "kiln_contiguous": (_t, [_c_graph, _t]),
    "kiln_reshape": (_t, [_c_graph, _t, _i, _syms]),
    "kiln_reshape_str": (_t, [_c_graph, _t, _str]),
    "kiln_permute": (_t, [_c_graph, _t, _ints]),
    "kiln_transpose": (_t, [_c_graph, _t, _i, _i]),
    "kiln_expand": (_t, [_c_graph, _t, _i, _syms]),
    "kiln_slice": (_t, [_c_graph, _t, _i, _s, _s, _i64]),
    "kiln_pad": (_t, [_c_graph, _t, _i, _s, _s]),
    "kiln_window": (_t, [_c_graph, _t, _i, _i64, _i64, _i64]),
    "kiln_flip": (_t, [_c_graph, _t, _i]),
    "kiln_unsqueeze": (_t, [_c_graph, _t, _i]),
    "kiln_squeeze": (_t, [_c_graph, _t, _i]),
    "kiln_ndim": (_i, [_c_graph, _t]),
    "kiln_dim": (_s, [_c_graph, _t, _i]),
    "kiln_tensor_dtype": (_dt, [_c_graph, _t]),
    "kiln_shape_str": (_vp, [_c_graph, _t, _vp, _size]),
    "kiln_neg": (_t, [_c_graph, _t]),
    "kiln_sub": (_t, [_c_graph, _t, _t]),
    "kiln_div": (_t, [_c_graph, _t, _t]),
    "kiln_exp": (_t, [_c_graph, _t]),
    "kiln_log": (_t, [_c_graph, _t]),
    "kiln_pow": (_t, [_c_graph, _t, _t]),
    "kiln_tanh": (_t, [_c_graph, _t]),
    "kiln_sigmoid": (_t, [_c_graph, _t]),
    "kiln_relu": (_t, [_c_graph, _t]),
    "kiln_gelu_tanh": (_t, [_c_graph, _t]),
    "kiln_gelu_erf": (_t, [_c_graph, _t]),
    "kiln_silu": (_t, [_c_graph, _t]),
    "kiln_softplus": (_t, [_c_graph, _t]),
    "kiln_abs": (_t, [_c_graph, _t]),
    "kiln_maximum": (_t, [_c_graph, _t, _t]),
    "kiln_minimum": (_t, [_c_graph, _t, _t]),
    "kiln_where": (_t, [_c_graph, _t, _t, _t]),
    "kiln_eq": (_t, [_c_graph, _t, _t]),
    "kiln_clamp": (_t, [_c_graph, _t, _d, _d]),
    "kiln_mean": (_t, [_c_graph, _t, _i]),
    "kiln_var": (_t, [_c_graph, _t, _i]),
    "kiln_softmax": (_t, [_c_graph, _t, _i]),
    "kiln_log_softmax": (_t, [_c_graph, _t, _i]),
    "kiln_rmsnorm": (_t, [_c_graph, _t, _t, _d]),
    "kiln_layernorm": (_t, [_c_graph, _t, _t, _t, _d]),
    "kiln_matmul": (_t, [_c_graph, _t, _t]),
    "kiln_linear": (_t, [_c_graph, _t, _t, _t]),
    "kiln_embedding": (_t, [_c_graph, _t, _t]),
    "kiln_rope": (_t, [_c_graph, _t, _s, _d, _i]),
    "kiln_attention": (_t, [_c_graph, _t, _t, _t, _s, _d, _i64]),
    "kiln_argmax": (_t, [_c_graph, _t, _i]),
    "kiln_cumsum": (_t, [_c_graph, _t, _i]),
    "kiln_concat": (_t, [_c_graph, _t, _t, _i]),
    "kiln_conv2d": (_t, [_c_graph, _t, _t, _t, _i, _i, _i]),
    "kiln_output": (_st, [_c_graph, _t, _str]),
    "kiln_bind_dim": (_st, [_c_graph, _str, _i64]),
    "kiln_bind_input": (_st, [_c_graph, _str, _vp, _size]),
    "kiln_eval_reference": (_st, [_c_graph]),
    "kiln_output_shape": (_st, [_c_graph, _str, _ints, ctypes.POINTER(_i64)]),
    "kiln_read_output": (_st, [_c_graph, _str, _vp, _size]),
    # the returned strings are malloc'd: keep the pointer to free it
    "kiln_graph_optimize": (_c_graph, [_c_graph]),
    "kiln_graph_egraph_report": (_vp, [_c_graph, _i]),
    "kiln_graph_text": (_vp, [_c_graph]),
    "kiln_graph_dot": (_vp, [_c_graph]),
}


class _Lib:
    """The loaded library; attributes are the C functions (missing ones raise
    AttributeError only when used, so a partly built library still loads)."""

    def __init__(self, path):
        self.path = path
        self.dll = ctypes.CDLL(path)
        self.missing = []
        for name, (res, args) in list(SIGNATURES.items()) + list(COMPILE_SIGNATURES.items()):
            try:
                fn = getattr(self.dll, name)
            except AttributeError:
                self.missing.append(name)
                continue
            fn.restype = res
            fn.argtypes = args
            setattr(self, name, fn)
        # what the library malloc'd is released by the library (kiln_free)
        self.free = self.dll.kiln_free
        self.free.argtypes = [_vp]
        self.free.restype = None

    def __getattr__(self, name):
        raise AttributeError("%s: %s is not in %s" % (name, name, self.path))


_lib = None


def load():
    global _lib
    if _lib is None:
        _lib = _Lib(LIB_PATH)
    return _lib


class _LazyLib:
    def __getattr__(self, name):
        return getattr(load(), name)


lib = _LazyLib()


def status_name(s):
    return lib.kiln_status_name(s).decode()


def dtype_name(t):
    return lib.kiln_dtype_name(t).decode()


def _take_string(ptr):
    """copy and free a malloc'd C string"""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode()
    finally:
        lib.free(ptr)


# ---------------------------------------------------------------- bf16 helpers

def to_bf16(x):
    """float array -> np.uint16 bf16 bit patterns, round-to-nearest-even; NaN stays NaN"""
    f = np.array(x, dtype=np.float32, order="C")  # ascontiguousarray would make 0-d 1-d
    shape = f.shape
    f = f.reshape(-1)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        out[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)  # keep sign, force quiet
    return out.reshape(shape)


def from_bf16(b):
    """np.uint16 bf16 bit patterns -> float32"""
    b = np.asarray(b, dtype=np.uint16)
    # 1-d while shifting: a 0-d shift yields a numpy scalar, whose view changes shape
    wide = np.array(b.reshape(-1).astype(np.uint32) << np.uint32(16), order="C")
    return wide.view(np.float32).reshape(b.shape)


def round_to(x, t):
    """values of float64/float32 array x rounded to dtype t, returned as float64
    (what a kiln result of dtype t should hold)"""
    x = np.asarray(x)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is the intended rounding
        return _round_to(x, t)


def _round_to(x, t):
    if t == F32:
        return x.astype(np.float32).astype(np.float64)
    if t == F16:
        return x.astype(np.float16).astype(np.float64)
    if t == BF16:
        return from_bf16(to_bf16(x.astype(np.float32))).astype(np.float64)
    raise ValueError("round_to: not a float dtype")


def to_storage(x, t):
    """a numpy array of values -> the C-contiguous storage array kiln expects for dtype t"""
    if t == BF16:
        return np.ascontiguousarray(to_bf16(x))
    return np.ascontiguousarray(np.asarray(x).astype(NP_STORAGE[t]))


def from_storage(a, t):
    """kiln storage array of dtype t -> float64 values (ints stay exact)"""
    if t == BF16:
        return from_bf16(a).astype(np.float64)
    return np.asarray(a).astype(np.float64)


# ---------------------------------------------------------------- Graph

def _egraph_compare(name, t, got, want):
    """outputs of a graph and of its extracted equivalent agree within rounding:
    rewrites reassociate and refactor, so floats get a tolerance per dtype;
    integers and raw bytes must be equal"""
    if t == F32 or (t is None and got.dtype == np.float32):
        ok = np.allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)
    elif t == F16 or (t is None and got.dtype == np.float16):
        ok = np.allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-2, atol=2e-3, equal_nan=True)
    elif t == BF16:
        a, b = from_bf16(got), from_bf16(want)
        ok = np.allclose(a, b, rtol=6e-2, atol=3e-2, equal_nan=True)  # 2 ulps at magnitude 2
    else:  # integers, and the bytes of block formats
        ok = np.array_equal(got, want)
    if not ok:
        diff = np.argwhere(~np.isclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3, equal_nan=True))
        raise KilnError(ERR_INVALID, "extracted graph differs on %s (first at %s: %s vs %s)" % (
            name, diff[0].tolist() if len(diff) else "?", got[tuple(diff[0])] if len(diff) else "?",
            want[tuple(diff[0])] if len(diff) else "?"))


class Graph:
    def __init__(self):
        self.lib = load()
        self.ptr = self.lib.kiln_graph_new()
        if not self.ptr:
            raise KilnError(ERR_NOMEM, "kiln_graph_new returned NULL")
        self._keep = {}          # name -> bound array (kept alive for the run)
        self._out_dtype = {}     # output name -> dtype

    # lifetime
    def free(self):
        if self.ptr:
            self.lib.kiln_graph_free(self.ptr)
            self.ptr = None
            self._keep.clear()

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    # errors
    def status(self):
        return self.lib.kiln_graph_status(self.ptr)

    def error(self):
        e = self.lib.kiln_graph_error(self.ptr)
        return e.decode() if e is not None else None

    def clear_error(self):
        self.lib.kiln_graph_clear_error(self.ptr)

    def check(self):
        """raise KilnError if the graph carries an error"""
        s = self.status()
        if s != OK:
            raise KilnError(s, self.error())

    # symbols
    def sym(self, v):
        """int -> constant, str -> parsed expression, Sym -> itself"""
        if isinstance(v, Sym):
            return v
        if isinstance(v, (int, np.integer)):
            return self.sym_int(int(v))
        if isinstance(v, str):
            return self.sym_parse(v)
        raise TypeError("not a dimension: %r" % (v,))

    def _sym_array(self, dims):
        syms = [int(self.sym(d)) for d in dims]
        return len(syms), (ctypes.c_int32 * max(1, len(syms)))(*syms)

    def sym_int(self, v):
        return Sym(self.lib.kiln_sym_int(self.ptr, int(v)))

    def sym_var(self, name):
        return Sym(self.lib.kiln_sym_var(self.ptr, name.encode()))

    def sym_parse(self, expr):
        return Sym(self.lib.kiln_sym_parse(self.ptr, expr.encode()))

    def sym_add(self, a, b):
        return Sym(self.lib.kiln_sym_add(self.ptr, self.sym(a), self.sym(b)))

    def sym_sub(self, a, b):
        return Sym(self.lib.kiln_sym_sub(self.ptr, self.sym(a), self.sym(b)))

    def sym_mul(self, a, b):
        return Sym(self.lib.kiln_sym_mul(self.ptr, self.sym(a), self.sym(b)))

    def sym_div(self, a, b):
        return Sym(self.lib.kiln_sym_div(self.ptr, self.sym(a), self.sym(b)))

    def sym_str(self, s):
        buf = ctypes.create_string_buffer(512)
        self.lib.kiln_sym_str(self.ptr, int(s), buf, 512)
        return buf.value.decode()

    def sym_const_value(self, s):
        """the constant value of s, or None"""
        v = ctypes.c_int64(0)
        if self.lib.kiln_sym_const_value(self.ptr, int(s), ctypes.byref(v)):
            return v.value
        return None

    # leaves
    def input(self, name, dtype, shape=""):
        if not isinstance(shape, str):
            return self.input_dims(name, dtype, shape)
        return self.lib.kiln_input(self.ptr, name.encode(), dtype, shape.encode())

    def input_dims(self, name, dtype, dims):
        n, arr = self._sym_array(dims)
        return self.lib.kiln_input_dims(self.ptr, name.encode(), dtype, n, arr)

    def state(self, name, dtype, shape=""):
        if not isinstance(shape, str):
            shape = ", ".join(str(d) if not isinstance(d, Sym) else self.sym_str(d) for d in shape)
        return self.lib.kiln_state(self.ptr, name.encode(), dtype, shape.encode())

    def const(self, value, dtype=F32):
        return self.lib.kiln_const(self.ptr, float(value), dtype)

    def full(self, value, dtype, dims):
        n, arr = self._sym_array(dims)
        return self.lib.kiln_full(self.ptr, float(value), dtype, n, arr)

    def iota(self, dtype, dims, axis):
        n, arr = self._sym_array(dims)
        return self.lib.kiln_iota(self.ptr, dtype, n, arr, axis)

    # primitive ops
    def exp2(self, x): return self.lib.kiln_exp2(self.ptr, x)
    def log2(self, x): return self.lib.kiln_log2(self.ptr, x)
    def sin(self, x): return self.lib.kiln_sin(self.ptr, x)
    def sqrt(self, x): return self.lib.kiln_sqrt(self.ptr, x)
    def recip(self, x): return self.lib.kiln_recip(self.ptr, x)
    def add(self, a, b): return self.lib.kiln_add(self.ptr, a, b)
    def mul(self, a, b): return self.lib.kiln_mul(self.ptr, a, b)
    def mod(self, a, b): return self.lib.kiln_mod(self.ptr, a, b)
    def lt(self, a, b): return self.lib.kiln_lt(self.ptr, a, b)
    def sum(self, x, axis): return self.lib.kiln_sum(self.ptr, x, axis)
    def max(self, x, axis): return self.lib.kiln_max(self.ptr, x, axis)
    def gather(self, table, idx): return self.lib.kiln_gather(self.ptr, table, idx)
    def scatter(self, state, idx, values): return self.lib.kiln_scatter(self.ptr, state, idx, values)
    def cast(self, x, dtype): return self.lib.kiln_cast(self.ptr, x, dtype)
    def contiguous(self, x): return self.lib.kiln_contiguous(self.ptr, x)

    # movement views
    def reshape(self, x, dims):
        if isinstance(dims, str):
            return self.reshape_str(x, dims)
        n, arr = self._sym_array(dims)
        return self.lib.kiln_reshape(self.ptr, x, n, arr)

    def reshape_str(self, x, shape):
        return self.lib.kiln_reshape_str(self.ptr, x, shape.encode())

    def permute(self, x, perm):
        arr = (ctypes.c_int * max(1, len(perm)))(*[int(p) for p in perm])
        return self.lib.kiln_permute(self.ptr, x, arr)

    def transpose(self, x, a, b): return self.lib.kiln_transpose(self.ptr, x, a, b)

    def expand(self, x, dims):
        n, arr = self._sym_array(dims)
        return self.lib.kiln_expand(self.ptr, x, n, arr)

    def slice(self, x, axis, start, stop, step=1):
        return self.lib.kiln_slice(self.ptr, x, axis, self.sym(start), self.sym(stop), int(step))

    def pad(self, x, axis, before, after):
        return self.lib.kiln_pad(self.ptr, x, axis, self.sym(before), self.sym(after))

    def window(self, x, axis, size, stride=1, dilation=1):
        return self.lib.kiln_window(self.ptr, x, axis, int(size), int(stride), int(dilation))

    def flip(self, x, axis): return self.lib.kiln_flip(self.ptr, x, axis)
    def unsqueeze(self, x, axis): return self.lib.kiln_unsqueeze(self.ptr, x, axis)
    def squeeze(self, x, axis): return self.lib.kiln_squeeze(self.ptr, x, axis)

    # tensor info
    def ndim(self, x): return self.lib.kiln_ndim(self.ptr, x)
    def dim(self, x, axis): return Sym(self.lib.kiln_dim(self.ptr, x, axis))
    def tensor_dtype(self, x): return self.lib.kiln_tensor_dtype(self.ptr, x)

    def shape_str(self, x):
        buf = ctypes.create_string_buffer(512)
        self.lib.kiln_shape_str(self.ptr, x, buf, 512)
        return buf.value.decode()

    # nn
    def neg(self, x): return self.lib.kiln_neg(self.ptr, x)
    def sub(self, a, b): return self.lib.kiln_sub(self.ptr, a, b)
    def div(self, a, b): return self.lib.kiln_div(self.ptr, a, b)
    def exp(self, x): return self.lib.kiln_exp(self.ptr, x)
    def log(self, x): return self.lib.kiln_log(self.ptr, x)
    def pow(self, x, y): return self.lib.kiln_pow(self.ptr, x, y)
    def tanh(self, x): return self.lib.kiln_tanh(self.ptr, x)
    def sigmoid(self, x): return self.lib.kiln_sigmoid(self.ptr, x)
    def relu(self, x): return self.lib.kiln_relu(self.ptr, x)
    def gelu_tanh(self, x): return self.lib.kiln_gelu_tanh(self.ptr, x)
    def gelu_erf(self, x): return self.lib.kiln_gelu_erf(self.ptr, x)
    def silu(self, x): return self.lib.kiln_silu(self.ptr, x)
    def softplus(self, x): return self.lib.kiln_softplus(self.ptr, x)
    def abs(self, x): return self.lib.kiln_abs(self.ptr, x)
    def maximum(self, a, b): return self.lib.kiln_maximum(self.ptr, a, b)
    def minimum(self, a, b): return self.lib.kiln_minimum(self.ptr, a, b)
    def where(self, c, a, b): return self.lib.kiln_where(self.ptr, c, a, b)
    def eq(self, a, b): return self.lib.kiln_eq(self.ptr, a, b)
    def clamp(self, x, lo, hi): return self.lib.kiln_clamp(self.ptr, x, float(lo), float(hi))
    def mean(self, x, axis): return self.lib.kiln_mean(self.ptr, x, axis)
    def var(self, x, axis): return self.lib.kiln_var(self.ptr, x, axis)
    def softmax(self, x, axis): return self.lib.kiln_softmax(self.ptr, x, axis)
    def log_softmax(self, x, axis): return self.lib.kiln_log_softmax(self.ptr, x, axis)
    def rmsnorm(self, x, weight=NONE, eps=1e-6): return self.lib.kiln_rmsnorm(self.ptr, x, weight, float(eps))

    def layernorm(self, x, weight=NONE, bias=NONE, eps=1e-5):
        return self.lib.kiln_layernorm(self.ptr, x, weight, bias, float(eps))

    def matmul(self, a, b): return self.lib.kiln_matmul(self.ptr, a, b)
    def linear(self, x, w, bias=NONE): return self.lib.kiln_linear(self.ptr, x, w, bias)
    def embedding(self, table, ids): return self.lib.kiln_embedding(self.ptr, table, ids)

    def rope(self, x, pos, freq_base=10000.0, mode=ROPE_INTERLEAVED):
        return self.lib.kiln_rope(self.ptr, x, self.sym(pos), float(freq_base), mode)

    def attention(self, q, k, v, q_pos=0, scale=1.0, window=0):
        return self.lib.kiln_attention(self.ptr, q, k, v, self.sym(q_pos), float(scale), int(window))

    def argmax(self, x, axis): return self.lib.kiln_argmax(self.ptr, x, axis)
    def cumsum(self, x, axis): return self.lib.kiln_cumsum(self.ptr, x, axis)
    def concat(self, a, b, axis): return self.lib.kiln_concat(self.ptr, a, b, axis)

    def conv2d(self, x, w, bias=NONE, stride=1, padding=0, dilation=1):
        return self.lib.kiln_conv2d(self.ptr, x, w, bias, stride, padding, dilation)

    # compiled execution (include/kiln_compile.h)
    def compile(self, backend=None, threads=0, search_budget=0.0, vector=0):
        """kiln_compile with these options; raises KilnError on failure"""
        opt = self.lib.kiln_compile_defaults()
        opt.backend = backend.encode() if backend else None
        opt.threads = int(threads)
        opt.search_budget = float(search_budget)
        opt.vector = int(vector)
        st = ctypes.c_int(0)
        p = self.lib.kiln_compile(self.ptr, ctypes.byref(opt), ctypes.byref(st))
        if not p:
            raise KilnError(st.value, self.error())
        return Program(self, p)

    # outputs, bindings, runs
    def output(self, x, name):
        """mark x as output `name`; returns the kiln_status"""
        if x != NONE:
            self._out_dtype[name] = self.lib.kiln_tensor_dtype(self.ptr, x)
        return self.lib.kiln_output(self.ptr, x, name.encode())

    def bind_dim(self, name, value):
        return self.lib.kiln_bind_dim(self.ptr, name.encode(), int(value))

    def bind(self, name, arr, dtype=None):
        """bind a numpy array as input/state `name`; returns the kiln_status.
        The array must already be C-contiguous in kiln's storage dtype (this
        wrapper does not convert silently, so tests control the exact bytes);
        dtype, when given, is checked against the array's storage."""
        if not isinstance(arr, np.ndarray):
            raise TypeError("bind: need a numpy array")
        if not arr.flags["C_CONTIGUOUS"]:
            raise ValueError("bind: array for %s is not C-contiguous" % name)
        if dtype is not None:
            want = np.uint8 if dtype in BLOCK_FORMATS else NP_STORAGE[dtype]
            if arr.dtype != np.dtype(want):
                raise ValueError("bind: %s needs %s storage, got %s" % (DTYPE_NAMES[dtype], np.dtype(want), arr.dtype))
        self._keep[name] = arr
        return self.lib.kiln_bind_input(self.ptr, name.encode(), ctypes.c_void_p(arr.ctypes.data), arr.nbytes)

    def bind_raw(self, name, arr, nbytes):
        """bind with an explicit byte count (for wrong-size tests)"""
        self._keep[name] = arr
        return self.lib.kiln_bind_input(self.ptr, name.encode(), ctypes.c_void_p(arr.ctypes.data), int(nbytes))

    def eval_reference(self):
        return self.lib.kiln_eval_reference(self.ptr)

    def run(self, check_egraph=None):
        """evaluate with the reference interpreter. Unless KILN_CHECK_EGRAPH=0,
        the graph also goes through the rewrite stage (graph -> e-graph ->
        extraction, kiln_graph_optimize) and the extracted graph, evaluated
        from the same inputs and initial state, must give the same outputs and
        final state within rounding; a mismatch raises KilnError."""
        if check_egraph is None:
            check_egraph = os.environ.get("KILN_CHECK_EGRAPH", "1") != "0"
        before = {k: v.copy() for k, v in self._keep.items()} if check_egraph else None
        s = self.lib.kiln_eval_reference(self.ptr)
        if s != OK:
            raise KilnError(s, self.error())
        if check_egraph:
            self._check_extracted(before)
        return s

    def _check_extracted(self, before):
        names = list(self._out_dtype.keys())
        want = {n: self.result(n) for n in names}
        state_after = {k: v.copy() for k, v in self._keep.items()}
        for k, v in self._keep.items():       # the same initial state
            v[...] = before[k]
        opt = self.lib.kiln_graph_optimize(self.ptr)
        if not opt:
            raise KilnError(self.status(), "egraph pipeline: " + self.error())
        try:
            s = self.lib.kiln_eval_reference(opt)
            if s != OK:
                raise KilnError(s, "extracted graph failed: " + self.lib.kiln_graph_error(opt).decode())
            for n in names:
                t = self._out_dtype[n]
                nd = ctypes.c_int(0)
                dims = (ctypes.c_int64 * MAX_DIMS)()
                self.lib.kiln_output_shape(opt, n.encode(), ctypes.byref(nd), dims)
                shape = tuple(int(dims[i]) for i in range(nd.value))
                same = shape[:-1] == want[n].shape[:-1] if t in BLOCK_FORMATS else shape == want[n].shape
                if not same:
                    raise KilnError(ERR_INVALID, "extracted graph: output %s shape %s vs %s" % (n, shape, want[n].shape))
                got = np.zeros_like(want[n])
                self.lib.kiln_read_output(opt, n.encode(), ctypes.c_void_p(got.ctypes.data), got.nbytes)
                _egraph_compare(n, t, got, want[n])
            for k, v in self._keep.items():
                _egraph_compare("state " + k, None, v, state_after[k])
        finally:
            self.lib.kiln_graph_free(opt)
            for k, v in self._keep.items():
                v[...] = state_after[k]

    def output_shape(self, name):
        nd = ctypes.c_int(0)
        dims = (ctypes.c_int64 * MAX_DIMS)()
        s = self.lib.kiln_output_shape(self.ptr, name.encode(), ctypes.byref(nd), dims)
        if s != OK:
            raise KilnError(s, self.error())
        return tuple(int(dims[i]) for i in range(nd.value))

    def read_output(self, name, dst, nbytes):
        return self.lib.kiln_read_output(self.ptr, name.encode(), ctypes.c_void_p(dst.ctypes.data), int(nbytes))

    def result(self, name, dtype=None):
        """the output as a numpy array in its storage dtype (bf16 -> uint16 bits;
        block formats -> uint8 bytes shaped (..., bytes per row))"""
        shape = self.output_shape(name)
        t = self._out_dtype.get(name, F32) if dtype is None else dtype
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if t in BLOCK_FORMATS:
            nbytes = self.lib.kiln_dtype_bytes(t, n)
            out = np.zeros(nbytes, dtype=np.uint8)
            if shape and shape[-1] > 0:
                rows = n // shape[-1]
                out_shape = tuple(shape[:-1]) + (nbytes // max(1, rows),)
            else:
                out_shape = (nbytes,)
        else:
            out = np.zeros(n, dtype=NP_STORAGE[t])
            nbytes = out.nbytes
            out_shape = shape
        s = self.read_output(name, out, nbytes)
        if s != OK:
            raise KilnError(s, self.error())
        return out.reshape(out_shape)

    def values(self, name):
        """the output's values as float64 (bf16 decoded)"""
        t = self._out_dtype.get(name, F32)
        return from_storage(self.result(name), t)

    # text forms
    def text(self):
        return _take_string(self.lib.kiln_graph_text(self.ptr))

    def dot(self):
        return _take_string(self.lib.kiln_graph_dot(self.ptr))

    graph_text = text
    graph_dot = dot


class Program:
    """a compiled graph: run() uses the graph's bindings; results are read
    through the graph (g.result) exactly as after g.run()"""

    def __init__(self, graph, ptr):
        self.graph = graph  # the graph must outlive the program
        self.lib = graph.lib
        self.ptr = ptr

    def run(self):
        s = self.lib.kiln_run(self.ptr)
        if s != OK:
            raise KilnError(s, self.graph.error())
        return s

    def kernels(self):
        return _take_string(self.lib.kiln_program_kernels(self.ptr))

    def source(self):
        s = self.lib.kiln_program_source(self.ptr)
        return s.decode() if s is not None else None

    def kernel_count(self):
        return self.lib.kiln_program_kernel_count(self.ptr)

    def free(self):
        if self.ptr:
            self.lib.kiln_program_free(self.ptr)
            self.ptr = None

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


# ---------------------------------------------------------------- test harness

def _why(e):
    return str(e) if isinstance(e, AssertionError) else "%s: %s" % (type(e).__name__, e)


def _run_forked(fn, args, kwargs):
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report through the pipe, never return into the suite
        os.close(r)
        code = 0
        msg = b""
        try:
            fn(*args, **kwargs)
        except BaseException as e:
            code = 1
            msg = _why(e).encode("utf-8", "replace")[:4000]
            if os.environ.get("KILN_TEST_VERBOSE"):
                traceback.print_exc(file=sys.stdout)
        try:
            os.write(w, msg)
            sys.stdout.flush()
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, st = os.waitpid(pid, 0)
    msg = b"".join(chunks).decode("utf-8", "replace")
    if os.WIFSIGNALED(st):
        raise AssertionError("crashed with signal %d %s" % (os.WTERMSIG(st), msg))
    code = os.WEXITSTATUS(st)
    if code == 1 and msg:
        raise AssertionError(msg)
    if code != 0:
        raise AssertionError("child exited with status %d %s" % (code, msg))


class Suite:
    """prints one "PASS name" / "FAIL name: why" line per case (what tests/run.sh counts)"""

    def __init__(self, name=None):
        self.name = name or os.path.splitext(os.path.basename(sys.argv[0]))[0]
        self.passed = 0
        self.failed = 0
        self.failures = []

    def case(self, name, fn, *args, isolate=False, **kwargs):
        """run fn(*args, **kwargs); isolate=True runs it in a forked child so a
        crash (signal, abort) fails this case only, with the signal named
        (KILN_TEST_NOFORK=1 turns that off for debugging)"""
        try:
            if isolate and hasattr(os, "fork") and not os.environ.get("KILN_TEST_NOFORK"):
                _run_forked(fn, args, kwargs)
            else:
                fn(*args, **kwargs)
        except Exception as e:  # a failing case must not stop the suite
            why = " ".join(_why(e).split())
            if os.environ.get("KILN_TEST_VERBOSE"):
                traceback.print_exc(file=sys.stdout)
            print("FAIL %s: %s" % (name, why[:600]))
            self.failed += 1
            self.failures.append(name)
        else:
            print("PASS %s" % name)
            self.passed += 1
        sys.stdout.flush()

    def finish(self):
        print("%s: %d passed, %d failed" % (self.name, self.passed, self.failed))
        sys.stdout.flush()
        sys.exit(1 if self.failed else 0)


def assert_close(got, want, rtol=1e-6, atol=0.0, what="value"):
    """elementwise |got - want| <= atol + rtol*|want|, same shape; NaN must match NaN
    and infinities must match exactly"""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        raise AssertionError("%s: shape %s, want %s" % (what, got.shape, want.shape))
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    gnan, wnan = np.isnan(g), np.isnan(w)
    if (gnan != wnan).any():
        i = tuple(int(v) for v in np.argwhere(gnan != wnan)[0])
        raise AssertionError("%s: NaN mismatch at %s: got %r want %r" % (what, i, g[i], w[i]))
    winf = np.isinf(w) | np.isinf(g)
    if (winf & (g != w)).any():
        i = tuple(int(v) for v in np.argwhere(winf & (g != w))[0])
        raise AssertionError("%s: inf mismatch at %s: got %r want %r" % (what, i, g[i], w[i]))
    with np.errstate(all="ignore"):  # inf - inf and the like are masked out just above
        ok = gnan | winf | (np.abs(g - w) <= atol + rtol * np.abs(w))
    if not ok.all():
        bad = np.argwhere(~ok)
        i = tuple(int(v) for v in bad[0])
        err = np.abs(g - w)
        err[gnan | winf] = 0
        raise AssertionError("%s: %d/%d elements off (rtol %g atol %g); first at %s: got %r want %r; max abs err %g"
                             % (what, len(bad), g.size, rtol, atol, i, g[i], w[i], float(err.max())))


def assert_equal(got, want, what="value"):
    """exact equality (ints, bit patterns)"""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        raise AssertionError("%s: shape %s, want %s" % (what, got.shape, want.shape))
    ne = got != want
    if ne.any():
        i = tuple(int(v) for v in np.argwhere(ne)[0])
        raise AssertionError("%s: %d/%d elements differ; first at %s: got %r want %r"
                             % (what, int(ne.sum()), got.size, i, got[i], want[i]))
