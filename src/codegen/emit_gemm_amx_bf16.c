/* emit_gemm_amx_bf16.c — the contraction form on Intel AMX bf16 tiles
 * (SCH_FORM_AMX, SCH_ARITH_BF16): prompt-sized products of f32 activations A
 * with block-format weights B on tdpbf16ps. An approximation, like the int8
 * forms: A and the dequantised B are rounded to bf16 (8 significant bits,
 * round to nearest even), their products summed in f32 by the tile unit.
 *
 * Unlike the int8 AMX form (emit_gemm_amx.c), whose 16x16 int32 tiles must
 * be stored and rescaled by A's and B's scales after every block of 32 (the
 * rescale, not the tile multiply, bounds it), here the scales are inside the
 * bf16 values: the f32 accumulator tiles stay in the tile unit for all of K
 * and are stored once per K block.
 *
 *   A: converted to bf16 once per batch point into tiles: by the runtime's
 *      CG_KF_PREP launch, each thread a share of the rows, into a scratch
 *      buffer all threads then read (one batch point, M > 4: at 2 threads
 *      llama1b q4_k pp512 469 -> 518 t/s, each thread had converted all of
 *      A), else by each thread for itself at the first item of a batch
 *      point (gh_a); either way into tiles
 *      (gh_a: 16-row groups of K, each group 16 x 32 tiles of 1 KiB laid
 *      end to end, row r's 32 values of chunk c at (r / 16) * 16 K +
 *      c * 512 + (r % 16) * 32, so a tile load reads 1 KiB in a row; at
 *      the rows' own pitch of 2K bytes the 16 lines of a tile fell in one
 *      L1 set: llama1b q8_0 pp512's products 1880 -> 1615 ms at 1 thread).
 *      The 32 rows past M are zero so that 16-row tiles never read past
 *      the buffer;
 *   B: per work item and K block, each nr-column strip dequantised to f32
 *      (the dot form's kcv_<dt>), rounded to bf16 and laid out as AMX B tiles
 *      want it, [k/2][nr][2]: sixteen columns at a time, a 16 x 8 dword
 *      transpose in registers (the int8 strip packer's, emit_gemm_i8.c);
 *   kah_<mr>x<nr>: C[mr/16][nr/16] f32 16x16 tiles += A tile (16 rows x 32
 *      bf16, 1 KiB contiguous) x B tile (16 pair rows x 16 columns) per 32 k,
 *      then stored to a scratch block and written (or added) to out.
 * Tiles 0-3 C, 4-5 A, 6-7 B: kamx_config(64) of the int8 form's helpers.
 *
 * Invariants: K a multiple of 32 and B's rows block-aligned (else the item
 * runs the scalar f32 loop); nothing is written outside [0, M) x [n0, n1);
 * the tile configuration is released before the kernel returns.
 *
 * Error: each product a*w has relative error <= 2^-7 (two bf16 roundings),
 * so |y - y_exact| <= 2^-7 sum |a w| plus the f32 sum's — the tests use
 * that bound.
 */
#include <stdio.h>
#include <string.h>

#include "contract.h"
#include "family.h"
#include "dtype.h"
#include "emit_contract_i8.h"
#include "emit_gemm.h"
#include "emit_gemm_amx.h"
#include "emit_gemm_amx_bf16.h"
#include "emit_gemm_i8.h"
#include "repack_layout.h"

#define OUT(...) sch_appendf(s, len, cap, __VA_ARGS__)

#define KAMXB "__attribute__((target(\"amx-tile,amx-bf16,avx512bf16\")))"

/* the row converter (once per translation unit) */
static const char *bf16_prelude =
    "/* AMX bf16 helpers (emit_gemm_amx_bf16.c) */\n"
    "static " KAMXB " __attribute__((unused)) void kah_row(const float *a, int64_t K, uint16_t *o) {\n"
    "  for (int64_t k = 0; k < K; k += 32) {\n"
    "    const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(a + k + 16), _mm512_loadu_ps(a + k));\n"
    "    _mm512_storeu_si512((void *)(o + 16 * k), (__m512i)h);\n"
    "  }\n"
    "}\n";

/* kahx_<dt>(copy, groups, K, row, chunk c, lo, hi): kcv_<dt>'s 32 values
 * read from B's 8-row interleaved copy (sched/repack_layout.h) instead of
 * B, the same integers and the same f32 operations in the same order, so
 * the same bits: the row's 4-byte lanes of the chunk are 32 bytes apart in
 * its group's record (q8_0's stored + 128, q5_0's fifth bits in the
 * record's 8 step masks, q4_k's scales and minimums unpacked). With it the
 * prefill reads the copy, and a weight whose decode reads the copy too can
 * go (runtime/release.c): at 8B, 32 x 33 MB kept twice otherwise. */
