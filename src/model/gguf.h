/* gguf.h — GGUF v3 files: a checked reader (mapped or read into memory), a
 * metadata API, and a writer that builds files in memory and writes them
 * atomically.
 *
 * Layout of a GGUF file (little-endian): magic "GGUF", u32 version, u64
 * tensor count, u64 metadata count; metadata entries (string key, u32 type,
 * value); tensor infos (string name, u32 n_dims, u64 ne[n_dims] innermost
 * first, u32 ggml type, u64 offset into the data section); padding to the
 * alignment (metadata "general.alignment", default 32); the data section.
 * A string is a u64 length followed by that many bytes (no NUL).
 *
 * Invariants of a gguf_file that gguf_open returned:
 *  - every offset, count, length, dimension, size and alignment was checked
 *    against the file size with overflow-safe arithmetic: each kv value and
 *    each tensor's bytes lie inside the file; nothing later reads outside it;
 *  - keys and tensor names are unique and contain no NUL byte;
 *  - tensor dims are in kiln order (outermost first: dims[ndim-1] is GGUF's
 *    ne[0], the row length), and the row length is a multiple of the type's
 *    block size;
 *  - without GGUF_ALLOW_UNSUPPORTED every tensor has a kiln dtype.
 * Strings (gguf_str) point into the file's bytes and are not NUL-terminated;
 * they stay valid until gguf_close. Getters keep their last error message in
 * the file (gguf_error): a gguf_file is not meant to be shared across threads
 * while its getters fail.
 */
#ifndef KILN_GGUF_H
#define KILN_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "kiln.h"
#include "kiln_gguf.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define GGUF_VERSION 3
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4 /* ggml's GGML_MAX_DIMS */

typedef enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_type;

/* ggml tensor types kiln computes with (the others are only named/sized) */
enum {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_BF16 = 30
};

typedef struct gguf_str {
    const char *ptr; /* into the file; not NUL-terminated */
    uint64_t len;
} gguf_str;

typedef struct gguf_kv {
    char *key;            /* NUL-terminated copy */
    gguf_type type;       /* GGUF_TYPE_ARRAY for arrays */
    gguf_type elem;       /* arrays: element type; scalars: == type */
    uint64_t count;       /* arrays: elements; scalars: 1 */
    const uint8_t *data;  /* numeric scalars and arrays: little-endian values in the file */
    gguf_str *strs;       /* STRING: 1 entry; string arrays: count entries; else NULL */
    uint64_t offset;      /* file offset of the entry (for messages) */
} gguf_kv;

typedef struct gguf_tensor {
    char *name;                     /* NUL-terminated copy */
    uint32_t ggml_type;
    kiln_dtype dtype;               /* KILN_DTYPE_COUNT: no kiln dtype (GGUF_ALLOW_UNSUPPORTED) */
    int ndim;
    int64_t dims[GGUF_MAX_DIMS];    /* kiln order, outermost first */
    int64_t numel;
    uint64_t offset;                /* from the start of the data section */
    uint64_t bytes;
    const void *data;               /* into the file */
} gguf_tensor;

typedef struct gguf_file gguf_file;

enum {
    GGUF_OPEN_READ = 1,              /* read the file into memory instead of mapping it */
    GGUF_OPEN_ALLOW_UNSUPPORTED = 2  /* list tensor types kiln cannot compute instead of failing */
};

/* open and check a file; on failure *out is NULL and err holds a message
 * naming the field and its file offset */
kiln_status gguf_open(const char *path, unsigned flags, gguf_file **out, char *err, size_t cap);
/* the same checks on a caller-owned buffer, which must outlive the file
 * (used by tests and the fuzz target); GGUF_OPEN_READ copies it */
kiln_status gguf_open_memory(const void *data, size_t size, unsigned flags, gguf_file **out, char *err, size_t cap);
void gguf_close(gguf_file *f);
/* let the pages of [p, p + n), bytes of the file, go while keeping them
 * readable with the same contents (a file mapping over them): for weights
 * a compiled program no longer reads (kiln_graph_on_weight_release) */
void gguf_release(gguf_file *f, const void *p, size_t n);

uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_alignment(const gguf_file *f);
uint64_t gguf_data_offset(const gguf_file *f); /* file offset of the data section */
const uint8_t *gguf_bytes(const gguf_file *f, uint64_t *size); /* the whole file */
const char *gguf_error(const gguf_file *f);   /* the last getter error, "" if none */

/* ---- metadata ------------------------------------------------------------ */
int64_t gguf_kv_count(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, int64_t i);
const gguf_kv *gguf_find(const gguf_file *f, const char *key); /* NULL if absent */
const char *gguf_type_name(gguf_type t);

/* Typed getters. Absent key: KILN_ERR_FORMAT ("missing key"); wrong type:
 * KILN_ERR_FORMAT; value outside [lo, hi]: KILN_ERR_RANGE. Integers of every
 * width convert; floats read f32 or f64 (and integers). The *_or forms give
 * dflt for an absent key and fail only on a present, bad value. */
