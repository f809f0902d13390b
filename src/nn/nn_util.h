/* nn_util.h — small static helpers shared by the src/nn/ files.
 *
 * Everything in src/nn/ builds primitive subgraphs through the public builder
 * API of kiln.h only; the one internal call is graph_error(), used to report
 * misuse that no primitive would catch (a bad axis, mismatched inner sizes).
 *
 * Invariants:
 *  - A helper given KILN_NONE returns KILN_NONE (the primitives do that too),
 *    so chains of calls stop at the first error without extra checks.
 *  - Constants are made in the dtype of the tensor they combine with, because
 *    binary primitives require equal dtypes.
 */
#ifndef KILN_NN_UTIL_H
#define KILN_NN_UTIL_H

#include <math.h>
#include <stdint.h>

#include "kiln.h"
#include "graph.h" /* graph_error only */

#define NN_LOG2E 1.4426950408889634074
#define NN_LN2 0.69314718055994530942
#define NN_PI 3.14159265358979323846

/* 1 if x names a tensor of g; otherwise sets an error naming fn (a no-op when
 * an earlier error already explains why x is KILN_NONE) */
static inline int nn_ok(kiln_graph *g, const char *fn, kiln_tensor x) {
    if (!g) return 0;
    if (kiln_ndim(g, x) >= 0) return 1;
    graph_error(g, KILN_ERR_INVALID, "%s: invalid tensor id %d", fn, (int)x);
    return 0;
}

static inline kiln_dtype nn_dtype(const kiln_graph *g, kiln_tensor x) { return kiln_tensor_dtype(g, x); }

/* a float input is required: the primitives EXP2/LOG2/... only take floats */
static inline int nn_float(kiln_graph *g, const char *fn, kiln_tensor x) {
    if (!nn_ok(g, fn, x)) return 0;
    kiln_dtype t = nn_dtype(g, x);
    if (kiln_dtype_is_float(t)) return 1;
    graph_error(g, KILN_ERR_DTYPE, "%s: dtype %s is not a float dtype (f32, f16, bf16)", fn, kiln_dtype_name(t));
    return 0;
}

/* axis in [-ndim, ndim) -> [0, ndim), or -1 with an error */
static inline int nn_axis(kiln_graph *g, const char *fn, kiln_tensor x, int axis) {
    int n = kiln_ndim(g, x);
    int a = axis < 0 ? axis + n : axis;
    if (a < 0 || a >= n) {
        graph_error(g, KILN_ERR_INVALID, "%s: axis %d out of range for %d dimensions", fn, axis, n);
        return -1;
    }
    return a;
}

/* scalar constant in x's dtype */
static inline kiln_tensor nn_c(kiln_graph *g, double v, kiln_tensor like) {
    if (kiln_ndim(g, like) < 0) return KILN_NONE;
    return kiln_const(g, v, nn_dtype(g, like));
}

static inline kiln_tensor nn_scale(kiln_graph *g, kiln_tensor x, double v) { return kiln_mul(g, x, nn_c(g, v, x)); }
static inline kiln_tensor nn_shift(kiln_graph *g, kiln_tensor x, double v) { return kiln_add(g, x, nn_c(g, v, x)); }

static inline int nn_const_dim(const kiln_graph *g, kiln_sym s, int64_t *v) { return kiln_sym_const_value(g, s, v); }

/* the largest finite value of a float dtype: masks use its negative, so that
 * exp gives exactly 0 without ever forming inf - inf */
static inline double nn_max_finite(kiln_dtype t) {
    switch (t) {
    case KILN_F16: return 65504.0;
    case KILN_BF16: return 3.3895313892515355e38;
    default: return 3.4028234663852886e38;
    }
}

/* the runtime value of the symbolic size s as a 0-d tensor of dtype t: a
 * constant when s is one, else element s of an iota over (s + 1) — an index
 * computed in i32 so that large sizes stay exact before the cast */
static inline kiln_tensor nn_sym_value(kiln_graph *g, kiln_sym s, kiln_dtype t) {
    int64_t v;
    if (nn_const_dim(g, s, &v)) return kiln_const(g, (double)v, t);
    kiln_sym one = kiln_sym_int(g, 1);
    kiln_sym n1 = kiln_sym_add(g, s, one);
    kiln_tensor io = kiln_iota(g, KILN_I32, 1, &n1, 0);
    io = kiln_slice(g, io, 0, s, n1, 1);
    io = kiln_reshape(g, io, 0, NULL);
    return kiln_cast(g, io, t);
}

