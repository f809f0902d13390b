/* reduce.c — reductions along one axis built from SUM and MAX: mean, var,
 * softmax, log_softmax, argmax, cumsum.
 *
 * Invariants:
 *  - Axes may be negative (-1 = last); results drop the axis except for
 *    softmax/log_softmax/cumsum, which keep x's shape.
 *  - Sizes may be symbolic: a size that is not a constant becomes a tensor
 *    through nn_sym_value (an iota element), never a baked-in number.
 *  - softmax subtracts the row maximum and uses exp2 with the log2(e) factor
 *    folded into the argument: exp2((x - max) * log2 e). This is the chain the
 *    streaming-softmax rewrite looks for; keep the form when editing.
 */
#include "nn_util.h"

/* 1/n as a 0-d tensor of dtype t (n = size of an axis, maybe symbolic) */
static kiln_tensor inv_count(kiln_graph *g, kiln_sym n, kiln_dtype t) {
    int64_t v;
    if (nn_const_dim(g, n, &v)) return kiln_const(g, v > 0 ? 1.0 / (double)v : NAN, t);
    /* 1/n in f32 first: an f16 n would round before the reciprocal does */
    return kiln_cast(g, kiln_recip(g, nn_sym_value(g, n, KILN_F32)), t);
}

kiln_tensor kiln_mean(kiln_graph *g, kiln_tensor x, int axis) {
    if (!nn_float(g, "kiln_mean", x)) return KILN_NONE;
    int a = nn_axis(g, "kiln_mean", x, axis);
    if (a < 0) return KILN_NONE;
    kiln_tensor s = kiln_sum(g, x, a);
    return kiln_mul(g, s, inv_count(g, kiln_dim(g, x, a), nn_dtype(g, x)));
}

/* population variance: mean of squared deviations from the mean (two passes,
 * which avoids the cancellation of E[x^2] - E[x]^2) */
kiln_tensor kiln_var(kiln_graph *g, kiln_tensor x, int axis) {
    if (!nn_float(g, "kiln_var", x)) return KILN_NONE;
    int a = nn_axis(g, "kiln_var", x, axis);
    if (a < 0) return KILN_NONE;
    kiln_tensor d = kiln_sub(g, x, nn_keep(g, kiln_mean(g, x, a), a));
    return kiln_mean(g, kiln_mul(g, d, d), a);
}

/* (x - max) * log2 e, the shared start of softmax and log_softmax */
static kiln_tensor shifted_log2(kiln_graph *g, kiln_tensor x, int a) {
    kiln_tensor m = nn_keep(g, kiln_max(g, x, a), a);
    return nn_scale(g, kiln_sub(g, x, m), NN_LOG2E);
}

kiln_tensor kiln_softmax(kiln_graph *g, kiln_tensor x, int axis) {
    if (!nn_float(g, "kiln_softmax", x)) return KILN_NONE;
    int a = nn_axis(g, "kiln_softmax", x, axis);
    if (a < 0) return KILN_NONE;
    kiln_tensor e = kiln_exp2(g, shifted_log2(g, x, a));
    kiln_tensor s = nn_keep(g, kiln_sum(g, e, a), a);
    return kiln_mul(g, e, kiln_recip(g, s));
}

/* log_softmax = (x - max) - ln(sum exp(x - max)), kept in log2 units until
 * the end: ((x - max) log2 e - log2 sum exp2(...)) * ln 2 */
kiln_tensor kiln_log_softmax(kiln_graph *g, kiln_tensor x, int axis) {
    if (!nn_float(g, "kiln_log_softmax", x)) return KILN_NONE;
    int a = nn_axis(g, "kiln_log_softmax", x, axis);
    if (a < 0) return KILN_NONE;
    kiln_tensor m = nn_keep(g, kiln_max(g, x, a), a);
    kiln_tensor d = kiln_sub(g, x, m);
    kiln_tensor s = kiln_sum(g, kiln_exp2(g, nn_scale(g, d, NN_LOG2E)), a);
    kiln_tensor lse = nn_scale(g, kiln_log2(g, s), NN_LN2);
    return kiln_sub(g, d, nn_keep(g, lse, a));
}

/* first index of the maximum, as i32. With r = (n-1) - index (a flipped
 * iota), the first maximum has the largest r among the maxima, and every
 * other position contributes 0 <= that r; so index = (n-1) - max(r * is_max).
 * All index arithmetic is in i32, exact for any size. */
kiln_tensor kiln_argmax(kiln_graph *g, kiln_tensor x, int axis) {
    if (!nn_ok(g, "kiln_argmax", x)) return KILN_NONE;
    int a = nn_axis(g, "kiln_argmax", x, axis);
    if (a < 0) return KILN_NONE;
    int nd = kiln_ndim(g, x);
    kiln_sym shape[KILN_MAX_DIMS];
    for (int i = 0; i < nd; i++) shape[i] = kiln_dim(g, x, i);
    kiln_tensor is_max = kiln_eq(g, x, nn_keep(g, kiln_max(g, x, a), a));
    kiln_tensor idx = kiln_iota(g, KILN_I32, nd, shape, a);
    kiln_tensor rev = kiln_flip(g, idx, a);
    kiln_tensor best = kiln_max(g, kiln_mul(g, kiln_cast(g, is_max, KILN_I32), rev), a);
    kiln_tensor last = kiln_max(g, idx, a); /* n - 1, per row */
    return kiln_sub(g, last, best);
}

/* inclusive prefix sum along an axis. For a constant size n: pad n-1 zeros
 * in front and sum windows of n (window k covers x[k-n+1 .. k]); adding
 * zeros is exact for every value. For a symbolic size the window length is
 * unknown when building, so a lower-triangular 0/1 matrix is summed instead
 * (exact for finite x). */
kiln_tensor kiln_cumsum(kiln_graph *g, kiln_tensor x, int axis) {
    if (!nn_ok(g, "kiln_cumsum", x)) return KILN_NONE;
    int a = nn_axis(g, "kiln_cumsum", x, axis);
    if (a < 0) return KILN_NONE;
    kiln_sym n = kiln_dim(g, x, a);
    int64_t nv;
    if (nn_const_dim(g, n, &nv)) {
        if (nv <= 1) return x;
        kiln_tensor p = kiln_pad(g, x, a, kiln_sym_int(g, nv - 1), kiln_sym_int(g, 0));
        return kiln_sum(g, kiln_window(g, p, a, nv, 1, 1), a + 1);
    }
    int nd = kiln_ndim(g, x);
    if (nd >= KILN_MAX_DIMS) {
        graph_error(g, KILN_ERR_SHAPE, "kiln_cumsum: a symbolic axis needs one free dimension (have %d)", nd);
        return KILN_NONE;
    }
    /* mask (n_out, n_in, 1, ...) placed at axes a, a+1 of x_in (..., 1, n_in, ...) */
    kiln_sym ms[KILN_MAX_DIMS], one = kiln_sym_int(g, 1);
    int mnd = nd + 1 - a;
    for (int i = 0; i < mnd; i++) ms[i] = one;
    ms[0] = n;
    ms[1] = n;
    kiln_tensor io = kiln_iota(g, KILN_I32, mnd, ms, 0);
    kiln_tensor ii = kiln_iota(g, KILN_I32, mnd, ms, 1);
    kiln_tensor mask = kiln_cast(g, kiln_lt(g, ii, nn_shift(g, io, 1.0)), nn_dtype(g, x));
    kiln_tensor xin = kiln_unsqueeze(g, x, a);
    return kiln_sum(g, kiln_mul(g, xin, mask), a + 1);
}
