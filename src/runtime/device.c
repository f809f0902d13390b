/* device.c — the CPU's fingerprint and measured peaks (`kiln device`).
 *
 * Fingerprint: CPU model, the ISA flags kiln cares about, online cores, cache
 * sizes (from /sys), the C compiler and its version, kiln's IR version. It is
 * the key of the tuning DB, so it lists only what changes generated code or
 * its speed.
 *
 * Peaks are measured, not looked up:
 *  - read bandwidth at 1, 2, 4, ..., N threads, from DRAM (a buffer of at
 *    least 4x the last-level cache) and from cache (half of it), with the
 *    widest loads the CPU has, in 2 MiB pages like the weights (readbw.c);
 *  - FP32 FMA and int8 dot-product throughput of one thread: C compiled
 *    through the same path as kernels (so with the ISA flags kernels get),
 *    GCC/Clang vector extensions for FMA and VNNI intrinsics when the CPU
 *    has them (else a plain int8 multiply-accumulate loop); the compiled
 *    probe is cached like a kernel, keyed by its text (a version line);
 *  - the AMX tiles' int8 and bf16 throughput of one thread, where cpuid
 *    and the kernel allow them (amx_probe.c), else "none" and why;
 *  - the int8 peak: the fastest of the int8 units (AMX tiles, else the dot
 *    product), named, for prefill rooflines (bench/llm.sh).
 * Nothing is cached between runs: every `kiln device` measures afresh.
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
#include "probe.h"


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

/* the compute probes; compiled through the kernel cache, whose key is this
 * text: the version line makes a changed probe a new object */
static const char *probe_src =
    "/* kiln device compute probes, version 2 */\n"
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
    const rt_backend *be = &rt_cpu_backend;
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

/* the read-bandwidth measurements of a report: DRAM and cache at each
 * thread count, from one buffer (the cache figure reads its first part) */
typedef struct bw_table {
    int n, threads[16];
    double dram[16], cache[16];
    const char *dram_loop[16], *cache_loop[16]; /* the faster loop of each */
    size_t dram_bytes, cache_bytes;
    const char *loop;
} bw_table;

static void measure_bw_table(bw_table *bt, int nc) {
    memset(bt, 0, sizeof *bt);
    for (int i = 0; i < 16; i++) bt->dram_loop[i] = bt->cache_loop[i] = "";
    /* 1, 2, 4, ... threads, then all cores */
    for (int t = 1; t < nc && bt->n < 15; t *= 2) bt->threads[bt->n++] = t;
    bt->threads[bt->n++] = nc;
    rt_read_sizes(&bt->dram_bytes, &bt->cache_bytes);
    bt->loop = rt_read_loop();
    rt_read_buf *b = rt_read_buf_new(bt->dram_bytes);
    if (!b) return; /* out of memory: the figures stay 0 */
    for (int i = 0; i < bt->n; i++) {
        bt->dram[i] = rt_read_bw(b, bt->dram_bytes, bt->threads[i], 5, 0.02, &bt->dram_loop[i]);
        bt->cache[i] = rt_read_bw(b, bt->cache_bytes, bt->threads[i], 5, 0.02, &bt->cache_loop[i]);
    }
    rt_read_buf_free(b);
}

static void json_num(char **s, size_t *len, size_t *cap, double v, const char *fmt) {
    if (v > 0) sch_appendf(s, len, cap, fmt, v);
    else sch_appendf(s, len, cap, "null");
}

