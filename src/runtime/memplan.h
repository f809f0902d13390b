/* memplan.h — place intermediate buffers in one arena by liveness.
 *
 * Each buffer has a size and a live interval [first, last] of kernel indices
 * (inclusive). Two buffers whose intervals intersect never overlap in memory;
 * buffers whose lives are disjoint may share bytes. Placement is greedy: the
 * largest buffers first, each at the lowest aligned offset that does not
 * collide with an already placed, simultaneously live buffer.
 */
#ifndef KILN_RUNTIME_MEMPLAN_H
#define KILN_RUNTIME_MEMPLAN_H

#include <stddef.h>
#include <stdint.h>

#define RT_ALIGN 64

typedef struct rt_live {
    size_t bytes;
    int32_t first, last; /* first > last: not used (gets offset 0, no space) */
    size_t offset;       /* out */
} rt_live;

/* plans n buffers; returns the arena size (the peak) */
size_t rt_memplan(rt_live *b, int32_t n);

#endif
