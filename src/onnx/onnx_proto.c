/* onnx_proto.c — decoding a serialized ONNX ModelProto (onnx.proto field
 * numbers) with the wire-format reader of pb.c into the structures of
 * onnx_proto.h. Every count and size read from the file is checked before it
 * is used; allocation failures and malformed data become messages. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "onnx_proto.h"
#include "pb.h"

/* every allocation is a block in a singly linked list headed at m->mem */
typedef struct ox_block { struct ox_block *next; max_align_t data[]; } ox_block;

static void *ox_alloc(ox_model *m, size_t bytes) {
    if (bytes > ((size_t)1 << 40)) return NULL;
    ox_block *b = calloc(1, sizeof *b + (bytes ? bytes : 1));
    if (!b) return NULL;
    b->next = (ox_block *)m->mem;
    m->mem = b;
    return b->data;
}

void ox_model_free(ox_model *m) {
    ox_block *b = (ox_block *)m->mem;
    while (b) {
        ox_block *n = b->next;
        free(b);
        b = n;
    }
    m->mem = NULL;
}

static int fail(ox_model *m, kiln_status s, const char *fmt, ...) {
    if (m->status == KILN_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->err, sizeof m->err, fmt, ap);
        va_end(ap);
        m->status = s;
    }
    return 0;
}

static char *dup_bytes(ox_model *m, const uint8_t *p, size_t n) {
    char *s = ox_alloc(m, n + 1);
    if (!s) return NULL;
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}

/* grow an array of element size `el` by one, returning the new element */
static void *push(ox_model *m, void **arr, int *count, int *cap, size_t el) {
    if (*count == *cap) {
        int nc = *cap ? *cap * 2 : 8;
        void *na = ox_alloc(m, (size_t)nc * el);
        if (!na) return NULL;
        if (*count) memcpy(na, *arr, (size_t)*count * el);
        *arr = na; /* the old block stays in the list until the model is freed */
        *cap = nc;
    }
    char *e = (char *)*arr + (size_t)(*count)++ * el;
    memset(e, 0, el);
    return e;
}

size_t ox_dtype_size(int t) {
    switch (t) {
    case OX_FLOAT: case OX_INT32: case OX_UINT32: return 4;
    case OX_UINT8: case OX_INT8: case OX_BOOL: return 1;
    case OX_UINT16: case OX_INT16: case OX_FLOAT16: case OX_BFLOAT16: return 2;
    case OX_INT64: case OX_DOUBLE: case OX_UINT64: return 8;
    default: return 0;
    }
}

const char *ox_dtype_name(int t) {
    static const char *names[] = {"undefined", "float", "uint8", "int8", "uint16", "int16", "int32", "int64",
                                  "string", "bool", "float16", "double", "uint32", "uint64", "complex64",
                                  "complex128", "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2",
                                  "float8e5m2fnuz", "uint4", "int4", "float4e2m1"};
    return t >= 0 && t < (int)(sizeof names / sizeof *names) ? names[t] : "unknown";
}

double ox_elem_f(int t, const void *d, int64_t i) {
    switch (t) {
    case OX_FLOAT: return ((const float *)d)[i];
    case OX_DOUBLE: return ((const double *)d)[i];
    case OX_FLOAT16: return dtype_f16_to_f32(((const uint16_t *)d)[i]);
    case OX_BFLOAT16: return dtype_bf16_to_f32(((const uint16_t *)d)[i]);
    default: return (double)ox_elem_i(t, d, i);
    }
}

int64_t ox_elem_i(int t, const void *d, int64_t i) {
    switch (t) {
    case OX_UINT8: case OX_BOOL: return ((const uint8_t *)d)[i];
    case OX_INT8: return ((const int8_t *)d)[i];
    case OX_UINT16: return ((const uint16_t *)d)[i];
    case OX_INT16: return ((const int16_t *)d)[i];
    case OX_INT32: return ((const int32_t *)d)[i];
    case OX_UINT32: return ((const uint32_t *)d)[i];
    case OX_INT64: return ((const int64_t *)d)[i];
    case OX_UINT64: return (int64_t)((const uint64_t *)d)[i];
    case OX_FLOAT: case OX_DOUBLE: case OX_FLOAT16: case OX_BFLOAT16: {
        double v = ox_elem_f(t, d, i);
        if (!(v > -9.2e18 && v < 9.2e18)) return 0;
        return (int64_t)v;
    }
    default: return 0;
    }
}