static void emit_copy_values(kiln_dtype t, const char *tag, char **s, size_t *len, size_t *cap) {
    const int kbc = SCH_REPACK_KBLOCK / 32;
    OUT("static " KAMXB " __attribute__((unused)) void kahx_%s(const uint8_t *rpw, int64_t rpg, int64_t K, int64_t row,"
        " int64_t c, __m512 *w0, __m512 *w1) {\n", tag);
    OUT("  const int64_t qch = K / 32, c0 = c / %d * %d, nb = qch - c0 < %d ? qch - c0 : %d, r = row %% 8;\n", kbc, kbc,
        kbc, kbc);
    OUT("  const __m256i idx = _mm256_setr_epi32(0, 32, 64, 96, 128, 160, 192, 224);\n");
    OUT("  uint16_t hd;\n");
    if (t == KILN_Q8_0) {
        OUT("  const uint8_t *o = rpw + (c0 * rpg + row / 8 * nb + (c - c0)) * 272;\n");
        OUT("  const __m256i q = _mm256_xor_si256(_mm256_i32gather_epi32((const int *)(o + 16 + 4 * r), idx, 1),"
            " _mm256_set1_epi8((char)0x80));\n");
        OUT("  memcpy(&hd, o + 2 * r, 2); const __m512 d = _mm512_set1_ps(_cvtsh_ss(hd));\n");
        OUT("  *w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))), d);\n");
        OUT("  *w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))), d);\n}\n");
    } else if (t == KILN_Q5_0) {
        OUT("  const uint8_t *o = rpw + (c0 * rpg + row / 8 * nb + (c - c0)) * 176;\n");
        OUT("  const __m128i q = _mm_i32gather_epi32((const int *)(o + 48 + 4 * r), _mm_setr_epi32(0, 32, 64, 96), 1);\n");
        OUT("  uint32_t qh = 0;\n");
        OUT("  for (int st = 0; st < 8; st++) { uint32_t m; memcpy(&m, o + 16 + 4 * st, 4); qh |= (m >> (4 * r) & 15u) << (4 * st); }\n");
        OUT("  memcpy(&hd, o + 2 * r, 2); const __m512 d = _mm512_set1_ps(_cvtsh_ss(hd));\n");
        OUT("  const __m128i m4 = _mm_set1_epi8(15); const __m512i e16 = _mm512_set1_epi32(16);\n");
        OUT("  __m512i lo = _mm512_cvtepu8_epi32(_mm_and_si128(q, m4));\n");
        OUT("  __m512i hi = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), m4));\n");
        OUT("  lo = _mm512_mask_add_epi32(lo, (__mmask16)(qh & 0xffffu), lo, e16);\n");
        OUT("  hi = _mm512_mask_add_epi32(hi, (__mmask16)(qh >> 16), hi, e16);\n");
        OUT("  *w0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(lo, e16)));\n");
        OUT("  *w1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(hi, e16)));\n}\n");
    } else { /* q4_k: 1184-byte records of 256 elements (8 chunks) */
        OUT("  const int sb = (int)(c %% 8);\n");
        OUT("  const uint8_t *o = rpw + (c0 * rpg + row / 8 * nb + (c - sb - c0)) * 148;\n");
        OUT("  __m256i q = _mm256_i32gather_epi32((const int *)(o + 160 + 256 * (sb / 2) + 4 * r), idx, 1);\n");
        OUT("  if (sb & 1) q = _mm256_srli_epi16(q, 4);\n");
        OUT("  q = _mm256_and_si256(q, _mm256_set1_epi8(15));\n");
        OUT("  memcpy(&hd, o + 2 * r, 2); const float d = _cvtsh_ss(hd);\n");
        OUT("  memcpy(&hd, o + 16 + 2 * r, 2); const float dmin = _cvtsh_ss(hd);\n");
        OUT("  const __m512 ds = _mm512_set1_ps(d * (float)o[32 + 8 * sb + r]), dm = _mm512_set1_ps(dmin * (float)o[96 + 8 * sb + r]);\n");
        OUT("  *w0 = _mm512_sub_ps(_mm512_mul_ps(ds, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q)))), dm);\n");
        OUT("  *w1 = _mm512_sub_ps(_mm512_mul_ps(ds, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1)))), dm);\n}\n");
    }
}

