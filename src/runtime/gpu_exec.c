/* gpu_exec.c — running a kernelized program on a GPU device (gpu.h), and
 * the GPU backends' entries in the backend table.
 *
 * Memory: intermediates and temps share one device arena placed by liveness
 * (memplan, as on the CPU); every input, state and result has a device
 * buffer of its own, grown when a run needs more. A run uploads the sym
 * values and the arena offsets (two small i64 arrays), the inputs and the
 * states, launches every kernel in order on the device's in-order queue,
 * then downloads the per-kernel range-error flags, the results and the
 * states (their final values are in the state buffers: kernelize ends the
 * program with COPY kernels into them).
 *
 * Host steps: COPY is a device-to-device copy; QUANTIZE downloads its f32
 * source, encodes on the host (quant.c) and uploads the blocks.
 *
 * KILN_GPU_RESIDENT=1 (a serving knob, set by the CLI on GPU backends):
 * inputs of at least RESIDENT_MIN bytes (weights) and states (the KV cache)
 * whose binding (address, size) is the one of the previous run are not
 * uploaded again, and states are not downloaded: the device copy is the
 * truth. The caller promises that such buffers do not change behind kiln's
 * back (true of mapped weights and of a KV cache only kiln writes); small
 * inputs (token ids, positions) are still uploaded every run, since callers
 * refill them in place. Without the knob every run is self-contained, as
 * the CPU backend's.
 *
 * KILN_GPU_EMIT_ONLY=1 compiles to source only (no device is opened; runs
 * fail with a message): `kiln explain`-style inspection and, with
 * KILN_CUDA_ARCHS=sm_80,sm_90, NVRTC compile checks of CUDA code on machines
 * without a GPU.
 *
 * Errors: on any failure (including a range error, reported after the run
 * for the first kernel that flagged one) no results are handed over and
 * states are not written back, as in the reference interpreter.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "base.h"
#include "config.h"
#include "dtype.h"
#include "gpu.h"
#include "gpu_tune.h"
#include "graph.h"
#include "memplan.h"
#include "quant.h"
#include "tunedb.h"
#include "view.h"

const rt_gpu_ops *rt_gpu_find(const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "opencl") == 0) return &rt_opencl_ops;
    if (strcmp(name, "cuda") == 0) return &rt_cuda_ops;
    return NULL;
}

/* ---- the shared device per backend ---- */

static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
typedef struct dev_slot {
    const rt_gpu_ops *ops;
    rt_gpu *dev;
    kiln_status st;
    char why[1024];
} dev_slot;
static dev_slot dev_slots[4];

kiln_status rt_gpu_default_device(const rt_gpu_ops *ops, rt_gpu **out, char *err, size_t errcap) {
    pthread_mutex_lock(&dev_mu);
    dev_slot *s = NULL;
    for (int i = 0; i < 4 && !s; i++)
        if (dev_slots[i].ops == ops) s = &dev_slots[i];
    for (int i = 0; i < 4 && !s; i++)
        if (!dev_slots[i].ops) {
            s = &dev_slots[i];
            s->ops = ops;
            kiln_env env;
            kiln_env_read(&env);
            s->st = ops->open(env.host.device, &s->dev, s->why, sizeof s->why);
        }
    kiln_status st = KILN_ERR_UNSUPPORTED;
    *out = NULL;
    if (s) {
        st = s->st;
        *out = s->dev;
        if (st != KILN_OK) snprintf(err, errcap, "%s", s->why);
    } else {
        snprintf(err, errcap, "%s: too many GPU backends", ops->name);
    }
    pthread_mutex_unlock(&dev_mu);
    return st;
}

/* ---- the executor ---- */

/* what a contraction kernel runs for one M bucket: the tuning DB's or the
 * search's schedule, from a program of its own (prog), or, with prog NULL,
 * the main program's entry point for gp->contract */
typedef struct gpu_choice {
    int decided;
    rt_gpu_prog *prog;
    char name[48];
    cg_gpu_contract_sched s;
} gpu_choice;

/* KILN_GPU_RESIDENT: inputs from this size on are taken as constant weights */
#define RESIDENT_MIN ((size_t)1 << 20)

struct rt_gpu_program {
    const rt_gpu_ops *ops;
    rt_gpu *dev;
    rt_gpu_prog *prog;
    char device_name[300];
    int emit_only; /* KILN_GPU_EMIT_ONLY: source only, nothing to run on */
    int group;
    cg_gpu_contract_sched contract; /* how contraction kernels run (KILN_GPU_CONTRACT) */
    int contract_forced;            /* KILN_GPU_CONTRACT set: no DB, no search */
    rt_gpu_caps caps;
    double search_budget, search_spent;
    int measurements, inject_wrong;
    int verbose; /* kiln_compile_options.tune_verbose */
    gpu_choice *choice; /* per contraction kernel and M bucket (k * 2 + (M > 4)) */
    int resident;
    int32_t nbufs, nkernels;
    /* per buffer */
    size_t *bytes;
    rt_live *live;
    rt_gpu_mem *mem; /* non-arena buffers */
    size_t *memcap;
    const void **host_seen; /* RESIDENT: the binding last uploaded */
    size_t *host_seen_bytes;
    int64_t *offs;          /* arena offsets (bo) */
    rt_gpu_mem arena;
    size_t arena_cap;
    rt_gpu_mem vbuf, obuf, ebuf;
    size_t vcap, ocap;
    int32_t *kerr;
    int32_t *args_tmp;
};

