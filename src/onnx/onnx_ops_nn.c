/* onnx_ops_nn.c — ONNX's network operators: MatMul, Gemm, Conv (grouped,
 * dilated, padded, strided, 1-3 spatial dims), ConvTranspose (the same
 * convolution of its input spread out by the stride), MaxPool, AveragePool, the
 * global pools, BatchNormalization (inference), LayerNormalization,
 * InstanceNormalization, LRN, Softmax, LogSoftmax.
 *
 * Convolution and pooling read their input through pad and window views (no
 * im2col copy); a convolution is then one SUM(MUL(expand, expand)), the form
 * kiln's contraction recognition takes (src/sched/pack.c materialises the
 * windowed operand for the micro-kernels). A pool is one reduction over its
 * window's cells (window axes moved last and merged). Where a window reaches
 * padding, a table over (output position, cell) made at load time says
 * what each cell counts for: max pooling adds it (0 over the input, -inf
 * over padding, where kiln_pad's value is 0), average pooling without
 * count_include_pad multiplies by it (1 / the window's input cells, 0 over
 * padding); so the pool stays one reduction with plain loads, which the
 * CPU vectorises across output points, and nothing is recomputed per run.
 *
 * Invariants: sizes that windows need (kernel sizes, strides, the spatial
 * dims) must be constants; anything else is an error naming the operator.
 */
#include <math.h>
#include <string.h>

#include "graph.h"
#include "nn_util.h"
#include "onnx_imp.h"

#define MAXS 3 /* spatial dims */

static int rank_of(imp_ctx *c, kiln_tensor x) { return kiln_ndim(c->g, x); }

static int matmul(imp_ctx *c, const ox_node *n) {
    kiln_tensor a = imp_in(c, n, 0), b = imp_in(c, n, 1);
    if (!imp_check(c, a) || !imp_check(c, b)) return 0;
    return imp_set(c, n, 0, kiln_matmul(c->g, a, b), imp_in_dtype(c, n, 0));
}

static int gemm(imp_ctx *c, const ox_node *n) {
    kiln_tensor a = imp_in(c, n, 0), b = imp_in(c, n, 1);
    if (!imp_check(c, a) || !imp_check(c, b)) return 0;
    kiln_graph *g = c->g;
    if (rank_of(c, a) != 2 || rank_of(c, b) != 2) return imp_fail(c, KILN_ERR_SHAPE, "Gemm needs 2-D A and B");
    if (imp_attr_i(n, "transA", 0)) a = kiln_transpose(g, a, 0, 1);
    kiln_tensor y = imp_attr_i(n, "transB", 0) ? kiln_linear(g, a, b, KILN_NONE) : kiln_matmul(g, a, b);
    double alpha = imp_attr_f(n, "alpha", 1.0), beta = imp_attr_f(n, "beta", 1.0);
    if (alpha != 1.0) y = nn_scale(g, y, alpha);
    if (imp_has(n, 2) && beta != 0.0) {
        kiln_tensor cc = imp_in(c, n, 2);
        if (beta != 1.0) cc = nn_scale(g, cc, beta);
        y = kiln_add(g, y, cc);
    }
    return imp_set(c, n, 0, y, imp_in_dtype(c, n, 0));
}

/* the window geometry shared by Conv and the pools */
typedef struct geom {
    int k;                            /* spatial dims */
    int64_t in[MAXS], ker[MAXS], stride[MAXS], dil[MAXS], pb[MAXS], pe[MAXS], out[MAXS], extra[MAXS];
} geom;

static int ints_or(const ox_node *n, const char *name, int k, int64_t *out, int64_t def) {
    const int64_t *a;
    int m = imp_attr_ints(n, name, &a);
    for (int i = 0; i < k; i++) out[i] = m ? (i < m ? a[i] : def) : def;
    return m == 0 || m == k || (!strcmp(name, "pads") && m == 2 * k);
}

/* kernel sizes ker[] must be filled; reads strides, dilations, pads,
 * auto_pad, ceil_mode from the node */
