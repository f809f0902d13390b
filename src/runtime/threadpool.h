/* threadpool.h — a persistent pool of worker threads that split a range of
 * work items [0, n) into contiguous pieces, one per thread; the calling thread
 * does the first piece itself. Kernels are launched through it.
 *
 * Invariants: one job at a time per pool (rt_pool_run is not reentrant and
 * must be called from one thread at a time); between jobs workers wait by
 * yielding spins for about 0.1 ms, then sleep on a condition variable; they
 * exit only in rt_pool_free.
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
/* run fn over [0, n) split across the pool (at most `max_parts` pieces; <= 0
 * means one per thread); returns the OR of the pieces' results */
int rt_pool_run(rt_pool *p, int64_t n, int max_parts, rt_task_fn fn, void *ctx);

#endif
