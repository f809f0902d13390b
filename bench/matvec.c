/* bench/matvec.c — decode matrix-vector contractions compiled by kiln on
 * Llama-8B shapes, in GB/s of weight bytes and as a fraction of the read
 * bandwidth `kiln device` measures for the same thread count.
 *
 * One program per (dtype, shape): y_i = linear(x, W_i), x one row of k f32,
 * W_i (n, k) in the block format, i = 0 .. L-1 with L distinct weights so
 * that they hold at least 4x the last-level cache together (each launch then
 * reads its weight from DRAM, as a decode step does, 32 layers deep). The
 * bytes are the weights' bytes in their GGUF format (what a decode step
 * must read; the copy a schedule reads may be a few percent larger). Each
 * point: `rounds` rounds of (one warm-up run, then 5 timed runs), the
 * median of each round; printed: the median of the round medians and the
 * slowest and fastest round. The machine this runs on is shared: one
 * number alone means little.
 *
 * Usage: matvec [threads] [rounds] [dtypes] [shapes]
 *   dtypes: comma list of q8_0, q4_k, q6_k (default q8_0,q4_k,q6_k)
 *   shapes: comma list of NxK (default 14336x4096,4096x14336,4096x4096,1024x4096)
 * KILN_BENCH_BUDGET=S (with KILN_TUNEDB pointing at a scratch file): each
 * contraction's decode schedule is searched during the first warm-up run.
 * Without it the tuning DB's record or the cost model's first choice runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    qsort(v, (size_t)n, sizeof v[0], cmp_d);
    return v[n / 2];
}

/* bytes of n x k elements of t; 0 when k is not whole blocks */
static size_t format_bytes(kiln_dtype t, int64_t n, int64_t k) {
    int64_t be = t == KILN_Q8_0 ? 32 : 256, bb = t == KILN_Q8_0 ? 34 : t == KILN_Q4_K ? 144 : 210;
    return k % be ? 0 : (size_t)(n * (k / be) * bb);
}

/* one weight of n x k in t, quantised row by row from a cheap generator */
static void *make_weight(kiln_dtype t, int64_t n, int64_t k, unsigned seed, size_t *bytes) {
    *bytes = format_bytes(t, n, k);
    uint8_t *w = malloc(*bytes);
    float *row = malloc((size_t)k * sizeof *row);
    size_t rb = *bytes / (size_t)n;
    unsigned s = seed * 2654435761u + 1;
    for (int64_t r = 0; r < n && w && row; r++) {
        for (int64_t i = 0; i < k; i++) {
            s = s * 1664525u + 1013904223u;
            row[i] = (float)((int)(s >> 9 & 0xffff) - 32768) * (1.0f / 32768.0f);
        }
        kiln_quantize(t, row, w + (size_t)r * rb, k);
    }
    free(row);
    return w;
}

/* a copy of the first weight at its own address: the launches read
 * distinct memory, which is what the bandwidth needs, without quantising
 * every one (at 4x a 480 MiB L3, a few GB) */
static void *copy_weight(const void *w0, size_t wb, size_t *bytes) {
    void *w = w0 ? malloc(wb) : NULL;
    if (w) memcpy(w, w0, wb);
    *bytes = wb;
    return w;
}

/* bytes of distinct weights per program: 4x the last-level cache (at least
 * 128 MiB), so that each launch reads its weight from DRAM even where the
 * L3 is hundreds of MiB; at most a quarter of the memory */
static size_t distinct_bytes(void) {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    size_t want = l3 > 0 ? 4 * (size_t)l3 : 0, most = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz / 4 : (size_t)4 << 30;
    if (want < ((size_t)128 << 20)) want = (size_t)128 << 20;
    return want < most ? want : most;
}

