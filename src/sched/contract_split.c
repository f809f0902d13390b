/* contract_split.c — how many parts of M a contraction launch is cut into
 * (contract_split.h): the count whose busiest thread has the least work, by
 * dealing the items out exactly as the thread pool does.
 *
 * Invariants: parts are whole mr-row tiles (the same tiles the whole-M item
 * computes), at least SCH_MPART_MIN_ROWS rows each, and 1 part is the answer
 * whenever splitting gains nothing, so a launch with enough items is
 * unchanged.
 */
#include "contract_split.h"

int64_t sch_mpart_row(int64_t m, int mr, int64_t parts, int64_t i) {
    if (mr < 1) mr = 1;
    if (parts < 1) parts = 1;
    int64_t tiles = (m + mr - 1) / mr, r = (int64_t)mr * (tiles * i / parts);
    return r < m ? r : m;
}

/* the strips of run t of q over S strips (contract.h's runs) */
static int64_t run_strips(int64_t strips, int64_t q, int64_t t) { return strips * (t + 1) / q - strips * t / q; }

double sch_mparts_busiest(int64_t m, int mr, int64_t n, int nr, int64_t nbatch, int64_t q, int64_t parts,
                          int nthreads, double pack_rows) {
    if (nr < 1) nr = 1;
    if (q < 1) q = 1;
    if (nthreads < 1) nthreads = 1;
    int64_t strips = (n + nr - 1) / nr, items = nbatch * parts * q;
    int64_t T = nthreads < items ? nthreads : items;
    double most = 0;
    for (int64_t th = 0; th < T; th++) {
        double got = 0;
        for (int64_t w = items * th / T; w < items * (th + 1) / T; w++) {
            int64_t mp = (w / q) % parts;
            int64_t rows = sch_mpart_row(m, mr, parts, mp + 1) - sch_mpart_row(m, mr, parts, mp);
            got += (double)run_strips(strips, q, w % q) * ((double)rows + pack_rows);
        }
        if (got > most) most = got;
    }
    return most;
}

int64_t sch_contract_mparts(const sch_contract_sched *s, int64_t m, int64_t n, int64_t nbatch, int64_t q,
                            int nthreads) {
    if (nthreads <= 1 || m < 2 * SCH_MPART_MIN_ROWS || nbatch < 1 || q < 1) return 1;
    if (nbatch * q >= 8 * (int64_t)nthreads) return 1; /* items enough to deal out evenly */
    int mr = s->mr > 0 ? s->mr : 1, nr = s->nr > 0 ? s->nr : 1;
    /* a packed form packs its item's strips of B once per item: a part
     * repeats that, about the work of a few rows of A per strip */
    double pack = s->form == SCH_FORM_PACKED ? 4.0 : 0.0;
    int64_t best = 1;
    double best_w = sch_mparts_busiest(m, mr, n, nr, nbatch, q, 1, nthreads, pack);
    for (int64_t P = 2; P <= SCH_MPARTS_MAX; P++) {
        int64_t least = sch_mpart_row(m, mr, P, 1); /* the first part is the smallest */
        if (least < SCH_MPART_MIN_ROWS) break;
        double w = sch_mparts_busiest(m, mr, n, nr, nbatch, q, P, nthreads, pack);
        if (w < best_w * 0.98) { /* a real gain, not rounding */
            best = P;
            best_w = w;
        }
    }
    return best;
}
