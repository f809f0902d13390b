"""kiln._lib — finds and loads libkiln (ctypes) and declares the C functions
the package calls, all from the public headers (include/kiln.h,
kiln_compile.h, kiln_llm.h).

Where the library comes from, first match wins: $KILN_LIB; the copy the
package carries (kiln/libkiln.so*, put there by `pip install`); the
build/libkiln.so of the source tree this file sits in (python/kiln/ ->
../../build). ctypes releases the GIL around every call, so long calls
(compiling, generating) let other Python threads run.
"""
import ctypes
import glob
import os

_HERE = os.path.dirname(os.path.abspath(__file__))

_vp, _cp, _i, _i32, _i64, _d, _f, _sz = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int32,
                                          ctypes.c_int64, ctypes.c_double, ctypes.c_float, ctypes.c_size_t)
_st = ctypes.c_int
_t = ctypes.c_int32   # kiln_tensor
_s = ctypes.c_int32   # kiln_sym
_fp = ctypes.POINTER(ctypes.c_float)
_i32p = ctypes.POINTER(ctypes.c_int32)
_i64p = ctypes.POINTER(ctypes.c_int64)

PROGRESS = ctypes.CFUNCTYPE(None, _vp, _cp, _d)


class CompileOptions(ctypes.Structure):
    # every field of kiln_compile_options, in order: the struct is returned by value, so a
    # shorter one here is overwritten past its end (tests/py/test_config_table.py compares them)
    _fields_ = [("backend", _cp), ("threads", _i), ("search_budget", _d), ("vector", _i), ("exact", _i),
                ("fixed_defaults", _i),
                ("no_egraph", _i), ("eg_plain", _i), ("no_fuse", _i), ("no_contract", _i), ("no_split", _i),
                ("no_pack_copy", _i), ("stream_min", ctypes.c_longlong), ("profile", _i), ("poison", _i),
                ("tunedb_off", _i), ("tune_verbose", _i), ("tune_warm", _i), ("inject_wrong", _i),
                ("gtune_inject_wrong", _i), ("contract_sched_small", _cp), ("contract_sched_large", _cp),
                ("gpu_contract", _cp), ("gpu_group", _i), ("gpu_resident", _i), ("gpu_emit_only", _i),
                ("cuda_archs", _cp), ("stream", _i), ("no_stream_tile", _i), ("stream_bf16", _i),
                ("decode_tile_rows", _i), ("no_epilogue", _i)]


class LlmParams(ctypes.Structure):
    _fields_ = [("n_ctx", _i64), ("threads", _i), ("interpreter", _i), ("use_mmap", _i), ("kv_dtype", _i),
                ("exact", _i), ("tune_s", _d), ("progress", PROGRESS), ("progress_ctx", _vp)]


class GenParams(ctypes.Structure):
    _fields_ = [("max_tokens", _i), ("temperature", _f), ("top_k", _i32), ("top_p", _f), ("min_p", _f),
                ("repeat_penalty", _f), ("repeat_last_n", _i32), ("seed", ctypes.c_uint64), ("chat", _i),
                ("chat_template", _cp)]


class Piece(ctypes.Structure):
    _fields_ = [("id", _i32), ("text", _vp), ("len", _sz), ("done", _i)]


class Stats(ctypes.Structure):
    _fields_ = [("load_s", _d), ("prompt_tokens", _i), ("prompt_s", _d), ("generated_tokens", _i),
                ("decode_steps", _i), ("gen_s", _d), ("prompt_tps", _d), ("gen_tps", _d), ("stop", _cp)]


class SearchStatus(ctypes.Structure):
    _fields_ = [("budget_s", _d), ("spent_s", _d), ("reserve_s", _d), ("searched", _i), ("skipped", _i),
                ("untuned", _i), ("slots", _i), ("measurements", _i), ("best_speedup", _d),
                ("baseline_s", _d), ("recompile_s", _d)]


class ChatMsg(ctypes.Structure):
    _fields_ = [("role", _cp), ("content", _cp)]


