"""ref_models.py — an independent numpy (float64) implementation of the
transformer families kiln builds (llama, qwen2, qwen3, gemma3), written from
the architecture facts, not from kiln's code. It reads the GGUF file with the
gguf package (GGUFReader) and dequantises with gguf.quants, so neither kiln's
reader nor its block decoders are involved.

Facts used:
  - rmsnorm(x) = x / sqrt(mean(x^2) + eps) * w  (GGUF files of gemma already
    store gemma's (1 + w) multiplier)
  - rope: angle(p, j) = (p / linear_scale) * base^(-2j/d) / rope_freqs[j]
    (rope_freqs.weight when present, else 1); llama rotates
    adjacent pairs (2j, 2j+1), qwen2/qwen3/gemma3 the halves (j, j + d/2)
  - attention: causal, grouped-query (query head h reads kv head
    h // (n_head / n_head_kv)), scores scaled by 1/sqrt(head_dim); gemma3's
    sliding-window layers (layer i with (i+1) % pattern != 0, pattern 6 by
    default) keep keys with q_pos - k_pos < window and use rope base 10000
  - qwen2: q/k/v biases; qwen3 and gemma3: rmsnorm of q and k over head_dim
  - gemma3: embeddings times sqrt(n_embd); norms after attention and FFN;
    GeGLU with tanh-gelu; llama/qwen: SwiGLU
  - the output head is token_embd when output.weight is absent
"""
import math

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def _field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    v = f.contents()
    return v


class RefModel:
    def __init__(self, path):
        r = GGUFReader(str(path))
        a = _field(r, "general.architecture")
        self.arch = a
        self.d = int(_field(r, a + ".embedding_length"))
        self.n_layer = int(_field(r, a + ".block_count"))
        self.n_head = int(_field(r, a + ".attention.head_count"))
        self.n_head_kv = int(_field(r, a + ".attention.head_count_kv", self.n_head))
        self.hd = int(_field(r, a + ".attention.key_length", self.d // self.n_head))
        self.hdv = int(_field(r, a + ".attention.value_length", self.hd))
        self.eps = float(_field(r, a + ".attention.layer_norm_rms_epsilon", 1e-5))
        self.rope_base = float(_field(r, a + ".rope.freq_base", 10000.0))
        self.rope_scale = 1.0
        if _field(r, a + ".rope.scaling.type") == "linear":
            self.rope_scale = float(_field(r, a + ".rope.scaling.factor"))
        self.window = int(_field(r, a + ".attention.sliding_window", 0)) if a == "gemma3" else 0
        self.pattern = int(_field(r, a + ".attention.sliding_window_pattern", 6))
        self.w = {}
        for t in r.tensors:
            shape = tuple(int(s) for s in reversed(list(t.shape)))  # GGUF ne is innermost first
            self.w[t.name] = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(shape)
        self.neox = a != "llama"
        self.n_vocab = self.w["token_embd.weight"].shape[0]

    def _rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def _rope(self, x, base, scale):
        # x (T, heads, d); positions 0..T-1
        T, _, d = x.shape
        p = np.arange(T, dtype=np.float64) / scale
        theta = base ** (-2.0 * np.arange(d // 2) / d)
        if "rope_freqs.weight" in self.w:  # Llama 3.1+: per-pair frequency divisors
            theta = theta / self.w["rope_freqs.weight"]
        ang = p[:, None] * theta[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        if self.neox:
            x0, x1 = x[..., : d // 2], x[..., d // 2:]
        else:
            x0, x1 = x[..., 0::2], x[..., 1::2]
        o0, o1 = x0 * c - x1 * s, x0 * s + x1 * c
        out = np.empty_like(x)
        if self.neox:
            out[..., : d // 2], out[..., d // 2:] = o0, o1
        else:
            out[..., 0::2], out[..., 1::2] = o0, o1
        return out

    def _swa(self, il):
        return self.window > 0 and (self.pattern <= 0 or (il + 1) % self.pattern != 0)

    def logits(self, tokens):
        """logits (T, vocab) of every position, computed from scratch"""
        W = self.w
        toks = np.asarray(tokens, dtype=np.int64)
        T = len(toks)
        x = W["token_embd.weight"][toks].copy()
        gemma = self.arch == "gemma3"
        if gemma:
            x *= math.sqrt(self.d)
        hq, hkv, hd, hdv = self.n_head, self.n_head_kv, self.hd, self.hdv
        grp = hq // hkv
        pos = np.arange(T)
        for il in range(self.n_layer):
            p = "blk.%d." % il
            h = self._rms(x, W[p + "attn_norm.weight"])
            q = h @ W[p + "attn_q.weight"].T
            k = h @ W[p + "attn_k.weight"].T
            v = h @ W[p + "attn_v.weight"].T
            if p + "attn_q.bias" in W:
                q, k, v = q + W[p + "attn_q.bias"], k + W[p + "attn_k.bias"], v + W[p + "attn_v.bias"]
            q, k, v = q.reshape(T, hq, hd), k.reshape(T, hkv, hd), v.reshape(T, hkv, hdv)
            if p + "attn_q_norm.weight" in W:
                q = self._rms(q, W[p + "attn_q_norm.weight"])
                k = self._rms(k, W[p + "attn_k_norm.weight"])
            swa = self._swa(il)
            base = 10000.0 if (gemma and swa) else self.rope_base
            scale = 1.0 if (gemma and swa) else self.rope_scale
            q, k = self._rope(q, base, scale), self._rope(k, base, scale)
            allowed = pos[None, :] <= pos[:, None]
            if swa:
                allowed &= (pos[:, None] - pos[None, :]) < self.window
            out = np.zeros((T, hq, hdv))
            for head in range(hq):
                kvh = head // grp
                s = (q[:, head, :] @ k[:, kvh, :].T) / math.sqrt(hd)
                s = np.where(allowed, s, -np.inf)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                out[:, head, :] = s @ v[:, kvh, :]
            o = out.reshape(T, hq * hdv) @ W[p + "attn_output.weight"].T
            if gemma:
                o = self._rms(o, W[p + "post_attention_norm.weight"])
            x = x + o
            h = self._rms(x, W[p + "ffn_norm.weight"])
            g = h @ W[p + "ffn_gate.weight"].T
            u = h @ W[p + "ffn_up.weight"].T
            if gemma:
                g = 0.5 * g * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * g ** 3)))
            else:
                g = g / (1.0 + np.exp(-g))
            y = (g * u) @ W[p + "ffn_down.weight"].T
            if gemma:
                y = self._rms(y, W[p + "post_ffw_norm.weight"])
            x = x + y
        x = self._rms(x, W["output_norm.weight"])
        head = W.get("output.weight", W["token_embd.weight"])
        return x @ head.T

    def last_logits(self, tokens):
        return self.logits(tokens)[-1]
