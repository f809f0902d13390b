/* rules.c — kiln's rewrite rules, as data, and the few appliers whose right
 * side needs arithmetic on axes or views.
 *
 * Every rule here must keep results equal up to floating-point rounding for
 * all inputs the reference interpreter accepts; tests/unit/test_rules.c checks
 * each one on random values. Reassociation and distribution are accepted
 * (they only move rounding); identities that fail for inf/NaN or negative
 * inputs (x*0 = 0, sqrt(x)^2 = x, exp2(log2 x) = x) are not rules, or carry a
 * condition that excludes those inputs. No rule may turn finite values into
 * inf or NaN: exp2(a+b) -> exp2(a)*exp2(b) did, on attention's large finite
 * mask values, and is therefore not a rule. A view is pushed through an op only
 * when the op maps the padding value 0 to 0, or the view has no padding.
 * One rule carries an assumption instead of a checkable condition:
 * onehot-gather is exact for finite tables only (model weights are finite;
 * a one-hot product with an inf/NaN entry elsewhere in the column is NaN).
 * Recognition appliers live in recognize.c.
 */
#include <string.h>

#include "base.h"
#include "rewrite.h"

const eg_rule_def eg_default_rules[] = {
    /* ---- algebra ---- */
    {"add-comm", "(ADD ?a ?b)", "(ADD ?b ?a)", "", "addition commutes (exactly, in IEEE arithmetic)"},
    {"mul-comm", "(MUL ?a ?b)", "(MUL ?b ?a)", "", "multiplication commutes"},
    {"add-assoc", "(ADD (ADD ?a ?b) ?c)", "(ADD ?a (ADD ?b ?c))", "", "reassociation moves rounding only"},
    {"add-assoc-r", "(ADD ?a (ADD ?b ?c))", "(ADD (ADD ?a ?b) ?c)", "", "reassociation the other way"},
    {"mul-assoc", "(MUL (MUL ?a ?b) ?c)", "(MUL ?a (MUL ?b ?c))", "", "reassociation moves rounding only"},
    {"mul-assoc-r", "(MUL ?a (MUL ?b ?c))", "(MUL (MUL ?a ?b) ?c)", "", "reassociation the other way"},
    {"add-zero", "(ADD ?x ?z)", "?x", "const_eq ?z 0", "x + 0 = x (also for inf and NaN)"},
    {"mul-one", "(MUL ?x ?o)", "?x", "const_eq ?o 1", "x * 1 = x (also for inf and NaN)"},
    {"mul-zero-lt", "(MUL (LT ?a ?b) ?z)", "?z", "const_eq ?z 0",
     "a comparison is 0 or 1, never inf/NaN, so times 0 is 0 (general x*0 is not: inf*0 = NaN)"},
    {"neg-neg", "(MUL (MUL ?x ?m) ?n)", "?x", "const_eq ?m -1, const_eq ?n -1", "-(-x) = x exactly"},
    {"add-self", "(ADD ?x ?x)", "(MUL ?x (FULL 2 ?x))", "float ?x", "x + x = 2x exactly in binary floating point"},
    {"distribute", "(MUL ?a (ADD ?b ?c))", "(ADD (MUL ?a ?b) (MUL ?a ?c))", "float ?a, finite ?a",
     "distribution by a finite constant moves rounding only (inf*(b+c) -> inf*b + inf*c turns -inf into NaN)"},
    {"factor", "(ADD (MUL ?a ?b) (MUL ?a ?c))", "(MUL ?a (ADD ?b ?c))", "float ?a, finite ?a",
     "factoring out a finite constant, distribution reversed"},
    {"mul-const-merge", "(MUL (MUL ?x ?c) ?d)", "(MUL ?x (MUL ?c ?d))", "const ?c, const ?d",
     "gather constant factors so they fold, even while mul-assoc is banned"},
    {"add-const-merge", "(ADD (ADD ?x ?c) ?d)", "(ADD ?x (ADD ?c ?d))", "const ?c, const ?d",
     "gather constant terms so they fold"},
    {"exp2-mul", "(MUL (EXP2 ?a) (EXP2 ?b))", "(EXP2 (ADD ?a ?b))", "",
     "2^a * 2^b = 2^(a+b); never the other way: splitting turns a large finite exponent into inf * 0"},
    {"log2-exp2", "(LOG2 (EXP2 ?x))", "?x", "", "log2 inverts exp2 (where 2^x neither overflows nor underflows)"},
    {"recip-recip", "(RECIP (RECIP ?x))", "?x", "", "1/(1/x) = x, also for 0 and inf"},
    {"recip-mul", "(RECIP (MUL ?a ?b))", "(MUL (RECIP ?a) (RECIP ?b))", "", "1/(ab) = (1/a)(1/b)"},
    {"recip-merge", "(MUL (RECIP ?a) (RECIP ?b))", "(RECIP (MUL ?a ?b))", "", "(1/a)(1/b) = 1/(ab): one division"},
    {"lt-self", "(LT ?x ?x)", "(FULL 0 ?x)", "", "x < x is false, NaN included"},
    {"sqrt-recip", "(RECIP (SQRT ?x))", "(SQRT (RECIP ?x))", "", "1/sqrt(x) = sqrt(1/x) (NaN for x < 0 either way)"},

    /* ---- movement: views through elementwise ops ---- */
    {"view-hoist-exp2", "(EXP2 (VIEW[?v] ?x))", "(VIEW[?v] (EXP2 ?x))", "unmasked ?v",
     "elementwise then view = view then elementwise; on a broadcast it computes fewer elements"},
    {"view-hoist-log2", "(LOG2 (VIEW[?v] ?x))", "(VIEW[?v] (LOG2 ?x))", "unmasked ?v", "as view-hoist-exp2"},
    {"view-hoist-sin", "(SIN (VIEW[?v] ?x))", "(VIEW[?v] (SIN ?x))", "", "sin(0) = 0, so padding may stay outside"},
    {"view-hoist-sqrt", "(SQRT (VIEW[?v] ?x))", "(VIEW[?v] (SQRT ?x))", "", "sqrt(0) = 0, so padding may stay outside"},
    {"view-hoist-recip", "(RECIP (VIEW[?v] ?x))", "(VIEW[?v] (RECIP ?x))", "unmasked ?v", "as view-hoist-exp2"},
    {"view-hoist-cast", "(CAST[?t] (VIEW[?v] ?x))", "(VIEW[?v] (CAST[?t] ?x))", "unmasked ?v, float ?x",
     "a cast is elementwise (block formats excluded: their views are restricted)"},
    {"view-sink-exp2", "(VIEW[?v] (EXP2 ?x))", "(EXP2 (VIEW[?v] ?x))", "unmasked ?v",
     "the view moves onto the operand, where a kernel reads it for free"},
    {"view-sink-log2", "(VIEW[?v] (LOG2 ?x))", "(LOG2 (VIEW[?v] ?x))", "unmasked ?v", "as view-sink-exp2"},
    {"view-sink-sin", "(VIEW[?v] (SIN ?x))", "(SIN (VIEW[?v] ?x))", "", "sin(0) = 0, so even a padding view may move inside"},
    {"view-sink-sqrt", "(VIEW[?v] (SQRT ?x))", "(SQRT (VIEW[?v] ?x))", "", "sqrt(0) = 0, so even a padding view may move inside"},
    {"view-sink-recip", "(VIEW[?v] (RECIP ?x))", "(RECIP (VIEW[?v] ?x))", "unmasked ?v", "as view-sink-exp2"},
    {"view-hoist-add", "(ADD (VIEW[?v] ?a) (VIEW[?v] ?b))", "(VIEW[?v] (ADD ?a ?b))", "same_shape ?a ?b",
     "one view of a sum instead of a sum of views; 0 + 0 = 0 keeps padding"},
    {"view-hoist-mul", "(MUL (VIEW[?v] ?a) (VIEW[?v] ?b))", "(VIEW[?v] (MUL ?a ?b))", "same_shape ?a ?b",
     "as view-hoist-add; 0 * 0 = 0"},
    {"view-hoist-lt", "(LT (VIEW[?v] ?a) (VIEW[?v] ?b))", "(VIEW[?v] (LT ?a ?b))", "same_shape ?a ?b",
     "as view-hoist-add; (0 < 0) = 0"},
    {"view-hoist-mod", "(MOD (VIEW[?v] ?a) (VIEW[?v] ?b))", "(VIEW[?v] (MOD ?a ?b))", "same_shape ?a ?b, unmasked ?v",
     "as view-hoist-add, but fmod(0, 0) is NaN: no padding"},
    {"view-sink-add", "(VIEW[?v] (ADD ?a ?b))", "(ADD (VIEW[?v] ?a) (VIEW[?v] ?b))", "", "view-hoist-add reversed"},
    {"view-sink-mul", "(VIEW[?v] (MUL ?a ?b))", "(MUL (VIEW[?v] ?a) (VIEW[?v] ?b))", "", "view-hoist-mul reversed"},
    {"contiguous-drop", "(CONTIGUOUS (VIEW[?v] ?x))", "(VIEW[?v] ?x)", "affine ?v",
     "a copy has its source's values; the cost model decides whether the copy pays. Only of a"
     " one-layer view: a copy of a reshaped reordering (a channel shuffle) stays, so its readers"
     " (a convolution's windows) index a dense buffer without div and mod; kernelize"
     " materialises it"},
    {"view-compose", "(VIEW[?a] (VIEW[?b] ?x))", "@view_compose", "", "two views are one view (layers stacked)"},

    /* ---- reductions ---- */
    {"sum-const-factor", "(SUM[?k] (MUL ?x ?c))", "@sum_const_factor", "const ?c",
     "sum(x * c) = c * sum(x): one multiply per result instead of per element"},
    {"sum-broadcast", "(SUM[?k] (VIEW[?v] ?y))", "@sum_broadcast", "broadcast ?v",
     "summing n copies of a value along an expanded axis is n times the value"},
    {"sum-swap", "(SUM[?a] (SUM[?b] ?x))", "@sum_swap", "", "reduce axes in either order (rounding only)"},
    {"max-swap", "(MAX[?a] (MAX[?b] ?x))", "@max_swap", "", "max over two axes in either order (exact)"},
    {"sum-split", "(SUM[?k] ?x)", "@sum_split", "", "a long sum is a sum of partial sums (axis n -> n/8 x 8)"},
    {"sum-size1", "(SUM[?k] ?x)", "@reduce_size1", "size1 ?x ?k", "summing one element is a reshape"},
    {"max-size1", "(MAX[?k] ?x)", "@reduce_size1", "size1 ?x ?k", "the max of one element is a reshape"},
    {"sum-add", "(SUM[?k] (ADD ?a ?b))", "(ADD (SUM[?k] ?a) (SUM[?k] ?b))", "", "a sum of sums, rounding only"},

    /* ---- recognition ---- */
    {"contract", "(SUM[?k] (MUL (VIEW[?va] ?a) (VIEW[?vb] ?b)))", "(CONTRACT[?k] (VIEW[?va] ?a) (VIEW[?vb] ?b))",
     "broadcast ?va, broadcast ?vb",
     "a sum over a product of two broadcast operands is a contraction (matmul family) by definition"},
    {"contract-comm", "(CONTRACT[?k] ?a ?b)", "(CONTRACT[?k] ?b ?a)", "", "the product inside commutes"},
    {"onehot-gather", "(SUM[?k] (MUL (VIEW[?va] (CAST[?t] (LT (ADD (LT ?i ?x) (LT ?x ?i)) ?one))) (VIEW[?vb] ?tab)))",
     "@onehot_gather", "const_eq ?one 1",
     "a one-hot product picks one table row per id; exact for finite tables only (0 * inf = NaN), "
     "ids outside [0, V) read an added zero row (see recognize.c)"},
    {"softmax-online", "(MUL ?e (VIEW[?vr] (RECIP (VIEW[?vs] (SUM[?k] ?e)))))", "@softmax_online", "",
     "kiln_softmax's chain exp2((x - max) c) / sum is SOFTMAX_ONLINE by that node's definition"},
    {"softmax-contract", "(CONTRACT[?k] (VIEW[?va] (SOFTMAX_ONLINE[?j] ?x ?c)) ?v)", "@softmax_contract", "",
     "a softmax read by a contraction along its own axis through a broadcast is the streaming "
     "SOFTMAX_CONTRACT of the broadcast operands (see recognize.c)"},
};
const uint32_t eg_default_rule_count = sizeof eg_default_rules / sizeof eg_default_rules[0];

