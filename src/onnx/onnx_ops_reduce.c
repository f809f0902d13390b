/* onnx_ops_reduce.c — ONNX's reductions (ReduceSum, ReduceMean, ReduceMax,
 * ReduceMin, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum,
 * ReduceLogSumExp), ArgMax/ArgMin and TopK (by ranks: a comparison of
 * every pair, no sort) over kiln's SUM and MAX primitives.
 *
 * Invariants: axes come from the attribute (older opsets) or the second
 * input (ReduceSum from opset 13, the others from 18) and must be known at
 * load time; no axes reduces everything unless noop_with_empty_axes.
 * ReduceProd has no exact form over these primitives and is refused.
 */
#include <string.h>

#include "graph.h"
#include "nn_util.h"
#include "onnx_imp.h"

static int reduce(imp_ctx *c, const ox_node *n) {
    const char *op = n->op_type;
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    kiln_graph *g = c->g;
    int dt = imp_in_dtype(c, n, 0), r = kiln_ndim(g, x);
    int64_t axes[KILN_MAX_DIMS * 2];
    int k = 0;
    const int64_t *a;
    if ((k = imp_attr_ints(n, "axes", &a)) > 0) {
        if (k > KILN_MAX_DIMS) return imp_fail(c, KILN_ERR_INVALID, "%s: %d axes", op, k);
        memcpy(axes, a, (size_t)k * sizeof *a);
    } else if (imp_has(n, 1)) {
        if ((k = imp_const_ints(c, n, 1, axes, KILN_MAX_DIMS)) < 0) return 0;
    }
    int keep = (int)imp_attr_i(n, "keepdims", 1);
    int red[KILN_MAX_DIMS] = {0};
    if (k == 0) {
        if (imp_attr_i(n, "noop_with_empty_axes", 0)) return imp_set(c, n, 0, x, dt);
        for (int d = 0; d < r; d++) red[d] = 1;
    }
    for (int i = 0; i < k; i++) {
        int ax = imp_axis(c, n, axes[i], r);
        if (ax < 0) return 0;
        red[ax] = 1;
    }
    int fl = imp_is_float_onnx(dt);
    int is_max = !strcmp(op, "ReduceMax"), is_min = !strcmp(op, "ReduceMin");
    if (!fl && !is_max && !is_min && strcmp(op, "ReduceSum") && strcmp(op, "ReduceSumSquare") && strcmp(op, "ReduceL1"))
        return imp_fail(c, KILN_ERR_UNSUPPORTED, "%s on %s", op, ox_dtype_name(dt));
    kiln_tensor y = x;
    if (!strcmp(op, "ReduceSumSquare") || !strcmp(op, "ReduceL2")) y = kiln_mul(g, y, y);
    else if (!strcmp(op, "ReduceL1")) y = kiln_abs(g, y);
    else if (is_min) y = kiln_neg(g, y);
    kiln_tensor mx = KILN_NONE;
    if (!strcmp(op, "ReduceLogSumExp")) { /* max-shifted for stability */
        mx = y;
        for (int d = r - 1; d >= 0; d--)
            if (red[d]) mx = kiln_unsqueeze(g, kiln_max(g, mx, d), d);
        y = kiln_exp(g, kiln_sub(g, y, mx));
    }
    kiln_sym count = kiln_sym_int(g, 1);
    for (int d = r - 1; d >= 0; d--) {
        if (!red[d]) continue;
        count = kiln_sym_mul(g, count, kiln_dim(g, y, d));
        y = (is_max || is_min) ? kiln_max(g, y, d) : kiln_sum(g, y, d);
        y = kiln_unsqueeze(g, y, d);
    }
    if (!strcmp(op, "ReduceMean")) y = kiln_div(g, y, nn_sym_value(g, count, kiln_tensor_dtype(g, y)));
    else if (!strcmp(op, "ReduceL2")) y = kiln_sqrt(g, y);
    else if (!strcmp(op, "ReduceLogSum")) y = kiln_log(g, y);
    else if (!strcmp(op, "ReduceLogSumExp")) y = kiln_add(g, kiln_log(g, y), mx);
    else if (is_min) y = kiln_neg(g, y);
    if (!keep)
        for (int d = r - 1; d >= 0; d--)
            if (red[d]) y = kiln_squeeze(g, y, d);
    return imp_set(c, n, 0, y, dt);
}

static int argmax(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    kiln_graph *g = c->g;
    int ax = imp_axis(c, n, imp_attr_i(n, "axis", 0), kiln_ndim(g, x));
    if (ax < 0) return 0;
    if (!strcmp(n->op_type, "ArgMin")) x = kiln_neg(g, x);
    int last = (int)imp_attr_i(n, "select_last_index", 0);
    if (last) x = kiln_flip(g, x, ax);
    kiln_tensor y = kiln_argmax(g, x, ax);
    if (last) { /* index in the flipped axis: dim - 1 - i */
        kiln_tensor dim = nn_sym_value(g, kiln_dim(g, x, ax), KILN_I32);
        y = kiln_sub(g, kiln_sub(g, dim, kiln_const(g, 1, KILN_I32)), y);
    }
    if (imp_attr_i(n, "keepdims", 1)) y = kiln_unsqueeze(g, y, ax);
    return imp_set(c, n, 0, y, OX_INT64);
}

/* TopK by ranks, no sort: along the axis (moved last, length n), element
 * i's rank is how many elements beat it (larger, or equal at a lower index:
 * ONNX's order, smallest first when largest=0), an (n, n) comparison summed
 * inside one kernel; output position p takes the element whose rank is p
 * (its index a one-hot sum, its value a gather of that index), so values
 * are exact and ties keep ONNX's order. */
