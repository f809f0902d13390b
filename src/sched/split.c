/* split.c — loop splitting at guard boundaries: a MAP kernel whose value
 * holds GUARDs that switch on the last loop variable at constant points
 * (a concatenation, NeoX rope's two halves: (i < 128) ? .. : 0 + (128 <=
 * i) ? .. : 0) becomes one kernel per piece of that loop, each with the
 * variable rebased (i = j + start, 0 <= j < piece length) and its guards
 * decided, so that they fold away, and with them the div/mod index terms
 * that the bounded variable simplifies (((i1 * 128 + i) / 512) -> 0).
 * What is left is usually contiguous along j, which the vector path takes;
 * the guarded original ran on the scalar path.
 *
 * A split point comes from a guard condition LT(a, b) (or an AND of them)
 * with b - a = c0 + s * v for constants c0 and s = +-1 and v the last loop
 * variable: the condition changes truth at one v. Points outside (0, D)
 * are dropped, D (the loop's extent) must be constant, at most
 * SPLIT_MAX_PIECES pieces are made and none shorter than SPLIT_MIN_PIECE.
 *
 * Invariants: the pieces write disjoint parts of the original kernel's
 * output (the store offset rebased like everything else) and compute
 * exactly its values (guards are decided only where sym_bounds proves the
 * condition constant over the piece); kernels with per-element stages
 * (whose trees may read v) are left alone, per-row stages do not use v and
 * are shared. Each piece's tree is a fresh copy (trees are not shared
 * between kernels, loop.h).
 */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "loop.h"

#define SPLIT_MAX_PIECES 4
/* a piece shorter than one 256-bit vector gains nothing on the vector path
 * and costs a launch: interleaved rope's pairs (guards on a loop of 2) stay
 * one kernel */
#define SPLIT_MIN_PIECE 8

/* the number of the sym variable node v */
static uint32_t var_no(const sym_pool *sp, sym_id v) { return (uint32_t)sym_get(sp, v)->c; }

/* add to pts[] the point where LT-condition s changes truth along v (see top) */
static void cond_points(sym_pool *sp, sym_id s, sym_id v, int64_t D, int64_t *pts, int *npts) {
    const sym_node *n = sym_get(sp, s);
    if (n->kind == SYM_AND) {
        sym_id a = n->a, b = n->b;
        cond_points(sp, a, v, D, pts, npts);
        cond_points(sp, b, v, D, pts, npts);
        return;
    }
    if (n->kind != SYM_LT) return;
    /* b - a at v = 0 and v = 1 (not its symbolic step: a concatenation's
     * guards hold div/mod terms of v that only fold at given values). Only
     * a candidate: a piece keeps any guard sym_bounds cannot decide on it. */
    sym_id diff = sym_sub(sp, n->b, n->a);
    sym_id d0 = sym_subst_var(sp, diff, v, sym_const(sp, 0)), d1 = sym_subst_var(sp, diff, v, sym_const(sp, 1));
    int64_t c0, c1, c = -1;
    if (!sym_is_const(sp, d0, &c0) || !sym_is_const(sp, d1, &c1)) return;
    /* a < b  <=>  c0 + s v > 0 */
    if (c1 - c0 == 1) c = 1 - c0; /* true from v = 1 - c0 on */
    else if (c1 - c0 == -1) c = c0; /* true below v = c0 */
    else return;
    if (c <= 0 || c >= D) return;
    for (int i = 0; i < *npts; i++)
        if (pts[i] == c) return;
    if (*npts < SPLIT_MAX_PIECES - 1) pts[(*npts)++] = c;
}

static void collect_points(const sch_program *p, int32_t id, sym_id v, int64_t D, int64_t *pts, int *npts) {
    const lx *x = &p->lx[id];
    if (x->kind == LX_GUARD) cond_points(p->g->syms, x->s, v, D, pts, npts);
    switch (x->kind) {
    case LX_UNARY:
    case LX_CAST:
    case LX_GUARD: collect_points(p, x->a, v, D, pts, npts); break;
    case LX_BINARY:
    case LX_LET:
        collect_points(p, x->a, v, D, pts, npts);
        collect_points(p, x->b, v, D, pts, npts);
        break;
    default: break;
    }
}

