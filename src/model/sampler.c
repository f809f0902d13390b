/* sampler.c — the sampling chain of sampler.h: penalty, greedy or top-k,
 * temperature, softmax, top-p, min-p, draw.
 *
 * Invariants: cand[0..n) holds the surviving candidates; after top-k (or the
 * full sort) it is ordered by descending logit, ties by ascending id, so every
 * later cut is a prefix and results do not depend on the sort's stability.
 * Probabilities are doubles; the draw compares a 53-bit uniform number with
 * the running sum, so the same inputs give the same token everywhere.
 */
#include "sampler.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "base.h"

typedef struct cand {
    int32_t id;
    float logit;
    double p;
} cand;

struct sampler {
    sampler_params prm;
    int32_t n_vocab;
    uint64_t rng;
    int32_t *hist; /* ring of the last repeat_last_n accepted ids */
    int32_t hist_n, hist_pos;
    float *work;   /* [n_vocab] penalised logits */
    uint8_t *mark; /* [n_vocab] scratch: token already penalised */
    cand *cand;    /* [n_vocab] */
};

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) with 53 random bits */
static double rng_uniform(uint64_t *state) { return (double)(splitmix64(state) >> 11) * (1.0 / 9007199254740992.0); }

void sampler_params_init(sampler_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->seed = 42;
}

kiln_status sampler_new(const sampler_params *p, int32_t n_vocab, sampler **out, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!out) return kiln_fail(err, cap, KILN_ERR_INVALID, "sampler: no output pointer");
    *out = NULL;
    if (!p) return kiln_fail(err, cap, KILN_ERR_INVALID, "sampler: no parameters");
    if (n_vocab <= 0) return kiln_fail(err, cap, KILN_ERR_INVALID, "sampler: vocabulary size %d", (int)n_vocab);
    if (!isfinite(p->temperature)) return kiln_fail(err, cap, KILN_ERR_INVALID, "sampler: temperature must be finite");
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f)) return kiln_fail(err, cap, KILN_ERR_INVALID, "sampler: top-p must be in [0, 1]");
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return kiln_fail(err, cap, KILN_ERR_INVALID, "sampler: min-p must be in [0, 1]");
    if (!(p->repeat_penalty > 0.0f) || !isfinite(p->repeat_penalty))
        return kiln_fail(err, cap, KILN_ERR_INVALID, "sampler: repetition penalty must be > 0");
    if (p->repeat_last_n < 0) return kiln_fail(err, cap, KILN_ERR_INVALID, "sampler: repeat_last_n must be >= 0");
    sampler *s = kiln_xcalloc(1, sizeof *s);
    s->prm = *p;
    s->n_vocab = n_vocab;
    s->hist = kiln_xmalloc((size_t)(p->repeat_last_n ? p->repeat_last_n : 1) * sizeof *s->hist);
    s->work = kiln_xmalloc((size_t)n_vocab * sizeof *s->work);
    s->mark = kiln_xcalloc((size_t)n_vocab, 1);
    s->cand = kiln_xmalloc((size_t)n_vocab * sizeof *s->cand);
    sampler_reset(s, p->seed);
    *out = s;
    return KILN_OK;
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->hist);
    free(s->work);
    free(s->mark);
    free(s->cand);
    free(s);
}

void sampler_reset(sampler *s, uint64_t seed) {
    if (!s) return;
    s->prm.seed = seed;
    s->rng = seed;
    s->hist_n = s->hist_pos = 0;
}

void sampler_accept(sampler *s, int32_t id) {
    if (!s || id < 0 || id >= s->n_vocab || s->prm.repeat_last_n == 0) return;
    s->hist[s->hist_pos] = id;
    s->hist_pos = (s->hist_pos + 1) % s->prm.repeat_last_n;
    if (s->hist_n < s->prm.repeat_last_n) s->hist_n++;
}

