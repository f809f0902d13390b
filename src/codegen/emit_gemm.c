/* emit_gemm.c — the packed (outer-product) contraction form, SCH_FORM_PACKED.
 *
 * For one work item (B rows, i.e. output columns, [n0, n1)) and all M rows of
 * A, the emitted loops are:
 *
 *   for each K block [k0, k0 + kl) of kc (kc = 0: all of K):
 *     pack: B's columns n0..n1 for k in the block, dequantised once to f32,
 *           into Bp laid out [strip][k][nr] (strips of nr columns; the last
 *           strip repeats column n1-1 as padding, never stored)
 *     for each block of mc rows of A, each nr-wide strip, each mr-row tile:
 *       kgp_<dt>_<mr>x<nr>: acc[mr][nr/16] zmm += broadcast(A[m][k]) * Bp[k][strip]
 *       over the block, then stored to out (first K block) or added (later ones)
 *
 * so B is dequantised once per item and K block (not once per mr rows of A as
 * in the dot form) and the inner loop is pure broadcast + FMA. A is read in
 * place through row pointers (A is contiguous along K by the contraction's
 * contract); tiles past M repeat row M-1 and the repeated rows are not stored.
 *
 * B is either contiguous along K (the annotation's b_base + r: every dtype;
 * a 32-element chunk is dequantised by the dot form's kcv_<dt> and scattered
 * into its column of the strip) or, f32 only, strided along K and contiguous
 * along N (b_kstride != SYM_NONE: B[b_base + r*kstride], kiln_matmul's (k, n)
 * operand): the pack is then a masked row copy.
 *
 * Output: out[store_off] is row-major over the kernel's domain, so it is
 * affine in n; when its stride along n is 1 the micro-kernel stores straight
 * into out with masked stores for the last strip; otherwise the tile goes to
 * a stack buffer and is scattered element by element.
 *
 * Invariants: Bp is 64-byte aligned (aligned loads), nr is a multiple of 16,
 * mr*(nr/16) + nr/16 + 1 <= 32 zmm registers, kc a multiple of 32 (K blocks
 * start on a block-format chunk); nothing is written outside [0, M) x [n0, n1);
 * the buffer is freed before the item ends (allocation failure: the kernel
 * returns 1).
 *
 * Numerics: each output is a K-term f32 sum of exact products (f32 lanes,
 * K blocks added in order), the same contract as the dot form.
 */
#include <stdio.h>
#include <string.h>

#include "contract.h"
#include "dtype.h"
#include "emit_gemm.h"
#include "family.h"

#define OUT(...) sch_appendf(s, len, cap, __VA_ARGS__)

#define PK_MAX_MR SCH_PACKED_MAX_MR

/* the strip prefetch distances the micro-kernel is emitted for (0: none) */
int cg_packed_pf_index(int pf) { return pf == 0 ? 0 : pf == 8 ? 1 : pf == 16 ? 2 : -1; }

/* the end of a packed micro-kernel: the mr x (16 nv) f32 accumulators
 * <acc><i>_<j> stored to the rows c[i] (rows, cols valid; added to what is
 * there when acc), the last 16 lanes masked; closes the function */
void cg_emit_tile_store(int mr, int nv, const char *accname, char **s, size_t *len, size_t *cap) {
    for (int j = 0; j < nv; j++)
        OUT("  const __mmask16 q%d = (__mmask16)(cols >= %d ? 0xffffu : cols <= %d ? 0u : (1u << (unsigned)(cols - %d)) - 1u);\n",
            j, 16 * (j + 1), 16 * j, 16 * j);
    for (int i = 0; i < mr; i++) {
        OUT("  if (rows > %d) { float *o = c[%d];\n", i, i);
        for (int j = 0; j < nv; j++)
            OUT("    _mm512_mask_storeu_ps(o + %d, q%d, acc ? _mm512_add_ps(_mm512_maskz_loadu_ps(q%d, o + %d), %s%d_%d) : %s%d_%d);\n",
                16 * j, j, j, 16 * j, accname, i, j, accname, i, j);
        OUT("  }\n");
    }
    OUT("}\n\n");
}

