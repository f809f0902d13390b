/* emit_gemm.h — the packed (outer-product) form of the contraction
 * micro-kernel family, SCH_FORM_PACKED (emit_gemm.c). emit_contract.c
 * calls these for schedules of that form. */
#ifndef KILN_CODEGEN_EMIT_GEMM_H
#define KILN_CODEGEN_EMIT_GEMM_H

#include <stddef.h>

#include "emit_c.h"

/* index of a packed f32 strip prefetch distance pf (0, 8, 16), -1 if not emitted */
int cg_packed_pf_index(int pf);
/* the static functions (packing, micro-kernels) that the packed schedules
 * among scheds[0..n) need; emit_contract.c calls it once per translation
 * unit after the dot form's dequantisers (kcv_*) are defined */
void cg_emit_packed_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, char **s, size_t *len, size_t *cap);
/* the store at the end of a packed micro-kernel: accumulators
 * <accname><i>_<j> (mr rows x nv zmm) to out rows c[i], `rows` and `cols`
 * valid, added when `acc`; closes the function */
void cg_emit_tile_store(int mr, int nv, const char *accname, char **s, size_t *len, size_t *cap);
/* ktr16(src, ss, dst, ds): the 16 x 16 32-bit transpose the strip packers
 * use, guarded so that a translation unit gets it once */
void cg_emit_ktr16(char **s, size_t *len, size_t *cap);
/* the loops of one packed schedule inside a work item, with the same
 * contract as emit_contract.c's emit_schedule: in scope are A (const float *),
 * W (B's storage), out (float *), M, N, K, this item's rows of B [n0, n1) and
 * the batch loop variables i<d>; it writes out[] for every m in [0, M) and n
 * in [n0, n1) */
void cg_emit_packed_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                             size_t *len, size_t *cap);

/* shared by the packed forms (f32 here, int8 in emit_gemm_i8.c, AMX in
 * emit_gemm_amx.c): osn, out's stride along n (store_off is affine in n),
 * computed from the item's first two columns; and, for osn != 1, the copy
 * of a tile's stack buffer ct[rows][nr] into out (added when acc), with
 * mm, ns, rows, cols and acc in scope */
/* B's operand for the strip at column ns of a packed schedule: B strided
 * along K (c->b_kstride): cols, bo (the strip's first element) and ks (the
 * K stride); else wo[nr], each column's element offset at k = 0 (the last
 * column repeated past n1), and fast, 0 when some offset is not a multiple
 * of be elements (a block format's block) */
void cg_emit_strip_operand(const sch_program *p, const sch_kernel *k, int nr, int be, char **s, size_t *len,
                           size_t *cap);
void cg_emit_out_stride(const sch_program *p, const sch_kernel *k, char **s, size_t *len, size_t *cap);
void cg_emit_tile_scatter(const sch_program *p, const sch_kernel *k, int nr, char **s, size_t *len, size_t *cap);
/* when the consumers multiply the output by zero past a causal bound
 * (sch_contract.n_lim_off, demand.c): "if (the strip at ns lies past the
 * bound of every row of the tile at mm) steps = 0;", else nothing */
void cg_emit_masked_strip(const sch_program *p, const sch_kernel *k, const char *steps, char **s, size_t *len,
                          size_t *cap);
/* cr[0..mr): the output rows of the tile at mm (rows valid), ns (osn, ct) */
void cg_emit_tile_rows(const sch_program *p, const sch_kernel *k, int mr, int nr, char **s, size_t *len, size_t *cap);

#endif