/* kahx8_<dt>(copy, groups, K, first row (a multiple of 8), chunk c, lo[8],
 * hi[8]): kahx_<dt> for the 8 rows of one group at once, the record's 8
 * steps loaded and transposed (8 x 8 dwords) instead of gathered row by
 * row (q8_0, q4_k; the same values bit for bit) */
static void emit_copy_group(kiln_dtype t, const char *tag, char **s, size_t *len, size_t *cap) {
    const int kbc = SCH_REPACK_KBLOCK / 32, q8 = t == KILN_Q8_0;
    OUT("static " KAMXB " __attribute__((unused)) void kahx8_%s(const uint8_t *rpw, int64_t rpg, int64_t K, int64_t row,"
        " int64_t c, __m512 *w0, __m512 *w1) {\n", tag);
    OUT("  const int64_t qch = K / 32, c0 = c / %d * %d, nb = qch - c0 < %d ? qch - c0 : %d;\n", kbc, kbc, kbc, kbc);
    if (q8) OUT("  const uint8_t *o = rpw + (c0 * rpg + row / 8 * nb + (c - c0)) * 272, *y0 = o + 16;\n");
    else
        OUT("  const int sb = (int)(c %% 8);\n"
            "  const uint8_t *o = rpw + (c0 * rpg + row / 8 * nb + (c - sb - c0)) * 148, *y0 = o + 160 + 256 * (sb / 2);\n");
    OUT("  __m256i y[8], tt[8], u[8], z[8];\n");
    OUT("  for (int st = 0; st < 8; st++) y[st] = _mm256_loadu_si256((const __m256i *)(y0 + 32 * st));\n");
    OUT("  for (int i = 0; i < 8; i += 2) { tt[i] = _mm256_unpacklo_epi32(y[i], y[i + 1]); tt[i + 1] = _mm256_unpackhi_epi32(y[i], y[i + 1]); }\n");
    OUT("  for (int i = 0; i < 8; i += 4) {\n"
        "    u[i] = _mm256_unpacklo_epi64(tt[i], tt[i + 2]); u[i + 1] = _mm256_unpackhi_epi64(tt[i], tt[i + 2]);\n"
        "    u[i + 2] = _mm256_unpacklo_epi64(tt[i + 1], tt[i + 3]); u[i + 3] = _mm256_unpackhi_epi64(tt[i + 1], tt[i + 3]); }\n");
    OUT("  for (int r = 0; r < 4; r++) { z[r] = _mm256_permute2x128_si256(u[r], u[r + 4], 0x20); z[r + 4] = _mm256_permute2x128_si256(u[r], u[r + 4], 0x31); }\n");
    OUT("  for (int r = 0; r < 8; r++) {\n    uint16_t hd;\n");
    if (q8) {
        OUT("    const __m256i q = _mm256_xor_si256(z[r], _mm256_set1_epi8((char)0x80));\n");
        OUT("    memcpy(&hd, o + 2 * r, 2); const __m512 d = _mm512_set1_ps(_cvtsh_ss(hd));\n");
        OUT("    w0[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))), d);\n");
        OUT("    w1[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))), d);\n  }\n}\n");
    } else {
        OUT("    __m256i q = z[r];\n    if (sb & 1) q = _mm256_srli_epi16(q, 4);\n");
        OUT("    q = _mm256_and_si256(q, _mm256_set1_epi8(15));\n");
        OUT("    memcpy(&hd, o + 2 * r, 2); const float d = _cvtsh_ss(hd);\n");
        OUT("    memcpy(&hd, o + 16 + 2 * r, 2); const float dmin = _cvtsh_ss(hd);\n");
        OUT("    const __m512 ds = _mm512_set1_ps(d * (float)o[32 + 8 * sb + r]), dm = _mm512_set1_ps(dmin * (float)o[96 + 8 * sb + r]);\n");
        OUT("    w0[r] = _mm512_sub_ps(_mm512_mul_ps(ds, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q)))), dm);\n");
        OUT("    w1[r] = _mm512_sub_ps(_mm512_mul_ps(ds, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1)))), dm);\n  }\n}\n");
    }
}

/* kah_pack_<dt>(W, per-column element offsets at r = 0 (block-aligned),
 * strip width (a multiple of 16), k0, kl (multiples of 32), K, strip, and
 * B's repacked copy or NULL: rows it holds are read from it) */
