/* emit_contract_i8.c — the int8 arithmetic of the dot-form contraction
 * micro-kernel (SCH_ARITH_I8): an approximation, like llama.cpp's default.
 *
 * Each work item first quantises the rows of A it needs, per 32-element
 * block (per 256 for q4_k and q6_k, whose super-blocks are 256: then A's
 * scale is applied once per super-block): sa = max|a| / 127, qa = round(a / sa) as int8, and the block's
 * sums of qa per group of 4 (eight int32 lanes, for the weights' zero
 * points) and in total (for q4_k's minimums). A block of B becomes 32 int8
 * or uint8 weights plus per-lane f32 scales (kci_<dtype>), and the block's
 * product is one vpdpbusd (uint8 x int8, groups of 4 summed into 8 int32
 * lanes):
 *   - unsigned weights q in [0, 2^b) with zero point o (q4_0: 8, q5_0: 16,
 *     q6_k: 32, q4_k: 0): dpbusd(q, qa) - o * lane_sums(qa);
 *   - signed weights (q8_0): dpbusd(|w|, sign(qa, w)) (the sign moved onto
 *     A, so the unsigned operand is |w|);
 * then converted to f32 and multiplied by the lane scales (d, or d*sc per
 * 16 elements for q6_k) times sa; q4_k subtracts dmin*m * sa * sum(qa).
 * That is the arithmetic; the dot-form tiles run it 512 bits wide: two
 * 32-element blocks per vpdpbusd (emit_block32_wide_tile), q4_k with its
 * 6-bit scales applied in integer by vpdpwssd (emit_q4k_wide_tile), q6_k a
 * half super-block per pair of vpdpbusd (emit_q6k_wide_tile); the packed
 * and AMX forms (emit_gemm_i8.c, emit_gemm_amx.c) use kci_<dt> per block.
 *
 * Error: A's rounding, at most sa/2 per element, so |y - y_exact| <=
 * sum over A's blocks (32 or 256) of (sa/2) * sum|w| — the tests and the search's check use
 * that bound. Only block formats, K a multiple of 32, rows block-aligned
 * (else the kernel falls back to the scalar f32 path).
 */
#include <string.h>

#include "dtype.h"
#include "emit_contract_i8.h"
#include "emit_gemm_i8.h"

#define OUT(...) sch_appendf(s, len, cap, __VA_ARGS__)

static const char *i8_prelude =
    "/* int8 contraction helpers (emit_contract_i8.c) */\n"
    "#define KVNNI __attribute__((target(\"avx512vnni,bmi2\")))\n"
    "static KVNNI __attribute__((unused)) void kcq_row(const float *a, int64_t K, int64_t group, int8_t *qa, float *sa,\n"
    "    __m256i *l8, int32_t *sum) {\n"
    "  const __m256i one = _mm256_set1_epi8(1);\n"
    "  for (int64_t g0 = 0; g0 < K; g0 += group) {\n"
    "    const int64_t g1 = g0 + group < K ? g0 + group : K;\n"
    "    __m512 mx = _mm512_setzero_ps();\n"
    "    for (int64_t e = g0; e < g1; e += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(a + e)));\n"
    "    const float amax = _mm512_reduce_max_ps(mx);\n"
    "    const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;\n"
    "    const __m512 vid = _mm512_set1_ps(id);\n"
    "    for (int64_t c = g0 / 32; c < g1 / 32; c++) {\n"
    "      const __m512 x0 = _mm512_loadu_ps(a + 32 * c), x1 = _mm512_loadu_ps(a + 32 * c + 16);\n"
    "      const __m128i q0 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x0, vid)));\n"
    "      const __m128i q1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x1, vid)));\n"
    "      const __m256i q = _mm256_set_m128i(q1, q0);\n"
    "      _mm256_storeu_si256((__m256i *)(qa + 32 * c), q);\n"
    "      sa[c] = d;\n"
    "      const __m256i ls = _mm256_dpbusd_epi32(_mm256_setzero_si256(), one, q);\n"
    "      _mm256_storeu_si256(&l8[c], ls);\n"
    "      const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(ls), _mm256_extracti128_si256(ls, 1));\n"
    "      const __m128i h2 = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));\n"
    "      sum[c] = _mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 0xb1)));\n"
    "    }\n"
    "  }\n"
    "}\n"
    /* kcq_pairs: one quantised row's pairs of 32-element blocks as the q4_0 /
     * q5_0 wide tile reads them, so that its loop does no permutes: per pair
     * (192 bytes, 64-byte aligned) qa's 64 bytes with the qwords in the order
     * 0 1 4 5 2 3 6 7, the lane sums in the same order shifted by zs and
     * negated (the zero point's term), and the two scales spread to the
     * lanes [s0 x4, s1 x4, s0 x4, s1 x4] */
    "static KVNNI __attribute__((unused)) void kcq_pairs(const int8_t *qa, const float *sa, const __m256i *l8, int64_t nch,\n"
    "    int zs, char *pp) {\n"
    "  const __m512i ap = _mm512_set_epi64(7, 6, 3, 2, 5, 4, 1, 0);\n"
    "  const __m512i sp = _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);\n"
    "  const __m128i sh = _mm_cvtsi32_si128(zs);\n"
    "  for (int64_t c = 0; c + 2 <= nch; c += 2) {\n"
    "    char *o = pp + 96 * c;\n"
    "    _mm512_store_si512((void *)o, _mm512_permutexvar_epi64(ap, _mm512_loadu_si512((const void *)(qa + 32 * c))));\n"
    "    _mm512_store_si512((void *)(o + 64), _mm512_sub_epi32(_mm512_setzero_si512(),\n"
    "        _mm512_sll_epi32(_mm512_permutexvar_epi64(ap, _mm512_loadu_si512((const void *)&l8[c])), sh)));\n"
    "    _mm512_store_ps((void *)(o + 128), _mm512_permutexvar_ps(sp,\n"
    "        _mm512_castps128_ps512(_mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(sa + c))))));\n"
    "  }\n"
    "}\n"
    /* kcq_q4k: one quantised row as the q4_k wide tile reads it: per
     * super-block qa's 256 bytes with the middle 32-byte quarters of each
     * 128 swapped (so its two 64-byte halves are what one vpmaddubsw pairs
     * with the low and the high nibbles), then, after all of them, the
     * chunks' sums of qa as 8 x int16 per super-block (64-byte aligned) */
    "static KVNNI __attribute__((unused)) void kcq_q4k(const int8_t *qa, const int32_t *qsum, int64_t nch, char *pp) {\n"
    "  const int64_t nsb = nch / 8;\n"
    "  for (int64_t b = 0; b < nsb * 2; b++) {\n"
    "    const int8_t *x = qa + 128 * b; char *o = pp + 128 * b;\n"
    "    _mm256_store_si256((__m256i *)o, _mm256_loadu_si256((const __m256i *)x));\n"
    "    _mm256_store_si256((__m256i *)(o + 32), _mm256_loadu_si256((const __m256i *)(x + 64)));\n"
    "    _mm256_store_si256((__m256i *)(o + 64), _mm256_loadu_si256((const __m256i *)(x + 32)));\n"
    "    _mm256_store_si256((__m256i *)(o + 96), _mm256_loadu_si256((const __m256i *)(x + 96)));\n"
    "  }\n"
    "  for (int64_t b = 0; b < nsb; b++)\n"
    "    _mm_store_si128((__m128i *)(pp + 256 * nsb + 16 * b), _mm256_cvtepi32_epi16(_mm256_loadu_si256((const __m256i *)(qsum + 8 * b))));\n"
    "}\n"
    "KI float kci_h(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return _cvtsh_ss(h); }\n"
    /* each: weights of chunk c as bytes, lane scales, zero point shift (log2), min term */
    "KI void kci_q8_0(const void *row, int64_t c, __m256i *w, __m256 *ws, float *wm) {\n"
    "  const uint8_t *b = (const uint8_t *)row + 34 * c;\n"
    "  *w = _mm256_loadu_si256((const __m256i *)(b + 2)); *ws = _mm256_set1_ps(kci_h(b)); *wm = 0.0f; }\n"
    "KI void kci_q4_0(const void *row, int64_t c, __m256i *w, __m256 *ws, float *wm) {\n"
    "  const uint8_t *b = (const uint8_t *)row + 18 * c; const __m128i m4 = _mm_set1_epi8(15);\n"
    "  const __m128i q = _mm_loadu_si128((const __m128i *)(b + 2));\n"
    "  *w = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));\n"
    "  *ws = _mm256_set1_ps(kci_h(b)); *wm = 0.0f; }\n"
    "KI void kci_q5_0(const void *row, int64_t c, __m256i *w, __m256 *ws, float *wm) {\n"
    "  const uint8_t *b = (const uint8_t *)row + 22 * c; const __m128i m4 = _mm_set1_epi8(15);\n"
    "  uint32_t qh; memcpy(&qh, b + 2, 4);\n"
    "  const __m128i q = _mm_loadu_si128((const __m128i *)(b + 6));\n"
    "  const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));\n"
    "  const __m256i hb = _mm256_and_si256(_mm256_movm_epi8((__mmask32)qh), _mm256_set1_epi8(16));\n"
    "  *w = _mm256_or_si256(nib, hb); *ws = _mm256_set1_ps(kci_h(b)); *wm = 0.0f; }\n"
    "KI void kci_q4_k(const void *row, int64_t c, __m256i *w, __m256 *ws, float *wm) {\n"
    "  const uint8_t *k = (const uint8_t *)row + 144 * (c / 8); const int sb = (int)(c % 8);\n"
    "  const uint8_t *s = k + 4; int sc, m;\n"
    "  if (sb < 4) { sc = s[sb] & 63; m = s[sb + 4] & 63; }\n"
    "  else { sc = (s[sb + 4] & 0x0f) | ((s[sb - 4] >> 6) << 4); m = (s[sb + 4] >> 4) | ((s[sb] >> 6) << 4); }\n"
    "  __m256i q = _mm256_loadu_si256((const __m256i *)(k + 16 + 32 * (sb / 2)));\n"
    "  if (sb & 1) q = _mm256_srli_epi16(q, 4);\n"
    "  *w = _mm256_and_si256(q, _mm256_set1_epi8(15));\n"
    "  *ws = _mm256_set1_ps(kci_h(k) * (float)sc); *wm = kci_h(k + 2) * (float)m; }\n"
    "KI void kci_q6_k(const void *row, int64_t c, __m256i *w, __m256 *ws, float *wm) {\n"
    "  const uint8_t *k = (const uint8_t *)row + 210 * (c / 8); const int ch = (int)(c % 8), h = ch / 4, t = ch % 4;\n"
    "  const float d = kci_h(k + 208); const int8_t *sc = (const int8_t *)(k + 192) + 2 * ch;\n"
    "  __m256i lo = _mm256_loadu_si256((const __m256i *)(k + 64 * h + 32 * (t & 1)));\n"
    "  const __m256i hb = _mm256_loadu_si256((const __m256i *)(k + 128 + 32 * h));\n"
    "  if (t >= 2) lo = _mm256_srli_epi16(lo, 4);\n"
    "  lo = _mm256_and_si256(lo, _mm256_set1_epi8(15));\n"
    "  const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * t)), _mm256_set1_epi8(3));\n"
    "  *w = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));\n"
    "  *ws = _mm256_set_m128(_mm_set1_ps(d * (float)sc[1]), _mm_set1_ps(d * (float)sc[0])); *wm = 0.0f; }\n";

