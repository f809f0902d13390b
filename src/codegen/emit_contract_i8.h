/* emit_contract_i8.h — int8 arithmetic for the dot-form contraction
 * micro-kernel (emit_contract_i8.c), used by emit_contract.c. */
#ifndef KILN_CODEGEN_EMIT_CONTRACT_I8_H
#define KILN_CODEGEN_EMIT_CONTRACT_I8_H

#include <stddef.h>
#include <stdio.h>

#include "emit_c.h"

/* 1 when schedule sc (arith i8) can be emitted for B dtype t (the CPU must
 * have AVX512-VNNI: the caller checks) */
int cg_i8_ok(kiln_dtype t, const sch_contract_sched *sc);
/* elements of A per quantisation scale for B dtype t (32; 256 for q4_k/q6_k) */
int cg_i8_group(kiln_dtype t);
/* for B dtypes whose wide tile reads A's pairs of blocks prepared by
 * kcq_pairs (q4_0, q5_0): the zero point's shift to pass it; else -1 */
int cg_i8_pairs_shift(kiln_dtype t);
/* the A quantiser and the B unpackers, once per translation unit */
void cg_emit_i8_prelude(char **s, size_t *len, size_t *cap);
/* the tile function for (t, sc) and its name */
void cg_emit_i8_tile(kiln_dtype t, const sch_contract_sched *sc, char **s, size_t *len, size_t *cap);
void cg_i8_tile_name(kiln_dtype t, const sch_contract_sched *sc, char *buf, size_t bufcap);

/* `rs`, the byte stride between a tile's B rows, for next-tile prefetching */
void cg_emit_row_stride(kiln_dtype t, int nr, char **s, size_t *len, size_t *cap);

#endif
