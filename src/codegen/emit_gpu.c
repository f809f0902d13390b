/* emit_gpu.c — the GPU emitter: loop IR to OpenCL C or CUDA C (see
 * emit_gpu.h for the kernel ABI and the numerics contract).
 *
 * The expression trees, reductions and point bodies are the loop-IR
 * printer's (print_lx.h) in the OpenCL C or CUDA C dialect (dialect.c: all
 * types and math functions go through names the dialect header defines, i64,
 * u8, KG for the global address space, KEXP2, ..., so the body text is the
 * same for both). What this file adds is the outer structure: a work item is
 * a point, a row or the whole domain, from the global id instead of the
 * CPU's [lo, hi) range, and the kernel ABI of emit_gpu.h.
 *
 * Invariant: the output is a function of (program, dialect) only, so the
 * device runtimes may cache compiled binaries by a hash of the text.
 */
#include "emit_gpu.h"

#include <stdio.h>
#include <string.h>

#include "base.h"
#include "emit_gpu_internal.h"

int cg_gpu_is_device_kernel(const sch_program *p, int32_t k) {
    sch_kernel_kind kk = p->kernels[k].kind;
    return kk == SCH_K_MAP || kk == SCH_K_REDUCE || kk == SCH_K_SCATTER;
}

cg_gpu_mode cg_gpu_kernel_mode(const sch_program *p, int32_t k) {
    const sch_kernel *K = &p->kernels[k];
    if (K->kind == SCH_K_SCATTER) return CG_GPU_SERIAL;
    for (int32_t i = 0; i < K->nstages; i++)
        if (K->stages[i].row && K->ndim > 0) return CG_GPU_ROW;
    return CG_GPU_POINT;
}

int cg_gpu_buf_in_arena(const sch_program *p, int32_t b) {
    sch_buf_kind k = p->bufs[b].kind;
    return k == SCH_BUF_NODE || k == SCH_BUF_TEMP;
}

uint8_t *cg_gpu_kernel_used(const sch_program *p, const sch_kernel *k) {
    uint8_t *used = kiln_xcalloc((size_t)p->nbufs + 1, 1);
    cg_lx_collect_bufs(p, k->expr, used);
    for (int32_t i = 0; i < k->nstages; i++) cg_lx_collect_bufs(p, k->stages[i].expr, used);
    used[k->out_buf] |= 2;
    return used;
}

int32_t cg_gpu_kernel_args(const sch_program *p, int32_t k, int32_t *out) {
    uint8_t *used = cg_gpu_kernel_used(p, &p->kernels[k]);
    int32_t n = 0;
    for (int32_t b = 0; b < p->nbufs; b++)
        if (used[b] && !cg_gpu_buf_in_arena(p, b)) out[n++] = b;
    free(used);
    return n;
}

/* ---- source text ---------------------------------------------------------- */

void cg_gpu_emitter_init(gemitter *e, const sch_program *p, const cg_gpu_options *opt) {
    memset(e, 0, sizeof *e);
    cg_printer_init(&e->pr, p, opt->dialect == CG_GPU_CUDA ? &cg_dialect_cuda : &cg_dialect_opencl);
    e->opt = opt;
}

/* decode the linear index `lin` into loop variables i0 .. i{last-1} over
 * dims d0 .. d{last-1} (row-major) */
static void emit_decode(gemitter *e, const char *lin, int last, int ind) {
    if (last <= 0) return;
    cg_print_indent(&e->pr, ind);
    OUT("i64 o = %s;\n", lin);
    for (int d = last - 1; d >= 1; d--) {
        cg_print_indent(&e->pr, ind);
        OUT("const i64 i%d = o %% d%d; o /= d%d;\n", d, d, d);
    }
    cg_print_indent(&e->pr, ind);
    OUT("const i64 i0 = o;\n");
}

/* one outer row: row stages, then every point along the last dim */
static void emit_row(gemitter *e, const sch_kernel *k, int ind) {
    int n = k->ndim;
    cg_print_stages(&e->pr, k, 1, ind);
    cg_print_indent(&e->pr, ind);
    OUT("for (i64 i%d = 0; i%d < d%d; i%d++) {\n", n - 1, n - 1, n - 1, n - 1);
    cg_print_point(&e->pr, k, ind + 2);
    cg_print_indent(&e->pr, ind);
    OUT("}\n");
}