static int geometry(imp_ctx *c, const ox_node *n, kiln_tensor x, geom *gm, int ceil_ok) {
    gm->k = rank_of(c, x) - 2;
    int k = gm->k;
    if (k < 1 || k > MAXS) return imp_fail(c, KILN_ERR_UNSUPPORTED, "%s with %d spatial dims", n->op_type, k);
    for (int i = 0; i < k; i++) {
        gm->in[i] = imp_dim_const(c, x, 2 + i);
        if (gm->in[i] < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "%s over a symbolic spatial dim", n->op_type);
        if (gm->ker[i] < 1) return imp_fail(c, KILN_ERR_INVALID, "%s: kernel size %lld", n->op_type, (long long)gm->ker[i]);
    }
    int64_t pads[2 * MAXS];
    const int64_t *pa;
    int np = imp_attr_ints(n, "pads", &pa);
    if (np && np != 2 * k) return imp_fail(c, KILN_ERR_INVALID, "%s: %d pads for %d dims", n->op_type, np, k);
    for (int i = 0; i < 2 * k; i++) pads[i] = np ? pa[i] : 0;
    if (!ints_or(n, "strides", k, gm->stride, 1) || !ints_or(n, "dilations", k, gm->dil, 1))
        return imp_fail(c, KILN_ERR_INVALID, "%s: strides or dilations of the wrong length", n->op_type);
    int ceil_mode = (int)imp_attr_i(n, "ceil_mode", 0);
    if (ceil_mode && !ceil_ok) return imp_fail(c, KILN_ERR_UNSUPPORTED, "%s: ceil_mode", n->op_type);
    const char *ap = imp_attr_s(n, "auto_pad", "NOTSET");
    for (int i = 0; i < k; i++) {
        if (gm->stride[i] < 1 || gm->dil[i] < 1) return imp_fail(c, KILN_ERR_INVALID, "%s: stride or dilation < 1", n->op_type);
        int64_t span = (gm->ker[i] - 1) * gm->dil[i] + 1;
        if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
            int64_t o = (gm->in[i] + gm->stride[i] - 1) / gm->stride[i];
            int64_t tot = (o - 1) * gm->stride[i] + span - gm->in[i];
            if (tot < 0) tot = 0;
            gm->pb[i] = !strcmp(ap, "SAME_UPPER") ? tot / 2 : tot - tot / 2;
            gm->pe[i] = tot - gm->pb[i];
        } else if (!strcmp(ap, "VALID")) {
            gm->pb[i] = gm->pe[i] = 0;
        } else if (!strcmp(ap, "NOTSET")) {
            gm->pb[i] = pads[i];
            gm->pe[i] = pads[i + k];
        } else return imp_fail(c, KILN_ERR_UNSUPPORTED, "%s: auto_pad '%s'", n->op_type, ap);
        if (gm->pb[i] < 0 || gm->pe[i] < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "%s: negative pads", n->op_type);
        int64_t room = gm->in[i] + gm->pb[i] + gm->pe[i] - span;
        if (room < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "%s: the kernel is larger than the padded input", n->op_type);
        gm->out[i] = (ceil_mode ? (room + gm->stride[i] - 1) / gm->stride[i] : room / gm->stride[i]) + 1;
        /* ceil mode: the last window must start inside the input or the left padding */
        if (ceil_mode && (gm->out[i] - 1) * gm->stride[i] >= gm->in[i] + gm->pb[i]) gm->out[i]--;
        int64_t need = (gm->out[i] - 1) * gm->stride[i] + span;
        gm->extra[i] = need > gm->in[i] + gm->pb[i] + gm->pe[i] ? need - (gm->in[i] + gm->pb[i] + gm->pe[i]) : 0;
    }
    return 1;
}

/* x (N, C, s...) padded (pads and ceil-mode extra) and windowed:
 * (N, C, o1, k1, o2, k2, ...) */
static kiln_tensor windows(imp_ctx *c, kiln_tensor x, const geom *gm, int with_extra) {
    kiln_graph *g = c->g;
    for (int i = 0; i < gm->k; i++)
        x = kiln_pad(g, x, 2 + i, kiln_sym_int(g, gm->pb[i]), kiln_sym_int(g, gm->pe[i] + (with_extra ? gm->extra[i] : 0)));
    for (int i = gm->k - 1; i >= 0; i--) {
        x = kiln_window(g, x, 2 + i, gm->ker[i], gm->stride[i], gm->dil[i]);
        /* the window count may exceed out (extra room at the end): cut */
        if (x != KILN_NONE && imp_dim_const(c, x, 2 + i) != gm->out[i])
            x = kiln_slice(g, x, 2 + i, kiln_sym_int(g, 0), kiln_sym_int(g, gm->out[i]), 1);
    }
    return x;
}

/* windows (N, C, o1, k1, o2, k2, ...) as (N, C, o1, o2, ..., k1*k2*...):
 * one reduction over every cell of a window */
static kiln_tensor flat_windows(imp_ctx *c, kiln_tensor xw, int k) {
    kiln_graph *g = c->g;
    int perm[KILN_MAX_DIMS], j = 0;
    perm[j++] = 0;
    perm[j++] = 1;
    for (int i = 0; i < k; i++) perm[j++] = 2 + 2 * i;
    for (int i = 0; i < k; i++) perm[j++] = 3 + 2 * i;
    xw = kiln_permute(g, xw, perm);
    if (xw == KILN_NONE) return KILN_NONE;
    kiln_sym dims[KILN_MAX_DIMS];
    kiln_sym cells = kiln_sym_int(g, 1);
    for (int d = 0; d < 2 + k; d++) dims[d] = kiln_dim(g, xw, d);
    for (int i = 0; i < k; i++) cells = kiln_sym_mul(g, cells, kiln_dim(g, xw, 2 + k + i));
    dims[2 + k] = cells;
    return kiln_reshape(g, xw, 3 + k, dims);
}

/* y = x conv w (W (M, Cg, k...)) with geometry gm and grp groups, plus bias b
 * (or KILN_NONE): the windows of x and one SUM(MUL) over Cg * k... */
