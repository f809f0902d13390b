/* pack.c — packs: a contraction operand that is a view no micro-kernel reads
 * in place, materialised by a kernel of its own; and loop coalescing of
 * contraction kernels and of generic (MAP, REDUCE) kernels.
 *
 * A convolution reads its input through pad and window views: the operand
 * of its SUM(MUL(a, b)) is a guarded load whose offset takes the reduction
 * index apart with div and mod (r = (c, kh, kw)). contract.c takes only
 * operands that are plain loads along r, and an operand that is a view of a
 * buffer cannot be given a buffer of its own (there is no node to force).
 * So the operand's tree is moved into a MAP kernel placed just before the
 * contraction ("the pack", im2col as the view's own index arithmetic), and
 * the contraction reads the pack: one pass of |pack| = (points of the
 * operand's loop variables) * K elements before M*N*K of micro-kernel work.
 * Nothing here knows about convolutions: any operand tree without fused
 * reductions (a guard, div/mod indices, a fused elementwise chain on a
 * view) is packed the same way, when the other side's own loop variables
 * re-read each packed element at least PACK_MIN_REUSE times (a
 * matrix-vector product reads each once: packing would only add a pass).
 *
 * Layout: the pack's loop variables in the kernel's order with r last
 * (rows contiguous along K: the dot and packed forms read them), unless the
 * operand reads its source with a constant step along its last loop
 * variable and not along r (a convolution's input along the output
 * columns): then r first, so the pack kernel's inner loop reads memory in
 * order and the contraction sees B strided along K and contiguous along n
 * (contract.c's b_kstride form).
 *
 * Coalescing: two adjacent loop variables u, v (extents U, V constant) of a
 * contraction kernel whose every index expression depends on them only
 * through u*V + v (a convolution's output rows and columns, read from a
 * pack or a 1x1 convolution's input) become one variable w < U*V, so N (or
 * M) is the whole image rather than one row of it. Checked, not assumed:
 * each expression e is rewritten to e' = e[u := 0, v := w] and kept only if
 * e'[w := u*V + v] is e again (the sym pool's canonical forms).
 *
 * The same merge applies to generic MAP and REDUCE kernels without stages
 * (sch_coalesce_generic, after kernelize's guard splitting): a bias + Relu
 * or a concatenation's copy over a 55 x 55 image is then one row of 3025
 * for the vector path (one masked tail per channel, not per image row)
 * instead of 55 rows of 55 (three vectors and a masked tail each). A
 * kernel whose indices take u and v apart (a pool's window, a padding
 * guard on the rows) keeps its loops.
 *
 * Window force: a generic reduction (not a contraction) whose operand is a
 * fused elementwise chain holding transcendental ops (EXP2, LOG2, SIN,
 * SQRT, RECIP) and reading its buffers at least twice per element over the
 * kernel's points and r (a max pool over LRN's output: 9 times for 3x3)
 * gets that chain's node forced into a buffer: computed once per element,
 * then read through the window. A row reduction reading each element once
 * (softmax's sum of exp2), or a chain whose own node has a value per window
 * cell or per product (a padded window's -inf mask, a contraction's MUL),
 * is left fused.
 *
 * Invariants: a pack is inserted right before its contraction, so kernels
 * stay in execution order; it computes exactly the values the operand tree
 * computed (the tree itself, its variables renamed); trees stay trees (the
 * packed side's lx slot becomes a leaf LOAD, the moved tree keeps its ids).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "contract.h"

/* a packed element must be read at least this often for the pack to pay */
#define PACK_MIN_REUSE 4

/* the first LOAD of a tree (its offset tells the layout), or -1 */
static int32_t first_load(const sch_program *p, int32_t id) {
    if (id < 0) return -1;
    const lx *x = &p->lx[id];
    if (x->kind == LX_LOAD) return id;
    int32_t a = first_load(p, x->a);
    return a >= 0 ? a : first_load(p, x->b);
}

