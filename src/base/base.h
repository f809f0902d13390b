/* base.h — the few utilities every module uses: assertions for broken
 * invariants (abort with file and line; never for bad user input), checked
 * allocation, and a growable-array macro.
 */
#ifndef KILN_BASE_H
#define KILN_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define KILN_ASSERT(cond)                                                          \
    do {                                                                           \
        if (!(cond)) kiln_assert_fail(#cond, __FILE__, __LINE__);                  \
    } while (0)

_Noreturn void kiln_assert_fail(const char *cond, const char *file, int line);

/* allocation failure is treated as a broken invariant: kiln cannot continue */
void *kiln_xmalloc(size_t n);
void *kiln_xcalloc(size_t n, size_t size);
void *kiln_xrealloc(void *p, size_t n);
char *kiln_xstrdup(const char *s);

/* grow *arr (of element type T) so that index `need-1` fits; cap in elements */
#define KILN_GROW(arr, cap, need)                                                  \
    do {                                                                           \
        if ((size_t)(need) > (size_t)(cap)) {                                      \
            size_t kiln_ncap_ = (cap) ? (size_t)(cap) * 2 : 16;                    \
            while (kiln_ncap_ < (size_t)(need)) kiln_ncap_ *= 2;                   \
            (arr) = kiln_xrealloc((arr), kiln_ncap_ * sizeof(*(arr)));             \
            (cap) = (__typeof__(cap))kiln_ncap_;                                   \
        }                                                                          \
    } while (0)

/* FNV-1a style hash mixing for hash-consing */
static inline uint64_t kiln_hash_mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0x100000001b3ULL;
}

#endif
