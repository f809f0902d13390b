/* test_ctx_sym.c — a state whose length is a bound symbol, as the KV cache's
 * n_ctx is (src/model/arch.c): one compiled program serves every length.
 *
 * The graph is a cache update and an attention-like read: a state
 * "cache" (n_ctx, 8), rows pos .. pos+seq-1 replaced by kv * kv, and the
 * column sums of rows 0 .. pos+seq-1 as the output. Checked:
 * - one program, run with an 8-row cache and then a 40-row cache (n_ctx
 *   rebound beside the state), equals the reference interpreter each time;
 * - two graphs built alike and bound to different lengths compile to the
 *   same source, and the second compile is served from the kernel cache
 *   (the compile observer sees "cached", never "cc");
 * - a write past the bound length is a clear KILN_ERR_RANGE that leaves the
 *   state untouched; a length that disagrees with the state's bytes is
 *   KILN_ERR_INVALID; an unbound length is KILN_ERR_UNBOUND; none crashes;
 * - an f16 state read as f32 through a slice converts the slice's rows, not
 *   the whole state.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln.h"
#include "kiln_compile.h"

enum { W = 8, MAXCTX = 40, MAXSEQ = 6 };

static kiln_graph *build(void) {
    kiln_graph *g = kiln_graph_new();
    kiln_sym pos = kiln_sym_var(g, "pos"), seq = kiln_sym_var(g, "seq");
    kiln_sym end = kiln_sym_add(g, pos, seq), zero = kiln_sym_int(g, 0);
    (void)kiln_sym_var(g, "n_ctx");
    kiln_tensor cache = kiln_state(g, "cache", KILN_F32, "n_ctx, 8");
    kiln_tensor kv = kiln_input(g, "kv", KILN_F32, "seq, 8");
    kiln_tensor rows = kiln_slice(g, kiln_iota(g, KILN_I32, 1, &end, 0), 0, pos, end, 1);
    kiln_tensor upd = kiln_scatter(g, cache, rows, kiln_mul(g, kv, kv));
    kiln_output(g, kiln_sum(g, kiln_slice(g, upd, 0, zero, end, 1), 0), "colsum");
    return g;
}

/* bind a call: n_ctx rows of cache, seq rows of kv at pos */
static void bind_call(kiln_graph *g, float *cache, int64_t n_ctx, const float *kv, int64_t seq, int64_t pos) {
    kiln_bind_dim(g, "n_ctx", n_ctx);
    kiln_bind_dim(g, "seq", seq);
    kiln_bind_dim(g, "pos", pos);
    kiln_bind_input(g, "kv", (void *)(uintptr_t)kv, (size_t)(seq * W) * sizeof(float));
    kiln_bind_input(g, "cache", cache, (size_t)(n_ctx * W) * sizeof(float));
}

/* the compiled run against the reference on a copy of the cache: both the
 * output and the updated cache must agree */
static int run_matches(kiln_program *p, kiln_graph *g, float *cache, int64_t n_ctx, const float *kv, int64_t seq,
                       int64_t pos) {
    float ref_cache[MAXCTX * W], ref_out[W], got_out[W];
    memcpy(ref_cache, cache, (size_t)(n_ctx * W) * sizeof(float));
    bind_call(g, ref_cache, n_ctx, kv, seq, pos);
    if (kiln_eval_reference(g) != KILN_OK) return 0;
    kiln_read_output(g, "colsum", ref_out, sizeof ref_out);
    bind_call(g, cache, n_ctx, kv, seq, pos);
    if (kiln_run(p) != KILN_OK) return 0;
    kiln_read_output(g, "colsum", got_out, sizeof got_out);
    if (memcmp(ref_cache, cache, (size_t)(n_ctx * W) * sizeof(float)) != 0) return 0;
    for (int i = 0; i < W; i++)
        if (fabsf(ref_out[i] - got_out[i]) > 1e-4f * (1 + fabsf(ref_out[i]))) return 0;
    return 1;
}

static void fill(float *x, int n, float base) {
    for (int i = 0; i < n; i++) x[i] = base + (float)((i * 37) % 11) * 0.25f - 1.0f;
}

