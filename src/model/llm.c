/* llm.c — include/kiln_llm.h over the model layer: loading (model.h, with
 * the first-run schedule search of autotune.h), the tokenizer
 * (tokenizer_gguf.h), the forward pass and the sampler (sampler.h). The
 * generation loop is llm_generate.c; the chat template llm_chat.c.
 *
 * Invariants: no function here crashes on a NULL handle or pointer; every
 * failure on an open model leaves its message in m->err.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autotune.h"
#include "base.h"
#include "config.h"
#include "kiln_compile.h"
#include "llm.h"
#include "tokenizer_gguf.h"

kiln_status llm_fail(kiln_llm *m, kiln_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    return s;
}

double llm_now(void) { return kiln_now_s(); /* src/base/clock.c */ }

static void set_err(char *err, size_t cap, const char *fmt, const char *a, const char *b) {
    if (err && cap) snprintf(err, cap, fmt, a, b);
}

kiln_llm_params kiln_llm_default_params(void) {
    kiln_llm_params p;
    memset(&p, 0, sizeof p);
    p.kv_dtype = KILN_F32;
    p.tune_s = -1;
    return p;
}

/* the first-run search budget: tune_s, or for < 0 $KILN_TUNE seconds
 * (default 30), as `kiln run` reads it */
static double tune_budget(double tune_s) {
    if (tune_s >= 0) return tune_s;
    kiln_env e;
    kiln_env_read(&e); /* src/base/config.c */
    return e.host.tune_s;
}

typedef struct tune_progress {
    const kiln_llm_params *p;
} tune_progress;

static void tune_step(void *ctx, const kiln_search_status *st) {
    const tune_progress *tp = ctx;
    double f = st->budget_s > 0 ? st->spent_s / st->budget_s : 1;
    tp->p->progress(tp->p->progress_ctx, "tune", f < 0 ? 0 : f > 1 ? 1 : f);
}

/* the first-run search of a compiled model new to this machine */
static kiln_status first_run_search(kiln_llm *m, const kiln_llm_params *p, char *err, size_t cap) {
    double budget = tune_budget(p->tune_s);
    if (budget <= 0 || p->exact || !model_is_compiled(m->model) || !model_needs_search(m->model)) {
        if (model_is_compiled(m->model)) model_compile_forms(m->model);
        return KILN_OK;
    }
    model_tune_options o = model_tune_defaults();
    o.budget_s = budget;
    tune_progress tp = {p};
    if (p->progress) {
        p->progress(p->progress_ctx, "tune", 0);
        kiln_program_search_progress(model_program(m->model), tune_step, &tp);
    }
    kiln_status s = model_autotune(m->model, &o, NULL, err, cap);
    kiln_program_search_progress(model_program(m->model), NULL, NULL);
    return s;
}

