/* emit_gpu.h — OpenCL C and CUDA C source for a kernelized program: the
 * loop-IR printer (print_lx.h) in two dialects (dialect.c). They differ only
 * in a short header (qualifiers, index builtins, integer type names, math
 * function names); the kernel bodies are the same text.
 *
 * Kernel ABI. Every MAP/REDUCE/SCATTER kernel k becomes a device entry point
 * named kiln_k<k> with the arguments
 *     (u8 *A, const i64 *v, const i64 *bo, i32 *kerr, i64 n, X0, X1, ...)
 * A: the arena (one device allocation holding every intermediate and temp
 * buffer; buffer b lives at byte offset bo[b]); v: the values of the graph's
 * sym variables by number; kerr: one flag per kernel, set to 1 when a
 * GATHER/SCATTER index was out of range; n: the number of work items; X...:
 * the kernel's buffers that are not in the arena (inputs, states, results),
 * in ascending buffer id, as returned by cg_gpu_kernel_args. Work item w (one
 * per global id < n) does
 *   CG_GPU_POINT:  one point of the domain (w = row-major domain index),
 *                  its own reduction (REDUCE) computed serially;
 *   CG_GPU_ROW:    one outer row (the domain less its last dim): the row's
 *                  fused reductions (stages) once, then every point of the row
 *                  — kernels with per-row stages, so stages are not repeated;
 *   CG_GPU_SERIAL: the whole domain in order (n = 1) — SCATTER, whose later
 *                  writes must win as in the interpreter.
 * QUANTIZE and COPY kernels are host steps and have no entry point.
 *
 * Numerics follow the reference interpreter's contract as emit_c.c's scalar
 * path does: f32 arithmetic rounded to the node dtype after every op, i32/u8
 * arithmetic wrapping in 64-bit integers, float sums accumulated in double
 * when the device has it (all PoCL and CUDA devices; else in float), NaN-
 * propagating MAX. Floating-point contraction is off (OpenCL pragma, NVRTC
 * --fmad=false) and division / square root are correctly rounded (build
 * options). EXP2/LOG2/SIN are evaluated in double and rounded once to f32
 * (with fp64; else the device's f32 functions): libm's f32 functions are
 * within 0.502-0.56 ulp, nearly always the correctly rounded value, and so
 * is this — results agree bit for bit except in rare near-ties, the one
 * expected difference from the interpreter (within the vector path's
 * tolerance).
 */
#ifndef KILN_CODEGEN_EMIT_GPU_H
#define KILN_CODEGEN_EMIT_GPU_H

#include "../sched/loop.h"

typedef enum cg_gpu_dialect { CG_GPU_OPENCL = 0, CG_GPU_CUDA } cg_gpu_dialect;

typedef enum cg_gpu_mode { CG_GPU_POINT = 0, CG_GPU_ROW, CG_GPU_SERIAL } cg_gpu_mode;

/* How a contraction kernel (sch_kernel.contract, see contract.h) runs on a
 * GPU. Every contraction keeps its generic entry point kiln_k<k> (one work
 * item per output, the exact reference numerics); beside it the printer
 * emits
 *   kiln_k<k>_tile  (both dialects): a work-group of (bm/tm) x (bn/tn) work
 *       items computes a bm x bn block of outputs (m x n), each item tm x tn
 *       of them in registers; the operands pass through local memory in bk
 *       steps along r, dequantised and widened to f32 on the way in; f32
 *       products summed in f32 along r (an approximation: another order and
 *       precision than the reference's double sum);
 *   kiln_k<k>_mma_bf16, _mma_f16, _mma_i8 (CUDA only, sm_80 and later): 4
 *       warps compute a 64 x 64 block with tensor-core mma.sync
 *       instructions; operands rounded to bf16 / f16 in shared memory
 *       (m16n8k16, f32 accumulators), or quantised to int8 per 32 along r
 *       with one f32 scale per row of each block (m16n8k16 s8, int32 sums
 *       rescaled into f32) — approximations like the CPU's bf16 and int8
 *       arithmetic. Below sm_80 the body is empty and the entry point reports
 *       itself through kerr.
 * Work-groups run over (batch, m block, n block) with n fastest; the
 * runtime launches blocks x group-size work items in groups of that size. */
