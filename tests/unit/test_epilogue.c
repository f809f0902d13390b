/* test_epilogue.c — a contraction's elementwise successor run as its
 * epilogue (src/sched/epilogue.c): inside the contraction's work items, in
 * place where its output is an intermediate.
 *
 * Two linear layers with bias and Relu, y = relu(relu(x W1^T + b1) W2^T +
 * b2), and a batched product with bias and Relu, at decode and prefill row
 * counts: marked as epilogues (the listing says so, the first layer's in
 * place), equal to the reference interpreter within f32 tolerance, and
 * bit for bit equal to the same program compiled with no_epilogue (the
 * naive form: the successor as a kernel of its own) at 1 and 2 threads.
 * Then the first-run search: its candidates are emitted without the
 * epilogue, and the launch that runs a candidate's code runs the epilogue
 * as a kernel of its own; the bias makes an epilogue run twice or not at
 * all visible (Relu alone would hide the first).
 * Two padded 3x3 convolutions with bias and Relu: each product's B pack
 * runs as its prologue (every item packing its own columns) and the bias +
 * Relu as its epilogue; the same checks, the search's included (it packs
 * B before timing candidates that have no prologue).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln.h"
#include "kiln_compile.h"

enum { K1 = 48, N1 = 40, N2 = 24 };

static float *rand_f32(int64_t n, unsigned *seed) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        v[i] = (float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return v;
}

static int count(const char *text, const char *what) {
    int n = 0;
    for (const char *s = text; (s = strstr(s, what)) != NULL; s++) n++;
    return n;
}

/* a fresh tuning DB for the search (db: a "...XXXXXX" template), named in
 * KILN_TUNEDB; drop_db removes it and its lock file */
static void use_fresh_db(char *db) {
    int fd = mkstemp(db);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) close(fd);
    unlink(db);
    setenv("KILN_TUNEDB", db, 1);
}

static void drop_db(const char *db) {
    char lock[256];
    snprintf(lock, sizeof lock, "%s.lock", db);
    unlink(db);
    unlink(lock);
}

static kiln_tensor linear_relu(kiln_graph *g, kiln_tensor x, const char *w, const char *wshape, const char *b,
                               const char *bshape) {
    kiln_tensor y = kiln_matmul(g, x, kiln_transpose(g, kiln_input(g, w, KILN_F32, wshape), 0, 1));
    return kiln_relu(g, kiln_add(g, y, kiln_input(g, b, KILN_F32, bshape)));
}

/* y = relu(relu(x W1^T + b1) W2^T + b2), x (m, K1), or with batch: x (2, m,
 * K1) and one layer */
static kiln_graph *layers(int batched) {
    kiln_graph *g = kiln_graph_new();
    if (batched) {
        kiln_tensor x = kiln_input(g, "x", KILN_F32, "2, m, 48");
        kiln_output(g, linear_relu(g, x, "w1", "40, 48", "b1", "40"), "y");
    } else {
        kiln_tensor x = kiln_input(g, "x", KILN_F32, "m, 48");
        kiln_tensor h = linear_relu(g, x, "w1", "40, 48", "b1", "40");
        kiln_output(g, linear_relu(g, h, "w2", "24, 40", "b2", "24"), "y");
    }
    return g;
}

static kiln_program *compile_with(kiln_graph *g, int threads, int no_epilogue, double budget) {
    kiln_compile_options o = kiln_compile_defaults();
    o.threads = threads;
    o.no_epilogue = no_epilogue;
    o.search_budget = budget;
    kiln_status st;
    kiln_program *p = kiln_compile(g, &o, &st);
    CHECK(p != NULL, "compile (%d threads, epilogues %s): %s", threads, no_epilogue ? "off" : "on", kiln_graph_error(g));
    return p;
}

static int run_into(kiln_program *p, kiln_graph *g, float *out, int64_t n) {
    if (kiln_run(p) != KILN_OK) return 0;
    return kiln_read_output(g, "y", out, (size_t)n * sizeof *out) == KILN_OK;
}

