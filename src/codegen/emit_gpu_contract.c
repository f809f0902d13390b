/* emit_gpu_contract.c — the GPU printer's contraction kernels: a tiled
 * SIMT form for both dialects and tensor-core mma.sync forms for CUDA (see
 * cg_gpu_cform in emit_gpu.h for what each computes).
 *
 * A contraction kernel (contract.c) computes out[store_off] = sum over r of
 * a * b, where the operand a varies with the m loop (c->mdim, -1: M = 1) and
 * not with n, b with n (c->ndim) and not with m, and every other loop is a
 * batch loop. The operands are printed by the generic walker
 * (cg_print_lx) with the loop variables they use in scope, so any load
 * the generic kernel could read — block formats dequantised, casts — is
 * read the same way into the tiles. Work-group g covers batch point
 * g / (Mb * Nb), m block (g / Nb) % Mb and n block g % Nb (Mb, Nb: the
 * block counts); outside the domain (a partial block, r past the end) the
 * tiles hold zeros and nothing is stored.
 *
 * Invariant: every work item of a group reaches every barrier (no early
 * return before the last one), and a group's shape is fixed by the
 * schedule: the runtime must launch exactly cg_gpu_contract_threads items
 * per group.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "emit_gpu_internal.h"

/* ---- schedules ---------------------------------------------------------------- */

cg_gpu_contract_sched cg_gpu_contract_default(void) {
    cg_gpu_contract_sched s;
    memset(&s, 0, sizeof s);
    s.form = CG_GPU_CF_TILE;
    s.arith = CG_GPU_CA_BF16;
    s.bm = s.bn = 64;
    s.bk = 16;
    s.tm = s.tn = 4;
    s.vw = 1;
    return s;
}

static const char *form_names[] = {"generic", "tile", "mma"};
static const char *arith_names[] = {"bf16", "f16", "i8"};

void cg_gpu_contract_print(const cg_gpu_contract_sched *s, char *buf, size_t cap) {
    if (s->form == CG_GPU_CF_TILE)
        snprintf(buf, cap, "form=tile bm=%d bn=%d bk=%d tm=%d tn=%d%s", s->bm, s->bn, s->bk, s->tm, s->tn,
                 s->vw == 4 ? " vw=4" : "");
    else if (s->form == CG_GPU_CF_MMA) snprintf(buf, cap, "form=mma arith=%s", arith_names[s->arith]);
    else snprintf(buf, cap, "form=generic");
}

int cg_gpu_contract_threads(const cg_gpu_contract_sched *s) {
    if (s->form == CG_GPU_CF_MMA) return CG_GPU_MMA_THREADS;
    if (s->form == CG_GPU_CF_TILE) return (s->bm / s->tm) * (s->bn / s->tn);
    return 1;
}
int cg_gpu_contract_block_m(const cg_gpu_contract_sched *s) {
    return s->form == CG_GPU_CF_MMA ? CG_GPU_MMA_BM : s->bm;
}
int cg_gpu_contract_block_n(const cg_gpu_contract_sched *s) {
    return s->form == CG_GPU_CF_MMA ? CG_GPU_MMA_BN : s->bn;
}

void cg_gpu_contract_entry(const cg_gpu_contract_sched *s, int32_t k, char *buf, size_t cap) {
    if (s->form == CG_GPU_CF_TILE) snprintf(buf, cap, "kiln_k%d_tile", (int)k);
    else if (s->form == CG_GPU_CF_MMA) snprintf(buf, cap, "kiln_k%d_mma_%s", (int)k, arith_names[s->arith]);
    else snprintf(buf, cap, "kiln_k%d", (int)k);
}

static int name_index(const char *v, size_t n, const char *const *names, int count) {
    for (int i = 0; i < count; i++)
        if (strlen(names[i]) == n && strncmp(v, names[i], n) == 0) return i;
    return -1;
}

