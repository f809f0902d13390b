/* build.c — the graph builder: one public function per primitive op and per
 * movement view, each checking its operands and either adding a node (or a
 * view) or setting the graph's sticky error.
 *
 * Invariants kept here (see graph.h): nodes are appended in topological
 * order; binary nodes get operands of equal shape and dtype (numpy-style
 * broadcasting becomes reshape+expand views); a view that would need too many
 * layers is materialised with a CONTIGUOUS node first.
 */
#include <stdarg.h>
#include <string.h>

#include "base.h"
#include "graph.h"

#define SHAPE_BUF 256

/* ---- small helpers ---------------------------------------------------- */

/* every builder starts with this: after an error nothing more is built */
#define BUILDER_GUARD(g)                                                            \
    do {                                                                            \
        if (!(g) || (g)->build_failed) return KILN_NONE;                            \
    } while (0)

static int check_tensor(kiln_graph *g, const char *op, kiln_tensor t) {
    if (t >= 0 && t < g->ntensors) return 1;
    graph_error(g, KILN_ERR_INVALID, "%s: invalid tensor id %d", op, (int)t);
    return 0;
}

static const view *tview(const kiln_graph *g, kiln_tensor t) { return &g->views[g->tensors[t].view]; }
static kiln_dtype tdtype(const kiln_graph *g, kiln_tensor t) { return g->nodes[g->tensors[t].node].dtype; }
static int tndim(const kiln_graph *g, kiln_tensor t) { return view_ndim(tview(g, t)); }
static const sym_id *tshape(const kiln_graph *g, kiln_tensor t) { return view_shape(tview(g, t)); }

static char *tshape_str(const kiln_graph *g, kiln_tensor t, char *buf) {
    return graph_shape_str(g, tndim(g, t), tshape(g, t), buf, SHAPE_BUF);
}

static int is_one(const kiln_graph *g, sym_id s) {
    int64_t v;
    return sym_is_const(g->syms, s, &v) && v == 1;
}

static int32_t add_view(kiln_graph *g, const view *v) {
    KILN_GROW(g->views, g->cap_views, g->nviews + 1);
    g->views[g->nviews] = *v;
    return g->nviews++;
}

static kiln_tensor add_tensor(kiln_graph *g, int32_t node_id, int32_t view_id) {
    KILN_GROW(g->tensors, g->cap_tensors, g->ntensors + 1);
    g->tensors[g->ntensors].node = node_id;
    g->tensors[g->ntensors].view = view_id;
    return g->ntensors++;
}

/* append a node (its fields filled by the caller) and return the tensor that
 * reads it densely */
static kiln_tensor add_node(kiln_graph *g, const node *n) {
    KILN_GROW(g->nodes, g->cap_nodes, g->nnodes + 1);
    g->nodes[g->nnodes] = *n;
    int32_t id = g->nnodes++;
    view v;
    view_identity(&v, g->syms, n->ndim, n->shape);
    return add_tensor(g, id, add_view(g, &v));
}

static node node_init(op_kind op, kiln_dtype dt, int ndim, const sym_id *shape) {
    node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.dtype = dt;
    n.ndim = ndim;
    for (int i = 0; i < ndim; i++) n.shape[i] = shape[i];
    n.src[0] = n.src[1] = n.src[2] = -1;
    return n;
}

static int norm_axis(kiln_graph *g, const char *op, kiln_tensor t, int axis, int extra) {
    int n = tndim(g, t) + extra;
    int a = axis < 0 ? axis + n : axis;
    if (a < 0 || a >= n) {
        char sb[SHAPE_BUF];
        graph_error(g, KILN_ERR_INVALID, "%s: axis %d out of range for shape %s", op, axis, tshape_str(g, t, sb));
        return -1;
    }
    return a;
}

static int check_shape_syms(kiln_graph *g, const char *op, int ndim, const kiln_sym *shape) {
    if (ndim < 0 || ndim > KILN_MAX_DIMS) {
        graph_error(g, KILN_ERR_INVALID, "%s: %d dimensions (at most %d)", op, ndim, KILN_MAX_DIMS);
        return 0;
    }
    for (int i = 0; i < ndim; i++) {
        int64_t lo, hi;
        if (shape[i] < 0 || (uint32_t)shape[i] >= sym_count(g->syms)) {
            graph_error(g, KILN_ERR_INVALID, "%s: dimension %d is not a valid symbolic size", op, i);
            return 0;
        }
        sym_bounds(g->syms, (sym_id)shape[i], &lo, &hi);
        if (hi < 0) {
            graph_error(g, KILN_ERR_SHAPE, "%s: dimension %d is negative", op, i);
            return 0;
        }
    }
    return 1;
}

/* ---- views: apply a movement op, materialising first when too deep ---- */

typedef int (*view_fn)(view *out, const view *in, sym_pool *p, const void *arg);

static kiln_tensor apply_view(kiln_graph *g, kiln_tensor x, view_fn f, const void *arg);

static kiln_tensor with_view(kiln_graph *g, kiln_tensor x, const view *v) {
    return add_tensor(g, g->tensors[x].node, add_view(g, v));
}

