/* print_lx.c — the one loop-IR printer: expression trees, reductions and a
 * kernel's body at one point, in the language a cg_dialect row spells (see
 * print_lx.h for the conventions of the text).
 *
 * Every name a language spells its own way comes from the row; the structure
 * (statement order, locals, guards, the reduction loops) is the same for all
 * of them. Numerics are the reference interpreter's: f32 arithmetic rounded to
 * the node's dtype after every op, integer arithmetic wrapping in 64 bits,
 * float sums accumulated in the dialect's wide type (double, where the device
 * has it) and rounded once, NaN-propagating MAX.
 */
#include "print_lx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "dtype.h"

#define OUT(...) sch_appendf(&pr->s, &pr->len, &pr->cap, __VA_ARGS__)

static int is_intdt(kiln_dtype t) { return t == KILN_I32 || t == KILN_U8; }
/* the type of a value (not of its storage) */
static const char *ctype(const cg_dialect *d, kiln_dtype t) { return is_intdt(t) ? d->i64 : "float"; }

void cg_printer_init(cg_printer *pr, const sch_program *p, const cg_dialect *d) {
    memset(pr, 0, sizeof *pr);
    pr->p = p;
    pr->d = d;
}

void cg_print_prologue(cg_printer *pr) {
    OUT("%s", pr->d->header);
    OUT("%s", pr->d->helpers);
}

void cg_print_indent(cg_printer *pr, int n) { OUT("%*s", n, ""); }

void cg_print_sym(cg_printer *pr, sym_id s) { sch_print_sym_as(pr->p, s, pr->d->sym, &pr->s, &pr->len, &pr->cap); }

const char *cg_storage_type(const cg_dialect *d, kiln_dtype t) {
    switch (t) {
    case KILN_F32: return "float";
    case KILN_F16:
    case KILN_BF16: return d->u16;
    case KILN_I32: return d->i32;
    default: return d->u8;
    }
}

void cg_lx_collect_bufs(const sch_program *p, int32_t id, uint8_t *used) {
    if (id < 0) return;
    const lx *x = &p->lx[id];
    if (x->kind == LX_LOAD) used[x->buf] = 1;
    cg_lx_collect_bufs(p, x->a, used);
    cg_lx_collect_bufs(p, x->b, used);
}

/* a float-typed expression text rounded to dtype t (f32: as it is) */
static void out_round(cg_printer *pr, kiln_dtype t, const char *expr) {
    if (t == KILN_F16) OUT("kr16(%s)", expr);
    else if (t == KILN_BF16) OUT("krbf(%s)", expr);
    else OUT("%s", expr);
}

/* value text x of dtype `from` converted to dtype `to` (as dtype_store would) */
static void out_convert(cg_printer *pr, kiln_dtype from, kiln_dtype to, const char *x) {
    const cg_dialect *d = pr->d;
    int from_int = is_intdt(from);
    if (to == KILN_F32) {
        OUT("(float)%s", x);
    } else if (to == KILN_F16 || to == KILN_BF16) {
        OUT("%s((%s)%s)", to == KILN_F16 ? "kd16" : "kdbf", d->wide, x);
    } else if (to == KILN_I32) {
        if (from_int) OUT("(%s < %s ? %s : %s > %s ? %s : %s)", x, d->i32_min, d->i32_min, x, d->i32_max, d->i32_max, x);
        else OUT("kto32((%s)%s)", d->wide, x);
    } else {
        if (from_int) OUT("(%s < 0 ? %s : %s > 255 ? %s : %s)", x, d->zero, x, d->u8_max, x);
        else OUT("ktou8((%s)%s)", d->wide, x);
    }
}

void cg_print_const(cg_printer *pr, kiln_dtype t, double v) {
    const cg_dialect *d = pr->d;
    if (is_intdt(t)) {
        int64_t c = (int64_t)v;
        if (c == INT64_MIN && d->sym->int_min) OUT("%s", d->sym->int_min);
        else OUT("%s%lld%s", d->int_pre, (long long)c, d->int_suf);
    } else if (isnan(v)) {
        OUT("%s", d->nan);
    } else if (isinf(v)) {
        if (v > 0) OUT("%s", d->inf);
        else OUT("(-%s)", d->inf);
    } else {
        OUT("(float)%a", v);
    }
}

