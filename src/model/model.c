/* model.c — load a GGUF language model into a graph with bound weights and a
 * zeroed KV cache, and run it one call at a time.
 *
 * Invariants: see model.h. Weight inputs are bound to pointers into the
 * gguf_file with kiln_bind_weight (they never change while bound, so a
 * tuned schedule may read a repacked copy); inputs that are not states are
 * only read, so the read-only mapping is never written.
 */
#include "model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "config.h"
#include "kiln_compile.h"

struct model {
    gguf_file *file;
    kiln_graph *g;
    kiln_program *prog; /* NULL: the reference interpreter runs the graph */
    arch_hparams hp;
    int64_t n_ctx;
    kiln_dtype kv_dtype;
    int all_logits; /* the graph's logits are rows logits_from .. seq-1 */
    int nstates;
    void **states; /* cache.k.L, cache.v.L for each layer, in that order */
    size_t *state_bytes;
    int ubatch;      /* rows per forward pass (model_forward_rows); <= 0: all at once */
    int64_t kv_rows; /* cache rows a forward pass may have written since the last model_reset */
    struct model_range { const void *p; size_t n; } *released; /* the file's parts given back (release_weight) */
    int nreleased, released_cap;
    model_options opt; /* as loaded (model_compile_graph compiles other graphs of the model the same way) */
    char err[512];
};

model_options model_default_options(void) {
    model_options o = {0, KILN_F32, 0, 0, 0, 0.0, 0, 0, 0, 0};
    return o;
}

void model_free(model *m) {
    if (!m) return;
    kiln_program_free(m->prog); /* before its graph */
    kiln_graph_free(m->g);
    gguf_close(m->file);
    free(m->released);
    for (int i = 0; i < m->nstates; i++) free(m->states[i]);
    free(m->states);
    free(m->state_bytes);
    free(m);
}

/* kiln_graph_on_weight_release's hook: the file's pages under a weight that
 * only its copy is read from go back (gguf_release keeps them readable),
 * and the range is remembered for release_again */
static void release_weight(void *mp, const void *data, size_t bytes) {
    model *m = mp;
    gguf_release(m->file, data, bytes);
    for (int i = 0; i < m->nreleased; i++)
        if (m->released[i].p == data && m->released[i].n == bytes) return;
    KILN_GROW(m->released, m->released_cap, m->nreleased + 1);
    m->released[m->nreleased].p = data;
    m->released[m->nreleased++].n = bytes;
}

/* after a prompt's pass: the released parts it read again go back again. A
 * released weight is still read where a kernel reads it rather than its
 * copy: a tied embedding's gathered rows, each fault bringing back the 64
 * KiB around it that the kernel maps from the file's cached pages (4000
 * random token ids: gemma3-270m's whole 170 MiB table, beside its copy) */
#define MODEL_RERELEASE_ROWS 64
static void release_again(model *m) {
    for (int i = 0; i < m->nreleased; i++) gguf_release(m->file, m->released[i].p, m->released[i].n);
}

/* bind every weight input of g (the model's graph or another one built
 * from its file) to its tensor's bytes */
void model_bind_weights(model *m, kiln_graph *g) {
    kiln_graph_on_weight_release(g, release_weight, m);
    for (int64_t i = 0; i < gguf_tensor_count(m->file); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->file, i);
        kiln_status s = kiln_bind_weight(g, t->name, t->data, (size_t)t->bytes);
        if (s == KILN_OK) continue;
        /* tensors the architecture does not use (e.g. rope_freqs in a file
         * whose graph ignores it) are not inputs: skip them */
        kiln_graph_clear_error(g);
    }
}

struct kiln_program *model_compile_graph(const model *m, kiln_graph *g, kiln_status *s) {
    kiln_compile_options co = kiln_compile_defaults();
    co.threads = m->opt.threads;
    co.search_budget = m->opt.search_budget;
    if (m->opt.exact) co.exact = 1;
    if (co.stream < 0) co.stream = 2; /* both attention forms, each run picks (src/runtime/stream_select.c) */
    return kiln_compile(g, &co, s);
}

