/* exec.c — kiln_compile and kiln_run: the compiled program and its execution.
 *
 * kiln_compile: kernelize the graph, emit C for the backend's ISA, compile
 * and load it, look up every kernel function. Nothing about sizes is fixed:
 * kiln_run evaluates the graph's symbolic sizes under the current bindings,
 * plans the arena for those sizes (only when they changed), binds the
 * caller's input and state buffers in place, allocates the results, and
 * launches the kernels in order.
 *
 * Invariants: bufs[] (per program buffer) points at the caller's memory for
 * inputs and states, into the arena for intermediates and temps, and at the
 * freshly allocated results; results are handed to the graph (g->results,
 * terminated by ndim -1, as the reference interpreter leaves them) only after
 * every kernel succeeded. A range error inside a kernel stops the run with
 * KILN_ERR_RANGE; state updated in place before that point stays updated
 * (unlike the reference interpreter, which writes states back only on
 * success).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiln_compile.h"
#include "backend.h"
#include "base.h"
#include "dtype.h"
#include "memplan.h"
#include "quant.h"
#include "rewrite.h"
#include "gpu.h"
#include "contract.h"
#include "search.h"
#include "cc_split.h"
#include "tune.h"
#include "tunedb.h"
#include "tune_generic.h"
#include "../codegen/emit_contract.h"
#include "../codegen/emit_gemm_amx_bf16.h"
#include "../codegen/emit_gemm_i8.h"
#include "repack.h"
#include "stream_select.h"

struct kiln_program {
    kiln_graph *g;    /* what the kernels compute: the e-graph's extraction of user */
    kiln_graph *user; /* the caller's graph: bindings come from it, results go to it */
    int compiling;    /* set while kiln_compile runs: errors on g are copied to user on free */
    const rt_backend *be;
    sch_program sp;
    char *source;
    rt_module *mod;
    rt_kernel_fn *fns; /* per kernel (NULL for host steps) */
    rt_gpu_program *gpu; /* GPU backends: device code and buffers (gpu_exec.c); NULL on the CPU */
    rt_pool *pool;
    cg_isa isa;
    int exact; /* kiln_compile_options.exact: f32 contractions only, no tuning DB, no search */
    int fixed_defaults; /* kiln_compile_options.fixed_defaults: no record = the fixed f32 default */
    /* run state, kept between runs */
    void **bufs;
    size_t *bytes;
    rt_live *live;
    int live_ready;    /* live[].first/last computed (they do not depend on sizes) */
    int32_t *bind_at;  /* per buffer: the index of its binding in g->inputs at the last run (-1: none yet) */
    void *arena;
    size_t arena_cap, arena_used;
    int64_t *values;
    uint32_t nvalues;
    size_t stream_min; /* outputs of at least this many bytes get non-temporal stores */
    int poison;        /* KILN_POISON_RESULTS: result buffers filled with 0xff before every run */
    void *scratch;     /* bufs[sp.nbufs]: A converted once for all threads (emit_gemm_amx_bf16.h) */
    size_t scratch_cap;
    rt_repacked *repacked; /* per buffer b: its repacked copy, bufs[sp.nbufs + 1 + b] (runtime/repack.h) */
    rt_repacked *packed;   /* per buffer b: its pack copy, bufs[2 sp.nbufs + 1 + b] (runtime/repack.h) */
    int pack_copies;       /* 0: KILN_PACK_COPY=0, prefill packs B on every launch */
    rt_arena rp_arena;     /* the copies' memory */
    double *prof;      /* KILN_PROFILE: seconds per kernel, summed over runs (else NULL) */
    double *prof_bytes; /* bytes touched per kernel, summed over runs */
    double *prof_flops; /* contraction flops per kernel, summed over runs */
    uint8_t *prof_arith; /* the sch_arith of each contraction's last launch (its peak in the report) */
    int64_t prof_runs;
    /* schedule search (tune.c): per kernel and bucket, 1 once its schedule is
     * final (from the DB or measured here); seeds from other machines */
    double search_budget, search_spent;
    char *fingerprint;
    uint8_t *tuned;              /* [kernel * 2 + bucket] */
    sch_contract_sched *seeds;   /* [kernel * 2 + bucket] */
    uint8_t *has_seed;
    int retune;                  /* schedules changed during a run: re-emit after it */
    int inject_wrong;            /* KILN_TUNE_INJECT_WRONG: tests */
    int measurements;            /* candidates measured */
    rt_gtune_state *gtune;       /* generic kernels' search (tune_generic.c) */
    /* a search plan (kiln_program_search): where the budget goes. plan_w
     * [kernel * 2 + bucket]: seconds the kernel takes in the planned
     * workload (NULL: no plan, every kernel shape may take an eighth);
     * reserve_s: the final recompile with the winners, kept out of the
     * search's share; searched/skipped: kernel slots settled by the plan */
    double *plan_w;
    sch_contract_sched *pend; /* [kernel * 2 + bucket]: a winner the plan applies when it ends */
    uint8_t *kept;            /* [kernel * 2 + bucket]: the plan passed it over (recorded as kept, tried 0) */
    uint8_t *unmeasured;      /* [kernel * 2 + bucket]: its schedule is a "kept" record: a search may try it */
    uint8_t *has_pend;
    double reserve_s;
    int plan_searched, plan_skipped, plan_pending;
    double plan_best_speedup;
    kiln_search_progress_fn progress; /* called after each search under a plan (NULL: none) */
    void *progress_ctx;
};

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* KILN_PROFILE=1: the slowest kernels of the program, on stderr, when it is freed */
static void print_profile(const kiln_program *p) {
    double total = 0;
    int32_t nk = p->sp.nkernels;
    for (int32_t k = 0; k < nk; k++) total += p->prof[k];
    fprintf(stderr, "kiln profile: %lld runs, %.3f ms per run in %d kernels; slowest:\n", (long long)p->prof_runs,
            p->prof_runs ? 1e3 * total / (double)p->prof_runs : 0.0, (int)nk);
    int8_t *shown = kiln_xcalloc((size_t)nk + 1, 1);
    for (int i = 0; i < 15 && i < nk; i++) {
        int32_t best = -1;
        for (int32_t k = 0; k < nk; k++)
            if (!shown[k] && (best < 0 || p->prof[k] > p->prof[best])) best = k;
        shown[best] = 1;
        const sch_kernel *K = &p->sp.kernels[best];
        static const char *kinds[] = {"map", "reduce", "scatter", "quantize", "copy"};
        fprintf(stderr, "  kernel %4d %-8s %-8s %5.1f%% %9.3f ms/run  (%d fused, %d stages)\n", (int)best, kinds[K->kind],
                K->root >= 0 ? op_table[p->g->nodes[K->root].op].name : "output", total > 0 ? 100 * p->prof[best] / total : 0,
                p->prof_runs ? 1e3 * p->prof[best] / (double)p->prof_runs : 0.0, (int)K->nfused, (int)K->nstages);
    }
    free(shown);
}

static kiln_status emit_and_load(kiln_program *p, char *err, size_t errcap);
static void apply_tuning_db(kiln_program *p);
static void drop_pack_copies(kiln_program *p);
static int contract_shape(const kiln_program *p, int32_t k, const int64_t *values, int bucket, sch_contract_shape *sh);

kiln_compile_options kiln_compile_defaults(void) {
    kiln_compile_options o;
    memset(&o, 0, sizeof o);
    o.backend = NULL; /* $KILN_BACKEND, else "cpu" (rt_backend_find) */
    const char *ex = getenv("KILN_EXACT");
    o.exact = ex && strcmp(ex, "1") == 0;
    const char *fd = getenv("KILN_FIXED_DEFAULTS");
    o.fixed_defaults = fd && strcmp(fd, "1") == 0;
    return o;
}

