/* test_gemm.c — the packed (outer-product) contraction form (emit_gemm.c) and
 * contractions whose B is strided along K (kiln_matmul's (k, n) operand).
 *
 * Every weight dtype (f32, f16, bf16 and the five block formats) times
 * large-M row counts (5, 13, 64, 100: tiles with and without edge rows),
 * K with several K blocks and (float formats) a tail, N not a multiple of
 * the strip width, under several packed schedules forced through
 * KILN_CONTRACT_SCHED_LARGE; kiln_matmul with a (k, n) B — plain, batched,
 * through a transposed batch, both buckets, default and forced schedules —
 * compiled to a contraction kernel, its rows also read in place (direct=1,
 * decode and prefill buckets, with K blocks, prefetch, a partial last
 * strip); an output whose stride along n is not 1.
 * Every result is compared with the reference interpreter at the tolerance
 * of a K-term f32 sum (abs 2e-6*K + rel 1e-4, as test_contract.c).
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


/* compile g, run it, compare output "y" with the reference; *contracted is
 * set when the program has a contraction kernel whose generated C contains
 * `want` (the packed form's calls; NULL: any) */
static int compare(kiln_graph *g, int64_t k_len, const char *want, int *contracted, char *why, size_t cap) {
    if (kiln_eval_reference(g) != KILN_OK) {
        snprintf(why, cap, "reference: %s", kiln_graph_error(g));
        return 0;
    }
    int nd;
    int64_t dims[KILN_MAX_DIMS], n = 1;
    kiln_output_shape(g, "y", &nd, dims);
    for (int d = 0; d < nd; d++) n *= dims[d];
    float *ref = malloc((size_t)n * sizeof *ref + 1), *got = malloc((size_t)n * sizeof *got + 1);
    kiln_read_output(g, "y", ref, (size_t)n * sizeof *ref);
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
        const char *src = kiln_program_source(p);
        if (want && (!src || !strstr(src, want))) *contracted = 0;
        memset(got, 0xff, (size_t)n * sizeof *got);
        kiln_read_output(g, "y", got, (size_t)n * sizeof *got);
        double tol_abs = 2e-6 * (double)k_len;
        for (int64_t i = 0; i < n && ok; i++) {
            double a = ref[i], b = got[i];
            if (!(fabs(a - b) <= tol_abs + 1e-4 * fabs(a))) {
                snprintf(why, cap, "element %lld of %lld: reference %.9g, compiled %.9g", (long long)i, (long long)n, a,
                         b);
                ok = 0;
            }
        }
    }
    kiln_program_free(p);
    free(ref);
    free(got);
    return ok;
}

static const kiln_dtype wtypes[8] = {KILN_F32, KILN_F16, KILN_BF16, KILN_Q8_0,
                                     KILN_Q4_0, KILN_Q5_0, KILN_Q4_K, KILN_Q6_K};

/* packed schedules: strip widths 16..64, tall and short tiles, K blocks of
 * 32, 256 and all of K, mc below / above mr, fixed and automatic nc, the
 * strip prefetched 8 or 16 K steps ahead or not */
/* the call each of them makes in the generated C */
static const char *calls[4] = {"_6x32_p0(ar, bps", "_4x64_p16(ar, bps", "_14x16_p8(ar, bps", "_9x48_p0(ar, bps"};
static const char *scheds[4] = {
    "mr=6 nr=32 nc=0 mc=64 arith=f32 form=packed kc=256",
    "mr=4 nr=64 nc=64 mc=16 arith=f32 form=packed kc=0 pf=16",
    "mr=14 nr=16 nc=0 mc=8 arith=f32 form=packed kc=32 pf=8",
    "mr=9 nr=48 nc=96 mc=256 arith=f32 form=packed kc=512",
};

