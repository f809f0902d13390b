/* dot.c — a kiln_graph as readable text and as Graphviz DOT.
 *
 * Text form, one line per node in g->nodes order (which is topological):
 *     %3 = ADD f32 (seq, 64) %1 %2[view: [(seq, 64) strides (0, 1) offset 0]]
 * Operands are node ids; an operand read through anything but the dense
 * layout of its node's own shape carries its view, since that is where
 * movement (transpose, broadcast, pad, ...) lives in kiln. Nodes that are
 * outputs end with `-> "name"`, and a final list maps each output name to its
 * tensor (with the view when the output itself is a view).
 *
 * Compound ops (made only by the rewriter, src/ir/compound.def) print like
 * primitives with their axis; since users never build them, the text form
 * opens with a "# compound ..." comment giving the definition of each one the
 * graph uses.
 *
 * DOT form: one graph node per op, one edge per operand, labelled with the
 * view when it is not the identity; outputs are extra ellipse nodes; compound
 * nodes are shaded and carry their definition as a tooltip.
 *
 * Both only read the graph (also a graph with a builder error: what was built
 * is shown, and the error is printed as a comment). Strings are malloc'd and
 * owned by the caller.
 */
#include <stdarg.h>
#include <string.h>

#include "base.h"
#include "compound.h"
#include "dtype.h"
#include "graph.h"

/* ---- a growable string -------------------------------------------------- */

/* DOT string-literal escaping; newlines become DOT's "\n" */
static void sb_put_escaped(kiln_sb *b, const char *s) {
    for (; *s; s++) {
        char c[3] = {0, 0, 0};
        if (*s == '"' || *s == '\\') {
            c[0] = '\\';
            c[1] = *s;
        } else if (*s == '\n') {
            c[0] = '\\';
            c[1] = 'n';
        } else {
            c[0] = *s;
        }
        kiln_sb_puts(b, c);
    }
}

/* sym_print and view_print report the length they need (like snprintf):
 * print into a stack buffer and retry on the heap when it is too small */
static void sb_sym(kiln_sb *b, const kiln_graph *g, sym_id s) {
    char tmp[256];
    int need = sym_print(g->syms, s, tmp, sizeof tmp);
    if (need < (int)sizeof tmp) {
        kiln_sb_puts(b, tmp);
        return;
    }
    char *big = kiln_xmalloc((size_t)need + 1);
    sym_print(g->syms, s, big, (size_t)need + 1);
    kiln_sb_puts(b, big);
    free(big);
}

static void sb_view(kiln_sb *b, const kiln_graph *g, const view *v) {
    char tmp[512];
    int need = view_print(v, g->syms, tmp, sizeof tmp);
    if (need < (int)sizeof tmp) {
        kiln_sb_puts(b, tmp);
        return;
    }
    char *big = kiln_xmalloc((size_t)need + 1);
    view_print(v, g->syms, big, (size_t)need + 1);
    kiln_sb_puts(b, big);
    free(big);
}

static void sb_shape(kiln_sb *b, const kiln_graph *g, int ndim, const sym_id *shape) {
    kiln_sb_puts(b, "(");
    for (int i = 0; i < ndim; i++) {
        if (i) kiln_sb_puts(b, ", ");
        sb_sym(b, g, shape[i]);
    }
    kiln_sb_puts(b, ")");
}

/* ---- graph queries ------------------------------------------------------ */

static const char *dtype_str(kiln_dtype t) {
    return (t >= 0 && t < KILN_DTYPE_COUNT) ? dtype_table[t].name : "?";
}

/* a tensor's view is worth showing unless it reads its node densely in the
 * node's own shape (an identity view of a different shape is a reshape) */
static int tensor_has_view(const kiln_graph *g, int32_t t) {
    const tensor *tt = &g->tensors[t];
    const view *v = &g->views[tt->view];
    const node *n = &g->nodes[tt->node];
    if (!view_is_identity(v, g->syms)) return 1;
    if (view_ndim(v) != n->ndim) return 1;
    const sym_id *vs = view_shape(v);
    for (int d = 0; d < n->ndim; d++)
        if (vs[d] != n->shape[d]) return 1;
    return 0;
}

