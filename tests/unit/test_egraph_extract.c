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

/* exhaustive count of trees by cost: cnt[c][x] = number of distinct trees of
 * class c costing exactly x (a generating-function form of enumerating them
 * all; every tree costs >= 1, so cost x only needs kid counts below x) */
#define BMAX 64
#define MAXC 64
static uint64_t sat_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }
static uint64_t sat_mul(uint64_t a, uint64_t b) { return a && b > UINT64_MAX / a ? UINT64_MAX : a * b; }

static uint64_t (*count_trees(egraph *eg))[BMAX + 1] {
    uint64_t (*cnt)[BMAX + 1] = calloc(eg->nclasses, sizeof *cnt);
    for (int x = 1; x <= BMAX; x++)
        for (eg_id c = 0; c < eg->nclasses; c++) {
            if (!eg_is_root(eg, c)) continue;
            const eg_class *k = &eg->classes[c];
            uint64_t total = 0;
            for (uint32_t i = 0; i < k->nnodes; i++) {
                const eg_node *nd = &eg->nodes[k->nodes[i]];
                int rem = x - (int)toy_cost(NULL, eg, nd);
                if (rem < 0) continue;
                eg_id a = nd->nkids > 0 ? eg_find(eg, nd->kids[0]) : 0, b = nd->nkids > 1 ? eg_find(eg, nd->kids[1]) : 0;
                eg_id d = nd->nkids > 2 ? eg_find(eg, nd->kids[2]) : 0;
                if (nd->nkids == 0) total = sat_add(total, rem == 0);
                else if (nd->nkids == 1) total = sat_add(total, cnt[a][rem]);
                else if (nd->nkids == 2)
                    for (int p = 1; p < rem; p++) total = sat_add(total, sat_mul(cnt[a][p], cnt[b][rem - p]));
                else
                    for (int p = 1; p < rem; p++)
                        for (int q = 1; p + q < rem; q++)
                            total = sat_add(total, sat_mul(sat_mul(cnt[a][p], cnt[b][q]), cnt[d][rem - p - q]));
            }
            cnt[c][x] = total;
        }
    return cnt;
}

/* the n cheapest tree costs of class c in ascending order; returns how many */
static int cheapest(uint64_t (*cnt)[BMAX + 1], eg_id c, int n, int *out) {
    int m = 0;
    for (int x = 1; x <= BMAX && m < n; x++)
        for (uint64_t i = 0; i < cnt[c][x] && m < n; i++) out[m++] = x;
    return m;
}


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
        int bad = 0, skipped = 0;
        int *all = malloc(sizeof(int) * MAXC);
        for (int trial = 0; trial < 300 && !bad; trial++) {
            eg_id root;
            egraph *eg = random_egraph(&root);
            eg_id *choice = malloc(sizeof(eg_id) * eg->nclasses);
            double *cost = malloc(sizeof(double) * eg->nclasses);
            eg_extract_best(eg, toy_cost, NULL, choice, cost);
            uint64_t (*cnt)[BMAX + 1] = count_trees(eg);
            int mn = -1;
            cheapest(cnt, root, 1, &mn);
            free(cnt);
            eg_terms ts;
            int ok = eg_terms_from_choice(eg, choice, &root, 1, &ts) == 0;
            char buf[4096];
            size_t pos = 0;
            int tc = 0;
            ok = ok && term_str(eg, &ts, ts.roots[0], root, buf, sizeof buf, &pos, &tc);
            if (cost[root] > BMAX) skipped++;
            else if (!ok || mn != (int)cost[root] || tc != (int)cost[root]) {
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
        CHECK(skipped < 30, "%d of 300 trials too large to enumerate", skipped);
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
            uint64_t (*cnt)[BMAX + 1] = count_trees(eg);
            int n = cheapest(cnt, root, (int)K, all);
            free(cnt);
            char strs[8][2048];
            /* trees above BMAX are not counted: compare what was */
            while (got > (uint32_t)n && out[got - 1].cost > BMAX) eg_terms_free(&out[--got]);
            if (n != (int)got) {
                printf("  trial %d: K %u got %u, exhaustive %d\n", trial, K, got, n);
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
