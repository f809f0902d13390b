/* test_sampler.c — the sampler against brute-force expectations: greedy is the
 * argmax, seeds reproduce, top-k / top-p / min-p keep exactly the sets a direct
 * computation in this file predicts, the repetition penalty moves the argmax as
 * the llama.cpp rule says, and 20000 draws follow softmax(logits / T) within a
 * chi-square bound.
 */
#include <math.h>
#include <string.h>

#include "check.h"
#include "sampler.h"

static uint64_t lcg = 12345;
static float rnd(void) { /* the test's own generator, in [-4, 4) */
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(lcg >> 11) / 9007199254740992.0 * 8.0 - 4.0);
}

static sampler *make(float temp, int top_k, float top_p, float min_p, float pen, int last_n, uint64_t seed,
                     int nv) {
    sampler_params p;
    sampler_params_init(&p);
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.repeat_penalty = pen;
    p.repeat_last_n = last_n;
    p.seed = seed;
    sampler *s = NULL;
    char err[200];
    if (sampler_new(&p, nv, &s, err, sizeof err) != KILN_OK) {
        printf("sampler_new: %s\n", err);
        return NULL;
    }
    return s;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* brute-force probabilities of softmax(x / T), in double */
static void softmax(const float *x, int n, double t, double *p) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) m = fmax(m, x[i]);
    for (int i = 0; i < n; i++) s += (p[i] = exp((x[i] - m) / t));
    for (int i = 0; i < n; i++) p[i] /= s;
}

/* chi-square of counts against probabilities (cells with tiny expectation
 * merged into one) */
static double chi2(const int *cnt, const double *p, int n, int draws, int *df) {
    double c = 0, rest_o = 0, rest_e = 0;
    *df = -1;
    for (int i = 0; i < n; i++) {
        double e = p[i] * draws;
        if (e < 5) {
            rest_o += cnt[i];
            rest_e += e;
            continue;
        }
        c += (cnt[i] - e) * (cnt[i] - e) / e;
        (*df)++;
    }
    if (rest_e > 0) {
        c += (rest_o - rest_e) * (rest_o - rest_e) / rest_e;
        (*df)++;
    }
    return c;
}

/* 99.9% chi-square quantiles for df 1..10; deterministic seeds make this a
 * fixed check, the quantile only says how unlikely a false alarm would be */
static const double chi999[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59};

static void test_greedy(void) {
    CASE_BEGIN("sampler_greedy_is_argmax");
    float x[300];
    for (int trial = 0; trial < 20; trial++) {
        for (int i = 0; i < 300; i++) x[i] = rnd();
        sampler *s = make(0.0f, 40, 0.9f, 0.05f, 1.0f, 64, (uint64_t)trial, 300);
        CHECK(s != NULL, "create");
        if (!s) break;
        int got = sampler_sample(s, x);
        CHECK(got == argmax(x, 300), "trial %d got %d want %d", trial, got, argmax(x, 300));
        sampler_free(s);
    }
    /* ties: lowest id */
    float t[5] = {1, 3, 0, 3, 3};
    sampler *s = make(0.0f, 0, 1.0f, 0.0f, 1.0f, 0, 1, 5);
    CHECK(sampler_sample(s, t) == 1, "tie");
    /* negative temperature is greedy too */
    sampler_free(s);
    s = make(-1.0f, 0, 1.0f, 0.0f, 1.0f, 0, 1, 5);
    CHECK(sampler_sample(s, t) == 1, "negative temperature");
    sampler_free(s);
    CASE_END();
}

/* greedy without a penalty reads the logits in place (eight running maxima,
 * then the first id holding the largest): NaN never wins, +inf does, ties
 * go to the lowest id wherever they fall among the lanes and the tail, and
 * nothing above -inf gives 0, as the copying path did */
