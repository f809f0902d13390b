/* registry.c — the one list of backends kiln was built with.
 *
 * Every lookup by name (kiln_compile's option and $KILN_BACKEND, the CLI's
 * --backend, `kiln tune`'s fingerprint) and `kiln device`'s list read this
 * array; a backend's name is spelt once, in its own table. The CPU comes
 * first: it is the default. Adding a backend adds its table's address here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "base.h"
#include "config.h"
#include "loop.h"

const rt_backend *const rt_backends[] = {&rt_cpu_backend, &rt_opencl_backend, &rt_cuda_backend, NULL};

const rt_backend *rt_backend_find(const char *name) {
    if (!name || !name[0]) { /* no name: $KILN_BACKEND (src/base/config.c), else the CPU */
        kiln_env e;
        kiln_env_read(&e);
        name = e.compile.backend;
    }
    if (!name || !name[0]) return rt_backends[0];
    for (int i = 0; rt_backends[i]; i++)
        if (strcmp(rt_backends[i]->name, name) == 0) return rt_backends[i];
    return NULL;
}

const char *rt_backend_names(void) {
    static char names[256];
    if (!names[0]) {
        size_t len = 0;
        for (int i = 0; rt_backends[i] && len < sizeof names; i++)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", rt_backends[i]->name);
    }
    return names;
}

/* `kiln device`'s part for the backends with devices to list: text, or the
 * members of a JSON object (malloc'd, "" when none) */
char *rt_backend_devices_report(int json) {
    char *s = NULL;
    size_t len = 0, cap = 0;
    int n = 0;
    for (int i = 0; rt_backends[i]; i++) {
        if (!rt_backends[i]->devices) continue;
        char *part = rt_backends[i]->devices(rt_backends[i], json);
        if (!part) continue;
        sch_appendf(&s, &len, &cap, "%s%s", json && n ? ", " : "", part);
        free(part);
        n++;
    }
    return s ? s : kiln_xstrdup("");
}

/* ---- the public face (kiln_compile.h) ---- */

const char *kiln_backend_name(int i) {
    int n = 0;
    while (rt_backends[n]) n++;
    return i >= 0 && i < n ? rt_backends[i]->name : NULL;
}

const char *kiln_backend_label(const char *name) {
    const rt_backend *be = rt_backend_find(name);
    return be ? be->label : NULL;
}

const char *kiln_backend_names(void) { return rt_backend_names(); }

int kiln_backend_host_memory(const char *name) {
    const rt_backend *be = rt_backend_find(name);
    return be && (be->caps & RT_CAP_HOST_MEMORY) ? 1 : 0;
}

char *kiln_backend_fingerprint(const char *name) {
    const rt_backend *be = rt_backend_find(name);
    return be ? be->fingerprint(be) : NULL;
}
