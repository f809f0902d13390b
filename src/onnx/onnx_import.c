/* onnx_import.c — the ONNX importer's core: an .onnx file to a kiln_graph.
 *
 * Order: decode the file (onnx_proto.c); make a value for every initializer
 * (host constant), load-time const and graph input (kiln input, with
 * dim_params as kiln symbols); walk the nodes in file order (ONNX requires
 * topological order) and hand each to its operator function from the tables
 * of onnx_ops_*.c; mark the graph outputs.
 *
 * Invariants: no operator or attribute is ignored silently: an op missing
 * from the tables, a node attribute not in its op's accepted list, a non-
 * default domain or an opset outside what kiln knows is an error naming it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "graph.h"
#include "kiln_onnx.h"
#include "onnx_imp.h"

#define OPSET_MIN 7    /* older models (opset 7-12) load where the op's meaning did not change */
#define OPSET_MAX 28    /* the newest the pinned onnx package (1.23.2) knows */

struct kiln_onnx_model {
    ox_model pm;
    imp_ctx c;
    kiln_graph *g;
    /* runtime inputs: index into c.vals and the value info */
    int n_in;
    int *in_val;
    ox_value_info **in_info;
    int n_out;
    ox_value_info **out_info;
    int *out_dtype;
};

int imp_fail(imp_ctx *c, kiln_status s, const char *fmt, ...) {
    if (c->status == KILN_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        va_end(ap);
        c->status = s;
    }
    return 0;
}

int imp_kiln_dtype(int t) {
    switch (t) {
    case OX_FLOAT: return KILN_F32;
    case OX_FLOAT16: return KILN_F16;
    case OX_BFLOAT16: return KILN_BF16;
    case OX_UINT8: case OX_INT8: case OX_UINT16: case OX_INT16: case OX_INT32: case OX_INT64:
    case OX_BOOL: case OX_UINT32: case OX_UINT64: return KILN_I32;
    default: return -1;
    }
}

int imp_is_float_onnx(int t) { return t == OX_FLOAT || t == OX_FLOAT16 || t == OX_BFLOAT16 || t == OX_DOUBLE; }

/* ---- the value table ------------------------------------------------------ */

static uint32_t hash_str(const char *s) {
    uint32_t h = 2166136261u;
    while (*s) h = (h ^ (uint8_t)*s++) * 16777619u;
    return h;
}

static int find_value(const imp_ctx *c, const char *name) {
    if (!c->hash_cap) return -1;
    uint32_t mask = (uint32_t)c->hash_cap - 1;
    for (uint32_t h = hash_str(name) & mask;; h = (h + 1) & mask) {
        int v = c->hash[h];
        if (v < 0) return -1;
        if (!strcmp(c->vals[v].name, name)) return v;
    }
}

static int rehash(imp_ctx *c, int cap) {
    int *h = malloc((size_t)cap * sizeof *h);
    if (!h) return 0;
    for (int i = 0; i < cap; i++) h[i] = -1;
    for (int v = 0; v < c->n_vals; v++) {
        uint32_t k = hash_str(c->vals[v].name) & (uint32_t)(cap - 1);
        while (h[k] >= 0) k = (k + 1) & (uint32_t)(cap - 1);
        h[k] = v;
    }
    free(c->hash);
    c->hash = h;
    c->hash_cap = cap;
    return 1;
}

/* the value named `name`, made when absent (a later definition replaces an
 * earlier one: ONNX names are single-assignment, so only a malformed model
 * does that, and it then reads the newest) */
