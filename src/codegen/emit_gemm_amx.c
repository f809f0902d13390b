/* emit_gemm_amx.c — the contraction form on Intel AMX tiles (SCH_FORM_AMX,
 * int8 arithmetic): prompt-sized products of f32 activations A with
 * block-format weights B, on tdpbssd. An approximation with exactly the
 * error of the packed int8 form (emit_gemm_i8.c): A rounded to int8 per 32
 * elements, B's integers and scales exact.
 *
 * Shared with the packed int8 form: A quantised once per thread call and
 * batch point (cg_emit_i8_item_begin, with 32 zero rows past M so that
 * 16-row tiles never read outside the buffer), and B's strips (kgb_<dt>:
 * [k/4][nr][4] bytes, the layout of an AMX B tile), here shifted by B's
 * zero point to signed bytes, so no zero-point term is needed.
 *
 * Per block of kb = 32 elements (16 for q6_k, whose scales cover 16):
 *   C[mr/16][nr/16] int32 16x16 tiles = 0;  tdpbssd(C, A tile (16 rows x
 *   kb bytes, row pitch K), B tile (kb/4 rows x 64 bytes, pitch nr*4));
 *   the tiles are stored to a scratch block and rescaled into f32
 *   accumulators in memory: f[m][n] += C[m][n] * sa[m] * d[n]; q4_k also
 *   f -= dmin*m[n] * sum(a) per block.
 * Tiles: 0-3 C, 4-5 A (rows 0-15, 16-31), 6-7 B (columns 0-15, 16-31),
 * configured once per work item (kamx_config) and released at its end.
 * mr, nr in {16, 32}; the 16x16 tile keeps its f32 accumulators in
 * registers and alternates two C tiles, so one block's multiply overlaps
 * the previous block's rescale. The process asks the kernel for the tile
 * data state once (arch_prctl ARCH_REQ_XCOMP_PERM); where that fails the
 * kernel returns an error (the search then rejects the candidate; AMX is
 * never a default).
 *
 * Invariants: the fast path of cg_emit_i8_item_begin (K in 32s, rows
 * block-aligned); nothing is written outside [0, M) x [n0, n1); the tile
 * configuration is released before the kernel returns.
 */
#include <stdio.h>
#include <string.h>

#include "contract.h"
#include "family.h"
#include "emit_gemm.h"
#include "emit_gemm_amx.h"
#include "emit_gemm_i8.h"

#define OUT(...) sch_appendf(s, len, cap, __VA_ARGS__)

static const char *ga_tag(kiln_dtype t) { return cg_i8_tag(t); }

#define KAMX "__attribute__((target(\"amx-tile,amx-int8\")))"

static const char *amx_prelude =
    "/* AMX helpers (emit_gemm_amx.c) */\n"
    "long syscall(long number, ...);\n"
    "static int kamx_state;\n"
    /* 1 when this process may use the AMX tile data (asked once) */
    "static __attribute__((unused)) int kamx_ready(void) {\n"
    "  int st = __atomic_load_n(&kamx_state, __ATOMIC_ACQUIRE);\n"
    "  if (st == 0) {\n"
    "    st = syscall(158 /* SYS_arch_prctl */, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0 ? 1 : -1;\n"
    "    __atomic_store_n(&kamx_state, st, __ATOMIC_RELEASE);\n"
    "  }\n"
    "  return st == 1;\n"
    "}\n"
    "typedef struct { uint8_t palette, start_row, pad[14]; uint16_t colsb[16]; uint8_t rows[16]; } kamx_cfg;\n"
    /* the one tile configuration of every AMX micro-kernel: 0-3 C (16 x 16
     * int32), 4-5 A (16 rows x kb bytes), 6-7 B (kb/4 rows x 64 bytes); not
     * _tile_loadconfig, whose asm names 8 bytes of the 64 as its input, so a
     * compiler may drop the other stores (llama.cpp's crash on this CPU) */
    "static " KAMX " __attribute__((unused, noinline)) void kamx_config(int kb) {\n"
    "  kamx_cfg cfg; memset(&cfg, 0, sizeof cfg); cfg.palette = 1;\n"
    "  for (int i = 0; i < 4; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }\n"
    "  cfg.rows[4] = cfg.rows[5] = 16; cfg.colsb[4] = cfg.colsb[5] = (uint16_t)kb;\n"
    "  cfg.rows[6] = cfg.rows[7] = (uint8_t)(kb / 4); cfg.colsb[6] = cfg.colsb[7] = 64;\n"
    "  __asm__ volatile(\"ldtilecfg (%0)\" :: \"r\"(&cfg) : \"memory\");\n"
    "}\n"
    "static " KAMX " __attribute__((unused, noinline)) void kamx_release(void) { _tile_release(); }\n"
    /* signed strips: the packed bytes minus B's zero point */
    "static __attribute__((unused)) void kamx_signed(uint8_t *b, size_t n, int zero) {\n"
    "  const __m512i z = _mm512_set1_epi8((char)zero);\n"
    "  size_t i = 0;\n"
    "  for (; i + 64 <= n; i += 64) _mm512_storeu_si512((void *)(b + i), _mm512_sub_epi8(_mm512_loadu_si512((const void *)(b + i)), z));\n"
    "  for (; i < n; i++) b[i] = (uint8_t)(b[i] - (uint8_t)zero);\n"
    "}\n";