static int topk(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    kiln_graph *g = c->g;
    int r = kiln_ndim(g, x), dt = imp_in_dtype(c, n, 0);
    int ax = imp_axis(c, n, imp_attr_i(n, "axis", -1), r);
    if (ax < 0) return 0;
    int64_t K;
    if (imp_const_ints(c, n, 1, &K, 1) != 1) return c->status != KILN_OK ? 0 : imp_fail(c, KILN_ERR_INVALID, "TopK: K must be one value");
    int64_t len = imp_dim_const(c, x, ax);
    if (len < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "TopK along a symbolic axis");
    if (K < 1 || K > len) return imp_fail(c, K == 0 ? KILN_ERR_UNSUPPORTED : KILN_ERR_INVALID, "TopK: K = %lld of %lld", (long long)K, (long long)len);
    if (r + 1 > KILN_MAX_DIMS) return imp_fail(c, KILN_ERR_UNSUPPORTED, "TopK of rank %d", r);
    int largest = (int)imp_attr_i(n, "largest", 1);
    int perm[KILN_MAX_DIMS], back[KILN_MAX_DIMS];
    for (int d = 0, j = 0; d < r; d++)
        if (d != ax) perm[j++] = d;
    perm[r - 1] = ax;
    for (int d = 0; d < r; d++) back[perm[d]] = d;
    kiln_tensor xt = kiln_permute(g, x, perm); /* (..., n) */
    kiln_tensor xi = kiln_unsqueeze(g, xt, r), xj = kiln_unsqueeze(g, xt, r - 1); /* (..., n_i, 1), (..., 1, n_j) */
    kiln_tensor better = largest ? kiln_lt(g, xi, xj) : kiln_lt(g, xj, xi);
    /* j < i: an (n, n) constant of the lower triangle */
    kiln_sym nn2[2] = {kiln_sym_int(g, len), kiln_sym_int(g, len)};
    kiln_tensor before = kiln_lt(g, kiln_iota(g, KILN_I32, 2, nn2, 1), kiln_iota(g, KILN_I32, 2, nn2, 0));
    kiln_tensor beats = kiln_add(g, kiln_cast(g, better, KILN_F32),
                                 kiln_mul(g, kiln_cast(g, kiln_eq(g, xi, xj), KILN_F32), kiln_cast(g, before, KILN_F32)));
    kiln_tensor rank = kiln_sum(g, beats, -1); /* (..., n): exact counts */
    kiln_sym kp[2] = {kiln_sym_int(g, K), kiln_sym_int(g, 1)};
    kiln_tensor pos = kiln_iota(g, KILN_F32, 2, kp, 0);                         /* (K, 1) */
    kiln_tensor sel = kiln_eq(g, kiln_unsqueeze(g, rank, r - 1), pos);          /* (..., K, n) */
    kiln_sym ns = kiln_sym_int(g, len);
    kiln_tensor at = kiln_iota(g, KILN_F32, 1, &ns, 0);                         /* (n) */
    kiln_tensor idx = kiln_cast(g, kiln_sum(g, kiln_mul(g, kiln_cast(g, sel, KILN_F32), at), -1), KILN_I32); /* (..., K) */
    /* values: x at those indices, one gather of scalar rows of the flattened x */
    kiln_sym rows = kiln_sym_int(g, 1), dims[KILN_MAX_DIMS];
    for (int d = 0; d < r - 1; d++) {
        dims[d] = kiln_dim(g, xt, d);
        rows = kiln_sym_mul(g, rows, dims[d]);
    }
    dims[r - 1] = kiln_sym_int(g, K);
    kiln_sym flat[2] = {kiln_sym_mul(g, rows, ns), kiln_sym_int(g, 1)}, rk[2] = {rows, kiln_sym_int(g, K)};
    kiln_sym total = kiln_sym_mul(g, rows, kiln_sym_int(g, K));
    kiln_tensor table = kiln_reshape(g, xt, 2, flat);
    kiln_tensor base = kiln_mul(g, kiln_iota(g, KILN_I32, 2, rk, 0), kiln_const(g, (double)len, KILN_I32));
    kiln_tensor ids = kiln_reshape(g, kiln_add(g, kiln_reshape(g, idx, 2, rk), base), 1, &total);
    kiln_tensor vals = kiln_reshape(g, kiln_gather(g, table, ids), r, dims);
    if (!imp_set(c, n, 0, kiln_permute(g, vals, back), dt)) return 0;
    return n->n_out < 2 || !n->outputs[1][0] || imp_set(c, n, 1, kiln_permute(g, idx, back), OX_INT64);
}

const imp_op imp_ops_reduce[] = {
    {"ReduceSum", reduce, "axes keepdims noop_with_empty_axes"},
    {"ReduceMean", reduce, "axes keepdims noop_with_empty_axes"},
    {"ReduceMax", reduce, "axes keepdims noop_with_empty_axes"},
    {"ReduceMin", reduce, "axes keepdims noop_with_empty_axes"},
    {"ReduceL1", reduce, "axes keepdims noop_with_empty_axes"},
    {"ReduceL2", reduce, "axes keepdims noop_with_empty_axes"},
    {"ReduceSumSquare", reduce, "axes keepdims noop_with_empty_axes"},
    {"ReduceLogSum", reduce, "axes keepdims noop_with_empty_axes"},
    {"ReduceLogSumExp", reduce, "axes keepdims noop_with_empty_axes"},
    {"ArgMax", argmax, "axis keepdims select_last_index"}, {"ArgMin", argmax, "axis keepdims select_last_index"},
    {"TopK", topk, "axis largest sorted"},
    {NULL, NULL, NULL},
};
