/* onnx_ops_einsum.c — ONNX's Einsum over views, MUL and SUM.
 *
 * The equation ("ij,jk->ik", "...ii->...i", "i,i", implicit outputs) is
 * parsed into a label per axis (ellipsis axes get labels of their own,
 * right-aligned across operands). A label repeated within one operand is its
 * diagonal: the two axes moved last, merged, and sliced with step n + 1 (a
 * view). Operands are then folded left to right: each product is
 * SUM(MUL(a, b)) over the labels that neither the output nor a later operand
 * has (merged into one axis), the operands permuted and given size-1 axes
 * for the labels they lack, so the builder's broadcast makes the canonical
 * contraction form. A lone operand's labels missing from the output are
 * summed away; the result is permuted into the output's order.
 *
 * Invariants: every size is the same wherever a label appears; f16/bf16 are
 * computed in f32 and rounded once; anything else is an error naming it.
 */
#include <ctype.h>
#include <string.h>

#include "graph.h"
#include "nn_util.h"
#include "onnx_imp.h"

#define EIN_MAX_OPS 8
#define EIN_ELL 64 /* ellipsis axis e has label EIN_ELL + e (letters are below) */

typedef struct term {
    int nl;
    int lab[KILN_MAX_DIMS * 2]; /* label per axis, ellipsis expanded */
} term;

static int label_of(char ch) { return isupper((unsigned char)ch) ? ch - 'A' : ch - 'a' + 26; }

/* one term's text [s, e) into labels, the ellipsis taking `ell` axes ending at
 * ellipsis label EIN_ELL + nell - 1; returns 0 on a malformed term */
static int parse_term(const char *s, const char *e, int ell, int nell, term *t, int *has_ell) {
    t->nl = 0;
    *has_ell = 0;
    for (const char *p = s; p < e; p++) {
        if (*p == ' ') continue;
        if (*p == '.') {
            if (e - p < 3 || p[1] != '.' || p[2] != '.' || *has_ell) return 0;
            *has_ell = 1;
            for (int i = 0; i < ell; i++) {
                if (t->nl >= KILN_MAX_DIMS * 2) return 0;
                t->lab[t->nl++] = EIN_ELL + nell - ell + i;
            }
            p += 2;
        } else if (isalpha((unsigned char)*p)) {
            if (t->nl >= KILN_MAX_DIMS * 2) return 0;
            t->lab[t->nl++] = label_of(*p);
        } else return 0;
    }
    return 1;
}

/* letters of a term's text (the ellipsis not counted) */
static int letters(const char *s, const char *e) {
    int n = 0;
    for (const char *p = s; p < e; p++) n += isalpha((unsigned char)*p) != 0;
    return n;
}

static int has(const term *t, int l) {
    for (int i = 0; i < t->nl; i++)
        if (t->lab[i] == l) return 1;
    return 0;
}

/* x with labels t: repeated labels reduced to their diagonal */
static kiln_tensor diagonals(imp_ctx *c, kiln_tensor x, term *t) {
    kiln_graph *g = c->g;
    for (int p = 0; p < t->nl; p++)
        for (int q = p + 1; q < t->nl; q++) {
            if (t->lab[p] != t->lab[q]) continue;
            int r = t->nl, perm[KILN_MAX_DIMS], j = 0;
            int64_t n = imp_dim_const(c, x, p);
            if (n < 0 || imp_dim_const(c, x, q) != n) {
                imp_fail(c, KILN_ERR_UNSUPPORTED, "Einsum: a diagonal of symbolic or unequal sizes");
                return KILN_NONE;
            }
            for (int d = 0; d < r; d++)
                if (d != p && d != q) perm[j++] = d;
            perm[j++] = p;
            perm[j++] = q;
            x = kiln_permute(g, x, perm);
            kiln_sym dims[KILN_MAX_DIMS];
            for (int d = 0; d < r - 2; d++) dims[d] = kiln_dim(g, x, d);
            dims[r - 2] = kiln_sym_int(g, n * n);
            x = kiln_reshape(g, x, r - 1, dims);
            x = kiln_slice(g, x, r - 2, kiln_sym_int(g, 0), kiln_sym_int(g, n * n), n + 1);
            int lab = t->lab[p], nl[KILN_MAX_DIMS * 2], k = 0;
            for (int d = 0; d < r; d++)
                if (d != p && d != q) nl[k++] = t->lab[d];
            nl[k++] = lab;
            memcpy(t->lab, nl, sizeof(int) * (size_t)k);
            t->nl = k;
            p = -1; /* start again: the axes moved */
            break;
        }
    return x;
}