static imp_value *value_for(imp_ctx *c, char *name) {
    int v = find_value(c, name);
    if (v >= 0) return &c->vals[v];
    if (c->n_vals == c->cap_vals) {
        int nc = c->cap_vals ? c->cap_vals * 2 : 64;
        imp_value *nv = realloc(c->vals, (size_t)nc * sizeof *nv);
        if (!nv) { imp_fail(c, KILN_ERR_NOMEM, "out of memory"); return NULL; }
        c->vals = nv;
        c->cap_vals = nc;
    }
    v = c->n_vals++;
    imp_value *x = &c->vals[v];
    x->name = name;
    x->onnx_dtype = OX_UNDEFINED;
    x->t = KILN_NONE;
    x->c = NULL;
    if ((c->n_vals * 2 > c->hash_cap && !rehash(c, c->hash_cap ? c->hash_cap * 2 : 128))) {
        imp_fail(c, KILN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (c->hash_cap && find_value(c, name) != v) { /* insert */
        uint32_t mask = (uint32_t)c->hash_cap - 1, k = hash_str(name) & mask;
        while (c->hash[k] >= 0) k = (k + 1) & mask;
        c->hash[k] = v;
    }
    return x;
}

/* ---- inputs and outputs of a node ------------------------------------------ */

int imp_has(const ox_node *n, int i) { return i < n->n_in && n->inputs[i][0] != 0; }

static imp_value *input_value(imp_ctx *c, const ox_node *n, int i) {
    if (!imp_has(n, i)) {
        imp_fail(c, KILN_ERR_FORMAT, "input %d is missing", i);
        return NULL;
    }
    int v = find_value(c, n->inputs[i]);
    if (v < 0) {
        imp_fail(c, KILN_ERR_FORMAT, "input '%s' is not defined before its use", n->inputs[i]);
        return NULL;
    }
    return &c->vals[v];
}

static void *keep_buf(imp_ctx *c, size_t bytes) {
    if (c->n_bufs == c->cap_bufs) {
        int nc = c->cap_bufs ? c->cap_bufs * 2 : 64;
        void **nb = realloc(c->bufs, (size_t)nc * sizeof *nb);
        if (!nb) return NULL;
        c->bufs = nb;
        c->cap_bufs = nc;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p) c->bufs[c->n_bufs++] = p;
    return p;
}

/* a host constant as a graph tensor: a scalar constant when it has one
 * element, else a bound weight input converted to the kiln dtype */
static kiln_tensor materialise(imp_ctx *c, imp_value *v) {
    ox_tensor *k = v->c;
    int kt = imp_kiln_dtype(k->dtype);
    if (kt < 0) {
        imp_fail(c, KILN_ERR_UNSUPPORTED, "value '%s' has type %s, which kiln does not support", v->name,
                 ox_dtype_name(k->dtype));
        return KILN_NONE;
    }
    kiln_sym dims[KILN_MAX_DIMS];
    for (int d = 0; d < k->ndim; d++) dims[d] = kiln_sym_int(c->g, k->dims[d]);
    if (k->n == 0) {
        imp_fail(c, KILN_ERR_UNSUPPORTED, "value '%s' is an empty tensor", v->name);
        return KILN_NONE;
    }
    if (k->n == 1) {
        double x = kt == KILN_I32 ? (double)ox_elem_i(k->dtype, k->data, 0) : ox_elem_f(k->dtype, k->data, 0);
        if (kt == KILN_I32 && (x < -2147483648.0 || x > 2147483647.0)) {
            imp_fail(c, KILN_ERR_UNSUPPORTED, "value '%s': %.0f does not fit kiln's i32", v->name, x);
            return KILN_NONE;
        }
        return kiln_full(c->g, x, (kiln_dtype)kt, k->ndim, dims);
    }
    size_t bytes = kiln_dtype_bytes((kiln_dtype)kt, k->n);
    /* floats are bound in place: the constant's data lives as long as the model */
    void *buf = kt == KILN_I32 ? keep_buf(c, bytes) : k->data;
    if (!buf) { imp_fail(c, KILN_ERR_NOMEM, "out of memory"); return KILN_NONE; }
    if (kt == KILN_I32) {
        int32_t *o = buf;
        for (int64_t i = 0; i < k->n; i++) {
            int64_t x = ox_elem_i(k->dtype, k->data, i);
            if (x < INT32_MIN || x > INT32_MAX) {
                imp_fail(c, KILN_ERR_UNSUPPORTED, "value '%s': element %lld (%lld) does not fit kiln's i32", v->name,
                         (long long)i, (long long)x);
                return KILN_NONE;
            }
            o[i] = (int32_t)x;
        }
    }
    char name[64];
    snprintf(name, sizeof name, "onnx.w%d", c->n_consts++);
    kiln_tensor t = kiln_input_dims(c->g, name, (kiln_dtype)kt, k->ndim, dims);
    if (t == KILN_NONE || kiln_bind_weight(c->g, name, buf, bytes) != KILN_OK) {
        imp_check(c, KILN_NONE);
        return KILN_NONE;
    }
    return t;
}

/* f16 and bf16 values are computed in f32 and rounded to their type at each
 * operator's output (imp_set): ONNX's meaning, an f16 result per operator,
 * without kiln keeping f16 intermediates inside a fused kernel */
static kiln_tensor up(imp_ctx *c, kiln_tensor t) {
    if (t == KILN_NONE) return t;
    kiln_dtype d = kiln_tensor_dtype(c->g, t);
    return d == KILN_F16 || d == KILN_BF16 ? kiln_cast(c->g, t, KILN_F32) : t;
}

kiln_tensor imp_tensor_of(imp_ctx *c, ox_tensor *k) {
    imp_value v = {"constant", k->dtype, KILN_NONE, k};
    return materialise(c, &v);
}

kiln_tensor imp_in(imp_ctx *c, const ox_node *n, int i) {
    imp_value *v = input_value(c, n, i);
    if (!v) return KILN_NONE;
    if (c->folding) return up(c, materialise(c, v)); /* a fresh copy in the scratch graph */
    if (v->t == KILN_NONE && v->c) v->t = materialise(c, v);
    if (v->t == KILN_NONE) imp_fail(c, KILN_ERR_INVALID, "input '%s' has no tensor", v->name);
    return up(c, v->t);
}

ox_tensor *imp_const(imp_ctx *c, const ox_node *n, int i) {
    if (!imp_has(n, i)) return NULL;
    int v = find_value(c, n->inputs[i]);
    return v >= 0 ? c->vals[v].c : NULL;
}

int imp_in_dtype(imp_ctx *c, const ox_node *n, int i) {
    imp_value *v = input_value(c, n, i);
    return v ? v->onnx_dtype : OX_UNDEFINED;
}

int imp_const_ints(imp_ctx *c, const ox_node *n, int i, int64_t *out, int cap) {
    ox_tensor *k = imp_const(c, n, i);
    if (!k) {
        imp_fail(c, KILN_ERR_UNSUPPORTED, "input %d ('%s') must be known at load time (an initializer or a constant)", i,
                 imp_has(n, i) ? n->inputs[i] : "");
        return -1;
    }
    if (k->n > cap) {
        imp_fail(c, KILN_ERR_UNSUPPORTED, "input %d ('%s') has %lld elements, at most %d are supported", i,
                 n->inputs[i], (long long)k->n, cap);
        return -1;
    }
    for (int64_t j = 0; j < k->n; j++) out[j] = ox_elem_i(k->dtype, k->data, j);
    return (int)k->n;
}

int imp_set(imp_ctx *c, const ox_node *n, int i, kiln_tensor t, int onnx_dtype) {
    if (i >= n->n_out || !n->outputs[i][0]) return 1; /* an unused optional output */
    if (!imp_check(c, t)) return 0;
    if ((onnx_dtype == OX_FLOAT16 || onnx_dtype == OX_BFLOAT16) && kiln_tensor_dtype(c->g, t) == KILN_F32)
        t = kiln_cast(c->g, t, onnx_dtype == OX_FLOAT16 ? KILN_F16 : KILN_BF16);
    if (!imp_check(c, t)) return 0;
    if (c->folding) {
        if (i >= IMP_MAX_OUT) return imp_fail(c, KILN_ERR_UNSUPPORTED, "too many outputs");
        c->fold_t[i] = t;
        c->fold_dt[i] = onnx_dtype;
        return 1;
    }
    imp_value *v = value_for(c, n->outputs[i]);
    if (!v) return 0;
    v->t = t;
    v->c = NULL;
    v->onnx_dtype = onnx_dtype;
    return 1;
}

int imp_set_const(imp_ctx *c, const ox_node *n, int i, ox_tensor *k) {
    if (i >= n->n_out || !n->outputs[i][0]) return 1;
    imp_value *v = value_for(c, n->outputs[i]);
    if (!v) return 0;
    v->t = KILN_NONE;
    v->c = k;
    v->onnx_dtype = k->dtype;
    return 1;
}

/* model memory: reuse onnx_proto's allocator through a tiny tensor of bytes */
ox_tensor *imp_new_const(imp_ctx *c, int dtype, int ndim, const int64_t *dims) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0 || (dims[d] && n > ((int64_t)1 << 32) / dims[d])) {
            imp_fail(c, KILN_ERR_UNSUPPORTED, "a constant of this shape is too large");
            return NULL;
        }
        n *= dims[d];
    }
    if (ndim > KILN_MAX_DIMS) { imp_fail(c, KILN_ERR_UNSUPPORTED, "more than %d dims", KILN_MAX_DIMS); return NULL; }
    size_t es = ox_dtype_size(dtype);
    ox_tensor *k = keep_buf(c, sizeof *k);
    void *data = k ? keep_buf(c, (size_t)n * (es ? es : 1)) : NULL;
    if (!data) { imp_fail(c, KILN_ERR_NOMEM, "out of memory"); return NULL; }
    memset(k, 0, sizeof *k);
    memset(data, 0, (size_t)n * (es ? es : 1));
    k->name = "";
    k->dtype = dtype;
    k->ndim = ndim;
    for (int d = 0; d < ndim; d++) k->dims[d] = dims[d];
    k->n = n;
    k->data = data;
    return k;
}

