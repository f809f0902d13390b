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
 *
 * Masked key blocks are skipped (src/sched/stream_mask.c): the keys go in
 * blocks of KILN_STREAM_KB; before a block, the index comparisons in x are
 * evaluated at its first and last key; where none changes and their outcome
 * makes x a constant, the block is not computed, only its constant
 * remembered (kskip). After the pass a row whose skipped weight
 * exp2((kskip - km) c) is not exactly 0 in f32 (no visible key at all) runs
 * again without skipping (kfull), so results are those of the full pass.
 */
#include "emit_stream.h"

#include <stdio.h>
#include <stdlib.h>

#include "base.h"
#include "stream_mask.h"

#define OUT(...) sch_appendf(&pr->s, &pr->len, &pr->cap, __VA_ARGS__)

static void collect(const sch_program *p, const sch_kernel *k, uint8_t *used) {
    cg_lx_collect_bufs(p, k->expr, used);
    for (int32_t i = 0; i < k->nstages; i++) cg_lx_collect_bufs(p, k->stages[i].expr, used);
}

void cg_stream_declare_bufs(cg_printer *pr, const sch_kernel *k) {
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

/* the outcomes of the mask's comparisons under which the logits are a constant, and that constant */
void cg_stream_print_mask_table(cg_printer *pr, const sch_stream_mask *m) {
    int n = 1 << m->nleaves;
    OUT("    static const unsigned char kmconst[%d] = {", n);
    for (int a = 0; a < n; a++) OUT("%s%d", a ? ", " : "", m->constant[a]);
    OUT("};\n    static const float kmval[%d] = {", n);
    for (int a = 0; a < n; a++) OUT("%s(float)%.9g", a ? ", " : "", (double)m->value[a]);
    OUT("};\n");
}

/* each comparison at the block's first and last key; a block where none
 * changes and the outcome makes the logits constant is skipped */
static void print_skip_test(cg_printer *pr, const sch_kernel *k, const sch_stream_mask *m) {
    int j = k->ndim - 1;
    OUT("    if (!kfull) {\n");
    OUT("      unsigned kb0 = 0, kb1 = 0;\n");
    for (int e = 0; e < 2; e++) {
        OUT("      {\n        const int64_t i%d = %s;\n", j, e ? "kje - 1" : "kjb");
        for (int q = 0; q < m->nleaves; q++) {
            cg_print_lx(pr, m->leaf[q], 8);
            OUT("        kb%d |= (t%d != 0) << %d;\n", e, m->leaf[q], q);
        }
        OUT("      }\n");
    }
    OUT("      if (kb0 == kb1 && kmconst[kb0]) {\n");
    OUT("        if (kmval[kb0] > kskip) kskip = kmval[kb0];\n");
    OUT("        nskip++;\n        continue;\n      }\n    }\n");
}

void cg_emit_stream(cg_printer *pr, int32_t kid, const char *name) {
    const sch_program *p = pr->p;
    const sch_kernel *k = &p->kernels[kid];
    const lx *e = &p->lx[k->expr];
    int n = k->ndim, j = n - 1;
    int64_t nval = 0;
    KILN_ASSERT(k->kind == SCH_K_STREAM && n >= 1 && sym_is_const(p->g->syms, k->rdim, &nval) && nval >= 1);
    sch_stream_tile tile;
    if (sch_stream_tile_of(p, k, &tile)) {
        cg_emit_stream_tile(pr, kid, name, &tile);
        return;
    }
    char c[48];
    snprintf(c, sizeof c, "%.9gf", k->stream_c);
    OUT("int %s(void *const *B, const int64_t *v, int64_t lo, int64_t hi, int64_t chunk, int64_t flags) {\n", name);
    OUT("  int kerr = 0; (void)v; (void)chunk; (void)flags;\n");
    cg_stream_declare_bufs(pr, k);
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
    sch_stream_mask mk;
    int skip = sch_stream_mask_analyse(p, k, &mk);
    if (skip) cg_stream_print_mask_table(pr, &mk);
    OUT("    float km, kl;\n");
    if (skip) OUT("    int kfull = 0;\n  kagain:;\n    float kskip = -%s; int64_t nskip = 0;\n", pr->d->inf);
    OUT("    km = -%s, kl = 0;\n", pr->d->inf);
    OUT("    for (int64_t q = 0; q < %lld; q++) kacc[q] = 0;\n", (long long)nval);
    OUT("    for (int64_t kjb = 0; kjb < d%d; kjb += %d) {\n", j, KILN_STREAM_KB);
    OUT("    const int64_t kje = kjb + %d < d%d ? kjb + %d : d%d;\n", KILN_STREAM_KB, j, KILN_STREAM_KB, j);
    if (skip) print_skip_test(pr, k, &mk);
    OUT("    for (int64_t i%d = kjb; i%d < kje; i%d++) {\n", j, j, j);
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
    OUT("    }\n");
    if (skip) {
        OUT("    if (nskip && !kfull && !(%s((kskip - km) * %s) == 0.0f)) { kfull = 1; goto kagain; }\n", pr->d->exp2, c);
    }
    OUT("    const float kinv = 1.0f / kl;\n");
    OUT("    for (int64_t i%d = 0; i%d < %lld; i%d++) out[", n, n, (long long)nval, n);
    cg_print_sym(pr, k->store_off);
    OUT("] = kacc[i%d] * kinv;\n", n);
    OUT("  }\n");
    OUT("  return kerr;\n}\n\n");
}
