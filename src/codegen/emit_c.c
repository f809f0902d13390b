/* emit_c.c — the C emitter: loop IR (src/sched/loop.h) to one C translation
 * unit per compiled graph (see emit_c.h for the kernel ABI).
 *
 * The scalar statements are the loop-IR printer's (print_lx.h) in the C
 * dialect: values in C locals named after their lx id (t<id>), a GUARD as an
 * `if` block so nothing below it (loads, lets) runs at masked-out positions,
 * a LET's index variable declared in the enclosing block so later index
 * expressions (and a scatter's store) can use it. A fused reduction (stage
 * j, see loop.h) is a reduce loop whose result lands in the local s<j>,
 * emitted before the innermost loop (per row) or at the top of its body (per
 * point); LX_STAGE leaves read it. This file adds what is the CPU's own: the
 * kernel ABI and its work-item loops, and the vector path, which the printer
 * reaches through its reduction hook.
 *
 * The vector path (AVX2 / AVX-512) is a different lowering of the same IR for
 * f32 expressions of ADD/MUL/LT/EXP2/RECIP/SQRT over constants, stage values
 * and f32 loads contiguous or broadcast along the vectorised variable: every
 * f32 SUM/MAX (a kernel's own or a stage's) whose operand is such an
 * expression along the reduce variable, and f32 MAP kernels whose value is one
 * along the last loop variable (with non-temporal stores when the runtime asks
 * for them). Everything else takes the scalar path, the reference-exact one. The generated TU is
 * compiled with -fwrapv -ffp-contract=off so C's int64 index arithmetic wraps
 * like sym arithmetic and no multiply-add is fused behind our back.
 */
#include "emit_c.h"
#include "emit_contract.h"
#include "emit_stream.h"
#include "print_lx.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base.h"

const char *cg_isa_name(cg_isa isa) {
    switch (isa) {
    case CG_ISA_SCALAR: return "scalar";
    case CG_ISA_AVX2: return "avx2";
    case CG_ISA_AVX512: return "avx512";
    }
    return "?";
}

int cg_dtype_supported(kiln_dtype t) {
    switch (t) {
    case KILN_F32:
    case KILN_F16:
    case KILN_BF16:
    case KILN_I32:
    case KILN_U8:
    case KILN_Q8_0:
    case KILN_Q4_0:
    case KILN_Q4_K:
    case KILN_Q6_K:
    case KILN_Q5_0: return 1;
    default: return 0;
    }
}

const char *cg_isa_cflags(cg_isa isa) {
    switch (isa) {
    case CG_ISA_SCALAR: return "";
    case CG_ISA_AVX2: return "-mavx2 -mfma -mf16c";
    case CG_ISA_AVX512: return "-mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq";
    }
    return "";
}

typedef struct emitter {
    cg_printer pr;               /* the text, in the C dialect */
    const cg_options *opt;
    const sch_generic_sched *gs; /* the schedule of the kernel being emitted (NULL: default) */
    int keep_stage;              /* the stage whose values also go to the row buffer krow (-1: none) */
    sym_id vguard[KILN_MAX_DIMS]; /* vector path: the predicates of the GUARDs enclosing the
                                     expression being emitted (its loads are masked by them) */
    int nvguard;
    int tail;                    /* vector path: lanes past `kt` (the row's remaining length) are
                                    masked off: loads masked, stores masked (emit_vec_outer) */
} emitter;

#define OUT(...) sch_appendf(&e->pr.s, &e->pr.len, &e->pr.cap, __VA_ARGS__)

static void out_sym(emitter *e, sym_id s) { cg_print_sym(&e->pr, s); }
static void indent(emitter *e, int n) { cg_print_indent(&e->pr, n); }
static void emit_lx(emitter *e, int32_t id, int ind) { cg_print_lx(&e->pr, id, ind); }
static void emit_const(emitter *e, kiln_dtype t, double v) { cg_print_const(&e->pr, t, v); }

/* the outer part of every kernel: decodes work item w into the outer loop
 * variables i0..i{n-2} and the chunk [jlo, jhi) of the last dim. Opens one
 * brace (the work-item loop) that close_outer closes. */
static void open_outer(emitter *e, const sch_kernel *k) {
    if (k->ndim == 0) {
        OUT("  for (int64_t w = lo; w < hi; w++) {\n");
        return;
    }
    int n = k->ndim;
    for (int d = 0; d < n; d++) {
        OUT("  const int64_t d%d = ", d);
        out_sym(e, k->dim[d]);
        OUT(";\n");
    }
    OUT("  const int64_t csz = chunk > 0 ? chunk : (d%d > 0 ? d%d : 1);\n", n - 1, n - 1);
    OUT("  const int64_t nch = (d%d + csz - 1) / csz > 0 ? (d%d + csz - 1) / csz : 1;\n", n - 1, n - 1);
    OUT("  for (int64_t w = lo; w < hi; w++) {\n");
    OUT("    int64_t o = w / nch;\n");
    OUT("    const int64_t jlo = (w %% nch) * csz, jhi = jlo + csz < d%d ? jlo + csz : d%d;\n", n - 1, n - 1);
    for (int d = n - 2; d >= 0; d--) {
        if (d > 0) OUT("    const int64_t i%d = o %% d%d; o /= d%d;\n", d, d, d);
        else OUT("    const int64_t i0 = o;\n");
    }
    OUT("    (void)o;\n");
}

static void close_outer(emitter *e) { OUT("  }\n"); }

/* ---- vector path ------------------------------------------------------- */

/* the shift of a load's offset when `var` grows by one (1: contiguous, 0:
 * broadcast), or -1 when it is neither */
static int64_t load_step(const sch_program *p, sym_id off, sym_id var) {
    int64_t c;
    if (sym_is_const(p->g->syms, sym_step(p->g->syms, off, var), &c) && (c == 0 || c == 1)) return c;
    return -1;
}

/* the constant step of a load's offset along var, or 0 when it is not a
 * constant in [2, 64] (a strided read: a stride-2 window along the output
 * columns), which only the path across output points gathers */
static int64_t gather_step(const sch_program *p, sym_id off, sym_id var) {
    int64_t c;
    if (sym_is_const(p->g->syms, sym_step(p->g->syms, off, var), &c) && c >= 2 && c <= 64) return c;
    return 0;
}

/* a GUARD predicate the vector path evaluates per lane: ANDs of conditions
 * free of var (the same for every lane) and of LT(a, b) whose b - a moves
 * by a constant c, 1 <= |c| <= 64, per step of var (a padding or
 * concatenation boundary along the vectorised loop; |c| > 1 where a
 * strided window reads it), so the lanes where it holds are one run (the
 * condition is monotone in the lane) computed from the first lane's value */
static int vec_pred_ok(const sch_program *p, sym_id s, sym_id var) {
    sym_pool *sp = p->g->syms;
    const sym_node *n = sym_get(sp, s);
    if (n->kind == SYM_AND) return vec_pred_ok(p, n->a, var) && vec_pred_ok(p, n->b, var);
    int64_t c;
    if (!sym_uses_var(sp, s, var)) return 1; /* the same for every lane */
    return n->kind == SYM_LT && sym_is_const(sp, sym_step(sp, sym_sub(sp, n->b, n->a), var), &c) && c != 0 && c >= -64 &&
           c <= 64;
}

/* an f32 expression the vector path can evaluate W lanes at a time along
 * `var`: f32 ops marked OPF_VEC in ops.def (ADD/MUL/LT/EXP2/RECIP/SQRT, as
 * emit_vec_expr spells them) over constants, stage values and f32 loads
 * contiguous or broadcast along var, under GUARDs whose predicates
 * vec_pred_ok takes (their loads masked) */
