/* test_egraph_extract.c — extraction against exhaustive enumeration.
 *
 * Small random e-graphs (random terms plus random unions, so classes form
 * cycles) are built with integer node costs. Every tree a root class can
 * represent with cost <= B is enumerated by brute force; the best extraction
 * must cost the minimum, and the top-K extraction must return exactly the K
 * smallest costs of that enumeration, as valid and pairwise distinct trees
 * whose recomputed costs match the reported ones.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "../../src/rewrite/rewrite.h"

static uint64_t rs = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(uint32_t n) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs % n);
}

static double toy_cost(void *ctx, egraph *eg, const eg_node *n) {
    (void)ctx;
    (void)eg;
    return (double)(1 + (n->op * 3 + (uint32_t)n->arg) % 4);
}

/* all tree costs of class c that are <= budget, appended to *out (capped) */
#define MAXC 200000
static void enum_costs(egraph *eg, eg_id c, int budget, int *out, int *n);

static void enum_kids(egraph *eg, const eg_node *nd, int k, int acc, int budget, int *out, int *n) {
    if (*n >= MAXC) return;
    if (k == nd->nkids) {
        out[(*n)++] = acc;
        return;
    }
    int *sub = malloc(sizeof(int) * MAXC);
    int ns = 0;
    enum_costs(eg, nd->kids[k], budget - acc, sub, &ns);
    for (int i = 0; i < ns && *n < MAXC; i++) enum_kids(eg, nd, k + 1, acc + sub[i], budget, out, n);
    free(sub);
}

