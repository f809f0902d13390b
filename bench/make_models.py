#!/usr/bin/env python3
"""bench/make_models.py — random-weight Llama-1B-shaped GGUF models for bench/llm.sh.

The side-by-side LLM benchmark (DESIGN.md 10, issue 6 item 9) needs models
bigger than the 270M default, in the block formats kiln and llama.cpp both
compute with, without downloading anything. These files are written with kiln's
own GGUF writer (through tests/py/kiln_gguf.py) and quantized by kiln's own
quantizers, so they also exercise the writer at full scale.

Shape (--shape 8b: Llama 3 8B's layers, d_model 4096, 32 layers, head_dim 128,
ffn 14336, the same vocabulary; files llama8b-random-*.gguf): Llama 3.2 1B (d_model 2048, 16 layers, 32 query heads, 8 KV heads,
head_dim 64, ffn 8192, tied output = token_embd, rope base 500000 with a
rope_freqs.weight, rmsnorm eps 1e-5), except the vocabulary: 32000 tokens instead
of 128256, as issue 6 asks, which keeps the files and the write time sane.
Decode therefore reads ~0.13 G weights for the output head instead of ~0.26 G;
the per-layer work (the bulk of the bytes) is exactly Llama 3.2 1B's.

Formats: q8_0, q4_0 and q4_k are "pure" (every 2-D weight, embedding included,
in that format; norms and rope_freqs in f32). q4_k_m (optional) mimics
llama-quantize's Q4_K_M mix: q6_k for the tied embedding and for attn_v and
ffn_down on the layers llama.cpp gives more bits (first and last eighth, and
every third in between).

Tokenizer: a minimal SentencePiece-style ("llama") vocabulary both loaders
accept: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, then made-up
pieces, with scores and token types. The benchmarks feed token ids, so the
vocabulary only has to load, not to make sense.

Weights are N(0, 1/fan_in) so activations stay in range through 16 layers
(no inf/NaN, no denormal slow paths on either side). Deterministic per seed.

Usage: python3 bench/make_models.py [--out DIR] [--types q8_0,q4_0,q4_k] [--shape 1b|8b]
                                     [--vocab N] [--layers N] [--force] [--seed S] [--verify]
Prints one line per model: its path (existing files are kept unless --force).
--verify loads each file with kiln (model_load) and runs llama.cpp's llama-bench
on it (-p 8 -n 4 -r 1; bench/.peers/llama.cpp, see install_llamacpp.sh).
Needs build/libkiln.so (make), or $KILN_LIB.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "py"))

import kiln_ctypes as kc  # noqa: E402
import kiln_gguf as kg  # noqa: E402

LLAMA_1B = dict(arch="llama", n_embd=2048, n_layer=16, n_head=32, n_head_kv=8, head_dim=64, n_ff=8192,
                n_vocab=32000, n_ctx=4096, eps=1e-5, rope_base=500000.0)
# Llama 3 8B's layers (d_model 4096, 32 layers, 32 query / 8 KV heads of 128,
# ffn 14336), the same 32000-token tied vocabulary: 7.11 G parameters, q8_0
# 7.56 GB, q4_k 4.0 GB (--shape 8b; bench/llm.sh --big)
LLAMA_8B = dict(LLAMA_1B, n_embd=4096, n_layer=32, n_head=32, n_head_kv=8, head_dim=128, n_ff=14336)
SHAPES = {"1b": LLAMA_1B, "8b": LLAMA_8B}
TYPES = {"q8_0": kc.Q8_0, "q4_0": kc.Q4_0, "q4_k": kc.Q4_K, "q4_k_m": kc.Q4_K}

# GGUF token types (llama.cpp's llama_token_type)
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_BYTE = 1, 2, 3, 6


def vocab(n):
    """(tokens, scores, types) of a SentencePiece-style vocabulary of n tokens"""
    if n < 300:
        raise ValueError("--vocab must be at least 300 (3 specials + 256 bytes + some pieces)")
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [TT_UNKNOWN, TT_CONTROL, TT_CONTROL] + [TT_BYTE] * 256
    seen = set(toks)
    alpha = "etaoinshrdlucmfwypvbgkjqxz"
    chars = alpha + alpha.upper() + "0123456789.,;:!?'\"()[]{}<>-_+=*/\\|@#$%^&~`"
    # single characters, then "▁"-prefixed words of growing length: enough
    # distinct pieces for any vocabulary size we need
    pieces = list(chars) + ["\u2581" + c for c in chars]
    frontier = [""]
    while len(toks) + len(pieces) < n:
        frontier = [w + c for w in frontier for c in alpha][: 4 * n]
        pieces += ["\u2581" + w for w in frontier if len(w) > 1] + [w for w in frontier if len(w) > 1]
    for p in pieces:
        if len(toks) == n:
            break
        if p not in seen:
            seen.add(p)
            toks.append(p)
            types.append(TT_NORMAL)
    assert len(toks) == n, "vocabulary generator ran out of pieces"
    scores = [0.0] * 259 + [-float(i) for i in range(n - 259)]
    return toks, scores, types


def more_bits(il, n_layer):
    """llama-quantize's use_more_bits(i_layer, n_layer) for Q4_K_M"""
    return il < n_layer // 8 or il >= 7 * n_layer // 8 or (il - n_layer // 8) % 3 == 2