/* zero point of the unsigned weights as a shift (8 = 1 << 3; q4_k: 0, no
 * zero point but the minimum term), -1: signed (q8_0) */
static int zero_shift(kiln_dtype t) {
    const dtype_info *d = &dtype_table[t];
    if (!(d->flags & DT_INT8) || (d->flags & DT_QSIGNED)) return -1;
    int sh = 0;
    for (int z = d->qzero; z > 1; z >>= 1) sh++;
    return sh;
}

static const char *tag(kiln_dtype t) {
    const char *n = cg_i8_tag(t);
    return n ? n : "?";
}

/* rs: the byte distance between consecutive B rows of the tile (rows are
 * usually consecutive: measured from the first two; with one row, a row's
 * own length). Used to prefetch the next tile's rows while this one runs:
 * B's rows are short streams the hardware prefetcher picks up late (llama1b
 * q4_k decode +30%). A hint past the end of B is harmless. */
void cg_emit_row_stride(kiln_dtype t, int nr, char **s, size_t *len, size_t *cap) {
    int be = dtype_table[t].block, bb = dtype_table[t].block_bytes;
    if (nr > 1) OUT("  const ptrdiff_t rs = (const char *)w[1] - (const char *)w[0];\n");
    else OUT("  const ptrdiff_t rs = (ptrdiff_t)(nch * 32 / %d * %d);\n", be, bb);
    /* far: the same point of the tile about 32 KiB ahead (whole tiles),
     * prefetched into L2 — a single thread's L1 misses alone do not keep
     * enough reads in flight (gemma3-270m's q8_0 output head, 179 MB per
     * token: 18.1 -> 15.9 ms at 1 thread) */
    OUT("  const ptrdiff_t far = %d * rs * (1 + 32768 / (%d * (rs > 0 ? rs : -rs) + 1));\n", nr, nr);
}
#define emit_row_stride cg_emit_row_stride

/* bytes of 32 elements of a block format (q6_k's 26.25 rounded down) */
static int bytes_per_32(kiln_dtype t) { return dtype_bytes_of(t, 32); }

void cg_emit_i8_prelude(char **s, size_t *len, size_t *cap) { OUT("%s\n", i8_prelude); }

/* the end of a tile function: res[i][j] = the 8 lanes of c<i>_<j> summed,
 * minus the minimum term m<i>_<j> */
static void emit_results(int mr, int nr, char **s, size_t *len, size_t *cap) {
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            OUT("  { const __m128 h = _mm_add_ps(_mm256_castps256_ps128(c%d_%d), _mm256_extractf128_ps(c%d_%d, 1));\n", i, j, i,
                j);
            OUT("    const __m128 h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));\n");
            OUT("    res[%d] = _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1))) - m%d_%d; }\n", i * nr + j, i, j);
        }
    OUT("}\n\n");
}

int cg_i8_group(kiln_dtype t) { return dtype_table[t].block; }

int cg_i8_prep(kiln_dtype t) {
    if (t == KILN_Q4_0 || t == KILN_Q5_0) return 1;
    return t == KILN_Q4_K ? 2 : 0;
}

void cg_emit_i8_prep(kiln_dtype t, const char *qa, const char *sa, const char *l8, const char *qsum, const char *nch,
                     const char *out, char **s, size_t *len, size_t *cap) {
    if (cg_i8_prep(t) == 1) OUT("kcq_pairs(%s, %s, %s, %s, %d, %s);\n", qa, sa, l8, nch, zero_shift(t), out);
    else if (cg_i8_prep(t) == 2) OUT("kcq_q4k(%s, %s, %s, %s);\n", qa, qsum, nch, out);
}

/* q4_k, 128 elements at a time: two consecutive 32-byte runs of nibbles
 * (one 64-byte load) hold chunks 4q, 4q+2 in their low nibbles and 4q+1,
 * 4q+3 in their high ones, so one and / shift-and gives two zmm of weights;
 * A's matching 64 bytes are two 32-byte halves of qa (shared by the tile's
 * rows). The products stay integer over the whole super-block: vpmaddubsw
 * (u8 weight x s8 activation, pairs summed into int16: at most 2*15*127)
 * then vpdpwssd with the chunk's 6-bit scale in each int16 lane (the
 * scales broadcast from one 8 x int16 vector by vpshufb), so a super-block
 * costs one int32 -> f32 conversion and one FMA (by d * A's scale) per
 * row, not one per chunk. The 12 bytes of 6-bit scales and minimums are
 * decoded with 32-bit masks (sc 0-3: bytes 0-3 & 63; sc 4-7: bytes 8-11 low
 * nibbles | top 2 bits of bytes 0-3 << 4; the minimums likewise from bytes
 * 4-7 and the high nibbles), and the minimum term is integer too: one
 * vpmaddwd of the 8 minimums with the chunks' sums of qa, then one FMA by
 * -dmin * A's scale into the same accumulator. Prefetch: the super-block
 * pf chunks ahead and the next tile's rows into L1, ~32 KiB ahead into L2,
 * each at offsets 0, 48, 96 (so no 64-byte line of a row is skipped). */