/* within tol (1 + |reference|) everywhere (f32 products: 1e-4); or, with
 * tol < 0, within -tol (1 + the largest |reference|): a search may pick
 * bf16 tiles, whose error is relative to the sum of |products|, not to the
 * element (0.02 of values up to about 15 where the biases are 0.6 to 1.0
 * in size: one missing or added twice still shows) */
static void check_close_tol(const float *ref, const float *got, int64_t n, const char *what, float tol) {
    float scale = 0;
    for (int64_t i = 0; i < n; i++) scale = fabsf(ref[i]) > scale ? fabsf(ref[i]) : scale;
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (!(fabsf(ref[i] - got[i]) <= (tol > 0 ? tol * (1.0f + fabsf(ref[i])) : -tol * (1.0f + scale)))) bad = i;
    CHECK(bad < 0, "%s: element %lld: reference %g, compiled %g", what, (long long)bad, bad < 0 ? 0.0 : ref[bad],
          bad < 0 ? 0.0 : got[bad]);
}

static void check_close(const float *ref, const float *got, int64_t n, const char *what) {
    check_close_tol(ref, got, n, what, 1e-4f);
}

static void test_layers(int batched) {
    CASE_BEGIN(batched ? "epilogue_batched_bias_relu" : "epilogue_two_layers_in_place");
    unsigned seed = batched ? 7u : 3u;
    kiln_graph *g = layers(batched);
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    float *w1 = rand_f32(N1 * K1, &seed), *b1 = rand_f32(N1, &seed), *w2 = rand_f32(N2 * N1, &seed),
          *b2 = rand_f32(N2, &seed);
    kiln_bind_weight(g, "w1", w1, sizeof(float) * N1 * K1);
    kiln_bind_input(g, "b1", b1, sizeof(float) * N1);
    if (!batched) {
        kiln_bind_weight(g, "w2", w2, sizeof(float) * N2 * N1);
        kiln_bind_input(g, "b2", b2, sizeof(float) * N2);
    }
    int64_t nb = batched ? 2 : 1, nout = batched ? N1 : N2;
    kiln_bind_dim(g, "m", 5);
    float *x0 = rand_f32(nb * 5 * K1, &seed);
    kiln_bind_input(g, "x", x0, sizeof(float) * (size_t)(nb * 5 * K1));
    kiln_program *on[2] = {compile_with(g, 1, 0, 0), compile_with(g, 2, 0, 0)};
    kiln_program *off = compile_with(g, 2, 1, 0);
    if (on[0] && on[1] && off) {
        char *text = kiln_program_kernels(on[0]), *plain = kiln_program_kernels(off);
        int want = batched ? 1 : 2;
        CHECK(count(text, "epilogue of kernel") == want, "%d epilogues, want %d:\n%s", count(text, "epilogue of kernel"),
              want, text);
        CHECK(count(plain, "epilogue") == 0, "no_epilogue still marks one:\n%s", plain);
        free(text);
        free(plain);
        const int64_t ms[4] = {1, 3, 17, 40};
        for (int i = 0; i < 4; i++) {
            int64_t M = ms[i], n = nb * M * nout;
            float *x = rand_f32(nb * M * K1, &seed);
            kiln_bind_dim(g, "m", M);
            kiln_bind_input(g, "x", x, sizeof(float) * (size_t)(nb * M * K1));
            float *ref = malloc((size_t)n * sizeof *ref), *got[3];
            CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
            kiln_read_output(g, "y", ref, (size_t)n * sizeof *ref);
            kiln_program *ps[3] = {on[0], on[1], off};
            for (int j = 0; j < 3; j++) {
                got[j] = malloc((size_t)n * sizeof(float));
                CHECK(run_into(ps[j], g, got[j], n), "m=%lld: run %d: %s", (long long)M, j, kiln_graph_error(g));
            }
            char what[64];
            snprintf(what, sizeof what, "m=%lld", (long long)M);
            check_close(ref, got[0], n, what);
            CHECK(memcmp(got[0], got[1], (size_t)n * sizeof(float)) == 0, "m=%lld: 1 and 2 threads differ", (long long)M);
            CHECK(memcmp(got[1], got[2], (size_t)n * sizeof(float)) == 0, "m=%lld: with and without epilogues differ",
                  (long long)M);
            for (int j = 0; j < 3; j++) free(got[j]);
            free(ref);
            free(x);
        }
        /* in place: the first layer's Relu writes its product's buffer, so
         * the intermediates take less arena (at m = 40: 11264 bytes
         * against 14336 when it was written) */
        if (!batched)
            CHECK(kiln_program_arena_bytes(on[1]) < kiln_program_arena_bytes(off),
                  "arena %zu bytes with epilogues, %zu without: not in place", kiln_program_arena_bytes(on[1]),
                  kiln_program_arena_bytes(off));
    }
    kiln_program_free(on[0]);
    kiln_program_free(on[1]);
    kiln_program_free(off);
    free(w1), free(b1), free(w2), free(b2), free(x0);
    kiln_graph_free(g);
    CASE_END();
}