int cg_gpu_contract_parse(const char *text, cg_gpu_contract_sched *s, char *err, size_t errcap) {
    cg_gpu_contract_sched r = cg_gpu_contract_default();
    const char *q = text;
    while (*q) {
        while (*q == ' ' || *q == '\t' || *q == ',') q++;
        if (!*q) break;
        const char *eq = strchr(q, '=');
        size_t tok = strcspn(q, " \t,");
        if (!eq || (size_t)(eq - q) >= tok) {
            snprintf(err, errcap, "GPU contraction schedule \"%s\": expected key=value at \"%.*s\"", text, (int)tok, q);
            return 0;
        }
        size_t klen = (size_t)(eq - q);
        const char *v = eq + 1;
        size_t vlen = tok - klen - 1;
        if (klen == 4 && strncmp(q, "form", 4) == 0) {
            int f = name_index(v, vlen, form_names, 3);
            if (f < 0) {
                snprintf(err, errcap, "GPU contraction schedule: form must be generic, tile or mma");
                return 0;
            }
            r.form = (cg_gpu_cform)f;
        } else if (klen == 5 && strncmp(q, "arith", 5) == 0) {
            int a = name_index(v, vlen, arith_names, 3);
            if (a < 0) {
                snprintf(err, errcap, "GPU contraction schedule: arith must be bf16, f16 or i8");
                return 0;
            }
            r.arith = (cg_gpu_carith)a;
        } else {
            int *dst = NULL;
            if (klen == 2 && strncmp(q, "bm", 2) == 0) dst = &r.bm;
            else if (klen == 2 && strncmp(q, "bn", 2) == 0) dst = &r.bn;
            else if (klen == 2 && strncmp(q, "bk", 2) == 0) dst = &r.bk;
            else if (klen == 2 && strncmp(q, "tm", 2) == 0) dst = &r.tm;
            else if (klen == 2 && strncmp(q, "tn", 2) == 0) dst = &r.tn;
            else if (klen == 2 && strncmp(q, "vw", 2) == 0) dst = &r.vw;
            char *end = NULL;
            long val = strtol(v, &end, 10);
            if (!dst || vlen == 0 || end != v + vlen || val < 1 || val > 1024) {
                snprintf(err, errcap, "GPU contraction schedule \"%s\": bad setting \"%.*s\"", text, (int)tok, q);
                return 0;
            }
            *dst = (int)val;
        }
        q += tok;
    }
    if (r.form == CG_GPU_CF_TILE) {
        int threads = r.bm % r.tm == 0 && r.bn % r.tn == 0 ? cg_gpu_contract_threads(&r) : 0;
        size_t local = (size_t)(r.bm + r.bn) * (size_t)r.bk * sizeof(float);
        if (threads < 32 || threads > 1024 || r.tm * r.tn > 64 || r.bk > 64 || local > 32768 ||
            (r.vw != 1 && r.vw != 4) || r.tn % r.vw != 0) {
            snprintf(err, errcap,
                     "GPU contraction schedule \"%s\": tm must divide bm and tn bn, with 32 to 1024 work items "
                     "of at most 64 outputs, bk at most 64, (bm + bn) * bk * 4 bytes at most 32 KiB, and vw 1 "
                     "or 4 dividing tn",
                     text);
            return 0;
        }
    }
    *s = r;
    return 1;
}

/* ---- the operands ------------------------------------------------------------- */

/* 1 when lx tree id reads variable v anywhere */
static int lx_uses(const sch_program *p, int32_t id, sym_id v) {
    if (id < 0) return 0;
    const lx *x = &p->lx[id];
    return sym_uses_var(p->g->syms, x->s, v) || sym_uses_var(p->g->syms, x->s2, v) || lx_uses(p, x->a, v) ||
           lx_uses(p, x->b, v);
}

typedef struct cshape {
    int32_t side_a, side_b; /* the operands' lx trees */
    int md, nd;             /* loop positions of m (-1: none) and n */
    char rname[16];         /* the reduce variable's name */
} cshape;