static void test_greedy_in_place(void) {
    CASE_BEGIN("sampler_greedy_in_place");
    float x[37];
    for (int n = 1; n <= 37; n++) {
        for (int at = 0; at < n; at++) {
            for (int i = 0; i < n; i++) x[i] = (float)(i % 5) - 10.0f;
            x[at] = 2.0f;
            if (at + 9 < n) x[at + 9] = 2.0f; /* a later tie, in another lane */
            if (at > 0) x[at - 1] = NAN;
            sampler *s = make(0.0f, 0, 1.0f, 0.0f, 1.0f, 0, 1, n);
            int got = sampler_sample(s, x);
            CHECK(got == at, "n %d: max at %d, got %d", n, at, got);
            sampler_free(s);
        }
    }
    float y[11] = {1, 2, NAN, INFINITY, 5, INFINITY, 0, 0, 0, 0, 0};
    sampler *s = make(0.0f, 0, 1.0f, 0.0f, 1.0f, 0, 1, 11);
    CHECK(sampler_sample(s, y) == 3, "+inf wins, the first one");
    float z[11] = {NAN, NAN, -INFINITY, NAN, -INFINITY, NAN, NAN, NAN, NAN, -INFINITY, NAN};
    CHECK(sampler_sample(s, z) == 0, "nothing above -inf: 0");
    sampler_free(s);
    /* a penalty active: the copying path, the same choice where it does not bite */
    s = make(0.0f, 0, 1.0f, 0.0f, 1.3f, 4, 1, 11);
    sampler_accept(s, 0);
    CHECK(sampler_sample(s, y) == 3, "penalised greedy");
    sampler_free(s);
    CASE_END();
}

static void test_seeds(void) {
    CASE_BEGIN("sampler_seed_reproducible");
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = rnd() * 0.3f; /* flat: many tokens likely */
    int a[200], b[200], c[200], d[200];
    sampler *s1 = make(1.0f, 0, 1.0f, 0.0f, 1.0f, 0, 7, 64), *s2 = make(1.0f, 0, 1.0f, 0.0f, 1.0f, 0, 7, 64);
    sampler *s3 = make(1.0f, 0, 1.0f, 0.0f, 1.0f, 0, 8, 64);
    for (int i = 0; i < 200; i++) {
        a[i] = sampler_sample(s1, x);
        b[i] = sampler_sample(s2, x);
        c[i] = sampler_sample(s3, x);
    }
    sampler_reset(s1, 7);
    for (int i = 0; i < 200; i++) d[i] = sampler_sample(s1, x);
    CHECK(memcmp(a, b, sizeof a) == 0, "same seed, two samplers");
    CHECK(memcmp(a, d, sizeof a) == 0, "reset to the same seed");
    int same = 0, distinct = 0, seen[64] = {0};
    for (int i = 0; i < 200; i++) {
        same += a[i] == c[i];
        if (!seen[a[i]]++) distinct++;
    }
    CHECK(same < 60, "seeds 7 and 8 agree on %d of 200 draws", same);
    CHECK(distinct > 20, "only %d distinct tokens in 200 flat draws", distinct);
    sampler_free(s1);
    sampler_free(s2);
    sampler_free(s3);
    CASE_END();
}

static void test_top_k1(void) {
    CASE_BEGIN("sampler_top_k1_is_greedy");
    float x[500];
    for (int trial = 0; trial < 10; trial++) {
        for (int i = 0; i < 500; i++) x[i] = rnd();
        sampler *s = make(1.5f, 1, 1.0f, 0.0f, 1.0f, 0, (uint64_t)trial, 500);
        for (int k = 0; k < 20; k++) CHECK(sampler_sample(s, x) == argmax(x, 500), "trial %d", trial);
        sampler_free(s);
    }
    CASE_END();
}

/* draws n times and returns the set of tokens seen */
static void draw(sampler *s, const float *x, int nv, int draws, int *cnt) {
    memset(cnt, 0, (size_t)nv * sizeof *cnt);
    for (int i = 0; i < draws; i++) {
        int t = sampler_sample(s, x);
        if (t >= 0 && t < nv) cnt[t]++;
    }
}