static void emit_q4k_wide_tile(const sch_contract_sched *sc, const char *name, char **s, size_t *len, size_t *cap) {
    int mr = sc->mr, nr = sc->nr;
    OUT("static KVNNI void %s(const int8_t *const *qa, const float *const *sa, const __m256i *const *l8,\n"
        "    const int32_t *const *qsum, const char *const *pp, const void *const *w, int64_t nch, float *res) {\n",
        name);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) OUT("  __m512 c%d_%d = _mm512_setzero_ps();\n", i, j);
    OUT("  const __m512i m4 = _mm512_set1_epi8(15);\n");
    /* vpshufb controls: int16 scale s0 in the low 256 bits, s1 in the high */
    for (int q = 0; q < 2; q++)
        for (int h = 0; h < 2; h++) {
            int s0 = 4 * q + h, s1 = 4 * q + 2 + h;
            unsigned a = (unsigned)(2 * s0) | (unsigned)(2 * s0 + 1) << 8, b = (unsigned)(2 * s1) | (unsigned)(2 * s1 + 1) << 8;
            a |= a << 16;
            b |= b << 16;
            OUT("  const __m512i ct%d%d = _mm512_set_epi32(%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d);\n", q, h,
                (int)b, (int)b, (int)b, (int)b, (int)b, (int)b, (int)b, (int)b, (int)a, (int)a, (int)a, (int)a, (int)a, (int)a,
                (int)a, (int)a);
        }
    if (sc->pf > 0) emit_row_stride(KILN_Q4_K, nr, s, len, cap);
    OUT("  for (int64_t c0 = 0; c0 < nch; c0 += 8) {\n");
    OUT("    const int64_t sbk = c0 / 8;\n");
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) OUT("    __m512 dx%d_%d;\n", i, j);
    for (int j = 0; j < nr; j++) {
        OUT("    const uint8_t *k%d = (const uint8_t *)w[%d] + 144 * sbk; __m512i S%d; __m128i M%d;\n", j, j, j, j);
        /* [d, dmin] in one conversion */
        OUT("    uint32_t h%d; memcpy(&h%d, k%d, 4); const __m128 dd%d = _mm_cvtph_ps(_mm_cvtsi32_si128((int)h%d));\n", j, j, j, j, j);
        OUT("    { uint32_t u0, u1, u2; memcpy(&u0, k%d + 4, 4); memcpy(&u1, k%d + 8, 4); memcpy(&u2, k%d + 12, 4);\n", j, j, j);
        OUT("      const uint32_t sl = u0 & 0x3f3f3f3fu, sh = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);\n");
        OUT("      const uint32_t ml = u1 & 0x3f3f3f3fu, mh = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);\n");
        OUT("      S%d = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)((uint64_t)sh << 32 | sl))));\n", j);
        OUT("      M%d = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)((uint64_t)mh << 32 | ml))); }\n", j);
    }
    /* the minimum term, integer: sum over chunks of m * sum(qa) (<= 63 * 32 * 127 each) */
    for (int i = 0; i < mr; i++) {
        /* A's side, arranged once per call (kcq_q4k): qa with the middle
         * quarters of each 128 swapped, then the chunks' sums as int16 */
        OUT("    const int8_t *xq%d = (const int8_t *)pp[%d] + 256 * sbk;\n", i, i);
        OUT("    const __m128 xs%d = _mm_set1_ps(sa[%d][c0]);\n", i, i);
        OUT("    { const __m128i qs = _mm_load_si128((const __m128i *)(pp[%d] + 256 * (nch / 8) + 16 * sbk));\n", i);
        for (int j = 0; j < nr; j++) {
            OUT("      const __m128 ds%d = _mm_mul_ps(dd%d, xs%d);\n", j, j, i);
            OUT("      c%d_%d = _mm512_fnmadd_ps(_mm512_zextps128_ps512(_mm_cvtepi32_ps(_mm_madd_epi16(M%d, qs))),"
                " _mm512_broadcastss_ps(_mm_movehdup_ps(ds%d)), c%d_%d);\n", i, j, j, j, i, j);
            OUT("      dx%d_%d = _mm512_broadcastss_ps(ds%d);\n", i, j, j);
        }
        OUT("    }\n");
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) OUT("    __m512i b%d_%d = _mm512_setzero_si512();\n", i, j);
    for (int q = 0; q < 2; q++) {
        OUT("    {\n");
        for (int j = 0; j < nr; j++) {
            if (sc->pf > 0) {
                int ahead = 144 * ((sc->pf + 7) / 8);
                if (q == 0)
                    OUT("      _mm_prefetch((const char *)k%d + %d, _MM_HINT_T0); _mm_prefetch((const char *)k%d + %d, _MM_HINT_T0);"
                        " _mm_prefetch((const char *)k%d + %d * rs, _MM_HINT_T0); _mm_prefetch((const char *)k%d + %d * rs + 48, _MM_HINT_T0);"
                        " _mm_prefetch((const char *)k%d + far, _MM_HINT_T1);\n",
                        j, ahead, j, ahead + 48, j, nr, j, nr, j);
                else
                    OUT("      _mm_prefetch((const char *)k%d + %d, _MM_HINT_T0); _mm_prefetch((const char *)k%d + %d * rs + 96, _MM_HINT_T0);"
                        " _mm_prefetch((const char *)k%d + far + 48, _MM_HINT_T1); _mm_prefetch((const char *)k%d + far + 96, _MM_HINT_T1);\n",
                        j, ahead + 96, j, nr, j, j);
            }
            OUT("      const __m512i L%d = _mm512_loadu_si512((const void *)(k%d + %d));\n", j, j, 16 + 64 * q);
            OUT("      const __m512i lo%d = _mm512_and_si512(L%d, m4), hi%d = _mm512_and_si512(_mm512_srli_epi16(L%d, 4), m4);\n", j, j, j, j);
            OUT("      const __m512i sl%d = _mm512_shuffle_epi8(S%d, ct%d0), sh%d = _mm512_shuffle_epi8(S%d, ct%d1);\n", j, j, q, j, j, q);
        }
        for (int i = 0; i < mr; i++) {
            OUT("      { const __m512i xl = _mm512_load_si512((const void *)(xq%d + %d));\n", i, 128 * q);
            OUT("        const __m512i xh = _mm512_load_si512((const void *)(xq%d + %d));\n", i, 128 * q + 64);
            for (int j = 0; j < nr; j++) {
                OUT("        b%d_%d = _mm512_dpwssd_epi32(b%d_%d, _mm512_maddubs_epi16(lo%d, xl), sl%d);\n", i, j, i, j, j, j);
                OUT("        b%d_%d = _mm512_dpwssd_epi32(b%d_%d, _mm512_maddubs_epi16(hi%d, xh), sh%d);\n", i, j, i, j, j, j);
            }
            OUT("      }\n");
        }
        OUT("    }\n");
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            OUT("    c%d_%d = _mm512_fmadd_ps(_mm512_cvtepi32_ps(b%d_%d), dx%d_%d, c%d_%d);\n", i, j, i, j, i, j, i, j);
    OUT("  }\n  (void)l8; (void)qa; (void)qsum;\n");
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) OUT("  res[%d] = _mm512_reduce_add_ps(c%d_%d);\n", i * nr + j, i, j);
    OUT("}\n\n");
}

