/* contract_split.h — a contraction's work items split along M as well as N
 * (contract_split.c).
 *
 * A contraction's items are (batch point, run of B rows), every item doing
 * all M rows of A (contract.h: sch_contract_runs). Where N is short, as in a
 * convolution's late layers (7x7 = 49 output points: one strip of 64), there
 * are fewer items than threads and the others wait. Such a launch may also cut
 * M into parts of whole mr-row tiles: items are then (batch point, M part, run
 * of B rows), item w's run w % q, its part (w / q) % P, its batch point
 * w / (q P), and each item computes its part's rows of its runs' columns,
 * exactly as the whole-M item computed them (same tiles, same sums).
 *
 * The kernel is told P in its flags (bits SCH_MPARTS_SHIFT and up; 0 means
 * 1); only kernels whose code takes it (cg_contract_msplit_ok) are given P > 1.
 */
#ifndef KILN_SCHED_CONTRACT_SPLIT_H
#define KILN_SCHED_CONTRACT_SPLIT_H

#include <stdint.h>

#include "loop.h"

#define SCH_MPARTS_SHIFT 16
#define SCH_MPARTS_MAX 16
#define SCH_MPART_MIN_ROWS 16 /* a part's least rows: above SCH_SMALL_M, the same bucket's code */

/* the first row of part i of P over m rows in whole tiles of mr rows */
int64_t sch_mpart_row(int64_t m, int mr, int64_t parts, int64_t i);

/* the work of the busiest of nthreads when nbatch * parts * q items are
 * dealt out as the pool does (contiguous, equal counts): per item, its
 * strips times (its rows + pack_rows, what packing its strips costs in
 * rows of work) */
double sch_mparts_busiest(int64_t m, int mr, int64_t n, int nr, int64_t nbatch, int64_t q, int64_t parts,
                          int nthreads, double pack_rows);

/* P for a launch of schedule s over m x n (nbatch batch points, q runs per
 * batch point, nthreads threads): the count from 1 to SCH_MPARTS_MAX, parts
 * of at least SCH_MPART_MIN_ROWS rows, whose busiest thread has the least
 * work (ties: the fewer parts); 1 on one thread or when m is small */
int64_t sch_contract_mparts(const sch_contract_sched *s, int64_t m, int64_t n, int64_t nbatch, int64_t q,
                            int nthreads);

#endif
