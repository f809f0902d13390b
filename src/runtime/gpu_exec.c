/* gpu_exec.c — the program-level members of the GPU backends (opencl.c and
 * cuda.c fill rt_backend with them through RT_GPU_BACKEND, gpu.h): each
 * drives the backend's device interface, rt_gpu_ops.
 *
 * Memory: intermediates and temps share one device arena placed by the
 * executor's liveness plan (run.c); every input, state and result has a
 * device buffer of its own, grown when a run needs more. A run uploads the
 * sym values and the arena offsets (two small i64 arrays) in begin, the
 * inputs and the states in bind, launches every kernel in order on the
 * device's in-order queue, then downloads the per-kernel range-error flags
 * (sync), the results and the states (fetch; their final values are in the
 * state buffers: kernelize ends the program with COPY kernels into them).
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

#include "base.h"
#include "config.h"
#include "dtype.h"
#include "gpu.h"
#include "gpu_tune.h"
#include "program.h"
#include "tunedb.h"


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
        snprintf(err, errcap, "too many GPU backends");
    }
    pthread_mutex_unlock(&dev_mu);
    return st;
}

/* ---- the backends' state ---- */

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

typedef struct rt_gpu_program {
    const rt_backend *be;
    const rt_gpu_ops *ops;
    rt_gpu *dev;
    rt_gpu_prog *prog;
    char device_name[300];
    int emit_only; /* KILN_GPU_EMIT_ONLY: source only, nothing to run on */
    int verbose;   /* kiln_compile_options.tune_verbose: a line per search */
    int group;
    cg_gpu_contract_sched contract; /* how contraction kernels run (KILN_GPU_CONTRACT) */
    int contract_forced;            /* KILN_GPU_CONTRACT set: no DB, no search */
    rt_gpu_caps caps;
    gpu_choice *choice; /* per contraction kernel and M bucket (k * 2 + (M > 4)) */
    int resident;
    int32_t nbufs, nkernels;
    /* per buffer */
    rt_gpu_mem *mem; /* non-arena buffers */
    size_t *memcap;
    const void **host_seen; /* RESIDENT: the binding last uploaded */
    size_t *host_seen_bytes;
    int64_t *offs;          /* arena offsets (bo) */
    rt_gpu_mem arena;
    size_t arena_cap;
    rt_gpu_mem vbuf, obuf, ebuf;
    size_t vcap, ocap;
    int32_t *args_tmp;
    rt_gpu_arg *args;
} rt_gpu_program;

static rt_gpu_program *gpu_state(const kiln_program *p) { return p->dev; }

/* ---- prepare and release ---- */

/* gpu_emit_only (KILN_GPU_EMIT_ONLY): the source alone; with cuda_archs
 * (KILN_CUDA_ARCHS, CUDA), NVRTC still checks it for the listed architectures */
static kiln_status emit_only_check(const rt_gpu_program *gp, const char *src, const char *archs, char *err,
                                   size_t errcap) {
    if (gp->ops->dialect != CG_GPU_CUDA || !archs || !archs[0]) return KILN_OK;
    char list[256], *save = NULL;
    snprintf(list, sizeof list, "%s", archs);
    for (char *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
        size_t bin = 0;
        kiln_status s = rt_cuda_compile_check(src, a, &bin, err, errcap);
        if (s != KILN_OK) return s;
    }
    return KILN_OK;
}

/* the device, the main program built, the contraction form checked against
 * what the device can do */