/* ---- leaves ----------------------------------------------------------- */

static int parse_shape(kiln_graph *g, const char *what, const char *text, int *ndim, sym_id *shape) {
    char err[200];
    *ndim = 0;
    if (!text) text = "";
    const char *p = text;
    while (*p == ' ') p++;
    if (!*p) return 1;
    for (;;) {
        const char *start = p;
        int depth = 0;
        while (*p && !(*p == ',' && depth == 0)) {
            if (*p == '(') depth++;
            if (*p == ')') depth--;
            p++;
        }
        if (*ndim >= KILN_MAX_DIMS) {
            graph_error(g, KILN_ERR_INVALID, "%s: shape '%s' has more than %d dimensions", what, text, KILN_MAX_DIMS);
            return 0;
        }
        char part[256];
        size_t len = (size_t)(p - start);
        if (len >= sizeof part) len = sizeof part - 1;
        memcpy(part, start, len);
        part[len] = 0;
        sym_id s = sym_parse(g->syms, part, err, sizeof err);
        if (s == SYM_NONE) {
            graph_error(g, KILN_ERR_INVALID, "%s: bad shape '%s': %s", what, text, err);
            return 0;
        }
        shape[(*ndim)++] = s;
        if (!*p) break;
        p++;
    }
    return 1;
}

static kiln_tensor make_input(kiln_graph *g, const char *name, kiln_dtype t, int ndim, const sym_id *shape,
                              int is_state) {
    const char *what = is_state ? "kiln_state" : "kiln_input";
    if (!name || !name[0]) {
        graph_error(g, KILN_ERR_INVALID, "%s: an input needs a name", what);
        return KILN_NONE;
    }
    if ((int)t < 0 || t >= KILN_DTYPE_COUNT) {
        graph_error(g, KILN_ERR_DTYPE, "%s '%s': unknown dtype %d", what, name, (int)t);
        return KILN_NONE;
    }
    for (int32_t i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].op == OP_INPUT && strcmp(g->nodes[i].name, name) == 0) {
            graph_error(g, KILN_ERR_INVALID, "%s: an input named '%s' already exists", what, name);
            return KILN_NONE;
        }
    }
    if (kiln_dtype_is_block(t)) {
        int64_t last;
        if (ndim == 0) {
            graph_error(g, KILN_ERR_SHAPE, "%s '%s': a %s tensor needs at least one axis", what, name, kiln_dtype_name(t));
            return KILN_NONE;
        }
        if (sym_is_const(g->syms, shape[ndim - 1], &last) && kiln_dtype_bytes(t, last) == 0) {
            graph_error(g, KILN_ERR_SHAPE, "%s '%s': last axis %lld is not a multiple of the %s block", what, name,
                        (long long)last, kiln_dtype_name(t));
            return KILN_NONE;
        }
    }
    node n = node_init(OP_INPUT, t, ndim, shape);
    n.name = kiln_xstrdup(name);
    n.is_state = is_state;
    return add_node(g, &n);
}

kiln_tensor kiln_input(kiln_graph *g, const char *name, kiln_dtype t, const char *shape) {
    BUILDER_GUARD(g);
    int ndim;
    sym_id dims[KILN_MAX_DIMS];
    if (!parse_shape(g, "kiln_input", shape, &ndim, dims)) return KILN_NONE;
    return make_input(g, name, t, ndim, dims, 0);
}

kiln_tensor kiln_state(kiln_graph *g, const char *name, kiln_dtype t, const char *shape) {
    BUILDER_GUARD(g);
    int ndim;
    sym_id dims[KILN_MAX_DIMS];
    if (!parse_shape(g, "kiln_state", shape, &ndim, dims)) return KILN_NONE;
    return make_input(g, name, t, ndim, dims, 1);
}

kiln_tensor kiln_input_dims(kiln_graph *g, const char *name, kiln_dtype t, int ndim, const kiln_sym *shape) {
    BUILDER_GUARD(g);
    if (!check_shape_syms(g, "kiln_input_dims", ndim, shape)) return KILN_NONE;
    sym_id dims[KILN_MAX_DIMS];
    for (int i = 0; i < ndim; i++) dims[i] = (sym_id)shape[i];
    return make_input(g, name, t, ndim, dims, 0);
}

kiln_tensor kiln_const(kiln_graph *g, double value, kiln_dtype t) {
    BUILDER_GUARD(g);
    if ((int)t < 0 || t >= KILN_DTYPE_COUNT || kiln_dtype_is_block(t)) {
        graph_error(g, KILN_ERR_DTYPE, "CONST: dtype %s cannot hold a constant",
                    (int)t >= 0 && t < KILN_DTYPE_COUNT ? kiln_dtype_name(t) : "?");
        return KILN_NONE;
    }
    node n = node_init(OP_CONST, t, 0, NULL);
    n.value = value;
    return add_node(g, &n);
}

