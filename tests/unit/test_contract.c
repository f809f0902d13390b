/* test_contract.c — contractions: recognised by kernelize, compiled to the
 * CPU micro-kernel family, and equal to the reference interpreter.
 *
 * Every weight dtype (f32, f16, bf16 and the five block formats) times
 * decode and prefill row counts (both emitted schedules) times K with and
 * without a tail; batched products through transposed views; fused
 * elementwise operands (forced into buffers); attention. (Block-format rows
 * that start mid-block cannot be built through the API — block axes cannot be
 * sliced — so the micro-kernel's scalar fallback for them is not reached here.)
 * Tolerance: the error of a K-term f32 sum (the vector path's contract).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kiln.h"
#include "kiln_compile.h"
#include "quant.h"
#include "weights.h"

/* whether the CPU has flag (" name" in /proc/cpuinfo's flags line) */
static int cpu_flag(const char *name) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096], pat[64];
    snprintf(pat, sizeof pat, " %s", name);
    int yes = 0;
    while (f && !yes && fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            const char *h = strstr(line, pat);
            yes = h && (h[strlen(pat)] == ' ' || h[strlen(pat)] == '\n');
        }
    if (f) fclose(f);
    return yes;
}

/* compile g, run it, compare output "y" with the reference; *contracted is
 * set when the compiled program has a contraction kernel */
static int compare_out(kiln_graph *g, const char *out, int64_t k_len, int *contracted, char *why, size_t cap) {
    if (kiln_eval_reference(g) != KILN_OK) {
        snprintf(why, cap, "reference: %s", kiln_graph_error(g));
        return 0;
    }
    int nd;
    int64_t dims[KILN_MAX_DIMS], n = 1;
    kiln_output_shape(g, out, &nd, dims);
    for (int d = 0; d < nd; d++) n *= dims[d];
    float *ref = malloc((size_t)n * sizeof *ref + 1), *got = malloc((size_t)n * sizeof *got + 1);
    kiln_read_output(g, out, ref, (size_t)n * sizeof *ref);
    kiln_status st;
    kiln_program *p = kiln_compile(g, NULL, &st);
    int ok = p != NULL;
    if (!p) snprintf(why, cap, "compile: %s", kiln_graph_error(g));
    if (ok && kiln_run(p) != KILN_OK) {
        snprintf(why, cap, "run: %s", kiln_graph_error(g));
        ok = 0;
    }
    if (ok) {
        char *text = kiln_program_kernels(p);
        *contracted = strstr(text, "contraction") != NULL;
        free(text);
        kiln_read_output(g, out, got, (size_t)n * sizeof *got);
        double tol_abs = 2e-6 * (double)k_len;
        for (int64_t i = 0; i < n && ok; i++) {
            double a = ref[i], b = got[i];
            if (!(fabs(a - b) <= tol_abs + 1e-4 * fabs(a))) {
                snprintf(why, cap, "element %lld: reference %.9g, compiled %.9g", (long long)i, a, b);
                ok = 0;
            }
        }
    }
    kiln_program_free(p);
    free(ref);
    free(got);
    return ok;
}

static int compare(kiln_graph *g, int64_t k_len, int *contracted, char *why, size_t cap) {
    return compare_out(g, "y", k_len, contracted, why, cap);
}

static const kiln_dtype wtypes[8] = {KILN_F32, KILN_F16, KILN_BF16, KILN_Q8_0,
                                     KILN_Q4_0, KILN_Q5_0, KILN_Q4_K, KILN_Q6_K};

/* y = x (m, k) . w (n, k)^T for every dtype, decode and prefill m, k with a tail */
static void test_linear(void) {
    const int64_t ms[3] = {1, 3, 13}, ns[2] = {5, 37};
    for (int ti = 0; ti < 8; ti++) {
        kiln_dtype t = wtypes[ti];
        int is_k = t == KILN_Q4_K || t == KILN_Q6_K;
        int is_block = kiln_dtype_is_block(t);
        const int64_t ks[2] = {is_k ? 256 : 64, is_k ? 512 : is_block ? 96 : 300};
        for (int ki = 0; ki < 2; ki++) {
            for (int ni = 0; ni < 2; ni++) {
                int64_t K = ks[ki], N = ns[ni];
                char name[96], why[300] = "";
                snprintf(name, sizeof name, "contract_linear_%s_k%lld_n%lld", kiln_dtype_name(t), (long long)K,
                         (long long)N);
                CASE_BEGIN(name);
                char wshape[64], xshape[64];
                snprintf(wshape, sizeof wshape, "%lld, %lld", (long long)N, (long long)K);
                snprintf(xshape, sizeof xshape, "m, %lld", (long long)K);
                kiln_graph *g = kiln_graph_new();
                kiln_tensor x = kiln_input(g, "x", KILN_F32, xshape);
                kiln_tensor w = kiln_input(g, "w", t, wshape);
                /* f16/bf16 weights are cast to f32 as the model builders do */
                kiln_tensor wf32 = t == KILN_F16 || t == KILN_BF16 ? kiln_cast(g, w, KILN_F32) : w;
                kiln_output(g, kiln_linear(g, x, wf32, KILN_NONE), "y");
                /* and a plain vector times the matrix (no m loop at all) */
                snprintf(xshape, sizeof xshape, "%lld", (long long)K);
                kiln_tensor xv = kiln_input(g, "xv", KILN_F32, xshape);
                kiln_output(g, kiln_linear(g, xv, wf32, KILN_NONE), "yv");
                CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
                float *xvb = rand_f32(K, -1, 1);
                kiln_bind_input(g, "xv", xvb, (size_t)K * sizeof(float));
                float *wf = rand_f32(N * K, -1, 1);
                size_t wbytes;
                void *wb = make_weights(t, wf, N * K, &wbytes);
                kiln_bind_input(g, "w", wb, wbytes);
                for (int mi = 0; mi < 3; mi++) {
                    float *xb = rand_f32(ms[mi] * K, -1, 1);
                    kiln_bind_dim(g, "m", ms[mi]);
                    kiln_bind_input(g, "x", xb, (size_t)(ms[mi] * K) * sizeof(float));
                    int contracted = 0;
                    CHECK(compare(g, K, &contracted, why, sizeof why), "m=%lld: %s", (long long)ms[mi], why);
                    CHECK(contracted, "m=%lld: no contraction kernel", (long long)ms[mi]);
                    CHECK(compare_out(g, "yv", K, &contracted, why, sizeof why), "vector: %s", why);
                    free(xb);
                }
                free(xvb);
                free(wf);
                free(wb);
                kiln_graph_free(g);
                CASE_END();
            }
        }
    }
}

/* batched products: (h, m, k) x transpose((h, n, k)) is a contraction with
 * a batch loop; (h, m, k) x (h, k, n) reads B along a stride (generic) */
static void test_batched(void) {
    for (int transposed = 0; transposed < 2; transposed++) {
        char why[300] = "";
        CASE_BEGIN(transposed ? "contract_batched_transposed_b" : "contract_batched_strided_b");
        kiln_graph *g = kiln_graph_new();
        kiln_tensor a = kiln_input(g, "a", KILN_F32, "3, m, 40");
        kiln_tensor b = transposed ? kiln_transpose(g, kiln_input(g, "b", KILN_F32, "3, 9, 40"), 1, 2)
                                   : kiln_input(g, "b", KILN_F32, "3, 40, 9");
        kiln_output(g, kiln_matmul(g, a, b), "y");
        CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
        float *ab = rand_f32(3 * 7 * 40, -1, 1), *bb = rand_f32(3 * 9 * 40, -1, 1);
        kiln_bind_dim(g, "m", 7);
        kiln_bind_input(g, "a", ab, 3 * 7 * 40 * sizeof(float));
        kiln_bind_input(g, "b", bb, 3 * 9 * 40 * sizeof(float));
        int contracted = 0;
        CHECK(compare(g, 40, &contracted, why, sizeof why), "%s", why);
        if (transposed) CHECK(contracted, "no contraction kernel");
        free(ab);
        free(bb);
        kiln_graph_free(g);
        CASE_END();
    }
}

/* an elementwise chain feeding a contraction (gelu before a projection) and a
 * bias added after it: the chain gets a buffer, the product a kernel */
