/* test_search.c — the schedule search and the tuning DB, end to end.
 *
 * A small quantised linear layer compiled with a search budget: the winner
 * is verified (the output equals the reference), a record is written, and a
 * second compile of the same graph takes the schedule from the DB with zero
 * measurements. An injected wrong candidate is rejected and counted. A
 * corrupted DB is survived. Two processes tuning at once both land their
 * records. The space and the cost model are checked for sanity, and the
 * rank correlation helper against known values. The contraction kernels'
 * work split is checked against a naive model of it. The recompile's reserve
 * (its estimate, its growth with the load, the remembered rate) as arithmetic.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "kiln.h"
#include "kiln_compile.h"
#include "quant.h"
#include "contract.h"
#include "family.h"
#include "search.h"
#include "tunedb.h"
#include "tune.h"
#include "cc_split.h"

static char db_path[256];

static float *rand_f32(int64_t n, unsigned seed) {
    float *x = malloc((size_t)n * sizeof *x);
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((double)(s >> 8) / 16777216.0 * 2.0 - 1.0);
    }
    return x;
}

typedef struct layer {
    kiln_graph *g;
    void *w;
    float *x;
    size_t wbytes;
} layer;

/* y = x (m, k) . w (n, k)^T with q4_0 weights; m bound */
static layer make_layer(int64_t m, int64_t n, int64_t k, unsigned seed) {
    layer L;
    char ws[64], xs[64];
    snprintf(ws, sizeof ws, "%lld, %lld", (long long)n, (long long)k);
    snprintf(xs, sizeof xs, "m, %lld", (long long)k);
    L.g = kiln_graph_new();
    kiln_tensor x = kiln_input(L.g, "x", KILN_F32, xs);
    kiln_tensor w = kiln_input(L.g, "w", KILN_Q4_0, ws);
    kiln_output(L.g, kiln_linear(L.g, x, w, KILN_NONE), "y");
    float *wf = rand_f32(n * k, seed);
    L.wbytes = kiln_dtype_bytes(KILN_Q4_0, n * k);
    L.w = malloc(L.wbytes);
    quant_quantize(KILN_Q4_0, wf, L.w, n * k);
    free(wf);
    L.x = rand_f32(m * k, seed + 1);
    kiln_bind_dim(L.g, "m", m);
    kiln_bind_input(L.g, "x", L.x, (size_t)(m * k) * sizeof(float));
    kiln_bind_input(L.g, "w", L.w, L.wbytes);
    return L;
}

static void free_layer(layer *L) {
    kiln_graph_free(L->g);
    free(L->w);
    free(L->x);
}

/* compile with a budget, run, compare with the reference; returns the
 * measurements the program made (-1 on failure, message in why) */
static int tuned_run(layer *L, double budget, int64_t count, char *why, size_t cap) {
    if (kiln_eval_reference(L->g) != KILN_OK) {
        snprintf(why, cap, "reference: %s", kiln_graph_error(L->g));
        return -1;
    }
    float *ref = malloc((size_t)count * sizeof *ref), *got = malloc((size_t)count * sizeof *got);
    kiln_read_output(L->g, "y", ref, (size_t)count * sizeof *ref);
    kiln_compile_options o = kiln_compile_defaults();
    o.search_budget = budget;
    o.threads = 1;
    kiln_status st;
    kiln_program *p = kiln_compile(L->g, &o, &st);
    int meas = -1;
    if (!p) snprintf(why, cap, "compile: %s", kiln_graph_error(L->g));
    else if (kiln_run(p) != KILN_OK) snprintf(why, cap, "run: %s", kiln_graph_error(L->g));
    else if (kiln_run(p) != KILN_OK) snprintf(why, cap, "second run: %s", kiln_graph_error(L->g));
    else {
        kiln_read_output(L->g, "y", got, (size_t)count * sizeof *got);
        meas = kiln_program_measurements(p);
        /* the winner may use int8 arithmetic (an approximation the search may
         * choose, flagged in its schedule): 3% of the largest output */
        double big = 0;
        for (int64_t i = 0; i < count; i++) big = fabs(ref[i]) > big ? fabs(ref[i]) : big;
        for (int64_t i = 0; i < count; i++) {
            if (fabs(ref[i] - got[i]) > 1e-3 + 0.03 * big + 1e-4 * fabs(ref[i])) {
                snprintf(why, cap, "element %lld: reference %g, tuned %g", (long long)i, ref[i], got[i]);
                meas = -1;
                break;
            }
        }
    }
    kiln_program_free(p);
    free(ref);
    free(got);
    return meas;
}

static int count_records(int *damaged) {
    int n = 0;
    sch_tune_record *r = sch_tunedb_load(&n, damaged);
    free(r);
    return n;
}

static void test_search_and_reuse(void) {
    char why[300] = "";
    CASE_BEGIN("search_winner_verified_and_recorded");
    unlink(db_path);
    layer L = make_layer(8, 96, 256, 1);
    int meas = tuned_run(&L, 20, 8 * 96, why, sizeof why);
    CHECK(meas > 0, "first compile measured %d candidates: %s", meas, why);
    int damaged = 0;
    int n1 = count_records(&damaged);
    CHECK(n1 >= 1 && damaged == 0, "%d records, %d damaged", n1, damaged);
    sch_tune_record *recs = sch_tunedb_load(&n1, &damaged);
    for (int i = 0; i < n1; i++) {
        sch_contract_sched sc;
        CHECK(sch_contract_sched_parse(recs[i].schedule, &sc), "record schedule '%s' unreadable", recs[i].schedule);
        CHECK(recs[i].tried >= 2 && recs[i].best_s > 0 && recs[i].base_s > 0, "tried %d best %g base %g",
              recs[i].tried, recs[i].best_s, recs[i].base_s);
        CHECK(recs[i].best_s <= recs[i].base_s * 1.0001 || recs[i].tried > 0, "winner slower than the baseline");
    }
    free(recs);
    CASE_END();

    CASE_BEGIN("search_second_compile_uses_db_without_measuring");
    int meas2 = tuned_run(&L, 20, 8 * 96, why, sizeof why);
    CHECK(meas2 == 0, "second compile measured %d candidates (%s)", meas2, why);
    CHECK(count_records(&damaged) == n1, "records changed");
    free_layer(&L);
    CASE_END();
}

/* a contraction whose N is symbolic (attention over the positions so far)
 * has no bucket at compile time: the second compile, at another N, takes
 * the record the first one tuned and measures nothing */
static void test_symbolic_reuse(void) {
    char why[300] = "";
    CASE_BEGIN("search_symbolic_sizes_reuse_latest_record");
    unlink(db_path);
    for (int pass = 0; pass < 2 && !why[0]; pass++) {
        int64_t m = 8, n = pass ? 56 : 40, k = 64;
        kiln_graph *g = kiln_graph_new();
        kiln_tensor x = kiln_input(g, "x", KILN_F32, "m, 64");
        kiln_tensor w = kiln_input(g, "w", KILN_F32, "n, 64");
        kiln_output(g, kiln_linear(g, x, w, KILN_NONE), "y");
        float *xb = rand_f32(m * k, 7), *wb = rand_f32(n * k, 8);
        kiln_bind_dim(g, "m", m);
        kiln_bind_dim(g, "n", n);
        kiln_bind_input(g, "x", xb, (size_t)(m * k) * sizeof(float));
        kiln_bind_input(g, "w", wb, (size_t)(n * k) * sizeof(float));
        float *ref = malloc((size_t)(m * n) * sizeof *ref), *got = malloc((size_t)(m * n) * sizeof *got);
        CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
        kiln_read_output(g, "y", ref, (size_t)(m * n) * sizeof *ref);
        kiln_compile_options o = kiln_compile_defaults();
        o.search_budget = 20;
        o.threads = 1;
        kiln_status st;
        kiln_program *p = kiln_compile(g, &o, &st);
        CHECK(p && kiln_run(p) == KILN_OK, "pass %d: %s", pass, kiln_graph_error(g));
        if (p) {
            int meas = kiln_program_measurements(p);
            if (pass == 0) CHECK(meas > 0, "first compile measured %d candidates", meas);
            else CHECK(meas == 0, "second compile (n=%lld) measured %d candidates", (long long)n, meas);
            kiln_read_output(g, "y", got, (size_t)(m * n) * sizeof *got);
            for (int64_t i = 0; i < m * n && !why[0]; i++)
                if (fabs(ref[i] - got[i]) > 1e-4 + 1e-4 * fabs(ref[i]))
                    snprintf(why, sizeof why, "pass %d element %lld: reference %g, tuned %g", pass, (long long)i, ref[i],
                             got[i]);
            CHECK(!why[0], "%s", why);
        }
        kiln_program_free(p);
        free(ref);
        free(got);
        free(xb);
        free(wb);
        kiln_graph_free(g);
    }
    CASE_END();
}