kiln_program *kiln_compile(kiln_graph *g, const kiln_compile_options *opt, kiln_status *st) {
    char err[4096];
    kiln_status s = KILN_OK;
    kiln_compile_options o = opt ? *opt : kiln_compile_defaults();
    if (st) *st = KILN_OK;
    if (!g) {
        if (st) *st = KILN_ERR_INVALID;
        return NULL;
    }
    const rt_backend *be = rt_backend_find(o.backend);
    if (!be) {
        graph_run_error(g, KILN_ERR_UNSUPPORTED, "kiln_compile: unknown backend '%s' (available: cpu, opencl, cuda)",
                        o.backend ? o.backend : getenv("KILN_BACKEND"));
        if (st) *st = KILN_ERR_UNSUPPORTED;
        return NULL;
    }
    if (o.threads < 0 || o.search_budget < 0) {
        graph_run_error(g, KILN_ERR_INVALID, "kiln_compile: negative threads or search budget");
        if (st) *st = KILN_ERR_INVALID;
        return NULL;
    }
    for (int32_t i = 0; i < g->nnodes; i++) {
        if ((int)g->nodes[i].op >= (int)OP_PRIM_COUNT) {
            /* compound nodes (from kiln_graph_optimize) have no kernels yet */
            graph_run_error(g, KILN_ERR_UNSUPPORTED, "kiln_compile: node %d is the compound op %s, which the CPU backend cannot compile yet",
                            (int)i, op_table[g->nodes[i].op].name);
            if (st) *st = KILN_ERR_UNSUPPORTED;
            return NULL;
        }
    }
    kiln_program *p = kiln_xcalloc(1, sizeof *p);
    p->user = g;
    p->g = g;
    p->be = be;
    p->compiling = 1;
    p->exact = o.exact != 0;
    p->fixed_defaults = o.fixed_defaults != 0;
    if (p->exact) o.search_budget = 0;
    /* the first step of compiling: graph -> e-graph -> saturation -> extraction
     * (primitives, and for the CPU the streaming SOFTMAX_CONTRACT where
     * stream_select.c asks for it; a stream the kernel layer cannot take
     * falls back to the primitive form below) */
    const char *eg_env = getenv("KILN_EGRAPH");
    int eg_mode = rt_stream_extract_mode(be->name);
retry_primitives:
    if (!(eg_env && strcmp(eg_env, "0") == 0)) {
        kiln_graph *work = eg_optimize_for_backend(g, eg_mode);
        if (!work) {
            if (st) *st = g->status != KILN_OK ? g->status : KILN_ERR_INVALID;
            kiln_program_free(p);
            return NULL;
        }
        int same_outputs = work->noutputs == g->noutputs;
        for (int32_t i = 0; same_outputs && i < g->noutputs; i++)
            same_outputs = strcmp(work->outputs[i].name, g->outputs[i].name) == 0;
        if (same_outputs) p->g = work;
        else if (eg_mode == EG_EXTRACT_STREAM) {
            kiln_graph_free(work);
            eg_mode = EG_EXTRACT_PRIMITIVES;
            goto retry_primitives;
        }
        else kiln_graph_free(work); /* results are matched by position: keep the graph as given */
        g = p->g;
    }
    s = sch_kernelize(g, &p->sp, err, sizeof err);
    if (s == KILN_ERR_UNSUPPORTED && eg_mode == EG_EXTRACT_STREAM) {
        sch_program_free(&p->sp);
        if (p->g != p->user) kiln_graph_free(p->g);
        p->g = g = p->user;
        eg_mode = EG_EXTRACT_PRIMITIVES;
        goto retry_primitives;
    }
    if (s != KILN_OK) {
        if (!g->build_failed) graph_run_error(g, s, "kiln_compile: %s", err);
        if (p->user != g) graph_run_error(p->user, s, "kiln_compile: %s", err);
        if (st) *st = s;
        kiln_program_free(p);
        return NULL;
    }
    for (int32_t b = 0; b < p->sp.nbufs; b++) {
        if (!cg_dtype_supported(p->sp.bufs[b].dtype)) {
            graph_run_error(g, KILN_ERR_UNSUPPORTED, "kiln_compile: the code generator has no support for dtype %s",
                            kiln_dtype_name(p->sp.bufs[b].dtype));
            if (st) *st = KILN_ERR_UNSUPPORTED;
            kiln_program_free(p);
            return NULL;
        }
    }
    for (int32_t k = 0; k < p->sp.nkernels; k++) {
        if (!be->supports(&p->sp, k)) {
            graph_run_error(g, KILN_ERR_UNSUPPORTED, "kiln_compile: backend %s cannot run kernel %d", be->name, k);
            if (st) *st = KILN_ERR_UNSUPPORTED;
            kiln_program_free(p);
            return NULL;
        }
    }
    const rt_gpu_ops *gops = rt_gpu_find(be->name);
    if (gops) {
        /* GPU backends: gpu_exec.c emits, builds and later runs the program */
        p->gpu = rt_gpu_program_new(gops, &p->sp, &p->source, &s, err, sizeof err);
        if (!p->gpu) {
            graph_run_error(g, s, "kiln_compile: %s", err);
            if (p->user != g) graph_run_error(p->user, s, "kiln_compile: %s", err);
            if (st) *st = s;
            kiln_program_free(p);
            return NULL;
        }
        const char *inj = getenv("KILN_TUNE_INJECT_WRONG");
        rt_gpu_program_set_search(p->gpu, o.search_budget, inj && inj[0] ? atoi(inj) : 0);
        p->pool = rt_pool_new(1);
        p->compiling = 0;
        return p;
    }
    cg_options co;
    co.isa = o.vector < 0 ? CG_ISA_SCALAR : be->isa();
    p->isa = co.isa;
    p->pool = rt_pool_new(o.threads);
    p->search_budget = o.search_budget;
    const char *inj = getenv("KILN_TUNE_INJECT_WRONG");
    if (inj && inj[0]) p->inject_wrong = atoi(inj);
    apply_tuning_db(p);
    s = emit_and_load(p, err, sizeof err);
    if (s != KILN_OK) {
        graph_run_error(g, s, "kiln_compile: %s", err);
        if (st) *st = s;
        kiln_program_free(p);
        return NULL;
    }
    const char *prof = getenv("KILN_PROFILE");
    if (prof && prof[0] && prof[0] != '0') {
        p->prof = kiln_xcalloc((size_t)p->sp.nkernels + 1, sizeof *p->prof);
        p->prof_bytes = kiln_xcalloc((size_t)p->sp.nkernels + 1, sizeof *p->prof_bytes);
        p->prof_flops = kiln_xcalloc((size_t)p->sp.nkernels + 1, sizeof *p->prof_flops);
        p->prof_arith = kiln_xcalloc((size_t)p->sp.nkernels + 1, sizeof *p->prof_arith);
    }
    /* bufs: the program's buffers, the scratch, then each buffer's repacked
     * copy, then each buffer's pack copy */
    int32_t nb = p->sp.nbufs + 1;
    p->repacked = kiln_xcalloc((size_t)nb, sizeof *p->repacked);
    p->packed = kiln_xcalloc((size_t)nb, sizeof *p->packed);
    p->bufs = kiln_xcalloc((size_t)(nb + 2 * p->sp.nbufs), sizeof *p->bufs);
    const char *pc = getenv("KILN_PACK_COPY");
    p->pack_copies = !(pc && strcmp(pc, "0") == 0);
    p->bytes = kiln_xcalloc((size_t)nb, sizeof *p->bytes);
    p->live = kiln_xcalloc((size_t)nb, sizeof *p->live);
    p->bind_at = kiln_xmalloc((size_t)nb * sizeof *p->bind_at);
    for (int32_t b = 0; b < nb; b++) p->bind_at[b] = -1;
    /* beyond the caches' reach, stores that bypass them save the read of
     * every written line (measured on the 2-core VM: 16 MiB copy 9 -> 26
     * GB/s, 256 MiB 6.7 -> 10.8 GB/s; equal at 4 MiB) */
    p->stream_min = (size_t)8 << 20;
    p->poison = getenv("KILN_POISON_RESULTS") && strcmp(getenv("KILN_POISON_RESULTS"), "0") != 0;
    const char *sm = getenv("KILN_STREAM_MIN");
    if (sm && sm[0]) p->stream_min = (size_t)strtoull(sm, NULL, 10);
    p->compiling = 0;
    return p;
}

/* emit the program, compile it, look up every kernel function (replacing a
 * previous module, after a search changed schedules) */
static kiln_status emit_and_load(kiln_program *p, char *err, size_t errcap) {
    const rt_backend *be = p->be;
    kiln_graph *g = p->g;
    cg_options co;
    co.isa = p->isa;
    char *source = be->emit(&p->sp, &co);
    rt_module *mod = NULL;
    kiln_status s = be->compile(source, cg_isa_cflags(co.isa), &mod, err, errcap);
    if (s != KILN_OK) {
        free(source);
        return s;
    }
    rt_kernel_fn *fns = kiln_xcalloc((size_t)p->sp.nkernels + 1, sizeof *fns);
    for (int32_t k = 0; k < p->sp.nkernels; k++) {
        sch_kernel_kind kk = p->sp.kernels[k].kind;
        if (kk == SCH_K_QUANTIZE || kk == SCH_K_COPY) continue;
        char name[32];
        snprintf(name, sizeof name, "kiln_k%d", k);
        void *f = be->symbol(mod, name);
        if (!f) {
            snprintf(err, errcap, "kernel %s missing from %s", name, be->module_path(mod));
            (void)g;
            be->module_free(mod);
            free(fns);
            free(source);
            return KILN_ERR_IO;
        }
        /* dlsym returns data pointers; POSIX guarantees the conversion */
        memcpy(&fns[k], &f, sizeof f);
    }
    if (p->mod) be->module_free(p->mod);
    free(p->fns);
    free(p->source);
    p->mod = mod;
    p->fns = fns;
    p->source = source;
    return KILN_OK;
}

void kiln_program_free(kiln_program *p) {
    if (!p) return;
    if (p->prof) {
        const char *pe = getenv("KILN_PROFILE");
        if (pe && strcmp(pe, "quiet") != 0) print_profile(p);
        free(p->prof);
        free(p->prof_bytes);
        free(p->prof_flops);
        free(p->prof_arith);
    }
    if (p->pool) rt_pool_free(p->pool);
    if (p->mod) p->be->module_free(p->mod);
    free(p->fingerprint);
    free(p->plan_w);
    free(p->pend);
    free(p->has_pend);
    free(p->kept);
    free(p->unmeasured);
    free(p->tuned);
    free(p->seeds);
    free(p->has_seed);
    rt_gtune_free(p->gtune);
    rt_gpu_program_free(p->gpu);
    if (p->arena) p->be->dealloc(p->arena);
    sch_program_free(&p->sp);
    free(p->source);
    free(p->fns);
    free(p->bufs);
    free(p->scratch);
    rt_arena_free(&p->rp_arena); /* every copy */
    free(p->repacked);
    free(p->packed);
    free(p->bind_at);
    free(p->bytes);
    free(p->live);
    free(p->values);
    if (p->g && p->g != p->user) {
        if (p->compiling && p->g->status != KILN_OK) graph_run_error(p->user, p->g->status, "%s", p->g->error);
        kiln_graph_free(p->g);
    }
    free(p);
}

const char *kiln_program_source(const kiln_program *p) { return p ? p->source : ""; }
const char *kiln_program_library(const kiln_program *p) { return p && p->mod ? p->be->module_path(p->mod) : ""; }
int kiln_program_kernel_count(const kiln_program *p) { return p ? (int)p->sp.nkernels : 0; }
int kiln_program_measurements(const kiln_program *p) {
    return p ? p->measurements + rt_gpu_program_measurements(p->gpu) : 0;
}
size_t kiln_program_arena_bytes(const kiln_program *p) { return p ? p->arena_used : 0; }
int kiln_program_exact(const kiln_program *p) { return p ? p->exact : 0; }

int kiln_program_arith(const kiln_program *p, int counts[2][3]) {
    memset(counts, 0, 2 * sizeof counts[0]);
    if (!p) return 0;
    int n = 0;
    for (int32_t k = 0; k < p->sp.nkernels; k++) {
        const sch_kernel *K = &p->sp.kernels[k];
        if (!K->contract) continue;
        n++;
        int emittable = !p->gpu && cg_contract_emittable(&p->sp, K, p->isa);
        for (int b = 0; b < 2; b++) {
            sch_arith a = emittable ? K->contract->sched[b].arith : SCH_ARITH_F32;
            counts[b][a == SCH_ARITH_I8 ? 1 : a == SCH_ARITH_BF16 ? 2 : 0]++;
        }
    }
    return n;
}

char *kiln_program_arith_text(const kiln_program *p) {
    static const char *names[3] = {"f32", "int8 activations", "bf16 tiles"};
    int c[2][3];
    int n = kiln_program_arith(p, c);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    sch_appendf(&buf, &len, &cap, "%d contraction%s%s:", n, n == 1 ? "" : "s",
                p && p->exact ? " (exact: f32 only)" : "");
    for (int b = 0; b < 2; b++) {
        sch_appendf(&buf, &len, &cap, "%s %s", b ? ";" : "", b ? "prefill" : "decode");
        int any = 0;
        for (int a = 0; a < 3; a++)
            if (c[b][a] || (a == 0 && n == 0)) {
                sch_appendf(&buf, &len, &cap, "%s %d %s", any ? "," : "", c[b][a], names[a]);
                any = 1;
            }
    }
    return buf ? buf : kiln_xstrdup("");
}

char *kiln_program_kernels(const kiln_program *p) {
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (!p) return kiln_xstrdup("");
    sch_appendf(&buf, &len, &cap, "%d kernels (backend %s, %s code, %d threads)\n", (int)p->sp.nkernels,
                p->be->name, cg_isa_name(p->isa), rt_pool_threads(p->pool));
    for (int32_t k = 0; k < p->sp.nkernels; k++) sch_kernel_print(&p->sp, k, &buf, &len, &cap);
    return buf;
}

