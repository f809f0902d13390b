/* view.h — movement without copies: a view maps the coordinates a consumer
 * sees to an element offset in a dense buffer, plus a validity predicate
 * (positions outside it read as zero).
 *
 * A view is a stack of layers. The outermost layer (layer[nlayers-1]) has the
 * shape the consumer sees. Each layer maps its coordinates i to a linear index
 * offset + sum(i_d * stride_d), valid when mask_lo_d <= i_d < mask_hi_d for all
 * d; that linear index is unravelled row-major into the coordinates of the
 * layer below, and so on; layer 0's linear index is the buffer offset. A layer
 * is pushed only when a reshape cannot be expressed by strides of the current
 * one (e.g. reshaping a transposed or padded view). All sizes, strides,
 * offsets and masks are symbolic (sym ids of the graph's pool).
 *
 * Invariants: 0 <= ndim <= KILN_MAX_DIMS per layer; 1 <= nlayers <= VIEW_MAX_LAYERS;
 * shapes are >= 0. Functions returning int return 0 on success and -1 when the
 * result would need more than VIEW_MAX_LAYERS layers (the caller then
 * materialises with CONTIGUOUS and retries).
 */
#ifndef KILN_VIEW_H
#define KILN_VIEW_H

#include "kiln.h"
#include "sym.h"

#define VIEW_MAX_LAYERS 6

typedef struct view_layer {
    int ndim;
    sym_id shape[KILN_MAX_DIMS];
    sym_id stride[KILN_MAX_DIMS];
    sym_id offset;
    int masked;                    /* 0: mask is all of the shape */
    sym_id mask_lo[KILN_MAX_DIMS]; /* valid when lo <= i < hi */
    sym_id mask_hi[KILN_MAX_DIMS];
} view_layer;

typedef struct view {
    int nlayers;
    view_layer layer[VIEW_MAX_LAYERS];
} view;

/* dense row-major view of a buffer of this shape */
void view_identity(view *out, sym_pool *p, int ndim, const sym_id *shape);
int view_ndim(const view *v);
const sym_id *view_shape(const view *v); /* outermost shape, view_ndim entries */
/* 1 if the view is exactly the dense row-major layout of its own shape */
int view_is_identity(const view *v, const sym_pool *p);

/* movement ops: out may alias in. Shape checks belong to the caller (the graph
 * builder), which reports errors; these assume valid arguments. */
int view_reshape(view *out, const view *in, sym_pool *p, int ndim, const sym_id *shape);
int view_permute(view *out, const view *in, sym_pool *p, const int *perm);
int view_expand(view *out, const view *in, sym_pool *p, const sym_id *shape); /* same ndim; size-1 axes broadcast */
int view_slice(view *out, const view *in, sym_pool *p, int axis, sym_id start, sym_id stop, int64_t step);
int view_pad(view *out, const view *in, sym_pool *p, int axis, sym_id before, sym_id after);
int view_window(view *out, const view *in, sym_pool *p, int axis, int64_t size, int64_t stride, int64_t dilation);
int view_flip(view *out, const view *in, sym_pool *p, int axis);

/* v of pool `from` in pool `to` (sym_transfer with its memo) */
void view_transfer(view *out, const view *v, const sym_pool *from, sym_pool *to, sym_id *memo);

/* symbolic form: given one index expression per outer dimension, the buffer
 * offset and the validity (1/0) as expressions */
void view_expr(const view *v, sym_pool *p, const sym_id *idx, sym_id *offset, sym_id *valid);

/* numeric form, for interpreters: a view with every expression evaluated */
typedef struct view_num_layer {
    int ndim;
    int64_t shape[KILN_MAX_DIMS], stride[KILN_MAX_DIMS], offset;
    int masked;
    int64_t mask_lo[KILN_MAX_DIMS], mask_hi[KILN_MAX_DIMS];
} view_num_layer;
typedef struct view_num {
    int nlayers;
    view_num_layer layer[VIEW_MAX_LAYERS];
} view_num;
/* evaluate under variable values (see sym_eval); -1 with *missing_var if unbound */
int view_eval(view_num *out, const view *v, const sym_pool *p, const int64_t *values,
              const uint8_t *bound, uint32_t *missing_var);
/* coordinates (outer shape) -> buffer offset; returns 1 if valid, 0 if the
 * position is masked out (reads as zero) */
int view_num_index(const view_num *v, const int64_t *coords, int64_t *offset);

/* text such as "[(seq, 64) strides (64, 1) offset 0]" layer by layer */
int view_print(const view *v, const sym_pool *p, char *buf, size_t cap);

#endif
