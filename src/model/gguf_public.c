/* gguf_public.c — include/kiln_gguf.h over the writer of gguf.h: the
 * public names and enum, and NULL checks (the internal writer asserts).
 *
 * Invariant: a kiln_gguf_writer is a gguf_writer; kiln_gguf_type has
 * gguf_type's values (both are the specification's).
 */
#include "gguf.h"
#include "kiln_gguf.h"

_Static_assert((int)KILN_GGUF_F64 == (int)GGUF_TYPE_FLOAT64 && (int)KILN_GGUF_STRING == (int)GGUF_TYPE_STRING &&
                   (int)KILN_GGUF_BOOL == (int)GGUF_TYPE_BOOL,
               "kiln_gguf_type follows gguf_type");
_Static_assert((int)KILN_GGUF_OPEN_READ == (int)GGUF_OPEN_READ &&
                   (int)KILN_GGUF_OPEN_ALLOW_UNSUPPORTED == (int)GGUF_OPEN_ALLOW_UNSUPPORTED,
               "open flags");

#define W(w) ((gguf_writer *)(w))

kiln_gguf_writer *kiln_gguf_writer_new(void) { return (kiln_gguf_writer *)gguf_writer_new(); }
void kiln_gguf_writer_free(kiln_gguf_writer *w) { gguf_writer_free(W(w)); }
const char *kiln_gguf_writer_error(const kiln_gguf_writer *w) {
    return w ? gguf_writer_error((const gguf_writer *)w) : "kiln_gguf_writer: no writer";
}

kiln_status kiln_gguf_writer_add(kiln_gguf_writer *w, const char *key, kiln_gguf_type type, const void *value) {
    if (!w || !key || !value) return KILN_ERR_INVALID;
    return gguf_writer_add(W(w), key, (gguf_type)type, value);
}

kiln_status kiln_gguf_writer_add_str_n(kiln_gguf_writer *w, const char *key, const char *v, uint64_t len) {
    if (!w || !key || (!v && len)) return KILN_ERR_INVALID;
    return gguf_writer_add_str_n(W(w), key, v ? v : "", len);
}

kiln_status kiln_gguf_writer_add_array(kiln_gguf_writer *w, const char *key, kiln_gguf_type elem, const void *data,
                                       uint64_t n) {
    if (!w || !key || (!data && n)) return KILN_ERR_INVALID;
    return gguf_writer_add_array(W(w), key, (gguf_type)elem, data, n);
}

kiln_status kiln_gguf_writer_add_str_array(kiln_gguf_writer *w, const char *key, const char *const *strs,
                                           const uint64_t *lens, uint64_t n) {
    if (!w || !key || (!strs && n)) return KILN_ERR_INVALID;
    return gguf_writer_add_str_array(W(w), key, strs, lens, n);
}

kiln_status kiln_gguf_writer_add_tensor(kiln_gguf_writer *w, const char *name, uint32_t ggml_type, int ndim,
                                        const int64_t *dims, const void *data, uint64_t bytes) {
    if (!w || !name || (!dims && ndim) || (!data && bytes)) return KILN_ERR_INVALID;
    return gguf_writer_add_tensor(W(w), name, ggml_type, ndim, dims, data, bytes);
}

kiln_status kiln_gguf_writer_add_tensor_f32(kiln_gguf_writer *w, const char *name, kiln_dtype dtype, int ndim,
                                            const int64_t *dims, const float *data) {
    if (!w || !name || (!dims && ndim) || !data) return KILN_ERR_INVALID;
    return gguf_writer_add_tensor_f32(W(w), name, dtype, ndim, dims, data);
}

kiln_status kiln_gguf_writer_write(kiln_gguf_writer *w, const char *path) {
    if (!w || !path) return KILN_ERR_INVALID;
    return gguf_writer_write(W(w), path);
}