static cshape contract_shape(const sch_program *p, const sch_kernel *k) {
    cshape c;
    const lx *mul = &p->lx[k->expr];
    KILN_ASSERT(mul->kind == LX_BINARY && mul->op == OP_MUL);
    c.md = k->contract->mdim;
    c.nd = k->contract->ndim;
    int b_is_a = lx_uses(p, mul->a, k->var[c.nd]);
    c.side_b = b_is_a ? mul->a : mul->b;
    c.side_a = b_is_a ? mul->b : mul->a;
    sch_rvar_name(p, k->rvar, c.rname, sizeof c.rname);
    return c;
}

/* the group's position: batch loop variables, m0, n0 (first output row and
 * column of the block), dm, dn (the extents) and rn (the reduction's) */
static void emit_block_origin(gemitter *e, const sch_kernel *k, const cshape *c, int bm, int bn) {
    OUT("  const i64 rn = ");
    cg_print_sym(&e->pr, k->rdim);
    OUT(";\n");
    if (c->md >= 0) OUT("  const i64 dm = d%d;\n", c->md);
    else OUT("  const i64 dm = 1;\n");
    OUT("  const i64 dn = d%d;\n", c->nd);
    OUT("  const i64 nbn = (dn + %d) / %d, nbm = (dm + %d) / %d;\n", bn - 1, bn, bm - 1, bm);
    OUT("  i64 o = KGRP;\n");
    OUT("  const i64 n0 = (o %% nbn) * %d; o /= nbn;\n", bn);
    OUT("  const i64 m0 = (o %% nbm) * %d; o /= nbm;\n", bm);
    for (int d = k->ndim - 1; d >= 0; d--)
        if (d != c->md && d != c->nd) OUT("  const i64 i%d = o %% d%d; o /= d%d;\n", d, d, d);
    OUT("  const int lid = KLID;\n");
}

/* one operand's bk-step tile: rows x bk values, element (row, kk) into the
 * statement `store` (a printf format taking nothing, reading `row`, `kk`
 * and the f32 `val`), by all `threads` work items */
static void emit_tile_load(gemitter *e, const cshape *c, int side_is_b, int rows, int bk, int threads,
                           const char *store) {
    int32_t side = side_is_b ? c->side_b : c->side_a;
    int dim = side_is_b ? c->nd : c->md;
    const char *origin = side_is_b ? "n0" : "m0", *extent = side_is_b ? "dn" : "dm";
    OUT("    for (int q = lid; q < %d; q += %d) {\n", rows * bk, threads);
    OUT("      const int row = q / %d, kk = q %% %d;\n", bk, bk);
    if (dim >= 0) OUT("      const i64 i%d = %s + row;\n", dim, origin);
    OUT("      const i64 %s = k0 + kk;\n", c->rname);
    OUT("      float val = 0.0f;\n");
    OUT("      if (%s + row < %s && %s < rn) {\n", origin, extent, c->rname);
    cg_print_lx(&e->pr, side, 8);
    OUT("        val = (float)t%d;\n", side);
    OUT("      }\n");
    OUT("      %s\n", store);
    OUT("    }\n");
}

/* out[store_off] = value at output (m, n) = (mexpr, nexpr), when inside */
static void emit_store(gemitter *e, const sch_kernel *k, const cshape *c, const char *mexpr, const char *nexpr,
                       const char *value, int ind) {
    cg_print_indent(&e->pr, ind);
    OUT("{\n");
    cg_print_indent(&e->pr, ind + 2);
    OUT("const i64 mo = %s, no = %s;\n", mexpr, nexpr);
    if (c->md >= 0) {
        cg_print_indent(&e->pr, ind + 2);
        OUT("const i64 i%d = mo;\n", c->md);
    }
    cg_print_indent(&e->pr, ind + 2);
    OUT("const i64 i%d = no;\n", c->nd);
    cg_print_indent(&e->pr, ind + 2);
    OUT("if (mo < dm && no < dn) out[");
    cg_print_sym(&e->pr, k->store_off);
    OUT("] = %s;\n", value);
    cg_print_indent(&e->pr, ind);
    OUT("}\n");
}

