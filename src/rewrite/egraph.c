/* egraph.c — hash-consing, union and deferred rebuild of kiln's e-graph.
 *
 * The scheme is egg's: eg_union only links classes and queues the survivor;
 * eg_rebuild then re-canonicalises the parents of every queued class, which
 * finds newly congruent nodes (they collide in the memo) and unions them,
 * until nothing is queued. Analysis data is merged on union and re-derived
 * for parents of classes whose data grew, to a fixpoint. See egraph.h for the
 * invariants this file keeps.
 *
 * The memo is open addressing over node ids, keyed by the node's stored
 * content. A node's content changes only in repair(), which removes it from
 * the memo first and re-inserts it after, so the memo never holds a stale key.
 */
#include "egraph.h"

#include <string.h>

#include "base.h"

#define MEMO_EMPTY UINT32_MAX
#define MEMO_TOMB (UINT32_MAX - 1)

eg_node eg_mk(uint16_t op, uint8_t dtype, int64_t arg, int32_t arg2, int nkids, const eg_id *kids) {
    eg_node n;
    memset(&n, 0, sizeof n);
    KILN_ASSERT(nkids >= 0 && nkids <= EG_MAX_KIDS);
    n.op = op;
    n.dtype = dtype;
    n.arg = arg;
    n.arg2 = arg2;
    n.nkids = (uint8_t)nkids;
    for (int i = 0; i < nkids; i++) n.kids[i] = kids[i];
    return n;
}

static uint64_t node_hash(const eg_node *n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    h = kiln_hash_mix(h, (uint64_t)n->op | ((uint64_t)n->nkids << 16) | ((uint64_t)n->dtype << 24) |
                             ((uint64_t)(uint32_t)n->arg2 << 32));
    h = kiln_hash_mix(h, (uint64_t)n->arg);
    for (int i = 0; i < n->nkids; i++) h = kiln_hash_mix(h, n->kids[i]);
    return h ^ (h >> 29);
}

static int node_eq(const eg_node *a, const eg_node *b) {
    if (a->op != b->op || a->nkids != b->nkids || a->dtype != b->dtype || a->arg != b->arg || a->arg2 != b->arg2)
        return 0;
    for (int i = 0; i < a->nkids; i++)
        if (a->kids[i] != b->kids[i]) return 0;
    return 1;
}

/* ---- memo ----------------------------------------------------------------- */

static void memo_insert_raw(egraph *eg, eg_id nid) {
    uint32_t mask = eg->memo_cap - 1;
    uint32_t i = (uint32_t)node_hash(&eg->nodes[nid]) & mask;
    while (eg->memo[i] != MEMO_EMPTY && eg->memo[i] != MEMO_TOMB) i = (i + 1) & mask;
    if (eg->memo[i] == MEMO_EMPTY) eg->memo_used++;
    eg->memo[i] = nid;
    eg->memo_count++;
}

static void memo_grow(egraph *eg) {
    uint32_t old_cap = eg->memo_cap;
    uint32_t *old = eg->memo;
    uint32_t cap = old_cap ? old_cap : 1024;
    while ((uint64_t)(eg->memo_count + 1) * 2 > cap) cap *= 2;
    eg->memo = kiln_xmalloc(sizeof(uint32_t) * cap);
    memset(eg->memo, 0xff, sizeof(uint32_t) * cap);
    eg->memo_cap = cap;
    eg->memo_used = eg->memo_count = 0;
    for (uint32_t i = 0; i < old_cap; i++)
        if (old[i] != MEMO_EMPTY && old[i] != MEMO_TOMB) memo_insert_raw(eg, old[i]);
    free(old);
}

static void memo_insert(egraph *eg, eg_id nid) {
    if ((uint64_t)(eg->memo_used + 1) * 10 > (uint64_t)eg->memo_cap * 7) memo_grow(eg);
    memo_insert_raw(eg, nid);
}

static eg_id memo_find(const egraph *eg, const eg_node *n) {
    if (!eg->memo_cap) return EG_NONE;
    uint32_t mask = eg->memo_cap - 1;
    uint32_t i = (uint32_t)node_hash(n) & mask;
    for (;;) {
        uint32_t s = eg->memo[i];
        if (s == MEMO_EMPTY) return EG_NONE;
        if (s != MEMO_TOMB && node_eq(&eg->nodes[s], n)) return s;
        i = (i + 1) & mask;
    }
}

static void memo_remove(egraph *eg, eg_id nid) {
    uint32_t mask = eg->memo_cap - 1;
    uint32_t i = (uint32_t)node_hash(&eg->nodes[nid]) & mask;
    for (;;) {
        uint32_t s = eg->memo[i];
        KILN_ASSERT(s != MEMO_EMPTY); /* a live node is always in the memo */
        if (s == nid) {
            eg->memo[i] = MEMO_TOMB;
            eg->memo_count--;
            return;
        }
        i = (i + 1) & mask;
    }
}

