/* emit_stream_tile.c — the C of a stream kernel in the tile form
 * (src/sched/stream_tile.c): TR rows at a time, keys in blocks, the scores'
 * dot products computed inside the kernel.
 *
 * A tile is up to TR (8) consecutive work items (rows) whose key and value
 * operands start at the same offset (grouped-query heads at one position,
 * or positions of one head: gemma3-270m's 4 query heads at two positions
 * over their one key head): each key and value vector is then read from
 * L2 or beyond once for the tile's rows. The products run in register
 * groups of TG (4) rows, the second group (only when the tile has more than
 * TG rows: a decode step's 4 heads take one) right after the first over the
 * same 4 keys or the same value chunk, still in L1: what lets the global
 * layers' keys and values (4 MB each at 4000 positions, past L2) be fetched
 * once per two positions. Per block of KILN_STREAM_KB keys:
 *  - the block is skipped only when, for every row of the tile, the mask's
 *    comparisons are constant over it and make the logits a constant
 *    (src/sched/stream_mask.c); each row remembers its largest skipped
 *    constant (kskip) and a tile with a row whose skipped weight is not
 *    exactly 0 runs again without skipping (kfull), as the one-row kernel;
 *  - per group, the TG x TK scores of a sub-block of TK keys accumulate in
 *    TG*TK vector registers over d (each row vector and key vector loaded once), then a
 *    row's TK vectors are summed across lanes together (KTSUM4: horizontal
 *    adds where the ISA has them);
 *  - per row, the logits' tree (scale, soft-cap, masks: whatever wraps the
 *    dot) is evaluated at each score, the running max grows once per block
 *    (the sum and products rescaled by exp2((m_old - m_new) c)), the
 *    weights exp2((x - m) c) of the whole block computed in vectors
 *    (ktexp: the vector exp2 of emit_c.c's prelude, 2 ulp, where the source
 *    has it; the block's entries past its last key are -inf, so 0) and summed;
 *  - the products acc[r][n] += p[r][j] v[j][n] run, group by group, up to 4 value vectors at
 *    a time (2 without AVX-512's 32 registers), their accumulators in
 *    registers across the block and each
 *    weight broadcast from memory once per key (a register broadcast takes
 *    a shuffle port the multiply-adds share on some cores).
 * Why these: at gemma3-270m's shapes (d = n = 256, 4 rows over one key
 * head) the scalar exp2f per weight, the register broadcasts and the
 * lane-by-lane score sums held the kernel near 40 of 118 GFLOP/s of one
 * Zen 4 thread; with them 64 (bench/results/stream-tile-gemma3-270m-epyc.md).
 * Rows short of TR (a tile cut by the end of the work range or by a key
 * offset that changes) repeat row 0's operands and are not stored (a group
 * with no row of the tile is not run); keys
 * short of TK repeat the block's last key and are not used.
 *
 * Numerics: f32 dot products in SCH_TILE_VW lanes summed across lanes at
 * the end (the reference sums in order), the running max per block instead
 * of per key, a block's weights summed before they join the row's sum; agreement to f32 accumulation tolerance, special values as in
 * the one-row kernel (a row of -inf logits gives NaN, a fully masked row
 * uniform weights). The generated code marks itself with "ktile".
 *
 * The bf16 form (sch_program.stream_bf16, asked for by KILN_STREAM_BF16=1
 * and set only on CPUs with avx512_bf16; d a multiple of 32, the values of
 * 16): the same tile with both products on vdpbf16ps (two bf16 products
 * summed into each f32 lane): query rows rounded to bf16 once per tile, keys
 * and values where loaded, the block's weights after their exp2; scores,
 * max, sums and accumulators stay f32, and the softmax is the f32 one. Each
 * product carries <= 2^-8 relative error from the two roundings (the packed
 * bf16 contraction's bound, emit_gemm_bf16.c). Printed inside "#if KTBF16"
 * (AVX-512 F+BW in the unit) with the f32 tile in the #else, so a unit built
 * for a lower ISA (KILN_ISA) gets the f32 tile; marked "ktile-bf16
 * (approximate)". SCH_STREAM_BF16_ONLY (KILN_STREAM_BF16=1) prints that body
 * alone; SCH_STREAM_BF16_BOTH (the streaming alternative of option stream 2,
 * where the streaming-bf16 attention form is measured, stream_select.c)
 * prints the f32 and the bf16 body as static functions and the kernel calls
 * the bf16 one when its launch's flags hold CG_KF_BF16.
 */
#include "emit_stream.h"

#include <stdio.h>

#include "base.h"
#include "stream_mask.h"
#include "stream_tile.h"

/* rows per tile, rows per register group (a tile's products run group by
 * group over keys and values still in L1), keys per register tile */
