/* contract.c — find the contractions among a program's kernels.
 *
 * A contraction is a SUM over r of MUL(a, b) where the two operands vary
 * along different loop variables: some loop variable (m) moves only a, some
 * other (n) moves only b. That is every matmul, batched matmul and
 * matrix-vector product, whatever views the graph reads them through, and
 * no other reduction (rmsnorm's sum of x*x has no such pair of variables).
 *
 * A contraction gets the CPU micro-kernel family (emit_contract.c) when both
 * operands are plain loads contiguous along r: a = A[a_base + r] from an f32
 * buffer, b = B[b_base + r] from a float or block-format buffer (through its
 * dequantising CAST). One exception: an f32 B strided along r and
 * contiguous along n (B[b_base + r*b_kstride], the (k, n) operand of
 * kiln_matmul) is annotated with b_kstride set; only the packed form
 * (emit_gemm.c) takes it, so its default schedules are packed ones
 * (sch_contract_default_of). Where an operand is not — an elementwise chain fused
 * into it (gelu before the down projection), a cast from f16 — recomputing it
 * inside the reduction would repeat its work N (or M) times, so the node it
 * computes is given a buffer instead (a pass of M*K work before M*N*K) and
 * kernelize rebuilds. A contraction fused as a stage into another kernel
 * (a bias add) is given its own kernel the same way.
 *
 * Invariants: a kernel is annotated only when the analysis proves the form
 * above; everything else stays the generic reduction it was.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "contract.h"
#include "family.h"
#include "stream_tile.h"
#include "dtype.h"

/* bit d set when sym s uses kernel k's loop variable d */
static unsigned sym_loop_mask(const sch_program *p, const sch_kernel *k, sym_id s) {
    if (s == SYM_NONE) return 0;
    const sym_node *n = sym_get(p->g->syms, s);
    switch (n->kind) {
    case SYM_CONST: return 0;
    case SYM_VAR:
        for (int d = 0; d < k->ndim; d++)
            if (k->var[d] == s) return 1u << d;
        return 0;
    default: return sym_loop_mask(p, k, n->a) | sym_loop_mask(p, k, n->b);
    }
}

/* bit d set when the tree id reads loop variable d anywhere (offsets,
 * guards, indices, stage coordinates) */
static unsigned lx_loop_mask(const sch_program *p, const sch_kernel *k, int32_t id) {
    if (id < 0) return 0;
    const lx *x = &p->lx[id];
    unsigned m = sym_loop_mask(p, k, x->s) | sym_loop_mask(p, k, x->s2);
    if (x->kind == LX_STAGE) {
        const sch_stage *st = &k->stages[x->stage];
        for (int c = 0; c < st->ncoord; c++) m |= sym_loop_mask(p, k, st->coord[c]);
        m |= lx_loop_mask(p, k, st->expr);
    }
    return m | lx_loop_mask(p, k, x->a) | lx_loop_mask(p, k, x->b);
}

unsigned sch_lx_loop_mask(const sch_program *p, const sch_kernel *k, int32_t id) { return lx_loop_mask(p, k, id); }

/* the offset of `off` at r = 0 when off = base + r exactly, else SYM_NONE */
static sym_id unit_base(sym_pool *sp, sym_id off, sym_id r) {
    sym_id base = sym_subst_var(sp, off, r, sym_const(sp, 0));
    if (sym_uses_var(sp, base, r)) return SYM_NONE;
    int64_t c;
    if (!sym_is_const(sp, sym_sub(sp, off, sym_add(sp, base, r)), &c) || c != 0) return SYM_NONE;
    return base;
}

/* the K stride of B when off = base + r*stride (stride free of r, f32 B)
 * and B is contiguous along loop variable n (base at n + 1 is base + 1);
 * *base gets the offset at r = 0. SYM_NONE when not of that form. */
