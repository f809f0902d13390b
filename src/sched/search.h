/* search.h — the schedule space of contractions, its cost model, and the
 * pieces of the search that do not touch a device (search.c, cost.c). The
 * measuring loop lives in the runtime (src/runtime/tune.c), which compiles
 * candidates through the backend and runs them on the program's buffers. */
#ifndef KILN_SCHED_SEARCH_H
#define KILN_SCHED_SEARCH_H

#include <stddef.h>
#include <stdint.h>

#include "loop.h"

/* the sizes a contraction runs at */
typedef struct sch_contract_shape {
    int64_t m, n, k, nbatch;
    kiln_dtype b_dtype;
    int nthreads;
    int vnni; /* the CPU has int8 dot products: int8 arithmetic joins the space */
    int amx;  /* the CPU has AMX int8 tiles (and the kernel grants them): the AMX form joins */
    int amx_bf16; /* the CPU has AMX bf16 tiles and AVX-512 bf16: the AMX form's bf16 arithmetic joins */
    int b_activation; /* B is computed by the program (an intermediate, or a state such as the KV
                         cache), not a caller's input: f32 B joins the bf16 forms, an
                         approximation (llama.cpp keeps its KV cache in f16); a caller's f32
                         input (an f32 model's weights) stays exact */
    int bf16; /* the CPU has AVX-512 bf16 (vdpbf16ps): the packed form's bf16 arithmetic joins
                 (after the others, so positional initialisers written before it leave it 0) */
    int b_strided; /* f32 B strided along K, contiguous along n (sch_contract.b_kstride): only
                      the packed form reads it, and for small M it joins with B read in place
                      (direct); last, as bf16 */
} sch_contract_shape;

/* the machine as the cost model sees it (from `kiln device` measurements or
 * defaults): per-thread f32 FMA GFLOP/s, read bandwidth GB/s for 1 and all
 * threads, L2 bytes per core */
typedef struct sch_machine {
    double fma_gflops;   /* per thread */
    double bw1_gbs, bwn_gbs;
    double l2_bytes;
    double bf16_dot_slots; /* FMA issue slots one vdpbf16ps takes: 1 on AMD Zen 4, 4 on an Intel
                              Xeon (runtime/bf16_probe.c measures it; the default is 1) */
} sch_machine;

/* defaults measured on the development machine; sch_machine_probe refines */
sch_machine sch_machine_default(void);

/* every valid schedule for the shape (register tiles that fit 32 vector
 * registers, cache blocks, thread splits); returns the count written (at
 * most cap) — with out NULL, just the size of the space */
int sch_space_contract(const sch_contract_shape *sh, sch_contract_sched *out, int cap);

/* the cost model's estimate of the seconds one run takes */
double sch_cost_contract(const sch_machine *mc, const sch_contract_shape *sh, const sch_contract_sched *s);

/* order idx[0..n) by cost ascending (stable, so deterministic) */
void sch_rank_by_cost(const double *cost, int *idx, int n);

/* Spearman rank correlation of two samples (ties get mean ranks) */
double sch_spearman(const double *a, const double *b, int n);

/* "simpler" order for ties: fewer accumulators, then default thread split */
int sch_sched_simpler(const sch_contract_sched *a, const sch_contract_sched *b);

/* the shape bucket text of a tuning record: "m<=4,n=640,k=2048,t=1" */
void sch_bucket_text(const sch_contract_shape *sh, char *buf, size_t cap);

/* the parts of that text a kernel with symbolic sizes still knows: the M
 * bucket ("m>4,": large = 1) and the threads (",t=2") */
void sch_bucket_affixes(int large, int nthreads, char *pre, size_t precap, char *suf, size_t sufcap);

/* the space's axes and its size at a few example shapes (malloc'd text) */
char *sch_space_describe(void);

#endif