/* ---- tensors ------------------------------------------------------------ */

/* the elements of a typed repeated field (float_data 4, int32_data 5,
 * int64_data 7, double_data 10, uint64_data 11), stored into t->data */
static int typed_field(ox_model *m, ox_tensor *t, const pb_field *f, int64_t *filled) {
    size_t es = ox_dtype_size(t->dtype);
    uint8_t *out = t->data;
    if (f->num == 4 || f->num == 10) { /* fixed-width floats / doubles, packed or single */
        size_t w = f->num == 4 ? 4 : 8;
        if ((f->num == 4 && t->dtype != OX_FLOAT) || (f->num == 10 && t->dtype != OX_DOUBLE))
            return fail(m, KILN_ERR_FORMAT, "tensor '%s': data field %u does not match its type %s", t->name, f->num,
                        ox_dtype_name(t->dtype));
        const uint8_t *p;
        size_t n;
        uint8_t one[8];
        if (f->wire == PB_LEN) { p = f->data; n = f->len; }
        else if ((f->wire == PB_I32 && w == 4) || (f->wire == PB_I64 && w == 8)) {
            for (size_t k = 0; k < w; k++) one[k] = (uint8_t)(f->v >> (8 * k));
            p = one; n = w;
        } else return fail(m, KILN_ERR_FORMAT, "tensor '%s': malformed data field %u", t->name, f->num);
        if (n % w || (int64_t)(n / w) > t->n - *filled)
            return fail(m, KILN_ERR_FORMAT, "tensor '%s': more data than its dims hold", t->name);
        memcpy(out + (size_t)*filled * w, p, n);
        *filled += (int64_t)(n / w);
        return 1;
    }
    /* varint fields: int32_data carries every type of 32 bits or less (f16 and
     * bf16 as bit patterns), int64_data int64, uint64_data uint32/uint64 */
    pb_iter it = pb_varint_iter(f);
    uint64_t v;
    while (pb_iter_next(&it, &v)) {
        if (*filled >= t->n) return fail(m, KILN_ERR_FORMAT, "tensor '%s': more data than its dims hold", t->name);
        uint8_t *e = out + (size_t)*filled * es;
        switch (es) {
        case 1: *e = (uint8_t)v; break;
        case 2: { uint16_t x = (uint16_t)v; memcpy(e, &x, 2); break; }
        case 4: { uint32_t x = (uint32_t)v; memcpy(e, &x, 4); break; }
        default: memcpy(e, &v, 8); break;
        }
        (*filled)++;
    }
    if (it.r.bad) return fail(m, KILN_ERR_FORMAT, "tensor '%s': malformed packed data", t->name);
    return 1;
}

static int safe_relative(const char *p) {
    if (!*p || p[0] == '/') return 0;
    for (const char *s = p; *s;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 2 && s[0] == '.' && s[1] == '.') return 0;
        if (!e) break;
        s = e + 1;
    }
    return 1;
}

