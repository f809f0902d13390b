/* emit_contract.h — C for contraction kernels (the CPU micro-kernel family);
 * see emit_contract.c. Used by emit_c.c. */
#ifndef KILN_CODEGEN_EMIT_CONTRACT_H
#define KILN_CODEGEN_EMIT_CONTRACT_H

#include <stddef.h>

#include "emit_c.h"

/* a contraction launch's flag: run the decode bucket's schedule, sched[0],
 * on more than SCH_SMALL_M rows (the runtime sets it only where that is the
 * int8 tiles on B's repacked copy, up to SCH_DECODE_TILE_ROWS rows:
 * src/runtime/cpu_run.c contract_bucket) */
#define CG_KF_DECODE_ROWS 32
/* launch flag: B's pack (the kernel's prologue, sched/epilogue.c) ran before the
 * launch, so the items do not pack their columns (cpu_run.c: before a search, or
 * with items split along M, whose items share columns) */
#define CG_KF_B_READY 64

/* 1 when kernel k is a contraction this ISA has a micro-kernel for: both
 * schedules valid rows of the family table (sched/family.h) for its B */
int cg_contract_emittable(const sch_program *p, const sch_kernel *k, cg_isa isa);
/* 1 when kernel k's code, its large-M schedule sc, takes a launch split
 * along M (sched/contract_split.h): cg_contract_msplit_steps (A's offset
 * and the store affine in m with constant steps, read through pointers moved
 * to the item's first row; no causal limit on n) and
 * cg_contract_msplit_family (packed f32 and bf16, dot f32: items that share
 * nothing across rows). The steps build symbolic expressions in the graph's
 * pool: the runtime asks once per program (cpu_prepare), not per launch. */
int cg_contract_msplit_ok(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, int64_t *a_step,
                          int64_t *o_step);
int cg_contract_msplit_steps(const sch_program *p, const sch_kernel *k, int64_t *a_step, int64_t *o_step);
int cg_contract_msplit_family(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc);
/* 1 when family row id (sch_family_id) has an emitter: tiles and schedule */
int cg_family_emitter_complete(int id);
/* the dequantisers and tile functions the program's contractions use */
void cg_emit_contract_prelude(const sch_program *p, cg_isa isa, char **s, size_t *len, size_t *cap);
/* kiln_k<kid> for a contraction kernel */
void cg_emit_contract_kernel(const sch_program *p, int32_t kid, char **s, size_t *len, size_t *cap);

/* the same with another function name, and schedule `over` (when not
 * NULL) in place of the annotation's schedule for bucket over_bucket */
void cg_emit_contract_kernel_as(const sch_program *p, int32_t kid, const char *name, const sch_contract_sched *over,
                                int over_bucket, char **s, size_t *len, size_t *cap);
/* the most rows of A a repacked-copy (rp) tile takes at a time in what is
 * emitted next on this thread, 1 to CG_RP_ROWS (anything else: CG_RP_ROWS);
 * returns the previous value. A search's candidates, timed and checked on
 * fewer rows than that, need only those rows' tiles (tune.c) */
int cg_contract_rp_rows(int rows);
/* the dequantisers and the tile functions for a list of schedules of B dtype t */
void cg_emit_contract_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, char **s, size_t *len, size_t *cap);

#endif