static int has_stage(const sch_program *p, int32_t id) {
    if (id < 0) return 0;
    const lx *x = &p->lx[id];
    return x->kind == LX_STAGE || has_stage(p, x->a) || has_stage(p, x->b);
}

/* the operand is a load (or a cast of one) that contract.c reads in place:
 * contiguous along r, or strided along r and contiguous along the last loop
 * variable it uses (the b_kstride form) */
static int in_place(const sch_program *p, const sch_kernel *k, int32_t id) {
    const lx *x = &p->lx[id];
    if (x->kind == LX_CAST) x = &p->lx[x->a];
    if (x->kind != LX_LOAD) return 0;
    sym_pool *sp = p->g->syms;
    sym_id st = sym_step(sp, x->s, k->rvar);
    int64_t c;
    if (sym_is_const(sp, st, &c) && c == 1) return 1;
    if (sym_uses_var(sp, st, k->rvar)) return 0;
    unsigned used = sch_lx_loop_mask(p, k, id);
    for (int d = k->ndim - 1; d >= 0; d--)
        if ((used >> d) & 1u) return sym_is_const(sp, sym_step(sp, x->s, k->var[d]), &c) && c == 1;
    return 0;
}

/* contract.c will give the node this tree computes a buffer instead */
static int forcible(const sch_program *p, int32_t id) {
    const lx *x = &p->lx[id];
    if (x->kind == LX_GUARD || x->node < 0 || p->node_buf[x->node] >= 0) return 0;
    op_kind op = graph_node(p->g, x->node)->op;
    return op != OP_INPUT && op != OP_CONST && op != OP_IOTA;
}

/* the product of the extents of the loop variables in mask (INT64_MAX when
 * one is symbolic) */
static int64_t extent_of(const sch_program *p, const sch_kernel *k, unsigned mask) {
    int64_t n = 1, e;
    for (int d = 0; d < k->ndim; d++) {
        if (!((mask >> d) & 1u)) continue;
        if (!sym_is_const(p->g->syms, k->dim[d], &e)) return INT64_MAX;
        n = e > 0 && n > INT64_MAX / e ? INT64_MAX : n * e;
    }
    return n;
}

/* rename the sym variables of a tree: s := s[from[i] := to[i]] */
static void subst_tree(sch_program *p, int32_t id, int n, const sym_id *from, const sym_id *to) {
    if (id < 0) return;
    sym_pool *sp = p->g->syms;
    lx *x = &p->lx[id];
    for (int i = 0; i < n; i++) {
        if (x->s != SYM_NONE) x->s = sym_subst_var(sp, x->s, from[i], to[i]);
        if (x->s2 != SYM_NONE) x->s2 = sym_subst_var(sp, x->s2, from[i], to[i]);
    }
    subst_tree(p, p->lx[id].a, n, from, to);
    subst_tree(p, p->lx[id].b, n, from, to);
}

/* a new kernel at position at (later kernels move up by one) */
static sch_kernel *insert_kernel(sch_program *p, int32_t at) {
    KILN_GROW(p->kernels, p->cap_kernels, p->nkernels + 1);
    memmove(&p->kernels[at + 1], &p->kernels[at], (size_t)(p->nkernels - at) * sizeof *p->kernels);
    p->nkernels++;
    sch_kernel *k = &p->kernels[at];
    memset(k, 0, sizeof *k);
    k->src_buf = -1;
    k->rdim = k->rvar = SYM_NONE;
    return k;
}

/* pack operand `side` (an lx id, child of kernel ki's MUL) into a MAP kernel
 * inserted at ki; the contraction moves to ki + 1 */