void cg_gpu_emit_signature(gemitter *e, int32_t kid, const char *suffix) {
    const sch_program *p = e->pr.p;
    const sch_kernel *k = &p->kernels[kid];
    uint8_t *used = cg_gpu_kernel_used(p, k);
    OUT("KKERNEL kiln_k%d%s(KG u8 *A, KG const i64 *v, KG const i64 *bo, KG i32 *kerr, const i64 n", kid, suffix);
    for (int32_t b = 0; b < p->nbufs; b++) {
        if (!used[b] || cg_gpu_buf_in_arena(p, b)) continue;
        const char *ty = cg_storage_type(e->pr.d, p->bufs[b].dtype);
        if (b == k->out_buf) OUT(", KG %s *b%d", ty, b);
        else OUT(", KG const %s *b%d", ty, b);
    }
    OUT(") {\n");
    free(used);
}

void cg_gpu_emit_setup(gemitter *e, int32_t kid) {
    const sch_program *p = e->pr.p;
    const sch_kernel *k = &p->kernels[kid];
    kiln_dtype ot = p->bufs[k->out_buf].dtype;
    uint8_t *used = cg_gpu_kernel_used(p, k);
    OUT("  int kbad = 0; (void)A; (void)v; (void)bo; (void)n;\n");
    for (int32_t b = 0; b < p->nbufs; b++) {
        if (!used[b] || !cg_gpu_buf_in_arena(p, b)) continue;
        const char *ty = cg_storage_type(e->pr.d, p->bufs[b].dtype);
        if (b == k->out_buf) OUT("  KG %s *b%d = (KG %s *)(A + bo[%d]);\n", ty, b, ty, b);
        else OUT("  KG const %s *b%d = (KG const %s *)(A + bo[%d]);\n", ty, b, ty, b);
    }
    free(used);
    OUT("  KG %s *out = b%d;\n", cg_storage_type(e->pr.d, ot), k->out_buf);
    for (int d = 0; d < k->ndim; d++) {
        OUT("  const i64 d%d = ", d);
        cg_print_sym(&e->pr, k->dim[d]);
        OUT(";\n");
    }
}

static void emit_kernel(gemitter *e, int32_t kid) {
    const sch_program *p = e->pr.p;
    const sch_kernel *k = &p->kernels[kid];
    KILN_ASSERT(!kiln_dtype_is_block(p->bufs[k->out_buf].dtype));
    cg_gpu_emit_signature(e, kid, "");
    OUT("  const i64 w = KGID;\n  if (w >= n) return;\n");
    cg_gpu_emit_setup(e, kid);
    int nd = k->ndim;
    cg_gpu_mode mode = cg_gpu_kernel_mode(p, kid);
    if (nd == 0) {
        OUT("  {\n");
        cg_print_stages(&e->pr, k, 1, 4);
        cg_print_point(&e->pr, k, 4);
        OUT("  }\n");
    } else if (mode == CG_GPU_POINT) {
        OUT("  {\n");
        emit_decode(e, "w", nd, 4);
        cg_print_point(&e->pr, k, 4);
        OUT("  }\n");
    } else if (mode == CG_GPU_ROW) {
        OUT("  {\n");
        emit_decode(e, "w", nd - 1, 4);
        emit_row(e, k, 4);
        OUT("  }\n");
    } else {
        /* serial: every row in order, in this one work item */
        OUT("  i64 rows = 1;\n");
        for (int d = 0; d + 1 < nd; d++) OUT("  rows *= d%d;\n", d);
        OUT("  for (i64 wr = 0; wr < rows; wr++) {\n");
        emit_decode(e, "wr", nd - 1, 4);
        emit_row(e, k, 4);
        OUT("  }\n");
    }
    OUT("  if (kbad) kerr[%d] = 1;\n}\n\n", kid);
}

void cg_gpu_emit_preamble(gemitter *e) {
    cg_print_prologue(&e->pr);
}

char *cg_emit_gpu(const sch_program *p, const cg_gpu_options *opt) {
    gemitter e0, *e = &e0;
    cg_gpu_emitter_init(e, p, opt);
    cg_gpu_emit_preamble(e);
    for (int32_t k = 0; k < p->nkernels; k++) {
        if (!cg_gpu_is_device_kernel(p, k)) continue;
        emit_kernel(e, k);
        if (p->kernels[k].contract) cg_gpu_emit_contract(e, k);
    }
    if (!e->pr.s) OUT("\n");
    return e->pr.s;
}
