/* test_tune_generic.c — the schedule search of generic MAP / REDUCE kernels
 * (src/runtime/tune_generic.c, src/sched/space_generic.c), end to end.
 *
 * softmax, rmsnorm, an elementwise chain, a SUM and a MAX reduction are
 * compiled with a search budget (KILN_TUNEDB set to a temp file): the
 * outputs equal the reference interpreter's within the vector paths'
 * tolerance, records are written, and a second compile makes zero
 * measurements (constant sizes: applied at compile time; symbolic sizes:
 * at the first run). An injected wrong candidate is rejected and counted in
 * the record. A state update (SCATTER reading its own state) is never
 * searched in place: its state holds exactly one update after a run.
 * Kernels writing part of one buffer (a concat's halves) are searched. The
 * schedule text round-trips and bad text is refused; the space starts with
 * the default and every emitted candidate computes the same values.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln.h"
#include "kiln_compile.h"
#include "space_generic.h"
#include "tunedb.h"

static char db_path[256];

static float *rand_f32(int64_t n, unsigned seed, float lo, float hi) {
    float *x = malloc((size_t)n * sizeof *x);
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)(s >> 8) / 16777216.0f;
    }
    return x;
}

typedef enum { G_SOFTMAX, G_RMSNORM, G_CHAIN, G_SUM, G_MAX } gkind;
static const char *gnames[] = {"softmax", "rmsnorm", "chain", "sum", "max"};

typedef struct gcase {
    kiln_graph *g;
    float *x, *w;
    int64_t nout;
} gcase;

/* rows x cols (chain: rows * cols, 1-D); symbolic: sizes are bound names */
static gcase make_case(gkind k, int64_t rows, int64_t cols, int symbolic) {
    gcase c;
    memset(&c, 0, sizeof c);
    kiln_graph *g = kiln_graph_new();
    char shape[64];
    if (symbolic) snprintf(shape, sizeof shape, k == G_CHAIN ? "n" : "rows, cols");
    else if (k == G_CHAIN) snprintf(shape, sizeof shape, "%lld", (long long)(rows * cols));
    else snprintf(shape, sizeof shape, "%lld, %lld", (long long)rows, (long long)cols);
    kiln_tensor x = kiln_input(g, "x", KILN_F32, shape), y;
    if (k == G_SOFTMAX) y = kiln_softmax(g, x, -1);
    else if (k == G_RMSNORM) {
        char ws[32];
        if (symbolic) snprintf(ws, sizeof ws, "cols");
        else snprintf(ws, sizeof ws, "%lld", (long long)cols);
        y = kiln_rmsnorm(g, x, kiln_input(g, "w", KILN_F32, ws), 1e-6);
    } else if (k == G_SUM) y = kiln_sum(g, x, 1);
    else if (k == G_MAX) y = kiln_max(g, x, 1);
    else {
        kiln_tensor a = kiln_const(g, 1.5, KILN_F32), b = kiln_const(g, 0.25, KILN_F32), d = kiln_const(g, -1, KILN_F32);
        y = kiln_add(g, kiln_mul(g, kiln_add(g, kiln_mul(g, x, a), b), x), d);
    }
    kiln_output(g, y, "y");
    if (symbolic) {
        if (k == G_CHAIN) kiln_bind_dim(g, "n", rows * cols);
        else {
            kiln_bind_dim(g, "rows", rows);
            kiln_bind_dim(g, "cols", cols);
        }
    }
    c.x = rand_f32(rows * cols, (unsigned)(k + 7), -4, 4);
    kiln_bind_input(g, "x", c.x, (size_t)(rows * cols) * sizeof(float));
    if (k == G_RMSNORM) {
        c.w = rand_f32(cols, 99, 0.5f, 1.5f);
        kiln_bind_input(g, "w", c.w, (size_t)cols * sizeof(float));
    }
    c.nout = (k == G_SUM || k == G_MAX) ? rows : rows * cols;
    c.g = g;
    return c;
}

static void free_case(gcase *c) {
    kiln_graph_free(c->g);
    free(c->x);
    free(c->w);
}

static int count_records(void) {
    int n = 0, damaged = 0;
    sch_tune_record *r = sch_tunedb_load(&n, &damaged);
    free(r);
    return n;
}

/* compile with a budget, run twice, compare with the reference; returns the
 * measurements (-1 on failure, message in why) */