/* q6_k, 512 bits at a time: a super-block half h (128 elements) is 64
 * bytes of low nibbles ql and 32 bytes of 2-bit high parts qh. Chunks 4h
 * and 4h+1 are (ql & 15) | (qh bits 0-1, 2-3) << 4, chunks 4h+2 and 4h+3
 * are (ql >> 4) | (qh bits 4-5, 6-7) << 4: with H = [qh, qh >> 2] in one
 * zmm, pair 2h is (L & 15) | ((H << 4) & 0x30) and pair 2h+1 is
 * ((L >> 4) & 15) | (H & 0x30). One vpdpbusd per pair and row of A starts
 * from -32 * lane_sums(qa) (the zero point), and its 16 int32 lanes are
 * scaled by d*sc of the 16-element groups (4 lanes each: scales 4p..4p+3
 * of pair p). A's scale (one per 256) multiplies each super-block's sum. */
static void emit_q6k_wide_tile(const sch_contract_sched *sc, const char *name, char **s, size_t *len, size_t *cap) {
    int mr = sc->mr, nr = sc->nr;
    OUT("static KVNNI void %s(const int8_t *const *qa, const float *const *sa, const __m256i *const *l8,\n"
        "    const int32_t *const *qsum, const char *const *pp, const void *const *w, int64_t nch, float *res) {\n",
        name);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) OUT("  __m512 c%d_%d = _mm512_setzero_ps();\n", i, j);
    OUT("  const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);\n");
    if (sc->pf > 0) emit_row_stride(KILN_Q6_K, nr, s, len, cap);
    OUT("  for (int64_t c0 = 0; c0 < nch; c0 += 8) {\n");
    OUT("    const int64_t sbk = c0 / 8;\n");
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) OUT("    __m512 dx%d_%d;\n", i, j);
    for (int j = 0; j < nr; j++) {
        OUT("    const uint8_t *k%d = (const uint8_t *)w[%d] + 210 * sbk;\n", j, j);
        OUT("    const __m512 sv%d = _mm512_mul_ps(_mm512_set1_ps(kci_h(k%d + 208)),"
            " _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(k%d + 192)))));\n",
            j, j, j);
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) OUT("    __m512 b%d_%d = _mm512_setzero_ps();\n", i, j);
    OUT("    for (int h = 0; h < 2; h++) {\n");
    for (int j = 0; j < nr; j++) {
        if (sc->pf > 0)
            OUT("      _mm_prefetch((const char *)k%d + 210 * %d + 64 * h, _MM_HINT_T0);"
                " _mm_prefetch((const char *)k%d + 210 * %d + 64 * h + 128, _MM_HINT_T0);"
                " _mm_prefetch((const char *)k%d + %d * rs + 128 * h, _MM_HINT_T0);"
                " _mm_prefetch((const char *)k%d + %d * rs + 128 * h + 64, _MM_HINT_T0);"
                " _mm_prefetch((const char *)k%d + far + 128 * h, _MM_HINT_T1);"
                " _mm_prefetch((const char *)k%d + far + 128 * h + 64, _MM_HINT_T1);\n",
                j, (sc->pf + 7) / 8, j, (sc->pf + 7) / 8, j, nr, j, nr, j, j);
        OUT("      const __m512i L%d = _mm512_loadu_si512((const void *)(k%d + 64 * h));\n", j, j);
        OUT("      const __m256i Q%d = _mm256_loadu_si256((const __m256i *)(k%d + 128 + 32 * h));\n", j, j);
        OUT("      const __m512i H%d = _mm512_inserti64x4(_mm512_castsi256_si512(Q%d), _mm256_srli_epi16(Q%d, 2), 1);\n", j, j, j);
        OUT("      const __m512i wa%d = _mm512_or_si512(_mm512_and_si512(L%d, m4), _mm512_and_si512(_mm512_slli_epi16(H%d, 4), m30));\n", j, j, j);
        OUT("      const __m512i wb%d = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L%d, 4), m4), _mm512_and_si512(H%d, m30));\n", j, j, j);
        OUT("      const __m512 sa%d = _mm512_permutexvar_ps(_mm512_add_epi32(_mm512_set1_epi32(8 * h),"
            " _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0)), sv%d);\n", j, j);
        OUT("      const __m512 sb%d = _mm512_permutexvar_ps(_mm512_add_epi32(_mm512_set1_epi32(8 * h),"
            " _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4)), sv%d);\n", j, j);
    }
    for (int i = 0; i < mr; i++) {
        OUT("      { const __m512i xa = _mm512_loadu_si512((const void *)(qa[%d] + 32 * (c0 + 4 * h)));\n", i);
        OUT("        const __m512i xb = _mm512_loadu_si512((const void *)(qa[%d] + 32 * (c0 + 4 * h + 2)));\n", i);
        OUT("        const __m512i za = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_loadu_si512((const void *)&l8[%d][c0 + 4 * h]), 5));\n", i);
        OUT("        const __m512i zb = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_loadu_si512((const void *)&l8[%d][c0 + 4 * h + 2]), 5));\n", i);
        for (int j = 0; j < nr; j++) {
            OUT("        b%d_%d = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(za, wa%d, xa)), sa%d, b%d_%d);\n", i, j, j, j, i, j);
            OUT("        b%d_%d = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zb, wb%d, xb)), sb%d, b%d_%d);\n", i, j, j, j, i, j);
        }
        OUT("      }\n");
    }
    OUT("    }\n");
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) OUT("    c%d_%d = _mm512_fmadd_ps(b%d_%d, _mm512_set1_ps(sa[%d][c0]), c%d_%d);\n", i, j, i, j, i, i, j);
    OUT("  }\n  (void)qsum;\n");
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) OUT("  res[%d] = _mm512_reduce_add_ps(c%d_%d);\n", i * nr + j, i, j);
    OUT("}\n\n");
}

/* one 32-element block c of a 32-element format (q8_0, q4_0, q5_0) for
 * the tile's rows: kci_<dt> gives its 32 weight bytes and scale; one 256-bit
 * vpdpbusd per row pair (q8_0: |w| against A with w's signs; q4_0, q5_0:
 * minus the zero point times A's lane sums), scaled by d x A's scale into
 * the f32 accumulators c<i>_<j> */
static void emit_chunk256(kiln_dtype t, int mr, int nr, char **s, size_t *len, size_t *cap) {
    int zs = zero_shift(t);
    for (int j = 0; j < nr; j++) {
        OUT("    __m256i w%d; __m256 s%d; float n%d; kci_%s(w[%d], c, &w%d, &s%d, &n%d); (void)n%d;\n", j, j, j, tag(t), j, j, j, j, j);
        if (zs < 0) OUT("    const __m256i a%d = _mm256_abs_epi8(w%d);\n", j, j);
    }
    for (int i = 0; i < mr; i++) {
        OUT("    { const __m256i x = _mm256_loadu_si256((const __m256i *)(qa[%d] + 32 * c)); const float xs = sa[%d][c];\n", i, i);
        if (zs > 0) OUT("      const __m256i z = _mm256_slli_epi32(_mm256_loadu_si256(&l8[%d][c]), %d);\n", i, zs);
        for (int j = 0; j < nr; j++) {
            if (zs < 0)
                OUT("      const __m256i p%d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), a%d, _mm256_sign_epi8(x, w%d));\n", j, j, j);
            else OUT("      const __m256i p%d = _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), w%d, x), z);\n", j, j);
            OUT("      c%d_%d = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p%d), _mm256_mul_ps(s%d, _mm256_set1_ps(xs)), c%d_%d);\n", i, j, j, j,
                i, j);
        }
        OUT("    }\n");
    }
}

