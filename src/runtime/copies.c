/* copies.c — the weight copies shared by one model's programs (copies.h):
 * a reference-counted store of an arena and a list of decode copies with
 * their users. A handful of entries per layer, so a linear search. */
#include "copies.h"

#include <stdlib.h>
#include <string.h>

#include "base.h"

rt_copies *rt_copies_new(size_t limit) {
    rt_copies *c = kiln_xcalloc(1, sizeof *c);
    c->refs = 1;
    c->arena.limit = limit;
    return c;
}

rt_copies *rt_copies_hold(rt_copies *c) {
    if (c) c->refs++;
    return c;
}

void rt_copies_drop(rt_copies *c) {
    if (!c || --c->refs > 0) return;
    rt_arena_free(&c->arena);
    free(c->e);
    free(c);
}

void *rt_copies_find(rt_copies *c, kiln_dtype t, const void *src, uint64_t gen, size_t bytes, int64_t k) {
    for (int i = 0; i < c->n; i++) {
        rt_copy_entry *e = &c->e[i];
        if (e->src == src && e->gen == gen && e->dtype == t && e->bytes == bytes && e->k == k) {
            e->users++;
            c->shared++;
            return e->data;
        }
    }
    return NULL;
}

void rt_copies_add(rt_copies *c, void *data, kiln_dtype t, const void *src, uint64_t gen, size_t bytes, int64_t k) {
    if (!data) return;
    KILN_GROW(c->e, c->cap, c->n + 1);
    rt_copy_entry *e = &c->e[c->n++];
    e->data = data;
    e->src = src;
    e->gen = gen;
    e->dtype = t;
    e->bytes = bytes;
    e->k = k;
    e->users = 1;
}

void rt_copies_put(rt_copies *c, void *data) {
    if (!data) return;
    for (int i = 0; i < c->n; i++) {
        if (c->e[i].data != data) continue;
        if (--c->e[i].users > 0) return;
        c->e[i] = c->e[--c->n];
        break;
    }
    rt_arena_release(&c->arena, data);
}
