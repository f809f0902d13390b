/* interp.c — kiln's reference interpreter: the naive, obviously-correct
 * evaluator that every other backend, rewrite rule and searched kernel is
 * checked against. It favours clarity over speed: every node is evaluated
 * into its own dense row-major buffer (node dtype, node shape), and operands
 * are read element by element through their views.
 *
 * A run (kiln_eval_reference):
 *  1. marks the nodes that are needed: those the outputs depend on, plus every
 *     SCATTER whose chain of first operands ends at a state input (so state
 *     updates happen even when no output reads them);
 *  2. evaluates the shapes of the needed nodes under the bound dimensions
 *     (unbound symbol -> KILN_ERR_UNBOUND, negative size -> KILN_ERR_SHAPE) and
 *     checks the input buffers (missing -> KILN_ERR_UNBOUND, wrong byte size ->
 *     KILN_ERR_INVALID);
 *  3. evaluates the needed nodes in (topological) node order, freeing an
 *     intermediate buffer after its last consumer;
 *  4. copies every output, read through its view, into g->results;
 *  5. only then writes state back: every evaluated SCATTER rooted at a state
 *     input copies its result into the bound state buffer, in node order (last
 *     wins). Reads of the state during the run therefore see the old values.
 * On any error nothing is written back and there are no results.
 *
 * Numeric semantics (the oracle's contract):
 *  - Float dtypes (f32/f16/bf16) compute in f32 arithmetic (exp2f, log2f,
 *    sinf, sqrtf, 1.0f/x, float + and *, fmodf) and round the result to the
 *    node dtype (round-to-nearest-even).
 *  - i32 ADD/MUL/SUM wrap modulo 2^32 (computed in unsigned arithmetic, no UB).
 *    u8 ADD/MUL/SUM also wrap, modulo 2^8: the same as C arithmetic on uint8_t
 *    stored back, which is what generated kernels do.
 *  - MOD: floats fmodf (sign of the dividend); ints C '%' (sign of the
 *    dividend), x % 0 = 0, INT32_MIN % -1 = 0. LT: 1/0 in the operand dtype.
 *  - SUM of floats accumulates in double, sequentially, then rounds once to the
 *    node dtype: a more exact oracle than f32 accumulation (other backends are
 *    compared with a tolerance). MAX: NaN propagates; an empty axis gives
 *    SUM 0, MAX -inf (floats) / INT32_MIN (i32) / 0 (u8).
 *  - CAST between scalar dtypes rounds (floats) or truncates toward zero and
 *    saturates (to ints; NaN -> 0), as dtype_store does. Block formats are
 *    dequantised whole (quant_dequantize) when read through a view that selects
 *    whole rows, else element by element (dtype_load); casting to a block
 *    format first casts to f32, then quantises (quant_quantize; a format
 *    without an encoder is KILN_ERR_UNSUPPORTED).
 *  - GATHER/SCATTER: an index outside [0, R) is KILN_ERR_RANGE. GATHER on a
 *    block-format table copies raw row bytes (result in the table's block
 *    dtype); that needs a view selecting whole, block-aligned rows, else
 *    KILN_ERR_UNSUPPORTED. SCATTER with repeated indices: the later one wins.
 *  - A SCATTER is written back only if every link of its chain reads the
 *    previous one through a dense view of the same layout (a reshape, not a
 *    transpose or slice); otherwise the run fails with KILN_ERR_UNSUPPORTED.
 *  - A view offset outside its source buffer is KILN_ERR_RANGE, never a crash.
 *    Conditions the builder could not prove (a symbolic slice's stop <= size,
 *    a window fitting its axis) are checked before the run (graph_run_checks):
 *    a failing one is KILN_ERR_RANGE.
 *
 *  - Compound nodes (src/ir/compound.def, made only by the rewriter) are
 *    evaluated as their primitive definition (compound_expand) run by this
 *    interpreter: see eval_compound.
 *
 * g->results has g->noutputs entries followed by a terminator whose ndim is
 * -1: outputs may be added after a run, and the count at run time must be
 * known to free and look up results safely.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "compound.h"
#include "dtype.h"
#include "graph.h"
#include "quant.h"
#include "sym.h"
#include "view.h"

/* refuse element counts beyond this rather than risk size overflow */
#define INTERP_MAX_ELEMS (INT64_C(1) << 40)
#define INTERP_KEEP INT32_MAX

typedef struct nbuf {
    void *data;    /* dense row-major in the node dtype */
    int ready;     /* evaluated (data may be NULL for 0 bytes) */
    int owned;     /* 0 for INPUT nodes: the caller's buffer */
    int64_t numel; /* elements */
    size_t bytes;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
} nbuf;

typedef struct ictx {
    kiln_graph *g;
    uint32_t nvars;
    int64_t *values; /* nvars entries: bindings, unbound beyond g->ndim_values */
    uint8_t *bound;
    uint8_t *need;      /* per node */
    int32_t *last_use;  /* per node: last needed consumer, or INTERP_KEEP */
    nbuf *bufs;         /* per node */
} ictx;

/* a tensor opened for reading: its source buffer and its evaluated view */
typedef struct operand {
    kiln_dtype dtype; /* of the source node */
    const nbuf *src;
    view_num vn;
    int ndim; /* outer shape of the view */
    int64_t dims[KILN_MAX_DIMS];
    int64_t numel;
    char who[96]; /* who reads it, for messages */
} operand;

/* ---- small helpers ------------------------------------------------------- */

static const char *node_desc(const kiln_graph *g, int32_t id, char *buf, size_t cap) {
    const node *n = &g->nodes[id];
    if (n->op == OP_INPUT)
        snprintf(buf, cap, "%s %s", n->is_state ? "STATE" : "INPUT", n->name ? n->name : "?");
    else
        snprintf(buf, cap, "%s node %d", op_table[n->op].name, (int)id);
    return buf;
}

/* 0 ok; -1 a negative size; -2 too many elements */
static int shape_numel(int ndim, const int64_t *dims, int64_t *numel) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        if (dims[d] < 0) return -1;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] == 0) {
            *numel = 0;
            return 0;
        }
    }
    for (int d = 0; d < ndim; d++) {
        if (dims[d] > INTERP_MAX_ELEMS / n) return -2;
        n *= dims[d];
    }
    *numel = n;
    return 0;
}

static void coord_next(int ndim, const int64_t *dims, int64_t *c) {
    for (int d = ndim - 1; d >= 0; d--) {
        if (++c[d] < dims[d]) return;
        c[d] = 0;
    }
}

static int same_dims(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return 0;
    for (int d = 0; d < na; d++)
        if (a[d] != b[d]) return 0;
    return 1;
}

static void dims_str(int ndim, const int64_t *dims, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)dims[d]);
    if (n < cap) snprintf(buf + n, cap - n, ")");
}

