"""kiln_onnx_run.py — runs an ONNX model through kiln from Python (ctypes over
libkiln.so's kiln_onnx_* and kiln_* functions): the importer, then the
reference interpreter and the compiled program on the same inputs.

Used by tests/onnx/conformance.py, tests/onnx/light_models.py and
tests/py/test_onnx*.py. The library is $KILN_LIB, else build/libkiln.so.

Conventions: integer and bool inputs are handed to kiln as int32 (the
importer's type for every ONNX integer type); outputs come back in the dtype
ONNX declares for them (int64, bool, ...), converted from kiln's i32.
"""
import ctypes
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
LIB_PATH = os.environ.get("KILN_LIB") or os.path.join(REPO, "build", "libkiln.so")

KILN_OK, KILN_ERR_UNSUPPORTED = 0, 9
STATUS = ["OK", "ERR_INVALID", "ERR_SHAPE", "ERR_DTYPE", "ERR_UNBOUND", "ERR_RANGE", "ERR_NOMEM", "ERR_IO",
          "ERR_FORMAT", "ERR_UNSUPPORTED"]
F32, F16, BF16, I32, U8 = 0, 1, 2, 3, 4
KILN_NP = {F32: np.float32, F16: np.float16, BF16: np.uint16, I32: np.int32, U8: np.uint8}
# TensorProto.DataType -> numpy
ONNX_NP = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
           9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}
NP_ONNX = {np.dtype(v): k for k, v in ONNX_NP.items()}


