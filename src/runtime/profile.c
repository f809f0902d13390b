/* profile.c — the profiler of a program (rt_profiler, program.h): per
 * kernel seconds, bytes touched and contraction flops summed over runs, the
 * arithmetic of each contraction's last launch; the reports made of them
 * (kiln_program_profile, and KILN_PROFILE's table on stderr at free).
 *
 * The CPU's launches (cpu_run.c) record into it; a backend whose launches
 * only enqueue work (a GPU) has no per-kernel times, and profiling is off.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base.h"
#include "dtype.h"
#include "program.h"
#include "search.h"
#include "threadpool.h"

/* indexed by sch_kernel_kind (SCH_K_MAP .. SCH_K_STREAM) */
static const char *kinds[] = {"map", "reduce", "scatter", "quantize", "copy", "stream"};
_Static_assert(sizeof kinds / sizeof kinds[0] == SCH_K_STREAM + 1, "a name for every kernel kind");

/* the slowest kernel not shown yet, marked shown */
static int32_t next_slowest(const kiln_program *p, int8_t *shown) {
    int32_t best = -1;
    for (int32_t k = 0; k < p->plan.sp.nkernels; k++)
        if (!shown[k] && (best < 0 || p->prof.secs[k] > p->prof.secs[best])) best = k;
    shown[best] = 1;
    return best;
}

/* KILN_PROFILE=1: the slowest kernels of the program, on stderr, when it is freed */
void rt_profile_print(const kiln_program *p) {
    double total = 0;
    int32_t nk = p->plan.sp.nkernels;
    for (int32_t k = 0; k < nk; k++) total += p->prof.secs[k];
    fprintf(stderr, "kiln profile: %lld runs, %.3f ms per run in %d kernels; slowest:\n", (long long)p->prof.runs,
            p->prof.runs ? 1e3 * total / (double)p->prof.runs : 0.0, (int)nk);
    int8_t *shown = kiln_xcalloc((size_t)nk + 1, 1);
    for (int i = 0; i < 15 && i < nk; i++) {
        int32_t best = next_slowest(p, shown);
        const sch_kernel *K = &p->plan.sp.kernels[best];
        fprintf(stderr, "  kernel %4d %-8s %-8s %5.1f%% %9.3f ms/run  (%d fused, %d stages)\n", (int)best, kinds[K->kind],
                K->root >= 0 ? op_table[p->plan.g->nodes[K->root].op].name : "output", total > 0 ? 100 * p->prof.secs[best] / total : 0,
                p->prof.runs ? 1e3 * p->prof.secs[best] / (double)p->prof.runs : 0.0, (int)K->nfused, (int)K->nstages);
    }
    free(shown);
}

/* bytes of every buffer kernel K reads or writes (each once). A map
 * kernel without stages reads at most one element per load and domain
 * point, so a buffer it loads counts at most that much: an embedding row
 * gathered from a 179 MB table is 2.5 KB, not the table. */
static void count_loads(const sch_program *sp, int32_t id, uint16_t *loads) {
    if (id < 0) return;
    const lx *x = &sp->lx[id];
    if (x->kind == LX_LOAD && loads[x->buf] < UINT16_MAX) loads[x->buf]++;
    count_loads(sp, x->a, loads);
    count_loads(sp, x->b, loads);
}

double rt_profile_kernel_bytes(const kiln_program *p, const sch_kernel *K, int64_t domain) {
    uint16_t *loads = kiln_xcalloc((size_t)p->plan.sp.nbufs + 1, sizeof *loads);
    count_loads(&p->plan.sp, K->expr, loads);
    for (int32_t i = 0; i < K->nstages; i++) count_loads(&p->plan.sp, K->stages[i].expr, loads);
    int per_point = K->kind == SCH_K_MAP && K->nstages == 0 && domain > 0;
    double b = 0;
    for (int32_t i = 0; i < p->plan.sp.nbufs; i++) {
        double bi = (double)p->run.bytes[i];
        if (i == K->out_buf || i == K->src_buf) {
            b += bi;
            continue;
        }
        if (!loads[i]) continue;
        if (per_point) {
            double most = (double)loads[i] * (double)kiln_dtype_bytes(p->plan.sp.bufs[i].dtype, domain);
            if (most < bi) bi = most;
        }
        b += bi;
    }
    free(loads);
    return b;
}

void rt_profile_alloc(kiln_program *p, int on) {
    size_t n = (size_t)p->plan.sp.nkernels + 1;
    if (on && !p->prof.secs) {
        p->prof.secs = kiln_xcalloc(n, sizeof *p->prof.secs);
        p->prof.bytes = kiln_xcalloc(n, sizeof *p->prof.bytes);
        p->prof.flops = kiln_xcalloc(n, sizeof *p->prof.flops);
        p->prof.arith = kiln_xcalloc(n, sizeof *p->prof.arith);
    } else if (!on && p->prof.secs) {
        free(p->prof.secs);
        free(p->prof.bytes);
        free(p->prof.flops);
        free(p->prof.arith);
        p->prof.secs = p->prof.bytes = p->prof.flops = NULL;
        p->prof.arith = NULL;
    }
}

