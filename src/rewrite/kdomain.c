/* kdomain.c — what kiln's ops mean to the e-graph: op names, interned views
 * and inputs, the per-class analysis (shape, dtype, constant value), constant
 * folding, the canonical constant form, side conditions, and the default cost.
 *
 * Invariants: a class's shape/dtype are those of every tensor it holds (the
 * analysis counts any disagreement as a conflict, which the soundness suite
 * treats as a failed rule). A constant is recorded only when every element of
 * the class equals it; folding happens only where kiln's reference computes
 * the same value up to rounding (f32 and i32 arithmetic), never for f16/bf16.
 * When a class is known constant it also gets the node VIEW[broadcast](CONST),
 * so extraction can pick the folded form.
 */
#include <math.h>
#include <string.h>

#include "base.h"
#include "rewrite.h"

/* ---- ops ------------------------------------------------------------------- */

const char *eg_op_name(int op) {
    if (op >= 0 && op < OP_COUNT) return op_table[op].name;
    if (op == EG_OP_VIEW) return "VIEW";
    return "?";
}

int eg_op_arity(int op) {
    if (op >= 0 && op < OP_COUNT) return op_table[op].arity;
    if (op == EG_OP_VIEW) return 1;
    return -1;
}

int eg_op_lookup(const char *name) {
    for (int op = 0; op < EG_OP_COUNT; op++)
        if (strcmp(eg_op_name(op), name) == 0) return op;
    return -1;
}

/* ---- interning --------------------------------------------------------------- */

/* a copy with every unused slot zeroed, so equal views compare equal bytewise */
static void view_canon(view *out, const view *v) {
    memset(out, 0, sizeof *out);
    out->nlayers = v->nlayers;
    for (int l = 0; l < v->nlayers; l++) {
        const view_layer *a = &v->layer[l];
        view_layer *b = &out->layer[l];
        b->ndim = a->ndim;
        b->offset = a->offset;
        b->masked = a->masked;
        for (int d = 0; d < a->ndim; d++) {
            b->shape[d] = a->shape[d];
            b->stride[d] = a->stride[d];
            if (a->masked) {
                b->mask_lo[d] = a->mask_lo[d];
                b->mask_hi[d] = a->mask_hi[d];
            }
        }
    }
}

static uint64_t view_hash(const view *v) {
    const uint32_t *w = (const uint32_t *)(const void *)v;
    uint64_t h = 0x84222325cbf29ce4ULL;
    for (size_t i = 0; i < sizeof *v / 4; i++) h = kiln_hash_mix(h, w[i]);
    return h;
}

static void view_index_rebuild(eg_kiln *ek, uint32_t cap) {
    free(ek->view_index);
    ek->view_index = kiln_xmalloc(sizeof(uint32_t) * cap);
    memset(ek->view_index, 0xff, sizeof(uint32_t) * cap);
    ek->view_index_cap = cap;
    for (uint32_t i = 0; i < ek->nviews; i++) {
        uint32_t j = (uint32_t)view_hash(&ek->views[i]) & (cap - 1);
        while (ek->view_index[j] != UINT32_MAX) j = (j + 1) & (cap - 1);
        ek->view_index[j] = i;
    }
}

uint32_t ek_intern_view(eg_kiln *ek, const view *v) {
    view c;
    view_canon(&c, v);
    uint32_t cap = ek->view_index_cap;
    uint32_t j = (uint32_t)view_hash(&c) & (cap - 1);
    while (ek->view_index[j] != UINT32_MAX) {
        if (memcmp(&ek->views[ek->view_index[j]], &c, sizeof c) == 0) return ek->view_index[j];
        j = (j + 1) & (cap - 1);
    }
    KILN_GROW(ek->views, ek->cap_views, ek->nviews + 1);
    ek->views[ek->nviews] = c;
    ek->view_index[j] = ek->nviews;
    uint32_t id = ek->nviews++;
    if (ek->nviews * 2 > cap) view_index_rebuild(ek, cap * 2);
    return id;
}

