/* test_cc_split.c — the build of a large program: in parallel parts
 * (runtime/cc_split.c) it gives the same functions as a whole build, a
 * source it cannot cut is refused so that the caller compiles it whole, and
 * the part count follows the size and the cores; with each shared kernel
 * body once (runtime/cc_dedup.c) every kernel still computes on its own
 * buffers, and kernels that differ in more than their buffers stay apart.
 * The compile rate behind the recompile estimate is learnt from a whole
 * program's build, never from a search's candidate unit.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "base.h"
#include "cc_dedup.h"
#include "cc_split.h"
#include "check.h"

#define NK 400

/* a prelude of static helpers, then NK kernels of ~800 bytes each; kernel k
 * returns helper(k) + its own sum, which the test recomputes */
static char *make_source(int static_in_middle) {
    size_t cap = (size_t)NK * 2000 + 4096, len = 0;
    char *s = kiln_xmalloc(cap);
    len += (size_t)snprintf(s + len, cap - len,
                            "/* test program */\n#include <stdint.h>\n"
                            "static inline int64_t helper(int64_t k) { return 3 * k + 1; }\n");
    for (int k = 0; k < NK; k++) {
        if (static_in_middle && k == NK / 2)
            len += (size_t)snprintf(s + len, cap - len, "static int64_t mid(int64_t x) { return x + 7; }\n");
        len += (size_t)snprintf(s + len, cap - len, "int kiln_k%d(int64_t *out) {\n  int64_t acc = helper(%d);\n", k, k);
        for (int i = 0; i < 24; i++)
            len += (size_t)snprintf(s + len, cap - len, "  acc += (int64_t)%d * %d; /* padding padding */\n", i, k % 7);
        if (static_in_middle && k > NK / 2) len += (size_t)snprintf(s + len, cap - len, "  acc = mid(acc) - 7;\n");
        len += (size_t)snprintf(s + len, cap - len, "  *out = acc;\n  return 0;\n}\n");
    }
    return s;
}

static int64_t expected(int k) {
    int64_t acc = 3 * (int64_t)k + 1;
    for (int i = 0; i < 24; i++) acc += (int64_t)i * (k % 7);
    return acc;
}

static void case_split_matches(void) {
    CASE_BEGIN("cc_split_builds_every_kernel");
    char *src = make_source(0);
    CHECK(strlen(src) > ((size_t)256 << 10), "the test source is %zu bytes: too small to be cut", strlen(src));
    char base[] = "/tmp/kiln_cc_split_XXXXXX";
    int fd = mkstemp(base);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    char so[64];
    snprintf(so, sizeof so, "%s.so", base);
    CHECK(rt_cc_split_build(src, 3, "cc", "-O1 -fPIC", so, base) == 0, "the split build failed");
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL, "dlopen %s: %s", so, dlerror());
    for (int k = 0; k < NK && h; k++) {
        char name[32];
        snprintf(name, sizeof name, "kiln_k%d", k);
        void *f = dlsym(h, name);
        CHECK(f != NULL, "%s missing from the split object", name);
        if (!f) break;
        int (*fn)(int64_t *);
        memcpy(&fn, &f, sizeof fn);
        int64_t out = -1;
        CHECK(fn(&out) == 0 && out == expected(k), "%s: %lld, want %lld", name, (long long)out, (long long)expected(k));
    }
    if (h) dlclose(h);
    remove(so);
    remove(base);
    char part[80];
    snprintf(part, sizeof part, "%s.p0.c", base);
    CHECK(access(part, F_OK) != 0, "a part's source was left behind");
    free(src);
    CASE_END();
}

static void case_refuses_uncuttable(void) {
    CASE_BEGIN("cc_split_refuses_what_it_cannot_cut");
    /* a static function between kernels, used by later ones: a part without
     * it does not compile, so the build must fail (the caller then compiles
     * the source whole) and leave nothing behind */
    char *src = make_source(1);
    char base[] = "/tmp/kiln_cc_split_XXXXXX";
    int fd = mkstemp(base);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    char so[64];
    snprintf(so, sizeof so, "%s.so", base);
    CHECK(rt_cc_split_build(src, 4, "cc", "-O0 -fPIC", so, base) != 0, "a source with a static in the middle was cut");
    CHECK(access(so, F_OK) != 0, "a failed split build left %s", so);
    CHECK(rt_cc_split_build("int main(void) { return 0; }\n", 2, "cc", "-fPIC", so, base) != 0,
          "a source with no kernel was cut");
    remove(base);
    free(src);
    CASE_END();
}