/* kgp_<dt>_<mr>x<nr>_p<pf>(a rows, packed strip, K block length, out rows,
 * valid rows, valid columns, add to out instead of storing). pf > 0: each
 * K step prefetches the strip pf steps ahead (one line per step: the strip
 * is re-read from L2 for every tile; measured fp32 2048^3 140 -> 146-152
 * GFLOP/s at 1 thread with pf=8 or 16). */
static void emit_micro(const char *tag, int mr, int nr, int pf, char **s, size_t *len, size_t *cap) {
    int nv = nr / 16;
    OUT("static __attribute__((unused, noinline)) void kgp_%s_%dx%d_p%d(const float *const *a, const float *restrict bp,"
        " int64_t bst, int64_t kl, float *const *c, int rows, int cols, int acc) {\n",
        tag, mr, nr, pf);
    for (int i = 0; i < mr; i++) {
        OUT("  const float *restrict a%d = a[%d];\n", i, i);
        for (int j = 0; j < nv; j++) OUT("  __m512 c%d_%d = _mm512_setzero_ps();\n", i, j);
    }
    OUT("  for (int64_t k = 0; k < kl; k++) {\n");
    /* bst: nr for a packed strip, B's K stride for rows read in place (direct) */
    OUT("    const float *b = bp + k * bst;\n");
    if (pf > 0) OUT("    _mm_prefetch((const char *)(b + %d * bst), _MM_HINT_T0);\n", pf);
    for (int j = 0; j < nv; j++) OUT("    const __m512 b%d = _mm512_loadu_ps(b + %d);\n", j, 16 * j);
    for (int i = 0; i < mr; i++) {
        OUT("    { const __m512 x = _mm512_set1_ps(a%d[k]);", i);
        for (int j = 0; j < nv; j++) OUT(" c%d_%d = _mm512_fmadd_ps(x, b%d, c%d_%d);", i, j, j, i, j);
        OUT(" }\n");
    }
    OUT("  }\n");
    cg_emit_tile_store(mr, nv, "c", s, len, cap);
}

/* ktr16: the 16 x 16 transpose dst[e * ds + r] = src[r * ss + e] in four
 * shuffle stages (32-bit and 64-bit interleaves within 128-bit lanes, then
 * two 128-bit lane shuffles); dst rows 64-byte aligned; once per
 * translation unit (every block format's pack uses it) */
static const char transpose16[] =
    "#ifndef KILN_KTR16\n#define KILN_KTR16\n"
    "static inline __attribute__((unused)) void ktr16(const float *src, int64_t ss, float *dst, int64_t ds) {\n"
    "  __m512 t[16], u[16];\n"
    "  for (int i = 0; i < 8; i++) {\n"
    "    const __m512 a = _mm512_load_ps(src + 2 * i * ss), b = _mm512_load_ps(src + (2 * i + 1) * ss);\n"
    "    t[2 * i] = _mm512_unpacklo_ps(a, b); t[2 * i + 1] = _mm512_unpackhi_ps(a, b);\n"
    "  }\n"
    "  for (int i = 0; i < 4; i++) {\n"
    "    const __m512d a0 = _mm512_castps_pd(t[4 * i]), a1 = _mm512_castps_pd(t[4 * i + 1]);\n"
    "    const __m512d b0 = _mm512_castps_pd(t[4 * i + 2]), b1 = _mm512_castps_pd(t[4 * i + 3]);\n"
    "    u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, b0)); u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, b0));\n"
    "    u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, b1)); u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, b1));\n"
    "  }\n"
    "  for (int c = 0; c < 4; c++) {\n"
    "    const __m512 x0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), x1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);\n"
    "    const __m512 y0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88), y1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);\n"
    "    _mm512_store_ps(dst + c * ds, _mm512_shuffle_f32x4(x0, y0, 0x88));\n"
    "    _mm512_store_ps(dst + (4 + c) * ds, _mm512_shuffle_f32x4(x1, y1, 0x88));\n"
    "    _mm512_store_ps(dst + (8 + c) * ds, _mm512_shuffle_f32x4(x0, y0, 0xdd));\n"
    "    _mm512_store_ps(dst + (12 + c) * ds, _mm512_shuffle_f32x4(x1, y1, 0xdd));\n"
    "  }\n"
    "}\n#endif\n\n";