#define TR 8
#define TG 4
#define TK 4 /* KTSUM4 reduces the 4 scores of one row */
_Static_assert(TR == 2 * TG, "a tile is two register groups: the second runs when the tile has more than TG rows");
_Static_assert(KILN_STREAM_KB % 16 == 0, "ktexp runs whole 16-lane vectors over a block's scores");

#define OUT(...) sch_appendf(&pr->s, &pr->len, &pr->cap, __VA_ARGS__)

/* the vector type, unaligned loads and a multiply-add (fused where the ISA has it), once per source */
static const char *tile_prelude =
    "#ifndef KILN_STREAM_TILE_PRELUDE\n"
    "#define KILN_STREAM_TILE_PRELUDE\n"
    "typedef float ktv __attribute__((vector_size(32)));\n"
    "typedef float ktvu __attribute__((vector_size(32), aligned(4)));\n"
    "#define KTLD(p) ((ktv)(*(const ktvu *)(p)))\n"
    "#define KTSET(x) ((ktv){0, 0, 0, 0, 0, 0, 0, 0} + (x))\n"
    "#if defined(__F16C__) && (defined(_IMMINTRIN_H_INCLUDED) || defined(__IMMINTRIN_H))\n"
    "#define KTLDH(p) ((ktv)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p))))\n"
    "#else\n"
    "#define KTLDH(p) ((ktv){kh2f((p)[0]), kh2f((p)[1]), kh2f((p)[2]), kh2f((p)[3]), kh2f((p)[4]), kh2f((p)[5]), kh2f((p)[6]), kh2f((p)[7])})\n"
    "#endif\n"
    "#if defined(__FMA__) && (defined(_IMMINTRIN_H_INCLUDED) || defined(__IMMINTRIN_H))\n"
    "#define KTFMA(a, b, c) ((ktv)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))\n"
    "#else\n"
    "#define KTFMA(a, b, c) ((a) * (b) + (c))\n"
    "#endif\n"
    "#define KTSUM(a) ((((a)[0] + (a)[4]) + ((a)[1] + (a)[5])) + (((a)[2] + (a)[6]) + ((a)[3] + (a)[7])))\n"
    "#if defined(__AVX2__) && (defined(_IMMINTRIN_H_INCLUDED) || defined(__IMMINTRIN_H))\n"
    "#define KTBC(p) ((ktv)_mm256_broadcast_ss(p))\n"
    "#define KTSUM4(d, a, b, c, e) do { \\\n"
    "    const __m256 kh_ = _mm256_hadd_ps(_mm256_hadd_ps((__m256)(a), (__m256)(b)), _mm256_hadd_ps((__m256)(c), (__m256)(e))); \\\n"
    "    _mm_storeu_ps((d), _mm_add_ps(_mm256_castps256_ps128(kh_), _mm256_extractf128_ps(kh_, 1))); } while (0)\n"
    "#else\n"
    "#define KTBC(p) KTSET(*(p))\n"
    "#define KTSUM4(d, a, b, c, e) do { (d)[0] = KTSUM(a); (d)[1] = KTSUM(b); (d)[2] = KTSUM(c); (d)[3] = KTSUM(e); } while (0)\n"
    "#endif\n"
    "#if defined(__AVX512F__) && defined(__AVX512BW__) && (defined(_IMMINTRIN_H_INCLUDED) || defined(__IMMINTRIN_H))\n"
    "#define KTBF16 1\n"
    "#define KTBF16_FN __attribute__((target(\"avx512bf16\")))\n"
    "/* a 16-lane sum's two halves added: 8 lanes for KTSUM4 */\n"
    "#define KTHALF(z) ((ktv)_mm256_add_ps(_mm512_castps512_ps256(z), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1))))\n"
    "/* 32 floats from p and p + s as bf16 words 0..15 and 16..31 */\n"
    "#define KTB2(p, s) _mm512_cvtne2ps_pbh(_mm512_loadu_ps((p) + (s)), _mm512_loadu_ps(p))\n"
    "/* words i and 16 + i to dword i: two keys' values of one lane side by side */\n"
    "static const uint16_t ktpair[32] __attribute__((aligned(64), unused)) = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,\n"
    "    8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};\n"
    "#else\n"
    "#define KTBF16 0\n"
    "#define KTBF16_FN\n"
    "#endif\n"
    "/* s[0..n) = exp2((s - m) c) (entries past the block's keys hold -inf: 0), their sum */\n"
    "static inline float ktexp(float *s, int n, float m, float c) {\n"
    "#if defined(KEXP2_POLY) && defined(__AVX512F__)\n"
    "  __m512 t = _mm512_setzero_ps();\n"
    "  for (int j = 0; j < n; j += 16) {\n"
    "    const __m512 x = kexp2_16(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(s + j), _mm512_set1_ps(m)), _mm512_set1_ps(c)));\n"
    "    _mm512_storeu_ps(s + j, x);\n"
    "    t = _mm512_add_ps(t, x);\n"
    "  }\n"
    "  return _mm512_reduce_add_ps(t);\n"
    "#elif defined(KEXP2_POLY) && defined(__AVX2__)\n"
    "  __m256 t = _mm256_setzero_ps();\n"
    "  for (int j = 0; j < n; j += 8) {\n"
    "    const __m256 x = kexp2_8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j), _mm256_set1_ps(m)), _mm256_set1_ps(c)));\n"
    "    _mm256_storeu_ps(s + j, x);\n"
    "    t = _mm256_add_ps(t, x);\n"
    "  }\n"
    "  return KTSUM((ktv)t);\n"
    "#else\n"
    "  float t = 0;\n"
    "  for (int j = 0; j < n; j++) t += s[j] = exp2f((s[j] - m) * c);\n"
    "  return t;\n"
    "#endif\n"
    "}\n"
    "#endif\n";

