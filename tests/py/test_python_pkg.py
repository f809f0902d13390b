"""test_python_pkg.py — the Python package `kiln` (python/kiln) from the
source tree: python/ on sys.path, the library from $KILN_LIB.

What is checked:
  - a softmax graph with a symbolic row count, compiled once, matches numpy
    on three row counts, and evaluate() (the reference interpreter) agrees;
  - the operators (+ - * / @, reversed with numbers, unary -, < > <= >=,
    indexing views, transpose) against numpy;
  - g.explain(graph=True) is `kiln explain --example softmax --graph`'s text;
  - kiln.Model: greedy generate() gives `kiln run --temp 0 --json`'s text and
    ids, tokenize/detokenize round trip, logits() is the decode of the ids;
  - stream() hands out the first piece while the generation is still
    running (one token generated, no stop reason yet) and sooner than the
    whole generation takes;
  - long calls release the GIL: a Python thread keeps running during one
    long C call;
  - every error path raises a kiln.Error subclass (each case runs in a
    forked child, so a crash fails it): wrong dtype, wrong shape, builder
    shape mismatch, bad axis, unknown input, missing input, missing and
    malformed files, closed model, bad token id, bad sampling parameters,
    a prompt longer than the context, a freed program;
  - Model.tune / kiln.tune search a compiled model within a small budget and
    write records that kiln.tune_records() returns as dicts (a private
    KILN_TUNEDB); greedy ids after the search are the interpreter's; an
    interpreter model refuses to tune;
  - help(kiln.Model) documents generate and stream;
  - README.md's Python examples run: the graph example as written, the
    model example with the tiny model's path in place of the real one.
"""
import json
import os
import pydoc
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as kc  # noqa: E402
import tiny_llm  # noqa: E402

sys.path.insert(0, os.path.join(kc.REPO, "python"))
os.environ.setdefault("KILN_LIB", kc.LIB_PATH)
os.environ.setdefault("XDG_CACHE_HOME", "/tmp/kiln-test-cache-%d" % os.getuid())
import kiln  # noqa: E402

BUILD = os.environ.get("KILN_BUILD") or os.path.join(kc.REPO, "build")
KILN = os.environ.get("KILN_BIN") or os.path.join(BUILD, "kiln")
TMP = tempfile.mkdtemp(prefix="kiln_pkg_")
ENV = dict(os.environ)
ENV.pop("LD_PRELOAD", None)
RNG = np.random.default_rng(7)
suite = kc.Suite("test_python_pkg")
MODEL = tiny_llm.write(os.path.join(TMP, "tiny.gguf"))
PROMPT = "the cat sat on a mat"


def np_softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def t_softmax_symbolic_rows():
    g = kiln.Graph()
    x = g.input("x", "f32", ("rows", 64))
    g.output(kiln.softmax(x), "y")
    f = g.compile(threads=1)
    for rows in (1, 7, 33):
        a = RNG.standard_normal((rows, 64)).astype(np.float32) * 4
        y = f(a)
        assert y.shape == (rows, 64) and y.dtype == np.float32, (y.shape, y.dtype)
        kc.assert_close(y, np_softmax(a), rtol=1e-5, atol=1e-7, what="softmax rows=%d" % rows)
        kc.assert_close(g.evaluate(x=a), np_softmax(a), rtol=1e-5, atol=1e-7, what="evaluate rows=%d" % rows)


def t_operators():
    g = kiln.Graph()
    a = g.input("a", "f32", ("n", 8))
    b = g.input("b", "f32", (8,))
    w = g.input("w", "f32", (8, 5))
    g.output((a + b) * 2 - a / (b * b + 1), "arith")
    g.output(1 - a + 3 * b, "reversed")
    g.output(-a @ w, "matmul")
    g.output((a < b) + (a > 0.5) + (a <= b) + (a >= 0.25), "compare")
    g.output(a[1:3, ::2], "slice")
    g.output(a[-1], "row")
    g.output(a.T.sum(axis=1), "transpose_sum")
    A = RNG.standard_normal((4, 8)).astype(np.float32)
    B = RNG.standard_normal(8).astype(np.float32)
    W = RNG.standard_normal((8, 5)).astype(np.float32)
    want = {"arith": (A + B) * 2 - A / (B * B + 1), "reversed": 1 - A + 3 * B, "matmul": -A @ W,
            "compare": (A < B) * 1.0 + (A > 0.5) + (A <= B) + (A >= 0.25), "slice": A[1:3, ::2], "row": A[-1],
            "transpose_sum": A.T.sum(axis=1)}
    for got in (g.compile(threads=1)(A, B, W), g.evaluate(a=A, b=B, w=W)):
        assert set(got) == set(want), sorted(got)
        for k, v in want.items():
            kc.assert_close(got[k], v.astype(np.float32), rtol=1e-5, atol=1e-5, what=k)