kiln_tensor kiln_full(kiln_graph *g, double value, kiln_dtype t, int ndim, const kiln_sym *shape) {
    BUILDER_GUARD(g);
    if (!check_shape_syms(g, "kiln_full", ndim, shape)) return KILN_NONE;
    kiln_tensor c = kiln_const(g, value, t);
    kiln_sym ones[KILN_MAX_DIMS];
    for (int i = 0; i < ndim; i++) ones[i] = kiln_sym_int(g, 1);
    c = kiln_reshape(g, c, ndim, ones);
    return kiln_expand(g, c, ndim, shape);
}

kiln_tensor kiln_iota(kiln_graph *g, kiln_dtype t, int ndim, const kiln_sym *shape, int axis) {
    BUILDER_GUARD(g);
    if (!check_shape_syms(g, "IOTA", ndim, shape)) return KILN_NONE;
    if (axis < 0) axis += ndim;
    if (axis < 0 || axis >= ndim) {
        graph_error(g, KILN_ERR_INVALID, "IOTA: axis out of range for %d dimensions", ndim);
        return KILN_NONE;
    }
    if (t != KILN_I32 && !kiln_dtype_is_float(t)) {
        graph_error(g, KILN_ERR_DTYPE, "IOTA: dtype %s (need i32 or a float dtype)", kiln_dtype_name(t));
        return KILN_NONE;
    }
    sym_id dims[KILN_MAX_DIMS];
    for (int i = 0; i < ndim; i++) dims[i] = (sym_id)shape[i];
    node n = node_init(OP_IOTA, t, ndim, dims);
    n.axis = axis;
    return add_node(g, &n);
}

/* ---- elementwise ------------------------------------------------------ */

kiln_tensor graph_unary(kiln_graph *g, op_kind op, kiln_tensor x) {
    KILN_ASSERT(op_table[op].flags & OPF_UNARY);
    BUILDER_GUARD(g);
    const char *name = op_table[op].name;
    if (!check_tensor(g, name, x)) return KILN_NONE;
    kiln_dtype t = tdtype(g, x);
    if (!kiln_dtype_is_float(t)) {
        char sb[SHAPE_BUF];
        graph_error(g, KILN_ERR_DTYPE, "%s: dtype %s %s is not a float dtype (f32, f16, bf16)", name,
                    kiln_dtype_name(t), tshape_str(g, x, sb));
        return KILN_NONE;
    }
    node n = node_init(op, t, tndim(g, x), tshape(g, x));
    n.src[0] = x;
    return add_node(g, &n);
}

kiln_tensor kiln_exp2(kiln_graph *g, kiln_tensor x) { return graph_unary(g, OP_EXP2, x); }
kiln_tensor kiln_log2(kiln_graph *g, kiln_tensor x) { return graph_unary(g, OP_LOG2, x); }
kiln_tensor kiln_sin(kiln_graph *g, kiln_tensor x) { return graph_unary(g, OP_SIN, x); }
kiln_tensor kiln_sqrt(kiln_graph *g, kiln_tensor x) { return graph_unary(g, OP_SQRT, x); }
kiln_tensor kiln_recip(kiln_graph *g, kiln_tensor x) { return graph_unary(g, OP_RECIP, x); }

/* numpy broadcasting: align trailing axes; sizes must match or be 1 */
static int broadcast_pair(kiln_graph *g, const char *op, kiln_tensor *a, kiln_tensor *b) {
    int na = tndim(g, *a), nb = tndim(g, *b);
    int n = na > nb ? na : nb;
    sym_id out[KILN_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int ia = i - (n - na), ib = i - (n - nb);
        sym_id da = ia >= 0 ? tshape(g, *a)[ia] : sym_const(g->syms, 1);
        sym_id db = ib >= 0 ? tshape(g, *b)[ib] : sym_const(g->syms, 1);
        if (da == db || is_one(g, db)) out[i] = da;
        else if (is_one(g, da)) out[i] = db;
        else {
            char sa[SHAPE_BUF], sb[SHAPE_BUF];
            graph_error(g, KILN_ERR_SHAPE, "%s: shapes %s and %s do not broadcast (axis %d)", op,
                        tshape_str(g, *a, sa), tshape_str(g, *b, sb), i);
            return 0;
        }
    }
    kiln_tensor *ts[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        kiln_tensor t = *ts[k];
        int nt = tndim(g, t);
        if (nt < n) {
            kiln_sym dims[KILN_MAX_DIMS];
            for (int i = 0; i < n - nt; i++) dims[i] = (kiln_sym)sym_const(g->syms, 1);
            for (int i = 0; i < nt; i++) dims[n - nt + i] = (kiln_sym)tshape(g, t)[i];
            t = kiln_reshape(g, t, n, dims);
            if (t == KILN_NONE) return 0;
        }
        int same = 1;
        for (int i = 0; i < n; i++) same &= tshape(g, t)[i] == out[i];
        if (!same) {
            kiln_sym dims[KILN_MAX_DIMS];
            for (int i = 0; i < n; i++) dims[i] = (kiln_sym)out[i];
            t = kiln_expand(g, t, n, dims);
            if (t == KILN_NONE) return 0;
        }
        *ts[k] = t;
    }
    return 1;
}