/* ---- attributes ------------------------------------------------------------- */

int64_t imp_attr_i(const ox_node *n, const char *name, int64_t def) {
    const ox_attr *a = ox_attr_find(n, name);
    return a ? a->i : def;
}
double imp_attr_f(const ox_node *n, const char *name, double def) {
    const ox_attr *a = ox_attr_find(n, name);
    return a ? a->f : def;
}
const char *imp_attr_s(const ox_node *n, const char *name, const char *def) {
    const ox_attr *a = ox_attr_find(n, name);
    return a && a->s ? a->s : def;
}
int imp_attr_ints(const ox_node *n, const char *name, const int64_t **out) {
    const ox_attr *a = ox_attr_find(n, name);
    *out = a ? a->ints : NULL;
    return a ? a->nints : 0;
}

int imp_axis(imp_ctx *c, const ox_node *n, int64_t axis, int rank) {
    (void)n;
    int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank) return imp_fail(c, KILN_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)axis, rank), -1;
    return (int)a;
}

int64_t imp_dim_const(imp_ctx *c, kiln_tensor t, int axis) {
    int64_t v;
    return kiln_sym_const_value(c->g, kiln_dim(c->g, t, axis), &v) ? v : -1;
}

int imp_check(imp_ctx *c, kiln_tensor t) {
    if (c->status != KILN_OK) return 0;
    if (kiln_graph_status(c->g) != KILN_OK)
        return imp_fail(c, kiln_graph_status(c->g), "%s", kiln_graph_error(c->g));
    if (t == KILN_NONE) return imp_fail(c, KILN_ERR_INVALID, "no tensor was built");
    return 1;
}

