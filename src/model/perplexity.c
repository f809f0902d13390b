/* perplexity.c — per-row negative log-likelihoods, KL divergence against a
 * base run, their statistics, and llama-perplexity's base file (the layout
 * and the meaning of every number are in perplexity.h).
 *
 * Invariants: the arithmetic follows llama-perplexity's in precision (float
 * logits and their max, the sum of exponentials in double, the base file's
 * scale and offsets in float) so that a base file written here equals the
 * one llama-perplexity writes for the same logits, and a KL read against
 * either file means the same thing. Reading checks the whole file's length
 * against its header before any row is used, and every row's two floats
 * when it is read; nothing is trusted that could make an index go out of
 * range.
 */
#include "perplexity.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base.h"

int64_t ppl_row_u16(int64_t n_vocab) { return 2 * ((n_vocab + 1) / 2) + 4; }
int ppl_first(int n_ctx) { return n_ctx / 2; }
int ppl_scored(int n_ctx) { return n_ctx - 1 - n_ctx / 2; }

static float row_max(const float *l, int64_t n, int64_t *imax) {
    float mx = l[0];
    int64_t im = 0;
    for (int64_t i = 1; i < n; i++)
        if (l[i] > mx) {
            mx = l[i];
            im = i;
        }
    if (imax) *imax = im;
    return mx;
}

static double row_sum_exp(const float *l, int64_t n, float mx) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)expf(l[i] - mx);
    return s;
}

double ppl_row_nll(const float *logits, int64_t n_vocab, int32_t tok) {
    float mx = row_max(logits, n_vocab, NULL);
    double s = row_sum_exp(logits, n_vocab, mx);
    return -((double)(logits[tok] - mx) - log(s));
}

double ppl_row_quantize(const float *logits, int64_t n_vocab, int32_t tok, uint16_t *out) {
    float mx = logits[0], mn = logits[0];
    for (int64_t i = 1; i < n_vocab; i++) {
        if (logits[i] > mx) mx = logits[i];
        if (logits[i] < mn) mn = logits[i];
    }
    if (mn < mx - 16) mn = mx - 16;
    double s = row_sum_exp(logits, n_vocab, mx);
    const float log_sum_exp = (float)log(s);
    const float min_log_prob = mn - mx - log_sum_exp;
    const float scale = (mx - mn) / 65535.f;
    memcpy(out, &scale, sizeof scale);
    memcpy(out + 2, &min_log_prob, sizeof min_log_prob);
    uint16_t *q = out + 4;
    int64_t nq = ppl_row_u16(n_vocab) - 4;
    memset(q, 0, (size_t)nq * sizeof *q);
    if (scale > 0) {
        const float inv = 1 / scale;
        for (int64_t i = 0; i < n_vocab; i++) {
            if (!(logits[i] > mn)) continue;
            float v = rintf(inv * (logits[i] - mn)); /* nearest, ties to even */
            q[i] = (uint16_t)(v > 65535.f ? 65535.f : v);
        }
    }
    return (double)(mx + log_sum_exp - logits[tok]);
}

void ppl_row_kl(const float *logits, int64_t n_vocab, int32_t tok, const uint16_t *base, ppl_kl_row *out) {
    int64_t imax = 0;
    float mx = row_max(logits, n_vocab, &imax);
    double s = row_sum_exp(logits, n_vocab, mx);
    const float log_sum_exp = (float)log(s);
    float scale, min_log_prob;
    memcpy(&scale, base, sizeof scale);
    memcpy(&min_log_prob, base + 2, sizeof min_log_prob);
    const uint16_t *q = base + 4;
    const float nll = mx + log_sum_exp - logits[tok];
    const float nll_base = -(scale * (float)q[tok] + min_log_prob);
    const float lse = mx + log_sum_exp; /* log p_i = logits[i] - lse */
    double kld = 0;
    int64_t imax_base = 0;
    float best = 0;
    for (int64_t i = 0; i < n_vocab; i++) {
        const float lb = scale * (float)q[i] + min_log_prob;
        if (i == 0 || lb > best) {
            best = lb;
            imax_base = i;
        }
        if (lb > -16.f) kld += (double)(expf(lb) * (lb - logits[i] + lse));
    }
    out->nll = nll;
    out->nll_base = nll_base;
    out->kld = kld;
    out->p_diff = (double)(expf(-nll) - expf(-nll_base));
    out->same_top = imax == imax_base;
}

void ppl_acc_add(ppl_acc *a, double nll) {
    a->nll += nll;
    a->nll2 += nll * nll;
    a->count++;
}