_G = _vp  # kiln_graph *
_UN = [_G, _t]
_BIN = [_G, _t, _t]
SIGNATURES = {
    "kiln_version": (_cp, []), "kiln_dtype_bytes": (_sz, [_i, _i64]), "kiln_free": (None, [_vp]), "kiln_status_name": (_cp, [_st]),
    "kiln_graph_new": (_G, []), "kiln_graph_free": (None, [_G]), "kiln_graph_status": (_st, [_G]),
    "kiln_graph_error": (_cp, [_G]), "kiln_graph_clear_error": (None, [_G]),
    "kiln_sym_parse": (_s, [_G, _cp]), "kiln_sym_str": (_cp, [_G, _s, _cp, _sz]),
    "kiln_sym_const_value": (_i, [_G, _s, _i64p]),
    "kiln_input": (_t, [_G, _cp, _i, _cp]), "kiln_state": (_t, [_G, _cp, _i, _cp]),
    "kiln_const": (_t, [_G, _d, _i]),
    "kiln_add": (_t, _BIN), "kiln_mul": (_t, _BIN), "kiln_sub": (_t, _BIN), "kiln_div": (_t, _BIN),
    "kiln_mod": (_t, _BIN), "kiln_lt": (_t, _BIN), "kiln_eq": (_t, _BIN), "kiln_pow": (_t, _BIN),
    "kiln_maximum": (_t, _BIN), "kiln_minimum": (_t, _BIN), "kiln_matmul": (_t, _BIN),
    "kiln_where": (_t, [_G, _t, _t, _t]),
    "kiln_neg": (_t, _UN), "kiln_exp": (_t, _UN), "kiln_log": (_t, _UN), "kiln_exp2": (_t, _UN),
    "kiln_log2": (_t, _UN), "kiln_sin": (_t, _UN), "kiln_sqrt": (_t, _UN), "kiln_recip": (_t, _UN),
    "kiln_tanh": (_t, _UN), "kiln_sigmoid": (_t, _UN), "kiln_relu": (_t, _UN), "kiln_gelu_tanh": (_t, _UN),
    "kiln_gelu_erf": (_t, _UN), "kiln_silu": (_t, _UN), "kiln_softplus": (_t, _UN), "kiln_abs": (_t, _UN),
    "kiln_contiguous": (_t, _UN),
    "kiln_clamp": (_t, [_G, _t, _d, _d]),
    "kiln_sum": (_t, [_G, _t, _i]), "kiln_max": (_t, [_G, _t, _i]), "kiln_mean": (_t, [_G, _t, _i]),
    "kiln_var": (_t, [_G, _t, _i]), "kiln_softmax": (_t, [_G, _t, _i]), "kiln_log_softmax": (_t, [_G, _t, _i]),
    "kiln_argmax": (_t, [_G, _t, _i]), "kiln_cumsum": (_t, [_G, _t, _i]),
    "kiln_concat": (_t, [_G, _t, _t, _i]),
    "kiln_rmsnorm": (_t, [_G, _t, _t, _d]), "kiln_layernorm": (_t, [_G, _t, _t, _t, _d]),
    "kiln_linear": (_t, [_G, _t, _t, _t]), "kiln_embedding": (_t, [_G, _t, _t]),
    "kiln_rope": (_t, [_G, _t, _s, _d, _i]),
    "kiln_attention": (_t, [_G, _t, _t, _t, _s, _d, _i64]),
    "kiln_gather": (_t, [_G, _t, _t]), "kiln_cast": (_t, [_G, _t, _i]),
    "kiln_reshape_str": (_t, [_G, _t, _cp]), "kiln_permute": (_t, [_G, _t, ctypes.POINTER(_i)]),
    "kiln_transpose": (_t, [_G, _t, _i, _i]), "kiln_expand": (_t, [_G, _t, _i, ctypes.POINTER(_s)]),
    "kiln_slice": (_t, [_G, _t, _i, _s, _s, _i64]), "kiln_pad": (_t, [_G, _t, _i, _s, _s]),
    "kiln_flip": (_t, [_G, _t, _i]), "kiln_unsqueeze": (_t, [_G, _t, _i]), "kiln_squeeze": (_t, [_G, _t, _i]),
    "kiln_ndim": (_i, [_G, _t]), "kiln_dim": (_s, [_G, _t, _i]), "kiln_tensor_dtype": (_i, [_G, _t]),
    "kiln_shape_str": (_cp, [_G, _t, _cp, _sz]),
    "kiln_output": (_st, [_G, _t, _cp]), "kiln_bind_dim": (_st, [_G, _cp, _i64]),
    "kiln_bind_input": (_st, [_G, _cp, _vp, _sz]), "kiln_eval_reference": (_st, [_G]),
    "kiln_output_shape": (_st, [_G, _cp, ctypes.POINTER(_i), _i64p]),
    "kiln_read_output": (_st, [_G, _cp, _vp, _sz]),
    "kiln_graph_text": (_vp, [_G]), "kiln_graph_egraph_report": (_vp, [_G, _i]),
    "kiln_graph_optimize": (_G, [_G]),
    "kiln_compile": (_vp, [_G, ctypes.POINTER(CompileOptions), ctypes.POINTER(_st)]),
    "kiln_compile_defaults": (CompileOptions, []),
    "kiln_run": (_st, [_vp]), "kiln_program_free": (None, [_vp]),
    "kiln_program_kernels": (_vp, [_vp]), "kiln_program_source": (_cp, [_vp]),
    "kiln_llm_default_params": (LlmParams, []),
    "kiln_llm_load": (_st, [_cp, ctypes.POINTER(LlmParams), ctypes.POINTER(_vp), _cp, _sz]),
    "kiln_llm_free": (None, [_vp]), "kiln_llm_error": (_cp, [_vp]),
    "kiln_llm_n_vocab": (_i64, [_vp]), "kiln_llm_n_ctx": (_i64, [_vp]), "kiln_llm_is_compiled": (_i, [_vp]),
    "kiln_llm_arch": (_cp, [_vp]), "kiln_llm_bos": (_i32, [_vp]), "kiln_llm_eos": (_i32, [_vp]),
    "kiln_llm_tokenize": (_i, [_vp, _cp, _sz, _i, _i, _i32p, _i]),
    "kiln_llm_detokenize": (ctypes.c_long, [_vp, _i32p, _i, _i, _cp, _sz]),
    "kiln_llm_decode": (_st, [_vp, _i32p, _i, _i, _fp]), "kiln_llm_reset": (None, [_vp]),
    "kiln_gen_default_params": (GenParams, []),
    "kiln_llm_chat_apply": (_st, [_vp, _cp, ctypes.POINTER(ChatMsg), _i, _i, ctypes.POINTER(_vp)]),
    "kiln_llm_start": (_st, [_vp, _cp, ctypes.POINTER(GenParams)]),
    "kiln_llm_next": (_st, [_vp, ctypes.POINTER(Piece)]),
    "kiln_llm_stats_get": (_st, [_vp, ctypes.POINTER(Stats)]),
    "kiln_llm_tune": (_st, [_vp, _d, ctypes.POINTER(SearchStatus)]), "kiln_tunedb_json": (_vp, []),
    "kiln_llm_prompt_ids": (_i32p, [_vp]), "kiln_llm_generated_ids": (_i32p, [_vp]),
}


def _candidates():
    env = os.environ.get("KILN_LIB")
    if env:
        return [env]
    carried = sorted(glob.glob(os.path.join(_HERE, "libkiln.so*")))
    tree = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "build", "libkiln.so")
    return carried + [tree]


_dll = None


def lib():
    """the loaded library with every function of SIGNATURES declared"""
    global _dll
    if _dll is not None:
        return _dll
    from .errors import Error
    tried = []
    for path in _candidates():
        if not os.path.exists(path):
            tried.append("%s (missing)" % path)
            continue
        try:
            d = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        for name, (res, args) in SIGNATURES.items():
            try:
                fn = getattr(d, name)
            except AttributeError:
                raise Error("%s lacks %s: an older or foreign libkiln" % (path, name)) from None
            fn.restype, fn.argtypes = res, args
        _dll = d
        return d
    raise Error("libkiln cannot be loaded: tried " + "; ".join(tried) + " (set KILN_LIB, or run make)")


def take_string(ptr):
    """a malloc'd C string as str, released with kiln_free"""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8", errors="replace")
    finally:
        lib().kiln_free(ptr)