static void test_top_k_set(void) {
    CASE_BEGIN("sampler_top_k_set_and_distribution");
    enum { NV = 40, K = 5, DRAWS = 20000 };
    float x[NV];
    for (int i = 0; i < NV; i++) x[i] = rnd() * 0.4f;
    int idx[NV];
    for (int i = 0; i < NV; i++) idx[i] = i;
    for (int i = 0; i < NV; i++) /* brute force: sort ids by logit */
        for (int j = i + 1; j < NV; j++)
            if (x[idx[j]] > x[idx[i]]) {
                int t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
            }
    sampler *s = make(0.7f, K, 1.0f, 0.0f, 1.0f, 0, 99, NV);
    int cnt[NV];
    draw(s, x, NV, DRAWS, cnt);
    float kx[K];
    int kc[K], outside = DRAWS;
    for (int i = 0; i < K; i++) {
        kx[i] = x[idx[i]];
        kc[i] = cnt[idx[i]];
        outside -= cnt[idx[i]];
    }
    CHECK(outside == 0, "%d draws outside the top %d", outside, K);
    double p[K];
    softmax(kx, K, 0.7, p);
    int df;
    double c = chi2(kc, p, K, DRAWS, &df);
    CHECK(df >= 1 && c < chi999[df], "chi2 %.2f df %d", c, df);
    sampler_free(s);
    CASE_END();
}

/* brute-force top-p set size on probabilities sorted descending */
static int top_p_count(const double *sorted, int n, float top_p) {
    double m = 0;
    for (int i = 0; i < n; i++) {
        m += sorted[i];
        if (m >= (double)top_p) return i + 1;
    }
    return n;
}