double ppl_acc_ppl(const ppl_acc *a, double *unc) {
    if (unc) *unc = 0;
    if (a->count < 1) return 0;
    double n = (double)a->count, mean = a->nll / n, ppl = exp(mean);
    double var = a->nll2 / n - mean * mean;
    if (unc && var > 0 && a->count > 1) *unc = sqrt(var / (n - 1)) * ppl;
    return ppl;
}

void ppl_kl_add(ppl_kl_stats *s, const ppl_kl_row *r) {
    if (s->count == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->kld = kiln_xrealloc(s->kld, (size_t)s->cap * sizeof *s->kld);
        s->p_diff = kiln_xrealloc(s->p_diff, (size_t)s->cap * sizeof *s->p_diff);
    }
    s->kld[s->count] = (float)r->kld;
    s->p_diff[s->count] = (float)r->p_diff;
    s->count++;
    s->sum_nll += r->nll;
    s->sum_nll2 += r->nll * r->nll;
    s->sum_nll_base += r->nll_base;
    s->sum_nll_base2 += r->nll_base * r->nll_base;
    s->sum_nll_nll_base += r->nll * r->nll_base;
    s->sum_kld += r->kld;
    s->sum_kld2 += r->kld * r->kld;
    s->sum_p_diff += r->p_diff;
    double d2 = r->p_diff * r->p_diff;
    s->sum_p_diff2 += d2;
    s->sum_p_diff4 += d2 * d2;
    s->n_same_top += r->same_top != 0;
}

void ppl_kl_free(ppl_kl_stats *s) {
    free(s->kld);
    free(s->p_diff);
    memset(s, 0, sizeof *s);
}

/* llama-perplexity's mean and its uncertainty (none for 10 values or fewer) */
static double mean_unc(double sum, double sum2, int64_t count, double *unc) {
    *unc = 0;
    if (count < 1) return 0;
    double n = (double)count, f = sum / n, df = sum2 / n - f * f;
    *unc = df > 0 && count > 10 ? sqrt(df / (n - 1)) : 0;
    return f;
}

static double covariance(double a, double b, double ab, int64_t count) {
    if (count < 10) return 0;
    double n = (double)count;
    return (ab / n - (a / n) * (b / n)) / (n - 1);
}

static int cmp_float(const void *pa, const void *pb) {
    float a = *(const float *)pa, b = *(const float *)pb;
    return (a > b) - (a < b);
}

static double percentile(const float *v, int64_t n, float fraction) {
    if (n < 1) return 0;
    if (fraction <= 0) return v[0];
    if (fraction >= 1) return v[n - 1];
    float p = fraction * (float)(n - 1);
    int64_t ip = (int64_t)p;
    p -= (float)ip;
    int64_t ip1 = ip + 1 < n ? ip + 1 : n - 1;
    return (double)((1 - p) * v[ip] + p * v[ip1]);
}

static double median(const float *v, int64_t n) {
    if (n < 1) return 0;
    return n % 2 == 0 ? (double)(0.5f * (v[n / 2] + v[n / 2 - 1])) : (double)v[n / 2];
}

