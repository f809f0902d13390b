/* bench/kernels.c — memory-bound kernels compiled by kiln, in GB/s and as a
 * fraction of the read bandwidth `kiln device` measures.
 *
 * Kernels (f32, rows of 4096 elements except the chain):
 *   softmax     y = softmax(x, last axis)          bytes = read x + write y
 *   rmsnorm     y = rmsnorm(x, w)                  bytes = read x + write y
 *   chain       y = (x * a + b) * x + c  (1-D)     bytes = read x + write y
 *   reduce      y = sum(x, last axis)              bytes = read x
 * "bytes" counts the minimum traffic (each input read once, each output
 * written once), so the fraction is of what an ideal kernel would reach.
 * Sizes: the input from 4 KiB to 256 MiB (x4 steps). Each point: `rounds`
 * rounds of (one warm-up run, then `reps` timed runs; reps shrinks with
 * size), the median of each round, and the table shows the median of the
 * round medians with the lowest and highest round in brackets — the machine
 * this runs on is shared and noisy, so one number alone means little. The
 * device bandwidth is likewise the median of three `kiln device`
 * measurements (before, half way, after).
 *
 * Usage: kernels [max_mib] [threads] [rounds]    (defaults 256, all cores, 5)
 * KILN_BENCH_BUDGET=S (with KILN_TUNEDB pointing at a scratch file): each
 * kernel's schedule is searched during its first warm-up run (tuned mode).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln.h"
#include "kiln_compile.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the all-threads read bandwidth from kiln_device_report's JSON */
static double device_bandwidth(void) {
    char *js = kiln_device_report(1);
    double best = 0;
    const char *p = js ? strstr(js, "\"read_bandwidth_gbs\"") : NULL;
    const char *end = p ? strchr(p, '}') : NULL;
    while (p && end && (p = strchr(p, ':')) && p < end) {
        double v = strtod(p + 1, NULL);
        if (v > best) best = v;
        p++;
        const char *q = strchr(p, ':');
        if (!q || q > end) break;
        p = strchr(p, ',');
        if (!p || p > end) break;
    }
    free(js);
    return best;
}

typedef enum { K_SOFTMAX, K_RMSNORM, K_CHAIN, K_REDUCE, K_COUNT } kind;
static const char *names[K_COUNT] = {"softmax", "rmsnorm", "chain", "reduce"};

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof v[0], cmp_d);
    return v[n / 2];
}

/* the median of `rounds` round medians (s); gbs_lo, gbs_hi: the slowest and fastest round */
static double run_one(kind k, int64_t n, int threads, int rounds, double *gbs, double *gbs_lo, double *gbs_hi) {
    const int64_t cols = 4096;
    int64_t rows = n / cols > 0 ? n / cols : 1;
    if (k == K_CHAIN) rows = 1;
    int64_t m = k == K_CHAIN ? n : rows * cols;
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = k == K_CHAIN ? kiln_input(g, "x", KILN_F32, "n") : kiln_input(g, "x", KILN_F32, "rows, 4096");
    kiln_tensor y;
    if (k == K_SOFTMAX) y = kiln_softmax(g, x, -1);
    else if (k == K_RMSNORM) y = kiln_rmsnorm(g, x, kiln_input(g, "w", KILN_F32, "4096"), 1e-6);
    else if (k == K_REDUCE) y = kiln_sum(g, x, 1);
    else {
        kiln_tensor a = kiln_const(g, 1.5, KILN_F32), b = kiln_const(g, 0.25, KILN_F32), c = kiln_const(g, -1, KILN_F32);
        y = kiln_add(g, kiln_mul(g, kiln_add(g, kiln_mul(g, x, a), b), x), c);
    }
    kiln_output(g, y, "y");
    float *xb = malloc((size_t)m * 4), *wb = malloc(4096 * 4);
    for (int64_t i = 0; i < m; i++) xb[i] = (float)((i * 7919) % 1000) * 0.001f - 0.5f;
    for (int i = 0; i < 4096; i++) wb[i] = 1.0f + (float)i * 1e-4f;
    if (k == K_CHAIN) kiln_bind_dim(g, "n", m);
    else kiln_bind_dim(g, "rows", rows);
    kiln_bind_input(g, "x", xb, (size_t)m * 4);
    if (k == K_RMSNORM) kiln_bind_input(g, "w", wb, 4096 * 4);
    kiln_compile_options opt = kiln_compile_defaults();
    opt.threads = threads;
    /* KILN_BENCH_BUDGET=S: S seconds of schedule search (tune_generic.c), spent in the first warm-up run */
    const char *bb = getenv("KILN_BENCH_BUDGET");
    if (bb && bb[0]) opt.search_budget = atof(bb);
    kiln_program *p = kiln_compile(g, &opt, NULL);
    double med = -1;
    if (!p) {
        fprintf(stderr, "%s: compile failed: %s\n", names[k], kiln_graph_error(g));
    } else {
        int reps = m * 4 > (64 << 20) ? 5 : m * 4 > (1 << 20) ? 15 : 200;
        double t[200], rm[64];
        for (int rd = 0; rd < rounds; rd++) {
            kiln_run(p); /* warm-up: arena, page faults, caches */
            for (int r = 0; r < reps; r++) {
                double t0 = now_s();
                kiln_run(p);
                t[r] = now_s() - t0;
            }
            rm[rd] = median(t, reps);
        }
        med = median(rm, rounds); /* sorts rm */
        double bytes = (double)m * 4 * (k == K_REDUCE ? 1.0 : 2.0) + (k == K_REDUCE ? (double)rows * 4 : 0);
        *gbs = bytes / med / 1e9;
        *gbs_lo = bytes / rm[rounds - 1] / 1e9;
        *gbs_hi = bytes / rm[0] / 1e9;
    }
    kiln_program_free(p);
    kiln_graph_free(g);
    free(xb);
    free(wb);
    return med;
}

