/* memplan.c — greedy interval placement (see memplan.h). Quadratic in the
 * number of buffers, which is the number of materialised nodes of one graph:
 * hundreds at most, planned once per change of the bound sizes. */
#include "memplan.h"

#include <stdlib.h>

#include "base.h"

static size_t align_up(size_t x) { return (x + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN; }

size_t rt_memplan(rt_live *b, int32_t n) {
    int32_t *order = kiln_xmalloc(((size_t)n + 1) * sizeof *order);
    int32_t *placed = kiln_xmalloc(((size_t)n + 1) * sizeof *placed);
    int32_t np = 0;
    for (int32_t i = 0; i < n; i++) order[i] = i;
    /* insertion sort by size, largest first; ties by index (deterministic) */
    for (int32_t i = 1; i < n; i++) {
        int32_t x = order[i], j = i - 1;
        while (j >= 0 && b[order[j]].bytes < b[x].bytes) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = x;
    }
    size_t peak = 0;
    for (int32_t oi = 0; oi < n; oi++) {
        rt_live *x = &b[order[oi]];
        x->offset = 0;
        if (x->first > x->last || x->bytes == 0) continue;
        size_t need = align_up(x->bytes);
        size_t off = 0;
        for (int changed = 1; changed;) {
            changed = 0;
            for (int32_t k = 0; k < np; k++) {
                const rt_live *y = &b[placed[k]];
                if (y->last < x->first || x->last < y->first) continue;
                size_t yend = y->offset + align_up(y->bytes);
                if (off < yend && y->offset < off + need) {
                    off = yend;
                    changed = 1;
                }
            }
        }
        x->offset = off;
        placed[np++] = order[oi];
        if (off + need > peak) peak = off + need;
    }
    free(order);
    free(placed);
    return peak;
}
