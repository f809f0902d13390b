/* space_generic.c — the schedule space of generic MAP / REDUCE kernels and
 * its cost model (DESIGN.md section 5; the knobs: sch_generic_sched, loop.h).
 *
 * The space, for a kernel on a vector ISA of W lanes (8 or 16):
 *   vec     1 (scalar), 8, and 16 when W is 16
 *   nacc    0 (the default mix: SUM 2, MAX 4), 1, 2, 4, 8 — only when a
 *           reduction of the kernel vectorises
 *   unroll  1, 2, 4 — only when its MAP rows vectorise
 *   chunk   0 (the runtime's heuristic) and 1024 / 4096 / 16384 / 65536
 *           elements smaller than the last dim — only for parallel launches
 *           with a last dim of at least 2048
 *   serial  0, and 1 (the calling thread alone, chunk moot) — only for
 *           parallel launches on a pool of more than one thread, of at most
 *           SCH_SERIAL_MAX_BYTES
 * Points with the same effective form (sch_generic_effective) are one point;
 * the default schedule is always first. On a scalar ISA only chunk varies.
 *
 * The cost model (coarse: it only orders what the search measures):
 *   threads  t = min(threads, work items), items = rows x chunks per row
 *   memory   bytes / bandwidth(t), bandwidth(t) = min(17, 11 t) GB/s (the
 *            development VM's single- and all-thread read bandwidth), x4 when
 *            the bytes fit in t x 2 MiB of cache
 *   compute  per element of the innermost work, at 3 GHz per thread:
 *            a vector MAP: ops / lanes x (U + 0.5) / U cycles (the loop's
 *            overhead amortised over U vectors); a vector reduction:
 *            max(ops / 2 + (SUM: 2 widening adds), 4 / A) / lanes cycles, A
 *            independent accumulators hiding the 4-cycle add latency;
 *            scalar code: max(ops / 2 + 1, 4) cycles per element (one
 *            sequential accumulator). Row stages are recomputed by every
 *            chunk of a row, which the model charges.
 *   total    max(memory, compute / t x imbalance) + 20 ns per work item / t
 *            + 2 us of launch on a pool (fork and join), 0.5 us on one
 *            thread (serial: t = 1).
 */
#include "space_generic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

sch_generic_sched sch_generic_effective(const sch_generic_shape *sh, const sch_generic_sched *s) {
    sch_generic_sched e = *s;
    int any_vec = sh->isa_lanes > 0 && (sh->map_vec || sh->red_vec);
    if (!any_vec) e.vec = 1;
    else if (e.vec == 0 || e.vec > sh->isa_lanes) e.vec = sh->isa_lanes;
    if (e.vec == 1 || !sh->red_vec) e.nacc = 0;
    if (e.nacc != 0 && !sh->has_max && e.nacc == 2) e.nacc = 0; /* SUM only: the default is 2 */
    if (e.nacc != 0 && !sh->has_sum && e.nacc == 4) e.nacc = 0; /* MAX only: the default is 4 */
    if (e.vec == 1 || !sh->map_vec) e.unroll = 0;
    if (e.unroll == 1) e.unroll = 0;
    if (!sh->parallel || sh->nthreads <= 1 || sh->bytes > SCH_SERIAL_MAX_BYTES) e.serial = 0;
    if (e.serial) e.serial = 1;
    if (!sh->parallel || e.serial || e.chunk >= sh->inner) e.chunk = 0;
    return e;
}

int sch_generic_same(const sch_generic_sched *a, const sch_generic_sched *b) {
    return a->vec == b->vec && a->nacc == b->nacc && a->unroll == b->unroll && a->chunk == b->chunk &&
           a->serial == b->serial;
}

static int in_space(const sch_generic_shape *sh, const sch_generic_sched *list, int n, const sch_generic_sched *s) {
    sch_generic_sched e = sch_generic_effective(sh, s);
    for (int i = 0; i < n; i++) {
        sch_generic_sched f = sch_generic_effective(sh, &list[i]);
        if (sch_generic_same(&e, &f)) return 1;
    }
    return 0;
}