/* ---- run --------------------------------------------------------------- */

/* sym_eval with our bound mask: graph variables are bound by kiln_bind_dim;
 * loop variables never appear in what the host evaluates */
static kiln_status load_values(kiln_program *p, uint8_t **bound_out) {
    kiln_graph *g = p->g;
    uint32_t n = sym_var_count(g->syms);
    if (n > p->nvalues) {
        p->values = kiln_xrealloc(p->values, ((size_t)n + 1) * sizeof *p->values);
        p->nvalues = n;
    }
    uint8_t *bound = kiln_xcalloc((size_t)n + 1, 1);
    for (uint32_t v = 0; v < n; v++) {
        p->values[v] = v < g->ndim_values ? g->dim_values[v] : 0;
        bound[v] = v < g->ndim_values ? g->dim_bound[v] : 0;
    }
    *bound_out = bound;
    return KILN_OK;
}

static kiln_status eval_sym_b(kiln_program *p, const uint8_t *bound, sym_id s, int64_t *out, const char *what) {
    uint32_t missing = 0;
    kiln_graph *g = p->g;
    if (sym_eval(g->syms, s, p->values, bound, out, &missing) == 0) return KILN_OK;
    const char *nm = sym_var_name(g->syms, missing);
    graph_run_error(g, KILN_ERR_UNBOUND, "kiln_run: unbound symbol '%s' (needed by %s)", nm ? nm : "?", what);
    return KILN_ERR_UNBOUND;
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

static void free_results(output_value *r, int32_t n) {
    if (!r) return;
    for (int32_t i = 0; i < n; i++) free(r[i].data);
    free(r);
}

static kiln_status run_work(kiln_program *p);

/* the conditions the builder could not prove (a symbolic slice's stop <=
 * size, ...), checked on the caller's graph under its bindings: compiled code
 * must never read past a buffer because of a bad binding */
static kiln_status check_user_conditions(kiln_graph *user) {
    if (user->nchecks == 0) return KILN_OK;
    uint32_t n = sym_var_count(user->syms);
    int64_t *values = kiln_xcalloc((size_t)n + 1, sizeof *values);
    uint8_t *bound = kiln_xcalloc((size_t)n + 1, 1);
    for (uint32_t v = 0; v < n && v < user->ndim_values; v++) {
        values[v] = user->dim_values[v];
        bound[v] = user->dim_bound[v];
    }
    kiln_status s = graph_run_checks(user, values, bound);
    free(values);
    free(bound);
    return s;
}

kiln_status kiln_run(kiln_program *p) {
    if (!p) return KILN_ERR_INVALID;
    if (p->user->build_failed) return p->user->status;
    kiln_status cs = check_user_conditions(p->user);
    if (cs != KILN_OK) return cs;
    if (p->g == p->user) return run_work(p);
    kiln_graph *user = p->user, *work = p->g;
    eg_copy_bindings(user, work);
    /* hand the previous results back so that their buffers are reused */
    graph_free_results(work);
    work->results = user->results;
    user->results = NULL;
    kiln_status s = run_work(p);
    if (s != KILN_OK) {
        graph_run_error(user, s, "%s", work->error);
        return s;
    }
    user->results = work->results; /* outputs correspond by position (checked at compile) */
    work->results = NULL;
    user->status = KILN_OK;
    user->error[0] = 0;
    return KILN_OK;
}

/* bytes of every buffer kernel K reads or writes (each once). A map
 * kernel without stages reads at most one element per load and domain
 * point, so a buffer it loads counts at most that much: an embedding row
 * gathered from a 179 MB table is 2.5 KB, not the table. */
static void count_loads(const sch_program *sp, int32_t id, uint16_t *loads) {
    if (id < 0) return;
    const lx *x = &sp->lx[id];
    if (x->kind == LX_LOAD && loads[x->buf] < UINT16_MAX) loads[x->buf]++;
    count_loads(sp, x->a, loads);
    count_loads(sp, x->b, loads);
}

static double kernel_bytes(const kiln_program *p, const sch_kernel *K, int64_t domain) {
    uint16_t *loads = kiln_xcalloc((size_t)p->sp.nbufs + 1, sizeof *loads);
    count_loads(&p->sp, K->expr, loads);
    for (int32_t i = 0; i < K->nstages; i++) count_loads(&p->sp, K->stages[i].expr, loads);
    int per_point = K->kind == SCH_K_MAP && K->nstages == 0 && domain > 0;
    double b = 0;
    for (int32_t i = 0; i < p->sp.nbufs; i++) {
        double bi = (double)p->bytes[i];
        if (i == K->out_buf || i == K->src_buf) {
            b += bi;
            continue;
        }
        if (!loads[i]) continue;
        if (per_point) {
            double most = (double)loads[i] * (double)kiln_dtype_bytes(p->sp.bufs[i].dtype, domain);
            if (most < bi) bi = most;
        }
        b += bi;
    }
    free(loads);
    return b;
}

/* ---- the search, steered: a plan of where the budget goes ------------- */

int kiln_program_untuned(const kiln_program *p) {
    if (!p || p->gpu || p->exact) return 0;
    int n = 0;
    for (int32_t k = 0; k < p->sp.nkernels; k++) {
        const sch_kernel *K = &p->sp.kernels[k];
        if (!K->contract || !cg_contract_emittable(&p->sp, K, p->isa)) continue;
        for (int b = 0; b < 2; b++) n += !p->tuned[k * 2 + b] && (b == 0 || K->contract->mdim >= 0);
    }
    return n;
}

/* the recompile of the whole program with new schedules: its bytes of C at
 * the build's rate (cc_split.h); tuned forms are longer than the defaults
 * (gemma3-270m's program grew from 2.0 to 3.1 MB of C after its first search) */
static double recompile_estimate(const kiln_program *p) {
    size_t len = p->source ? strlen(p->source) : 0;
    /* a machine busier than its cores stretches a compile by about the load
     * per core (a tiny program measured 0.55 s estimated against 6.4 s real
     * at load 11.6 on 2 cores); overestimating only shortens the search */
    double load = 0, stretch = 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) == 1 && cores > 0 && load > (double)cores) stretch = load / (double)cores;
        fclose(f);
    }
    return stretch * (1.5 * rt_cc_seconds_per_byte() * (double)len + 0.25);
}

/* settle, unsearched, every kernel whose group (same key: one search
 * settles them all) takes less than min_share of its bucket's time */
static void plan_skip_small(kiln_program *p, double min_share) {
    int32_t nk = p->sp.nkernels;
    double total[2] = {0, 0};
    for (int32_t k = 0; k < nk; k++)
        for (int b = 0; b < 2; b++) total[b] += p->plan_w[k * 2 + b];
    for (int32_t k = 0; k < nk; k++) {
        const sch_kernel *K = &p->sp.kernels[k];
        int contract = K->contract && cg_contract_emittable(&p->sp, K, p->isa);
        const char *key = contract ? K->contract->key : rt_gtune_key(p->gtune, k);
        if (!contract && !rt_gtune_wanted(p->gtune, k)) continue;
        double group[2] = {0, 0};
        for (int32_t j = 0; j < nk; j++) {
            const sch_kernel *J = &p->sp.kernels[j];
            const char *kj = contract ? (J->contract ? J->contract->key : "") : rt_gtune_key(p->gtune, j);
            if (strcmp(kj, key) != 0) continue;
            for (int b = 0; b < 2; b++) group[b] += p->plan_w[j * 2 + b];
        }
        int small[2];
        for (int b = 0; b < 2; b++) small[b] = group[b] < min_share * total[b] || total[b] <= 0;
        if (contract) {
            for (int b = 0; b < 2; b++)
                if (!p->tuned[k * 2 + b] && small[b]) {
                    p->tuned[k * 2 + b] = 1;
                    p->kept[k * 2 + b] = 1;
                    p->plan_skipped++;
                }
        } else if (small[0] && small[1]) {
            rt_gtune_settle(p->gtune, k);
            p->plan_skipped++;
        }
    }
}

kiln_status kiln_program_search(kiln_program *p, double budget_s, const double *weights, double min_share) {
    if (!p || !(budget_s >= 0) || !(min_share >= 0 && min_share < 1)) return KILN_ERR_INVALID;
    if (p->exact) {
        graph_run_error(p->user, KILN_ERR_INVALID, "kiln_program_search: an exact program keeps its f32 schedules");
        return KILN_ERR_INVALID;
    }
    if (p->gpu) {
        rt_gpu_program_set_search(p->gpu, budget_s, p->inject_wrong);
        return KILN_OK;
    }
    p->search_budget = budget_s;
    p->search_spent = 0;
    p->plan_searched = p->plan_skipped = 0;
    /* schedules a plan once kept without measuring are open to this search */
    for (int32_t k = 0; budget_s > 0 && k < p->sp.nkernels; k++)
        for (int b = 0; b < 2; b++)
            if (p->unmeasured[k * 2 + b]) p->tuned[k * 2 + b] = p->unmeasured[k * 2 + b] = 0;
    p->plan_best_speedup = 1;
    free(p->plan_w);
    p->plan_w = NULL;
    p->reserve_s = 0;
    if (!weights) return KILN_OK;
    size_t n = (size_t)p->sp.nkernels * 2;
    p->plan_w = kiln_xcalloc(n + 1, sizeof *p->plan_w);
    free(p->pend);
    free(p->has_pend);
    p->pend = kiln_xcalloc(n + 1, sizeof *p->pend);
    p->has_pend = kiln_xcalloc(n + 1, sizeof *p->has_pend);
    free(p->kept);
    p->kept = kiln_xcalloc(n + 1, 1);
    for (size_t i = 0; i < n; i++) p->plan_w[i] = weights[i] > 0 ? weights[i] : 0;
    p->reserve_s = recompile_estimate(p);
    plan_skip_small(p, min_share);
    return KILN_OK;
}

void kiln_program_search_progress(kiln_program *p, kiln_search_progress_fn fn, void *ctx) {
    if (!p) return;
    p->progress = fn;
    p->progress_ctx = ctx;
}

/* a record for every contraction slot of constant shape the plan passed
 * over or did not reach: its schedule as it is, tried 0 ("kept"), so that the
 * next run knows this machine has been searched for it (model_needs_search)
 * while a later search (kiln tune) may still try it (unmeasured) */
