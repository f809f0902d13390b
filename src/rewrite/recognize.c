/* recognize.c — the appliers of the recognition rules whose left side is
 * more than a pattern can say: a one-hot product is a GATHER,
 * kiln_softmax's chain is a SOFTMAX_ONLINE compound node, and a softmax
 * contracted along its own axis is the streaming SOFTMAX_CONTRACT.
 *
 * Both rules match the graph as the builders make it (the e-graph never
 * loses those nodes), then check here what a pattern cannot: that views only
 * broadcast along the reduced axis, that one side really is an iota along the
 * vocabulary axis, that strides address whole rows. A check that fails
 * declines the match (EG_NONE); nothing is assumed.
 *
 * one-hot gather. kiln_eq(iota, ids) cast to the table's dtype, times the
 * table, summed over the vocabulary axis V, is the table's row ids[r]: each
 * sum has one term 1 * T[ids[r], j] and V-1 terms 0 * T[v, j]. That is exact
 * only for a finite table (0 * inf = NaN): the rule assumes finite tables, as
 * weights are, and the soundness suite checks it on finite ones. An id
 * outside [0, V) makes the one-hot row all zeros, where GATHER would fail
 * with KILN_ERR_RANGE: so such ids are sent to an extra zero row (the table
 * is read through a view padded by one row), which keeps the rule exact for
 * every id.
 *
 * softmax. exp2((x - max_k x) * c) * recip(sum_k exp2(...)), with the max and
 * sum kept along k and broadcast back, is by definition SOFTMAX_ONLINE[k](x, c)
 * (compound_expand builds exactly this chain), so the rule is exact; the scale
 * c must be a known constant so the kernel layer sees a scalar.
 *
 * softmax-contract. CONTRACT_k(VIEW[va](SOFTMAX_ONLINE_j(x, c)), v), where va
 * only inserts broadcast axes and keeps the source's axes in order with axis
 * j at k, is SOFTMAX_CONTRACT_k(VIEW[va] x, VIEW[va] c, v): the softmax of a
 * broadcast copy along the same axis is the broadcast of the softmax, row for
 * row the same arithmetic, so the rule is exact. This is attention's
 * probabilities times values whatever the scores were (masks, scales,
 * soft-caps live in x); the kernel layer may stream it along k.
 */
#include <string.h>

#include "base.h"
#include "rewrite.h"

static const eg_data *D(eg_kiln *ek, eg_id c) { return eg_data_of(ek->eg, c); }

static const eg_class *cls_of(eg_kiln *ek, eg_id c) { return &ek->eg->classes[eg_find(ek->eg, c)]; }

static int sym_eq(const eg_kiln *ek, sym_id s, int64_t want) {
    int64_t v;
    return sym_is_const(ek->syms, s, &v) && v == want;
}

/* the layer of a one-layer, unmasked view at offset 0; NULL otherwise */
static const view_layer *plain_layer(const eg_kiln *ek, uint32_t vid) {
    const view *v = &ek->views[vid];
    if (v->nlayers != 1 || v->layer[0].masked || !sym_eq(ek, v->layer[0].offset, 0)) return NULL;
    return &v->layer[0];
}

static void dense_strides(eg_kiln *ek, int n, const sym_id *shape, sym_id *st) {
    sym_id acc = sym_const(ek->syms, 1);
    for (int d = n - 1; d >= 0; d--) {
        st[d] = acc;
        acc = sym_mul(ek->syms, acc, shape[d]);
    }
}

/* view vid, over a dense source of shape src, reads at outer coordinates i
 * the source element with the coordinates of i without axis k: the sizes
 * other than 1 of the outer shape without k are those of the source, in
 * order, with the source's dense strides, and axis k repeats (size 1 or
 * stride 0). Unsqueeze, expand and their composition are such views. */
static int bcast_along(eg_kiln *ek, uint32_t vid, int ns, const sym_id *src, int k) {
    const view_layer *L = plain_layer(ek, vid);
    if (!L || k < 0 || k >= L->ndim) return 0;
    if (!sym_eq(ek, L->shape[k], 1) && !sym_eq(ek, L->stride[k], 0)) return 0;
    sym_id ds[KILN_MAX_DIMS];
    dense_strides(ek, ns, src, ds);
    int b = 0;
    for (int a = 0; a < L->ndim; a++) {
        if (a == k || sym_eq(ek, L->shape[a], 1)) continue;
        while (b < ns && sym_eq(ek, src[b], 1)) b++;
        if (b >= ns || src[b] != L->shape[a] || ds[b] != L->stride[a]) return 0;
        b++;
    }
    while (b < ns && sym_eq(ek, src[b], 1)) b++;
    return b == ns;
}

