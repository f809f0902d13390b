/* repack_layout.h — the byte layouts of the weight copies a schedule may
 * read instead of the weight (DESIGN.md section 6: "a repacked layout, when
 * the search chose one, is built then"): the contract between the emitters
 * that generate code reading them (src/codegen: emit_contract.c,
 * emit_contract_i8.c, emit_gemm_i8.c) and the runtime that builds them
 * (src/runtime/repack.c, exec.c). In sched, below both, so that neither
 * includes the other.
 *
 * The 8-row interleave of q4_0, q5_0, q8_0, q4_k and q6_k (rp=1, the
 * int8 dot tiles of emit_contract_i8.c): B is read as rows of K elements;
 * rows 8g .. 8g+7 form group g, stored block by block, so a decode tile
 * reads one stream and gets the eight rows' block c from one record (144,
 * 176 or 272 bytes; q4_k 1184, q6_k 1680):
 *
 *   header (64 bytes): int64 K, int64 groups, int64 SCH_REPACK_KBLOCK, zeros
 *   records in K-blocks of SCH_REPACK_KBLOCK elements (the last one
 *     shorter), block after block; in each, group after group, the group's
 *     records of the block in order: with K <= SCH_REPACK_KBLOCK, record
 *     (g, c) at 64 + (g * K/32 + c) * 8 * block_bytes (a decode tile
 *     reads a block of all its groups in one pass, emit_contract.c):
 *     8 x f16  d of rows 0..7                                     (16 bytes)
 *     q5_0 only: 8 x u32 mask_t, t = 0..7: bit 4r + i is the fifth
 *       bit of element 4t + i of row r                             (32 bytes)
 *     q4_0, q5_0: 4 x 32 bytes, s = 0..3: for r = 0..7 the row's
 *       nibble bytes qs[4s .. 4s+3] (low nibbles: elements 4s..4s+3,
 *       high nibbles: elements 16+4s .. 16+4s+3)                  (128 bytes)
 *     q8_0: 8 x 32 bytes, t = 0..7: for r = 0..7 the row's elements
 *       4t .. 4t+3, each + 128 (the int8 x 0x80: unsigned, zero 128) (256 bytes)
 *
 * q4_k (256-element blocks of 144 bytes) has a 1184-byte record per group
 * and block c (32 bytes more than its 8 blocks: the scales unpacked):
 *     8 x f16 d, 8 x f16 dmin of rows 0..7                         (32 bytes)
 *     u8 scale[j][r], j = 0..7 sub-blocks, r = 0..7 rows (6 bits)  (64 bytes)
 *     u8 min[j][r]                                                 (64 bytes)
 *     for p = 0..3, t = 0..7: 32 bytes, for r = 0..7 the row's bytes
 *       qs[32p + 4t .. 32p + 4t + 3] (low nibbles: sub-block 2p's
 *       elements 4t..4t+3, high nibbles: sub-block 2p+1's)       (1024 bytes)
 *
 * q6_k (256-element blocks of 210 bytes) has a 1680-byte record per group
 * and block c, the 6-bit values q (0..63, x = d * scale * (q - 32)) of
 * 32-value chunk j in two parts:
 *     8 x f16 d of rows 0..7                                       (16 bytes)
 *     i8 scale[j][r], j = 0..15 sub-blocks of 16 values           (128 bytes)
 *     for Q = 0..1 (768 bytes each, in the order a tile reads them):
 *       for t = 0..7: hb(Q, t), then nib(2Q, t)                   (512 bytes)
 *       for t = 0..7: nib(2Q + 1, t)                              (256 bytes)
 *     where nib(p, t), 32 bytes: for r = 0..7 the low 4 bits of chunk
 *       2p's values 4t..4t+3 (low nibbles) and 2p+1's (high nibbles);
 *     hb(Q, t), 32 bytes: for r = 0..7 4 bytes whose bits 2k, 2k+1 are
 *       the top 2 bits of chunk 4Q+k's values 4t..4t+3
 *
 * So for q4_0 and q5_0 the 32 bytes of s hold, per row, 4 consecutive
 * weights in the low nibbles (step t = s) and 4 in the high ones (step t =
 * s + 4), each step a 4-byte lane per row: one vpdpbusd per step against
 * A's 4 bytes of that step broadcast (q8_0: the 32 bytes of t are step t;
 * the k-quants likewise per 32-value chunk). Exact: the same bits as the
 * source, moved (q8_0's sign bit flipped, q4_k's scales unpacked). Rows
 * past the last whole group are not copied (tiles read them from the
 * source).
 */
#ifndef KILN_SCHED_REPACK_LAYOUT_H
#define KILN_SCHED_REPACK_LAYOUT_H

#define SCH_REPACK_HEADER 64
/* elements of K per block of the copy (a multiple of 256) */
#define SCH_REPACK_KBLOCK 2048

/* The pack copy (prefill): the strips the packed int8 form (emit_gemm_i8.c)
 * packs B into, kept so that B is packed once instead of once per launch
 * (gemma3-270m pp512: 4% of the time). Built by the kernel itself: the
 * runtime hands it an unfilled copy (filled = 0) on the first large-M
 * launch on a weight buffer; each work item packs its own strips (items
 * own disjoint strips), the runtime sets filled after the launch, and
 * later launches read the strips instead of packing. Layout, for B's rows
 * read as K elements in strips of nr rows (the schedule's nr), kb
 * elements per scale:
 *
 *   header (64 bytes): int64 K, int64 nr, int64 strips, int64 filled, zeros
 *   strip s (batch point s / ceil(N / nr), rows nr * (s % ceil(N / nr)) ..
 *     + nr; the last strip of a batch point repeats its last row) at
 *     64 + s * SCH_PACK_STRIP(nr, K, kb):
 *     u8 q[K/4][nr][4]      B's values as the tile reads them     (nr*K)
 *     f32 d[K/kb][nr]       the scales                       (4*nr*K/kb)
 *     f32 m[K/kb][nr]       q4_k's minimums (else zero)      (4*nr*K/kb)
 *   so K block [k0, k0 + kl) of a strip is q + nr*k0, d + nr*k0/kb,
 *   m + nr*k0/kb: the per-launch packing's layout with K whole. */
#define SCH_PACK_HEADER 64
#define SCH_PACK_STRIP(nr, K, kb) ((size_t)(nr) * (size_t)(K) + 8 * (size_t)(nr) * (size_t)((K) / (kb)))

#endif
