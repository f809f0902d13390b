/* dtype.c — element types: the size table, names, and scalar conversions.
 *
 * Invariants:
 *  - dtype_table is indexed by kiln_dtype; scalar types have block 1, block
 *    formats carry GGUF's (elements, bytes) per block.
 *  - Every f32 -> f16/bf16 conversion rounds to nearest, ties to even; values
 *    beyond the largest finite half round to inf; NaN stays NaN (quietened,
 *    sign and top payload bits kept). f16/bf16 -> f32 is exact.
 *  - Conversions work on bit patterns only (no float arithmetic), so results do
 *    not depend on the FPU's rounding mode, FMA contraction or flush-to-zero.
 *  - dtype_store from double rounds once: a double is first narrowed to f32
 *    with round-to-odd, which cannot cause double rounding when the f32 is then
 *    rounded to the 11-bit (f16) or 8-bit (bf16) significand.
 *  - Float -> integer stores truncate toward zero and saturate; NaN stores 0.
 *    These never invoke C's undefined out-of-range float->int conversion.
 */
#include "dtype.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base.h"
#include "quant.h"

/* name, elements and bytes per block, flags, zero point, elements per scale */
const dtype_info dtype_table[KILN_DTYPE_COUNT] = {
    [KILN_F32] = {"f32", 1, 4, DT_WEIGHT, 0, 0},
    [KILN_F16] = {"f16", 1, 2, DT_WEIGHT, 0, 0},
    [KILN_BF16] = {"bf16", 1, 2, DT_WEIGHT, 0, 0},
    [KILN_I32] = {"i32", 1, 4, 0, 0, 0},
    [KILN_U8] = {"u8", 1, 1, 0, 0, 0},
    [KILN_Q8_0] = {"q8_0", 32, 34, DT_WEIGHT | DT_INT8 | DT_QSIGNED, 0, 32},
    [KILN_Q4_0] = {"q4_0", 32, 18, DT_WEIGHT | DT_INT8, 8, 32},
    [KILN_Q4_K] = {"q4_k", 256, 144, DT_WEIGHT | DT_INT8, 0, 32},
    [KILN_Q6_K] = {"q6_k", 256, 210, DT_WEIGHT | DT_INT8, 32, 16},
    [KILN_Q5_0] = {"q5_0", 32, 22, DT_WEIGHT | DT_INT8, 16, 32},
};

static int dtype_valid(kiln_dtype t) { return (int)t >= 0 && (int)t < KILN_DTYPE_COUNT; }

const char *kiln_status_name(kiln_status s) {
    switch (s) {
    case KILN_OK: return "ok";
    case KILN_ERR_INVALID: return "invalid argument";
    case KILN_ERR_SHAPE: return "shape mismatch";
    case KILN_ERR_DTYPE: return "dtype not allowed";
    case KILN_ERR_UNBOUND: return "unbound";
    case KILN_ERR_RANGE: return "out of range";
    case KILN_ERR_NOMEM: return "out of memory";
    case KILN_ERR_IO: return "i/o error";
    case KILN_ERR_FORMAT: return "malformed data";
    case KILN_ERR_UNSUPPORTED: return "unsupported";
    }
    return "unknown status";
}

const char *kiln_dtype_name(kiln_dtype t) { return dtype_valid(t) ? dtype_table[t].name : "?"; }

size_t kiln_dtype_bytes(kiln_dtype t, int64_t n) {
    if (!dtype_valid(t) || n < 0) return 0;
    int64_t block = dtype_table[t].block, bytes = dtype_table[t].block_bytes;
    if (n % block != 0) return 0;
    int64_t blocks = n / block;
    /* a count too large for size_t is not a size anyone can allocate */
    if ((uint64_t)blocks > (uint64_t)SIZE_MAX / (uint64_t)bytes) return 0;
    return (size_t)blocks * (size_t)bytes;
}

int kiln_dtype_is_float(kiln_dtype t) { return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16; }

int kiln_dtype_is_block(kiln_dtype t) { return dtype_valid(t) && dtype_table[t].block > 1; }

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float dtype_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf, or NaN with its payload moved to the top bits */
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0) return bits_f32(sign);
        /* subnormal half: normalise so the leading 1 becomes the implicit bit */
        uint32_t e = 127 - 15 + 1;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        return bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
    }
    return bits_f32(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

/* keep `keep` = value >> shift, rounding the dropped bits to nearest even */
static uint32_t round_shift_rne(uint32_t value, unsigned shift) {
    uint32_t keep = value >> shift;
    uint32_t rest = value & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (keep & 1u))) keep++;
    return keep;
}

