/* bf16_probe.c — what one AVX-512 bf16 dot product (vdpbf16ps) costs on this
 * CPU, in f32 FMA issue slots, for the cost model (cost.c prices the packed
 * form's bf16 arithmetic with it: sch_machine.bf16_dot_slots) and for
 * `kiln device`.
 *
 * Why measured: the instruction does two multiply-adds per f32 lane, and
 * where it issues at the FMA rate (AMD Zen 4: 229 against 117 GFLOP/s per
 * thread) the bf16 form does a product in half the f32 form's time. On an
 * Intel Xeon (family 6 model 207, the VM showing no AMX) it issues at a
 * quarter of the FMA rate (85 against 175 GFLOP/s per thread, 12
 * independent chains of each), so the bf16 form is the slower one, and a
 * cost model that assumed Zen 4's rate put it first for gemma3-270m's
 * attention scores (1.08 ms where the f32 packed form takes 0.59 ms at a
 * 256-row prefill, 1 thread): every first run without a record there ran
 * the slow form.
 *
 * The probe: 12 independent accumulator chains of each instruction (more
 * than either's latency over its issue interval), 200,000 iterations, the
 * two loops taking turns three times, the best of each kept (about 3 ms in
 * all). The ratio is rounded to a power of two (1, 2, 4 or 8), so that the
 * cost model's first choices, which are compiled into the program's source
 * and name its cached object, do not move between two runs on one machine.
 *
 * Invariants: measured at most once per process (pthread_once); 1 (Zen 4's
 * rate, the model's old assumption) where the CPU or the compiler has no
 * avx512_bf16, and no bf16 instruction runs unless cpuinfo lists it.
 */
#include <pthread.h>
#include <stdint.h>

#include "backend.h"
#include "base.h"
#include "probe.h"

#if defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 9) ||                                       \
                            (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))
#include <immintrin.h>
#define BP_BUILT 1
#else
#define BP_BUILT 0
#endif

#define BP_ITERS 200000

#if BP_BUILT
/* name(iters): 12 independent chains of STEP(acc) in a function built for
 * isa; returns the instructions issued per second */
#define BP_LOOP(name, isa, setup, STEP)                                                                    \
    __attribute__((target(isa), noinline)) static double name(int64_t iters) {                             \
        __m512 a0 = _mm512_set1_ps(0.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0,       \
               a8 = a0, a9 = a0, a10 = a0, a11 = a0;                                                           \
        setup;                                                                                                 \
        double t0 = kiln_now_s();                                                                              \
        for (int64_t i = 0; i < iters; i++) {                                                                  \
            STEP(a0), STEP(a1), STEP(a2), STEP(a3), STEP(a4), STEP(a5);                                        \
            STEP(a6), STEP(a7), STEP(a8), STEP(a9), STEP(a10), STEP(a11);                                      \
            __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));                 \
            __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));               \
        }                                                                                                      \
        double dt = kiln_now_s() - t0;                                                                         \
        return dt > 0 ? 12.0 * (double)iters / dt : 0;                                                         \
    }

#define BP_FMA(a) (a = _mm512_fmadd_ps(a, x, y))
BP_LOOP(bp_fma, "avx512f", const __m512 x = _mm512_set1_ps(0.5f); const __m512 y = _mm512_set1_ps(0.25f), BP_FMA)

/* the inputs 1.0 in bf16: the sums stay finite */
#define BP_DOT(a) (a = _mm512_dpbf16_ps(a, x, x))
BP_LOOP(bp_dot, "avx512f,avx512bf16", const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), BP_DOT)
#endif

static rt_bf16_dot measured;
static pthread_once_t measured_once = PTHREAD_ONCE_INIT;

static void measure(void) {
    measured.slots = 1;
#if BP_BUILT
    if (!rt_cpu_has("avx512f") || !rt_cpu_has("avx512_bf16")) return;
    double fma = 0, dot = 0;
    for (int r = 0; r < 3; r++) {
        double f = bp_fma(BP_ITERS), d = bp_dot(BP_ITERS);
        if (f > fma) fma = f;
        if (d > dot) dot = d;
    }
    if (!(fma > 0 && dot > 0)) return;
    measured.fma_gflops = fma * 32.0 / 1e9; /* 16 lanes, a multiply-add each */
    measured.dot_gflops = dot * 64.0 / 1e9; /* 16 lanes, two each */
    measured.ratio = fma / dot;
    measured.slots = rt_bf16_slots_of(measured.ratio);
#endif
}

int rt_bf16_slots_of(double ratio) {
    int slots = 1;
    /* the nearest power of two on a log scale: 1.41 and 2.83 are the cuts
     * between 1, 2 and 4 */
    while (slots < 8 && ratio > 1.41421356 * slots) slots *= 2;
    return slots;
}

rt_bf16_dot rt_bf16_dot_measure(void) {
    pthread_once(&measured_once, measure);
    return measured;
}