/* declares the row variables i0.. of tile row `r` (a C expression) from kix */
static void row_vars(cg_printer *pr, int nrow, const char *r, int ind) {
    for (int d = 0; d < nrow; d++) {
        cg_print_indent(pr, ind);
        OUT("const int64_t i%d = kix[%s][%d]; (void)i%d;\n", d, r, d, d);
    }
}

/* the block's skip test for every row of the tile */
static void print_tile_skip(cg_printer *pr, const sch_kernel *k, const sch_stream_mask *m) {
    int j = k->ndim - 1;
    OUT("      if (!kfull) {\n");
    OUT("        int kall = 1;\n");
    OUT("        float kcand[%d];\n", TR);
    OUT("        for (int kr = 0; kr < knr && kall; kr++) {\n");
    row_vars(pr, k->ndim - 1, "kr", 10);
    OUT("          unsigned kb0 = 0, kb1 = 0;\n");
    for (int e = 0; e < 2; e++) {
        OUT("          {\n            const int64_t i%d = %s;\n", j, e ? "kje - 1" : "kjb");
        for (int q = 0; q < m->nleaves; q++) {
            cg_print_lx(pr, m->leaf[q], 12);
            OUT("            kb%d |= (t%d != 0) << %d;\n", e, m->leaf[q], q);
        }
        OUT("          }\n");
    }
    OUT("          kall = kb0 == kb1 && kmconst[kb0];\n");
    OUT("          kcand[kr] = kmval[kb0];\n");
    OUT("        }\n");
    OUT("        if (kall) {\n");
    OUT("          for (int kr = 0; kr < knr; kr++) if (kcand[kr] > kskip[kr]) kskip[kr] = kcand[kr];\n");
    OUT("          nskip++;\n          continue;\n        }\n      }\n");
}

/* opens row group g's block: always the first, the second when the tile has more than TG rows */
static void group_open(cg_printer *pr, int g, int ind) {
    cg_print_indent(pr, ind);
    if (g) OUT("if (knr > %d) {\n", g * TG);
    else OUT("{\n");
}

/* the TR x TK scores of keys [kt, kt + TK) into ksc[r][kt - kjb + c], TG rows at a time */
static void print_scores(cg_printer *pr, const sch_stream_tile *t) {
    const lx *kl = &pr->p->lx[t->keys];
    const char *kt = t->key_f16 ? cg_storage_type(pr->d, KILN_F16) : "float", *ld = t->key_f16 ? "KTLDH" : "KTLD";
    OUT("      for (int64_t kt = kjb; kt < kje; kt += %d) {\n", TK);
    for (int c = 0; c < TK; c++)
        OUT("        const %s *kk%d = &b%d[kkb + (kt + %d < kje ? kt + %d : kje - 1) * kks];\n", kt, c, kl->buf, c, c);
    for (int g = 0; g < TR / TG; g++) {
        group_open(pr, g, 8);
        for (int r = 0; r < TG; r++)
            for (int c = 0; c < TK; c++) OUT("        ktv ks%d%d = KTSET(0.0f);\n", r, c);
        OUT("        for (int64_t kd = 0; kd < %lld; kd += %d) {\n", (long long)t->d, SCH_TILE_VW);
        for (int r = 0; r < TG; r++) OUT("          const ktv kq%d = KTLD(kq[%d] + kd);\n", r, g * TG + r);
        for (int c = 0; c < TK; c++) {
            OUT("          const ktv kx%d = %s(kk%d + kd);\n", c, ld, c);
            for (int r = 0; r < TG; r++) OUT("          ks%d%d = KTFMA(kq%d, kx%d, ks%d%d);\n", r, c, r, c, r, c);
        }
        OUT("        }\n");
        for (int r = 0; r < TG; r++)
            OUT("        KTSUM4(&ksc[%d][kt - kjb], ks%d0, ks%d1, ks%d2, ks%d3);\n", g * TG + r, r, r, r, r);
        OUT("        }\n");
    }
    OUT("      }\n");
}