kiln_status gguf_get_int(gguf_file *f, const char *key, int64_t lo, int64_t hi, int64_t *out);
kiln_status gguf_get_int_or(gguf_file *f, const char *key, int64_t lo, int64_t hi, int64_t dflt, int64_t *out);
kiln_status gguf_get_u64(gguf_file *f, const char *key, uint64_t *out);
kiln_status gguf_get_float(gguf_file *f, const char *key, double *out);
kiln_status gguf_get_float_or(gguf_file *f, const char *key, double dflt, double *out);
kiln_status gguf_get_bool(gguf_file *f, const char *key, int *out);
kiln_status gguf_get_bool_or(gguf_file *f, const char *key, int dflt, int *out);
kiln_status gguf_get_str(gguf_file *f, const char *key, gguf_str *out);
/* a string that names something (architecture, tokenizer, scaling type):
 * as gguf_get_str, and one with a NUL byte is refused (KILN_ERR_FORMAT), since
 * it would read as its prefix wherever a C string is compared or printed;
 * strings in general may hold any bytes */
kiln_status gguf_get_name(gguf_file *f, const char *key, gguf_str *out);
/* an array: its element type and count */
kiln_status gguf_get_array(gguf_file *f, const char *key, gguf_type *elem, uint64_t *count);

/* element i of an array kv (i < count; checked); integers and bools read as
 * int64 (a u64 above INT64_MAX is KILN_ERR_RANGE), floats (and ints) as double */
kiln_status gguf_arr_int(const gguf_kv *kv, uint64_t i, int64_t *out);
kiln_status gguf_arr_float(const gguf_kv *kv, uint64_t i, double *out);
kiln_status gguf_arr_str(const gguf_kv *kv, uint64_t i, gguf_str *out);
/* 1 if s equals the NUL-terminated text */
int gguf_str_eq(gguf_str s, const char *text);

/* ---- tensors ------------------------------------------------------------- */
int64_t gguf_tensor_count(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name); /* NULL if absent */
/* ggml type names ("Q4_K") and block layout; 0 / NULL for unknown types */
const char *gguf_ggml_type_name(uint32_t ggml_type);
int gguf_ggml_type_layout(uint32_t ggml_type, uint32_t *block, uint32_t *block_bytes);
/* kiln dtype of a ggml type, or KILN_DTYPE_COUNT; and back (UINT32_MAX if none) */
kiln_dtype gguf_ggml_to_dtype(uint32_t ggml_type);
uint32_t gguf_dtype_to_ggml(kiln_dtype t);

/* ---- text ---------------------------------------------------------------- */
/* the header, metadata and tensor table as JSON (malloc'd). Strings are
 * written byte by byte: printable ASCII as is, every other byte as \u00XX,
 * so that decoding the JSON and encoding as latin-1 gives the exact bytes.
 * Each tensor carries its absolute file offset and the FNV-1a 64 hash of its
 * bytes. */
char *gguf_dump_json(const gguf_file *f);
/* kiln_gguf_dump_json (open and dump a path) is public: include/kiln_gguf.h */

/* ---- writer -------------------------------------------------------------- */
/* Entries are kept in insertion order. Errors (duplicate key or tensor, bad
 * type, byte size that does not match the shape) are returned and also
 * kept in gguf_writer_error; a failed add changes nothing. The alignment is
 * "general.alignment" when it was added (a power of two), else 32. */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
const char *gguf_writer_error(const gguf_writer *w);
/* a scalar: value points to the C type of `type` (uint8_t ... double; BOOL is
 * one uint8_t 0/1; STRING is a NUL-terminated const char *, not a char **) */
kiln_status gguf_writer_add(gguf_writer *w, const char *key, gguf_type type, const void *value);
kiln_status gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v);
kiln_status gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v);
kiln_status gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v);
kiln_status gguf_writer_add_f32(gguf_writer *w, const char *key, float v);
kiln_status gguf_writer_add_f64(gguf_writer *w, const char *key, double v);
kiln_status gguf_writer_add_bool(gguf_writer *w, const char *key, int v);
kiln_status gguf_writer_add_str(gguf_writer *w, const char *key, const char *v);
/* a string of any bytes (NULs included) */
kiln_status gguf_writer_add_str_n(gguf_writer *w, const char *key, const char *v, uint64_t len);
/* a numeric or bool array: data is a packed C array of elem's type */
kiln_status gguf_writer_add_array(gguf_writer *w, const char *key, gguf_type elem, const void *data, uint64_t n);
/* a string array; lens may be NULL for NUL-terminated strings */
kiln_status gguf_writer_add_str_array(gguf_writer *w, const char *key, const char *const *strs, const uint64_t *lens,
                                      uint64_t n);
/* a tensor of raw bytes (copied) in any known ggml type; dims in kiln order */
kiln_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t ggml_type, int ndim,
                                   const int64_t *dims, const void *data, uint64_t bytes);
/* a tensor from f32 values, converted to dtype (f32, f16, bf16, or a block
 * format, quantised with quant_quantize) */
kiln_status gguf_writer_add_tensor_f32(gguf_writer *w, const char *name, kiln_dtype dtype, int ndim,
                                       const int64_t *dims, const float *data);
/* write the file: a temporary file next to path, then rename over it */
kiln_status gguf_writer_write(gguf_writer *w, const char *path);

#endif
