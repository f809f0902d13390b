"""test_serve_batch.py — batched decoding (kiln serve --parallel N) through
libkiln.so: kiln_llm_slots, kiln_llm_decode_slot, kiln_llm_decode_batch.

What is checked, on tiny random models of three families (gemma3 from
tiny_llm.py: sliding window, QK-norm, neox rope; llama: interleaved rope and
linear rope scaling through rope_freqs; qwen2: q/k/v biases), compiled and
under the reference interpreter:
  - a slot's prefill through its view gives exactly the logits of the
    model's own cache (the view is the same program on other memory);
  - (with the cost model's schedules: int8 decode tiles on the repacked
    q8_0 weights, 1 to 4 rows of A per tile) several decode steps of 6 rows
    of 8 slots in the order 3, 0, 2, 7, 5, 6 (slots 1 and 4 idle, the
    sequences at different lengths; more than MODEL_BATCH_MAX_ROWS, so two
    program calls), of 3 rows of 4 slots in the order 2, 0, 3 (slot 1
    idle), both with attention per slot (kiln_attention_slots, in the
    stream tile's form), and of 7 rows of 17 slots (past
    MODEL_BATCH_SLOTS_PER_SLOT: attention per row, kiln_attention_rows,
    with the tile off as kiln serve runs it there): each row's batched
    logits equal the logits of the same token decoded alone by the
    single-sequence program on a second handle holding the same sequences
    (compiled: bit for bit, which is what makes a client's greedy text
    independent of the other clients; interpreter: to 1e-5 relative, the
    interpreter's own order);
  - after a first-run search, with the DB's decode attention form rewritten
    to the materialised one, rows at positions spread past 64 (slot 0 far
    behind) still equal the single program's bit for bit (the logits
    contraction one kernel in both, the single program's decode pinned to
    the batched program's streaming form while slots exist), while a handle
    without slots decodes in the record's form;
  - a later single-slot prefill of the idle slot still matches (the batched
    steps wrote only their rows' slots);
  - bad rows (a repeated slot, a slot or position out of range, a token out
    of the vocabulary, no slots made) are KILN_ERR_RANGE / KILN_ERR_INVALID.
"""
import ctypes
import os
import sys
import tempfile

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as kc  # noqa: E402
import kiln_gguf as kg  # noqa: E402
import tiny_llm  # noqa: E402

TMP = tempfile.mkdtemp(prefix="kiln_serve_batch_")
os.environ.setdefault("XDG_CACHE_HOME", "/tmp/kiln-test-cache-%d" % os.getuid())
# the cost model's schedules, not tests/run.sh's fixed f32 defaults: the
# decode contractions then take the int8 tiles on the repacked weights,
# whose 2-4-row form the batched program runs (the check is bit for bit
# against the single program, so the arithmetic's own error does not matter)
os.environ["KILN_FIXED_DEFAULTS"] = "0"
# the stream tile (src/sched/stream_tile.c) as kiln run and kiln serve take
# it: on by default; t_compiled's per-row attention turns it off, as kiln
# serve does past MODEL_BATCH_MAX_ROWS slots
os.environ.pop("KILN_STREAM_TILE", None)
suite = kc.Suite("test_serve_batch")

_vp, _cp, _i, _i32, _st = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int32, ctypes.c_int
_fp, _ip = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int32)
PROGRESS = ctypes.CFUNCTYPE(None, _vp, _cp, ctypes.c_double)


class LlmParams(ctypes.Structure):
    _fields_ = [("n_ctx", ctypes.c_int64), ("threads", _i), ("interpreter", _i), ("use_mmap", _i),
                ("kv_dtype", _i), ("exact", _i), ("tune_s", ctypes.c_double), ("progress", PROGRESS),
                ("progress_ctx", _vp)]


L = kc.load().dll
for name, res, args in [
        ("kiln_llm_default_params", LlmParams, []),
        ("kiln_llm_load", _st, [_cp, ctypes.POINTER(LlmParams), ctypes.POINTER(_vp), _cp, ctypes.c_size_t]),
        ("kiln_llm_free", None, [_vp]), ("kiln_llm_error", _cp, [_vp]),
        ("kiln_llm_n_vocab", ctypes.c_int64, [_vp]),
        ("kiln_llm_decode", _st, [_vp, _ip, _i, _i, _fp]),
        ("kiln_llm_slots", _st, [_vp, _i]),
        ("kiln_llm_decode_slot", _st, [_vp, _i, _ip, _i, _i, _fp]),
        ("kiln_llm_decode_batch", _st, [_vp, _i, _ip, _ip, _ip, _fp])]:
    f = getattr(L, name)
    f.restype, f.argtypes = res, args

