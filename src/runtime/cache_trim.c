/* cache_trim.c — the kernel cache's size bound (cache_trim.h).
 *
 * Every compiled program leaves kiln-<hash>.c and kiln-<hash>.so in the
 * cache directory (cpu.c), and a tuning search compiles hundreds of
 * candidates, so without a bound the directory only grows (1.4 GB and
 * 8,000 files on the development machine after a few weeks). cpu.c calls
 * rt_cache_trim after a process's first new object and then every 1/16 of
 * the bound it adds; it removes whole pairs in least recently used order. Removing an object another process has loaded is
 * safe (the mapping stays); one that a process is about to dlopen fails to
 * load there and is rebuilt (cpu.c treats an unloadable object as damaged).
 *
 * An alias (kiln-<hash>.alias: a program held by a pair's object, cpu.c)
 * goes with the object it names.
 *
 * Invariants: only names of the cache's own form are touched; the object
 * just written (keep) stays; no error is reported, the trim is best effort.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "config.h"
#include "cache_trim.h"

uint64_t rt_cache_limit(void) {
    kiln_env e;
    kiln_env_read(&e);
    return e.host.cache_max_bytes;
}

typedef struct entry {
    char stem[64]; /* kiln-<hash> */
    uint64_t bytes; /* .so + .c */
    time_t used;    /* the .so's mtime */
} entry;

static int by_age(const void *a, const void *b) {
    const entry *x = a, *y = b;
    return x->used < y->used ? -1 : x->used > y->used ? 1 : strcmp(x->stem, y->stem);
}

/* kiln-<16 hex>.so */
static int object_name(const char *n) {
    size_t l = strlen(n);
    if (l != 5 + 16 + 3 || strncmp(n, "kiln-", 5) != 0 || strcmp(n + l - 3, ".so") != 0) return 0;
    for (size_t i = 5; i < 21; i++)
        if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f'))) return 0;
    return 1;
}

/* kiln-<16 hex>.alias files (a program found in a pair's object, cpu.c)
 * whose object is gone: removed, as the object's own pair would be */
static void drop_dangling_aliases(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char path[1200], target[1200], text[96], name[64];
    while ((de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        size_t l = strlen(nm);
        if (l != 5 + 16 + 6 || strncmp(nm, "kiln-", 5) != 0 || strcmp(nm + l - 6, ".alias") != 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, nm);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = 0;
        int named = sscanf(text, "%40s", name) == 1 && object_name(name);
        snprintf(target, sizeof target, "%s/%s", dir, named ? name : "");
        if (!named || access(target, F_OK) != 0) remove(path);
    }
    closedir(d);
}

int rt_cache_trim(const char *dir, uint64_t limit, const char *keep) {
    if (!dir || limit == 0) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    entry *es = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    time_t now = time(NULL);
    char path[1200];
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, nm);
        if (strncmp(nm, "kiln-", 5) == 0 &&
            (strstr(nm, ".so.tmp.") || strstr(nm, ".so.err.") || strstr(nm, ".pair.c") || strstr(nm, ".dedup.c"))) {
            /* a compiler that died: its leftovers, once surely not in use */
            if (stat(path, &st) == 0 && now - st.st_mtime > 3600) remove(path);
            continue;
        }
        if (!object_name(nm) || stat(path, &st) != 0) continue;
        if (keep && strcmp(path, keep) == 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            es = kiln_xrealloc(es, cap * sizeof *es);
        }
        entry *e = &es[n++];
        snprintf(e->stem, sizeof e->stem, "%.*s", (int)(strlen(nm) - 3), nm);
        e->bytes = (uint64_t)st.st_size;
        e->used = st.st_mtime;
        snprintf(path, sizeof path, "%s/%s.c", dir, e->stem);
        if (stat(path, &st) == 0) e->bytes += (uint64_t)st.st_size;
        total += e->bytes;
    }
    closedir(d);
    int removed = 0;
    if (total > limit) {
        qsort(es, n, sizeof *es, by_age);
        uint64_t target = limit / 4 * 3;
        for (size_t i = 0; i < n && total > target; i++) {
            snprintf(path, sizeof path, "%s/%s.so", dir, es[i].stem);
            if (remove(path) != 0) continue;
            snprintf(path, sizeof path, "%s/%s.c", dir, es[i].stem);
            remove(path);
            total -= es[i].bytes;
            removed++;
        }
    }
    free(es);
    drop_dangling_aliases(dir);
    return removed;
}
