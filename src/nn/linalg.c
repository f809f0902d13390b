/* linalg.c — contractions and joins: matmul, linear, embedding, concat, conv2d.
 *
 * Every contraction is written in the one canonical form the rewriter
 * recognises: SUM over a shared axis of MUL(expand a, expand b), where the
 * expands are the broadcasting views the builder inserts. Nothing here
 * copies: concat is pad + pad + add, conv2d reads its input through pad and
 * window views (im2col without the copy).
 *
 * Block-format (q8_0, ...) weights are dequantised with CAST to the
 * activation dtype first; the rewriter fuses that cast into the contraction.
 */
#include "nn_util.h"

static int same_dim(kiln_graph *g, const char *fn, kiln_tensor a, int ia, kiln_tensor b, int ib) {
    if (kiln_dim(g, a, ia) == kiln_dim(g, b, ib)) return 1;
    char sa[128], sb[128];
    graph_error(g, KILN_ERR_SHAPE, "%s: inner sizes differ: %s (axis %d) and %s (axis %d)", fn,
                kiln_shape_str(g, a, sa, sizeof sa), ia, kiln_shape_str(g, b, sb, sizeof sb), ib);
    return 0;
}

/* w in x's dtype: dequantise a block-format weight */
static kiln_tensor weight_as(kiln_graph *g, kiln_tensor w, kiln_tensor x) {
    if (kiln_dtype_is_block(nn_dtype(g, w))) return kiln_cast(g, w, nn_dtype(g, x));
    return w;
}

kiln_tensor kiln_matmul(kiln_graph *g, kiln_tensor a, kiln_tensor b) {
    const char *fn = "kiln_matmul";
    if (!nn_ok(g, fn, a) || !nn_ok(g, fn, b)) return KILN_NONE;
    int na = kiln_ndim(g, a), nb = kiln_ndim(g, b);
    if (na < 1 || nb < 1) {
        graph_error(g, KILN_ERR_SHAPE, "%s: operands need at least one axis (have %d and %d)", fn, na, nb);
        return KILN_NONE;
    }
    b = weight_as(g, b, a);
    if (nb == 1) { /* (..., k) . (k) -> (...) */
        if (!same_dim(g, fn, a, na - 1, b, 0)) return KILN_NONE;
        return kiln_sum(g, kiln_mul(g, a, b), -1);
    }
    if (na == 1) { /* (k) . (..., k, n) -> (..., n) */
        if (!same_dim(g, fn, a, 0, b, nb - 2)) return KILN_NONE;
        return kiln_sum(g, kiln_mul(g, kiln_unsqueeze(g, a, 1), b), -2);
    }
    /* (..., m, k, 1) * (..., 1, k, n) -> (..., m, k, n), summed over k */
    if (!same_dim(g, fn, a, na - 1, b, nb - 2)) return KILN_NONE;
    kiln_tensor ae = kiln_unsqueeze(g, a, na);
    kiln_tensor be = kiln_unsqueeze(g, b, nb - 2);
    return kiln_sum(g, kiln_mul(g, ae, be), -2);
}

/* x (..., in) . weight (out, in)^T: (..., 1, in) * (out, in) summed over in */
kiln_tensor kiln_linear(kiln_graph *g, kiln_tensor x, kiln_tensor weight, kiln_tensor bias) {
    const char *fn = "kiln_linear";
    if (!nn_ok(g, fn, x) || !nn_ok(g, fn, weight)) return KILN_NONE;
    if (bias != KILN_NONE && !nn_ok(g, fn, bias)) return KILN_NONE;
    int nx = kiln_ndim(g, x);
    if (nx < 1 || kiln_ndim(g, weight) != 2) {
        graph_error(g, KILN_ERR_SHAPE, "%s: need x (..., in) and weight (out, in)", fn);
        return KILN_NONE;
    }
    if (!same_dim(g, fn, x, nx - 1, weight, 1)) return KILN_NONE;
    kiln_tensor w = weight_as(g, weight, x);
    kiln_tensor y = kiln_sum(g, kiln_mul(g, kiln_unsqueeze(g, x, nx - 1), w), -1);
    if (bias != KILN_NONE) {
        if (kiln_ndim(g, bias) != 1) {
            graph_error(g, KILN_ERR_SHAPE, "%s: bias must be (out)", fn);
            return KILN_NONE;
        }
        if (!same_dim(g, fn, bias, 0, weight, 0)) return KILN_NONE;
        y = kiln_add(g, y, nn_as(g, bias, y));
    }
    return y;
}

kiln_tensor kiln_embedding(kiln_graph *g, kiln_tensor table, kiln_tensor ids) {
    if (!nn_ok(g, "kiln_embedding", table) || !nn_ok(g, "kiln_embedding", ids)) return KILN_NONE;
    kiln_tensor rows = kiln_gather(g, table, ids);
    if (rows != KILN_NONE && kiln_dtype_is_block(nn_dtype(g, table))) rows = kiln_cast(g, rows, KILN_F32);
    return rows;
}

/* a padded after by len(b), b padded before by len(a), added: only the add
 * computes, and x + 0 is exact */
