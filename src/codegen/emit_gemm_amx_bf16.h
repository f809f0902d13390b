/* emit_gemm_amx_bf16.h — the contraction form on Intel AMX bf16 tiles
 * (form=amx arith=bf16, emit_gemm_amx_bf16.c). emit_contract.c calls these. */
#ifndef KILN_CODEGEN_EMIT_GEMM_AMX_BF16_H
#define KILN_CODEGEN_EMIT_GEMM_AMX_BF16_H

#include <stddef.h>

#include "emit_c.h"

/* 1 when the bf16 AMX schedule s can be emitted for B dtype t (block
 * formats; the CPU must have amx_tile, amx_bf16 and avx512_bf16: the caller
 * checks) */
int cg_amx_bf16_ok(kiln_dtype t, const sch_contract_sched *s);
/* the AMX helpers (shared with the int8 form, bit 2 of *i8_done), the bf16
 * row converter (bit 3), B's strip packer for t and the micro-kernels
 * (bits 4-7) the bf16 AMX schedules among scheds[0..n) need; after the dot
 * form's prelude, whose kcv_<dt> the packer uses */
void cg_emit_amx_bf16_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, int *i8_done, char **s, size_t *len,
                            size_t *cap);
/* the per-call A buffer, declared before and freed after the item loop */
void cg_emit_amx_bf16_pre(char **s, size_t *len, size_t *cap);
void cg_emit_amx_bf16_post(char **s, size_t *len, size_t *cap);
/* the loops of one bf16 AMX schedule inside a work item */
void cg_emit_amx_bf16_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                               size_t *len, size_t *cap);

#endif
