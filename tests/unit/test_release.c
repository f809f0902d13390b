/* test_release.c — a weight whose 8-row interleaved copy (rp=1) replaces it
 * for every kernel is handed back to its owner (kiln_graph_on_weight_release,
 * src/runtime/release.c), and the program then really reads only the copy:
 * decode and prefill (whose int8 packer reads the copy, emit_gemm_i8.c's
 * kcx_<dt>: q8_0, q5_0, q4_k; so does the AMX bf16 one, emit_gemm_amx_bf16.c's
 * kahx_<dt>, bit for bit what it packs from the weight itself, where the CPU
 * has AMX bf16) give the reference's result after the test overwrites the
 * weight's own bytes. The first launch, even a prefill, makes the copy. A
 * table also gathered (a tied embedding) is released too, and the program
 * then reads only the gathered rows of it: right with every other row
 * overwritten. Weights that something else reads whole (a sum over the
 * table), or whose format the packer cannot read from the copy (q6_k), are
 * never released. gguf_release keeps a file's bytes readable and the same.
 * K = 2560 spans two K-blocks of the copy (SCH_REPACK_KBLOCK = 2048).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gguf.h"
#include "kiln.h"
#include "kiln_compile.h"
#include "kiln_gguf.h"
#include "weights.h"

static int cpu_flag(const char *name) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            char pat[64];
            snprintf(pat, sizeof pat, " %s", name);
            const char *p = strstr(line, pat);
            found = p && (p[strlen(pat)] == ' ' || p[strlen(pat)] == '\n');
            break;
        }
    if (f) fclose(f);
    return found;
}

typedef struct released {
    int calls;
    const void *data;
    size_t bytes;
} released;

static void on_release(void *ctx, const void *data, size_t bytes) {
    released *r = ctx;
    r->calls++;
    r->data = data;
    r->bytes = bytes;
}

enum { K = 2560, N = 48 };

/* the reference's y at m rows of x (bound as "x"), into a new buffer */
static float *reference(kiln_graph *g, int64_t m, float *x) {
    kiln_bind_dim(g, "m", m);
    kiln_bind_input(g, "x", x, (size_t)(m * K) * sizeof(float));
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    float *y = calloc((size_t)(m * N), sizeof *y);
    kiln_read_output(g, "y", y, (size_t)(m * N) * sizeof *y);
    return y;
}

/* p run at m rows of x: within 3% of the largest reference output (the
 * int8 forms' approximation; a wrong layout or scale errs by the outputs'
 * own size) */
static void run_close(kiln_program *p, kiln_graph *g, int64_t m, float *x, const float *ref, const char *what) {
    kiln_bind_dim(g, "m", m);
    kiln_bind_input(g, "x", x, (size_t)(m * K) * sizeof(float));
    CHECK(kiln_run(p) == KILN_OK, "%s: %s", what, kiln_graph_error(g));
    float *y = calloc((size_t)(m * N), sizeof *y);
    kiln_read_output(g, "y", y, (size_t)(m * N) * sizeof *y);
    double big = 0, worst = 0;
    for (int64_t i = 0; i < m * N; i++) big = fmax(big, fabs(ref[i]));
    for (int64_t i = 0; i < m * N; i++) worst = fmax(worst, fabs(ref[i] - y[i]));
    CHECK(big > 0 && worst <= 0.03 * big, "%s: worst error %g of outputs up to %g", what, worst, big);
    free(y);
}

/* y = x w^T, w (N, K) of dtype t; tied 1: the same table also gathered
 * (e: rows ids of w); 2: also summed whole (s) */
static kiln_graph *linear_graph(kiln_dtype t, int tied) {
    kiln_graph *g = kiln_graph_new();
    char shape[32];
    snprintf(shape, sizeof shape, "m, %d", K);
    kiln_tensor x = kiln_input(g, "x", KILN_F32, shape);
    snprintf(shape, sizeof shape, "%d, %d", N, K);
    kiln_tensor w = kiln_input(g, "w", t, shape);
    kiln_output(g, kiln_linear(g, x, w, KILN_NONE), "y");
    if (tied) kiln_output(g, kiln_embedding(g, w, kiln_input(g, "ids", KILN_I32, "2")), "e");
    if (tied == 2) kiln_output(g, kiln_sum(g, kiln_cast(g, w, KILN_F32), 1), "s");
    return g;
}

