/* model_batch.c — several sequences of one loaded model decoded in one pass
 * (kiln serve --parallel N): the slots' KV caches as views of one buffer per
 * state, and the batched-decode program (arch_build_batch, arch.h).
 *
 * Invariants:
 *  - Buffer i holds n_slots caches of model_state_bytes(m, i) bytes, slot s
 *    at offset s * bytes: the batched graph's state (n_slots * n_ctx rows)
 *    and slot s's single-sequence view are the same memory, so a slot's
 *    prefill (the model's own program on model_batch_kv(b, s)) and the
 *    batched steps never copy a cache.
 *  - Up to MODEL_BATCH_SLOTS_PER_SLOT (16) slots, the graph computes
 *    attention per slot (kiln_attention_slots: each slot's cache read in
 *    place by the stream kernel, every slot's attention each call, a slot
 *    no row names at one key); with more, per row (kiln_attention_rows:
 *    each row's cache gathered, a copy of its keys and values per layer
 *    and call). The per-slot form is the one whose rows are the single
 *    program's bit for bit on gemma3-270m with a tuned DB (8 slots: exact;
 *    the per-row form off by up to 7 in a logit after a first-run search,
 *    1e-5 without one); tests/py/test_serve_batch.py covers both forms.
 *  - The attention forms of the two programs agree (align_forms): the
 *    batched program streams, and the single program's decode is pinned
 *    to streaming while slots exist, over a tuning-DB record.
 *  - The batched graph is built, bound and compiled at the first
 *    model_batch_decode or model_batch_prepare (kiln serve --parallel N > 1
 *    calls it before it listens; kiln run never pays for it), the way the model's
 *    own graph was (model_compile_graph: same rewrites, kernel search, tuning
 *    DB, threads); a model loaded for the reference interpreter evaluates it
 *    with the interpreter.
 *  - Every call binds nb, kv_len = max(pos) + 1 and the three row inputs;
 *    rows are checked (slots distinct and in range, positions inside the
 *    context, ids inside the vocabulary) before anything runs.
 *  - A call runs at most MODEL_BATCH_MAX_ROWS rows (more go in several
 *    calls), so the contractions stay in the decode bucket whose schedules
 *    the single-sequence decode uses: a row's sums are then made in the same
 *    order whatever the other rows (tests/py/test_serve_batch.py checks it
 *    bit for bit), while the larger-M bucket's packed forms block K and
 *    could round a row differently with the batch's size. The decode
 *    schedules' int8 tiles on the repacked weights take all of a call's
 *    rows at once (src/codegen/emit_contract.c), so a weight group is read
 *    and unpacked once per step, not once per row, each row summed as alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "kiln_compile.h"
#include "model.h"

struct model_batch {
    model *m;
    int n_slots;
    int nstates;
    void **bufs;        /* per state: n_slots caches, slot-major */
    model_kv **views;   /* per slot */
    kiln_graph *g;      /* the batched graph, NULL until the first decode */
    kiln_program *prog; /* compiled, or NULL (interpreter) */
    int32_t *seen;      /* per slot: scratch for the distinctness check */
    char err[512];
};

/* a row's logits must be the single program's bit for bit, and the two
 * programs' attention forms agree only when both stream (the materialised
 * forms' contractions are different kernels, tuned apart): the batched
 * program runs the streaming form, and the single program's decode buckets
 * are pinned to the batched program's form over a tuning-DB record that
 * chose the materialised form for the single program alone */
static void pin_decode(model *m, int form) {
    kiln_program *one = model_program(m);
    kiln_program_form_pin(one, KILN_FORM_DECODE, form);
    kiln_program_form_pin(one, KILN_FORM_DECODE_LONG, form);
}

/* at the batched program's compile: the streaming form if it has one (the
 * single program was pinned to it when the slots were made, so that a
 * slot's steps before the first batched call decode alike), else its only
 * form, the materialised one */
static void align_forms(model_batch *b) {
    if (!kiln_program_form_force(b->prog, 1)) pin_decode(b->m, 0);
}

