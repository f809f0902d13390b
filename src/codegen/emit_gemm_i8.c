/* emit_gemm_i8.c — the packed contraction form with int8 arithmetic
 * (SCH_FORM_PACKED + SCH_ARITH_I8): prompt-sized products of f32 activations
 * A (M x K) with block-format weights B (N rows of K), on vpdpbusd.
 * An approximation, like the dot form's int8 (emit_contract_i8.c) and
 * llama.cpp's default; flagged "(approximate)" in the kernel text.
 *
 * Per call of the kernel (one thread's run of work items):
 *   A: every row quantised once per batch point, per 32 elements:
 *      sa = max|a| / 127, qa = round(a / sa) (int8), the exact f32 sum of
 *      the 32 a's (for q4_k's minimums) and, per block of kb elements of B's
 *      scale (kb = 32; 16 for q6_k), zc = -o * sum(qa) (B's zero point o).
 * Per work item (B rows n0..n1) and K block [k0, k0 + kl):
 *   pack: B's columns into strips of nr, each 4 consecutive k of a column
 *         one 32-bit word, laid out [k/4][nr][4] (the VNNI operand order),
 *         as unsigned bytes q (q8_0: q + 128), with per-(block, column)
 *         scales d (f32) and, for q4_k, minimums dmin * m; for a weight
 *         the runtime keeps these strips (its pack copy, sched/repack_layout.h:
 *         K whole, bufs[2 nbufs + 1 + b]): the first launch fills them,
 *         item by item, and later launches read them instead of packing;
 *   kgi_<dt>_<mr>x<nr>: per block of kb: int32 s[mr][nr/16] = zc (broadcast
 *         per row), then per 4 k: s += dpbusd(strip row (uint8), broadcast
 *         4 bytes of qa (int8)); then f[mr][nr/16] += float(s) * (d * sa);
 *         q4_k also f -= (dmin * m) * sum(a).
 *   So sum_k a_k w_k ~ sum over blocks of sa * d * (sum_k qa_k q_k - o sum_k qa_k).
 *
 * Error: A's rounding only (at most sa/2 per element): |y - y_exact| <=
 * sum over A's 32-blocks of (sa/2) * sum |w| plus f32 noise; B's values are
 * exact (the same integers and scales as the reference's dequantisation).
 *
 * Invariants: K a multiple of 32 and every B row block-aligned, else the
 * item takes a scalar f32 loop (correct, slow, never taken by models);
 * strips are 64-byte aligned; nr a multiple of 16; 2*mr*(nr/16) + 2*(nr/16)
 * + 2 <= 32 zmm; kc a multiple of 32; nothing is written outside
 * [0, M) x [n0, n1); buffers are freed before the kernel returns.
 */
#include <stdio.h>
#include <string.h>

#include "contract.h"
#include "family.h"
#include "dtype.h"
#include "emit_gemm.h"
#include "emit_contract_i8.h"
#include "emit_gemm_i8.h"
#include "emit_gemm_amx_bf16.h"
#include "../sched/repack_layout.h"

#define OUT(...) sch_appendf(s, len, cap, __VA_ARGS__)

#define GI_MAX_MR SCH_PACKED_I8_MAX_MR

/* the int8 forms' dtype facts, from dtype_table: the name (NULL: not an
 * int8-form dtype), B's zero point as stored in the strip (signed quants
 * shifted by 128; q4_k: 0, the minimum term instead), elements per B scale */
static const char *gi_tag(kiln_dtype t) { return dtype_name_if(t, DT_INT8); }
static int gi_zero(kiln_dtype t) { return dtype_table[t].flags & DT_QSIGNED ? 128 : dtype_table[t].qzero; }
static int gi_kb(kiln_dtype t) { return dtype_table[t].scale_elems; }

int cg_i8_zero(kiln_dtype t) { return gi_zero(t); }
const char *cg_i8_tag(kiln_dtype t) { return gi_tag(t); }
int cg_i8_kb(kiln_dtype t) { return gi_kb(t); }