/* q8_0, q4_0, q5_0, two 32-element blocks per zmm (one vpdpbusd per pair
 * of blocks and row pair instead of two 256-bit ones):
 *   - q8_0: the two blocks' 32 weight bytes side by side, A's 64 bytes as
 *     they are; signed, so dpbusd(|w|, x negated where w < 0);
 *   - q4_0, q5_0: the two blocks' 16 bytes of nibbles side by side, then
 *     their high nibbles: 128-bit lanes [b0 low, b1 low, b0 high, b1 high]
 *     (elements 0-15 of each block, then 16-31), so A's 64 bytes are
 *     permuted the same way (qwords 0 1 4 5 2 3 6 7, once per row of A,
 *     shared by the tile's rows), and so are its lane sums for the zero
 *     point, which start the accumulation (-8 or -16 * lane sums); q5_0's
 *     fifth bits are a 64-bit mask in that lane order, added as 16.
 * The int32 lanes are scaled by d of their block times A's scale of that
 * block (lanes [d0 x8, d1 x8], or [d0 x4, d1 x4, d0 x4, d1 x4]). An odd
 * last block runs as one 256-bit block (kci_<dt>). Prefetch: per pair, the
 * block pf ahead and the next tile's rows into L1, ~32 KiB ahead into L2. */
static void emit_block32_wide_tile(kiln_dtype t, const sch_contract_sched *sc, const char *name, char **s, size_t *len,
                                   size_t *cap) {
    int mr = sc->mr, nr = sc->nr, bb = bytes_per_32(t), nib = t != KILN_Q8_0;
    OUT("static KVNNI void %s(const int8_t *const *qa, const float *const *sa, const __m256i *const *l8,\n"
        "    const int32_t *const *qsum, const char *const *pp, const void *const *w, int64_t nch, float *res) {\n",
        name);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) OUT("  __m512 z%d_%d = _mm512_setzero_ps(); __m256 c%d_%d = _mm256_setzero_ps(); float m%d_%d = 0.0f;\n", i, j, i, j, i, j);
    OUT("  const __m512i sp = %s;\n",
        nib ? "_mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0)"
            : "_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)");
    if (nib) OUT("  const __m512i m4 = _mm512_set1_epi8(15);\n");
    if (t == KILN_Q5_0) OUT("  const __m512i v16 = _mm512_set1_epi8(16);\n");
    if (sc->pf > 0) emit_row_stride(t, nr, s, len, cap);
    OUT("  int64_t c = 0;\n");
    OUT("  for (; c + 2 <= nch; c += 2) {\n");
    for (int j = 0; j < nr; j++) {
        OUT("    const uint8_t *b%d = (const uint8_t *)w[%d] + %d * c;\n", j, j, bb);
        if (sc->pf > 0)
            OUT("    _mm_prefetch((const char *)b%d + %d, _MM_HINT_T0); _mm_prefetch((const char *)b%d + %d * rs, _MM_HINT_T0);"
                " _mm_prefetch((const char *)b%d + far, _MM_HINT_T1);\n",
                j, bb * sc->pf, j, nr, j);
        /* a pair of q8_0 blocks is 68 bytes: one hint per pair would skip a line in 16 */
        if (sc->pf > 0 && t == KILN_Q8_0)
            OUT("    _mm_prefetch((const char *)b%d + %d, _MM_HINT_T0); _mm_prefetch((const char *)b%d + %d * rs + 64, _MM_HINT_T0);"
                " _mm_prefetch((const char *)b%d + far + 64, _MM_HINT_T1);\n",
                j, bb * sc->pf + 64, j, nr, j);
        OUT("    uint16_t h%d[2]; memcpy(&h%d[0], b%d, 2); memcpy(&h%d[1], b%d + %d, 2);\n", j, j, j, j, j, bb);
        OUT("    const __m512 d%d = _mm512_permutexvar_ps(sp, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128((int)(h%d[0] | (uint32_t)h%d[1] << 16)))));\n",
            j, j, j);
        if (t == KILN_Q8_0) {
            OUT("    const __m512i w%d = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b%d + 2))),"
                " _mm256_loadu_si256((const __m256i *)(b%d + %d)), 1);\n", j, j, j, bb + 2);
            OUT("    const __m512i a%d = _mm512_abs_epi8(w%d); const __mmask64 n%d = _mm512_movepi8_mask(w%d);\n", j, j, j, j);
        } else {
            int off = t == KILN_Q5_0 ? 6 : 2;
            OUT("    const __m256i y%d = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(b%d + %d))),"
                " _mm_loadu_si128((const __m128i *)(b%d + %d)), 1);\n", j, j, off, j, bb + off);
            OUT("    __m512i w%d = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(y%d), _mm256_srli_epi16(y%d, 4), 1), m4);\n",
                j, j, j);
            if (t == KILN_Q5_0) {
                OUT("    { uint32_t q0, q1; memcpy(&q0, b%d + 2, 4); memcpy(&q1, b%d + %d, 4);\n", j, j, bb + 2);
                /* [q0 low 16, q1 low 16, q0 high 16, q1 high 16] by two bit deposits */
                OUT("      const __mmask64 hm = (__mmask64)(_pdep_u64(q0, 0x0000ffff0000ffffull) | _pdep_u64(q1, 0xffff0000ffff0000ull));\n");
                OUT("      w%d = _mm512_mask_add_epi8(w%d, hm, w%d, v16); }\n", j, j, j);
            }
        }
    }
    for (int i = 0; i < mr; i++) {
        if (nib) {
            /* A's side of the pair, arranged once per call (kcq_pairs) */
            OUT("    { const char *ap%d = pp[%d] + 96 * c;\n", i, i);
            OUT("      const __m512 xs = _mm512_load_ps((const void *)(ap%d + 128));\n", i);
            OUT("      const __m512i x = _mm512_load_si512((const void *)ap%d);\n", i);
            OUT("      const __m512i z = _mm512_load_si512((const void *)(ap%d + 64));\n", i);
        } else {
            OUT("    { const __m512 xs = _mm512_permutexvar_ps(sp, _mm512_castps128_ps512(_mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(sa[%d] + c)))));\n", i);
            OUT("      const __m512i x = _mm512_loadu_si512((const void *)(qa[%d] + 32 * c));\n", i);
        }
        for (int j = 0; j < nr; j++) {
            if (nib) OUT("      const __m512i p%d = _mm512_dpbusd_epi32(z, w%d, x);\n", j, j);
            else OUT("      const __m512i p%d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), a%d, _mm512_mask_sub_epi8(x, n%d, _mm512_setzero_si512(), x));\n", j, j, j);
            OUT("      z%d_%d = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p%d), _mm512_mul_ps(d%d, xs), z%d_%d);\n", i, j, j, j, i, j);
        }
        OUT("    }\n");
    }
    OUT("  }\n");
    /* the odd last block, 256 bits wide */
    OUT("  for (; c < nch; c++) {\n");
    emit_chunk256(t, mr, nr, s, len, cap);
    OUT("  }\n");
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            OUT("  c%d_%d = _mm256_add_ps(c%d_%d, _mm256_add_ps(_mm512_castps512_ps256(z%d_%d), _mm512_extractf32x8_ps(z%d_%d, 1)));\n", i, j,
                i, j, i, j, i, j);
    OUT("  (void)qsum;\n");
    emit_results(mr, nr, s, len, cap);
}

/* the tile reading B's 8-row interleaved copy (rp=1, sched/repack_layout.h):
 * mr rows of A against one group's 8 rows, a 256-bit accumulator per row of
 * A whose lane r is B row r. Per block: the 8 rows' scales by one cvtph;
 * the 8 steps, each a 4-byte lane per B row of unsigned weights (q4_0,
 * q5_0: the 4 x 32 nibble bytes, low nibbles steps 0-3, high 4-7, q5_0
 * adding 16 where step t's mask has a bit; q8_0: 8 x 32 bytes stored + 128);
 * one vpdpbusd per step against A's 4 bytes of the step broadcast, started
 * from minus the zero point (8, 16, 128) times A's block sum (the same for
 * all 8 rows); then scaled by d x A's scale into f32. */