/* x (labels t) as the labels `order` (n of them), size 1 where t lacks one */
static kiln_tensor align(imp_ctx *c, kiln_tensor x, const term *t, const int *order, int n) {
    kiln_graph *g = c->g;
    int perm[KILN_MAX_DIMS], j = 0;
    kiln_sym dims[KILN_MAX_DIMS];
    for (int i = 0; i < n; i++)
        for (int d = 0; d < t->nl; d++)
            if (t->lab[d] == order[i]) perm[j++] = d;
    if (j) x = kiln_permute(g, x, perm);
    for (int i = 0, k = 0; i < n; i++) dims[i] = has(t, order[i]) ? kiln_dim(g, x, k++) : kiln_sym_int(g, 1);
    return kiln_reshape(g, x, n, dims);
}

/* a (labels ta) times b (labels tb, or none), summed over `sum` labels; the
 * result's labels in *out */
static kiln_tensor fold(imp_ctx *c, kiln_tensor a, const term *ta, kiln_tensor b, const term *tb, const int *keep,
                        int nkeep, const int *sum, int nsum, term *out) {
    kiln_graph *g = c->g;
    int order[KILN_MAX_DIMS * 2], n = 0;
    for (int i = 0; i < nkeep; i++) order[n++] = keep[i];
    for (int i = 0; i < nsum; i++) order[n++] = sum[i];
    if (n > KILN_MAX_DIMS) {
        imp_fail(c, KILN_ERR_UNSUPPORTED, "Einsum: %d labels in one product", n);
        return KILN_NONE;
    }
    kiln_tensor y = align(c, a, ta, order, n);
    if (tb) y = kiln_mul(g, y, align(c, b, tb, order, n));
    if (nsum) {
        kiln_sym dims[KILN_MAX_DIMS], s = kiln_sym_int(g, 1);
        for (int i = 0; i < nkeep; i++) dims[i] = kiln_dim(g, y, i);
        for (int i = 0; i < nsum; i++) s = kiln_sym_mul(g, s, kiln_dim(g, y, nkeep + i));
        dims[nkeep] = s;
        y = kiln_sum(g, kiln_reshape(g, y, nkeep + 1, dims), -1);
    }
    out->nl = nkeep;
    memcpy(out->lab, keep, sizeof(int) * (size_t)nkeep);
    return y;
}

