/* model.h — a language model: a GGUF file, the forward graph built from its
 * metadata (arch.h), the weights bound in place from the file's bytes, and
 * the KV cache as state buffers.
 *
 * Invariants:
 *  - Weights are never copied: every weight input of the graph is bound to
 *    its tensor's bytes in the (mapped or read) file, which stays open until
 *    model_free.
 *  - The KV cache (n_ctx rows per layer) starts zeroed and is updated in
 *    place by every model_forward; positions already written stay valid, so
 *    a caller runs a prefill at pos 0 and then decode steps at pos n, n+1, ...
 *    model_reset forgets everything.
 *  - n_ctx is the graph's symbol ARCH_CTX_SYM, bound at load beside the cache
 *    states (whose bytes each run checks against it), never a constant of
 *    the graph: the compiled code is the same for every context length.
 *  - All evaluation goes through model_eval (model.c): the compiled program
 *    when the options ask for one (kiln_compile at load), else the
 *    reference interpreter.
 */
#ifndef KILN_MODEL_H
#define KILN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "arch.h"
#include "gguf.h"
#include "kiln.h"

typedef struct model model;

typedef struct model_options {
    int64_t n_ctx;        /* cache rows; 0 = min(training context, 4096) */
    kiln_dtype kv_dtype;  /* KILN_F32 (default) or KILN_F16; exact (or KILN_EXACT) evaluation keeps f32 */
    unsigned gguf_flags;  /* GGUF_OPEN_READ to read the file into memory instead of mapping it */
    int compiled;         /* 1: compile the graph at load and run the program; 0: reference interpreter */
    int threads;          /* compiled: worker threads (0 = all cores) */
    double search_budget; /* compiled: seconds of schedule search during the first runs (0: none) */
    int all_logits;       /* 1: the graph outputs the logits of a range of rows (model_forward_rows) */
    int exact;            /* compiled: kiln's exact evaluation (kiln_compile_options.exact) */
    int64_t n_ctx_min;    /* with n_ctx 0: at least this many rows (the default when it holds
                             them); any length shares the compiled code (a graph symbol) */
    int n_ubatch;         /* prompt rows per forward pass (a longer prompt runs in passes of this
                             many, as llama.cpp's ubatch): the intermediates grow with it, not
                             with the prompt; 0 = KILN_UBATCH (default 512), < 0: all at once */
} model_options;

model_options model_default_options(void);

/* open path, check it, build the graph and bind the weights and the cache */
kiln_status model_load(const char *path, model **out, char *err, size_t cap);
kiln_status model_load_ex(const char *path, const model_options *opt, model **out, char *err, size_t cap);
void model_free(model *m);

/* run n tokens at positions pos .. pos+n-1 (after the cache holds 0 .. pos-1)
 * and write the logits of the last one (n_vocab floats). Errors (bad token id,
 * n or pos out of range) leave the cache as it was; the message is in
 * model_error. */
kiln_status model_forward(model *m, const int32_t *tokens, int n, int pos, float *logits_out);
/* the same, writing the logits of rows from .. n-1 ((n - from) * n_vocab
 * floats, row-major) of a model loaded with all_logits; 0 <= from < n.
 * model_forward on such a model is from = n - 1. */
kiln_status model_forward_rows(model *m, const int32_t *tokens, int n, int pos, int from, float *logits_out);
int model_all_logits(const model *m);
void model_reset(model *m);
const char *model_error(const model *m);

/* More KV caches of the model's shape, so that one loaded and compiled model
 * serves several sequences (kiln serve's slots): model_kv_use binds kv's
 * buffers as the cache the next model_forward calls read and update (NULL:
 * the model's own). A kv starts zeroed, like the model's own cache. */
typedef struct model_kv model_kv;
model_kv *model_kv_new(const model *m);
void model_kv_free(model_kv *kv);
kiln_status model_kv_use(model *m, model_kv *kv);
size_t model_kv_bytes(const model *m); /* of one cache */
/* a cache whose buffers (one per state, model_state_bytes(m, i) bytes each)
 * are bufs[i], owned by the caller: model_kv_free frees only the handle */
model_kv *model_kv_view(const model *m, void *const *bufs);
int model_n_states(const model *m);             /* cache.k.L, cache.v.L for each layer, in that order */
size_t model_state_bytes(const model *m, int i); /* of state i of one cache */
const model_options *model_opts(const model *m);
/* bind every weight input of g (a graph built from m's file) in place */
void model_bind_weights(model *m, kiln_graph *g);
/* compile g as m's own graph was compiled (threads, search, attention forms) */
struct kiln_program *model_compile_graph(const model *m, kiln_graph *g, kiln_status *s);

/* Batched decoding (model_batch.c): n_slots caches as views of one buffer
 * per state (slot-major), and the batched-decode program of arch.h, built
 * and compiled at the first model_batch_decode. model_batch_kv(b, s) is slot
 * s's cache for model_kv_use / model_forward (its prefill); model_batch_decode
 * runs one token for each of nb rows: row r is token tokens[r] at position
 * pos[r] of slot slots[r] (distinct slots, each holding 0 .. pos[r]-1), and
 * writes nb * n_vocab logits, row-major. Errors leave the caches' earlier
 * rows as they were; the message is in model_batch_error. */
typedef struct model_batch model_batch;
/* rows per program call: the contraction schedules' decode bucket
 * (SCH_SMALL_M in src/sched/loop.h), see model_batch.c */
#define MODEL_BATCH_MAX_ROWS 4
/* slots up to which the batched program's attention is per slot
 * (kiln_attention_slots, streaming, a row the single program's bit for
 * bit); past it per row (kiln_attention_rows), see model_batch.c */
#define MODEL_BATCH_SLOTS_PER_SLOT 16
model_batch *model_batch_new(model *m, int n_slots);
void model_batch_free(model_batch *b);
model_kv *model_batch_kv(model_batch *b, int slot);
kiln_status model_batch_decode(model_batch *b, int nb, const int32_t *slots, const int32_t *tokens, const int32_t *pos,
                               float *logits_out);
int model_batch_compiled(const model_batch *b); /* 1 once the batched program exists */
/* build and compile the batched program now (kiln serve, before it listens),
 * not at the first model_batch_decode, and run it once (one row at slot 0's
 * position 0, which slot 0's first prefill writes again) so its first-run
 * costs are paid here too; KILN_OK when it already exists */
kiln_status model_batch_prepare(model_batch *b);
const char *model_batch_error(const model_batch *b);

const arch_hparams *model_hparams(const model *m);
int64_t model_n_vocab(const model *m);
int64_t model_n_ctx(const model *m);
/* rows per prompt pass (model_forward_rows runs a longer prompt in passes
 * starting at multiples of it from its first row); 0: one pass */
int model_ubatch(const model *m);
gguf_file *model_gguf(model *m);    /* for the tokenizer's metadata */
kiln_graph *model_graph(model *m);  /* for the compiler and `kiln explain` */
int model_is_compiled(const model *m);
struct kiln_program *model_program(model *m); /* the compiled program, or NULL (interpreter) */

#endif
