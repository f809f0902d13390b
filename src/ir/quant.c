/* quant.c — GGUF block formats: decoders for q8_0, q4_0, q4_k, q6_k and
 * encoders for all four. In ir, beside the dtypes they are, so that a CAST
 * (dtype.c), the interpreter (ref) and the GGUF loader (model) all reach them
 * from below.
 *
 * Invariants:
 *  - Byte layouts are GGUF's (see quant.h); multi-byte fields are read and
 *    written little-endian byte by byte, so the code is host-endian neutral.
 *  - Decoders reproduce GGUF's reference arithmetic in f32 operation by
 *    operation (e.g. q4_k computes (d*sc)*q - dmin*m, not d*(sc*q) - ...), so
 *    results are bit-identical to the reference. Each product is its own
 *    statement so that no compiler fuses a multiply and an add into an FMA.
 *  - q8_0 and q4_0 encoders follow the format's reference rounding rules and
 *    produce the reference bytes:
 *      q8_0: d = amax/127, q = round-half-away(x * (1/d))
 *      q4_0: m = the element of largest magnitude (first on ties), d = m/-8,
 *            q = min(15, trunc(x * (1/d) + 8.5))
 *  - q4_k and q6_k encoders are kiln's own simple choice (not the reference
 *    search): sub-block scales from the range (q4_k: [min(0,lo), hi] over 15
 *    steps; q6_k: the largest-magnitude element mapped to -32), super-block
 *    f16 scales from the largest sub-block scale over 63 (q4_k) or 127 (q6_k),
 *    each small integer scale rounded to nearest and then the best of its +-1
 *    neighbours by squared error, and quants rounded to nearest (halves away
 *    from zero) against the *stored* (f16-rounded) effective scales, so the
 *    decoder sees exactly what the encoder optimised for.
 *  - No float -> int conversion here can be out of range (inputs are clamped
 *    first; NaN maps to 0), so bad data cannot trigger undefined behaviour.
 */
#include "quant.h"

#include <math.h>
#include <string.h>

#include "base.h"
#include "dtype.h"

static float rd_f16(const uint8_t *p) {
    return dtype_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

static void wr_f16(uint8_t *p, float v) {
    uint16_t h = dtype_f32_to_f16(v);
    p[0] = (uint8_t)(h & 0xffu);
    p[1] = (uint8_t)(h >> 8);
}

/* clamp then convert; NaN -> 0. `v` is already integral or is truncated */
static int clamp_to_int(float v, int lo, int hi) {
    if (isnan(v)) return 0;
    if (v <= (float)lo) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* ---- q8_0 --------------------------------------------------------------- */

static void deq_q8_0(const uint8_t *b, float *y) {
    float d = rd_f16(b);
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
}

static void enc_q8_0(const float *x, uint8_t *b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        float a = fabsf(x[j]);
        if (a > amax) amax = a;
    }
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    wr_f16(b, d);
    for (int j = 0; j < 32; j++) {
        float t = x[j] * id;
        int q = clamp_to_int(roundf(t), -128, 127); /* roundf: halves away from zero */
        b[2 + j] = (uint8_t)(int8_t)q;
    }
}

/* ---- q4_0 --------------------------------------------------------------- */

static void deq_q4_0(const uint8_t *b, float *y) {
    float d = rd_f16(b);
    for (int j = 0; j < 16; j++) {
        int lo = (b[2 + j] & 0x0f) - 8, hi = (b[2 + j] >> 4) - 8;
        y[j] = d * (float)lo;
        y[j + 16] = d * (float)hi;
    }
}

static void enc_q4_0(const float *x, uint8_t *b) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        float a = fabsf(x[j]);
        if (a > amax) { /* strict: the first of equal magnitudes wins */
            amax = a;
            max = x[j];
        }
    }
    float d = max / -8.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    wr_f16(b, d);
    int q[32];
    for (int j = 0; j < 32; j++) {
        float t = x[j] * id;
        float u = t + 8.5f;
        q[j] = clamp_to_int(u, 0, 15); /* truncation, then the top clamp of 16 -> 15 */
    }
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
}