CTX = 48


def load(path, interpreter):
    p = L.kiln_llm_default_params()
    p.interpreter, p.threads, p.tune_s, p.n_ctx = int(interpreter), 1, 0.0, CTX
    m, err = _vp(), ctypes.create_string_buffer(1024)
    st = L.kiln_llm_load(str(path).encode(), ctypes.byref(p), ctypes.byref(m), err, 1024)
    assert st == kc.OK, err.value.decode()
    return m


def i32(xs):
    return np.ascontiguousarray(np.array(xs, dtype=np.int32))


def ip(a):
    return a.ctypes.data_as(_ip)


def fp(a):
    return a.ctypes.data_as(_fp)


def models():
    out = [("gemma3", tiny_llm.write(os.path.join(TMP, "gemma3.gguf"), seed=3, n_ctx=CTX))]
    q8 = lambda name, shape: kc.Q8_0 if len(shape) == 2 and shape[1] % 32 == 0 else kc.F32  # noqa: E731
    for arch, kw in [("llama", dict(rope_scale=2.0, rope_freqs=True)), ("qwen2", {})]:
        c = kg.tiny_config(arch, n_ctx=CTX, **kw)
        path = os.path.join(TMP, arch + ".gguf")
        kg.write_random_model(path, c, q8, seed=11)
        out.append((arch, path))
    return out


def check_model(arch, path, interpreter, ns=8, rows=(3, 0, 2, 7, 5, 6)):
    a, ref = load(path, interpreter), load(path, interpreter)
    try:
        nv = L.kiln_llm_n_vocab(a)
        rng = np.random.default_rng(5)
        assert L.kiln_llm_slots(a, ns) == kc.OK and L.kiln_llm_slots(ref, ns) == kc.OK
        lens = ([5, 2, 9, 3, 4, 7, 1, 6] * 3)[:ns]
        prompts = [i32(rng.integers(0, nv, n)) for n in lens]
        last = {}
        for s, pr in enumerate(prompts):
            la, lr, lo = (np.zeros(nv, np.float32) for _ in range(3))
            assert L.kiln_llm_decode_slot(a, s, ip(pr), len(pr), 0, fp(la)) == kc.OK, L.kiln_llm_error(a)
            assert L.kiln_llm_decode_slot(ref, s, ip(pr), len(pr), 0, fp(lr)) == kc.OK, L.kiln_llm_error(ref)
            assert L.kiln_llm_decode(ref, ip(pr), len(pr), 0, fp(lo)) == kc.OK  # the model's own cache
            assert np.array_equal(la, lr) and np.array_equal(la, lo), "%s: slot %d prefill differs" % (arch, s)
            last[s] = la
        rows = list(rows)  # slot 1 idle in both configurations below
        pos = {s: lens[s] for s in range(ns)}
        worst = 0.0
        for step in range(6):
            toks = i32([int(np.argmax(last[s])) for s in rows])
            ps = i32([pos[s] for s in rows])
            sl = i32(rows)
            lb = np.zeros((len(rows), nv), np.float32)
            st = L.kiln_llm_decode_batch(a, len(rows), ip(sl), ip(toks), ip(ps), fp(lb))
            assert st == kc.OK, L.kiln_llm_error(a)
            for r, s in enumerate(rows):
                one = np.zeros(nv, np.float32)
                t1 = i32([toks[r]])
                assert L.kiln_llm_decode_slot(ref, s, ip(t1), 1, pos[s], fp(one)) == kc.OK, L.kiln_llm_error(ref)
                assert np.all(np.isfinite(lb[r])), (arch, step, r)
                if interpreter:
                    err = float(np.max(np.abs(lb[r] - one)) / (np.max(np.abs(one)) + 1e-30))
                    worst = max(worst, err)
                    assert err <= 1e-5, "%s step %d slot %d: relative difference %g" % (arch, step, s, err)
                else:
                    assert np.array_equal(lb[r], one), "%s step %d slot %d: batched logits differ (max %g)" % (
                        arch, step, s, float(np.max(np.abs(lb[r] - one))))
                last[s] = lb[r]
                pos[s] += 1
        # the idle slot was not touched: continuing it matches the reference
        t1 = i32([int(np.argmax(last[1]))])
        la, lr = np.zeros(nv, np.float32), np.zeros(nv, np.float32)
        assert L.kiln_llm_decode_slot(a, 1, ip(t1), 1, lens[1], fp(la)) == kc.OK
        assert L.kiln_llm_decode_slot(ref, 1, ip(t1), 1, lens[1], fp(lr)) == kc.OK
        assert np.array_equal(la, lr), "%s: the idle slot changed" % arch
        return worst
    finally:
        L.kiln_llm_free(a)
        L.kiln_llm_free(ref)