/* allocation whose size comes from run-time bindings: failure is the world's
 * fault (a huge bound dimension), so it is reported, not asserted */
static kiln_status buf_alloc(ictx *c, size_t bytes, void **out) {
    *out = malloc(bytes ? bytes : 1);
    if (!*out) {
        graph_run_error(c->g, KILN_ERR_NOMEM, "reference interpreter: cannot allocate %zu bytes", bytes);
        return KILN_ERR_NOMEM;
    }
    return KILN_OK;
}

/* i32 / u8 wrap-around of an integer computed modulo 2^64 */
static double wrap_int(kiln_dtype t, uint64_t u) {
    if (t == KILN_U8) return (double)(u & 0xffu);
    uint32_t w = (uint32_t)(u & 0xffffffffu);
    return w >= 0x80000000u ? (double)w - 4294967296.0 : (double)w;
}

/* ---- reading operands through views -------------------------------------- */

/* open tensor t for reading by `who`; the source node must be evaluated */
static kiln_status operand_open(ictx *c, kiln_tensor t, const char *who, operand *o) {
    kiln_graph *g = c->g;
    KILN_ASSERT(t >= 0 && t < g->ntensors);
    const tensor *tt = &g->tensors[t];
    KILN_ASSERT(tt->node >= 0 && tt->node < g->nnodes && tt->view >= 0 && tt->view < g->nviews);
    const nbuf *src = &c->bufs[tt->node];
    KILN_ASSERT(src->ready);
    snprintf(o->who, sizeof o->who, "%s", who);
    o->dtype = g->nodes[tt->node].dtype;
    o->src = src;
    uint32_t missing = 0;
    if (view_eval(&o->vn, &g->views[tt->view], g->syms, c->values, c->bound, &missing) != 0) {
        const char *name = missing < c->nvars ? sym_var_name(g->syms, missing) : "?";
        graph_run_error(g, KILN_ERR_UNBOUND, "unbound symbol '%s' (needed by the view read by %s)",
                        name ? name : "?", who);
        return KILN_ERR_UNBOUND;
    }
    KILN_ASSERT(o->vn.nlayers >= 1 && o->vn.nlayers <= VIEW_MAX_LAYERS);
    const view_num_layer *outer = &o->vn.layer[o->vn.nlayers - 1];
    o->ndim = outer->ndim;
    memcpy(o->dims, outer->shape, sizeof o->dims);
    int r = shape_numel(o->ndim, o->dims, &o->numel);
    if (r != 0) {
        char ds[200];
        dims_str(o->ndim, o->dims, ds, sizeof ds);
        graph_run_error(g, r == -1 ? KILN_ERR_SHAPE : KILN_ERR_NOMEM,
                        "the view read by %s has %s shape %s", who,
                        r == -1 ? "a negative size in its" : "too large a", ds);
        return r == -1 ? KILN_ERR_SHAPE : KILN_ERR_NOMEM;
    }
    return KILN_OK;
}

/* the element at outer coordinates `coords` (0 where the view masks it out) */
static kiln_status operand_get(ictx *c, const operand *o, const int64_t *coords, double *v) {
    int64_t off = 0;
    if (!view_num_index(&o->vn, coords, &off)) {
        *v = 0.0;
        return KILN_OK;
    }
    if (off < 0 || off >= o->src->numel) {
        graph_run_error(c->g, KILN_ERR_RANGE,
                        "the view read by %s reaches element %lld of a buffer of %lld elements",
                        o->who, (long long)off, (long long)o->src->numel);
        return KILN_ERR_RANGE;
    }
    *v = dtype_load(o->dtype, o->src->data, off);
    return KILN_OK;
}

/* every element of the operand, dense row-major in its outer shape, as
 * double (exact for every scalar dtype; block formats decode per element) */
static kiln_status operand_load(ictx *c, const operand *o, double **out) {
    kiln_status s = buf_alloc(c, (size_t)o->numel * sizeof(double), (void **)out);
    if (s != KILN_OK) return s;
    int64_t coords[KILN_MAX_DIMS] = {0};
    for (int64_t i = 0; i < o->numel; i++) {
        s = operand_get(c, o, coords, &(*out)[i]);
        if (s != KILN_OK) {
            free(*out);
            *out = NULL;
            return s;
        }
        coord_next(o->ndim, o->dims, coords);
    }
    return KILN_OK;
}

static kiln_status check_dims(ictx *c, const operand *o, int ndim, const int64_t *dims) {
    if (same_dims(o->ndim, o->dims, ndim, dims)) return KILN_OK;
    char a[200], b[200];
    dims_str(o->ndim, o->dims, a, sizeof a);
    dims_str(ndim, dims, b, sizeof b);
    graph_run_error(c->g, KILN_ERR_SHAPE, "%s reads shape %s where %s is expected", o->who, a, b);
    return KILN_ERR_SHAPE;
}

/* ---- block formats: whole rows through views ----------------------------- */

/* A block-format operand can be moved as raw bytes only when its view selects
 * whole rows: one layer, nothing masked out, the trailing axes (all axes for a
 * 1-D view) dense and a multiple of the block size, and every row starting on a
 * block boundary. Rows are along axis 0 (a 1-D view is one row). */
typedef struct block_rows {
    int64_t nrows, offset, stride0, inner; /* in elements */
    int64_t block;
    size_t block_bytes, row_bytes;
} block_rows;

static int block_rows_open(const operand *o, block_rows *br) {
    if (!kiln_dtype_is_block(o->dtype) || o->vn.nlayers != 1 || o->ndim < 1) return 0;
    const view_num_layer *L = &o->vn.layer[0];
    if (L->masked) {
        for (int d = 0; d < L->ndim; d++)
            if (L->shape[d] > 0 && (L->mask_lo[d] > 0 || L->mask_hi[d] < L->shape[d])) return 0;
    }
    int first = L->ndim >= 2 ? 1 : 0;
    int64_t expect = 1;
    for (int d = L->ndim - 1; d >= first; d--) {
        if (L->shape[d] != 1 && L->stride[d] != expect) return 0;
        expect *= L->shape[d];
    }
    br->block = dtype_table[o->dtype].block;
    br->block_bytes = (size_t)dtype_table[o->dtype].block_bytes;
    br->inner = expect;
    br->nrows = first ? L->shape[0] : 1;
    br->stride0 = first ? L->stride[0] : 0;
    br->offset = L->offset;
    if (br->inner % br->block != 0) return 0;
    if (br->nrows > 0 && br->inner > 0) {
        if (br->offset % br->block != 0) return 0;
        if (br->nrows > 1 && br->stride0 % br->block != 0) return 0;
    }
    br->row_bytes = (size_t)(br->inner / br->block) * br->block_bytes;
    return 1;
}