static kiln_tensor conv_core(imp_ctx *c, kiln_tensor x, kiln_tensor w, kiln_tensor b, const geom *gm, int64_t grp,
                             const char *op) {
    kiln_graph *g = c->g;
    int k = gm->k;
    int64_t C = imp_dim_const(c, x, 1), M = imp_dim_const(c, w, 0), Cg = imp_dim_const(c, w, 1);
    if (C < 0 || M < 0 || grp < 1 || C != Cg * grp || M % grp) {
        imp_fail(c, KILN_ERR_SHAPE, "%s: channels %lld, W (%lld, %lld, ...), group %lld", op, (long long)C, (long long)M,
                 (long long)Cg, (long long)grp);
        return KILN_NONE;
    }
    if (grp > 1 && 3 + 2 * k > KILN_MAX_DIMS) {
        imp_fail(c, KILN_ERR_UNSUPPORTED, "%s: grouped with %d spatial dims", op, k);
        return KILN_NONE;
    }
    /* a reordering view of the input (ShuffleNet's channel shuffle: a
     * reshape of a transpose) composed with the windows leaves div and mod
     * in every read of the K-times re-read input: one copy first keeps the
     * windows' index arithmetic affine (and vectorisable) */
    if (!view_is_identity(&g->views[g->tensors[x].view], g->syms)) x = kiln_contiguous(g, x);
    kiln_tensor xw = windows(c, x, gm, 0); /* (N, C, o1, k1, ...) */
    int64_t K = Cg;
    for (int i = 0; i < k; i++) K *= gm->ker[i];
    kiln_sym one = kiln_sym_int(g, 1), N = kiln_dim(g, x, 0);
    int perm[KILN_MAX_DIMS], j = 0;
    kiln_sym xs[KILN_MAX_DIMS], ws[KILN_MAX_DIMS], ys[KILN_MAX_DIMS];
    int gx = grp > 1; /* a group axis after N */
    if (gx) {
        kiln_sym split[KILN_MAX_DIMS];
        int q = 0;
        split[q++] = N;
        split[q++] = kiln_sym_int(g, grp);
        split[q++] = kiln_sym_int(g, Cg);
        for (int i = 0; i < 2 * k; i++) split[q++] = kiln_dim(g, xw, 2 + i);
        xw = kiln_reshape(g, xw, q, split); /* (N, G, Cg, o1, k1, ...) */
    }
    int base = 1 + gx; /* where the channel axis is */
    perm[j++] = 0;
    if (gx) perm[j++] = 1;
    for (int i = 0; i < k; i++) perm[j++] = base + 1 + 2 * i; /* o_i */
    perm[j++] = base;                                         /* channels */
    for (int i = 0; i < k; i++) perm[j++] = base + 2 + 2 * i; /* k_i */
    xw = kiln_permute(g, xw, perm);                           /* (N, [G,] o..., Cg, k...) */
    int q = 0;
    xs[q++] = N;
    if (gx) xs[q++] = kiln_sym_int(g, grp);
    xs[q++] = one;
    for (int i = 0; i < k; i++) xs[q++] = kiln_sym_int(g, gm->out[i]);
    xs[q++] = kiln_sym_int(g, K);
    int rank = q;
    kiln_tensor xk = kiln_reshape(g, xw, rank, xs);
    q = 0;
    ws[q++] = one;
    if (gx) ws[q++] = kiln_sym_int(g, grp);
    ws[q++] = kiln_sym_int(g, M / grp);
    for (int i = 0; i < k; i++) ws[q++] = one;
    ws[q++] = kiln_sym_int(g, K);
    kiln_tensor wk = kiln_reshape(g, w, rank, ws);
    kiln_tensor y = kiln_sum(g, kiln_mul(g, xk, wk), -1); /* (N, [G,] Mg, o...) */
    q = 0;
    ys[q++] = N;
    ys[q++] = kiln_sym_int(g, M);
    for (int i = 0; i < k; i++) ys[q++] = kiln_sym_int(g, gm->out[i]);
    if (gx) y = kiln_reshape(g, y, q, ys);
    if (b != KILN_NONE) {
        kiln_sym bs[KILN_MAX_DIMS];
        bs[0] = kiln_sym_int(g, M);
        for (int i = 0; i < k; i++) bs[1 + i] = one;
        y = kiln_add(g, y, kiln_reshape(g, b, 1 + k, bs));
    }
    return y;
}

static int conv(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0), w = imp_in(c, n, 1);
    if (!imp_check(c, x) || !imp_check(c, w)) return 0;
    int r = rank_of(c, x);
    if (rank_of(c, w) != r) return imp_fail(c, KILN_ERR_SHAPE, "Conv: W has rank %d, X %d", rank_of(c, w), r);
    geom gm;
    for (int i = 0; i < r - 2 && i < MAXS; i++) gm.ker[i] = imp_dim_const(c, w, 2 + i);
    const int64_t *ks;
    int nk = imp_attr_ints(n, "kernel_shape", &ks);
    for (int i = 0; i < nk && i < r - 2 && i < MAXS; i++)
        if (ks[i] != gm.ker[i]) return imp_fail(c, KILN_ERR_SHAPE, "Conv: kernel_shape differs from W");
    if (!geometry(c, n, x, &gm, 0)) return 0;
    kiln_tensor b = imp_has(n, 2) ? imp_in(c, n, 2) : KILN_NONE;
    kiln_tensor y = conv_core(c, x, w, b, &gm, imp_attr_i(n, "group", 1), "Conv");
    if (y == KILN_NONE) return c->status != KILN_OK ? 0 : imp_check(c, y);
    return imp_set(c, n, 0, y, imp_in_dtype(c, n, 0));
}

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

/* along axis a: zeros between the elements (stride s), then `before` and
 * `after` cells of zero padding (negative: that many cut) */
static kiln_tensor spread(kiln_graph *g, kiln_tensor z, int a, int64_t in, int64_t s, int64_t before, int64_t after) {
    int r = kiln_ndim(g, z);
    int64_t len = in;
    if (s > 1) {
        kiln_sym dims[KILN_MAX_DIMS];
        z = kiln_unsqueeze(g, z, a + 1);                                          /* (.., in, 1, ..) */
        z = kiln_pad(g, z, a + 1, kiln_sym_int(g, 0), kiln_sym_int(g, s - 1));   /* (.., in, s, ..) */
        for (int d = 0; d < r; d++) dims[d] = kiln_dim(g, z, d < a ? d : d + 1);
        dims[a] = kiln_sym_int(g, in * s);
        z = kiln_reshape(g, z, r, dims);
        len = (in - 1) * s + 1;
        z = kiln_slice(g, z, a, kiln_sym_int(g, 0), kiln_sym_int(g, len), 1);
    }
    int64_t from = before < 0 ? -before : 0, to = after < 0 ? len + after : len;
    if (from || to != len) z = kiln_slice(g, z, a, kiln_sym_int(g, from), kiln_sym_int(g, to), 1);
    if (before > 0 || after > 0)
        z = kiln_pad(g, z, a, kiln_sym_int(g, before > 0 ? before : 0), kiln_sym_int(g, after > 0 ? after : 0));
    return z;
}

