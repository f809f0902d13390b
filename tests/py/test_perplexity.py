"""test_perplexity.py — `kiln perplexity` end to end on tiny models kiln's
GGUF writer makes, against an independent float64 evaluation
(ref_models.RefModel, numpy) of the same weights.

The models carry a SentencePiece-style vocabulary of byte tokens only (plus
<pad> <eos> <bos> <unk> and "▁", no space prefix), so the text's token ids
are known here without a tokenizer: BOS, then one id per character (a space
is "▁", any other character its byte token).

What is checked:
  - perplexity: the final PPL, its uncertainty and the running PPL of every
    chunk equal llama-perplexity's method evaluated here in float64 (chunks
    of n_ctx tokens, the first replaced by BOS, rows n_ctx/2 .. n_ctx-2
    scored against the next token), with --exact (compiled), through the
    reference interpreter, with -b smaller than a chunk (several passes per
    chunk), with KILN_UBATCH=3 (model_forward_rows splits each pass into
    passes of 3 rows, the scored rows' logits gathered across them), for a
    llama and a gemma3 (tied output, sliding window) model;
  - chunking on a hand-worked example: 21 tokens, -c 8 -> 2 chunks, rows
    4, 5, 6 of each scored (6 tokens), the second chunk's token 8 replaced by
    BOS (the value differs from the one without the substitution);
  - the base file: its header, its tokens (the text's, not the BOS
    substitutions) and every row's quantised log-probabilities equal the
    float64 log-softmax within the quantisation step; --kl-divergence against
    it with the same model gives KL ~ 0 and 100% same top; against another
    model's base, KL mean, median, percentiles, maximum, same top p, dp RMS
    and the PPL ratio equal llama-perplexity's formulas evaluated here;
  - --exact: the contraction summary says f32 only, on perplexity, run and
    bench, and kiln tune refuses it;
  - the first-run search of a perplexity model leaves the tuning DB so that
    kiln run does not search again;
  - errors, one line and exit 1 (never a signal): a missing or empty text, a
    text shorter than two chunks, -c above the model's context, and every
    field of a damaged base file (magic, n_ctx, n_vocab, n_chunk, a token id,
    the length both ways, a row's scale), a base of another vocabulary, of
    other tokens, -c other than the base's; usage errors exit 2.
"""
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as kc  # noqa: E402
import kiln_gguf as kg  # noqa: E402
from ref_models import RefModel  # noqa: E402

BUILD = os.environ.get("KILN_BUILD") or os.path.join(kc.REPO, "build")
KILN = os.environ.get("KILN_BIN") or os.path.join(BUILD, "kiln")
TMP = tempfile.mkdtemp(prefix="kiln_ppl_")
ENV = dict(os.environ)
ENV.pop("LD_PRELOAD", None)
ENV.setdefault("XDG_CACHE_HOME", "/tmp/kiln-test-cache-%d" % os.getuid())
ENV.setdefault("KILN_TUNE", "0")
ENV.pop("KILN_EXACT", None)

suite = kc.Suite("test_perplexity")

# ------------------------------------------------------------ model and text

N_SPECIAL = 4  # <pad> <eos> <bos> <unk>
BOS = 2
SPACE = N_SPECIAL + 256


def vocab(extra=0):
    toks = ["<pad>", "<eos>", "<bos>", "<unk>"] + ["<0x%02X>" % b for b in range(256)] + ["▁"]
    types = [3, 3, 3, 2] + [6] * 256 + [1]
    toks += ["<x%d>" % i for i in range(extra)]
    types += [5] * extra
    return toks, types


def tok_ids(text):
    """the ids the byte vocabulary gives text (BOS first)"""
    return [BOS] + [SPACE if ch == " " else N_SPECIAL + b for ch in text for b in ch.encode()]


