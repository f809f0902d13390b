/* tune.c — the measuring half of the schedule search (DESIGN.md section 5):
 * tune one contraction kernel in place, on the program's own buffers.
 *
 * The candidates: the default schedule, a seed from the tuning DB when one
 * came from another machine, and the cost model's best-ranked points of the
 * space (search.c, cost.c). They are emitted into one translation unit
 * together with the kernel as a generic loop nest (the reference), compiled
 * once, and run on the real inputs of the kernel into scratch outputs. A
 * candidate whose output differs from the reference beyond the f32
 * accumulation tolerance is disqualified and counted (outputs its
 * consumers multiply by zero, sch_contract.n_lim_off, are left out: a
 * candidate may store 0 there). Each survivor is
 * timed: one warm-up, then repeats until 5 runs or 30 ms, the minimum kept.
 * A prefill product of 4e9 multiply-adds or more is checked and timed on a
 * slice of B's rows and its winner confirmed once at full size (bounded
 * slices, below).
 * A second round measures the untried neighbours of the winner (mr, nr, mc,
 * nc one step away) while the budget lasts. In the large-M bucket a winner
 * other than the default then meets the default in a run-off, the two timed
 * alternately, and keeps its place only when still 3% faster. Times within
 * 3% of the best are ties, and the simpler schedule wins (search.c). The order of candidates
 * is fixed, so the search is deterministic apart from the timings.
 *
 * The winner's function is used straight from the candidates' module (kept
 * loaded by the program); the record goes to the tuning DB, so the next
 * compile emits the winner into the program itself with no measurement.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "base.h"
#include "contract.h"
#include "dtype.h"
#include "quant.h"
#include "emit_contract.h"
#include "family.h"
#include "probe.h"
#include "search.h"
#include "tune.h"
#include "tunedb.h"

#define TUNE_MAX_CAND 24

/* seconds one candidate costs (compile, check, timing), per bucket (0:
 * decode, 1: prefill), from the last rounds of this process; the first
 * guess is what a round of 10 took on a 2-core AMD EPYC Zen 4 for
 * gemma3-270m's contractions. Per bucket: a one-row candidate is timed in
 * microseconds to milliseconds, a prefill one in milliseconds to a second,
 * and one estimate for both made the output head's decode search (half a
 * decode step) afford 4 candidates after a prefill kernel's round */
static double cand_cost[2] = {0.25, 0.25};

static void learn_cand_cost(int bucket, double seconds, int n) {
    if (n <= 0 || !(seconds > 0)) return;
    double c = seconds / n, *cc = &cand_cost[bucket == 0 ? 0 : 1];
    *cc = 0.5 * *cc + 0.5 * c;
}

double rt_tune_min_search_s(int bucket) { return 2 * cand_cost[bucket == 0 ? 0 : 1]; }

typedef struct launch_args {
    const rt_backend *be;
    rt_pool *pool;
    void *const *bufs;
    const int64_t *values;
    int nthreads;
} launch_args;

/* ---- bounded slices ---------------------------------------------------------
 * A large prefill contraction (Llama-8B's 512 x 14336 x 4096: 0.1-1 s a run)
 * is checked and timed on a slice: its first rows of B only, the kernel
 * launched with f times as many runs per batch point (contract.h: each run
 * whole strips) and only the first f-th of them started, so every thread
 * still does its share. The slice's time, times n over the rows it covered,
 * ranks the candidates (the work is linear in B's rows; A's quantisation,
 * once per thread, is the part that does not scale: ~1% at that shape);
 * its outputs are checked at sampled points inside it. The winner then runs
 * once at full size and is checked there (slice_confirm). One batch point
 * only; decode is not sliced (a full run is milliseconds). */
static int64_t slice_factor(const rt_tune_job *job) {
    double macs = (double)job->shape.m * (double)job->shape.n * (double)job->shape.k;
    if (job->bucket != 1 || job->shape.nbatch != 1 || macs < 4e9) return 1;
    int64_t f = macs > 8e9 ? 8 : 4;
    while (f > 1 && job->shape.n / f < 512) f /= 2; /* a slice of at least 512 rows: 8 strips of 64 */
    return f;
}

/* the rows of B a run sliced by f covers for schedule s (all n when f = 1) */
static int64_t slice_rows(const rt_tune_job *job, const sch_contract_sched *s, int64_t f) {
    int64_t n = job->shape.n, nr = s->nr > 0 ? s->nr : 1, strips = (n + nr - 1) / nr;
    if (f <= 1) return n;
    int64_t rows = nr * (strips / f);
    return rows < n ? rows : n;
}

static int run_candidate_sliced(const launch_args *la, const rt_tune_job *job, rt_kernel_fn fn,
                                const sch_contract_sched *s, int64_t f) {
    int nthreads = s->serial ? 1 : la->nthreads; /* serial=1: the calling thread alone */
    int64_t chunk = sch_contract_runs(s, job->shape.n, job->shape.nbatch, nthreads); /* runs per batch point */
    int64_t items = job->shape.nbatch * chunk;
    int serial = nthreads <= 1;
    if (f > 1) return la->be->launch(la->pool, fn, la->bufs, la->values, chunk, chunk * f, 0, serial);
    return la->be->launch(la->pool, fn, la->bufs, la->values, items, chunk, 0, serial);
}

static int run_candidate(const launch_args *la, const rt_tune_job *job, rt_kernel_fn fn,
                         const sch_contract_sched *s) {
    return run_candidate_sliced(la, job, fn, s, 1);
}

