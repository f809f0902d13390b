/* emit_gpu.h — OpenCL C and CUDA C source for a kernelized program: one
 * printer over the loop IR (src/sched/loop.h) for both dialects. They differ
 * only in a short header (qualifiers, index builtins, integer type names,
 * math function names); the kernel bodies are the same text.
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

typedef struct cg_gpu_options {
    cg_gpu_dialect dialect;
} cg_gpu_options;

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
