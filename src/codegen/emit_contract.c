/* emit_contract.c — the CPU contraction micro-kernel family (AVX-512).
 *
 * For a kernel annotated by contract.c (out[.., m, .., n, ..] = sum over r of
 * A[a_base + r] * B[b_base + r]) it emits kiln_k<id> with the usual kernel
 * ABI. Work items are (batch point, run of B rows): chunk is the number of
 * runs per batch point, each run whole strips of the schedule's nr rows and
 * the runs within one strip of each other (contract.h: sch_contract_runs);
 * the thread pool splits the items, and every item does all M rows of A for
 * its B rows, in
 * blocks of mc rows (A's block stays in L2 while B's rows stream by). The
 * inner step is an mr x nr register tile computed by a tile function
 * kct_<dtype>_<mr>x<nr>: per 32-element chunk of r, each of the nr B rows is
 * dequantised once into two 16-lane f32 registers, then multiplied into the
 * mr x nr accumulators with fused multiply-adds; the 16 lanes of each
 * accumulator are summed at the end. Edge tiles repeat the last row and
 * discard it, so one tile function per (dtype, mr, nr) serves all sizes.
 *
 * Two schedules are emitted per kernel and chosen at run time by M: sched[0]
 * for M <= SCH_SMALL_M (decode), sched[1] for larger M (prefill).
 *
 * The forms and arithmetics are the rows of sched/family.h (validity,
 * space, cost, scratch); this file holds the matching table of emitters
 * (family_emit: tiles, schedule loops, the kernel-level declarations) and
 * dispatches through it, so a new family is a row in each table.
 *
 * Numerics: f32 products accumulated in f32 lanes (the vector path's
 * contract: the order of float sums differs from the reference's; the error
 * is that of a K-term f32 sum). Block-format rows are dequantised exactly as
 * the scalar kdq_* functions do, one block at a time. A B row that is not
 * block-aligned, or K not a multiple of 32 for a block format, falls back to
 * scalar dequantisation per element (correct, slow, never taken by models).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "contract.h"
#include "dtype.h"
#include "contract_split.h"
#include "emit_c.h"
#include "emit_contract.h"
#include "emit_contract_i8.h"
#include "../sched/repack_layout.h"
#include "emit_gemm.h"
#include "emit_gemm_amx.h"
#include "emit_gemm_amx_bf16.h"
#include "emit_gemm_bf16.h"
#include "emit_gemm_i8.h"
#include "family.h"

#define OUT(...) sch_appendf(s, len, cap, __VA_ARGS__)

int cg_contract_emittable(const sch_program *p, const sch_kernel *k, cg_isa isa) {
    if (!k->contract || isa != CG_ISA_AVX512) return 0;
    kiln_dtype t = p->bufs[k->contract->b_buf].dtype;
    for (int b = 0; b < 2; b++) {
        const sch_contract_sched *sc = &k->contract->sched[b];
        /* a family's schedule within its limits, reading B as it is laid out */
        if (!sch_family_valid(t, sc) || !sch_family_reads_b(sc, k->contract->b_kstride != SYM_NONE)) return 0;
    }
    return 1;
}

int cg_contract_msplit_family(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc) {
    if (!k->contract || sc->rp) return 0;
    kiln_dtype t = p->bufs[k->contract->b_buf].dtype;
    return sch_family_is(sc, SCH_FAM_PACKED_F32, t) || sch_family_is(sc, SCH_FAM_PACKED_BF16, t) ||
           sch_family_is(sc, SCH_FAM_DOT_F32, t);
}

int cg_contract_msplit_steps(const sch_program *p, const sch_kernel *k, int64_t *a_step, int64_t *o_step) {
    const sch_contract *c = k->contract;
    if (!c || c->mdim < 0 || c->n_lim_off != SYM_NONE) return 0;
    sym_pool *sp = p->g->syms;
    sym_id var = k->var[c->mdim];
    int64_t as = 0, os = 0;
    if (!sym_is_const(sp, sym_step(sp, c->a_base, var), &as) || !sym_is_const(sp, sym_step(sp, k->store_off, var), &os))
        return 0;
    if (a_step) *a_step = as;
    if (o_step) *o_step = os;
    return 1;
}

int cg_contract_msplit_ok(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, int64_t *a_step,
                          int64_t *o_step) {
    return cg_contract_msplit_family(p, k, sc) && cg_contract_msplit_steps(p, k, a_step, o_step);
}

/* ---- the families' emitters: row i is the emitter of sched/family.h's row i ---- */

typedef void (*cg_tiles_fn)(kiln_dtype t, const sch_contract_sched *scheds, int n, int *i8_done, char **s, size_t *len,
                            size_t *cap);
typedef void (*cg_schedule_fn)(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                               size_t *len, size_t *cap);

/* what a kernel declares before its item loop and releases after it, shared
 * by the families that need it; emitted in this order (cg_family_emit.pro) */
enum {
    PRO_I8A = 1,      /* quantised A of the packed and AMX int8 forms (emit_gemm_i8.c) */
    PRO_AMX_BF16 = 2, /* converted A of the AMX bf16 form (emit_gemm_amx_bf16.c) */
    PRO_BF16A = 4,    /* rounded A of the packed bf16 form (emit_gemm_bf16.c) */
    PRO_RP = 8,       /* B's repacked copy (sched/repack_layout.h) */
    PRO_DOT_I8 = 16   /* quantised A of the int8 dot form, per call */
};

typedef struct cg_family_emit {
    /* the tile functions the family's schedules among scheds[0..n) need, once
     * per translation unit and B dtype; rows that share one function share
     * one call (the dot rows emit their tiles in schedule order) */
    cg_tiles_fn tiles;
    /* the loops of one schedule inside a work item: in scope are A, W (B),
     * out, M, N, K, the item's rows of B [n0, n1), w, ntiles and the batch
     * loop variables; it writes out[] for every m < M and n in [n0, n1) */
    cg_schedule_fn schedule;
    unsigned pro; /* PRO_* */
} cg_family_emit;

static void dot_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, int *i8_done, char **s, size_t *len,
                      size_t *cap);
static void dot_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s, size_t *len,
                         size_t *cap);
static void packed_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, int *i8_done, char **s, size_t *len,
                         size_t *cap) {
    (void)i8_done;
    cg_emit_packed_tiles(t, scheds, n, s, len, cap);
}
static void packed_bf16_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, int *i8_done, char **s,
                              size_t *len, size_t *cap) {
    (void)i8_done;
    cg_emit_packed_bf16_tiles(t, scheds, n, s, len, cap);
}

