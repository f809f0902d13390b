"""test_compile_once.py — one compile serves every context length (issue 26,
item 5).

The KV cache's length is the graph symbol n_ctx (src/model/arch.c), bound
with the cache states, so the generated C does not depend on it and the
kernel cache (keyed by the source's hash) serves a new `-c` without the C
compiler. On a tiny random gemma3 model (tests/py/tiny_llm.py: sliding-window
and global layers), with a kernel cache and a tuning DB of this test's own:
  - `kiln run -c 16` compiles ("compiled the kernels" on stderr), then
    `kiln run -c 48` and `kiln bench` (its own context) do not, and the two
    runs generate the same greedy ids;
  - through the library (kiln_llm_load and the compile observer
    kiln_set_compile_observer): a load at n_ctx 40 after one at 16 sees the
    stage "cached" and never "cc", and no new object lands in the cache; both
    give the same logits for the same tokens;
  - a position past the bound context is KILN_ERR_RANGE with a message that
    names the context, the cache is unharmed (the next call's logits are
    those of a fresh run), and the last row fits.
"""
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as kc  # noqa: E402
import kiln_gguf as kg  # noqa: E402
import tiny_llm  # noqa: E402

BUILD = os.environ.get("KILN_BUILD") or os.path.join(kc.REPO, "build")
KILN = os.environ.get("KILN_BIN") or os.path.join(BUILD, "kiln")
TMP = tempfile.mkdtemp(prefix="kiln_compile_once_")
CACHE = os.path.join(TMP, "cache")
# a kernel cache and a tuning DB of our own: the first compile must find no code
os.environ["XDG_CACHE_HOME"] = CACHE
os.environ["KILN_TUNEDB"] = os.path.join(TMP, "tune.db")
os.environ["KILN_TUNE"] = "0"
ENV = dict(os.environ)
ENV.pop("LD_PRELOAD", None)  # see test_cli_run.py: kiln carries its own sanitizers

suite = kc.Suite("test_compile_once")
MODEL = tiny_llm.write(os.path.join(TMP, "tiny.gguf"), n_ctx=64)
COMPILED = "compiled the kernels"

_vp, _cp, _i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
OBSERVER = ctypes.CFUNCTYPE(None, _vp, _cp, _i, _i)


def kiln(*args, timeout=180):
    r = subprocess.run([KILN] + [str(a) for a in args], capture_output=True, env=ENV, timeout=timeout)
    r.out = r.stdout.decode("utf-8", errors="replace")
    r.err = r.stderr.decode("utf-8", errors="replace")
    assert r.returncode == 0, "kiln %s: exit %d: %s" % (" ".join(map(str, args)), r.returncode, r.err[-600:])
    return r


def cache_objects():
    """the compiled objects in the kernel cache"""
    found = []
    for root, _, files in os.walk(CACHE):
        found += [os.path.join(root, f) for f in files if f.endswith(".so")]
    return sorted(found)


def t_cli():
    """run -c 16 compiles; run -c 48 and bench reuse the cache"""
    args = ["-m", MODEL, "-p", "the cat sat", "--temp", 0, "-n", 4, "-t", 1, "--no-tune", "--json"]
    a = kiln("run", *args, "-c", 16)
    assert COMPILED in a.err, "the first run (fresh cache) did not compile: %r" % a.err[-600:]
    objects = cache_objects()
    assert objects, "the first run left no object in %s" % CACHE
    b = kiln("run", *args, "-c", 48)
    assert COMPILED not in b.err, "-c 48 after -c 16 compiled again: %r" % b.err[-600:]
    ja, jb = json.loads(a.out), json.loads(b.out)
    assert ja["ids"] == jb["ids"] and len(ja["ids"]) == 4, (ja["ids"], jb["ids"])
    c = kiln("bench", "-m", MODEL, "-p", 8, "-n", 4, "-r", 1, "-t", 1, "--no-tune")
    assert COMPILED not in c.err, "bench after run compiled again: %r" % c.err[-600:]
    assert cache_objects() == objects, "new objects: %s" % sorted(set(cache_objects()) - set(objects))


