/* view.c — movement views: layered strided maps with box masks (see view.h).
 *
 * Every movement op rewrites only the outermost layer when it can; a layer is
 * pushed only when the result is not a strided box of the current one (a
 * reshape that mixes axes whose strides do not line up, or a window over a
 * masked axis). All arithmetic goes through the sym smart constructors, and
 * "are these equal?" is asked by comparing canonical sym ids, so every
 * decision taken here holds for all values of the shape variables, not just
 * the ones a test happens to try. A comparison that fails to prove equality
 * only costs an extra layer, never correctness.
 *
 * Invariants kept by this file (on top of view.h's):
 *  - mask_lo/mask_hi are filled for every dim of every layer it produces, also
 *    when masked == 0 (then they are [0, shape)); layers built elsewhere with
 *    masked == 0 and garbage masks are filled on entry.
 *  - masks are clamped: 0 <= lo and hi <= shape whenever that is provable, so
 *    an axis whose valid range is all of it has lo == 0 and hi == shape as ids
 *    ("entire"), and masked == 1 iff some axis is not entire.
 *  - for every position valid in a layer, its linear index lies in
 *    [0, numel(layer below)); positions that are not valid may map anywhere,
 *    which is why unravelling never needs a modulo on the leading axis.
 */
#include "view.h"

#include <stdlib.h>
#include <string.h>

#include "base.h"

/* ---- small sym helpers ----------------------------------------------------- */

static sym_id k0(sym_pool *p) { return sym_const(p, 0); }
static sym_id k1(sym_pool *p) { return sym_const(p, 1); }

static int is_const_eq(const sym_pool *p, sym_id s, int64_t v) {
    int64_t c;
    return sym_is_const(p, s, &c) && c == v;
}

/* max/min that avoid a MIN/MAX node whenever the order is provable, so masks
 * stay as plain as the bounds allow */
static sym_id smax(sym_pool *p, sym_id a, sym_id b) {
    if (a == b) return a;
    if (sym_prove_nonneg(p, sym_sub(p, a, b))) return a;
    if (sym_prove_nonneg(p, sym_sub(p, b, a))) return b;
    return sym_max(p, a, b);
}

static sym_id smin(sym_pool *p, sym_id a, sym_id b) {
    if (a == b) return a;
    if (sym_prove_nonneg(p, sym_sub(p, a, b))) return b;
    if (sym_prove_nonneg(p, sym_sub(p, b, a))) return a;
    return sym_min(p, a, b);
}

/* ceil(a / k) for a constant k >= 1, as floor((a + k - 1) / k) */
static sym_id sceil_div(sym_pool *p, sym_id a, int64_t k) {
    if (k == 1) return a;
    return sym_div(p, sym_add(p, a, sym_const(p, k - 1)), sym_const(p, k));
}

/* Deciding "s == a * b" on a const pool, where no product node may be built:
 * both sides are expanded into polynomials over the pool's atoms (any node
 * that is not CONST, ADD or MUL) and compared term by term. Equal polynomials
 * are equal values, so a 1 is always right; a 0 may just mean "too big to
 * expand here". Coefficients wrap modulo 2^64 like sym.c's ring arithmetic,
 * which keeps ring identities exact. */
#define POLY_TERMS 24
#define POLY_ATOMS 8
typedef struct poly_term {
    uint64_t coef;
    int n;
    sym_id atom[POLY_ATOMS]; /* sorted */
} poly_term;
typedef struct poly {
    int n;
    poly_term t[POLY_TERMS];
} poly;

static int cmp_id(const void *a, const void *b) {
    sym_id x = *(const sym_id *)a, y = *(const sym_id *)b;
    return (x > y) - (x < y);
}

static int cmp_term(const void *a, const void *b) {
    const poly_term *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    for (int i = 0; i < x->n; i++)
        if (x->atom[i] != y->atom[i]) return x->atom[i] < y->atom[i] ? -1 : 1;
    return 0;
}

