/* emit_gpu_internal.h — what the GPU printer's parts share (emit_gpu.c: the
 * generic kernels and the helpers; emit_gpu_contract.c: the contraction
 * kernels). Not part of the codegen interface: only those two files include it.
 */
#ifndef KILN_CODEGEN_EMIT_GPU_INTERNAL_H
#define KILN_CODEGEN_EMIT_GPU_INTERNAL_H

#include "emit_gpu.h"

typedef struct gemitter {
    const sch_program *p;
    const cg_gpu_options *opt;
    char *s;
    size_t len, cap;
} gemitter;

#define OUT(...) sch_appendf(&e->s, &e->len, &e->cap, __VA_ARGS__)

/* the element type a buffer of dtype t has in device memory */
const char *cg_gpu_storage_type(kiln_dtype t);
/* per buffer: bit 0 read by kernel k, bit 1 its output (calloc'd, nbufs + 1) */
uint8_t *cg_gpu_kernel_used(const sch_program *p, const sch_kernel *k);
void cg_gpu_indent(gemitter *e, int n);
/* a sym expression as i64 arithmetic over the loop variables i<d>, the
 * reduce variables r, r1, ... and the LET variables g<j> */
void cg_gpu_out_sym(gemitter *e, sym_id s);
/* the statements computing lx tree id into the local t<id> */
void cg_gpu_emit_lx(gemitter *e, int32_t id, int ind);
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
