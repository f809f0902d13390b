/* readbw.c — the read-bandwidth probe of `kiln device` (issue 37: a roofline
 * that tells the truth).
 *
 * It reads memory the way the best decode kernel could: the widest vector
 * loads the CPU has (AVX-512 and AVX2 both where both exist, taking turns,
 * the faster counting; else AVX2, else 16-byte vectors; chosen at run time,
 * the x86 loops built with target attributes so kiln still runs on a CPU
 * without them), an independent accumulator per load of a step so that no
 * add chain limits the loads, each thread's part read as RB_STREAMS streams
 * (as a decode kernel reads several weight rows at once), from memory of the
 * kind the runtime keeps weights in (rt_arena: 2 MiB pages, repack.h), every
 * thread on its own contiguous part, best of several timed passes. A pass is
 * timed from the first thread's start to the last thread's end, the threads
 * starting together once all are awake: a worker's wake-up (a futex wake,
 * milliseconds when its core is busy on a loaded VM) is not timed, and no
 * thread reads alone before the others start.
 *
 * The old probe summed doubles in two dependent add chains that the compiler
 * turned into 128-bit loads: it measured its loop, not the memory (1.7x low
 * on an Intel Xeon). tests/unit/test_device.c times an independent loop of
 * another shape in the same run and fails when this one is >10% slower.
 *
 * Invariants: a part is a multiple of RB_STEP bytes times RB_STREAMS, so the
 * loops have no tails; the sums are stored where the caller can see them, so
 * no load is dropped; the buffer is written before it is read (an untouched
 * anonymous page is the shared zero page and reads from cache).
 */
#define _DEFAULT_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "base.h"
#include "probe.h"
#include "repack.h"
#include "threadpool.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define RB_X86 1
#else
#define RB_X86 0
#endif

#define RB_STEP 512   /* bytes of one stream per step: 8 lines of 64 bytes */
#ifndef RB_STREAMS
#define RB_STREAMS 2 /* interleaved streams per thread */
#endif
#define RB_ALIGN ((size_t)64 << 10)

struct rt_read_buf {
    rt_arena arena;
    uint8_t *data;
    size_t bytes;
};

/* last-level cache in bytes from /sys (the largest data or unified cache of
 * cpu0), 0 when unknown */
static size_t llc_bytes(void) {
    size_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[128], buf[64] = "", type[32] = "";
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fscanf(f, "%31s", type) != 1) type[0] = 0;
        fclose(f);
        if (strcmp(type, "Instruction") == 0) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (!f) continue;
        if (fgets(buf, sizeof buf, f)) {
            long v = strtol(buf, NULL, 10);
            size_t b = v > 0 ? (size_t)v << 10 : 0;
            if (strchr(buf, 'M')) b <<= 10;
            if (b > best) best = b;
        }
        fclose(f);
    }
    return best;
}

void rt_read_sizes(size_t *dram_bytes, size_t *cache_bytes) {
    size_t llc = llc_bytes();
    size_t dram = (size_t)256 << 20;
    if (llc && 4 * llc > dram) dram = 4 * llc;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0) {
        size_t quarter = (size_t)pages / 4 * (size_t)psz;
        if (dram > quarter && quarter >= ((size_t)64 << 20)) dram = quarter;
    }
    if (dram > ((size_t)4 << 30)) dram = (size_t)4 << 30;
    dram = dram / RB_ALIGN * RB_ALIGN;
    size_t cache = llc ? llc / 2 : (size_t)4 << 20;
    if (cache < RB_ALIGN) cache = RB_ALIGN;
    cache = cache / RB_ALIGN * RB_ALIGN;
    if (dram_bytes) *dram_bytes = dram;
    if (cache_bytes) *cache_bytes = cache;
}

/* ---- the loops ---------------------------------------------------------- */

/* each reads `bytes` (a multiple of RB_STEP * RB_STREAMS) at p as RB_STREAMS
 * streams of bytes / RB_STREAMS, one step of each in turn, and returns a sum
 * of what it read */
typedef uint64_t (*rb_loop)(const uint8_t *p, size_t bytes);

