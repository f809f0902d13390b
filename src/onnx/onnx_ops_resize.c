/* onnx_ops_resize.c — ONNX's Resize (and Upsample's nearest/linear form of
 * it): nearest, linear and cubic, every coordinate transformation mode,
 * antialias, exclude_outside, tf_crop_and_resize's extrapolation, axes and
 * keep_aspect_ratio_policy.
 *
 * Resize is separable: along each resized axis, output y is a weighted sum
 * of n input cells, sum_j coeff[y][j] * x[idx[y][j]] (indices clamped to the
 * edge). The sizes and scales are load-time constants, so the tables (idx,
 * coeff) are computed here in double, following ONNX's definition (its
 * reference implementation's per-axis form), and the graph is one GATHER of
 * the O*n cells along the axis (the axis permuted first, a view), a multiply
 * by the coefficients and a SUM over n. Where every row picks one cell with
 * weight 1 (nearest) it is the GATHER alone: exact for every dtype and for
 * infinities. Positions tf_crop_and_resize extrapolates are a select.
 *
 * Invariants: the resized axes' input sizes, scales, sizes and roi must be
 * known at load time; anything not covered is an error naming it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "graph.h"
#include "nn_util.h"
#include "onnx_imp.h"

/* one axis's tables: out rows of n taps */
typedef struct taps {
    int64_t out, n;
    int64_t *idx;  /* out * n, clamped into [0, in) */
    double *coeff; /* out * n */
    uint8_t *extrap; /* out: tf_crop_and_resize positions outside the input */
    int any_extrap, one_hot;
} taps;

typedef struct rs_opts {
    const char *coord, *mode, *nearest;
    double cubic_a, extrap_value;
    int antialias, exclude;
} rs_opts;

/* the coefficients of one output position (ratio in (0, 1]); returns n */
static int64_t coeffs_of(const rs_opts *o, double ratio, double scale, double *c, int64_t cap) {
    if (!strcmp(o->mode, "nearest")) {
        int up;
        if (ratio == floor(ratio)) up = 1;
        else if (!strcmp(o->nearest, "round_prefer_floor")) up = ratio > 0.5;
        else if (!strcmp(o->nearest, "round_prefer_ceil")) up = ratio >= 0.5;
        else if (!strcmp(o->nearest, "floor")) up = 0;
        else up = 1; /* ceil */
        c[0] = !up;
        c[1] = up;
        return 2;
    }
    double A = o->cubic_a;
    if (!o->antialias) {
        if (!strcmp(o->mode, "linear")) {
            c[0] = 1 - ratio;
            c[1] = ratio;
            return 2;
        }
        double r1 = ratio + 1, q = 1 - ratio, q1 = q + 1;
        c[0] = ((A * r1 - 5 * A) * r1 + 8 * A) * r1 - 4 * A;
        c[1] = ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1;
        c[2] = ((A + 2) * q - (A + 3)) * q * q + 1;
        c[3] = ((A * q1 - 5 * A) * q1 + 8 * A) * q1 - 4 * A;
        return 4;
    }
    /* antialias: the filter widened by 1/scale when downsampling */
    double s = scale < 1.0 ? scale : 1.0, sum = 0;
    int lin = !strcmp(o->mode, "linear");
    int64_t start = (int64_t)floor((lin ? -1.0 : -2.0) / s) + 1;
    int64_t n = lin ? 2 - 2 * start : 2 - 2 * start;
    if (n > cap) return -1;
    for (int64_t i = 0; i < n; i++) {
        double x = fabs(((double)(start + i) - ratio) * s), v;
        if (lin) v = 1 - x < 0 ? 0 : 1 - x > 1 ? 1 : 1 - x;
        else if (x <= 1) v = (A + 2) * x * x * x - (A + 3) * x * x + 1;
        else if (x < 2) v = A * x * x * x - 5 * A * x * x + 8 * A * x - 4 * A;
        else v = 0;
        c[i] = v;
        sum += v;
    }
    for (int64_t i = 0; i < n; i++) c[i] /= sum;
    return n;
}

/* the source coordinate of output position y; *extrap when outside (tf_crop) */
static double source_of(const rs_opts *o, double y, double scale, int64_t in, int64_t out_int, const double *roi,
                        int *extrap) {
    double out = scale * (double)in, x;
    *extrap = 0;
    if (!strcmp(o->coord, "align_corners")) x = out == 1 ? 0 : y * (double)(in - 1) / (out - 1);
    else if (!strcmp(o->coord, "asymmetric")) x = y / scale;
    else if (!strcmp(o->coord, "tf_crop_and_resize")) {
        x = out == 1 ? (roi[1] - roi[0]) * (double)(in - 1) / 2 : y * (roi[1] - roi[0]) * (double)(in - 1) / (out - 1);
        x += roi[0] * (double)(in - 1);
        *extrap = x < 0 || x > (double)(in - 1);
    } else if (!strcmp(o->coord, "pytorch_half_pixel")) x = out == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
    else if (!strcmp(o->coord, "half_pixel")) x = (y + 0.5) / scale - 0.5;
    else { /* half_pixel_symmetric */
        double adj = (double)out_int / out, center = (double)in / 2;
        x = center * (1 - adj) + (y + 0.5) / scale - 0.5;
    }
    return x;
}

