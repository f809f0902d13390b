/* perplexity.h — the measurements of `kiln perplexity`, with the meanings
 * llama.cpp's llama-perplexity gives them, and its KL-divergence base file.
 *
 * Method (llama-perplexity's): the text is tokenized once (BOS first when
 * the model adds one) and cut into n_chunk = min(--chunks, n_tokens / n_ctx)
 * chunks of n_ctx tokens; each chunk is evaluated from an empty cache with
 * its first token replaced by BOS when the model adds BOS; only rows
 * first = n_ctx / 2 .. n_ctx - 2 are scored, row j predicting token j + 1,
 * so a chunk scores n_ctx - 1 - first tokens. A row's negative
 * log-likelihood is max + log(sum exp(l - max)) - l[tok] (the sum in
 * double). PPL = exp(mean nll); its uncertainty is PPL times
 * sqrt((mean(nll^2) - mean(nll)^2) / (count - 1)).
 *
 * The base file (llama-perplexity's --kl-divergence-base layout, all little
 * endian): "_logits_" (8 bytes), int32 n_ctx, int32 n_vocab, int32 n_chunk,
 * n_chunk * n_ctx int32 token ids (the text's tokens, not the BOS
 * substitutions), then for each chunk its n_ctx - 1 - n_ctx/2 scored rows of
 * nv = 2 * ((n_vocab + 1) / 2) + 4 uint16 each: float scale, float
 * min_log_prob (the first four uint16), then per vocabulary entry
 * q = round((l - min_l) / scale) (0 for l <= min_l), where min_l =
 * max(min logit, max logit - 16) and scale = (max - min_l) / 65535; the
 * entry's log-probability is scale * q + min_log_prob. A padding uint16
 * (odd n_vocab) is 0.
 *
 * KL divergence per row (llama-perplexity's): sum over entries whose base
 * log-probability exceeds -16 of p_base * (log p_base - log p), where log p
 * is this run's log-softmax; "same top" when this run's argmax (first
 * maximum) equals the base's; dp = p(tok) - p_base(tok).
 *
 * Invariants: nothing here allocates per row; functions never crash on any
 * file contents (every size is checked against the file's length before
 * anything is read); errors name the file and what differs.
 */
#ifndef KILN_PERPLEXITY_H
#define KILN_PERPLEXITY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln.h"

/* uint16 values per scored row in the base file */
int64_t ppl_row_u16(int64_t n_vocab);
/* scored rows per chunk, and the first of them */
int ppl_first(int n_ctx);
int ppl_scored(int n_ctx);

/* -log softmax(logits)[tok], as llama-perplexity computes it */
double ppl_row_nll(const float *logits, int64_t n_vocab, int32_t tok);
/* the same, also quantising the row's log-probabilities into out (ppl_row_u16 values) */
double ppl_row_quantize(const float *logits, int64_t n_vocab, int32_t tok, uint16_t *out);

/* one row against its base row */
typedef struct ppl_kl_row {
    double nll, nll_base; /* this run's and the base's -log p(tok) */
    double kld;           /* KL(base || this run) */
    double p_diff;        /* p(tok) - p_base(tok) */
    int same_top;         /* argmax equal */
} ppl_kl_row;
void ppl_row_kl(const float *logits, int64_t n_vocab, int32_t tok, const uint16_t *base, ppl_kl_row *out);

/* running sums */
typedef struct ppl_acc {
    double nll, nll2;
    int64_t count;
} ppl_acc;
void ppl_acc_add(ppl_acc *a, double nll);
/* PPL and its uncertainty (0 when it has none yet) */
double ppl_acc_ppl(const ppl_acc *a, double *unc);

/* the KL statistics of a whole run */
typedef struct ppl_kl_stats {
    int64_t count;
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base;
    double sum_kld, sum_kld2, sum_p_diff, sum_p_diff2, sum_p_diff4;
    int64_t n_same_top;
    float *kld;    /* [count] per row, in order (sorted by ppl_kl_finish) */
    float *p_diff; /* [count] */
    int64_t cap;
} ppl_kl_stats;
void ppl_kl_add(ppl_kl_stats *s, const ppl_kl_row *r);
void ppl_kl_free(ppl_kl_stats *s);

typedef struct ppl_kl_summary {
    double ppl, ppl_unc, ppl_base, ppl_base_unc;
    double ln_ratio, ln_ratio_unc, ratio, ratio_unc, diff, diff_unc, cor;
    double kld_mean, kld_unc, kld_max, kld_999, kld_99, kld_95, kld_90, kld_median, kld_10, kld_5, kld_1, kld_01, kld_min;
    double dp_mean, dp_unc, dp_max, dp_999, dp_99, dp_95, dp_90, dp_75, dp_median, dp_25, dp_10, dp_5, dp_1, dp_01,
        dp_min;
    double dp_rms, dp_rms_unc, same_top, same_top_unc;
} ppl_kl_summary;
/* the summary so far; sort (1) orders the per-row values for the
 * percentiles (do it once, at the end: later adds append unsorted) */
void ppl_kl_summarize(ppl_kl_stats *s, int sort, ppl_kl_summary *out);

/* ---- the base file ---- */
typedef struct ppl_base {
    FILE *f;
    char path[512];
    int32_t n_ctx, n_vocab, n_chunk;
    int32_t *tokens; /* n_chunk * n_ctx */
    int32_t chunks_read;
} ppl_base;

/* open and check a base file: magic, sizes, token ids in [0, n_vocab), and
 * a length of exactly the header, the tokens and every chunk's rows */
kiln_status ppl_base_open(const char *path, ppl_base *b, char *err, size_t cap);
/* the next chunk's rows (ppl_scored(n_ctx) * ppl_row_u16(n_vocab) values) */
kiln_status ppl_base_read_chunk(ppl_base *b, uint16_t *rows, char *err, size_t cap);
void ppl_base_close(ppl_base *b);

/* write the header and the tokens; the rows follow with ppl_base_write_rows */
kiln_status ppl_base_create(const char *path, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const int32_t *tokens,
                            FILE **out, char *err, size_t cap);
kiln_status ppl_base_write_rows(FILE *f, const char *path, const uint16_t *rows, size_t n_values, char *err, size_t cap);

#endif