/* ---- the tile form -------------------------------------------------------------- */

static void emit_tile_kernel(gemitter *e, int32_t kid, const cg_gpu_contract_sched *s, const char *suffix,
                             int wrong) {
    const sch_kernel *k = &e->pr.p->kernels[kid];
    cshape c = contract_shape(e->pr.p, k);
    int bm = s->bm, bn = s->bn, bk = s->bk, tm = s->tm, tn = s->tn;
    int tx = bn / tn, ty = bm / tm, threads = tx * ty;
    cg_gpu_emit_signature(e, kid, suffix);
    OUT("  KLOCAL float ta[%d][%d];\n  KLOCAL float tb[%d][%d];\n", bk, bm, bk, bn);
    cg_gpu_emit_setup(e, kid);
    emit_block_origin(e, k, &c, bm, bn);
    int vw = s->vw == 4 ? 4 : 1, ng = tn / vw; /* ng column groups of vw per item */
    OUT("  const int tx = lid %% %d, ty = lid / %d;\n", tx, tx);
    if (vw == 4) OUT("  kf4 acc[%d];\n  for (int q = 0; q < %d; q++) acc[q] = KF4_ZERO;\n", tm * ng, tm * ng);
    else OUT("  float acc[%d];\n  for (int q = 0; q < %d; q++) acc[q] = 0.0f;\n", tm * tn, tm * tn);
    OUT("  for (i64 k0 = 0; k0 < rn; k0 += %d) {\n", bk);
    emit_tile_load(e, &c, 0, bm, bk, threads, "ta[kk][row] = val;");
    emit_tile_load(e, &c, 1, bn, bk, threads, "tb[kk][row] = val;");
    OUT("    KBARRIER;\n");
    OUT("    for (int kk = 0; kk < %d; kk++) {\n", bk);
    OUT("      float av[%d];\n", tm);
    OUT("      for (int q = 0; q < %d; q++) av[q] = ta[kk][ty + q * %d];\n", tm, ty);
    if (vw == 4) {
        /* group g: columns 4 (tx + g tx-count) .. + 3, one float4 of tb */
        OUT("      kf4 bv[%d];\n", ng);
        OUT("      for (int g = 0; g < %d; g++) bv[g] = KF4_LOAD(&tb[kk][4 * (tx + g * %d)]);\n", ng, tx);
        OUT("      for (int q = 0; q < %d; q++)\n", tm);
        OUT("        for (int g = 0; g < %d; g++) acc[q * %d + g] = KF4_MADD(acc[q * %d + g], av[q], bv[g]);\n", ng, ng,
            ng);
    } else {
        OUT("      float bv[%d];\n", tn);
        OUT("      for (int q = 0; q < %d; q++) bv[q] = tb[kk][tx + q * %d];\n", tn, tx);
        OUT("      for (int q = 0; q < %d; q++)\n", tm);
        OUT("        for (int j = 0; j < %d; j++) acc[q * %d + j] += av[q] * bv[j];\n", tn, tn);
    }
    OUT("    }\n");
    OUT("    KBARRIER;\n");
    OUT("  }\n");
    OUT("  for (int q = 0; q < %d; q++)\n", tm);
    OUT("    for (int j = 0; j < %d; j++)\n", tn);
    char mexpr[64], nexpr[96], val[256];
    snprintf(mexpr, sizeof mexpr, "m0 + ty + q * %d", ty);
    if (vw == 4) {
        snprintf(nexpr, sizeof nexpr, "n0 + 4 * (tx + (j / 4) * %d) + (j %% 4)", tx);
        snprintf(val, sizeof val, "%s((j %% 4) == 0 ? acc[q * %d + j / 4].x : (j %% 4) == 1 ? acc[q * %d + j / 4].y : "
                 "(j %% 4) == 2 ? acc[q * %d + j / 4].z : acc[q * %d + j / 4].w)%s", wrong ? "(" : "", ng, ng, ng, ng,
                 wrong ? " + 1.0f)" : "");
    } else {
        snprintf(nexpr, sizeof nexpr, "n0 + tx + j * %d", tx);
        /* wrong: a deliberately broken candidate (the search's own test) */
        snprintf(val, sizeof val, wrong ? "acc[q * %d + j] + 1.0f" : "acc[q * %d + j]", tn);
    }
    emit_store(e, k, &c, mexpr, nexpr, val, 6);
    OUT("  if (kbad) kerr[%d] = 1;\n}\n\n", kid);
}