/* ---- the operator tables ---------------------------------------------------- */

static const imp_op *const op_tables[] = {imp_ops_elementwise, imp_ops_shape, imp_ops_nn, imp_ops_reduce, imp_ops_resize, imp_ops_einsum};

static const imp_op *find_op(const char *name) {
    for (size_t t = 0; t < sizeof op_tables / sizeof *op_tables; t++)
        for (const imp_op *o = op_tables[t]; o->name; o++)
            if (!strcmp(o->name, name)) return o;
    return NULL;
}

static int attr_accepted(const imp_op *o, const char *name) {
    size_t n = strlen(name);
    for (const char *p = o->attrs ? o->attrs : ""; *p;) {
        while (*p == ' ') p++;
        const char *e = p;
        while (*e && *e != ' ') e++;
        if ((size_t)(e - p) == n && !strncmp(p, name, n)) return 1;
        p = e;
    }
    return 0;
}

/* 1 when every input of n is a small host constant */
static int foldable(const imp_ctx *c, const ox_node *n) {
    /* these make their constants themselves, or grow them (a 4-element shape
     * can ask for a fill of millions) */
    static const char *const own[] = {"ConstantOfShape", "Constant", "Shape", "Size", "Range", "Expand", "Tile"};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (!strcmp(n->op_type, own[i])) return 0;
    int any = 0;
    for (int i = 0; i < n->n_in; i++) {
        if (!imp_has(n, i)) continue;
        int v = find_value(c, n->inputs[i]);
        if (v < 0 || !c->vals[v].c || c->vals[v].c->n > 4096) return 0;
        any = 1;
    }
    return any && n->n_out <= IMP_MAX_OUT;
}

