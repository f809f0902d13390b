/* cutjoin.c — the compile step's rewrite, block by block.
 *
 * A model is a stack of layers that are one graph but for their weights'
 * names. Saturated as one e-graph, the whole model costs rewrite time in
 * proportion to its depth and, under the rewrite's limits, stops at the time
 * limit, so what is extracted would depend on the machine's load (and a new
 * extraction means a new program to compile). eg_optimize_blocks cuts the
 * graph at the marks its builder set (kiln_graph_mark_block), hands each
 * block to a block cache (blocks.c: one saturation per distinct block, the
 * extraction reused for its identical siblings) and joins the extracted
 * blocks into one graph.
 *
 * The cut: block s holds the nodes built from its mark up to the next. An
 * operand made by an earlier block becomes an input of the block named
 * "kiln.cut.K" (K its position; the block signature drops digits, so
 * identical layers still hash alike), with two exceptions: an input of g (a
 * weight, a state, the tokens) is declared under its own name in every block
 * that reads it, and a value computed from constants and index ranges alone
 * (rope angles, masks) is copied into the block, where the rules can see and
 * fold it. A block's outputs ("kiln.out.J") are its values that a later
 * block or an output of g reads.
 *
 * The join: each block's extracted graph is copied into the result node by
 * node, its cut inputs replaced by what the earlier blocks produced, its
 * named inputs declared once. A value copied into several blocks is computed
 * in each (the kernel layer fuses it into its consumers).
 *
 * Invariants: the result has g's outputs, in g's order and with g's names;
 * every SCATTER into a state survives (each block's e-graph keeps them as
 * roots); blocks are joined in order and copied in their node order, so the
 * result is topologically ordered. Rewrites never cross a cut.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "rewrite.h"

#define CUT_PREFIX "kiln.cut."
#define OUT_PREFIX "kiln.out."

/* g's input declared in dst under `name`, with n's dtype, shape and state flag */
static kiln_tensor declare_input(kiln_graph *dst, const char *name, const node *n, const kiln_graph *src,
                                 sym_id *memo) {
    kiln_sym dims[KILN_MAX_DIMS];
    for (int i = 0; i < n->ndim; i++) dims[i] = (kiln_sym)sym_transfer(src->syms, n->shape[i], dst->syms, memo);
    kiln_tensor t = kiln_input_dims(dst, name, n->dtype, n->ndim, dims);
    if (t != KILN_NONE && n->is_state) dst->nodes[dst->tensors[t].node].is_state = 1;
    return t;
}

/* node n of src made again in dst on operand tensors k (dst's) */
static kiln_tensor rebuild(kiln_graph *dst, const node *n, const kiln_graph *src, sym_id *memo,
                           const kiln_tensor *k) {
    sym_id dims[KILN_MAX_DIMS];
    for (int i = 0; n->op == OP_IOTA && i < n->ndim; i++) dims[i] = sym_transfer(src->syms, n->shape[i], dst->syms, memo);
    return graph_rebuild_op(dst, n->op, n->dtype, n->axis, n->value, n->ndim, dims, k);
}

/* ---- the cut ---------------------------------------------------------------------- */

typedef struct cutter {
    const kiln_graph *g;
    const int32_t *seg;    /* per node of g: its block */
    const uint8_t *closed; /* per node of g: computed from constants and index ranges alone */
    int32_t s;             /* the block being cut */
    kiln_graph *bg;        /* its graph */
    sym_id *memo;          /* g's syms -> bg's */
    kiln_tensor *in_block; /* per node of g: its value in bg (KILN_NONE: not there yet) */
    int32_t *touched, ntouched;
    int32_t *cut, ncut;    /* the nodes of g behind bg's inputs kiln.cut.0, .1, ... */
} cutter;

static kiln_tensor block_value(cutter *c, int32_t e);

static kiln_tensor block_operand(cutter *c, int32_t t) {
    const tensor *tt = &c->g->tensors[t];
    kiln_tensor base = block_value(c, tt->node);
    view v;
    view_transfer(&v, &c->g->views[tt->view], c->g->syms, c->bg->syms, c->memo);
    return graph_view_onto(c->bg, base, &v);
}

