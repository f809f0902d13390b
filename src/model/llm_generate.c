/* llm_generate.c — the generation loop of include/kiln_llm.h, the same
 * steps as `kiln run` (tools/kiln.c): the prompt tokenized with BOS (special
 * tokens parsed only in chat-templated text), untimed warm-up steps on the
 * first generation of a compiled model (they build the weight copies), a
 * timed prefill, then per piece: sample, stop at an end-of-generation token,
 * accept, stream the text, and run the decode step.
 *
 * Invariants: greedy generation gives the ids `kiln run --temp 0` gives for
 * the same model, prompt and options; the stream hands out only complete
 * UTF-8; a failed step ends the generation with its message in m->err.
 */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "llm.h"

void llm_gen_end(kiln_llm *m) {
    if (!m->gen_active) return;
    m->gen_active = 0;
    sampler_free(m->smp);
    m->smp = NULL;
    tok_stream_free(m->stream);
    m->stream = NULL;
}

/* the untimed steps of `kiln run`: a decode step, and a prefill of up to 8
 * prompt tokens; every cache row they write is written again before it is read */
static void warm_up(kiln_llm *m, int max_tokens) {
    if (m->warmed || !model_is_compiled(m->model)) return;
    m->warmed = 1;
    kiln_status s = max_tokens > 1 ? model_forward(m->model, m->prompt_ids, 1, 0, m->logits) : KILN_OK;
    if (!s && m->n_prompt > 4) model_forward(m->model, m->prompt_ids, m->n_prompt < 8 ? m->n_prompt : 8, 0, m->logits);
}

static kiln_status tokenize_prompt(kiln_llm *m, const char *prompt, const kiln_gen_params *p) {
    char *text = NULL;
    kiln_status s = llm_prompt_text(m, prompt, p, &text);
    if (s) return s;
    size_t len = strlen(text);
    int n = tok_encode(m->tok, text, len, 1, p->chat, NULL, 0);
    if (n > 0) {
        free(m->prompt_ids);
        m->prompt_ids = kiln_xmalloc((size_t)n * sizeof *m->prompt_ids);
        tok_encode(m->tok, text, len, 1, p->chat, m->prompt_ids, n);
    }
    free(text);
    /* a template that writes {{ bos_token }} and a tokenizer that adds BOS: one BOS */
    int32_t bos = tok_bos(m->tok);
    if (n >= 2 && bos >= 0 && m->prompt_ids[0] == bos && m->prompt_ids[1] == bos)
        memmove(m->prompt_ids, m->prompt_ids + 1, (size_t)--n * sizeof *m->prompt_ids);
    if (n <= 0)
        return llm_fail(m, KILN_ERR_INVALID, "the prompt is %s", n < 0 ? "too long" : "empty (and the model adds no BOS)");
    if (n >= model_n_ctx(m->model))
        return llm_fail(m, KILN_ERR_RANGE,
                        "the prompt has %d tokens, which leaves no room to generate in a context of %lld", n,
                        (long long)model_n_ctx(m->model));
    m->n_prompt = n;
    return KILN_OK;
}

kiln_status kiln_llm_start(kiln_llm *m, const char *prompt, const kiln_gen_params *p) {
    if (!m) return KILN_ERR_INVALID;
    llm_gen_end(m);
    m->err[0] = 0;
    m->n_prompt = m->n_gen = m->n_decode = 0;
    m->prompt_s = m->gen_s = 0;
    m->stop = "";
    if (!prompt || !p) return llm_fail(m, KILN_ERR_INVALID, "kiln_llm_start: %s", !prompt ? "no prompt" : "no parameters");
    if (llm_need_tok(m)) return KILN_ERR_FORMAT;
    if (p->max_tokens < 0) return llm_fail(m, KILN_ERR_INVALID, "kiln_llm_start: max_tokens %d < 0", p->max_tokens);
    char e[512] = "";
    kiln_sampler *ks = kiln_sampler_new(p, (int32_t)model_n_vocab(m->model), e, sizeof e);
    if (!ks) return llm_fail(m, KILN_ERR_INVALID, "%s", e);
    kiln_status s = tokenize_prompt(m, prompt, p);
    if (s) {
        kiln_sampler_free(ks);
        return s;
    }
    m->smp = ks->s;
    free(ks);
    m->gp = *p;
    m->gp.chat_template = NULL; /* the caller's string is not kept */
    if (!m->logits) m->logits = kiln_xmalloc((size_t)model_n_vocab(m->model) * sizeof *m->logits);
    if (m->gen_cap < p->max_tokens) {
        m->gen_ids = kiln_xrealloc(m->gen_ids, (size_t)p->max_tokens * sizeof *m->gen_ids);
        m->gen_cap = p->max_tokens;
    }
    model_reset(m->model);
    warm_up(m, p->max_tokens);
    for (int i = 0; i < m->n_prompt; i++) sampler_accept(m->smp, m->prompt_ids[i]);
    double t0 = llm_now();
    s = model_forward(m->model, m->prompt_ids, m->n_prompt, 0, m->logits);
    m->prompt_s = llm_now() - t0;
    if (s) {
        sampler_free(m->smp);
        m->smp = NULL;
        return llm_fail(m, s, "%s", model_error(m->model));
    }
    m->stream = tok_stream_new(m->tok, 0, 0);
    m->gen_active = 1;
    return KILN_OK;
}

