/* loop.c — building and printing the loop IR (see loop.h).
 *
 * lx_tensor/lx_node turn "the value of tensor t at these coordinates" into an
 * expression tree: a node that has its own buffer becomes a load at the
 * view's offset expression; a node computed inline is expanded in place at
 * the coordinates its consumer's view maps to (unravelled from the view's
 * linear offset). Positions a view masks out are wrapped in a GUARD, so no
 * load is ever issued at an offset outside its buffer.
 *
 * Invariants: every lx is created after its operands (ids increase), and each
 * is referenced once; loop/let variables are fresh sym variables bounded by
 * their trip counts, which lets the sym simplifier fold (i0*64 + i1) / 64 to
 * i0 and so keeps index arithmetic in the generated loops cheap.
 */
#include "loop.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "contract.h"
#include "dtype.h"

void sch_appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kiln_vappendf(buf, len, cap, fmt, ap);
    va_end(ap);
}

int32_t lx_new(sch_program *p, lx_kind k, kiln_dtype dt) {
    KILN_GROW(p->lx, p->cap_lx, p->nlx + 1);
    lx *e = &p->lx[p->nlx];
    memset(e, 0, sizeof *e);
    e->kind = k;
    e->dtype = dt;
    e->a = e->b = -1;
    e->s = e->s2 = SYM_NONE;
    e->buf = -1;
    e->stage = -1;
    e->node = -1;
    return p->nlx++;
}

int32_t lx_const(sch_program *p, kiln_dtype dt, double v) {
    int32_t id = lx_new(p, LX_CONST, dt);
    /* round exactly as a store into a dt buffer would, so the constant the
     * kernel sees is the one the interpreter sees */
    unsigned char tmp[8];
    if (!kiln_dtype_is_block(dt)) {
        dtype_store(dt, tmp, 0, v);
        v = dtype_load(dt, tmp, 0);
    }
    p->lx[id].value = v;
    return id;
}

sym_id sch_new_var(sch_program *p, sch_var_role role, int index, sym_id bound) {
    char name[64];
    /* '%' cannot appear in a parsed dimension name, so these never collide
     * with the user's variables */
    snprintf(name, sizeof name, "%%p%u.%c%d.%u", p->tag, role == SCH_VAR_LOOP ? 'i' : role == SCH_VAR_REDUCE ? 'r' : 'g',
             index, (unsigned)p->nvars);
    sym_id v = sym_var_bounded(p->g->syms, name, bound);
    const sym_node *sn = sym_get(p->g->syms, v);
    KILN_ASSERT(sn->kind == SYM_VAR);
    KILN_GROW(p->vars, p->cap_vars, p->nvars + 1);
    p->vars[p->nvars].var = (uint32_t)sn->c;
    p->vars[p->nvars].role = role;
    p->vars[p->nvars].index = index;
    p->nvars++;
    return v;
}

const sch_var *sch_var_lookup(const sch_program *p, uint32_t var) {
    for (int32_t i = p->nvars - 1; i >= 0; i--)
        if (p->vars[i].var == var) return &p->vars[i];
    return NULL;
}

sym_id sch_rowmajor(sym_pool *sp, int ndim, const sym_id *shape, const sym_id *c) {
    sym_id lin = sym_const(sp, 0);
    for (int d = 0; d < ndim; d++) lin = sym_add(sp, sym_mul(sp, lin, shape[d]), c[d]);
    return lin;
}

static void add_fused(sch_kernel *k, int32_t n) {
    for (int32_t i = 0; i < k->nfused; i++)
        if (k->fused[i] == n) return;
    KILN_GROW(k->fused, k->cap_fused, k->nfused + 1);
    k->fused[k->nfused++] = n;
}