static const cg_family_emit family_emit[] = {
    [SCH_FAM_DOT_F32] = {dot_tiles, dot_schedule, 0},
    [SCH_FAM_DOT_I8] = {dot_tiles, dot_schedule, PRO_DOT_I8},
    [SCH_FAM_DOT_I8_RP] = {dot_tiles, dot_schedule, PRO_RP | PRO_DOT_I8},
    [SCH_FAM_PACKED_F32] = {packed_tiles, cg_emit_packed_schedule, 0},
    [SCH_FAM_PACKED_DIRECT] = {packed_tiles, cg_emit_packed_schedule, 0},
    [SCH_FAM_PACKED_BF16] = {packed_bf16_tiles, cg_emit_packed_bf16_schedule, PRO_BF16A},
    [SCH_FAM_PACKED_I8] = {cg_emit_packed_i8_tiles, cg_emit_packed_i8_schedule, PRO_I8A},
    [SCH_FAM_AMX_I8] = {cg_emit_amx_tiles, cg_emit_amx_schedule, PRO_I8A},
    [SCH_FAM_AMX_BF16] = {cg_emit_amx_bf16_tiles, cg_emit_amx_bf16_schedule, PRO_AMX_BF16},
};
_Static_assert(sizeof family_emit / sizeof *family_emit == SCH_FAM_COUNT,
               "every contraction family has an emitter row");

int cg_family_emitter_complete(int id) {
    return id >= 0 && id < SCH_FAM_COUNT && family_emit[id].tiles && family_emit[id].schedule;
}

/* dequantisers: 32 elements (chunk c of a row) into two 16-lane registers */
static const char *contract_prelude =
    "KI float kc_h(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return _cvtsh_ss(h); }\n"
    "KI void kcv_f32(const void *row, int64_t c, __m512 *w0, __m512 *w1) {\n"
    "  const float *r = (const float *)row + 32 * c; *w0 = _mm512_loadu_ps(r); *w1 = _mm512_loadu_ps(r + 16); }\n"
    "KI void kcv_f16(const void *row, int64_t c, __m512 *w0, __m512 *w1) {\n"
    "  const uint16_t *r = (const uint16_t *)row + 32 * c;\n"
    "  *w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)r));\n"
    "  *w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(r + 16))); }\n"
    "KI __m512 kc_bf16x16(const uint16_t *r) {\n"
    "  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)r)), 16)); }\n"
    "KI void kcv_bf16(const void *row, int64_t c, __m512 *w0, __m512 *w1) {\n"
    "  const uint16_t *r = (const uint16_t *)row + 32 * c; *w0 = kc_bf16x16(r); *w1 = kc_bf16x16(r + 16); }\n"
    "KI void kcv_q8_0(const void *row, int64_t c, __m512 *w0, __m512 *w1) {\n"
    "  const uint8_t *b = (const uint8_t *)row + 34 * c; const __m512 d = _mm512_set1_ps(kc_h(b));\n"
    "  *w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2)))), d);\n"
    "  *w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 18)))), d); }\n"
    "KI void kcv_q4_0(const void *row, int64_t c, __m512 *w0, __m512 *w1) {\n"
    "  const uint8_t *b = (const uint8_t *)row + 18 * c; const __m512 d = _mm512_set1_ps(kc_h(b));\n"
    "  const __m128i q = _mm_loadu_si128((const __m128i *)(b + 2)), m4 = _mm_set1_epi8(15);\n"
    "  const __m512i e8 = _mm512_set1_epi32(8);\n"
    "  const __m512i lo = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(q, m4)), e8);\n"
    "  const __m512i hi = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), m4)), e8);\n"
    "  *w0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(lo)); *w1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(hi)); }\n"
    "KI void kcv_q5_0(const void *row, int64_t c, __m512 *w0, __m512 *w1) {\n"
    "  const uint8_t *b = (const uint8_t *)row + 22 * c; const __m512 d = _mm512_set1_ps(kc_h(b));\n"
    "  uint32_t qh; memcpy(&qh, b + 2, 4);\n"
    "  const __m128i q = _mm_loadu_si128((const __m128i *)(b + 6)), m4 = _mm_set1_epi8(15);\n"
    "  const __m512i e16 = _mm512_set1_epi32(16);\n"
    "  __m512i lo = _mm512_cvtepu8_epi32(_mm_and_si128(q, m4));\n"
    "  __m512i hi = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), m4));\n"
    "  lo = _mm512_mask_add_epi32(lo, (__mmask16)(qh & 0xffffu), lo, e16);\n"
    "  hi = _mm512_mask_add_epi32(hi, (__mmask16)(qh >> 16), hi, e16);\n"
    "  *w0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(lo, e16)));\n"
    "  *w1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(hi, e16))); }\n"
    "KI void kcv_q4_k(const void *row, int64_t c, __m512 *w0, __m512 *w1) {\n"
    "  const uint8_t *k = (const uint8_t *)row + 144 * (c / 8); const int sb = (int)(c % 8);\n"
    "  const float d = kc_h(k), dmin = kc_h(k + 2); const uint8_t *s = k + 4; int sc, m;\n"
    "  if (sb < 4) { sc = s[sb] & 63; m = s[sb + 4] & 63; }\n"
    "  else { sc = (s[sb + 4] & 0x0f) | ((s[sb - 4] >> 6) << 4); m = (s[sb + 4] >> 4) | ((s[sb] >> 6) << 4); }\n"
    "  const __m512 ds = _mm512_set1_ps(d * (float)sc), dm = _mm512_set1_ps(dmin * (float)m);\n"
    "  const uint8_t *q = k + 16 + 32 * (sb / 2); const __m128i m4 = _mm_set1_epi8(15);\n"
    "  __m128i q0 = _mm_loadu_si128((const __m128i *)q), q1 = _mm_loadu_si128((const __m128i *)(q + 16));\n"
    "  if (sb & 1) { q0 = _mm_srli_epi16(q0, 4); q1 = _mm_srli_epi16(q1, 4); }\n"
    "  q0 = _mm_and_si128(q0, m4); q1 = _mm_and_si128(q1, m4);\n"
    "  *w0 = _mm512_sub_ps(_mm512_mul_ps(ds, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q0))), dm);\n"
    "  *w1 = _mm512_sub_ps(_mm512_mul_ps(ds, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q1))), dm); }\n"
    "KI void kcv_q6_k(const void *row, int64_t c, __m512 *w0, __m512 *w1) {\n"
    "  const uint8_t *k = (const uint8_t *)row + 210 * (c / 8); const int ch = (int)(c % 8), h = ch / 4, t = ch % 4;\n"
    "  const float d = kc_h(k + 208); const int8_t *sc = (const int8_t *)(k + 192) + 2 * ch;\n"
    "  const uint8_t *ql = k + 64 * h + 32 * (t & 1), *qh = k + 128 + 32 * h; const __m128i m4 = _mm_set1_epi8(15), m2 = _mm_set1_epi8(3);\n"
    "  for (int half = 0; half < 2; half++) {\n"
    "    __m128i lo = _mm_loadu_si128((const __m128i *)(ql + 16 * half)), hb = _mm_loadu_si128((const __m128i *)(qh + 16 * half));\n"
    "    if (t >= 2) lo = _mm_srli_epi16(lo, 4);\n"
    "    lo = _mm_and_si128(lo, m4); hb = _mm_and_si128(_mm_srl_epi16(hb, _mm_cvtsi32_si128(2 * t)), m2);\n"
    "    const __m128i q = _mm_or_si128(lo, _mm_slli_epi16(hb, 4));\n"
    "    const __m512i qi = _mm512_sub_epi32(_mm512_cvtepu8_epi32(q), _mm512_set1_epi32(32));\n"
    "    const __m512 v = _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[half]), _mm512_cvtepi32_ps(qi));\n"
    "    if (half == 0) *w0 = v; else *w1 = v; } }\n";

