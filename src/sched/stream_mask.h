/* stream_mask.h — which key blocks of a stream kernel (stream.c) may be
 * skipped: the index comparisons inside its logits (masks written as index
 * arithmetic) and the logits' constant value under each outcome of them.
 * See stream_mask.c for the analysis and why skipping is exact. */
#ifndef KILN_SCHED_STREAM_MASK_H
#define KILN_SCHED_STREAM_MASK_H

#include "loop.h"

/* at most this many comparisons (2^n outcomes are tabled) */
#define SCH_MASK_MAX_LEAVES 6

typedef struct sch_stream_mask {
    int nleaves;
    int32_t leaf[SCH_MASK_MAX_LEAVES]; /* lx ids of LT nodes affine in the stream variable */
    uint8_t constant[1 << SCH_MASK_MAX_LEAVES]; /* outcome a (bit q: leaf q holds): the logits are constant */
    float value[1 << SCH_MASK_MAX_LEAVES];      /* ... and equal to this (f32) */
} sch_stream_mask;

/* fills m for stream kernel k and returns 1 when some outcome of its
 * comparisons makes the logits a constant (a key block where the comparisons
 * do not change may then be skipped); 0 otherwise (no skipping) */
int sch_stream_mask_analyse(const sch_program *p, const sch_kernel *k, sch_stream_mask *m);

#endif
