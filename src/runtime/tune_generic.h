/* tune_generic.h — the in-place schedule search of generic MAP / REDUCE
 * kernels (tune_generic.c; the space and cost model: src/sched/space_generic.h).
 *
 * Per program, an rt_gtune_state knows which kernels may be searched in
 * place (idempotent ones only: never SCATTER, never a kernel whose output
 * is a state or input buffer or is read by the kernel itself, never a
 * contraction), their tuning keys, and which are settled. A kernel is
 * settled once — by an exact DB record at compile time (constant sizes), or
 * at its first launch with a search budget (a DB record for that bucket, or
 * a search) — and keeps that one schedule (sch_kernel.gsched) afterwards. */
#ifndef KILN_RUNTIME_TUNE_GENERIC_H
#define KILN_RUNTIME_TUNE_GENERIC_H

#include "backend.h"
#include "kiln_compile.h"
#include "space_generic.h"

typedef struct rt_gtune_state rt_gtune_state;

/* opt: the program's options (tunedb_off, tune_verbose, gtune_inject_wrong) */
rt_gtune_state *rt_gtune_new(const sch_program *sp, cg_isa isa, int nthreads, const kiln_compile_options *opt);
void rt_gtune_free(rt_gtune_state *st);

/* compile time: exact records of this fingerprint for kernels whose sizes
 * are constants are applied (gsched set, kernel settled). *fingerprint is
 * filled (malloc'd) when NULL and a lookup is needed. The option
 * tunedb_off (KILN_TUNEDB_OFF=1) skips it. Returns how many kernels took a record. */
int rt_gtune_apply_db(rt_gtune_state *st, sch_program *sp, char **fingerprint);

/* 1 when kernel k may be searched in place and is not settled */
int rt_gtune_wanted(const rt_gtune_state *st, int32_t k);
/* kernel k's schedule is final as it is (a search plan passed it over) */
void rt_gtune_settle(rt_gtune_state *st, int32_t k);
/* kernel k's tuning key ("" when it is not searchable): kernels with one
 * key are settled together by one search */
const char *rt_gtune_key(const rt_gtune_state *st, int32_t k);

/* the launch of a generic kernel: the runtime's heuristic split (chunk 0 =
 * one chunk per row) replaced by the schedule's chunk when it has one */
void rt_gtune_split(const sch_kernel *K, int64_t outer, int64_t inner, int serial, int64_t *chunk,
                    int64_t *items);

typedef struct rt_gtune_job {
    sch_program *sp;
    int32_t kernel;
    const rt_backend *be;
    rt_pool *pool;
    cg_isa isa;
    void *const *bufs;     /* the program's buffers, bound for this run (inputs ready) */
    const int64_t *values; /* the sym values of this run */
    const size_t *bytes;   /* per buffer */
    int64_t outer, inner;  /* the launch: rows x last dim */
    int64_t chunk, items;  /* the runtime's heuristic split */
    int64_t flags;
    int serial;
    const char *fingerprint;
    double budget_s;       /* for this kernel */
    int inject_wrong;      /* tests: candidate i-1 (0: the default) is treated as wrong; 0 none */
} rt_gtune_job;

typedef struct rt_gtune_result {
    rt_kernel_fn fn;   /* the winner for this launch (NULL: keep the program's function) */
    rt_module *mod;    /* holds fn: the caller frees it after the launch */
    int changed;       /* some kernel's gsched changed: re-emit the program */
    int from_db;       /* settled by a record, nothing measured */
    int tried, rejected, space;
    double best_s, base_s, seconds;
    sch_generic_sched winner;
} rt_gtune_result;

/* settle kernel job->kernel now: a DB record for its bucket, else a search
 * on the program's buffers (outputs into scratch memory). Every tunable
 * kernel with the same key and bucket takes the result. A failed search
 * settles the kernel with its current schedule and returns the error. */
kiln_status rt_gtune_kernel(rt_gtune_state *st, const rt_gtune_job *job, rt_gtune_result *res, char *err,
                            size_t errcap);

#endif