static void record_kept(kiln_program *p) {
    if (!p->fingerprint) p->fingerprint = kiln_device_fingerprint();
    for (int32_t k = 0; p->fingerprint && k < p->sp.nkernels; k++) {
        const sch_kernel *K = &p->sp.kernels[k];
        if (!K->contract || !cg_contract_emittable(&p->sp, K, p->isa)) continue;
        for (int b = 0; b < 2; b++) {
            if (b == 1 && K->contract->mdim < 0) continue;
            if (p->tuned[k * 2 + b] && !p->kept[k * 2 + b]) continue; /* measured, or from the DB */
            sch_contract_shape sh;
            if (!contract_shape(p, k, NULL, b, &sh)) continue; /* symbolic sizes: the latest record serves */
            char bucket[96], err[512];
            sch_bucket_text(&sh, bucket, sizeof bucket);
            sch_tune_record r;
            sch_tune_record_new(&r, p->fingerprint, K->contract->key, bucket);
            sch_contract_sched_print(&K->contract->sched[b], r.schedule, sizeof r.schedule);
            r.best_s = r.base_s = 0;
            r.tried = r.rejected = 0;
            if (sch_tunedb_store(&r, err, sizeof err) != KILN_OK) {
                fprintf(stderr, "kiln tune: %s\n", err);
                return;
            }
            p->tuned[k * 2 + b] = p->unmeasured[k * 2 + b] = 1;
        }
    }
}

kiln_status kiln_program_search_finish(kiln_program *p) {
    if (!p || p->gpu) return KILN_OK;
    kiln_status s = KILN_OK;
    if (p->kept) record_kept(p);
    free(p->kept);
    p->kept = NULL;
    for (int32_t k = 0; p->has_pend && k < p->sp.nkernels; k++)
        for (int b = 0; b < 2; b++)
            if (p->has_pend[k * 2 + b]) p->sp.kernels[k].contract->sched[b] = p->pend[k * 2 + b];
    free(p->pend);
    free(p->has_pend);
    p->pend = NULL;
    p->has_pend = NULL;
    if (p->retune) {
        char err[4096];
        double t = mono_s();
        p->retune = 0;
        drop_pack_copies(p);
        double est = recompile_estimate(p);
        s = emit_and_load(p, err, sizeof err);
        p->search_spent += mono_s() - t;
        if (getenv("KILN_TUNE_VERBOSE"))
            fprintf(stderr, "kiln tune: recompiled with the winners in %.2f s (kept aside for it: %.2f s)\n", mono_s() - t,
                    est);
        if (s != KILN_OK) graph_run_error(p->g, s, "kiln: recompiling with the tuned schedules: %s", err);
    }
    free(p->plan_w);
    p->plan_w = NULL;
    /* the search is over: later runs keep what it found, and search nothing */
    p->search_budget = p->search_spent;
    return s;
}

void kiln_program_search_status(const kiln_program *p, kiln_search_status *out) {
    memset(out, 0, sizeof *out);
    if (!p) return;
    out->budget_s = p->search_budget;
    out->spent_s = p->search_spent;
    out->reserve_s = p->reserve_s;
    out->searched = p->plan_searched;
    out->skipped = p->plan_skipped;
    out->untuned = kiln_program_untuned(p);
    for (int32_t k = 0; k < p->sp.nkernels && !p->gpu; k++) {
        const sch_kernel *K = &p->sp.kernels[k];
        if (K->contract && cg_contract_emittable(&p->sp, K, p->isa)) out->slots += 1 + (K->contract->mdim >= 0);
    }
    out->best_speedup = p->plan_best_speedup;
    out->measurements = p->measurements;
}

void kiln_program_profile_on(kiln_program *p, int on) {
    if (!p || p->gpu) return;
    size_t n = (size_t)p->sp.nkernels + 1;
    if (on && !p->prof) {
        p->prof = kiln_xcalloc(n, sizeof *p->prof);
        p->prof_bytes = kiln_xcalloc(n, sizeof *p->prof_bytes);
        p->prof_flops = kiln_xcalloc(n, sizeof *p->prof_flops);
        p->prof_arith = kiln_xcalloc(n, sizeof *p->prof_arith);
    } else if (!on && p->prof) {
        free(p->prof);
        free(p->prof_bytes);
        free(p->prof_flops);
        free(p->prof_arith);
        p->prof = p->prof_bytes = p->prof_flops = NULL;
        p->prof_arith = NULL;
    }
}

int kiln_program_kernel_times(const kiln_program *p, double *out, int n) {
    if (!p || !p->prof) return 0;
    int nk = (int)p->sp.nkernels < n ? (int)p->sp.nkernels : n;
    for (int k = 0; k < nk; k++) out[k] = p->prof[k];
    return nk;
}

void kiln_program_profile_reset(kiln_program *p) {
    if (!p || !p->prof) return;
    size_t n = (size_t)p->sp.nkernels + 1;
    memset(p->prof, 0, n * sizeof *p->prof);
    memset(p->prof_bytes, 0, n * sizeof *p->prof_bytes);
    memset(p->prof_flops, 0, n * sizeof *p->prof_flops);
    p->prof_runs = 0;
}

char *kiln_program_profile(const kiln_program *p, double bw_gbs, double fma_gflops, double dot_gops, int max_rows) {
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (!p || !p->prof || p->prof_runs == 0) return kiln_xstrdup("");
    int32_t nk = p->sp.nkernels;
    double total = 0, tbytes = 0;
    for (int32_t k = 0; k < nk; k++) {
        total += p->prof[k];
        tbytes += p->prof_bytes[k];
    }
    double runs = (double)p->prof_runs;
    sch_appendf(&buf, &len, &cap,
                "%.3f ms per run over %lld runs, %d kernels; %.1f MB touched per run (%.2f GB/s overall, %.0f%% of "
                "%.1f GB/s)\n",
                1e3 * total / runs, (long long)p->prof_runs, (int)nk, tbytes / runs / 1e6,
                total > 0 ? tbytes / total / 1e9 : 0.0, total > 0 && bw_gbs > 0 ? 100 * tbytes / total / 1e9 / bw_gbs : 0.0,
                bw_gbs);
    sch_appendf(&buf, &len, &cap, "| %6s | %-8s | %-34s | %6s | %9s | %9s | %7s | %6s | %8s | %8s |\n", "kernel", "kind",
                "what", "share", "ms/run", "MB/run", "GB/s", "of bw", "GOP/s", "of peak");
    sch_appendf(&buf, &len, &cap, "|-------:|----------|------------------------------------|-------:|----------:|----------:|--------:|-------:|---------:|---------:|\n");
    int8_t *shown = kiln_xcalloc((size_t)nk + 1, 1);
    for (int i = 0; i < max_rows && i < nk; i++) {
        int32_t best = -1;
        for (int32_t k = 0; k < nk; k++)
            if (!shown[k] && (best < 0 || p->prof[k] > p->prof[best])) best = k;
        shown[best] = 1;
        const sch_kernel *K = &p->sp.kernels[best];
        static const char *kinds[] = {"map", "reduce", "scatter", "quantize", "copy"};
        char what[64];
        if (K->contract)
            snprintf(what, sizeof what, "contract %s x f32", kiln_dtype_name(p->sp.bufs[K->contract->b_buf].dtype));
        else
            snprintf(what, sizeof what, "%s, %d fused, %d stages",
                     K->root >= 0 ? op_table[p->g->nodes[K->root].op].name : "output", (int)K->nfused, (int)K->nstages);
        double t = p->prof[best] / runs, by = p->prof_bytes[best] / runs, fl = p->prof_flops[best] / runs;
        double gbs = t > 0 ? by / t / 1e9 : 0, gfl = t > 0 ? fl / t / 1e9 : 0;
        char fls[16] = "-", flp[16] = "-";
        if (fl > 0) {
            snprintf(fls, sizeof fls, "%.1f", gfl);
            /* against the peak of the arithmetic it ran: int8 dot products,
             * bf16 pairs (twice the FMA rate), else f32 FMA */
            int ar = p->prof_arith[best];
            double peak = ar == SCH_ARITH_I8 ? dot_gops : ar == SCH_ARITH_BF16 ? 2 * fma_gflops : fma_gflops;
            if (peak > 0) snprintf(flp, sizeof flp, "%.0f%%%s", 100 * gfl / peak, ar == SCH_ARITH_I8 ? " i8" : ar == SCH_ARITH_BF16 ? " bf" : "");
        }
        sch_appendf(&buf, &len, &cap, "| %6d | %-8s | %-34.34s | %5.1f%% | %9.3f | %9.2f | %7.2f | %5.0f%% | %8s | %8s |\n",
                    (int)best, K->contract ? "contract" : kinds[K->kind], what, total > 0 ? 100 * p->prof[best] / total : 0.0,
                    1e3 * t, by / 1e6, gbs, bw_gbs > 0 ? 100 * gbs / bw_gbs : 0.0, fls, flp);
    }
    free(shown);
    /* and the same per group (contractions by weight dtype, the other
     * kernels by kind), dearest first: what a token costs in all */
    enum { NGROUP = 32 };
    char gname[NGROUP][32];
    double gt[NGROUP], gb[NGROUP];
    int gn[NGROUP], ng = 0;
    for (int32_t k = 0; k < nk; k++) {
        const sch_kernel *K = &p->sp.kernels[k];
        static const char *kinds[] = {"map", "reduce", "scatter", "quantize", "copy"};
        char name[32];
        if (K->contract) snprintf(name, sizeof name, "contract %s", kiln_dtype_name(p->sp.bufs[K->contract->b_buf].dtype));
        else snprintf(name, sizeof name, "%s", kinds[K->kind]);
        int g = 0;
        while (g < ng && strcmp(gname[g], name) != 0) g++;
        if (g == ng) {
            if (ng == NGROUP) continue;
            snprintf(gname[g], sizeof gname[g], "%s", name);
            gt[g] = gb[g] = 0;
            gn[g] = 0;
            ng++;
        }
        gt[g] += p->prof[k];
        gb[g] += p->prof_bytes[k];
        gn[g]++;
    }
    sch_appendf(&buf, &len, &cap, "\n| %-20s | %7s | %6s | %9s | %9s | %7s | %6s |\n", "group", "kernels", "share", "ms/run",
                "MB/run", "GB/s", "of bw");
    sch_appendf(&buf, &len, &cap, "|----------------------|--------:|-------:|----------:|----------:|--------:|-------:|\n");
    int8_t *gshown = kiln_xcalloc((size_t)ng + 1, 1);
    for (int i = 0; i < ng; i++) {
        int best = -1;
        for (int g = 0; g < ng; g++)
            if (!gshown[g] && (best < 0 || gt[g] > gt[best])) best = g;
        gshown[best] = 1;
        double t = gt[best] / runs, by = gb[best] / runs, gbs = t > 0 ? by / t / 1e9 : 0;
        sch_appendf(&buf, &len, &cap, "| %-20s | %7d | %5.1f%% | %9.3f | %9.2f | %7.2f | %5.0f%% |\n", gname[best], gn[best],
                    total > 0 ? 100 * gt[best] / total : 0.0, 1e3 * t, by / 1e6, gbs,
                    bw_gbs > 0 ? 100 * gbs / bw_gbs : 0.0);
    }
    free(gshown);
    return buf;
}