static int read_external(ox_model *m, ox_tensor *t, const char *dir, const char *loc, int64_t off, int64_t len) {
    size_t bytes = (size_t)t->n * ox_dtype_size(t->dtype);
    if (!dir) return fail(m, KILN_ERR_IO, "tensor '%s': external data '%s' but no model folder", t->name, loc);
    if (!loc || !safe_relative(loc))
        return fail(m, KILN_ERR_FORMAT, "tensor '%s': external data location '%s' is not a relative path inside the model's folder",
                    t->name, loc ? loc : "");
    if (off < 0 || (len >= 0 && (uint64_t)len != bytes))
        return fail(m, KILN_ERR_FORMAT, "tensor '%s': external data length %lld, its dims need %zu bytes", t->name,
                    (long long)len, bytes);
    size_t pl = strlen(dir) + strlen(loc) + 2;
    char *path = ox_alloc(m, pl);
    if (!path) return fail(m, KILN_ERR_NOMEM, "out of memory");
    snprintf(path, pl, "%s/%s", dir, loc);
    FILE *f = fopen(path, "rb");
    if (!f) return fail(m, KILN_ERR_IO, "tensor '%s': cannot open external data %s: %s", t->name, path, strerror(errno));
    int ok = fseeko(f, (off_t)off, SEEK_SET) == 0 && fread(t->data, 1, bytes, f) == bytes;
    fclose(f);
    if (!ok) return fail(m, KILN_ERR_FORMAT, "tensor '%s': external data %s holds fewer than %zu bytes at offset %lld",
                         t->name, path, bytes, (long long)off);
    return 1;
}

static int decode_tensor(ox_model *m, pb_reader r, ox_tensor *t, const char *dir) {
    pb_field f;
    int ext = 0;
    const uint8_t *raw = NULL;
    size_t raw_len = 0;
    int have_raw = 0;
    char *loc = NULL;
    int64_t off = 0, len = -1;
    t->name = "";
    /* first pass: dims, type, name, where the data is */
    pb_reader r0 = r;
    while (pb_next(&r, &f)) {
        switch (f.num) {
        case 1: {
            pb_iter it = pb_varint_iter(&f);
            uint64_t v;
            while (pb_iter_next(&it, &v)) {
                if (t->ndim >= KILN_MAX_DIMS) return fail(m, KILN_ERR_UNSUPPORTED, "a tensor has more than %d dims", KILN_MAX_DIMS);
                if ((int64_t)v < 0 || v > ((uint64_t)1 << 40)) return fail(m, KILN_ERR_FORMAT, "a tensor has dim %lld", (long long)(int64_t)v);
                t->dims[t->ndim++] = (int64_t)v;
            }
            if (it.r.bad) return fail(m, KILN_ERR_FORMAT, "malformed tensor dims");
            break;
        }
        case 2: t->dtype = (int)f.v; break;
        case 8: if (f.wire == PB_LEN && !(t->name = dup_bytes(m, f.data, f.len))) return fail(m, KILN_ERR_NOMEM, "out of memory"); break;
        case 9: raw = f.data; raw_len = f.len; have_raw = 1; break;
        case 14: ext = f.v == 1; break;
        case 13: { /* external_data: key/value pairs */
            pb_reader e = pb_sub(&f);
            pb_field kv;
            const uint8_t *k = NULL, *v = NULL;
            size_t kn = 0, vn = 0;
            while (pb_next(&e, &kv)) {
                if (kv.num == 1 && kv.wire == PB_LEN) { k = kv.data; kn = kv.len; }
                if (kv.num == 2 && kv.wire == PB_LEN) { v = kv.data; vn = kv.len; }
            }
            if (e.bad || !k || !v) return fail(m, KILN_ERR_FORMAT, "malformed external_data entry");
            char *vs = dup_bytes(m, v, vn);
            if (!vs) return fail(m, KILN_ERR_NOMEM, "out of memory");
            if (kn == 8 && !memcmp(k, "location", 8)) loc = vs;
            else if (kn == 6 && !memcmp(k, "offset", 6)) off = strtoll(vs, NULL, 10);
            else if (kn == 6 && !memcmp(k, "length", 6)) len = strtoll(vs, NULL, 10);
            break;
        }
        case 3: return fail(m, KILN_ERR_UNSUPPORTED, "segmented tensors are not supported");
        default: break;
        }
    }
    if (r.bad) return fail(m, KILN_ERR_FORMAT, "malformed TensorProto");
    size_t es = ox_dtype_size(t->dtype);
    if (!es) return fail(m, KILN_ERR_UNSUPPORTED, "tensor '%s': element type %s (%d) is not supported", t->name,
                         ox_dtype_name(t->dtype), t->dtype);
    t->n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->dims[i] && t->n > ((int64_t)1 << 40) / t->dims[i])
            return fail(m, KILN_ERR_FORMAT, "tensor '%s' is too large", t->name);
        t->n *= t->dims[i];
    }
    size_t bytes = (size_t)t->n * es;
    if (!(t->data = ox_alloc(m, bytes))) return fail(m, KILN_ERR_NOMEM, "tensor '%s': out of memory (%zu bytes)", t->name, bytes);
    if (ext) return read_external(m, t, dir, loc, off, len);
    if (have_raw) {
        if (raw_len != bytes)
            return fail(m, KILN_ERR_FORMAT, "tensor '%s': raw_data has %zu bytes, its dims need %zu", t->name, raw_len, bytes);
        if (bytes) memcpy(t->data, raw, bytes);
        return 1;
    }
    int64_t filled = 0;
    while (pb_next(&r0, &f)) {
        int typed = f.num == 4 || f.num == 5 || f.num == 7 || f.num == 10 || f.num == 11;
        if (typed && !typed_field(m, t, &f, &filled)) return 0;
    }
    if (filled != t->n)
        return fail(m, KILN_ERR_FORMAT, "tensor '%s': %lld values for %lld elements", t->name, (long long)filled,
                    (long long)t->n);
    return 1;
}

