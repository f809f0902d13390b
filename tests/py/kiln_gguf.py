"""kiln_gguf.py — ctypes bindings of kiln's public GGUF API (include/kiln_gguf.h:
the JSON dump and the writer) and of the model part of include/kiln_llm.h for
the Python tests, plus a helper that writes random-weight models of the
supported architectures with kiln's writer.

The library is the one kiln_ctypes loads ($KILN_LIB or build/libkiln.so).
"""
import ctypes
import json

import numpy as np

import kiln_ctypes as kc

# gguf_type
(T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64) = range(13)
CTYPE = {T_U8: ctypes.c_uint8, T_I8: ctypes.c_int8, T_U16: ctypes.c_uint16, T_I16: ctypes.c_int16,
         T_U32: ctypes.c_uint32, T_I32: ctypes.c_int32, T_F32: ctypes.c_float, T_BOOL: ctypes.c_uint8,
         T_U64: ctypes.c_uint64, T_I64: ctypes.c_int64, T_F64: ctypes.c_double}
OPEN_READ, OPEN_ALLOW_UNSUPPORTED = 1, 2

_vp, _cp, _st = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
_PROGRESS = ctypes.CFUNCTYPE(None, _vp, _cp, ctypes.c_double)


class LlmParams(ctypes.Structure):
    """kiln_llm_params (include/kiln_llm.h)"""
    _fields_ = [("n_ctx", ctypes.c_int64), ("threads", ctypes.c_int), ("interpreter", ctypes.c_int),
                ("use_mmap", ctypes.c_int), ("kv_dtype", ctypes.c_int), ("exact", ctypes.c_int),
                ("tune_s", ctypes.c_double), ("progress", _PROGRESS), ("progress_ctx", _vp)]


_SIGS = {
    "kiln_gguf_dump_json": (_vp, [_cp, ctypes.c_uint]),
    "kiln_free": (None, [_vp]),
    "kiln_gguf_writer_new": (_vp, []),
    "kiln_gguf_writer_free": (None, [_vp]),
    "kiln_gguf_writer_error": (_cp, [_vp]),
    "kiln_gguf_writer_add": (_st, [_vp, _cp, ctypes.c_int, _vp]),
    "kiln_gguf_writer_add_str_n": (_st, [_vp, _cp, _cp, ctypes.c_uint64]),
    "kiln_gguf_writer_add_array": (_st, [_vp, _cp, ctypes.c_int, _vp, ctypes.c_uint64]),
    "kiln_gguf_writer_add_str_array": (_st, [_vp, _cp, ctypes.POINTER(_cp), ctypes.POINTER(ctypes.c_uint64),
                                             ctypes.c_uint64]),
    "kiln_gguf_writer_add_tensor": (_st, [_vp, _cp, ctypes.c_uint32, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                          _vp, ctypes.c_uint64]),
    "kiln_gguf_writer_add_tensor_f32": (_st, [_vp, _cp, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                              _vp]),
    "kiln_gguf_writer_write": (_st, [_vp, _cp]),
    "kiln_llm_default_params": (LlmParams, []),
    "kiln_llm_load": (_st, [_cp, ctypes.POINTER(LlmParams), ctypes.POINTER(_vp), _cp, ctypes.c_size_t]),
    "kiln_llm_free": (None, [_vp]),
    "kiln_llm_decode": (_st, [_vp, ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.c_int,
                              ctypes.POINTER(ctypes.c_float)]),
    "kiln_llm_reset": (None, [_vp]),
    "kiln_llm_error": (_cp, [_vp]),
    "kiln_llm_n_vocab": (ctypes.c_int64, [_vp]),
    "kiln_llm_n_ctx": (ctypes.c_int64, [_vp]),
    "kiln_llm_is_compiled": (ctypes.c_int, [_vp]),
}

_dll = None


def dll():
    global _dll
    if _dll is None:
        lib = kc.load()
        d = lib.dll
        for name, (res, args) in _SIGS.items():
            fn = getattr(d, name)
            fn.restype, fn.argtypes = res, args
        _dll = (d, d.kiln_free)
    return _dll[0]


def dump(path, flags=OPEN_ALLOW_UNSUPPORTED):
    """kiln's view of a GGUF file as a dict (or {"error", "status"})"""
    d = dll()
    p = d.kiln_gguf_dump_json(str(path).encode(), flags)
    try:
        return json.loads(ctypes.string_at(p).decode("ascii"))
    finally:
        _dll[1](p)


def jbytes(s):
    """a string from kiln's JSON dump back to its exact bytes"""
    return s.encode("latin-1")