model_batch *model_batch_new(model *m, int n_slots) {
    if (!m || n_slots < 1) return NULL;
    model_batch *b = kiln_xcalloc(1, sizeof *b);
    b->m = m;
    b->n_slots = n_slots;
    b->nstates = model_n_states(m);
    b->bufs = kiln_xcalloc((size_t)(b->nstates ? b->nstates : 1), sizeof *b->bufs);
    for (int i = 0; i < b->nstates; i++) {
        size_t bytes = model_state_bytes(m, i) * (size_t)n_slots;
        b->bufs[i] = kiln_xcalloc(bytes ? bytes : 1, 1);
    }
    b->views = kiln_xcalloc((size_t)n_slots, sizeof *b->views);
    void **at = kiln_xcalloc((size_t)(b->nstates ? b->nstates : 1), sizeof *at);
    for (int s = 0; s < n_slots; s++) {
        for (int i = 0; i < b->nstates; i++) at[i] = (char *)b->bufs[i] + (size_t)s * model_state_bytes(m, i);
        b->views[s] = model_kv_view(m, at);
    }
    free(at);
    b->seen = kiln_xcalloc((size_t)n_slots, sizeof *b->seen);
    if (n_slots > 1) pin_decode(m, 1); /* see align_forms; one slot never decodes batched */
    return b;
}

void model_batch_free(model_batch *b) {
    if (!b) return;
    if (b->n_slots > 1) pin_decode(b->m, -1); /* the single program alone again: its own choice */
    kiln_program_free(b->prog); /* before its graph */
    kiln_graph_free(b->g);
    for (int s = 0; s < b->n_slots; s++) model_kv_free(b->views[s]);
    for (int i = 0; i < b->nstates; i++) free(b->bufs[i]);
    free(b->views);
    free(b->bufs);
    free(b->seen);
    free(b);
}

model_kv *model_batch_kv(model_batch *b, int slot) {
    return b && slot >= 0 && slot < b->n_slots ? b->views[slot] : NULL;
}

int model_batch_compiled(const model_batch *b) { return b && b->prog != NULL; }
const char *model_batch_error(const model_batch *b) { return b ? b->err : "no batch"; }

/* the batched graph with its weights, sizes and caches bound, compiled when
 * the model is */
static kiln_status batch_build(model_batch *b) {
    model *m = b->m;
    kiln_graph *g = kiln_graph_new();
    /* attention per slot for a few slots (attention_slots.c: the caches read
     * in place), per row, gathering each row's cache, for more */
    int per_slot = b->n_slots <= MODEL_BATCH_SLOTS_PER_SLOT;
    kiln_status s = arch_build_batch(g, model_gguf(m), model_hparams(m), model_opts(m)->kv_dtype, per_slot, b->err,
                                     sizeof b->err);
    if (!s) {
        model_bind_weights(m, g);
        s = kiln_bind_dim(g, ARCH_CTX_SYM, model_n_ctx(m));
        if (!s) s = kiln_bind_dim(g, ARCH_SLOTS_SYM, b->n_slots);
        for (int i = 0; i < b->nstates && !s; i++) {
            char name[64];
            snprintf(name, sizeof name, "cache.%c.%d", i % 2 ? 'v' : 'k', i / 2);
            s = kiln_bind_input(g, name, b->bufs[i], model_state_bytes(m, i) * (size_t)b->n_slots);
        }
        if (s) kiln_fail(b->err, sizeof b->err, s, "batched decode: binding: %s", kiln_graph_error(g));
    }
    if (!s && model_is_compiled(m)) {
        b->prog = model_compile_graph(m, g, &s);
        if (!b->prog) {
            if (!s) s = KILN_ERR_INVALID;
            kiln_fail(b->err, sizeof b->err, s, "batched decode: compiling failed: %s", kiln_graph_error(g));
        }
    }
    if (b->prog) align_forms(b);
    if (s) {
        kiln_graph_free(g);
        return s;
    }
    b->g = g;
    return KILN_OK;
}