#if RB_X86
__attribute__((target("avx512f"), no_sanitize_address)) static uint64_t rb_avx512(const uint8_t *p, size_t bytes) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    const size_t per = bytes / RB_STREAMS;
    for (size_t i = 0; i < per; i += RB_STEP)
        for (int s = 0; s < RB_STREAMS; s++) {
            const uint8_t *q = p + (size_t)s * per + i;
            a0 = _mm512_add_epi64(a0, _mm512_load_si512((const void *)(q + 0)));
            a1 = _mm512_add_epi64(a1, _mm512_load_si512((const void *)(q + 64)));
            a2 = _mm512_add_epi64(a2, _mm512_load_si512((const void *)(q + 128)));
            a3 = _mm512_add_epi64(a3, _mm512_load_si512((const void *)(q + 192)));
            a4 = _mm512_add_epi64(a4, _mm512_load_si512((const void *)(q + 256)));
            a5 = _mm512_add_epi64(a5, _mm512_load_si512((const void *)(q + 320)));
            a6 = _mm512_add_epi64(a6, _mm512_load_si512((const void *)(q + 384)));
            a7 = _mm512_add_epi64(a7, _mm512_load_si512((const void *)(q + 448)));
        }
    a0 = _mm512_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)),
                          _mm512_add_epi64(_mm512_add_epi64(a4, a5), _mm512_add_epi64(a6, a7)));
    return (uint64_t)_mm512_reduce_add_epi64(a0);
}

/* 256-bit loads, one per accumulator per step, in address order: with
 * eight accumulators taking two loads each, gcc read the upper half of each
 * step first, and that ran at half the speed from DRAM on Zen 4 */
#define RB_L256(k) a##k = _mm256_add_epi64(a##k, _mm256_load_si256((const __m256i *)(const void *)(q + 32 * (k))))
__attribute__((target("avx2"), no_sanitize_address)) static uint64_t rb_avx2(const uint8_t *p, size_t bytes) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    __m256i a8 = a0, a9 = a0, a10 = a0, a11 = a0, a12 = a0, a13 = a0, a14 = a0, a15 = a0;
    const size_t per = bytes / RB_STREAMS;
    for (size_t i = 0; i < per; i += RB_STEP)
        for (int s = 0; s < RB_STREAMS; s++) {
            const uint8_t *q = p + (size_t)s * per + i;
            RB_L256(0);
            RB_L256(1);
            RB_L256(2);
            RB_L256(3);
            RB_L256(4);
            RB_L256(5);
            RB_L256(6);
            RB_L256(7);
            RB_L256(8);
            RB_L256(9);
            RB_L256(10);
            RB_L256(11);
            RB_L256(12);
            RB_L256(13);
            RB_L256(14);
            RB_L256(15);
        }
    a0 = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)),
                          _mm256_add_epi64(_mm256_add_epi64(a4, a5), _mm256_add_epi64(a6, a7)));
    a8 = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(a8, a9), _mm256_add_epi64(a10, a11)),
                          _mm256_add_epi64(_mm256_add_epi64(a12, a13), _mm256_add_epi64(a14, a15)));
    a0 = _mm256_add_epi64(a0, a8);
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)(void *)lanes, a0);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#undef RB_L256
#endif

/* any CPU: 16-byte vectors (NEON, SSE2), copied in with memcpy (no aliasing
 * question; compilers make plain loads of it) */
typedef uint64_t rb_v2 __attribute__((vector_size(16)));
__attribute__((no_sanitize_address)) static uint64_t rb_v16(const uint8_t *p, size_t bytes) {
    rb_v2 a[8] = {{0}};
    const size_t per = bytes / RB_STREAMS;
    for (size_t i = 0; i < per; i += RB_STEP)
        for (int s = 0; s < RB_STREAMS; s++) {
            const uint8_t *q = p + (size_t)s * per + i;
            for (int h = 0; h < RB_STEP; h += 128)
                for (int k = 0; k < 8; k++) {
                    rb_v2 v;
                    memcpy(&v, q + h + 16 * k, sizeof v);
                    a[k] += v;
                }
        }
    rb_v2 t = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    return t[0] + t[1];
}

/* the loops this CPU can run, widest first: on Zen 4 the 256-bit loop
 * reads 5-10% faster than the 512-bit one (a 512-bit load is two 256-bit
 * operations there), so both are timed and the faster counts */
typedef struct rb_cand {
    rb_loop loop;
    const char *name;
} rb_cand;

static int candidates(rb_cand out[3]) {
    int n = 0;
#if RB_X86
    if (rt_cpu_has("avx512f")) out[n++] = (rb_cand){rb_avx512, "avx512"};
    if (rt_cpu_has("avx2")) out[n++] = (rb_cand){rb_avx2, "avx2"};
#endif
    if (n == 0) out[n++] = (rb_cand){rb_v16, "16-byte"};
    return n;
}

const char *rt_read_loop(void) {
    rb_cand c[3];
    int n = candidates(c);
    if (n == 2) return "avx512 (64-byte loads, 8 accumulators) and avx2 (32-byte loads, 16 accumulators), the faster; "
                       "2 streams per thread";
    if (c[0].loop == rb_v16) return "16-byte vector loads, 8 accumulators, 2 streams per thread";
    return "avx2: 32-byte loads, 16 accumulators, 2 streams per thread";
}