/* (1 - c) for a 0/1 tensor c */
static inline kiln_tensor nn_not01(kiln_graph *g, kiln_tensor c) {
    return kiln_add(g, nn_c(g, 1.0, c), nn_scale(g, c, -1.0));
}

/* c ? a : b for c in {0, 1} (dtype of a and b), by arithmetic: c*a + (1-c)*b
 * is exact when a and b are finite (x*1 = x, x*0 = 0, x + 0 = x). Only for
 * values known to be finite; kiln_where handles infinities. */
static inline kiln_tensor nn_select01(kiln_graph *g, kiln_tensor c, kiln_tensor a, kiln_tensor b) {
    return kiln_add(g, kiln_mul(g, c, a), kiln_mul(g, nn_not01(g, c), b));
}

/* reduce-keepdim helper: put back the removed axis as size 1 so the result
 * broadcasts against the reduced tensor */
static inline kiln_tensor nn_keep(kiln_graph *g, kiln_tensor r, int axis) { return kiln_unsqueeze(g, r, axis); }

/* a and b broadcast (numpy rules) to one common shape, by expand views only */
static inline int nn_broadcast(kiln_graph *g, const char *fn, kiln_tensor *a, kiln_tensor *b) {
    if (!nn_ok(g, fn, *a) || !nn_ok(g, fn, *b)) return 0;
    int na = kiln_ndim(g, *a), nb = kiln_ndim(g, *b);
    int n = na > nb ? na : nb;
    kiln_sym one = kiln_sym_int(g, 1), out[KILN_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        kiln_sym da = i - (n - na) >= 0 ? kiln_dim(g, *a, i - (n - na)) : one;
        kiln_sym db = i - (n - nb) >= 0 ? kiln_dim(g, *b, i - (n - nb)) : one;
        if (da == db || db == one) out[i] = da;
        else if (da == one) out[i] = db;
        else {
            graph_error(g, KILN_ERR_SHAPE, "%s: operand shapes do not broadcast (axis %d)", fn, i);
            return 0;
        }
    }
    kiln_tensor *ts[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        kiln_tensor t = *ts[k];
        while (t != KILN_NONE && kiln_ndim(g, t) < n) t = kiln_unsqueeze(g, t, 0);
        int same = 1;
        for (int i = 0; t != KILN_NONE && i < n; i++) same &= kiln_dim(g, t, i) == out[i];
        if (!same) t = kiln_expand(g, t, n, out);
        if (t == KILN_NONE) return 0;
        *ts[k] = t;
    }
    return 1;
}

/* [a, b] stacked along a new last axis (size 2) after broadcasting: two pads
 * and an add, and x + 0 is exact for every x, infinities included */
static inline kiln_tensor nn_stack_last(kiln_graph *g, const char *fn, kiln_tensor a, kiln_tensor b) {
    if (!nn_broadcast(g, fn, &a, &b)) return KILN_NONE;
    int n = kiln_ndim(g, a);
    kiln_sym zero = kiln_sym_int(g, 0), one = kiln_sym_int(g, 1);
    kiln_tensor pa = kiln_pad(g, kiln_unsqueeze(g, a, n), n, zero, one);
    kiln_tensor pb = kiln_pad(g, kiln_unsqueeze(g, b, n), n, one, zero);
    return kiln_add(g, pa, pb);
}

/* weight/bias operands may come in another float dtype than the activations
 * (GGUF keeps norms in f32): convert them to x's dtype */
static inline kiln_tensor nn_as(kiln_graph *g, kiln_tensor w, kiln_tensor x) {
    if (w == KILN_NONE || kiln_ndim(g, x) < 0) return w;
    return kiln_cast(g, w, nn_dtype(g, x));
}

/* the attention of n rows over their own sequences (attention_rows.c):
 * q (n, hq, d), kt (n, kv, hkv, d), vt (n, kv, hkv, dv) with v the caller's
 * values (for dv), row i over its keys 0..pos[i] (the last `window` only
 * when window > 0); (n, hq, dv) */
kiln_tensor nn_attend_rows(kiln_graph *g, kiln_tensor q, kiln_tensor kt, kiln_tensor vt, kiln_tensor v, kiln_tensor pos,
                           kiln_sym hq, kiln_sym hkv, kiln_sym grp, kiln_sym d, kiln_sym kv, double scale,
                           int64_t window);

#endif