/* a ranks before b: larger logit, then smaller id */
static int cand_before(const cand *a, const cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

/* keep the k best of c[0..n) in c[0..k), sorted; a bounded heap whose root is
 * the worst kept candidate, O(n log k) */
static int32_t keep_top_k(cand *c, int32_t n, int32_t k) {
    if (k >= n) {
        qsort(c, (size_t)n, sizeof *c, cand_cmp);
        return n;
    }
    for (int32_t i = 0; i < n; i++) {
        cand x = c[i];
        int32_t pos;
        if (i < k) {
            pos = i; /* sift up while the parent ranks before x */
            while (pos > 0) {
                int32_t par = (pos - 1) / 2;
                if (!cand_before(&c[par], &x)) break;
                c[pos] = c[par];
                pos = par;
            }
            c[pos] = x;
            continue;
        }
        if (!cand_before(&x, &c[0])) continue;
        pos = 0; /* replace the root, sift down */
        for (;;) {
            int32_t ch = 2 * pos + 1;
            if (ch >= k) break;
            if (ch + 1 < k && cand_before(&c[ch], &c[ch + 1])) ch++;
            if (!cand_before(&x, &c[ch])) break;
            c[pos] = c[ch];
            pos = ch;
        }
        c[pos] = x;
    }
    qsort(c, (size_t)k, sizeof *c, cand_cmp);
    return k;
}

/* greedy without a penalty: the first id of the largest logit, NaN as -inf
 * (0 if none is above -inf), read in place: the largest value in eight
 * independent running maxima (a comparison that a NaN fails keeps the
 * maximum), then the first id that holds it. Two reads of the logits, no
 * copy: the per-token cost of a server's greedy rows. */
static int32_t argmax_first(const float *l, int32_t n) {
    float m[8];
    for (int j = 0; j < 8; j++) m[j] = -INFINITY;
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) m[j] = l[i + j] > m[j] ? l[i + j] : m[j];
    for (; i < n; i++) m[0] = l[i] > m[0] ? l[i] : m[0];
    float mx = m[0];
    for (int j = 1; j < 8; j++) mx = m[j] > mx ? m[j] : mx;
    if (mx == -INFINITY) return 0;
    for (i = 0; i < n; i++)
        if (l[i] == mx) return i;
    return 0; /* not reached: mx is one of l */
}

int32_t sampler_sample(sampler *s, const float *logits) {
    if (!s || !logits) return -1;
    const sampler_params *p = &s->prm;
    int32_t nv = s->n_vocab;
    if (p->temperature <= 0.0f && (p->repeat_penalty == 1.0f || s->hist_n == 0)) return argmax_first(logits, nv);
    float *w = s->work;
    for (int32_t i = 0; i < nv; i++) w[i] = isnan(logits[i]) ? -INFINITY : logits[i];

    if (p->repeat_penalty != 1.0f && s->hist_n > 0) {
        for (int32_t k = 0; k < s->hist_n; k++) {
            int32_t id = s->hist[k];
            if (s->mark[id]) continue;
            s->mark[id] = 1;
            w[id] = w[id] > 0.0f ? w[id] / p->repeat_penalty : w[id] * p->repeat_penalty;
        }
        for (int32_t k = 0; k < s->hist_n; k++) s->mark[s->hist[k]] = 0;
    }

    if (p->temperature <= 0.0f) {
        int32_t best = 0;
        for (int32_t i = 1; i < nv; i++)
            if (w[i] > w[best]) best = i;
        return best;
    }

    cand *c = s->cand;
    for (int32_t i = 0; i < nv; i++) {
        c[i].id = i;
        c[i].logit = w[i];
        c[i].p = 0.0;
    }
    int32_t n = keep_top_k(c, nv, p->top_k > 0 ? p->top_k : nv);
    if (c[0].logit == -INFINITY) return c[0].id; /* nothing has any probability */

    /* softmax of logit / T, relative to the largest (c[0]) */
    double inv_t = 1.0 / (double)p->temperature, sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        c[i].p = exp(((double)c[i].logit - (double)c[0].logit) * inv_t);
        sum += c[i].p;
    }
    for (int32_t i = 0; i < n; i++) c[i].p /= sum;

    if (p->top_p < 1.0f) {
        double mass = 0.0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            mass += c[i].p;
            if (mass >= (double)p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0.0f) {
        double floor_p = (double)p->min_p * c[0].p;
        int32_t keep = 1;
        while (keep < n && c[keep].p >= floor_p) keep++;
        n = keep;
    }

    double total = 0.0;
    for (int32_t i = 0; i < n; i++) total += c[i].p;
    double u = rng_uniform(&s->rng) * total, run = 0.0;
    for (int32_t i = 0; i < n; i++) {
        run += c[i].p;
        if (u < run) return c[i].id;
    }
    return c[n - 1].id; /* u within rounding of total */
}