/* ---- appliers ---------------------------------------------------------------------- */

static const eg_data *D(eg_kiln *ek, eg_id c) { return eg_data_of(ek->eg, c); }

static eg_id mk(eg_kiln *ek, int op, uint8_t dtype, int64_t arg, int nk, eg_id a, eg_id b) {
    eg_id kids[2] = {a, b};
    eg_node n = eg_mk((uint16_t)op, dtype, arg, 0, nk, kids);
    return eg_add(ek->eg, &n);
}

/* the pattern variable's class / payload by name: appliers see the rule's
 * variables in lhs order, which the table above fixes */
#define V(i) (s->cls[i])
#define P(i) (s->pv[i])

static eg_id ap_view_compose(eg_kiln *ek, const eg_subst *s) {
    const view *a = &ek->views[P(0).arg], *b = &ek->views[P(1).arg];
    if (a->nlayers + b->nlayers > VIEW_MAX_LAYERS) return EG_NONE;
    view v = *b;
    for (int l = 0; l < a->nlayers; l++) v.layer[v.nlayers++] = a->layer[l];
    return ek_view(ek, V(0), &v);
}

/* (SUM[k] (MUL x c)) with c constant: vars x=0 c=1, payload k=0 */
static eg_id ap_sum_const_factor(eg_kiln *ek, const eg_subst *s) {
    /* eg_data pointers die when the e-graph grows: copy what is needed */
    double cval = D(ek, V(1))->cval;
    eg_id sum = mk(ek, OP_SUM, D(ek, V(0))->dtype, P(0).arg, 1, V(0), 0);
    const eg_data ds = *D(ek, sum);
    eg_id c = ek_full(ek, cval, (kiln_dtype)ds.dtype, ds.ndim, ds.shape);
    return mk(ek, OP_MUL, ds.dtype, 0, 2, sum, c);
}

