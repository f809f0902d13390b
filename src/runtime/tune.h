/* tune.h — tune one contraction kernel on the program's own buffers
 * (tune.c; the space and the cost model are in src/sched/search.h). */
#ifndef KILN_RUNTIME_TUNE_H
#define KILN_RUNTIME_TUNE_H

#include "backend.h"
#include "search.h"

typedef struct rt_tune_job {
    const sch_program *sp;
    int32_t kernel;
    int bucket;                      /* 0: M <= SCH_SMALL_M, 1: larger */
    sch_contract_shape shape;
    const rt_backend *be;
    rt_pool *pool;
    int nthreads;
    cg_isa isa;
    void *const *bufs;               /* the program's buffers, bound for this run, then the
                                        scratch slot, each buffer's repacked copy and its pack
                                        copy (exec.c): 3 nbufs + 1 */
    const int64_t *values;           /* the sym values of this run */
    size_t out_bytes;                /* of the kernel's output buffer */
    size_t b_bytes;                  /* of B's buffer (flushed before decode timings) */
    size_t rp_bytes;                 /* of B's repacked copy, flushed with it (0: none) */
    const sch_contract_sched *seed;  /* from another machine's record, or NULL */
    double budget_s;                 /* for this kernel */
    int round1;                      /* cost-model candidates in the first round (0: 8) */
    int rank_from;                   /* round one's cost-model candidates start at this rank
                                        (a later pass over the same slot: where the last ended) */
    int inject_wrong;                /* tests: candidate i-1 is treated as wrong (0: none) */
    int verbose;                     /* a line per rejected candidate (kiln_compile_options.tune_verbose) */
    int warm;                        /* decode candidates timed with B warm (kiln_compile_options.tune_warm) */
} rt_tune_job;

typedef struct rt_tune_result {
    sch_contract_sched winner;
    double best_s, base_s, seconds;
    double full_s;       /* searched on slices (tune.c): the winner's one full-size run, else 0 */
    int tried, rejected, space, nmeasured;
    int rank_end;        /* the rank after round one's last cost-model candidate (a later pass starts there) */
    double spearman;     /* cost model vs measured, over the first round */
    rt_kernel_fn fn;     /* the winner, inside mods[] */
    rt_module *mods[2];  /* candidates' modules: the caller frees them (after its last use of fn) */
} rt_tune_result;

kiln_status rt_tune_contract(const rt_tune_job *job, rt_tune_result *res, char *err, size_t errcap);

/* round one's candidates (tune.c): the default, the seed, one point of each
 * family the model puts near its best (the family's simplest near-tie),
 * then the space in the model's rank order from rank_from (order: indices
 * of space, best first; cost per space point), at most cap (and
 * TUNE_MAX_CAND) schedules, none twice (every field compared: rp, serial
 * and direct too). *rank_end: the rank after the last one taken. Returns
 * the count. */
int rt_tune_round_one(const sch_contract_sched *space, const double *cost, const int *order, int nspace,
                      const sch_contract_sched *dflt, const sch_contract_sched *seed, int rank_from, int cap,
                      sch_contract_sched *cands, int *rank_end);

/* the least a search costs: its first round's default and cost-model first
 * choice compiled, checked and timed, at the cost per candidate this
 * process learnt for the bucket (0: decode, 1: prefill; a share below it
 * would overrun, not search) */
double rt_tune_min_search_s(int bucket);

/* the seconds a program's recompile is expected to take: unit_bytes (the
 * unit the compiler is given) at rate seconds a byte, a tenth more for the
 * tuned forms and a quarter second, stretched by the machine's slowdown
 * (stretch >= 1, at most 4: past that no budget holds, and a short one
 * would search nothing) (exec.c) */
double rt_tune_recompile_s(size_t unit_bytes, double rate, double stretch);
/* the factor on a plan's recompile reserve once the machine measures
 * s_now times slower than alone, where it measured s_plan at the plan and
 * the reserve carried `applied` of it: s_now / s_plan, never below 1 (a
 * lighter load keeps the reserve: a compile's time cannot be cut, only
 * foreseen), and applied times it at most 4 (exec.c) */
double rt_tune_reserve_scale(double applied, double s_plan, double s_now);

/* the cost model's first choice for kernel `kernel` at shape sh, among the
 * schedules the micro-kernel family can emit for it: what a contraction
 * without a tuning record runs (exec.c). Returns 0 when there is none. */
int rt_tune_cost_first(const sch_program *sp, int32_t kernel, const sch_contract_shape *sh, cg_isa isa,
                       sch_contract_sched *out);
/* the schedule of like's family nearest to like (tile sizes by their
 * log2 steps, the other axes by difference; a tie: the model's better
 * rank) among those the kernel can emit at shape sh: a winner measured at
 * another shape carried here (exec.c carry_family). 0: the family has none */
int rt_tune_nearest_of(const sch_program *sp, int32_t kernel, const sch_contract_shape *sh, cg_isa isa,
                       const sch_contract_sched *like, sch_contract_sched *out);

#endif