/* kpk_<dt>(W, per-column element offsets at r = 0, strip width, k0, kl, all
 * offsets chunk-aligned, Bp strip): Bp[k * nr + j] = B(column j, k0 + k).
 * Fast path (offsets chunk-aligned): 16 columns x 32 k at a time, each
 * column's chunk dequantised into a 16 x 32 scratch, then written as two
 * 16 x 16 transposes (a column-by-column scatter of single floats cost
 * ~5% of a 2048^3 fp32 GEMM at 1 thread); the k tail element by element. */
static void emit_pack(kiln_dtype t, char **s, size_t *len, size_t *cap) {
    const char *tag = dtype_name_if(t, DT_WEIGHT);
    int be = dtype_table[t].block, bb = dtype_table[t].block_bytes;
    OUT("%s", transpose16);
    OUT("static __attribute__((unused)) void kpk_%s(const void *W, const int64_t *wo, int nr, int64_t k0, int64_t kl,"
        " int fast, float *restrict bp) {\n",
        tag);
    OUT("  float tmp[16 * 32] __attribute__((aligned(64)));\n");
    OUT("  const int64_t kf = fast ? kl / 32 * 32 : 0;\n");
    OUT("  for (int jb = 0; jb < nr; jb += 16)\n");
    OUT("    for (int64_t k = 0; k < kf; k += 32) {\n");
    OUT("      for (int jj = 0; jj < 16; jj++) {\n");
    OUT("        const void *row = (const char *)W + (wo[jb + jj] / %d) * %d;\n", be, bb);
    OUT("        __m512 lo, hi; kcv_%s(row, (k0 + k) / 32, &lo, &hi);\n", tag);
    OUT("        _mm512_store_ps(tmp + 32 * jj, lo); _mm512_store_ps(tmp + 32 * jj + 16, hi);\n");
    OUT("      }\n");
    OUT("      ktr16(tmp, 32, bp + k * nr + jb, nr); ktr16(tmp + 16, 32, bp + (k + 16) * nr + jb, nr);\n");
    OUT("    }\n");
    OUT("  for (int j = 0; j < nr; j++) {\n");
    OUT("    const int64_t o = wo[j];\n");
    OUT("    for (int64_t k = kf; k < kl; k++) bp[k * nr + j] = ");
    switch (t) {
    case KILN_F32: OUT("((const float *)W)[o + k0 + k];\n"); break;
    case KILN_F16: OUT("kh2f(((const uint16_t *)W)[o + k0 + k]);\n"); break;
    case KILN_BF16: OUT("kbf2f(((const uint16_t *)W)[o + k0 + k]);\n"); break;
    default: OUT("kdq_%s((const uint8_t *)W, o + k0 + k);\n", tag); break;
    }
    OUT("  }\n}\n\n");
}

/* kps_f32(W, offset of the strip's first column at r = 0, K stride, valid
 * columns, strip width, k0, kl, Bp strip): B contiguous along n; columns
 * past `cols` are zero */
static void emit_pack_strided(char **s, size_t *len, size_t *cap) {
    OUT("static __attribute__((unused)) void kps_f32(const float *W, int64_t bo, int64_t ks, int cols, int nr,"
        " int64_t k0, int64_t kl, float *restrict bp) {\n");
    OUT("  for (int j = 0; j < nr; j += 16) {\n");
    OUT("    const __mmask16 q = (__mmask16)(cols >= j + 16 ? 0xffffu : cols <= j ? 0u : (1u << (unsigned)(cols - j)) - 1u);\n");
    OUT("    const float *src = W + bo + k0 * ks + j;\n");
    OUT("    for (int64_t k = 0; k < kl; k++) _mm512_store_ps(bp + k * nr + j, _mm512_maskz_loadu_ps(q, src + k * ks));\n");
    OUT("  }\n}\n\n");
}

void cg_emit_ktr16(char **s, size_t *len, size_t *cap) { OUT("%s", transpose16); }