/* LOG2 of (a guard over a constant c): log2(c) where the guard holds,
 * log2(0) = -inf elsewhere (a max pool's padding), one blend per vector */
static int log2_mask_ok(const sch_program *p, int32_t id, sym_id var) {
    const lx *g = &p->lx[id];
    return g->kind == LX_GUARD && g->dtype == KILN_F32 && vec_pred_ok(p, g->s, var) &&
           p->lx[g->a].kind == LX_CONST && p->lx[g->a].dtype == KILN_F32;
}

static int vec_expr_ok_g(const sch_program *p, int32_t id, sym_id var, int gather) {
    const lx *x = &p->lx[id];
    if (x->dtype != KILN_F32) return 0;
    switch (x->kind) {
    case LX_CONST:
    case LX_STAGE: return 1;
    case LX_LOAD:
        return p->bufs[x->buf].dtype == KILN_F32 &&
               (load_step(p, x->s, var) >= 0 || (gather && gather_step(p, x->s, var) > 0));
    case LX_UNARY:
        if (x->op == OP_LOG2) return log2_mask_ok(p, x->a, var);
        return (op_table[x->op].flags & OPF_VEC) && vec_expr_ok_g(p, x->a, var, gather);
    case LX_BINARY:
        return (op_table[x->op].flags & OPF_VEC) && vec_expr_ok_g(p, x->a, var, gather) &&
               vec_expr_ok_g(p, x->b, var, gather);
    case LX_GUARD: return vec_pred_ok(p, x->s, var) && vec_expr_ok_g(p, x->a, var, gather);
    default: return 0;
    }
}

static int vec_expr_ok(const sch_program *p, int32_t id, sym_id var) { return vec_expr_ok_g(p, id, var, 0); }

/* the lane mask of predicate s (vec_pred_ok) at the first lane's var: per
 * condition with d = b - a there and step c, lanes l where d + c l >= 1;
 * kvm16 gives a __mmask16, kvm8 an __m256i */
static void emit_vec_pred(emitter *e, sym_id s, sym_id var, int w512) {
    sym_pool *sp = e->pr.p->g->syms;
    const sym_node *n = sym_get(sp, s);
    if (n->kind == SYM_AND) {
        sym_id a = n->a, b = n->b;
        OUT(w512 ? "(" : "_mm256_and_si256(");
        emit_vec_pred(e, a, var, w512);
        OUT(w512 ? " & " : ", ");
        emit_vec_pred(e, b, var, w512);
        OUT(")");
        return;
    }
    if (!sym_uses_var(sp, s, var)) { /* every lane or none */
        OUT(w512 ? "kvm16(0, (" : "kvm8(0, (");
        out_sym(e, s);
        OUT(") ? %d : 0)", w512 ? 16 : 8);
        return;
    }
    sym_id d = sym_sub(sp, n->b, n->a);
    int64_t c = 0;
    sym_is_const(sp, sym_step(sp, d, var), &c);
    OUT(w512 ? "kvm16(" : "kvm8(");
    if (c == 1) {
        OUT("1 - (");
        out_sym(e, d);
        OUT("), %d)", w512 ? 16 : 8);
    } else if (c == -1) {
        OUT("0, ");
        out_sym(e, d);
        OUT(")");
    } else if (c > 0) { /* lanes l >= ceil((1 - d) / c): C's division truncates, and kvm clamps a negative lo to 0 */
        OUT("(%lldLL - (", (long long)c);
        out_sym(e, d);
        OUT(")) / %lldLL, %d)", (long long)c, w512 ? 16 : 8);
    } else { /* lanes l < floor((d - 1) / |c|) + 1, the same way */
        OUT("0, ((");
        out_sym(e, d);
        OUT(") + %lldLL) / %lldLL)", (long long)(-c - 1), (long long)-c);
    }
}

/* the mask of every enclosing guard (vguard), ANDed */
static void emit_vec_mask(emitter *e, sym_id var, int w512) {
    if (e->tail && !e->nvguard) {
        OUT("ktm");
        return;
    }
    if (e->tail) OUT(w512 ? "(ktm & " : "_mm256_and_si256(ktm, ");
    for (int i = 0; i < e->nvguard; i++) {
        if (i + 1 < e->nvguard) OUT(w512 ? "(" : "_mm256_and_si256(");
        emit_vec_pred(e, e->vguard[i], var, w512);
        if (i + 1 < e->nvguard) OUT(w512 ? " & " : ", ");
    }
    for (int i = 0; i + 1 < e->nvguard; i++) OUT(")");
    if (e->tail) OUT(")");
}

/* lanes of the vector paths for the kernel being emitted under its schedule
 * (loop.h, sch_generic_sched): 0 = scalar only, 8 or 16 (capped by the ISA) */
static int vec_lanes(const emitter *e) {
    if (e->opt->isa == CG_ISA_SCALAR) return 0;
    int v = e->gs ? e->gs->vec : 0;
    if (v == 1) return 0;
    if (v == 8 || e->opt->isa == CG_ISA_AVX2) return 8;
    return 16;
}

/* the opening of a unary OPF_VEC op's vector form (its operand and ")"
 * follow); an op of ops.def flagged OPF_VEC adds its spelling here, the
 * others never reach it (vec_expr_ok) */
static void emit_vec_unary(emitter *e, op_kind op, int w512) {
    const char *pre = w512 ? "_mm512" : "_mm256";
    if (op == OP_SQRT) OUT("%s_sqrt_ps(", pre);
    else if (op == OP_EXP2) OUT("%s(", w512 ? "kexp2_16" : "kexp2_8");
    else if (op == OP_RECIP) OUT("%s_div_ps(%s_set1_ps(1.0f), ", pre, pre);
    else KILN_ASSERT(0 && "a unary op flagged OPF_VEC without a vector spelling");
}

/* vector expression text for W consecutive values of var (its C variable
 * holds the first lane's value) */
