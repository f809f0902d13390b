/* extract.c — picking graphs out of the e-graph: the best one under a cost
 * function, and the K cheapest structurally distinct ones.
 *
 * Cost of a tree = sum of its nodes' own costs (which must be > 0, so no
 * cyclic choice can ever be cheapest). Best: bottom-up fixpoint over classes;
 * optionally amortised: a shared value (the class of a source-graph node
 * with u consumers) adds cost/u to each consumer, so the cost of a program
 * grows with its size, not exponentially with its depth; a node then costs
 * at least its dearest kid plus its own cost, which keeps costs strictly
 * increasing along chosen edges (no cyclic choice).
 * Top-K: every class keeps its K cheapest trees as entries (node + kid entry
 * per operand). Entries are hash-consed on (node, kid entries), so equal
 * entries are equal trees and a class's list never holds one tree twice. The
 * fixpoint is exact: a tree among a class's K cheapest only uses kid trees
 * among the kids' K cheapest (else K cheaper trees exist). A combination of
 * kid ranks (r1, r2, r3) is skipped when (r1+1)(r2+1)(r3+1) > K, since that
 * many combinations are no more expensive.
 */
#include <math.h>
#include <string.h>

#include "base.h"
#include "rewrite.h"

void eg_terms_free(eg_terms *ts) {
    free(ts->t);
    free(ts->roots);
    memset(ts, 0, sizeof *ts);
}

void eg_extract_best(egraph *eg, eg_cost_fn f, void *ctx, eg_id *choice, double *cost) {
    eg_extract_best_amortised(eg, f, ctx, NULL, choice, cost);
}

void eg_extract_best_amortised(egraph *eg, eg_cost_fn f, void *ctx, const uint32_t *uses, eg_id *choice, double *cost) {
    for (eg_id c = 0; c < eg->nclasses; c++) {
        choice[c] = EG_NONE;
        cost[c] = INFINITY;
    }
    int changed = 1;
    while (changed) {
        changed = 0;
        for (eg_id c = 0; c < eg->nclasses; c++) {
            if (!eg_is_root(eg, c)) continue;
            const eg_class *k = &eg->classes[c];
            for (uint32_t i = 0; i < k->nnodes; i++) {
                const eg_node *n = &eg->nodes[k->nodes[i]];
                double s = 0, most = 0;
                for (int j = 0; j < n->nkids && s < INFINITY; j++) {
                    eg_id kc = eg_find(eg, n->kids[j]);
                    /* a shared value: each of its consumers pays its share */
                    s += uses && uses[kc] > 1 ? cost[kc] / (double)uses[kc] : cost[kc];
                    most = cost[kc] > most ? cost[kc] : most;
                }
                if (s == INFINITY) continue;
                /* never below a kid's own cost: a class then costs more than
                 * each kid it chose, so chosen terms cannot form a cycle */
                if (s < most) s = most;
                double own = f(ctx, eg, n);
                KILN_ASSERT(own > 0);
                s += own;
                if (s < cost[c]) {
                    cost[c] = s;
                    choice[c] = k->nodes[i];
                    changed = 1;
                }
            }
        }
    }
}

static uint32_t term_add(eg_terms *ts, eg_id nid, const uint32_t *kids, int nk) {
    KILN_GROW(ts->t, ts->cap, ts->n + 1);
    eg_term *t = &ts->t[ts->n];
    memset(t, 0, sizeof *t);
    t->node = nid;
    for (int i = 0; i < nk; i++) t->kids[i] = kids[i];
    return ts->n++;
}

static uint32_t term_from_choice(egraph *eg, const eg_id *choice, eg_id c, uint32_t *memo, eg_terms *ts) {
    c = eg_find(eg, c);
    if (memo[c] != UINT32_MAX) return memo[c];
    eg_id nid = choice[c];
    KILN_ASSERT(nid != EG_NONE);
    const eg_node *n = &eg->nodes[nid];
    uint32_t kids[EG_MAX_KIDS];
    for (int i = 0; i < n->nkids; i++) kids[i] = term_from_choice(eg, choice, n->kids[i], memo, ts);
    return memo[c] = term_add(ts, nid, kids, n->nkids);
}

int eg_terms_from_choice(egraph *eg, const eg_id *choice, const eg_id *roots, uint32_t nroots, eg_terms *out) {
    memset(out, 0, sizeof *out);
    for (uint32_t r = 0; r < nroots; r++)
        if (choice[eg_find(eg, roots[r])] == EG_NONE) return -1;
    uint32_t *memo = kiln_xmalloc(sizeof(uint32_t) * (eg->nclasses ? eg->nclasses : 1));
    memset(memo, 0xff, sizeof(uint32_t) * eg->nclasses);
    out->roots = kiln_xmalloc(sizeof(uint32_t) * (nroots ? nroots : 1));
    for (uint32_t r = 0; r < nroots; r++) out->roots[r] = term_from_choice(eg, choice, roots[r], memo, out);
    free(memo);
    return 0;
}

