/* gguf_write.c — the GGUF v3 writer: metadata and tensors are collected in
 * memory, in insertion order, and written in one go to a temporary file in
 * the destination's directory that is then renamed over the destination, so
 * a reader never sees a half-written file.
 *
 * Invariants:
 *  - Every entry is validated when it is added (unique key or name, known
 *    type, byte size matching the shape); a failed add leaves the writer as it
 *    was, so the file written later is always well-formed.
 *  - Tensor data offsets are multiples of the alignment and every tensor's
 *    data is padded to it, as the GGUF spec (and the gguf package) do.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "dtype.h"
#include "quant.h"

typedef struct wkv {
    char *key;
    uint8_t *value; /* the encoded value (type and everything after the key) */
    size_t bytes;
} wkv;

typedef struct wtensor {
    char *name;
    uint32_t ggml_type;
    int ndim;
    int64_t dims[GGUF_MAX_DIMS]; /* kiln order */
    uint8_t *data;
    uint64_t bytes;
} wtensor;

struct gguf_writer {
    wkv *kvs;
    size_t nkv, kvcap;
    wtensor *ts;
    size_t nt, tcap;
    char err[256];
};

/* a growable byte buffer for encoding */
typedef struct bbuf {
    uint8_t *p;
    size_t n, cap;
} bbuf;

static void bb_put(bbuf *b, const void *src, size_t n) {
    KILN_GROW(b->p, b->cap, b->n + n + 1);
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void bb_le(bbuf *b, uint64_t v, unsigned n) {
    uint8_t tmp[8];
    for (unsigned i = 0; i < n; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    bb_put(b, tmp, n);
}

static void bb_str(bbuf *b, const char *s, uint64_t len) {
    bb_le(b, len, 8);
    bb_put(b, s, (size_t)len);
}

static kiln_status wfail(gguf_writer *w, kiln_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    return s;
}

gguf_writer *gguf_writer_new(void) { return kiln_xcalloc(1, sizeof(gguf_writer)); }

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->nkv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].value);
    }
    for (size_t i = 0; i < w->nt; i++) {
        free(w->ts[i].name);
        free(w->ts[i].data);
    }
    free(w->kvs);
    free(w->ts);
    free(w);
}

const char *gguf_writer_error(const gguf_writer *w) { return w->err; }

static uint64_t fixed_size(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* one value of fixed-size type t from a native C object */
static void put_fixed(bbuf *b, gguf_type t, const void *v) {
    uint64_t raw = 0;
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: raw = *(const uint8_t *)v; break;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: raw = *(const uint16_t *)v; break;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: raw = *(const uint32_t *)v; break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t u;
        memcpy(&u, v, 4);
        raw = u;
        break;
    }
    default: memcpy(&raw, v, 8); break;
    }
    bb_le(b, raw, (unsigned)fixed_size(t));
}

static kiln_status check_key(gguf_writer *w, const char *key) {
    if (!key) return wfail(w, KILN_ERR_INVALID, "gguf writer: NULL key");
    for (size_t i = 0; i < w->nkv; i++)
        if (!strcmp(w->kvs[i].key, key)) return wfail(w, KILN_ERR_INVALID, "gguf writer: duplicate key '%s'", key);
    return KILN_OK;
}

static kiln_status push_kv(gguf_writer *w, const char *key, bbuf *b) {
    KILN_GROW(w->kvs, w->kvcap, w->nkv + 1);
    w->kvs[w->nkv].key = kiln_xstrdup(key);
    w->kvs[w->nkv].value = b->p;
    w->kvs[w->nkv].bytes = b->n;
    w->nkv++;
    return KILN_OK;
}

static kiln_status add_str(gguf_writer *w, const char *key, const char *v, uint64_t len) {
    kiln_status s = check_key(w, key);
    if (s) return s;
    if (!v && len) return wfail(w, KILN_ERR_INVALID, "gguf writer: '%s': NULL string", key);
    bbuf b = {0};
    bb_le(&b, GGUF_TYPE_STRING, 4);
    bb_str(&b, v ? v : "", len);
    return push_kv(w, key, &b);
}

