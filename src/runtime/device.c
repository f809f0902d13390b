/* device.c — the CPU's fingerprint and measured peaks (`kiln device`).
 *
 * Fingerprint: CPU model, the ISA flags kiln cares about, online cores, cache
 * sizes (from /sys), the C compiler and its version, kiln's IR version. It is
 * the key of the tuning DB, so it lists only what changes generated code or
 * its speed.
 *
 * Peaks are measured, not looked up: read bandwidth with 1..N threads (a
 * 256 MiB buffer summed by the thread pool, best of several passes), FP32
 * FMA throughput and int8 dot-product throughput. The compute probes are C
 * compiled through the same path as kernels (so with the ISA flags kernels
 * get), using GCC/Clang vector extensions for FMA and VNNI intrinsics when
 * the CPU has them (else a plain int8 multiply-accumulate loop).
 *
 * The report ends with every GPU backend's devices and their fingerprints
 * (gpu_exec.c), or why a backend has none (no library, no driver).
 */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "base.h"
#include "gpu.h"
#include "kiln_compile.h"


static const char *isa_flags[] = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                                  "avx512dq", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16",
                                  "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp", "sve"};

static void cpu_model(char *out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0 || strncmp(line, "Model", 5) == 0) {
            char *p = strchr(line, ':');
            if (!p) continue;
            p++;
            while (*p == ' ') p++;
            size_t n = strlen(p);
            while (n && (p[n - 1] == '\n' || p[n - 1] == ' ')) p[--n] = 0;
            snprintf(out, cap, "%s", p);
            break;
        }
    }
    fclose(f);
}

static int cores(void) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c > 0 ? (int)c : 1;
}

/* cache sizes in KiB by level (L1d, L2, L3); 0 when unknown */
static void caches(long kib[4]) {
    memset(kib, 0, 4 * sizeof kib[0]);
    for (int i = 0; i < 8; i++) {
        char path[128], buf[64], type[32];
        int level = 0;
        long size = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fscanf(f, "%d", &level) != 1) level = 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        f = fopen(path, "r");
        type[0] = 0;
        if (f) {
            if (fscanf(f, "%31s", type) != 1) type[0] = 0;
            fclose(f);
        }
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (f) {
            if (fgets(buf, sizeof buf, f)) {
                size = strtol(buf, NULL, 10);
                if (strchr(buf, 'M')) size *= 1024;
            }
            fclose(f);
        }
        if (level >= 1 && level <= 3 && strcmp(type, "Instruction") != 0) kib[level] = size;
    }
}

char *rt_cpu_fingerprint(void) {
    char model[256], flags[512] = "";
    cpu_model(model, sizeof model);
    size_t n = 0;
    for (size_t i = 0; i < sizeof isa_flags / sizeof isa_flags[0]; i++)
        if (rt_cpu_has(isa_flags[i]) && n < sizeof flags)
            n += (size_t)snprintf(flags + n, sizeof flags - n, "%s%s", n ? "," : "", isa_flags[i]);
    long kib[4];
    caches(kib);
    const char *cc = rt_cc_identity();
    char *out = kiln_xmalloc(1024);
    snprintf(out, 1024, "cpu=%s;isa=%s;cores=%d;l1d=%ldK;l2=%ldK;l3=%ldK;cc=%s;ir=%d", model, flags, cores(), kib[1],
             kib[2], kib[3], cc ? cc : "none", KILN_IR_VERSION);
    return out;
}

char *kiln_device_fingerprint(void) { return rt_cpu_fingerprint(); }

/* ---- measurements ------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct bw_ctx {
    const double *data;
    int64_t n;
    double sums[256];
    int parts;
} bw_ctx;

static int bw_piece(void *ctx, int64_t lo, int64_t hi) {
    bw_ctx *c = ctx;
    /* four independent sums so the loop is load-bound, not add-latency-bound */
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = lo;
    for (; i + 4 <= hi; i += 4) {
        s0 += c->data[i];
        s1 += c->data[i + 1];
        s2 += c->data[i + 2];
        s3 += c->data[i + 3];
    }
    for (; i < hi; i++) s0 += c->data[i];
    c->sums[(lo * c->parts / (c->n ? c->n : 1)) & 255] = s0 + s1 + s2 + s3;
    return 0;
}

