/* space_contract.c — the schedule spaces of the contraction families
 * (family.h): the axes each form is searched over, with the points that
 * would repeat another one pruned for the shape. Which points are valid is
 * the family's row (tile_ok), never restated here: each space walks its axes
 * and keeps the points its row accepts.
 *
 * Axes (DESIGN.md section 5, contractions):
 *  - dot form: register tiles mr in {1,2,3,4,6,8} x nr in {1,2,3,4,6,8,12,16}
 *    (not taller than M, nor wider than N), A rows per cache block mc in
 *    {16, 64, 256}, B rows per work item nc in {auto, 4, 16, 64 tiles} (up to
 *    the first that covers N: one item, no thread split), B prefetched 0, 8,
 *    16 or 32 chunks ahead; the tiles on the repacked copy also with a far
 *    level into L2 at twice that (pf2).
 *  - packed form: strips nr in {16, 32, 48, 64} lanes, tiles mr in
 *    {4, ..., 14} (not taller than M), K blocks kc in {all, 256, 512, 1024},
 *    A blocks mc in {64, 256}, items nc in {auto, 4, 16 strips}, the strip
 *    prefetched 16 K steps ahead or not.
 *  - packed decode reading strided B in place: nr in {16, 32, 64}, mr in
 *    {1, 2, 4}, nc in {auto, 4, 16 strips}, prefetch or not.
 *  - AMX: tiles mr x nr in {16, 32}^2, kc in {all, 256, 1024}, mc in
 *    {32, 128}, nc in {auto, 4, 16 strips}.
 * Invariant: a space's order is fixed (the ranking is a stable sort, so ties
 * keep it, and the generated code depends on it).
 */
#include "family.h"

#define N_OF(a) (sizeof(a) / sizeof *(a))

/* append s when the family's row takes it (out NULL: count only) */
static void keep(const sch_family *f, const sch_contract_sched *s, sch_contract_sched *out, int cap, int *n) {
    if (!sch_family_tile_ok(f, s)) return;
    if (out && *n < cap) out[*n] = *s;
    (*n)++;
}

/* a point of family f's space (serial 0: sch_space_contract adds the twins) */
static sch_contract_sched point(const sch_family *f, int mr, int nr, int mc, int nc, int kc, int pf) {
    return (sch_contract_sched){.mr = mr, .nr = nr, .nc = nc, .mc = mc, .arith = f->arith, .form = f->form, .kc = kc,
                                .pf = pf, .direct = f->direct, .rp = f->rp};
}

int sch_space_dot(const sch_family *f, const sch_contract_shape *sh, sch_contract_sched *out, int cap) {
    static const int mrs[] = {1, 2, 3, 4, 6, 8};
    static const int nrs[] = {1, 2, 3, 4, 6, 8, 12, 16};
    static const int mcs[] = {16, 64, 256};
    static const int ncs[] = {0, 4, 16, 64};
    static const int pfs[] = {0, 8, 16, 32}; /* software prefetch distance, 32-element chunks */
    int n = 0;
    for (size_t a = 0; a < N_OF(mrs); a++) {
        int mr = mrs[a];
        if (mr > 1 && mr > sh->m) continue;
        for (size_t b = 0; b < N_OF(nrs); b++) {
            int nr = nrs[b];
            if (nr > 1 && nr > sh->n) continue;
            for (size_t c = 0; c < N_OF(mcs); c++) {
                int mc = mcs[c];
                if (mc < mr) continue;
                /* one A block covers small M: the other mc values are the same schedule */
                if (c > 0 && mcs[c - 1] >= sh->m) continue;
                for (size_t d = 0; d < N_OF(ncs); d++) {
                    /* item widths past n are one item, run by the calling thread
                     * alone: the first such width stays (a small matrix-vector
                     * product, gemma3's 256-row k and v, is faster without the
                     * pool's wake-up and barrier: 7.9 vs 12.5 us at 2 threads) */
                    if (d > 1 && ncs[d - 1] * nr >= sh->n) continue;
                    for (size_t e = 0; e < N_OF(pfs); e++) {
                        sch_contract_sched s = point(f, mr, nr, mc, ncs[d] * nr, 0, pfs[e]);
                        keep(f, &s, out, cap, &n);
                        /* the rp tiles' far level at twice the near distance (other rows refuse it) */
                        s.pf2 = 2 * pfs[e];
                        if (pfs[e] > 0) keep(f, &s, out, cap, &n);
                    }
                }
            }
        }
    }
    return out && n > cap ? cap : n;
}