/* (SUM[k] (VIEW[v] y)) where the view's top layer repeats along axis k */
static eg_id ap_sum_broadcast(eg_kiln *ek, const eg_subst *s) {
    int k = (int)P(0).arg;
    const view *v = &ek->views[P(1).arg];
    const view_layer *L = &v->layer[v->nlayers - 1];
    int64_t stride, n;
    if (L->masked || k >= L->ndim || !sym_is_const(ek->syms, L->stride[k], &stride) || stride != 0 ||
        !sym_is_const(ek->syms, L->shape[k], &n) || n < 1)
        return EG_NONE;
    const eg_data *dy = D(ek, V(0));
    if (dy->dtype != KILN_F32 && dy->dtype != KILN_I32) return EG_NONE;
    view w = *v;
    view_layer *W = &w.layer[w.nlayers - 1];
    for (int d = k; d + 1 < W->ndim; d++) {
        W->shape[d] = W->shape[d + 1];
        W->stride[d] = W->stride[d + 1];
        W->mask_lo[d] = W->mask_lo[d + 1];
        W->mask_hi[d] = W->mask_hi[d + 1];
    }
    W->ndim--;
    eg_id y = ek_view(ek, V(0), &w);
    const eg_data d = *D(ek, y); /* a copy: the e-graph may grow below */
    eg_id cnt = ek_full(ek, (double)n, (kiln_dtype)d.dtype, d.ndim, d.shape);
    return mk(ek, OP_MUL, d.dtype, 0, 2, y, cnt);
}