kiln_status gguf_writer_add(gguf_writer *w, const char *key, gguf_type type, const void *value) {
    if (type == GGUF_TYPE_STRING) {
        const char *s = value;
        return add_str(w, key, s, s ? strlen(s) : 0);
    }
    kiln_status s = check_key(w, key);
    if (s) return s;
    if (!fixed_size(type) || !value)
        return wfail(w, KILN_ERR_INVALID, "gguf writer: '%s': bad scalar type %d or NULL value", key, (int)type);
    if (type == GGUF_TYPE_BOOL && *(const uint8_t *)value > 1)
        return wfail(w, KILN_ERR_INVALID, "gguf writer: '%s': bool must be 0 or 1", key);
    bbuf b = {0};
    bb_le(&b, (uint64_t)type, 4);
    put_fixed(&b, type, value);
    return push_kv(w, key, &b);
}

kiln_status gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v) { return gguf_writer_add(w, key, GGUF_TYPE_UINT32, &v); }
kiln_status gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v) { return gguf_writer_add(w, key, GGUF_TYPE_INT32, &v); }
kiln_status gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v) { return gguf_writer_add(w, key, GGUF_TYPE_UINT64, &v); }
kiln_status gguf_writer_add_f32(gguf_writer *w, const char *key, float v) { return gguf_writer_add(w, key, GGUF_TYPE_FLOAT32, &v); }
kiln_status gguf_writer_add_f64(gguf_writer *w, const char *key, double v) { return gguf_writer_add(w, key, GGUF_TYPE_FLOAT64, &v); }
kiln_status gguf_writer_add_str(gguf_writer *w, const char *key, const char *v) { return gguf_writer_add(w, key, GGUF_TYPE_STRING, v); }

kiln_status gguf_writer_add_bool(gguf_writer *w, const char *key, int v) {
    uint8_t b = v ? 1 : 0;
    return gguf_writer_add(w, key, GGUF_TYPE_BOOL, &b);
}

kiln_status gguf_writer_add_str_n(gguf_writer *w, const char *key, const char *v, uint64_t len) {
    return add_str(w, key, v, len);
}

kiln_status gguf_writer_add_array(gguf_writer *w, const char *key, gguf_type elem, const void *data, uint64_t n) {
    kiln_status s = check_key(w, key);
    if (s) return s;
    uint64_t esz = fixed_size(elem);
    if (!esz) return wfail(w, KILN_ERR_INVALID, "gguf writer: '%s': bad array element type %d", key, (int)elem);
    if (n && !data) return wfail(w, KILN_ERR_INVALID, "gguf writer: '%s': NULL array data", key);
    if (n > (uint64_t)SIZE_MAX / 8) return wfail(w, KILN_ERR_INVALID, "gguf writer: '%s': array too long", key);
    bbuf b = {0};
    bb_le(&b, GGUF_TYPE_ARRAY, 4);
    bb_le(&b, (uint64_t)elem, 4);
    bb_le(&b, n, 8);
    const uint8_t *p = data;
    for (uint64_t i = 0; i < n; i++) put_fixed(&b, elem, p + i * esz);
    return push_kv(w, key, &b);
}

kiln_status gguf_writer_add_str_array(gguf_writer *w, const char *key, const char *const *strs, const uint64_t *lens,
                                      uint64_t n) {
    kiln_status s = check_key(w, key);
    if (s) return s;
    if (n && !strs) return wfail(w, KILN_ERR_INVALID, "gguf writer: '%s': NULL string array", key);
    for (uint64_t i = 0; i < n; i++)
        if (!strs[i] && (!lens || lens[i]))
            return wfail(w, KILN_ERR_INVALID, "gguf writer: '%s': string %" PRIu64 " is NULL", key, i);
    bbuf b = {0};
    bb_le(&b, GGUF_TYPE_ARRAY, 4);
    bb_le(&b, GGUF_TYPE_STRING, 4);
    bb_le(&b, n, 8);
    for (uint64_t i = 0; i < n; i++) {
        const char *p = strs[i] ? strs[i] : "";
        bb_str(&b, p, lens ? lens[i] : strlen(p));
    }
    return push_kv(w, key, &b);
}