static kiln_status finish(kiln_llm *m, const char *stop, kiln_piece *out) {
    const char *t;
    size_t n = 0;
    tok_stream_flush(m->stream, &t, &n);
    free(m->tail);
    m->tail = kiln_xmalloc(n + 1);
    memcpy(m->tail, t, n);
    m->tail[n] = 0;
    m->stop = stop;
    llm_gen_end(m);
    out->id = -1;
    out->text = m->tail;
    out->len = n;
    out->done = 1;
    return KILN_OK;
}

kiln_status kiln_llm_next(kiln_llm *m, kiln_piece *out) {
    if (!m || !out) return KILN_ERR_INVALID;
    memset(out, 0, sizeof *out);
    out->id = -1;
    out->text = "";
    if (!m->gen_active) return llm_fail(m, KILN_ERR_INVALID, "kiln_llm_next: no generation in progress (kiln_llm_start)");
    double t0 = llm_now();
    if (m->n_gen >= m->gp.max_tokens) {
        kiln_status s = finish(m, "length", out);
        m->gen_s += llm_now() - t0;
        return s;
    }
    /* the decode step of the previous piece */
    if (m->n_gen > 0) {
        if (m->n_decode >= model_n_ctx(m->model) - m->n_prompt) {
            kiln_status s = finish(m, "context", out);
            m->gen_s += llm_now() - t0;
            return s;
        }
        int32_t prev = m->gen_ids[m->n_gen - 1];
        kiln_status s = model_forward(m->model, &prev, 1, m->n_prompt + m->n_decode, m->logits);
        m->n_decode++;
        if (s) {
            llm_gen_end(m);
            m->gen_s += llm_now() - t0;
            return llm_fail(m, s, "%s", model_error(m->model));
        }
    }
    int32_t id = sampler_sample(m->smp, m->logits);
    if (id < 0 || id >= tok_n_vocab(m->tok)) {
        llm_gen_end(m);
        return llm_fail(m, KILN_ERR_RANGE, "the model chose token %d, which the tokenizer does not have", id);
    }
    if (tok_is_eog(m->tok, id)) {
        kiln_status s = finish(m, "eos", out);
        m->gen_s += llm_now() - t0;
        return s;
    }
    sampler_accept(m->smp, id);
    m->gen_ids[m->n_gen++] = id;
    tok_stream_push(m->stream, id, &out->text, &out->len);
    out->id = id;
    m->gen_s += llm_now() - t0;
    return KILN_OK;
}

kiln_status kiln_llm_generate(kiln_llm *m, const char *prompt, const kiln_gen_params *p, char **text) {
    if (!m) return KILN_ERR_INVALID;
    if (!text) return llm_fail(m, KILN_ERR_INVALID, "kiln_llm_generate: no place for the text");
    *text = NULL;
    kiln_status s = kiln_llm_start(m, prompt, p);
    size_t len = 0, cap = 64;
    char *buf = kiln_xmalloc(cap);
    kiln_piece pc = {0, "", 0, 0};
    while (!s && !pc.done) {
        s = kiln_llm_next(m, &pc);
        if (s) break;
        if (len + pc.len + 1 > cap) buf = kiln_xrealloc(buf, cap = 2 * (len + pc.len + 1));
        memcpy(buf + len, pc.text, pc.len);
        len += pc.len;
    }
    if (s) {
        free(buf);
        return s;
    }
    buf[len] = 0;
    *text = buf;
    return KILN_OK;
}

kiln_status kiln_llm_stats_get(const kiln_llm *m, kiln_llm_stats *out) {
    if (!m || !out) return KILN_ERR_INVALID;
    memset(out, 0, sizeof *out);
    out->load_s = m->load_s;
    out->prompt_tokens = m->n_prompt;
    out->prompt_s = m->prompt_s;
    out->generated_tokens = m->n_gen;
    out->decode_steps = m->n_decode;
    out->gen_s = m->gen_s;
    out->prompt_tps = m->prompt_s > 0 ? m->n_prompt / m->prompt_s : 0;
    out->gen_tps = m->n_decode > 0 && m->gen_s > 0 ? m->n_decode / m->gen_s : 0;
    out->stop = m->stop ? m->stop : "";
    return KILN_OK;
}

const int32_t *kiln_llm_prompt_ids(const kiln_llm *m) { return m ? m->prompt_ids : NULL; }
const int32_t *kiln_llm_generated_ids(const kiln_llm *m) { return m ? m->gen_ids : NULL; }
