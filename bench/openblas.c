/* bench/openblas.c — kiln's compiled contractions, untuned and tuned, against
 * OpenBLAS, side by side, same inputs and thread count, in one run:
 *
 *  1. fp32 square matmul C = A (n,n) x B (n,n), n = 256 .. max_size: kiln
 *     (one kiln_matmul) vs cblas_sgemm; GFLOP/s and share of the FMA peak.
 *  2. LLM shapes: x (M,K) times weights W (N,K) (kiln_linear, y = x W^T),
 *     M in {1, 512}, K, N in {640, 2048, 4096}: vs cblas_sgemm (NoTrans,
 *     Trans) for M = 512 and cblas_sgemv (W, x) for M = 1 (OpenBLAS's best
 *     routine for it). M = 1 rows show the share of the read bandwidth
 *     (bytes of W), M = 512 rows the share of the FMA peak.
 *  3. Quantised matrix-vector: x (1,K) f32 times W (N,K) in q8_0, q4_0,
 *     q4_k, q6_k (random weights through quant_quantize), N = K = 4096:
 *     GB/s of weight bytes read per run and their share of the read
 *     bandwidth. Checked against OpenBLAS sgemv on the dequantised weights.
 *
 * kiln "untuned": kiln_compile with search_budget = 0 and the tuning DB off
 * (KILN_TUNEDB_OFF=1 while compiling), i.e. the default schedules. kiln
 * "tuned": search_budget = --budget seconds (default 3); the search runs in
 * the first kiln_run (untimed; its length and the candidates measured are
 * printed) and records its winners in the tuning DB; the timed runs use them.
 * A shape whose DB record already exists (same kernel key and bucket, e.g.
 * 512x2048x2048 after 2048^3: both are the m>SMALL bucket) is not searched
 * again ("db" in the cands column). The tuning DB is a fresh file in a mkdtemp
 * directory (removed at exit) unless --db PATH names one: the bench never
 * reads or pollutes the user's DB by default.
 *
 * Every kiln result (untuned and tuned, after their warm-up) is compared
 * with OpenBLAS's: relative error = max |diff| / max |ref|; over the limit
 * (1e-4 sqrt(K) for f32, 1e-2 for the block formats, whose kernels may
 * quantise the activations to int8) the row says "WRONG", a message goes to
 * stderr and the exit status is 1: a fast wrong answer must not count.
 *
 * Timing: a warm-up each, then `reps` samples per side, the three sides
 * interleaved (the order rotates each sample: the machine is shared and
 * drifts); each sample repeats the call until it lasts >= 20 ms; medians.
 * Peaks come from the library's `kiln device` report (kiln_device_report):
 * fp32 FMA GFLOP/s per thread (an FMA loop, x threads for the peak) and the
 * read bandwidth per thread count (a 256 MiB buffer summed by the pool, best
 * of 3); medians of three reports (start, middle, end).
 *
 * Usage: openblas [threads,..] [max_size] [reps] [--budget S] [--db PATH]
 *                 [--parts 123]
 *   defaults: threads 1,<online cores>; max_size 2048 (4096 optional); reps 5
 * Run through bench/openblas.sh, which sets OPENBLAS_CORETYPE and
 * OPENBLAS_THREAD_TIMEOUT.
 */
#include <cblas.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiln.h"
#include "kiln_compile.h"
#include "quant.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* one thread's fp32 FMA GFLOP/s: 16 independent AVX-512 FMA chains (enough
 * to cover 2 FMA ports x 4-cycle latency), best of 3 runs of ~0.1 s */
__attribute__((target("avx512f"))) static double fma_peak_avx512(void) {
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-6f);
        /* 16 named accumulators so they stay in registers (an array spills at -O2) */
        __m512 a0 = _mm512_set1_ps(0.f), a1 = _mm512_set1_ps(1.f), a2 = _mm512_set1_ps(2.f),
               a3 = _mm512_set1_ps(3.f), a4 = _mm512_set1_ps(4.f), a5 = _mm512_set1_ps(5.f),
               a6 = _mm512_set1_ps(6.f), a7 = _mm512_set1_ps(7.f), a8 = _mm512_set1_ps(8.f),
               a9 = _mm512_set1_ps(9.f), a10 = _mm512_set1_ps(10.f), a11 = _mm512_set1_ps(11.f),
               a12 = _mm512_set1_ps(12.f), a13 = _mm512_set1_ps(13.f), a14 = _mm512_set1_ps(14.f),
               a15 = _mm512_set1_ps(15.f);
        const long iters = 2000000;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