/* ---- softmax ----------------------------------------------------------------------- */

/* class nb holds -max_k(x) broadcast along k: VIEW(MUL(VIEW(MAX_k x), -1)) */
static int is_neg_max(eg_kiln *ek, eg_id nb, eg_id x, int k) {
    egraph *eg = ek->eg;
    x = eg_find(eg, x);
    const eg_class *c1 = cls_of(ek, nb);
    for (uint32_t i = 0; i < c1->nnodes; i++) {
        const eg_node *v1 = &eg->nodes[c1->nodes[i]];
        if (v1->op != EG_OP_VIEW) continue;
        const eg_data *dy = D(ek, v1->kids[0]);
        if (!bcast_along(ek, (uint32_t)v1->arg, dy->ndim, dy->shape, k)) continue;
        const eg_class *c2 = cls_of(ek, v1->kids[0]);
        for (uint32_t j = 0; j < c2->nnodes; j++) {
            const eg_node *mul = &eg->nodes[c2->nodes[j]];
            if (mul->op != OP_MUL) continue;
            for (int side = 0; side < 2; side++) {
                const eg_data *dm = D(ek, mul->kids[side]);
                if (!dm->has_const || dm->cval != -1.0) continue;
                const eg_class *c3 = cls_of(ek, mul->kids[1 - side]);
                for (uint32_t q = 0; q < c3->nnodes; q++) {
                    const eg_node *v2 = &eg->nodes[c3->nodes[q]];
                    if (v2->op != EG_OP_VIEW) continue;
                    const eg_data *dw = D(ek, v2->kids[0]);
                    if (!bcast_along(ek, (uint32_t)v2->arg, dw->ndim, dw->shape, k)) continue;
                    const eg_class *c4 = cls_of(ek, v2->kids[0]);
                    for (uint32_t r = 0; r < c4->nnodes; r++) {
                        const eg_node *mx = &eg->nodes[c4->nodes[r]];
                        if (mx->op == OP_MAX && mx->arg == k && eg_find(eg, mx->kids[0]) == x) return 1;
                    }
                }
            }
        }
    }
    return 0;
}

/* class e holds EXP2(MUL(ADD(x, -max_k x broadcast), c)) with c constant */
static int softmax_numerator(eg_kiln *ek, eg_id e, int k, eg_id *x, eg_id *c) {
    egraph *eg = ek->eg;
    const eg_class *ce = cls_of(ek, e);
    for (uint32_t i = 0; i < ce->nnodes; i++) {
        const eg_node *ex = &eg->nodes[ce->nodes[i]];
        if (ex->op != OP_EXP2) continue;
        const eg_class *ct = cls_of(ek, ex->kids[0]);
        for (uint32_t j = 0; j < ct->nnodes; j++) {
            const eg_node *mul = &eg->nodes[ct->nodes[j]];
            if (mul->op != OP_MUL) continue;
            for (int side = 0; side < 2; side++) {
                if (!D(ek, mul->kids[side])->has_const) continue;
                const eg_class *cd = cls_of(ek, mul->kids[1 - side]);
                for (uint32_t q = 0; q < cd->nnodes; q++) {
                    const eg_node *add = &eg->nodes[cd->nodes[q]];
                    if (add->op != OP_ADD) continue;
                    for (int s2 = 0; s2 < 2; s2++) {
                        if (!is_neg_max(ek, add->kids[1 - s2], add->kids[s2], k)) continue;
                        *x = eg_find(eg, add->kids[s2]);
                        *c = eg_find(eg, mul->kids[side]);
                        return 1;
                    }
                }
            }
        }
    }
    return 0;
}

/* (MUL ?e (VIEW[?vr] (RECIP (VIEW[?vs] (SUM[?k] ?e))))): class var e;
 * payload vars vr, vs, k */
