/* base.h — the few utilities every module uses: assertions for broken
 * invariants (abort with file and line; never for bad user input), checked
 * allocation, a growable-array macro, the one monotonic clock (clock.c),
 * the one growable string (strbuf.c) and the one error-message writer
 * (errbuf.c). The environment is read in config.h / config.c only.
 */
#ifndef KILN_BASE_H
#define KILN_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kiln.h"

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

/* the monotonic clock (clock.c): seconds / nanoseconds from an arbitrary
 * origin; only differences mean anything */
double kiln_now_s(void);
int64_t kiln_now_ns(void);

/* a growable NUL-terminated string (strbuf.c); zero-initialise, append,
 * then kiln_sb_take (malloc'd, "" when empty) or free(b.s) */
typedef struct kiln_sb {
    char *s;    /* NULL until the first append; then s[len] == 0 */
    size_t len; /* bytes of text, not counting the NUL */
    size_t cap; /* bytes allocated */
} kiln_sb;
void kiln_sb_putn(kiln_sb *b, const char *s, size_t n);
void kiln_sb_puts(kiln_sb *b, const char *s);
void kiln_sb_printf(kiln_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *kiln_sb_take(kiln_sb *b);
/* the formatter under both kiln_sb and sch_appendf: append to (*buf, *len, *cap) */
void kiln_vappendf(char **buf, size_t *len, size_t *cap, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* the error buffer (errbuf.c): write the message into err (NULL or cap 0:
 * dropped; always terminated, truncated to fit) and return status */
kiln_status kiln_fail(char *err, size_t cap, kiln_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
kiln_status kiln_failv(char *err, size_t cap, kiln_status status, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* FNV-1a style hash mixing for hash-consing */
static inline uint64_t kiln_hash_mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0x100000001b3ULL;
}

#endif
