/* egraph.h — kiln's e-graph core: union-find, hash-consed e-nodes, e-classes,
 * deferred rebuild (congruence closure once per iteration) and a per-class
 * analysis. This layer knows nothing about kiln graphs: an e-node is an op code,
 * a small payload and up to three child class ids; what ops mean is supplied by
 * hooks (see eg_hooks) and by the layers above (pattern, runner, kiln domain).
 *
 * Invariants (after eg_rebuild, i.e. when eg->pending is empty):
 *  - every live e-node's kids are canonical class ids (eg_find(k) == k);
 *  - the memo holds exactly the live e-nodes, keyed by their canonical content,
 *    so no two live e-nodes are equal (hash-consing) and congruent e-nodes are
 *    in one class (congruence closure);
 *  - a root class's node list holds only live nodes of that class, its parent
 *    list only live nodes having it as a kid.
 * Between eg_union and eg_rebuild these may be broken: callers that match
 * patterns must rebuild first. Ids are 32-bit array indices, never pointers.
 * Nodes made redundant by congruence are marked dead, never reused.
 */
#ifndef KILN_EGRAPH_H
#define KILN_EGRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

typedef uint32_t eg_id;
#define EG_NONE UINT32_MAX
#define EG_MAX_KIDS 3

/* ---- union-find (unionfind.c) ------------------------------------------ */
typedef struct eg_uf {
    eg_id *parent;
    uint32_t n, cap;
} eg_uf;

void uf_init(eg_uf *u);
void uf_free(eg_uf *u);
eg_id uf_make(eg_uf *u);                 /* a new singleton set */
eg_id uf_find(eg_uf *u, eg_id x);        /* with path halving */
eg_id uf_find_const(const eg_uf *u, eg_id x);
/* make root `keep` the representative of root `drop` */
void uf_link(eg_uf *u, eg_id keep, eg_id drop);

/* ---- e-nodes ------------------------------------------------------------ */
/* The payload (dtype, arg, arg2) is part of a node's identity. Its meaning is
 * the op's business (an axis, a constant's bits, a view id, ...). */
typedef struct eg_node {
    uint16_t op;
    uint8_t nkids;
    uint8_t dtype;
    int32_t arg2;
    int64_t arg;
    eg_id kids[EG_MAX_KIDS];
} eg_node;

/* build a node with zeroed unused fields (hashing reads every field) */
eg_node eg_mk(uint16_t op, uint8_t dtype, int64_t arg, int32_t arg2, int nkids, const eg_id *kids);

/* ---- per-class analysis --------------------------------------------------
 * shape: opaque 32-bit ids (kiln: sym ids of the domain's pool); cval: the
 * class's value when every element is that one constant. */
typedef struct eg_data {
    uint8_t known;     /* shape/dtype filled in */
    uint8_t dtype;
    uint8_t ndim;
    uint8_t has_const;
    double cval;
    uint32_t shape[KILN_MAX_DIMS];
} eg_data;

struct egraph;
typedef struct eg_hooks {
    void *ctx;
    /* analysis of a new node (kids canonical, their data final for now) */
    void (*make)(void *ctx, struct egraph *eg, const eg_node *n, eg_data *out);
    /* called after a class's data was made or grew; may add nodes and union
     * (e.g. add the canonical form of a constant) */
    void (*modify)(void *ctx, struct egraph *eg, eg_id cls);
} eg_hooks;

typedef struct eg_class {
    eg_id *nodes;
    uint32_t nnodes, cap_nodes;
    eg_id *parents; /* node ids that use this class as a kid */
    uint32_t nparents, cap_parents;
    eg_data data;
} eg_class;

typedef struct egraph {
    eg_uf uf;
    /* nodes */
    eg_node *nodes;
    eg_id *node_class; /* class the node was added to (call eg_find on it) */
    uint8_t *node_dead;
    uint32_t nnodes, cap_nodes, nlive_nodes;
    /* classes, indexed by id; only roots are meaningful */
    eg_class *classes;
    uint32_t nclasses, cap_classes, nlive_classes;
    /* memo: open addressing over node ids; EMPTY / TOMB markers */
    uint32_t *memo;
    uint32_t memo_cap, memo_used, memo_count;
    /* classes whose parents must be re-canonicalised / re-analysed */
    eg_id *pending, *analysis_pending;
    uint32_t npending, cap_pending, nanalysis, cap_analysis;
    eg_hooks hooks;
    uint64_t nunions;      /* effective unions ever performed */
    uint32_t analysis_conflicts; /* unions of classes with different constants/shapes */
} egraph;

egraph *eg_new(const eg_hooks *hooks); /* hooks may be NULL */
void eg_free(egraph *eg);

eg_id eg_find(egraph *eg, eg_id c);
eg_id eg_find_const(const egraph *eg, eg_id c);
/* add a node (kids any class ids); returns its class (canonical) */
eg_id eg_add(egraph *eg, const eg_node *n);
/* the class of an equal node if one exists, else EG_NONE (no insertion) */
eg_id eg_lookup(egraph *eg, const eg_node *n);
/* merge two classes; returns 1 if they were different. Restore invariants
 * with eg_rebuild before matching. */
int eg_union(egraph *eg, eg_id a, eg_id b);
/* restore congruence and analysis; returns the number of unions it made */
uint32_t eg_rebuild(egraph *eg);

static inline const eg_class *eg_class_of(const egraph *eg, eg_id c) { return &eg->classes[c]; }
static inline const eg_data *eg_data_of(egraph *eg, eg_id c) { return &eg->classes[eg_find(eg, c)].data; }
static inline const eg_node *eg_node_at(const egraph *eg, eg_id n) { return &eg->nodes[n]; }
static inline int eg_is_root(const egraph *eg, eg_id c) { return eg->uf.parent[c] == c; }

/* debugging aid for tests: check every invariant above; returns 0 if all
 * hold, else writes what broke into msg */
int eg_check_invariants(egraph *eg, char *msg, size_t cap);

#endif
