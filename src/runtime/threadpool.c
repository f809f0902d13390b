/* threadpool.c — see threadpool.h.
 *
 * A job is published by bumping `generation` under the mutex; each worker
 * remembers the last generation it ran, so a spurious wake-up or a late
 * worker never runs a job twice. `pending` counts workers still busy with
 * the current job; the caller waits for it to reach zero, so ctx (usually on
 * the caller's stack) outlives every use.
 */
#include "threadpool.h"

#include <pthread.h>
#include <unistd.h>

#include "base.h"

#define RT_MAX_THREADS 256

struct rt_pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    uint64_t generation;
    int stop;
    int nthreads; /* including the caller */
    int nparts;
    int pending;
    int result;
    int64_t n;
    rt_task_fn fn;
    void *ctx;
    pthread_t th[RT_MAX_THREADS];
    int started;
};

typedef struct worker_arg {
    rt_pool *p;
    int index;
} worker_arg;


static void piece(int64_t n, int parts, int i, int64_t *lo, int64_t *hi) {
    *lo = n * i / parts;
    *hi = n * (i + 1) / parts;
}

static void *worker_main(void *arg) {
    rt_pool *p = ((worker_arg *)arg)->p;
    int index = ((worker_arg *)arg)->index;
    free(arg);
    /* every worker exists before the first job is published (rt_pool_new
     * returns only after creating them), so generation 0 is "nothing run
     * yet" even for a worker that is scheduled late */
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->generation == seen && !p->stop) pthread_cond_wait(&p->work, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        int64_t n = p->n;
        int parts = p->nparts;
        rt_task_fn fn = p->fn;
        void *ctx = p->ctx;
        pthread_mutex_unlock(&p->mu);
        int r = 0;
        if (index < parts) {
            int64_t lo, hi;
            piece(n, parts, index, &lo, &hi);
            if (hi > lo) r = fn(ctx, lo, hi);
        }
        pthread_mutex_lock(&p->mu);
        p->result |= r;
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

rt_pool *rt_pool_new(int nthreads) {
    rt_pool *p = kiln_xcalloc(1, sizeof *p);
    if (nthreads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = c > 0 ? (int)c : 1;
    }
    if (nthreads > RT_MAX_THREADS) nthreads = RT_MAX_THREADS;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    p->nthreads = 1;
    for (int i = 1; i < nthreads; i++) {
        worker_arg *a = kiln_xmalloc(sizeof *a);
        a->p = p;
        a->index = i;
        if (pthread_create(&p->th[p->started], NULL, worker_main, a) != 0) {
            free(a);
            break;
        }
        p->started++;
        p->nthreads++;
    }
    return p;
}

int rt_pool_threads(const rt_pool *p) { return p->nthreads; }

void rt_pool_free(rt_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    free(p);
}

int rt_pool_run(rt_pool *p, int64_t n, int max_parts, rt_task_fn fn, void *ctx) {
    if (n <= 0) return 0;
    int parts = p->nthreads;
    if (max_parts > 0 && max_parts < parts) parts = max_parts;
    if ((int64_t)parts > n) parts = (int)n;
    if (parts <= 1) return fn(ctx, 0, n);
    pthread_mutex_lock(&p->mu);
    p->n = n;
    p->nparts = parts;
    p->fn = fn;
    p->ctx = ctx;
    p->result = 0;
    p->pending = p->nthreads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    int64_t lo, hi;
    piece(n, parts, 0, &lo, &hi);
    int r = hi > lo ? fn(ctx, lo, hi) : 0;
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    r |= p->result;
    pthread_mutex_unlock(&p->mu);
    return r;
}