static void emit_vec_expr(emitter *e, int32_t id, int w512, sym_id var) {
    const lx *x = &e->pr.p->lx[id];
    const char *pre = w512 ? "_mm512" : "_mm256";
    switch (x->kind) {
    case LX_CONST: OUT("%s_set1_ps(", pre); emit_const(e, KILN_F32, x->value); OUT(")"); return;
    case LX_STAGE: OUT("%s_set1_ps(s%d)", pre, x->stage); return;
    case LX_LOAD:
        if (gather_step(e->pr.p, x->s, var) > 0) { /* strided (vec_expr_ok_g): gathered, masked lanes read nothing */
            int64_t st = gather_step(e->pr.p, x->s, var);
            int masked = e->nvguard || e->tail;
            if (st == 2) { /* two (masked) loads and a permute: kld2_* read only the lanes' elements */
                OUT(w512 ? "kld2_16(&b%d[" : "kld2_8(&b%d[", x->buf);
                out_sym(e, x->s);
                OUT("], ");
                if (masked) emit_vec_mask(e, var, w512);
                else OUT(w512 ? "(__mmask16)0xFFFF" : "_mm256_set1_epi32(-1)");
                OUT(")");
                return;
            }
            if (masked && w512) {
                OUT("_mm512_mask_i32gather_ps(_mm512_setzero_ps(), ");
                emit_vec_mask(e, var, w512);
                OUT(", ");
            } else if (w512) OUT("_mm512_i32gather_ps(");
            else if (masked) OUT("_mm256_mask_i32gather_ps(_mm256_setzero_ps(), &b%d[", x->buf);
            else OUT("_mm256_i32gather_ps(&b%d[", x->buf);
            if (!w512) {
                out_sym(e, x->s);
                OUT("], ");
            }
            OUT("%s_setr_epi32(", w512 ? "_mm512" : "_mm256");
            for (int l = 0; l < (w512 ? 16 : 8); l++) OUT("%s%lld", l ? ", " : "", (long long)(st * l));
            OUT(")");
            if (w512) {
                OUT(", &b%d[", x->buf);
                out_sym(e, x->s);
                OUT("], 4)");
            } else if (masked) {
                OUT(", _mm256_castsi256_ps(");
                emit_vec_mask(e, var, w512);
                OUT("), 4)");
            } else OUT(", 4)");
            return;
        }
        if (e->nvguard) { /* masked: lanes outside the guards read nothing */
            int contiguous = load_step(e->pr.p, x->s, var) == 1;
            if (w512 && contiguous) { /* kmld*: no load at all when every lane is masked (kld2_16) */
                OUT("kmld16(");
                emit_vec_mask(e, var, w512);
                OUT(", &b%d[", x->buf);
            } else if (contiguous) {
                OUT("kmld8(&b%d[", x->buf);
            } else {
                OUT("%s_set1_ps(", pre);
                if (w512) emit_vec_mask(e, var, w512);
                else {
                    OUT("_mm256_movemask_ps(_mm256_castsi256_ps(");
                    emit_vec_mask(e, var, w512);
                    OUT("))");
                }
                OUT(" ? b%d[", x->buf);
            }
            out_sym(e, x->s);
            if (w512 && contiguous) OUT("])");
            else if (contiguous) {
                OUT("], ");
                emit_vec_mask(e, var, w512);
                OUT(")");
            } else OUT("] : 0.0f)");
            return;
        }
        if (e->tail && load_step(e->pr.p, x->s, var) == 1) { /* the row's last lanes: read no further */
            OUT(w512 ? "_mm512_maskz_loadu_ps(ktm, &b%d[" : "_mm256_maskload_ps(&b%d[", x->buf);
            out_sym(e, x->s);
            OUT(w512 ? "])" : "], ktm)");
            return;
        }
        OUT(load_step(e->pr.p, x->s, var) == 1 ? "%s_loadu_ps(&b%d[" : "%s_set1_ps(b%d[", pre, x->buf);
        out_sym(e, x->s);
        OUT(load_step(e->pr.p, x->s, var) == 1 ? "])" : "])");
        return;
    case LX_GUARD: /* zero outside the predicate's lanes; loads inside masked */
        KILN_ASSERT(e->nvguard < KILN_MAX_DIMS);
        OUT(w512 ? "_mm512_maskz_mov_ps(" : "_mm256_and_ps(_mm256_castsi256_ps(");
        emit_vec_pred(e, x->s, var, w512);
        OUT(w512 ? ", " : "), ");
        e->vguard[e->nvguard++] = x->s;
        emit_vec_expr(e, x->a, w512, var);
        e->nvguard--;
        OUT(")");
        return;
    case LX_UNARY:
        if (x->op == OP_LOG2) { /* log2_mask_ok: log2f (the C spelling, ops.def) of the constant, or of 0, per lane */
            const lx *g = &e->pr.p->lx[x->a];
            OUT(w512 ? "_mm512_mask_blend_ps(" : "_mm256_blendv_ps(%s_set1_ps(log2f(0.0f)), %s_set1_ps(log2f(", pre, pre);
            if (w512) {
                emit_vec_pred(e, g->s, var, w512);
                OUT(", _mm512_set1_ps(log2f(0.0f)), _mm512_set1_ps(log2f(");
                emit_const(e, KILN_F32, e->pr.p->lx[g->a].value);
                OUT(")))");
            } else {
                emit_const(e, KILN_F32, e->pr.p->lx[g->a].value);
                OUT(")), _mm256_castsi256_ps(");
                emit_vec_pred(e, g->s, var, w512);
                OUT("))");
            }
            return;
        }
        emit_vec_unary(e, x->op, w512);
        emit_vec_expr(e, x->a, w512, var);
        OUT(")");
        return;
    case LX_BINARY:
        switch (x->op) {
        case OP_LT:
            if (w512) OUT("_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(");
            else OUT("_mm256_and_ps(_mm256_cmp_ps(");
            break;
        case OP_ADD: OUT("%s_add_ps(", pre); break;
        case OP_MUL: OUT("%s_mul_ps(", pre); break;
        /* not OPF_VEC, or not binary: vec_expr_ok kept them off this path */
        OP_UNARY_CASES
        case OP_INPUT: case OP_CONST: case OP_IOTA: case OP_MOD: case OP_SUM: case OP_MAX: case OP_GATHER:
        case OP_SCATTER: case OP_CAST: case OP_CONTIGUOUS: case OP_CONTRACT: case OP_SOFTMAX_ONLINE:
        case OP_SOFTMAX_CONTRACT: KILN_ASSERT(0 && "not vectorisable");
        }
        emit_vec_expr(e, x->a, w512, var);
        OUT(", ");
        emit_vec_expr(e, x->b, w512, var);
        if (x->op == OP_LT) OUT(", _CMP_LT_OQ), %s_set1_ps(1.0f))", pre);
        else OUT(")");
        return;
    default: KILN_ASSERT(0 && "not vectorisable");
    }
}

/* the reduce loop over `rvar` as vectors: `nacc` vectors per step (the
 * schedule's nacc; default 4 for MAX, 2 for SUM), each into its own
 * accumulator(s). MAX keeps float vector accumulators (max is exact in any
 * order; a NaN anywhere makes the result NaN, as in the interpreter); SUM
 * widens each float vector to two double vectors, so the result differs
 * from the interpreter's sequential double sum only in the last bits of a
 * double — almost always invisible after rounding to f32. The accumulators
 * are combined pairwise, then the lanes in order. A scalar tail finishes the
 * row. Leaves the f32 result in `res`. */
