/* demand.c — which outputs of a contraction its consumers use: the causal
 * bound of attention's scores, found from the graph and no model's name.
 *
 * A contraction S (a SUM node, its kernel's root) whose one consumer
 * chain of elementwise ops ends in a MUL by a mask M that is zero outside
 * a half-space does not need its values outside it: there M makes the
 * product 0 whatever S was. The mask must be an indicator built from
 * index arithmetic — LT(a, b) of IOTAs, integer CONSTs, their sums and
 * products, through CASTs, MULs of masks and plain views — so that its
 * kept region is a - b < 0 with a and b affine in S's coordinates.
 * kiln_attention's causal mask is one: key j of query i at position
 * q_pos + i is kept when j < q_pos + i + 1.
 *
 * What is recorded (sch_contract.n_lim_off, loop.h): the form n < m + off
 * only (n: the contraction's output column variable, m: its row variable,
 * off free of both and of every other loop variable). A kernel may then
 * store 0 at (m, n) with n >= m + off instead of the sum.
 *
 * Why 0 is safe: every op of the chain maps 0 to a finite value (ADD and
 * MUL with another operand, CAST between floats, EXP2, SIN, SQRT; never
 * RECIP or LOG2), so the masked product is 0 as before. The result
 * differs only where the original sum there was inf or NaN (0 x inf).
 *
 * Invariants: any step that is not of these forms gives no bound, and no
 * bound is always correct (the kernel computes everything).
 */
#include <stdint.h>
#include <string.h>

#include "contract.h"
#include "graph.h"

#define DEMAND_MAX_CHAIN 8

/* the single use of node n: its consumer node and operand slot; -1 when n
 * has none, several, or is a graph output */
static int32_t single_use(const kiln_graph *g, int32_t n, int *slot) {
    int32_t user = -1;
    for (int32_t o = 0; o < g->noutputs; o++)
        if (g->tensors[g->outputs[o].tensor].node == n) return -1;
    for (int32_t i = n + 1; i < g->nnodes; i++) {
        const node *u = &g->nodes[i];
        for (int s = 0; s < op_table[u->op].arity; s++) {
            if (g->tensors[u->src[s]].node != n) continue;
            if (user >= 0) return -1;
            user = i;
            *slot = s;
        }
    }
    return user;
}

static int sym_equal(sym_pool *sp, sym_id a, sym_id b) {
    int64_t c;
    return a == b || (sym_is_const(sp, sym_sub(sp, a, b), &c) && c == 0);
}

static int is_one(sym_pool *sp, sym_id s) {
    int64_t c;
    return sym_is_const(sp, s, &c) && c == 1;
}

/* the coordinates c[] of node n that a consumer reads at coordinates u[]
 * through view v: 1 on success. Two forms: n with at most one axis longer
 * than 1 (its coordinate is the view's linear index), or a one-layer view
 * with offset 0 whose every long axis d of n is read by its own view axis
 * of n's row-major stride and size, every other long view axis having
 * stride 0 (reshapes, broadcasts, permutes) */
static int view_coords(sym_pool *sp, const node *n, const view *v, const sym_id *u, sym_id *c) {
    if (v->nlayers != 1 || v->layer[0].masked) return 0;
    const view_layer *l = &v->layer[0];
    int nlong = 0, dlong = -1;
    for (int d = 0; d < n->ndim; d++) {
        c[d] = sym_const(sp, 0);
        if (!is_one(sp, n->shape[d])) nlong++, dlong = d;
    }
    if (nlong <= 1) {
        sym_id lin = l->offset;
        for (int e = 0; e < l->ndim; e++) lin = sym_add(sp, lin, sym_mul(sp, l->stride[e], u[e]));
        if (dlong >= 0) c[dlong] = lin;
        return 1;
    }
    int64_t off;
    if (!sym_is_const(sp, l->offset, &off) || off != 0) return 0;
    unsigned used = 0; /* view axes matched to an axis of n */
    sym_id stride = sym_const(sp, 1);
    for (int d = n->ndim - 1; d >= 0; stride = sym_mul(sp, stride, n->shape[d]), d--) {
        if (is_one(sp, n->shape[d])) continue;
        int found = 0;
        for (int e = 0; e < l->ndim && !found; e++)
            if (!((used >> e) & 1u) && !is_one(sp, l->shape[e]) && sym_equal(sp, l->stride[e], stride) &&
                sym_equal(sp, l->shape[e], n->shape[d])) {
                c[d] = u[e];
                used |= 1u << e;
                found = 1;
            }
        if (!found) return 0;
    }
    /* every other long view axis must be a broadcast (stride 0): one that
     * moves through n (a window's overlapping rows) is not this form */
    int64_t z;
    for (int e = 0; e < l->ndim; e++)
        if (!((used >> e) & 1u) && !is_one(sp, l->shape[e]) && !(sym_is_const(sp, l->stride[e], &z) && z == 0)) return 0;
    return 1;
}

static int is_int(kiln_dtype t) { return t == KILN_I32 || t == KILN_U8; }

/* tensor t's element at consumer coordinates u as an integer expression,
 * or SYM_NONE */