static kiln_tensor binary(kiln_graph *g, op_kind op, kiln_tensor a, kiln_tensor b) {
    BUILDER_GUARD(g);
    const char *name = op_table[op].name;
    if (!check_tensor(g, name, a) || !check_tensor(g, name, b)) return KILN_NONE;
    kiln_dtype ta = tdtype(g, a), tb = tdtype(g, b);
    if (ta != tb || kiln_dtype_is_block(ta)) {
        char sa[SHAPE_BUF], sb[SHAPE_BUF];
        graph_error(g, KILN_ERR_DTYPE, "%s: operands %s %s and %s %s need one equal, non-block dtype", name,
                    kiln_dtype_name(ta), tshape_str(g, a, sa), kiln_dtype_name(tb), tshape_str(g, b, sb));
        return KILN_NONE;
    }
    if (!broadcast_pair(g, name, &a, &b)) return KILN_NONE;
    node n = node_init(op, ta, tndim(g, a), tshape(g, a));
    n.src[0] = a;
    n.src[1] = b;
    return add_node(g, &n);
}

kiln_tensor kiln_add(kiln_graph *g, kiln_tensor a, kiln_tensor b) { return binary(g, OP_ADD, a, b); }
kiln_tensor kiln_mul(kiln_graph *g, kiln_tensor a, kiln_tensor b) { return binary(g, OP_MUL, a, b); }
kiln_tensor kiln_mod(kiln_graph *g, kiln_tensor a, kiln_tensor b) { return binary(g, OP_MOD, a, b); }
kiln_tensor kiln_lt(kiln_graph *g, kiln_tensor a, kiln_tensor b) { return binary(g, OP_LT, a, b); }

/* ---- reductions ------------------------------------------------------- */

static kiln_tensor reduce(kiln_graph *g, op_kind op, kiln_tensor x, int axis) {
    BUILDER_GUARD(g);
    const char *name = op_table[op].name;
    if (!check_tensor(g, name, x)) return KILN_NONE;
    int a = norm_axis(g, name, x, axis, 0);
    if (a < 0) return KILN_NONE;
    kiln_dtype t = tdtype(g, x);
    if (kiln_dtype_is_block(t)) {
        graph_error(g, KILN_ERR_DTYPE, "%s: cannot reduce a %s tensor (cast it first)", name, kiln_dtype_name(t));
        return KILN_NONE;
    }
    sym_id dims[KILN_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < tndim(g, x); i++)
        if (i != a) dims[nd++] = tshape(g, x)[i];
    node n = node_init(op, t, nd, dims);
    n.src[0] = x;
    n.axis = a;
    return add_node(g, &n);
}

kiln_tensor kiln_sum(kiln_graph *g, kiln_tensor x, int axis) { return reduce(g, OP_SUM, x, axis); }
kiln_tensor kiln_max(kiln_graph *g, kiln_tensor x, int axis) { return reduce(g, OP_MAX, x, axis); }

/* ---- data ------------------------------------------------------------- */

kiln_tensor kiln_gather(kiln_graph *g, kiln_tensor table, kiln_tensor idx) {
    BUILDER_GUARD(g);
    if (!check_tensor(g, "GATHER", table) || !check_tensor(g, "GATHER", idx)) return KILN_NONE;
    char sa[SHAPE_BUF], sb[SHAPE_BUF];
    if (tdtype(g, idx) != KILN_I32) {
        graph_error(g, KILN_ERR_DTYPE, "GATHER: indices %s %s must be i32", kiln_dtype_name(tdtype(g, idx)),
                    tshape_str(g, idx, sb));
        return KILN_NONE;
    }
    int nt = tndim(g, table), ni = tndim(g, idx);
    if (nt < 1 || nt - 1 + ni > KILN_MAX_DIMS) {
        graph_error(g, KILN_ERR_SHAPE, "GATHER: table %s with indices %s: need a table with >= 1 axis and <= %d result axes",
                    tshape_str(g, table, sa), tshape_str(g, idx, sb), KILN_MAX_DIMS);
        return KILN_NONE;
    }
    sym_id dims[KILN_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < ni; i++) dims[nd++] = tshape(g, idx)[i];
    for (int i = 1; i < nt; i++) dims[nd++] = tshape(g, table)[i];
    node n = node_init(OP_GATHER, tdtype(g, table), nd, dims);
    n.src[0] = table;
    n.src[1] = idx;
    return add_node(g, &n);
}