/* ---- buffers and threads ------------------------------------------------ */

rt_read_buf *rt_read_buf_new(size_t bytes) {
    if (bytes == 0 || bytes % RB_ALIGN) return NULL;
    rt_read_buf *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->data = rt_arena_alloc(&b->arena, bytes);
    if (!b->data) {
        free(b);
        return NULL;
    }
    b->bytes = bytes;
    /* written once, so that every page is backed: 8-byte words that are
     * small normal doubles too (0..7), so a loop that adds them as doubles
     * (the old probe, timed beside this one by the test) meets no denormal */
    double *w = (double *)(void *)b->data;
    for (size_t i = 0; i < bytes / 8; i++) w[i] = (double)(i & 7);
    return b;
}

void rt_read_buf_free(rt_read_buf *b) {
    if (!b) return;
    rt_arena_free(&b->arena);
    free(b);
}

void *rt_read_buf_data(rt_read_buf *b) { return b ? b->data : NULL; }

typedef struct rb_ctx {
    const uint8_t *data;
    size_t part; /* bytes per thread */
    int sweeps, threads;
    rb_loop loop;
    int arrived;              /* threads at the start line of this run */
    double start[64], end[64]; /* each thread's own clock */
    uint64_t sums[64];
} rb_ctx;

/* one thread's part: it waits (spinning) until every thread of the run has
 * arrived, so that a worker's wake-up is not timed, then reads its part
 * `sweeps` times between its own two clock readings */
static int rb_piece(void *ctx, int64_t lo, int64_t hi) {
    rb_ctx *c = ctx;
    __atomic_add_fetch(&c->arrived, (int)(hi - lo), __ATOMIC_ACQ_REL);
    while (__atomic_load_n(&c->arrived, __ATOMIC_ACQUIRE) < c->threads) sched_yield();
    for (int64_t t = lo; t < hi; t++) {
        const uint8_t *p = c->data + (size_t)t * c->part;
        uint64_t s = 0;
        c->start[t & 63] = kiln_now_s();
        for (int r = 0; r < c->sweeps; r++) s += c->loop(p, c->part);
        c->end[t & 63] = kiln_now_s();
        c->sums[t & 63] += s;
    }
    return 0;
}

/* seconds of one run: from the first thread's start to the last one's end */
static double rb_run(rt_pool *pool, rb_ctx *c) {
    c->arrived = 0;
    rt_pool_run(pool, c->threads, c->threads, rb_piece, c);
    double t0 = c->start[0], t1 = c->end[0];
    for (int t = 1; t < c->threads; t++) {
        if (c->start[t] < t0) t0 = c->start[t];
        if (c->end[t] > t1) t1 = c->end[t];
    }
    return t1 - t0;
}

double rt_read_bw(rt_read_buf *b, size_t bytes, int threads, int passes, double min_seconds, const char **loop) {
    if (loop) *loop = "";
    if (!b || threads < 1 || threads > 64 || passes < 1 || bytes > b->bytes) return 0;
    const size_t unit = (size_t)RB_STEP * RB_STREAMS;
    size_t part = bytes / (size_t)threads / unit * unit;
    if (part == 0) return 0;
    rb_cand cand[3];
    int nc = candidates(cand);
    rb_ctx c[3];
    double best[3];
    rt_pool *pool = rt_pool_new(threads);
    /* warm-up per loop: pages into the TLB, the threads awake, a cache-sized
     * part into the cache; its time sets the sweeps per timed run */
    for (int k = 0; k < nc; k++) {
        memset(&c[k], 0, sizeof c[k]);
        c[k].data = b->data;
        c[k].part = part;
        c[k].sweeps = 1;
        c[k].loop = cand[k].loop;
        c[k].threads = threads;
        best[k] = 1e30;
        double one = rb_run(pool, &c[k]);
        if (one > 0 && one < min_seconds) {
            double sw = min_seconds / one;
            c[k].sweeps = sw > 100000 ? 100000 : (int)sw + 1;
        }
    }
    /* the loops take turns, so that both see the same machine */
    for (int r = 0; r < passes; r++)
        for (int k = 0; k < nc; k++) {
            double dt = rb_run(pool, &c[k]);
            if (dt < best[k]) best[k] = dt;
        }
    rt_pool_free(pool);
    double gbs = 0;
    for (int k = 0; k < nc; k++) {
        double v = best[k] > 0 && best[k] < 1e30 ? (double)part * (double)threads * c[k].sweeps / best[k] / 1e9 : 0;
        if (v > gbs) {
            gbs = v;
            if (loop) *loop = cand[k].name;
        }
    }
    return gbs;
}