/* y = x (m, k) . w (n, k)^T for every dtype under every packed schedule */
static void test_linear_packed(void) {
    const int64_t ms[4] = {5, 13, 64, 100};
    for (int ti = 0; ti < 8; ti++) {
        kiln_dtype t = wtypes[ti];
        int is_k = t == KILN_Q4_K || t == KILN_Q6_K;
        int is_block = kiln_dtype_is_block(t);
        /* two K blocks of 256 with a partial third (floats: plus a tail) */
        const int64_t ks[2] = {is_k ? 256 : 64, is_k ? 768 : is_block ? 576 : 555};
        const int64_t ns[2] = {37, 70};
        for (int ki = 0; ki < 2; ki++) {
            int64_t K = ks[ki], N = ns[ki];
            char name[96];
            snprintf(name, sizeof name, "gemm_linear_%s_k%lld_n%lld", kiln_dtype_name(t), (long long)K, (long long)N);
            CASE_BEGIN(name);
            char wshape[64], xshape[64];
            snprintf(wshape, sizeof wshape, "%lld, %lld", (long long)N, (long long)K);
            snprintf(xshape, sizeof xshape, "m, %lld", (long long)K);
            kiln_graph *g = kiln_graph_new();
            kiln_tensor x = kiln_input(g, "x", KILN_F32, xshape);
            kiln_tensor w = kiln_input(g, "w", t, wshape);
            kiln_tensor wf32 = t == KILN_F16 || t == KILN_BF16 ? kiln_cast(g, w, KILN_F32) : w;
            kiln_output(g, kiln_linear(g, x, wf32, KILN_NONE), "y");
            CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
            float *wf = rand_f32(N * K, -1, 1);
            size_t wbytes;
            void *wb = make_weights(t, wf, N * K, &wbytes);
            kiln_bind_input(g, "w", wb, wbytes);
            for (int si = 0; si < 4; si++) {
                setenv("KILN_CONTRACT_SCHED_LARGE", scheds[si], 1);
                for (int mi = 0; mi < 4; mi++) {
                    /* every schedule sees every M on the small K; the long K
                     * takes two M per schedule (compiles are the cost) */
                    if (ki == 1 && (mi + si) % 2 == 1) continue;
                    char why[300] = "";
                    float *xb = rand_f32(ms[mi] * K, -1, 1);
                    kiln_bind_dim(g, "m", ms[mi]);
                    kiln_bind_input(g, "x", xb, (size_t)(ms[mi] * K) * sizeof(float));
                    int contracted = 0;
                    CHECK(compare(g, K, calls[si], &contracted, why, sizeof why), "'%s' m=%lld: %s", scheds[si],
                          (long long)ms[mi], why);
                    CHECK(contracted, "'%s' m=%lld: no contraction kernel", scheds[si], (long long)ms[mi]);
                    free(xb);
                }
            }
            unsetenv("KILN_CONTRACT_SCHED_LARGE");
            free(wf);
            free(wb);
            kiln_graph_free(g);
            CASE_END();
        }
    }
}

/* y = a (m, K) . b (K, N) with b (*bb, random) bound: B strided along K,
 * contiguous along N */
static kiln_graph *matmul_kn_graph(int64_t K, int64_t N, float **bb) {
    char ashape[64], bshape[64];
    snprintf(ashape, sizeof ashape, "m, %lld", (long long)K);
    snprintf(bshape, sizeof bshape, "%lld, %lld", (long long)K, (long long)N);
    kiln_graph *g = kiln_graph_new();
    kiln_output(g, kiln_matmul(g, kiln_input(g, "a", KILN_F32, ashape), kiln_input(g, "b", KILN_F32, bshape)), "y");
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    *bb = rand_f32(K * N, -1, 1);
    kiln_bind_input(g, "b", *bb, (size_t)(K * N) * sizeof(float));
    return g;
}