/* (R[a] (R[b] x)) -> (R[b'] (R[a'] x)): the same two axes of x, other order */
static eg_id reduce_swap(eg_kiln *ek, const eg_subst *s, int op) {
    int64_t a = P(0).arg, b = P(1).arg;
    int64_t a_in_x = a < b ? a : a + 1;       /* outer axis a, as an axis of x */
    int64_t b_after = b < a_in_x ? b : b - 1; /* inner axis b once a_in_x is gone */
    uint8_t dt = D(ek, V(0))->dtype;
    eg_id inner = mk(ek, op, dt, a_in_x, 1, V(0), 0);
    return mk(ek, op, dt, b_after, 1, inner, 0);
}
static eg_id ap_sum_swap(eg_kiln *ek, const eg_subst *s) { return reduce_swap(ek, s, OP_SUM); }
static eg_id ap_max_swap(eg_kiln *ek, const eg_subst *s) { return reduce_swap(ek, s, OP_MAX); }

static eg_id reshape_of(eg_kiln *ek, eg_id x, int ndim, const sym_id *shape) {
    const eg_data *d = D(ek, x);
    view v;
    view_identity(&v, ek->syms, d->ndim, d->shape);
    if (view_reshape(&v, &v, ek->syms, ndim, shape) != 0) return EG_NONE;
    return ek_view(ek, x, &v);
}

