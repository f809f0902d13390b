/* search.c — the contraction schedule space and the device-free parts of
 * the search: enumeration, ranking, tie rules, rank correlation, buckets.
 *
 * The space (DESIGN.md section 5, contractions): register tile mr x nr with
 * mr*nr accumulators + 2*nr B registers + 2 A registers <= 32 (AVX-512 has
 * 32 vector registers; more spills), mr <= 8, nr <= 16; A rows per cache
 * block mc in {16, 64, 256}; B rows per work item nc in {auto, 4, 16, 64
 * tiles} (up to the first that covers N: one item, no thread split);
 * software prefetch of B 0, 8, 16 or 32 chunks ahead; arithmetic f32, or int8 dot products for block-format B on a CPU with VNNI (an
 * approximation: A is quantised per 32 elements, emit_contract_i8.c); for
 * decode of a weight in q4_0, q5_0, q8_0, q4_k or q6_k, the int8 1 x 8 tiles also with rp=1, reading a copy of B repacked once (sched/repack_layout.h).
 * Tiles taller than M are skipped (they only compute padding).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract.h"
#include "dtype.h"
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
        if (!(s->form == SCH_FORM_DOT || s->direct)) continue;
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

static int space_forms(const sch_contract_shape *sh, sch_contract_sched *out, int cap) {
    static const int mrs[] = {1, 2, 3, 4, 6, 8};
    static const int nrs[] = {1, 2, 3, 4, 6, 8, 12, 16};
    static const int mcs[] = {16, 64, 256};
    static const int ncs[] = {0, 4, 16, 64};
    static const int pfs[] = {0, 8, 16, 32}; /* software prefetch distance, 32-element chunks */
    int n = 0;
    for (size_t a = 0; a < sizeof mrs / sizeof *mrs; a++) {
        int mr = mrs[a];
        if (mr > 1 && mr > sh->m) continue;
        for (size_t b = 0; b < sizeof nrs / sizeof *nrs; b++) {
            int nr = nrs[b];
            if (mr * nr + 2 * nr + 2 > 32) continue;
            if (nr > 1 && nr > sh->n) continue;
            for (size_t c = 0; c < sizeof mcs / sizeof *mcs; c++) {
                int mc = mcs[c];
                if (mc < mr) continue;
                /* one A block covers small M: the other mc values are the same schedule */
                if (c > 0 && mcs[c - 1] >= sh->m) continue;
                for (size_t d = 0; d < sizeof ncs / sizeof *ncs; d++) {
                    int nc = ncs[d] * nr;
                    /* item widths past n are one item, run by the calling thread
                     * alone: the first such width stays (a small matrix-vector
                     * product, gemma3's 256-row k and v, is faster without the
                     * pool's wake-up and barrier: 7.9 vs 12.5 us at 2 threads) */
                    if (d > 1 && ncs[d - 1] * nr >= sh->n) continue;
                    for (size_t e = 0; e < sizeof pfs / sizeof *pfs; e++) {
                        for (int ar = 0; ar < 2; ar++) {
                            /* int8: block formats on a CPU with VNNI, tiles of <= 4 x 8 */
                            if (ar == 1 && !(sh->vnni && kiln_dtype_is_block(sh->b_dtype) && mr <= 4 && nr <= 8 &&
                                             mr * nr <= 16))
                                continue;
                            /* int8 decode of q4_0 / q5_0 / q8_0 / q4_k / q6_k weights, 1 x 8 tiles: also
                             * on B's repacked copy (rp=1, sched/repack_layout.h) */
                            int rps = ar == 1 && sh->m <= SCH_SMALL_M && nr == 8 && mr == 1 && !sh->b_activation &&
                                              (sh->b_dtype == KILN_Q4_0 || sh->b_dtype == KILN_Q5_0 || sh->b_dtype == KILN_Q8_0 ||
                                               sh->b_dtype == KILN_Q4_K || sh->b_dtype == KILN_Q6_K)
                                          ? 2
                                          : 1;
                            for (int rp = 0; rp < rps; rp++, n++) {
                                if (!out || n >= cap) continue;
                                sch_contract_sched *s = &out[n];
                                memset(s, 0, sizeof *s);
                                s->mr = mr;
                                s->nr = nr;
                                s->mc = mc;
                                s->nc = nc;
                                s->pf = pfs[e];
                                s->arith = ar ? SCH_ARITH_I8 : SCH_ARITH_F32;
                                s->rp = rp;
                            }
                        }
                    }
                }
            }
        }
    }
    /* ---- the packed (outer-product) form, SCH_FORM_PACKED (emit_gemm.c) ----
     * only for large M (B is dequantised once per item and K block and
     * reused by all M rows; for decode the dot form reads B once anyway):
     * strips nr in {16, 32, 48, 64} lanes, tiles mr with mr*(nr/16)
     * accumulators + nr/16 B registers + 1 broadcast <= 32 zmm, K blocks kc
     * in {all, 256, 512, 1024}, A blocks mc in {64, 256}, items nc in {auto, 4, 16
     * strips}; arithmetic f32 (strip prefetch pf 16 or none), or int8 for block formats on a CPU with VNNI
     * (emit_gemm_i8.c: twice the accumulators, strips <= 48), or bf16 (pf 16 or none) for f32 B the
     * program computed on a CPU with AVX-512 bf16 (emit_gemm_bf16.c). Tiles taller
     * than M are skipped. */
    if (sh->m > SCH_SMALL_M) {
        static const int pnrs[] = {16, 32, 48, 64};
        static const int pmrs[] = {4, 6, 8, 10, 12, 14};
        static const int pkcs[] = {0, 256, 512, 1024};
        static const int pmcs[] = {64, 256};
        static const int pncs[] = {0, 4, 16};
        for (size_t b = 0; b < sizeof pnrs / sizeof *pnrs; b++) {
            int nr = pnrs[b], nv = nr / 16;
            for (size_t a = 0; a < sizeof pmrs / sizeof *pmrs; a++) {
                int mr = pmrs[a];
                if (mr * nv + nv + 1 > 32) continue;
                if (a > 0 && mr > sh->m) continue;
                for (size_t c = 0; c < sizeof pkcs / sizeof *pkcs; c++) {
                    int kc = pkcs[c];
                    if (kc > 0 && kc >= sh->k) continue; /* the same as all of K */
                    for (size_t e = 0; e < sizeof pmcs / sizeof *pmcs; e++) {
                        int mc = pmcs[e];
                        if (e > 0 && pmcs[e - 1] >= sh->m) continue;
                        for (size_t d = 0; d < sizeof pncs / sizeof *pncs; d++) {
                            int nc = pncs[d] * nr;
                            if (nc > 0 && nc >= sh->n && d > 1) continue;
                            for (int ar = 0; ar < 5; ar++) {
                                /* 0, 1: f32 with the strip prefetched 16 K steps ahead or not
                                 * (emit_gemm.c); 2: int8 (emit_gemm_i8.c): block formats with
                                 * VNNI; int32 and f32 accumulators, strip and scale registers
                                 * in 32 zmm; 3, 4: bf16 (emit_gemm_bf16.c), prefetched or not:
                                 * f32 B the program computed, on a CPU with AVX-512 bf16 */
                                if (ar == 2 && !(sh->vnni && kiln_dtype_is_block(sh->b_dtype) && nr <= 48 &&
                                                 mr <= 12 && 2 * mr * nv + 2 * nv + 2 <= 32))
                                    continue;
                                if (ar >= 3 && !(sh->bf16 && sh->b_dtype == KILN_F32 && sh->b_activation)) continue;
                                if (out && n < cap) {
                                    sch_contract_sched *s = &out[n];
                                    memset(s, 0, sizeof *s);
                                    s->mr = mr;
                                    s->nr = nr;
                                    s->mc = mc;
                                    s->nc = nc;
                                    s->kc = kc;
                                    s->arith = ar == 2 ? SCH_ARITH_I8 : ar >= 3 ? SCH_ARITH_BF16 : SCH_ARITH_F32;
                                    s->pf = ar == 0 || ar == 3 ? 16 : 0;
                                    s->form = SCH_FORM_PACKED;
                                }
                                n++;
                            }
                        }
                    }
                }
            }
        }
    }
    /* ---- decode with an f32 B strided along K (attention's values):
     * the packed form reading B's rows in place (direct, emit_gemm.c),
     * strips nr in {16, 32, 64}, tiles mr in {1, 2, 4} (not taller than
     * M), items nc in {auto, 4, 16 strips}, the rows prefetched 16 K steps
     * ahead or not */
    if (sh->m <= SCH_SMALL_M && sh->b_strided && sh->b_dtype == KILN_F32) {
        static const int dnrs[] = {16, 32, 64};
        static const int dmrs[] = {1, 2, 4};
        static const int dncs[] = {0, 4, 16};
        for (size_t b = 0; b < sizeof dnrs / sizeof *dnrs; b++)
            for (size_t a = 0; a < sizeof dmrs / sizeof *dmrs; a++) {
                if (a > 0 && dmrs[a] > sh->m) continue;
                for (size_t d = 0; d < sizeof dncs / sizeof *dncs; d++)
                    for (int pf = 0; pf < 2; pf++) {
                        if (out && n < cap) {
                            sch_contract_sched *s = &out[n];
                            memset(s, 0, sizeof *s);
                            s->mr = dmrs[a];
                            s->nr = dnrs[b];
                            s->mc = 64;
                            s->nc = dncs[d] * dnrs[b];
                            s->arith = SCH_ARITH_F32;
                            s->form = SCH_FORM_PACKED;
                            s->pf = pf ? 16 : 0;
                            s->direct = 1;
                        }
                        n++;
                    }
            }
    }
    /* ---- AMX tiles, SCH_FORM_AMX: large M, block formats; int8 tiles
     * (emit_gemm_amx.c) on a CPU with amx_int8, bf16 tiles
     * (emit_gemm_amx_bf16.c) with amx_bf16, which also take f32 B that the
     * program computed (sh->b_activation: attention's keys and values): tiles of mr x nr in {16, 32}^2 outputs,
     * K blocks kc in {all, 256, 1024}, A blocks mc in {32, 128}, items nc in
     * {auto, 4, 16 strips} */
    for (int ar = 0; ar < 2; ar++) {
        /* 0: int8 tiles (emit_gemm_amx.c); 1: bf16 tiles (emit_gemm_amx_bf16.c) */
        int b_ok = kiln_dtype_is_block(sh->b_dtype) || (ar && sh->b_dtype == KILN_F32 && sh->b_activation);
        if (!(sh->m > SCH_SMALL_M && (ar ? sh->amx_bf16 : sh->amx) && b_ok)) continue;
        static const int akcs[] = {0, 256, 1024};
        static const int amcs[] = {32, 128};
        static const int ancs[] = {0, 4, 16};
        for (int mr = 16; mr <= 32; mr += 16)
            for (int nr = 16; nr <= 32; nr += 16)
                for (size_t c = 0; c < sizeof akcs / sizeof *akcs; c++) {
                    if (akcs[c] > 0 && akcs[c] >= sh->k) continue;
                    for (size_t e = 0; e < sizeof amcs / sizeof *amcs; e++) {
                        if (e > 0 && amcs[e - 1] >= sh->m) continue;
                        for (size_t d = 0; d < sizeof ancs / sizeof *ancs; d++) {
                            int nc = ancs[d] * nr;
                            if (nc > 0 && nc >= sh->n && d > 1) continue;
                            if (out && n < cap) {
                                sch_contract_sched *s = &out[n];
                                memset(s, 0, sizeof *s);
                                s->mr = mr;
                                s->nr = nr;
                                s->mc = amcs[e];
                                s->nc = nc;
                                s->kc = akcs[c];
                                s->arith = ar ? SCH_ARITH_BF16 : SCH_ARITH_I8;
                                s->form = SCH_FORM_AMX;
                            }
                            n++;
                        }
                    }
                }
    }
    return out && n > cap ? cap : n;
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
                "(M <= %d decode, larger prefill):\n"
                "  dot form     mr in {1,2,3,4,6,8} x nr in {1,2,3,4,6,8,12,16} register tiles that fit 32 vector "
                "registers;\n"
                "               mc in {16,64,256} rows of A per block; nc in {auto, 4, 16, 64} tiles of B per work "
                "item;\n"
                "               B prefetched 0, 8, 16 or 32 chunks ahead; arithmetic f32, or int8 (VNNI, block formats, "
                "approximate);\n"
                "               for decode of q4_0/q5_0 weights, int8 8-row tiles also on a copy repacked once "
                "(rp=1: 8 rows interleaved)\n"
                "  packed form  (large M) B dequantised into packed panels, mr x nr outer-product tiles, kc K per "
                "panel;\n"
                "               arithmetic f32, or int8 (VNNI, block formats: B repacked to uint8 strips, A "
                "quantised per 32, approximate),\n"
                "               or bf16 (AVX-512 bf16, f32 B the program computed, approximate); for decode only "
                "with an f32 B strided\n"
                "               along K (attention's values), whose rows the tiles then read in place (direct=1, "
                "mr in {1,2,4})\n"
                "  amx form     (large M, block formats, AMX) 16x16 int32 tiles of tdpbssd, mr x nr in {16,32}^2, "
                "rescaled per block; approximate as int8\n"
                "other kernels (maps, reductions): vector width, accumulators, unroll, thread chunk "
                "(space_generic.c)\n"
                "space sizes at example shapes (a CPU with VNNI and AMX):\n",
                SCH_SMALL_M);
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