/* In decode (the small-M bucket) a model streams every weight matrix from
 * memory once per token: the next layer's weights are never in cache. A
 * candidate timed again and again on the same B would run from cache and
 * win for the wrong reason, so B's lines are flushed before each timing.
 * Every thread of the launch flushes a slice (bufs[0]: B, vars: bytes,
 * slices): the pool's workers are then awake when the timed launch comes,
 * as they are between a model's kernels. A flush by the caller alone
 * (milliseconds for a few MB) outlasted the workers' spin, so each timed
 * 2-thread run began with a futex wake-up, tens of microseconds here.
 * CLFLUSHOPT where the CPU has it (vars[2] = 1): CLFLUSH is ordered with
 * every other CLFLUSH and took 417 ms for gemma3-270m's 179 MB output head
 * on an Intel Xeon without AMX (CLFLUSHOPT 7.5 ms), twice (B and its
 * repacked copy) before each of the ~20 timed runs of a candidate: 2.4 s a
 * candidate, and the first-run search measured 2 to 4 in its share. */
#if defined(__x86_64__) || defined(__i386__)
static int cpu_has_clflushopt(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 23 & 1u);
}
__attribute__((target("clflushopt"))) static void flush_lines_opt(const char *b, uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < to; i += 64) __builtin_ia32_clflushopt(b + i);
}
static void flush_lines(const char *b, uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < to; i += 64) __builtin_ia32_clflush(b + i);
}
#else
static int cpu_has_clflushopt(void) { return 0; }
#endif
static int flush_slices(void *const *bufs, const int64_t *vars, int64_t lo, int64_t hi, int64_t chunk, int64_t flags) {
    (void)chunk;
    (void)flags;
#if defined(__x86_64__) || defined(__i386__)
    const char *b = (const char *)bufs[0];
    const uint64_t bytes = (uint64_t)vars[0], n = (uint64_t)vars[1];
    for (int64_t w = lo; b && w < hi; w++) {
        uint64_t from = bytes * (uint64_t)w / n / 64 * 64, to = bytes * (uint64_t)(w + 1) / n;
        if (vars[2]) flush_lines_opt(b, from, to);
        else flush_lines(b, from, to);
    }
    __builtin_ia32_mfence();
#else
    (void)bufs;
    (void)vars;
    (void)lo;
    (void)hi;
#endif
    return 0;
}

static void flush_b(const launch_args *la, const rt_tune_job *job) {
    /* B, then its repacked copy (runtime/repack.h) where there is one */
    static int opt = -1; /* the CPU's answer does not change: a benign race writes the same value */
    if (opt < 0) opt = cpu_has_clflushopt();
    int32_t b = job->sp->kernels[job->kernel].contract->b_buf;
    for (int i = 0; i < 2; i++) {
        void *const bufs[1] = {job->bufs[i == 0 ? b : job->sp->nbufs + 1 + b]};
        const int64_t vars[3] = {(int64_t)(i == 0 ? job->b_bytes : job->rp_bytes), la->nthreads > 1 ? la->nthreads : 1, opt};
        if (bufs[0] && vars[0] > 0) la->be->launch(la->pool, flush_slices, bufs, vars, vars[1], 1, 0, la->nthreads <= 1);
    }
}

/* the candidates' copy of the program's bufs (3 nbufs + 1 slots: the
 * buffers, the scratch slot, the repacked copies and the pack copies,
 * exec.c) with the pack copies' slots empty: a candidate packs B itself
 * and never fills the program's copy */
static void **tune_bufs(const sch_program *sp, void *const *from) {
    size_t n = (size_t)sp->nbufs;
    void **bufs = kiln_xmalloc((3 * n + 1) * sizeof *bufs);
    memcpy(bufs, from, (2 * n + 1) * sizeof *bufs);
    memset(bufs + 2 * n + 1, 0, n * sizeof *bufs);
    return bufs;
}

/* a B of 4 or more times the last-level cache streams from memory at every
 * run whatever a flush does: the run before leaves only its last part
 * cached, evicted before the next run reaches it. Such a B is not flushed
 * (gemma3-270m's 179 MB output head and its 179 MB repacked copy: the
 * flushes cost more than the 9 ms runs they came before) */
static int streams_from_memory(const rt_tune_job *job) {
    static size_t half_llc; /* rt_read_sizes' cache size: half the last-level cache */
    if (!half_llc) {
        size_t dram;
        rt_read_sizes(&dram, &half_llc);
    }
    return job->b_bytes >= 8 * half_llc;
}

static double time_candidate(const launch_args *la, const rt_tune_job *job, rt_kernel_fn fn,
                             const sch_contract_sched *s) {
    /* the reference check just ran it: pages are mapped */
    double best = INFINITY, spent = 0;
    int64_t f = slice_factor(job);
    double scale = (double)job->shape.n / (double)slice_rows(job, s, f);
    /* anything past L1 counts: gemma3-270m's 0.9 MB layer matrices were
     * tuned warm (1 MiB was the line) and ran at 53% of the bandwidth in
     * decode, where a prefetch distance the warm runs could not see helped */
    int cold = job->bucket == 0 && job->b_bytes >= ((size_t)64 << 10) && !job->warm && !streams_from_memory(job);
    for (int r = 0; r < 5 && (r < 2 || spent < 0.03); r++) {
        if (cold) flush_b(la, job);
        double t0 = kiln_now_s();
        run_candidate_sliced(la, job, fn, s, f);
        double dt = (kiln_now_s() - t0) * scale;
        spent += dt;
        if (dt < best) best = dt;
    }
    return best;
}

/* A run-off between the default and a challenger that beat it in its own
 * round: the two timed alternately (default, challenger, three times, each
 * time_candidate's minimum), so a drift of the machine between the rounds
 * cannot decide (the 1024^3 GEMM at 2 threads once kept a schedule that
 * timed 3% faster in its round and ran 8% slower). Returns the challenger's
 * and the default's best times. */
