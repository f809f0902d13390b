/* blocks.c — the e-graph as one pipeline step, and reuse across repeated
 * blocks.
 *
 * eg_optimize_graph: graph -> e-graph -> saturation -> best extraction ->
 * new graph. Repeated blocks (transformer layers) are the same graph except
 * for the names of their weights: eg_graph_signature hashes a graph's
 * structure with every input name's digits removed ("blk.7.attn_q" and
 * "blk.0.attn_q" both read "blk..attn_q"), so identical blocks share a
 * signature. A block cache keeps the saturated e-graph and extraction of the
 * first block of each signature; a later block with that signature is
 * rebuilt from the cached extraction with its own input and output names
 * (inputs correspond by position: identical structure means identical node
 * order). Rewrite time then grows with distinct blocks, not with depth.
 *
 * Invariants: the cache takes every graph handed to it (freeing it, or keeping
 * it when its sym pool is borrowed by a cached e-graph); renaming of a cached
 * e-graph's inputs is undone before a call returns.
 */
#include <string.h>

#include "base.h"
#include "rewrite.h"

static uint64_t hash_str(uint64_t h, const char *s, int skip_digits) {
    for (; s && *s; s++)
        if (!(skip_digits && *s >= '0' && *s <= '9')) h = kiln_hash_mix(h, (unsigned char)*s);
    return kiln_hash_mix(h, 0xff);
}

uint64_t eg_graph_signature(const kiln_graph *g) {
    uint64_t h = 0x5167a1e5ULL;
    char buf[2048];
    for (int32_t i = 0; i < g->nnodes; i++) {
        const node *n = &g->nodes[i];
        int64_t vb;
        memcpy(&vb, &n->value, sizeof vb);
        h = kiln_hash_mix(h, (uint64_t)n->op | (uint64_t)n->dtype << 8 | (uint64_t)(uint32_t)n->axis << 16 |
                                 (uint64_t)n->is_state << 48);
        h = kiln_hash_mix(h, (uint64_t)vb);
        if (n->op == OP_INPUT) h = hash_str(h, n->name, 1);
        graph_shape_str(g, n->ndim, n->shape, buf, sizeof buf);
        h = hash_str(h, buf, 0);
        for (int k = 0; k < op_table[n->op].arity; k++) {
            const tensor *t = &g->tensors[n->src[k]];
            h = kiln_hash_mix(h, (uint64_t)t->node);
            view_print(&g->views[t->view], g->syms, buf, sizeof buf);
            h = hash_str(h, buf, 0);
        }
    }
    for (int32_t i = 0; i < g->noutputs; i++) {
        const tensor *t = &g->tensors[g->outputs[i].tensor];
        h = kiln_hash_mix(h, (uint64_t)t->node);
        view_print(&g->views[t->view], g->syms, buf, sizeof buf);
        h = hash_str(h, buf, 0);
    }
    return h;
}

/* the best extraction of ek's roots as a graph */
static kiln_graph *extract_graph(eg_kiln *ek, int plain_costs, eg_terms *ts_out, char *err, size_t cap) {
    egraph *eg = ek->eg;
    eg_id *choice = kiln_xmalloc(sizeof(eg_id) * (eg->nclasses ? eg->nclasses : 1));
    double *cost = kiln_xmalloc(sizeof(double) * (eg->nclasses ? eg->nclasses : 1));
    /* shared values amortised over their consumers (plain_costs, from
     * KILN_EG_PLAIN: plain tree costs, to see what the amortisation changes) */
    uint32_t *uses = kiln_xcalloc(eg->nclasses ? eg->nclasses : 1, sizeof *uses);
    for (uint32_t i = 0; i < ek->nshared; i++) {
        eg_id c = eg_find(eg, ek->shared[i]);
        if (ek->shared_uses[i] > uses[c]) uses[c] = ek->shared_uses[i];
    }
    eg_extract_best_amortised(eg, ek_default_cost, ek, plain_costs ? NULL : uses, choice, cost);
    free(uses);
    kiln_graph *ng = NULL;
    eg_terms ts;
    if (eg_terms_from_choice(eg, choice, ek->roots, ek->nroots, &ts) != 0) {
        snprintf(err, cap, "extraction: a root has no finite-cost term");
    } else {
        ng = ek_to_graph(ek, &ts, err, cap);
        if (ts_out) *ts_out = ts;
        else eg_terms_free(&ts);
    }
    free(choice);
    free(cost);
    return ng;
}

kiln_graph *eg_optimize_graph(const kiln_graph *g, const eg_ruleset *rs, const eg_limits *lim, eg_run_report *rep,
                              char *err, size_t cap) {
    return eg_optimize_graph_ex(g, rs, lim, 0, rep, err, cap);
}

