/* test_tune_slice.c — the search of a large prefill contraction (m n k >= 4e9
 * multiply-adds, src/runtime/tune.c's bounded slices): candidates are
 * checked and timed on a slice of B's rows, a wrong one is still caught
 * there, and the winner is run and checked once at full size (the verbose
 * line "on slices of 1/4 ... full size"); the tuned program's outputs match
 * a host reference at sampled points. 256 x 4096 x 4096, q8_0, the fixed
 * f32 default against the int8 candidates that beat it.
 */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln.h"
#include "kiln_compile.h"
#include "contract.h"
#include "search.h"
#include "tunedb.h"
#include "weights.h"

enum { M = 256, N = 4096, K = 4096 };

/* a host dot product in double at sampled outputs, B dequantised */
static double worst_error(const float *x, const void *w, const float *y, double *big) {
    float *row = malloc(K * sizeof *row);
    double worst = 0;
    *big = 0;
    for (int s = 0; s < 64; s++) {
        int64_t m = (s * 37) % M, n = s < 2 ? (s ? N - 1 : 0) : (int64_t)((unsigned)s * 2654435761u % (unsigned)N);
        kiln_dequantize(KILN_Q8_0, (const uint8_t *)w + n * (K / 32) * 34, row, K);
        double acc = 0;
        for (int64_t k = 0; k < K; k++) acc += (double)x[m * K + k] * row[k];
        *big = fmax(*big, fabs(acc));
        worst = fmax(worst, fabs(acc - y[m * N + n]));
    }
    free(row);
    return worst;
}

static void test_sliced_search(void) {
    CASE_BEGIN("tune_slice_checked_and_confirmed");
    char log[] = "/tmp/kiln_tune_slice_log_XXXXXX";
    int lfd = mkstemp(log);
    CHECK(lfd >= 0, "mkstemp");
    kiln_graph *g = kiln_graph_new();
    char shape[32];
    snprintf(shape, sizeof shape, "%d, %d", M, K);
    kiln_tensor x = kiln_input(g, "x", KILN_F32, shape);
    snprintf(shape, sizeof shape, "%d, %d", N, K);
    kiln_output(g, kiln_linear(g, x, kiln_input(g, "w", KILN_Q8_0, shape), KILN_NONE), "y");
    float *wf = rand_f32((int64_t)N * K, -1, 1), *xb = rand_f32((int64_t)M * K, -1, 1);
    float *y = calloc((size_t)M * N, sizeof *y);
    size_t wbytes;
    void *wb = make_weights(KILN_Q8_0, wf, (int64_t)N * K, &wbytes);
    kiln_bind_weight(g, "w", wb, wbytes);
    kiln_bind_input(g, "x", xb, (size_t)M * K * sizeof(float));
    setenv("KILN_TUNE_INJECT_WRONG", "1", 1); /* the default is made wrong: caught on its slice */
    kiln_compile_options o = kiln_compile_defaults();
    o.search_budget = 6;
    o.threads = 2;
    o.tune_verbose = 1;
    int saved = dup(2);
    if (lfd >= 0) dup2(lfd, 2);
    kiln_program *p = kiln_compile(g, &o, NULL);
    int ran = p && kiln_run(p) == KILN_OK && kiln_run(p) == KILN_OK;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    unsetenv("KILN_TUNE_INJECT_WRONG");
    CHECK(ran, "%s", kiln_graph_error(g));
    if (ran) {
        kiln_read_output(g, "y", y, (size_t)M * N * sizeof *y);
        double big, worst = worst_error(xb, wb, y, &big);
        CHECK(big > 0 && worst <= 0.03 * big + 1e-3, "worst error %g of outputs up to %g", worst, big);
        CHECK(kiln_program_measurements(p) >= 2, "%d candidates measured", kiln_program_measurements(p));
    }
    int n = 0, damaged = 0, rejected = 0, confirmed_needed = 0;
    sch_tune_record *r = sch_tunedb_load(&n, &damaged);
    sch_contract_sched def = sch_contract_default(1, KILN_Q8_0);
    char deftext[128];
    sch_contract_sched_print(&def, deftext, sizeof deftext);
    for (int i = 0; i < n; i++) {
        rejected += r[i].rejected;
        if (!strstr(r[i].schedule, deftext)) confirmed_needed = 1; /* the default won no confirmation */
    }
    CHECK(n >= 1 && rejected >= 1, "%d records, %d rejected (the wrong candidate must be caught on its slice)", n,
          rejected);
    free(r);
    char text[8192] = "";
    FILE *f = fopen(log, "r");
    size_t got_n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[got_n] = 0;
    if (f) fclose(f);
    CHECK(confirmed_needed, "the fixed f32 default won against int8 candidates: %s", text);
    if (confirmed_needed)
        CHECK(strstr(text, "on slices of 1/4") && strstr(text, "full size"), "no full-size run of the winner: %s", text);
    unlink(log);
    kiln_program_free(p);
    kiln_graph_free(g);
    free(wf), free(xb), free(y), free(wb);
    CASE_END();
}

int main(void) {
    char db[] = "/tmp/kiln_tune_slice_db_XXXXXX";
    int fd = mkstemp(db);
    if (fd >= 0) close(fd);
    unlink(db);
    setenv("KILN_TUNEDB", db, 1);
    setenv("KILN_FIXED_DEFAULTS", "1", 1); /* the default is the f32 schedule: an int8 candidate wins, and is confirmed */
    test_sliced_search();
    unlink(db);
    return check_exit();
}