static void runoff(const launch_args *la, const rt_tune_job *job, rt_kernel_fn fd, const sch_contract_sched *sd,
                   rt_kernel_fn fc, const sch_contract_sched *scd, double *tc, double *td) {
    /* into a scratch output, as the rounds run: the program's buffers stay
     * as they were */
    const sch_program *sp = job->sp;
    void **bufs = tune_bufs(sp, la->bufs);
    bufs[sp->kernels[job->kernel].out_buf] = kiln_xmalloc(job->out_bytes + 64);
    launch_args l2 = *la;
    l2.bufs = bufs;
    *tc = *td = INFINITY;
    for (int r = 0; r < 3; r++) {
        double a = time_candidate(&l2, job, fd, sd), b = time_candidate(&l2, job, fc, scd);
        if (a < *td) *td = a;
        if (b < *tc) *tc = b;
    }
    free(bufs[sp->kernels[job->kernel].out_buf]);
    free(bufs);
}

/* f32 arithmetic: the error of a K-term f32 sum. int8 arithmetic (an
 * approximation by design) is held to 3% of the largest output: a wrong
 * layout or scale errs by the outputs' own size */
static int close_to(const float *ref, const float *got, int64_t n, int64_t k, int approx) {
    double tol_abs = 2e-6 * (double)(k > 0 ? k : 1), big = 0;
    for (int64_t i = 0; approx && i < n; i++)
        if (isfinite(ref[i]) && fabs(ref[i]) > big) big = fabs(ref[i]);
    if (approx) tol_abs += 0.03 * big;
    for (int64_t i = 0; i < n; i++) {
        double a = ref[i], b = got[i];
        if (isnan(a) && isnan(b)) continue;
        if (!(fabs(a - b) <= tol_abs + 1e-4 * fabs(a))) return 0;
    }
    return 1;
}

/* every field: rp, serial and direct make other kernels of the same tile
 * (left out, a plain int8 tile equal to the default's repacked one but for
 * rp was taken for the default and never timed: Llama-1B-shaped q4_k decode
 * kept the rp tiles, 20-25% slower at 1 thread than the plain ones a long
 * tune found) */
static int same_sched(const sch_contract_sched *a, const sch_contract_sched *b) {
    return a->mr == b->mr && a->nr == b->nr && a->mc == b->mc && a->nc == b->nc && a->arith == b->arith &&
           a->form == b->form && a->kc == b->kc && a->pf == b->pf && a->pf2 == b->pf2 && a->rp == b->rp && a->serial == b->serial &&
           a->direct == b->direct;
}

static int in_list(const sch_contract_sched *list, int n, const sch_contract_sched *s) {
    for (int i = 0; i < n; i++)
        if (same_sched(&list[i], s)) return 1;
    return 0;
}

/* ---- the sampled reference ------------------------------------------------
 * For a large contraction the generic loop nest would take longer than the
 * search itself (a 2048^3 product: seconds). Then the reference is computed
 * on the host at a sample of output points straight from the kernel's own
 * index expressions (a naive dot product in double, B dequantised by the
 * quant module), always including the first and last rows and columns, and
 * every candidate must match it there. */

#define TUNE_SAMPLES 192

typedef struct sample_ref {
    int64_t off[TUNE_SAMPLES]; /* output offsets */
    double val[TUNE_SAMPLES];
    int n;
} sample_ref;

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int eval_at(const sch_program *sp, sym_id s, const int64_t *values, int64_t *out) {
    return sym_eval(sp->g->syms, s, values, NULL, out, NULL) == 0;
}

/* whether the output at loop coordinates vals (the kernel's variables set
 * in vals) is one the consumers multiply by zero (sch_contract.n_lim_off,
 * demand.c): a kernel may store 0 there, so it is not compared */
static int unused_output(const sch_program *sp, const sch_kernel *k, const int64_t *vals) {
    const sch_contract *c = k->contract;
    int64_t off, m, n;
    if (c->n_lim_off == SYM_NONE || c->mdim < 0 || !eval_at(sp, c->n_lim_off, vals, &off)) return 0;
    m = vals[sym_get(sp->g->syms, k->var[c->mdim])->c];
    n = vals[sym_get(sp->g->syms, k->var[c->ndim])->c];
    return n >= m + off;
}

/* the output offsets of the kernel's unused outputs (unused_output) as a
 * byte per element of out (nout), or NULL when it has none */
static uint8_t *unused_outputs(const rt_tune_job *job, int64_t nout) {
    const sch_program *sp = job->sp;
    const sch_kernel *k = &sp->kernels[job->kernel];
    if (k->contract->n_lim_off == SYM_NONE || k->ndim == 0) return NULL;
    uint32_t nv = sym_var_count(sp->g->syms);
    int64_t *vals = kiln_xcalloc((size_t)nv + 1, sizeof *vals), dims[KILN_MAX_DIMS], idx[KILN_MAX_DIMS] = {0};
    memcpy(vals, job->values, (size_t)nv * sizeof *vals);
    uint8_t *mask = kiln_xcalloc((size_t)nout + 1, 1);
    int ok = 1;
    for (int d = 0; d < k->ndim && ok; d++) ok = eval_at(sp, k->dim[d], vals, &dims[d]) && dims[d] > 0;
    while (ok) { /* every coordinate, last variable fastest */
        for (int d = 0; d < k->ndim; d++) vals[sym_get(sp->g->syms, k->var[d])->c] = idx[d];
        int64_t o;
        if (unused_output(sp, k, vals) && eval_at(sp, k->store_off, vals, &o) && o >= 0 && o < nout) mask[o] = 1;
        int d = k->ndim - 1;
        while (d >= 0 && ++idx[d] == dims[d]) idx[d--] = 0;
        if (d < 0) break;
    }
    free(vals);
    return mask;
}