/* ---- schedule search ----------------------------------------------------- */

static int contract_shape(const kiln_program *p, int32_t k, const int64_t *values, int bucket,
                          sch_contract_shape *sh);

char *kiln_program_space_report(const kiln_program *p) {
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (!p || p->gpu) return kiln_xstrdup("");
    char *seen = kiln_xstrdup("\n");
    int64_t total = 0;
    int kinds = 0;
    for (int32_t k = 0; k < p->sp.nkernels; k++) {
        const sch_kernel *K = &p->sp.kernels[k];
        if (!cg_contract_emittable(&p->sp, K, p->isa)) continue;
        for (int b = 0; b < 2; b++) {
            sch_contract_shape sh;
            if (K->contract->mdim < 0 && b == 1) continue;
            if (!contract_shape(p, k, NULL, b, &sh)) continue;
            char bucket[96], line[256];
            sch_bucket_text(&sh, bucket, sizeof bucket);
            snprintf(line, sizeof line, "\n%s %s\n", K->contract->key, bucket);
            if (strstr(seen, line)) continue;
            size_t sl = strlen(seen);
            seen = kiln_xrealloc(seen, sl + strlen(line) + 1);
            memcpy(seen + sl, line + 1, strlen(line));
            int n = sch_space_contract(&sh, NULL, 0);
            total += n;
            kinds++;
            sch_appendf(&buf, &len, &cap, "  kernel %4d  %-34s %-32s %6d schedules\n", (int)k, K->contract->key, bucket, n);
        }
    }
    sch_appendf(&buf, &len, &cap, "%d distinct contraction shapes, %lld schedules in all\n", kinds, (long long)total);
    free(seen);
    return buf;
}

/* the contraction's sizes: with values (a run) or, without, only when they
 * are constants (m is then the bucket's representative, 1 or 64) */
static int contract_shape(const kiln_program *p, int32_t k, const int64_t *values, int bucket,
                          sch_contract_shape *sh) {
    const sch_kernel *K = &p->sp.kernels[k];
    const sch_contract *c = K->contract;
    sym_pool *sp = p->g->syms;
    memset(sh, 0, sizeof *sh);
    sh->m = 1;
    sh->n = 1;
    sh->nbatch = 1;
    sh->b_dtype = p->sp.bufs[c->b_buf].dtype;
    sh->nthreads = rt_pool_threads(p->pool);
    sh->vnni = rt_cpu_has("avx512_vnni");
    sh->amx = rt_cpu_has("amx_tile") && rt_cpu_has("amx_int8");
    sh->amx_bf16 = rt_cpu_has("amx_tile") && rt_cpu_has("amx_bf16") && rt_cpu_has("avx512_bf16");
    sh->bf16 = rt_cpu_has("avx512_bf16");
    sh->b_activation = c->b_computed;
    sh->b_strided = c->b_kstride != SYM_NONE;
    for (int d = 0; d < K->ndim; d++) {
        int64_t v = 0;
        if (values ? sym_eval(sp, K->dim[d], values, NULL, &v, NULL) != 0 : !sym_is_const(sp, K->dim[d], &v)) {
            if (d == c->mdim && !values) continue;
            return 0;
        }
        if (d == c->mdim) sh->m = v;
        else if (d == c->ndim) sh->n = v;
        else sh->nbatch *= v;
    }
    if (!values && c->mdim >= 0) sh->m = bucket ? 64 : 1;
    int64_t kk = 0;
    if (values ? sym_eval(sp, K->rdim, values, NULL, &kk, NULL) != 0 : !sym_is_const(sp, K->rdim, &kk)) return 0;
    sh->k = kk;
    return 1;
}

/* every contraction slot without a record takes the cost model's first
 * choice for its shape (a prefill-sized M of 256 for the large-M bucket);
 * slots whose sizes besides M are symbolic keep the fixed default */
static void cost_model_defaults(kiln_program *p) {
    for (int32_t k = 0; k < p->sp.nkernels; k++) {
        sch_kernel *K = &p->sp.kernels[k];
        if (!cg_contract_emittable(&p->sp, K, p->isa)) continue;
        for (int b = 0; b < 2; b++) {
            sch_contract_shape sh;
            sch_contract_sched sc;
            if (p->tuned[k * 2 + b] || (K->contract->mdim < 0 && b == 1)) continue;
            if (!contract_shape(p, k, NULL, b, &sh)) continue;
            if (b == 1) sh.m = 256;
            if (rt_tune_cost_first(&p->sp, k, &sh, p->isa, &sc)) K->contract->sched[b] = sc;
        }
    }
}

/* schedules from the tuning DB: this machine's records are used as they
 * are (no search); another machine's only seed a search */
static void apply_tuning_db(kiln_program *p) {
    int32_t nk = p->sp.nkernels;
    p->tuned = kiln_xcalloc((size_t)nk * 2 + 1, 1);
    p->has_seed = kiln_xcalloc((size_t)nk * 2 + 1, 1);
    p->seeds = kiln_xcalloc((size_t)nk * 2 + 1, sizeof *p->seeds);
    p->unmeasured = kiln_xcalloc((size_t)nk * 2 + 1, 1);
    /* generic kernels: exact records for constant sizes (tune_generic.c) */
    p->gtune = rt_gtune_new(&p->sp, p->isa, rt_pool_threads(p->pool));
    if (!p->exact) rt_gtune_apply_db(p->gtune, &p->sp, &p->fingerprint);
    const char *off = p->exact ? "1" : getenv("KILN_TUNEDB_OFF");
    int any = 0;
    for (int32_t k = 0; k < nk && !any; k++) any = cg_contract_emittable(&p->sp, &p->sp.kernels[k], p->isa);
    if (!any) return;
    if (!p->fingerprint) p->fingerprint = kiln_device_fingerprint();
    for (int32_t k = 0; k < nk && !(off && off[0] == '1'); k++) {
        sch_kernel *K = &p->sp.kernels[k];
        if (!cg_contract_emittable(&p->sp, K, p->isa)) continue;
        for (int b = 0; b < 2; b++) {
            sch_contract_shape sh;
            if (K->contract->mdim < 0 && b == 1) continue;
            if (!contract_shape(p, k, NULL, b, &sh)) {
                /* symbolic sizes besides M (attention over the positions so
                 * far): the schedule last tuned for this kernel, M bucket and
                 * thread count, at whatever length it was tuned */
                char pre[16], suf[16];
                sch_tune_record r;
                sch_contract_sched sc;
                sch_bucket_affixes(b, rt_pool_threads(p->pool), pre, sizeof pre, suf, sizeof suf);
                if (!rt_retune() && sch_tunedb_lookup_latest(p->fingerprint, K->contract->key, pre, suf, &r) &&
                    sch_contract_sched_parse(r.schedule, &sc)) {
                    K->contract->sched[b] = sc;
                    p->tuned[k * 2 + b] = 1;
                }
                continue;
            }
            char bucket[96];
            sch_bucket_text(&sh, bucket, sizeof bucket);
            sch_tune_record r;
            int exact = 0;
            sch_contract_sched sc;
            if (!sch_tunedb_lookup(p->fingerprint, K->contract->key, bucket, &r, &exact)) continue;
            if (!sch_contract_sched_parse(r.schedule, &sc)) continue; /* never trusted */
            if (exact && !rt_retune()) {
                K->contract->sched[b] = sc;
                p->tuned[k * 2 + b] = 1;
                p->unmeasured[k * 2 + b] = r.tried == 0;
            } else {
                p->seeds[k * 2 + b] = sc;
                p->has_seed[k * 2 + b] = 1;
            }
        }
    }
    /* KILN_CONTRACT_SCHED_SMALL / _LARGE: one schedule (text as in the DB)
     * for every contraction's small-M / large-M bucket — tests and experiments */
    for (int b = 0; b < 2; b++) {
        const char *txt = getenv(b ? "KILN_CONTRACT_SCHED_LARGE" : "KILN_CONTRACT_SCHED_SMALL");
        sch_contract_sched sc;
        if (!txt || !txt[0] || p->exact) continue;
        if (!sch_contract_sched_parse(txt, &sc)) {
            fprintf(stderr, "kiln: ignoring %s='%s': not a contraction schedule\n",
                    b ? "KILN_CONTRACT_SCHED_LARGE" : "KILN_CONTRACT_SCHED_SMALL", txt);
            continue;
        }
        for (int32_t k = 0; k < nk; k++) {
            sch_kernel *K = &p->sp.kernels[k];
            if (!K->contract) continue;
            K->contract->sched[b] = sc;
            p->tuned[k * 2 + b] = 1;
        }
    }
    /* no record: the cost model's first choice (what a search would time
     * first), not the fixed default */
    if (!p->exact && !p->fixed_defaults) cost_model_defaults(p);
    /* a schedule the micro-kernel cannot take (a record from a newer kiln,
     * int8 arithmetic on a CPU without VNNI, AMX bf16 without amx_bf16,
     * packed bf16 without avx512_bf16), or any approximate arithmetic in an
     * exact program: back to the defaults (f32) */
    int vnni = rt_cpu_has("avx512_vnni"), amx = rt_cpu_has("amx_tile") && rt_cpu_has("amx_int8");
    int amx_bf16 = rt_cpu_has("amx_tile") && rt_cpu_has("amx_bf16") && rt_cpu_has("avx512_bf16");
    int bf16 = rt_cpu_has("avx512_bf16");
    for (int32_t k = 0; k < nk; k++) {
        sch_kernel *K = &p->sp.kernels[k];
        if (!K->contract) continue;
        int needs_vnni = K->contract->sched[0].arith == SCH_ARITH_I8 || K->contract->sched[1].arith == SCH_ARITH_I8;
        int needs_amx = 0, needs_bf16 = 0, needs_pbf16 = 0;
        for (int b = 0; b < 2; b++) {
            const sch_contract_sched *sc = &K->contract->sched[b];
            needs_amx |= sc->form == SCH_FORM_AMX && sc->arith == SCH_ARITH_I8;
            needs_bf16 |= sc->form == SCH_FORM_AMX && sc->arith == SCH_ARITH_BF16;
            needs_pbf16 |= sc->form == SCH_FORM_PACKED && sc->arith == SCH_ARITH_BF16;
        }
        int approx = K->contract->sched[0].arith != SCH_ARITH_F32 || K->contract->sched[1].arith != SCH_ARITH_F32;
        if (cg_contract_emittable(&p->sp, K, p->isa) && (vnni || !needs_vnni) && (amx || !needs_amx) &&
            (amx_bf16 || !needs_bf16) && (bf16 || !needs_pbf16) && !(p->exact && approx))
            continue;
        kiln_dtype bt = p->sp.bufs[K->contract->b_buf].dtype;
        K->contract->sched[0] = sch_contract_default_of(K->contract, 0, bt);
        K->contract->sched[1] = sch_contract_default_of(K->contract, 1, bt);
        p->tuned[k * 2] = p->tuned[k * 2 + 1] = 0;
    }
}