/* sorts terms and merges equal monomials, dropping zero coefficients */
static void poly_norm(poly *q) {
    for (int i = 0; i < q->n; i++) qsort(q->t[i].atom, (size_t)q->t[i].n, sizeof(sym_id), cmp_id);
    qsort(q->t, (size_t)q->n, sizeof q->t[0], cmp_term);
    int w = 0;
    for (int i = 0; i < q->n; i++) {
        if (w > 0 && cmp_term(&q->t[w - 1], &q->t[i]) == 0) q->t[w - 1].coef += q->t[i].coef;
        else q->t[w++] = q->t[i];
    }
    int k = 0;
    for (int i = 0; i < w; i++)
        if (q->t[i].coef != 0) q->t[k++] = q->t[i];
    q->n = k;
}

static int poly_push(poly *q, uint64_t coef, int n, const sym_id *atoms) {
    if (q->n == POLY_TERMS || n > POLY_ATOMS) return 0;
    poly_term *t = &q->t[q->n++];
    t->coef = coef;
    t->n = n;
    if (n) memcpy(t->atom, atoms, (size_t)n * sizeof(sym_id));
    return 1;
}

/* appends x * y to out */
static int poly_mul_into(poly *out, const poly *x, const poly *y) {
    for (int i = 0; i < x->n; i++)
        for (int j = 0; j < y->n; j++) {
            sym_id at[2 * POLY_ATOMS];
            int n = x->t[i].n + y->t[j].n;
            if (n > POLY_ATOMS) return 0;
            memcpy(at, x->t[i].atom, (size_t)x->t[i].n * sizeof(sym_id));
            memcpy(at + x->t[i].n, y->t[j].atom, (size_t)y->t[j].n * sizeof(sym_id));
            if (!poly_push(out, x->t[i].coef * y->t[j].coef, n, at)) return 0;
        }
    return 1;
}

/* appends the terms of s to q (not normalised); sums recurse without
 * temporaries, only products need their two factors expanded apart */
static int poly_acc(const sym_pool *p, sym_id s, poly *q, int depth) {
    const sym_node *nd = sym_get(p, s);
    if (depth > 256) return 0;
    switch (nd->kind) {
    case SYM_CONST: return poly_push(q, (uint64_t)nd->c, 0, NULL);
    case SYM_ADD: return poly_acc(p, nd->a, q, depth + 1) && poly_acc(p, nd->b, q, depth + 1);
    case SYM_MUL: {
        poly x, y;
        x.n = y.n = 0;
        if (!poly_acc(p, nd->a, &x, depth + 1) || !poly_acc(p, nd->b, &y, depth + 1)) return 0;
        poly_norm(&x);
        poly_norm(&y);
        return poly_mul_into(q, &x, &y);
    }
    default: return poly_push(q, 1, 1, &s);
    }
}

/* 1 if s is provably a * b, without creating nodes */
static int is_product_const_pool(const sym_pool *p, sym_id s, sym_id a, sym_id b) {
    poly x, y, z, ab;
    x.n = y.n = z.n = ab.n = 0;
    if (!poly_acc(p, s, &x, 0) || !poly_acc(p, a, &y, 0) || !poly_acc(p, b, &z, 0)) return 0;
    poly_norm(&x);
    poly_norm(&y);
    poly_norm(&z);
    if (!poly_mul_into(&ab, &y, &z)) return 0;
    poly_norm(&ab);
    if (ab.n != x.n) return 0;
    for (int i = 0; i < x.n; i++)
        if (cmp_term(&x.t[i], &ab.t[i]) != 0 || x.t[i].coef != ab.t[i].coef) return 0;
    return 1;
}

/* ---- layer helpers ----------------------------------------------------------- */

static void layer_fill_masks(view_layer *L, sym_pool *p) {
    if (L->masked) return;
    for (int d = 0; d < L->ndim; d++) {
        L->mask_lo[d] = k0(p);
        L->mask_hi[d] = L->shape[d];
    }
}

static int dim_entire(const view_layer *L, const sym_pool *p, int d) {
    if (!L->masked) return 1;
    return is_const_eq(p, L->mask_lo[d], 0) && L->mask_hi[d] == L->shape[d];
}

