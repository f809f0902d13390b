/* rewrite.h — kiln's equality saturation over kiln graphs: the kiln domain of
 * the e-graph (ops, payloads, analysis, views as e-nodes), patterns and rules
 * as data, the runner with limits and backoff, extraction, and conversion
 * between kiln_graph and e-graph.
 *
 * E-node encoding of kiln ops (op code = op_kind, the compound ops of
 * src/ir/compound.def included, plus VIEW):
 *   every node: dtype = its result dtype
 *   INPUT  arg = index into ek->inputs            (no kids)
 *   CONST  arg = the double's bits                (no kids; a 0-d scalar)
 *   IOTA   arg = axis, arg2 = view id whose outer shape is the result shape
 *   SUM, MAX, CONTRACT  arg = reduced axis of the operand
 *   SOFTMAX_ONLINE      arg = softmax axis; kids x and the scale c
 *   VIEW   arg = view id (ek->views), kid = the dense tensor it reads
 *   CAST   dtype = target dtype
 * A tensor read through a non-identity view is a VIEW e-node; an identity
 * view is no node at all. CONTRACT and SOFTMAX_ONLINE are compound nodes
 * (defined by compound_expand in src/ir/compound.c) that only recognition
 * rules create; extraction puts them into graphs as compound nodes for the
 * kernel layer.
 *
 * Invariants: views and inputs are interned (equal view <=> equal id), so
 * e-node identity is structural; all sym ids live in ek->syms.
 */
#ifndef KILN_REWRITE_H
#define KILN_REWRITE_H

#include "compound.h"
#include "egraph.h"
#include "graph.h"

enum { EG_OP_VIEW = OP_COUNT, EG_OP_COUNT };

const char *eg_op_name(int op);
int eg_op_arity(int op);
int eg_op_lookup(const char *name); /* -1 if unknown */

/* ---- the kiln domain (kdomain.c) ---------------------------------------- */
typedef struct ek_input {
    char *name;
    kiln_dtype dtype;
    int ndim;
    sym_id shape[KILN_MAX_DIMS];
    int is_state;
} ek_input;

typedef struct eg_kiln {
    egraph *eg;
    sym_pool *syms; /* borrowed from the source graph; may gain expressions */
    view *views;
    uint32_t nviews, cap_views;
    uint32_t *view_index; /* open-addressing hash of view ids */
    uint32_t view_index_cap;
    ek_input *inputs;
    uint32_t ninputs, cap_inputs;
    /* the graph's outputs as classes */
    eg_id *roots;
    char **root_names;
    uint32_t nroots, cap_roots;
    /* extraction for a backend without compound kernels: compound nodes cost
     * infinity, so every class falls back to its primitive form */
    int primitives_only;
    /* classes of the source graph's nodes that have several consumers, and
     * how many (the extraction amortises their cost over them) */
    eg_id *shared;
    uint32_t *shared_uses;
    uint32_t nshared;
    /* per sym variable: 1 when a state input's shape uses it (a capacity,
     * such as a KV cache's n_ctx): the default cost guesses such a size
     * large, so work over a slice of a state is cheaper than over the whole
     * state (a cast of the cache's first kv_len rows, not of all n_ctx) */
    uint8_t *capacity_var;
    uint32_t ncapacity_var;
} eg_kiln;

eg_kiln *ek_new(sym_pool *syms);
void ek_free(eg_kiln *ek); /* frees the e-graph too, never the sym pool */
uint32_t ek_intern_view(eg_kiln *ek, const view *v);
uint32_t ek_intern_input(eg_kiln *ek, const char *name, kiln_dtype t, int ndim, const sym_id *shape, int is_state);
/* the class of a constant broadcast to a shape (a CONST, viewed if ndim > 0) */
eg_id ek_full(eg_kiln *ek, double value, kiln_dtype t, int ndim, const sym_id *shape);
/* the class of x read through view v (identity views return x) */
eg_id ek_view(eg_kiln *ek, eg_id x, const view *v);
int ek_view_masked(const eg_kiln *ek, uint32_t vid);
/* fold a constant op in dtype t; returns 1 and *out when foldable exactly */
int ek_fold(int op, kiln_dtype t, int nargs, const double *a, double *out);
/* a CONST e-node's value and its arg: the double's bits (kdomain.c) */
int64_t ek_dbits(double v);
double ek_bitsd(int64_t b);