void cg_emit_packed_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, char **s, size_t *len, size_t *cap) {
    const char *tag = dtype_name_if(t, DT_WEIGHT);
    if (!tag) return;
    int done[PK_MAX_MR + 1][5][3];
    memset(done, 0, sizeof done);
    int any = 0;
    for (int i = 0; i < n; i++) {
        const sch_contract_sched *sc = &scheds[i];
        if (!sch_family_is(sc, SCH_FAM_PACKED_F32, t) && !sch_family_is(sc, SCH_FAM_PACKED_DIRECT, t)) continue;
        if (!any) {
            OUT("#include <stdlib.h>\n");
            emit_pack(t, s, len, cap);
            if (t == KILN_F32) emit_pack_strided(s, len, cap);
        }
        any = 1;
        int pi = cg_packed_pf_index(sc->pf);
        if (done[sc->mr][sc->nr / 16][pi]) continue;
        done[sc->mr][sc->nr / 16][pi] = 1;
        emit_micro(tag, sc->mr, sc->nr, sc->pf, s, len, cap);
    }
}

static void out_sym(const sch_program *p, sym_id x, char **s, size_t *len, size_t *cap) {
    sch_print_sym(p, x, s, len, cap);
}

void cg_emit_masked_strip(const sch_program *p, const sch_kernel *k, const char *steps, char **s, size_t *len,
                          size_t *cap) {
    sym_id off = k->contract->n_lim_off;
    if (off == SYM_NONE) return;
    OUT("                if (ns >= mm + rows - 1 + (");
    out_sym(p, off, s, len, cap);
    OUT(")) %s = 0;\n", steps);
}

void cg_emit_out_stride(const sch_program *p, const sch_kernel *k, char **s, size_t *len, size_t *cap) {
    const sch_contract *c = k->contract;
    int md = c->mdim, nd = c->ndim;
    OUT("        int64_t oa, ob;\n");
    for (int q = 0; q < 2; q++) {
        OUT("        { ");
        if (md >= 0) OUT("const int64_t i%d = 0; (void)i%d; ", md, md);
        OUT("const int64_t i%d = n0 + %d; (void)i%d; %s = ", nd, q, nd, q ? "ob" : "oa");
        out_sym(p, k->store_off, s, len, cap);
        OUT("; }\n");
    }
    OUT("        const int64_t osn = ob - oa;\n");
}

void cg_emit_tile_scatter(const sch_program *p, const sch_kernel *k, int nr, char **s, size_t *len, size_t *cap) {
    const sch_contract *c = k->contract;
    int md = c->mdim, nd = c->ndim;
    OUT("                if (osn != 1)\n");
    OUT("                  for (int i = 0; i < rows; i++)\n");
    OUT("                    for (int j = 0; j < cols; j++) {\n");
    if (md >= 0) OUT("                      const int64_t i%d = mm + i; (void)i%d;\n", md, md);
    OUT("                      const int64_t i%d = ns + j; (void)i%d;\n", nd, nd);
    OUT("                      float *op = out + (");
    out_sym(p, k->store_off, s, len, cap);
    OUT(");\n");
    OUT("                      *op = acc ? *op + ct[i * %d + j] : ct[i * %d + j];\n", nr, nr);
    OUT("                    }\n");
}

void cg_emit_strip_operand(const sch_program *p, const sch_kernel *k, int nr, int be, char **s, size_t *len,
                           size_t *cap) {
    const sch_contract *c = k->contract;
    int nd = c->ndim;
    if (c->b_kstride != SYM_NONE) {
        OUT("            const int cols = (int)(n1 - ns < %d ? n1 - ns : %d);\n", nr, nr);
        OUT("            int64_t bo;\n");
        OUT("            { const int64_t i%d = ns; (void)i%d; bo = ", nd, nd);
        out_sym(p, c->b_base, s, len, cap);
        OUT("; }\n");
        OUT("            const int64_t ks = ");
        out_sym(p, c->b_kstride, s, len, cap);
        OUT(";\n");
        return;
    }
    OUT("            int64_t wo[%d]; int fast = 1;\n", nr);
    OUT("            for (int j = 0; j < %d; j++) {\n", nr);
    OUT("              const int64_t i%d = ns + j < n1 ? ns + j : n1 - 1; (void)i%d;\n", nd, nd);
    OUT("              wo[j] = ");
    out_sym(p, c->b_base, s, len, cap);
    OUT(";\n");
    if (be > 1) OUT("              if (wo[j] %% %d != 0) fast = 0;\n", be);
    OUT("            }\n");
}

