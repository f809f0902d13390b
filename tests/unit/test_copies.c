/* test_copies.c — one set of weight copies for a program and its
 * alternative attention form (src/runtime/copies.c, rt_cpu_share_copies).
 *
 * A graph as a model's layer is: q8_0 weights (kiln_bind_weight) projecting
 * the queries and the attention's output, attention over keys and values
 * of (pos + seq) rows. Compiled with both forms (option stream 2), a short
 * prefill runs the materialised program and a decode step the streaming
 * one; the weights' decode copies (the cost model's int8 decode schedules
 * read the 8-row interleave, so the fixed f32 defaults are off) are made by
 * the first and must be found, not made again, by the second: the store's
 * counter says how many were found. The results must be bit for bit those
 * of two programs with copies of their own (stream 0 for the prefill,
 * stream 1 for the decode), whose counters stay 0. Freeing the pair in
 * either order leaves nothing behind (make test-asan).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kiln_compile.h"
#include "program.h"
#include "stream_select.h"
#include "weights.h"

#define D 256    /* model width: query heads x head size */
#define HQ 4
#define HD 64
#define ROWS 40  /* the prefill */
#define KEYS 41  /* the prefill's rows and one decode step */

static float X[KEYS * D], KV[2][KEYS * HD];
static float out_pre[2][ROWS * D], out_dec[2][D];

static kiln_graph *layer_graph(const void *wq, const void *wo, size_t wbytes) {
    kiln_graph *g = kiln_graph_new();
    kiln_sym pos = kiln_sym_var(g, "pos");
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "seq, 256");
    kiln_tensor k = kiln_input(g, "k", KILN_F32, "seq + pos, 1, 64"), v = kiln_input(g, "v", KILN_F32, "seq + pos, 1, 64");
    kiln_tensor Wq = kiln_input(g, "wq", KILN_Q8_0, "256, 256"), Wo = kiln_input(g, "wo", KILN_Q8_0, "256, 256");
    kiln_tensor q = kiln_reshape_str(g, kiln_linear(g, x, Wq, KILN_NONE), "seq, 4, 64");
    kiln_tensor a = kiln_reshape_str(g, kiln_attention(g, q, k, v, pos, 0.125, 0), "seq, 256");
    kiln_output(g, kiln_linear(g, a, Wo, KILN_NONE), "out");
    kiln_bind_weight(g, "wq", wq, wbytes);
    kiln_bind_weight(g, "wo", wo, wbytes);
    return g;
}

/* run rows [pos, pos + seq) of X through p; the output into out */
static int run_rows(kiln_program *p, kiln_graph *g, int pos, int seq, float *out) {
    kiln_bind_dim(g, "seq", seq);
    kiln_bind_dim(g, "pos", pos);
    kiln_bind_input(g, "x", X + (size_t)pos * D, sizeof(float) * (size_t)seq * D);
    kiln_bind_input(g, "k", KV[0], sizeof(float) * (size_t)(pos + seq) * HD);
    kiln_bind_input(g, "v", KV[1], sizeof(float) * (size_t)(pos + seq) * HD);
    return kiln_run(p) == KILN_OK && kiln_read_output(g, "out", out, sizeof(float) * (size_t)seq * D) == KILN_OK;
}

static kiln_program *compile_form(kiln_graph *g, int stream) {
    kiln_compile_options o = kiln_compile_defaults();
    o.stream = stream;
    o.fixed_defaults = 0; /* the cost model's first choice: int8 decode tiles on the copies */
    o.threads = 1;
    o.search_budget = 0;
    return kiln_compile(g, &o, NULL);
}

