/* emit_gemm_bf16.h — the packed contraction form with bf16 arithmetic on
 * AVX-512 (SCH_FORM_PACKED + SCH_ARITH_BF16, emit_gemm_bf16.c): f32
 * activations times f32 B the program computed, on vdpbf16ps, for CPUs
 * with avx512_bf16. emit_contract.c calls these for schedules of that form;
 * the scope contract is cg_emit_packed_schedule's (emit_gemm.h), plus the
 * wrapper's item index w and ntiles. */
#ifndef KILN_CODEGEN_EMIT_GEMM_BF16_H
#define KILN_CODEGEN_EMIT_GEMM_BF16_H

#include <stddef.h>

#include "emit_c.h"

/* the helpers and micro-kernels the bf16 packed schedules among scheds[0..n) need */
void cg_emit_packed_bf16_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, char **s, size_t *len,
                               size_t *cap);
/* declarations at the top of the kernel wrapper (A's rounded rows) and their release */
void cg_emit_packed_bf16_pre(char **s, size_t *len, size_t *cap);
void cg_emit_packed_bf16_post(char **s, size_t *len, size_t *cap);
/* the loops of one bf16 packed schedule inside a work item */
void cg_emit_packed_bf16_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                                  size_t *len, size_t *cap);

#endif