/* n_lim > 0: only outputs of B's rows below n_lim (a sliced run's) */
static int sampled_reference(const rt_tune_job *job, sample_ref *sr, int64_t n_lim) {
    const sch_program *sp = job->sp;
    const sch_kernel *k = &sp->kernels[job->kernel];
    const sch_contract *c = k->contract;
    uint32_t nv = sym_var_count(sp->g->syms);
    int64_t *vals = kiln_xcalloc((size_t)nv + 1, sizeof *vals);
    memcpy(vals, job->values, (size_t)nv * sizeof *vals);
    int64_t dims[KILN_MAX_DIMS];
    for (int d = 0; d < k->ndim; d++)
        if (!eval_at(sp, k->dim[d], vals, &dims[d]) || dims[d] <= 0) {
            free(vals);
            return 0;
        }
    if (n_lim > 0 && n_lim < dims[c->ndim]) dims[c->ndim] = n_lim;
    const float *A = job->bufs[c->a_buf];
    const void *B = job->bufs[c->b_buf];
    kiln_dtype bt = sp->bufs[c->b_buf].dtype;
    int64_t K = job->shape.k, kstride = 1;
    if (c->b_kstride != SYM_NONE && !eval_at(sp, c->b_kstride, vals, &kstride)) {
        free(vals);
        return 0;
    }
    int blk = kiln_dtype_is_block(bt) ? (bt == KILN_Q4_K || bt == KILN_Q6_K ? 256 : 32) : 1;
    float *row = kiln_xmalloc(((size_t)K + 2 * (size_t)blk) * sizeof *row);
    uint64_t rng = 0x6b696c6e74756e65ull;
    sr->n = 0;
    for (int i = 0; sr->n < TUNE_SAMPLES && i < 8 * TUNE_SAMPLES; i++) {
        /* the corners first (edge tiles), then random points; none the
         * consumers do not use (unused_output) */
        for (int d = 0; d < k->ndim; d++) {
            int64_t v = (int64_t)(splitmix(&rng) % (uint64_t)dims[d]);
            if (i < 4 && (d == c->ndim || d == c->mdim)) v = ((d == c->ndim ? i & 1 : i >> 1) ? dims[d] - 1 : 0);
            vals[sym_get(sp->g->syms, k->var[d])->c] = v;
        }
        if (unused_output(sp, k, vals)) continue;
        int64_t ao, bo, oo;
        if (!eval_at(sp, c->a_base, vals, &ao) || !eval_at(sp, c->b_base, vals, &bo) ||
            !eval_at(sp, k->store_off, vals, &oo))
            break;
        if (blk > 1) {
            int64_t first = bo / blk * blk, last = (bo + K + blk - 1) / blk * blk;
            quant_dequantize(bt, (const uint8_t *)B + kiln_dtype_bytes(bt, first), row, last - first);
            for (int64_t r = 0; r < K; r++) row[r] = row[bo - first + r];
        } else {
            for (int64_t r = 0; r < K; r++) row[r] = (float)dtype_load(bt, B, bo + r * kstride);
        }
        double acc = 0;
        for (int64_t r = 0; r < K; r++) acc += (double)A[ao + r] * (double)row[r];
        sr->off[sr->n] = oo;
        sr->val[sr->n] = acc;
        sr->n++;
    }
    free(row);
    free(vals);
    return sr->n == TUNE_SAMPLES;
}

static int close_to_samples(const sample_ref *sr, const float *got, int64_t k, int approx) {
    double tol_abs = 2e-6 * (double)(k > 0 ? k : 1), big = 0;
    for (int i = 0; approx && i < sr->n; i++) big = fabs(sr->val[i]) > big ? fabs(sr->val[i]) : big;
    if (approx) tol_abs += 0.03 * big;
    for (int i = 0; i < sr->n; i++) {
        double a = sr->val[i], b = got[sr->off[i]];
        if (!(fabs(a - b) <= tol_abs + 1e-4 * fabs(a))) return 0;
    }
    return 1;
}

/* one round: compile the candidates with the reference, check, time. Fills
 * times (INFINITY for rejected) and returns KILN_OK or a compile error. */
/* wall seconds per byte a candidate unit took to compile in this process
 * (0: none compiled yet) */
static double unit_rate;

/* the C unit of a round: the generic loop nest as the reference, the tiles
 * of the candidates and of the kernel's fixed schedules, one kernel per
 * candidate (kiln_c<i>); *len_out its length */
static char *candidate_unit(const rt_tune_job *job, const sch_contract_sched *cands, int n, size_t *len_out) {
    const sch_program *sp = job->sp;
    cg_options co;
    co.isa = job->isa;
    char *src = cg_emit_c_generic_one(sp, job->kernel, &co, "kiln_ref");
    size_t len = strlen(src), cap = len + 1;
    const sch_contract *c = sp->kernels[job->kernel].contract;
    /* the runs have job->shape.m rows: rp tiles for more are never called */
    int rows_was = cg_contract_rp_rows(job->shape.m >= 1 && job->shape.m < INT32_MAX ? (int)job->shape.m : 0);
    sch_contract_sched *all = kiln_xmalloc(((size_t)n + 2) * sizeof *all);
    memcpy(all, cands, (size_t)n * sizeof *all);
    all[n] = c->sched[0];
    all[n + 1] = c->sched[1];
    cg_emit_contract_tiles(sp->bufs[c->b_buf].dtype, all, n + 2, &src, &len, &cap);
    free(all);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "kiln_c%d", i);
        cg_emit_contract_kernel_as(sp, job->kernel, name, &cands[i], job->bucket, &src, &len, &cap);
    }
    cg_contract_rp_rows(rows_was);
    *len_out = len;
    return src;
}