static void emit_vec_reduce(emitter *e, op_kind red_op, sym_id rdim, sym_id rvar, int32_t expr, const char *res,
                            int w512, int keep, int ind) {
    int W = w512 ? 16 : 8;
    const char *pre = w512 ? "_mm512" : "_mm256";
    const char *vt = w512 ? "__m512" : "__m256";
    const char *dt = w512 ? "__m512d" : "__m256d";
    int is_sum = red_op == OP_SUM;
    int unroll = e->gs && e->gs->nacc > 0 ? e->gs->nacc : is_sum ? 2 : 4;
    int nacc = is_sum ? 2 * unroll : unroll;
    char rn[32];
    sch_rvar_name(e->pr.p, rvar, rn, sizeof rn);
    indent(e, ind);
    OUT("float %s;\n", res);
    indent(e, ind);
    OUT("{ const int64_t rn = ");
    out_sym(e, rdim);
    OUT(";\n");
    indent(e, ind);
    if (is_sum) OUT("  %s da0 = %s_setzero_pd()", dt, pre);
    else OUT("  %s va0 = %s_set1_ps(-INFINITY)", vt, pre);
    for (int a = 1; a < nacc; a++) OUT(", %s%d = %s0", is_sum ? "da" : "va", a, is_sum ? "da" : "va");
    OUT(";\n");
    indent(e, ind);
    OUT("  int anynan = 0; (void)anynan;\n");
    indent(e, ind);
    OUT("  int64_t r0 = 0;\n");
    indent(e, ind);
    OUT("  for (; r0 + %d <= rn; r0 += %d) {\n", unroll * W, unroll * W);
    for (int u = 0; u < unroll; u++) {
        indent(e, ind);
        OUT("    { const int64_t %s = r0 + %d;\n", rn, u * W);
        indent(e, ind);
        OUT("      const %s x = ", vt);
        emit_vec_expr(e, expr, w512, rvar);
        OUT(";\n");
        indent(e, ind);
        if (keep) {
            OUT("      if (kwhole) %s_storeu_ps(&krow[%s], x);\n", pre, rn);
            indent(e, ind);
        }
        if (is_sum) {
            if (w512)
                OUT("      da%d = _mm512_add_pd(da%d, _mm512_cvtps_pd(_mm512_castps512_ps256(x)));\n"
                    "%*s      da%d = _mm512_add_pd(da%d, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd("
                    "_mm512_castps_pd(x), 1)))); }\n",
                    2 * u, 2 * u, ind, "", 2 * u + 1, 2 * u + 1);
            else
                OUT("      da%d = _mm256_add_pd(da%d, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));\n"
                    "%*s      da%d = _mm256_add_pd(da%d, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))); }\n",
                    2 * u, 2 * u, ind, "", 2 * u + 1, 2 * u + 1);
        } else {
            if (w512) OUT("      anynan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0;\n");
            else OUT("      anynan |= _mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0;\n");
            indent(e, ind);
            OUT("      va%d = %s_max_ps(va%d, x); }\n", u, pre, u);
        }
    }
    indent(e, ind);
    OUT("  }\n");
    indent(e, ind);
    /* pairwise: (a0 + a1) + (a2 + a3) for four */
    for (int n = nacc; n > 1; n /= 2) {
        for (int a = 0; a < n / 2; a++) {
            if (is_sum) OUT("  da%d = %s_add_pd(da%d, da%d);", a, pre, 2 * a, 2 * a + 1);
            else OUT("  va%d = %s_max_ps(va%d, va%d);", a, pre, 2 * a, 2 * a + 1);
        }
        OUT("\n");
        indent(e, ind);
    }
    if (is_sum) {
        int DW = W / 2;
        OUT("  double lanes[%d]; %s_storeu_pd(lanes, da0);\n", DW, pre);
        indent(e, ind);
        OUT("  double acc = 0.0; for (int q = 0; q < %d; q++) acc += lanes[q];\n", DW);
    } else {
        OUT("  float lanes[%d]; %s_storeu_ps(lanes, va0);\n", W, pre);
        indent(e, ind);
        OUT("  float acc = -INFINITY; for (int q = 0; q < %d; q++) acc = kfmax(acc, lanes[q]);\n", W);
        indent(e, ind);
        OUT("  if (anynan) acc = NAN;\n");
    }
    indent(e, ind);
    OUT("  for (int64_t %s = r0; %s < rn; %s++) {\n", rn, rn, rn);
    emit_lx(e, expr, ind + 4);
    indent(e, ind);
    if (keep) OUT("    if (kwhole) krow[%s] = t%d;\n%*s", rn, expr, ind, "");
    if (is_sum) OUT("    acc += (double)t%d;\n", expr);
    else OUT("    acc = kfmax(acc, t%d);\n", expr);
    indent(e, ind);
    OUT("  }\n");
    indent(e, ind);
    OUT("  %s = (float)acc; }\n", res);
}

/* ---- a reduction vectorised across its output points ------------------
 * A REDUCE kernel whose reduction the vector path cannot take along r (a
 * depthwise convolution or a pool's window: r short and its loads strided
 * along it; Relu as a MAX over a stacked pair, r = 2) but whose operand it
 * can evaluate along the last loop variable, stored contiguously along it
 * (here loads strided along it too, as gathers: a stride-2 window),
 * computes W output points at a time: each lane its own accumulator
 * running over r in order. SUM accumulates each lane in double in r's
 * order, MAX keeps the first NaN's lane NaN, so every lane is what the
 * scalar loop computes for its point, bit for bit. Rows end in one masked
 * step (ktm: the lanes still in the row), no scalar tail. */

/* the kernel takes that path: nothing the path cannot print, and the inner
 * (along r) path, when it applies, only where r is too short to fill vectors */
static int vec_outer_ok(const sch_program *p, const sch_kernel *k) {
    if (k->kind != SCH_K_REDUCE || k->ndim == 0 || k->nstages > 0) return 0;
    if (k->red_op != OP_SUM && k->red_op != OP_MAX) return 0;
    if (p->bufs[k->out_buf].dtype != KILN_F32 || p->lx[k->expr].dtype != KILN_F32) return 0;
    sym_id lv = k->var[k->ndim - 1];
    if (load_step(p, k->store_off, lv) != 1 || !vec_expr_ok_g(p, k->expr, lv, 1)) return 0;
    int64_t rn;
    if (vec_expr_ok(p, k->expr, k->rvar) && !(sym_is_const(p->g->syms, k->rdim, &rn) && rn < 64)) return 0;
    return 1;
}

/* U blocks of W lanes from i<n-1> on: accumulate over r, then store (masked
 * by ktm when e->tail) */
static void emit_vec_outer_step(emitter *e, const sch_kernel *k, int U, int ind) {
    int w512 = vec_lanes(e) == 16, W = w512 ? 16 : 8, n = k->ndim, is_sum = k->red_op == OP_SUM;
    const char *pre = w512 ? "_mm512" : "_mm256", *vt = w512 ? "__m512" : "__m256";
    sym_id lv = k->var[n - 1];
    char rn[32];
    sch_rvar_name(e->pr.p, k->rvar, rn, sizeof rn);
    indent(e, ind);
    OUT("{ const int64_t iu = i%d;\n", n - 1);
    for (int u = 0; u < U; u++) {
        indent(e, ind);
        if (is_sum) OUT("  %s lo%d = %s_setzero_pd(), hi%d = lo%d;\n", w512 ? "__m512d" : "__m256d", u, pre, u, u);
        else if (w512) OUT("  __m512 va%d = _mm512_set1_ps(-INFINITY); __mmask16 nan%d = 0;\n", u, u);
        else OUT("  __m256 va%d = _mm256_set1_ps(-INFINITY), nan%d = _mm256_setzero_ps();\n", u, u);
    }
    indent(e, ind);
    OUT("  const int64_t rn = ");
    out_sym(e, k->rdim);
    OUT(";\n");
    /* a short constant r (a pooling window, a Relu's pair) unrolled: its
     * window offsets (r / 3, r % 3) and guards fold into constants */
    int64_t rconst = 0;
    if (sym_is_const(e->pr.p->g->syms, k->rdim, &rconst) && rconst <= 16) {
        indent(e, ind);
        OUT("  _Pragma(\"GCC unroll 16\")\n");
    }
    indent(e, ind);
    OUT("  for (int64_t %s = 0; %s < rn; %s++) {\n", rn, rn, rn);
    for (int u = 0; u < U; u++) {
        indent(e, ind);
        OUT("    { const int64_t i%d = iu + %d;\n", n - 1, u * W);
        indent(e, ind);
        OUT("      const %s x = ", vt);
        emit_vec_expr(e, k->expr, w512, lv);
        OUT(";\n");
        indent(e, ind);
        if (is_sum && w512)
            OUT("      lo%d = _mm512_add_pd(lo%d, _mm512_cvtps_pd(_mm512_castps512_ps256(x)));\n"
                "%*s      hi%d = _mm512_add_pd(hi%d, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd("
                "_mm512_castps_pd(x), 1)))); }\n",
                u, u, ind, "", u, u);
        else if (is_sum)
            OUT("      lo%d = _mm256_add_pd(lo%d, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));\n"
                "%*s      hi%d = _mm256_add_pd(hi%d, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))); }\n",
                u, u, ind, "", u, u);
        else if (w512)
            OUT("      nan%d |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q); va%d = _mm512_max_ps(x, va%d); }\n", u, u, u);
        else
            OUT("      nan%d = _mm256_or_ps(nan%d, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); va%d = _mm256_max_ps(x, va%d); }\n",
                u, u, u, u);
    }
    indent(e, ind);
    OUT("  }\n");
    for (int u = 0; u < U; u++) {
        indent(e, ind);
        OUT("  { const int64_t i%d = iu + %d;\n", n - 1, u * W);
        indent(e, ind);
        if (is_sum && w512)
            OUT("    const __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo%d)), "
                "_mm512_cvtpd_ps(hi%d), 1);\n", u, u);
        else if (is_sum)
            OUT("    const __m256 y = _mm256_set_m128(_mm256_cvtpd_ps(hi%d), _mm256_cvtpd_ps(lo%d));\n", u, u);
        else if (w512)
            OUT("    const __m512 y = _mm512_mask_blend_ps(nan%d, va%d, _mm512_set1_ps(NAN));\n", u, u);
        else
            OUT("    const __m256 y = _mm256_blendv_ps(va%d, _mm256_set1_ps(NAN), nan%d);\n", u, u);
        indent(e, ind);
        if (e->tail && w512) OUT("    _mm512_mask_storeu_ps(&out[");
        else if (e->tail) OUT("    _mm256_maskstore_ps(&out[");
        else OUT("    %s_storeu_ps(&out[", pre);
        out_sym(e, k->store_off);
        if (e->tail && w512) OUT("], ktm, y); }\n");
        else if (e->tail) OUT("], ktm, y); }\n");
        else OUT("], y); }\n");
    }
    indent(e, ind);
    OUT("}\n");
}

