/* test_threadpool.c — the pool's claimed jobs (rt_pool_run_claimed,
 * src/runtime/threadpool.c) and its counters, by what ran, never by time:
 * every item runs exactly once; a thread held in its first piece leaves
 * every other piece to the other thread (a fixed half each would wait for
 * it); claimed and fixed jobs in turn, a late worker skipping a closed
 * one, each item still once; the counters add up (jobs, pieces, worker
 * starts); a held pool's worker is never started from sleep. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base.h"
#include "check.h"
#include "threadpool.h"

enum { N = 1000, PIECES = 8 };

typedef struct job {
    int hits[N];          /* atomic: runs of each item */
    int done;             /* atomic: pieces finished */
    pthread_t held;       /* that thread */
    int held_set;         /* atomic */
    int per_thread[2];    /* pieces by the thread of piece 0 [0] and by the other [1] */
    int gave_up;          /* the hold waited out its bound: no other thread ran the rest */
} job;

/* piece [lo, hi): counts its items; the thread of the piece holding item 0
 * waits (bounded) until every other piece is done */
static int run_piece(void *ctx, int64_t lo, int64_t hi) {
    job *j = ctx;
    for (int64_t i = lo; i < hi; i++) __atomic_fetch_add(&j->hits[i], 1, __ATOMIC_RELAXED);
    if (lo == 0) {
        j->held = pthread_self();
        __atomic_store_n(&j->held_set, 1, __ATOMIC_RELEASE);
        int64_t t0 = kiln_now_ns();
        while (__atomic_load_n(&j->done, __ATOMIC_ACQUIRE) < PIECES - 1) {
            if (kiln_now_ns() - t0 > (int64_t)20000000000) { /* 20 s: a bound, not a timing */
                j->gave_up = 1;
                break;
            }
            sched_yield();
        }
    } else {
        while (!__atomic_load_n(&j->held_set, __ATOMIC_ACQUIRE)) sched_yield(); /* piece 0 is claimed first */
    }
    int mine = pthread_equal(pthread_self(), j->held) ? 0 : 1;
    __atomic_fetch_add(&j->per_thread[mine], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&j->done, 1, __ATOMIC_RELEASE);
    return 0;
}

static void test_claimed_pieces(void) {
    CASE_BEGIN("threadpool_claimed_pieces_go_to_the_free_thread");
    rt_pool *p = rt_pool_new(2);
    CHECK(rt_pool_threads(p) == 2, "%d threads", rt_pool_threads(p));
    job *j = calloc(1, sizeof *j);
    rt_pool_stats_reset(p);
    CHECK(rt_pool_run_claimed(p, N, PIECES, run_piece, j) == 0, "the job failed");
    int once = 1;
    for (int i = 0; i < N; i++) once &= j->hits[i] == 1;
    CHECK(once, "an item did not run exactly once");
    CHECK(!j->gave_up, "the held thread waited out its bound: nobody else took the other pieces");
    CHECK(j->per_thread[0] == 1 && j->per_thread[1] == PIECES - 1,
          "the held thread ran %d pieces and the other %d (want 1 and %d)", j->per_thread[0], j->per_thread[1],
          PIECES - 1);
    rt_pool_stats st;
    rt_pool_stats_get(p, &st);
    CHECK(st.jobs == 1 && st.starts == 1, "jobs %lld, worker starts %lld", (long long)st.jobs, (long long)st.starts);
    CHECK(st.pieces + st.caller_pieces == PIECES, "pieces: workers %lld + caller %lld", (long long)st.pieces,
          (long long)st.caller_pieces);
    free(j);
    rt_pool_free(p);
    CASE_END();
}

/* fewer items than pieces, and one thread: the job still covers every item */
static int count_items(void *ctx, int64_t lo, int64_t hi) {
    int *hits = ctx;
    for (int64_t i = lo; i < hi; i++) __atomic_fetch_add(&hits[i], 1, __ATOMIC_RELAXED);
    return 0;
}

