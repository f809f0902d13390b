/* emit_gpu_internal.h — what the GPU emitter's parts share (emit_gpu.c: the
 * generic kernels; emit_gpu_contract.c: the contraction kernels; the text
 * of both is printed through print_lx.h). Not part of the codegen
 * interface: only those two files include it.
 */
#ifndef KILN_CODEGEN_EMIT_GPU_INTERNAL_H
#define KILN_CODEGEN_EMIT_GPU_INTERNAL_H

#include "emit_gpu.h"
#include "print_lx.h"

typedef struct gemitter {
    cg_printer pr; /* the text, in the OpenCL C or CUDA C dialect */
    const cg_gpu_options *opt;
} gemitter;

#define OUT(...) sch_appendf(&e->pr.s, &e->pr.len, &e->pr.cap, __VA_ARGS__)

/* a printer over p in opt's dialect, its text empty */
void cg_gpu_emitter_init(gemitter *e, const sch_program *p, const cg_gpu_options *opt);
/* per buffer: bit 0 read by kernel k, bit 1 its output (calloc'd, nbufs + 1) */
uint8_t *cg_gpu_kernel_used(const sch_program *p, const sch_kernel *k);
/* the dialect's header and the helper functions every program starts with */
void cg_gpu_emit_preamble(gemitter *e);
/* `KKERNEL kiln_k<kid><suffix>(the ABI's arguments) {` */
void cg_gpu_emit_signature(gemitter *e, int32_t kid, const char *suffix);
/* kbad, the arena buffers b<j>, `out`, the loop extents d<d> */
void cg_gpu_emit_setup(gemitter *e, int32_t kid);
/* the tiled (and, for CUDA, tensor-core) entry points of contraction kernel
 * kid (emit_gpu_contract.c) */
void cg_gpu_emit_contract(gemitter *e, int32_t kid);

#endif