static int tuned_run(gcase *c, double budget, char *why, size_t cap) {
    if (kiln_eval_reference(c->g) != KILN_OK) {
        snprintf(why, cap, "reference: %s", kiln_graph_error(c->g));
        return -1;
    }
    float *ref = malloc((size_t)c->nout * sizeof *ref), *got = malloc((size_t)c->nout * sizeof *got);
    kiln_read_output(c->g, "y", ref, (size_t)c->nout * sizeof *ref);
    kiln_compile_options o = kiln_compile_defaults();
    o.search_budget = budget;
    o.threads = 2;
    kiln_program *p = kiln_compile(c->g, &o, NULL);
    int meas = -1;
    if (!p) snprintf(why, cap, "compile: %s", kiln_graph_error(c->g));
    else {
        int ok = 1;
        for (int run = 0; run < 2 && ok; run++) {
            memset(got, 0, (size_t)c->nout * sizeof *got);
            if (kiln_run(p) != KILN_OK) {
                snprintf(why, cap, "run %d: %s", run, kiln_graph_error(c->g));
                ok = 0;
                break;
            }
            kiln_read_output(c->g, "y", got, (size_t)c->nout * sizeof *got);
            for (int64_t i = 0; i < c->nout; i++)
                if (!(fabs((double)ref[i] - (double)got[i]) <= 1e-5 * (1.0 + fabs((double)ref[i])))) {
                    snprintf(why, cap, "run %d element %lld: reference %.9g, compiled %.9g", run, (long long)i,
                             (double)ref[i], (double)got[i]);
                    ok = 0;
                    break;
                }
        }
        if (ok) meas = kiln_program_measurements(p);
    }
    kiln_program_free(p);
    free(ref);
    free(got);
    return meas;
}

static void test_search_and_reuse(void) {
    for (int sym = 0; sym < 2; sym++)
        for (int k = 0; k < 5; k++) {
            char name[80];
            snprintf(name, sizeof name, "gtune_%s_%s_search_then_reuse", gnames[k], sym ? "symbolic" : "const");
            CASE_BEGIN(name);
            int64_t rows = k == G_CHAIN ? 64 : 48, cols = sym ? 1536 : 2048;
            char why[256] = "";
            int before = count_records();
            gcase c = make_case((gkind)k, rows, cols, sym);
            int m1 = tuned_run(&c, 30.0, why, sizeof why);
            CHECK(m1 > 0, "first compile: %d measurements (%s)", m1, why);
            int after = count_records();
            CHECK(after > before, "no record written (%d -> %d)", before, after);
            free_case(&c);
            gcase c2 = make_case((gkind)k, rows, cols, sym);
            int m2 = tuned_run(&c2, 30.0, why, sizeof why);
            CHECK(m2 == 0, "second compile: %d measurements (%s)", m2, why);
            CHECK(count_records() == after, "records changed on reuse");
            free_case(&c2);
            CASE_END();
        }
}

/* the record of the last search (the newest date wins; ties: the last line) */
static int find_record(const char *bucket, sch_tune_record *out) {
    int n = 0, damaged = 0, found = 0;
    sch_tune_record *r = sch_tunedb_load(&n, &damaged);
    for (int i = 0; i < n; i++)
        if (strncmp(r[i].key, "gen-", 4) == 0 && strcmp(r[i].bucket, bucket) == 0) {
            *out = r[i];
            found = 1;
        }
    free(r);
    return found;
}

static void test_wrong_candidate(void) {
    CASE_BEGIN("gtune_injected_wrong_candidate_rejected");
    char why[256] = "";
    /* a shape no other case uses, so it is searched */
    setenv("KILN_GTUNE_INJECT_WRONG", "1", 1); /* the default schedule's output is corrupted */
    gcase c = make_case(G_SOFTMAX, 40, 1000, 0);
    int m = tuned_run(&c, 30.0, why, sizeof why);
    unsetenv("KILN_GTUNE_INJECT_WRONG");
    CHECK(m > 0, "%d measurements (%s)", m, why);
    sch_tune_record r;
    int found = find_record("g:40x1000,r=1,s=1000,s=1000,t=2", &r);
    CHECK(found, "no record for the softmax bucket");
    CHECK(!found || r.rejected >= 1, "rejected %d", r.rejected);
    sch_generic_sched def = {0, 0, 0, 0, 0}, got;
    CHECK(!found || sch_generic_sched_parse(r.schedule, &got), "record schedule '%s'", r.schedule);
    CHECK(!found || !sch_generic_same(&def, &got), "the corrupted default won: %s", r.schedule);
    free_case(&c);
    CASE_END();
}