static void emit_pack(kiln_dtype t, char **s, size_t *len, size_t *cap) {
    const char *tag = t == KILN_F32 ? "f32" : cg_i8_tag(t);
    if (!tag) return;
    int be = dtype_table[t].block, bb = dtype_table[t].block_bytes, cx = cg_i8_copy_source(t);
    const int grp = t == KILN_Q8_0 || t == KILN_Q4_K; /* whole groups read by kahx8 */
    if (cx) emit_copy_values(t, tag, s, len, cap);
    if (grp) emit_copy_group(t, tag, s, len, cap);
    OUT("static " KAMXB " __attribute__((unused)) void kah_pack_%s(const void *W, const int64_t *wo, int nr, int64_t k0,"
        " int64_t kl, int64_t K, uint16_t *restrict bq, const uint8_t *rpw, int64_t rpg) {\n",
        tag);
    OUT("  (void)K; (void)rpw; (void)rpg;\n");
    OUT("  const __m512i ilo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0), ihi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);\n");
    OUT("  for (int j0 = 0; j0 < nr; j0 += 16) {\n");
    OUT("    const void *row[16];\n");
    OUT("    for (int e = 0; e < 16; e++) row[e] = (const char *)W + (wo[j0 + e] / %d) * %d;\n", be, bb);
    /* the strip's two halves that are whole groups of the copy */
    if (grp)
        OUT("    int whole[2];\n"
            "    for (int h = 0; h < 2; h++) { const int64_t r0 = wo[j0 + 8 * h];\n"
            "      whole[h] = rpw && r0 %% (8 * K) == 0 && r0 / K / 8 < rpg && wo[j0 + 8 * h + 7] == r0 + 7 * K; }\n");
    OUT("    for (int64_t cl = 0; cl < kl / 32; cl++) {\n");
    OUT("      __m256i w[2][16];\n");
    if (grp)
        OUT("      for (int h = 0; h < 2; h++) {\n"
            "        if (!whole[h]) continue;\n"
            "        __m512 lo[8], hi[8];\n"
            "        kahx8_%s(rpw, rpg, K, wo[j0 + 8 * h] / K, k0 / 32 + cl, lo, hi);\n"
            "        for (int r = 0; r < 8; r++) {\n"
            "          w[0][8 * h + r] = (__m256i)_mm512_cvtneps_pbh(lo[r]); w[1][8 * h + r] = (__m256i)_mm512_cvtneps_pbh(hi[r]); }\n"
            "      }\n", tag);
    OUT("      for (int e = 0; e < 16; e++) {\n");
    if (grp) OUT("        if (whole[e / 8]) continue;\n");
    if (t == KILN_F32) OUT("        __m512 lo, hi; kah_ld32((const float *)row[e], k0 + 32 * cl, K, &lo, &hi);\n");
    else if (cx)
        OUT("        __m512 lo, hi;\n"
            "        if (rpw && wo[j0 + e] %% K == 0 && wo[j0 + e] / K / 8 < rpg) kahx_%s(rpw, rpg, K, wo[j0 + e] / K, k0 / 32 + cl, &lo, &hi);\n"
            "        else kcv_%s(row[e], k0 / 32 + cl, &lo, &hi);\n", tag, tag);
    else OUT("        __m512 lo, hi; kcv_%s(row[e], k0 / 32 + cl, &lo, &hi);\n", tag);
    OUT("        w[0][e] = (__m256i)_mm512_cvtneps_pbh(lo); w[1][e] = (__m256i)_mm512_cvtneps_pbh(hi);\n");
    OUT("      }\n");
    /* each half: 16 columns x 8 dwords (k pairs) -> 8 rows [pair][16 columns][2] */
    OUT("      for (int h = 0; h < 2; h++) {\n");
    OUT("        __m512i z[8], t[8], u[8];\n");
    OUT("        for (int e = 0; e < 8; e++) z[e] = _mm512_inserti64x4(_mm512_castsi256_si512(w[h][e]), w[h][e + 8], 1);\n");
    OUT("        for (int e = 0; e < 8; e += 2) {\n");
    OUT("          t[e] = _mm512_unpacklo_epi32(z[e], z[e + 1]); t[e + 1] = _mm512_unpackhi_epi32(z[e], z[e + 1]); }\n");
    OUT("        for (int q = 0; q < 2; q++) {\n");
    OUT("          u[4 * q + 0] = _mm512_unpacklo_epi64(t[4 * q + 0], t[4 * q + 2]);\n");
    OUT("          u[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q + 0], t[4 * q + 2]);\n");
    OUT("          u[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);\n");
    OUT("          u[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]); }\n");
    OUT("        uint8_t *dst = (uint8_t *)bq + 4 * ((cl * 16 + 8 * h) * nr + j0);\n");
    OUT("        for (int g = 0; g < 4; g++) {\n");
    OUT("          _mm512_storeu_si512((void *)(dst + 4 * (g * nr)), _mm512_permutex2var_epi64(u[g], ilo, u[g + 4]));\n");
    OUT("          _mm512_storeu_si512((void *)(dst + 4 * ((g + 4) * nr)), _mm512_permutex2var_epi64(u[g], ihi, u[g + 4])); }\n");
    OUT("      }\n");
    OUT("    }\n  }\n}\n\n");
}