/* GB/s reading `bytes` with t threads: best of `reps` passes */
static double measure_bw(size_t bytes, int t, int reps) {
    int64_t n = (int64_t)(bytes / sizeof(double));
    double *d = NULL;
    /* in 2 MiB pages where the kernel gives them, as the model loader puts
     * the weights (gguf.c): with 4 KiB pages the probe measured the TLB as
     * much as the memory, and decode ran above "100%" of it */
    if (posix_memalign((void **)&d, (size_t)2 << 20, (size_t)n * sizeof *d) != 0) return 0;
#ifdef MADV_HUGEPAGE
    (void)madvise(d, (size_t)n * sizeof *d, MADV_HUGEPAGE);
#endif
    for (int64_t i = 0; i < n; i++) d[i] = (double)(i & 7);
    rt_pool *pool = rt_pool_new(t);
    bw_ctx c;
    memset(&c, 0, sizeof c);
    c.data = d;
    c.n = n;
    c.parts = t;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        rt_pool_run(pool, n, t, bw_piece, &c);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    rt_pool_free(pool);
    free(d);
    return (double)bytes / best / 1e9;
}

static const char *probe_src =
    "#include <stdint.h>\n"
    "#include <time.h>\n"
    "typedef float v16 __attribute__((vector_size(64)));\n"
    "static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);\n"
    "  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9; }\n"
    "/* 12 independent accumulators, each a named variable so that it stays in\n"
    "   a register (an array is kept in memory: a store and a load per FMA, a\n"
    "   quarter of the rate); the empty asm keeps the loop from being folded */\n"
    "#define R12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)\n"
    "#define KEEP6(p, a, b, c, d, e, f) __asm__ volatile(\"\" : \"+v\"(p##a), \"+v\"(p##b), \"+v\"(p##c), \"+v\"(p##d), \"+v\"(p##e), \"+v\"(p##f))\n"
    "/* GFLOP/s of one thread: 12 independent FMA chains of 16 lanes */\n"
    "double kiln_probe_fma(int64_t iters) {\n"
    "  const v16 b = {0.999f,0.999f,0.999f,0.999f,0.999f,0.999f,0.999f,0.999f,0.999f,0.999f,0.999f,0.999f,0.999f,0.999f,0.999f,0.999f};\n"
    "  const v16 c = b * 0.001f;\n"
    "#define FD(k) v16 a##k = b * (float)(k + 1);\n"
    "  R12(FD)\n"
    "  double t0 = now();\n"
    "  for (int64_t i = 0; i < iters; i++) {\n"
    "#define FF(k) a##k = a##k * b + c;\n"
    "    R12(FF)\n"
    "    KEEP6(a, 0, 1, 2, 3, 4, 5); KEEP6(a, 6, 7, 8, 9, 10, 11);\n"
    "  }\n"
    "  double dt = now() - t0; v16 s = a0;\n"
    "#define FS(k) s = s + a##k;\n"
    "  R12(FS)\n"
    "  return (double)iters * 12 * 16 * 2 / dt / 1e9 + (double)(s[0] * 0.0f);\n"
    "}\n"
    "#if defined(__AVX512VNNI__)\n"
    "#include <immintrin.h>\n"
    "double kiln_probe_dot(int64_t iters) {\n"
    "  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);\n"
    "#define DD(k) __m512i c##k = _mm512_setzero_si512();\n"
    "  R12(DD)\n"
    "  double t0 = now();\n"
    "  for (int64_t i = 0; i < iters; i++) {\n"
    "#define DF(k) c##k = _mm512_dpbusd_epi32(c##k, a, b);\n"
    "    R12(DF)\n"
    "    KEEP6(c, 0, 1, 2, 3, 4, 5); KEEP6(c, 6, 7, 8, 9, 10, 11);\n"
    "  }\n"
    "  double dt = now() - t0; __m512i s = c0;\n"
    "#define DS(k) s = _mm512_add_epi32(s, c##k);\n"
    "  R12(DS)\n"
    "  return (double)iters * 12 * 64 * 2 / dt / 1e9 + (double)(_mm512_reduce_add_epi32(s) * 0);\n"
    "}\n"
    "const char *kiln_probe_dot_kind = \"avx512_vnni vpdpbusd\";\n"
    "#else\n"
    "typedef int32_t vi16 __attribute__((vector_size(64)));\n"
    "double kiln_probe_dot(int64_t iters) {\n"
    "  vi16 acc[8] = {{0}}, a, b;\n"
    "  for (int i = 0; i < 16; i++) { a[i] = 3; b[i] = 5; }\n"
    "  double t0 = now();\n"
    "  for (int64_t i = 0; i < iters; i++) {\n"
    "    for (int k = 0; k < 8; k++) acc[k] += a * b;\n"
    "    __asm__ volatile(\"\" ::: \"memory\");\n"
    "  }\n"
    "  double dt = now() - t0; int s = 0;\n"
    "  for (int k = 0; k < 8; k++) s += acc[k][0];\n"
    "  return (double)iters * 8 * 16 * 2 / dt / 1e9 + (double)(s * 0);\n"
    "}\n"
    "const char *kiln_probe_dot_kind = \"int32 multiply-add (no VNNI)\";\n"
    "#endif\n";

