/* space_generic.h — the schedule space of generic MAP / REDUCE kernels
 * (DESIGN.md section 5; the knobs are sch_generic_sched in loop.h), its cost
 * model, the schedule's text form, and the kernel key and shape bucket its
 * tuning records are filed under. Device-free: src/runtime/tune_generic.c
 * measures. Invariant: the default schedule (all zero) is always point 0 of
 * the space, and enumeration order is fixed (the search is deterministic). */
#ifndef KILN_SCHED_SPACE_GENERIC_H
#define KILN_SCHED_SPACE_GENERIC_H

#include <stddef.h>
#include <stdint.h>

#include "loop.h"

/* what the space and the cost model know about one kernel at one size */
typedef struct sch_generic_shape {
    int isa_lanes;        /* widest vector the ISA allows: 0 (scalar ISA), 8 or 16 */
    int map_vec, red_vec; /* the vector paths apply to its MAP rows / to a reduction (emit_c.c) */
    int has_sum, has_max; /* among the vectorisable reductions */
    int64_t outer, inner; /* product of all dims but the last; the last dim */
    int64_t rn;           /* elements of the kernel's own reduction per point (1 for a MAP) */
    int64_t stage_rn;     /* elements reduced per row by row stages */
    double bytes;         /* bytes read and written once */
    double ops;           /* expression operations per element of the innermost work */
    int nthreads;
    int parallel;         /* 0: the runtime launches it serially (chunk is moot) */
} sch_generic_shape;

/* the largest kernel (bytes read and written) whose serial twin is in the
 * space. A larger kernel's inputs were written by a launch split across
 * the threads, so a serial run reads half of them from the other core's
 * cache, which a search timing the kernel alone never sees: on an Intel
 * Xeon (2 threads) Inception v2's 40 serial winners (0.4-3 MB, 5-30%
 * faster alone) made the model 1.4 ms slower (15.7 vs 14.3 ms a run) */
#define SCH_SERIAL_MAX_BYTES (256.0 * 1024)

/* the schedule as its lanes really are on this ISA: vec 0 -> the ISA width,
 * 16 -> 8 on AVX2, knobs that do not apply to the kernel zeroed. Two
 * schedules with the same effective form emit the same code. */
sch_generic_sched sch_generic_effective(const sch_generic_shape *sh, const sch_generic_sched *s);
int sch_generic_same(const sch_generic_sched *a, const sch_generic_sched *b);

/* every distinct point (by effective form), the default first; returns the
 * count (writes at most cap; out NULL: just count) */
int sch_space_generic(const sch_generic_shape *sh, sch_generic_sched *out, int cap);

/* the cost model's estimate of one run, seconds (see space_generic.c) */
double sch_cost_generic(const sch_generic_shape *sh, const sch_generic_sched *s);

/* tie order: 1 when a is simpler than b (the default is the simplest) */
int sch_generic_simpler(const sch_generic_sched *a, const sch_generic_sched *b);
int sch_generic_complexity(const sch_generic_sched *s);

/* "vec=V nacc=A unroll=U chunk=C"; parse returns 1 on a valid text, 0 otherwise */
void sch_generic_sched_print(const sch_generic_sched *s, char *buf, size_t cap);
int sch_generic_sched_parse(const char *text, sch_generic_sched *s);

/* the tuning key of kernel k: "gen-" + 16 hex digits of a hash of its printed
 * loop IR (sch_kernel_print) with kernel, node and buffer numbers and input
 * names masked, so the same computation in another program (another layer)
 * shares its record; the dtypes are part of the printed text */
void sch_generic_key(const sch_program *p, int32_t k, char *key, size_t cap);

/* the shape bucket: every dim, the reduce dim and the stages' reduce dims
 * evaluated with values (NULL: only when they are constants), and the thread
 * count: "g:4x4096,r=1,s=4096,t=2". Returns 0 when a size cannot be evaluated. */
int sch_generic_bucket(const sch_program *p, int32_t k, const int64_t *values, int nthreads, char *buf, size_t cap);

#endif