static kiln_status open_and_build(rt_gpu_program *gp, const char *src, char *err, size_t errcap) {
    kiln_status s = rt_gpu_default_device(gp->ops, &gp->dev, err, errcap);
    if (s == KILN_OK) s = gp->ops->build(gp->dev, src, &gp->prog, err, errcap);
    if (s != KILN_OK) return s;
    char *fp = gp->ops->fingerprint(gp->dev);
    snprintf(gp->device_name, sizeof gp->device_name, "%s", fp);
    free(fp);
    gp->ops->caps(gp->dev, &gp->caps);
    if (gp->contract.form == CG_GPU_CF_MMA && !gp->caps.tensor_mma) {
        snprintf(err, errcap, "KILN_GPU_CONTRACT: form=mma needs mma.sync (CUDA sm_80 or later); %s has not",
                 gp->device_name);
        return KILN_ERR_UNSUPPORTED;
    }
    /* a tile larger than the device's groups: the generic entry points */
    if (cg_gpu_contract_threads(&gp->contract) > gp->caps.max_group) gp->contract.form = CG_GPU_CF_GENERIC;
    return KILN_OK;
}

kiln_status rt_gpu_prepare(kiln_program *p, const kiln_compile_options *o, char *err, size_t errcap) {
    const rt_backend *be = p->plan.be;
    const sch_program *sp = &p->plan.sp;
    cg_gpu_options go;
    go.dialect = be->gpu->dialect;
    go.contract = cg_gpu_contract_default();
    const char *cs = o->gpu_contract;
    if (cs && cs[0] && !cg_gpu_contract_parse(cs, &go.contract, err, errcap)) return KILN_ERR_INVALID;
    if (go.contract.form == CG_GPU_CF_MMA && go.dialect != CG_GPU_CUDA) {
        snprintf(err, errcap, "KILN_GPU_CONTRACT: form=mma (tensor cores) is CUDA only, not %s", be->name);
        return KILN_ERR_INVALID;
    }
    p->plan.source = cg_emit_gpu(sp, &go);
    p->plan.pool = rt_pool_new(1);
    rt_gpu_program *gp = kiln_xcalloc(1, sizeof *gp);
    p->dev = gp;
    gp->be = be;
    gp->ops = be->gpu;
    gp->contract = go.contract;
    gp->contract_forced = cs && cs[0];
    gp->choice = kiln_xcalloc((size_t)sp->nkernels * 2 + 1, sizeof *gp->choice);
    gp->nbufs = sp->nbufs;
    gp->nkernels = sp->nkernels;
    gp->group = o->gpu_group ? o->gpu_group : go.dialect == CG_GPU_CUDA ? 128 : 64;
    if (gp->group < 1) gp->group = 1;
    gp->resident = o->gpu_resident != 0;
    gp->verbose = o->tune_verbose;
    size_t nb = (size_t)sp->nbufs + 1;
    gp->mem = kiln_xcalloc(nb, sizeof *gp->mem);
    gp->memcap = kiln_xcalloc(nb, sizeof *gp->memcap);
    gp->host_seen = kiln_xcalloc(nb, sizeof *gp->host_seen);
    gp->host_seen_bytes = kiln_xcalloc(nb, sizeof *gp->host_seen_bytes);
    gp->offs = kiln_xcalloc(nb, sizeof *gp->offs);
    gp->args_tmp = kiln_xcalloc(nb, sizeof *gp->args_tmp);
    gp->args = kiln_xcalloc(nb + 8, sizeof *gp->args);
    if (o->gpu_emit_only) {
        gp->emit_only = 1;
        snprintf(gp->device_name, sizeof gp->device_name, "%s: none (KILN_GPU_EMIT_ONLY)", be->name);
        return emit_only_check(gp, p->plan.source, o->cuda_archs, err, errcap);
    }
    return open_and_build(gp, p->plan.source, err, errcap);
}

void rt_gpu_release(kiln_program *p) {
    rt_gpu_program *gp = gpu_state(p);
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
    free(gp->mem);
    free(gp->memcap);
    free(gp->host_seen);
    free(gp->host_seen_bytes);
    free(gp->offs);
    free(gp->args_tmp);
    free(gp->args);
    free(gp);
    p->dev = NULL;
}

/* ---- memory ---- */

/* runs need a device: not so after KILN_GPU_EMIT_ONLY (told to the graph
 * here, err left empty, so the executor adds nothing) */