/* the first run searches the products (a fresh DB): the launch after a
 * search runs a candidate's code, which has no epilogue */
static void test_search(void) {
    CASE_BEGIN("epilogue_first_run_search");
    char db[] = "/tmp/kiln-test-epilogue-XXXXXX";
    use_fresh_db(db);
    unsigned seed = 11u;
    kiln_graph *g = layers(0);
    float *w1 = rand_f32(N1 * K1, &seed), *b1 = rand_f32(N1, &seed), *w2 = rand_f32(N2 * N1, &seed),
          *b2 = rand_f32(N2, &seed);
    for (int c = 0; c < N2; c++) b2[c] = (c % 2 ? -1.0f : 1.0f) * (0.6f + 0.4f * (float)c / N2);
    const int64_t M = 40;
    float *x = rand_f32(M * K1, &seed);
    kiln_bind_weight(g, "w1", w1, sizeof(float) * N1 * K1);
    kiln_bind_input(g, "b1", b1, sizeof(float) * N1);
    kiln_bind_weight(g, "w2", w2, sizeof(float) * N2 * N1);
    kiln_bind_input(g, "b2", b2, sizeof(float) * N2);
    kiln_bind_dim(g, "m", M);
    kiln_bind_input(g, "x", x, sizeof(float) * (size_t)(M * K1));
    float ref[M * N2], got[M * N2];
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    kiln_read_output(g, "y", ref, sizeof ref);
    kiln_program *p = compile_with(g, 2, 0, 5.0);
    if (p) {
        for (int r = 0; r < 3; r++) {
            CHECK(run_into(p, g, got, M * N2), "run %d: %s", r, kiln_graph_error(g));
            char what[64];
            snprintf(what, sizeof what, "run %d", r);
            check_close_tol(ref, got, M * N2, what, -0.02f);
        }
        CHECK(kiln_program_measurements(p) > 0, "the first run searched nothing");
    }
    kiln_program_free(p);
    unsetenv("KILN_TUNEDB");
    drop_db(db);
    free(w1), free(b1), free(w2), free(b2), free(x);
    kiln_graph_free(g);
    CASE_END();
}

/* y = relu(conv3x3(relu(conv3x3(x, w1) + b1), w2) + b2), x (1, 6, 13, 11) */
static kiln_graph *convs(void) {
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "1, 6, 13, 11");
    kiln_tensor h = kiln_relu(g, kiln_conv2d(g, x, kiln_input(g, "w1", KILN_F32, "8, 6, 3, 3"),
                                             kiln_input(g, "b1", KILN_F32, "8"), 1, 1, 1));
    kiln_tensor y = kiln_relu(g, kiln_conv2d(g, h, kiln_input(g, "w2", KILN_F32, "5, 8, 3, 3"),
                                             kiln_input(g, "b2", KILN_F32, "5"), 1, 1, 1));
    kiln_output(g, y, "y");
    return g;
}