static void print_load(cg_printer *pr, const lx *x) {
    kiln_dtype t = pr->p->bufs[x->buf].dtype;
    switch (t) {
    case KILN_F32: OUT("b%d[", x->buf); break;
    case KILN_F16: OUT("kh2f(b%d[", x->buf); break;
    case KILN_BF16: OUT("kbf2f(b%d[", x->buf); break;
    case KILN_I32:
    case KILN_U8: OUT("(%s)b%d[", pr->d->i64, x->buf); break;
    default: /* a block format: its dequantiser, named after it (kdq_<name> in dialect.c) */
        KILN_ASSERT(kiln_dtype_is_block(t));
        OUT("kdq_%s(b%d, ", dtype_table[t].name, x->buf);
        break;
    }
    cg_print_sym(pr, x->s);
    if (t == KILN_F16 || t == KILN_BF16) OUT("])");
    else if (kiln_dtype_is_block(t)) OUT(")");
    else OUT("]");
}

/* `const T t<id> = ` */
static void open_local(cg_printer *pr, const lx *x, int32_t id, int ind) {
    cg_print_indent(pr, ind);
    OUT("const %s t%d = ", ctype(pr->d, x->dtype), id);
}

/* a unary op in the dialect's language: ops.def's spelling column */
static void print_unary(cg_printer *pr, const lx *x, int32_t id, const char *a, int ind) {
    const char *fmt = op_unary[x->op].spell[pr->d->lang];
    KILN_ASSERT(fmt != NULL);
    cg_print_lx(pr, x->a, ind);
    char ex[96];
    snprintf(ex, sizeof ex, fmt, a);
    cg_print_indent(pr, ind);
    OUT("const float t%d = ", id);
    out_round(pr, x->dtype, ex);
    OUT(";\n");
}

static void print_binary(cg_printer *pr, const lx *x, int32_t id, const char *a, const char *b, int ind) {
    const cg_dialect *d = pr->d;
    cg_print_lx(pr, x->a, ind);
    cg_print_lx(pr, x->b, ind);
    open_local(pr, x, id, ind);
    if (!is_intdt(x->dtype)) {
        char ex[128];
        switch (x->op) {
        case OP_ADD: snprintf(ex, sizeof ex, "(%s + %s)", a, b); break;
        case OP_MUL: snprintf(ex, sizeof ex, "(%s * %s)", a, b); break;
        case OP_MOD: snprintf(ex, sizeof ex, "%s(%s, %s)", d->fmod, a, b); break;
        case OP_LT: snprintf(ex, sizeof ex, "(%s < %s ? 1.0f : 0.0f)", a, b); break;
        OP_UNARY_CASES
        case OP_INPUT: case OP_CONST: case OP_IOTA: case OP_SUM: case OP_MAX: case OP_GATHER: case OP_SCATTER:
        case OP_CAST: case OP_CONTIGUOUS: case OP_CONTRACT: case OP_SOFTMAX_ONLINE: case OP_SOFTMAX_CONTRACT:
            KILN_ASSERT(0 && "bad binary op");
        }
        out_round(pr, x->dtype, ex);
    } else {
        const char *w = x->dtype == KILN_I32 ? "kw32" : "kwu8";
        switch (x->op) {
        case OP_ADD: OUT("%s((%s)%s + (%s)%s)", w, d->u64, a, d->u64, b); break;
        case OP_MUL: OUT("%s((%s)%s * (%s)%s)", w, d->u64, a, d->u64, b); break;
        case OP_MOD: OUT("kimod(%s, %s)", a, b); break;
        case OP_LT: OUT("(%s)(%s < %s)", d->i64, a, b); break;
        OP_UNARY_CASES
        case OP_INPUT: case OP_CONST: case OP_IOTA: case OP_SUM: case OP_MAX: case OP_GATHER: case OP_SCATTER:
        case OP_CAST: case OP_CONTIGUOUS: case OP_CONTRACT: case OP_SOFTMAX_ONLINE: case OP_SOFTMAX_CONTRACT:
            KILN_ASSERT(0 && "bad binary op");
        }
    }
    OUT(";\n");
}

/* `T t<id> = 0; if (cond) { <tree sub>; t<id> = t<sub>; }`, cond already
 * printed up to its `{` by the caller */
static void print_guarded(cg_printer *pr, int32_t id, int32_t sub, int ind) {
    cg_print_lx(pr, sub, ind + 2);
    cg_print_indent(pr, ind + 2);
    OUT("t%d = t%d;\n", id, sub);
    cg_print_indent(pr, ind);
    OUT("}\n");
}

