/* test_contract_split.c — contraction items split along M as well as N
 * (src/sched/contract_split.c, the kernel side in codegen/emit_contract.c,
 * the launch in runtime/cpu_run.c).
 *
 * The decision: a launch with fewer items than threads (49 output points are
 * one strip of the schedule's rows) is cut into M parts of whole mr-row
 * tiles, the busiest thread's work falls, and a launch with items enough, one
 * thread, or too few rows is left whole. The code: convolutions shaped like a
 * network's last layers (7x7 and 9x9 outputs, many channels) compiled at 2
 * threads split (kiln_program_msplit_launches counts it), match the reference
 * interpreter, and equal bit for bit the same program at 1 thread, which does
 * not split (the same tiles compute the same sums).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract_split.h"
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

static void test_decision(void) {
    CASE_BEGIN("msplit_decision");
    sch_contract_sched s;
    memset(&s, 0, sizeof s);
    s.mr = 6;
    s.nr = 64;
    s.form = SCH_FORM_PACKED;
    /* 2048 x 49 on 2 threads: one strip, one item; cut in two, the busiest
     * does about half */
    int64_t P = sch_contract_mparts(&s, 2048, 49, 1, 1, 2);
    CHECK(P >= 2, "P = %lld", (long long)P);
    double w1 = sch_mparts_busiest(2048, 6, 49, 64, 1, 1, 1, 2, 4.0);
    double wp = sch_mparts_busiest(2048, 6, 49, 64, 1, 1, P, 2, 4.0);
    CHECK(wp < 0.6 * w1, "busiest %.0f of %.0f", wp, w1);
    /* one thread, few rows, or items enough: whole */
    CHECK(sch_contract_mparts(&s, 2048, 49, 1, 1, 1) == 1, "1 thread");
    CHECK(sch_contract_mparts(&s, 24, 49, 1, 1, 2) == 1, "24 rows");
    CHECK(sch_contract_mparts(&s, 64, 12321, 1, 16, 2) == 1, "16 runs");
    /* 3 runs on 2 threads (2 + 1 strips): parts even the load */
    CHECK(sch_contract_mparts(&s, 512, 192, 1, 3, 2) > 1, "3 runs on 2 threads");
    /* parts are whole tiles covering [0, m) in order, none under the least rows */
    for (int64_t parts = 1; parts <= SCH_MPARTS_MAX; parts++) {
        CHECK(sch_mpart_row(1000, 6, parts, 0) == 0 && sch_mpart_row(1000, 6, parts, parts) == 1000, "ends");
        for (int64_t i = 0; i < parts; i++) {
            int64_t a = sch_mpart_row(1000, 6, parts, i), b = sch_mpart_row(1000, 6, parts, i + 1);
            CHECK(a % 6 == 0 && b >= a, "part %lld of %lld: [%lld, %lld)", (long long)i, (long long)parts, (long long)a,
                  (long long)b);
        }
    }
    int64_t Pm = sch_contract_mparts(&s, 100, 49, 1, 1, 2);
    CHECK(sch_mpart_row(100, 6, Pm, 1) >= SCH_MPART_MIN_ROWS, "P %lld leaves a part under %d rows", (long long)Pm,
          SCH_MPART_MIN_ROWS);
    CASE_END();
}

/* conv (1, ci, h, h) x (co, ci, k, k), pad k/2, compiled at `threads`;
 * returns the output (malloc'd) and the program's split launches */
static float *run_conv(kiln_graph *g, int threads, int fixed, long long *splits, int64_t n, char *why, size_t cap) {
    kiln_compile_options o = kiln_compile_defaults();
    o.threads = threads;
    o.fixed_defaults = fixed;
    o.tunedb_off = 1;
    kiln_status st;
    kiln_program *p = kiln_compile(g, &o, &st);
    if (!p) {
        snprintf(why, cap, "compile: %s", kiln_graph_error(g));
        return NULL;
    }
    float *y = malloc((size_t)n * sizeof *y + 1);
    if (kiln_run(p) != KILN_OK || kiln_read_output(g, "y", y, (size_t)n * sizeof *y) != KILN_OK) {
        snprintf(why, cap, "run: %s", kiln_graph_error(g));
        free(y);
        y = NULL;
    }
    *splits = kiln_program_msplit_launches(p);
    kiln_program_free(p);
    return y;
}

static void test_conv(int64_t ci, int64_t h, int64_t co, int64_t k, int fixed) {
    char name[96], why[300] = "", xs[64], ws[64];
    snprintf(name, sizeof name, "msplit_conv_c%lld_%lldx%lld_co%lld_k%lld_%s", (long long)ci, (long long)h, (long long)h,
             (long long)co, (long long)k, fixed ? "f32" : "chosen");
    CASE_BEGIN(name);
    unsigned seed = 5;
    snprintf(xs, sizeof xs, "1, %lld, %lld, %lld", (long long)ci, (long long)h, (long long)h);
    snprintf(ws, sizeof ws, "%lld, %lld, %lld, %lld", (long long)co, (long long)ci, (long long)k, (long long)k);
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, xs);
    kiln_tensor w = kiln_input(g, "w", KILN_F32, ws);
    kiln_output(g, kiln_conv2d(g, x, w, KILN_NONE, 1, (int)(k / 2), 1), "y");
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    int64_t nx = ci * h * h, nw = co * ci * k * k, n = co * h * h;
    float *xb = rand_buf(nx, &seed), *wb = rand_buf(nw, &seed);
    kiln_bind_input(g, "x", xb, (size_t)nx * sizeof(float));
    kiln_bind_input(g, "w", wb, (size_t)nw * sizeof(float));
    float *ref = malloc((size_t)n * sizeof *ref + 1);
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    kiln_read_output(g, "y", ref, (size_t)n * sizeof *ref);
    long long s1 = -1, s2 = -1;
    float *y1 = run_conv(g, 1, fixed, &s1, n, why, sizeof why);
    CHECK(y1 != NULL, "%s", why);
    float *y2 = run_conv(g, 2, fixed, &s2, n, why, sizeof why);
    CHECK(y2 != NULL, "%s", why);
    CHECK(s1 == 0, "%lld split launches at 1 thread", s1);
    if (fixed) CHECK(s2 > 0, "no split launch at 2 threads");
    /* bf16 arithmetic where the cost model picks it: its error, else a K-term f32 sum's */
    double kl = (double)(ci * k * k), tol = fixed ? 2e-6 * kl : 8e-3 * sqrt(kl);
    for (int64_t i = 0; y1 && y2 && i < n; i++) {
        if (memcmp(&y1[i], &y2[i], sizeof(float)) != 0) {
            CHECK(0, "element %lld: 1 thread %.9g, 2 threads %.9g", (long long)i, y1[i], y2[i]);
            break;
        }
        if (!(fabs((double)y2[i] - ref[i]) <= tol + 1e-4 * fabs(ref[i]))) {
            CHECK(0, "element %lld: reference %.9g, compiled %.9g", (long long)i, ref[i], y2[i]);
            break;
        }
    }
    free(y1);
    free(y2);
    free(ref);
    free(xb);
    free(wb);
    kiln_graph_free(g);
    CASE_END();
}

int main(void) {
    test_decision();
    test_conv(96, 7, 256, 1, 1);  /* a 1x1 over 7x7: B read in place */
    test_conv(64, 9, 128, 3, 1);  /* a 3x3 over 9x9: B packed */
    test_conv(96, 7, 256, 1, 0);  /* whatever the cost model picks (bf16 on this ISA) */
    test_conv(40, 7, 200, 3, 0);  /* rows not a multiple of the tile */
    return check_exit();
}