/* per row: the logits, the block's max, the rescale, the weights */
static void print_weights(cg_printer *pr, const sch_kernel *k, const sch_stream_tile *t, const char *c) {
    const sch_program *p = pr->p;
    int j = k->ndim - 1;
    int32_t x = p->lx[k->expr].a;
    OUT("      for (int kr = 0; kr < knr; kr++) {\n");
    row_vars(pr, k->ndim - 1, "kr", 8);
    OUT("        float kbm = -%s;\n", pr->d->inf);
    OUT("        for (int64_t i%d = kjb; i%d < kje; i%d++) {\n", j, j, j);
    OUT("          const float s%d = ksc[kr][i%d - kjb];\n", t->stage, j);
    cg_print_lx(pr, x, 10);
    OUT("          ksc[kr][i%d - kjb] = t%d;\n", j, x);
    OUT("          if (t%d > kbm) kbm = t%d;\n", x, x);
    OUT("        }\n");
    OUT("        if (kbm > km[kr]) {\n");
    OUT("          const float ka = %s((km[kr] - kbm) * %s);\n", pr->d->exp2, c);
    OUT("          kl[kr] *= ka;\n");
    OUT("          const ktv kav = KTSET(ka);\n");
    OUT("          for (int64_t q = 0; q < %lld; q++) kacc[kr][q] *= kav;\n", (long long)(t->n / SCH_TILE_VW));
    OUT("          km[kr] = kbm;\n");
    OUT("        }\n");
    OUT("        for (int64_t kj = kje - kjb; kj < %d; kj++) ksc[kr][kj] = -%s;\n", KILN_STREAM_KB, pr->d->inf);
    OUT("        kl[kr] += ktexp(ksc[kr], %d, km[kr], %s);\n", KILN_STREAM_KB, c);
    OUT("      }\n");
    OUT("      for (int kr = knr; kr < %d; kr++) for (int64_t kj = 0; kj < kje - kjb; kj++) ksc[kr][kj] = 0;\n", TR);
}

/* acc[r][n] += p[r][j] v[j][n], qb value vectors at a time (the TR x qb
 * accumulators in registers across the block, each weight broadcast from
 * memory once per key for the qb vectors) */
static void print_values_qb(cg_printer *pr, const sch_stream_tile *t, int qmax) {
    int64_t nv = t->n / SCH_TILE_VW;
    int qb = nv % 4 == 0 && qmax >= 4 ? 4 : nv % 2 == 0 ? 2 : 1;
    OUT("      for (int64_t q = 0; q < %lld; q += %d) {\n", (long long)nv, qb);
    for (int g = 0; g < TR / TG; g++) {
        group_open(pr, g, 8);
        for (int r = 0; r < TG; r++)
            for (int b = 0; b < qb; b++) OUT("        ktv kc%d%d = kacc[%d][q + %d];\n", r, b, g * TG + r, b);
        OUT("        for (int64_t kj = 0; kj < kje - kjb; kj++) {\n");
        OUT("          const %s *kvj = kvr + (kjb + kj) * kvs + q * %d;\n",
            t->val_f16 ? cg_storage_type(pr->d, KILN_F16) : "float", SCH_TILE_VW);
        for (int b = 0; b < qb; b++)
            OUT("          const ktv kv%d = %s(kvj + %d);\n", b, t->val_f16 ? "KTLDH" : "KTLD", b * SCH_TILE_VW);
        for (int r = 0; r < TG; r++) {
            OUT("          const ktv kp%d = KTBC(&ksc[%d][kj]);\n", r, g * TG + r);
            for (int b = 0; b < qb; b++) OUT("          kc%d%d = KTFMA(kp%d, kv%d, kc%d%d);\n", r, b, r, b, r, b);
        }
        OUT("        }\n");
        for (int r = 0; r < TG; r++)
            for (int b = 0; b < qb; b++) OUT("        kacc[%d][q + %d] = kc%d%d;\n", g * TG + r, b, r, b);
        OUT("        }\n");
    }
    OUT("      }\n");
}

/* 4 value vectors per pass where the ISA has 32 vector registers (16
 * accumulators, 4 weights, 4 values), else 2 (no spills in 16) */
