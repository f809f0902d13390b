/* gguf.c — the GGUF v2/v3 reader: opens a file (mapped, or read into memory),
 * checks every field against the file size, and answers metadata and tensor
 * queries; plus a JSON dump for tools and tests.
 *
 * Invariants:
 *  - The parser reads only through rd_* helpers, which check that the bytes
 *    they consume lie inside the buffer (n <= size - pos, never pos + n, so
 *    no addition can wrap). Counts are bounded by the bytes left before
 *    anything is allocated for them, so a corrupt count cannot make us
 *    allocate more than a small multiple of the file size.
 *  - Every error message names the field and the file offset where it was
 *    read; the first error ends the parse and everything is freed.
 *  - Values are decoded from little-endian bytes explicitly, so the reader
 *    does not depend on the host's byte order or alignment.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MADV_HUGEPAGE */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"

struct gguf_file {
    const uint8_t *base; /* the whole file */
    uint64_t size;
    void *map;           /* mmap'd region, or NULL */
    uint8_t *owned;      /* read-into-memory copy, or NULL */
    size_t owned_map;    /* > 0: owned is an anonymous mapping of this many bytes (else malloc'd) */
    int fd;              /* the file, kept open while owned is a mapping (gguf_release), else -1 */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int64_t nkv;
    gguf_kv *kvs;
    int64_t ntensors;
    gguf_tensor *tensors;
    char err[256];
};

/* ---- ggml type table ------------------------------------------------------ */

typedef struct ggml_type_info {
    const char *name;
    uint32_t block, block_bytes;
} ggml_type_info;

/* block sizes as in the gguf package's GGML_QUANT_SIZES */
static const ggml_type_info ggml_types[] = {
    [0] = {"F32", 1, 4},        [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},     [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},     [7] = {"Q5_1", 32, 24},      [8] = {"Q8_0", 32, 34},     [9] = {"Q8_1", 32, 40},
    [10] = {"Q2_K", 256, 84},   [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},  [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},  [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},  [20] = {"IQ4_NL", 32, 18},  [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},  [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},        [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},       [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},       [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},      [34] = {"TQ1_0", 256, 54},   [35] = {"TQ2_0", 256, 66},  [39] = {"MXFP4", 32, 17},
};
#define GGML_NTYPES (sizeof ggml_types / sizeof ggml_types[0])

const char *gguf_ggml_type_name(uint32_t t) { return t < GGML_NTYPES ? ggml_types[t].name : NULL; }

int gguf_ggml_type_layout(uint32_t t, uint32_t *block, uint32_t *block_bytes) {
    if (t >= GGML_NTYPES || !ggml_types[t].name) return 0;
    if (block) *block = ggml_types[t].block;
    if (block_bytes) *block_bytes = ggml_types[t].block_bytes;
    return 1;
}

kiln_dtype gguf_ggml_to_dtype(uint32_t t) {
    switch (t) {
    case GGML_TYPE_F32: return KILN_F32;
    case GGML_TYPE_F16: return KILN_F16;
    case GGML_TYPE_BF16: return KILN_BF16;
    case GGML_TYPE_I32: return KILN_I32;
    case GGML_TYPE_Q8_0: return KILN_Q8_0;
    case GGML_TYPE_Q4_0: return KILN_Q4_0;
    case GGML_TYPE_Q5_0: return KILN_Q5_0;
    case GGML_TYPE_Q4_K: return KILN_Q4_K;
    case GGML_TYPE_Q6_K: return KILN_Q6_K;
    default: return KILN_DTYPE_COUNT;
    }
}

uint32_t gguf_dtype_to_ggml(kiln_dtype t) {
    switch (t) {
    case KILN_F32: return GGML_TYPE_F32;
    case KILN_F16: return GGML_TYPE_F16;
    case KILN_BF16: return GGML_TYPE_BF16;
    case KILN_I32: return GGML_TYPE_I32;
    case KILN_Q8_0: return GGML_TYPE_Q8_0;
    case KILN_Q4_0: return GGML_TYPE_Q4_0;
    case KILN_Q5_0: return GGML_TYPE_Q5_0;
    case KILN_Q4_K: return GGML_TYPE_Q4_K;
    case KILN_Q6_K: return GGML_TYPE_Q6_K;
    default: return UINT32_MAX;
    }
}

static const char *const type_names[GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};

const char *gguf_type_name(gguf_type t) { return (unsigned)t < GGUF_TYPE_COUNT ? type_names[t] : "?"; }

