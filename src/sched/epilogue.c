/* epilogue.c — which elementwise kernels run as their contraction's
 * epilogue.
 *
 * A contraction's result is nearly always read next by one elementwise
 * kernel (a convolution's bias and Relu, a batch norm, a residual add):
 * that kernel reads every element the contraction just wrote, once, at the
 * element's own coordinates. Run as a kernel of its own it waits for the
 * whole product and reads the result back from memory; run inside the
 * contraction's work item, right after the item's block is written, it
 * reads the block from cache and needs no launch of its own
 * (emit_contract.c calls it per item, cpu_run.c then skips its launch).
 *
 * Kernel e = k + 1 becomes kernel k's epilogue (kernels[k].epilogue = e,
 * kernels[e].in_host = 1) when:
 *  - k is a contraction, e a MAP or a REDUCE over a constant axis of at
 *    most EPI_MAX_R (a Relu is a MAX over 2) without fused stages, not a
 *    pack, with k's domain (the same extents, dimension for dimension);
 *  - k's output is an intermediate that no kernel other than e reads, and
 *    every read of it in e is at k's own store offset (the same
 *    coordinates): so e's value at a point needs only that point of k's
 *    output, and a block of points only that block;
 *  - e's other operands exist before k runs (e follows k directly: what
 *    it reads besides k's output was made by an earlier kernel).
 * The same for a contraction's pack (pack.c: a convolution's windows of
 * its input, written densely, r first): kernels[k - 1] becomes kernel k's
 * prologue (kernels[k].prologue, kernels[k - 1].in_next) when B(r, n) is
 * the pack's element r N + n, n over the pack's other dimensions and k
 * without batch dimensions; each work item then packs the columns
 * [n0, n1) it reads, all of r, just before its schedule reads them, so
 * the pack's lines are in the core's cache rather than written to memory
 * and read back (DenseNet-121's 3x3 packs are 14.5 MB each).
 * Where e's store is the same element it reads (both row-major over the
 * one domain) and its output an intermediate, e writes k's buffer in place:
 * its own buffer goes, its readers read k's, and the block stays the one
 * in cache (SqueezeNet at 2 threads, Intel Xeon: a separate output buffer
 * saved 0.08 of 3.0 ms, in place ...).
 * The compile path marks epilogues only where contractions are the AVX-512
 * micro-kernels (exec.c); where one is not emitted as such (a search's
 * candidate, emitted without it), e runs as a kernel of its own, in place
 * or not. e's output is live from k on (run.c's liveness), since k's items
 * write it.
 */
#include <stdlib.h>

#include "base.h"
#include "loop.h"

#define EPI_MAX_R 16

/* offset s with the loop variables of unit extent at 0 (a view may drop
 * them where the store keeps them: the canonical forms then differ) */
static sym_id unit_vars_zero(const sch_program *p, const sch_kernel *E, sym_id s) {
    sym_pool *sp = p->g->syms;
    for (int d = 0; d < E->ndim; d++) {
        int64_t n = 0;
        if (sym_is_const(sp, E->dim[d], &n) && n == 1) s = sym_subst_var(sp, s, E->var[d], sym_const(sp, 0));
    }
    return s;
}

/* 1 when every read of buffer b in tree id (of kernel E) is at offset `at` */
static int reads_only_at(const sch_program *p, const sch_kernel *E, int32_t id, int32_t b, sym_id at) {
    if (id < 0) return 1;
    const lx *x = &p->lx[id];
    if (x->kind == LX_LOAD && x->buf == b && unit_vars_zero(p, E, x->s) != at) return 0;
    return reads_only_at(p, E, x->a, b, at) && reads_only_at(p, E, x->b, b, at);
}


static int can_follow(const sch_program *p, int32_t k) {
    const sch_kernel *K = &p->kernels[k], *E = &p->kernels[k + 1];
    if (!K->contract || K->kind != SCH_K_REDUCE || K->ndim < 1) return 0;
    if ((E->kind != SCH_K_MAP && E->kind != SCH_K_REDUCE) || E->nstages > 0 || E->pack || E->contract || E->in_host)
        return 0;
    sym_pool *sp = p->g->syms;
    int64_t rn = 0;
    if (E->kind == SCH_K_REDUCE && (!sym_is_const(sp, E->rdim, &rn) || rn > EPI_MAX_R)) return 0;
    if (E->ndim != K->ndim) return 0;
    for (int d = 0; d < K->ndim; d++)
        if (E->dim[d] != K->dim[d]) return 0;
    int32_t b = K->out_buf;
    if (p->bufs[b].kind != SCH_BUF_NODE || E->out_buf == b || !sch_kernel_reads(p, E, b)) return 0;
    for (int32_t j = 0; j < p->nkernels; j++)
        if (j != k && j != k + 1 && sch_kernel_reads(p, &p->kernels[j], b)) return 0;
    /* k's store offset at e's coordinates */
    sym_id at = K->store_off;
    for (int d = 0; d < K->ndim; d++) at = sym_subst_var(sp, at, K->var[d], E->var[d]);
    return reads_only_at(p, E, E->expr, b, unit_vars_zero(p, E, at));
}