/* ---- the tensor-core forms (CUDA) ----------------------------------------------
 *
 * 4 warps in a 2 x 2 arrangement, each computing 32 x 32 outputs as 2 x 4
 * mma tiles of 16 x 8. Fragment registers are gathered from shared memory
 * following the PTX ISA's fragment layouts (groupID g = lane / 4,
 * threadID_in_group t = lane % 4):
 *   m16n8k16 .bf16/.f16 A (row): reg0 (row g, k 2t..2t+1), reg1 (row g+8,
 *     same k), reg2 (row g, k 2t+8..), reg3 (row g+8, k 2t+8..);
 *     B (col): reg0 (k 2t..2t+1, col g), reg1 (k 2t+8.., col g);
 *   m16n8k16 .s8 A: reg0 (row g, k 4t..4t+3), reg1 (row g+8, same k);
 *     B: reg0 (k 4t..4t+3, col g);
 *   C/D (f32 or s32): c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8).
 * The lower-indexed element sits in the lower bits of a register. Both
 * operand tiles are stored k-contiguous ([row][k]) so each register is one
 * aligned 32-bit load. */

/* after the shared-memory declarations: setup, the group's origin, the
 * warp's place, zeroed accumulators acc[2][4][4], the opening of the loop
 * over r in steps of bk */
static void emit_mma_head(gemitter *e, int32_t kid, const cshape *c, int bk) {
    cg_gpu_emit_setup(e, kid);
    emit_block_origin(e, &e->pr.p->kernels[kid], c, CG_GPU_MMA_BM, CG_GPU_MMA_BN);
    OUT("  const int lane = lid & 31, warp = lid >> 5, gq = lane >> 2, tq = lane & 3;\n");
    OUT("  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;\n");
    OUT("  float acc[2][4][4];\n");
    OUT("  for (int a = 0; a < 2; a++) for (int b = 0; b < 4; b++) for (int q = 0; q < 4; q++) acc[a][b][q] = 0.0f;\n");
    OUT("  for (i64 k0 = 0; k0 < rn; k0 += %d) {\n", bk);
}

/* after the loop over r: the accumulators stored by the C fragment layout,
 * and the entry point's body below sm_80 */
static void emit_mma_tail(gemitter *e, int32_t kid, const cshape *c) {
    OUT("  for (int a = 0; a < 2; a++)\n    for (int b = 0; b < 4; b++)\n      for (int q = 0; q < 4; q++)\n");
    emit_store(e, &e->pr.p->kernels[kid], c, "m0 + wm + a * 16 + gq + (q >> 1) * 8",
               "n0 + wn + b * 8 + tq * 2 + (q & 1)", "acc[a][b][q]", 8);
    OUT("  if (kbad) kerr[%d] = 1;\n", kid);
    OUT("#else\n  (void)A; (void)v; (void)bo; (void)n; kerr[%d] = 2;\n#endif\n}\n\n", kid);
}