/* validates name, type and dims; the number of bytes the data must have */
static kiln_status check_tensor(gguf_writer *w, const char *name, uint32_t type, int ndim, const int64_t *dims,
                                uint64_t *bytes, int64_t *numel) {
    if (!name || !*name) return wfail(w, KILN_ERR_INVALID, "gguf writer: tensor without a name");
    for (size_t i = 0; i < w->nt; i++)
        if (!strcmp(w->ts[i].name, name)) return wfail(w, KILN_ERR_INVALID, "gguf writer: duplicate tensor '%s'", name);
    uint32_t block, bb;
    if (!gguf_ggml_type_layout(type, &block, &bb))
        return wfail(w, KILN_ERR_INVALID, "gguf writer: tensor '%s': unknown ggml type %" PRIu32, name, type);
    if (ndim < 0 || ndim > GGUF_MAX_DIMS || (ndim && !dims))
        return wfail(w, KILN_ERR_INVALID, "gguf writer: tensor '%s': %d dims (at most %d)", name, ndim, GGUF_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0 || (dims[i] && n > INT64_MAX / dims[i]))
            return wfail(w, KILN_ERR_INVALID, "gguf writer: tensor '%s': bad dimension %" PRId64, name, dims[i]);
        n *= dims[i];
    }
    int64_t row = ndim ? dims[ndim - 1] : 1;
    if (row % (int64_t)block)
        return wfail(w, KILN_ERR_INVALID, "gguf writer: tensor '%s': row length %" PRId64 " is not a multiple of %s's block of %" PRIu32,
                     name, row, gguf_ggml_type_name(type), block);
    *bytes = (uint64_t)(n / block) * bb;
    *numel = n;
    return KILN_OK;
}

static void push_tensor(gguf_writer *w, const char *name, uint32_t type, int ndim, const int64_t *dims, uint8_t *data,
                        uint64_t bytes) {
    KILN_GROW(w->ts, w->tcap, w->nt + 1);
    wtensor *t = &w->ts[w->nt++];
    memset(t, 0, sizeof *t);
    t->name = kiln_xstrdup(name);
    t->ggml_type = type;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->dims[i] = dims[i];
    t->data = data;
    t->bytes = bytes;
}

kiln_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t ggml_type, int ndim, const int64_t *dims,
                                   const void *data, uint64_t bytes) {
    uint64_t want;
    int64_t n;
    kiln_status s = check_tensor(w, name, ggml_type, ndim, dims, &want, &n);
    if (s) return s;
    if (bytes != want || (bytes && !data))
        return wfail(w, KILN_ERR_INVALID, "gguf writer: tensor '%s': %" PRIu64 " bytes given, its shape needs %" PRIu64,
                     name, bytes, want);
    if (want > (uint64_t)SIZE_MAX) return wfail(w, KILN_ERR_NOMEM, "gguf writer: tensor '%s' too large", name);
    uint8_t *copy = kiln_xmalloc(want ? (size_t)want : 1);
    if (want) memcpy(copy, data, (size_t)want);
    push_tensor(w, name, ggml_type, ndim, dims, copy, want);
    return KILN_OK;
}

kiln_status gguf_writer_add_tensor_f32(gguf_writer *w, const char *name, kiln_dtype dtype, int ndim,
                                       const int64_t *dims, const float *data) {
    uint32_t type = gguf_dtype_to_ggml(dtype);
    if (type == UINT32_MAX || dtype == KILN_I32)
        return wfail(w, KILN_ERR_INVALID, "gguf writer: tensor '%s': cannot convert f32 to %s", name ? name : "?",
                     kiln_dtype_name(dtype));
    uint64_t bytes;
    int64_t n;
    kiln_status s = check_tensor(w, name, type, ndim, dims, &bytes, &n);
    if (s) return s;
    if (n && !data) return wfail(w, KILN_ERR_INVALID, "gguf writer: tensor '%s': NULL data", name);
    uint8_t *out = kiln_xmalloc(bytes ? (size_t)bytes : 1);
    if (kiln_dtype_is_block(dtype)) {
        if (n && quant_quantize(dtype, data, out, n) != 0) {
            free(out);
            return wfail(w, KILN_ERR_UNSUPPORTED, "gguf writer: tensor '%s': no encoder for %s", name,
                         kiln_dtype_name(dtype));
        }
    } else {
        for (int64_t i = 0; i < n; i++) dtype_store(dtype, out, i, (double)data[i]);
    }
    push_tensor(w, name, type, ndim, dims, out, bytes);
    return KILN_OK;
}

