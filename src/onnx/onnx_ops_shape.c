/* onnx_ops_shape.c — ONNX's shape and data-movement operators: Reshape,
 * Flatten, Transpose, Squeeze, Unsqueeze, Concat, Split, Slice, Gather,
 * Expand, Tile, Pad, Shape, Size, ConstantOfShape, Constant, Range, CumSum,
 * Trilu. Movement is kiln views (no copies); values that fix shapes are read
 * at load time (imp_const_ints), and Shape/Size/Constant/Range produce host
 * constants that later shape arithmetic folds.
 *
 * Invariants: a shape argument not known at load time, or a size a view
 * needs as a constant but that is symbolic, is an error naming the operator.
 */
#include <math.h>
#include <string.h>

#include "graph.h"
#include "nn_util.h"
#include "onnx_imp.h"

#define MAXV 64 /* most elements of a shape-like constant input */

static int rank_of(imp_ctx *c, kiln_tensor x) { return kiln_ndim(c->g, x); }

/* axes from the attribute (old opsets) or the input i (new opsets); returns
 * the count, -1 on error, 0 when absent */
static int axes_of(imp_ctx *c, const ox_node *n, int input, int64_t *axes) {
    const int64_t *a;
    int k = imp_attr_ints(n, "axes", &a);
    if (k) {
        if (k > MAXV) return imp_fail(c, KILN_ERR_UNSUPPORTED, "too many axes"), -1;
        memcpy(axes, a, (size_t)k * sizeof *a);
        return k;
    }
    if (input >= 0 && imp_has(n, input)) return imp_const_ints(c, n, input, axes, MAXV);
    return 0;
}

