/* llm.h — what the two files behind include/kiln_llm.h share: the kiln_llm
 * handle (llm.c: loading, tokens, forward, sampling, chat; llm_generate.c:
 * the generation loop and its statistics).
 *
 * Invariants: m->model is set for the handle's whole life, m->tok unless the
 * file's tokenizer failed (llm_need_tok says so); the
 * generation fields are valid only while m->gen_active, or (ids and stats)
 * until the next kiln_llm_start.
 */
#ifndef KILN_LLM_INTERNAL_H
#define KILN_LLM_INTERNAL_H

#include <stdarg.h>

#include "kiln_llm.h"
#include "model.h"
#include "sampler.h"
#include "tokenizer.h"

struct kiln_sampler {
    sampler *s;
};

struct kiln_llm {
    model *model;
    model_batch *batch;     /* kiln_llm_slots' caches and batched program (llm_batch.c), or NULL */
    tokenizer *tok;         /* NULL when the file has no usable tokenizer (why: tok_err) */
    char tok_err[512];
    char err[1024];
    double load_s;
    int warmed;             /* the untimed steps that build the weight copies have run */
    /* the generation in progress (kiln_llm_start .. done) */
    int gen_active;
    kiln_gen_params gp;
    sampler *smp;
    tok_stream *stream;
    float *logits;
    int32_t *prompt_ids, *gen_ids;
    int n_prompt, n_gen, n_decode, gen_cap;
    double prompt_s, gen_s;
    const char *stop;
    char *tail;             /* the flushed stream tail handed out with done */
};

/* printf into m->err; returns s */
kiln_status llm_fail(kiln_llm *m, kiln_status s, const char *fmt, ...);
/* KILN_OK when m has a tokenizer, else the failure with its message */
kiln_status llm_need_tok(kiln_llm *m);
/* seconds on a monotonic clock */
double llm_now(void);
/* the prompt text of a generation: p->chat wraps it in the chat template
 * (malloc'd) */
kiln_status llm_prompt_text(kiln_llm *m, const char *prompt, const kiln_gen_params *p, char **out);
/* end the generation in progress, freeing its sampler and stream */
void llm_gen_end(kiln_llm *m);

#endif