/* e (2 rows of K) from p's last run equals the reference's */
/* the prefill schedules whose packer reads the copy */
static const char *const PACKED_I8 = "mr=4 nr=32 nc=0 mc=64 arith=i8 form=packed kc=0";
static const char *const AMX_BF16 = "mr=32 nr=32 nc=0 mc=32 arith=bf16 form=amx kc=0";

/* g compiled with schedules whose copy replaces a weight: the repacked
 * decode tile and a prefill (`large`: default the packed int8 one) whose
 * packer reads the copy (threads 0: the default) */
static kiln_program *compile_with(kiln_graph *g, int threads, const char *large) {
    kiln_compile_options o = kiln_compile_defaults();
    if (threads > 0) o.threads = threads;
    o.contract_sched_small = "mr=1 nr=8 nc=0 mc=16 arith=i8 rp=1";
    o.contract_sched_large = large ? large : PACKED_I8;
    return kiln_compile(g, &o, NULL);
}

static kiln_program *compile_i8(kiln_graph *g, int threads) { return compile_with(g, threads, NULL); }

/* y at m rows of x from a program on a second graph whose weight is bound
 * as a plain input (no copy: the packer reads the weight itself) */
static float *without_copy(kiln_dtype t, const uint8_t *wb, size_t wbytes, int64_t m, float *x, const char *large) {
    kiln_graph *g = linear_graph(t, 0);
    kiln_bind_input(g, "w", (void *)wb, wbytes);
    kiln_bind_dim(g, "m", m);
    kiln_bind_input(g, "x", x, (size_t)(m * K) * sizeof(float));
    kiln_program *p = compile_with(g, 2, large);
    float *y = calloc((size_t)(m * N), sizeof *y);
    CHECK(p && kiln_run(p) == KILN_OK, "without the copy: %s", kiln_graph_error(g));
    kiln_read_output(g, "y", y, (size_t)(m * N) * sizeof *y);
    kiln_program_free(p);
    kiln_graph_free(g);
    return y;
}

static void gathered_right(kiln_graph *g, const float *ref, const char *what) {
    float *e = calloc(2 * K, sizeof *e);
    CHECK(kiln_read_output(g, "e", e, 2 * K * sizeof *e) == KILN_OK, "%s: %s", what, kiln_graph_error(g));
    double worst = 0;
    for (int i = 0; i < 2 * K; i++) worst = fmax(worst, fabs(e[i] - ref[i]));
    CHECK(worst <= 1e-6, "%s: gathered rows differ by %g", what, worst);
    free(e);
}

/* a tied table (gathered and contracted): released once the copy is made,
 * and then read only at the rows the ids name */
static void test_tied_released(void) {
    CASE_BEGIN("release_tied_table_reads_only_gathered_rows");
    kiln_graph *g = linear_graph(KILN_Q8_0, 1);
    float *wf = rand_f32(N * K, -1, 1), *x1 = rand_f32(K, -1, 1), *x37 = rand_f32(37 * K, -1, 1);
    size_t wbytes;
    uint8_t *wb = make_weights(KILN_Q8_0, wf, N * K, &wbytes), *keep = malloc(wbytes);
    memcpy(keep, wb, wbytes);
    int32_t ids[2] = {3, 40};
    kiln_bind_weight(g, "w", wb, wbytes);
    kiln_bind_input(g, "ids", ids, sizeof ids);
    released r = {0, NULL, 0};
    kiln_graph_on_weight_release(g, on_release, &r);
    float *ref1 = reference(g, 1, x1), *eref = calloc(2 * K, sizeof *eref);
    kiln_read_output(g, "e", eref, 2 * K * sizeof *eref);
    float *ref37 = reference(g, 37, x37);
    kiln_program *p = compile_i8(g, 2);
    CHECK(p != NULL, "compile: %s", kiln_graph_error(g));
    if (p) {
        run_close(p, g, 1, x1, ref1, "tied decode");
        CHECK(r.calls == 1 && r.data == wb && r.bytes == wbytes, "release calls %d (data %p of %p, %zu of %zu bytes)",
              r.calls, r.data, (void *)wb, r.bytes, wbytes);
        /* every row but the gathered ones overwritten: the contraction reads
         * the copy, the gather only rows 3 and 40 */
        size_t row = wbytes / N;
        for (int i = 0; i < N; i++)
            if (i != ids[0] && i != ids[1]) memset(wb + (size_t)i * row, 0x3c, row);
        run_close(p, g, 1, x1, ref1, "tied decode after the release");
        gathered_right(g, eref, "decode");
        run_close(p, g, 37, x37, ref37, "tied prefill after the release");
        gathered_right(g, eref, "prefill");
        CHECK(r.calls == 1, "released %d times", r.calls);
    }
    memcpy(wb, keep, wbytes);
    kiln_program_free(p);
    kiln_graph_free(g);
    free(wf), free(x1), free(x37), free(wb), free(keep), free(ref1), free(ref37), free(eref);
    CASE_END();
}