/* ---- graph <-> e-graph (convert.c) ---------------------------------------- */
/* the e-graph of a graph's outputs (ek->roots); NULL with a message on error */
eg_kiln *ek_from_graph(const kiln_graph *g, char *err, size_t cap);

/* a term DAG picked out of the e-graph: what extraction returns */
typedef struct eg_term {
    eg_id node;
    uint32_t kids[EG_MAX_KIDS]; /* term ids */
} eg_term;
typedef struct eg_terms {
    eg_term *t;
    uint32_t n, cap;
    uint32_t *roots; /* one term per ek root */
    double cost;
} eg_terms;
void eg_terms_free(eg_terms *ts);
/* a new graph computing the terms; its syms are translated from ek->syms.
 * Returns NULL with a message when the graph builder refuses something. */
kiln_graph *ek_to_graph(const eg_kiln *ek, const eg_terms *ts, char *err, size_t cap);

/* ---- patterns and rules (pattern.c) ---------------------------------------- */
#define EG_MAX_VARS 8
#define EG_MAX_PNODES 24
#define EG_MAX_CONDS 4

enum { EG_P_VAR = 0xfff0, EG_P_FULL = 0xfff1 };

typedef struct eg_pnode {
    uint16_t op;     /* eg op, EG_P_VAR or EG_P_FULL */
    uint8_t nkids;
    uint8_t pkind;   /* 0 payload free, 1 literal arg, 2 payload variable */
    int32_t var;     /* EG_P_VAR: class var; pkind 2: payload var; FULL: var of the value or -1 */
    int64_t lit;     /* pkind 1: arg */
    double num;      /* FULL: the value when var < 0 */
    uint32_t kids[EG_MAX_KIDS];
} eg_pnode;

typedef struct eg_pattern {
    eg_pnode n[EG_MAX_PNODES];
    uint32_t nn, root;
} eg_pattern;

typedef struct eg_payload {
    int64_t arg;
    int32_t arg2;
    uint8_t dtype;
} eg_payload;

typedef struct eg_subst {
    eg_id root;
    eg_id cls[EG_MAX_VARS];
    eg_payload pv[EG_MAX_VARS];
} eg_subst;

typedef struct eg_clause {
    int kind;           /* index into the condition table of kdomain.c */
    int nargs;
    int args[3];        /* var indices (class or payload var by the clause's signature) */
    double num;
    int has_num;
} eg_clause;

typedef eg_id (*eg_apply_fn)(eg_kiln *ek, const eg_subst *s);

typedef struct eg_rule_def {
    const char *name;
    const char *lhs;     /* pattern */
    const char *rhs;     /* pattern, or "@applier" */
    const char *cond;    /* "" or clauses separated by ',' e.g. "const ?c 1, unmasked ?v" */
    const char *comment; /* one line: why the rule holds */
} eg_rule_def;

typedef struct eg_rule {
    eg_rule_def def;
    eg_pattern lhs, rhs;
    eg_apply_fn fn; /* when rhs is "@name" */
    eg_clause cond[EG_MAX_CONDS];
    int ncond;
    int nvars, npvars;
    char vars[EG_MAX_VARS][16], pvars[EG_MAX_VARS][16];
} eg_rule;

/* compile one rule; 0 on success, else -1 and a message */
int eg_rule_compile(const eg_rule_def *def, eg_rule *out, char *err, size_t cap);
/* all matches of r's lhs rooted at class c (conditions checked) appended to
 * *out; stops at `limit` total entries; returns the number appended */
uint32_t eg_match(eg_kiln *ek, const eg_rule *r, eg_id c, eg_subst **out, uint32_t *n, uint32_t *cap,
                  uint32_t limit);
