/* exec.c — kiln_compile, a program's public accessors, and its tuner: the
 * tuning DB applied at compile time, the steered search's plan of where the
 * budget goes, and a contraction's search at its first launch.
 *
 * kiln_compile: the backend from the registry; graph -> e-graph ->
 * extraction; kernelize; then the backend's prepare (emit, compile, load).
 * Nothing about sizes is fixed: kiln_run (run.c) evaluates the graph's
 * symbolic sizes under the current bindings and runs the plan on any
 * backend. kiln_program's four parts are described in program.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiln_compile.h"
#include "program.h"
#include "base.h"
#include "config.h"
#include "dtype.h"
#include "rewrite.h"
#include "contract.h"
#include "family.h"
#include "search.h"
#include "cc_dedup.h"
#include "cc_split.h"
#include "tune.h"
#include "progress.h"
#include "tunedb.h"
#include "tune_generic.h"
#include "../codegen/emit_contract.h"
#include "stream_select.h"

static int contract_shape(const kiln_program *p, int32_t k, const int64_t *values, int bucket, sch_contract_shape *sh);

/* the CPU's contraction search and its plan apply to host-code backends */
static int host_code(const kiln_program *p) { return (p->plan.be->caps & RT_CAP_HOST_CODE) != 0; }

kiln_compile_options kiln_compile_defaults(void) {
    kiln_env e;
    kiln_env_read(&e); /* src/base/config.c: the one reader of the environment */
    return e.compile;
}

/* the option checks that come before any work: the backend, the numbers,
 * no compound node (kiln_graph_optimize makes them; no kernel runs them yet) */
static const rt_backend *compile_checks(kiln_graph *g, const kiln_compile_options *o, kiln_status *st) {
    const rt_backend *be = rt_backend_find(o->backend);
    if (!be) {
        graph_run_error(g, KILN_ERR_UNSUPPORTED, "kiln_compile: unknown backend '%s' (available: %s)",
                        o->backend ? o->backend : "cpu", rt_backend_names());
        *st = KILN_ERR_UNSUPPORTED;
        return NULL;
    }
    if (o->threads < 0 || o->search_budget < 0) {
        graph_run_error(g, KILN_ERR_INVALID, "kiln_compile: negative threads or search budget");
        *st = KILN_ERR_INVALID;
        return NULL;
    }
    for (int32_t i = 0; i < g->nnodes; i++) {
        if ((int)g->nodes[i].op >= (int)OP_PRIM_COUNT) {
            graph_run_error(g, KILN_ERR_UNSUPPORTED, "kiln_compile: node %d is the compound op %s, which the CPU backend cannot compile yet",
                            (int)i, op_table[g->nodes[i].op].name);
            *st = KILN_ERR_UNSUPPORTED;
            return NULL;
        }
    }
    return be;
}

/* the first step of compiling: graph -> e-graph -> saturation -> extraction
 * (primitives, and on the CPU the streaming SOFTMAX_CONTRACT where
 * stream_select.c asks for it and the kernel layer takes it); the option
 * no_egraph skips it */
static kiln_status compile_rewrite(kiln_program *p) {
    kiln_graph *g = p->plan.user;
    if (p->plan.opt.no_egraph) return KILN_OK;
    int mode = rt_stream_extract_mode(p->plan.be->name, p->plan.opt.stream);
    kiln_graph *work = eg_optimize_for_backend(g, mode, p->plan.opt.eg_plain);
    /* a stage of its own: kernelizing the whole graph to check it grows
     * with depth, where the rewrite grows with distinct blocks */
    if (work && mode == EG_EXTRACT_STREAM) rt_compile_stage("streaming check", 0, 1);
    if (work && mode == EG_EXTRACT_STREAM && !rt_stream_kernelizes(work)) {
        rt_compile_stage("e-graph", 0, 1);
        kiln_graph_free(work);
        work = eg_optimize_for_backend(g, EG_EXTRACT_PRIMITIVES, p->plan.opt.eg_plain);
    }
    if (!work) return g->status != KILN_OK ? g->status : KILN_ERR_INVALID;
    int same_outputs = work->noutputs == g->noutputs;
    for (int32_t i = 0; same_outputs && i < g->noutputs; i++)
        same_outputs = strcmp(work->outputs[i].name, g->outputs[i].name) == 0;
    if (same_outputs) p->plan.g = work;
    else kiln_graph_free(work); /* results are matched by position: keep the graph as given */
    return KILN_OK;
}

/* kernels, and whether the backend can run every one of them */
static kiln_status compile_kernels(kiln_program *p, char *err, size_t errcap) {
    kiln_graph *g = p->plan.g;
    /* compile.stream_bf16: 1 every stream tile in bf16, 2 (the streaming
     * alternative of option stream 2, stream_select.c) both bodies, the
     * launch picking; only where the CPU has avx512_bf16 */
    int bf = p->plan.opt.stream_bf16;
    sch_options so = {p->plan.opt.no_fuse, p->plan.opt.no_contract, p->plan.opt.no_split, p->plan.opt.no_stream_tile,
                      !rt_cpu_has("avx512_bf16") ? SCH_STREAM_BF16_NONE
                      : bf == 1                  ? SCH_STREAM_BF16_ONLY
                      : bf == 2                  ? SCH_STREAM_BF16_BOTH
                                                 : SCH_STREAM_BF16_NONE,
                      /* epilogues where contractions are the AVX-512 micro-kernels (an
                         epilogue writes its contraction's buffer in place: sched/epilogue.c) */
                      p->plan.opt.no_epilogue || strcmp(p->plan.be->name, "cpu") != 0 || p->plan.opt.vector < 0 ||
                          !p->plan.be->isa || p->plan.be->isa() != CG_ISA_AVX512};
    kiln_status s = sch_kernelize_ex(g, &p->plan.sp, &so, err, errcap);
    if (s != KILN_OK) {
        if (!g->build_failed) graph_run_error(g, s, "kiln_compile: %s", err);
        if (p->plan.user != g) graph_run_error(p->plan.user, s, "kiln_compile: %s", err);
        return s;
    }
    for (int32_t b = 0; b < p->plan.sp.nbufs; b++) {
        if (!cg_dtype_supported(p->plan.sp.bufs[b].dtype)) {
            graph_run_error(g, KILN_ERR_UNSUPPORTED, "kiln_compile: the code generator has no support for dtype %s",
                            kiln_dtype_name(p->plan.sp.bufs[b].dtype));
            return KILN_ERR_UNSUPPORTED;
        }
    }
    for (int32_t k = 0; k < p->plan.sp.nkernels; k++) {
        if (!p->plan.be->supports(&p->plan.sp, k)) {
            graph_run_error(g, KILN_ERR_UNSUPPORTED, "kiln_compile: backend %s cannot run kernel %d", p->plan.be->name, k);
            return KILN_ERR_UNSUPPORTED;
        }
    }
    return KILN_OK;
}

/* the run state's arrays (their contents are the first run's to fill) */
static void alloc_run_state(kiln_program *p) {
    size_t nb = (size_t)p->plan.sp.nbufs + 1;
    p->run.bytes = kiln_xcalloc(nb, sizeof *p->run.bytes);
    p->run.live = kiln_xcalloc(nb, sizeof *p->run.live);
    p->run.bind_at = kiln_xmalloc(nb * sizeof *p->run.bind_at);
    for (size_t b = 0; b < nb; b++) p->run.bind_at[b] = -1;
    p->run.kerr = kiln_xcalloc((size_t)p->plan.sp.nkernels + 1, sizeof *p->run.kerr);
    p->run.poison = p->plan.opt.poison != 0;
}