#define F(x) x = _mm512_fmadd_ps(x, mul, add)
        for (long i = 0; i < iters; i++) {
            F(a0); F(a1); F(a2); F(a3); F(a4); F(a5); F(a6); F(a7);
            F(a8); F(a9); F(a10); F(a11); F(a12); F(a13); F(a14); F(a15);
        }
#undef F
        clock_gettime(CLOCK_MONOTONIC, &b);
        __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                 _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
        s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
                                           _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15))));
        volatile float sink = _mm512_reduce_add_ps(s);
        (void)sink;
        double dt = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
        double gf = (double)iters * 16 * 16 * 2 / dt * 1e-9;
        if (gf > best) best = gf;
    }
    return best;
}
static double fma_peak_bench(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? fma_peak_avx512() : 0;
}
#else
static double fma_peak_bench(void) { return 0; }
#endif

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

/* the peaks as medians of up to 3 measurements (start, middle, end) */
typedef struct peaks {
    int n;
    double fma1_m[3];
    double bw_m[3][65];
    double fma1, bw[65];
    double fma1_kiln; /* kiln device's figure, shown for comparison */
} peaks;

static void measure_peaks(peaks *pk) {
    if (pk->n == 3) return;
    char *js = kiln_device_report(1);
    int n = pk->n++;
    pk->fma1_m[n] = json_num(js, "fp32_fma_gflops_1thread");
    const char *p = js ? strstr(js, "\"read_bandwidth_gbs\"") : NULL;
    const char *end = p ? strchr(p, '}') : NULL;
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
    pk->fma1_kiln = median(tmp, pk->n);
    double own = fma_peak_bench();
    pk->fma1 = own > pk->fma1 ? own : pk->fma1; /* the best of the bench's loop and kiln device's */
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

enum { SQUARE, LINEAR, QUANT };

typedef struct bench_case {
    int kind;
    int64_t m, k, n;  /* SQUARE: A (m,k) x B (k,n); LINEAR/QUANT: x (m,k) W (n,k)^T */
    kiln_dtype wtype; /* QUANT: the weights' block format */
} bench_case;

typedef struct bufs {
    float *a, *b, *ref, *got, *wf; /* wf: QUANT's dequantised weights */
    void *wq;
    size_t na, nb, nc, wq_bytes;
} bufs;

static void fill(float *x, size_t n, unsigned *seed) {
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        x[i] = (float)((double)(*seed >> 8) / 16777216.0 - 0.5);
    }
}

static void blas_call(const bench_case *c, const bufs *B, float *out) {
    int m = (int)c->m, k = (int)c->k, n = (int)c->n;
    const float *w = c->kind == QUANT ? B->wf : B->b;
    if (c->kind == SQUARE)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, B->a, k, B->b, n, 0.0f, out, n);
    else if (m == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w, k, B->a, 1, 0.0f, out, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, B->a, k, w, k, 0.0f, out, n);
}

/* the graph for c over B's buffers (each program gets its own graph) */
static kiln_graph *build(const bench_case *c, bufs *B) {
    char sa[64], sb[64];
    kiln_graph *g = kiln_graph_new();
    snprintf(sa, sizeof sa, "%lld, %lld", (long long)c->m, (long long)c->k);
    kiln_tensor ta = kiln_input(g, "a", KILN_F32, sa);
    if (c->kind == SQUARE) {
        snprintf(sb, sizeof sb, "%lld, %lld", (long long)c->k, (long long)c->n);
        kiln_tensor tb = kiln_input(g, "b", KILN_F32, sb);
        kiln_output(g, kiln_matmul(g, ta, tb), "c");
    } else {
        snprintf(sb, sizeof sb, "%lld, %lld", (long long)c->n, (long long)c->k);
        kiln_tensor tw = kiln_input(g, "b", c->kind == QUANT ? c->wtype : KILN_F32, sb);
        kiln_output(g, kiln_linear(g, ta, tw, KILN_NONE), "c");
    }
    kiln_bind_input(g, "a", B->a, B->na * sizeof(float));
    if (c->kind == QUANT) kiln_bind_input(g, "b", B->wq, B->wq_bytes);
    else kiln_bind_input(g, "b", B->b, B->nb * sizeof(float));
    return g;
}