static const char *gi_prelude =
    "/* packed int8 contraction helpers (emit_gemm_i8.c) */\n"
    "KI __m512i kgi_b4(const int8_t *p) { int32_t x; memcpy(&x, p, 4); return _mm512_set1_epi32(x); }\n"
    /* one row of A: int8 per 32 with scale sa, zero-point terms zc per kb,
     * and exact sums sm (q4_k's minimums; NULL: not wanted, and the
     * reduction that makes them is not done) */
    "static __attribute__((unused)) void kgq_row(const float *a, int64_t K, int kb, int o, int8_t *qa, float *sa,\n"
    "    int32_t *zc, float *sm) {\n"
    "  for (int64_t c = 0; c < K / 32; c++) {\n"
    "    const __m512 x0 = _mm512_loadu_ps(a + 32 * c), x1 = _mm512_loadu_ps(a + 32 * c + 16);\n"
    "    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));\n"
    "    const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);\n"
    "    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, id)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, id));\n"
    "    _mm_storeu_si128((__m128i *)(qa + 32 * c), _mm512_cvtsepi32_epi8(q0));\n"
    "    _mm_storeu_si128((__m128i *)(qa + 32 * c + 16), _mm512_cvtsepi32_epi8(q1));\n"
    "    sa[c] = amax / 127.0f;\n"
    "    if (sm) sm[c] = _mm512_reduce_add_ps(_mm512_add_ps(x0, x1));\n"
    "    if (kb == 32) zc[c] = -o * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));\n"
    "    else { zc[2 * c] = -o * _mm512_reduce_add_epi32(q0); zc[2 * c + 1] = -o * _mm512_reduce_add_epi32(q1); }\n"
    "  }\n"
    "}\n";

/* kgb_<dt>(W, per-column element offsets at r = 0 (block-aligned), strip
 * width (a multiple of 16), k0, kl (multiples of 32), strip bytes, scales,
 * minimums). Sixteen columns at a time: each column's chunk of 32 bytes is
 * eight 4-byte groups; the 16 x 8 groups are transposed in registers (two
 * columns per zmm, an 8x8 dword transpose in each 256-bit half by
 * unpacks, then 128-bit lanes gathered with permutex2var) into eight 64-byte
 * rows [group][16 columns][4], the strip's layout. */
/* kcx_<dt>(copy, groups, K, row, chunk c, ...): kci_<dt>'s result read from
 * B's 8-row interleaved copy (sched/repack_layout.h) instead of B: the
 * row's 4-byte lanes of the chunk are 32 bytes apart in its group's record,
 * gathered; q8_0's bytes are stored + 128 (flipped back to kci's int8),
 * q5_0's fifth bits are gathered back from the record's 8 step masks,
 * q4_k's scales and minimums are unpacked in the record */
static void emit_copy_reader(kiln_dtype t, char **s, size_t *len, size_t *cap) {
    const int kbc = SCH_REPACK_KBLOCK / 32; /* 32-element chunks per K-block of the copy */
    OUT("static __attribute__((unused)) void kcx_%s(const uint8_t *rpw, int64_t rpg, int64_t K, int64_t row, int64_t c,\n"
        "    __m256i *w, __m256 *ws, float *wm) {\n", gi_tag(t));
    OUT("  const int64_t qch = K / 32, c0 = c / %d * %d, nb = qch - c0 < %d ? qch - c0 : %d, r = row %% 8;\n", kbc, kbc,
        kbc, kbc);
    OUT("  const __m256i idx = _mm256_setr_epi32(0, 32, 64, 96, 128, 160, 192, 224);\n");
    if (t == KILN_Q8_0) {
        OUT("  const uint8_t *o = rpw + (c0 * rpg + row / 8 * nb + (c - c0)) * 272;\n");
        OUT("  *w = _mm256_xor_si256(_mm256_i32gather_epi32((const int *)(o + 16 + 4 * r), idx, 1), _mm256_set1_epi8((char)0x80));\n");
        OUT("  *ws = _mm256_set1_ps(kci_h(o + 2 * r)); *wm = 0.0f;\n}\n");
    } else if (t == KILN_Q5_0) { /* 176-byte records: d, the fifth bits' masks, the nibble lanes */
        OUT("  const uint8_t *o = rpw + (c0 * rpg + row / 8 * nb + (c - c0)) * 176;\n");
        OUT("  const __m128i q = _mm_i32gather_epi32((const int *)(o + 48 + 4 * r), _mm_setr_epi32(0, 32, 64, 96), 1);\n");
        OUT("  uint32_t qh = 0;\n");
        OUT("  for (int st = 0; st < 8; st++) { uint32_t m; memcpy(&m, o + 16 + 4 * st, 4); qh |= (m >> (4 * r) & 15u) << (4 * st); }\n");
        OUT("  const __m128i m4 = _mm_set1_epi8(15);\n");
        OUT("  const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));\n");
        OUT("  *w = _mm256_or_si256(nib, _mm256_and_si256(_mm256_movm_epi8((__mmask32)qh), _mm256_set1_epi8(16)));\n");
        OUT("  *ws = _mm256_set1_ps(kci_h(o + 2 * r)); *wm = 0.0f;\n}\n");
    } else { /* q4_k: 1184-byte records of 256 elements (8 chunks) */
        OUT("  const int sb = (int)(c %% 8);\n");
        OUT("  const uint8_t *o = rpw + (c0 * rpg + row / 8 * nb + (c - sb - c0)) * 148;\n");
        OUT("  __m256i q = _mm256_i32gather_epi32((const int *)(o + 160 + 256 * (sb / 2) + 4 * r), idx, 1);\n");
        OUT("  if (sb & 1) q = _mm256_srli_epi16(q, 4);\n");
        OUT("  *w = _mm256_and_si256(q, _mm256_set1_epi8(15));\n");
        OUT("  *ws = _mm256_set1_ps(kci_h(o + 2 * r) * (float)o[32 + 8 * sb + r]);\n");
        OUT("  *wm = kci_h(o + 16 + 2 * r) * (float)o[96 + 8 * sb + r];\n}\n");
    }
}