/* kernels are timed on backends whose launches return when they are done;
 * off leaves a profile the program was compiled with (KILN_PROFILE, `kiln
 * bench --profile`) on, its counts reset: the first-run search profiles and
 * then turns its own profile off before the user's runs */
void kiln_program_profile_on(kiln_program *p, int on) {
    if (!p || !(p->plan.be->caps & RT_CAP_HOST_CODE)) return;
    if (!on && p->plan.opt.profile) {
        kiln_program_profile_reset(p);
        return;
    }
    rt_profile_alloc(p, on);
}

int kiln_program_kernel_times(const kiln_program *p, double *out, int n) {
    if (!p || !p->prof.secs) return 0;
    int nk = (int)p->plan.sp.nkernels < n ? (int)p->plan.sp.nkernels : n;
    for (int k = 0; k < nk; k++) out[k] = p->prof.secs[k];
    return nk;
}

long long kiln_program_msplit_launches(const kiln_program *p) {
    if (!p) return 0;
    return (long long)p->msplit_launches + (p->alt ? (long long)p->alt->msplit_launches : 0);
}

void kiln_program_profile_reset(kiln_program *p) {
    if (p && p->alt) kiln_program_profile_reset(p->alt); /* the streaming form's runs are counted there */
    if (!p || !p->prof.secs) return;
    size_t n = (size_t)p->plan.sp.nkernels + 1;
    memset(p->prof.secs, 0, n * sizeof *p->prof.secs);
    memset(p->prof.bytes, 0, n * sizeof *p->prof.bytes);
    memset(p->prof.flops, 0, n * sizeof *p->prof.flops);
    p->prof.runs = 0;
    if (p->plan.pool) rt_pool_stats_reset(p->plan.pool);
}

/* how the launches split across threads went (threadpool.h's counters since
 * the last reset): is the second thread working or waiting? */
static void thread_line(const kiln_program *p, char **buf, size_t *len, size_t *cap) {
    rt_pool_stats st;
    if (!p->plan.pool || rt_pool_threads(p->plan.pool) < 2) return;
    rt_pool_stats_get(p->plan.pool, &st);
    if (st.jobs == 0 || st.starts == 0) return;
    double runs = p->prof.runs > 0 ? (double)p->prof.runs : 1;
    sch_appendf(buf, len, cap,
                "\nthreads: %.1f split launches per run; a worker started %.1f us after the launch on average "
                "(woken from sleep for %.1f%% of starts) and ran %.3f ms per run against the caller's %.3f ms; the "
                "caller waited %.3f ms per run for the workers after its own part; of the pieces claimed in order "
                "(decode contractions), the caller ran %.1f per run and the workers %.1f\n",
                (double)st.jobs / runs, 1e-3 * (double)st.lag_ns / (double)st.starts,
                100.0 * (double)st.woken / (double)st.starts, 1e-6 * (double)st.worker_ns / runs,
                1e-6 * (double)st.caller_ns / runs, 1e-6 * (double)st.wait_ns / runs, (double)st.caller_pieces / runs,
                (double)st.pieces / runs);
}