/* LET: the index variable g<j> from tree a, checked against its bound (a
 * bad index sets the dialect's error flag and reads row 0); tree b under it */
static void print_let(cg_printer *pr, const lx *x, int32_t id, const char *a, int ind) {
    const cg_dialect *d = pr->d;
    cg_print_lx(pr, x->a, ind);
    const lx *ix = &pr->p->lx[x->a];
    const sym_node *sn = sym_get(pr->p->g->syms, x->s);
    const sch_var *sv = sch_var_lookup(pr->p, (uint32_t)sn->c);
    KILN_ASSERT(sv && sv->role == SCH_VAR_LET);
    char var[32];
    snprintf(var, sizeof var, "g%d", sv->index);
    cg_print_indent(pr, ind);
    if (is_intdt(ix->dtype)) OUT("%s %s = %s;\n", d->i64, var, a);
    else OUT("%s %s = (%s >= 0.0f && %s < 9.0e18f) ? (%s)%s : %s;\n", d->i64, var, a, a, d->i64, a, d->minus_one);
    cg_print_indent(pr, ind);
    OUT("const int %s_ok = %s >= 0 && %s < ", var, var, var);
    cg_print_sym(pr, x->s2);
    OUT(";\n");
    cg_print_indent(pr, ind);
    OUT("if (!%s_ok) { %s = 1; %s = 0; }\n", var, d->err, var);
    cg_print_indent(pr, ind);
    OUT("%s t%d = 0;\n", ctype(d, x->dtype), id);
    cg_print_indent(pr, ind);
    OUT("if (%s_ok) {\n", var);
    print_guarded(pr, id, x->b, ind);
}

void cg_print_lx(cg_printer *pr, int32_t id, int ind) {
    const lx *x = &pr->p->lx[id];
    char a[32] = "", b[32] = "";
    if (x->a >= 0) snprintf(a, sizeof a, "t%d", x->a);
    if (x->b >= 0) snprintf(b, sizeof b, "t%d", x->b);
    switch (x->kind) {
    case LX_CONST:
        open_local(pr, x, id, ind);
        cg_print_const(pr, x->dtype, x->value);
        OUT(";\n");
        return;
    case LX_LOAD:
        open_local(pr, x, id, ind);
        print_load(pr, x);
        OUT(";\n");
        return;
    case LX_INDEX: {
        cg_print_indent(pr, ind);
        OUT("const %s t%d_i = ", pr->d->i64, id);
        cg_print_sym(pr, x->s);
        OUT(";\n");
        open_local(pr, x, id, ind);
        char nm[32];
        snprintf(nm, sizeof nm, "t%d_i", id);
        out_convert(pr, KILN_I32, x->dtype, nm);
        OUT(";\n");
        return;
    }
    case LX_UNARY: print_unary(pr, x, id, a, ind); return;
    case LX_BINARY: print_binary(pr, x, id, a, b, ind); return;
    case LX_CAST: {
        cg_print_lx(pr, x->a, ind);
        open_local(pr, x, id, ind);
        kiln_dtype from = pr->p->lx[x->a].dtype;
        if (kiln_dtype_is_block(from)) from = KILN_F32;
        out_convert(pr, from, x->dtype, a);
        OUT(";\n");
        return;
    }
    case LX_GUARD:
        cg_print_indent(pr, ind);
        OUT("%s t%d = 0;\n", ctype(pr->d, x->dtype), id);
        cg_print_indent(pr, ind);
        OUT("if (");
        cg_print_sym(pr, x->s);
        OUT(") {\n");
        print_guarded(pr, id, x->a, ind);
        return;
    case LX_LET: print_let(pr, x, id, a, ind); return;
    case LX_STAGE:
        cg_print_indent(pr, ind);
        OUT("const %s t%d = s%d;\n", ctype(pr->d, x->dtype), id, x->stage);
        return;
    }
}