class OnnxConst(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("onnx_dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("dims", ctypes.POINTER(ctypes.c_int64)), ("data", ctypes.c_void_p)]


class OnnxOptions(ctypes.Structure):
    _fields_ = [("consts", ctypes.POINTER(OnnxConst)), ("n_consts", ctypes.c_int)]


class CompileOptions(ctypes.Structure):
    # every field of kiln_compile_options, in order: returned by value, a shorter
    # struct is written past its end (tests/py/test_config_table.py compares them)
    _fields_ = [("backend", ctypes.c_char_p), ("threads", ctypes.c_int), ("search_budget", ctypes.c_double),
                ("vector", ctypes.c_int), ("exact", ctypes.c_int), ("fixed_defaults", ctypes.c_int),
                ("no_egraph", ctypes.c_int), ("eg_plain", ctypes.c_int), ("no_fuse", ctypes.c_int),
                ("no_contract", ctypes.c_int), ("no_split", ctypes.c_int), ("no_pack_copy", ctypes.c_int),
                ("stream_min", ctypes.c_longlong), ("profile", ctypes.c_int), ("poison", ctypes.c_int),
                ("tunedb_off", ctypes.c_int), ("tune_verbose", ctypes.c_int), ("tune_warm", ctypes.c_int),
                ("inject_wrong", ctypes.c_int), ("gtune_inject_wrong", ctypes.c_int),
                ("contract_sched_small", ctypes.c_char_p), ("contract_sched_large", ctypes.c_char_p),
                ("gpu_contract", ctypes.c_char_p), ("gpu_group", ctypes.c_int), ("gpu_resident", ctypes.c_int),
                ("gpu_emit_only", ctypes.c_int), ("cuda_archs", ctypes.c_char_p), ("stream", ctypes.c_int),
                ("no_stream_tile", ctypes.c_int), ("stream_bf16", ctypes.c_int), ("decode_tile_rows", ctypes.c_int), ("no_epilogue", ctypes.c_int)]


_lib = None


def lib():
    global _lib
    if _lib is not None:
        return _lib
    L = ctypes.CDLL(LIB_PATH)
    vp, i, st, sz, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
    sigs = {
        "kiln_onnx_load_buffer": (vp, [ctypes.c_char_p, sz, cp, ctypes.POINTER(OnnxOptions), ctypes.POINTER(st),
                                       ctypes.c_char_p, sz]),
        "kiln_onnx_load": (vp, [cp, ctypes.POINTER(OnnxOptions), ctypes.POINTER(st), ctypes.c_char_p, sz]),
        "kiln_onnx_free": (None, [vp]),
        "kiln_onnx_graph": (vp, [vp]),
        "kiln_onnx_input_count": (i, [vp]),
        "kiln_onnx_input_name": (cp, [vp, i]),
        "kiln_onnx_input_dtype": (i, [vp, i]),
        "kiln_onnx_input_dims": (i, [vp, i, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(cp)]),
        "kiln_onnx_output_count": (i, [vp]),
        "kiln_onnx_output_name": (cp, [vp, i]),
        "kiln_onnx_output_onnx_dtype": (i, [vp, i]),
        "kiln_graph_error": (cp, [vp]),
        "kiln_bind_dim": (st, [vp, cp, ctypes.c_int64]),
        "kiln_bind_input": (st, [vp, cp, vp, sz]),
        "kiln_eval_reference": (st, [vp]),
        "kiln_output_shape": (st, [vp, cp, ctypes.POINTER(i), ctypes.POINTER(ctypes.c_int64)]),
        "kiln_read_output": (st, [vp, cp, vp, sz]),
        "kiln_compile": (vp, [vp, ctypes.POINTER(CompileOptions), ctypes.POINTER(st)]),
        "kiln_compile_defaults": (CompileOptions, []),
        "kiln_run": (st, [vp]),
        "kiln_program_free": (None, [vp]),
        "kiln_program_search": (st, [vp, ctypes.c_double, ctypes.POINTER(ctypes.c_double), ctypes.c_double]),
        "kiln_program_search_finish": (st, [vp]),
        "kiln_program_untuned": (i, [vp]),
        "kiln_program_measurements": (i, [vp]),
        "kiln_program_kernels": (vp, [vp]),
        "kiln_free": (None, [vp]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(L, name)
        f.restype = res
        f.argtypes = args
    _lib = L
    return L


class KilnOnnxError(Exception):
    def __init__(self, status, message):
        self.status = status
        self.message = message
        super().__init__("%s: %s" % (STATUS[status] if 0 <= status < len(STATUS) else status, message))

    @property
    def unsupported(self):
        return self.status == KILN_ERR_UNSUPPORTED


class Model:
    """one imported model; consts: {input name: array} folded at load time"""

    def __init__(self, data=None, path=None, consts=None, folder=None):
        L = lib()
        self._keep = []
        opts = None
        if consts:
            arr = (OnnxConst * len(consts))()
            for k, (name, a) in enumerate(consts.items()):
                a = np.ascontiguousarray(a)
                dims = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
                self._keep += [a, dims]
                arr[k] = OnnxConst(name.encode(), NP_ONNX[a.dtype], a.ndim, dims, a.ctypes.data)
            opts = OnnxOptions(arr, len(consts))
            self._keep.append(arr)
        st = ctypes.c_int(0)
        err = ctypes.create_string_buffer(1024)
        if path is not None:
            self.m = L.kiln_onnx_load(path.encode(), ctypes.byref(opts) if opts else None, ctypes.byref(st), err, 1024)
        else:
            self.m = L.kiln_onnx_load_buffer(data, len(data), folder.encode() if folder else None,
                                             ctypes.byref(opts) if opts else None, ctypes.byref(st), err, 1024)
        if not self.m:
            raise KilnOnnxError(st.value, err.value.decode(errors="replace"))
        self.g = L.kiln_onnx_graph(self.m)
        self.inputs = []
        for k in range(L.kiln_onnx_input_count(self.m)):
            dims = (ctypes.c_int64 * 8)()
            names = (ctypes.c_char_p * 8)()
            nd = L.kiln_onnx_input_dims(self.m, k, dims, names)
            self.inputs.append((L.kiln_onnx_input_name(self.m, k).decode(), L.kiln_onnx_input_dtype(self.m, k),
                                [(dims[d], names[d].decode() if names[d] else None) for d in range(nd)]))
        self.outputs = [(L.kiln_onnx_output_name(self.m, k).decode(), L.kiln_onnx_output_onnx_dtype(self.m, k))
                        for k in range(L.kiln_onnx_output_count(self.m))]
        self.prog = None

    def close(self):
        L = lib()
        if self.prog:
            L.kiln_program_free(self.prog)
            self.prog = None
        if self.m:
            L.kiln_onnx_free(self.m)
            self.m = None

    def _err(self, st):
        return KilnOnnxError(st, lib().kiln_graph_error(self.g).decode(errors="replace"))

    def bind(self, feeds):
        L = lib()
        for name, kt, dims in self.inputs:
            if name not in feeds:
                raise KilnOnnxError(1, "no value for input %s" % name)
            a = np.asarray(feeds[name])
            want = KILN_NP[kt]
            if kt == I32 and a.dtype != np.int32:
                if a.size and (a.min() < -2**31 or a.max() >= 2**31):
                    raise KilnOnnxError(KILN_ERR_UNSUPPORTED, "input %s: values outside int32" % name)
            a = np.ascontiguousarray(a.astype(want))
            if a.ndim != len(dims) and all(s > 0 for s, _ in dims) and a.size == int(np.prod([s for s, _ in dims])):
                a = a.reshape([s for s, _ in dims])  # (1,) for a scalar and the like: same data
            if a.ndim != len(dims):
                raise KilnOnnxError(2, "input %s: rank %d, the model says %d" % (name, a.ndim, len(dims)))
            for d, (size, sym) in enumerate(dims):
                if sym is not None:
                    st = L.kiln_bind_dim(self.g, sym.encode(), a.shape[d])
                    if st:
                        raise self._err(st)
            self._keep.append(a)
            st = L.kiln_bind_input(self.g, name.encode(), a.ctypes.data, a.nbytes)
            if st:
                raise self._err(st)

    def _read(self):
        L = lib()
        out = {}
        for name, odt in self.outputs:
            nd = ctypes.c_int(0)
            dims = (ctypes.c_int64 * 8)()
            st = L.kiln_output_shape(self.g, name.encode(), ctypes.byref(nd), dims)
            if st:
                raise self._err(st)
            shape = tuple(dims[d] for d in range(nd.value))
            kt = F32 if odt == 1 else F16 if odt == 10 else BF16 if odt == 16 else I32
            a = np.empty(shape, KILN_NP[kt])
            st = L.kiln_read_output(self.g, name.encode(), a.ctypes.data, a.nbytes)
            if st:
                raise self._err(st)
            out[name] = a.astype(ONNX_NP[odt]) if odt in ONNX_NP and kt == I32 else a
        return out

    def reference(self, feeds):
        self.bind(feeds)
        st = lib().kiln_eval_reference(self.g)
        if st:
            raise self._err(st)
        return self._read()

    def compiled(self, feeds, threads=0, f32=True):
        """f32: contractions without a tuning record run kiln's f32 default
        schedule (fixed_defaults), ONNX's float arithmetic; False lets the
        cost model pick bf16 or int8 arithmetic as a search would"""
        L = lib()
        if self.prog is None:
            opt = L.kiln_compile_defaults()
            opt.threads = threads
            opt.fixed_defaults = 1 if f32 else 0
            st = ctypes.c_int(0)
            self.prog = L.kiln_compile(self.g, ctypes.byref(opt), ctypes.byref(st))
            if not self.prog:
                raise self._err(st.value)
        self.bind(feeds)
        st = L.kiln_run(self.prog)
        if st:
            raise self._err(st)
        return self._read()


def _search(self, budget):
    """kiln's first-run schedule search: budget seconds, settled during the
    next runs, then one recompile (as `kiln bench` does)"""
    import time
    L = lib()
    if not self.prog or budget <= 0 or L.kiln_program_untuned(self.prog) == 0:
        return
    L.kiln_program_search(self.prog, budget, None, 0.0)
    t0 = time.time()
    # until every slot is settled or a run searched nothing: a slot whose
    # bucket the model never launches (a convolution's decode-sized M) stays open
    while time.time() - t0 < budget * 1.5 and L.kiln_program_untuned(self.prog) > 0:
        seen = (L.kiln_program_measurements(self.prog), L.kiln_program_untuned(self.prog))
        if L.kiln_run(self.prog):
            break
        if (L.kiln_program_measurements(self.prog), L.kiln_program_untuned(self.prog)) == seen:
            break
    L.kiln_program_search_finish(self.prog)


def _run_again(self):
    """one more run of the compiled program on the inputs bound last"""
    st = lib().kiln_run(self.prog)
    if st:
        raise self._err(st)


def _kernels(self):
    """the compiled program's kernel listing (kiln explain --kernels)"""
    L = lib()
    p = L.kiln_program_kernels(self.prog)
    try:
        return ctypes.string_at(p).decode(errors="replace")
    finally:
        L.kiln_free(p)


Model.search = _search
Model.kernels = _kernels
Model.run_again = _run_again


def close_enough(got, want, rtol, atol):
    """ONNX's backend-test rule: |got - want| <= atol + rtol * |want|, NaN where
    NaN; returns None or a reason"""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        return "shape %s, expected %s" % (got.shape, want.shape)
    if want.dtype.kind in "biu":
        bad = np.count_nonzero(got.astype(np.int64) != want.astype(np.int64))
        return None if bad == 0 else "%d of %d values differ" % (bad, want.size)
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    nan_ok = np.isnan(g) == np.isnan(w)
    fin = ~np.isnan(w)
    with np.errstate(invalid="ignore"):
        inf_eq = (g == w) & np.isinf(w)
        ok = inf_eq | (np.abs(g - w) <= atol + rtol * np.abs(w))
    ok = np.where(fin, ok, True) & nan_ok
    if ok.all():
        return None
    k = int(np.argmin(ok.reshape(-1)))
    return "%d of %d values differ (first at %d: %r, expected %r)" % (
        np.count_nonzero(~ok), w.size, k, g.reshape(-1)[k], w.reshape(-1)[k])