const char *rt_gpu_program_device(const rt_gpu_program *gp) { return gp ? gp->device_name : ""; }

rt_gpu_program *rt_gpu_program_new(const rt_gpu_ops *ops, const sch_program *sp, const kiln_compile_options *opt,
                                   char **source_out, kiln_status *st, char *err, size_t errcap) {
    cg_gpu_options o;
    o.dialect = ops->dialect;
    o.contract = cg_gpu_contract_default();
    const char *cs = opt->gpu_contract;
    if (cs && cs[0] && !cg_gpu_contract_parse(cs, &o.contract, err, errcap)) {
        *source_out = NULL;
        *st = KILN_ERR_INVALID;
        return NULL;
    }
    if (o.contract.form == CG_GPU_CF_MMA && ops->dialect != CG_GPU_CUDA) {
        snprintf(err, errcap, "KILN_GPU_CONTRACT: form=mma (tensor cores) is CUDA only, not %s", ops->name);
        *source_out = NULL;
        *st = KILN_ERR_INVALID;
        return NULL;
    }
    char *src = cg_emit_gpu(sp, &o);
    *source_out = src;
    rt_gpu_program *gp = kiln_xcalloc(1, sizeof *gp);
    gp->contract = o.contract;
    gp->contract_forced = cs && cs[0];
    gp->choice = kiln_xcalloc((size_t)sp->nkernels * 2 + 1, sizeof *gp->choice);
    gp->ops = ops;
    gp->nbufs = sp->nbufs;
    gp->nkernels = sp->nkernels;
    gp->group = opt->gpu_group ? opt->gpu_group : ops->dialect == CG_GPU_CUDA ? 128 : 64;
    if (gp->group < 1) gp->group = 1;
    gp->resident = opt->gpu_resident != 0;
    gp->verbose = opt->tune_verbose;
    size_t nb = (size_t)sp->nbufs + 1;
    gp->bytes = kiln_xcalloc(nb, sizeof *gp->bytes);
    gp->live = kiln_xcalloc(nb, sizeof *gp->live);
    gp->mem = kiln_xcalloc(nb, sizeof *gp->mem);
    gp->memcap = kiln_xcalloc(nb, sizeof *gp->memcap);
    gp->host_seen = kiln_xcalloc(nb, sizeof *gp->host_seen);
    gp->host_seen_bytes = kiln_xcalloc(nb, sizeof *gp->host_seen_bytes);
    gp->offs = kiln_xcalloc(nb, sizeof *gp->offs);
    gp->kerr = kiln_xcalloc((size_t)sp->nkernels + 1, sizeof *gp->kerr);
    gp->args_tmp = kiln_xcalloc(nb, sizeof *gp->args_tmp);
    if (opt->gpu_emit_only) {
        gp->emit_only = 1;
        snprintf(gp->device_name, sizeof gp->device_name, "%s: none (KILN_GPU_EMIT_ONLY)", ops->name);
        /* CUDA without a device: NVRTC still checks the code for the listed
         * architectures (KILN_CUDA_ARCHS=sm_80,sm_90) */
        const char *archs = opt->cuda_archs;
        if (ops == &rt_cuda_ops && archs && archs[0]) {
            char list[256], *save = NULL;
            snprintf(list, sizeof list, "%s", archs);
            for (char *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
                size_t bin = 0;
                kiln_status s = rt_cuda_compile_check(src, a, &bin, err, errcap);
                if (s != KILN_OK) {
                    *st = s;
                    rt_gpu_program_free(gp);
                    return NULL;
                }
            }
        }
        *st = KILN_OK;
        return gp;
    }
    kiln_status s = rt_gpu_default_device(ops, &gp->dev, err, errcap);
    if (s == KILN_OK) s = ops->build(gp->dev, src, &gp->prog, err, errcap);
    if (s != KILN_OK) {
        *st = s;
        rt_gpu_program_free(gp);
        return NULL;
    }
    char *fp = ops->fingerprint(gp->dev);
    snprintf(gp->device_name, sizeof gp->device_name, "%s", fp);
    free(fp);
    rt_gpu_caps caps;
    ops->caps(gp->dev, &caps);
    gp->caps = caps;
    if (gp->contract.form == CG_GPU_CF_MMA && !caps.tensor_mma) {
        snprintf(err, errcap, "KILN_GPU_CONTRACT: form=mma needs mma.sync (CUDA sm_80 or later); %s has not",
                 gp->device_name);
        *st = KILN_ERR_UNSUPPORTED;
        rt_gpu_program_free(gp);
        return NULL;
    }
    /* a tile larger than the device's groups: the generic entry points */
    if (cg_gpu_contract_threads(&gp->contract) > caps.max_group) gp->contract.form = CG_GPU_CF_GENERIC;
    *st = KILN_OK;
    return gp;
}

void rt_gpu_program_free(rt_gpu_program *gp) {
    if (!gp) return;
    if (gp->dev) {
        char err[256];
        gp->ops->finish(gp->dev, err, sizeof err);
        for (int32_t b = 0; b < gp->nbufs; b++) gp->ops->free(gp->dev, gp->mem[b]);
        gp->ops->free(gp->dev, gp->arena);
        gp->ops->free(gp->dev, gp->vbuf);
        gp->ops->free(gp->dev, gp->obuf);
        gp->ops->free(gp->dev, gp->ebuf);
    }
    if (gp->prog) gp->ops->prog_free(gp->prog);
    for (int32_t i = 0; gp->choice && i < gp->nkernels * 2; i++)
        if (gp->choice[i].prog) gp->ops->prog_free(gp->choice[i].prog);
    free(gp->choice);
    free(gp->bytes);
    free(gp->live);
    free(gp->mem);
    free(gp->memcap);
    free(gp->host_seen);
    free(gp->host_seen_bytes);
    free(gp->offs);
    free(gp->kerr);
    free(gp->args_tmp);
    free(gp);
}