void cg_print_reduce(cg_printer *pr, const cg_reduction *r, int ind) {
    if (pr->reduce && pr->reduce(pr, r, ind)) return;
    const cg_dialect *d = pr->d;
    kiln_dtype vt = pr->p->lx[r->expr].dtype;
    int32_t t = r->expr;
    char rn[32];
    sch_rvar_name(pr->p, r->rvar, rn, sizeof rn);
    int is_float = !is_intdt(vt), is_sum = r->op == OP_SUM;
    cg_print_indent(pr, ind);
    OUT("%s %s;\n", ctype(d, vt), r->res);
    cg_print_indent(pr, ind);
    if (is_sum && is_float) OUT("{ %s acc = %s;\n", d->wide, d->wide_zero);
    else if (is_sum) OUT("{ %s acc = 0;\n", d->u64);
    else if (is_float) OUT("{ float acc = -%s;\n", d->inf);
    else OUT("{ %s acc = %s;\n", d->i64, vt == KILN_I32 ? d->i32_min : d->zero);
    cg_print_indent(pr, ind);
    OUT("  const %s rn = ", d->i64);
    cg_print_sym(pr, r->rdim);
    OUT(";\n");
    /* C: a short constant r unrolled (its window offsets fold, as on the
     * vector path: emit_c.c) */
    int64_t rconst = 0;
    if (d == &cg_dialect_c && sym_is_const(pr->p->g->syms, r->rdim, &rconst) && rconst <= 16) {
        cg_print_indent(pr, ind);
        OUT("  _Pragma(\"GCC unroll 16\")\n");
    }
    cg_print_indent(pr, ind);
    OUT("  for (%s %s = 0; %s < rn; %s++) {\n", d->i64, rn, rn, rn);
    cg_print_lx(pr, t, ind + 4);
    cg_print_indent(pr, ind + 4);
    if (is_sum) OUT("acc += (%s)t%d;\n", is_float ? d->wide : d->u64, t);
    else if (is_float) OUT("if (t%d != t%d) { acc = t%d; break; }\n%*sif (t%d > acc) acc = t%d;\n", t, t, t, ind + 4, "", t, t);
    else OUT("if (t%d > acc) acc = t%d;\n", t, t);
    cg_print_indent(pr, ind);
    OUT("  }\n");
    cg_print_indent(pr, ind);
    if (is_sum && is_float)
        OUT("  %s = %s; }\n", r->res, vt == KILN_F16 ? "kd16(acc)" : vt == KILN_BF16 ? "kdbf(acc)" : "(float)acc");
    else if (is_sum) OUT("  %s = %s(acc); }\n", r->res, vt == KILN_I32 ? "kw32" : "kwu8");
    else OUT("  %s = acc; }\n", r->res);
}

void cg_print_stages(cg_printer *pr, const sch_kernel *k, int row, int ind) {
    for (int32_t i = 0; i < k->nstages; i++) {
        const sch_stage *st = &k->stages[i];
        if (st->row != row) continue;
        char res[32];
        snprintf(res, sizeof res, "s%d", (int)i);
        if (pr->d->stage_comments) {
            cg_print_indent(pr, ind);
            OUT("/* s%d: fused %s#%d */\n", (int)i, op_table[pr->p->g->nodes[st->node].op].name, st->node);
        }
        cg_reduction r = {st->red_op, st->rdim, st->rvar, st->expr, res, row ? (int)i : -1};
        cg_print_reduce(pr, &r, ind);
    }
}

static void out_store(cg_printer *pr, kiln_dtype t, const char *val) {
    switch (t) {
    case KILN_F32: OUT("%s", val); break;
    case KILN_F16: OUT("kf2h(%s)", val); break;
    case KILN_BF16: OUT("kf2bf(%s)", val); break;
    case KILN_I32: OUT("(%s)%s", pr->d->i32, val); break;
    default: OUT("(%s)%s", pr->d->u8, val); break;
    }
}

void cg_print_point(cg_printer *pr, const sch_kernel *k, int ind) {
    const sch_program *p = pr->p;
    kiln_dtype ot = p->bufs[k->out_buf].dtype;
    cg_print_stages(pr, k, 0, ind);
    char val[32];
    if (k->kind == SCH_K_REDUCE) {
        cg_reduction r = {k->red_op, k->rdim, k->rvar, k->expr, "red", -1};
        cg_print_reduce(pr, &r, ind);
        snprintf(val, sizeof val, "red");
    } else {
        cg_print_lx(pr, k->expr, ind);
        snprintf(val, sizeof val, "t%d", k->expr);
    }
    cg_print_indent(pr, ind);
    if (k->kind == SCH_K_SCATTER) {
        const sym_node *sn = sym_get(p->g->syms, p->lx[k->expr].s);
        const sch_var *sv = sch_var_lookup(p, (uint32_t)sn->c);
        OUT("if (g%d_ok) out[", sv->index);
    } else {
        OUT("out[");
    }
    cg_print_sym(pr, k->store_off);
    OUT("] = ");
    out_store(pr, ot, val);
    OUT(";\n");
}
