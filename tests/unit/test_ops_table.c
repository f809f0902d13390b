/* test_ops_table.c — the columns of src/ir/ops.def and compound.def say true
 * things about the ops.
 *
 * The table's shape: exactly one class flag per op, arity as the class says,
 * the promise flags (OPF_VEC, OPF_FINITE0, a KCOST) only on elementwise ops,
 * OPF_AXIS on exactly the ops with an axis, a positive extraction weight.
 * And the one column that states a numeric fact: OPF_FINITE0 (the demand
 * analysis of src/sched/demand.c relies on it) is checked against the
 * reference interpreter, which must give a finite value wherever one operand
 * is 0 and the others finite; a unary op without the flag must not (that is
 * why RECIP and LOG2 lack it). Every unary op is built through graph_unary
 * (what its public builder and the e-graph call), so a new one cannot skip
 * these checks, and its rows of ops.def agree (the F32 and F64 meanings on a
 * few values); every binary op must have a builder below.
 */
#include <math.h>
#include <string.h>

#include "check.h"
#include "graph.h"
#include "kiln.h"

typedef kiln_tensor (*binary_fn)(kiln_graph *, kiln_tensor, kiln_tensor);

static const struct { op_kind op; binary_fn fn; } binary_builders[] = {
    {OP_ADD, kiln_add}, {OP_MUL, kiln_mul}, {OP_MOD, kiln_mod}, {OP_LT, kiln_lt},
};
#define COUNT(a) ((int)(sizeof(a) / sizeof(a)[0]))

static int popcount(unsigned v) {
    int n = 0;
    for (; v; v &= v - 1) n++;
    return n;
}

static void test_rows(void) {
    CASE_BEGIN("ops_table_rows");
    const unsigned classes = OPF_LEAF | OPF_UNARY | OPF_BINARY | OPF_REDUCE | OPF_DATA | OPF_LAYOUT | OPF_COMPOUND;
    CHECK(OP_PRIM_COUNT > 0 && OP_PRIM_COUNT < OP_COUNT, "%d primitives of %d ops", OP_PRIM_COUNT, OP_COUNT);
    for (int op = 0; op < OP_COUNT; op++) {
        const op_info *o = &op_table[op];
        unsigned f = o->flags;
        int elementwise = (f & (OPF_UNARY | OPF_BINARY)) != 0;
        CHECK(o->name && o->name[0], "op %d has no name", op);
        CHECK(popcount(f & classes) == 1, "%s: %d class flags", o->name, popcount(f & classes));
        CHECK(((f & OPF_COMPOUND) != 0) == (op >= OP_PRIM_COUNT), "%s: compound flag vs its table", o->name);
        if (f & OPF_LEAF) CHECK(o->arity == 0, "%s: leaf of arity %d", o->name, o->arity);
        if (f & (OPF_UNARY | OPF_REDUCE | OPF_LAYOUT)) CHECK(o->arity == 1, "%s: arity %d", o->name, o->arity);
        if (f & OPF_BINARY) CHECK(o->arity == 2, "%s: arity %d", o->name, o->arity);
        CHECK(o->arity >= 0 && o->arity <= 3, "%s: arity %d", o->name, o->arity);
        CHECK(!(f & (OPF_VEC | OPF_FINITE0)) || elementwise, "%s: a promise flag on a non-elementwise op", o->name);
        CHECK((o->kcost > 0) == elementwise, "%s: KCOST %g", o->name, o->kcost);
        CHECK(o->xcost > 0, "%s: XCOST %g", o->name, o->xcost);
        int has_axis = (f & (OPF_REDUCE | OPF_COMPOUND)) != 0 || op == OP_IOTA;
        CHECK(((f & OPF_AXIS) != 0) == has_axis, "%s: OPF_AXIS", o->name);
    }
    /* names are distinct (dumps and rule text name ops by them) */
    for (int a = 0; a < OP_COUNT; a++)
        for (int b = a + 1; b < OP_COUNT; b++)
            CHECK(strcmp(op_table[a].name, op_table[b].name) != 0, "ops %d and %d share a name", a, b);
    CASE_END();
}