/* the raw bytes of row r (0 <= r < nrows) */
static kiln_status block_row(ictx *c, const operand *o, const block_rows *br, int64_t r,
                             const uint8_t **row) {
    int64_t off = br->offset + r * br->stride0;
    if (br->inner == 0) {
        *row = NULL;
        return KILN_OK;
    }
    if (off < 0 || off > o->src->numel - br->inner) {
        graph_run_error(c->g, KILN_ERR_RANGE,
                        "the view read by %s reaches elements %lld..%lld of a buffer of %lld elements",
                        o->who, (long long)off, (long long)(off + br->inner - 1),
                        (long long)o->src->numel);
        return KILN_ERR_RANGE;
    }
    *row = (const uint8_t *)o->src->data + (size_t)(off / br->block) * br->block_bytes;
    return KILN_OK;
}

static kiln_status block_unsupported(ictx *c, const operand *o) {
    graph_run_error(c->g, KILN_ERR_UNSUPPORTED,
                    "%s reads a %s tensor through a view that does not select whole block-aligned rows",
                    o->who, kiln_dtype_name(o->dtype));
    return KILN_ERR_UNSUPPORTED;
}

/* the operand's raw block bytes, dense in its outer shape, into dst (bytes) */
static kiln_status block_copy(ictx *c, const operand *o, uint8_t *dst, size_t bytes) {
    block_rows br;
    if (!block_rows_open(o, &br)) return block_unsupported(c, o);
    KILN_ASSERT((size_t)br.nrows * br.row_bytes == bytes);
    for (int64_t r = 0; r < br.nrows && br.row_bytes; r++) {
        const uint8_t *row;
        kiln_status s = block_row(c, o, &br, r, &row);
        if (s != KILN_OK) return s;
        memcpy(dst + (size_t)r * br.row_bytes, row, br.row_bytes);
    }
    return KILN_OK;
}

/* the operand's values as f32, dense in its outer shape: block formats are
 * dequantised whole rows at a time when the view allows it */
static kiln_status operand_load_f32(ictx *c, const operand *o, float **out) {
    kiln_status s = buf_alloc(c, (size_t)o->numel * sizeof(float), (void **)out);
    if (s != KILN_OK) return s;
    block_rows br;
    if (kiln_dtype_is_block(o->dtype) && block_rows_open(o, &br)) {
        for (int64_t r = 0; r < br.nrows && br.inner; r++) {
            const uint8_t *row;
            s = block_row(c, o, &br, r, &row);
            if (s != KILN_OK) break;
            quant_dequantize(o->dtype, row, *out + r * br.inner, br.inner);
        }
    } else {
        double *v = NULL;
        s = operand_load(c, o, &v);
        if (s == KILN_OK)
            for (int64_t i = 0; i < o->numel; i++) (*out)[i] = (float)v[i];
        free(v);
    }
    if (s != KILN_OK) {
        free(*out);
        *out = NULL;
    }
    return s;
}

/* ---- op evaluation ------------------------------------------------------- */

static kiln_status open_src(ictx *c, int32_t id, int k, operand *o) {
    char who[96], d[64];
    snprintf(who, sizeof who, "operand %d of %s", k, node_desc(c->g, id, d, sizeof d));
    return operand_open(c, c->g->nodes[id].src[k], who, o);
}

static kiln_status eval_leaf(ictx *c, int32_t id, nbuf *b) {
    const node *n = &c->g->nodes[id];
    if (kiln_dtype_is_block(n->dtype)) {
        char d[64];
        graph_run_error(c->g, KILN_ERR_DTYPE, "%s cannot have block dtype %s",
                        node_desc(c->g, id, d, sizeof d), kiln_dtype_name(n->dtype));
        return KILN_ERR_DTYPE;
    }
    if (n->op == OP_CONST) {
        for (int64_t i = 0; i < b->numel; i++) dtype_store(n->dtype, b->data, i, n->value);
        return KILN_OK;
    }
    KILN_ASSERT(n->op == OP_IOTA && n->axis >= 0 && n->axis < b->ndim);
    int64_t coords[KILN_MAX_DIMS] = {0};
    for (int64_t i = 0; i < b->numel; i++) {
        dtype_store(n->dtype, b->data, i, (double)coords[n->axis]);
        coord_next(b->ndim, b->dims, coords);
    }
    return KILN_OK;
}

static kiln_status eval_unary(ictx *c, int32_t id, nbuf *b) {
    const node *n = &c->g->nodes[id];
    operand o;
    double *a = NULL;
    kiln_status s = open_src(c, id, 0, &o);
    if (s == KILN_OK) s = check_dims(c, &o, b->ndim, b->dims);
    if (s == KILN_OK && !kiln_dtype_is_float(n->dtype)) {
        char d[64];
        graph_run_error(c->g, KILN_ERR_DTYPE, "%s needs a float dtype, not %s",
                        node_desc(c->g, id, d, sizeof d), kiln_dtype_name(n->dtype));
        s = KILN_ERR_DTYPE;
    }
    if (s == KILN_OK) s = operand_load(c, &o, &a);
    if (s != KILN_OK) return s;
    for (int64_t i = 0; i < b->numel; i++) {
        /* the op's meaning in f32: ops.def's F32 column */
        float r = op_unary[n->op].f32((float)a[i]);
        dtype_store(n->dtype, b->data, i, (double)r);
    }
    free(a);
    return KILN_OK;
}

static double binary_float(op_kind op, double da, double db) {
    float x = (float)da, y = (float)db, r = 0.0f;
    switch (op) {
    case OP_ADD: r = x + y; break;
    case OP_MUL: r = x * y; break;
    case OP_MOD: r = fmodf(x, y); break;
    case OP_LT: r = x < y ? 1.0f : 0.0f; break;
    OP_UNARY_CASES
    case OP_INPUT: case OP_CONST: case OP_IOTA: case OP_SUM: case OP_MAX: case OP_GATHER: case OP_SCATTER:
    case OP_CAST: case OP_CONTIGUOUS: case OP_CONTRACT: case OP_SOFTMAX_ONLINE: case OP_SOFTMAX_CONTRACT:
        KILN_ASSERT(0 && "not a binary op");
    }
    return (double)r;
}

static double binary_int(op_kind op, kiln_dtype t, double da, double db) {
    int64_t x = (int64_t)da, y = (int64_t)db;
    switch (op) {
    case OP_ADD: return wrap_int(t, (uint64_t)x + (uint64_t)y);
    case OP_MUL: return wrap_int(t, (uint64_t)x * (uint64_t)y);
    /* in int64, INT32_MIN % -1 is simply 0 */
    case OP_MOD: return y == 0 ? 0.0 : (double)(x % y);
    case OP_LT: return x < y ? 1.0 : 0.0;
    OP_UNARY_CASES
    case OP_INPUT: case OP_CONST: case OP_IOTA: case OP_SUM: case OP_MAX: case OP_GATHER: case OP_SCATTER:
    case OP_CAST: case OP_CONTIGUOUS: case OP_CONTRACT: case OP_SOFTMAX_ONLINE: case OP_SOFTMAX_CONTRACT:
        KILN_ASSERT(0 && "not a binary op");
    }
    return 0.0;
}