int cg_i8_copy_source(kiln_dtype t) { return t == KILN_Q8_0 || t == KILN_Q5_0 || t == KILN_Q4_K; }

static void emit_pack(kiln_dtype t, char **s, size_t *len, size_t *cap) {
    const char *tag = gi_tag(t);
    if (!tag) return;
    int be = dtype_table[t].block, bb = dtype_table[t].block_bytes, cx = cg_i8_copy_source(t);
    if (cx) emit_copy_reader(t, s, len, cap);
    /* rpw: B's 8-row interleaved copy (rpg groups of rows of K), or NULL:
     * rows it holds are read from it, so that B itself may go unread */
    OUT("static __attribute__((unused)) void kgb_%s(const void *W, const int64_t *wo, int nr, int64_t k0, int64_t kl,\n"
        "    uint8_t *restrict bq, float *restrict bs, float *restrict bm, const uint8_t *rpw, int64_t rpg, int64_t K) {\n",
        tag);
    if (!cx) OUT("  (void)rpw; (void)rpg; (void)K;\n");
    OUT("  const __m512i ilo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0), ihi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);\n");
    OUT("  for (int j0 = 0; j0 < nr; j0 += 16) {\n");
    OUT("    const void *row[16];\n");
    OUT("    for (int e = 0; e < 16; e++) row[e] = (const char *)W + (wo[j0 + e] / %d) * %d;\n", be, bb);
    OUT("    for (int64_t cl = 0; cl < kl / 32; cl++) {\n");
    OUT("      __m256i w[16];\n");
    OUT("      for (int e = 0; e < 16; e++) {\n");
    OUT("        __m256 ws; float wm;\n");
    if (cx)
        OUT("        if (rpw && wo[j0 + e] %% K == 0 && wo[j0 + e] / K / 8 < rpg) kcx_%s(rpw, rpg, K, wo[j0 + e] / K, k0 / 32 + cl, &w[e], &ws, &wm);\n"
            "        else ", tag);
    else OUT("        ");
    OUT("kci_%s(row[e], k0 / 32 + cl, &w[e], &ws, &wm);\n", tag);
    if (t == KILN_Q8_0) OUT("        w[e] = _mm256_xor_si256(w[e], _mm256_set1_epi8((char)0x80));\n");
    if (gi_kb(t) == 32) OUT("        bs[cl * nr + j0 + e] = _mm256_cvtss_f32(ws); bm[cl * nr + j0 + e] = wm;\n");
    else
        OUT("        bs[2 * cl * nr + j0 + e] = _mm256_cvtss_f32(ws);\n"
            "        bs[(2 * cl + 1) * nr + j0 + e] = _mm_cvtss_f32(_mm256_extractf128_ps(ws, 1)); (void)wm; (void)bm;\n");
    OUT("      }\n");
    OUT("      __m512i z[8], t[8], u[8];\n");
    OUT("      for (int e = 0; e < 8; e++) z[e] = _mm512_inserti64x4(_mm512_castsi256_si512(w[e]), w[e + 8], 1);\n");
    OUT("      for (int e = 0; e < 8; e += 2) {\n");
    OUT("        t[e] = _mm512_unpacklo_epi32(z[e], z[e + 1]); t[e + 1] = _mm512_unpackhi_epi32(z[e], z[e + 1]); }\n");
    OUT("      for (int h = 0; h < 2; h++) {\n");
    OUT("        u[4 * h + 0] = _mm512_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);\n");
    OUT("        u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);\n");
    OUT("        u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);\n");
    OUT("        u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]); }\n");
    /* u[g] (g < 4) holds group g of columns 0-3 and 8-11 in its even
     * 128-bit lanes and group g+4 in its odd ones; u[g+4] columns 4-7, 12-15 */
    OUT("      uint8_t *dst = bq + 4 * ((cl * 8) * nr + j0);\n");
    OUT("      for (int g = 0; g < 4; g++) {\n");
    OUT("        _mm512_storeu_si512((void *)(dst + 4 * (g * nr)), _mm512_permutex2var_epi64(u[g], ilo, u[g + 4]));\n");
    OUT("        _mm512_storeu_si512((void *)(dst + 4 * ((g + 4) * nr)), _mm512_permutex2var_epi64(u[g], ihi, u[g + 4])); }\n");
    OUT("    }\n  }\n}\n\n");
}

