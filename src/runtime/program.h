/* program.h — kiln_program: a compiled plan, its run state, its profiler
 * and its tuner, and the backend's own state beside them.
 *
 * Ownership: kiln_program owns all four parts (exec.c frees them) and the
 * backend's state p->dev (its release member frees it). The plan is made by
 * kiln_compile and changes only when a search re-emits it with new
 * schedules; the run state is remade in place by every kiln_run (run.c);
 * the profiler and the tuner are read and reset through the public API.
 *
 * Shapes: every per-buffer array has sp.nbufs + 1 entries, every per-kernel
 * array sp.nkernels + 1, and every per-slot tuner array (kernel, M bucket)
 * 2 * sp.nkernels + 1, indexed k * 2 + bucket (bucket 1: M > SCH_SMALL_M).
 */
#ifndef KILN_RUNTIME_PROGRAM_H
#define KILN_RUNTIME_PROGRAM_H

#include "backend.h"
#include "contract.h"
#include "graph.h"
#include "memplan.h"
#include "repack.h"
#include "tune_generic.h"

/* the compiled plan: what kiln_compile made from the graph */
typedef struct rt_plan {
    kiln_graph *g;    /* what the kernels compute: the e-graph's extraction of user */
    kiln_graph *user; /* the caller's graph: bindings come from it, results go to it */
    int compiling;    /* set while kiln_compile runs: errors on g are copied to user on free */
    const rt_backend *be;
    sch_program sp;
    char *source;     /* the generated source of the code now loaded */
    cg_isa isa;
    int exact;        /* kiln_compile_options.exact: f32 contractions only, no tuning DB, no search */
    int fixed_defaults; /* kiln_compile_options.fixed_defaults: no record = the fixed f32 default */
    kiln_compile_options opt; /* as compiled: the knobs (profile, pack copies, tuning, GPU, ...) */
    rt_pool *pool;    /* the threads kernels run on (one on device backends) */
    rt_module *mod;   /* host-code backends: the loaded code */
    rt_kernel_fn *fns; /* host-code backends: per kernel (NULL for host steps) */
} rt_plan;

/* the run state: sizes and places of the last run, kept between runs */
typedef struct rt_run {
    int64_t *values;   /* symbolic variables under the bindings */
    uint8_t *bound;
    uint32_t nvalues;
    size_t *bytes;     /* per buffer */
    rt_live *live;     /* per buffer: liveness over kernel indices and the arena offset */
    int live_ready;    /* live[].first/last computed (they do not depend on sizes) */
    int32_t *bind_at;  /* per buffer: the index of its binding in g->inputs at the last run (-1: none yet) */
    size_t arena_used; /* the arena plan's bytes (0 before the first run) */
    int replanned;     /* 1: this run placed the arena anew; -1: the last placing failed */
    int poison;        /* kiln_compile_options.poison: result buffers filled with 0xff before every run */
    int32_t *kerr;     /* per kernel: RT_KERR_* a device reported (sync) */
} rt_run;

/* the profiler (kiln_compile_options.profile, kiln_program_profile_on): per kernel, summed over runs */
typedef struct rt_profiler {
    double *secs;    /* NULL: off */
    double *bytes;   /* bytes touched */
    double *flops;   /* contraction flops */
    uint8_t *arith;  /* the sch_arith of each contraction's last launch (its peak in the report) */
    int64_t runs;
} rt_profiler;

/* the tuner: the schedule search's state (tune.c does the measuring) */
typedef struct rt_tuner {
    double budget, spent;
    char *fingerprint;
    uint8_t *tuned;              /* per slot: 1 once its schedule is final (from the DB or measured here) */
    int coming;                  /* a search will plan (kiln_program_search_coming): no weight is released before it */
    sch_contract_sched *seeds;   /* per slot: a record from another machine */
    uint8_t *has_seed;
    int retune;                  /* schedules changed during a run: re-emit after it */
    int inject_wrong;            /* kiln_compile_options.inject_wrong: tests */
    int measurements;            /* candidates measured */
    rt_gtune_state *gtune;       /* generic kernels' search (tune_generic.c) */
    /* a search plan (kiln_program_search): where the budget goes. plan_w per
     * slot: seconds the kernel takes in the planned workload (NULL: no plan,
     * every kernel shape may take an eighth); reserve_s: the final recompile
     * with the winners, kept out of the search's share (estimated from
     * unit_bytes: the program's source as the compiler will see it, its
     * layers' copies of a kernel once, cc_dedup.c); searched/skipped:
     * kernel slots settled by the plan */
    double *plan_w;
    sch_contract_sched *pend; /* per slot: a winner the plan applies when it ends */
    uint8_t *kept;            /* per slot: the plan passed it over (recorded as kept, tried 0) */
    uint8_t *unmeasured;      /* per slot: its schedule is a "kept" record: a search may try it */
    uint8_t *has_pend;
    int32_t *rank_next;       /* per slot, searched by this plan: the rank its next pass starts at (0: none left) */
    uint8_t *short_over;      /* per slot: passed over for a share too small to search (a later pass may) */
    float *carry_d;           /* per slot: seeded with a family a winner of the same key at another shape
                                 measured (exec.c carry_family): 1 + the shapes' log distance; 0: none */
    double reserve_s;
    double baseline_s; /* the streaming form's compile after the search (alt_with_winners), not in spent */
    double recompile_s; /* the recompile with the winners (main program and a compiled streaming form), in spent */
    size_t unit_bytes;
    size_t unit_bytes_main;   /* of it the main program's (the rest: the streaming form's, in proportion) */
    unsigned long long rate_key; /* the program's key for its remembered compile rate (exec.c program_key) */
    double stretch;           /* applied to a guessed compile rate: the slowdown measured at the plan (1 when the rate was learnt) */
    double stretch_plan;      /* the slowdown for this process measured at the plan (>= 1) */
    double stretch_now;       /* and measured again during the search (live_reserve), at stretch_at */
    double stretch_at;
    int plan_searched, plan_skipped, plan_pending;
    int plan_short;           /* groups passed over because their share could not pay for a search */
    double plan_best_speedup;
    kiln_search_progress_fn progress; /* called after each search under a plan (NULL: none) */
    void *progress_ctx;
} rt_tuner;