/* canonicalise masks that provably cover their axis and recompute `masked` */
static void layer_normalize(view_layer *L, sym_pool *p) {
    int any = 0;
    for (int d = 0; d < L->ndim; d++) {
        sym_id lo = L->mask_lo[d], hi = L->mask_hi[d];
        if (!is_const_eq(p, lo, 0) && sym_prove_nonneg(p, sym_neg(p, lo))) lo = k0(p);
        if (hi != L->shape[d] && sym_prove_nonneg(p, sym_sub(p, hi, L->shape[d]))) hi = L->shape[d];
        L->mask_lo[d] = lo;
        L->mask_hi[d] = hi;
        if (!is_const_eq(p, lo, 0) || hi != L->shape[d]) any = 1;
    }
    L->masked = any;
}

static void layer_identity(view_layer *L, sym_pool *p, int ndim, const sym_id *shape, sym_id offset) {
    KILN_ASSERT(ndim >= 0 && ndim <= KILN_MAX_DIMS);
    L->ndim = ndim;
    L->offset = offset;
    L->masked = 0;
    sym_id acc = k1(p);
    for (int d = ndim - 1; d >= 0; d--) {
        L->shape[d] = shape[d];
        L->stride[d] = acc;
        L->mask_lo[d] = k0(p);
        L->mask_hi[d] = shape[d];
        acc = sym_mul(p, acc, shape[d]);
    }
}

/* 1 if the layer is the row-major layout of its shape (any offset), unmasked.
 * Size-1 axes may carry any stride: they are only ever indexed at 0. With a
 * mutable pool products are built and compared by id; with a const one they
 * are compared as expanded polynomials. */
static int layer_rowmajor(const view_layer *L, const sym_pool *cp, sym_pool *mp) {
    if (L->masked) {
        for (int d = 0; d < L->ndim; d++)
            if (!dim_entire(L, cp, d)) return 0;
    }
    int next = -1; /* the next non-size-1 axis to the right */
    for (int d = L->ndim - 1; d >= 0; d--) {
        if (is_const_eq(cp, L->shape[d], 1)) continue;
        if (next < 0) {
            if (!is_const_eq(cp, L->stride[d], 1)) return 0;
        } else if (mp) {
            if (L->stride[d] != sym_mul(mp, L->stride[next], L->shape[next])) return 0;
        } else {
            if (!is_product_const_pool(cp, L->stride[d], L->stride[next], L->shape[next])) return 0;
        }
        next = d;
    }
    return 1;
}

/* copies the input into a scratch view with masks filled, so ops may write
 * out before having read all of in (out may alias in) */
static void load(view *v, const view *in, sym_pool *p) {
    KILN_ASSERT(in->nlayers >= 1 && in->nlayers <= VIEW_MAX_LAYERS);
    *v = *in;
    for (int l = 0; l < v->nlayers; l++) layer_fill_masks(&v->layer[l], p);
}

static view_layer *top(view *v) { return &v->layer[v->nlayers - 1]; }

/* pushes an identity layer over the current outer shape; -1 if full */
static int push_identity(view *v, sym_pool *p, int ndim, const sym_id *shape) {
    if (v->nlayers >= VIEW_MAX_LAYERS) return -1;
    sym_id shp[KILN_MAX_DIMS];
    memcpy(shp, shape, (size_t)ndim * sizeof shp[0]);
    layer_identity(&v->layer[v->nlayers], p, ndim, shp, k0(p));
    v->nlayers++;
    return 0;
}

/* ---- basics ------------------------------------------------------------------ */

void view_identity(view *out, sym_pool *p, int ndim, const sym_id *shape) {
    sym_id shp[KILN_MAX_DIMS];
    KILN_ASSERT(ndim >= 0 && ndim <= KILN_MAX_DIMS);
    memcpy(shp, shape, (size_t)ndim * sizeof shp[0]);
    memset(out, 0, sizeof *out);
    out->nlayers = 1;
    layer_identity(&out->layer[0], p, ndim, shp, k0(p));
}

int view_ndim(const view *v) { return v->layer[v->nlayers - 1].ndim; }

const sym_id *view_shape(const view *v) { return v->layer[v->nlayers - 1].shape; }

