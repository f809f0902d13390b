/* cc_dedup.h — one copy of each distinct kernel body in the unit the C
 * compiler sees (cc_dedup.c). */
#ifndef KILN_CC_DEDUP_H
#define KILN_CC_DEDUP_H

/* src with every kernel body that two or more kernels share emitted once
 * (malloc'd), or NULL when no body is shared; *distinct and *kernels (may be
 * NULL) get the counts of distinct bodies and of kernels */
char *rt_cc_dedup(const char *src, int *distinct, int *kernels);
/* the bytes of the unit the C compiler is given for src: the deduplicated
 * text's, else src's (what a program's build costs scales with) */
size_t rt_cc_unit_bytes(const char *src);

#endif