class Loaded:
    """a kiln_llm loaded at n_ctx with the compile stages it showed"""

    def __init__(self, n_ctx):
        d = kg.dll()
        self.stages = []
        self._cb = OBSERVER(lambda ctx, stage, done, total: self.stages.append(stage.decode()))
        kc.load().dll.kiln_set_compile_observer.argtypes = [OBSERVER, _vp]
        kc.load().dll.kiln_set_compile_observer(self._cb, None)
        p = d.kiln_llm_default_params()
        p.n_ctx, p.threads, p.tune_s = n_ctx, 1, 0.0
        h, err = _vp(), ctypes.create_string_buffer(512)
        st = d.kiln_llm_load(MODEL.encode(), ctypes.byref(p), ctypes.byref(h), err, len(err))
        kc.load().dll.kiln_set_compile_observer(OBSERVER(), None)
        assert st == kc.OK, "load at n_ctx %d: %s" % (n_ctx, err.value.decode())
        self.h, self.d = h, d
        self.vocab = d.kiln_llm_n_vocab(h)
        assert d.kiln_llm_n_ctx(h) == n_ctx, d.kiln_llm_n_ctx(h)

    def decode(self, toks, pos):
        arr = (ctypes.c_int32 * len(toks))(*toks)
        out = (ctypes.c_float * self.vocab)()
        st = self.d.kiln_llm_decode(self.h, arr, len(toks), pos, out)
        return st, np.frombuffer(out, dtype=np.float32).copy()

    def error(self):
        return self.d.kiln_llm_error(self.h).decode()

    def free(self):
        self.d.kiln_llm_free(self.h)


TOKS = [270, 271, 275, 280, 290, 300]


def t_library():
    """a load at another n_ctx is served from the cache; same logits"""
    a = Loaded(16)
    assert "cc" in a.stages or "cached" in a.stages, a.stages
    before = cache_objects()
    b = Loaded(40)
    try:
        assert "cached" in b.stages and "cc" not in b.stages, "the second load's stages: %s" % b.stages
        assert cache_objects() == before, "the second load added objects"
        sa, la = a.decode(TOKS, 0)
        sb, lb = b.decode(TOKS, 0)
        assert sa == kc.OK and sb == kc.OK, (a.error(), b.error())
        kc.assert_close(lb, la, rtol=1e-5, atol=1e-5, what="logits at n_ctx 40 vs 16")
        sa, la = a.decode([301], len(TOKS))
        sb, lb = b.decode([301], len(TOKS))
        assert sa == kc.OK and sb == kc.OK, (a.error(), b.error())
        kc.assert_close(lb, la, rtol=1e-5, atol=1e-5, what="a decode step at n_ctx 40 vs 16")
    finally:
        a.free()
        b.free()


def t_bounds():
    """past the bound context: a clear error, the cache unharmed"""
    m = Loaded(16)
    try:
        st, first = m.decode(TOKS, 0)
        assert st == kc.OK, m.error()
        st, _ = m.decode([301, 302, 303], 14)  # rows 14, 15, 16 of 16
        assert st == kc.ERR_RANGE, "3 tokens at 14 of 16: status %d (%s)" % (st, m.error())
        assert "context" in m.error() and "16" in m.error(), m.error()
        st, _ = m.decode(list(range(270, 287)), 0)  # 17 tokens
        assert st == kc.ERR_RANGE, "17 tokens into 16: status %d" % st
        # the refused calls wrote nothing: the same prompt again gives the same logits
        st, again = m.decode(TOKS, 0)
        assert st == kc.OK, m.error()
        kc.assert_close(again, first, rtol=1e-6, atol=1e-6, what="logits after the refused calls")
        st, _ = m.decode([301, 302], 14)  # rows 14 and 15: the last two fit
        assert st == kc.OK, m.error()
    finally:
        m.free()


suite.case("compile_once_cli_new_ctx_and_bench_from_cache", t_cli)
suite.case("compile_once_library_second_ctx_cached_same_logits", t_library)
suite.case("compile_once_past_the_context_is_an_error", t_bounds)
shutil.rmtree(TMP, ignore_errors=True)
suite.finish()
