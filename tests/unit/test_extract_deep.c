/* test_extract_deep.c — extraction still chooses well deep in a program.
 *
 * Tree costs count a shared subtree once per use. Where every layer's value
 * feeds several consumers (a transformer's residual stream feeds the norms,
 * three projections and the next residual add), plain tree costs grow
 * exponentially with depth — 1e93 at gemma3-270m's 18 layers — and doubles
 * can no longer tell two forms of a deep kernel apart: layer 8 of gemma3 came
 * out as sum_kv(e * (V / sum e)), V divided by the softmax sums and
 * materialised as a (seq, heads, kv, head_dim) tensor (268 MB for a
 * 256-token prompt). eg_extract_best_amortised charges each consumer of a
 * shared value its share, so costs grow with the program's size.
 *
 * The check: x_{i+1} = x_i * x_i + x_i (x_i used three times) for 40 layers,
 * then y = sum(x_40 * 3). Factoring the constant out of the sum saves 999
 * multiplies; at depth 40 a plain tree cost (~3^40 per element) cannot see
 * that and keeps the multiply inside the sum (KILN_EG_PLAIN=1 shows it). The
 * optimised graph must end in MUL(SUM(x), 3) and compute what the source does.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kiln.h"

int main(void) {
    CASE_BEGIN("extract_deep_chain_still_factors_the_constant_out");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "1000");
    for (int i = 0; i < 40; i++) x = kiln_add(g, kiln_mul(g, x, x), x);
    kiln_output(g, kiln_sum(g, kiln_mul(g, x, kiln_const(g, 3.0, KILN_F32)), 0), "y");
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    /* small values: x stays tiny through 40 layers of x*x + x */
    static float xb[1000];
    for (int i = 0; i < 1000; i++) xb[i] = 1e-3f * (float)(i % 7) / 7.0f;
    kiln_bind_input(g, "x", xb, sizeof xb);
    kiln_graph *o = kiln_graph_optimize(g);
    CHECK(o != NULL, "optimise: %s", kiln_graph_error(g));
    if (o) {
        char *t = kiln_graph_text(o);
        /* the output node: MUL f32 () of a SUM and the constant */
        const char *out = t ? strstr(t, "-> \"y\"") : NULL;
        const char *b = out;
        while (b && b > t && b[-1] != '\n') b--;
        char line[200] = "";
        if (b) snprintf(line, sizeof line, "%.*s", (int)(out - b), b);
        CHECK(b && strstr(line, "= MUL f32 ()") != NULL, "the constant stayed inside the sum: %s", line);
        free(t);
        float want = 0, got = 0;
        CHECK(kiln_eval_reference(g) == KILN_OK && kiln_read_output(g, "y", &want, sizeof want) == KILN_OK, "%s",
              kiln_graph_error(g));
        CHECK(kiln_eval_reference(o) == KILN_OK && kiln_read_output(o, "y", &got, sizeof got) == KILN_OK, "%s",
              kiln_graph_error(o));
        CHECK(fabsf(want - got) <= 1e-5f * fabsf(want), "optimised %g, source %g", (double)got, (double)want);
        kiln_graph_free(o);
    }
    kiln_graph_free(g);
    CASE_END();
    return check_exit();
}