def write_model(path, arch, seed, extra=0):
    toks, types = vocab(extra)
    c = kg.tiny_config(arch, n_vocab=len(toks))
    rng = np.random.default_rng(seed)
    w = kg.Writer()
    w.scalar("general.architecture", kg.T_STR, arch)
    w.scalar("general.name", kg.T_STR, "tiny perplexity " + arch)
    for key, val in [("context_length", c["n_ctx"]), ("embedding_length", c["n_embd"]),
                     ("block_count", c["n_layer"]), ("feed_forward_length", c["n_ff"]),
                     ("attention.head_count", c["n_head"]), ("attention.head_count_kv", c["n_head_kv"]),
                     ("attention.key_length", c["head_dim"]), ("attention.value_length", c["head_dim"])]:
        w.scalar(arch + "." + key, kg.T_U32, val)
    w.scalar(arch + ".attention.layer_norm_rms_epsilon", kg.T_F32, c["eps"])
    w.scalar(arch + ".rope.freq_base", kg.T_F32, c["rope_base"])
    if c["sliding_window"]:
        w.scalar(arch + ".attention.sliding_window", kg.T_U32, c["sliding_window"])
        w.scalar(arch + ".attention.sliding_window_pattern", kg.T_U32, c["swa_pattern"])
    w.scalar("tokenizer.ggml.model", kg.T_STR, "llama")
    w.array("tokenizer.ggml.tokens", kg.T_STR, toks)
    w.array("tokenizer.ggml.token_type", kg.T_I32, types)
    w.array("tokenizer.ggml.scores", kg.T_F32, [0.0] * len(toks))
    w.scalar("tokenizer.ggml.bos_token_id", kg.T_U32, BOS)
    w.scalar("tokenizer.ggml.eos_token_id", kg.T_U32, 1)
    w.scalar("tokenizer.ggml.unknown_token_id", kg.T_U32, 3)
    w.scalar("tokenizer.ggml.padding_token_id", kg.T_U32, 0)
    w.scalar("tokenizer.ggml.add_bos_token", kg.T_BOOL, 1)
    w.scalar("tokenizer.ggml.add_space_prefix", kg.T_BOOL, 0)
    out_name = "token_embd.weight" if c["tied"] else "output.weight"
    for name, shape in kg.tensor_list(c):
        if name.endswith("norm.weight"):
            x = 1.0 + 0.2 * rng.standard_normal(shape)
        else:
            x = rng.standard_normal(shape) / np.sqrt(shape[-1])
            if name == "token_embd.weight":
                x = x * (0.5 if arch == "gemma3" else 3.0)
        w.tensor_f32(name, kc.F32 if len(shape) == 1 or name == out_name else kc.Q8_0, x.astype(np.float32))
    w.write(path)
    w.free()
    return path


def text_of(n, seed):
    """n characters of lowercase words"""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        out += list("abcdefghijklmnopqrstuvwxyz"[i] for i in rng.integers(0, 26, int(rng.integers(1, 7))))
        out.append(" ")
    return "".join(out[:n])


def write_text(name, text):
    p = os.path.join(TMP, name)
    with open(p, "w") as f:
        f.write(text)
    return p


LLAMA = write_model(os.path.join(TMP, "llama.gguf"), "llama", seed=11)
LLAMA_B = write_model(os.path.join(TMP, "llama_b.gguf"), "llama", seed=12)
LLAMA_V = write_model(os.path.join(TMP, "llama_v.gguf"), "llama", seed=11, extra=2)
GEMMA = write_model(os.path.join(TMP, "gemma3.gguf"), "gemma3", seed=13)
TEXT = text_of(100, 1)             # 101 tokens
TEXT_F = write_text("text.txt", TEXT)
REF = {}


def ref(path):
    if path not in REF:
        REF[path] = RefModel(path)
    return REF[path]


def kiln(*args, timeout=300):
    r = subprocess.run([KILN] + [str(a) for a in args], capture_output=True, env=ENV, timeout=timeout)
    r.out = r.stdout.decode("utf-8", errors="replace")
    r.err = r.stderr.decode("utf-8", errors="replace")
    return r


def ppl_json(*args):
    r = kiln("perplexity", "--json", *args)
    assert r.returncode == 0, "kiln perplexity %s: exit %d: %s" % (" ".join(map(str, args)), r.returncode, r.err[-600:])
    return json.loads(r.out), r


# ------------------------------------------------------- the float64 method

def log_softmax(L):
    m = L.max(axis=-1, keepdims=True)
    return L - m - np.log(np.exp(L - m).sum(axis=-1, keepdims=True))