static void enum_costs(egraph *eg, eg_id c, int budget, int *out, int *n) {
    c = eg_find(eg, c);
    if (budget <= 0) return;
    const eg_class *k = &eg->classes[c];
    for (uint32_t i = 0; i < k->nnodes; i++) {
        const eg_node *nd = &eg->nodes[k->nodes[i]];
        int own = (int)toy_cost(NULL, eg, nd);
        if (own > budget) continue;
        enum_kids(eg, nd, 0, own, budget, out, n);
    }
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* the tree under term t as a string; also checks validity and sums costs */
static int term_str(egraph *eg, const eg_terms *ts, uint32_t t, eg_id want_class, char *buf, size_t cap, size_t *pos,
                    int *cost) {
    const eg_term *tm = &ts->t[t];
    const eg_node *nd = &eg->nodes[tm->node];
    if (eg->node_dead[tm->node] || eg_find(eg, eg->node_class[tm->node]) != eg_find(eg, want_class)) return 0;
    *cost += (int)toy_cost(NULL, eg, nd);
    *pos += (size_t)snprintf(buf + *pos, *pos < cap ? cap - *pos : 0, "(%d.%lld", nd->op, (long long)nd->arg);
    for (int i = 0; i < nd->nkids; i++)
        if (!term_str(eg, ts, tm->kids[i], nd->kids[i], buf, cap, pos, cost)) return 0;
    *pos += (size_t)snprintf(buf + *pos, *pos < cap ? cap - *pos : 0, ")");
    return 1;
}

static egraph *random_egraph(eg_id *root) {
    egraph *eg = eg_new(NULL);
    eg_id cls[14];
    int n = 6 + (int)rnd(8);
    for (int i = 0; i < n; i++) {
        eg_node nd;
        if (i < 2 || rnd(4) == 0) {
            nd = eg_mk(0, 0, rnd(3), 0, 0, NULL);
        } else {
            eg_id kids[3];
            int nk = 1 + (int)rnd(3);
            for (int k = 0; k < nk; k++) kids[k] = cls[rnd((uint32_t)i)];
            nd = eg_mk((uint16_t)nk, 0, rnd(3), 0, nk, kids);
        }
        cls[i] = eg_add(eg, &nd);
    }
    int nu = (int)rnd(4);
    for (int u = 0; u < nu; u++) eg_union(eg, cls[rnd((uint32_t)n)], cls[rnd((uint32_t)n)]);
    eg_rebuild(eg);
    *root = eg_find(eg, cls[n - 1]);
    return eg;
}

int main(void) {
    CASE_BEGIN("extract_best_vs_exhaustive");
    {
        int bad = 0;
        int *all = malloc(sizeof(int) * MAXC);
        for (int trial = 0; trial < 300 && !bad; trial++) {
            eg_id root;
            egraph *eg = random_egraph(&root);
            eg_id *choice = malloc(sizeof(eg_id) * eg->nclasses);
            double *cost = malloc(sizeof(double) * eg->nclasses);
            eg_extract_best(eg, toy_cost, NULL, choice, cost);
            int n = 0;
            enum_costs(eg, root, (int)cost[root], all, &n);
            int mn = 1 << 30;
            for (int i = 0; i < n; i++) mn = all[i] < mn ? all[i] : mn;
            eg_terms ts;
            int ok = eg_terms_from_choice(eg, choice, &root, 1, &ts) == 0;
            char buf[4096];
            size_t pos = 0;
            int tc = 0;
            ok = ok && term_str(eg, &ts, ts.roots[0], root, buf, sizeof buf, &pos, &tc);
            if (!ok || mn != (int)cost[root] || tc != (int)cost[root]) {
                printf("  trial %d: best %g, exhaustive min %d, tree cost %d, valid %d\n", trial, cost[root], mn, tc, ok);
                bad = 1;
            }
            eg_terms_free(&ts);
            free(choice);
            free(cost);
            eg_free(eg);
        }
        free(all);
        CHECK(!bad, "best extraction is not the cheapest tree");
    }
    CASE_END();

    CASE_BEGIN("extract_topk_vs_exhaustive");
    {
        int bad = 0;
        int *all = malloc(sizeof(int) * MAXC);
        for (int trial = 0; trial < 300 && !bad; trial++) {
            eg_id root;
            egraph *eg = random_egraph(&root);
            uint32_t K = 1 + rnd(8);
            eg_terms out[8];
            uint32_t got = eg_extract_topk(eg, toy_cost, NULL, &root, 1, K, out);
            int budget = got == K ? (int)out[K - 1].cost : 40;
            int n = 0;
            enum_costs(eg, root, budget, all, &n);
            qsort(all, (size_t)n, sizeof(int), cmp_int);
            char strs[8][2048];
            if (n < (int)got || (got < K && n != (int)got)) {
                printf("  trial %d: K %u got %u, exhaustive %d trees <= %d\n", trial, K, got, n, budget);
                bad = 1;
            }
            for (uint32_t i = 0; i < got && !bad; i++) {
                size_t pos = 0;
                int tc = 0;
                int ok = term_str(eg, &out[i], out[i].roots[0], root, strs[i], sizeof strs[i], &pos, &tc);
                if (!ok || tc != (int)out[i].cost || all[i] != tc) {
                    printf("  trial %d: #%u cost %g tree %d exhaustive %d valid %d\n", trial, i, out[i].cost, tc,
                           all[i], ok);
                    bad = 1;
                }
                for (uint32_t j = 0; j < i && !bad; j++)
                    if (strcmp(strs[i], strs[j]) == 0) {
                        printf("  trial %d: #%u and #%u are the same tree %s\n", trial, i, j, strs[i]);
                        bad = 1;
                    }
            }
            for (uint32_t i = 0; i < got; i++) eg_terms_free(&out[i]);
            eg_free(eg);
        }
        free(all);
        CHECK(!bad, "top-K extraction disagrees with enumeration");
    }
    CASE_END();

    CASE_BEGIN("extract_topk_two_roots");
    {
        /* two roots with 2 and 3 alternatives: 6 combinations, costs add */
        egraph *eg = eg_new(NULL);
        eg_node a1 = eg_mk(0, 0, 0, 0, 0, NULL), a2 = eg_mk(0, 0, 1, 0, 0, NULL); /* costs 1, 2 */
        eg_node b1 = eg_mk(0, 0, 1, 0, 0, NULL), b2 = eg_mk(0, 0, 2, 0, 0, NULL), b3 = eg_mk(0, 0, 5, 0, 0, NULL);
        eg_id ra = eg_add(eg, &a1);
        eg_union(eg, ra, eg_add(eg, &a2));
        eg_id rb = eg_add(eg, &b2);
        eg_union(eg, rb, eg_add(eg, &b3)); /* b1 == a2 would merge classes: keep b1 out */
        eg_rebuild(eg);
        (void)b1;
        eg_id roots[2] = {eg_find(eg, ra), eg_find(eg, rb)};
        eg_terms out[8];
        uint32_t got = eg_extract_topk(eg, toy_cost, NULL, roots, 2, 8, out);
        CHECK(got == 4, "got %u of 4 combinations", got);
        int sorted = 1;
        for (uint32_t i = 1; i < got; i++) sorted &= out[i - 1].cost <= out[i].cost;
        CHECK(sorted && got > 0 && out[0].cost == 1 + 2, "first cost %g", got ? out[0].cost : -1);
        for (uint32_t i = 0; i < got; i++) eg_terms_free(&out[i]);
        eg_free(eg);
    }
    CASE_END();
    return check_exit();
}
