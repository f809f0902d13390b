/* scatter.c — which SCATTER kernels may run in parallel.
 *
 * A SCATTER kernel runs serially by default: two of its domain points may
 * write the same destination element, and then the later one wins, so the
 * order matters. It may run in parallel when every domain point writes an
 * element of its own. That is proved here for one common form, the KV cache
 * write: the row index (the LET's value) is a pure function of the loop
 * indices (an INDEX, under integer casts: no load, so nothing at run time
 * can make two rows equal), and the destination offset with that index
 * substituted is an injective affine map of the loop variables:
 *
 *   off = c0 + sum_d c_d * i_d,   0 <= i_d < n_d,
 *
 * injective when, with the dimensions sorted by |c_d| (those of extent 1
 * left out), each |c_d| is at least the span sum_{e before d} |c_e| (n_e - 1)
 * of the ones before it plus one: mixed radix, as a row-major layout is.
 * Extents must be constants except the last (largest-stride) one.
 * And nothing the kernel reads may be the buffer it writes (another
 * point's element could be read before or after it is written). Anything
 * else (a row index read from memory, a non-affine offset) is left serial.
 */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "loop.h"

/* the sym of an integer INDEX under integer casts, or SYM_NONE */
static sym_id index_value(const sch_program *p, int32_t id) {
    const lx *x = &p->lx[id];
    if (x->dtype != KILN_I32) return SYM_NONE;
    if (x->kind == LX_INDEX) return x->s;
    if (x->kind == LX_CAST) return index_value(p, x->a);
    return SYM_NONE;
}

/* whether tree id reads buffer b */
static int reads(const sch_program *p, int32_t id, int32_t b) {
    if (id < 0) return 0;
    const lx *x = &p->lx[id];
    if (x->kind == LX_LOAD && x->buf == b) return 1;
    switch (x->kind) {
    case LX_UNARY:
    case LX_CAST:
    case LX_GUARD: return reads(p, x->a, b);
    case LX_BINARY:
    case LX_LET: return reads(p, x->a, b) || reads(p, x->b, b);
    default: return 0;
    }
}

int sch_scatter_disjoint(const sch_program *p, const sch_kernel *k) {
    if (k->kind != SCH_K_SCATTER || k->ndim < 1) return 0;
    const lx *let = &p->lx[k->expr];
    if (let->kind != LX_LET || reads(p, k->expr, k->out_buf)) return 0;
    for (int32_t i = 0; i < k->nstages; i++)
        if (reads(p, k->stages[i].expr, k->out_buf)) return 0;
    sym_id row = index_value(p, let->a);
    if (row == SYM_NONE) return 0;
    sym_pool *sp = p->g->syms;
    sym_id off = sym_subst_var(sp, k->store_off, let->s, row);
    /* the coefficient of each loop variable: off(i_d + 1) - off(i_d) */
    int64_t coef[KILN_MAX_DIMS], ext[KILN_MAX_DIMS];
    int ok = 1, nd = 0;
    for (int d = 0; d < k->ndim && ok; d++) {
        int64_t c, n = -1;
        ok = sym_is_const(sp, sym_step(sp, off, k->var[d]), &c);
        if (!ok) break;
        if (!sym_is_const(sp, k->dim[d], &n)) n = -1; /* symbolic: only the largest stride may be */
        if (n == 1) continue;
        if (c == 0) ok = 0; /* the dimension's points would share an element */
        coef[nd] = c < 0 ? -c : c;
        ext[nd] = n;
        nd++;
    }
    if (!ok) return 0;
    /* sort by stride, then check the mixed-radix condition */
    for (int i = 1; i < nd; i++)
        for (int j = i; j > 0 && coef[j] < coef[j - 1]; j--) {
            int64_t t = coef[j];
            coef[j] = coef[j - 1];
            coef[j - 1] = t;
            t = ext[j];
            ext[j] = ext[j - 1];
            ext[j - 1] = t;
        }
    int64_t span = 0; /* the largest offset the dimensions so far reach */
    for (int i = 0; i < nd; i++) {
        if (coef[i] <= span) return 0;
        if (i == nd - 1) break;
        if (ext[i] < 0 || ext[i] > (INT64_MAX / 4) / coef[i]) return 0;
        span += coef[i] * (ext[i] - 1);
    }
    return 1;
}