eg_id ek_recognize_softmax(eg_kiln *ek, const eg_subst *s) {
    eg_id e = s->cls[0];
    uint32_t vr = (uint32_t)s->pv[0].arg, vs = (uint32_t)s->pv[1].arg;
    int k = (int)s->pv[2].arg;
    const eg_data *de = D(ek, e);
    if (!kiln_dtype_is_float((kiln_dtype)de->dtype) || k < 0 || k >= de->ndim) return EG_NONE;
    /* the sum, unsqueezed at k (vs), then its reciprocal expanded along k (vr) */
    sym_id red[KILN_MAX_DIMS];
    int nred = 0;
    for (int i = 0; i < de->ndim; i++)
        if (i != k) red[nred++] = de->shape[i];
    const view *v = &ek->views[vs];
    if (view_ndim(v) != de->ndim || !bcast_along(ek, vs, nred, red, k)) return EG_NONE;
    if (!bcast_along(ek, vr, view_ndim(v), view_shape(v), k)) return EG_NONE;
    eg_id kids[2];
    if (!softmax_numerator(ek, e, k, &kids[0], &kids[1])) return EG_NONE;
    eg_node n = eg_mk(OP_SOFTMAX_ONLINE, de->dtype, k, 0, 2, kids);
    return eg_add(ek->eg, &n);
}

/* view vid, over a dense source of shape src (ns axes), reads at outer axis
 * k the source's axis j (same size, its dense stride), and along every other
 * outer axis either repeats (size 1 or stride 0) or reads the next source
 * axis in order: a broadcast that keeps the source's rows whole */
static int keeps_axis(eg_kiln *ek, uint32_t vid, int ns, const sym_id *src, int k, int j) {
    const view_layer *L = plain_layer(ek, vid);
    if (!L || k < 0 || k >= L->ndim || j < 0 || j >= ns) return 0;
    sym_id ds[KILN_MAX_DIMS];
    dense_strides(ek, ns, src, ds);
    if (L->shape[k] != src[j] || L->stride[k] != ds[j]) return 0;
    int b = 0;
    for (int a = 0; a < L->ndim; a++) {
        if (a != k && (sym_eq(ek, L->shape[a], 1) || sym_eq(ek, L->stride[a], 0))) continue;
        while (b < ns && b != j && sym_eq(ek, src[b], 1)) b++;
        if (a == k) {
            if (b != j) return 0;
        } else if (b >= ns || b == j || src[b] != L->shape[a] || ds[b] != L->stride[a]) {
            return 0;
        }
        b++;
    }
    while (b < ns && b != j && sym_eq(ek, src[b], 1)) b++;
    return b == ns;
}

/* (CONTRACT[?k] (VIEW[?va] (SOFTMAX_ONLINE[?j] ?x ?c)) ?v): class vars x, c,
 * v; payload vars k, va, j */
eg_id ek_recognize_softmax_contract(eg_kiln *ek, const eg_subst *s) {
    int k = (int)s->pv[0].arg, j = (int)s->pv[2].arg;
    uint32_t va = (uint32_t)s->pv[1].arg;
    const eg_data *dx = D(ek, s->cls[0]), *dv = D(ek, s->cls[2]);
    if (!kiln_dtype_is_float((kiln_dtype)dx->dtype) || dv->dtype != dx->dtype) return EG_NONE;
    if (!keeps_axis(ek, va, dx->ndim, dx->shape, k, j)) return EG_NONE;
    const view *v = &ek->views[va];
    if (view_ndim(v) != dv->ndim) return EG_NONE;
    for (int i = 0; i < dv->ndim; i++)
        if (view_shape(v)[i] != dv->shape[i]) return EG_NONE;
    /* ek_view adds nodes and views: the class data and the views table may
     * move, so nothing read through dx, dv or v is used after the first */
    const kiln_dtype dtype = (kiln_dtype)dx->dtype;
    const view vv = *v;
    eg_id k0 = ek_view(ek, s->cls[0], &vv);
    eg_id k1 = ek_view(ek, s->cls[1], &vv);
    eg_id kids[3] = {k0, k1, eg_find(ek->eg, s->cls[2])};
    eg_node n = eg_mk(OP_SOFTMAX_CONTRACT, (uint8_t)dtype, k, 0, 3, kids);
    return eg_add(ek->eg, &n);
}