/* f32 B (activations: attention's keys and values). K is any length: the
 * operands are zero-padded to Kp (K rounded up to 32), A by kah_row_pad,
 * B by the packers' masked loads, so the padding adds nothing.
 *   kah_pack_f32(W, per-column element offsets at r = 0, strip width, k0,
 *     kl, K, strip): column j contiguous along K (W[wo[j] + r]), 32 k of 16
 *     columns rounded and transposed as the block packer does;
 *   kah_pack_f32s(W, offset of the strip's column 0 at r = 0, K stride,
 *     valid columns, strip width, k0, kl, K, strip): B contiguous along n
 *     (W[o + r * ks + j]): rows k and k+1 of 16 columns rounded in one
 *     vcvtne2ps2bf16 and interleaved into pairs by one vpermw. */
static const char *f32_helpers =
    "static " KAMXB " __attribute__((unused)) void kah_row_pad(const float *a, int64_t K, uint16_t *o) {\n"
    "  int64_t k = 0;\n"
    "  for (; k + 32 <= K; k += 32)\n"
    "    _mm512_storeu_si512((void *)(o + 16 * k), (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(a + k + 16), _mm512_loadu_ps(a + k)));\n"
    "  if (k < K) {\n"
    "    const int r = (int)(K - k);\n"
    "    const __mmask16 m0 = (__mmask16)(r >= 16 ? 0xffffu : (1u << r) - 1u), m1 = (__mmask16)(r > 16 ? (1u << (r - 16)) - 1u : 0u);\n"
    "    _mm512_storeu_si512((void *)(o + 16 * k), (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, a + k + 16), _mm512_maskz_loadu_ps(m0, a + k)));\n"
    "  }\n"
    "}\n"
    "KI void kah_ld32(const float *r, int64_t k, int64_t K, __m512 *lo, __m512 *hi) {\n"
    "  if (k + 32 <= K) { *lo = _mm512_loadu_ps(r + k); *hi = _mm512_loadu_ps(r + k + 16); return; }\n"
    "  const int64_t n = K - k;\n"
    "  const __mmask16 m0 = (__mmask16)(n >= 16 ? 0xffffu : n <= 0 ? 0u : (1u << n) - 1u);\n"
    "  const __mmask16 m1 = (__mmask16)(n >= 32 ? 0xffffu : n <= 16 ? 0u : (1u << (n - 16)) - 1u);\n"
    "  *lo = _mm512_maskz_loadu_ps(m0, r + k); *hi = _mm512_maskz_loadu_ps(m1, r + k + 16);\n"
    "}\n"
    "static " KAMXB " __attribute__((unused)) void kah_pack_f32s(const float *W, int64_t o, int64_t ks, int cols, int nr,"
    " int64_t k0, int64_t kl, int64_t K, uint16_t *restrict bq) {\n"
    "  const __m512i il = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,\n"
    "                                      23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);\n"
    "  for (int64_t p = 0; p < kl / 2; p++) {\n"
    "    const int64_t k = k0 + 2 * p;\n"
    "    for (int j0 = 0; j0 < nr; j0 += 16) {\n"
    "      const int c = cols - j0;\n"
    "      const __mmask16 mj = (__mmask16)(c >= 16 ? 0xffffu : c <= 0 ? 0u : (1u << c) - 1u);\n"
    "      const __m512 x0 = _mm512_maskz_loadu_ps(k < K ? mj : 0, W + o + (k < K ? k : 0) * ks + j0);\n"
    "      const __m512 x1 = _mm512_maskz_loadu_ps(k + 1 < K ? mj : 0, W + o + (k + 1 < K ? k + 1 : 0) * ks + j0);\n"
    "      _mm512_storeu_si512((void *)(bq + 2 * (p * nr + j0)), _mm512_permutexvar_epi16(il, (__m512i)_mm512_cvtne2ps_pbh(x1, x0)));\n"
    "    }\n"
    "  }\n"
    "}\n";

/* kah_<mr>x<nr>(A's tile group at k0 (bf16 tiles, 16 K per 16 rows), K, strip at k0, blocks of 32,
 * out rows, valid rows, valid columns, add to out, f32 scratch [4][256]) */
