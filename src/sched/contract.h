/* contract.h — contractions: recognised in the loop IR (contract.c), emitted
 * as a micro-kernel family by the CPU backend (codegen/emit_contract.c),
 * their schedules searched (search.c). See sch_contract in loop.h. */
#ifndef KILN_SCHED_CONTRACT_H
#define KILN_SCHED_CONTRACT_H

#include <stddef.h>
#include <stdint.h>

#include "loop.h"

/* annotate the program's contraction kernels; mark in force[] the nodes that
 * need a buffer for a contraction to get direct operands (see contract.c).
 * Returns how many nodes it newly forced (0: the program is final).
 * sch_kernelize skips it under sch_options.no_contract. */
int sch_contract_analyse(sch_program *p, uint8_t *force);

/* pack.c: when kernel ki is a contraction one of whose operands no form
 * reads in place and no forced buffer would fix (a view of a buffer: pad and
 * window, div/mod indices), move that operand into a MAP kernel inserted at
 * ki that writes it densely, and read that instead. Returns the number of
 * kernels inserted (the contraction is then at ki + that). */
int sch_contract_pack(sch_program *p, int32_t ki);
/* pack.c: merge adjacent constant loops of contraction kernel ki that every
 * index expression reads only as u*V + v; returns how many were merged */
int sch_coalesce_loops(sch_program *p, int32_t ki);
/* pack.c: the same for a generic MAP or REDUCE kernel ki (not a contraction,
 * not a pack, without stages, a constant reduction extent); kernelize calls
 * it on the final program */
int sch_coalesce_generic(sch_program *p, int32_t ki);
/* pack.c: when generic reduction ki re-reads a fused elementwise chain with
 * transcendental ops through a window (a max pool over LRN's output), mark
 * the chain's node in force (it gets a buffer, computed once per element);
 * returns 1 when it did */
int sch_window_force(const sch_program *p, int32_t ki, uint8_t *force);
/* bit d set when tree id reads kernel k's loop variable d anywhere */
unsigned sch_lx_loop_mask(const sch_program *p, const sch_kernel *k, int32_t id);

/* the contraction kernel k's demanded columns (demand.c): off when its
 * consumers multiply output (m, n) by zero wherever n >= m + off, else
 * SYM_NONE */
sym_id sch_demand_n_limit(const sch_program *p, const sch_kernel *k);

/* the default schedule for small (decode) or large M */
sch_contract_sched sch_contract_default(int large_m, kiln_dtype b_dtype);
/* the same for contraction c: a packed schedule when its B is strided along
 * K (c->b_kstride), which only the packed form reads */
sch_contract_sched sch_contract_default_of(const sch_contract *c, int large_m, kiln_dtype b_dtype);

/* Work items of a contraction kernel: each batch point's n B rows (output
 * columns) are cut into q runs of whole nr-row strips (nr: the schedule's),
 * run t holding strips [S t / q, S (t + 1) / q) of the S = ceil(n / nr);
 * the kernel is launched over nbatch * q items with chunk = q.
 * sch_contract_runs: q for schedule s (its nc when set: runs of at most nc
 * rows; else chosen so the busiest of nthreads has the fewest strips).
 * sch_contract_busiest: the most strips one of nthreads gets when the items
 * are dealt out as the thread pool does (contiguous, equal counts).
 * sch_contract_run_rows: the widest run's rows. */
int64_t sch_contract_runs(const sch_contract_sched *s, int64_t n, int64_t nbatch, int nthreads);
int64_t sch_contract_busiest(int64_t n, int64_t nr, int64_t nbatch, int64_t q, int nthreads);
int64_t sch_contract_run_rows(int64_t n, int64_t nr, int64_t q);

/* readable schedule text ("mr=4 nr=4 nc=0 mc=64 arith=f32") and back (1: ok) */
void sch_contract_sched_print(const sch_contract_sched *s, char *buf, size_t cap);
int sch_contract_sched_parse(const char *text, sch_contract_sched *s);

#endif
