/* tune_generic.c — the measuring half of the generic kernels' schedule
 * search (DESIGN.md section 5; space and cost model: space_generic.c).
 *
 * At the first launch of a searchable MAP/REDUCE kernel under a search
 * budget, its inputs are ready in the program's buffers. The candidates —
 * the default schedule first, then the cost model's best points of the space
 * (up to GT_MAX_CAND in all) — are emitted into one translation unit with
 * the kernel's scalar version (vec=1: the path that is bit-exact with the
 * interpreter) as the reference, compiled once, and run into scratch copies
 * of the output: the program's own output is written only by the real
 * launch afterwards, so a search never changes a result. A candidate must
 * return the reference's status and match its output: exactly for integer
 * dtypes, within the vector paths' tolerance for floats (relative 1e-5
 * for f32, 1e-3 for f16, 8e-3 for bf16, as tests/unit/test_compile.c).
 * Survivors are timed (one warm-up — the check — then repeats until 5 runs
 * or 30 ms, the minimum kept); past the deadline the rest are not measured.
 * Among the candidates within 3% of the fastest, the simplest wins (the
 * default is the simplest), so noise never trades the default for an
 * equal schedule. The record goes to the tuning DB under the kernel's key
 * (sch_generic_key) and bucket (sch_generic_bucket).
 *
 * Only idempotent kernels are searched in place (a candidate run must not
 * change what the next run reads): SCATTER kernels, kernels writing a state
 * or input buffer, and kernels that read their own output buffer are never
 * candidates. Contractions have their own search (tune.c).
 */
#include "tune_generic.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base.h"
#include "dtype.h"
#include "emit_contract.h"
#include "kiln_compile.h"
#include "tunedb.h"

#define GT_MAX_CAND 12

struct rt_gtune_state {
    int32_t nkernels;
    uint8_t *tunable; /* per kernel: may be searched in place */
    uint8_t *settled; /* per kernel: its schedule is final */
    char (*key)[24];  /* per kernel (tunable ones) */
    cg_isa isa;
    int nthreads;
    char *fingerprint; /* when the caller had none: computed at the first search */
    int tunedb_off, verbose, inject_wrong; /* from kiln_compile_options */
};

static int searchable(const sch_program *p, int32_t k, cg_isa isa) {
    const sch_kernel *K = &p->kernels[k];
    if (K->kind != SCH_K_MAP && K->kind != SCH_K_REDUCE) return 0;
    if (K->ndim == 0 || cg_contract_emittable(p, K, isa)) return 0;
    const sch_buf *ob = &p->bufs[K->out_buf];
    if (ob->kind == SCH_BUF_STATE || ob->kind == SCH_BUF_INPUT || kiln_dtype_is_block(ob->dtype)) return 0;
    if (sch_lx_reads(p, K->expr, K->out_buf)) return 0;
    for (int32_t i = 0; i < K->nstages; i++)
        if (sch_lx_reads(p, K->stages[i].expr, K->out_buf)) return 0;
    return 1;
}

rt_gtune_state *rt_gtune_new(const sch_program *sp, cg_isa isa, int nthreads, const kiln_compile_options *opt) {
    rt_gtune_state *st = kiln_xcalloc(1, sizeof *st);
    st->tunedb_off = opt->tunedb_off;
    st->verbose = opt->tune_verbose;
    st->inject_wrong = opt->gtune_inject_wrong;
    st->nkernels = sp->nkernels;
    st->tunable = kiln_xcalloc((size_t)sp->nkernels + 1, 1);
    st->settled = kiln_xcalloc((size_t)sp->nkernels + 1, 1);
    st->key = kiln_xcalloc((size_t)sp->nkernels + 1, sizeof *st->key);
    st->isa = isa;
    st->nthreads = nthreads;
    for (int32_t k = 0; k < sp->nkernels; k++) {
        st->tunable[k] = (uint8_t)searchable(sp, k, isa);
        if (st->tunable[k]) sch_generic_key(sp, k, st->key[k], sizeof st->key[k]);
    }
    return st;
}

void rt_gtune_free(rt_gtune_state *st) {
    if (!st) return;
    free(st->tunable);
    free(st->settled);
    free(st->key);
    free(st->fingerprint);
    free(st);
}

int rt_gtune_wanted(const rt_gtune_state *st, int32_t k) {
    return st && k >= 0 && k < st->nkernels && st->tunable[k] && !st->settled[k];
}

void rt_gtune_settle(rt_gtune_state *st, int32_t k) {
    if (st && k >= 0 && k < st->nkernels) st->settled[k] = 1;
}

