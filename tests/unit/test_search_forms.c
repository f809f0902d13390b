/* test_search_forms.c — the attention form a measurement records
 * (kiln_program_form_record, src/runtime/stream_select.c): the faster of the
 * two when they differ by more than 3%, else (a tie: one run's drift on a
 * shared machine) the cost model's pick for the bucket, materialised for
 * short prompts and streaming for decode. A first-run search and a long tune
 * that time the forms a few percent apart then record the same form, where
 * a coin toss used to decide a short prompt's form for both.
 *
 * The times are given, not measured: the decision is what is checked. The
 * records go to a tuning DB of this test's own.
 *
 * The third form, streaming-bf16 (the streaming program's tiles on
 * vdpbf16ps, prompts only, where the CPU has avx512_bf16): its records'
 * text read back (rt_form_record_read: a new value, and strings this kiln
 * does not know set aside), its decision (more than 3% faster than the f32
 * form that wins, else the f32 form), a record of it read back by a program
 * compiled anew, one with an unknown schedule set aside (the cost model
 * picks), the pick (a run of a short prompt runs the bf16 body once the
 * record says so, and the f32 forms again after a tie), and its output
 * checked against the reference interpreter (within the approximate forms'
 * 3% of the largest output, and not bit for bit the f32 tile's). Decode
 * buckets take no bf16 record. Without avx512_bf16 the form is refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <math.h>

#include "check.h"
#include "kiln.h"
#include "kiln_compile.h"
#include "autotune.h"
#include "stream_select.h"
#include "tunedb.h"

int rt_cpu_has(const char *flag); /* src/runtime/cpu.c, in libkiln.a */

static float Q[32], K[48], M[24], V[48];

/* softmax(q k^T + mask) v: q (4, 8), k (6, 8), mask (4, 6), v (6, 8) */
static kiln_graph *attention(void) {
    kiln_graph *g = kiln_graph_new();
    kiln_tensor q = kiln_input(g, "q", KILN_F32, "4, 8"), k = kiln_input(g, "k", KILN_F32, "6, 8");
    kiln_tensor m = kiln_input(g, "m", KILN_F32, "4, 6"), v = kiln_input(g, "v", KILN_F32, "6, 8");
    kiln_tensor s = kiln_matmul(g, q, kiln_transpose(g, k, 0, 1));
    kiln_output(g, kiln_matmul(g, kiln_softmax(g, kiln_add(g, s, m), -1), v), "out");
    kiln_bind_input(g, "q", Q, sizeof Q);
    kiln_bind_input(g, "k", K, sizeof K);
    kiln_bind_input(g, "m", M, sizeof M);
    kiln_bind_input(g, "v", V, sizeof V);
    return g;
}

/* the form kiln_program_forms names for the bucket whose line starts with
 * `what`: 0 materialised, 1 streaming, 2 streaming-bf16, -1 not found or
 * not measured */
static int recorded_form(const kiln_program *p, const char *what) {
    char *text = kiln_program_forms(p);
    int f = -1;
    for (char *line = text; line && *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = 0;
        if (strncmp(line, what, strlen(what)) == 0 && strstr(line, "(measured, tuning DB)")) {
            char *c = strstr(line, "): ");
            if (c)
                f = strncmp(c + 3, "streaming-bf16 ", 15) == 0 ? 2
                    : strncmp(c + 3, "streaming ", 10) == 0  ? 1
                    : strncmp(c + 3, "materialised", 12) == 0 ? 0
                                                              : -1;
        }
        line = end ? end + 1 : NULL;
    }
    free(text);
    return f;
}

/* attention with the bf16 tile's shapes: q (8, 4, 32) at positions 32..39
 * over k (40, 1, 32) and v (40, 1, 32), causal (32 rows, 40 keys: the
 * short-prompt bucket) */
#define BQ (8 * 4 * 32)
#define BK (40 * 32)
#define BV (40 * 32)
#define BO (8 * 4 * 32)
static float BQv[BQ], BKv[BK], BVv[BV];
static kiln_graph *attention_bf16(void) {
    kiln_graph *g = kiln_graph_new();
    kiln_tensor q = kiln_input(g, "q", KILN_F32, "8, 4, 32"), k = kiln_input(g, "k", KILN_F32, "40, 1, 32");
    kiln_tensor v = kiln_input(g, "v", KILN_F32, "40, 1, 32");
    kiln_output(g, kiln_attention(g, q, k, v, kiln_sym_int(g, 32), 0.35, 0), "out");
    kiln_bind_input(g, "q", BQv, sizeof BQv);
    kiln_bind_input(g, "k", BKv, sizeof BKv);
    kiln_bind_input(g, "v", BVv, sizeof BVv);
    return g;
}