static void emit_micro(int mr, int nr, char **s, size_t *len, size_t *cap) {
    int mt = mr / 16, nt = nr / 16;
    OUT("static " KAMXB " __attribute__((unused, noinline)) void kah_%dx%d(const uint16_t *a, int64_t K, const uint16_t *b,"
        " int64_t nb, float *const *c, int rows, int cols, int acc, float *restrict ct) {\n",
        mr, nr);
    for (int mi = 0; mi < mt; mi++)
        for (int nj = 0; nj < nt; nj++) OUT("  _tile_zero(%d);\n", mi * 2 + nj);
    OUT("  for (int64_t bb = 0; bb < nb; bb++) {\n");
    for (int mi = 0; mi < mt; mi++) OUT("    _tile_loadd(%d, a + %d * K + bb * 512, 64);\n", 4 + mi, 16 * mi);
    for (int nj = 0; nj < nt; nj++) OUT("    _tile_loadd(%d, b + bb * %d + %d, %d);\n", 6 + nj, 32 * nr, 32 * nj, 4 * nr);
    for (int mi = 0; mi < mt; mi++)
        for (int nj = 0; nj < nt; nj++) OUT("    _tile_dpbf16ps(%d, %d, %d);\n", mi * 2 + nj, 4 + mi, 6 + nj);
    OUT("  }\n");
    for (int mi = 0; mi < mt; mi++)
        for (int nj = 0; nj < nt; nj++) OUT("  _tile_stored(%d, ct + %d, 64);\n", mi * 2 + nj, 256 * (mi * 2 + nj));
    for (int nj = 0; nj < nt; nj++)
        OUT("  const __mmask16 q%d = (__mmask16)(cols >= %d ? 0xffffu : cols <= %d ? 0u : (1u << (unsigned)(cols - %d)) - 1u);\n",
            nj, 16 * (nj + 1), 16 * nj, 16 * nj);
    OUT("  for (int r = 0; r < rows; r++) {\n");
    for (int nj = 0; nj < nt; nj++)
        OUT("    { const __m512 v = _mm512_load_ps(ct + 256 * ((r / 16) * 2 + %d) + 16 * (r %% 16));\n"
            "      _mm512_mask_storeu_ps(c[r] + %d, q%d, acc ? _mm512_add_ps(_mm512_maskz_loadu_ps(q%d, c[r] + %d), v) : v); }\n",
            nj, 16 * nj, nj, nj, 16 * nj);
    OUT("  }\n}\n\n");
}

void cg_emit_amx_bf16_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, int *i8_done, char **s, size_t *len,
                            size_t *cap) {
    int done[3][3], packed = 0;
    memset(done, 0, sizeof done);
    for (int i = 0; i < n; i++) {
        const sch_contract_sched *sc = &scheds[i];
        if (!sch_family_is(sc, SCH_FAM_AMX_BF16, t)) continue;
        cg_emit_amx_prelude(i8_done, s, len, cap);
        if (!(*i8_done & 8)) OUT("%s\n", bf16_prelude);
        *i8_done |= 8;
        if (!packed && t == KILN_F32) OUT("%s\n", f32_helpers);
        if (!packed) emit_pack(t, s, len, cap);
        packed = 1;
        /* the micro-kernels do not depend on B's dtype: once per unit */
        if (done[sc->mr / 16][sc->nr / 16] || (*i8_done & (16 << (sc->mr / 16 * 2 + sc->nr / 16 - 3)))) continue;
        done[sc->mr / 16][sc->nr / 16] = 1;
        *i8_done |= 16 << (sc->mr / 16 * 2 + sc->nr / 16 - 3);
        emit_micro(sc->mr, sc->nr, s, len, cap);
    }
}

/* A's converter and pitch: f32 B pads K to Kp = 32s (kah_row_pad), block
 * formats have K in 32s already (kah_row) */
static const char *a_conv(const sch_program *p, const sch_kernel *k) {
    return p->bufs[k->contract->b_buf].dtype == KILN_F32 ? "kah_row_pad" : "kah_row";
}

static void out_sym(const sch_program *p, sym_id x, char **s, size_t *len, size_t *cap) {
    sch_print_sym(p, x, s, len, cap);
}

/* one row of A (mq) into its place in the tile layout at ga, pitch kp */
static void emit_a_row(const sch_program *p, const sch_kernel *k, const char *kp, const char *ga, char **s,
                       size_t *len, size_t *cap) {
    const sch_contract *c = k->contract;
    if (c->mdim >= 0) OUT("            const int64_t i%d = mq; (void)i%d;\n", c->mdim, c->mdim);
    OUT("            %s(A + (", a_conv(p, k));
    out_sym(p, c->a_base, s, len, cap);
    OUT("), K, %s + (mq / 16) * 16 * %s + (mq %% 16) * 32);\n", ga, kp);
}