static void test_convs(int search) {
    CASE_BEGIN(search ? "prologue_conv_first_run_search" : "prologue_conv_pack_per_item");
    char db[] = "/tmp/kiln-test-prologue-XXXXXX";
    if (search) use_fresh_db(db);
    unsigned seed = 5u;
    enum { NX = 6 * 13 * 11, NY = 5 * 13 * 11 };
    kiln_graph *g = convs();
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    float *x = rand_f32(NX, &seed), *w1 = rand_f32(8 * 6 * 9, &seed), *b1 = rand_f32(8, &seed),
          *w2 = rand_f32(5 * 8 * 9, &seed), *b2 = rand_f32(5, &seed);
    for (int c = 0; c < 8; c++) b1[c] = (c % 2 ? -1.0f : 1.0f) * (0.6f + 0.05f * (float)c);
    for (int c = 0; c < 5; c++) b2[c] = (c % 2 ? -1.0f : 1.0f) * (0.6f + 0.1f * (float)c);
    kiln_bind_input(g, "x", x, sizeof(float) * NX);
    kiln_bind_weight(g, "w1", w1, sizeof(float) * 8 * 6 * 9);
    kiln_bind_input(g, "b1", b1, sizeof(float) * 8);
    kiln_bind_weight(g, "w2", w2, sizeof(float) * 5 * 8 * 9);
    kiln_bind_input(g, "b2", b2, sizeof(float) * 5);
    float ref[NY], got[3][NY];
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    kiln_read_output(g, "y", ref, sizeof ref);
    kiln_program *ps[3] = {compile_with(g, 1, 0, search ? 5.0 : 0), compile_with(g, 2, 0, search ? 5.0 : 0),
                           compile_with(g, 2, 1, 0)};
    if (ps[0] && ps[1] && ps[2]) {
        char *text = kiln_program_kernels(ps[1]);
        CHECK(count(text, "prologue of kernel") == 2 && count(text, "epilogue of kernel") == 2,
              "%d prologues and %d epilogues, want 2 and 2:\n%s", count(text, "prologue of kernel"),
              count(text, "epilogue of kernel"), text);
        free(text);
        for (int r = 0; r < (search ? 3 : 1); r++)
            for (int j = 0; j < 3; j++) {
                CHECK(run_into(ps[j], g, got[j], NY), "program %d run %d: %s", j, r, kiln_graph_error(g));
                char what[64];
                snprintf(what, sizeof what, "program %d run %d", j, r);
                check_close_tol(ref, got[j], NY, what, search ? -0.02f : 1e-4f);
            }
        if (search) CHECK(kiln_program_measurements(ps[1]) > 0, "the first run searched nothing");
        else {
            CHECK(memcmp(got[0], got[1], sizeof got[0]) == 0, "1 and 2 threads differ");
            CHECK(memcmp(got[1], got[2], sizeof got[0]) == 0, "with and without prologues and epilogues differ");
        }
    }
    for (int j = 0; j < 3; j++) kiln_program_free(ps[j]);
    if (search) {
        unsetenv("KILN_TUNEDB");
        drop_db(db);
    }
    free(x), free(w1), free(b1), free(w2), free(b2);
    kiln_graph_free(g);
    CASE_END();
}

int main(void) {
    setenv("KILN_POISON_RESULTS", "1", 1); /* unwritten output elements show as NaN */
    setenv("KILN_FIXED_DEFAULTS", "1", 1); /* f32 products: f32 tolerances */
    test_layers(0);
    test_layers(1);
    test_search();
    test_convs(0);
    test_convs(1);
    return check_exit();
}
