/* llm_batch.c — include/kiln_llm.h's several sequences over model_batch
 * (model.h): slots' caches as views of one buffer, a slot's forward pass on
 * its view, and the batched decode of one token per slot.
 *
 * Invariants: a call on a slot binds that slot's view; kiln_llm_decode
 * (llm.c) runs on whatever cache the last call bound, so these calls end by
 * binding the model's own cache back.
 */
#include "llm.h"

kiln_status kiln_llm_slots(kiln_llm *m, int n_slots) {
    if (!m) return KILN_ERR_INVALID;
    if (n_slots < 1 || n_slots > 4096) return llm_fail(m, KILN_ERR_RANGE, "kiln_llm_slots: %d slots (1 .. 4096)", n_slots);
    if (m->gen_active) llm_gen_end(m);
    model_kv_use(m->model, NULL);
    model_batch_free(m->batch);
    m->batch = model_batch_new(m->model, n_slots);
    return KILN_OK;
}

kiln_status kiln_llm_decode_slot(kiln_llm *m, int slot, const int32_t *tokens, int n, int pos, float *logits) {
    if (!m) return KILN_ERR_INVALID;
    model_kv *kv = model_batch_kv(m->batch, slot);
    if (!kv) return llm_fail(m, KILN_ERR_RANGE, "kiln_llm_decode_slot: no slot %d (kiln_llm_slots makes them)", slot);
    if (m->gen_active) llm_gen_end(m);
    kiln_status s = model_kv_use(m->model, kv);
    if (!s) s = model_forward(m->model, tokens, n, pos, logits);
    if (s) llm_fail(m, s, "%s", model_error(m->model));
    model_kv_use(m->model, NULL);
    return s;
}

kiln_status kiln_llm_decode_batch(kiln_llm *m, int nb, const int32_t *slots, const int32_t *tokens, const int32_t *pos,
                                  float *logits) {
    if (!m) return KILN_ERR_INVALID;
    if (!m->batch) return llm_fail(m, KILN_ERR_INVALID, "kiln_llm_decode_batch: no slots (kiln_llm_slots makes them)");
    if (m->gen_active) llm_gen_end(m);
    kiln_status s = model_batch_decode(m->batch, nb, slots, tokens, pos, logits);
    if (s) llm_fail(m, s, "%s", model_batch_error(m->batch));
    return s;
}