static void test_fused_operands(void) {
    char why[300] = "";
    CASE_BEGIN("contract_fused_operand_and_bias");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "m, 64");
    kiln_tensor w1 = kiln_input(g, "w1", KILN_Q8_0, "96, 64");
    kiln_tensor b1 = kiln_input(g, "b1", KILN_F32, "96");
    kiln_tensor w2 = kiln_input(g, "w2", KILN_F32, "32, 96");
    kiln_tensor h = kiln_gelu_tanh(g, kiln_linear(g, x, w1, b1));
    kiln_output(g, kiln_linear(g, h, w2, KILN_NONE), "y");
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    float *xb = rand_f32(5 * 64, -1, 1), *w1f = rand_f32(96 * 64, -1, 1), *bb = rand_f32(96, -1, 1);
    float *w2b = rand_f32(32 * 96, -1, 1);
    size_t w1bytes;
    void *w1b = make_weights(KILN_Q8_0, w1f, 96 * 64, &w1bytes);
    kiln_bind_dim(g, "m", 5);
    kiln_bind_input(g, "x", xb, 5 * 64 * sizeof(float));
    kiln_bind_input(g, "w1", w1b, w1bytes);
    kiln_bind_input(g, "b1", bb, 96 * sizeof(float));
    kiln_bind_input(g, "w2", w2b, 32 * 96 * sizeof(float));
    int contracted = 0;
    CHECK(compare(g, 96, &contracted, why, sizeof why), "%s", why);
    CHECK(contracted, "no contraction kernel");
    free(xb);
    free(w1f);
    free(bb);
    free(w2b);
    free(w1b);
    kiln_graph_free(g);
    CASE_END();
}

/* compile g (inputs bound) for `threads` threads, run it and read output
 * "y" (n floats) into got; the kernels must carry `arith` ("arith=i8
 * (approximate)") and the source must call `call`. Returns 1 when it ran. */
static int run_approx_threads(kiln_graph *g, int64_t M, const char *arith, const char *call, float *got, int64_t n,
                              int threads) {
    kiln_status st;
    kiln_compile_options o = kiln_compile_defaults();
    o.threads = threads;
    kiln_program *p = kiln_compile(g, &o, &st);
    int ran = p && kiln_run(p) == KILN_OK;
    CHECK(ran, "m=%lld, %d threads: %s", (long long)M, threads, kiln_graph_error(g));
    if (ran) {
        char *text = kiln_program_kernels(p);
        CHECK(strstr(text, arith) != NULL, "m=%lld: no %s schedule", (long long)M, arith);
        free(text);
        const char *src = kiln_program_source(p);
        CHECK(src && strstr(src, call) != NULL, "m=%lld: no call of %s in the source", (long long)M, call);
        kiln_read_output(g, "y", got, (size_t)n * sizeof *got);
    }
    kiln_program_free(p);
    return ran;
}

/* run_approx_threads at 1 thread, and again at 2, which must give the same
 * bits: with two threads the AMX bf16 form converts A once for both
 * (emit_gemm_amx_bf16.h, CG_KF_PREP), with one each thread converts its own */
static int run_approx(kiln_graph *g, int64_t M, const char *arith, const char *call, float *got, int64_t n) {
    if (!run_approx_threads(g, M, arith, call, got, n, 1)) return 0;
    float *two = malloc((size_t)n * sizeof *two + 1);
    int same = 0;
    if (run_approx_threads(g, M, arith, call, two, n, 2)) {
        same = memcmp(got, two, (size_t)n * sizeof *got) == 0;
        CHECK(same, "m=%lld: 1 and 2 threads give different results", (long long)M);
    }
    free(two);
    return same;
}

/* the int8 forms' error bound: each output within A's rounding, sum over
 * A's blocks of grp (32, or 256 for k-quants) of (max|a| / 254) * sum |w|,
 * plus f32 noise. Returns the worst error / bound; why gets the first
 * output over it. x: [M][K], w: [N][K] (the f32 weights before quantising) */
static double int8_worst(const float *x, const float *w, const float *ref, const float *got, int64_t M, int64_t N,
                         int64_t K, int64_t grp, char *why, size_t cap) {
    double worst = 0;
    for (int64_t m = 0; m < M && !why[0]; m++)
        for (int64_t n = 0; n < N; n++) {
            double bound = 1e-4 * (double)K;
            for (int64_t b = 0; b < K / grp; b++) {
                double amax = 0, wsum = 0;
                for (int64_t e = 0; e < grp; e++) {
                    double a = fabs(x[m * K + grp * b + e]);
                    amax = a > amax ? a : amax;
                    wsum += fabs(w[n * K + grp * b + e]) * 1.1; /* dequantised |w| <= 1.1 |w| + step */
                }
                bound += amax / 254.0 * (wsum + (double)grp * 0.2);
            }
            double err = fabs(ref[m * N + n] - got[m * N + n]);
            if (err / bound > worst) worst = err / bound;
            if (err > bound && !why[0])
                snprintf(why, cap, "m=%lld n=%lld: reference %g, int8 %g, bound %g", (long long)m, (long long)n,
                         ref[m * N + n], got[m * N + n], bound);
        }
    return worst;
}

/* y = x w^T of graph g at m = M: x (M, K) bound to fresh random values
 * (*xb, the caller frees it), the reference interpreter's y (M, N) returned */
static float *reference_at(kiln_graph *g, int64_t M, int64_t K, int64_t N, float **xb) {
    *xb = rand_f32(M * K, -1, 1);
    kiln_bind_dim(g, "m", M);
    kiln_bind_input(g, "x", *xb, (size_t)(M * K) * sizeof(float));
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    float *ref = malloc((size_t)(M * N) * sizeof *ref);
    kiln_read_output(g, "y", ref, (size_t)(M * N) * sizeof *ref);
    return ref;
}

/* x (M, K) random into g's "x" (dim "m"), then the compiled int8 result
 * (run_approx: 1 and 2 threads, `tile` called) within int8_worst's bound of
 * the reference, and not exact (the int8 path really ran: an f32 result
 * would be within 1e-5); w: the f32 weights before quantising, grp: A's
 * rounding block */
static void check_int8_at(kiln_graph *g, int64_t M, int64_t K, int64_t N, const float *wf, int64_t grp,
                          const char *tile) {
    char why[300] = "";
    float *xb, *ref = reference_at(g, M, K, N, &xb), *got = malloc((size_t)(M * N) * sizeof *got);
    if (run_approx(g, M, "arith=i8 (approximate)", tile, got, M * N)) {
        double worst = int8_worst(xb, wf, ref, got, M, N, K, grp, why, sizeof why);
        CHECK(!why[0], "m=%lld: %s", (long long)M, why);
        CHECK(worst > 1e-4, "m=%lld: int8 result indistinguishable from f32 (worst %g of the bound)", (long long)M,
              worst);
    }
    free(ref);
    free(got);
    free(xb);
}

/* int8 arithmetic (an approximation): each output within the bound of A's
 * rounding, sum over A's blocks (32, or 256 for k-quants) of
 * (max|a| / 254) * sum |w|, plus f32 noise */
static void test_int8_form(const char *form, const char *small, const char *large, const int64_t ms[3],
                           const char *tile) {
    const kiln_dtype bt[5] = {KILN_Q8_0, KILN_Q4_0, KILN_Q5_0, KILN_Q4_K, KILN_Q6_K};
    for (int ti = 0; ti < 5; ti++) {
        kiln_dtype t = bt[ti];
        /* 32-element formats: an odd number of blocks (the dot tile's pairs
         * leave one) and K not a multiple of the packed forms' K block */
        int64_t K = t == KILN_Q4_K || t == KILN_Q6_K ? 512 : 544, N = 37;
        char name[96];
        snprintf(name, sizeof name, "contract_int8%s_%s", form, kiln_dtype_name(t));
        CASE_BEGIN(name);
        setenv("KILN_CONTRACT_SCHED_SMALL", small, 1);
        setenv("KILN_CONTRACT_SCHED_LARGE", large, 1);
        kiln_graph *g = kiln_graph_new();
        char shape[32];
        snprintf(shape, sizeof shape, "m, %lld", (long long)K);
        kiln_tensor x = kiln_input(g, "x", KILN_F32, shape);
        snprintf(shape, sizeof shape, "37, %lld", (long long)K);
        kiln_tensor w = kiln_input(g, "w", t, shape);
        kiln_output(g, kiln_linear(g, x, w, KILN_NONE), "y");
        float *wf = rand_f32(N * K, -1, 1);
        size_t wbytes;
        void *wb = make_weights(t, wf, N * K, &wbytes);
        kiln_bind_input(g, "w", wb, wbytes);
        for (int mi = 0; mi < 3; mi++) check_int8_at(g, ms[mi], K, N, wf, t == KILN_Q4_K || t == KILN_Q6_K ? 256 : 32, tile);
        unsetenv("KILN_CONTRACT_SCHED_SMALL");
        unsetenv("KILN_CONTRACT_SCHED_LARGE");
        free(wf);
        free(wb);
        kiln_graph_free(g);
        CASE_END();
    }
}

/* no tuning record and no schedule override: the cost model's first choice
 * (exec.c, cost_model_defaults), which on a VNNI CPU takes int8 arithmetic
 * for block-format weights in decode (M = 1); decode and prefill (M = 40)
 * within the int8 bound; with fixed_defaults the fixed f32 default */