/* kgi_<dt>_<mr>x<nr>(qa rows at k0, their scales at k0/32, zero-point terms
 * at k0/kb, exact sums at k0/32, strip, scales, minimums, blocks of kb, out
 * rows, valid rows, valid columns, add to out instead of storing) */
static void emit_micro(kiln_dtype t, int mr, int nr, char **s, size_t *len, size_t *cap) {
    int nv = nr / 16, kb = gi_kb(t), zero = gi_zero(t), mins = t == KILN_Q4_K;
    const char *tag = gi_tag(t);
    if (!tag) return;
    OUT("static KVNNI __attribute__((unused, noinline)) void kgi_%s_%dx%d(const int8_t *const *qa, const float *const *sa,\n"
        "    const int32_t *const *zc, const float *const *sm, const uint8_t *restrict bq, const float *restrict bs,\n"
        "    const float *restrict bm, int64_t nb, float *const *c, int rows, int cols, int acc) {\n",
        tag, mr, nr);
    OUT("  (void)zc; (void)sm; (void)bm;\n");
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nv; j++) OUT("  __m512 f%d_%d = _mm512_setzero_ps();\n", i, j);
    OUT("  for (int64_t b = 0; b < nb; b++) {\n");
    OUT("    const uint8_t *bb = bq + b * %d;\n", kb * nr);
    /* B's zero point: each int32 sum starts at -o * sum(qa) of its row */
    for (int i = 0; i < mr; i++) {
        if (zero) OUT("    const __m512i z%d = _mm512_set1_epi32(zc[%d][b]);", i, i);
        else OUT("    const __m512i z%d = _mm512_setzero_si512();", i);
        for (int j = 0; j < nv; j++) OUT(" __m512i s%d_%d = z%d;", i, j, i);
        OUT("\n");
    }
    for (int g = 0; g < kb / 4; g++) {
        OUT("    {");
        for (int j = 0; j < nv; j++) OUT(" const __m512i b%d = _mm512_load_si512((const void *)(bb + %d));", j, g * nr * 4 + 64 * j);
        OUT("\n");
        for (int i = 0; i < mr; i++) {
            OUT("      { const __m512i x = kgi_b4(qa[%d] + b * %d + %d);", i, kb, 4 * g);
            for (int j = 0; j < nv; j++) OUT(" s%d_%d = _mm512_dpbusd_epi32(s%d_%d, b%d, x);", i, j, i, j, j);
            OUT(" }\n");
        }
        OUT("    }\n");
    }
    for (int j = 0; j < nv; j++) OUT("    const __m512 d%d = _mm512_loadu_ps(bs + b * %d + %d);\n", j, nr, 16 * j);
    for (int i = 0; i < mr; i++) {
        OUT("    { const __m512 xs = _mm512_set1_ps(sa[%d][%s]);", i, kb == 32 ? "b" : "b / 2");
        for (int j = 0; j < nv; j++)
            OUT(" f%d_%d = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s%d_%d), _mm512_mul_ps(d%d, xs), f%d_%d);", i, j, i, j, j, i, j);
        OUT(" }\n");
    }
    if (mins) {
        for (int j = 0; j < nv; j++) OUT("    const __m512 n%d = _mm512_loadu_ps(bm + b * %d + %d);\n", j, nr, 16 * j);
        for (int i = 0; i < mr; i++) {
            OUT("    { const __m512 xm = _mm512_set1_ps(sm[%d][b]);", i);
            for (int j = 0; j < nv; j++) OUT(" f%d_%d = _mm512_fnmadd_ps(n%d, xm, f%d_%d);", i, j, j, i, j);
            OUT(" }\n");
        }
    }
    OUT("  }\n");
    cg_emit_tile_store(mr, nv, "f", s, len, cap);
}

