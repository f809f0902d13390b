/* graph.c — a kiln_graph's life: creation, errors, tensors and views tables,
 * symbolic dimensions, outputs and run-time bindings.
 *
 * The op builders live in build.c; the reference interpreter in src/ref/.
 * op_table and op_unary are ops.def's rows as data.
 * Invariants: see graph.h. Builder errors are sticky (build_failed); run
 * errors are reported through the same status/message but do not stop the
 * builder, and are replaced by the next run's outcome.
 */
#include "graph.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "base.h"

const op_info op_table[OP_COUNT] = {
#define X(name, arity, flags, xcost, kcost) {#name, arity, flags, xcost, kcost},
#include "ops.def"
#include "compound.def"
#undef X
};
_Static_assert(sizeof op_table / sizeof op_table[0] == OP_COUNT, "op_table has one row per op");

/* ops.def's unary rows: a function per column pair, then the table */
#define U(name, f32, f64, c, cl, cu)                                                                                   \
    static float unary_f32_##name(float x) { return f32; }                                                           \
    static double unary_f64_##name(double x) { return f64; }
KILN_UNARY_OPS(U)
#undef U
const op_unary_info op_unary[OP_COUNT] = {
#define U(name, f32, f64, c, cl, cu) [OP_##name] = {unary_f32_##name, unary_f64_##name, {c, cl, cu}},
    KILN_UNARY_OPS(U)
#undef U
};

/* every OPF_UNARY row has exactly one U row, and every U row is OPF_UNARY */
enum op_flags_of {
#define X(name, arity, flags, xcost, kcost) OP_FLAGS_##name = (flags),
#include "ops.def"
#undef X
};
enum {
    OP_UNARY_ROWS = 0
#define X(name, arity, flags, xcost, kcost) +(((flags) & OPF_UNARY) ? 1 : 0)
#include "ops.def"
#undef X
    ,
    OP_UNARY_FNS = 0
#define U(name, f32, f64, c, cl, cu) +1
    KILN_UNARY_OPS(U)
#undef U
};
_Static_assert(OP_UNARY_ROWS == OP_UNARY_FNS, "every OPF_UNARY op of ops.def has one KILN_UNARY_OPS row");
#define U(name, f32, f64, c, cl, cu)                                                                                   \
    _Static_assert(OP_FLAGS_##name & OPF_UNARY, #name " has a KILN_UNARY_OPS row but is not OPF_UNARY");
KILN_UNARY_OPS(U)
#undef U

kiln_graph *kiln_graph_new(void) {
    kiln_graph *g = kiln_xcalloc(1, sizeof *g);
    g->syms = sym_pool_new();
    return g;
}

void kiln_graph_mark_block(kiln_graph *g) {
    if (!g || g->build_failed) return;
    if (g->nblock_marks > 0 && g->block_marks[g->nblock_marks - 1] == g->nnodes) return;
    KILN_GROW(g->block_marks, g->cap_block_marks, g->nblock_marks + 1);
    g->block_marks[g->nblock_marks++] = g->nnodes;
}

void kiln_graph_free(kiln_graph *g) {
    if (!g) return;
    graph_free_results(g);
    for (int32_t i = 0; i < g->nnodes; i++) free(g->nodes[i].name);
    for (int32_t i = 0; i < g->noutputs; i++) free(g->outputs[i].name);
    for (int32_t i = 0; i < g->ninputs; i++) free(g->inputs[i].name);
    for (int32_t i = 0; i < g->nchecks; i++) free(g->checks[i].msg);
    free(g->checks);
    free(g->block_marks);
    free(g->nodes);
    free(g->tensors);
    free(g->views);
    free(g->outputs);
    free(g->inputs);
    free(g->dim_values);
    free(g->dim_bound);
    sym_pool_free(g->syms);
    free(g);
}

void graph_free_results(kiln_graph *g) {
    if (!g || !g->results) return;
    for (output_value *r = g->results; r->ndim >= 0; r++) free(r->data);
    free(g->results);
    g->results = NULL;
}

kiln_status kiln_graph_status(const kiln_graph *g) { return g ? g->status : KILN_ERR_INVALID; }
const char *kiln_graph_error(const kiln_graph *g) { return g ? g->error : "no graph"; }

void kiln_graph_clear_error(kiln_graph *g) {
    g->status = KILN_OK;
    g->build_failed = 0;
    g->error[0] = 0;
}

void graph_error(kiln_graph *g, kiln_status s, const char *fmt, ...) {
    if (g->build_failed) return; /* the first error is the one that explains */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error, sizeof g->error, fmt, ap);
    va_end(ap);
    g->status = s;
    g->build_failed = 1;
}