/* every weight's pack copy let go (remade, unfilled, by the next prefill
 * launch): copies filled before a search changed schedules were read wrong
 * after it (gemma3-270m's greedy text became one token repeated until they
 * were dropped; their header's K, nr and strip count still matched, so the
 * new kernels read them) */
static void drop_pack_copies(kiln_program *p) {
    for (int32_t b = 0; b < p->sp.nbufs; b++) {
        if (!p->packed[b].data) continue;
        rt_arena_release(&p->rp_arena, p->packed[b].data);
        memset(&p->packed[b], 0, sizeof p->packed[b]);
        p->bufs[2 * p->sp.nbufs + 1 + b] = NULL;
    }
}

static void plan_progress(const kiln_program *p) {
    if (!p->progress || !p->plan_w) return;
    kiln_search_status st;
    kiln_program_search_status(p, &st);
    p->progress(p->progress_ctx, &st);
}

/* the planned weight of kernel k's group in this bucket: every contraction
 * with its key and shape takes the winner of one search, so the search gets
 * the time of all of them */
static double contract_group_weight(const kiln_program *p, int32_t k, int bucket, const char *bucket_text) {
    const char *key = p->sp.kernels[k].contract->key;
    double w = 0;
    for (int32_t j = 0; j < p->sp.nkernels; j++) {
        const sch_kernel *J = &p->sp.kernels[j];
        if (!J->contract || strcmp(J->contract->key, key) != 0 || p->tuned[j * 2 + bucket]) continue;
        sch_contract_shape sj;
        char bj[96];
        if (!contract_shape(p, j, p->values, bucket, &sj)) continue;
        sch_bucket_text(&sj, bj, sizeof bj);
        if (strcmp(bj, bucket_text) == 0) w += p->plan_w[j * 2 + bucket];
    }
    return w;
}

/* seconds a search of weight w may take out of left: its part of what is
 * left for searching (the final recompile kept aside) in proportion to the
 * weight of everything the plan has still to search; 0 when nothing is left */
static double recompile_estimate(const kiln_program *p);

static double plan_share(kiln_program *p, double w, double left) {
    double pending = 0;
    for (int32_t k = 0; k < p->sp.nkernels; k++) {
        const sch_kernel *K = &p->sp.kernels[k];
        if (K->contract && cg_contract_emittable(&p->sp, K, p->isa)) {
            for (int b = 0; b < 2; b++)
                if (!p->tuned[k * 2 + b]) pending += p->plan_w[k * 2 + b];
        } else if (rt_gtune_wanted(p->gtune, k)) {
            pending += p->plan_w[k * 2] + p->plan_w[k * 2 + 1];
        }
    }
    p->reserve_s = recompile_estimate(p);
    double avail = left - p->reserve_s;
    if (avail <= 0 || w <= 0) return 0;
    return pending > w ? avail * w / pending : avail;
}

/* search kernel k's schedule for this bucket now, on this run's buffers;
 * the winner runs this launch and every kernel with the same key and
 * bucket takes its schedule (emitted into the program after the run) */
static kiln_status tune_contract_now(kiln_program *p, int32_t k, int bucket, rt_kernel_fn *fn_out,
                                     rt_module **mods_out) {
    sch_kernel *K = &p->sp.kernels[k];
    sch_contract_shape sh;
    if (!contract_shape(p, k, p->values, bucket, &sh)) return KILN_OK;
    char bucket_text[96];
    sch_bucket_text(&sh, bucket_text, sizeof bucket_text);
    double left = p->search_budget - p->search_spent;
    if (left <= 0) return KILN_OK;
    rt_tune_job job;
    memset(&job, 0, sizeof job);
    job.sp = &p->sp;
    job.kernel = k;
    job.bucket = bucket;
    job.shape = sh;
    job.be = p->be;
    job.pool = p->pool;
    job.nthreads = rt_pool_threads(p->pool);
    job.isa = p->isa;
    job.bufs = p->bufs;
    job.values = p->values;
    job.out_bytes = p->bytes[K->out_buf];
    job.b_bytes = p->bytes[K->contract->b_buf];
    job.rp_bytes = p->repacked[K->contract->b_buf].bytes;
    job.seed = p->has_seed[k * 2 + bucket] ? &p->seeds[k * 2 + bucket] : NULL;
    /* without a plan one kernel shape may take an eighth of the whole budget
     * (at least 2 s): a model has a handful of distinct shapes, each worth
     * searching; with one, its share of what is left (plan_share) */
    double share = p->search_budget / 8 > 2.0 ? p->search_budget / 8 : 2.0;
    if (p->plan_w) {
        share = plan_share(p, contract_group_weight(p, k, bucket, bucket_text), left);
        if (share <= 0) return KILN_OK;
    }
    job.budget_s = left < share ? left : share;
    job.inject_wrong = p->inject_wrong;
    rt_tune_result res;
    char err[1024];
    int show = isatty(2) || getenv("KILN_TUNE_VERBOSE");
    if (show)
        fprintf(stderr, "kiln tune: kernel %d (%s, %s): searching %d-point space ...\n", (int)k, K->contract->key,
                bucket_text, sch_space_contract(&sh, NULL, 0));
    kiln_status s = rt_tune_contract(&job, &res, err, sizeof err);
    p->search_spent += res.seconds;
    p->measurements += res.tried;
    p->plan_searched++;
    if (s == KILN_OK && res.best_s > 0 && res.base_s / res.best_s > p->plan_best_speedup)
        p->plan_best_speedup = res.base_s / res.best_s;
    plan_progress(p);
    if (s != KILN_OK) {
        for (int i = 0; i < 2; i++)
            if (res.mods[i]) p->be->module_free(res.mods[i]);
        fprintf(stderr, "kiln tune: kernel %d: search failed (%s); keeping the default schedule\n", (int)k, err);
        p->tuned[k * 2 + bucket] = 1;
        return KILN_OK;
    }
    char sched[128];
    sch_contract_sched_print(&res.winner, sched, sizeof sched);
    if (show)
        fprintf(stderr,
                "kiln tune: kernel %d: best %.1f us (%s), default %.1f us, %d tried, %d rejected, "
                "cost-model rank correlation %.2f over %d, %.1f s\n",
                (int)k, res.best_s * 1e6, sched, res.base_s * 1e6, res.tried, res.rejected, res.spearman,
                res.nmeasured, res.seconds);
    sch_tune_record r;
    sch_tune_record_new(&r, p->fingerprint, K->contract->key, bucket_text);
    snprintf(r.schedule, sizeof r.schedule, "%s", sched);
    r.best_s = res.best_s;
    r.base_s = res.base_s;
    r.tried = res.tried;
    r.rejected = res.rejected;
    if (sch_tunedb_store(&r, err, sizeof err) != KILN_OK) fprintf(stderr, "kiln tune: %s\n", err);
    /* every kernel of the same key and shape takes the winner */
    for (int32_t j = 0; j < p->sp.nkernels; j++) {
        sch_kernel *J = &p->sp.kernels[j];
        if (!J->contract || strcmp(J->contract->key, K->contract->key) != 0) continue;
        sch_contract_shape sj;
        if (!contract_shape(p, j, p->values, bucket, &sj)) continue;
        char bj[96];
        sch_bucket_text(&sj, bj, sizeof bj);
        if (strcmp(bj, bucket_text) != 0) continue;
        char before[128], after[128];
        sch_contract_sched_print(&J->contract->sched[bucket], before, sizeof before);
        sch_contract_sched_print(&res.winner, after, sizeof after);
        if (strcmp(before, after) != 0) p->retune = 1;
        p->tuned[j * 2 + bucket] = 1;
        if (p->plan_w) {
            /* under a plan the code is recompiled once, at its end: until
             * then every kernel keeps the schedule its code was made for */
            p->pend[j * 2 + bucket] = res.winner;
            p->has_pend[j * 2 + bucket] = 1;
            continue;
        }
        J->contract->sched[bucket] = res.winner;
    }
    *fn_out = res.fn;
    mods_out[0] = res.mods[0];
    mods_out[1] = res.mods[1];
    return KILN_OK;
}

/* whether the threads of a launch share one conversion of A, with the
 * scratch buffer, bufs[nbufs], grown to hold it: the AMX bf16 form with
 * one batch point (every thread needs all of A), on more than one thread;
 * the packed and AMX int8 forms' quantised A, also on one (the scratch
 * then saves each call a fresh zeroed allocation: at K = 8192 and 512
 * rows, 4 MiB of page faults) */
static int shared_a(kiln_program *p, const sch_kernel *K, const sch_contract_sched *sc, int64_t nbatch, int64_t m,
                    int64_t rn, int serial) {
    if (nbatch != 1 || m <= SCH_SMALL_M || rn <= 0) return 0;
    kiln_dtype bt = p->sp.bufs[K->contract->b_buf].dtype;
    size_t need;
    if (sc->form == SCH_FORM_AMX && sc->arith == SCH_ARITH_BF16 && !serial) need = cg_amx_bf16_scratch(bt, m, rn);
    else if (cg_i8_shared_a(bt, sc) && rn % 32 == 0) need = cg_i8_scratch(bt, m, rn);
    else return 0;
    if (need > p->scratch_cap) {
        void *b = NULL;
        if (posix_memalign(&b, 64, need) != 0) return 0; /* each thread converts for itself */
        free(p->scratch);
        p->scratch = b;
        p->scratch_cap = need;
    }
    p->bufs[p->sp.nbufs] = p->scratch;
    return 1;
}

/* buffer b's binding when it is a weight (kiln_bind_weight), else NULL */
static const input_binding *weight_binding(const kiln_program *p, int32_t b) {
    if (p->sp.bufs[b].kind != SCH_BUF_INPUT || p->bind_at[b] < 0 || p->bind_at[b] >= p->g->ninputs) return NULL;
    const input_binding *bind = &p->g->inputs[p->bind_at[b]];
    return bind->constant ? bind : NULL;
}

/* B's repacked copy for kernel k's decode schedules (rp=1), kept while B
 * stays bound to the same weight (kiln_bind_weight: the same pointer and
 * binding); dropped when B is bound as a plain input, whose contents may
 * change between runs, or when `want` is 0. The kernel reads it through
 * bufs[nbufs + 1 + b] and falls back to B itself where it is NULL. */