static void test_cost_defaults(void) {
    const kiln_dtype bt[2] = {KILN_Q8_0, KILN_Q4_K};
    setenv("KILN_FIXED_DEFAULTS", "0", 1); /* main's "1" again at the end */
    for (int ti = 0; ti < 2; ti++) {
        kiln_dtype t = bt[ti];
        int64_t K = 512, N = 37;
        char name[96];
        snprintf(name, sizeof name, "contract_cost_defaults_%s", kiln_dtype_name(t));
        CASE_BEGIN(name);
        kiln_graph *g = kiln_graph_new();
        kiln_tensor x = kiln_input(g, "x", KILN_F32, "m, 512");
        kiln_tensor w = kiln_input(g, "w", t, "37, 512");
        kiln_output(g, kiln_linear(g, x, w, KILN_NONE), "y");
        float *wf = rand_f32(N * K, -1, 1);
        size_t wbytes;
        void *wb = make_weights(t, wf, N * K, &wbytes);
        kiln_bind_input(g, "w", wb, wbytes);
        /* at 1 and 2 threads each (the cost model may choose differently
         * for each, so the two need not agree bit for bit) */
        for (int threads = 1; threads <= 2; threads++)
            for (int64_t M = 1; M <= 40; M += 39) {
                char why[300] = "";
                float *xb, *ref = reference_at(g, M, K, N, &xb), *got = malloc((size_t)(M * N) * sizeof *got);
                if (run_approx_threads(g, M, "arith=i8 (approximate)", M == 1 ? "kci8_" : "", got, M * N, threads)) {
                    double worst = int8_worst(xb, wf, ref, got, M, N, K, t == KILN_Q4_K ? 256 : 32, why, sizeof why);
                    CHECK(!why[0], "m=%lld, %d threads: %s", (long long)M, threads, why);
                    /* decode takes int8 (the kci8_ call above); prefill of 37
                     * columns may be f32 by the cost model's choice */
                    if (M == 1) CHECK(worst > 1e-4, "m=1: int8 result indistinguishable from f32");
                }
                free(ref);
                free(got);
                free(xb);
            }
        kiln_compile_options o = kiln_compile_defaults();
        o.fixed_defaults = 1;
        kiln_status st;
        kiln_program *p = kiln_compile(g, &o, &st);
        CHECK(p != NULL, "fixed defaults: %s", kiln_graph_error(g));
        if (p) {
            char *text = kiln_program_kernels(p);
            CHECK(strstr(text, "arith=i8") == NULL && strstr(text, "arith=f32") != NULL,
                  "fixed defaults: not the f32 default:\n%s", text);
            free(text);
        }
        kiln_program_free(p);
        free(wf);
        free(wb);
        kiln_graph_free(g);
        CASE_END();
    }
    setenv("KILN_FIXED_DEFAULTS", "1", 1);
}

/* the dot form quantises A once per call and batch point, not per item:
 * x [3, m, K] times q8_0 weights, several items (nc=8 of N=37) per batch
 * point, so a stale row from another batch point or item would show */
static void test_int8_batch_points(void) {
    CASE_BEGIN("contract_int8_batch_points");
    const int64_t B = 3, m = 2, K = 96, N = 37;
    char why[300] = "";
    setenv("KILN_CONTRACT_SCHED_SMALL", "mr=1 nr=4 nc=8 mc=64 arith=i8", 1);
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "3, m, 96");
    kiln_tensor w = kiln_input(g, "w", KILN_Q8_0, "37, 96");
    kiln_output(g, kiln_linear(g, x, w, KILN_NONE), "y");
    float *wf = rand_f32(N * K, -1, 1), *xb = rand_f32(B * m * K, -1, 1);
    size_t wbytes;
    void *wb = make_weights(KILN_Q8_0, wf, N * K, &wbytes);
    kiln_bind_input(g, "w", wb, wbytes);
    kiln_bind_dim(g, "m", m);
    kiln_bind_input(g, "x", xb, (size_t)(B * m * K) * sizeof(float));
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    float ref[3 * 2 * 37], got[3 * 2 * 37];
    kiln_read_output(g, "y", ref, sizeof ref);
    if (run_approx(g, m, "arith=i8 (approximate)", "kci8_", got, B * m * N)) {
        double worst = int8_worst(xb, wf, ref, got, B * m, N, K, 32, why, sizeof why);
        CHECK(!why[0], "%s", why);
        CHECK(worst > 1e-4, "int8 result indistinguishable from f32 (worst %g of the bound)", worst);
    }
    unsetenv("KILN_CONTRACT_SCHED_SMALL");
    free(wf);
    free(xb);
    free(wb);
    kiln_graph_free(g);
    CASE_END();
}

/* AMX bf16 tiles (an approximation): A and the dequantised B rounded to
 * bf16, so each product is within 2^-7 of its own size: every output within
 * 2^-7 sum |a| |w| (|w| of the dequantised weight: <= 1.1 |w| + 0.2 here),
 * plus f32 noise; and not exact */
static void test_bf16_amx(const char *form, const char *large, const char *tile) {
    const kiln_dtype bt[5] = {KILN_Q8_0, KILN_Q4_0, KILN_Q5_0, KILN_Q4_K, KILN_Q6_K};
    const int64_t ms[3] = {5, 17, 40};
    for (int ti = 0; ti < 5; ti++) {
        kiln_dtype t = bt[ti];
        /* K not a multiple of the K block (256) where the format allows */
        int64_t K = t == KILN_Q4_K || t == KILN_Q6_K ? 512 : 544, N = 37;
        char name[96], why[300] = "", shape[32];
        snprintf(name, sizeof name, "contract_bf16%s_%s", form, kiln_dtype_name(t));
        CASE_BEGIN(name);
        setenv("KILN_CONTRACT_SCHED_LARGE", large, 1);
        kiln_graph *g = kiln_graph_new();
        snprintf(shape, sizeof shape, "m, %lld", (long long)K);
        kiln_tensor x = kiln_input(g, "x", KILN_F32, shape);
        snprintf(shape, sizeof shape, "37, %lld", (long long)K);
        kiln_tensor w = kiln_input(g, "w", t, shape);
        kiln_output(g, kiln_linear(g, x, w, KILN_NONE), "y");
        float *wf = rand_f32(N * K, -1, 1);
        size_t wbytes;
        void *wb = make_weights(t, wf, N * K, &wbytes);
        kiln_bind_input(g, "w", wb, wbytes);
        for (int mi = 0; mi < 3; mi++) {
            int64_t M = ms[mi];
            float *xb, *ref = reference_at(g, M, K, N, &xb), *got = malloc((size_t)(M * N) * sizeof *got);
            if (run_approx(g, M, "arith=bf16 (approximate)", tile, got, M * N)) {
                double worst = 0;
                for (int64_t m = 0; m < M && !why[0]; m++)
                    for (int64_t n = 0; n < N; n++) {
                        double sum = 0;
                        for (int64_t e = 0; e < K; e++) sum += fabs(xb[m * K + e]) * (1.1 * fabs(wf[n * K + e]) + 0.2);
                        double bound = sum / 128.0 + 1e-5 * (double)K;
                        double err = fabs(ref[m * N + n] - got[m * N + n]);
                        if (err / bound > worst) worst = err / bound;
                        if (err > bound)
                            snprintf(why, sizeof why, "m=%lld n=%lld: reference %g, bf16 %g, bound %g", (long long)m,
                                     (long long)n, ref[m * N + n], got[m * N + n], bound);
                    }
                CHECK(!why[0], "%s", why);
                CHECK(worst > 1e-4, "m=%lld: bf16 result indistinguishable from f32 (worst %g of the bound)", (long long)M,
                      worst);
            }
            free(ref);
            free(got);
            free(xb);
        }
        unsetenv("KILN_CONTRACT_SCHED_LARGE");
        free(wf);
        free(wb);
        kiln_graph_free(g);
        CASE_END();
    }
}

/* AMX bf16 tiles with f32 B that the graph computes (search.h b_activation:
 * attention's keys and values), K not a multiple of 32 (both operands
 * zero-padded): B contiguous along K, (h, m, k) x transpose((h, n, k)), and
 * B strided along K, (h, m, k) x (h, k, n); B = b1 + b2 so that it is an
 * intermediate. Within 2^-7 sum |a| |b| plus f32 noise, and not exact. */