#define MAX_TAPS 64

/* the tables of one axis (ONNX's per-axis definition, see the top) */
static int make_taps(imp_ctx *c, const rs_opts *o, int64_t in, int64_t out, double scale, const double *roi, taps *t) {
    memset(t, 0, sizeof *t);
    t->out = out;
    double cf[MAX_TAPS];
    for (int64_t y = 0; y < out; y++) {
        int ex;
        double x = source_of(o, (double)y, scale, in, out, roi, &ex);
        double xi = floor(x), ratio = x == xi ? 1.0 : x - xi;
        int64_t n = coeffs_of(o, ratio, scale, cf, MAX_TAPS);
        if (n < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Resize: antialias filter wider than %d taps", MAX_TAPS);
        if (y == 0) {
            t->n = n;
            t->idx = kiln_xmalloc((size_t)(out * n) * sizeof *t->idx);
            t->coeff = kiln_xmalloc((size_t)(out * n) * sizeof *t->coeff);
            t->extrap = kiln_xcalloc((size_t)out + 1, 1);
            t->one_hot = 1;
        }
        /* the n cells nearest x, ties to the smaller (edge-padded) */
        int64_t pad = (n + 1) / 2;
        double xp = x + (double)pad, pp = floor(xp), frac = xp - pp;
        int64_t off = n % 2 == 0 ? (frac == 0 ? -(n / 2) : -(n / 2) + 1) : (frac <= 0.5 ? -((n - 1) / 2) : -((n - 1) / 2) + 1);
        int64_t start = (int64_t)pp + off - pad;
        double sum = 0;
        for (int64_t j = 0; j < n; j++) {
            int64_t i = start + j;
            double w = cf[j];
            if (o->exclude && (i < 0 || i >= in)) w = 0;
            sum += w;
            t->idx[y * n + j] = i < 0 ? 0 : i >= in ? in - 1 : i;
            t->coeff[y * n + j] = w;
        }
        if (o->exclude && sum != 0)
            for (int64_t j = 0; j < n; j++) t->coeff[y * n + j] /= sum;
        int ones = 0, zeros = 0;
        for (int64_t j = 0; j < n; j++) {
            ones += t->coeff[y * n + j] == 1.0;
            zeros += t->coeff[y * n + j] == 0.0;
        }
        t->one_hot &= ones == 1 && zeros == n - 1;
        t->extrap[y] = (uint8_t)ex;
        t->any_extrap |= ex;
    }
    return 1;
}

static void free_taps(taps *t) {
    free(t->idx);
    free(t->coeff);
    free(t->extrap);
}

/* x resized along axis ax by the tables */
static kiln_tensor resize_axis(imp_ctx *c, kiln_tensor x, int ax, const taps *t, double ev, int onnx_dt) {
    kiln_graph *g = c->g;
    int r = kiln_ndim(g, x), perm[KILN_MAX_DIMS];
    perm[0] = ax;
    for (int d = 0, j = 1; d < r; d++)
        if (d != ax) perm[j++] = d;
    kiln_tensor xt = ax ? kiln_permute(g, x, perm) : x; /* (in, rest...) */
    int64_t n = t->one_hot ? 1 : t->n, len = t->out * n;
    ox_tensor *ik = imp_new_const(c, OX_INT64, 1, &len);
    if (!ik) return KILN_NONE;
    for (int64_t y = 0; y < t->out; y++)
        for (int64_t j = 0, k = 0; j < t->n; j++) {
            if (t->one_hot && t->coeff[y * t->n + j] != 1.0) continue;
            ((int64_t *)ik->data)[y * n + k++] = t->idx[y * t->n + j];
        }
    kiln_tensor y = kiln_gather(g, xt, imp_tensor_of(c, ik)); /* (out * n, rest...) */
    kiln_sym dims[KILN_MAX_DIMS];
    if (!t->one_hot) {
        dims[0] = kiln_sym_int(g, t->out);
        dims[1] = kiln_sym_int(g, n);
        for (int d = 1; d < r; d++) dims[1 + d] = kiln_dim(g, xt, d);
        y = kiln_reshape(g, y, r + 1, dims); /* (out, n, rest...) */
        int64_t cd[KILN_MAX_DIMS];
        cd[0] = t->out;
        cd[1] = n;
        for (int d = 2; d <= r; d++) cd[d] = 1;
        ox_tensor *ck = imp_new_const(c, OX_FLOAT, r + 1, cd);
        if (!ck) return KILN_NONE;
        for (int64_t i = 0; i < len; i++) ((float *)ck->data)[i] = (float)t->coeff[i];
        y = kiln_sum(g, kiln_mul(g, y, imp_tensor_of(c, ck)), 1); /* (out, rest...) */
    }
    if (t->any_extrap) {
        int64_t cd[KILN_MAX_DIMS];
        cd[0] = t->out;
        for (int d = 1; d < r; d++) cd[d] = 1;
        ox_tensor *mk = imp_new_const(c, OX_FLOAT, r, cd), *vk = imp_new_const(c, OX_FLOAT, 0, NULL);
        if (!mk || !vk) return KILN_NONE;
        for (int64_t i = 0; i < t->out; i++) ((float *)mk->data)[i] = t->extrap[i];
        ((float *)vk->data)[0] = (float)ev;
        kiln_tensor v = imp_tensor_of(c, vk);
        if (onnx_dt != OX_FLOAT) v = kiln_cast(g, v, kiln_tensor_dtype(g, y));
        y = imp_where_exact(c, imp_tensor_of(c, mk), v, y);
    }
    if (!ax) return y;
    int back[KILN_MAX_DIMS];
    for (int d = 0; d < r; d++) back[perm[d]] = d;
    return kiln_permute(g, y, back);
}

/* scales or sizes (and roi) into per-axis scale and output size, as ONNX
 * defines them; returns 0 after an error */
static int plan(imp_ctx *c, const ox_node *n, int r, const int64_t *in, const int64_t *axes, int naxes, double *scale,
                int64_t *out, double *roi) {
    ox_tensor *sc = imp_has(n, 2) ? imp_const(c, n, 2) : NULL;
    ox_tensor *sz = imp_has(n, 3) ? imp_const(c, n, 3) : NULL;
    ox_tensor *ro = imp_has(n, 1) ? imp_const(c, n, 1) : NULL;
    for (int i = 1; i <= 3; i++)
        if (imp_has(n, i) && !(i == 1 ? ro : i == 2 ? sc : sz))
            return imp_fail(c, KILN_ERR_UNSUPPORTED, "Resize: input '%s' (roi, scales, sizes) must be known at load time",
                            n->inputs[i]);
    if (sc && sc->n == 0) sc = NULL;
    if (sz && sz->n == 0) sz = NULL;
    if (!sc == !sz) return imp_fail(c, KILN_ERR_INVALID, "Resize needs exactly one of scales and sizes");
    const ox_tensor *given = sc ? sc : sz;
    if (given->n != naxes) return imp_fail(c, KILN_ERR_INVALID, "Resize: %lld scales/sizes for %d axes", (long long)given->n, naxes);
    for (int d = 0; d < r; d++) {
        scale[d] = 1.0;
        out[d] = in[d];
        roi[d] = 0.0;
        roi[r + d] = 1.0;
    }
    if (ro && ro->n > 0) {
        if (ro->n != 2 * naxes) return imp_fail(c, KILN_ERR_INVALID, "Resize: roi of %lld values", (long long)ro->n);
        for (int i = 0; i < naxes; i++) {
            roi[axes[i]] = ox_elem_f(ro->dtype, ro->data, i);
            roi[r + axes[i]] = ox_elem_f(ro->dtype, ro->data, naxes + i);
        }
    }
    if (sc) {
        for (int i = 0; i < naxes; i++) {
            double s = (double)(float)ox_elem_f(sc->dtype, sc->data, i);
            if (!(s > 0)) return imp_fail(c, KILN_ERR_INVALID, "Resize: scale %g", s);
            scale[axes[i]] = s;
            out[axes[i]] = (int64_t)(s * (double)in[axes[i]]);
        }
        return 1;
    }
    for (int i = 0; i < naxes; i++) {
        int64_t o = ox_elem_i(sz->dtype, sz->data, i);
        if (o < 1) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Resize to size %lld", (long long)o);
        out[axes[i]] = o;
        scale[axes[i]] = (double)o / (double)in[axes[i]];
    }
    const char *policy = imp_attr_s(n, "keep_aspect_ratio_policy", "stretch");
    if (!strcmp(policy, "stretch")) return 1;
    int larger = !strcmp(policy, "not_larger");
    if (!larger && strcmp(policy, "not_smaller"))
        return imp_fail(c, KILN_ERR_UNSUPPORTED, "Resize: keep_aspect_ratio_policy '%s'", policy);
    double s = scale[axes[0]];
    for (int i = 1; i < naxes; i++) s = larger ? fmin(s, scale[axes[i]]) : fmax(s, scale[axes[i]]);
    for (int i = 0; i < naxes; i++) {
        scale[axes[i]] = s;
        out[axes[i]] = (int64_t)(s * (double)in[axes[i]] + 0.5);
    }
    return 1;
}

static int resize(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    kiln_graph *g = c->g;
    int r = kiln_ndim(g, x), dt = imp_in_dtype(c, n, 0);
    rs_opts o;
    o.coord = imp_attr_s(n, "coordinate_transformation_mode", "half_pixel");
    o.mode = imp_attr_s(n, "mode", "nearest");
    o.nearest = imp_attr_s(n, "nearest_mode", "round_prefer_floor");
    o.cubic_a = imp_attr_f(n, "cubic_coeff_a", -0.75);
    o.extrap_value = imp_attr_f(n, "extrapolation_value", 0.0);
    o.antialias = (int)imp_attr_i(n, "antialias", 0);
    o.exclude = (int)imp_attr_i(n, "exclude_outside", 0);
    static const char *coords[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                   "asymmetric", "tf_crop_and_resize"};
    static const char *nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    int ok = 0;
    for (size_t i = 0; i < sizeof coords / sizeof *coords; i++) ok |= !strcmp(o.coord, coords[i]);
    if (!ok) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Resize: coordinate_transformation_mode '%s'", o.coord);
    ok = 0;
    for (size_t i = 0; i < sizeof nearests / sizeof *nearests; i++) ok |= !strcmp(o.nearest, nearests[i]);
    if (!ok) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Resize: nearest_mode '%s'", o.nearest);
    int nearest = !strcmp(o.mode, "nearest");
    if (!nearest && strcmp(o.mode, "linear") && strcmp(o.mode, "cubic"))
        return imp_fail(c, KILN_ERR_UNSUPPORTED, "Resize: mode '%s'", o.mode);
    if (nearest && o.antialias) return imp_fail(c, KILN_ERR_INVALID, "Resize: antialias with mode nearest");
    int64_t axes[KILN_MAX_DIMS], in[KILN_MAX_DIMS], out[KILN_MAX_DIMS];
    double scale[KILN_MAX_DIMS], roi[2 * KILN_MAX_DIMS];
    const int64_t *aa;
    int naxes = imp_attr_ints(n, "axes", &aa);
    if (naxes > r) return imp_fail(c, KILN_ERR_INVALID, "Resize: %d axes for rank %d", naxes, r);
    for (int i = 0; i < (naxes ? naxes : r); i++) {
        int a = naxes ? imp_axis(c, n, aa[i], r) : i;
        if (a < 0) return 0;
        axes[i] = a;
    }
    if (!naxes) naxes = r;
    for (int d = 0; d < r; d++) in[d] = imp_dim_const(c, x, d);
    for (int i = 0; i < naxes; i++)
        if (in[axes[i]] < 1) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Resize along a symbolic or empty axis");
    if (!plan(c, n, r, in, axes, naxes, scale, out, roi)) return 0;
    kiln_tensor y = x;
    int weighted_dt = dt == OX_FLOAT16 || dt == OX_BFLOAT16; /* interpolated in f32, rounded once */
    for (int i = 0; i < naxes; i++) {
        int a = (int)axes[i];
        int tf = !strcmp(o.coord, "tf_crop_and_resize");
        if (fabs(scale[a] - 1.0) < 1e-9 && out[a] == in[a] && (!tf || (roi[a] == 0 && roi[r + a] == 1))) continue;
        taps t;
        double ra[2] = {roi[a], roi[r + a]}; /* this axis's [start, end] */
        if (!make_taps(c, &o, in[a], out[a], scale[a], ra, &t)) return 0;
        if (!t.one_hot || t.any_extrap) {
            if (!imp_is_float_onnx(dt)) {
                free_taps(&t);
                return imp_fail(c, KILN_ERR_UNSUPPORTED, "Resize: interpolating %s", ox_dtype_name(dt));
            }
            if (weighted_dt && kiln_tensor_dtype(g, y) != KILN_F32) y = kiln_cast(g, y, KILN_F32);
        }
        y = resize_axis(c, y, a, &t, o.extrap_value, kiln_tensor_dtype(g, y) == KILN_F32 ? OX_FLOAT : dt);
        free_taps(&t);
        if (!imp_check(c, y)) return 0;
    }
    if (kiln_tensor_dtype(g, y) != kiln_tensor_dtype(g, x)) y = kiln_cast(g, y, kiln_tensor_dtype(g, x));
    return imp_set(c, n, 0, y, dt);
}

const imp_op imp_ops_resize[] = {
    {"Resize", resize,
     "antialias axes coordinate_transformation_mode cubic_coeff_a exclude_outside extrapolation_value "
     "keep_aspect_ratio_policy mode nearest_mode"},
    {NULL, NULL, NULL},
};
