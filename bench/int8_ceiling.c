/* int8_ceiling.c — the compute ceiling of an int8 contraction tile whose
 * weights carry a scale per 32 values (q8_0, q4_0, q5_0; q4_k adds a
 * minimum per 32), on this core, with every operand in L1.
 *
 * The tile is the shape kiln's packed int8 form uses for prefill
 * (emit_gemm_i8.c: 6 rows of A x 32 columns of B, 12 zmm accumulators):
 * per block of 32 values, 8 steps of 12 vpdpbusd, then per accumulator the
 * block's epilogue: int32 -> f32, the scale product d x sa, a fused
 * multiply-add (q4_k: and one more for its minimum). Three loops, each
 * timed best of 5 over 2 million blocks:
 *   1. vpdpbusd only (the epilogue replaced by one add: the int8 peak),
 *   2. with the per-block epilogue (q8_0, q4_0, q5_0),
 *   3. with the epilogue and q4_k's minimum term.
 * 2 x 64 operations per vpdpbusd. The ratio of 2 or 3 to 1 bounds what any
 * tile of this arithmetic can reach, before packing, quantising A and
 * memory: the roofline behind the prefill rows of bench/README.md.
 *
 *   cc -O3 -funroll-all-loops bench/int8_ceiling.c -o build/int8_ceiling && build/int8_ceiling
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* epilogue 0: none, 1: the per-block scale, 2: and q4_k's minimum */
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) static void tile(const uint8_t *B, const int8_t *A,
                                                                                  const float *sa, const float *d,
                                                                                  long nblk, int epilogue, float *out) {
    __m512 f[12];
    for (int i = 0; i < 12; i++) f[i] = _mm512_setzero_ps();
    for (long b = 0; b < nblk; b++) {
        const uint8_t *bb = B + (b & 15) * 1024;
        const int8_t *aa = A + (b & 15) * 192;
        __m512i s[12];
        for (int i = 0; i < 12; i++) s[i] = _mm512_setzero_si512();
        for (int k = 0; k < 8; k++) {
            const __m512i b0 = _mm512_load_si512(bb + 128 * k), b1 = _mm512_load_si512(bb + 128 * k + 64);
            for (int r = 0; r < 6; r++) {
                int32_t a4;
                __builtin_memcpy(&a4, aa + 32 * r + 4 * k, 4);
                const __m512i a = _mm512_set1_epi32(a4);
                s[2 * r] = _mm512_dpbusd_epi32(s[2 * r], b0, a);
                s[2 * r + 1] = _mm512_dpbusd_epi32(s[2 * r + 1], b1, a);
            }
        }
        if (epilogue == 0) {
            for (int i = 0; i < 12; i++) f[i] = _mm512_add_ps(f[i], _mm512_castsi512_ps(s[i]));
            continue;
        }
        const __m512 d0 = _mm512_load_ps(d + (b & 15) * 32), d1 = _mm512_load_ps(d + (b & 15) * 32 + 16);
        for (int r = 0; r < 6; r++) {
            const __m512 xs = _mm512_set1_ps(sa[(b & 15) * 6 + r]);
            f[2 * r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[2 * r]), _mm512_mul_ps(d0, xs), f[2 * r]);
            f[2 * r + 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[2 * r + 1]), _mm512_mul_ps(d1, xs), f[2 * r + 1]);
        }
        if (epilogue == 2)
            for (int r = 0; r < 6; r++) {
                const __m512 xm = _mm512_set1_ps(sa[(b & 15) * 6 + r] + 1.0f);
                f[2 * r] = _mm512_fnmadd_ps(d0, xm, f[2 * r]);
                f[2 * r + 1] = _mm512_fnmadd_ps(d1, xm, f[2 * r + 1]);
            }
    }
    for (int i = 0; i < 12; i++) _mm512_storeu_ps(out + 16 * i, f[i]);
}

int main(void) {
    static uint8_t B[16 * 1024] __attribute__((aligned(64)));
    static int8_t A[16 * 192];
    static float sa[96], d[512] __attribute__((aligned(64))), out[192];
    for (int i = 0; i < 16 * 1024; i++) B[i] = (uint8_t)(i * 7);
    for (int i = 0; i < 16 * 192; i++) A[i] = (int8_t)(i * 3);
    for (int i = 0; i < 96; i++) sa[i] = 1.0f;
    for (int i = 0; i < 512; i++) d[i] = 1.0f;
    const long n = 2000000;
    static const char *what[3] = {"vpdpbusd only (the int8 peak)", "with the per-32 scale epilogue (q8_0, q4_0, q5_0)",
                                  "with the scale and q4_k's minimum"};
    double gops[3];
    for (int e = 0; e < 3; e++) {
        double best = 1e30;
        for (int r = 0; r < 5; r++) {
            double t = now_s();
            tile(B, A, sa, d, n, e, out);
            t = now_s() - t;
            if (t < best) best = t;
        }
        gops[e] = (double)n * 96.0 * 128.0 / best / 1e9;
        printf("%-52s %7.1f GOP/s  %5.1f%% of the first\n", what[e], gops[e], 100.0 * gops[e] / gops[0]);
    }
    return out[0] == 12345.0f; /* keeps the results live */
}