/* ConvTranspose as a convolution: out[o] = sum over i*s + k*d - pad_begin = o
 * of x[i] w[k] is the stride-1 convolution, with the kernel flipped and its
 * channel axes swapped, of x spread out by the stride (zeros between) and
 * padded by (kernel span - 1 - pad_begin) before and as needed after */
static int conv_transpose(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0), w = imp_in(c, n, 1);
    if (!imp_check(c, x) || !imp_check(c, w)) return 0;
    kiln_graph *g = c->g;
    int r = rank_of(c, x), k = r - 2;
    if (rank_of(c, w) != r) return imp_fail(c, KILN_ERR_SHAPE, "ConvTranspose: W has rank %d, X %d", rank_of(c, w), r);
    if (k < 1 || k > MAXS || r + 1 > KILN_MAX_DIMS) return imp_fail(c, KILN_ERR_UNSUPPORTED, "ConvTranspose with %d spatial dims", k);
    int64_t grp = imp_attr_i(n, "group", 1), C = imp_dim_const(c, x, 1), Mg = imp_dim_const(c, w, 1);
    if (grp < 1 || C < 0 || Mg < 0 || imp_dim_const(c, w, 0) != C || C % grp)
        return imp_fail(c, KILN_ERR_SHAPE, "ConvTranspose: X has %lld channels, W (%lld, %lld, ...), group %lld", (long long)C,
                        (long long)imp_dim_const(c, w, 0), (long long)Mg, (long long)grp);
    geom gm;
    int64_t stride[MAXS], dil[MAXS], opad[MAXS], in[MAXS], pads[2 * MAXS];
    if (!ints_or(n, "strides", k, stride, 1) || !ints_or(n, "dilations", k, dil, 1) || !ints_or(n, "output_padding", k, opad, 0))
        return imp_fail(c, KILN_ERR_INVALID, "ConvTranspose: strides, dilations or output_padding of the wrong length");
    const int64_t *pa, *os, *ks;
    int np = imp_attr_ints(n, "pads", &pa), nos = imp_attr_ints(n, "output_shape", &os), nk = imp_attr_ints(n, "kernel_shape", &ks);
    if ((np && np != 2 * k) || (nos && nos != k && nos != k + 2) || (nk && nk != k))
        return imp_fail(c, KILN_ERR_INVALID, "ConvTranspose: pads, output_shape or kernel_shape of the wrong length");
    if (nos == k + 2) os += 2;
    const char *ap = imp_attr_s(n, "auto_pad", "NOTSET");
    int same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER");
    if (!same && strcmp(ap, "NOTSET") && strcmp(ap, "VALID")) return imp_fail(c, KILN_ERR_UNSUPPORTED, "ConvTranspose: auto_pad '%s'", ap);
    gm.k = k;
    for (int i = 0; i < k; i++) {
        gm.ker[i] = imp_dim_const(c, w, 2 + i);
        in[i] = imp_dim_const(c, x, 2 + i);
        if (gm.ker[i] < 1 || in[i] < 1) return imp_fail(c, KILN_ERR_UNSUPPORTED, "ConvTranspose over symbolic or empty dims");
        if (nk && ks[i] != gm.ker[i]) return imp_fail(c, KILN_ERR_SHAPE, "ConvTranspose: kernel_shape differs from W");
        if (stride[i] < 1 || dil[i] < 1 || opad[i] < 0) return imp_fail(c, KILN_ERR_INVALID, "ConvTranspose: stride, dilation or output_padding");
        int64_t span = (gm.ker[i] - 1) * dil[i] + 1, full = stride[i] * (in[i] - 1) + opad[i] + span, out;
        if (same && !np) { /* ONNX's reference: total padding split, the odd cell at the end (UPPER) or start */
            out = nos ? os[i] : in[i] * stride[i];
            int64_t tot = full - out;
            pads[i] = !strcmp(ap, "SAME_UPPER") ? floor_div(tot, 2) : tot - floor_div(tot, 2);
        } else {
            pads[i] = np && strcmp(ap, "VALID") ? pa[i] : 0;
            pads[i + k] = np && strcmp(ap, "VALID") ? pa[i + k] : 0;
            out = nos ? os[i] : full - pads[i] - pads[i + k];
        }
        if (out < 1) return imp_fail(c, KILN_ERR_INVALID, "ConvTranspose: output size %lld", (long long)out);
        int64_t P = span - 1, lz = (in[i] - 1) * stride[i] + 1;
        int64_t before = P - pads[i], after = out + pads[i] - lz;
        if (lz + before + after != out + P || lz + (before < 0 ? before : 0) + (after < 0 ? after : 0) < 1)
            return imp_fail(c, KILN_ERR_UNSUPPORTED, "ConvTranspose: pads beyond the input");
        x = spread(g, x, 2 + i, in[i], stride[i], before, after);
        gm.in[i] = out + P;
        gm.stride[i] = 1;
        gm.dil[i] = dil[i];
        gm.pb[i] = gm.pe[i] = gm.extra[i] = 0;
        gm.out[i] = out;
    }
    /* W (C, Mg, k...) -> (M, Cg, k...) per group, every spatial axis flipped */
    int64_t Cg = C / grp;
    kiln_sym dims[KILN_MAX_DIMS];
    int perm[KILN_MAX_DIMS], q = 0;
    dims[q++] = kiln_sym_int(g, grp);
    dims[q++] = kiln_sym_int(g, Cg);
    dims[q++] = kiln_sym_int(g, Mg);
    for (int i = 0; i < k; i++) dims[q++] = kiln_sym_int(g, gm.ker[i]);
    kiln_tensor wt = kiln_reshape(g, w, q, dims);
    perm[0] = 0;
    perm[1] = 2;
    perm[2] = 1;
    for (int i = 0; i < k; i++) perm[3 + i] = 3 + i;
    wt = kiln_permute(g, wt, perm);
    q = 0;
    dims[q++] = kiln_sym_int(g, grp * Mg);
    dims[q++] = kiln_sym_int(g, Cg);
    for (int i = 0; i < k; i++) dims[q++] = kiln_sym_int(g, gm.ker[i]);
    wt = kiln_reshape(g, wt, q, dims);
    for (int i = 0; i < k; i++) wt = kiln_flip(g, wt, 2 + i);
    kiln_tensor b = imp_has(n, 2) ? imp_in(c, n, 2) : KILN_NONE;
    kiln_tensor y = conv_core(c, x, wt, b, &gm, grp, "ConvTranspose");
    if (y == KILN_NONE) return c->status != KILN_OK ? 0 : imp_check(c, y);
    return imp_set(c, n, 0, y, imp_in_dtype(c, n, 0));
}

