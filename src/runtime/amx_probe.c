/* amx_probe.c — the AMX tile units' peaks for `kiln device` (issue 30, item
 * 5): one thread's int8 (tdpbssd) and bf16 (tdpbf16ps) throughput.
 *
 * What it does, by the ISA (Intel SDM vol. 1 ch. 18, vol. 2 TDPBSSD,
 * TDPBF16PS, LDTILECFG):
 *  - cpuid leaf 7, subleaf 0, EDX: bit 24 AMX-TILE, bit 25 AMX-INT8, bit 22
 *    AMX-BF16. No bit, no measurement: the report says "none".
 *  - Linux keeps the tile data state (XTILEDATA, xfeature 18) off until a
 *    process asks for it: arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023, 18), as
 *    the AMX kernels do (emit_gemm_amx.c). Refused: no measurement, and why.
 *  - ldtilecfg reads a 64-byte configuration: byte 0 palette (1), byte 1
 *    start_row (0), bytes 16..47 colsb[16] (uint16), bytes 48..63 rows[16].
 *    Here tiles 0..7 are 16 rows x 64 bytes; the rest stay 0 (unused). The
 *    configuration is a 64-byte aligned object handed to the asm as an "m"
 *    operand of all 64 bytes, so the compiler must store every byte of it
 *    first (the intrinsic names 8 bytes, and a compiler may drop the rest).
 *  - the loop: C tiles 0..5 accumulate A (tile 6) x B (tile 7); six
 *    independent dot products per iteration, more than a tile multiply's
 *    latency over its issue interval, so the unit never waits on a result.
 *    One 16x16 (x 64 bytes) tdpbssd is 16*16*64 multiply-adds (32768 int8
 *    operations); one tdpbf16ps is 16*16*32 (16384 bf16 FLOPs).
 *  - tilerelease at the end, so the thread's tile state returns to its
 *    initial (cheap to save) form.
 * Every tile instruction is inline asm (AT&T operand order: sources first,
 * destination last) in functions built with target("amx-tile,amx-int8" /
 * "amx-bf16"), so the rest of kiln needs no AMX flags and runs anywhere;
 * on a compiler without AMX (gcc < 11, clang < 12) or a CPU that is not
 * x86-64 Linux the probe is compiled out and reports why.
 *
 * Not run on AMX hardware by its author (the development machine is an AMD
 * EPYC Zen 4); test_device.c checks that AMX is reported exactly when cpuid
 * says so and that the fields are there either way.
 *
 * Invariants: no tile instruction runs before cpuid and the kernel's
 * permission both say yes; the tile configuration is released before the
 * probe returns.
 */
#define _DEFAULT_SOURCE /* syscall */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base.h"
#include "probe.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define AP_CPUID 1
#else
#define AP_CPUID 0
#endif

#if AP_CPUID && defined(__linux__) &&                                                                              \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#include <sys/syscall.h>
#include <unistd.h>
#define AP_BUILT 1
#else
#define AP_BUILT 0
#endif

rt_amx_caps rt_amx_cpuid(void) {
    rt_amx_caps c = {0, 0, 0};
#if AP_CPUID
    unsigned a = 0, b = 0, cx = 0, d = 0;
    if (__get_cpuid_max(0, NULL) >= 7 && __get_cpuid_count(7, 0, &a, &b, &cx, &d)) {
        c.bf16 = (int)((d >> 22) & 1);
        c.tile = (int)((d >> 24) & 1);
        c.int8 = (int)((d >> 25) & 1);
    }
#endif
    return c;
}

#if AP_BUILT

/* the 64-byte tile configuration (palette 1) */
typedef struct ap_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} ap_cfg;
_Static_assert(sizeof(ap_cfg) == 64, "the tile configuration is 64 bytes");

/* 16 rows x 64 bytes, the tiles' source and sink */
typedef struct ap_block {
    _Alignas(64) uint8_t b[16 * 64];
} ap_block;

__attribute__((target("amx-tile"), noinline)) static void ap_configure(void) {
    _Alignas(64) ap_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg) : "memory");
}

__attribute__((target("amx-tile"), noinline)) static void ap_release(void) {
    __asm__ volatile("tilerelease" ::: "memory");
}

/* A into tile 6, B into tile 7, tiles 0..5 zeroed */
__attribute__((target("amx-tile"), noinline)) static void ap_load(const ap_block *a, const ap_block *b) {
    const long stride = 64;
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm6" ::"r"(a->b), "r"(stride), "m"(*a) : "memory");
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm7" ::"r"(b->b), "r"(stride), "m"(*b) : "memory");
    __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\t"
                     "tilezero %%tmm3\n\ttilezero %%tmm4\n\ttilezero %%tmm5" ::
                         : "memory");
}

