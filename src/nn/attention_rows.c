/* attention_rows.c — rotary embedding and causal attention for a batch of
 * independent sequences, one query row each (batched decoding): row b has its
 * own position pos[b] and reads the keys of its own sequence slot[b].
 *
 * Invariants:
 *  - The arithmetic of a row is that of kiln_rope / kiln_attention for the
 *    same row alone: the angle is the position (an i32 cast to f32, exact
 *    below 2^24) times base^(-2j/d), cos a = 1 - 2 sin^2(a/2); the scores sum
 *    over the head dimension in the same order, the mask is a comparison of
 *    the key index with pos[b] (-big where masked, never -inf), softmax is
 *    kiln_softmax and the output a SUM over the keys.
 *  - No row reads another row's keys: keys come from a GATHER of the caches
 *    (slots, kv_len, hkv, d) by slot[b], which the kernels read in place
 *    (a gather is fused into its consumer, never materialised).
 *  - Grouped-query heads share keys through views, as in attention.c.
 */
#include "nn_util.h"

/* (nb, d/2) angles in f32 for positions pos (nb) i32 */
static kiln_tensor rows_angles(kiln_graph *g, kiln_tensor pos, int64_t d, double base) {
    kiln_sym half = kiln_sym_int(g, d / 2);
    kiln_tensor p = kiln_cast(g, pos, KILN_F32);
    kiln_tensor j = kiln_iota(g, KILN_F32, 1, &half, 0);
    kiln_tensor theta = kiln_exp2(g, nn_scale(g, j, -2.0 * log2(base) / (double)d));
    return kiln_mul(g, kiln_unsqueeze(g, p, 1), kiln_unsqueeze(g, theta, 0));
}

static int rows_i32(kiln_graph *g, const char *fn, kiln_tensor t, kiln_sym nb) {
    if (!nn_ok(g, fn, t)) return 0;
    if (nn_dtype(g, t) == KILN_I32 && kiln_ndim(g, t) == 1 && kiln_dim(g, t, 0) == nb) return 1;
    graph_error(g, KILN_ERR_SHAPE, "%s: positions and slots must be i32 (rows), one per query row", fn);
    return 0;
}

kiln_tensor kiln_rope_rows(kiln_graph *g, kiln_tensor x, kiln_tensor pos, double freq_base, kiln_rope_mode mode) {
    const char *fn = "kiln_rope_rows";
    if (!nn_float(g, fn, x)) return KILN_NONE;
    if (kiln_ndim(g, x) != 3) {
        graph_error(g, KILN_ERR_SHAPE, "%s: x must be (rows, heads, head_dim)", fn);
        return KILN_NONE;
    }
    if (!(freq_base > 0.0) || (mode != KILN_ROPE_INTERLEAVED && mode != KILN_ROPE_NEOX)) {
        graph_error(g, KILN_ERR_INVALID, "%s: freq_base %g must be > 0 and mode %d known", fn, freq_base, (int)mode);
        return KILN_NONE;
    }
    kiln_sym nb = kiln_dim(g, x, 0), d = kiln_dim(g, x, 2);
    if (!rows_i32(g, fn, pos, nb)) return KILN_NONE;
    int64_t dv;
    if (!nn_const_dim(g, d, &dv) || dv % 2 != 0) {
        graph_error(g, KILN_ERR_SHAPE, "%s: head_dim must be a constant even size", fn);
        return KILN_NONE;
    }
    kiln_sym half = kiln_sym_int(g, dv / 2), zero = kiln_sym_int(g, 0);
    kiln_tensor ang = rows_angles(g, pos, dv, freq_base);
    kiln_tensor sh = kiln_sin(g, nn_scale(g, ang, 0.5));
    kiln_tensor cosv = nn_shift(g, nn_scale(g, kiln_mul(g, sh, sh), -2.0), 1.0);
    kiln_tensor sinv = kiln_sin(g, ang);
    kiln_dtype t = nn_dtype(g, x);
    cosv = kiln_unsqueeze(g, kiln_cast(g, cosv, t), 1); /* (nb, 1, d/2) */
    sinv = kiln_unsqueeze(g, kiln_cast(g, sinv, t), 1);
    kiln_tensor x0, x1;
    if (mode == KILN_ROPE_INTERLEAVED) {
        x0 = kiln_slice(g, x, 2, zero, d, 2);
        x1 = kiln_slice(g, x, 2, kiln_sym_int(g, 1), d, 2);
    } else {
        x0 = kiln_slice(g, x, 2, zero, half, 1);
        x1 = kiln_slice(g, x, 2, half, d, 1);
    }
    kiln_tensor o0 = kiln_sub(g, kiln_mul(g, x0, cosv), kiln_mul(g, x1, sinv));
    kiln_tensor o1 = kiln_add(g, kiln_mul(g, x0, sinv), kiln_mul(g, x1, cosv));
    if (mode == KILN_ROPE_NEOX) return kiln_concat(g, o0, o1, 2);
    kiln_tensor st = nn_stack_last(g, fn, o0, o1); /* (nb, heads, d/2, 2) */
    kiln_sym shape[3] = {nb, kiln_dim(g, x, 1), d};
    return kiln_reshape(g, st, 3, shape);
}

/* the attention of n rows, each over its own sequence of keys: q (n, hq, d),
 * kt and vt (n, kv, hkv, d) and (n, kv, hkv, dv), row i attending to its
 * keys 0..pos[i] (and only the last `window` of them when window > 0);
 * (n, hq, dv). kiln_attention_rows and kiln_attention_slots share it */
