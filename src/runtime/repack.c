/* repack.c — the 8-row interleave of q4_0, q5_0, q8_0, q4_k and q6_k
 * weights (layouts in sched/repack_layout.h), and the arena the copies live in. Plain C
 * byte moves, run once per weight and binding. */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE */
#include "repack.h"

#include "quant.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int rt_repack_x8_ok(kiln_dtype t) {
    return t == KILN_Q4_0 || t == KILN_Q5_0 || t == KILN_Q8_0 || t == KILN_Q4_K || t == KILN_Q6_K;
}

/* a block's elements, its bytes in the source and its 8 rows' record in the copy */
static int64_t block_elems(kiln_dtype t) { return t == KILN_Q4_K || t == KILN_Q6_K ? 256 : 32; }
static int64_t block_bytes(kiln_dtype t) {
    return t == KILN_Q4_0   ? 18
           : t == KILN_Q5_0 ? 22
           : t == KILN_Q8_0 ? 34
           : t == KILN_Q4_K ? 144
           : t == KILN_Q6_K ? 210
                            : 0;
}
static int64_t record_bytes(kiln_dtype t) { return t == KILN_Q4_K ? 1184 : 8 * block_bytes(t); /* q6_k: 1680 */ }

/* q6_k: block c of rows blk[0..7] as repack_layout.h's record; the 6-bit values
 * as quant.c's decoder reads them (ql: 128 bytes, qh: 64, scales: 16 x
 * int8, d) */
static void record_q6_k(const uint8_t *const *blk, uint8_t *o) {
    uint8_t q[8][256];
    for (int r = 0; r < 8; r++) {
        memcpy(o + 2 * r, blk[r] + 208, 2); /* d */
        for (int j = 0; j < 16; j++) o[16 + 8 * j + r] = blk[r][192 + j];
        for (int e = 0; e < 256; e++) {
            int h = e / 128, i = e % 128;
            int lo = (blk[r][64 * h + i % 64] >> (i < 64 ? 0 : 4)) & 15;
            int hi = (blk[r][128 + 32 * h + i % 32] >> (2 * (i / 32))) & 3;
            q[r][e] = (uint8_t)(lo | hi << 4);
        }
    }
    for (int t = 0; t < 8; t++)
        for (int r = 0; r < 8; r++)
            for (int i = 0; i < 4; i++) {
                for (int p = 0; p < 4; p++) {
                    int at = 144 + 768 * (p / 2) + (p % 2 ? 512 + 32 * t : 64 * t + 32);
                    o[at + 4 * r + i] = (uint8_t)((q[r][64 * p + 4 * t + i] & 15) | (q[r][64 * p + 32 + 4 * t + i] & 15) << 4);
                }
                for (int Q = 0; Q < 2; Q++) {
                    unsigned bits = 0;
                    for (int k = 0; k < 4; k++) bits |= (unsigned)(q[r][32 * (4 * Q + k) + 4 * t + i] >> 4) << (2 * k);
                    o[144 + 768 * Q + 64 * t + 4 * r + i] = (uint8_t)bits;
                }
            }
}

/* q4_k: block c of rows blk[0..7] as repack_layout.h's record */
static void record_q4_k(const uint8_t *const *blk, uint8_t *o) {
    for (int r = 0; r < 8; r++) {
        memcpy(o + 2 * r, blk[r], 2);          /* d */
        memcpy(o + 16 + 2 * r, blk[r] + 2, 2); /* dmin */
        for (int j = 0; j < 8; j++) {
            int sc, m;
            quant_q4k_scale_min(blk[r] + 4, j, &sc, &m);
            o[32 + 8 * j + r] = (uint8_t)sc;
            o[96 + 8 * j + r] = (uint8_t)m;
        }
    }
    for (int p = 0; p < 4; p++)
        for (int t = 0; t < 8; t++)
            for (int r = 0; r < 8; r++) memcpy(o + 160 + 256 * p + 32 * t + 4 * r, blk[r] + 16 + 32 * p + 4 * t, 4);
}

size_t rt_repack_x8_size(kiln_dtype t, size_t bytes, int64_t k) {
    int64_t bb = block_bytes(t);
    int64_t be = block_elems(t);
    if (bb == 0 || k <= 0 || k % be != 0) return 0;
    int64_t row = k / be * bb, groups = (int64_t)(bytes / (size_t)row) / 8;
    if (groups < 1) return 0;
    return SCH_REPACK_HEADER + (size_t)(groups * (k / be) * record_bytes(t));
}

int rt_repack_x8_whole(kiln_dtype t, size_t bytes, int64_t k) {
    if (rt_repack_x8_size(t, bytes, k) == 0) return 0;
    size_t row = (size_t)(k / block_elems(t) * block_bytes(t));
    return bytes % row == 0 && (bytes / row) % 8 == 0;
}

/* q4_0 / q5_0: the 8 d, q5_0's fifth-bit masks per step, the nibble lanes */
static void record_q4_q5(const uint8_t *const *blk, uint8_t *o, int q5) {
    for (int r = 0; r < 8; r++) memcpy(o + 2 * r, blk[r], 2); /* d */
    uint8_t *qs = o + 16;
    if (q5) {
        uint32_t qh[8];
        for (int r = 0; r < 8; r++) memcpy(&qh[r], blk[r] + 2, 4);
        for (int st = 0; st < 8; st++) {
            uint32_t mask = 0;
            for (int r = 0; r < 8; r++) mask |= ((qh[r] >> (4 * st)) & 15u) << (4 * r);
            memcpy(o + 16 + 4 * st, &mask, 4);
        }
        qs = o + 48;
    }
    for (int s = 0; s < 4; s++)
        for (int r = 0; r < 8; r++) memcpy(qs + 32 * s + 4 * r, blk[r] + (q5 ? 6 : 2) + 4 * s, 4);
}

