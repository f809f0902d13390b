/* arch.c — hyper-parameters from GGUF metadata and the one transformer
 * builder that the llama, qwen2, qwen3 and gemma3 families share.
 *
 * Facts the flags encode (as GGUF files from llama.cpp's converter store
 * them):
 *  - llama: rope pairs adjacent elements (llama.cpp's "norm" rope; the
 *    converter permutes q/k rows so this equals HF's rotate_half), SwiGLU,
 *    optional linear rope scaling and rope_freqs.weight (Llama 3.1+).
 *  - qwen2: neox rope (halves), q/k/v biases. qwen3: neox rope, QK-norm
 *    (rmsnorm over head_dim per head, before rope), head_dim from key_length.
 *  - gemma3: embeddings times sqrt(n_embd); pre- and post-norms around
 *    attention and FFN; QK-norm; GeGLU with gelu_tanh; every layer except
 *    each 6th ((i+1) % 6 == 0 is global) uses the sliding window and rope
 *    base 10000, global layers the metadata rope base (and the rope scaling);
 *    q.k scaled by 1/sqrt(key_length) (1/sqrt(n_embd/n_head) for the 27B
 *    model, whose query_pre_attn_scalar differs). The converter already
 *    stores Gemma's norm weights as the multiplier (1 + w), so every
 *    rmsnorm here multiplies by the stored weight.
 *  - every family: the output head is token_embd when output.weight is
 *    absent; attention is causal with grouped-query heads.
 *
 * Invariants: only the public builder API (kiln.h) is used; a missing or
 * misshapen tensor is reported by name before any graph error can occur;
 * the builder's sticky error is checked once at the end.
 */
#include "arch.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base.h"

static const char *const kind_names[ARCH_COUNT] = {"llama", "qwen2", "qwen3", "gemma3"};

const char *arch_kind_name(arch_kind k) { return (unsigned)k < ARCH_COUNT ? kind_names[k] : "?"; }

/* a getter's status with its message copied out */
static kiln_status got(gguf_file *f, kiln_status s, char *err, size_t cap) {
    if (s) kiln_fail(err, cap, s, "%s", gguf_error(f));
    return s;
}

int arch_layer_is_swa(const arch_hparams *hp, int64_t il) {
    if (hp->sliding_window <= 0) return 0;
    if (hp->swa_pattern <= 0) return 1;
    return (il + 1) % hp->swa_pattern != 0;
}

