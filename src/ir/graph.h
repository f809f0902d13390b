/* graph.h — the internal form of a kiln_graph: nodes of primitive ops whose
 * operands are tensors, where a tensor is a node seen through a view.
 *
 * Invariants:
 *  - nodes[] is in topological order: every operand refers to an earlier node.
 *  - node.shape is the node's own (dense) result shape; a tensor's shape is the
 *    outer shape of its view, which reads the node's dense result.
 *  - Elementwise binary nodes have operands of equal shape and dtype (the
 *    builder broadcasts with expand views before creating them).
 *  - Once g->status != KILN_OK from a builder call, no node is added.
 */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include "kiln.h"
#include "sym.h"
#include "view.h"

/* the primitives of ops.def, then the compound ops of compound.def (only the
 * rewriter creates those; see compound.def and compound.h). OP_COUNT is not
 * an enumerator, so a switch over op_kind without `default:` lists exactly
 * the ops, and -Wswitch names the one it misses. */
typedef enum op_kind {
#define X(name, arity, flags, xcost, kcost) OP_##name,
#include "ops.def"
#include "compound.def"
#undef X
} op_kind;

/* ops [0, OP_PRIM_COUNT) are the primitives, [OP_PRIM_COUNT, OP_COUNT) the
 * compound ops; plain int constants, so that comparing an op_kind with them
 * is no comparison between two enum types */
enum op_counts {
    OP_PRIM_N = 0
#define X(name, arity, flags, xcost, kcost) +1
#include "ops.def"
#undef X
    ,
    OP_COMPOUND_N = 0
#define X(name, arity, flags, xcost, kcost) +1
#include "compound.def"
#undef X
};
#define OP_PRIM_COUNT ((int)OP_PRIM_N)
#define OP_COUNT ((int)OP_PRIM_N + (int)OP_COMPOUND_N)

/* the FLAGS column of ops.def (documented there) */
enum {
    OPF_LEAF = 1, OPF_UNARY = 2, OPF_BINARY = 4, OPF_REDUCE = 8, OPF_DATA = 16, OPF_LAYOUT = 32, OPF_COMPOUND = 64,
    OPF_AXIS = 128, OPF_FINITE0 = 256, OPF_VEC = 512
};

/* one row of ops.def or compound.def */
typedef struct op_info {
    const char *name;
    int arity;
    unsigned flags;
    double xcost; /* extraction cost per result element */
    double kcost; /* generic-kernel work per element (elementwise ops) */
} op_info;

extern const op_info op_table[OP_COUNT];

/* the languages of ops.def's spelling columns (codegen's dialects name theirs) */
typedef enum op_lang { OP_LANG_C = 0, OP_LANG_OPENCL, OP_LANG_CUDA, OP_LANG_COUNT } op_lang;

/* one row of ops.def's KILN_UNARY_OPS (NULL members for the other ops) */
typedef struct op_unary_info {
    float (*f32)(float x);    /* the reference meaning in f32 (the interpreter) */
    double (*f64)(double x);  /* in double (constant folding, rounded to f32 after) */
    const char *spell[OP_LANG_COUNT]; /* printf format of the f32 expression of one operand */
} op_unary_info;
extern const op_unary_info op_unary[OP_COUNT];

/* the case labels of every unary op, for switches over op_kind that treat
 * the class alike: `switch (op) { OP_UNARY_CASES ...; case OP_ADD: ...` */
#define OP_UNARY_CASE_(name, f32, f64, c, cl, cu) case OP_##name:
#define OP_UNARY_CASES KILN_UNARY_OPS(OP_UNARY_CASE_)

/* a unary node (build.c: the public unary builders and the e-graph's
 * conversion call it); op must be OPF_UNARY */
kiln_tensor graph_unary(kiln_graph *g, op_kind op, kiln_tensor x);

typedef struct node {
    op_kind op;
    kiln_dtype dtype;
    int ndim;
    sym_id shape[KILN_MAX_DIMS]; /* result shape (ndim entries) */
    int32_t src[3];              /* operand tensor ids (op_table[op].arity entries) */
    int axis;                    /* SUM, MAX: reduced axis of the operand; IOTA: counted axis */
    double value;                /* CONST */
    char *name;                  /* INPUT: its name */
    int is_state;                /* INPUT: persistent state tensor */
} node;