void cg_i8_rp_tile_name(kiln_dtype t, const sch_contract_sched *sc, char *buf, size_t bufcap) {
    int n = snprintf(buf, bufcap, "kcr_%s_%dx8_p%d", tag(t), sc->mr, sc->pf);
    if (sc->pf2 > 0 && n > 0 && (size_t)n < bufcap) snprintf(buf + n, bufcap - (size_t)n, "_f%d", sc->pf2);
}

/* every rp tile's signature: A's rows, scales, 4-value lane sums and block
 * sums (the mr = 1 tiles read row 0), the group's records, chunks, 8 results */
static void emit_rp_signature(const char *name, char **s, size_t *len, size_t *cap) {
    OUT("static KVNNI void %s(const int8_t *const *qa, const float *const *sa, const __m256i *const *l8,\n"
        "    const int32_t *const *qsum, const uint8_t *g, int64_t nch, float *res) {\n", name);
}

/* software prefetch of the 3 lines `ahead` bytes on from the record at p
 * (g or h) into L1 (hint T0) or L2 (T1) */
static void emit_rp_lines3(const char *p, int ahead, const char *hint, char **s, size_t *len, size_t *cap) {
    OUT("    _mm_prefetch((const char *)%s + %d, %s); _mm_prefetch((const char *)%s + %d, %s);"
        " _mm_prefetch((const char *)%s + %d, %s);\n", p, ahead, hint, p, ahead + 64, hint, p, ahead + 128, hint);
}

/* the rp tiles' two prefetch levels (sch_contract_sched pf, pf2): B's
 * lines `near` bytes ahead into L1, and, with pf2, the same lines `far`
 * bytes ahead into L2 first. One level stalled where dequantisation is
 * heavy: q4_k decode from DRAM at 1 thread (Intel Xeon with AMX, 8-row
 * tile, pf=8) 12.2 GB/s with L1 prefetch alone, 14.3 with L2 at twice the
 * distance as well; the device's read is 16.9 GB/s */
static void emit_rp_prefetch3(const sch_contract_sched *sc, int near, int far, char **s, size_t *len, size_t *cap) {
    if (sc->pf > 0) emit_rp_lines3("g", near, "_MM_HINT_T0", s, len, cap);
    if (sc->pf2 > 0) emit_rp_lines3("g", far, "_MM_HINT_T1", s, len, cap);
}

/* one line of a record, near (T0) and, with pf2, far (T1) */
static void emit_rp_line(const sch_contract_sched *sc, int near, int far, int off, char **s, size_t *len, size_t *cap) {
    if (sc->pf > 0) OUT("      _mm_prefetch((const char *)g + %d, _MM_HINT_T0);\n", near + off);
    if (sc->pf2 > 0) OUT("      _mm_prefetch((const char *)g + %d, _MM_HINT_T1);\n", far + off);
}

int cg_i8_rp_bytes32(kiln_dtype t) { return t == KILN_Q4_K ? 1184 / 8 : t == KILN_Q6_K ? 1680 / 8 : 8 * bytes_per_32(t); }

/* q4_k's copy (1184-byte records per 256 of K, sched/repack_layout.h): per
 * sub-block pair p, 8 steps of 32 bytes whose low nibbles are sub-block
 * 2p's and high nibbles 2p+1's 4-value lanes of the 8 rows; each
 * sub-block's dot products times the rows' 6-bit scales summed as int32
 * over the block, and the minimum term as the rows' mins times A's
 * sub-block sums; then d x A's scale and dmin x A's scale into f32. A is
 * quantised per 256 (cg_i8_group): one scale per block, sa[c].
 * mr rows of A (1-4) share each step's load and nibble masks; a row's
 * integer sums are exact whatever their order (one or two dpbusd chains
 * per sub-block), and its two f32 steps per block are the same
 * instructions in the same order for every mr, so row i's result is bit
 * for bit the 1-row tile's. */
static void emit_q4k_rp_tile(const sch_contract_sched *sc, const char *name, char **s, size_t *len, size_t *cap) {
    const int mr = sc->mr, two = mr <= 2; /* two dpbusd chains per sub-block and row (latency) when few rows */
    emit_rp_signature(name, s, len, cap);
    OUT("  (void)l8;\n");
    OUT("  const __m256i m4 = _mm256_set1_epi8(15);\n");
    for (int i = 0; i < mr; i++) OUT("  __m256 c%d = _mm256_setzero_ps();\n", i);
    OUT("  for (int64_t c = 0; c < nch; c += 8, g += 1184) {\n");
    int ahead = 1184 * ((sc->pf + 7) / 8), far = 1184 * ((sc->pf2 + 7) / 8);
    emit_rp_prefetch3(sc, ahead, far, s, len, cap);
    for (int i = 0; i < mr; i++) {
        OUT("    const int8_t *x%d = qa[%d] + 32 * c; const int32_t *z%d = qsum[%d] + c;\n", i, i, i, i);
        /* the minimum term: sum over sub-blocks j of min[j][r] * sum(A's sub-block j) */
        OUT("    __m256i ms%d = _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(g + 96))),"
            " _mm256_set1_epi32(z%d[0]));\n", i, i);
        for (int j = 1; j < 8; j++)
            OUT("    ms%d = _mm256_add_epi32(ms%d, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(g + %d))),"
                " _mm256_set1_epi32(z%d[%d])));\n", i, i, 96 + 8 * j, i, j);
        OUT("    __m256i is%d = _mm256_setzero_si256();\n", i);
    }
    for (int p = 0; p < 4; p++) {
        const int q0 = 160 + 256 * p;
        OUT("    {\n");
        for (int i = 0; i < mr; i++) {
            OUT("      __m256i pl%d = _mm256_setzero_si256(), ph%d = pl%d;\n", i, i, i);
            if (two) OUT("      __m256i ql%d = pl%d, qh%d = pl%d;\n", i, i, i, i);
        }
        for (int l = 0; l < 4; l++) emit_rp_line(sc, ahead, far, q0 + 64 * l, s, len, cap);
        for (int t = 0; t < 8; t++) {
            OUT("      { const __m256i y = _mm256_loadu_si256((const __m256i *)(g + %d));\n", q0 + 32 * t);
            OUT("        const __m256i lo = _mm256_and_si256(y, m4), hi = _mm256_and_si256(_mm256_srli_epi16(y, 4), m4);\n");
            for (int i = 0; i < mr; i++) {
                const char *cl = two && t % 2 ? "ql" : "pl", *ch = two && t % 2 ? "qh" : "ph";
                OUT("        %s%d = _mm256_dpbusd_epi32(%s%d, lo, _mm256_broadcastd_epi32(_mm_loadu_si32(x%d + %d)));\n", cl, i,
                    cl, i, i, 64 * p + 4 * t);
                OUT("        %s%d = _mm256_dpbusd_epi32(%s%d, hi, _mm256_broadcastd_epi32(_mm_loadu_si32(x%d + %d)));\n", ch, i,
                    ch, i, i, 64 * p + 32 + 4 * t);
            }
            OUT("      }\n");
        }
        for (int i = 0; i < mr; i++)
            for (int h = 0; h < 2; h++) {
                const char *a0 = h ? "ph" : "pl", *a1 = h ? "qh" : "ql";
                if (two)
                    OUT("      is%d = _mm256_add_epi32(is%d, _mm256_mullo_epi32(_mm256_add_epi32(%s%d, %s%d),"
                        " _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(g + %d)))));\n", i, i, a0, i, a1, i,
                        32 + 8 * (2 * p + h));
                else
                    OUT("      is%d = _mm256_add_epi32(is%d, _mm256_mullo_epi32(%s%d,"
                        " _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(g + %d)))));\n", i, i, a0, i,
                        32 + 8 * (2 * p + h));
            }
        OUT("    }\n");
    }
    OUT("    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g)),"
        " dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16)));\n");
    for (int i = 0; i < mr; i++) {
        OUT("    { const __m256 xs = _mm256_set1_ps(sa[%d][c]);\n", i);
        OUT("      c%d = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is%d), _mm256_mul_ps(d, xs), c%d);\n", i, i, i);
        OUT("      c%d = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms%d), _mm256_mul_ps(dm, xs), c%d); }\n", i, i, i);
    }
    OUT("  }\n");
    for (int i = 0; i < mr; i++) OUT("  _mm256_storeu_ps(res + %d, c%d);\n", 8 * i, i);
    OUT("}\n\n");
}