static kiln_program *compile(kiln_graph *g, int threads, double budget) {
    kiln_compile_options opt = kiln_compile_defaults();
    opt.threads = threads;
    opt.search_budget = budget;
    if (budget <= 0) setenv("KILN_TUNEDB_OFF", "1", 1); /* untuned: default schedules only */
    kiln_status st = KILN_OK;
    kiln_program *p = kiln_graph_status(g) ? NULL : kiln_compile(g, &opt, &st);
    if (budget <= 0) unsetenv("KILN_TUNEDB_OFF");
    return p;
}

/* relative error of kiln's output (after a run) against B->ref; -1 on failure */
static double check(kiln_program *p, kiln_graph *g, bufs *B) {
    if (kiln_run(p) != KILN_OK || kiln_read_output(g, "c", B->got, B->nc * sizeof(float)) != KILN_OK) return -1;
    double err = 0, scale = 0;
    for (size_t i = 0; i < B->nc; i++) {
        double d = fabs((double)B->got[i] - (double)B->ref[i]);
        if (!(d <= err)) err = d; /* NaN counts as the largest */
        if (fabs((double)B->ref[i]) > scale) scale = fabs((double)B->ref[i]);
    }
    return scale > 0 ? err / scale : err;
}

/* seconds per call of one side (0, 1: kiln programs; 2: OpenBLAS); repeats
 * the call until the sample lasts >= 20 ms */
static double time_side(int side, kiln_program **p, const bench_case *c, bufs *B, int *iters) {
    for (;;) {
        double t0 = now_s();
        for (int i = 0; i < *iters; i++) {
            if (side < 2) kiln_run(p[side]);
            else blas_call(c, B, B->got);
        }
        double dt = now_s() - t0;
        if (dt >= 0.02 || *iters >= (1 << 20)) return dt / *iters;
        *iters *= dt > 0.002 ? 2 : 8;
    }
}