/* the tile function kct_<dt>_<mr>x<nr>(a rows, B rows, full 32-chunks,
 * tail elements (float formats only), results [mr][nr]) */
static void emit_tile(kiln_dtype t, int mr, int nr, int pf, char **s, size_t *len, size_t *cap) {
    const char *tag = dtype_table[t].name;
    OUT("static void kct_%s_%dx%d_p%d(const float *const *a, const void *const *w, int64_t nch, int64_t tail, float *res) {\n",
        tag, mr, nr, pf);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) OUT("  __m512 c%d_%d = _mm512_setzero_ps();\n", i, j);
    if (pf > 0) cg_emit_row_stride(t, nr, s, len, cap);
    OUT("  for (int64_t c = 0; c < nch; c++) {\n");
    if (pf > 0) {
        /* B rows are streams the hardware prefetcher follows late: ask for
         * the chunk pf ahead, for the next tile's rows and, into L2, for the
         * tile ~32 KiB ahead (hints: past the end they are harmless; rs and
         * far from cg_emit_row_stride) */
        int bytes32 = dtype_bytes_of(t, 32);
        for (int j = 0; j < nr; j++)
            OUT("    _mm_prefetch((const char *)w[%d] + (c + %d) * %d, _MM_HINT_T0);\n"
                "    _mm_prefetch((const char *)w[%d] + %d * rs + c * %d, _MM_HINT_T0);\n"
                "    _mm_prefetch((const char *)w[%d] + far + c * %d, _MM_HINT_T1);\n",
                j, pf, bytes32, j, nr, bytes32, j, bytes32);
    }
    for (int j = 0; j < nr; j++) OUT("    __m512 u%d, v%d; kcv_%s(w[%d], c, &u%d, &v%d);\n", j, j, tag, j, j, j);
    for (int i = 0; i < mr; i++) {
        OUT("    { const __m512 x = _mm512_loadu_ps(a[%d] + 32 * c), y = _mm512_loadu_ps(a[%d] + 32 * c + 16);\n", i, i);
        for (int j = 0; j < nr; j++)
            OUT("      c%d_%d = _mm512_fmadd_ps(x, u%d, c%d_%d); c%d_%d = _mm512_fmadd_ps(y, v%d, c%d_%d);\n", i, j, j, i,
                j, i, j, j, i, j);
        OUT("    }\n");
    }
    OUT("  }\n");
    if (t == KILN_F32 || t == KILN_F16 || t == KILN_BF16) {
        /* the last K % 32 elements, masked (float formats have no blocks) */
        OUT("  if (tail > 0) {\n");
        OUT("    const __mmask16 k0 = (__mmask16)(tail >= 16 ? 0xffffu : (1u << tail) - 1u);\n");
        OUT("    const __mmask16 k1 = (__mmask16)(tail <= 16 ? 0u : (1u << (tail - 16)) - 1u);\n");
        for (int j = 0; j < nr; j++) {
            if (t == KILN_F32)
                OUT("    const float *r%d = (const float *)w[%d] + 32 * nch;\n"
                    "    const __m512 u%d = _mm512_maskz_loadu_ps(k0, r%d), v%d = _mm512_maskz_loadu_ps(k1, r%d + 16);\n",
                    j, j, j, j, j, j);
            else if (t == KILN_F16)
                OUT("    const uint16_t *r%d = (const uint16_t *)w[%d] + 32 * nch;\n"
                    "    const __m512 u%d = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k0, r%d));\n"
                    "    const __m512 v%d = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k1, r%d + 16));\n",
                    j, j, j, j, j, j);
            else
                OUT("    const uint16_t *r%d = (const uint16_t *)w[%d] + 32 * nch;\n"
                    "    const __m512 u%d = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k0, r%d)), 16));\n"
                    "    const __m512 v%d = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k1, r%d + 16)), 16));\n",
                    j, j, j, j, j, j);
        }
        for (int i = 0; i < mr; i++) {
            OUT("    { const __m512 x = _mm512_maskz_loadu_ps(k0, a[%d] + 32 * nch), y = _mm512_maskz_loadu_ps(k1, a[%d] + 32 * nch + 16);\n",
                i, i);
            for (int j = 0; j < nr; j++)
                OUT("      c%d_%d = _mm512_fmadd_ps(x, u%d, c%d_%d); c%d_%d = _mm512_fmadd_ps(y, v%d, c%d_%d);\n", i, j, j,
                    i, j, i, j, j, i, j);
            OUT("    }\n");
        }
        OUT("  }\n");
    } else {
        OUT("  (void)tail;\n");
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) OUT("  res[%d] = _mm512_reduce_add_ps(c%d_%d);\n", i * nr + j, i, j);
    OUT("}\n\n");
}

/* i8_done: which int8 helpers this translation unit has already (bit 0: the
 * dot form's, emit_contract_i8.c; bit 1: the packed form's, emit_gemm_i8.c) */
static void emit_dtype_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, int *i8_done, char **s, size_t *len,
                             size_t *cap);

/* the most rows of A an rp tile takes at a time (CG_RP_ROWS): a search's
 * candidate unit timed on fewer rows emits only the tiles those rows call
 * (cg_contract_rp_rows), a quarter of a q4_k decode unit's code at one row
 * (its compile took 10-15 s of a 30 s search on a loaded 2-core machine) */
static _Thread_local int rp_rows = CG_RP_ROWS;

int cg_contract_rp_rows(int rows) {
    int was = rp_rows;
    rp_rows = rows >= 1 && rows <= CG_RP_ROWS ? rows : CG_RP_ROWS;
    return was;
}

void cg_emit_contract_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, char **s, size_t *len, size_t *cap) {
    OUT("%s\n", contract_prelude);
    int i8_done = 0;
    emit_dtype_tiles(t, scheds, n, &i8_done, s, len, cap);
}

/* every family's tiles, in table order, each distinct function once */
static void emit_dtype_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, int *i8_done, char **s, size_t *len,
                             size_t *cap) {
    for (int f = 0; f < SCH_FAM_COUNT; f++) {
        int seen = 0;
        for (int g = 0; g < f && !seen; g++) seen = family_emit[g].tiles == family_emit[f].tiles;
        if (!seen) family_emit[f].tiles(t, scheds, n, i8_done, s, len, cap);
    }
}

