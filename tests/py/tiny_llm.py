"""tiny_llm.py — a tiny random gemma3 model with a real (tiny) SentencePiece
vocabulary, written with kiln's GGUF writer (kiln_gguf.Writer), for the tests
of the public LLM API, the install and the Python package.

The output rows of the special and byte tokens are zero, so their logits are
exactly 0 and the random weights (whose largest logit is positive) never pick
them: greedy generation produces plain word pieces. EOS is id 1.
"""
import numpy as np

import kiln_ctypes as kc
import kiln_gguf as kg

WORDS = ["▁the", "▁cat", "▁sat", "▁on", "▁a", "▁mat", "▁dog", "▁is", "▁red", "▁big"]
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]


def vocab():
    """tokens, token types and scores: controls, <unk>, 256 byte tokens,
    letters, and every prefix of WORDS (longer pieces merge first)"""
    toks, types = list(SPECIAL), [3, 3, 3, 2, 3, 3]
    toks += ["<0x%02X>" % b for b in range(256)]
    types += [6] * 256
    normal = ["▁"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + [",", ".", "\n"]
    for w in WORDS:
        for k in range(2, len(w) + 1):
            if w[:k] not in normal:
                normal.append(w[:k])
    toks += normal
    types += [1] * len(normal)
    scores = [0.0] * (len(SPECIAL) + 256) + [float(len(t)) - 1e-3 * i for i, t in enumerate(normal)]
    return toks, types, scores


def write(path, seed=5, n_ctx=64, chat_template=None):
    """write the model to path and return path (with chat_template, a Jinja
    text, as its tokenizer.chat_template)"""
    toks, types, scores = vocab()
    c = kg.tiny_config("gemma3", n_vocab=len(toks), n_ctx=n_ctx)
    rng = np.random.default_rng(seed)
    w = kg.Writer()
    a = "gemma3"
    w.scalar("general.architecture", kg.T_STR, a)
    w.scalar("general.name", kg.T_STR, "tiny gemma3")
    for key, val in [("context_length", c["n_ctx"]), ("embedding_length", c["n_embd"]),
                     ("block_count", c["n_layer"]), ("feed_forward_length", c["n_ff"]),
                     ("attention.head_count", c["n_head"]), ("attention.head_count_kv", c["n_head_kv"]),
                     ("attention.key_length", c["head_dim"]), ("attention.value_length", c["head_dim"]),
                     ("attention.sliding_window", c["sliding_window"]),
                     ("attention.sliding_window_pattern", c["swa_pattern"])]:
        w.scalar(a + "." + key, kg.T_U32, val)
    w.scalar(a + ".attention.layer_norm_rms_epsilon", kg.T_F32, c["eps"])
    w.scalar(a + ".rope.freq_base", kg.T_F32, c["rope_base"])
    w.scalar("tokenizer.ggml.model", kg.T_STR, "llama")
    w.array("tokenizer.ggml.tokens", kg.T_STR, toks)
    w.array("tokenizer.ggml.token_type", kg.T_I32, types)
    w.array("tokenizer.ggml.scores", kg.T_F32, scores)
    for name, val in [("bos_token_id", 2), ("eos_token_id", 1), ("unknown_token_id", 3), ("padding_token_id", 0)]:
        w.scalar("tokenizer.ggml." + name, kg.T_U32, val)
    w.scalar("tokenizer.ggml.add_bos_token", kg.T_BOOL, 1)
    w.scalar("tokenizer.ggml.add_space_prefix", kg.T_BOOL, 1)
    if chat_template is not None:
        w.scalar("tokenizer.chat_template", kg.T_STR, chat_template)
    for name, shape in kg.tensor_list(c):
        if name.endswith("norm.weight"):
            x = 1.0 + 0.2 * rng.standard_normal(shape)
        else:
            x = rng.standard_normal(shape) / np.sqrt(shape[-1])
            if name == "token_embd.weight":
                x = x * 0.2
                x[:len(SPECIAL) + 256] = 0.0  # tied output: special and byte logits are 0
        w.tensor_f32(name, kc.F32 if len(shape) == 1 or name == "token_embd.weight" else kc.Q8_0,
                     x.astype(np.float32))
    w.write(path)
    w.free()
    return path
