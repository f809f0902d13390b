/* emit_c.h — C source for a kernelized program (one translation unit).
 *
 * Every MAP/REDUCE/SCATTER kernel k becomes
 *     int kiln_k<k>(void *const *B, const int64_t *v, int64_t lo, int64_t hi, int64_t chunk,
 *                   int64_t flags)
 * B: every buffer of the program by id; v: the values of the graph's sym
 * variables (by variable number); [lo, hi): the work items this call does.
 * A kernel's work items are its outer rows (the product of all domain dims but
 * the last) times ceil(last dim / chunk) chunks of the last dim (chunk <= 0:
 * one chunk), so a thread pool can split rows and, for few long rows, chunks
 * of a row. flags bit 0 asks for non-temporal stores (an output too large to
 * stay in cache; only vectorised maps use it); bits 1 and 2 are a
 * contraction's shared conversion of A (emit_gemm_amx_bf16.h: CG_KF_PREP,
 * CG_KF_SHARED), for which B has one entry past the program's buffers, the
 * runtime's scratch. Fused reductions (stages, see
 * loop.h) are computed per row before the innermost loop, or per point.
 * Returns 0, or 1 when a GATHER/SCATTER index was out of range.
 * QUANTIZE and COPY kernels are host steps and have no function.
 *
 * Numerics follow the reference interpreter's contract (src/ref/interp.c)
 * operation by operation: f32 arithmetic rounded to the node dtype after each
 * op, wrapping i32/u8 arithmetic, double accumulation of float sums (the
 * scalar path), NaN-propagating MAX; libm for EXP2/LOG2/SIN. The scalar path
 * is bit-exact with the interpreter. The vector paths (AVX2 / AVX-512, chosen
 * by cg_options.isa) differ in two places only: float SUM accumulation order
 * (double accumulators per lane), and EXP2, a polynomial with at most 2 ulp
 * error instead of libm's exp2f (see vec_prelude in emit_c.c).
 *
 * Each MAP/REDUCE kernel's sch_generic_sched (loop.h) picks its vector width
 * (or the scalar path), the accumulators of vector reductions and the unroll
 * of vector maps; all zero is the default, the behaviour described above.
 */
#ifndef KILN_CODEGEN_EMIT_C_H
#define KILN_CODEGEN_EMIT_C_H

#include "../sched/loop.h"

typedef enum cg_isa { CG_ISA_SCALAR = 0, CG_ISA_AVX2, CG_ISA_AVX512 } cg_isa;

typedef struct cg_options {
    cg_isa isa;
} cg_options;

/* the whole translation unit (malloc'd) */
char *cg_emit_c(const sch_program *p, const cg_options *opt);
const char *cg_isa_name(cg_isa isa);
/* a translation unit with the prelude and kernel kid as a generic loop nest
 * (never the contraction micro-kernel) named `name`: the search's reference */
char *cg_emit_c_generic_one(const sch_program *p, int32_t kid, const cg_options *opt, const char *name);
/* the prelude of a translation unit (with the vector prelude of opt->isa),
 * appended to a growable string */
void cg_emit_c_prelude(const cg_options *opt, char **buf, size_t *len, size_t *cap);
/* append kernel kid as a generic loop nest named `name` under the generic
 * schedule s (NULL: the kernel's own gsched; see loop.h) — the schedule
 * search's candidates (src/runtime/tune_generic.c). Never the contraction
 * micro-kernel. */
void cg_emit_c_generic_append(const sch_program *p, int32_t kid, const cg_options *opt, const char *name,
                              const sch_generic_sched *s, char **buf, size_t *len, size_t *cap);
/* append kernel kid (a contraction's epilogue or prologue:
 * sched/epilogue.c) as a block, inline in the contraction's function
 * (emit_contract.c), that computes the box blo[d] <= i_d < bhi[d] of its
 * domain (blo, bhi: int64_t arrays in scope) and or-s a range error into
 * the int `res` */
void cg_emit_c_box(const sch_program *p, int32_t kid, const cg_options *opt, const char *blo, const char *bhi,
                   const char *res, char **buf, size_t *len, size_t *cap);
/* what the vector paths can take in kernel kid (given a vector ISA): *map_vec
 * = 1 when its MAP rows vectorise, *red_vec = 1 when its own reduction or a
 * fused stage does */
void cg_generic_vec_info(const sch_program *p, int32_t kid, int *map_vec, int *red_vec);
/* 1 when the emitter can load/store this dtype */
int cg_dtype_supported(kiln_dtype t);
/* extra compiler flags the ISA needs ("" for scalar) */
const char *cg_isa_cflags(cg_isa isa);

#endif
