/* emit_gemm_bf16.c — the packed contraction form with bf16 arithmetic on
 * AVX-512 (SCH_FORM_PACKED + SCH_ARITH_BF16): prompt-sized products of f32
 * activations A (M x K) with f32 B that the program computed (attention's
 * keys and values), on vdpbf16ps — two multiply-adds per f32 lane and
 * instruction, twice the f32 FMA rate (Zen 4: 229 vs 117 GFLOP/s per thread
 * measured). An approximation like the AMX bf16 form (emit_gemm_amx_bf16.c),
 * for CPUs with avx512_bf16 but no AMX; flagged "(approximate)" in the
 * kernel text; the search holds it to the approximate tolerance (tune.c).
 *
 * Per call of the kernel (one thread's run of work items):
 *   A: every row of the batch point rounded to bf16 once (kgb_arow), K
 *      padded to even with a zero, so word kp of a row is the pair
 *      (a[2kp], a[2kp+1]); and 1 + the index of each row's last nonzero
 *      word, kept after the rows (gb_a[M * kpa + 16 + row]);
 * Per work item (B rows n0..n1) and K block [k0, k0 + kl) (kc even):
 *   pack: B's columns into strips of nr, word (kp, j) = the pair
 *         (B(j, k0+2kp), B(j, k0+2kp+1)) in bf16, laid out [kp][nr]
 *         (the vdpbf16ps operand order; a k past kl is zero): B contiguous
 *         along K as 16 columns x 32 k rounded by one vcvtne2ps2bf16 each
 *         and transposed as 16 x 16 dwords (emit_gemm.c's ktr16); B strided
 *         along K (contiguous along n) as two rounded rows interleaved;
 *   kgb_<mr>x<nr>_p<pf>: acc[mr][nr/16] zmm += dpbf16(broadcast pair of
 *         A row, strip row) per kp, then stored (first K block) or added;
 *         kp stops at the last nonzero word of the tile's rows. Causal
 *         attention's probabilities end in zeros past each query's position,
 *         so its value product skips about half of its pairs. The skipped
 *         products are 0 x b: the result is the same unless b is inf or NaN
 *         (IEEE's 0 x inf = NaN is not formed there). Where the consumers
 *         multiply the output by zero past a causal bound (n >= m + off,
 *         sch_contract.n_lim_off, demand.c), a strip past the bound of all
 *         the tile's rows is stored as 0 with no pairs: attention's scores.
 *
 * Error: each product has relative error <= 2^-7 (two bf16 roundings, round
 * to nearest even), summed in f32: |y - y_exact| <= 2^-7 sum |a b| + f32
 * noise, the AMX bf16 form's bound.
 *
 * Invariants: strips 64-byte aligned; nr a multiple of 16 and
 * mr*(nr/16) + nr/16 + 1 <= 32 zmm; kc even (a multiple of 32); nothing is
 * written outside [0, M) x [n0, n1); buffers are freed before the kernel
 * returns (allocation failure: it returns 1).
 */
#include <stdio.h>
#include <string.h>

#include "contract.h"
#include "family.h"
#include "emit_gemm.h"
#include "emit_gemm_bf16.h"
#include "emit_gemm_i8.h"

#define OUT(...) sch_appendf(s, len, cap, __VA_ARGS__)

#define GB_MAX_MR SCH_PACKED_MAX_MR

/* helpers, once per translation unit: scalar round-to-nearest-even to bf16
 * (NaN stays NaN), A's row rounding, and the two strip packers */