static void print_values(cg_printer *pr, const sch_stream_tile *t) {
    OUT("#ifdef __AVX512F__\n");
    print_values_qb(pr, t, 4);
    OUT("#else\n");
    print_values_qb(pr, t, 2);
    OUT("#endif\n");
}

/* bf16 form: the TR x TK scores of keys [kt, kt + TK) on vdpbf16ps, the
 * tile's query rows rounded once (kqb), each key's 32-float chunks rounded
 * where loaded; the 16-lane sums halved to 8 lanes for KTSUM4 */
static void print_scores_bf16(cg_printer *pr, const sch_stream_tile *t) {
    const lx *kl = &pr->p->lx[t->keys];
    OUT("      for (int64_t kt = kjb; kt < kje; kt += %d) {\n", TK);
    for (int c = 0; c < TK; c++)
        OUT("        const float *kk%d = &b%d[kkb + (kt + %d < kje ? kt + %d : kje - 1) * kks];\n", c, kl->buf, c, c);
    for (int g = 0; g < TR / TG; g++) {
        group_open(pr, g, 8);
        for (int r = 0; r < TG; r++)
            for (int c = 0; c < TK; c++) OUT("        __m512 kz%d%d = _mm512_setzero_ps();\n", r, c);
        OUT("        for (int64_t kd = 0; kd < %lld; kd += 32) {\n", (long long)t->d);
        for (int c = 0; c < TK; c++) OUT("          const __m512bh ky%d = KTB2(kk%d + kd, 16);\n", c, c);
        for (int r = 0; r < TG; r++) {
            OUT("          const __m512bh kw%d = kqb[%d][kd / 32];\n", r, g * TG + r);
            for (int c = 0; c < TK; c++) OUT("          kz%d%d = _mm512_dpbf16_ps(kz%d%d, kw%d, ky%d);\n", r, c, r, c, r, c);
        }
        OUT("        }\n");
        for (int r = 0; r < TG; r++)
            OUT("        KTSUM4(&ksc[%d][kt - kjb], KTHALF(kz%d0), KTHALF(kz%d1), KTHALF(kz%d2), KTHALF(kz%d3));\n",
                g * TG + r, r, r, r, r);
        OUT("        }\n");
    }
    OUT("      }\n");
}

/* bf16 form: acc[r][n] += p[r][j] v[j][n] two keys per vdpbf16ps: the
 * block's weights rounded as pairs (kpw[r][j / 2] = p[j], p[j + 1]), two
 * keys' value chunks rounded and interleaved by lane (ktpair), a key past
 * the block's end a zero value with a zero weight; qb 16-lane vectors per
 * pass, their accumulators in registers across the block */
static void print_values_bf16(cg_printer *pr, const sch_stream_tile *t) {
    int64_t nv = t->n / 16;
    int qb = nv % 4 == 0 ? 4 : nv % 2 == 0 ? 2 : 1;
    OUT("      for (int kr = 0; kr < %d; kr++) {\n", TR);
    OUT("        if (kr >= knr) for (int64_t kj = kje - kjb; kj < %d; kj++) ksc[kr][kj] = 0;\n", KILN_STREAM_KB);
    for (int h = 0; h < KILN_STREAM_KB; h += 32)
        OUT("        _mm512_storeu_si512((void *)&kpw[kr][%d], (__m512i)KTB2(&ksc[kr][%d], 16));\n", h / 2, h);
    OUT("      }\n");
    OUT("      for (int64_t q = 0; q < %lld; q += %d) {\n", (long long)nv, qb);
    for (int g = 0; g < TR / TG; g++) {
        group_open(pr, g, 8);
        for (int r = 0; r < TG; r++)
            for (int b = 0; b < qb; b++)
                OUT("        __m512 kc%d%d = _mm512_loadu_ps((const float *)&kacc[%d][0] + (q + %d) * 16);\n", r, b,
                    g * TG + r, b);
        OUT("        for (int64_t kj = 0; kj < kje - kjb; kj += 2) {\n");
        OUT("          const float *kvj = kvr + (kjb + kj) * kvs + q * 16;\n");
        OUT("          const int kh = kj + 1 < kje - kjb;\n");
        for (int b = 0; b < qb; b++)
            OUT("          const __m512bh kv%d = (__m512bh)_mm512_permutexvar_epi16(kpi, (__m512i)_mm512_cvtne2ps_pbh("
                "kh ? _mm512_loadu_ps(kvj + kvs + %d) : _mm512_setzero_ps(), _mm512_loadu_ps(kvj + %d)));\n",
                b, b * 16, b * 16);
        for (int r = 0; r < TG; r++) {
            OUT("          const __m512bh kp%d = (__m512bh)_mm512_set1_epi32((int)kpw[%d][kj / 2]);\n", r, g * TG + r);
            for (int b = 0; b < qb; b++) OUT("          kc%d%d = _mm512_dpbf16_ps(kc%d%d, kp%d, kv%d);\n", r, b, r, b, r, b);
        }
        OUT("        }\n");
        for (int r = 0; r < TG; r++)
            for (int b = 0; b < qb; b++)
                OUT("        _mm512_storeu_ps((float *)&kacc[%d][0] + (q + %d) * 16, kc%d%d);\n", g * TG + r, b, r, b);
        OUT("        }\n");
    }
    OUT("      }\n");
}