static void test_top_p(void) {
    CASE_BEGIN("sampler_top_p_smallest_prefix");
    /* hand-checkable: probabilities 0.4 0.3 0.2 0.1 */
    float x[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    int cnt[4];
    sampler *s = make(1.0f, 0, 0.85f, 0.0f, 1.0f, 0, 3, 4);
    draw(s, x, 4, 4000, cnt);
    CHECK(cnt[3] == 0 && cnt[0] > 0 && cnt[1] > 0 && cnt[2] > 0, "p=0.85: %d %d %d %d", cnt[0], cnt[1], cnt[2],
          cnt[3]);
    sampler_free(s);
    s = make(1.0f, 0, 0.65f, 0.0f, 1.0f, 0, 3, 4);
    draw(s, x, 4, 4000, cnt);
    CHECK(cnt[2] == 0 && cnt[3] == 0 && cnt[0] > 0 && cnt[1] > 0, "p=0.65: %d %d %d %d", cnt[0], cnt[1], cnt[2],
          cnt[3]);
    sampler_free(s);
    s = make(1.0f, 0, 0.3f, 0.0f, 1.0f, 0, 3, 4);
    draw(s, x, 4, 1000, cnt);
    CHECK(cnt[0] == 1000, "p=0.3 keeps only the top token: %d", cnt[0]);
    sampler_free(s);

    /* random logits: the set drawn from is exactly the brute-force prefix and
     * the frequencies follow the renormalised probabilities */
    enum { NV = 30, DRAWS = 20000 };
    for (int trial = 0; trial < 4; trial++) {
        float y[NV];
        for (int i = 0; i < NV; i++) y[i] = rnd() * 0.5f;
        double t = 0.8, p[NV];
        softmax(y, NV, t, p);
        int order[NV];
        for (int i = 0; i < NV; i++) order[i] = i;
        for (int i = 0; i < NV; i++)
            for (int j = i + 1; j < NV; j++)
                if (p[order[j]] > p[order[i]] || (p[order[j]] == p[order[i]] && order[j] < order[i])) {
                    int q = order[i];
                    order[i] = order[j];
                    order[j] = q;
                }
        double sorted[NV];
        for (int i = 0; i < NV; i++) sorted[i] = p[order[i]];
        float top_p = 0.5f + 0.1f * (float)trial;
        int keep = top_p_count(sorted, NV, top_p);
        sampler *st = make((float)t, 0, top_p, 0.0f, 1.0f, 0, (uint64_t)(100 + trial), NV);
        int c[NV];
        draw(st, y, NV, DRAWS, c);
        int outside = 0, kc[NV];
        double kp[NV], ks = 0;
        for (int i = 0; i < NV; i++) {
            if (i >= keep) outside += c[order[i]];
            else ks += sorted[i];
        }
        for (int i = 0; i < keep; i++) {
            kc[i] = c[order[i]];
            kp[i] = sorted[i] / ks;
        }
        CHECK(outside == 0, "trial %d: %d draws outside the %d-token prefix", trial, outside, keep);
        CHECK(c[order[keep - 1]] > 0, "trial %d: last kept token never drawn", trial);
        int df;
        double cs = chi2(kc, kp, keep, DRAWS, &df);
        CHECK(df >= 1 && df <= 10 ? cs < chi999[df] : cs < 2.0 * df + 30, "trial %d chi2 %.2f df %d", trial, cs, df);
        sampler_free(st);
    }
    CASE_END();
}

static void test_min_p(void) {
    CASE_BEGIN("sampler_min_p");
    /* probabilities 0.5 0.25 0.15 0.1: min-p 0.25 keeps p >= 0.125 */
    float x[4] = {logf(0.5f), logf(0.25f), logf(0.15f), logf(0.1f)};
    int cnt[4];
    sampler *s = make(1.0f, 0, 1.0f, 0.25f, 1.0f, 0, 5, 4);
    draw(s, x, 4, 6000, cnt);
    CHECK(cnt[3] == 0 && cnt[2] > 0 && cnt[1] > 0 && cnt[0] > 0, "%d %d %d %d", cnt[0], cnt[1], cnt[2], cnt[3]);
    double kp[3] = {0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9};
    int df;
    double c = chi2(cnt, kp, 3, 6000, &df);
    CHECK(c < chi999[df], "chi2 %.2f", c);
    sampler_free(s);
    s = make(1.0f, 0, 1.0f, 0.6f, 1.0f, 0, 5, 4); /* floor 0.3: only the top */
    draw(s, x, 4, 500, cnt);
    CHECK(cnt[0] == 500, "min-p 0.6: %d", cnt[0]);
    sampler_free(s);
    CASE_END();
}

static void test_penalty(void) {
    CASE_BEGIN("sampler_repetition_penalty");
    float pos[4] = {2.0f, 1.9f, -1.0f, -1.1f};
    sampler *s = make(0.0f, 0, 1.0f, 0.0f, 1.5f, 3, 1, 4);
    CHECK(sampler_sample(s, pos) == 0, "no history");
    sampler_accept(s, 0); /* 2.0 / 1.5 = 1.33 < 1.9 */
    CHECK(sampler_sample(s, pos) == 1, "positive logit divided");
    sampler_accept(s, 2);
    sampler_accept(s, 3);
    sampler_accept(s, 3); /* token 0 has left the 3-token window */
    CHECK(sampler_sample(s, pos) == 0, "window of the last 3");
    sampler_free(s);

    float neg[3] = {-1.0f, -1.2f, -5.0f};
    s = make(0.0f, 0, 1.0f, 0.0f, 1.5f, 8, 1, 3);
    sampler_accept(s, 0); /* -1.0 * 1.5 = -1.5 < -1.2 */
    CHECK(sampler_sample(s, neg) == 1, "negative logit multiplied");
    sampler_free(s);

    /* a token repeated in the window is penalised once: 2.0/1.2 = 1.67 > 1.5 */
    float once[2] = {2.0f, 1.5f};
    s = make(0.0f, 0, 1.0f, 0.0f, 1.2f, 8, 1, 2);
    sampler_accept(s, 0);
    sampler_accept(s, 0);
    sampler_accept(s, 0);
    CHECK(sampler_sample(s, once) == 0, "penalised once per distinct token");
    sampler_free(s);

    /* penalty 1 changes nothing; the caller's logits are left alone */
    s = make(0.0f, 0, 1.0f, 0.0f, 1.0f, 8, 1, 4);
    sampler_accept(s, 0);
    CHECK(sampler_sample(s, pos) == 0, "penalty 1");
    CHECK(pos[0] == 2.0f, "logits modified");
    sampler_free(s);
    CASE_END();
}

static void test_temperature_distribution(void) {
    CASE_BEGIN("sampler_distribution_chi2");
    enum { NV = 8, DRAWS = 20000 };
    float x[NV];
    for (int i = 0; i < NV; i++) x[i] = rnd() * 0.5f;
    const double temps[] = {1.0, 0.5, 2.0};
    for (int k = 0; k < 3; k++) {
        sampler *s = make((float)temps[k], 0, 1.0f, 0.0f, 1.0f, 0, (uint64_t)(1000 + k), NV);
        int cnt[NV];
        draw(s, x, NV, DRAWS, cnt);
        double p[NV];
        softmax(x, NV, temps[k], p);
        int df;
        double c = chi2(cnt, p, NV, DRAWS, &df);
        CHECK(df >= 1 && c < chi999[df], "T=%.1f chi2 %.2f df %d", temps[k], c, df);
        /* and the wrong temperature is rejected by the same statistic */
        double q[NV];
        softmax(x, NV, temps[k] * 2.0, q);
        double cq = chi2(cnt, q, NV, DRAWS, &df);
        CHECK(cq > chi999[df], "T=%.1f also fits T=%.1f (chi2 %.2f)", temps[k], temps[k] * 2, cq);
        sampler_free(s);
    }
    CASE_END();
}

static void test_bad_input(void) {
    CASE_BEGIN("sampler_bad_input");
    sampler_params p;
    sampler *s = (sampler *)1;
    char err[200];
    sampler_params_init(&p);
    CHECK(sampler_new(&p, 0, &s, err, sizeof err) != KILN_OK && s == NULL, "n_vocab 0");
    p.top_p = 1.5f;
    CHECK(sampler_new(&p, 10, &s, err, sizeof err) != KILN_OK && strlen(err) > 0, "top_p 1.5");
    sampler_params_init(&p);
    p.temperature = NAN;
    CHECK(sampler_new(&p, 10, &s, err, sizeof err) != KILN_OK, "NaN temperature");
    sampler_params_init(&p);
    p.repeat_penalty = 0.0f;
    CHECK(sampler_new(&p, 10, &s, err, sizeof err) != KILN_OK, "penalty 0");
    sampler_params_init(&p);
    p.repeat_last_n = -1;
    CHECK(sampler_new(&p, 10, &s, err, sizeof err) != KILN_OK, "negative window");
    /* NaN / -inf logits */
    s = make(1.0f, 0, 1.0f, 0.0f, 1.0f, 4, 1, 4);
    float x[4] = {NAN, -INFINITY, 1.0f, NAN};
    for (int i = 0; i < 50; i++) CHECK(sampler_sample(s, x) == 2, "only finite token");
    float all[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int32_t r = sampler_sample(s, all);
    CHECK(r >= 0 && r < 4, "all -inf gives %d", (int)r);
    sampler_accept(s, -5);
    sampler_accept(s, 99); /* ignored, not a crash */
    CHECK(sampler_sample(NULL, x) == -1, "NULL sampler");
    sampler_free(s);
    CASE_END();
}

int main(void) {
    test_greedy();
    test_greedy_in_place();
    test_seeds();
    test_top_k1();
    test_top_k_set();
    test_top_p();
    test_min_p();
    test_penalty();
    test_temperature_distribution();
    test_bad_input();
    return check_exit();
}