static void case_parts(void) {
    CASE_BEGIN("cc_split_part_count");
    CHECK(rt_cc_split_parts(100 << 10, 8) == 1, "a small source is compiled whole");
    CHECK(rt_cc_split_parts((size_t)2 << 20, 1) == 1, "one core: whole");
    CHECK(rt_cc_split_parts((size_t)2 << 20, 2) == 2, "2 MB on 2 cores: 2 parts");
    CHECK(rt_cc_split_parts((size_t)300 << 10, 16) == 2, "300 KB: parts of at least 128 KB");
    CHECK(rt_cc_split_parts((size_t)64 << 20, 64) == 8, "at most 8 parts");
    CASE_END();
}

/* kernels in the emitter's shape: layer l's kernel reads B[3l+1], B[3l+2]
 * and writes B[3l+3], through pointers named after the buffers; a local
 * named after a loop id that differs per layer (r<l+5>) and a clamp
 * temporary named after a node (t<1400+l>_i); with flags 7 the kernel
 * calls itself row by row (as a stream kernel recomputes a row); every
 * third layer scales by a different constant (a kernel that must stay
 * apart) */
#define NL 12
static char *layers_source(void) {
    size_t cap = 64 << 10, len = 0;
    char *s = kiln_xmalloc(cap);
    len += (size_t)snprintf(s + len, cap - len, "#include <stdint.h>\n#define KI static inline\nKI int64_t k2(int64_t a) { return 2 * a; }\n");
    for (int l = 0; l < NL; l++) {
        int a = 3 * l + 1, b = a + 1, o = a + 2;
        len += (size_t)snprintf(s + len, cap - len,
                                "int kiln_k%d(void *const *B, const int64_t *v, int64_t lo, int64_t hi, int64_t chunk, int64_t flags) {\n"
                                "  (void)v; (void)chunk; (void)flags;\n"
                                "  if (flags == 7 && hi - lo > 1) return kiln_k%d(B, v, lo, lo + 1, chunk, 0) | kiln_k%d(B, v, lo + 1, hi, chunk, 7);\n"
                                "  const int64_t *restrict b%d = (const int64_t *)B[%d]; /* node #%d */\n"
                                "  const int64_t *restrict b%d = (const int64_t *)B[%d];\n"
                                "  int64_t *restrict out = (int64_t *)B[%d];\n"
                                "  for (int64_t r%d = lo; r%d < hi; r%d++) { const int64_t t%d_i = b%d[r%d]; out[r%d] = k2(t%d_i) + %d * b%d[r%d]; }\n"
                                "  return 0;\n}\n\n",
                                l, l, l, a, a, 100 + l, b, b, o, l + 5, l + 5, l + 5, 1400 + l, a, l + 5, l + 5, 1400 + l,
                                l % 3 == 2 ? 7 : 3, b, l + 5);
    }
    return s;
}

typedef int (*kernel_fn)(void *const *, const int64_t *, int64_t, int64_t, int64_t, int64_t);

/* kernel kiln_k<k> of the loaded object h, or NULL (a failed check) */
static kernel_fn kernel_of(void *h, int k) {
    char name[32];
    snprintf(name, sizeof name, "kiln_k%d", k);
    void *f = dlsym(h, name);
    CHECK(f != NULL, "%s missing", name);
    kernel_fn fn = NULL;
    if (f) memcpy(&fn, &f, sizeof fn);
    return fn;
}