static void emit_mma_float(gemitter *e, int32_t kid, cg_gpu_carith arith, const char *suffix) {
    const sch_kernel *k = &e->pr.p->kernels[kid];
    cshape c = contract_shape(e->pr.p, k);
    const int bk = 32, pad = 8, threads = CG_GPU_MMA_THREADS;
    const char *ty = arith == CG_GPU_CA_BF16 ? "bf16" : "f16";
    const char *cvt = arith == CG_GPU_CA_BF16 ? "kf2bf" : "kf2h";
    char store[64];
    cg_gpu_emit_signature(e, kid, suffix);
    OUT("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n");
    OUT("  __shared__ __align__(16) u16 ta[%d][%d];\n", CG_GPU_MMA_BM, bk + pad);
    OUT("  __shared__ __align__(16) u16 tb[%d][%d];\n", CG_GPU_MMA_BN, bk + pad);
    emit_mma_head(e, kid, &c, bk);
    snprintf(store, sizeof store, "ta[row][kk] = %s(val);", cvt);
    emit_tile_load(e, &c, 0, CG_GPU_MMA_BM, bk, threads, store);
    snprintf(store, sizeof store, "tb[row][kk] = %s(val);", cvt);
    emit_tile_load(e, &c, 1, CG_GPU_MMA_BN, bk, threads, store);
    OUT("    __syncthreads();\n");
    OUT("    for (int ks = 0; ks < %d; ks += 16) {\n", bk);
    OUT("      u32 fa[2][4], fb[4][2];\n");
    OUT("      for (int a = 0; a < 2; a++) {\n");
    OUT("        const int r0 = wm + a * 16 + gq, kc = ks + tq * 2;\n");
    OUT("        fa[a][0] = *(const u32 *)&ta[r0][kc];\n");
    OUT("        fa[a][1] = *(const u32 *)&ta[r0 + 8][kc];\n");
    OUT("        fa[a][2] = *(const u32 *)&ta[r0][kc + 8];\n");
    OUT("        fa[a][3] = *(const u32 *)&ta[r0 + 8][kc + 8];\n");
    OUT("      }\n");
    OUT("      for (int b = 0; b < 4; b++) {\n");
    OUT("        const int c0 = wn + b * 8 + gq, kc = ks + tq * 2;\n");
    OUT("        fb[b][0] = *(const u32 *)&tb[c0][kc];\n");
    OUT("        fb[b][1] = *(const u32 *)&tb[c0][kc + 8];\n");
    OUT("      }\n");
    OUT("      for (int a = 0; a < 2; a++)\n");
    OUT("        for (int b = 0; b < 4; b++)\n");
    OUT("          asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32 {%%0,%%1,%%2,%%3}, "
        "{%%4,%%5,%%6,%%7}, {%%8,%%9}, {%%0,%%1,%%2,%%3};\\n\"\n",
        ty, ty);
    OUT("                       : \"+f\"(acc[a][b][0]), \"+f\"(acc[a][b][1]), \"+f\"(acc[a][b][2]), "
        "\"+f\"(acc[a][b][3])\n");
    OUT("                       : \"r\"(fa[a][0]), \"r\"(fa[a][1]), \"r\"(fa[a][2]), \"r\"(fa[a][3]), "
        "\"r\"(fb[b][0]), \"r\"(fb[b][1]));\n");
    OUT("    }\n");
    OUT("    __syncthreads();\n");
    OUT("  }\n");
    emit_mma_tail(e, kid, &c);
}

