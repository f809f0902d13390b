/* release.h — whether a weight's decode copy replaces it everywhere
 * (release.c), so that the weight's owner may let its pages go. */
#ifndef KILN_RUNTIME_RELEASE_H
#define KILN_RUNTIME_RELEASE_H

#include <stdint.h>

typedef struct kiln_program kiln_program;

/* 1 when every kernel of the program that reads buffer b reads B's 8-row
 * copy instead, in both buckets, with no search of them to come (see
 * release.c); copy_whole: the copy holds every row of B */
int rt_copy_replaces(const kiln_program *p, int32_t b, int copy_whole);

#endif