/* kga_<dt>_<mr>x<nr>(A rows at k0 (pitch K), their scales (pitch K/32) and
 * exact sums at k0/32, strip at k0, scales, minimums, blocks of kb, out rows,
 * valid rows, valid columns, add to out, f32 scratch [mr][nr], int32 scratch) */
static void emit_micro_regs(kiln_dtype t, char **s, size_t *len, size_t *cap);

static void emit_micro(kiln_dtype t, int mr, int nr, char **s, size_t *len, size_t *cap) {
    const char *tag = ga_tag(t);
    if (!tag) return;
    if (mr == 16 && nr == 16) {
        emit_micro_regs(t, s, len, cap);
        return;
    }
    int kb = cg_i8_kb(t), mins = t == KILN_Q4_K, mt = mr / 16, nt = nr / 16;
    OUT("static " KAMX " __attribute__((unused, noinline)) void kga_%s_%dx%d(const int8_t *qa, int64_t K,\n"
        "    const float *sa, const float *sm, const uint8_t *bq, const float *bs, const float *bm, int64_t nb,\n"
        "    float *const *c, int rows, int cols, int acc, float *restrict f, int32_t *restrict ct) {\n",
        tag, mr, nr);
    OUT("  (void)sm; (void)bm;\n");
    OUT("  memset(f, 0, sizeof(float) * %d);\n", mr * nr);
    OUT("  const int64_t ls = K / 32;\n");
    OUT("  for (int64_t b = 0; b < nb; b++) {\n");
    for (int mi = 0; mi < mt; mi++)
        for (int nj = 0; nj < nt; nj++) OUT("    _tile_zero(%d);\n", mi * 2 + nj);
    for (int mi = 0; mi < mt; mi++) OUT("    _tile_loadd(%d, qa + %d * K + b * %d, K);\n", 4 + mi, 16 * mi, kb);
    for (int nj = 0; nj < nt; nj++) OUT("    _tile_loadd(%d, bq + b * %d + %d, %d);\n", 6 + nj, kb * nr, 64 * nj, nr * 4);
    for (int mi = 0; mi < mt; mi++)
        for (int nj = 0; nj < nt; nj++) OUT("    _tile_dpbssd(%d, %d, %d);\n", mi * 2 + nj, 4 + mi, 6 + nj);
    for (int mi = 0; mi < mt; mi++)
        for (int nj = 0; nj < nt; nj++) OUT("    _tile_stored(%d, ct + %d, 64);\n", mi * 2 + nj, 256 * (mi * 2 + nj));
    for (int nj = 0; nj < nt; nj++) {
        OUT("    { const __m512 d = _mm512_loadu_ps(bs + b * %d + %d);\n", nr, 16 * nj);
        if (mins) OUT("      const __m512 mn = _mm512_loadu_ps(bm + b * %d + %d);\n", nr, 16 * nj);
        OUT("      for (int r = 0; r < %d; r++) {\n", mr);
        OUT("        const int32_t *cr = ct + 256 * ((r / 16) * 2 + %d) + 16 * (r %% 16);\n", nj);
        OUT("        float *fr = f + r * %d + %d;\n", nr, 16 * nj);
        OUT("        __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)cr)),\n"
            "                                   _mm512_mul_ps(d, _mm512_set1_ps(sa[r * ls + %s])), _mm512_loadu_ps(fr));\n",
            kb == 32 ? "b" : "b / 2");
        if (mins) OUT("        v = _mm512_fnmadd_ps(mn, _mm512_set1_ps(sm[r * ls + b]), v);\n");
        OUT("        _mm512_storeu_ps(fr, v);\n");
        OUT("      }\n    }\n");
    }
    OUT("  }\n");
    for (int nj = 0; nj < nt; nj++)
        OUT("  const __mmask16 q%d = (__mmask16)(cols >= %d ? 0xffffu : cols <= %d ? 0u : (1u << (unsigned)(cols - %d)) - 1u);\n",
            nj, 16 * (nj + 1), 16 * nj, 16 * nj);
    OUT("  for (int r = 0; r < rows; r++) {\n");
    for (int nj = 0; nj < nt; nj++)
        OUT("    { const __m512 v = _mm512_loadu_ps(f + r * %d + %d);\n"
            "      _mm512_mask_storeu_ps(c[r] + %d, q%d, acc ? _mm512_add_ps(_mm512_maskz_loadu_ps(q%d, c[r] + %d), v) : v); }\n",
            nr, 16 * nj, 16 * nj, nj, nj, 16 * nj);
    OUT("  }\n}\n\n");
}