/* the prefetch distance of the rp tile for `rows` rows of A under a
 * schedule of distance pf: the schedule's for one row (what its search
 * measured: the decode bucket is searched at one row), else at least 4
 * records. Nothing searches the tiles of 2 to 4 rows (a batched server
 * step, a short prompt's calls); without software prefetch their extra
 * arithmetic per weight byte left the copy's stream behind: gemma3-270m's
 * 262,144 x 640 q8_0 output head at 4 rows, 2 threads (Intel Xeon, AMX,
 * interleaved, a noisy machine) took 8.9-9.0 ms at pf=0 and 7.3-7.7 ms at
 * pf=4, against 5.6-6.9 ms for one row at either. */
static int rp_tile_pf(int pf, int rows) { return rows > 1 && pf < 4 ? 4 : pf; }

/* the dot rows' tiles (f32, int8, int8 on the repacked copy), in schedule order */
static void dot_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, int *i8_done, char **s, size_t *len,
                      size_t *cap) {
    for (int i = 0; i < n; i++) {
        const sch_contract_sched *sc = &scheds[i];
        if (sc->form != SCH_FORM_DOT) continue;
        if (sc->arith == SCH_ARITH_I8) {
            if (!sch_family_is(sc, SCH_FAM_DOT_I8, t) && !sch_family_is(sc, SCH_FAM_DOT_I8_RP, t)) continue;
            int dup = 0;
            for (int j = 0; j < i; j++) {
                const sch_contract_sched *o = &scheds[j];
                if (o->arith != SCH_ARITH_I8 || o->form != SCH_FORM_DOT || o->mr != sc->mr || o->nr != sc->nr ||
                    o->pf != sc->pf)
                    continue;
                dup = 1;
            }
            if (!(*i8_done & 1)) cg_emit_i8_prelude(s, len, cap);
            *i8_done |= 1;
            if (!dup) cg_emit_i8_tile(t, sc, s, len, cap);
            /* the rp tiles already emitted: 1-row ones by pf, the others by
             * their prefetch distance (rp_tile_pf), both with the same far
             * level (pf2) */
            int have1 = 0, haven = 0;
            for (int j = 0; j < i; j++) {
                if (!sch_family_is(&scheds[j], SCH_FAM_DOT_I8_RP, t)) continue;
                if (scheds[j].pf2 != sc->pf2) continue;
                have1 |= scheds[j].pf == sc->pf;
                haven |= rp_tile_pf(scheds[j].pf, 2) == rp_tile_pf(sc->pf, 2);
            }
            /* rp=1: the tiles of the repacked copy for 1 to CG_RP_ROWS rows of
             * A (dot_schedule takes a decode's rows that many at a time),
             * beside the one above for the strips the copy does not cover */
            if (sch_family_is(sc, SCH_FAM_DOT_I8_RP, t))
                for (int r = 1; r <= rp_rows; r++) {
                    if (r == 1 ? have1 : haven) continue;
                    sch_contract_sched rs = *sc;
                    rs.mr = r;
                    rs.pf = rp_tile_pf(sc->pf, r);
                    cg_emit_i8_rp_tile(t, &rs, s, len, cap);
                    if (cg_i8_rp16_ok(t)) cg_emit_i8_rp16_tile(t, &rs, s, len, cap);
                }
            continue;
        }
        if (!sch_family_is(sc, SCH_FAM_DOT_F32, t)) continue;
        int dup = 0;
        for (int j = 0; j < i && !dup; j++)
            dup = scheds[j].form == SCH_FORM_DOT && scheds[j].arith == SCH_ARITH_F32 && scheds[j].mr == sc->mr &&
                  scheds[j].nr == sc->nr && scheds[j].pf == sc->pf;
        if (!dup) emit_tile(t, sc->mr, sc->nr, sc->pf, s, len, cap);
    }
}

void cg_emit_contract_prelude(const sch_program *p, cg_isa isa, char **s, size_t *len, size_t *cap) {
    int any = 0;
    for (int32_t k = 0; k < p->nkernels && !any; k++) any = cg_contract_emittable(p, &p->kernels[k], isa);
    if (!any) return;
    /* the dequantisers once, then the tile functions per B dtype */
    sch_contract_sched *all = kiln_xmalloc(((size_t)p->nkernels * 2 + 1) * sizeof *all);
    int first = 1;
    int i8_done = 0;
    for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
        int n = 0;
        for (int32_t k = 0; k < p->nkernels; k++) {
            const sch_kernel *K = &p->kernels[k];
            if (!cg_contract_emittable(p, K, isa) || (int)p->bufs[K->contract->b_buf].dtype != t) continue;
            all[n++] = K->contract->sched[0];
            all[n++] = K->contract->sched[1];
        }
        if (n == 0) continue;
        if (first) OUT("%s\n", contract_prelude);
        first = 0;
        emit_dtype_tiles((kiln_dtype)t, all, n, &i8_done, s, len, cap);
    }
    free(all);
}

static void out_sym(const sch_program *p, sym_id x, char **s, size_t *len, size_t *cap) {
    sch_print_sym(p, x, s, len, cap);
}

/* the loops of one schedule over this item's rows [n0, n1) and all of M:
 * its family's emitter (the kernel is emittable, so it has one) */
static void emit_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                          size_t *len, size_t *cap) {
    const sch_family *f = sch_family_of(sc);
    KILN_ASSERT(f != NULL);
    family_emit[f->id].schedule(p, k, sc, s, len, cap);
}

/* q1, s1, l1, u1: the rr (<= CG_RP_ROWS) quantised rows of A from row
 * `row` on, each from K offset `k0`, as the rp tiles take them */
/* the rp tile's results res[width * i + j] stored to the output, the rows
 * [mm, mm + rr) and the columns [nn, nn + width), each plus the K-pass
 * accumulator rpacc when there is one; ind is the loop's indent */
static void emit_rp_store(const sch_program *p, const sch_kernel *k, const char *res, int width, const char *ind,
                          char **s, size_t *len, size_t *cap) {
    const sch_contract *c = k->contract;
    OUT("%sfor (int i = 0; i < rr; i++) {\n", ind);
    if (c->mdim >= 0) OUT("%s  const int64_t i%d = mm + i;\n", ind, c->mdim);
    OUT("%s  for (int j = 0; j < %d; j++) {\n", ind, width);
    OUT("%s    const int64_t i%d = nn + j;\n", ind, c->ndim);
    OUT("%s    float v = %s[%d * i + j];\n", ind, res, width);
    OUT("%s    if (rpacc) v += rpacc[(mm + i) * rpw8 + nn - n0 + j];\n", ind);
    OUT("%s    out[", ind);
    out_sym(p, k->store_off, s, len, cap);
    OUT("] = v;\n%s  }\n%s}\n", ind, ind);
}