void ppl_kl_summarize(ppl_kl_stats *s, int sort, ppl_kl_summary *o) {
    memset(o, 0, sizeof *o);
    int64_t n = s->count;
    if (n < 1) return;
    double lu, lbu;
    double l = mean_unc(s->sum_nll, s->sum_nll2, n, &lu);
    double lb = mean_unc(s->sum_nll_base, s->sum_nll_base2, n, &lbu);
    o->ppl = exp(l);
    o->ppl_unc = o->ppl * lu;
    o->ppl_base = exp(lb);
    o->ppl_base_unc = o->ppl_base * lbu;
    double cov = covariance(s->sum_nll, s->sum_nll_base, s->sum_nll_nll_base, n);
    o->cor = lu > 0 && lbu > 0 ? cov / (lu * lbu) : 0;
    o->ln_ratio = l - lb;
    double r2 = lu * lu + lbu * lbu - 2 * cov;
    o->ln_ratio_unc = r2 > 0 ? sqrt(r2) : 0;
    o->ratio = exp(o->ln_ratio);
    o->ratio_unc = o->ratio * o->ln_ratio_unc;
    o->diff = o->ppl - o->ppl_base;
    double d2 = o->ppl_unc * o->ppl_unc + o->ppl_base_unc * o->ppl_base_unc - 2 * o->ppl * o->ppl_base * cov;
    o->diff_unc = d2 > 0 ? sqrt(d2) : 0;
    o->kld_mean = mean_unc(s->sum_kld, s->sum_kld2, n, &o->kld_unc);
    o->dp_mean = mean_unc(s->sum_p_diff, s->sum_p_diff2, n, &o->dp_unc);
    double mse_unc, mse = mean_unc(s->sum_p_diff2, s->sum_p_diff4, n, &mse_unc);
    o->dp_rms = sqrt(mse);
    o->dp_rms_unc = o->dp_rms > 0 ? 0.5 / o->dp_rms * mse_unc : 0;
    o->same_top = (double)s->n_same_top / (double)n;
    o->same_top_unc = n > 1 ? sqrt(o->same_top * (1 - o->same_top) / (double)(n - 1)) : 0;
    if (sort) {
        qsort(s->kld, (size_t)n, sizeof *s->kld, cmp_float);
        qsort(s->p_diff, (size_t)n, sizeof *s->p_diff, cmp_float);
    }
    const float *k = s->kld, *p = s->p_diff;
    o->kld_max = k[n - 1];
    o->kld_999 = percentile(k, n, 0.999f);
    o->kld_99 = percentile(k, n, 0.990f);
    o->kld_95 = percentile(k, n, 0.950f);
    o->kld_90 = percentile(k, n, 0.900f);
    o->kld_median = median(k, n);
    o->kld_10 = percentile(k, n, 0.100f);
    o->kld_5 = percentile(k, n, 0.050f);
    o->kld_1 = percentile(k, n, 0.010f);
    o->kld_01 = percentile(k, n, 0.001f);
    o->kld_min = k[0];
    o->dp_max = p[n - 1];
    o->dp_999 = percentile(p, n, 0.999f);
    o->dp_99 = percentile(p, n, 0.990f);
    o->dp_95 = percentile(p, n, 0.950f);
    o->dp_90 = percentile(p, n, 0.900f);
    o->dp_75 = percentile(p, n, 0.750f);
    o->dp_median = median(p, n);
    o->dp_25 = percentile(p, n, 0.250f);
    o->dp_10 = percentile(p, n, 0.100f);
    o->dp_5 = percentile(p, n, 0.050f);
    o->dp_1 = percentile(p, n, 0.010f);
    o->dp_01 = percentile(p, n, 0.001f);
    o->dp_min = p[0];
}

/* ---- the base file ---- */

static int32_t rd_i32(const unsigned char *b) {
    uint32_t v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    int32_t r;
    memcpy(&r, &v, sizeof r);
    return r;
}

void ppl_base_close(ppl_base *b) {
    if (b->f) fclose(b->f);
    free(b->tokens);
    memset(b, 0, sizeof *b);
}

kiln_status ppl_base_open(const char *path, ppl_base *b, char *err, size_t cap) {
    memset(b, 0, sizeof *b);
    snprintf(b->path, sizeof b->path, "%s", path);
    b->f = fopen(path, "rb");
    if (!b->f) return kiln_fail(err, cap, KILN_ERR_IO, "%s: cannot open the base file", path);
    struct stat st;
    if (fstat(fileno(b->f), &st) != 0 || !S_ISREG(st.st_mode)) {
        ppl_base_close(b);
        return kiln_fail(err, cap, KILN_ERR_IO, "%s: not a regular file", path);
    }
    int64_t size = (int64_t)st.st_size;
    unsigned char h[20];
    size_t got = fread(h, 1, sizeof h, b->f);
    if (got < 8 || memcmp(h, "_logits_", 8) != 0) {
        ppl_base_close(b);
        return kiln_fail(err, cap, KILN_ERR_FORMAT,
                     "%s: not a log-probability base file (it does not start with the magic '_logits_')", path);
    }
    if (got < sizeof h) {
        ppl_base_close(b);
        return kiln_fail(err, cap, KILN_ERR_FORMAT,
                     "%s: truncated: %lld bytes, the header (magic, n_ctx, n_vocab, n_chunk) needs 20", path,
                     (long long)size);
    }
    int32_t n_ctx = rd_i32(h + 8), n_vocab = rd_i32(h + 12), n_chunk = rd_i32(h + 16);
    const char *bad = NULL;
    if (n_ctx < 3 || n_ctx > (1 << 24)) bad = "n_ctx";
    else if (n_vocab < 1 || n_vocab > (1 << 26)) bad = "n_vocab";
    else if (n_chunk < 1 || n_chunk > (1 << 24)) bad = "n_chunk";
    if (bad) {
        ppl_base_close(b);
        return kiln_fail(err, cap, KILN_ERR_FORMAT, "%s: the header's %s is %d, out of range (n_ctx %d, n_vocab %d, n_chunk %d)",
                     path, bad, strcmp(bad, "n_ctx") == 0 ? n_ctx : strcmp(bad, "n_vocab") == 0 ? n_vocab : n_chunk,
                     n_ctx, n_vocab, n_chunk);
    }
    int64_t ntok = (int64_t)n_chunk * n_ctx;
    int64_t want = 20 + 4 * ntok + (int64_t)n_chunk * ppl_scored(n_ctx) * ppl_row_u16(n_vocab) * 2;
    if (size != want) {
        ppl_base_close(b);
        return kiln_fail(err, cap, KILN_ERR_FORMAT,
                     "%s: %s: the file has %lld bytes, but %d chunks of %d tokens over a vocabulary of %d need %lld "
                     "(header 20, tokens %lld, log-probabilities %lld)",
                     path, size < want ? "truncated" : "too long", (long long)size, n_chunk, n_ctx, n_vocab,
                     (long long)want, (long long)(4 * ntok), (long long)(want - 20 - 4 * ntok));
    }
    b->n_ctx = n_ctx;
    b->n_vocab = n_vocab;
    b->n_chunk = n_chunk;
    b->tokens = kiln_xcalloc((size_t)ntok, sizeof *b->tokens);
    unsigned char buf[4096];
    for (int64_t i = 0; i < ntok;) {
        size_t n = (size_t)(ntok - i < 1024 ? ntok - i : 1024);
        if (fread(buf, 4, n, b->f) != n) {
            ppl_base_close(b);
            return kiln_fail(err, cap, KILN_ERR_IO, "%s: reading the token ids failed", path);
        }
        for (size_t j = 0; j < n; j++, i++) {
            int32_t t = rd_i32(buf + 4 * j);
            if (t < 0 || t >= n_vocab) {
                int64_t at = i;
                ppl_base_close(b);
                return kiln_fail(err, cap, KILN_ERR_FORMAT,
                             "%s: token %lld (chunk %lld) has id %d, outside the vocabulary of %d", path,
                             (long long)at, (long long)(at / n_ctx + 1), t, n_vocab);
            }
            b->tokens[i] = t;
        }
    }
    return KILN_OK;
}

