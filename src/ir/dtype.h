/* dtype.h — element types: sizes, names, and scalar conversions.
 *
 * f16 is IEEE binary16, bf16 the top half of an f32; both convert from f32
 * with round-to-nearest-even (NaN stays NaN). Block formats (q8_0, q4_0, q5_0,
 * q4_k, q6_k) are GGUF's layouts; their encoders/decoders live in
 * src/ir/quant.c.
 *
 * dtype_table is the one place that states a dtype's facts: its name (which
 * the generated code's helpers are named after: kdq_<name>, kct_<name>_...),
 * its block geometry, which contraction forms read it (flags), and for the
 * block formats how the int8 forms treat their quants. Code generators read
 * these columns instead of switching over dtypes.
 */
#ifndef KILN_DTYPE_H
#define KILN_DTYPE_H

#include <stdint.h>
#include "kiln.h"

/* dtype_info.flags: what the contraction forms of src/codegen read */
enum {
    DT_WEIGHT = 1,  /* a contraction's B operand may have it: f32, f16, bf16 and the block formats */
    DT_INT8 = 2,    /* the int8-arithmetic forms read it: the block formats */
    DT_QSIGNED = 4, /* its quants are signed bytes (q8_0); the packed int8 strip stores them + 128 */
};

typedef struct dtype_info {
    const char *name;
    int block;          /* elements per block (1 for scalar types) */
    int block_bytes;    /* bytes per block */
    unsigned flags;     /* DT_* */
    int qzero;          /* block formats with unsigned quants: their zero point (q4_0 8, q5_0 16,
                           q6_k 32; q4_k 0: a minimum term instead); 0 otherwise */
    int scale_elems;    /* block formats: elements per scale (q6_k 16, the others 32); 0 otherwise */
} dtype_info;

extern const dtype_info dtype_table[KILN_DTYPE_COUNT];

/* t's name when its flags include every bit of need, else NULL */
static inline const char *dtype_name_if(kiln_dtype t, unsigned need) {
    return (dtype_table[t].flags & need) == need ? dtype_table[t].name : NULL;
}

/* bytes that elems consecutive elements of t take (elems a multiple of the
 * block, or any count for scalar types; rounded down) */
static inline int dtype_bytes_of(kiln_dtype t, int elems) {
    return dtype_table[t].block_bytes * elems / dtype_table[t].block;
}

float dtype_f16_to_f32(uint16_t h);
uint16_t dtype_f32_to_f16(float f);
float dtype_bf16_to_f32(uint16_t h);
uint16_t dtype_f32_to_bf16(float f);

/* read element i of a dense buffer of scalar dtype t as double / write it
 * (rounding to t; float->int truncates toward zero and saturates, NaN -> 0) */
double dtype_load(kiln_dtype t, const void *buf, int64_t i);
void dtype_store(kiln_dtype t, void *buf, int64_t i, double v);

#endif