/* the tile's rows: up to TR work items from w whose key and value offsets equal the first's */
static void print_rows(cg_printer *pr, const sch_kernel *k, const sch_stream_tile *t) {
    const sch_program *p = pr->p;
    int nrow = k->ndim - 1;
    OUT("    int knr = 0;\n    int64_t kkb = 0, kvb = 0;\n");
    OUT("    const int64_t ksp = w / knrows; /* the key split of this tile's items (split mode) */\n");
    OUT("    for (; knr < %d && w + knr < hi && (w + knr) / knrows == ksp; knr++) {\n", TR);
    OUT("      int64_t o = (w + knr) %% knrows;\n");
    OUT("      krow[knr] = o;\n");
    for (int d = nrow - 1; d >= 0; d--) {
        if (d > 0) OUT("      const int64_t i%d = o %% d%d; o /= d%d;\n", d, d, d);
        else OUT("      const int64_t i0 = o;\n");
    }
    OUT("      (void)o;\n      const int64_t kb = ");
    cg_print_sym(pr, t->key_base);
    OUT(", vb = ");
    cg_print_sym(pr, t->val_base);
    OUT(";\n      if (knr > 0 && (kb != kkb || vb != kvb)) break;\n");
    OUT("      kkb = kb, kvb = vb;\n");
    for (int d = 0; d < nrow; d++) OUT("      kix[knr][%d] = i%d;\n", d, d);
    OUT("      kq[knr] = &b%d[", p->lx[t->rows].buf);
    cg_print_sym(pr, t->row_base);
    OUT("];\n    }\n");
    OUT("    for (int kr = knr; kr < %d; kr++) kq[kr] = kq[0];\n", TR);
    OUT("    const %s *restrict kvr = &b%d[kvb];\n", t->val_f16 ? cg_storage_type(pr->d, KILN_F16) : "float",
        p->lx[t->vals].buf);
}

/* one body of the tile: bf 1 the bf16 products (under #if KTBF16, the f32
 * ones in the #else), 0 the f32 ones only; `decl` what precedes "int name(" */