kiln_program *kiln_compile(kiln_graph *g, const kiln_compile_options *opt, kiln_status *st) {
    char err[4096] = "";
    kiln_status s = KILN_OK;
    kiln_compile_options o = opt ? *opt : kiln_compile_defaults();
    if (st) *st = KILN_OK;
    if (!g) {
        if (st) *st = KILN_ERR_INVALID;
        return NULL;
    }
    const rt_backend *be = compile_checks(g, &o, &s);
    if (!be) {
        if (st) *st = s;
        return NULL;
    }
    kiln_program *p = kiln_xcalloc(1, sizeof *p);
    p->plan.user = p->plan.g = g;
    p->plan.be = be;
    p->plan.compiling = 1;
    p->plan.exact = o.exact != 0;
    p->plan.fixed_defaults = o.fixed_defaults != 0;
    if (p->plan.exact) o.search_budget = 0;
    p->plan.opt = o;
    p->tune.budget = o.search_budget;
    p->tune.inject_wrong = o.inject_wrong;
    rt_compile_stage("e-graph", 0, 1);
    s = compile_rewrite(p);
    if (s == KILN_OK) rt_compile_stage("kernels", 0, 1);
    if (s == KILN_OK) s = compile_kernels(p, err, sizeof err);
    if (s == KILN_OK) {
        alloc_run_state(p);
        s = be->prepare(p, &o, err, sizeof err);
        if (s != KILN_OK) {
            graph_run_error(p->plan.g, s, "kiln_compile: %s", err);
            if (p->plan.user != p->plan.g) graph_run_error(p->plan.user, s, "kiln_compile: %s", err);
        }
    }
    if (s != KILN_OK) {
        if (st) *st = s;
        kiln_program_free(p);
        return NULL;
    }
    if (o.profile && host_code(p)) rt_profile_alloc(p, 1);
    p->plan.compiling = 0;
    p->forms.force = -1; /* no form forced, none measured: the cost model picks (stream_select.c) */
    memset(p->forms.choice, 0xff, sizeof p->forms.choice);
    memset(p->forms.pin, 0xff, sizeof p->forms.pin);
    memset(p->forms.runner_up, 0xff, sizeof p->forms.runner_up);
    /* the streaming form is compiled when first needed (rt_stream_alt): a
     * first-run search runs this program alone and then compiles it once,
     * with the winners, instead of twice */
    p->alt_pending = (uint8_t)rt_stream_alt_wanted(&o, be->name);
    return p;
}

static void free_tuner(rt_tuner *t) {
    free(t->fingerprint);
    free(t->plan_w);
    free(t->pend);
    free(t->has_pend);
    free(t->rank_next);
    free(t->short_over);
    free(t->carry_d);
    free(t->kept);
    free(t->unmeasured);
    free(t->tuned);
    free(t->seeds);
    free(t->has_seed);
    rt_gtune_free(t->gtune);
}

void kiln_program_free(kiln_program *p) {
    if (!p) return;
    kiln_program_free(p->alt);
    if (p->prof.secs) {
        if (p->plan.opt.profile == 1) rt_profile_print(p);
        rt_profile_alloc(p, 0);
    }
    p->plan.be->release(p);
    if (p->plan.pool) rt_pool_free(p->plan.pool);
    free_tuner(&p->tune);
    sch_program_free(&p->plan.sp);
    free(p->plan.source);
    free(p->plan.fns);
    free(p->run.bind_at);
    free(p->run.bytes);
    free(p->run.live);
    free(p->run.values);
    free(p->run.bound);
    free(p->run.kerr);
    if (p->plan.g && p->plan.g != p->plan.user) {
        if (p->plan.compiling && p->plan.g->status != KILN_OK)
            graph_run_error(p->plan.user, p->plan.g->status, "%s", p->plan.g->error);
        kiln_graph_free(p->plan.g);
    }
    free(p);
}

const char *kiln_program_source(const kiln_program *p) { return p ? p->plan.source : ""; }
const char *kiln_program_library(const kiln_program *p) { return p && p->plan.mod ? p->plan.be->module_path(p->plan.mod) : ""; }
int kiln_program_kernel_count(const kiln_program *p) { return p ? (int)p->plan.sp.nkernels : 0; }
int kiln_program_measurements(const kiln_program *p) {
    return p ? p->tune.measurements : 0;
}
size_t kiln_program_arena_bytes(const kiln_program *p) { return p ? p->run.arena_used : 0; }
int kiln_program_exact(const kiln_program *p) { return p ? p->plan.exact : 0; }

int kiln_program_arith(const kiln_program *p, int counts[2][3]) {
    memset(counts, 0, 2 * sizeof counts[0]);
    if (!p) return 0;
    int n = 0;
    for (int32_t k = 0; k < p->plan.sp.nkernels; k++) {
        const sch_kernel *K = &p->plan.sp.kernels[k];
        if (!K->contract) continue;
        n++;
        int emittable = host_code(p) && cg_contract_emittable(&p->plan.sp, K, p->plan.isa);
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
                p && p->plan.exact ? " (exact: f32 only)" : "");
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
    sch_appendf(&buf, &len, &cap, "%d kernels (backend %s, %s code, %d threads)\n", (int)p->plan.sp.nkernels,
                p->plan.be->name, cg_isa_name(p->plan.isa), rt_pool_threads(p->plan.pool));
    for (int32_t k = 0; k < p->plan.sp.nkernels; k++) sch_kernel_print(&p->plan.sp, k, &buf, &len, &cap);
    return buf;
}

/* ---- the search, steered: a plan of where the budget goes ------------- */

int kiln_program_untuned(const kiln_program *p) {
    if (!p || !host_code(p) || p->plan.exact) return 0;
    int n = 0;
    for (int32_t k = 0; k < p->plan.sp.nkernels; k++) {
        const sch_kernel *K = &p->plan.sp.kernels[k];
        if (!K->contract || !cg_contract_emittable(&p->plan.sp, K, p->plan.isa)) continue;
        for (int b = 0; b < 2; b++) n += !p->tune.tuned[k * 2 + b] && (b == 0 || K->contract->mdim >= 0);
    }
    return n;
}

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* how much slower than alone a process of this priority runs now: the wall
 * time of 30 ms of this thread's CPU work over that CPU time. Neighbours
 * at the same priority take their share of it; niced ones (helpers,
 * builds under `nice`) little, though they count in the load average
 * (a loaded 2-core AMD EPYC at load 7-8, the rest niced: gemma3-270m's
 * recompile took 5.7 s, where the load would have stretched its estimate
 * 4x) */
static double measured_stretch(void) {
    double w0 = kiln_now_s(), c0 = thread_cpu_s();
    volatile uint64_t x = 1;
    while (thread_cpu_s() - c0 < 0.03 && kiln_now_s() - w0 < 0.3)
        for (int i = 0; i < 20000; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    double cpu = thread_cpu_s() - c0, wall = kiln_now_s() - w0;
    return cpu > 0 ? wall / cpu : 4;
}

/* the recompile of the whole program with new schedules: the bytes of the
 * unit the compiler is given (the layers' copies of a kernel once,
 * cc_dedup.c; measured once per plan) at the build's rate (cc_split.h),
 * with a tenth more for the tuned forms (longer than the defaults) and a
 * quarter second. gemma3-270m at 1dabe50, quiet 2-core AMD EPYC: a
 * 956,525-byte unit, 5.3 s at the guessed rate; the recompiles with the
 * winners took 5.24 and 5.27 s (the estimate with 1.5x then, 9.3 and
 * 11.7 s, left 4-6 s of a 30 s budget unused) */
double rt_tune_recompile_s(size_t unit_bytes, double rate, double stretch) {
    if (!(stretch >= 1)) stretch = 1;
    if (stretch > 4) stretch = 4;
    return stretch * (1.1 * rate * (double)unit_bytes + 0.25);
}

double rt_tune_reserve_scale(double applied, double s_plan, double s_now) {
    if (!(applied >= 1)) applied = 1;
    if (!(s_plan >= 1)) s_plan = 1;
    double f = s_now / s_plan;
    if (!(f > 1)) return 1;
    return applied * f > 4 ? (applied < 4 ? 4 / applied : 1) : f;
}

/* the stretch a guessed (or remembered) rate is given: the load per core
 * when the machine is busier than its cores, at most the slowdown probe
 * measured (1 when the rate was learnt in this process) */
static double guess_stretch(double probe) {
    double load = 0, stretch = 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    FILE *f = rt_cc_rate_learnt() ? NULL : fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) == 1 && cores > 0 && load > (double)cores) stretch = load / (double)cores;
        fclose(f);
        if (probe >= 1 && probe < stretch) stretch = probe;
    }
    return stretch;
}