static void test_wrong_candidate_rejected(void) {
    char why[300] = "";
    CASE_BEGIN("search_injected_wrong_candidate_rejected");
    unlink(db_path);
    setenv("KILN_TUNE_INJECT_WRONG", "1", 1); /* the first candidate (the default) is "wrong" */
    layer L = make_layer(1, 64, 256, 2);
    int meas = tuned_run(&L, 20, 64, why, sizeof why);
    unsetenv("KILN_TUNE_INJECT_WRONG");
    CHECK(meas > 0, "%s", why);
    int n = 0, damaged = 0;
    sch_tune_record *r = sch_tunedb_load(&n, &damaged);
    CHECK(n >= 1, "no record");
    int rejected = 0;
    for (int i = 0; i < n; i++) rejected += r[i].rejected;
    CHECK(rejected >= 1, "the wrong candidate was not counted as rejected");
    /* the winner cannot be the rejected default schedule */
    sch_contract_sched def = sch_contract_default(0, KILN_Q4_0), got;
    for (int i = 0; i < n; i++) {
        CHECK(sch_contract_sched_parse(r[i].schedule, &got), "unreadable schedule");
        CHECK(!(got.mr == def.mr && got.nr == def.nr && got.nc == def.nc && got.mc == def.mc),
              "the rejected default won: %s", r[i].schedule);
    }
    free(r);
    free_layer(&L);
    CASE_END();
}

/* a contraction too large for the generic reference (over 6.7e7 multiply-
 * adds): candidates are checked against the sampled host reference, which
 * must also catch a wrong one */
static void test_sampled_reference(void) {
    char why[300] = "";
    CASE_BEGIN("search_sampled_reference_rejects_wrong_candidate");
    unlink(db_path);
    setenv("KILN_TUNE_INJECT_WRONG", "1", 1);
    layer L = make_layer(160, 512, 1024, 4); /* 8.4e7 multiply-adds */
    int meas = tuned_run(&L, 6, 160 * 512, why, sizeof why);
    unsetenv("KILN_TUNE_INJECT_WRONG");
    CHECK(meas > 0, "%s", why);
    int n = 0, damaged = 0;
    sch_tune_record *r = sch_tunedb_load(&n, &damaged);
    int rejected = 0;
    for (int i = 0; i < n; i++) rejected += r[i].rejected;
    CHECK(n >= 1 && rejected >= 1, "%d records, %d rejected", n, rejected);
    free(r);
    free_layer(&L);
    CASE_END();
}

static void test_corrupt_db(void) {
    char why[300] = "";
    CASE_BEGIN("search_survives_corrupt_db");
    FILE *f = fopen(db_path, "wb");
    fputs("# kiln tune db v1\nfp=\"x\" key=\"contract-q4_0\" garbage \xff\xfe\n\x01\x02\x03", f);
    fclose(f);
    layer L = make_layer(1, 64, 256, 3);
    int meas = tuned_run(&L, 10, 64, why, sizeof why);
    CHECK(meas > 0, "%s", why);
    int damaged = 0;
    CHECK(count_records(&damaged) >= 1, "no record written over a corrupt DB");
    free_layer(&L);
    CASE_END();
}

