/* elementwise.c — elementwise nn functions built from kiln's primitive ops.
 *
 * Each function computes in its input's dtype and broadcasts like the binary
 * primitives. The formulations are chosen for numerical behaviour, not for
 * brevity:
 *  - exp/log go through exp2/log2 with the log2(e) / ln 2 scalings.
 *  - tanh, sigmoid, gelu and softplus use forms that stay finite and
 *    saturate correctly for large |x| (never inf/inf or inf - inf).
 *  - maximum/minimum stack the operands on a new axis (pad + pad + add, which
 *    is exact for every value) and reduce it with MAX, so infinities survive;
 *    where() is built on them for the same reason (c*a + (1-c)*b would turn an
 *    unused infinite branch into NaN). Arithmetic selection (nn_select01) is
 *    used only where both branches are known to be finite.
 *  - eq is built from LT only (no subtraction), so it also works for u8.
 */
#include "nn_util.h"

kiln_tensor kiln_neg(kiln_graph *g, kiln_tensor x) {
    if (!nn_ok(g, "kiln_neg", x)) return KILN_NONE;
    return nn_scale(g, x, -1.0);
}

kiln_tensor kiln_sub(kiln_graph *g, kiln_tensor a, kiln_tensor b) {
    if (!nn_ok(g, "kiln_sub", a) || !nn_ok(g, "kiln_sub", b)) return KILN_NONE;
    return kiln_add(g, a, kiln_neg(g, b));
}

kiln_tensor kiln_div(kiln_graph *g, kiln_tensor a, kiln_tensor b) {
    if (!nn_float(g, "kiln_div", a) || !nn_float(g, "kiln_div", b)) return KILN_NONE;
    return kiln_mul(g, a, kiln_recip(g, b));
}

kiln_tensor kiln_exp(kiln_graph *g, kiln_tensor x) {
    if (!nn_float(g, "kiln_exp", x)) return KILN_NONE;
    return kiln_exp2(g, nn_scale(g, x, NN_LOG2E));
}

kiln_tensor kiln_log(kiln_graph *g, kiln_tensor x) {
    if (!nn_float(g, "kiln_log", x)) return KILN_NONE;
    return nn_scale(g, kiln_log2(g, x), NN_LN2);
}

/* The maximum of a and b: MAX over the stacked pair. */
kiln_tensor kiln_maximum(kiln_graph *g, kiln_tensor a, kiln_tensor b) {
    kiln_tensor s = nn_stack_last(g, "kiln_maximum", a, b);
    if (s == KILN_NONE) return KILN_NONE;
    return kiln_max(g, s, -1);
}

/* min(a, b) = -max(-a, -b); negation is exact. Unsigned u8 has no negation,
 * so it takes the (exact for integers) comparison form instead. */
kiln_tensor kiln_minimum(kiln_graph *g, kiln_tensor a, kiln_tensor b) {
    if (!nn_broadcast(g, "kiln_minimum", &a, &b)) return KILN_NONE;
    if (nn_dtype(g, a) == KILN_U8) return nn_select01(g, kiln_lt(g, a, b), a, b);
    return kiln_neg(g, kiln_maximum(g, kiln_neg(g, a), kiln_neg(g, b)));
}

kiln_tensor kiln_clamp(kiln_graph *g, kiln_tensor x, double lo, double hi) {
    if (!nn_ok(g, "kiln_clamp", x)) return KILN_NONE;
    if (!(lo <= hi)) {
        graph_error(g, KILN_ERR_INVALID, "kiln_clamp: lo %g > hi %g", lo, hi);
        return KILN_NONE;
    }
    return kiln_minimum(g, kiln_maximum(g, x, nn_c(g, lo, x)), nn_c(g, hi, x));
}

kiln_tensor kiln_relu(kiln_graph *g, kiln_tensor x) {
    if (!nn_ok(g, "kiln_relu", x)) return KILN_NONE;
    return kiln_maximum(g, x, nn_c(g, 0.0, x));
}

kiln_tensor kiln_abs(kiln_graph *g, kiln_tensor x) {
    if (!nn_ok(g, "kiln_abs", x)) return KILN_NONE;
    if (nn_dtype(g, x) == KILN_U8) return x;
    return kiln_maximum(g, x, kiln_neg(g, x));
}

/* 1 where x is not NaN, else 0 (x < inf, or x == +inf which is max < x) */
static kiln_tensor not_nan(kiln_graph *g, kiln_tensor x) {
    kiln_tensor below_inf = kiln_lt(g, x, nn_c(g, INFINITY, x));
    kiln_tensor is_pinf = kiln_lt(g, nn_c(g, nn_max_finite(nn_dtype(g, x)), x), x);
    return kiln_add(g, below_inf, is_pinf);
}