/* the pools' table over (o..., cells), cells in flat_windows' order: per
 * output position and window cell, for max 0 over an input cell and -inf
 * over padding; for average 1 / (the window's input cells) over an input
 * cell and 0 over padding (NaN where a window covers no input cell, as
 * 0 / 0 was). A cell is an input cell when its coordinate
 * o * stride - pb + kk * dil lies in [0, in) along every axis. */
static kiln_tensor cell_table(imp_ctx *c, const geom *gm, int is_max, kiln_dtype dt) {
    int k = gm->k;
    int64_t dims[MAXS + 1], pts = 1, cells = 1;
    for (int i = 0; i < k; i++) {
        dims[1 + i] = gm->out[i];
        pts *= gm->out[i];
        cells *= gm->ker[i];
    }
    dims[0] = cells;
    ox_tensor *t = imp_new_const(c, OX_FLOAT, k + 1, dims);
    if (!t) return KILN_NONE;
    float *v = (float *)t->data;
    for (int64_t p = 0; p < pts; p++) {
        int64_t count = 0;
        for (int64_t q = 0; q < cells; q++) {
            int64_t pr = p, qr = q, ok = 1;
            for (int i = k - 1; i >= 0; i--) {
                int64_t o = pr % gm->out[i], kk = qr % gm->ker[i];
                pr /= gm->out[i];
                qr /= gm->ker[i];
                int64_t at = o * gm->stride[i] - gm->pb[i] + kk * gm->dil[i];
                ok &= at >= 0 && at < gm->in[i];
            }
            v[q * pts + p] = (float)ok; /* 1 / 0 for now */
            count += ok;
        }
        for (int64_t q = 0; q < cells; q++) {
            float *e = &v[q * pts + p];
            if (is_max) *e = *e != 0.0f ? 0.0f : -INFINITY;
            else *e = count ? *e / (float)count : NAN;
        }
    }
    int perm[MAXS + 1];
    for (int i = 0; i < k; i++) perm[i] = 1 + i;
    perm[k] = 0;
    kiln_tensor r = imp_tensor_of(c, t);
    if (r != KILN_NONE) r = kiln_permute(c->g, r, perm);
    return dt != KILN_F32 && r != KILN_NONE ? kiln_cast(c->g, r, dt) : r;
}

static int pool(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    kiln_graph *g = c->g;
    int is_max = !strcmp(n->op_type, "MaxPool");
    if (is_max && n->n_out > 1 && n->outputs[1][0]) return imp_fail(c, KILN_ERR_UNSUPPORTED, "MaxPool: the Indices output");
    if (imp_attr_i(n, "storage_order", 0)) return imp_fail(c, KILN_ERR_UNSUPPORTED, "MaxPool: storage_order=1");
    if (!imp_is_float_onnx(imp_in_dtype(c, n, 0))) return imp_fail(c, KILN_ERR_UNSUPPORTED, "%s on %s", n->op_type, ox_dtype_name(imp_in_dtype(c, n, 0)));
    geom gm;
    int r = rank_of(c, x);
    if (r - 2 < 1 || r - 2 > MAXS) return imp_fail(c, KILN_ERR_UNSUPPORTED, "%s of rank %d", n->op_type, r);
    if (!ints_or(n, "kernel_shape", r - 2, gm.ker, 0)) return imp_fail(c, KILN_ERR_INVALID, "%s: kernel_shape", n->op_type);
    if (!geometry(c, n, x, &gm, 1)) return 0;
    int k = gm.k;
    if (!is_max) /* ONNX's reference spreads ceil-mode padding over both ends */
        for (int i = 0; i < k; i++) {
            if (gm.extra[i] && imp_attr_i(n, "count_include_pad", 0))
                return imp_fail(c, KILN_ERR_UNSUPPORTED, "AveragePool: count_include_pad with ceil_mode padding");
            gm.pb[i] += gm.extra[i] / 2;
            gm.pe[i] += gm.extra[i] - gm.extra[i] / 2;
            gm.extra[i] = 0;
        }
    int padded = 0; /* a window may cover padding (explicit or ceil mode) */
    for (int i = 0; i < k; i++) padded |= gm.pb[i] || gm.pe[i] || gm.extra[i];
    kiln_tensor xw = flat_windows(c, windows(c, x, &gm, 1), k); /* (N, C, o..., cells) */
    int per_cell = padded && (is_max || !imp_attr_i(n, "count_include_pad", 0));
    kiln_tensor y;
    if (per_cell) {
        /* max: padding is -inf (x + 0 is x, exact; the padding's x is 0);
         * average over input cells only (ONNX's reference without
         * count_include_pad): each cell times 1 / the window's input
         * cells. Both a load-time table (o..., cells), read in place */
        kiln_tensor t = cell_table(c, &gm, is_max, kiln_tensor_dtype(g, x));
        if (t == KILN_NONE) return 0;
        y = is_max ? kiln_max(g, kiln_add(g, xw, t), -1) : kiln_sum(g, kiln_mul(g, xw, t), -1);
    } else if (is_max) {
        y = kiln_max(g, xw, -1);
    } else {
        /* with count_include_pad every cell of the window counts (explicit
         * and ceil-mode padding) */
        double cells = 1;
        for (int i = 0; i < k; i++) cells *= (double)gm.ker[i];
        y = nn_scale(g, kiln_sum(g, xw, -1), 1.0 / cells);
    }
    return imp_set(c, n, 0, y, imp_in_dtype(c, n, 0));
}