kiln_status model_load_ex(const char *path, const model_options *opt, model **out, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!out) return KILN_ERR_INVALID;
    *out = NULL;
    model_options o = opt ? *opt : model_default_options();
    if (o.n_ctx < 0 || o.n_ctx_min < 0 || o.n_ctx_min > (INT64_C(1) << 40) || (o.kv_dtype != KILN_F32 && o.kv_dtype != KILN_F16))
        return kiln_fail(err, cap, KILN_ERR_INVALID, "model: n_ctx %lld must be >= 0 and the cache f32 or f16",
                     (long long)o.n_ctx);
    model *m = kiln_xcalloc(1, sizeof *m);
    kiln_status s = gguf_open(path, o.gguf_flags & GGUF_OPEN_READ, &m->file, err, cap);
    if (s) {
        model_free(m);
        return s;
    }
    if ((s = arch_read_hparams(m->file, &m->hp, err, cap))) {
        model_free(m);
        return s;
    }
    m->n_ctx = o.n_ctx ? o.n_ctx : (m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096);
    if (!o.n_ctx && o.n_ctx_min > m->n_ctx) m->n_ctx = o.n_ctx_min;
    kiln_env env;
    kiln_env_read(&env);
    if (o.exact || env.compile.exact) o.kv_dtype = KILN_F32; /* exact evaluation keeps an f32 cache too */
    m->kv_dtype = o.kv_dtype;
    m->opt = o;
    m->all_logits = o.all_logits != 0;
    m->ubatch = o.n_ubatch ? o.n_ubatch : env.host.ubatch;
    m->g = kiln_graph_new();
    if ((s = arch_build(m->g, m->file, &m->hp, m->kv_dtype, m->all_logits, err, cap))) {
        model_free(m);
        return s;
    }
    model_bind_weights(m, m->g);
    /* the cache's length is a symbol of the graph (one program for every
     * context length); its value goes with the states bound below, whose
     * bytes every run checks against it */
    if ((s = kiln_bind_dim(m->g, ARCH_CTX_SYM, m->n_ctx))) {
        kiln_fail(err, cap, s, "model: binding %s: %s", ARCH_CTX_SYM, kiln_graph_error(m->g));
        model_free(m);
        return s;
    }
    m->nstates = (int)(2 * m->hp.n_layer);
    m->states = kiln_xcalloc((size_t)m->nstates, sizeof *m->states);
    m->state_bytes = kiln_xcalloc((size_t)m->nstates, sizeof *m->state_bytes);
    for (int i = 0; i < m->nstates && !s; i++) {
        int64_t hd = i % 2 ? m->hp.head_dim_v : m->hp.head_dim_k;
        size_t bytes = kiln_dtype_bytes(m->kv_dtype, m->n_ctx * m->hp.n_head_kv * hd);
        char name[64];
        snprintf(name, sizeof name, "cache.%c.%d", i % 2 ? 'v' : 'k', i / 2);
        m->states[i] = kiln_xcalloc(bytes ? bytes : 1, 1);
        m->state_bytes[i] = bytes;
        s = kiln_bind_input(m->g, name, m->states[i], bytes);
        if (s) kiln_fail(err, cap, s, "model: binding %s: %s", name, kiln_graph_error(m->g));
    }
    if (!s && o.compiled) {
        m->prog = model_compile_graph(m, m->g, &s);
        if (!m->prog) {
            if (!s) s = KILN_ERR_INVALID;
            kiln_fail(err, cap, s, "model: compiling the %s graph failed: %s", m->hp.name, kiln_graph_error(m->g));
        }
    }
    if (s) {
        model_free(m);
        return s;
    }
    *out = m;
    return KILN_OK;
}

kiln_status model_load(const char *path, model **out, char *err, size_t cap) {
    return model_load_ex(path, NULL, out, err, cap);
}

/* the one place a forward pass is evaluated */
static kiln_status model_eval(model *m) { return m->prog ? kiln_run(m->prog) : kiln_eval_reference(m->g); }

kiln_status model_forward(model *m, const int32_t *tokens, int n, int pos, float *logits_out) {
    return model_forward_rows(m, tokens, n, pos, n - 1, logits_out);
}

/* one pass of the graph over n rows at pos (the caller checked them) */
static kiln_status forward_pass(model *m, const int32_t *tokens, int n, int pos, int from, float *logits_out) {
    if ((int64_t)pos + n > m->kv_rows) m->kv_rows = (int64_t)pos + n;
    kiln_status s = kiln_bind_dim(m->g, "seq", n);
    if (!s) s = kiln_bind_dim(m->g, "pos", pos);
    if (!s) s = kiln_bind_dim(m->g, "logits_from", from);
    if (!s) s = kiln_bind_input(m->g, "tokens", (void *)(uintptr_t)tokens, (size_t)n * sizeof(int32_t));
    if (!s) s = model_eval(m);
    if (!s && n >= MODEL_RERELEASE_ROWS) release_again(m);
    if (!s)
        s = kiln_read_output(m->g, "logits", logits_out, (size_t)(n - from) * (size_t)m->hp.n_vocab * sizeof(float));
    if (s) kiln_fail(m->err, sizeof m->err, s, "model_forward: %s", kiln_graph_error(m->g));
    return s;
}