static sym_id strided_base(sym_pool *sp, sym_id off, sym_id r, sym_id n, sym_id *base) {
    sym_id b = sym_subst_var(sp, off, r, sym_const(sp, 0));
    sym_id stride = sym_sub(sp, sym_subst_var(sp, off, r, sym_const(sp, 1)), b);
    int64_t c;
    if (sym_uses_var(sp, b, r) || sym_uses_var(sp, stride, r) || sym_uses_var(sp, stride, n)) return SYM_NONE;
    if (!sym_is_const(sp, sym_sub(sp, off, sym_add(sp, b, sym_mul(sp, r, stride))), &c) || c != 0) return SYM_NONE;
    if (!sym_is_const(sp, sym_step(sp, b, n), &c) || c != 1) return SYM_NONE;
    *base = b;
    return stride;
}

/* the load an operand tree reduces to — LOAD, or CAST to f32 of a LOAD of a
 * float or block dtype — or -1 */
static int32_t operand_load(const sch_program *p, int32_t id) {
    const lx *x = &p->lx[id];
    if (x->dtype != KILN_F32) return -1;
    if (x->kind == LX_LOAD) return p->bufs[x->buf].dtype == KILN_F32 ? id : -1;
    if (x->kind != LX_CAST) return -1;
    const lx *y = &p->lx[x->a];
    if (y->kind != LX_LOAD) return -1;
    kiln_dtype t = p->bufs[y->buf].dtype;
    return (t == KILN_F16 || t == KILN_BF16 || kiln_dtype_is_block(t)) ? x->a : -1;
}

/* the graph node an operand computes, if giving it a buffer is possible */
static int32_t forcible_node(const sch_program *p, int32_t id) {
    const lx *x = &p->lx[id];
    if (x->kind == LX_GUARD) return -1; /* a masked view of something: the view is the problem */
    if (x->node < 0 || p->node_buf[x->node] >= 0) return -1;
    const node *m = graph_node(p->g, x->node);
    if (m->op == OP_INPUT || m->op == OP_CONST || m->op == OP_IOTA) return -1;
    return x->node;
}

/* the loop variables each side of a MUL depends on; 1 when the pair is a
 * contraction: some loop variable moves one side only (a matrix times a
 * vector has one such variable, a matrix product two); a product whose
 * sides move together (x*x in rmsnorm, a dot product per row) is not one */
static int contraction_sides(const sch_program *p, const sch_kernel *k, int32_t mul, unsigned *ma, unsigned *mb) {
    const lx *x = &p->lx[mul];
    if (x->kind != LX_BINARY || x->op != OP_MUL || x->dtype != KILN_F32) return 0;
    *ma = lx_loop_mask(p, k, x->a);
    *mb = lx_loop_mask(p, k, x->b);
    return (*ma & ~*mb) != 0 || (*mb & ~*ma) != 0;
}

static uint64_t fnv_step(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xffu;
        h *= 1099511628211ull;
    }
    return h;
}

sch_contract_sched sch_contract_default(int large_m, kiln_dtype b_dtype) {
    sch_contract_sched s;
    memset(&s, 0, sizeof s);
    s.arith = SCH_ARITH_F32;
    s.mc = 64;
    if (large_m) {
        /* the packed form: B dequantised once per item and K block, outer
         * products 8 rows x 48 columns (measured on the 2-core AVX-512 VM,
         * 1 thread: gemma-3-270m q4_k_m pp512 182 -> 327 t/s against the
         * dot form's 4x4; fp32 512^3 96 -> 150 GFLOP/s) */
        s.form = SCH_FORM_PACKED;
        s.mr = 8;
        s.nr = 48;
        s.kc = 1024; /* fp32 2048^3, alternated with 512: 1 thread 201-203 -> 205-206, 2 threads 392-393 -> 401-402 GFLOP/s */
        s.pf = 16;   /* strip prefetch: fp32 2048^3 140 -> 146-152 GFLOP/s */
    } else {
        s.mr = 1;
        s.nr = kiln_dtype_is_block(b_dtype) ? 4 : 8;
        s.pf = 8; /* decode streams B once: prefetching ahead measured +7% tg on gemma3-270m */
    }
    return s;
}