int32_t lx_tensor(sch_program *p, sch_kernel *k, kiln_tensor t, const sym_id *idx) {
    kiln_graph *g = p->g;
    sym_pool *sp = g->syms;
    const tensor *T = graph_tensor(g, t);
    const view *V = &g->views[T->view];
    const node *m = graph_node(g, T->node);
    sym_id off, valid;
    int64_t cv;
    int identity = view_is_identity(V, sp);
    if (identity) {
        /* row-major over the view's own shape, which may be a reshape of the
         * node's: coordinates carry over only when the shapes are equal */
        off = sch_rowmajor(sp, view_ndim(V), view_shape(V), idx);
        valid = sym_const(sp, 1);
        if (view_ndim(V) != m->ndim) identity = 0;
        for (int d = 0; identity && d < m->ndim; d++) identity = view_shape(V)[d] == m->shape[d];
    } else {
        view_expr(V, sp, idx, &off, &valid);
    }
    if (sym_is_const(sp, valid, &cv) && cv == 0) return lx_const(p, m->dtype, 0.0);
    int guarded = !(sym_is_const(sp, valid, &cv) && cv != 0);
    p->guard_depth += guarded;
    int32_t e;
    if (p->node_buf[T->node] >= 0) {
        e = lx_new(p, LX_LOAD, m->dtype);
        p->lx[e].buf = p->node_buf[T->node];
        p->lx[e].s = off;
        p->lx[e].node = T->node;
    } else if (identity) {
        e = lx_node(p, k, T->node, idx);
    } else {
        sym_id c[KILN_MAX_DIMS];
        sym_id below = sym_const(sp, 1);
        for (int d = m->ndim - 1; d >= 0; d--) {
            if (sym_is_const(sp, m->shape[d], &cv) && cv == 1) {
                c[d] = sym_const(sp, 0);
                continue;
            }
            sym_id x = sym_div(sp, off, below);
            if (d > 0) x = sym_mod(sp, x, m->shape[d]);
            c[d] = x;
            below = sym_mul(sp, below, m->shape[d]);
        }
        e = lx_node(p, k, T->node, c);
    }
    p->guard_depth -= guarded;
    if (sym_is_const(sp, valid, &cv) && cv != 0) return e;
    int32_t gd = lx_new(p, LX_GUARD, m->dtype);
    p->lx[gd].a = e;
    p->lx[gd].s = valid;
    return gd;
}

/* the stage computing reduction n at coordinates c in kernel k: an existing
 * one with the same key, or a new one appended after the stages its own
 * expression needs */
static int32_t stage_for(sch_program *p, sch_kernel *k, int32_t n, const sym_id *c) {
    kiln_graph *g = p->g;
    const node *m = graph_node(g, n);
    for (int32_t i = 0; i < k->nstages; i++) {
        const sch_stage *st = &k->stages[i];
        if (st->node != n) continue;
        int same = 1;
        for (int d = 0; d < m->ndim && same; d++) same = st->coord[d] == c[d];
        if (same) {
            /* an unguarded read proves the coordinates are in range */
            if (p->guard_depth == 0) k->stages[i].guarded = 0;
            return i;
        }
    }
    int guarded = p->guard_depth > 0;
    const view *V = graph_tensor_view(g, m->src[0]);
    sym_id rdim = view_shape(V)[m->axis];
    sym_id rvar = sch_new_var(p, SCH_VAR_REDUCE, ++p->nstage_vars, rdim);
    sym_id cc[KILN_MAX_DIMS];
    for (int d = 0, j = 0; d < view_ndim(V); d++) cc[d] = d == m->axis ? rvar : c[j++];
    int32_t ex = lx_tensor(p, k, m->src[0], cc);
    KILN_GROW(k->stages, k->cap_stages, k->nstages + 1);
    sch_stage *st = &k->stages[k->nstages];
    memset(st, 0, sizeof *st);
    st->node = n;
    st->red_op = m->op;
    st->dtype = m->dtype;
    st->rdim = rdim;
    st->rvar = rvar;
    st->expr = ex;
    st->ncoord = m->ndim;
    for (int d = 0; d < m->ndim; d++) st->coord[d] = c[d];
    st->row = 0;
    st->guarded = guarded;
    return k->nstages++;
}

void sch_rvar_name(const sch_program *p, sym_id rvar, char *buf, size_t cap) {
    const sym_node *n = sym_get(p->g->syms, rvar);
    const sch_var *v = n->kind == SYM_VAR ? sch_var_lookup(p, (uint32_t)n->c) : NULL;
    KILN_ASSERT(v && v->role == SCH_VAR_REDUCE);
    if (v->index == 0) snprintf(buf, cap, "r");
    else snprintf(buf, cap, "r%d", v->index);
}