static kiln_status eval_binary(ictx *c, int32_t id, nbuf *b) {
    const node *n = &c->g->nodes[id];
    operand oa, ob;
    double *a = NULL, *v = NULL;
    kiln_status s = open_src(c, id, 0, &oa);
    if (s == KILN_OK) s = check_dims(c, &oa, b->ndim, b->dims);
    if (s == KILN_OK) s = open_src(c, id, 1, &ob);
    if (s == KILN_OK) s = check_dims(c, &ob, b->ndim, b->dims);
    if (s == KILN_OK && kiln_dtype_is_block(n->dtype)) {
        char d[64];
        graph_run_error(c->g, KILN_ERR_DTYPE, "%s cannot compute in block dtype %s",
                        node_desc(c->g, id, d, sizeof d), kiln_dtype_name(n->dtype));
        s = KILN_ERR_DTYPE;
    }
    if (s == KILN_OK) s = operand_load(c, &oa, &a);
    if (s == KILN_OK) s = operand_load(c, &ob, &v);
    if (s == KILN_OK) {
        /* LT yields 1/0 in the operand dtype; the node carries the same dtype */
        int is_float = kiln_dtype_is_float(oa.dtype);
        for (int64_t i = 0; i < b->numel; i++) {
            double r = is_float ? binary_float(n->op, a[i], v[i])
                                : binary_int(n->op, oa.dtype, a[i], v[i]);
            dtype_store(n->dtype, b->data, i, r);
        }
    }
    free(a);
    free(v);
    return s;
}

static kiln_status eval_reduce(ictx *c, int32_t id, nbuf *b) {
    const node *n = &c->g->nodes[id];
    operand o;
    double *a = NULL;
    kiln_status s = open_src(c, id, 0, &o);
    if (s != KILN_OK) return s;
    KILN_ASSERT(n->axis >= 0 && n->axis <= b->ndim && b->ndim < KILN_MAX_DIMS);
    int64_t want[KILN_MAX_DIMS];
    for (int d = 0, k = 0; d <= b->ndim; d++)
        want[d] = d == n->axis ? (o.ndim > n->axis ? o.dims[n->axis] : 0) : b->dims[k++];
    s = check_dims(c, &o, b->ndim + 1, want);
    if (s == KILN_OK && kiln_dtype_is_block(n->dtype)) {
        graph_run_error(c->g, KILN_ERR_DTYPE, "%s cannot reduce in block dtype", o.who);
        s = KILN_ERR_DTYPE;
    }
    if (s == KILN_OK) s = operand_load(c, &o, &a);
    if (s != KILN_OK) return s;
    int64_t outer = 1, len = o.dims[n->axis], inner = 1;
    for (int d = 0; d < n->axis; d++) outer *= o.dims[d];
    for (int d = n->axis + 1; d < o.ndim; d++) inner *= o.dims[d];
    int is_float = kiln_dtype_is_float(o.dtype);
    for (int64_t p = 0; p < outer; p++) {
        for (int64_t q = 0; q < inner; q++) {
            double r;
            if (n->op == OP_SUM && is_float) {
                double acc = 0.0; /* double accumulation: see the header */
                for (int64_t k = 0; k < len; k++) acc += a[(p * len + k) * inner + q];
                r = acc;
            } else if (n->op == OP_SUM) {
                uint64_t acc = 0;
                for (int64_t k = 0; k < len; k++) acc += (uint64_t)(int64_t)a[(p * len + k) * inner + q];
                r = wrap_int(o.dtype, acc);
            } else if (is_float) {
                r = -INFINITY;
                for (int64_t k = 0; k < len; k++) {
                    double x = a[(p * len + k) * inner + q];
                    if (isnan(x)) {
                        r = x;
                        break;
                    }
                    if (x > r) r = x;
                }
            } else {
                r = o.dtype == KILN_I32 ? (double)INT32_MIN : 0.0;
                for (int64_t k = 0; k < len; k++) {
                    double x = a[(p * len + k) * inner + q];
                    if (x > r) r = x;
                }
            }
            dtype_store(n->dtype, b->data, p * inner + q, r);
        }
    }
    free(a);
    return KILN_OK;
}

/* the row named by index value x, checked against [0, nrows) */
static kiln_status row_index(ictx *c, int32_t id, double x, int64_t nrows, int64_t *r) {
    if (!(x >= 0.0 && x < (double)nrows)) {
        graph_run_error(c->g, KILN_ERR_RANGE, "%s index %.17g out of range [0, %lld)",
                        op_table[c->g->nodes[id].op].name, x, (long long)nrows);
        return KILN_ERR_RANGE;
    }
    *r = (int64_t)x;
    return KILN_OK;
}

static kiln_status eval_gather(ictx *c, int32_t id, nbuf *b) {
    const node *n = &c->g->nodes[id];
    operand ot, oi;
    double *idx = NULL;
    kiln_status s = open_src(c, id, 0, &ot);
    if (s == KILN_OK) s = open_src(c, id, 1, &oi);
    if (s != KILN_OK) return s;
    /* result (I..., rest...) from table (R, rest...) and idx (I...) */
    int64_t want[KILN_MAX_DIMS];
    int wn = oi.ndim + ot.ndim - 1;
    if (ot.ndim < 1 || wn > KILN_MAX_DIMS || wn != b->ndim) {
        graph_run_error(c->g, KILN_ERR_SHAPE, "GATHER node %d: table and index shapes do not match its shape",
                        (int)id);
        return KILN_ERR_SHAPE;
    }
    for (int d = 0; d < oi.ndim; d++) want[d] = oi.dims[d];
    for (int d = 1; d < ot.ndim; d++) want[oi.ndim + d - 1] = ot.dims[d];
    if (!same_dims(wn, want, b->ndim, b->dims)) {
        graph_run_error(c->g, KILN_ERR_SHAPE, "GATHER node %d: table and index shapes do not match its shape",
                        (int)id);
        return KILN_ERR_SHAPE;
    }
    s = operand_load(c, &oi, &idx);
    if (s != KILN_OK) return s;
    int64_t nrows = ot.dims[0], rest = 1;
    for (int d = 1; d < ot.ndim; d++) rest *= ot.dims[d];
    if (kiln_dtype_is_block(ot.dtype)) {
        block_rows br;
        if (n->dtype != ot.dtype || ot.ndim < 2 || !block_rows_open(&ot, &br)) {
            s = block_unsupported(c, &ot);
        } else {
            for (int64_t j = 0; j < oi.numel && s == KILN_OK; j++) {
                int64_t r = 0;
                const uint8_t *row = NULL;
                s = row_index(c, id, idx[j], nrows, &r);
                if (s == KILN_OK) s = block_row(c, &ot, &br, r, &row);
                if (s == KILN_OK && br.row_bytes)
                    memcpy((uint8_t *)b->data + (size_t)j * br.row_bytes, row, br.row_bytes);
            }
        }
    } else {
        for (int64_t j = 0; j < oi.numel && s == KILN_OK; j++) {
            int64_t r = 0, coords[KILN_MAX_DIMS] = {0};
            s = row_index(c, id, idx[j], nrows, &r);
            coords[0] = r;
            for (int64_t e = 0; e < rest && s == KILN_OK; e++) {
                double v = 0.0;
                s = operand_get(c, &ot, coords, &v);
                if (s == KILN_OK) dtype_store(n->dtype, b->data, j * rest + e, v);
                coord_next(ot.ndim - 1, ot.dims + 1, coords + 1);
            }
        }
    }
    free(idx);
    return s;
}