/* one run of p, output "out" into o (BO floats) */
static int run_out(kiln_program *p, kiln_graph *g, float *o) {
    return kiln_run(p) == KILN_OK && kiln_read_output(g, "out", o, BO * sizeof *o) == KILN_OK;
}

/* the largest |a - b| over BO floats; the largest |a| in *big */
static double max_diff(const float *a, const float *b, double *big) {
    double d = 0;
    *big = 0;
    for (int i = 0; i < BO; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) d = e;
        if (fabs(a[i]) > *big) *big = fabs(a[i]);
    }
    return d;
}

/* the DB's attention-form key ("attn-form-<16 hex>") from its text, into key */
static int db_form_key(const char *db, char *key, size_t cap) {
    FILE *f = fopen(db, "r");
    if (!f) return 0;
    char line[4096];
    int ok = 0;
    while (!ok && fgets(line, sizeof line, f)) {
        char *a = strstr(line, "attn-form-");
        if (a && strlen(a) >= 26 && cap > 26) {
            memcpy(key, a, 26);
            key[26] = 0;
            ok = 1;
        }
    }
    fclose(f);
    return ok;
}

int main(void) {
    char db[256];
    snprintf(db, sizeof db, "/tmp/kiln-test-search-forms-%d.db", (int)getpid());
    setenv("KILN_TUNEDB", db, 1);
    unsetenv("KILN_STREAM");
    for (int i = 0; i < 48; i++) K[i] = V[i] = (float)(i % 7) * 0.1f;
    for (int i = 0; i < 32; i++) Q[i] = (float)(i % 5) * 0.2f;

    CASE_BEGIN("form_record_ties_keep_the_cost_model_pick");
    kiln_graph *g = attention();
    kiln_compile_options o = kiln_compile_defaults();
    o.threads = 1;
    o.stream = 2; /* both forms: the materialised program and the streaming one */
    kiln_status st;
    kiln_program *p = kiln_compile(g, &o, &st);
    CHECK(p != NULL, "compile: %s", kiln_graph_error(g));
    if (p && kiln_program_form_force(p, 1)) {
        kiln_program_form_force(p, -1);
        static const struct {
            int bucket;
            const char *what;
            double mat, str;
            int want;
        } cases[] = {
            /* short prompts: the cost model picks materialised */
            {KILN_FORM_SHORT, "  short prompts", 1.00, 0.98, 0}, /* streaming 2% faster: a tie */
            {KILN_FORM_SHORT, "  short prompts", 1.00, 0.90, 1}, /* streaming 10% faster */
            {KILN_FORM_SHORT, "  short prompts", 0.98, 1.00, 0},
            {KILN_FORM_SHORT, "  short prompts", 1.00, 1.02, 0},
            /* decode: the cost model picks streaming */
            {KILN_FORM_DECODE, "  decode (", 0.98, 1.00, 1}, /* materialised 2% faster: a tie */
            {KILN_FORM_DECODE, "  decode (", 0.80, 1.00, 0},
            {KILN_FORM_DECODE, "  decode (", 1.00, 0.99, 1},
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            CHECK(kiln_program_form_record(p, cases[i].bucket, cases[i].mat, cases[i].str) == KILN_OK,
                  "case %zu: not recorded", i);
            int f = recorded_form(p, cases[i].what);
            CHECK(f == cases[i].want, "case %zu (materialised %.2f, streaming %.2f): form %d, want %d", i,
                  cases[i].mat, cases[i].str, f, cases[i].want);
        }
        CHECK(kiln_program_form_record(p, KILN_FORM_SHORT, 0, 1.0) == KILN_ERR_INVALID, "a zero time was taken");
        /* a program compiled anew reads the last records from the DB */
        kiln_program *q = kiln_compile(g, &o, &st);
        CHECK(q != NULL && kiln_program_form_force(q, 1), "recompile: %s", kiln_graph_error(g));
        if (q) {
            kiln_program_form_force(q, -1);
            CHECK(recorded_form(q, "  short prompts") == 0 && recorded_form(q, "  decode (") == 1,
                  "the DB's records: short %d, decode %d", recorded_form(q, "  short prompts"),
                  recorded_form(q, "  decode ("));
        }
        kiln_program_free(q);
    } else if (p) {
        CHECK(0, "the graph has no streaming form to record a choice for");
    }
    kiln_program_free(p);
    kiln_graph_free(g);
    CASE_END();

    CASE_BEGIN("form_record_text");
    {
        static const struct {
            const char *text;
            int ok, winner, runner_up;
        } cases[] = {
            {"streaming", 1, 1, 0},
            {"materialised", 1, 0, 1},
            {"streaming-bf16 runner-up=streaming", 1, 2, 1},
            {"streaming-bf16 runner-up=materialised", 1, 2, 0},
            {"materialised runner-up=streaming-bf16", 1, 0, 2},
            {"streaming runner-up=streaming-bf16", 1, 1, 2},
            {"streaming-bf16", 0, 0, 0},                      /* always written with its runner-up */
            {"streaming-fp8", 0, 0, 0},                       /* a form this kiln does not know */
            {"streaming runner-up=streaming", 0, 0, 0},       /* itself as the runner-up */
            {"streaming runner-up=bogus", 0, 0, 0},
            {"streaming-bf16 runner-up=", 0, 0, 0},
            {"streaming-bf16 runner=streaming", 0, 0, 0},
            {"", 0, 0, 0},
            {"streaming-bf16x runner-up=streaming", 0, 0, 0},
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            int w = -9, r = -9;
            int ok = rt_form_record_read(cases[i].text, &w, &r);
            CHECK(ok == cases[i].ok, "\"%s\": read %d, want %d", cases[i].text, ok, cases[i].ok);
            if (ok && cases[i].ok)
                CHECK(w == cases[i].winner && r == cases[i].runner_up, "\"%s\": winner %d runner-up %d, want %d %d",
                      cases[i].text, w, r, cases[i].winner, cases[i].runner_up);
        }
    }
    CASE_END();

    CASE_BEGIN("bf16_form_logits_check");
    {
        /* the form rounds' check (autotune.c) on logit rows: the same row
         * passes, a row of the f32 form's rounding noise passes, a changed
         * top token or a non-finite logit fails */
        static float a[1000], b[1000];
        for (int i = 0; i < 1000; i++) a[i] = b[i] = (float)((i * 37) % 101) * 0.1f - 5;
        CHECK(model_logits_kl(a, b, 1000) == 0 && model_bf16_form_ok(0), "the same row");
        for (int i = 0; i < 1000; i++) b[i] = a[i] * (1 + (float)((i % 3) - 1) * 1e-3f);
        double k = model_logits_kl(a, b, 1000);
        CHECK(k > 0 && model_bf16_form_ok(k), "rounding noise: KL %g", k);
        for (int i = 0; i < 1000; i++) b[i] = a[i];
        b[7] += 8; /* a token the row barely gave weight to now dominates */
        k = model_logits_kl(a, b, 1000);
        CHECK(!model_bf16_form_ok(k), "a changed top token passed: KL %g", k);
        b[7] = NAN;
        CHECK(!model_bf16_form_ok(model_logits_kl(a, b, 1000)), "a NaN logit passed");
        b[7] = INFINITY;
        CHECK(!model_bf16_form_ok(model_logits_kl(a, b, 1000)), "an inf logit passed");
    }
    CASE_END();

    CASE_BEGIN("streaming_bf16_form");
    {
        unlink(db);
        srand(7);
        for (int i = 0; i < BQ; i++) BQv[i] = (float)rand() / (float)RAND_MAX * 2 - 1;
        for (int i = 0; i < BK; i++) BKv[i] = (float)rand() / (float)RAND_MAX * 2 - 1;
        for (int i = 0; i < BV; i++) BVv[i] = (float)rand() / (float)RAND_MAX * 4 - 2;
        static float ref[BO], f32[BO], bf[BO], got[BO];
        kiln_graph *bg = attention_bf16();
        CHECK(kiln_eval_reference(bg) == KILN_OK && kiln_read_output(bg, "out", ref, sizeof ref) == KILN_OK,
              "reference: %s", kiln_graph_error(bg));
        kiln_compile_options bo = kiln_compile_defaults();
        bo.threads = 1;
        bo.stream = 2;
        bo.stream_bf16 = 0; /* as kiln run compiles a model */
        kiln_status bst;
        kiln_program *bp = kiln_compile(bg, &bo, &bst);
        CHECK(bp != NULL, "compile: %s", kiln_graph_error(bg));
        const int has = rt_cpu_has("avx512_bf16") && rt_cpu_has("avx512bw") && rt_cpu_has("avx512f");
        if (bp && !has) {
            CHECK(!kiln_program_form_force(bp, KILN_FORM_STREAMING_BF16), "the bf16 form forced without avx512_bf16");
            CHECK(kiln_program_form_record3(bp, KILN_FORM_SHORT, 1.0, 1.0, 0.5) == KILN_ERR_INVALID,
                  "a bf16 time recorded without the form");
            printf("  no avx512_bf16 here: the form is refused\n");
        } else if (bp) {
            double big;
            CHECK(kiln_program_form_force(bp, KILN_FORM_STREAMING) && run_out(bp, bg, f32), "the f32 streaming form: %s",
                  kiln_graph_error(bg));
            CHECK(max_diff(ref, f32, &big) <= 2e-5 * (1 + big), "the f32 streaming form against the reference: %.3g",
                  max_diff(ref, f32, &big));
            CHECK(strstr(kiln_program_source(bp), "ktile-bf16") == NULL, "the materialised program holds a bf16 tile");
            CHECK(kiln_program_form_force(bp, KILN_FORM_STREAMING_BF16) && run_out(bp, bg, bf),
                  "the streaming-bf16 form: %s", kiln_graph_error(bg));
            double d = max_diff(ref, bf, &big);
            /* the approximate forms' tolerance (tune.c): 3% of the largest output */
            CHECK(d <= 0.03 * big, "the bf16 form against the reference: %.3g (largest output %.3g)", d, big);
            CHECK(max_diff(f32, bf, &big) > 0, "the bf16 form's output equals the f32 tile's bit for bit");
            printf("  streaming-bf16 against the reference: largest difference %.3g of %.3g\n", d, big);
            /* the f32 form forced again: the launch flag is off again */
            CHECK(kiln_program_form_force(bp, KILN_FORM_STREAMING) && run_out(bp, bg, got) &&
                      memcmp(got, f32, sizeof got) == 0,
                  "the f32 streaming form after the bf16 one differs from its first run");
            kiln_program_form_force(bp, -1);
            /* no record: the cost model (materialised for a short prompt) */
            CHECK(run_out(bp, bg, got) && max_diff(ref, got, &big) <= 2e-5 * (1 + big), "no record: %.3g",
                  max_diff(ref, got, &big));
            /* the decision and the pick */
            CHECK(kiln_program_form_record3(bp, KILN_FORM_SHORT, 1.0, 1.0, 0.5) == KILN_OK, "bf16 not recorded");
            CHECK(recorded_form(bp, "  short prompts") == 2, "bf16 2x faster: form %d",
                  recorded_form(bp, "  short prompts"));
            CHECK(run_out(bp, bg, got) && memcmp(got, bf, sizeof got) == 0, "a short prompt after the bf16 record "
                                                                           "did not run the bf16 form");
            CHECK(kiln_program_form_record3(bp, KILN_FORM_SHORT, 1.0, 1.0, 0.98) == KILN_OK, "a tie not recorded");
            CHECK(recorded_form(bp, "  short prompts") == 0, "bf16 2%% faster (a tie): form %d, want materialised",
                  recorded_form(bp, "  short prompts"));
            CHECK(run_out(bp, bg, got) && max_diff(ref, got, &big) <= 2e-5 * (1 + big),
                  "a tie: not the f32 arithmetic (%.3g)", max_diff(ref, got, &big));
            CHECK(kiln_program_form_record3(bp, KILN_FORM_SHORT, 2.0, 1.0, 0.9) == KILN_OK &&
                      recorded_form(bp, "  short prompts") == 2,
                  "bf16 10%% faster than streaming: form %d", recorded_form(bp, "  short prompts"));
            CHECK(kiln_program_form_record3(bp, KILN_FORM_SHORT, 2.0, 1.0, 0.99) == KILN_OK &&
                      recorded_form(bp, "  short prompts") == 1,
                  "bf16 1%% faster than streaming: form %d", recorded_form(bp, "  short prompts"));
            /* prompts only */
            CHECK(kiln_program_form_record3(bp, KILN_FORM_DECODE, 1.0, 1.0, 0.5) == KILN_ERR_INVALID,
                  "a decode bucket took a bf16 time");
            CHECK(kiln_program_form_record3(bp, KILN_FORM_LONG, 1.0, 1.0, 0.5) == KILN_OK &&
                      recorded_form(bp, "  long prompts") == 2,
                  "the long bucket: form %d", recorded_form(bp, "  long prompts"));
            CHECK(kiln_program_form_record3(bp, KILN_FORM_SHORT, 1.0, 1.2, 0.8) == KILN_OK &&
                      recorded_form(bp, "  short prompts") == 2,
                  "bf16 over materialised: form %d", recorded_form(bp, "  short prompts"));
            char *text = kiln_program_forms(bp);
            CHECK(text && strstr(text, "runner-up: materialised, 1000.000 ms; streaming, 1200.000 ms"),
                  "the forms' text: %s", text ? text : "(null)");
            free(text);
            /* read back by a program compiled anew */
            kiln_program *bq = kiln_compile(bg, &bo, &bst);
            CHECK(bq != NULL, "recompile: %s", kiln_graph_error(bg));
            if (bq) {
                CHECK(recorded_form(bq, "  short prompts") == 2 && recorded_form(bq, "  long prompts") == 2,
                      "the DB's bf16 records: short %d, long %d", recorded_form(bq, "  short prompts"),
                      recorded_form(bq, "  long prompts"));
                CHECK(run_out(bq, bg, got) && memcmp(got, bf, sizeof got) == 0,
                      "the program compiled anew did not run the bf16 form for a short prompt");
            }
            kiln_program_free(bq);
            /* a record this kiln cannot read is set aside: the cost model */
            char key[64], bucket[64], err[256];
            char *fp = kiln_device_fingerprint();
            CHECK(fp && db_form_key(db, key, sizeof key), "no attention-form record in %s", db);
            if (fp && db_form_key(db, key, sizeof key)) {
                snprintf(bucket, sizeof bucket, "short,t=1");
                sch_tune_record r;
                sch_tune_record_new(&r, fp, key, bucket);
                snprintf(r.schedule, sizeof r.schedule, "streaming-fp8 runner-up=streaming");
                r.best_s = 0.5, r.base_s = 1.0, r.tried = 3;
                CHECK(sch_tunedb_store(&r, err, sizeof err) == KILN_OK, "store: %s", err);
                bq = kiln_compile(bg, &bo, &bst);
                CHECK(bq != NULL, "recompile: %s", kiln_graph_error(bg));
                if (bq) {
                    CHECK(recorded_form(bq, "  short prompts") == -1 && recorded_form(bq, "  long prompts") == 2,
                          "an unknown schedule: short %d (want none), long %d", recorded_form(bq, "  short prompts"),
                          recorded_form(bq, "  long prompts"));
                    CHECK(run_out(bq, bg, got) && max_diff(ref, got, &big) <= 2e-5 * (1 + big),
                          "an unknown schedule: not the cost model's f32 form (%.3g)", max_diff(ref, got, &big));
                }
                kiln_program_free(bq);
                /* a bf16 record a program without the form cannot use: set aside */
                kiln_compile_options off = bo;
                off.stream_bf16 = -1; /* KILN_STREAM_BF16=0 */
                bq = kiln_compile(bg, &off, &bst);
                CHECK(bq != NULL && !kiln_program_form_force(bq, KILN_FORM_STREAMING_BF16),
                      "KILN_STREAM_BF16=0: the bf16 form was offered");
                if (bq) CHECK(recorded_form(bq, "  long prompts") == -1, "KILN_STREAM_BF16=0: long %d",
                             recorded_form(bq, "  long prompts"));
                kiln_program_free(bq);
            }
            free(fp);
        }
        kiln_program_free(bp);
        kiln_graph_free(bg);
    }
    CASE_END();

    unlink(db);
    char side[300];
    snprintf(side, sizeof side, "%s.lock", db);
    unlink(side);
    return check_exit();
}