static kiln_status measure_round(const rt_tune_job *job, const launch_args *la, const sch_contract_sched *cands,
                                 int n, double *times, int *rejected, rt_module **mod_out, rt_kernel_fn *fns,
                                 double *ref_s, double deadline, char *err, size_t errcap) {
    const sch_program *sp = job->sp;
    size_t len = 0;
    char *src = candidate_unit(job, cands, n, &len);
    /* a unit the time left cannot compile (its bytes at the rate candidate
     * units compiled at so far: a loaded machine compiles 3x slower, and a
     * compile cannot be cut short) loses its last candidates, the default
     * and the cost model's first choice kept */
    double left = deadline - kiln_now_s();
    if (unit_rate > 0 && n > 2 && unit_rate * (double)len > left) {
        int fit = (int)((double)n * (left > 0 ? left : 0) / (unit_rate * (double)len));
        fit = fit < 2 ? 2 : fit;
        if (fit < n) {
            for (int i = fit; i < n; i++) times[i] = NAN, fns[i] = NULL; /* not measured: neither tried nor rejected */
            n = fit;
            free(src);
            src = candidate_unit(job, cands, n, &len);
        }
    }
    rt_module *mod = NULL;
    double t_cc = kiln_now_s();
    kiln_status s = la->be->compile(src, cg_isa_cflags(job->isa), &mod, err, errcap);
    t_cc = kiln_now_s() - t_cc;
    if (s == KILN_OK && t_cc > 0.02) /* a cached unit loads in milliseconds and teaches nothing */
        unit_rate = unit_rate > 0 ? 0.5 * unit_rate + 0.5 * t_cc / (double)len : t_cc / (double)len;
    free(src);
    if (s != KILN_OK) return s;
    *mod_out = mod;
    /* the reference output, then each candidate into a scratch copy */
    const sch_kernel *k = &sp->kernels[job->kernel];
    int64_t nout = (int64_t)(job->out_bytes / sizeof(float));
    float *ref = kiln_xmalloc(job->out_bytes + 64), *got = kiln_xmalloc(job->out_bytes + 64);
    void **bufs = tune_bufs(sp, la->bufs);
    launch_args l2 = *la;
    l2.bufs = bufs;
    void *f = la->be->symbol(mod, "kiln_ref");
    rt_kernel_fn ref_fn;
    memcpy(&ref_fn, &f, sizeof f);
    bufs[k->out_buf] = ref;
    int64_t outer = 1;
    for (int d = 0; d + 1 < k->ndim; d++) {
        int64_t v = 0;
        sym_eval(sp->g->syms, k->dim[d], la->values, NULL, &v, NULL);
        outer *= v;
    }
    /* the generic loop nest as the reference while it is cheap, else the
     * sampled host reference */
    double macs = (double)job->shape.m * (double)job->shape.n * (double)job->shape.k * (double)job->shape.nbatch;
    sample_ref *sr = NULL;
    int64_t slice = slice_factor(job); /* > 1: checked on a slice, at its rows (at least n/slice - 64 of them) */
    if (macs > 6.7e7) {
        sr = kiln_xmalloc(sizeof *sr);
        if (!sampled_reference(job, sr, slice > 1 ? job->shape.n / slice - 64 : 0)) {
            free(sr);
            sr = NULL;
        }
    }
    uint8_t *unused = NULL; /* the full reference's outputs no consumer uses: not compared */
    if (!sr) {
        double t0 = kiln_now_s();
        ref_fn(bufs, la->values, 0, k->ndim > 0 ? outer : 1, 0, 0);
        if (ref_s) *ref_s = kiln_now_s() - t0; /* one serial run of the generic loop nest */
        unused = unused_outputs(job, nout);
    }
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "kiln_c%d", i);
        void *cf = la->be->symbol(mod, name);
        memcpy(&fns[i], &cf, sizeof cf);
        memset(got, 0xff, job->out_bytes); /* NaN: a candidate that writes nothing fails */
        bufs[k->out_buf] = got;
        int bad = job->inject_wrong == i + 1, approx = cands[i].arith != SCH_ARITH_F32;
        if (kiln_now_s() > deadline && i > 1) { /* the default and the cost model's first choice are always timed */
            times[i] = NAN; /* out of time: not measured (neither tried nor rejected) */
            continue;
        }
        int ran = fns[i] && run_candidate_sliced(&l2, job, fns[i], &cands[i], sr ? slice : 1) == 0;
        /* tests: a wrong candidate, made by corrupting this one's output */
        for (int64_t e = 0; ran && bad && e < nout; e++) got[e] += 1.0f + 0.5f * fabsf(got[e]);
        for (int64_t e = 0; ran && unused && e < nout; e++)
            if (unused[e]) got[e] = ref[e];
        if (!ran || !(sr ? close_to_samples(sr, got, job->shape.k, approx) : close_to(ref, got, nout, job->shape.k, approx))) {
            if (job->verbose && !bad) {
                char txt[128];
                sch_contract_sched_print(&cands[i], txt, sizeof txt);
                fprintf(stderr, "kiln tune: candidate %s disagrees with the reference%s\n", txt, sr ? " (sampled)" : "");
            }
            times[i] = INFINITY;
            (*rejected)++;
            continue;
        }
        times[i] = time_candidate(&l2, job, fns[i], &cands[i]);
        if (job->verbose > 1) {
            char txt[128];
            sch_contract_sched_print(&cands[i], txt, sizeof txt);
            fprintf(stderr, "kiln tune:   %-64s %9.1f us\n", txt, times[i] * 1e6);
        }
    }
    free(sr);
    free(unused);
    free(ref);
    free(got);
    free(bufs);
    return KILN_OK;
}

/* the cost model's machine: the defaults, with what this CPU's bf16 dot
 * product costs measured (bf16_probe.c) */
static sch_machine tune_machine(void) {
    sch_machine mc = sch_machine_default();
    mc.bf16_dot_slots = rt_bf16_dot_measure().slots;
    return mc;
}

/* the schedule space of kernel k at shape sh, only what the micro-kernel
 * family can emit for it (a B strided along K takes the packed form only),
 * ranked by the cost model: (*space)[(*order)[0]] is its first choice.
 * Returns the count; the three arrays are malloc'd (the caller frees). */