/* one row [jlo, jhi): U blocks per step (the schedule's nacc, default 1),
 * then single blocks, then the last lanes masked */
static void emit_vec_outer_row(emitter *e, const sch_kernel *k) {
    int w512 = vec_lanes(e) == 16, W = w512 ? 16 : 8, n = k->ndim;
    int U = e->gs && e->gs->nacc > 1 ? e->gs->nacc : 1;
    OUT("    int64_t i%d = jlo;\n", n - 1);
    if (U > 1) {
        OUT("    for (; i%d + %d <= jhi; i%d += %d)\n", n - 1, U * W, n - 1, U * W);
        emit_vec_outer_step(e, k, U, 6);
    }
    OUT("    for (; i%d + %d <= jhi; i%d += %d)\n", n - 1, W, n - 1, W);
    emit_vec_outer_step(e, k, 1, 6);
    OUT("    if (i%d < jhi) {\n", n - 1);
    if (w512) OUT("      const __mmask16 ktm = kvm16(0, jhi - i%d);\n", n - 1);
    else OUT("      const __m256i ktm = kvm8(0, jhi - i%d);\n", n - 1);
    e->tail = 1;
    emit_vec_outer_step(e, k, 1, 6);
    e->tail = 0;
    OUT("    }\n");
}

/* ---- kernels ----------------------------------------------------------- */

/* 1 when r's length is a constant shorter than one step of emit_vec_reduce's
 * unrolled loop: that loop would never run, and its lanes' set-up and
 * horizontal reduction would be all it did per point (a Relu fused per
 * element into a map is a MAX over 2: 14 ns a point that way on Zen 4).
 * The printer's scalar loop computes the same value (SUM in double in r's
 * order, MAX with the first NaN) without them. */
static int reduce_too_short(const emitter *e, const cg_reduction *r) {
    int64_t rn = 0;
    if (!sym_is_const(e->pr.p->g->syms, r->rdim, &rn)) return 0;
    int unroll = e->gs && e->gs->nacc > 0 ? e->gs->nacc : r->op == OP_SUM ? 2 : 4;
    return rn < (int64_t)unroll * vec_lanes(e);
}

/* the printer's reduction hook (print_lx.h): an f32 reduction whose operand
 * the vector path can evaluate is printed by it, unless it is too short for
 * its loop (reduce_too_short); anything else is left to the printer's
 * scalar loop */
static int c_reduce(cg_printer *pr, const cg_reduction *r, int ind) {
    emitter *e = pr->owner;
    int keep = r->stage >= 0 && r->stage == e->keep_stage;
    if (vec_lanes(e) && pr->p->lx[r->expr].dtype == KILN_F32 && vec_expr_ok(pr->p, r->expr, r->rvar) &&
        (keep || !reduce_too_short(e, r))) {
        emit_vec_reduce(e, r->op, r->rdim, r->rvar, r->expr, r->res, vec_lanes(e) == 16, keep, ind);
        return 1;
    }
    KILN_ASSERT(!keep); /* stage_reuse only picks vectorised stages */
    return 0;
}

static void emit_stages(emitter *e, const sch_kernel *k, int row, int ind) { cg_print_stages(&e->pr, k, row, ind); }
static void emit_point(emitter *e, const sch_kernel *k, int ind) { cg_print_point(&e->pr, k, ind); }

/* a C emitter over p, its text empty */
static void emitter_init(emitter *e, const sch_program *p, const cg_options *opt) {
    memset(e, 0, sizeof *e);
    cg_printer_init(&e->pr, p, &cg_dialect_c);
    e->pr.reduce = c_reduce;
    e->pr.owner = e;
    e->opt = opt;
}

/* an f32 MAP whose value is vectorisable along the last loop variable and
 * that has no per-element stages; its loads may be strided along it (a
 * stride-2 convolution's pack reads every other input column: two masked
 * loads and a permute, or a gather for longer strides, as the reductions
 * across output points do), masked lanes reading nothing */
static int vec_map_ok(const sch_program *p, const sch_kernel *k) {
    if (k->kind != SCH_K_MAP || k->ndim == 0 || p->bufs[k->out_buf].dtype != KILN_F32) return 0;
    for (int32_t i = 0; i < k->nstages; i++)
        if (!k->stages[i].row) return 0;
    /* the store is row-major over the domain, so contiguous along it too */
    return vec_expr_ok_g(p, k->expr, k->var[k->ndim - 1], 1);
}

/* ---- a row stage's values reused by its row (softmax) ------------------
 * A MAP whose value is X * Y, X the very expression a SUM row stage adds
 * up (at the loop variable instead of the reduce variable) and Y the same
 * all along the row (softmax: exp2((x - max) c) * (1 / sum)), keeps the
 * stage's values in a row buffer krow as it sums them, and the row becomes
 * krow[i] * Y: X (its loads, and softmax's second exp2) is not evaluated
 * again. Only when an item holds a whole row (kwhole; the runtime splits few
 * long rows into chunks, which recompute the stages per chunk). */

/* whether tree a, read at the variable that map renames, computes what tree
 * b does, node for node */
static int lx_same_renamed(const sch_program *p, int32_t a, int32_t b, const sym_id *map, uint32_t nv) {
    const lx *x = &p->lx[a], *y = &p->lx[b];
    if (x->kind != y->kind || x->dtype != y->dtype) return 0;
    switch (x->kind) {
    case LX_CONST: return memcmp(&x->value, &y->value, sizeof x->value) == 0;
    case LX_STAGE: return x->stage == y->stage;
    case LX_LOAD: return x->buf == y->buf && sym_subst(p->g->syms, x->s, map, nv) == y->s;
    case LX_UNARY: return x->op == y->op && lx_same_renamed(p, x->a, y->a, map, nv);
    case LX_BINARY:
        return x->op == y->op && lx_same_renamed(p, x->a, y->a, map, nv) && lx_same_renamed(p, x->b, y->b, map, nv);
    default: return 0;
    }
}

/* whether tree id has the same value all along var (vector-path nodes only) */
static int invariant_along(const sch_program *p, int32_t id, sym_id var) {
    const lx *x = &p->lx[id];
    switch (x->kind) {
    case LX_CONST:
    case LX_STAGE: return 1;
    case LX_LOAD: return load_step(p, x->s, var) == 0;
    case LX_UNARY: return invariant_along(p, x->a, var);
    case LX_BINARY: return invariant_along(p, x->a, var) && invariant_along(p, x->b, var);
    default: return 0;
    }
}

