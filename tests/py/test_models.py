"""test_models.py — tiny random llama, qwen2, qwen3 and gemma3 models written by
kiln's GGUF writer, loaded with model_load and run with model_forward (the
graph from src/model/arch.c through the reference interpreter), checked
against an independent numpy float64 implementation (ref_models.py, which
reads the file with the gguf package and dequantises with gguf.quants).

Tolerance: |kiln - ref| <= 1e-4 * max|ref| per logit vector. kiln computes
in f32 from the same dequantised weights (block decoders are bit-exact), so
the expected error is f32 rounding (~1e-6 relative); a wrong rope pairing,
window, base, norm or head mapping gives errors of 1e-2 .. 1.
"""
import os
import shutil
import tempfile

import numpy as np

import kiln_ctypes as kc
import kiln_gguf as kg
import ref_models

TOL = 1e-4
TMP = tempfile.mkdtemp(prefix="kiln_models_")
PROMPT = [3, 17, 42, 5, 88]
DECODE = [1, 60, 7]


def mixed_dtypes(name, shape):
    """matrices cycle through f32 / f16 / q8_0 (/ bf16); norms and biases f32"""
    if len(shape) == 1:
        return kc.F32
    if name == "token_embd.weight":
        return kc.Q8_0
    h = sum(name.encode()) % 4
    return [kc.F32, kc.F16, kc.Q8_0, kc.BF16][h]


def check_close(got, want, what):
    err = float(np.abs(got - want).max())
    scale = float(np.abs(want).max())
    if not err <= TOL * scale:
        raise AssertionError("%s: max abs err %.3g > %.1g * max|ref| %.3g" % (what, err, TOL, scale))


def model_file(arch, dtypes=mixed_dtypes, seed=7, **kw):
    path = os.path.join(TMP, "%s_%d_%s.gguf" % (arch, seed, "_".join("%s%s" % i for i in sorted(kw.items()))))
    c = kg.tiny_config(arch, **kw)
    kg.write_random_model(path, c, dtypes, seed=seed)
    return path, c


def prefill_then_decode(arch, **kw):
    """logits of a 5-token prefill and 3 single-token decode steps (through
    the KV cache) equal the numpy reference recomputed from scratch"""
    path, c = model_file(arch, **kw)
    m = kg.Model(path)
    ref = ref_models.RefModel(path)
    if m.n_vocab != c["n_vocab"]:
        raise AssertionError("vocab %d, want %d" % (m.n_vocab, c["n_vocab"]))
    toks = PROMPT + DECODE
    check_close(m.forward(PROMPT, 0), ref.last_logits(PROMPT), "prefill")
    for i, t in enumerate(DECODE):
        n = len(PROMPT) + i
        check_close(m.forward([t], n), ref.last_logits(toks[: n + 1]), "decode step %d" % i)
    # the same positions again after a reset give the same prefill result
    m.reset()
    check_close(m.forward(toks[:6], 0), ref.last_logits(toks[:6]), "prefill after reset")
    m.free()


def greedy_cached_vs_recomputed(arch, steps=32):
    """32 greedy tokens: the KV-cache path (prefill + decode) equals full
    recomputation of the whole sequence at every step, and every chosen
    token is a maximum of the reference logits (up to the tolerance)"""
    path, _ = model_file(arch, seed=11)
    cached, full = kg.Model(path), kg.Model(path)
    ref = ref_models.RefModel(path)
    seq = list(PROMPT[:4])
    lg = cached.forward(seq, 0)
    toks_cached = []
    for step in range(steps):
        t = int(np.argmax(lg))
        full.reset()
        lf = full.forward(seq, 0)
        tf = int(np.argmax(lf))
        if t != tf:
            raise AssertionError("step %d: cached path chose %d, recomputation %d" % (step, t, tf))
        check_close(lg, lf, "step %d cached vs recomputed" % step)
        r = ref.last_logits(seq)
        if r[t] < r.max() - TOL * np.abs(r).max():
            raise AssertionError("step %d: token %d has ref logit %g, max is %g" % (step, t, r[t], r.max()))
        toks_cached.append(t)
        seq.append(t)
        lg = cached.forward([t], len(seq) - 1)
    if len(set(toks_cached)) < 2:
        raise AssertionError("degenerate generation %s" % toks_cached)
    cached.free()
    full.free()