static int32_t lx_node_tree(sch_program *p, sch_kernel *k, int32_t n, const sym_id *c);

/* the tree of node n at c, tagged with n (the outermost node wins) */
int32_t lx_node(sch_program *p, sch_kernel *k, int32_t n, const sym_id *c) {
    int32_t e = lx_node_tree(p, k, n, c);
    if (p->lx[e].kind != LX_CONST) p->lx[e].node = n;
    return e;
}

static int32_t lx_node_tree(sch_program *p, sch_kernel *k, int32_t n, const sym_id *c) {
    kiln_graph *g = p->g;
    const node *m = graph_node(g, n);
    int32_t e;
    if (m->op != OP_CONST) add_fused(k, n);
    switch (m->op) {
    case OP_CONST: return lx_const(p, m->dtype, m->value);
    case OP_IOTA:
        e = lx_new(p, LX_INDEX, m->dtype);
        p->lx[e].s = c[m->axis];
        return e;
    OP_UNARY_CASES {
        int32_t a = lx_tensor(p, k, m->src[0], c);
        e = lx_new(p, LX_UNARY, m->dtype);
        p->lx[e].op = m->op;
        p->lx[e].a = a;
        return e;
    }
    case OP_ADD:
    case OP_MUL:
    case OP_MOD:
    case OP_LT: {
        int32_t a = lx_tensor(p, k, m->src[0], c);
        int32_t b = lx_tensor(p, k, m->src[1], c);
        e = lx_new(p, LX_BINARY, m->dtype);
        p->lx[e].op = m->op;
        p->lx[e].a = a;
        p->lx[e].b = b;
        return e;
    }
    case OP_CAST: {
        KILN_ASSERT(!kiln_dtype_is_block(m->dtype));
        int32_t a = lx_tensor(p, k, m->src[0], c);
        e = lx_new(p, LX_CAST, m->dtype);
        p->lx[e].a = a;
        return e;
    }
    case OP_CONTIGUOUS: return lx_tensor(p, k, m->src[0], c);
    case OP_SUM:
    case OP_MAX: {
        int32_t st = stage_for(p, k, n, c);
        e = lx_new(p, LX_STAGE, m->dtype);
        p->lx[e].stage = st;
        return e;
    }
    case OP_GATHER: {
        kiln_tensor table = m->src[0], idx = m->src[1];
        int ni = view_ndim(graph_tensor_view(g, idx));
        int nt = view_ndim(graph_tensor_view(g, table));
        sym_id rows = view_shape(graph_tensor_view(g, table))[0];
        int32_t iv = lx_tensor(p, k, idx, c);
        int let_no = p->nlets++;
        sym_id var = sch_new_var(p, SCH_VAR_LET, let_no, rows);
        sym_id tc[KILN_MAX_DIMS];
        tc[0] = var;
        for (int d = 1; d < nt; d++) tc[d] = c[ni + d - 1];
        int32_t body = lx_tensor(p, k, table, tc);
        e = lx_new(p, LX_LET, p->lx[body].dtype);
        p->lx[e].a = iv;
        p->lx[e].b = body;
        p->lx[e].s = var;
        p->lx[e].s2 = rows;
        return e;
    }
    case OP_INPUT:
    case OP_SCATTER:
    case OP_CONTRACT:
    case OP_SOFTMAX_ONLINE: case OP_SOFTMAX_CONTRACT: break;
    }
    KILN_ASSERT(0 && "lx_node: a node that needs its own buffer was not given one");
    return -1;
}

/* ---- printing --------------------------------------------------------- */

/* how each language spells an index expression (loop.h) */
const sch_sym_spelling sch_sym_c = {"", "LL", "(", "LL)", NULL, "", 1, 0};
static const sch_sym_spelling sym_text = {"", "", "", "", NULL, "", 0, 1};