/* a graph output read back into a host constant of ONNX type dt */
static int read_const(imp_ctx *c, kiln_graph *s, const char *name, int dt, ox_tensor **out) {
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    if (kiln_output_shape(s, name, &nd, dims) != KILN_OK) return imp_fail(c, KILN_ERR_INVALID, "folding: %s", kiln_graph_error(s));
    ox_tensor *k = imp_new_const(c, dt, nd, dims);
    if (!k) return 0;
    int kt = imp_kiln_dtype(dt);
    if (kt < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "folding: type %s", ox_dtype_name(dt));
    size_t bytes = kiln_dtype_bytes((kiln_dtype)kt, k->n);
    void *tmp = kt == KILN_I32 ? malloc(bytes ? bytes : 1) : k->data;
    if (!tmp) return imp_fail(c, KILN_ERR_NOMEM, "out of memory");
    if (kiln_read_output(s, name, tmp, bytes) != KILN_OK) {
        if (tmp != k->data) free(tmp);
        return imp_fail(c, KILN_ERR_INVALID, "folding: %s", kiln_graph_error(s));
    }
    if (kt == KILN_I32) {
        size_t es = ox_dtype_size(dt);
        for (int64_t i = 0; i < k->n; i++) {
            int64_t v = ((int32_t *)tmp)[i];
            switch (es) {
            case 1: ((uint8_t *)k->data)[i] = (uint8_t)v; break;
            case 2: ((uint16_t *)k->data)[i] = (uint16_t)v; break;
            case 4: ((uint32_t *)k->data)[i] = (uint32_t)v; break;
            default: ((int64_t *)k->data)[i] = v; break;
            }
        }
        free(tmp);
    }
    *out = k;
    return 1;
}

/* evaluate a node on constants now, with the reference interpreter on a
 * scratch graph, so that shape arithmetic (Shape -> Gather -> Concat ->
 * Reshape) becomes constants the shape-taking operators can read */
static int fold_node(imp_ctx *c, const imp_op *o, const ox_node *n) {
    kiln_graph *main = c->g, *s = kiln_graph_new();
    if (!s) return imp_fail(c, KILN_ERR_NOMEM, "out of memory");
    c->g = s;
    c->folding = 1;
    for (int i = 0; i < IMP_MAX_OUT; i++) c->fold_t[i] = KILN_NONE;
    int ok = o->fn(c, n);
    c->folding = 0;
    char name[32];
    for (int i = 0; ok && i < n->n_out; i++) {
        if (c->fold_t[i] == KILN_NONE) continue;
        snprintf(name, sizeof name, "fold%d", i);
        if (kiln_output(s, c->fold_t[i], name) != KILN_OK) ok = imp_check(c, KILN_NONE);
    }
    if (ok && kiln_eval_reference(s) != KILN_OK) ok = imp_fail(c, kiln_graph_status(s), "folding: %s", kiln_graph_error(s));
    for (int i = 0; ok && i < n->n_out; i++) {
        if (c->fold_t[i] == KILN_NONE) continue;
        ox_tensor *k = NULL;
        snprintf(name, sizeof name, "fold%d", i);
        ok = read_const(c, s, name, c->fold_dt[i], &k) && imp_set_const(c, n, i, k);
    }
    c->g = main;
    kiln_graph_free(s);
    return ok;
}

/* an operator that sums or normalises over many values, on f16/bf16 data:
 * its result depends on the order and width of the accumulation, which
 * ONNX leaves to the runtime, and the node cases' expected outputs differ
 * from kiln's f32 accumulation by a few f16 ulps, beyond the cases'
 * tolerance; refused rather than called a pass or a failure of kiln */
static int accumulates_half(imp_ctx *c, const ox_node *n) {
    static const char *const acc[] = {"MatMul", "Gemm", "Conv", "Softmax", "LogSoftmax", "LayerNormalization",
                                      "RMSNormalization", "InstanceNormalization", "BatchNormalization", "LRN",
                                      "AveragePool", "GlobalAveragePool", "ReduceSum", "ReduceMean", "ReduceL1",
                                      "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "CumSum",
                                      "Mean", "Sum"};
    size_t k = 0;
    while (k < sizeof acc / sizeof *acc && strcmp(acc[k], n->op_type)) k++;
    if (k == sizeof acc / sizeof *acc) return 0;
    for (int i = 0; i < n->n_in; i++) {
        if (!imp_has(n, i)) continue;
        int v = find_value(c, n->inputs[i]);
        if (v >= 0 && (c->vals[v].onnx_dtype == OX_FLOAT16 || c->vals[v].onnx_dtype == OX_BFLOAT16)) return 1;
    }
    return 0;
}

