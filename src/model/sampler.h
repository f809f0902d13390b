/* sampler.h — choosing the next token from a vector of logits.
 *
 * Order of application (each step optional):
 *   1. repetition penalty over the last repeat_last_n accepted tokens
 *      (llama.cpp style: each distinct such token's logit is divided by the
 *      penalty when positive, multiplied when negative)
 *   2. temperature <= 0: greedy, the argmax (lowest id on ties); stop here
 *   3. top-k: keep the k largest logits (ties: lower id first)
 *   4. temperature: logits / T
 *   5. softmax over what is kept
 *   6. top-p: keep the smallest prefix, in descending probability, whose mass
 *      is >= top_p
 *   7. min-p: keep tokens whose probability is >= min_p * the largest one
 *   8. draw from the renormalised rest with the sampler's own RNG
 * Temperature comes before top-p and min-p, so those see the distribution that
 * is actually sampled (the Hugging Face order); top-k commutes with it.
 *
 * Determinism: the RNG is splitmix64 seeded from `seed`; the same seed, logits
 * and accepted tokens give the same choices on every run and machine (the
 * arithmetic is plain IEEE double, no threads).
 */
#ifndef KILN_SAMPLER_H
#define KILN_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

typedef struct sampler_params {
    float temperature;     /* <= 0: greedy */
    int32_t top_k;         /* <= 0: off */
    float top_p;           /* >= 1: off */
    float min_p;           /* <= 0: off */
    float repeat_penalty;  /* 1: off */
    int32_t repeat_last_n; /* how many of the latest accepted tokens the penalty looks at */
    uint64_t seed;
} sampler_params;

typedef struct sampler sampler;

/* defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, no penalty
 * (repeat_last_n 64), seed 42 */
void sampler_params_init(sampler_params *p);

/* checks the parameters (finite, top_p and min_p in [0,1], penalty > 0, ...) */
kiln_status sampler_new(const sampler_params *p, int32_t n_vocab, sampler **out, char *err, size_t cap);
void sampler_free(sampler *s);

/* Choose a token from logits[n_vocab] (not modified). NaN logits count as -inf;
 * if every logit is -inf the result is 0. Returns -1 only for a NULL argument. */
int32_t sampler_sample(sampler *s, const float *logits);
/* Record a token for the repetition penalty (prompt tokens and each chosen
 * one); ids outside the vocabulary are ignored. */
void sampler_accept(sampler *s, int32_t id);
/* forget the accepted tokens and restart the RNG from seed */
void sampler_reset(sampler *s, uint64_t seed);

#endif