static int global_pool(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int r = rank_of(c, x);
    if (r < 3) return imp_fail(c, KILN_ERR_SHAPE, "%s needs rank >= 3", n->op_type);
    int is_max = !strcmp(n->op_type, "GlobalMaxPool");
    kiln_graph *g = c->g;
    kiln_sym dims[KILN_MAX_DIMS], cells = kiln_sym_int(g, 1);
    for (int d = 2; d < r; d++) cells = kiln_sym_mul(g, cells, kiln_dim(g, x, d));
    dims[0] = kiln_dim(g, x, 0);
    dims[1] = kiln_dim(g, x, 1);
    dims[2] = cells;
    kiln_tensor f = kiln_reshape(g, x, 3, dims); /* one reduction over every spatial cell */
    f = is_max ? kiln_max(g, f, 2) : kiln_mean(g, f, 2);
    for (int d = 2; d < r; d++) dims[d] = kiln_sym_int(g, 1);
    return imp_set(c, n, 0, kiln_reshape(g, f, r, dims), imp_in_dtype(c, n, 0));
}

/* a per-channel vector (C) shaped to broadcast over (N, C, s...) */
static kiln_tensor per_channel(imp_ctx *c, kiln_tensor v, int r) {
    kiln_sym dims[KILN_MAX_DIMS];
    dims[0] = kiln_dim(c->g, v, 0);
    for (int i = 1; i < r - 1; i++) dims[i] = kiln_sym_int(c->g, 1);
    return kiln_reshape(c->g, v, r - 1, dims);
}

static int batchnorm(imp_ctx *c, const ox_node *n) {
    if (imp_attr_i(n, "spatial", 1) != 1) return imp_fail(c, KILN_ERR_UNSUPPORTED, "BatchNormalization: spatial=0");
    if (imp_attr_i(n, "training_mode", 0)) return imp_fail(c, KILN_ERR_UNSUPPORTED, "BatchNormalization in training mode");
    for (int i = 1; i < n->n_out; i++)
        if (n->outputs[i][0]) return imp_fail(c, KILN_ERR_UNSUPPORTED, "BatchNormalization: training outputs");
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int r = rank_of(c, x);
    if (r < 2) return imp_fail(c, KILN_ERR_SHAPE, "BatchNormalization needs rank >= 2");
    double eps = imp_attr_f(n, "epsilon", 1e-5);
    kiln_graph *g = c->g;
    ox_tensor *s = imp_const(c, n, 1), *b = imp_const(c, n, 2), *mu = imp_const(c, n, 3), *var = imp_const(c, n, 4);
    kiln_tensor a, sh;
    if (s && b && mu && var && s->dtype == OX_FLOAT && b->n == s->n && mu->n == s->n && var->n == s->n && s->ndim == 1) {
        /* fold scale / sqrt(var + eps) and the shift at load time */
        ox_tensor *ka = imp_new_const(c, OX_FLOAT, 1, &s->n), *kb = imp_new_const(c, OX_FLOAT, 1, &s->n);
        if (!ka || !kb) return 0;
        for (int64_t i = 0; i < s->n; i++) {
            double av = ox_elem_f(s->dtype, s->data, i) / sqrt(ox_elem_f(var->dtype, var->data, i) + eps);
            ((float *)ka->data)[i] = (float)av;
            ((float *)kb->data)[i] = (float)(ox_elem_f(b->dtype, b->data, i) - ox_elem_f(mu->dtype, mu->data, i) * av);
        }
        a = imp_tensor_of(c, ka);
        sh = imp_tensor_of(c, kb);
        if (kiln_tensor_dtype(g, x) != KILN_F32) {
            a = kiln_cast(g, a, kiln_tensor_dtype(g, x));
            sh = kiln_cast(g, sh, kiln_tensor_dtype(g, x));
        }
    } else {
        kiln_tensor scale = imp_in(c, n, 1), bias = imp_in(c, n, 2), mean = imp_in(c, n, 3), vv = imp_in(c, n, 4);
        a = kiln_div(g, scale, kiln_sqrt(g, nn_shift(g, vv, eps)));
        sh = kiln_sub(g, bias, kiln_mul(g, mean, a));
    }
    kiln_tensor y = kiln_add(g, kiln_mul(g, x, per_channel(c, a, r)), per_channel(c, sh, r));
    return imp_set(c, n, 0, y, imp_in_dtype(c, n, 0));
}

