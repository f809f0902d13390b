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

static sym_id tr(tctx *c, sym_id s) {
    if (s == SYM_NONE) return SYM_NONE;
    if (c->smap[s] != SYM_NONE) return c->smap[s];
    const sym_node *n = sym_get(c->ek->syms, s);
    sym_pool *p = c->ng->syms;
    sym_id a = n->a != SYM_NONE ? tr(c, n->a) : SYM_NONE, b = n->b != SYM_NONE ? tr(c, n->b) : SYM_NONE, r;
    switch (n->kind) {
    case SYM_CONST: r = sym_const(p, n->c); break;
    case SYM_VAR: {
        int64_t lo, hi;
        sym_bounds(c->ek->syms, s, &lo, &hi);
        r = sym_var(p, sym_var_name(c->ek->syms, (uint32_t)n->c), lo, hi);
        break;
    }
    default: r = sym_build(p, n->kind, a, b); break;
    }
    return c->smap[s] = r;
}

static void tr_view(tctx *c, view *out, const view *v) {
    memset(out, 0, sizeof *out);
    out->nlayers = v->nlayers;
    for (int l = 0; l < v->nlayers; l++) {
        const view_layer *a = &v->layer[l];
        view_layer *b = &out->layer[l];
        b->ndim = a->ndim;
        b->offset = tr(c, a->offset);
        b->masked = a->masked;
        for (int d = 0; d < a->ndim; d++) {
            b->shape[d] = tr(c, a->shape[d]);
            b->stride[d] = tr(c, a->stride[d]);
            b->mask_lo[d] = a->masked ? tr(c, a->mask_lo[d]) : sym_const(c->ng->syms, 0);
            b->mask_hi[d] = a->masked ? tr(c, a->mask_hi[d]) : b->shape[d];
        }
    }
}

/* a tensor of graph g on node `node_id` read through view v */
static kiln_tensor tensor_with_view(kiln_graph *g, int32_t node_id, const view *v) {
    KILN_GROW(g->views, g->cap_views, g->nviews + 1);
    g->views[g->nviews] = *v;
    KILN_GROW(g->tensors, g->cap_tensors, g->ntensors + 1);
    g->tensors[g->ntensors].node = node_id;
    g->tensors[g->ntensors].view = g->nviews++;
    return g->ntensors++;
}

static int dense(const kiln_graph *g, kiln_tensor t) {
    const view *v = &g->views[g->tensors[t].view];
    const node *n = &g->nodes[g->tensors[t].node];
    if (!view_is_identity(v, g->syms) || view_ndim(v) != n->ndim) return 0;
    for (int i = 0; i < n->ndim; i++)
        if (view_shape(v)[i] != n->shape[i]) return 0;
    return 1;
}

static kiln_tensor apply_view(tctx *c, kiln_tensor x, const view *vsrc) {
    kiln_graph *g = c->ng;
    if (x == KILN_NONE) return KILN_NONE;
    view v;
    tr_view(c, &v, vsrc);
    if (dense(g, x)) return tensor_with_view(g, g->tensors[x].node, &v);
    const view *b = &g->views[g->tensors[x].view];
    if (b->nlayers + v.nlayers > VIEW_MAX_LAYERS) {
        x = kiln_contiguous(g, x);
        if (x == KILN_NONE) return KILN_NONE;
        return tensor_with_view(g, g->tensors[x].node, &v);
    }
    view s = *b;
    for (int l = 0; l < v.nlayers; l++) s.layer[s.nlayers++] = v.layer[l];
    return tensor_with_view(g, g->tensors[x].node, &s);
}

static kiln_tensor build_term(tctx *c, const eg_node *n, const kiln_tensor *k) {
    kiln_graph *g = c->ng;
    const eg_kiln *ek = c->ek;
    for (int i = 0; i < n->nkids; i++)
        if (k[i] == KILN_NONE) return KILN_NONE;
    if (n->op == EG_OP_VIEW) return apply_view(c, k[0], &ek->views[n->arg]);
    switch ((op_kind)n->op) {
    case OP_INPUT: {
        const ek_input *in = &ek->inputs[n->arg];
        kiln_sym dims[KILN_MAX_DIMS];
        for (int i = 0; i < in->ndim; i++) dims[i] = (kiln_sym)tr(c, in->shape[i]);
        kiln_tensor t = kiln_input_dims(g, in->name, in->dtype, in->ndim, dims);
        if (t != KILN_NONE && in->is_state) g->nodes[g->tensors[t].node].is_state = 1;
        return t;
    }
    case OP_CONST: return kiln_const(g, ek_bitsd(n->arg), (kiln_dtype)n->dtype);
    case OP_IOTA: {
        const view *v = &ek->views[n->arg2];
        kiln_sym dims[KILN_MAX_DIMS];
        for (int i = 0; i < view_ndim(v); i++) dims[i] = (kiln_sym)tr(c, view_shape(v)[i]);
        return kiln_iota(g, (kiln_dtype)n->dtype, view_ndim(v), dims, (int)n->arg);
    }
    OP_UNARY_CASES return graph_unary(g, (op_kind)n->op, k[0]);
    case OP_ADD: return kiln_add(g, k[0], k[1]);
    case OP_MUL: return kiln_mul(g, k[0], k[1]);
    case OP_MOD: return kiln_mod(g, k[0], k[1]);
    case OP_LT: return kiln_lt(g, k[0], k[1]);
    case OP_SUM: return kiln_sum(g, k[0], (int)n->arg);
    case OP_MAX: return kiln_max(g, k[0], (int)n->arg);
    case OP_GATHER: return kiln_gather(g, k[0], k[1]);
    case OP_SCATTER: return kiln_scatter(g, k[0], k[1], k[2]);
    case OP_CAST: return kiln_cast(g, k[0], (kiln_dtype)n->dtype);
    case OP_CONTIGUOUS: return kiln_contiguous(g, k[0]);
    case OP_CONTRACT:
    case OP_SOFTMAX_ONLINE: case OP_SOFTMAX_CONTRACT: return compound_build(g, (op_kind)n->op, k, (int)n->arg);
    }
    return KILN_NONE; /* not an op of the e-graph */
}

kiln_graph *ek_to_graph(const eg_kiln *ek, const eg_terms *ts, char *err, size_t cap) {
    tctx c;
    c.ek = ek;
    c.ng = kiln_graph_new();
    uint32_t ns = sym_count(ek->syms);
    c.smap = kiln_xmalloc(sizeof(sym_id) * (ns ? ns : 1));
    for (uint32_t i = 0; i < ns; i++) c.smap[i] = SYM_NONE;
    /* declare variables in their original order, so the new graph numbers them alike */
    for (uint32_t v = 0; v < sym_var_count(ek->syms); v++) tr(&c, sym_var_node(ek->syms, v));
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
