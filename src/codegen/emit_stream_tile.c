/* emit_stream_tile.c — the C of a stream kernel in the tile form
 * (src/sched/stream_tile.c): TR rows at a time, keys in blocks, the scores'
 * dot products computed inside the kernel.
 *
 * A tile is up to TR consecutive work items (rows) whose key and value
 * operands start at the same offset (grouped-query heads at one position,
 * or positions of one head): each key vector and each value vector is then
 * loaded once for the tile's rows. Per block of KILN_STREAM_KB keys:
 *  - the block is skipped only when, for every row of the tile, the mask's
 *    comparisons are constant over it and make the logits a constant
 *    (src/sched/stream_mask.c); each row remembers its largest skipped
 *    constant (kskip) and a tile with a row whose skipped weight is not
 *    exactly 0 runs again without skipping (kfull), as the one-row kernel;
 *  - the TR x TK scores of a sub-block of TK keys accumulate in TR*TK vector
 *    registers over d (each row vector and key vector loaded once), then are
 *    summed across lanes;
 *  - per row, the logits' tree (scale, soft-cap, masks: whatever wraps the
 *    dot) is evaluated at each score, the running max grows once per block
 *    (the sum and products rescaled by exp2((m_old - m_new) c)), the
 *    weights exp2((x - m) c) summed;
 *  - the products acc[r][n] += p[r][j] v[j][n] run value vector by value
 *    vector, the TR accumulators of one vector in registers across the block.
 * Rows short of TR (a tile cut by the end of the work range or by a key
 * offset that changes) repeat row 0's operands and are not stored; keys
 * short of TK repeat the block's last key and are not used.
 *
 * Numerics: f32 dot products in SCH_TILE_VW lanes summed across lanes at
 * the end (the reference sums in order), the running max per block instead
 * of per key; agreement to f32 accumulation tolerance, special values as in
 * the one-row kernel (a row of -inf logits gives NaN, a fully masked row
 * uniform weights). The generated code marks itself with "ktile".
 */
#include "emit_stream.h"

#include <stdio.h>

#include "base.h"
#include "stream_mask.h"
#include "stream_tile.h"

/* rows and keys per register tile */
#define TR 4
#define TK 4

#define OUT(...) sch_appendf(&pr->s, &pr->len, &pr->cap, __VA_ARGS__)

/* the vector type, unaligned loads and a multiply-add (fused where the ISA has it), once per source */
static const char *tile_prelude =
    "#ifndef KILN_STREAM_TILE_PRELUDE\n"
    "#define KILN_STREAM_TILE_PRELUDE\n"
    "typedef float ktv __attribute__((vector_size(32)));\n"
    "typedef float ktvu __attribute__((vector_size(32), aligned(4)));\n"
    "#define KTLD(p) ((ktv)(*(const ktvu *)(p)))\n"
    "#define KTSET(x) ((ktv){0, 0, 0, 0, 0, 0, 0, 0} + (x))\n"
    "#if defined(__FMA__) && (defined(_IMMINTRIN_H_INCLUDED) || defined(__IMMINTRIN_H))\n"
    "#define KTFMA(a, b, c) ((ktv)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))\n"
    "#else\n"
    "#define KTFMA(a, b, c) ((a) * (b) + (c))\n"
    "#endif\n"
    "#define KTSUM(a) ((((a)[0] + (a)[4]) + ((a)[1] + (a)[5])) + (((a)[2] + (a)[6]) + ((a)[3] + (a)[7])))\n"
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

/* the TR x TK scores of keys [kt, kt + TK) into ksc[r][kt - kjb + c] */
static void print_scores(cg_printer *pr, const sch_stream_tile *t) {
    const lx *kl = &pr->p->lx[t->keys];
    OUT("      for (int64_t kt = kjb; kt < kje; kt += %d) {\n", TK);
    for (int c = 0; c < TK; c++)
        OUT("        const float *kk%d = &b%d[kkb + (kt + %d < kje ? kt + %d : kje - 1) * kks];\n", c, kl->buf, c, c);
    for (int r = 0; r < TR; r++)
        for (int c = 0; c < TK; c++) OUT("        ktv ks%d%d = KTSET(0.0f);\n", r, c);
    OUT("        for (int64_t kd = 0; kd < %lld; kd += %d) {\n", (long long)t->d, SCH_TILE_VW);
    for (int r = 0; r < TR; r++) OUT("          const ktv kq%d = KTLD(kq[%d] + kd);\n", r, r);
    for (int c = 0; c < TK; c++) {
        OUT("          const ktv kx%d = KTLD(kk%d + kd);\n", c, c);
        for (int r = 0; r < TR; r++) OUT("          ks%d%d = KTFMA(kq%d, kx%d, ks%d%d);\n", r, c, r, c, r, c);
    }
    OUT("        }\n");
    for (int r = 0; r < TR; r++)
        for (int c = 0; c < TK; c++)
            OUT("        ksc[%d][kt - kjb + %d] = KTSUM(ks%d%d);\n", r, c, r, c);
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
    OUT("        for (int64_t kj = 0; kj < kje - kjb; kj++) {\n");
    OUT("          const float kp = %s((ksc[kr][kj] - km[kr]) * %s);\n", pr->d->exp2, c);
    OUT("          ksc[kr][kj] = kp;\n");
    OUT("          kl[kr] += kp;\n");
    OUT("        }\n");
    OUT("      }\n");
    OUT("      for (int kr = knr; kr < %d; kr++) for (int64_t kj = 0; kj < kje - kjb; kj++) ksc[kr][kj] = 0;\n", TR);
}