/* y = a (m, k) . b (k, n): B strided along K, contiguous along N */
static void test_matmul_kn(void) {
    const int64_t ms[5] = {1, 3, 5, 64, 100};
    const int64_t ks[2] = {40, 300}, ns[2] = {37, 70};
    const char *forced[3] = {NULL, scheds[0], scheds[2]};
    for (int ki = 0; ki < 2; ki++) {
        int64_t K = ks[ki], N = ns[ki];
        char name[96];
        snprintf(name, sizeof name, "gemm_matmul_kn_k%lld_n%lld", (long long)K, (long long)N);
        CASE_BEGIN(name);
        float *bb;
        kiln_graph *g = matmul_kn_graph(K, N, &bb);
        for (int fi = 0; fi < 3; fi++) {
            if (forced[fi]) setenv("KILN_CONTRACT_SCHED_LARGE", forced[fi], 1);
            else unsetenv("KILN_CONTRACT_SCHED_LARGE");
            for (int mi = 0; mi < 5; mi++) {
                if (fi > 0 && ms[mi] <= 4) continue; /* the forced schedule is the large bucket's */
                char why[300] = "";
                float *ab = rand_f32(ms[mi] * K, -1, 1);
                kiln_bind_dim(g, "m", ms[mi]);
                kiln_bind_input(g, "a", ab, (size_t)(ms[mi] * K) * sizeof(float));
                int contracted = 0;
                CHECK(compare(g, K, fi ? calls[fi == 1 ? 0 : 2] : "kps_f32((const float *)W", &contracted, why,
                              sizeof why),
                      "'%s' m=%lld: %s",
                      forced[fi] ? forced[fi] : "default", (long long)ms[mi], why);
                CHECK(contracted, "'%s' m=%lld: no contraction kernel", forced[fi] ? forced[fi] : "default",
                      (long long)ms[mi]);
                free(ab);
            }
        }
        unsetenv("KILN_CONTRACT_SCHED_LARGE");
        free(bb);
        kiln_graph_free(g);
        CASE_END();
    }
}

/* the packed f32 form reading B's rows in place (direct=1): both buckets,
 * tiles of 1, 2, 4 and 6 rows, strips of 16, 32 and 64 with a partial last
 * one (N = 37, 70), K in one block and in blocks of 32 */
static const char *direct_scheds[5] = {
    "mr=1 nr=32 nc=0 mc=64 arith=f32 form=packed kc=0 direct=1",
    "mr=1 nr=16 nc=16 mc=64 arith=f32 form=packed kc=0 direct=1 serial=1",
    "mr=2 nr=16 nc=32 mc=64 arith=f32 form=packed kc=32 pf=16 direct=1",
    "mr=4 nr=64 nc=0 mc=16 arith=f32 form=packed kc=0 pf=16 direct=1",
    "mr=6 nr=32 nc=64 mc=8 arith=f32 form=packed kc=32 direct=1",
};
static const char *direct_calls[5] = {"kgp_f32_1x32_p0(ar, bps, bst", "kgp_f32_1x16_p0(ar, bps, bst",
                                      "kgp_f32_2x16_p16(ar, bps, bst",
                                      "kgp_f32_4x64_p16(ar, bps, bst", "kgp_f32_6x32_p0(ar, bps, bst"};