static void test_released(kiln_dtype t, const char *large) {
    char name[64];
    snprintf(name, sizeof name, "release_%s_copy_replaces_weight%s", kiln_dtype_name(t), large ? "_amx_bf16" : "");
    CASE_BEGIN(name);
    kiln_graph *g = linear_graph(t, 0);
    float *wf = rand_f32(N * K, -1, 1), *x1 = rand_f32(K, -1, 1), *x37 = rand_f32(37 * K, -1, 1);
    size_t wbytes;
    uint8_t *wb = make_weights(t, wf, N * K, &wbytes), *keep = malloc(wbytes);
    memcpy(keep, wb, wbytes);
    kiln_bind_weight(g, "w", wb, wbytes);
    released r = {0, NULL, 0};
    kiln_graph_on_weight_release(g, on_release, &r);
    float *ref1 = reference(g, 1, x1), *ref37 = reference(g, 37, x37);
    float *plain = large ? without_copy(t, wb, wbytes, 37, x37, large) : NULL;
    kiln_program *p = compile_with(g, 2, large);
    CHECK(p != NULL, "compile: %s", kiln_graph_error(g));
    if (p) {
        /* the first launch, a prefill, makes the decode copy and packs from it */
        run_close(p, g, 37, x37, ref37, "prefill making the copy");
        CHECK(r.calls == 1 && r.data == wb && r.bytes == wbytes, "release calls %d (data %p of %p, %zu of %zu bytes)",
              r.calls, r.data, (void *)wb, r.bytes, wbytes);
        run_close(p, g, 1, x1, ref1, "decode");
        /* the owner's bytes now unread by the program: garbage must not matter
         * (the q8_0 and q4_k scales stay finite: 0x3c3c is f16 1.06) */
        memset(wb, 0x3c, wbytes);
        run_close(p, g, 1, x1, ref1, "decode after the release");
        run_close(p, g, 37, x37, ref37, "prefill after the release (packed from the copy)");
        if (plain) { /* the copy's values are the weight's, bit for bit */
            float *y = calloc(37 * N, sizeof *y);
            kiln_read_output(g, "y", y, 37 * N * sizeof *y);
            CHECK(memcmp(y, plain, 37 * N * sizeof *y) == 0, "the prefill from the copy differs from the one from the weight");
            free(y);
        }
        run_close(p, g, 37, x37, ref37, "prefill again");
        CHECK(r.calls == 1, "released %d times", r.calls);
    }
    memcpy(wb, keep, wbytes);
    kiln_program_free(p);
    kiln_graph_free(g);
    free(wf), free(x1), free(x37), free(wb), free(keep), free(ref1), free(ref37), free(plain);
    CASE_END();
}

/* a search announced (kiln_program_search_coming, as the first-run search
 * does before its warm-up): the copy made then gives nothing back, since
 * the search may pick schedules that read the weight itself; once the
 * search ends, the next launch releases it */
static void test_coming(void) {
    CASE_BEGIN("release_waits_for_a_coming_search");
    kiln_graph *g = linear_graph(KILN_Q8_0, 0);
    float *wf = rand_f32(N * K, -1, 1), *x1 = rand_f32(K, -1, 1), *x37 = rand_f32(37 * K, -1, 1);
    size_t wbytes;
    uint8_t *wb = make_weights(KILN_Q8_0, wf, N * K, &wbytes);
    kiln_bind_weight(g, "w", wb, wbytes);
    released r = {0, NULL, 0};
    kiln_graph_on_weight_release(g, on_release, &r);
    float *ref1 = reference(g, 1, x1), *ref37 = reference(g, 37, x37);
    kiln_program *p = compile_i8(g, 2);
    CHECK(p != NULL, "compile: %s", kiln_graph_error(g));
    if (p) {
        kiln_program_search_coming(p);
        run_close(p, g, 37, x37, ref37, "prefill making the copy, a search coming");
        run_close(p, g, 1, x1, ref1, "decode, a search coming");
        CHECK(r.calls == 0, "released %d times before the search", r.calls);
        CHECK(kiln_program_search_finish(p) == KILN_OK, "finish: %s", kiln_graph_error(g));
        run_close(p, g, 1, x1, ref1, "decode after the search");
        CHECK(r.calls == 1 && r.data == wb, "released %d times after the search", r.calls);
    }
    kiln_program_free(p);
    kiln_graph_free(g);
    free(wf), free(x1), free(x37), free(wb), free(ref1), free(ref37);
    CASE_END();
}