int sch_space_generic(const sch_generic_shape *sh, sch_generic_sched *out, int cap) {
    static const int vecs[] = {1, 8, 16};
    static const int naccs[] = {0, 1, 2, 4, 8};
    static const int unrolls[] = {1, 2, 4};
    static const int64_t chunks[] = {0, 1024, 4096, 16384, 65536};
    int room = 1 + 2 * 3 * 5 * 3 * 5;
    sch_generic_sched *all = kiln_xcalloc((size_t)room, sizeof *all);
    int n = 1; /* all[0]: the default (zeroed) */
    for (int sr = 0; sr < 2; sr++)
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        if (sr && (!sh->parallel || sh->nthreads <= 1 || sh->bytes > SCH_SERIAL_MAX_BYTES || chunks[c] > 0)) continue;
        if (chunks[c] > 0 && (!sh->parallel || sh->inner < 2048 || chunks[c] >= sh->inner)) continue;
        for (size_t v = 0; v < sizeof vecs / sizeof *vecs; v++) {
            if (vecs[v] > 1 && vecs[v] > sh->isa_lanes) continue;
            for (size_t a = 0; a < sizeof naccs / sizeof *naccs; a++)
                for (size_t u = 0; u < sizeof unrolls / sizeof *unrolls; u++) {
                    sch_generic_sched s = {vecs[v], naccs[a], unrolls[u], chunks[c], sr};
                    sch_generic_sched e = sch_generic_effective(sh, &s); /* canonical: idempotent */
                    if (in_space(sh, all, n, &e)) continue;
                    all[n++] = e;
                }
        }
    }
    for (int i = 0; out && i < n && i < cap; i++) out[i] = all[i];
    free(all);
    return n;
}

double sch_cost_generic(const sch_generic_shape *sh, const sch_generic_sched *s) {
    sch_generic_sched e = sch_generic_effective(sh, s);
    const double freq = 3.0e9, bw1 = 11e9, bwn = 17e9, cache = 2.0 * 1024 * 1024;
    int64_t outer = sh->outer > 0 ? sh->outer : 1, inner = sh->inner > 0 ? sh->inner : 1;
    int nt = sh->nthreads > 0 ? sh->nthreads : 1, pool = sh->parallel && !e.serial;
    if (e.serial) nt = 1;
    int64_t chunk = e.chunk > 0 ? e.chunk : inner;
    if (e.chunk == 0 && pool && outer < 4 * (int64_t)nt && inner >= 2048 && sh->stage_rn == 0)
        chunk = (inner + 4 * nt - 1) / (4 * nt); /* the runtime's split of few long rows, roughly */
    int64_t per_row = (inner + chunk - 1) / chunk;
    double items = (double)outer * (double)per_row;
    double used = pool ? (items < nt ? items : nt) : 1;
    double imbalance = pool ? (double)(int64_t)((items + used - 1) / used) / (items / used) : 1;
    double L = e.vec > 1 ? (double)e.vec : 1;
    double ops = sh->ops > 1 ? sh->ops : 1;
    /* the map part */
    double cyc = 0, elems = (double)outer * (double)inner;
    if (sh->rn <= 1) {
        if (e.vec > 1 && sh->map_vec) {
            double U = e.unroll > 1 ? e.unroll : 1;
            cyc += elems * ops / L * (U + 0.5) / U;
        } else {
            cyc += elems * ops;
        }
    }
    /* the reductions: the kernel's own and the row stages (per chunk) */
    double relems = (sh->rn > 1 ? elems * (double)sh->rn : 0) + (double)outer * (double)per_row * (double)sh->stage_rn;
    if (relems > 0) {
        if (e.vec > 1 && sh->red_vec) {
            double A = e.nacc > 0 ? e.nacc : sh->has_max && !sh->has_sum ? 4 : 2;
            double c = ops / 2 + (sh->has_sum ? 2 : 0);
            cyc += relems * (c > 4 / A ? c : 4 / A) / L;
        } else {
            double c = ops / 2 + 1;
            cyc += relems * (c > 4 ? c : 4);
        }
    }
    double bw = bwn < bw1 * used ? bwn : bw1 * used;
    if (sh->bytes <= cache * used) bw *= 4;
    double t_mem = sh->bytes / bw, t_cpu = cyc / freq / used * imbalance;
    return (t_mem > t_cpu ? t_mem : t_cpu) + 20e-9 * items / used + (pool && nt > 1 ? 2e-6 : 0.5e-6);
}