/* q6_k's copy (1680-byte records per 256 of K, sched/repack_layout.h): per
 * 32-value chunk pair p and step t, the low 4 bits from the nibble lanes
 * (chunk 2p low, 2p+1 high) and the top 2 from the high-bit lanes of chunk
 * quad p / 2 (chunk 4Q + k at bits 2k), both read in address order (with
 * the high bits 1 KB away from the nibbles they complete, the copy streamed
 * from memory at 7 GB/s on one Zen 4 thread), so each step is an unsigned 6-bit
 * lane per row; per 16-value sub-block the dot products less 32 x A's
 * 16-value sum (the zero point; from A's 4-value lane sums l8) times the
 * rows' int8 scales, summed as int32 over the block; then d x A's scale.
 * A is quantised per 256 (cg_i8_group): one scale per block, sa[c].
 * mr rows of A (1-4) share each step's weights; a row's integer sums are
 * exact in any order and its f32 step per block is the 1-row tile's, so
 * row i's result is bit for bit the 1-row tile's. */
static void emit_q6k_rp_tile(const sch_contract_sched *sc, const char *name, char **s, size_t *len, size_t *cap) {
    static const char *hshift[4] = {"_mm256_slli_epi16(hb, 4)", "_mm256_slli_epi16(hb, 2)", "hb", "_mm256_srli_epi16(hb, 2)"};
    const int mr = sc->mr;
    emit_rp_signature(name, s, len, cap);
    OUT("  (void)qsum;\n");
    OUT("  const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);\n");
    for (int i = 0; i < mr; i++) OUT("  __m256 c%d = _mm256_setzero_ps();\n", i);
    OUT("  for (int64_t c = 0; c < nch; c += 8, g += 1680) {\n");
    for (int i = 0; i < mr; i++)
        OUT("    const int8_t *x%d = qa[%d] + 32 * c; const __m256i *l%d = l8[%d] + c; __m256i is%d = _mm256_setzero_si256();\n",
            i, i, i, i, i);
    int ahead = 1680 * ((sc->pf + 7) / 8), far = 1680 * ((sc->pf2 + 7) / 8);
    emit_rp_prefetch3(sc, ahead, far, s, len, cap);
    for (int p = 0; p < 4; p++) {
        /* quad Q = p / 2 at 144 + 768 Q: per step t its high bits and pair
         * 2Q's nibbles (64 bytes), then pair 2Q+1's nibbles per step */
        const int qb = 144 + 768 * (p / 2), k = 2 * (p % 2);
        const int q0 = p % 2 ? qb + 512 : qb + 32, qs = p % 2 ? 32 : 64, h0 = qb;
        OUT("    {\n");
        for (int i = 0; i < mr; i++) OUT("      __m256i a0_%d = _mm256_setzero_si256(), a1_%d = a0_%d, b0_%d = a0_%d, b1_%d = a0_%d;\n",
                                         i, i, i, i, i, i, i);
        for (int ln = 0; ln < (p % 2 ? 4 : 8); ln++) /* the lines the pair reads first */
            emit_rp_line(sc, ahead, far, (p % 2 ? qb + 512 : qb) + 64 * ln, s, len, cap);
        for (int t = 0; t < 8; t++) {
            OUT("      { const __m256i y = _mm256_loadu_si256((const __m256i *)(g + %d)), hb = _mm256_loadu_si256((const __m256i *)(g + %d));\n",
                q0 + qs * t, h0 + 64 * t);
            OUT("        const __m256i wl = _mm256_or_si256(_mm256_and_si256(y, m4), _mm256_and_si256(%s, m30));\n", hshift[k]);
            OUT("        const __m256i wh = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(y, 4), m4), _mm256_and_si256(%s, m30));\n",
                hshift[k + 1]);
            for (int i = 0; i < mr; i++) {
                OUT("        %s_%d = _mm256_dpbusd_epi32(%s_%d, wl, _mm256_broadcastd_epi32(_mm_loadu_si32(x%d + %d)));\n",
                    t < 4 ? "a0" : "a1", i, t < 4 ? "a0" : "a1", i, i, 64 * p + 4 * t);
                OUT("        %s_%d = _mm256_dpbusd_epi32(%s_%d, wh, _mm256_broadcastd_epi32(_mm_loadu_si32(x%d + %d)));\n",
                    t < 4 ? "b0" : "b1", i, t < 4 ? "b0" : "b1", i, i, 64 * p + 32 + 4 * t);
            }
            OUT("      }\n");
        }
        for (int i = 0; i < mr; i++)
            for (int h = 0; h < 2; h++) {
                /* chunk 2p + h: its two 16-value sums of A, times 32, in every lane */
                OUT("      { __m256i u = _mm256_hadd_epi32(l%d[%d], l%d[%d]); u = _mm256_slli_epi32(_mm256_hadd_epi32(u, u), 5);\n",
                    i, 2 * p + h, i, 2 * p + h);
                OUT("        is%d = _mm256_add_epi32(is%d, _mm256_mullo_epi32(_mm256_sub_epi32(%s0_%d, _mm256_permute2x128_si256(u, u, 0x00)),"
                    " _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(g + %d)))));\n", i, i, h ? "b" : "a", i,
                    16 + 8 * (4 * p + 2 * h));
                OUT("        is%d = _mm256_add_epi32(is%d, _mm256_mullo_epi32(_mm256_sub_epi32(%s1_%d, _mm256_permute2x128_si256(u, u, 0x11)),"
                    " _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(g + %d))))); }\n", i, i, h ? "b" : "a", i,
                    16 + 8 * (4 * p + 2 * h + 1));
            }
        OUT("    }\n");
    }
    OUT("    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));\n");
    for (int i = 0; i < mr; i++)
        OUT("    c%d = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is%d), _mm256_mul_ps(d, _mm256_set1_ps(sa[%d][c])), c%d);\n", i, i, i, i);
    OUT("  }\n");
    for (int i = 0; i < mr; i++) OUT("  _mm256_storeu_ps(res + %d, c%d);\n", 8 * i, i);
    OUT("}\n\n");
}

