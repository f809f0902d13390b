/* test_egraph.c — the e-graph core against naive versions.
 *
 * Random small term DAGs are added to an e-graph, random pairs are unioned
 * (with rebuilds at random moments), and the resulting partition is compared
 * with a brute-force congruence closure computed over the terms directly
 * (repeat "same op and payload, kids equivalent => equivalent" to a fixpoint).
 * The same is done for a toy constant analysis. Invariants are checked after
 * every rebuild.
 */
#include <string.h>

#include "check.h"
#include "../../src/rewrite/egraph.h"

#define NT 40

static uint64_t rng_state = 88172645463325252ULL;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

typedef struct term { uint16_t op; int64_t arg; int nk; int kid[3]; } term;

/* ops: 0 leaf with arg, 1 unary, 2 and 3 binary, 4 ternary */
static void random_terms(term *t, int n) {
    for (int i = 0; i < n; i++) {
        memset(&t[i], 0, sizeof t[i]);
        if (i < 3 || rnd(4) == 0) {
            t[i].op = 0;
            t[i].arg = rnd(4);
            continue;
        }
        t[i].op = (uint16_t)(1 + rnd(4));
        t[i].nk = t[i].op == 1 ? 1 : t[i].op == 4 ? 3 : 2;
        for (int k = 0; k < t[i].nk; k++) t[i].kid[k] = (int)rnd((uint32_t)i);
    }
}

static int nf(int *p, int x) {
    while (p[x] != x) x = p[x] = p[p[x]];
    return x;
}

static int naive_closure(const term *t, int n, int *p) {
    int changed = 1, merges = 0;
    while (changed) {
        changed = 0;
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) {
                if (nf(p, i) == nf(p, j)) continue;
                if (t[i].op != t[j].op || t[i].arg != t[j].arg || t[i].nk != t[j].nk) continue;
                int eq = 1;
                for (int k = 0; k < t[i].nk; k++) eq &= nf(p, t[i].kid[k]) == nf(p, t[j].kid[k]);
                if (eq) {
                    p[nf(p, i)] = nf(p, j);
                    changed = 1;
                    merges++;
                }
            }
    }
    return merges;
}

/* toy analysis: op 0 with arg 0 is "constant"; op 2 (binary) of constants is */
static void toy_make(void *ctx, egraph *eg, const eg_node *n, eg_data *out) {
    (void)ctx;
    out->known = 1;
    if (n->op == 0 && n->arg == 0) out->has_const = 1;
    if (n->op == 2 && eg_data_of(eg, n->kids[0])->has_const && eg_data_of(eg, n->kids[1])->has_const)
        out->has_const = 1;
}

static eg_id add_term(egraph *eg, const term *t, const eg_id *cls) {
    eg_id kids[3];
    for (int k = 0; k < t->nk; k++) kids[k] = cls[t->kid[k]];
    eg_node n = eg_mk(t->op, 0, t->arg, 0, t->nk, kids);
    return eg_add(eg, &n);
}

static void congruence_trial(int trial, int *ok_out) {
    term t[NT];
    eg_id cls[NT];
    int p[NT];
    random_terms(t, NT);
    eg_hooks h = {NULL, toy_make, NULL};
    egraph *eg = eg_new(&h);
    for (int i = 0; i < NT; i++) cls[i] = add_term(eg, &t[i], cls);
    for (int i = 0; i < NT; i++) p[i] = i;
    naive_closure(t, NT, p); /* hash-consing merges identical terms */
    int nunions = 1 + (int)rnd(8);
    char msg[256];
    int ok = 1;
    for (int u = 0; u < nunions; u++) {
        int a = (int)rnd(NT), b = (int)rnd(NT);
        eg_union(eg, cls[a], cls[b]);
        p[nf(p, a)] = nf(p, b);
        if (rnd(3) == 0) {
            eg_rebuild(eg);
            if (eg_check_invariants(eg, msg, sizeof msg)) {
                printf("  trial %d mid-rebuild: %s\n", trial, msg);
                ok = 0;
            }
        }
    }
    eg_rebuild(eg);
    naive_closure(t, NT, p);
    if (eg_check_invariants(eg, msg, sizeof msg)) {
        printf("  trial %d: %s\n", trial, msg);
        ok = 0;
    }
    int nclasses = 0;
    for (int i = 0; i < NT; i++) {
        if (nf(p, i) == i) nclasses++;
        for (int j = 0; j < NT; j++) {
            int same_eg = eg_find(eg, cls[i]) == eg_find(eg, cls[j]);
            int same_naive = nf(p, i) == nf(p, j);
            if (same_eg != same_naive) {
                if (ok) printf("  trial %d: terms %d,%d e-graph %d naive %d\n", trial, i, j, same_eg, same_naive);
                ok = 0;
            }
        }
    }
    if ((int)eg->nlive_classes != nclasses) {
        printf("  trial %d: %u classes, naive %d\n", trial, eg->nlive_classes, nclasses);
        ok = 0;
    }
    /* naive constant analysis to a fixpoint over classes */
    int isc[NT] = {0}, ch = 1;
    while (ch) {
        ch = 0;
        for (int i = 0; i < NT; i++) {
            int c = (t[i].op == 0 && t[i].arg == 0) ||
                    (t[i].op == 2 && isc[nf(p, t[i].kid[0])] && isc[nf(p, t[i].kid[1])]);
            if (c && !isc[nf(p, i)]) isc[nf(p, i)] = ch = 1;
        }
    }
    for (int i = 0; i < NT; i++)
        if (isc[nf(p, i)] != eg_data_of(eg, cls[i])->has_const) {
            if (ok) printf("  trial %d: constant analysis of term %d: e-graph %d naive %d\n", trial, i,
                           eg_data_of(eg, cls[i])->has_const, isc[nf(p, i)]);
            ok = 0;
        }
    /* the number of distinct live nodes is the number of distinct canonical terms */
    int ndistinct = 0;
    for (int i = 0; i < NT; i++) {
        int dup = 0;
        for (int j = 0; j < i && !dup; j++) {
            if (t[i].op != t[j].op || t[i].arg != t[j].arg) continue;
            int eq = 1;
            for (int k = 0; k < t[i].nk; k++) eq &= nf(p, t[i].kid[k]) == nf(p, t[j].kid[k]);
            dup = eq;
        }
        ndistinct += !dup;
    }
    if ((int)eg->nlive_nodes != ndistinct) {
        printf("  trial %d: %u live nodes, naive %d\n", trial, eg->nlive_nodes, ndistinct);
        ok = 0;
    }
    eg_free(eg);
    if (!ok) *ok_out = 0;
}