static void case_dedup(void) {
    CASE_BEGIN("cc_dedup_shares_bodies_and_keeps_buffers");
    char *src = layers_source();
    int distinct = 0, kernels = 0;
    char *tu = rt_cc_dedup(src, &distinct, &kernels);
    CHECK(tu != NULL, "nothing shared in %d kernels", kernels);
    CHECK(kernels == NL && distinct == 2, "%d kernels, %d distinct bodies: want %d and 2", kernels, distinct, NL);
    char base[] = "/tmp/kiln_cc_dedup_XXXXXX";
    int fd = mkstemp(base);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    char so[64];
    snprintf(so, sizeof so, "%s.so", base);
    /* the unit is small: built whole through the split path's 2 parts to
     * check that bodies defined in one part are called from the other */
    CHECK(tu && rt_cc_split_build(tu, 2, "cc", "-O1 -fPIC", so, base) == 0, "the deduplicated unit does not build");
    void *h = tu ? dlopen(so, RTLD_NOW | RTLD_LOCAL) : NULL;
    CHECK(h != NULL, "dlopen: %s", dlerror());
    int64_t bufs[3 * NL + 1][4];
    void *B[3 * NL + 1];
    for (int i = 0; i <= 3 * NL; i++) {
        for (int j = 0; j < 4; j++) bufs[i][j] = 100 * i + j;
        B[i] = bufs[i];
    }
    for (int l = 0; l < NL && h; l++) {
        kernel_fn fn = kernel_of(h, l);
        if (!fn) break;
        fn(B, NULL, 0, 4, 0, l % 2 ? 7 : 0); /* 7: row by row through the kernel's calls of itself */
        int a = 3 * l + 1, b = a + 1, o = a + 2;
        for (int j = 0; j < 4; j++) {
            int64_t want = 2 * (100 * a + j) + (l % 3 == 2 ? 7 : 3) * (100 * b + j);
            CHECK(bufs[o][j] == want, "layer %d [%d]: %lld, want %lld", l, j, (long long)bufs[o][j], (long long)want);
        }
    }
    CHECK(!h || dlsym(h, "kiln_body_0") == NULL, "a shared body is exported");
    if (h) dlclose(h);
    remove(so);
    remove(base);
    free(tu);
    free(src);
    CHECK(rt_cc_dedup("int main(void) { return 0; }\n", NULL, NULL) == NULL, "a source without kernels was rewritten");
    /* what the recompile estimate reads (exec.c): the unit's bytes, the
     * source's where nothing is shared */
    src = layers_source();
    tu = rt_cc_dedup(src, NULL, NULL);
    CHECK(tu && rt_cc_unit_bytes(src) == strlen(tu) && strlen(tu) < strlen(src), "unit bytes %zu, unit %zu, source %zu",
          rt_cc_unit_bytes(src), tu ? strlen(tu) : 0, strlen(src));
    CHECK(rt_cc_unit_bytes("int main(void) { return 0; }\n") == strlen("int main(void) { return 0; }\n"),
          "a source without kernels: unit bytes %zu", rt_cc_unit_bytes("int main(void) { return 0; }\n"));
    free(tu);
    free(src);
    CASE_END();
}

/* the recompile estimate's rate (rt_cc_seconds_per_byte) is learnt from a
 * whole program's build only (rt_cc_next_is_program, marked by
 * rt_cpu_emit_and_load), never from a search's candidate unit: one taught
 * it at twice a program's seconds per byte, and the recompile's reserve
 * took the prefill searches' time. Sources of 300 KB, mostly a comment (a
 * fast build), new to the kernel cache (a cached build teaches nothing), in
 * a cache directory of the test's own. */
static char *big_source(const char *tag) {
    size_t n = (size_t)300 << 10;
    char *s = kiln_xmalloc(n + 256);
    int h = snprintf(s, 256, "/* %s %ld %.9f\n", tag, (long)getpid(), kiln_now_s());
    memset(s + h, 'x', n);
    snprintf(s + h + n, 128, " */\nint kiln_probe(void) { return 7; }\n");
    return s;
}

static void case_rate_from_programs_only(void) {
    CASE_BEGIN("cc_rate_learnt_from_programs_only");
    char dir[] = "/tmp/kiln-cc-rate-XXXXXX", err[4096];
    const char *old = getenv("XDG_CACHE_HOME");
    char *saved = old ? kiln_xstrdup(old) : NULL;
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    setenv("XDG_CACHE_HOME", dir, 1);
    CHECK(!rt_cc_rate_learnt(), "a rate learnt before any build");
    char *cand = big_source("candidate unit");
    rt_module *m = NULL;
    kiln_status s = rt_cpu_compile(cand, "", &m, err, sizeof err);
    CHECK(s == KILN_OK, "candidate build: %s", err);
    if (m) rt_cpu_module_free(m);
    CHECK(!rt_cc_rate_learnt(), "a candidate unit taught the program rate");
    char *prog = big_source("program");
    m = NULL;
    rt_cc_next_is_program();
    s = rt_cpu_compile(prog, "", &m, err, sizeof err);
    CHECK(s == KILN_OK, "program build: %s", err);
    if (m) rt_cpu_module_free(m);
    CHECK(rt_cc_rate_learnt() && rt_cc_seconds_per_byte() > 0, "a program's build taught nothing");
    free(cand);
    free(prog);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
    if (saved) setenv("XDG_CACHE_HOME", saved, 1);
    else unsetenv("XDG_CACHE_HOME");
    free(saved);
    CASE_END();
}

