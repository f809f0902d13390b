/* test_gguf.c — the GGUF reader and writer: round trips of every metadata
 * type and of tensors, typed getters with range checks, and hostile input:
 * every truncation of a small file, corrupted counts, lengths, offsets,
 * dims and types, and random bit flips — each must give an error with a
 * message, never a crash (make test-asan runs this under ASan/UBSan, and the
 * truncated buffers are exact-size heap copies so any over-read is caught).
 *
 * The hostile files are built with a tiny encoder written here (not the
 * writer under test), so the byte offsets of the fields are known.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gguf.h"
#include "quant.h"

/* ---- a tiny independent encoder ------------------------------------------ */

typedef struct enc {
    uint8_t b[4096];
    size_t n;
} enc;

static size_t e_le(enc *e, uint64_t v, int bytes) {
    size_t at = e->n;
    for (int i = 0; i < bytes; i++) e->b[e->n++] = (uint8_t)(v >> (8 * i));
    return at;
}
static size_t e_str(enc *e, const char *s) {
    size_t at = e_le(e, strlen(s), 8);
    memcpy(e->b + e->n, s, strlen(s));
    e->n += strlen(s);
    return at;
}
static void e_pad(enc *e, size_t a) {
    while (e->n % a) e->b[e->n++] = 0;
}

/* offsets of the fields of the small file built by small_file() */
typedef struct small_offs {
    size_t ntensors, nkv, key0_len, kv0_type, str_len, arr_type, arr_len, align_val;
    size_t t0_name_len, t0_ndims, t0_dim0, t0_dim1, t0_type, t0_offset, t1_type, t1_offset, data;
} small_offs;

/* a valid v3 file: 4 kvs (u32, string, array of 3 i16, general.alignment=32)
 * and 2 tensors: "a" f32 (2, 8) and "b" f32 (8) */
static void small_file(enc *e, small_offs *o) {
    memset(e, 0, sizeof *e);
    e_le(e, GGUF_MAGIC, 4);
    e_le(e, 3, 4);
    o->ntensors = e_le(e, 2, 8);
    o->nkv = e_le(e, 4, 8);
    o->key0_len = e_str(e, "test.u32");
    o->kv0_type = e_le(e, GGUF_TYPE_UINT32, 4);
    e_le(e, 123456, 4);
    e_str(e, "test.str");
    e_le(e, GGUF_TYPE_STRING, 4);
    o->str_len = e_str(e, "hello");
    e_str(e, "test.arr");
    e_le(e, GGUF_TYPE_ARRAY, 4);
    o->arr_type = e_le(e, GGUF_TYPE_INT16, 4);
    o->arr_len = e_le(e, 3, 8);
    e_le(e, (uint16_t)-7, 2);
    e_le(e, 8, 2);
    e_le(e, 9, 2);
    e_str(e, "general.alignment");
    e_le(e, GGUF_TYPE_UINT32, 4);
    o->align_val = e_le(e, 32, 4);
    o->t0_name_len = e_str(e, "a");
    o->t0_ndims = e_le(e, 2, 4);
    o->t0_dim0 = e_le(e, 8, 8); /* ne[0]: row length */
    o->t0_dim1 = e_le(e, 2, 8);
    o->t0_type = e_le(e, GGML_TYPE_F32, 4);
    o->t0_offset = e_le(e, 0, 8);
    e_str(e, "b");
    e_le(e, 1, 4);
    e_le(e, 8, 8);
    o->t1_type = e_le(e, GGML_TYPE_F32, 4);
    o->t1_offset = e_le(e, 64, 8);
    e_pad(e, 32);
    o->data = e->n;
    for (int i = 0; i < 16 + 8; i++) {
        float v = (float)i * 0.5f;
        uint32_t u;
        memcpy(&u, &v, 4);
        e_le(e, u, 4);
    }
    /* 96 data bytes: both tensors end on the alignment, no trailing padding */
}

static volatile unsigned byte_sink; /* keeps the byte-touching loops alive */