void cg_emit_packed_i8_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, int *i8_done, char **s,
                             size_t *len, size_t *cap) {
    if (!gi_tag(t)) return;
    int done[GI_MAX_MR + 1][4];
    memset(done, 0, sizeof done);
    int any = 0;
    for (int i = 0; i < n; i++) {
        const sch_contract_sched *sc = &scheds[i];
        /* the AMX form (emit_gemm_amx.c) shares the quantiser and packer */
        int amx = sc->form == SCH_FORM_AMX && sc->arith == SCH_ARITH_I8;
        if (!sch_family_is(sc, SCH_FAM_PACKED_I8, t) && !amx) continue;
        if (!any) {
            if (!(*i8_done & 1)) cg_emit_i8_prelude(s, len, cap);
            if (!(*i8_done & 2)) OUT("#include <stdlib.h>\n%s\n", gi_prelude);
            *i8_done |= 3;
            emit_pack(t, s, len, cap);
        }
        any = 1;
        if (amx || done[sc->mr][sc->nr / 16]) continue;
        done[sc->mr][sc->nr / 16] = 1;
        emit_micro(t, sc->mr, sc->nr, s, len, cap);
    }
}

static void out_sym(const sch_program *p, sym_id x, char **s, size_t *len, size_t *cap) {
    sch_print_sym(p, x, s, len, cap);
}

/* The shared quantised A (CG_KF_PREP / CG_KF_SHARED, emit_gemm_amx_bf16.h):
 * one scratch for all threads of R = 16 ceil(M / 16) + 32 rows (the PREP
 * launch's groups), rows M .. R-1 zero (AMX tiles load whole 16-row
 * blocks): qa R x K int8, then sa and the minimum sums (R x K/32 f32 each),
 * then the zero-point sums (R x K/kb int32),
 * each part 64-byte aligned. The kernel computes the offsets here
 * (emit_scratch_parts); its size is the family row's scratch (sched/family.c),
 * which the runtime allocates. */
static void emit_scratch_parts(const char *base, char **s, size_t *len, size_t *cap) {
    OUT("    const int64_t gq_r = (M + 15) / 16 * 16 + 32;\n");
    OUT("    const size_t gq_ra = ((size_t)(gq_r * K) + 64 + 63) / 64 * 64;\n");
    OUT("    const size_t gq_rs = (((size_t)(gq_r * (K / 32)) + 1) * sizeof(float) + 63) / 64 * 64;\n");
    OUT("    gq_a = (int8_t *)%s; gq_s = (float *)((char *)gq_a + gq_ra); gq_m = (float *)((char *)gq_s + gq_rs);"
        " gq_z = (int32_t *)((char *)gq_m + gq_rs);\n", base);
}

/* the declarations, and when the large-M schedule `big` is a packed or AMX
 * int8 form, the CG_KF_PREP launch's body: 16-row groups [lo, hi) of A
 * (two past M's last zeroed) quantised into the scratch B[nbufs], one batch
 * point (every other loop index 0), as the items would (the zero point:
 * 0 for AMX, whose B is made signed, else B's) */
void cg_emit_packed_i8_pre(const sch_program *p, const sch_kernel *k, const sch_contract_sched *big, char **s,
                           size_t *len, size_t *cap) {
    OUT("  int8_t *gq_a = NULL; float *gq_s = NULL, *gq_m = NULL; int32_t *gq_z = NULL; int64_t gq_o = -1;"
        " int gq_sh = 0;\n");
    const sch_contract *c = k->contract;
    kiln_dtype t = p->bufs[c->b_buf].dtype;
    if (!cg_i8_shared_a(t, big)) return;
    int kb = gi_kb(t), zero = big->form == SCH_FORM_AMX ? 0 : gi_zero(t);
    OUT("  if (flags & %d) {\n", CG_KF_PREP);
    char base[32];
    snprintf(base, sizeof base, "B[%d]", (int)p->nbufs);
    emit_scratch_parts(base, s, len, cap);
    for (int d = 0; d < k->ndim; d++)
        if (d != c->mdim && d != c->ndim) OUT("    const int64_t i%d = 0; (void)i%d;\n", d, d);
    OUT("    for (int64_t gq = lo; gq < hi; gq++)\n");
    OUT("      for (int64_t mq = 16 * gq; mq < 16 * gq + 16; mq++) {\n");
    OUT("        if (mq >= M) {\n");
    OUT("          memset(gq_a + mq * K, 0, (size_t)K); memset(gq_s + mq * (K / 32), 0, (size_t)(K / 32) * sizeof(float));\n");
    OUT("          memset(gq_m + mq * (K / 32), 0, (size_t)(K / 32) * sizeof(float));"
        " memset(gq_z + mq * (K / %d), 0, (size_t)(K / %d) * sizeof(int32_t));\n", kb, kb);
    OUT("          continue;\n        }\n");
    if (c->mdim >= 0) OUT("        const int64_t i%d = mq; (void)i%d;\n", c->mdim, c->mdim);
    OUT("        kgq_row(A + (");
    out_sym(p, c->a_base, s, len, cap);
    OUT("), K, %d, %d, gq_a + mq * K, gq_s + mq * (K / 32), gq_z + mq * (K / %d), %s);\n", kb, zero, kb,
        t == KILN_Q4_K ? "gq_m + mq * (K / 32)" : "NULL");
    OUT("      }\n    return 0;\n  }\n");
}