char *kiln_device_report(int json) {
    char model[256];
    cpu_model(model, sizeof model);
    long kib[4];
    caches(kib);
    int nc = cores();
    const char *cc = rt_cc_identity();
    char *fp = rt_cpu_fingerprint();
    bw_table bt;
    measure_bw_table(&bt, nc);
    double fma = 0, dot = 0;
    char dot_kind[96], err[2048] = "";
    measure_compute(&fma, &dot, dot_kind, sizeof dot_kind, err, sizeof err);
    rt_amx_peaks amx = rt_amx_measure();
    rt_bf16_dot bf = rt_bf16_dot_measure();
    /* the fastest int8 unit: AMX tiles where they were measured, else the dot product */
    double i8 = amx.int8_gops > dot ? amx.int8_gops : dot;
    const char *i8_kind = amx.int8_gops > dot ? "amx tdpbssd" : dot_kind;
    const size_t mib = (size_t)1 << 20;
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
        for (int i = 0; i < bt.n; i++)
            sch_appendf(&s, &len, &cap, "%s\"%d\": %.2f", i ? ", " : "", bt.threads[i], bt.dram[i]);
        sch_appendf(&s, &len, &cap, "},\n  \"read_bandwidth_cache_gbs\": {");
        for (int i = 0; i < bt.n; i++)
            sch_appendf(&s, &len, &cap, "%s\"%d\": %.2f", i ? ", " : "", bt.threads[i], bt.cache[i]);
        sch_appendf(&s, &len, &cap, "},\n  \"read_loop_best\": {\"dram\": {");
        for (int i = 0; i < bt.n; i++)
            sch_appendf(&s, &len, &cap, "%s\"%d\": \"%s\"", i ? ", " : "", bt.threads[i], bt.dram_loop[i]);
        sch_appendf(&s, &len, &cap, "}, \"cache\": {");
        for (int i = 0; i < bt.n; i++)
            sch_appendf(&s, &len, &cap, "%s\"%d\": \"%s\"", i ? ", " : "", bt.threads[i], bt.cache_loop[i]);
        sch_appendf(&s, &len, &cap,
                    "}},\n  \"read_buffer_bytes\": {\"dram\": %zu, \"cache\": %zu},\n  \"read_loop\": \"%s\",\n"
                    "  \"fp32_fma_gflops_1thread\": %.1f,\n  \"int8_dot_gops_1thread\": %.1f,\n  \"int8_dot_kind\": "
                    "\"%s\",\n  \"amx_int8_gops_1thread\": ",
                    bt.dram_bytes, bt.cache_bytes, bt.loop, fma, dot, dot_kind);
        json_num(&s, &len, &cap, amx.int8_gops, "%.1f");
        sch_appendf(&s, &len, &cap, ",\n  \"amx_bf16_gflops_1thread\": ");
        json_num(&s, &len, &cap, amx.bf16_gflops, "%.1f");
        sch_appendf(&s, &len, &cap,
                    ",\n  \"amx\": \"%s\",\n  \"int8_peak_gops_1thread\": %.1f,\n  \"int8_peak_kind\": \"%s\",\n",
                    amx.why, i8, i8_kind);
        sch_appendf(&s, &len, &cap, "  \"bf16_dot_gflops_1thread\": ");
        json_num(&s, &len, &cap, bf.dot_gflops, "%.1f");
        sch_appendf(&s, &len, &cap, ",\n  \"bf16_dot_fma_slots\": %d,\n", bf.slots);
        char *gpu = rt_backend_devices_report(1);
        sch_appendf(&s, &len, &cap, "  \"gpu\": {%s}\n}\n", gpu);
        free(gpu);
    } else {
        sch_appendf(&s, &len, &cap, "fingerprint  %s\ncpu          %s\nisa          ", fp, model);
        for (size_t i = 0; i < sizeof isa_flags / sizeof isa_flags[0]; i++)
            if (rt_cpu_has(isa_flags[i])) sch_appendf(&s, &len, &cap, "%s ", isa_flags[i]);
        sch_appendf(&s, &len, &cap,
                    "\ncodegen      %s\ncores        %d\ncaches       L1d %ld KiB, L2 %ld KiB, L3 %ld KiB\ncompiler     %s\n",
                    cg_isa_name(rt_cpu_isa()), nc, kib[1], kib[2], kib[3], cc ? cc : "none (set KILN_CC)");
        sch_appendf(&s, &len, &cap,
                    "read bandwidth (%s; 2 MiB pages, each thread its own part, best of 5):\n"
                    "  threads        DRAM (%zu MiB)        cache (%zu MiB)\n",
                    bt.loop, bt.dram_bytes / mib, bt.cache_bytes / mib);
        for (int i = 0; i < bt.n; i++)
            sch_appendf(&s, &len, &cap, "  %7d %9.2f GB/s %-7s %9.2f GB/s %s\n", bt.threads[i], bt.dram[i],
                        bt.dram_loop[i], bt.cache[i], bt.cache_loop[i]);
        if (bt.dram[0] <= 0) sch_appendf(&s, &len, &cap, "note: read bandwidth not measured (out of memory)\n");
        sch_appendf(&s, &len, &cap, "fp32 FMA     %.1f GFLOP/s per thread\nint8 dot     %.1f GOP/s per thread (%s)\n", fma,
                    dot, dot_kind);
        if (amx.int8_gops > 0 || amx.bf16_gflops > 0)
            sch_appendf(&s, &len, &cap,
                        "amx int8     %.1f GOP/s per thread (tdpbssd)\namx bf16     %.1f GFLOP/s per thread "
                        "(tdpbf16ps)\n",
                        amx.int8_gops, amx.bf16_gflops);
        else
            sch_appendf(&s, &len, &cap, "amx          %s\n", amx.why);
        sch_appendf(&s, &len, &cap, "int8 peak    %.1f GOP/s per thread (%s)\n", i8, i8_kind);
        if (bf.dot_gflops > 0)
            sch_appendf(&s, &len, &cap,
                        "bf16 dot     %.1f GFLOP/s per thread (vdpbf16ps; %.1f FMAs issue in its time, the cost model "
                        "charges it %d FMA slot%s)\n",
                        bf.dot_gflops, bf.ratio, bf.slots, bf.slots == 1 ? "" : "s");
        if (err[0]) sch_appendf(&s, &len, &cap, "note: compute probes not measured: %s\n", err);
        char *gpu = rt_backend_devices_report(0);
        sch_appendf(&s, &len, &cap, "%s", gpu);
        free(gpu);
    }
    free(fp);
    return s;
}

int kiln_device_peaks(int threads, double *bw_gbs, double *fma_gflops, double *dot_gops) {
    char kind[96], err[256] = "";
    double fma = 0, dot = 0;
    int t = threads > 0 ? threads : 1;
    if (bw_gbs) {
        size_t dram = 0;
        rt_read_sizes(&dram, NULL);
        rt_read_buf *b = rt_read_buf_new(dram);
        *bw_gbs = b ? rt_read_bw(b, dram, t, 3, 0.02, NULL) : 0;
        rt_read_buf_free(b);
    }
    if (fma_gflops || dot_gops) {
        measure_compute(&fma, &dot, kind, sizeof kind, err, sizeof err);
        if (fma_gflops) *fma_gflops = fma * t;
        if (dot_gops) *dot_gops = dot * t;
    }
    return err[0] ? -1 : 0;
}
