/* unionfind.c — the union-find under kiln's e-graph: one parent id per class.
 *
 * Invariants: parent[x] == x exactly for representatives; parent chains are
 * acyclic and end at a representative. Linking is decided by the caller (the
 * e-graph links by size of parent lists, which is what keeps rebuilds cheap);
 * find shortens paths by halving, so repeated finds are amortised near O(1).
 */
#include "base.h"
#include "egraph.h"

void uf_init(eg_uf *u) {
    u->parent = NULL;
    u->n = u->cap = 0;
}

void uf_free(eg_uf *u) {
    free(u->parent);
    uf_init(u);
}

eg_id uf_make(eg_uf *u) {
    KILN_GROW(u->parent, u->cap, u->n + 1);
    u->parent[u->n] = u->n;
    return u->n++;
}

eg_id uf_find(eg_uf *u, eg_id x) {
    KILN_ASSERT(x < u->n);
    while (u->parent[x] != x) {
        u->parent[x] = u->parent[u->parent[x]];
        x = u->parent[x];
    }
    return x;
}

eg_id uf_find_const(const eg_uf *u, eg_id x) {
    KILN_ASSERT(x < u->n);
    while (u->parent[x] != x) x = u->parent[x];
    return x;
}

void uf_link(eg_uf *u, eg_id keep, eg_id drop) {
    KILN_ASSERT(u->parent[keep] == keep && u->parent[drop] == drop);
    u->parent[drop] = keep;
}