void cg_emit_amx_bf16_pre(const sch_program *p, const sch_kernel *k, char **s, size_t *len, size_t *cap) {
    const sch_contract *c = k->contract;
    const char *kp = p->bufs[c->b_buf].dtype == KILN_F32 ? "((K + 31) / 32 * 32)" : "K";
    OUT("  uint16_t *gh_a = NULL, *gh_own = NULL; int64_t gh_o = -1;\n");
    /* CG_KF_PREP: the runtime's first launch of a shared conversion, over
     * 16-row groups [lo, hi) of A (two past M's last zeroed), into B[nbufs]
     * (one batch point: every other loop index is 0) */
    OUT("  if (flags & %d) {\n", CG_KF_PREP);
    OUT("    uint16_t *ga = (uint16_t *)B[%d];\n", p->nbufs);
    for (int d = 0; d < k->ndim; d++)
        if (d != c->mdim && d != c->ndim) OUT("    const int64_t i%d = 0; (void)i%d;\n", d, d);
    OUT("    for (int64_t gq = lo; gq < hi; gq++) {\n");
    OUT("      for (int64_t mq = 16 * gq; mq < 16 * gq + 16; mq++) {\n");
    OUT("        if (mq >= M) {\n");
    OUT("          for (int64_t cq = 0; cq < %s / 32; cq++) memset(ga + (mq / 16) * 16 * %s + cq * 512 + (mq %% 16) * 32, 0, 64);\n", kp, kp);
    OUT("          continue;\n        }\n");
    OUT("        {\n");
    emit_a_row(p, k, kp, "ga", s, len, cap);
    OUT("        }\n");
    OUT("      }\n    }\n    return 0;\n  }\n");
}

void cg_emit_amx_bf16_post(char **s, size_t *len, size_t *cap) { OUT("  free(gh_own);\n"); }

/* the item loops shared by both operand kinds: B packed per K block and
 * strip (pack: the call, with st, ns, wo[] and kl in scope), then the
 * tiles over [0, M) x the item's strips; A's rows in gh_a at pitch kp */
static void emit_item_loops(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, const char *kp,
                            const char *pack, char **s, size_t *len, size_t *cap) {
    const sch_contract *c = k->contract;
    int mr = sc->mr, nr = sc->nr, nd = c->ndim;
    OUT("        if (!kamx_ready()) return 1;\n");
    OUT("        const int64_t kcb = %d > 0 && %d < %s ? %d : %s;\n", sc->kc, sc->kc, kp, sc->kc, kp);
    OUT("        const int64_t nstr = (n1 - n0 + %d) / %d;\n", nr - 1, nr);
    OUT("        uint16_t *bq = (uint16_t *)aligned_alloc(64, ((size_t)(nstr * %d * kcb) * sizeof(uint16_t) + 63) & ~(size_t)63);\n",
        nr);
    OUT("        float *cts = (float *)aligned_alloc(64, 1024 * sizeof(float));\n");
    OUT("        if (!bq || !cts) { free(bq); free(cts); return 1; }\n");
    OUT("        kamx_config(64);\n");
    cg_emit_out_stride(p, k, s, len, cap);
    OUT("        for (int64_t k0 = 0; k0 < %s; k0 += kcb) {\n", kp);
    OUT("          const int64_t kl = %s - k0 < kcb ? %s - k0 : kcb;\n", kp, kp);
    OUT("          const int acc = k0 > 0;\n");
    OUT("          for (int64_t st = 0; st < nstr; st++) {\n");
    OUT("            const int64_t ns = n0 + st * %d;\n", nr);
    OUT("            const int cols = (int)(n1 - ns < %d ? n1 - ns : %d); (void)cols;\n", nr, nr);
    OUT("            int64_t wo[%d];\n", nr);
    OUT("            for (int j = 0; j < %d; j++) {\n", nr);
    OUT("              const int64_t i%d = ns + j < n1 ? ns + j : n1 - 1; (void)i%d;\n", nd, nd);
    OUT("              wo[j] = ");
    out_sym(p, c->b_base, s, len, cap);
    OUT(";\n            }\n");
    OUT("            %s;\n", pack);
    OUT("          }\n");
    OUT("          for (int64_t m0 = 0; m0 < M; m0 += %d) {\n", sc->mc);
    OUT("            const int64_t m1 = m0 + %d < M ? m0 + %d : M;\n", sc->mc, sc->mc);
    OUT("            for (int64_t st = 0; st < nstr; st++) {\n");
    OUT("              const int64_t ns = n0 + st * %d;\n", nr);
    OUT("              const int cols = (int)(n1 - ns < %d ? n1 - ns : %d);\n", nr, nr);
    OUT("              for (int64_t mm = m0; mm < m1; mm += %d) {\n", mr);
    OUT("                const int rows = (int)(m1 - mm < %d ? m1 - mm : %d);\n", mr, mr);
    cg_emit_tile_rows(p, k, mr, nr, s, len, cap);
    OUT("                kah_%dx%d(gh_a + mm * %s + 16 * k0, %s, bq + st * %d * kcb, kl / 32, cr, rows, cols, osn == 1 ? acc : 0, cts);\n",
        mr, nr, kp, kp, nr);
    cg_emit_tile_scatter(p, k, nr, s, len, cap);
    OUT("              }\n            }\n          }\n        }\n");
    OUT("        kamx_release();\n");
    OUT("        free(bq); free(cts);\n");
}