/* the rows' checks */
static kiln_status check_rows(model_batch *b, int nb, const int32_t *slots, const int32_t *tokens, const int32_t *pos) {
    if (nb < 1 || nb > b->n_slots || !slots || !tokens || !pos)
        return kiln_fail(b->err, sizeof b->err, KILN_ERR_RANGE, "batched decode: %d rows for %d slots", nb, b->n_slots);
    memset(b->seen, 0, (size_t)b->n_slots * sizeof *b->seen);
    int64_t n_ctx = model_n_ctx(b->m), n_vocab = model_n_vocab(b->m);
    for (int r = 0; r < nb; r++) {
        if (slots[r] < 0 || slots[r] >= b->n_slots || b->seen[slots[r]]++)
            return kiln_fail(b->err, sizeof b->err, KILN_ERR_RANGE, "batched decode: row %d's slot %d is out of range or repeated",
                             r, slots[r]);
        if (pos[r] < 0 || pos[r] >= n_ctx)
            return kiln_fail(b->err, sizeof b->err, KILN_ERR_RANGE, "batched decode: row %d's position %d is outside the context of %lld",
                             r, pos[r], (long long)n_ctx);
        if (tokens[r] < 0 || tokens[r] >= n_vocab)
            return kiln_fail(b->err, sizeof b->err, KILN_ERR_RANGE, "batched decode: row %d's token %d is outside [0, %lld)", r,
                             tokens[r], (long long)n_vocab);
    }
    return KILN_OK;
}

/* one call of the program for rows that were checked */
static kiln_status run_rows(model_batch *b, int nb, const int32_t *slots, const int32_t *tokens, const int32_t *pos,
                            float *logits_out) {
    int64_t kv_len = 1;
    for (int r = 0; r < nb; r++)
        if (pos[r] + 1 > kv_len) kv_len = pos[r] + 1;
    kiln_graph *g = b->g;
    kiln_status s;
    size_t rowb = (size_t)nb * sizeof(int32_t);
    s = kiln_bind_dim(g, ARCH_ROWS_SYM, nb);
    if (!s) s = kiln_bind_dim(g, ARCH_KV_SYM, kv_len);
    if (!s) s = kiln_bind_input(g, "tokens", (void *)(uintptr_t)tokens, rowb);
    if (!s) s = kiln_bind_input(g, "rowpos", (void *)(uintptr_t)pos, rowb);
    if (!s) s = kiln_bind_input(g, "rowslot", (void *)(uintptr_t)slots, rowb);
    if (!s) s = b->prog ? kiln_run(b->prog) : kiln_eval_reference(g);
    if (!s) s = kiln_read_output(g, "logits", logits_out, (size_t)nb * (size_t)model_n_vocab(b->m) * sizeof(float));
    if (s) kiln_fail(b->err, sizeof b->err, s, "batched decode: %s", kiln_graph_error(g));
    return s;
}

kiln_status model_batch_prepare(model_batch *b) {
    if (!b) return KILN_ERR_INVALID;
    b->err[0] = 0;
    if (b->g) return KILN_OK;
    kiln_status s = batch_build(b);
    if (s || !b->prog) return s;
    /* one call now, so that what a program does at its first run (the
     * weights' decode copies, the streaming form's first launch: about 1 s
     * on gemma3-270m, seen as kiln serve's first batched step) is not paid
     * by the first clients that overlap: one row at slot 0's position 0,
     * which any prefill of slot 0 writes again before reading it */
    int32_t zero = 0;
    float *logits = kiln_xmalloc((size_t)model_n_vocab(b->m) * sizeof *logits);
    s = run_rows(b, 1, &zero, &zero, &zero, logits);
    free(logits);
    return s;
}

kiln_status model_batch_decode(model_batch *b, int nb, const int32_t *slots, const int32_t *tokens, const int32_t *pos,
                               float *logits_out) {
    if (!b) return KILN_ERR_INVALID;
    b->err[0] = 0;
    kiln_status s = check_rows(b, nb, slots, tokens, pos);
    if (s) return s;
    if (!logits_out) return kiln_fail(b->err, sizeof b->err, KILN_ERR_INVALID, "batched decode: no logits buffer");
    if (!b->g && (s = batch_build(b))) return s;
    size_t nv = (size_t)model_n_vocab(b->m);
    for (int r0 = 0; r0 < nb && !s; r0 += MODEL_BATCH_MAX_ROWS) {
        int n = nb - r0 < MODEL_BATCH_MAX_ROWS ? nb - r0 : MODEL_BATCH_MAX_ROWS;
        s = run_rows(b, n, slots + r0, tokens + r0, pos + r0, logits_out + (size_t)r0 * nv);
    }
    return s;
}