static int reshape(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int64_t s[MAXV];
    int k;
    const int64_t *sa;
    if (c->opset < 5 && imp_attr_ints(n, "shape", &sa)) {
        k = imp_attr_ints(n, "shape", &sa);
        memcpy(s, sa, (size_t)k * sizeof *s);
    } else k = imp_const_ints(c, n, 1, s, MAXV);
    if (k < 0) return 0;
    if (k > KILN_MAX_DIMS) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Reshape to %d dims", k);
    int allowzero = (int)imp_attr_i(n, "allowzero", 0);
    kiln_graph *g = c->g;
    int r = rank_of(c, x), infer = -1;
    kiln_sym total = kiln_sym_int(g, 1), known = kiln_sym_int(g, 1), dims[KILN_MAX_DIMS];
    for (int d = 0; d < r; d++) total = kiln_sym_mul(g, total, kiln_dim(g, x, d));
    for (int i = 0; i < k; i++) {
        if (s[i] == -1) {
            if (infer >= 0) return imp_fail(c, KILN_ERR_INVALID, "Reshape: two -1 entries");
            infer = i;
            continue;
        }
        if (s[i] == 0 && !allowzero) {
            if (i >= r) return imp_fail(c, KILN_ERR_INVALID, "Reshape: 0 at %d beyond the input's rank", i);
            dims[i] = kiln_dim(g, x, i);
        } else if (s[i] <= 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Reshape to size %lld", (long long)s[i]);
        else dims[i] = kiln_sym_int(g, s[i]);
        known = kiln_sym_mul(g, known, dims[i]);
    }
    if (infer >= 0) dims[infer] = kiln_sym_div(g, total, known);
    return imp_set(c, n, 0, kiln_reshape(g, x, k, dims), imp_in_dtype(c, n, 0));
}

static int flatten(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int r = rank_of(c, x);
    int64_t ax = imp_attr_i(n, "axis", 1);
    if (ax < 0) ax += r;
    if (ax < 0 || ax > r) return imp_fail(c, KILN_ERR_INVALID, "Flatten: axis out of range");
    kiln_graph *g = c->g;
    kiln_sym a = kiln_sym_int(g, 1), b = kiln_sym_int(g, 1);
    for (int d = 0; d < r; d++) {
        if (d < ax) a = kiln_sym_mul(g, a, kiln_dim(g, x, d));
        else b = kiln_sym_mul(g, b, kiln_dim(g, x, d));
    }
    kiln_sym dims[2] = {a, b};
    return imp_set(c, n, 0, kiln_reshape(g, x, 2, dims), imp_in_dtype(c, n, 0));
}

static int transpose(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int r = rank_of(c, x), perm[KILN_MAX_DIMS];
    const int64_t *p;
    int k = imp_attr_ints(n, "perm", &p);
    if (k && k != r) return imp_fail(c, KILN_ERR_INVALID, "Transpose: perm has %d entries for rank %d", k, r);
    for (int d = 0; d < r; d++) {
        perm[d] = k ? (int)p[d] : r - 1 - d;
        if (perm[d] < 0 || perm[d] >= r) return imp_fail(c, KILN_ERR_INVALID, "Transpose: bad perm");
    }
    return imp_set(c, n, 0, kiln_permute(c->g, x, perm), imp_in_dtype(c, n, 0));
}

static int squeeze(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int64_t axes[MAXV];
    int k = axes_of(c, n, 1, axes), r = rank_of(c, x);
    if (k < 0) return 0;
    int drop[KILN_MAX_DIMS] = {0};
    if (k == 0) {
        for (int d = 0; d < r; d++) {
            int64_t v = imp_dim_const(c, x, d);
            if (v < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Squeeze without axes on a symbolic dim");
            drop[d] = v == 1;
        }
    }
    for (int i = 0; i < k; i++) {
        int a = imp_axis(c, n, axes[i], r);
        if (a < 0) return 0;
        drop[a] = 1;
    }
    for (int d = r - 1; d >= 0; d--)
        if (drop[d]) x = kiln_squeeze(c->g, x, d);
    return imp_set(c, n, 0, x, imp_in_dtype(c, n, 0));
}

static int unsqueeze(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int64_t axes[MAXV];
    int k = axes_of(c, n, 1, axes), r = rank_of(c, x);
    if (k <= 0) return k < 0 ? 0 : imp_fail(c, KILN_ERR_INVALID, "Unsqueeze needs axes");
    int out = r + k, add[KILN_MAX_DIMS * 2] = {0};
    if (out > KILN_MAX_DIMS) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Unsqueeze to %d dims", out);
    for (int i = 0; i < k; i++) {
        int a = imp_axis(c, n, axes[i], out);
        if (a < 0) return 0;
        add[a] = 1;
    }
    for (int d = 0; d < out; d++)
        if (add[d]) x = kiln_unsqueeze(c->g, x, d);
    return imp_set(c, n, 0, x, imp_in_dtype(c, n, 0));
}

static int concat(imp_ctx *c, const ox_node *n) {
    kiln_tensor y = imp_in(c, n, 0);
    if (!imp_check(c, y)) return 0;
    int ax = imp_axis(c, n, imp_attr_i(n, "axis", 0), rank_of(c, y));
    if (ax < 0) return 0;
    for (int i = 1; i < n->n_in; i++) {
        if (!imp_has(n, i)) continue;
        y = kiln_concat(c->g, y, imp_in(c, n, i), ax);
    }
    return imp_set(c, n, 0, y, imp_in_dtype(c, n, 0));
}

static int split(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int r = rank_of(c, x);
    int ax = imp_axis(c, n, imp_attr_i(n, "axis", 0), r);
    if (ax < 0) return 0;
    int64_t dim = imp_dim_const(c, x, ax);
    if (dim < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Split along a symbolic dim");
    int64_t sizes[MAXV];
    int k = 0;
    const int64_t *sa;
    if ((k = imp_attr_ints(n, "split", &sa)) > 0) {
        if (k > MAXV) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Split into %d", k);
        memcpy(sizes, sa, (size_t)k * sizeof *sa);
    } else if (imp_has(n, 1)) {
        if ((k = imp_const_ints(c, n, 1, sizes, MAXV)) < 0) return 0;
    } else {
        int64_t parts = imp_attr_i(n, "num_outputs", n->n_out);
        if (parts < 1 || parts > MAXV) return imp_fail(c, KILN_ERR_INVALID, "Split into %lld", (long long)parts);
        int64_t each = (dim + parts - 1) / parts;
        k = (int)parts;
        for (int i = 0; i < k; i++) sizes[i] = i < k - 1 ? each : dim - each * (k - 1);
    }
    if (k != n->n_out) return imp_fail(c, KILN_ERR_INVALID, "Split: %d sizes for %d outputs", k, n->n_out);
    int64_t at = 0;
    for (int i = 0; i < k; i++) {
        if (sizes[i] <= 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Split: part of size %lld", (long long)sizes[i]);
        kiln_tensor p = kiln_slice(c->g, x, ax, kiln_sym_int(c->g, at), kiln_sym_int(c->g, at + sizes[i]), 1);
        if (!imp_set(c, n, i, p, imp_in_dtype(c, n, 0))) return 0;
        at += sizes[i];
    }
    if (at != dim) return imp_fail(c, KILN_ERR_INVALID, "Split: sizes add up to %lld, the axis has %lld", (long long)at, (long long)dim);
    return 1;
}

static int64_t clampi(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static int slice(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int r = rank_of(c, x);
    int64_t st[MAXV], en[MAXV], ax[MAXV], sp[MAXV];
    int k, ke, ka = -1, ks = -1;
    if (c->opset < 10) {
        const int64_t *a;
        k = imp_attr_ints(n, "starts", &a); if (k > MAXV) k = MAXV; memcpy(st, a, (size_t)k * 8);
        ke = imp_attr_ints(n, "ends", &a); if (ke > MAXV) ke = MAXV; memcpy(en, a, (size_t)ke * 8);
        ka = imp_attr_ints(n, "axes", &a); if (ka > MAXV) ka = MAXV; if (ka) memcpy(ax, a, (size_t)ka * 8); else ka = -1;
    } else {
        if ((k = imp_const_ints(c, n, 1, st, MAXV)) < 0 || (ke = imp_const_ints(c, n, 2, en, MAXV)) < 0) return 0;
        if (imp_has(n, 3) && (ka = imp_const_ints(c, n, 3, ax, MAXV)) < 0) return 0;
        if (imp_has(n, 4) && (ks = imp_const_ints(c, n, 4, sp, MAXV)) < 0) return 0;
    }
    if (ke != k || (ka >= 0 && ka != k) || (ks >= 0 && ks != k)) return imp_fail(c, KILN_ERR_INVALID, "Slice: argument lengths differ");
    for (int i = 0; i < k; i++) {
        int a = imp_axis(c, n, ka >= 0 ? ax[i] : i, r);
        if (a < 0) return 0;
        int64_t step = ks >= 0 ? sp[i] : 1;
        int64_t dim = imp_dim_const(c, x, a);
        if (step == 0) return imp_fail(c, KILN_ERR_INVALID, "Slice: step 0");
        if (dim < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Slice along a symbolic dim");
        int64_t s = st[i] < 0 ? st[i] + dim : st[i], e = en[i] < 0 ? en[i] + dim : en[i];
        if (st[i] < -dim) s = 0;
        if (en[i] < -dim) e = step > 0 ? 0 : -1;
        if (step > 0) { s = clampi(s, 0, dim); e = clampi(e, 0, dim); }
        else { s = clampi(s, 0, dim - 1); e = clampi(e, -1, dim - 1); }
        if (step < 0) { /* flip, then an ordinary slice */
            x = kiln_flip(c->g, x, a);
            s = dim - 1 - s;
            e = dim - 1 - e;
            step = -step;
        }
        if (e <= s) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Slice gives an empty tensor");
        x = kiln_slice(c->g, x, a, kiln_sym_int(c->g, s), kiln_sym_int(c->g, e), step);
    }
    return imp_set(c, n, 0, x, imp_in_dtype(c, n, 0));
}

/* rows of data along axis picked by indices (negative counts from the end) */
static int gather(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0), idx = imp_in(c, n, 1);
    if (!imp_check(c, x) || !imp_check(c, idx)) return 0;
    kiln_graph *g = c->g;
    int r = rank_of(c, x), ri = rank_of(c, idx);
    int ax = imp_axis(c, n, imp_attr_i(n, "axis", 0), r);
    if (ax < 0) return 0;
    if (r - 1 + ri > KILN_MAX_DIMS) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Gather result of rank %d", r - 1 + ri);
    kiln_tensor dimv = nn_sym_value(g, kiln_dim(g, x, ax), KILN_I32);
    kiln_tensor neg = kiln_lt(g, idx, kiln_const(g, 0, KILN_I32));
    idx = kiln_add(g, idx, kiln_mul(g, neg, dimv));
    int perm[KILN_MAX_DIMS];
    if (ax) {
        perm[0] = ax;
        for (int d = 0, j = 1; d < r; d++)
            if (d != ax) perm[j++] = d;
        x = kiln_permute(g, x, perm);
    }
    kiln_tensor y = kiln_gather(g, x, idx); /* (I..., rest...) */
    if (ax) {
        int ro = ri + r - 1, j = 0;
        for (int d = 0; d < ax; d++) perm[j++] = ri + d;          /* leading data dims */
        for (int d = 0; d < ri; d++) perm[j++] = d;               /* index dims */
        for (int d = ax; d < r - 1; d++) perm[j++] = ri + d;      /* trailing data dims */
        if (j != ro) return imp_fail(c, KILN_ERR_INVALID, "Gather: rank");
        y = kiln_permute(g, y, perm);
    }
    return imp_set(c, n, 0, y, imp_in_dtype(c, n, 0));
}

/* out[i] = data[i with i[axis] replaced by indices[i]]: flat offsets into the
 * dense data (static dims), one gather of scalar rows */
static int gather_elements(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0), idx = imp_in(c, n, 1);
    if (!imp_check(c, x) || !imp_check(c, idx)) return 0;
    kiln_graph *g = c->g;
    int r = rank_of(c, x);
    if (rank_of(c, idx) != r) return imp_fail(c, KILN_ERR_SHAPE, "GatherElements: indices of another rank");
    int ax = imp_axis(c, n, imp_attr_i(n, "axis", 0), r);
    if (ax < 0) return 0;
    int64_t dims[KILN_MAX_DIMS], stride[KILN_MAX_DIMS], total = 1, count = 1;
    kiln_sym is[KILN_MAX_DIMS];
    for (int d = r - 1; d >= 0; d--) {
        dims[d] = imp_dim_const(c, x, d);
        int64_t id = imp_dim_const(c, idx, d);
        if (dims[d] < 0 || id < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "GatherElements with symbolic dims");
        if (d != ax && id > dims[d]) return imp_fail(c, KILN_ERR_SHAPE, "GatherElements: indices larger than data");
        stride[d] = total;
        total *= dims[d];
        count *= id;
        is[d] = kiln_dim(g, idx, d);
    }
    if (total >= ((int64_t)1 << 31)) return imp_fail(c, KILN_ERR_UNSUPPORTED, "GatherElements on %lld elements", (long long)total);
    kiln_tensor neg = kiln_lt(g, idx, kiln_const(g, 0, KILN_I32));
    kiln_tensor at = kiln_add(g, idx, kiln_mul(g, neg, kiln_const(g, (double)dims[ax], KILN_I32)));
    kiln_tensor flat = kiln_mul(g, at, kiln_const(g, (double)stride[ax], KILN_I32));
    for (int d = 0; d < r; d++)
        if (d != ax) flat = kiln_add(g, flat, kiln_mul(g, kiln_iota(g, KILN_I32, r, is, d), kiln_const(g, (double)stride[d], KILN_I32)));
    kiln_sym one = kiln_sym_int(g, 1), tot = kiln_sym_int(g, total), cnt = kiln_sym_int(g, count);
    kiln_sym td[2] = {tot, one};
    kiln_tensor table = kiln_reshape(g, kiln_contiguous(g, x), 2, td);
    kiln_tensor y = kiln_gather(g, table, kiln_reshape(g, flat, 1, &cnt)); /* (count, 1) */
    return imp_set(c, n, 0, kiln_reshape(g, y, r, is), imp_in_dtype(c, n, 0));
}

static int expand(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int64_t s[MAXV];
    int k = imp_const_ints(c, n, 1, s, MAXV);
    if (k < 0) return 0;
    int r = rank_of(c, x), out = k > r ? k : r;
    if (out > KILN_MAX_DIMS) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Expand to %d dims", out);
    kiln_graph *g = c->g;
    while (rank_of(c, x) < out) x = kiln_unsqueeze(g, x, 0);
    kiln_sym dims[KILN_MAX_DIMS];
    int same = 1;
    for (int d = 0; d < out; d++) {
        kiln_sym xd = kiln_dim(g, x, d);
        int64_t want = d - (out - k) >= 0 ? s[d - (out - k)] : 1;
        int64_t have = imp_dim_const(c, x, d);
        if (want == 1 || have == want) dims[d] = xd;
        else if (have == 1) { dims[d] = kiln_sym_int(g, want); same = 0; }
        else return imp_fail(c, KILN_ERR_SHAPE, "Expand: dim %d of size %lld cannot become %lld", d, (long long)have, (long long)want);
    }
    if (!same) x = kiln_expand(g, x, out, dims);
    return imp_set(c, n, 0, x, imp_in_dtype(c, n, 0));
}

static int tile(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int64_t rep[MAXV];
    int k = imp_const_ints(c, n, 1, rep, MAXV), r = rank_of(c, x);
    if (k < 0) return 0;
    if (k != r) return imp_fail(c, KILN_ERR_INVALID, "Tile: %d repeats for rank %d", k, r);
    if (r + 1 > KILN_MAX_DIMS) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Tile of rank %d", r);
    kiln_graph *g = c->g;
    for (int d = 0; d < r; d++) {
        if (rep[d] < 1) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Tile: repeat %lld", (long long)rep[d]);
        if (rep[d] == 1) continue;
        kiln_tensor u = kiln_unsqueeze(g, x, d); /* (..., 1, dim, ...) */
        kiln_sym dims[KILN_MAX_DIMS], flat[KILN_MAX_DIMS];
        for (int e = 0; e <= r; e++) dims[e] = kiln_dim(g, u, e);
        dims[d] = kiln_sym_int(g, rep[d]);
        u = kiln_expand(g, u, r + 1, dims);
        for (int e = 0, j = 0; e <= r; e++) {
            if (e == d) continue;
            flat[j++] = e == d + 1 ? kiln_sym_mul(g, dims[d], dims[d + 1]) : dims[e];
        }
        x = kiln_reshape(g, u, r, flat);
    }
    return imp_set(c, n, 0, x, imp_in_dtype(c, n, 0));
}

static int pad(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    const char *mode = imp_attr_s(n, "mode", "constant");
    if (strcmp(mode, "constant")) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Pad mode '%s'", mode);
    int r = rank_of(c, x);
    int64_t p[MAXV], axes[MAXV];
    int k;
    double value = 0;
    kiln_tensor vt = KILN_NONE; /* the pad value as a graph scalar, when not a constant */
    const int64_t *pa;
    if (c->opset < 11) {
        k = imp_attr_ints(n, "pads", &pa);
        if (k > MAXV) return imp_fail(c, KILN_ERR_UNSUPPORTED, "too many pads");
        memcpy(p, pa, (size_t)k * 8);
        value = imp_attr_f(n, "value", 0.0);
    } else {
        if ((k = imp_const_ints(c, n, 1, p, MAXV)) < 0) return 0;
        if (imp_has(n, 2)) {
            ox_tensor *v = imp_const(c, n, 2);
            if (v && v->n == 1) value = ox_elem_f(v->dtype, v->data, 0);
            else { /* a value known only at run time */
                vt = imp_in(c, n, 2);
                if (!imp_check(c, vt)) return 0;
                if (kiln_ndim(c->g, vt) > 0) vt = kiln_reshape(c->g, vt, 0, NULL);
            }
        }
    }
    int na = r;
    if (imp_has(n, 3)) {
        if ((na = imp_const_ints(c, n, 3, axes, MAXV)) < 0) return 0;
    } else
        for (int d = 0; d < r; d++) axes[d] = d;
    if (k != 2 * na) return imp_fail(c, KILN_ERR_INVALID, "Pad: %d pads for %d axes", k, na);
    kiln_graph *g = c->g;
    kiln_tensor mask = KILN_NONE;
    if (value != 0 || vt != KILN_NONE) {
        kiln_sym dims[KILN_MAX_DIMS];
        for (int d = 0; d < r; d++) dims[d] = kiln_dim(g, x, d);
        mask = kiln_full(g, 1.0, kiln_tensor_dtype(g, x), r, dims);
    }
    for (int i = 0; i < na; i++) {
        int a = imp_axis(c, n, axes[i], r);
        if (a < 0) return 0;
        int64_t b = p[i], e = p[i + na];
        if (b < 0 || e < 0) { /* negative pads crop */
            int64_t dim = imp_dim_const(c, x, a);
            if (dim < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Pad: negative pads on a symbolic dim");
            int64_t s = b < 0 ? -b : 0, t = e < 0 ? dim + e : dim;
            if (t <= s) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Pad gives an empty tensor");
            x = kiln_slice(g, x, a, kiln_sym_int(g, s), kiln_sym_int(g, t), 1);
            if (mask != KILN_NONE) mask = kiln_slice(g, mask, a, kiln_sym_int(g, s), kiln_sym_int(g, t), 1);
            if (b < 0) b = 0;
            if (e < 0) e = 0;
        }
        if (b || e) {
            x = kiln_pad(g, x, a, kiln_sym_int(g, b), kiln_sym_int(g, e));
            if (mask != KILN_NONE) mask = kiln_pad(g, mask, a, kiln_sym_int(g, b), kiln_sym_int(g, e));
        }
    }
    if (mask != KILN_NONE) { /* the value where the mask is 0, exactly (infinities too) */
        if (vt == KILN_NONE) vt = kiln_const(g, value, kiln_tensor_dtype(g, x));
        x = imp_where_exact(c, mask, x, vt);
    }
    return imp_set(c, n, 0, x, imp_in_dtype(c, n, 0));
}

static int shape(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int r = rank_of(c, x);
    int64_t s = imp_attr_i(n, "start", 0), e = imp_attr_i(n, "end", r);
    if (s < 0) s += r;
    if (e < 0) e += r;
    s = clampi(s, 0, r);
    e = clampi(e, 0, r);
    int64_t len = e > s ? e - s : 0;
    if (len == 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Shape gives an empty tensor");
    ox_tensor *k = imp_new_const(c, OX_INT64, 1, &len);
    if (!k) return 0;
    for (int64_t d = s; d < e; d++) {
        int64_t v = imp_dim_const(c, x, (int)d);
        if (v < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Shape of a symbolic dim is not supported");
        ((int64_t *)k->data)[d - s] = v;
    }
    return imp_set_const(c, n, 0, k);
}

static int size(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int64_t total = 1;
    for (int d = 0; d < rank_of(c, x); d++) {
        int64_t v = imp_dim_const(c, x, d);
        if (v < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Size of a symbolic dim is not supported");
        total *= v;
    }
    ox_tensor *k = imp_new_const(c, OX_INT64, 0, NULL);
    if (!k) return 0;
    *(int64_t *)k->data = total;
    return imp_set_const(c, n, 0, k);
}

/* a host constant of one value: filled, or a kiln_full when huge */
static int const_of_shape(imp_ctx *c, const ox_node *n) {
    int64_t s[KILN_MAX_DIMS];
    int k = imp_const_ints(c, n, 0, s, KILN_MAX_DIMS);
    if (k < 0) return 0;
    const ox_attr *va = ox_attr_find(n, "value");
    int dt = OX_FLOAT;
    double v = 0;
    if (va) {
        if (!va->t || va->t->n != 1) return imp_fail(c, KILN_ERR_INVALID, "ConstantOfShape: value must be one element");
        dt = va->t->dtype;
        v = ox_elem_f(dt, va->t->data, 0);
    }
    int64_t total = 1;
    for (int i = 0; i < k; i++) {
        if (s[i] <= 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "ConstantOfShape gives an empty tensor");
        total *= s[i];
    }
    int kt = imp_kiln_dtype(dt);
    if (kt < 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "ConstantOfShape of %s", ox_dtype_name(dt));
    /* up to 2^26 elements a filled buffer, which becomes a bound weight where
     * a graph tensor is needed: models that carry their weights as fills (the
     * onnx package's light models) then run like models with real weights,
     * instead of the rewriter folding a constant weight into the arithmetic */
    size_t fill = (size_t)total * ox_dtype_size(dt);
    if (total > ((int64_t)1 << 26) || c->fill_bytes + fill > ((size_t)1 << 30)) { /* at most 1 GiB of fills per model */
        kiln_sym dims[KILN_MAX_DIMS];
        for (int i = 0; i < k; i++) dims[i] = kiln_sym_int(c->g, s[i]);
        return imp_set(c, n, 0, kiln_full(c->g, v, (kiln_dtype)kt, k, dims), dt);
    }
    ox_tensor *t = imp_new_const(c, dt, k, s);
    if (!t) return 0;
    c->fill_bytes += fill;
    size_t es = ox_dtype_size(dt);
    for (int64_t i = 0; i < t->n; i++) memcpy((char *)t->data + (size_t)i * es, va ? va->t->data : &(float){0}, es);
    return imp_set_const(c, n, 0, t);
}

static int constant(imp_ctx *c, const ox_node *n) {
    if (n->n_attrs != 1) return imp_fail(c, KILN_ERR_INVALID, "Constant needs exactly one attribute");
    const ox_attr *a = &n->attrs[0];
    ox_tensor *k = NULL;
    if (!strcmp(a->name, "value")) {
        if (!a->t) return imp_fail(c, KILN_ERR_INVALID, "Constant: value is not a tensor");
        k = a->t;
    } else if (!strcmp(a->name, "value_float") || !strcmp(a->name, "value_int")) {
        int f = a->name[6] == 'f';
        k = imp_new_const(c, f ? OX_FLOAT : OX_INT64, 0, NULL);
        if (!k) return 0;
        if (f) *(float *)k->data = (float)a->f;
        else *(int64_t *)k->data = a->i;
    } else if (!strcmp(a->name, "value_floats") || !strcmp(a->name, "value_ints")) {
        int f = a->name[6] == 'f';
        int64_t len = f ? a->nfloats : a->nints;
        if (!len) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Constant: an empty list");
        k = imp_new_const(c, f ? OX_FLOAT : OX_INT64, 1, &len);
        if (!k) return 0;
        memcpy(k->data, f ? (void *)a->floats : (void *)a->ints, (size_t)len * (f ? 4 : 8));
    } else return imp_fail(c, KILN_ERR_UNSUPPORTED, "Constant: attribute '%s'", a->name);
    if (k->n == 0) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Constant: an empty tensor");
    return imp_set_const(c, n, 0, k);
}

static int range(imp_ctx *c, const ox_node *n) {
    ox_tensor *s = imp_const(c, n, 0), *l = imp_const(c, n, 1), *d = imp_const(c, n, 2);
    if (!s || !l || !d) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Range: start, limit and delta must be known at load time");
    int dt = s->dtype;
    double st = ox_elem_f(dt, s->data, 0), li = ox_elem_f(dt, l->data, 0), de = ox_elem_f(dt, d->data, 0);
    if (de == 0) return imp_fail(c, KILN_ERR_INVALID, "Range: delta 0");
    double cnt = ceil((li - st) / de);
    if (!(cnt >= 1)) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Range gives an empty tensor");
    if (cnt > 1e7) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Range of %.0f elements", cnt);
    int64_t len = (int64_t)cnt;
    ox_tensor *k = imp_new_const(c, dt, 1, &len);
    if (!k) return 0;
    for (int64_t i = 0; i < len; i++) {
        double v = st + (double)i * de;
        switch (dt) {
        case OX_FLOAT: ((float *)k->data)[i] = (float)v; break;
        case OX_DOUBLE: ((double *)k->data)[i] = v; break;
        case OX_INT32: ((int32_t *)k->data)[i] = (int32_t)(ox_elem_i(dt, s->data, 0) + i * ox_elem_i(dt, d->data, 0)); break;
        case OX_INT64: ((int64_t *)k->data)[i] = ox_elem_i(dt, s->data, 0) + i * ox_elem_i(dt, d->data, 0); break;
        case OX_INT16: ((int16_t *)k->data)[i] = (int16_t)(ox_elem_i(dt, s->data, 0) + i * ox_elem_i(dt, d->data, 0)); break;
        default: return imp_fail(c, KILN_ERR_UNSUPPORTED, "Range of %s", ox_dtype_name(dt));
        }
    }
    return imp_set_const(c, n, 0, k);
}

static int cumsum(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int64_t axv;
    if (imp_const_ints(c, n, 1, &axv, 1) != 1) return 0;
    int ax = imp_axis(c, n, axv, rank_of(c, x));
    if (ax < 0) return 0;
    kiln_graph *g = c->g;
    int rev = (int)imp_attr_i(n, "reverse", 0), exc = (int)imp_attr_i(n, "exclusive", 0);
    if (rev) x = kiln_flip(g, x, ax);
    if (exc) { /* shift by one: a zero first, the last element dropped */
        kiln_sym dim = kiln_dim(g, x, ax);
        x = kiln_slice(g, kiln_pad(g, x, ax, kiln_sym_int(g, 1), kiln_sym_int(g, 0)), ax, kiln_sym_int(g, 0), dim, 1);
    }
    x = kiln_cumsum(g, x, ax);
    if (rev) x = kiln_flip(g, x, ax);
    return imp_set(c, n, 0, x, imp_in_dtype(c, n, 0));
}

/* upper (or lower) triangle of the last two axes: keep j - i >= k (<= k) */
static int trilu(imp_ctx *c, const ox_node *n) {
    kiln_tensor x = imp_in(c, n, 0);
    if (!imp_check(c, x)) return 0;
    int64_t k = 0;
    if (imp_has(n, 1) && imp_const_ints(c, n, 1, &k, 1) != 1) return 0;
    int r = rank_of(c, x);
    if (r < 2) return imp_fail(c, KILN_ERR_INVALID, "Trilu needs rank >= 2");
    kiln_graph *g = c->g;
    kiln_sym dims[2] = {kiln_dim(g, x, r - 2), kiln_dim(g, x, r - 1)};
    kiln_tensor i = kiln_iota(g, KILN_I32, 2, dims, 0), j = kiln_iota(g, KILN_I32, 2, dims, 1);
    kiln_tensor diff = kiln_sub(g, j, i); /* j - i */
    kiln_tensor kk = kiln_const(g, (double)k, KILN_I32);
    kiln_tensor keep = imp_attr_i(n, "upper", 1) ? kiln_sub(g, kiln_const(g, 1, KILN_I32), kiln_lt(g, diff, kk))
                                                 : kiln_sub(g, kiln_const(g, 1, KILN_I32), kiln_lt(g, kk, diff));
    kiln_tensor zero = kiln_const(g, 0, kiln_tensor_dtype(g, x));
    return imp_set(c, n, 0, kiln_where(g, keep, x, zero), imp_in_dtype(c, n, 0));
}

const imp_op imp_ops_shape[] = {
    {"Reshape", reshape, "allowzero shape"}, {"Flatten", flatten, "axis"}, {"Transpose", transpose, "perm"},
    {"Squeeze", squeeze, "axes"}, {"Unsqueeze", unsqueeze, "axes"}, {"Concat", concat, "axis"},
    {"Split", split, "axis split num_outputs"}, {"Slice", slice, "starts ends axes"}, {"Gather", gather, "axis"},
    {"GatherElements", gather_elements, "axis"},
    {"Expand", expand, ""}, {"Tile", tile, ""}, {"Pad", pad, "mode pads value"}, {"Shape", shape, "start end"},
    {"Size", size, ""}, {"ConstantOfShape", const_of_shape, "value"},
    {"Constant", constant, "value value_float value_floats value_int value_ints"}, {"Range", range, ""},
    {"CumSum", cumsum, "exclusive reverse"}, {"Trilu", trilu, "upper"},
    {NULL, NULL, NULL},
};