/* g compiled with a search budget on 2 threads and run once (checked) */
static kiln_program *searched_run(kiln_graph *g) {
    kiln_compile_options o = kiln_compile_defaults();
    o.search_budget = 30.0;
    o.threads = 2;
    kiln_program *p = kiln_compile(g, &o, NULL);
    CHECK(p != NULL, "%s", kiln_graph_error(g));
    CHECK(p && kiln_run(p) == KILN_OK, "%s", kiln_graph_error(g));
    return p;
}

static void test_state_never_searched(void) {
    CASE_BEGIN("gtune_state_update_not_searched_in_place");
    /* cache rows += kv: running the update twice would add twice */
    kiln_graph *g = kiln_graph_new();
    kiln_tensor cache = kiln_state(g, "cache", KILN_F32, "16, 512");
    kiln_tensor kv = kiln_input(g, "kv", KILN_F32, "3, 512");
    kiln_tensor rows = kiln_input(g, "rows", KILN_I32, "3");
    kiln_tensor upd = kiln_scatter(g, cache, rows, kiln_add(g, kiln_gather(g, cache, rows), kv));
    kiln_output(g, kiln_sum(g, upd, 1), "rowsum");
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    float *c_ref = rand_f32(16 * 512, 3, -1, 1), *c_got = malloc(16 * 512 * sizeof(float));
    memcpy(c_got, c_ref, 16 * 512 * sizeof(float));
    float *kvb = rand_f32(3 * 512, 4, -2, 2);
    int32_t rv[3] = {5, 9, 2};
    kiln_bind_input(g, "kv", kvb, 3 * 512 * sizeof(float));
    kiln_bind_input(g, "rows", rv, sizeof rv);
    kiln_bind_input(g, "cache", c_ref, 16 * 512 * sizeof(float));
    float s_ref[16], s_got[16];
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    kiln_read_output(g, "rowsum", s_ref, sizeof s_ref);
    kiln_bind_input(g, "cache", c_got, 16 * 512 * sizeof(float));
    kiln_program *p = searched_run(g);
    kiln_read_output(g, "rowsum", s_got, sizeof s_got);
    CHECK(memcmp(c_ref, c_got, 16 * 512 * sizeof(float)) == 0, "state differs from one update");
    for (int i = 0; i < 16; i++) CHECK(fabsf(s_ref[i] - s_got[i]) <= 1e-5f * (1 + fabsf(s_ref[i])), "row %d", i);
    /* the row sums (an idempotent kernel) may be searched; the state was not touched twice */
    CHECK(c_got[5 * 512] == c_ref[5 * 512], "row 5: %g vs %g", (double)c_got[5 * 512], (double)c_ref[5 * 512]);
    kiln_program_free(p);
    kiln_graph_free(g);
    free(c_ref);
    free(c_got);
    free(kvb);
    CASE_END();
}

