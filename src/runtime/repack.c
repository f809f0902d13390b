/* repack.c — the 8-row interleave of q4_0 and q5_0 weights (layout in
 * repack.h). Plain C byte moves, run once per weight and binding. */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE */
#include "repack.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int rt_repack_x8_ok(kiln_dtype t) { return t == KILN_Q4_0 || t == KILN_Q5_0; }

static int64_t block_bytes(kiln_dtype t) { return t == KILN_Q4_0 ? 18 : t == KILN_Q5_0 ? 22 : 0; }

size_t rt_repack_x8_size(kiln_dtype t, size_t bytes, int64_t k) {
    int64_t bb = block_bytes(t);
    if (bb == 0 || k <= 0 || k % 32 != 0) return 0;
    int64_t row = k / 32 * bb, groups = (int64_t)(bytes / (size_t)row) / 8;
    if (groups < 1) return 0;
    return RT_REPACK_HEADER + (size_t)(groups * 8 * row);
}

void *rt_repack_x8(kiln_dtype t, const void *src, size_t bytes, int64_t k) {
    size_t size = rt_repack_x8_size(t, bytes, k);
    if (size == 0) return NULL;
    /* in 2 MiB pages where the kernel gives them, as the model's weights
     * (gguf.c read_buffer): decode streams the copy once per token, and
     * with 4 KiB pages every 4 KiB of it is a TLB miss */
    const size_t huge = (size_t)2 << 20;
    size_t cap = size >= huge ? (size + huge - 1) / huge * huge : size;
    void *out = NULL;
    if (posix_memalign(&out, size >= huge ? huge : 64, cap) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    if (cap != size || size % huge == 0) (void)madvise(out, cap, MADV_HUGEPAGE); /* a hint */
#endif
    int64_t bb = block_bytes(t), nch = k / 32, row = nch * bb;
    int64_t groups = (int64_t)((size - RT_REPACK_HEADER) / (size_t)(8 * row));
    int64_t head[8] = {k, groups, 0, 0, 0, 0, 0, 0};
    memcpy(out, head, sizeof head);
    const uint8_t *in = src;
    int q5 = t == KILN_Q5_0, qs_at = q5 ? 6 : 2;
    uint8_t *o = (uint8_t *)out + RT_REPACK_HEADER;
    for (int64_t g = 0; g < groups; g++) {
        for (int64_t c = 0; c < nch; c++, o += 8 * bb) {
            const uint8_t *blk[8];
            for (int r = 0; r < 8; r++) blk[r] = in + (g * 8 + r) * row + c * bb;
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
                for (int r = 0; r < 8; r++) memcpy(qs + 32 * s + 4 * r, blk[r] + qs_at + 4 * s, 4);
        }
    }
    return out;
}