static void test_bf16_f32(const char *form, const char *large, const char *pack_rows, const char *pack_strided) {
    const int64_t ms[3] = {5, 17, 40}, K = 45, N = 37, H = 2;
    for (int strided = 0; strided < 2; strided++) {
        char name[96], why[300] = "";
        snprintf(name, sizeof name, "contract_bf16%s_f32_%s", form, strided ? "strided" : "rows");
        CASE_BEGIN(name);
        setenv("KILN_CONTRACT_SCHED_LARGE", large, 1);
        kiln_graph *g = kiln_graph_new();
        kiln_tensor a = kiln_input(g, "a", KILN_F32, "2, m, 45");
        const char *bshape = strided ? "2, 45, 37" : "2, 37, 45";
        kiln_tensor b = kiln_add(g, kiln_input(g, "b1", KILN_F32, bshape), kiln_input(g, "b2", KILN_F32, bshape));
        kiln_output(g, kiln_matmul(g, a, strided ? b : kiln_transpose(g, b, 1, 2)), "y");
        CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
        float *b1 = rand_f32(H * K * N, -1, 1), *b2 = rand_f32(H * K * N, -1, 1);
        kiln_bind_input(g, "b1", b1, (size_t)(H * K * N) * sizeof(float));
        kiln_bind_input(g, "b2", b2, (size_t)(H * K * N) * sizeof(float));
        for (int mi = 0; mi < 3 && !why[0]; mi++) {
            int64_t M = ms[mi];
            float *ab = rand_f32(H * M * K, -1, 1);
            kiln_bind_dim(g, "m", M);
            kiln_bind_input(g, "a", ab, (size_t)(H * M * K) * sizeof(float));
            CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
            float *ref = malloc((size_t)(H * M * N) * sizeof *ref), *got = malloc((size_t)(H * M * N) * sizeof *got);
            kiln_read_output(g, "y", ref, (size_t)(H * M * N) * sizeof *ref);
            const char *pack = strided ? pack_strided : pack_rows;
            if (run_approx(g, M, "arith=bf16 (approximate)", pack, got, H * M * N)) {
                double worst = 0;
                for (int64_t h = 0; h < H; h++)
                    for (int64_t m = 0; m < M && !why[0]; m++)
                        for (int64_t n = 0; n < N; n++) {
                            double sum = 0;
                            for (int64_t e = 0; e < K; e++) {
                                int64_t bi = strided ? (h * K + e) * N + n : (h * N + n) * K + e;
                                sum += fabs(ab[(h * M + m) * K + e]) * fabs(b1[bi] + b2[bi]);
                            }
                            double bound = sum / 128.0 + 1e-5 * (double)K;
                            int64_t o = (h * M + m) * N + n;
                            double err = fabs(ref[o] - got[o]);
                            if (err / bound > worst) worst = err / bound;
                            if (err > bound)
                                snprintf(why, sizeof why, "m=%lld h=%lld n=%lld: reference %g, bf16 %g, bound %g", (long long)m,
                                         (long long)h, (long long)n, ref[o], got[o], bound);
                        }
                CHECK(!why[0], "%s", why);
                CHECK(worst > 1e-4, "m=%lld: bf16 result indistinguishable from f32 (worst %g of the bound)", (long long)M,
                      worst);
            }
            free(ref);
            free(got);
            free(ab);
        }
        unsetenv("KILN_CONTRACT_SCHED_LARGE");
        free(b1);
        free(b2);
        kiln_graph_free(g);
        CASE_END();
    }
}

/* A bound as a weight (a convolution's filters): the runtime converts it to
 * bf16 tiles once and keeps the conversion across runs (cpu_run.c,
 * const_a). A program compiled once, run on one weight, then on new values
 * in the same memory bound again, then on another buffer: each result
 * within the bf16 bound of its own reference, so a conversion kept past a
 * new bind fails; 1 and 2 threads give the same bits. */
static void test_bf16_const_a(const char *form, const char *large) {
    const int64_t M = 40, K = 45, N = 37;
    char name[96], why[300] = "";
    snprintf(name, sizeof name, "contract_bf16%s_weight_a", form);
    CASE_BEGIN(name);
    setenv("KILN_CONTRACT_SCHED_LARGE", large, 1);
    kiln_graph *g = kiln_graph_new();
    kiln_tensor a = kiln_input(g, "a", KILN_F32, "40, 45");
    kiln_tensor b = kiln_add(g, kiln_input(g, "b1", KILN_F32, "37, 45"), kiln_input(g, "b2", KILN_F32, "37, 45"));
    kiln_output(g, kiln_matmul(g, a, kiln_transpose(g, b, 0, 1)), "y");
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    float *b1 = rand_f32(N * K, -1, 1), *b2 = rand_f32(N * K, -1, 1);
    float *a1 = rand_f32(M * K, -1, 1), *a2 = rand_f32(M * K, -1, 1);
    kiln_bind_input(g, "b1", b1, (size_t)(N * K) * sizeof(float));
    kiln_bind_input(g, "b2", b2, (size_t)(N * K) * sizeof(float));
    float *ref = malloc((size_t)(M * N) * sizeof *ref), *got[2] = {malloc((size_t)(M * N) * sizeof(float)),
                                                                     malloc((size_t)(M * N) * sizeof(float))};
    kiln_program *p[2] = {NULL, NULL};
    for (int t = 0; t < 2; t++) {
        kiln_status st;
        kiln_compile_options o = kiln_compile_defaults();
        o.threads = t + 1;
        kiln_bind_weight(g, "a", a1, (size_t)(M * K) * sizeof(float));
        p[t] = kiln_compile(g, &o, &st);
        CHECK(p[t] != NULL, "%d threads: %s", t + 1, kiln_graph_error(g));
    }
    if (p[0] && p[1]) {
        char *text = kiln_program_kernels(p[0]);
        CHECK(strstr(text, "arith=bf16 (approximate)") != NULL, "no bf16 schedule");
        free(text);
        /* step 0: a1; step 1: a1's memory overwritten with a2's values and
         * bound again; step 2: a2's own buffer */
        float *keep = malloc((size_t)(M * K) * sizeof *keep);
        memcpy(keep, a1, (size_t)(M * K) * sizeof *keep);
        for (int step = 0; step < 3 && !why[0]; step++) {
            const float *aw = step == 2 ? a2 : a1;
            if (step == 1) memcpy(a1, a2, (size_t)(M * K) * sizeof *a1);
            kiln_bind_weight(g, "a", aw, (size_t)(M * K) * sizeof(float));
            CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
            kiln_read_output(g, "y", ref, (size_t)(M * N) * sizeof *ref);
            for (int t = 0; t < 2; t++) {
                CHECK(kiln_run(p[t]) == KILN_OK, "step %d, %d threads: %s", step, t + 1, kiln_graph_error(g));
                kiln_read_output(g, "y", got[t], (size_t)(M * N) * sizeof(float));
            }
            CHECK(memcmp(got[0], got[1], (size_t)(M * N) * sizeof(float)) == 0, "step %d: 1 and 2 threads differ", step);
            for (int64_t m = 0; m < M && !why[0]; m++)
                for (int64_t n = 0; n < N; n++) {
                    double sum = 0;
                    for (int64_t e = 0; e < K; e++) sum += fabs(aw[m * K + e]) * fabs(b1[n * K + e] + b2[n * K + e]);
                    double bound = sum / 128.0 + 1e-5 * (double)K, err = fabs(ref[m * N + n] - got[0][m * N + n]);
                    if (err > bound)
                        snprintf(why, sizeof why, "step %d m=%lld n=%lld: reference %g, bf16 %g, bound %g", step,
                                 (long long)m, (long long)n, ref[m * N + n], got[0][m * N + n], bound);
                }
        }
        CHECK(!why[0], "%s", why);
        free(keep);
    }
    for (int t = 0; t < 2; t++) kiln_program_free(p[t]);
    unsetenv("KILN_CONTRACT_SCHED_LARGE");
    free(ref);
    free(got[0]);
    free(got[1]);
    free(a1);
    free(a2);
    free(b1);
    free(b2);
    kiln_graph_free(g);
    CASE_END();
}

/* the packed bf16 form stops each tile at its rows' last nonzero pair of A
 * (emit_gemm_bf16.c): rows of A end in zeros after 0..40 of K = 45, as
 * causal attention's probabilities do, and B's k >= 40 are NaN. The result
 * must be every row's sum over its own nonzero prefix (within the bf16
 * bound): a tile that stopped at its shortest row would drop terms, and one
 * that read past its rows' ends would turn NaN. With kc = 32 the second K
 * block starts inside some rows' prefixes and past others'. */