/* the stage (*si) whose values the row reuses and the row-invariant factor
 * (*yid), see above; 0 when the kernel has none. For a kernel vec_map_ok
 * accepted. */
static int stage_reuse(const sch_program *p, const sch_kernel *k, int *si, int32_t *yid) {
    const lx *m = &p->lx[k->expr];
    if (m->kind != LX_BINARY || m->op != OP_MUL) return 0;
    sym_pool *sp = p->g->syms;
    sym_id lv = k->var[k->ndim - 1];
    uint32_t nv = sym_var_count(sp);
    sym_id *map = kiln_xmalloc((size_t)(nv + 1) * sizeof *map);
    int found = 0;
    for (int side = 0; side < 2 && !found; side++) {
        int32_t X = side ? m->b : m->a, Y = side ? m->a : m->b;
        if (!invariant_along(p, Y, lv)) continue;
        for (int32_t i = 0; i < k->nstages && !found; i++) {
            const sch_stage *st = &k->stages[i];
            if (!st->row || st->red_op != OP_SUM || p->lx[st->expr].dtype != KILN_F32 ||
                st->rdim != k->dim[k->ndim - 1] || !vec_expr_ok(p, st->expr, st->rvar))
                continue;
            for (uint32_t v = 0; v < nv; v++) map[v] = SYM_NONE;
            map[sym_get(sp, st->rvar)->c] = lv;
            if (lx_same_renamed(p, st->expr, X, map, nv)) {
                *si = (int)i;
                *yid = Y;
                found = 1;
            }
        }
    }
    free(map);
    return found;
}

/* a whole row as krow[i] * Y (the kept stage filled krow), with the same
 * non-temporal stores as emit_vec_map_row */
static void emit_reuse_row(emitter *e, const sch_kernel *k, int32_t y) {
    int w512 = vec_lanes(e) == 16;
    int W = w512 ? 16 : 8, n = k->ndim;
    const char *pre = w512 ? "_mm512" : "_mm256";
    OUT("    if (kwhole) {\n");
    emit_lx(e, y, 6);
    OUT("      const %s ky = ", w512 ? "__m512" : "__m256");
    emit_vec_expr(e, y, w512, k->var[n - 1]);
    OUT(";\n      int64_t i%d = 0;\n", n - 1);
    OUT("      if (flags & 1) {\n        for (; i%d < d%d && ((uintptr_t)&out[", n - 1, n - 1);
    out_sym(e, k->store_off);
    OUT("] & %d) != 0; i%d++) out[", W * 4 - 1, n - 1);
    out_sym(e, k->store_off);
    OUT("] = krow[i%d] * t%d;\n", n - 1, y);
    OUT("        for (; i%d + %d <= d%d; i%d += %d) %s_stream_ps(&out[", n - 1, W, n - 1, n - 1, W, pre);
    out_sym(e, k->store_off);
    OUT("], %s_mul_ps(%s_loadu_ps(&krow[i%d]), ky));\n      }\n", pre, pre, n - 1);
    OUT("      for (; i%d + %d <= d%d; i%d += %d) %s_storeu_ps(&out[", n - 1, W, n - 1, n - 1, W, pre);
    out_sym(e, k->store_off);
    OUT("], %s_mul_ps(%s_loadu_ps(&krow[i%d]), ky));\n", pre, pre, n - 1);
    OUT("      for (; i%d < d%d; i%d++) out[", n - 1, n - 1, n - 1);
    out_sym(e, k->store_off);
    OUT("] = krow[i%d] * t%d;\n", n - 1, y);
    OUT("    } else {\n");
}

/* one row [jlo, jhi) of a vectorised MAP: with flags bit 0 (the runtime
 * asks for it on outputs too large to stay in cache) the stores are
 * non-temporal, after a masked head up to the vector's alignment. The schedule's
 * unroll U > 1 stores U vectors per step (each evaluated in its own block
 * with the loop variable rebound to its first lane), then single vectors,
 * then the last lanes as one masked vector. */
static void emit_vec_map_row(emitter *e, const sch_kernel *k) {
    int w512 = vec_lanes(e) == 16;
    int W = w512 ? 16 : 8;
    int U = e->gs && e->gs->unroll > 1 ? e->gs->unroll : 1;
    const char *pre = w512 ? "_mm512" : "_mm256";
    int n = k->ndim;
    sym_id lv = k->var[n - 1];
    OUT("    int64_t i%d = jlo;\n", n - 1);
    OUT("    if (flags & 1) {\n");
    /* the head up to alignment as one masked step, not a scalar loop: a
     * convolution's pack writes rows of 56 floats (224 bytes), so every
     * row began with up to 15 scalar points, guards and all */
    OUT("      { const int64_t kh = (int64_t)((%d - ((uintptr_t)&out[", W * 4);
    out_sym(e, k->store_off);
    OUT("] & %d)) & %d) / 4, kn = kh < jhi - i%d ? kh : jhi - i%d;\n", W * 4 - 1, W * 4 - 1, n - 1, n - 1);
    OUT("        if (kn > 0) {\n");
    if (w512) OUT("          const __mmask16 ktm = kvm16(0, kn);\n          _mm512_mask_storeu_ps(&out[");
    else OUT("          const __m256i ktm = kvm8(0, kn);\n          _mm256_maskstore_ps(&out[");
    out_sym(e, k->store_off);
    OUT("], ktm, ");
    e->tail = 1;
    emit_vec_expr(e, k->expr, w512, lv);
    e->tail = 0;
    OUT(");\n          i%d += kn;\n        } }\n", n - 1);
    OUT("      for (; i%d + %d <= jhi; i%d += %d)\n        %s_stream_ps(&out[", n - 1, W, n - 1, W, pre);
    out_sym(e, k->store_off);
    OUT("], ");
    emit_vec_expr(e, k->expr, w512, lv);
    OUT(");\n    }\n");
    if (U > 1) {
        OUT("    { int64_t iu = i%d;\n", n - 1);
        OUT("      for (; iu + %d <= jhi; iu += %d) {\n", U * W, U * W);
        for (int u = 0; u < U; u++) {
            OUT("        { const int64_t i%d = iu + %d;\n          %s_storeu_ps(&out[", n - 1, u * W, pre);
            out_sym(e, k->store_off);
            OUT("], ");
            emit_vec_expr(e, k->expr, w512, lv);
            OUT("); }\n");
        }
        OUT("      }\n      i%d = iu; }\n", n - 1);
    }
    OUT("    for (; i%d + %d <= jhi; i%d += %d)\n      %s_storeu_ps(&out[", n - 1, W, n - 1, W, pre);
    out_sym(e, k->store_off);
    OUT("], ");
    emit_vec_expr(e, k->expr, w512, lv);
    OUT(");\n");
    /* the row's last lanes as one masked step (a row of 14 or 7, a
     * convolution pack's at 14x14 and 7x7, was all scalar): loads and the
     * store masked by ktm, so nothing past jhi is read or written */
    OUT("    if (i%d < jhi) {\n", n - 1);
    if (w512) OUT("      const __mmask16 ktm = kvm16(0, jhi - i%d);\n      _mm512_mask_storeu_ps(&out[", n - 1);
    else OUT("      const __m256i ktm = kvm8(0, jhi - i%d);\n      _mm256_maskstore_ps(&out[", n - 1);
    out_sym(e, k->store_off);
    OUT("], ktm, ");
    e->tail = 1;
    emit_vec_expr(e, k->expr, w512, lv);
    e->tail = 0;
    OUT(");\n    }\n");
}

static void collect_kernel_bufs(const sch_program *p, const sch_kernel *k, uint8_t *used) {
    cg_lx_collect_bufs(p, k->expr, used);
    for (int32_t i = 0; i < k->nstages; i++) cg_lx_collect_bufs(p, k->stages[i].expr, used);
}