void graph_run_error(kiln_graph *g, kiln_status s, const char *fmt, ...) {
    if (g->build_failed) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error, sizeof g->error, fmt, ap);
    va_end(ap);
    g->status = s;
}

int graph_require(kiln_graph *g, sym_id cond, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int64_t lo, hi;
    sym_bounds(g->syms, cond, &lo, &hi);
    if (lo > 0) return 1; /* always true */
    if (hi <= 0 && lo >= 0) {
        graph_error(g, KILN_ERR_SHAPE, "%s", msg);
        return 0;
    }
    KILN_GROW(g->checks, g->cap_checks, g->nchecks + 1);
    g->checks[g->nchecks].cond = cond;
    g->checks[g->nchecks].msg = kiln_xstrdup(msg);
    g->nchecks++;
    return 1;
}

kiln_status graph_run_checks(kiln_graph *g, const int64_t *values, const uint8_t *bound) {
    for (int32_t i = 0; i < g->nchecks; i++) {
        int64_t v;
        uint32_t missing;
        /* a condition over an unbound variable is skipped: the shapes that use
         * the variable report it as unbound when they are needed */
        if (sym_eval(g->syms, g->checks[i].cond, values, bound, &v, &missing) != 0) continue;
        if (v == 0) {
            char vals[200];
            size_t n = 0;
            vals[0] = 0;
            for (uint32_t k = 0; k < sym_var_count(g->syms) && n < sizeof vals; k++)
                if (!bound || bound[k])
                    n += (size_t)snprintf(vals + n, sizeof vals - n, "%s%s=%lld", n ? ", " : "",
                                          sym_var_name(g->syms, k), (long long)values[k]);
            graph_run_error(g, KILN_ERR_RANGE, "%s (with %s)", g->checks[i].msg, vals);
            return KILN_ERR_RANGE;
        }
    }
    return KILN_OK;
}

const node *graph_node(const kiln_graph *g, int32_t id) {
    KILN_ASSERT(id >= 0 && id < g->nnodes);
    return &g->nodes[id];
}

const tensor *graph_tensor(const kiln_graph *g, kiln_tensor t) {
    KILN_ASSERT(t >= 0 && t < g->ntensors);
    return &g->tensors[t];
}

const view *graph_tensor_view(const kiln_graph *g, kiln_tensor t) {
    return &g->views[graph_tensor(g, t)->view];
}

char *graph_shape_str(const kiln_graph *g, int ndim, const sym_id *shape, char *buf, size_t cap) {
    size_t n = 0;
    if (cap == 0) return buf;
    buf[0] = 0;
    n += (size_t)snprintf(buf + n, cap - n, "(");
    for (int i = 0; i < ndim && n < cap; i++) {
        if (i) n += (size_t)snprintf(buf + n, cap - n, ", ");
        if (n < cap) n += (size_t)sym_print(g->syms, shape[i], buf + n, cap - n);
    }
    if (n < cap) snprintf(buf + n, cap - n, ")");
    return buf;
}

/* ---- symbolic dimensions ---------------------------------------------- */

static int sym_ok(const kiln_graph *g, kiln_sym s) {
    return s >= 0 && (uint32_t)s < sym_count(g->syms);
}

kiln_sym kiln_sym_int(kiln_graph *g, int64_t value) { return (kiln_sym)sym_const(g->syms, value); }

