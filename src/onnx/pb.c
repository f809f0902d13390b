/* pb.c — the protocol buffers wire-format reader (see pb.h): bounds-checked,
 * zero-copy, sticky errors. */
#include "pb.h"

pb_reader pb_open(const void *data, size_t len) {
    pb_reader r;
    r.p = (const uint8_t *)data;
    r.end = r.p + len;
    r.bad = data == NULL && len > 0;
    return r;
}

static int read_varint(pb_reader *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) { r->bad = 1; return 0; }
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) { *out = v; return 1; }
    }
    r->bad = 1; /* more than 10 bytes */
    return 0;
}

int pb_next(pb_reader *r, pb_field *f) {
    if (r->bad || r->p >= r->end) return 0;
    uint64_t key;
    if (!read_varint(r, &key)) return 0;
    f->num = (uint32_t)(key >> 3);
    f->wire = (int)(key & 7);
    f->v = 0; f->data = NULL; f->len = 0;
    if (f->num == 0 || key >> 32) { r->bad = 1; return 0; }
    switch (f->wire) {
    case PB_VARINT:
        return read_varint(r, &f->v);
    case PB_I64:
    case PB_I32: {
        size_t n = f->wire == PB_I64 ? 8 : 4;
        if ((size_t)(r->end - r->p) < n) { r->bad = 1; return 0; }
        for (size_t i = 0; i < n; i++) f->v |= (uint64_t)r->p[i] << (8 * i);
        r->p += n;
        return 1;
    }
    case PB_LEN: {
        uint64_t n;
        if (!read_varint(r, &n)) return 0;
        if (n > (uint64_t)(r->end - r->p)) { r->bad = 1; return 0; }
        f->data = r->p;
        f->len = (size_t)n;
        r->p += n;
        return 1;
    }
    default:
        r->bad = 1;
        return 0;
    }
}

pb_reader pb_sub(const pb_field *f) { return pb_open(f->data, f->wire == PB_LEN ? f->len : 0); }

pb_iter pb_varint_iter(const pb_field *f) {
    pb_iter it;
    it.done = 0;
    if (f->wire == PB_LEN) {
        it.r = pb_sub(f);
        it.single = NULL;
    } else {
        it.r = pb_open(NULL, 0);
        it.single = f;
    }
    return it;
}

int pb_iter_next(pb_iter *it, uint64_t *v) {
    if (it->done) return 0;
    if (it->single) {
        it->done = 1;
        if (it->single->wire != PB_VARINT) { it->r.bad = 1; return 0; }
        *v = it->single->v;
        return 1;
    }
    if (it->r.p >= it->r.end) { it->done = 1; return 0; }
    if (!read_varint(&it->r, v)) { it->done = 1; return 0; }
    return 1;
}

int64_t pb_count_varints(const pb_field *f) {
    if (f->wire == PB_VARINT) return 1;
    if (f->wire != PB_LEN) return -1;
    int64_t n = 0;
    for (size_t i = 0; i < f->len; i++)
        if (!(f->data[i] & 0x80)) n++;
    if (f->len && (f->data[f->len - 1] & 0x80)) return -1;
    return n;
}