static void emit_rp_rows(const char *row, const char *k0, char **s, size_t *len, size_t *cap) {
    OUT("              const int8_t *q1[%d] = {0}; const float *s1[%d] = {0}; const __m256i *l1[%d] = {0};"
        " const int32_t *u1[%d] = {0};\n", rp_rows, rp_rows, rp_rows, rp_rows);
    OUT("              for (int i = 0; i < rr; i++) { const int64_t mi_ = %s + i;\n", row);
    OUT("                q1[i] = qa + mi_ * K + %s; s1[i] = qs + mi_ * qch + %s / 32; l1[i] = ql8 + mi_ * qch + %s / 32;"
        " u1[i] = qsum + mi_ * qch + %s / 32; }\n", k0, k0, k0, k0);
}

/* the call of the rr-row rp tile on (q1, s1, l1, u1, rest), the 8-row
 * tile's (cg_i8_rp_tile_name) or the two-group one's
 * (cg_i8_rp16_tile_name); each RPB in rest stands for the copy's bytes per
 * 32 of K */
static void emit_rp_call_named(kiln_dtype t, const sch_contract_sched *sc, const char *rest,
                               void (*name_of)(kiln_dtype, const sch_contract_sched *, char *, size_t),
                               const char *indent, char **s, size_t *len, size_t *cap) {
    char args[256] = "";
    size_t n = 0;
    for (const char *c = rest; *c && n + 8 < sizeof args;) {
        if (!strncmp(c, "RPB", 3)) {
            n += (size_t)snprintf(args + n, sizeof args - n, "%d", cg_i8_rp_bytes32(t));
            c += 3;
        } else {
            args[n++] = *c++;
            args[n] = 0;
        }
    }
    for (int r = rp_rows; r >= 1; r--) {
        sch_contract_sched rs = *sc;
        rs.mr = r;
        rs.pf = rp_tile_pf(sc->pf, r);
        char rn[64];
        name_of(t, &rs, rn, sizeof rn);
        if (r > 1) OUT("if (rr == %d) %s(q1, s1, l1, u1, %s);\n%selse ", r, rn, args, indent);
        else OUT("%s(q1, s1, l1, u1, %s);\n", rn, args);
    }
}

static void emit_rp_call(kiln_dtype t, const sch_contract_sched *sc, const char *rest, char **s, size_t *len,
                         size_t *cap) {
    emit_rp_call_named(t, sc, rest, cg_i8_rp_tile_name, "              ", s, len, cap);
}

static void emit_rp16_call(kiln_dtype t, const sch_contract_sched *sc, const char *rest, char **s, size_t *len,
                           size_t *cap) {
    emit_rp_call_named(t, sc, rest, cg_i8_rp16_tile_name, "                ", s, len, cap);
}

