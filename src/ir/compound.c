/* compound.c — builders and primitive definitions of the compound ops
 * (compound.def): nodes that only the rewriter's recognition rules create
 * and only the kernel layer implements as such.
 *
 * Each compound op has exactly one definition, compound_expand, written with
 * the public primitive builders. The reference interpreter evaluates a
 * compound node by building that expansion over the node's operands, so the
 * meaning of a compound node can never drift from its definition, and a
 * recognition rule is checked by the soundness suite like any other rule.
 * The expansions follow the op order of the nn functions they recognise
 * (kiln_matmul's SUM(MUL), kiln_softmax's chain), so a recognised node
 * evaluates bit-identically to the subgraph it replaced.
 *
 * Invariants: builders append nodes in topological order and read operands
 * through their views like every builder (node.src are tensors); they never
 * broadcast — the rewriter hands them operands of equal shape.
 */
#include "compound.h"

#include <string.h>

#include "base.h"

static int tensor_ok(kiln_graph *g, const char *op, kiln_tensor t) {
    if (t >= 0 && t < g->ntensors) return 1;
    graph_error(g, KILN_ERR_INVALID, "%s: invalid tensor id %d", op, (int)t);
    return 0;
}

static const view *tv(const kiln_graph *g, kiln_tensor t) { return &g->views[g->tensors[t].view]; }
static kiln_dtype tdt(const kiln_graph *g, kiln_tensor t) { return g->nodes[g->tensors[t].node].dtype; }

/* a and b have one shape and one dtype */
static int same_operands(kiln_graph *g, const char *op, kiln_tensor a, kiln_tensor b) {
    const view *va = tv(g, a), *vb = tv(g, b);
    int same = view_ndim(va) == view_ndim(vb) && tdt(g, a) == tdt(g, b);
    for (int i = 0; same && i < view_ndim(va); i++) same = view_shape(va)[i] == view_shape(vb)[i];
    if (same) return 1;
    char sa[256], sb[256];
    graph_error(g, KILN_ERR_SHAPE, "%s: operands %s %s and %s %s need one shape and dtype", op,
                kiln_dtype_name(tdt(g, a)), graph_shape_str(g, view_ndim(va), view_shape(va), sa, sizeof sa),
                kiln_dtype_name(tdt(g, b)), graph_shape_str(g, view_ndim(vb), view_shape(vb), sb, sizeof sb));
    return 0;
}

static int axis_of(kiln_graph *g, const char *op, kiln_tensor t, int axis) {
    int n = view_ndim(tv(g, t));
    int a = axis < 0 ? axis + n : axis;
    if (a < 0 || a >= n) {
        graph_error(g, KILN_ERR_INVALID, "%s: axis %d out of range for %d dimensions", op, axis, n);
        return -1;
    }
    return a;
}

/* append a node reading src[0..arity) and return the tensor reading it densely */
static kiln_tensor add_compound(kiln_graph *g, op_kind op, kiln_dtype t, int ndim, const sym_id *shape,
                                const kiln_tensor *src, int axis) {
    node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.dtype = t;
    n.ndim = ndim;
    for (int i = 0; i < ndim; i++) n.shape[i] = shape[i];
    n.src[0] = n.src[1] = n.src[2] = -1;
    for (int k = 0; k < op_table[op].arity; k++) n.src[k] = src[k];
    n.axis = axis;
    KILN_GROW(g->nodes, g->cap_nodes, g->nnodes + 1);
    g->nodes[g->nnodes] = n;
    int32_t id = g->nnodes++;
    KILN_GROW(g->views, g->cap_views, g->nviews + 1);
    view_identity(&g->views[g->nviews], g->syms, ndim, shape);
    KILN_GROW(g->tensors, g->cap_tensors, g->ntensors + 1);
    g->tensors[g->ntensors].node = id;
    g->tensors[g->ntensors].view = g->nviews++;
    return g->ntensors++;
}

kiln_tensor compound_contract(kiln_graph *g, kiln_tensor a, kiln_tensor b, int axis) {
    const char *op = "CONTRACT";
    if (!g || g->build_failed) return KILN_NONE;
    if (!tensor_ok(g, op, a) || !tensor_ok(g, op, b) || !same_operands(g, op, a, b)) return KILN_NONE;
    if (kiln_dtype_is_block(tdt(g, a))) {
        graph_error(g, KILN_ERR_DTYPE, "%s: cannot contract %s operands (cast them first)", op,
                    kiln_dtype_name(tdt(g, a)));
        return KILN_NONE;
    }
    int k = axis_of(g, op, a, axis);
    if (k < 0) return KILN_NONE;
    const view *va = tv(g, a);
    sym_id shape[KILN_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < view_ndim(va); i++)
        if (i != k) shape[nd++] = view_shape(va)[i];
    kiln_tensor src[2] = {a, b};
    return add_compound(g, OP_CONTRACT, tdt(g, a), nd, shape, src, k);
}

kiln_tensor compound_softmax_online(kiln_graph *g, kiln_tensor x, kiln_tensor c, int axis) {
    const char *op = "SOFTMAX_ONLINE";
    if (!g || g->build_failed) return KILN_NONE;
    if (!tensor_ok(g, op, x) || !tensor_ok(g, op, c) || !same_operands(g, op, x, c)) return KILN_NONE;
    if (!kiln_dtype_is_float(tdt(g, x))) {
        graph_error(g, KILN_ERR_DTYPE, "%s: dtype %s is not a float dtype", op, kiln_dtype_name(tdt(g, x)));
        return KILN_NONE;
    }
    int k = axis_of(g, op, x, axis);
    if (k < 0) return KILN_NONE;
    const view *vx = tv(g, x);
    kiln_tensor src[2] = {x, c};
    return add_compound(g, OP_SOFTMAX_ONLINE, tdt(g, x), view_ndim(vx), view_shape(vx), src, k);
}

