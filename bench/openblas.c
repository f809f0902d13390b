/* bench/openblas.c — dense f32 matmul: a kiln graph compiled by kiln_compile
 * against OpenBLAS's cblas_sgemm / cblas_sgemv, side by side.
 *
 * Each case is C = A (m, k) x B (k, n), all f32 row-major; n = 1 is a
 * matrix-vector product, which OpenBLAS runs as sgemv (its best routine for
 * it; M=1 sgemm is slower, DESIGN.md 10) and kiln as a matmul with a 1-D
 * right operand. Same inputs, same thread count. Before timing, kiln's result
 * is checked against OpenBLAS's (max |diff| <= 1e-4 * k * max|C| relative to
 * the largest entry): a fast wrong answer must not count.
 *
 * Timing: one warm-up each, then `reps` samples per side, the sides
 * alternating (which goes first flips each sample) because the machine is
 * shared and drifts; each sample repeats the call until it lasts >= 20 ms.
 * The table shows the median of each side, the ratio kiln/OpenBLAS, and the
 * share of the machine's measured peak (`kiln device`): fp32 FMA peak x
 * threads for matrix-matrix, read bandwidth at that thread count (bytes of A)
 * for matrix-vector (up to 64 MiB: these stay in a large L3 between calls,
 * so they can pass the DRAM bandwidth). The device figures are medians of three measurements
 * (before, half way, after the sweep).
 *
 * Usage: openblas [threads,..] [max_size] [reps]   (defaults 1,2  1024  7)
 * Run through bench/openblas.sh, which sets OPENBLAS_CORETYPE.
 */
#include <cblas.h>
#include <math.h>
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

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* a number after "key": in kiln_device_report's JSON; 0 if absent */
static double json_num(const char *js, const char *key) {
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = js ? strstr(js, pat) : NULL;
    return p ? strtod(p + strlen(pat), NULL) : 0;
}

/* the peaks as medians of up to 3 measurements (before, half way, after):
 * on a shared machine one can come out low (other work) or high (a buffer
 * still in the large L3) */
typedef struct peaks {
    int n;               /* measurements so far */
    double fma1_m[3];    /* fp32 FMA GFLOP/s, one thread */
    double bw_m[3][65];  /* read GB/s by thread count (0 = not measured) */
    double fma1, bw[65]; /* the medians */
} peaks;

static void measure_peaks(peaks *pk) {
    if (pk->n == 3) return;
    char *js = kiln_device_report(1);
    int n = pk->n++;
    pk->fma1_m[n] = json_num(js, "fp32_fma_gflops_1thread");
    const char *p = js ? strstr(js, "\"read_bandwidth_gbs\"") : NULL;
    const char *end = p ? strchr(p, '}') : NULL;
    /* entries look like "1": 9.82, "2": 12.38 */
    while (p && end && (p = strchr(p + 1, '"')) && p < end) {
        char *q;
        long t = strtol(p + 1, &q, 10);
        if (q == p + 1 || *q != '"') continue;
        p = q;
        const char *colon = strchr(p, ':');
        if (!colon || colon > end) break;
        double v = strtod(colon + 1, NULL);
        if (t >= 1 && t <= 64) pk->bw_m[n][t] = v;
        p = colon;
    }
    free(js);
    double tmp[3];
    for (int i = 0; i < pk->n; i++) tmp[i] = pk->fma1_m[i];
    pk->fma1 = median(tmp, pk->n);
    for (int t = 1; t <= 64; t++) {
        int k = 0;
        for (int i = 0; i < pk->n; i++)
            if (pk->bw_m[i][t] > 0) tmp[k++] = pk->bw_m[i][t];
        pk->bw[t] = k ? median(tmp, k) : 0;
    }
}

static double bandwidth(const peaks *pk, int t) {
    for (int i = t < 64 ? t : 64; i >= 1; i--)
        if (pk->bw[i] > 0) return pk->bw[i];
    return 0;
}

typedef struct bench_case {
    const char *what;
    int64_t m, k, n; /* n == 1: matrix-vector */
} bench_case;

static void fill(float *x, size_t n, unsigned *seed) {
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        x[i] = (float)((double)(*seed >> 8) / 16777216.0 - 0.5);
    }
}