sch_contract_sched sch_contract_default_of(const sch_contract *c, int large_m, kiln_dtype b_dtype) {
    if (c->b_kstride == SYM_NONE) return sch_contract_default(large_m, b_dtype);
    /* B strided along K: the dot form cannot read it, the packed form
     * copies it into strips; for decode (one row of A per strip) it reads
     * B's rows in place instead: gemma3-270m's attention values, packed
     * again for each of the 4 query heads that share them, were 4% of a
     * token at 2 threads */
    sch_contract_sched s;
    memset(&s, 0, sizeof s);
    s.arith = SCH_ARITH_F32;
    s.form = SCH_FORM_PACKED;
    s.mr = large_m ? 6 : 1;
    s.nr = 32;
    s.mc = 64;
    s.kc = large_m ? 256 : 0;
    s.pf = large_m ? 16 : 0;
    s.direct = !large_m;
    return s;
}

/* annotate kernel ki if it is a contraction with direct operands; else
 * force what would make it one. Returns the number of nodes forced. */
static int analyse_kernel(sch_program *p, int32_t ki, uint8_t *force) {
    sch_kernel *k = &p->kernels[ki];
    int forced = 0;
    /* contractions fused as stages: give them a kernel of their own, but
     * for a stream kernel's dot product in the tile form (stream_tile.c),
     * which the tile computes in registers */
    sch_stream_tile tile;
    int tiled = !p->no_stream_tile && sch_stream_tile_of(p, k, &tile);
    for (int32_t i = 0; i < k->nstages; i++) {
        const sch_stage *st = &k->stages[i];
        unsigned ma, mb;
        if (st->red_op != OP_SUM || force[st->node] || (tiled && i == tile.stage)) continue;
        /* the stage's own variables are not loop variables of k; what matters
         * is whether its operands differ in the kernel's loops */
        if (contraction_sides(p, k, st->expr, &ma, &mb)) {
            force[st->node] = 1;
            forced++;
        }
    }
    if (k->kind != SCH_K_REDUCE || k->red_op != OP_SUM || k->ndim == 0) return forced;
    if (p->bufs[k->out_buf].dtype != KILN_F32) return forced;
    unsigned ma, mb;
    if (!contraction_sides(p, k, k->expr, &ma, &mb)) return forced;
    const lx *mul = &p->lx[k->expr];
    int32_t side[2] = {mul->a, mul->b};
    int32_t ld[2] = {operand_load(p, side[0]), operand_load(p, side[1])};
    for (int s = 0; s < 2; s++) {
        if (ld[s] >= 0) continue;
        int32_t n = forcible_node(p, side[s]);
        if (n >= 0 && !force[n]) {
            force[n] = 1;
            forced++;
        }
    }
    if (ld[0] < 0 || ld[1] < 0 || k->nstages > 0) return forced;
    sym_pool *sp = p->g->syms;
    sym_id base[2] = {unit_base(sp, p->lx[ld[0]].s, k->rvar), unit_base(sp, p->lx[ld[1]].s, k->rvar)};
    /* B: the side that is not f32 if one is, else the one moving with the
     * last loop variable (stores along n are then contiguous), else the one
     * that has a loop variable of its own; B must have one (it gives n) */
    int bs;
    kiln_dtype t0 = p->bufs[p->lx[ld[0]].buf].dtype, t1 = p->bufs[p->lx[ld[1]].buf].dtype;
    unsigned own0 = ma & ~mb, own1 = mb & ~ma, last = 1u << (k->ndim - 1);
    if (t0 != KILN_F32 && t1 != KILN_F32) return forced; /* A must be f32 */
    if (t0 != KILN_F32) bs = 0;
    else if (t1 != KILN_F32) bs = 1;
    else if (own1 & last) bs = 1;
    else if (own0 & last) bs = 0;
    else bs = own1 ? 1 : 0;
    unsigned only_a = bs ? own0 : own1, only_b = bs ? own1 : own0;
    if (!only_b) return forced;
    sym_id abase = base[1 - bs], bbase = base[bs], kstride = SYM_NONE;
    int nl = -1;
    if (abase == SYM_NONE) return forced;
    if (bbase == SYM_NONE) {
        /* an f32 B strided along r and contiguous along its last own loop
         * variable (kiln_matmul's (k, n) operand): the packed form only */
        for (int d = k->ndim - 1; d >= 0 && nl < 0; d--)
            if ((only_b >> d) & 1u) nl = d;
        if (nl < 0) return forced;
        if ((bs ? t1 : t0) != KILN_F32) {
            /* a cast B strided along r (an f16 KV cache's values): only the
             * packed form reads B strided, and only f32, so the cast gets a
             * buffer (one pass of N*K) and B becomes that f32 buffer; left a
             * generic reduction it ran 24x slower (gemma3-270m pp512, f16
             * cache: 58 vs 1406 t/s) */
            int32_t fn = forcible_node(p, side[bs]);
            if (fn >= 0 && !force[fn]) {
                force[fn] = 1;
                forced++;
            }
            return forced;
        }
        kstride = strided_base(sp, p->lx[ld[bs]].s, k->rvar, k->var[nl], &bbase);
        if (kstride == SYM_NONE) return forced;
    }
    /* n: the last loop variable only B's base uses; m: of those only A's
     * base uses, the one with a symbolic extent (seq: the prompt, which
     * makes M large in prefill), else the largest, else the last (a
     * variable the operand uses only inside a guard does not count: a
     * guarded operand is not a plain load, so there is none). Grouped-query
     * attention has two such loops, the query heads of a group (4) and the
     * positions (seq): with M = 4 every prompt position re-read all of K and V. */
    int nd = -1, md = -1;
    int64_t mext = 0; /* md's extent; INT64_MAX when symbolic */
    for (int d = k->ndim - 1; d >= 0; d--) {
        sym_id v = k->var[d];
        int ua = sym_uses_var(sp, abase, v), ub = sym_uses_var(sp, bbase, v);
        if (nd < 0 && ub && !ua && ((only_b >> d) & 1u)) nd = d;
        else if (ua && !ub && ((only_a >> d) & 1u)) {
            int64_t ext;
            if (!sym_is_const(sp, k->dim[d], &ext)) ext = INT64_MAX;
            if (md < 0 || ext > mext) {
                md = d;
                mext = ext;
            }
        }
    }
    if (nd < 0) return forced;
    if (kstride != SYM_NONE && nd != nl) return forced; /* n must be the contiguous variable */
    sch_contract *c = kiln_xcalloc(1, sizeof *c);
    c->a_buf = p->lx[ld[1 - bs]].buf;
    c->b_buf = p->lx[ld[bs]].buf;
    c->a_base = abase;
    c->b_base = bbase;
    c->b_kstride = kstride;
    c->b_computed = p->bufs[c->b_buf].kind != SCH_BUF_INPUT;
    c->mdim = md;
    c->ndim = nd;
    c->n_lim_off = SYM_NONE;
    kiln_dtype bt = p->bufs[c->b_buf].dtype;
    c->sched[0] = sch_contract_default_of(c, 0, bt);
    c->sched[1] = sch_contract_default_of(c, 1, bt);
    /* the tuning key: what the kernel does, not its sizes — operand dtypes,
     * loop count and roles, whether sizes are symbolic */
    uint64_t h = 1469598103934665603ull;
    h = fnv_step(h, (uint64_t)bt);
    h = fnv_step(h, (uint64_t)k->ndim);
    h = fnv_step(h, (uint64_t)(md + 1) << 8 | (uint64_t)nd);
    int64_t cv;
    h = fnv_step(h, (uint64_t)sym_is_const(sp, k->rdim, &cv));
    if (kstride != SYM_NONE) h = fnv_step(h, 0x5354u); /* strided B: its own records */
    /* f32 B computed by the program (search.h b_activation): its space has
     * the bf16 tiles, a caller's f32 input's has not, so their own records */
    if (bt == KILN_F32 && c->b_computed) h = fnv_step(h, 0x4143u);
    snprintf(c->key, sizeof c->key, "contract-%s-%016llx", kiln_dtype_name(bt), (unsigned long long)h);
    k->contract = c;
    c->n_lim_off = sch_demand_n_limit(p, k);
    return forced;
}

