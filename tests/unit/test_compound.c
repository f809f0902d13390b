/* test_compound.c — compound nodes (src/ir/compound.def) and the recognition
 * rules that create them.
 *
 * Compound nodes: the builders check their operands; the reference
 * interpreter evaluates CONTRACT, SOFTMAX_ONLINE and SOFTMAX_CONTRACT as their primitive
 * definitions, which must agree with an independent double-precision
 * computation here and bit for bit with the definition built as primitives;
 * text and DOT printing show them with their definitions.
 *
 * Recognition on real nn graphs: after kiln_graph_optimize, kiln_softmax
 * graphs hold SOFTMAX_ONLINE, and kiln_attention graphs (with and without a
 * window) the scores' CONTRACT and the streaming SOFTMAX_CONTRACT, one-hot products (kiln_eq of an iota and ids, cast, then
 * kiln_matmul or kiln_linear) hold a GATHER and no contraction; each
 * optimised graph computes what its source does, including ids outside the
 * vocabulary, and survives a second trip through the e-graph.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "../../src/ir/compound.h"

static float frand(float lo, float hi) { return lo + (hi - lo) * (float)rand() / (float)RAND_MAX; }

static int has_line(const char *text, const char *needle) { return text && strstr(text, needle) != NULL; }

/* the number of nodes of op `name` in the graph's text ("= NAME ") */
static int count_op(const kiln_graph *g, const char *name) {
    char *t = kiln_graph_text(g), pat[64];
    snprintf(pat, sizeof pat, "= %s ", name);
    int n = 0;
    for (const char *p = t; p && (p = strstr(p, pat)) != NULL; p++) n++;
    free(t);
    return n;
}

/* reads output `name` (f32) of a run graph into out; returns elements or -1 */
static long read_f32(kiln_graph *g, const char *name, float *out, long cap) {
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    if (kiln_output_shape(g, name, &nd, dims) != KILN_OK) return -1;
    long n = 1;
    for (int i = 0; i < nd; i++) n *= (long)dims[i];
    if (n > cap || kiln_read_output(g, name, out, sizeof(float) * (size_t)n) != KILN_OK) return -1;
    return n;
}

#define CAP 8192
static float ra[CAP], rb[CAP];

/* runs both graphs (bindings already made) and compares output "out":
 * exact when tol is 0, else |a-b| <= tol * (1 + |a|) */
static int same_results(kiln_graph *a, kiln_graph *b, double tol, char *why, size_t cap) {
    if (kiln_eval_reference(a) != KILN_OK || kiln_eval_reference(b) != KILN_OK) {
        snprintf(why, cap, "eval: %s / %s", kiln_graph_error(a), kiln_graph_error(b));
        return 0;
    }
    long na = read_f32(a, "out", ra, CAP), nb = read_f32(b, "out", rb, CAP);
    if (na < 0 || na != nb) {
        snprintf(why, cap, "%ld vs %ld elements", na, nb);
        return 0;
    }
    for (long i = 0; i < na; i++) {
        int ok = tol == 0 ? ra[i] == rb[i] || (isnan(ra[i]) && isnan(rb[i]))
                          : fabs((double)ra[i] - (double)rb[i]) <= tol * (1 + fabs((double)ra[i]));
        if (!ok) {
            snprintf(why, cap, "element %ld: %.9g vs %.9g", i, (double)ra[i], (double)rb[i]);
            return 0;
        }
    }
    return 1;
}

/* ---- one-hot products as a user writes them ------------------------------------ */

/* ids (any shape, i32) as f32 one-hot rows over a new last axis of v classes */
static kiln_tensor one_hot(kiln_graph *g, kiln_tensor ids, int64_t v) {
    int n = kiln_ndim(g, ids);
    kiln_sym dims[KILN_MAX_DIMS];
    for (int i = 0; i < n; i++) dims[i] = kiln_dim(g, ids, i);
    dims[n] = kiln_sym_int(g, v);
    kiln_tensor io = kiln_iota(g, KILN_I32, n + 1, dims, n);
    kiln_tensor rep = kiln_expand(g, kiln_unsqueeze(g, ids, n), n + 1, dims);
    return kiln_cast(g, kiln_eq(g, io, rep), KILN_F32);
}

