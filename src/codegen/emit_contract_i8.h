/* emit_contract_i8.h — int8 arithmetic for the dot-form contraction
 * micro-kernel (emit_contract_i8.c), used by emit_contract.c. Which
 * schedules it takes is the family table's (sched/family.h: dot-i8,
 * dot-i8-rp). */
#ifndef KILN_CODEGEN_EMIT_CONTRACT_I8_H
#define KILN_CODEGEN_EMIT_CONTRACT_I8_H

#include <stddef.h>
#include <stdio.h>

#include "emit_c.h"

/* elements of A per quantisation scale for B dtype t (32; 256 for q4_k/q6_k) */
int cg_i8_group(kiln_dtype t);
/* whether the wide tile of B dtype t reads A prepared once per call (its
 * `pp` argument): 0 no, 1 kcq_pairs (q4_0, q5_0: pairs of blocks, 192
 * bytes a pair), 2 kcq_q4k (q4_k: 272 bytes a super-block) */
int cg_i8_prep(kiln_dtype t);
/* the statement preparing one quantised row (C expressions for its qa,
 * scales, lane sums, sums, chunk count and the output) */
void cg_emit_i8_prep(kiln_dtype t, const char *qa, const char *sa, const char *l8, const char *qsum, const char *nch,
                     const char *out, char **s, size_t *len, size_t *cap);
/* the A quantiser and the B unpackers, once per translation unit */
void cg_emit_i8_prelude(char **s, size_t *len, size_t *cap);
/* the tile function for (t, sc) and its name */
void cg_emit_i8_tile(kiln_dtype t, const sch_contract_sched *sc, char **s, size_t *len, size_t *cap);
void cg_i8_tile_name(kiln_dtype t, const sch_contract_sched *sc, char *buf, size_t bufcap);

/* the tile for (t, sc) with sc->rp: B read from its 8-row interleaved copy
 * (sched/repack_layout.h), and its name; sc->mr (1 to CG_RP_ROWS) rows of
 * A, each row's result bit for bit the 1-row tile's (the decode rows of a
 * batched program share each weight group's reads) */
#define CG_RP_ROWS 4 /* the decode bucket's M (sched/loop.h: SCH_SMALL_M) */
void cg_emit_i8_rp_tile(kiln_dtype t, const sch_contract_sched *sc, char **s, size_t *len, size_t *cap);
void cg_i8_rp_tile_name(kiln_dtype t, const sch_contract_sched *sc, char *buf, size_t bufcap);
/* the same over two groups (16 B rows: the group at g and the one at
 * g + gstep) in 512-bit registers, each row's results the 8-row tile's bit
 * for bit; for the 32-element block formats (q8_0, q4_0, q5_0) only */
int cg_i8_rp16_ok(kiln_dtype t);
void cg_emit_i8_rp16_tile(kiln_dtype t, const sch_contract_sched *sc, char **s, size_t *len, size_t *cap);
void cg_i8_rp16_tile_name(kiln_dtype t, const sch_contract_sched *sc, char *buf, size_t bufcap);
/* bytes of the copy per 32 elements of K of a group of 8 rows */
int cg_i8_rp_bytes32(kiln_dtype t);

/* `rs`, the byte stride between a tile's B rows, for next-tile prefetching */
void cg_emit_row_stride(kiln_dtype t, int nr, char **s, size_t *len, size_t *cap);

#endif