static int ranked_space(const sch_program *sp, int32_t kernel, const sch_contract_shape *sh, cg_isa isa,
                        sch_contract_sched **space_out, double **cost_out, int **order_out) {
    const sch_kernel *k = &sp->kernels[kernel];
    sch_machine mc = tune_machine();
    int nspace = sch_space_contract(sh, NULL, 0);
    sch_contract_sched *space = kiln_xmalloc((size_t)(nspace + 1) * sizeof *space);
    sch_space_contract(sh, space, nspace);
    double *cost = kiln_xmalloc((size_t)(nspace + 1) * sizeof *cost);
    int *order = kiln_xmalloc((size_t)(nspace + 1) * sizeof *order);
    int kept = 0;
    for (int i = 0; i < nspace; i++) {
        sch_contract tmp = *k->contract;
        tmp.sched[0] = tmp.sched[1] = space[i];
        sch_kernel kk = *k;
        kk.contract = &tmp;
        if (cg_contract_emittable(sp, &kk, isa)) space[kept++] = space[i];
    }
    nspace = kept;
    for (int i = 0; i < nspace; i++) cost[i] = sch_cost_contract(&mc, sh, &space[i]);
    sch_rank_by_cost(cost, order, nspace);
    *space_out = space;
    *cost_out = cost;
    *order_out = order;
    return nspace;
}

int rt_tune_cost_first(const sch_program *sp, int32_t kernel, const sch_contract_shape *sh, cg_isa isa,
                       sch_contract_sched *out) {
    sch_contract_sched *space;
    double *cost;
    int *order;
    int n = ranked_space(sp, kernel, sh, isa, &space, &cost, &order);
    if (n > 0) *out = space[order[0]];
    free(space);
    free(cost);
    free(order);
    return n > 0;
}

static int log2_gap(int a, int b) {
    int d = 0;
    a = a > 0 ? a : 1;
    b = b > 0 ? b : 1;
    while (a > b) a >>= 1, d++;
    while (b > a) b >>= 1, d++;
    return d;
}

int rt_tune_nearest_of(const sch_program *sp, int32_t kernel, const sch_contract_shape *sh, cg_isa isa,
                       const sch_contract_sched *like, sch_contract_sched *out) {
    sch_contract_sched *space;
    double *cost;
    int *order;
    int n = ranked_space(sp, kernel, sh, isa, &space, &cost, &order), best = -1, best_d = 0;
    const sch_family *f = sch_family_of(like);
    for (int i = 0; i < n; i++) {
        const sch_contract_sched *q = &space[order[i]];
        if (sch_family_of(q) != f) continue;
        int d = log2_gap(q->mr, like->mr) + log2_gap(q->nr, like->nr) + log2_gap(q->mc, like->mc) +
                (q->nc != like->nc) + (q->pf != like->pf) + (q->pf2 != like->pf2) + (q->kc != like->kc) +
                (q->serial != like->serial);
        if (best < 0 || d < best_d) { /* ranks ascend: a tie keeps the model's better point */
            best = i;
            best_d = d;
        }
    }
    if (best >= 0) *out = space[order[best]];
    free(space);
    free(cost);
    free(order);
    return best >= 0;
}

/* the cost model's predictions against the measurements of round 1 */
static void rank_correlation(const rt_tune_job *job, const sch_contract_sched *cands, const double *times, int n,
                             rt_tune_result *res) {
    sch_machine mc = tune_machine();
    double pm[TUNE_MAX_CAND], pt[TUNE_MAX_CAND];
    int np = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(times[i])) {
            pm[np] = sch_cost_contract(&mc, &job->shape, &cands[i]);
            pt[np] = times[i];
            np++;
        }
    res->spearman = sch_spearman(pm, pt, np);
    res->nmeasured = np;
}

/* round one's first cost-model candidates: one point of each family
 * (sch_family_of: dot f32 / int8 / int8 on the repacked copy, packed,
 * AMX, ...) the list lacks, families in the order of their best rank,
 * where the model puts that best within TUNE_FAMILY_SPAN of the overall
 * best; the rest of the round follows the ranks. The point is the family's
 * simplest (sch_sched_simpler, the measured ties' rule too) among those
 * the model puts within TUNE_FAMILY_TIE of the family's best: a
 * memory-bound decode kernel's tiles are near-ties to the model, and it
 * cannot rank them. The model ranks points of one family better than it
 * ranks families against each other: on an Intel Xeon with AMX it put
 * Llama-1B-shaped q4_k decode's rp tiles first, where the plain int8 1 x 1
 * tile runs 20-25% faster at 1 thread, and a first-run search of 8
 * candidates, all rp, never timed a plain one */
#define TUNE_FAMILY_SPAN 1.5
#define TUNE_FAMILY_TIE 1.1
#define TUNE_FAMILY_LEADERS 3

static int family_in_list(const sch_contract_sched *list, int n, const sch_family *f) {
    for (int i = 0; i < n; i++)
        if (sch_family_of(&list[i]) == f) return 1;
    return 0;
}

static void family_leaders(const sch_contract_sched *space, const double *cost, const int *order, int nspace,
                           sch_contract_sched *cands, int *n, int cap) {
    int added = 0;
    for (int i = 0; i < nspace && *n < cap && added < TUNE_FAMILY_LEADERS; i++) {
        const sch_contract_sched *q = &space[order[i]];
        const sch_family *f = sch_family_of(q);
        if (!(cost[order[i]] <= cost[order[0]] * TUNE_FAMILY_SPAN)) break;
        if (family_in_list(cands, *n, f)) continue;
        /* q is the family's best: its simplest near-tie */
        const sch_contract_sched *pick = q;
        for (int j = i + 1; j < nspace && cost[order[j]] <= cost[order[i]] * TUNE_FAMILY_TIE; j++)
            if (sch_family_of(&space[order[j]]) == f && sch_sched_simpler(&space[order[j]], pick)) pick = &space[order[j]];
        if (in_list(cands, *n, pick)) continue;
        cands[(*n)++] = *pick;
        added++;
    }
}