/* ---- lifetime --------------------------------------------------------------- */

egraph *eg_new(const eg_hooks *hooks) {
    egraph *eg = kiln_xcalloc(1, sizeof *eg);
    uf_init(&eg->uf);
    if (hooks) eg->hooks = *hooks;
    memo_grow(eg);
    return eg;
}

void eg_free(egraph *eg) {
    if (!eg) return;
    for (uint32_t c = 0; c < eg->nclasses; c++) {
        free(eg->classes[c].nodes);
        free(eg->classes[c].parents);
    }
    free(eg->classes);
    free(eg->nodes);
    free(eg->node_class);
    free(eg->node_dead);
    free(eg->memo);
    free(eg->pending);
    free(eg->analysis_pending);
    uf_free(&eg->uf);
    free(eg);
}

eg_id eg_find(egraph *eg, eg_id c) { return uf_find(&eg->uf, c); }
eg_id eg_find_const(const egraph *eg, eg_id c) { return uf_find_const(&eg->uf, c); }

static void push_id(eg_id **arr, uint32_t *n, uint32_t *cap, eg_id v) {
    KILN_GROW(*arr, *cap, *n + 1);
    (*arr)[(*n)++] = v;
}

static void canonicalize(egraph *eg, eg_node *n) {
    for (int i = 0; i < n->nkids; i++) n->kids[i] = eg_find(eg, n->kids[i]);
}

eg_id eg_lookup(egraph *eg, const eg_node *n) {
    eg_node c = *n;
    canonicalize(eg, &c);
    eg_id nid = memo_find(eg, &c);
    return nid == EG_NONE ? EG_NONE : eg_find(eg, eg->node_class[nid]);
}

/* ---- analysis ----------------------------------------------------------------- */

/* equal up to the rounding that reassociating folded constants may cause */
static int consts_agree(double a, double b) {
    if (a != a || b != b) return a != a && b != b;
    if (a == b) return 1;
    double m = a < 0 ? -a : a, n = b < 0 ? -b : b;
    double d = a - b < 0 ? b - a : a - b;
    return d <= 1e-4 * (m > n ? m : n);
}

/* merge src into dst; returns 1 if dst gained information. Shapes and
 * dtypes of equal classes must agree; a disagreement means an unsound rule,
 * which is counted (tests assert none) rather than crashing. */
static int data_merge(egraph *eg, eg_data *dst, const eg_data *src) {
    int changed = 0;
    if (!dst->known && src->known) {
        uint8_t hc = dst->has_const;
        double cv = dst->cval;
        *dst = *src;
        if (hc) dst->has_const = 1, dst->cval = cv;
        changed = 1;
    } else if (dst->known && src->known) {
        int same = dst->dtype == src->dtype && dst->ndim == src->ndim;
        for (int i = 0; same && i < dst->ndim; i++) same = dst->shape[i] == src->shape[i];
        if (!same) eg->analysis_conflicts++;
    }
    if (src->has_const) {
        if (!dst->has_const) {
            dst->has_const = 1;
            dst->cval = src->cval;
            changed = 1;
        } else if (!consts_agree(dst->cval, src->cval)) {
            eg->analysis_conflicts++;
        }
    }
    return changed;
}

static void make_data(egraph *eg, const eg_node *n, eg_data *out) {
    memset(out, 0, sizeof *out);
    if (eg->hooks.make) eg->hooks.make(eg->hooks.ctx, eg, n, out);
}

/* ---- add and union --------------------------------------------------------------- */

eg_id eg_add(egraph *eg, const eg_node *n) {
    eg_node c = *n;
    KILN_ASSERT(c.nkids <= EG_MAX_KIDS);
    canonicalize(eg, &c);
    eg_id found = memo_find(eg, &c);
    if (found != EG_NONE) return eg_find(eg, eg->node_class[found]);

    eg_id nid = eg->nnodes;
    KILN_GROW(eg->nodes, eg->cap_nodes, nid + 1);
    eg->node_class = kiln_xrealloc(eg->node_class, sizeof(eg_id) * eg->cap_nodes);
    eg->node_dead = kiln_xrealloc(eg->node_dead, eg->cap_nodes);
    eg->nodes[nid] = c;
    eg->node_dead[nid] = 0;
    eg->nnodes++;
    eg->nlive_nodes++;

    eg_id cls = uf_make(&eg->uf);
    KILN_ASSERT(cls == eg->nclasses);
    KILN_GROW(eg->classes, eg->cap_classes, cls + 1);
    eg->nclasses++;
    eg->nlive_classes++;
    eg_class *k = &eg->classes[cls];
    memset(k, 0, sizeof *k);
    push_id(&k->nodes, &k->nnodes, &k->cap_nodes, nid);
    eg->node_class[nid] = cls;
    for (int i = 0; i < c.nkids; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= c.kids[j] == c.kids[i];
        if (dup) continue;
        eg_class *kc = &eg->classes[c.kids[i]];
        push_id(&kc->parents, &kc->nparents, &kc->cap_parents, nid);
    }
    memo_insert(eg, nid);
    eg_data d;
    make_data(eg, &c, &d);
    eg->classes[cls].data = d;
    if (eg->hooks.modify) eg->hooks.modify(eg->hooks.ctx, eg, cls);
    return eg_find(eg, cls);
}

