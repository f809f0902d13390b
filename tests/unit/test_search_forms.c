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
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln.h"
#include "kiln_compile.h"

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
 * `what`: 0 materialised, 1 streaming, -1 not found or not measured */
static int recorded_form(const kiln_program *p, const char *what) {
    char *text = kiln_program_forms(p);
    int f = -1;
    for (char *line = text; line && *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = 0;
        if (strncmp(line, what, strlen(what)) == 0 && strstr(line, "(measured, tuning DB)")) {
            char *c = strstr(line, "): ");
            if (c) f = strncmp(c + 3, "streaming", 9) == 0 ? 1 : strncmp(c + 3, "materialised", 12) == 0 ? 0 : -1;
        }
        line = end ? end + 1 : NULL;
    }
    free(text);
    return f;
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

    unlink(db);
    char side[300];
    snprintf(side, sizeof side, "%s.lock", db);
    unlink(side);
    return check_exit();
}
