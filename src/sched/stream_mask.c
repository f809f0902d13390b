/* stream_mask.c — masks as index arithmetic, seen by a stream kernel: which
 * blocks of keys it may skip (src/codegen/emit_stream.c prints the test).
 *
 * A mask is whatever comparisons of indices the logits' tree holds (causal
 * j <= pos + i, a window pos + i - j < W, their product, ...); nothing here
 * knows attention. The analysis:
 *  - leaves: the LT nodes of the logits' tree whose two operands are affine
 *    in the stream variable j (built from index values whose sym has a
 *    constant step in j, constants, integer casts, sums, and products with
 *    at most one j-dependent side). Such a comparison is monotone in j, so
 *    over a block of keys [j0, j1) it is constant exactly when it has the
 *    same value at j0 and at j1 - 1 (the emitted test);
 *  - for every outcome a of the leaves (bit q: leaf q holds) the logits'
 *    tree is folded with the leaves replaced by their 0/1 value, arithmetic
 *    rounded as the printer rounds it (f32 after every op, 32-bit wrapping
 *    integers); the outcome is constant when the fold ends in a number: the
 *    scores are multiplied by a zero (masked) and a constant is added.
 *
 * Why skipping is exact: a skipped block's logits all equal the constant v.
 * The kernel remembers the largest skipped v; after the pass, when
 * exp2((v - max) * c) is exactly 0 in f32 (max the row's final running max,
 * c > 0), the skipped keys' weights in the definition are 0 too, and the
 * row's result is the one of the full pass. Otherwise (a row with no visible
 * key: every logit masked) the kernel runs the row again without skipping.
 * One assumption: a score times the mask's 0 is taken as 0, so non-finite
 * scores (inf or NaN products of the query and key) at masked positions do
 * not reach the result as they do in the reference, where 0 * inf is NaN.
 */
#include "stream_mask.h"

#include <math.h>
#include <string.h>

#include "base.h"

/* 1 when tree id mentions the loop variable var in an index (a sym) */
static int uses_var(const sch_program *p, int32_t id, sym_id var) {
    if (id < 0) return 0;
    const lx *x = &p->lx[id];
    sym_pool *sp = p->g->syms;
    if (x->kind == LX_INDEX || x->kind == LX_LOAD || x->kind == LX_GUARD || x->kind == LX_LET)
        if (x->s != SYM_NONE && sym_uses_var(sp, x->s, var)) return 1;
    if (x->kind == LX_CONST || x->kind == LX_INDEX || x->kind == LX_LOAD || x->kind == LX_STAGE) return 0;
    return uses_var(p, x->a, var) || uses_var(p, x->b, var);
}

/* 1 when tree id is an affine function of j built from index values */
static int affine(const sch_program *p, int32_t id, sym_id j) {
    const lx *x = &p->lx[id];
    sym_pool *sp = p->g->syms;
    int64_t step;
    switch (x->kind) {
    case LX_CONST: return 1;
    case LX_INDEX: return sym_is_const(sp, sym_step(sp, x->s, j), &step);
    case LX_CAST: return !kiln_dtype_is_block(p->lx[x->a].dtype) && affine(p, x->a, j);
    case LX_BINARY:
        if (x->op == OP_ADD) return affine(p, x->a, j) && affine(p, x->b, j);
        if (x->op == OP_MUL)
            return affine(p, x->a, j) && affine(p, x->b, j) && !(uses_var(p, x->a, j) && uses_var(p, x->b, j));
        return 0;
    default: return 0;
    }
}

static void find_leaves(const sch_program *p, int32_t id, sym_id j, sch_stream_mask *m, int *over) {
    if (id < 0 || *over) return;
    const lx *x = &p->lx[id];
    if (x->kind == LX_BINARY && x->op == OP_LT && affine(p, x->a, j) && affine(p, x->b, j)) {
        if (m->nleaves == SCH_MASK_MAX_LEAVES) *over = 1;
        else m->leaf[m->nleaves++] = id;
        return;
    }
    if (x->kind == LX_CONST || x->kind == LX_INDEX || x->kind == LX_LOAD || x->kind == LX_STAGE) return;
    find_leaves(p, x->a, j, m, over);
    find_leaves(p, x->b, j, m, over);
}

static double round_to(kiln_dtype t, double v) {
    if (t == KILN_F32) return (double)(float)v;
    return (double)(int32_t)(uint32_t)((uint64_t)(int64_t)v & 0xffffffffu);
}

/* the value of tree id under outcome a, when it is a constant: 1 and *v */
static int fold(const sch_program *p, const sch_stream_mask *m, unsigned a, int32_t id, double *v) {
    const lx *x = &p->lx[id];
    for (int q = 0; q < m->nleaves; q++)
        if (m->leaf[q] == id) {
            *v = (a >> q) & 1u;
            return 1;
        }
    if (x->dtype != KILN_F32 && x->dtype != KILN_I32) return 0;
    double u, w;
    switch (x->kind) {
    case LX_CONST: *v = x->value; return 1;
    case LX_CAST: {
        kiln_dtype from = p->lx[x->a].dtype;
        if (!fold(p, m, a, x->a, &u)) return 0;
        if (x->dtype == KILN_I32 && from != KILN_I32) return 0; /* float to int: not tabled */
        *v = round_to(x->dtype, u);
        return 1;
    }
    case LX_BINARY: {
        int ka = fold(p, m, a, x->a, &u), kb = fold(p, m, a, x->b, &w);
        if (x->op == OP_MUL && ((ka && u == 0) || (kb && w == 0))) { /* the masked score: see the top */
            *v = 0;
            return 1;
        }
        if (!ka || !kb) return 0;
        if (x->op == OP_ADD) *v = round_to(x->dtype, u + w);
        else if (x->op == OP_MUL) *v = round_to(x->dtype, u * w);
        else if (x->op == OP_LT) *v = u < w;
        else return 0;
        return 1;
    }
    default: return 0;
    }
}

int sch_stream_mask_analyse(const sch_program *p, const sch_kernel *k, sch_stream_mask *m) {
    memset(m, 0, sizeof *m);
    if (k->kind != SCH_K_STREAM || !(k->stream_c > 0)) return 0;
    int32_t x = p->lx[k->expr].a;
    if (p->lx[x].dtype != KILN_F32) return 0;
    sym_id j = k->var[k->ndim - 1];
    int over = 0;
    find_leaves(p, x, j, m, &over);
    if (over || m->nleaves == 0) {
        m->nleaves = 0;
        return 0;
    }
    int any = 0;
    for (unsigned a = 0; a < (1u << m->nleaves); a++) {
        double v;
        if (fold(p, m, a, x, &v) && isfinite(v)) {
            m->constant[a] = 1;
            m->value[a] = (float)v;
            any = 1;
        }
    }
    if (!any) m->nleaves = 0;
    return any;
}