static kiln_status usable(kiln_program *p, char *err) {
    const rt_gpu_program *gp = gpu_state(p);
    if (!gp->emit_only) return KILN_OK;
    graph_run_error(p->plan.g, KILN_ERR_UNSUPPORTED,
                    "kiln_run: this %s program was compiled with KILN_GPU_EMIT_ONLY (source only, no device)",
                    gp->be->name);
    err[0] = 0;
    return KILN_ERR_UNSUPPORTED;
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

/* buffer b's own device memory for this run's size */
static kiln_status own_mem(kiln_program *p, int32_t b, char *err, size_t errcap) {
    rt_gpu_program *gp = gpu_state(p);
    if (gp->mem[b] && gp->memcap[b] < p->run.bytes[b]) gp->host_seen[b] = NULL;
    return ensure(gp, &gp->mem[b], &gp->memcap[b], p->run.bytes[b], err, errcap);
}

/* an input or a state uploaded, unless resident and unchanged */
kiln_status rt_gpu_bind(kiln_program *p, int32_t b, const void *host, size_t bytes, char *err, size_t errcap) {
    rt_gpu_program *gp = gpu_state(p);
    kiln_status s = usable(p, err);
    if (s == KILN_OK) s = own_mem(p, b, err, errcap);
    if (s != KILN_OK) return s;
    int state = p->plan.sp.bufs[b].kind == SCH_BUF_STATE;
    if (gp->resident && gp->host_seen[b] == host && gp->host_seen_bytes[b] == bytes &&
        (state || bytes >= RESIDENT_MIN))
        return KILN_OK;
    s = gp->ops->upload(gp->dev, gp->mem[b], 0, host, bytes, err, errcap);
    gp->host_seen[b] = s == KILN_OK ? host : NULL;
    gp->host_seen_bytes[b] = bytes;
    return s;
}

kiln_status rt_gpu_place(kiln_program *p, size_t need, char *err, size_t errcap) {
    rt_gpu_program *gp = gpu_state(p);
    const sch_program *sp = &p->plan.sp;
    kiln_status s = usable(p, err);
    if (s == KILN_OK) s = ensure(gp, &gp->arena, &gp->arena_cap, need, err, errcap);
    if (s != KILN_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", err);
        snprintf(err, errcap, "the arena: %s", why);
        return s;
    }
    for (int32_t b = 0; b < sp->nbufs; b++) gp->offs[b] = cg_gpu_buf_in_arena(sp, b) ? (int64_t)p->run.live[b].offset : 0;
    return KILN_OK;
}

kiln_status rt_gpu_result(kiln_program *p, int32_t b, void *host, char *err, size_t errcap) {
    (void)host;
    kiln_status s = usable(p, err);
    return s == KILN_OK ? own_mem(p, b, err, errcap) : s;
}

/* the sym values, the arena offsets and zeroed error flags, uploaded */
kiln_status rt_gpu_begin(kiln_program *p, char *err, size_t errcap) {
    rt_gpu_program *gp = gpu_state(p);
    const sch_program *sp = &p->plan.sp;
    const rt_gpu_ops *ops = gp->ops;
    kiln_status s = usable(p, err);
    if (s != KILN_OK) return s;
    uint32_t nv = p->run.nvalues;
    size_t vb = ((size_t)nv + 1) * sizeof(int64_t), ob = ((size_t)sp->nbufs + 1) * sizeof(int64_t);
    size_t eb = ((size_t)sp->nkernels + 1) * sizeof(int32_t);
    s = ensure(gp, &gp->vbuf, &gp->vcap, vb, err, errcap);
    if (s == KILN_OK) s = ensure(gp, &gp->obuf, &gp->ocap, ob, err, errcap);
    if (s == KILN_OK && !gp->ebuf) s = ops->alloc(gp->dev, eb, &gp->ebuf, err, errcap);
    memset(p->run.kerr, 0, eb);
    if (s == KILN_OK) s = ops->upload(gp->dev, gp->vbuf, 0, p->run.values, (size_t)nv * sizeof(int64_t), err, errcap);
    if (s == KILN_OK) s = ops->upload(gp->dev, gp->obuf, 0, gp->offs, (size_t)sp->nbufs * sizeof(int64_t), err, errcap);
    if (s == KILN_OK) s = ops->upload(gp->dev, gp->ebuf, 0, p->run.kerr, eb, err, errcap);
    return s;
}

kiln_status rt_gpu_copy(kiln_program *p, int32_t dst, int32_t src, size_t bytes, char *err, size_t errcap) {
    rt_gpu_program *gp = gpu_state(p);
    size_t so = 0, doff = 0;
    rt_gpu_mem sm = buf_mem(gp, &p->plan.sp, src, &so), dm = buf_mem(gp, &p->plan.sp, dst, &doff);
    if (sm == dm && so == doff) return KILN_OK;
    return gp->ops->copy(gp->dev, dm, doff, sm, so, bytes, err, errcap);
}

/* a host step: 1 downloads b into host, 2 lends host to write, 0 uploads it */
kiln_status rt_gpu_host_step(kiln_program *p, int32_t b, int to_host, void *host, void **out, char *err,
                             size_t errcap) {
    rt_gpu_program *gp = gpu_state(p);
    size_t off = 0;
    rt_gpu_mem m = buf_mem(gp, &p->plan.sp, b, &off);
    *out = host;
    if (to_host == 1) return gp->ops->download(gp->dev, m, off, host, p->run.bytes[b], err, errcap);
    if (to_host == 0) return gp->ops->upload(gp->dev, m, off, host, p->run.bytes[b], err, errcap);
    return KILN_OK;
}

/* the queue drained, then every kernel's error flag */
kiln_status rt_gpu_sync(kiln_program *p, char *err, size_t errcap) {
    rt_gpu_program *gp = gpu_state(p);
    kiln_status s = gp->ops->finish(gp->dev, err, errcap);
    if (s != KILN_OK) return s;
    return gp->ops->download(gp->dev, gp->ebuf, 0, p->run.kerr, (size_t)p->plan.sp.nkernels * sizeof(int32_t), err,
                             errcap);
}

/* a result, or a state unless the device copy is the truth (resident) */
kiln_status rt_gpu_fetch(kiln_program *p, int32_t b, void *host, size_t bytes, char *err, size_t errcap) {
    rt_gpu_program *gp = gpu_state(p);
    if (gp->resident && p->plan.sp.bufs[b].kind == SCH_BUF_STATE) return KILN_OK;
    return gp->ops->download(gp->dev, gp->mem[b], 0, host, bytes, err, errcap);
}

/* a failed run may leave device state half-updated: upload again next time */
void rt_gpu_abandon(kiln_program *p) {
    rt_gpu_program *gp = gpu_state(p);
    for (int32_t b = 0; gp && b < gp->nbufs; b++) gp->host_seen[b] = NULL;
}

/* ---- kernels ---- */

/* the tuning DB's bucket of a contraction on a GPU */
static void gpu_bucket(int64_t m, int64_t n, int64_t rn, int64_t nbatch, char *buf, size_t cap) {
    snprintf(buf, cap, "gpu,%s,n=%lld,k=%lld,b=%lld", m > SCH_SMALL_M ? "m>4" : "m<=4", (long long)n,
             (long long)rn, (long long)nbatch);
}
/* settle gp->choice for contraction kernel k at this M bucket: the DB's
 * record for this device, else (with search budget left, and
 * KILN_GPU_CONTRACT unset) a search on this run's buffers, whose winner has
 * then already run (*ran = 1), else the default */
static kiln_status decide_contract(kiln_program *p, int32_t k, int64_t m, int64_t n, int64_t nbatch, int64_t rn,
                                   const rt_gpu_arg *args, int na, int64_t total, int *ran, char *err, size_t errcap) {
    rt_gpu_program *gp = gpu_state(p);
    const sch_program *sp = &p->plan.sp;
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
    if (p->tune.budget <= p->tune.spent) return KILN_OK;
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
    j.out_bytes = p->run.bytes[K->out_buf];
    j.tensor_mma = gp->caps.tensor_mma;
    j.max_group = gp->caps.max_group;
    j.inject_wrong = p->tune.inject_wrong;
    double left = p->tune.budget - p->tune.spent, share = p->tune.budget / 8 > 2.0 ? p->tune.budget / 8 : 2.0;
    j.budget_s = left < share ? left : share;
    int show = isatty(2) || gp->verbose;
    if (show) fprintf(stderr, "kiln tune: %s kernel %d (%s, %s): searching ...\n", gp->be->name, (int)k,
                      K->contract->key, bucket);
    rt_gpu_tune_result r;
    char terr[1024];
    kiln_status s = rt_gpu_tune_contract(&j, &r, terr, sizeof terr);
    free(jargs);
    p->tune.spent += r.seconds;
    p->tune.measurements += r.tried;
    *ran = 1;
    if (s != KILN_OK) {
        fprintf(stderr, "kiln tune: %s kernel %d: search failed (%s); keeping the default schedule\n", gp->be->name,
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
                gp->be->name, (int)k, r.best_s * 1e6, rec.schedule, r.base_s * 1e6, r.tried, r.rejected);
    char derr[512];
    if (sch_tunedb_store(&rec, derr, sizeof derr) != KILN_OK)
        fprintf(stderr, "kiln tune: could not save the result: %s\n", derr);
    return KILN_OK;
}


/* the entry point, its program, items and group of contraction kernel k
 * with a contraction form: the M bucket's choice, else the default form */
static void contract_launch(rt_gpu_program *gp, const sch_kernel *K, int32_t k, const rt_extent *e, rt_gpu_prog **prog,
                            char *name, size_t namecap, int64_t *items, int *group) {
    int64_t m = K->contract->mdim >= 0 ? e->dim[K->contract->mdim] : 1, nn = e->dim[K->contract->ndim];
    const gpu_choice *ch = &gp->choice[k * 2 + (m > SCH_SMALL_M)];
    const cg_gpu_contract_sched *cs = ch->decided ? &ch->s : &gp->contract;
    if (cs->form == CG_GPU_CF_GENERIC) return;
    /* blocks of (m, n) outputs per batch point, a fixed group each */
    int64_t bm = cg_gpu_contract_block_m(cs), bn = cg_gpu_contract_block_n(cs);
    *group = cg_gpu_contract_threads(cs);
    *items = e->total / (m * nn) * ((m + bm - 1) / bm) * ((nn + bn - 1) / bn) * *group;
    if (ch->prog) {
        *prog = ch->prog;
        snprintf(name, namecap, "%s", ch->name);
    } else {
        cg_gpu_contract_entry(cs, k, name, namecap);
    }
}

/* the arguments of kernel k (emit_gpu.h's ABI) into gp->args; their count */
static int kernel_args(rt_gpu_program *gp, const sch_program *sp, int32_t k, int64_t items) {
    rt_gpu_arg *args = gp->args;
    int na = 0;
    args[na++] = (rt_gpu_arg){RT_GPU_ARG_MEM, gp->arena, 0};
    args[na++] = (rt_gpu_arg){RT_GPU_ARG_MEM, gp->vbuf, 0};
    args[na++] = (rt_gpu_arg){RT_GPU_ARG_MEM, gp->obuf, 0};
    args[na++] = (rt_gpu_arg){RT_GPU_ARG_MEM, gp->ebuf, 0};
    args[na++] = (rt_gpu_arg){RT_GPU_ARG_I64, 0, items};
    int32_t nx = cg_gpu_kernel_args(sp, k, gp->args_tmp);
    for (int32_t i = 0; i < nx; i++) args[na++] = (rt_gpu_arg){RT_GPU_ARG_MEM, gp->mem[gp->args_tmp[i]], 0};
    return na;
}

/* one kernel enqueued; a contraction's first launch at an M bucket settles
 * its schedule first (the DB's, else a search whose winner has then run,
 * else the default) */
kiln_status rt_gpu_run_kernel(kiln_program *p, int32_t k, const rt_extent *e, char *err, size_t errcap) {
    rt_gpu_program *gp = gpu_state(p);
    const sch_program *sp = &p->plan.sp;
    const sch_kernel *K = &sp->kernels[k];
    for (int settled = 0;; settled = 1) {
        cg_gpu_mode mode = cg_gpu_kernel_mode(sp, k);
        int64_t items = mode == CG_GPU_SERIAL ? 1 : mode == CG_GPU_ROW ? e->outer : e->total;
        int group = mode == CG_GPU_SERIAL ? 1 : gp->group;
        char name[48];
        snprintf(name, sizeof name, "kiln_k%d", (int)k);
        rt_gpu_prog *prog = gp->prog;
        int contract = K->contract && gp->contract.form != CG_GPU_CF_GENERIC;
        if (contract) contract_launch(gp, K, k, e, &prog, name, sizeof name, &items, &group);
        int na = kernel_args(gp, sp, k, items);
        int64_t m = contract && K->contract->mdim >= 0 ? e->dim[K->contract->mdim] : 1;
        if (!contract || settled || gp->choice[k * 2 + (m > SCH_SMALL_M)].decided)
            return gp->ops->launch(gp->dev, prog, name, gp->args, na, items, group, err, errcap);
        int64_t nn = e->dim[K->contract->ndim], rn = 0;
        char what[64];
        snprintf(what, sizeof what, "contraction kernel %d", (int)k);
        kiln_status s = rt_run_eval(p, K->rdim, &rn, what);
        if (s != KILN_OK) {
            err[0] = 0; /* reported */
            return s;
        }
        int done = 0;
        s = decide_contract(p, k, m, nn, e->total / (m * nn), rn, gp->args, na, e->total, &done, err, errcap);
        if (s != KILN_OK || done) return s; /* the search left its winner's result */
    }
}

/* ---- what the registry and `kiln device` ask ---- */

int rt_gpu_supports(const sch_program *p, int32_t kernel) {
    const sch_kernel *K = &p->kernels[kernel];
    if (!cg_dtype_supported(p->bufs[K->out_buf].dtype)) return 0;
    if (cg_gpu_is_device_kernel(p, kernel) && kiln_dtype_is_block(p->bufs[K->out_buf].dtype)) return 0;
    return 1;
}

char *rt_gpu_fingerprint(const rt_backend *be) {
    rt_gpu *d = NULL;
    char err[1024];
    if (rt_gpu_default_device(be->gpu, &d, err, sizeof err) != KILN_OK) return NULL;
    return be->gpu->fingerprint(d);
}

/* text, or a JSON string's body, escaped */
static void append_escaped(char **s, size_t *len, size_t *cap, const char *text) {
    for (const char *c = text; *c; c++) sch_appendf(s, len, cap, *c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
}

/* every device of the backend with its fingerprint, or why there is none */
char *rt_gpu_devices(const rt_backend *be, int json) {
    const rt_gpu_ops *ops = be->gpu;
    char *s = NULL;
    size_t len = 0, cap = 0;
    char err[1024] = "";
    int n = ops->count(err, sizeof err);
    if (json) sch_appendf(&s, &len, &cap, "\"%s\": {\"devices\": [", be->name);
    else sch_appendf(&s, &len, &cap, "backend %s: %d device%s\n", be->name, n, n == 1 ? "" : "s");
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
            append_escaped(&s, &len, &cap, fp);
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
            append_escaped(&s, &len, &cap, err);
            sch_appendf(&s, &len, &cap, "\"");
        }
        sch_appendf(&s, &len, &cap, "}");
    } else if (n == 0) {
        sch_appendf(&s, &len, &cap, "  (%s)\n", err);
    }
    return s;
}