/* what the emitter prints before a kernel belongs to it. Odd kernels are
 * the streaming tile's shape: before each, a guarded block defining a type
 * (the tile prelude, printed before every such kernel) and, without
 * `shared`, a static function only that kernel calls (the tile's f32 and
 * bf16 bodies); with `shared` they are one body over other buffers
 * (cc_dedup.c shares it, defined after the first of them). Even kernels are
 * plain and distinct. Odd k writes B[k][0] = 1000 (+ k without shared),
 * even k writes k */
#define NLEAD 240
static char *leading_source(int shared) {
    size_t cap = (size_t)NLEAD * 1600 + 4096, len = 0;
    char *s = kiln_xmalloc(cap);
    len += (size_t)snprintf(s + len, cap - len, "#include <stdint.h>\nstatic const int64_t kbase = 1000;\n");
    for (int k = 0; k < NLEAD; k++) {
        const char *sig = "(void *const *B, const int64_t *v, int64_t lo, int64_t hi, int64_t chunk, int64_t flags) {\n"
                          "  (void)v; (void)lo; (void)hi; (void)chunk; (void)flags;\n";
        if (k % 2 == 0) {
            len += (size_t)snprintf(s + len, cap - len, "int kiln_k%d%s  int64_t *restrict o = (int64_t *)B[%d];\n", k, sig, k);
            for (int i = 0; i < 12; i++) len += (size_t)snprintf(s + len, cap - len, "  o[1] = %d; /* padding padding */\n", i);
            len += (size_t)snprintf(s + len, cap - len, "  o[0] = %d;\n  return 0;\n}\n\n", k);
            continue;
        }
        len += (size_t)snprintf(s + len, cap - len, "#ifndef KT_LEAD\n#define KT_LEAD\ntypedef int64_t kt_lead;\n#endif\n");
        if (!shared)
            len += (size_t)snprintf(s + len, cap - len, "static kt_lead kiln_k%d_h(kt_lead x) { return x + kbase; }\n", k);
        len += (size_t)snprintf(s + len, cap - len, "int kiln_k%d%s  kt_lead *restrict o = (kt_lead *)B[%d];\n", k, sig, k);
        for (int i = 0; i < 12; i++) len += (size_t)snprintf(s + len, cap - len, "  o[1] = %d; /* padding padding */\n", i);
        if (shared) len += (size_t)snprintf(s + len, cap - len, "  o[0] = (kt_lead)kbase;\n  return 0;\n}\n\n");
        else len += (size_t)snprintf(s + len, cap - len, "  o[0] = kiln_k%d_h(%d);\n  return 0;\n}\n\n", k, k);
    }
    return s;
}

static void case_split_keeps_leading_text(void) {
    CASE_BEGIN("cc_split_keeps_the_text_before_a_kernel_with_it");
    for (int shared = 0; shared < 2; shared++) {
        char *src = leading_source(shared);
        char *tu = shared ? rt_cc_dedup(src, NULL, NULL) : NULL;
        CHECK(!shared || tu != NULL, "the shared kernels were not deduplicated");
        char base[] = "/tmp/kiln_cc_split_XXXXXX";
        int fd = mkstemp(base);
        CHECK(fd >= 0, "mkstemp");
        close(fd);
        char so[64];
        snprintf(so, sizeof so, "%s.so", base);
        /* cut at the kernel lines, a part whose kernel's helper or type fell
         * to the part before failed to compile and the build was refused */
        CHECK(rt_cc_split_build(tu ? tu : src, 3, "cc", "-O0 -fPIC", so, base) == 0,
              "the split build failed (%s kernels)", shared ? "shared" : "distinct");
        void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
        CHECK(h != NULL, "dlopen %s", so);
        int64_t bufs[NLEAD][2];
        void *B[NLEAD];
        for (int k = 0; k < NLEAD; k++) B[k] = bufs[k], bufs[k][0] = -1;
        for (int k = 0; k < NLEAD && h; k++) {
            kernel_fn fn = kernel_of(h, k);
            if (!fn) break;
            int64_t want = k % 2 == 0 ? k : 1000 + (shared ? 0 : k);
            CHECK(fn(B, NULL, 0, 1, 0, 0) == 0 && bufs[k][0] == want, "kiln_k%d wrote %lld, want %lld", k,
                  (long long)bufs[k][0], (long long)want);
        }
        if (h) dlclose(h);
        remove(so);
        remove(base);
        free(tu);
        free(src);
    }
    CASE_END();
}

int main(void) {
    case_rate_from_programs_only();
    case_parts();
    case_dedup();
    case_split_matches();
    case_refuses_uncuttable();
    case_split_keeps_leading_text();
    return check_exit();
}