kiln_status kiln_llm_load(const char *path, const kiln_llm_params *pin, kiln_llm **out, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!out || !path) {
        set_err(err, errlen, "kiln_llm_load: %s%s", !path ? "no path" : "no place for the result", "");
        return KILN_ERR_INVALID;
    }
    *out = NULL;
    kiln_llm_params p = pin ? *pin : kiln_llm_default_params();
    if (p.threads < 0 || p.n_ctx < 0 || isnan(p.tune_s)) {
        set_err(err, errlen, "kiln_llm_load: %s%s", "threads and n_ctx must be >= 0 and tune_s a number", "");
        return KILN_ERR_INVALID;
    }
    double t0 = llm_now();
    if (p.progress) p.progress(p.progress_ctx, "load", 0);
    model_options o = model_default_options();
    o.n_ctx = p.n_ctx;
    o.kv_dtype = p.kv_dtype;
    o.gguf_flags = p.use_mmap ? 0u : (unsigned)GGUF_OPEN_READ;
    o.compiled = !p.interpreter;
    o.threads = p.threads;
    o.exact = p.exact;
    kiln_llm *m = kiln_xcalloc(1, sizeof *m);
    char e[1024] = "";
    kiln_status s = model_load_ex(path, &o, &m->model, e, sizeof e);
    /* a model without a usable tokenizer still loads (kiln_llm_decode takes
     * ids); what needs the tokenizer fails with its message */
    if (!s && tok_from_gguf(model_gguf(m->model), &m->tok, m->tok_err, sizeof m->tok_err) == KILN_OK &&
        tok_n_vocab(m->tok) > model_n_vocab(m->model)) {
        snprintf(m->tok_err, sizeof m->tok_err, "the tokenizer has %d tokens but the model only %lld embeddings",
                 (int)tok_n_vocab(m->tok), (long long)model_n_vocab(m->model));
        tok_free(m->tok);
        m->tok = NULL;
    }
    if (p.progress && !s) p.progress(p.progress_ctx, "load", 1);
    if (!s) s = first_run_search(m, &p, e, sizeof e);
    if (s) {
        /* the reader's messages already name the file; others get it prefixed */
        if (e[0] && strstr(e, path)) set_err(err, errlen, "%s%s", e, "");
        else if (err && errlen) snprintf(err, errlen, "%s: %s", path, e[0] ? e : kiln_status_name(s));
        kiln_llm_free(m);
        return s;
    }
    m->load_s = llm_now() - t0;
    m->stop = "";
    if (p.progress) p.progress(p.progress_ctx, "ready", 1);
    *out = m;
    return KILN_OK;
}

void kiln_llm_free(kiln_llm *m) {
    if (!m) return;
    llm_gen_end(m);
    free(m->prompt_ids);
    free(m->gen_ids);
    free(m->logits);
    free(m->tail);
    tok_free(m->tok);
    if (m->batch) model_kv_use(m->model, NULL); /* before the slots' buffers go */
    model_batch_free(m->batch);
    model_free(m->model);
    free(m);
}

const char *kiln_llm_error(const kiln_llm *m) { return m ? m->err : "kiln_llm_error: no model"; }
int64_t kiln_llm_n_vocab(const kiln_llm *m) { return m ? model_n_vocab(m->model) : 0; }
int64_t kiln_llm_n_ctx(const kiln_llm *m) { return m ? model_n_ctx(m->model) : 0; }
size_t kiln_llm_kv_bytes(const kiln_llm *m) { return m ? model_kv_bytes(m->model) : 0; }
int kiln_llm_is_compiled(const kiln_llm *m) { return m ? model_is_compiled(m->model) : 0; }
const char *kiln_llm_arch(const kiln_llm *m) { return m ? model_hparams(m->model)->name : ""; }
int32_t kiln_llm_bos(const kiln_llm *m) { return m && m->tok ? tok_bos(m->tok) : -1; }
int32_t kiln_llm_eos(const kiln_llm *m) { return m && m->tok ? tok_eos(m->tok) : -1; }
int kiln_llm_is_eog(const kiln_llm *m, int32_t id) { return m && m->tok ? tok_is_eog(m->tok, id) : 0; }

kiln_status llm_need_tok(kiln_llm *m) {
    return m->tok ? KILN_OK : llm_fail(m, KILN_ERR_FORMAT, "the model has no usable tokenizer: %s", m->tok_err);
}

int kiln_llm_tokenize(kiln_llm *m, const char *text, size_t len, int add_special, int parse_special, int32_t *out,
                      int cap) {
    if (!m || (!text && len) || cap < 0 || (!out && cap) || llm_need_tok(m)) return -1;
    return tok_encode(m->tok, text ? text : "", len, add_special, parse_special, out, cap);
}

long kiln_llm_detokenize(kiln_llm *m, const int32_t *ids, int n, int special, char *buf, size_t cap) {
    if (!m || n < 0 || (!ids && n) || (!buf && cap) || llm_need_tok(m)) return -1;
    int bad = -1;
    long r = tok_decode(m->tok, ids, n, special, buf, cap, &bad);
    if (r < 0) llm_fail(m, KILN_ERR_RANGE, "kiln_llm_detokenize: id %d (at %d) is outside the vocabulary",
                        bad >= 0 && bad < n ? ids[bad] : -1, bad);
    return r;
}