typedef enum cg_gpu_cform {
    CG_GPU_CF_GENERIC = 0, /* kiln_k<k> */
    CG_GPU_CF_TILE,        /* kiln_k<k>_tile */
    CG_GPU_CF_MMA          /* kiln_k<k>_mma_<arith> (CUDA) */
} cg_gpu_cform;
typedef enum cg_gpu_carith { CG_GPU_CA_BF16 = 0, CG_GPU_CA_F16, CG_GPU_CA_I8 } cg_gpu_carith;
typedef struct cg_gpu_contract_sched {
    cg_gpu_cform form;
    cg_gpu_carith arith; /* MMA */
    int bm, bn, bk, tm, tn; /* TILE */
    int vw; /* TILE: vector width of B and the accumulators (1 or 4: an item's tn columns
               in groups of 4 adjacent ones, read from local memory as one float4) */
} cg_gpu_contract_sched;

#define CG_GPU_MMA_BM 64
#define CG_GPU_MMA_BN 64
#define CG_GPU_MMA_THREADS 128

/* the default: the tile form, 64 x 64 blocks of 4 x 4 per item, bk 16 */
cg_gpu_contract_sched cg_gpu_contract_default(void);
/* text form "form=tile bm=64 bn=64 bk=16 tm=4 tn=4" (+ " vw=4"), "form=mma
 * arith=bf16", "form=generic"; parse returns 0 and a reason in err on bad
 * text or an invalid tile (tm must divide bm, tn bn; 32 to 1024 work items of
 * at most 64 outputs each; at most 32 KiB of local memory; vw 1 or 4, and 4
 * must divide tn) */
void cg_gpu_contract_print(const cg_gpu_contract_sched *s, char *buf, size_t cap);
int cg_gpu_contract_parse(const char *text, cg_gpu_contract_sched *s, char *err, size_t errcap);
/* work items per group, output rows and columns per group of schedule s */
int cg_gpu_contract_threads(const cg_gpu_contract_sched *s);
int cg_gpu_contract_block_m(const cg_gpu_contract_sched *s);
int cg_gpu_contract_block_n(const cg_gpu_contract_sched *s);
/* the entry point of contraction kernel k under s ("kiln_k5_tile") */
void cg_gpu_contract_entry(const cg_gpu_contract_sched *s, int32_t k, char *buf, size_t cap);

typedef struct cg_gpu_options {
    cg_gpu_dialect dialect;
    cg_gpu_contract_sched contract; /* the tile entry points' shape */
} cg_gpu_options;

/* The search space of a contraction on a GPU (data): the tile shapes, then
 * with tensor_mma the three mma forms. Writes up to cap schedules to out and
 * returns how many there are. */
int cg_gpu_contract_space(int tensor_mma, cg_gpu_contract_sched *out, int cap);
/* A program holding only contraction kernel k under each of s[0..n-1], entry
 * points kiln_k<k>_v<j> (cg_gpu_contract_variant_name) with the kernel ABI
 * above (malloc'd). wrong >= 0 makes candidate `wrong` (a tile form) add 1
 * to every output: the search's test that a wrong candidate is rejected. */
char *cg_emit_gpu_contract_variants(const sch_program *p, int32_t k, const cg_gpu_options *opt,
                                    const cg_gpu_contract_sched *s, int n, int wrong);
void cg_gpu_contract_variant_name(int32_t k, int j, char *buf, size_t cap);

/* the whole program (malloc'd) */
char *cg_emit_gpu(const sch_program *p, const cg_gpu_options *opt);
/* 1 when kernel k has a device entry point (MAP, REDUCE, SCATTER) */
int cg_gpu_is_device_kernel(const sch_program *p, int32_t k);
cg_gpu_mode cg_gpu_kernel_mode(const sch_program *p, int32_t k);
/* 1 when buffer b lives in the arena (intermediates and temps) */
int cg_gpu_buf_in_arena(const sch_program *p, int32_t b);
/* the non-arena buffers kernel k takes, ascending, into out (room for
 * p->nbufs); returns how many */
int32_t cg_gpu_kernel_args(const sch_program *p, int32_t k, int32_t *out);

#endif
