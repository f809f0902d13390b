/* test_graph.c — the builder's contract: sticky errors whose first message
 * names the op and the shapes, numpy broadcasting into expand views, symbolic
 * shapes parsed from text, conditions checked at run time, bindings.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "graph.h"
#include "kiln.h"
#include "kiln_compile.h"
#include "rewrite.h"

static int contains(const char *s, const char *part) { return strstr(s, part) != NULL; }

static void test_sticky_error(void) {
    CASE_BEGIN("graph_sticky_error_keeps_first_message");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor a = kiln_input(g, "a", KILN_F32, "3, 4");
    kiln_tensor b = kiln_input(g, "b", KILN_F32, "5, 4");
    kiln_tensor c = kiln_add(g, a, b);
    CHECK(c == KILN_NONE, "add of (3,4) and (5,4) must fail");
    CHECK(kiln_graph_status(g) == KILN_ERR_SHAPE, "status %d", kiln_graph_status(g));
    const char *msg = kiln_graph_error(g);
    CHECK(contains(msg, "ADD") && contains(msg, "(3, 4)") && contains(msg, "(5, 4)"), "message: %s", msg);
    int32_t nodes = g->nnodes;
    kiln_tensor d = kiln_exp2(g, a);
    CHECK(d == KILN_NONE, "builder must do nothing after an error");
    CHECK(g->nnodes == nodes, "no node added after the error");
    kiln_tensor e = kiln_input(g, "e", KILN_I32, "2");
    kiln_tensor f = kiln_exp2(g, e); /* a second, different error */
    CHECK(f == KILN_NONE && strcmp(kiln_graph_error(g), msg) == 0, "first message kept: %s", kiln_graph_error(g));
    CHECK(kiln_eval_reference(g) == KILN_ERR_SHAPE, "running a failed graph reports its error");
    kiln_graph_free(g);
    CASE_END();
}

static void test_dtype_errors(void) {
    CASE_BEGIN("graph_dtype_errors_name_op_and_dtypes");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor a = kiln_input(g, "a", KILN_F32, "2");
    kiln_tensor i = kiln_input(g, "i", KILN_I32, "2");
    CHECK(kiln_add(g, a, i) == KILN_NONE, "f32 + i32 must fail");
    CHECK(kiln_graph_status(g) == KILN_ERR_DTYPE, "status %d", kiln_graph_status(g));
    CHECK(contains(kiln_graph_error(g), "ADD") && contains(kiln_graph_error(g), "i32"), "%s", kiln_graph_error(g));
    kiln_graph_free(g);

    g = kiln_graph_new();
    i = kiln_input(g, "i", KILN_I32, "seq");
    CHECK(kiln_sqrt(g, i) == KILN_NONE && kiln_graph_status(g) == KILN_ERR_DTYPE, "sqrt of i32");
    CHECK(contains(kiln_graph_error(g), "SQRT") && contains(kiln_graph_error(g), "(seq)"), "%s", kiln_graph_error(g));
    kiln_graph_free(g);

    g = kiln_graph_new();
    a = kiln_input(g, "a", KILN_F32, "2, 3");
    CHECK(kiln_sum(g, a, 2) == KILN_NONE && kiln_graph_status(g) == KILN_ERR_INVALID, "bad axis");
    CHECK(contains(kiln_graph_error(g), "SUM") && contains(kiln_graph_error(g), "axis 2"), "%s", kiln_graph_error(g));
    kiln_graph_free(g);
    CASE_END();
}

static void test_bad_shapes_text(void) {
    CASE_BEGIN("graph_bad_shape_text_is_an_error");
    const char *bad[] = {"3,", "(", "a+", "3 $ 4", "1,2,3,4,5,6,7,8,9"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        kiln_graph *g = kiln_graph_new();
        kiln_tensor x = kiln_input(g, "x", KILN_F32, bad[k]);
        CHECK(x == KILN_NONE && kiln_graph_status(g) != KILN_OK, "shape '%s' accepted", bad[k]);
        CHECK(strlen(kiln_graph_error(g)) > 0, "no message for '%s'", bad[k]);
        kiln_graph_free(g);
    }
    kiln_graph *g = kiln_graph_new();
    kiln_input(g, "x", KILN_F32, "2");
    CHECK(kiln_input(g, "x", KILN_F32, "2") == KILN_NONE, "duplicate input name accepted");
    kiln_graph_free(g);
    g = kiln_graph_new();
    CHECK(kiln_input(g, "w", KILN_Q8_0, "4, 33") == KILN_NONE && kiln_graph_status(g) == KILN_ERR_SHAPE,
          "q8_0 with a last axis of 33 accepted");
    kiln_graph_free(g);
    CASE_END();
}