void cg_emit_packed_i8_post(char **s, size_t *len, size_t *cap) {
    OUT("  if (!gq_sh) { free(gq_a); free(gq_s); free(gq_m); free(gq_z); }\n");
}

int cg_i8_shared_a(kiln_dtype t, const sch_contract_sched *big) {
    return gi_tag(t) && big->arith == SCH_ARITH_I8 && (big->form == SCH_FORM_PACKED || big->form == SCH_FORM_AMX);
}

/* the fast path needs K in 32s and block-aligned B rows (be elements per
 * block); otherwise the item runs a scalar f32 loop through kdq_<tag> */
void cg_emit_block_item_begin(const sch_program *p, const sch_kernel *k, int be, const char *tag, char **s, size_t *len,
                              size_t *cap) {
    const sch_contract *c = k->contract;
    int md = c->mdim, nd = c->ndim;
    OUT("      {\n");
    OUT("        int fast = K %% 32 == 0 && K > 0;\n");
    OUT("        for (int64_t j = n0; fast && j < n1; j++) {\n");
    OUT("          const int64_t i%d = j; (void)i%d;\n", nd, nd);
    OUT("          if ((");
    out_sym(p, c->b_base, s, len, cap);
    OUT(") %% %d != 0) fast = 0;\n        }\n", be);
    OUT("        if (!fast) {\n");
    OUT("          for (int64_t mq = 0; mq < M; mq++) for (int64_t j = n0; j < n1; j++) {\n");
    if (md >= 0) OUT("            const int64_t i%d = mq; (void)i%d;\n", md, md);
    OUT("            const int64_t i%d = j; (void)i%d;\n", nd, nd);
    OUT("            const float *ar = A + (");
    out_sym(p, c->a_base, s, len, cap);
    OUT(");\n            const int64_t bo = ");
    out_sym(p, c->b_base, s, len, cap);
    OUT(";\n            float accum = 0.0f;\n");
    OUT("            for (int64_t r = 0; r < K; r++) accum += ar[r] * kdq_%s(W, bo + r);\n", tag);
    OUT("            out[");
    out_sym(p, k->store_off, s, len, cap);
    OUT("] = accum;\n          }\n        } else {\n");
}

void cg_emit_i8_item_begin(const sch_program *p, const sch_kernel *k, int zero, int pad_rows, char **s, size_t *len,
                           size_t *cap) {
    const sch_contract *c = k->contract;
    kiln_dtype t = p->bufs[c->b_buf].dtype;
    const char *tag = gi_tag(t);
    if (!tag) return;
    int be = dtype_table[t].block;
    int md = c->mdim, kb = gi_kb(t);
    cg_emit_block_item_begin(p, k, be, tag, s, len, cap);
    /* A quantised once per batch point and call */
    OUT("        const int64_t gob = w / ntiles;\n");
    /* or, after the runtime's CG_KF_PREP launch (flag CG_KF_SHARED), as
     * that launch left it in B[nbufs], quantised once for all threads */
    OUT("        if (gq_o != gob && (flags & %d)) {\n", CG_KF_SHARED);
    char base[32];
    snprintf(base, sizeof base, "B[%d]", (int)p->nbufs);
    emit_scratch_parts(base, s, len, cap);
    OUT("          gq_sh = 1; gq_o = gob;\n");
    OUT("        }\n");
    OUT("        if (gq_o != gob) {\n");
    OUT("          if (!gq_a) {\n");
    /* rows past M (AMX tiles load whole 16-row blocks) are zero */
    OUT("            gq_a = (int8_t *)calloc((size_t)((M + %d) * K) + 64, 1);\n", pad_rows);
    OUT("            gq_s = (float *)calloc((size_t)((M + %d) * (K / 32) + 1), sizeof(float));\n", pad_rows);
    OUT("            gq_m = (float *)calloc((size_t)((M + %d) * (K / 32) + 1), sizeof(float));\n", pad_rows);
    OUT("            gq_z = (int32_t *)calloc((size_t)((M + %d) * (K / 16) + 1), sizeof(int32_t));\n", pad_rows);
    OUT("            if (!gq_a || !gq_s || !gq_m || !gq_z) { free(gq_a); free(gq_s); free(gq_m); free(gq_z); return 1; }\n");
    OUT("          }\n");
    OUT("          for (int64_t mq = 0; mq < M; mq++) {\n");
    if (md >= 0) OUT("            const int64_t i%d = mq; (void)i%d;\n", md, md);
    OUT("            kgq_row(A + (");
    out_sym(p, c->a_base, s, len, cap);
    OUT("), K, %d, %d, gq_a + mq * K, gq_s + mq * (K / 32), gq_z + mq * (K / %d), %s);\n", kb, zero, kb,
        t == KILN_Q4_K ? "gq_m + mq * (K / 32)" : "NULL");
    OUT("          }\n");
    OUT("          gq_o = gob;\n");
    OUT("        }\n");
}