/* ---- attributes, nodes, value infos ------------------------------------- */

static int decode_attr(ox_model *m, pb_reader r, ox_attr *a, const char *dir) {
    pb_field f;
    int nf = 0, ni = 0, capf = 0, capi = 0;
    a->name = "";
    while (pb_next(&r, &f)) {
        switch (f.num) {
        case 1: if (f.wire == PB_LEN && !(a->name = dup_bytes(m, f.data, f.len))) return fail(m, KILN_ERR_NOMEM, "out of memory"); break;
        case 20: a->type = (int)f.v; break;
        case 2: { uint32_t b = (uint32_t)f.v; float x; memcpy(&x, &b, 4); a->f = x; break; }
        case 3: a->i = (int64_t)f.v; break;
        case 4: if (f.wire == PB_LEN && !(a->s = dup_bytes(m, f.data, f.len))) return fail(m, KILN_ERR_NOMEM, "out of memory"); break;
        case 5:
            if (f.wire != PB_LEN || !(a->t = ox_alloc(m, sizeof *a->t))) return fail(m, KILN_ERR_FORMAT, "malformed attribute tensor");
            if (!decode_tensor(m, pb_sub(&f), a->t, dir)) return 0;
            break;
        case 7: { /* floats: packed or single fixed32 */
            const uint8_t *p; size_t n; uint8_t one[4];
            if (f.wire == PB_LEN) { p = f.data; n = f.len; }
            else if (f.wire == PB_I32) { for (int k = 0; k < 4; k++) one[k] = (uint8_t)(f.v >> (8 * k)); p = one; n = 4; }
            else return fail(m, KILN_ERR_FORMAT, "malformed attribute floats");
            if (n % 4) return fail(m, KILN_ERR_FORMAT, "malformed attribute floats");
            for (size_t k = 0; k < n; k += 4) {
                float *e = push(m, (void **)&a->floats, &nf, &capf, sizeof(float));
                if (!e) return fail(m, KILN_ERR_NOMEM, "out of memory");
                memcpy(e, p + k, 4);
            }
            break;
        }
        case 8: {
            pb_iter it = pb_varint_iter(&f);
            uint64_t v;
            while (pb_iter_next(&it, &v)) {
                int64_t *e = push(m, (void **)&a->ints, &ni, &capi, sizeof(int64_t));
                if (!e) return fail(m, KILN_ERR_NOMEM, "out of memory");
                *e = (int64_t)v;
            }
            if (it.r.bad) return fail(m, KILN_ERR_FORMAT, "malformed attribute ints");
            break;
        }
        default: break; /* graphs, strings lists, sparse tensors: kept as their type only */
        }
    }
    a->nfloats = nf;
    a->nints = ni;
    if (r.bad) return fail(m, KILN_ERR_FORMAT, "malformed AttributeProto");
    return 1;
}