static void print_sym_rec(const sch_program *p, sym_id s, const sch_sym_spelling *spell, char **buf, size_t *len,
                          size_t *cap) {
    const sym_pool *sp = p->g->syms;
    const sym_node *n = sym_get(sp, s);
    int64_t alo, ahi;
    switch (n->kind) {
    case SYM_CONST:
        if (n->c == INT64_MIN && spell->int_min) sch_appendf(buf, len, cap, "%s", spell->int_min);
        else if (n->c < 0) sch_appendf(buf, len, cap, "%s%lld%s", spell->neg_pre, (long long)n->c, spell->neg_suf);
        else sch_appendf(buf, len, cap, "%s%lld%s", spell->int_pre, (long long)n->c, spell->int_suf);
        return;
    case SYM_VAR: {
        const sch_var *v = sch_var_lookup(p, (uint32_t)n->c);
        if (!v) {
            if (spell->var_names) sch_appendf(buf, len, cap, "%s", sym_var_name(sp, (uint32_t)n->c));
            else sch_appendf(buf, len, cap, "v[%lld]", (long long)n->c);
        } else if (v->role == SCH_VAR_LOOP) {
            sch_appendf(buf, len, cap, "i%d", v->index);
        } else if (v->role == SCH_VAR_REDUCE) {
            if (v->index == 0) sch_appendf(buf, len, cap, "r");
            else sch_appendf(buf, len, cap, "r%d", v->index);
        } else {
            sch_appendf(buf, len, cap, "g%d", v->index);
        }
        return;
    }
    default: break;
    }
    const char *op = NULL, *fn = NULL;
    int64_t bc;
    switch (n->kind) {
    case SYM_ADD: op = " + "; break;
    case SYM_MUL: op = " * "; break;
    case SYM_LT: op = " < "; break;
    case SYM_AND: op = " && "; break;
    case SYM_MIN: fn = "kmin"; break;
    case SYM_MAX: fn = "kmax"; break;
    case SYM_DIV:
    case SYM_MOD:
        sym_bounds(sp, n->a, &alo, &ahi);
        /* C's / and % equal floor semantics for a >= 0, b > 0 */
        if (spell->floor_fns && !(alo >= 0 && sym_is_const(sp, n->b, &bc) && bc > 0))
            fn = n->kind == SYM_DIV ? "kfdiv" : "kfmod";
        else op = n->kind == SYM_DIV ? " / " : " % ";
        break;
    default: KILN_ASSERT(0 && "unknown sym kind");
    }
    if (fn) {
        sch_appendf(buf, len, cap, "%s(", fn);
        print_sym_rec(p, n->a, spell, buf, len, cap);
        sch_appendf(buf, len, cap, ", ");
        print_sym_rec(p, n->b, spell, buf, len, cap);
        sch_appendf(buf, len, cap, ")");
    } else {
        /* a comparison may need a cast to mix with the language's int64 */
        sch_appendf(buf, len, cap, "%s(", n->kind == SYM_LT || n->kind == SYM_AND ? spell->cmp_pre : "");
        print_sym_rec(p, n->a, spell, buf, len, cap);
        sch_appendf(buf, len, cap, "%s", op);
        print_sym_rec(p, n->b, spell, buf, len, cap);
        sch_appendf(buf, len, cap, ")");
    }
}

void sch_print_sym_as(const sch_program *p, sym_id s, const sch_sym_spelling *sp, char **buf, size_t *len,
                      size_t *cap) {
    print_sym_rec(p, s, sp, buf, len, cap);
}

void sch_print_sym(const sch_program *p, sym_id s, char **buf, size_t *len, size_t *cap) {
    print_sym_rec(p, s, &sch_sym_c, buf, len, cap);
}

static void print_text_sym(const sch_program *p, sym_id s, char **buf, size_t *len, size_t *cap) {
    print_sym_rec(p, s, &sym_text, buf, len, cap);
}

