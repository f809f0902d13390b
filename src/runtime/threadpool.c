/* threadpool.c — see threadpool.h.
 *
 * A job is published by writing its fields and then bumping `generation`
 * (release); each worker remembers the last generation it ran, so a spurious
 * wake-up or a late worker never runs a job twice. `pending` counts workers
 * still busy with the current job; the caller waits for it to reach zero, so
 * ctx (usually on the caller's stack) outlives every use, and the next job's
 * fields are written only after every worker has read the previous ones.
 *
 * Waiting spins first (about RT_SPIN_NS, with a pause per round) and only
 * then sleeps on a condition variable: the kernels of one run follow each
 * other within microseconds, and a futex wake-up costs tens of microseconds
 * on a virtual machine — more than a small kernel's whole work.
 * No wake-up is lost: a sleeper registers itself (`sleepers`) and re-checks
 * the generation under the mutex, and the caller, after bumping the
 * generation, takes the mutex before deciding whether to broadcast; likewise
 * the last worker to finish signals `done` under the mutex that the waiting
 * caller re-checks `pending` under.
 */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "base.h"

#define RT_MAX_THREADS 256
#define RT_SPIN_NS 100000

struct rt_pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    uint64_t generation; /* atomic */
    int stop;            /* atomic */
    int nthreads;        /* including the caller */
    int nparts;
    int pending; /* atomic */
    int result;  /* atomic */
    int sleepers;       /* under mu */
    int caller_waiting; /* under mu */
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

/* a spinning thread gives its core away to any other runnable thread: on a
 * machine with more runnable threads than cores, the thread being waited for
 * may well need this very core (a bare spin made every job wait out the
 * whole spin there), and when nothing else runs this returns at once */
static void cpu_relax(void) { sched_yield(); }

/* spin until *word != old (or the pool stops), for at most RT_SPIN_NS;
 * returns 1 when it changed */
static int spin_while_eq_u64(const uint64_t *word, uint64_t old, const int *stop) {
    int64_t t0 = kiln_now_ns();
    for (int i = 0;; i++) {
        if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != old || __atomic_load_n(stop, __ATOMIC_ACQUIRE)) return 1;
        cpu_relax();
        if ((i & 15) == 15 && kiln_now_ns() - t0 > RT_SPIN_NS) return 0;
    }
}

/* spin until *count reaches 0, for at most RT_SPIN_NS; returns 1 when it did */
static int spin_until_zero(const int *count) {
    int64_t t0 = kiln_now_ns();
    for (int i = 0;; i++) {
        if (__atomic_load_n(count, __ATOMIC_ACQUIRE) == 0) return 1;
        cpu_relax();
        if ((i & 15) == 15 && kiln_now_ns() - t0 > RT_SPIN_NS) return 0;
    }
}

static void *worker_main(void *arg) {
    rt_pool *p = ((worker_arg *)arg)->p;
    int index = ((worker_arg *)arg)->index;
    free(arg);
    /* every worker exists before the first job is published (rt_pool_new
     * returns only after creating them), so generation 0 is "nothing run
     * yet" even for a worker that is scheduled late */
    uint64_t seen = 0;
    for (;;) {
        if (!spin_while_eq_u64(&p->generation, seen, &p->stop)) {
            pthread_mutex_lock(&p->mu);
            p->sleepers++;
            while (__atomic_load_n(&p->generation, __ATOMIC_ACQUIRE) == seen && !__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
                pthread_cond_wait(&p->work, &p->mu);
            p->sleepers--;
            pthread_mutex_unlock(&p->mu);
        }
        if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) break;
        seen = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE);
        int64_t n = p->n;
        int parts = p->nparts;
        rt_task_fn fn = p->fn;
        void *ctx = p->ctx;
        int r = 0;
        if (index < parts) {
            int64_t lo, hi;
            piece(n, parts, index, &lo, &hi);
            if (hi > lo) r = fn(ctx, lo, hi);
        }
        if (r) __atomic_fetch_or(&p->result, r, __ATOMIC_RELAXED);
        if (__atomic_sub_fetch(&p->pending, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&p->mu);
            if (p->caller_waiting) pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
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
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
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
    p->n = n;
    p->nparts = parts;
    p->fn = fn;
    p->ctx = ctx;
    __atomic_store_n(&p->result, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->pending, p->nthreads - 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&p->generation, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&p->mu);
    if (p->sleepers) pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    int64_t lo, hi;
    piece(n, parts, 0, &lo, &hi);
    int r = hi > lo ? fn(ctx, lo, hi) : 0;
    if (!spin_until_zero(&p->pending)) {
        pthread_mutex_lock(&p->mu);
        p->caller_waiting = 1;
        while (__atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) > 0) pthread_cond_wait(&p->done, &p->mu);
        p->caller_waiting = 0;
        pthread_mutex_unlock(&p->mu);
    }
    return r | __atomic_load_n(&p->result, __ATOMIC_ACQUIRE);
}