static eg_id ap_sum_split(eg_kiln *ek, const eg_subst *s) {
    int k = (int)P(0).arg;
    const eg_data *d = D(ek, V(0));
    int64_t n;
    if (d->ndim >= KILN_MAX_DIMS || !sym_is_const(ek->syms, d->shape[k], &n) || n < 16 || n % 8 != 0) return EG_NONE;
    sym_id shape[KILN_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < d->ndim; i++) {
        if (i == k) {
            shape[nd++] = sym_const(ek->syms, n / 8);
            shape[nd++] = sym_const(ek->syms, 8);
        } else {
            shape[nd++] = d->shape[i];
        }
    }
    uint8_t dt = d->dtype; /* d dies when the e-graph grows */
    eg_id r = reshape_of(ek, V(0), nd, shape);
    if (r == EG_NONE) return EG_NONE;
    eg_id inner = mk(ek, OP_SUM, dt, k + 1, 1, r, 0);
    return mk(ek, OP_SUM, dt, k, 1, inner, 0);
}

static eg_id ap_reduce_size1(eg_kiln *ek, const eg_subst *s) {
    int k = (int)P(0).arg;
    const eg_data *d = D(ek, V(0));
    sym_id shape[KILN_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < d->ndim; i++)
        if (i != k) shape[nd++] = d->shape[i];
    return reshape_of(ek, V(0), nd, shape);
}

static const struct { const char *name; eg_apply_fn fn; } appliers[] = {
    {"view_compose", ap_view_compose},     {"sum_const_factor", ap_sum_const_factor},
    {"sum_broadcast", ap_sum_broadcast},   {"sum_swap", ap_sum_swap},         {"max_swap", ap_max_swap},
    {"sum_split", ap_sum_split},           {"reduce_size1", ap_reduce_size1},
    {"onehot_gather", ek_recognize_onehot_gather}, {"softmax_online", ek_recognize_softmax},
    {"softmax_contract", ek_recognize_softmax_contract},
};

eg_apply_fn eg_applier_lookup(const char *name) {
    for (size_t i = 0; i < sizeof appliers / sizeof appliers[0]; i++)
        if (strcmp(appliers[i].name, name) == 0) return appliers[i].fn;
    return NULL;
}

/* ---- rule sets ------------------------------------------------------------------------ */

eg_ruleset *eg_ruleset_new(const eg_rule_def *defs, uint32_t n, char *err, size_t cap) {
    eg_ruleset *rs = kiln_xcalloc(1, sizeof *rs);
    rs->rules = kiln_xcalloc(n ? n : 1, sizeof(eg_rule));
    rs->n = n;
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(defs[i].name, defs[j].name) == 0) {
                snprintf(err, cap, "two rules are named %s", defs[i].name);
                eg_ruleset_free(rs);
                return NULL;
            }
        if (eg_rule_compile(&defs[i], &rs->rules[i], err, cap) != 0) {
            eg_ruleset_free(rs);
            return NULL;
        }
    }
    return rs;
}

eg_ruleset *eg_ruleset_default(void) {
    char err[256];
    eg_ruleset *rs = eg_ruleset_new(eg_default_rules, eg_default_rule_count, err, sizeof err);
    KILN_ASSERT(rs != NULL); /* the built-in table is tested; a failure here is a broken build */
    return rs;
}

void eg_ruleset_free(eg_ruleset *rs) {
    if (!rs) return;
    free(rs->rules);
    free(rs);
}