def chunk_logprobs(path, tokens, n_ctx, n_chunk, bos=True):
    """per chunk: (log-softmax of the scored rows, the tokens they predict)"""
    out = []
    first = n_ctx // 2
    for c in range(n_chunk):
        ch = list(tokens[c * n_ctx:(c + 1) * n_ctx])
        if bos:
            ch[0] = BOS
        lp = log_softmax(ref(path).logits(ch))[first:n_ctx - 1]
        nxt = np.asarray(tokens[c * n_ctx + first + 1:(c + 1) * n_ctx])
        out.append((lp, nxt))
    return out


def expected_ppl(path, tokens, n_ctx, n_chunk, bos=True):
    nll, running = [], []
    for lp, nxt in chunk_logprobs(path, tokens, n_ctx, n_chunk, bos):
        nll += list(-lp[np.arange(len(nxt)), nxt])
        running.append(math.exp(np.mean(nll)))
    nll = np.asarray(nll)
    mean = nll.mean()
    ppl = math.exp(mean)
    unc = math.sqrt((np.mean(nll * nll) - mean * mean) / (len(nll) - 1)) * ppl
    return ppl, unc, running, len(nll)


def close(got, want, rtol, what, atol=0.0):
    assert abs(got - want) <= atol + rtol * abs(want), "%s: kiln %.9g, float64 %.9g" % (what, got, want)


# ------------------------------------------------------------------- cases

