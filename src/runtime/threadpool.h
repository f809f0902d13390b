/* threadpool.h — a persistent pool of worker threads that split a range of
 * work items [0, n) into contiguous pieces, one per thread (or more, claimed
 * in order: rt_pool_run_claimed); the calling thread does the first piece
 * itself. Kernels are launched through it.
 *
 * Invariants: one job at a time per pool (rt_pool_run is not reentrant and
 * must be called from one thread at a time); between jobs workers wait by
 * yielding spins for about 0.1 ms (without a limit while held), then sleep
 * on a condition variable; they exit only in rt_pool_free.
 */
#ifndef KILN_RUNTIME_THREADPOOL_H
#define KILN_RUNTIME_THREADPOOL_H

#include <stdint.h>

typedef int (*rt_task_fn)(void *ctx, int64_t lo, int64_t hi);
typedef struct rt_pool rt_pool;

/* nthreads <= 0: all online cores. Never NULL (falls back to 1 thread when
 * threads cannot be created). */
rt_pool *rt_pool_new(int nthreads);
void rt_pool_free(rt_pool *p);
int rt_pool_threads(const rt_pool *p);
/* on: 1 to hold, 0 to release (counted; NULL is a no-op). While held the
 * workers spin between jobs however long the caller runs alone, instead of
 * sleeping after about 0.1 ms (a program holds its pool for a run) */
void rt_pool_hold(rt_pool *p, int on);
/* run fn over [0, n) split across the pool (at most `max_parts` pieces; <= 0
 * means one per thread); returns the OR of the pieces' results */
int rt_pool_run(rt_pool *p, int64_t n, int max_parts, rt_task_fn fn, void *ctx);

/* the same over `pieces` contiguous pieces of [0, n) that every thread,
 * the caller included, claims in order until none is left: a thread that
 * starts late (a busy core, a wake-up) takes fewer, instead of the whole
 * job waiting for its fixed share. Which thread runs a piece may differ
 * from run to run, so fn's results must not depend on it. */
int rt_pool_run_claimed(rt_pool *p, int64_t n, int pieces, rt_task_fn fn, void *ctx);

/* what the jobs split across threads did since the last reset (the
 * profile's thread line, profile.c): jobs; worker starts (one per worker
 * and job), those whose worker had gone to sleep and was woken through the
 * condition variable, and the nanoseconds from the job's publication to
 * them; claimed jobs a worker came to after they were closed (missed);
 * pieces run by workers and (claimed jobs) by the caller; nanoseconds
 * of the workers' work, of the caller's own, and of the caller's wait for
 * the workers after it */
typedef struct rt_pool_stats {
    int64_t jobs, starts, woken, lag_ns, missed;
    int64_t pieces, caller_pieces;
    int64_t worker_ns, caller_ns, wait_ns;
} rt_pool_stats;
void rt_pool_stats_get(const rt_pool *p, rt_pool_stats *out);
void rt_pool_stats_reset(rt_pool *p);

#endif