/* the 16x16 tile with its f32 accumulators in 16 zmm registers: per block
 * one tile multiply, one tile store and per row a converted load, a multiply
 * by A's broadcast scale and an FMA with B's scales (no accumulator traffic) */
static void emit_micro_regs(kiln_dtype t, char **s, size_t *len, size_t *cap) {
    const char *tag = ga_tag(t);
    int kb = cg_i8_kb(t), mins = t == KILN_Q4_K;
    OUT("static " KAMX " __attribute__((unused, noinline)) void kga_%s_16x16(const int8_t *qa, int64_t K,\n"
        "    const float *sa, const float *sm, const uint8_t *bq, const float *bs, const float *bm, int64_t nb,\n"
        "    float *const *c, int rows, int cols, int acc, float *restrict f, int32_t *restrict ct) {\n",
        tag);
    OUT("  (void)sm; (void)bm; (void)f;\n");
    for (int r = 0; r < 16; r++) OUT("  __m512 f%d = _mm512_setzero_ps();\n", r);
    OUT("  const int64_t ls = K / 32;\n");
    /* two blocks per step in tiles 0 and 1, so that one block's multiply
     * runs while the other's result is rescaled */
    OUT("  int64_t b = 0;\n");
    OUT("  for (; b < nb; b += 2) {\n");
    OUT("    const int two = b + 1 < nb;\n");
    OUT("    _tile_zero(0); _tile_loadd(4, qa + b * %d, K); _tile_loadd(6, bq + b * %d, 64); _tile_dpbssd(0, 4, 6);\n", kb,
        kb * 16);
    OUT("    if (two) { _tile_zero(1); _tile_loadd(5, qa + (b + 1) * %d, K); _tile_loadd(7, bq + (b + 1) * %d, 64);"
        " _tile_dpbssd(1, 5, 7); }\n",
        kb, kb * 16);
    OUT("    _tile_stored(0, ct, 64);\n");
    OUT("    for (int h = 0; h < 1 + two; h++) {\n");
    OUT("      if (h) _tile_stored(1, ct + 256, 64);\n");
    OUT("      const int64_t bb = b + h; const int32_t *cc = ct + 256 * h;\n");
    OUT("      const __m512 d = _mm512_loadu_ps(bs + bb * 16);\n");
    if (mins) OUT("      const __m512 mn = _mm512_loadu_ps(bm + bb * 16);\n");
    const char *bi = kb == 32 ? "bb" : "bb / 2";
    for (int r = 0; r < 16; r++) {
        OUT("      f%d = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)(cc + %d))), "
            "_mm512_set1_ps(sa[%d * ls + %s])), d, f%d);\n",
            r, 16 * r, r, bi, r);
        if (mins) OUT("      f%d = _mm512_fnmadd_ps(mn, _mm512_set1_ps(sm[%d * ls + bb]), f%d);\n", r, r, r);
    }
    OUT("    }\n");
    OUT("  }\n");
    OUT("  const __mmask16 q = (__mmask16)(cols >= 16 ? 0xffffu : cols <= 0 ? 0u : (1u << (unsigned)cols) - 1u);\n");
    for (int r = 0; r < 16; r++)
        OUT("  if (rows > %d) _mm512_mask_storeu_ps(c[%d], q, acc ? _mm512_add_ps(_mm512_maskz_loadu_ps(q, c[%d]), f%d) : f%d);\n",
            r, r, r, r, r);
    OUT("}\n\n");
}

void cg_emit_amx_prelude(int *i8_done, char **s, size_t *len, size_t *cap) {
    if (!(*i8_done & 4)) OUT("%s\n", amx_prelude);
    *i8_done |= 4;
}