int main(int argc, char **argv) {
    int64_t max_mib = argc > 1 ? atoll(argv[1]) : 256;
    int threads = argc > 2 ? atoi(argv[2]) : 0;
    int rounds = argc > 3 ? atoi(argv[3]) : 5;
    if (rounds < 1) rounds = 1;
    if (rounds > 64) rounds = 64;
    double bws[3];
    printf("measuring the machine's read bandwidth (kiln device)...\n");
    bws[0] = device_bandwidth();
    printf("device read bandwidth: %.1f GB/s (all threads; first of three measurements)\n\n", bws[0]);
    /* rows are printed at the end, against the median bandwidth */
    double res[K_COUNT][16][4];
    int npts = 0;
    for (int k = 0; k < K_COUNT; k++) {
        int i = 0;
        for (int64_t bytes = 4096; bytes <= max_mib * (1 << 20) && i < 16; bytes *= 4, i++) {
            double gbs = 0, lo = 0, hi = 0;
            double t = run_one((kind)k, bytes / 4, threads, rounds, &gbs, &lo, &hi);
            res[k][i][0] = t;
            res[k][i][1] = gbs;
            res[k][i][2] = lo;
            res[k][i][3] = hi;
            fprintf(stderr, ".");
        }
        npts = i;
        if (k == K_COUNT / 2 - 1) bws[1] = device_bandwidth();
    }
    bws[2] = device_bandwidth();
    fprintf(stderr, "\n");
    double bw = median(bws, 3);
    printf("device read bandwidth: %.1f GB/s (median of %.1f, %.1f, %.1f); %d rounds per point\n\n", bw, bws[0],
           bws[1], bws[2], rounds);
    printf("%-8s %10s %12s %10s %17s %9s\n", "kernel", "size", "time", "GB/s", "(rounds lo-hi)", "of bw");
    for (int k = 0; k < K_COUNT; k++) {
        int64_t bytes = 4096;
        for (int i = 0; i < npts; i++, bytes *= 4) {
            char sz[32];
            if (bytes >= (1 << 20)) snprintf(sz, sizeof sz, "%lld MiB", (long long)(bytes >> 20));
            else snprintf(sz, sizeof sz, "%lld KiB", (long long)(bytes >> 10));
            if (res[k][i][0] < 0) continue;
            printf("%-8s %10s %10.1f us %10.2f    (%5.1f - %5.1f) %8.0f%%\n", names[k], sz, res[k][i][0] * 1e6,
                   res[k][i][1], res[k][i][2], res[k][i][3], bw > 0 ? 100 * res[k][i][1] / bw : 0);
        }
    }
    return 0;
}