def t_explain_matches_cli():
    g = kiln.Graph()
    x = g.input("logits", "f32", ("seq", 64))
    g.output(kiln.softmax(x, axis=1), "probs")
    r = subprocess.run([KILN, "explain", "--example", "softmax", "--graph"], capture_output=True, text=True,
                       env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr
    assert g.explain(graph=True) == r.stdout, (g.explain(graph=True)[:300], r.stdout[:300])
    assert "e-graph" in g.explain(), g.explain()[:200]


def kiln_run_json(*args):
    r = subprocess.run([KILN, "run", "-m", MODEL, "--json", "-t", "1"] + [str(a) for a in args],
                       capture_output=True, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr.decode()[-400:]
    return json.loads(r.stdout)


def t_model_generate():
    want = kiln_run_json("-p", PROMPT, "-n", 8, "--temp", 0)
    with kiln.Model(MODEL, threads=1, tune=0) as m:
        text = m.generate(PROMPT, max_tokens=8, temperature=0)
        st = m.stats()
        assert text == want["text"] and st["ids"] == want["ids"], (text, want["text"], st["ids"], want["ids"])
        assert st["prompt_ids"] == want["prompt_ids"] and st["stop"] == "length", st
        assert m.tokens_per_second > 0, st
        ids = m.tokenize(PROMPT)
        assert ids == want["prompt_ids"] and m.detokenize(ids[1:]) == PROMPT, ids
        lg = m.logits(ids)
        assert lg.shape == (m.n_vocab,) and int(np.argmax(lg)) == want["ids"][0], (lg.shape, want["ids"][0])
        seeded = [m.generate(PROMPT, max_tokens=6, temperature=1.0, top_k=0, top_p=1, min_p=0, seed=11)
                  for _ in range(2)]
        assert seeded[0] == seeded[1], seeded


def t_stream_first_piece_early():
    with kiln.Model(MODEL, threads=1, tune=0, interpreter=True) as m:
        t0 = time.perf_counter()
        it = m.stream(PROMPT, max_tokens=24, temperature=0)
        first = next(it)
        t_first = time.perf_counter() - t0
        st = m.stats()
        assert first and st["generated_tokens"] == 1 and st["stop"] == "", (first, st)
        rest = list(it)
        t_all = time.perf_counter() - t0
        assert m.stats()["generated_tokens"] == 24 and len(rest) >= 20, m.stats()
        assert t_first < t_all, (t_first, t_all)
        print("# first piece after %.3f s, all %d after %.3f s" % (t_first, 24, t_all))


def t_gil_released():
    """one long C call (the reference interpreter on a matmul, grown until
    it takes 0.1 s) while a Python thread records timestamps"""
    stamps, stop = [], threading.Event()

    def tick():
        while not stop.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0.001)
    n, took = 64, 0.0
    th = threading.Thread(target=tick)
    th.start()
    try:
        while took < 0.1 and n <= 1024:
            n *= 2
            g = kiln.Graph()
            a = g.input("a", "f32", (n, n))
            g.output(a @ a, "y")
            A = np.ones((n, n), np.float32)
            t0 = time.perf_counter()
            g.evaluate(A)
            t1 = time.perf_counter()
            took = t1 - t0
    finally:
        stop.set()
        th.join()
    inside = [s for s in stamps if t0 <= s <= t1]
    assert took >= 0.1, "the interpreter took only %.3f s at n=%d: too short to tell" % (took, n)
    assert len(inside) >= 10, "the thread ran %d times during a %.2f s call" % (len(inside), took)


def raises(cls, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except kiln.Error as e:
        assert isinstance(e, cls), "%s raised, want %s: %s" % (type(e).__name__, cls.__name__, e)
        assert str(e), "no message"
        return e
    raise AssertionError("no error from %s" % getattr(fn, "__name__", fn))


def t_graph_errors():
    g = kiln.Graph()
    x = g.input("x", "f32", ("rows", 4))
    y = g.input("y", "f32", (5,))
    g.output(x * 2, "out")
    f = g.compile(threads=1)
    raises(kiln.DtypeError, f, np.ones((2, 4), np.int32), np.ones(5, np.float32))
    raises(kiln.ShapeError, f, np.ones((2, 4, 1), np.float32), np.ones(5, np.float32))
    raises(kiln.ShapeError, f, np.ones((2, 3), np.float32), np.ones(5, np.float32))
    raises(kiln.InvalidArgumentError, f, np.ones((2, 4), np.float32), y=np.ones(5, np.float32), z=1)
    raises(kiln.Error, f, np.ones((2, 4), np.float32))
    raises(kiln.ShapeError, lambda: x + y)
    raises(kiln.Error, lambda: x.sum(axis=5))
    raises(kiln.DtypeError, g.input, "z", "f64", (3,))
    z = x + 1  # the graph stays usable after errors
    assert z.shape == ("rows", 4), z.shape
    kc.assert_close(f(np.ones((3, 4), np.float32), np.ones(5, np.float32)), np.full((3, 4), 2.0), what="after")
    f.free()
    raises(kiln.Error, f, np.ones((2, 4), np.float32), np.ones(5, np.float32))
    g2 = kiln.Graph()
    raises(kiln.Error, g2.compile)


def t_model_errors():
    raises(kiln.Error, kiln.Model, os.path.join(TMP, "missing.gguf"), tune=0)
    bad = os.path.join(TMP, "bad.gguf")
    with open(bad, "wb") as fh:
        fh.write(b"GGUF" + b"\xff" * 60)
    raises(kiln.FormatError, kiln.Model, bad, tune=0)
    raises(kiln.InvalidArgumentError, kiln.Model, MODEL, threads=-1)
    m = kiln.Model(MODEL, threads=1, tune=0, interpreter=True, ctx=16)
    raises(kiln.RangeError, m.logits, [m.n_vocab + 3])
    raises(kiln.InvalidArgumentError, m.logits, [])
    raises(kiln.InvalidArgumentError, m.logits, [[1, 2]])
    raises(kiln.Error, m.generate, PROMPT, top_p=2.0)
    raises(kiln.InvalidArgumentError, m.generate, PROMPT, max_tokens=-1)
    raises(kiln.RangeError, m.generate, "the cat " * 20)
    raises(kiln.Error, m.detokenize, [10 ** 6])
    raises(kiln.Error, m.chat_text, [("user", "hi")], template="no-such-template")
    assert m.generate(PROMPT, max_tokens=2, temperature=0), "unusable after errors"
    m.close()
    raises(kiln.InvalidArgumentError, m.generate, PROMPT)
    raises(kiln.InvalidArgumentError, m.tokenize, "x")


def t_tune():
    db = os.path.join(TMP, "tune.db")
    old = os.environ.get("KILN_TUNEDB")
    os.environ["KILN_TUNEDB"] = db
    try:
        assert kiln.tune_records() == [], kiln.tune_records()[:1]
        summary = kiln.tune(MODEL, budget=20.0, threads=1)  # the recompile reserve comes out of it
        assert summary["measurements"] > 0 and summary["searched"] > 0, summary
        recs = kiln.tune_records()
        # kernels the plan passed over are recorded with their default schedule (tried 0)
        assert recs and all(r["schedule"] and r["fingerprint"] and r["tried"] >= 0 for r in recs), recs[:2]
        assert sum(r["tried"] for r in recs) > 0, recs[:2]
        assert any(r["key"].startswith("contract-") for r in recs), [r["key"] for r in recs]
        with kiln.Model(MODEL, threads=1, tune=0) as m:
            tuned = m.generate(PROMPT, max_tokens=8, temperature=0)
            ids = m.stats()["ids"]
        with kiln.Model(MODEL, interpreter=True) as m:
            assert m.generate(PROMPT, max_tokens=8, temperature=0) == tuned and m.stats()["ids"] == ids, tuned
            raises(kiln.InvalidArgumentError, m.tune, 1.0)
    finally:
        if old is None:
            os.environ.pop("KILN_TUNEDB", None)
        else:
            os.environ["KILN_TUNEDB"] = old


def t_help():
    doc = pydoc.render_doc(kiln.Model, renderer=pydoc.plaintext)
    for word in ("generate", "stream", "tokenize", "logits", "tokens_per_second", "temperature", "kiln.Model("):
        assert word in doc, "help(kiln.Model) does not mention %s" % word
    assert "softmax" in pydoc.render_doc(kiln, renderer=pydoc.plaintext)
    assert kiln.version() == kiln.__version__, (kiln.version(), kiln.__version__)


def readme_block(name):
    import re
    text = open(os.path.join(kc.REPO, "README.md"), encoding="utf-8").read()
    m = re.search(r"<!-- python-%s:begin -->\s*```python\n(.*?)```\s*<!-- python-%s:end -->" % (name, name), text, re.S)
    assert m, "README.md has no python-%s block" % name
    return m.group(1)


def t_readme_examples():
    exec(compile(readme_block("graph"), "README python-graph", "exec"), {})
    src = readme_block("model")
    assert '"models/gemma-3-270m-q4_k_m.gguf"' in src, src[:200]
    src = src.replace('"models/gemma-3-270m-q4_k_m.gguf"', repr(MODEL) + ", tune=0")
    exec(compile(src, "README python-model", "exec"), {})


suite.case("softmax_symbolic_rows_vs_numpy", t_softmax_symbolic_rows)
suite.case("operators_vs_numpy", t_operators)
suite.case("explain_matches_cli", t_explain_matches_cli)
suite.case("model_generate_matches_kiln_run", t_model_generate)
suite.case("stream_first_piece_early", t_stream_first_piece_early)
suite.case("gil_released_in_long_calls", t_gil_released)
suite.case("graph_errors", t_graph_errors, isolate=True)
suite.case("model_errors", t_model_errors, isolate=True)
suite.case("tune_and_records", t_tune)
suite.case("help_documents_model", t_help)
suite.case("readme_python_examples", t_readme_examples)
suite.finish()