static void touch(rt_live *l, int32_t k) {
    if (l->first > l->last) {
        l->first = l->last = k;
        return;
    }
    if (k < l->first) l->first = k;
    if (k > l->last) l->last = k;
}

static void touch_expr(const sch_program *sp, rt_live *live, int32_t id, int32_t k) {
    if (id < 0) return;
    const lx *x = &sp->lx[id];
    if (x->kind == LX_LOAD) touch(&live[x->buf], k);
    touch_expr(sp, live, x->a, k);
    touch_expr(sp, live, x->b, k);
}

/* a device buffer of at least `bytes`, grown (contents dropped) when needed */
static kiln_status ensure(rt_gpu_program *gp, rt_gpu_mem *m, size_t *cap, size_t bytes, char *err, size_t errcap) {
    if (*m && *cap >= bytes) return KILN_OK;
    if (*m) gp->ops->free(gp->dev, *m);
    *m = 0;
    *cap = 0;
    size_t want = bytes ? bytes : 64;
    kiln_status s = gp->ops->alloc(gp->dev, want, m, err, errcap);
    if (s == KILN_OK) *cap = want;
    return s;
}

/* where buffer b lives: (device memory, byte offset) */
static rt_gpu_mem buf_mem(const rt_gpu_program *gp, const sch_program *sp, int32_t b, size_t *off) {
    if (cg_gpu_buf_in_arena(sp, b)) {
        *off = (size_t)gp->offs[b];
        return gp->arena;
    }
    *off = 0;
    return gp->mem[b];
}

static void free_results(output_value *r, int32_t n) {
    if (!r) return;
    for (int32_t i = 0; i < n; i++) free(r[i].data);
    free(r);
}

void rt_gpu_program_set_search(rt_gpu_program *gp, double budget_s, int inject_wrong) {
    if (!gp) return;
    gp->search_budget = budget_s;
    gp->inject_wrong = inject_wrong;
}

int rt_gpu_program_measurements(const rt_gpu_program *gp) { return gp ? gp->measurements : 0; }

/* the tuning DB's bucket of a contraction on a GPU */
static void gpu_bucket(int64_t m, int64_t n, int64_t rn, int64_t nbatch, char *buf, size_t cap) {
    snprintf(buf, cap, "gpu,%s,n=%lld,k=%lld,b=%lld", m > SCH_SMALL_M ? "m>4" : "m<=4", (long long)n,
             (long long)rn, (long long)nbatch);
}

/* settle gp->choice for contraction kernel k at this M bucket: the DB's
 * record for this device, else (with search budget left, and
 * KILN_GPU_CONTRACT unset) a search on this run's buffers, whose winner has
 * then already run (*ran = 1), else the default */