static kiln_status eval_scatter(ictx *c, int32_t id, nbuf *b) {
    const node *n = &c->g->nodes[id];
    operand os, oi, ov;
    double *idx = NULL, *vals = NULL, *st = NULL;
    kiln_status s = open_src(c, id, 0, &os);
    if (s == KILN_OK) s = check_dims(c, &os, b->ndim, b->dims);
    if (s == KILN_OK) s = open_src(c, id, 1, &oi);
    if (s == KILN_OK) s = open_src(c, id, 2, &ov);
    if (s != KILN_OK) return s;
    if (b->ndim < 1) {
        graph_run_error(c->g, KILN_ERR_SHAPE, "SCATTER node %d: the state has no rows", (int)id);
        return KILN_ERR_SHAPE;
    }
    /* values (n, rest...) for idx of n elements into state (R, rest...) */
    int64_t want[KILN_MAX_DIMS];
    memcpy(want, b->dims, sizeof want);
    want[0] = oi.numel;
    s = check_dims(c, &ov, b->ndim, want);
    if (s == KILN_OK) s = operand_load(c, &oi, &idx);
    if (s != KILN_OK) return s;
    int64_t nrows = b->dims[0], rest = 1;
    for (int d = 1; d < b->ndim; d++) rest *= b->dims[d];
    if (kiln_dtype_is_block(n->dtype)) {
        /* the builder refuses block states; rows of blocks would be raw copies */
        graph_run_error(c->g, KILN_ERR_UNSUPPORTED, "SCATTER node %d: %s states are not supported", (int)id,
                        kiln_dtype_name(n->dtype));
        s = KILN_ERR_UNSUPPORTED;
    } else {
        s = operand_load(c, &os, &st);
        if (s == KILN_OK) s = operand_load(c, &ov, &vals);
        for (int64_t i = 0; i < b->numel && s == KILN_OK; i++) dtype_store(n->dtype, b->data, i, st[i]);
        for (int64_t j = 0; j < oi.numel && s == KILN_OK; j++) {
            int64_t r = 0;
            s = row_index(c, id, idx[j], nrows, &r);
            for (int64_t e = 0; e < rest && s == KILN_OK; e++)
                dtype_store(n->dtype, b->data, r * rest + e, vals[j * rest + e]);
        }
    }
    free(idx);
    free(vals);
    free(st);
    return s;
}

static kiln_status eval_cast(ictx *c, int32_t id, nbuf *b) {
    const node *n = &c->g->nodes[id];
    operand o;
    kiln_status s = open_src(c, id, 0, &o);
    if (s == KILN_OK) s = check_dims(c, &o, b->ndim, b->dims);
    if (s != KILN_OK) return s;
    if (kiln_dtype_is_block(n->dtype)) {
        int64_t block = dtype_table[n->dtype].block;
        if (b->ndim < 1 || b->dims[b->ndim - 1] % block != 0) {
            graph_run_error(c->g, KILN_ERR_SHAPE,
                            "CAST node %d: the last axis of a %s tensor must be a multiple of %lld",
                            (int)id, kiln_dtype_name(n->dtype), (long long)block);
            return KILN_ERR_SHAPE;
        }
        float *f = NULL;
        s = operand_load_f32(c, &o, &f);
        if (s != KILN_OK) return s;
        /* rows are whole blocks, so one call over all rows equals row by row */
        if (quant_quantize(n->dtype, f, b->data, b->numel) != 0) {
            graph_run_error(c->g, KILN_ERR_UNSUPPORTED, "CAST node %d: kiln has no %s encoder", (int)id,
                            kiln_dtype_name(n->dtype));
            s = KILN_ERR_UNSUPPORTED;
        }
        free(f);
        return s;
    }
    if (kiln_dtype_is_block(o.dtype)) {
        float *f = NULL;
        s = operand_load_f32(c, &o, &f);
        if (s != KILN_OK) return s;
        for (int64_t i = 0; i < b->numel; i++) dtype_store(n->dtype, b->data, i, (double)f[i]);
        free(f);
        return KILN_OK;
    }
    double *a = NULL;
    s = operand_load(c, &o, &a);
    if (s != KILN_OK) return s;
    for (int64_t i = 0; i < b->numel; i++) dtype_store(n->dtype, b->data, i, a[i]);
    free(a);
    return KILN_OK;
}

/* read tensor t through its view into a dense buffer of the source dtype
 * (CONTIGUOUS nodes and outputs) */
static kiln_status materialize(ictx *c, const operand *o, void *dst, size_t bytes) {
    if (kiln_dtype_is_block(o->dtype)) return block_copy(c, o, dst, bytes);
    double *a = NULL;
    kiln_status s = operand_load(c, o, &a);
    if (s != KILN_OK) return s;
    for (int64_t i = 0; i < o->numel; i++) dtype_store(o->dtype, dst, i, a[i]);
    free(a);
    return KILN_OK;
}

static kiln_status eval_contiguous(ictx *c, int32_t id, nbuf *b) {
    operand o;
    kiln_status s = open_src(c, id, 0, &o);
    if (s == KILN_OK) s = check_dims(c, &o, b->ndim, b->dims);
    if (s == KILN_OK && o.dtype != c->g->nodes[id].dtype) {
        graph_run_error(c->g, KILN_ERR_DTYPE, "CONTIGUOUS node %d changes the dtype", (int)id);
        s = KILN_ERR_DTYPE;
    }
    if (s == KILN_OK) s = materialize(c, &o, b->data, b->bytes);
    return s;
}