void cg_emit_i8_item_end(char **s, size_t *len, size_t *cap) {
    OUT("        }\n");
    OUT("      }\n");
}

/* opens the loop over the item's strips st and sets wo[j], the element
 * offsets of strip st's nr rows (the last row repeated past n1) */
static void emit_strip_rows(const sch_program *p, const sch_kernel *k, int nr, char **s, size_t *len, size_t *cap) {
    int nd = k->contract->ndim;
    OUT("          for (int64_t st = 0; st < nstr; st++) {\n");
    OUT("            const int64_t ns = n0 + st * %d;\n", nr);
    OUT("            int64_t wo[%d];\n", nr);
    OUT("            for (int j = 0; j < %d; j++) {\n", nr);
    OUT("              const int64_t i%d = ns + j < n1 ? ns + j : n1 - 1; (void)i%d;\n", nd, nd);
    OUT("              wo[j] = ");
    sch_print_sym(p, k->contract->b_base, s, len, cap);
    OUT(";\n            }\n");
}

void cg_emit_i8_pack_strips(const sch_program *p, const sch_kernel *k, int nr, int make_signed, char **s, size_t *len,
                            size_t *cap) {
    const sch_contract *c = k->contract;
    kiln_dtype t = p->bufs[c->b_buf].dtype;
    const char *tag = gi_tag(t);
    if (!tag) return;
    int kb = gi_kb(t);
    emit_strip_rows(p, k, nr, s, len, cap);
    OUT("            uint8_t *bqs = bq + st * %d * kcb;\n", nr);
    OUT("            kgb_%s((const void *)W, wo, %d, k0, kl, bqs, bs + st * %d * (kcb / %d), bm + st * %d * (kcb / %d), %s, K);\n",
        tag, nr, nr, kb, nr, kb, cg_i8_copy_source(t) ? "rpw, rpg" : "NULL, 0");
    if (make_signed) OUT("            kamx_signed(bqs, (size_t)(%d * kl), %d);\n", nr, gi_zero(t));
    OUT("          }\n");
}