static void test_broadcast_is_views(void) {
    CASE_BEGIN("graph_broadcast_adds_views_not_nodes");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor a = kiln_input(g, "a", KILN_F32, "seq, 1, 4");
    kiln_tensor b = kiln_input(g, "b", KILN_F32, "3, 1");
    int32_t before = g->nnodes;
    kiln_tensor c = kiln_add(g, a, b);
    CHECK(c != KILN_NONE, "broadcast add failed: %s", kiln_graph_error(g));
    CHECK(g->nnodes == before + 1, "broadcast must add only the ADD node (%d new)", g->nnodes - before);
    char buf[128];
    CHECK(strcmp(kiln_shape_str(g, c, buf, sizeof buf), "(seq, 3, 4)") == 0, "shape %s", buf);
    /* and it computes: c[s, i, j] = a[s, 0, j] + b[i, 0] */
    kiln_output(g, c, "c");
    float av[2 * 4], bv[3], cv[2 * 3 * 4];
    for (int k = 0; k < 8; k++) av[k] = (float)k;
    for (int k = 0; k < 3; k++) bv[k] = 100.0f * (float)(k + 1);
    CHECK(kiln_bind_dim(g, "seq", 2) == KILN_OK, "bind");
    kiln_bind_input(g, "a", av, sizeof av);
    kiln_bind_input(g, "b", bv, sizeof bv);
    CHECK(kiln_eval_reference(g) == KILN_OK, "run: %s", kiln_graph_error(g));
    CHECK(kiln_read_output(g, "c", cv, sizeof cv) == KILN_OK, "read: %s", kiln_graph_error(g));
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++)
                CHECK(cv[(s * 3 + i) * 4 + j] == av[s * 4 + j] + bv[i], "c[%d,%d,%d]", s, i, j);
    kiln_graph_free(g);
    CASE_END();
}

static void test_symbolic_slice_checked_at_run_time(void) {
    CASE_BEGIN("graph_symbolic_slice_checked_at_run_time");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor cache = kiln_input(g, "cache", KILN_F32, "8, 2");
    kiln_sym pos = kiln_sym_var(g, "pos"), seq = kiln_sym_var(g, "seq");
    kiln_tensor s = kiln_slice(g, cache, 0, kiln_sym_int(g, 0), kiln_sym_add(g, pos, seq), 1);
    CHECK(s != KILN_NONE, "symbolic slice: %s", kiln_graph_error(g));
    kiln_output(g, kiln_sum(g, s, 0), "total");
    float cv[16];
    for (int k = 0; k < 16; k++) cv[k] = 1.0f;
    kiln_bind_input(g, "cache", cv, sizeof cv);
    kiln_bind_dim(g, "pos", 5);
    kiln_bind_dim(g, "seq", 3);
    float out[2];
    CHECK(kiln_eval_reference(g) == KILN_OK, "in range: %s", kiln_graph_error(g));
    CHECK(kiln_read_output(g, "total", out, sizeof out) == KILN_OK && out[0] == 8.0f, "sum of 8 rows: %g", (double)out[0]);
    kiln_bind_dim(g, "seq", 4); /* pos+seq = 9 > 8 rows */
    CHECK(kiln_eval_reference(g) == KILN_ERR_RANGE, "past the end must be a range error, got %d", kiln_graph_status(g));
    CHECK(contains(kiln_graph_error(g), "slice") && contains(kiln_graph_error(g), "seq=4"), "%s", kiln_graph_error(g));
    /* provably out of range is a builder error */
    kiln_graph *h = kiln_graph_new();
    kiln_tensor x = kiln_input(h, "x", KILN_F32, "4");
    CHECK(kiln_slice(h, x, 0, kiln_sym_int(h, 1), kiln_sym_int(h, 6), 1) == KILN_NONE, "slice 1:6 of 4 accepted");
    kiln_graph_free(h);
    kiln_graph_free(g);
    CASE_END();
}

static void test_bindings(void) {
    CASE_BEGIN("graph_binding_errors");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "n");
    kiln_output(g, kiln_exp2(g, x), "y");
    CHECK(kiln_bind_dim(g, "nope", 3) == KILN_ERR_INVALID, "unknown dim accepted");
    CHECK(contains(kiln_graph_error(g), "nope"), "%s", kiln_graph_error(g));
    float v[3] = {0, 1, 2};
    CHECK(kiln_bind_input(g, "y", v, sizeof v) == KILN_ERR_INVALID, "binding an output name as input accepted");
    CHECK(kiln_eval_reference(g) == KILN_ERR_UNBOUND, "unbound n: %d", kiln_graph_status(g));
    CHECK(contains(kiln_graph_error(g), "'n'"), "%s", kiln_graph_error(g));
    kiln_bind_dim(g, "n", 3);
    kiln_bind_input(g, "x", v, sizeof v);
    CHECK(kiln_eval_reference(g) == KILN_OK, "run: %s", kiln_graph_error(g));
    float y[3];
    CHECK(kiln_read_output(g, "y", y, sizeof y) == KILN_OK, "read");
    for (int i = 0; i < 3; i++) CHECK(fabsf(y[i] - exp2f(v[i])) < 1e-6f, "y[%d] = %g", i, (double)y[i]);
    CHECK(kiln_output(g, x, "y") != KILN_OK, "duplicate output name accepted");
    kiln_graph_free(g);
    CASE_END();
}