static void test_text_and_space(void) {
    CASE_BEGIN("gtune_sched_text_and_space");
    sch_generic_sched s = {16, 4, 2, 4096, 0}, t;
    char buf[96];
    sch_generic_sched_print(&s, buf, sizeof buf);
    CHECK(strcmp(buf, "vec=16 nacc=4 unroll=2 chunk=4096") == 0, "%s", buf);
    CHECK(sch_generic_sched_parse(buf, &t) && sch_generic_same(&s, &t), "round trip");
    CHECK(!sch_generic_sched_parse("vec=12 nacc=4 unroll=2 chunk=0", &t), "vec=12 accepted");
    CHECK(!sch_generic_sched_parse("vec=8 nacc=3 unroll=2 chunk=0", &t), "nacc=3 accepted");
    CHECK(!sch_generic_sched_parse("vec=8 nacc=2 unroll=2 chunk=-5", &t), "negative chunk accepted");
    CHECK(!sch_generic_sched_parse("vec=8 nacc=2 unroll=2 chunk=0 x", &t), "trailing text accepted");
    CHECK(!sch_generic_sched_parse("mr=4 nr=2 nc=0 mc=64 arith=f32", &t), "a contraction schedule accepted");
    sch_generic_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.isa_lanes = 16;
    sh.map_vec = sh.red_vec = sh.has_sum = sh.has_max = 1;
    sh.outer = 64;
    sh.inner = 4096;
    sh.rn = 1;
    sh.stage_rn = 8192;
    sh.bytes = 2.0 * 64 * 4096 * 4;
    sh.ops = 12;
    sh.nthreads = 2;
    sh.parallel = 1;
    int n = sch_space_generic(&sh, NULL, 0);
    sch_generic_sched *sp = calloc((size_t)n, sizeof *sp);
    sch_space_generic(&sh, sp, n);
    sch_generic_sched def = {0, 0, 0, 0, 0};
    CHECK(n > 20, "space of %d points", n);
    CHECK(n > 0 && sch_generic_same(&sp[0], &def), "the default is not first");
    for (int i = 0; i < n; i++) {
        CHECK(isfinite(sch_cost_generic(&sh, &sp[i])) && sch_cost_generic(&sh, &sp[i]) > 0, "cost of point %d", i);
        for (int j = 0; j < i; j++) {
            sch_generic_sched a = sch_generic_effective(&sh, &sp[i]), b = sch_generic_effective(&sh, &sp[j]);
            CHECK(!sch_generic_same(&a, &b), "points %d and %d are the same schedule", i, j);
        }
    }
    /* the model prefers vectors to scalar code on a compute-heavy row */
    sch_generic_sched scal = {1, 0, 0, 0, 0}, vec = {16, 4, 2, 0, 0};
    sh.bytes = 1e3;
    CHECK(sch_cost_generic(&sh, &vec) < sch_cost_generic(&sh, &scal), "vector %g vs scalar %g",
          sch_cost_generic(&sh, &vec), sch_cost_generic(&sh, &scal));
    /* a scalar ISA: only the default, the chunks below the last dim (1024)
     * and the serial twin */
    sh.isa_lanes = 0;
    int ns = sch_space_generic(&sh, NULL, 0);
    CHECK(ns == 3, "scalar ISA space %d", ns);
    free(sp);
    CASE_END();

    /* the thread count per kernel: serial twins on a pool, none at one
     * thread or for a kernel the runtime launches serially; the text keeps
     * it (and old records without it still parse); the model sends a tiny
     * kernel to one thread; a large one has no serial twin */
    CASE_BEGIN("gtune_serial_twin");
    sch_generic_sched ser = {16, 0, 0, 0, 1}, back;
    char txt[96];
    sch_generic_sched_print(&ser, txt, sizeof txt);
    CHECK(strcmp(txt, "vec=16 nacc=0 unroll=0 chunk=0 serial=1") == 0, "%s", txt);
    CHECK(sch_generic_sched_parse(txt, &back) && back.serial == 1 && sch_generic_same(&ser, &back), "round trip");
    CHECK(sch_generic_sched_parse("vec=16 nacc=0 unroll=0 chunk=0", &back) && back.serial == 0, "old text");
    CHECK(!sch_generic_sched_parse("vec=16 nacc=0 unroll=0 chunk=0 serial=2", &back), "serial=2 accepted");
    sch_generic_shape g;
    memset(&g, 0, sizeof g);
    g.isa_lanes = 16;
    g.map_vec = 1;
    g.outer = 16;
    g.inner = 256;
    g.rn = 1;
    g.bytes = 2.0 * 16 * 256 * 4;
    g.ops = 2;
    g.nthreads = 2;
    g.parallel = 1;
    int nser = 0, np = sch_space_generic(&g, NULL, 0);
    sch_generic_sched *pts = calloc((size_t)np, sizeof *pts);
    sch_space_generic(&g, pts, np);
    for (int i = 0; i < np; i++) {
        sch_generic_sched e = sch_generic_effective(&g, &pts[i]);
        nser += e.serial;
        CHECK(!e.serial || e.chunk == 0, "point %d: serial with a chunk", i);
    }
    CHECK(nser > 0 && nser * 2 == np, "%d serial points of %d", nser, np);
    sch_generic_sched par = {16, 0, 0, 0, 0};
    CHECK(sch_cost_generic(&g, &ser) < sch_cost_generic(&g, &par), "4096 elements: serial %g vs pool %g",
          sch_cost_generic(&g, &ser), sch_cost_generic(&g, &par));
    g.outer = 4096;
    g.bytes = 2.0 * 4096 * 256 * 4;
    /* past SCH_SERIAL_MAX_BYTES no serial twin (8 MB here) */
    CHECK(sch_space_generic(&g, NULL, 0) * 2 == np, "8 MB: serial twins in the space");
    CHECK(sch_generic_effective(&g, &ser).serial == 0, "8 MB: serial kept");
    g.outer = 16;
    g.bytes = 2.0 * 16 * 256 * 4;
    CHECK(sch_generic_simpler(&par, &ser), "a tie goes to the pool");
    g.nthreads = 1;
    CHECK(sch_space_generic(&g, NULL, 0) * 2 == np, "one thread: no serial twins");
    sch_generic_sched e1 = sch_generic_effective(&g, &ser);
    CHECK(e1.serial == 0, "serial kept at one thread");
    g.nthreads = 2;
    g.parallel = 0;
    e1 = sch_generic_effective(&g, &ser);
    CHECK(e1.serial == 0, "serial kept on a serial launch");
    free(pts);
    CASE_END();
}

