/* kernelize.c — cut a graph into kernels (the loop IR of loop.h).
 *
 * Which nodes get a buffer of their own ("materialised"), decided from the
 * consumers backwards (decide_materialised):
 *  - inputs and states (the caller's buffers), scatters, casts into a block
 *    format (they are quantised by a host step): always;
 *  - constants and iotas: never (they cost nothing to recompute);
 *  - any other node belongs to the kernel of its consumers when they are all
 *    in one kernel: it is recomputed inside that kernel at the coordinates
 *    each read asks for (the fusion: elementwise chains, views, gathers and
 *    casts fold into the kernel that finally stores), as long as that makes
 *    at most SCH_MAX_COPIES copies of it; consumers in different kernels, or
 *    more copies, give it a buffer;
 *  - a reduction (SUM/MAX) fuses the same way, as a stage of its consumers'
 *    kernel (see loop.h): softmax becomes one kernel with per-row max and
 *    sum stages, rmsnorm one kernel with a per-row sum of squares. Outputs,
 *    and reductions read by a scatter or a quantising cast, keep a buffer.
 *    A fused reduction must be evaluated exactly as often as it has
 *    elements (once per row of its consumer, or once per point): fusion
 *    must never multiply work (a column sum read along rows, a total read by
 *    every row). check_stages verifies that on the built kernels; a
 *    reduction that fails gets a buffer and the program is rebuilt (each
 *    round adds buffers, so this ends).
 * A reduction with a buffer is its own REDUCE kernel, absorbing its
 * elementwise producers. Outputs read through an identity view write
 * straight into the caller-visible result buffer; others get a copy kernel.
 *
 * State (KV cache) semantics: a SCATTER whose state operand is read by nothing
 * else (through an identity view) updates that buffer in place — so a chain
 * of scatters on a state tensor writes into the caller's buffer directly. The
 * last scatter of each chain is the state's final value; when it could not be
 * done in place, a copy kernel writes it back at the end.
 *
 * Invariants: kernels are in a valid execution order (node order, then
 * output copies, then write-backs); only nodes that outputs or state updates
 * need are computed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "contract.h"
#include "loop.h"

static unsigned program_tag_counter;

static sym_id numel_of(sym_pool *sp, int ndim, const sym_id *shape);

/* tensor t reads its whole node densely in row-major order (perhaps under
 * another shape): its bytes are the node's bytes */
static int reads_whole(kiln_graph *g, kiln_tensor t) {
    const tensor *T = graph_tensor(g, t);
    const view *V = &g->views[T->view];
    const node *m = graph_node(g, T->node);
    return view_is_identity(V, g->syms) &&
           numel_of(g->syms, view_ndim(V), view_shape(V)) == numel_of(g->syms, m->ndim, m->shape);
}

static int32_t add_buf(sch_program *p, sch_buf_kind kind, kiln_dtype dt, sym_id numel, int32_t node_id) {
    KILN_GROW(p->bufs, p->cap_bufs, p->nbufs + 1);
    sch_buf *b = &p->bufs[p->nbufs];
    b->kind = kind;
    b->dtype = dt;
    b->numel = numel;
    b->node = node_id;
    b->output = -1;
    return p->nbufs++;
}

static sch_kernel *add_kernel(sch_program *p, sch_kernel_kind kind, int32_t root, int32_t out_buf) {
    KILN_GROW(p->kernels, p->cap_kernels, p->nkernels + 1);
    sch_kernel *k = &p->kernels[p->nkernels++];
    memset(k, 0, sizeof *k);
    k->kind = kind;
    k->root = root;
    k->out_buf = out_buf;
    k->src_buf = -1;
    k->expr = -1;
    k->store_off = SYM_NONE;
    k->rdim = k->rvar = SYM_NONE;
    return k;
}