static void test_builders_cover(void) {
    CASE_BEGIN("ops_table_elementwise_builders");
    for (int op = 0; op < OP_COUNT; op++) {
        int found = 0;
        if (op_unary[op].f32) found += 1; /* a unary row of ops.def */
        for (int i = 0; i < COUNT(binary_builders); i++) found += 2 * ((int)binary_builders[i].op == op);
        unsigned f = op_table[op].flags;
        int want = f & OPF_UNARY ? 1 : f & OPF_BINARY ? 2 : 0;
        CHECK(found == want, "%s: builder entries %d, want %d", op_table[op].name, found, want);
    }
    CASE_END();
}

/* the op's f32 result on (a) or (a, b) by the reference interpreter */
static float eval1(op_kind op, float a) {
    kiln_graph *g = kiln_graph_new();
    kiln_output(g, graph_unary(g, op, kiln_input(g, "a", KILN_F32, "1")), "y");
    float y = NAN;
    kiln_bind_input(g, "a", &a, sizeof a);
    if (kiln_eval_reference(g) != KILN_OK || kiln_read_output(g, "y", &y, sizeof y) != KILN_OK) y = NAN;
    kiln_graph_free(g);
    return y;
}

static float eval2(binary_fn fn, float a, float b) {
    kiln_graph *g = kiln_graph_new();
    kiln_output(g, fn(g, kiln_input(g, "a", KILN_F32, "1"), kiln_input(g, "b", KILN_F32, "1")), "y");
    float y = NAN;
    kiln_bind_input(g, "a", &a, sizeof a);
    kiln_bind_input(g, "b", &b, sizeof b);
    if (kiln_eval_reference(g) != KILN_OK || kiln_read_output(g, "y", &y, sizeof y) != KILN_OK) y = NAN;
    kiln_graph_free(g);
    return y;
}

static void test_finite0(void) {
    CASE_BEGIN("ops_table_finite0_vs_interpreter");
    for (int op = 0; op < OP_COUNT; op++) {
        const op_info *o = &op_table[op];
        if (!(o->flags & OPF_UNARY)) continue;
        float y = eval1((op_kind)op, 0.0f);
        if (o->flags & OPF_FINITE0) CHECK(isfinite(y), "%s(0) = %g, flagged OPF_FINITE0", o->name, (double)y);
        else CHECK(!isfinite(y), "%s(0) = %g is finite: flag it OPF_FINITE0", o->name, (double)y);
        /* the F32 and F64 columns state one meaning, and the interpreter uses it */
        const float xs[] = {0.5f, 1.0f, 2.25f, 7.0f};
        for (int k = 0; k < COUNT(xs); k++) {
            float f = op_unary[op].f32(xs[k]), d = (float)op_unary[op].f64((double)xs[k]);
            CHECK(fabsf(f - d) <= 1e-5f * fabsf(d) + 1e-6f, "%s(%g): f32 %g, f64 %g", o->name, (double)xs[k],
                  (double)f, (double)d);
            float y1 = eval1((op_kind)op, xs[k]);
            CHECK(y1 == f || (isnan(y1) && isnan(f)), "%s(%g): interpreter %g, F32 column %g", o->name,
                  (double)xs[k], (double)y1, (double)f);
        }
    }
    const float others[] = {0.0f, 1.5f, -3.0f, 1e30f};
    for (int i = 0; i < COUNT(binary_builders); i++) {
        const op_info *o = &op_table[binary_builders[i].op];
        if (!(o->flags & OPF_FINITE0)) continue;
        for (int k = 0; k < COUNT(others); k++) {
            float y0 = eval2(binary_builders[i].fn, 0.0f, others[k]), y1 = eval2(binary_builders[i].fn, others[k], 0.0f);
            CHECK(isfinite(y0) && isfinite(y1), "%s with a 0 and %g: %g, %g", o->name, (double)others[k],
                  (double)y0, (double)y1);
        }
    }
    CASE_END();
}

int main(void) {
    test_rows();
    test_builders_cover();
    test_finite0();
    return check_exit();
}
