/* gpu_tune.c — the schedule search of a contraction kernel on a GPU device
 * (cg_gpu_contract_space: tile shapes, and the tensor-core forms where the
 * device has them), on the run's own buffers.
 *
 * One program holds every candidate (cg_emit_gpu_contract_variants). The
 * kernel's generic entry point, the exact reference numerics, runs first
 * and its output is the reference; each candidate then runs once and its
 * output is compared with it (a tolerance per form: the tile form only
 * reorders an f32 sum, the mma forms round their operands), and a mismatch
 * or a non-finite value where the reference is finite disqualifies it. The
 * survivors are timed (launch to finish, the minimum of a few runs); the
 * fastest wins, and a candidate within 3% of an earlier one (simpler: the
 * space lists the default first) does not displace it; when the generic
 * entry point is no slower than the best, it wins (form=generic). The output buffer
 * is left holding a correct result (the winner's last run).
 *
 * Invariant: no candidate that failed the check can win; the search never
 * runs past its budget by more than one candidate's measurement.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base.h"
#include "gpu_tune.h"

/* the largest difference a correct candidate of schedule s may show, as a
 * fraction of the reference's largest magnitude */
static double tolerance(const cg_gpu_contract_sched *s, int64_t rn) {
    if (s->form == CG_GPU_CF_MMA) return s->arith == CG_GPU_CA_F16 ? 4e-3 : s->arith == CG_GPU_CA_BF16 ? 2e-2 : 4e-2;
    return 4e-6 * sqrt((double)(rn > 1 ? rn : 1));
}

static int64_t variant_items(const rt_gpu_tune_job *j, const cg_gpu_contract_sched *s) {
    int64_t bm = cg_gpu_contract_block_m(s), bn = cg_gpu_contract_block_n(s);
    return j->nbatch * ((j->m + bm - 1) / bm) * ((j->n + bn - 1) / bn) * cg_gpu_contract_threads(s);
}

/* launch name from prog over items in groups of group, wait; its time */
static kiln_status run_once(const rt_gpu_tune_job *j, rt_gpu_prog *prog, const char *name, int64_t items, int group,
                            double *secs, char *err, size_t errcap) {
    double t0 = kiln_now_s();
    kiln_status s = j->ops->launch(j->dev, prog, name, j->args, j->nargs, items, group, err, errcap);
    if (s == KILN_OK) s = j->ops->finish(j->dev, err, errcap);
    *secs = kiln_now_s() - t0;
    return s;
}

static kiln_status time_best(const rt_gpu_tune_job *j, rt_gpu_prog *prog, const char *name, int64_t items, int group,
                             double first, double *best, char *err, size_t errcap) {
    *best = first;
    int reps = first > 0.05 ? 1 : 3;
    for (int i = 0; i < reps; i++) {
        double t;
        kiln_status s = run_once(j, prog, name, items, group, &t, err, errcap);
        if (s != KILN_OK) return s;
        if (t < *best) *best = t;
    }
    return KILN_OK;
}

static kiln_status download(const rt_gpu_tune_job *j, float *dst, char *err, size_t errcap) {
    return j->ops->download(j->dev, j->out_mem, j->out_off, dst, j->out_bytes, err, errcap);
}

/* 1 when got agrees with ref within rel of ref's largest magnitude */
static int agrees(const float *got, const float *ref, size_t n, double rel) {
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(ref[i]) && fabs((double)ref[i]) > scale) scale = fabs((double)ref[i]);
    double tol = rel * (scale > 0 ? scale : 1.0);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(ref[i])) {
            if (isfinite(got[i])) return 0;
            continue;
        }
        if (!isfinite(got[i]) || fabs((double)got[i] - (double)ref[i]) > tol) return 0;
    }
    return 1;
}