static void blas_call(const bench_case *c, const float *a, const float *b, float *out) {
    int m = (int)c->m, k = (int)c->k, n = (int)c->n;
    if (c->n == 1) cblas_sgemv(CblasRowMajor, CblasNoTrans, m, k, 1.0f, a, k, b, 1, 0.0f, out, 1);
    else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, out, n);
}

/* seconds per call: repeats until the sample lasts >= 20 ms */
static double time_side(int kiln_side, kiln_program *p, const bench_case *c, const float *a, const float *b,
                        float *out, int *iters) {
    for (;;) {
        double t0 = now_s();
        for (int i = 0; i < *iters; i++) {
            if (kiln_side) kiln_run(p);
            else blas_call(c, a, b, out);
        }
        double dt = now_s() - t0;
        if (dt >= 0.02 || *iters >= (1 << 20)) return dt / *iters;
        *iters *= dt > 0.002 ? 2 : 8;
    }
}

static int run_case(const bench_case *c, int threads, int reps, const peaks *pk) {
    size_t na = (size_t)(c->m * c->k), nb = (size_t)(c->k * c->n), nc = (size_t)(c->m * c->n);
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *ref = malloc(nc * sizeof *ref),
          *got = malloc(nc * sizeof *got);
    double *ks = malloc((size_t)reps * sizeof *ks), *bs = malloc((size_t)reps * sizeof *bs);
    if (!a || !b || !ref || !got || !ks || !bs) {
        fprintf(stderr, "openblas: out of memory for %s\n", c->what);
        return 1;
    }
    unsigned seed = 12345u;
    fill(a, na, &seed);
    fill(b, nb, &seed);

    char shp_a[64], shp_b[64];
    snprintf(shp_a, sizeof shp_a, "%lld, %lld", (long long)c->m, (long long)c->k);
    if (c->n == 1) snprintf(shp_b, sizeof shp_b, "%lld", (long long)c->k);
    else snprintf(shp_b, sizeof shp_b, "%lld, %lld", (long long)c->k, (long long)c->n);
    kiln_graph *g = kiln_graph_new();
    kiln_tensor ta = kiln_input(g, "a", KILN_F32, shp_a);
    kiln_tensor tb = kiln_input(g, "b", KILN_F32, shp_b);
    kiln_output(g, kiln_matmul(g, ta, tb), "c");
    kiln_bind_input(g, "a", a, na * sizeof *a);
    kiln_bind_input(g, "b", b, nb * sizeof *b);
    kiln_compile_options opt = kiln_compile_defaults();
    opt.threads = threads;
    kiln_status st = KILN_OK;
    kiln_program *p = kiln_graph_status(g) ? NULL : kiln_compile(g, &opt, &st);
    int rc = 0;
    if (!p || (st = kiln_run(p)) || (st = kiln_read_output(g, "c", got, nc * sizeof *got))) {
        fprintf(stderr, "openblas: kiln failed on %s: %s\n", c->what, kiln_graph_error(g));
        rc = 1;
        goto done;
    }
    openblas_set_num_threads(threads);
    blas_call(c, a, b, ref);
    double err = 0, scale = 0;
    for (size_t i = 0; i < nc; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d > err) err = d;
        if (fabs((double)ref[i]) > scale) scale = fabs((double)ref[i]);
    }
    double rel = scale > 0 ? err / scale : err;
    int ok = rel <= 1e-4 * sqrt((double)c->k);

    int ki = 1, bi = 1;
    for (int r = 0; r < reps; r++) {
        if (r % 2 == 0) {
            ks[r] = time_side(1, p, c, a, b, got, &ki);
            bs[r] = time_side(0, p, c, a, b, ref, &bi);
        } else {
            bs[r] = time_side(0, p, c, a, b, ref, &bi);
            ks[r] = time_side(1, p, c, a, b, got, &ki);
        }
    }
    double tk = median(ks, reps), tb_ = median(bs, reps);
    double flops = 2.0 * (double)c->m * (double)c->k * (double)c->n;
    double gk = flops / tk * 1e-9, gb = flops / tb_ * 1e-9;
    char shape[48], pk_k[16] = "-", pk_b[16] = "-";
    snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)c->m, (long long)c->k, (long long)c->n);
    if (c->n == 1) {
        double bw = bandwidth(pk, threads), bytes = 4.0 * (double)na;
        if (bw > 0) {
            snprintf(pk_k, sizeof pk_k, "%.0f%%bw", 100 * bytes / tk * 1e-9 / bw);
            snprintf(pk_b, sizeof pk_b, "%.0f%%bw", 100 * bytes / tb_ * 1e-9 / bw);
        }
    } else if (pk->fma1 > 0) {
        snprintf(pk_k, sizeof pk_k, "%.0f%%", 100 * gk / (pk->fma1 * threads));
        snprintf(pk_b, sizeof pk_b, "%.0f%%", 100 * gb / (pk->fma1 * threads));
    }
    printf("| %-6s | %-16s | %2d | %11.2f | %15.2f | %9.2fx | %10s | %12s | %-9s |\n", c->what, shape, threads, gk,
           gb, gk / gb, pk_k, pk_b, ok ? "ok" : "MISMATCH");
    fflush(stdout);
    if (!ok) {
        fprintf(stderr, "openblas: kiln's %s %s differs from OpenBLAS: max |diff| %.3g, max |C| %.3g\n", c->what,
                shape, err, scale);
        rc = 1;
    }