static int import_node(imp_ctx *c, const ox_node *n) {
    if (n->domain[0] && strcmp(n->domain, "ai.onnx"))
        return imp_fail(c, KILN_ERR_UNSUPPORTED, "operator %s of domain '%s' is not supported", n->op_type, n->domain);
    const imp_op *o = find_op(n->op_type);
    if (!o) return imp_fail(c, KILN_ERR_UNSUPPORTED, "operator %s is not supported by kiln's ONNX importer", n->op_type);
    for (int i = 0; i < n->n_attrs; i++)
        if (!attr_accepted(o, n->attrs[i].name))
            return imp_fail(c, KILN_ERR_UNSUPPORTED, "operator %s: attribute '%s' is not supported", n->op_type,
                            n->attrs[i].name);
    if (accumulates_half(c, n))
        return imp_fail(c, KILN_ERR_UNSUPPORTED,
                        "%s on float16/bfloat16: kiln accumulates in f32 and rounds once, and ONNX's reference rounds "
                        "differently by more than its tolerance",
                        n->op_type);
    if (foldable(c, n)) return fold_node(c, o, n);
    return o->fn(c, n);
}

char *kiln_onnx_operators(void) {
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[0] = 0;
    for (size_t t = 0; t < sizeof op_tables / sizeof *op_tables; t++)
        for (const imp_op *o = op_tables[t]; o->name; o++) {
            size_t k = strlen(o->name) + 2;
            if (len + k >= cap) {
                char *ns = realloc(s, cap *= 2);
                if (!ns) { free(s); return NULL; }
                s = ns;
            }
            len += (size_t)snprintf(s + len, cap - len, "%s\n", o->name);
        }
    return s;
}

/* ---- the model ---------------------------------------------------------------- */

static const kiln_onnx_const *find_given(const kiln_onnx_options *opt, const char *name) {
    for (int i = 0; opt && i < opt->n_consts; i++)
        if (opt->consts[i].name && !strcmp(opt->consts[i].name, name)) return &opt->consts[i];
    return NULL;
}

static int add_inputs(kiln_onnx_model *km, const kiln_onnx_options *opt) {
    imp_ctx *c = &km->c;
    ox_model *m = &km->pm;
    for (int i = 0; i < m->n_inits; i++) {
        imp_value *v = value_for(c, m->inits[i].name);
        if (!v) return 0;
        v->c = &m->inits[i];
        v->onnx_dtype = m->inits[i].dtype;
    }
    km->in_val = calloc((size_t)m->n_inputs + 1, sizeof *km->in_val);
    km->in_info = calloc((size_t)m->n_inputs + 1, sizeof *km->in_info);
    if (!km->in_val || !km->in_info) return imp_fail(c, KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->n_inputs; i++) {
        ox_value_info *vi = &m->inputs[i];
        if (find_value(c, vi->name) >= 0) continue; /* an initializer: its default value is used */
        const kiln_onnx_const *given = find_given(opt, vi->name);
        imp_value *v = value_for(c, vi->name);
        if (!v) return 0;
        if (!vi->is_tensor) return imp_fail(c, KILN_ERR_UNSUPPORTED, "input '%s' is not a tensor", vi->name);
        v->onnx_dtype = vi->elem;
        if (given) {
            if (given->ndim < 0 || given->ndim > KILN_MAX_DIMS || (given->ndim && !given->dims) || !given->data)
                return imp_fail(c, KILN_ERR_INVALID, "const input '%s': bad shape or data", vi->name);
            ox_tensor *k = imp_new_const(c, given->onnx_dtype, given->ndim, given->dims);
            if (!k) return 0;
            size_t es = ox_dtype_size(given->onnx_dtype);
            if (!es) return imp_fail(c, KILN_ERR_UNSUPPORTED, "const input '%s': type %d", vi->name, given->onnx_dtype);
            memcpy(k->data, given->data, (size_t)k->n * es);
            v->c = k;
            v->onnx_dtype = k->dtype;
            continue;
        }
        int kt = imp_kiln_dtype(vi->elem);
        if (kt < 0)
            return imp_fail(c, KILN_ERR_UNSUPPORTED, "input '%s' has type %s, which kiln does not support", vi->name,
                            ox_dtype_name(vi->elem));
        if (!vi->has_shape) return imp_fail(c, KILN_ERR_UNSUPPORTED, "input '%s' has no shape", vi->name);
        kiln_sym dims[KILN_MAX_DIMS];
        for (int d = 0; d < vi->ndim; d++) {
            if (!vi->params[d] && vi->dims[d] < 1) { /* an unnamed unknown size: a symbol of its own */
                char nm[48];
                snprintf(nm, sizeof nm, "in%d_d%d", i, d);
                size_t nl = strlen(nm) + 1;
                if (!(vi->params[d] = keep_buf(c, nl))) return imp_fail(c, KILN_ERR_NOMEM, "out of memory");
                memcpy(vi->params[d], nm, nl);
            }
            if (vi->params[d]) dims[d] = kiln_sym_var(c->g, vi->params[d]);
            else dims[d] = kiln_sym_int(c->g, vi->dims[d]);
        }
        v->t = kiln_input_dims(c->g, vi->name, (kiln_dtype)kt, vi->ndim, dims);
        if (!imp_check(c, v->t)) return 0;
        km->in_val[km->n_in] = (int)(v - c->vals);
        km->in_info[km->n_in++] = vi;
    }
    return 1;
}