/* a == b  <=>  neither a < b nor b < a (and, for floats, neither is NaN) */
kiln_tensor kiln_eq(kiln_graph *g, kiln_tensor a, kiln_tensor b) {
    if (!nn_ok(g, "kiln_eq", a) || !nn_ok(g, "kiln_eq", b)) return KILN_NONE;
    kiln_tensor either = kiln_add(g, kiln_lt(g, a, b), kiln_lt(g, b, a));
    kiln_tensor e = kiln_lt(g, either, nn_c(g, 1.0, either));
    if (kiln_dtype_is_float(nn_dtype(g, a))) e = kiln_mul(g, e, kiln_mul(g, not_nan(g, a), not_nan(g, b)));
    return e;
}

/* cond != 0 ? a : b. Floats: with K = +inf where cond holds and -inf where
 * not, max(min(a, K), min(b, -K)) picks a or b exactly, infinities included.
 * Integers have no infinities, and arithmetic selection is exact for them.
 * A NaN in either branch gives NaN (MAX propagates NaN); no formulation from
 * these primitives short of a GATHER avoids that, and none is worth its cost. */
kiln_tensor kiln_where(kiln_graph *g, kiln_tensor cond, kiln_tensor a, kiln_tensor b) {
    if (!nn_ok(g, "kiln_where", cond) || !nn_ok(g, "kiln_where", a) || !nn_ok(g, "kiln_where", b)) return KILN_NONE;
    kiln_dtype t = nn_dtype(g, a);
    if (nn_dtype(g, b) != t) {
        graph_error(g, KILN_ERR_DTYPE, "kiln_where: branches %s and %s need one dtype", kiln_dtype_name(t),
                    kiln_dtype_name(nn_dtype(g, b)));
        return KILN_NONE;
    }
    kiln_tensor is_zero = kiln_eq(g, cond, nn_c(g, 0.0, cond));
    kiln_tensor c = kiln_cast(g, nn_not01(g, kiln_cast(g, is_zero, KILN_I32)), t);
    if (!kiln_dtype_is_float(t)) return nn_select01(g, c, a, b);
    kiln_tensor k = nn_scale(g, nn_shift(g, nn_scale(g, c, 2.0), -1.0), INFINITY); /* +-inf */
    return kiln_maximum(g, kiln_minimum(g, a, k), kiln_minimum(g, b, kiln_neg(g, k)));
}

/* x^y = exp2(y * log2|x|), with the sign of x restored for odd integer y.
 * log2|x| is clamped to finite values so that y = 0 gives 1 even at x = 0 or
 * |x| = inf (0 * inf would be NaN); the clamp bound is far beyond where exp2
 * saturates, so nothing else changes. */
kiln_tensor kiln_pow(kiln_graph *g, kiln_tensor x, kiln_tensor y) {
    if (!nn_float(g, "kiln_pow", x) || !nn_float(g, "kiln_pow", y)) return KILN_NONE;
    double big = nn_max_finite(nn_dtype(g, x));
    kiln_tensor lx = kiln_clamp(g, kiln_log2(g, kiln_abs(g, x)), -big, big);
    kiln_tensor mag = kiln_exp2(g, kiln_mul(g, y, lx));
    /* odd integer y: mod(y, 2) is +-1, so its square is 1; even: 0 */
    kiln_tensor m = kiln_mod(g, y, nn_c(g, 2.0, y));
    kiln_tensor odd = kiln_mul(g, m, m);
    kiln_tensor negx = kiln_lt(g, x, nn_c(g, 0.0, x));
    kiln_tensor sign = nn_shift(g, nn_scale(g, kiln_mul(g, negx, odd), -2.0), 1.0);
    return kiln_mul(g, mag, sign);
}

kiln_tensor kiln_sigmoid(kiln_graph *g, kiln_tensor x) {
    if (!nn_float(g, "kiln_sigmoid", x)) return KILN_NONE;
    /* exp(-x) -> inf for very negative x gives 1/inf = 0: finite everywhere */
    return kiln_recip(g, nn_shift(g, kiln_exp(g, kiln_neg(g, x)), 1.0));
}

/* tanh x = 1 - 2/(exp(2x) + 1), which saturates to +-1 for large |x|; near 0
 * that form loses relative accuracy (1 - (1 - x)), so |x| < 1/8 uses the odd
 * Taylor series up to x^9 (truncation < 1e-11 relative there). The series is
 * evaluated on x clamped to [-1/8, 1/8] so both branches stay finite. */
