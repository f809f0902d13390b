/* test_quant.c — element types and GGUF block formats (src/ir/dtype.c,
 * src/ir/quant.c), and the 8-row interleave of q4_0 / q5_0
 * (src/runtime/repack.c).
 *
 * Expected values come from the IEEE / GGUF definitions, computed here
 * independently (double arithmetic, ldexp), never from the code under test:
 * f16/bf16 decoding is checked against the formula for every bit pattern,
 * encoding against exact midpoints between neighbouring halves, and the block
 * encoders against error bounds that follow from their rounding rules.
 * Bit-exactness against the GGUF reference itself is tests/py/test_quant.py.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "kiln.h"
#include "quant.h"
#include "repack.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
/* uniform in [-1, 1) */
static float rng_unit(void) { return (float)((double)(rng_next() >> 11) * 0x1p-53 * 2.0 - 1.0); }

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* the value of a binary16 pattern straight from the IEEE definition */
static double f16_formula(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -24);
    else v = ldexp((double)(1024 + m), e - 25);
    return s ? -v : v;
}

static double bf16_formula(uint16_t h) {
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v;
    if (e == 255) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -133);
    else v = ldexp((double)(128 + m), e - 134);
    return s ? -v : v;
}

static void test_table(void) {
    CASE_BEGIN("dtype_bytes_and_names");
    CHECK(kiln_dtype_bytes(KILN_F32, 10) == 40, "f32");
    CHECK(kiln_dtype_bytes(KILN_F16, 3) == 6, "f16");
    CHECK(kiln_dtype_bytes(KILN_BF16, 5) == 10, "bf16");
    CHECK(kiln_dtype_bytes(KILN_I32, 7) == 28, "i32");
    CHECK(kiln_dtype_bytes(KILN_U8, 9) == 9, "u8");
    CHECK(kiln_dtype_bytes(KILN_F32, 0) == 0, "empty");
    CHECK(kiln_dtype_bytes(KILN_Q8_0, 64) == 68, "q8_0 two blocks");
    CHECK(kiln_dtype_bytes(KILN_Q4_0, 96) == 54, "q4_0 three blocks");
    CHECK(kiln_dtype_bytes(KILN_Q4_K, 512) == 288, "q4_k two blocks");
    CHECK(kiln_dtype_bytes(KILN_Q6_K, 256) == 210, "q6_k one block");
    CHECK(kiln_dtype_bytes(KILN_Q5_0, 64) == 44, "q5_0 two blocks");
    CHECK(kiln_dtype_bytes(KILN_Q8_0, 33) == 0, "q8_0 partial block");
    CHECK(kiln_dtype_bytes(KILN_Q4_K, 32) == 0, "q4_k partial block");
    CHECK(kiln_dtype_bytes(KILN_Q6_K, 255) == 0, "q6_k partial block");
    CHECK(kiln_dtype_bytes(KILN_F32, -4) == 0, "negative n");
    CHECK(kiln_dtype_bytes(KILN_Q8_0, -32) == 0, "negative n block");
    CHECK(kiln_dtype_bytes(KILN_F32, INT64_MAX) == 0, "overflowing n");
    CHECK(kiln_dtype_bytes((kiln_dtype)99, 4) == 0, "bad dtype");
    const char *names[KILN_DTYPE_COUNT] = {"f32", "f16", "bf16", "i32", "u8", "q8_0", "q4_0", "q4_k", "q6_k", "q5_0"};
    for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
        CHECK(strcmp(kiln_dtype_name((kiln_dtype)t), names[t]) == 0, "name %d", t);
        CHECK(kiln_dtype_is_float((kiln_dtype)t) == (t <= KILN_BF16), "is_float %d", t);
        CHECK(kiln_dtype_is_block((kiln_dtype)t) == (t >= KILN_Q8_0), "is_block %d", t);
        CHECK(dtype_table[t].block >= 1 && dtype_table[t].block_bytes >= 1, "table %d", t);
    }
    CHECK(kiln_dtype_name((kiln_dtype)-1) != NULL, "bad name not null");
    for (int s = KILN_OK; s <= KILN_ERR_UNSUPPORTED; s++) {
        const char *a = kiln_status_name((kiln_status)s);
        CHECK(a && a[0], "status %d named", s);
        for (int r = KILN_OK; r < s; r++)
            CHECK(strcmp(a, kiln_status_name((kiln_status)r)) != 0, "status %d and %d share a name", s, r);
    }
    CHECK(kiln_status_name((kiln_status)1234) != NULL, "unknown status");
    CASE_END();
}

static void test_f16_all_patterns(void) {
    CASE_BEGIN("f16_decode_and_roundtrip_all_65536");
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = dtype_f16_to_f32(h);
        double want = f16_formula(h);
        uint16_t back = dtype_f32_to_f16(f);
        if (isnan(want)) {
            CHECK(isnan(f), "0x%04x should decode to NaN", i);
            CHECK((fbits(f) >> 31) == (i >> 15), "NaN sign 0x%04x", i);
            /* payload kept, quiet bit forced */
            CHECK(back == (h | 0x0200u), "NaN 0x%04x -> 0x%04x", i, back);
        } else {
            CHECK((double)f == want && !signbit(f) == !signbit(want), "0x%04x decodes to %.9g, want %.9g", i,
                  (double)f, want);
            CHECK(back == h, "0x%04x -> %.9g -> 0x%04x", i, (double)f, back);
        }
    }
    CASE_END();
}