typedef struct tensor {
    int32_t node;
    int32_t view; /* index into g->views */
} tensor;

typedef struct graph_output {
    char *name;
    int32_t tensor;
} graph_output;

/* a condition the builder could not prove (e.g. a symbolic slice's stop <=
 * size): it must evaluate non-zero at run time, else the run fails with msg */
typedef struct graph_check {
    sym_id cond;
    char *msg;
} graph_check;

typedef struct input_binding {
    char *name;
    void *data;
    size_t bytes;
    int constant; /* bound with kiln_bind_weight: the contents stay as they are while bound */
    uint64_t gen; /* which bind call made it (per graph, from 1; copied with the binding):
                     a copy derived from the buffer (sched/repack_layout.h) is valid while the
                     binding it was built from is */
} input_binding;

typedef struct output_value {
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    kiln_dtype dtype;
    void *data; /* dense, malloc'd */
    size_t bytes;
} output_value;

struct kiln_graph {
    sym_pool *syms;
    node *nodes;
    int32_t nnodes, cap_nodes;
    tensor *tensors;
    int32_t ntensors, cap_tensors;
    view *views;
    int32_t nviews, cap_views;
    graph_output *outputs;
    int32_t noutputs, cap_outputs;
    graph_check *checks;
    int32_t nchecks, cap_checks;
    /* kiln_graph_mark_block: node indices where a block (a repeated layer)
     * starts, ascending; the compile step's rewrite saturates each distinct
     * block once (src/rewrite/cutjoin.c) */
    int32_t *block_marks;
    int32_t nblock_marks, cap_block_marks;

    /* run-time bindings */
    int64_t *dim_values;  /* per sym variable number */
    uint8_t *dim_bound;
    uint32_t ndim_values;
    input_binding *inputs;
    int32_t ninputs, cap_inputs;
    uint64_t bind_gen; /* the last input_binding.gen handed out */
    kiln_weight_release_fn weight_release; /* kiln_graph_on_weight_release: NULL, or the owner's hook */
    void *weight_release_ctx;
    output_value *results; /* per output, after a run */

    kiln_status status; /* builder error (sticky) or the last run's status */
    int build_failed;   /* a builder call failed: later builder calls do nothing */
    char error[512];
};

/* free the results of the last run (g->results, written by the interpreter
 * or a compiled program); safe to call when there are none */
void graph_free_results(kiln_graph *g);

/* set the graph's error (first one wins for builder errors); printf-style */
void graph_error(kiln_graph *g, kiln_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* the run-time error: overwrites any previous run error, never a builder one */
void graph_run_error(kiln_graph *g, kiln_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* record a run-time condition unless it is provably true (or provably false:
 * then it is a builder error and this returns 0) */
int graph_require(kiln_graph *g, sym_id cond, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* check every recorded condition under the run's variable values; reports the
 * first failure with graph_run_error and returns its status */
kiln_status graph_run_checks(kiln_graph *g, const int64_t *values, const uint8_t *bound);

/* a tensor of g reading x through view v (v's syms in g's pool): v stacked
 * on x's own view (made CONTIGUOUS first when the stack would be too deep) */
kiln_tensor graph_view_onto(kiln_graph *g, kiln_tensor x, const view *v);
/* the builder call that makes a node of `op` again: operands k (arity of
 * op), dtype (CONST, IOTA, CAST), axis (reductions, IOTA, compounds), value
 * (CONST), the shape (IOTA; ndim entries of g's pool). Not for OP_INPUT. */
kiln_tensor graph_rebuild_op(kiln_graph *g, op_kind op, kiln_dtype dtype, int axis, double value, int ndim,
                             const sym_id *shape, const kiln_tensor *k);
const node *graph_node(const kiln_graph *g, int32_t id);
const tensor *graph_tensor(const kiln_graph *g, kiln_tensor t);
const view *graph_tensor_view(const kiln_graph *g, kiln_tensor t);
/* the tensor's shape as "(seq, 64)" into buf */
char *graph_shape_str(const kiln_graph *g, int ndim, const sym_id *shape, char *buf, size_t cap);

#endif