const char *rt_gtune_key(const rt_gtune_state *st, int32_t k) {
    return st && k >= 0 && k < st->nkernels && st->tunable[k] ? st->key[k] : "";
}

void rt_gtune_split(const sch_kernel *K, int64_t outer, int64_t inner, int serial, int64_t *chunk, int64_t *items) {
    (void)serial;
    if (K->ndim == 0 || K->gsched.chunk <= 0 || K->gsched.chunk >= inner) return;
    *chunk = K->gsched.chunk;
    *items = outer * ((inner + *chunk - 1) / *chunk);
}

int rt_gtune_apply_db(rt_gtune_state *st, sch_program *sp, char **fingerprint) {
    if (!st || st->tunedb_off) return 0;
    int applied = 0;
    for (int32_t k = 0; k < st->nkernels; k++) {
        if (!st->tunable[k]) continue;
        char bucket[96];
        if (!sch_generic_bucket(sp, k, NULL, st->nthreads, bucket, sizeof bucket)) continue;
        if (!*fingerprint) *fingerprint = kiln_device_fingerprint();
        sch_tune_record r;
        int exact = 0;
        sch_generic_sched gs;
        if (!sch_tunedb_lookup(*fingerprint ? *fingerprint : "", st->key[k], bucket, &r, &exact) || !exact ||
            rt_retune())
            continue;
        if (!sch_generic_sched_parse(r.schedule, &gs)) continue; /* never trusted */
        sp->kernels[k].gsched = gs;
        st->settled[k] = 1;
        applied++;
    }
    return applied;
}

/* ---- the shape the cost model sees ------------------------------------- */

static double expr_ops(const sch_program *p, int32_t id) {
    if (id < 0) return 0;
    const lx *x = &p->lx[id];
    /* an elementwise op weighs ops.def's KCOST */
    double self = x->kind == LX_UNARY || x->kind == LX_BINARY ? op_table[x->op].kcost
                  : x->kind == LX_LOAD                         ? 0.5
                                                               : 0;
    return self + expr_ops(p, x->a) + expr_ops(p, x->b);
}

static void mark_loads(const sch_program *p, int32_t id, uint8_t *seen) {
    if (id < 0) return;
    const lx *x = &p->lx[id];
    if (x->kind == LX_LOAD) seen[x->buf] = 1;
    mark_loads(p, x->a, seen);
    mark_loads(p, x->b, seen);
}

static void make_shape(const rt_gtune_job *job, sch_generic_shape *sh) {
    const sch_program *p = job->sp;
    const sch_kernel *K = &p->kernels[job->kernel];
    memset(sh, 0, sizeof *sh);
    sh->isa_lanes = job->isa == CG_ISA_AVX512 ? 16 : job->isa == CG_ISA_AVX2 ? 8 : 0;
    cg_generic_vec_info(p, job->kernel, &sh->map_vec, &sh->red_vec);
    if (K->kind == SCH_K_REDUCE) {
        if (K->red_op == OP_SUM) sh->has_sum = 1;
        else sh->has_max = 1;
    }
    for (int32_t i = 0; i < K->nstages; i++) {
        if (K->stages[i].red_op == OP_SUM) sh->has_sum = 1;
        else sh->has_max = 1;
    }
    sh->outer = job->outer;
    sh->inner = job->inner;
    sh->rn = 1;
    if (K->kind == SCH_K_REDUCE) sym_eval(p->g->syms, K->rdim, job->values, NULL, &sh->rn, NULL);
    double ops = expr_ops(p, K->expr);
    for (int32_t i = 0; i < K->nstages; i++) {
        int64_t v = 0;
        if (K->stages[i].row && sym_eval(p->g->syms, K->stages[i].rdim, job->values, NULL, &v, NULL) == 0)
            sh->stage_rn += v;
        ops += expr_ops(p, K->stages[i].expr) / (K->nstages > 0 ? K->nstages : 1);
    }
    sh->ops = ops;
    uint8_t *seen = kiln_xcalloc((size_t)p->nbufs + 1, 1);
    seen[K->out_buf] = 1;
    mark_loads(p, K->expr, seen);
    for (int32_t i = 0; i < K->nstages; i++) mark_loads(p, K->stages[i].expr, seen);
    for (int32_t b = 0; b < p->nbufs; b++)
        if (seen[b]) sh->bytes += (double)job->bytes[b];
    free(seen);
    sh->nthreads = rt_pool_threads(job->pool);
    sh->parallel = !job->serial;
}

/* ---- measuring ----------------------------------------------------------- */