class Writer:
    """kiln's GGUF writer; every add raises on error"""

    def __init__(self):
        self.d = dll()
        self.w = self.d.kiln_gguf_writer_new()

    def _ok(self, st, what):
        if st != kc.OK:
            raise kc.KilnError(st, "%s: %s" % (what, self.d.kiln_gguf_writer_error(self.w).decode()))

    def scalar(self, key, t, value):
        if t == T_STR:
            b = value if isinstance(value, bytes) else value.encode()
            return self._ok(self.d.kiln_gguf_writer_add_str_n(self.w, key.encode(), b, len(b)), key)
        c = CTYPE[t](value)
        self._ok(self.d.kiln_gguf_writer_add(self.w, key.encode(), t, ctypes.byref(c)), key)

    def array(self, key, elem, values):
        if elem == T_STR:
            bs = [v if isinstance(v, bytes) else v.encode() for v in values]
            arr = (_cp * max(1, len(bs)))(*bs)
            lens = (ctypes.c_uint64 * max(1, len(bs)))(*[len(b) for b in bs])
            return self._ok(self.d.kiln_gguf_writer_add_str_array(self.w, key.encode(), arr, lens, len(bs)), key)
        arr = (CTYPE[elem] * max(1, len(values)))(*values)
        self._ok(self.d.kiln_gguf_writer_add_array(self.w, key.encode(), elem, ctypes.cast(arr, _vp), len(values)), key)

    def tensor_f32(self, name, dtype, arr):
        a = np.ascontiguousarray(arr, dtype=np.float32)
        dims = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
        self._ok(self.d.kiln_gguf_writer_add_tensor_f32(self.w, name.encode(), dtype, a.ndim, dims,
                                                   ctypes.c_void_p(a.ctypes.data)), name)

    def tensor_raw(self, name, ggml_type, shape, raw):
        r = np.ascontiguousarray(raw, dtype=np.uint8)
        dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        self._ok(self.d.kiln_gguf_writer_add_tensor(self.w, name.encode(), ggml_type, len(shape), dims,
                                               ctypes.c_void_p(r.ctypes.data), r.nbytes), name)

    def write(self, path):
        self._ok(self.d.kiln_gguf_writer_write(self.w, str(path).encode()), str(path))

    def free(self):
        if self.w:
            self.d.kiln_gguf_writer_free(self.w)
            self.w = None

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


class Model:
    """a model through include/kiln_llm.h: kiln_llm_load (the reference
    interpreter unless compiled), kiln_llm_decode; never a schedule search"""

    def __init__(self, path, n_ctx=None, kv_dtype=None, gguf_flags=None, compiled=False, threads=0):
        self.d = dll()
        self.m = ctypes.c_void_p()
        err = ctypes.create_string_buffer(1024)
        p = self.d.kiln_llm_default_params()
        p.n_ctx = n_ctx or 0
        p.kv_dtype = kc.F32 if kv_dtype is None else kv_dtype
        p.use_mmap = 0 if (gguf_flags or 0) & OPEN_READ else 1
        p.interpreter = 0 if compiled else 1
        p.threads = threads
        p.tune_s = 0.0
        st = self.d.kiln_llm_load(str(path).encode(), ctypes.byref(p), ctypes.byref(self.m), err, 1024)
        if st != kc.OK:
            raise kc.KilnError(st, err.value.decode())
        self.n_vocab = self.d.kiln_llm_n_vocab(self.m)
        self.n_ctx = self.d.kiln_llm_n_ctx(self.m)
        self.compiled = bool(self.d.kiln_llm_is_compiled(self.m))

    def forward(self, tokens, pos):
        toks = np.ascontiguousarray(tokens, dtype=np.int32)
        out = np.zeros(self.n_vocab, dtype=np.float32)
        st = self.d.kiln_llm_decode(self.m, toks.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), len(toks), int(pos),
                                  out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        if st != kc.OK:
            raise kc.KilnError(st, self.d.kiln_llm_error(self.m).decode())
        return out

    def reset(self):
        self.d.kiln_llm_reset(self.m)

    def free(self):
        if self.m:
            self.d.kiln_llm_free(self.m)
            self.m = None

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


# ---------------------------------------------------------------- random models