kiln_sym kiln_sym_var(kiln_graph *g, const char *name) {
    if (!name || !name[0]) {
        graph_error(g, KILN_ERR_INVALID, "kiln_sym_var: empty name");
        return KILN_NONE;
    }
    return (kiln_sym)sym_var(g->syms, name, 1, SYM_INF);
}

kiln_sym kiln_sym_parse(kiln_graph *g, const char *expr) {
    char err[200];
    if (!expr) {
        graph_error(g, KILN_ERR_INVALID, "kiln_sym_parse: NULL expression");
        return KILN_NONE;
    }
    sym_id s = sym_parse(g->syms, expr, err, sizeof err);
    if (s == SYM_NONE) {
        graph_error(g, KILN_ERR_INVALID, "bad dimension expression '%s': %s", expr, err);
        return KILN_NONE;
    }
    return (kiln_sym)s;
}

typedef sym_id (*sym_binop)(sym_pool *, sym_id, sym_id);

static kiln_sym sym_apply(kiln_graph *g, const char *what, sym_binop f, kiln_sym a, kiln_sym b) {
    if (!sym_ok(g, a) || !sym_ok(g, b)) {
        graph_error(g, KILN_ERR_INVALID, "%s: invalid symbolic operand", what);
        return KILN_NONE;
    }
    return (kiln_sym)f(g->syms, (sym_id)a, (sym_id)b);
}

kiln_sym kiln_sym_add(kiln_graph *g, kiln_sym a, kiln_sym b) { return sym_apply(g, "kiln_sym_add", sym_add, a, b); }
kiln_sym kiln_sym_sub(kiln_graph *g, kiln_sym a, kiln_sym b) { return sym_apply(g, "kiln_sym_sub", sym_sub, a, b); }
kiln_sym kiln_sym_mul(kiln_graph *g, kiln_sym a, kiln_sym b) { return sym_apply(g, "kiln_sym_mul", sym_mul, a, b); }
kiln_sym kiln_sym_div(kiln_graph *g, kiln_sym a, kiln_sym b) { return sym_apply(g, "kiln_sym_div", sym_div, a, b); }

char *kiln_sym_str(const kiln_graph *g, kiln_sym s, char *buf, size_t cap) {
    if (cap == 0) return buf;
    if (!sym_ok(g, s)) snprintf(buf, cap, "<invalid>");
    else sym_print(g->syms, (sym_id)s, buf, cap);
    return buf;
}

int kiln_sym_const_value(const kiln_graph *g, kiln_sym s, int64_t *value) {
    return sym_ok(g, s) && sym_is_const(g->syms, (sym_id)s, value);
}

/* ---- tensor info ------------------------------------------------------ */

static int tensor_ok(const kiln_graph *g, kiln_tensor t) { return g && t >= 0 && t < g->ntensors; }

int kiln_ndim(const kiln_graph *g, kiln_tensor x) {
    return tensor_ok(g, x) ? view_ndim(graph_tensor_view(g, x)) : -1;
}

kiln_sym kiln_dim(const kiln_graph *g, kiln_tensor x, int axis) {
    if (!tensor_ok(g, x)) return KILN_NONE;
    const view *v = graph_tensor_view(g, x);
    int n = view_ndim(v);
    if (axis < 0) axis += n;
    if (axis < 0 || axis >= n) return KILN_NONE;
    return (kiln_sym)view_shape(v)[axis];
}

kiln_dtype kiln_tensor_dtype(const kiln_graph *g, kiln_tensor x) {
    return tensor_ok(g, x) ? g->nodes[g->tensors[x].node].dtype : KILN_DTYPE_COUNT;
}

char *kiln_shape_str(const kiln_graph *g, kiln_tensor x, char *buf, size_t cap) {
    if (!tensor_ok(g, x)) {
        if (cap) snprintf(buf, cap, "<invalid tensor>");
        return buf;
    }
    const view *v = graph_tensor_view(g, x);
    return graph_shape_str(g, view_ndim(v), view_shape(v), buf, cap);
}