/* bytes of one value of a fixed-size type; 0 for string/array/unknown */
static uint64_t type_size(uint32_t t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* ---- little-endian decoding ------------------------------------------------ */

static uint64_t le(const uint8_t *p, unsigned n) {
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ---- checked cursor -------------------------------------------------------- */

typedef struct rd {
    const uint8_t *base;
    uint64_t size, pos;
    char *err;
    size_t cap;
} rd;

static kiln_status rd_fail(rd *r, kiln_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (r->err && r->cap) vsnprintf(r->err, r->cap, fmt, ap);
    va_end(ap);
    return s;
}

/* n more bytes must be in the file */
static kiln_status rd_need(rd *r, uint64_t n, const char *what) {
    if (n > r->size - r->pos)
        return rd_fail(r, KILN_ERR_FORMAT, "gguf: truncated file: %s at offset %" PRIu64 " needs %" PRIu64
                       " bytes, only %" PRIu64 " left (file size %" PRIu64 ")",
                       what, r->pos, n, r->size - r->pos, r->size);
    return KILN_OK;
}

static kiln_status rd_u32(rd *r, uint32_t *v, const char *what) {
    kiln_status s = rd_need(r, 4, what);
    if (s) return s;
    *v = (uint32_t)le(r->base + r->pos, 4);
    r->pos += 4;
    return KILN_OK;
}

static kiln_status rd_u64(rd *r, uint64_t *v, const char *what) {
    kiln_status s = rd_need(r, 8, what);
    if (s) return s;
    *v = le(r->base + r->pos, 8);
    r->pos += 8;
    return KILN_OK;
}

static kiln_status rd_str(rd *r, gguf_str *out, const char *what) {
    uint64_t at = r->pos, len;
    kiln_status s = rd_u64(r, &len, what);
    if (s) return s;
    if (len > r->size - r->pos)
        return rd_fail(r, KILN_ERR_FORMAT, "gguf: %s at offset %" PRIu64 " has length %" PRIu64
                       " but only %" PRIu64 " bytes are left in the file", what, at, len, r->size - r->pos);
    out->ptr = (const char *)(r->base + r->pos);
    out->len = len;
    r->pos += len;
    return KILN_OK;
}

/* a NUL-terminated copy of a name; names with an embedded NUL are refused
 * because lookups by C string could never find them */
static kiln_status rd_name(rd *r, char **out, const char *what) {
    uint64_t at = r->pos;
    gguf_str s;
    kiln_status st = rd_str(r, &s, what);
    if (st) return st;
    if (memchr(s.ptr, 0, (size_t)s.len))
        return rd_fail(r, KILN_ERR_FORMAT, "gguf: %s at offset %" PRIu64 " contains a NUL byte", what, at);
    char *c = kiln_xmalloc((size_t)s.len + 1);
    memcpy(c, s.ptr, (size_t)s.len);
    c[s.len] = 0;
    *out = c;
    return KILN_OK;
}

/* ---- parsing --------------------------------------------------------------- */

static void free_contents(gguf_file *f) {
    for (int64_t i = 0; i < f->nkv; i++) {
        free(f->kvs[i].key);
        free(f->kvs[i].strs);
    }
    free(f->kvs);
    for (int64_t i = 0; i < f->ntensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    f->kvs = NULL;
    f->tensors = NULL;
    f->nkv = f->ntensors = 0;
}

static kiln_status parse_kv(rd *r, gguf_kv *kv) {
    kv->offset = r->pos;
    kiln_status s = rd_name(r, &kv->key, "metadata key");
    if (s) return s;
    uint64_t tpos = r->pos;
    uint32_t t;
    if ((s = rd_u32(r, &t, "metadata value type"))) return s;
    if (t >= GGUF_TYPE_COUNT)
        return rd_fail(r, KILN_ERR_FORMAT, "gguf: metadata '%s': unknown value type %" PRIu32 " at offset %" PRIu64,
                       kv->key, t, tpos);
    kv->type = kv->elem = (gguf_type)t;
    kv->count = 1;
    if (t == GGUF_TYPE_ARRAY) {
        uint64_t epos = r->pos, n;
        uint32_t e;
        if ((s = rd_u32(r, &e, "array element type"))) return s;
        if (e >= GGUF_TYPE_COUNT || e == GGUF_TYPE_ARRAY)
            return rd_fail(r, e == GGUF_TYPE_ARRAY ? KILN_ERR_UNSUPPORTED : KILN_ERR_FORMAT,
                           "gguf: metadata '%s': %s array element type %" PRIu32 " at offset %" PRIu64, kv->key,
                           e == GGUF_TYPE_ARRAY ? "unsupported (nested)" : "unknown", e, epos);
        kv->elem = (gguf_type)e;
        uint64_t npos = r->pos;
        if ((s = rd_u64(r, &n, "array length"))) return s;
        uint64_t left = r->size - r->pos;
        /* each element takes at least its fixed size, or 8 bytes for a string's length */
        uint64_t esz = e == GGUF_TYPE_STRING ? 8 : type_size(e);
        if (n > left / esz)
            return rd_fail(r, KILN_ERR_FORMAT, "gguf: metadata '%s': array length %" PRIu64 " at offset %" PRIu64
                           " needs at least %" PRIu64 " bytes per element, only %" PRIu64 " bytes are left",
                           kv->key, n, npos, esz, left);
        kv->count = n;
        if (e == GGUF_TYPE_STRING) {
            kv->strs = kiln_xmalloc((size_t)(n ? n : 1) * sizeof *kv->strs);
            for (uint64_t i = 0; i < n; i++)
                if ((s = rd_str(r, &kv->strs[i], "array string"))) return s;
        } else {
            kv->data = r->base + r->pos;
            r->pos += n * esz;
        }
        return KILN_OK;
    }
    if (t == GGUF_TYPE_STRING) {
        kv->strs = kiln_xmalloc(sizeof *kv->strs);
        return rd_str(r, &kv->strs[0], "metadata string value");
    }
    if ((s = rd_need(r, type_size(t), "metadata value"))) return s;
    kv->data = r->base + r->pos;
    r->pos += type_size(t);
    if (t == GGUF_TYPE_BOOL && kv->data[0] > 1)
        return rd_fail(r, KILN_ERR_FORMAT, "gguf: metadata '%s': bool value %u at offset %" PRIu64 " is not 0 or 1",
                       kv->key, (unsigned)kv->data[0], r->pos - 1);
    return KILN_OK;
}

static kiln_status parse_tensor_info(rd *r, gguf_tensor *t) {
    uint64_t at = r->pos;
    kiln_status s = rd_name(r, &t->name, "tensor name");
    if (s) return s;
    uint32_t nd;
    uint64_t ndpos = r->pos;
    if ((s = rd_u32(r, &nd, "tensor n_dims"))) return s;
    if (nd > GGUF_MAX_DIMS)
        return rd_fail(r, KILN_ERR_FORMAT, "gguf: tensor '%s': n_dims %" PRIu32 " at offset %" PRIu64 " exceeds %d",
                       t->name, nd, ndpos, GGUF_MAX_DIMS);
    t->ndim = (int)nd;
    int64_t numel = 1;
    for (uint32_t i = 0; i < nd; i++) {
        uint64_t dpos = r->pos, ne;
        if ((s = rd_u64(r, &ne, "tensor dimension"))) return s;
        if (ne > (uint64_t)INT64_MAX || (ne && (uint64_t)numel > (uint64_t)INT64_MAX / ne))
            return rd_fail(r, KILN_ERR_FORMAT, "gguf: tensor '%s': dimension %" PRIu32 " = %" PRIu64
                           " at offset %" PRIu64 " makes the element count overflow", t->name, i, ne, dpos);
        numel *= (int64_t)ne;
        t->dims[nd - 1 - i] = (int64_t)ne; /* GGUF is innermost first; kiln outermost first */
    }
    t->numel = numel;
    uint64_t tpos = r->pos;
    if ((s = rd_u32(r, &t->ggml_type, "tensor type"))) return s;
    uint32_t block, bb;
    if (!gguf_ggml_type_layout(t->ggml_type, &block, &bb))
        return rd_fail(r, KILN_ERR_FORMAT, "gguf: tensor '%s': unknown ggml type %" PRIu32 " at offset %" PRIu64,
                       t->name, t->ggml_type, tpos);
    uint64_t row = nd ? (uint64_t)t->dims[nd - 1] : 1;
    if (row % block)
        return rd_fail(r, KILN_ERR_FORMAT, "gguf: tensor '%s' (info at offset %" PRIu64 "): row length %" PRIu64
                       " is not a multiple of the %s block size %" PRIu32, t->name, at, row,
                       gguf_ggml_type_name(t->ggml_type), block);
    /* numel / block * bb cannot overflow a u64: numel < 2^63, bb < 2^9, block >= 1 */
    uint64_t nblocks = (uint64_t)numel / block;
    if (nblocks > UINT64_MAX / bb)
        return rd_fail(r, KILN_ERR_FORMAT, "gguf: tensor '%s': byte size overflows", t->name);
    t->bytes = nblocks * bb;
    t->dtype = gguf_ggml_to_dtype(t->ggml_type);
    return rd_u64(r, &t->offset, "tensor data offset");
}

static kiln_status parse(gguf_file *f, unsigned flags, char *err, size_t cap) {
    rd r = {f->base, f->size, 0, err, cap};
    uint32_t magic;
    uint64_t nt, nkv;
    kiln_status s;
    if ((s = rd_u32(&r, &magic, "magic"))) return s;
    if (magic != GGUF_MAGIC)
        return rd_fail(&r, KILN_ERR_FORMAT, "gguf: bad magic 0x%08" PRIx32 " at offset 0 (not a GGUF file)", magic);
    if ((s = rd_u32(&r, &f->version, "version"))) return s;
    if (f->version != 2 && f->version != 3)
        return rd_fail(&r, f->version == 1 ? KILN_ERR_UNSUPPORTED : KILN_ERR_FORMAT,
                       "gguf: version %" PRIu32 " at offset 4 is not supported (need 2 or 3%s)", f->version,
                       f->version > 0xffff ? "; a big-endian file?" : "");
    if ((s = rd_u64(&r, &nt, "tensor count"))) return s;
    if ((s = rd_u64(&r, &nkv, "metadata count"))) return s;
    /* smallest encodings: kv = key length 8 + type 4 + a 1-byte value;
     * tensor info = name length 8 + n_dims 4 + type 4 + offset 8 */
    uint64_t left = r.size - r.pos;
    if (nkv > left / 13)
        return rd_fail(&r, KILN_ERR_FORMAT, "gguf: metadata count %" PRIu64 " at offset 16 cannot fit in the %"
                       PRIu64 " bytes left", nkv, left);
    if (nt > left / 24)
        return rd_fail(&r, KILN_ERR_FORMAT, "gguf: tensor count %" PRIu64 " at offset 8 cannot fit in the %" PRIu64
                       " bytes left", nt, left);
    f->kvs = kiln_xcalloc((size_t)(nkv ? nkv : 1), sizeof *f->kvs);
    for (uint64_t i = 0; i < nkv; i++) {
        f->nkv = (int64_t)i + 1; /* so that free_contents frees a half-parsed entry */
        if ((s = parse_kv(&r, &f->kvs[i]))) return s;
        for (uint64_t j = 0; j < i; j++)
            if (!strcmp(f->kvs[j].key, f->kvs[i].key))
                return rd_fail(&r, KILN_ERR_FORMAT, "gguf: duplicate metadata key '%s' at offset %" PRIu64,
                               f->kvs[i].key, f->kvs[i].offset);
    }
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find(f, "general.alignment");
    if (al) {
        int64_t a = -1;
        if (al->type != GGUF_TYPE_ARRAY && al->type != GGUF_TYPE_STRING && al->type != GGUF_TYPE_BOOL &&
            al->type != GGUF_TYPE_FLOAT32 && al->type != GGUF_TYPE_FLOAT64)
            gguf_arr_int(al, 0, &a);
        if (a < 1 || a > (INT64_C(1) << 30) || (a & (a - 1)))
            return rd_fail(&r, KILN_ERR_FORMAT, "gguf: general.alignment (%s at offset %" PRIu64
                           ") must be a power of two integer in [1, 2^30]", gguf_type_name(al->type), al->offset);
        f->alignment = (uint64_t)a;
    }
    f->tensors = kiln_xcalloc((size_t)(nt ? nt : 1), sizeof *f->tensors);
    for (uint64_t i = 0; i < nt; i++) {
        f->ntensors = (int64_t)i + 1;
        uint64_t at = r.pos;
        gguf_tensor *t = &f->tensors[i];
        if ((s = parse_tensor_info(&r, t))) return s;
        if (t->offset % f->alignment)
            return rd_fail(&r, KILN_ERR_FORMAT, "gguf: tensor '%s' (info at offset %" PRIu64 "): data offset %" PRIu64
                           " is not a multiple of the alignment %" PRIu64, t->name, at, t->offset, f->alignment);
        if (t->dtype == KILN_DTYPE_COUNT && !(flags & GGUF_OPEN_ALLOW_UNSUPPORTED))
            return rd_fail(&r, KILN_ERR_UNSUPPORTED, "gguf: unsupported tensor type %s for tensor '%s'",
                           gguf_ggml_type_name(t->ggml_type), t->name);
    }
    /* names are unique: a sorted copy would be faster for huge tables, but
     * models have a few hundred to a few thousand tensors */
    for (int64_t i = 0; i < f->ntensors; i++)
        for (int64_t j = 0; j < i; j++)
            if (!strcmp(f->tensors[i].name, f->tensors[j].name))
                return rd_fail(&r, KILN_ERR_FORMAT, "gguf: duplicate tensor name '%s'", f->tensors[i].name);
    uint64_t pad = (f->alignment - r.pos % f->alignment) % f->alignment;
    f->data_offset = r.pos + pad; /* r.pos <= size < 2^64 - 2^30: no wrap */
    if (nt > 0 && f->data_offset > f->size)
        return rd_fail(&r, KILN_ERR_FORMAT, "gguf: truncated file: the data section starts at offset %" PRIu64
                       " after alignment, beyond the file size %" PRIu64, f->data_offset, f->size);
    for (int64_t i = 0; i < f->ntensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t room = f->size - f->data_offset; /* nt > 0 here, so data_offset <= size */
        if (t->offset > room || t->bytes > room - t->offset) {
            if (t->offset > UINT64_MAX - f->data_offset) /* the sum would wrap: say so, not a wrong number */
                return rd_fail(&r, KILN_ERR_FORMAT, "gguf: tensor '%s': data offset %" PRIu64
                               " lies beyond any file (the data section starts at %" PRIu64 "; file size %" PRIu64 ")",
                               t->name, t->offset, f->data_offset, f->size);
            return rd_fail(&r, KILN_ERR_FORMAT, "gguf: tensor '%s': %" PRIu64 " bytes at data offset %" PRIu64
                           " (file offset %" PRIu64 ") run past the end of the file (size %" PRIu64 ")",
                           t->name, t->bytes, t->offset, f->data_offset + t->offset, f->size);
        }
        t->data = f->base + f->data_offset + t->offset;
    }
    return KILN_OK;
}

static kiln_status finish_open(gguf_file *f, unsigned flags, gguf_file **out, char *err, size_t cap) {
    kiln_status s = parse(f, flags, err, cap);
    if (s) {
        gguf_close(f);
        return s;
    }
    *out = f;
    return KILN_OK;
}

kiln_status gguf_open_memory(const void *data, size_t size, unsigned flags, gguf_file **out, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!out) return KILN_ERR_INVALID;
    *out = NULL;
    if (!data && size) {
        if (err && cap) snprintf(err, cap, "gguf: no data");
        return KILN_ERR_INVALID;
    }
    gguf_file *f = kiln_xcalloc(1, sizeof *f);
    f->fd = -1;
    f->size = size;
    if (flags & GGUF_OPEN_READ) {
        f->owned = kiln_xmalloc(size ? size : 1);
        if (size) memcpy(f->owned, data, size);
        f->base = f->owned;
    } else {
        f->base = data ? data : (const uint8_t *)"";
    }
    return finish_open(f, flags, out, err, cap);
}

/* the buffer a file is read into: files of 4 MiB and more get an anonymous
 * mapping in 2 MiB pages where the kernel has them (MADV_HUGEPAGE; THP is
 * often "madvise" only): decode streams every weight once per token, and
 * with 4 KiB pages each 4 KiB of it is a TLB miss and a page walk (gemma3
 * 270m tg, 2-core AVX-512 VM: 40.5 -> 46.0 t/s at 1 thread, 66.8 -> 82.5 at
 * 2). *mapped = the mapping's length, 0 for a malloc'd buffer. */
static uint8_t *read_buffer(uint64_t size, size_t *mapped) {
    *mapped = 0;
#if defined(MAP_ANONYMOUS) && defined(MADV_HUGEPAGE)
    if (size >= ((uint64_t)4 << 20)) {
        const size_t huge = (size_t)2 << 20, len = ((size_t)size + huge - 1) / huge * huge;
        /* over-allocate by one huge page and trim, so the buffer is 2 MiB aligned */
        uint8_t *m = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
            size_t lead = (huge - (size_t)((uintptr_t)m % huge)) % huge;
            if (lead) munmap(m, lead);
            if (huge - lead) munmap(m + lead + len, huge - lead);
            (void)madvise(m + lead, len, MADV_HUGEPAGE); /* a hint: no huge pages is not an error */
            *mapped = len;
            return m + lead;
        }
    }
#endif
    return kiln_xmalloc(size ? (size_t)size : 1);
}

kiln_status gguf_open(const char *path, unsigned flags, gguf_file **out, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!out || !path) return KILN_ERR_INVALID;
    *out = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        if (err && cap) snprintf(err, cap, "gguf: cannot open %s: %s", path, strerror(errno));
        return KILN_ERR_IO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (err && cap) snprintf(err, cap, "gguf: %s is not a regular file", path);
        close(fd);
        return KILN_ERR_IO;
    }
    gguf_file *f = kiln_xcalloc(1, sizeof *f);
    f->fd = -1;
    f->size = (uint64_t)st.st_size;
    if (f->size > (uint64_t)SIZE_MAX) {
        if (err && cap) snprintf(err, cap, "gguf: %s is too large to address", path);
        close(fd);
        free(f);
        return KILN_ERR_IO;
    }
    if ((flags & GGUF_OPEN_READ) || f->size == 0) {
        f->owned = read_buffer(f->size, &f->owned_map);
        uint64_t got = 0;
        while (got < f->size) {
            ssize_t n = read(fd, f->owned + got, (size_t)(f->size - got));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                if (err && cap) snprintf(err, cap, "gguf: reading %s failed at offset %" PRIu64 ": %s", path, got,
                                         n < 0 ? strerror(errno) : "unexpected end of file");
                close(fd);
                gguf_close(f);
                return KILN_ERR_IO;
            }
            got += (uint64_t)n;
        }
        f->base = f->owned;
        if (f->owned_map) f->fd = dup(fd); /* gguf_release maps the file over released pages */
    } else {
        void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            if (err && cap) snprintf(err, cap, "gguf: cannot map %s: %s", path, strerror(errno));
            close(fd);
            free(f);
            return KILN_ERR_IO;
        }
        f->map = m;
        f->base = m;
    }
    close(fd);
    kiln_status s = finish_open(f, flags, out, err, cap);
    if (s && err && cap) { /* prefix the path, keeping the message */
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s: %s", path, err);
        snprintf(err, cap, "%s", tmp);
    }
    return s;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    free_contents(f);
    if (f->fd >= 0) close(f->fd);
    if (f->map) munmap(f->map, (size_t)f->size);
    if (f->owned_map) munmap(f->owned, f->owned_map);
    else free(f->owned);
    free(f);
}