def compiled_greedy_equals_reference(arch, steps=32):
    """the compiled program (kiln_compile) and the reference interpreter give
    the same 32 greedy tokens through the KV cache, with close logits"""
    path, _ = model_file(arch, seed=13)
    comp, interp = kg.Model(path, compiled=True), kg.Model(path)
    if not comp.compiled or interp.compiled:
        raise AssertionError("compiled flags: %s %s" % (comp.compiled, interp.compiled))
    seq = list(PROMPT[:4])
    lc, li = comp.forward(seq, 0), interp.forward(seq, 0)
    for step in range(steps):
        check_close(lc, li, "step %d compiled vs interpreter" % step)
        tc, ti = int(np.argmax(lc)), int(np.argmax(li))
        if tc != ti:
            raise AssertionError("step %d: compiled chose %d, interpreter %d" % (step, tc, ti))
        seq.append(tc)
        lc, li = comp.forward([tc], len(seq) - 1), interp.forward([tc], len(seq) - 1)
    comp.free()
    interp.free()


def kquants_and_rope_scaling():
    """a 256-wide llama with q4_k / q6_k / q5_0 / q4_0 weights and linear
    rope scaling (factor 4) against the reference"""
    kinds = [kc.Q4_K, kc.Q6_K, kc.Q5_0, kc.Q4_0]

    def dt(name, shape):
        if len(shape) == 1:
            return kc.F32
        return kinds[sum(name.encode()) % 4]

    path, c = model_file("llama", dtypes=dt, n_embd=256, n_ff=256, n_head=4, n_head_kv=1, head_dim=64, n_layer=1,
                         rope_scale=4.0)
    m = kg.Model(path)
    ref = ref_models.RefModel(path)
    toks = PROMPT + DECODE
    check_close(m.forward(toks[:6], 0), ref.last_logits(toks[:6]), "prefill")
    check_close(m.forward(toks[6:7], 6), ref.last_logits(toks[:7]), "decode")
    # scaling really matters: the reference without it disagrees
    plain = ref_models.RefModel(path)
    plain.rope_scale = 1.0
    r, r0 = ref.last_logits(toks[:7]), plain.last_logits(toks[:7])
    if np.abs(r - r0).max() < 1e-2 * np.abs(r).max():
        raise AssertionError("rope scaling made no difference: the test would not see it")
    m.free()


def f16_cache_and_small_context():
    """model_load_ex: an f16 KV cache agrees with the reference within f16
    rounding, and n_ctx bounds the positions"""
    path, _ = model_file("qwen2", seed=5)
    m = kg.Model(path, n_ctx=10, kv_dtype=kc.F16, gguf_flags=kg.OPEN_READ)
    ref = ref_models.RefModel(path)
    if m.n_ctx != 10:
        raise AssertionError("n_ctx %d" % m.n_ctx)
    toks = PROMPT + DECODE
    for got, want, what in ((m.forward(PROMPT, 0), ref.last_logits(PROMPT), "prefill"),
                            (m.forward(DECODE[:1], 5), ref.last_logits(toks[:6]), "decode")):
        err = np.abs(got - want).max() / np.abs(want).max()
        if not 1e-7 < err < 5e-3:  # f16 rounds k and v: some error, but small
            raise AssertionError("%s: relative error %g" % (what, err))
    try:
        m.forward([1] * 5, 6)
    except kc.KilnError as e:
        if e.status != kc.ERR_RANGE:
            raise
    else:
        raise AssertionError("positions 6..10 accepted with n_ctx 10")
    m.free()


def file_rss(path):
    """bytes of path's mappings resident in this process (/proc/self/smaps)"""
    rss, cur = 0, False
    real = os.path.realpath(path)
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                cur = len(head) >= 6 and head[5] == real
            elif cur and line.startswith("Rss:"):
                rss += int(head[1]) * 1024
    return rss


def released_table_given_back():
    """a tied q8_0 table released beside its decode copy (compiled, the cost
    model's int8 decode schedules) is read again only at a prompt's
    gathered rows, each fault mapping back the 64 KiB around it from the
    file; after a pass of 64 rows or more those pages go again (model.c,
    release_again): after a second 96-token prompt the file's mappings hold
    under a tenth of the table, where they held most of it before"""
    def q8(name, shape):
        return kc.F32 if len(shape) == 1 else kc.Q8_0
    path, c = model_file("gemma3", dtypes=q8, seed=21, n_vocab=16384, n_embd=256, n_ctx=256)
    table = c["n_vocab"] * c["n_embd"] // 32 * 34
    fixed = os.environ.pop("KILN_FIXED_DEFAULTS", None)
    try:
        m = kg.Model(path, n_ctx=256, gguf_flags=kg.OPEN_READ, compiled=True, threads=1)
    finally:
        if fixed is not None:
            os.environ["KILN_FIXED_DEFAULTS"] = fixed
    rng = np.random.default_rng(5)
    m.forward([int(t) for t in rng.integers(0, c["n_vocab"], 96)], 0)
    if file_rss(path) == 0 and not os.path.exists("/proc/self/smaps"):
        raise AssertionError("no /proc/self/smaps")
    m.forward([int(t) for t in rng.integers(0, c["n_vocab"], 96)], 96)
    got = file_rss(path)
    m.free()
    if not got < table // 10:
        raise AssertionError("%d bytes of the model file resident after the prompt (table %d bytes)" % (got, table))