static void test_bf16_all_patterns(void) {
    CASE_BEGIN("bf16_decode_and_roundtrip_all_65536");
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = dtype_bf16_to_f32(h);
        double want = bf16_formula(h);
        uint16_t back = dtype_f32_to_bf16(f);
        if (isnan(want)) {
            CHECK(isnan(f), "0x%04x should decode to NaN", i);
            CHECK(back == (h | 0x0040u), "NaN 0x%04x -> 0x%04x", i, back);
        } else {
            CHECK((double)f == want && !signbit(f) == !signbit(want), "0x%04x decodes to %.9g, want %.9g", i,
                  (double)f, want);
            CHECK(back == h, "0x%04x -> 0x%04x", i, back);
        }
    }
    CASE_END();
}

/* For every pair of neighbouring finite patterns (lo, lo+1) of a 16-bit format
 * the exact midpoint (representable in f32) must round to the even one, and
 * the f32 values just either side of it to the nearer one. `hi_val` of the
 * largest finite pattern is the first value past it (where inf starts). */
static void check_midpoints(const char *what, double (*formula)(uint16_t), uint16_t (*enc)(float),
                            uint16_t max_finite) {
    for (uint32_t lo = 0; lo <= max_finite; lo++) {
        for (int neg = 0; neg < 2; neg++) {
            uint16_t sign = neg ? 0x8000u : 0;
            uint16_t a = (uint16_t)(lo | sign), b = (uint16_t)((lo + 1) | sign);
            double va = formula(a), vb;
            if (lo == max_finite) { /* past the largest finite: max + one ulp, where inf begins */
                double ulp = fabs(va) - fabs(formula((uint16_t)(a - 1)));
                vb = neg ? va - ulp : va + ulp;
            } else {
                vb = formula(b);
            }
            float mid = (float)((va + vb) / 2);
            CHECK((double)mid == (va + vb) / 2, "%s midpoint of 0x%04x not exact", what, a);
            uint16_t even = (a & 1u) ? b : a;
            CHECK(enc(mid) == even, "%s midpoint of 0x%04x/0x%04x -> 0x%04x", what, a, b, enc(mid));
            float toward_a = nextafterf(mid, (float)va), toward_b = nextafterf(mid, neg ? -INFINITY : INFINITY);
            CHECK(enc(toward_a) == a, "%s just below midpoint 0x%04x -> 0x%04x", what, a, enc(toward_a));
            CHECK(enc(toward_b) == b, "%s just above midpoint 0x%04x -> 0x%04x", what, a, enc(toward_b));
            if (check_case_failed) return;
        }
    }
}

static void test_f16_rounding(void) {
    CASE_BEGIN("f16_round_nearest_even_all_midpoints");
    check_midpoints("f16", f16_formula, dtype_f32_to_f16, 0x7bff);
    /* the same facts as named values */
    CHECK(dtype_f32_to_f16(65520.0f) == 0x7c00, "65520 is the first value to overflow");
    CHECK(dtype_f32_to_f16(nextafterf(65520.0f, 0)) == 0x7bff, "just below 65520");
    CHECK(dtype_f32_to_f16(1e10f) == 0x7c00 && dtype_f32_to_f16(-1e10f) == 0xfc00, "overflow to inf");
    CHECK(dtype_f32_to_f16(FLT_MAX) == 0x7c00, "FLT_MAX");
    CHECK(dtype_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00, "1+2^-11 ties down to 1");
    CHECK(dtype_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02, "1+3*2^-11 ties up");
    CHECK(dtype_f32_to_f16(0x1p-25f) == 0x0000, "2^-25 ties to 0");
    CHECK(dtype_f32_to_f16(nextafterf(0x1p-25f, 1)) == 0x0001, "just above 2^-25");
    CHECK(dtype_f32_to_f16(3 * 0x1p-25f) == 0x0002, "1.5 subnormal ulps ties to 2");
    CHECK(dtype_f32_to_f16(0x1p-14f - 0x1p-25f) == 0x0400, "subnormal rounding carries into normal");
    CHECK(dtype_f32_to_f16(1e-30f) == 0x0000 && dtype_f32_to_f16(-1e-30f) == 0x8000, "underflow keeps sign");
    CHECK(dtype_f32_to_f16(bitsf(1)) == 0, "f32 subnormal");
    CHECK(dtype_f32_to_f16(-0.0f) == 0x8000, "-0");
    CHECK(dtype_f32_to_f16(INFINITY) == 0x7c00 && dtype_f32_to_f16(-INFINITY) == 0xfc00, "inf");
    uint16_t qn = dtype_f32_to_f16(NAN);
    CHECK((qn & 0x7c00) == 0x7c00 && (qn & 0x3ff) != 0, "NaN stays NaN");
    uint16_t sn = dtype_f32_to_f16(bitsf(0x7f800001u)); /* payload only in low bits */
    CHECK((sn & 0x7c00) == 0x7c00 && (sn & 0x3ff) != 0, "signalling NaN with low payload stays NaN");
    CASE_END();
}

static void test_bf16_rounding(void) {
    CASE_BEGIN("bf16_round_nearest_even_all_midpoints");
    check_midpoints("bf16", bf16_formula, dtype_f32_to_bf16, 0x7f7f);
    CHECK(dtype_f32_to_bf16(FLT_MAX) == 0x7f80, "FLT_MAX rounds to inf");
    CHECK(dtype_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "1+2^-8 ties down");
    CHECK(dtype_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82, "1+3*2^-8 ties up");
    CHECK(dtype_f32_to_bf16(bitsf(0x00008000u)) == 0x0000, "subnormal tie to even 0");
    CHECK(dtype_f32_to_bf16(bitsf(0x00018000u)) == 0x0002, "subnormal tie up to even");
    uint16_t sn = dtype_f32_to_bf16(bitsf(0xff800001u));
    CHECK((sn & 0x7f80) == 0x7f80 && (sn & 0x7f) != 0 && (sn & 0x8000), "signalling NaN stays negative NaN");
    CASE_END();
}

