"""kiln.onnx — ONNX models from Python, through kiln's importer
(include/kiln_onnx.h): load a .onnx file, run it on numpy arrays with the
compiled program (or the reference interpreter), read its inputs' names,
dtypes and dims.

    import kiln.onnx
    m = kiln.onnx.load("model.onnx")          # kiln.UnsupportedError names what kiln cannot do
    m.inputs                                   # [("x", "f32", [("N", None), 3, 224, 224])...]
    out = m.run({"x": x})                      # {output name: numpy array}
    ref = m.run({"x": x}, interpreter=True)    # the reference interpreter

Integer and bool inputs are handed to kiln as int32 (the importer's type for
every ONNX integer type; values outside int32 raise RangeError); outputs come
back in the dtype the model declares (int64, bool, float16, ...). Symbolic
dims are bound from the arrays given. consts= folds graph inputs into the
model at load time (needed for inputs that fix shapes, like Reshape's).
"""
import ctypes

import numpy as np

from . import _lib
from .errors import Error, RangeError, from_status

_ONNX_NP = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
            9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}
_NP_ONNX = {np.dtype(v): k for k, v in _ONNX_NP.items()}
_KILN = {0: ("f32", np.float32), 1: ("f16", np.float16), 3: ("i32", np.int32), 4: ("u8", np.uint8)}


class _Const(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("onnx_dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("dims", ctypes.POINTER(ctypes.c_int64)), ("data", ctypes.c_void_p)]


class _Options(ctypes.Structure):
    _fields_ = [("consts", ctypes.POINTER(_Const)), ("n_consts", ctypes.c_int)]


_declared = None


def _dll():
    global _declared
    d = _lib.lib()
    if _declared is None:
        vp, i, cp, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t
        sigs = {
            "kiln_onnx_load": (vp, [cp, ctypes.POINTER(_Options), ctypes.POINTER(i), cp, sz]),
            "kiln_onnx_free": (None, [vp]), "kiln_onnx_graph": (vp, [vp]),
            "kiln_onnx_input_count": (i, [vp]), "kiln_onnx_input_name": (cp, [vp, i]),
            "kiln_onnx_input_dtype": (i, [vp, i]),
            "kiln_onnx_input_dims": (i, [vp, i, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(cp)]),
            "kiln_onnx_output_count": (i, [vp]), "kiln_onnx_output_name": (cp, [vp, i]),
            "kiln_onnx_output_onnx_dtype": (i, [vp, i]),
        }
        for name, (res, args) in sigs.items():
            try:
                fn = getattr(d, name)
            except AttributeError:
                raise Error("the loaded libkiln lacks %s: an older library" % name) from None
            fn.restype, fn.argtypes = res, args
        _declared = True
    return d


class OnnxModel:
    """one imported ONNX model (close() or a with-block frees it)"""

    def __init__(self, path, consts=None):
        d = _dll()
        self._keep = []
        opts = None
        if consts:
            arr = (_Const * len(consts))()
            for k, (name, a) in enumerate(consts.items()):
                a = np.ascontiguousarray(a)
                if a.dtype not in _NP_ONNX:
                    raise Error("const %s: dtype %s has no ONNX type kiln reads" % (name, a.dtype))
                dims = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
                self._keep += [a, dims]
                arr[k] = _Const(name.encode(), _NP_ONNX[a.dtype], a.ndim, dims, a.ctypes.data)
            opts = _Options(arr, len(consts))
            self._keep.append(arr)
        st = ctypes.c_int(0)
        err = ctypes.create_string_buffer(1024)
        self._m = d.kiln_onnx_load(str(path).encode(), ctypes.byref(opts) if opts else None, ctypes.byref(st), err,
                                   1024)
        if not self._m:
            raise from_status(st.value, err.value.decode(errors="replace"))
        self._g = d.kiln_onnx_graph(self._m)
        self._prog = None
        self.inputs = []
        for k in range(d.kiln_onnx_input_count(self._m)):
            dims = (ctypes.c_int64 * 8)()
            names = (ctypes.c_char_p * 8)()
            nd = d.kiln_onnx_input_dims(self._m, k, dims, names)
            kt = d.kiln_onnx_input_dtype(self._m, k)
            self.inputs.append((d.kiln_onnx_input_name(self._m, k).decode(), _KILN.get(kt, ("?", None))[0],
                                [(names[i].decode(), None) if names[i] else dims[i] for i in range(nd)]))
        self.outputs = [d.kiln_onnx_output_name(self._m, k).decode() for k in range(d.kiln_onnx_output_count(self._m))]
        self._out_dt = [d.kiln_onnx_output_onnx_dtype(self._m, k) for k in range(len(self.outputs))]

    def _check(self, st):
        if st:
            d = _lib.lib()
            raise from_status(st, d.kiln_graph_error(self._g).decode(errors="replace"))

    def run(self, feeds, interpreter=False, threads=0):
        """outputs for the inputs in feeds ({name: array}), as {name: array}"""
        if not self._m:
            raise Error("the model is closed")
        d = _dll()
        bound = []
        for name, kt, dims in self.inputs:
            if name not in feeds:
                raise Error("no value for input %s" % name)
            a = np.asarray(feeds[name])
            want = _KILN[[k for k, v in _KILN.items() if v[0] == kt][0]][1] if kt in ("f32", "f16", "i32", "u8") else None
            if want is None:
                raise Error("input %s: dtype %s is not supported from Python" % (name, kt))
            if want == np.int32 and a.size and (a.min() < -2**31 or a.max() >= 2**31):
                raise RangeError("input %s: values outside int32" % name)
            a = np.ascontiguousarray(a.astype(want))
            if a.ndim != len(dims):
                raise Error("input %s: rank %d, the model says %d" % (name, a.ndim, len(dims)))
            for k, dim in enumerate(dims):
                if isinstance(dim, tuple):
                    self._check(d.kiln_bind_dim(self._g, dim[0].encode(), a.shape[k]))
            bound.append(a)
            self._check(d.kiln_bind_input(self._g, name.encode(), a.ctypes.data, a.nbytes))
        if interpreter:
            self._check(d.kiln_eval_reference(self._g))
        else:
            if self._prog is None:
                opt = d.kiln_compile_defaults()
                opt.threads = threads
                opt.fixed_defaults = 1  # ONNX's f32 arithmetic
                st = ctypes.c_int(0)
                self._prog = d.kiln_compile(self._g, ctypes.byref(opt), ctypes.byref(st))
                if not self._prog:
                    self._check(st.value or 1)
            self._check(d.kiln_run(self._prog))
        out = {}
        for name, odt in zip(self.outputs, self._out_dt):
            nd = ctypes.c_int(0)
            dims = (ctypes.c_int64 * 8)()
            self._check(d.kiln_output_shape(self._g, name.encode(), ctypes.byref(nd), dims))
            shape = tuple(dims[i] for i in range(nd.value))
            kiln_np = np.float32 if odt == 1 else np.float16 if odt == 10 else np.uint16 if odt == 16 else np.int32
            a = np.empty(shape, kiln_np)
            self._check(d.kiln_read_output(self._g, name.encode(), a.ctypes.data, a.nbytes))
            out[name] = a.astype(_ONNX_NP[odt]) if kiln_np == np.int32 and odt in _ONNX_NP else a
        del bound
        return out

    def close(self):
        d = _lib.lib()
        if self._prog:
            d.kiln_program_free(self._prog)
            self._prog = None
        if self._m:
            d.kiln_onnx_free(self._m)
            self._m = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def load(path, consts=None):
    """an ONNX model from a file (external data beside it is read)"""
    return OnnxModel(path, consts)