/* the output row pointers of an mr x nr tile at rows mm.., columns ns..:
 * into out when its stride along n is 1, else into the stack tile ct
 * (rows past M repeat the last row and are never stored) */
void cg_emit_tile_rows(const sch_program *p, const sch_kernel *k, int mr, int nr, char **s, size_t *len, size_t *cap) {
    const sch_contract *c = k->contract;
    int md = c->mdim, nd = c->ndim;
    OUT("                float *cr[%d]; float ct[%d] __attribute__((aligned(64)));\n", mr, mr * nr);
    OUT("                for (int i = 0; i < %d; i++) {\n", mr);
    OUT("                  const int64_t mi = mm + (i < rows ? i : rows - 1);\n");
    if (md >= 0) OUT("                  const int64_t i%d = mi; (void)i%d;\n", md, md);
    OUT("                  const int64_t i%d = ns; (void)i%d;\n", nd, nd);
    OUT("                  cr[i] = osn == 1 ? out + (");
    out_sym(p, k->store_off, s, len, cap);
    OUT(") : ct + i * %d;\n", nr);
    OUT("                }\n");
}

/* the A rows (ar, at k0) and output rows (cr, cg_emit_tile_rows) of an
 * mr-row tile at mm of the strip at ns; rows valid */
static void emit_tile_rows_f32(const sch_program *p, const sch_kernel *k, int mr, int nr, char **s, size_t *len,
                               size_t *cap) {
    const sch_contract *c = k->contract;
    int md = c->mdim;
    OUT("                const int rows = (int)(m1 - mm < %d ? m1 - mm : %d);\n", mr, mr);
    OUT("                const float *ar[%d];\n", mr);
    OUT("                for (int i = 0; i < %d; i++) {\n", mr);
    if (md >= 0) OUT("                  const int64_t i%d = mm + (i < rows ? i : rows - 1); (void)i%d;\n", md, md);
    OUT("                  ar[i] = A + (");
    out_sym(p, c->a_base, s, len, cap);
    OUT(") + k0;\n");
    OUT("                }\n");
    cg_emit_tile_rows(p, k, mr, nr, s, len, cap);
}

/* the K blocks of kcb and, inside, the strips of nr (opens four braces:
 * k0, kl, acc; st, ns) */
static void emit_kblock_strip_loops(int nr, char **s, size_t *len, size_t *cap) {
    OUT("        for (int64_t k0 = 0; k0 == 0 || k0 < K; k0 += kcb) {\n");
    OUT("          const int64_t kl = K - k0 < kcb ? K - k0 : kcb;\n");
    OUT("          const int acc = k0 > 0;\n");
    OUT("          for (int64_t st = 0; st < nstr; st++) {\n");
    OUT("            const int64_t ns = n0 + st * %d;\n", nr);
}

/* direct (sc->direct, f32 B strided along K and contiguous along n): no
 * packing; a whole strip's nr columns of row k are B[bo + k*ks .. + nr),
 * read in place by the micro-kernel with stride ks; only a partial last
 * strip (cols < nr, whose row would run past the valid columns) is copied
 * into a zero-padded strip. Strips outer, A's rows inner: a strip's rows
 * stay in cache for the M rows that use them. */
static void emit_direct_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                                 size_t *len, size_t *cap) {
    int mr = sc->mr, nr = sc->nr;
    OUT("      {\n");
    OUT("        const int64_t kcb = %d > 0 && %d < K ? %d : (K > 0 ? K : 1);\n", sc->kc, sc->kc, sc->kc);
    OUT("        const int64_t nstr = (n1 - n0 + %d) / %d;\n", nr - 1, nr);
    OUT("        float *bp = NULL;\n");
    cg_emit_out_stride(p, k, s, len, cap);
    emit_kblock_strip_loops(nr, s, len, cap);
    cg_emit_strip_operand(p, k, nr, 1, s, len, cap);
    OUT("            const float *bps = (const float *)W + bo + k0 * ks; int64_t bst = ks;\n");
    OUT("            if (cols < %d) {\n", nr);
    OUT("              if (!bp) bp = (float *)aligned_alloc(64, ((size_t)(%d * kcb) * sizeof(float) + 63) & ~(size_t)63);\n", nr);
    OUT("              if (!bp) return 1;\n");
    OUT("              kps_f32((const float *)W, bo, ks, cols, %d, k0, kl, bp);\n", nr);
    OUT("              bps = bp; bst = %d;\n", nr);
    OUT("            }\n");
    OUT("            for (int64_t m0 = 0; m0 < M; m0 += %d) {\n", sc->mc);
    OUT("              const int64_t m1 = m0 + %d < M ? m0 + %d : M;\n", sc->mc, sc->mc);
    OUT("              for (int64_t mm = m0; mm < m1; mm += %d) {\n", mr);
    emit_tile_rows_f32(p, k, mr, nr, s, len, cap);
    OUT("                kgp_f32_%dx%d_p%d(ar, bps, bst, kl, cr, rows, cols, osn == 1 ? acc : 0);\n", mr, nr, sc->pf);
    cg_emit_tile_scatter(p, k, nr, s, len, cap);
    OUT("              }\n            }\n          }\n        }\n");
    OUT("        free(bp);\n");
    OUT("      }\n");
}