static double recompile_estimate(const kiln_program *p) {
    size_t len = p->tune.unit_bytes ? p->tune.unit_bytes : p->plan.source ? strlen(p->plan.source) : 0;
    /* a machine busier than its cores stretches a compile by about the load
     * per core (a tiny program measured 0.55 s estimated against 6.4 s real
     * at load 11.6 on 2 cores), or by less when the plan measured less
     * (measured_stretch: niced neighbours); overestimating only shortens
     * the search. A rate this process learnt from a real compile holds the
     * load already (gemma-3-270m at load 10.8: 16 s real, 29 s when
     * stretched again) */
    return rt_tune_recompile_s(len, rt_cc_seconds_per_byte_for(p->tune.rate_key), guess_stretch(p->tune.stretch));
}

/* the recompile's reserve now, during a search: the plan's estimate scaled
 * by how much slower the machine has become since the plan (measured again
 * at most once a second, 30 ms of this thread's CPU work). The load moves
 * under a 30 s search: on a shared 2-core Intel Xeon at load 6-8 the
 * recompile the plan put at 7.6 s took 11.4 s, and a rate learnt from the
 * model's own compile (load 3.6) gave 5.3 s for a 10.9 s recompile */
static double live_reserve(kiln_program *p) {
    double now = kiln_now_s();
    if (p->tune.stretch_plan >= 1 && now - p->tune.stretch_at >= 1.0) {
        double s = measured_stretch();
        p->tune.stretch_now = s < 1 ? 1 : s;
        p->tune.stretch_at = kiln_now_s();
    }
    double base = recompile_estimate(p);
    if (!(p->tune.stretch_plan >= 1)) return base;
    double applied = rt_cc_rate_learnt() ? 1 : p->tune.stretch;
    return base * rt_tune_reserve_scale(applied, p->tune.stretch_plan, p->tune.stretch_now);
}

/* settle, unsearched, every kernel whose group (same key: one search
 * settles them all) takes less than min_share of its bucket's time */
static void plan_skip_small(kiln_program *p, double min_share) {
    int32_t nk = p->plan.sp.nkernels;
    double total[2] = {0, 0};
    for (int32_t k = 0; k < nk; k++)
        for (int b = 0; b < 2; b++) total[b] += p->tune.plan_w[k * 2 + b];
    for (int32_t k = 0; k < nk; k++) {
        const sch_kernel *K = &p->plan.sp.kernels[k];
        int contract = K->contract && cg_contract_emittable(&p->plan.sp, K, p->plan.isa);
        const char *key = contract ? K->contract->key : rt_gtune_key(p->tune.gtune, k);
        if (!contract && !rt_gtune_wanted(p->tune.gtune, k)) continue;
        double group[2] = {0, 0};
        for (int32_t j = 0; j < nk; j++) {
            const sch_kernel *J = &p->plan.sp.kernels[j];
            const char *kj = contract ? (J->contract ? J->contract->key : "") : rt_gtune_key(p->tune.gtune, j);
            if (strcmp(kj, key) != 0) continue;
            for (int b = 0; b < 2; b++) group[b] += p->tune.plan_w[j * 2 + b];
        }
        int small[2];
        for (int b = 0; b < 2; b++) small[b] = group[b] < min_share * total[b] || total[b] <= 0;
        if (contract) {
            for (int b = 0; b < 2; b++)
                if (!p->tune.tuned[k * 2 + b] && small[b]) {
                    p->tune.tuned[k * 2 + b] = 1;
                    p->tune.kept[k * 2 + b] = 1;
                    p->tune.plan_skipped++;
                }
        } else if (small[0] && small[1]) {
            rt_gtune_settle(p->tune.gtune, k);
            p->tune.plan_skipped++;
        }
    }
}

/* which model's program this is, for its remembered compile rate
 * (rt_cc_seconds_per_byte_for): its kernels' contraction keys in order,
 * which neither schedules nor thread counts change */
static unsigned long long program_key(const kiln_program *p) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int32_t k = 0; k < p->plan.sp.nkernels; k++) {
        const sch_kernel *K = &p->plan.sp.kernels[k];
        const char *key = K->contract ? K->contract->key : "-";
        for (const char *c = key; *c; c++) h = (h ^ (uint8_t)*c) * 0x100000001b3ULL;
        h = (h ^ (uint8_t)';') * 0x100000001b3ULL;
    }
    return h ? h : 1;
}

void kiln_program_search_coming(kiln_program *p) {
    if (p) p->tune.coming = 1;
}

kiln_status kiln_program_search(kiln_program *p, double budget_s, const double *weights, double min_share) {
    if (!p || !(budget_s >= 0) || !(min_share >= 0 && min_share < 1)) return KILN_ERR_INVALID;
    p->tune.coming = 0; /* the plan's pending slots say what may still change */
    if (p->plan.exact) {
        graph_run_error(p->plan.user, KILN_ERR_INVALID, "kiln_program_search: an exact program keeps its f32 schedules");
        return KILN_ERR_INVALID;
    }
    if (!host_code(p)) { /* a device's contraction search: a budget, no plan */
        p->tune.budget = budget_s;
        return KILN_OK;
    }
    p->tune.budget = budget_s;
    p->tune.spent = 0;
    p->tune.plan_searched = p->tune.plan_skipped = p->tune.plan_short = 0;
    /* schedules a plan once kept without measuring are open to this search */
    for (int32_t k = 0; budget_s > 0 && k < p->plan.sp.nkernels; k++)
        for (int b = 0; b < 2; b++)
            if (p->tune.unmeasured[k * 2 + b]) p->tune.tuned[k * 2 + b] = p->tune.unmeasured[k * 2 + b] = 0;
    p->tune.plan_best_speedup = 1;
    free(p->tune.plan_w);
    p->tune.plan_w = NULL;
    p->tune.reserve_s = 0;
    p->tune.baseline_s = 0;
    p->tune.recompile_s = 0;
    if (!weights) return KILN_OK;
    size_t n = (size_t)p->plan.sp.nkernels * 2;
    p->tune.plan_w = kiln_xcalloc(n + 1, sizeof *p->tune.plan_w);
    free(p->tune.pend);
    free(p->tune.has_pend);
    p->tune.pend = kiln_xcalloc(n + 1, sizeof *p->tune.pend);
    p->tune.has_pend = kiln_xcalloc(n + 1, sizeof *p->tune.has_pend);
    free(p->tune.kept);
    p->tune.kept = kiln_xcalloc(n + 1, 1);
    free(p->tune.rank_next);
    p->tune.rank_next = kiln_xcalloc(n + 1, sizeof *p->tune.rank_next);
    free(p->tune.short_over);
    p->tune.short_over = kiln_xcalloc(n + 1, 1);
    free(p->tune.carry_d);
    p->tune.carry_d = kiln_xcalloc(n + 1, sizeof *p->tune.carry_d);
    for (size_t i = 0; i < n; i++) p->tune.plan_w[i] = weights[i] > 0 ? weights[i] : 0;
    /* gemma3-270m: 4.9 MB of C, a 0.58 MB unit, 0.31-0.35 s to find it at load 8 */
    p->tune.unit_bytes = p->plan.source ? rt_cc_unit_bytes(p->plan.source) : 0;
    p->tune.unit_bytes_main = p->tune.unit_bytes;
    p->tune.rate_key = program_key(p);
    /* the streaming form's program is rebuilt with the winners too, in one
     * unit with this one (cc_pair.c; alt_with_winners): the bodies they
     * share compiled once, so the pair's unit is about 1.25 times this
     * program's (gemma3-270m: 0.998 and 1.024 MB apart, 1.246 MB joined).
     * Not compiled yet (alt_pending), its own first compile is the
     * model's, but the pair's compile is counted as the search's recompile */
    if ((p->alt && host_code(p->alt)) || p->alt_pending) p->tune.unit_bytes += p->tune.unit_bytes / 4;
    /* measured always: the reference the search's later measurements are
     * held against (live_reserve); applied only to a guessed rate */
    p->tune.stretch_plan = measured_stretch();
    if (p->tune.stretch_plan < 1) p->tune.stretch_plan = 1;
    p->tune.stretch_now = p->tune.stretch_plan;
    p->tune.stretch_at = kiln_now_s();
    p->tune.stretch = rt_cc_rate_learnt() ? 1 : p->tune.stretch_plan;
    p->tune.reserve_s = recompile_estimate(p);
    if (p->plan.opt.tune_verbose)
        fprintf(stderr, "kiln tune: %.2f s kept aside for the recompile (a %zu-byte unit at %.2g s a byte%s, the machine measured %.1fx slower than alone)\n",
                p->tune.reserve_s, p->tune.unit_bytes, rt_cc_seconds_per_byte_for(p->tune.rate_key), rt_cc_rate_learnt() ? ", learnt" : ", guessed", p->tune.stretch);
    plan_skip_small(p, min_share);
    return KILN_OK;
}

