/* onnx_ops_elementwise.c — ONNX's elementwise operators (unary math,
 * activations, arithmetic, comparisons, logic, Where, Cast, Clip) as kiln nn
 * functions over the primitives.
 *
 * Invariants: ONNX bools and integers are kiln i32 (0/1 for bools), so a
 * comparison's 1/0 result is cast to i32; float-only functions refuse
 * integer inputs with an error naming the operator; integer Div has no exact
 * primitive form and is refused, not approximated.
 */
#include <math.h>
#include <string.h>

#include "graph.h"
#include "nn_util.h"
#include "onnx_imp.h"

static kiln_tensor cst(imp_ctx *c, double v, kiln_tensor like) { return kiln_const(c->g, v, kiln_tensor_dtype(c->g, like)); }

static int need_float(imp_ctx *c, const ox_node *n, int i) {
    int t = imp_in_dtype(c, n, i);
    if (t == OX_FLOAT || t == OX_FLOAT16 || t == OX_BFLOAT16) return 1;
    return imp_fail(c, KILN_ERR_UNSUPPORTED, "%s on %s inputs is not supported", n->op_type, ox_dtype_name(t));
}

/* floor(x) from fmod: x - fmod(x, 1), one less where the remainder is negative */
static kiln_tensor floor_t(kiln_graph *g, kiln_tensor x) {
    kiln_tensor m = kiln_mod(g, x, nn_c(g, 1.0, x));
    kiln_tensor neg = kiln_lt(g, m, nn_c(g, 0.0, x));
    return kiln_sub(g, kiln_sub(g, x, m), neg);
}

/* erf: an odd Taylor series for |x| < 0.5, else 1 - erfc(|x|) with the
 * Chebyshev-fitted erfc (fractional error < 1.2e-7), sign restored */
static kiln_tensor erf_t(kiln_graph *g, kiln_tensor x) {
    static const double series[] = {1.0, -1.0 / 3, 1.0 / 10, -1.0 / 42, 1.0 / 216, -1.0 / 1320, 1.0 / 9360};
    kiln_tensor x2 = kiln_mul(g, x, x);
    kiln_tensor acc = nn_c(g, series[6], x);
    for (int k = 5; k >= 0; k--) acc = nn_shift(g, kiln_mul(g, acc, x2), series[k]);
    kiln_tensor small = nn_scale(g, kiln_mul(g, acc, x), 1.1283791670955126);
    static const double p[] = {-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
                               0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277};
    kiln_tensor u = kiln_abs(g, x);
    kiln_tensor t = kiln_recip(g, nn_shift(g, nn_scale(g, u, 0.5), 1.0));
    kiln_tensor poly = nn_c(g, p[9], x);
    for (int k = 8; k >= 0; k--) poly = nn_shift(g, kiln_mul(g, poly, t), p[k]);
    kiln_tensor erfc = kiln_mul(g, t, kiln_exp(g, kiln_sub(g, poly, kiln_mul(g, u, u))));
    kiln_tensor big = nn_shift(g, kiln_neg(g, erfc), 1.0);
    kiln_tensor sgn = kiln_sub(g, kiln_lt(g, nn_c(g, 0.0, x), x), kiln_lt(g, x, nn_c(g, 0.0, x)));
    big = kiln_mul(g, big, sgn);
    kiln_tensor is_small = kiln_lt(g, u, nn_c(g, 0.5, x));
    return kiln_where(g, is_small, small, big);
}