/* The whole pages of [p, p + n) inside the file's bytes stop holding memory
 * and stay readable with the same bytes: read into memory, they are
 * replaced by a private mapping of the same part of the file (the buffer
 * is 2 MiB-aligned and holds the file from offset 0, so page-aligned
 * addresses are page-aligned offsets); mapped, they are dropped and come
 * back from the file when read. The pages at the range's ends that hold
 * other bytes too are kept. Any failure leaves the memory as it was. */
void gguf_release(gguf_file *f, const void *p, size_t n) {
    const uint8_t *base = f ? f->base : NULL, *at = p;
    if (!base || !at || at < base || n > f->size || (uint64_t)(at - base) > f->size - n) return;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)at + page - 1) / page * page, hi = ((uintptr_t)at + n) / page * page;
    if (hi <= lo) return;
    if (f->map) {
#ifdef MADV_DONTNEED
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
#endif
        return;
    }
    if (!f->owned_map || f->fd < 0 || (uintptr_t)f->owned % page != 0) return;
    void *m = mmap((void *)lo, hi - lo, PROT_READ, MAP_PRIVATE | MAP_FIXED, f->fd, (off_t)(lo - (uintptr_t)f->owned));
    (void)m; /* MAP_FAILED: the pages stay as they were (mmap with MAP_FIXED fails before it unmaps) */
}

uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint64_t gguf_alignment(const gguf_file *f) { return f->alignment; }
uint64_t gguf_data_offset(const gguf_file *f) { return f->data_offset; }
const char *gguf_error(const gguf_file *f) { return f->err; }

const uint8_t *gguf_bytes(const gguf_file *f, uint64_t *size) {
    if (size) *size = f->size;
    return f->base;
}

/* ---- metadata -------------------------------------------------------------- */

int64_t gguf_kv_count(const gguf_file *f) { return f->nkv; }
const gguf_kv *gguf_kv_at(const gguf_file *f, int64_t i) { return i >= 0 && i < f->nkv ? &f->kvs[i] : NULL; }

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (int64_t i = 0; i < f->nkv; i++)
        if (f->kvs[i].key && !strcmp(f->kvs[i].key, key)) return &f->kvs[i];
    return NULL;
}

int gguf_str_eq(gguf_str s, const char *text) {
    size_t n = strlen(text);
    return s.len == n && !memcmp(s.ptr, text, n);
}

static int is_int_type(gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_INT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_INT16 ||
           t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
}

/* element i of a numeric value: exactly one of the outputs is meaningful,
 * per the element type (ints sign-extended into *iv, or u64 into *uv) */
static void load_elem(const gguf_kv *kv, uint64_t i, int64_t *iv, uint64_t *uv, double *fv, int *is_u64) {
    const uint8_t *p = kv->data + i * type_size(kv->elem);
    uint64_t raw = le(p, (unsigned)type_size(kv->elem));
    *is_u64 = 0;
    *fv = 0;
    *iv = 0;
    *uv = 0;
    switch (kv->elem) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_BOOL:
        *iv = (int64_t)raw; break;
    case GGUF_TYPE_INT8: *iv = (int8_t)(uint8_t)raw; break;
    case GGUF_TYPE_INT16: *iv = (int16_t)(uint16_t)raw; break;
    case GGUF_TYPE_INT32: *iv = (int32_t)(uint32_t)raw; break;
    case GGUF_TYPE_INT64: *iv = (int64_t)raw; break;
    case GGUF_TYPE_UINT64: *uv = raw; *is_u64 = 1; break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t b = (uint32_t)raw;
        float x;
        memcpy(&x, &b, 4);
        *fv = x;
        break;
    }
    case GGUF_TYPE_FLOAT64: memcpy(fv, &raw, 8); break;
    default: break;
    }
}