static void test_one_program_two_lengths(void) {
    CASE_BEGIN("ctx_sym_one_program_two_lengths");
    kiln_graph *g = build();
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    float small[8 * W] = {0}, big[MAXCTX * W] = {0}, kv[MAXSEQ * W];
    fill(kv, MAXSEQ * W, 0.5f);
    bind_call(g, small, 8, kv, 3, 0);
    kiln_program *p = kiln_compile(g, NULL, NULL);
    CHECK(p != NULL, "%s", kiln_graph_error(g));
    if (p) {
        CHECK(run_matches(p, g, small, 8, kv, 3, 0), "8 rows, pos 0: %s", kiln_graph_error(g));
        CHECK(run_matches(p, g, small, 8, kv, 5, 3), "8 rows, pos 3 (the last row): %s", kiln_graph_error(g));
        /* the same program, a longer cache */
        CHECK(run_matches(p, g, big, MAXCTX, kv, 6, 0), "40 rows, pos 0: %s", kiln_graph_error(g));
        CHECK(run_matches(p, g, big, MAXCTX, kv, 4, 36), "40 rows, pos 36: %s", kiln_graph_error(g));
        CHECK(big[39 * W] != 0.0f, "the last row of the 40-row cache was written");
    }
    kiln_program_free(p);
    kiln_graph_free(g);
    CASE_END();
}

typedef struct stages {
    int cc, cached;
} stages;

static void observe(void *ctx, const char *stage, int done, int total) {
    stages *s = ctx;
    (void)done;
    (void)total;
    if (strcmp(stage, "cc") == 0) s->cc++;
    if (strcmp(stage, "cached") == 0) s->cached++;
}

static void test_same_source_from_cache(void) {
    CASE_BEGIN("ctx_sym_same_source_served_from_cache");
    float c16[16 * W] = {0}, c40[MAXCTX * W] = {0}, kv[MAXSEQ * W];
    fill(kv, MAXSEQ * W, 0.0f);
    kiln_graph *g1 = build(), *g2 = build();
    bind_call(g1, c16, 16, kv, 2, 0);
    bind_call(g2, c40, MAXCTX, kv, 2, 0);
    stages s1 = {0, 0}, s2 = {0, 0};
    kiln_set_compile_observer(observe, &s1);
    kiln_program *p1 = kiln_compile(g1, NULL, NULL);
    kiln_set_compile_observer(observe, &s2);
    kiln_program *p2 = kiln_compile(g2, NULL, NULL);
    kiln_set_compile_observer(NULL, NULL);
    CHECK(p1 && p2, "%s %s", kiln_graph_error(g1), kiln_graph_error(g2));
    if (p1 && p2) {
        const char *a = kiln_program_source(p1), *b = kiln_program_source(p2);
        CHECK(a && b && strcmp(a, b) == 0, "the sources for 16 and 40 rows differ");
        CHECK(s1.cc > 0 && s1.cached == 0, "the first compile, in a fresh cache: %d cached, %d cc", s1.cached, s1.cc);
        CHECK(s2.cached == 1 && s2.cc == 0, "the second compile: %d cached, %d cc", s2.cached, s2.cc);
        CHECK(kiln_run(p1) == KILN_OK && kiln_run(p2) == KILN_OK, "%s %s", kiln_graph_error(g1), kiln_graph_error(g2));
    }
    kiln_program_free(p1);
    kiln_program_free(p2);
    kiln_graph_free(g1);
    kiln_graph_free(g2);
    CASE_END();
}

static void test_bad_bindings(void) {
    CASE_BEGIN("ctx_sym_bad_bindings_are_errors");
    kiln_graph *g = build();
    float cache[8 * W], before[8 * W], kv[MAXSEQ * W];
    fill(cache, 8 * W, 2.0f);
    memcpy(before, cache, sizeof cache);
    fill(kv, MAXSEQ * W, 1.0f);
    bind_call(g, cache, 8, kv, 2, 0);
    kiln_program *p = kiln_compile(g, NULL, NULL);
    CHECK(p != NULL, "%s", kiln_graph_error(g));
    if (p) {
        /* rows 7 and 8 of an 8-row cache: past the end */
        bind_call(g, cache, 8, kv, 2, 7);
        kiln_status s = kiln_run(p);
        CHECK(s == KILN_ERR_RANGE, "a write past the length: %s (%s)", kiln_status_name(s), kiln_graph_error(g));
        CHECK(strstr(kiln_graph_error(g), "n_ctx") != NULL, "the message names the length: %s", kiln_graph_error(g));
        CHECK(memcmp(before, cache, sizeof cache) == 0, "the refused run changed the state");
        /* a length the state's bytes do not hold */
        bind_call(g, cache, 8, kv, 2, 0);
        kiln_bind_dim(g, "n_ctx", 16);
        s = kiln_run(p);
        CHECK(s == KILN_ERR_INVALID, "16 rows claimed, 8 bound: %s (%s)", kiln_status_name(s), kiln_graph_error(g));
        CHECK(strstr(kiln_graph_error(g), "cache") != NULL, "the message names the state: %s", kiln_graph_error(g));
        CHECK(memcmp(before, cache, sizeof cache) == 0, "the refused run changed the state");
        /* and after the errors a good binding runs */
        bind_call(g, cache, 8, kv, 2, 6);
        CHECK(kiln_run(p) == KILN_OK, "%s", kiln_graph_error(g));
    }
    kiln_program_free(p);
    kiln_graph_free(g);

    /* never bound: the run says which symbol */
    g = build();
    kiln_bind_dim(g, "seq", 2);
    kiln_bind_dim(g, "pos", 0);
    kiln_bind_input(g, "kv", kv, 2 * W * sizeof(float));
    kiln_bind_input(g, "cache", cache, sizeof cache);
    p = kiln_compile(g, NULL, NULL);
    CHECK(p != NULL, "%s", kiln_graph_error(g));
    if (p) {
        kiln_status s = kiln_run(p);
        CHECK(s == KILN_ERR_UNBOUND && strstr(kiln_graph_error(g), "n_ctx"), "unbound length: %s (%s)",
              kiln_status_name(s), kiln_graph_error(g));
    }
    kiln_program_free(p);
    kiln_graph_free(g);
    CASE_END();
}