kiln_status model_forward_rows(model *m, const int32_t *tokens, int n, int pos, int from, float *logits_out) {
    if (!m) return KILN_ERR_INVALID;
    m->err[0] = 0;
    if (!tokens || !logits_out || n < 1 || pos < 0 || (int64_t)pos + n > m->n_ctx)
        return kiln_fail(m->err, sizeof m->err, KILN_ERR_RANGE,
                     "model_forward: %d tokens at position %d do not fit the context of %lld", n, pos,
                     (long long)m->n_ctx);
    if (from < 0 || from >= n || (!m->all_logits && from != n - 1))
        return kiln_fail(m->err, sizeof m->err, KILN_ERR_RANGE,
                     "model_forward: logits from row %d of %d %s", from, n,
                     m->all_logits ? "are out of range" : "need a model loaded with all_logits");
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab)
            return kiln_fail(m->err, sizeof m->err, KILN_ERR_RANGE, "model_forward: token %d (id %d) is outside [0, %lld)",
                         i, tokens[i], (long long)m->hp.n_vocab);
    if (m->ubatch <= 0 || n <= m->ubatch) return forward_pass(m, tokens, n, pos, from, logits_out);
    /* a long prompt in passes of ubatch rows, each at its own position
     * against the cache the earlier ones wrote: the intermediates (an
     * attention's scores: rows x heads x keys) are sized by the pass, not
     * by the prompt. A pass before `from` gives its last row's logits to
     * a scratch row; the others their rows from `from` on, in place. */
    float *scratch = NULL;
    kiln_status s = KILN_OK;
    for (int start = 0; start < n && !s; start += m->ubatch) {
        int c = n - start < m->ubatch ? n - start : m->ubatch;
        if (start + c <= from) {
            if (!scratch) scratch = kiln_xmalloc((size_t)m->hp.n_vocab * sizeof *scratch);
            s = forward_pass(m, tokens + start, c, pos + start, c - 1, scratch);
        } else {
            int f = from > start ? from - start : 0;
            s = forward_pass(m, tokens + start, c, pos + start, f,
                             logits_out + (size_t)(start + f - from) * (size_t)m->hp.n_vocab);
        }
    }
    free(scratch);
    return s;
}

/* only the rows a pass may have written: the rest are still calloc's zeros,
 * and a memset of all n_ctx rows made the whole cache resident (Llama-8B
 * shape, n_ctx 4096, f32: 1.07 GB for a 24-token benchmark) */
void model_reset(model *m) {
    for (int i = 0; i < m->nstates; i++) {
        size_t used = m->kv_rows >= m->n_ctx || m->n_ctx <= 0
                          ? m->state_bytes[i]
                          : m->state_bytes[i] / (size_t)m->n_ctx * (size_t)m->kv_rows;
        memset(m->states[i], 0, used);
    }
    m->kv_rows = 0;
}

struct model_kv {
    int n;
    int owned; /* 0: a view into buffers someone else frees (model_kv_view) */
    void **bufs;
};

model_kv *model_kv_new(const model *m) {
    model_kv *kv = kiln_xcalloc(1, sizeof *kv);
    kv->n = m->nstates;
    kv->owned = 1;
    kv->bufs = kiln_xcalloc((size_t)(kv->n ? kv->n : 1), sizeof *kv->bufs);
    for (int i = 0; i < kv->n; i++) kv->bufs[i] = kiln_xcalloc(m->state_bytes[i] ? m->state_bytes[i] : 1, 1);
    return kv;
}

model_kv *model_kv_view(const model *m, void *const *bufs) {
    model_kv *kv = kiln_xcalloc(1, sizeof *kv);
    kv->n = m->nstates;
    kv->bufs = kiln_xcalloc((size_t)(kv->n ? kv->n : 1), sizeof *kv->bufs);
    for (int i = 0; i < kv->n; i++) kv->bufs[i] = bufs[i];
    return kv;
}

size_t model_state_bytes(const model *m, int i) { return i >= 0 && i < m->nstates ? m->state_bytes[i] : 0; }
int model_n_states(const model *m) { return m->nstates; }
const model_options *model_opts(const model *m) { return &m->opt; }

void model_kv_free(model_kv *kv) {
    if (!kv) return;
    for (int i = 0; i < kv->n && kv->owned; i++) free(kv->bufs[i]);
    free(kv->bufs);
    free(kv);
}

size_t model_kv_bytes(const model *m) {
    size_t b = 0;
    for (int i = 0; i < m->nstates; i++) b += m->state_bytes[i];
    return b;
}

kiln_status model_kv_use(model *m, model_kv *kv) {
    if (kv && kv->n != m->nstates) return kiln_fail(m->err, sizeof m->err, KILN_ERR_INVALID, "model_kv_use: a cache of another model");
    for (int i = 0; i < m->nstates; i++) {
        char name[64];
        snprintf(name, sizeof name, "cache.%c.%d", i % 2 ? 'v' : 'k', i / 2);
        kiln_status s = kiln_bind_input(m->g, name, kv ? kv->bufs[i] : m->states[i], m->state_bytes[i]);
        if (s) return kiln_fail(m->err, sizeof m->err, s, "model_kv_use: binding %s: %s", name, kiln_graph_error(m->g));
    }
    return KILN_OK;
}

const char *model_error(const model *m) { return m ? m->err : "no model"; }
const arch_hparams *model_hparams(const model *m) { return &m->hp; }
int64_t model_n_vocab(const model *m) { return m->hp.n_vocab; }
int64_t model_n_ctx(const model *m) { return m->n_ctx; }
int model_ubatch(const model *m) { return m->ubatch > 0 ? m->ubatch : 0; }
gguf_file *model_gguf(model *m) { return m->file; }
kiln_graph *model_graph(model *m) { return m->g; }
int model_is_compiled(const model *m) { return m->prog != NULL; }
int model_all_logits(const model *m) { return m ? m->all_logits : 0; }

struct kiln_program *model_program(model *m) { return m ? m->prog : NULL; }
