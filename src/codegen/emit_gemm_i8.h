/* emit_gemm_i8.h — the packed (outer-product) contraction form with int8
 * arithmetic (form=packed arith=i8, emit_gemm_i8.c): block-format B repacked
 * into uint8 VNNI strips, A quantised to int8 per 32 elements once per
 * thread, vpdpbusd outer products. emit_contract.c calls these. */
#ifndef KILN_CODEGEN_EMIT_GEMM_I8_H
#define KILN_CODEGEN_EMIT_GEMM_I8_H

#include <stddef.h>

#include "emit_c.h"

/* the helpers and micro-kernels the packed int8 schedules among
 * scheds[0..n) need; *i8_done: whether the translation unit already has the
 * int8 prelude (emit_contract_i8.c), whose B unpackers this form reuses */
void cg_emit_packed_i8_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, int *i8_done, char **s,
                             size_t *len, size_t *cap);
/* declarations before a kernel's work-item loop (A's quantised copy, kept
 * across the items of one call) and their release after it */
/* the quantised-A declarations at the kernel's top, and the CG_KF_PREP body
 * when the large-M schedule big shares A (cg_i8_shared_a) */
void cg_emit_packed_i8_pre(const sch_program *p, const sch_kernel *k, const sch_contract_sched *big, char **s,
                           size_t *len, size_t *cap);
/* whether the large-M schedule big (for B of dtype t) can quantise A once for
 * all threads: the runtime's CG_KF_PREP launch over ceil(M / 16) + 2 row
 * groups into a scratch B[nbufs] of the family row's scratch bytes
 * (sched/family.h: packed-i8, amx-i8), then the items with
 * CG_KF_SHARED (emit_gemm_amx_bf16.h); one batch point only */
int cg_i8_shared_a(kiln_dtype t, const sch_contract_sched *big);
void cg_emit_packed_i8_post(char **s, size_t *len, size_t *cap);
/* the start of a work item of an int8 form: the scalar f32 loop when K is
 * not in 32s or a B row is not block-aligned, else A quantised once per
 * batch point and call (zero: B's zero point as the strips hold it; the A
 * buffer has pad_rows zero rows past M), leaving in scope gq_a (int8, rows
 * of K), gq_s (A's scale per 32), gq_z (-zero * sum(qa) per B block), gq_m
 * (A's exact sums per 32); item_end closes what item_begin opened */
void cg_emit_i8_item_begin(const sch_program *p, const sch_kernel *k, int zero, int pad_rows, char **s, size_t *len,
                           size_t *cap);
void cg_emit_i8_item_end(char **s, size_t *len, size_t *cap);
/* "{ fast check; if (!fast) { scalar f32 loop } else {": the start of an
 * item of a form that needs K in 32s and block-aligned B rows (be elements
 * per block, dequantiser kdq_<tag>); cg_emit_i8_item_end closes it */
void cg_emit_block_item_begin(const sch_program *p, const sch_kernel *k, int be, const char *tag, char **s, size_t *len,
                              size_t *cap);
/* B's zero point as the strips hold it, elements per B scale, and the
 * name tag of a block dtype (NULL for other dtypes) */
int cg_i8_zero(kiln_dtype t);
int cg_i8_kb(kiln_dtype t);
const char *cg_i8_tag(kiln_dtype t);
/* 1 when the packer kgb_<dt> reads B's rows from its 8-row interleaved copy
 * (rp=1's, sched/repack_layout.h) where the kernel has one (q8_0, q5_0, q4_k):
 * then every kernel reading such a B, prefill included, may leave B itself
 * unread, and the runtime lets the weight's pages go (cpu_run.c) */
int cg_i8_copy_source(kiln_dtype t);
/* inside a K block of an int8 item (bq, bs, bm, nstr, kcb, k0, kl, n0, n1 in
 * scope): every strip of nr columns packed by kgb_<dt>; make_signed shifts
 * the bytes by B's zero point (kamx_signed, the AMX form's signed strips) */
void cg_emit_i8_pack_strips(const sch_program *p, const sch_kernel *k, int nr, int make_signed, char **s, size_t *len,
                            size_t *cap);
/* the loops of one packed int8 schedule inside a work item: the contract of
 * emit_contract.c's emit_schedule, plus `w / ntiles` naming the batch point
 * (A is quantised again only when it changes) */
void cg_emit_packed_i8_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                                size_t *len, size_t *cap);

#endif