/* the dot form's loops (dot-f32, dot-i8, dot-i8-rp) */
static void dot_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s, size_t *len,
                         size_t *cap) {
    const sch_contract *c = k->contract;
    kiln_dtype t = p->bufs[c->b_buf].dtype;
    int be = dtype_table[t].block, bb = dtype_table[t].block_bytes;
    int mr = sc->mr, nr = sc->nr;
    int is_float = be == 1;
    int i8 = sc->arith == SCH_ARITH_I8;
    if (i8) {
        /* A's rows quantised once per call and batch point, not per item
         * (dq_*, declared before the item loop by cg_emit_contract_kernel_as,
         * freed after it): with ~8 items per thread, a
         * decode matvec of 1 MB quantised its one row 8 times over */
        /* q4_0, q5_0, q4_k: also A as their wide tile reads it (kcq_pairs,
         * kcq_q4k: pp), so its loop does no permutes */
        int prep = cg_i8_prep(t);
        OUT("      const int64_t qch = K / 32, qok = K %% 32 == 0, dgo = w / ntiles, pst = %s;\n",
            prep == 1 ? "(qch / 2) * 192" : prep == 2 ? "((qch / 8) * 272 + 63) / 64 * 64" : "0");
        OUT("      if (qok && dq_o != dgo) {\n");
        OUT("        if (!dq_a) {\n");
        OUT("          dq_a = (int8_t *)malloc((size_t)(M * K) + 32);\n");
        OUT("          dq_s = (float *)malloc((size_t)(M * qch + 1) * sizeof(float));\n");
        OUT("          dq_z = (int32_t *)malloc((size_t)(M * qch + 1) * sizeof(int32_t));\n");
        OUT("          dq_l = (__m256i *)aligned_alloc(32, (size_t)(M * qch + 1) * 32);\n");
        if (prep) OUT("          dq_p = (char *)aligned_alloc(64, (size_t)(M * pst + 64));\n");
        OUT("        }\n");
        OUT("        for (int64_t mq = 0; dq_a && dq_s && dq_z && dq_l && %s && mq < M; mq++) {\n", prep ? "dq_p" : "1");
        if (c->mdim >= 0) OUT("          const int64_t i%d = mq;\n", c->mdim);
        OUT("          kcq_row(A + (");
        out_sym(p, c->a_base, s, len, cap);
        OUT("), K, %d, dq_a + mq * K, dq_s + mq * qch, dq_l + mq * qch, dq_z + mq * qch);\n", cg_i8_group(t));
        if (prep) {
            OUT("          ");
            cg_emit_i8_prep(t, "dq_a + mq * K", "dq_s + mq * qch", "dq_l + mq * qch", "dq_z + mq * qch", "qch",
                            "dq_p + mq * pst", s, len, cap);
        }
        OUT("        }\n");
        OUT("        dq_o = dgo;\n");
        OUT("      }\n");
        OUT("      int8_t *qa = dq_a; float *qs = dq_s; int32_t *qsum = dq_z; __m256i *ql8 = dq_l; char *qp = dq_p;\n");
        OUT("      const int qready = qok && qa && qs && qsum && ql8 && %s;\n", prep ? "qp" : "1");
    }
    int rp = sch_family_is(sc, SCH_FAM_DOT_I8_RP, t);
    const int rpkb = SCH_REPACK_KBLOCK; /* K per pass over the copy's groups, below */
    if (rp) {
        /* Past rpkb of K, a pass per K-block of the copy (repack_layout.h) over
         * all of the item's groups, one run of memory, each adding its
         * partial dot products into rpacc; the last block then in the loop
         * below: a group's 8 rows of all of K (36 KB for q4_0 at K = 8192)
         * streamed through L1 between two reads of A's quantised row
         * (10 KB) evicted it, and the copy read at 26 instead of 35 GB/s on
         * one Zen 4 thread. (The same passes over a copy laid out group
         * after group, runs of 9 KB 36 KB apart, read it at 20.) */
        char rn[64];
        cg_i8_rp_tile_name(t, sc, rn, sizeof rn);
        OUT("      float *rpacc = NULL; int64_t rpk1 = 0; const int64_t rpw8 = n1 - n0 + 8;\n");
        OUT("      if (rpw && qready && K > %d && (rpacc = (float *)calloc((size_t)(M * rpw8), sizeof(float))) != NULL) {\n",
            rpkb);
        OUT("        rpk1 = (K - 1) / %d * %d;\n", rpkb, rpkb);
        OUT("        for (int64_t kb0 = 0; kb0 < rpk1; kb0 += %d)\n", rpkb);
        OUT("          for (int64_t nn = n0; nn + 8 <= n1; nn += 8) {\n");
        OUT("            int64_t wo[8]; int fast = 1;\n");
        OUT("            for (int j = 0; j < 8; j++) {\n");
        OUT("              const int64_t i%d = nn + j;\n", c->ndim);
        OUT("              const int64_t bo = ");
        out_sym(p, c->b_base, s, len, cap);
        OUT(";\n              wo[j] = bo; if (bo %% %d != 0) fast = 0;\n            }\n", be);
        OUT("            const int64_t rg = wo[0] / (8 * K);\n");
        OUT("            if (!fast || wo[0] %% (8 * K) != 0 || wo[1] - wo[0] != K || wo[7] - wo[0] != 7 * K || rg >= rpg) continue;\n");
        OUT("            for (int64_t mi = 0; mi < M; mi += %d) {\n", rp_rows);
        OUT("              const int64_t rr = M - mi < %d ? M - mi : %d;\n", rp_rows, rp_rows);
        emit_rp_rows("mi", "kb0", s, len, cap);
        OUT("              float t8[%d];\n              ", 8 * rp_rows);
        char pass[96];
        snprintf(pass, sizeof pass, "rpw + (kb0 / 32 * rpg + rg * %d) * %d, %d, t8", rpkb / 32, cg_i8_rp_bytes32(t), rpkb / 32);
        emit_rp_call(t, sc, pass, s, len, cap);
        OUT("              for (int i = 0; i < rr; i++) for (int j = 0; j < 8; j++) rpacc[(mi + i) * rpw8 + nn - n0 + j] += t8[8 * i + j];\n");
        OUT("            }\n");
        OUT("          }\n");
        OUT("      }\n");
    }
    OUT("      for (int64_t m0 = 0; m0 < M; m0 += %d) {\n", sc->mc);
    OUT("        const int64_t m1 = m0 + %d < M ? m0 + %d : M;\n", sc->mc, sc->mc);
    OUT("        for (int64_t nn = n0; nn < n1; nn += %d) {\n", nr);
    OUT("          const void *wr[%d]; int64_t wo[%d]; int fast = %s;\n", nr, nr, is_float ? "1" : "K % 32 == 0");
    OUT("          for (int j = 0; j < %d; j++) {\n", nr);
    OUT("            const int64_t i%d = nn + j < n1 ? nn + j : n1 - 1;\n", c->ndim);
    OUT("            const int64_t bo = ");
    out_sym(p, c->b_base, s, len, cap);
    OUT(";\n            wo[j] = bo;\n");
    if (is_float) OUT("            wr[j] = (const char *)W + bo * %d;\n", bb);
    else
        OUT("            wr[j] = (const char *)W + (bo / %d) * %d; if (bo %% %d != 0) fast = 0;\n", be, bb, be);
    OUT("          }\n");
    if (rp) {
        /* the group of the repacked copy holding rows nn..nn+7, when they
         * are 8 whole rows of K elements it covers (sched/repack_layout.h) */
        OUT("          const int64_t rg = wo[0] / (8 * K);\n");
        OUT("          const int rpok = rpw && fast && nn + 8 <= n1 && wo[0] %% (8 * K) == 0 && wo[1] - wo[0] == K &&"
            " wo[7] - wo[0] == 7 * K && rg < rpg;\n");
    }
    if (rp) {
        /* the copy's group: the decode's rows CG_RP_ROWS at a time, each 8
         * B rows read once for all of them (K from rpk1 on, plus the passes'
         * sums; rpk1 = 0: all of K) */
        if (cg_i8_rp16_ok(t)) {
            /* two whole groups in a row: the 16-row tile, 512-bit */
            OUT("          if (rpok && qready && nn + 16 <= n1 && rg + 1 < rpg) {\n");
            OUT("            int64_t bo8;\n            { const int64_t i%d = nn + 8; bo8 = ", c->ndim);
            out_sym(p, c->b_base, s, len, cap);
            OUT("; }\n");
            OUT("            if (bo8 == wo[0] + 8 * K) {\n");
            OUT("              for (int64_t mm = m0; mm < m1; mm += %d) {\n", rp_rows);
            OUT("                const int64_t rr = m1 - mm < %d ? m1 - mm : %d;\n", rp_rows, rp_rows);
            emit_rp_rows("mm", "rpk1", s, len, cap);
            OUT("                float r16[%d];\n                ", 16 * rp_rows);
            emit_rp16_call(t, sc,
                           "rpw + (rpk1 / 32 * rpg + rg * (qch - rpk1 / 32)) * RPB, (qch - rpk1 / 32) * RPB, qch - rpk1 / 32, r16",
                           s, len, cap);
            emit_rp_store(p, k, "r16", 16, "                ", s, len, cap);
            OUT("              }\n              nn += 8;\n              continue;\n");
            OUT("            }\n          }\n");
        }
        OUT("          if (rpok && qready) {\n");
        OUT("            for (int64_t mm = m0; mm < m1; mm += %d) {\n", rp_rows);
        OUT("              const int64_t rr = m1 - mm < %d ? m1 - mm : %d;\n", rp_rows, rp_rows);
        emit_rp_rows("mm", "rpk1", s, len, cap);
        OUT("              float r8[%d];\n              ", 8 * rp_rows);
        emit_rp_call(t, sc, "rpw + (rpk1 / 32 * rpg + rg * (qch - rpk1 / 32)) * RPB, qch - rpk1 / 32, r8", s, len, cap);
        emit_rp_store(p, k, "r8", 8, "              ", s, len, cap);
        OUT("            }\n            continue;\n          }\n");
    }
    OUT("          for (int64_t mm = m0; mm < m1; mm += %d) {\n", mr);
    OUT("            const float *ar[%d];\n", mr);
    OUT("            for (int i = 0; i < %d; i++) {\n", mr);
    if (c->mdim >= 0) OUT("              const int64_t i%d = mm + i < m1 ? mm + i : m1 - 1;\n", c->mdim);
    OUT("              ar[i] = A + (");
    out_sym(p, c->a_base, s, len, cap);
    OUT(");\n            }\n");
    OUT("            float res[%d];\n", mr * nr);
    if (i8) {
        char tn[64];
        cg_i8_tile_name(t, sc, tn, sizeof tn);
        OUT("            if (fast && qready) {\n");
        OUT("              const int8_t *qr[%d]; const float *sr[%d]; const __m256i *lr[%d]; const int32_t *ur[%d];"
            " const char *pr[%d];\n", mr, mr, mr, mr, mr);
        OUT("              for (int i = 0; i < %d; i++) { const int64_t mi = mm + i < m1 ? mm + i : m1 - 1;\n", mr);
        OUT("                qr[i] = qa + mi * K; sr[i] = qs + mi * qch; lr[i] = ql8 + mi * qch; ur[i] = qsum + mi * qch;\n");
        OUT("                pr[i] = qp ? qp + mi * pst : NULL; }\n");
        OUT("              %s(qr, sr, lr, ur, pr, wr, qch, res);\n            }\n", tn);
    } else {
        OUT("            if (fast) kct_%s_%dx%d_p%d(ar, wr, K / 32, K %% 32, res);\n", dtype_table[t].name, mr, nr, sc->pf);
    }
    OUT("            else for (int i = 0; i < %d; i++) for (int j = 0; j < %d; j++) {\n", mr, nr);
    OUT("              float acc = 0.0f;\n");
    if (t == KILN_F32) OUT("              for (int64_t r = 0; r < K; r++) acc += ar[i][r] * W[wo[j] + r];\n");
    else if (t == KILN_F16) OUT("              for (int64_t r = 0; r < K; r++) acc += ar[i][r] * kh2f(W[wo[j] + r]);\n");
    else if (t == KILN_BF16) OUT("              for (int64_t r = 0; r < K; r++) acc += ar[i][r] * kbf2f(W[wo[j] + r]);\n");
    else OUT("              for (int64_t r = 0; r < K; r++) acc += ar[i][r] * kdq_%s(W, wo[j] + r);\n", dtype_table[t].name);
    OUT("              res[i * %d + j] = acc;\n            }\n", nr);
    OUT("            for (int i = 0; i < %d; i++) {\n", mr);
    OUT("              if (mm + i >= m1) break;\n");
    if (c->mdim >= 0) OUT("              const int64_t i%d = mm + i;\n", c->mdim);
    OUT("              for (int j = 0; j < %d && nn + j < n1; j++) {\n", nr);
    OUT("                const int64_t i%d = nn + j;\n", c->ndim);
    OUT("                out[");
    out_sym(p, k->store_off, s, len, cap);
    OUT("] = res[i * %d + j];\n", nr);
    OUT("              }\n            }\n          }\n        }\n      }\n");
    if (rp) OUT("      free(rpacc);\n");
}

