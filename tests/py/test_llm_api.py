"""test_llm_api.py — include/kiln_llm.h, called from C and through ctypes.

What is checked, on a tiny random gemma3 model with a SentencePiece
vocabulary (tests/py/tiny_llm.py):
  - tests/install/example.c, compiled against build/libkiln.so, streams the
    same greedy ids and text as `kiln run --temp 0 --json` (compiled code),
    and kiln_llm_generate through the interpreter gives those ids too;
  - tokenize / detokenize round trip, BOS first, the size-query call;
  - kiln_llm_decode: a prefill's last logits equal a prefill of one token
    less followed by one decode step; a bad id is KILN_ERR_RANGE with a
    message, and the cache is unharmed (the same logits after);
  - an f16 KV cache (kiln_llm_params.kv_dtype): kiln_llm_kv_bytes half the
    f32 one's, compiled prefill and decode logits within f16 rounding;
  - a prompt longer than KILN_UBATCH runs in passes of that many rows
    (model_forward_rows): the same last logits as one pass, compiled and
    interpreted, and the next decode step after it agrees too;
  - kiln_llm_chat_apply renders the gemma turns; a chat generation gives
    `kiln run --chat`'s text; an unknown template name is an error;
  - the progress callback sees "load" then "ready";
  - the sampler: greedy picks the argmax, bad parameters are refused;
  - errors: a missing file, a file that is not GGUF, NULL handles, next
    without start, negative max_tokens: a status and a message, no crash.
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as kc  # noqa: E402
import tiny_llm  # noqa: E402

BUILD = os.environ.get("KILN_BUILD") or os.path.join(kc.REPO, "build")
KILN = os.environ.get("KILN_BIN") or os.path.join(BUILD, "kiln")
TMP = tempfile.mkdtemp(prefix="kiln_llm_api_")
ENV = dict(os.environ)
ENV.pop("LD_PRELOAD", None)
ENV.setdefault("XDG_CACHE_HOME", "/tmp/kiln-test-cache-%d" % os.getuid())
os.environ.setdefault("XDG_CACHE_HOME", ENV["XDG_CACHE_HOME"])
# under make test-asan the library is ASan-built: programs linked to it need the sanitizers too
SAN = ["-fsanitize=address,undefined"] if os.environ.get("KILN_ASAN") else []

suite = kc.Suite("test_llm_api")
MODEL = tiny_llm.write(os.path.join(TMP, "tiny.gguf"))
PROMPT = "the cat sat on a mat"
N = 8

_vp, _cp, _i, _i32, _st = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int32, ctypes.c_int
PROGRESS = ctypes.CFUNCTYPE(None, _vp, _cp, ctypes.c_double)


class LlmParams(ctypes.Structure):
    _fields_ = [("n_ctx", ctypes.c_int64), ("threads", _i), ("interpreter", _i), ("use_mmap", _i),
                ("kv_dtype", _i), ("exact", _i), ("tune_s", ctypes.c_double), ("progress", PROGRESS),
                ("progress_ctx", _vp)]


class GenParams(ctypes.Structure):
    _fields_ = [("max_tokens", _i), ("temperature", ctypes.c_float), ("top_k", _i32), ("top_p", ctypes.c_float),
                ("min_p", ctypes.c_float), ("repeat_penalty", ctypes.c_float), ("repeat_last_n", _i32),
                ("seed", ctypes.c_uint64), ("chat", _i), ("chat_template", _cp)]


class Piece(ctypes.Structure):
    _fields_ = [("id", _i32), ("text", _vp), ("len", ctypes.c_size_t), ("done", _i)]


L = kc.load().dll
for name, res, args in [
        ("kiln_llm_default_params", LlmParams, []),
        ("kiln_llm_load", _st, [_cp, ctypes.POINTER(LlmParams), ctypes.POINTER(_vp), _cp, ctypes.c_size_t]),
        ("kiln_llm_free", None, [_vp]), ("kiln_llm_error", _cp, [_vp]),
        ("kiln_llm_n_vocab", ctypes.c_int64, [_vp]), ("kiln_llm_bos", _i32, [_vp]),
        ("kiln_llm_kv_bytes", ctypes.c_size_t, [_vp]),
        ("kiln_llm_tokenize", _i, [_vp, _cp, ctypes.c_size_t, _i, _i, ctypes.POINTER(_i32), _i]),
        ("kiln_llm_detokenize", ctypes.c_long, [_vp, ctypes.POINTER(_i32), _i, _i, _cp, ctypes.c_size_t]),
        ("kiln_llm_decode", _st, [_vp, ctypes.POINTER(_i32), _i, _i, ctypes.POINTER(ctypes.c_float)]),
        ("kiln_gen_default_params", GenParams, []),
        ("kiln_llm_start", _st, [_vp, _cp, ctypes.POINTER(GenParams)]),
        ("kiln_llm_next", _st, [_vp, ctypes.POINTER(Piece)]),
        ("kiln_llm_generate", _st, [_vp, _cp, ctypes.POINTER(GenParams), ctypes.POINTER(_vp)]),
        ("kiln_llm_generated_ids", ctypes.POINTER(_i32), [_vp]),
        ("kiln_sampler_new", _vp, [ctypes.POINTER(GenParams), _i32, _cp, ctypes.c_size_t]),
        ("kiln_sampler_sample", _i32, [_vp, ctypes.POINTER(ctypes.c_float)]),
        ("kiln_sampler_free", None, [_vp]),
        ("kiln_llm_chat_apply", _st, [_vp, _cp, _vp, _i, _i, ctypes.POINTER(_vp)]), ("kiln_free", None, [_vp]), ("kiln_version", _cp, [])]:
    f = getattr(L, name)
    f.restype, f.argtypes = res, args


def load(path=MODEL, interpreter=True, progress=None, kv_dtype=None):
    p = L.kiln_llm_default_params()
    p.interpreter, p.threads, p.tune_s = int(interpreter), 1, 0.0
    if kv_dtype is not None:
        p.kv_dtype = kv_dtype
    if progress:
        p.progress = progress
    m, err = _vp(), ctypes.create_string_buffer(1024)
    st = L.kiln_llm_load(str(path).encode(), ctypes.byref(p), ctypes.byref(m), err, 1024)
    return st, m, err.value.decode()


def ids_array(ids):
    return (_i32 * max(1, len(ids)))(*ids)


def kiln_run_json(*args):
    r = subprocess.run([KILN, "run", "-m", MODEL, "--json", "-t", "1"] + [str(a) for a in args],
                       capture_output=True, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr.decode()[-400:]
    return json.loads(r.stdout)


def t_example_matches_cli():
    exe = os.path.join(TMP, "example")
    cc = os.environ.get("CC", "cc")
    r = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", os.path.join(kc.REPO, "include"),
                        os.path.join(kc.REPO, "tests", "install", "example.c"), kc.LIB_PATH,
                        "-Wl,-rpath," + os.path.dirname(kc.LIB_PATH), "-o", exe] + SAN, capture_output=True, env=ENV)
    assert r.returncode == 0, r.stderr.decode()[-600:]
    r = subprocess.run([exe, MODEL, PROMPT, str(N)], capture_output=True, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr.decode()[-400:]
    out = r.stdout.decode()
    want = kiln_run_json("-p", PROMPT, "-n", N, "--temp", 0)
    lines = out.split("\n")
    assert lines[0].startswith("kiln %s" % L.kiln_version().decode()), lines[0]
    assert lines[1] == want["text"], (lines[1], want["text"])
    assert lines[2] == "ids: " + " ".join(map(str, want["ids"])), (lines[2], want["ids"])
    assert len(want["ids"]) == N and want["text"].strip(), want


def t_generate_interpreter():
    st, m, err = load(interpreter=True)
    assert st == kc.OK, err
    try:
        gp = L.kiln_gen_default_params()
        gp.temperature, gp.max_tokens = 0.0, N
        out = _vp()
        st = L.kiln_llm_generate(m, PROMPT.encode(), ctypes.byref(gp), ctypes.byref(out))
        assert st == kc.OK, L.kiln_llm_error(m)
        text = ctypes.string_at(out).decode()
        L.kiln_free(out)
        ids = L.kiln_llm_generated_ids(m)
        want = kiln_run_json("-p", PROMPT, "-n", N, "--temp", 0, "--interp")
        assert [ids[i] for i in range(N)] == want["ids"] and text == want["text"], (text, want)
    finally:
        L.kiln_llm_free(m)


def t_tokens_and_decode():
    st, m, err = load()
    assert st == kc.OK, err
    try:
        b = PROMPT.encode()
        n = L.kiln_llm_tokenize(m, b, len(b), 1, 0, None, 0)
        buf = (_i32 * n)()
        assert L.kiln_llm_tokenize(m, b, len(b), 1, 0, buf, n) == n and n > 2
        ids = list(buf)
        assert ids[0] == L.kiln_llm_bos(m) == 2, ids
        out = ctypes.create_string_buffer(256)
        k = L.kiln_llm_detokenize(m, ids_array(ids[1:]), n - 1, 0, out, 256)
        assert out.raw[:k].decode() == PROMPT, out.raw[:k]
        assert L.kiln_llm_detokenize(m, ids_array([99999]), 1, 0, out, 256) == -1
        nv = L.kiln_llm_n_vocab(m)
        fp = ctypes.POINTER(ctypes.c_float)
        a = np.zeros(nv, np.float32)
        c = np.zeros(nv, np.float32)
        assert L.kiln_llm_decode(m, ids_array(ids), n, 0, a.ctypes.data_as(fp)) == kc.OK
        assert L.kiln_llm_decode(m, ids_array(ids[:-1]), n - 1, 0, c.ctypes.data_as(fp)) == kc.OK
        assert L.kiln_llm_decode(m, ids_array(ids[-1:]), 1, n - 1, c.ctypes.data_as(fp)) == kc.OK
        kc.assert_close(c, a, rtol=1e-4, atol=1e-4, what="prefill vs prefill+decode")
        st = L.kiln_llm_decode(m, ids_array([nv + 5]), 1, n - 1, c.ctypes.data_as(fp))
        assert st == kc.ERR_RANGE and b"outside" in L.kiln_llm_error(m), (st, L.kiln_llm_error(m))
        assert L.kiln_llm_decode(m, ids_array(ids[-1:]), 1, n - 1, c.ctypes.data_as(fp)) == kc.OK
        kc.assert_close(c, a, rtol=1e-4, atol=1e-4, what="after a refused step")
        gp = L.kiln_gen_default_params()
        gp.temperature = 0.0
        s = L.kiln_sampler_new(ctypes.byref(gp), nv, None, 0)
        assert s and L.kiln_sampler_sample(s, a.ctypes.data_as(fp)) == int(np.argmax(a))
        L.kiln_sampler_free(s)
        gp.top_p = 2.0
        err = ctypes.create_string_buffer(256)
        assert not L.kiln_sampler_new(ctypes.byref(gp), nv, err, 256) and err.value, err.value
    finally:
        L.kiln_llm_free(m)


def prompt_logits(ubatch, interpreter):
    """the last logits of PROMPT's prefill and of one decode step after it,
    loaded with KILN_UBATCH=ubatch (read at load)"""
    os.environ["KILN_UBATCH"] = str(ubatch)
    try:
        st, m, err = load(interpreter=interpreter)
    finally:
        os.environ.pop("KILN_UBATCH")
    assert st == kc.OK, err
    try:
        b = PROMPT.encode()
        n = L.kiln_llm_tokenize(m, b, len(b), 1, 0, None, 0)
        buf = (_i32 * n)()
        assert L.kiln_llm_tokenize(m, b, len(b), 1, 0, buf, n) == n and n > 6, n
        nv = L.kiln_llm_n_vocab(m)
        fp = ctypes.POINTER(ctypes.c_float)
        a, c = np.zeros(nv, np.float32), np.zeros(nv, np.float32)
        assert L.kiln_llm_decode(m, buf, n, 0, a.ctypes.data_as(fp)) == kc.OK, L.kiln_llm_error(m)
        assert L.kiln_llm_decode(m, ids_array([int(np.argmax(a))]), 1, n, c.ctypes.data_as(fp)) == kc.OK
        return a, c
    finally:
        L.kiln_llm_free(m)


def t_ubatch():
    for interp in (True, False):
        whole, whole_next = prompt_logits(0, interp)
        for ub in (2, 3):
            a, c = prompt_logits(ub, interp)
            what = "%s, passes of %d rows" % ("interpreter" if interp else "compiled", ub)
            kc.assert_close(a, whole, rtol=1e-4, atol=1e-4, what=what)
            kc.assert_close(c, whole_next, rtol=1e-4, atol=1e-4, what=what + ", the next step")


def kv_logits(kv_dtype):
    """the KV cache's bytes, and the last logits of PROMPT's prefill and of
    two decode steps after it, compiled with a cache of kv_dtype"""
    st, m, err = load(interpreter=False, kv_dtype=kv_dtype)
    assert st == kc.OK, err
    try:
        b = PROMPT.encode()
        n = L.kiln_llm_tokenize(m, b, len(b), 1, 0, None, 0)
        buf = (_i32 * n)()
        assert L.kiln_llm_tokenize(m, b, len(b), 1, 0, buf, n) == n, n
        nv = L.kiln_llm_n_vocab(m)
        fp = ctypes.POINTER(ctypes.c_float)
        out = [np.zeros(nv, np.float32) for _ in range(3)]
        assert L.kiln_llm_decode(m, buf, n, 0, out[0].ctypes.data_as(fp)) == kc.OK, L.kiln_llm_error(m)
        for i in (1, 2):
            tok = ids_array([(7 * i + 3) % nv])
            assert L.kiln_llm_decode(m, tok, 1, n + i - 1, out[i].ctypes.data_as(fp)) == kc.OK, L.kiln_llm_error(m)
        return L.kiln_llm_kv_bytes(m), out
    finally:
        L.kiln_llm_free(m)


def t_kv_f16():
    """an f16 KV cache (kiln run --kv-type f16): half the bytes of the f32
    one, and compiled logits within f16's rounding of the f32 cache's
    (prefill: materialised attention, whose values' contraction reads a
    converted copy of the f16 rows; decode: the streaming form)"""
    b32, l32 = kv_logits(kc.F32)
    b16, l16 = kv_logits(kc.F16)
    assert b32 > 0 and b16 * 2 == b32, (b16, b32)
    for what, a, c in zip(("prefill", "decode 1", "decode 2"), l32, l16):
        err = np.abs(a - c).max() / np.abs(a).max()
        assert 0 < err < 5e-3, "%s: the f16 cache's logits are %g from the f32 one's (relative)" % (what, err)


class ChatMsg(ctypes.Structure):
    _fields_ = [("role", _cp), ("content", _cp)]


def t_chat():
    st, m, err = load()
    assert st == kc.OK, err
    try:
        msgs = (ChatMsg * 2)(ChatMsg(b"user", b"hi"), ChatMsg(b"assistant", b"the cat"))
        out = _vp()
        st = L.kiln_llm_chat_apply(m, b"gemma", msgs, 2, 1, ctypes.byref(out))
        assert st == kc.OK, L.kiln_llm_error(m)
        text = ctypes.string_at(out).decode()
        L.kiln_free(out)
        assert "<start_of_turn>user\nhi<end_of_turn>" in text and text.endswith("<start_of_turn>model\n"), text
        st = L.kiln_llm_chat_apply(m, b"no-such-template", msgs, 2, 1, ctypes.byref(out))
        assert st != kc.OK and L.kiln_llm_error(m), st
        gp = L.kiln_gen_default_params()
        gp.temperature, gp.max_tokens, gp.chat, gp.chat_template = 0.0, N, 1, b"gemma"
        st = L.kiln_llm_generate(m, b"the cat", ctypes.byref(gp), ctypes.byref(out))
        assert st == kc.OK, L.kiln_llm_error(m)
        text = ctypes.string_at(out).decode()
        L.kiln_free(out)
        want = kiln_run_json("-p", "the cat", "-n", N, "--temp", 0, "--interp", "--chat", "--chat-template", "gemma")
        assert text == want["text"], (text, want["text"])
    finally:
        L.kiln_llm_free(m)


def t_progress():
    seen = []
    cb = PROGRESS(lambda ctx, stage, f: seen.append((stage.decode(), f)))
    st, m, err = load(interpreter=False, progress=cb)
    assert st == kc.OK, err
    L.kiln_llm_free(m)
    stages = [s for s, _ in seen]
    assert stages[0] == "load" and stages[-1] == "ready" and ("load", 1.0) in seen, seen


def t_errors():
    st, m, err = load(os.path.join(TMP, "missing.gguf"))
    assert st != kc.OK and not m and "missing.gguf" in err, (st, err)
    bad = os.path.join(TMP, "bad.gguf")
    with open(bad, "wb") as f:
        f.write(b"not a gguf file at all" * 10)
    st, m, err = load(bad)
    assert st == kc.ERR_FORMAT and not m and err, (st, err)
    assert L.kiln_llm_n_vocab(None) == 0 and L.kiln_llm_error(None)
    pc = Piece()
    assert L.kiln_llm_next(None, ctypes.byref(pc)) == kc.ERR_INVALID
    assert L.kiln_llm_decode(None, None, 1, 0, None) == kc.ERR_INVALID
    st, m, err = load()
    assert st == kc.OK, err
    try:
        assert L.kiln_llm_next(m, ctypes.byref(pc)) == kc.ERR_INVALID and b"no generation" in L.kiln_llm_error(m)
        gp = L.kiln_gen_default_params()
        gp.max_tokens = -1
        assert L.kiln_llm_start(m, b"x", ctypes.byref(gp)) == kc.ERR_INVALID
        gp.max_tokens = 2
        assert L.kiln_llm_start(m, None, ctypes.byref(gp)) == kc.ERR_INVALID
        long_prompt = ("the cat " * 100).encode()
        assert L.kiln_llm_start(m, long_prompt, ctypes.byref(gp)) == kc.ERR_RANGE
        assert b"context" in L.kiln_llm_error(m), L.kiln_llm_error(m)
    finally:
        L.kiln_llm_free(m)


suite.case("example_c_matches_kiln_run", t_example_matches_cli)
suite.case("generate_interpreter_matches_kiln_run", t_generate_interpreter)
suite.case("tokens_decode_sampler", t_tokens_and_decode)
suite.case("prompt_in_ubatch_passes", t_ubatch)
suite.case("kv_cache_f16", t_kv_f16)
suite.case("chat_template", t_chat)
suite.case("progress_callback", t_progress)
suite.case("errors", t_errors, isolate=True)
suite.finish()