static kiln_status decide_contract(rt_gpu_program *gp, const sch_program *sp, int32_t k, int64_t m, int64_t n,
                                   int64_t nbatch, int64_t rn, const rt_gpu_arg *args, int na, int64_t total,
                                   int *ran, char *err, size_t errcap) {
    const sch_kernel *K = &sp->kernels[k];
    gpu_choice *ch = &gp->choice[k * 2 + (m > SCH_SMALL_M)];
    ch->decided = 1;
    ch->s = gp->contract;
    *ran = 0;
    if (gp->contract_forced) return KILN_OK;
    char bucket[96];
    gpu_bucket(m, n, rn, nbatch, bucket, sizeof bucket);
    sch_tune_record rec;
    int exact = 0;
    cg_gpu_contract_sched sc;
    char perr[256];
    if (sch_tunedb_lookup(gp->device_name, K->contract->key, bucket, &rec, &exact) && exact && !rt_retune() &&
        cg_gpu_contract_parse(rec.schedule, &sc, perr, sizeof perr) &&
        (sc.form != CG_GPU_CF_MMA || gp->caps.tensor_mma) && cg_gpu_contract_threads(&sc) <= gp->caps.max_group) {
        ch->s = sc;
        if (sc.form == CG_GPU_CF_GENERIC) return KILN_OK; /* the generic entry point won */
        cg_gpu_options o;
        o.dialect = gp->ops->dialect;
        o.contract = cg_gpu_contract_default();
        char *src = cg_emit_gpu_contract_variants(sp, k, &o, &sc, 1, -1);
        kiln_status s = gp->ops->build(gp->dev, src, &ch->prog, err, errcap);
        free(src);
        if (s != KILN_OK) return s;
        cg_gpu_contract_variant_name(k, 0, ch->name, sizeof ch->name);
        return KILN_OK;
    }
    if (gp->search_budget <= gp->search_spent) return KILN_OK;
    rt_gpu_tune_job j;
    memset(&j, 0, sizeof j);
    char gname[32];
    snprintf(gname, sizeof gname, "kiln_k%d", (int)k);
    j.ops = gp->ops;
    j.dev = gp->dev;
    j.sp = sp;
    j.k = k;
    j.main_prog = gp->prog;
    j.generic_name = gname;
    j.total = total;
    j.generic_group = gp->group;
    /* the generic entry point takes its item count in argument 4 */
    rt_gpu_arg *jargs = kiln_xmalloc((size_t)na * sizeof *jargs);
    memcpy(jargs, args, (size_t)na * sizeof *jargs);
    jargs[4].i64 = total;
    j.args = jargs;
    j.nargs = na;
    j.m = m;
    j.n = n;
    j.nbatch = nbatch;
    j.rn = rn;
    j.out_mem = buf_mem(gp, sp, K->out_buf, &j.out_off);
    j.out_bytes = gp->bytes[K->out_buf];
    j.tensor_mma = gp->caps.tensor_mma;
    j.max_group = gp->caps.max_group;
    j.inject_wrong = gp->inject_wrong;
    double left = gp->search_budget - gp->search_spent, share = gp->search_budget / 8 > 2.0 ? gp->search_budget / 8 : 2.0;
    j.budget_s = left < share ? left : share;
    int show = isatty(2) || gp->verbose;
    if (show) fprintf(stderr, "kiln tune: %s kernel %d (%s, %s): searching ...\n", gp->ops->name, (int)k,
                      K->contract->key, bucket);
    rt_gpu_tune_result r;
    char terr[1024];
    kiln_status s = rt_gpu_tune_contract(&j, &r, terr, sizeof terr);
    free(jargs);
    gp->search_spent += r.seconds;
    gp->measurements += r.tried;
    *ran = 1;
    if (s != KILN_OK) {
        fprintf(stderr, "kiln tune: %s kernel %d: search failed (%s); keeping the default schedule\n", gp->ops->name,
                (int)k, terr);
        return KILN_OK;
    }
    ch->s = r.winner;
    ch->prog = r.prog;
    snprintf(ch->name, sizeof ch->name, "%s", r.name);
    sch_tune_record_new(&rec, gp->device_name, K->contract->key, bucket);
    cg_gpu_contract_print(&r.winner, rec.schedule, sizeof rec.schedule);
    rec.best_s = r.best_s;
    rec.base_s = r.base_s;
    rec.tried = r.tried;
    rec.rejected = r.rejected;
    if (show)
        fprintf(stderr, "kiln tune: %s kernel %d: best %.1f us (%s), generic %.1f us, %d tried, %d rejected\n",
                gp->ops->name, (int)k, r.best_s * 1e6, rec.schedule, r.base_s * 1e6, r.tried, r.rejected);
    char derr[512];
    if (sch_tunedb_store(&rec, derr, sizeof derr) != KILN_OK)
        fprintf(stderr, "kiln tune: could not save the result: %s\n", derr);
    return KILN_OK;
}