/* A in bf16 tiles once per batch point and call (gh_a, see the top): each
 * row by kah_row (kah_row_pad for a K padded to 32) at pitch kp; or, after
 * the runtime's CG_KF_PREP launch (flag CG_KF_SHARED), A as that launch
 * left it in B[nbufs], converted once for all threads */
static void emit_a_tiles(const sch_program *p, const sch_kernel *k, const char *kp, char **s, size_t *len,
                         size_t *cap) {
    OUT("        const int64_t gob = w / ntiles;\n");
    OUT("        if (gh_o != gob) {\n");
    OUT("          if (flags & %d) gh_a = (uint16_t *)B[%d];\n", CG_KF_SHARED, p->nbufs);
    OUT("          else {\n");
    OUT("          if (!gh_own && !(gh_own = (uint16_t *)calloc((size_t)((M + 32) * %s) + 32, sizeof(uint16_t)))) return 1;\n", kp);
    OUT("          gh_a = gh_own;\n");
    OUT("          for (int64_t mq = 0; mq < M; mq++) {\n");
    emit_a_row(p, k, kp, "gh_a", s, len, cap);
    OUT("          }\n");
    OUT("          }\n");
    OUT("          gh_o = gob;\n");
    OUT("        }\n");
}

/* f32 B: K padded to Kp, no block alignment to check (see f32_helpers) */
static void emit_f32_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                              size_t *len, size_t *cap) {
    const sch_contract *c = k->contract;
    OUT("      {\n");
    OUT("        const int64_t Kp = (K + 31) / 32 * 32;\n");
    emit_a_tiles(p, k, "Kp", s, len, cap);
    char pack[256];
    if (c->b_kstride == SYM_NONE) {
        snprintf(pack, sizeof pack, "kah_pack_f32((const void *)W, wo, %d, k0, kl, K, bq + st * %d * kcb, NULL, 0)", sc->nr,
                 sc->nr);
    } else {
        OUT("        const int64_t bks = ");
        out_sym(p, c->b_kstride, s, len, cap);
        OUT(";\n");
        snprintf(pack, sizeof pack, "kah_pack_f32s(W, wo[0], bks, cols, %d, k0, kl, K, bq + st * %d * kcb)", sc->nr, sc->nr);
    }
    emit_item_loops(p, k, sc, "Kp", pack, s, len, cap);
    OUT("      }\n");
}

void cg_emit_amx_bf16_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                               size_t *len, size_t *cap) {
    const sch_contract *c = k->contract;
    kiln_dtype t = p->bufs[c->b_buf].dtype;
    if (t == KILN_F32) {
        emit_f32_schedule(p, k, sc, s, len, cap);
        return;
    }
    const char *tag = cg_i8_tag(t);
    if (!tag) return;
    int be = cg_i8_group(t); /* elements per block: B rows start on one */
    int nr = sc->nr;
    cg_emit_block_item_begin(p, k, be, tag, s, len, cap);
    emit_a_tiles(p, k, "K", s, len, cap);
    char pack[160];
    snprintf(pack, sizeof pack, "kah_pack_%s((const void *)W, wo, %d, k0, kl, K, bq + st * %d * kcb, %s)", tag, nr, nr,
             cg_i8_copy_source(t) ? "rpw, rpg" : "NULL, 0");
    emit_item_loops(p, k, sc, "K", pack, s, len, cap);
    cg_emit_i8_item_end(s, len, cap);
}