/* the planned weight of every contraction slot with kernel k's key in
 * bucket b (one search settles them all) */
static double key_weight(const kiln_program *p, int32_t k, int b) {
    double w = 0;
    for (int32_t j = 0; j < p->plan.sp.nkernels; j++) {
        const sch_contract *c = p->plan.sp.kernels[j].contract;
        if (c && strcmp(c->key, p->plan.sp.kernels[k].contract->key) == 0) w += p->tune.plan_w[j * 2 + b];
    }
    return w;
}

/* slot s may be searched by a later pass: measured here with ranks left,
 * or passed over for a share too small */
static int search_again(const kiln_program *p, int s) {
    return (p->tune.has_pend[s] && p->tune.rank_next[s] > 0) || p->tune.short_over[s];
}

int kiln_program_search_more(kiln_program *p, double budget_s, int max_groups) {
    if (!p || !host_code(p) || !p->tune.plan_w || !p->tune.rank_next || !(budget_s > 0) || max_groups <= 0) return 0;
    int32_t nk = p->plan.sp.nkernels;
    int reopened = 0;
    /* as many groups as the time pays a few candidates each, at least one
     * when it pays one search's minimum, the final recompile kept aside
     * (plan_share would give a reopened group nothing of a pass the reserve
     * takes whole: the pass's runs would be wasted) */
    double avail = budget_s - live_reserve(p);
    double least = rt_tune_min_search_s(0) < rt_tune_min_search_s(1) ? rt_tune_min_search_s(0) : rt_tune_min_search_s(1);
    if (avail < least) return 0;
    int groups = (int)(avail / (1.5 * (rt_tune_min_search_s(0) + rt_tune_min_search_s(1))));
    if (groups < 1) groups = 1;
    if (groups > max_groups) groups = max_groups;
    uint8_t *taken = kiln_xcalloc((size_t)nk * 2 + 1, 1);
    for (int g = 0; g < groups; g++) {
        /* the heaviest group passed over because its share could not pay
         * for a search (its default untried: the "no kernel over 2%
         * keeps an untried default while the budget lasts"), then the
         * heaviest this plan searched that has ranks left. A group searched
         * once has had the cost model's first choices; one passed over has
         * had nothing (gemma3-270m at 2 threads, loaded: the first runs
         * left the f32 attention prefill groups, 6% of a prefill each and
         * 2-4x from their default in a 120 s tune, unsearched, while the
         * heaviest group, the q5_0 projections, kept its default against
         * 28 candidates in the tune) */
        int32_t best_k = -1;
        int best_b = 0, best_tier = 2;
        double best_w = 0;
        for (int32_t k = 0; k < nk; k++)
            for (int b = 0; b < 2; b++) {
                int s = k * 2 + b;
                if (!p->tune.tuned[s] || taken[s] || !search_again(p, s)) continue;
                int tier = p->tune.short_over[s] ? 0 : 1;
                double w = key_weight(p, k, b);
                if (tier < best_tier || (tier == best_tier && w > best_w))
                    best_k = k, best_b = b, best_w = w, best_tier = tier;
            }
        if (best_k < 0) break;
        const char *key = p->plan.sp.kernels[best_k].contract->key;
        for (int32_t j = 0; j < nk; j++) {
            const sch_contract *c = p->plan.sp.kernels[j].contract;
            int s = j * 2 + best_b;
            if (!c || strcmp(c->key, key) != 0 || !p->tune.tuned[s] || !search_again(p, s)) continue;
            /* open to the search at its next launch (seeded with its winner
             * when it has one) */
            if (p->tune.short_over[s]) p->tune.plan_skipped--;
            p->tune.tuned[s] = p->tune.kept[s] = p->tune.short_over[s] = 0;
            taken[s] = 1;
            reopened++;
        }
    }
    free(taken);
    if (reopened) p->tune.budget = p->tune.spent + budget_s;
    return reopened;
}

void kiln_program_search_progress(kiln_program *p, kiln_search_progress_fn fn, void *ctx) {
    if (!p) return;
    p->tune.progress = fn;
    p->tune.progress_ctx = ctx;
}

/* a record for every contraction slot of constant shape the plan passed
 * over or did not reach: its schedule as it is, tried 0 ("kept"), so that the
 * next run knows this machine has been searched for it (model_needs_search)
 * while a later search (kiln tune) may still try it (unmeasured) */
static void record_kept(kiln_program *p) {
    if (!p->tune.fingerprint) p->tune.fingerprint = kiln_device_fingerprint();
    for (int32_t k = 0; p->tune.fingerprint && k < p->plan.sp.nkernels; k++) {
        const sch_kernel *K = &p->plan.sp.kernels[k];
        if (!K->contract || !cg_contract_emittable(&p->plan.sp, K, p->plan.isa)) continue;
        for (int b = 0; b < 2; b++) {
            if (b == 1 && K->contract->mdim < 0) continue;
            if (p->tune.tuned[k * 2 + b] && !p->tune.kept[k * 2 + b]) continue; /* measured, or from the DB */
            if (p->tune.carry_d && p->tune.carry_d[k * 2 + b] > 0 && p->tune.has_seed[k * 2 + b]) {
                /* a family measured on this key at another shape (carry_family) */
                char was[128], now[128];
                sch_contract_sched_print(&K->contract->sched[b], was, sizeof was);
                sch_contract_sched_print(&p->tune.seeds[k * 2 + b], now, sizeof now);
                if (strcmp(was, now) != 0) {
                    K->contract->sched[b] = p->tune.seeds[k * 2 + b];
                    p->tune.retune = 1;
                }
            }
            sch_contract_shape sh;
            if (!contract_shape(p, k, NULL, b, &sh)) continue; /* symbolic sizes: the latest record serves */
            char bucket[96], err[512];
            sch_bucket_text(&sh, bucket, sizeof bucket);
            sch_tune_record r;
            sch_tune_record_new(&r, p->tune.fingerprint, K->contract->key, bucket);
            sch_contract_sched_print(&K->contract->sched[b], r.schedule, sizeof r.schedule);
            r.best_s = r.base_s = 0;
            r.tried = r.rejected = 0;
            if (sch_tunedb_store(&r, err, sizeof err) != KILN_OK) {
                fprintf(stderr, "kiln tune: %s\n", err);
                return;
            }
            p->tune.tuned[k * 2 + b] = p->tune.unmeasured[k * 2 + b] = 1;
        }
    }
}

/* 1 when a contraction slot the plan meant to search (weight above zero,
 * not passed over as small, not settled by the DB) is still unsearched, or
 * a group was passed over because its share could not pay for a search */
static int plan_starved(const kiln_program *p) {
    if (p->tune.plan_short > 0) return 1; /* passed over for a share too small to search */
    for (int32_t k = 0; p->tune.plan_w && k < p->plan.sp.nkernels; k++) {
        const sch_kernel *K = &p->plan.sp.kernels[k];
        if (!K->contract || !cg_contract_emittable(&p->plan.sp, K, p->plan.isa)) continue;
        for (int b = 0; b < 2; b++)
            if (!p->tune.tuned[k * 2 + b] && p->tune.plan_w[k * 2 + b] > 0) return 1;
    }
    return 0;
}