/* mean and 1/sqrt(var + eps) over the axes [ax, r) of x, kept as size 1 */
static int moments(imp_ctx *c, kiln_tensor x, int ax, double eps, kiln_tensor *mean, kiln_tensor *inv) {
    kiln_graph *g = c->g;
    int r = rank_of(c, x);
    kiln_sym dims[KILN_MAX_DIMS], keep[KILN_MAX_DIMS];
    kiln_sym tail = kiln_sym_int(g, 1);
    for (int d = 0; d < r; d++) {
        if (d < ax) dims[d] = keep[d] = kiln_dim(g, x, d);
        else { tail = kiln_sym_mul(g, tail, kiln_dim(g, x, d)); keep[d] = kiln_sym_int(g, 1); }
    }
    dims[ax] = tail;
    kiln_tensor xf = kiln_reshape(g, x, ax + 1, dims);
    kiln_tensor mu = kiln_unsqueeze(g, kiln_mean(g, xf, ax), ax);
    kiln_tensor dev = kiln_sub(g, xf, mu);
    kiln_tensor var = kiln_mean(g, kiln_mul(g, dev, dev), ax);
    kiln_tensor iv = kiln_recip(g, kiln_sqrt(g, nn_shift(g, var, eps)));
    *mean = kiln_reshape(g, mu, r, keep);
    *inv = kiln_reshape(g, kiln_unsqueeze(g, iv, ax), r, keep);
    return imp_check(c, *inv);
}

static int layernorm(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    if (!imp_is_float_onnx(imp_in_dtype(c, n, 0))) return imp_fail(c, KILN_ERR_UNSUPPORTED, "LayerNormalization on %s", ox_dtype_name(imp_in_dtype(c, n, 0)));
    int64_t st = imp_attr_i(n, "stash_type", 1);
    if (st != 1) return imp_fail(c, KILN_ERR_UNSUPPORTED, "LayerNormalization: stash_type %lld", (long long)st);
    int r = rank_of(c, x);
    int ax = imp_axis(c, n, imp_attr_i(n, "axis", -1), r);
    if (ax < 0) return 0;
    kiln_graph *g = c->g;
    kiln_tensor xc = x;
    if (kiln_tensor_dtype(g, x) != KILN_F32) xc = kiln_cast(g, x, KILN_F32); /* stash_type 1: f32 statistics */
    kiln_tensor mu, inv;
    if (!moments(c, xc, ax, imp_attr_f(n, "epsilon", 1e-5), &mu, &inv)) return 0;
    kiln_tensor y = kiln_mul(g, kiln_sub(g, xc, mu), inv);
    if (kiln_tensor_dtype(g, x) != KILN_F32) y = kiln_cast(g, y, kiln_tensor_dtype(g, x));
    y = kiln_mul(g, y, imp_in(c, n, 1));
    if (imp_has(n, 2)) y = kiln_add(g, y, imp_in(c, n, 2));
    if (!imp_set(c, n, 0, y, imp_in_dtype(c, n, 0))) return 0;
    if (!imp_set(c, n, 1, mu, OX_FLOAT)) return 0;
    return imp_set(c, n, 2, inv, OX_FLOAT);
}

/* x / sqrt(mean(x^2 over [axis, r)) + eps) * scale, statistics in f32 */
static int rmsnorm(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    if (!imp_is_float_onnx(imp_in_dtype(c, n, 0))) return imp_fail(c, KILN_ERR_UNSUPPORTED, "RMSNormalization on %s", ox_dtype_name(imp_in_dtype(c, n, 0)));
    if (imp_attr_i(n, "stash_type", 1) != 1) return imp_fail(c, KILN_ERR_UNSUPPORTED, "RMSNormalization: stash_type");
    kiln_graph *g = c->g;
    int r = rank_of(c, x);
    int ax = imp_axis(c, n, imp_attr_i(n, "axis", -1), r);
    if (ax < 0) return 0;
    kiln_tensor xc = kiln_tensor_dtype(g, x) == KILN_F32 ? x : kiln_cast(g, x, KILN_F32);
    kiln_sym dims[KILN_MAX_DIMS], keep[KILN_MAX_DIMS], tail = kiln_sym_int(g, 1);
    for (int d = 0; d < r; d++) {
        if (d < ax) dims[d] = keep[d] = kiln_dim(g, x, d);
        else { tail = kiln_sym_mul(g, tail, kiln_dim(g, x, d)); keep[d] = kiln_sym_int(g, 1); }
    }
    dims[ax] = tail;
    kiln_tensor xf = kiln_reshape(g, xc, ax + 1, dims);
    kiln_tensor ms = kiln_mean(g, kiln_mul(g, xf, xf), ax);
    kiln_tensor inv = kiln_recip(g, kiln_sqrt(g, nn_shift(g, ms, imp_attr_f(n, "epsilon", 1e-5))));
    inv = kiln_reshape(g, kiln_unsqueeze(g, inv, ax), r, keep);
    kiln_tensor y = kiln_mul(g, xc, inv);
    if (kiln_tensor_dtype(g, x) != KILN_F32) y = kiln_cast(g, y, kiln_tensor_dtype(g, x));
    y = kiln_mul(g, y, imp_in(c, n, 1));
    return imp_set(c, n, 0, y, imp_in_dtype(c, n, 0));
}

