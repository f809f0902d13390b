/* test_pack.c — packed contraction operands and coalesced loops (src/sched/pack.c)
 * against the reference interpreter.
 *
 * Convolutions (kiln_conv2d: strides, padding, dilation, batches, a 1x1
 * kernel, channels that do not fill a tile) must compile to a pack kernel and
 * a contraction and give the reference's values; a matmul whose operand is a
 * padded view packs the same way (nothing is convolution-specific); a
 * product that reads each element once (a matrix times a vector) is not
 * packed. Tolerance: the error of a K-term f32 sum.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kiln.h"
#include "kiln_compile.h"

static float *rand_buf(int64_t n, unsigned *seed) {
    float *b = malloc((size_t)n * sizeof *b + 1);
    for (int64_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        b[i] = (float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return b;
}

/* compile g, run it, compare "y" with the reference at K-term tolerance;
 * *packs and *contracts count the compiled program's pack and contraction kernels */
static int compare(kiln_graph *g, int64_t k_len, int *packs, int *contracts, char *why, size_t cap) {
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
        *packs = *contracts = 0;
        for (const char *s = text; (s = strstr(s, ": map pack")) != NULL; s++) (*packs)++;
        for (const char *s = text; (s = strstr(s, "  contraction ")) != NULL; s++) (*contracts)++;
        free(text);
        kiln_read_output(g, "y", got, (size_t)n * sizeof *got);
        for (int64_t i = 0; i < n && ok; i++) {
            double a = ref[i], b = got[i];
            if (!(fabs(a - b) <= 2e-6 * (double)k_len + 1e-4 * fabs(a))) {
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

typedef struct conv_case {
    int64_t n, ci, h, w, co, k;
    int stride, pad, dil;
    int packed; /* 0: read in place (a 1x1 kernel with stride 1) */
} conv_case;

static void test_conv(void) {
    static const conv_case cases[] = {
        {1, 8, 12, 10, 16, 3, 1, 1, 1, 1},  /* same padding */
        {2, 5, 11, 9, 7, 3, 2, 1, 1, 1},    /* batch 2, stride 2, odd channel counts */
        {1, 3, 16, 16, 6, 5, 1, 2, 2, 1},   /* dilation 2 */
        {1, 4, 9, 13, 12, 3, 1, 0, 1, 1},   /* no padding: div/mod indices, no guard */
        {1, 16, 7, 7, 32, 1, 2, 0, 1, 1},   /* 1x1 with stride 2: not contiguous along the output */
        {2, 3, 20, 20, 8, 7, 2, 3, 1, 1},   /* a stem: 7x7 stride 2 pad 3 */
        {1, 24, 6, 10, 40, 1, 1, 0, 1, 0},  /* 1x1: B strided along K, rows and columns coalesced */
    };
    unsigned seed = 7;
    /* the second pass streams every output (KILN_STREAM_MIN=0): a pack's
     * rows, not 64-byte aligned, begin with a masked head under guards */
    for (size_t ii = 0; ii < 2 * (sizeof cases / sizeof cases[0]); ii++) {
        size_t i = ii % (sizeof cases / sizeof cases[0]);
        int streamed = ii >= sizeof cases / sizeof cases[0];
        if (streamed) setenv("KILN_STREAM_MIN", "0", 1);
        const conv_case *c = &cases[i];
        char name[128], why[300] = "", xs[64], ws[64];
        snprintf(name, sizeof name, "pack_conv_n%lld_c%lld_%lldx%lld_co%lld_k%lld_s%d_p%d_d%d%s", (long long)c->n,
                 (long long)c->ci, (long long)c->h, (long long)c->w, (long long)c->co, (long long)c->k, c->stride, c->pad,
                 c->dil, streamed ? "_streamed" : "");
        CASE_BEGIN(name);
        snprintf(xs, sizeof xs, "%lld, %lld, %lld, %lld", (long long)c->n, (long long)c->ci, (long long)c->h, (long long)c->w);
        snprintf(ws, sizeof ws, "%lld, %lld, %lld, %lld", (long long)c->co, (long long)c->ci, (long long)c->k, (long long)c->k);
        kiln_graph *g = kiln_graph_new();
        kiln_tensor x = kiln_input(g, "x", KILN_F32, xs);
        kiln_tensor w = kiln_input(g, "w", KILN_F32, ws);
        kiln_output(g, kiln_conv2d(g, x, w, KILN_NONE, c->stride, c->pad, c->dil), "y");
        CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
        int64_t nx = c->n * c->ci * c->h * c->w, nw = c->co * c->ci * c->k * c->k;
        float *xb = rand_buf(nx, &seed), *wb = rand_buf(nw, &seed);
        kiln_bind_input(g, "x", xb, (size_t)nx * sizeof(float));
        kiln_bind_input(g, "w", wb, (size_t)nw * sizeof(float));
        int packs = 0, contracts = 0;
        CHECK(compare(g, c->ci * c->k * c->k, &packs, &contracts, why, sizeof why), "%s", why);
        CHECK(contracts == 1, "%d contraction kernels", contracts);
        CHECK(packs == c->packed, "%d pack kernels", packs);
        kiln_graph_free(g);
        free(xb);
        free(wb);
        unsetenv("KILN_STREAM_MIN");
        CASE_END();
    }
}

/* y = pad(a) . b: A read through a padding view along K; packed as rows */
static void test_padded_matmul(void) {
    CASE_BEGIN("pack_padded_matmul");
    unsigned seed = 11;
    kiln_graph *g = kiln_graph_new();
    kiln_tensor a = kiln_input(g, "a", KILN_F32, "6, 10");
    kiln_tensor b = kiln_input(g, "b", KILN_F32, "15, 9");
    kiln_tensor ap = kiln_pad(g, a, 1, kiln_sym_int(g, 2), kiln_sym_int(g, 3)); /* (6, 15) */
    kiln_output(g, kiln_matmul(g, ap, b), "y");
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    float *ab = rand_buf(60, &seed), *bb = rand_buf(135, &seed);
    kiln_bind_input(g, "a", ab, 60 * sizeof(float));
    kiln_bind_input(g, "b", bb, 135 * sizeof(float));
    int packs = 0, contracts = 0;
    char why[300] = "";
    CHECK(compare(g, 15, &packs, &contracts, why, sizeof why), "%s", why);
    CHECK(packs == 1 && contracts == 1, "%d packs, %d contractions", packs, contracts);
    kiln_graph_free(g);
    free(ab);
    free(bb);
    CASE_END();
}

/* a vector times a padded matrix reads each element once: no pack */
static void test_no_reuse(void) {
    CASE_BEGIN("pack_not_without_reuse");
    unsigned seed = 13;
    kiln_graph *g = kiln_graph_new();
    kiln_tensor v = kiln_input(g, "v", KILN_F32, "15");
    kiln_tensor m = kiln_input(g, "m", KILN_F32, "9, 10");
    kiln_tensor mp = kiln_pad(g, m, 1, kiln_sym_int(g, 2), kiln_sym_int(g, 3)); /* (9, 15) */
    kiln_output(g, kiln_linear(g, v, mp, KILN_NONE), "y");
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    float *vb = rand_buf(15, &seed), *mb = rand_buf(90, &seed);
    kiln_bind_input(g, "v", vb, 15 * sizeof(float));
    kiln_bind_input(g, "m", mb, 90 * sizeof(float));
    int packs = 0, contracts = 0;
    char why[300] = "";
    CHECK(compare(g, 15, &packs, &contracts, why, sizeof why), "%s", why);
    CHECK(packs == 0, "%d packs", packs);
    kiln_graph_free(g);
    free(vb);
    free(mb);
    CASE_END();
}

int main(void) {
    setenv("KILN_FIXED_DEFAULTS", "1", 1); /* f32 schedules: the tolerance is an f32 sum's */
    test_conv();
    test_padded_matmul();
    test_no_reuse();
    return check_exit();
}