/* the compiled alternative's schedules read again from the tuning DB (the
 * search's records) and its pack copies dropped: ready to be emitted */
static void alt_take_records(kiln_program *alt) {
    free(alt->tune.tuned);
    free(alt->tune.has_seed);
    free(alt->tune.seeds);
    free(alt->tune.unmeasured);
    rt_gtune_free(alt->tune.gtune);
    alt->tune.tuned = alt->tune.has_seed = alt->tune.unmeasured = NULL;
    alt->tune.seeds = NULL;
    alt->tune.gtune = NULL;
    rt_tune_apply_db(alt);
    rt_cpu_drop_pack_copies(alt);
}

/* the alternative form's program (stream_select.c) takes the records the
 * search of its main program wrote: both share the contractions and most
 * generic kernels (same keys), and the search ran the main program only
 * (autotune.c forces it). Not compiled yet: it is compiled now (its
 * compile reads the DB); compiled before: its schedules are read again from
 * the tuning DB and its code rebuilt (a unit the kernel cache holds when
 * nothing changed), or, when search_finish already read them and emitted
 * it (src, taken), that source loaded */
static kiln_status alt_with_winners(kiln_program *p, char *src) {
    int verbose = p->plan.opt.tune_verbose;
    double t = kiln_now_s();
    if (p->alt_pending) {
        kiln_program *alt = rt_stream_alt(p);
        /* its baseline compile, which a load would have done, deferred: not
         * the search's time (kiln_search_status.baseline_s) */
        p->tune.baseline_s += kiln_now_s() - t;
        if (verbose && alt)
            fprintf(stderr, "kiln tune: compiled the streaming form with the winners in %.2f s\n", kiln_now_s() - t);
        return KILN_OK; /* none (no stream kernel, or its compile failed): the materialised form stands alone */
    }
    kiln_program *alt = p->alt;
    if (!alt || !host_code(alt) || alt->plan.exact) {
        free(src);
        return KILN_OK;
    }
    char err[4096];
    if (!src) {
        alt_take_records(alt);
        src = rt_cpu_emit_source(alt);
    }
    kiln_status s = rt_cpu_load_source(alt, src, err, sizeof err);
    p->tune.spent += kiln_now_s() - t;
    p->tune.recompile_s += kiln_now_s() - t;
    if (verbose)
        fprintf(stderr, "kiln tune: recompiled the streaming form with the winners in %.2f s\n", kiln_now_s() - t);
    if (s != KILN_OK) graph_run_error(alt->plan.g, s, "kiln: recompiling the streaming form with the tuned schedules: %s", err);
    return s;
}

kiln_status kiln_program_search_finish(kiln_program *p) {
    if (p) p->tune.coming = 0;
    if (!p || !host_code(p)) return KILN_OK;
    kiln_status s = KILN_OK;
    /* a plan that measured nothing while kernels above its share threshold
     * waited (a budget the profile or the recompile reserve ate: a machine
     * too busy for this run) records nothing as kept, so the next run of
     * the model searches again instead of taking "searched" for an answer */
    if (p->tune.kept && !(p->tune.plan_searched == 0 && plan_starved(p))) record_kept(p);
    free(p->tune.kept);
    p->tune.kept = NULL;
    for (int32_t k = 0; p->tune.has_pend && k < p->plan.sp.nkernels; k++)
        for (int b = 0; b < 2; b++)
            if (p->tune.has_pend[k * 2 + b]) p->plan.sp.kernels[k].contract->sched[b] = p->tune.pend[k * 2 + b];
    free(p->tune.pend);
    free(p->tune.has_pend);
    p->tune.pend = NULL;
    p->tune.has_pend = NULL;
    if (p->tune.retune) {
        char err[4096];
        double t = kiln_now_s();
        p->tune.retune = 0;
        rt_cpu_drop_pack_copies(p);
        double est = p->tune.plan_w ? live_reserve(p) : recompile_estimate(p);
        p->tune.reserve_s = est;
        /* taken before the compile, which teaches this process the rate */
        double g = guess_stretch(p->tune.stretch_now);
        g = g > 4 ? 4 : g;
        /* the streaming form is compiled in one unit with this recompile
         * (rt_cc_companion, cc_pair.c): its kernels that are this
         * program's (the layers' contractions, norms) compiled once. Its
         * first compile (pending) builds the pair, this one then loads it
         * from the cache; a compiled one is the companion of this build */
        double alt_own = 0; /* the pending form's build outside the pair's compile: the model's */
        int alt_done = 0;
        size_t pair_unit = 0;
        char *src = rt_cpu_emit_source(p), *alt_src = NULL;
        rt_cc_paired_seconds(NULL);
        if (p->alt_pending) {
            rt_cc_companion(src, cg_isa_cflags(p->plan.isa));
            double ta = kiln_now_s();
            kiln_program *alt = rt_stream_alt(p);
            rt_cc_companion(NULL, NULL);
            double pair_s = rt_cc_paired_seconds(&pair_unit);
            alt_own = kiln_now_s() - ta - pair_s;
            p->tune.baseline_s += alt_own;
            alt_done = 1;
            if (p->plan.opt.tune_verbose && alt)
                fprintf(stderr, "kiln tune: compiled the streaming form with the winners in %.2f s (%.2f s of it the pair's C compile)\n",
                        kiln_now_s() - ta, pair_s);
        } else if (p->alt && host_code(p->alt) && !p->alt->plan.exact) {
            alt_take_records(p->alt);
            alt_src = rt_cpu_emit_source(p->alt);
            rt_cc_companion(alt_src, cg_isa_cflags(p->alt->plan.isa));
        }
        s = rt_cpu_load_source(p, src, err, sizeof err);
        rt_cc_companion(NULL, NULL);
        if (!alt_done) rt_cc_paired_seconds(&pair_unit);
        p->tune.spent += kiln_now_s() - t - alt_own;
        p->tune.recompile_s = kiln_now_s() - t - alt_own;
        /* this machine's rate for later processes, over the stretch the
         * estimate would give it now (guess_stretch with the slowdown
         * measured last), so that the same conditions estimate the time it
         * took: the probe alone over-reads a compile's slowdown here (3.7x
         * measured, the recompile 1.35x its quiet time, load 6 on a shared
         * 2-core Xeon), and divided by it the rate fell below a quiet one */
        size_t unit = pair_unit ? pair_unit : p->tune.unit_bytes_main;
        if (s == KILN_OK && p->tune.recompile_s > 0.5 && unit > ((size_t)256 << 10) &&
            g >= 1) /* a cached unit loads in milliseconds and teaches nothing */
            rt_cc_rate_remember(p->tune.recompile_s / (double)unit / g, p->tune.rate_key);
        if (p->plan.opt.tune_verbose)
            fprintf(stderr,
                    "kiln tune: recompiled with the winners in %.2f s (kept aside for it: %.2f s; a %zu-byte unit, "
                    "the machine measured %.1fx slower than alone at the plan, %.1fx at its end)\n",
                    kiln_now_s() - t, est, p->tune.unit_bytes, p->tune.stretch_plan, p->tune.stretch_now);
        if (s != KILN_OK) graph_run_error(p->plan.g, s, "kiln: recompiling with the tuned schedules: %s", err);
        if (s == KILN_OK && p->alt && !alt_done) s = alt_with_winners(p, alt_src);
        else free(alt_src);
    }
    if (s == KILN_OK && p->alt_pending) s = alt_with_winners(p, NULL);
    free(p->tune.plan_w);
    p->tune.plan_w = NULL;
    free(p->tune.rank_next);
    p->tune.rank_next = NULL;
    free(p->tune.short_over);
    p->tune.short_over = NULL;
    free(p->tune.carry_d);
    p->tune.carry_d = NULL;
    /* the search is over: later runs keep what it found, and search nothing */
    p->tune.budget = p->tune.spent;
    return s;
}