static void repack_b(kiln_program *p, int32_t k, int64_t rn, int want) {
    const sch_contract *c = p->sp.kernels[k].contract;
    int32_t b = c->b_buf;
    rt_repacked *r = &p->repacked[b];
    const sch_buf *B = &p->sp.bufs[b];
    const input_binding *bind = want && rt_repack_x8_ok(B->dtype) ? weight_binding(p, b) : NULL;
    if (bind && r->data && r->src == bind->data && r->gen == bind->gen && r->k == rn) return;
    rt_arena_release(&p->rp_arena, r->data);
    memset(r, 0, sizeof *r);
    p->bufs[p->sp.nbufs + 1 + b] = NULL;
    if (!bind) return;
    r->data = rt_repack_x8(B->dtype, bind->data, p->bytes[b], rn, &p->rp_arena); /* NULL: not repackable, or no memory */
    r->src = bind->data;
    r->gen = bind->gen;
    r->k = rn;
    r->bytes = r->data ? rt_repack_x8_size(B->dtype, p->bytes[b], rn) : 0;
    p->bufs[p->sp.nbufs + 1 + b] = r->data;
}

/* B's pack copy (runtime/repack.h) for a launch of kernel k's packed int8
 * schedule sc over nbatch batch points of n rows of B: kept while B stays
 * bound to the same weight; made, unfilled, when B has none, and filled by
 * the launch (pack_filled). A copy made for another K or nr stays (the
 * kernel then packs for itself): two kernels never rebuild it in turn.
 * Returns whether the launch fills it. */
static int pack_b(kiln_program *p, int32_t k, const sch_contract_sched *sc, int64_t rn, int64_t nbatch, int64_t n) {
    int32_t b = p->sp.kernels[k].contract->b_buf;
    rt_repacked *r = &p->packed[b];
    const input_binding *bind = weight_binding(p, b);
    kiln_dtype t = p->sp.bufs[b].dtype;
    if (r->data && (!bind || r->src != bind->data || r->gen != bind->gen)) { /* B rebound */
        rt_arena_release(&p->rp_arena, r->data);
        memset(r, 0, sizeof *r);
        p->bufs[2 * p->sp.nbufs + 1 + b] = NULL;
    }
    if (r->data || !bind || !p->pack_copies || sc->form != SCH_FORM_PACKED || sc->arith != SCH_ARITH_I8 ||
        !cg_i8_tag(t) || rn <= 0 || rn % 32 != 0 || sc->nr <= 0)
        return 0;
    int64_t strips = nbatch * ((n + sc->nr - 1) / sc->nr);
    size_t bytes = SCH_PACK_HEADER + (size_t)strips * SCH_PACK_STRIP(sc->nr, rn, cg_i8_kb(t));
    int64_t *h = rt_arena_alloc(&p->rp_arena, bytes);
    if (!h) return 0; /* no memory: the kernel packs for itself */
    memset(h, 0, SCH_PACK_HEADER);
    h[0] = rn;
    h[1] = sc->nr;
    h[2] = strips;
    r->data = h;
    r->src = bind->data;
    r->gen = bind->gen;
    r->k = rn;
    r->bytes = bytes;
    p->bufs[2 * p->sp.nbufs + 1 + b] = h;
    return 1;
}

/* after the launch that was to fill B's pack copy: filled if it ran, else
 * dropped (a failed launch may have filled part of it) */
static void pack_filled(kiln_program *p, int32_t b, int ok) {
    rt_repacked *r = &p->packed[b];
    if (!r->data) return;
    if (ok) {
        ((int64_t *)r->data)[3] = 1;
        return;
    }
    rt_arena_release(&p->rp_arena, r->data);
    memset(r, 0, sizeof *r);
    p->bufs[2 * p->sp.nbufs + 1 + b] = NULL;
}

/* whether some contraction reading buffer b has a decode schedule on its
 * repacked copy, or is about to search for one: kernel k's own schedule
 * and search first (every decode launch asks), the others only while a
 * copy exists that k does not read */
static int reads_copy(const kiln_program *p, int32_t k) {
    if (p->has_pend && p->has_pend[k * 2] && p->pend[k * 2].rp) return 1;
    return p->sp.kernels[k].contract->sched[0].rp || (p->search_budget > p->search_spent && !p->tuned[k * 2]);
}

static int repack_wanted(const kiln_program *p, int32_t k0, int32_t b) {
    if (reads_copy(p, k0)) return 1;
    if (!p->repacked[b].data) return 0;
    for (int32_t k = 0; k < p->sp.nkernels; k++) {
        const sch_contract *c = p->sp.kernels[k].contract;
        if (p->sp.kernels[k].kind == SCH_K_REDUCE && c && c->b_buf == b && reads_copy(p, k)) return 1;
    }
    return 0;
}

/* a contraction kernel's work items: (batch point, run of nc rows of B), see
 * emit_contract.c */
static kiln_status launch_contract(kiln_program *p, int32_t k, const uint8_t *bound, int nthreads) {
    const sch_kernel *K = &p->sp.kernels[k];
    const sch_contract *c = K->contract;
    int64_t nbatch = 1, m = 1, n = 1, rn = 0;
    kiln_status s = KILN_OK;
    for (int d = 0; d < K->ndim && s == KILN_OK; d++) {
        int64_t v = 0;
        s = eval_sym_b(p, bound, K->dim[d], &v, "the loops of a contraction");
        if (d == c->mdim) m = v;
        else if (d == c->ndim) n = v;
        else nbatch *= v;
    }
    if (s == KILN_OK) s = eval_sym_b(p, bound, K->rdim, &rn, "a contraction");
    if (s != KILN_OK) return s;
    int bucket = m <= SCH_SMALL_M ? 0 : 1;
    rt_kernel_fn fn = p->fns[k];
    rt_module *mods[2] = {NULL, NULL};
    int rp_b = bucket == 0 && rt_repack_x8_ok(p->sp.bufs[c->b_buf].dtype);
    if (rp_b) repack_b(p, k, rn, repack_wanted(p, k, c->b_buf));
    if (p->search_budget > p->search_spent && !p->tuned[k * 2 + bucket]) {
        rt_kernel_fn won = NULL;
        tune_contract_now(p, k, bucket, &won, mods);
        if (won) fn = won;
        if (rp_b) repack_b(p, k, rn, repack_wanted(p, k, c->b_buf)); /* the copy goes if no schedule reads it */
    }
    /* the schedule of the code that runs: a winner just found (its own
     * module) waits in pend under a plan */
    const sch_contract_sched *sc = fn != p->fns[k] && p->has_pend && p->has_pend[k * 2 + bucket]
                                       ? &p->pend[k * 2 + bucket]
                                       : &c->sched[bucket];
    int fills = bucket == 1 && pack_b(p, k, sc, rn, nbatch, n);
    if (sc->serial) nthreads = 1; /* the schedule keeps the kernel on this thread */
    int64_t chunk = sch_contract_runs(sc, n, nbatch, nthreads); /* runs per batch point */
    int64_t items = nbatch * chunk;
    int serial = nthreads <= 1 || nbatch * m * n * (rn > 0 ? rn : 1) < 32768;
    double t0 = p->prof ? mono_s() : 0;
    int64_t flags = 0, r = 0;
    if (shared_a(p, K, sc, nbatch, m, rn, serial)) {
        /* A converted once, each thread a share of its 16-row groups, then
         * read by every thread's items (emit_gemm_amx_bf16.h) */
        r = p->be->launch(p->pool, fn, p->bufs, p->values, (m + 15) / 16 + 2, 1, CG_KF_PREP, serial);
        flags = CG_KF_SHARED;
    }
    if (r == 0) r = p->be->launch(p->pool, fn, p->bufs, p->values, items, chunk, flags, serial);
    if (fills) pack_filled(p, c->b_buf, r == 0);
    if (p->prof) {
        p->prof[k] += mono_s() - t0;
        p->prof_bytes[k] += (double)(p->bytes[c->a_buf] + p->bytes[c->b_buf] + p->bytes[K->out_buf]);
        p->prof_flops[k] += 2.0 * (double)m * (double)n * (double)nbatch * (double)rn;
        p->prof_arith[k] = (uint8_t)sc->arith;
    }
    for (int i = 0; i < 2; i++)
        if (mods[i]) p->be->module_free(mods[i]);
    return r == 0 ? KILN_OK : KILN_ERR_RANGE;
}