static void pack_side(sch_program *p, int32_t ki, int32_t side, unsigned used) {
    sym_pool *sp = p->g->syms;
    const sch_kernel *k = &p->kernels[ki];
    /* the domain: the used loop variables and r, r first or last (top) */
    sym_id old[KILN_MAX_DIMS], dim[KILN_MAX_DIMS];
    int nd = 0, last = -1;
    for (int d = 0; d < k->ndim; d++)
        if ((used >> d) & 1u) last = d;
    int32_t ld = first_load(p, side);
    int r_first = 0;
    if (ld >= 0 && last >= 0) {
        int64_t c;
        sym_id off = p->lx[ld].s;
        r_first = sym_is_const(sp, sym_step(sp, off, k->var[last]), &c) &&
                  sym_uses_var(sp, sym_step(sp, off, k->rvar), k->rvar);
    }
    if (r_first) {
        old[nd] = k->rvar;
        dim[nd++] = k->rdim;
    }
    for (int d = 0; d < k->ndim; d++)
        if ((used >> d) & 1u) {
            old[nd] = k->var[d];
            dim[nd++] = k->dim[d];
        }
    if (!r_first) {
        old[nd] = k->rvar;
        dim[nd++] = k->rdim;
    }
    sym_id numel = sym_const(sp, 1);
    for (int d = 0; d < nd; d++) numel = sym_mul(sp, numel, dim[d]);
    KILN_GROW(p->bufs, p->cap_bufs, p->nbufs + 1);
    int32_t buf = p->nbufs++;
    memset(&p->bufs[buf], 0, sizeof p->bufs[buf]);
    p->bufs[buf].kind = SCH_BUF_NODE;
    p->bufs[buf].dtype = KILN_F32;
    p->bufs[buf].numel = numel;
    p->bufs[buf].node = -1;
    p->bufs[buf].output = -1;
    /* the operand's tree moves to the pack (its root copied to a fresh id,
     * so the old slot can become the contraction's leaf load) */
    int32_t root = lx_new(p, LX_CONST, KILN_F32);
    p->lx[root] = p->lx[side];
    sch_kernel *pk = insert_kernel(p, ki);
    pk->kind = SCH_K_MAP;
    pk->pack = 1;
    pk->root = p->kernels[ki + 1].root;
    pk->out_buf = buf;
    pk->ndim = nd;
    sym_id fresh[KILN_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        pk->dim[d] = dim[d];
        pk->var[d] = fresh[d] = sch_new_var(p, SCH_VAR_LOOP, d, dim[d]);
    }
    pk->store_off = sch_rowmajor(sp, nd, pk->dim, pk->var);
    subst_tree(p, root, nd, old, fresh);
    pk->expr = root;
    lx *x = &p->lx[side];
    memset(x, 0, sizeof *x);
    x->kind = LX_LOAD;
    x->dtype = KILN_F32;
    x->a = x->b = x->stage = -1;
    x->s2 = SYM_NONE;
    x->buf = buf;
    x->node = -1;
    x->s = sch_rowmajor(sp, nd, dim, old);
}

int sch_contract_pack(sch_program *p, int32_t ki) {
    const sch_kernel *k = &p->kernels[ki];
    if (k->kind != SCH_K_REDUCE || k->red_op != OP_SUM || k->ndim == 0 || k->nstages > 0) return 0;
    if (p->bufs[k->out_buf].dtype != KILN_F32) return 0;
    const lx *mul = &p->lx[k->expr];
    if (mul->kind != LX_BINARY || mul->op != OP_MUL || mul->dtype != KILN_F32) return 0;
    int32_t side[2] = {mul->a, mul->b};
    unsigned m[2] = {sch_lx_loop_mask(p, k, side[0]), sch_lx_loop_mask(p, k, side[1])};
    if (!(m[0] & ~m[1]) && !(m[1] & ~m[0])) return 0; /* not a contraction */
    int want[2];
    for (int s = 0; s < 2; s++) {
        const lx *x = &p->lx[side[s]];
        want[s] = x->dtype == KILN_F32 && !in_place(p, k, side[s]) && !forcible(p, side[s]) &&
                  !has_stage(p, side[s]) && extent_of(p, k, m[1 - s] & ~m[s]) >= PACK_MIN_REUSE &&
                  __builtin_popcount(m[s]) + 1 <= KILN_MAX_DIMS;
    }
    int added = 0;
    for (int s = 0; s < 2; s++) {
        if (!want[s]) continue;
        pack_side(p, ki + added, side[s], m[s]);
        added++;
    }
    return added;
}