/* the pointers to the buffers kernel k reads (restrict: only its output
 * buffer may be read in place, and that one is not), and `out` */
static void emit_kernel_bufs(emitter *e, const sch_kernel *k) {
    const sch_program *p = e->pr.p;
    uint8_t *used = kiln_xcalloc((size_t)p->nbufs + 1, 1);
    collect_kernel_bufs(p, k, used);
    for (int32_t b = 0; b < p->nbufs; b++) {
        if (!used[b] || b == k->out_buf) continue;
        kiln_dtype t = p->bufs[b].dtype;
        OUT("  const %s *restrict b%d = (const %s *)B[%d];\n", cg_storage_type(&cg_dialect_c, t), b, cg_storage_type(&cg_dialect_c, t), b);
    }
    kiln_dtype ot = p->bufs[k->out_buf].dtype;
    if (used[k->out_buf]) /* in-place reads of the output buffer (never aliased otherwise) */
        OUT("  %s *b%d = (%s *)B[%d];\n  %s *out = b%d;\n", cg_storage_type(&cg_dialect_c, ot), k->out_buf, cg_storage_type(&cg_dialect_c, ot),
            k->out_buf, cg_storage_type(&cg_dialect_c, ot), k->out_buf);
    else
        OUT("  %s *restrict out = (%s *)B[%d];\n", cg_storage_type(&cg_dialect_c, ot), cg_storage_type(&cg_dialect_c, ot), k->out_buf);
    free(used);
}

/* one row of the domain: i0..i{n-2} and the columns [jlo, jhi) in scope
 * (and d0..d{n-1}, flags, kerr, krow when a stage's values are kept) */
static void emit_kernel_row(emitter *e, const sch_kernel *k, int vec_map, int32_t reuse_y) {
    if (e->keep_stage >= 0) {
        OUT("    if (!krow) krow = (float *)malloc((size_t)(d%d > 0 ? d%d : 1) * sizeof(float));\n", k->ndim - 1,
            k->ndim - 1);
        OUT("    const int kwhole = krow && jlo == 0 && jhi == d%d;\n", k->ndim - 1);
    }
    emit_stages(e, k, 1, 4);
    if (vec_map && e->keep_stage >= 0) {
        emit_reuse_row(e, k, reuse_y);
        emit_vec_map_row(e, k);
        OUT("    }\n");
    } else if (vec_map) {
        emit_vec_map_row(e, k);
    } else if (vec_lanes(e) && vec_outer_ok(e->pr.p, k)) {
        emit_vec_outer_row(e, k);
    } else if (k->ndim == 0) {
        emit_point(e, k, 4);
    } else {
        int n = k->ndim;
        OUT("    for (int64_t i%d = jlo; i%d < jhi; i%d++) {\n", n - 1, n - 1, n - 1);
        emit_point(e, k, 6);
        OUT("    }\n");
    }
}

static void emit_kernel_as(emitter *e, int32_t kid, const char *name, const sch_generic_sched *gs) {
    const sch_program *p = e->pr.p;
    const sch_kernel *k = &p->kernels[kid];
    e->gs = gs ? gs : &k->gsched;
    OUT("int %s(void *const *B, const int64_t *v, int64_t lo, int64_t hi, int64_t chunk, int64_t flags) {\n",
        name);
    OUT("  int kerr = 0; (void)v; (void)chunk; (void)flags;\n");
    emit_kernel_bufs(e, k);
    int vec_map = vec_lanes(e) && vec_map_ok(p, k);
    int32_t reuse_y = -1;
    e->keep_stage = -1;
    if (vec_map && stage_reuse(p, k, &e->keep_stage, &reuse_y))
        OUT("  float *krow = NULL;\n");
    open_outer(e, k);
    emit_kernel_row(e, k, vec_map, reuse_y);
    close_outer(e);
    if (e->keep_stage >= 0) OUT("  free(krow);\n");
    e->keep_stage = -1;
    if (vec_map) OUT("  if (flags & 1) _mm_sfence();\n");
    OUT("  return kerr;\n}\n\n");
    e->gs = NULL;
}

/* kernel kid as a contraction's epilogue or prologue (sched/epilogue.c):
 * a block that computes the box blo[d] <= i_d < bhi[d] of its domain
 * (int64_t arrays in scope), row by row as the kernel would (its
 * schedule's vector paths, temporal stores), or-ing a range error into
 * `res`. Inline in the contraction's function, not a function of its own:
 * its B[n] are then the kernel's, which cc_dedup.c renames, so the layers'
 * copies of a contraction stay one body (a call by name made every layer's
 * body its own: gemma3-270m compiled in 22 s instead of 7) */
static void emit_box_block(emitter *e, int32_t kid, const char *blo, const char *bhi, const char *res) {
    const sch_program *p = e->pr.p;
    const sch_kernel *k = &p->kernels[kid];
    KILN_ASSERT(k->ndim >= 1 && k->nstages == 0);
    e->gs = &k->gsched;
    e->keep_stage = -1;
    int n = k->ndim;
    OUT("    { /* kernel %d inside this item */\n", (int)kid);
    OUT("  int kerr = 0; const int64_t flags = 0; (void)flags;\n");
    emit_kernel_bufs(e, k);
    for (int d = 0; d < n; d++) {
        OUT("  const int64_t d%d = ", d);
        out_sym(e, k->dim[d]);
        OUT("; (void)d%d;\n", d);
    }
    for (int d = 0; d + 1 < n; d++) OUT("  for (int64_t i%d = %s[%d]; i%d < %s[%d]; i%d++)\n", d, blo, d, d, bhi, d, d);
    OUT("  {\n    const int64_t jlo = %s[%d], jhi = %s[%d];\n", blo, n - 1, bhi, n - 1);
    emit_kernel_row(e, k, vec_lanes(e) && vec_map_ok(p, k), -1);
    OUT("  }\n  %s |= kerr;\n    }\n", res);
    e->gs = NULL;
}

static void emit_kernel(emitter *e, int32_t kid) {
    char name[32];
    snprintf(name, sizeof name, "kiln_k%d", (int)kid);
    if (e->pr.p->kernels[kid].kind == SCH_K_STREAM) cg_emit_stream(&e->pr, kid, name);
    else emit_kernel_as(e, kid, name, NULL);
}

/* vector exp2 (2^x for f32 lanes): x = n + f with n = round(x), |f| <= 1/2,
 * 2^f by its degree-7 Taylor polynomial in Horner form with fused
 * multiply-adds (truncation error below 1e-8 relative), then scaled by 2^n
 * (AVX-512: scalef; AVX2: two exact power-of-two factors, so subnormal
 * results are rounded once). x is clamped to [-160, 160] first: beyond that
 * the result is 0 or +inf either way; NaN lanes return x. Max error 2 ulp
 * (tests/unit/test_compile.c measures it over a sweep of the whole range).
 * Lanes with x <= -150 (2^x rounds to 0) are zeroed by a mask, not
 * computed: an underflowing scalef or multiply takes a microcode assist on
 * Intel cores (6x slower), and masked attention scores (-1e30) are half of
 * a causal softmax's lanes. */
