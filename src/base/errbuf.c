/* errbuf.c — the one way library code writes an error message (declared in
 * base.h).
 *
 * Errors the world can cause travel as a status plus a message in a
 * caller-supplied buffer (char *err, size_t cap). kiln_fail writes the
 * message and hands the status back, so a failing path is one line:
 * `return kiln_fail(err, cap, KILN_ERR_IO, "cannot open %s", path);`.
 * Invariant: a NULL buffer or zero capacity is allowed (the message is
 * dropped); the message is always NUL-terminated and truncated to fit.
 */
#include <stdarg.h>

#include "base.h"

kiln_status kiln_failv(char *err, size_t cap, kiln_status status, const char *fmt, va_list ap) {
    if (err && cap) vsnprintf(err, cap, fmt, ap);
    return status;
}

kiln_status kiln_fail(char *err, size_t cap, kiln_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kiln_failv(err, cap, status, fmt, ap);
    va_end(ap);
    return status;
}