static void test_text_forms(void) {
    CASE_BEGIN("graph_text_and_dot_forms");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "seq, 8");
    kiln_output(g, kiln_softmax(g, kiln_transpose(g, x, 0, 1), -1), "p");
    CHECK(kiln_graph_status(g) == KILN_OK, "%s", kiln_graph_error(g));
    char *text = kiln_graph_text(g), *dot = kiln_graph_dot(g);
    CHECK(text && contains(text, "INPUT") && contains(text, "EXP2") && contains(text, "seq"), "text:\n%s", text ? text : "");
    CHECK(dot && contains(dot, "digraph") && contains(dot, "->"), "dot:\n%s", dot ? dot : "");
    free(text);
    free(dot);
    kiln_graph_free(g);
    CASE_END();
}

static void test_compile_rejects_compound(void) {
    CASE_BEGIN("graph_compile_rejects_compound_ops_cleanly");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "4, 8");
    kiln_output(g, kiln_softmax(g, x, 1), "p");
    kiln_graph *o = kiln_graph_optimize(g);
    CHECK(o != NULL, "optimize: %s", kiln_graph_error(g));
    if (o) {
        kiln_status st = KILN_OK;
        kiln_program *p = kiln_compile(o, NULL, &st);
        CHECK(p == NULL && st == KILN_ERR_UNSUPPORTED, "compiling a compound op must fail cleanly (st %d)", st);
        CHECK(contains(kiln_graph_error(o), "SOFTMAX_ONLINE"), "%s", kiln_graph_error(o));
        kiln_program_free(p);
        kiln_graph_free(o);
    }
    kiln_graph_free(g);
    CASE_END();
}

static void test_primitive_extraction(void) {
    CASE_BEGIN("graph_optimize_primitives_only_has_no_compound_ops");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "rows, 8");
    kiln_output(g, kiln_softmax(g, x, 1), "p");
    float xv[3 * 8], a[3 * 8], b[3 * 8];
    for (int i = 0; i < 24; i++) xv[i] = (float)((i * 7) % 11) - 5.0f;
    kiln_bind_dim(g, "rows", 3);
    kiln_bind_input(g, "x", xv, sizeof xv);
    kiln_graph *o = eg_optimize_for_backend(g, 1, 0);
    CHECK(o != NULL, "optimize: %s", kiln_graph_error(g));
    if (o) {
        int compound = 0;
        for (int32_t i = 0; i < o->nnodes; i++) compound += (int)o->nodes[i].op >= (int)OP_PRIM_COUNT;
        CHECK(compound == 0, "%d compound nodes in a primitives-only extraction", compound);
        CHECK(kiln_eval_reference(g) == KILN_OK && kiln_read_output(g, "p", a, sizeof a) == KILN_OK, "ref");
        CHECK(kiln_eval_reference(o) == KILN_OK && kiln_read_output(o, "p", b, sizeof b) == KILN_OK,
              "extracted (bindings carried over): %s", kiln_graph_error(o));
        for (int i = 0; i < 24; i++) CHECK(fabsf(a[i] - b[i]) <= 1e-6f * fabsf(a[i]) + 1e-7f, "p[%d] %g vs %g", i, (double)a[i], (double)b[i]);
        kiln_graph_free(o);
    }
    kiln_graph_free(g);
    CASE_END();
}

static void test_compiled_checks_conditions(void) {
    CASE_BEGIN("graph_compiled_run_checks_symbolic_slice_bounds");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor c = kiln_input(g, "cache", KILN_F32, "8, 2");
    kiln_sym pos = kiln_sym_var(g, "pos"), seq = kiln_sym_var(g, "seq");
    kiln_output(g, kiln_sum(g, kiln_slice(g, c, 0, kiln_sym_int(g, 0), kiln_sym_add(g, pos, seq), 1), 0), "t");
    float cv[16], t[2];
    for (int i = 0; i < 16; i++) cv[i] = 1.0f;
    kiln_bind_input(g, "cache", cv, sizeof cv);
    kiln_status st = KILN_OK;
    kiln_program *p = kiln_compile(g, NULL, &st);
    CHECK(p != NULL, "compile: %s", kiln_graph_error(g));
    if (p) {
        kiln_bind_dim(g, "pos", 5);
        kiln_bind_dim(g, "seq", 3);
        CHECK(kiln_run(p) == KILN_OK && kiln_read_output(g, "t", t, sizeof t) == KILN_OK && t[0] == 8.0f,
              "in range: %s", kiln_graph_error(g));
        kiln_bind_dim(g, "seq", 400000);
        CHECK(kiln_run(p) == KILN_ERR_RANGE, "a stop past the end must be a range error, not a read past the buffer");
        CHECK(contains(kiln_graph_error(g), "seq=400000"), "%s", kiln_graph_error(g));
        kiln_program_free(p);
    }
    kiln_graph_free(g);
    CASE_END();
}

int main(void) {
    test_compiled_checks_conditions();
    test_primitive_extraction();
    test_compile_rejects_compound();
    test_sticky_error();
    test_dtype_errors();
    test_bad_shapes_text();
    test_broadcast_is_views();
    test_symbolic_slice_checked_at_run_time();
    test_bindings();
    test_text_forms();
    return check_exit();
}