/* ---- top K ----------------------------------------------------------------------- */

typedef struct kentry {
    double cost;
    eg_id node;
    uint32_t kid[EG_MAX_KIDS];
} kentry;

typedef struct kbest {
    egraph *eg;
    uint32_t k;
    kentry *e;
    uint32_t ne, cap_e;
    uint32_t *hash; /* open addressing over entry ids */
    uint32_t hcap;
    uint32_t *lists; /* class c: lists[c*k .. c*k+len[c]) entry ids by cost */
    uint32_t *len;
} kbest;

static uint64_t ent_hash(eg_id nid, const uint32_t *kid, int nk) {
    uint64_t h = kiln_hash_mix(0x12345, nid);
    for (int i = 0; i < nk; i++) h = kiln_hash_mix(h, kid[i]);
    return h;
}

static void khash_insert(kbest *kb, uint32_t id) {
    const kentry *e = &kb->e[id];
    uint32_t j = (uint32_t)ent_hash(e->node, e->kid, kb->eg->nodes[e->node].nkids) & (kb->hcap - 1);
    while (kb->hash[j] != UINT32_MAX) j = (j + 1) & (kb->hcap - 1);
    kb->hash[j] = id;
}

/* the entry for (node, kids), created if new */
static uint32_t kentry_get(kbest *kb, eg_id nid, const uint32_t *kid, double cost) {
    int nk = kb->eg->nodes[nid].nkids;
    uint32_t j = (uint32_t)ent_hash(nid, kid, nk) & (kb->hcap - 1);
    while (kb->hash[j] != UINT32_MAX) {
        const kentry *e = &kb->e[kb->hash[j]];
        int same = e->node == nid;
        for (int i = 0; same && i < nk; i++) same = e->kid[i] == kid[i];
        if (same) return kb->hash[j];
        j = (j + 1) & (kb->hcap - 1);
    }
    KILN_GROW(kb->e, kb->cap_e, kb->ne + 1);
    kentry *e = &kb->e[kb->ne];
    memset(e, 0, sizeof *e);
    e->cost = cost;
    e->node = nid;
    for (int i = 0; i < nk; i++) e->kid[i] = kid[i];
    uint32_t id = kb->ne++;
    if ((uint64_t)kb->ne * 2 > kb->hcap) {
        free(kb->hash);
        kb->hcap *= 2;
        kb->hash = kiln_xmalloc(sizeof(uint32_t) * kb->hcap);
        memset(kb->hash, 0xff, sizeof(uint32_t) * kb->hcap);
        for (uint32_t i = 0; i < kb->ne; i++) khash_insert(kb, i);
    } else {
        kb->hash[j] = id;
    }
    return id;
}

/* offer an entry to class c's list; returns 1 if the list changed */
static int offer(kbest *kb, eg_id c, uint32_t id) {
    uint32_t *L = &kb->lists[(size_t)c * kb->k];
    uint32_t n = kb->len[c];
    double cost = kb->e[id].cost;
    for (uint32_t i = 0; i < n; i++)
        if (L[i] == id) return 0;
    if (n == kb->k && cost >= kb->e[L[n - 1]].cost) return 0;
    uint32_t pos = n < kb->k ? n : n - 1;
    while (pos > 0 && kb->e[L[pos - 1]].cost > cost) {
        L[pos] = L[pos - 1];
        pos--;
    }
    L[pos] = id;
    if (n < kb->k) kb->len[c] = n + 1;
    return 1;
}

static int class_pass(kbest *kb, eg_cost_fn f, void *ctx, eg_id c) {
    egraph *eg = kb->eg;
    const eg_class *k = &eg->classes[c];
    int changed = 0;
    for (uint32_t i = 0; i < k->nnodes; i++) {
        eg_id nid = k->nodes[i];
        const eg_node *n = &eg->nodes[nid];
        eg_id kc[EG_MAX_KIDS];
        uint32_t lens[EG_MAX_KIDS] = {1, 1, 1};
        int ok = 1;
        for (int j = 0; j < n->nkids; j++) {
            kc[j] = eg_find(eg, n->kids[j]);
            lens[j] = kb->len[kc[j]];
            ok &= lens[j] > 0;
        }
        if (!ok) continue;
        double own = f(ctx, eg, n);
        KILN_ASSERT(own > 0);
        for (uint32_t r0 = 0; r0 < lens[0]; r0++)
            for (uint32_t r1 = 0; r1 < lens[1] && (r0 + 1) * (r1 + 1) <= kb->k; r1++)
                for (uint32_t r2 = 0; r2 < lens[2] && (r0 + 1) * (r1 + 1) * (r2 + 1) <= kb->k; r2++) {
                    uint32_t r[3] = {r0, r1, r2}, kid[EG_MAX_KIDS] = {0, 0, 0};
                    double cost = own;
                    for (int j = 0; j < n->nkids; j++) {
                        kid[j] = kb->lists[(size_t)kc[j] * kb->k + r[j]];
                        cost += kb->e[kid[j]].cost;
                    }
                    changed |= offer(kb, c, kentry_get(kb, nid, kid, cost));
                }
    }
    return changed;
}