static int tensor_valid(const kiln_graph *g, int32_t t) {
    return t >= 0 && t < g->ntensors && g->tensors[t].node >= 0 && g->tensors[t].node < g->nnodes &&
           g->tensors[t].view >= 0 && g->tensors[t].view < g->nviews;
}

/* the op-specific attribute of a node, after its operands: an input's name,
 * a constant's value, the axis of the ops that have one (OPF_AXIS) */
static void sb_attr(kiln_sb *b, const node *n) {
    if (n->op == OP_INPUT)
        kiln_sb_printf(b, " \"%s\"%s", n->name ? n->name : "", n->is_state ? " state" : "");
    else if (n->op == OP_CONST)
        kiln_sb_printf(b, " %.9g", n->value);
    else if (op_table[n->op].flags & OPF_AXIS)
        kiln_sb_printf(b, " axis %d", n->axis);
}

/* ---- text --------------------------------------------------------------- */

char *kiln_graph_text(const kiln_graph *g) {
    if (!g) return NULL;
    kiln_sb b = {0};
    kiln_sb_putn(&b, "", 0);
    kiln_sb_printf(&b, "# kiln graph: %d nodes, %d outputs\n", (int)g->nnodes, (int)g->noutputs);
    if (g->status != KILN_OK)
        kiln_sb_printf(&b, "# error: %s: %s\n", kiln_status_name(g->status), g->error);
    for (int op = OP_PRIM_COUNT; op < OP_COUNT; op++) {
        int used = 0;
        for (int32_t i = 0; i < g->nnodes && !used; i++) used = (int)g->nodes[i].op == op;
        if (used) kiln_sb_printf(&b, "# compound %s\n", compound_definition((op_kind)op));
    }

    for (int32_t i = 0; i < g->nnodes; i++) {
        const node *n = &g->nodes[i];
        const char *opname = (n->op >= 0 && n->op < OP_COUNT) ? op_table[n->op].name : "?";
        kiln_sb_printf(&b, "%%%d = %s %s ", (int)i, opname, dtype_str(n->dtype));
        sb_shape(&b, g, n->ndim, n->shape);
        int arity = (n->op >= 0 && n->op < OP_COUNT) ? op_table[n->op].arity : 0;
        for (int k = 0; k < arity && k < 3; k++) {
            int32_t t = n->src[k];
            if (!tensor_valid(g, t)) {
                kiln_sb_puts(&b, " %?");
                continue;
            }
            kiln_sb_printf(&b, " %%%d", (int)g->tensors[t].node);
            if (tensor_has_view(g, t)) {
                kiln_sb_puts(&b, "[view: ");
                sb_view(&b, g, &g->views[g->tensors[t].view]);
                kiln_sb_puts(&b, "]");
            }
        }
        sb_attr(&b, n);
        for (int32_t o = 0; o < g->noutputs; o++) {
            int32_t t = g->outputs[o].tensor;
            if (tensor_valid(g, t) && g->tensors[t].node == i)
                kiln_sb_printf(&b, " -> \"%s\"", g->outputs[o].name ? g->outputs[o].name : "");
        }
        kiln_sb_puts(&b, "\n");
    }

    for (int32_t o = 0; o < g->noutputs; o++) {
        int32_t t = g->outputs[o].tensor;
        kiln_sb_printf(&b, "output \"%s\" = ", g->outputs[o].name ? g->outputs[o].name : "");
        if (!tensor_valid(g, t)) {
            kiln_sb_puts(&b, "%?\n");
            continue;
        }
        const view *v = &g->views[g->tensors[t].view];
        kiln_sb_printf(&b, "%%%d ", (int)g->tensors[t].node);
        sb_shape(&b, g, view_ndim(v), view_shape(v));
        if (tensor_has_view(g, t)) {
            kiln_sb_puts(&b, "[view: ");
            sb_view(&b, g, v);
            kiln_sb_puts(&b, "]");
        }
        kiln_sb_puts(&b, "\n");
    }
    return b.s;
}

