/* onnx_proto.h — an ONNX ModelProto decoded into plain C structures.
 *
 * Field numbers and enum values are those of onnx.proto (a specification).
 * Only what the importer reads is kept: the main graph's nodes, initializers,
 * inputs and outputs, the default-domain opset, and per node its attributes.
 *
 * Invariants:
 *  - Every allocation of a decoded model hangs off ox_model.mem and is freed
 *    at once by ox_model_free; strings are copied and NUL-terminated.
 *  - A tensor's data is decoded into one dense little-endian buffer of its
 *    ONNX element type (raw_data, the typed repeated fields, or an external
 *    file), and its byte length is checked against its dims; n elements.
 *  - Decoding never trusts a length or count from the file: malformed input
 *    gives 0 and a message in ox_model.err, never a crash.
 */
#ifndef KILN_ONNX_PROTO_H
#define KILN_ONNX_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

/* TensorProto.DataType */
enum {
    OX_UNDEFINED = 0, OX_FLOAT = 1, OX_UINT8 = 2, OX_INT8 = 3, OX_UINT16 = 4, OX_INT16 = 5, OX_INT32 = 6,
    OX_INT64 = 7, OX_STRING = 8, OX_BOOL = 9, OX_FLOAT16 = 10, OX_DOUBLE = 11, OX_UINT32 = 12, OX_UINT64 = 13,
    OX_COMPLEX64 = 14, OX_COMPLEX128 = 15, OX_BFLOAT16 = 16, OX_DTYPE_END = 24
};

/* AttributeProto.AttributeType */
enum {
    OX_ATTR_FLOAT = 1, OX_ATTR_INT = 2, OX_ATTR_STRING = 3, OX_ATTR_TENSOR = 4, OX_ATTR_GRAPH = 5,
    OX_ATTR_FLOATS = 6, OX_ATTR_INTS = 7, OX_ATTR_STRINGS = 8, OX_ATTR_TENSORS = 9, OX_ATTR_GRAPHS = 10
};

typedef struct ox_tensor {
    char *name;
    int dtype;                       /* OX_* */
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    int64_t n;                       /* elements */
    void *data;                      /* n elements of dtype, dense, little-endian */
} ox_tensor;

typedef struct ox_attr {
    char *name;
    int type;                        /* OX_ATTR_* */
    double f;
    int64_t i;
    char *s;                         /* STRING (NUL-terminated copy) */
    ox_tensor *t;                    /* TENSOR */
    int64_t *ints; int nints;        /* INTS */
    float *floats; int nfloats;      /* FLOATS */
} ox_attr;

typedef struct ox_node {
    char *op_type, *domain, *name;
    char **inputs; int n_in;         /* "" marks an omitted optional input */
    char **outputs; int n_out;
    ox_attr *attrs; int n_attrs;
} ox_node;

typedef struct ox_value_info {
    char *name;
    int is_tensor;                   /* 0: a sequence, map, ... (unsupported) */
    int elem;                        /* OX_* */
    int has_shape;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];     /* -1 where unknown or symbolic */
    char *params[KILN_MAX_DIMS];     /* dim_param names, NULL where none */
} ox_value_info;

typedef struct ox_model {
    int64_t ir_version;
    int64_t opset;                   /* version of the default ("" / "ai.onnx") domain */
    ox_node *nodes; int n_nodes;
    ox_tensor *inits; int n_inits;
    ox_value_info *inputs; int n_inputs;
    ox_value_info *outputs; int n_outputs;
    void *mem;                       /* every allocation, freed by ox_model_free */
    kiln_status status;
    char err[512];
} ox_model;

/* decode buf (a serialized ModelProto); dir is the model file's folder, where
 * external data files are looked up (NULL: external data is an error).
 * Returns 1, or 0 with m->status and m->err set. Free m with ox_model_free in
 * both cases. */
int ox_decode(const uint8_t *buf, size_t len, const char *dir, ox_model *m);
void ox_model_free(ox_model *m);

/* bytes of one element of an ONNX dtype; 0 for unsupported (string, ...) */
size_t ox_dtype_size(int dtype);
const char *ox_dtype_name(int dtype);
/* element i of a tensor-like buffer of an ONNX dtype, as double / int64 */
double ox_elem_f(int dtype, const void *data, int64_t i);
int64_t ox_elem_i(int dtype, const void *data, int64_t i);

/* attribute lookup on a node: NULL when absent */
const ox_attr *ox_attr_find(const ox_node *n, const char *name);

#endif