/* a copy of tree id with map applied to its syms and decided guards folded */
static int32_t clone_subst(sch_program *p, int32_t id, const sym_id *map, uint32_t nv) {
    sym_pool *sp = p->g->syms;
    lx x = p->lx[id]; /* by value: lx_new may move p->lx */
    int32_t a = -1, b = -1;
    switch (x.kind) {
    case LX_GUARD: {
        sym_id cond = sym_subst(sp, x.s, map, nv);
        int64_t lo, hi;
        sym_bounds(sp, cond, &lo, &hi);
        if (lo == hi && lo != 0) return clone_subst(p, x.a, map, nv);
        if (lo == hi) return lx_const(p, x.dtype, 0.0);
        a = clone_subst(p, x.a, map, nv);
        int32_t g = lx_new(p, LX_GUARD, x.dtype);
        lx *y = &p->lx[g];
        *y = x;
        y->s = cond;
        y->a = a;
        return g;
    }
    case LX_UNARY:
    case LX_CAST: a = clone_subst(p, x.a, map, nv); break;
    case LX_BINARY:
    case LX_LET:
        a = clone_subst(p, x.a, map, nv);
        b = clone_subst(p, x.b, map, nv);
        break;
    default: break;
    }
    int32_t c = lx_new(p, x.kind, x.dtype);
    lx *y = &p->lx[c];
    *y = x;
    y->a = a >= 0 ? a : x.a;
    y->b = b >= 0 ? b : x.b;
    /* a LET's s is the variable it declares: only its bound is rewritten */
    if (x.kind != LX_LET && x.s != SYM_NONE) y->s = sym_subst(sp, x.s, map, nv);
    if (x.s2 != SYM_NONE) y->s2 = sym_subst(sp, x.s2, map, nv);
    return c;
}

static int split_candidate(const sch_program *p, const sch_kernel *k, int64_t *D) {
    if (k->kind != SCH_K_MAP || k->ndim < 1 || k->contract) return 0;
    for (int32_t i = 0; i < k->nstages; i++)
        if (!k->stages[i].row) return 0;
    return sym_is_const(p->g->syms, k->dim[k->ndim - 1], D) && *D > 1;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* the piece [lo, hi) of kernel k (already copied into *out) */
static void make_piece(sch_program *p, sch_kernel *out, int64_t lo, int64_t hi) {
    sym_pool *sp = p->g->syms;
    int last = out->ndim - 1;
    sym_id v = out->var[last];
    sym_id j = sch_new_var(p, SCH_VAR_LOOP, last, sym_const(sp, hi - lo));
    uint32_t nv = sym_var_count(sp);
    sym_id *map = kiln_xcalloc(nv + 1, sizeof *map);
    for (uint32_t i = 0; i < nv; i++) map[i] = SYM_NONE;
    map[var_no(sp, v)] = sym_add(sp, j, sym_const(sp, lo));
    out->var[last] = j;
    out->dim[last] = sym_const(sp, hi - lo);
    out->expr = clone_subst(p, out->expr, map, nv);
    out->store_off = sym_subst(sp, out->store_off, map, nv);
    free(map);
}

int sch_split_guards(sch_program *p) {
    int made = 0;
    for (int32_t ki = 0; ki < p->nkernels; ki++) {
        int64_t D, pts[SPLIT_MAX_PIECES + 1];
        int npts = 0;
        if (!split_candidate(p, &p->kernels[ki], &D)) continue;
        const sch_kernel *k0 = &p->kernels[ki];
        collect_points(p, k0->expr, k0->var[k0->ndim - 1], D, pts, &npts);
        if (npts == 0) continue;
        qsort(pts, (size_t)npts, sizeof pts[0], cmp_i64);
        int npieces = npts + 1, short_piece = 0;
        for (int i = 0; i < npieces; i++) {
            int64_t lo = i == 0 ? 0 : pts[i - 1], hi = i == npts ? D : pts[i];
            short_piece |= hi - lo < SPLIT_MIN_PIECE;
        }
        if (short_piece) continue;
        /* room for the pieces: kernel ki becomes npieces kernels */
        KILN_GROW(p->kernels, p->cap_kernels, p->nkernels + npieces - 1);
        memmove(&p->kernels[ki + npieces], &p->kernels[ki + 1],
                (size_t)(p->nkernels - ki - 1) * sizeof *p->kernels);
        p->nkernels += npieces - 1;
        sch_kernel orig = p->kernels[ki];
        for (int i = 0; i < npieces; i++) {
            sch_kernel *q = &p->kernels[ki + i];
            *q = orig;
            if (i > 0) {
                /* own copies of the arrays sch_program_free releases */
                q->fused = kiln_xmalloc((size_t)(orig.nfused + 1) * sizeof *q->fused);
                if (orig.nfused) memcpy(q->fused, orig.fused, (size_t)orig.nfused * sizeof *q->fused);
                q->cap_fused = orig.nfused + 1;
                q->stages = kiln_xmalloc((size_t)(orig.nstages + 1) * sizeof *q->stages);
                if (orig.nstages) memcpy(q->stages, orig.stages, (size_t)orig.nstages * sizeof *q->stages);
                q->cap_stages = orig.nstages + 1;
            }
            make_piece(p, q, i == 0 ? 0 : pts[i - 1], i == npts ? D : pts[i]);
        }
        ki += npieces - 1;
        made++;
    }
    return made;
}