static int launch_sched(const rt_gtune_job *job, void *const *bufs, rt_kernel_fn fn, const sch_generic_sched *s) {
    sch_kernel K = job->sp->kernels[job->kernel];
    K.gsched = *s;
    int64_t chunk = job->chunk, items = job->items;
    rt_gtune_split(&K, job->outer, job->inner, job->serial, &chunk, &items);
    return job->be->launch(job->pool, fn, bufs, job->values, items, chunk, job->flags, job->serial || s->serial);
}

/* the candidate's output against the reference's: exact for integers, the
 * vector tolerance for floats; NaN matches NaN, infinities must be equal */
static int outputs_match(kiln_dtype t, const void *ref, const void *got, int64_t n) {
    int exact = t == KILN_I32 || t == KILN_U8;
    double tol = t == KILN_F32 ? 1e-5 : t == KILN_F16 ? 1e-3 : 8e-3;
    for (int64_t i = 0; i < n; i++) {
        double a = dtype_load(t, ref, i), b = dtype_load(t, got, i);
        if (a == b || (isnan(a) && isnan(b))) continue;
        if (exact || isinf(a) || isinf(b) || isnan(a) || isnan(b)) return 0;
        if (!(fabs(a - b) <= tol * (1.0 + fabs(a)))) return 0;
    }
    return 1;
}

/* every tunable kernel with k's key and bucket takes schedule s */
static int settle_all(rt_gtune_state *st, const rt_gtune_job *job, const char *bucket, const sch_generic_sched *s) {
    int changed = 0;
    sch_program *sp = job->sp;
    for (int32_t j = 0; j < st->nkernels; j++) {
        if (!st->tunable[j] || st->settled[j] || strcmp(st->key[j], st->key[job->kernel]) != 0) continue;
        char bj[96];
        if (!sch_generic_bucket(sp, j, job->values, st->nthreads, bj, sizeof bj) || strcmp(bj, bucket) != 0) continue;
        if (!sch_generic_same(&sp->kernels[j].gsched, s)) changed = 1;
        sp->kernels[j].gsched = *s;
        st->settled[j] = 1;
    }
    st->settled[job->kernel] = 1;
    return changed;
}

/* the candidates: the current schedule (the default unless a DB record set
 * it), then the cost model's best with a distinct effective schedule, as
 * many as the budget pays for. Returns the count; *nspace_out gets the
 * space's size. */
static int pick_candidates(const rt_gtune_job *job, const sch_generic_shape *sh, sch_generic_sched *cands,
                           int *nspace_out) {
    int nspace = sch_space_generic(sh, NULL, 0);
    sch_generic_sched *space = kiln_xcalloc((size_t)nspace + 1, sizeof *space);
    sch_space_generic(sh, space, nspace);
    double *cost = kiln_xcalloc((size_t)nspace + 1, sizeof *cost);
    int *order = kiln_xcalloc((size_t)nspace + 1, sizeof *order);
    for (int i = 0; i < nspace; i++) {
        cost[i] = sch_cost_generic(sh, &space[i]);
        order[i] = i;
    }
    for (int i = 1; i < nspace; i++) /* insertion sort: stable, so deterministic */
        for (int j = i; j > 1 && cost[order[j]] < cost[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int n = 0;
    cands[n++] = job->sp->kernels[job->kernel].gsched;
    /* one compiled with the others in one unit, checked and timed costs
     * about 0.1 s (2-core AMD EPYC Zen 4) */
    int most = job->inject_wrong ? GT_MAX_CAND : 1 + (int)(job->budget_s / 0.1);
    if (most > GT_MAX_CAND) most = GT_MAX_CAND;
    for (int i = 0; i < nspace && n < most; i++) {
        sch_generic_sched e = sch_generic_effective(sh, &space[order[i]]);
        int dup = 0;
        for (int j = 0; j < n && !dup; j++) {
            sch_generic_sched f = sch_generic_effective(sh, &cands[j]);
            dup = sch_generic_same(&e, &f);
        }
        if (!dup) cands[n++] = space[order[i]];
    }
    free(cost);
    free(order);
    free(space);
    *nspace_out = nspace;
    return n;
}

/* one translation unit: the scalar reference kiln_gref and the candidates
 * kiln_gc0.. (malloc'd) */
static char *emit_unit(const rt_gtune_job *job, const sch_generic_sched *cands, int n) {
    cg_options co;
    co.isa = job->isa;
    char *src = NULL;
    size_t len = 0, cap = 0;
    cg_emit_c_prelude(&co, &src, &len, &cap);
    sch_generic_sched scalar = {1, 0, 0, 0, 0};
    cg_emit_c_generic_append(job->sp, job->kernel, &co, "kiln_gref", &scalar, &src, &len, &cap);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "kiln_gc%d", i);
        cg_emit_c_generic_append(job->sp, job->kernel, &co, name, &cands[i], &src, &len, &cap);
    }
    return src;
}