static void test_matmul_kn_direct(void) {
    const int64_t ms[5] = {1, 3, 4, 13, 64};
    const int64_t ks[2] = {40, 300}, ns[2] = {37, 70};
    for (int ki = 0; ki < 2; ki++) {
        int64_t K = ks[ki], N = ns[ki];
        char name[96];
        snprintf(name, sizeof name, "gemm_matmul_kn_direct_k%lld_n%lld", (long long)K, (long long)N);
        CASE_BEGIN(name);
        float *bb;
        kiln_graph *g = matmul_kn_graph(K, N, &bb);
        for (int si = 0; si < 5; si++) {
            setenv("KILN_CONTRACT_SCHED_SMALL", direct_scheds[si], 1);
            setenv("KILN_CONTRACT_SCHED_LARGE", direct_scheds[si], 1);
            for (int mi = 0; mi < 5; mi++) {
                char why[300] = "";
                float *ab = rand_f32(ms[mi] * K, -1, 1);
                kiln_bind_dim(g, "m", ms[mi]);
                kiln_bind_input(g, "a", ab, (size_t)(ms[mi] * K) * sizeof(float));
                int contracted = 0;
                CHECK(compare(g, K, direct_calls[si], &contracted, why, sizeof why), "'%s' m=%lld: %s",
                      direct_scheds[si], (long long)ms[mi], why);
                CHECK(contracted, "'%s' m=%lld: no direct contraction kernel", direct_scheds[si], (long long)ms[mi]);
                free(ab);
            }
            /* the kernel listing (kiln explain --kernels) shows the whole schedule */
            kiln_status st;
            kiln_program *p = kiln_compile(g, NULL, &st);
            char *text = p ? kiln_program_kernels(p) : NULL;
            CHECK(text && strstr(text, "direct=1") && (si != 1 || strstr(text, "direct=1 serial=1")),
                  "'%s': the kernel listing lacks the schedule's words", direct_scheds[si]);
            free(text);
            kiln_program_free(p);
        }
        unsetenv("KILN_CONTRACT_SCHED_SMALL");
        unsetenv("KILN_CONTRACT_SCHED_LARGE");
        free(bb);
        kiln_graph_free(g);
        CASE_END();
    }
}

/* serial=1: decode schedules of the dot form kept on the calling thread
 * (the pool has the machine's cores), on products a split would cut into
 * several items (f32: batched; q8_0: 70 rows): the same results as the
 * reference */
static void test_serial_decode(void) {
    static const char *serial_scheds[3] = {
        "mr=1 nr=4 nc=0 mc=16 arith=f32 serial=1",
        "mr=2 nr=3 nc=6 mc=16 arith=f32 pf=8 serial=1",
        "mr=1 nr=8 nc=0 mc=16 arith=f32 pf=16",
    };
    for (int ti = 0; ti < 2; ti++) {
        kiln_dtype t = ti ? KILN_Q8_0 : KILN_F32;
        char name[64], why[300] = "";
        snprintf(name, sizeof name, "gemm_serial_decode_%s", kiln_dtype_name(t));
        CASE_BEGIN(name);
        kiln_graph *g = kiln_graph_new();
        int64_t nb = ti ? 1 : 3;
        kiln_tensor x = kiln_input(g, "x", KILN_F32, ti ? "1, m, 96" : "3, m, 96");
        kiln_tensor w = kiln_input(g, "w", t, ti ? "70, 96" : "3, 70, 96");
        kiln_output(g, ti ? kiln_linear(g, x, w, KILN_NONE) : kiln_matmul(g, x, kiln_transpose(g, w, 1, 2)), "y");
        CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
        float *wf = rand_f32(nb * 70 * 96, -1, 1);
        size_t wbytes;
        void *wb = make_weights(t, wf, nb * 70 * 96, &wbytes);
        kiln_bind_input(g, "w", wb, wbytes);
        for (int si = 0; si < 3; si++) {
            setenv("KILN_CONTRACT_SCHED_SMALL", serial_scheds[si], 1);
            for (int64_t m = 1; m <= 4; m += 3) {
                float *xb = rand_f32(nb * m * 96, -1, 1);
                kiln_bind_dim(g, "m", m);
                kiln_bind_input(g, "x", xb, (size_t)(nb * m * 96) * sizeof(float));
                int contracted = 0;
                CHECK(compare(g, 96, NULL, &contracted, why, sizeof why), "'%s' m=%lld: %s", serial_scheds[si],
                      (long long)m, why);
                CHECK(contracted, "'%s' m=%lld: no contraction kernel", serial_scheds[si], (long long)m);
                free(xb);
            }
        }
        unsetenv("KILN_CONTRACT_SCHED_SMALL");
        free(wf);
        free(wb);
        kiln_graph_free(g);
        CASE_END();
    }
}