kiln_tensor nn_attend_rows(kiln_graph *g, kiln_tensor q, kiln_tensor kt, kiln_tensor vt, kiln_tensor v, kiln_tensor pos,
                           kiln_sym hq, kiln_sym hkv, kiln_sym grp, kiln_sym d, kiln_sym kv, double scale,
                           int64_t window) {
    kiln_sym nb = kiln_dim(g, q, 0), one = kiln_sym_int(g, 1);
    /* q (nb, hkv, grp, 1, d) * k (nb, hkv, 1, kv, d) -> scores (nb, hkv, grp, kv) */
    kiln_sym qs[5] = {nb, hkv, grp, one, d};
    kiln_tensor q5 = kiln_reshape(g, q, 5, qs);
    static const int kperm[4] = {0, 2, 1, 3};
    kiln_tensor k5 = kiln_unsqueeze(g, kiln_permute(g, kt, kperm), 2);
    kiln_tensor scores = nn_scale(g, kiln_sum(g, kiln_mul(g, q5, k5), -1), scale);

    /* allowed[b, j] = j <= pos[b] (and pos[b] - j < window) */
    kiln_dtype t = nn_dtype(g, q);
    double big = t == KILN_F16 ? nn_max_finite(t) : 1e30;
    kiln_tensor qp = kiln_unsqueeze(g, pos, 1); /* (nb, 1) */
    kiln_sym ks[2] = {one, kv};
    kiln_tensor kj = kiln_iota(g, KILN_I32, 2, ks, 1); /* (1, kv) */
    kiln_tensor allowed = kiln_lt(g, kj, nn_shift(g, qp, 1.0));
    if (window > 0)
        allowed = kiln_mul(g, allowed, kiln_lt(g, kiln_sub(g, qp, kj), kiln_const(g, (double)window, KILN_I32)));
    allowed = kiln_cast(g, allowed, t);
    kiln_sym ms[4] = {nb, one, one, kv};
    allowed = kiln_reshape(g, allowed, 4, ms);
    kiln_tensor neg = nn_scale(g, nn_shift(g, allowed, -1.0), big);
    kiln_tensor masked = kiln_add(g, kiln_mul(g, scores, allowed), neg);
    kiln_tensor probs = kiln_softmax(g, masked, -1);

    /* probs (nb, hkv, grp, kv, 1) * v (nb, hkv, 1, kv, dv) summed over kv */
    kiln_tensor v5 = kiln_unsqueeze(g, kiln_permute(g, vt, kperm), 2);
    kiln_tensor out = kiln_sum(g, kiln_mul(g, kiln_unsqueeze(g, probs, 4), v5), 3); /* (nb, hkv, grp, dv) */
    kiln_sym os[3] = {nb, hq, kiln_dim(g, v, 3)};
    return kiln_reshape(g, out, 3, os);
}

kiln_tensor kiln_attention_rows(kiln_graph *g, kiln_tensor q, kiln_tensor k, kiln_tensor v, kiln_tensor slot,
                                kiln_tensor pos, double scale, int64_t window) {
    const char *fn = "kiln_attention_rows";
    if (!nn_float(g, fn, q) || !nn_ok(g, fn, k) || !nn_ok(g, fn, v)) return KILN_NONE;
    if (kiln_ndim(g, q) != 3 || kiln_ndim(g, k) != 4 || kiln_ndim(g, v) != 4) {
        graph_error(g, KILN_ERR_SHAPE, "%s: need q (rows, hq, d), k and v (slots, kv_len, hkv, d)", fn);
        return KILN_NONE;
    }
    kiln_sym nb = kiln_dim(g, q, 0), hq = kiln_dim(g, q, 1), d = kiln_dim(g, q, 2);
    kiln_sym ns = kiln_dim(g, k, 0), kv = kiln_dim(g, k, 1), hkv = kiln_dim(g, k, 2);
    if (kiln_dim(g, k, 3) != d || kiln_dim(g, v, 0) != ns || kiln_dim(g, v, 1) != kv || kiln_dim(g, v, 2) != hkv) {
        char a[96], b[96], c[96];
        graph_error(g, KILN_ERR_SHAPE, "%s: q %s, k %s, v %s do not fit together", fn, kiln_shape_str(g, q, a, sizeof a),
                    kiln_shape_str(g, k, b, sizeof b), kiln_shape_str(g, v, c, sizeof c));
        return KILN_NONE;
    }
    if (!rows_i32(g, fn, pos, nb) || !rows_i32(g, fn, slot, nb)) return KILN_NONE;
    int64_t hqv, hkvv;
    if (nn_const_dim(g, hq, &hqv) && nn_const_dim(g, hkv, &hkvv) && (hkvv < 1 || hqv % hkvv != 0)) {
        graph_error(g, KILN_ERR_SHAPE, "%s: %lld query heads are not a multiple of %lld kv heads", fn, (long long)hqv,
                    (long long)hkvv);
        return KILN_NONE;
    }
    kiln_sym grp = kiln_sym_div(g, hq, hkv);
    /* each row's own sequence: (nb, kv, hkv, d), read in place by the kernels */
    kiln_tensor kt = kiln_gather(g, nn_as(g, k, q), slot), vt = kiln_gather(g, nn_as(g, v, q), slot);

    return nn_attend_rows(g, q, kt, vt, v, pos, hq, hkv, grp, d, kv, scale, window);
}