static kiln_tensor block_value(cutter *c, int32_t e) {
    if (c->in_block[e] != KILN_NONE) return c->in_block[e];
    const node *n = &c->g->nodes[e];
    kiln_tensor t;
    if (n->op == OP_INPUT) {
        t = declare_input(c->bg, n->name, n, c->g, c->memo);
    } else if (c->seg[e] == c->s || c->closed[e]) {
        kiln_tensor k[3] = {KILN_NONE, KILN_NONE, KILN_NONE};
        for (int i = 0; i < op_table[n->op].arity; i++) k[i] = block_operand(c, n->src[i]);
        t = rebuild(c->bg, n, c->g, c->memo, k);
    } else {
        char name[32];
        snprintf(name, sizeof name, CUT_PREFIX "%d", (int)c->ncut);
        t = declare_input(c->bg, name, n, c->g, c->memo);
        c->cut[c->ncut++] = e;
    }
    c->in_block[e] = t;
    c->touched[c->ntouched++] = e;
    return t;
}

/* ---- the join --------------------------------------------------------------------- */

typedef struct joiner {
    const kiln_graph *g;
    kiln_graph *og;   /* the result */
    sym_id *gmemo;    /* g's syms -> og's */
    kiln_tensor *val; /* per node of g: its value in og (KILN_NONE: none yet) */
    char **in_names;  /* og's inputs so far, and their tensors */
    kiln_tensor *in_tensors;
    int32_t nin, cap_in;
} joiner;

/* og's input `name` (n's dtype and shape, src's syms), declared at its first use */
static kiln_tensor og_input(joiner *j, const char *name, const node *n, const kiln_graph *src, sym_id *memo) {
    for (int32_t i = 0; i < j->nin; i++)
        if (strcmp(j->in_names[i], name) == 0) return j->in_tensors[i];
    kiln_tensor t = declare_input(j->og, name, n, src, memo);
    if (j->nin == j->cap_in) {
        j->cap_in = j->cap_in ? 2 * j->cap_in : 64;
        j->in_names = kiln_xrealloc(j->in_names, sizeof *j->in_names * (size_t)j->cap_in);
        j->in_tensors = kiln_xrealloc(j->in_tensors, sizeof *j->in_tensors * (size_t)j->cap_in);
    }
    j->in_names[j->nin] = kiln_xstrdup(name);
    j->in_tensors[j->nin++] = t;
    return t;
}

/* block ng (its inputs kiln.cut.K standing for g's nodes cut[K], its outputs
 * kiln.out.J for g's nodes outs[J]) copied into og */
static int join_block(joiner *j, const kiln_graph *ng, const int32_t *cut, int32_t ncut, const int32_t *outs,
                      int32_t nouts, char *err, size_t cap) {
    kiln_graph *og = j->og;
    sym_id *memo = sym_transfer_begin(ng->syms, og->syms);
    kiln_tensor *nv = kiln_xmalloc(sizeof *nv * (size_t)(ng->nnodes + 1));
    int ok = 1;
    for (int32_t i = 0; ok && i < ng->nnodes; i++) {
        const node *n = &ng->nodes[i];
        if (n->op == OP_INPUT && strncmp(n->name, CUT_PREFIX, strlen(CUT_PREFIX)) == 0) {
            int k = atoi(n->name + strlen(CUT_PREFIX));
            ok = k >= 0 && k < ncut && j->val[cut[k]] != KILN_NONE;
            if (!ok) snprintf(err, cap, "joining blocks: %s names no value of an earlier block", n->name);
            else nv[i] = j->val[cut[k]];
            continue;
        }
        if (n->op == OP_INPUT) {
            nv[i] = og_input(j, n->name, n, ng, memo);
            continue;
        }
        kiln_tensor k[3] = {KILN_NONE, KILN_NONE, KILN_NONE};
        for (int a = 0; a < op_table[n->op].arity; a++) {
            const tensor *t = &ng->tensors[n->src[a]];
            view v;
            view_transfer(&v, &ng->views[t->view], ng->syms, og->syms, memo);
            k[a] = graph_view_onto(og, nv[t->node], &v);
        }
        nv[i] = rebuild(og, n, ng, memo, k);
    }
    for (int32_t o = 0; ok && o < ng->noutputs; o++) {
        const char *name = ng->outputs[o].name;
        int jn = strncmp(name, OUT_PREFIX, strlen(OUT_PREFIX)) == 0 ? atoi(name + strlen(OUT_PREFIX)) : -1;
        ok = jn >= 0 && jn < nouts;
        if (!ok) {
            snprintf(err, cap, "joining blocks: a block's output %s is not one it was given", name);
            break;
        }
        const tensor *t = &ng->tensors[ng->outputs[o].tensor];
        view v;
        view_transfer(&v, &ng->views[t->view], ng->syms, og->syms, memo);
        j->val[outs[jn]] = graph_view_onto(og, nv[t->node], &v);
    }
    free(nv);
    free(memo);
    if (ok && kiln_graph_status(og) != KILN_OK) {
        snprintf(err, cap, "joining blocks: %s", kiln_graph_error(og));
        ok = 0;
    }
    return ok;
}