void kiln_program_search_status(const kiln_program *p, kiln_search_status *out) {
    memset(out, 0, sizeof *out);
    if (!p) return;
    out->budget_s = p->tune.budget;
    out->spent_s = p->tune.spent;
    out->reserve_s = p->tune.reserve_s;
    out->baseline_s = p->tune.baseline_s;
    out->recompile_s = p->tune.recompile_s;
    out->searched = p->tune.plan_searched;
    out->skipped = p->tune.plan_skipped;
    out->untuned = kiln_program_untuned(p);
    for (int32_t k = 0; k < p->plan.sp.nkernels && host_code(p); k++) {
        const sch_kernel *K = &p->plan.sp.kernels[k];
        if (K->contract && cg_contract_emittable(&p->plan.sp, K, p->plan.isa)) out->slots += 1 + (K->contract->mdim >= 0);
    }
    out->best_speedup = p->tune.plan_best_speedup;
    out->measurements = p->tune.measurements;
}

/* ---- schedule search ----------------------------------------------------- */

static int contract_shape(const kiln_program *p, int32_t k, const int64_t *values, int bucket,
                          sch_contract_shape *sh);

char *kiln_program_space_report(const kiln_program *p) {
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (!p || !host_code(p)) return kiln_xstrdup("");
    char *seen = kiln_xstrdup("\n");
    int64_t total = 0;
    int kinds = 0;
    for (int32_t k = 0; k < p->plan.sp.nkernels; k++) {
        const sch_kernel *K = &p->plan.sp.kernels[k];
        if (!cg_contract_emittable(&p->plan.sp, K, p->plan.isa)) continue;
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

/* the CPU features the contraction families may need (sched/family.h), as
 * the shape carries them */
static void cpu_features(sch_contract_shape *sh) {
    sh->vnni = rt_cpu_has("avx512_vnni");
    sh->amx = rt_cpu_has("amx_tile") && rt_cpu_has("amx_int8");
    sh->amx_bf16 = rt_cpu_has("amx_tile") && rt_cpu_has("amx_bf16") && rt_cpu_has("avx512_bf16");
    sh->bf16 = rt_cpu_has("avx512_bf16");
}

/* the contraction's sizes: with values (a run) or, without, only when they
 * are constants (m is then the bucket's representative, 1 or 64) */
static int contract_shape(const kiln_program *p, int32_t k, const int64_t *values, int bucket,
                          sch_contract_shape *sh) {
    const sch_kernel *K = &p->plan.sp.kernels[k];
    const sch_contract *c = K->contract;
    sym_pool *sp = p->plan.g->syms;
    memset(sh, 0, sizeof *sh);
    sh->m = 1;
    sh->n = 1;
    sh->nbatch = 1;
    sh->b_dtype = p->plan.sp.bufs[c->b_buf].dtype;
    sh->nthreads = rt_pool_threads(p->plan.pool);
    cpu_features(sh);
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
 * slots whose sizes besides M are symbolic: the prefill bucket ranked at
 * 256 for every size variable, the decode bucket the fixed default */
static void cost_model_defaults(kiln_program *p) {
    /* the layers repeat a handful of (key, shape) pairs: each is ranked once,
     * the rest take its choice (gemma3-270m: 326 slots, 0.4-1 s ranked one by one) */
    int32_t nk = p->plan.sp.nkernels, ndone = 0;
    struct ranked { int32_t k; int b; sch_contract_shape sh; } *done = kiln_xcalloc((size_t)nk * 2 + 1, sizeof *done);
    uint32_t nv = sym_var_count(p->plan.g->syms);
    int64_t *at256 = kiln_xmalloc(((size_t)nv + 1) * sizeof *at256);
    for (uint32_t v = 0; v <= nv; v++) at256[v] = 256;
    for (int32_t k = 0; k < nk; k++) {
        sch_kernel *K = &p->plan.sp.kernels[k];
        if (!cg_contract_emittable(&p->plan.sp, K, p->plan.isa)) continue;
        for (int b = 0; b < 2; b++) {
            sch_contract_shape sh;
            sch_contract_sched sc;
            if (p->tune.tuned[k * 2 + b] || (K->contract->mdim < 0 && b == 1)) continue;
            /* symbolic sizes besides M (attention over the positions so
             * far): the prefill bucket ranked with every size variable at
             * 256, the profile's prompt from position 0. The fixed default
             * (packed f32) ran the attention products of Llama-1B-shaped
             * q4_k where the model and a tune take the AMX bf16 tiles:
             * pp512 at 1 thread 226 -> 249 t/s with them forced (Intel Xeon
             * with AMX). The decode bucket keeps the fixed default. */
            if (!contract_shape(p, k, NULL, b, &sh) && !(b == 1 && contract_shape(p, k, at256, b, &sh))) continue;
            if (b == 1) sh.m = 256;
            int i = 0;
            while (i < ndone && !(done[i].b == b && memcmp(&done[i].sh, &sh, sizeof sh) == 0 &&
                                  strcmp(p->plan.sp.kernels[done[i].k].contract->key, K->contract->key) == 0))
                i++;
            if (i < ndone) {
                K->contract->sched[b] = p->plan.sp.kernels[done[i].k].contract->sched[b];
            } else if (rt_tune_cost_first(&p->plan.sp, k, &sh, p->plan.isa, &sc)) {
                K->contract->sched[b] = sc;
                done[ndone++] = (struct ranked){k, b, sh};
            }
        }
    }
    free(done);
    free(at256);
}

/* schedules from the tuning DB: this machine's records are used as they
 * are (no search); another machine's only seed a search */
void rt_tune_apply_db(kiln_program *p) {
    int32_t nk = p->plan.sp.nkernels;
    p->tune.tuned = kiln_xcalloc((size_t)nk * 2 + 1, 1);
    p->tune.has_seed = kiln_xcalloc((size_t)nk * 2 + 1, 1);
    p->tune.seeds = kiln_xcalloc((size_t)nk * 2 + 1, sizeof *p->tune.seeds);
    p->tune.unmeasured = kiln_xcalloc((size_t)nk * 2 + 1, 1);
    /* generic kernels: exact records for constant sizes (tune_generic.c) */
    p->tune.gtune = rt_gtune_new(&p->plan.sp, p->plan.isa, rt_pool_threads(p->plan.pool), &p->plan.opt);
    if (!p->plan.exact) rt_gtune_apply_db(p->tune.gtune, &p->plan.sp, &p->tune.fingerprint);
    int off = p->plan.exact || p->plan.opt.tunedb_off;
    int any = 0;
    for (int32_t k = 0; k < nk && !any; k++) any = cg_contract_emittable(&p->plan.sp, &p->plan.sp.kernels[k], p->plan.isa);
    if (!any) return;
    if (!p->tune.fingerprint) p->tune.fingerprint = kiln_device_fingerprint();
    for (int32_t k = 0; k < nk && !off; k++) {
        sch_kernel *K = &p->plan.sp.kernels[k];
        if (!cg_contract_emittable(&p->plan.sp, K, p->plan.isa)) continue;
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
                sch_bucket_affixes(b, rt_pool_threads(p->plan.pool), pre, sizeof pre, suf, sizeof suf);
                if (!rt_retune() && sch_tunedb_lookup_latest(p->tune.fingerprint, K->contract->key, pre, suf, &r) &&
                    sch_contract_sched_parse(r.schedule, &sc)) {
                    K->contract->sched[b] = sc;
                    p->tune.tuned[k * 2 + b] = 1;
                }
                continue;
            }
            char bucket[96];
            sch_bucket_text(&sh, bucket, sizeof bucket);
            sch_tune_record r;
            int exact = 0;
            sch_contract_sched sc;
            if (!sch_tunedb_lookup(p->tune.fingerprint, K->contract->key, bucket, &r, &exact)) {
                /* none of its own: this machine's record at another thread
                 * count, or for a neighbouring shape, seeds its search */
                if (sch_tunedb_lookup_near(p->tune.fingerprint, K->contract->key, bucket, &r) &&
                    sch_contract_sched_parse(r.schedule, &sc)) {
                    p->tune.seeds[k * 2 + b] = sc;
                    p->tune.has_seed[k * 2 + b] = 1;
                }
                continue;
            }
            if (!sch_contract_sched_parse(r.schedule, &sc)) continue; /* never trusted */
            if (exact && !rt_retune()) {
                K->contract->sched[b] = sc;
                p->tune.tuned[k * 2 + b] = 1;
                p->tune.unmeasured[k * 2 + b] = r.tried == 0;
            } else {
                p->tune.seeds[k * 2 + b] = sc;
                p->tune.has_seed[k * 2 + b] = 1;
            }
        }
    }
    /* KILN_CONTRACT_SCHED_SMALL / _LARGE: one schedule (text as in the DB)
     * for every contraction's small-M / large-M bucket — tests and experiments */
    for (int b = 0; b < 2; b++) {
        const char *txt = b ? p->plan.opt.contract_sched_large : p->plan.opt.contract_sched_small;
        sch_contract_sched sc;
        if (!txt || !txt[0] || p->plan.exact) continue;
        if (!sch_contract_sched_parse(txt, &sc)) {
            fprintf(stderr, "kiln: ignoring %s='%s': not a contraction schedule\n",
                    b ? "KILN_CONTRACT_SCHED_LARGE" : "KILN_CONTRACT_SCHED_SMALL", txt);
            continue;
        }
        for (int32_t k = 0; k < nk; k++) {
            sch_kernel *K = &p->plan.sp.kernels[k];
            if (!K->contract) continue;
            K->contract->sched[b] = sc;
            p->tune.tuned[k * 2 + b] = 1;
        }
    }
    /* no record: the cost model's first choice (what a search would time
     * first), not the fixed default */
    if (!p->plan.exact && !p->plan.fixed_defaults) cost_model_defaults(p);
    /* a schedule the micro-kernel cannot take (a record from a newer kiln,
     * int8 arithmetic on a CPU without VNNI, AMX bf16 without amx_bf16,
     * packed bf16 without avx512_bf16), or any approximate arithmetic in an
     * exact program: back to the defaults (f32) */
    sch_contract_shape feat;
    memset(&feat, 0, sizeof feat);
    cpu_features(&feat);
    unsigned have = sch_family_have(&feat);
    for (int32_t k = 0; k < nk; k++) {
        sch_kernel *K = &p->plan.sp.kernels[k];
        if (!K->contract) continue;
        /* the CPU features each schedule's family needs (sched/family.h) */
        unsigned needs = 0;
        for (int b = 0; b < 2; b++) {
            const sch_family *f = sch_family_of(&K->contract->sched[b]);
            needs |= f ? f->needs : 0u;
        }
        int approx = K->contract->sched[0].arith != SCH_ARITH_F32 || K->contract->sched[1].arith != SCH_ARITH_F32;
        if (cg_contract_emittable(&p->plan.sp, K, p->plan.isa) && !(needs & ~have) && !(p->plan.exact && approx))
            continue;
        kiln_dtype bt = p->plan.sp.bufs[K->contract->b_buf].dtype;
        K->contract->sched[0] = sch_contract_default_of(K->contract, 0, bt);
        K->contract->sched[1] = sch_contract_default_of(K->contract, 1, bt);
        p->tune.tuned[k * 2] = p->tune.tuned[k * 2 + 1] = 0;
    }
}

void rt_tune_progress(const kiln_program *p) {
    if (!p->tune.progress || !p->tune.plan_w) return;
    kiln_search_status st;
    kiln_program_search_status(p, &st);
    p->tune.progress(p->tune.progress_ctx, &st);
}

/* 1 when kernel j is an unsettled slot of kernel k's group in this bucket:
 * a contraction with k's key at the same shape (one search settles them) */
static int in_open_group(const kiln_program *p, int32_t k, int32_t j, int bucket, const char *bucket_text) {
    const sch_kernel *J = &p->plan.sp.kernels[j];
    if (!J->contract || strcmp(J->contract->key, p->plan.sp.kernels[k].contract->key) != 0 ||
        p->tune.tuned[j * 2 + bucket])
        return 0;
    sch_contract_shape sj;
    char bj[96];
    if (!contract_shape(p, j, p->run.values, bucket, &sj)) return 0;
    sch_bucket_text(&sj, bj, sizeof bj);
    return strcmp(bj, bucket_text) == 0;
}

/* the planned weight of kernel k's group in this bucket: every contraction
 * with its key and shape takes the winner of one search, so the search gets
 * the time of all of them */
static double contract_group_weight(const kiln_program *p, int32_t k, int bucket, const char *bucket_text) {
    double w = 0;
    for (int32_t j = 0; j < p->plan.sp.nkernels; j++)
        if (in_open_group(p, k, j, bucket, bucket_text)) w += p->tune.plan_w[j * 2 + bucket];
    return w;
}

/* every slot of kernel k's group (its key, this bucket's shape) settled
 * unsearched, as the plan's small kernels are: kept, recorded as such
 * unless a later pass searches it; a slot this plan measured keeps its
 * winner */
static void pass_over_group(kiln_program *p, int32_t k, int bucket, const char *bucket_text) {
    for (int32_t j = 0; j < p->plan.sp.nkernels; j++) {
        if (!in_open_group(p, k, j, bucket, bucket_text)) continue;
        int sl = j * 2 + bucket;
        p->tune.tuned[sl] = 1;
        if (p->tune.has_pend[sl]) continue; /* a later pass's reopened group: its winner stands */
        p->tune.kept[sl] = 1;
        p->tune.short_over[sl] = 1; /* a later pass may search it (kiln_program_search_more) */
        p->tune.plan_skipped++;
    }
    p->tune.plan_short++;
}

/* seconds a search of weight w may take out of left: its part of what is
 * left for searching (the final recompile kept aside) in proportion to the
 * weight of everything the plan has still to search; 0 when nothing is left */
static double live_reserve(kiln_program *p);

static double plan_share(kiln_program *p, double w, double left) {
    double pending = 0;
    for (int32_t k = 0; k < p->plan.sp.nkernels; k++) {
        const sch_kernel *K = &p->plan.sp.kernels[k];
        if (K->contract && cg_contract_emittable(&p->plan.sp, K, p->plan.isa)) {
            for (int b = 0; b < 2; b++)
                if (!p->tune.tuned[k * 2 + b]) pending += p->tune.plan_w[k * 2 + b];
        } else if (rt_gtune_wanted(p->tune.gtune, k)) {
            pending += p->tune.plan_w[k * 2] + p->tune.plan_w[k * 2 + 1];
        }
    }
    p->tune.reserve_s = live_reserve(p);
    double avail = left - p->tune.reserve_s;
    if (avail <= 0 || w <= 0) return 0;
    return pending > w ? avail * w / pending : avail;
}

/* a winner of another family than the kernel's default (the int8 tiles
 * reading q4_k in place where the cost model put the repacked ones first)
 * is carried to the unsettled slots of the same key and bucket kind at
 * other shapes: each is seeded with the schedule of that family nearest to
 * the winner that its shape can take (rt_tune_nearest_of), from the nearest
 * shape measured, and a slot the plan does not reach runs it (record_kept)
 * instead of the cost model's first choice. The model's own first choice in
 * the family was the wrong seed: it took the family's place in round one
 * (Llama-1B-shaped q4_k at 1 thread: the 8-row plain tile, 688 us, where
 * the 1-row one a shape away had won and runs 569 us), and the search
 * never timed the tile that had won */
static void carry_family(kiln_program *p, int32_t k, int bucket, const sch_contract_shape *sh,
                         const sch_contract_sched *winner) {
    const sch_kernel *K = &p->plan.sp.kernels[k];
    if (!p->tune.carry_d || !sch_family_of(winner)) return;
    for (int32_t j = 0; j < p->plan.sp.nkernels; j++) {
        const sch_kernel *J = &p->plan.sp.kernels[j];
        int s = j * 2 + bucket;
        if (!J->contract || p->tune.tuned[s] || strcmp(J->contract->key, K->contract->key) != 0) continue;
        sch_contract_shape sj;
        if (!contract_shape(p, j, p->run.values, bucket, &sj) || (sj.n == sh->n && sj.k == sh->k)) continue;
        double d = 1 + fabs(log((double)sj.n / (double)sh->n)) + fabs(log((double)sj.k / (double)sh->k));
        sch_contract_sched sc;
        if (p->tune.carry_d[s] > 0 && p->tune.carry_d[s] <= d) continue;
        if (!rt_tune_nearest_of(&p->plan.sp, j, &sj, p->plan.isa, winner, &sc)) continue;
        p->tune.seeds[s] = sc;
        p->tune.has_seed[s] = 1;
        p->tune.carry_d[s] = (float)d;
    }
}

/* search kernel k's schedule for this bucket now, on this run's buffers;
 * the winner runs this launch and every kernel with the same key and
 * bucket takes its schedule (emitted into the program after the run) */
kiln_status rt_tune_contract_now(kiln_program *p, int32_t k, int bucket, rt_kernel_fn *fn_out,
                                 rt_module **mods_out) {
    sch_kernel *K = &p->plan.sp.kernels[k];
    sch_contract_shape sh;
    if (!contract_shape(p, k, p->run.values, bucket, &sh)) return KILN_OK;
    char bucket_text[96];
    sch_bucket_text(&sh, bucket_text, sizeof bucket_text);
    double left = p->tune.budget - p->tune.spent;
    if (left <= 0) return KILN_OK;
    rt_tune_job job;
    memset(&job, 0, sizeof job);
    job.sp = &p->plan.sp;
    job.kernel = k;
    job.bucket = bucket;
    job.shape = sh;
    job.be = p->plan.be;
    job.pool = p->plan.pool;
    job.nthreads = rt_pool_threads(p->plan.pool);
    job.isa = p->plan.isa;
    job.bufs = rt_cpu_bufs(p);
    job.values = p->run.values;
    job.out_bytes = p->run.bytes[K->out_buf];
    job.b_bytes = p->run.bytes[K->contract->b_buf];
    job.rp_bytes = rt_cpu_repacked_bytes(p, K->contract->b_buf);
    job.seed = p->tune.has_seed[k * 2 + bucket] ? &p->tune.seeds[k * 2 + bucket] : NULL;
    if (p->tune.has_pend && p->tune.has_pend[k * 2 + bucket]) { /* a later pass: its last winner, then new ranks */
        job.seed = &p->tune.pend[k * 2 + bucket];
        job.rank_from = p->tune.rank_next ? p->tune.rank_next[k * 2 + bucket] : 0;
    }
    /* without a plan one kernel shape may take an eighth of the whole budget
     * (at least 2 s): a model has a handful of distinct shapes, each worth
     * searching; with one, its share of what is left (plan_share) */
    double share = p->tune.budget / 8 > 2.0 ? p->tune.budget / 8 : 2.0;
    if (p->tune.plan_w) {
        share = plan_share(p, contract_group_weight(p, k, bucket, bucket_text), left);
        if (share <= 0) return KILN_OK;
        if (share < rt_tune_min_search_s(bucket)) { /* it would overrun its share: passed over, and out of the others' way */
            pass_over_group(p, k, bucket, bucket_text);
            return KILN_OK;
        }
    }
    job.budget_s = left < share ? left : share;
    job.inject_wrong = p->tune.inject_wrong;
    job.verbose = p->plan.opt.tune_verbose;
    job.warm = p->plan.opt.tune_warm;
    rt_tune_result res;
    char err[1024];
    int show = isatty(2) || p->plan.opt.tune_verbose;
    if (show)
        fprintf(stderr, "kiln tune: kernel %d (%s, %s): searching %d-point space ...\n", (int)k, K->contract->key,
                bucket_text, sch_space_contract(&sh, NULL, 0));
    sch_contract_sched was_sched = K->contract->sched[bucket];
    kiln_status s = rt_tune_contract(&job, &res, err, sizeof err);
    p->tune.spent += res.seconds;
    p->tune.measurements += res.tried;
    p->tune.plan_searched++;
    if (s == KILN_OK && res.best_s > 0 && res.base_s / res.best_s > p->tune.plan_best_speedup)
        p->tune.plan_best_speedup = res.base_s / res.best_s;
    rt_tune_progress(p);
    if (s != KILN_OK) {
        for (int i = 0; i < 2; i++)
            if (res.mods[i]) p->plan.be->module_free(res.mods[i]);
        fprintf(stderr, "kiln tune: kernel %d: search failed (%s); keeping the default schedule\n", (int)k, err);
        p->tune.tuned[k * 2 + bucket] = 1;
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
    sch_tune_record_new(&r, p->tune.fingerprint, K->contract->key, bucket_text);
    snprintf(r.schedule, sizeof r.schedule, "%s", sched);
    r.best_s = res.best_s;
    r.base_s = res.base_s;
    r.tried = res.tried;
    r.rejected = res.rejected;
    if (sch_tunedb_store(&r, err, sizeof err) != KILN_OK) fprintf(stderr, "kiln tune: %s\n", err);
    if (res.best_s < res.base_s * 0.97 && sch_family_of(&res.winner) != sch_family_of(&was_sched))
        carry_family(p, k, bucket, &sh, &res.winner);
    /* every kernel of the same key and shape takes the winner */
    for (int32_t j = 0; j < p->plan.sp.nkernels; j++) {
        sch_kernel *J = &p->plan.sp.kernels[j];
        if (!J->contract || strcmp(J->contract->key, K->contract->key) != 0) continue;
        sch_contract_shape sj;
        if (!contract_shape(p, j, p->run.values, bucket, &sj)) continue;
        char bj[96];
        sch_bucket_text(&sj, bj, sizeof bj);
        if (strcmp(bj, bucket_text) != 0) continue;
        char before[128], after[128];
        sch_contract_sched_print(&J->contract->sched[bucket], before, sizeof before);
        sch_contract_sched_print(&res.winner, after, sizeof after);
        if (strcmp(before, after) != 0) p->tune.retune = 1;
        p->tune.tuned[j * 2 + bucket] = 1;
        if (p->tune.rank_next) p->tune.rank_next[j * 2 + bucket] = res.rank_end < res.space ? res.rank_end : 0;
        if (p->tune.plan_w) {
            /* under a plan the code is recompiled once, at its end: until
             * then every kernel keeps the schedule its code was made for */
            p->tune.pend[j * 2 + bucket] = res.winner;
            p->tune.has_pend[j * 2 + bucket] = 1;
            continue;
        }
        J->contract->sched[bucket] = res.winner;
    }
    *fn_out = res.fn;
    mods_out[0] = res.mods[0];
    mods_out[1] = res.mods[1];
    return KILN_OK;
}

/* a generic kernel's share of the budget for its search now: without a plan
 * an eighth of the whole (at least 1 s), with one its part of what is left;
 * out of budget a sliver (settled from the DB or kept, nothing measured) */
double rt_tune_share(kiln_program *p, int32_t k) {
    rt_tuner *t = &p->tune;
    double left = t->budget - t->spent, share = t->budget / 8 > 1.0 ? t->budget / 8 : 1.0;
    if (t->plan_w) share = plan_share(p, t->plan_w[2 * k] + t->plan_w[2 * k + 1], left);
    return share <= 0 ? 1e-9 : share;
}

/* the search changed schedules during a run: the program gets the winners
 * (the recompile is the search's time too); under a plan, once, when it
 * ends (kiln_program_search_finish) */
kiln_status rt_tune_after_run(kiln_program *p, kiln_status s) {
    if (!p->tune.retune || s != KILN_OK || p->tune.plan_w) return s;
    char err[4096];
    p->tune.retune = 0;
    double t_emit = kiln_now_s();
    rt_cpu_drop_pack_copies(p);
    kiln_status rs = rt_cpu_emit_and_load(p, err, sizeof err);
    if (p->tune.budget > 0) p->tune.spent += kiln_now_s() - t_emit;
    if (rs != KILN_OK) graph_run_error(p->plan.g, rs, "kiln_run: recompiling with the tuned schedules: %s", err);
    return rs;
}

char *kiln_schedule_space(void) { return sch_space_describe(); }