/* ---- compound ops: evaluated as their primitive definitions -------------- */

/* a tensor of sub on INPUT tensor `in` read through the evaluated view vn,
 * with every size, stride, offset and mask a constant */
static kiln_tensor sub_view(kiln_graph *sub, kiln_tensor in, const view_num *vn) {
    view v;
    memset(&v, 0, sizeof v);
    v.nlayers = vn->nlayers;
    for (int l = 0; l < vn->nlayers; l++) {
        const view_num_layer *a = &vn->layer[l];
        view_layer *L = &v.layer[l];
        L->ndim = a->ndim;
        L->offset = sym_const(sub->syms, a->offset);
        L->masked = a->masked;
        for (int d = 0; d < a->ndim; d++) {
            L->shape[d] = sym_const(sub->syms, a->shape[d]);
            L->stride[d] = sym_const(sub->syms, a->stride[d]);
            L->mask_lo[d] = sym_const(sub->syms, a->masked ? a->mask_lo[d] : 0);
            L->mask_hi[d] = a->masked ? sym_const(sub->syms, a->mask_hi[d]) : L->shape[d];
        }
    }
    KILN_GROW(sub->views, sub->cap_views, sub->nviews + 1);
    sub->views[sub->nviews] = v;
    KILN_GROW(sub->tensors, sub->cap_tensors, sub->ntensors + 1);
    sub->tensors[sub->ntensors].node = sub->tensors[in].node;
    sub->tensors[sub->ntensors].view = sub->nviews++;
    return sub->ntensors++;
}

/* A compound node (src/ir/compound.def) has no evaluator of its own: a small
 * graph gets one INPUT per operand, bound to the operand's source buffer (no
 * copy) and read through the operand's view, then compound_expand builds the
 * op's primitive definition on them, and this interpreter runs it. So the
 * node's value is its definition by construction. */
static kiln_status eval_compound(ictx *c, int32_t id, nbuf *b) {
    const node *n = &c->g->nodes[id];
    char d[64];
    kiln_graph *sub = kiln_graph_new();
    kiln_tensor src[3] = {KILN_NONE, KILN_NONE, KILN_NONE};
    kiln_status s = KILN_OK;
    for (int k = 0; k < op_table[n->op].arity && s == KILN_OK; k++) {
        operand o;
        s = open_src(c, id, k, &o);
        if (s != KILN_OK) break;
        const nbuf *sb = o.src;
        char name[16];
        snprintf(name, sizeof name, "in%d", k);
        kiln_sym dims[KILN_MAX_DIMS];
        for (int i = 0; i < sb->ndim; i++) dims[i] = kiln_sym_int(sub, sb->dims[i]);
        kiln_tensor in = kiln_input_dims(sub, name, o.dtype, sb->ndim, dims);
        if (in == KILN_NONE) break;
        kiln_bind_input(sub, name, sb->data, sb->bytes);
        src[k] = sub_view(sub, in, &o.vn);
    }
    if (s == KILN_OK) {
        kiln_output(sub, compound_expand(sub, n->op, src, n->axis), "out");
        if (kiln_graph_status(sub) == KILN_OK) kiln_eval_reference(sub);
        s = kiln_graph_status(sub);
        if (s != KILN_OK)
            graph_run_error(c->g, s, "%s (its definition): %s", node_desc(c->g, id, d, sizeof d), kiln_graph_error(sub));
    }
    if (s == KILN_OK) {
        int nd = 0;
        int64_t dims[KILN_MAX_DIMS];
        kiln_output_shape(sub, "out", &nd, dims);
        kiln_dtype dt = sub->nodes[sub->tensors[sub->outputs[0].tensor].node].dtype;
        if (!same_dims(nd, dims, b->ndim, b->dims) || dt != n->dtype) {
            char a1[200], a2[200];
            dims_str(nd, dims, a1, sizeof a1);
            dims_str(b->ndim, b->dims, a2, sizeof a2);
            graph_run_error(c->g, KILN_ERR_SHAPE, "%s: its definition has shape %s (dtype %s), the node %s (%s)",
                            node_desc(c->g, id, d, sizeof d), a1, kiln_dtype_name(dt), a2, kiln_dtype_name(n->dtype));
            s = KILN_ERR_SHAPE;
        } else {
            s = kiln_read_output(sub, "out", b->data, b->bytes);
        }
    }
    kiln_graph_free(sub);
    return s;
}

static kiln_status eval_node(ictx *c, int32_t id) {
    const node *n = &c->g->nodes[id];
    nbuf *b = &c->bufs[id];
    kiln_status s;
    if (n->op == OP_INPUT) {
        for (int32_t i = 0; i < c->g->ninputs; i++) {
            if (strcmp(c->g->inputs[i].name, n->name) == 0) b->data = c->g->inputs[i].data;
        }
        b->owned = 0;
        b->ready = 1;
        return KILN_OK; /* the binding was checked before the run started */
    }
    s = buf_alloc(c, b->bytes, &b->data);
    if (s != KILN_OK) return s;
    memset(b->data, 0, b->bytes ? b->bytes : 1);
    b->owned = 1;
    switch (n->op) {
    case OP_CONST:
    case OP_IOTA: s = eval_leaf(c, id, b); break;
    OP_UNARY_CASES s = eval_unary(c, id, b); break;
    case OP_ADD:
    case OP_MUL:
    case OP_MOD:
    case OP_LT: s = eval_binary(c, id, b); break;
    case OP_SUM:
    case OP_MAX: s = eval_reduce(c, id, b); break;
    case OP_GATHER: s = eval_gather(c, id, b); break;
    case OP_SCATTER: s = eval_scatter(c, id, b); break;
    case OP_CAST: s = eval_cast(c, id, b); break;
    case OP_CONTIGUOUS: s = eval_contiguous(c, id, b); break;
    case OP_CONTRACT:
    case OP_SOFTMAX_ONLINE: case OP_SOFTMAX_CONTRACT: s = eval_compound(c, id, b); break;
    case OP_INPUT: KILN_ASSERT(0 && "inputs are bound above"); break;
    }
    b->ready = 1;
    return s;
}

/* ---- the run ------------------------------------------------------------- */

/* the state INPUT a SCATTER chain updates, or -1 */
static int32_t scatter_state_root(const kiln_graph *g, int32_t id) {
    while (g->nodes[id].op == OP_SCATTER) id = g->tensors[g->nodes[id].src[0]].node;
    return g->nodes[id].op == OP_INPUT && g->nodes[id].is_state ? id : -1;
}