/* acc[r][n] += p[r][j] v[j][n], one value vector at a time */
static void print_values(cg_printer *pr, const sch_stream_tile *t) {
    OUT("      for (int64_t q = 0; q < %lld; q++) {\n", (long long)(t->n / SCH_TILE_VW));
    for (int r = 0; r < TR; r++) OUT("        ktv kc%d = kacc[%d][q];\n", r, r);
    OUT("        for (int64_t kj = 0; kj < kje - kjb; kj++) {\n");
    OUT("          const ktv kv = KTLD(kvr + (kjb + kj) * kvs + q * %d);\n", SCH_TILE_VW);
    for (int r = 0; r < TR; r++) OUT("          kc%d = KTFMA(KTSET(ksc[%d][kj]), kv, kc%d);\n", r, r, r);
    OUT("        }\n");
    for (int r = 0; r < TR; r++) OUT("        kacc[%d][q] = kc%d;\n", r, r);
    OUT("      }\n");
}

/* the tile's rows: up to TR work items from w whose key and value offsets equal the first's */
static void print_rows(cg_printer *pr, const sch_kernel *k, const sch_stream_tile *t) {
    const sch_program *p = pr->p;
    int nrow = k->ndim - 1;
    OUT("    int knr = 0;\n    int64_t kkb = 0, kvb = 0;\n");
    OUT("    for (; knr < %d && w + knr < hi; knr++) {\n", TR);
    OUT("      int64_t o = w + knr;\n");
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
    OUT("    const float *restrict kvr = &b%d[kvb];\n", p->lx[p->lx[k->expr].b].buf);
}

void cg_emit_stream_tile(cg_printer *pr, int32_t kid, const char *name, const sch_stream_tile *t) {
    const sch_program *p = pr->p;
    const sch_kernel *k = &p->kernels[kid];
    sym_pool *sp = p->g->syms;
    int n = k->ndim, j = n - 1;
    int64_t kks = 0, kvs = 0;
    KILN_ASSERT(sym_is_const(sp, t->key_step, &kks) && sym_is_const(sp, t->val_step, &kvs));
    char c[48];
    snprintf(c, sizeof c, "%.9gf", k->stream_c);
    OUT("%s", tile_prelude);
    OUT("int %s(void *const *B, const int64_t *v, int64_t lo, int64_t hi, int64_t chunk, int64_t flags) {\n", name);
    OUT("  int kerr = 0; (void)v; (void)chunk; (void)flags; /* ktile %dx%d */\n", TR, TK);
    cg_stream_declare_bufs(pr, k);
    for (int d = 0; d < n; d++) {
        OUT("  const int64_t d%d = ", d);
        cg_print_sym(pr, k->dim[d]);
        OUT(";\n");
    }
    OUT("  const int64_t kks = %lldLL, kvs = %lldLL;\n", (long long)kks, (long long)kvs);
    OUT("  ktv kacc[%d][%lld];\n", TR, (long long)(t->n / SCH_TILE_VW));
    OUT("  float ksc[%d][%d];\n", TR, KILN_STREAM_KB);
    OUT("  int64_t kix[%d][%d];\n", TR, n - 1);
    OUT("  const float *kq[%d];\n", TR);
    OUT("  for (int64_t w = lo; w < hi;) {\n");
    print_rows(pr, k, t);
    sch_stream_mask mk;
    int skip = sch_stream_mask_analyse(p, k, &mk);
    if (skip) cg_stream_print_mask_table(pr, &mk);
    OUT("    float km[%d], kl[%d], kskip[%d];\n    int64_t nskip;\n    int kfull = 0;\n", TR, TR, TR);
    OUT("  kagain:;\n    nskip = 0;\n");
    OUT("    for (int kr = 0; kr < %d; kr++) {\n", TR);
    OUT("      km[kr] = -%s, kl[kr] = 0, kskip[kr] = -%s;\n", pr->d->inf, pr->d->inf);
    OUT("      for (int64_t q = 0; q < %lld; q++) kacc[kr][q] = KTSET(0.0f);\n", (long long)(t->n / SCH_TILE_VW));
    OUT("    }\n");
    OUT("    for (int64_t kjb = 0; kjb < d%d; kjb += %d) {\n", j, KILN_STREAM_KB);
    OUT("      const int64_t kje = kjb + %d < d%d ? kjb + %d : d%d;\n", KILN_STREAM_KB, j, KILN_STREAM_KB, j);
    if (skip) print_tile_skip(pr, k, &mk);
    print_scores(pr, t);
    print_weights(pr, k, t, c);
    print_values(pr, t);
    OUT("    }\n");
    if (skip) {
        OUT("    if (nskip && !kfull)\n");
        OUT("      for (int kr = 0; kr < knr; kr++)\n");
        OUT("        if (!(%s((kskip[kr] - km[kr]) * %s) == 0.0f)) { kfull = 1; goto kagain; }\n", pr->d->exp2, c);
    }
    OUT("    for (int kr = 0; kr < knr; kr++) {\n");
    row_vars(pr, n - 1, "kr", 6);
    OUT("      const float kinv = 1.0f / kl[kr];\n");
    OUT("      for (int64_t i%d = 0; i%d < %lld; i%d++) out[", n, n, (long long)t->n, n);
    cg_print_sym(pr, k->store_off);
    OUT("] = kacc[kr][i%d / %d][i%d %% %d] * kinv;\n", n, SCH_TILE_VW, n, SCH_TILE_VW);
    OUT("    }\n");
    OUT("    w += knr;\n");
    OUT("  }\n");
    OUT("  return kerr;\n}\n\n");
}