done:
    kiln_program_free(p);
    kiln_graph_free(g);
    free(a);
    free(b);
    free(ref);
    free(got);
    free(ks);
    free(bs);
    return rc;
}

int main(int argc, char **argv) {
    int threads[16], nth = 0;
    const char *tl = argc > 1 ? argv[1] : "1,2";
    for (const char *s = tl; *s && nth < 16;) {
        char *e;
        long t = strtol(s, &e, 10);
        if (e == s || t < 1 || t > 64) {
            fprintf(stderr, "usage: openblas [threads,..] [max_size] [reps]\n");
            return 2;
        }
        threads[nth++] = (int)t;
        s = *e == ',' ? e + 1 : e;
    }
    long max_size = argc > 2 ? strtol(argv[2], NULL, 10) : 1024;
    int reps = argc > 3 ? atoi(argv[3]) : 7;
    if (max_size < 64 || reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: openblas [threads,..] [max_size >= 64] [reps 1..1000]\n");
        return 2;
    }
    bench_case cases[] = {
        {"sgemm", 256, 256, 256},   {"sgemm", 512, 512, 512},    {"sgemm", 1024, 1024, 1024},
        {"sgemm", 2048, 2048, 2048}, {"sgemm", 512, 2048, 2048}, /* a pp512 projection */
        {"sgemv", 2048, 2048, 1},   {"sgemv", 8192, 2048, 1},    {"sgemv", 2048, 8192, 1},
    };
    peaks pk;
    memset(&pk, 0, sizeof pk);
    measure_peaks(&pk);
    printf("OpenBLAS %s, core %s (OPENBLAS_CORETYPE=%s)\n", openblas_get_config(), openblas_get_corename(),
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(auto)");
    printf("kiln: compiled matmul graph (kiln_compile, default schedules); medians of %d interleaved samples\n",
           reps);
    printf("%%peak: fp32 FMA peak x threads (gemm); %%bw: bytes of A / time over the read bandwidth (gemv)\n\n");
    printf("| %-6s | %-16s | %2s | %11s | %15s | %10s | %10s | %12s | %-9s |\n", "op", "m x k x n", "t", "kiln GF/s",
           "OpenBLAS GF/s", "kiln/blas", "kiln %peak", "blas %peak", "check");
    printf("|--------|------------------|----|-------------|-----------------|------------|------------|--------------|-----------|\n");
    int rc = 0;
    size_t ncases = sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < ncases; i++) {
        const bench_case *c = &cases[i];
        if (i == ncases / 2) measure_peaks(&pk);
        /* max_size bounds the matrix-matrix cases; the matrix-vector ones are cheap */
        if (c->n > 1 && (c->m > max_size || c->k > max_size || c->n > max_size)) continue;
        for (int t = 0; t < nth; t++) rc |= run_case(c, threads[t], reps, &pk);
    }
    measure_peaks(&pk);
    printf("\npeaks (medians of %d measurements): fp32 FMA %.1f GFLOP/s per thread; read bandwidth", pk.n, pk.fma1);
    for (int t = 1; t <= 64; t++)
        if (pk.bw[t] > 0) printf(" %d: %.1f GB/s", t, pk.bw[t]);
    printf("\n");
    return rc;
}
