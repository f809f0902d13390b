/* gpu_tune.h — searching a contraction kernel's GPU schedule on the run's
 * own buffers (gpu_tune.c; called by gpu_exec.c, which stores the winner in
 * the tuning DB under the device's fingerprint).
 */
#ifndef KILN_RUNTIME_GPU_TUNE_H
#define KILN_RUNTIME_GPU_TUNE_H

#include "gpu.h"

typedef struct rt_gpu_tune_job {
    const rt_gpu_ops *ops;
    rt_gpu *dev;
    const sch_program *sp;
    int32_t k;                /* the contraction kernel */
    rt_gpu_prog *main_prog;   /* the program holding the generic entry point */
    const char *generic_name; /* kiln_k<k>: the reference */
    int64_t total;            /* its work items (one per output) */
    int generic_group;
    const rt_gpu_arg *args;   /* the kernel's arguments (emit_gpu.h ABI) */
    int nargs;
    int64_t m, n, nbatch, rn; /* the contraction's sizes */
    rt_gpu_mem out_mem;       /* its output buffer */
    size_t out_off, out_bytes;
    int tensor_mma, max_group; /* rt_gpu_caps */
    int inject_wrong;         /* the first candidate is made wrong on purpose (tests) */
    double budget_s;          /* stop starting candidates after this long (one always runs) */
} rt_gpu_tune_job;

typedef struct rt_gpu_tune_result {
    cg_gpu_contract_sched winner;
    rt_gpu_prog *prog;  /* the candidates' program (the caller owns it); NULL on failure
                           or when the generic entry point won (winner.form generic) */
    char name[48];      /* the winner's entry point in prog */
    double best_s, base_s; /* the winner's and the generic entry point's time */
    int tried, rejected;
    double seconds;     /* the search's own time */
} rt_gpu_tune_result;

/* search; KILN_OK with the winner launched (its result in the output
 * buffer), else a message in err and the generic result in the buffer */
kiln_status rt_gpu_tune_contract(const rt_gpu_tune_job *j, rt_gpu_tune_result *r, char *err, size_t errcap);

#endif