static void mark_needed(ictx *c) {
    kiln_graph *g = c->g;
    for (int32_t i = 0; i < g->noutputs; i++) c->need[g->tensors[g->outputs[i].tensor].node] = 1;
    for (int32_t i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == OP_SCATTER && scatter_state_root(g, i) >= 0) c->need[i] = 1;
    for (int32_t i = g->nnodes - 1; i >= 0; i--) {
        if (!c->need[i]) continue;
        for (int k = 0; k < op_table[g->nodes[i].op].arity; k++) {
            int32_t src = g->tensors[g->nodes[i].src[k]].node;
            KILN_ASSERT(src < i); /* topological order */
            c->need[src] = 1;
        }
    }
    for (int32_t i = 0; i < g->nnodes; i++) {
        c->last_use[i] = -1;
        if (!c->need[i]) continue;
        for (int k = 0; k < op_table[g->nodes[i].op].arity; k++)
            c->last_use[g->tensors[g->nodes[i].src[k]].node] = i;
    }
    for (int32_t i = 0; i < g->noutputs; i++) c->last_use[g->tensors[g->outputs[i].tensor].node] = INTERP_KEEP;
    for (int32_t i = 0; i < g->nnodes; i++)
        if (c->need[i] && g->nodes[i].op == OP_SCATTER && scatter_state_root(g, i) >= 0)
            c->last_use[i] = INTERP_KEEP;
}

static kiln_status eval_shapes(ictx *c) {
    kiln_graph *g = c->g;
    char d[96];
    for (int32_t i = 0; i < g->nnodes; i++) {
        if (!c->need[i]) continue;
        const node *n = &g->nodes[i];
        nbuf *b = &c->bufs[i];
        b->ndim = n->ndim;
        for (int k = 0; k < n->ndim; k++) {
            uint32_t missing = 0;
            if (sym_eval(g->syms, n->shape[k], c->values, c->bound, &b->dims[k], &missing) != 0) {
                const char *name = missing < c->nvars ? sym_var_name(g->syms, missing) : "?";
                graph_run_error(g, KILN_ERR_UNBOUND, "unbound symbol '%s' (needed by the shape of %s)",
                                name ? name : "?", node_desc(g, i, d, sizeof d));
                return KILN_ERR_UNBOUND;
            }
        }
        int r = shape_numel(b->ndim, b->dims, &b->numel);
        if (r != 0) {
            char ds[200];
            dims_str(b->ndim, b->dims, ds, sizeof ds);
            graph_run_error(g, r == -1 ? KILN_ERR_SHAPE : KILN_ERR_NOMEM, "%s has %s shape %s",
                            node_desc(g, i, d, sizeof d),
                            r == -1 ? "a negative size in its" : "too large a", ds);
            return r == -1 ? KILN_ERR_SHAPE : KILN_ERR_NOMEM;
        }
        int64_t block = dtype_table[n->dtype].block;
        if (b->numel % block != 0) {
            graph_run_error(g, KILN_ERR_SHAPE, "%s has %lld elements, not a multiple of the %s block (%lld)",
                            node_desc(g, i, d, sizeof d), (long long)b->numel,
                            kiln_dtype_name(n->dtype), (long long)block);
            return KILN_ERR_SHAPE;
        }
        b->bytes = kiln_dtype_bytes(n->dtype, b->numel);
    }
    return KILN_OK;
}

static kiln_status check_inputs(ictx *c) {
    kiln_graph *g = c->g;
    char d[96];
    for (int32_t i = 0; i < g->nnodes; i++) {
        const node *n = &g->nodes[i];
        if (!c->need[i] || n->op != OP_INPUT) continue;
        const input_binding *bind = NULL;
        for (int32_t k = 0; k < g->ninputs; k++)
            if (strcmp(g->inputs[k].name, n->name) == 0) bind = &g->inputs[k];
        if (!bind) {
            graph_run_error(g, KILN_ERR_UNBOUND, "%s has no bound buffer", node_desc(g, i, d, sizeof d));
            return KILN_ERR_UNBOUND;
        }
        if (bind->bytes != c->bufs[i].bytes) {
            graph_run_error(g, KILN_ERR_INVALID, "%s: expected %zu bytes, the bound buffer has %zu",
                            node_desc(g, i, d, sizeof d), c->bufs[i].bytes, bind->bytes);
            return KILN_ERR_INVALID;
        }
        if (!bind->data && bind->bytes) {
            graph_run_error(g, KILN_ERR_INVALID, "%s: NULL buffer", node_desc(g, i, d, sizeof d));
            return KILN_ERR_INVALID;
        }
    }
    return KILN_OK;
}

/* a numeric view that reads a buffer of src_numel elements in its own dense
 * order, so that a dense result of the view's shape is also the buffer's */
static int view_num_is_dense(const view_num *vn, int64_t src_numel) {
    if (vn->nlayers != 1) return 0;
    const view_num_layer *L = &vn->layer[0];
    int64_t expect = 1;
    for (int d = L->ndim - 1; d >= 0; d--) {
        if (L->shape[d] != 1 && L->stride[d] != expect) return 0;
        if (L->masked && L->shape[d] > 0 && (L->mask_lo[d] > 0 || L->mask_hi[d] < L->shape[d])) return 0;
        expect *= L->shape[d];
    }
    return expect == src_numel && (expect == 0 || L->offset == 0);
}

/* every SCATTER to be written back must update its state in the state's own
 * layout: each link of its chain reads the one before through a dense view */
static kiln_status check_writeback(ictx *c) {
    kiln_graph *g = c->g;
    for (int32_t i = 0; i < g->nnodes; i++) {
        if (!c->need[i] || g->nodes[i].op != OP_SCATTER) continue;
        int32_t root = scatter_state_root(g, i);
        if (root < 0) continue;
        for (int32_t id = i; g->nodes[id].op == OP_SCATTER;) {
            const tensor *t = &g->tensors[g->nodes[id].src[0]];
            view_num vn;
            uint32_t missing = 0;
            if (view_eval(&vn, &g->views[t->view], g->syms, c->values, c->bound, &missing) != 0) {
                const char *name = missing < c->nvars ? sym_var_name(g->syms, missing) : "?";
                graph_run_error(g, KILN_ERR_UNBOUND, "unbound symbol '%s' (needed by the view of SCATTER node %d)",
                                name ? name : "?", (int)id);
                return KILN_ERR_UNBOUND;
            }
            if (!view_num_is_dense(&vn, c->bufs[t->node].numel) ||
                g->nodes[t->node].dtype != g->nodes[id].dtype) {
                graph_run_error(g, KILN_ERR_UNSUPPORTED,
                                "SCATTER node %d updates state '%s' through a view that is not its dense "
                                "layout (or another dtype): it cannot be written back",
                                (int)i, g->nodes[root].name);
                return KILN_ERR_UNSUPPORTED;
            }
            id = t->node;
        }
    }
    return KILN_OK;
}