static void print_lx(const sch_program *p, int32_t id, char **buf, size_t *len, size_t *cap) {
    const lx *e = &p->lx[id];
    switch (e->kind) {
    case LX_CONST: sch_appendf(buf, len, cap, "%.9g", e->value); break;
    case LX_LOAD:
        sch_appendf(buf, len, cap, "b%d[", e->buf);
        print_text_sym(p, e->s, buf, len, cap);
        sch_appendf(buf, len, cap, "]");
        break;
    case LX_INDEX:
        sch_appendf(buf, len, cap, "%s(", kiln_dtype_name(e->dtype));
        print_text_sym(p, e->s, buf, len, cap);
        sch_appendf(buf, len, cap, ")");
        break;
    case LX_UNARY:
        sch_appendf(buf, len, cap, "%s(", op_table[e->op].name);
        print_lx(p, e->a, buf, len, cap);
        sch_appendf(buf, len, cap, ")");
        break;
    case LX_BINARY:
        sch_appendf(buf, len, cap, "%s(", op_table[e->op].name);
        print_lx(p, e->a, buf, len, cap);
        sch_appendf(buf, len, cap, ", ");
        print_lx(p, e->b, buf, len, cap);
        sch_appendf(buf, len, cap, ")");
        break;
    case LX_CAST:
        sch_appendf(buf, len, cap, "%s<-%s(", kiln_dtype_name(e->dtype), kiln_dtype_name(p->lx[e->a].dtype));
        print_lx(p, e->a, buf, len, cap);
        sch_appendf(buf, len, cap, ")");
        break;
    case LX_GUARD:
        sch_appendf(buf, len, cap, "(");
        print_text_sym(p, e->s, buf, len, cap);
        sch_appendf(buf, len, cap, " ? ");
        print_lx(p, e->a, buf, len, cap);
        sch_appendf(buf, len, cap, " : 0)");
        break;
    case LX_LET:
        sch_appendf(buf, len, cap, "let ");
        print_text_sym(p, e->s, buf, len, cap);
        sch_appendf(buf, len, cap, " = ");
        print_lx(p, e->a, buf, len, cap);
        sch_appendf(buf, len, cap, " in [0, ");
        print_text_sym(p, e->s2, buf, len, cap);
        sch_appendf(buf, len, cap, ") in ");
        print_lx(p, e->b, buf, len, cap);
        break;
    case LX_STAGE: sch_appendf(buf, len, cap, "s%d", e->stage); break;
    }
}

static const char *buf_kind_name(sch_buf_kind k) {
    switch (k) {
    case SCH_BUF_INPUT: return "input";
    case SCH_BUF_STATE: return "state";
    case SCH_BUF_NODE: return "arena";
    case SCH_BUF_RESULT: return "result";
    case SCH_BUF_TEMP: return "temp";
    }
    return "?";
}

static void print_buf(const sch_program *p, int32_t b, char **buf, size_t *len, size_t *cap) {
    const sch_buf *B = &p->bufs[b];
    sch_appendf(buf, len, cap, "b%d (%s %s", b, buf_kind_name(B->kind), kiln_dtype_name(B->dtype));
    if (B->kind == SCH_BUF_INPUT || B->kind == SCH_BUF_STATE) sch_appendf(buf, len, cap, " '%s'", p->g->nodes[B->node].name);
    if (B->kind == SCH_BUF_RESULT) sch_appendf(buf, len, cap, " '%s'", p->g->outputs[B->output].name);
    sch_appendf(buf, len, cap, ", ");
    print_text_sym(p, B->numel, buf, len, cap);
    sch_appendf(buf, len, cap, " elements)");
}

static void collect_loads(const sch_program *p, int32_t id, int32_t *seen, int32_t *nseen) {
    if (id < 0) return;
    const lx *e = &p->lx[id];
    if (e->kind == LX_LOAD) {
        for (int32_t i = 0; i < *nseen; i++)
            if (seen[i] == e->buf) return;
        seen[(*nseen)++] = e->buf;
    }
    collect_loads(p, e->a, seen, nseen);
    collect_loads(p, e->b, seen, nseen);
}

static void print_stage(const sch_program *p, const sch_kernel *k, int32_t i, int ind, char **buf, size_t *len,
                        size_t *cap) {
    const sch_stage *st = &k->stages[i];
    char rn[32];
    sch_rvar_name(p, st->rvar, rn, sizeof rn);
    sch_appendf(buf, len, cap, "%*ss%d = %s over %s in [0, ", ind, "", (int)i, st->red_op == OP_SUM ? "sum" : "max", rn);
    print_text_sym(p, st->rdim, buf, len, cap);
    sch_appendf(buf, len, cap, ") of ");
    print_lx(p, st->expr, buf, len, cap);
    sch_appendf(buf, len, cap, "   (fused %s#%d, per %s)\n", op_table[p->g->nodes[st->node].op].name, st->node,
                st->row ? "row" : "element");
}