int sch_contract_analyse(sch_program *p, uint8_t *force) {
    int forced = 0;
    for (int32_t k = 0; k < p->nkernels; k++) {
        k += sch_contract_pack(p, k); /* a windowed operand: packed by a kernel before it (pack.c) */
        sch_coalesce_loops(p, k);
        forced += analyse_kernel(p, k, force);
        forced += sch_window_force(p, k, force); /* a costly chain re-read through a window (pack.c) */
    }
    return forced;
}

/* Work items (see contract.h): each of the nbatch batch points cuts its n
 * B rows into q runs of whole nr-row strips, run t holding strips
 * [S t / q, S (t + 1) / q) of the S = ceil(n / nr), so runs differ by at
 * most one strip; the thread pool deals the nbatch * q items out in
 * contiguous equal counts (rt_pool's piece()). */

/* strips in items [0, x): a strip is the unit of work (an edge strip
 * short of nr rows costs a whole one: edge tiles repeat a row) */
static int64_t strips_before(int64_t x, int64_t strips, int64_t q) { return x / q * strips + strips * (x % q) / q; }

int64_t sch_contract_busiest(int64_t n, int64_t nr, int64_t nbatch, int64_t q, int nthreads) {
    int64_t strips = (n + nr - 1) / nr, items = nbatch * q;
    int64_t parts = nthreads < items ? nthreads : items, most = 0;
    for (int64_t i = 0; i < parts; i++) {
        int64_t got = strips_before(items * (i + 1) / parts, strips, q) - strips_before(items * i / parts, strips, q);
        if (got > most) most = got;
    }
    return most;
}

