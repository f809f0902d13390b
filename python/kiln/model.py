"""kiln.model — language models from GGUF files through include/kiln_llm.h:
kiln.Model loads (and compiles) a model, tokenizes, generates text whole or
piece by piece, and returns logits as numpy arrays.

Threads: a Model is not thread safe (one generation at a time); every C
call releases the GIL, so other Python threads run while it works.
"""
import ctypes

import numpy as np

from . import _lib
from .errors import Error, InvalidArgumentError, from_status


class Model:
    """A GGUF language model, compiled for this machine.

        m = kiln.Model("models/gemma-3-270m-q4_k_m.gguf", threads=4)
        print(m.generate("The capital of France is", max_tokens=8, temperature=0))
        for piece in m.stream("Once upon a time", max_tokens=32):
            print(piece, end="", flush=True)
        print(m.tokens_per_second)

    Arguments: threads (0: all cores), ctx (KV cache rows; 0: min(training,
    4096)), interpreter (True: the reference interpreter, slow and exact),
    tune (seconds of schedule search on a machine with no records for the
    model, as `kiln run`'s first run; None: $KILN_TUNE or 30; 0: none),
    mmap (map the file instead of reading it), progress (a function
    f(stage, fraction) called while loading: "load", "tune", "ready").
    Errors raise kiln.Error subclasses; close() (or a with block) frees it.
    """

    def __init__(self, path, threads=0, ctx=0, interpreter=False, tune=None, mmap=False, progress=None):
        self._lib = _lib.lib()
        self._m = None
        p = self._lib.kiln_llm_default_params()
        if int(threads) < 0 or int(ctx) < 0:
            raise InvalidArgumentError("threads and ctx must be >= 0", "ERR_INVALID")
        p.threads, p.n_ctx = int(threads), int(ctx)
        p.interpreter, p.use_mmap = int(bool(interpreter)), int(bool(mmap))
        p.tune_s = -1.0 if tune is None else float(tune)
        cb = None
        if progress is not None:
            cb = _lib.PROGRESS(lambda ctx_, stage, f: progress(stage.decode(), f))
            p.progress = cb
        m = ctypes.c_void_p()
        err = ctypes.create_string_buffer(1024)
        st = self._lib.kiln_llm_load(str(path).encode(), ctypes.byref(p), ctypes.byref(m), err, 1024)
        if st:
            raise from_status(st, err.value.decode(errors="replace"))
        self._m = m
        self.path = str(path)
        self.n_vocab = self._lib.kiln_llm_n_vocab(m)
        self.n_ctx = self._lib.kiln_llm_n_ctx(m)
        self.arch = self._lib.kiln_llm_arch(m).decode()
        self.compiled = bool(self._lib.kiln_llm_is_compiled(m))

    def __repr__(self):
        state = "closed" if not self._m else "%s, vocab %d, context %d, %s" % (
            self.arch, self.n_vocab, self.n_ctx, "compiled" if self.compiled else "interpreter")
        return "kiln.Model(%r: %s)" % (getattr(self, "path", "?"), state)

    def _h(self):
        if not self._m:
            raise InvalidArgumentError("the model is closed", "ERR_INVALID")
        return self._m

    def _fail(self, st):
        raise from_status(st, self._lib.kiln_llm_error(self._m).decode(errors="replace"))

    # ---- tokens
    def tokenize(self, text, add_special=True, parse_special=False):
        """text (str or bytes) -> list of token ids (BOS first when the model adds one)"""
        b = text.encode() if isinstance(text, str) else bytes(text)
        h = self._h()
        n = self._lib.kiln_llm_tokenize(h, b, len(b), int(add_special), int(parse_special), None, 0)
        if n < 0:
            raise from_status(1, self._lib.kiln_llm_error(h).decode() or "tokenize failed")
        buf = (ctypes.c_int32 * max(1, n))()
        self._lib.kiln_llm_tokenize(h, b, len(b), int(add_special), int(parse_special), buf, n)
        return list(buf[:n])

    def detokenize(self, ids, special=False):
        """token ids -> str (invalid UTF-8 replaced)"""
        a = self._ids(ids)
        h = self._h()
        p = a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        n = self._lib.kiln_llm_detokenize(h, p, len(a), int(special), None, 0)
        if n < 0:
            self._fail(5)
        buf = ctypes.create_string_buffer(max(1, n))
        self._lib.kiln_llm_detokenize(h, p, len(a), int(special), buf, n)
        return buf.raw[:n].decode("utf-8", errors="replace")

    def _ids(self, ids):
        a = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids)
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise InvalidArgumentError("token ids: a flat sequence of ints", "ERR_INVALID")
        return np.ascontiguousarray(a, dtype=np.int32)

    # ---- forward
    def logits(self, ids):
        """the logits after the sequence ids (a fresh cache: a prefill at
        position 0) as a float32 array of n_vocab"""
        a = self._ids(ids)
        if not len(a):
            raise InvalidArgumentError("logits: no ids", "ERR_INVALID")
        h = self._h()
        out = np.empty(self.n_vocab, dtype=np.float32)
        self._lib.kiln_llm_reset(h)
        st = self._lib.kiln_llm_decode(h, a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), len(a), 0,
                                       out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        if st:
            self._fail(st)
        return out

    # ---- generation
    def _params(self, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed, chat,
                chat_template):
        g = self._lib.kiln_gen_default_params()
        if int(max_tokens) < 0:
            raise InvalidArgumentError("max_tokens %d < 0" % max_tokens, "ERR_INVALID")
        g.max_tokens = int(max_tokens)
        g.temperature, g.top_k, g.top_p, g.min_p = float(temperature), int(top_k), float(top_p), float(min_p)
        g.repeat_penalty, g.repeat_last_n = float(repeat_penalty), int(repeat_last_n)
        if seed is not None:
            if int(seed) < 0:
                raise InvalidArgumentError("seed must be >= 0", "ERR_INVALID")
            g.seed = int(seed)
        g.chat = int(bool(chat))
        self._tmpl = chat_template.encode() if chat_template else None  # kept alive during the call
        g.chat_template = self._tmpl
        return g

    def stream(self, prompt, max_tokens=64, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0,
               repeat_last_n=64, seed=None, chat=False, chat_template=None):
        """generate from prompt, yielding each piece of text as soon as its
        token is sampled (complete UTF-8 only). Stops at an end-of-generation
        token, after max_tokens, or when the context is full. temperature 0 is
        greedy; seed (default 42) makes sampling repeatable; chat=True wraps
        the prompt in the model's chat template (chat_template names another)."""
        h = self._h()
        g = self._params(max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed, chat,
                         chat_template)
        b = prompt.encode() if isinstance(prompt, str) else bytes(prompt)
        st = self._lib.kiln_llm_start(h, b, ctypes.byref(g))
        if st:
            self._fail(st)
        pc = _lib.Piece()
        while True:
            st = self._lib.kiln_llm_next(self._h(), ctypes.byref(pc))
            if st:
                self._fail(st)
            if pc.len:
                yield ctypes.string_at(pc.text, pc.len).decode("utf-8", errors="replace")
            if pc.done:
                return

    def generate(self, prompt, max_tokens=64, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
                 repeat_penalty=1.0, repeat_last_n=64, seed=None, chat=False, chat_template=None):
        """the generated text (without the prompt); arguments as stream()"""
        return "".join(self.stream(prompt, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty,
                                   repeat_last_n, seed, chat, chat_template))

    def chat_text(self, messages, template=None, add_generation_prompt=True):
        """messages ([{"role": ..., "content": ...}] or (role, content) pairs)
        rendered with the model's chat template (template names a built-in one)"""
        h = self._h()
        pairs = [(m["role"], m["content"]) if isinstance(m, dict) else tuple(m) for m in messages]
        arr = (_lib.ChatMsg * max(1, len(pairs)))(*[_lib.ChatMsg(r.encode(), c.encode()) for r, c in pairs])
        out = ctypes.c_void_p()
        st = self._lib.kiln_llm_chat_apply(h, template.encode() if template else None, arr, len(pairs),
                                           int(add_generation_prompt), ctypes.byref(out))
        if st:
            self._fail(st)
        return _lib.take_string(out.value)

    def stats(self):
        """statistics of the last generation: tokens, seconds and tokens/s of
        the prompt and of the generation, the stop reason, and the ids"""
        h = self._h()
        s = _lib.Stats()
        self._lib.kiln_llm_stats_get(h, ctypes.byref(s))
        pi, gi = self._lib.kiln_llm_prompt_ids(h), self._lib.kiln_llm_generated_ids(h)
        return {"load_s": s.load_s, "prompt_tokens": s.prompt_tokens, "prompt_s": s.prompt_s,
                "prompt_tps": s.prompt_tps, "generated_tokens": s.generated_tokens, "decode_steps": s.decode_steps,
                "gen_s": s.gen_s, "gen_tps": s.gen_tps, "stop": (s.stop or b"").decode(),
                "prompt_ids": [pi[i] for i in range(s.prompt_tokens)] if pi else [],
                "ids": [gi[i] for i in range(s.generated_tokens)] if gi else []}

    def tune(self, budget=30.0):
        """search this model's schedules for up to budget seconds, spent where
        its time goes, whether or not the machine has records (`kiln tune -m`);
        the winners go to the tuning DB and the model is recompiled with them.
        Returns the search's summary as a dict."""
        h = self._h()
        s = _lib.SearchStatus()
        st = self._lib.kiln_llm_tune(h, float(budget), ctypes.byref(s))
        if st:
            self._fail(st)
        return {f: getattr(s, f) for f, _ in _lib.SearchStatus._fields_}

    @property
    def tokens_per_second(self):
        """decode tokens per second of the last generation (0.0 before one)"""
        return self.stats()["gen_tps"]

    def close(self):
        """free the model (later calls raise kiln.Error)"""
        if self._m:
            self._lib.kiln_llm_free(self._m)
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


def tune(path, budget=30.0, threads=0, ctx=0):
    """load (and compile) the GGUF model at path and search its schedules for
    up to budget seconds (Model.tune); returns the search's summary"""
    with Model(path, threads=threads, ctx=ctx, tune=0) as m:
        return m.tune(budget)


def tune_records():
    """the tuning DB's valid records as dicts (fingerprint, key, bucket,
    schedule, best_s, base_s, tried, rejected, date, ir_version); the DB is
    $KILN_TUNEDB, else the cache's tune.db"""
    import json
    return json.loads(_lib.take_string(_lib.lib().kiln_tunedb_json()))["records"]


__all__ = ["Model", "tune", "tune_records"]