/* ---- coalescing ---- */

/* every sym of kernel k's tree and store offset, appended to out */
static void collect_syms(const sch_program *p, int32_t id, sym_id **out, int32_t *n, int32_t *cap) {
    if (id < 0) return;
    const lx *x = &p->lx[id];
    KILN_GROW(*out, *cap, *n + 2);
    if (x->s != SYM_NONE) (*out)[(*n)++] = x->s;
    if (x->s2 != SYM_NONE) (*out)[(*n)++] = x->s2;
    collect_syms(p, x->a, out, n, cap);
    collect_syms(p, x->b, out, n, cap);
}

/* 1 when every expression of s[0..n) depends on u and v only through
 * u*V + v (see the top of the file); w a variable bounded by U*V */
static int mergeable(sym_pool *sp, const sym_id *s, int32_t n, sym_id u, sym_id v, sym_id V, sym_id w) {
    sym_id back = sym_add(sp, sym_mul(sp, u, V), v);
    for (int32_t i = 0; i < n; i++) {
        if (!sym_uses_var(sp, s[i], u) && !sym_uses_var(sp, s[i], v)) continue;
        sym_id e = sym_subst_var(sp, sym_subst_var(sp, s[i], u, sym_const(sp, 0)), v, w);
        if (sym_subst_var(sp, e, w, back) != s[i]) return 0;
    }
    return 1;
}

/* merge every mergeable pair of kernel ki's adjacent constant loops, from
 * the innermost out; returns how many were merged */
static int coalesce(sch_program *p, int32_t ki) {
    sch_kernel *k = &p->kernels[ki];
    sym_pool *sp = p->g->syms;
    int merged = 0;
    for (int d = k->ndim - 2; d >= 0; d--) {
        int64_t U, V;
        if (!sym_is_const(sp, k->dim[d], &U) || !sym_is_const(sp, k->dim[d + 1], &V) || U < 2 || V < 2) continue;
        sym_id *s = NULL;
        int32_t n = 0, cap = 0;
        collect_syms(p, k->expr, &s, &n, &cap);
        KILN_GROW(s, cap, n + 1);
        s[n++] = k->store_off;
        /* the merged variable and the ones after it get fresh variables
         * numbered by their new depth (the emitters name loop variables so) */
        sym_id from[KILN_MAX_DIMS + 1], to[KILN_MAX_DIMS + 1];
        sym_id w = sch_new_var(p, SCH_VAR_LOOP, d, sym_const(sp, U * V));
        int ok = mergeable(sp, s, n, k->var[d], k->var[d + 1], k->dim[d + 1], w);
        free(s);
        if (!ok) continue;
        int nf = 0;
        from[nf] = k->var[d];
        to[nf++] = sym_const(sp, 0);
        from[nf] = k->var[d + 1];
        to[nf++] = w;
        sym_id ndim_[KILN_MAX_DIMS], nvar[KILN_MAX_DIMS];
        int q = 0;
        for (int j = 0; j < d; j++) {
            ndim_[q] = k->dim[j];
            nvar[q++] = k->var[j];
        }
        ndim_[q] = sym_const(sp, U * V);
        nvar[q++] = w;
        for (int j = d + 2; j < k->ndim; j++) {
            sym_id f = sch_new_var(p, SCH_VAR_LOOP, q, k->dim[j]);
            from[nf] = k->var[j];
            to[nf++] = f;
            ndim_[q] = k->dim[j];
            nvar[q++] = f;
        }
        k = &p->kernels[ki];
        subst_tree(p, k->expr, nf, from, to);
        for (int i = 0; i < nf; i++) k->store_off = sym_subst_var(sp, k->store_off, from[i], to[i]);
        k->ndim = q;
        memcpy(k->dim, ndim_, sizeof(sym_id) * (size_t)q);
        memcpy(k->var, nvar, sizeof(sym_id) * (size_t)q);
        merged++; /* then d - 1 with the merged variable */
    }
    return merged;
}