/* the item's columns [n0, n1) of B packed by the prologue P = kernels[pid] (sched/
 * epilogue.c): B(r, n) is P's element r N + n, n row-major over P's
 * dimensions after r, so the columns are rows of P's last dimension, each
 * a box of all of r */
static void emit_prologue_call(const sch_program *p, int32_t pid, char **s, size_t *len, size_t *cap) {
    const sch_kernel *P = &p->kernels[pid];
    int nd = P->ndim;
    OUT("    if (!(flags & %d)) { int64_t plo[%d], phi[%d];\n", CG_KF_B_READY, nd, nd);
    OUT("      const int64_t pw = ");
    out_sym(p, P->dim[nd - 1], s, len, cap);
    OUT(";\n      plo[0] = 0; phi[0] = ");
    out_sym(p, P->dim[0], s, len, cap);
    OUT(";\n");
    OUT("      for (int64_t q = n0 / pw; q * pw < n1; q++) {\n");
    OUT("        int64_t qq = q; (void)qq;\n");
    for (int d = nd - 2; d >= 1; d--) {
        OUT("        { const int64_t e = ");
        out_sym(p, P->dim[d], s, len, cap);
        OUT("; plo[%d] = qq %% e; phi[%d] = plo[%d] + 1; qq /= e; }\n", d, d, d);
    }
    OUT("        plo[%d] = n0 - q * pw > 0 ? n0 - q * pw : 0;\n", nd - 1);
    OUT("        phi[%d] = n1 - q * pw < pw ? n1 - q * pw : pw;\n", nd - 1);
    cg_options co = {CG_ISA_AVX512}; /* what an emittable contraction is emitted for */
    cg_emit_c_box(p, pid, &co, "plo", "phi", "kepi", s, len, cap);
    OUT("      }\n    }\n");
}

void cg_emit_contract_kernel(const sch_program *p, int32_t kid, char **s, size_t *len, size_t *cap) {
    char name[32];
    snprintf(name, sizeof name, "kiln_k%d", (int)kid);
    cg_emit_contract_kernel_as(p, kid, name, NULL, 0, s, len, cap);
}

