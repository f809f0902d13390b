/* stream_tile.c — recognises the stream kernels that run as a tile of rows
 * x keys (stream_tile.h), structurally, from the kernel's expressions;
 * nothing here knows attention.
 *
 * The form: a stream kernel (domain rows..., j; value axis n) with exactly
 * one fused stage, a per-point SUM over d of MUL(a, b) in f32 where
 *  - one side is a load of an f32 buffer at row_base + d whose offset does
 *    not move with j (the row operand: a query row),
 *  - the other a load at key_base + j * key_step + d (key_step constant):
 *    the key operand, the same for every row whose key_base is equal, of
 *    an f32 buffer or of an f16 buffer converted to f32 (a KV cache kept
 *    in f16: the tile converts as it loads, exactly);
 *  - d has a constant length, a multiple of SCH_TILE_VW;
 * and values loaded from an f32 (or converted f16) buffer at
 * val_base + j * val_step + n (n the value axis, of a constant size that is
 * a multiple of SCH_TILE_VW). The
 * logits may wrap the dot's result in anything (a scale, a soft-cap, masks
 * as index arithmetic): the tile evaluates that tree per score as the
 * one-row kernel does. Everything else keeps the one-row form.
 *
 * Invariant: contract.c and the emitter call this same function, so a dot
 * product left inside a stream kernel is always printed as a tile.
 */
#include "stream_tile.h"

#include <string.h>

#include "base.h"

/* off = base + var exactly (base free of var): base, else SYM_NONE */
static sym_id unit_base(sym_pool *sp, sym_id off, sym_id var) {
    sym_id base = sym_subst_var(sp, off, var, sym_const(sp, 0));
    int64_t c;
    if (sym_uses_var(sp, base, var)) return SYM_NONE;
    if (!sym_is_const(sp, sym_sub(sp, off, sym_add(sp, base, var)), &c) || c != 0) return SYM_NONE;
    return base;
}

/* off = base + j * step exactly, step a constant: base (free of j) and *step */
static sym_id affine_base(sym_pool *sp, sym_id off, sym_id j, sym_id *step) {
    sym_id base = sym_subst_var(sp, off, j, sym_const(sp, 0));
    sym_id st = sym_sub(sp, sym_subst_var(sp, off, j, sym_const(sp, 1)), base);
    int64_t c, z;
    if (!sym_is_const(sp, st, &c)) return SYM_NONE;
    if (!sym_is_const(sp, sym_sub(sp, off, sym_add(sp, base, sym_mul(sp, j, st))), &z) || z != 0) return SYM_NONE;
    *step = st;
    return base;
}

/* an f32 load from an f32 buffer */
static int f32_load(const sch_program *p, int32_t id) {
    const lx *x = &p->lx[id];
    return x->kind == LX_LOAD && x->dtype == KILN_F32 && x->buf >= 0 && p->bufs[x->buf].dtype == KILN_F32;
}

/* a key or value operand: an f32 load of an f32 buffer, or an f16 load of
 * an f16 buffer converted to f32 (a KV cache kept in f16): the load's id,
 * *f16 set for the second; -1 otherwise */
static int32_t kv_load(const sch_program *p, int32_t id, int *f16) {
    const lx *x = &p->lx[id];
    *f16 = 0;
    if (f32_load(p, id)) return id;
    if (x->kind != LX_CAST || x->dtype != KILN_F32 || x->a < 0) return -1;
    const lx *l = &p->lx[x->a];
    if (l->kind != LX_LOAD || l->dtype != KILN_F16 || l->buf < 0 || p->bufs[l->buf].dtype != KILN_F16) return -1;
    *f16 = 1;
    return x->a;
}

int sch_stream_tile_of(const sch_program *p, const sch_kernel *k, sch_stream_tile *t) {
    memset(t, 0, sizeof *t);
    if (k->kind != SCH_K_STREAM || k->ndim < 2 || k->nstages != 1) return 0;
    sym_pool *sp = p->g->syms;
    const sch_stage *st = &k->stages[0];
    sym_id j = k->var[k->ndim - 1];
    if (st->row || st->guarded || st->red_op != OP_SUM || st->dtype != KILN_F32) return 0;
    if (!sym_is_const(sp, st->rdim, &t->d) || t->d < SCH_TILE_VW || t->d % SCH_TILE_VW) return 0;
    if (!sym_is_const(sp, k->rdim, &t->n) || t->n < SCH_TILE_VW || t->n % SCH_TILE_VW) return 0;
    const lx *mul = &p->lx[st->expr];
    if (mul->kind != LX_BINARY || mul->op != OP_MUL) return 0;
    int fa = 0, fb = 0;
    int32_t la = kv_load(p, mul->a, &fa), lb = kv_load(p, mul->b, &fb);
    if (la < 0 || lb < 0) return 0;
    int ka = sym_uses_var(sp, p->lx[la].s, j), kb = sym_uses_var(sp, p->lx[lb].s, j);
    if (ka == kb) return 0;
    t->stage = 0;
    t->rows = ka ? lb : la;
    t->keys = ka ? la : lb;
    t->key_f16 = ka ? fa : fb;
    if (ka ? fb : fa) return 0; /* the row operand (a query row) stays f32 */
    t->row_base = unit_base(sp, p->lx[t->rows].s, st->rvar);
    sym_id kb0 = unit_base(sp, p->lx[t->keys].s, st->rvar);
    if (t->row_base == SYM_NONE || kb0 == SYM_NONE) return 0;
    t->key_base = affine_base(sp, kb0, j, &t->key_step);
    if (t->key_base == SYM_NONE) return 0;
    const lx *e = &p->lx[k->expr];
    t->vals = kv_load(p, e->b, &t->val_f16);
    if (t->vals < 0) return 0;
    sym_id vb0 = unit_base(sp, p->lx[t->vals].s, k->rvar);
    if (vb0 == SYM_NONE) return 0;
    t->val_base = affine_base(sp, vb0, j, &t->val_step);
    return t->val_base != SYM_NONE;
}

int sch_stream_tile_bf16_fits(const sch_stream_tile *t) {
    return t->d % 32 == 0 && t->d <= 1024 && t->n % 16 == 0 && !t->key_f16 && !t->val_f16;
}

int sch_stream_bf16_selectable(const sch_program *p) {
    if (p->stream_bf16 != SCH_STREAM_BF16_BOTH) return 0;
    sch_stream_tile t;
    for (int32_t k = 0; k < p->nkernels; k++)
        if (!p->no_stream_tile && sch_stream_tile_of(p, &p->kernels[k], &t) && sch_stream_tile_bf16_fits(&t)) return 1;
    return 0;
}

int64_t sch_stream_tile_splits(int64_t nrows, int nthreads) {
    if (nthreads < 2 || nrows < 1) return 1;
    return nthreads < 16 ? nthreads : 16;
}

size_t sch_stream_tile_scratch(int64_t nrows, int64_t splits, int64_t n) {
    size_t head = ((size_t)nrows * sizeof(int) + 63) / 64 * 64;
    return head + (size_t)splits * (size_t)nrows * (size_t)(n + 3) * sizeof(float);
}