MODELS = models()


def t_compiled():
    # 8 slots: attention per slot (attention_slots.c) in the stream tile's
    # form, slots 1 and 4 idle, the rows in two program calls
    for arch, path in MODELS:
        check_model(arch, path, interpreter=False)


def t_compiled_rows():
    # 17 slots, past MODEL_BATCH_SLOTS_PER_SLOT: attention per row
    # (attention_rows.c: each row's cache gathered), not in the stream
    # tile's form, so kiln serve turns the tile off for every program
    # (tools/serve.c), and so does this case
    os.environ["KILN_STREAM_TILE"] = "0"
    try:
        for arch, path in MODELS:
            check_model(arch, path, interpreter=False, ns=17, rows=(3, 0, 16, 2, 7, 5, 6))
    finally:
        os.environ.pop("KILN_STREAM_TILE", None)


def t_compiled_slots():
    # 4 slots: the program computes attention per slot (attention_slots.c),
    # slot 1 idle (its attention computed, never gathered), in the stream
    # tile's form as the single program's decode (with the tile on, which
    # is what kiln run and kiln serve --parallel 4 do)
    for arch, path in MODELS:
        check_model(arch, path, interpreter=False, ns=4, rows=(2, 0, 3))


def t_interpreter():
    for arch, path in MODELS[:2]:
        check_model(arch, path, interpreter=True)
    check_model(*MODELS[0], interpreter=True, ns=4, rows=(3, 2))
    check_model(*MODELS[0], interpreter=True, ns=17, rows=(3, 16, 2))


def t_errors():
    arch, path = MODELS[0]
    m = load(path, True)
    try:
        nv = L.kiln_llm_n_vocab(m)
        lb = np.zeros((2, nv), np.float32)
        z = i32([0, 0])
        assert L.kiln_llm_decode_batch(m, 2, ip(i32([0, 1])), ip(z), ip(z), fp(lb)) == kc.ERR_INVALID  # no slots
        assert L.kiln_llm_slots(m, 0) == kc.ERR_RANGE
        assert L.kiln_llm_slots(m, 2) == kc.OK
        for sl, tk, ps, n in [([0, 0], [1, 1], [0, 0], 2), ([0, 2], [1, 1], [0, 0], 2), ([0, 1], [1, nv], [0, 0], 2),
                              ([0, 1], [1, 1], [0, CTX], 2), ([0, -1], [1, 1], [0, 0], 2), ([0, 1], [1, 1], [0, 0], 3),
                              ([0, 1], [1, 1], [-1, 0], 2)]:
            sl3, tk3, ps3 = i32(sl + [0]), i32(tk + [0]), i32(ps + [0])
            lb3 = np.zeros((3, nv), np.float32)
            st = L.kiln_llm_decode_batch(m, n, ip(sl3), ip(tk3), ip(ps3), fp(lb3))
            assert st == kc.ERR_RANGE, (sl, tk, ps, n, st)
            assert L.kiln_llm_error(m), "no message"
        assert L.kiln_llm_decode_slot(m, 2, ip(z), 1, 0, fp(lb)) == kc.ERR_RANGE
    finally:
        L.kiln_llm_free(m)


def materialise_decode_forms(db):
    """rewrite the tuning DB's decode-bucket attention-form records to
    choose the materialised form (as a search on a machine where it wins
    would), each line's checksum (FNV-1a 64 of the text before " sum=",
    src/sched/tunedb.c) made again; returns how many were rewritten"""
    out, n = [], 0
    for line in open(db, encoding="utf-8"):
        if 'key="attn-form-' in line and ' bucket="decode' in line:
            body = line.rstrip("\n").rsplit(" sum=", 1)[0]
            if 'sched="streaming"' in body:
                best = body.split(" best=")[1].split(" ")[0]
                base = body.split(" base=")[1].split(" ")[0]
                body = body.replace('sched="streaming"', 'sched="materialised"')
                body = body.replace(" best=" + best, " best=@").replace(" base=" + base, " base=" + best)
                body = body.replace(" best=@", " best=" + base)
            line = "%s sum=%016x\n" % (body, kc.fnv1a64(body.encode()))
            n += 1
        out.append(line)
    with open(db + ".tmp", "w", encoding="utf-8") as f:
        f.writelines(out)
    os.replace(db + ".tmp", db)
    return n