typedef double (*probe_fn)(int64_t);

static void measure_compute(double *fma_gflops, double *dot_gops, char *dot_kind, size_t cap, char *err,
                            size_t errcap) {
    *fma_gflops = *dot_gops = 0;
    snprintf(dot_kind, cap, "unmeasured");
    const rt_backend *be = rt_backend_find("cpu");
    cg_isa isa = rt_cpu_isa();
    char flags[256];
    snprintf(flags, sizeof flags, "%s%s -ffp-contract=fast", cg_isa_cflags(isa),
             isa == CG_ISA_AVX512 && rt_cpu_has("avx512_vnni") ? " -mavx512vnni" : "");
    rt_module *m = NULL;
    if (be->compile(probe_src, flags, &m, err, errcap) != KILN_OK) return;
    void *f1 = be->symbol(m, "kiln_probe_fma"), *f2 = be->symbol(m, "kiln_probe_dot");
    void *kind = be->symbol(m, "kiln_probe_dot_kind");
    probe_fn fma = NULL, dot = NULL;
    memcpy(&fma, &f1, sizeof fma);
    memcpy(&dot, &f2, sizeof dot);
    if (fma) {
        for (int r = 0; r < 3; r++) {
            double v = fma(2000000);
            if (v > *fma_gflops) *fma_gflops = v;
        }
    }
    if (dot) {
        for (int r = 0; r < 3; r++) {
            double v = dot(2000000);
            if (v > *dot_gops) *dot_gops = v;
        }
    }
    if (kind) snprintf(dot_kind, cap, "%s", *(const char *const *)kind);
    be->module_free(m);
}