static int instancenorm(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int r = rank_of(c, x);
    if (r < 3) return imp_fail(c, KILN_ERR_SHAPE, "InstanceNormalization needs rank >= 3");
    kiln_graph *g = c->g;
    kiln_tensor mu, inv;
    if (!moments(c, x, 2, imp_attr_f(n, "epsilon", 1e-5), &mu, &inv)) return 0;
    kiln_tensor y = kiln_mul(g, kiln_sub(g, x, mu), inv);
    y = kiln_add(g, kiln_mul(g, y, per_channel(c, imp_in(c, n, 1), r)), per_channel(c, imp_in(c, n, 2), r));
    return imp_set(c, n, 0, y, imp_in_dtype(c, n, 0));
}

/* x / (bias + alpha / size * sum of squares over a channel window)^beta */
static int lrn(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int64_t size = imp_attr_i(n, "size", 0);
    if (size < 1) return imp_fail(c, KILN_ERR_INVALID, "LRN: size %lld", (long long)size);
    double alpha = imp_attr_f(n, "alpha", 1e-4), beta = imp_attr_f(n, "beta", 0.75), bias = imp_attr_f(n, "bias", 1.0);
    kiln_graph *g = c->g;
    int64_t before = (size - 1) / 2, after = size - 1 - before;
    if (size > 64) return imp_fail(c, KILN_ERR_UNSUPPORTED, "LRN: size %lld (at most 64)", (long long)size);
    kiln_sym C = kiln_dim(g, x, 1);
    kiln_tensor sq = kiln_pad(g, kiln_mul(g, x, x), 1, kiln_sym_int(g, before), kiln_sym_int(g, after));
    /* the sum over the channel window as `size` shifted slices added: one
     * elementwise kernel, vectorised along the spatial axes (a window view
     * on the channel axis made a reduction with div/mod indices per element) */
    kiln_tensor s = KILN_NONE;
    for (int64_t j = 0; j < size; j++) {
        kiln_tensor t = kiln_slice(g, sq, 1, kiln_sym_int(g, j), kiln_sym_add(g, C, kiln_sym_int(g, j)), 1);
        s = s == KILN_NONE ? t : kiln_add(g, s, t);
    }
    kiln_tensor base = nn_shift(g, nn_scale(g, s, alpha / (double)size), bias);
    kiln_tensor den = KILN_NONE;
    double q = beta * 4.0;
    if (q == floor(q) && q >= 1.0 && q <= 16.0) {
        /* base^beta with beta in quarters (0.75, the usual): products of
         * base, sqrt(base) and sqrt(sqrt(base)), which vectorise, instead
         * of exp2(beta log2 base) */
        int qi = (int)q;
        kiln_tensor r2 = kiln_sqrt(g, base);
        if (qi & 1) den = kiln_sqrt(g, r2);
        if (qi & 2) den = den == KILN_NONE ? r2 : kiln_mul(g, den, r2);
        for (int i = 0; i < qi / 4; i++) den = den == KILN_NONE ? base : kiln_mul(g, den, base);
    } else {
        den = kiln_exp2(g, nn_scale(g, kiln_log2(g, base), beta)); /* base > 0 */
    }
    return imp_set(c, n, 0, kiln_div(g, x, den), imp_in_dtype(c, n, 0));
}

static int softmax(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    kiln_graph *g = c->g;
    int r = rank_of(c, x), lg = !strcmp(n->op_type, "LogSoftmax");
    int old = c->opset < 13;
    int ax = imp_axis(c, n, imp_attr_i(n, "axis", old ? 1 : -1), r);
    if (ax < 0) return 0;
    kiln_tensor y;
    if (old && ax != r - 1) { /* opsets before 13: over the flattened axes [ax, r) */
        kiln_sym dims[KILN_MAX_DIMS], back[KILN_MAX_DIMS], tail = kiln_sym_int(g, 1);
        for (int d = 0; d < r; d++) {
            back[d] = kiln_dim(g, x, d);
            if (d < ax) dims[d] = back[d];
            else tail = kiln_sym_mul(g, tail, back[d]);
        }
        dims[ax] = tail;
        kiln_tensor xf = kiln_reshape(g, x, ax + 1, dims);
        y = lg ? kiln_log_softmax(g, xf, ax) : kiln_softmax(g, xf, ax);
        y = kiln_reshape(g, y, r, back);
    } else y = lg ? kiln_log_softmax(g, x, ax) : kiln_softmax(g, x, ax);
    return imp_set(c, n, 0, y, imp_in_dtype(c, n, 0));
}

const imp_op imp_ops_nn[] = {
    {"MatMul", matmul, ""}, {"Gemm", gemm, "alpha beta transA transB"},
    {"Conv", conv, "auto_pad dilations group kernel_shape pads strides"},
    {"ConvTranspose", conv_transpose, "auto_pad dilations group kernel_shape output_padding output_shape pads strides"},
    {"MaxPool", pool, "auto_pad ceil_mode dilations kernel_shape pads storage_order strides"},
    {"AveragePool", pool, "auto_pad ceil_mode count_include_pad dilations kernel_shape pads strides"},
    {"GlobalAveragePool", global_pool, ""}, {"GlobalMaxPool", global_pool, ""},
    {"BatchNormalization", batchnorm, "epsilon momentum training_mode spatial"},
    {"LayerNormalization", layernorm, "axis epsilon stash_type"},
    {"InstanceNormalization", instancenorm, "epsilon"}, {"RMSNormalization", rmsnorm, "axis epsilon stash_type"}, {"LRN", lrn, "alpha beta bias size"},
    {"Softmax", softmax, "axis"}, {"LogSoftmax", softmax, "axis"},
    {NULL, NULL, NULL},
};