static void append_ids(eg_id **dst, uint32_t *n, uint32_t *cap, const eg_id *src, uint32_t m) {
    KILN_GROW(*dst, *cap, *n + m);
    if (m) memcpy(*dst + *n, src, sizeof(eg_id) * m);
    *n += m;
}

int eg_union(egraph *eg, eg_id a, eg_id b) {
    a = eg_find(eg, a);
    b = eg_find(eg, b);
    if (a == b) return 0;
    /* the class with more parents survives: fewer parent ids move */
    if (eg->classes[a].nparents < eg->classes[b].nparents) {
        eg_id t = a;
        a = b;
        b = t;
    }
    uf_link(&eg->uf, a, b);
    eg_class *ka = &eg->classes[a], *kb = &eg->classes[b];
    append_ids(&ka->nodes, &ka->nnodes, &ka->cap_nodes, kb->nodes, kb->nnodes);
    append_ids(&ka->parents, &ka->nparents, &ka->cap_parents, kb->parents, kb->nparents);
    free(kb->nodes);
    free(kb->parents);
    kb->nodes = kb->parents = NULL;
    kb->nnodes = kb->nparents = kb->cap_nodes = kb->cap_parents = 0;
    eg_data db = kb->data;
    int a_grew = data_merge(eg, &ka->data, &db);
    int b_grew = ka->data.has_const != db.has_const || ka->data.known != db.known;
    if (a_grew || b_grew) push_id(&eg->analysis_pending, &eg->nanalysis, &eg->cap_analysis, a);
    push_id(&eg->pending, &eg->npending, &eg->cap_pending, a);
    eg->nlive_classes--;
    eg->nunions++;
    return 1;
}

/* ---- rebuild ------------------------------------------------------------------------- */

static void repair(egraph *eg, eg_id c) {
    eg_class *k = &eg->classes[c];
    eg_id *ps = k->parents;
    uint32_t np = k->nparents;
    k->parents = NULL;
    k->nparents = k->cap_parents = 0;
    uint32_t keep = 0;
    for (uint32_t i = 0; i < np; i++) {
        eg_id p = ps[i];
        if (eg->node_dead[p]) continue;
        memo_remove(eg, p);
        canonicalize(eg, &eg->nodes[p]);
        eg_id other = memo_find(eg, &eg->nodes[p]);
        if (other != EG_NONE) {
            eg->node_dead[p] = 1;
            eg->nlive_nodes--;
            eg_union(eg, eg->node_class[other], eg->node_class[p]);
        } else {
            memo_insert(eg, p);
            ps[keep++] = p;
        }
    }
    eg_id r = eg_find(eg, c);
    eg_class *kr = &eg->classes[r];
    append_ids(&kr->parents, &kr->nparents, &kr->cap_parents, ps, keep);
    free(ps);
}

/* re-derive the data of c's parents' classes after c's data grew */
static void propagate(egraph *eg, eg_id c) {
    eg_class *k = &eg->classes[c];
    for (uint32_t i = 0; i < k->nparents; i++) {
        eg_id p = k->parents[i];
        if (eg->node_dead[p]) continue;
        eg_node n = eg->nodes[p];
        canonicalize(eg, &n);
        eg_data d;
        make_data(eg, &n, &d);
        eg_id pc = eg_find(eg, eg->node_class[p]);
        if (data_merge(eg, &eg->classes[pc].data, &d)) {
            push_id(&eg->analysis_pending, &eg->nanalysis, &eg->cap_analysis, pc);
            if (eg->hooks.modify) eg->hooks.modify(eg->hooks.ctx, eg, pc);
        }
        k = &eg->classes[c]; /* modify may have grown the class array */
    }
}

static int cmp_id(const void *a, const void *b) {
    eg_id x = *(const eg_id *)a, y = *(const eg_id *)b;
    return x < y ? -1 : x > y;
}