/* ---- outputs and bindings --------------------------------------------- */

kiln_status kiln_output(kiln_graph *g, kiln_tensor x, const char *name) {
    if (g->build_failed) return g->status;
    if (!tensor_ok(g, x)) {
        graph_error(g, KILN_ERR_INVALID, "kiln_output: invalid tensor %d", (int)x);
        return g->status;
    }
    if (!name || !name[0]) {
        graph_error(g, KILN_ERR_INVALID, "kiln_output: an output needs a name");
        return g->status;
    }
    for (int32_t i = 0; i < g->noutputs; i++) {
        if (strcmp(g->outputs[i].name, name) == 0) {
            graph_error(g, KILN_ERR_INVALID, "kiln_output: output '%s' already exists", name);
            return g->status;
        }
    }
    KILN_GROW(g->outputs, g->cap_outputs, g->noutputs + 1);
    g->outputs[g->noutputs].name = kiln_xstrdup(name);
    g->outputs[g->noutputs].tensor = x;
    g->noutputs++;
    return KILN_OK;
}

kiln_status kiln_bind_dim(kiln_graph *g, const char *name, int64_t value) {
    int var = name ? sym_find_var(g->syms, name) : -1;
    if (var < 0) {
        graph_run_error(g, KILN_ERR_INVALID, "kiln_bind_dim: the graph has no dimension named '%s'",
                        name ? name : "(null)");
        return KILN_ERR_INVALID;
    }
    uint32_t n = sym_var_count(g->syms);
    if (n > g->ndim_values) {
        g->dim_values = kiln_xrealloc(g->dim_values, n * sizeof *g->dim_values);
        g->dim_bound = kiln_xrealloc(g->dim_bound, n);
        memset(g->dim_bound + g->ndim_values, 0, n - g->ndim_values);
        memset(g->dim_values + g->ndim_values, 0, (n - g->ndim_values) * sizeof *g->dim_values);
        g->ndim_values = n;
    }
    g->dim_values[var] = value;
    g->dim_bound[var] = 1;
    return KILN_OK;
}

static kiln_status bind(kiln_graph *g, const char *fn, const char *name, void *data, size_t bytes, int constant) {
    int found = 0;
    for (int32_t i = 0; i < g->nnodes && !found; i++)
        found = g->nodes[i].op == OP_INPUT && strcmp(g->nodes[i].name, name ? name : "") == 0;
    if (!found) {
        graph_run_error(g, KILN_ERR_INVALID, "%s: the graph has no input named '%s'", fn, name ? name : "(null)");
        return KILN_ERR_INVALID;
    }
    if (!data && bytes) {
        graph_run_error(g, KILN_ERR_INVALID, "%s: NULL buffer for '%s'", fn, name);
        return KILN_ERR_INVALID;
    }
    input_binding *b = NULL;
    for (int32_t i = 0; i < g->ninputs && !b; i++)
        if (strcmp(g->inputs[i].name, name) == 0) b = &g->inputs[i];
    if (!b) {
        KILN_GROW(g->inputs, g->cap_inputs, g->ninputs + 1);
        b = &g->inputs[g->ninputs++];
        b->name = kiln_xstrdup(name);
    }
    b->data = data;
    b->bytes = bytes;
    b->constant = constant;
    b->gen = ++g->bind_gen;
    return KILN_OK;
}

kiln_status kiln_bind_input(kiln_graph *g, const char *name, void *data, size_t bytes) {
    return bind(g, "kiln_bind_input", name, data, bytes, 0);
}

kiln_status kiln_bind_weight(kiln_graph *g, const char *name, const void *data, size_t bytes) {
    return bind(g, "kiln_bind_weight", name, (void *)(uintptr_t)data, bytes, 1);
}

kiln_status kiln_graph_on_weight_release(kiln_graph *g, kiln_weight_release_fn fn, void *ctx) {
    if (!g) return KILN_ERR_INVALID;
    g->weight_release = fn;
    g->weight_release_ctx = ctx;
    return KILN_OK;
}