def bad_inputs():
    """errors are statuses with messages, and a failed call leaves the cache intact"""
    path, _ = model_file("llama", seed=3)
    m = kg.Model(path)
    ref = ref_models.RefModel(path)
    m.forward(PROMPT, 0)
    for toks, pos, what in (([96], 5, "token id == vocab"), ([-1], 5, "negative token"),
                            ([1] * 10, m.n_ctx - 5, "past the context")):
        try:
            m.forward(toks, pos)
        except kc.KilnError as e:
            if e.status != kc.ERR_RANGE or not e.message:
                raise AssertionError("%s: %s" % (what, e))
        else:
            raise AssertionError("%s accepted" % what)
    check_close(m.forward([1], 5), ref.last_logits(PROMPT + [1]), "decode after errors")
    m.free()


def load_errors():
    """model_load names what is wrong: a missing tensor, a misshapen one, an unknown architecture"""
    c = kg.tiny_config("llama")

    def write(path, drop=None, reshape=None, arch="llama"):
        w = kg.Writer()
        w.scalar("general.architecture", kg.T_STR, arch)
        for k, t, v in (("context_length", kg.T_U32, 64), ("embedding_length", kg.T_U32, c["n_embd"]),
                        ("block_count", kg.T_U32, c["n_layer"]), ("feed_forward_length", kg.T_U32, c["n_ff"]),
                        ("attention.head_count", kg.T_U32, c["n_head"]),
                        ("attention.head_count_kv", kg.T_U32, c["n_head_kv"])):
            w.scalar(arch + "." + k, t, v)
        for name, shape in kg.tensor_list(c):
            if name == drop:
                continue
            if name == reshape:
                shape = (shape[0] + 32,) + tuple(shape[1:])
            w.tensor_f32(name, kc.F32, np.zeros(shape, dtype=np.float32))
        w.write(path)

    cases = [(dict(drop="blk.1.ffn_up.weight"), kc.ERR_FORMAT, "blk.1.ffn_up.weight"),
             (dict(reshape="blk.0.attn_k.weight"), kc.ERR_FORMAT, "blk.0.attn_k.weight"),
             (dict(arch="mamba"), kc.ERR_UNSUPPORTED, "mamba")]
    for i, (kw, status, needle) in enumerate(cases):
        path = os.path.join(TMP, "bad%d.gguf" % i)
        write(path, **kw)
        try:
            kg.Model(path)
        except kc.KilnError as e:
            if e.status != status or needle not in e.message:
                raise AssertionError("case %d: %s" % (i, e))
        else:
            raise AssertionError("case %d loaded" % i)
    try:
        kg.Model(os.path.join(TMP, "missing.gguf"))
    except kc.KilnError as e:
        if e.status != kc.ERR_IO:
            raise AssertionError("missing file: %s" % e)
    else:
        raise AssertionError("missing file loaded")


def main():
    s = kc.Suite("test_models")
    for arch in ("llama", "qwen2", "qwen3", "gemma3"):
        s.case("%s_prefill_decode_vs_numpy" % arch, prefill_then_decode, arch, isolate=True)
    s.case("gemma3_window_pattern_6_vs_numpy", prefill_then_decode, "gemma3", n_layer=6, swa_pattern=None,
           sliding_window=3, isolate=True)
    s.case("gemma3_rope_scaling_global_layers_vs_numpy", prefill_then_decode, "gemma3", rope_scale=8.0, isolate=True)
    s.case("llama_mha_vs_numpy", prefill_then_decode, "llama", n_head_kv=4, isolate=True)
    for arch in ("llama", "qwen2", "qwen3", "gemma3"):
        s.case("%s_greedy_32_cached_equals_recomputed" % arch, greedy_cached_vs_recomputed, arch, isolate=True)
    for arch in ("llama", "qwen2", "qwen3", "gemma3"):
        s.case("%s_compiled_greedy_32_equals_interpreter" % arch, compiled_greedy_equals_reference, arch, isolate=True)
    s.case("llama_kquants_rope_scaling_vs_numpy", kquants_and_rope_scaling, isolate=True)
    s.case("llama_rope_freqs_vs_numpy", prefill_then_decode, "llama", rope_freqs=True, isolate=True)
    s.case("f16_cache_and_small_context", f16_cache_and_small_context, isolate=True)
    s.case("released_table_given_back_after_a_prompt", released_table_given_back, isolate=True)
    s.case("model_forward_bad_inputs", bad_inputs, isolate=True)
    s.case("model_load_errors", load_errors, isolate=True)
    shutil.rmtree(TMP, ignore_errors=True)
    s.finish()


if __name__ == "__main__":
    main()
