/* version.c — the library's version string and the one release function for
 * what it hands to callers (malloc'd text), so that bindings free with the
 * allocator that allocated.
 */
#include <stdlib.h>

#include "kiln.h"

#define KILN_STR_(x) #x
#define KILN_STR(x) KILN_STR_(x)

const char *kiln_version(void) {
    return KILN_STR(KILN_VERSION_MAJOR) "." KILN_STR(KILN_VERSION_MINOR) "." KILN_STR(KILN_VERSION_PATCH);
}

void kiln_free(void *p) { free(p); }