static void emit_mma_i8(gemitter *e, int32_t kid, const char *suffix) {
    const sch_kernel *k = &e->pr.p->kernels[kid];
    cshape c = contract_shape(e->pr.p, k);
    const int bk = 32, threads = CG_GPU_MMA_THREADS;
    cg_gpu_emit_signature(e, kid, suffix);
    OUT("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n");
    OUT("  __shared__ float fa_[%d][%d];\n  __shared__ float fb_[%d][%d];\n", CG_GPU_MMA_BM, bk + 1, CG_GPU_MMA_BN,
        bk + 1);
    OUT("  __shared__ __align__(16) i8 ta[%d][%d];\n  __shared__ __align__(16) i8 tb[%d][%d];\n", CG_GPU_MMA_BM,
        bk + 16, CG_GPU_MMA_BN, bk + 16);
    OUT("  __shared__ float sa[%d], sb[%d];\n", CG_GPU_MMA_BM, CG_GPU_MMA_BN);
    emit_mma_head(e, kid, &c, bk);
    emit_tile_load(e, &c, 0, CG_GPU_MMA_BM, bk, threads, "fa_[row][kk] = val;");
    emit_tile_load(e, &c, 1, CG_GPU_MMA_BN, bk, threads, "fb_[row][kk] = val;");
    OUT("    __syncthreads();\n");
    /* one row of 32 per work item: A rows by items 0..63, B rows by 64..127 */
    OUT("    {\n");
    OUT("      const int row = lid & 63;\n");
    OUT("      float *src = lid < 64 ? fa_[row] : fb_[row];\n");
    OUT("      i8 *dst = lid < 64 ? ta[row] : tb[row];\n");
    OUT("      float amax = 0.0f;\n");
    OUT("      for (int q = 0; q < %d; q++) amax = fmaxf(amax, fabsf(src[q]));\n", bk);
    OUT("      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;\n");
    OUT("      for (int q = 0; q < %d; q++) dst[q] = (i8)(int)rintf(src[q] * inv);\n", bk);
    OUT("      if (lid < 64) sa[row] = amax / 127.0f; else sb[row] = amax / 127.0f;\n");
    OUT("    }\n");
    OUT("    __syncthreads();\n");
    OUT("    int ia[2][4][4];\n");
    OUT("    for (int a = 0; a < 2; a++) for (int b = 0; b < 4; b++) for (int q = 0; q < 4; q++) ia[a][b][q] = 0;\n");
    OUT("    for (int ks = 0; ks < %d; ks += 16) {\n", bk);
    OUT("      u32 fa[2][2], fb[4];\n");
    OUT("      for (int a = 0; a < 2; a++) {\n");
    OUT("        const int r0 = wm + a * 16 + gq, kc = ks + tq * 4;\n");
    OUT("        fa[a][0] = *(const u32 *)&ta[r0][kc];\n");
    OUT("        fa[a][1] = *(const u32 *)&ta[r0 + 8][kc];\n");
    OUT("      }\n");
    OUT("      for (int b = 0; b < 4; b++) fb[b] = *(const u32 *)&tb[wn + b * 8 + gq][ks + tq * 4];\n");
    OUT("      for (int a = 0; a < 2; a++)\n");
    OUT("        for (int b = 0; b < 4; b++)\n");
    OUT("          asm volatile(\"mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%%0,%%1,%%2,%%3}, "
        "{%%4,%%5}, {%%6}, {%%0,%%1,%%2,%%3};\\n\"\n");
    OUT("                       : \"+r\"(ia[a][b][0]), \"+r\"(ia[a][b][1]), \"+r\"(ia[a][b][2]), "
        "\"+r\"(ia[a][b][3])\n");
    OUT("                       : \"r\"(fa[a][0]), \"r\"(fa[a][1]), \"r\"(fb[b]));\n");
    OUT("    }\n");
    OUT("    for (int a = 0; a < 2; a++)\n      for (int b = 0; b < 4; b++)\n        for (int q = 0; q < 4; q++)\n");
    OUT("          acc[a][b][q] += (float)ia[a][b][q] * sa[wm + a * 16 + gq + (q >> 1) * 8] *\n");
    OUT("                          sb[wn + b * 8 + tq * 2 + (q & 1)];\n");
    OUT("    __syncthreads();\n");
    OUT("  }\n");
    emit_mma_tail(e, kid, &c);
}

static void emit_form(gemitter *e, int32_t kid, const cg_gpu_contract_sched *s, const char *suffix, int wrong) {
    if (s->form == CG_GPU_CF_MMA && s->arith == CG_GPU_CA_I8) emit_mma_i8(e, kid, suffix);
    else if (s->form == CG_GPU_CF_MMA) emit_mma_float(e, kid, s->arith, suffix);
    else emit_tile_kernel(e, kid, s, suffix, wrong);
}