/* a table also summed whole (and gathered), a q6_k weight: never released
 * (and right) */
static void test_kept(void) {
    CASE_BEGIN("release_kept_when_read_elsewhere");
    for (int c = 0; c < 2; c++) {
        kiln_dtype t = c == 0 ? KILN_Q8_0 : KILN_Q6_K;
        kiln_graph *g = linear_graph(t, c == 0 ? 2 : 0);
        float *wf = rand_f32(N * K, -1, 1), *x1 = rand_f32(K, -1, 1);
        size_t wbytes;
        void *wb = make_weights(t, wf, N * K, &wbytes);
        int32_t ids[2] = {3, 40};
        kiln_bind_weight(g, "w", wb, wbytes);
        if (c == 0) kiln_bind_input(g, "ids", ids, sizeof ids);
        released r = {0, NULL, 0};
        kiln_graph_on_weight_release(g, on_release, &r);
        float *ref1 = reference(g, 1, x1);
        kiln_program *p = compile_i8(g, 0);
        CHECK(p != NULL, "compile: %s", kiln_graph_error(g));
        if (p) {
            run_close(p, g, 1, x1, ref1, c == 0 ? "tied decode" : "q6_k decode");
            run_close(p, g, 1, x1, ref1, c == 0 ? "tied decode again" : "q6_k decode again");
        }
        CHECK(r.calls == 0, "%s: released %d times", c == 0 ? "a table also summed" : "q6_k", r.calls);
        kiln_program_free(p);
        kiln_graph_free(g);
        free(wf), free(x1), free(wb), free(ref1);
    }
    CASE_END();
}

/* gguf_release on a file read into memory: the tensor's bytes read back the
 * same after its pages were given back (now a mapping of the file) */
static void test_gguf_release(void) {
    CASE_BEGIN("release_gguf_pages_stay_readable");
    char path[] = "/tmp/kiln_test_release_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) close(fd);
    const int64_t n = 3 << 20; /* 12 MiB of f32: read into the 2 MiB-aligned buffer */
    float *v = rand_f32(n, -1, 1);
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    int64_t dims[1] = {n};
    CHECK(kiln_gguf_writer_add_tensor_f32(w, "t", KILN_F32, 1, dims, v) == KILN_OK, "%s", kiln_gguf_writer_error(w));
    CHECK(kiln_gguf_writer_write(w, path) == KILN_OK, "%s", kiln_gguf_writer_error(w));
    kiln_gguf_writer_free(w);
    gguf_file *f = NULL;
    char err[256];
    CHECK(gguf_open(path, GGUF_OPEN_READ, &f, err, sizeof err) == KILN_OK, "%s", err);
    const gguf_tensor *t = f ? gguf_tensor_at(f, 0) : NULL;
    CHECK(t && t->bytes == (uint64_t)n * 4, "the tensor");
    if (t) {
        CHECK(memcmp(t->data, v, (size_t)t->bytes) == 0, "read");
        gguf_release(f, t->data, (size_t)t->bytes);
        CHECK(memcmp(t->data, v, (size_t)t->bytes) == 0, "the bytes changed after gguf_release");
        gguf_release(f, t->data, (size_t)t->bytes); /* twice: harmless */
        gguf_release(f, t->data, 16); /* no whole page: nothing happens */
        CHECK(memcmp(t->data, v, (size_t)t->bytes) == 0, "the bytes changed after a second release");
    }
    gguf_close(f);
    unlink(path);
    free(v);
    CASE_END();
}

int main(void) {
    setenv("KILN_TUNE", "0", 1);
    test_gguf_release();
    if (!cpu_flag("avx512_vnni")) {
        printf("PASS release_skipped_without_avx512_vnni\n");
        return check_exit();
    }
    test_released(KILN_Q8_0, NULL);
    test_released(KILN_Q5_0, NULL);
    test_released(KILN_Q4_K, NULL);
    if (cpu_flag("amx_bf16")) /* else the AMX bf16 prefill is not emitted */
        for (int i = 0; i < 3; i++) test_released((const kiln_dtype[]){KILN_Q8_0, KILN_Q5_0, KILN_Q4_K}[i], AMX_BF16);
    test_tied_released();
    test_coming();
    test_kept();
    return check_exit();
}