static void test_bf16_zero_tails(const char *large) {
    const int64_t ms[2] = {17, 40}, K = 45, N = 37, H = 2, KN = 40;
    char why[300] = "";
    CASE_BEGIN("contract_bf16_packed_zero_tails");
    setenv("KILN_CONTRACT_SCHED_LARGE", large, 1);
    kiln_graph *g = kiln_graph_new();
    kiln_tensor a = kiln_input(g, "a", KILN_F32, "2, m, 45");
    kiln_tensor b = kiln_add(g, kiln_input(g, "b1", KILN_F32, "2, 45, 37"), kiln_input(g, "b2", KILN_F32, "2, 45, 37"));
    kiln_output(g, kiln_matmul(g, a, b), "y");
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    float *b1 = rand_f32(H * K * N, -1, 1), *b2 = rand_f32(H * K * N, -1, 1);
    for (int64_t h = 0; h < H; h++)
        for (int64_t e = KN; e < K; e++)
            for (int64_t n = 0; n < N; n++) b1[(h * K + e) * N + n] = NAN;
    kiln_bind_input(g, "b1", b1, (size_t)(H * K * N) * sizeof(float));
    kiln_bind_input(g, "b2", b2, (size_t)(H * K * N) * sizeof(float));
    for (int mi = 0; mi < 2 && !why[0]; mi++) {
        int64_t M = ms[mi];
        float *ab = rand_f32(H * M * K, -1, 1), *got = malloc((size_t)(H * M * N) * sizeof *got);
        for (int64_t h = 0; h < H; h++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t e = (m * 7 + h * 13) % (KN + 1); e < K; e++) ab[(h * M + m) * K + e] = 0.0f;
        kiln_bind_dim(g, "m", M);
        kiln_bind_input(g, "a", ab, (size_t)(H * M * K) * sizeof(float));
        if (run_approx(g, M, "arith=bf16 (approximate)", "kgb_pack_strided((const float *)W", got, H * M * N)) {
            for (int64_t h = 0; h < H; h++)
                for (int64_t m = 0; m < M && !why[0]; m++)
                    for (int64_t n = 0; n < N; n++) {
                        double sum = 0, mag = 0;
                        for (int64_t e = 0; e < (m * 7 + h * 13) % (KN + 1); e++) {
                            double x = ab[(h * M + m) * K + e], y = (double)b1[(h * K + e) * N + n] + b2[(h * K + e) * N + n];
                            sum += x * y;
                            mag += fabs(x * y);
                        }
                        double err = fabs(sum - got[(h * M + m) * N + n]), bound = mag / 128.0 + 1e-5 * (double)K;
                        if (!(err <= bound))
                            snprintf(why, sizeof why, "m=%lld h=%lld n=%lld: exact %g, bf16 %g, bound %g", (long long)m,
                                     (long long)h, (long long)n, sum, got[(h * M + m) * N + n], bound);
                    }
            CHECK(!why[0], "%s", why);
        }
        free(ab);
        free(got);
    }
    unsetenv("KILN_CONTRACT_SCHED_LARGE");
    free(b1);
    free(b2);
    kiln_graph_free(g);
    CASE_END();
}

/* kiln_attention of q (s, 4, 32) with k, v (t, 2, 32) at q_pos = t - s */
static kiln_graph *attention_gqa(int64_t window) {
    kiln_graph *g = kiln_graph_new();
    kiln_tensor q = kiln_input(g, "q", KILN_F32, "s, 4, 32");
    kiln_tensor k = kiln_input(g, "k", KILN_F32, "t, 2, 32");
    kiln_tensor v = kiln_input(g, "v", KILN_F32, "t, 2, 32");
    kiln_output(g, kiln_attention(g, q, k, v, kiln_sym_parse(g, "t - s"), 0.17, window), "y");
    return g;
}

static void test_attention(void) {
    char why[300] = "";
    CASE_BEGIN("contract_attention_gqa");
    kiln_graph *g = attention_gqa(0);
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    float *qb = rand_f32(5 * 4 * 32, -1, 1), *kb = rand_f32(11 * 2 * 32, -1, 1), *vb = rand_f32(11 * 2 * 32, -1, 1);
    kiln_bind_dim(g, "s", 5);
    kiln_bind_dim(g, "t", 11);
    kiln_bind_input(g, "q", qb, 5 * 4 * 32 * sizeof(float));
    kiln_bind_input(g, "k", kb, 11 * 2 * 32 * sizeof(float));
    kiln_bind_input(g, "v", vb, 11 * 2 * 32 * sizeof(float));
    int contracted = 0;
    CHECK(compare(g, 32, &contracted, why, sizeof why), "%s", why);
    free(qb);
    free(kb);
    free(vb);
    kiln_graph_free(g);
    CASE_END();
}


/* y = (q k^T) * mask (s, t) with mask = [j < i + (t - s) + 1], the causal
 * mask kiln_attention builds, from i32 iotas; when `recip` the product is
 * taken of 1/(q k^T) (a chain op that turns a stored 0 into inf), when
 * `twice` the scores are an output as well */
static kiln_graph *masked_scores(int recip, int twice) {
    kiln_graph *g = kiln_graph_new();
    kiln_tensor q = kiln_input(g, "q", KILN_F32, "s, 32");
    kiln_tensor k = kiln_add(g, kiln_input(g, "k1", KILN_F32, "t, 32"), kiln_input(g, "k2", KILN_F32, "t, 32"));
    kiln_tensor sc = kiln_matmul(g, q, kiln_transpose(g, k, 0, 1));
    kiln_sym t = kiln_sym_parse(g, "t"), one = kiln_sym_parse(g, "1"), js[2] = {one, t};
    kiln_tensor j = kiln_iota(g, KILN_I32, 2, js, 1); /* (1, t): j */
    kiln_tensor pos = kiln_slice(g, kiln_iota(g, KILN_I32, 1, &t, 0), 0, kiln_sym_parse(g, "t - s"), t, 1); /* t - s + i */
    kiln_tensor lim = kiln_add(g, kiln_unsqueeze(g, pos, 1), kiln_const(g, 1, KILN_I32)); /* (s, 1) */
    kiln_tensor mask = kiln_cast(g, kiln_lt(g, j, lim), KILN_F32);
    kiln_output(g, kiln_mul(g, recip ? kiln_recip(g, sc) : sc, mask), "y");
    if (twice) kiln_output(g, sc, "scores");
    return g;
}

/* the kernels' text of g compiled with the defaults (NULL: did not compile) */
static char *kernels_of(kiln_graph *g) {
    kiln_status st;
    kiln_program *p = kiln_compile(g, NULL, &st);
    char *text = p ? kiln_program_kernels(p) : NULL;
    kiln_program_free(p);
    return text;
}

/* the causal bound of attention's scores (demand.c): found in
 * kiln_attention, with and without a window, for the scores only; found in
 * a hand-built mask, and not where the scores have a second use or a 1/x
 * on the way to the mask */
static void test_causal_bound_found(void) {
    CASE_BEGIN("contract_causal_bound_found");
    for (int w = 0; w < 2; w++) {
        kiln_graph *g = attention_gqa(w ? 3 : 0);
        char *text = kernels_of(g);
        const char *u = text ? strstr(text, "used where i3 < i0 + ") : NULL;
        CHECK(u && !strstr(u + 1, "used where"), "window %d: the scores' causal bound, and only theirs: %s", w,
              text ? text : kiln_graph_error(g));
        free(text);
        kiln_graph_free(g);
    }
    for (int c = 0; c < 3; c++) { /* plain, 1/x, a second use */
        kiln_graph *g = masked_scores(c == 1, c == 2);
        char *text = kernels_of(g);
        int found = text && strstr(text, "used where i1 < i0 + ") != NULL;
        CHECK(text && found == (c == 0), "case %d: bound %s: %s", c, found ? "found" : "not found",
              text ? text : kiln_graph_error(g));
        free(text);
        kiln_graph_free(g);
    }
    CASE_END();
}

/* a packed form on the bound (bf16: the strips; f32: the K steps): with
 * s = 40, t = 45 and key 44 NaN, the masked product is 0 where a strip was
 * skipped (the reference's NaN x 0 is NaN there: the documented
 * difference), NaN or 0 elsewhere past the mask, NaN in key 44's column
 * before it, and every other output within tol of the reference */
static void test_causal_skip(const char *name, const char *sched, const char *arith, float tol) {
    CASE_BEGIN(name);
    char why[300] = "";
    const int64_t S = 40, T = 45, off = T - S + 1;
    setenv("KILN_CONTRACT_SCHED_LARGE", sched, 1);
    kiln_graph *g = masked_scores(0, 0);
    float *qb = rand_f32(S * 32, -1, 1), *k1 = rand_f32(T * 32, -1, 1), *k2 = rand_f32(T * 32, -1, 1);
    k1[44 * 32 + 5] = NAN;
    float *ref = malloc((size_t)(S * T) * sizeof *ref), *got = malloc((size_t)(S * T) * sizeof *got);
    kiln_bind_dim(g, "s", S);
    kiln_bind_dim(g, "t", T);
    kiln_bind_input(g, "q", qb, (size_t)(S * 32) * sizeof(float));
    kiln_bind_input(g, "k1", k1, (size_t)(T * 32) * sizeof(float));
    kiln_bind_input(g, "k2", k2, (size_t)(T * 32) * sizeof(float));
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    kiln_read_output(g, "y", ref, (size_t)(S * T) * sizeof *ref);
    int skipped = 0;
    if (run_approx(g, S, arith, "kg", got, S * T)) {
        for (int64_t i = 0; i < S && !why[0]; i++)
            for (int64_t j = 0; j < T; j++) {
                float r = ref[i * T + j], x = got[i * T + j];
                if (j >= i + off && isnan(r) && x == 0.0f) skipped++;
                else if (j >= i + off ? !(x == 0.0f || isnan(x)) : j == 44 ? !isnan(x) : !(fabsf(x - r) <= tol))
                    snprintf(why, sizeof why, "i=%lld j=%lld: reference %g, bf16 %g", (long long)i, (long long)j, r, x);
            }
        CHECK(!why[0], "%s", why);
        CHECK(skipped > 0, "no masked strip was skipped");
    }
    unsetenv("KILN_CONTRACT_SCHED_LARGE");
    free(qb);
    free(k1);
    free(k2);
    free(ref);
    free(got);
    kiln_graph_free(g);
    CASE_END();
}