char *kiln_device_report(int json) {
    char model[256];
    cpu_model(model, sizeof model);
    long kib[4];
    caches(kib);
    int nc = cores();
    const char *cc = rt_cc_identity();
    char *fp = rt_cpu_fingerprint();
    /* 1, 2, 4, ... threads, then all cores */
    int tcount[16], ntc = 0;
    double bw[16];
    size_t bytes = (size_t)256 << 20;
    for (int t = 1; t < nc && ntc < 15; t *= 2) tcount[ntc++] = t;
    tcount[ntc++] = nc;
    for (int i = 0; i < ntc; i++) bw[i] = measure_bw(bytes, tcount[i], 4);
    double fma = 0, dot = 0;
    char dot_kind[96], err[2048] = "";
    measure_compute(&fma, &dot, dot_kind, sizeof dot_kind, err, sizeof err);
    char *s = NULL;
    size_t len = 0, cap = 0;
    if (json) {
        sch_appendf(&s, &len, &cap, "{\n  \"fingerprint\": \"%s\",\n  \"cpu\": \"%s\",\n  \"isa\": [", fp, model);
        int first = 1;
        for (size_t i = 0; i < sizeof isa_flags / sizeof isa_flags[0]; i++) {
            if (!rt_cpu_has(isa_flags[i])) continue;
            sch_appendf(&s, &len, &cap, "%s\"%s\"", first ? "" : ", ", isa_flags[i]);
            first = 0;
        }
        sch_appendf(&s, &len, &cap,
                    "],\n  \"codegen\": \"%s\",\n  \"cores\": %d,\n  \"cache_kib\": {\"l1d\": %ld, \"l2\": %ld, "
                    "\"l3\": %ld},\n  \"compiler\": \"%s\",\n  \"read_bandwidth_gbs\": {",
                    cg_isa_name(rt_cpu_isa()), nc, kib[1], kib[2], kib[3], cc ? cc : "none");
        for (int i = 0; i < ntc; i++) sch_appendf(&s, &len, &cap, "%s\"%d\": %.2f", i ? ", " : "", tcount[i], bw[i]);
        sch_appendf(&s, &len, &cap,
                    "},\n  \"fp32_fma_gflops_1thread\": %.1f,\n  \"int8_dot_gops_1thread\": %.1f,\n  \"int8_dot_kind\": "
                    "\"%s\",\n",
                    fma, dot, dot_kind);
        char *gpu = rt_gpu_device_report(1);
        sch_appendf(&s, &len, &cap, "  \"gpu\": {%s}\n}\n", gpu);
        free(gpu);
    } else {
        sch_appendf(&s, &len, &cap, "fingerprint  %s\ncpu          %s\nisa          ", fp, model);
        for (size_t i = 0; i < sizeof isa_flags / sizeof isa_flags[0]; i++)
            if (rt_cpu_has(isa_flags[i])) sch_appendf(&s, &len, &cap, "%s ", isa_flags[i]);
        sch_appendf(&s, &len, &cap,
                    "\ncodegen      %s\ncores        %d\ncaches       L1d %ld KiB, L2 %ld KiB, L3 %ld KiB\ncompiler     %s\n",
                    cg_isa_name(rt_cpu_isa()), nc, kib[1], kib[2], kib[3], cc ? cc : "none (set KILN_CC)");
        sch_appendf(&s, &len, &cap, "read bandwidth (256 MiB):\n");
        for (int i = 0; i < ntc; i++)
            sch_appendf(&s, &len, &cap, "  %3d thread%s %8.2f GB/s\n", tcount[i], tcount[i] == 1 ? " " : "s", bw[i]);
        sch_appendf(&s, &len, &cap, "fp32 FMA     %.1f GFLOP/s per thread\nint8 dot     %.1f GOP/s per thread (%s)\n", fma,
                    dot, dot_kind);
        if (err[0]) sch_appendf(&s, &len, &cap, "note: compute probes not measured: %s\n", err);
        char *gpu = rt_gpu_device_report(0);
        sch_appendf(&s, &len, &cap, "%s", gpu);
        free(gpu);
    }
    free(fp);
    return s;
}

int kiln_device_peaks(int threads, double *bw_gbs, double *fma_gflops, double *dot_gops) {
    char kind[64], err[256] = "";
    double fma = 0, dot = 0;
    if (bw_gbs) *bw_gbs = measure_bw((size_t)256 << 20, threads > 0 ? threads : 1, 3);
    if (fma_gflops || dot_gops) {
        measure_compute(&fma, &dot, kind, sizeof kind, err, sizeof err);
        if (fma_gflops) *fma_gflops = fma * (threads > 0 ? threads : 1);
        if (dot_gops) *dot_gops = dot * (threads > 0 ? threads : 1);
    }
    return err[0] ? -1 : 0;
}