/* ---- q5_0 --------------------------------------------------------------- */
/* 22 bytes: f16 d, 4 bytes qh (little-endian u32: bit j is the 5th bit of
 * element j), 16 bytes of nibbles laid out as in q4_0; x = d*(q-16) */

static uint32_t rd_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void deq_q5_0(const uint8_t *b, float *y) {
    float d = rd_f16(b);
    uint32_t qh = rd_u32le(b + 2);
    for (int j = 0; j < 16; j++) {
        int lo = (int)((b[6 + j] & 0x0fu) | ((qh >> j) & 1u) << 4) - 16;
        int hi = (int)((b[6 + j] >> 4) | ((qh >> (j + 16)) & 1u) << 4) - 16;
        y[j] = d * (float)lo;
        y[j + 16] = d * (float)hi;
    }
}

/* the q4_0 rule with 5 bits: d = signed max / -16, q = trunc(x/d + 16.5) <= 31 */
static void enc_q5_0(const float *x, uint8_t *b) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        float a = fabsf(x[j]);
        if (a > amax) {
            amax = a;
            max = x[j];
        }
    }
    float d = max / -16.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    wr_f16(b, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int q0 = clamp_to_int(x[j] * id + 16.5f, 0, 31);
        int q1 = clamp_to_int(x[j + 16] * id + 16.5f, 0, 31);
        b[6 + j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) b[2 + k] = (uint8_t)(qh >> (8 * k));
}

/* ---- q4_k --------------------------------------------------------------- */
/* 12 scale bytes: sub-blocks 0..3 keep their 6-bit scale and min in the low
 * bits of bytes 0..3 / 4..7; sub-blocks 4..7 put their low 4 bits in bytes
 * 8..11 (scale low nibble, min high nibble) and their top 2 bits in the top
 * 2 bits of bytes 0..3 (scale) / 4..7 (min). */

void quant_q4k_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static void q4k_put_scales(uint8_t *s, const int *sc, const int *m) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
    }
}

static void deq_q4_k(const uint8_t *b, float *y) {
    float d = rd_f16(b), dmin = rd_f16(b + 2);
    const uint8_t *scales = b + 4, *qs = b + 16;
    for (int sb = 0; sb < 8; sb++) {
        int sc, m;
        quant_q4k_scale_min(scales, sb, &sc, &m);
        float ds = d * (float)sc;
        float dm = dmin * (float)m;
        /* sub-blocks 2c and 2c+1 share bytes qs[32c..32c+31]: low then high nibble */
        const uint8_t *q = qs + 32 * (sb / 2);
        unsigned shift = (unsigned)(4 * (sb & 1));
        for (int j = 0; j < 32; j++) {
            float p = ds * (float)((q[j] >> shift) & 0x0f);
            y[32 * sb + j] = p - dm;
        }
    }
}

/* quantise one 32-element sub-block against the decoder's ds*q - dm (q into
 * `q` when not NULL) and return the squared error of the result */
static float q4k_group_error(const float *x, float ds, float dm, int *q) {
    float err = 0.0f;
    for (int j = 0; j < 32; j++) {
        int v = 0;
        if (ds > 0.0f) {
            float t = (x[j] + dm) / ds;
            v = clamp_to_int(roundf(t), 0, 15);
        }
        float p = ds * (float)v;
        float e = x[j] - (p - dm);
        err += e * e;
        if (q) q[j] = v;
    }
    return err;
}