/* ---- one-hot gather -------------------------------------------------------------------- */

/* class io holds j at every position (..., j) of a shape whose last axis has
 * size V: an IOTA along its last axis, or a view repeating one */
static int is_last_axis_iota(eg_kiln *ek, eg_id io, sym_id V) {
    egraph *eg = ek->eg;
    const eg_class *c = cls_of(ek, io);
    int n = D(ek, io)->ndim;
    for (uint32_t i = 0; i < c->nnodes; i++) {
        const eg_node *nd = &eg->nodes[c->nodes[i]];
        if (nd->op == OP_IOTA && nd->arg == n - 1) return 1;
        if (nd->op != EG_OP_VIEW) continue;
        const view_layer *L = plain_layer(ek, (uint32_t)nd->arg);
        const eg_data *dk = D(ek, nd->kids[0]);
        if (!L || L->ndim != n || dk->ndim < 1 || dk->shape[dk->ndim - 1] != V || L->shape[n - 1] != V ||
            !sym_eq(ek, L->stride[n - 1], 1))
            continue;
        int rep = 1; /* every other axis repeats: the view reads the first row only */
        for (int a = 0; a < n - 1 && rep; a++) rep = sym_eq(ek, L->shape[a], 1) || sym_eq(ek, L->stride[a], 0);
        if (!rep) continue;
        const eg_class *ck = cls_of(ek, nd->kids[0]);
        for (uint32_t j = 0; j < ck->nnodes; j++) {
            const eg_node *kn = &eg->nodes[ck->nodes[j]];
            if (kn->op == OP_IOTA && kn->arg == dk->ndim - 1) return 1;
        }
    }
    return 0;
}

/* the i32 ids that class xv repeats along its last axis (a broadcast view of
 * them), or EG_NONE */
static eg_id repeated_ids(eg_kiln *ek, eg_id xv) {
    egraph *eg = ek->eg;
    const eg_class *c = cls_of(ek, xv);
    int n = D(ek, xv)->ndim;
    for (uint32_t i = 0; i < c->nnodes; i++) {
        const eg_node *nd = &eg->nodes[c->nodes[i]];
        if (nd->op != EG_OP_VIEW) continue;
        const eg_data *dk = D(ek, nd->kids[0]);
        if (dk->dtype == KILN_I32 && bcast_along(ek, (uint32_t)nd->arg, dk->ndim, dk->shape, n - 1))
            return eg_find(eg, nd->kids[0]);
    }
    return EG_NONE;
}

static eg_id mk2(eg_kiln *ek, int op, eg_id a, eg_id b) {
    eg_id kids[2] = {a, b};
    eg_node n = eg_mk((uint16_t)op, D(ek, a)->dtype, 0, 0, 2, kids);
    return eg_add(ek->eg, &n);
}

/* ids with every id outside [0, V) replaced by V (the padding row):
 * good = (ids < V) - (ids < 0) is 1 inside, 0 outside; V + good*(ids - V) */
static eg_id ids_or_pad_row(eg_kiln *ek, eg_id ids, int64_t V) {
    const eg_data *d = D(ek, ids);
    int nd = d->ndim;
    sym_id shape[KILN_MAX_DIMS];
    memcpy(shape, d->shape, sizeof(sym_id) * (size_t)nd);
#define FULL(v) ek_full(ek, (double)(v), KILN_I32, nd, shape)
    eg_id below = mk2(ek, OP_LT, ids, FULL(V));
    eg_id neg = mk2(ek, OP_LT, ids, FULL(0));
    eg_id good = mk2(ek, OP_ADD, below, mk2(ek, OP_MUL, neg, FULL(-1)));
    eg_id off = mk2(ek, OP_MUL, good, mk2(ek, OP_ADD, ids, FULL(-V)));
    return mk2(ek, OP_ADD, off, FULL(V));
#undef FULL
}

/* (SUM[?k] (MUL (VIEW[?va] (CAST[?t] (LT (ADD (LT ?i ?x) (LT ?x ?i)) ?one))) (VIEW[?vb] ?tab)))
 * class vars i, x, one, tab; payload vars k, va, t, vb */