static void test_concurrent_tuners(void) {
    char why[300] = "";
    CASE_BEGIN("search_two_processes_both_land");
    unlink(db_path);
    pid_t kids[2];
    for (int c = 0; c < 2; c++) {
        kids[c] = fork();
        if (kids[c] == 0) {
            /* different shapes: different records */
            layer L = make_layer(1, 32 + 32 * c, 256, 10 + (unsigned)c);
            int meas = tuned_run(&L, 10, 32 + 32 * c, why, sizeof why);
            free_layer(&L);
            _exit(meas > 0 ? 0 : 1);
        }
    }
    int ok = 1;
    for (int c = 0; c < 2; c++) {
        int status = 0;
        waitpid(kids[c], &status, 0);
        ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    CHECK(ok, "a tuning process failed");
    int damaged = 0;
    CHECK(count_records(&damaged) == 2, "%d records, want 2", count_records(&damaged));
    CASE_END();
}

static void test_space_and_model(void) {
    CASE_BEGIN("search_space_and_cost_model");
    sch_contract_shape sh = {64, 640, 2048, 1, KILN_Q4_K, 1, 0, 0, 0, 0, 0, 0};
    const sch_machine mc_default_for_test = sch_machine_default();
    int n = sch_space_contract(&sh, NULL, 0);
    CHECK(n > 50, "space of %d", n);
    sch_contract_sched *sp = malloc((size_t)n * sizeof *sp);
    CHECK(sch_space_contract(&sh, sp, n) == n, "enumeration size differs");
    for (int i = 0; i < n; i++) {
        /* dot form: mr*nr accumulators, 2 per B row, 2 for A; packed form:
         * mr*(nr/16) accumulators, nr/16 for B, 1 broadcast */
        int regs = sp[i].form == SCH_FORM_PACKED ? sp[i].mr * (sp[i].nr / 16) + sp[i].nr / 16 + 1
                                                 : sp[i].mr * sp[i].nr + 2 * sp[i].nr + 2;
        CHECK(regs <= 32, "schedule %d needs %d vector registers", i, regs);
        CHECK(sp[i].arith == SCH_ARITH_F32, "schedule %d: int8 without VNNI", i);
    }
    /* with VNNI: int8 in both forms, every schedule emittable; the packed
     * int8 form keeps int32 and f32 accumulators (2 per tile entry) */
    sch_contract_shape shv = {512, 640, 2048, 1, KILN_Q4_K, 1, 1, 1, 1, 0, 1, 0};
    int nvn = sch_space_contract(&shv, NULL, 0);
    sch_contract_sched *spv = malloc((size_t)nvn * sizeof *spv);
    CHECK(sch_space_contract(&shv, spv, nvn) == nvn, "enumeration size differs (vnni)");
    int packed_i8 = 0, dot_i8 = 0, amx = 0, amx_bf16 = 0;
    for (int i = 0; i < nvn; i++) {
        CHECK(sch_family_valid(KILN_Q4_K, &spv[i]), "schedule %d of the VNNI space is not emittable", i);
        if (spv[i].arith == SCH_ARITH_BF16) {
            CHECK(spv[i].form == SCH_FORM_AMX, "schedule %d: bf16 outside the AMX form", i);
            amx_bf16++;
        }
        if (spv[i].arith != SCH_ARITH_I8) continue;
        if (spv[i].form == SCH_FORM_AMX) {
            amx++;
        } else if (spv[i].form == SCH_FORM_PACKED) {
            int nv = spv[i].nr / 16;
            packed_i8++;
            CHECK(2 * spv[i].mr * nv + 2 * nv + 2 <= 32, "packed int8 schedule %d spills", i);
        } else {
            dot_i8++;
        }
    }
    CHECK(packed_i8 > 10 && dot_i8 > 10 && amx > 10 && amx_bf16 > 10,
          "approximate schedules: %d packed int8, %d dot int8, %d amx int8, %d amx bf16", packed_i8, dot_i8, amx, amx_bf16);
    /* f32 B: the bf16 tiles only for an operand the program computes (an
     * activation such as the KV cache), never for a caller's input */
    for (int act = 0; act < 2; act++) {
        sch_contract_shape shf = {512, 512, 64, 1, KILN_F32, 1, 1, 1, 1, act, 1, 0};
        int nf = sch_space_contract(&shf, NULL, 0), bf = 0, pbf = 0;
        sch_contract_sched *spf = malloc((size_t)nf * sizeof *spf);
        CHECK(sch_space_contract(&shf, spf, nf) == nf, "enumeration size differs (f32 B)");
        for (int i = 0; i < nf; i++) {
            bf += spf[i].arith == SCH_ARITH_BF16;
            pbf += spf[i].arith == SCH_ARITH_BF16 && spf[i].form == SCH_FORM_PACKED;
            CHECK(sch_family_valid(KILN_F32, &spf[i]), "f32 schedule %d is not emittable", i);
        }
        CHECK(act ? bf >= 8 : bf == 0, "f32 B (%s): %d bf16 schedules", act ? "activation" : "input", bf);
        CHECK(act ? pbf >= 8 : pbf == 0, "f32 B (%s): %d packed bf16 schedules", act ? "activation" : "input", pbf);
        free(spf);
    }
    /* and every schedule's text reads back as the same schedule */
    for (int i = 0; i < nvn; i++) {
        char text[128];
        sch_contract_sched back;
        sch_contract_sched_print(&spv[i], text, sizeof text);
        CHECK(sch_contract_sched_parse(text, &back) && back.mr == spv[i].mr && back.nr == spv[i].nr &&
                  back.form == spv[i].form && back.arith == spv[i].arith && back.kc == spv[i].kc && back.mc == spv[i].mc &&
                  back.pf == spv[i].pf,
              "schedule '%s' does not read back", text);
    }
    /* decode with an f32 B strided along K: the direct tiles join (and only
     * there), every one emittable and reading back with direct=1; a direct
     * text on anything but the f32 packed form is refused */
    for (int strided = 0; strided < 2; strided++) {
        sch_contract_shape shd = {1, 256, 512, 1, KILN_F32, 1, 1, 0, 0, 1, 1, strided};
        int nd = sch_space_contract(&shd, NULL, 0), direct = 0;
        sch_contract_sched *spd = malloc((size_t)nd * sizeof *spd);
        CHECK(sch_space_contract(&shd, spd, nd) == nd, "enumeration size differs (strided f32 B)");
        for (int i = 0; i < nd; i++) {
            if (!spd[i].direct) continue;
            direct++;
            char text[128];
            sch_contract_sched back;
            sch_contract_sched_print(&spd[i], text, sizeof text);
            CHECK(spd[i].form == SCH_FORM_PACKED && spd[i].arith == SCH_ARITH_F32 && spd[i].mr == 1,
                  "direct schedule '%s' at m=1", text);
            CHECK(sch_family_valid(KILN_F32, &spd[i]) && !sch_family_valid(KILN_F16, &spd[i]),
                  "direct schedule '%s': emittable for f32 B only", text);
            CHECK(sch_contract_sched_parse(text, &back) && back.direct == 1 && back.nr == spd[i].nr &&
                      back.nc == spd[i].nc && back.pf == spd[i].pf,
                  "schedule '%s' does not read back", text);
        }
        CHECK(strided ? direct >= 9 : direct == 0, "strided=%d: %d direct schedules", strided, direct);
        free(spd);
    }
    /* decode on a pool of two: every schedule that would split the kernel
     * has a serial=1 twin, which reads back and which the model prices as
     * one thread; prefill and a pool of one have none */
    for (int nt = 1; nt <= 2; nt++) {
        sch_contract_shape shs = {1, 256, 640, 1, KILN_Q8_0, nt, 1, 0, 0, 0, 1, 0};
        int ns = sch_space_contract(&shs, NULL, 0), serial = 0, split = 0;
        sch_contract_sched *sps = malloc((size_t)ns * sizeof *sps);
        CHECK(sch_space_contract(&shs, sps, ns) == ns, "enumeration size differs (serial)");
        for (int i = 0; i < ns; i++) {
            if (!sps[i].serial) {
                split += sch_contract_runs(&sps[i], 256, 1, nt) > 1;
                continue;
            }
            serial++;
            char text[128];
            sch_contract_sched back;
            sch_contract_sched_print(&sps[i], text, sizeof text);
            CHECK(sch_contract_sched_parse(text, &back) && back.serial == 1 && back.nc == sps[i].nc,
                  "schedule '%s' does not read back", text);
            sch_contract_shape one = shs;
            one.nthreads = 1;
            sch_contract_sched plain = sps[i];
            plain.serial = 0;
            CHECK(sch_cost_contract(&mc_default_for_test, &shs, &sps[i]) ==
                      sch_cost_contract(&mc_default_for_test, &one, &plain),
                  "'%s' is not priced as one thread", text);
        }
        CHECK(nt == 1 ? serial == 0 : serial == split && serial > 20, "%d threads: %d serial twins of %d split schedules",
              nt, serial, split);
        free(sps);
    }
    {
        sch_contract_shape pre = {512, 256, 640, 1, KILN_Q8_0, 2, 1, 0, 0, 0, 1, 0};
        int np = sch_space_contract(&pre, NULL, 0), serial = 0;
        sch_contract_sched *spp = malloc((size_t)np * sizeof *spp);
        sch_space_contract(&pre, spp, np);
        for (int i = 0; i < np; i++) serial += spp[i].serial;
        CHECK(serial == 0, "prefill space has %d serial schedules", serial);
        free(spp);
    }
    {
        sch_contract_sched t;
        CHECK(!sch_contract_sched_parse("mr=1 nr=8 nc=0 mc=16 arith=f32 direct=1", &t), "direct dot form accepted");
        CHECK(!sch_contract_sched_parse("mr=4 nr=32 nc=0 mc=64 arith=i8 form=packed kc=0 direct=1", &t),
              "direct int8 accepted");
        CHECK(sch_contract_sched_parse("mr=2 nr=32 nc=0 mc=64 arith=f32 form=packed kc=0 pf=16 direct=1", &t) &&
                  t.direct && t.pf == 16 && t.mr == 2,
              "direct f32 packed refused");
    }
    /* the repacked copy (rp=1): decode of a caller's q4_0 / q5_0 / q8_0 /
     * q4_k / q6_k weight has an rp twin of each int8 1 x 8 dot schedule,
     * which reads back, is emittable for block formats only, and is priced
     * below its twin;
     * other formats, prefill and an activation B have none; rp on another
     * tile or arithmetic is refused */
    {
        const kiln_dtype rts[5] = {KILN_Q4_0, KILN_Q5_0, KILN_Q8_0, KILN_Q4_K, KILN_Q6_K};
        for (int ti = 0; ti < 5; ti++)
            for (int v = 0; v < 3; v++) {
                /* v: decode, prefill, activation B */
                sch_contract_shape shr = {v == 1 ? 64 : 1, 1024, 1024, 1, rts[ti], 1, 1, 0, 0, v == 2, 1, 0};
                int nr_ = sch_space_contract(&shr, NULL, 0), rps = 0, twins = 0, far = 0;
                sch_contract_sched *spr = malloc((size_t)nr_ * sizeof *spr);
                CHECK(sch_space_contract(&shr, spr, nr_) == nr_, "enumeration size differs (rp)");
                for (int i = 0; i < nr_; i++) {
                    if (!spr[i].rp) continue;
                    if (spr[i].pf2) { /* the far prefetch: beside its one-level point, checked below */
                        far++;
                        continue;
                    }
                    rps++;
                    char text[128];
                    sch_contract_sched back;
                    sch_contract_sched_print(&spr[i], text, sizeof text);
                    CHECK(strstr(text, " rp=1") && sch_contract_sched_parse(text, &back) && back.rp == 1 &&
                              back.mr == 1 && back.nr == 8 && back.arith == SCH_ARITH_I8,
                          "schedule '%s' does not read back", text);
                    CHECK(sch_family_valid(rts[ti], &spr[i]) && sch_family_is(&spr[i], SCH_FAM_DOT_I8_RP, rts[ti]) &&
                              !sch_family_is(&spr[i], SCH_FAM_DOT_I8_RP, KILN_F16) &&
                              !sch_family_is(&spr[i], SCH_FAM_DOT_I8_RP, KILN_F32),
                          "rp schedule '%s': not emittable for the block formats only", text);
                    sch_contract_sched plain = spr[i];
                    plain.rp = 0;
                    for (int j = 0; j < nr_; j++)
                        if (memcmp(&spr[j], &plain, sizeof plain) == 0) {
                            twins++;
                            CHECK(sch_cost_contract(&mc_default_for_test, &shr, &spr[i]) <
                                      sch_cost_contract(&mc_default_for_test, &shr, &plain),
                                  "'%s' not priced below its twin", text);
                        }
                }
                int want = v == 0;
                CHECK(want ? rps >= 8 && twins == rps : rps == 0, "%s, %s: %d rp schedules, %d with twins",
                      kiln_dtype_name(rts[ti]), v == 0 ? "decode" : v == 1 ? "prefill" : "activation", rps, twins);
                /* every rp point with a near prefetch has a far twin at twice it */
                int near = 0;
                for (int i = 0; i < nr_; i++)
                    if (spr[i].rp && spr[i].pf > 0 && !spr[i].pf2) {
                        near++;
                        sch_contract_sched f2 = spr[i];
                        f2.pf2 = 2 * f2.pf;
                        int found = 0;
                        for (int j = 0; j < nr_; j++) found |= memcmp(&spr[j], &f2, sizeof f2) == 0;
                        CHECK(found, "%s: no far-prefetch twin of an rp point", kiln_dtype_name(rts[ti]));
                    }
                CHECK(far == near, "%s: %d far-prefetch points for %d rp points with a prefetch", kiln_dtype_name(rts[ti]),
                      far, near);
                free(spr);
            }
        sch_contract_sched t;
        CHECK(!sch_contract_sched_parse("mr=2 nr=8 nc=0 mc=16 arith=i8 rp=1", &t), "rp with mr=2 accepted");
        CHECK(!sch_contract_sched_parse("mr=1 nr=4 nc=0 mc=16 arith=i8 rp=1", &t), "rp with nr=4 accepted");
        CHECK(!sch_contract_sched_parse("mr=1 nr=8 nc=0 mc=16 arith=f32 rp=1", &t), "rp with f32 accepted");
        CHECK(sch_contract_sched_parse("mr=1 nr=8 nc=0 mc=16 arith=i8 pf=8 serial=1 rp=1", &t) && t.rp && t.serial &&
                  t.pf == 8,
              "serial rp schedule refused");
        /* the far prefetch level (pf2): an rp tile's, beyond its near one; it
         * reads back, and the model gives it to the k-quants' large
         * decode weights and not to q8_0's */
        CHECK(sch_contract_sched_parse("mr=1 nr=8 nc=0 mc=16 arith=i8 pf=8 rp=1 pf2=16", &t) && t.rp && t.pf == 8 &&
                  t.pf2 == 16,
              "far prefetch refused");
        char back_text[128];
        sch_contract_sched_print(&t, back_text, sizeof back_text);
        CHECK(strstr(back_text, " pf2=16") != NULL, "far prefetch printed as '%s'", back_text);
        CHECK(!sch_contract_sched_parse("mr=1 nr=4 nc=0 mc=16 arith=i8 pf=8 pf2=16", &t), "pf2 on a plain tile accepted");
        CHECK(!sch_contract_sched_parse("mr=1 nr=8 nc=0 mc=16 arith=i8 pf=16 rp=1 pf2=16", &t), "pf2 = pf accepted");
        CHECK(!sch_contract_sched_parse("mr=1 nr=8 nc=0 mc=16 arith=i8 rp=1 pf2=16", &t), "pf2 without pf accepted");
        for (int ti = 2; ti < 4; ti++) {
            sch_contract_shape big = {1, 14336, 4096, 1, rts[ti], 1, 1, 0, 0, 0, 1, 0};
            sch_contract_sched one, two;
            CHECK(sch_contract_sched_parse("mr=1 nr=8 nc=0 mc=16 arith=i8 pf=8 rp=1", &one) &&
                      sch_contract_sched_parse("mr=1 nr=8 nc=0 mc=16 arith=i8 pf=8 rp=1 pf2=16", &two),
                  "rp schedules unreadable");
            double c1 = sch_cost_contract(&mc_default_for_test, &big, &one), c2 = sch_cost_contract(&mc_default_for_test, &big, &two);
            CHECK(rts[ti] == KILN_Q4_K ? c2 < c1 : c1 < c2, "%s 14336 x 4096 decode: far prefetch priced %g against %g",
                  kiln_dtype_name(rts[ti]), c2, c1);
        }
    }
    /* the model sees int8's four-to-one dot products at prefill sizes */
    sch_contract_sched pf = {6, 16, 0, 64, SCH_ARITH_F32, SCH_FORM_PACKED, 512, 0, 0, 0, 0, 0}, pi = pf;
    pi.arith = SCH_ARITH_I8;
    CHECK(sch_cost_contract(&mc_default_for_test, &shv, &pi) < sch_cost_contract(&mc_default_for_test, &shv, &pf),
          "packed int8 not cheaper than packed f32 at m=512");
    free(spv);
    sch_machine mc = sch_machine_default();
    /* a 1x1 tile dequantises B once per row of A: the model must see that */
    sch_contract_sched one = {.mr = 1, .nr = 1, .mc = 64}, big = {.mr = 4, .nr = 4, .mc = 64};
    CHECK(sch_cost_contract(&mc, &sh, &big) < sch_cost_contract(&mc, &sh, &one), "4x4 not cheaper than 1x1 at m=64");
    free(sp);
    double a[5] = {1, 2, 3, 4, 5}, b[5] = {10, 20, 30, 40, 50}, c[5] = {5, 4, 3, 2, 1};
    CHECK(fabs(sch_spearman(a, b, 5) - 1.0) < 1e-12, "spearman of a monotone pair");
    CHECK(fabs(sch_spearman(a, c, 5) + 1.0) < 1e-12, "spearman of a reversed pair");
    CASE_END();
}

/* The work split of contraction kernels (contract.h), against a naive
 * model of it: every batch point's B rows are cut into runs exactly as the
 * emitted kernel does (whole nr-row strips, covering [0, n) once, widths
 * within one strip of each other), the items dealt out as rt_pool does, and
 * each thread's strips counted one by one. */
static int64_t naive_busiest(int64_t n, int64_t nr, int64_t nbatch, int64_t q, int nthreads, int *covered) {
    int64_t strips = (n + nr - 1) / nr, items = nbatch * q;
    int64_t parts = nthreads < items ? nthreads : items, most = 0;
    unsigned char *seen = calloc((size_t)n, 1);
    *covered = 1;
    int64_t wmin = n, wmax = 0;
    for (int64_t i = 0; i < parts; i++) {
        int64_t got = 0;
        for (int64_t w = items * i / parts; w < items * (i + 1) / parts; w++) {
            int64_t t = w % q, s0 = strips * t / q, s1 = strips * (t + 1) / q;
            int64_t n0 = nr * s0, n1 = nr * s1 < n ? nr * s1 : n;
            if (w / q == 0) {
                for (int64_t r = n0; r < n1; r++) *covered &= !seen[r]++;
                if (s1 - s0 < wmin) wmin = s1 - s0;
                if (s1 - s0 > wmax) wmax = s1 - s0;
            }
            for (int64_t st = s0; st < s1; st++) got++;
        }
        if (got > most) most = got;
    }
    for (int64_t r = 0; r < n; r++) *covered &= seen[r] == 1;
    *covered &= wmax - wmin <= 1;
    free(seen);
    return most;
}

static void test_contract_runs(void) {
    CASE_BEGIN("contract_runs_match_naive_split");
    unsigned seed = 7;
    for (int it = 0; it < 400; it++) {
        seed = seed * 1103515245u + 12345u;
        int64_t n = 1 + (int64_t)((seed >> 8) % 3000), nr = 1 + (int64_t)((seed >> 4) % 64);
        int64_t nbatch = 1 + (int64_t)((seed >> 20) % 12);
        int nthreads = 1 + (int)((seed >> 24) % 5);
        sch_contract_sched s = sch_contract_default(it & 1, KILN_F32);
        s.nr = (int)nr;
        s.nc = it % 3 == 0 ? (int)(1 + (seed >> 12) % 700) : 0;
        int64_t q = sch_contract_runs(&s, n, nbatch, nthreads);
        int64_t strips = (n + nr - 1) / nr;
        CHECK(q >= 1 && q <= strips, "n=%ld nr=%ld: %ld runs of %ld strips", (long)n, (long)nr, (long)q, (long)strips);
        int covered = 0;
        int64_t want = naive_busiest(n, nr, nbatch, q, nthreads, &covered);
        CHECK(covered, "n=%ld nr=%ld q=%ld: runs do not cover the rows once, evenly", (long)n, (long)nr, (long)q);
        CHECK(sch_contract_busiest(n, nr, nbatch, q, nthreads) == want, "n=%ld nr=%ld nb=%ld q=%ld t=%d: busiest %ld, naive %ld",
              (long)n, (long)nr, (long)nbatch, (long)q, nthreads, (long)sch_contract_busiest(n, nr, nbatch, q, nthreads), (long)want);
        if (s.nc > 0) CHECK(sch_contract_run_rows(n, nr, q) <= (s.nc + nr - 1) / nr * nr, "a run wider than nc=%d", s.nc);
    }
    CASE_END();

    /* the even split: 2048 B rows in 48-row strips (43, the last short) on
     * 2 threads get 22 and 21 strips; fixed 192-row runs gave 5 and 6 runs
     * (20 and 23 strips) */
    CASE_BEGIN("contract_runs_even_split");
    sch_contract_sched s = sch_contract_default(1, KILN_F32);
    s.nr = 48;
    s.nc = 0;
    int64_t q = sch_contract_runs(&s, 2048, 1, 2);
    CHECK(sch_contract_busiest(2048, 48, 1, q, 2) == 22, "busiest thread %ld strips", (long)sch_contract_busiest(2048, 48, 1, q, 2));
    CHECK(sch_contract_run_rows(2048, 48, q) >= 4 * 48, "runs of %ld rows: fewer than 4 strips", (long)sch_contract_run_rows(2048, 48, q));
    /* 9 batch points on 2 threads: split inside a batch point, not 5 and 4 */
    s.nr = 16;
    q = sch_contract_runs(&s, 512, 9, 2);
    CHECK(sch_contract_busiest(512, 16, 9, q, 2) == 9 * 32 / 2, "9 batch points: busiest %ld of %d strips",
          (long)sch_contract_busiest(512, 16, 9, q, 2), 9 * 32);
    CASE_END();
}

/* causal attention's scores are stored as 0 past the mask by the packed
 * bf16 form (demand.c); the search must not count that against it: the
 * outputs the mask zeroes are left out of the comparison, with the full
 * reference (s = 64) and the sampled one (s = 512, 1.3e8 multiply-adds).
 * No candidate of either contraction is rejected, and the tuned program
 * agrees with the reference. */
static void test_masked_outputs_not_compared(void) {
    for (int big = 0; big < 2; big++) {
        char why[300] = "", name[64];
        snprintf(name, sizeof name, "search_causal_scores_%s_reference", big ? "sampled" : "full");
        CASE_BEGIN(name);
        unlink(db_path);
        const int64_t S = big ? 512 : 64, D = big ? 128 : 32, n_out = S * 4 * D;
        char qs[32], ks[32];
        snprintf(qs, sizeof qs, "s, 4, %lld", (long long)D);
        snprintf(ks, sizeof ks, "s, 1, %lld", (long long)D);
        kiln_graph *g = kiln_graph_new();
        kiln_tensor q = kiln_input(g, "q", KILN_F32, qs);
        kiln_tensor k = kiln_add(g, kiln_input(g, "k", KILN_F32, ks), kiln_input(g, "k2", KILN_F32, ks));
        kiln_tensor v = kiln_add(g, kiln_input(g, "v", KILN_F32, ks), kiln_input(g, "v2", KILN_F32, ks));
        kiln_output(g, kiln_attention(g, q, k, v, kiln_sym_parse(g, "0"), 0.1, 0), "y");
        float *qb = rand_f32(S * 4 * D, 7), *kb = rand_f32(S * D, 8), *vb = rand_f32(S * D, 9), *z = calloc((size_t)(S * D), 4);
        kiln_bind_dim(g, "s", S);
        kiln_bind_input(g, "q", qb, (size_t)(S * 4 * D) * sizeof(float));
        kiln_bind_input(g, "k", kb, (size_t)(S * D) * sizeof(float));
        kiln_bind_input(g, "k2", z, (size_t)(S * D) * sizeof(float));
        kiln_bind_input(g, "v", vb, (size_t)(S * D) * sizeof(float));
        kiln_bind_input(g, "v2", z, (size_t)(S * D) * sizeof(float));
        float *ref = malloc((size_t)n_out * sizeof *ref), *got = malloc((size_t)n_out * sizeof *got);
        CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
        kiln_read_output(g, "y", ref, (size_t)n_out * sizeof *ref);
        kiln_compile_options o = kiln_compile_defaults();
        o.search_budget = big ? 8 : 4;
        o.threads = 1;
        kiln_status st;
        kiln_program *p = kiln_compile(g, &o, &st);
        CHECK(p && kiln_run(p) == KILN_OK, "%s", kiln_graph_error(g));
        char *text = p ? kiln_program_kernels(p) : NULL;
        CHECK(text && strstr(text, "used where"), "no causal bound found");
        free(text);
        if (p) {
            kiln_read_output(g, "y", got, (size_t)n_out * sizeof *got);
            double worst = 0;
            for (int64_t e = 0; e < n_out; e++) worst = fabs(ref[e] - got[e]) > worst ? fabs(ref[e] - got[e]) : worst;
            CHECK(worst < 0.02, "tuned attention off by %g", worst);
        }
        kiln_program_free(p);
        int n = 0, damaged = 0;
        sch_tune_record *r = sch_tunedb_load(&n, &damaged);
        CHECK(n >= 2, "%d records", n);
        for (int i = 0; i < n && !why[0]; i++)
            if (r[i].rejected) snprintf(why, sizeof why, "%s (%s): %d candidates rejected", r[i].key, r[i].schedule, r[i].rejected);
        CHECK(!why[0], "%s", why);
        free(r);
        free(qb);
        free(kb);
        free(vb);
        free(z);
        free(ref);
        free(got);
        kiln_graph_free(g);
        CASE_END();
    }
}

/* a plan (kiln_program_search with weights): a graph of NL linears of
 * different widths (each its own key), the widest carrying almost all the
 * time; the plan measured from a profile of the default schedules passes the
 * narrow ones over (under 2% of the run), searches the wide one, keeps the
 * budget (issue 26: within 3 s), and the results still match the reference */
static void test_search_plan(void) {
    CASE_BEGIN("search_plan_priorities_and_budget");
    enum { NL = 8 };
    const int64_t m = 64, k = 256;
    kiln_graph *g = kiln_graph_new();
    char xs[64];
    snprintf(xs, sizeof xs, "m, %lld", (long long)k);
    kiln_tensor x = kiln_input(g, "x", KILN_F32, xs);
    void *ws[NL];
    char names[NL][16];
    for (int l = 0; l < NL; l++) {
        int64_t n = l == 0 ? 2048 : 8 + 8 * l; /* one wide, the rest narrow */
        char shape[64];
        snprintf(shape, sizeof shape, "%lld, %lld", (long long)n, (long long)k);
        snprintf(names[l], sizeof names[l], "w%d", l);
        kiln_tensor w = kiln_input(g, names[l], KILN_Q4_0, shape);
        char out[16];
        snprintf(out, sizeof out, "y%d", l);
        kiln_output(g, kiln_linear(g, x, w, KILN_NONE), out);
        float *wf = rand_f32(n * k, 40u + (unsigned)l);
        size_t wb = kiln_dtype_bytes(KILN_Q4_0, n * k);
        ws[l] = malloc(wb);
        quant_quantize(KILN_Q4_0, wf, ws[l], n * k);
        free(wf);
        kiln_bind_input(g, names[l], ws[l], wb);
    }
    float *xv = rand_f32(m * k, 7);
    kiln_bind_dim(g, "m", m);
    kiln_bind_input(g, "x", xv, (size_t)(m * k) * sizeof(float));
    CHECK(kiln_eval_reference(g) == KILN_OK, "reference: %s", kiln_graph_error(g));
    float *ref = malloc(2048 * 64 * sizeof *ref), *got = malloc(2048 * 64 * sizeof *got);
    kiln_read_output(g, "y0", ref, 2048 * 64 * sizeof *ref);
    kiln_compile_options o = kiln_compile_defaults();
    o.threads = 1;
    kiln_status st;
    setenv("KILN_RETUNE", "1", 1); /* records of earlier cases do not count */
    kiln_program *p = kiln_compile(g, &o, &st);
    CHECK(p != NULL, "compile: %s", kiln_graph_error(g));
    if (!p) goto out;
    int nk = kiln_program_kernel_count(p);
    double *t = calloc((size_t)nk + 1, sizeof *t), *w = calloc(2 * (size_t)nk + 2, sizeof *w);
    kiln_program_profile_on(p, 1);
    CHECK(kiln_run(p) == KILN_OK, "profile run: %s", kiln_graph_error(g));
    CHECK(kiln_program_kernel_times(p, t, nk) == nk, "no kernel times");
    kiln_program_profile_on(p, 0);
    for (int i = 0; i < nk; i++) w[2 * i + 1] = t[i]; /* m = 64: the prefill bucket */
    const double budget = 2.0;
    CHECK(kiln_program_search(p, budget, w, 0.02) == KILN_OK, "plan refused");
    CHECK(kiln_run(p) == KILN_OK, "search run: %s", kiln_graph_error(g));
    CHECK(kiln_program_search_finish(p) == KILN_OK, "finish: %s", kiln_graph_error(g));
    kiln_search_status ss;
    kiln_program_search_status(p, &ss);
    /* the final recompile's reserve grows with the load per core
     * (exec.c recompile_estimate): on a machine so busy that it takes most
     * of the 2 s, searching nothing is keeping the budget, not a failure */
    if (ss.reserve_s < 0.5 * budget)
        CHECK(ss.searched >= 1, "the wide kernel was not searched (%d searched, %d skipped, %.2f s reserved)",
              ss.searched, ss.skipped, ss.reserve_s);
    else
        printf("note: %.2f s of the %.1f s budget reserved for the recompile (a loaded machine): %d searched\n",
               ss.reserve_s, budget, ss.searched);
    CHECK(ss.skipped >= NL - 2, "the narrow kernels were not passed over: %d skipped", ss.skipped);
    CHECK(ss.spent_s <= budget + 3.0, "the search took %.2f s of a %.1f s budget", ss.spent_s, budget);
    CHECK(kiln_run(p) == KILN_OK, "run after the search: %s", kiln_graph_error(g));
    kiln_read_output(g, "y0", got, 2048 * 64 * sizeof *got);
    double big = 0, worst = 0;
    for (int i = 0; i < 2048 * 64; i++) big = fabs(ref[i]) > big ? fabs(ref[i]) : big;
    for (int i = 0; i < 2048 * 64; i++) worst = fabs(ref[i] - got[i]) > worst ? fabs(ref[i] - got[i]) : worst;
    CHECK(worst <= 1e-3 + 0.03 * big, "after the search: error %g of %g", worst, big);
    CHECK(kiln_program_search(p, -1, NULL, 0) == KILN_ERR_INVALID, "a negative budget was taken");
    free(t);
    free(w);
    kiln_program_free(p);
out:
    unsetenv("KILN_RETUNE");
    for (int l = 0; l < NL; l++) free(ws[l]);
    free(xv);
    free(ref);
    free(got);
    kiln_graph_free(g);
    CASE_END();
}


/* a plan that could measure nothing (a budget the recompile reserve takes
 * whole, as on a very busy machine) records nothing as kept, so the next run
 * searches again; one that searched records what it passed over */
static int db_records(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = 0;
    char line[4096];
    while (fgets(line, sizeof line, f))
        if (strstr(line, "sched=")) n++;
    fclose(f);
    return n;
}

static void test_search_starved(void) {
    CASE_BEGIN("search_starved_records_nothing");
    const int64_t m = 64, k = 256, n = 512;
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "m, 256");
    kiln_tensor w = kiln_input(g, "w", KILN_Q4_0, "512, 256");
    kiln_output(g, kiln_linear(g, x, w, KILN_NONE), "y");
    float *wf = rand_f32(n * k, 91u), *xv = rand_f32(m * k, 92u);
    size_t wb = kiln_dtype_bytes(KILN_Q4_0, n * k);
    void *wq = malloc(wb);
    quant_quantize(KILN_Q4_0, wf, wq, n * k);
    kiln_bind_input(g, "w", wq, wb);
    kiln_bind_dim(g, "m", m);
    kiln_bind_input(g, "x", xv, (size_t)(m * k) * sizeof(float));
    char dir[] = "/tmp/kiln-starved-XXXXXX", path[64];
    const char *old = getenv("KILN_TUNEDB");
    char *saved = old ? strdup(old) : NULL;
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        goto out;
    }
    snprintf(path, sizeof path, "%s/t.db", dir);
    setenv("KILN_TUNEDB", path, 1);
    for (int round = 0; round < 2; round++) {
        kiln_compile_options o = kiln_compile_defaults();
        o.threads = 1;
        kiln_status st;
        kiln_program *p = kiln_compile(g, &o, &st);
        CHECK(p != NULL, "compile: %s", kiln_graph_error(g));
        if (!p) break;
        int nk = kiln_program_kernel_count(p);
        double *wt = calloc(2 * (size_t)nk + 2, sizeof *wt);
        for (int i = 0; i < nk; i++) wt[2 * i] = wt[2 * i + 1] = 1.0;
        /* round 0: a budget no search fits in; round 1: a real one */
        CHECK(kiln_program_search(p, round == 0 ? 1e-6 : 5.0, wt, 0.0) == KILN_OK, "plan refused");
        CHECK(kiln_run(p) == KILN_OK, "search run: %s", kiln_graph_error(g));
        CHECK(kiln_program_search_finish(p) == KILN_OK, "finish: %s", kiln_graph_error(g));
        kiln_search_status ss;
        kiln_program_search_status(p, &ss);
        if (round == 0)
            CHECK(ss.searched == 0 && db_records(path) == 0, "a starved search left %d records (%d searched)",
                  db_records(path), ss.searched);
        else
            CHECK(ss.searched == 0 || db_records(path) >= 1, "a search of %d kernels left no record", ss.searched);
        free(wt);
        kiln_program_free(p);
    }
    remove(path);
    rmdir(dir);