static int unary(imp_ctx *c, const ox_node *n) {
    const char *op = n->op_type;
    kiln_graph *g = c->g;
    int dt = imp_in_dtype(c, n, 0);
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    kiln_tensor y = KILN_NONE;
    if (!strcmp(op, "Identity") || !strcmp(op, "Dropout")) {
        if (!strcmp(op, "Dropout")) {
            if (imp_has(n, 2)) {
                int64_t tm = 0;
                if (imp_const_ints(c, n, 2, &tm, 1) != 1) return 0;
                if (tm) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Dropout in training mode is not supported");
            }
            if (n->n_out > 1 && n->outputs[1][0]) {
                kiln_sym dims[KILN_MAX_DIMS];
                int r = kiln_ndim(g, x);
                for (int d = 0; d < r; d++) dims[d] = kiln_dim(g, x, d);
                if (!imp_set(c, n, 1, kiln_full(g, 1.0, KILN_I32, r, dims), OX_BOOL)) return 0;
            }
        }
        return imp_set(c, n, 0, x, dt);
    }
    if (!strcmp(op, "Abs")) y = kiln_abs(g, x);
    else if (!strcmp(op, "Neg")) y = kiln_neg(g, x);
    else if (!strcmp(op, "Sign")) y = kiln_sub(g, kiln_lt(g, cst(c, 0, x), x), kiln_lt(g, x, cst(c, 0, x)));
    else if (!strcmp(op, "Not")) y = kiln_sub(g, cst(c, 1, x), x);
    else {
        if (!need_float(c, n, 0)) return 0;
        double alpha = imp_attr_f(n, "alpha", NAN);
        if (!strcmp(op, "Exp")) y = kiln_exp(g, x);
        else if (!strcmp(op, "Log")) y = kiln_log(g, x);
        else if (!strcmp(op, "Sqrt")) y = kiln_sqrt(g, x);
        else if (!strcmp(op, "Reciprocal")) y = kiln_recip(g, x);
        else if (!strcmp(op, "Relu")) y = kiln_relu(g, x);
        else if (!strcmp(op, "Sigmoid")) y = kiln_sigmoid(g, x);
        else if (!strcmp(op, "Tanh")) y = kiln_tanh(g, x);
        else if (!strcmp(op, "Sin")) y = kiln_sin(g, x);
        else if (!strcmp(op, "Cos")) y = kiln_sin(g, nn_shift(g, x, NN_PI / 2));
        else if (!strcmp(op, "Tan")) y = kiln_div(g, kiln_sin(g, x), kiln_sin(g, nn_shift(g, x, NN_PI / 2)));
        else if (!strcmp(op, "Sinh") || !strcmp(op, "Cosh")) {
            kiln_tensor e = kiln_exp(g, x), ei = kiln_exp(g, kiln_neg(g, x));
            y = nn_scale(g, !strcmp(op, "Sinh") ? kiln_sub(g, e, ei) : kiln_add(g, e, ei), 0.5);
        } else if (!strcmp(op, "Asinh"))
            y = kiln_log(g, kiln_add(g, x, kiln_sqrt(g, nn_shift(g, kiln_mul(g, x, x), 1.0))));
        else if (!strcmp(op, "Acosh"))
            y = kiln_log(g, kiln_add(g, x, kiln_sqrt(g, nn_shift(g, kiln_mul(g, x, x), -1.0))));
        else if (!strcmp(op, "Atanh"))
            y = nn_scale(g, kiln_log(g, kiln_div(g, nn_shift(g, x, 1.0), nn_shift(g, kiln_neg(g, x), 1.0))), 0.5);
        else if (!strcmp(op, "Erf")) y = erf_t(g, x);
        else if (!strcmp(op, "Floor")) y = floor_t(g, x);
        else if (!strcmp(op, "Ceil")) y = kiln_neg(g, floor_t(g, kiln_neg(g, x)));
        else if (!strcmp(op, "Round")) { /* half to even */
            kiln_tensor f = floor_t(g, x), d = kiln_sub(g, x, f);
            kiln_tensor up = kiln_lt(g, nn_c(g, 0.5, x), d);
            kiln_tensor tie = kiln_eq(g, d, nn_c(g, 0.5, x));
            kiln_tensor odd = kiln_abs(g, kiln_mod(g, f, nn_c(g, 2.0, x)));
            y = kiln_add(g, f, kiln_add(g, up, kiln_mul(g, tie, odd)));
        } else if (!strcmp(op, "Softplus")) y = kiln_softplus(g, x);
        else if (!strcmp(op, "Softsign")) y = kiln_div(g, x, nn_shift(g, kiln_abs(g, x), 1.0));
        else if (!strcmp(op, "Elu") || !strcmp(op, "Celu")) {
            double a = isnan(alpha) ? 1.0 : alpha;
            kiln_tensor neg = kiln_minimum(g, x, nn_c(g, 0.0, x));
            double k = !strcmp(op, "Celu") ? 1.0 / a : 1.0;
            kiln_tensor em = nn_shift(g, kiln_exp(g, nn_scale(g, neg, k)), -1.0);
            y = kiln_add(g, kiln_relu(g, x), nn_scale(g, em, a));
        } else if (!strcmp(op, "Selu")) {
            double a = isnan(alpha) ? 1.67326319217681884765625 : alpha;
            double gm = imp_attr_f(n, "gamma", 1.05070102214813232421875);
            kiln_tensor neg = kiln_minimum(g, x, nn_c(g, 0.0, x));
            kiln_tensor em = nn_scale(g, nn_shift(g, kiln_exp(g, neg), -1.0), a);
            y = nn_scale(g, kiln_add(g, kiln_relu(g, x), em), gm);
        } else if (!strcmp(op, "LeakyRelu")) {
            double a = isnan(alpha) ? 0.01 : alpha;
            y = kiln_add(g, kiln_relu(g, x), nn_scale(g, kiln_minimum(g, x, nn_c(g, 0.0, x)), a));
        } else if (!strcmp(op, "ThresholdedRelu")) {
            double a = isnan(alpha) ? 1.0 : alpha;
            y = kiln_mul(g, x, kiln_lt(g, nn_c(g, a, x), x));
        } else if (!strcmp(op, "HardSigmoid")) {
            double a = isnan(alpha) ? 0.2 : alpha, b = imp_attr_f(n, "beta", 0.5);
            y = kiln_clamp(g, nn_shift(g, nn_scale(g, x, a), b), 0.0, 1.0);
        } else if (!strcmp(op, "HardSwish"))
            y = kiln_mul(g, x, kiln_clamp(g, nn_shift(g, nn_scale(g, x, 1.0 / 6), 0.5), 0.0, 1.0));
        else if (!strcmp(op, "Mish")) y = kiln_mul(g, x, kiln_tanh(g, kiln_softplus(g, x)));
        else if (!strcmp(op, "Gelu")) {
            const char *ap = imp_attr_s(n, "approximate", "none");
            if (!strcmp(ap, "tanh")) y = kiln_gelu_tanh(g, x);
            else if (!strcmp(ap, "none")) y = kiln_mul(g, x, nn_scale(g, nn_shift(g, erf_t(g, nn_scale(g, x, 1 / sqrt(2.0))), 1.0), 0.5));
            else return imp_fail(c, KILN_ERR_UNSUPPORTED, "Gelu: approximate='%s'", ap);
        } else return imp_fail(c, KILN_ERR_UNSUPPORTED, "operator %s", op);
    }
    return imp_set(c, n, 0, y, dt);
}