void cg_gpu_emit_contract(gemitter *e, int32_t kid) {
    cg_gpu_contract_sched s = e->opt->contract;
    if (s.form != CG_GPU_CF_TILE) s = cg_gpu_contract_default();
    emit_tile_kernel(e, kid, &s, "_tile", 0);
    if (e->opt->dialect != CG_GPU_CUDA) return;
    static const cg_gpu_carith ariths[3] = {CG_GPU_CA_BF16, CG_GPU_CA_F16, CG_GPU_CA_I8};
    for (int i = 0; i < 3; i++) {
        cg_gpu_contract_sched m = s;
        m.form = CG_GPU_CF_MMA;
        m.arith = ariths[i];
        char suffix[16];
        snprintf(suffix, sizeof suffix, "_mma_%s", arith_names[ariths[i]]);
        emit_form(e, kid, &m, suffix, 0);
    }
}

/* ---- the search's candidates ---------------------------------------------------- */

/* the tile shapes searched: work-groups of 128 or 256 items, blocks from
 * 16 x 64 to 128 x 128, bk 8 to 32 (the first is the default), two for
 * matrix-vector products (decode: M of 1 to 4), where a block of 64 rows
 * would leave most items idle: one output per item, 1 x 256 and 4 x 64, and
 * three with vector width 4 */
static const int tile_space[][6] = {
    {64, 64, 16, 4, 4, 1},  {32, 32, 16, 2, 2, 1}, {64, 64, 8, 4, 4, 1},   {128, 64, 8, 8, 4, 1},
    {64, 128, 8, 4, 8, 1},  {32, 64, 16, 2, 4, 1}, {16, 64, 32, 1, 4, 1},  {128, 128, 8, 8, 8, 1},
    {32, 64, 32, 4, 4, 1},  {1, 256, 16, 1, 1, 1}, {4, 64, 16, 1, 1, 1},   {64, 64, 16, 4, 4, 4},
    {64, 128, 8, 4, 8, 4},  {128, 128, 8, 8, 8, 4},
};

int cg_gpu_contract_space(int tensor_mma, cg_gpu_contract_sched *out, int cap) {
    int n = 0;
    for (size_t i = 0; i < sizeof tile_space / sizeof tile_space[0]; i++) {
        if (n < cap) {
            cg_gpu_contract_sched s = cg_gpu_contract_default();
            s.bm = tile_space[i][0];
            s.bn = tile_space[i][1];
            s.bk = tile_space[i][2];
            s.tm = tile_space[i][3];
            s.tn = tile_space[i][4];
            s.vw = tile_space[i][5];
            out[n] = s;
        }
        n++;
    }
    for (int a = 0; tensor_mma && a < 3; a++) {
        if (n < cap) {
            cg_gpu_contract_sched s = cg_gpu_contract_default();
            s.form = CG_GPU_CF_MMA;
            s.arith = (cg_gpu_carith)a;
            out[n] = s;
        }
        n++;
    }
    return n;
}

void cg_gpu_contract_variant_name(int32_t k, int j, char *buf, size_t cap) {
    snprintf(buf, cap, "kiln_k%d_v%d", (int)k, j);
}

char *cg_emit_gpu_contract_variants(const sch_program *p, int32_t k, const cg_gpu_options *opt,
                                    const cg_gpu_contract_sched *s, int n, int wrong) {
    gemitter e0, *e = &e0;
    cg_gpu_emitter_init(e, p, opt);
    cg_gpu_emit_preamble(e);
    for (int j = 0; j < n; j++) {
        KILN_ASSERT(s[j].form != CG_GPU_CF_GENERIC);
        KILN_ASSERT(s[j].form != CG_GPU_CF_MMA || opt->dialect == CG_GPU_CUDA);
        char suffix[16];
        snprintf(suffix, sizeof suffix, "_v%d", j);
        emit_form(e, k, &s[j], suffix, j == wrong);
    }
    return e->pr.s;
}