int view_is_identity(const view *v, const sym_pool *p) {
    if (v->nlayers != 1) return 0;
    const view_layer *L = &v->layer[0];
    return is_const_eq(p, L->offset, 0) && layer_rowmajor(L, p, NULL);
}

/* ---- reshape ----------------------------------------------------------------- */

/* Re-expresses the layer L with a new shape by strides alone, or returns -1.
 * Size-1 axes are dropped on both sides; the rest is cut into groups at the
 * positions where the prefix products of both shapes agree (canonical ids).
 * A group of one input axis and one output axis keeps its stride and mask; any
 * other group needs its input axes unmasked and contiguous among themselves,
 * and then the output axes get row-major strides scaled by the group's
 * innermost stride. */
static int reshape_strides(view_layer *L, sym_pool *p, int ndim, const sym_id *shape) {
    int ia[KILN_MAX_DIMS], ib[KILN_MAX_DIMS], na = 0, nb = 0;
    for (int d = 0; d < L->ndim; d++) {
        if (is_const_eq(p, L->shape[d], 1)) {
            if (!dim_entire(L, p, d)) return -1;
        } else {
            ia[na++] = d;
        }
    }
    for (int d = 0; d < ndim; d++)
        if (!is_const_eq(p, shape[d], 1)) ib[nb++] = d;

    sym_id pa[KILN_MAX_DIMS + 1], pb[KILN_MAX_DIMS + 1];
    pa[0] = pb[0] = k1(p);
    for (int k = 0; k < na; k++) pa[k + 1] = sym_mul(p, pa[k], L->shape[ia[k]]);
    for (int k = 0; k < nb; k++) pb[k + 1] = sym_mul(p, pb[k], shape[ib[k]]);
    if (pa[na] != pb[nb]) return -1;

    view_layer o;
    memset(&o, 0, sizeof o);
    o.ndim = ndim;
    o.offset = L->offset;
    for (int d = 0; d < ndim; d++) {
        o.shape[d] = shape[d];
        o.stride[d] = k0(p);
        o.mask_lo[d] = k0(p);
        o.mask_hi[d] = shape[d];
    }
    o.masked = 1; /* so that copied masks count; layer_normalize settles it */

    int a0 = 0, b0 = 0;
    while (a0 < na || b0 < nb) {
        int a1 = -1, b1 = -1;
        for (int a = a0 + 1; a <= na && a1 < 0; a++)
            for (int b = b0 + 1; b <= nb; b++)
                if (pa[a] == pb[b]) {
                    a1 = a;
                    b1 = b;
                    break;
                }
        if (a1 < 0) return -1;
        if (a1 - a0 == 1 && b1 - b0 == 1) {
            int din = ia[a0], dout = ib[b0];
            o.stride[dout] = L->stride[din];
            if (!dim_entire(L, p, din)) {
                o.mask_lo[dout] = L->mask_lo[din];
                o.mask_hi[dout] = L->mask_hi[din];
            }
        } else {
            for (int a = a0; a < a1; a++) {
                if (!dim_entire(L, p, ia[a])) return -1;
                if (a + 1 < a1 &&
                    L->stride[ia[a]] != sym_mul(p, L->stride[ia[a + 1]], L->shape[ia[a + 1]]))
                    return -1;
            }
            sym_id acc = L->stride[ia[a1 - 1]];
            for (int b = b1 - 1; b >= b0; b--) {
                o.stride[ib[b]] = acc;
                acc = sym_mul(p, acc, shape[ib[b]]);
            }
        }
        a0 = a1;
        b0 = b1;
    }
    layer_normalize(&o, p);
    *L = o;
    return 0;
}