static const char *vec_prelude =
    "#define KEXP2_POLY(P, F, f) P(P(P(P(P(P(P(F(1.525273380405984e-05f), f, F(1.5403530393381608e-04f)), f, "
    "F(1.3333558146428443e-03f)), f, F(9.618129107628477e-03f)), f, F(5.550410866482158e-02f)), f, "
    "F(2.402265069591007e-01f)), f, F(6.931471805599453e-01f)), f, F(1.0f))\n"
    "KI __m256i kvm8(int64_t lo, int64_t hi) {\n"
    "  const __m256i l = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);\n"
    "  lo = lo < 0 ? 0 : lo > 8 ? 8 : lo; hi = hi < 0 ? 0 : hi > 8 ? 8 : hi;\n"
    "  return _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), l), _mm256_cmpgt_epi32(l, _mm256_set1_epi32((int)lo - 1)));\n"
    "}\n"
    "#ifdef __AVX512F__\n"
    "KI __mmask16 kvm16(int64_t lo, int64_t hi) {\n"
    "  lo = lo < 0 ? 0 : lo > 16 ? 16 : lo; hi = hi < 0 ? 0 : hi > 16 ? 16 : hi;\n"
    "  return lo < hi ? (__mmask16)((0xFFFFu >> (16 - hi)) & (0xFFFFu << lo)) : (__mmask16)0;\n"
    "}\n"
    "KI __m512 kfma16(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }\n"
    "KI __m512 kmld16(__mmask16 m, const float *p) { return m ? _mm512_maskz_loadu_ps(m, p) : _mm512_setzero_ps(); }\n"
    "KI __mmask16 kspread8(unsigned x) {\n"
    "  x &= 0xFFu; x = (x | (x << 4)) & 0x0F0Fu; x = (x | (x << 2)) & 0x3333u; x = (x | (x << 1)) & 0x5555u;\n"
    "  return (__mmask16)x;\n"
    "}\n"
    "KI __m512 kld2_16(const float *p, __mmask16 m) {\n"
    "  if (!m) return _mm512_setzero_ps(); /* a masked load far outside the buffer takes a fault-suppression assist */\n"
    "  const __m512 a = _mm512_maskz_loadu_ps(kspread8(m), p), b = _mm512_maskz_loadu_ps(kspread8((unsigned)m >> 8), p + 16);\n"
    "  return _mm512_permutex2var_ps(a, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), b);\n"
    "}\n"
    "KI __m512 kexp2_16(__m512 x) {\n"
    "  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-160.0f)), _mm512_set1_ps(160.0f));\n"
    "  const __m512 n = _mm512_roundscale_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);\n"
    "  const __m512 f = _mm512_sub_ps(xc, n);\n"
    "  const __m512 p = KEXP2_POLY(kfma16, _mm512_set1_ps, f);\n"
    "  const __m512 r = _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-150.0f), _CMP_GT_OQ), p, n);\n"
    "  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, x);\n"
    "}\n"
    "#endif\n"
    "KI __m256 kfma8(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }\n"
    "KI __m256 kmld8(const float *p, __m256i m) { return _mm256_testz_si256(m, m) ? _mm256_setzero_ps() : _mm256_maskload_ps(p, m); }\n"
    "KI __m256 kld2_8(const float *p, __m256i m) {\n"
    "  if (_mm256_testz_si256(m, m)) return _mm256_setzero_ps();\n"
    "  const __m256i even = _mm256_setr_epi32(-1, 0, -1, 0, -1, 0, -1, 0);\n"
    "  const __m256i ma = _mm256_and_si256(even, _mm256_permutevar8x32_epi32(m, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)));\n"
    "  const __m256i mb = _mm256_and_si256(even, _mm256_permutevar8x32_epi32(m, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)));\n"
    "  const __m256 a = _mm256_maskload_ps(p, ma), b = _mm256_maskload_ps(p + 8, mb);\n"
    "  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));\n"
    "}\n"
    "KI __m256 kexp2_8(__m256 x) {\n"
    "  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-160.0f)), _mm256_set1_ps(160.0f));\n"
    "  const __m256 n = _mm256_round_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);\n"
    "  const __m256 f = _mm256_sub_ps(xc, n);\n"
    "  const __m256 p = KEXP2_POLY(kfma8, _mm256_set1_ps, f);\n"
    "  const __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);\n"
    "  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));\n"
    "  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));\n"
    "  const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(-150.0f), _CMP_GT_OQ);\n"
    "  const __m256 r = _mm256_mul_ps(_mm256_mul_ps(p, _mm256_blendv_ps(_mm256_set1_ps(1.0f), s1, live)), s2);\n"
    "  return _mm256_blendv_ps(_mm256_and_ps(r, live), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));\n"
    "}\n\n";

/* the C dialect's prologue, and the vector helpers where the ISA has vectors */
static void emit_prelude(emitter *e) {
    cg_print_prologue(&e->pr);
    if (e->opt->isa != CG_ISA_SCALAR) OUT("#include <immintrin.h>\n%s", vec_prelude);
}

char *cg_emit_c_generic_one(const sch_program *p, int32_t kid, const cg_options *opt, const char *name) {
    emitter e0, *e = &e0;
    emitter_init(e, p, opt);
    emit_prelude(e);
    emit_kernel_as(e, kid, name, NULL);
    return e->pr.s;
}

/* an emitter appending to the caller's growable string (emitter_give_back
 * hands the string, grown, back) */
static void emitter_on(emitter *e, const sch_program *p, const cg_options *opt, char **buf, size_t *len, size_t *cap) {
    emitter_init(e, p, opt);
    e->pr.s = *buf;
    e->pr.len = *len;
    e->pr.cap = *cap;
}

static void emitter_give_back(emitter *e, char **buf, size_t *len, size_t *cap) {
    *buf = e->pr.s;
    *len = e->pr.len;
    *cap = e->pr.cap;
}

void cg_emit_c_prelude(const cg_options *opt, char **buf, size_t *len, size_t *cap) {
    emitter e;
    emitter_on(&e, NULL, opt, buf, len, cap);
    emit_prelude(&e);
    emitter_give_back(&e, buf, len, cap);
}

void cg_emit_c_generic_append(const sch_program *p, int32_t kid, const cg_options *opt, const char *name,
                              const sch_generic_sched *s, char **buf, size_t *len, size_t *cap) {
    emitter e;
    emitter_on(&e, p, opt, buf, len, cap);
    emit_kernel_as(&e, kid, name, s);
    emitter_give_back(&e, buf, len, cap);
}

void cg_emit_c_box(const sch_program *p, int32_t kid, const cg_options *opt, const char *blo, const char *bhi,
                   const char *res, char **buf, size_t *len, size_t *cap) {
    emitter e;
    emitter_on(&e, p, opt, buf, len, cap);
    emit_box_block(&e, kid, blo, bhi, res);
    emitter_give_back(&e, buf, len, cap);
}

void cg_generic_vec_info(const sch_program *p, int32_t kid, int *map_vec, int *red_vec) {
    const sch_kernel *k = &p->kernels[kid];
    *map_vec = vec_map_ok(p, k);
    int r = k->kind == SCH_K_REDUCE && p->lx[k->expr].dtype == KILN_F32 &&
            (vec_expr_ok(p, k->expr, k->rvar) || vec_outer_ok(p, k));
    for (int32_t i = 0; i < k->nstages; i++) {
        const sch_stage *st = &k->stages[i];
        if (p->lx[st->expr].dtype == KILN_F32 && vec_expr_ok(p, st->expr, st->rvar)) r = 1;
    }
    *red_vec = r;
}

char *cg_emit_c(const sch_program *p, const cg_options *opt) {
    emitter e0, *e = &e0;
    emitter_init(e, p, opt);
    emit_prelude(e);
    cg_emit_contract_prelude(p, opt->isa, &e->pr.s, &e->pr.len, &e->pr.cap);
    for (int32_t k = 0; k < p->nkernels; k++) {
        sch_kernel_kind kk = p->kernels[k].kind;
        if (kk == SCH_K_QUANTIZE || kk == SCH_K_COPY) continue;
        if (cg_contract_emittable(p, &p->kernels[k], opt->isa)) cg_emit_contract_kernel(p, k, &e->pr.s, &e->pr.len, &e->pr.cap);
        else emit_kernel(e, k);
    }
    return e->pr.s;
}
