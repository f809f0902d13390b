/* compound.h — the compound ops of compound.def: internal builders, their
 * primitive definitions, and a one-line description of each.
 *
 * Only the rewriter (extraction, src/rewrite/convert.c) and the reference
 * interpreter use these; they are not part of kiln.h because users never
 * build compound nodes. Invariants: a compound node's value is, by
 * definition, the value of compound_expand's primitive subgraph on the same
 * operands; builders check operands like the public builders do and report
 * misuse through the graph's sticky error.
 */
#ifndef KILN_COMPOUND_H
#define KILN_COMPOUND_H

#include "graph.h"

/* a macro, so that op_kind and int arguments both convert without warnings */
#define op_is_compound(op) ((int)(op) >= (int)OP_PRIM_COUNT && (int)(op) < (int)OP_COUNT)

/* the compound ops alone, in compound.def's order, so that a switch over
 * them lists only them (and -Wswitch names a new one); compound_kind_of is
 * defined for op_is_compound(op) only */
typedef enum compound_kind {
#define X(name, arity, flags, xcost, kcost) COMPOUND_##name,
#include "compound.def"
#undef X
} compound_kind;
#define compound_kind_of(op) ((compound_kind)((int)(op) - (int)OP_PRIM_COUNT))

/* SUM_axis(MUL(a, b)): a and b of one shape and non-block dtype */
kiln_tensor compound_contract(kiln_graph *g, kiln_tensor a, kiln_tensor b, int axis);
/* exp2((x - max_axis x) * c) / sum_axis(...): x and c of one shape, float dtype */
kiln_tensor compound_softmax_online(kiln_graph *g, kiln_tensor x, kiln_tensor c, int axis);
/* SUM_axis(MUL(SOFTMAX_ONLINE_axis(x, c), v)): x, c, v of one shape, float dtype */
kiln_tensor compound_softmax_contract(kiln_graph *g, kiln_tensor x, kiln_tensor c, kiln_tensor v, int axis);
/* the builder of compound op `op` (operands src[0..arity)) */
kiln_tensor compound_build(kiln_graph *g, op_kind op, const kiln_tensor *src, int axis);
/* the definition of compound op `op`: its primitive expansion built on g
 * with the public builders (KILN_NONE and g's error on bad operands) */
kiln_tensor compound_expand(kiln_graph *g, op_kind op, const kiln_tensor *src, int axis);
/* the definition as text, for graph printing ("" for a primitive) */
const char *compound_definition(op_kind op);

#endif
