/* stream.c — the streaming kernel form of SOFTMAX_CONTRACT (src/ir/compound.def):
 * out[r..., n] = sum_j softmax_j(x[r..., j])[j] * v[r..., j, n], computed in
 * one pass over j with a running max and a rescaled sum and products, so the
 * softmax (attention's probabilities) is never stored.
 *
 * The kernel (SCH_K_STREAM, loop.h) reuses the loop IR of a MAP kernel:
 *  - its domain is (r..., j): the node's axes but the last (the value axis n),
 *    then the stream axis j of the operands; loop variables i0.. as usual, so
 *    reductions inside x (the scores' dot product) fuse as per-point stages
 *    evaluated once per (row, j): exactly as often as they have elements;
 *  - expr is a BINARY node with op SOFTMAX_CONTRACT whose a is x at (r..., j)
 *    and whose b is v at (r..., j, n), n the extra loop variable rvar
 *    (bounded by rdim, the value axis' size); one tree, so every pass that
 *    walks a kernel's loads (liveness, buffer lists) sees both operands;
 *  - stream_c is the softmax's scale c (a constant), store_off the output's
 *    row-major offset at (r..., n).
 * The work items are the rows r (the runtime never splits j into chunks);
 * src/codegen/emit_stream.c prints the loop. sch_stream_analyse gives a
 * buffer to what a fused stage reads that does not depend on j (the query
 * rows of the scores' dot product), so it is computed once, not per key.
 *
 * Conditions (else KILN_ERR_UNSUPPORTED, and the caller compiles the
 * primitive form instead): the stream axis is not the operands' last axis,
 * x and c do not vary along the last axis (attention's probabilities are
 * broadcast along the value axis), c is a constant, the value axis has a
 * constant size of at most SCH_STREAM_MAX_N, and the dtype is f32.
 */
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "loop.h"

/* 1 when sym s mentions variable var */
static int sym_uses(const sym_pool *sp, sym_id s, sym_id var) {
    if (s == var) return 1;
    const sym_node *n = sym_get(sp, s);
    switch (n->kind) {
    case SYM_CONST:
    case SYM_VAR: return 0;
    default: return sym_uses(sp, n->a, var) || (n->b != SYM_NONE && sym_uses(sp, n->b, var));
    }
}

/* 1 when tree id reads anything at a coordinate that depends on var */
static int lx_uses(const sch_program *p, int32_t id, sym_id var) {
    if (id < 0) return 0;
    const lx *x = &p->lx[id];
    const sym_pool *sp = p->g->syms;
    if ((x->s != SYM_NONE && x->kind != LX_CONST && sym_uses(sp, x->s, var)) ||
        (x->kind == LX_LET && sym_uses(sp, x->s2, var)))
        return 1;
    if (x->kind == LX_CONST || x->kind == LX_LOAD || x->kind == LX_INDEX || x->kind == LX_STAGE) return 0;
    return lx_uses(p, x->a, var) || lx_uses(p, x->b, var);
}