int view_reshape(view *out, const view *in, sym_pool *p, int ndim, const sym_id *shape) {
    view v;
    sym_id shp[KILN_MAX_DIMS];
    KILN_ASSERT(ndim >= 0 && ndim <= KILN_MAX_DIMS);
    memcpy(shp, shape, (size_t)ndim * sizeof shp[0]); /* shape may point into in */
    load(&v, in, p);
    /* an identity top layer above another layer adds nothing: reshape the
     * layer below instead, which may undo an earlier push */
    while (v.nlayers > 1 && is_const_eq(p, top(&v)->offset, 0) && layer_rowmajor(top(&v), p, p))
        v.nlayers--;
    view_layer *L = top(&v);
    if (reshape_strides(L, p, ndim, shp) == 0) {
        *out = v;
        return 0;
    }
    if (layer_rowmajor(L, p, p)) {
        /* contiguous but the products did not line up as ids (e.g. n -> (n/2, 2)):
         * the linear index is unchanged, so a row-major layer still says it */
        layer_identity(L, p, ndim, shp, L->offset);
    } else if (push_identity(&v, p, ndim, shp) != 0) {
        return -1;
    }
    *out = v;
    return 0;
}

/* ---- permute, expand, slice, pad, flip ------------------------------------- */

int view_permute(view *out, const view *in, sym_pool *p, const int *perm) {
    view v;
    load(&v, in, p);
    view_layer *L = top(&v), o = *L;
    for (int d = 0; d < L->ndim; d++) {
        int s = perm[d];
        KILN_ASSERT(s >= 0 && s < L->ndim);
        o.shape[d] = L->shape[s];
        o.stride[d] = L->stride[s];
        o.mask_lo[d] = L->mask_lo[s];
        o.mask_hi[d] = L->mask_hi[s];
    }
    *L = o;
    *out = v;
    return 0;
}

int view_expand(view *out, const view *in, sym_pool *p, const sym_id *shape) {
    view v;
    sym_id shp[KILN_MAX_DIMS];
    load(&v, in, p);
    view_layer *L = top(&v);
    memcpy(shp, shape, (size_t)L->ndim * sizeof shp[0]);
    for (int d = 0; d < L->ndim; d++) {
        if (shp[d] == L->shape[d]) continue;
        /* a broadcast axis was size 1: its one position is valid or not, and
         * every new position inherits that */
        if (!dim_entire(L, p, d)) {
            sym_id ok = sym_and(p, sym_lt(p, L->mask_lo[d], k1(p)), sym_lt(p, k0(p), L->mask_hi[d]));
            L->mask_lo[d] = k0(p);
            L->mask_hi[d] = sym_mul(p, shp[d], ok);
        } else {
            L->mask_lo[d] = k0(p);
            L->mask_hi[d] = shp[d];
        }
        L->shape[d] = shp[d];
        L->stride[d] = k0(p);
    }
    layer_normalize(L, p);
    *out = v;
    return 0;
}

int view_slice(view *out, const view *in, sym_pool *p, int axis, sym_id start, sym_id stop, int64_t step) {
    view v;
    load(&v, in, p);
    view_layer *L = top(&v);
    KILN_ASSERT(axis >= 0 && axis < L->ndim && step >= 1);
    sym_id n = sceil_div(p, sym_sub(p, stop, start), step);
    sym_id stp = sym_const(p, step);
    if (!dim_entire(L, p, axis)) {
        /* position j is old position start + j*step */
        sym_id lo = sceil_div(p, sym_sub(p, L->mask_lo[axis], start), step);
        sym_id hi = sceil_div(p, sym_sub(p, L->mask_hi[axis], start), step);
        L->mask_lo[axis] = smax(p, lo, k0(p));
        L->mask_hi[axis] = smin(p, hi, n);
    } else {
        L->mask_lo[axis] = k0(p);
        L->mask_hi[axis] = n;
    }
    L->offset = sym_add(p, L->offset, sym_mul(p, start, L->stride[axis]));
    L->stride[axis] = sym_mul(p, L->stride[axis], stp);
    L->shape[axis] = n;
    layer_normalize(L, p);
    *out = v;
    return 0;
}

