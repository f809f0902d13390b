/* convert.c — between a kiln_graph and kiln's e-graph.
 *
 * Into the e-graph: each graph node becomes an e-node whose kids are the
 * classes of its operand tensors; a tensor read through a non-identity view
 * is the class of VIEW[view](node). Roots are the outputs plus every SCATTER
 * into a state tensor (its write-back is an effect the interpreter keeps even
 * when no output reads it; such roots have no name).
 *
 * Out of the e-graph: a term DAG (from extraction) is rebuilt through the
 * public builder, so the new graph is checked like any user-built one. Its sym
 * pool is new: expressions are translated by structure (variables by name and
 * range). A VIEW term becomes a tensor on the same node with the view's layers
 * stacked on top of the operand's own (stacking is composition: the upper
 * view's layer-0 index unravels into the lower view's outer shape); when the
 * stack would be too deep the operand is made CONTIGUOUS first. Compound
 * e-nodes (CONTRACT, SOFTMAX_ONLINE) become compound graph nodes
 * (compound_build): the kernel layer sees them, the interpreter evaluates
 * their definitions.
 */
#include <string.h>

#include "base.h"
#include "rewrite.h"


static void add_root(eg_kiln *ek, eg_id c, const char *name) {
    KILN_GROW(ek->roots, ek->cap_roots, ek->nroots + 1);
    ek->root_names = kiln_xrealloc(ek->root_names, sizeof(char *) * ek->cap_roots);
    ek->roots[ek->nroots] = c;
    ek->root_names[ek->nroots] = name ? kiln_xstrdup(name) : NULL;
    ek->nroots++;
}

static int is_state_scatter(const kiln_graph *g, int32_t id) {
    if (g->nodes[id].op != OP_SCATTER) return 0;
    while (g->nodes[id].op == OP_SCATTER) id = g->tensors[g->nodes[id].src[0]].node;
    return g->nodes[id].op == OP_INPUT && g->nodes[id].is_state;
}

eg_kiln *ek_from_graph(const kiln_graph *g, char *err, size_t cap) {
    if (!g || g->build_failed) {
        snprintf(err, cap, "graph has a build error: %s", g ? g->error : "no graph");
        return NULL;
    }
    eg_kiln *ek = ek_new(g->syms);
    eg_id *ncls = kiln_xmalloc(sizeof(eg_id) * (size_t)(g->nnodes + 1));
    for (int32_t i = 0; i < g->nnodes; i++) {
        const node *n = &g->nodes[i];
        int arity = op_table[n->op].arity;
        eg_id kids[EG_MAX_KIDS];
        for (int k = 0; k < arity; k++) {
            const tensor *t = &g->tensors[n->src[k]];
            kids[k] = ek_view(ek, ncls[t->node], &g->views[t->view]);
        }
        int64_t arg = 0;
        int32_t arg2 = 0;
        /* the payload: an input's interned name, a constant's bits, the
         * axis of the ops that have one (OPF_AXIS), an iota's shape */
        if (n->op == OP_INPUT) {
            arg = ek_intern_input(ek, n->name, n->dtype, n->ndim, n->shape, n->is_state);
        } else if (n->op == OP_CONST) {
            arg = ek_dbits(n->value);
        } else if (op_table[n->op].flags & OPF_AXIS) {
            arg = n->axis;
            if (n->op == OP_IOTA) {
                view v;
                view_identity(&v, g->syms, n->ndim, n->shape);
                arg2 = (int32_t)ek_intern_view(ek, &v);
            }
        }
        eg_node e = eg_mk((uint16_t)n->op, (uint8_t)n->dtype, arg, arg2, arity, kids);
        ncls[i] = eg_add(ek->eg, &e);
    }
    for (int32_t i = 0; i < g->noutputs; i++) {
        const tensor *t = &g->tensors[g->outputs[i].tensor];
        add_root(ek, ek_view(ek, ncls[t->node], &g->views[t->view]), g->outputs[i].name);
    }
    for (int32_t i = 0; i < g->nnodes; i++)
        if (is_state_scatter(g, i)) add_root(ek, ncls[i], NULL);
    /* shared values: nodes with two or more consumers (leaves are cheap anyway) */
    uint32_t *uses = kiln_xcalloc((size_t)g->nnodes + 1, sizeof *uses);
    for (int32_t i = 0; i < g->nnodes; i++)
        for (int k = 0; k < op_table[g->nodes[i].op].arity; k++) uses[g->tensors[g->nodes[i].src[k]].node]++;
    for (int32_t i = 0; i < g->noutputs; i++) uses[g->tensors[g->outputs[i].tensor].node]++;
    ek->shared = kiln_xmalloc(sizeof(eg_id) * (size_t)(g->nnodes + 1));
    ek->shared_uses = kiln_xmalloc(sizeof(uint32_t) * (size_t)(g->nnodes + 1));
    for (int32_t i = 0; i < g->nnodes; i++) {
        op_kind op = g->nodes[i].op;
        if (uses[i] < 2 || op == OP_INPUT || op == OP_CONST) continue;
        ek->shared[ek->nshared] = ncls[i];
        ek->shared_uses[ek->nshared++] = uses[i];
    }
    free(uses);
    free(ncls);
    eg_rebuild(ek->eg);
    for (uint32_t r = 0; r < ek->nroots; r++) ek->roots[r] = eg_find(ek->eg, ek->roots[r]);
    return ek;
}

