/* cc_dedup.h — one copy of each distinct kernel body in the unit the C
 * compiler sees (cc_dedup.c). */
#ifndef KILN_CC_DEDUP_H
#define KILN_CC_DEDUP_H

/* src with every kernel body that two or more kernels share emitted once
 * (malloc'd), or NULL when no body is shared; *distinct and *kernels (may be
 * NULL) get the counts of distinct bodies and of kernels */
char *rt_cc_dedup(const char *src, int *distinct, int *kernels);
/* how a shared body's definition starts: right after the first kernel that
 * calls it, so that a build in parts (cc_split.c) keeps the two together */
#define RT_CC_BODY_MARK "__attribute__((noinline, visibility(\"hidden\"))) int kiln_body_"
/* the bytes of the unit the C compiler is given for src: the deduplicated
 * text's, else src's (what a program's build costs scales with) */
size_t rt_cc_unit_bytes(const char *src);

#endif