static void tile_body(cg_printer *pr, int32_t kid, const char *decl, const char *name, const sch_stream_tile *t,
                      int bf) {
    const sch_program *p = pr->p;
    const sch_kernel *k = &p->kernels[kid];
    sym_pool *sp = p->g->syms;
    int n = k->ndim, j = n - 1;
    int64_t kks = 0, kvs = 0;
    KILN_ASSERT(sym_is_const(sp, t->key_step, &kks) && sym_is_const(sp, t->val_step, &kvs));
    char c[48];
    snprintf(c, sizeof c, "%.9gf", k->stream_c);
    OUT("%s", decl);
    if (bf) OUT("KTBF16_FN ");
    OUT("int %s(void *const *B, const int64_t *v, int64_t lo, int64_t hi, int64_t chunk, int64_t flags) {\n", name);
    OUT("  int kerr = 0; (void)v; (void)chunk; (void)flags; /* ktile %dx%d */\n", TR, TK);
    if (bf) {
        OUT("#if KTBF16 /* ktile-bf16 (approximate) */\n");
        OUT("  __m512bh kqb[%d][%lld];\n", TR, (long long)(t->d / 32));
        OUT("  uint32_t kpw[%d][%d];\n", TR, KILN_STREAM_KB / 2);
        OUT("  const __m512i kpi = _mm512_load_si512((const void *)ktpair);\n");
        OUT("#endif\n");
    }
    cg_stream_declare_bufs(pr, k);
    for (int d = 0; d < n; d++) {
        OUT("  const int64_t d%d = ", d);
        cg_print_sym(pr, k->dim[d]);
        OUT(";\n");
    }
    OUT("  const int64_t kks = %lldLL, kvs = %lldLL;\n", (long long)kks, (long long)kvs);
    /* split mode (chunk = S > 1, the runtime's choice): items are
     * S x rows, split-major; split s reads every S-th block of keys from
     * block s and leaves its running max, sum, skipped constant and
     * products in the scratch B[nbufs] (after one counter per row, zeroed
     * by the runtime); the split that finishes a row last merges the row's
     * partials */
    OUT("  const int64_t knrows = ");
    for (int d = 0; d < n - 1; d++) OUT("%sd%d", d ? " * " : "", d);
    if (n - 1 == 0) OUT("1");
    OUT(";\n");
    OUT("  const int64_t kS = chunk > 1 ? chunk : 1;\n");
    OUT("  int *const kcnt = kS > 1 ? (int *)B[%d] : NULL;\n", p->nbufs);
    OUT("  float *const kpart = kS > 1 ? (float *)((char *)B[%d] + (knrows * (int64_t)sizeof(int) + 63) / 64 * 64) : NULL;\n",
        p->nbufs);
    OUT("  int64_t krow[%d];\n", TR);
    OUT("  ktv kacc[%d][%lld];\n", TR, (long long)(t->n / SCH_TILE_VW));
    OUT("  float ksc[%d][%d];\n", TR, KILN_STREAM_KB);
    OUT("  int64_t kix[%d][%d];\n", TR, n - 1);
    OUT("  const float *kq[%d];\n", TR);
    OUT("  for (int64_t w = lo; w < hi;) {\n");
    print_rows(pr, k, t);
    if (bf) {
        OUT("#if KTBF16\n");
        OUT("    for (int kr = 0; kr < %d; kr++)\n", TR);
        OUT("      for (int64_t kd = 0; kd < %lld; kd += 32) kqb[kr][kd / 32] = KTB2(kq[kr] + kd, 16);\n", (long long)t->d);
        OUT("#endif\n");
    }
    sch_stream_mask mk;
    int skip = sch_stream_mask_analyse(p, k, &mk);
    if (skip) cg_stream_print_mask_table(pr, &mk);
    OUT("    float km[%d], kl[%d], kskip[%d];\n    int64_t nskip;\n    int kfull = 0;\n", TR, TR, TR);
    OUT("  kagain:;\n    nskip = 0;\n");
    OUT("    for (int kr = 0; kr < %d; kr++) {\n", TR);
    OUT("      km[kr] = -%s, kl[kr] = 0, kskip[kr] = -%s;\n", pr->d->inf, pr->d->inf);
    OUT("      for (int64_t q = 0; q < %lld; q++) kacc[kr][q] = KTSET(0.0f);\n", (long long)(t->n / SCH_TILE_VW));
    OUT("    }\n");
    /* split s takes key blocks s, s + S, s + 2S, ...: any run of visible
     * keys (a window) is shared by the splits */
    OUT("    for (int64_t kjb = ksp * %d; kjb < d%d; kjb += kS * %d) {\n", KILN_STREAM_KB, j, KILN_STREAM_KB);
    OUT("      const int64_t kje = kjb + %d < d%d ? kjb + %d : d%d;\n", KILN_STREAM_KB, j, KILN_STREAM_KB, j);
    if (skip) print_tile_skip(pr, k, &mk);
    if (bf) OUT("#if KTBF16\n");
    if (bf) print_scores_bf16(pr, t);
    if (bf) OUT("#else\n");
    print_scores(pr, t);
    if (bf) OUT("#endif\n");
    print_weights(pr, k, t, c);
    if (bf) OUT("#if KTBF16\n");
    if (bf) print_values_bf16(pr, t);
    if (bf) OUT("#else\n");
    print_values(pr, t);
    if (bf) OUT("#endif\n");
    OUT("    }\n");
    if (skip) {
        OUT("    if (nskip && !kfull && kS == 1)\n");
        OUT("      for (int kr = 0; kr < knr; kr++)\n");
        OUT("        if (!(%s((kskip[kr] - km[kr]) * %s) == 0.0f)) { kfull = 1; goto kagain; }\n", pr->d->exp2, c);
    }
    OUT("    for (int kr = 0; kr < knr; kr++) {\n");
    row_vars(pr, n - 1, "kr", 6);
    OUT("      if (kS == 1) {\n");
    OUT("        const float kinv = 1.0f / kl[kr];\n");
    OUT("        for (int64_t i%d = 0; i%d < %lld; i%d++) out[", n, n, (long long)t->n, n);
    cg_print_sym(pr, k->store_off);
    OUT("] = kacc[kr][i%d / %d][i%d %% %d] * kinv;\n", n, SCH_TILE_VW, n, SCH_TILE_VW);
    OUT("        continue;\n      }\n");
    /* split mode: this split's partial of row krow[kr], then the merge by
     * the last split to arrive (the counter's acquire-release orders the
     * partials' writes before their reads) */
    OUT("      const int64_t kpw = %lld;\n", (long long)(t->n + 3));
    OUT("      float *kp = kpart + (ksp * knrows + krow[kr]) * kpw;\n");
    OUT("      kp[0] = km[kr], kp[1] = kl[kr], kp[2] = kskip[kr];\n");
    OUT("      for (int64_t i%d = 0; i%d < %lld; i%d++) kp[3 + i%d] = kacc[kr][i%d / %d][i%d %% %d];\n", n, n,
        (long long)t->n, n, n, n, SCH_TILE_VW, n, SCH_TILE_VW);
    OUT("      if (__atomic_add_fetch(&kcnt[krow[kr]], 1, __ATOMIC_ACQ_REL) != (int)kS) continue;\n");
    OUT("      float kM = -%s;\n", pr->d->inf);
    OUT("      for (int64_t s = 0; s < kS; s++) { const float ms = kpart[(s * knrows + krow[kr]) * kpw]; if (ms > kM) kM = ms; }\n");
    /* a row whose skipped blocks matter (no visible key: a fully masked
     * row) or with no finite max is recomputed whole, as the one-row
     * kernel's kfull pass would */
    OUT("      int kbad = !(kM > -%s);\n", pr->d->inf);
    OUT("      for (int64_t s = 0; s < kS && !kbad; s++)\n");
    OUT("        kbad = !(%s((kpart[(s * knrows + krow[kr]) * kpw + 2] - kM) * %s) == 0.0f);\n", pr->d->exp2, c);
    OUT("      if (kbad) { kerr |= %s(B, v, krow[kr], krow[kr] + 1, 0, flags); continue; }\n", name);
    OUT("      float kL = 0;\n");
    OUT("      float kaccm[%lld];\n", (long long)t->n);
    OUT("      for (int64_t i%d = 0; i%d < %lld; i%d++) kaccm[i%d] = 0.0f;\n", n, n, (long long)t->n, n, n);
    OUT("      for (int64_t s = 0; s < kS; s++) {\n");
    OUT("        const float *ks = kpart + (s * knrows + krow[kr]) * kpw;\n");
    OUT("        const float kf = %s((ks[0] - kM) * %s);\n", pr->d->exp2, c);
    OUT("        kL += ks[1] * kf;\n");
    OUT("        for (int64_t i%d = 0; i%d < %lld; i%d++) kaccm[i%d] += ks[3 + i%d] * kf;\n", n, n, (long long)t->n, n,
        n, n);
    OUT("      }\n");
    OUT("      const float kinv = 1.0f / kL;\n");
    OUT("      for (int64_t i%d = 0; i%d < %lld; i%d++) out[", n, n, (long long)t->n, n);
    cg_print_sym(pr, k->store_off);
    OUT("] = kaccm[i%d] * kinv;\n", n);
    OUT("    }\n");
    OUT("    w += knr;\n");
    OUT("  }\n");
    OUT("  return kerr;\n}\n\n");
}