static sym_id numel_of(sym_pool *sp, int ndim, const sym_id *shape) {
    sym_id n = sym_const(sp, 1);
    for (int d = 0; d < ndim; d++) n = sym_mul(sp, n, shape[d]);
    return n;
}

/* loop variables over a domain; the kernel is re-fetched by index because
 * creating variables never moves kernels, but lx creation may be interleaved */
static void set_domain(sch_program *p, sch_kernel *k, int ndim, const sym_id *shape) {
    k->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        k->dim[d] = shape[d];
        k->var[d] = sch_new_var(p, SCH_VAR_LOOP, d, shape[d]);
    }
    k->store_off = sch_rowmajor(p->g->syms, ndim, k->dim, k->var);
}

/* a MAP into a TEMP f32 buffer followed by a QUANTIZE into out_buf. value:
 * 0 = lx_node(n), 1 = the node's operand (a CAST), 2 = output tensor t */
static void add_quantize(sch_program *p, int32_t n, int32_t out_buf, int mode, kiln_tensor t) {
    kiln_graph *g = p->g;
    const sch_buf *ob = &p->bufs[out_buf];
    sym_id numel = ob->numel;
    int32_t temp = add_buf(p, SCH_BUF_TEMP, KILN_F32, numel, n);
    int kidx = p->nkernels;
    sch_kernel *k = add_kernel(p, SCH_K_MAP, n, temp);
    const view *V = mode == 2 ? graph_tensor_view(g, t) : NULL;
    const node *m = graph_node(g, n);
    if (mode == 2) set_domain(p, k, view_ndim(V), view_shape(V));
    else set_domain(p, k, m->ndim, m->shape);
    sym_id vars[KILN_MAX_DIMS];
    memcpy(vars, k->var, sizeof vars);
    int32_t inner;
    if (mode == 0) inner = lx_node(p, &p->kernels[kidx], n, vars);
    else if (mode == 1) inner = lx_tensor(p, &p->kernels[kidx], m->src[0], vars);
    else inner = lx_tensor(p, &p->kernels[kidx], t, vars);
    int32_t e = lx_new(p, LX_CAST, KILN_F32);
    p->lx[e].a = inner;
    p->kernels[kidx].expr = e;
    sch_kernel *q = add_kernel(p, SCH_K_QUANTIZE, n, out_buf);
    q->src_buf = temp;
}


/* the most copies of one node's expression that fusion may create in the
 * kernels' trees (a node read several times by one kernel is recomputed at
 * each read; more reads than this and it gets a buffer) */
#define SCH_MAX_COPIES 4

/* 1 when node i is cheap index arithmetic: integer-like sums, products and
 * comparisons of IOTA and CONST (a mask such as j <= pos + i, and its
 * conversion to a float 0/1 or -big). Such nodes are never given a buffer:
 * inside a stream kernel the comparisons stay visible, so masked key blocks
 * can be skipped (stream_mask.c), and recomputing a few integer ops costs
 * less than reading a (seq, kv) buffer. Only in graphs with stream kernels:
 * the materialised form keeps its mask buffer (its softmax reads the mask
 * in three passes; inlining there was not measured to pay). idx holds the
 * answers of earlier nodes (sources come first). */
static int index_arith(const kiln_graph *g, int32_t i, const uint8_t *idx) {
    const node *m = &g->nodes[i];
    if (m->op == OP_IOTA || m->op == OP_CONST) return 1;
    int cheap = m->op == OP_ADD || m->op == OP_MUL || m->op == OP_LT || (m->op == OP_CAST && !kiln_dtype_is_block(m->dtype));
    if (!cheap) return 0;
    for (int a = 0; a < op_table[m->op].arity; a++)
        if (!idx[graph_tensor(g, m->src[a])->node]) return 0;
    return 1;
}

/* which nodes get a buffer (see the top of this file). Decided from the
 * consumers backwards: each node not materialised belongs to the kernel of
 * its consumers ("root": a materialised node, or nn + o for output o's copy
 * kernel), so a node is inlined when all its consumers are in one kernel and
 * it would not be copied more than SCH_MAX_COPIES times. */