out:
    if (saved) setenv("KILN_TUNEDB", saved, 1);
    else unsetenv("KILN_TUNEDB");
    free(saved);
    free(wf);
    free(xv);
    free(wq);
    kiln_graph_free(g);
    CASE_END();
}

/* time left after a plan's searches: kiln_program_search_more reopens the
 * groups it searched, each starting at the rank where it stopped (so more
 * candidates are measured, not the same ones again), and the result still
 * matches the reference; with no plan, or no budget, it reopens nothing */
static void test_search_more(void) {
    CASE_BEGIN("search_more_continues_where_it_stopped");
    const int64_t m = 64, k = 256, n = 512;
    layer L = make_layer(m, n, k, 93u);
    kiln_graph *g = L.g;
    float *ref = malloc((size_t)(m * n) * sizeof *ref), *got = malloc((size_t)(m * n) * sizeof *got);
    CHECK(kiln_eval_reference(g) == KILN_OK, "reference: %s", kiln_graph_error(g));
    kiln_read_output(g, "y", ref, (size_t)(m * n) * sizeof *ref);
    setenv("KILN_RETUNE", "1", 1);
    kiln_compile_options o = kiln_compile_defaults();
    o.threads = 1;
    kiln_status st;
    kiln_program *p = kiln_compile(g, &o, &st);
    CHECK(p != NULL, "compile: %s", kiln_graph_error(g));
    if (!p) goto out;
    CHECK(kiln_program_search_more(p, 5.0, 4) == 0, "reopened kernels with no plan");
    int nk = kiln_program_kernel_count(p);
    double *wt = calloc(2 * (size_t)nk + 2, sizeof *wt);
    for (int i = 0; i < nk; i++) wt[2 * i + 1] = 1.0; /* m = 64: the prefill bucket */
    CHECK(kiln_program_search(p, 20.0, wt, 0.0) == KILN_OK, "plan refused");
    CHECK(kiln_run(p) == KILN_OK, "search run: %s", kiln_graph_error(g));
    kiln_search_status s1, s2;
    kiln_program_search_status(p, &s1);
    CHECK(kiln_program_search_more(p, 0, 4) == 0, "reopened kernels with no budget");
    int reopened = kiln_program_search_more(p, 10.0, 4);
    if (s1.searched >= 1) {
        CHECK(reopened >= 1, "nothing reopened after %d searches", s1.searched);
        CHECK(kiln_run(p) == KILN_OK, "second pass: %s", kiln_graph_error(g));
        kiln_program_search_status(p, &s2);
        /* the recompile's reserve grows with the load per core: on a machine
         * so busy that it takes most of the 10 s, the pass searches nothing */
        if (s2.reserve_s < 5.0) {
            CHECK(s2.searched == s1.searched + 1, "second pass searched %d kernels (first %d)", s2.searched,
                  s1.searched);
            CHECK(s2.measurements > s1.measurements, "second pass measured nothing new (%d then %d)",
                  s1.measurements, s2.measurements);
        } else {
            printf("note: %.2f s of the second pass's 10 s reserved for the recompile (a loaded machine)\n",
                   s2.reserve_s);
        }
        CHECK(s2.spent_s <= s1.spent_s + 10.0 + 3.0, "second pass took %.2f s of 10", s2.spent_s - s1.spent_s);
    } else {
        printf("note: the first pass searched nothing (%.2f s reserved): a loaded machine\n", s1.reserve_s);
    }
    CHECK(kiln_program_search_finish(p) == KILN_OK, "finish: %s", kiln_graph_error(g));
    CHECK(kiln_program_search_more(p, 5.0, 4) == 0, "reopened kernels after the search ended");
    CHECK(kiln_run(p) == KILN_OK, "run after the search: %s", kiln_graph_error(g));
    kiln_read_output(g, "y", got, (size_t)(m * n) * sizeof *got);
    double big = 0, worst = 0;
    for (int64_t i = 0; i < m * n; i++) big = fabs(ref[i]) > big ? fabs(ref[i]) : big;
    for (int64_t i = 0; i < m * n; i++) worst = fabs(ref[i] - got[i]) > worst ? fabs(ref[i] - got[i]) : worst;
    CHECK(worst <= 1e-3 + 0.03 * big, "after two passes: error %g of %g", worst, big);
    free(wt);
    kiln_program_free(p);
out:
    unsetenv("KILN_RETUNE");
    free(ref);
    free(got);
    free_layer(&L);
    CASE_END();
}