kiln_status rt_gpu_program_run(rt_gpu_program *gp, kiln_graph *g, const sch_program *sp) {
    if (g->build_failed) return g->status;
    if (gp->emit_only) {
        graph_run_error(g, KILN_ERR_UNSUPPORTED,
                        "kiln_run: this %s program was compiled with KILN_GPU_EMIT_ONLY (source only, no device)",
                        gp->ops->name);
        return KILN_ERR_UNSUPPORTED;
    }
    const rt_gpu_ops *ops = gp->ops;
    rt_gpu *dev = gp->dev;
    char err[4096] = "", what[160];
    kiln_status s = KILN_OK;
    output_value *res = NULL;
    void *qtmp = NULL;

    /* sym values under the graph's bindings */
    uint32_t nv = sym_var_count(g->syms);
    int64_t *values = kiln_xcalloc((size_t)nv + 1, sizeof *values);
    uint8_t *bound = kiln_xcalloc((size_t)nv + 1, 1);
    for (uint32_t v = 0; v < nv && v < g->ndim_values; v++) {
        values[v] = g->dim_values[v];
        bound[v] = g->dim_bound[v];
    }
#define EVAL(sym, outp, desc)                                                                                       \
    do {                                                                                                            \
        uint32_t missing_ = 0;                                                                                      \
        if (sym_eval(g->syms, (sym), values, bound, (outp), &missing_) != 0) {                                      \
            const char *nm_ = sym_var_name(g->syms, missing_);                                                      \
            graph_run_error(g, KILN_ERR_UNBOUND, "kiln_run: unbound symbol '%s' (needed by %s)", nm_ ? nm_ : "?", \
                            (desc));                                                                                \
            s = KILN_ERR_UNBOUND;                                                                                   \
        }                                                                                                           \
    } while (0)

    for (int32_t b = 0; b < sp->nbufs && s == KILN_OK; b++) {
        const sch_buf *B = &sp->bufs[b];
        int64_t numel = 0;
        snprintf(what, sizeof what, "the size of buffer %d", (int)b);
        EVAL(B->numel, &numel, what);
        if (s != KILN_OK) break;
        if (numel < 0) {
            graph_run_error(g, KILN_ERR_SHAPE, "kiln_run: buffer %d has a negative size", (int)b);
            s = KILN_ERR_SHAPE;
            break;
        }
        size_t bytes = kiln_dtype_bytes(B->dtype, numel);
        if (bytes == 0 && numel != 0) {
            graph_run_error(g, KILN_ERR_SHAPE, "kiln_run: %lld elements of %s are not a whole number of blocks",
                            (long long)numel, kiln_dtype_name(B->dtype));
            s = KILN_ERR_SHAPE;
            break;
        }
        gp->bytes[b] = bytes;
    }
    /* device buffers of inputs, states and results */
    for (int32_t b = 0; b < sp->nbufs && s == KILN_OK; b++) {
        if (cg_gpu_buf_in_arena(sp, b)) continue;
        if (gp->mem[b] && gp->memcap[b] < gp->bytes[b]) gp->host_seen[b] = NULL;
        s = ensure(gp, &gp->mem[b], &gp->memcap[b], gp->bytes[b], err, sizeof err);
        if (s != KILN_OK) graph_run_error(g, s, "kiln_run: %s", err);
    }
    /* the caller's inputs and states, uploaded */
    for (int32_t b = 0; b < sp->nbufs && s == KILN_OK; b++) {
        const sch_buf *B = &sp->bufs[b];
        if (B->kind != SCH_BUF_INPUT && B->kind != SCH_BUF_STATE) continue;
        const char *name = g->nodes[B->node].name;
        const input_binding *bind = NULL;
        for (int32_t i = 0; i < g->ninputs; i++)
            if (strcmp(g->inputs[i].name, name) == 0) bind = &g->inputs[i];
        const char *kind = B->kind == SCH_BUF_STATE ? "state" : "input";
        if (!bind) {
            graph_run_error(g, KILN_ERR_UNBOUND, "kiln_run: %s '%s' has no bound buffer", kind, name);
            s = KILN_ERR_UNBOUND;
        } else if (bind->bytes != gp->bytes[b]) {
            graph_run_error(g, KILN_ERR_INVALID, "kiln_run: %s '%s': expected %zu bytes, the bound buffer has %zu",
                            kind, name, gp->bytes[b], bind->bytes);
            s = KILN_ERR_INVALID;
        } else if (!bind->data && bind->bytes) {
            graph_run_error(g, KILN_ERR_INVALID, "kiln_run: input '%s': NULL buffer", name);
            s = KILN_ERR_INVALID;
        } else if (!(gp->resident && gp->host_seen[b] == bind->data && gp->host_seen_bytes[b] == bind->bytes &&
                     (B->kind == SCH_BUF_STATE || bind->bytes >= RESIDENT_MIN))) {
            s = ops->upload(dev, gp->mem[b], 0, bind->data, bind->bytes, err, sizeof err);
            if (s != KILN_OK) graph_run_error(g, s, "kiln_run: %s '%s': %s", kind, name, err);
            gp->host_seen[b] = s == KILN_OK ? bind->data : NULL;
            gp->host_seen_bytes[b] = bind->bytes;
        }
    }
    /* the arena */
    if (s == KILN_OK) {
        for (int32_t b = 0; b < sp->nbufs; b++) {
            gp->live[b].bytes = gp->bytes[b];
            gp->live[b].first = 1;
            gp->live[b].last = 0;
        }
        for (int32_t k = 0; k < sp->nkernels; k++) {
            const sch_kernel *K = &sp->kernels[k];
            touch(&gp->live[K->out_buf], k);
            if (K->src_buf >= 0) touch(&gp->live[K->src_buf], k);
            touch_expr(sp, gp->live, K->expr, k);
            for (int32_t i = 0; i < K->nstages; i++) touch_expr(sp, gp->live, K->stages[i].expr, k);
        }
        for (int32_t b = 0; b < sp->nbufs; b++)
            if (!cg_gpu_buf_in_arena(sp, b)) {
                gp->live[b].first = 1;
                gp->live[b].last = 0;
            }
        size_t need = rt_memplan(gp->live, sp->nbufs);
        s = ensure(gp, &gp->arena, &gp->arena_cap, need, err, sizeof err);
        if (s != KILN_OK) graph_run_error(g, s, "kiln_run: the arena: %s", err);
        for (int32_t b = 0; b < sp->nbufs; b++)
            gp->offs[b] = cg_gpu_buf_in_arena(sp, b) ? (int64_t)gp->live[b].offset : 0;
    }
    /* sym values, offsets, error flags */
    if (s == KILN_OK) {
        size_t vb = ((size_t)nv + 1) * sizeof(int64_t), ob = ((size_t)sp->nbufs + 1) * sizeof(int64_t);
        size_t eb = ((size_t)sp->nkernels + 1) * sizeof(int32_t);
        size_t ecap = eb;
        s = ensure(gp, &gp->vbuf, &gp->vcap, vb, err, sizeof err);
        if (s == KILN_OK) s = ensure(gp, &gp->obuf, &gp->ocap, ob, err, sizeof err);
        if (s == KILN_OK && !gp->ebuf) s = ops->alloc(dev, ecap, &gp->ebuf, err, sizeof err);
        memset(gp->kerr, 0, eb);
        if (s == KILN_OK) s = ops->upload(dev, gp->vbuf, 0, values, (size_t)nv * sizeof(int64_t), err, sizeof err);
        if (s == KILN_OK) s = ops->upload(dev, gp->obuf, 0, gp->offs, (size_t)sp->nbufs * sizeof(int64_t), err, sizeof err);
        if (s == KILN_OK) s = ops->upload(dev, gp->ebuf, 0, gp->kerr, eb, err, sizeof err);
        if (s != KILN_OK) graph_run_error(g, s, "kiln_run: %s", err);
    }
    /* kernels, in order */
    rt_gpu_arg *args = kiln_xcalloc((size_t)sp->nbufs + 8, sizeof *args);
    for (int32_t k = 0; k < sp->nkernels && s == KILN_OK; k++) {
        const sch_kernel *K = &sp->kernels[k];
        if (K->kind == SCH_K_COPY) {
            size_t n = gp->bytes[K->src_buf] < gp->bytes[K->out_buf] ? gp->bytes[K->src_buf] : gp->bytes[K->out_buf];
            size_t so = 0, doff = 0;
            rt_gpu_mem sm = buf_mem(gp, sp, K->src_buf, &so), dm = buf_mem(gp, sp, K->out_buf, &doff);
            if (sm == dm && so == doff) continue;
            s = ops->copy(dev, dm, doff, sm, so, n, err, sizeof err);
            if (s != KILN_OK) graph_run_error(g, s, "kiln_run: kernel %d: %s", (int)k, err);
            continue;
        }
        if (K->kind == SCH_K_QUANTIZE) {
            kiln_dtype t = sp->bufs[K->out_buf].dtype;
            size_t sb = gp->bytes[K->src_buf], db = gp->bytes[K->out_buf];
            int64_t numel = (int64_t)(sb / sizeof(float));
            free(qtmp);
            qtmp = kiln_xmalloc(sb + db + 16);
            size_t so = 0, doff = 0;
            rt_gpu_mem sm = buf_mem(gp, sp, K->src_buf, &so), dm = buf_mem(gp, sp, K->out_buf, &doff);
            s = ops->download(dev, sm, so, qtmp, sb, err, sizeof err);
            if (s == KILN_OK && quant_quantize(t, qtmp, (char *)qtmp + sb, numel) != 0) {
                graph_run_error(g, KILN_ERR_UNSUPPORTED, "kiln_run: kiln has no %s encoder", kiln_dtype_name(t));
                s = KILN_ERR_UNSUPPORTED;
                break;
            }
            if (s == KILN_OK) s = ops->upload(dev, dm, doff, (char *)qtmp + sb, db, err, sizeof err);
            if (s != KILN_OK) graph_run_error(g, s, "kiln_run: kernel %d: %s", (int)k, err);
            continue;
        }
        int64_t total = 1, outer = 1, ext[KILN_MAX_DIMS];
        for (int d = 0; d < K->ndim && s == KILN_OK; d++) {
            int64_t v = 0;
            snprintf(what, sizeof what, "the loops of kernel %d", (int)k);
            EVAL(K->dim[d], &v, what);
            ext[d] = v;
            total *= v;
            if (d + 1 < K->ndim) outer *= v;
        }
        if (s != KILN_OK) break;
        if (total <= 0) continue;
        cg_gpu_mode mode = cg_gpu_kernel_mode(sp, k);
        int64_t items = mode == CG_GPU_SERIAL ? 1 : mode == CG_GPU_ROW ? outer : total;
        int group = mode == CG_GPU_SERIAL ? 1 : gp->group;
        char name[48];
        snprintf(name, sizeof name, "kiln_k%d", (int)k);
        rt_gpu_prog *prog = gp->prog;
        const gpu_choice *ch = NULL;
        if (K->contract && gp->contract.form != CG_GPU_CF_GENERIC) {
            int64_t m = K->contract->mdim >= 0 ? ext[K->contract->mdim] : 1, nn = ext[K->contract->ndim];
            ch = &gp->choice[k * 2 + (m > SCH_SMALL_M)];
            const cg_gpu_contract_sched *cs = ch->decided ? &ch->s : &gp->contract;
            if (cs->form != CG_GPU_CF_GENERIC) {
                /* blocks of (m, n) outputs per batch point, a fixed group each */
                int64_t bm = cg_gpu_contract_block_m(cs), bn = cg_gpu_contract_block_n(cs);
                group = cg_gpu_contract_threads(cs);
                items = total / (m * nn) * ((m + bm - 1) / bm) * ((nn + bn - 1) / bn) * group;
                if (ch->prog) {
                    prog = ch->prog;
                    snprintf(name, sizeof name, "%s", ch->name);
                } else {
                    cg_gpu_contract_entry(cs, k, name, sizeof name);
                }
            }
        }
        int na = 0;
        args[na++] = (rt_gpu_arg){RT_GPU_ARG_MEM, gp->arena, 0};
        args[na++] = (rt_gpu_arg){RT_GPU_ARG_MEM, gp->vbuf, 0};
        args[na++] = (rt_gpu_arg){RT_GPU_ARG_MEM, gp->obuf, 0};
        args[na++] = (rt_gpu_arg){RT_GPU_ARG_MEM, gp->ebuf, 0};
        args[na++] = (rt_gpu_arg){RT_GPU_ARG_I64, 0, items};
        int32_t nx = cg_gpu_kernel_args(sp, k, gp->args_tmp);
        for (int32_t i = 0; i < nx; i++) args[na++] = (rt_gpu_arg){RT_GPU_ARG_MEM, gp->mem[gp->args_tmp[i]], 0};
        if (ch && !ch->decided) {
            /* first run of this contraction at this M bucket: the DB's
             * schedule, else a search within the budget, else the default */
            int64_t m = K->contract->mdim >= 0 ? ext[K->contract->mdim] : 1, nn = ext[K->contract->ndim];
            int64_t rn = 0;
            snprintf(what, sizeof what, "contraction kernel %d", (int)k);
            EVAL(K->rdim, &rn, what);
            if (s != KILN_OK) break;
            int done = 0;
            s = decide_contract(gp, sp, k, m, nn, total / (m * nn), rn, args, na, total, &done, err, sizeof err);
            if (s != KILN_OK) {
                graph_run_error(g, s, "kiln_run: kernel %d: %s", (int)k, err);
                break;
            }
            if (done) continue; /* the search left its winner's result */
            k--;                /* launch with the decision */
            continue;
        }
        s = ops->launch(dev, prog, name, args, na, items, group, err, sizeof err);
        if (s != KILN_OK) graph_run_error(g, s, "kiln_run: kernel %d: %s", (int)k, err);
    }
    free(args);
    free(qtmp);
    if (s == KILN_OK) {
        s = ops->finish(dev, err, sizeof err);
        if (s == KILN_OK)
            s = ops->download(dev, gp->ebuf, 0, gp->kerr, (size_t)sp->nkernels * sizeof(int32_t), err, sizeof err);
        if (s != KILN_OK) graph_run_error(g, s, "kiln_run: %s", err);
    }
    for (int32_t k = 0; k < sp->nkernels && s == KILN_OK; k++) {
        if (!gp->kerr[k]) continue;
        const sch_kernel *K = &sp->kernels[k];
        if (gp->kerr[k] == 2) {
            graph_run_error(g, KILN_ERR_UNSUPPORTED,
                            "kiln_run: kernel %d: this device lacks the tensor-core instructions of its entry point",
                            (int)k);
            s = KILN_ERR_UNSUPPORTED;
            continue;
        }
        graph_run_error(g, KILN_ERR_RANGE, "kiln_run: a %s index is out of range (kernel %d, node %d)",
                        K->kind == SCH_K_SCATTER ? "SCATTER" : "GATHER", (int)k, (int)K->root);
        s = KILN_ERR_RANGE;
    }
    /* results (the previous run's host buffers are reused when sizes match) */
    if (s == KILN_OK) {
        res = kiln_xcalloc((size_t)g->noutputs + 1, sizeof *res);
        int32_t nold = 0;
        while (g->results && g->results[nold].ndim >= 0) nold++;
        res[g->noutputs].ndim = -1;
        for (int32_t b = 0; b < sp->nbufs && s == KILN_OK; b++) {
            const sch_buf *B = &sp->bufs[b];
            if (B->kind != SCH_BUF_RESULT) continue;
            output_value *r = &res[B->output];
            const view *V = graph_tensor_view(g, g->outputs[B->output].tensor);
            r->ndim = view_ndim(V);
            for (int d = 0; d < r->ndim && s == KILN_OK; d++) {
                snprintf(what, sizeof what, "the shape of output '%s'", g->outputs[B->output].name);
                EVAL(view_shape(V)[d], &r->dims[d], what);
            }
            r->dtype = B->dtype;
            r->bytes = gp->bytes[b];
            r->data = NULL;
            if (s != KILN_OK) break;
            if (B->output < nold && g->results[B->output].data && g->results[B->output].bytes == r->bytes) {
                r->data = g->results[B->output].data;
                g->results[B->output].data = NULL;
            } else {
                r->data = malloc(r->bytes ? r->bytes : 1);
            }
            if (!r->data) {
                graph_run_error(g, KILN_ERR_NOMEM, "kiln_run: cannot allocate %zu bytes for output '%s'", r->bytes,
                                g->outputs[B->output].name);
                s = KILN_ERR_NOMEM;
                break;
            }
            s = ops->download(dev, gp->mem[b], 0, r->data, r->bytes, err, sizeof err);
            if (s != KILN_OK) graph_run_error(g, s, "kiln_run: output '%s': %s", g->outputs[B->output].name, err);
        }
    }
    /* states written back */
    for (int32_t b = 0; b < sp->nbufs && s == KILN_OK && !gp->resident; b++) {
        const sch_buf *B = &sp->bufs[b];
        if (B->kind != SCH_BUF_STATE) continue;
        const char *name = g->nodes[B->node].name;
        for (int32_t i = 0; i < g->ninputs && s == KILN_OK; i++) {
            if (strcmp(g->inputs[i].name, name) != 0) continue;
            s = ops->download(dev, gp->mem[b], 0, g->inputs[i].data, gp->bytes[b], err, sizeof err);
            if (s != KILN_OK) graph_run_error(g, s, "kiln_run: state '%s': %s", name, err);
        }
    }
#undef EVAL
    free(values);
    free(bound);
    if (s != KILN_OK) {
        /* a failed run may leave device state half-updated: upload again next time */
        for (int32_t b = 0; b < sp->nbufs; b++) gp->host_seen[b] = NULL;
        free_results(res, g->noutputs);
        graph_free_results(g);
        return s;
    }
    graph_free_results(g);
    g->results = res;
    g->status = KILN_OK;
    g->error[0] = 0;
    return KILN_OK;
}