/* open an exact-size heap copy of buf[0..n) */
static kiln_status open_copy(const uint8_t *buf, size_t n, unsigned flags, char *err, size_t cap) {
    uint8_t *c = malloc(n ? n : 1);
    memcpy(c, buf, n);
    gguf_file *f = NULL;
    kiln_status s = gguf_open_memory(c, n, flags, &f, err, cap);
    if (s == KILN_OK) {
        /* touch every tensor byte and string: ASan catches anything out of bounds */
        unsigned sum = 0;
        for (int64_t i = 0; i < gguf_tensor_count(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            for (uint64_t j = 0; j < t->bytes; j++) sum += ((const uint8_t *)t->data)[j];
        }
        for (int64_t i = 0; i < gguf_kv_count(f); i++) {
            const gguf_kv *kv = gguf_kv_at(f, i);
            if (kv->strs)
                for (uint64_t j = 0; j < kv->count; j++)
                    for (uint64_t k = 0; k < kv->strs[j].len; k++) sum += (unsigned char)kv->strs[j].ptr[k];
        }
        byte_sink += sum;
        char *js = gguf_dump_json(f);
        free(js);
        gguf_close(f);
    } else if (f != NULL) {
        s = KILN_ERR_INVALID; /* a failed open must not hand out a file */
    }
    free(c);
    return s;
}

static void put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- cases --------------------------------------------------------------- */

static void case_small_valid(void) {
    CASE_BEGIN("gguf_small_file_parses");
    enc e;
    small_offs o;
    small_file(&e, &o);
    char err[512];
    gguf_file *f = NULL;
    kiln_status s = gguf_open_memory(e.b, e.n, 0, &f, err, sizeof err);
    CHECK(s == KILN_OK, "open: %s", err);
    if (s == KILN_OK) {
        CHECK(gguf_version(f) == 3, "version %u", gguf_version(f));
        CHECK(gguf_data_offset(f) == o.data, "data offset %llu want %zu", (unsigned long long)gguf_data_offset(f), o.data);
        int64_t v = 0;
        CHECK(gguf_get_int(f, "test.u32", 0, 1000000, &v) == KILN_OK && v == 123456, "u32 %lld", (long long)v);
        gguf_str str;
        CHECK(gguf_get_str(f, "test.str", &str) == KILN_OK && gguf_str_eq(str, "hello"), "str");
        const gguf_kv *arr = gguf_find(f, "test.arr");
        CHECK(arr && arr->count == 3 && arr->elem == GGUF_TYPE_INT16, "arr");
        if (arr) {
            CHECK(gguf_arr_int(arr, 0, &v) == KILN_OK && v == -7, "arr[0] %lld", (long long)v);
            CHECK(gguf_arr_int(arr, 2, &v) == KILN_OK && v == 9, "arr[2] %lld", (long long)v);
            CHECK(gguf_arr_int(arr, 3, &v) != KILN_OK, "arr[3] must be out of range");
        }
        const gguf_tensor *a = gguf_find_tensor(f, "a");
        CHECK(a && a->ndim == 2 && a->dims[0] == 2 && a->dims[1] == 8 && a->dtype == KILN_F32 && a->bytes == 64,
              "tensor a shape (kiln order, outermost first)");
        if (a) {
            float x;
            memcpy(&x, (const uint8_t *)a->data + 4 * 3, 4);
            CHECK(x == 1.5f && (const uint8_t *)a->data == e.b + o.data, "tensor a data %g", x);
        }
        const gguf_tensor *b = gguf_find_tensor(f, "b");
        CHECK(b && b->ndim == 1 && b->dims[0] == 8 && (const uint8_t *)b->data == e.b + o.data + 64, "tensor b");
        CHECK(gguf_find_tensor(f, "c") == NULL, "no tensor c");
        gguf_close(f);
    }
    CASE_END();
}

static void case_truncation(void) {
    CASE_BEGIN("gguf_every_truncation_is_an_error");
    enc e;
    small_offs o;
    small_file(&e, &o);
    CHECK(open_copy(e.b, e.n, 0, NULL, 0) == KILN_OK, "the full file must open");
    for (size_t n = 0; n < e.n; n++) {
        char err[512] = "";
        kiln_status s = open_copy(e.b, n, 0, err, sizeof err);
        CHECK(s != KILN_OK, "prefix of %zu of %zu bytes opened", n, e.n);
        CHECK(err[0] != 0, "prefix %zu: no message", n);
        if (n >= 24) CHECK(strstr(err, "offset") != NULL, "prefix %zu: message without an offset: %s", n, err);
        if (check_case_failed) break;
        /* also with the read-into-memory flag */
        CHECK(open_copy(e.b, n, GGUF_OPEN_READ, NULL, 0) != KILN_OK, "prefix %zu opened (read mode)", n);
    }
    CASE_END();
}

/* corrupt one field of the small file; the open must fail with status want
 * (or any error when want is KILN_OK) and a message containing `needle` */
static void corrupt(const char *what, size_t at, uint64_t value, int bytes, kiln_status want, const char *needle) {
    enc e;
    small_offs o;
    small_file(&e, &o);
    (void)o;
    put_le(e.b + at, value, bytes);
    char err[512] = "";
    kiln_status s = open_copy(e.b, e.n, 0, err, sizeof err);
    CHECK(s != KILN_OK, "%s: corrupted file opened", what);
    if (want != KILN_OK) CHECK(s == want, "%s: status %s, want %s (%s)", what, kiln_status_name(s), kiln_status_name(want), err);
    if (needle) CHECK(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", what, err, needle);
}

static void case_corrupt_fields(void) {
    CASE_BEGIN("gguf_corrupt_fields_rejected");
    enc e;
    small_offs o;
    small_file(&e, &o);
    corrupt("magic", 0, 0x46554746, 4, KILN_ERR_FORMAT, "magic");
    corrupt("version 1", 4, 1, 4, KILN_ERR_UNSUPPORTED, "version");
    corrupt("version 99", 4, 99, 4, KILN_ERR_FORMAT, "version");
    corrupt("huge tensor count", o.ntensors, UINT64_MAX, 8, KILN_ERR_FORMAT, "tensor count");
    corrupt("huge kv count", o.nkv, UINT64_C(1) << 40, 8, KILN_ERR_FORMAT, "metadata count");
    corrupt("more kvs than present", o.nkv, 5, 8, KILN_OK, NULL);
    corrupt("huge key length", o.key0_len, UINT64_MAX, 8, KILN_ERR_FORMAT, "metadata key");
    corrupt("unknown value type", o.kv0_type, 13, 4, KILN_ERR_FORMAT, "unknown value type");
    corrupt("huge string length", o.str_len, UINT64_MAX - 3, 8, KILN_ERR_FORMAT, "length");
    corrupt("huge array length", o.arr_len, UINT64_C(1) << 62, 8, KILN_ERR_FORMAT, "array length");
    corrupt("nested array", o.arr_type, GGUF_TYPE_ARRAY, 4, KILN_ERR_UNSUPPORTED, "nested");
    corrupt("alignment 3", o.align_val, 3, 4, KILN_ERR_FORMAT, "general.alignment");
    corrupt("alignment 0", o.align_val, 0, 4, KILN_ERR_FORMAT, "general.alignment");
    corrupt("alignment 2^31", o.align_val, UINT64_C(1) << 31, 4, KILN_ERR_FORMAT, "general.alignment");
    corrupt("huge tensor name", o.t0_name_len, UINT64_C(1) << 63, 8, KILN_ERR_FORMAT, "tensor name");
    corrupt("n_dims 5", o.t0_ndims, 5, 4, KILN_ERR_FORMAT, "n_dims");
    corrupt("dims overflow", o.t0_dim1, UINT64_C(1) << 62, 8, KILN_ERR_FORMAT, "overflow");
    corrupt("negative dim", o.t0_dim0, UINT64_MAX, 8, KILN_ERR_FORMAT, "overflow");
    corrupt("huge dim", o.t0_dim1, UINT64_C(1) << 40, 8, KILN_ERR_FORMAT, "end of the file");
    corrupt("unknown ggml type", o.t0_type, 1000, 4, KILN_ERR_FORMAT, "unknown ggml type");
    corrupt("row not a block multiple", o.t0_type, GGML_TYPE_Q8_0, 4, KILN_ERR_FORMAT, "block size");
    corrupt("unaligned offset", o.t1_offset, 65, 8, KILN_ERR_FORMAT, "alignment");
    /* the message gives the tensor's own file offset, not the data section's */
    char past_end[96];
    snprintf(past_end, sizeof past_end, "data offset 96 (file offset %zu) run past the end of the file", o.data + 96);
    corrupt("offset past the end", o.t1_offset, 96, 8, KILN_ERR_FORMAT, past_end);
    corrupt("huge offset", o.t1_offset, UINT64_MAX - 31, 8, KILN_ERR_FORMAT, "beyond any file");
    corrupt("duplicate tensor name", o.t0_name_len + 8, 'b', 1, KILN_ERR_FORMAT, "duplicate tensor");
    /* "test.u32" -> "test.str", the next key */
    corrupt("duplicate key", o.key0_len + 8 + 5, 's' | 't' << 8 | 'r' << 16, 3, KILN_ERR_FORMAT, "duplicate metadata key");
    CASE_END();
}

static void case_unsupported_type(void) {
    CASE_BEGIN("gguf_unsupported_tensor_type");
    /* a Q5_1 tensor: named and sized by the reader, refused unless allowed */
    enc e;
    memset(&e, 0, sizeof e);
    e_le(&e, GGUF_MAGIC, 4);
    e_le(&e, 3, 4);
    e_le(&e, 1, 8);
    e_le(&e, 0, 8);
    e_str(&e, "blk.0.w");
    e_le(&e, 1, 4);
    e_le(&e, 32, 8);
    e_le(&e, GGML_TYPE_Q5_1, 4);
    e_le(&e, 0, 8);
    e_pad(&e, 32);
    for (int i = 0; i < 24; i++) e.b[e.n++] = (uint8_t)i;
    char err[512] = "";
    gguf_file *f = NULL;
    kiln_status s = gguf_open_memory(e.b, e.n, 0, &f, err, sizeof err);
    CHECK(s == KILN_ERR_UNSUPPORTED && f == NULL, "status %s", kiln_status_name(s));
    CHECK(strstr(err, "Q5_1") && strstr(err, "blk.0.w"), "message: %s", err);
    s = gguf_open_memory(e.b, e.n, GGUF_OPEN_ALLOW_UNSUPPORTED, &f, err, sizeof err);
    CHECK(s == KILN_OK, "allowed: %s", err);
    if (f) {
        const gguf_tensor *t = gguf_tensor_at(f, 0);
        CHECK(t->dtype == KILN_DTYPE_COUNT && t->bytes == 24 && t->ggml_type == GGML_TYPE_Q5_1, "Q5_1 tensor info");
        gguf_close(f);
    }
    CASE_END();
}

static void case_bit_flips(void) {
    CASE_BEGIN("gguf_random_bit_flips_never_crash");
    enc e;
    small_offs o;
    small_file(&e, &o);
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    int opened = 0, failed = 0;
    for (int it = 0; it < 4000; it++) {
        enc c = e;
        int flips = 1 + it % 4;
        for (int k = 0; k < flips; k++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            size_t at = (size_t)(rng % c.n);
            c.b[at] ^= (uint8_t)(1u << ((rng >> 32) % 8));
        }
        char err[512] = "";
        kiln_status s = open_copy(c.b, c.n, 0, err, sizeof err);
        if (s == KILN_OK) opened++;
        else {
            failed++;
            CHECK(err[0] != 0, "iteration %d: error without a message", it);
        }
    }
    /* flips in tensor data and some values are harmless; flips in the
     * structure must be caught: both outcomes must occur */
    CHECK(opened > 100 && failed > 100, "opened %d, failed %d", opened, failed);
    CASE_END();
}

/* write a file with every metadata type and several tensor formats, read it
 * back mapped and read into memory */
static void case_round_trip(void) {
    CASE_BEGIN("gguf_writer_reader_round_trip");
    char path[] = "/tmp/kiln_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) close(fd);
    gguf_writer *w = gguf_writer_new();
    uint8_t u8 = 250;
    int8_t i8 = -100;
    uint16_t u16 = 65000;
    int16_t i16 = -32000;
    int64_t i64 = INT64_MIN + 5;
    CHECK(gguf_writer_add(w, "t.u8", GGUF_TYPE_UINT8, &u8) == KILN_OK, "u8");
    CHECK(gguf_writer_add(w, "t.i8", GGUF_TYPE_INT8, &i8) == KILN_OK, "i8");
    CHECK(gguf_writer_add(w, "t.u16", GGUF_TYPE_UINT16, &u16) == KILN_OK, "u16");
    CHECK(gguf_writer_add(w, "t.i16", GGUF_TYPE_INT16, &i16) == KILN_OK, "i16");
    CHECK(gguf_writer_add_u32(w, "t.u32", 4000000000u) == KILN_OK, "u32");
    CHECK(gguf_writer_add_i32(w, "t.i32", -2000000000) == KILN_OK, "i32");
    CHECK(gguf_writer_add_f32(w, "t.f32", 0.1f) == KILN_OK, "f32");
    CHECK(gguf_writer_add_bool(w, "t.bool", 1) == KILN_OK, "bool");
    CHECK(gguf_writer_add_str(w, "t.str", "héllo") == KILN_OK, "str");
    CHECK(gguf_writer_add_u64(w, "t.u64", UINT64_MAX) == KILN_OK, "u64");
    CHECK(gguf_writer_add(w, "t.i64", GGUF_TYPE_INT64, &i64) == KILN_OK, "i64");
    CHECK(gguf_writer_add_f64(w, "t.f64", -1.0 / 3.0) == KILN_OK, "f64");
    CHECK(gguf_writer_add_str_n(w, "t.bin", "a\0b", 3) == KILN_OK, "bytes");
    int32_t ia[4] = {1, -2, 3, INT32_MIN};
    float fa[3] = {1.5f, -0.25f, 1e30f};
    uint8_t ba[3] = {1, 0, 1};
    CHECK(gguf_writer_add_array(w, "t.ai32", GGUF_TYPE_INT32, ia, 4) == KILN_OK, "i32 array");
    CHECK(gguf_writer_add_array(w, "t.af32", GGUF_TYPE_FLOAT32, fa, 3) == KILN_OK, "f32 array");
    CHECK(gguf_writer_add_array(w, "t.abool", GGUF_TYPE_BOOL, ba, 3) == KILN_OK, "bool array");
    CHECK(gguf_writer_add_array(w, "t.aempty", GGUF_TYPE_UINT64, NULL, 0) == KILN_OK, "empty array");
    const char *strs[3] = {"<s>", "", "x\ny"};
    CHECK(gguf_writer_add_str_array(w, "t.astr", strs, NULL, 3) == KILN_OK, "string array");
    /* writer-side errors */
    CHECK(gguf_writer_add_u32(w, "t.u32", 1) == KILN_ERR_INVALID, "duplicate key accepted");
    CHECK(gguf_writer_add(w, "t.bad", GGUF_TYPE_ARRAY, &u8) == KILN_ERR_INVALID, "array as scalar accepted");

    float wt[2 * 64];
    for (int i = 0; i < 128; i++) wt[i] = sinf((float)i * 0.37f);
    int64_t d2[2] = {2, 64}, d1[1] = {64}, dk[2] = {1, 256};
    float wk[256];
    for (int i = 0; i < 256; i++) wk[i] = cosf((float)i * 0.11f);
    CHECK(gguf_writer_add_tensor_f32(w, "w.f32", KILN_F32, 2, d2, wt) == KILN_OK, "f32 tensor");
    CHECK(gguf_writer_add_tensor_f32(w, "w.f16", KILN_F16, 2, d2, wt) == KILN_OK, "f16 tensor");
    CHECK(gguf_writer_add_tensor_f32(w, "w.q8", KILN_Q8_0, 2, d2, wt) == KILN_OK, "q8_0 tensor");
    CHECK(gguf_writer_add_tensor_f32(w, "w.q4k", KILN_Q4_K, 2, dk, wk) == KILN_OK, "q4_k tensor");
    CHECK(gguf_writer_add_tensor_f32(w, "w.bf16", KILN_BF16, 1, d1, wt) == KILN_OK, "bf16 tensor");
    CHECK(gguf_writer_add_tensor_f32(w, "w.f32", KILN_F32, 1, d1, wt) == KILN_ERR_INVALID, "duplicate tensor accepted");
    int64_t bad[2] = {2, 63};
    CHECK(gguf_writer_add_tensor_f32(w, "w.badq", KILN_Q8_0, 2, bad, wt) == KILN_ERR_INVALID, "63-wide q8_0 accepted");
    CHECK(gguf_writer_add_tensor(w, "w.raw", GGML_TYPE_F32, 1, d1, wt, 100) == KILN_ERR_INVALID, "wrong byte count accepted");
    CHECK(gguf_writer_write(w, path) == KILN_OK, "write: %s", gguf_writer_error(w));
    gguf_writer_free(w);

    for (int mode = 0; mode < 2; mode++) {
        char err[512];
        gguf_file *f = NULL;
        kiln_status s = gguf_open(path, mode ? GGUF_OPEN_READ : 0, &f, err, sizeof err);
        CHECK(s == KILN_OK, "open (mode %d): %s", mode, err);
        if (!f) break;
        int64_t v;
        uint64_t u;
        double d;
        int bv;
        gguf_str str;
        CHECK(gguf_get_int(f, "t.u8", 0, 255, &v) == KILN_OK && v == 250, "u8");
        CHECK(gguf_get_int(f, "t.u8", 0, 100, &v) == KILN_ERR_RANGE, "u8 range check");
        CHECK(strstr(gguf_error(f), "t.u8") != NULL, "range error names the key: %s", gguf_error(f));
        CHECK(gguf_get_int(f, "t.i8", -128, 127, &v) == KILN_OK && v == -100, "i8");
        CHECK(gguf_get_int(f, "t.u16", 0, 70000, &v) == KILN_OK && v == 65000, "u16");
        CHECK(gguf_get_int(f, "t.i16", INT16_MIN, 0, &v) == KILN_OK && v == -32000, "i16");
        CHECK(gguf_get_int(f, "t.u32", 0, INT64_MAX, &v) == KILN_OK && v == 4000000000, "u32");
        CHECK(gguf_get_int(f, "t.u32", 0, INT32_MAX, &v) == KILN_ERR_RANGE, "u32 into int32 range");
        CHECK(gguf_get_int(f, "t.i32", INT32_MIN, INT32_MAX, &v) == KILN_OK && v == -2000000000, "i32");
        CHECK(gguf_get_float(f, "t.f32", &d) == KILN_OK && d == (double)0.1f, "f32 %g", d);
        CHECK(gguf_get_bool(f, "t.bool", &bv) == KILN_OK && bv == 1, "bool");
        CHECK(gguf_get_str(f, "t.str", &str) == KILN_OK && gguf_str_eq(str, "héllo"), "str");
        CHECK(gguf_get_u64(f, "t.u64", &u) == KILN_OK && u == UINT64_MAX, "u64");
        CHECK(gguf_get_int(f, "t.u64", INT64_MIN, INT64_MAX, &v) == KILN_ERR_RANGE, "u64 max as int64");
        CHECK(gguf_get_int(f, "t.i64", INT64_MIN, INT64_MAX, &v) == KILN_OK && v == INT64_MIN + 5, "i64");
        CHECK(gguf_get_u64(f, "t.i64", &u) == KILN_ERR_RANGE, "negative as u64");
        CHECK(gguf_get_float(f, "t.f64", &d) == KILN_OK && d == -1.0 / 3.0, "f64");
        CHECK(gguf_get_str(f, "t.bin", &str) == KILN_OK && str.len == 3 && !memcmp(str.ptr, "a\0b", 3), "bytes");
        /* a name may not hold a NUL: "a\0b" would compare and print as "a" */
        CHECK(gguf_get_name(f, "t.bin", &str) == KILN_ERR_FORMAT && strstr(gguf_error(f), "'t.bin'") &&
                  strstr(gguf_error(f), "NUL"), "name with a NUL: %s", gguf_error(f));
        CHECK(gguf_get_name(f, "t.str", &str) == KILN_OK, "a plain name");
        CHECK(gguf_get_str(f, "t.u8", &str) == KILN_ERR_FORMAT, "int as string");
        CHECK(gguf_get_int(f, "t.str", 0, 1, &v) == KILN_ERR_FORMAT, "string as int");
        CHECK(gguf_get_int(f, "t.missing", 0, 1, &v) == KILN_ERR_FORMAT && strstr(gguf_error(f), "missing"), "missing");
        CHECK(gguf_get_int_or(f, "t.missing", 0, 10, 7, &v) == KILN_OK && v == 7, "default");
        CHECK(gguf_get_float_or(f, "t.missing", 2.5, &d) == KILN_OK && d == 2.5, "float default");
        gguf_type et;
        uint64_t n;
        CHECK(gguf_get_array(f, "t.ai32", &et, &n) == KILN_OK && et == GGUF_TYPE_INT32 && n == 4, "i32 array");
        const gguf_kv *kv = gguf_find(f, "t.ai32");
        CHECK(gguf_arr_int(kv, 3, &v) == KILN_OK && v == INT32_MIN, "i32 array [3]");
        kv = gguf_find(f, "t.af32");
        CHECK(gguf_arr_float(kv, 2, &d) == KILN_OK && d == (double)1e30f, "f32 array [2]");
        kv = gguf_find(f, "t.abool");
        CHECK(kv && kv->count == 3 && gguf_arr_int(kv, 1, &v) == KILN_OK && v == 0, "bool array");
        kv = gguf_find(f, "t.aempty");
        CHECK(kv && kv->count == 0 && kv->elem == GGUF_TYPE_UINT64, "empty array");
        kv = gguf_find(f, "t.astr");
        CHECK(kv && kv->count == 3 && gguf_arr_str(kv, 2, &str) == KILN_OK && gguf_str_eq(str, "x\ny"), "string array");
        CHECK(kv && gguf_arr_str(kv, 1, &str) == KILN_OK && str.len == 0, "empty string element");
        CHECK(gguf_kv_count(f) == 18, "kv count %lld", (long long)gguf_kv_count(f));

        CHECK(gguf_tensor_count(f) == 5, "tensor count %lld", (long long)gguf_tensor_count(f));
        const gguf_tensor *t = gguf_find_tensor(f, "w.f32");
        CHECK(t && t->dtype == KILN_F32 && t->ndim == 2 && t->dims[0] == 2 && t->dims[1] == 64 &&
                  t->bytes == 512 && !memcmp(t->data, wt, 512), "f32 tensor data");
        t = gguf_find_tensor(f, "w.f16");
        CHECK(t && t->dtype == KILN_F16 && t->bytes == 256, "f16 tensor");
        t = gguf_find_tensor(f, "w.q8");
        if (t) {
            float back[128];
            quant_dequantize(KILN_Q8_0, t->data, back, 128);
            float maxerr = 0;
            for (int i = 0; i < 128; i++) maxerr = fmaxf(maxerr, fabsf(back[i] - wt[i]));
            CHECK(t->dtype == KILN_Q8_0 && t->bytes == 4 * 34 && maxerr < 0.01f, "q8_0 tensor err %g", maxerr);
        } else CHECK(0, "q8_0 tensor missing");
        t = gguf_find_tensor(f, "w.q4k");
        CHECK(t && t->dtype == KILN_Q4_K && t->bytes == 144 && t->dims[1] == 256, "q4_k tensor");
        for (int64_t i = 0; i < gguf_tensor_count(f); i++)
            CHECK(gguf_tensor_at(f, i)->offset % gguf_alignment(f) == 0, "tensor %lld offset unaligned", (long long)i);
        gguf_close(f);
    }
    unlink(path);
    CASE_END();
}

static void case_open_errors(void) {
    CASE_BEGIN("gguf_open_errors");
    char err[512];
    gguf_file *f = NULL;
    CHECK(gguf_open("/nonexistent/x.gguf", 0, &f, err, sizeof err) == KILN_ERR_IO && f == NULL, "missing file");
    CHECK(strstr(err, "/nonexistent/x.gguf") != NULL, "message names the path: %s", err);
    CHECK(gguf_open("/tmp", 0, &f, err, sizeof err) == KILN_ERR_IO, "directory");
    char path[] = "/tmp/kiln_test_gguf_empty_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    CHECK(gguf_open(path, 0, &f, err, sizeof err) == KILN_ERR_FORMAT && f == NULL, "empty file");
    CHECK(strstr(err, "truncated") != NULL, "empty file message: %s", err);
    unlink(path);
    /* a writer whose target directory does not exist */
    gguf_writer *w = gguf_writer_new();
    CHECK(gguf_writer_write(w, "/nonexistent/dir/x.gguf") == KILN_ERR_IO, "write to a missing directory");
    CHECK(strlen(gguf_writer_error(w)) > 0, "writer message");
    gguf_writer_free(w);
    CASE_END();
}

int main(void) {
    case_small_valid();
    case_truncation();
    case_corrupt_fields();
    case_unsupported_type();
    case_bit_flips();
    case_round_trip();
    case_open_errors();
    return check_exit();
}