static kiln_status make_results(ictx *c) {
    kiln_graph *g = c->g;
    g->results = kiln_xcalloc((size_t)g->noutputs + 1, sizeof *g->results);
    g->results[g->noutputs].ndim = -1;
    for (int32_t i = 0; i < g->noutputs; i++) {
        char who[96];
        operand o;
        output_value *r = &g->results[i];
        snprintf(who, sizeof who, "output '%s'", g->outputs[i].name);
        kiln_status s = operand_open(c, g->outputs[i].tensor, who, &o);
        if (s != KILN_OK) return s;
        if (kiln_dtype_is_block(o.dtype) && o.numel % dtype_table[o.dtype].block != 0) {
            graph_run_error(g, KILN_ERR_SHAPE, "%s: %lld elements is not a whole number of %s blocks", who,
                            (long long)o.numel, kiln_dtype_name(o.dtype));
            return KILN_ERR_SHAPE;
        }
        r->ndim = o.ndim;
        memcpy(r->dims, o.dims, sizeof r->dims);
        r->dtype = o.dtype;
        r->bytes = kiln_dtype_bytes(o.dtype, o.numel);
        s = buf_alloc(c, r->bytes, &r->data);
        if (s != KILN_OK) return s;
        s = materialize(c, &o, r->data, r->bytes);
        if (s != KILN_OK) return s;
    }
    return KILN_OK;
}

static void write_back(ictx *c) {
    kiln_graph *g = c->g;
    for (int32_t i = 0; i < g->nnodes; i++) {
        if (!c->need[i] || g->nodes[i].op != OP_SCATTER) continue;
        int32_t root = scatter_state_root(g, i);
        if (root < 0) continue;
        void *dst = c->bufs[root].data;
        /* check_writeback made the layouts agree; the binding was size-checked */
        KILN_ASSERT(c->bufs[i].ready && c->bufs[i].bytes == c->bufs[root].bytes);
        if (c->bufs[i].bytes) memcpy(dst, c->bufs[i].data, c->bufs[i].bytes);
    }
}

static kiln_status run(ictx *c) {
    kiln_graph *g = c->g;
    mark_needed(c);
    kiln_status s = eval_shapes(c);
    if (s == KILN_OK) s = check_inputs(c);
    if (s == KILN_OK) s = check_writeback(c);
    for (int32_t i = 0; i < g->nnodes && s == KILN_OK; i++) {
        if (!c->need[i]) continue;
        s = eval_node(c, i);
        for (int k = 0; k < op_table[g->nodes[i].op].arity; k++) {
            nbuf *src = &c->bufs[g->tensors[g->nodes[i].src[k]].node];
            if (c->last_use[g->tensors[g->nodes[i].src[k]].node] == i && src->owned) {
                free(src->data);
                src->data = NULL;
                src->owned = 0;
            }
        }
    }
    if (s == KILN_OK) s = make_results(c);
    if (s == KILN_OK) write_back(c);
    return s;
}

kiln_status kiln_eval_reference(kiln_graph *g) {
    if (!g) return KILN_ERR_INVALID;
    if (g->build_failed) return g->status;
    graph_free_results(g);

    ictx c;
    memset(&c, 0, sizeof c);
    c.g = g;
    c.nvars = sym_var_count(g->syms);
    c.values = kiln_xcalloc(c.nvars + 1, sizeof *c.values);
    c.bound = kiln_xcalloc(c.nvars + 1, 1);
    /* variables created after the last binding are simply unbound */
    for (uint32_t v = 0; v < c.nvars && v < g->ndim_values; v++) {
        c.values[v] = g->dim_values[v];
        c.bound[v] = g->dim_bound[v];
    }
    if (graph_run_checks(g, c.values, c.bound) != KILN_OK) {
        free(c.values);
        free(c.bound);
        return g->status;
    }
    size_t nn = (size_t)g->nnodes + 1;
    c.need = kiln_xcalloc(nn, 1);
    c.last_use = kiln_xcalloc(nn, sizeof *c.last_use);
    c.bufs = kiln_xcalloc(nn, sizeof *c.bufs);

    kiln_status s = run(&c);

    for (int32_t i = 0; i < g->nnodes; i++)
        if (c.bufs[i].owned) free(c.bufs[i].data);
    free(c.bufs);
    free(c.last_use);
    free(c.need);
    free(c.bound);
    free(c.values);
    if (s != KILN_OK) {
        graph_free_results(g);
        return s;
    }
    g->status = KILN_OK; /* a successful run replaces the previous run's error */
    g->error[0] = 0;
    return KILN_OK;
}

/* ---- results ------------------------------------------------------------- */

/* the result of output `name`, or NULL with a message. The reading functions
 * take a const graph but report errors through it like every other call: the
 * graph is always a heap object created by kiln_graph_new, so casting the
 * const away to record a message is well defined. */
static const output_value *find_result(const kiln_graph *g, const char *name, const char *fn) {
    kiln_graph *mg = (kiln_graph *)(uintptr_t)g;
    int32_t nres = 0;
    if (g->results)
        while (g->results[nres].ndim >= 0) nres++;
    for (int32_t i = 0; i < g->noutputs; i++) {
        if (name && strcmp(g->outputs[i].name, name) == 0) {
            if (i >= nres) {
                graph_run_error(mg, KILN_ERR_INVALID, "%s: output '%s' has no value: run the graph first", fn,
                                name);
                return NULL;
            }
            return &g->results[i];
        }
    }
    graph_run_error(mg, KILN_ERR_INVALID, "%s: the graph has no output named '%s'", fn, name ? name : "(null)");
    return NULL;
}

kiln_status kiln_output_shape(const kiln_graph *g, const char *name, int *ndim, int64_t dims[KILN_MAX_DIMS]) {
    if (!g) return KILN_ERR_INVALID;
    const output_value *r = find_result(g, name, "kiln_output_shape");
    if (!r) return KILN_ERR_INVALID;
    if (ndim) *ndim = r->ndim;
    if (dims)
        for (int d = 0; d < KILN_MAX_DIMS; d++) dims[d] = d < r->ndim ? r->dims[d] : 0;
    return KILN_OK;
}

kiln_status kiln_read_output(const kiln_graph *g, const char *name, void *dst, size_t bytes) {
    if (!g) return KILN_ERR_INVALID;
    const output_value *r = find_result(g, name, "kiln_read_output");
    if (!r) return KILN_ERR_INVALID;
    if (bytes != r->bytes || (!dst && bytes)) {
        graph_run_error((kiln_graph *)(uintptr_t)g, KILN_ERR_INVALID,
                        "kiln_read_output: output '%s' has %zu bytes, the buffer %zu%s", name, r->bytes, bytes,
                        dst ? "" : " (NULL)");
        return KILN_ERR_INVALID;
    }
    if (bytes) memcpy(dst, r->data, bytes);
    return KILN_OK;
}
