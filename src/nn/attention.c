/* attention.c — rotary position embedding and causal (grouped-query,
 * optionally sliding-window) attention, as primitive subgraphs.
 *
 * Invariants:
 *  - Positions come from an iota sliced at the symbolic offset pos / q_pos, so
 *    one graph serves every position of a KV cache.
 *  - rope computes its angles, sin and cos in f32 whatever x's dtype (an f16
 *    angle at position 1000 would be off by a radian), then casts them to x's
 *    dtype for the rotation.
 *  - Grouped-query heads are shared through reshape/expand views: no copy of
 *    k or v per query head.
 *  - Masked scores are replaced by a large negative finite value (never -inf),
 *    so softmax never forms inf - inf; every query row keeps its own key.
 *  - The score and output contractions use the canonical SUM(MUL(expand,
 *    expand)) form (see linalg.c); softmax is kiln_softmax.
 */
#include "nn_util.h"

/* angles (seq, d/2) in f32: (pos + i) * base^(-2j/d) */
static kiln_tensor rope_angles(kiln_graph *g, kiln_sym pos, kiln_sym seq, int64_t d, double base) {
    kiln_sym end = kiln_sym_add(g, pos, seq), half = kiln_sym_int(g, d / 2);
    kiln_tensor p = kiln_slice(g, kiln_iota(g, KILN_F32, 1, &end, 0), 0, pos, end, 1);
    kiln_tensor j = kiln_iota(g, KILN_F32, 1, &half, 0);
    kiln_tensor theta = kiln_exp2(g, nn_scale(g, j, -2.0 * log2(base) / (double)d));
    return kiln_mul(g, kiln_unsqueeze(g, p, 1), kiln_unsqueeze(g, theta, 0));
}

kiln_tensor kiln_rope(kiln_graph *g, kiln_tensor x, kiln_sym pos, double freq_base, kiln_rope_mode mode) {
    const char *fn = "kiln_rope";
    if (!nn_float(g, fn, x)) return KILN_NONE;
    if (kiln_ndim(g, x) != 3) {
        graph_error(g, KILN_ERR_SHAPE, "%s: x must be (seq, heads, head_dim)", fn);
        return KILN_NONE;
    }
    if (!(freq_base > 0.0) || (mode != KILN_ROPE_INTERLEAVED && mode != KILN_ROPE_NEOX)) {
        graph_error(g, KILN_ERR_INVALID, "%s: freq_base %g must be > 0 and mode %d known", fn, freq_base, (int)mode);
        return KILN_NONE;
    }
    int64_t pv;
    if (pos < 0 || (nn_const_dim(g, pos, &pv) && pv < 0)) {
        graph_error(g, KILN_ERR_INVALID, "%s: invalid position", fn);
        return KILN_NONE;
    }
    /* the pairing (and the reshape that interleaves the halves back) needs
     * the head size itself, so it must be a constant */
    kiln_sym seq = kiln_dim(g, x, 0), d = kiln_dim(g, x, 2);
    int64_t dv;
    if (!nn_const_dim(g, d, &dv) || dv % 2 != 0) {
        graph_error(g, KILN_ERR_SHAPE, "%s: head_dim must be a constant even size", fn);
        return KILN_NONE;
    }
    kiln_sym half = kiln_sym_int(g, dv / 2);
    kiln_tensor ang = rope_angles(g, pos, seq, dv, freq_base);
    /* cos a = 1 - 2 sin^2(a/2): no pi/2 shift that would round a large angle */
    kiln_tensor sh = kiln_sin(g, nn_scale(g, ang, 0.5));
    kiln_tensor cosv = nn_shift(g, nn_scale(g, kiln_mul(g, sh, sh), -2.0), 1.0);
    kiln_tensor sinv = kiln_sin(g, ang);
    kiln_dtype t = nn_dtype(g, x);
    cosv = kiln_unsqueeze(g, kiln_cast(g, cosv, t), 1); /* (seq, 1, d/2) */
    sinv = kiln_unsqueeze(g, kiln_cast(g, sinv, t), 1);

    kiln_sym zero = kiln_sym_int(g, 0);
    kiln_tensor x0, x1;
    if (mode == KILN_ROPE_INTERLEAVED) { /* pairs (x[2j], x[2j+1]) */
        x0 = kiln_slice(g, x, 2, zero, d, 2);
        x1 = kiln_slice(g, x, 2, kiln_sym_int(g, 1), d, 2);
    } else { /* pairs (x[j], x[j + d/2]) */
        x0 = kiln_slice(g, x, 2, zero, half, 1);
        x1 = kiln_slice(g, x, 2, half, d, 1);
    }
    kiln_tensor o0 = kiln_sub(g, kiln_mul(g, x0, cosv), kiln_mul(g, x1, sinv));
    kiln_tensor o1 = kiln_add(g, kiln_mul(g, x0, sinv), kiln_mul(g, x1, cosv));
    if (mode == KILN_ROPE_NEOX) return kiln_concat(g, o0, o1, 2);
    kiln_tensor st = nn_stack_last(g, fn, o0, o1); /* (seq, heads, d/2, 2) */
    kiln_sym shape[3] = {seq, kiln_dim(g, x, 1), d};
    return kiln_reshape(g, st, 3, shape);
}

/* allowed[i, j] (seq, kv) in dtype t: key j is visible to query i at
 * position q_pos + i when j <= q_pos + i and, with a window, q_pos + i - j < window */
