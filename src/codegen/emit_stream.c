/* emit_stream.c — the C of a stream kernel (src/sched/stream.c): per row r,
 * one pass over the stream axis j keeps the running max m of the logits x,
 * the sum l of exp2((x - m) c) and the products acc[n] of those weights with
 * the values v[j, n], rescaling l and acc by exp2((m_old - m_new) c) when the
 * max grows; then out[r, n] = acc[n] / l. The softmax is never stored.
 *
 * Numerics against the definition (CONTRACT(SOFTMAX_ONLINE(x, c), v), as the
 * reference interpreter evaluates it): the same f32 differences x - m and
 * products with c, exp2f; weights and products accumulated in f32 (a
 * contiguous row of values as a plain loop the C compiler vectorises); the running
 * max adds one rounding of the rescale factor per growth of the max, and the
 * division comes last instead of per weight, so results agree to f32
 * accumulation tolerance, not bit for bit. Special values follow the
 * definition: a row of -inf (or NaN) logits gives NaN, a fully masked row
 * (every logit the same large negative value) uniform weights.
 *
 * The fused stages (the scores' dot product inside x) print through the C
 * emitter's printer, so they take its vector path where their loads allow.
 */
#include "emit_stream.h"

#include <stdio.h>
#include <stdlib.h>

#include "base.h"

#define OUT(...) sch_appendf(&pr->s, &pr->len, &pr->cap, __VA_ARGS__)

static void collect(const sch_program *p, const sch_kernel *k, uint8_t *used) {
    cg_lx_collect_bufs(p, k->expr, used);
    for (int32_t i = 0; i < k->nstages; i++) cg_lx_collect_bufs(p, k->stages[i].expr, used);
}

static void declare_bufs(cg_printer *pr, const sch_kernel *k) {
    const sch_program *p = pr->p;
    uint8_t *used = kiln_xcalloc((size_t)p->nbufs + 1, 1);
    collect(p, k, used);
    for (int32_t b = 0; b < p->nbufs; b++) {
        if (!used[b] || b == k->out_buf) continue;
        const char *t = cg_storage_type(pr->d, p->bufs[b].dtype);
        OUT("  const %s *restrict b%d = (const %s *)B[%d];\n", t, b, t, b);
    }
    free(used);
    OUT("  float *restrict out = (float *)B[%d];\n", k->out_buf);
}

void cg_emit_stream(cg_printer *pr, int32_t kid, const char *name) {
    const sch_program *p = pr->p;
    const sch_kernel *k = &p->kernels[kid];
    const lx *e = &p->lx[k->expr];
    int n = k->ndim, j = n - 1;
    int64_t nval = 0;
    KILN_ASSERT(k->kind == SCH_K_STREAM && n >= 1 && sym_is_const(p->g->syms, k->rdim, &nval) && nval >= 1);
    char c[48];
    snprintf(c, sizeof c, "%.9gf", k->stream_c);
    OUT("int %s(void *const *B, const int64_t *v, int64_t lo, int64_t hi, int64_t chunk, int64_t flags) {\n", name);
    OUT("  int kerr = 0; (void)v; (void)chunk; (void)flags;\n");
    declare_bufs(pr, k);
    for (int d = 0; d < n; d++) {
        OUT("  const int64_t d%d = ", d);
        cg_print_sym(pr, k->dim[d]);
        OUT(";\n");
    }
    OUT("  float kacc[%lld];\n", (long long)nval);
    OUT("  for (int64_t w = lo; w < hi; w++) {\n");
    OUT("    int64_t o = w;\n");
    for (int d = n - 2; d >= 0; d--) {
        if (d > 0) OUT("    const int64_t i%d = o %% d%d; o /= d%d;\n", d, d, d);
        else OUT("    const int64_t i0 = o;\n");
    }
    OUT("    (void)o;\n");
    cg_print_stages(pr, k, 1, 4);
    OUT("    float km = -%s, kl = 0;\n", pr->d->inf);
    OUT("    for (int64_t q = 0; q < %lld; q++) kacc[q] = 0;\n", (long long)nval);
    OUT("    for (int64_t i%d = 0; i%d < d%d; i%d++) {\n", j, j, j, j);
    cg_print_stages(pr, k, 0, 6);
    cg_print_lx(pr, e->a, 6);
    OUT("      const float kx = t%d;\n", e->a);
    OUT("      if (kx > km) {\n");
    OUT("        const float ka = %s((km - kx) * %s);\n", pr->d->exp2, c);
    OUT("        kl *= ka;\n");
    OUT("        for (int64_t q = 0; q < %lld; q++) kacc[q] *= ka;\n", (long long)nval);
    OUT("        km = kx;\n");
    OUT("      }\n");
    OUT("      const float kp = %s((kx - km) * %s);\n", pr->d->exp2, c);
    OUT("      kl += kp;\n");
    const lx *vl = &p->lx[e->b];
    sym_pool *sp = p->g->syms;
    int64_t step = -1;
    if (vl->kind == LX_LOAD && vl->dtype == KILN_F32 && p->bufs[vl->buf].dtype == KILN_F32)
        sym_is_const(sp, sym_step(sp, vl->s, k->rvar), &step);
    if (step == 1) {
        /* the values' row is contiguous: a plain loop the C compiler vectorises */
        OUT("      const float *restrict kvr = &b%d[", vl->buf);
        cg_print_sym(pr, sym_subst_var(sp, vl->s, k->rvar, sym_const(sp, 0)));
        OUT("];\n");
        OUT("      for (int64_t q = 0; q < %lld; q++) kacc[q] += kp * kvr[q];\n", (long long)nval);
    } else {
        OUT("      for (int64_t i%d = 0; i%d < %lld; i%d++) {\n", n, n, (long long)nval, n);
        cg_print_lx(pr, e->b, 8);
        OUT("        kacc[i%d] += kp * t%d;\n", n, e->b);
        OUT("      }\n");
    }
    OUT("    }\n");
    OUT("    const float kinv = 1.0f / kl;\n");
    OUT("    for (int64_t i%d = 0; i%d < %lld; i%d++) out[", n, n, (long long)nval, n);
    cg_print_sym(pr, k->store_off);
    OUT("] = kacc[i%d] * kinv;\n", n);
    OUT("  }\n");
    OUT("  return kerr;\n}\n\n");
}