struct kiln_program {
    rt_plan plan;
    rt_run run;
    rt_profiler prof;
    rt_tuner tune;
    void *dev; /* the backend's own state (cpu_run.c's rt_cpu_state, gpu_exec.c's rt_gpu_program) */
    int64_t msplit_launches; /* contraction launches split along M as well (cpu_run.c, sched/contract_split.h) */
    struct kiln_program *alt; /* option stream 2: the streaming form, run for its buckets (stream_select.c) */
    uint8_t alt_pending;      /* option stream 2: alt not compiled yet (rt_stream_alt compiles it at first need) */
    /* the attention form per bucket (KILN_FORM_*), measured: -1 none (the
     * cost model picks), 0 materialised, 1 streaming, 2 streaming-bf16
     * (KILN_FORM_*: the streaming program with its tiles in bf16); runner_up
     * the measured second; t: [bucket][form]
     * seconds; loaded from the tuning DB at the first pick (stream_select.c);
     * pin: a bucket's form set by the caller (kiln_program_form_pin), over
     * the measured choice, -1 none */
    struct {
        int loaded, force;
        int8_t choice[KILN_FORM_BUCKETS], pin[KILN_FORM_BUCKETS], runner_up[KILN_FORM_BUCKETS];
        double t[KILN_FORM_BUCKETS][KILN_FORMS]; /* 0: not measured */
    } forms;
    /* a streaming program run in the streaming-bf16 form: its stream kernels
     * are launched with CG_KF_BF16 (set by kiln_run of the program whose
     * alternative this is, stream_select.c; read by cpu_run.c) */
    int stream_bf16_run;
};

/* ---- between the parts (run.c, exec.c, cpu_run.c, profile.c) ---- */
/* one run under the graph's current bindings (run.c) */
kiln_status rt_program_run(kiln_program *p);
/* sym_eval under the run's values; an unbound symbol is reported to the graph, naming `what` (run.c) */
kiln_status rt_run_eval(kiln_program *p, sym_id s, int64_t *out, const char *what);
/* the loop extents of kernel k at the bound sizes */
kiln_status rt_kernel_extent(kiln_program *p, int32_t k, rt_extent *e);
/* buffer b's binding (an input or a state) in the working graph, or NULL (run.c) */
const input_binding *rt_run_binding(kiln_program *p, int32_t b);
/* after a run: a search that changed schedules recompiles the plan (exec.c) */
kiln_status rt_tune_after_run(kiln_program *p, kiln_status s);
/* emit the plan, compile it, look up every kernel function, replacing the
 * code loaded before (host-code backends; cpu_run.c) */
kiln_status rt_cpu_emit_and_load(kiln_program *p, char *err, size_t errcap);
/* the program's C as the emitter makes it now (malloc'd): what rt_cpu_emit_and_load compiles */
char *rt_cpu_emit_source(const kiln_program *p);
/* rt_cpu_emit_and_load with the source already emitted (taken: freed or kept
 * as the program's) */
kiln_status rt_cpu_load_source(kiln_program *p, char *source, char *err, size_t errcap);
/* the host address of every buffer, for the CPU's search (cpu_run.c) */
void **rt_cpu_bufs(kiln_program *p);
/* the bytes of B's decode copy (0: none) (cpu_run.c) */
size_t rt_cpu_repacked_bytes(const kiln_program *p, int32_t b);
/* other (p's alternative form, compiled from the same graph, no copies
 * made yet) keeps its weight copies in p's store from now on, so a decode
 * copy either program made serves both (cpu_run.c, copies.h) */
void rt_cpu_share_copies(kiln_program *p, kiln_program *other);
/* how many times a program of p's store found a decode copy another had
 * made (-1: not a CPU program) (cpu_run.c) */
int64_t rt_cpu_copies_shared(const kiln_program *p);
/* every weight's pack copy let go (cpu_run.c) */
void rt_cpu_drop_pack_copies(kiln_program *p);
/* schedules from the tuning DB (exec.c; at compile time) */
void rt_tune_apply_db(kiln_program *p);
/* search contraction kernel k's schedule for this bucket now (exec.c) */
kiln_status rt_tune_contract_now(kiln_program *p, int32_t k, int bucket, rt_kernel_fn *fn_out, rt_module **mods_out);
/* the generic kernel k's share of the budget and its search now (exec.c) */
double rt_tune_share(kiln_program *p, int32_t k);
void rt_tune_progress(const kiln_program *p);
/* bytes kernel K touches over a domain of that many points (profile.c) */
double rt_profile_kernel_bytes(const kiln_program *p, const sch_kernel *K, int64_t domain);
/* profile arrays on or off (profile.c); the slowest kernels on stderr (profile.c) */
void rt_profile_alloc(kiln_program *p, int on);
void rt_profile_print(const kiln_program *p);

#endif