int view_pad(view *out, const view *in, sym_pool *p, int axis, sym_id before, sym_id after) {
    view v;
    load(&v, in, p);
    view_layer *L = top(&v);
    KILN_ASSERT(axis >= 0 && axis < L->ndim);
    sym_id n = sym_add(p, sym_add(p, L->shape[axis], before), after);
    /* the old mask already lies inside [0, old n), so shifting it is the
     * intersection with the new data range; the clamps only matter for
     * negative pads */
    L->mask_lo[axis] = smax(p, sym_add(p, L->mask_lo[axis], before), k0(p));
    L->mask_hi[axis] = smin(p, sym_add(p, L->mask_hi[axis], before), n);
    L->offset = sym_sub(p, L->offset, sym_mul(p, before, L->stride[axis]));
    L->shape[axis] = n;
    L->masked = 1;
    layer_normalize(L, p);
    *out = v;
    return 0;
}

int view_flip(view *out, const view *in, sym_pool *p, int axis) {
    view v;
    load(&v, in, p);
    view_layer *L = top(&v);
    KILN_ASSERT(axis >= 0 && axis < L->ndim);
    sym_id n = L->shape[axis];
    L->offset = sym_add(p, L->offset, sym_mul(p, sym_sub(p, n, k1(p)), L->stride[axis]));
    L->stride[axis] = sym_neg(p, L->stride[axis]);
    if (!dim_entire(L, p, axis)) {
        sym_id lo = L->mask_lo[axis], hi = L->mask_hi[axis];
        L->mask_lo[axis] = sym_sub(p, n, hi);
        L->mask_hi[axis] = sym_sub(p, n, lo);
    }
    layer_normalize(L, p);
    *out = v;
    return 0;
}

/* ---- window ------------------------------------------------------------------ */

int view_window(view *out, const view *in, sym_pool *p, int axis, int64_t size, int64_t stride,
                int64_t dilation) {
    view v;
    load(&v, in, p);
    view_layer *L = top(&v);
    KILN_ASSERT(axis >= 0 && axis < L->ndim && L->ndim < KILN_MAX_DIMS);
    KILN_ASSERT(size >= 1 && stride >= 1 && dilation >= 1);
    sym_id n = L->shape[axis];
    sym_id nw = sym_add(p, sym_div(p, sym_sub(p, n, sym_const(p, dilation * (size - 1) + 1)),
                                   sym_const(p, stride)),
                        k1(p));
    sym_id wlo = k0(p), whi = nw, klo = k0(p), khi = sym_const(p, size);
    if (!dim_entire(L, p, axis)) {
        /* position (w, k) is old position w*stride + k*dilation: a box only
         * when one of the two new axes is trivial */
        sym_id lo = L->mask_lo[axis], hi = L->mask_hi[axis];
        if (size == 1) {
            wlo = smax(p, sceil_div(p, lo, stride), k0(p));
            whi = smin(p, sceil_div(p, hi, stride), nw);
        } else if (is_const_eq(p, nw, 1)) {
            klo = smax(p, sceil_div(p, lo, dilation), k0(p));
            khi = smin(p, sceil_div(p, hi, dilation), khi);
        } else {
            if (push_identity(&v, p, L->ndim, L->shape) != 0) return -1;
            L = top(&v);
        }
    }
    view_layer o = *L;
    o.ndim = L->ndim + 1;
    for (int d = L->ndim - 1; d > axis; d--) {
        o.shape[d + 1] = L->shape[d];
        o.stride[d + 1] = L->stride[d];
        o.mask_lo[d + 1] = L->mask_lo[d];
        o.mask_hi[d + 1] = L->mask_hi[d];
    }
    sym_id s = L->stride[axis];
    o.shape[axis] = nw;
    o.stride[axis] = sym_mul(p, s, sym_const(p, stride));
    o.mask_lo[axis] = wlo;
    o.mask_hi[axis] = whi;
    o.shape[axis + 1] = sym_const(p, size);
    o.stride[axis + 1] = sym_mul(p, s, sym_const(p, dilation));
    o.mask_lo[axis + 1] = klo;
    o.mask_hi[axis + 1] = khi;
    layer_normalize(&o, p);
    *L = o;
    *out = v;
    return 0;
}

/* ---- symbolic and numeric evaluation --------------------------------------- */

/* The index expressions are taken to lie in [0, shape) (index variables bound
 * by the shape, or anything the caller knows to be in range): mask bounds
 * equal to 0 or to the shape are therefore skipped, and unravelling uses no
 * modulo on the leading axis, which is what lets bounded index variables
 * collapse (8*i0 + i1)/8 back to i0. */
