/* cc_split.c — build one large generated C program as several translation
 * units compiled at once, then linked into one shared object: the C compiler
 * runs on one core, and a model's program (2 MB of C for gemma3-270m, ~15 s
 * at -O2) is most of a first `kiln run`'s wait.
 *
 * The cut: the prelude is everything before the first line that starts a
 * kernel function ("int kiln_k"); every part is the prelude followed by a
 * run of whole kernels, the runs balanced by bytes. The prelude holds only
 * static (internal) definitions, so each part has its own copy and the link
 * sees each kernel once. A source that does not have this shape, a part
 * that fails to compile (a part calling a function that another part
 * defines is an error: -Werror=implicit-function-declaration) or link, or
 * an object that does not load with every symbol resolved (RTLD_NOW), makes
 * rt_cc_split_build return nonzero and
 * the caller compiles the source whole (which also gives the compiler's
 * message for a real error). The object is the same program either way:
 * the cache key (cpu.c) is the hash of the whole source.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base.h"
#include "cc_split.h"

#define KERNEL_MARK "\nint kiln_k"
#define MAX_PARTS 8

static int write_all(const char *path, const char *a, size_t na, const char *b, size_t nb) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int bad = fwrite(a, 1, na, f) != na || fwrite(b, 1, nb, f) != nb;
    return fclose(f) != 0 || bad ? -1 : 0;
}

/* single quotes for sh; a path with a quote is refused (the cache paths kiln
 * makes never have one) */
static int quoted(char *out, size_t cap, const char *s) {
    if (strchr(s, '\'')) return -1;
    int n = snprintf(out, cap, "'%s'", s);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int rt_cc_split_parts(size_t src_len, int cores) {
    if (cores < 2 || src_len < ((size_t)256 << 10)) return 1;
    int n = cores < MAX_PARTS ? cores : MAX_PARTS;
    /* parts of at least 128 KB: below that the prelude's copies cost more than they save */
    while (n > 1 && src_len / (size_t)n < ((size_t)128 << 10)) n--;
    return n;
}

int rt_cc_split_build(const char *src, int nparts, const char *cc, const char *flags, const char *out_so,
                      const char *tmp_base) {
    if (nparts < 2 || nparts > MAX_PARTS) return -1;
    const char *first = strstr(src, KERNEL_MARK);
    if (!first) return -1;
    size_t pre = (size_t)(first - src) + 1, total = strlen(src);
    /* cut points: the kernel starts nearest each 1/nparts of the kernels' bytes */
    size_t cut[MAX_PARTS + 1];
    int n = 0;
    cut[n++] = pre;
    for (int i = 1; i < nparts; i++) {
        size_t want = pre + (total - pre) * (size_t)i / (size_t)nparts;
        const char *at = strstr(src + (want > cut[n - 1] ? want : cut[n - 1] + 1) - 1, KERNEL_MARK);
        if (!at) break;
        size_t c = (size_t)(at - src) + 1;
        if (c > cut[n - 1] && c < total) cut[n++] = c;
    }
    cut[n] = total;
    if (n < 2) return -1;

    char cmd[16384], q[1200], qo[1200];
    size_t used = 0;
    int ok = 1;
    /* every part in the background, then wait for each: the status of the
     * whole command is nonzero when any part failed */
    used += (size_t)snprintf(cmd + used, sizeof cmd - used, "fail=0; ");
    for (int i = 0; i < n && ok; i++) {
        char cpath[1100], opath[1100];
        snprintf(cpath, sizeof cpath, "%s.p%d.c", tmp_base, i);
        snprintf(opath, sizeof opath, "%s.p%d.o", tmp_base, i);
        if (write_all(cpath, src, pre, src + cut[i], cut[i + 1] - cut[i]) != 0 || quoted(q, sizeof q, cpath) != 0 ||
            quoted(qo, sizeof qo, opath) != 0) {
            ok = 0;
            break;
        }
        int w = snprintf(cmd + used, sizeof cmd - used,
                         "%s %s -Werror=implicit-function-declaration -c -o %s %s 2>/dev/null & p%d=$!; ", cc, flags,
                         qo, q, i);
        if (w < 0 || (size_t)w >= sizeof cmd - used) ok = 0;
        else used += (size_t)w;
    }
    for (int i = 0; i < n && ok; i++) {
        int w = snprintf(cmd + used, sizeof cmd - used, "wait $p%d || fail=1; ", i);
        if (w < 0 || (size_t)w >= sizeof cmd - used) ok = 0;
        else used += (size_t)w;
    }
    if (ok) {
        char qso[1200];
        ok = quoted(qso, sizeof qso, out_so) == 0;
        int w = snprintf(cmd + used, sizeof cmd - used, "[ $fail = 0 ] && %s -shared -o %s", cc, qso);
        if (!ok || w < 0 || (size_t)w >= sizeof cmd - used) ok = 0;
        else used += (size_t)w;
        for (int i = 0; i < n && ok; i++) {
            char opath[1100];
            snprintf(opath, sizeof opath, "%s.p%d.o", tmp_base, i);
            ok = quoted(qo, sizeof qo, opath) == 0;
            w = snprintf(cmd + used, sizeof cmd - used, " %s", qo);
            if (!ok || w < 0 || (size_t)w >= sizeof cmd - used) ok = 0;
            else used += (size_t)w;
        }
        if (ok) {
            w = snprintf(cmd + used, sizeof cmd - used, " 2>/dev/null");
            if (w < 0 || (size_t)w >= sizeof cmd - used) ok = 0;
        }
    }
    int st = ok ? system(cmd) : -1;
    for (int i = 0; i < n; i++) {
        char path[1100];
        snprintf(path, sizeof path, "%s.p%d.c", tmp_base, i);
        remove(path);
        snprintf(path, sizeof path, "%s.p%d.o", tmp_base, i);
        remove(path);
    }
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        remove(out_so);
        return -1;
    }
    /* a symbol one part needs from another would link (a shared object may
     * leave symbols undefined) and fail at load: load it now to know */
    void *h = dlopen(out_so, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        remove(out_so);
        return -1;
    }
    dlclose(h);
    return 0;
}