static void enc_q4_k(const float *x, uint8_t *b) {
    /* model each sub-block as scale*q - offset with q in 0..15, offset >= 0 */
    float scale[8], offset[8], max_scale = 0.0f, max_offset = 0.0f;
    for (int sb = 0; sb < 8; sb++) {
        float lo = 0.0f, hi = 0.0f; /* lo <= 0 keeps the offset non-negative */
        for (int j = 0; j < 32; j++) {
            float v = x[32 * sb + j];
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
        scale[sb] = (hi - lo) / 15.0f;
        offset[sb] = -lo;
        if (scale[sb] > max_scale) max_scale = scale[sb];
        if (offset[sb] > max_offset) max_offset = offset[sb];
    }
    float d = max_scale / 63.0f, dmin = max_offset / 63.0f;
    wr_f16(b, d);
    wr_f16(b + 2, dmin);
    float dq = rd_f16(b), dminq = rd_f16(b + 2); /* what the decoder will see */
    int sc[8], m[8];
    for (int sb = 0; sb < 8; sb++) {
        /* nearest 6-bit scale and min, then the best of their +-1 neighbours */
        int sc0 = dq > 0.0f ? clamp_to_int(roundf(scale[sb] / dq), 0, 63) : 0;
        int m0 = dminq > 0.0f ? clamp_to_int(roundf(offset[sb] / dminq), 0, 63) : 0;
        float best = INFINITY;
        sc[sb] = sc0;
        m[sb] = m0;
        for (int a = sc0 - 1; a <= sc0 + 1; a++) {
            for (int c = m0 - 1; c <= m0 + 1; c++) {
                if (a < 0 || a > 63 || c < 0 || c > 63) continue;
                float err = q4k_group_error(x + 32 * sb, dq * (float)a, dminq * (float)c, NULL);
                if (err < best) {
                    best = err;
                    sc[sb] = a;
                    m[sb] = c;
                }
            }
        }
    }
    q4k_put_scales(b + 4, sc, m);
    uint8_t *qs = b + 16;
    memset(qs, 0, 128);
    for (int sb = 0; sb < 8; sb++) {
        int q[32];
        q4k_group_error(x + 32 * sb, dq * (float)sc[sb], dminq * (float)m[sb], q);
        unsigned shift = (unsigned)(4 * (sb & 1));
        for (int j = 0; j < 32; j++)
            qs[32 * (sb / 2) + j] = (uint8_t)(qs[32 * (sb / 2) + j] | (q[j] << shift));
    }
}

/* ---- q6_k --------------------------------------------------------------- */
/* element e = 128h + r (h = half, r in 0..127): low 4 bits in ql[64h + r%64],
 * low nibble for r < 64, high nibble otherwise; high 2 bits in
 * qh[32h + r%32] at bit 2*(r/32); q is stored biased by +32; element e uses
 * the int8 scale of its 16-element group e/16. */

static void deq_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *scales = (const int8_t *)(b + 192);
    float d = rd_f16(b + 208);
    for (int e = 0; e < 256; e++) {
        int h = e / 128, r = e % 128;
        int lo = (ql[64 * h + r % 64] >> (r < 64 ? 0 : 4)) & 0x0f;
        int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
        int q = (lo | (hi << 4)) - 32;
        float ds = d * (float)scales[e / 16];
        y[e] = ds * (float)q;
    }
}

/* quantise one 16-element group against the decoder's ds*q (q into `q` when
 * not NULL) and return the squared error of the result */
static float q6k_group_error(const float *x, float ds, int *q) {
    float err = 0.0f;
    for (int j = 0; j < 16; j++) {
        int v = 0;
        if (ds != 0.0f) {
            float t = x[j] / ds;
            v = clamp_to_int(roundf(t), -32, 31);
        }
        float p = ds * (float)v;
        float e = x[j] - p;
        err += e * e;
        if (q) q[j] = v;
    }
    return err;
}