int sch_coalesce_loops(sch_program *p, int32_t ki) {
    const sch_kernel *k = &p->kernels[ki];
    if (k->kind != SCH_K_REDUCE || k->red_op != OP_SUM || k->nstages > 0 || k->ndim < 2) return 0;
    const lx *mul = &p->lx[k->expr];
    if (mul->kind != LX_BINARY || mul->op != OP_MUL || !in_place(p, k, mul->a) || !in_place(p, k, mul->b)) return 0;
    return coalesce(p, ki);
}

int sch_coalesce_generic(sch_program *p, int32_t ki) {
    const sch_kernel *k = &p->kernels[ki];
    if ((k->kind != SCH_K_MAP && k->kind != SCH_K_REDUCE) || k->contract || k->pack || k->nstages > 0 || k->ndim < 2)
        return 0;
    int64_t rn;
    if (k->kind == SCH_K_REDUCE && !sym_is_const(p->g->syms, k->rdim, &rn)) return 0;
    return coalesce(p, ki);
}

/* ---- window force ---- */

static int costly(const sch_program *p, int32_t id) {
    if (id < 0) return 0;
    const lx *x = &p->lx[id];
    if (x->kind == LX_UNARY &&
        (x->op == OP_EXP2 || x->op == OP_LOG2 || x->op == OP_SIN || x->op == OP_SQRT || x->op == OP_RECIP))
        return 1;
    return costly(p, x->a) || costly(p, x->b);
}

/* the most elements of any buffer the tree loads (0: none, or symbolic) and
 * whether any load's offset uses r */
static int64_t most_loaded(const sch_program *p, int32_t id, sym_id rvar, int *uses_r) {
    if (id < 0) return 0;
    const lx *x = &p->lx[id];
    int64_t n = 0;
    if (x->kind == LX_LOAD) {
        if (!sym_is_const(p->g->syms, p->bufs[x->buf].numel, &n)) n = INT64_MAX;
        if (x->s != SYM_NONE && sym_uses_var(p->g->syms, x->s, rvar)) *uses_r = 1;
    }
    int64_t a = most_loaded(p, x->a, rvar, uses_r), b = most_loaded(p, x->b, rvar, uses_r);
    if (a > n) n = a;
    return b > n ? b : n;
}

int sch_window_force(const sch_program *p, int32_t ki, uint8_t *force) {
    const sch_kernel *k = &p->kernels[ki];
    if (k->kind != SCH_K_REDUCE || k->contract || k->ndim == 0 || k->rvar == SYM_NONE) return 0;
    int32_t id = k->expr;
    if (!forcible(p, id) || force[p->lx[id].node] || !costly(p, id)) return 0;
    int64_t rn, pts = extent_of(p, k, (1u << k->ndim) - 1u);
    if (!sym_is_const(p->g->syms, k->rdim, &rn) || rn < 2 || pts == INT64_MAX || pts > INT64_MAX / rn) return 0;
    int uses_r = 0;
    int64_t most = most_loaded(p, id, k->rvar, &uses_r);
    if (!uses_r || most <= 0 || most == INT64_MAX || most > pts * rn / 2) return 0;
    /* and the chain's own node is that small too: not a value per window
     * cell (a padded window's mask) or per product (a contraction's MUL) */
    const node *m = graph_node(p->g, p->lx[id].node);
    int64_t cells = 1, e;
    for (int d = 0; d < m->ndim; d++) {
        if (!sym_is_const(p->g->syms, m->shape[d], &e) || e > (pts * rn / 2) / (cells > 0 ? cells : 1)) return 0;
        cells *= e;
    }
    if (cells > pts * rn / 2) return 0;
    force[p->lx[id].node] = 1;
    return 1;
}