kiln_tensor kiln_concat(kiln_graph *g, kiln_tensor a, kiln_tensor b, int axis) {
    const char *fn = "kiln_concat";
    if (!nn_ok(g, fn, a) || !nn_ok(g, fn, b)) return KILN_NONE;
    int n = kiln_ndim(g, a);
    int ax = nn_axis(g, fn, a, axis);
    if (ax < 0) return KILN_NONE;
    int ok = kiln_ndim(g, b) == n;
    for (int i = 0; ok && i < n; i++) ok = i == ax || kiln_dim(g, a, i) == kiln_dim(g, b, i);
    if (!ok) {
        char sa[128], sb[128];
        graph_error(g, KILN_ERR_SHAPE, "%s: %s and %s differ outside axis %d", fn, kiln_shape_str(g, a, sa, sizeof sa),
                    kiln_shape_str(g, b, sb, sizeof sb), ax);
        return KILN_NONE;
    }
    kiln_sym zero = kiln_sym_int(g, 0);
    kiln_tensor pa = kiln_pad(g, a, ax, zero, kiln_dim(g, b, ax));
    kiln_tensor pb = kiln_pad(g, b, ax, kiln_dim(g, a, ax), zero);
    return kiln_add(g, pa, pb);
}

/* x (n, ci, h, w) padded on h and w, windowed to (n, ci, oh, kh, ow, kw),
 * permuted to (n, oh, ow, ci, kh, kw) and viewed as (n, 1, oh, ow, K) with
 * K = ci*kh*kw; weight (co, ci, kh, kw) viewed as (1, co, 1, 1, K); one SUM
 * over K gives (n, co, oh, ow). */
kiln_tensor kiln_conv2d(kiln_graph *g, kiln_tensor x, kiln_tensor w, kiln_tensor bias, int stride, int padding,
                        int dilation) {
    const char *fn = "kiln_conv2d";
    if (!nn_ok(g, fn, x) || !nn_ok(g, fn, w)) return KILN_NONE;
    if (bias != KILN_NONE && !nn_ok(g, fn, bias)) return KILN_NONE;
    if (kiln_ndim(g, x) != 4 || kiln_ndim(g, w) != 4) {
        graph_error(g, KILN_ERR_SHAPE, "%s: need x (n, c_in, h, w) and w (c_out, c_in, kh, kw)", fn);
        return KILN_NONE;
    }
    if (stride < 1 || padding < 0 || dilation < 1) {
        graph_error(g, KILN_ERR_INVALID, "%s: stride %d, padding %d, dilation %d (need >= 1, >= 0, >= 1)", fn, stride,
                    padding, dilation);
        return KILN_NONE;
    }
    int64_t kh, kw;
    if (!nn_const_dim(g, kiln_dim(g, w, 2), &kh) || !nn_const_dim(g, kiln_dim(g, w, 3), &kw)) {
        graph_error(g, KILN_ERR_SHAPE, "%s: kernel height and width must be constants", fn);
        return KILN_NONE;
    }
    if (!same_dim(g, fn, x, 1, w, 1)) return KILN_NONE;
    w = weight_as(g, w, x);
    kiln_sym p = kiln_sym_int(g, padding);
    kiln_tensor xp = kiln_pad(g, kiln_pad(g, x, 2, p, p), 3, p, p);
    kiln_tensor xw = kiln_window(g, xp, 2, kh, stride, dilation);  /* (n, ci, oh, kh, W) */
    xw = kiln_window(g, xw, 4, kw, stride, dilation);              /* (n, ci, oh, kh, ow, kw) */
    static const int perm[6] = {0, 2, 4, 1, 3, 5};
    xw = kiln_permute(g, xw, perm);                                /* (n, oh, ow, ci, kh, kw) */
    if (xw == KILN_NONE) return KILN_NONE;
    kiln_sym k = kiln_sym_mul(g, kiln_dim(g, w, 1), kiln_sym_int(g, kh * kw));
    kiln_sym one = kiln_sym_int(g, 1);
    kiln_sym xs[5] = {kiln_dim(g, xw, 0), one, kiln_dim(g, xw, 1), kiln_dim(g, xw, 2), k};
    kiln_sym ws[5] = {one, kiln_dim(g, w, 0), one, one, k};
    kiln_tensor xk = kiln_reshape(g, xw, 5, xs);
    kiln_tensor wk = kiln_reshape(g, w, 5, ws);
    kiln_tensor y = kiln_sum(g, kiln_mul(g, xk, wk), -1);
    if (bias != KILN_NONE) {
        if (kiln_ndim(g, bias) != 1 || kiln_dim(g, bias, 0) != kiln_dim(g, w, 0)) {
            graph_error(g, KILN_ERR_SHAPE, "%s: bias must be (c_out)", fn);
            return KILN_NONE;
        }
        kiln_sym bs[3] = {kiln_dim(g, bias, 0), one, one};
        y = kiln_add(g, y, kiln_reshape(g, nn_as(g, bias, y), 3, bs));
    }
    return y;
}