/* whole attention (s = 40, t = 45) with both products on the packed bf16
 * form (scores skipped past the mask, values stopped at each row's last
 * nonzero probability): within 2% of the largest output */
static void test_causal_attention_bf16(void) {
    CASE_BEGIN("contract_causal_attention_bf16");
    const int64_t S = 40, T = 45;
    setenv("KILN_CONTRACT_SCHED_LARGE", "mr=6 nr=16 nc=0 mc=64 arith=bf16 form=packed kc=0", 1);
    kiln_graph *g = attention_gqa(0);
    float *qb = rand_f32(S * 128, -1, 1), *kb = rand_f32(T * 64, -1, 1), *vb = rand_f32(T * 64, -1, 1);
    float *ref = malloc((size_t)(S * 128) * sizeof *ref), *got = malloc((size_t)(S * 128) * sizeof *got);
    kiln_bind_dim(g, "s", S);
    kiln_bind_dim(g, "t", T);
    kiln_bind_input(g, "q", qb, (size_t)(S * 128) * sizeof(float));
    kiln_bind_input(g, "k", kb, (size_t)(T * 64) * sizeof(float));
    kiln_bind_input(g, "v", vb, (size_t)(T * 64) * sizeof(float));
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    kiln_read_output(g, "y", ref, (size_t)(S * 128) * sizeof *ref);
    if (run_approx(g, S, "arith=bf16 (approximate)", "kgb_", got, S * 128)) {
        double big = 0, worst = 0;
        for (int64_t e = 0; e < S * 128; e++) big = fabs(ref[e]) > big ? fabs(ref[e]) : big;
        for (int64_t e = 0; e < S * 128; e++) worst = fabs(ref[e] - got[e]) > worst ? fabs(ref[e] - got[e]) : worst;
        CHECK(worst <= 0.02 * big, "attention under bf16: worst error %g of max %g", worst, big);
    }
    unsetenv("KILN_CONTRACT_SCHED_LARGE");
    free(qb);
    free(kb);
    free(vb);
    free(ref);
    free(got);
    kiln_graph_free(g);
    CASE_END();
}

/* a decode's rows are independent: y of `rows` rows of x (the rp tiles' 4-row
 * form, each group of B read once for the 4; past SCH_SMALL_M rows, up to
 * SCH_DECODE_TILE_ROWS, the same tiles 4 rows a call: a short prompt's
 * launch, CG_KF_DECODE_ROWS) equals, bit for bit, each row's y computed
 * alone at m = 1 (the 1-row tile), so a client's text in a batched server
 * step does not depend on the other clients, and a short prompt's rows are
 * its decode steps' rows. Returns how many rows differed. */
static int rows_alone_differ(kiln_graph *g, int64_t K, int64_t N, int64_t rows) {
    float *xs = rand_f32(rows * K, -1, 1), *ys = malloc((size_t)(rows * N) * sizeof *ys),
          *y1 = malloc((size_t)N * sizeof *y1);
    kiln_bind_dim(g, "m", rows);
    kiln_bind_input(g, "x", xs, (size_t)(rows * K) * sizeof(float));
    kiln_status st;
    kiln_program *p = kiln_compile(g, NULL, &st);
    int ok = p && kiln_run(p) == KILN_OK, differ = 0;
    CHECK(ok, "m=%lld: %s", (long long)rows, kiln_graph_error(g));
    if (ok) kiln_read_output(g, "y", ys, (size_t)(rows * N) * sizeof *ys);
    for (int64_t r = 0; ok && r < rows; r++) {
        kiln_bind_dim(g, "m", 1);
        kiln_bind_input(g, "x", xs + r * K, (size_t)K * sizeof(float));
        ok = kiln_run(p) == KILN_OK;
        CHECK(ok, "m=1, row %lld: %s", (long long)r, kiln_graph_error(g));
        if (!ok) break;
        kiln_read_output(g, "y", y1, (size_t)N * sizeof *y1);
        differ += memcmp(y1, ys + r * N, (size_t)N * sizeof *y1) != 0;
    }
    kiln_program_free(p);
    free(xs);
    free(ys);
    free(y1);
    return ok ? differ : -1;
}

static void check_rows_alone(kiln_graph *g, int64_t K, int64_t N) {
    int d = rows_alone_differ(g, K, N, 4);
    CHECK(d == 0, "%d of 4 rows differ from the rows alone", d);
    /* a short prompt: 13 rows (three 4-row calls and a 1-row one) */
    d = rows_alone_differ(g, K, N, 13);
    CHECK(d == 0, "%d of 13 rows differ from the rows alone: a short prompt did not run the decode tiles", d);
    /* the knob observed: at KILN_DECODE_TILE_ROWS=4 the 13 rows take the
     * prefill bucket (here the fixed f32 default: not the int8 rows) */
    setenv("KILN_DECODE_TILE_ROWS", "4", 1);
    d = rows_alone_differ(g, K, N, 13);
    unsetenv("KILN_DECODE_TILE_ROWS");
    CHECK(d > 0, "KILN_DECODE_TILE_ROWS=4: 13 rows still ran the decode tiles");
}

/* the decode tiles on B's repacked copy (rp=1, sched/repack_layout.h): q4_0,
 * q5_0, q8_0, q4_k and q6_k weights bound with kiln_bind_weight, K of 17
 * blocks (k-quants: 3), N = 37 (four
 * whole 8-row groups and a partial one read from B itself), M = 1..4 (the
 * tiles of 1 to 4 rows), one item or items of 16 rows, 1 and 2 threads,
 * within the int8 bound, and each of 4 rows bit for bit its result alone
 * (check_rows_alone).
 * The copy is observed, not assumed: after the program has run, B's
 * memory is overwritten without a new bind (which kiln_bind_weight's
 * contract forbids), and the rows of the whole groups still give the old
 * results bit for bit while the partial group's rows change; binding again
 * rebuilds the copy from the new contents; a plain kiln_bind_input makes
 * every row read B as it is. */