/* Kernels that each write part of one buffer (the two halves of a concat)
 * are searched like any other: the search's reference output starts as the
 * candidates' does, so the half a kernel leaves alone is equal in both (it
 * used to differ, and every candidate of such a kernel, the default
 * included, was rejected: gemma3's q and k rope kernels were never tuned). */
static void test_partial_writes(void) {
    CASE_BEGIN("gtune_kernels_writing_part_of_a_buffer_are_searched");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor a = kiln_input(g, "a", KILN_F32, "24, 700"), b = kiln_input(g, "b", KILN_F32, "24, 700");
    kiln_tensor c3 = kiln_const(g, 3, KILN_F32), c05 = kiln_const(g, 0.5, KILN_F32);
    kiln_tensor left = kiln_add(g, kiln_mul(g, a, c3), kiln_mul(g, a, a));
    kiln_tensor right = kiln_mul(g, kiln_add(g, b, c05), b);
    kiln_output(g, kiln_concat(g, left, right, 1), "y");
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    float *av = rand_f32(24 * 700, 11, -2, 2), *bv = rand_f32(24 * 700, 12, -2, 2);
    kiln_bind_input(g, "a", av, 24 * 700 * sizeof(float));
    kiln_bind_input(g, "b", bv, 24 * 700 * sizeof(float));
    float *ref = malloc(24 * 1400 * sizeof(float)), *got = malloc(24 * 1400 * sizeof(float));
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    kiln_read_output(g, "y", ref, 24 * 1400 * sizeof(float));
    int before = count_records();
    kiln_program *p = searched_run(g);
    kiln_read_output(g, "y", got, 24 * 1400 * sizeof(float));
    for (int64_t i = 0; i < 24 * 1400; i++)
        if (!(fabsf(ref[i] - got[i]) <= 1e-5f * (1 + fabsf(ref[i])))) {
            CHECK(0, "element %lld: reference %g, compiled %g", (long long)i, (double)ref[i], (double)got[i]);
            break;
        }
    CHECK(p && kiln_program_measurements(p) > 0, "nothing was measured");
    int n = 0, damaged = 0, searched = 0;
    sch_tune_record *r = sch_tunedb_load(&n, &damaged);
    for (int i = before; i < n; i++) searched += strncmp(r[i].key, "gen-", 4) == 0 && strstr(r[i].bucket, "700") != NULL;
    free(r);
    CHECK(searched >= 2, "%d records for the two half-writing kernels", searched);
    kiln_program_free(p);
    kiln_graph_free(g);
    free(av);
    free(bv);
    free(ref);
    free(got);
    CASE_END();
}

int main(void) {
    snprintf(db_path, sizeof db_path, "/tmp/kiln-test-gtune-%d.db", (int)getpid());
    setenv("KILN_TUNEDB", db_path, 1);
    unlink(db_path);
    test_text_and_space();
    test_search_and_reuse();
    test_wrong_candidate();
    test_state_never_searched();
    test_partial_writes();
    unlink(db_path);
    char side[300];
    snprintf(side, sizeof side, "%s.lock", db_path);
    unlink(side);
    snprintf(side, sizeof side, "%s.damaged", db_path);
    unlink(side);
    return check_exit();
}