static kiln_status run_work(kiln_program *p) {
    if (!p) return KILN_ERR_INVALID;
    if (p->gpu) return rt_gpu_program_run(p->gpu, p->g, &p->sp);
    kiln_graph *g = p->g;
    if (g->build_failed) return g->status;
    sch_program *sp = &p->sp;
    uint8_t *bound = NULL;
    kiln_status s = load_values(p, &bound);
    char what[160];
    output_value *res = NULL;

    /* sizes */
    for (int32_t b = 0; b < sp->nbufs && s == KILN_OK; b++) {
        const sch_buf *B = &sp->bufs[b];
        int64_t numel = 0;
        uint32_t missing = 0;
        if (sym_eval(g->syms, B->numel, p->values, bound, &numel, &missing) != 0) {
            /* the message only when it is needed: this loop runs for every buffer of every run */
            snprintf(what, sizeof what, "the size of buffer %d", (int)b);
            s = eval_sym_b(p, bound, B->numel, &numel, what);
            break;
        }
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
        p->bytes[b] = bytes;
    }
    /* the caller's buffers */
    for (int32_t b = 0; b < sp->nbufs && s == KILN_OK; b++) {
        const sch_buf *B = &sp->bufs[b];
        if (B->kind != SCH_BUF_INPUT && B->kind != SCH_BUF_STATE) continue;
        const char *name = g->nodes[B->node].name;
        const input_binding *bind = NULL;
        /* where the last run found it (one strcmp instead of a search of
         * every binding for every buffer: 100,000 per decode step of a
         * model with 300 weights) */
        int32_t at = p->bind_at[b];
        if (at >= 0 && at < g->ninputs && strcmp(g->inputs[at].name, name) == 0) bind = &g->inputs[at];
        for (int32_t i = 0; i < g->ninputs && !bind; i++)
            if (strcmp(g->inputs[i].name, name) == 0) {
                bind = &g->inputs[i];
                p->bind_at[b] = i;
            }
        if (!bind) {
            graph_run_error(g, KILN_ERR_UNBOUND, "kiln_run: %s '%s' has no bound buffer",
                            B->kind == SCH_BUF_STATE ? "state" : "input", name);
            s = KILN_ERR_UNBOUND;
        } else if (bind->bytes != p->bytes[b]) {
            graph_run_error(g, KILN_ERR_INVALID, "kiln_run: %s '%s': expected %zu bytes, the bound buffer has %zu",
                            B->kind == SCH_BUF_STATE ? "state" : "input", name, p->bytes[b], bind->bytes);
            s = KILN_ERR_INVALID;
        } else if (!bind->data && bind->bytes) {
            graph_run_error(g, KILN_ERR_INVALID, "kiln_run: input '%s': NULL buffer", name);
            s = KILN_ERR_INVALID;
        } else {
            p->bufs[b] = bind->data;
        }
    }
    /* the arena: liveness over kernel indices (the same every run: computed
     * at the first, only the sizes change) */
    /* the arena is planned with each buffer's size rounded up to a power of
     * two, and again only when some buffer outgrows its place: decode's
     * attention buffers grow with every token, and a plan per token cost
     * about 1% of a small model's step */
    int replan = !p->live_ready || p->arena_used > p->arena_cap; /* the latter: the last arena failed */
    for (int32_t b = 0; b < sp->nbufs && s == KILN_OK && !replan; b++) replan = p->bytes[b] > p->live[b].bytes;
    if (s == KILN_OK && replan) {
        for (int32_t b = 0; b < sp->nbufs; b++) {
            /* up to a multiple of an eighth of the next power of two: at most 12.5% more */
            size_t c = 64;
            while (c < p->bytes[b]) c *= 2;
            size_t q = c / 8 > 64 ? c / 8 : 64;
            p->live[b].bytes = p->bytes[b] ? (p->bytes[b] + q - 1) / q * q : 0;
        }
    }
    if (s == KILN_OK && !p->live_ready) {
        p->live_ready = 1;
        for (int32_t b = 0; b < sp->nbufs; b++) {
            p->live[b].first = 1;
            p->live[b].last = 0;
        }
        for (int32_t k = 0; k < sp->nkernels; k++) {
            const sch_kernel *K = &sp->kernels[k];
            touch(&p->live[K->out_buf], k);
            if (K->src_buf >= 0) touch(&p->live[K->src_buf], k);
            touch_expr(sp, p->live, K->expr, k);
            for (int32_t i = 0; i < K->nstages; i++) touch_expr(sp, p->live, K->stages[i].expr, k);
        }
        for (int32_t b = 0; b < sp->nbufs; b++) {
            sch_buf_kind kk = sp->bufs[b].kind;
            if (kk != SCH_BUF_NODE && kk != SCH_BUF_TEMP) {
                p->live[b].first = 1;
                p->live[b].last = 0;
            }
        }
    }
    if (s == KILN_OK && replan) {
        size_t need = rt_memplan(p->live, sp->nbufs);
        if (need > p->arena_cap) {
            if (p->arena) p->be->dealloc(p->arena);
            p->arena = p->be->alloc(need);
            p->arena_cap = p->arena ? need : 0;
            if (!p->arena) {
                graph_run_error(g, KILN_ERR_NOMEM, "kiln_run: cannot allocate an arena of %zu bytes", need);
                s = KILN_ERR_NOMEM;
            }
        }
        p->arena_used = need;
        for (int32_t b = 0; b < sp->nbufs && s == KILN_OK; b++) {
            sch_buf_kind kk = sp->bufs[b].kind;
            if (kk == SCH_BUF_NODE || kk == SCH_BUF_TEMP) p->bufs[b] = (char *)p->arena + p->live[b].offset;
        }
    }
    /* results: the previous run's buffers are taken over when their size
     * matches (they would be freed below anyway), so a repeated run does not
     * fault fresh pages in for every output */
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
                s = eval_sym_b(p, bound, view_shape(V)[d], &r->dims[d], what);
            }
            r->dtype = B->dtype;
            r->bytes = p->bytes[b];
            r->data = NULL;
            if (B->output < nold && g->results[B->output].data && g->results[B->output].bytes == r->bytes) {
                r->data = g->results[B->output].data;
                g->results[B->output].data = NULL;
            } else {
                /* 64-byte aligned for whole-line vector stores; free() releases it */
                void *mem = NULL;
                r->data = posix_memalign(&mem, 64, r->bytes ? r->bytes : 1) == 0 ? mem : NULL;
            }
            /* KILN_POISON_RESULTS (the tests): all bits set (an f32/f16 NaN)
             * before the kernels run, so that an element no kernel writes
             * shows, even in a buffer taken over from the reference run */
            if (r->data && p->poison) memset(r->data, 0xff, r->bytes);
            if (!r->data) {
                graph_run_error(g, KILN_ERR_NOMEM, "kiln_run: cannot allocate %zu bytes for output '%s'", r->bytes,
                                g->outputs[B->output].name);
                s = KILN_ERR_NOMEM;
            }
            p->bufs[b] = r->data;
        }
    }
    /* kernels */
    int nthreads = rt_pool_threads(p->pool);
    for (int32_t k = 0; k < sp->nkernels && s == KILN_OK; k++) {
        const sch_kernel *K = &sp->kernels[k];
        if (K->kind == SCH_K_COPY) {
            size_t n = p->bytes[K->src_buf] < p->bytes[K->out_buf] ? p->bytes[K->src_buf] : p->bytes[K->out_buf];
            if (p->bufs[K->out_buf] != p->bufs[K->src_buf]) p->be->copy(p->bufs[K->out_buf], p->bufs[K->src_buf], n);
            continue;
        }
        if (K->kind == SCH_K_QUANTIZE) {
            kiln_dtype t = sp->bufs[K->out_buf].dtype;
            int64_t numel = (int64_t)(p->bytes[K->src_buf] / sizeof(float));
            if (quant_quantize(t, p->bufs[K->src_buf], p->bufs[K->out_buf], numel) != 0) {
                graph_run_error(g, KILN_ERR_UNSUPPORTED, "kiln_run: kiln has no %s encoder", kiln_dtype_name(t));
                s = KILN_ERR_UNSUPPORTED;
            }
            continue;
        }
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < K->ndim && s == KILN_OK; d++) {
            int64_t v = 0;
            uint32_t missing = 0;
            if (sym_eval(g->syms, K->dim[d], p->values, bound, &v, &missing) != 0) {
                snprintf(what, sizeof what, "the loops of kernel %d", (int)k); /* only when needed, as above */
                s = eval_sym_b(p, bound, K->dim[d], &v, what);
            }
            if (d + 1 < K->ndim) outer *= v;
            else inner = v;
        }
        if (s != KILN_OK) break;
        if (outer == 0 || (K->ndim > 0 && inner == 0)) continue;
        if (cg_contract_emittable(sp, K, p->isa)) {
            s = launch_contract(p, k, bound, nthreads);
            continue;
        }
        int64_t work = outer * inner;
        if (K->kind == SCH_K_REDUCE) {
            int64_t rn = 0;
            s = eval_sym_b(p, bound, K->rdim, &rn, "a reduction");
            if (s != KILN_OK) break;
            work *= rn > 0 ? rn : 1;
        }
        /* fused per-row reductions are recomputed by every chunk of a row:
         * split rows only when that is cheap next to the row's own work */
        int64_t stage_work = 0;
        for (int32_t i = 0; i < K->nstages && s == KILN_OK; i++) {
            if (!K->stages[i].row) continue;
            int64_t rn = 0;
            s = eval_sym_b(p, bound, K->stages[i].rdim, &rn, "a fused reduction");
            stage_work += rn > 0 ? rn : 0;
        }
        if (s != KILN_OK) break;
        work += outer * stage_work;
        int64_t chunk = 0, items = outer;
        int serial = (K->kind == SCH_K_SCATTER && !K->disjoint) || nthreads <= 1 || work < 32768;
        if (K->kind == SCH_K_STREAM) inner = 1; /* a stream kernel's items are whole rows (no chunks) */
        if (!serial && outer < 4 * (int64_t)nthreads && inner >= 2048) {
            /* few long rows: split rows into chunks so every thread has work */
            int64_t per_row = (4 * (int64_t)nthreads + outer - 1) / outer;
            if (stage_work * per_row * 4 <= work / outer) {
                chunk = (inner + per_row - 1) / per_row;
                chunk = (chunk + 63) / 64 * 64;
                items = outer * ((inner + chunk - 1) / chunk);
            }
        }
        int64_t flags = p->bytes[K->out_buf] >= p->stream_min ? 1 : 0;
        if (K->ndim == 0) items = 1;
        /* generic schedule search (tune_generic.c): settle the kernel at its first launch */
        rt_kernel_fn gfn = p->fns[k];
        rt_gtune_result gres;
        memset(&gres, 0, sizeof gres);
        if (p->search_budget > p->search_spent && rt_gtune_wanted(p->gtune, k)) {
            double left = p->search_budget - p->search_spent, share = p->search_budget / 8 > 1.0 ? p->search_budget / 8 : 1.0;
            if (p->plan_w) share = plan_share(p, p->plan_w[2 * k] + p->plan_w[2 * k + 1], left);
            if (share <= 0) share = 1e-9; /* out of budget: settled from the DB or kept, nothing measured */
            rt_gtune_job gj = {sp, k, p->be, p->pool, p->isa, p->bufs, p->values, p->bytes, outer, inner, chunk, items,
                               flags, serial, p->fingerprint, left < share ? left : share, 0};
            char gerr[512];
            if (rt_gtune_kernel(p->gtune, &gj, &gres, gerr, sizeof gerr) != KILN_OK)
                fprintf(stderr, "kiln tune: kernel %d: search failed (%s); keeping its schedule\n", (int)k, gerr);
            p->search_spent += gres.seconds;
            p->measurements += gres.tried;
            if (gres.tried) p->plan_searched++;
            if (gres.tried) plan_progress(p);
            if (gres.changed) p->retune = 1;
            if (gres.fn) gfn = gres.fn;
        }
        rt_gtune_split(K, outer, inner, serial, &chunk, &items);
        double t0 = p->prof ? mono_s() : 0;
        int r = p->be->launch(p->pool, gfn, p->bufs, p->values, items, chunk, flags, serial);
        if (gres.mod) p->be->module_free(gres.mod);
        if (p->prof) {
            p->prof[k] += mono_s() - t0;
            p->prof_bytes[k] += kernel_bytes(p, K, K->ndim == 0 ? 1 : outer * inner);
        }
        if (r != 0) {
            graph_run_error(g, KILN_ERR_RANGE, "kiln_run: a %s index is out of range (kernel %d, node %d)",
                            K->kind == SCH_K_SCATTER ? "SCATTER" : "GATHER", (int)k, (int)K->root);
            s = KILN_ERR_RANGE;
        }
    }
    p->be->sync();
    if (p->prof) p->prof_runs++;
    if (p->retune && s == KILN_OK && !p->plan_w) {
        /* the search changed schedules: the program gets the winners (the
         * recompile is the search's time too); under a plan, once, when it
         * ends (kiln_program_search_finish) */
        char err[4096];
        p->retune = 0;
        double t_emit = mono_s();
        drop_pack_copies(p);
        kiln_status rs = emit_and_load(p, err, sizeof err);
        if (p->search_budget > 0) p->search_spent += mono_s() - t_emit;
        if (rs != KILN_OK) {
            graph_run_error(g, rs, "kiln_run: recompiling with the tuned schedules: %s", err);
            s = rs;
        }
    }
    free(bound);
    if (s != KILN_OK) {
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

char *kiln_schedule_space(void) { return sch_space_describe(); }