/* the median of `rounds` round medians of one run of all L launches (s) */
static int run_one(kiln_dtype t, int64_t n, int64_t k, int threads, int rounds, double *gbs, double *lo, double *hi) {
    size_t wb = format_bytes(t, n, k);
    if (wb == 0) return -1;
    int L = (int)(distinct_bytes() / wb) + 1;
    if (L < 2) L = 2;
    char shape[64];
    snprintf(shape, sizeof shape, "%lld, %lld", (long long)n, (long long)k);
    kiln_graph *g = kiln_graph_new();
    char xshape[32];
    snprintf(xshape, sizeof xshape, "1, %lld", (long long)k);
    kiln_tensor x = kiln_input(g, "x", KILN_F32, xshape);
    void **ws = calloc((size_t)L, sizeof *ws);
    float *xb = malloc((size_t)k * sizeof *xb);
    for (int64_t i = 0; i < k; i++) xb[i] = (float)((i * 7919) % 1000) * 0.001f - 0.5f;
    int ok = xb && ws;
    for (int i = 0; i < L && ok; i++) {
        char name[32];
        snprintf(name, sizeof name, "w%d", i);
        kiln_tensor w = kiln_input(g, name, t, shape);
        snprintf(name, sizeof name, "y%d", i);
        kiln_output(g, kiln_linear(g, x, w, KILN_NONE), name);
        size_t b = 0;
        ws[i] = i == 0 ? make_weight(t, n, k, 1u, &b) : copy_weight(ws[0], wb, &b);
        snprintf(name, sizeof name, "w%d", i);
        ok = ws[i] && kiln_bind_weight(g, name, ws[i], b) == KILN_OK;
    }
    ok = ok && kiln_bind_input(g, "x", xb, (size_t)k * sizeof *xb) == KILN_OK;
    kiln_compile_options opt = kiln_compile_defaults();
    opt.threads = threads;
    const char *bb = getenv("KILN_BENCH_BUDGET");
    if (bb && bb[0]) opt.search_budget = atof(bb);
    kiln_program *p = ok ? kiln_compile(g, &opt, NULL) : NULL;
    if (!p) fprintf(stderr, "%s %lldx%lld: compile failed: %s\n", kiln_dtype_name(t), (long long)n, (long long)k,
                    kiln_graph_error(g));
    double rm[64];
    for (int rd = 0; p && rd < rounds; rd++) {
        double tt[5];
        if (kiln_run(p) != KILN_OK) { /* warm-up: copies, page faults; with a budget, the search */
            fprintf(stderr, "run failed: %s\n", kiln_graph_error(g));
            ok = 0;
            break;
        }
        for (int r = 0; r < 5; r++) {
            double t0 = now_s();
            kiln_run(p);
            tt[r] = now_s() - t0;
        }
        rm[rd] = median(tt, 5);
    }
    if (p && ok) {
        double med = median(rm, rounds), bytes = (double)wb * L;
        *gbs = bytes / med / 1e9;
        *lo = bytes / rm[rounds - 1] / 1e9;
        *hi = bytes / rm[0] / 1e9;
    }
    kiln_program_free(p);
    kiln_graph_free(g);
    for (int i = 0; ws && i < L; i++) free(ws[i]);
    free(ws);
    free(xb);
    return p && ok ? 0 : -1;
}

static int parse_dtype(const char *s, kiln_dtype *t) {
    if (strcmp(s, "q8_0") == 0) *t = KILN_Q8_0;
    else if (strcmp(s, "q4_k") == 0) *t = KILN_Q4_K;
    else if (strcmp(s, "q6_k") == 0) *t = KILN_Q6_K;
    else return 0;
    return 1;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    char dtypes[256] = "q8_0,q4_k,q6_k", shapes[256] = "14336x4096,4096x14336,4096x4096,1024x4096";
    if (argc > 3) snprintf(dtypes, sizeof dtypes, "%s", argv[3]);
    if (argc > 4) snprintf(shapes, sizeof shapes, "%s", argv[4]);
    if (threads < 1 || rounds < 1 || rounds > 64) {
        fprintf(stderr, "usage: matvec [threads >= 1] [rounds 1..64] [dtypes] [shapes]\n");
        return 2;
    }
    double bw = 0;
    kiln_device_peaks(threads, &bw, NULL, NULL);
    printf("device read bandwidth at %d thread%s: %.1f GB/s; %d rounds per point\n\n", threads, threads > 1 ? "s" : "",
           bw, rounds);
    printf("%-6s %12s %10s %17s %7s\n", "dtype", "n x k", "GB/s", "(rounds lo-hi)", "of bw");
    int bad = 0;
    for (char *ds = strtok(dtypes, ","); ds; ds = strtok(NULL, ",")) {
        kiln_dtype t;
        if (!parse_dtype(ds, &t)) {
            fprintf(stderr, "matvec: unknown dtype %s (q8_0, q4_k, q6_k)\n", ds);
            return 2;
        }
        char sh[256];
        snprintf(sh, sizeof sh, "%s", shapes);
        char *save = NULL;
        for (char *s = strtok_r(sh, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
            long long n = 0, k = 0;
            if (sscanf(s, "%lldx%lld", &n, &k) != 2 || n < 8 || k < 256) {
                fprintf(stderr, "matvec: bad shape %s (NxK, n >= 8, k >= 256)\n", s);
                return 2;
            }
            double gbs = 0, lo = 0, hi = 0;
            if (run_one(t, n, k, threads, rounds, &gbs, &lo, &hi) != 0) {
                bad = 1;
                continue;
            }
            char nk[32];
            snprintf(nk, sizeof nk, "%lldx%lld", n, k);
            printf("%-6s %12s %10.2f    (%5.1f - %5.1f) %6.0f%%\n", ds, nk, gbs, lo, hi, bw > 0 ? 100 * gbs / bw : 0);
            fflush(stdout);
        }
    }
    return bad;
}