/* the recompile's reserve, as arithmetic on given rates (no timing): the
 * estimate of a unit at a rate, stretched by the load (at most 4x); the
 * factor a search applies when the machine has become slower since its plan
 * (never below 1, the whole stretch at most 4x); and this machine's rate
 * remembered in the kernel cache for the next process, a damaged record set
 * aside. Run first, in a child: no compile of this process has taught the
 * rate yet */
static int near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b) + 1e-12; }
static void test_reserve_arithmetic(void) {
    CASE_BEGIN("search_reserve_follows_the_load");
    /* gemma3-270m's unit at the guessed rate, alone: the 5.50 s the CLI printed */
    double alone = rt_tune_recompile_s(868074, 5.5e-6, 1);
    CHECK(near(alone, 1.1 * 5.5e-6 * 868074 + 0.25), "alone %g", alone);
    CHECK(alone > 5.49 && alone < 5.51, "alone %g", alone);
    CHECK(near(rt_tune_recompile_s(868074, 5.5e-6, 2.5), 2.5 * alone), "stretched 2.5x");
    CHECK(near(rt_tune_recompile_s(868074, 5.5e-6, 9), 4 * alone), "stretch capped at 4x");
    CHECK(near(rt_tune_recompile_s(868074, 5.5e-6, 0.5), alone), "no stretch below 1");
    /* the plan measured 1.5x; the same later: the plan's reserve */
    CHECK(near(rt_tune_reserve_scale(1, 1.5, 1.5), 1), "same load");
    CHECK(near(rt_tune_reserve_scale(1, 1.5, 3.0), 2), "twice as slow: twice the reserve");
    CHECK(near(rt_tune_reserve_scale(1, 2.0, 1.0), 1), "a lighter load keeps the reserve");
    CHECK(near(rt_tune_reserve_scale(3, 1.5, 3.0), 4.0 / 3), "3x applied, twice as slow: capped at 4x in all");
    CHECK(near(rt_tune_reserve_scale(4, 1.0, 2.0), 1), "4x applied already");
    /* a 30 s plan with 2 s of profile and a 5.5 s reserve leaves 22.5 s to
     * search; at twice the slowdown 17 s */
    double left = 28;
    CHECK(near(left - alone * rt_tune_reserve_scale(1, 1.2, 2.4), left - 2 * alone), "the searches' time");
    char dir[] = "/tmp/kiln-test-ccrate-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    pid_t pid = fork();
    if (pid == 0) {
        setenv("XDG_CACHE_HOME", dir, 1);
        rt_cc_rate_remember(8e-6, 0);
        int bad = fabs(rt_cc_seconds_per_byte() - 8e-6) > 1e-11;
        rt_cc_rate_remember(4e-6, 0x1234); /* averaged with the record; one program's own */
        _exit(bad ? 1 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a remembered rate is not the next process's rate (status %d)", st);
    /* the record holds the average of the two */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cat %s/kiln/cc-rate-* 2>/dev/null", dir);
    FILE *f = popen(cmd, "r");
    double r = 0;
    CHECK(f && fscanf(f, "kiln-cc-rate 1 %lf", &r) == 1 && fabs(r - 6e-6) < 1e-11, "record %g", r);
    if (f) pclose(f);
    /* the program's own rate for its key, the machine's for another */
    pid = fork();
    if (pid == 0) {
        setenv("XDG_CACHE_HOME", dir, 1);
        double own = rt_cc_seconds_per_byte_for(0x1234), other = rt_cc_seconds_per_byte_for(0x999);
        int bad = !(fabs(own - 4e-6) < 1e-11 && fabs(other - 6e-6) < 1e-11);
        /* a slow recompile moves both up by at most a quarter */
        rt_cc_rate_remember(3e-5, 0x1234);
        own = rt_cc_seconds_per_byte_for(0x1234);
        bad |= !(fabs(own - 5e-6) < 1e-11);
        _exit(bad ? 1 : 0);
    }
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a program's remembered rate is not its next search's (status %d)", st);
    f = popen(cmd, "r");
    r = 0;
    CHECK(f && fscanf(f, "kiln-cc-rate 1 %lf", &r) == 1 && fabs(r - 7.5e-6) < 1e-11, "after a slow one: record %g", r);
    if (f) pclose(f);
    /* a damaged record: set aside, the guess stands */
    snprintf(cmd, sizeof cmd, "for x in %s/kiln/cc-rate-*; do echo 'kiln-cc-rate 1 banana' > $x; done", dir);
    CHECK(system(cmd) == 0, "damage");
    pid = fork();
    if (pid == 0) {
        setenv("XDG_CACHE_HOME", dir, 1);
        double g = rt_cc_seconds_per_byte();
        _exit(g > 1e-6 && g < 2e-5 && fabs(g - 6e-6) > 1e-9 ? 0 : 1);
    }
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a damaged record was used (status %d)", st);
    snprintf(cmd, sizeof cmd, "ls %s/kiln/cc-rate-*.bad >/dev/null 2>&1", dir);
    CHECK(system(cmd) == 0, "the damaged record was not set aside");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    CASE_END();
}

/* round one's candidates (rt_tune_round_one) for a q4_k decode kernel whose
 * B streams from beyond L2 (2048 x 2048, 2.4 MB): the default is the
 * model's first choice (the repacked int8 tiles); the next candidate is
 * another family's, int8 (the model prices f32 dequantisation of a block
 * format above it) and prefetching B (it prices a stream without software
 * prefetch above one with it); a plain twin of a repacked schedule is not
 * taken for it (every field compared); no schedule twice; the cap holds */
static void test_round_one(void) {
    CASE_BEGIN("round_one_families");
    sch_contract_shape sh = {1, 2048, 2048, 1, KILN_Q4_K, 1, 1, 0, 0, 0, 0, 0};
    sch_machine mc = sch_machine_default();
    int ns = sch_space_contract(&sh, NULL, 0);
    sch_contract_sched *sp = malloc((size_t)ns * sizeof *sp);
    double *cost = malloc((size_t)ns * sizeof *cost);
    int *order = malloc((size_t)ns * sizeof *order);
    CHECK(sch_space_contract(&sh, sp, ns) == ns, "enumeration size differs");
    for (int i = 0; i < ns; i++) cost[i] = sch_cost_contract(&mc, &sh, &sp[i]);
    sch_rank_by_cost(cost, order, ns);
    const sch_contract_sched *best = &sp[order[0]];
    CHECK(best->rp && best->pf > 0, "the model's first choice is not the prefetching repacked tile");
    for (int i = 0; i < ns; i++) {
        if (sp[i].arith == SCH_ARITH_F32 || sp[i].pf != 0) continue;
        sch_contract_sched f = sp[i], pf = sp[i];
        f.arith = SCH_ARITH_F32;
        f.rp = 0;
        pf.pf = 8;
        CHECK(sch_cost_contract(&mc, &sh, &pf) < sch_cost_contract(&mc, &sh, &sp[i]),
              "prefetch not priced below none (nr=%d)", sp[i].nr);
        if (!sp[i].rp)
            CHECK(sch_cost_contract(&mc, &sh, &f) > sch_cost_contract(&mc, &sh, &sp[i]),
                  "f32 dequantisation of q4_k not priced above int8 (nr=%d)", sp[i].nr);
    }
    /* AMX bf16 prefill: A's K block re-read per strip past a quarter of L2
     * is priced, so K is blocked where A's rows of all K do not fit */
    {
        sch_contract_shape big = {256, 2048, 8192, 1, KILN_Q4_K, 1, 1, 1, 1, 0, 1, 0};
        sch_contract_sched whole = {32, 32, 0, 32, SCH_ARITH_BF16, SCH_FORM_AMX, 0, 0, 0, 0, 0, 0}, blocked = whole;
        blocked.kc = 1024;
        CHECK(sch_cost_contract(&mc, &big, &blocked) < sch_cost_contract(&mc, &big, &whole),
              "kc = 1024 not priced below all of K at 256 x 2048 x 8192");
        sch_contract_shape small = big;
        small.k = 512;
        sch_contract_sched half = whole;
        half.kc = 256;
        CHECK(sch_cost_contract(&mc, &small, &half) >= sch_cost_contract(&mc, &small, &whole),
              "a K block priced below all of K where A fits (k = 512)");
    }
    sch_contract_sched c[32];
    int end = -1;
    int n = rt_tune_round_one(sp, cost, order, ns, best, NULL, 0, 2, c, &end);
    CHECK(n == 2, "%d candidates for a cap of 2", n);
    CHECK(n == 2 && !c[1].rp && c[1].arith == SCH_ARITH_I8 && c[1].pf > 0,
          "the second candidate is not the plain prefetching int8 tile (rp=%d arith=%d pf=%d)", c[1].rp, (int)c[1].arith,
          c[1].pf);
    CHECK(end == 0, "the family's point consumed ranks (%d)", end);
    /* the default's plain twin is its own candidate */
    sch_contract_sched twin = *best;
    twin.rp = 0;
    n = rt_tune_round_one(sp, cost, order, ns, best, &twin, 0, 3, c, &end);
    CHECK(n >= 2 && memcmp(&c[1], &twin, sizeof twin) == 0, "a seed that differs only in rp was dropped");
    n = rt_tune_round_one(sp, cost, order, ns, best, NULL, 0, 12, c, &end);
    CHECK(n == 12, "%d candidates for a cap of 12", n);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) CHECK(memcmp(&c[i], &c[j], sizeof c[i]) != 0, "candidate %d repeats %d", i, j);
    free(sp);
    free(cost);
    free(order);
    CASE_END();
}

/* a decode weight under L2 but of 64 KiB or more is read from memory in a
 * model (the step's other weights evict it; the search times it flushed):
 * the model's first choice prefetches (gemma3-270m's 640 x 1024 q4_k, 0.36
 * MB), where a weight under 64 KiB and a prefill have no such price */
static void test_small_decode_weight_prefetch(void) {
    CASE_BEGIN("small_decode_weight_prefetch");
    sch_machine mc = sch_machine_default();
    for (int v = 0; v < 3; v++) {
        /* v: a 640 x 1024 decode weight; a 64 x 256 one (9 KB); the first as an activation B */
        sch_contract_shape sh = {1, v == 1 ? 64 : 640, v == 1 ? 256 : 1024, 1, KILN_Q4_K, 1, 1, 0, 0, v == 2, 1, 0};
        int ns = sch_space_contract(&sh, NULL, 0), pairs = 0;
        sch_contract_sched *sp = malloc((size_t)ns * sizeof *sp);
        CHECK(sch_space_contract(&sh, sp, ns) == ns, "enumeration size differs");
        for (int i = 0; i < ns; i++) {
            if (sp[i].arith != SCH_ARITH_I8 || sp[i].pf != 0 || sp[i].rp || sp[i].form) continue;
            sch_contract_sched pf = sp[i];
            pf.pf = 8;
            double c0 = sch_cost_contract(&mc, &sh, &sp[i]), c8 = sch_cost_contract(&mc, &sh, &pf);
            pairs++;
            if (v == 0) CHECK(c8 < c0, "a 0.36 MB decode weight: prefetch not priced below none (nr=%d)", sp[i].nr);
            else CHECK(c8 >= c0, "%s: a prefetch priced below none (nr=%d)", v == 1 ? "a 9 KB weight" : "an activation B", sp[i].nr);
        }
        CHECK(pairs > 0, "no plain int8 dot schedule in the space (v=%d)", v);
        free(sp);
    }
    CASE_END();
}

/* the space of shape sh (*ns entries; the caller frees it) and the index of
 * the cost model's first choice on machine mc */
static sch_contract_sched *space_of(const sch_contract_shape *sh, int *ns) {
    *ns = sch_space_contract(sh, NULL, 0);
    sch_contract_sched *sp = malloc((size_t)*ns * sizeof *sp);
    CHECK(sch_space_contract(sh, sp, *ns) == *ns, "enumeration size differs");
    return sp;
}
static int first_choice(const sch_machine *mc, const sch_contract_shape *sh, const sch_contract_sched *sp, int ns) {
    int best = -1;
    double cbest = 0;
    for (int i = 0; i < ns; i++) {
        double c = sch_cost_contract(mc, sh, &sp[i]);
        if (best < 0 || c < cbest) best = i, cbest = c;
    }
    return best;
}

/* a decode weight read from memory: the model prices the prefetch's lead
 * (cost.c, SCH_DECODE_LEAD_BYTES), so the 8-row q5_0 tile gets cheaper as
 * its lead grows (gemma3-270m's 2048 x 640: 91 us at pf=8, 59 us at pf=32
 * with pf2=64, one thread, Intel Xeon without AMX), the model's first choice
 * has the long lead, and q8_0's far level adds no lead */
static void test_decode_lead(void) {
    CASE_BEGIN("decode_prefetch_lead");
    sch_machine mc = sch_machine_default();
    for (int q8 = 0; q8 < 2; q8++) {
        sch_contract_shape sh = {1, 2048, 640, 1, q8 ? KILN_Q8_0 : KILN_Q5_0, 1, 1, 0, 0, 0, 1, 0};
        int ns, found = 0;
        sch_contract_sched *sp = space_of(&sh, &ns);
        int best = first_choice(&mc, &sh, sp, ns);
        for (int i = 0; i < ns; i++) {
            if (sp[i].arith != SCH_ARITH_I8 || !sp[i].rp || sp[i].pf != 8 || sp[i].pf2 || sp[i].form || found) continue;
            found = 1;
            sch_contract_sched v[4] = {sp[i], sp[i], sp[i], sp[i]};
            v[1].pf = 16;
            v[2].pf = 32;
            v[3].pf = 32;
            v[3].pf2 = 64;
            double c0 = sch_cost_contract(&mc, &sh, &v[0]), c1 = sch_cost_contract(&mc, &sh, &v[1]);
            double c2 = sch_cost_contract(&mc, &sh, &v[2]), c3 = sch_cost_contract(&mc, &sh, &v[3]);
            if (!q8) CHECK(c0 > c1 && c1 > c2 && c2 > c3, "q5_0 leads pf=8/16/32/32+64 priced %g %g %g %g", c0, c1, c2, c3);
            else CHECK(c0 > c2 && c3 >= c2, "q8_0 pf=8/32/32+64 priced %g %g %g", c0, c2, c3);
        }
        CHECK(found, "no 8-row repacked int8 tile at pf=8 in the space (q8=%d)", q8);
        if (!q8 && best >= 0)
            CHECK(sp[best].pf >= 32 || sp[best].pf2 >= 64, "the first choice leads by pf=%d pf2=%d", sp[best].pf, sp[best].pf2);
        free(sp);
    }
    CASE_END();
}

/* the bf16 packed form's dot product costs what the machine says
 * (sch_machine.bf16_dot_slots, bf16_probe.c): at Zen 4's rate (1 slot) it
 * is priced below the f32 packed form at attention's score shape, at an
 * Intel Xeon's (4 slots, gemma3-270m's scores 1.08 ms in bf16 against 0.59
 * in f32 at a 256-row prefill) above it, and the first choice is then not
 * bf16 */
static void test_bf16_dot_priced(void) {
    CASE_BEGIN("bf16_dot_priced");
    for (int slots = 1; slots <= 4; slots *= 4) {
        sch_machine mc = sch_machine_default();
        mc.bf16_dot_slots = slots;
        sch_contract_shape sh = {256, 256, 256, 4, KILN_F32, 1, 1, 0, 0, 1, 1, 0};
        int ns, pairs = 0;
        sch_contract_sched *sp = space_of(&sh, &ns);
        int best = first_choice(&mc, &sh, sp, ns);
        for (int i = 0; i < ns; i++) {
            if (sp[i].arith != SCH_ARITH_BF16 || sp[i].form != SCH_FORM_PACKED) continue;
            sch_contract_sched f = sp[i];
            f.arith = SCH_ARITH_F32;
            double cb = sch_cost_contract(&mc, &sh, &sp[i]), cf = sch_cost_contract(&mc, &sh, &f);
            pairs++;
            if (slots == 1) CHECK(cb < cf, "1 slot: bf16 %g not below f32 %g (mr=%d nr=%d)", cb, cf, sp[i].mr, sp[i].nr);
            else CHECK(cb > cf, "4 slots: bf16 %g not above f32 %g (mr=%d nr=%d)", cb, cf, sp[i].mr, sp[i].nr);
        }
        CHECK(pairs > 0, "no bf16 packed schedule in the space");
        if (slots == 4 && best >= 0) CHECK(sp[best].arith != SCH_ARITH_BF16, "4 slots: the first choice is bf16");
        free(sp);
    }
    CASE_END();
}

int main(void) {
    test_reserve_arithmetic();
    test_decode_lead();
    test_bf16_dot_priced();
    snprintf(db_path, sizeof db_path, "/tmp/kiln-test-search-%d.db", (int)getpid());
    setenv("KILN_TUNEDB", db_path, 1);
    test_contract_runs();
    test_space_and_model();
    test_round_one();
    test_small_decode_weight_prefetch();
    test_search_and_reuse();
    test_symbolic_reuse();
    test_wrong_candidate_rejected();
    test_sampled_reference();
    test_masked_outputs_not_compared();
    test_corrupt_db();
    test_concurrent_tuners();
    test_search_plan();
    test_search_starved();
    test_search_more();
    unlink(db_path);
    char side[300];
    snprintf(side, sizeof side, "%s.lock", db_path);
    unlink(side);
    snprintf(side, sizeof side, "%s.damaged", db_path);
    unlink(side);
    return check_exit();
}