/* build the pattern under s; returns its class */
eg_id eg_instantiate(eg_kiln *ek, const eg_pattern *p, const eg_subst *s);
/* the rule's right side under s (pattern or applier); EG_NONE = declined */
eg_id eg_rule_apply(eg_kiln *ek, const eg_rule *r, const eg_subst *s);
int eg_cond_check(eg_kiln *ek, const eg_rule *r, const eg_subst *s);
/* condition table (kdomain.c) */
int ek_cond_lookup(const char *name, int *nargs, const char **sig);
int ek_cond_eval(eg_kiln *ek, const eg_clause *c, const eg_subst *s);

/* ---- rule tables (rules.c) --------------------------------------------------- */
typedef struct eg_ruleset {
    eg_rule *rules;
    uint32_t n;
} eg_ruleset;
extern const eg_rule_def eg_default_rules[];
extern const uint32_t eg_default_rule_count;
eg_apply_fn eg_applier_lookup(const char *name);
/* the recognition appliers (recognize.c) */
eg_id ek_recognize_onehot_gather(eg_kiln *ek, const eg_subst *s);
eg_id ek_recognize_softmax(eg_kiln *ek, const eg_subst *s);
eg_id ek_recognize_softmax_contract(eg_kiln *ek, const eg_subst *s);
/* compile a table; NULL and a message naming the bad rule on error */
eg_ruleset *eg_ruleset_new(const eg_rule_def *defs, uint32_t n, char *err, size_t cap);
eg_ruleset *eg_ruleset_default(void);
void eg_ruleset_free(eg_ruleset *rs);

/* ---- the runner (runner.c) ------------------------------------------------------ */
typedef enum eg_stop {
    EG_STOP_NONE = 0,
    EG_STOP_SATURATED,
    EG_STOP_ITERATIONS,
    EG_STOP_NODES,
    EG_STOP_TIME
} eg_stop;
const char *eg_stop_name(eg_stop s);

typedef struct eg_limits {
    uint32_t max_iters;    /* 0: 30 */
    uint32_t max_nodes;    /* 0: 200000 */
    double max_seconds;    /* 0: 10 */
    uint32_t match_limit;  /* backoff: matches per rule per iteration before a ban; 0: 1000 */
    uint32_t ban_length;   /* backoff: first ban in iterations; 0: 2 */
} eg_limits;

typedef struct eg_rule_stats {
    uint64_t matches, applied; /* applied: matches whose union changed the e-graph */
    uint32_t bans, banned_until, threshold, ban_len;
    uint32_t conflicts; /* unions of this rule that merged different shapes/constants: unsound */
} eg_rule_stats;

typedef struct eg_run_report {
    eg_stop stop;
    uint32_t iterations;
    double seconds;
    uint32_t nodes, classes;
    uint32_t nrules;
    eg_rule_stats *rules; /* nrules entries, in ruleset order */
    const eg_ruleset *rs;
} eg_run_report;

eg_stop eg_run(eg_kiln *ek, const eg_ruleset *rs, const eg_limits *lim, eg_run_report *rep);
void eg_report_free(eg_run_report *rep);
/* text / JSON for `kiln explain --egraph` (malloc'd) */
char *eg_report_text(const eg_kiln *ek, const eg_run_report *rep);
char *eg_report_json(const eg_kiln *ek, const eg_run_report *rep);

/* ---- extraction (extract.c) -------------------------------------------------------- */
/* the cost of one node on its own; kids' costs are added by the extractor */
typedef double (*eg_cost_fn)(void *ctx, egraph *eg, const eg_node *n);
double ek_default_cost(void *ctx, egraph *eg, const eg_node *n); /* ctx: eg_kiln */

/* best node per class by tree cost (bottom-up fixpoint); choice[c] and
 * cost[c] for root classes (EG_NONE / INFINITY where nothing is finite).
 * Arrays of eg->nclasses entries. */
void eg_extract_best(egraph *eg, eg_cost_fn f, void *ctx, eg_id *choice, double *cost);
/* the same with shared values amortised: a kid class c with uses[c] > 1
 * (canonical ids; NULL: none), a value the program computes once for that
 * many consumers, adds cost[c] / uses[c]. Plain tree costs count a shared
 * subtree once per use, which grows exponentially with depth (a
 * transformer's residual stream feeds several products per layer: 1e93 at
 * 18 layers) until doubles can no longer tell two forms of a deep kernel
 * apart (gemma3 layer 8 then materialised V / sum as a 268 MB tensor). */