/* a / b on integers, truncated toward zero (what ONNX's Div gives): r = a % b
 * is exact (C semantics), a - r is an exact multiple of b, and its quotient
 * is found in f32 and refined twice with exact i32 residuals, which makes it
 * exact over the whole i32 range. Division by zero is undefined, as in ONNX. */
static kiln_tensor int_div(kiln_graph *g, kiln_tensor a, kiln_tensor b) {
    kiln_tensor m = kiln_sub(g, a, kiln_mod(g, a, b));
    kiln_tensor fb = kiln_cast(g, b, KILN_F32);
    kiln_tensor q = KILN_NONE, e = m;
    for (int it = 0; it < 3; it++) {
        kiln_tensor fq = kiln_div(g, kiln_cast(g, e, KILN_F32), fb);
        /* round to nearest: floor(x + 0.5) */
        kiln_tensor dq = kiln_cast(g, floor_t(g, nn_shift(g, fq, 0.5)), KILN_I32);
        q = q == KILN_NONE ? dq : kiln_add(g, q, dq);
        e = kiln_sub(g, m, kiln_mul(g, q, b));
    }
    return q;
}

/* the integer kinds ONNX calls bool */
static int as_bool(imp_ctx *c, kiln_tensor x, kiln_tensor *out) {
    *out = kiln_tensor_dtype(c->g, x) == KILN_I32 ? x : kiln_cast(c->g, x, KILN_I32);
    return imp_check(c, *out);
}