def dtype_for(kind, n_layer):
    base = TYPES[kind]

    def pick(name, shape):
        if len(shape) < 2:
            return kc.F32
        if kind == "q4_k_m":
            if name == "token_embd.weight":
                return kc.Q6_K
            if name.endswith("attn_v.weight") or name.endswith("ffn_down.weight"):
                il = int(name.split(".")[1])
                if more_bits(il, n_layer):
                    return kc.Q6_K
        return base

    return pick


def write_model(path, cfg, kind, seed):
    rng = np.random.default_rng(seed)
    w = kg.Writer()
    a = cfg["arch"]
    w.scalar("general.architecture", kg.T_STR, a)
    w.scalar("general.name", kg.T_STR, "kiln bench random Llama-%s-shape %s" % (cfg.get("shape", "1b").upper(), kind))
    w.scalar("general.file_type", kg.T_U32, {"q8_0": 7, "q4_0": 2, "q4_k": 14, "q4_k_m": 15}[kind])
    w.scalar(a + ".vocab_size", kg.T_U32, cfg["n_vocab"])
    w.scalar(a + ".context_length", kg.T_U32, cfg["n_ctx"])
    w.scalar(a + ".embedding_length", kg.T_U32, cfg["n_embd"])
    w.scalar(a + ".block_count", kg.T_U32, cfg["n_layer"])
    w.scalar(a + ".feed_forward_length", kg.T_U32, cfg["n_ff"])
    w.scalar(a + ".attention.head_count", kg.T_U32, cfg["n_head"])
    w.scalar(a + ".attention.head_count_kv", kg.T_U32, cfg["n_head_kv"])
    w.scalar(a + ".attention.key_length", kg.T_U32, cfg["head_dim"])
    w.scalar(a + ".attention.value_length", kg.T_U32, cfg["head_dim"])
    w.scalar(a + ".rope.dimension_count", kg.T_U32, cfg["head_dim"])
    w.scalar(a + ".attention.layer_norm_rms_epsilon", kg.T_F32, cfg["eps"])
    w.scalar(a + ".rope.freq_base", kg.T_F32, cfg["rope_base"])
    toks, scores, types = vocab(cfg["n_vocab"])
    w.scalar("tokenizer.ggml.model", kg.T_STR, "llama")
    w.array("tokenizer.ggml.tokens", kg.T_STR, toks)
    w.array("tokenizer.ggml.scores", kg.T_F32, scores)
    w.array("tokenizer.ggml.token_type", kg.T_I32, types)
    w.scalar("tokenizer.ggml.unknown_token_id", kg.T_U32, 0)
    w.scalar("tokenizer.ggml.bos_token_id", kg.T_U32, 1)
    w.scalar("tokenizer.ggml.eos_token_id", kg.T_U32, 2)
    w.scalar("tokenizer.ggml.add_bos_token", kg.T_BOOL, 1)
    w.scalar("tokenizer.ggml.add_eos_token", kg.T_BOOL, 0)

    c = dict(cfg, tied=True, rope_freqs=True, rope_scale=None, sliding_window=None, swa_pattern=None)
    pick = dtype_for(kind, cfg["n_layer"])
    for name, shape in kg.tensor_list(c):
        if name == "rope_freqs.weight":
            # Llama 3's long-context divisors: 1 for high frequencies, up to 8 for low ones
            v = np.geomspace(1.0, 8.0, shape[0]).astype(np.float32)
        elif name.endswith("norm.weight"):
            v = (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        else:
            v = rng.standard_normal(shape, dtype=np.float32)
            v *= np.float32(1.0 / np.sqrt(shape[-1]))
        w.tensor_f32(name, pick(name, shape), v)
        del v
    w.write(path)
    w.free()


def verify(path):
    """both loaders take the file: kiln's model_load, and a tiny llama-bench run"""
    m = kg.Model(path, n_ctx=16)
    m.free()
    lb = os.environ.get("LLAMA_BENCH") or os.path.join(HERE, ".peers", "llama.cpp", "bin", "llama-bench")
    if not os.path.exists(lb):
        raise OSError("llama-bench not found at %s: run sh bench/install_llamacpp.sh" % lb)
    r = subprocess.run([lb, "-m", path, "-p", "8", "-n", "4", "-r", "1", "-t", "1", "-o", "json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise OSError("llama-bench failed on %s: %s" % (path, r.stderr.strip().splitlines()[-1:]))
    print("make_models.py: %s loads in kiln and llama.cpp" % os.path.basename(path), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "models", "bench"), help="directory (default models/bench)")
    ap.add_argument("--types", default="q8_0,q4_0,q4_k", help="comma list of %s" % ",".join(TYPES))
    ap.add_argument("--shape", default="1b", choices=sorted(SHAPES),
                    help="1b: Llama 3.2 1B's layers (default); 8b: Llama 3 8B's (q8_0 7.56 GB, q4_k 4.0 GB; "
                         "the writer holds the whole file in memory: about the file's size plus 0.5 GB)")
    ap.add_argument("--vocab", type=int, default=LLAMA_1B["n_vocab"])
    ap.add_argument("--layers", type=int, default=0, help="fewer layers for a quick smoke file (default: the shape's)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--force", action="store_true", help="rewrite existing files")
    ap.add_argument("--verify", action="store_true", help="check that kiln and llama.cpp load each file")
    args = ap.parse_args()

    if args.vocab < 300 or args.vocab > 1 << 20:
        ap.error("--vocab must be in 300..1048576 (3 specials + 256 bytes + pieces)")
    shape = SHAPES[args.shape]
    if args.layers == 0:
        args.layers = shape["n_layer"]
    if args.layers < 1:
        ap.error("--layers must be >= 1")
    kinds = [k for k in args.types.split(",") if k]
    bad = [k for k in kinds if k not in TYPES]
    if bad:
        ap.error("unknown type(s) %s; known: %s" % (",".join(bad), ",".join(TYPES)))
    cfg = dict(shape, n_vocab=args.vocab, n_layer=args.layers, shape=args.shape)
    os.makedirs(args.out, exist_ok=True)
    tag = "llama" + args.shape
    if (args.vocab, args.layers) != (shape["n_vocab"], shape["n_layer"]):
        tag += "-v%d-l%d" % (args.vocab, args.layers)
    try:
        for kind in kinds:
            path = os.path.join(args.out, "%s-random-%s.gguf" % (tag, kind))
            if args.force or not os.path.exists(path):
                t0 = time.time()
                write_model(path, cfg, kind, args.seed)
                print("make_models.py: wrote %s (%.0f MB) in %.1f s" % (os.path.basename(path),
                      os.path.getsize(path) / 1e6, time.time() - t0), file=sys.stderr)
            if args.verify:
                verify(path)
            print(path)
    except (OSError, kc.KilnError) as e:
        print("make_models.py: %s" % e, file=sys.stderr)
        if "libkiln" in str(e) or isinstance(e, OSError):
            print("make_models.py: (build kiln first: make; or set KILN_LIB)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