uint32_t ek_intern_input(eg_kiln *ek, const char *name, kiln_dtype t, int ndim, const sym_id *shape, int is_state) {
    for (uint32_t i = 0; i < ek->ninputs; i++)
        if (strcmp(ek->inputs[i].name, name) == 0) return i;
    KILN_GROW(ek->inputs, ek->cap_inputs, ek->ninputs + 1);
    ek_input *in = &ek->inputs[ek->ninputs];
    memset(in, 0, sizeof *in);
    in->name = kiln_xstrdup(name);
    in->dtype = t;
    in->ndim = ndim;
    for (int d = 0; d < ndim; d++) in->shape[d] = shape[d];
    in->is_state = is_state;
    if (is_state) {
        uint32_t nv = sym_var_count(ek->syms);
        if (ek->ncapacity_var < nv) {
            ek->capacity_var = kiln_xrealloc(ek->capacity_var, nv);
            memset(ek->capacity_var + ek->ncapacity_var, 0, nv - ek->ncapacity_var);
            ek->ncapacity_var = nv;
        }
        for (uint32_t v = 0; v < nv; v++)
            for (int d = 0; d < ndim; d++)
                if (sym_uses_var(ek->syms, shape[d], sym_var_node(ek->syms, v))) ek->capacity_var[v] = 1;
    }
    return ek->ninputs++;
}

int ek_view_masked(const eg_kiln *ek, uint32_t vid) {
    const view *v = &ek->views[vid];
    for (int l = 0; l < v->nlayers; l++)
        if (v->layer[l].masked) return 1;
    return 0;
}

/* ---- constants ---------------------------------------------------------------- */