static void rename_loads(sch_program *p, int32_t id, int32_t from, int32_t to) {
    if (id < 0) return;
    lx *x = &p->lx[id];
    if (x->kind == LX_LOAD && x->buf == from) x->buf = to;
    rename_loads(p, x->a, from, to);
    rename_loads(p, x->b, from, to);
}

/* e writes k's buffer in place (each point reads its own element of it,
 * then stores there): e's buffer is dropped and its readers read k's */
static void write_in_place(sch_program *p, int32_t k) {
    sch_kernel *K = &p->kernels[k], *E = &p->kernels[k + 1];
    int32_t from = E->out_buf, to = K->out_buf;
    for (int32_t j = 0; j < p->nkernels; j++) {
        sch_kernel *J = &p->kernels[j];
        if (J->src_buf == from) J->src_buf = to;
        if (J->contract && J->contract->a_buf == from) J->contract->a_buf = to;
        if (J->contract && J->contract->b_buf == from) J->contract->b_buf = to;
        rename_loads(p, J->expr, from, to);
        for (int32_t i = 0; i < J->nstages; i++) rename_loads(p, J->stages[i].expr, from, to);
    }
    for (int32_t n = 0; n < p->g->nnodes; n++) {
        if (p->node_buf[n] == from) p->node_buf[n] = to;
        if (p->state_final && p->state_final[n] == from) p->state_final[n] = to;
    }
    E->out_buf = to;
    p->bufs[to].node = p->bufs[from].node; /* the buffer's final value */
    p->bufs[from].node = -1; /* nothing reads or writes it: run.c's liveness gives it no place */
}

/* kernel k's B is written by kernels[k - 1], a pack with r first (pack.c):
 * B(r, n) = pack[r * N + n], n the row-major index over the pack's other
 * dimensions, k's batch dimensions all of extent 1 */
static int pack_before(const sch_program *p, int32_t k) {
    if (k < 1) return 0;
    const sch_kernel *K = &p->kernels[k], *P = &p->kernels[k - 1];
    const sch_contract *c = K->contract;
    if (!c || !P->pack || P->kind != SCH_K_MAP || P->nstages > 0 || P->in_host || P->out_buf != c->b_buf ||
        c->b_kstride == SYM_NONE || P->ndim < 2 || P->dim[0] != K->rdim)
        return 0;
    sym_pool *sp = p->g->syms;
    int64_t one = 0;
    for (int d = 0; d < K->ndim; d++)
        if (d != c->mdim && d != c->ndim && !(sym_is_const(sp, K->dim[d], &one) && one == 1)) return 0;
    sym_id n = sym_const(sp, 1);
    for (int d = 1; d < P->ndim; d++) n = sym_mul(sp, n, P->dim[d]);
    if (n != K->dim[c->ndim] || c->b_kstride != n) return 0;
    for (int32_t j = 0; j < p->nkernels; j++) /* the pack is read by k alone */
        if (j != k && j != k - 1 && sch_kernel_reads(p, &p->kernels[j], P->out_buf)) return 0;
    return unit_vars_zero(p, K, c->b_base) == K->var[c->ndim];
}

int sch_mark_epilogues(sch_program *p) {
    int n = 0;
    for (int32_t k = 1; k < p->nkernels; k++) {
        if (!pack_before(p, k)) continue;
        p->kernels[k].prologue = 1;
        p->kernels[k - 1].in_next = 1;
        n++;
    }
    for (int32_t k = 0; k + 1 < p->nkernels; k++) {
        if (!can_follow(p, k)) continue;
        sch_kernel *K = &p->kernels[k], *E = &p->kernels[k + 1];
        K->epilogue = k + 1;
        E->in_host = 1;
        /* in place when e's own store is that same element (both row-major
         * over one domain) and its buffer an intermediate of k's dtype */
        sym_id at = K->store_off;
        for (int d = 0; d < K->ndim; d++) at = sym_subst_var(p->g->syms, at, K->var[d], E->var[d]);
        const sch_buf *eb = &p->bufs[E->out_buf], *kb = &p->bufs[K->out_buf];
        if (eb->kind == SCH_BUF_NODE && eb->dtype == kb->dtype && eb->numel == kb->numel &&
            unit_vars_zero(p, E, E->store_off) == unit_vars_zero(p, E, at))
            write_in_place(p, k);
        n++;
    }
    return n;
}