kiln_tensor kiln_scatter(kiln_graph *g, kiln_tensor state, kiln_tensor idx, kiln_tensor values) {
    BUILDER_GUARD(g);
    if (!check_tensor(g, "SCATTER", state) || !check_tensor(g, "SCATTER", idx) || !check_tensor(g, "SCATTER", values))
        return KILN_NONE;
    char sa[SHAPE_BUF], sb[SHAPE_BUF], sc[SHAPE_BUF];
    kiln_dtype t = tdtype(g, state);
    if (tdtype(g, idx) != KILN_I32 || tdtype(g, values) != t || kiln_dtype_is_block(t)) {
        graph_error(g, KILN_ERR_DTYPE, "SCATTER: state %s, indices %s, values %s: need i32 indices and values of the state's non-block dtype",
                    kiln_dtype_name(t), kiln_dtype_name(tdtype(g, idx)), kiln_dtype_name(tdtype(g, values)));
        return KILN_NONE;
    }
    int ns = tndim(g, state), nv = tndim(g, values);
    int ok = ns >= 1 && tndim(g, idx) == 1 && nv == ns && tshape(g, values)[0] == tshape(g, idx)[0];
    for (int i = 1; ok && i < ns; i++) ok = tshape(g, values)[i] == tshape(g, state)[i];
    if (!ok) {
        graph_error(g, KILN_ERR_SHAPE, "SCATTER: state %s, indices %s, values %s: need state (R, ...), indices (n), values (n, ...)",
                    tshape_str(g, state, sa), tshape_str(g, idx, sb), tshape_str(g, values, sc));
        return KILN_NONE;
    }
    node n = node_init(OP_SCATTER, t, ns, tshape(g, state));
    n.src[0] = state;
    n.src[1] = idx;
    n.src[2] = values;
    return add_node(g, &n);
}

kiln_tensor kiln_cast(kiln_graph *g, kiln_tensor x, kiln_dtype t) {
    BUILDER_GUARD(g);
    if (!check_tensor(g, "CAST", x)) return KILN_NONE;
    if ((int)t < 0 || t >= KILN_DTYPE_COUNT) {
        graph_error(g, KILN_ERR_DTYPE, "CAST: unknown dtype %d", (int)t);
        return KILN_NONE;
    }
    kiln_dtype from = tdtype(g, x);
    if (from == t) return x;
    if (kiln_dtype_is_block(t) || kiln_dtype_is_block(from)) {
        int nd = tndim(g, x);
        int64_t last;
        char sb[SHAPE_BUF];
        kiln_dtype bt = kiln_dtype_is_block(t) ? t : from;
        if (nd == 0 || (sym_is_const(g->syms, tshape(g, x)[nd - 1], &last) && kiln_dtype_bytes(bt, last) == 0)) {
            graph_error(g, KILN_ERR_SHAPE, "CAST %s -> %s: shape %s: the last axis must be a multiple of the %s block",
                        kiln_dtype_name(from), kiln_dtype_name(t), tshape_str(g, x, sb), kiln_dtype_name(bt));
            return KILN_NONE;
        }
    }
    node n = node_init(OP_CAST, t, tndim(g, x), tshape(g, x));
    n.src[0] = x;
    return add_node(g, &n);
}

kiln_tensor kiln_contiguous(kiln_graph *g, kiln_tensor x) {
    BUILDER_GUARD(g);
    if (!check_tensor(g, "CONTIGUOUS", x)) return KILN_NONE;
    node n = node_init(OP_CONTIGUOUS, tdtype(g, x), tndim(g, x), tshape(g, x));
    n.src[0] = x;
    return add_node(g, &n);
}

/* ---- movement views --------------------------------------------------- */

static kiln_tensor apply_view(kiln_graph *g, kiln_tensor x, view_fn f, const void *arg) {
    view out;
    if (f(&out, tview(g, x), g->syms, arg) == 0) return with_view(g, x, &out);
    /* too many layers: materialise, then the view applies to a dense buffer */
    kiln_tensor dense = kiln_contiguous(g, x);
    if (dense == KILN_NONE) return KILN_NONE;
    if (f(&out, tview(g, dense), g->syms, arg) == 0) return with_view(g, dense, &out);
    graph_error(g, KILN_ERR_INVALID, "internal: a view could not be applied even to a dense tensor");
    return KILN_NONE;
}

typedef struct reshape_arg { int ndim; const sym_id *shape; } reshape_arg;
static int do_reshape(view *o, const view *i, sym_pool *p, const void *a) {
    const reshape_arg *r = a;
    return view_reshape(o, i, p, r->ndim, r->shape);
}

static sym_id shape_product(kiln_graph *g, int n, const sym_id *s) {
    sym_id prod = sym_const(g->syms, 1);
    for (int i = 0; i < n; i++) prod = sym_mul(g->syms, prod, s[i]);
    return prod;
}

kiln_tensor kiln_reshape(kiln_graph *g, kiln_tensor x, int ndim, const kiln_sym *shape) {
    BUILDER_GUARD(g);
    if (!check_tensor(g, "reshape", x) || !check_shape_syms(g, "reshape", ndim, shape)) return KILN_NONE;
    sym_id dims[KILN_MAX_DIMS];
    for (int i = 0; i < ndim; i++) dims[i] = (sym_id)shape[i];
    if (shape_product(g, ndim, dims) != shape_product(g, tndim(g, x), tshape(g, x))) {
        char sa[SHAPE_BUF], sb[SHAPE_BUF];
        graph_error(g, KILN_ERR_SHAPE, "reshape: %s to %s changes the number of elements (or cannot be proven not to)",
                    tshape_str(g, x, sa), graph_shape_str(g, ndim, dims, sb, sizeof sb));
        return KILN_NONE;
    }
    if (kiln_dtype_is_block(tdtype(g, x)) && ndim > 0 && dims[ndim - 1] != tshape(g, x)[tndim(g, x) - 1]) {
        graph_error(g, KILN_ERR_SHAPE, "reshape: a %s tensor keeps its last (block) axis", kiln_dtype_name(tdtype(g, x)));
        return KILN_NONE;
    }
    reshape_arg r = {ndim, dims};
    return apply_view(g, x, do_reshape, &r);
}