void cg_emit_packed_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                             size_t *len, size_t *cap) {
    const sch_contract *c = k->contract;
    if (sc->direct && c->b_kstride != SYM_NONE && p->bufs[c->b_buf].dtype == KILN_F32) {
        emit_direct_schedule(p, k, sc, s, len, cap);
        return;
    }
    kiln_dtype t = p->bufs[c->b_buf].dtype;
    const char *tag = dtype_name_if(t, DT_WEIGHT);
    int be = dtype_table[t].block;
    int mr = sc->mr, nr = sc->nr;
    int strided = c->b_kstride != SYM_NONE;
    OUT("      {\n");
    OUT("        const int64_t kcb = %d > 0 && %d < K ? %d : (K > 0 ? K : 1);\n", sc->kc, sc->kc, sc->kc);
    OUT("        const int64_t nstr = (n1 - n0 + %d) / %d;\n", nr - 1, nr);
    OUT("        const size_t bpsz = ((size_t)(nstr * %d * kcb) * sizeof(float) + 63) & ~(size_t)63;\n", nr);
    OUT("        float *bp = (float *)aligned_alloc(64, bpsz > 0 ? bpsz : 64);\n");
    OUT("        if (!bp) return 1;\n");
    /* out's stride along n (store_off is affine in n: row-major domain index) */
    cg_emit_out_stride(p, k, s, len, cap);
    emit_kblock_strip_loops(nr, s, len, cap);
    OUT("            float *bps = bp + st * %d * kcb;\n", nr);
    cg_emit_strip_operand(p, k, nr, be, s, len, cap);
    if (strided) OUT("            kps_f32((const float *)W, bo, ks, cols, %d, k0, kl, bps);\n", nr);
    else OUT("            kpk_%s((const void *)W, wo, %d, k0, kl, fast, bps);\n", tag, nr);
    OUT("          }\n");
    OUT("          for (int64_t m0 = 0; m0 < M; m0 += %d) {\n", sc->mc);
    OUT("            const int64_t m1 = m0 + %d < M ? m0 + %d : M;\n", sc->mc, sc->mc);
    OUT("            for (int64_t st = 0; st < nstr; st++) {\n");
    OUT("              const int64_t ns = n0 + st * %d;\n", nr);
    OUT("              const int cols = (int)(n1 - ns < %d ? n1 - ns : %d);\n", nr, nr);
    OUT("              const float *bps = bp + st * %d * kcb;\n", nr);
    OUT("              for (int64_t mm = m0; mm < m1; mm += %d) {\n", mr);
    emit_tile_rows_f32(p, k, mr, nr, s, len, cap);
    /* a strip past the causal bound of all the tile's rows: stored as 0, no K steps */
    OUT("                int64_t kle = kl;\n");
    cg_emit_masked_strip(p, k, "kle", s, len, cap);
    OUT("                kgp_%s_%dx%d_p%d(ar, bps, %d, kle, cr, rows, cols, osn == 1 ? acc : 0);\n", tag, mr, nr, sc->pf, nr);
    cg_emit_tile_scatter(p, k, nr, s, len, cap);
    OUT("              }\n            }\n          }\n        }\n");
    OUT("        free(bp);\n");
    OUT("      }\n");
}