static void test_claimed_edges(void) {
    CASE_BEGIN("threadpool_claimed_edges");
    for (int threads = 1; threads <= 2; threads++)
        for (int n = 1; n <= 9; n += 4) {
            rt_pool *p = rt_pool_new(threads);
            int hits[16] = {0};
            CHECK(rt_pool_run_claimed(p, n, PIECES, count_items, hits) == 0, "job failed");
            for (int i = 0; i < 16; i++)
                CHECK(hits[i] == (i < n), "%d threads, n %d: item %d ran %d times", threads, n, i, hits[i]);
            rt_pool_free(p);
        }
    CASE_END();
}

/* many short jobs, claimed and fixed in turn: a worker that comes to a
 * claimed job after its caller closed it (the caller ran every piece)
 * must skip it without touching the next job; every item of every job
 * runs exactly once, and no job hangs */
static void test_jobs_in_turn(void) {
    CASE_BEGIN("threadpool_claimed_and_fixed_jobs_in_turn");
    rt_pool *p = rt_pool_new(2);
    rt_pool_stats_reset(p);
    int bad = 0;
    enum { JOBS = 4000, ITEMS = 16 };
    for (int k = 0; k < JOBS && !bad; k++) {
        int hits[ITEMS] = {0};
        int r = k % 2 ? rt_pool_run(p, ITEMS, 0, count_items, hits) : rt_pool_run_claimed(p, ITEMS, PIECES, count_items, hits);
        for (int i = 0; i < ITEMS; i++) bad |= hits[i] != 1;
        bad |= r != 0;
        if (bad) CHECK(0, "job %d (%s): an item did not run exactly once", k, k % 2 ? "fixed" : "claimed");
    }
    rt_pool_stats st;
    rt_pool_stats_get(p, &st);
    CHECK(st.jobs == JOBS, "%lld jobs counted", (long long)st.jobs);
    /* each claimed job's 8 pieces were run by someone */
    CHECK(st.caller_pieces + st.pieces - JOBS / 2 == JOBS / 2 * PIECES,
          "pieces: caller %lld, workers %lld (of them %d fixed)", (long long)st.caller_pieces, (long long)st.pieces,
          JOBS / 2);
    rt_pool_free(p);
    CASE_END();
}

/* a held pool's worker never sleeps (rt_pool_hold: a program's run), however
 * long the caller works alone between jobs: 20 jobs each after 2 ms of the
 * caller's own (20 times the spin's limit) start no worker from sleep;
 * released, the worker may sleep again, and the jobs still run */
static void sleep_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_hold(void) {
    CASE_BEGIN("threadpool_held_workers_do_not_sleep");
    rt_pool *p = rt_pool_new(2);
    rt_pool_hold(p, 1);
    rt_pool_run(p, 2, 0, count_items, (int[2]){0, 0}); /* the worker is up and spinning */
    rt_pool_stats_reset(p);
    int bad = 0;
    for (int k = 0; k < 20; k++) {
        sleep_ms(2);
        int hits[2] = {0, 0};
        bad |= rt_pool_run(p, 2, 0, count_items, hits) != 0 || hits[0] != 1 || hits[1] != 1;
    }
    rt_pool_stats st;
    rt_pool_stats_get(p, &st);
    CHECK(!bad, "an item did not run exactly once");
    CHECK(st.starts == 20 && st.woken == 0, "held: %lld worker starts, %lld from sleep", (long long)st.starts,
          (long long)st.woken);
    rt_pool_hold(p, 0);
    for (int k = 0; k < 5; k++) {
        sleep_ms(2);
        int hits[2] = {0, 0};
        bad |= rt_pool_run(p, 2, 0, count_items, hits) != 0 || hits[0] != 1 || hits[1] != 1;
    }
    CHECK(!bad, "released: an item did not run exactly once");
    rt_pool_hold(NULL, 1); /* a no-op */
    rt_pool_free(p);
    CASE_END();
}

int main(void) {
    test_claimed_pieces();
    test_claimed_edges();
    test_jobs_in_turn();
    test_hold();
    return check_exit();
}
