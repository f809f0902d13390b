/* cache_trim.h — keeps the kernel cache directory under a size bound by
 * removing the least recently used compiled objects (see cache_trim.c). */
#ifndef KILN_CACHE_TRIM_H
#define KILN_CACHE_TRIM_H

#include <stdint.h>

/* the bound in bytes: $KILN_CACHE_MAX_MB megabytes (0 disables trimming),
 * default 1024 MB */
uint64_t rt_cache_limit(void);

/* If the kiln-<hash>.so / .c pairs in dir total more than limit bytes,
 * remove pairs, least recently used first (an object's mtime: a cache hit
 * touches it), until they total at most 3/4 of it; temporary and error
 * files of compilers that died (older than an hour) go too. keep (a path,
 * or NULL) is never removed. Returns the number of pairs removed. Never
 * fails: a file it cannot stat or remove is left alone. */
int rt_cache_trim(const char *dir, uint64_t limit, const char *keep);

#endif