kiln_tensor kiln_reshape_str(kiln_graph *g, kiln_tensor x, const char *shape) {
    BUILDER_GUARD(g);
    int ndim;
    sym_id dims[KILN_MAX_DIMS];
    if (!parse_shape(g, "reshape", shape, &ndim, dims)) return KILN_NONE;
    kiln_sym s[KILN_MAX_DIMS];
    for (int i = 0; i < ndim; i++) s[i] = (kiln_sym)dims[i];
    return kiln_reshape(g, x, ndim, s);
}

static int do_permute(view *o, const view *i, sym_pool *p, const void *a) { return view_permute(o, i, p, a); }

kiln_tensor kiln_permute(kiln_graph *g, kiln_tensor x, const int *perm) {
    BUILDER_GUARD(g);
    if (!check_tensor(g, "permute", x)) return KILN_NONE;
    int n = tndim(g, x), seen[KILN_MAX_DIMS] = {0};
    for (int i = 0; i < n; i++) {
        if (perm[i] < 0 || perm[i] >= n || seen[perm[i]]++) {
            char sb[SHAPE_BUF];
            graph_error(g, KILN_ERR_INVALID, "permute: not a permutation of the %d axes of %s", n, tshape_str(g, x, sb));
            return KILN_NONE;
        }
    }
    return apply_view(g, x, do_permute, perm);
}

kiln_tensor kiln_transpose(kiln_graph *g, kiln_tensor x, int a, int b) {
    BUILDER_GUARD(g);
    if (!check_tensor(g, "transpose", x)) return KILN_NONE;
    int n = tndim(g, x);
    int aa = norm_axis(g, "transpose", x, a, 0);
    if (aa < 0) return KILN_NONE;
    int bb = norm_axis(g, "transpose", x, b, 0);
    if (bb < 0) return KILN_NONE;
    int perm[KILN_MAX_DIMS];
    for (int i = 0; i < n; i++) perm[i] = i;
    perm[aa] = bb;
    perm[bb] = aa;
    return kiln_permute(g, x, perm);
}

static int do_expand(view *o, const view *i, sym_pool *p, const void *a) { return view_expand(o, i, p, a); }

kiln_tensor kiln_expand(kiln_graph *g, kiln_tensor x, int ndim, const kiln_sym *shape) {
    BUILDER_GUARD(g);
    if (!check_tensor(g, "expand", x) || !check_shape_syms(g, "expand", ndim, shape)) return KILN_NONE;
    sym_id dims[KILN_MAX_DIMS];
    int ok = ndim == tndim(g, x);
    for (int i = 0; ok && i < ndim; i++) {
        dims[i] = (sym_id)shape[i];
        ok = dims[i] == tshape(g, x)[i] || is_one(g, tshape(g, x)[i]);
    }
    if (!ok) {
        char sa[SHAPE_BUF], sb[SHAPE_BUF];
        for (int i = 0; i < ndim && i < KILN_MAX_DIMS; i++) dims[i] = (sym_id)shape[i];
        graph_error(g, KILN_ERR_SHAPE, "expand: %s to %s: only size-1 axes can grow", tshape_str(g, x, sa),
                    graph_shape_str(g, ndim, dims, sb, sizeof sb));
        return KILN_NONE;
    }
    return apply_view(g, x, do_expand, dims);
}

typedef struct slice_arg { int axis; sym_id start, stop; int64_t step; } slice_arg;
static int do_slice(view *o, const view *i, sym_pool *p, const void *a) {
    const slice_arg *s = a;
    return view_slice(o, i, p, s->axis, s->start, s->stop, s->step);
}

/* 1 when a < b holds for every value of the variables */
static int provably_less(kiln_graph *g, sym_id a, sym_id b) {
    int64_t lo, hi;
    sym_bounds(g->syms, sym_sub(g->syms, a, b), &lo, &hi);
    return hi < 0;
}

