/* egraph_bench.c — how long equality saturation takes on a real model shape.
 *
 * Builds one gemma3-270m-shaped transformer block (d_model 640, 4 query heads
 * of 256 sharing 1 KV head, GeGLU FFN of 2048, rmsnorms incl. q/k norms, NEOX
 * rope, causal attention) through kiln's nn functions, with symbolic seq, and
 * times graph -> e-graph -> saturation -> extraction -> graph on one core.
 * Then the 18-block model: every block is built with its own weight names
 * and handed to the block cache, which saturates the first and reuses it for
 * its identical siblings. With --full it also saturates all 18 blocks as one
 * graph, without reuse, for comparison; and the compile step's path on one graph
 * of 18 and of 36 marked blocks (eg_optimize_blocks). Targets: < 1 s per
 * block, < 5 s for 18, 36 blocks within 1.2x the time of 18.
 *
 * usage: egraph_bench [--iters N] [--nodes N] [--full] [--json]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rewrite.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static kiln_tensor w(kiln_graph *g, int blk, const char *name, const char *shape) {
    char full[96];
    snprintf(full, sizeof full, "blk.%d.%s", blk, name);
    return kiln_input(g, full, KILN_F32, shape);
}

/* one gemma3 block on hidden state x (seq, 640) */
static kiln_tensor gemma_block(kiln_graph *g, kiln_tensor x, int blk) {
    const double eps = 1e-6;
    kiln_sym pos = kiln_sym_var(g, "pos");
    kiln_tensor h = kiln_rmsnorm(g, x, w(g, blk, "attn_norm", "640"), eps);
    kiln_tensor q = kiln_reshape_str(g, kiln_linear(g, h, w(g, blk, "attn_q", "1024, 640"), KILN_NONE), "seq, 4, 256");
    kiln_tensor k = kiln_reshape_str(g, kiln_linear(g, h, w(g, blk, "attn_k", "256, 640"), KILN_NONE), "seq, 1, 256");
    kiln_tensor v = kiln_reshape_str(g, kiln_linear(g, h, w(g, blk, "attn_v", "256, 640"), KILN_NONE), "seq, 1, 256");
    q = kiln_rmsnorm(g, q, w(g, blk, "attn_q_norm", "256"), eps);
    k = kiln_rmsnorm(g, k, w(g, blk, "attn_k_norm", "256"), eps);
    q = kiln_rope(g, q, pos, 10000.0, KILN_ROPE_NEOX);
    k = kiln_rope(g, k, pos, 10000.0, KILN_ROPE_NEOX);
    kiln_tensor o = kiln_attention(g, q, k, v, pos, 1.0 / 16.0, 0);
    o = kiln_linear(g, kiln_reshape_str(g, o, "seq, 1024"), w(g, blk, "attn_output", "640, 1024"), KILN_NONE);
    o = kiln_rmsnorm(g, o, w(g, blk, "post_attention_norm", "640"), eps);
    x = kiln_add(g, x, o);
    h = kiln_rmsnorm(g, x, w(g, blk, "ffn_norm", "640"), eps);
    kiln_tensor gate = kiln_gelu_tanh(g, kiln_linear(g, h, w(g, blk, "ffn_gate", "2048, 640"), KILN_NONE));
    kiln_tensor up = kiln_linear(g, h, w(g, blk, "ffn_up", "2048, 640"), KILN_NONE);
    kiln_tensor f = kiln_linear(g, kiln_mul(g, gate, up), w(g, blk, "ffn_down", "640, 2048"), KILN_NONE);
    f = kiln_rmsnorm(g, f, w(g, blk, "post_ffw_norm", "640"), eps);
    return kiln_add(g, x, f);
}

static kiln_graph *block_graph(int blk) {
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "hidden", KILN_F32, "seq, 640");
    kiln_output(g, gemma_block(g, x, blk), "out");
    return g;
}