int sch_lx_reads(const sch_program *p, int32_t id, int32_t b) {
    if (id < 0) return 0;
    const lx *x = &p->lx[id];
    if (x->kind == LX_LOAD && x->buf == b) return 1;
    return sch_lx_reads(p, x->a, b) || sch_lx_reads(p, x->b, b);
}

int sch_kernel_reads(const sch_program *p, const sch_kernel *K, int32_t b) {
    if (K->src_buf == b && (K->kind == SCH_K_QUANTIZE || K->kind == SCH_K_COPY)) return 1;
    if (K->contract && (K->contract->a_buf == b || K->contract->b_buf == b)) return 1;
    if (sch_lx_reads(p, K->expr, b)) return 1;
    for (int32_t i = 0; i < K->nstages; i++)
        if (sch_lx_reads(p, K->stages[i].expr, b)) return 1;
    return 0;
}

void sch_kernel_print(const sch_program *p, int32_t kid, char **buf, size_t *len, size_t *cap) {
    const sch_kernel *k = &p->kernels[kid];
    static const char *kinds[] = {"map", "reduce", "scatter", "quantize", "copy", "stream"};
    sch_appendf(buf, len, cap, "kernel %d: %s%s", kid, kinds[k->kind], k->pack ? " pack" : "");
    if (k->root >= 0) sch_appendf(buf, len, cap, " (node %d %s)", k->root, op_table[p->g->nodes[k->root].op].name);
    sch_appendf(buf, len, cap, "\n  out: ");
    print_buf(p, k->out_buf, buf, len, cap);
    sch_appendf(buf, len, cap, "\n  in:");
    int32_t *seen = kiln_xmalloc((size_t)(p->nbufs + 1) * sizeof *seen);
    int32_t nseen = 0;
    if (k->kind == SCH_K_QUANTIZE || k->kind == SCH_K_COPY) seen[nseen++] = k->src_buf;
    else collect_loads(p, k->expr, seen, &nseen);
    for (int32_t i = 0; i < k->nstages; i++) collect_loads(p, k->stages[i].expr, seen, &nseen);
    for (int32_t i = 0; i < nseen; i++) {
        sch_appendf(buf, len, cap, " ");
        print_buf(p, seen[i], buf, len, cap);
    }
    free(seen);
    sch_appendf(buf, len, cap, "\n  fused:");
    for (int32_t i = 0; i < k->nfused; i++)
        sch_appendf(buf, len, cap, " %s#%d", op_table[p->g->nodes[k->fused[i]].op].name, k->fused[i]);
    sch_appendf(buf, len, cap, "\n");
    if (k->epilogue > 0)
        sch_appendf(buf, len, cap, "  epilogue: kernel %d, per work item on the block it wrote (CPU)\n", (int)k->epilogue);
    if (k->in_host) sch_appendf(buf, len, cap, "  epilogue of kernel %d (CPU: no launch of its own)\n", (int)(kid - 1));
    if (k->prologue)
        sch_appendf(buf, len, cap, "  prologue: kernel %d, per work item on the columns it reads (CPU)\n", (int)(kid - 1));
    if (k->in_next) sch_appendf(buf, len, cap, "  prologue of kernel %d (CPU: no launch of its own)\n", (int)(kid + 1));
    if (k->contract) {
        const sch_contract *c = k->contract;
        sch_appendf(buf, len, cap, "  contraction %s: A b%d (f32), B b%d (%s), m = %s%d, n = i%d; schedules:", c->key,
                    c->a_buf, c->b_buf, kiln_dtype_name(p->bufs[c->b_buf].dtype), c->mdim < 0 ? "none" : "i",
                    c->mdim < 0 ? 0 : c->mdim, c->ndim);
        for (int b = 0; b < 2; b++) {
            const sch_contract_sched *s = &c->sched[b];
            sch_appendf(buf, len, cap, " [%s] mr=%d nr=%d nc=%d mc=%d arith=%s", b ? "M>4" : "M<=4", s->mr, s->nr,
                        s->nc, s->mc, s->arith == SCH_ARITH_I8     ? "i8 (approximate)"
                        : s->arith == SCH_ARITH_BF16 ? "bf16 (approximate)"
                                                     : "f32");
            /* then the rest of the schedule's text (form=, kc=, pf=, direct=, serial=) */
            char text[160];
            sch_contract_sched_print(s, text, sizeof text);
            const char *rest = strstr(text, "arith=");
            rest = rest ? strchr(rest, ' ') : NULL;
            if (rest) sch_appendf(buf, len, cap, "%s", rest);
        }
        if (c->n_lim_off != SYM_NONE) {
            /* demand.c: the consumers multiply the rest by zero */
            char off[96];
            sym_print(p->g->syms, c->n_lim_off, off, sizeof off);
            sch_appendf(buf, len, cap, "; used where i%d < i%d + %s", c->ndim, c->mdim, off);
        }
        sch_appendf(buf, len, cap, "\n");
    }
    if (k->kind == SCH_K_QUANTIZE || k->kind == SCH_K_COPY) {
        sch_appendf(buf, len, cap, "  b%d = %s(b%d)\n", k->out_buf, kinds[k->kind], k->src_buf);
        return;
    }
    int ind = 2;
    for (int d = 0; d < k->ndim; d++, ind += 2) {
        if (d == k->ndim - 1)
            for (int32_t i = 0; i < k->nstages; i++)
                if (k->stages[i].row) print_stage(p, k, i, ind, buf, len, cap);
        sch_appendf(buf, len, cap, "%*sfor i%d in [0, ", ind, "", d);
        print_text_sym(p, k->dim[d], buf, len, cap);
        sch_appendf(buf, len, cap, ")%s\n", d == 0 && (k->kind != SCH_K_SCATTER || k->disjoint) ? "  (parallel)" : "");
    }
    for (int32_t i = 0; i < k->nstages; i++)
        if (!k->stages[i].row) print_stage(p, k, i, ind, buf, len, cap);
    if (k->kind == SCH_K_STREAM) {
        /* one pass along the last loop: running max m, sum l and products acc[n] */
        const lx *e = &p->lx[k->expr];
        sch_appendf(buf, len, cap, "%*sx = ", ind, "");
        print_lx(p, e->a, buf, len, cap);
        sch_appendf(buf, len, cap, "\n%*sm' = max(m, x); rescale l, acc by exp2((m - m') * %.9g); p = exp2((x - m') * %.9g); "
                                   "l += p\n%*sfor i%d in [0, ", ind, "", k->stream_c, k->stream_c, ind, "", k->ndim);
        print_text_sym(p, k->rdim, buf, len, cap);
        sch_appendf(buf, len, cap, ")\n%*sacc[i%d] += p * ", ind + 2, "", k->ndim);
        print_lx(p, e->b, buf, len, cap);
        sch_appendf(buf, len, cap, "\n%*sb%d[", ind - 2, "", k->out_buf);
        print_text_sym(p, k->store_off, buf, len, cap);
        sch_appendf(buf, len, cap, "] = acc[i%d] / l  (for each i%d, after the loop over i%d)\n", k->ndim, k->ndim,
                    k->ndim - 1);
    } else if (k->kind == SCH_K_REDUCE) {
        sch_appendf(buf, len, cap, "%*sacc = %s\n", ind, "", k->red_op == OP_SUM ? "0" : "-inf");
        sch_appendf(buf, len, cap, "%*sfor r in [0, ", ind, "");
        print_text_sym(p, k->rdim, buf, len, cap);
        sch_appendf(buf, len, cap, ")\n%*sacc = %s(acc, ", ind + 2, "", k->red_op == OP_SUM ? "add" : "max");
        print_lx(p, k->expr, buf, len, cap);
        sch_appendf(buf, len, cap, ")\n%*sb%d[", ind, "", k->out_buf);
        print_text_sym(p, k->store_off, buf, len, cap);
        sch_appendf(buf, len, cap, "] = acc\n");
    } else {
        sch_appendf(buf, len, cap, "%*sb%d[", ind, "", k->out_buf);
        print_text_sym(p, k->store_off, buf, len, cap);
        sch_appendf(buf, len, cap, "] = ");
        print_lx(p, k->expr, buf, len, cap);
        sch_appendf(buf, len, cap, "\n");
    }
}
