/* bench/rewrite_depth.c — the whole-model rewrite time of a GGUF model as
 * kiln_llm_load compiles it: the seconds spent in the compile's "e-graph"
 * stage (graph -> e-graph -> saturation -> extraction, block by block with
 * the block cache; src/rewrite/blocks.c), summed over every program the load
 * compiles, from the compile observer's stage changes (the streaming form's
 * check that the extraction kernelizes is a stage of its own: it kernelizes
 * the whole graph and grows with depth). Issue 27: the default
 * model's 18 layers and a 36-layer variant (bench/deepen_gguf.py) must differ
 * by < 20%, the rewrite growing with distinct blocks, not depth.
 *
 * Usage: rewrite_depth MODEL.gguf [rounds]   (bench/rewrite_depth.sh builds
 * and runs it). One load per round, no search (tune_s = 0), 1 thread; prints
 * one line per round and the median:
 *   MODEL round R rewrite S s (P programs), load L s
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln.h"
#include "kiln_compile.h"
#include "kiln_llm.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct stages {
    double in_egraph_since; /* < 0: not in the e-graph stage */
    double egraph_s;        /* summed */
    int programs;           /* e-graph stages entered */
} stages;

static void on_stage(void *ctx, const char *stage, int done, int total) {
    (void)done;
    (void)total;
    stages *st = ctx;
    double t = now_s();
    if (st->in_egraph_since >= 0) {
        st->egraph_s += t - st->in_egraph_since;
        st->in_egraph_since = -1;
    }
    if (strcmp(stage, "e-graph") == 0) {
        st->in_egraph_since = t;
        st->programs++;
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: rewrite_depth MODEL.gguf [rounds]\n");
        return 2;
    }
    int rounds = argc == 3 ? atoi(argv[2]) : 3;
    if (rounds < 1 || rounds > 100) {
        fprintf(stderr, "rewrite_depth: rounds must be 1..100\n");
        return 2;
    }
    double *rw = calloc((size_t)rounds, sizeof *rw);
    if (!rw) return 1;
    for (int r = 0; r < rounds; r++) {
        stages st = {-1, 0, 0};
        kiln_llm_params p = kiln_llm_default_params();
        p.threads = 1;
        p.tune_s = 0;
        p.n_ctx = 512;
        kiln_set_compile_observer(on_stage, &st);
        kiln_llm *m = NULL;
        char err[1024];
        double t0 = now_s();
        kiln_status s = kiln_llm_load(argv[1], &p, &m, err, sizeof err);
        double load_s = now_s() - t0;
        on_stage(&st, "done", 1, 1);
        kiln_set_compile_observer(NULL, NULL);
        if (s != KILN_OK) {
            fprintf(stderr, "rewrite_depth: %s: %s\n", argv[1], err);
            free(rw);
            return 1;
        }
        kiln_llm_free(m);
        rw[r] = st.egraph_s;
        printf("%s round %d rewrite %.3f s (%d programs), load %.2f s\n", argv[1], r + 1, st.egraph_s, st.programs,
               load_s);
        fflush(stdout);
    }
    qsort(rw, (size_t)rounds, sizeof *rw, cmp_d);
    printf("%s median rewrite %.3f s\n", argv[1], rw[rounds / 2]);
    free(rw);
    return 0;
}