kiln_status gguf_arr_int(const gguf_kv *kv, uint64_t i, int64_t *out) {
    if (!kv || !out || i >= kv->count || !(is_int_type(kv->elem) || kv->elem == GGUF_TYPE_BOOL) || !kv->data)
        return KILN_ERR_INVALID;
    int64_t iv;
    uint64_t uv;
    double fv;
    int u;
    load_elem(kv, i, &iv, &uv, &fv, &u);
    if (u) {
        if (uv > (uint64_t)INT64_MAX) return KILN_ERR_RANGE;
        iv = (int64_t)uv;
    }
    *out = iv;
    return KILN_OK;
}

kiln_status gguf_arr_float(const gguf_kv *kv, uint64_t i, double *out) {
    if (!kv || !out || i >= kv->count || !kv->data) return KILN_ERR_INVALID;
    if (kv->elem == GGUF_TYPE_FLOAT32 || kv->elem == GGUF_TYPE_FLOAT64) {
        int64_t iv;
        uint64_t uv;
        int u;
        load_elem(kv, i, &iv, &uv, out, &u);
        return KILN_OK;
    }
    if (!is_int_type(kv->elem)) return KILN_ERR_INVALID;
    int64_t iv;
    uint64_t uv;
    double fv;
    int u;
    load_elem(kv, i, &iv, &uv, &fv, &u);
    *out = u ? (double)uv : (double)iv;
    return KILN_OK;
}