static const char bf16_helpers[] =
    "#ifndef KILN_GB16\n#define KILN_GB16\n"
    "#define KBF16 __attribute__((target(\"avx512bf16\")))\n"
    "static inline uint32_t kgb_rne(float f) { uint32_t u; memcpy(&u, &f, 4);\n"
    "  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;\n"
    "  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16; }\n"
    /* a row of K floats -> (K + 1) / 2 pair words; returns 1 + the index of
     * its last nonzero word (0 when every word is zero) */
    "static KBF16 __attribute__((unused)) int64_t kgb_arow(const float *a, int64_t K, uint32_t *o) {\n"
    "  int64_t k = 0, nz = 0;\n"
    "  for (; k + 32 <= K; k += 32) {\n"
    "    const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(a + k + 16), _mm512_loadu_ps(a + k));\n"
    "    const unsigned m = (unsigned)_mm512_test_epi32_mask(v, v);\n"
    "    _mm512_storeu_si512((void *)(o + k / 2), v);\n"
    "    if (m) nz = k / 2 + 32 - __builtin_clz(m);\n"
    "  }\n"
    "  for (; k < K; k += 2) {\n"
    "    o[k / 2] = kgb_rne(a[k]) | (k + 1 < K ? kgb_rne(a[k + 1]) << 16 : 0u);\n"
    "    if (o[k / 2]) nz = k / 2 + 1;\n"
    "  }\n"
    "  return nz;\n"
    "}\n"
    /* B contiguous along K: columns at element offsets wo[0..nr), K block [k0, k0 + kl) */
    "static KBF16 __attribute__((unused)) void kgb_pack(const float *W, const int64_t *wo, int nr, int64_t k0, int64_t kl,"
    " uint32_t *restrict bp) {\n"
    "  uint32_t tmp[16 * 16] __attribute__((aligned(64)));\n"
    "  const int64_t kf = kl / 32 * 32;\n"
    "  for (int jb = 0; jb < nr; jb += 16)\n"
    "    for (int64_t k = 0; k < kf; k += 32) {\n"
    "      for (int jj = 0; jj < 16; jj++) {\n"
    "        const float *r = W + wo[jb + jj] + k0 + k;\n"
    "        _mm512_store_si512((void *)(tmp + 16 * jj), (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(r + 16), _mm512_loadu_ps(r)));\n"
    "      }\n"
    "      ktr16((const float *)tmp, 16, (float *)(bp + k / 2 * nr + jb), nr);\n"
    "    }\n"
    "  for (int j = 0; j < nr; j++)\n"
    "    for (int64_t k = kf; k < kl; k += 2) {\n"
    "      const float *r = W + wo[j] + k0;\n"
    "      bp[k / 2 * nr + j] = kgb_rne(r[k]) | (k + 1 < kl ? kgb_rne(r[k + 1]) << 16 : 0u);\n"
    "    }\n"
    "}\n"
    /* B strided along K (element (k, n) at bo + k * ks + n): cols valid columns */
    "static KBF16 __attribute__((unused)) void kgb_pack_strided(const float *W, int64_t bo, int64_t ks, int cols, int nr,"
    " int64_t k0, int64_t kl, uint32_t *restrict bp) {\n"
    "  for (int j = 0; j < nr; j += 16) {\n"
    "    const __mmask16 q = (__mmask16)(cols >= j + 16 ? 0xffffu : cols <= j ? 0u : (1u << (unsigned)(cols - j)) - 1u);\n"
    "    const float *src = W + bo + k0 * ks + j;\n"
    "    for (int64_t k = 0; k < kl; k += 2) {\n"
    "      const __m512 r0 = _mm512_maskz_loadu_ps(q, src + k * ks);\n"
    "      const __m512 r1 = k + 1 < kl ? _mm512_maskz_loadu_ps(q, src + (k + 1) * ks) : _mm512_setzero_ps();\n"
    "      const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(r0));\n"
    "      const __m512i hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(r1));\n"
    "      _mm512_store_si512((void *)(bp + k / 2 * nr + j), _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));\n"
    "    }\n"
    "  }\n"
    "}\n"
    "#endif\n\n";

/* kgb_<mr>x<nr>_p<pf>(A rows as pair words, strip, pairs, out rows, valid
 * rows, valid columns, add to out instead of storing) */
