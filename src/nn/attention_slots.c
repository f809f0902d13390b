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
 *  - The rows move to the slots by SCATTERs of small tensors into zeros
 *    (the queries (rows, hq, d) and positions (rows) to (slots, hq, d) and
 *    (slots); slots distinct, the caller checks) and back by a GATHER of
 *    the outputs (slots, hq, dv): values are only copied, so nothing a row
 *    computes (not even inf or NaN) reaches another row. A scatter is a
 *    buffer of its own (kernelize.c), so the attention's stream kernel
 *    reads a slot's query, position and cache by plain loads, affine in
 *    the slot: the stream tile's form (src/sched/stream_tile.c), as the
 *    single program's decode, so a row's sums are the same. A slot no row
 *    names has a zero query at position 0; its output is computed from its
 *    own cache and never gathered.
 *  - So a call costs the attention of every slot, used or not (a slot no
 *    row names at one key, its other key blocks masked and skipped by the
 *    stream kernel): model_batch.c uses this form up to
 *    MODEL_BATCH_SLOTS_PER_SLOT slots, in the streaming form only (the
 *    materialised form's contractions over 8 slots rounded a row
 *    differently from the single program).
 *  - Grouped-query heads share keys through views, as in attention.c.
 */
#include "nn_util.h"

static int rows_i32(kiln_graph *g, const char *fn, kiln_tensor t, kiln_sym nb) {
    if (!nn_ok(g, fn, t)) return 0;
    if (nn_dtype(g, t) == KILN_I32 && kiln_ndim(g, t) == 1 && kiln_dim(g, t, 0) == nb) return 1;
    graph_error(g, KILN_ERR_SHAPE, "%s: positions and slots must be i32 (rows), one per query row", fn);
    return 0;
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
    /* slot s's query (ns, hq, d) and position (ns): row b's scattered to
     * slot[b], zeros where no row names s */
    kiln_sym qz[3] = {ns, hq, d};
    kiln_tensor qs = kiln_scatter(g, kiln_full(g, 0.0, nn_dtype(g, q), 3, qz), slot, q);
    kiln_tensor spos = kiln_scatter(g, kiln_full(g, 0.0, KILN_I32, 1, &ns), slot, pos);

    /* (ns, hq, dv): each slot's attention; then row b's slot's, (nb, hq, dv) */
    return kiln_gather(g, nn_attend_rows(g, qs, kt, vt, v, spos, hq, hkv, grp, d, kv, scale, window), slot);
}