/* tile 0 out to c: keeps the results observable */
__attribute__((target("amx-tile"), noinline)) static void ap_store0(ap_block *c) {
    const long stride = 64;
    __asm__ volatile("tilestored %%tmm0, (%1,%2,1)" : "=m"(*c) : "r"(c->b), "r"(stride) : "memory");
}

__attribute__((target("amx-tile,amx-int8"), noinline)) static void ap_int8_loop(int64_t iters) {
    for (int64_t i = 0; i < iters; i++)
        __asm__ volatile("tdpbssd %%tmm7, %%tmm6, %%tmm0\n\t"
                         "tdpbssd %%tmm7, %%tmm6, %%tmm1\n\t"
                         "tdpbssd %%tmm7, %%tmm6, %%tmm2\n\t"
                         "tdpbssd %%tmm7, %%tmm6, %%tmm3\n\t"
                         "tdpbssd %%tmm7, %%tmm6, %%tmm4\n\t"
                         "tdpbssd %%tmm7, %%tmm6, %%tmm5" ::
                             : "memory");
}

__attribute__((target("amx-tile,amx-bf16"), noinline)) static void ap_bf16_loop(int64_t iters) {
    for (int64_t i = 0; i < iters; i++)
        __asm__ volatile("tdpbf16ps %%tmm7, %%tmm6, %%tmm0\n\t"
                         "tdpbf16ps %%tmm7, %%tmm6, %%tmm1\n\t"
                         "tdpbf16ps %%tmm7, %%tmm6, %%tmm2\n\t"
                         "tdpbf16ps %%tmm7, %%tmm6, %%tmm3\n\t"
                         "tdpbf16ps %%tmm7, %%tmm6, %%tmm4\n\t"
                         "tdpbf16ps %%tmm7, %%tmm6, %%tmm5" ::
                             : "memory");
}

/* operations per second of `loop` (6 tile products of ops_each per
 * iteration): a warm-up (the unit wakes up), then the best of 5 runs */
static double ap_time(void (*loop)(int64_t), const ap_block *a, const ap_block *b, double ops_each, ap_block *sink) {
    ap_configure();
    ap_load(a, b);
    loop(20000);
    double best = 1e30;
    const int64_t iters = 100000;
    for (int r = 0; r < 5; r++) {
        double t0 = kiln_now_s();
        loop(iters);
        double dt = kiln_now_s() - t0;
        if (dt < best) best = dt;
    }
    ap_store0(sink);
    ap_release();
    return best > 0 && best < 1e30 ? (double)iters * 6 * ops_each / best : 0;
}

#endif

rt_amx_peaks rt_amx_measure(void) {
    rt_amx_peaks p;
    memset(&p, 0, sizeof p);
    rt_amx_caps c = rt_amx_cpuid();
    if (!c.tile || (!c.int8 && !c.bf16)) {
        snprintf(p.why, sizeof p.why, "none: no AMX on this CPU (cpuid leaf 7 EDX amx-tile %d, amx-int8 %d, amx-bf16 %d)",
                 c.tile, c.int8, c.bf16);
        return p;
    }
#if AP_BUILT
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0) {
        snprintf(p.why, sizeof p.why, "none: the kernel refused the AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM: %s)",
                 strerror(errno));
        return p;
    }
    static ap_block a, b, sink;
    for (int i = 0; i < 16 * 64; i++) {
        a.b[i] = (uint8_t)(i % 7 + 1);
        b.b[i] = (uint8_t)(i % 5 + 1);
    }
    if (c.int8) p.int8_gops = ap_time(ap_int8_loop, &a, &b, 2.0 * 16 * 16 * 64, &sink) / 1e9;
    /* bf16 sources: 1.0 (0x3f80) and 2^-8 (0x3b80), so the sums stay finite */
    for (int i = 0; i < 16 * 64; i += 2) {
        a.b[i] = 0x80;
        a.b[i + 1] = 0x3f;
        b.b[i] = 0x80;
        b.b[i + 1] = 0x3b;
    }
    if (c.bf16) p.bf16_gflops = ap_time(ap_bf16_loop, &a, &b, 2.0 * 16 * 16 * 32, &sink) / 1e9;
    snprintf(p.why, sizeof p.why, "tdpbssd%s, 16x16x64 int8 tiles, 6 accumulators, 1 thread",
             c.bf16 ? " and tdpbf16ps" : "");
    if (!c.int8)
        snprintf(p.why, sizeof p.why, "tdpbf16ps, 16x16x32 bf16 tiles, 6 accumulators, 1 thread (no amx-int8)");
#else
    snprintf(p.why, sizeof p.why, "none: this kiln was built without the AMX probe (needs gcc >= 11 or clang >= 12 "
                                  "on x86-64 Linux)");
#endif
    return p;
}