def tiny_config(arch, **kw):
    """hyper-parameters of a tiny model of the given architecture"""
    c = dict(arch=arch, n_vocab=96, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, head_dim=16, n_ff=96,
             n_ctx=64, eps=1e-5, rope_base=10000.0, tied=False, rope_scale=None, sliding_window=None,
             swa_pattern=None, rope_freqs=False)
    if arch == "gemma3":
        c.update(n_head_kv=1, head_dim=32, eps=1e-6, rope_base=1e6, tied=True, sliding_window=4, swa_pattern=2)
    if arch == "qwen3":
        c.update(head_dim=24)  # head_dim != n_embd / n_head, as in real qwen3
    c.update(kw)
    return c


def tensor_list(c):
    """(name, shape) of every weight, kiln order (outermost first)"""
    d, hd, hq, hkv, ff = c["n_embd"], c["head_dim"], c["n_head"], c["n_head_kv"], c["n_ff"]
    ts = [("token_embd.weight", (c["n_vocab"], d)), ("output_norm.weight", (d,))]
    if c["rope_freqs"]:
        ts.append(("rope_freqs.weight", (hd // 2,)))
    if not c["tied"]:
        ts.append(("output.weight", (c["n_vocab"], d)))
    for i in range(c["n_layer"]):
        p = "blk.%d." % i
        ts += [(p + "attn_norm.weight", (d,)), (p + "attn_q.weight", (hq * hd, d)), (p + "attn_k.weight", (hkv * hd, d)),
               (p + "attn_v.weight", (hkv * hd, d)), (p + "attn_output.weight", (d, hq * hd)),
               (p + "ffn_norm.weight", (d,)), (p + "ffn_gate.weight", (ff, d)), (p + "ffn_up.weight", (ff, d)),
               (p + "ffn_down.weight", (d, ff))]
        if c["arch"] == "qwen2":
            ts += [(p + "attn_q.bias", (hq * hd,)), (p + "attn_k.bias", (hkv * hd,)), (p + "attn_v.bias", (hkv * hd,))]
        if c["arch"] in ("qwen3", "gemma3"):
            ts += [(p + "attn_q_norm.weight", (hd,)), (p + "attn_k_norm.weight", (hd,))]
        if c["arch"] == "gemma3":
            ts += [(p + "post_attention_norm.weight", (d,)), (p + "post_ffw_norm.weight", (d,))]
    return ts


def write_random_model(path, c, dtypes, seed=0):
    """write a random-weight model with kiln's writer. dtypes(name, shape) -> a
    kiln dtype for each weight (norms and biases should stay f32)."""
    rng = np.random.default_rng(seed)
    w = Writer()
    a = c["arch"]
    w.scalar("general.architecture", T_STR, a)
    w.scalar("general.name", T_STR, "tiny random " + a)
    w.scalar(a + ".context_length", T_U32, c["n_ctx"])
    w.scalar(a + ".embedding_length", T_U32, c["n_embd"])
    w.scalar(a + ".block_count", T_U32, c["n_layer"])
    w.scalar(a + ".feed_forward_length", T_U32, c["n_ff"])
    w.scalar(a + ".attention.head_count", T_U32, c["n_head"])
    w.scalar(a + ".attention.head_count_kv", T_U32, c["n_head_kv"])
    w.scalar(a + ".attention.key_length", T_U32, c["head_dim"])
    w.scalar(a + ".attention.value_length", T_U32, c["head_dim"])
    w.scalar(a + ".attention.layer_norm_rms_epsilon", T_F32, c["eps"])
    w.scalar(a + ".rope.freq_base", T_F32, c["rope_base"])
    if c["rope_scale"]:
        w.scalar(a + ".rope.scaling.type", T_STR, "linear")
        w.scalar(a + ".rope.scaling.factor", T_F32, c["rope_scale"])
    if c["sliding_window"]:
        w.scalar(a + ".attention.sliding_window", T_U32, c["sliding_window"])
    if c["swa_pattern"]:
        w.scalar(a + ".attention.sliding_window_pattern", T_U32, c["swa_pattern"])
    w.array("tokenizer.ggml.tokens", T_STR, ["<t%d>" % i for i in range(c["n_vocab"])])
    for name, shape in tensor_list(c):
        if name == "rope_freqs.weight":
            v = np.exp(rng.uniform(0.0, 3.0, shape))  # divisors 1 .. 20, as Llama 3.1's grow to 8
        elif name.endswith("norm.weight"):
            v = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            v = 0.1 * rng.standard_normal(shape)
        else:
            v = rng.standard_normal(shape) / np.sqrt(shape[-1])
            if name == "token_embd.weight":
                v = v * (0.2 if a == "gemma3" else 3.0)
        w.tensor_f32(name, dtypes(name, shape), v.astype(np.float32))
    w.write(path)
    w.free()