/* a CONST e-node's value travels as its double's bits (eg_node.arg) */
int64_t ek_dbits(double v) {
    int64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

double ek_bitsd(int64_t b) {
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

int ek_fold(int op, kiln_dtype t, int nargs, const double *a, double *out) {
    double r = 0;
    if (op < 0 || op >= OP_COUNT) return 0; /* EG_OP_VIEW */
    if (t == KILN_F32) {
        switch ((op_kind)op) {
        OP_UNARY_CASES r = op_unary[op].f64(a[0]); break; /* ops.def's F64 column */
        case OP_ADD: r = a[0] + a[1]; break;
        case OP_MUL: r = a[0] * a[1]; break;
        case OP_MOD: r = fmod(a[0], a[1]); break;
        case OP_LT: r = a[0] < a[1] ? 1.0 : 0.0; break;
        case OP_CONTIGUOUS: r = a[0]; break;
        case OP_INPUT: case OP_CONST: case OP_IOTA: case OP_SUM: case OP_MAX: case OP_GATHER: case OP_SCATTER:
        case OP_CAST: case OP_CONTRACT: case OP_SOFTMAX_ONLINE: case OP_SOFTMAX_CONTRACT: return 0;
        }
        *out = (double)(float)r;
        return 1;
    }
    if (t == KILN_I32) {
        for (int i = 0; i < nargs; i++)
            if (a[i] != floor(a[i]) || fabs(a[i]) > 2147483647.0) return 0;
        switch ((op_kind)op) {
        case OP_ADD: r = a[0] + a[1]; break;
        case OP_MUL: r = a[0] * a[1]; break;
        case OP_MOD:
            if (a[1] == 0) return 0;
            r = fmod(a[0], a[1]);
            break;
        case OP_LT: r = a[0] < a[1] ? 1.0 : 0.0; break;
        case OP_CONTIGUOUS: r = a[0]; break;
        OP_UNARY_CASES
        case OP_INPUT: case OP_CONST: case OP_IOTA: case OP_SUM: case OP_MAX: case OP_GATHER: case OP_SCATTER:
        case OP_CAST: case OP_CONTRACT: case OP_SOFTMAX_ONLINE: case OP_SOFTMAX_CONTRACT: return 0;
        }
        if (fabs(r) > 2147483647.0) return 0;
        *out = r;
        return 1;
    }
    if (op == OP_CONTIGUOUS) {
        *out = a[0];
        return 1;
    }
    return 0;
}

/* ---- analysis ---------------------------------------------------------------------- */

static void set_shape(eg_data *d, int ndim, const sym_id *shape) {
    d->ndim = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) d->shape[i] = shape[i];
}

static void ek_make(void *ctx, egraph *eg, const eg_node *n, eg_data *out) {
    eg_kiln *ek = ctx;
    const eg_data *k0 = n->nkids > 0 ? eg_data_of(eg, n->kids[0]) : NULL;
    const eg_data *k1 = n->nkids > 1 ? eg_data_of(eg, n->kids[1]) : NULL;
    out->known = 1;
    out->dtype = n->dtype;
    if (n->op == EG_OP_VIEW) {
        const view *v = &ek->views[n->arg];
        set_shape(out, view_ndim(v), view_shape(v));
        if (k0->has_const && (k0->cval == 0 || !ek_view_masked(ek, (uint32_t)n->arg))) {
            out->has_const = 1;
            out->cval = k0->cval;
        }
        return;
    }
    switch ((op_kind)n->op) {
    case OP_INPUT: {
        const ek_input *in = &ek->inputs[n->arg];
        set_shape(out, in->ndim, in->shape);
        return;
    }
    case OP_CONST:
        out->ndim = 0;
        out->has_const = 1;
        out->cval = ek_bitsd(n->arg);
        return;
    case OP_IOTA: {
        const view *v = &ek->views[n->arg2];
        set_shape(out, view_ndim(v), view_shape(v));
        return;
    }
    case OP_SUM:
    case OP_MAX:
    case OP_CONTRACT:
    case OP_SOFTMAX_CONTRACT: {
        int nd = 0;
        for (int i = 0; i < k0->ndim; i++)
            if (i != n->arg) out->shape[nd++] = k0->shape[i];
        out->ndim = (uint8_t)nd;
        int64_t len;
        if (n->op != OP_CONTRACT && n->op != OP_SOFTMAX_CONTRACT && k0->has_const && sym_is_const(ek->syms, k0->shape[n->arg], &len) && len >= 1) {
            if (n->op == OP_MAX) {
                out->has_const = 1;
                out->cval = k0->cval;
            } else if (n->dtype == KILN_F32 || n->dtype == KILN_I32) {
                double a[2] = {(double)len, k0->cval}, r;
                if (ek_fold(OP_MUL, (kiln_dtype)n->dtype, 2, a, &r)) {
                    out->has_const = 1;
                    out->cval = r;
                }
            }
        }
        return;
    }
    case OP_GATHER: {
        int nd = 0;
        for (int i = 0; i < k1->ndim; i++) out->shape[nd++] = k1->shape[i];
        for (int i = 1; i < k0->ndim; i++) out->shape[nd++] = k0->shape[i];
        out->ndim = (uint8_t)nd;
        return;
    }
    case OP_SCATTER: set_shape(out, k0->ndim, k0->shape); return;
    case OP_CAST: set_shape(out, k0->ndim, k0->shape); return;
    OP_UNARY_CASES
    case OP_ADD: case OP_MUL: case OP_MOD: case OP_LT:
    case OP_CONTIGUOUS: case OP_SOFTMAX_ONLINE: break;
    }
    /* elementwise, CONTIGUOUS and SOFTMAX_ONLINE: the first operand's shape */
    set_shape(out, k0->ndim, k0->shape);
    double a[2];
    int all = 1;
    for (int i = 0; i < n->nkids; i++) {
        const eg_data *d = eg_data_of(eg, n->kids[i]);
        all &= d->has_const;
        a[i] = d->cval;
    }
    double r;
    if (all && ek_fold(n->op, (kiln_dtype)n->dtype, n->nkids, a, &r)) {
        out->has_const = 1;
        out->cval = r;
    }
}

static int class_has_const_form(egraph *eg, eg_id c) {
    const eg_class *k = &eg->classes[c];
    for (uint32_t i = 0; i < k->nnodes; i++) {
        const eg_node *n = &eg->nodes[k->nodes[i]];
        if (n->op == OP_CONST) return 1;
        if (n->op == EG_OP_VIEW) {
            const eg_class *kk = &eg->classes[eg_find(eg, n->kids[0])];
            for (uint32_t j = 0; j < kk->nnodes; j++)
                if (eg->nodes[kk->nodes[j]].op == OP_CONST) return 1;
        }
    }
    return 0;
}

static void ek_modify(void *ctx, egraph *eg, eg_id c) {
    eg_kiln *ek = ctx;
    c = eg_find(eg, c);
    eg_data d = eg->classes[c].data;
    if (!d.has_const || !d.known || class_has_const_form(eg, c)) return;
    eg_id f = ek_full(ek, d.cval, (kiln_dtype)d.dtype, d.ndim, d.shape);
    eg_union(eg, c, f);
}

eg_id ek_view(eg_kiln *ek, eg_id x, const view *v) {
    egraph *eg = ek->eg;
    const eg_data *d = eg_data_of(eg, x);
    int same = view_is_identity(v, ek->syms) && view_ndim(v) == d->ndim;
    for (int i = 0; same && i < d->ndim; i++) same = view_shape(v)[i] == d->shape[i];
    if (same) return eg_find(eg, x);
    uint32_t vid = ek_intern_view(ek, v);
    eg_id kid = x;
    eg_node n = eg_mk(EG_OP_VIEW, d->dtype, vid, 0, 1, &kid);
    return eg_add(eg, &n);
}

eg_id ek_full(eg_kiln *ek, double value, kiln_dtype t, int ndim, const sym_id *shape) {
    eg_node cn = eg_mk(OP_CONST, (uint8_t)t, ek_dbits(value), 0, 0, NULL);
    eg_id c = eg_add(ek->eg, &cn);
    if (ndim == 0) return c;
    view v;
    sym_id ones[KILN_MAX_DIMS];
    for (int i = 0; i < ndim; i++) ones[i] = sym_const(ek->syms, 1);
    sym_id none[1] = {0}; /* a 0-d shape: never read, but memcpy needs a pointer */
    view_identity(&v, ek->syms, 0, none);
    int rc = view_reshape(&v, &v, ek->syms, ndim, ones);
    rc |= view_expand(&v, &v, ek->syms, shape);
    KILN_ASSERT(rc == 0); /* a broadcast scalar is one layer */
    return ek_view(ek, c, &v);
}

eg_kiln *ek_new(sym_pool *syms) {
    eg_kiln *ek = kiln_xcalloc(1, sizeof *ek);
    ek->syms = syms;
    eg_hooks h = {ek, ek_make, ek_modify};
    ek->eg = eg_new(&h);
    ek->view_index_cap = 0;
    view_index_rebuild(ek, 256);
    return ek;
}

void ek_free(eg_kiln *ek) {
    if (!ek) return;
    eg_free(ek->eg);
    for (uint32_t i = 0; i < ek->ninputs; i++) free(ek->inputs[i].name);
    for (uint32_t i = 0; i < ek->nroots; i++) free(ek->root_names[i]);
    free(ek->inputs);
    free(ek->views);
    free(ek->view_index);
    free(ek->roots);
    free(ek->root_names);
    free(ek->shared);
    free(ek->shared_uses);
    free(ek->capacity_var);
    free(ek);
}

/* ---- side conditions ------------------------------------------------------------------
 * signature letters: c = class variable, p = payload variable, n = number */

enum {
    C_CONST, C_CONST_EQ, C_CONST_NE, C_NONCONST, C_FLOAT, C_SAME_SHAPE, C_UNMASKED, C_MASKED,
    C_BROADCAST, C_SIZE1, C_AXIS_LT, C_FINITE, C_F32, C_AXIS_EQ, C_AFFINE, C_COUNT
};

static const struct { const char *name, *sig; } cond_table[C_COUNT] = {
    [C_CONST] = {"const", "c"},            /* every element of ?x is one known constant */
    [C_CONST_EQ] = {"const_eq", "cn"},     /* ... and it equals N */
    [C_CONST_NE] = {"const_ne", "cn"},     /* ... and it is not N */
    [C_NONCONST] = {"nonconst", "c"},      /* ?x is not known constant */
    [C_FLOAT] = {"float", "c"},            /* ?x has a float dtype */
    [C_SAME_SHAPE] = {"same_shape", "cc"}, /* equal shapes and dtypes */
    [C_UNMASKED] = {"unmasked", "p"},      /* view ?v reads no padding */
    [C_MASKED] = {"masked", "p"},          /* view ?v reads padding (zeros) */
    [C_BROADCAST] = {"broadcast", "p"},    /* view ?v repeats elements (a stride-0 axis of size > 1) */
    [C_SIZE1] = {"size1", "cp"},           /* axis ?k of ?x has size 1 */
    [C_AXIS_LT] = {"axis_lt", "pp"},       /* axis ?a < axis ?b */
    [C_FINITE] = {"finite", "c"},          /* ?x is a known finite constant */
    [C_F32] = {"f32", "c"},                /* ?x is f32 */
    [C_AXIS_EQ] = {"axis_eq", "pn"},       /* axis ?k is N */
    [C_AFFINE] = {"affine", "p"},          /* view ?v is one layer: its offsets are affine, no div/mod */
};

int ek_cond_lookup(const char *name, int *nargs, const char **sig) {
    for (int i = 0; i < C_COUNT; i++)
        if (strcmp(cond_table[i].name, name) == 0) {
            *sig = cond_table[i].sig;
            *nargs = (int)strlen(*sig);
            return i;
        }
    return -1;
}

static int view_broadcasts(const eg_kiln *ek, uint32_t vid) {
    const view *v = &ek->views[vid];
    for (int l = 0; l < v->nlayers; l++) {
        const view_layer *L = &v->layer[l];
        for (int d = 0; d < L->ndim; d++) {
            int64_t st, sz;
            if (sym_is_const(ek->syms, L->stride[d], &st) && st == 0 &&
                !(sym_is_const(ek->syms, L->shape[d], &sz) && sz <= 1))
                return 1;
        }
    }
    return 0;
}

int ek_cond_eval(eg_kiln *ek, const eg_clause *c, const eg_subst *s) {
    egraph *eg = ek->eg;
    const eg_data *a = NULL, *b = NULL;
    const char *sig = cond_table[c->kind].sig;
    if (sig[0] == 'c') a = eg_data_of(eg, s->cls[c->args[0]]);
    if (sig[0] && sig[1] == 'c') b = eg_data_of(eg, s->cls[c->args[1]]);
    switch (c->kind) {
    case C_CONST: return a->has_const;
    case C_CONST_EQ: return a->has_const && a->cval == c->num;
    case C_CONST_NE: return a->has_const && a->cval != c->num;
    case C_NONCONST: return !a->has_const;
    case C_FLOAT: return kiln_dtype_is_float((kiln_dtype)a->dtype);
    case C_F32: return a->dtype == KILN_F32;
    case C_FINITE: return a->has_const && isfinite(a->cval);
    case C_SAME_SHAPE: {
        int same = a->dtype == b->dtype && a->ndim == b->ndim;
        for (int i = 0; same && i < a->ndim; i++) same = a->shape[i] == b->shape[i];
        return same;
    }
    case C_UNMASKED: return !ek_view_masked(ek, (uint32_t)s->pv[c->args[0]].arg);
    case C_MASKED: return ek_view_masked(ek, (uint32_t)s->pv[c->args[0]].arg);
    case C_BROADCAST: return view_broadcasts(ek, (uint32_t)s->pv[c->args[0]].arg);
    case C_AFFINE: return ek->views[(uint32_t)s->pv[c->args[0]].arg].nlayers <= 1;
    case C_SIZE1: {
        int64_t ax = s->pv[c->args[1]].arg, v;
        return ax >= 0 && ax < a->ndim && sym_is_const(ek->syms, a->shape[ax], &v) && v == 1;
    }
    case C_AXIS_LT: return s->pv[c->args[0]].arg < s->pv[c->args[1]].arg;
    case C_AXIS_EQ: return s->pv[c->args[0]].arg == (int64_t)c->num;
    default: KILN_ASSERT(0 && "unknown condition");
    }
    return 0;
}

/* ---- default cost ------------------------------------------------------------------------ */

/* a symbolic size: 64 (moderate), or where it uses a state's capacity
 * variable (eg_kiln.capacity_var) the expression at 4096 for those and 64
 * for the others, so a state's slice guesses smaller than the state */
static double symbolic_size(const eg_kiln *ek, sym_id s) {
    uint32_t nv = sym_var_count(ek->syms);
    int capacity = 0;
    for (uint32_t v = 0; v < nv && v < ek->ncapacity_var && !capacity; v++)
        capacity = ek->capacity_var[v] && sym_uses_var(ek->syms, s, sym_var_node(ek->syms, v));
    if (!capacity) return 64.0;
    int64_t stack[16], *vals = nv <= 16 ? stack : kiln_xcalloc(nv, sizeof *vals), out = 0;
    for (uint32_t v = 0; v < nv; v++) vals[v] = v < ek->ncapacity_var && ek->capacity_var[v] ? 4096 : 64;
    uint32_t missing = 0;
    int ok = sym_eval(ek->syms, s, vals, NULL, &out, &missing) == 0;
    if (vals != stack) free(vals);
    return ok && out > 0 ? (double)out : 64.0;
}

/* capacity: guess a state's capacity large (symbolic_size), else every
 * symbolic size 64 */
static double elements(const eg_kiln *ek, const eg_data *d, int capacity) {
    double e = 1;
    for (int i = 0; i < d->ndim; i++) {
        int64_t v;
        e *= sym_is_const(ek->syms, d->shape[i], &v) ? (double)v : capacity ? symbolic_size(ek, d->shape[i]) : 64.0;
    }
    return e;
}

double ek_default_cost(void *ctx, egraph *eg, const eg_node *n) {
    const eg_kiln *ek = ctx;
    if (ek->primitives_only && (int)n->op >= (int)OP_PRIM_COUNT && (int)n->op < (int)OP_COUNT &&
        !(ek->primitives_only == EG_EXTRACT_STREAM && n->op == OP_SOFTMAX_CONTRACT))
        return INFINITY;
    if (n->op == OP_INPUT || n->op == OP_CONST) return 1;
    if (n->op == EG_OP_VIEW) return 1; /* free movement, but not nothing: prefer fewer views */
    if (n->op == OP_IOTA) {
        eg_data d;
        memset(&d, 0, sizeof d);
        set_shape(&d, view_ndim(&ek->views[n->arg2]), view_shape(&ek->views[n->arg2]));
        return 1 + elements(ek, &d, 0);
    }
    /* a node's result size, re-derived from its operands (its own class's
     * data is shared), times the op's weight (ops.def's XCOST); a cast's
     * with a state's capacity guessed large, so that a cast of a state's
     * slice (an f16 KV cache's rows read as f32) stays below the slice
     * instead of converting the whole state. Only casts: other ops keep the
     * flat guess, which the programs' bit-for-bit agreements (batched
     * decoding's rows against the single program's) were made under */
    const eg_data *k0 = n->nkids ? eg_data_of(eg, n->kids[0]) : NULL;
    double out = 1;
    if (k0) out = elements(ek, k0, n->op == OP_CAST);
    return 1 + (n->op < OP_COUNT ? op_table[n->op].xcost : 1) * out;
}