void cg_emit_packed_i8_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                                size_t *len, size_t *cap) {
    const sch_contract *c = k->contract;
    kiln_dtype t = p->bufs[c->b_buf].dtype;
    const char *tag = gi_tag(t);
    if (!tag) return;
    int mr = sc->mr, nr = sc->nr, md = c->mdim, nd = c->ndim, kb = gi_kb(t);
    cg_emit_i8_item_begin(p, k, gi_zero(t), 0, s, len, cap);
    OUT("        const int64_t kcb = %d > 0 && %d < K ? %d : K;\n", sc->kc, sc->kc, sc->kc);
    OUT("        const int64_t nstr = (n1 - n0 + %d) / %d;\n", nr - 1, nr);
    /* B's pack copy (sched/repack_layout.h), when the runtime made one for this
     * K, nr and shape: the item's strips are filled once, then read */
    OUT("        const int64_t *pkh = (const int64_t *)B[%d];\n", (int)(2 * p->nbufs + 1 + c->b_buf));
    /* the generated comment keeps the macro's former name, RT_PACK_STRIP:
     * a new spelling would change every cached kernel's key for nothing */
    OUT("        const size_t pks = (size_t)%d * (size_t)K + 8 * (size_t)%d * (size_t)(K / %d); /* RT_PACK_STRIP */\n", nr, nr,
        kb);
    OUT("        uint8_t *pkw = pkh && pkh[0] == K && pkh[1] == %d && pkh[2] == nstrips", nr);
    for (int d = 0; d < k->ndim; d++)
        if (d != md && d != nd) OUT(" * d%d", d);
    OUT(" ? (uint8_t *)pkh + %d + (size_t)(gob * nstrips + n0 / %d) * pks : NULL;\n", SCH_PACK_HEADER, nr);
    OUT("        if (pkw && !pkh[3]) {\n");
    emit_strip_rows(p, k, nr, s, len, cap);
    OUT("            uint8_t *pq = pkw + st * pks;\n");
    OUT("            kgb_%s((const void *)W, wo, %d, 0, K, pq, (float *)(pq + %d * K), (float *)(pq + %d * K) + %d * (K / %d), %s, K);\n",
        tag, nr, nr, nr, nr, kb, cg_i8_copy_source(t) ? "rpw, rpg" : "NULL, 0");
    OUT("          }\n        }\n");
    OUT("        const size_t qsz = ((size_t)(nstr * %d * kcb) + 63) & ~(size_t)63;\n", nr);
    OUT("        const size_t fsz = ((size_t)(nstr * %d * (kcb / %d)) * sizeof(float) + 63) & ~(size_t)63;\n", nr, kb);
    OUT("        uint8_t *bq = pkw ? NULL : (uint8_t *)aligned_alloc(64, qsz);\n");
    OUT("        float *bs = pkw ? NULL : (float *)aligned_alloc(64, fsz), *bm = pkw ? NULL : (float *)aligned_alloc(64, fsz);\n");
    OUT("        if (!pkw && (!bq || !bs || !bm)) { free(bq); free(bs); free(bm); free(gq_a); free(gq_s); free(gq_m); free(gq_z); return 1; }\n");
    /* out's stride along n (store_off is affine in n) */
    cg_emit_out_stride(p, k, s, len, cap);
    OUT("        for (int64_t k0 = 0; k0 < K; k0 += kcb) {\n");
    OUT("          const int64_t kl = K - k0 < kcb ? K - k0 : kcb;\n");
    OUT("          const int acc = k0 > 0;\n");
    OUT("          if (!pkw) {\n");
    cg_emit_i8_pack_strips(p, k, nr, 0, s, len, cap);
    OUT("          }\n");
    OUT("          for (int64_t m0 = 0; m0 < M; m0 += %d) {\n", sc->mc);
    OUT("            const int64_t m1 = m0 + %d < M ? m0 + %d : M;\n", sc->mc, sc->mc);
    OUT("            for (int64_t st = 0; st < nstr; st++) {\n");
    OUT("              const int64_t ns = n0 + st * %d;\n", nr);
    OUT("              const int cols = (int)(n1 - ns < %d ? n1 - ns : %d);\n", nr, nr);
    OUT("              const uint8_t *pq = pkw ? pkw + st * pks : NULL;\n");
    OUT("              const uint8_t *bqs = pkw ? pq + %d * k0 : bq + st * %d * kcb;\n", nr, nr);
    OUT("              const float *bss = pkw ? (const float *)(pq + %d * K) + %d * (k0 / %d) : bs + st * %d * (kcb / %d);\n",
        nr, nr, kb, nr, kb);
    OUT("              const float *bms = pkw ? (const float *)(pq + %d * K) + %d * (K / %d) + %d * (k0 / %d) : bm + st * %d * (kcb / %d);\n",
        nr, nr, kb, nr, kb, nr, kb);
    OUT("              for (int64_t mm = m0; mm < m1; mm += %d) {\n", mr);
    OUT("                const int rows = (int)(m1 - mm < %d ? m1 - mm : %d);\n", mr, mr);
    OUT("                const int8_t *qr[%d]; const float *sr[%d], *ur[%d]; const int32_t *zr[%d]; float *cr[%d];\n", mr, mr,
        mr, mr, mr);
    OUT("                float ct[%d] __attribute__((aligned(64)));\n", mr * nr);
    OUT("                for (int i = 0; i < %d; i++) {\n", mr);
    OUT("                  const int64_t mi = mm + (i < rows ? i : rows - 1);\n");
    OUT("                  qr[i] = gq_a + mi * K + k0; sr[i] = gq_s + mi * (K / 32) + k0 / 32;\n");
    OUT("                  ur[i] = gq_m + mi * (K / 32) + k0 / 32; zr[i] = gq_z + mi * (K / %d) + k0 / %d;\n", kb, kb);
    if (md >= 0) OUT("                  const int64_t i%d = mi; (void)i%d;\n", md, md);
    OUT("                  const int64_t i%d = ns; (void)i%d;\n", nd, nd);
    OUT("                  cr[i] = osn == 1 ? out + (");
    out_sym(p, k->store_off, s, len, cap);
    OUT(") : ct + i * %d;\n", nr);
    OUT("                }\n");
    OUT("                kgi_%s_%dx%d(qr, sr, zr, ur, bqs, bss, bms, kl / %d, cr, rows, cols, osn == 1 ? acc : 0);\n", tag, mr,
        nr, kb);
    cg_emit_tile_scatter(p, k, nr, s, len, cap);
    OUT("              }\n            }\n          }\n        }\n");
    OUT("        free(bq); free(bs); free(bm);\n");
    cg_emit_i8_item_end(s, len, cap);
}
