/* dtype.h — element types: sizes, names, and scalar conversions.
 *
 * f16 is IEEE binary16, bf16 the top half of an f32; both convert from f32
 * with round-to-nearest-even (NaN stays NaN). Block formats (q8_0, q4_0, q4_k,
 * q6_k) are GGUF's layouts; their encoders/decoders live in src/ir/quant.c.
 */
#ifndef KILN_DTYPE_H
#define KILN_DTYPE_H

#include <stdint.h>
#include "kiln.h"

typedef struct dtype_info {
    const char *name;
    int block;          /* elements per block (1 for scalar types) */
    int block_bytes;    /* bytes per block */
} dtype_info;

extern const dtype_info dtype_table[KILN_DTYPE_COUNT];

float dtype_f16_to_f32(uint16_t h);
uint16_t dtype_f32_to_f16(float f);
float dtype_bf16_to_f32(uint16_t h);
uint16_t dtype_f32_to_bf16(float f);

/* read element i of a dense buffer of scalar dtype t as double / write it
 * (rounding to t; float->int truncates toward zero and saturates, NaN -> 0) */
double dtype_load(kiln_dtype t, const void *buf, int64_t i);
void dtype_store(kiln_dtype t, void *buf, int64_t i, double v);

#endif