static void emit_micro(int mr, int nr, int pf, char **s, size_t *len, size_t *cap) {
    int nv = nr / 16;
    OUT("static KBF16 __attribute__((unused, noinline)) void kgb_%dx%d_p%d(const uint32_t *const *a, const uint32_t *restrict bp,"
        " int64_t kp, float *const *c, int rows, int cols, int acc) {\n",
        mr, nr, pf);
    for (int i = 0; i < mr; i++) {
        OUT("  const uint32_t *restrict a%d = a[%d];\n", i, i);
        for (int j = 0; j < nv; j++) OUT("  __m512 c%d_%d = _mm512_setzero_ps();\n", i, j);
    }
    OUT("  for (int64_t k = 0; k < kp; k++) {\n");
    OUT("    const uint32_t *b = bp + k * %d;\n", nr);
    if (pf > 0) OUT("    _mm_prefetch((const char *)(b + %d), _MM_HINT_T0);\n", pf * nr);
    for (int j = 0; j < nv; j++) OUT("    const __m512bh b%d = (__m512bh)_mm512_load_si512((const void *)(b + %d));\n", j, 16 * j);
    for (int i = 0; i < mr; i++) {
        OUT("    { const __m512bh x = (__m512bh)_mm512_set1_epi32((int)a%d[k]);", i);
        for (int j = 0; j < nv; j++) OUT(" c%d_%d = _mm512_dpbf16_ps(c%d_%d, x, b%d);", i, j, i, j, j);
        OUT(" }\n");
    }
    OUT("  }\n");
    cg_emit_tile_store(mr, nv, "c", s, len, cap);
}

void cg_emit_packed_bf16_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, char **s, size_t *len,
                               size_t *cap) {
    int done[GB_MAX_MR + 1][5][2];
    memset(done, 0, sizeof done);
    int any = 0;
    for (int i = 0; i < n; i++) {
        const sch_contract_sched *sc = &scheds[i];
        if (!sch_family_is(sc, SCH_FAM_PACKED_BF16, t)) continue;
        if (!any) {
            OUT("#include <stdlib.h>\n");
            cg_emit_ktr16(s, len, cap);
            OUT("%s", bf16_helpers);
        }
        any = 1;
        int pi = sc->pf > 0;
        if (done[sc->mr][sc->nr / 16][pi]) continue;
        done[sc->mr][sc->nr / 16][pi] = 1;
        emit_micro(sc->mr, sc->nr, sc->pf, s, len, cap);
    }
}

void cg_emit_packed_bf16_pre(char **s, size_t *len, size_t *cap) {
    OUT("  uint32_t *gb_a = NULL; int64_t gb_o = -1;\n");
}

void cg_emit_packed_bf16_post(char **s, size_t *len, size_t *cap) { OUT("  free(gb_a);\n"); }

static void out_sym(const sch_program *p, sym_id x, char **s, size_t *len, size_t *cap) {
    sch_print_sym(p, x, s, len, cap);
}

