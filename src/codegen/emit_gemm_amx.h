/* emit_gemm_amx.h — the contraction form on Intel AMX int8 tiles
 * (form=amx arith=i8, emit_gemm_amx.c). emit_contract.c calls these. */
#ifndef KILN_CODEGEN_EMIT_GEMM_AMX_H
#define KILN_CODEGEN_EMIT_GEMM_AMX_H

#include <stddef.h>

#include "emit_c.h"

/* the AMX helpers (once: bit 2 of *i8_done) and micro-kernels the AMX
 * schedules among scheds[0..n) need; after cg_emit_packed_i8_tiles, whose
 * quantiser and strip packer they use */
void cg_emit_amx_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, int *i8_done, char **s, size_t *len,
                       size_t *cap);
/* the AMX helpers (tile permission, configuration, release) once per
 * translation unit: bit 2 of *i8_done */
void cg_emit_amx_prelude(int *i8_done, char **s, size_t *len, size_t *cap);
/* the loops of one AMX schedule inside a work item (emit_contract.c's
 * emit_schedule contract; needs cg_emit_packed_i8_pre/post around the
 * item loop) */
void cg_emit_amx_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                          size_t *len, size_t *cap);

#endif