static int binary(imp_ctx *c, const ox_node *n) {
    const char *op = n->op_type;
    kiln_graph *g = c->g;
    int dt = imp_in_dtype(c, n, 0);
    kiln_tensor a = imp_in(c, n, 0), b = imp_in(c, n, 1);
    if (!imp_check(c, a) || !imp_check(c, b)) return 0;
    int fl = imp_is_float_onnx(dt);
    kiln_tensor y = KILN_NONE;
    int odt = dt;
    if (!strcmp(op, "Add")) y = kiln_add(g, a, b);
    else if (!strcmp(op, "Sub")) y = kiln_sub(g, a, b);
    else if (!strcmp(op, "Mul")) y = kiln_mul(g, a, b);
    else if (!strcmp(op, "Div")) {
        y = fl ? kiln_div(g, a, b) : int_div(g, a, b);
    } else if (!strcmp(op, "Pow")) {
        if (!fl) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Pow on %s is not supported", ox_dtype_name(dt));
        if (imp_in_dtype(c, n, 1) != dt) {
            if (!imp_is_float_onnx(imp_in_dtype(c, n, 1)) && imp_in_dtype(c, n, 1) != OX_INT32 && imp_in_dtype(c, n, 1) != OX_INT64)
                return imp_fail(c, KILN_ERR_UNSUPPORTED, "Pow with exponent of type %s", ox_dtype_name(imp_in_dtype(c, n, 1)));
            b = kiln_cast(g, b, kiln_tensor_dtype(g, a));
        }
        y = kiln_pow(g, a, b);
    } else if (!strcmp(op, "Mod")) {
        int64_t fm = imp_attr_i(n, "fmod", 0);
        kiln_tensor r = kiln_mod(g, a, b);
        if (fm) y = r;
        else if (fl) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Mod with fmod=0 on floats is not valid ONNX");
        else { /* the sign of the divisor: add b where r and b differ in sign */
            kiln_tensor rb = kiln_mul(g, r, b);
            y = kiln_add(g, r, kiln_mul(g, kiln_lt(g, rb, cst(c, 0, rb)), b));
        }
    } else if (!strcmp(op, "PRelu")) {
        y = kiln_add(g, kiln_relu(g, a), kiln_mul(g, kiln_minimum(g, a, cst(c, 0, a)), b));
    } else {
        odt = OX_BOOL;
        if (!strcmp(op, "Equal")) y = kiln_eq(g, a, b);
        else if (!strcmp(op, "Less")) y = kiln_lt(g, a, b);
        else if (!strcmp(op, "Greater")) y = kiln_lt(g, b, a);
        else if (!strcmp(op, "LessOrEqual")) y = kiln_sub(g, cst(c, 1, a), kiln_lt(g, b, a));
        else if (!strcmp(op, "GreaterOrEqual")) y = kiln_sub(g, cst(c, 1, a), kiln_lt(g, a, b));
        else if (!strcmp(op, "And")) y = kiln_mul(g, a, b);
        else if (!strcmp(op, "Or")) y = kiln_sub(g, kiln_add(g, a, b), kiln_mul(g, a, b));
        else if (!strcmp(op, "Xor")) y = kiln_sub(g, kiln_add(g, a, b), nn_scale(g, kiln_mul(g, a, b), 2.0));
        else return imp_fail(c, KILN_ERR_UNSUPPORTED, "operator %s", op);
        if (fl && (!strcmp(op, "LessOrEqual") || !strcmp(op, "GreaterOrEqual")))
            y = kiln_mul(g, y, kiln_mul(g, kiln_eq(g, a, a), kiln_eq(g, b, b))); /* NaN compares false */
        if (!as_bool(c, y, &y)) return 0;
    }
    return imp_set(c, n, 0, y, odt);
}

/* Sum, Mean, Max, Min over any number of broadcasting inputs */
static int variadic(imp_ctx *c, const ox_node *n) {
    const char *op = n->op_type;
    if (n->n_in < 1) return imp_fail(c, KILN_ERR_FORMAT, "%s needs an input", op);
    int dt = imp_in_dtype(c, n, 0);
    kiln_tensor y = imp_in(c, n, 0);
    for (int i = 1; i < n->n_in && imp_check(c, y); i++) {
        kiln_tensor x = imp_in(c, n, i);
        if (!strcmp(op, "Sum") || !strcmp(op, "Mean")) y = kiln_add(c->g, y, x);
        else if (!strcmp(op, "Max")) y = kiln_maximum(c->g, y, x);
        else y = kiln_minimum(c->g, y, x);
    }
    if (!strcmp(op, "Mean")) {
        if (!imp_is_float_onnx(dt)) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Mean on %s", ox_dtype_name(dt));
        y = nn_scale(c->g, y, 1.0 / n->n_in);
    }
    return imp_set(c, n, 0, y, dt);
}

/* ONNX's Where picks exactly, so a NaN in the branch not taken must not
 * show (kiln_where's min/max form lets it through): [a, b] are stacked on a
 * new last axis and each element gathers its slot, 2*i + (cond == 0) */