/* ---- back to a graph ----------------------------------------------------------- */

typedef struct tctx {
    const eg_kiln *ek;
    kiln_graph *ng;
    sym_id *smap; /* source sym id -> new pool's id */
} tctx;

static sym_id tr(tctx *c, sym_id s) { return sym_transfer(c->ek->syms, s, c->ng->syms, c->smap); }

static kiln_tensor build_term(tctx *c, const eg_node *n, const kiln_tensor *k) {
    kiln_graph *g = c->ng;
    const eg_kiln *ek = c->ek;
    for (int i = 0; i < n->nkids; i++)
        if (k[i] == KILN_NONE) return KILN_NONE;
    if (n->op == EG_OP_VIEW) {
        view v;
        view_transfer(&v, &ek->views[n->arg], ek->syms, g->syms, c->smap);
        return graph_view_onto(g, k[0], &v);
    }
    op_kind op = (op_kind)n->op;
    if (op == OP_INPUT) {
        const ek_input *in = &ek->inputs[n->arg];
        kiln_sym dims[KILN_MAX_DIMS];
        for (int i = 0; i < in->ndim; i++) dims[i] = (kiln_sym)tr(c, in->shape[i]);
        kiln_tensor t = kiln_input_dims(g, in->name, in->dtype, in->ndim, dims);
        if (t != KILN_NONE && in->is_state) g->nodes[g->tensors[t].node].is_state = 1;
        return t;
    }
    sym_id dims[KILN_MAX_DIMS];
    int ndim = 0;
    if (op == OP_IOTA) {
        const view *v = &ek->views[n->arg2];
        ndim = view_ndim(v);
        for (int i = 0; i < ndim; i++) dims[i] = tr(c, view_shape(v)[i]);
    }
    if ((int)n->op >= OP_COUNT) return KILN_NONE; /* not an op of the e-graph */
    return graph_rebuild_op(g, op, (kiln_dtype)n->dtype, (int)n->arg, op == OP_CONST ? ek_bitsd(n->arg) : 0, ndim, dims, k);
}

kiln_graph *ek_to_graph(const eg_kiln *ek, const eg_terms *ts, char *err, size_t cap) {
    tctx c;
    c.ek = ek;
    c.ng = kiln_graph_new();
    /* variables declared in their original order, so the new graph numbers them alike */
    c.smap = sym_transfer_begin(ek->syms, c.ng->syms);
    kiln_tensor *tt = kiln_xmalloc(sizeof(kiln_tensor) * (ts->n ? ts->n : 1));
    /* terms are stored kids first */
    for (uint32_t i = 0; i < ts->n; i++) {
        const eg_node *n = &ek->eg->nodes[ts->t[i].node];
        kiln_tensor k[EG_MAX_KIDS];
        for (int j = 0; j < n->nkids; j++) {
            KILN_ASSERT(ts->t[i].kids[j] < i);
            k[j] = tt[ts->t[i].kids[j]];
        }
        tt[i] = build_term(&c, n, k);
    }
    for (uint32_t r = 0; r < ek->nroots; r++)
        if (ek->root_names[r]) kiln_output(c.ng, tt[ts->roots[r]], ek->root_names[r]);
    free(tt);
    free(c.smap);
    if (kiln_graph_status(c.ng) != KILN_OK) {
        snprintf(err, cap, "rebuilding the extracted graph: %s", kiln_graph_error(c.ng));
        kiln_graph_free(c.ng);
        return NULL;
    }
    return c.ng;
}
