/* attention_slots.c — causal attention for a batch of independent sequences,
 * one query row each, computed per sequence slot (kiln_attention_slots):
 * batched decoding over a few slots (kiln serve --parallel N, N <= 4).
 *
 * Invariants:
 *  - Same inputs and result as kiln_attention_rows (attention_rows.c): row b
 *    attends to keys 0 .. pos[b] of slot[b]'s cache, with the arithmetic of
 *    kiln_attention for that row alone (scores summed over the head
 *    dimension, the mask a comparison with the position, -big where masked,
 *    kiln_softmax, the output a SUM over the keys).
 *  - The caches (slots, kv_len, hkv, d) are read through views, so the
 *    contractions read them in place. kiln_attention_rows gathers each row's
 *    cache instead, and a gathered contraction operand gets a buffer: a copy
 *    of every row's keys and values per layer and step. Here only the
 *    queries and outputs are gathered (a row's few hundred floats).
 *  - The rows move to the slots and back by GATHERs of small tensors (the
 *    queries (rows, hq, d), the outputs (slots, hq, dv)): values are only
 *    copied, so nothing a row computes (not even inf or NaN) reaches
 *    another row. The gather indices come from a one-hot (slots, rows)
 *    matrix (slots distinct, the caller checks): srow[s] = sum over b of
 *    b * [slot[b] == s] and spos[s] = sum of pos[b] * [slot[b] == s], sums
 *    of small integers, exact in f32. A slot no row names takes row 0's
 *    query at position 0; its output is computed from its own cache and
 *    never gathered.
 *  - So a call costs the attention of every slot, used or not: for a few
 *    slots. (With 8 slots, the contractions' work split over the batch
 *    changed a row's rounding against the single program in
 *    tests/py/test_serve_batch.py; model_batch.c uses this form up to
 *    MODEL_BATCH_MAX_ROWS slots only.)
 *  - Grouped-query heads share keys through views, as in attention.c.
 */
#include "nn_util.h"

static int rows_i32(kiln_graph *g, const char *fn, kiln_tensor t, kiln_sym nb) {
    if (!nn_ok(g, fn, t)) return 0;
    if (nn_dtype(g, t) == KILN_I32 && kiln_ndim(g, t) == 1 && kiln_dim(g, t, 0) == nb) return 1;
    graph_error(g, KILN_ERR_SHAPE, "%s: positions and slots must be i32 (rows), one per query row", fn);
    return 0;
}

/* hit (ns, nb) f32: 1 where slot[b] == s, else 0 (slots distinct: at most
 * one 1 per column and per row) */
static kiln_tensor slot_hits(kiln_graph *g, kiln_tensor slot, kiln_sym ns) {
    kiln_sym one = kiln_sym_int(g, 1), ss[2] = {ns, one};
    kiln_tensor s = kiln_iota(g, KILN_I32, 2, ss, 0), rs = kiln_unsqueeze(g, slot, 0); /* (ns, 1), (1, nb) */
    return kiln_cast(g, nn_not01(g, kiln_add(g, kiln_lt(g, s, rs), kiln_lt(g, rs, s))), KILN_F32);
}

/* sum over b of hit[s, b] * x[b]: x (nb) f32 of small integers, exact */
static kiln_tensor per_slot(kiln_graph *g, kiln_tensor hit, kiln_tensor x) {
    return kiln_sum(g, kiln_mul(g, hit, kiln_unsqueeze(g, x, 0)), 1);
}

kiln_tensor kiln_attention_slots(kiln_graph *g, kiln_tensor q, kiln_tensor k, kiln_tensor v, kiln_tensor slot,
                                kiln_tensor pos, double scale, int64_t window) {
    const char *fn = "kiln_attention_slots";
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
    /* the slots' own sequences, read in place: (ns, kv, hkv, d) */
    kiln_tensor kt = nn_as(g, k, q), vt = nn_as(g, v, q);
    /* slot s's query and position (0 and 0 where no row names s) */
    kiln_tensor hit = slot_hits(g, slot, ns); /* (ns, nb) */
    kiln_tensor srow = kiln_cast(g, per_slot(g, hit, kiln_iota(g, KILN_F32, 1, &nb, 0)), KILN_I32);
    kiln_tensor spos = kiln_cast(g, per_slot(g, hit, kiln_cast(g, pos, KILN_F32)), KILN_I32);
    q = kiln_gather(g, q, srow); /* (ns, hq, d) */

    /* (ns, hq, dv): each slot's attention; then row b's slot's, (nb, hq, dv) */
    return kiln_gather(g, nn_attend_rows(g, q, kt, vt, v, spos, hq, hkv, grp, d, kv, scale, window), slot);
}