kiln_status sch_stream_kernel(sch_program *p, int32_t n, int32_t out_buf, char *err, size_t cap) {
    kiln_graph *g = p->g;
    sym_pool *sp = g->syms;
    const node *m = graph_node(g, n);
    const view *VX = graph_tensor_view(g, m->src[0]);
    int nop = view_ndim(VX), k = m->axis;
    int64_t nv = 0;
    if (m->dtype != KILN_F32 || nop < 2 || k < 0 || k >= nop - 1) {
        snprintf(err, cap, "SOFTMAX_CONTRACT node %d: not a streamable form (%s, axis %d of %d)", (int)n,
                 kiln_dtype_name(m->dtype), k, nop);
        return KILN_ERR_UNSUPPORTED;
    }
    sym_id ndim_sym = m->shape[m->ndim - 1];
    if (!sym_is_const(sp, ndim_sym, &nv) || nv < 1 || nv > SCH_STREAM_MAX_N) {
        snprintf(err, cap, "SOFTMAX_CONTRACT node %d: the value axis needs a constant size of 1..%d", (int)n,
                 SCH_STREAM_MAX_N);
        return KILN_ERR_UNSUPPORTED;
    }
    int32_t kid = p->nkernels;
    KILN_GROW(p->kernels, p->cap_kernels, p->nkernels + 1);
    sch_kernel *K = &p->kernels[p->nkernels++];
    memset(K, 0, sizeof *K);
    K->kind = SCH_K_STREAM;
    K->root = n;
    K->out_buf = out_buf;
    K->src_buf = -1;
    K->red_op = OP_SUM;
    /* domain: the node's axes but the last, then the stream axis */
    K->ndim = m->ndim;
    for (int d = 0; d < m->ndim - 1; d++) K->dim[d] = m->shape[d];
    K->dim[m->ndim - 1] = view_shape(VX)[k];
    for (int d = 0; d < K->ndim; d++) K->var[d] = sch_new_var(p, SCH_VAR_LOOP, d, K->dim[d]);
    K->rdim = ndim_sym;
    K->rvar = sch_new_var(p, SCH_VAR_LOOP, K->ndim, ndim_sym);
    sym_id oc[KILN_MAX_DIMS], c[KILN_MAX_DIMS];
    for (int d = 0; d < m->ndim - 1; d++) oc[d] = K->var[d];
    oc[m->ndim - 1] = K->rvar;
    K->store_off = sch_rowmajor(sp, m->ndim, m->shape, oc);
    /* operand coordinates: the node's axes with the stream variable at k */
    for (int a = 0, d = 0; a < nop; a++) c[a] = a == k ? K->var[K->ndim - 1] : oc[d++];
    int32_t x = lx_tensor(p, &p->kernels[kid], m->src[0], c);
    int32_t cc = lx_tensor(p, &p->kernels[kid], m->src[1], c);
    int32_t v = lx_tensor(p, &p->kernels[kid], m->src[2], c);
    K = &p->kernels[kid];
    int varies = lx_uses(p, x, K->rvar);
    for (int32_t i = 0; i < K->nstages && !varies; i++) {
        varies = lx_uses(p, K->stages[i].expr, K->rvar);
        for (int d = 0; d < K->stages[i].ncoord && !varies; d++) varies = sym_uses(sp, K->stages[i].coord[d], K->rvar);
    }
    if (varies || p->lx[cc].kind != LX_CONST) {
        snprintf(err, cap, "SOFTMAX_CONTRACT node %d: %s", (int)n,
                 varies ? "the logits vary along the value axis" : "the scale is not a constant");
        p->nkernels--;
        free(K->fused);
        free(K->stages);
        return KILN_ERR_UNSUPPORTED;
    }
    K->stream_c = p->lx[cc].value;
    int32_t e = lx_new(p, LX_BINARY, m->dtype);
    p->lx[e].op = OP_SOFTMAX_CONTRACT;
    p->lx[e].a = x;
    p->lx[e].b = v;
    p->lx[e].node = n;
    p->kernels[kid].expr = e;
    return KILN_OK;
}

/* marks in force[] the operands of a fused stage's product (a stage SUM over
 * MUL(a, b), through views and casts): those rows would otherwise be
 * recomputed at every position of the stream (attention's normalised,
 * rotated queries); inputs, states and constants are read in place. Returns
 * how many nodes it newly marked. */
static int force_operands(const sch_program *p, int32_t sum_node, uint8_t *force) {
    kiln_graph *g = p->g;
    const node *s = graph_node(g, sum_node);
    if (s->op != OP_SUM) return 0;
    int32_t mn = graph_tensor(g, s->src[0])->node;
    const node *mul = graph_node(g, mn);
    if (mul->op != OP_MUL) return 0;
    int n = 0;
    for (int a = 0; a < 2; a++) {
        int32_t o = graph_tensor(g, mul->src[a])->node;
        const node *m = graph_node(g, o);
        if (m->op == OP_CAST && !kiln_dtype_is_block(m->dtype)) {
            o = graph_tensor(g, m->src[0])->node;
            m = graph_node(g, o);
        }
        if (m->op == OP_INPUT || m->op == OP_CONST || m->op == OP_IOTA || m->op == OP_SCATTER || force[o]) continue;
        force[o] = 1;
        n++;
    }
    return n;
}

int sch_stream_analyse(sch_program *p, uint8_t *force) {
    int n = 0;
    for (int32_t ki = 0; ki < p->nkernels; ki++) {
        const sch_kernel *K = &p->kernels[ki];
        if (K->kind != SCH_K_STREAM) continue;
        for (int32_t i = 0; i < K->nstages; i++) n += force_operands(p, K->stages[i].node, force);
    }
    return n;
}