kiln_tensor compound_softmax_contract(kiln_graph *g, kiln_tensor x, kiln_tensor c, kiln_tensor v, int axis) {
    const char *op = "SOFTMAX_CONTRACT";
    if (!g || g->build_failed) return KILN_NONE;
    if (!tensor_ok(g, op, x) || !tensor_ok(g, op, c) || !tensor_ok(g, op, v) || !same_operands(g, op, x, c) ||
        !same_operands(g, op, x, v))
        return KILN_NONE;
    if (!kiln_dtype_is_float(tdt(g, x))) {
        graph_error(g, KILN_ERR_DTYPE, "%s: dtype %s is not a float dtype", op, kiln_dtype_name(tdt(g, x)));
        return KILN_NONE;
    }
    int k = axis_of(g, op, x, axis);
    if (k < 0) return KILN_NONE;
    const view *vx = tv(g, x);
    sym_id shape[KILN_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < view_ndim(vx); i++)
        if (i != k) shape[nd++] = view_shape(vx)[i];
    kiln_tensor src[3] = {x, c, v};
    return add_compound(g, OP_SOFTMAX_CONTRACT, tdt(g, x), nd, shape, src, k);
}

kiln_tensor compound_build(kiln_graph *g, op_kind op, const kiln_tensor *src, int axis) {
    if (op_is_compound(op)) {
        switch (compound_kind_of(op)) {
        case COMPOUND_CONTRACT: return compound_contract(g, src[0], src[1], axis);
        case COMPOUND_SOFTMAX_ONLINE: return compound_softmax_online(g, src[0], src[1], axis);
        case COMPOUND_SOFTMAX_CONTRACT: return compound_softmax_contract(g, src[0], src[1], src[2], axis);
        }
    }
    if (g) graph_error(g, KILN_ERR_INVALID, "compound_build: op %d is not a compound op", (int)op);
    return KILN_NONE;
}

/* ---- definitions ------------------------------------------------------------ */

/* kiln_softmax's chain with the scale as a tensor: the max is negated and
 * added (kiln_sub), and the sum's reciprocal multiplies (kiln_div) */
static kiln_tensor softmax_expansion(kiln_graph *g, kiln_tensor x, kiln_tensor c, int k) {
    kiln_dtype t = kiln_tensor_dtype(g, x);
    kiln_tensor m = kiln_unsqueeze(g, kiln_max(g, x, k), k);
    kiln_tensor d = kiln_add(g, x, kiln_mul(g, m, kiln_const(g, -1.0, t)));
    kiln_tensor e = kiln_exp2(g, kiln_mul(g, d, c));
    kiln_tensor s = kiln_unsqueeze(g, kiln_sum(g, e, k), k);
    return kiln_mul(g, e, kiln_recip(g, s));
}

kiln_tensor compound_expand(kiln_graph *g, op_kind op, const kiln_tensor *src, int axis) {
    if (!g || g->build_failed) return KILN_NONE;
    const char *name = op >= 0 && op < OP_COUNT ? op_table[op].name : "?";
    for (int i = 0; op_is_compound(op) && i < op_table[op].arity; i++)
        if (!tensor_ok(g, name, src[i])) return KILN_NONE;
    if (op_is_compound(op)) {
        switch (compound_kind_of(op)) {
        case COMPOUND_CONTRACT:
            if (!same_operands(g, name, src[0], src[1]) || axis_of(g, name, src[0], axis) < 0) return KILN_NONE;
            return kiln_sum(g, kiln_mul(g, src[0], src[1]), axis);
        case COMPOUND_SOFTMAX_ONLINE: {
            if (!same_operands(g, name, src[0], src[1])) return KILN_NONE;
            int k = axis_of(g, name, src[0], axis);
            if (k < 0) return KILN_NONE;
            return softmax_expansion(g, src[0], src[1], k);
        }
        case COMPOUND_SOFTMAX_CONTRACT: {
            if (!same_operands(g, name, src[0], src[1]) || !same_operands(g, name, src[0], src[2])) return KILN_NONE;
            int k = axis_of(g, name, src[0], axis);
            if (k < 0) return KILN_NONE;
            return kiln_sum(g, kiln_mul(g, softmax_expansion(g, src[0], src[1], k), src[2]), k);
        }
        }
    }
    graph_error(g, KILN_ERR_INVALID, "compound_expand: op %d is not a compound op", (int)op);
    return KILN_NONE;
}

const char *compound_definition(op_kind op) {
    if (!op_is_compound(op)) return "";
    switch (compound_kind_of(op)) {
    case COMPOUND_CONTRACT: return "CONTRACT(a, b) axis k := SUM_k(MUL(a, b))";
    case COMPOUND_SOFTMAX_ONLINE:
        return "SOFTMAX_ONLINE(x, c) axis k := MUL(e, RECIP(SUM_k e)) with e = EXP2(MUL(ADD(x, -MAX_k x), c)), "
               "max and sum kept along k";
    case COMPOUND_SOFTMAX_CONTRACT:
        return "SOFTMAX_CONTRACT(x, c, v) axis k := SUM_k(MUL(SOFTMAX_ONLINE_k(x, c), v)), streamed along k";
    }
    return "";
}