static int add_outputs(kiln_onnx_model *km) {
    imp_ctx *c = &km->c;
    ox_model *m = &km->pm;
    km->out_info = calloc((size_t)m->n_outputs + 1, sizeof *km->out_info);
    km->out_dtype = calloc((size_t)m->n_outputs + 1, sizeof *km->out_dtype);
    if (!km->out_info || !km->out_dtype) return imp_fail(c, KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->n_outputs; i++) {
        int vi = find_value(c, m->outputs[i].name);
        if (vi < 0) return imp_fail(c, KILN_ERR_FORMAT, "output '%s' is not computed by any node", m->outputs[i].name);
        imp_value *v = &c->vals[vi];
        if (v->t == KILN_NONE && v->c) v->t = materialise(c, v);
        if (!imp_check(c, v->t)) return 0;
        if (kiln_output(c->g, v->t, v->name) != KILN_OK) return imp_check(c, KILN_NONE);
        km->out_info[km->n_out] = &m->outputs[i];
        km->out_dtype[km->n_out++] = v->onnx_dtype;
    }
    return 1;
}

void kiln_onnx_free(kiln_onnx_model *m) {
    if (!m) return;
    if (m->g) kiln_graph_free(m->g);
    for (int i = 0; i < m->c.n_bufs; i++) free(m->c.bufs[i]);
    free(m->c.bufs);
    free(m->c.vals);
    free(m->c.hash);
    free(m->in_val);
    free(m->in_info);
    free(m->out_info);
    free(m->out_dtype);
    ox_model_free(&m->pm);
    free(m);
}

static kiln_onnx_model *load_failed(kiln_onnx_model *km, kiln_status s, const char *msg, kiln_status *st, char *err,
                                    size_t errcap) {
    if (st) *st = s;
    if (err && errcap) snprintf(err, errcap, "%s", msg);
    kiln_onnx_free(km);
    return NULL;
}

kiln_onnx_model *kiln_onnx_load_buffer(const void *data, size_t len, const char *dir, const kiln_onnx_options *opt,
                                       kiln_status *st, char *err, size_t errcap) {
    kiln_onnx_model *km = calloc(1, sizeof *km);
    if (!km) return load_failed(NULL, KILN_ERR_NOMEM, "out of memory", st, err, errcap);
    if (!ox_decode(data, len, dir, &km->pm)) return load_failed(km, km->pm.status, km->pm.err, st, err, errcap);
    imp_ctx *c = &km->c;
    c->m = &km->pm;
    c->opset = (int)km->pm.opset;
    if (km->pm.opset < OPSET_MIN || km->pm.opset > OPSET_MAX) {
        char msg[160];
        snprintf(msg, sizeof msg, "opset %lld is not supported (kiln knows opsets %d to %d)", (long long)km->pm.opset,
                 OPSET_MIN, OPSET_MAX);
        return load_failed(km, KILN_ERR_UNSUPPORTED, msg, st, err, errcap);
    }
    km->g = c->g = kiln_graph_new();
    if (!c->g) return load_failed(km, KILN_ERR_NOMEM, "out of memory", st, err, errcap);
    if (add_inputs(km, opt)) {
        for (int i = 0; i < km->pm.n_nodes && c->status == KILN_OK; i++) {
            const ox_node *n = &km->pm.nodes[i];
            if (!import_node(c, n) || !imp_check(c, 0)) {
                kiln_status s = c->status != KILN_OK ? c->status : KILN_ERR_INVALID;
                char msg[384];
                snprintf(msg, sizeof msg, "%.380s", c->status != KILN_OK ? c->err : "failed");
                snprintf(c->err, sizeof c->err, "node %d (%.40s%s%.40s): %s", i, n->op_type, n->name[0] ? " " : "",
                         n->name, msg);
                c->status = s;
            }
        }
        if (c->status == KILN_OK) add_outputs(km);
    }
    if (c->status != KILN_OK) return load_failed(km, c->status, c->err, st, err, errcap);
    if (st) *st = KILN_OK;
    if (err && errcap) err[0] = 0;
    return km;
}