uint16_t dtype_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    int32_t exp = (int32_t)((u >> 23) & 0xffu);
    uint32_t mant = u & 0x7fffffu;
    if (exp == 0xff) {
        if (mant == 0) return (uint16_t)(sign | 0x7c00u);
        return (uint16_t)(sign | 0x7e00u | (mant >> 13)); /* quiet NaN, payload top bits */
    }
    int32_t e = exp - 127; /* unbiased; float subnormals fall far below f16's range */
    if (e > 15) return (uint16_t)(sign | 0x7c00u);
    if (e >= -14) {
        /* normal half; a carry out of the mantissa bumps the exponent, and out of
         * the largest exponent yields exactly the inf pattern 0x7c00 */
        uint32_t h = ((uint32_t)(e + 15) << 10) | (mant >> 13);
        uint32_t rest = mant & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    if (e < -25 || exp == 0) return (uint16_t)sign; /* below half the smallest subnormal */
    /* subnormal half: value = (mant|implicit) * 2^(e-23), counted in units of 2^-24 */
    uint32_t full = mant | 0x800000u;
    unsigned shift = (unsigned)(-(e + 1)); /* 14..24 */
    return (uint16_t)(sign | round_shift_rne(full, shift));
}

float dtype_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t dtype_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate the payload, force quiet */
        return (uint16_t)((u >> 16) | 0x40u);
    /* ties-to-even on the low 16 bits; overflow carries into inf (0x7f80) */
    uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(r >> 16);
}

/* narrow a double to f32 with round-to-odd (truncate, then set the last bit if
 * anything was lost); a later rounding to fewer bits then rounds correctly */
static float f64_to_f32_odd(double v) {
    if (isnan(v)) return (float)v;
    float f = (float)v;
    if ((double)f == v) return f;
    uint32_t u = f32_bits(f);
    if (u & 1u) return f;
    /* f is the even neighbour of v; the other bracketing neighbour is odd */
    if (fabs((double)f) > fabs(v)) u--;
    else u++;
    return bits_f32(u);
}

static int64_t sat_trunc(double v, double lo, double hi) {
    if (isnan(v)) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v; /* C conversion truncates toward zero */
}

double dtype_load(kiln_dtype t, const void *buf, int64_t i) {
    KILN_ASSERT(dtype_valid(t) && i >= 0);
    switch (t) {
    case KILN_F32: {
        float f;
        memcpy(&f, (const char *)buf + i * 4, 4);
        return (double)f;
    }
    case KILN_F16: {
        uint16_t h;
        memcpy(&h, (const char *)buf + i * 2, 2);
        return (double)dtype_f16_to_f32(h);
    }
    case KILN_BF16: {
        uint16_t h;
        memcpy(&h, (const char *)buf + i * 2, 2);
        return (double)dtype_bf16_to_f32(h);
    }
    case KILN_I32: {
        int32_t v;
        memcpy(&v, (const char *)buf + i * 4, 4);
        return (double)v;
    }
    case KILN_U8: return (double)((const uint8_t *)buf)[i];
    default: {
        /* a block format: decode the one block holding element i */
        int64_t block = dtype_table[t].block;
        float tmp[256];
        KILN_ASSERT(block <= 256);
        const char *src = (const char *)buf + (i / block) * dtype_table[t].block_bytes;
        quant_dequantize(t, src, tmp, block);
        return (double)tmp[i % block];
    }
    }
}

void dtype_store(kiln_dtype t, void *buf, int64_t i, double v) {
    KILN_ASSERT(dtype_valid(t) && !kiln_dtype_is_block(t) && i >= 0);
    switch (t) {
    case KILN_F32: {
        float f = (float)v; /* one correctly rounded step; overflow gives inf */
        memcpy((char *)buf + i * 4, &f, 4);
        break;
    }
    case KILN_F16: {
        uint16_t h = dtype_f32_to_f16(f64_to_f32_odd(v));
        memcpy((char *)buf + i * 2, &h, 2);
        break;
    }
    case KILN_BF16: {
        uint16_t h = dtype_f32_to_bf16(f64_to_f32_odd(v));
        memcpy((char *)buf + i * 2, &h, 2);
        break;
    }
    case KILN_I32: {
        int32_t x = (int32_t)sat_trunc(v, (double)INT32_MIN, (double)INT32_MAX);
        memcpy((char *)buf + i * 4, &x, 4);
        break;
    }
    case KILN_U8: ((uint8_t *)buf)[i] = (uint8_t)sat_trunc(v, 0.0, 255.0); break;
    default: break;
    }
}
