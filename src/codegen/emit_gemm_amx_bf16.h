/* emit_gemm_amx_bf16.h — the contraction form on Intel AMX bf16 tiles
 * (form=amx arith=bf16, emit_gemm_amx_bf16.c). emit_contract.c calls these. */
#ifndef KILN_CODEGEN_EMIT_GEMM_AMX_BF16_H
#define KILN_CODEGEN_EMIT_GEMM_AMX_BF16_H

#include <stddef.h>

#include "emit_c.h"

/* the AMX helpers (shared with the int8 form, bit 2 of *i8_done), the bf16
 * row converter (bit 3), B's strip packer for t and the micro-kernels
 * (bits 4-7) the bf16 AMX schedules among scheds[0..n) need; after the dot
 * form's prelude, whose kcv_<dt> the packer uses */
void cg_emit_amx_bf16_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, int *i8_done, char **s, size_t *len,
                            size_t *cap);
/* A shared by the threads of one launch: the runtime first launches the
 * kernel with flags CG_KF_PREP over 16-row groups of A, ceil(M / 16) + 2
 * of them, each converting its rows (the last two groups zeroed) into the
 * scratch buffer B[nbufs] of at least the family row's scratch bytes
 * (sched/family.h: amx-bf16); then
 * launches the work items with CG_KF_SHARED, and the items read A from
 * there instead of each thread converting all of it. Only for one batch
 * point (the prep sets every batch index to 0). Without either flag a
 * kernel converts A itself, once per thread and batch point. */
#define CG_KF_PREP 2
#define CG_KF_SHARED 4
/* the per-call A buffer, declared before and freed after the item loop,
 * and the CG_KF_PREP launch's body (the scratch is B[p->nbufs]) */
void cg_emit_amx_bf16_pre(const sch_program *p, const sch_kernel *k, char **s, size_t *len, size_t *cap);
void cg_emit_amx_bf16_post(char **s, size_t *len, size_t *cap);
/* the loops of one bf16 AMX schedule inside a work item */
void cg_emit_amx_bf16_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                               size_t *len, size_t *cap);

#endif
