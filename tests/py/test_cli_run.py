"""test_cli_run.py — `kiln run` and `kiln bench` end to end, on tiny random
models written by kiln's GGUF writer with a real (tiny) tokenizer in their
metadata: a SentencePiece-style vocabulary in a gemma3 model and a byte-level
BPE vocabulary (gpt2 alphabet, merges, llama-bpe pre-tokenizer) in a llama
model.

What is checked:
  - greedy generation (--temp 0) through the compiled program gives the same
    token ids as the reference interpreter (--interp), the streamed stdout is
    the JSON text, and the text equals the tokens' pieces decoded here, by a
    decoder written in this file;
  - the prompt's token ids (BOS per metadata, space prefix, merges) equal a
    small independent tokenizer written in this file;
  - the chat template (gemma turns; llama3 headers) with its special tokens;
  - stopping: at EOS (a model whose logits all tie picks id 0, the EOS), at
    -n, and at the end of the context;
  - the same seed gives the same sampled tokens; unseeded runs print a seed;
  - errors: missing, truncated and non-GGUF files, unknown architecture,
    unsupported tensor type, unknown tokenizer, bad and unknown flags: one
    line on stderr, exit 1 (file) or 2 (usage), never a signal;
  - `kiln bench -p 16 -n 8 -r 2 -t 1`: a table with pp16 and tg8 rows, and
    --json parses into records with positive rates; --profile's group table
    accounts for every kernel and all of the measured time.

The special and byte tokens' output rows (llama: output.weight; gemma3:
the tied token_embd) are zero, so their logits are exactly 0 and random
weights (whose largest logit is positive) never choose them: generation then
produces plain text pieces that the decoder here can check exactly.
"""
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as kc  # noqa: E402
import kiln_gguf as kg  # noqa: E402

BUILD = os.environ.get("KILN_BUILD") or os.path.join(kc.REPO, "build")
KILN = os.environ.get("KILN_BIN") or os.path.join(BUILD, "kiln")
TMP = tempfile.mkdtemp(prefix="kiln_cli_run_")
ENV = dict(os.environ)
# tests/run.sh preloads ASan for Python under make test-asan; kiln is then
# linked with the sanitizers itself, and the C compiler it starts must not
# inherit the preload
ENV.pop("LD_PRELOAD", None)
# compiled programs of the tests go to the tests' private cache
ENV.setdefault("XDG_CACHE_HOME", "/tmp/kiln-test-cache-%d" % os.getuid())

suite = kc.Suite("test_cli_run")

# ---------------------------------------------------------------- vocabularies

SPM_WORDS = ["▁the", "▁cat", "▁sat", "▁on", "▁a", "▁mat", "▁dog", "▁is", "▁red", "▁big"]


def spm_vocab():
    """SentencePiece-style: controls, <unk>, 256 byte tokens, letters, merges"""
    toks = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    types = [3, 3, 3, 2, 3, 3]
    toks += ["<0x%02X>" % b for b in range(256)]
    types += [6] * 256
    normal = ["▁"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + [",", ".", "\n"]
    for w in SPM_WORDS:  # every prefix of every word, so merges can build it
        for k in range(2, len(w) + 1):
            if w[:k] not in normal:
                normal.append(w[:k])
    for p in ["th", "he", "at", "in", "er", "an"]:
        if p not in normal:
            normal.append(p)
    toks += normal
    types += [1] * len(normal)
    # longer pieces merge first; ties by position (lower id first)
    scores = [0.0] * (6 + 256) + [float(len(t)) - 1e-3 * i for i, t in enumerate(normal)]
    return dict(model="llama", tokens=toks, types=types, scores=scores, bos=2, eos=1, unk=3, pad=0,
                add_bos=True, add_space_prefix=True, special=list(range(6 + 256)))


def gpt2_byte_map():
    """the gpt2 byte -> printable character table (the byte-level BPE alphabet)"""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    m, extra = {}, 0
    for b in range(256):
        if b in keep:
            m[b] = chr(b)
        else:
            m[b] = chr(256 + extra)
            extra += 1
    return m


BPE_MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ġ", "c"), ("a", "t"), ("Ġc", "at"), ("Ġ", "s"),
              ("Ġs", "at"), ("o", "n"), ("Ġ", "on"), ("i", "n"), ("e", "r"), ("Ġ", "m"), ("Ġm", "at"),
              ("Ġ", "d"), ("o", "g"), ("Ġd", "og"), ("Ġ", "a")]


