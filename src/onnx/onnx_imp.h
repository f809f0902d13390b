/* onnx_imp.h — what the importer's core (onnx_import.c) and its operator
 * files (onnx_ops_*.c) share: the value table and the helpers an operator
 * uses to read its inputs and attributes and to set its outputs.
 *
 * Invariants:
 *  - A value is a graph tensor, or a host constant (an ox_tensor the importer
 *    can read at load time), or both; host constants become graph tensors
 *    only when an operator asks for one (imp_in), so shape arithmetic on
 *    constants never reaches the graph.
 *  - kiln dtypes of values: f32, f16, bf16 for ONNX floats; i32 for every
 *    integer type and bool. The ONNX type is kept beside the tensor.
 *  - An operator returns 1, or 0 after imp_fail / a graph error; the core
 *    turns either into the load's error, naming the node.
 */
#ifndef KILN_ONNX_IMP_H
#define KILN_ONNX_IMP_H

#include "kiln.h"
#include "onnx_proto.h"

typedef struct imp_value {
    char *name;
    int onnx_dtype;                /* OX_* */
    kiln_tensor t;                 /* KILN_NONE until made */
    ox_tensor *c;                  /* host constant, or NULL */
} imp_value;

#define IMP_MAX_OUT 64

typedef struct imp_ctx {
    kiln_graph *g;
    ox_model *m;
    int opset;
    imp_value *vals; int n_vals, cap_vals;
    int *hash; int hash_cap;       /* open addressing over vals, -1 empty */
    void **bufs; int n_bufs, cap_bufs; /* weight buffers bound into g */
    int n_consts;                  /* counter for names of materialised constants */
    size_t fill_bytes;             /* bytes of ConstantOfShape fills made into buffers so far */
    int folding;                   /* 1: building on a scratch graph to fold constants */
    kiln_tensor fold_t[IMP_MAX_OUT];
    int fold_dt[IMP_MAX_OUT];
    kiln_status status;
    char err[512];
} imp_ctx;

typedef int (*imp_op_fn)(imp_ctx *c, const ox_node *n);

typedef struct imp_op {
    const char *name;
    imp_op_fn fn;
    const char *attrs;             /* accepted attribute names, space separated */
} imp_op;

/* the operator tables of the onnx_ops_*.c files, each ended by {NULL} */
extern const imp_op imp_ops_elementwise[];
extern const imp_op imp_ops_shape[];
extern const imp_op imp_ops_nn[];
extern const imp_op imp_ops_reduce[];
extern const imp_op imp_ops_resize[];
extern const imp_op imp_ops_einsum[];

int imp_fail(imp_ctx *c, kiln_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* kiln dtype of an ONNX type; -1 when unsupported */
int imp_kiln_dtype(int onnx_dtype);
int imp_is_float_onnx(int onnx_dtype);

/* inputs: present (not omitted), the graph tensor (materialising a constant),
 * the host constant (NULL when not known at load time), the ONNX dtype */
int imp_has(const ox_node *n, int i);
kiln_tensor imp_in(imp_ctx *c, const ox_node *n, int i);
ox_tensor *imp_const(imp_ctx *c, const ox_node *n, int i);
int imp_in_dtype(imp_ctx *c, const ox_node *n, int i);
/* a constant input read as int64s: returns count, or -1 with an error naming
 * the input when it is not known at load time (or has more than cap) */
int imp_const_ints(imp_ctx *c, const ox_node *n, int i, int64_t *out, int cap);

/* outputs */
int imp_set(imp_ctx *c, const ox_node *n, int i, kiln_tensor t, int onnx_dtype);
int imp_set_const(imp_ctx *c, const ox_node *n, int i, ox_tensor *k);
/* a new host constant in model memory (data zeroed) */
ox_tensor *imp_new_const(imp_ctx *c, int onnx_dtype, int ndim, const int64_t *dims);

/* a host constant as a graph tensor (a bound weight, or a constant fill) */
kiln_tensor imp_tensor_of(imp_ctx *c, ox_tensor *k);

/* cond ? a : b exactly (NaN and infinities in either branch stay where they
 * are); onnx_ops_elementwise.c */
kiln_tensor imp_where_exact(imp_ctx *c, kiln_tensor cond, kiln_tensor a, kiln_tensor b);

/* attributes with defaults */
int64_t imp_attr_i(const ox_node *n, const char *name, int64_t def);
double imp_attr_f(const ox_node *n, const char *name, double def);
const char *imp_attr_s(const ox_node *n, const char *name, const char *def);
/* INTS attribute: count (0 when absent), elements in *out */
int imp_attr_ints(const ox_node *n, const char *name, const int64_t **out);

/* axis in [-r, r) to [0, r), or -1 with an error */
int imp_axis(imp_ctx *c, const ox_node *n, int64_t axis, int rank);
/* constant dim value or -1 */
int64_t imp_dim_const(imp_ctx *c, kiln_tensor t, int axis);
/* a graph error (sticky builder error) becomes the import's error */
int imp_check(imp_ctx *c, kiln_tensor t);

#endif