kiln_status gguf_arr_str(const gguf_kv *kv, uint64_t i, gguf_str *out) {
    if (!kv || !out || kv->elem != GGUF_TYPE_STRING || i >= kv->count || !kv->strs) return KILN_ERR_INVALID;
    *out = kv->strs[i];
    return KILN_OK;
}

static kiln_status getter_fail(gguf_file *f, kiln_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->err, sizeof f->err, fmt, ap);
    va_end(ap);
    return s;
}

/* the scalar entry for key of a wanted kind, or NULL with an error */
static const gguf_kv *scalar(gguf_file *f, const char *key, const char *want, int (*ok)(gguf_type), kiln_status *s) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) {
        *s = getter_fail(f, KILN_ERR_FORMAT, "gguf: missing metadata key '%s'", key);
        return NULL;
    }
    if (kv->type == GGUF_TYPE_ARRAY || !ok(kv->type)) {
        *s = getter_fail(f, KILN_ERR_FORMAT, "gguf: metadata '%s' (offset %" PRIu64 ") is %s%s%s, not %s", key,
                         kv->offset, gguf_type_name(kv->type), kv->type == GGUF_TYPE_ARRAY ? " of " : "",
                         kv->type == GGUF_TYPE_ARRAY ? gguf_type_name(kv->elem) : "", want);
        return NULL;
    }
    *s = KILN_OK;
    return kv;
}