/* ---- the GPU backends in the backend table ----
 * Only name, fingerprint, supports and emit are meaningful: kiln_compile
 * hands GPU backends to rt_gpu_program_new before it would use the rest,
 * which refuse politely. */

static int gpu_supports(const sch_program *p, int32_t kernel) {
    const sch_kernel *K = &p->kernels[kernel];
    if (!cg_dtype_supported(p->bufs[K->out_buf].dtype)) return 0;
    if (cg_gpu_is_device_kernel(p, kernel) && kiln_dtype_is_block(p->bufs[K->out_buf].dtype)) return 0;
    return 1;
}
static cg_isa gpu_isa(void) { return CG_ISA_SCALAR; }
static kiln_status gpu_compile(const char *src, const char *cflags, rt_module **out, char *err, size_t errcap) {
    (void)src;
    (void)cflags;
    *out = NULL;
    snprintf(err, errcap, "GPU backends compile through rt_gpu_program_new");
    return KILN_ERR_UNSUPPORTED;
}
static void *gpu_symbol(rt_module *m, const char *name) {
    (void)m;
    (void)name;
    return NULL;
}
static const char *gpu_module_path(const rt_module *m) {
    (void)m;
    return "";
}
static void gpu_module_free(rt_module *m) { (void)m; }
static void *gpu_alloc(size_t bytes) { return malloc(bytes ? bytes : 1); }
static void gpu_dealloc(void *ptr) { free(ptr); }
static void gpu_copy(void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }
static int gpu_launch(rt_pool *pool, rt_kernel_fn fn, void *const *bufs, const int64_t *vars, int64_t n, int64_t chunk,
                      int64_t flags, int serial) {
    (void)pool, (void)fn, (void)bufs, (void)vars, (void)n, (void)chunk, (void)flags, (void)serial;
    return 1;
}
static void gpu_sync(void) {}