/* an f16 state (a KV cache kept in f16) read as f32 through a slice of
 * its first `len` rows, by a product that reads it strided along the
 * reduction (out = q x cache[0:len], as attention reads its values): the
 * conversion is a kernel of its own (src/sched/contract.c gives the cast a
 * buffer), and it must convert the len rows read, not all n_ctx rows (the
 * e-graph may hoist the cast above the slice; the extraction's cost guesses
 * a state's capacity large: src/rewrite/kdomain.c). Checked on the kernel
 * list's loop bounds and against the reference. */
static void test_f16_state_cast_over_slice(void) {
    CASE_BEGIN("ctx_sym_f16_state_cast_over_slice");
    kiln_graph *g = kiln_graph_new();
    kiln_sym len = kiln_sym_var(g, "len"), zero = kiln_sym_int(g, 0);
    (void)kiln_sym_var(g, "n_ctx");
    kiln_tensor cache = kiln_state(g, "hcache", KILN_F16, "n_ctx, 8");
    kiln_tensor q = kiln_input(g, "q", KILN_F32, "3, len");
    kiln_tensor rows = kiln_cast(g, kiln_slice(g, cache, 0, zero, len, 1), KILN_F32);
    kiln_output(g, kiln_matmul(g, q, rows), "out");
    enum { NCTX = 40, LEN = 13 };
    static uint16_t h[NCTX * W];
    static float qv[3 * LEN], ref[3 * W], got[3 * W];
    for (int i = 0; i < NCTX * W; i++) h[i] = (uint16_t)((i % 2) << 15 | (0x3000 + (i * 97) % 0x0c00));
    for (int i = 0; i < 3 * LEN; i++) qv[i] = (float)((i * 13) % 7) * 0.5f - 1.5f;
    kiln_bind_dim(g, "n_ctx", NCTX);
    kiln_bind_dim(g, "len", LEN);
    kiln_bind_input(g, "q", qv, sizeof qv);
    kiln_bind_input(g, "hcache", h, sizeof h);
    CHECK(kiln_eval_reference(g) == KILN_OK && kiln_read_output(g, "out", ref, sizeof ref) == KILN_OK, "reference: %s",
          kiln_graph_error(g));
    kiln_program *p = kiln_compile(g, NULL, NULL);
    CHECK(p != NULL, "compile: %s", kiln_graph_error(g));
    if (p) {
        const char *ks = kiln_program_kernels(p);
        const char *cast = ks ? strstr(ks, " CAST)") : NULL;
        CHECK(cast != NULL, "no kernel of its own for the cast:\n%s", ks ? ks : "(none)");
        const char *next = cast ? strstr(cast + 1, "kernel ") : NULL;
        const char *full = cast ? strstr(cast, "[0, n_ctx)") : NULL;
        CHECK(cast && (!full || (next && full > next)), "the cast converts all n_ctx rows:\n%s", ks);
        CHECK(kiln_run(p) == KILN_OK && kiln_read_output(g, "out", got, sizeof got) == KILN_OK, "run: %s",
              kiln_graph_error(g));
        for (int i = 0; i < 3 * W; i++)
            CHECK(fabsf(ref[i] - got[i]) <= 1e-4f * (1 + fabsf(ref[i])), "out[%d]: reference %g, compiled %g", i,
                  (double)ref[i], (double)got[i]);
        free((void *)ks);
        kiln_program_free(p);
    }
    kiln_graph_free(g);
    CASE_END();
}

int main(void) {
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/kiln-test-ctxsym-%ld-%ld", (long)getuid(), (long)getpid());
    setenv("XDG_CACHE_HOME", dir, 1); /* a fresh kernel cache: the first compile runs cc */
    test_same_source_from_cache(); /* first: its first compile finds the cache empty */
    test_one_program_two_lengths();
    test_bad_bindings();
    test_f16_state_cast_over_slice();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "test_ctx_sym: could not remove %s\n", dir);
    return check_exit();
}