int main(void) {
    float *w = rand_f32(D * D, -1, 1);
    size_t wbytes;
    void *wq = make_weights(KILN_Q8_0, w, D * D, &wbytes);
    for (int i = 0; i < D * D; i++) w[i] = (float)(urand() * 2 - 1);
    void *wo = make_weights(KILN_Q8_0, w, D * D, &wbytes);
    free(w);
    for (int i = 0; i < KEYS * D; i++) X[i] = (float)(urand() * 2 - 1);
    for (int i = 0; i < KEYS * HD; i++) KV[0][i] = (float)(urand() * 2 - 1), KV[1][i] = (float)(urand() * 2 - 1);

    CASE_BEGIN("two_forms_share_the_copies");
    {
        kiln_graph *g = layer_graph(wq, wo, wbytes);
        kiln_program *p = compile_form(g, 2);
        if (p) rt_stream_alt(p); /* the alternative is compiled at its first need: now */
        CHECK(p && p->alt, "no streaming alternative: %s", kiln_graph_error(g));
        if (p && p->alt) {
            CHECK(strstr(kiln_program_source(p), "kacc") == NULL, "the main program is not the materialised form");
            CHECK(run_rows(p, g, 0, ROWS, out_pre[0]), "prefill: %s", kiln_graph_error(g));
            CHECK(rt_cpu_copies_shared(p) == 0, "%lld copies found before the second form ran",
                  (long long)rt_cpu_copies_shared(p));
            CHECK(run_rows(p, g, ROWS, 1, out_dec[0]), "decode: %s", kiln_graph_error(g));
            /* the two weights' decode copies, made by the prefill's program */
            CHECK(rt_cpu_copies_shared(p) >= 2 && rt_cpu_copies_shared(p->alt) == rt_cpu_copies_shared(p),
                  "the decode found %lld copies (store of the alternative: %lld), want the 2 weights'",
                  (long long)rt_cpu_copies_shared(p), (long long)rt_cpu_copies_shared(p->alt));
        }
        kiln_program_free(p);
        kiln_graph_free(g);
    }
    CASE_END();

    CASE_BEGIN("shared_copies_are_bit_identical");
    {
        /* the same runs on two programs with copies of their own */
        kiln_graph *g = layer_graph(wq, wo, wbytes);
        kiln_program *pm = compile_form(g, 0), *ps = compile_form(g, 1);
        CHECK(pm && ps && !pm->alt && !ps->alt, "compiling the single forms: %s", kiln_graph_error(g));
        if (pm && ps) {
            CHECK(strstr(kiln_program_source(ps), "kacc") != NULL, "stream 1 holds no stream kernel");
            CHECK(run_rows(pm, g, 0, ROWS, out_pre[1]), "prefill: %s", kiln_graph_error(g));
            CHECK(run_rows(ps, g, ROWS, 1, out_dec[1]), "decode: %s", kiln_graph_error(g));
            CHECK(rt_cpu_copies_shared(pm) == 0 && rt_cpu_copies_shared(ps) == 0, "separate programs found copies");
            CHECK(memcmp(out_pre[0], out_pre[1], sizeof out_pre[0]) == 0, "the prefill differs");
            CHECK(memcmp(out_dec[0], out_dec[1], sizeof out_dec[0]) == 0, "the decode step differs");
            int finite = 1;
            for (int i = 0; i < D; i++) finite &= isfinite(out_dec[1][i]) && out_dec[1][i] != 0;
            CHECK(finite, "the decode output is not a finite nonzero vector");
        }
        kiln_program_free(ps);
        kiln_program_free(pm);
        kiln_graph_free(g);
    }
    CASE_END();

    CASE_BEGIN("alternative_freed_first_keeps_the_copies");
    {
        /* the materialised program goes on running after its alternative is
         * freed (the alternative's share of the store let go piece by piece):
         * its prefill bit for bit as before */
        kiln_graph *g = layer_graph(wq, wo, wbytes);
        kiln_program *p = compile_form(g, 2);
        if (p) rt_stream_alt(p); /* the alternative is compiled at its first need: now */
        CHECK(p && p->alt, "no alternative");
        if (p && p->alt) {
            CHECK(run_rows(p, g, 0, ROWS, out_pre[1]) && run_rows(p, g, ROWS, 1, out_dec[1]), "%s", kiln_graph_error(g));
            kiln_program_free(p->alt);
            p->alt = NULL;
            memset(out_pre[1], 0, sizeof out_pre[1]);
            CHECK(run_rows(p, g, 0, ROWS, out_pre[1]), "prefill after: %s", kiln_graph_error(g));
            CHECK(memcmp(out_pre[0], out_pre[1], sizeof out_pre[0]) == 0, "the prefill differs after the free");
            CHECK(run_rows(p, g, ROWS, 1, out_dec[1]), "decode after: %s", kiln_graph_error(g));
            double err = 0;
            for (int i = 0; i < D; i++) err = fmax(err, fabs((double)out_dec[0][i] - out_dec[1][i]));
            /* now materialised: the streaming step's values up to rounding */
            CHECK(err <= 1e-3, "the decode after the free is %.3g from the streaming one's", err);
        }
        kiln_program_free(p);
        kiln_graph_free(g);
    }
    CASE_END();
    free(wq);
    free(wo);
    return check_exit();
}