int64_t sch_contract_runs(const sch_contract_sched *s, int64_t n, int64_t nbatch, int nthreads) {
    int64_t nr = s->nr > 0 ? s->nr : 1;
    if (n < 1) n = 1;
    if (nbatch < 1) nbatch = 1;
    if (nthreads < 1) nthreads = 1;
    int64_t strips = (n + nr - 1) / nr;
    if (s->nc > 0) {
        int64_t nc = (s->nc + nr - 1) / nr * nr, q = (n + nc - 1) / nc;
        return q < strips ? q : strips;
    }
    /* about 8 items per thread, at least 4 strips each (or the whole row) ... */
    int64_t want = 8 * (int64_t)nthreads;
    int64_t target = nbatch >= want ? 1 : (want + nbatch - 1) / nbatch;
    int64_t most = strips / 4 > 1 ? strips / 4 : 1;
    /* ... and among the run counts from a quarter to twice that, the one
     * whose busiest thread has the fewest strips (ties: nearest the target).
     * Runs of a fixed width left the thread holding the short last run
     * with too little or too much: 11 runs of 192 of 2048 on 2 threads are
     * 5 and 6 (960 and 1088 columns; 2048^3 GEMM at 2 threads: 39 and 46 ms) */
    int64_t lo = target / 4 > 1 ? target / 4 : 1, hi = 2 * target < most ? 2 * target : most;
    if (lo > hi) lo = hi;
    int64_t best = 0, best_load = 0, best_dist = 0;
    for (int64_t q = lo; q <= hi; q++) {
        int64_t load = sch_contract_busiest(n, nr, nbatch, q, nthreads);
        int64_t dist = q > target ? q - target : target - q;
        if (!best || load < best_load || (load == best_load && dist < best_dist)) {
            best = q;
            best_load = load;
            best_dist = dist;
        }
    }
    return best;
}

int64_t sch_contract_run_rows(int64_t n, int64_t nr, int64_t q) {
    if (nr < 1) nr = 1;
    if (q < 1) q = 1;
    int64_t strips = (n + nr - 1) / nr;
    return nr * ((strips + q - 1) / q);
}