static int push_str(ox_model *m, char ***arr, int *n, int *cap, const pb_field *f) {
    if (f->wire != PB_LEN) return fail(m, KILN_ERR_FORMAT, "malformed string field");
    char **e = push(m, (void **)arr, n, cap, sizeof(char *));
    if (!e || !(*e = dup_bytes(m, f->data, f->len))) return fail(m, KILN_ERR_NOMEM, "out of memory");
    return 1;
}

static int decode_node(ox_model *m, pb_reader r, ox_node *nd, const char *dir) {
    pb_field f;
    int ci = 0, co = 0, ca = 0;
    nd->op_type = nd->domain = nd->name = "";
    while (pb_next(&r, &f)) {
        switch (f.num) {
        case 1: if (!push_str(m, &nd->inputs, &nd->n_in, &ci, &f)) return 0; break;
        case 2: if (!push_str(m, &nd->outputs, &nd->n_out, &co, &f)) return 0; break;
        case 3: if (f.wire == PB_LEN && !(nd->name = dup_bytes(m, f.data, f.len))) return fail(m, KILN_ERR_NOMEM, "out of memory"); break;
        case 4: if (f.wire == PB_LEN && !(nd->op_type = dup_bytes(m, f.data, f.len))) return fail(m, KILN_ERR_NOMEM, "out of memory"); break;
        case 7: if (f.wire == PB_LEN && !(nd->domain = dup_bytes(m, f.data, f.len))) return fail(m, KILN_ERR_NOMEM, "out of memory"); break;
        case 5: {
            if (f.wire != PB_LEN) return fail(m, KILN_ERR_FORMAT, "malformed attribute");
            ox_attr *a = push(m, (void **)&nd->attrs, &nd->n_attrs, &ca, sizeof *a);
            if (!a) return fail(m, KILN_ERR_NOMEM, "out of memory");
            if (!decode_attr(m, pb_sub(&f), a, dir)) return 0;
            break;
        }
        default: break;
        }
    }
    if (r.bad) return fail(m, KILN_ERR_FORMAT, "malformed NodeProto");
    return 1;
}

static int decode_shape(ox_model *m, pb_reader r, ox_value_info *v) {
    pb_field f;
    v->has_shape = 1;
    while (pb_next(&r, &f)) {
        if (f.num != 1 || f.wire != PB_LEN) continue;
        if (v->ndim >= KILN_MAX_DIMS) return fail(m, KILN_ERR_UNSUPPORTED, "value '%s' has more than %d dims", v->name, KILN_MAX_DIMS);
        int d = v->ndim++;
        v->dims[d] = -1;
        pb_reader dr = pb_sub(&f);
        pb_field df;
        while (pb_next(&dr, &df)) {
            if (df.num == 1 && df.wire == PB_VARINT) v->dims[d] = (int64_t)df.v;
            if (df.num == 2 && df.wire == PB_LEN && df.len && !(v->params[d] = dup_bytes(m, df.data, df.len)))
                return fail(m, KILN_ERR_NOMEM, "out of memory");
        }
        if (dr.bad) return fail(m, KILN_ERR_FORMAT, "malformed dimension");
    }
    if (r.bad) return fail(m, KILN_ERR_FORMAT, "malformed TensorShapeProto");
    return 1;
}

static int decode_value_info(ox_model *m, pb_reader r, ox_value_info *v) {
    pb_field f;
    v->name = "";
    while (pb_next(&r, &f)) {
        if (f.num == 1 && f.wire == PB_LEN && !(v->name = dup_bytes(m, f.data, f.len))) return fail(m, KILN_ERR_NOMEM, "out of memory");
        if (f.num != 2 || f.wire != PB_LEN) continue;
        pb_reader tr = pb_sub(&f);
        pb_field tf;
        while (pb_next(&tr, &tf)) {
            if (tf.num != 1 || tf.wire != PB_LEN) continue; /* only tensor_type */
            v->is_tensor = 1;
            pb_reader xr = pb_sub(&tf);
            pb_field xf;
            while (pb_next(&xr, &xf)) {
                if (xf.num == 1 && xf.wire == PB_VARINT) v->elem = (int)xf.v;
                if (xf.num == 2 && xf.wire == PB_LEN && !decode_shape(m, pb_sub(&xf), v)) return 0;
            }
            if (xr.bad) return fail(m, KILN_ERR_FORMAT, "malformed TypeProto.Tensor");
        }
        if (tr.bad) return fail(m, KILN_ERR_FORMAT, "malformed TypeProto");
    }
    if (r.bad) return fail(m, KILN_ERR_FORMAT, "malformed ValueInfoProto");
    return 1;
}