static void decide_materialised(kiln_graph *g, const int32_t *needed, const uint8_t *force, int32_t *mat) {
    int32_t nn = g->nnodes;
    int32_t *root = kiln_xmalloc(((size_t)nn + 1) * sizeof *root);
    int64_t *copies = kiln_xcalloc((size_t)nn + 1, sizeof *copies);
    int32_t *uroot = kiln_xmalloc(((size_t)nn + 1) * sizeof *uroot); /* the root seen so far, -2: none, -3: several */
    int8_t *is_out = kiln_xcalloc((size_t)nn + 1, 1);
    uint8_t *idx = kiln_xcalloc((size_t)nn + 1, 1);
    int streams = 0;
    for (int32_t i = 0; i < nn; i++) streams |= needed[i] && g->nodes[i].op == OP_SOFTMAX_CONTRACT;
    for (int32_t i = 0; i < nn; i++) {
        uroot[i] = -2;
        root[i] = -1;
        mat[i] = 0;
        idx[i] = (uint8_t)(streams && index_arith(g, i, idx));
    }
    for (int32_t o = 0; o < g->noutputs; o++) {
        int32_t n = graph_tensor(g, g->outputs[o].tensor)->node;
        is_out[n] = 1;
        uroot[n] = uroot[n] == -2 || uroot[n] == nn + o ? nn + o : -3;
        copies[n] += 1;
    }
    for (int32_t i = nn - 1; i >= 0; i--) {
        if (!needed[i]) continue;
        const node *m = &g->nodes[i];
        int fixed = -1; /* 1: always a buffer, 0: never */
        switch (m->op) {
        case OP_INPUT:
        case OP_SCATTER: fixed = 1; break;
        case OP_CONST:
        case OP_IOTA: fixed = 0; break;
        case OP_CAST: if (kiln_dtype_is_block(m->dtype)) fixed = 1; break;
        case OP_SOFTMAX_CONTRACT: fixed = 1; break; /* a stream kernel of its own (stream.c) */
        case OP_CONTIGUOUS: /* of a multi-layer view (rules.c, contiguous-drop): a buffer */
            if (g->views[graph_tensor(g, m->src[0])->view].nlayers > 1) fixed = 1;
            break;
        OP_UNARY_CASES
        case OP_ADD: case OP_MUL: case OP_MOD: case OP_LT: case OP_SUM: case OP_MAX: case OP_GATHER:
        case OP_CONTRACT: case OP_SOFTMAX_ONLINE: break; /* decided by its uses below */
        }
        if (fixed < 0 && idx[i] && !is_out[i] && !force[i]) fixed = 0;
        if (fixed < 0) {
            int32_t r = uroot[i];
            int inl = r >= 0 && copies[i] <= SCH_MAX_COPIES && !force[i];
            if (inl && (m->op == OP_SUM || m->op == OP_MAX)) {
                /* a reduction fuses as a stage of a map or reduce kernel */
                if (is_out[i]) inl = 0;
                else if (r < nn) {
                    const node *rn = &g->nodes[r];
                    inl = rn->op != OP_SCATTER && !kiln_dtype_is_block(rn->dtype);
                } else {
                    inl = !kiln_dtype_is_block(graph_node(g, graph_tensor(g, g->outputs[r - nn].tensor)->node)->dtype);
                }
            }
            fixed = !inl;
        }
        mat[i] = fixed;
        root[i] = mat[i] ? i : uroot[i];
        if (m->op == OP_CONST || m->op == OP_IOTA) continue;
        int64_t mine = mat[i] ? 1 : copies[i];
        for (int a = 0; a < op_table[m->op].arity; a++) {
            int32_t s = graph_tensor(g, m->src[a])->node;
            uroot[s] = uroot[s] == -2 || uroot[s] == root[i] ? root[i] : -3;
            copies[s] += mine;
        }
    }
    free(root);
    free(copies);
    free(uroot);
    free(is_out);
    free(idx);
}

