/* kiln_gguf.h — GGUF files from outside the library: kiln's view of a file
 * as JSON, and a writer that builds a file in memory (metadata and tensors)
 * and writes it atomically. Tests and bindings write small models with it.
 * Include after kiln.h (it includes it).
 *
 * Invariants: every function checks its arguments (NULL, unknown types,
 * sizes that do not match a shape) and returns a status; a failed add
 * changes nothing and its message is in kiln_gguf_writer_error.
 */
#ifndef KILN_GGUF_PUBLIC_H
#define KILN_GGUF_PUBLIC_H

#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GGUF's metadata value types, with the values of the specification */
typedef enum kiln_gguf_type {
    KILN_GGUF_U8 = 0, KILN_GGUF_I8, KILN_GGUF_U16, KILN_GGUF_I16, KILN_GGUF_U32, KILN_GGUF_I32,
    KILN_GGUF_F32, KILN_GGUF_BOOL, KILN_GGUF_STRING, KILN_GGUF_ARRAY, KILN_GGUF_U64, KILN_GGUF_I64,
    KILN_GGUF_F64
} kiln_gguf_type;

enum {
    KILN_GGUF_OPEN_READ = 1,              /* read the file into memory instead of mapping it */
    KILN_GGUF_OPEN_ALLOW_UNSUPPORTED = 2  /* list tensor types kiln cannot compute instead of failing */
};

/* open path (flags above) and describe it as JSON: header, metadata (strings
 * byte by byte: printable ASCII as is, other bytes as \u00XX), tensors with
 * their offsets and FNV-1a hashes; on failure {"error": ..., "status": ...}.
 * malloc'd: kiln_free. */
KILN_API char *kiln_gguf_dump_json(const char *path, unsigned flags);

typedef struct kiln_gguf_writer kiln_gguf_writer;

KILN_API kiln_gguf_writer *kiln_gguf_writer_new(void);
KILN_API void kiln_gguf_writer_free(kiln_gguf_writer *w);
KILN_API const char *kiln_gguf_writer_error(const kiln_gguf_writer *w);
/* a scalar: value points to the C type of `type` (uint8_t ... double; BOOL
 * is one uint8_t 0/1; STRING is a NUL-terminated const char *) */
KILN_API kiln_status kiln_gguf_writer_add(kiln_gguf_writer *w, const char *key, kiln_gguf_type type, const void *value);
/* a string of any bytes (NULs included) */
KILN_API kiln_status kiln_gguf_writer_add_str_n(kiln_gguf_writer *w, const char *key, const char *v, uint64_t len);
/* a numeric or bool array: data is a packed C array of elem's type */
KILN_API kiln_status kiln_gguf_writer_add_array(kiln_gguf_writer *w, const char *key, kiln_gguf_type elem,
                                                const void *data, uint64_t n);
/* a string array; lens may be NULL for NUL-terminated strings */
KILN_API kiln_status kiln_gguf_writer_add_str_array(kiln_gguf_writer *w, const char *key, const char *const *strs,
                                                    const uint64_t *lens, uint64_t n);
/* a tensor of raw bytes (copied) in a ggml type; dims outermost first */
KILN_API kiln_status kiln_gguf_writer_add_tensor(kiln_gguf_writer *w, const char *name, uint32_t ggml_type, int ndim,
                                                 const int64_t *dims, const void *data, uint64_t bytes);
/* a tensor from f32 values converted to dtype (f32, f16, bf16 or a block format) */
KILN_API kiln_status kiln_gguf_writer_add_tensor_f32(kiln_gguf_writer *w, const char *name, kiln_dtype dtype,
                                                     int ndim, const int64_t *dims, const float *data);
/* write the file: a temporary file next to path, then renamed over it */
KILN_API kiln_status kiln_gguf_writer_write(kiln_gguf_writer *w, const char *path);

#ifdef __cplusplus
}
#endif
#endif