static int decode_graph(ox_model *m, pb_reader r, const char *dir) {
    pb_field f;
    int cn = 0, ct = 0, cin = 0, cout = 0;
    while (pb_next(&r, &f)) {
        if (f.wire != PB_LEN) continue;
        switch (f.num) {
        case 1: {
            ox_node *n = push(m, (void **)&m->nodes, &m->n_nodes, &cn, sizeof *n);
            if (!n) return fail(m, KILN_ERR_NOMEM, "out of memory");
            if (!decode_node(m, pb_sub(&f), n, dir)) return 0;
            break;
        }
        case 5: {
            ox_tensor *t = push(m, (void **)&m->inits, &m->n_inits, &ct, sizeof *t);
            if (!t) return fail(m, KILN_ERR_NOMEM, "out of memory");
            if (!decode_tensor(m, pb_sub(&f), t, dir)) return 0;
            break;
        }
        case 15: return fail(m, KILN_ERR_UNSUPPORTED, "sparse initializers are not supported");
        case 11:
        case 12: {
            ox_value_info *v = f.num == 11 ? push(m, (void **)&m->inputs, &m->n_inputs, &cin, sizeof *v)
                                           : push(m, (void **)&m->outputs, &m->n_outputs, &cout, sizeof *v);
            if (!v) return fail(m, KILN_ERR_NOMEM, "out of memory");
            if (!decode_value_info(m, pb_sub(&f), v)) return 0;
            break;
        }
        default: break;
        }
    }
    if (r.bad) return fail(m, KILN_ERR_FORMAT, "malformed GraphProto");
    return 1;
}

int ox_decode(const uint8_t *buf, size_t len, const char *dir, ox_model *m) {
    memset(m, 0, sizeof *m);
    m->opset = -1;
    pb_reader r = pb_open(buf, len);
    pb_field f;
    int have_graph = 0;
    while (pb_next(&r, &f)) {
        if (f.num == 1 && f.wire == PB_VARINT) m->ir_version = (int64_t)f.v;
        else if (f.num == 8 && f.wire == PB_LEN) {
            pb_reader o = pb_sub(&f);
            pb_field of;
            const uint8_t *dom = NULL;
            size_t dn = 0;
            int64_t ver = -1;
            while (pb_next(&o, &of)) {
                if (of.num == 1 && of.wire == PB_LEN) { dom = of.data; dn = of.len; }
                if (of.num == 2 && of.wire == PB_VARINT) ver = (int64_t)of.v;
            }
            if (o.bad) return fail(m, KILN_ERR_FORMAT, "malformed opset_import");
            if (!dom || dn == 0 || (dn == 7 && !memcmp(dom, "ai.onnx", 7))) m->opset = ver;
        } else if (f.num == 7 && f.wire == PB_LEN) {
            if (have_graph++) return fail(m, KILN_ERR_FORMAT, "the model has two graphs");
            if (!decode_graph(m, pb_sub(&f), dir)) return 0;
        }
    }
    if (r.bad) return fail(m, KILN_ERR_FORMAT, "not an ONNX model: malformed protobuf data");
    if (!have_graph) return fail(m, KILN_ERR_FORMAT, "not an ONNX model: no graph");
    if (m->opset < 0) return fail(m, KILN_ERR_UNSUPPORTED, "the model uses only operator sets other than the default (ai.onnx) one");
    return 1;
}

const ox_attr *ox_attr_find(const ox_node *n, const char *name) {
    for (int i = 0; i < n->n_attrs; i++)
        if (!strcmp(n->attrs[i].name, name)) return &n->attrs[i];
    return NULL;
}