kiln_tensor imp_where_exact(imp_ctx *c, kiln_tensor cond, kiln_tensor a, kiln_tensor b) {
    kiln_graph *g = c->g;
    if (!kiln_dtype_is_float(kiln_tensor_dtype(g, a))) return kiln_where(g, cond, a, b);
    if (!nn_broadcast(g, "Where", &a, &b) || !nn_broadcast(g, "Where", &cond, &a) || !nn_broadcast(g, "Where", &a, &b))
        return KILN_NONE;
    int r = kiln_ndim(g, a);
    if (r + 1 > KILN_MAX_DIMS) {
        imp_fail(c, KILN_ERR_UNSUPPORTED, "Where of rank %d", r);
        return KILN_NONE;
    }
    kiln_sym dims[KILN_MAX_DIMS], total = kiln_sym_int(g, 1), one = kiln_sym_int(g, 1);
    for (int d = 0; d < r; d++) {
        dims[d] = kiln_dim(g, a, d);
        total = kiln_sym_mul(g, total, dims[d]);
    }
    kiln_tensor st = nn_stack_last(g, "Where", a, b); /* (..., 2): a, b */
    kiln_sym flat2[2] = {kiln_sym_mul(g, total, kiln_sym_int(g, 2)), one};
    kiln_tensor table = kiln_reshape(g, kiln_contiguous(g, st), 2, flat2);
    kiln_tensor not_c = kiln_cast(g, kiln_eq(g, cond, kiln_const(g, 0, kiln_tensor_dtype(g, cond))), KILN_I32);
    kiln_tensor sel = kiln_reshape(g, not_c, 1, &total);
    kiln_tensor idx = kiln_add(g, kiln_mul(g, kiln_iota(g, KILN_I32, 1, &total, 0), kiln_const(g, 2, KILN_I32)), sel);
    return kiln_reshape(g, kiln_gather(g, table, idx), r, dims);
}

static int where(imp_ctx *c, const ox_node *n) {
    kiln_tensor cond = imp_in(c, n, 0), a = imp_in(c, n, 1), b = imp_in(c, n, 2);
    if (!imp_check(c, cond) || !imp_check(c, a) || !imp_check(c, b)) return 0;
    return imp_set(c, n, 0, imp_where_exact(c, cond, a, b), imp_in_dtype(c, n, 1));
}

