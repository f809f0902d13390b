/* pb.h — a reader of the protocol buffers wire format, as far as ONNX needs it.
 *
 * The wire format is a specification (varints, 64-bit, length-delimited and
 * 32-bit fields keyed by field number << 3 | wire type); kiln reads it itself
 * rather than linking a protobuf library, so the reader has no dependency and
 * can be fuzzed with the rest (docs/ARCHITECTURE.md says why).
 *
 * Invariants:
 *  - A pb_reader never reads outside [p, end): every length and varint is
 *    checked against what is left, and any violation sets `bad` and makes every
 *    later call return 0 (sticky, like the graph builder's errors).
 *  - Nothing is copied: byte fields are (pointer, length) pairs into the
 *    caller's buffer, which must outlive them.
 *  - Groups (wire types 3 and 4) are malformed for ONNX and rejected.
 */
#ifndef KILN_PB_H
#define KILN_PB_H

#include <stddef.h>
#include <stdint.h>

enum { PB_VARINT = 0, PB_I64 = 1, PB_LEN = 2, PB_I32 = 5 };

typedef struct pb_reader {
    const uint8_t *p, *end;
    int bad;                 /* sticky: malformed input seen */
} pb_reader;

typedef struct pb_field {
    uint32_t num;            /* field number */
    int wire;                /* PB_* */
    uint64_t v;              /* PB_VARINT, PB_I64, PB_I32: the raw value */
    const uint8_t *data;     /* PB_LEN: the bytes */
    size_t len;
} pb_field;

pb_reader pb_open(const void *data, size_t len);
/* the next field; 0 at the end or on malformed input (then r->bad is set) */
int pb_next(pb_reader *r, pb_field *f);
/* a PB_LEN field's bytes as a nested reader */
pb_reader pb_sub(const pb_field *f);

/* packed or single repeated scalars: count the elements of a field (a varint
 * field counts 1, a packed PB_LEN field its elements), -1 when malformed */
int64_t pb_count_varints(const pb_field *f);
/* the i-th element of a varint field (single or packed); reads sequentially,
 * so callers iterate with pb_varint_iter instead for long arrays */
typedef struct pb_iter {
    pb_reader r;
    const pb_field *single; /* a non-packed field: one element */
    int done;
} pb_iter;
pb_iter pb_varint_iter(const pb_field *f);
int pb_iter_next(pb_iter *it, uint64_t *v); /* 0 at the end or when malformed (it->r.bad) */

#endif