/* batched: (h, m, k) x (h, k, n), and B through a transposed batch axis:
 * transpose((k, h, n), 0, 1) has batch stride n and K stride h*n */
static void test_matmul_kn_batched(void) {
    for (int tb = 0; tb < 2; tb++) {
        char why[300] = "";
        CASE_BEGIN(tb ? "gemm_matmul_kn_transposed_batch" : "gemm_matmul_kn_batched");
        kiln_graph *g = kiln_graph_new();
        kiln_tensor a = kiln_input(g, "a", KILN_F32, "3, m, 40");
        kiln_tensor b = tb ? kiln_transpose(g, kiln_input(g, "b", KILN_F32, "40, 3, 19"), 0, 1)
                           : kiln_input(g, "b", KILN_F32, "3, 40, 19");
        kiln_output(g, kiln_matmul(g, a, b), "y");
        CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
        float *bb = rand_f32(3 * 19 * 40, -1, 1);
        kiln_bind_input(g, "b", bb, 3 * 19 * 40 * sizeof(float));
        const int64_t ms[3] = {2, 7, 33};
        for (int mi = 0; mi < 3; mi++) {
            float *ab = rand_f32(3 * ms[mi] * 40, -1, 1);
            kiln_bind_dim(g, "m", ms[mi]);
            kiln_bind_input(g, "a", ab, (size_t)(3 * ms[mi] * 40) * sizeof(float));
            int contracted = 0;
            CHECK(compare(g, 40, "kps_f32((const float *)W", &contracted, why, sizeof why), "m=%lld: %s",
                  (long long)ms[mi], why);
            CHECK(contracted, "m=%lld: no contraction kernel", (long long)ms[mi]);
            free(ab);
        }
        free(bb);
        kiln_graph_free(g);
        CASE_END();
    }
}

/* y (n, m) = w (n, k) . transpose(x (m, k)): B is the f16 side, so n is the
 * first loop and the output's stride along n is m (the scatter path) */
static void test_output_strided(void) {
    char why[300] = "";
    CASE_BEGIN("gemm_output_stride_not_1");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor w = kiln_cast(g, kiln_input(g, "w", KILN_F16, "45, 64"), KILN_F32);
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "m, 64");
    kiln_output(g, kiln_matmul(g, w, kiln_transpose(g, x, 0, 1)), "y");
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    float *wf = rand_f32(45 * 64, -1, 1), *xb = rand_f32(21 * 64, -1, 1);
    size_t wbytes;
    void *wb = make_weights(KILN_F16, wf, 45 * 64, &wbytes);
    kiln_bind_input(g, "w", wb, wbytes);
    kiln_bind_dim(g, "m", 21);
    kiln_bind_input(g, "x", xb, 21 * 64 * sizeof(float));
    for (int si = 0; si < 2; si++) {
        setenv("KILN_CONTRACT_SCHED_SMALL", scheds[si], 1);
        setenv("KILN_CONTRACT_SCHED_LARGE", scheds[si], 1);
        int contracted = 0;
        CHECK(compare(g, 64, calls[si], &contracted, why, sizeof why), "'%s': %s", scheds[si], why);
        CHECK(contracted, "'%s': no contraction kernel", scheds[si]);
    }
    unsetenv("KILN_CONTRACT_SCHED_SMALL");
    unsetenv("KILN_CONTRACT_SCHED_LARGE");
    free(wf);
    free(xb);
    free(wb);
    kiln_graph_free(g);
    CASE_END();
}

int main(void) {
    weights_rng = 0x2545f4914f6cdd1dull;
    test_linear_packed();
    test_matmul_kn();
    test_matmul_kn_direct();
    test_serial_decode();
    test_matmul_kn_batched();
    test_output_strided();
    return check_exit();
}