static int ok_int(gguf_type t) { return is_int_type(t); }
static int ok_num(gguf_type t) { return is_int_type(t) || t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64; }
static int ok_bool(gguf_type t) { return t == GGUF_TYPE_BOOL; }
static int ok_str(gguf_type t) { return t == GGUF_TYPE_STRING; }

kiln_status gguf_get_int(gguf_file *f, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    kiln_status s;
    const gguf_kv *kv = scalar(f, key, "an integer", ok_int, &s);
    if (!kv) return s;
    int64_t iv;
    uint64_t uv;
    double fv;
    int u;
    load_elem(kv, 0, &iv, &uv, &fv, &u);
    if (u ? (uv > (uint64_t)INT64_MAX || (int64_t)uv > hi || (int64_t)uv < lo) : (iv < lo || iv > hi)) {
        char v[32];
        if (u) snprintf(v, sizeof v, "%" PRIu64, uv);
        else snprintf(v, sizeof v, "%" PRId64, iv);
        return getter_fail(f, KILN_ERR_RANGE, "gguf: metadata '%s' (offset %" PRIu64 ") = %s is outside [%" PRId64
                           ", %" PRId64 "]", key, kv->offset, v, lo, hi);
    }
    *out = u ? (int64_t)uv : iv;
    return KILN_OK;
}

kiln_status gguf_get_int_or(gguf_file *f, const char *key, int64_t lo, int64_t hi, int64_t dflt, int64_t *out) {
    if (!gguf_find(f, key)) {
        *out = dflt;
        return KILN_OK;
    }
    return gguf_get_int(f, key, lo, hi, out);
}

kiln_status gguf_get_u64(gguf_file *f, const char *key, uint64_t *out) {
    kiln_status s;
    const gguf_kv *kv = scalar(f, key, "an integer", ok_int, &s);
    if (!kv) return s;
    int64_t iv;
    uint64_t uv;
    double fv;
    int u;
    load_elem(kv, 0, &iv, &uv, &fv, &u);
    if (!u && iv < 0)
        return getter_fail(f, KILN_ERR_RANGE, "gguf: metadata '%s' (offset %" PRIu64 ") = %" PRId64 " is negative",
                           key, kv->offset, iv);
    *out = u ? uv : (uint64_t)iv;
    return KILN_OK;
}

kiln_status gguf_get_float(gguf_file *f, const char *key, double *out) {
    kiln_status s;
    const gguf_kv *kv = scalar(f, key, "a number", ok_num, &s);
    if (!kv) return s;
    return gguf_arr_float(kv, 0, out);
}

kiln_status gguf_get_float_or(gguf_file *f, const char *key, double dflt, double *out) {
    if (!gguf_find(f, key)) {
        *out = dflt;
        return KILN_OK;
    }
    return gguf_get_float(f, key, out);
}

kiln_status gguf_get_bool(gguf_file *f, const char *key, int *out) {
    kiln_status s;
    const gguf_kv *kv = scalar(f, key, "a bool", ok_bool, &s);
    if (!kv) return s;
    *out = kv->data[0] != 0;
    return KILN_OK;
}

kiln_status gguf_get_bool_or(gguf_file *f, const char *key, int dflt, int *out) {
    if (!gguf_find(f, key)) {
        *out = dflt;
        return KILN_OK;
    }
    return gguf_get_bool(f, key, out);
}

kiln_status gguf_get_str(gguf_file *f, const char *key, gguf_str *out) {
    kiln_status s;
    const gguf_kv *kv = scalar(f, key, "a string", ok_str, &s);
    if (!kv) return s;
    *out = kv->strs[0];
    return KILN_OK;
}

kiln_status gguf_get_name(gguf_file *f, const char *key, gguf_str *out) {
    kiln_status s = gguf_get_str(f, key, out);
    if (s) return s;
    if (memchr(out->ptr, 0, (size_t)out->len))
        return getter_fail(f, KILN_ERR_FORMAT, "gguf: metadata '%s' (offset %" PRIu64
                           ") is a name with a NUL byte in it ('%.*s\\0...'): refused", key, gguf_find(f, key)->offset,
                           (int)strnlen(out->ptr, 64), out->ptr);
    return KILN_OK;
}

kiln_status gguf_get_array(gguf_file *f, const char *key, gguf_type *elem, uint64_t *count) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return getter_fail(f, KILN_ERR_FORMAT, "gguf: missing metadata key '%s'", key);
    if (kv->type != GGUF_TYPE_ARRAY)
        return getter_fail(f, KILN_ERR_FORMAT, "gguf: metadata '%s' (offset %" PRIu64 ") is %s, not an array", key,
                           kv->offset, gguf_type_name(kv->type));
    if (elem) *elem = kv->elem;
    if (count) *count = kv->count;
    return KILN_OK;
}

/* ---- tensors --------------------------------------------------------------- */

int64_t gguf_tensor_count(const gguf_file *f) { return f->ntensors; }

