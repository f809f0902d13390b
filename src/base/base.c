/* base.c — assertion failure and checked allocation. */
#include "base.h"

#include <string.h>

_Noreturn void kiln_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "kiln: internal error: assertion '%s' failed at %s:%d\n", cond, file, line);
    abort();
}

void *kiln_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) kiln_assert_fail("out of memory", __FILE__, __LINE__);
    return p;
}

void *kiln_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) kiln_assert_fail("out of memory", __FILE__, __LINE__);
    return p;
}

void *kiln_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) kiln_assert_fail("out of memory", __FILE__, __LINE__);
    return q;
}

char *kiln_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = kiln_xmalloc(n);
    memcpy(d, s, n);
    return d;
}