static kiln_status build(kiln_graph *g, sch_program *p, const uint8_t *force, char *err, size_t errcap) {
    memset(p, 0, sizeof *p);
    p->g = g;
    p->tag = __atomic_add_fetch(&program_tag_counter, 1u, __ATOMIC_RELAXED);
    if (g->build_failed) {
        snprintf(err, errcap, "the graph has a builder error: %s", g->error);
        return g->status != KILN_OK ? g->status : KILN_ERR_INVALID;
    }
    if (g->noutputs == 0) {
        snprintf(err, errcap, "the graph has no outputs (mark them with kiln_output)");
        return KILN_ERR_INVALID;
    }
    int32_t nn = g->nnodes;
    sym_pool *sp = g->syms;
    int32_t *needed = kiln_xcalloc((size_t)nn + 1, sizeof *needed);
    int32_t *uses = kiln_xcalloc((size_t)nn + 1, sizeof *uses);
    int32_t *mat = kiln_xcalloc((size_t)nn + 1, sizeof *mat);
    int32_t *chain_state = kiln_xmalloc(((size_t)nn + 1) * sizeof *chain_state);
    p->node_buf = kiln_xmalloc(((size_t)nn + 1) * sizeof *p->node_buf);
    p->state_final = kiln_xmalloc(((size_t)nn + 1) * sizeof *p->state_final);
    for (int32_t i = 0; i < nn; i++) {
        p->node_buf[i] = -1;
        p->state_final[i] = -1;
        chain_state[i] = -1;
    }

    /* state chains: a scatter whose state operand is (an identity view of) a
     * state input or of another scatter on one */
    for (int32_t i = 0; i < nn; i++) {
        const node *m = &g->nodes[i];
        if (m->op == OP_INPUT && m->is_state) chain_state[i] = i;
        if (m->op != OP_SCATTER) continue;
        const tensor *st = graph_tensor(g, m->src[0]);
        if (!reads_whole(g, m->src[0])) continue;
        int32_t s = chain_state[st->node];
        if (s < 0) continue;
        chain_state[i] = s;
        p->state_final[s] = i; /* the last one in node order wins */
    }

    /* what the outputs and the state updates need */
    for (int32_t i = 0; i < g->noutputs; i++) needed[graph_tensor(g, g->outputs[i].tensor)->node] = 1;
    for (int32_t i = 0; i < nn; i++)
        if (p->state_final[i] >= 0) needed[p->state_final[i]] = 1;
    for (int32_t i = nn - 1; i >= 0; i--) {
        if (!needed[i]) continue;
        const node *m = &g->nodes[i];
        for (int a = 0; a < op_table[m->op].arity; a++) {
            int32_t s = graph_tensor(g, m->src[a])->node;
            needed[s] = 1;
            uses[s]++;
        }
    }
    for (int32_t i = 0; i < g->noutputs; i++) uses[graph_tensor(g, g->outputs[i].tensor)->node]++;

    decide_materialised(g, needed, force, mat);
    /* buffers */
    for (int32_t i = 0; i < nn; i++) {
        if (!needed[i] || !mat[i]) continue;
        const node *m = &g->nodes[i];
        sym_id numel = numel_of(sp, m->ndim, m->shape);
        if (m->op == OP_INPUT) {
            p->node_buf[i] = add_buf(p, m->is_state ? SCH_BUF_STATE : SCH_BUF_INPUT, m->dtype, numel, i);
            continue;
        }
        if (m->op == OP_SCATTER) {
            const tensor *st = graph_tensor(g, m->src[0]);
            int32_t sb = p->node_buf[st->node];
            if (sb >= 0 && reads_whole(g, m->src[0]) && uses[st->node] == 1 &&
                (p->bufs[sb].kind == SCH_BUF_STATE || p->bufs[sb].kind == SCH_BUF_NODE)) {
                p->node_buf[i] = sb; /* in place */
                continue;
            }
        }
        p->node_buf[i] = add_buf(p, SCH_BUF_NODE, m->dtype, numel, i);
    }
    /* outputs that can be written straight into their result buffers */
    int32_t *out_direct = kiln_xcalloc((size_t)g->noutputs + 1, sizeof *out_direct);
    for (int32_t o = 0; o < g->noutputs; o++) {
        const tensor *T = graph_tensor(g, g->outputs[o].tensor);
        int32_t b = p->node_buf[T->node];
        if (b < 0 || p->bufs[b].kind != SCH_BUF_NODE || p->bufs[b].node != T->node) continue;
        if (!reads_whole(g, g->outputs[o].tensor)) continue;
        p->bufs[b].kind = SCH_BUF_RESULT;
        p->bufs[b].output = o;
        out_direct[o] = 1;
    }

    /* kernels, in node order */
    kiln_status kst = KILN_OK;
    for (int32_t i = 0; i < nn && kst == KILN_OK; i++) {
        if (!needed[i] || !mat[i]) continue;
        const node *m = &g->nodes[i];
        int32_t ob = p->node_buf[i];
        if (m->op == OP_INPUT) continue;
        if (m->op == OP_SOFTMAX_CONTRACT) {
            kst = sch_stream_kernel(p, i, ob, err, errcap);
            continue;
        }
        if (m->op == OP_SUM || m->op == OP_MAX) {
            int kidx = p->nkernels;
            sch_kernel *k = add_kernel(p, SCH_K_REDUCE, i, ob);
            set_domain(p, k, m->ndim, m->shape);
            const view *V = graph_tensor_view(g, m->src[0]);
            k->red_op = m->op;
            k->rdim = view_shape(V)[m->axis];
            k->rvar = sch_new_var(p, SCH_VAR_REDUCE, 0, k->rdim);
            sym_id c[KILN_MAX_DIMS];
            for (int d = 0, j = 0; d < view_ndim(V); d++) c[d] = d == m->axis ? k->rvar : k->var[j++];
            int32_t e = lx_tensor(p, &p->kernels[kidx], m->src[0], c);
            p->kernels[kidx].expr = e;
            continue;
        }
        if (m->op == OP_SCATTER) {
            const tensor *st = graph_tensor(g, m->src[0]);
            if (p->node_buf[st->node] != ob || p->node_buf[st->node] < 0) {
                int kidx = p->nkernels;
                sch_kernel *k = add_kernel(p, SCH_K_MAP, i, ob);
                set_domain(p, k, m->ndim, m->shape);
                sym_id vars[KILN_MAX_DIMS];
                memcpy(vars, k->var, sizeof vars);
                int32_t e = lx_tensor(p, &p->kernels[kidx], m->src[0], vars);
                p->kernels[kidx].expr = e;
            }
            int kidx = p->nkernels;
            sch_kernel *k = add_kernel(p, SCH_K_SCATTER, i, ob);
            const view *VV = graph_tensor_view(g, m->src[2]);
            k->ndim = view_ndim(VV);
            for (int d = 0; d < k->ndim; d++) {
                k->dim[d] = view_shape(VV)[d];
                k->var[d] = sch_new_var(p, SCH_VAR_LOOP, d, k->dim[d]);
            }
            sym_id vars[KILN_MAX_DIMS];
            memcpy(vars, k->var, sizeof vars);
            int32_t iv = lx_tensor(p, &p->kernels[kidx], m->src[1], vars);
            int let_no = p->nlets++;
            sym_id row = sch_new_var(p, SCH_VAR_LET, let_no, m->shape[0]);
            int32_t body = lx_tensor(p, &p->kernels[kidx], m->src[2], vars);
            int32_t e = lx_new(p, LX_LET, m->dtype);
            p->lx[e].a = iv;
            p->lx[e].b = body;
            p->lx[e].s = row;
            p->lx[e].s2 = m->shape[0];
            k = &p->kernels[kidx];
            k->expr = e;
            sym_id c[KILN_MAX_DIMS];
            c[0] = row;
            for (int d = 1; d < m->ndim; d++) c[d] = vars[d];
            k->store_off = sch_rowmajor(sp, m->ndim, m->shape, c);
            continue;
        }
        if (kiln_dtype_is_block(m->dtype)) {
            add_quantize(p, i, ob, m->op == OP_CAST ? 1 : 0, KILN_NONE);
            continue;
        }
        int kidx = p->nkernels;
        sch_kernel *k = add_kernel(p, SCH_K_MAP, i, ob);
        set_domain(p, k, m->ndim, m->shape);
        sym_id vars[KILN_MAX_DIMS];
        memcpy(vars, k->var, sizeof vars);
        int32_t e = lx_node(p, &p->kernels[kidx], i, vars);
        p->kernels[kidx].expr = e;
    }

    /* output copies */
    for (int32_t o = 0; o < g->noutputs && kst == KILN_OK; o++) {
        if (out_direct[o]) continue;
        kiln_tensor t = g->outputs[o].tensor;
        const tensor *T = graph_tensor(g, t);
        const view *V = &g->views[T->view];
        const node *m = graph_node(g, T->node);
        sym_id numel = numel_of(sp, view_ndim(V), view_shape(V));
        int32_t rb = add_buf(p, SCH_BUF_RESULT, m->dtype, numel, T->node);
        p->bufs[rb].output = o;
        if (kiln_dtype_is_block(m->dtype)) {
            int32_t nb = p->node_buf[T->node];
            if (nb >= 0 && reads_whole(g, t)) {
                sch_kernel *k = add_kernel(p, SCH_K_COPY, -1, rb);
                k->src_buf = nb;
            } else {
                add_quantize(p, T->node, rb, 2, t);
            }
            continue;
        }
        int kidx = p->nkernels;
        sch_kernel *k = add_kernel(p, SCH_K_MAP, -1, rb);
        set_domain(p, k, view_ndim(V), view_shape(V));
        sym_id vars[KILN_MAX_DIMS];
        memcpy(vars, k->var, sizeof vars);
        int32_t e = lx_tensor(p, &p->kernels[kidx], t, vars);
        p->kernels[kidx].expr = e;
    }

    /* state write-back */
    for (int32_t s = 0; s < nn; s++) {
        int32_t f = p->state_final[s];
        if (f < 0 || p->node_buf[s] < 0) continue;
        if (p->node_buf[f] == p->node_buf[s]) continue;
        sch_kernel *k = add_kernel(p, SCH_K_COPY, -1, p->node_buf[s]);
        k->src_buf = p->node_buf[f];
    }

    free(out_direct);
    free(needed);
    free(uses);
    free(mat);
    free(chain_state);
    return kst;
}