int rt_tune_round_one(const sch_contract_sched *space, const double *cost, const int *order, int nspace,
                      const sch_contract_sched *dflt, const sch_contract_sched *seed, int rank_from, int cap,
                      sch_contract_sched *cands, int *rank_end) {
    int n = 0;
    cands[n++] = *dflt;
    if (seed && !in_list(cands, n, seed)) cands[n++] = *seed;
    if (cap > TUNE_MAX_CAND) cap = TUNE_MAX_CAND;
    int r = rank_from > 0 && rank_from < nspace ? rank_from : 0;
    if (r == 0) family_leaders(space, cost, order, nspace, cands, &n, cap);
    for (; r < nspace && n < cap; r++)
        if (!in_list(cands, n, &space[order[r]])) cands[n++] = space[order[r]];
    if (rank_end) *rank_end = r;
    return n;
}

/* the winner so far: its schedule, time and function */
typedef struct tune_best {
    sch_contract_sched sched;
    double time;
    rt_kernel_fn fn;
} tune_best;

/* A challenger b that beat the default (*sd, fd, its round's time *td0) in
 * its round must beat it again, timed alternately with it (runoff).
 * Prefill: compute-bound, timed warm, by 3%. Not decode: timed with B
 * flushed, every candidate streams at about the same DRAM speed alone, yet
 * a kernel that computes faster keeps more reads in flight inside a model
 * (the int8 q8_0 matrix-vector lost its run-offs to f32); except a decode
 * weight far beyond the cache: every run streams it from memory as the
 * model does, and its candidates differ by a few percent, less than one
 * run's drift on a shared machine, so a default timed in a busy moment lost
 * to a 2.35x "faster" output head. Other decode kernels: no margin, but the
 * default timed again alternately with the challenger and each keeping its
 * best time of all, so that one busy moment in the default's round does not
 * hand the group over (Llama-1B-shaped q4_k, 8192 x 2048 at 2 threads,
 * Intel Xeon: a first run timed the default above 0.349 ms where it takes
 * 0.303-0.308, nr=6 won at 0.349, and tg128 ran 38.5 t/s against the long
 * tune's 44.7). b becomes the default where it loses. */
static void challenge_default(const rt_tune_job *job, const launch_args *la, const sch_contract_sched *sd,
                              rt_kernel_fn fd, double *td0, tune_best *b, rt_tune_result *res) {
    double tc, td;
    runoff(la, job, fd, sd, b->fn, &b->sched, &tc, &td);
    if (td < res->base_s) res->base_s = td;
    if (job->bucket == 1 || streams_from_memory(job)) {
        if (tc > td * 0.97) *b = (tune_best){*sd, res->base_s, fd};
        else if (tc < b->time) b->time = tc;
        return;
    }
    if (td < *td0) *td0 = td;
    if (tc < b->time) b->time = tc;
    if (*td0 <= b->time) *b = (tune_best){*sd, *td0, fd};
}


/* round 2: the untried neighbours of b (one axis apart) that the budget
 * left pays for; one that beats b by 3% replaces it. A failed round keeps
 * b. Its module goes to res->mods[1]. */
static void round_two(const rt_tune_job *job, const launch_args *la, const sch_contract_sched *space,
                      const int *order, int nspace, const sch_contract_sched *cands, int n, double t_start,
                      tune_best *b, rt_tune_result *res) {
    sch_contract_sched nb[TUNE_MAX_CAND];
    int nn = 0;
    for (int i = 0; i < nspace && nn < TUNE_MAX_CAND; i++) {
        const sch_contract_sched *q = &space[order[i]];
        const sch_contract_sched *w = &b->sched;
        int dist = (q->mr != w->mr) + (q->nr != w->nr) + (q->mc != w->mc) + (q->nc != w->nc) + (q->pf != w->pf) +
                   (q->pf2 != w->pf2) +
                   (q->kc != w->kc) + (q->form != w->form) + (q->arith != w->arith) + (q->rp != w->rp) +
                   (q->serial != w->serial) + (q->direct != w->direct);
        if (dist == 1 && !in_list(cands, n, q) && !in_list(nb, nn, q)) nb[nn++] = *q;
    }
    int afford2 = (int)((job->budget_s - (kiln_now_s() - t_start)) / cand_cost[job->bucket == 0 ? 0 : 1]);
    if (nn > afford2) nn = afford2;
    if (nn <= 0) return;
    double t2[TUNE_MAX_CAND];
    rt_kernel_fn f2[TUNE_MAX_CAND];
    rt_module *mod2 = NULL;
    char err2[512];
    rt_tune_job job2 = *job;
    job2.inject_wrong = 0; /* the injected wrong candidate is one of the first round */
    double t_round2 = kiln_now_s();
    kiln_status s2 =
        measure_round(&job2, la, nb, nn, t2, &res->rejected, &mod2, f2, NULL, t_start + job->budget_s, err2, sizeof err2);
    learn_cand_cost(job->bucket, kiln_now_s() - t_round2, nn);
    if (s2 != KILN_OK) return;
    res->mods[1] = mod2;
    for (int i = 0; i < nn; i++) res->tried += !isnan(t2[i]);
    for (int i = 0; i < nn; i++)
        if (isfinite(t2[i]) && t2[i] < b->time * 0.97) {
            b->sched = nb[i];
            b->time = t2[i];
            b->fn = f2[i];
        }
}

/* after a search on slices: the winner once at full size into a scratch
 * output, checked against the sampled reference over all of B's rows and
 * timed (res->full_s, against its sliced estimate in the verbose line).
 * Returns 0 when it disagrees (the caller keeps the default). */
