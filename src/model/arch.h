/* arch.h — transformer language-model architectures as kiln graphs, built
 * from GGUF metadata with the public builder API only (no hand-written
 * forward pass, no model-specific kernel).
 *
 * Families: llama (Llama 2/3, TinyLlama, SmolLM, Mistral), qwen2, qwen3,
 * gemma3. They differ only in the flags of arch_hparams (rope pairing, q/k/v
 * biases, QK-norm, post-norms, GeGLU, embedding scale, sliding-window layers),
 * so one builder serves them all.
 *
 * The graph, built once for every sequence length and position:
 *   inputs   "tokens" i32 (seq); every weight as a kiln input named like its
 *            GGUF tensor (e.g. "blk.0.attn_q.weight"), with the GGUF dtype and
 *            shape (outermost first);
 *   states   "cache.k.L" (n_ctx, n_kv_heads, head_dim_k) and "cache.v.L"
 *            (n_ctx, n_kv_heads, head_dim_v) for each layer L, updated with
 *            SCATTER at rows pos .. pos+seq-1;
 *   symbols  "seq" (tokens this call, >= 1), "pos" (position of the first)
 *            and "n_ctx" (ARCH_CTX_SYM: the cache's rows, bound by whoever
 *            binds the cache states; the bytes of every bound state must
 *            match it, and pos + seq <= n_ctx is checked at each run), so
 *            the graph, the generated code and its tuning keys are the same
 *            for every context length;
 *   output   "logits" f32 (seq - logits_from, vocab): the rows logits_from
 *            .. seq-1, with the symbol "logits_from" (0 <= logits_from < seq)
 *            bound per call: seq-1 (the last position only), or any row
 *            for a model loaded with all_rows (perplexity scores many rows
 *            of one pass). The last row is a symbolic slice, not a constant
 *            one, so that the logits contraction has an M loop as the
 *            batched graph's does: the same kernel, tuning key and schedule.
 * Prefill (seq > 1) and decode (seq = 1) are the same graph with different
 * bindings; attention reads the updated cache rows 0 .. pos+seq-1.
 *
 * The batched-decode graph (arch_build_batch: kiln serve decoding several
 * sequences in one pass) differs only where a row's sequence matters:
 *   inputs   "tokens", "rowpos" and "rowslot", i32 (nb): row b is token
 *            tokens[b] at position rowpos[b] of sequence (slot) rowslot[b];
 *   states   "cache.k.L" (n_slots * n_ctx, n_kv_heads, head_dim_k), likewise
 *            "cache.v.L": every slot's cache, slot-major, so slot s's
 *            single-sequence cache is the view at row s * n_ctx (the
 *            graph above runs on that view, no copy); row b is written at
 *            rowslot[b] * n_ctx + rowpos[b];
 *   symbols  "nb" (ARCH_ROWS_SYM), "n_slots" (ARCH_SLOTS_SYM), n_ctx, and
 *            "kv_len" (ARCH_KV_SYM, bound per call to max(rowpos) + 1: the
 *            keys every row's attention spans, each row masked to its own
 *            0 .. rowpos[b], so the cost follows the longest sequence);
 *   output   "logits" f32 (nb, vocab), every row's.
 * Rope uses the same angle formula on the rows' positions, attention is
 * kiln_attention_slots (src/nn/attention_slots.c) or kiln_attention_rows
 * (src/nn/attention_rows.c), as the caller asks.
 */
#ifndef KILN_ARCH_H
#define KILN_ARCH_H

#include <stdint.h>

#include "gguf.h"
#include "kiln.h"

typedef enum arch_kind { ARCH_LLAMA = 0, ARCH_QWEN2, ARCH_QWEN3, ARCH_GEMMA3, ARCH_COUNT } arch_kind;

typedef struct arch_hparams {
    arch_kind kind;
    char name[32];          /* general.architecture */
    int64_t n_vocab;        /* rows of token_embd */
    int64_t n_embd;
    int64_t n_layer;
    int64_t n_head, n_head_kv;
    int64_t head_dim_k, head_dim_v;
    int64_t n_ff;
    int64_t n_ctx_train;
    double eps;             /* rmsnorm epsilon */
    double rope_base;       /* global layers */
    double rope_base_swa;   /* sliding-window layers */
    double rope_scale;      /* linear position scaling factor (positions divided by it); 1 = none */
    int rope_scale_swa;     /* the scaling also applies to sliding-window layers */
    kiln_rope_mode rope_mode;
    int64_t sliding_window; /* 0 = none */
    int64_t swa_pattern;    /* layer i uses the window iff (i+1) % swa_pattern != 0; 0 = every layer global */
    double attn_scale;      /* multiplies q.k */
    double embd_scale;      /* multiplies the token embeddings; 1 = none */
    int qkv_bias;           /* attn_q/k/v.bias tensors (required) */
    int qk_norm;            /* attn_q_norm / attn_k_norm over head_dim */
    int post_norms;         /* post_attention_norm and post_ffw_norm */
    int gelu;               /* GeGLU (gelu_tanh) instead of SwiGLU (silu) */
    int tied_output;        /* no output.weight: logits use token_embd */
    int has_rope_freqs;     /* rope_freqs.weight divides the rotary frequencies (Llama 3.1+) */
} arch_hparams;

/* the symbol of the cache's length (its rows) in the graph arch_build makes */
#define ARCH_CTX_SYM "n_ctx"
/* the batched-decode graph's symbols: rows, slots, keys spanned */
#define ARCH_ROWS_SYM "nb"
#define ARCH_SLOTS_SYM "n_slots"
#define ARCH_KV_SYM "kv_len"

const char *arch_kind_name(arch_kind k);

/* read and check the hyper-parameters of a supported architecture; errors
 * name the key or tensor at fault */
kiln_status arch_read_hparams(gguf_file *f, arch_hparams *hp, char *err, size_t cap);

/* 1 if layer il attends through the sliding window */
int arch_layer_is_swa(const arch_hparams *hp, int64_t il);

/* build the forward graph described above into the empty graph g. Weight
 * inputs are declared with the GGUF shapes and checked against hp; nothing
 * is bound. kv_dtype is f32 or f16; all_rows: the logits of a range of rows
 * (see "output" above) instead of the last row's. */
kiln_status arch_build(kiln_graph *g, const gguf_file *f, const arch_hparams *hp, kiln_dtype kv_dtype, int all_rows,
                       char *err, size_t cap);
/* build the batched-decode graph described above into the empty graph g;
 * per_slot: attention by kiln_attention_slots (every slot's, the caches read
 * in place: for a few slots) instead of kiln_attention_rows */
kiln_status arch_build_batch(kiln_graph *g, const gguf_file *f, const arch_hparams *hp, kiln_dtype kv_dtype, int per_slot,
                             char *err, size_t cap);

#endif