kiln_status ppl_base_read_chunk(ppl_base *b, uint16_t *rows, char *err, size_t cap) {
    int64_t nv = ppl_row_u16(b->n_vocab), nr = ppl_scored(b->n_ctx);
    if (b->chunks_read >= b->n_chunk)
        return kiln_fail(err, cap, KILN_ERR_RANGE, "%s: has %d chunks only", b->path, b->n_chunk);
    size_t n = (size_t)(nv * nr);
    if (fread(rows, sizeof *rows, n, b->f) != n)
        return kiln_fail(err, cap, KILN_ERR_IO, "%s: reading the log-probabilities of chunk %d failed", b->path,
                     b->chunks_read + 1);
    for (int64_t r = 0; r < nr; r++) {
        float scale, mlp;
        memcpy(&scale, rows + r * nv, sizeof scale);
        memcpy(&mlp, rows + r * nv + 2, sizeof mlp);
        if (!(scale >= 0 && scale < 1.0f) || !(mlp <= 0 && mlp > -1e30f))
            return kiln_fail(err, cap, KILN_ERR_FORMAT,
                         "%s: chunk %d, scored row %lld: scale %g / minimum log-probability %g are not those of "
                         "log-probabilities (want 0 <= scale < 1, -1e30 < minimum <= 0)",
                         b->path, b->chunks_read + 1, (long long)r, (double)scale, (double)mlp);
    }
    b->chunks_read++;
    return KILN_OK;
}

static kiln_status wr(FILE *f, const char *path, const void *p, size_t size, size_t n, char *err, size_t cap) {
    if (n && fwrite(p, size, n, f) != n) return kiln_fail(err, cap, KILN_ERR_IO, "%s: writing failed (disk full?)", path);
    return KILN_OK;
}

kiln_status ppl_base_create(const char *path, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const int32_t *tokens,
                            FILE **out, char *err, size_t cap) {
    *out = NULL;
    FILE *f = fopen(path, "wb");
    if (!f) return kiln_fail(err, cap, KILN_ERR_IO, "%s: cannot create the base file", path);
    int32_t hdr[3] = {n_ctx, n_vocab, n_chunk};
    kiln_status s = wr(f, path, "_logits_", 1, 8, err, cap);
    if (!s) s = wr(f, path, hdr, sizeof hdr[0], 3, err, cap);
    if (!s) s = wr(f, path, tokens, sizeof *tokens, (size_t)n_chunk * (size_t)n_ctx, err, cap);
    if (s) {
        fclose(f);
        return s;
    }
    *out = f;
    return KILN_OK;
}

kiln_status ppl_base_write_rows(FILE *f, const char *path, const uint16_t *rows, size_t n_values, char *err, size_t cap) {
    return wr(f, path, rows, sizeof *rows, n_values, err, cap);
}