/* B is dequantised once per item and K block and reused by all M rows, so
 * the form serves large M only (the row's bucket) */
int sch_space_packed(const sch_family *f, const sch_contract_shape *sh, sch_contract_sched *out, int cap) {
    static const int nrs[] = {16, 32, 48, 64};
    static const int mrs[] = {4, 6, 8, 10, 12, 14};
    static const int kcs[] = {0, 256, 512, 1024};
    static const int mcs[] = {64, 256};
    static const int ncs[] = {0, 4, 16};
    static const int pfs[] = {16, 0}; /* strip prefetch 16 K steps ahead, or none */
    int n = 0;
    for (size_t b = 0; b < N_OF(nrs); b++) {
        int nr = nrs[b];
        for (size_t a = 0; a < N_OF(mrs); a++) {
            int mr = mrs[a];
            if (a > 0 && mr > sh->m) continue;
            for (size_t c = 0; c < N_OF(kcs); c++) {
                int kc = kcs[c];
                if (kc > 0 && kc >= sh->k) continue; /* the same as all of K */
                for (size_t e = 0; e < N_OF(mcs); e++) {
                    if (e > 0 && mcs[e - 1] >= sh->m) continue;
                    for (size_t d = 0; d < N_OF(ncs); d++) {
                        int nc = ncs[d] * nr;
                        if (nc > 0 && nc >= sh->n && d > 1) continue;
                        for (size_t g = 0; g < N_OF(pfs); g++) {
                            sch_contract_sched s = point(f, mr, nr, mcs[e], nc, kc, pfs[g]);
                            keep(f, &s, out, cap, &n);
                        }
                    }
                }
            }
        }
    }
    return out && n > cap ? cap : n;
}

/* decode with an f32 B strided along K (attention's values): the packed
 * form's tiles reading B's rows in place */
int sch_space_direct(const sch_family *f, const sch_contract_shape *sh, sch_contract_sched *out, int cap) {
    static const int nrs[] = {16, 32, 64};
    static const int mrs[] = {1, 2, 4};
    static const int ncs[] = {0, 4, 16};
    int n = 0;
    for (size_t b = 0; b < N_OF(nrs); b++)
        for (size_t a = 0; a < N_OF(mrs); a++) {
            if (a > 0 && mrs[a] > sh->m) continue;
            for (size_t d = 0; d < N_OF(ncs); d++)
                for (int pf = 0; pf < 2; pf++) {
                    sch_contract_sched s = point(f, mrs[a], nrs[b], 64, ncs[d] * nrs[b], 0, pf ? 16 : 0);
                    keep(f, &s, out, cap, &n);
                }
        }
    return out && n > cap ? cap : n;
}

int sch_space_amx(const sch_family *f, const sch_contract_shape *sh, sch_contract_sched *out, int cap) {
    static const int kcs[] = {0, 256, 1024};
    static const int mcs[] = {32, 128};
    static const int ncs[] = {0, 4, 16};
    int n = 0;
    for (int mr = 16; mr <= 32; mr += 16)
        for (int nr = 16; nr <= 32; nr += 16)
            for (size_t c = 0; c < N_OF(kcs); c++) {
                if (kcs[c] > 0 && kcs[c] >= sh->k) continue;
                for (size_t e = 0; e < N_OF(mcs); e++) {
                    if (e > 0 && mcs[e - 1] >= sh->m) continue;
                    for (size_t d = 0; d < N_OF(ncs); d++) {
                        int nc = ncs[d] * nr;
                        if (nc > 0 && nc >= sh->n && d > 1) continue;
                        sch_contract_sched s = point(f, mr, nr, mcs[e], nc, kcs[c], 0);
                        keep(f, &s, out, cap, &n);
                    }
                }
            }
    return out && n > cap ? cap : n;
}