/* run the reference, then check and time each candidate of mod into
 * scratch outputs while the budget lasts: times[i] the best of up to 5
 * runs, INFINITY when it disagrees with the reference (rejected), NaN when
 * out of time. *ref_s gets the reference's time. */
static kiln_status measure_candidates(rt_gtune_state *st, const rt_gtune_job *job, rt_module *mod,
                                      const sch_generic_sched *cands, int n, double deadline, double *times,
                                      rt_kernel_fn *fns, double *ref_s, rt_gtune_result *res, char *err,
                                      size_t errcap) {
    sch_program *sp = job->sp;
    const sch_kernel *K = &sp->kernels[job->kernel];
    kiln_dtype ot = sp->bufs[K->out_buf].dtype;
    size_t ob = job->bytes[K->out_buf];
    size_t esz = kiln_dtype_bytes(ot, 1);
    int64_t nout = esz ? (int64_t)(ob / esz) : 0;
    void *ref = NULL, *got = NULL;
    if (posix_memalign(&ref, 64, ob + 64) != 0 || posix_memalign(&got, 64, ob + 64) != 0) {
        free(ref);
        snprintf(err, errcap, "out of memory for scratch outputs");
        return KILN_ERR_NOMEM;
    }
    void **bufs = kiln_xmalloc(((size_t)sp->nbufs + 1) * sizeof *bufs);
    memcpy(bufs, job->bufs, (size_t)sp->nbufs * sizeof *bufs);
    int inject = job->inject_wrong ? job->inject_wrong : st->inject_wrong;
    sch_generic_sched scalar = {1, 0, 0, 0, 0};
    void *sym = job->be->symbol(mod, "kiln_gref");
    rt_kernel_fn ref_fn = NULL;
    memcpy(&ref_fn, &sym, sizeof sym);
    /* the reference's output starts as the candidates' do (all ones): a
     * kernel that writes only part of its buffer (its view of a larger
     * one) leaves the rest equal in both, not garbage against NaN */
    memset(ref, 0xff, ob);
    bufs[K->out_buf] = ref;
    double t0 = kiln_now_s();
    int ref_rc = ref_fn ? launch_sched(job, bufs, ref_fn, &scalar) : -1;
    *ref_s = kiln_now_s() - t0;
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "kiln_gc%d", i);
        sym = job->be->symbol(mod, name);
        memcpy(&fns[i], &sym, sizeof sym);
        times[i] = NAN;
        if (i > 0 && kiln_now_s() > deadline) continue; /* out of time: neither tried nor rejected */
        memset(got, 0xff, ob); /* NaN / all ones: a candidate that writes nothing fails */
        bufs[K->out_buf] = got;
        int rc = fns[i] && ref_fn ? launch_sched(job, bufs, fns[i], &cands[i]) : -1;
        int bad = inject == i + 1;
        if (bad && rc == 0 && nout > 0) /* tests: a wrong candidate (the top byte of one element flipped) */
            ((unsigned char *)got)[(size_t)(nout / 2) * esz + esz - 1] ^= 0x40;
        res->tried++;
        if (rc != ref_rc || !outputs_match(ot, ref, got, nout)) {
            if (st->verbose && !bad) {
                char txt[96];
                sch_generic_sched_print(&cands[i], txt, sizeof txt);
                fprintf(stderr, "kiln tune: kernel %d: candidate %s disagrees with the reference\n", (int)job->kernel,
                        txt);
            }
            times[i] = INFINITY;
            res->rejected++;
            continue;
        }
        double best = INFINITY, spent = 0;
        for (int r = 0; r < 5 && (r < 2 || spent < 0.03); r++) {
            double a = kiln_now_s();
            launch_sched(job, bufs, fns[i], &cands[i]);
            double dt = kiln_now_s() - a;
            spent += dt;
            if (dt < best) best = dt;
        }
        times[i] = best;
    }
    free(bufs);
    free(ref);
    free(got);
    return KILN_OK;
}

