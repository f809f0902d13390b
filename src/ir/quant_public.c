/* quant_public.c — the dtype conversions of include/kiln.h (kiln_quantize,
 * kiln_dequantize, kiln_f32_to_f16, kiln_f32_to_bf16) over quant.h and
 * dtype.h, with the argument checks the internal functions assert.
 *
 * Invariant: scalar dtypes convert element by element exactly as CAST does
 * (dtype_store: round to nearest even); block formats block by block.
 */
#include "dtype.h"
#include "kiln.h"
#include "quant.h"

static kiln_status check(kiln_dtype t, const void *src, const void *dst, int64_t n) {
    if ((int)t < 0 || t >= KILN_DTYPE_COUNT || n < 0 || ((!src || !dst) && n)) return KILN_ERR_INVALID;
    return n % dtype_table[t].block ? KILN_ERR_INVALID : KILN_OK;
}

kiln_status kiln_dequantize(kiln_dtype t, const void *src, float *dst, int64_t n) {
    kiln_status s = check(t, src, dst, n);
    if (!s && n) quant_dequantize(t, src, dst, n);
    return s;
}

kiln_status kiln_quantize(kiln_dtype t, const float *src, void *dst, int64_t n) {
    kiln_status s = check(t, src, dst, n);
    if (s || !n) return s;
    if (!kiln_dtype_is_block(t)) {
        for (int64_t i = 0; i < n; i++) dtype_store(t, dst, i, src[i]);
        return KILN_OK;
    }
    return quant_quantize(t, src, dst, n) == 0 ? KILN_OK : KILN_ERR_UNSUPPORTED;
}

uint16_t kiln_f32_to_f16(float f) { return dtype_f32_to_f16(f); }
uint16_t kiln_f32_to_bf16(float f) { return dtype_f32_to_bf16(f); }