static int einsum(imp_ctx *c, const ox_node *n) {
    kiln_graph *g = c->g;
    const char *eq = imp_attr_s(n, "equation", NULL);
    if (!eq) return imp_fail(c, KILN_ERR_INVALID, "Einsum without an equation");
    int nops = n->n_in, dt = imp_in_dtype(c, n, 0);
    if (nops < 1 || nops > EIN_MAX_OPS) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Einsum with %d operands", nops);
    kiln_tensor x[EIN_MAX_OPS];
    int nell = 0;
    kiln_dtype kdt = kiln_tensor_dtype(g, imp_in(c, n, 0));
    for (int i = 0; i < nops; i++) {
        x[i] = imp_in(c, n, i);
        if (!imp_check(c, x[i])) return 0;
        if (imp_in_dtype(c, n, i) != dt) return imp_fail(c, KILN_ERR_INVALID, "Einsum: operands of different types");
    }
    if (!imp_is_float_onnx(dt) && dt != OX_INT32 && dt != OX_INT64)
        return imp_fail(c, KILN_ERR_UNSUPPORTED, "Einsum on %s", ox_dtype_name(dt));
    /* split the terms */
    const char *arrow = strstr(eq, "->"), *end = arrow ? arrow : eq + strlen(eq);
    const char *ts[EIN_MAX_OPS], *te[EIN_MAX_OPS];
    int nt = 0;
    for (const char *p = eq;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        if (nt == EIN_MAX_OPS) return imp_fail(c, KILN_ERR_INVALID, "Einsum: equation '%s'", eq);
        ts[nt] = p;
        te[nt++] = comma ? comma : end;
        if (!comma) break;
        p = comma + 1;
    }
    if (nt != nops) return imp_fail(c, KILN_ERR_INVALID, "Einsum: '%s' has %d terms for %d inputs", eq, nt, nops);
    for (int i = 0; i < nops; i++) {
        int ell = kiln_ndim(g, x[i]) - letters(ts[i], te[i]);
        if (ell > nell) nell = ell;
    }
    term t[EIN_MAX_OPS], out;
    int count[EIN_ELL + KILN_MAX_DIMS] = {0}, used_ell = 0;
    for (int i = 0; i < nops; i++) {
        int he, ell = kiln_ndim(g, x[i]) - letters(ts[i], te[i]);
        if (ell < 0 || !parse_term(ts[i], te[i], ell, nell, &t[i], &he) || (!he && ell) || t[i].nl != kiln_ndim(g, x[i]))
            return imp_fail(c, KILN_ERR_INVALID, "Einsum: term %d of '%s' does not fit an input of rank %d", i, eq,
                            kiln_ndim(g, x[i]));
        used_ell |= he;
        for (int d = 0; d < t[i].nl; d++) count[t[i].lab[d]]++;
    }
    if (arrow) {
        int he;
        if (!parse_term(arrow + 2, arrow + strlen(arrow), nell, nell, &out, &he))
            return imp_fail(c, KILN_ERR_INVALID, "Einsum: output of '%s'", eq);
        for (int d = 0; d < out.nl; d++)
            if (!count[out.lab[d]]) return imp_fail(c, KILN_ERR_INVALID, "Einsum: '%s' outputs a label no input has", eq);
    } else { /* implicit: the ellipsis, then the labels seen once, in order */
        out.nl = 0;
        for (int e = 0; used_ell && e < nell; e++) out.lab[out.nl++] = EIN_ELL + e;
        for (int l = 0; l < EIN_ELL; l++)
            if (count[l] == 1) out.lab[out.nl++] = l;
    }
    if (out.nl > KILN_MAX_DIMS) return imp_fail(c, KILN_ERR_UNSUPPORTED, "Einsum: output of rank %d", out.nl);
    for (int i = 0; i < nops; i++) {
        if (dt == OX_FLOAT16 || dt == OX_BFLOAT16) x[i] = kiln_cast(g, x[i], KILN_F32);
        x[i] = diagonals(c, x[i], &t[i]);
        if (!imp_check(c, x[i])) return 0;
    }
    /* fold left to right */
    kiln_tensor acc = x[0];
    term at = t[0];
    for (int i = 0; i < nops; i++) {
        const term *tb = i ? &t[i] : NULL;
        int keep[KILN_MAX_DIMS * 2], sum[KILN_MAX_DIMS * 2], nk = 0, ns = 0, seen[EIN_ELL + KILN_MAX_DIMS] = {0};
        for (int s = 0; s < 2; s++) {
            const term *tt = s ? tb : &at;
            for (int d = 0; tt && d < tt->nl; d++) {
                int l = tt->lab[d], later = has(&out, l);
                if (seen[l]++) continue;
                for (int j = i + 1; j < nops && !later; j++) later = has(&t[j], l);
                if (later) keep[nk++] = l;
                else sum[ns++] = l;
            }
        }
        if (!tb && !ns) continue;
        term nt2;
        acc = fold(c, acc, &at, i ? x[i] : KILN_NONE, tb, keep, nk, sum, ns, &nt2);
        if (!imp_check(c, acc)) return 0;
        at = nt2;
    }
    int perm[KILN_MAX_DIMS];
    for (int d = 0; d < out.nl; d++)
        for (int j = 0; j < at.nl; j++)
            if (at.lab[j] == out.lab[d]) perm[d] = j;
    if (out.nl) acc = kiln_permute(g, acc, perm);
    if (kiln_tensor_dtype(g, acc) != kdt) acc = kiln_cast(g, acc, kdt);
    return imp_set(c, n, 0, acc, dt);
}

const imp_op imp_ops_einsum[] = {
    {"Einsum", einsum, "equation"},
    {NULL, NULL, NULL},
};