/* ---- the step --------------------------------------------------------------------- */

/* block starts: 0, then the marks inside (0, nnodes), ascending; returns how many */
static int32_t block_starts(const kiln_graph *g, int32_t *starts) {
    int32_t n = 0;
    starts[n++] = 0;
    for (int32_t i = 0; i < g->nblock_marks; i++) {
        int32_t m = g->block_marks[i];
        if (m > starts[n - 1] && m < g->nnodes) starts[n++] = m;
    }
    return n;
}

typedef struct split_plan {
    int32_t *starts, nblocks; /* block b: nodes [starts[b], starts[b + 1] or nnodes) */
    int32_t *seg;             /* per node: its block */
    uint8_t *closed;          /* per node: no input in its cone */
    int32_t *last_use;        /* per node: the last block that reads it */
    uint8_t *is_out;          /* per node: an output of g reads it */
} split_plan;

static void plan_split(const kiln_graph *g, split_plan *p) {
    int32_t nn = g->nnodes;
    p->starts = kiln_xmalloc(sizeof *p->starts * (size_t)(g->nblock_marks + 2));
    p->nblocks = block_starts(g, p->starts);
    p->seg = kiln_xmalloc(sizeof *p->seg * (size_t)(nn + 1));
    p->closed = kiln_xcalloc((size_t)nn + 1, 1);
    p->last_use = kiln_xmalloc(sizeof *p->last_use * (size_t)(nn + 1));
    p->is_out = kiln_xcalloc((size_t)nn + 1, 1);
    for (int32_t b = 0, i = 0; i < nn; i++) {
        while (b + 1 < p->nblocks && i >= p->starts[b + 1]) b++;
        p->seg[i] = b;
        p->last_use[i] = b;
        const node *n = &g->nodes[i];
        int closed = n->op != OP_INPUT;
        for (int k = 0; k < op_table[n->op].arity; k++) {
            int32_t src = g->tensors[n->src[k]].node;
            closed = closed && p->closed[src];
            if (p->last_use[src] < b) p->last_use[src] = b;
        }
        p->closed[i] = (uint8_t)closed;
    }
    for (int32_t o = 0; o < g->noutputs; o++) p->is_out[g->tensors[g->outputs[o].tensor].node] = 1;
}

static void free_plan(split_plan *p) {
    free(p->starts);
    free(p->seg);
    free(p->closed);
    free(p->last_use);
    free(p->is_out);
}

/* block b of g cut into its own graph and given to the cache; its result
 * joined into j's graph. 0 (and err) on failure */
