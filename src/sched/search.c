/* search.c — the device-free parts of the contraction search: the space
 * (the union of the family table's spaces that apply to a shape, family.h
 * and space_contract.c, plus serial=1 twins for decode on a pool), ranking,
 * tie rules, rank correlation, shape buckets and the space's description.
 * No limit of a micro-kernel is stated here: validity is the family row's.
 * Tiles taller than M are skipped (they only compute padding).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract.h"
#include "dtype.h"
#include "family.h"
#include "search.h"

static int space_forms(const sch_contract_shape *sh, sch_contract_sched *out, int cap);

/* The space, and for decode on a pool of more than one thread each
 * schedule that would split the kernel again with serial=1 (the whole
 * kernel on the calling thread: small products, attention's scores over a
 * short cache, are faster without the split) */
int sch_space_contract(const sch_contract_shape *sh, sch_contract_sched *out, int cap) {
    if (!(sh->m <= SCH_SMALL_M && sh->nthreads > 1)) return space_forms(sh, out, cap);
    int base = space_forms(sh, NULL, 0), n = 0;
    sch_contract_sched *all = malloc((size_t)(base > 0 ? base : 1) * sizeof *all);
    if (!all) return space_forms(sh, out, cap);
    space_forms(sh, all, base);
    for (int i = 0; i < base; i++, n++)
        if (out && n < cap) out[n] = all[i];
    for (int i = 0; i < base; i++) {
        const sch_contract_sched *s = &all[i];
        const sch_family *f = sch_family_of(s);
        if (!f || !f->serial) continue;
        if (sh->nbatch * sch_contract_runs(s, sh->n, sh->nbatch, sh->nthreads) <= 1) continue; /* one item already */
        if (out && n < cap) {
            out[n] = *s;
            out[n].serial = 1;
        }
        n++;
    }
    free(all);
    return n;
}

/* the rows of the family table that apply to the shape, each its own space,
 * in table order */
static int space_forms(const sch_contract_shape *sh, sch_contract_sched *out, int cap) {
    int n = 0;
    for (int i = 0; i < SCH_FAM_COUNT; i++) {
        const sch_family *f = &sch_families[i];
        if (!sch_family_applies(f, sh)) continue;
        if (!out) {
            n += f->space(f, sh, NULL, 0);
            continue;
        }
        if (n < cap) n += f->space(f, sh, out + n, cap - n);
    }
    return n;
}

void sch_rank_by_cost(const double *cost, int *idx, int n) {
    for (int i = 0; i < n; i++) idx[i] = i;
    /* insertion sort: stable and the spaces are a few hundred */
    for (int i = 1; i < n; i++) {
        int v = idx[i], j = i - 1;
        while (j >= 0 && cost[idx[j]] > cost[v]) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = v;
    }
}

static void ranks(const double *x, int n, double *r) {
    int *idx = malloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
    sch_rank_by_cost(x, idx, n);
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && x[idx[j + 1]] == x[idx[i]]) j++;
        double mean = 0.5 * (double)(i + j);
        for (int t = i; t <= j; t++) r[idx[t]] = mean;
        i = j + 1;
    }
    free(idx);
}

double sch_spearman(const double *a, const double *b, int n) {
    if (n < 2) return 0.0;
    double *ra = malloc((size_t)n * sizeof *ra), *rb = malloc((size_t)n * sizeof *rb);
    ranks(a, n, ra);
    ranks(b, n, rb);
    double ma = 0, mb = 0;
    for (int i = 0; i < n; i++) {
        ma += ra[i];
        mb += rb[i];
    }
    ma /= n;
    mb /= n;
    double sab = 0, saa = 0, sbb = 0;
    for (int i = 0; i < n; i++) {
        sab += (ra[i] - ma) * (rb[i] - mb);
        saa += (ra[i] - ma) * (ra[i] - ma);
        sbb += (rb[i] - mb) * (rb[i] - mb);
    }
    free(ra);
    free(rb);
    if (saa <= 0 || sbb <= 0) return 0.0;
    return sab / __builtin_sqrt(saa * sbb);
}

int sch_sched_simpler(const sch_contract_sched *a, const sch_contract_sched *b) {
    int ra = a->mr * a->nr, rb = b->mr * b->nr;
    if (ra != rb) return ra < rb;
    if ((a->nc == 0) != (b->nc == 0)) return a->nc == 0;
    if ((a->pf == 0) != (b->pf == 0)) return a->pf == 0;
    return a->mc < b->mc;
}

void sch_bucket_affixes(int large, int nthreads, char *pre, size_t precap, char *suf, size_t sufcap) {
    snprintf(pre, precap, "m%s%d,", large ? ">" : "<=", SCH_SMALL_M);
    snprintf(suf, sufcap, ",t=%d", nthreads);
}

void sch_bucket_text(const sch_contract_shape *sh, char *buf, size_t cap) {
    char pre[16], suf[16];
    sch_bucket_affixes(sh->m > SCH_SMALL_M, sh->nthreads, pre, sizeof pre, suf, sizeof suf);
    snprintf(buf, cap, "%sn=%lld,k=%lld,b=%lld%s", pre, (long long)sh->n, (long long)sh->k, (long long)sh->nbatch, suf);
}

char *sch_space_describe(void) {
    char *buf = NULL;
    size_t len = 0, cap = 0;
    sch_appendf(&buf, &len, &cap,
                "contractions (every matmul, matrix-vector and batched product), per kernel and M bucket "
                "(M <= %d decode, larger prefill), one space per micro-kernel family (src/sched/family.c):\n",
                SCH_SMALL_M);
    for (int i = 0; i < SCH_FAM_COUNT; i++) {
        const sch_family *f = &sch_families[i];
        const char *bucket = f->bucket == SCH_FAM_SMALL_M   ? "decode"
                             : f->bucket == SCH_FAM_LARGE_M ? "prefill"
                                                            : "any M";
        sch_appendf(&buf, &len, &cap, "  %-18s %-8s %s\n", f->name, bucket, f->about);
    }
    sch_appendf(&buf, &len, &cap,
                "other kernels (maps, reductions): vector width, accumulators, unroll, thread chunk "
                "(space_generic.c)\n"
                "space sizes at example shapes (a CPU with VNNI and AMX):\n");
    static const struct {
        int64_t m, n, k;
        kiln_dtype t;
        int act, strided;
    } ex[] = {{1, 2048, 2048, KILN_Q4_K, 0, 0}, {512, 2048, 2048, KILN_Q4_K, 0, 0}, {1, 4096, 4096, KILN_F32, 0, 0},
              {512, 4096, 4096, KILN_F32, 0, 0}, {512, 512, 64, KILN_F32, 1, 0}, {1, 256, 512, KILN_F32, 1, 1}};
    for (size_t i = 0; i < sizeof ex / sizeof *ex; i++) {
        sch_contract_shape sh = {ex[i].m, ex[i].n, ex[i].k, 1, ex[i].t, 1, 1, 1, 1, ex[i].act, 1, ex[i].strided};
        sch_appendf(&buf, &len, &cap, "  m=%-4lld n=%-5lld k=%-5lld B %-5s %-18s %6d schedules\n", (long long)sh.m,
                    (long long)sh.n, (long long)sh.k, kiln_dtype_name(sh.b_dtype),
                    ex[i].strided ? "activation, strided" : ex[i].act ? "activation" : "input",
                    sch_space_contract(&sh, NULL, 0));
    }
    return buf;
}