kiln_tensor kiln_slice(kiln_graph *g, kiln_tensor x, int axis, kiln_sym start, kiln_sym stop, int64_t step) {
    BUILDER_GUARD(g);
    if (!check_tensor(g, "slice", x)) return KILN_NONE;
    int a = norm_axis(g, "slice", x, axis, 0);
    if (a < 0) return KILN_NONE;
    kiln_sym ss[2] = {start, stop};
    if (!check_shape_syms(g, "slice", 2, ss)) return KILN_NONE;
    char sb[SHAPE_BUF], s1[64], s2[64];
    sym_id n = tshape(g, x)[a];
    sym_id st = (sym_id)start, sp = (sym_id)stop;
    /* reject what is provably wrong; symbolic bounds are checked at run time */
    if (step < 1 || provably_less(g, sp, st) || provably_less(g, n, sp)) {
        graph_error(g, KILN_ERR_SHAPE, "slice: [%s:%s:%lld] on axis %d of %s is out of range (need 0 <= start <= stop <= size, step >= 1)",
                    kiln_sym_str(g, start, s1, sizeof s1), kiln_sym_str(g, stop, s2, sizeof s2), (long long)step, a,
                    tshape_str(g, x, sb));
        return KILN_NONE;
    }
    if (kiln_dtype_is_block(tdtype(g, x)) && a == tndim(g, x) - 1) {
        graph_error(g, KILN_ERR_SHAPE, "slice: cannot slice the block axis of a %s tensor", kiln_dtype_name(tdtype(g, x)));
        return KILN_NONE;
    }
    if (!graph_require(g, sym_le(g->syms, st, sp), "slice: start %s > stop %s on axis %d of %s",
                       kiln_sym_str(g, start, s1, sizeof s1), kiln_sym_str(g, stop, s2, sizeof s2), a, tshape_str(g, x, sb)) ||
        !graph_require(g, sym_le(g->syms, sp, n), "slice: stop %s is past the end of axis %d of %s",
                       kiln_sym_str(g, stop, s2, sizeof s2), a, tshape_str(g, x, sb)))
        return KILN_NONE;
    slice_arg s = {a, st, sp, step};
    return apply_view(g, x, do_slice, &s);
}

typedef struct pad_arg { int axis; sym_id before, after; } pad_arg;
static int do_pad(view *o, const view *i, sym_pool *p, const void *a) {
    const pad_arg *s = a;
    return view_pad(o, i, p, s->axis, s->before, s->after);
}

kiln_tensor kiln_pad(kiln_graph *g, kiln_tensor x, int axis, kiln_sym before, kiln_sym after) {
    BUILDER_GUARD(g);
    if (!check_tensor(g, "pad", x)) return KILN_NONE;
    int a = norm_axis(g, "pad", x, axis, 0);
    if (a < 0) return KILN_NONE;
    kiln_sym ss[2] = {before, after};
    if (!check_shape_syms(g, "pad", 2, ss)) return KILN_NONE;
    if (kiln_dtype_is_block(tdtype(g, x))) {
        graph_error(g, KILN_ERR_DTYPE, "pad: cannot pad a %s tensor (cast it first)", kiln_dtype_name(tdtype(g, x)));
        return KILN_NONE;
    }
    pad_arg s = {a, (sym_id)before, (sym_id)after};
    return apply_view(g, x, do_pad, &s);
}

typedef struct window_arg { int axis; int64_t size, stride, dilation; } window_arg;
static int do_window(view *o, const view *i, sym_pool *p, const void *a) {
    const window_arg *s = a;
    return view_window(o, i, p, s->axis, s->size, s->stride, s->dilation);
}

kiln_tensor kiln_window(kiln_graph *g, kiln_tensor x, int axis, int64_t size, int64_t stride, int64_t dilation) {
    BUILDER_GUARD(g);
    if (!check_tensor(g, "window", x)) return KILN_NONE;
    int a = norm_axis(g, "window", x, axis, 0);
    if (a < 0) return KILN_NONE;
    char sb[SHAPE_BUF];
    if (size < 1 || stride < 1 || dilation < 1 || tndim(g, x) >= KILN_MAX_DIMS) {
        graph_error(g, KILN_ERR_INVALID, "window: size %lld stride %lld dilation %lld on %s: need all >= 1 and a free axis",
                    (long long)size, (long long)stride, (long long)dilation, tshape_str(g, x, sb));
        return KILN_NONE;
    }
    sym_id span = sym_const(g->syms, dilation * (size - 1) + 1);
    if (provably_less(g, tshape(g, x)[a], span)) {
        graph_error(g, KILN_ERR_SHAPE, "window: a window spanning %lld elements does not fit axis %d of %s",
                    (long long)(dilation * (size - 1) + 1), a, tshape_str(g, x, sb));
        return KILN_NONE;
    }
    if (kiln_dtype_is_block(tdtype(g, x))) {
        graph_error(g, KILN_ERR_DTYPE, "window: cannot window a %s tensor (cast it first)", kiln_dtype_name(tdtype(g, x)));
        return KILN_NONE;
    }
    if (!graph_require(g, sym_le(g->syms, span, tshape(g, x)[a]), "window: a window spanning %lld elements does not fit axis %d of %s",
                       (long long)(dilation * (size - 1) + 1), a, tshape_str(g, x, sb)))
        return KILN_NONE;
    window_arg s = {a, size, stride, dilation};
    return apply_view(g, x, do_window, &s);
}

static int do_flip(view *o, const view *i, sym_pool *p, const void *a) { return view_flip(o, i, p, *(const int *)a); }

kiln_tensor kiln_flip(kiln_graph *g, kiln_tensor x, int axis) {
    BUILDER_GUARD(g);
    if (!check_tensor(g, "flip", x)) return KILN_NONE;
    int a = norm_axis(g, "flip", x, axis, 0);
    if (a < 0) return KILN_NONE;
    if (kiln_dtype_is_block(tdtype(g, x)) && a == tndim(g, x) - 1) {
        graph_error(g, KILN_ERR_DTYPE, "flip: cannot flip the block axis of a %s tensor", kiln_dtype_name(tdtype(g, x)));
        return KILN_NONE;
    }
    return apply_view(g, x, do_flip, &a);
}