/* 1 when sym s only uses kernel k's loop variables among the program's own
 * variables (graph size variables are fine); *last set when it uses k's
 * last loop variable */
static int coord_ok(const sch_program *p, const sch_kernel *k, sym_id s, int *last) {
    const sym_node *n = sym_get(p->g->syms, s);
    switch (n->kind) {
    case SYM_CONST: return 1;
    case SYM_VAR: {
        const sch_var *v = sch_var_lookup(p, (uint32_t)n->c);
        if (!v) return 1;
        for (int d = 0; d < k->ndim; d++) {
            if (k->var[d] != s) continue;
            if (d == k->ndim - 1) *last = 1;
            return 1;
        }
        return 0;
    }
    default: return coord_ok(p, k, n->a, last) && coord_ok(p, k, n->b, last);
    }
}

/* classify every stage as per row or per element; mark in force[] each
 * reduction whose stage would be evaluated more often than the reduction has
 * elements, at coordinates the kernel cannot hoist it to, or that is only
 * read under a guard (its coordinates might be out of range). Returns the
 * number of newly forced nodes. */
static int check_stages(sch_program *p, uint8_t *force) {
    sym_pool *sp = p->g->syms;
    int nbad = 0;
    for (int32_t ki = 0; ki < p->nkernels; ki++) {
        sch_kernel *k = &p->kernels[ki];
        /* from the last stage back, and only the last failing one per
         * kernel per round: an outer reduction that cannot fuse (attention's
         * product with V inside the output projection's kernel) makes the
         * stages it contains fail too (softmax's max and sum, evaluated at
         * its coordinates); once it has its own kernel they may fuse there */
        for (int32_t i = k->nstages - 1; i >= 0; i--) {
            sch_stage *st = &k->stages[i];
            const node *m = graph_node(p->g, st->node);
            int ok = !st->guarded, last = 0;
            for (int d = 0; d < st->ncoord && ok; d++) ok = coord_ok(p, k, st->coord[d], &last);
            if (ok) {
                st->row = k->ndim > 0 && !last;
                int upto = st->row ? k->ndim - 1 : k->ndim;
                sym_id evals = numel_of(sp, upto, k->dim);
                ok = evals == numel_of(sp, m->ndim, m->shape);
            }
            if (!ok && !force[st->node]) {
                force[st->node] = 1;
                nbad++;
                break;
            }
        }
    }
    return nbad;
}