/* the winner's record in the tuning DB, and the verbose line */
static void store_winner(const rt_gtune_state *st, const rt_gtune_job *job, const char *fp, const char *bucket,
                         const sch_generic_sched *win, const rt_gtune_result *res, int nspace) {
    int32_t k = job->kernel;
    sch_tune_record r;
    sch_tune_record_new(&r, fp, st->key[k], bucket);
    sch_generic_sched_print(win, r.schedule, sizeof r.schedule);
    r.best_s = res->best_s;
    r.base_s = res->base_s;
    r.tried = res->tried;
    r.rejected = res->rejected;
    char e2[512];
    if (sch_tunedb_store(&r, e2, sizeof e2) != KILN_OK) fprintf(stderr, "kiln tune: %s\n", e2);
    if (st->verbose)
        fprintf(stderr, "kiln tune: kernel %d (%s, %s): best %.1f us (%s), default %.1f us, %d tried, %d rejected, "
                        "%d-point space, %.2f s\n",
                (int)k, st->key[k], bucket, res->best_s * 1e6, r.schedule, res->base_s * 1e6, res->tried,
                res->rejected, nspace, res->seconds);
}

kiln_status rt_gtune_kernel(rt_gtune_state *st, const rt_gtune_job *job, rt_gtune_result *res, char *err,
                            size_t errcap) {
    memset(res, 0, sizeof *res);
    double t_start = kiln_now_s();
    sch_program *sp = job->sp;
    int32_t k = job->kernel;
    char bucket[96];
    if (!rt_gtune_wanted(st, k) || !sch_generic_bucket(sp, k, job->values, st->nthreads, bucket, sizeof bucket)) {
        if (st && k >= 0 && k < st->nkernels) st->settled[k] = 1;
        return KILN_OK;
    }
    const char *fp = job->fingerprint;
    if (!fp) {
        if (!st->fingerprint) st->fingerprint = kiln_device_fingerprint();
        fp = st->fingerprint ? st->fingerprint : "";
    }
    /* a record for this bucket (sizes that were symbolic at compile time) */
    if (!st->tunedb_off) {
        sch_tune_record r;
        int exact = 0;
        sch_generic_sched gs;
        if (!rt_retune() && sch_tunedb_lookup(fp, st->key[k], bucket, &r, &exact) && exact &&
            sch_generic_sched_parse(r.schedule, &gs)) {
            res->changed = settle_all(st, job, bucket, &gs);
            res->from_db = 1;
            res->winner = gs;
            res->seconds = kiln_now_s() - t_start;
            return KILN_OK;
        }
    }
    sch_generic_shape sh;
    make_shape(job, &sh);
    sch_generic_sched cands[GT_MAX_CAND];
    int nspace = 0, n = pick_candidates(job, &sh, cands, &nspace);
    res->space = nspace;
    if (n == 1) {
        /* nothing to choose: the one schedule stays, unmeasured (the compiled
         * program runs it, checked like every kernel by the tests) */
        st->settled[k] = 1;
        res->seconds = kiln_now_s() - t_start;
        return KILN_OK;
    }
    char *src = emit_unit(job, cands, n);
    rt_module *mod = NULL;
    kiln_status s = job->be->compile(src, cg_isa_cflags(job->isa), &mod, err, errcap);
    free(src);
    double times[GT_MAX_CAND], ref_s = 0;
    rt_kernel_fn fns[GT_MAX_CAND];
    if (s == KILN_OK)
        s = measure_candidates(st, job, mod, cands, n, t_start + job->budget_s, times, fns, &ref_s, res, err, errcap);
    if (s != KILN_OK) {
        if (mod) job->be->module_free(mod);
        st->settled[k] = 1;
        res->seconds = kiln_now_s() - t_start;
        return s;
    }
    /* the fastest, then the simplest within 3% of it */
    int best = -1;
    for (int i = 0; i < n; i++)
        if (isfinite(times[i]) && (best < 0 || times[i] < times[best])) best = i;
    int win = best;
    for (int i = 0; best >= 0 && i < n; i++)
        if (isfinite(times[i]) && times[i] <= times[best] * 1.03 && sch_generic_simpler(&cands[i], &cands[win]))
            win = i;
    res->base_s = isfinite(times[0]) ? times[0] : ref_s;
    if (win < 0) {
        job->be->module_free(mod);
        st->settled[k] = 1;
        res->seconds = kiln_now_s() - t_start;
        snprintf(err, errcap, "every candidate was rejected by the reference check");
        return KILN_ERR_INVALID;
    }
    res->winner = cands[win];
    res->best_s = times[win];
    res->fn = fns[win];
    res->mod = mod;
    res->changed = settle_all(st, job, bucket, &cands[win]);
    res->seconds = kiln_now_s() - t_start;
    store_winner(st, job, fp, bucket, &cands[win], res, nspace);
    return KILN_OK;
}