void cg_emit_packed_bf16_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                                  size_t *len, size_t *cap) {
    const sch_contract *c = k->contract;
    int mr = sc->mr, nr = sc->nr, md = c->mdim;
    int strided = c->b_kstride != SYM_NONE;
    OUT("      {\n");
    /* A rounded once per batch point and call: row mq's pairs at gb_a + mq * kpa */
    OUT("        const int64_t kpa = (K + 1) / 2, gob = w / ntiles;\n");
    OUT("        if (gb_o != gob) {\n");
    OUT("          if (!gb_a) { gb_a = (uint32_t *)malloc((size_t)(M * kpa + 16 + M) * sizeof(uint32_t)); if (!gb_a) return 1; }\n");
    OUT("          for (int64_t mq = 0; mq < M; mq++) {\n");
    if (md >= 0) OUT("            const int64_t i%d = mq; (void)i%d;\n", md, md);
    OUT("            gb_a[M * kpa + 16 + mq] = (uint32_t)kgb_arow(A + (");
    out_sym(p, c->a_base, s, len, cap);
    OUT("), K, gb_a + mq * kpa);\n");
    OUT("          }\n");
    OUT("          gb_o = gob;\n");
    OUT("        }\n");
    OUT("        const int64_t kcb = %d > 0 && %d < K ? %d : (K > 0 ? K : 1);\n", sc->kc, sc->kc, sc->kc);
    OUT("        const int64_t nstr = (n1 - n0 + %d) / %d;\n", nr - 1, nr);
    OUT("        const size_t bpsz = ((size_t)(nstr * %d * ((kcb + 1) / 2)) * sizeof(uint32_t) + 63) & ~(size_t)63;\n", nr);
    OUT("        uint32_t *bp = (uint32_t *)aligned_alloc(64, bpsz > 0 ? bpsz : 64);\n");
    OUT("        if (!bp) { free(gb_a); return 1; }\n");
    cg_emit_out_stride(p, k, s, len, cap);
    OUT("        for (int64_t k0 = 0; k0 == 0 || k0 < K; k0 += kcb) {\n");
    OUT("          const int64_t kl = K - k0 < kcb ? K - k0 : kcb, kp = (kl + 1) / 2;\n");
    OUT("          const int acc = k0 > 0;\n");
    OUT("          for (int64_t st = 0; st < nstr; st++) {\n");
    OUT("            const int64_t ns = n0 + st * %d;\n", nr);
    OUT("            uint32_t *bps = bp + st * %d * ((kcb + 1) / 2);\n", nr);
    cg_emit_strip_operand(p, k, nr, 1, s, len, cap);
    if (strided) OUT("            kgb_pack_strided((const float *)W, bo, ks, cols, %d, k0, kl, bps);\n", nr);
    else OUT("            (void)fast; kgb_pack((const float *)W, wo, %d, k0, kl, bps);\n", nr);
    OUT("          }\n");
    OUT("          for (int64_t m0 = 0; m0 < M; m0 += %d) {\n", sc->mc);
    OUT("            const int64_t m1 = m0 + %d < M ? m0 + %d : M;\n", sc->mc, sc->mc);
    OUT("            for (int64_t st = 0; st < nstr; st++) {\n");
    OUT("              const int64_t ns = n0 + st * %d;\n", nr);
    OUT("              const int cols = (int)(n1 - ns < %d ? n1 - ns : %d);\n", nr, nr);
    OUT("              const uint32_t *bps = bp + st * %d * ((kcb + 1) / 2);\n", nr);
    OUT("              for (int64_t mm = m0; mm < m1; mm += %d) {\n", mr);
    OUT("                const int rows = (int)(m1 - mm < %d ? m1 - mm : %d);\n", mr, mr);
    OUT("                const uint32_t *ar[%d];\n", mr);
    OUT("                for (int i = 0; i < %d; i++) ar[i] = gb_a + (mm + (i < rows ? i : rows - 1)) * kpa + k0 / 2;\n", mr);
    /* the pairs past every row's last nonzero word are not multiplied */
    OUT("                int64_t kpe = 0;\n");
    OUT("                for (int i = 0; i < rows; i++) { const int64_t e = (int64_t)gb_a[M * kpa + 16 + mm + i] - k0 / 2; if (e > kpe) kpe = e; }\n");
    /* columns the consumers multiply by zero in every row of the tile: stored as 0, not computed */
    cg_emit_masked_strip(p, k, "kpe", s, len, cap);
    cg_emit_tile_rows(p, k, mr, nr, s, len, cap);
    OUT("                kgb_%dx%d_p%d(ar, bps, kpe < kp ? kpe : kp, cr, rows, cols, osn == 1 ? acc : 0);\n", mr, nr, sc->pf);
    cg_emit_tile_scatter(p, k, nr, s, len, cap);
    OUT("              }\n            }\n          }\n        }\n");
    OUT("        free(bp);\n");
    OUT("      }\n");
}