void view_expr(const view *v, sym_pool *p, const sym_id *idx, sym_id *offset, sym_id *valid) {
    KILN_ASSERT(v->nlayers >= 1 && v->nlayers <= VIEW_MAX_LAYERS);
    sym_id cur[KILN_MAX_DIMS];
    const view_layer *T = &v->layer[v->nlayers - 1];
    memcpy(cur, idx, (size_t)T->ndim * sizeof cur[0]);
    sym_id ok = k1(p), lin = k0(p);
    for (int l = v->nlayers - 1; l >= 0; l--) {
        const view_layer *L = &v->layer[l];
        lin = L->offset;
        for (int d = 0; d < L->ndim; d++) {
            if (!is_const_eq(p, L->stride[d], 0)) lin = sym_add(p, lin, sym_mul(p, cur[d], L->stride[d]));
            if (!L->masked) continue;
            /* indices are in [0, shape): only the non-trivial bounds matter */
            if (!is_const_eq(p, L->mask_lo[d], 0)) ok = sym_and(p, ok, sym_le(p, L->mask_lo[d], cur[d]));
            if (L->mask_hi[d] != L->shape[d]) ok = sym_and(p, ok, sym_lt(p, cur[d], L->mask_hi[d]));
        }
        if (l == 0) break;
        const view_layer *B = &v->layer[l - 1];
        sym_id below = k1(p); /* product of the shape to the right */
        for (int d = B->ndim - 1; d >= 0; d--) {
            if (is_const_eq(p, B->shape[d], 1)) {
                cur[d] = k0(p);
                continue;
            }
            sym_id c = sym_div(p, lin, below);
            if (d > 0) c = sym_mod(p, c, B->shape[d]);
            cur[d] = c;
            below = sym_mul(p, below, B->shape[d]);
        }
    }
    *offset = lin;
    *valid = ok;
}

int view_eval(view_num *out, const view *v, const sym_pool *p, const int64_t *values,
              const uint8_t *bound, uint32_t *missing_var) {
    KILN_ASSERT(v->nlayers >= 1 && v->nlayers <= VIEW_MAX_LAYERS);
    view_num r;
    memset(&r, 0, sizeof r);
    r.nlayers = v->nlayers;
    for (int l = 0; l < v->nlayers; l++) {
        const view_layer *L = &v->layer[l];
        view_num_layer *N = &r.layer[l];
        N->ndim = L->ndim;
        N->masked = L->masked;
        if (sym_eval(p, L->offset, values, bound, &N->offset, missing_var) != 0) return -1;
        for (int d = 0; d < L->ndim; d++) {
            if (sym_eval(p, L->shape[d], values, bound, &N->shape[d], missing_var) != 0) return -1;
            if (sym_eval(p, L->stride[d], values, bound, &N->stride[d], missing_var) != 0) return -1;
            if (L->masked) {
                if (sym_eval(p, L->mask_lo[d], values, bound, &N->mask_lo[d], missing_var) != 0) return -1;
                if (sym_eval(p, L->mask_hi[d], values, bound, &N->mask_hi[d], missing_var) != 0) return -1;
            } else {
                N->mask_lo[d] = 0;
                N->mask_hi[d] = N->shape[d];
            }
        }
    }
    *out = r;
    return 0;
}

int view_num_index(const view_num *v, const int64_t *coords, int64_t *offset) {
    int64_t cur[KILN_MAX_DIMS];
    const view_num_layer *T = &v->layer[v->nlayers - 1];
    memcpy(cur, coords, (size_t)T->ndim * sizeof cur[0]);
    int64_t lin = 0;
    for (int l = v->nlayers - 1; l >= 0; l--) {
        const view_num_layer *L = &v->layer[l];
        lin = L->offset;
        for (int d = 0; d < L->ndim; d++) {
            if (L->masked && (cur[d] < L->mask_lo[d] || cur[d] >= L->mask_hi[d])) return 0;
            lin += cur[d] * L->stride[d];
        }
        if (l == 0) break;
        const view_num_layer *B = &v->layer[l - 1];
        /* valid positions map into [0, numel below); anything else is a
         * corrupt view or coordinates outside the shape */
        if (lin < 0) return 0;
        for (int d = B->ndim - 1; d >= 0; d--) {
            if (d == 0) {
                cur[0] = lin;
            } else {
                if (B->shape[d] <= 0) return 0;
                cur[d] = lin % B->shape[d];
                lin /= B->shape[d];
            }
        }
    }
    *offset = lin;
    return 1;
}