static uint32_t term_from_entry(kbest *kb, uint32_t id, uint32_t *memo, eg_terms *ts) {
    if (memo[id] != UINT32_MAX) return memo[id];
    const kentry e = kb->e[id];
    int nk = kb->eg->nodes[e.node].nkids;
    uint32_t kids[EG_MAX_KIDS];
    for (int i = 0; i < nk; i++) kids[i] = term_from_entry(kb, e.kid[i], memo, ts);
    return memo[id] = term_add(ts, e.node, kids, nk);
}

uint32_t eg_extract_topk(egraph *eg, eg_cost_fn f, void *ctx, const eg_id *roots, uint32_t nroots, uint32_t k,
                         eg_terms *out) {
    if (k == 0 || nroots == 0) return 0;
    kbest kb;
    memset(&kb, 0, sizeof kb);
    kb.eg = eg;
    kb.k = k;
    kb.hcap = 1024;
    kb.hash = kiln_xmalloc(sizeof(uint32_t) * kb.hcap);
    memset(kb.hash, 0xff, sizeof(uint32_t) * kb.hcap);
    kb.lists = kiln_xmalloc(sizeof(uint32_t) * (size_t)eg->nclasses * k + 1);
    kb.len = kiln_xcalloc(eg->nclasses + 1, sizeof(uint32_t));
    int changed = 1;
    while (changed) {
        changed = 0;
        for (eg_id c = 0; c < eg->nclasses; c++)
            if (eg_is_root(eg, c)) changed |= class_pass(&kb, f, ctx, c);
    }
    /* tuples of ranks over the roots, cheapest first (best-first over a frontier) */
    uint32_t maxt = k * (nroots + 1) + 1, nt = 0, ntaken = 0, found = 0;
    uint32_t *tup = kiln_xcalloc((size_t)maxt * nroots, sizeof(uint32_t));
    uint8_t *taken = kiln_xcalloc(maxt, 1);
    eg_id *rc = kiln_xmalloc(sizeof(eg_id) * nroots);
    int all = 1;
    for (uint32_t r = 0; r < nroots; r++) {
        rc[r] = eg_find(eg, roots[r]);
        all &= kb.len[rc[r]] > 0;
    }
    if (all) nt = 1; /* (0, ..., 0) */
    while (found < k && ntaken < nt) {
        uint32_t best = UINT32_MAX;
        double bc = INFINITY;
        for (uint32_t t = 0; t < nt; t++) {
            if (taken[t]) continue;
            double c = 0;
            for (uint32_t r = 0; r < nroots; r++) c += kb.e[kb.lists[(size_t)rc[r] * k + tup[t * nroots + r]]].cost;
            if (best == UINT32_MAX || c < bc) best = t, bc = c;
        }
        if (best == UINT32_MAX) break;
        taken[best] = 1;
        ntaken++;
        /* emit */
        eg_terms *ts = &out[found++];
        memset(ts, 0, sizeof *ts);
        ts->roots = kiln_xmalloc(sizeof(uint32_t) * nroots);
        ts->cost = bc;
        uint32_t *memo = kiln_xmalloc(sizeof(uint32_t) * (kb.ne ? kb.ne : 1));
        memset(memo, 0xff, sizeof(uint32_t) * kb.ne);
        for (uint32_t r = 0; r < nroots; r++)
            ts->roots[r] = term_from_entry(&kb, kb.lists[(size_t)rc[r] * k + tup[best * nroots + r]], memo, ts);
        free(memo);
        /* successors: one root's rank + 1 */
        for (uint32_t r = 0; r < nroots && nt < maxt; r++) {
            uint32_t *src = &tup[best * nroots];
            if (src[r] + 1 >= kb.len[rc[r]]) continue;
            uint32_t *dst = &tup[nt * nroots];
            memcpy(dst, src, sizeof(uint32_t) * nroots);
            dst[r]++;
            int dup = 0;
            for (uint32_t t = 0; t < nt && !dup; t++) dup = memcmp(&tup[t * nroots], dst, sizeof(uint32_t) * nroots) == 0;
            if (!dup) nt++;
        }
    }
    free(tup);
    free(taken);
    free(rc);
    free(kb.e);
    free(kb.hash);
    free(kb.lists);
    free(kb.len);
    return found;
}