kiln_status sch_kernelize(kiln_graph *g, sch_program *p, char *err, size_t errcap) {
    return sch_kernelize_ex(g, p, NULL, err, errcap);
}

kiln_status sch_kernelize_ex(kiln_graph *g, sch_program *p, const sch_options *opt, char *err, size_t errcap) {
    static const sch_options normal = {0, 0, 0, 0, 0, 0};
    const sch_options *o = opt ? opt : &normal;
    uint8_t *force = kiln_xcalloc((size_t)g->nnodes + 1, 1);
    /* no_fuse keeps every reduction in a kernel of its own (to compare) */
    if (o->no_fuse)
        for (int32_t i = 0; i < g->nnodes; i++) force[i] = g->nodes[i].op == OP_SUM || g->nodes[i].op == OP_MAX;
    kiln_status s;
    for (;;) {
        s = build(g, p, force, err, errcap);
        if (s != KILN_OK) break;
        p->no_stream_tile = o->no_stream_tile;
        p->stream_bf16 = o->stream_bf16;
        /* contractions first: giving a contraction's operand its own
         * kernel (attention's probabilities) moves the reductions it holds
         * (softmax's max and sum) there as stages, where they fit */
        if (sch_stream_analyse(p, force) == 0 && (o->no_contract || sch_contract_analyse(p, force) == 0) &&
            check_stages(p, force) == 0)
            break;
        sch_program_free(p);
    }
    free(force);
    if (s == KILN_OK) {
        if (!o->no_split) sch_split_guards(p);
        for (int32_t k = 0; k < p->nkernels; k++) sch_coalesce_generic(p, k); /* rows of whole images (pack.c) */
        for (int32_t k = 0; k < p->nkernels; k++) p->kernels[k].disjoint = sch_scatter_disjoint(p, &p->kernels[k]);
        if (!o->no_epilogue) sch_mark_epilogues(p); /* after coalescing: the domains compared are final */
    }
    return s;
}

void sch_program_free(sch_program *p) {
    if (!p) return;
    for (int32_t i = 0; i < p->nkernels; i++) {
        free(p->kernels[i].fused);
        free(p->kernels[i].stages);
        free(p->kernels[i].contract);
    }
    free(p->kernels);
    free(p->bufs);
    free(p->lx);
    free(p->vars);
    free(p->node_buf);
    free(p->state_final);
    memset(p, 0, sizeof *p);
}