enum { V = 7, DD = 5 };
static int32_t ids_data[12];
static float table_data[V * DD], wt_data[DD * V];

/* form 0: matmul(one_hot(ids (4)), table (V, D)); 1: ids (3, 4);
 * 2: linear(one_hot(ids), w (D, V)), the transposed table; 3: ids (seq) */
static kiln_graph *onehot_graph(int form) {
    kiln_graph *g = kiln_graph_new();
    const char *shape = form == 1 ? "3, 4" : form == 3 ? "seq" : "4";
    kiln_tensor ids = kiln_input(g, "ids", KILN_I32, shape);
    kiln_tensor oh = one_hot(g, ids, V);
    kiln_tensor out;
    if (form == 2) out = kiln_linear(g, oh, kiln_input(g, "w", KILN_F32, "5, 7"), KILN_NONE);
    else out = kiln_matmul(g, oh, kiln_input(g, "table", KILN_F32, "7, 5"));
    kiln_output(g, out, "out");
    int n = form == 1 ? 12 : 4;
    if (form == 3) kiln_bind_dim(g, "seq", 4);
    kiln_bind_input(g, "ids", ids_data, sizeof(int32_t) * (size_t)n);
    kiln_bind_input(g, "table", table_data, sizeof table_data);
    kiln_bind_input(g, "w", wt_data, sizeof wt_data);
    kiln_graph_clear_error(g); /* the form without "table" or "w" */
    return g;
}