static char *gpu_fp(const rt_gpu_ops *ops) {
    rt_gpu *d = NULL;
    char err[1024];
    if (rt_gpu_default_device(ops, &d, err, sizeof err) != KILN_OK) {
        size_t n = strlen(err) + 64;
        char *s = kiln_xmalloc(n);
        snprintf(s, n, "%s;unavailable", ops->name);
        return s;
    }
    return ops->fingerprint(d);
}
static char *ocl_fp(void) { return gpu_fp(&rt_opencl_ops); }
static char *cuda_fp(void) { return gpu_fp(&rt_cuda_ops); }
static char *ocl_emit(const sch_program *p, const cg_options *opt) {
    (void)opt;
    cg_gpu_options o = {CG_GPU_OPENCL, cg_gpu_contract_default()};
    return cg_emit_gpu(p, &o);
}
static char *cuda_emit(const sch_program *p, const cg_options *opt) {
    (void)opt;
    cg_gpu_options o = {CG_GPU_CUDA, cg_gpu_contract_default()};
    return cg_emit_gpu(p, &o);
}

static const rt_backend opencl_backend = {"opencl", ocl_fp, gpu_supports, gpu_isa, ocl_emit, gpu_compile,
                                          gpu_symbol, gpu_module_path, gpu_module_free, gpu_alloc, gpu_dealloc,
                                          gpu_copy, gpu_launch, gpu_sync};