eg_id ek_recognize_onehot_gather(eg_kiln *ek, const eg_subst *s) {
    int k = (int)s->pv[0].arg;
    uint32_t va = (uint32_t)s->pv[1].arg, vb = (uint32_t)s->pv[3].arg;
    eg_id tab = eg_find(ek->eg, s->cls[3]);
    const eg_data *di = D(ek, s->cls[0]), *dt = D(ek, tab);
    /* the one-hot (rows..., V): comparisons in i32, cast to the table's float dtype */
    if (di->dtype != KILN_I32 || di->ndim < 1 || dt->ndim != 2 || s->pv[2].dtype != dt->dtype ||
        !kiln_dtype_is_float((kiln_dtype)dt->dtype))
        return EG_NONE;
    int m = di->ndim;
    sym_id Vs = di->shape[m - 1];
    int64_t V;
    if (!sym_is_const(ek->syms, Vs, &V) || V < 1 || V > INT32_MAX - 1) return EG_NONE;
    eg_id ids = EG_NONE;
    for (int sw = 0; sw < 2 && ids == EG_NONE; sw++)
        if (is_last_axis_iota(ek, s->cls[sw], Vs)) ids = repeated_ids(ek, s->cls[1 - sw]);
    if (ids == EG_NONE) return EG_NONE;

    /* va reads the one-hot: along k its vocabulary axis (stride 1), along the
     * other axes whole rows (strides alpha * V) */
    const view_layer *A = plain_layer(ek, va), *B = plain_layer(ek, vb);
    if (!A || !B || A->ndim != B->ndim || k < 0 || k >= A->ndim || A->shape[k] != Vs || !sym_eq(ek, A->stride[k], 1))
        return EG_NONE;
    /* vb reads the table along its vocabulary axis at k: rows (vocabulary
     * axis 0, stride D) or columns (axis 1, stride 1, columns V apart) */
    int vocab_axis;
    sym_id Dsz, unit;
    if (dt->shape[0] == Vs && B->stride[k] == dt->shape[1]) {
        vocab_axis = 0;
        Dsz = dt->shape[1];
        unit = sym_const(ek->syms, 1);
    } else if (dt->shape[1] == Vs && sym_eq(ek, B->stride[k], 1)) {
        vocab_axis = 1;
        Dsz = dt->shape[0];
        unit = Vs;
    } else {
        return EG_NONE;
    }
    /* every other axis: alpha rows of the one-hot and beta (0 or 1) columns of
     * the table; the result reads the gathered (rows..., D) at alpha*D + beta */
    view w;
    memset(&w, 0, sizeof w);
    w.nlayers = 1;
    view_layer *W = &w.layer[0];
    W->offset = sym_const(ek->syms, 0);
    int ncol = 0;
    for (int a = 0; a < A->ndim; a++) {
        if (a == k) continue;
        sym_id alpha = sym_const(ek->syms, 0), beta = sym_const(ek->syms, 0);
        if (!sym_eq(ek, A->shape[a], 1)) {
            alpha = sym_div(ek->syms, A->stride[a], Vs);
            if (sym_mul(ek->syms, alpha, Vs) != A->stride[a]) return EG_NONE;
            if (!sym_eq(ek, B->stride[a], 0)) {
                if (B->stride[a] != unit || B->shape[a] != Dsz || ncol++) return EG_NONE;
                beta = sym_const(ek->syms, 1);
            }
        }
        W->shape[W->ndim] = A->shape[a];
        W->mask_lo[W->ndim] = sym_const(ek->syms, 0);
        W->mask_hi[W->ndim] = A->shape[a];
        W->stride[W->ndim++] = sym_add(ek->syms, sym_mul(ek->syms, alpha, Dsz), beta);
    }

    /* the table as (V + 1, D) rows, the last one zeros */
    view tv;
    view_identity(&tv, ek->syms, dt->ndim, dt->shape);
    static const int swap[2] = {1, 0};
    if (vocab_axis == 1 && view_permute(&tv, &tv, ek->syms, swap) != 0) return EG_NONE;
    if (view_pad(&tv, &tv, ek->syms, 0, sym_const(ek->syms, 0), sym_const(ek->syms, 1)) != 0) return EG_NONE;
    eg_id rows = ek_view(ek, tab, &tv);
    eg_id g = mk2(ek, OP_GATHER, rows, ids_or_pad_row(ek, ids, V));
    return ek_view(ek, g, &w);
}