void cg_emit_i8_rp_tile(kiln_dtype t, const sch_contract_sched *sc, char **s, size_t *len, size_t *cap) {
    char name[64];
    cg_i8_rp_tile_name(t, sc, name, sizeof name);
    if (t == KILN_Q4_K || t == KILN_Q6_K) {
        (t == KILN_Q4_K ? emit_q4k_rp_tile : emit_q6k_rp_tile)(sc, name, s, len, cap);
        return;
    }
    int mr = sc->mr, q5 = t == KILN_Q5_0, q8 = t == KILN_Q8_0, rec = 8 * bytes_per_32(t), nib = q5 ? 48 : 16;
    int zero = q8 ? 128 : q5 ? 16 : 8;
    emit_rp_signature(name, s, len, cap);
    OUT("  (void)l8;\n");
    if (!q8) OUT("  const __m256i m4 = _mm256_set1_epi8(15);\n");
    if (q5) OUT("  const __m256i v16 = _mm256_set1_epi8(16);\n");
    for (int i = 0; i < mr; i++) OUT("  __m256 c%d = _mm256_setzero_ps();\n", i);
    OUT("  for (int64_t c = 0; c < nch; c++, g += %d) {\n", rec);
    emit_rp_prefetch3(sc, rec * sc->pf, rec * sc->pf2, s, len, cap);
    /* straight-line code (gcc -O2 kept loops over a w[8] array on the
     * stack), two independent dpbusd chains per row of A, A's dwords
     * broadcast from memory (through a general register they cost 2 uops
     * each: 34 -> 49 GB/s from L2 on Zen 4) */
    OUT("    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));\n");
    for (int q = 0; q < 8 && q8; q++) OUT("    const __m256i w%d = _mm256_loadu_si256((const __m256i *)(g + %d));\n", q, 16 + 32 * q);
    for (int q = 0; q < 4 && !q8; q++) {
        OUT("    const __m256i y%d = _mm256_loadu_si256((const __m256i *)(g + %d));\n", q, nib + 32 * q);
        OUT("    __m256i w%d = _mm256_and_si256(y%d, m4), w%d = _mm256_and_si256(_mm256_srli_epi16(y%d, 4), m4);\n", q,
            q, q + 4, q);
    }
    if (q5)
        for (int q = 0; q < 8; q++)
            OUT("    { uint32_t k; memcpy(&k, g + %d, 4); w%d = _mm256_mask_add_epi8(w%d, (__mmask32)k, w%d, v16); }\n",
                16 + 4 * q, q, q, q);
    for (int i = 0; i < mr; i++) {
        OUT("    { const int8_t *x = qa[%d] + 32 * c;\n", i);
        OUT("      __m256i p = _mm256_set1_epi32(-(qsum[%d][c] * %d)), u = _mm256_setzero_si256();\n", i, zero);
        for (int q = 0; q < 8; q += 2)
            OUT("      p = _mm256_dpbusd_epi32(p, w%d, _mm256_broadcastd_epi32(_mm_loadu_si32(x + %d)));"
                " u = _mm256_dpbusd_epi32(u, w%d, _mm256_broadcastd_epi32(_mm_loadu_si32(x + %d)));\n", q, 4 * q,
                q + 1, 4 * q + 4);
        OUT("      c%d = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(p, u)), _mm256_mul_ps(d, _mm256_set1_ps(sa[%d][c])),"
            " c%d); }\n", i, i, i);
    }
    OUT("  }\n");
    for (int i = 0; i < mr; i++) OUT("  _mm256_storeu_ps(res + %d, c%d);\n", 8 * i, i);
    OUT("}\n\n");
}

int cg_i8_rp16_ok(kiln_dtype t) { return t == KILN_Q8_0 || t == KILN_Q4_0 || t == KILN_Q5_0; }

void cg_i8_rp16_tile_name(kiln_dtype t, const sch_contract_sched *sc, char *buf, size_t bufcap) {
    int n = snprintf(buf, bufcap, "kcr_%s_%dx16_p%d", tag(t), sc->mr, sc->pf);
    if (sc->pf2 > 0 && n > 0 && (size_t)n < bufcap) snprintf(buf + n, bufcap - (size_t)n, "_f%d", sc->pf2);
}

/* two groups of the copy (16 B rows: g's 8 and the 8 at g + gstep) in
 * 512-bit registers, each group's 32 bytes of a step in one half, A's
 * dword broadcast to both: half the dot-product instructions of two calls
 * of the 8-row tile above, whose lane-wise arithmetic each half repeats
 * (integer sums, then the same convert, multiply and fused add per lane),
 * so a row's results are the 8-row tile's bit for bit */
void cg_emit_i8_rp16_tile(kiln_dtype t, const sch_contract_sched *sc, char **s, size_t *len, size_t *cap) {
    char name[64];
    cg_i8_rp16_tile_name(t, sc, name, sizeof name);
    int mr = sc->mr, q5 = t == KILN_Q5_0, q8 = t == KILN_Q8_0, rec = 8 * bytes_per_32(t), nib = q5 ? 48 : 16;
    int zero = q8 ? 128 : q5 ? 16 : 8;
    OUT("static KVNNI __attribute__((target(\"avx512f,avx512bw\"))) void %s(const int8_t *const *qa, const float *const *sa,\n"
        "    const __m256i *const *l8, const int32_t *const *qsum, const uint8_t *g, int64_t gstep, int64_t nch, float *res) {\n",
        name);
    OUT("  (void)l8;\n");
    if (!q8) OUT("  const __m512i m4 = _mm512_set1_epi8(15);\n");
    if (q5) OUT("  const __m512i v16 = _mm512_set1_epi8(16);\n");
    for (int i = 0; i < mr; i++) OUT("  __m512 c%d = _mm512_setzero_ps();\n", i);
    OUT("  for (int64_t c = 0; c < nch; c++, g += %d) {\n", rec);
    OUT("    const uint8_t *h = g + gstep;\n");
    emit_rp_prefetch3(sc, rec * sc->pf, rec * sc->pf2, s, len, cap);
    if (sc->pf > 0) emit_rp_lines3("h", rec * sc->pf, "_MM_HINT_T0", s, len, cap);
    if (sc->pf2 > 0) emit_rp_lines3("h", rec * sc->pf2, "_MM_HINT_T1", s, len, cap);
    OUT("    const __m512 d = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)g)),"
        " _mm_loadu_si128((const __m128i *)h), 1));\n");
    for (int q = 0; q < 8 && q8; q++)
        OUT("    const __m512i w%d = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(g + %d))),"
            " _mm256_loadu_si256((const __m256i *)(h + %d)), 1);\n", q, 16 + 32 * q, 16 + 32 * q);
    for (int q = 0; q < 4 && !q8; q++) {
        OUT("    const __m512i y%d = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(g + %d))),"
            " _mm256_loadu_si256((const __m256i *)(h + %d)), 1);\n", q, nib + 32 * q, nib + 32 * q);
        OUT("    __m512i w%d = _mm512_and_si512(y%d, m4), w%d = _mm512_and_si512(_mm512_srli_epi16(y%d, 4), m4);\n", q,
            q, q + 4, q);
    }
    if (q5)
        for (int q = 0; q < 8; q++)
            OUT("    { uint32_t k0, k1; memcpy(&k0, g + %d, 4); memcpy(&k1, h + %d, 4);"
                " w%d = _mm512_mask_add_epi8(w%d, (__mmask64)k0 | ((__mmask64)k1 << 32), w%d, v16); }\n",
                16 + 4 * q, 16 + 4 * q, q, q, q);
    for (int i = 0; i < mr; i++) {
        OUT("    { const int8_t *x = qa[%d] + 32 * c;\n", i);
        OUT("      __m512i p = _mm512_set1_epi32(-(qsum[%d][c] * %d)), u = _mm512_setzero_si512();\n", i, zero);
        for (int q = 0; q < 8; q += 2)
            OUT("      p = _mm512_dpbusd_epi32(p, w%d, _mm512_broadcastd_epi32(_mm_loadu_si32(x + %d)));"
                " u = _mm512_dpbusd_epi32(u, w%d, _mm512_broadcastd_epi32(_mm_loadu_si32(x + %d)));\n", q, 4 * q,
                q + 1, 4 * q + 4);
        OUT("      c%d = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(p, u)), _mm512_mul_ps(d, _mm512_set1_ps(sa[%d][c])),"
            " c%d); }\n", i, i, i);
    }
    OUT("  }\n");
    for (int i = 0; i < mr; i++) OUT("  _mm512_storeu_ps(res + %d, c%d);\n", 16 * i, i);
    OUT("}\n\n");
}

void cg_i8_tile_name(kiln_dtype t, const sch_contract_sched *sc, char *buf, size_t bufcap) {
    snprintf(buf, bufcap, "kci8_%s_%dx%d_p%d", tag(t), sc->mr, sc->nr, sc->pf);
}

/* kci8_<dt>_<mr>x<nr>_p<pf>(qa rows, their scales, lane sums and sums, B
 * rows, chunks, results [mr][nr]) */
void cg_emit_i8_tile(kiln_dtype t, const sch_contract_sched *sc, char **s, size_t *len, size_t *cap) {
    char name[64];
    cg_i8_tile_name(t, sc, name, sizeof name);
    if (t == KILN_Q4_K) emit_q4k_wide_tile(sc, name, s, len, cap);
    else if (t == KILN_Q6_K) emit_q6k_wide_tile(sc, name, s, len, cap);
    else emit_block32_wide_tile(t, sc, name, s, len, cap); /* q8_0, q4_0, q5_0 */
}