void cg_emit_amx_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, int *i8_done, char **s, size_t *len,
                       size_t *cap) {
    if (!ga_tag(t)) return;
    int done[3][3];
    memset(done, 0, sizeof done);
    for (int i = 0; i < n; i++) {
        const sch_contract_sched *sc = &scheds[i];
        if (!sch_family_is(sc, SCH_FAM_AMX_I8, t)) continue;
        cg_emit_amx_prelude(i8_done, s, len, cap);
        if (done[sc->mr / 16][sc->nr / 16]) continue;
        done[sc->mr / 16][sc->nr / 16] = 1;
        emit_micro(t, sc->mr, sc->nr, s, len, cap);
    }
}

void cg_emit_amx_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                          size_t *len, size_t *cap) {
    const sch_contract *c = k->contract;
    kiln_dtype t = p->bufs[c->b_buf].dtype;
    const char *tag = ga_tag(t);
    if (!tag) return;
    int mr = sc->mr, nr = sc->nr, kb = cg_i8_kb(t);
    /* signed strips: no zero-point term, so A's is quantised with zero 0 */
    cg_emit_i8_item_begin(p, k, 0, 32, s, len, cap);
    OUT("        if (!kamx_ready()) { free(gq_a); free(gq_s); free(gq_m); free(gq_z); return 1; }\n");

    OUT("        const int64_t kcb = %d > 0 && %d < K ? %d : K;\n", sc->kc, sc->kc, sc->kc);
    OUT("        const int64_t nstr = (n1 - n0 + %d) / %d;\n", nr - 1, nr);
    OUT("        const size_t qsz = ((size_t)(nstr * %d * kcb) + 63) & ~(size_t)63;\n", nr);
    OUT("        const size_t fsz = ((size_t)(nstr * %d * (kcb / %d)) * sizeof(float) + 63) & ~(size_t)63;\n", nr, kb);
    OUT("        uint8_t *bq = (uint8_t *)aligned_alloc(64, qsz);\n");
    OUT("        float *bs = (float *)aligned_alloc(64, fsz), *bm = (float *)aligned_alloc(64, fsz);\n");
    OUT("        float *fs = (float *)aligned_alloc(64, %d * sizeof(float));\n", mr * nr);
    OUT("        int32_t *cts = (int32_t *)aligned_alloc(64, 1024 * sizeof(int32_t));\n");
    OUT("        if (!bq || !bs || !bm || !fs || !cts) { free(bq); free(bs); free(bm); free(fs); free(cts);"
        " free(gq_a); free(gq_s); free(gq_m); free(gq_z); return 1; }\n");
    OUT("        kamx_config(%d);\n", kb);
    cg_emit_out_stride(p, k, s, len, cap);
    OUT("        for (int64_t k0 = 0; k0 < K; k0 += kcb) {\n");
    OUT("          const int64_t kl = K - k0 < kcb ? K - k0 : kcb;\n");
    OUT("          const int acc = k0 > 0;\n");
    cg_emit_i8_pack_strips(p, k, nr, 1, s, len, cap);
    OUT("          for (int64_t m0 = 0; m0 < M; m0 += %d) {\n", sc->mc);
    OUT("            const int64_t m1 = m0 + %d < M ? m0 + %d : M;\n", sc->mc, sc->mc);
    OUT("            for (int64_t st = 0; st < nstr; st++) {\n");
    OUT("              const int64_t ns = n0 + st * %d;\n", nr);
    OUT("              const int cols = (int)(n1 - ns < %d ? n1 - ns : %d);\n", nr, nr);
    OUT("              const uint8_t *bqs = bq + st * %d * kcb;\n", nr);
    OUT("              const float *bss = bs + st * %d * (kcb / %d), *bms = bm + st * %d * (kcb / %d);\n", nr, kb, nr, kb);
    OUT("              for (int64_t mm = m0; mm < m1; mm += %d) {\n", mr);
    OUT("                const int rows = (int)(m1 - mm < %d ? m1 - mm : %d);\n", mr, mr);
    cg_emit_tile_rows(p, k, mr, nr, s, len, cap);
    /* rows past M read the zero rows of gq_a; their scales are never used
     * for stored rows, but must be readable: gq_s/gq_m hold M rows only */
    OUT("                kga_%s_%dx%d(gq_a + mm * K + k0, K, gq_s + mm * (K / 32) + k0 / 32, gq_m + mm * (K / 32) + k0 / 32,"
        " bqs, bss, bms, kl / %d, cr, rows, cols, osn == 1 ? acc : 0, fs, cts);\n",
        tag, mr, nr, kb);
    cg_emit_tile_scatter(p, k, nr, s, len, cap);
    OUT("              }\n            }\n          }\n        }\n");
    OUT("        kamx_release();\n");
    OUT("        free(bq); free(bs); free(bm); free(fs); free(cts);\n");
    cg_emit_i8_item_end(s, len, cap);
}