/* ---- printing ------------------------------------------------------------- */

typedef struct sbuf {
    char *buf;
    size_t cap, len;
} sbuf;

static void sb_str(sbuf *b, const char *s) {
    size_t n = strlen(s);
    if (b->len < b->cap) {
        size_t room = b->cap - b->len - 1, k = n < room ? n : room;
        memcpy(b->buf + b->len, s, k);
        b->buf[b->len + k] = 0;
    }
    b->len += n;
}

static void sb_sym(sbuf *b, const sym_pool *p, sym_id s) {
    char tmp[128];
    int n = sym_print(p, s, tmp, sizeof tmp);
    if (n < 0) {
        sb_str(b, "?");
    } else if ((size_t)n < sizeof tmp) {
        sb_str(b, tmp);
    } else {
        char *big = kiln_xmalloc((size_t)n + 1);
        sym_print(p, s, big, (size_t)n + 1);
        sb_str(b, big);
        free(big);
    }
}

static void sb_list(sbuf *b, const sym_pool *p, int n, const sym_id *s) {
    sb_str(b, "(");
    for (int d = 0; d < n; d++) {
        if (d) sb_str(b, ", ");
        sb_sym(b, p, s[d]);
    }
    sb_str(b, ")");
}

/* layers innermost first (layer 0, the one that addresses the buffer), as
 * "[(shape) strides (...) offset o mask ([lo, hi), ...)]" joined by spaces;
 * the mask part only for masked layers */
int view_print(const view *v, const sym_pool *p, char *buf, size_t cap) {
    sbuf b = {buf, cap, 0};
    if (cap) buf[0] = 0;
    for (int l = 0; l < v->nlayers; l++) {
        const view_layer *L = &v->layer[l];
        if (l) sb_str(&b, " ");
        sb_str(&b, "[");
        sb_list(&b, p, L->ndim, L->shape);
        sb_str(&b, " strides ");
        sb_list(&b, p, L->ndim, L->stride);
        sb_str(&b, " offset ");
        sb_sym(&b, p, L->offset);
        if (L->masked) {
            sb_str(&b, " mask (");
            for (int d = 0; d < L->ndim; d++) {
                if (d) sb_str(&b, ", ");
                sb_str(&b, "[");
                sb_sym(&b, p, L->mask_lo[d]);
                sb_str(&b, ", ");
                sb_sym(&b, p, L->mask_hi[d]);
                sb_str(&b, ")");
            }
            sb_str(&b, ")");
        }
        sb_str(&b, "]");
    }
    return b.len > (size_t)INT32_MAX ? INT32_MAX : (int)b.len;
}

void view_transfer(view *out, const view *v, const sym_pool *from, sym_pool *to, sym_id *memo) {
    memset(out, 0, sizeof *out);
    out->nlayers = v->nlayers;
    for (int l = 0; l < v->nlayers; l++) {
        const view_layer *a = &v->layer[l];
        view_layer *b = &out->layer[l];
        b->ndim = a->ndim;
        b->offset = sym_transfer(from, a->offset, to, memo);
        b->masked = a->masked;
        for (int d = 0; d < a->ndim; d++) {
            b->shape[d] = sym_transfer(from, a->shape[d], to, memo);
            b->stride[d] = sym_transfer(from, a->stride[d], to, memo);
            b->mask_lo[d] = a->masked ? sym_transfer(from, a->mask_lo[d], to, memo) : sym_const(to, 0);
            b->mask_hi[d] = a->masked ? sym_transfer(from, a->mask_hi[d], to, memo) : b->shape[d];
        }
    }
}