def t_ppl(path, extra, n_ctx=16):
    toks = tok_ids(TEXT)
    n_chunk = len(toks) // n_ctx
    if "--chunks" in extra:
        n_chunk = min(n_chunk, int(extra[extra.index("--chunks") + 1]))
    j, r = ppl_json("-m", path, "-f", TEXT_F, "-c", n_ctx, *extra)
    assert j["tokens"] == len(toks) and j["chunks"] == n_chunk, j
    ppl, unc, running, count = expected_ppl(path, toks, n_ctx, n_chunk)
    assert j["scored"] == count == n_chunk * (n_ctx - 1 - n_ctx // 2), (j["scored"], count)
    close(j["ppl"], ppl, 1e-4, "PPL")
    close(j["ppl_unc"], unc, 1e-3, "PPL uncertainty")
    assert len(j["running"]) == n_chunk
    for c in range(n_chunk):
        close(j["running"][c], running[c], 1e-4, "running PPL of chunk %d" % (c + 1))
    assert j["add_bos"] is True


def t_ppl_ubatch(path, extra):
    ENV["KILN_UBATCH"] = "3"
    try:
        t_ppl(path, extra)
    finally:
        ENV.pop("KILN_UBATCH")


def t_text_output():
    """the plain printout: [1]x,[2]y,... and the final estimate"""
    r = kiln("perplexity", "-m", LLAMA, "-f", TEXT_F, "-c", 16, "--exact", "--chunks", 3)
    assert r.returncode == 0, r.err[-400:]
    toks = tok_ids(TEXT)
    ppl, unc, running, _ = expected_ppl(LLAMA, toks, 16, 3)
    line = [ln for ln in r.out.splitlines() if ln.startswith("[1]")]
    assert line, r.out
    vals = [float(x.split("]")[1]) for x in line[0].rstrip(",").split(",")]
    assert len(vals) == 3 and all(abs(v - w) < 1e-3 * w for v, w in zip(vals, running)), (vals, running)
    fin = [ln for ln in r.out.splitlines() if ln.startswith("Final estimate: PPL = ")]
    assert fin, r.out
    p, u = fin[0][len("Final estimate: PPL = "):].split(" +/- ")
    close(float(p), ppl, 1e-3, "final PPL")
    close(float(u), unc, 1e-2, "final uncertainty")
    assert "(exact: f32 only)" in r.err and "int8" not in r.err and "bf16" not in r.err, r.err


def t_chunking_hand_worked():
    """21 tokens at -c 8: chunks [0, 8) and [8, 16) (the last 5 tokens are
    not used); each scores rows 4, 5, 6 (predicting tokens 5, 6, 7 of the
    chunk), 6 tokens in all; chunk 2 runs with token 8 replaced by BOS"""
    text = TEXT[:20]
    toks = tok_ids(text)
    assert len(toks) == 21
    tf = write_text("t21.txt", text)
    base = os.path.join(TMP, "t21.kld")
    j, _ = ppl_json("-m", LLAMA, "-f", tf, "-c", 8, "--exact", "--kl-divergence-base", base)
    assert (j["tokens"], j["chunks"], j["scored"]) == (21, 2, 6), j
    # by hand: nll of tokens 5, 6, 7 given rows 4, 5, 6 of each chunk
    R = ref(LLAMA)
    nll = []
    for c in range(2):
        ch = toks[8 * c:8 * c + 8]
        ch = [BOS] + ch[1:]
        lp = log_softmax(R.logits(ch))
        nll += [-lp[4][ch[5]], -lp[5][ch[6]], -lp[6][ch[7]]]
    close(j["ppl"], math.exp(np.mean(nll)), 1e-4, "hand-worked PPL")
    nobos = expected_ppl(LLAMA, toks, 8, 2, bos=False)[0]
    assert abs(nobos - j["ppl"]) > 1e-3 * j["ppl"], "BOS substitution made no difference: the check is void"
    b = read_base(base)
    assert (b["n_ctx"], b["n_chunk"], len(b["rows"])) == (8, 2, 6)
    assert list(b["tokens"]) == toks[:16], "the base file's tokens are the text's (no BOS substitution)"


def read_base(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"_logits_"
    n_ctx, n_vocab, n_chunk = struct.unpack("<3i", data[8:20])
    ntok = n_ctx * n_chunk
    tokens = np.frombuffer(data, dtype="<i4", count=ntok, offset=20)
    nv = 2 * ((n_vocab + 1) // 2) + 4
    scored = n_ctx - 1 - n_ctx // 2
    rows = np.frombuffer(data, dtype="<u2", offset=20 + 4 * ntok).reshape(n_chunk * scored, nv)
    assert len(data) == 20 + 4 * ntok + 2 * rows.size
    scale = rows[:, 0:2].copy().view("<f4")[:, 0].astype(np.float64)
    minlp = rows[:, 2:4].copy().view("<f4")[:, 0].astype(np.float64)
    q = rows[:, 4:4 + n_vocab].astype(np.float64)
    return dict(n_ctx=n_ctx, n_vocab=n_vocab, n_chunk=n_chunk, tokens=tokens, rows=rows, scale=scale, minlp=minlp,
                q=q, logp=scale[:, None] * q + minlp[:, None], raw=data)


def t_base_roundtrip():
    n_ctx, n_chunk = 16, 4
    base = os.path.join(TMP, "llama.kld")
    j, _ = ppl_json("-m", LLAMA, "-f", TEXT_F, "-c", n_ctx, "--chunks", n_chunk, "--exact", "--kl-divergence-base", base)
    b = read_base(base)
    toks = tok_ids(TEXT)
    assert (b["n_ctx"], b["n_vocab"], b["n_chunk"]) == (n_ctx, len(vocab()[0]), n_chunk)
    assert list(b["tokens"]) == toks[:n_ctx * n_chunk]
    lp = np.concatenate([c[0] for c in chunk_logprobs(LLAMA, toks, n_ctx, n_chunk)])
    # entries above max - 16 are quantised within half a step (+ float rounding)
    lmax = lp.max(axis=1, keepdims=True)
    live = lp > lmax - 15.99
    err = np.abs(b["logp"] - lp)[live]
    step = np.broadcast_to(b["scale"][:, None], lp.shape)[live]
    assert np.all(err <= 0.5 * step + 1e-4), "quantised log-probabilities off by %g (step %g)" % (err.max(), step.max())
    assert np.all(b["rows"][:, 4 + b["n_vocab"]:] == 0), "padding is not zero"
    # the same model against its own base: KL from quantisation only
    j2, r = ppl_json("-m", LLAMA, "--exact", "--kl-divergence-base", base, "--kl-divergence")
    kl = j2["kl"]
    assert j2["chunks"] == n_chunk and j2["tokens"] == n_ctx * n_chunk
    assert kl["same_top_p"] == 1.0 and abs(kl["kld_mean"]) < 1e-5 and kl["kld_max"] < 1e-4, kl
    close(kl["ppl_base"], j["ppl"], 1e-4, "PPL(base)")
    close(j2["ppl"], j["ppl"], 1e-6, "PPL against the base")
    # -f with the same text is accepted (checked against the base's tokens)
    j3, _ = ppl_json("-m", LLAMA, "-f", TEXT_F, "--exact", "--kl-divergence-base", base, "--kl-divergence")
    close(j3["kl"]["kld_mean"], kl["kld_mean"], 0, "KL with -f", atol=1e-12)


def pct(v, f):
    """llama-perplexity's percentile: linear between neighbours of sorted v"""
    if f <= 0:
        return v[0]
    if f >= 1:
        return v[-1]
    p = f * (len(v) - 1)
    i = int(p)
    p -= i
    return (1 - p) * v[i] + p * v[min(i + 1, len(v) - 1)]


def t_kl_other_model():
    """model B against model A's base: every statistic as llama-perplexity defines it"""
    n_ctx, n_chunk = 16, 6
    base = os.path.join(TMP, "llama_a.kld")
    ppl_json("-m", LLAMA, "-f", TEXT_F, "-c", n_ctx, "--exact", "--kl-divergence-base", base)
    j, _ = ppl_json("-m", LLAMA_B, "--exact", "--kl-divergence-base", base, "--kl-divergence")
    b = read_base(base)
    toks = list(b["tokens"])
    lp = np.concatenate([c[0] for c in chunk_logprobs(LLAMA_B, toks, n_ctx, n_chunk)])
    nxt = np.concatenate([c[1] for c in chunk_logprobs(LLAMA_B, toks, n_ctx, n_chunk)])
    rows = np.arange(len(nxt))
    lb = b["logp"]
    mask = lb > -16
    kld = np.where(mask, np.exp(lb) * (lb - lp), 0.0).sum(axis=1)
    nll, nll_b = -lp[rows, nxt], -lb[rows, nxt]
    dp = np.exp(-nll) - np.exp(-nll_b)
    n = len(kld)
    kl = j["kl"]
    assert j["scored"] == n == n_chunk * 7
    close(kl["kld_mean"], kld.mean(), 1e-3, "mean KL")
    assert kld.mean() > 1e-3, "the two models agree: the check is void"
    ks, ds = np.sort(kld), np.sort(dp)
    med = 0.5 * (ks[n // 2] + ks[n // 2 - 1]) if n % 2 == 0 else ks[n // 2]
    close(kl["kld_median"], med, 1e-3, "median KL")
    for key, f in [("kld_90", 0.9), ("kld_95", 0.95), ("kld_99", 0.99), ("kld_99_9", 0.999)]:
        close(kl[key], pct(ks, f), 1e-3, key, atol=1e-7)
    close(kl["kld_max"], ks[-1], 1e-3, "maximum KL")
    close(kl["kld_min"], ks[0], 1e-3, "minimum KL", atol=1e-7)
    same = np.mean(lp.argmax(axis=1) == lb.argmax(axis=1))
    assert abs(kl["same_top_p"] - same) <= 1.0 / n + 1e-12, (kl["same_top_p"], same)
    close(kl["dp_rms"], math.sqrt(np.mean(dp * dp)), 1e-3, "RMS dp")
    close(kl["dp_mean"], dp.mean(), 1e-3, "mean dp", atol=1e-6)
    close(kl["dp_max"], ds[-1], 1e-3, "maximum dp", atol=1e-6)
    close(kl["ppl_base"], math.exp(nll_b.mean()), 1e-4, "PPL(base)")
    close(j["ppl"], math.exp(nll.mean()), 1e-4, "PPL(Q)")
    close(kl["ln_ppl_ratio"], nll.mean() - nll_b.mean(), 1e-3, "ln PPL ratio", atol=1e-6)
    close(kl["ppl_ratio"], math.exp(nll.mean() - nll_b.mean()), 1e-4, "PPL ratio")
    # the text form prints llama-perplexity's blocks
    r = kiln("perplexity", "-m", LLAMA_B, "--exact", "--kl-divergence-base", base, "--kl-divergence")
    assert r.returncode == 0, r.err
    for s in ["Mean    KLD:", "Maximum KLD:", "99.0%   KLD:", "Median  KLD:", "RMS Δp    :", "Same top p:",
              "Mean PPL(Q)/PPL(base)         :"]:
        assert s in r.out, "missing %r in:\n%s" % (s, r.out)


def t_exact_run():
    r = kiln("run", "-m", LLAMA, "-p", "ab", "-n", "2", "--temp", "0", "--exact")
    assert r.returncode == 0, r.err[-400:]
    assert "(exact: f32 only)" in r.err and "int8 activations" not in r.err and "bf16 tiles" not in r.err, r.err
    r = kiln("bench", "-m", LLAMA, "-p", 8, "-n", 2, "-r", 1, "-t", 1, "--exact")
    assert r.returncode == 0, r.err[-400:]
    assert "(exact: f32 only)" in r.err, r.err
    # an exact program is never searched: kiln tune --exact says so
    r = kiln("tune", "-m", LLAMA, "--budget", 1, "--exact")
    assert r.returncode == 1 and "is not searched" in r.err, (r.returncode, r.err[-300:])
    # without --exact the line is there too, counting every contraction once per bucket
    r = kiln("run", "-m", LLAMA, "-p", "ab", "-n", "2", "--temp", "0")
    assert r.returncode == 0 and re.search(r"\d+ contractions: decode \d+ f32", r.err), r.err


def t_first_run_search():
    """a model new to this machine is searched first (KILN_TUNE seconds), and
    the search leaves the tuning DB as kiln run's own would: kiln run with
    that DB does not search again"""
    db = os.path.join(TMP, "search.db")
    env = dict(ENV, KILN_TUNE="4", KILN_TUNEDB=db)
    r = subprocess.run([KILN, "perplexity", "-m", LLAMA, "-f", TEXT_F, "-c", "16", "--json"], capture_output=True,
                       env=env, timeout=600)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, err[-500:]
    assert "no tuned schedules" in err and "searched" in err, err[-500:]
    j = json.loads(r.stdout)
    ppl = expected_ppl(LLAMA, tok_ids(TEXT), 16, j["chunks"])[0]
    close(j["ppl"], ppl, 2e-2, "PPL after the search (int8 / bf16 forms allowed)")
    first = err
    r = subprocess.run([KILN, "run", "-m", LLAMA, "-p", "ab", "-n", "2", "--temp", "0"], capture_output=True, env=env,
                       timeout=600)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, err[-500:]
    # a search that measured nothing (a machine too loaded for the 4 s to pay
    # one candidate's compile) records nothing, so the next run searches
    # again, by design; one that measured records every slot
    if not re.search(r"searched 0 kernels", first):
        assert "no tuned schedules" not in err, (first[-1500:], err[-500:])


def expect_error(args, code, pattern):
    r = kiln(*args)
    assert r.returncode == code, "kiln %s: exit %d (want %d): %s" % (" ".join(map(str, args)), r.returncode, code,
                                                                      r.err[-400:])
    assert pattern in r.err, "kiln %s: %r not in: %s" % (" ".join(map(str, args)), pattern, r.err[-400:])
    assert len(r.err.strip().splitlines()) <= 3, r.err


def t_input_errors():
    empty = write_text("empty.txt", "")
    short = write_text("short.txt", TEXT[:40])  # 41 tokens < 2 x 32
    expect_error(["perplexity", "-m", LLAMA, "-f", empty], 1, "the text is empty")
    expect_error(["perplexity", "-m", LLAMA, "-f", os.path.join(TMP, "none.txt")], 1, "cannot open the text")
    expect_error(["perplexity", "-m", LLAMA, "-f", short, "-c", 32, "--exact"], 1, "needs at least 64")
    expect_error(["perplexity", "-m", LLAMA, "-f", TEXT_F, "-c", 128], 1, "above the model's context of 64")
    expect_error(["perplexity", "-m", LLAMA], 2, "-f TEXT is required")
    expect_error(["perplexity", "-m", LLAMA, "-f", TEXT_F, "--kl-divergence"], 2, "needs --kl-divergence-base")
    expect_error(["perplexity", "-m", LLAMA, "-f", TEXT_F, "-c", "x"], 2, "is not")
    expect_error(["perplexity", "-m", LLAMA, "-f", TEXT_F, "--bogus"], 2, "unknown option")


def t_base_errors():
    base = os.path.join(TMP, "llama.kld")
    if not os.path.exists(base):
        ppl_json("-m", LLAMA, "-f", TEXT_F, "-c", 16, "--chunks", 4, "--exact", "--kl-divergence-base", base)
    raw = read_base(base)["raw"]
    ntok = 16 * 4

    def damaged(name, data):
        p = os.path.join(TMP, name)
        with open(p, "wb") as f:
            f.write(data)
        return ["perplexity", "-m", LLAMA, "--exact", "--kl-divergence-base", p, "--kl-divergence"]

    def put(off, fmt, v):
        d = bytearray(raw)
        struct.pack_into(fmt, d, off, v)
        return bytes(d)

    expect_error(damaged("magic.kld", b"_logitz_" + raw[8:]), 1, "magic '_logits_'")
    expect_error(damaged("hdr.kld", raw[:14]), 1, "truncated")
    expect_error(damaged("ctx0.kld", put(8, "<i", 0)), 1, "n_ctx is 0")
    expect_error(damaged("ctx.kld", put(8, "<i", 8)), 1, "too long")
    expect_error(damaged("ctxb.kld", put(8, "<i", 32)), 1, "truncated")
    expect_error(damaged("vocab0.kld", put(12, "<i", -5)), 1, "n_vocab is -5")
    expect_error(damaged("vocab.kld", put(12, "<i", 300)), 1, "truncated")
    expect_error(damaged("chunk0.kld", put(16, "<i", 0)), 1, "n_chunk is 0")
    expect_error(damaged("chunk.kld", put(16, "<i", 5)), 1, "truncated")
    expect_error(damaged("tok.kld", put(20 + 4 * 7, "<i", 99999)), 1, "token 7 (chunk 1) has id 99999")
    expect_error(damaged("cut.kld", raw[:-3]), 1, "truncated")
    expect_error(damaged("long.kld", raw + b"\0\0"), 1, "too long")
    nv = 2 * ((len(vocab()[0]) + 1) // 2) + 4
    row3 = 20 + 4 * ntok + 2 * nv * 9  # chunk 2, row 2
    expect_error(damaged("scale.kld", put(row3, "<f", float("nan"))), 1, "chunk 2, scored row 2")
    # a base of another vocabulary, other tokens, another context
    vbase = os.path.join(TMP, "vocab.kld")
    ppl_json("-m", LLAMA_V, "-f", TEXT_F, "-c", 16, "--chunks", 2, "--exact", "--kl-divergence-base", vbase)
    expect_error(["perplexity", "-m", LLAMA, "--exact", "--kl-divergence-base", vbase, "--kl-divergence"], 1,
                 "vocabulary of %d, the model" % (len(vocab()[0]) + 2))
    other = write_text("other.txt", text_of(100, 2))
    expect_error(["perplexity", "-m", LLAMA, "-f", other, "--exact", "--kl-divergence-base", base, "--kl-divergence"],
                 1, "the base was made from another text")
    expect_error(["perplexity", "-m", LLAMA, "-c", 32, "--exact", "--kl-divergence-base", base, "--kl-divergence"], 1,
                 "context of 16 tokens, but -c says 32")
    expect_error(["perplexity", "-m", LLAMA, "--kl-divergence-base", os.path.join(TMP, "nope.kld"),
                  "--kl-divergence"], 1, "cannot open the base file")


suite.case("ppl_llama_exact", t_ppl, LLAMA, ["--exact"])
suite.case("ppl_llama_interp", t_ppl, LLAMA, ["--interp", "--chunks", 3])
suite.case("ppl_llama_batches", t_ppl, LLAMA, ["--exact", "-b", 5])
suite.case("ppl_gemma3_exact", t_ppl, GEMMA, ["--exact"])
suite.case("ppl_gemma3_ubatch", t_ppl_ubatch, GEMMA, ["--exact"])
suite.case("ppl_llama_interp_ubatch", t_ppl_ubatch, LLAMA, ["--interp", "--chunks", 2])
suite.case("ppl_llama_default", t_ppl, LLAMA, ["-t", 1])
suite.case("text_output", t_text_output)
suite.case("chunking_hand_worked", t_chunking_hand_worked)
suite.case("base_roundtrip", t_base_roundtrip)
suite.case("kl_other_model", t_kl_other_model)
suite.case("exact_run", t_exact_run)
suite.case("first_run_search", t_first_run_search)
suite.case("input_errors", t_input_errors)
suite.case("base_errors", t_base_errors)
suite.finish()