static const rt_backend cuda_backend = {"cuda", cuda_fp, gpu_supports, gpu_isa, cuda_emit, gpu_compile,
                                        gpu_symbol, gpu_module_path, gpu_module_free, gpu_alloc, gpu_dealloc,
                                        gpu_copy, gpu_launch, gpu_sync};

const rt_backend *rt_gpu_backend_find(const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "opencl") == 0) return &opencl_backend;
    if (strcmp(name, "cuda") == 0) return &cuda_backend;
    return NULL;
}

/* ---- `kiln device` ---- */

char *rt_gpu_device_report(int json) {
    const rt_gpu_ops *all[2] = {&rt_opencl_ops, &rt_cuda_ops};
    char *s = NULL;
    size_t len = 0, cap = 0;
    for (int i = 0; i < 2; i++) {
        const rt_gpu_ops *ops = all[i];
        char err[1024] = "";
        int n = ops->count(err, sizeof err);
        if (json) sch_appendf(&s, &len, &cap, "%s\"%s\": {\"devices\": [", i ? ", " : "", ops->name);
        else sch_appendf(&s, &len, &cap, "backend %s: %d device%s\n", ops->name, n, n == 1 ? "" : "s");
        for (int j = 0; j < n; j++) {
            rt_gpu *d = NULL;
            char e2[1024];
            if (ops->open(j, &d, e2, sizeof e2) != KILN_OK) {
                if (json) sch_appendf(&s, &len, &cap, "%s{\"index\": %d, \"error\": \"%s\"}", j ? ", " : "", j, e2);
                else sch_appendf(&s, &len, &cap, "  [%d] cannot open: %s\n", j, e2);
                continue;
            }
            char *fp = ops->fingerprint(d);
            if (json) {
                sch_appendf(&s, &len, &cap, "%s{\"index\": %d, \"fingerprint\": \"", j ? ", " : "", j);
                for (const char *c = fp; *c; c++)
                    sch_appendf(&s, &len, &cap, *c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
                sch_appendf(&s, &len, &cap, "\"}");
            } else {
                char *desc = ops->describe(d);
                sch_appendf(&s, &len, &cap, "  [%d] fingerprint %s\n%s", j, fp, desc);
                free(desc);
            }
            free(fp);
            ops->close(d);
        }
        if (json) {
            sch_appendf(&s, &len, &cap, "]");
            if (n == 0) {
                sch_appendf(&s, &len, &cap, ", \"note\": \"");
                for (const char *c = err; *c; c++)
                    sch_appendf(&s, &len, &cap, *c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
                sch_appendf(&s, &len, &cap, "\"");
            }
            sch_appendf(&s, &len, &cap, "}");
        } else if (n == 0) {
            sch_appendf(&s, &len, &cap, "  (%s)\n", err);
        }
    }
    return s;
}