static int cast(imp_ctx *c, const ox_node *n) {
    int to = (int)imp_attr_i(n, "to", 0);
    if (imp_attr_i(n, "saturate", 1) != 1) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Cast: saturate=0");
    int kt = imp_kiln_dtype(to);
    if (kt < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Cast to %s", ox_dtype_name(to));
    int from = imp_in_dtype(c, n, 0);
    if (imp_kiln_dtype(from) < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Cast from %s", ox_dtype_name(from));
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    kiln_graph *g = c->g;
    if (to == OX_BOOL) {
        kiln_tensor nz = kiln_sub(g, cst(c, 1, x), kiln_eq(g, x, cst(c, 0, x)));
        return imp_set(c, n, 0, kiln_cast(g, nz, KILN_I32), to);
    }
    if (kt == KILN_I32 && imp_is_float_onnx(from)) {
        /* ONNX truncates toward zero; values must fit the target type */
        if (to != OX_INT32 && to != OX_INT64 && to != OX_INT16 && to != OX_INT8)
            return imp_fail(c, KILN_ERR_UNSUPPORTED, "Cast from %s to %s", ox_dtype_name(from), ox_dtype_name(to));
    }
    if (kt == KILN_I32 && !imp_is_float_onnx(from) && from != to) {
        /* narrowing between integer types wraps in ONNX; kiln's i32 keeps the value */
        size_t fs = ox_dtype_size(from), ts = ox_dtype_size(to);
        int widen = ts > fs || (ts == fs && (from == OX_BOOL)) || to == OX_INT64 || to == OX_INT32;
        int from_unsigned = from == OX_UINT8 || from == OX_UINT16 || from == OX_UINT32 || from == OX_BOOL;
        int to_unsigned = to == OX_UINT8 || to == OX_UINT16 || to == OX_UINT32 || to == OX_UINT64;
        if (!widen || (to_unsigned && !from_unsigned))
            return imp_fail(c, KILN_ERR_UNSUPPORTED, "Cast from %s to %s (wrapping)", ox_dtype_name(from), ox_dtype_name(to));
    }
    return imp_set(c, n, 0, kiln_cast(g, x, (kiln_dtype)kt), to);
}

static int cast_like(imp_ctx *c, const ox_node *n) {
    int to = imp_in_dtype(c, n, 1);
    int kt = imp_kiln_dtype(to), from = imp_in_dtype(c, n, 0);
    if (kt < 0 || imp_kiln_dtype(from) < 0)
        return imp_fail(c, KILN_ERR_UNSUPPORTED, "CastLike from %s to %s", ox_dtype_name(from), ox_dtype_name(to));
    if (imp_attr_i(n, "saturate", 1) != 1) return imp_fail(c, KILN_ERR_UNSUPPORTED, "CastLike: saturate=0");
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    if (to == OX_BOOL) {
        kiln_tensor nz = kiln_sub(c->g, cst(c, 1, x), kiln_eq(c->g, x, cst(c, 0, x)));
        return imp_set(c, n, 0, kiln_cast(c->g, nz, KILN_I32), to);
    }
    if (kt == KILN_I32 && imp_is_float_onnx(from) && to != OX_INT32 && to != OX_INT64)
        return imp_fail(c, KILN_ERR_UNSUPPORTED, "CastLike from %s to %s", ox_dtype_name(from), ox_dtype_name(to));
    return imp_set(c, n, 0, kiln_cast(c->g, x, (kiln_dtype)kt), to);
}

static int clip(imp_ctx *c, const ox_node *n) {
    int dt = imp_in_dtype(c, n, 0);
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    if (c->opset < 11) {
        x = kiln_clamp(c->g, x, imp_attr_f(n, "min", -INFINITY), imp_attr_f(n, "max", INFINITY));
        return imp_set(c, n, 0, x, dt);
    }
    if (imp_has(n, 1)) x = kiln_maximum(c->g, x, imp_in(c, n, 1));
    if (imp_has(n, 2)) x = kiln_minimum(c->g, x, imp_in(c, n, 2));
    return imp_set(c, n, 0, x, dt);
}

const imp_op imp_ops_elementwise[] = {
    {"Identity", unary, ""}, {"Dropout", unary, "seed ratio"},
    {"Abs", unary, ""}, {"Neg", unary, ""}, {"Sign", unary, ""}, {"Not", unary, ""},
    {"Exp", unary, ""}, {"Log", unary, ""}, {"Sqrt", unary, ""}, {"Reciprocal", unary, ""},
    {"Relu", unary, ""}, {"Sigmoid", unary, ""}, {"Tanh", unary, ""}, {"Sin", unary, ""},
    {"Cos", unary, ""}, {"Tan", unary, ""}, {"Sinh", unary, ""}, {"Cosh", unary, ""},
    {"Asinh", unary, ""}, {"Acosh", unary, ""}, {"Atanh", unary, ""}, {"Erf", unary, ""},
    {"Floor", unary, ""}, {"Ceil", unary, ""}, {"Round", unary, ""}, {"Softplus", unary, ""},
    {"Softsign", unary, ""}, {"Elu", unary, "alpha"}, {"Celu", unary, "alpha"},
    {"Selu", unary, "alpha gamma"}, {"LeakyRelu", unary, "alpha"}, {"ThresholdedRelu", unary, "alpha"},
    {"HardSigmoid", unary, "alpha beta"}, {"HardSwish", unary, ""}, {"Mish", unary, ""},
    {"Gelu", unary, "approximate"},
    {"Add", binary, ""}, {"Sub", binary, ""}, {"Mul", binary, ""}, {"Div", binary, ""},
    {"Pow", binary, ""}, {"Mod", binary, "fmod"}, {"PRelu", binary, ""},
    {"Equal", binary, ""}, {"Less", binary, ""}, {"Greater", binary, ""},
    {"LessOrEqual", binary, ""}, {"GreaterOrEqual", binary, ""},
    {"And", binary, ""}, {"Or", binary, ""}, {"Xor", binary, ""},
    {"Sum", variadic, ""}, {"Mean", variadic, ""}, {"Max", variadic, ""}, {"Min", variadic, ""},
    {"Where", where, ""}, {"Cast", cast, "to saturate"}, {"CastLike", cast_like, "saturate"}, {"Clip", clip, "min max"},
    {NULL, NULL, NULL},
};