static int run_case(const bench_case *c, int threads, int reps, double budget, const peaks *pk) {
    bufs B;
    memset(&B, 0, sizeof B);
    B.na = (size_t)(c->m * c->k);
    B.nb = (size_t)(c->k * c->n);
    B.nc = (size_t)(c->m * c->n);
    B.a = malloc(B.na * sizeof(float));
    B.b = malloc(B.nb * sizeof(float));
    B.ref = malloc(B.nc * sizeof(float));
    B.got = malloc(B.nc * sizeof(float));
    double *ts[3];
    for (int s = 0; s < 3; s++) ts[s] = malloc((size_t)reps * sizeof(double));
    kiln_graph *g[2] = {NULL, NULL};
    kiln_program *p[2] = {NULL, NULL};
    int rc = 0;
    char shape[64];
    snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)c->m, (long long)c->k, (long long)c->n);
    if (!B.a || !B.b || !B.ref || !B.got || !ts[0] || !ts[1] || !ts[2]) {
        fprintf(stderr, "openblas: out of memory for %s\n", shape);
        rc = 1;
        goto done;
    }
    unsigned seed = 12345u;
    fill(B.a, B.na, &seed);
    fill(B.b, B.nb, &seed);
    if (c->kind == QUANT) {
        B.wq_bytes = kiln_dtype_bytes(c->wtype, (int64_t)B.nb);
        B.wq = malloc(B.wq_bytes);
        B.wf = malloc(B.nb * sizeof(float));
        if (!B.wq || !B.wf || quant_quantize(c->wtype, B.b, B.wq, (int64_t)B.nb) != 0) {
            fprintf(stderr, "openblas: cannot quantise to %s\n", kiln_dtype_name(c->wtype));
            rc = 1;
            goto done;
        }
        quant_dequantize(c->wtype, B.wq, B.wf, (int64_t)B.nb);
    }
    openblas_set_num_threads(threads);
    blas_call(c, &B, B.ref);

    double err[2], search_s = 0;
    for (int s = 0; s < 2; s++) {
        g[s] = build(c, &B);
        p[s] = compile(g[s], threads, s ? budget : 0);
        double t0 = now_s();
        kiln_status st = p[s] ? kiln_run(p[s]) : KILN_ERR_INVALID; /* tuned: the search runs here */
        if (s) search_s = now_s() - t0;
        if (st != KILN_OK) {
            fprintf(stderr, "openblas: kiln (%s) failed on %s: %s\n", s ? "tuned" : "untuned", shape,
                    kiln_graph_error(g[s]));
            rc = 1;
            goto done;
        }
        err[s] = check(p[s], g[s], &B);
    }
    int meas = kiln_program_measurements(p[1]);
    double tol = c->kind == QUANT ? 1e-2 : 1e-4 * sqrt((double)c->k);
    int ok = err[0] >= 0 && err[0] <= tol && err[1] >= 0 && err[1] <= tol;

    int it[3] = {1, 1, 1};
    for (int s = 0; s < 3; s++) time_side(s, p, c, &B, &it[s]); /* warm-up */
    for (int r = 0; r < reps; r++)
        for (int j = 0; j < 3; j++) {
            int s = (r + j) % 3;
            ts[s][r] = time_side(s, p, c, &B, &it[s]);
        }
    double t[3];
    for (int s = 0; s < 3; s++) t[s] = median(ts[s], reps);

    char cands[24], chk[40];
    char *ktext = kiln_program_kernels(p[1]);
    int contract = ktext && strstr(ktext, "contraction ") != NULL;
    free(ktext);
    if (meas > 0) snprintf(cands, sizeof cands, "%d/%.1fs", meas, search_s);
    else snprintf(cands, sizeof cands, "%s", contract ? "db" : "generic");
    snprintf(chk, sizeof chk, "%s %.0e/%.0e", ok ? "ok" : "WRONG", err[0], err[1]);
    if (c->kind == QUANT) {
        double bytes = (double)B.wq_bytes, bw = bandwidth(pk, threads);
        double g0 = bytes / t[0] * 1e-9, g1 = bytes / t[1] * 1e-9;
        printf("| %-5s | %-12s | %2d | %8.1f | %11.1f | %9.1f | %10.0f%% | %8.0f%% | %9s | %-19s |\n",
               kiln_dtype_name(c->wtype), shape, threads, bytes / 1048576.0, g0, g1, bw > 0 ? 100 * g0 / bw : 0,
               bw > 0 ? 100 * g1 / bw : 0, cands, chk);
    } else {
        double flops = 2.0 * (double)c->m * (double)c->k * (double)c->n, gf[3];
        for (int s = 0; s < 3; s++) gf[s] = flops / t[s] * 1e-9;
        char pk1[16] = "-", pkb[16] = "-";
        if (c->kind == LINEAR && c->m == 1) {
            double bw = bandwidth(pk, threads), bytes = 4.0 * (double)B.nb;
            if (bw > 0) {
                snprintf(pk1, sizeof pk1, "%.0f%%bw", 100 * bytes / t[1] * 1e-9 / bw);
                snprintf(pkb, sizeof pkb, "%.0f%%bw", 100 * bytes / t[2] * 1e-9 / bw);
            }
        } else if (pk->fma1 > 0) {
            snprintf(pk1, sizeof pk1, "%.0f%%", 100 * gf[1] / (pk->fma1 * threads));
            snprintf(pkb, sizeof pkb, "%.0f%%", 100 * gf[2] / (pk->fma1 * threads));
        }
        if (c->kind == SQUARE) memcpy(shape + strlen(shape), " A.B", 5);
        printf("| %-16s | %2d | %8.1f | %8.1f | %8.1f | %7.2fx | %7s | %7s | %9s | %-19s |\n", shape, threads,
               gf[0], gf[1], gf[2], gf[1] / gf[2], pk1, pkb, cands, chk);
    }
    fflush(stdout);
    if (!ok) {
        fprintf(stderr,
                "openblas: *** kiln's result for %s%s%s (%d threads) differs from OpenBLAS: relative error "
                "untuned %.3g, tuned %.3g (limit %.3g) ***\n",
                c->kind == QUANT ? kiln_dtype_name(c->wtype) : "", c->kind == QUANT ? " " : "", shape, threads,
                err[0], err[1], tol);
        rc = 1;
    }