static int one_block(joiner *j, const split_plan *p, cutter *c, eg_block_cache *bc, int32_t b, char *err,
                     size_t cap) {
    const kiln_graph *g = j->g;
    int32_t lo = p->starts[b], hi = b + 1 < p->nblocks ? p->starts[b + 1] : g->nnodes;
    c->s = b;
    c->bg = kiln_graph_new();
    c->memo = sym_transfer_begin(g->syms, c->bg->syms);
    c->ntouched = c->ncut = 0;
    for (int32_t i = lo; i < hi; i++) block_value(c, i);
    int32_t *outs = kiln_xmalloc(sizeof *outs * (size_t)(hi - lo + 1)), nouts = 0;
    for (int32_t i = lo; i < hi; i++) {
        if (g->nodes[i].op == OP_INPUT || !(p->is_out[i] || (p->last_use[i] > b && !p->closed[i]))) continue;
        char name[32];
        snprintf(name, sizeof name, OUT_PREFIX "%d", (int)nouts);
        kiln_output(c->bg, c->in_block[i], name);
        outs[nouts++] = i;
    }
    for (int32_t t = 0; t < c->ntouched; t++) c->in_block[c->touched[t]] = KILN_NONE;
    free(c->memo);
    int ok = 1;
    kiln_graph *ng = NULL;
    if (kiln_graph_status(c->bg) != KILN_OK) {
        snprintf(err, cap, "cutting block %d: %s", (int)b, kiln_graph_error(c->bg));
        kiln_graph_free(c->bg);
        ok = 0;
    } else {
        int hit = 0;
        ng = eg_block_cache_optimize(bc, c->bg, &hit, NULL, err, cap); /* takes bg */
        ok = ng != NULL;
    }
    if (ok) ok = join_block(j, ng, c->cut, c->ncut, outs, nouts, err, cap);
    kiln_graph_free(ng);
    free(outs);
    return ok;
}

kiln_graph *eg_optimize_blocks(const kiln_graph *g, const eg_ruleset *rs, const eg_limits *lim, int flags,
                               uint32_t *hits, uint32_t *misses, char *err, size_t cap) {
    if (!g || g->build_failed) {
        snprintf(err, cap, "graph has a build error: %s", g ? g->error : "no graph");
        return NULL;
    }
    split_plan p;
    plan_split(g, &p);
    joiner j;
    memset(&j, 0, sizeof j);
    j.g = g;
    j.og = kiln_graph_new();
    j.gmemo = sym_transfer_begin(g->syms, j.og->syms);
    j.val = kiln_xmalloc(sizeof *j.val * (size_t)(g->nnodes + 1));
    cutter c;
    memset(&c, 0, sizeof c);
    c.g = g;
    c.seg = p.seg;
    c.closed = p.closed;
    c.in_block = kiln_xmalloc(sizeof *c.in_block * (size_t)(g->nnodes + 1));
    c.touched = kiln_xmalloc(sizeof *c.touched * (size_t)(g->nnodes + 1));
    c.cut = kiln_xmalloc(sizeof *c.cut * (size_t)(g->nnodes + 1));
    for (int32_t i = 0; i < g->nnodes; i++) j.val[i] = c.in_block[i] = KILN_NONE;
    eg_block_cache *bc = eg_block_cache_new(rs, lim);
    eg_block_cache_set_flags(bc, flags);

    int ok = 1;
    for (int32_t b = 0; ok && b < p.nblocks; b++) ok = one_block(&j, &p, &c, bc, b, err, cap);
    /* g's outputs, on the values the blocks produced */
    for (int32_t o = 0; ok && o < g->noutputs; o++) {
        const tensor *t = &g->tensors[g->outputs[o].tensor];
        const node *n = &g->nodes[t->node];
        kiln_tensor base = n->op == OP_INPUT ? og_input(&j, n->name, n, g, j.gmemo) : j.val[t->node];
        view v;
        view_transfer(&v, &g->views[t->view], g->syms, j.og->syms, j.gmemo);
        kiln_output(j.og, graph_view_onto(j.og, base, &v), g->outputs[o].name);
    }
    if (ok && kiln_graph_status(j.og) != KILN_OK) {
        snprintf(err, cap, "joining blocks: %s", kiln_graph_error(j.og));
        ok = 0;
    }
    if (hits || misses) {
        uint32_t h, m;
        eg_block_cache_stats(bc, &h, &m);
        if (hits) *hits = h;
        if (misses) *misses = m;
    }
    eg_block_cache_free(bc);
    for (int32_t i = 0; i < j.nin; i++) free(j.in_names[i]);
    free(j.in_names);
    free(j.in_tensors);
    free(j.gmemo);
    free(j.val);
    free(c.in_block);
    free(c.touched);
    free(c.cut);
    free_plan(&p);
    if (!ok) {
        kiln_graph_free(j.og);
        return NULL;
    }
    return j.og;
}
