/* autotune.h — a model's schedule search within a budget, spent where the
 * model's time goes (autotune.c). */
#ifndef KILN_AUTOTUNE_H
#define KILN_AUTOTUNE_H

#include <stddef.h>

#include "kiln_compile.h"
#include "model.h"

typedef struct model_tune_options {
    double budget_s;     /* wall seconds for the search and the recompile (default 30) */
    int prompt;          /* tokens of the prefill that is profiled and searched (default 256) */
    int workload_prompt; /* the workload the budget is split by: a prompt of this many tokens ... */
    int workload_gen;    /* ... and this many generated (defaults 512 and 128, llama-bench's) */
    double min_share;    /* kernel groups under this share of a decode step or a prefill keep their schedule (0.02) */
    void (*phase)(void *ctx, const char *what); /* called at each step (NULL: silent) */
    void *ctx;
} model_tune_options;

model_tune_options model_tune_defaults(void);

/* search m's schedules within o->budget_s (see autotune.c); the records go to
 * the tuning DB. Progress of each kernel search: kiln_program_search_progress
 * on model_program(m). out (may be NULL) gets the search's summary. */
kiln_status model_autotune(model *m, const model_tune_options *o, kiln_search_status *out, char *err, size_t cap);

/* 1 when m is compiled and most of its contraction slots have no schedule
 * from the tuning DB: a model new to this machine (or thread count) */
int model_needs_search(model *m);
/* the streaming attention form (the program's alternative, compiled at its
 * first need) compiled now, before any timed run, where the program has
 * one: callers that run the model without searching it first, so the
 * compile is the load's time and not the first prompt's (a search compiles
 * it at its end, with the winners) */
void model_compile_forms(model *m);
/* the streaming-bf16 form's check in the form rounds: KL(softmax(a) ||
 * softmax(b)) of two rows of n logits (a non-finite logit: +inf), and
 * whether a KL lets the form win (at most 0.02) */
double model_logits_kl(const float *a, const float *b, int n);
int model_bf16_form_ok(double kl);

#endif