int kiln_llm_token_piece(kiln_llm *m, int32_t id, int special, char *buf, int cap) {
    if (!m || cap < 0 || (!buf && cap) || llm_need_tok(m)) return -1;
    return tok_token_to_piece(m->tok, id, special, buf, cap);
}

kiln_status kiln_llm_tune(kiln_llm *m, double budget_s, kiln_search_status *out) {
    if (!m) return KILN_ERR_INVALID;
    if (out) memset(out, 0, sizeof *out);
    if (!model_is_compiled(m->model))
        return llm_fail(m, KILN_ERR_INVALID, "kiln_llm_tune: the model runs on the interpreter: nothing to tune");
    if (!(budget_s > 0) || budget_s > 1e6)
        return llm_fail(m, KILN_ERR_INVALID, "kiln_llm_tune: budget %g s: want 0 < budget <= 1e6", budget_s);
    llm_gen_end(m);
    model_tune_options o = model_tune_defaults();
    o.budget_s = budget_s;
    m->warmed = 0; /* a recompiled program builds its weight copies anew */
    kiln_status s = model_autotune(m->model, &o, out, m->err, sizeof m->err);
    return s;
}

kiln_status kiln_llm_decode(kiln_llm *m, const int32_t *tokens, int n, int pos, float *logits) {
    if (!m) return KILN_ERR_INVALID;
    if (m->gen_active) llm_gen_end(m); /* the cache no longer holds the generation's tokens */
    kiln_status s = model_forward(m->model, tokens, n, pos, logits);
    if (s) llm_fail(m, s, "%s", model_error(m->model));
    return s;
}

void kiln_llm_reset(kiln_llm *m) {
    if (!m) return;
    llm_gen_end(m);
    model_reset(m->model);
}

/* ---- sampling ------------------------------------------------------------ */

kiln_gen_params kiln_gen_default_params(void) {
    kiln_gen_params p;
    memset(&p, 0, sizeof p);
    sampler_params sp;
    sampler_params_init(&sp);
    p.max_tokens = 64;
    p.temperature = sp.temperature;
    p.top_k = sp.top_k;
    p.top_p = sp.top_p;
    p.min_p = sp.min_p;
    p.repeat_penalty = sp.repeat_penalty;
    p.repeat_last_n = sp.repeat_last_n;
    p.seed = sp.seed;
    return p;
}

kiln_sampler *kiln_sampler_new(const kiln_gen_params *p, int32_t n_vocab, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!p) {
        set_err(err, errlen, "kiln_sampler_new: %s%s", "no parameters", "");
        return NULL;
    }
    sampler_params sp;
    sampler_params_init(&sp);
    sp.temperature = p->temperature;
    sp.top_k = p->top_k;
    sp.top_p = p->top_p;
    sp.min_p = p->min_p;
    sp.repeat_penalty = p->repeat_penalty;
    sp.repeat_last_n = p->repeat_last_n;
    sp.seed = p->seed;
    char e[512] = "";
    sampler *s = NULL;
    if (sampler_new(&sp, n_vocab, &s, e, sizeof e) != KILN_OK) {
        set_err(err, errlen, "%s%s", e, "");
        return NULL;
    }
    kiln_sampler *k = kiln_xcalloc(1, sizeof *k);
    k->s = s;
    return k;
}

void kiln_sampler_free(kiln_sampler *s) {
    if (!s) return;
    sampler_free(s->s);
    free(s);
}

int32_t kiln_sampler_sample(kiln_sampler *s, const float *logits) { return s ? sampler_sample(s->s, logits) : -1; }

void kiln_sampler_accept(kiln_sampler *s, int32_t id) {
    if (s) sampler_accept(s->s, id);
}
