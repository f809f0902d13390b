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
 * Sizes: the input from 4 KiB to 256 MiB (x4 steps). Each point: one warm-up
 * run, then the median of `reps` timed runs (reps shrinks with size).
 *
 * Usage: kernels [max_mib] [threads]    (defaults 256, all cores)
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

static double run_one(kind k, int64_t n, int threads, double *gbs) {
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
    kiln_program *p = kiln_compile(g, &opt, NULL);
    double med = -1;
    if (!p) {
        fprintf(stderr, "%s: compile failed: %s\n", names[k], kiln_graph_error(g));
    } else {
        int reps = m * 4 > (64 << 20) ? 5 : m * 4 > (1 << 20) ? 15 : 200;
        double t[200];
        kiln_run(p); /* warm-up: arena, page faults, caches */
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            kiln_run(p);
            t[r] = now_s() - t0;
        }
        qsort(t, (size_t)reps, sizeof t[0], cmp_d);
        med = t[reps / 2];
        double bytes = (double)m * 4 * (k == K_REDUCE ? 1.0 : 2.0) + (k == K_REDUCE ? (double)rows * 4 : 0);
        *gbs = bytes / med / 1e9;
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
    printf("measuring the machine's read bandwidth (kiln device)...\n");
    double bw = device_bandwidth();
    printf("device read bandwidth: %.1f GB/s (all threads)\n\n", bw);
    printf("%-8s %10s %12s %10s %9s\n", "kernel", "size", "time", "GB/s", "of bw");
    for (int k = 0; k < K_COUNT; k++) {
        for (int64_t bytes = 4096; bytes <= max_mib * (1 << 20); bytes *= 4) {
            double gbs = 0;
            double t = run_one((kind)k, bytes / 4, threads, &gbs);
            char sz[32];
            if (bytes >= (1 << 20)) snprintf(sz, sizeof sz, "%lld MiB", (long long)(bytes >> 20));
            else snprintf(sz, sizeof sz, "%lld KiB", (long long)(bytes >> 10));
            if (t < 0) continue;
            printf("%-8s %10s %10.1f us %10.2f %8.0f%%\n", names[k], sz, t * 1e6, gbs, bw > 0 ? 100 * gbs / bw : 0);
            fflush(stdout);
        }
    }
    return 0;
}
