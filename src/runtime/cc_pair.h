/* cc_pair.h — two generated programs as one translation unit (cc_pair.c),
 * so the kernel bodies they share are compiled once. */
#ifndef KILN_CC_PAIR_H
#define KILN_CC_PAIR_H

#include <stddef.h>
#include <stdint.h>

/* kernel numbers of the second program in a pair: kiln_k<N> is kiln_k<N + this> */
#define RT_CC_PAIR_OFFSET 1000000L

/* one source holding first's prelude, the parts of second's prelude first
 * lacks, a marker `kiln_pair_<marker as 16 hex digits>`, first's kernels and
 * second's kernels renumbered by RT_CC_PAIR_OFFSET (malloc'd); NULL when
 * the two cannot be joined safely (a source without kernels, a kernel
 * already numbered past the offset, a part of second's prelude that defines
 * a name first's defines differently, a part with no name kiln can read) */
/* a top-level part of a prelude and the name it defines ("" for an
 * #include or a comment, "?" when unreadable) */
typedef struct rt_cc_part {
    const char *at;
    size_t len;
    char name[128];
} rt_cc_part;
/* the top-level parts of src's prelude (text before its first kernel), in
 * order, into *out (malloc'd; NULL when none); their count */
int rt_cc_prelude_parts(const char *src, rt_cc_part **out);

char *rt_cc_pair_source(const char *first, const char *second, uint64_t marker);

#endif
