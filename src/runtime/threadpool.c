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
 * on a virtual machine — more than a small kernel's whole work. While the
 * pool is held (rt_pool_hold: a program's run) an idle worker spins on
 * whatever the caller does alone (a kernel kept on its thread, a host
 * step): Inception v2 at 2 threads woke a sleeping worker at 17% of its
 * launches.
 * No wake-up is lost: a sleeper registers itself (`sleepers`) and re-checks
 * the generation under the mutex, and the caller, after bumping the
 * generation, takes the mutex before deciding whether to broadcast; likewise
 * the last worker to finish signals `done` under the mutex that the waiting
 * caller re-checks `pending` under.
 *
 * A claimed job (rt_pool_run_claimed) has more pieces than threads; every
 * thread, the caller first, takes the next with an atomic increment of
 * `claim` until none is left, so the pieces run in order of claims and a
 * late thread simply takes fewer. The counters (`stats`) are added by the
 * workers with atomics and read by the caller between jobs.
 */
#include "threadpool.h"

#include <pthread.h>
#include <string.h>
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
    int hold;            /* atomic: rt_pool_hold's count; while > 0 idle workers spin without a limit */
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
    int dyn;             /* the current job's pieces are claimed in order (rt_pool_run_claimed) */
    int64_t claim;       /* atomic: the next piece to claim */
    uint64_t gate;       /* atomic: gate_of(generation) | 2 x workers entered | open */
    int exited;          /* atomic: workers done with a claimed job */
    int64_t pub_ns;      /* when the current job was published (written before generation) */
    rt_pool_stats stats; /* workers add with atomics, the caller between jobs */
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

/* spin until *word != old (or the pool stops), for at most RT_SPIN_NS
 * (counted from when *hold was last seen 0: a held pool's workers do not
 * sleep); returns 1 when it changed */
static int spin_while_eq_u64(const uint64_t *word, uint64_t old, const int *stop, const int *hold) {
    int64_t t0 = kiln_now_ns();
    for (int i = 0;; i++) {
        if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != old || __atomic_load_n(stop, __ATOMIC_ACQUIRE)) return 1;
        cpu_relax();
        if ((i & 15) == 15) {
            int64_t t = kiln_now_ns();
            if (__atomic_load_n(hold, __ATOMIC_ACQUIRE) > 0) t0 = t;
            else if (t - t0 > RT_SPIN_NS) return 0;
        }
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

/* the gate of job g (the low RT_GATE_SHIFT bits of the word: open, then
 * the count of workers that entered, times 2): a worker enters only while
 * the job it saw published is the gate's and open */
#define RT_GATE_SHIFT 20
static uint64_t gate_of(uint64_t g) { return g << RT_GATE_SHIFT; }
static int enter(rt_pool *p, uint64_t g) {
    uint64_t v = __atomic_load_n(&p->gate, __ATOMIC_ACQUIRE);
    for (;;) {
        if ((v >> RT_GATE_SHIFT) != (gate_of(g) >> RT_GATE_SHIFT) || !(v & 1)) return 0;
        if (__atomic_compare_exchange_n(&p->gate, &v, v + 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 1;
    }
}

/* rt_pool_run_claimed's loop, on every thread: the next unclaimed piece
 * until none is left; counts the pieces run in *count (atomically) */
static int claim_pieces(rt_pool *p, rt_task_fn fn, void *ctx, int64_t *count) {
    int r = 0;
    for (;;) {
        int64_t j = __atomic_fetch_add(&p->claim, 1, __ATOMIC_RELAXED);
        if (j >= p->nparts) return r;
        int64_t lo, hi;
        piece(p->n, p->nparts, (int)j, &lo, &hi);
        if (hi > lo) r |= fn(ctx, lo, hi);
        __atomic_fetch_add(count, 1, __ATOMIC_RELAXED);
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
        int slept = 0;
        if (!spin_while_eq_u64(&p->generation, seen, &p->stop, &p->hold)) {
            slept = 1;
            pthread_mutex_lock(&p->mu);
            p->sleepers++;
            while (__atomic_load_n(&p->generation, __ATOMIC_ACQUIRE) == seen && !__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
                pthread_cond_wait(&p->work, &p->mu);
            p->sleepers--;
            pthread_mutex_unlock(&p->mu);
        }
        if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) break;
        seen = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE);
        if (!enter(p, seen)) {
            /* a claimed job its caller closed before this worker came: it
             * has nothing left and must not read the job's fields, which
             * the next job may be writing */
            __atomic_fetch_add(&p->stats.missed, 1, __ATOMIC_RELAXED);
            continue;
        }
        int64_t n = p->n;
        int parts = p->nparts;
        rt_task_fn fn = p->fn;
        void *ctx = p->ctx;
        int r = 0, dyn = p->dyn;
        int64_t t0 = kiln_now_ns();
        if (dyn) r = claim_pieces(p, fn, ctx, &p->stats.pieces);
        else if (index < parts) {
            int64_t lo, hi;
            piece(n, parts, index, &lo, &hi);
            if (hi > lo) r = fn(ctx, lo, hi);
            __atomic_fetch_add(&p->stats.pieces, 1, __ATOMIC_RELAXED);
        }
        if (dyn || index < parts) {
            __atomic_fetch_add(&p->stats.starts, 1, __ATOMIC_RELAXED);
            __atomic_fetch_add(&p->stats.woken, slept, __ATOMIC_RELAXED);
            __atomic_fetch_add(&p->stats.lag_ns, t0 - p->pub_ns, __ATOMIC_RELAXED);
            __atomic_fetch_add(&p->stats.worker_ns, kiln_now_ns() - t0, __ATOMIC_RELAXED);
        }
        if (r) __atomic_fetch_or(&p->result, r, __ATOMIC_RELAXED);
        /* done: a claimed job counts the workers out (`exited`, against the
         * entries its caller saw when it closed the gate), a fixed one down
         * (`pending`); the last one signals a waiting caller */
        int last = dyn ? (__atomic_add_fetch(&p->exited, 1, __ATOMIC_ACQ_REL), 1)
                       : __atomic_sub_fetch(&p->pending, 1, __ATOMIC_ACQ_REL) == 0;
        if (last) {
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

void rt_pool_hold(rt_pool *p, int on) {
    if (p && p->nthreads > 1) __atomic_add_fetch(&p->hold, on ? 1 : -1, __ATOMIC_RELEASE);
}

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

/* publish a job of `parts` pieces (claimed in order when dyn) and wake
 * the sleepers */
static void publish(rt_pool *p, int64_t n, int parts, int dyn, rt_task_fn fn, void *ctx) {
    p->n = n;
    p->nparts = parts;
    p->dyn = dyn;
    p->claim = 0;
    p->fn = fn;
    p->ctx = ctx;
    __atomic_store_n(&p->result, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->pending, p->nthreads - 1, __ATOMIC_RELAXED);
    __atomic_store_n(&p->exited, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->gate, gate_of(p->generation + 1) | 1, __ATOMIC_RELAXED);
    p->pub_ns = kiln_now_ns();
    __atomic_add_fetch(&p->generation, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&p->mu);
    if (p->sleepers) pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
}

/* a claimed job's workers still inside it, once its gate is closed */
static int inside(const rt_pool *p, int entered) { return entered - __atomic_load_n(&p->exited, __ATOMIC_ACQUIRE); }

/* after the caller's own part (from t0 to t1): wait for the workers (a
 * fixed job: all; a claimed one: those that entered before the caller
 * closed its gate, nothing being left to claim), count the job, return
 * every piece's result */
static int finish(rt_pool *p, int r, int64_t t0, int64_t t1) {
    if (p->dyn) {
        uint64_t v = __atomic_load_n(&p->gate, __ATOMIC_ACQUIRE);
        while (!__atomic_compare_exchange_n(&p->gate, &v, v & ~(uint64_t)1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        }
        int entered = (int)((v & ((UINT64_C(1) << RT_GATE_SHIFT) - 1)) >> 1);
        int64_t s0 = kiln_now_ns();
        while (inside(p, entered) > 0 && kiln_now_ns() - s0 < RT_SPIN_NS) cpu_relax();
        if (inside(p, entered) > 0) {
            pthread_mutex_lock(&p->mu);
            p->caller_waiting = 1;
            while (inside(p, entered) > 0) pthread_cond_wait(&p->done, &p->mu);
            p->caller_waiting = 0;
            pthread_mutex_unlock(&p->mu);
        }
    } else if (!spin_until_zero(&p->pending)) {
        pthread_mutex_lock(&p->mu);
        p->caller_waiting = 1;
        while (__atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) > 0) pthread_cond_wait(&p->done, &p->mu);
        p->caller_waiting = 0;
        pthread_mutex_unlock(&p->mu);
    }
    p->stats.jobs++;
    p->stats.caller_ns += t1 - t0;
    p->stats.wait_ns += kiln_now_ns() - t1;
    return r | __atomic_load_n(&p->result, __ATOMIC_ACQUIRE);
}

int rt_pool_run(rt_pool *p, int64_t n, int max_parts, rt_task_fn fn, void *ctx) {
    if (n <= 0) return 0;
    int parts = p->nthreads;
    if (max_parts > 0 && max_parts < parts) parts = max_parts;
    if ((int64_t)parts > n) parts = (int)n;
    if (parts <= 1) return fn(ctx, 0, n);
    publish(p, n, parts, 0, fn, ctx);
    int64_t lo, hi;
    piece(n, parts, 0, &lo, &hi);
    int64_t t0 = kiln_now_ns();
    int r = hi > lo ? fn(ctx, lo, hi) : 0;
    return finish(p, r, t0, kiln_now_ns());
}

int rt_pool_run_claimed(rt_pool *p, int64_t n, int pieces, rt_task_fn fn, void *ctx) {
    if (n <= 0) return 0;
    if ((int64_t)pieces > n) pieces = (int)n;
    if (p->nthreads <= 1 || pieces <= 1) return fn(ctx, 0, n);
    publish(p, n, pieces, 1, fn, ctx);
    int64_t t0 = kiln_now_ns();
    int r = claim_pieces(p, fn, ctx, &p->stats.caller_pieces);
    return finish(p, r, t0, kiln_now_ns());
}

/* between jobs (the caller's thread): every worker has added its piece */
void rt_pool_stats_get(const rt_pool *p, rt_pool_stats *out) {
    out->jobs = p->stats.jobs;
    out->pieces = __atomic_load_n(&p->stats.pieces, __ATOMIC_ACQUIRE);
    out->woken = __atomic_load_n(&p->stats.woken, __ATOMIC_ACQUIRE);
    out->starts = __atomic_load_n(&p->stats.starts, __ATOMIC_ACQUIRE);
    out->missed = __atomic_load_n(&p->stats.missed, __ATOMIC_ACQUIRE);
    out->lag_ns = __atomic_load_n(&p->stats.lag_ns, __ATOMIC_ACQUIRE);
    out->worker_ns = __atomic_load_n(&p->stats.worker_ns, __ATOMIC_ACQUIRE);
    out->caller_ns = p->stats.caller_ns;
    out->caller_pieces = p->stats.caller_pieces;
    out->wait_ns = p->stats.wait_ns;
}

void rt_pool_stats_reset(rt_pool *p) { memset(&p->stats, 0, sizeof p->stats); }