static void test_int8_repack(void) {
    static const char *rp_scheds[3] = {"mr=1 nr=8 nc=0 mc=64 arith=i8 pf=8 rp=1",
                                       "mr=1 nr=8 nc=16 mc=16 arith=i8 rp=1",
                                       "mr=1 nr=8 nc=0 mc=16 arith=i8 pf=8 rp=1 pf2=16"};
    static const char *rp_tags[3] = {"nc0", "nc16", "pf2"};
    const kiln_dtype bt[5] = {KILN_Q4_0, KILN_Q5_0, KILN_Q8_0, KILN_Q4_K, KILN_Q6_K};
    const int64_t N = 37, whole = 32;
    const size_t yn = 2 * (size_t)N;
    for (int ti = 0; ti < 5; ti++)
        for (int si = 0; si < 6; si++) {
            kiln_dtype t = bt[ti];
            /* K: 17 blocks of 32, or 3 of the k-quants' 256; A quantised
             * per 32 or 256 (cg_i8_group); si >= 3: K past 4096, read in
             * passes of 2048 (emit_contract.c rpacc) and a short last block;
             * schedule si % 3: one item, items of 16 rows, the far prefetch */
            const int kq = t == KILN_Q4_K || t == KILN_Q6_K, big = si >= 3;
            const int64_t K = (kq ? 768 : 544) + (big ? 4096 : 0), grp = kq ? 256 : 32;
            char xs[32], ws[32];
            snprintf(xs, sizeof xs, "m, %lld", (long long)K);
            snprintf(ws, sizeof ws, "37, %lld", (long long)K);
            char name[96], why[300] = "";
            snprintf(name, sizeof name, "contract_int8_repack_%s_%s%s", kiln_dtype_name(t), rp_tags[si % 3],
                     big ? "_k_passes" : "");
            CASE_BEGIN(name);
            setenv("KILN_CONTRACT_SCHED_SMALL", rp_scheds[si % 3], 1);
            kiln_graph *g = kiln_graph_new();
            kiln_tensor x = kiln_input(g, "x", KILN_F32, xs);
            kiln_tensor w = kiln_input(g, "w", t, ws);
            kiln_output(g, kiln_linear(g, x, w, KILN_NONE), "y");
            float *wf = rand_f32(N * K, -1, 1), *wf2 = rand_f32(N * K, -1, 1);
            size_t wbytes, wbytes2;
            void *wb = make_weights(t, wf, N * K, &wbytes), *wb2 = make_weights(t, wf2, N * K, &wbytes2);
            void *wmem = malloc(wbytes);
            memcpy(wmem, wb, wbytes);
            CHECK(kiln_bind_weight(g, "w", wmem, wbytes) == KILN_OK, "%s", kiln_graph_error(g));
            char tile[64];
            for (int64_t M = 1; M <= 4; M++) {
                /* the far prefetch's tiles are named by both levels: pf=8, pf2=16 */
                snprintf(tile, sizeof tile, "kcr_%s_%lldx8_p%s", kiln_dtype_name(t), (long long)M,
                         si % 3 == 2 ? "8_f16" : "");
                check_int8_at(g, M, K, N, wf, grp, tile);
            }
            check_int8_at(g, 13, K, N, wf, grp, tile);
            check_rows_alone(g, K, N);
            /* one program, three bindings of the same memory */
            float *xb = rand_f32(2 * K, -1, 1), *y1 = malloc(yn * sizeof *y1), *y2 = malloc(yn * sizeof *y2);
            float *ref = malloc(yn * sizeof *ref);
            kiln_bind_dim(g, "m", 2);
            kiln_bind_input(g, "x", xb, (size_t)(2 * K) * sizeof(float));
            kiln_status st;
            kiln_program *p = kiln_compile(g, NULL, &st);
            CHECK(p && kiln_run(p) == KILN_OK, "%s", kiln_graph_error(g));
            kiln_read_output(g, "y", y1, yn * sizeof *y1);
            memcpy(wmem, wb2, wbytes); /* no bind: the copy is what the whole groups read */
            CHECK(p && kiln_run(p) == KILN_OK, "%s", kiln_graph_error(g));
            kiln_read_output(g, "y", y2, yn * sizeof *y2);
            int copied = 1, tail_new = 1;
            for (int64_t i = 0; i < 2; i++)
                for (int64_t n = 0; n < N; n++) {
                    if (n < whole) copied &= memcmp(&y1[i * N + n], &y2[i * N + n], sizeof *y1) == 0;
                    else tail_new &= y1[i * N + n] != y2[i * N + n];
                }
            CHECK(copied, "rows of whole groups changed without a new bind: the copy was not read");
            CHECK(tail_new, "rows past the last whole group did not follow B's memory");
            for (int bi = 0; bi < 2; bi++) {
                /* bound again as a weight (the copy is rebuilt), then as a plain input (no copy) */
                if (bi == 0) kiln_bind_weight(g, "w", wmem, wbytes);
                else kiln_bind_input(g, "w", wmem, wbytes);
                CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
                kiln_read_output(g, "y", ref, yn * sizeof *ref);
                CHECK(p && kiln_run(p) == KILN_OK, "%s", kiln_graph_error(g));
                kiln_read_output(g, "y", y2, yn * sizeof *y2);
                why[0] = 0;
                (void)int8_worst(xb, wf2, ref, y2, 2, N, K, grp, why, sizeof why);
                CHECK(!why[0], "%s: %s", bi == 0 ? "bound again" : "bound as an input", why);
            }
            kiln_program_free(p);
            unsetenv("KILN_CONTRACT_SCHED_SMALL");
            free(xb);
            free(y1);
            free(y2);
            free(ref);
            free(wf);
            free(wf2);
            free(wb);
            free(wb2);
            free(wmem);
            kiln_graph_free(g);
            CASE_END();
        }
}

/* runs p and reads y (n floats) into out */
static int run_read(kiln_program *p, kiln_graph *g, float *out, size_t n) {
    int ok = p && kiln_run(p) == KILN_OK;
    CHECK(ok, "%s", kiln_graph_error(g));
    if (ok) kiln_read_output(g, "y", out, n * sizeof *out);
    return ok;
}

/* the two-group rp tile (cg_emit_i8_rp16_tile: 16 B rows in 512-bit
 * registers) against the 8-row one, bit for bit: q4_0, q5_0 and q8_0, M = 3
 * and 6 (a 4-row call and the rest), N = 64 (four 16-row pairs) in items
 * of 16 rows (the pair tile called, seen in the source) and of 8 rows
 * (nn + 16 past the item: the 8-row tile only), 1 and 2 threads, K of 17
 * blocks and past 4096 (the K passes' partial sums added to the pair's) */
static void test_int8_repack16(void) {
    const kiln_dtype bt[3] = {KILN_Q4_0, KILN_Q5_0, KILN_Q8_0};
    const int64_t N = 64;
    for (int ti = 0; ti < 3; ti++)
        for (int big = 0; big < 2; big++) {
            kiln_dtype t = bt[ti];
            const int64_t K = 544 + (big ? 4096 : 0);
            char xs[32], ws[32], name[96], tile[48];
            snprintf(xs, sizeof xs, "m, %lld", (long long)K);
            snprintf(ws, sizeof ws, "%lld, %lld", (long long)N, (long long)K);
            snprintf(name, sizeof name, "contract_int8_repack16_%s%s", kiln_dtype_name(t), big ? "_k_passes" : "");
            snprintf(tile, sizeof tile, "kcr_%s_1x16_p", kiln_dtype_name(t));
            CASE_BEGIN(name);
            kiln_graph *g = kiln_graph_new();
            kiln_tensor x = kiln_input(g, "x", KILN_F32, xs);
            kiln_tensor w = kiln_input(g, "w", t, ws);
            kiln_output(g, kiln_linear(g, x, w, KILN_NONE), "y");
            float *wf = rand_f32(N * K, -1, 1), *xb = rand_f32(6 * K, -1, 1);
            size_t wbytes;
            void *wb = make_weights(t, wf, N * K, &wbytes);
            CHECK(kiln_bind_weight(g, "w", wb, wbytes) == KILN_OK, "%s", kiln_graph_error(g));
            float *y[2];
            for (int m = 3; m <= 6; m += 3)
                for (int th = 1; th <= 2; th++) {
                    for (int v = 0; v < 2; v++) { /* items of 16 rows, then of 8 */
                        setenv("KILN_CONTRACT_SCHED_SMALL",
                               v == 0 ? "mr=1 nr=8 nc=16 mc=16 arith=i8 rp=1" : "mr=1 nr=8 nc=8 mc=16 arith=i8 rp=1", 1);
                        kiln_bind_dim(g, "m", m);
                        kiln_bind_input(g, "x", xb, (size_t)(m * K) * sizeof(float));
                        kiln_compile_options o = kiln_compile_defaults();
                        o.threads = th;
                        kiln_status st;
                        kiln_program *p = kiln_compile(g, &o, &st);
                        y[v] = malloc((size_t)(m * N) * sizeof(float));
                        CHECK(run_read(p, g, y[v], (size_t)(m * N)), "m=%d, threads %d", m, th);
                        const char *src = p ? kiln_program_source(p) : NULL;
                        if (v == 0) CHECK(src && strstr(src, tile), "items of 16 rows: no call of %s", tile);
                        kiln_program_free(p);
                    }
                    unsetenv("KILN_CONTRACT_SCHED_SMALL");
                    CHECK(memcmp(y[0], y[1], (size_t)(m * N) * sizeof(float)) == 0,
                          "m=%d, threads %d: the 16-row tile's results are not the 8-row tile's", m, th);
                    free(y[0]);
                    free(y[1]);
                }
            free(wf);
            free(xb);
            free(wb);
            kiln_graph_free(g);
            CASE_END();
        }
}

/* the pack copy (sched/repack_layout.h): a weight's strips packed by the first
 * prefill launch and read by the later ones. For the five block formats, at
 * 1 and 2 threads (each thread fills its own strips), N = 37 in strips of
 * 32 (a partial last strip), K in blocks of 256 (a short last one for the
 * 32-element formats), and q8_0 also with x of 3 batch points (the
 * copy's strips are per batch point; a block-format B cannot differ
 * between them in a graph, so those strips are the same): the first and second runs within the int8 bound of the
 * reference; B's memory overwritten without a new bind leaves the result
 * bit for bit (the copy is read, not B); bound again, the copy is rebuilt
 * and the result follows the new weights; with KILN_PACK_COPY=0 the
 * overwrite shows at once. */