static sym_id index_value(const kiln_graph *g, int32_t t, const sym_id *u, int depth) {
    sym_pool *sp = g->syms;
    const node *n = &g->nodes[g->tensors[t].node];
    sym_id c[KILN_MAX_DIMS];
    if (depth > 12 || !view_coords(sp, n, &g->views[g->tensors[t].view], u, c)) return SYM_NONE;
    switch (n->op) {
    case OP_IOTA: return c[n->axis];
    case OP_CONST: {
        int64_t iv = (int64_t)n->value;
        return (double)iv == n->value ? sym_const(sp, iv) : SYM_NONE;
    }
    case OP_CAST:
        /* integers stay themselves when cast to an integer type or to a float */
        if (!is_int(g->nodes[g->tensors[n->src[0]].node].dtype)) return SYM_NONE;
        return index_value(g, n->src[0], c, depth + 1);
    case OP_ADD:
    case OP_MUL: {
        if (!is_int(n->dtype)) return SYM_NONE;
        sym_id a = index_value(g, n->src[0], c, depth + 1), b = index_value(g, n->src[1], c, depth + 1);
        if (a == SYM_NONE || b == SYM_NONE) return SYM_NONE;
        return n->op == OP_ADD ? sym_add(sp, a, b) : sym_mul(sp, a, b);
    }
    OP_UNARY_CASES
    case OP_INPUT: case OP_MOD: case OP_LT: case OP_SUM: case OP_MAX: case OP_GATHER: case OP_SCATTER:
    case OP_CONTIGUOUS: case OP_CONTRACT: case OP_SOFTMAX_ONLINE: case OP_SOFTMAX_CONTRACT: return SYM_NONE;
    }
    return SYM_NONE;
}

/* when tensor t at consumer coordinates u is 0 outside a - b < 0: 1 and
 * *diff = a - b; else 0 */
static int zero_outside(const kiln_graph *g, int32_t t, const sym_id *u, sym_id *diff, int depth) {
    sym_pool *sp = g->syms;
    const node *n = &g->nodes[g->tensors[t].node];
    sym_id c[KILN_MAX_DIMS];
    if (depth > 12 || !view_coords(sp, n, &g->views[g->tensors[t].view], u, c)) return 0;
    switch (n->op) {
    case OP_LT: {
        sym_id a = index_value(g, n->src[0], c, depth + 1), b = index_value(g, n->src[1], c, depth + 1);
        if (a == SYM_NONE || b == SYM_NONE) return 0;
        *diff = sym_sub(sp, a, b);
        return 1;
    }
    case OP_CAST: return zero_outside(g, n->src[0], c, diff, depth + 1);
    case OP_MUL: return zero_outside(g, n->src[0], c, diff, depth + 1) || zero_outside(g, n->src[1], c, diff, depth + 1);
    OP_UNARY_CASES
    case OP_INPUT: case OP_CONST: case OP_IOTA: case OP_ADD: case OP_MOD: case OP_SUM: case OP_MAX:
    case OP_GATHER: case OP_SCATTER: case OP_CONTIGUOUS: case OP_CONTRACT: case OP_SOFTMAX_ONLINE:
    case OP_SOFTMAX_CONTRACT: return 0;
    }
    return 0;
}

/* elementwise ops that keep a stored 0 finite (see the top): ops.def's
 * OPF_FINITE0, and a CAST between float dtypes */
static int keeps_zero_finite(const kiln_graph *g, const node *u) {
    if (u->op == OP_CAST)
        return !kiln_dtype_is_block(u->dtype) && !is_int(u->dtype) &&
               !is_int(g->nodes[g->tensors[u->src[0]].node].dtype);
    return (op_table[u->op].flags & OPF_FINITE0) != 0;
}

sym_id sch_demand_n_limit(const sch_program *p, const sch_kernel *k) {
    const kiln_graph *g = p->g;
    const sch_contract *ct = k->contract;
    if (!ct || ct->mdim < 0 || k->root < 0 || g->nodes[k->root].op != OP_SUM) return SYM_NONE;
    sym_pool *sp = g->syms;
    int32_t cur = k->root;
    for (int step = 0; step < DEMAND_MAX_CHAIN; step++) {
        int slot = 0;
        int32_t ui = single_use(g, cur, &slot);
        if (ui < 0) return SYM_NONE;
        const node *u = &g->nodes[ui];
        const node *cn = &g->nodes[cur];
        /* the use must see cur's elements where they are: same shape, dense */
        const view *v = &g->views[g->tensors[u->src[slot]].view];
        if (!view_is_identity(v, sp) || u->ndim != cn->ndim || !keeps_zero_finite(g, u)) return SYM_NONE;
        for (int d = 0; d < u->ndim; d++)
            if (!sym_equal(sp, u->shape[d], cn->shape[d])) return SYM_NONE;
        sym_id diff;
        if (u->op == OP_MUL && zero_outside(g, u->src[1 - slot], k->var, &diff, 0)) {
            /* kept: diff < 0 with diff = n - m - off */
            sym_id n = k->var[ct->ndim], m = k->var[ct->mdim];
            int64_t sn, sm;
            if (!sym_is_const(sp, sym_step(sp, diff, n), &sn) || sn != 1) return SYM_NONE;
            if (!sym_is_const(sp, sym_step(sp, diff, m), &sm) || sm != -1) return SYM_NONE;
            sym_id rest = sym_sub(sp, sym_add(sp, diff, m), n); /* -off */
            for (int d = 0; d < k->ndim; d++)
                if (sym_uses_var(sp, rest, k->var[d])) return SYM_NONE;
            return sym_neg(sp, rest);
        }
        cur = ui;
    }
    return SYM_NONE;
}