done:
    for (int s = 0; s < 2; s++) {
        kiln_program_free(p[s]);
        kiln_graph_free(g[s]);
    }
    for (int s = 0; s < 3; s++) free(ts[s]);
    free(B.a);
    free(B.b);
    free(B.ref);
    free(B.got);
    free(B.wf);
    free(B.wq);
    return rc;
}

static const char *gemm_head =
    "| %-16s | %2s | %8s | %8s | %8s | %8s | %7s | %7s | %9s | %-19s |\n";
static const char *gemm_rule =
    "|------------------|----|----------|----------|----------|----------|---------|---------|-----------|---------------------|\n";

static void usage(void) {
    fprintf(stderr, "usage: openblas [threads,..] [max_size 64..8192] [reps 1..1000] [--budget S] [--db PATH] "
                    "[--parts 123]\n");
}

static char tmpdir[64];

static void remove_tmpdir(void) {
    if (!tmpdir[0]) return;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(tmpdir);
}

int main(int argc, char **argv) {
    const char *pos[3] = {NULL, NULL, NULL}, *db = NULL, *parts = "123";
    double budget = 3;
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--budget") && i + 1 < argc) budget = strtod(argv[++i], NULL);
        else if (!strcmp(argv[i], "--db") && i + 1 < argc) db = argv[++i];
        else if (!strcmp(argv[i], "--parts") && i + 1 < argc) parts = argv[++i];
        else if (argv[i][0] != '-' && npos < 3) pos[npos++] = argv[i];
        else {
            usage();
            return 2;
        }
    }
    int threads[16], nth = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    char deflist[32];
    if (ncpu > 1) snprintf(deflist, sizeof deflist, "1,%ld", ncpu > 64 ? 64 : ncpu);
    else snprintf(deflist, sizeof deflist, "1");
    for (const char *s = pos[0] ? pos[0] : deflist; *s && nth < 16;) {
        char *e;
        long t = strtol(s, &e, 10);
        if (e == s || t < 1 || t > 64) {
            usage();
            return 2;
        }
        threads[nth++] = (int)t;
        s = *e == ',' ? e + 1 : e;
    }
    long max_size = pos[1] ? strtol(pos[1], NULL, 10) : 2048;
    int reps = pos[2] ? atoi(pos[2]) : 5;
    if (max_size < 64 || max_size > 8192 || reps < 1 || reps > 1000 || budget < 0) {
        usage();
        return 2;
    }
    if (db) {
        setenv("KILN_TUNEDB", db, 1);
    } else {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln-bench-XXXXXX");
        if (!mkdtemp(tmpdir)) {
            perror("openblas: mkdtemp");
            return 2;
        }
        atexit(remove_tmpdir);
        char path[128];
        snprintf(path, sizeof path, "%s/tune.db", tmpdir);
        setenv("KILN_TUNEDB", path, 1);
    }

    peaks pk;
    memset(&pk, 0, sizeof pk);
    measure_peaks(&pk);
    printf("OpenBLAS %s, core %s (OPENBLAS_CORETYPE=%s, OPENBLAS_THREAD_TIMEOUT=%s)\n", openblas_get_config(),
           openblas_get_corename(), getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(auto)",
           getenv("OPENBLAS_THREAD_TIMEOUT") ? getenv("OPENBLAS_THREAD_TIMEOUT") : "(default)");
    printf("kiln untuned: search_budget 0, tuning DB off; tuned: search_budget %.1f s per program, searched in an "
           "untimed first run (cands: candidates measured / length of that run; db: winner already in the DB; "
           "generic: no contraction kernel to search)\n",
           budget);
    printf("tuning DB: %s\n", getenv("KILN_TUNEDB"));
    printf("medians of %d interleaved samples; GF/s = GFLOP/s; %%pk: of threads x the fp32 FMA peak, "
           "%.1f GFLOP/s per thread (the larger of the bench's own AVX-512 FMA loop and kiln device's %.1f); %%bw: bytes of weights / time over the read bandwidth\n",
           reps, pk.fma1, pk.fma1_kiln);
    printf("check: relative error (max |kiln - OpenBLAS| / max |OpenBLAS|) untuned/tuned\n");
    double t_start = now_s();
    int rc = 0;

    if (strchr(parts, '1')) {
        printf("\n1. fp32 matmul n x n x n: C = A W^T (kiln_linear, W (n,k)) vs cblas_sgemm (NoTrans, Trans); "
               "A.B rows: kiln_matmul (A (n,k), B (k,n)) vs cblas_sgemm (NoTrans, NoTrans)\n\n");
        printf(gemm_head, "m x k x n", "t", "untuned", "tuned", "OpenBLAS", "tun/blas", "tun %pk", "blas %pk",
               "cands", "check");
        printf("%s", gemm_rule);
        for (int64_t n = 256; n <= 4096; n *= 2) {
            if (n > max_size) break;
            bench_case c = {LINEAR, n, n, n, KILN_F32};
            for (int t = 0; t < nth; t++) rc |= run_case(&c, threads[t], reps, budget, &pk);
            if (n == 512) {
                bench_case cs = {SQUARE, n, n, n, KILN_F32};
                for (int t = 0; t < nth; t++) rc |= run_case(&cs, threads[t], reps, budget, &pk);
            }
        }
    }
    measure_peaks(&pk);
    if (strchr(parts, '2')) {
        printf("\n2. LLM shapes y = x (M,K) W (N,K)^T: kiln_linear vs cblas_sgemm (M=512) / cblas_sgemv (M=1)\n\n");
        printf(gemm_head, "M x K x N", "t", "untuned", "tuned", "OpenBLAS", "tun/blas", "tun %pk", "blas %pk",
               "cands", "check");
        printf("%s", gemm_rule);
        const int64_t dims[3] = {640, 2048, 4096}, ms[2] = {1, 512};
        for (int mi = 0; mi < 2; mi++)
            for (int ki = 0; ki < 3; ki++)
                for (int ni = 0; ni < 3; ni++) {
                    bench_case c = {LINEAR, ms[mi], dims[ki], dims[ni], KILN_F32};
                    for (int t = 0; t < nth; t++) rc |= run_case(&c, threads[t], reps, budget, &pk);
                }
    }
    if (strchr(parts, '3')) {
        printf("\n3. quantised matrix-vector y = x (1,K) W (N,K)^T, W in a block format (GB/s of weight bytes)\n\n");
        printf("| %-5s | %-12s | %2s | %8s | %11s | %9s | %11s | %9s | %9s | %-19s |\n", "dtype", "M x K x N", "t",
               "W MiB", "untuned GB/s", "tuned GB/s", "untuned %bw", "tuned %bw", "cands", "check");
        printf("|-------|--------------|----|----------|--------------|-----------|-------------|-----------|-----------|"
               "---------------------|\n");
        const kiln_dtype qt[4] = {KILN_Q8_0, KILN_Q4_0, KILN_Q4_K, KILN_Q6_K};
        for (int q = 0; q < 4; q++) {
            bench_case c = {QUANT, 1, 4096, 4096, qt[q]};
            for (int t = 0; t < nth; t++) rc |= run_case(&c, threads[t], reps, budget, &pk);
        }
    }
    measure_peaks(&pk);
    printf("\npeaks (medians of %d measurements): fp32 FMA %.1f GFLOP/s per thread (kiln device: %.1f); read bandwidth "
           "(256 MiB buffer)",
           pk.n, pk.fma1, pk.fma1_kiln);
    for (int t = 1; t <= 64; t++)
        if (pk.bw[t] > 0) printf(" %d: %.1f GB/s", t, pk.bw[t]);
    printf("\nwall time %.0f s%s\n", now_s() - t_start,
           rc ? "; *** SOME KILN RESULTS DIFFER FROM OPENBLAS (see stderr) ***" : "; all kiln results match OpenBLAS");
    return rc;
}