kiln_status arch_read_hparams(gguf_file *f, arch_hparams *hp, char *err, size_t cap) {
    memset(hp, 0, sizeof *hp);
    gguf_str a;
    kiln_status s = gguf_get_name(f, "general.architecture", &a);
    if (s) return got(f, s, err, cap);
    int k = -1;
    for (int i = 0; i < ARCH_COUNT; i++)
        if (gguf_str_eq(a, kind_names[i])) k = i;
    if (k < 0)
        return kiln_fail(err, cap, KILN_ERR_UNSUPPORTED,
                    "unsupported architecture '%.*s' (kiln knows llama, qwen2, qwen3, gemma3)",
                    (int)(a.len > 64 ? 64 : a.len), a.ptr);
    hp->kind = (arch_kind)k;
    snprintf(hp->name, sizeof hp->name, "%s", kind_names[k]);

    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, hp->name), key)
    const int64_t big = INT64_C(1) << 31;
    if ((s = gguf_get_int(f, KEY("embedding_length"), 1, big, &hp->n_embd))) return got(f, s, err, cap);
    if ((s = gguf_get_int(f, KEY("block_count"), 1, 100000, &hp->n_layer))) return got(f, s, err, cap);
    if ((s = gguf_get_int(f, KEY("feed_forward_length"), 1, big, &hp->n_ff))) return got(f, s, err, cap);
    if ((s = gguf_get_int(f, KEY("attention.head_count"), 1, 1 << 20, &hp->n_head))) return got(f, s, err, cap);
    if ((s = gguf_get_int_or(f, KEY("attention.head_count_kv"), 1, 1 << 20, hp->n_head, &hp->n_head_kv)))
        return got(f, s, err, cap);
    if (hp->n_head % hp->n_head_kv)
        return kiln_fail(err, cap, KILN_ERR_FORMAT, "%s: %lld heads are not a multiple of %lld kv heads", hp->name,
                    (long long)hp->n_head, (long long)hp->n_head_kv);
    int64_t hd = hp->n_embd / hp->n_head;
    if ((s = gguf_get_int_or(f, KEY("attention.key_length"), 2, 1 << 20, hd, &hp->head_dim_k))) return got(f, s, err, cap);
    if ((s = gguf_get_int_or(f, KEY("attention.value_length"), 1, 1 << 20, hp->head_dim_k, &hp->head_dim_v)))
        return got(f, s, err, cap);
    if (hp->head_dim_k % 2)
        return kiln_fail(err, cap, KILN_ERR_FORMAT, "%s: key_length %lld is odd (rope needs pairs)", hp->name,
                    (long long)hp->head_dim_k);
    int64_t rope_dim;
    if ((s = gguf_get_int_or(f, KEY("rope.dimension_count"), 1, 1 << 20, hp->head_dim_k, &rope_dim)))
        return got(f, s, err, cap);
    if (rope_dim != hp->head_dim_k)
        return kiln_fail(err, cap, KILN_ERR_UNSUPPORTED, "%s: partial rotary embedding (%lld of %lld dims) is not supported",
                    hp->name, (long long)rope_dim, (long long)hp->head_dim_k);
    if ((s = gguf_get_int_or(f, KEY("context_length"), 1, INT64_C(1) << 40, 4096, &hp->n_ctx_train)))
        return got(f, s, err, cap);
    if ((s = gguf_get_float_or(f, KEY("attention.layer_norm_rms_epsilon"), 1e-5, &hp->eps))) return got(f, s, err, cap);
    if ((s = gguf_get_float_or(f, KEY("rope.freq_base"), 10000.0, &hp->rope_base))) return got(f, s, err, cap);
    if (!(hp->eps >= 0 && hp->eps < 1) || !(hp->rope_base > 0 && hp->rope_base < 1e30))
        return kiln_fail(err, cap, KILN_ERR_FORMAT, "%s: rms epsilon %g or rope base %g out of range", hp->name, hp->eps,
                    hp->rope_base);
    hp->rope_base_swa = hp->rope_base;
    hp->rope_scale = 1.0;
    hp->rope_scale_swa = 1;
    gguf_str st;
    if (gguf_find(f, KEY("rope.scaling.type"))) {
        if ((s = gguf_get_name(f, key, &st))) return got(f, s, err, cap);
        double factor = 1.0;
        if (gguf_str_eq(st, "linear")) {
            if ((s = gguf_get_float(f, KEY("rope.scaling.factor"), &factor))) return got(f, s, err, cap);
            if (!(factor > 0 && factor < 1e6))
                return kiln_fail(err, cap, KILN_ERR_FORMAT, "%s: rope scaling factor %g out of range", hp->name, factor);
            hp->rope_scale = factor;
        } else if (!gguf_str_eq(st, "none")) {
            return kiln_fail(err, cap, KILN_ERR_UNSUPPORTED, "%s: rope scaling '%.*s' is not supported (only linear)",
                        hp->name, (int)(st.len > 32 ? 32 : st.len), st.ptr);
        }
    } else if (gguf_find(f, KEY("rope.scaling.factor"))) {
        /* files without a type but with a factor (some gemma3 conversions) mean linear */
        if ((s = gguf_get_float(f, key, &hp->rope_scale))) return got(f, s, err, cap);
        if (!(hp->rope_scale > 0 && hp->rope_scale < 1e6))
            return kiln_fail(err, cap, KILN_ERR_FORMAT, "%s: rope scaling factor %g out of range", hp->name, hp->rope_scale);
    }
    if (gguf_find(f, KEY("attention.sliding_window")) && hp->kind == ARCH_GEMMA3) {
        if ((s = gguf_get_int(f, key, 1, INT64_C(1) << 40, &hp->sliding_window))) return got(f, s, err, cap);
    }
    hp->attn_scale = 1.0 / sqrt((double)hp->head_dim_k);
    hp->embd_scale = 1.0;

    switch (hp->kind) {
    case ARCH_LLAMA: hp->rope_mode = KILN_ROPE_INTERLEAVED; break;
    case ARCH_QWEN2:
        hp->rope_mode = KILN_ROPE_NEOX;
        hp->qkv_bias = 1;
        break;
    case ARCH_QWEN3:
        hp->rope_mode = KILN_ROPE_NEOX;
        hp->qk_norm = 1;
        break;
    case ARCH_GEMMA3:
        hp->rope_mode = KILN_ROPE_NEOX;
        hp->qk_norm = hp->post_norms = hp->gelu = 1;
        hp->embd_scale = sqrt((double)hp->n_embd);
        hp->rope_base_swa = 10000.0;
        hp->rope_scale_swa = 0;
        if ((s = gguf_get_float_or(f, KEY("rope.freq_base_swa"), 10000.0, &hp->rope_base_swa)))
            return got(f, s, err, cap);
        if ((s = gguf_get_int_or(f, KEY("attention.sliding_window_pattern"), 0, 1 << 20, 6, &hp->swa_pattern)))
            return got(f, s, err, cap);
        if (hp->n_layer == 62 && hp->n_embd == 5376) hp->attn_scale = 1.0 / sqrt((double)(hp->n_embd / hp->n_head));
        break;
    default: break;
    }