static void test_int8_pack_copy(void) {
    const kiln_dtype bt[6] = {KILN_Q4_0, KILN_Q5_0, KILN_Q8_0, KILN_Q4_K, KILN_Q6_K, KILN_Q8_0};
    const int64_t N = 37, M = 17;
    for (int ti = 0; ti < 6; ti++) {
        kiln_dtype t = bt[ti];
        const int kq = t == KILN_Q4_K || t == KILN_Q6_K;
        const int64_t K = kq ? 768 : 544, grp = kq ? 256 : 32, nb = ti == 5 ? 3 : 1, rows = nb * M;
        const size_t yn = (size_t)(rows * N);
        char xs[32], ws[32], name[96], why[300] = "";
        snprintf(xs, sizeof xs, nb > 1 ? "3, m, %lld" : "m, %lld", (long long)K);
        snprintf(ws, sizeof ws, "37, %lld", (long long)K);
        snprintf(name, sizeof name, "contract_int8_pack_copy_%s%s", kiln_dtype_name(t), nb > 1 ? "_batch" : "");
        CASE_BEGIN(name);
        setenv("KILN_CONTRACT_SCHED_LARGE", "mr=4 nr=32 nc=0 mc=16 arith=i8 form=packed kc=256", 1);
        kiln_graph *g = kiln_graph_new();
        kiln_tensor x = kiln_input(g, "x", KILN_F32, xs);
        kiln_tensor w = kiln_input(g, "w", t, ws);
        kiln_output(g, kiln_linear(g, x, w, KILN_NONE), "y");
        CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
        float *wf = rand_f32(N * K, -1, 1), *wf2 = rand_f32(N * K, -1, 1), *xb = rand_f32(rows * K, -1, 1);
        size_t wbytes, wbytes2;
        void *wb = make_weights(t, wf, N * K, &wbytes), *wb2 = make_weights(t, wf2, N * K, &wbytes2);
        void *wmem = malloc(wbytes);
        float *ref = malloc(yn * sizeof *ref), *ref2 = malloc(yn * sizeof *ref2);
        float *y1 = malloc(yn * sizeof *y1), *y2 = malloc(yn * sizeof *y2);
        kiln_bind_dim(g, "m", M);
        kiln_bind_input(g, "x", xb, (size_t)(rows * K) * sizeof(float));
        memcpy(wmem, wb2, wbytes);
        kiln_bind_weight(g, "w", wmem, wbytes);
        CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
        kiln_read_output(g, "y", ref2, yn * sizeof *ref2);
        for (int mode = 0; mode < 3 && !why[0]; mode++) { /* 1 thread, 2 threads, 1 thread without copies */
            if (mode == 2) setenv("KILN_PACK_COPY", "0", 1);
            memcpy(wmem, wb, wbytes);
            kiln_bind_weight(g, "w", wmem, wbytes);
            CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
            kiln_read_output(g, "y", ref, yn * sizeof *ref);
            kiln_compile_options o = kiln_compile_defaults();
            o.threads = mode == 1 ? 2 : 1;
            kiln_status st;
            kiln_program *p = kiln_compile(g, &o, &st);
            for (int r = 0; r < 2 && run_read(p, g, y1, yn); r++) { /* the run that fills, the run that reads */
                (void)int8_worst(xb, wf, ref, y1, rows, N, K, grp, why, sizeof why);
                CHECK(!why[0], "mode %d, run %d: %s", mode, r, why);
            }
            const char *src = kiln_program_source(p);
            CHECK(src && strstr(src, "kgi_") && strstr(src, "pkh[3]"), "mode %d: no packed int8 tile reading a pack copy", mode);
            memcpy(wmem, wb2, wbytes); /* no bind */
            if (run_read(p, g, y2, yn)) {
                int same = memcmp(y1, y2, yn * sizeof *y1) == 0;
                if (mode < 2) CHECK(same, "mode %d: B overwritten without a bind changed the result: the copy was not read", mode);
                else CHECK(!same, "KILN_PACK_COPY=0: the result did not follow B's memory");
            }
            kiln_bind_weight(g, "w", wmem, wbytes); /* bound again: a new copy */
            if (run_read(p, g, y2, yn)) {
                (void)int8_worst(xb, wf2, ref2, y2, rows, N, K, grp, why, sizeof why);
                CHECK(!why[0], "mode %d, bound again: %s", mode, why);
            }
            kiln_program_free(p);
            unsetenv("KILN_PACK_COPY");
        }
        unsetenv("KILN_CONTRACT_SCHED_LARGE");
        free(wf);
        free(wf2);
        free(xb);
        free(wb);
        free(wb2);
        free(wmem);
        free(ref);
        free(ref2);
        free(y1);
        free(y2);
        kiln_graph_free(g);
        CASE_END();
    }
}

int main(void) {
    setenv("KILN_POISON_RESULTS", "1", 1); /* unwritten output elements show as NaN (exec.c) */
    /* the f32 cases are held to f32 tolerances: contractions without a
     * schedule override keep the fixed f32 default (test_cost_defaults
     * checks the cost model's choice on its own) */
    setenv("KILN_FIXED_DEFAULTS", "1", 1);
    test_linear();
    test_batched();
    test_fused_operands();
    test_attention();
    test_causal_bound_found();
    if (cpu_flag("avx512f"))
        test_causal_skip("contract_causal_skip_f32", "mr=6 nr=16 nc=0 mc=64 arith=f32 form=packed kc=0", "arith=f32", 1e-4f);
    if (cpu_flag("avx512_bf16")) {
        test_causal_skip("contract_causal_skip_bf16", "mr=6 nr=16 nc=0 mc=64 arith=bf16 form=packed kc=0",
                         "arith=bf16 (approximate)", 0.05f);
        test_causal_attention_bf16();
    }
    if (cpu_flag("avx512_vnni")) {
        /* the dot form (decode and prefill), then the packed form for
         * prefill: M not a multiple of mr, N not of nr, two K blocks */
        const int64_t dot_ms[3] = {1, 3, 7}, packed_ms[3] = {5, 17, 40};
        test_int8_form("", "mr=1 nr=4 nc=0 mc=64 arith=i8 pf=8", "mr=2 nr=4 nc=0 mc=16 arith=i8", dot_ms, "kci8_");
        test_cost_defaults();
        test_int8_batch_points();
        test_int8_repack();
        test_int8_repack16();
        test_int8_pack_copy();
        test_int8_form("_packed", "mr=1 nr=4 nc=0 mc=64 arith=i8 pf=8",
                       "mr=4 nr=32 nc=0 mc=16 arith=i8 form=packed kc=256", packed_ms, "_4x32(qr, sr, zr, ur");
        test_int8_form("_packed_wide", "mr=1 nr=4 nc=0 mc=64 arith=i8 pf=8",
                       "mr=6 nr=16 nc=16 mc=64 arith=i8 form=packed kc=0", packed_ms, "_6x16(qr, sr, zr, ur");
        /* AMX tiles: 2x2 tiles with two K blocks, one tile with K whole;
         * M = 5, 17, 40 leave partial 16-row tiles */
        if (cpu_flag("amx_tile") && cpu_flag("amx_int8")) {
            test_int8_form("_amx", "mr=1 nr=4 nc=0 mc=64 arith=i8 pf=8", "mr=32 nr=32 nc=0 mc=64 arith=i8 form=amx kc=256",
                           packed_ms, "kga_");
            test_int8_form("_amx_16", "mr=1 nr=4 nc=0 mc=64 arith=i8 pf=8", "mr=16 nr=16 nc=16 mc=32 arith=i8 form=amx kc=0",
                           packed_ms, "_16x16(gq_a");
        } else {
            printf("# AMX contractions not tested: this CPU has no amx_int8\n");
        }
    }
    else printf("# int8 contractions not tested: this CPU has no AVX512-VNNI\n");
    /* AMX bf16 tiles: 2x2 tiles with K blocks of 256 (and a last of 32),
     * one tile with K whole; M = 5, 17, 40 leave partial 16-row tiles */
    if (cpu_flag("amx_tile") && cpu_flag("amx_bf16") && cpu_flag("avx512_bf16")) {
        test_bf16_amx("_amx", "mr=32 nr=32 nc=0 mc=64 arith=bf16 form=amx kc=256", "kah_32x32(gh_a");
        test_bf16_amx("_amx_16", "mr=16 nr=16 nc=16 mc=32 arith=bf16 form=amx kc=0", "kah_16x16(gh_a");
        test_bf16_f32("_amx", "mr=32 nr=32 nc=0 mc=64 arith=bf16 form=amx kc=32", "kah_pack_f32((const void *)W",
                      "kah_pack_f32s(W");
        test_bf16_f32("_amx_16", "mr=16 nr=16 nc=16 mc=32 arith=bf16 form=amx kc=0", "kah_pack_f32((const void *)W",
                      "kah_pack_f32s(W");
        test_bf16_const_a("_amx", "mr=32 nr=32 nc=0 mc=64 arith=bf16 form=amx kc=32");
        test_bf16_const_a("_amx_16", "mr=16 nr=16 nc=16 mc=32 arith=bf16 form=amx kc=0");
    } else {
        printf("# AMX bf16 contractions not tested: this CPU has no amx_bf16\n");
    }
    /* AVX-512 bf16 packed strips (emit_gemm_bf16.c): K = 45 is odd (a
     * zero-padded last pair) and, with kc = 32, a second K block of 13;
     * 2 x 16 and 1 x 48 tiles, prefetched and not */
    if (cpu_flag("avx512_bf16")) {
        test_bf16_f32("_packed", "mr=6 nr=32 nc=0 mc=64 arith=bf16 form=packed kc=32 pf=16", "kgb_pack((const float *)W",
                      "kgb_pack_strided((const float *)W");
        test_bf16_f32("_packed_wide", "mr=4 nr=48 nc=16 mc=16 arith=bf16 form=packed kc=0", "kgb_pack((const float *)W",
                      "kgb_pack_strided((const float *)W");
        test_bf16_zero_tails("mr=6 nr=32 nc=0 mc=64 arith=bf16 form=packed kc=32 pf=16");
    } else {
        printf("# packed bf16 contractions not tested: this CPU has no avx512_bf16\n");
    }
    return check_exit();
}