void eg_extract_best_amortised(egraph *eg, eg_cost_fn f, void *ctx, const uint32_t *uses, eg_id *choice, double *cost);
/* the term DAG for roots from a best-choice array */
int eg_terms_from_choice(egraph *eg, const eg_id *choice, const eg_id *roots, uint32_t nroots, eg_terms *out);
/* the K cheapest structurally distinct term trees for the roots together,
 * cheapest first; returns how many were found (<= k), each in out[i] */
uint32_t eg_extract_topk(egraph *eg, eg_cost_fn f, void *ctx, const eg_id *roots, uint32_t nroots, uint32_t k,
                         eg_terms *out);

/* ---- the pipeline step and repeated blocks (blocks.c) ------------------------------ */
/* graph -> e-graph -> saturate -> best extraction -> a new graph (NULL + message on error) */
kiln_graph *eg_optimize_graph(const kiln_graph *g, const eg_ruleset *rs, const eg_limits *lim, eg_run_report *rep,
                              char *err, size_t cap);
/* the same, extracting as primitives_only's low bits say (EG_EXTRACT_*), and
 * by plain tree costs (not amortised over shared values) when the flag
 * EG_PLAIN_COSTS is added */
#define EG_PLAIN_COSTS 8
kiln_graph *eg_optimize_graph_ex(const kiln_graph *g, const eg_ruleset *rs, const eg_limits *lim, int primitives_only,
                                 eg_run_report *rep, char *err, size_t cap);
/* the compile step's rewrite: kiln_graph_optimize with primitive extraction
 * (for backends without compound kernels) and g's bindings carried over;
 * plain_costs is kiln_compile_options.eg_plain; NULL with g's run error set
 * on failure */
kiln_graph *eg_optimize_for_backend(kiln_graph *g, int primitives_only, int plain_costs);
/* the values of primitives_only: every compound op may be extracted (0), none
 * (1: what a backend without compound kernels compiles), or SOFTMAX_CONTRACT
 * only (2: the CPU backend's stream kernels, src/sched/stream.c) */
#define EG_EXTRACT_ALL 0
#define EG_EXTRACT_PRIMITIVES 1
#define EG_EXTRACT_STREAM 2
/* copy g's bound dimensions and input buffers, by name, to dst */
void eg_copy_bindings(const kiln_graph *g, kiln_graph *dst);
/* structure hash of a graph with digits dropped from input names: blocks that
 * differ only in their weights' layer numbers hash alike */
uint64_t eg_graph_signature(const kiln_graph *g);
typedef struct eg_block_cache eg_block_cache;
eg_block_cache *eg_block_cache_new(const eg_ruleset *rs, const eg_limits *lim);
void eg_block_cache_free(eg_block_cache *c);
/* how blocks are extracted: eg_optimize_graph_ex's flags (default 0: every compound op) */
void eg_block_cache_set_flags(eg_block_cache *c, int flags);
/* the optimised form of block g; takes ownership of g. *hit says whether an
 * identical block's saturation was reused (then rep, if given, is zeroed) */
kiln_graph *eg_block_cache_optimize(eg_block_cache *c, kiln_graph *g, int *hit, eg_run_report *rep, char *err,
                                    size_t cap);
void eg_block_cache_stats(const eg_block_cache *c, uint32_t *hits, uint32_t *misses);
/* g rewritten block by block (src/rewrite/cutjoin.c): g cut at its block marks
 * (kiln_graph_mark_block), each block saturated through a block cache (one
 * saturation per distinct block) and extracted as flags say, the results
 * joined into one new graph with g's outputs. g without marks: one block.
 * hits/misses (may be NULL) count the blocks reused and saturated. */
kiln_graph *eg_optimize_blocks(const kiln_graph *g, const eg_ruleset *rs, const eg_limits *lim, int flags,
                               uint32_t *hits, uint32_t *misses, char *err, size_t cap);

#endif