int main(void) {
    char why[256];
    srand(2024);

    CASE_BEGIN("builders_check_operands");
    {
        kiln_graph *g = kiln_graph_new();
        kiln_tensor a = kiln_input(g, "a", KILN_F32, "3, 4, 5"), b = kiln_input(g, "b", KILN_F32, "3, 4, 5");
        kiln_tensor c = compound_contract(g, a, b, -2);
        char buf[64];
        CHECK(c != KILN_NONE && !strcmp(kiln_shape_str(g, c, buf, sizeof buf), "(3, 5)"), "contract: %s %s",
              kiln_shape_str(g, c, buf, sizeof buf), kiln_graph_error(g));
        kiln_tensor s = compound_softmax_online(g, a, b, 2);
        CHECK(s != KILN_NONE && !strcmp(kiln_shape_str(g, s, buf, sizeof buf), "(3, 4, 5)"), "softmax: %s",
              kiln_graph_error(g));
        kiln_tensor sc = compound_softmax_contract(g, a, b, a, 1);
        CHECK(sc != KILN_NONE && !strcmp(kiln_shape_str(g, sc, buf, sizeof buf), "(3, 5)"), "softmax_contract: %s",
              kiln_graph_error(g));
        kiln_graph_free(g);
        /* the three-operand form: one shape for all three, a float dtype */
        for (int i = 0; i < 3; i++) {
            g = kiln_graph_new();
            kiln_dtype t = i == 2 ? KILN_I32 : KILN_F32;
            kiln_tensor x = kiln_input(g, "x", t, "3, 4"), y = kiln_input(g, "y", t, i == 0 ? "4, 3" : "3, 4");
            kiln_tensor r = compound_softmax_contract(g, x, x, y, i == 1 ? 2 : 1);
            kiln_status want = i == 0 ? KILN_ERR_SHAPE : i == 1 ? KILN_ERR_INVALID : KILN_ERR_DTYPE;
            CHECK(r == KILN_NONE && kiln_graph_status(g) == want, "softmax_contract case %d: status %d (%s)", i,
                  (int)kiln_graph_status(g), kiln_graph_error(g));
            kiln_graph_free(g);
        }

        static const struct { const char *sa, *sb; kiln_dtype t; int op, axis; kiln_status want; } bad[] = {
            {"3, 4", "4, 3", KILN_F32, OP_CONTRACT, 0, KILN_ERR_SHAPE},
            {"3, 4", "3, 4", KILN_F32, OP_CONTRACT, 2, KILN_ERR_INVALID},
            {"3, 4", "3, 4", KILN_I32, OP_SOFTMAX_ONLINE, 1, KILN_ERR_DTYPE},
            {"3, 4", "3, 4", KILN_F32, OP_ADD, 0, KILN_ERR_INVALID}, /* not a compound op */
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            g = kiln_graph_new();
            kiln_tensor src[2] = {kiln_input(g, "a", bad[i].t, bad[i].sa), kiln_input(g, "b", bad[i].t, bad[i].sb)};
            kiln_tensor r = compound_build(g, (op_kind)bad[i].op, src, bad[i].axis);
            CHECK(r == KILN_NONE && kiln_graph_status(g) == bad[i].want, "case %zu: status %d (%s)", i,
                  (int)kiln_graph_status(g), kiln_graph_error(g));
            kiln_graph_free(g);
        }
    }
    CASE_END();

    CASE_BEGIN("contract_evaluates_its_definition");
    {
        /* A (3, 4) . B (4, 5) through broadcast views, contracted over axis 1 */
        static float A[12], B[20];
        for (int i = 0; i < 12; i++) A[i] = frand(-2, 2);
        for (int i = 0; i < 20; i++) B[i] = frand(-2, 2);
        kiln_graph *g = kiln_graph_new();
        kiln_sym d3[3] = {kiln_sym_int(g, 3), kiln_sym_int(g, 4), kiln_sym_int(g, 5)};
        kiln_tensor a = kiln_expand(g, kiln_unsqueeze(g, kiln_input(g, "A", KILN_F32, "3, 4"), 2), 3, d3);
        kiln_tensor b = kiln_expand(g, kiln_unsqueeze(g, kiln_input(g, "B", KILN_F32, "4, 5"), 0), 3, d3);
        kiln_tensor src[2] = {a, b};
        kiln_output(g, compound_contract(g, a, b, 1), "out");
        kiln_output(g, compound_expand(g, OP_CONTRACT, src, 1), "def");
        kiln_bind_input(g, "A", A, sizeof A);
        kiln_bind_input(g, "B", B, sizeof B);
        CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
        float out[15], def[15];
        CHECK(read_f32(g, "out", out, 15) == 15 && read_f32(g, "def", def, 15) == 15, "outputs");
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 5; j++) {
                double ref = 0;
                for (int k = 0; k < 4; k++) ref += (double)A[i * 4 + k] * (double)B[k * 5 + j];
                CHECK(fabs(out[i * 5 + j] - ref) <= 1e-5 * (1 + fabs(ref)), "(%d,%d): %g vs %g", i, j,
                      (double)out[i * 5 + j], ref);
                CHECK(out[i * 5 + j] == def[i * 5 + j], "(%d,%d) differs from the definition", i, j);
            }
        kiln_graph_free(g);
    }
    CASE_END();

    CASE_BEGIN("softmax_online_evaluates_its_definition");
    {
        static float X[24];
        for (int i = 0; i < 24; i++) X[i] = frand(-200, 200); /* exp2 of these overflows without the shift */
        for (int axis = 0; axis < 2; axis++) {
            kiln_graph *g = kiln_graph_new();
            kiln_tensor x = kiln_input(g, "X", KILN_F32, "4, 6");
            kiln_sym d2[2] = {kiln_sym_int(g, 4), kiln_sym_int(g, 6)};
            kiln_tensor c = kiln_full(g, 1.4426950408889634, KILN_F32, 2, d2);
            kiln_tensor src[2] = {x, c};
            kiln_output(g, compound_softmax_online(g, x, c, axis), "out");
            kiln_output(g, compound_expand(g, OP_SOFTMAX_ONLINE, src, axis), "def");
            kiln_bind_input(g, "X", X, sizeof X);
            CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
            float out[24], def[24];
            CHECK(read_f32(g, "out", out, 24) == 24 && read_f32(g, "def", def, 24) == 24, "outputs");
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 6; j++) {
                    double mx = -INFINITY, sum = 0;
                    for (int t = 0; t < (axis ? 6 : 4); t++) {
                        double v = X[axis ? i * 6 + t : t * 6 + j];
                        mx = v > mx ? v : mx;
                    }
                    for (int t = 0; t < (axis ? 6 : 4); t++) sum += exp(X[axis ? i * 6 + t : t * 6 + j] - mx);
                    double ref = exp(X[i * 6 + j] - mx) / sum;
                    CHECK(fabs(out[i * 6 + j] - ref) <= 1e-5, "axis %d (%d,%d): %g vs %g", axis, i, j,
                          (double)out[i * 6 + j], ref);
                    CHECK(out[i * 6 + j] == def[i * 6 + j], "axis %d (%d,%d) differs from the definition", axis, i, j);
                }
            kiln_graph_free(g);
        }
    }
    CASE_END();

    CASE_BEGIN("softmax_contract_evaluates_its_definition");
    {
        /* out[i, n] = sum_j softmax_j(X[i, :])[j] * W[j, n], X (4, 6) with large
         * logits and row 2 fully masked (every logit -1e30: uniform weights) */
        static float X[24], W[30];
        for (int i = 0; i < 24; i++) X[i] = i / 6 == 2 ? -1e30f : frand(-200, 200);
        for (int i = 0; i < 30; i++) W[i] = frand(-2, 2);
        kiln_graph *g = kiln_graph_new();
        kiln_sym d3[3] = {kiln_sym_int(g, 4), kiln_sym_int(g, 6), kiln_sym_int(g, 5)};
        kiln_tensor x = kiln_expand(g, kiln_unsqueeze(g, kiln_input(g, "X", KILN_F32, "4, 6"), 2), 3, d3);
        kiln_tensor w = kiln_expand(g, kiln_unsqueeze(g, kiln_input(g, "W", KILN_F32, "6, 5"), 0), 3, d3);
        kiln_tensor c = kiln_full(g, 1.4426950408889634, KILN_F32, 3, d3);
        kiln_tensor src[3] = {x, c, w};
        kiln_output(g, compound_softmax_contract(g, x, c, w, 1), "out");
        kiln_output(g, compound_expand(g, OP_SOFTMAX_CONTRACT, src, 1), "def");
        kiln_bind_input(g, "X", X, sizeof X);
        kiln_bind_input(g, "W", W, sizeof W);
        CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
        float out[20], def[20];
        CHECK(read_f32(g, "out", out, 20) == 20 && read_f32(g, "def", def, 20) == 20, "outputs");
        for (int i = 0; i < 4; i++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < 6; j++) mx = X[i * 6 + j] > mx ? X[i * 6 + j] : mx;
            for (int j = 0; j < 6; j++) sum += exp((double)X[i * 6 + j] - mx);
            for (int n = 0; n < 5; n++) {
                double ref = 0;
                for (int j = 0; j < 6; j++) ref += exp((double)X[i * 6 + j] - mx) / sum * W[j * 5 + n];
                CHECK(fabs(out[i * 5 + n] - ref) <= 1e-5 * (1 + fabs(ref)), "(%d,%d): %g vs %g", i, n,
                      (double)out[i * 5 + n], ref);
                CHECK(out[i * 5 + n] == def[i * 5 + n], "(%d,%d) differs from the definition", i, n);
            }
        }
        kiln_graph_free(g);
    }
    CASE_END();

    CASE_BEGIN("text_and_dot_show_compound_nodes");
    {
        kiln_graph *g = kiln_graph_new();
        kiln_tensor a = kiln_input(g, "a", KILN_F32, "3, 4"), b = kiln_input(g, "b", KILN_F32, "3, 4");
        kiln_output(g, compound_contract(g, a, b, 1), "out");
        char *t = kiln_graph_text(g), *d = kiln_graph_dot(g);
        CHECK(has_line(t, "%2 = CONTRACT f32 (3) %0 %1 axis 1 -> \"out\""), "text:\n%s", t);
        CHECK(has_line(t, "# compound CONTRACT(a, b) axis k := SUM_k(MUL(a, b))"), "text:\n%s", t);
        CHECK(!has_line(t, "SOFTMAX_ONLINE"), "an unused compound op is described:\n%s", t);
        CHECK(has_line(d, "CONTRACT axis 1") && has_line(d, "tooltip=\"CONTRACT(a, b)"), "dot:\n%s", d);
        free(t);
        free(d);
        kiln_graph_free(g);
    }
    CASE_END();

    CASE_BEGIN("softmax_graph_becomes_softmax_online");
    {
        static float X[5 * 16];
        for (int i = 0; i < 5 * 16; i++) X[i] = frand(-30, 30);
        kiln_graph *g = kiln_graph_new();
        kiln_output(g, kiln_softmax(g, kiln_input(g, "x", KILN_F32, "seq, 16"), 1), "out");
        kiln_bind_dim(g, "seq", 5);
        kiln_bind_input(g, "x", X, sizeof X);
        kiln_graph *o = kiln_graph_optimize(g);
        CHECK(o != NULL, "%s", kiln_graph_error(g));
        if (o) {
            CHECK(count_op(o, "SOFTMAX_ONLINE") == 1 && count_op(o, "EXP2") == 0 && count_op(o, "MAX") == 0,
                  "%d SOFTMAX_ONLINE, %d EXP2, %d MAX", count_op(o, "SOFTMAX_ONLINE"), count_op(o, "EXP2"),
                  count_op(o, "MAX"));
            /* the node is defined as the chain it replaced: equal bit for bit */
            CHECK(same_results(g, o, 0, why, sizeof why), "%s", why);
            /* and it goes through the e-graph again */
            kiln_graph *o2 = kiln_graph_optimize(o);
            CHECK(o2 && count_op(o2, "SOFTMAX_ONLINE") == 1 && same_results(g, o2, 0, why, sizeof why),
                  "second trip: %s", o2 ? why : kiln_graph_error(o));
            kiln_graph_free(o2);
        }
        kiln_graph_free(o);
        kiln_graph_free(g);
    }
    CASE_END();

    CASE_BEGIN("attention_graph_streams");
    for (int window = 0; window <= 2; window += 2) {
        static float Q[3 * 4 * 8], K[5 * 2 * 8], Vv[5 * 2 * 8];
        for (size_t i = 0; i < sizeof Q / sizeof Q[0]; i++) Q[i] = frand(-1, 1);
        for (size_t i = 0; i < sizeof K / sizeof K[0]; i++) K[i] = frand(-1, 1), Vv[i] = frand(-1, 1);
        kiln_graph *g = kiln_graph_new();
        kiln_sym pos = kiln_sym_var(g, "pos");
        kiln_tensor q = kiln_input(g, "q", KILN_F32, "seq, 4, 8");
        kiln_tensor k = kiln_input(g, "k", KILN_F32, "seq + pos, 2, 8");
        kiln_tensor v = kiln_input(g, "v", KILN_F32, "seq + pos, 2, 8");
        kiln_output(g, kiln_attention(g, q, k, v, pos, 0.35, window), "out");
        kiln_bind_dim(g, "seq", 3);
        kiln_bind_dim(g, "pos", 2);
        kiln_bind_input(g, "q", Q, sizeof Q);
        kiln_bind_input(g, "k", K, sizeof K);
        kiln_bind_input(g, "v", Vv, sizeof Vv);
        kiln_graph *o = kiln_graph_optimize(g);
        CHECK(o != NULL, "%s", kiln_graph_error(g));
        if (o) {
            /* the scores' contraction, then the streaming softmax-times-values */
            CHECK(count_op(o, "SOFTMAX_CONTRACT") == 1 && count_op(o, "CONTRACT") == 1 &&
                      count_op(o, "SOFTMAX_ONLINE") == 0 && count_op(o, "EXP2") == 0,
                  "window %d: %d SOFTMAX_CONTRACT, %d CONTRACT, %d SOFTMAX_ONLINE, %d EXP2", window,
                  count_op(o, "SOFTMAX_CONTRACT"), count_op(o, "CONTRACT"), count_op(o, "SOFTMAX_ONLINE"),
                  count_op(o, "EXP2"));
            CHECK(same_results(g, o, 1e-5, why, sizeof why), "window %d: %s", window, why);
            kiln_graph *o2 = kiln_graph_optimize(o);
            CHECK(o2 && count_op(o2, "SOFTMAX_CONTRACT") == 1 && same_results(g, o2, 1e-5, why, sizeof why),
                  "second trip: %s", o2 ? why : kiln_graph_error(o));
            kiln_graph_free(o2);
        }
        kiln_graph_free(o);
        kiln_graph_free(g);
    }
    CASE_END();

    CASE_BEGIN("onehot_products_become_gathers");
    {
        for (int i = 0; i < V * DD; i++) table_data[i] = frand(-3, 3), wt_data[i] = frand(-3, 3);
        for (int i = 0; i < 12; i++) ids_data[i] = rand() % V;
        ids_data[1] = -1; /* outside the vocabulary: an all-zero one-hot row */
        ids_data[2] = V;
        ids_data[7] = -5;
        for (int form = 0; form < 4; form++) {
            kiln_graph *g = onehot_graph(form);
            CHECK(kiln_graph_status(g) == KILN_OK, "form %d: %s", form, kiln_graph_error(g));
            kiln_graph *o = kiln_graph_optimize(g);
            CHECK(o != NULL, "form %d: %s", form, kiln_graph_error(g));
            if (!o) {
                kiln_graph_free(g);
                continue;
            }
            CHECK(count_op(o, "GATHER") == 1 && count_op(o, "CONTRACT") == 0 && count_op(o, "SUM") == 0 &&
                      count_op(o, "CAST") == 0,
                  "form %d: %d GATHER, %d CONTRACT, %d SUM, %d CAST", form, count_op(o, "GATHER"),
                  count_op(o, "CONTRACT"), count_op(o, "SUM"), count_op(o, "CAST"));
            /* a one-hot product of a finite table is exact, and so is a gather */
            CHECK(same_results(g, o, 0, why, sizeof why), "form %d: %s", form, why);
            if (form == 0) { /* the zero row for an id outside [0, V) */
                CHECK(read_f32(o, "out", ra, CAP) == 4 * DD, "form 0 output");
                for (int j = 0; j < DD; j++)
                    CHECK(ra[1 * DD + j] == 0 && ra[2 * DD + j] == 0, "id %d or %d: column %d is %g / %g", -1, V, j,
                          (double)ra[DD + j], (double)ra[2 * DD + j]);
            }
            kiln_graph *o2 = kiln_graph_optimize(o);
            CHECK(o2 && same_results(g, o2, 0, why, sizeof why), "form %d, second trip: %s", form,
                  o2 ? why : kiln_graph_error(o));
            kiln_graph_free(o2);
            kiln_graph_free(o);
            kiln_graph_free(g);
        }
    }
    CASE_END();

    CASE_BEGIN("onehot_needs_the_whole_pattern");
    {
        /* a product with a one-hot over the wrong axis (iota along rows) is no gather */
        kiln_graph *g = kiln_graph_new();
        kiln_tensor ids = kiln_input(g, "ids", KILN_I32, "7");
        kiln_sym dims[2] = {kiln_sym_int(g, 7), kiln_sym_int(g, 7)};
        kiln_tensor io = kiln_iota(g, KILN_I32, 2, dims, 0);
        kiln_tensor rep = kiln_expand(g, kiln_unsqueeze(g, ids, 1), 2, dims);
        kiln_tensor oh = kiln_cast(g, kiln_eq(g, io, rep), KILN_F32);
        kiln_output(g, kiln_matmul(g, oh, kiln_input(g, "table", KILN_F32, "7, 5")), "out");
        for (int i = 0; i < 7; i++) ids_data[i] = (i * 3) % 7;
        kiln_bind_input(g, "ids", ids_data, 7 * sizeof(int32_t));
        kiln_bind_input(g, "table", table_data, sizeof table_data);
        kiln_graph *o = kiln_graph_optimize(g);
        CHECK(o && count_op(o, "GATHER") == 0, "a column one-hot became a gather");
        CHECK(o && same_results(g, o, 1e-6, why, sizeof why), "%s", why);
        kiln_graph_free(o);
        kiln_graph_free(g);
    }
    CASE_END();

    return check_exit();
}