kiln_onnx_model *kiln_onnx_load(const char *path, const kiln_onnx_options *opt, kiln_status *st, char *err,
                                size_t errcap) {
    char msg[600];
    if (!path) return load_failed(NULL, KILN_ERR_INVALID, "no path", st, err, errcap);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(msg, sizeof msg, "cannot open %s", path);
        return load_failed(NULL, KILN_ERR_IO, msg, st, err, errcap);
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 1 << 16;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); return load_failed(NULL, KILN_ERR_NOMEM, "out of memory", st, err, errcap); }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    int rd_err = ferror(f);
    fclose(f);
    if (rd_err) {
        free(buf);
        snprintf(msg, sizeof msg, "cannot read %s", path);
        return load_failed(NULL, KILN_ERR_IO, msg, st, err, errcap);
    }
    /* external data lives beside the model */
    char *dir = strdup(path);
    if (!dir) { free(buf); return load_failed(NULL, KILN_ERR_NOMEM, "out of memory", st, err, errcap); }
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else strcpy(dir, ".");
    kiln_onnx_model *m = kiln_onnx_load_buffer(buf, len, dir, opt, st, msg, sizeof msg);
    free(dir);
    free(buf);
    if (!m && err && errcap) snprintf(err, errcap, "%s: %s", path, msg);
    return m;
}

kiln_graph *kiln_onnx_graph(const kiln_onnx_model *m) { return m ? m->g : NULL; }
int kiln_onnx_opset(const kiln_onnx_model *m) { return m ? (int)m->pm.opset : -1; }
int kiln_onnx_input_count(const kiln_onnx_model *m) { return m ? m->n_in : 0; }
const char *kiln_onnx_input_name(const kiln_onnx_model *m, int i) {
    return m && i >= 0 && i < m->n_in ? m->in_info[i]->name : NULL;
}
int kiln_onnx_input_onnx_dtype(const kiln_onnx_model *m, int i) {
    return m && i >= 0 && i < m->n_in ? m->in_info[i]->elem : 0;
}
kiln_dtype kiln_onnx_input_dtype(const kiln_onnx_model *m, int i) {
    return m && i >= 0 && i < m->n_in ? (kiln_dtype)imp_kiln_dtype(m->in_info[i]->elem) : KILN_F32;
}
int kiln_onnx_input_dims(const kiln_onnx_model *m, int i, int64_t dims[KILN_MAX_DIMS], const char *names[KILN_MAX_DIMS]) {
    if (!m || i < 0 || i >= m->n_in) return -1;
    const ox_value_info *v = m->in_info[i];
    for (int d = 0; d < v->ndim; d++) {
        dims[d] = v->params[d] ? -1 : v->dims[d];
        if (names) names[d] = v->params[d];
    }
    return v->ndim;
}
int kiln_onnx_output_count(const kiln_onnx_model *m) { return m ? m->n_out : 0; }
const char *kiln_onnx_output_name(const kiln_onnx_model *m, int i) {
    return m && i >= 0 && i < m->n_out ? m->out_info[i]->name : NULL;
}
int kiln_onnx_output_onnx_dtype(const kiln_onnx_model *m, int i) {
    return m && i >= 0 && i < m->n_out ? m->out_dtype[i] : 0;
}