void cg_emit_stream_tile(cg_printer *pr, int32_t kid, const char *name, const sch_stream_tile *t) {
    const sch_program *p = pr->p;
    /* bf16 where asked (the CPU has avx512_bf16) and the shapes fill 32-key
     * pairs of d and 16-lane value vectors; the unit's ISA decides at compile
     * time (KTBF16: AVX-512 with BW), the f32 tile otherwise */
    int bf = p->stream_bf16 && sch_stream_tile_bf16_fits(t);
    OUT("%s", tile_prelude);
    if (!bf || p->stream_bf16 == SCH_STREAM_BF16_ONLY) {
        tile_body(pr, kid, "", name, t, bf);
        return;
    }
    /* both bodies, the launch's flags picking (SCH_STREAM_BF16_BOTH: the
     * streaming-bf16 attention form, stream_select.c). A flag read once per
     * launch, not a third compiled program: the streaming program is
     * compiled once and shares everything but this branch, and the bodies
     * are the ones the forced form (KILN_STREAM_BF16=1) prints */
    char fname[160], bname[160];
    snprintf(fname, sizeof fname, "%s_kf32", name);
    snprintf(bname, sizeof bname, "%s_kbf16", name);
    tile_body(pr, kid, "static ", fname, t, 0);
    tile_body(pr, kid, "static ", bname, t, 1);
    OUT("int %s(void *const *B, const int64_t *v, int64_t lo, int64_t hi, int64_t chunk, int64_t flags) {\n", name);
    OUT("  /* ktile-bf16 on flag %d */\n", CG_KF_BF16);
    OUT("  return (KTBF16 && (flags & %d)) ? %s(B, v, lo, hi, chunk, flags) : %s(B, v, lo, hi, chunk, flags);\n",
        CG_KF_BF16, bname, fname);
    OUT("}\n\n");
}