static void test_store_load(void) {
    CASE_BEGIN("dtype_store_saturation_and_rounding");
    int32_t i32[1];
    uint8_t u8[1];
    float f32[1];
    uint16_t h[1];
    struct { double v; int32_t want; } ci[] = {
        {3.7, 3}, {-3.7, -3}, {-0.9, 0}, {2147483647.9, INT32_MAX}, {2147483648.0, INT32_MAX},
        {1e20, INT32_MAX}, {-2147483648.9, INT32_MIN}, {-1e20, INT32_MIN}, {INFINITY, INT32_MAX},
        {-INFINITY, INT32_MIN}, {NAN, 0}, {-123456.99, -123456},
    };
    for (size_t k = 0; k < sizeof ci / sizeof ci[0]; k++) {
        dtype_store(KILN_I32, i32, 0, ci[k].v);
        CHECK(i32[0] == ci[k].want, "i32 %g -> %d, want %d", ci[k].v, i32[0], ci[k].want);
        CHECK(dtype_load(KILN_I32, i32, 0) == (double)ci[k].want, "i32 load");
    }
    struct { double v; int want; } cu[] = {
        {-5, 0}, {-0.5, 0}, {300, 255}, {255.9, 255}, {254.9, 254}, {1e300, 255}, {NAN, 0},
        {-INFINITY, 0}, {INFINITY, 255}, {7.99, 7},
    };
    for (size_t k = 0; k < sizeof cu / sizeof cu[0]; k++) {
        dtype_store(KILN_U8, u8, 0, cu[k].v);
        CHECK(u8[0] == cu[k].want, "u8 %g -> %d, want %d", cu[k].v, u8[0], cu[k].want);
        CHECK(dtype_load(KILN_U8, u8, 0) == (double)cu[k].want, "u8 load");
    }
    dtype_store(KILN_F32, f32, 0, 1e300);
    CHECK(isinf(f32[0]) && f32[0] > 0, "f32 overflow to inf");
    dtype_store(KILN_F32, f32, 0, 0.1);
    CHECK(f32[0] == 0.1f, "f32 rounding");
    dtype_store(KILN_F16, h, 0, 65504.0);
    CHECK(h[0] == 0x7bff, "f16 max");
    dtype_store(KILN_F16, h, 0, -1e6);
    CHECK(h[0] == 0xfc00, "f16 overflow to -inf");
    dtype_store(KILN_F16, h, 0, 1e300);
    CHECK(h[0] == 0x7c00, "f16 from huge double");
    /* a double just above a half-way point: narrowing to f32 first with plain
     * rounding would land exactly on the tie and round down (double rounding) */
    dtype_store(KILN_F16, h, 0, 1.0 + 0x1p-11 + 0x1p-40);
    CHECK(h[0] == 0x3c01, "f16 single rounding from double, got 0x%04x", h[0]);
    dtype_store(KILN_F16, h, 0, 1.0 + 0x1p-11 - 0x1p-40);
    CHECK(h[0] == 0x3c00, "f16 below tie from double, got 0x%04x", h[0]);
    dtype_store(KILN_F16, h, 0, 1.0 + 0x1p-11);
    CHECK(h[0] == 0x3c00, "f16 exact tie from double, got 0x%04x", h[0]);
    dtype_store(KILN_BF16, h, 0, 1.0 + 0x1p-8 + 0x1p-40);
    CHECK(h[0] == 0x3f81, "bf16 single rounding from double, got 0x%04x", h[0]);
    dtype_store(KILN_BF16, h, 0, 1e300);
    CHECK(h[0] == 0x7f80, "bf16 from huge double, got 0x%04x", h[0]);
    dtype_store(KILN_BF16, h, 0, 1e-300);
    CHECK(h[0] == 0x0000, "bf16 from tiny double, got 0x%04x", h[0]);
    dtype_store(KILN_F16, h, 0, NAN);
    CHECK(isnan(dtype_load(KILN_F16, h, 0)), "f16 NaN");
    dtype_store(KILN_BF16, h, 0, -2.5);
    CHECK(dtype_load(KILN_BF16, h, 0) == -2.5, "bf16 load");
    /* random doubles: the stored half must be one of the two neighbours and the nearer */
    for (int k = 0; k < 20000; k++) {
        double v = (double)rng_unit() * ldexp(1.0, (int)(rng_next() % 40) - 24);
        dtype_store(KILN_F16, h, 0, v);
        double got = dtype_load(KILN_F16, h, 0);
        for (int dir = -1; dir <= 1; dir += 2) {
            uint16_t nb = (uint16_t)(h[0] + dir);
            if ((nb & 0x8000) != (h[0] & 0x8000) || (nb & 0x7fff) >= 0x7c00) continue;
            double alt = f16_formula(nb);
            CHECK(fabs(got - v) <= fabs(alt - v), "f16 store %.17g -> %.17g, %.17g is nearer", v, got, alt);
        }
        if (check_case_failed) break;
    }
    CASE_END();
}

/* ---- block formats -------------------------------------------------------- */