kiln_status rt_gpu_tune_contract(const rt_gpu_tune_job *j, rt_gpu_tune_result *r, char *err, size_t errcap) {
    memset(r, 0, sizeof *r);
    double start = kiln_now_s();
    cg_gpu_contract_sched space[32];
    int n = cg_gpu_contract_space(j->tensor_mma, space, 32);
    if (n > 32) n = 32;
    int ok = 0;
    for (int i = 0; i < n; i++) /* shapes the device cannot run as one group */
        if (cg_gpu_contract_threads(&space[i]) <= j->max_group) space[ok++] = space[i];
    n = ok;
    cg_gpu_options opt;
    opt.dialect = j->ops->dialect;
    opt.contract = cg_gpu_contract_default();
    int wrong = j->inject_wrong ? 0 : -1;
    char *src = cg_emit_gpu_contract_variants(j->sp, j->k, &opt, space, n, wrong);
    rt_gpu_prog *prog = NULL;
    kiln_status s = j->ops->build(j->dev, src, &prog, err, errcap);
    free(src);
    if (s != KILN_OK) return s;
    size_t count = j->out_bytes / sizeof(float);
    float *ref = kiln_xmalloc(j->out_bytes + 4), *got = kiln_xmalloc(j->out_bytes + 4);
    /* the reference: the generic entry point */
    double t;
    s = run_once(j, j->main_prog, j->generic_name, j->total, j->generic_group, &t, err, errcap);
    if (s == KILN_OK) s = time_best(j, j->main_prog, j->generic_name, j->total, j->generic_group, t, &r->base_s, err, errcap);
    if (s == KILN_OK) s = download(j, ref, err, errcap);
    int best = -1;
    for (int i = 0; i < n && s == KILN_OK; i++) {
        if (best >= 0 && kiln_now_s() - start > j->budget_s) break;
        char name[48];
        cg_gpu_contract_variant_name(j->k, i, name, sizeof name);
        int64_t items = variant_items(j, &space[i]);
        int group = cg_gpu_contract_threads(&space[i]);
        s = run_once(j, prog, name, items, group, &t, err, errcap);
        if (s == KILN_OK) s = download(j, got, err, errcap);
        if (s != KILN_OK) break;
        r->tried++;
        if (!agrees(got, ref, count, tolerance(&space[i], j->rn))) {
            r->rejected++;
            continue;
        }
        double bt;
        s = time_best(j, prog, name, items, group, t, &bt, err, errcap);
        if (s != KILN_OK) break;
        if (best < 0 || bt < r->best_s * 0.97) {
            best = i;
            r->best_s = bt;
        }
    }
    if (s == KILN_OK && best < 0) {
        snprintf(err, errcap, "no candidate of %d passed the reference check", r->tried);
        s = KILN_ERR_INVALID;
    }
    if (s == KILN_OK && r->base_s <= r->best_s) {
        /* the generic entry point is as fast: it stays (its exact result too) */
        j->ops->prog_free(prog);
        prog = NULL;
        r->winner = cg_gpu_contract_default();
        r->winner.form = CG_GPU_CF_GENERIC;
        r->best_s = r->base_s;
        s = run_once(j, j->main_prog, j->generic_name, j->total, j->generic_group, &t, err, errcap);
    } else if (s == KILN_OK) {
        /* leave the winner's (checked) result in the output buffer */
        char name[48];
        cg_gpu_contract_variant_name(j->k, best, name, sizeof name);
        s = run_once(j, prog, name, variant_items(j, &space[best]), cg_gpu_contract_threads(&space[best]), &t, err,
                     errcap);
        r->winner = space[best];
        r->prog = prog;
        snprintf(r->name, sizeof r->name, "%s", name);
    }
    if (s != KILN_OK) {
        if (prog) j->ops->prog_free(prog);
        r->prog = NULL;
        /* the generic result is the one to leave behind */
        char e2[64];
        run_once(j, j->main_prog, j->generic_name, j->total, j->generic_group, &t, e2, sizeof e2);
    }
    free(ref);
    free(got);
    r->seconds = kiln_now_s() - start;
    return s;
}