/* ---- DOT ---------------------------------------------------------------- */

char *kiln_graph_dot(const kiln_graph *g) {
    if (!g) return NULL;
    kiln_sb b = {0};
    kiln_sb tmp = {0};
    kiln_sb_puts(&b, "digraph kiln {\n");
    kiln_sb_puts(&b, "  rankdir=TB;\n");
    kiln_sb_puts(&b, "  node [shape=box, fontname=\"monospace\", fontsize=10];\n");
    kiln_sb_puts(&b, "  edge [fontname=\"monospace\", fontsize=8];\n");
    if (g->status != KILN_OK) {
        kiln_sb_puts(&b, "  label=\"error: ");
        sb_put_escaped(&b, g->error);
        kiln_sb_puts(&b, "\";\n");
    }

    for (int32_t i = 0; i < g->nnodes; i++) {
        const node *n = &g->nodes[i];
        const char *opname = (n->op >= 0 && n->op < OP_COUNT) ? op_table[n->op].name : "?";
        tmp.len = 0;
        kiln_sb_putn(&tmp, "", 0);
        kiln_sb_printf(&tmp, "%%%d %s", (int)i, opname);
        sb_attr(&tmp, n);
        kiln_sb_printf(&tmp, "\n%s ", dtype_str(n->dtype));
        sb_shape(&tmp, g, n->ndim, n->shape);
        const char *style = "";
        if (n->op == OP_INPUT) style = n->is_state ? ", style=filled, fillcolor=\"#f4e3c1\"" : ", style=filled, fillcolor=\"#dde8f4\"";
        else if (n->op == OP_CONST || n->op == OP_IOTA) style = ", style=filled, fillcolor=\"#eeeeee\"";
        else if (op_is_compound(n->op)) style = ", style=filled, fillcolor=\"#e4d8f0\"";
        kiln_sb_printf(&b, "  n%d [label=\"", (int)i);
        sb_put_escaped(&b, tmp.s);
        kiln_sb_puts(&b, "\"");
        if (op_is_compound(n->op)) {
            kiln_sb_puts(&b, ", tooltip=\"");
            sb_put_escaped(&b, compound_definition(n->op));
            kiln_sb_puts(&b, "\"");
        }
        kiln_sb_printf(&b, "%s];\n", style);

        int arity = (n->op >= 0 && n->op < OP_COUNT) ? op_table[n->op].arity : 0;
        for (int k = 0; k < arity && k < 3; k++) {
            int32_t t = n->src[k];
            if (!tensor_valid(g, t)) continue;
            kiln_sb_printf(&b, "  n%d -> n%d", (int)g->tensors[t].node, (int)i);
            if (tensor_has_view(g, t)) {
                tmp.len = 0;
                tmp.s[0] = 0;
                sb_view(&tmp, g, &g->views[g->tensors[t].view]);
                kiln_sb_puts(&b, " [label=\"");
                sb_put_escaped(&b, tmp.s);
                kiln_sb_puts(&b, "\"]");
            }
            kiln_sb_puts(&b, ";\n");
        }
    }

    for (int32_t o = 0; o < g->noutputs; o++) {
        int32_t t = g->outputs[o].tensor;
        kiln_sb_printf(&b, "  out%d [shape=ellipse, label=\"", (int)o);
        sb_put_escaped(&b, g->outputs[o].name ? g->outputs[o].name : "");
        kiln_sb_puts(&b, "\"];\n");
        if (!tensor_valid(g, t)) continue;
        kiln_sb_printf(&b, "  n%d -> out%d", (int)g->tensors[t].node, (int)o);
        if (tensor_has_view(g, t)) {
            tmp.len = 0;
            kiln_sb_putn(&tmp, "", 0);
            sb_view(&tmp, g, &g->views[g->tensors[t].view]);
            kiln_sb_puts(&b, " [label=\"");
            sb_put_escaped(&b, tmp.s);
            kiln_sb_puts(&b, "\"]");
        }
        kiln_sb_puts(&b, ";\n");
    }
    kiln_sb_puts(&b, "}\n");
    free(tmp.s);
    return b.s;
}