/* q8_0: the 8 d, then per step the rows' 4 values + 128 */
static void record_q8_0(const uint8_t *const *blk, uint8_t *o) {
    for (int r = 0; r < 8; r++) memcpy(o + 2 * r, blk[r], 2); /* d */
    for (int st = 0; st < 8; st++)
        for (int r = 0; r < 8; r++)
            for (int i = 0; i < 4; i++) o[16 + 32 * st + 4 * r + i] = (uint8_t)(blk[r][2 + 4 * st + i] ^ 0x80u);
}

void *rt_repack_x8(kiln_dtype t, const void *src, size_t bytes, int64_t k, rt_arena *a) {
    return rt_repack_x8_ex(t, src, bytes, k, a, NULL, NULL);
}

/* the source's first `upto` bytes are read for the last time: tell the
 * caller about [*told, upto), its end rounded down to a 4 KiB-aligned
 * address unless it is the end, and at most every 2 MiB */
static void tell_consumed(const uint8_t *in, size_t *told, size_t upto, size_t bytes, rt_consumed_fn consumed,
                          void *ctx) {
    size_t end = upto;
    if (end < bytes) {
        end = (size_t)(((uintptr_t)(in + end) & ~(uintptr_t)4095) - (uintptr_t)in);
        if (end < *told + ((size_t)2 << 20)) return;
    }
    if (end > *told) consumed(ctx, in + *told, end - *told);
    *told = end;
}

void *rt_repack_x8_ex(kiln_dtype t, const void *src, size_t bytes, int64_t k, rt_arena *a, rt_consumed_fn consumed,
                      void *ctx) {
    size_t size = rt_repack_x8_size(t, bytes, k);
    if (size == 0 || !src) return NULL;
    void *out = rt_arena_alloc(a, size);
    if (!out) return NULL;
    int64_t bb = block_bytes(t), nch = k / block_elems(t), row = nch * bb, rec = record_bytes(t);
    int64_t groups = (int64_t)((size - SCH_REPACK_HEADER) / (size_t)(nch * rec));
    int64_t head[8] = {k, groups, SCH_REPACK_KBLOCK, 0, 0, 0, 0, 0};
    memcpy(out, head, sizeof head);
    const uint8_t *in = src;
    uint8_t *o = (uint8_t *)out + SCH_REPACK_HEADER;
    const int64_t per = SCH_REPACK_KBLOCK / block_elems(t); /* blocks of the format per K-block */
    size_t told = 0;
    for (int64_t c0 = 0; c0 < nch; c0 += per)
        for (int64_t g = 0; g < groups; g++) {
            for (int64_t c = c0; c < nch && c < c0 + per; c++, o += rec) {
                const uint8_t *blk[8];
                for (int r = 0; r < 8; r++) blk[r] = in + (g * 8 + r) * row + c * bb;
                if (t == KILN_Q4_K) record_q4_k(blk, o);
                else if (t == KILN_Q6_K) record_q6_k(blk, o);
                else if (t == KILN_Q8_0) record_q8_0(blk, o);
                else record_q4_q5(blk, o, t == KILN_Q5_0);
            }
            /* the last K-block's pass reads each group's rows for the last time */
            if (consumed && c0 + per >= nch) tell_consumed(in, &told, (size_t)((g + 1) * 8 * row), bytes, consumed, ctx);
        }
    if (consumed) tell_consumed(in, &told, bytes, bytes, consumed, ctx);
    return out;
}

void *rt_arena_alloc(rt_arena *a, size_t bytes) {
    const size_t huge = (size_t)2 << 20, least = (size_t)32 << 20;
    size_t need = (bytes + 63) / 64 * 64;
    struct rt_arena_chunk *c = a->chunks;
    if (!c || c->cap - c->used < need) {
        size_t cap = need > least ? (need + huge - 1) / huge * huge : least;
        if (a->limit && a->held + cap > a->limit) return NULL; /* the copies' memory is spent */
        c = calloc(1, sizeof *c);
        void *base = NULL;
        if (!c || posix_memalign(&base, huge, cap) != 0) {
            free(c);
            return NULL;
        }
#ifdef MADV_HUGEPAGE
        (void)madvise(base, cap, MADV_HUGEPAGE); /* a hint: pages are faulted as they are written */
#endif
        c->base = base;
        c->cap = cap;
        c->next = a->chunks;
        a->chunks = c;
        a->held += cap;
    }
    void *piece = c->base + c->used;
    c->used += need;
    c->live++;
    return piece;
}

void rt_arena_release(rt_arena *a, void *piece) {
    if (!piece) return;
    for (struct rt_arena_chunk **at = &a->chunks; *at; at = &(*at)->next) {
        struct rt_arena_chunk *c = *at;
        if ((uint8_t *)piece < c->base || (uint8_t *)piece >= c->base + c->used) continue;
        if (--c->live == 0) {
            *at = c->next;
            a->held -= c->cap;
            free(c->base);
            free(c);
        }
        return;
    }
}

void rt_arena_free(rt_arena *a) {
    while (a->chunks) {
        struct rt_arena_chunk *c = a->chunks;
        a->chunks = c->next;
        free(c->base);
        free(c);
    }
    a->held = 0;
}