char *kiln_program_profile(const kiln_program *p, double bw_gbs, double fma_gflops, double dot_gops, int max_rows) {
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (p && (!p->prof.secs || p->prof.runs == 0) && p->alt) p = p->alt; /* the runs went to the streaming form */
    if (!p || !p->prof.secs || p->prof.runs == 0) return kiln_xstrdup("");
    int32_t nk = p->plan.sp.nkernels;
    double total = 0, tbytes = 0;
    for (int32_t k = 0; k < nk; k++) {
        total += p->prof.secs[k];
        tbytes += p->prof.bytes[k];
    }
    double runs = (double)p->prof.runs;
    sch_appendf(&buf, &len, &cap,
                "%.3f ms per run over %lld runs, %d kernels; %.1f MB touched per run (%.2f GB/s overall, %.0f%% of "
                "%.1f GB/s)\n",
                1e3 * total / runs, (long long)p->prof.runs, (int)nk, tbytes / runs / 1e6,
                total > 0 ? tbytes / total / 1e9 : 0.0, total > 0 && bw_gbs > 0 ? 100 * tbytes / total / 1e9 / bw_gbs : 0.0,
                bw_gbs);
    sch_appendf(&buf, &len, &cap, "| %6s | %-8s | %-34s | %6s | %9s | %9s | %7s | %6s | %8s | %8s |\n", "kernel", "kind",
                "what", "share", "ms/run", "MB/run", "GB/s", "of bw", "GOP/s", "of peak");
    sch_appendf(&buf, &len, &cap, "|-------:|----------|------------------------------------|-------:|----------:|----------:|--------:|-------:|---------:|---------:|\n");
    int8_t *shown = kiln_xcalloc((size_t)nk + 1, 1);
    for (int i = 0; i < max_rows && i < nk; i++) {
        int32_t best = next_slowest(p, shown);
        const sch_kernel *K = &p->plan.sp.kernels[best];
        char what[64];
        if (K->contract)
            snprintf(what, sizeof what, "contract %s x f32", kiln_dtype_name(p->plan.sp.bufs[K->contract->b_buf].dtype));
        else
            snprintf(what, sizeof what, "%s, %d fused, %d stages",
                     K->root >= 0 ? op_table[p->plan.g->nodes[K->root].op].name : "output", (int)K->nfused, (int)K->nstages);
        double t = p->prof.secs[best] / runs, by = p->prof.bytes[best] / runs, fl = p->prof.flops[best] / runs;
        double gbs = t > 0 ? by / t / 1e9 : 0, gfl = t > 0 ? fl / t / 1e9 : 0;
        char fls[16] = "-", flp[16] = "-";
        if (fl > 0) {
            snprintf(fls, sizeof fls, "%.1f", gfl);
            /* against the peak of the arithmetic it ran: int8 dot products,
             * bf16 pairs (twice the FMA rate), else f32 FMA */
            int ar = p->prof.arith[best];
            double peak = ar == SCH_ARITH_I8 ? dot_gops : ar == SCH_ARITH_BF16 ? 2 * fma_gflops : fma_gflops;
            if (peak > 0) snprintf(flp, sizeof flp, "%.0f%%%s", 100 * gfl / peak, ar == SCH_ARITH_I8 ? " i8" : ar == SCH_ARITH_BF16 ? " bf" : "");
        }
        sch_appendf(&buf, &len, &cap, "| %6d | %-8s | %-34.34s | %5.1f%% | %9.3f | %9.2f | %7.2f | %5.0f%% | %8s | %8s |\n",
                    (int)best, K->contract ? "contract" : kinds[K->kind], what, total > 0 ? 100 * p->prof.secs[best] / total : 0.0,
                    1e3 * t, by / 1e6, gbs, bw_gbs > 0 ? 100 * gbs / bw_gbs : 0.0, fls, flp);
    }
    free(shown);
    /* and the same per group (contractions by weight dtype, the other
     * kernels by kind), dearest first: what a token costs in all */
    enum { NGROUP = 32 };
    char gname[NGROUP][32];
    double gt[NGROUP], gb[NGROUP];
    int gn[NGROUP], ng = 0;
    for (int32_t k = 0; k < nk; k++) {
        const sch_kernel *K = &p->plan.sp.kernels[k];
        char name[32];
        if (K->contract) snprintf(name, sizeof name, "contract %s", kiln_dtype_name(p->plan.sp.bufs[K->contract->b_buf].dtype));
        else snprintf(name, sizeof name, "%s", kinds[K->kind]);
        int g = 0;
        while (g < ng && strcmp(gname[g], name) != 0) g++;
        if (g == ng) {
            if (ng == NGROUP) continue;
            snprintf(gname[g], sizeof gname[g], "%s", name);
            gt[g] = gb[g] = 0;
            gn[g] = 0;
            ng++;
        }
        gt[g] += p->prof.secs[k];
        gb[g] += p->prof.bytes[k];
        gn[g]++;
    }
    sch_appendf(&buf, &len, &cap, "\n| %-20s | %7s | %6s | %9s | %9s | %7s | %6s |\n", "group", "kernels", "share", "ms/run",
                "MB/run", "GB/s", "of bw");
    sch_appendf(&buf, &len, &cap, "|----------------------|--------:|-------:|----------:|----------:|--------:|-------:|\n");
    int8_t *gshown = kiln_xcalloc((size_t)ng + 1, 1);
    for (int i = 0; i < ng; i++) {
        int best = -1;
        for (int g = 0; g < ng; g++)
            if (!gshown[g] && (best < 0 || gt[g] > gt[best])) best = g;
        gshown[best] = 1;
        double t = gt[best] / runs, by = gb[best] / runs, gbs = t > 0 ? by / t / 1e9 : 0;
        sch_appendf(&buf, &len, &cap, "| %-20s | %7d | %5.1f%% | %9.3f | %9.2f | %7.2f | %5.0f%% |\n", gname[best], gn[best],
                    total > 0 ? 100 * gt[best] / total : 0.0, 1e3 * t, by / 1e6, gbs,
                    bw_gbs > 0 ? 100 * gbs / bw_gbs : 0.0);
    }
    free(gshown);
    thread_line(p, &buf, &len, &cap);
    return buf;
}