static int slice_confirm(const launch_args *la, const rt_tune_job *job, rt_kernel_fn fn, const sch_contract_sched *w,
                         double estimate, rt_tune_result *res) {
    sample_ref *sr = kiln_xmalloc(sizeof *sr);
    int have = sampled_reference(job, sr, 0);
    void **bufs = tune_bufs(job->sp, la->bufs);
    float *got = kiln_xmalloc(job->out_bytes + 64);
    memset(got, 0xff, job->out_bytes); /* NaN: what the winner does not write fails */
    bufs[job->sp->kernels[job->kernel].out_buf] = got;
    launch_args l2 = *la;
    l2.bufs = bufs;
    double t0 = kiln_now_s();
    int ok = run_candidate(&l2, job, fn, w) == 0;
    res->full_s = kiln_now_s() - t0;
    ok = ok && (!have || close_to_samples(sr, got, job->shape.k, w->arith != SCH_ARITH_F32));
    if (job->verbose) {
        char txt[128];
        sch_contract_sched_print(w, txt, sizeof txt);
        fprintf(stderr, "kiln tune: %s on slices of 1/%lld: estimated %.3f ms, full size %.3f ms%s\n", txt,
                (long long)slice_factor(job), estimate * 1e3, res->full_s * 1e3,
                ok ? "" : ", disagrees with the reference: the default stays");
    }
    free(got);
    free(bufs);
    free(sr);
    return ok;
}

kiln_status rt_tune_contract(const rt_tune_job *job, rt_tune_result *res, char *err, size_t errcap) {
    memset(res, 0, sizeof *res);
    const sch_kernel *k = &job->sp->kernels[job->kernel];
    const sch_contract *c = k->contract;
    launch_args la = {job->be, job->pool, job->bufs, job->values, job->nthreads};
    double t_start = kiln_now_s();

    /* round 1: default, seed, then the cost model's best */
    sch_contract_sched *space;
    double *cost;
    int *order;
    int nspace = ranked_space(job->sp, job->kernel, &job->shape, job->isa, &space, &cost, &order);
    res->space = nspace;

    sch_contract_sched cands[TUNE_MAX_CAND];
    int first = job->round1 > 0 && job->round1 < TUNE_MAX_CAND / 2 ? job->round1 : 8;
    /* as many as the budget pays for: a candidate costs its compile, check
     * and timing (cand_cost, learnt from the rounds before) */
    int afford = job->inject_wrong ? first : (int)(job->budget_s / cand_cost[job->bucket == 0 ? 0 : 1]) - 2;
    if (first > afford) first = afford > 1 ? afford : 1; /* the default and the cost model's first choice at least */
    int n = rt_tune_round_one(space, cost, order, nspace, &c->sched[job->bucket], job->seed, job->rank_from, first + 2,
                              cands, &res->rank_end);

    double times[TUNE_MAX_CAND];
    rt_kernel_fn fns[TUNE_MAX_CAND];
    rt_module *mod1 = NULL;
    double ref_s = INFINITY;
    double t_round = kiln_now_s();
    kiln_status s =
        measure_round(job, &la, cands, n, times, &res->rejected, &mod1, fns, &ref_s, t_start + job->budget_s, err, errcap);
    if (s != KILN_OK) goto done;
    learn_cand_cost(job->bucket, kiln_now_s() - t_round, n);
    res->tried = 0;
    for (int i = 0; i < n; i++) res->tried += !isnan(times[i]);
    /* the baseline: the default schedule, or the generic loop nest when the
     * default was disqualified */
    res->base_s = isfinite(times[0]) ? times[0] : ref_s;
    int best = -1;
    for (int i = 0; i < n; i++)
        if (isfinite(times[i]) && (best < 0 || times[i] < times[best])) best = i;
    sch_contract_sched winner = best >= 0 ? cands[best] : cands[0];
    double wtime = best >= 0 ? times[best] : INFINITY;
    rt_kernel_fn wfn = best >= 0 ? fns[best] : NULL;
    res->mods[0] = mod1;
    rank_correlation(job, cands, times, n, res);
    /* round 2: the winner's untried neighbours, while the budget lasts */
    if (best >= 0 && kiln_now_s() - t_start < job->budget_s * 0.5) {
        tune_best b = {winner, wtime, wfn};
        round_two(job, &la, space, order, nspace, cands, n, t_start, &b, res);
        winner = b.sched;
        wtime = b.time;
        wfn = b.fn;
    }
    if (isfinite(times[0]) && wfn && wfn != fns[0]) {
        tune_best b = {winner, wtime, wfn};
        challenge_default(job, &la, &cands[0], fns[0], &times[0], &b, res);
        winner = b.sched;
        wtime = b.time;
        wfn = b.fn;
    }
    /* a tie with the default (within 3%) goes to the simpler schedule */
    if (isfinite(times[0]) && wtime > times[0] * 0.97 && sch_sched_simpler(&cands[0], &winner)) {
        winner = cands[0];
        wtime = res->base_s;
        wfn = fns[0];
    }
    /* measured on slices: the winner once more at full size */
    if (slice_factor(job) > 1 && wfn && wfn != fns[0] && !slice_confirm(&la, job, wfn, &winner, wtime, res)) {
        res->rejected++;
        winner = cands[0];
        wtime = res->base_s;
        wfn = isfinite(times[0]) ? fns[0] : NULL;
    }
    /* a disqualified default (tests inject one) on a kernel too large for
     * the generic reference: no baseline was measured; report none better */
    if (!isfinite(res->base_s)) res->base_s = wtime;
    res->winner = winner;
    res->best_s = wtime;
    res->fn = wfn;
    res->seconds = kiln_now_s() - t_start;
    if (!wfn) {
        snprintf(err, errcap, "every candidate was rejected by the reference check");
        s = KILN_ERR_INVALID;
    }
done:
    res->seconds = kiln_now_s() - t_start;
    free(space);
    free(cost);
    free(order);
    return s;
}