int main(int argc, char **argv) {
    eg_limits lim = {12, 100000, 30, 1000, 2};
    int full = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) lim.max_iters = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--nodes") && i + 1 < argc) lim.max_nodes = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--json")) json = 1;
        else {
            fprintf(stderr, "usage: %s [--iters N] [--nodes N] [--full] [--json]\n", argv[0]);
            return 2;
        }
    }
    char err[512];
    eg_ruleset *rs = eg_ruleset_default();

    /* one block, step by step */
    kiln_graph *g = block_graph(0);
    if (kiln_graph_status(g) != KILN_OK) {
        fprintf(stderr, "building the block: %s\n", kiln_graph_error(g));
        return 1;
    }
    double t0 = now_s();
    eg_kiln *ek = ek_from_graph(g, err, sizeof err);
    if (!ek) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    uint32_t classes0 = ek->eg->nlive_classes, nodes0 = ek->eg->nlive_nodes;
    double t1 = now_s();
    eg_run_report rep;
    eg_run(ek, rs, &lim, &rep);
    double t2 = now_s();
    eg_id *choice = malloc(sizeof(eg_id) * ek->eg->nclasses);
    double *cost = malloc(sizeof(double) * ek->eg->nclasses);
    eg_extract_best(ek->eg, ek_default_cost, ek, choice, cost);
    eg_terms ts;
    kiln_graph *og = NULL;
    if (eg_terms_from_choice(ek->eg, choice, ek->roots, ek->nroots, &ts) == 0) {
        og = ek_to_graph(ek, &ts, err, sizeof err);
        eg_terms_free(&ts);
    }
    double t3 = now_s();
    if (!og) {
        fprintf(stderr, "extraction failed: %s\n", err);
        return 1;
    }
    double block_s = t3 - t0;
    if (json) {
        char *js = eg_report_json(ek, &rep);
        printf("%s", js);
        free(js);
    } else {
        char *txt = eg_report_text(ek, &rep);
        printf("one gemma3-270m block: graph %d nodes -> e-graph %u classes %u nodes\n", g->nnodes, classes0, nodes0);
        printf("%s", txt);
        free(txt);
        printf("extracted graph: %d nodes (input %d)\n", og->nnodes, g->nnodes);
        printf("time: to e-graph %.3f s, saturate %.3f s, extract+rebuild %.3f s, total %.3f s (target < 1 s)\n",
               t1 - t0, t2 - t1, t3 - t2, block_s);
    }
    free(choice);
    free(cost);
    kiln_graph_free(og);
    eg_report_free(&rep);
    ek_free(ek);
    kiln_graph_free(g);

    /* 18 blocks through the block cache */
    double m0 = now_s();
    eg_block_cache *bc = eg_block_cache_new(rs, &lim);
    int ok = 1;
    for (int b = 0; b < 18 && ok; b++) {
        int hit;
        kiln_graph *ng = eg_block_cache_optimize(bc, block_graph(b), &hit, NULL, err, sizeof err);
        if (!ng) {
            fprintf(stderr, "block %d: %s\n", b, err);
            ok = 0;
        }
        kiln_graph_free(ng);
    }
    double m1 = now_s();
    uint32_t hits, misses;
    eg_block_cache_stats(bc, &hits, &misses);
    eg_block_cache_free(bc);
    if (!ok) return 1;
    printf("18 blocks with reuse: %.3f s (%u saturated, %u reused; target < 5 s)\n", m1 - m0, misses, hits);

    /* the compile step's path: one graph of 18 and of 36 marked blocks, cut,
     * saturated per distinct block and joined (eg_optimize_blocks) */
    double depth_s[2] = {0, 0};
    for (int d = 0; d < 2 && ok; d++) {
        int nb = d ? 36 : 18;
        kiln_graph *mg = kiln_graph_new();
        kiln_tensor x = kiln_input(mg, "hidden", KILN_F32, "seq, 640");
        for (int b = 0; b < nb; b++) {
            kiln_graph_mark_block(mg);
            x = gemma_block(mg, x, b);
        }
        kiln_output(mg, x, "out");
        uint32_t h2 = 0, m2 = 0;
        /* the least of three runs: a shared machine only ever adds time */
        for (int r = 0; r < 3 && ok; r++) {
            double d0 = now_s();
            kiln_graph *jo = eg_optimize_blocks(mg, rs, &lim, EG_EXTRACT_PRIMITIVES, &h2, &m2, err, sizeof err);
            double dt = now_s() - d0;
            if (r == 0 || dt < depth_s[d]) depth_s[d] = dt;
            if (!jo) {
                fprintf(stderr, "%d marked blocks: %s\n", nb, err);
                ok = 0;
            }
            kiln_graph_free(jo);
        }
        printf("%d marked blocks, cut and joined: %.3f s, least of 3 (%u saturated, %u reused)\n", nb, depth_s[d],
               m2, h2);
        kiln_graph_free(mg);
    }
    if (!ok) return 1;
    printf("36 vs 18 marked blocks: %.2fx the time (issue 27: within 1.2x)\n", depth_s[1] / depth_s[0]);

    if (full) {
        kiln_graph *fg = kiln_graph_new();
        kiln_tensor x = kiln_input(fg, "hidden", KILN_F32, "seq, 640");
        for (int b = 0; b < 18; b++) x = gemma_block(fg, x, b);
        kiln_output(fg, x, "out");
        double f0 = now_s();
        eg_run_report frep;
        kiln_graph *fo = eg_optimize_graph(fg, rs, &lim, &frep, err, sizeof err);
        double f1 = now_s();
        printf("18 blocks as one graph, no reuse: %.3f s, %u iterations, %u nodes, stopped: %s\n", f1 - f0,
               frep.iterations, frep.nodes, eg_stop_name(frep.stop));
        eg_report_free(&frep);
        kiln_graph_free(fo);
        kiln_graph_free(fg);
    }
    eg_ruleset_free(rs);
    return 0;
}