int sch_generic_complexity(const sch_generic_sched *s) {
    int c = 0;
    if (s->vec != 0) c += 1;
    if (s->nacc > 0) c += s->nacc >= 4 ? 2 : 1;
    if (s->unroll > 1) c += s->unroll >= 4 ? 2 : 1;
    if (s->chunk > 0) c += 1;
    if (s->serial) c += 1;
    return c;
}

int sch_generic_simpler(const sch_generic_sched *a, const sch_generic_sched *b) {
    return sch_generic_complexity(a) < sch_generic_complexity(b);
}

void sch_generic_sched_print(const sch_generic_sched *s, char *buf, size_t cap) {
    snprintf(buf, cap, "vec=%d nacc=%d unroll=%d chunk=%lld%s", s->vec, s->nacc, s->unroll, (long long)s->chunk,
             s->serial ? " serial=1" : "");
}

int sch_generic_sched_parse(const char *text, sch_generic_sched *s) {
    int vec = 0, nacc = 0, unroll = 0, used = 0;
    long long chunk = 0;
    if (!text || sscanf(text, "vec=%d nacc=%d unroll=%d chunk=%lld%n", &vec, &nacc, &unroll, &chunk, &used) != 4)
        return 0;
    int serial = 0;
    if (strcmp(text + used, " serial=1") == 0) serial = 1;
    else if (text[used] != 0) return 0;
    if (vec != 0 && vec != 1 && vec != 8 && vec != 16) return 0;
    if (nacc != 0 && nacc != 1 && nacc != 2 && nacc != 4 && nacc != 8) return 0;
    if (unroll != 0 && unroll != 1 && unroll != 2 && unroll != 4) return 0;
    if (chunk < 0 || chunk > ((long long)1 << 40)) return 0;
    s->vec = vec;
    s->nacc = nacc;
    s->unroll = unroll;
    s->chunk = (int64_t)chunk;
    s->serial = serial;
    return 1;
}

void sch_generic_key(const sch_program *p, int32_t k, char *key, size_t cap) {
    char *txt = NULL;
    size_t len = 0, tcap = 0;
    sch_kernel_print(p, k, &txt, &len, &tcap);
    /* mask the numbers that name things (b3, #12, "node 7", "kernel 4", i0)
     * and quoted input names; keep sizes and constants */
    uint64_t h = 0xcbf29ce484222325ull;
    int quoted = 0;
    for (size_t i = 0; i < len; i++) {
        char c = txt[i];
        if (c == '\'') quoted = !quoted;
        else if (quoted) continue;
        if (c >= '0' && c <= '9' && i > 0) {
            char prev = txt[i - 1];
            int named = (prev >= 'a' && prev <= 'z') || (prev >= 'A' && prev <= 'Z') || prev == '_' || prev == '#' ||
                        prev == '\x01' || (i >= 5 && memcmp(txt + i - 5, "node ", 5) == 0) ||
                        (i >= 7 && memcmp(txt + i - 7, "kernel ", 7) == 0);
            if (named) {
                txt[i] = '\x01'; /* a whole run of digits masks as one mark per digit */
                continue;
            }
        }
        h ^= (uint8_t)c;
        h *= 0x100000001b3ull;
    }
    free(txt);
    snprintf(key, cap, "gen-%016llx", (unsigned long long)h);
}

int sch_generic_bucket(const sch_program *p, int32_t k, const int64_t *values, int nthreads, char *buf, size_t cap) {
    const sch_kernel *K = &p->kernels[k];
    sym_pool *sp = p->g->syms;
    size_t n = 0;
    buf[0] = 0;
#define GB_EVAL(sym, out) (values ? sym_eval(sp, (sym), values, NULL, (out), NULL) == 0 : sym_is_const(sp, (sym), (out)))
    n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "g:");
    for (int d = 0; d < K->ndim; d++) {
        int64_t v = 0;
        if (!GB_EVAL(K->dim[d], &v)) return 0;
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%lld", d ? "x" : "", (long long)v);
    }
    int64_t r = 1;
    if (K->kind == SCH_K_REDUCE && !GB_EVAL(K->rdim, &r)) return 0;
    n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, ",r=%lld", (long long)r);
    for (int32_t i = 0; i < K->nstages; i++) {
        int64_t v = 0;
        if (!GB_EVAL(K->stages[i].rdim, &v)) return 0;
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, ",s=%lld", (long long)v);
    }
#undef GB_EVAL
    n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, ",t=%d", nthreads);
    return n < cap;
}