/* drop dead nodes from node lists and dead or repeated ids from parent lists */
static void sweep(egraph *eg) {
    for (eg_id c = 0; c < eg->nclasses; c++) {
        if (!eg_is_root(eg, c)) continue;
        eg_class *k = &eg->classes[c];
        uint32_t m = 0;
        for (uint32_t i = 0; i < k->nnodes; i++)
            if (!eg->node_dead[k->nodes[i]]) k->nodes[m++] = k->nodes[i];
        k->nnodes = m;
        if (k->nparents > 1) qsort(k->parents, k->nparents, sizeof(eg_id), cmp_id);
        m = 0;
        for (uint32_t i = 0; i < k->nparents; i++) {
            eg_id p = k->parents[i];
            if (eg->node_dead[p] || (m && k->parents[m - 1] == p)) continue;
            k->parents[m++] = p;
        }
        k->nparents = m;
    }
}

uint32_t eg_rebuild(egraph *eg) {
    uint64_t before = eg->nunions;
    int changed = 0;
    eg_id *todo = NULL;
    uint32_t ntodo = 0, cap_todo = 0;
    while (eg->npending || eg->nanalysis) {
        changed = 1;
        while (eg->npending) {
            /* take the queue: repairs may queue more */
            eg_id *t = todo;
            uint32_t ct = cap_todo;
            todo = eg->pending;
            ntodo = eg->npending;
            cap_todo = eg->cap_pending;
            eg->pending = t;
            eg->cap_pending = ct;
            eg->npending = 0;
            for (uint32_t i = 0; i < ntodo; i++) todo[i] = eg_find(eg, todo[i]);
            if (ntodo > 1) qsort(todo, ntodo, sizeof(eg_id), cmp_id);
            for (uint32_t i = 0; i < ntodo; i++)
                if (i == 0 || todo[i] != todo[i - 1]) repair(eg, eg_find(eg, todo[i]));
        }
        while (eg->nanalysis) {
            eg_id c = eg_find(eg, eg->analysis_pending[--eg->nanalysis]);
            if (eg->hooks.modify) eg->hooks.modify(eg->hooks.ctx, eg, c);
            propagate(eg, eg_find(eg, c));
        }
    }
    free(todo);
    if (changed) sweep(eg);
    return (uint32_t)(eg->nunions - before);
}

/* ---- invariant check (tests) ------------------------------------------------------------- */

int eg_check_invariants(egraph *eg, char *msg, size_t cap) {
    uint32_t live = 0, roots = 0;
    if (eg->npending || eg->nanalysis) {
        snprintf(msg, cap, "rebuild pending");
        return -1;
    }
    for (eg_id n = 0; n < eg->nnodes; n++) {
        if (eg->node_dead[n]) continue;
        live++;
        const eg_node *x = &eg->nodes[n];
        for (int i = 0; i < x->nkids; i++)
            if (!eg_is_root(eg, x->kids[i])) {
                snprintf(msg, cap, "node %u has non-canonical kid %u", n, x->kids[i]);
                return -1;
            }
        if (memo_find(eg, x) != n) {
            snprintf(msg, cap, "node %u not found in memo as itself", n);
            return -1;
        }
        eg_id c = eg_find(eg, eg->node_class[n]);
        const eg_class *k = &eg->classes[c];
        int in = 0;
        for (uint32_t i = 0; i < k->nnodes; i++) in |= k->nodes[i] == n;
        if (!in) {
            snprintf(msg, cap, "node %u missing from its class %u", n, c);
            return -1;
        }
        for (int i = 0; i < x->nkids; i++) {
            const eg_class *kk = &eg->classes[x->kids[i]];
            int found = 0;
            for (uint32_t j = 0; j < kk->nparents; j++) found |= kk->parents[j] == n;
            if (!found) {
                snprintf(msg, cap, "node %u missing from parents of kid %u", n, x->kids[i]);
                return -1;
            }
        }
    }
    for (eg_id c = 0; c < eg->nclasses; c++) {
        if (!eg_is_root(eg, c)) continue;
        roots++;
        const eg_class *k = &eg->classes[c];
        if (k->nnodes == 0) {
            snprintf(msg, cap, "class %u is empty", c);
            return -1;
        }
        for (uint32_t i = 0; i < k->nnodes; i++)
            if (eg->node_dead[k->nodes[i]] || eg_find(eg, eg->node_class[k->nodes[i]]) != c) {
                snprintf(msg, cap, "class %u lists a dead or foreign node %u", c, k->nodes[i]);
                return -1;
            }
    }
    if (live != eg->nlive_nodes || live != eg->memo_count || roots != eg->nlive_classes) {
        snprintf(msg, cap, "counts: live %u/%u memo %u roots %u/%u", live, eg->nlive_nodes, eg->memo_count, roots,
                 eg->nlive_classes);
        return -1;
    }
    msg[0] = 0;
    return 0;
}