static void enc_q6_k(const float *x, uint8_t *b) {
    /* per 16-group: scale so the largest-magnitude element lands on -32, the
     * end of the range with the extra step (as q4_0 does with -8) */
    float gscale[16], amax = 0.0f;
    for (int g = 0; g < 16; g++) {
        float big = 0.0f, gmax = 0.0f;
        for (int j = 0; j < 16; j++) {
            float a = fabsf(x[16 * g + j]);
            if (a > big) {
                big = a;
                gmax = x[16 * g + j];
            }
        }
        gscale[g] = gmax / -32.0f;
        if (fabsf(gscale[g]) > amax) amax = fabsf(gscale[g]);
    }
    float d = amax / 127.0f;
    wr_f16(b + 208, d);
    float dq = rd_f16(b + 208);
    int8_t *scales = (int8_t *)(b + 192);
    uint8_t *ql = b, *qh = b + 128;
    memset(ql, 0, 192);
    int q[256];
    for (int g = 0; g < 16; g++) {
        /* nearest int8 group scale, then the best of its +-1 neighbours */
        int s0 = dq > 0.0f ? clamp_to_int(roundf(gscale[g] / dq), -128, 127) : 0;
        float best = INFINITY;
        scales[g] = (int8_t)s0;
        for (int c = s0 - 1; c <= s0 + 1; c++) {
            if (c < -128 || c > 127) continue;
            float err = q6k_group_error(x + 16 * g, dq * (float)c, NULL);
            if (err < best) {
                best = err;
                scales[g] = (int8_t)c;
            }
        }
        q6k_group_error(x + 16 * g, dq * (float)scales[g], q + 16 * g);
    }
    for (int e = 0; e < 256; e++) {
        int u = q[e] + 32, h = e / 128, r = e % 128;
        ql[64 * h + r % 64] = (uint8_t)(ql[64 * h + r % 64] | ((u & 0x0f) << (r < 64 ? 0 : 4)));
        qh[32 * h + r % 32] = (uint8_t)(qh[32 * h + r % 32] | ((u >> 4) << (2 * (r / 32))));
    }
}

/* ---- dispatch ----------------------------------------------------------- */

void quant_dequantize(kiln_dtype t, const void *src, float *dst, int64_t n) {
    KILN_ASSERT((int)t >= 0 && t < KILN_DTYPE_COUNT && n >= 0);
    int64_t block = dtype_table[t].block, bytes = dtype_table[t].block_bytes;
    KILN_ASSERT(n % block == 0);
    const uint8_t *s = src;
    void (*dec)(const uint8_t *, float *) = NULL;
    switch (t) {
    case KILN_Q8_0: dec = deq_q8_0; break;
    case KILN_Q4_0: dec = deq_q4_0; break;
    case KILN_Q4_K: dec = deq_q4_k; break;
    case KILN_Q6_K: dec = deq_q6_k; break;
    case KILN_Q5_0: dec = deq_q5_0; break;
    default: /* scalar types convert element by element (exact for all of them) */
        for (int64_t i = 0; i < n; i++) dst[i] = (float)dtype_load(t, src, i);
        return;
    }
    for (int64_t i = 0; i < n / block; i++) dec(s + i * bytes, dst + i * block);
}

int quant_quantize(kiln_dtype t, const float *src, void *dst, int64_t n) {
    if ((int)t < 0 || t >= KILN_DTYPE_COUNT || n < 0) return -1;
    int64_t block = dtype_table[t].block, bytes = dtype_table[t].block_bytes;
    if (n % block != 0) return -1;
    void (*enc)(const float *, uint8_t *) = NULL;
    switch (t) {
    case KILN_Q8_0: enc = enc_q8_0; break;
    case KILN_Q4_0: enc = enc_q4_0; break;
    case KILN_Q4_K: enc = enc_q4_k; break;
    case KILN_Q6_K: enc = enc_q6_k; break;
    case KILN_Q5_0: enc = enc_q5_0; break;
    default: return -1;
    }
    uint8_t *d = dst;
    for (int64_t i = 0; i < n / block; i++) enc(src + i * block, d + i * bytes);
    return 0;
}