kiln_graph *eg_optimize_graph_ex(const kiln_graph *g, const eg_ruleset *rs, const eg_limits *lim, int primitives_only,
                                 eg_run_report *rep, char *err, size_t cap) {
    eg_kiln *ek = ek_from_graph(g, err, cap);
    if (!ek) return NULL;
    ek->primitives_only = primitives_only & ~EG_PLAIN_COSTS;
    eg_run_report local;
    eg_run(ek, rs, lim, rep ? rep : &local);
    if (!rep) eg_report_free(&local);
    kiln_graph *ng = extract_graph(ek, (primitives_only & EG_PLAIN_COSTS) != 0, NULL, err, cap);
    ek_free(ek);
    return ng;
}

/* ---- block cache ----------------------------------------------------------------- */

typedef struct block_entry {
    uint64_t sig;
    kiln_graph *src; /* owns the sym pool ek borrows */
    eg_kiln *ek;
    eg_terms ts;
} block_entry;

struct eg_block_cache {
    const eg_ruleset *rs;
    eg_limits lim;
    int flags; /* eg_optimize_graph_ex's: EG_EXTRACT_* | EG_PLAIN_COSTS */
    block_entry *e;
    uint32_t n, cap;
    uint32_t hits, misses;
};

eg_block_cache *eg_block_cache_new(const eg_ruleset *rs, const eg_limits *lim) {
    eg_block_cache *c = kiln_xcalloc(1, sizeof *c);
    c->rs = rs;
    if (lim) c->lim = *lim;
    return c;
}

void eg_block_cache_set_flags(eg_block_cache *c, int flags) { c->flags = flags; }

void eg_block_cache_free(eg_block_cache *c) {
    if (!c) return;
    for (uint32_t i = 0; i < c->n; i++) {
        eg_terms_free(&c->e[i].ts);
        ek_free(c->e[i].ek);
        kiln_graph_free(c->e[i].src);
    }
    free(c->e);
    free(c);
}

void eg_block_cache_stats(const eg_block_cache *c, uint32_t *hits, uint32_t *misses) {
    *hits = c->hits;
    *misses = c->misses;
}

/* the input names of g in node order */
static uint32_t input_names(const kiln_graph *g, const char **names, uint32_t cap) {
    uint32_t n = 0;
    for (int32_t i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == OP_INPUT && n < cap) names[n++] = g->nodes[i].name;
    return n;
}

kiln_graph *eg_block_cache_optimize(eg_block_cache *c, kiln_graph *g, int *hit, eg_run_report *rep, char *err,
                                    size_t cap) {
    uint64_t sig = eg_graph_signature(g);
    *hit = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        block_entry *e = &c->e[i];
        if (e->sig != sig || e->src->nnodes != g->nnodes || e->src->noutputs != g->noutputs) continue;
        /* rebuild the cached extraction under g's input and output names */
        eg_kiln *ek = e->ek;
        const char *mine[4096];
        uint32_t nn = input_names(g, mine, 4096);
        if (nn != ek->ninputs) continue;
        char **saved = kiln_xmalloc(sizeof(char *) * (ek->ninputs + ek->nroots + 1));
        for (uint32_t k = 0; k < ek->ninputs; k++) {
            saved[k] = ek->inputs[k].name;
            ek->inputs[k].name = (char *)mine[k];
        }
        uint32_t r = 0;
        for (uint32_t k = 0; k < ek->nroots; k++) {
            saved[ek->ninputs + k] = ek->root_names[k];
            if (ek->root_names[k] && r < (uint32_t)g->noutputs) ek->root_names[k] = g->outputs[r++].name;
        }
        kiln_graph *ng = ek_to_graph(ek, &e->ts, err, cap);
        for (uint32_t k = 0; k < ek->ninputs; k++) ek->inputs[k].name = saved[k];
        for (uint32_t k = 0; k < ek->nroots; k++) ek->root_names[k] = saved[ek->ninputs + k];
        free(saved);
        if (ng) {
            kiln_graph_free(g);
            c->hits++;
            *hit = 1;
            if (rep) memset(rep, 0, sizeof *rep);
            return ng;
        }
    }
    c->misses++;
    eg_kiln *ek = ek_from_graph(g, err, cap);
    if (!ek) {
        kiln_graph_free(g);
        return NULL;
    }
    ek->primitives_only = c->flags & ~EG_PLAIN_COSTS;
    eg_run_report local;
    eg_run(ek, c->rs, &c->lim, rep ? rep : &local);
    if (!rep) eg_report_free(&local);
    eg_terms ts;
    kiln_graph *ng = extract_graph(ek, (c->flags & EG_PLAIN_COSTS) != 0, &ts, err, cap);
    if (!ng) {
        ek_free(ek);
        kiln_graph_free(g);
        return NULL;
    }
    KILN_GROW(c->e, c->cap, c->n + 1);
    block_entry *e = &c->e[c->n++];
    e->sig = sig;
    e->src = g; /* the cache takes g: its sym pool lives on in ek */
    e->ek = ek;
    e->ts = ts;
    return ng;
}