int main(void) {
    CASE_BEGIN("egraph_hashcons");
    {
        egraph *eg = eg_new(NULL);
        eg_node a = eg_mk(0, 0, 1, 0, 0, NULL), b = eg_mk(0, 0, 2, 0, 0, NULL);
        eg_id ca = eg_add(eg, &a), cb = eg_add(eg, &b), ca2 = eg_add(eg, &a);
        eg_id k1[2] = {ca, cb}, k2[2] = {cb, ca};
        eg_node f1 = eg_mk(2, 0, 0, 0, 2, k1), f2 = eg_mk(2, 0, 0, 0, 2, k2);
        eg_id cf1 = eg_add(eg, &f1), cf2 = eg_add(eg, &f2);
        CHECK(ca == ca2, "equal leaves got classes %u and %u", ca, ca2);
        CHECK(ca != cb && cf1 != cf2, "distinct nodes share a class");
        CHECK(eg->nlive_nodes == 4 && eg->nlive_classes == 4, "%u nodes %u classes", eg->nlive_nodes, eg->nlive_classes);
        /* a = b makes f(a,b) and f(b,a) congruent, but only after rebuild */
        eg_union(eg, ca, cb);
        eg_rebuild(eg);
        CHECK(eg_find(eg, cf1) == eg_find(eg, cf2), "congruence not restored");
        CHECK(eg->nlive_classes == 2 && eg->nlive_nodes == 3, "%u classes %u nodes", eg->nlive_classes, eg->nlive_nodes);
        CHECK(eg_lookup(eg, &f2) == eg_find(eg, cf1), "lookup after merge");
        char msg[200];
        CHECK(eg_check_invariants(eg, msg, sizeof msg) == 0, "%s", msg);
        eg_free(eg);
    }
    CASE_END();

    CASE_BEGIN("egraph_chain_congruence");
    {
        /* f^n(a) with a = f(a) collapses everything into one class */
        egraph *eg = eg_new(NULL);
        eg_node a = eg_mk(0, 0, 0, 0, 0, NULL);
        eg_id c[20];
        c[0] = eg_add(eg, &a);
        for (int i = 1; i < 20; i++) {
            eg_node f = eg_mk(1, 0, 0, 0, 1, &c[i - 1]);
            c[i] = eg_add(eg, &f);
        }
        eg_union(eg, c[0], c[1]);
        eg_rebuild(eg);
        int all = 1;
        for (int i = 0; i < 20; i++) all &= eg_find(eg, c[i]) == eg_find(eg, c[0]);
        CHECK(all && eg->nlive_classes == 1 && eg->nlive_nodes == 2, "%u classes %u nodes", eg->nlive_classes,
              eg->nlive_nodes);
        eg_free(eg);
    }
    CASE_END();

    CASE_BEGIN("egraph_congruence_vs_bruteforce");
    {
        int ok = 1;
        for (int trial = 0; trial < 400; trial++) congruence_trial(trial, &ok);
        CHECK(ok, "e-graph and brute-force closure disagree (see above)");
    }
    CASE_END();

    CASE_BEGIN("egraph_many_nodes");
    {
        /* enough nodes to grow the memo several times; then a union cascade */
        egraph *eg = eg_new(NULL);
        eg_node a = eg_mk(0, 0, 0, 0, 0, NULL), b = eg_mk(0, 0, 1, 0, 0, NULL);
        eg_id x = eg_add(eg, &a), y = eg_add(eg, &b);
        eg_id lx = x, ly = y;
        for (int i = 0; i < 20000; i++) {
            eg_node fx = eg_mk(1, 0, i % 7, 0, 1, &lx), fy = eg_mk(1, 0, i % 7, 0, 1, &ly);
            lx = eg_add(eg, &fx);
            ly = eg_add(eg, &fy);
        }
        CHECK(eg->nlive_classes == 40002, "%u classes", eg->nlive_classes);
        eg_union(eg, x, y);
        uint32_t u = eg_rebuild(eg);
        CHECK(u == 20000 && eg_find(eg, lx) == eg_find(eg, ly), "%u congruence unions", u);
        char msg[200];
        CHECK(eg_check_invariants(eg, msg, sizeof msg) == 0, "%s", msg);
        eg_free(eg);
    }
    CASE_END();
    return check_exit();
}
