/* optimize.c — the public face of the rewrite stage: kiln_graph_optimize runs
 * graph -> e-graph -> saturation -> best extraction and returns a new graph
 * with the same inputs and outputs, carrying over the source graph's
 * run-time bindings so that it can be evaluated at once. This is the first
 * step of every compilation; `kiln explain --egraph` reports on the same run.
 */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "graph.h"
#include "kiln.h"
#include "rewrite.h"

static const eg_ruleset *default_rules(void) {
    static eg_ruleset *rs;
    if (!rs) rs = eg_ruleset_default(); /* built once; rules are immutable data */
    return rs;
}

/* the source's bound dimensions and input buffers, by name, where dst has them */
void eg_copy_bindings(const kiln_graph *src, kiln_graph *dst) {
    for (uint32_t v = 0; v < src->ndim_values; v++) {
        if (!src->dim_bound[v]) continue;
        const char *name = sym_var_name(src->syms, v);
        if (sym_find_var(dst->syms, name) >= 0) kiln_bind_dim(dst, name, src->dim_values[v]);
    }
    /* dst's bindings were made by earlier calls in src's order (less the
     * inputs the optimised graph dropped), so the next one is almost always
     * the same name: one strcmp per input, not a search of every node */
    int32_t next = 0;
    for (int32_t i = 0; i < src->ninputs; i++) {
        if (next < dst->ninputs && strcmp(dst->inputs[next].name, src->inputs[i].name) == 0) {
            dst->inputs[next].data = src->inputs[i].data;
            dst->inputs[next].bytes = src->inputs[i].bytes;
            dst->inputs[next].constant = src->inputs[i].constant;
            dst->inputs[next].gen = src->inputs[i].gen;
            next++;
            continue;
        }
        for (int32_t n = 0; n < dst->nnodes; n++) {
            if (dst->nodes[n].op == OP_INPUT && strcmp(dst->nodes[n].name, src->inputs[i].name) == 0) {
                kiln_bind_input(dst, src->inputs[i].name, src->inputs[i].data, src->inputs[i].bytes);
                for (int32_t j = 0; j < dst->ninputs; j++)
                    if (strcmp(dst->inputs[j].name, src->inputs[i].name) == 0) {
                        dst->inputs[j].constant = src->inputs[i].constant;
                        dst->inputs[j].gen = src->inputs[i].gen;
                        next = j + 1;
                    }
                break;
            }
        }
    }
    kiln_graph_clear_error(dst); /* a name the optimised graph dropped is not an error */
}

/* the limits of the compile-time rewrite step: enough iterations for the rule
 * families to reach their fixpoints on model blocks, bounded so that a graph
 * whose associativity space explodes stops in well under a second */
static const eg_limits compile_limits = {.max_iters = 10, .max_nodes = 50000, .max_seconds = 1.0};
/* per block of a marked graph (a layer): the same iterations and nodes; the
 * clock only as a backstop (a layer saturates in well under a second) */
static const eg_limits block_limits = {.max_iters = 10, .max_nodes = 50000, .max_seconds = 10.0};

kiln_graph *kiln_graph_optimize(kiln_graph *g) {
    kiln_env e;
    kiln_env_read(&e);
    return eg_optimize_for_backend(g, 0, e.compile.eg_plain);
}

kiln_graph *eg_optimize_for_backend(kiln_graph *g, int primitives_only, int plain_costs) {
    if (!g) return NULL;
    if (g->build_failed) return NULL;
    char err[512];
    eg_run_report rep;
    memset(&rep, 0, sizeof rep);
    int flags = primitives_only | (plain_costs ? EG_PLAIN_COSTS : 0);
    kiln_graph *out;
    if (g->nblock_marks > 0) {
        /* block by block: each distinct block saturated once, so the rewrite
         * takes the time of the distinct blocks and stops where their rules
         * stop, not at a clock (the same program on a loaded machine) */
        out = eg_optimize_blocks(g, default_rules(), &block_limits, flags, NULL, NULL, err, sizeof err);
    } else {
        out = eg_optimize_graph_ex(g, default_rules(), &compile_limits, flags, &rep, err, sizeof err);
        eg_report_free(&rep);
    }
    if (!out) {
        graph_run_error(g, KILN_ERR_INVALID, "optimize: %s", err);
        return NULL;
    }
    eg_copy_bindings(g, out);
    return out;
}

char *kiln_graph_egraph_report(kiln_graph *g, int json) {
    if (!g || g->build_failed) return NULL;
    char err[512];
    eg_kiln *ek = ek_from_graph(g, err, sizeof err);
    if (!ek) {
        graph_run_error(g, KILN_ERR_INVALID, "e-graph: %s", err);
        return NULL;
    }
    eg_run_report rep;
    memset(&rep, 0, sizeof rep);
    eg_run(ek, default_rules(), &compile_limits, &rep);
    char *text = json ? eg_report_json(ek, &rep) : eg_report_text(ek, &rep);
    eg_report_free(&rep);
    ek_free(ek);
    return text;
}