kiln_tensor kiln_unsqueeze(kiln_graph *g, kiln_tensor x, int axis) {
    BUILDER_GUARD(g);
    if (!check_tensor(g, "unsqueeze", x)) return KILN_NONE;
    int a = norm_axis(g, "unsqueeze", x, axis, 1);
    if (a < 0) return KILN_NONE;
    int n = tndim(g, x);
    if (n >= KILN_MAX_DIMS) {
        graph_error(g, KILN_ERR_SHAPE, "unsqueeze: already %d dimensions", n);
        return KILN_NONE;
    }
    kiln_sym dims[KILN_MAX_DIMS];
    for (int i = 0, j = 0; i <= n; i++) dims[i] = i == a ? (kiln_sym)sym_const(g->syms, 1) : (kiln_sym)tshape(g, x)[j++];
    return kiln_reshape(g, x, n + 1, dims);
}

kiln_tensor kiln_squeeze(kiln_graph *g, kiln_tensor x, int axis) {
    BUILDER_GUARD(g);
    if (!check_tensor(g, "squeeze", x)) return KILN_NONE;
    int a = norm_axis(g, "squeeze", x, axis, 0);
    if (a < 0) return KILN_NONE;
    if (!is_one(g, tshape(g, x)[a])) {
        char sb[SHAPE_BUF];
        graph_error(g, KILN_ERR_SHAPE, "squeeze: axis %d of %s is not of size 1", a, tshape_str(g, x, sb));
        return KILN_NONE;
    }
    kiln_sym dims[KILN_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < tndim(g, x); i++)
        if (i != a) dims[n++] = (kiln_sym)tshape(g, x)[i];
    return kiln_reshape(g, x, n, dims);
}

/* ---- rebuilding nodes (the rewriter's way back to a graph) ------------------------ */

#include "compound.h"

static kiln_tensor tensor_on_node(kiln_graph *g, int32_t node_id, const view *v) {
    KILN_GROW(g->views, g->cap_views, g->nviews + 1);
    g->views[g->nviews] = *v;
    KILN_GROW(g->tensors, g->cap_tensors, g->ntensors + 1);
    g->tensors[g->ntensors].node = node_id;
    g->tensors[g->ntensors].view = g->nviews++;
    return g->ntensors++;
}

static int tensor_dense(const kiln_graph *g, kiln_tensor t) {
    const view *v = &g->views[g->tensors[t].view];
    const node *n = &g->nodes[g->tensors[t].node];
    if (!view_is_identity(v, g->syms) || view_ndim(v) != n->ndim) return 0;
    for (int i = 0; i < n->ndim; i++)
        if (view_shape(v)[i] != n->shape[i]) return 0;
    return 1;
}

kiln_tensor graph_view_onto(kiln_graph *g, kiln_tensor x, const view *v) {
    if (x == KILN_NONE || g->build_failed) return KILN_NONE;
    if (tensor_dense(g, x)) return tensor_on_node(g, g->tensors[x].node, v);
    const view *b = &g->views[g->tensors[x].view];
    if (b->nlayers + v->nlayers > VIEW_MAX_LAYERS) {
        x = kiln_contiguous(g, x);
        if (x == KILN_NONE) return KILN_NONE;
        return tensor_on_node(g, g->tensors[x].node, v);
    }
    view s = *b;
    for (int l = 0; l < v->nlayers; l++) s.layer[s.nlayers++] = v->layer[l];
    return tensor_on_node(g, g->tensors[x].node, &s);
}

kiln_tensor graph_rebuild_op(kiln_graph *g, op_kind op, kiln_dtype dtype, int axis, double value, int ndim,
                             const sym_id *shape, const kiln_tensor *k) {
    switch (op) {
    case OP_INPUT: break; /* by name: the caller's */
    case OP_CONST: return kiln_const(g, value, dtype);
    case OP_IOTA: return kiln_iota(g, dtype, ndim, (const kiln_sym *)shape, axis);
    OP_UNARY_CASES return graph_unary(g, op, k[0]);
    case OP_ADD: return kiln_add(g, k[0], k[1]);
    case OP_MUL: return kiln_mul(g, k[0], k[1]);
    case OP_MOD: return kiln_mod(g, k[0], k[1]);
    case OP_LT: return kiln_lt(g, k[0], k[1]);
    case OP_SUM: return kiln_sum(g, k[0], axis);
    case OP_MAX: return kiln_max(g, k[0], axis);
    case OP_GATHER: return kiln_gather(g, k[0], k[1]);
    case OP_SCATTER: return kiln_scatter(g, k[0], k[1], k[2]);
    case OP_CAST: return kiln_cast(g, k[0], dtype);
    case OP_CONTIGUOUS: return kiln_contiguous(g, k[0]);
    case OP_CONTRACT:
    case OP_SOFTMAX_ONLINE:
    case OP_SOFTMAX_CONTRACT: return compound_build(g, op, k, axis);
    }
    graph_error(g, KILN_ERR_INVALID, "graph_rebuild_op: op %d cannot be rebuilt here", (int)op);
    return KILN_NONE;
}
