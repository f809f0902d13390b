/* quant.h — GGUF block formats, bit-exact with the GGUF layouts.
 *
 *   q8_0: 32 elements, 34 bytes: f16 scale d, 32 x int8 q;      x = d*q
 *   q4_0: 32 elements, 18 bytes: f16 d, 16 bytes of nibbles;     x = d*(q-8)
 *         byte j holds element j (low nibble) and j+16 (high nibble)
 *   q4_k: 256 elements, 144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales
 *         and mins for 8 sub-blocks of 32, 128 bytes of nibbles
 *   q6_k: 256 elements, 210 bytes: 128 bytes low nibbles, 64 bytes high 2 bits,
 *         16 x int8 scales, f16 d
 *   q5_0: 32 elements, 22 bytes: f16 d, u32 qh (5th bits), 16 bytes of nibbles
 *         as in q4_0; x = d*(q-16)
 *
 * n must be a multiple of the format's block size.
 */
#ifndef KILN_QUANT_H
#define KILN_QUANT_H

#include <stdint.h>
#include "kiln.h"

/* decode n elements of block dtype t from src into dst */
void quant_dequantize(kiln_dtype t, const void *src, float *dst, int64_t n);
/* encode n floats into block dtype t; returns 0, or -1 if t has no encoder */
int quant_quantize(kiln_dtype t, const float *src, void *dst, int64_t n);
/* q4_k: sub-block j's (0..7) 6-bit scale and min from a block's 12 scale bytes */
void quant_q4k_scale_min(const uint8_t *scales, int j, int *sc, int *m);

#endif
