/* strbuf.c — the one growable string of the library (declared in base.h).
 *
 * kiln_vappendf is the only place that grows a text buffer by formatting
 * into it; kiln_sb (a buffer with its length and capacity) and
 * sch_appendf (the loop IR's (buf, len, cap) triple) both go through it.
 * Invariant: after any call the text is NUL-terminated at s[len] (s may
 * be NULL only while nothing was ever appended); growth doubles, so
 * appending n bytes costs O(n) amortised.
 */
#include <stdarg.h>
#include <string.h>

#include "base.h"

static void reserve(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return;
    size_t nc = *cap ? *cap : 256;
    while (nc < need) nc *= 2;
    *buf = kiln_xrealloc(*buf, nc);
    *cap = nc;
}

void kiln_vappendf(char **buf, size_t *len, size_t *cap, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n < 0) n = 0;
    reserve(buf, cap, *len + (size_t)n + 1);
    vsnprintf(*buf + *len, *cap - *len, fmt, ap2);
    va_end(ap2);
    *len += (size_t)n;
}

void kiln_sb_putn(kiln_sb *b, const char *s, size_t n) {
    reserve(&b->s, &b->cap, b->len + n + 1);
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void kiln_sb_puts(kiln_sb *b, const char *s) { kiln_sb_putn(b, s, strlen(s)); }

void kiln_sb_printf(kiln_sb *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kiln_vappendf(&b->s, &b->len, &b->cap, fmt, ap);
    va_end(ap);
}

char *kiln_sb_take(kiln_sb *b) {
    char *s = b->s ? b->s : kiln_xstrdup("");
    b->s = NULL;
    b->len = b->cap = 0;
    return s;
}