static int write_all(int fd, const void *p, size_t n) {
    const uint8_t *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* the alignment the file will use: "general.alignment" if present */
static kiln_status writer_alignment(gguf_writer *w, uint64_t *out) {
    *out = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->nkv; i++) {
        if (strcmp(w->kvs[i].key, "general.alignment")) continue;
        const uint8_t *v = w->kvs[i].value;
        uint32_t t = (uint32_t)v[0] | (uint32_t)v[1] << 8 | (uint32_t)v[2] << 16 | (uint32_t)v[3] << 24;
        uint64_t a = 0;
        if (t == GGUF_TYPE_UINT32) a = (uint64_t)v[4] | (uint64_t)v[5] << 8 | (uint64_t)v[6] << 16 | (uint64_t)v[7] << 24;
        if (!a || (a & (a - 1)) || a > (UINT64_C(1) << 30))
            return wfail(w, KILN_ERR_INVALID, "gguf writer: general.alignment must be a uint32 power of two");
        *out = a;
    }
    return KILN_OK;
}

kiln_status gguf_writer_write(gguf_writer *w, const char *path) {
    if (!path) return wfail(w, KILN_ERR_INVALID, "gguf writer: NULL path");
    uint64_t align;
    kiln_status s = writer_alignment(w, &align);
    if (s) return s;
    bbuf h = {0};
    bb_le(&h, GGUF_MAGIC, 4);
    bb_le(&h, GGUF_VERSION, 4);
    bb_le(&h, (uint64_t)w->nt, 8);
    bb_le(&h, (uint64_t)w->nkv, 8);
    for (size_t i = 0; i < w->nkv; i++) {
        bb_str(&h, w->kvs[i].key, strlen(w->kvs[i].key));
        bb_put(&h, w->kvs[i].value, w->kvs[i].bytes);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->nt; i++) {
        const wtensor *t = &w->ts[i];
        bb_str(&h, t->name, strlen(t->name));
        bb_le(&h, (uint64_t)t->ndim, 4);
        for (int d = t->ndim - 1; d >= 0; d--) bb_le(&h, (uint64_t)t->dims[d], 8); /* innermost first */
        bb_le(&h, t->ggml_type, 4);
        bb_le(&h, off, 8);
        off += (t->bytes + align - 1) / align * align;
    }
    static const uint8_t zeros[64];
    size_t tmpcap = strlen(path) + 32;
    char *tmp = kiln_xmalloc(tmpcap);
    snprintf(tmp, tmpcap, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        s = wfail(w, KILN_ERR_IO, "gguf writer: cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        free(h.p);
        return s;
    }
    int bad = write_all(fd, h.p, h.n);
    /* pad the header, then each tensor, to the alignment */
    uint64_t padn = (align - h.n % align) % align;
    while (!bad && padn) {
        size_t k = padn > sizeof zeros ? sizeof zeros : (size_t)padn;
        bad = write_all(fd, zeros, k);
        padn -= k;
    }
    for (size_t i = 0; !bad && i < w->nt; i++) {
        const wtensor *t = &w->ts[i];
        bad = write_all(fd, t->data, (size_t)t->bytes);
        padn = (align - t->bytes % align) % align;
        while (!bad && padn) {
            size_t k = padn > sizeof zeros ? sizeof zeros : (size_t)padn;
            bad = write_all(fd, zeros, k);
            padn -= k;
        }
    }
    free(h.p);
    if (bad || fsync(fd) != 0) bad = 1;
    if (close(fd) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        s = wfail(w, KILN_ERR_IO, "gguf writer: writing %s failed: %s", path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return s;
    }
    free(tmp);
    return KILN_OK;
}