def t_tuned_records():
    # what kiln serve meets after a first-run search: the tuning DB holds
    # schedules for the single program's kernels and its attention form per
    # bucket, and a form measured faster for the single program alone
    # (here: materialised for decode, written into the DB as a machine where
    # it wins would) must not make a batched row differ from the same token
    # decoded alone. The logits contraction is one kernel in both programs
    # (arch.c: the last row is a symbolic slice) and the single program's
    # decode is pinned to the batched program's streaming form once slots
    # exist (model_batch.c). Positions spread past 64, slot 0 far behind.
    ctx = 160
    path = tiny_llm.write(os.path.join(TMP, "gemma3_160.gguf"), seed=3, n_ctx=ctx)
    p = L.kiln_llm_default_params()
    p.threads, p.tune_s, p.n_ctx = 1, 4.0, ctx
    m, err = _vp(), ctypes.create_string_buffer(1024)
    assert L.kiln_llm_load(path.encode(), ctypes.byref(p), ctypes.byref(m), err, 1024) == kc.OK, err.value.decode()
    L.kiln_llm_free(m)
    db = os.environ["KILN_TUNEDB"]
    assert materialise_decode_forms(db) >= 1, "the first-run search stored no decode attention form"
    text = open(db, encoding="utf-8").read()
    assert 'bucket="decode,t=1" sched="materialised"' in text
    ns = 4
    hs = []
    for _ in range(3):
        p.tune_s = 0.0
        h = _vp()
        assert L.kiln_llm_load(path.encode(), ctypes.byref(p), ctypes.byref(h), err, 1024) == kc.OK, err.value.decode()
        hs.append(h)
    a, b, alone = hs  # a: batched; b: the same slots, each token alone; alone: no slots (the DB's form)
    try:
        nv = L.kiln_llm_n_vocab(a)
        assert L.kiln_llm_slots(a, ns) == kc.OK and L.kiln_llm_slots(b, ns) == kc.OK
        rng = np.random.default_rng(9)
        lens = [3, 70, 9, 40]
        for s, n in enumerate(lens):
            pr = i32(rng.integers(0, nv, n))
            la, lb1 = np.zeros(nv, np.float32), np.zeros(nv, np.float32)
            assert L.kiln_llm_decode_slot(a, s, ip(pr), n, 0, fp(la)) == kc.OK
            assert L.kiln_llm_decode_slot(b, s, ip(pr), n, 0, fp(lb1)) == kc.OK
            if s == 0:
                lo = np.zeros(nv, np.float32)
                assert L.kiln_llm_decode(alone, ip(pr), n, 0, fp(lo)) == kc.OK
        pos, differs = list(lens), 0
        for step in range(12):
            toks = i32(rng.integers(0, nv, ns))
            lbat = np.zeros((ns, nv), np.float32)
            assert L.kiln_llm_decode_batch(a, ns, ip(i32(range(ns))), ip(toks), ip(i32(pos)), fp(lbat)) == kc.OK
            for s in range(ns):
                one = np.zeros(nv, np.float32)
                assert L.kiln_llm_decode_slot(b, s, ip(i32([toks[s]])), 1, pos[s], fp(one)) == kc.OK
                assert np.array_equal(lbat[s], one), "step %d slot %d at %d: batched logits differ (max %g)" % (
                    step, s, pos[s], float(np.max(np.abs(lbat[s] - one))))
                if s == 0:
                    lo = np.zeros(nv, np.float32)
                    assert L.kiln_llm_decode(alone, ip(i32([toks[0]])), 1, pos[0], fp(lo)) == kc.OK
                    differs += not np.array_equal(lo, one)
                pos[s] += 1
        # the handle without slots decodes in the DB's (materialised) form:
        # had the record no effect, this case would not test the pin
        assert differs > 0, "the materialised decode record changed nothing"
    finally:
        for h in hs:
            L.kiln_llm_free(h)


suite.case("batched_logits_compiled", t_compiled)
suite.case("batched_logits_compiled_per_slot", t_compiled_slots)
suite.case("batched_logits_compiled_per_row", t_compiled_rows)
suite.case("batched_logits_interpreter", t_interpreter)
suite.case("batched_logits_tuned_records", t_tuned_records)
suite.case("bad_rows", t_errors)
sys.exit(suite.finish())