#undef KEY

    const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!emb) return kiln_fail(err, cap, KILN_ERR_FORMAT, "%s: missing tensor token_embd.weight", hp->name);
    if (emb->ndim != 2 || emb->dims[1] != hp->n_embd)
        return kiln_fail(err, cap, KILN_ERR_FORMAT, "%s: token_embd.weight is not (vocab, %lld)", hp->name,
                    (long long)hp->n_embd);
    hp->n_vocab = emb->dims[0];
    hp->tied_output = gguf_find_tensor(f, "output.weight") == NULL;
    hp->has_rope_freqs = gguf_find_tensor(f, "rope_freqs.weight") != NULL;
    return KILN_OK;
}

/* ---- the builder ----------------------------------------------------------- */

typedef struct bctx {
    kiln_graph *g;
    const gguf_file *f;
    const arch_hparams *hp;
    char *err;
    size_t cap;
    kiln_status st;
} bctx;

/* the weight input `name`, checked to be (d0) or (d0, d1); KILN_NONE when
 * absent and optional, or on error (b->st set) */
static kiln_tensor weight(bctx *b, const char *name, int ndim, int64_t d0, int64_t d1, int required) {
    if (b->st) return KILN_NONE;
    const gguf_tensor *t = gguf_find_tensor(b->f, name);
    if (!t) {
        if (required) b->st = kiln_fail(b->err, b->cap, KILN_ERR_FORMAT, "%s: missing tensor %s", b->hp->name, name);
        return KILN_NONE;
    }
    if (t->dtype == KILN_DTYPE_COUNT || t->dtype == KILN_I32) {
        b->st = kiln_fail(b->err, b->cap, KILN_ERR_UNSUPPORTED, "unsupported tensor type %s for tensor %s",
                     gguf_ggml_type_name(t->ggml_type), name);
        return KILN_NONE;
    }
    int ok = t->ndim == ndim && t->dims[0] == d0 && (ndim < 2 || t->dims[1] == d1);
    if (!ok) {
        char have[96] = "(", want[64];
        for (int i = 0; i < t->ndim; i++) {
            size_t n = strlen(have);
            snprintf(have + n, sizeof have - n, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
        }
        strncat(have, ")", sizeof have - strlen(have) - 1);
        if (ndim == 1) snprintf(want, sizeof want, "(%lld)", (long long)d0);
        else snprintf(want, sizeof want, "(%lld, %lld)", (long long)d0, (long long)d1);
        b->st = kiln_fail(b->err, b->cap, KILN_ERR_FORMAT, "%s: tensor %s has shape %s, expected %s", b->hp->name, name,
                     have, want);
        return KILN_NONE;
    }
    kiln_sym dims[2];
    for (int i = 0; i < ndim; i++) dims[i] = kiln_sym_int(b->g, t->dims[i]);
    return kiln_input_dims(b->g, name, t->dtype, ndim, dims);
}

static kiln_tensor blk_weight(bctx *b, int64_t il, const char *what, int ndim, int64_t d0, int64_t d1, int required) {
    char name[96];
    snprintf(name, sizeof name, "blk.%lld.%s", (long long)il, what);
    return weight(b, name, ndim, d0, d1, required);
}

/* half-precision weights and norms are widened: activations are f32 and
 * binary ops need equal dtypes (block formats are dequantised by kiln_linear) */
static kiln_tensor as_f32(kiln_graph *g, kiln_tensor w) {
    if (w == KILN_NONE) return w;
    kiln_dtype t = kiln_tensor_dtype(g, w);
    return t == KILN_F16 || t == KILN_BF16 ? kiln_cast(g, w, KILN_F32) : w;
}

static kiln_tensor linear(kiln_graph *g, kiln_tensor x, kiln_tensor w, kiln_tensor bias) {
    return kiln_linear(g, x, as_f32(g, w), as_f32(g, bias));
}

static kiln_tensor rmsnorm(bctx *b, kiln_tensor x, kiln_tensor w) {
    return kiln_rmsnorm(b->g, x, as_f32(b->g, w), b->hp->eps);
}

/* rope with linear position scaling and/or per-pair frequency divisors
 * (rope_freqs), from primitives: kiln_rope takes neither. angle(p, j) =
 * (p / scale) * base^(-2j/d) / ff[j] for the positions p (seq) in f32; the
 * rotation is kiln_rope's. */
static kiln_tensor rope_ext(kiln_graph *g, kiln_tensor x, kiln_tensor p, double base, kiln_rope_mode mode, double scale,
                            kiln_tensor freqs) {
    kiln_sym seq = kiln_dim(g, x, 0), heads = kiln_dim(g, x, 1), d = kiln_dim(g, x, 2);
    int64_t dv = 0;
    kiln_sym_const_value(g, d, &dv);
    kiln_sym half = kiln_sym_int(g, dv / 2), zero = kiln_sym_int(g, 0);
    p = kiln_mul(g, p, kiln_const(g, 1.0 / scale, KILN_F32));
    kiln_tensor j = kiln_iota(g, KILN_F32, 1, &half, 0);
    kiln_tensor theta = kiln_exp2(g, kiln_mul(g, j, kiln_const(g, -2.0 * log2(base) / (double)dv, KILN_F32)));
    if (freqs != KILN_NONE) theta = kiln_div(g, theta, as_f32(g, freqs));
    kiln_tensor ang = kiln_mul(g, kiln_unsqueeze(g, p, 1), kiln_unsqueeze(g, theta, 0)); /* (seq, d/2) */
    /* cos a = 1 - 2 sin^2(a/2), as kiln_rope computes it */
    kiln_tensor sh = kiln_sin(g, kiln_mul(g, ang, kiln_const(g, 0.5, KILN_F32)));
    kiln_tensor c = kiln_add(g, kiln_mul(g, kiln_mul(g, sh, sh), kiln_const(g, -2.0, KILN_F32)), kiln_const(g, 1.0, KILN_F32));
    kiln_tensor cosv = kiln_unsqueeze(g, c, 1);
    kiln_tensor sinv = kiln_unsqueeze(g, kiln_sin(g, ang), 1);
    kiln_tensor x0, x1;
    if (mode == KILN_ROPE_INTERLEAVED) {
        x0 = kiln_slice(g, x, 2, zero, d, 2);
        x1 = kiln_slice(g, x, 2, kiln_sym_int(g, 1), d, 2);
    } else {
        x0 = kiln_slice(g, x, 2, zero, half, 1);
        x1 = kiln_slice(g, x, 2, half, d, 1);
    }
    kiln_tensor o0 = kiln_sub(g, kiln_mul(g, x0, cosv), kiln_mul(g, x1, sinv));
    kiln_tensor o1 = kiln_add(g, kiln_mul(g, x0, sinv), kiln_mul(g, x1, cosv));
    if (mode == KILN_ROPE_NEOX) return kiln_concat(g, o0, o1, 2);
    /* interleave back: (seq, heads, d/2, 2) viewed as (seq, heads, d) */
    kiln_tensor st = kiln_concat(g, kiln_unsqueeze(g, o0, 3), kiln_unsqueeze(g, o1, 3), 3);
    kiln_sym shape[3] = {seq, heads, d};
    return kiln_reshape(g, st, 3, shape);
}

/* the positions of the rows: a graph of one sequence has pos .. pos+seq-1
 * (the symbol pos), a batch one position per row (the i32 input rowpos) */
typedef struct rows_at {
    kiln_sym pos;      /* one sequence */
    kiln_tensor rowpos; /* batch: i32 (nb); KILN_NONE for one sequence */
} rows_at;

static kiln_tensor rope(bctx *b, kiln_tensor x, rows_at at, int64_t il, kiln_tensor freqs) {
    const arch_hparams *hp = b->hp;
    kiln_graph *g = b->g;
    int swa = arch_layer_is_swa(hp, il);
    double base = swa ? hp->rope_base_swa : hp->rope_base;
    double scale = (swa && !hp->rope_scale_swa) ? 1.0 : hp->rope_scale;
    if (scale == 1.0 && freqs == KILN_NONE)
        return at.rowpos != KILN_NONE ? kiln_rope_rows(g, x, at.rowpos, base, hp->rope_mode)
                                      : kiln_rope(g, x, at.pos, base, hp->rope_mode);
    kiln_tensor p;
    if (at.rowpos != KILN_NONE) {
        p = kiln_cast(g, at.rowpos, KILN_F32);
    } else {
        kiln_sym end = kiln_sym_add(g, at.pos, kiln_dim(g, x, 0));
        p = kiln_slice(g, kiln_iota(g, KILN_F32, 1, &end, 0), 0, at.pos, end, 1);
    }
    return rope_ext(g, x, p, base, hp->rope_mode, scale, freqs);
}

/* form: 0 the last row's logits, 1 the rows logits_from .. seq-1, 2 the
 * batched-decode graph (arch.h), 3 the same with attention per slot */
static kiln_status build(kiln_graph *g, const gguf_file *f, const arch_hparams *hp, kiln_dtype kv_dtype, int form,
                         char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    const int batch = form >= 2;
    if (kv_dtype != KILN_F32 && kv_dtype != KILN_F16)
        return kiln_fail(err, cap, KILN_ERR_INVALID, "arch_build: the cache must be f32 or f16");
    bctx b = {g, f, hp, err, cap, KILN_OK};
    const int64_t d = hp->n_embd, hq = hp->n_head, hkv = hp->n_head_kv, dk = hp->head_dim_k, dv = hp->head_dim_v;

    /* one sequence: seq rows at positions pos ..; a batch: nb rows, row b at
     * position rowpos[b] of sequence rowslot[b], keys bounded by kv_len */
    kiln_sym seq = kiln_sym_var(g, batch ? ARCH_ROWS_SYM : "seq");
    kiln_sym pos = batch ? kiln_sym_int(g, 0) : kiln_sym_var(g, "pos");
    kiln_sym n_ctx = kiln_sym_var(g, ARCH_CTX_SYM); /* the cache's rows, named in the states' shapes below */
    kiln_sym kv_len = batch ? kiln_sym_var(g, ARCH_KV_SYM) : kiln_sym_add(g, pos, seq), zero = kiln_sym_int(g, 0);
    kiln_tensor tokens = kiln_input_dims(g, "tokens", KILN_I32, 1, &seq);
    rows_at at = {pos, KILN_NONE};
    kiln_tensor rowslot = KILN_NONE;
    kiln_sym n_slots = zero;
    if (batch) {
        n_slots = kiln_sym_var(g, ARCH_SLOTS_SYM);
        at.rowpos = kiln_input_dims(g, "rowpos", KILN_I32, 1, &seq);
        rowslot = kiln_input_dims(g, "rowslot", KILN_I32, 1, &seq);
    }
    kiln_tensor emb = weight(&b, "token_embd.weight", 2, hp->n_vocab, d, 1);
    kiln_tensor out_w = hp->tied_output ? emb : weight(&b, "output.weight", 2, hp->n_vocab, d, 1);
    kiln_tensor out_norm = weight(&b, "output_norm.weight", 1, d, 0, 1);
    kiln_tensor freqs = hp->has_rope_freqs ? weight(&b, "rope_freqs.weight", 1, dk / 2, 0, 1) : KILN_NONE;
    if (b.st) return b.st;

    kiln_tensor x = as_f32(g, kiln_embedding(g, emb, tokens)); /* (seq, d) */
    if (hp->embd_scale != 1.0) x = kiln_mul(g, x, kiln_const(g, hp->embd_scale, KILN_F32));
    /* cache rows written this call: pos .. pos+seq-1; a batch's row b writes
     * row rowslot[b] * n_ctx + rowpos[b] of the slot-major cache */
    kiln_tensor rows;
    if (batch) {
        kiln_sym c1 = kiln_sym_add(g, n_ctx, kiln_sym_int(g, 1));
        kiln_tensor ctxv = kiln_slice(g, kiln_iota(g, KILN_I32, 1, &c1, 0), 0, n_ctx, c1, 1); /* (1): n_ctx */
        rows = kiln_add(g, kiln_mul(g, rowslot, ctxv), at.rowpos);
    } else {
        rows = kiln_slice(g, kiln_iota(g, KILN_I32, 1, &kv_len, 0), 0, pos, kv_len, 1);
    }
    char cshape[64], name[64];

    for (int64_t il = 0; il < hp->n_layer && !b.st; il++) {
        kiln_graph_mark_block(g); /* each layer a block: the rewrite saturates each distinct one once */
        kiln_tensor attn_norm = blk_weight(&b, il, "attn_norm.weight", 1, d, 0, 1);
        kiln_tensor wq = blk_weight(&b, il, "attn_q.weight", 2, hq * dk, d, 1);
        kiln_tensor wk = blk_weight(&b, il, "attn_k.weight", 2, hkv * dk, d, 1);
        kiln_tensor wv = blk_weight(&b, il, "attn_v.weight", 2, hkv * dv, d, 1);
        kiln_tensor wo = blk_weight(&b, il, "attn_output.weight", 2, d, hq * dv, 1);
        kiln_tensor bq = blk_weight(&b, il, "attn_q.bias", 1, hq * dk, 0, hp->qkv_bias);
        kiln_tensor bk = blk_weight(&b, il, "attn_k.bias", 1, hkv * dk, 0, hp->qkv_bias);
        kiln_tensor bv = blk_weight(&b, il, "attn_v.bias", 1, hkv * dv, 0, hp->qkv_bias);
        kiln_tensor qn = blk_weight(&b, il, "attn_q_norm.weight", 1, dk, 0, hp->qk_norm);
        kiln_tensor kn = blk_weight(&b, il, "attn_k_norm.weight", 1, dk, 0, hp->qk_norm);
        kiln_tensor post_attn = blk_weight(&b, il, "post_attention_norm.weight", 1, d, 0, hp->post_norms);
        kiln_tensor ffn_norm = blk_weight(&b, il, "ffn_norm.weight", 1, d, 0, 1);
        kiln_tensor wg = blk_weight(&b, il, "ffn_gate.weight", 2, hp->n_ff, d, 1);
        kiln_tensor wu = blk_weight(&b, il, "ffn_up.weight", 2, hp->n_ff, d, 1);
        kiln_tensor wd = blk_weight(&b, il, "ffn_down.weight", 2, d, hp->n_ff, 1);
        kiln_tensor post_ffw = blk_weight(&b, il, "post_ffw_norm.weight", 1, d, 0, hp->post_norms);
        if (b.st) break;

        /* attention */
        kiln_tensor h = rmsnorm(&b, x, attn_norm);
        kiln_sym qs[3] = {seq, kiln_sym_int(g, hq), kiln_sym_int(g, dk)};
        kiln_sym ks[3] = {seq, kiln_sym_int(g, hkv), kiln_sym_int(g, dk)};
        kiln_sym vs[3] = {seq, kiln_sym_int(g, hkv), kiln_sym_int(g, dv)};
        kiln_tensor q = kiln_reshape(g, linear(g, h, wq, bq), 3, qs);
        kiln_tensor k = kiln_reshape(g, linear(g, h, wk, bk), 3, ks);
        kiln_tensor v = kiln_reshape(g, linear(g, h, wv, bv), 3, vs);
        if (hp->qk_norm) {
            q = rmsnorm(&b, q, qn);
            k = rmsnorm(&b, k, kn);
        }
        q = rope(&b, q, at, il, freqs);
        k = rope(&b, k, at, il, freqs);

        /* the cache length is a symbol, so one compiled program serves every
         * context length; a batch's caches are every slot's, slot-major */
        const char *crows = batch ? ARCH_SLOTS_SYM "*" ARCH_CTX_SYM : ARCH_CTX_SYM;
        snprintf(cshape, sizeof cshape, "%s, %lld, %lld", crows, (long long)hkv, (long long)dk);
        snprintf(name, sizeof name, "cache.k.%lld", (long long)il);
        kiln_tensor kc = kiln_state(g, name, kv_dtype, cshape);
        snprintf(cshape, sizeof cshape, "%s, %lld, %lld", crows, (long long)hkv, (long long)dv);
        snprintf(name, sizeof name, "cache.v.%lld", (long long)il);
        kiln_tensor vc = kiln_state(g, name, kv_dtype, cshape);
        if (kv_dtype != KILN_F32) {
            k = kiln_cast(g, k, kv_dtype);
            v = kiln_cast(g, v, kv_dtype);
        }
        kc = kiln_scatter(g, kc, rows, k);
        vc = kiln_scatter(g, vc, rows, v);
        int64_t window = arch_layer_is_swa(hp, il) ? hp->sliding_window : 0;
        kiln_tensor a;
        if (batch) { /* every slot's keys 0 .. kv_len-1, each row masked to its own */
            kiln_sym k4[4] = {n_slots, n_ctx, kiln_sym_int(g, hkv), kiln_sym_int(g, dk)};
            kiln_sym v4[4] = {n_slots, n_ctx, kiln_sym_int(g, hkv), kiln_sym_int(g, dv)};
            kiln_tensor kk = as_f32(g, kiln_slice(g, kiln_reshape(g, kc, 4, k4), 1, zero, kv_len, 1));
            kiln_tensor vv = as_f32(g, kiln_slice(g, kiln_reshape(g, vc, 4, v4), 1, zero, kv_len, 1));
            a = form == 3 ? kiln_attention_slots(g, q, kk, vv, rowslot, at.rowpos, hp->attn_scale, window)
                          : kiln_attention_rows(g, q, kk, vv, rowslot, at.rowpos, hp->attn_scale, window);
        } else {
            kiln_tensor kk = as_f32(g, kiln_slice(g, kc, 0, zero, kv_len, 1));
            kiln_tensor vv = as_f32(g, kiln_slice(g, vc, 0, zero, kv_len, 1));
            a = kiln_attention(g, q, kk, vv, pos, hp->attn_scale, window); /* (seq, hq, dv) */
        }
        kiln_sym as[2] = {seq, kiln_sym_int(g, hq * dv)};
        kiln_tensor o = linear(g, kiln_reshape(g, a, 2, as), wo, KILN_NONE);
        if (hp->post_norms) o = rmsnorm(&b, o, post_attn);
        x = kiln_add(g, x, o);

        /* feed-forward */
        h = rmsnorm(&b, x, ffn_norm);
        kiln_tensor gate = linear(g, h, wg, KILN_NONE);
        kiln_tensor up = linear(g, h, wu, KILN_NONE);
        gate = hp->gelu ? kiln_gelu_tanh(g, gate) : kiln_silu(g, gate);
        kiln_tensor y = linear(g, kiln_mul(g, gate, up), wd, KILN_NONE);
        if (hp->post_norms) y = rmsnorm(&b, y, post_ffw);
        x = kiln_add(g, x, y);
    }
    if (b.st) return b.st;

    kiln_graph_mark_block(g);
    /* (seq - logits_from, d): the rows logits_from .. seq-1 (the last row
     * only unless all_rows: logits_from bound to seq-1); a batch: every row.
     * The last row is a symbolic slice, not the constant (1, d), so that
     * the logits contraction has an M loop as the batched graph's does: one
     * kernel, one tuning key, one schedule for both, and a row's logits in
     * a batched decode are the single program's bit for bit (a constant M
     * gave the single program a kernel of its own, tuned apart) */
    kiln_sym from = batch ? zero : kiln_sym_var(g, "logits_from");
    kiln_tensor last = kiln_slice(g, x, 0, from, seq, 1);
    last = rmsnorm(&b, last, out_norm);
    kiln_tensor logits = linear(g, last, out_w, KILN_NONE); /* (rows, vocab) */
    if (logits != KILN_NONE && kiln_tensor_dtype(g, logits) != KILN_F32) logits = kiln_cast(g, logits, KILN_F32);
    kiln_output(g, logits, "logits");
    if (kiln_graph_status(g) != KILN_OK)
        return kiln_fail(err, cap, kiln_graph_status(g), "%s: building the graph failed: %s", hp->name, kiln_graph_error(g));
    return KILN_OK;
}

kiln_status arch_build(kiln_graph *g, const gguf_file *f, const arch_hparams *hp, kiln_dtype kv_dtype, int all_rows,
                       char *err, size_t cap) {
    return build(g, f, hp, kv_dtype, all_rows ? 1 : 0, err, cap);
}

kiln_status arch_build_batch(kiln_graph *g, const gguf_file *f, const arch_hparams *hp, kiln_dtype kv_dtype, int per_slot,
                             char *err, size_t cap) {
    return build(g, f, hp, kv_dtype, per_slot ? 3 : 2, err, cap);
}