static float rd_half(const uint8_t *p) { return dtype_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

static void test_hand_blocks(void) {
    CASE_BEGIN("hand_built_blocks_decode");
    uint8_t b8[34];
    b8[0] = 0x00; b8[1] = 0x38; /* d = 0.5 */
    for (int j = 0; j < 32; j++) b8[2 + j] = (uint8_t)(int8_t)(j * 8 - 128);
    float y[256];
    quant_dequantize(KILN_Q8_0, b8, y, 32);
    for (int j = 0; j < 32; j++) CHECK(y[j] == 0.5f * (float)(j * 8 - 128), "q8_0 elem %d = %g", j, (double)y[j]);
    uint8_t b4[18];
    b4[0] = 0x00; b4[1] = 0xb8; /* d = -0.5 */
    for (int j = 0; j < 16; j++) b4[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    quant_dequantize(KILN_Q4_0, b4, y, 32);
    for (int j = 0; j < 16; j++) {
        CHECK(y[j] == -0.5f * (float)(j - 8), "q4_0 low elem %d = %g", j, (double)y[j]);
        CHECK(y[16 + j] == -0.5f * (float)(7 - j), "q4_0 high elem %d = %g", j, (double)y[16 + j]);
    }
    /* dtype_load on a block buffer decodes the block holding the element */
    uint8_t two[68];
    memcpy(two, b8, 34);
    memcpy(two + 34, b4, 18);
    memset(two + 52, 0, 16);
    CHECK(dtype_load(KILN_Q8_0, two, 5) == 0.5 * (5 * 8 - 128), "dtype_load q8_0 block 0");
    /* q4_k: all sub-blocks scale 1 min 0 except sub-block 5: scale 42 (0b101010), min 51 (0b110011) */
    uint8_t bk[144];
    memset(bk, 0, sizeof bk);
    bk[0] = 0x00; bk[1] = 0x3c; /* d = 1 */
    bk[2] = 0x00; bk[3] = 0x40; /* dmin = 2 */
    for (int j = 0; j < 4; j++) bk[4 + j] = 1;
    for (int j = 0; j < 4; j++) bk[12 + j] = 1; /* sub-blocks 4..7 scale low bits = 1 */
    bk[12 + 1] = (uint8_t)(0x0a | (0x03 << 4)); /* sub-block 5: scale low 1010, min low 0011 */
    bk[4 + 1] |= (uint8_t)(0x2 << 6);          /* scale high bits 10 */
    bk[8 + 1] |= (uint8_t)(0x3 << 6);          /* min high bits 11 */
    for (int j = 0; j < 128; j++) bk[16 + j] = (uint8_t)(((j % 16) << 4) | (j % 16));
    quant_dequantize(KILN_Q4_K, bk, y, 256);
    for (int e = 0; e < 256; e++) {
        int sb = e / 32, q = (e % 32) % 16;
        float want = sb == 5 ? 42.0f * (float)q - 2.0f * 51.0f : (float)q;
        CHECK(y[e] == want, "q4_k elem %d = %g want %g", e, (double)y[e], (double)want);
        if (check_case_failed) break;
    }
    CASE_END();
}

static void test_ties_rules(void) {
    CASE_BEGIN("q8_0_q4_0_reference_rounding_rules");
    float x[32];
    uint8_t b[34];
    /* amax 127 makes d = 1 exactly, so x*id is x and halves are real ties */
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) + 0.5f;
    x[31] = 127.0f;
    CHECK(quant_quantize(KILN_Q8_0, x, b, 32) == 0, "quantize q8_0");
    CHECK(rd_half(b) == 1.0f, "q8_0 d = amax/127");
    for (int j = 0; j < 31; j++) {
        int want = j - 16 >= 0 ? j - 16 + 1 : j - 16; /* half away from zero */
        CHECK((int8_t)b[2 + j] == want, "q8_0 tie %g -> %d want %d", (double)x[j], (int8_t)b[2 + j], want);
    }
    CHECK((int8_t)b[33] == 127, "q8_0 max");
    /* q4_0: the signed max -8 gives d = 1; q = min(15, trunc(x + 8.5)) */
    float v[32] = {-8.0f, -0.5f, 0.5f, -7.5f, 7.5f, 6.5f, 8.0f, 1.49f, -1.5f, 7.4f, 3.0f, -3.0f};
    uint8_t c[18];
    CHECK(quant_quantize(KILN_Q4_0, v, c, 32) == 0, "quantize q4_0");
    CHECK(rd_half(c) == 1.0f, "q4_0 d = max/-8");
    int want4[12] = {0, 8, 9, 1, 15, 15, 15, 9, 7, 15, 11, 5};
    for (int j = 0; j < 12; j++) {
        int q = j < 16 ? c[2 + j] & 15 : c[2 + j - 16] >> 4;
        CHECK(q == want4[j], "q4_0 %g -> %d want %d", (double)v[j], q, want4[j]);
    }
    /* the largest magnitude keeps its sign: a positive max gives a negative d */
    float w[32] = {0};
    w[20] = 4.0f;
    w[3] = -4.0f; /* equal magnitude, earlier: it wins */
    CHECK(quant_quantize(KILN_Q4_0, w, c, 32) == 0 && rd_half(c) == 0.5f, "q4_0 first max wins, d=%g", (double)rd_half(c));
    w[3] = -3.0f;
    CHECK(quant_quantize(KILN_Q4_0, w, c, 32) == 0 && rd_half(c) == -0.5f, "q4_0 positive max, d=%g", (double)rd_half(c));
    CHECK((c[2 + 4] >> 4) == 0, "element 20 (high nibble of byte 4) = 0");
    /* all-zero blocks */
    memset(w, 0, sizeof w);
    CHECK(quant_quantize(KILN_Q8_0, w, b, 32) == 0 && rd_half(b) == 0.0f, "q8_0 zero block");
    for (int j = 0; j < 32; j++) CHECK(b[2 + j] == 0, "q8_0 zero q");
    CHECK(quant_quantize(KILN_Q4_0, w, c, 32) == 0 && rd_half(c) == 0.0f, "q4_0 zero block");
    for (int j = 0; j < 16; j++) CHECK(c[2 + j] == 0x88, "q4_0 zero q is 8");
    CASE_END();
}

static void test_quantize_errors(void) {
    CASE_BEGIN("quantize_rejects_bad_requests");
    float x[64] = {0};
    uint8_t b[256];
    CHECK(quant_quantize(KILN_F32, x, b, 32) == -1, "f32 has no block encoder");
    CHECK(quant_quantize(KILN_Q8_0, x, b, 31) == -1, "partial block");
    CHECK(quant_quantize(KILN_Q4_K, x, b, 64) == -1, "partial q4_k block");
    CHECK(quant_quantize((kiln_dtype)77, x, b, 32) == -1, "bad dtype");
    float bad[32];
    for (int j = 0; j < 32; j++) bad[j] = j % 3 ? NAN : INFINITY;
    CHECK(quant_quantize(KILN_Q8_0, bad, b, 32) == 0, "NaN/inf input does not crash q8_0");
    CHECK(quant_quantize(KILN_Q4_0, bad, b, 32) == 0, "NaN/inf input does not crash q4_0");
    CASE_END();
}

#define NBLK 64

static void test_q8_0_random(void) {
    CASE_BEGIN("q8_0_random_error_within_half_step");
    static float x[32 * NBLK], y[32 * NBLK];
    static uint8_t b[34 * NBLK];
    for (int i = 0; i < 32 * NBLK; i++) x[i] = rng_unit() * ldexpf(1.0f, (i / 32) % 12 - 6);
    CHECK(quant_quantize(KILN_Q8_0, x, b, 32 * NBLK) == 0, "quantize");
    quant_dequantize(KILN_Q8_0, b, y, 32 * NBLK);
    for (int k = 0; k < NBLK; k++) {
        double amax = 0;
        for (int j = 0; j < 32; j++) amax = fmax(amax, fabs((double)x[32 * k + j]));
        double d = amax / 127, dh = (double)rd_half(b + 34 * k);
        CHECK(fabs(dh - d) <= d * 0x1p-11, "block %d stored d %g vs %g", k, dh, d);
        /* half a step, plus what the f16 rounding of d shifts the largest q */
        double bound = dh / 2 + 127 * fabs(dh - d) + d * 1e-6;
        for (int j = 0; j < 32; j++) {
            double err = fabs((double)x[32 * k + j] - (double)y[32 * k + j]);
            CHECK(err <= bound, "block %d elem %d err %g > %g", k, j, err, bound);
        }
        if (check_case_failed) break;
    }
    CASE_END();
}

static void test_q4_0_random(void) {
    CASE_BEGIN("q4_0_random_error_within_half_step");
    static float x[32 * NBLK], y[32 * NBLK];
    static uint8_t b[18 * NBLK];
    for (int i = 0; i < 32 * NBLK; i++) x[i] = rng_unit() * ldexpf(1.0f, (i / 32) % 12 - 6);
    CHECK(quant_quantize(KILN_Q4_0, x, b, 32 * NBLK) == 0, "quantize");
    quant_dequantize(KILN_Q4_0, b, y, 32 * NBLK);
    int clamped = 0;
    for (int k = 0; k < NBLK; k++) {
        double m = 0;
        for (int j = 0; j < 32; j++)
            if (fabs((double)x[32 * k + j]) > fabs(m)) m = x[32 * k + j];
        double d = fabs(m / 8), dh = fabs((double)rd_half(b + 18 * k));
        CHECK(fabs(dh - d) <= d * 0x1p-11, "block %d stored d %g vs %g", k, dh, d);
        double shift = 8 * fabs(dh - d) + d * 1e-6;
        for (int j = 0; j < 32; j++) {
            double xv = x[32 * k + j], err = fabs(xv - (double)y[32 * k + j]);
            /* q = 16 is clamped to 15: elements beyond 7.5 steps on the side
             * opposite the max lose up to a whole step */
            double steps = -xv / (m / 8);
            double bound = (steps > 7.5 ? dh : dh / 2) + shift;
            if (steps > 7.5) clamped++;
            CHECK(err <= bound, "block %d elem %d err %g > %g", k, j, err, bound);
        }
        if (check_case_failed) break;
    }
    CHECK(clamped > 0, "the clamp case was exercised");
    CASE_END();
}

/* Error bounds that follow from the k-quant encoders' rules: quants round to
 * nearest against the stored scales, and each small integer scale is the
 * nearest one or a +-1 neighbour, so it is off by at most 1.5 units of the f16
 * super-block scale. q4_k (asymmetric, 15 steps over [min(lo,0), max(hi,0)]
 * per 32): err <= step/2 + 24*d + 1.5*dmin. q6_k (symmetric, max|x| -> 32
 * steps per 16): err <= max|x|/32 + 50*d (the clamped extreme included). */
static void test_k_random(kiln_dtype t, const char *name) {
    CASE_BEGIN(name);
    enum { NB = 16, N = 256 * NB };
    static float x[N], y[N];
    static uint8_t b[210 * NB];
    int is4 = t == KILN_Q4_K, bb = is4 ? 144 : 210, group = is4 ? 32 : 16;
    for (int i = 0; i < N; i++) {
        float scale = ldexpf(1.0f, (i / 256) % 8 - 4) * (i % 32 < 16 ? 1.0f : 0.25f);
        float shift = (i / 256) % 3 == 1 ? 1.5f * scale : 0.0f; /* some one-sided blocks */
        x[i] = rng_unit() * scale + shift;
    }
    for (int i = 256 * 2; i < 256 * 3; i++) x[i] = -0.75f; /* a constant block */
    CHECK(quant_quantize(t, x, b, N) == 0, "quantize");
    quant_dequantize(t, b, y, N);
    double se = 0, sx = 0;
    for (int g = 0; g < N / group; g++) {
        const uint8_t *blk = b + (g * group / 256) * bb;
        double d = fabs((double)rd_half(is4 ? blk : blk + 208));
        double dmin = is4 ? fabs((double)rd_half(blk + 2)) : 0;
        double lo = 0, hi = 0, amax = 0;
        for (int j = 0; j < group; j++) {
            double v = x[g * group + j];
            lo = fmin(lo, v);
            hi = fmax(hi, v);
            amax = fmax(amax, fabs(v));
        }
        double bound = is4 ? (hi - lo) / 30 + 24 * d + 1.5 * dmin : amax / 32 + 50 * d;
        for (int j = 0; j < group; j++) {
            double v = x[g * group + j], err = fabs(v - (double)y[g * group + j]);
            se += err * err;
            sx += v * v;
            CHECK(err <= bound * (1 + 1e-6), "group %d elem %d err %g > %g", g, j, err, bound);
        }
        if (check_case_failed) break;
    }
    double rel = sqrt(se / sx);
    CHECK(rel < (is4 ? 0.06 : 0.02), "relative rms error %g", rel);
    printf("  %s: relative rms error %.4f\n", name, rel);
    CASE_END();
}

/* the 8-row interleave of q4_0 / q5_0 / q8_0 (sched/repack_layout.h), decoded here from
 * the layout as repack_layout.h states it and compared with quant_dequantize of
 * the source rows, every element: 19 rows (two whole groups, three rows
 * left to the source), several K, one past a K-block; no copy for K off
 * the 32 grid or fewer than 8 rows */
static void test_repack_x8(void) {
    const kiln_dtype ts[3] = {KILN_Q4_0, KILN_Q5_0, KILN_Q8_0};
    for (int ti = 0; ti < 3; ti++) {
        kiln_dtype t = ts[ti];
        int q5 = t == KILN_Q5_0, q8 = t == KILN_Q8_0, bb = q8 ? 34 : q5 ? 22 : 18;
        char cname[64];
        snprintf(cname, sizeof cname, "repack_x8_%s_layout", kiln_dtype_name(t));
        CASE_BEGIN(cname);
        rt_arena arena = {0};
        const int64_t ks[4] = {32, 96, 320, SCH_REPACK_KBLOCK + 96}, rows = 19;
        for (int ki = 0; ki < 4; ki++) {
            int64_t K = ks[ki], nch = K / 32;
            float *w = malloc((size_t)(rows * K) * sizeof *w), *want = malloc((size_t)K * sizeof *want);
            for (int64_t i = 0; i < rows * K; i++) w[i] = rng_unit() * (float)(1 + i % 7);
            size_t bytes = kiln_dtype_bytes(t, rows * K);
            uint8_t *src = malloc(bytes);
            CHECK(quant_quantize(t, w, src, rows * K) == 0, "quantize");
            CHECK(rt_repack_x8_size(t, bytes, K) == SCH_REPACK_HEADER + (size_t)(2 * nch * 8 * bb),
                  "K=%lld: size %zu", (long long)K, rt_repack_x8_size(t, bytes, K));
            uint8_t *cp = rt_repack_x8(t, src, bytes, K, &arena);
            CHECK(cp != NULL, "K=%lld: no copy", (long long)K);
            if (!cp) continue;
            int64_t head[3];
            memcpy(head, cp, sizeof head);
            CHECK(head[0] == K && head[1] == 2 && head[2] == SCH_REPACK_KBLOCK, "header %lld %lld %lld", (long long)head[0],
                  (long long)head[1], (long long)head[2]);
            int bad = 0;
            for (int64_t row = 0; row < 16 && !bad; row++) {
                quant_dequantize(t, src + row * nch * bb, want, K);
                int64_t g = row / 8, r = row % 8;
                for (int64_t c = 0; c < nch && !bad; c++) {
                    /* K-block kb of every group, then the next (the last one shorter) */
                    const int64_t per = SCH_REPACK_KBLOCK / 32, kb = c / per, inb = nch - kb * per < per ? nch - kb * per : per;
                    const uint8_t *rec = cp + SCH_REPACK_HEADER + (kb * 2 * per + g * inb + c % per) * 8 * bb;
                    uint16_t dh;
                    memcpy(&dh, rec + 2 * r, 2);
                    float d = dtype_f16_to_f32(dh);
                    const uint8_t *qs = rec + (q5 ? 48 : 16);
                    for (int e = 0; e < 32 && !bad; e++) {
                        /* element e: step e / 4, byte e % 4 of the row's lane */
                        int step = e / 4, s4 = step % 4, hi = step >= 4;
                        uint8_t byte = qs[32 * s4 + 4 * r + e % 4];
                        int q = hi ? byte >> 4 : byte & 15, zero = 8;
                        if (q8) { /* step e / 4 is its own 32 bytes, stored + 128 */
                            q = qs[32 * step + 4 * r + e % 4];
                            zero = 128;
                        }
                        if (q5) {
                            uint32_t mask;
                            memcpy(&mask, rec + 16 + 4 * step, 4);
                            q |= (int)((mask >> (4 * r + e % 4)) & 1) << 4;
                            zero = 16;
                        }
                        float got = d * (float)(q - zero);
                        if (got != want[c * 32 + e]) {
                            bad = 1;
                            CHECK(0, "K=%lld row %lld element %lld: copy %g, source %g", (long long)K, (long long)row,
                                  (long long)(c * 32 + e), got, want[c * 32 + e]);
                        }
                    }
                }
            }
            rt_arena_release(&arena, cp);
            free(src);
            free(w);
            free(want);
        }
        CHECK(rt_repack_x8_size(t, 7 * 2 * (size_t)bb, 64) == 0, "a copy of 7 rows");
        CHECK(rt_repack_x8_size(t, 8 * (size_t)bb, 48) == 0, "a copy with K = 48");
        CHECK(rt_repack_x8_size(KILN_F16, 8 * 64, 32) == 0, "a copy of f16");
        CHECK(rt_repack_x8(t, NULL, 0, 32, &arena) == NULL, "a copy of nothing");
        CHECK(arena.chunks == NULL, "the arena's chunk freed with its last piece");
        CASE_END();
    }
}

/* element e of row r of a q4_k or q6_k record (sched/repack_layout.h), decoded
 * from the layout as stated and computed as quant.c's decoder does:
 * (d sc) q - dmin m, or (d scale) (q - 32) */
static float kq_record_value(kiln_dtype t, const uint8_t *rec, int r, int e) {
    int j = e / 32, st = (e % 32) / 4, i = e % 4;
    uint16_t dh;
    memcpy(&dh, rec + 2 * r, 2);
    float d = dtype_f16_to_f32(dh);
    if (t == KILN_Q4_K) {
        uint16_t mh;
        memcpy(&mh, rec + 16 + 2 * r, 2);
        uint8_t byte = rec[160 + 256 * (j / 2) + 32 * st + 4 * r + i];
        int q = j % 2 ? byte >> 4 : byte & 15, sc = rec[32 + 8 * j + r], m = rec[96 + 8 * j + r];
        return (d * (float)sc) * (float)q - dtype_f16_to_f32(mh) * (float)m;
    }
    int quad = 144 + 768 * (j / 4);
    uint8_t nib = rec[quad + (j / 2 % 2 ? 512 + 32 * st : 64 * st + 32) + 4 * r + i];
    uint8_t hib = rec[quad + 64 * st + 4 * r + i];
    int q = ((j % 2 ? nib >> 4 : nib) & 15) | ((hib >> (2 * (j % 4))) & 3) << 4;
    return (d * (float)(int8_t)rec[16 + 8 * (e / 16) + r]) * (float)(q - 32);
}

/* q4_k's and q6_k's records against quant_dequantize of the source rows,
 * every element: 8 + 3 rows of 512 */
static void test_repack_x8_kquant(kiln_dtype t) {
    char name[48];
    snprintf(name, sizeof name, "repack_x8_%s_layout", kiln_dtype_name(t));
    CASE_BEGIN(name);
    rt_arena arena = {0};
    const int64_t K = 512, rows = 11, nb = K / 256, bb = t == KILN_Q4_K ? 144 : 210, rec = t == KILN_Q4_K ? 1184 : 1680;
    float *w = malloc((size_t)(rows * K) * sizeof *w), *want = malloc((size_t)K * sizeof *want);
    for (int64_t i = 0; i < rows * K; i++) w[i] = rng_unit() * (float)(1 + i % 5) - 0.3f * (float)(i % 3);
    size_t bytes = kiln_dtype_bytes(t, rows * K);
    uint8_t *src = malloc(bytes);
    CHECK(quant_quantize(t, w, src, rows * K) == 0, "quantize");
    CHECK(rt_repack_x8_size(t, bytes, K) == SCH_REPACK_HEADER + (size_t)(nb * rec), "size %zu", rt_repack_x8_size(t, bytes, K));
    uint8_t *cp = rt_repack_x8(t, src, bytes, K, &arena);
    CHECK(cp != NULL, "no copy");
    int bad = 0;
    for (int r = 0; cp && r < 8 && !bad; r++) {
        quant_dequantize(t, src + r * nb * bb, want, K);
        for (int64_t c = 0; c < nb && !bad; c++)
            for (int e = 0; e < 256 && !bad; e++) {
                float got = kq_record_value(t, cp + SCH_REPACK_HEADER + c * rec, r, e);
                if (got != want[256 * c + e]) {
                    bad = 1;
                    CHECK(0, "row %d element %lld: copy %g, source %g", r, (long long)(256 * c + e), got, want[256 * c + e]);
                }
            }
    }
    CHECK(rt_repack_x8_size(t, bytes, 256 + 32) == 0, "a copy with K off the 256 grid");
    rt_arena_release(&arena, cp);
    CHECK(arena.chunks == NULL, "the arena's chunk freed with its last piece");
    free(src);
    free(w);
    free(want);
    CASE_END();
}

/* rt_repack_x8_ex tells the source's bytes as read for the last time: in
 * order, contiguous, covering the whole source, every part but the last
 * ending on a 4 KiB-aligned address, several for a source of some MiB,
 * none for a source it does not copy; the copy is rt_repack_x8's, with K
 * of one K-block (the parts come as the rows go) and of three */
typedef struct parts {
    const uint8_t *next, *end;
    int n, bad;
} parts;

static void on_part(void *ctx, const void *part, size_t n) {
    parts *p = ctx;
    if (part != p->next || n == 0) p->bad = 1;
    p->next = (const uint8_t *)part + n;
    if (p->next != p->end && (uintptr_t)p->next % 4096 != 0) p->bad = 1;
    p->n++;
}

static void test_repack_x8_consumed(void) {
    CASE_BEGIN("repack_x8_tells_consumed_parts");
    const int64_t Ks[2] = {640, 3 * SCH_REPACK_KBLOCK};
    for (int i = 0; i < 2; i++) {
        int64_t K = Ks[i], rows = (int64_t)(12 << 20) / (K / 32 * 34) / 8 * 8; /* about 12 MiB of q8_0 */
        size_t bytes = (size_t)(rows * (K / 32) * 34);
        uint8_t *src = NULL;
        CHECK(posix_memalign((void **)&src, 4096, bytes) == 0, "alloc");
        for (size_t j = 0; j < bytes; j++) src[j] = (uint8_t)(j * 2654435761u >> 13);
        for (int64_t r = 0; r < rows * (K / 32); r++) memset(src + r * 34, 0x3c, 2); /* finite scales */
        rt_arena arena = {0};
        parts pt = {src, src + bytes, 0, 0};
        uint8_t *a = rt_repack_x8(KILN_Q8_0, src, bytes, K, &arena);
        uint8_t *b = rt_repack_x8_ex(KILN_Q8_0, src, bytes, K, &arena, on_part, &pt);
        size_t size = rt_repack_x8_size(KILN_Q8_0, bytes, K);
        CHECK(a && b && memcmp(a, b, size) == 0, "K %lld: the copy differs from rt_repack_x8's", (long long)K);
        CHECK(!pt.bad && pt.next == src + bytes && pt.n >= 4, "K %lld: %d parts, bad %d, end %td of %zu", (long long)K,
              pt.n, pt.bad, pt.next - src, bytes);
        parts none = {src, src + bytes, 0, 0};
        CHECK(rt_repack_x8_ex(KILN_Q8_0, src, bytes, K + 16, &arena, on_part, &none) == NULL && none.n == 0,
              "a source it does not copy told %d parts", none.n);
        rt_arena_free(&arena);
        free(src);
    }
    CASE_END();
}

/* the copies' arena: pieces 64-byte aligned, disjoint and writable, cut in
 * order from 2 MiB-aligned chunks; a chunk goes with its last piece, and a
 * piece bigger than a chunk gets a chunk of its own */
static void test_repack_arena(void) {
    CASE_BEGIN("repack_arena");
    rt_arena a = {0};
    enum { N = 40 };
    uint8_t *piece[N];
    size_t size[N];
    for (int i = 0; i < N; i++) {
        size[i] = (size_t)(1 + i * 97) * (size_t)(i % 3 == 0 ? 1307 : 1); /* odd sizes up to 5 MB, 34.6 MB in all */
        piece[i] = rt_arena_alloc(&a, size[i]);
        CHECK(piece[i] && (uintptr_t)piece[i] % 64 == 0, "piece %d: %p", i, (void *)piece[i]);
        if (piece[i]) memset(piece[i], i + 1, size[i]);
    }
    for (int i = 0; i < N; i++)
        for (size_t j = 0; piece[i] && j < size[i]; j += 511)
            if (piece[i][j] != (uint8_t)(i + 1)) {
                CHECK(0, "piece %d byte %zu overwritten: %d", i, j, piece[i][j]);
                break;
            }
    int chunks = 0;
    for (struct rt_arena_chunk *c = a.chunks; c; c = c->next) {
        chunks++;
        CHECK((uintptr_t)c->base % ((size_t)2 << 20) == 0 && c->cap % ((size_t)2 << 20) == 0, "chunk not in 2 MiB units");
    }
    CHECK(chunks == 2, "%d chunks for 34.6 MB of pieces", chunks);
    uint8_t *big = rt_arena_alloc(&a, (size_t)40 << 20);
    CHECK(big && a.chunks->cap == (size_t)40 << 20 && a.chunks->live == 1, "a 40 MiB piece in a chunk of its own");
    rt_arena_release(&a, big);
    CHECK(chunks == 2 && a.chunks && a.chunks->live > 0, "the big piece's chunk freed alone");
    for (int i = 0; i < N; i++) rt_arena_release(&a, piece[i]);
    CHECK(a.chunks == NULL, "every chunk freed with its last piece");
    rt_arena_release(&a, NULL);
    uint8_t *again = rt_arena_alloc(&a, 100);
    CHECK(again != NULL, "a piece after every chunk went");
    rt_arena_free(&a);
    CHECK(a.chunks == NULL && a.held == 0, "rt_arena_free");
    /* a limit: no chunk past it (the piece is NULL), room again once a
     * chunk goes; held counts every chunk */
    a.limit = (size_t)48 << 20;
    uint8_t *p1 = rt_arena_alloc(&a, (size_t)30 << 20);
    CHECK(p1 && a.held == (size_t)32 << 20, "first chunk under the limit: held %zu", a.held);
    CHECK(rt_arena_alloc(&a, (size_t)30 << 20) == NULL && a.held == (size_t)32 << 20, "a chunk past the limit made");
    uint8_t *p2 = rt_arena_alloc(&a, (size_t)1 << 20);
    CHECK(p2 != NULL, "a piece that fits the current chunk refused");
    rt_arena_release(&a, p1);
    rt_arena_release(&a, p2);
    CHECK(a.held == 0, "held %zu after the chunk went", a.held);
    uint8_t *p3 = rt_arena_alloc(&a, (size_t)30 << 20);
    CHECK(p3 != NULL, "no room after the chunk went");
    rt_arena_free(&a);
    CASE_END();
}

int main(void) {
    test_table();
    test_f16_all_patterns();
    test_bf16_all_patterns();
    test_f16_rounding();
    test_bf16_rounding();
    test_store_load();
    test_hand_blocks();
    test_ties_rules();
    test_quantize_errors();
    test_q8_0_random();
    test_q4_0_random();
    test_k_random(KILN_Q4_K, "q4_k_random_roundtrip_error");
    test_k_random(KILN_Q6_K, "q6_k_random_roundtrip_error");
    test_repack_x8();
    test_repack_x8_kquant(KILN_Q4_K);
    test_repack_x8_kquant(KILN_Q6_K);
    test_repack_arena();
    test_repack_x8_consumed();
    return check_exit();
}