void sch_contract_sched_print(const sch_contract_sched *s, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "mr=%d nr=%d nc=%d mc=%d arith=%s", s->mr, s->nr, s->nc, s->mc,
                     s->arith == SCH_ARITH_I8 ? "i8" : s->arith == SCH_ARITH_BF16 ? "bf16" : "f32");
    if (n < 0 || (size_t)n >= cap) return;
    if (s->form == SCH_FORM_PACKED) n += snprintf(buf + n, cap - (size_t)n, " form=packed kc=%d", s->kc);
    if (s->form == SCH_FORM_AMX) n += snprintf(buf + n, cap - (size_t)n, " form=amx kc=%d", s->kc);
    if (n < 0 || (size_t)n >= cap) return;
    if (s->pf > 0) n += snprintf(buf + n, cap - (size_t)n, " pf=%d", s->pf);
    if (n < 0 || (size_t)n >= cap) return;
    if (s->direct) n += snprintf(buf + n, cap - (size_t)n, " direct=1");
    if (n < 0 || (size_t)n >= cap) return;
    if (s->serial) n += snprintf(buf + n, cap - (size_t)n, " serial=1");
    if (n < 0 || (size_t)n >= cap) return;
    if (s->rp) n += snprintf(buf + n, cap - (size_t)n, " rp=1");
    if (n < 0 || (size_t)n >= cap) return;
    if (s->pf2 > 0) snprintf(buf + n, cap - (size_t)n, " pf2=%d", s->pf2);
}

int sch_contract_sched_parse(const char *text, sch_contract_sched *s) {
    char arith[16];
    sch_contract_sched t;
    memset(&t, 0, sizeof t);
    int used = 0;
    if (sscanf(text, "mr=%d nr=%d nc=%d mc=%d arith=%15s%n", &t.mr, &t.nr, &t.nc, &t.mc, arith, &used) != 5) return 0;
    if (strcmp(arith, "f32") == 0) t.arith = SCH_ARITH_F32;
    else if (strcmp(arith, "i8") == 0) t.arith = SCH_ARITH_I8;
    else if (strcmp(arith, "bf16") == 0) t.arith = SCH_ARITH_BF16;
    else return 0;
    /* then optional key=value words: form=packed, kc=N, pf=N (the dot form's
     * text has no form=, so records from before it existed stay readable) */
    const char *rest = text + used;
    for (;;) {
        while (*rest == ' ') rest++;
        if (!*rest) break;
        int v = 0, n = 0;
        if (strncmp(rest, "form=packed", 11) == 0 && (rest[11] == ' ' || !rest[11])) {
            t.form = SCH_FORM_PACKED;
            rest += 11;
        } else if (strncmp(rest, "form=amx", 8) == 0 && (rest[8] == ' ' || !rest[8])) {
            t.form = SCH_FORM_AMX;
            rest += 8;
        } else if (sscanf(rest, "kc=%d%n", &v, &n) == 1 && v >= 0 && (rest[n] == ' ' || !rest[n])) {
            t.kc = v;
            rest += n;
        } else if (sscanf(rest, "pf=%d%n", &v, &n) == 1 && v >= 0 && v <= 64 && (rest[n] == ' ' || !rest[n])) {
            t.pf = v;
            rest += n;
        } else if (sscanf(rest, "pf2=%d%n", &v, &n) == 1 && v >= 0 && v <= 256 && (rest[n] == ' ' || !rest[n])) {
            t.pf2 = v;
            rest += n;
        } else if (strncmp(rest, "direct=1", 8) == 0 && (rest[8] == ' ' || !rest[8])) {
            t.direct = 1;
            rest += 8;
        } else if (strncmp(rest, "serial=1", 8) == 0 && (rest[8] == ' ' || !rest[8])) {
            t.serial = 1;
            rest += 8;
        } else if (strncmp(rest, "rp=1", 4) == 0 && (rest[4] == ' ' || !rest[4])) {
            t.rp = 1;
            rest += 4;
        } else {
            return 0;
        }
    }
    /* a schedule of a family whose limits it keeps (family.h); B's dtype is
     * checked where the schedule meets its kernel */
    const sch_family *f = sch_family_of(&t);
    if (!f || !sch_family_tile_ok(f, &t)) return 0;
    *s = t;
    return 1;
}