const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i) {
    return i >= 0 && i < f->ntensors ? &f->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f || !name) return NULL;
    for (int64_t i = 0; i < f->ntensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

/* ---- JSON ------------------------------------------------------------------ */

static void sb_jstr(kiln_sb *b, const char *s, uint64_t len) {
    kiln_sb_putn(b, "\"", 1);
    for (uint64_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') kiln_sb_putn(b, (const char *)&c, 1);
        else kiln_sb_printf(b, "\\u%04x", (unsigned)c);
    }
    kiln_sb_putn(b, "\"", 1);
}

static void sb_double(kiln_sb *b, double v, int f32) {
    if (v != v) kiln_sb_printf(b, "NaN");
    else if (v > 1.7976931348623157e308) kiln_sb_printf(b, "Infinity");
    else if (v < -1.7976931348623157e308) kiln_sb_printf(b, "-Infinity");
    else kiln_sb_printf(b, f32 ? "%.9g" : "%.17g", v);
}

static void sb_value(kiln_sb *b, const gguf_kv *kv, uint64_t i) {
    if (kv->elem == GGUF_TYPE_STRING) {
        sb_jstr(b, kv->strs[i].ptr, kv->strs[i].len);
        return;
    }
    int64_t iv;
    uint64_t uv;
    double fv;
    int u;
    load_elem(kv, i, &iv, &uv, &fv, &u);
    if (kv->elem == GGUF_TYPE_BOOL) kiln_sb_printf(b, iv ? "true" : "false");
    else if (kv->elem == GGUF_TYPE_FLOAT32 || kv->elem == GGUF_TYPE_FLOAT64) sb_double(b, fv, kv->elem == GGUF_TYPE_FLOAT32);
    else if (u) kiln_sb_printf(b, "%" PRIu64, uv);
    else kiln_sb_printf(b, "%" PRId64, iv);
}

char *gguf_dump_json(const gguf_file *f) {
    kiln_sb b = {0};
    kiln_sb_printf(&b, "{\"version\": %" PRIu32 ", \"alignment\": %" PRIu64 ", \"data_offset\": %" PRIu64
              ", \"size\": %" PRIu64 ",\n \"metadata\": [", f->version, f->alignment, f->data_offset, f->size);
    for (int64_t i = 0; i < f->nkv; i++) {
        const gguf_kv *kv = &f->kvs[i];
        kiln_sb_printf(&b, "%s\n  {\"key\": ", i ? "," : "");
        sb_jstr(&b, kv->key, strlen(kv->key));
        kiln_sb_printf(&b, ", \"type\": \"%s\"", gguf_type_name(kv->type));
        if (kv->type == GGUF_TYPE_ARRAY) {
            kiln_sb_printf(&b, ", \"elem\": \"%s\", \"value\": [", gguf_type_name(kv->elem));
            for (uint64_t j = 0; j < kv->count; j++) {
                if (j) kiln_sb_putn(&b, ", ", 2);
                sb_value(&b, kv, j);
            }
            kiln_sb_putn(&b, "]}", 2);
        } else {
            kiln_sb_printf(&b, ", \"value\": ");
            sb_value(&b, kv, 0);
            kiln_sb_putn(&b, "}", 1);
        }
    }
    kiln_sb_printf(&b, "],\n \"tensors\": [");
    for (int64_t i = 0; i < f->ntensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        uint64_t h = 0xcbf29ce484222325ULL;
        const uint8_t *p = t->data;
        for (uint64_t j = 0; j < t->bytes; j++) h = (h ^ p[j]) * 0x100000001b3ULL;
        kiln_sb_printf(&b, "%s\n  {\"name\": ", i ? "," : "");
        sb_jstr(&b, t->name, strlen(t->name));
        kiln_sb_printf(&b, ", \"ggml_type\": %" PRIu32 ", \"type\": \"%s\", \"dtype\": ", t->ggml_type,
                  gguf_ggml_type_name(t->ggml_type));
        if (t->dtype == KILN_DTYPE_COUNT) kiln_sb_printf(&b, "null");
        else kiln_sb_printf(&b, "\"%s\"", kiln_dtype_name(t->dtype));
        kiln_sb_printf(&b, ", \"shape\": [");
        for (int d = 0; d < t->ndim; d++) kiln_sb_printf(&b, "%s%" PRId64, d ? ", " : "", t->dims[d]);
        kiln_sb_printf(&b, "], \"offset\": %" PRIu64 ", \"file_offset\": %" PRIu64 ", \"bytes\": %" PRIu64
                  ", \"fnv1a64\": \"%016" PRIx64 "\"}", t->offset, f->data_offset + t->offset, t->bytes, h);
    }
    kiln_sb_printf(&b, "]}\n");
    return b.s;
}

char *kiln_gguf_dump_json(const char *path, unsigned flags) {
    char err[512];
    gguf_file *f = NULL;
    kiln_status s = gguf_open(path, flags, &f, err, sizeof err);
    if (s) {
        kiln_sb b = {0};
        kiln_sb_printf(&b, "{\"error\": ");
        sb_jstr(&b, err, strlen(err));
        kiln_sb_printf(&b, ", \"status\": \"%s\"}\n", kiln_status_name(s));
        return b.s;
    }
    char *j = gguf_dump_json(f);
    gguf_close(f);
    return j;
}