static kiln_tensor causal_mask(kiln_graph *g, kiln_sym q_pos, kiln_sym seq, kiln_sym kv, int64_t window, kiln_dtype t) {
    kiln_sym end = kiln_sym_add(g, q_pos, seq);
    kiln_tensor qp = kiln_slice(g, kiln_iota(g, KILN_I32, 1, &end, 0), 0, q_pos, end, 1);
    qp = kiln_unsqueeze(g, qp, 1); /* (seq, 1) */
    kiln_sym ks[2] = {kiln_sym_int(g, 1), kv};
    kiln_tensor kj = kiln_iota(g, KILN_I32, 2, ks, 1); /* (1, kv) */
    kiln_tensor allowed = kiln_lt(g, kj, nn_shift(g, qp, 1.0));
    if (window > 0) {
        kiln_tensor dist = kiln_sub(g, qp, kj);
        allowed = kiln_mul(g, allowed, kiln_lt(g, dist, kiln_const(g, (double)window, KILN_I32)));
    }
    return kiln_cast(g, allowed, t);
}

kiln_tensor kiln_attention(kiln_graph *g, kiln_tensor q, kiln_tensor k, kiln_tensor v, kiln_sym q_pos, double scale,
                           int64_t window) {
    const char *fn = "kiln_attention";
    if (!nn_float(g, fn, q) || !nn_ok(g, fn, k) || !nn_ok(g, fn, v)) return KILN_NONE;
    if (kiln_ndim(g, q) != 3 || kiln_ndim(g, k) != 3 || kiln_ndim(g, v) != 3) {
        graph_error(g, KILN_ERR_SHAPE, "%s: need q (seq, hq, d), k and v (kv_len, hkv, d)", fn);
        return KILN_NONE;
    }
    kiln_sym seq = kiln_dim(g, q, 0), hq = kiln_dim(g, q, 1), d = kiln_dim(g, q, 2);
    kiln_sym kv = kiln_dim(g, k, 0), hkv = kiln_dim(g, k, 1);
    if (kiln_dim(g, k, 2) != d || kiln_dim(g, v, 0) != kv || kiln_dim(g, v, 1) != hkv) {
        char a[96], b[96], c[96];
        graph_error(g, KILN_ERR_SHAPE, "%s: q %s, k %s, v %s do not fit together", fn, kiln_shape_str(g, q, a, sizeof a),
                    kiln_shape_str(g, k, b, sizeof b), kiln_shape_str(g, v, c, sizeof c));
        return KILN_NONE;
    }
    int64_t hqv, hkvv, qpv;
    if (nn_const_dim(g, hq, &hqv) && nn_const_dim(g, hkv, &hkvv) && (hkvv < 1 || hqv % hkvv != 0)) {
        graph_error(g, KILN_ERR_SHAPE, "%s: %lld query heads are not a multiple of %lld kv heads", fn, (long long)hqv,
                    (long long)hkvv);
        return KILN_NONE;
    }
    if (q_pos < 0 || (nn_const_dim(g, q_pos, &qpv) && qpv < 0)) {
        graph_error(g, KILN_ERR_INVALID, "%s: invalid query position", fn);
        return KILN_NONE;
    }
    kiln_sym grp = kiln_sym_div(g, hq, hkv), one = kiln_sym_int(g, 1);
    kiln_tensor kt = nn_as(g, k, q), vt = nn_as(g, v, q);

    /* q (seq, hkv, grp, 1, d) * k (1, hkv, 1, kv, d) -> scores (seq, hkv, grp, kv) */
    kiln_sym qs[5] = {seq, hkv, grp, one, d};
    kiln_tensor q5 = kiln_reshape(g, q, 5, qs);
    static const int kperm[3] = {1, 0, 2};
    kiln_tensor k5 = kiln_unsqueeze(g, kiln_unsqueeze(g, kiln_permute(g, kt, kperm), 1), 0);
    kiln_tensor scores = nn_scale(g, kiln_sum(g, kiln_mul(g, q5, k5), -1), scale);

    /* masked = scores where allowed, else -big (arithmetic select: scores are finite) */
    kiln_dtype t = nn_dtype(g, q);
    double big = t == KILN_F16 ? nn_max_finite(t) : 1e30;
    kiln_tensor allowed = causal_mask(g, q_pos, seq, kv, window, t);
    kiln_sym ms[4] = {seq, one, one, kv};
    allowed = kiln_reshape(g, allowed, 4, ms);
    kiln_tensor neg = nn_scale(g, nn_shift(g, allowed, -1.0), big); /* 0 or -big */
    kiln_tensor masked = kiln_add(g, kiln_mul(g, scores, allowed), neg);
    kiln_tensor probs = kiln_softmax(g, masked, -1);

    /* probs (seq, hkv, grp, kv, 1) * v (1, hkv, 1, kv, dv) summed over kv */
    kiln_tensor v5 = kiln_unsqueeze(g, kiln_unsqueeze(g, kiln_permute(g, vt, kperm), 1), 0);
    kiln_tensor out = kiln_sum(g, kiln_mul(g, kiln_unsqueeze(g, probs, 4), v5), 3); /* (seq, hkv, grp, dv) */
    kiln_sym os[3] = {seq, hq, kiln_dim(g, v, 2)};
    return kiln_reshape(g, out, 3, os);
}
