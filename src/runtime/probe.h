/* probe.h — the measured peaks that `kiln device` reports and that are not
 * compiled through the kernel path: the read-bandwidth probe (readbw.c) and
 * the AMX tile probe (amx_probe.c). device.c puts them in its report; the
 * tests call the same functions, so what they check is what kiln reports.
 *
 * Invariants: every probe returns 0 (never garbage) when it cannot measure
 * and then says why in its text; none changes process state a kernel relies
 * on, except that the AMX probe asks Linux for the tile data permission
 * (arch_prctl ARCH_REQ_XCOMP_PERM), which the AMX kernels ask for anyway.
 */
#ifndef KILN_RUNTIME_PROBE_H
#define KILN_RUNTIME_PROBE_H

#include <stddef.h>

/* ---- read bandwidth (readbw.c) ------------------------------------------ */

/* the buffer sizes of the two measurements: dram = at least 4x the last-level
 * cache (and at least 256 MiB, at most a quarter of RAM and 4 GiB), cache =
 * half the last-level cache (so that it stays there with every thread's part) */
void rt_read_sizes(size_t *dram_bytes, size_t *cache_bytes);

/* a buffer as the runtime keeps repacked weights: an rt_arena chunk in 2 MiB
 * pages (repack.h), written once so that every page is backed by memory */
typedef struct rt_read_buf rt_read_buf;
rt_read_buf *rt_read_buf_new(size_t bytes); /* NULL when out of memory */
void rt_read_buf_free(rt_read_buf *b);
void *rt_read_buf_data(rt_read_buf *b);

/* GB/s reading the first `bytes` of b (at most the buffer) with the widest
 * read loops this CPU has (AVX-512 and AVX2 where both exist: the faster
 * counts), each of `threads` threads of a pool over its own contiguous part:
 * per loop one warm-up run that also sets how many sweeps of the part a timed
 * run makes (at least min_seconds), then the best of `passes` timed runs,
 * the loops taking turns. *loop (if not NULL) = the winner's short name
 * ("avx512", "avx2", "16-byte"). 0 on a bad argument. */
double rt_read_bw(rt_read_buf *b, size_t bytes, int threads, int passes, double min_seconds, const char **loop);

/* the loops rt_read_bw runs on this CPU, in words */
const char *rt_read_loop(void);

/* ---- AMX tiles (amx_probe.c) --------------------------------------------- */

/* cpuid leaf 7 (subleaf 0) EDX: bit 22 amx-bf16, 24 amx-tile, 25 amx-int8;
 * all 0 on a CPU or a build that is not x86-64 */
typedef struct rt_amx_caps {
    int tile, int8, bf16;
} rt_amx_caps;
rt_amx_caps rt_amx_cpuid(void);

/* one thread's tile peaks: int8 (tdpbssd) GOP/s and bf16 (tdpbf16ps)
 * GFLOP/s, counting a multiply-add as 2 operations; each 0 when not
 * measured, and then why[] says why ("no AMX (cpuid)", "the kernel refused
 * the tile data permission", ...) */
typedef struct rt_amx_peaks {
    double int8_gops, bf16_gflops;
    char why[160];
} rt_amx_peaks;
rt_amx_peaks rt_amx_measure(void);

/* ---- AVX-512 bf16 dot products (bf16_probe.c) ----------------------------- */

/* one thread's vdpbf16ps against its f32 FMA, measured once per process:
 * fma_gflops and dot_gflops (a multiply-add counted as 2 operations; 0 when
 * not measured: no avx512_bf16 here or in the compiler), ratio = FMA
 * instructions per vdpbf16ps issued, and slots = ratio rounded to a power
 * of two (1 when not measured): what the cost model charges a vdpbf16ps
 * in FMA issue slots */
typedef struct rt_bf16_dot {
    double fma_gflops, dot_gflops, ratio;
    int slots;
} rt_bf16_dot;
rt_bf16_dot rt_bf16_dot_measure(void);

/* a measured ratio rounded to 1, 2, 4 or 8 (the nearest on a log scale) */
int rt_bf16_slots_of(double ratio);

#endif