void cg_emit_contract_kernel_as(const sch_program *p, int32_t kid, const char *name, const sch_contract_sched *over,
                                int over_bucket, char **s, size_t *len, size_t *cap) {
    const sch_kernel *k = &p->kernels[kid];
    const sch_contract *c = k->contract;
    kiln_dtype t = p->bufs[c->b_buf].dtype;
    sch_contract_sched sched[2] = {c->sched[0], c->sched[1]};
    if (over) sched[over_bucket ? 1 : 0] = *over;
    const char *wt = t == KILN_F32 ? "float" : (t == KILN_F16 || t == KILN_BF16) ? "uint16_t" : "uint8_t";
    /* the epilogue (sched/epilogue.c) reads what out wrote through B: out
     * is then not restrict. A search's candidate (over) has none: it is
     * checked against the contraction alone, and its launch runs the
     * epilogue as a kernel of its own (cpu_run.c) */
    int epi = k->epilogue > 0 && !over, prol = k->prologue && !over;
    const char *ores = epi ? "" : "restrict ";
    OUT("int %s(void *const *B, const int64_t *v, int64_t lo, int64_t hi, int64_t chunk, int64_t flags) {\n", name);
    OUT("  (void)v; (void)flags;\n");
    OUT("  const float *restrict A = (const float *)B[%d];\n", c->a_buf);
    /* ... and with a prologue, B is written through B[] inside the items
     * before the schedule reads it: W is then not restrict either */
    OUT("  const %s *%sW = (const %s *)B[%d];\n", wt, prol ? "" : "restrict ", wt, c->b_buf);
    OUT("  float *%sout = (float *)B[%d];\n", ores, k->out_buf);
    OUT("  int kepi = 0;\n");
    for (int d = 0; d < k->ndim; d++) {
        OUT("  const int64_t d%d = ", d);
        out_sym(p, k->dim[d], s, len, cap);
        OUT(";\n");
    }
    OUT("  const int64_t K = ");
    out_sym(p, k->rdim, s, len, cap);
    OUT(";\n");
    if (c->mdim >= 0) OUT("  const int64_t M = d%d;\n", c->mdim);
    else OUT("  const int64_t M = 1;\n");
    OUT("  const int64_t N = d%d;\n", c->ndim);
    /* items: each batch point's N B rows in ntiles = chunk runs of whole
     * strips of the bucket's nr rows (contract.h: sch_contract_runs) */
    OUT("  const int64_t ntiles = chunk > 0 ? chunk : 1;\n");
    OUT("  const int64_t snr = M <= %d || (flags & %d) ? %d : %d, nstrips = (N + snr - 1) / snr;\n", SCH_SMALL_M,
        CG_KF_DECODE_ROWS, sched[0].nr > 0 ? sched[0].nr : 1, sched[1].nr > 0 ? sched[1].nr : 1);
    unsigned pro = 0;
    for (int b = 0; b < 2; b++) {
        const sch_family *f = sch_family_of(&sched[b]);
        if (f) pro |= family_emit[f->id].pro;
    }
    if (pro & PRO_I8A) cg_emit_packed_i8_pre(p, k, &sched[1], s, len, cap);
    if (pro & PRO_AMX_BF16) cg_emit_amx_bf16_pre(p, k, s, len, cap);
    if (pro & PRO_BF16A) cg_emit_packed_bf16_pre(s, len, cap);
    /* the int8 and AMX bf16 packers read the copy too (cg_i8_copy_source) */
    if ((pro & PRO_RP) || ((pro & (PRO_I8A | PRO_AMX_BF16)) && cg_i8_copy_source(t))) {
        /* B's repacked copy, bufs[nbufs + 1 + b] (NULL: none), if made for this K */
        OUT("  const uint8_t *rpw = NULL; int64_t rpg = 0;\n");
        OUT("  { const int64_t *h = (const int64_t *)B[%d]; if (h && h[0] == K && h[2] == %d) { rpg = h[1]; rpw = (const uint8_t *)h + %d; } }\n",
            (int)(p->nbufs + 1 + c->b_buf), SCH_REPACK_KBLOCK, SCH_REPACK_HEADER);
    }
    if (pro & PRO_DOT_I8)
        OUT("  int8_t *dq_a = NULL; float *dq_s = NULL; int32_t *dq_z = NULL; __m256i *dq_l = NULL; char *dq_p = NULL;"
            " int64_t dq_o = -1;\n");
    /* items split along M too (sched/contract_split.h): the item's part of
     * M's tiles read and written through pointers moved to its first row */
    int64_t a_step = 0, o_step = 0;
    int msplit = cg_contract_msplit_ok(p, k, &sched[1], &a_step, &o_step);
    if (msplit) {
        OUT("  const int64_t mparts = (flags >> %d) > 1 ? (flags >> %d) : 1;\n", SCH_MPARTS_SHIFT, SCH_MPARTS_SHIFT);
        OUT("  const int64_t mtiles = (M + %d) / %d;\n", sched[1].mr - 1, sched[1].mr > 0 ? sched[1].mr : 1);
    }
    OUT("  for (int64_t w = lo; w < hi; w++) {\n");
    OUT("    int64_t o = w / ntiles;\n");
    if (msplit) {
        int mr = sched[1].mr > 0 ? sched[1].mr : 1;
        OUT("    const int64_t mpi = o %% mparts; o /= mparts;\n");
        OUT("    const int64_t mlo = mparts > 1 ? %d * (mtiles * mpi / mparts) : 0;\n", mr);
        OUT("    const int64_t mhi = mparts > 1 && %d * (mtiles * (mpi + 1) / mparts) < M ? %d * (mtiles * (mpi + 1) / mparts) : M;\n",
            mr, mr);
        OUT("    const float *const A_m = A + mlo * (int64_t)%lld;\n", (long long)a_step);
        OUT("    float *const out_m = out + mlo * (int64_t)%lld;\n", (long long)o_step);
        OUT("    const int64_t M_m = mhi - mlo;\n");
        OUT("    if (M_m <= 0) continue;\n");
        OUT("    const float *restrict A = A_m; float *%sout = out_m; const int64_t M = M_m;\n", ores);
        OUT("    (void)A; (void)out; (void)M;\n");
    }
    OUT("    const int64_t s0 = nstrips * (w %% ntiles) / ntiles, s1 = nstrips * (w %% ntiles + 1) / ntiles;\n");
    OUT("    const int64_t n0 = snr * s0, n1 = snr * s1 < N ? snr * s1 : N;\n");
    OUT("    if (n1 <= n0) continue;\n");
    for (int d = k->ndim - 1; d >= 0; d--) {
        if (d == c->mdim || d == c->ndim) continue;
        OUT("    const int64_t i%d = o %% d%d; o /= d%d;\n", d, d, d);
    }
    OUT("    (void)o;\n");
    if (prol) emit_prologue_call(p, kid - 1, s, len, cap);
    /* with an epilogue the schedule is a do-while(0), so that a schedule
     * leaving the item early (continue) still reaches the epilogue call */
    if (epi) OUT("    do {\n");
    OUT("    if (M <= %d || (flags & %d)) {\n", SCH_SMALL_M, CG_KF_DECODE_ROWS);
    emit_schedule(p, k, &sched[0], s, len, cap);
    OUT("    } else {\n");
    emit_schedule(p, k, &sched[1], s, len, cap);
    OUT("    }\n");
    if (epi) {
        /* the block this item wrote: its batch point, its rows of M (its
         * part of them when split along M), its columns [n0, n1) */
        OUT("    } while (0);\n");
        OUT("    { int64_t elo[%d], ehi[%d];\n", k->ndim, k->ndim);
        for (int d = 0; d < k->ndim; d++) {
            if (d == c->ndim) OUT("      elo[%d] = n0; ehi[%d] = n1;\n", d, d);
            else if (d == c->mdim && msplit) OUT("      elo[%d] = mlo; ehi[%d] = mhi;\n", d, d);
            else if (d == c->mdim) OUT("      elo[%d] = 0; ehi[%d] = M;\n", d, d);
            else OUT("      elo[%d] = i%d; ehi[%d] = i%d + 1;\n", d, d, d, d);
        }
        cg_options co = {CG_ISA_AVX512}; /* what an emittable contraction is emitted for */
        cg_emit_c_box(p, k->epilogue, &co, "elo", "ehi", "kepi", s, len, cap);
        OUT("    }\n");
    }
    OUT("  }\n");
    if (pro & PRO_I8A) cg_emit_packed_i8_post(s, len, cap);
    if (pro & PRO_AMX_BF16) cg_emit_amx_bf16_post(s, len, cap);
    if (pro & PRO_BF16A) cg_emit_packed_bf16_post(s, len, cap);
    if (pro & PRO_DOT_I8) OUT("  free(dq_a); free(dq_s); free(dq_z); free(dq_l); free(dq_p);\n");
    OUT("  return kepi;\n}\n\n");
}