kiln_tensor kiln_tanh(kiln_graph *g, kiln_tensor x) {
    if (!nn_float(g, "kiln_tanh", x)) return KILN_NONE;
    const double lim = 0.125;
    kiln_tensor e = kiln_exp(g, nn_scale(g, x, 2.0));
    kiln_tensor far = nn_shift(g, nn_scale(g, kiln_recip(g, nn_shift(g, e, 1.0)), -2.0), 1.0);
    kiln_tensor xs = kiln_clamp(g, x, -lim, lim);
    kiln_tensor x2 = kiln_mul(g, xs, xs);
    /* tanh x = x (1 - x^2/3 + 2x^4/15 - 17x^6/315 + 62x^8/2835 - ...) */
    static const double coef[] = {62.0 / 2835.0, -17.0 / 315.0, 2.0 / 15.0, -1.0 / 3.0, 1.0};
    kiln_tensor p = nn_c(g, coef[0], x);
    for (int i = 1; i < 5; i++) p = nn_shift(g, kiln_mul(g, p, x2), coef[i]);
    kiln_tensor near = kiln_mul(g, p, xs);
    /* decided on the unclamped x: -lim < x < lim (NaN takes the far branch) */
    kiln_tensor small = kiln_mul(g, kiln_lt(g, x, nn_c(g, lim, x)), kiln_lt(g, nn_c(g, -lim, x), x));
    return nn_select01(g, small, near, far);
}

/* 0.5 x (1 + tanh(z)) = x * sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3):
 * no cancellation for negative x */
kiln_tensor kiln_gelu_tanh(kiln_graph *g, kiln_tensor x) {
    if (!nn_float(g, "kiln_gelu_tanh", x)) return KILN_NONE;
    const double k = 2.0 * 0.79788456080286535588; /* 2 sqrt(2/pi) */
    kiln_tensor x3 = kiln_mul(g, kiln_mul(g, x, x), x);
    kiln_tensor z = nn_scale(g, kiln_add(g, x, nn_scale(g, x3, 0.044715)), k);
    return kiln_mul(g, x, kiln_sigmoid(g, z));
}

/* x * Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2, using the Chebyshev-fitted
 * erfc of Press et al. (fractional error < 1.2e-7 for all arguments), which
 * keeps the negative tail accurate in relative terms:
 *   erfc(u) = t exp(-u^2 + P(t)), t = 1 / (1 + u/2), u >= 0.
 * For x >= 0, Phi = 1 - erfc(u)/2; for x < 0, Phi = erfc(u)/2, u = |x|/sqrt 2. */
kiln_tensor kiln_gelu_erf(kiln_graph *g, kiln_tensor x) {
    if (!nn_float(g, "kiln_gelu_erf", x)) return KILN_NONE;
    static const double c[] = {0.17087277,  -0.82215223, 1.48851587, -1.13520398, 0.27886807,
                               -0.18628806, 0.09678418,  0.37409196, 1.00002368,  -1.26551223};
    kiln_tensor u = nn_scale(g, kiln_abs(g, x), 0.70710678118654752440);
    kiln_tensor t = kiln_recip(g, nn_shift(g, nn_scale(g, u, 0.5), 1.0));
    kiln_tensor p = nn_c(g, c[0], x);
    for (int i = 1; i < 10; i++) p = nn_shift(g, kiln_mul(g, p, t), c[i]);
    kiln_tensor expo = kiln_add(g, p, kiln_neg(g, kiln_mul(g, u, u)));
    kiln_tensor half_erfc = nn_scale(g, kiln_mul(g, t, kiln_exp(g, expo)), 0.5);
    kiln_tensor neg = kiln_lt(g, x, nn_c(g, 0.0, x));
    kiln_tensor phi = nn_select01(g, neg, half_erfc, nn_shift(g, kiln_neg(g, half_erfc), 1.0));
    return kiln_mul(g, x, phi);
}

kiln_tensor kiln_silu(kiln_graph *g, kiln_tensor x) {
    if (!nn_float(g, "kiln_silu", x)) return KILN_NONE;
    return kiln_mul(g, x, kiln_sigmoid(g, x));
}

/* log(1 + e^x) = max(x, 0) + log1p(e^-|x|). log1p(e) is computed as
 * e * log(u) / (u - 1) with u = 1 + e (exact up to rounding even when e is
 * tiny, since u - 1 is the e that u really holds), and as e itself when u
 * rounds to 1. */
kiln_tensor kiln_softplus(kiln_graph *g, kiln_tensor x) {
    if (!nn_float(g, "kiln_softplus", x)) return KILN_NONE;
    kiln_tensor e = kiln_exp(g, kiln_neg(g, kiln_abs(g, x)));
    kiln_tensor u = nn_shift(g, e, 1.0);
    kiln_tensor is1 = kiln_eq(g, u, nn_c(g, 1.0, u));
    kiln_tensor num = kiln_add(g, kiln_log(g, u), is1);
    kiln_tensor den = kiln_add(g, nn_shift(g, u, -1.0), is1);
    kiln_tensor l1p = kiln_mul(g, e, kiln_mul(g, num, kiln_recip(g, den)));
    return kiln_add(g, kiln_relu(g, x), l1p);
}
