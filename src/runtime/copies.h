/* copies.h — the weight copies of the programs that run one model's graph
 * (a program and its alternative attention form, kiln_program.alt): one
 * arena for all of them, and each decode copy held once, found by what it
 * copies (the weight's bytes and binding, its dtype, its row length).
 *
 * Before, each program made its own copies (rt_cpu_state per program): a
 * run that used both forms (short prompts materialised, decode and long
 * prompts streaming) held every weight's copy twice, and the second
 * program re-read the originals the first one had released.
 *
 * Invariants: a copy is freed when its last user puts it; the arena when
 * the last program lets the store go; a copy found is byte for byte the
 * one the finder would have made (same source bytes under the same
 * binding, same dtype, bytes and k: rt_repack_x8 is a function of them).
 */
#ifndef KILN_RUNTIME_COPIES_H
#define KILN_RUNTIME_COPIES_H

#include <stddef.h>
#include <stdint.h>

#include "kiln.h"
#include "repack.h"

typedef struct rt_copy_entry {
    void *data; /* the copy, a piece of the store's arena */
    const void *src;
    uint64_t gen;
    kiln_dtype dtype;
    size_t bytes; /* of src */
    int64_t k;
    int users;
} rt_copy_entry;

typedef struct rt_copies {
    int refs;       /* programs holding the store */
    rt_arena arena; /* every program's copies (decode and pack) */
    rt_copy_entry *e;
    int n, cap;
    int64_t shared; /* copies found rather than made (a counter for tests and reports) */
} rt_copies;

rt_copies *rt_copies_new(size_t limit);
/* one more program holds c */
rt_copies *rt_copies_hold(rt_copies *c);
/* a program lets c go; the last frees the arena and every copy */
void rt_copies_drop(rt_copies *c);
/* the decode copy of src (bound as binding gen, bytes of dtype t, rows of
 * k) when some program made it, with one more user; else NULL */
void *rt_copies_find(rt_copies *c, kiln_dtype t, const void *src, uint64_t gen, size_t bytes, int64_t k);
/* data (a piece of c->arena) is that copy, with one user */
void rt_copies_add(rt_copies *c, void *data, kiln_dtype t, const void *src, uint64_t gen, size_t bytes, int64_t k);
/* one user fewer of a copy (rt_copies_add's data); at none it is released.
 * A piece the store does not know is released at once. NULL: nothing. */
void rt_copies_put(rt_copies *c, void *data);

#endif