def bpe_vocab():
    """byte-level BPE: EOS is id 0 (see the EOS test), then the other specials"""
    specials = ["<|end_of_text|>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]
    bm = gpt2_byte_map()
    toks = specials + [bm[b] for b in range(256)]
    types = [3] * len(specials) + [1] * 256
    for a, b in BPE_MERGES:
        if a + b not in toks:
            toks.append(a + b)
            types.append(1)
    return dict(model="gpt2", pre="llama-bpe", tokens=toks, types=types, merges=["%s %s" % m for m in BPE_MERGES],
                bos=1, eos=0, eot=2, add_bos=True, special=list(range(len(specials))))


# ---------------------------------------------------------- independent tokenizers

def spm_encode(v, text):
    """greedy SentencePiece merge: the adjacent pair whose concatenation is a
    token with the highest score first (leftmost on ties); ASCII text only"""
    ids = {t: i for i, t in enumerate(v["tokens"])}
    s = ("▁" if v["add_space_prefix"] else "") + text.replace(" ", "▁")
    syms = list(s)
    while True:
        best = None
        for i in range(len(syms) - 1):
            j = ids.get(syms[i] + syms[i + 1])
            if j is not None and (best is None or v["scores"][j] > best[0]):
                best = (v["scores"][j], i)
        if best is None:
            break
        i = best[1]
        syms[i:i + 2] = [syms[i] + syms[i + 1]]
    return ([v["bos"]] if v["add_bos"] else []) + [ids[x] for x in syms]


def bpe_encode(v, text):
    """lowercase words and single spaces: pieces "word", " word", ...; each
    piece's merges applied lowest rank first"""
    ids = {t: i for i, t in enumerate(v["tokens"])}
    bm = gpt2_byte_map()
    rank = {tuple(m.split(" ")): r for r, m in enumerate(v["merges"])}
    out = [v["bos"]] if v["add_bos"] else []
    for piece in re.findall(r" ?[a-z]+", text):
        syms = [bm[b] for b in piece.encode()]
        while True:
            cands = [(rank[(syms[i], syms[i + 1])], i) for i in range(len(syms) - 1) if (syms[i], syms[i + 1]) in rank]
            if not cands:
                break
            _, i = min(cands)
            syms[i:i + 2] = [syms[i] + syms[i + 1]]
        out += [ids[x] for x in syms]
    return out


def decode(v, ids):
    """the generated text of normal tokens (no special or byte tokens)"""
    if v["model"] == "llama":
        return "".join(v["tokens"][i] for i in ids).replace("▁", " ")
    inv = {c: b for b, c in gpt2_byte_map().items()}
    return bytes(inv[c] for i in ids for c in v["tokens"][i]).decode("utf-8", errors="replace")


# ---------------------------------------------------------------- model files

def write_model(path, arch, v, seed=5, zero_output=False, arch_name=None, extra_tensor=None, tok_model=None,
                arch_value=None):
    """a tiny random model of arch with vocabulary v. The output rows of v's
    special tokens are zero (all of them with zero_output)."""
    c = kg.tiny_config(arch, n_vocab=len(v["tokens"]))
    rng = np.random.default_rng(seed)
    w = kg.Writer()
    a = arch_name or arch
    w.scalar("general.architecture", kg.T_STR, arch_value or a)
    w.scalar("general.name", kg.T_STR, "tiny cli " + arch)
    for key, val in [("context_length", c["n_ctx"]), ("embedding_length", c["n_embd"]),
                     ("block_count", c["n_layer"]), ("feed_forward_length", c["n_ff"]),
                     ("attention.head_count", c["n_head"]), ("attention.head_count_kv", c["n_head_kv"]),
                     ("attention.key_length", c["head_dim"]), ("attention.value_length", c["head_dim"])]:
        w.scalar(a + "." + key, kg.T_U32, val)
    w.scalar(a + ".attention.layer_norm_rms_epsilon", kg.T_F32, c["eps"])
    w.scalar(a + ".rope.freq_base", kg.T_F32, c["rope_base"])
    if c["sliding_window"]:
        w.scalar(a + ".attention.sliding_window", kg.T_U32, c["sliding_window"])
        w.scalar(a + ".attention.sliding_window_pattern", kg.T_U32, c["swa_pattern"])
    w.scalar("tokenizer.ggml.model", kg.T_STR, tok_model or v["model"])
    if "pre" in v:
        w.scalar("tokenizer.ggml.pre", kg.T_STR, v["pre"])
    w.array("tokenizer.ggml.tokens", kg.T_STR, v["tokens"])
    w.array("tokenizer.ggml.token_type", kg.T_I32, v["types"])
    if "scores" in v:
        w.array("tokenizer.ggml.scores", kg.T_F32, v["scores"])
    if "merges" in v:
        w.array("tokenizer.ggml.merges", kg.T_STR, v["merges"])
    for key, name in [("bos", "bos_token_id"), ("eos", "eos_token_id"), ("unk", "unknown_token_id"),
                      ("pad", "padding_token_id"), ("eot", "eot_token_id")]:
        if key in v:
            w.scalar("tokenizer.ggml." + name, kg.T_U32, v[key])
    w.scalar("tokenizer.ggml.add_bos_token", kg.T_BOOL, int(v["add_bos"]))
    if "add_space_prefix" in v:
        w.scalar("tokenizer.ggml.add_space_prefix", kg.T_BOOL, int(v["add_space_prefix"]))
    out_name = "token_embd.weight" if c["tied"] else "output.weight"
    for name, shape in kg.tensor_list(c):
        if name.endswith("norm.weight"):
            x = 1.0 + 0.2 * rng.standard_normal(shape)
        else:
            x = rng.standard_normal(shape) / np.sqrt(shape[-1])
            if name == "token_embd.weight":
                x = x * (0.2 if arch == "gemma3" else 3.0)
        if name == out_name:
            x[v["special"]] = 0.0
            if zero_output:
                x[:] = 0.0
        w.tensor_f32(name, kc.F32 if len(shape) == 1 or name == out_name else kc.Q8_0, x.astype(np.float32))
    if extra_tensor:
        extra_tensor(w)
    w.write(path)
    w.free()
    return path


def kiln(*args, timeout=120):
    r = subprocess.run([KILN] + [str(a) for a in args], capture_output=True, env=ENV, timeout=timeout)
    r.out = r.stdout.decode("utf-8", errors="replace")
    r.err = r.stderr.decode("utf-8", errors="replace")
    return r


def run_json(path, *args):
    r = kiln("run", "-m", path, "--json", *args)
    assert r.returncode == 0, "kiln run %s: exit %d: %s" % (" ".join(map(str, args)), r.returncode, r.err[-400:])
    return json.loads(r.out), r


SPM, BPE = spm_vocab(), bpe_vocab()
GEMMA = write_model(os.path.join(TMP, "gemma3.gguf"), "gemma3", SPM)
LLAMA = write_model(os.path.join(TMP, "llama.gguf"), "llama", BPE)
PROMPT = "the cat sat on a mat"
N = 8

# ------------------------------------------------------------------- cases


def t_greedy(path, v):
    """plain run: text on stdout, summary with tokens/s on stderr; compiled
    greedy ids equal the interpreter's; text decodes from the ids"""
    r = kiln("run", "-m", path, "-p", PROMPT, "--temp", 0, "-n", N, "-t", 1)
    assert r.returncode == 0, "exit %d: %s" % (r.returncode, r.err[-400:])
    for what in ("prompt", "generated"):
        assert re.search(r"%s\s+\d+ tokens in\s+[\d.]+ ms:\s+[\d.]+ tokens/s" % what, r.err), \
            "no %s tokens/s line in stderr: %r" % (what, r.err[-400:])
    comp, _ = run_json(path, "-p", PROMPT, "--temp", 0, "-n", N, "-t", 1)
    interp, _ = run_json(path, "-p", PROMPT, "--temp", 0, "-n", N, "--interp")
    assert comp["backend"] == "cpu" and interp["backend"] == "interp", (comp["backend"], interp["backend"])
    assert comp["ids"] == interp["ids"], "compiled %s, interpreter %s" % (comp["ids"], interp["ids"])
    assert len(comp["ids"]) == N and comp["stop"] == "length", (comp["ids"], comp["stop"])
    assert comp["text"] == decode(v, comp["ids"]), "text %r, ids decode to %r" % (comp["text"], decode(v, comp["ids"]))
    assert r.out == comp["text"] + "\n", "streamed %r, JSON text %r" % (r.out, comp["text"])
    assert comp["text"].strip(), "no text generated"
    assert comp["prompt_tps"] > 0 and comp["gen_tps"] > 0 and comp["decode_steps"] == N - 1, comp


def t_prompt_tokens(path, v, encode):
    for p in (PROMPT, "the dog is red", "a", "the big cat"):
        got, _ = run_json(path, "-p", p, "--temp", 0, "-n", 1, "--interp")
        want = encode(v, p)
        assert got["prompt_ids"] == want, "%r: kiln %s, here %s" % (p, got["prompt_ids"], want)


def t_chat_gemma():
    got, r = run_json(GEMMA, "-p", "the cat", "--chat", "--temp", 0, "-n", 2, "--interp")
    t = SPM["tokens"]
    sot, eot = t.index("<start_of_turn>"), t.index("<end_of_turn>")
    ids = got["prompt_ids"]
    assert ids[:2] == [SPM["bos"], sot], "chat prompt starts %s" % ids[:4]
    assert ids.count(sot) == 2 and ids.count(eot) == 1, "turn markers in %s" % ids
    assert "chat template gemma" in r.err, r.err
    plain, _ = run_json(GEMMA, "-p", "<start_of_turn>", "--temp", 0, "-n", 1, "--interp")
    assert sot not in plain["prompt_ids"], "control token parsed in a plain (non-chat) prompt"


def t_chat_llama3():
    got, r = run_json(LLAMA, "-p", "the cat", "--chat", "--temp", 0, "-n", 2, "--interp")
    t = BPE["tokens"]
    ids = got["prompt_ids"]
    sh, eh, eot = t.index("<|start_header_id|>"), t.index("<|end_header_id|>"), t.index("<|eot_id|>")
    assert ids[:2] == [BPE["bos"], sh] and ids.count(sh) == 2 and ids.count(eh) == 2 and ids.count(eot) == 1, ids
    assert "chat template llama3" in r.err, r.err


def t_stop_eos():
    """all logits tie -> greedy picks id 0, the EOS: nothing generated, exit 0"""
    path = write_model(os.path.join(TMP, "llama_eos.gguf"), "llama", BPE, zero_output=True)
    got, r = run_json(path, "-p", PROMPT, "--temp", 0, "-n", N, "-t", 1)
    assert got["ids"] == [] and got["stop"] == "eos" and got["text"] == "", got
    assert re.search(r"generated\s+0 tokens", r.err), r.err[-300:]


def t_stop_context():
    """--ctx 10 with a 7-token prompt: 3 decode steps fit, so 4 tokens come out"""
    got, _ = run_json(GEMMA, "-p", PROMPT, "--temp", 0, "-n", 50, "--ctx", 10, "--interp")
    n_p = len(got["prompt_ids"])
    assert got["stop"] == "context" and len(got["ids"]) == 10 - n_p + 1, (n_p, got["ids"], got["stop"])
    r = kiln("run", "-m", GEMMA, "-p", PROMPT + " the dog is red", "--ctx", 4, "--interp")
    assert r.returncode == 1 and "context" in r.err, (r.returncode, r.err)


def t_seeds():
    a, _ = run_json(LLAMA, "-p", PROMPT, "--temp", 1.5, "--top-k", 0, "--top-p", 1, "--min-p", 0, "--seed", 1234, "-n", N)
    b, _ = run_json(LLAMA, "-p", PROMPT, "--temp", 1.5, "--top-k", 0, "--top-p", 1, "--min-p", 0, "--seed", 1234, "-n", N)
    assert a["ids"] == b["ids"] and a["seed"] == 1234, (a["ids"], b["ids"])
    # 20 other seeds: sampling at temperature 1.5 over ~290 tokens must not
    # always give the same 8 tokens
    others = set()
    for s in range(20):
        c, _ = run_json(LLAMA, "-p", PROMPT, "--temp", 1.5, "--top-k", 0, "--top-p", 1, "--seed", s, "-n", 3, "--interp")
        others.add(tuple(c["ids"]))
    assert len(others) > 1, "every seed gives %s" % others
    seeds = set()
    for _ in range(2):
        r = kiln("run", "-m", LLAMA, "-p", "a", "-n", 1, "--interp")
        m = re.search(r"seed (\d+)", r.err)
        assert r.returncode == 0 and m, r.err
        seeds.add(m.group(1))
    assert len(seeds) == 2, "two unseeded runs used the same seed %s" % seeds


def expect_error(args, code, pattern):
    r = kiln(*args)
    assert r.returncode == code, "kiln %s: exit %d, want %d; stderr %r" % (" ".join(map(str, args)), r.returncode,
                                                                          code, r.err)
    lines = [l for l in r.err.splitlines() if l.strip()]
    assert len(lines) == 1, "kiln %s: want one line on stderr, got %r" % (" ".join(map(str, args)), r.err)
    assert re.search(pattern, lines[0], re.I), "kiln %s: %r does not match %r" % (" ".join(map(str, args)), lines[0],
                                                                                  pattern)
    assert r.out == "", "output on stdout: %r" % r.out[:200]


def t_file_errors():
    missing = os.path.join(TMP, "nope.gguf")
    expect_error(["run", "-m", missing, "-p", "hi"], 1, re.escape(missing))
    data = open(LLAMA, "rb").read()
    half = os.path.join(TMP, "half.gguf")
    open(half, "wb").write(data[: len(data) // 2])
    expect_error(["run", "-m", half, "-p", "hi"], 1, "half.gguf: .*(truncat|beyond|outside|end of|past|size)")
    text = os.path.join(TMP, "text.gguf")
    open(text, "w").write("this is not a model\n" * 10)
    expect_error(["run", "-m", text, "-p", "hi"], 1, "text.gguf: .*(magic|GGUF)")
    expect_error(["run", "-m", TMP, "-p", "hi"], 1, re.escape(TMP))
    expect_error(["bench", "-m", half, "-p", 4, "-n", 2, "-r", 1, "-t", 1], 1, "half.gguf")


def t_model_errors():
    arch = write_model(os.path.join(TMP, "mamba.gguf"), "llama", BPE, arch_name="mamba")
    expect_error(["run", "-m", arch, "-p", "hi"], 1, "mamba")

    def q2k(w):  # a tensor type kiln does not compute: Q2_K, 84 bytes per 256 values
        w.tensor_raw("extra.weight", 10, (1, 256), np.zeros(84, dtype=np.uint8))
    bad_type = write_model(os.path.join(TMP, "q2k.gguf"), "llama", BPE, extra_tensor=q2k)
    expect_error(["run", "-m", bad_type, "-p", "hi"], 1, "Q2_K|type")
    bad_tok = write_model(os.path.join(TMP, "bert.gguf"), "llama", BPE, tok_model="bert")
    expect_error(["run", "-m", bad_tok, "-p", "hi", "--interp"], 1, "tokenizer.*bert")
    # "llama\0": read as a C string it would pass for llama, or be named 'llama' in a message
    nul = write_model(os.path.join(TMP, "nul.gguf"), "llama", BPE, arch_value="llama\0")
    expect_error(["run", "-m", nul, "-p", "hi"], 1, r"general\.architecture.*NUL")


def t_usage_errors():
    base = ["run", "-m", LLAMA, "-p", "hi"]
    for extra, pat in [(["-n", "abc"], "-n"), (["--temp", "-1"], "--temp"), (["--top-p", "2"], "--top-p"),
                       (["--min-p", "x"], "--min-p"), (["-t", "0"], "-t"), (["--repeat-penalty", "0"], "repeat"),
                       (["--seed", "-3"], "seed"), (["--ctx", "0"], "ctx"), (["--temp", "nan"], "temp"),
                       (["--frobnicate"], "frobnicate"), (["-n"], "-n"), (["--chat=1"], "chat")]:
        expect_error(base + extra, 2, re.escape(pat))
    expect_error(["run", "-p", "hi"], 2, "model")
    expect_error(["run", "-m", LLAMA], 2, "prompt")
    expect_error(["bench", "-m", LLAMA, "-t", "1,x"], 2, "-t")
    expect_error(["bench", "-m", LLAMA, "-r", "0"], 2, "-r")
    expect_error(["bench", "-m", LLAMA, "-d", "-1"], 2, "-d")
    expect_error(["bench", "-m", LLAMA, "--what"], 2, "what")
    expect_error(["bench", "-m", LLAMA, "-p", "0", "-n", "0"], 2, "nothing to run")
    expect_error(["bench", "-m", LLAMA, "-p", "0,0", "-n", "0", "-t", "1"], 2, "nothing to run")
    r = kiln("run", "--help")
    assert r.returncode == 0 and "--temp" in r.out and "--chat" in r.out, (r.returncode, r.out[:200])


def t_help():
    """kiln --help names every command with what it does today (no stale
    'not implemented' for things that work)"""
    r = kiln("--help")
    assert r.returncode == 0, r.err
    assert "not implemented" not in r.out, r.out
    for cmd in ("graph", "run", "bench", "tune", "explain", "device"):
        assert re.search(r"^\s+%s\b" % cmd, r.out, re.M), "no '%s' in kiln --help" % cmd
    assert re.search(r"explain \(--example NAME \| -m MODEL\.gguf\)", r.out), r.out
    r = kiln("explain", "-m", LLAMA, "--kernels")
    assert r.returncode == 0 and r.out.strip(), "kiln explain -m (which --help shows) failed: %s" % r.err[-300:]


def t_terminal_order():
    """--echo prints the prompt on stdout after the loading lines; with both
    streams on one pipe (as on a terminal) every log line starts a line of its
    own and the text is not glued to them"""
    r = subprocess.run([KILN, "run", "-m", LLAMA, "-p", PROMPT, "--temp", "0", "-n", str(N), "-t", "1", "--echo"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV, timeout=120)
    both = r.stdout.decode("utf-8", errors="replace")
    assert r.returncode == 0, both[-400:]
    glued = [l for l in both.splitlines() if "kiln run:" in l and not l.startswith("kiln run:")]
    assert not glued, "log lines glued to text: %r" % glued
    lines = both.splitlines()
    text_at = [i for i, l in enumerate(lines) if l.startswith(PROMPT)]
    assert text_at, "no line starts with the prompt: %r" % both[-600:]
    first_log = [i for i, l in enumerate(lines) if l.startswith("kiln run:")]
    stats = [i for i, l in enumerate(lines) if re.match(r"kiln run: (prompt|generated) ", l)]
    assert first_log and first_log[0] < text_at[0] < stats[0], "order: log %s, text %s, stats %s" % (
        first_log[:1], text_at, stats)
    comp, _ = run_json(LLAMA, "-p", PROMPT, "--temp", 0, "-n", N, "-t", 1)
    r = kiln("run", "-m", LLAMA, "-p", PROMPT, "--temp", "0", "-n", N, "-t", 1, "--echo")
    assert r.out == PROMPT + comp["text"] + "\n", "stdout %r, want the prompt then %r" % (r.out, comp["text"])


def llm_logits(path, ids, n_gen, interpreter, db):
    """the logits that chose each of the last n_gen tokens of ids (a prompt
    and its generated tokens), teacher-forced through libkiln.so: compiled
    with the tuning DB db (the searched schedules), or the reference
    interpreter"""
    d = kg.dll()
    was = os.environ.get("KILN_TUNEDB")
    os.environ["KILN_TUNEDB"] = db
    try:
        p = d.kiln_llm_default_params()
        p.threads, p.tune_s, p.interpreter, p.n_ctx = 1, 0.0, int(interpreter), 64
        m, err = ctypes.c_void_p(), ctypes.create_string_buffer(1024)
        assert d.kiln_llm_load(path.encode(), ctypes.byref(p), ctypes.byref(m), err, 1024) == kc.OK, err.value
    finally:
        os.environ["KILN_TUNEDB"] = was if was is not None else ""
    try:
        # as kiln run computes them: the prompt in one pass, then one token
        # per decode step (the decode bucket's schedules, not a prefill's)
        nv = d.kiln_llm_n_vocab(m)
        out, first = [], len(ids) - n_gen
        seq = np.ascontiguousarray(np.array(ids, dtype=np.int32))
        at = 0
        for k in range(first, len(ids)):
            lg = np.zeros(nv, np.float32)
            st = d.kiln_llm_decode(m, seq[at:].ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), k - at, at,
                                   lg.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
            assert st == kc.OK, d.kiln_llm_error(m)
            out.append(lg)
            at = k
        return out
    finally:
        d.kiln_llm_free(m)


def check_against_interpreter(path, prompt_ids, gen_ids, db):
    """the searched schedules compute the interpreter's logits: at every
    generated position (teacher-forced on the tokens the tuned run chose),
    within 3% of the interpreter's logit range, and the tuned run's greedy
    token is the interpreter's wherever the interpreter's top two differ by
    more than twice the difference seen (a tiny random model's near-ties can
    flip under the approximate arithmetic a search may pick: int8, bf16)"""
    ids = list(prompt_ids) + list(gen_ids)
    comp = llm_logits(path, ids, len(gen_ids), False, db)
    ref = llm_logits(path, ids, len(gen_ids), True, db)
    assert len(comp) == len(ref) == len(gen_ids)
    for k, (c, i) in enumerate(zip(comp, ref)):
        diff = float(np.max(np.abs(c - i)))
        span = float(np.max(i) - np.min(i))
        assert np.all(np.isfinite(c)) and diff <= 0.03 * span, "position %d: logits differ by %g (range %g)" % (k, diff, span)
        top2 = np.sort(i)[-2:]
        # the reloaded program is not bit for bit the searching process's
        # (seen in a fresh clone's make test): the CLI's token must be at the
        # top of these logits within the same 3%
        assert c[gen_ids[k]] >= np.max(c) - 0.03 * span, "position %d: the CLI's token is far below its logits' top" % k
        if top2[1] - top2[0] > 2 * diff:
            assert gen_ids[k] == int(np.argmax(i)), "position %d: token %d, interpreter %d (margin %g, diff %g)" % (
                k, gen_ids[k], int(np.argmax(i)), top2[1] - top2[0], diff)


def t_first_run_search():
    """a model new to this machine is searched before it runs, within the
    budget ($KILN_TUNE seconds), with one line per phase when stderr is not a
    terminal; the next run finds the records and does not search; --no-tune
    and KILN_TUNE=0 skip it; its logits are the interpreter's (check_against_interpreter)"""
    db = os.path.join(TMP, "first_run.db")
    # 8 s: more than the recompile reserve can take on a loaded 2-core
    # machine (up to 4x its estimate), so that something is searched; a
    # search that measured nothing records nothing (the next run searches)
    env = dict(ENV, KILN_TUNEDB=db, KILN_TUNE="8")
    args = [KILN, "run", "-m", GEMMA, "-p", PROMPT, "--temp", "0", "-n", str(N), "-t", "1", "--json"]
    r = subprocess.run(args + ["--no-tune"], capture_output=True, env=env, timeout=300)
    assert r.returncode == 0 and b"searching for up to" not in r.stderr, r.stderr[-400:]
    r = subprocess.run(args, capture_output=True, env=dict(env, KILN_TUNE="0"), timeout=300)
    assert r.returncode == 0 and b"searching for up to" not in r.stderr, r.stderr[-400:]
    t0 = time.monotonic()
    r = subprocess.run(args, capture_output=True, env=env, timeout=300)
    wall = time.monotonic() - t0
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, err[-600:]
    assert "searching for up to 8 s first" in err, err[-600:]
    for phase in ("measuring where the time goes", "searching prefill schedules", "searching decode schedules",
                  "compiling the program with the winners"):
        assert phase in err, "no '%s' line: %r" % (phase, err[-600:])
    # The budget is held to what kiln prints about its own search, not to
    # this test's clock: on a shared 2-core machine the load (other jobs,
    # the other tests of `make test -j`) stretches the profile, the compiles and
    # the model's runs by 2-5x, and a wall-clock bound either flakes or is
    # loose enough to catch nothing. The search's printed seconds (what it
    # measured: searches and the recompile) must stay within the issue's
    # bound, 10% or 3 s over the budget; the one part no budget can cut is
    # the recompile's run of the compiler, sized in advance (the reserve): its
    # overrun of that reserve is excused, and printed, and nothing else is.
    m = re.search(r"searched (\d+) kernels? in ([\d.]+) s of a 8 s budget \(([\d.]+) s in all", err)
    assert m, err[-600:]
    assert int(m.group(1)) >= 1, "nothing searched: %r" % err[-600:]
    spent, in_all = float(m.group(2)), float(m.group(3))
    rc = re.search(r"the recompile with the winners took ([\d.]+) s \(([\d.]+) s kept aside for it\)", err)
    over = max(0.0, float(rc.group(1)) - float(rc.group(2))) if rc else 0.0
    assert not rc or float(rc.group(1)) <= spent + 0.1, "a recompile longer than the search it is part of: %r" % err[-600:]
    assert spent - over <= 8 + 3, "the search took %.1f s of an 8 s budget (%.1f s of it the recompile's overrun)" % (spent, over)
    assert spent <= in_all + 0.1, "the search (%.1f s) longer than the whole (%.1f s)" % (spent, in_all)
    # a hang guard only (see above): 8 s of search plus a tiny model's
    # compile, profile and 5 tokens, with 20x to spare for a loaded machine
    assert wall < 240, "kiln run with an 8 s first-run search took %.0f s" % wall
    assert "\r" not in err, "a progress bar on a stderr that is not a terminal"
    tuned = json.loads(r.stdout)
    check_against_interpreter(GEMMA, tuned["prompt_ids"], tuned["ids"], db)
    assert os.path.exists(db), "no records written"
    r = subprocess.run(args, capture_output=True, env=env, timeout=300)
    assert r.returncode == 0 and b"searching for up to" not in r.stderr, \
        "searched again with records present: %r" % r.stderr[-400:]
    # another thread count is another machine setting: searched anew
    r = subprocess.run(args[:-3] + ["-t", "2", "--json"], capture_output=True, env=env, timeout=300)
    assert r.returncode == 0 and b"searching for up to" in r.stderr, r.stderr[-400:]


def t_compile_says_why():
    """a compile that builds C says so and why (the kernel cache had no code
    for this model and schedules); a second start from the same cache builds
    nothing and says nothing; nor does another context length (a bound
    symbol: the same code, tests/py/test_compile_once.py)"""
    cache = tempfile.mkdtemp(prefix="kiln_cc_cache_")
    env = dict(ENV, XDG_CACHE_HOME=cache)
    args = [KILN, "run", "-m", GEMMA, "-p", PROMPT, "--temp", "0", "-n", "2", "-t", "1"]
    runs = [subprocess.run(args + extra, capture_output=True, env=env, timeout=300)
            for extra in ([], [], ["-c", "32"])]
    for r in runs:
        assert r.returncode == 0, r.stderr[-400:]
    errs = [r.stderr.decode(errors="replace") for r in runs]
    assert "compiled the kernels (" in errs[0] and "no code for this model" in errs[0], errs[0][-600:]
    assert "compiled the kernels" not in errs[1], "a cached start compiled: %r" % errs[1][-400:]
    assert "compiled the kernels" not in errs[2], "a new context length compiled: %r" % errs[2][-400:]


def t_bench():
    r = kiln("bench", "-m", LLAMA, "-p", 16, "-n", 8, "-r", 2, "-t", 1)
    assert r.returncode == 0, "exit %d: %s" % (r.returncode, r.err[-400:])
    rows = [l for l in r.out.splitlines() if l.startswith("|")]
    assert "t/s" in rows[0] and "test" in rows[0], rows[:2]
    tests = {}
    for l in rows[2:]:
        cells = [c.strip() for c in l.strip("|").split("|")]
        m = re.fullmatch(r"([\d.]+) ± ([\d.]+)", cells[-1])
        assert m and float(m.group(1)) > 0, "bad t/s cell in %r" % l
        assert cells[4] == "1" and cells[3] == "CPU", l
        tests[cells[5]] = float(m.group(1))
    assert set(tests) == {"pp16", "tg8"}, "tests %s" % sorted(tests)
    r = kiln("bench", "-m", LLAMA, "-p", 16, "-n", 8, "-r", 2, "-t", 1, "--json")
    assert r.returncode == 0, r.err[-400:]
    recs = json.loads(r.out)
    assert [x["test"] for x in recs] == ["pp16", "tg8"], recs
    for x in recs:
        assert len(x["samples_ts"]) == 2 and x["avg_ts"] > 0 and x["n_threads"] == 1, x
        assert abs(np.mean(x["samples_ts"]) - x["avg_ts"]) <= 1e-3 * x["avg_ts"], x
        assert x["model_n_params"] > 0 and x["model_size"] > 0, x
        # what the record measured: kiln's build and the CPU, and whether tuned schedules ran
        assert x["kiln_version"] and x["kiln_commit"] and x["cpu"], x
        assert 0 <= x["tuned_slots"] <= x["slots"] and x["slots"] > 0 and x["search_s"] == 0, x
        assert x["n_depth"] == 0, x
    # -d: each test after D tokens already in the cache (llama-bench's -d), per depth
    r = kiln("bench", "-m", LLAMA, "-p", 8, "-n", 4, "-d", "0,24", "-r", 1, "-t", 1, "--json")
    assert r.returncode == 0, r.err[-400:]
    recs = json.loads(r.out)
    assert [(x["test"], x["n_depth"]) for x in recs] == [("pp8", 0), ("pp8", 24), ("tg4", 0), ("tg4", 24)], recs
    assert all(x["avg_ts"] > 0 for x in recs), recs
    r = kiln("bench", "-m", LLAMA, "-p", 8, "-n", 0, "-d", 24, "-r", 1, "-t", 1)
    assert r.returncode == 0 and re.search(r"\| +pp8 @ d24 \|", r.out), (r.out[-400:], r.err[-400:])


def t_bench_profile():
    """kiln bench --profile: per test, the dearest kernels and then every
    kernel by group; the groups account for every kernel and all the time"""
    r = kiln("bench", "-m", LLAMA, "-p", 8, "-n", 4, "-r", 1, "-t", 1, "--profile")
    assert r.returncode == 0, "exit %d: %s" % (r.returncode, r.err[-400:])
    blocks = r.out.split("profile of ")[1:]
    assert [b.split()[0] for b in blocks] == ["pp8", "tg4"], r.out[:600]
    for b in blocks:
        m = re.search(r"([\d.]+) ms per run over (\d+) runs, (\d+) kernels", b)
        assert m, b[:400]
        total_ms, nkernels = float(m.group(1)), int(m.group(3))
        assert total_ms > 0 and nkernels > 0, m.group(0)
        rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in b.splitlines() if l.startswith("|")]
        kernel_rows = [c for c in rows if c[0].isdigit()]
        group_rows = [c for c in rows if len(c) == 7 and c[1].isdigit()]
        assert kernel_rows and all(int(c[0]) < nkernels for c in kernel_rows), kernel_rows[:3]
        assert sum(int(c[1]) for c in group_rows) == nkernels, (nkernels, group_rows)
        assert any(c[0].startswith("contract ") for c in group_rows), group_rows
        share = sum(float(c[2].rstrip("%")) for c in group_rows)
        assert abs(share - 100.0) <= 1.0, "group shares sum to %.1f%%" % share
        ms = sum(float(c[3]) for c in group_rows)
        assert abs(ms - total_ms) <= 0.02 * total_ms + 0.005, (ms, total_ms)


def t_explain_model():
    """kiln explain -m: the model's graph, its e-graph run and its kernels"""
    r = kiln("explain", "-m", GEMMA, "--kernels")
    assert r.returncode == 0, r.err[-400:]
    assert re.search(r"^kernel 0: ", r.out, re.M), r.out[:400]
    assert "contraction contract-" in r.out and "token_embd.weight" in r.out, r.out[:800]
    # both attention forms and the runs each serves (src/runtime/stream_select.c)
    assert re.search(r"short prompts .*: materialised .*runner-up: streaming", r.out), r.out[-800:]
    assert re.search(r"decode .*: streaming .*runner-up: materialised", r.out), r.out[-800:]
    m = re.search(r"the streaming program: \d+ kernels, (\d+) of them stream kernels", r.out)
    assert m and int(m.group(1)) >= 1, r.out[-400:]
    r = kiln("explain", "-m", LLAMA, "--egraph")
    assert r.returncode == 0 and "stopped:" in r.out and "e-graph:" in r.out, (r.err[-400:], r.out[:400])
    r = kiln("explain", "-m", LLAMA, "--graph")
    assert r.returncode == 0 and "INPUT" in r.out and 'output "logits"' in r.out, r.out[-400:]
    expect_error(["explain", "-m", os.path.join(TMP, "nope.gguf")], 1, "nope.gguf")
    r = kiln("explain", "-m", LLAMA, "--example", "softmax")
    assert r.returncode == 2 and "exclude each other" in r.err and r.out == "", (r.returncode, r.err)
    # the KV cache's type, as run and bench build the model with it
    r = kiln("explain", "-m", GEMMA, "--kernels", "--kv-type", "f16")
    assert r.returncode == 0 and "state f16 'cache.k.0'" in r.out, (r.err[-400:], r.out[:400])
    assert "state f32 'cache.k.0'" in kiln("explain", "-m", GEMMA, "--kernels").out
    r = kiln("explain", "-m", GEMMA, "--kernels", "--kv-type", "f8")
    assert r.returncode == 2 and "--kv-type needs f16 or f32" in r.err and r.out == "", (r.returncode, r.err)


suite.case("run_greedy_llama_bpe", t_greedy, LLAMA, BPE)
suite.case("run_greedy_gemma3_spm", t_greedy, GEMMA, SPM)
suite.case("prompt_tokens_bpe", t_prompt_tokens, LLAMA, BPE, bpe_encode)
suite.case("prompt_tokens_spm", t_prompt_tokens, GEMMA, SPM, spm_encode)
suite.case("chat_gemma", t_chat_gemma)
suite.case("chat_llama3", t_chat_llama3)
suite.case("stop_at_eos", t_stop_eos)
suite.case("stop_at_context", t_stop_context)
suite.case("seeds", t_seeds)
suite.case("file_errors", t_file_errors)
suite.case("model_errors", t_model_errors)
suite.case("usage_errors", t_usage_errors)
suite.case("help_text", t_help)
suite.case("terminal_order_echo", t_terminal_order)
suite.case("first_run_search", t_first_run_search)
suite.case("compile_says_why", t_compile_says_why)
suite.case("bench_table_and_json", t_bench)
suite.case("bench_profile", t_bench_profile)
suite.case("explain_model", t_explain_model)
suite.finish()
