/* kiln_onnx.h — ONNX models in: the importer's public API. Include after kiln.h.
 *
 * kiln_onnx_load reads an .onnx file (its own protobuf reader, external data
 * files beside the model included) and builds a kiln_graph from it: every
 * graph input that is not an initializer becomes a kiln input of the same
 * name, every initializer a bound weight, every graph output a kiln output
 * of the same name. Operators are built from kiln's primitives and nn
 * functions; an operator, attribute or type kiln cannot do is an error naming
 * it (KILN_ERR_UNSUPPORTED), never a wrong answer.
 *
 * Types: ONNX float, float16 and bfloat16 stay f32, f16, bf16; every integer
 * type and bool becomes kiln's i32 (values outside i32 are an error where
 * they are known at load time); double, strings and the 8/4-bit types are
 * unsupported. A caller binds integer inputs as i32 data.
 *
 * Shapes: a symbolic dimension (dim_param "N") becomes the kiln symbol N,
 * bound at run time with kiln_bind_dim. Values that ONNX passes as tensors
 * but that fix shapes (Reshape's shape, Slice's starts, ...) must be known at
 * load time: initializers, Constant nodes, Shape of static dims and integer
 * arithmetic on those are folded; a graph input may be made such a constant
 * with kiln_onnx_options.consts.
 *
 * Invariants: the model owns the graph and the weight buffers bound into it;
 * both live until kiln_onnx_free. Errors never crash: a NULL model with *st
 * and err set.
 */
#ifndef KILN_ONNX_H
#define KILN_ONNX_H

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_onnx_model kiln_onnx_model;

/* a graph input given a value at load time: it is folded like an initializer */
typedef struct kiln_onnx_const {
    const char *name;
    int onnx_dtype;          /* TensorProto.DataType: 1 float, 6 int32, 7 int64, 9 bool, ... */
    int ndim;
    const int64_t *dims;
    const void *data;        /* dense, little-endian, in onnx_dtype */
} kiln_onnx_const;

typedef struct kiln_onnx_options {
    const kiln_onnx_const *consts;
    int n_consts;
} kiln_onnx_options;

/* opt may be NULL. On error: NULL, *st (when st) and err (when errcap > 0). */
KILN_API kiln_onnx_model *kiln_onnx_load(const char *path, const kiln_onnx_options *opt, kiln_status *st, char *err,
                                         size_t errcap);
/* the same from a serialized model in memory; dir: where external data files
 * are (NULL: none allowed) */
KILN_API kiln_onnx_model *kiln_onnx_load_buffer(const void *data, size_t len, const char *dir,
                                                const kiln_onnx_options *opt, kiln_status *st, char *err,
                                                size_t errcap);
KILN_API void kiln_onnx_free(kiln_onnx_model *m);

KILN_API kiln_graph *kiln_onnx_graph(const kiln_onnx_model *m);
KILN_API int kiln_onnx_opset(const kiln_onnx_model *m);

/* the runtime inputs (graph inputs that are neither initializers nor consts) */
KILN_API int kiln_onnx_input_count(const kiln_onnx_model *m);
KILN_API const char *kiln_onnx_input_name(const kiln_onnx_model *m, int i);
KILN_API kiln_dtype kiln_onnx_input_dtype(const kiln_onnx_model *m, int i);
KILN_API int kiln_onnx_input_onnx_dtype(const kiln_onnx_model *m, int i);
/* dims of input i; a symbolic one is -1 and its name goes to names[d] (when
 * names is not NULL). Returns ndim. */
KILN_API int kiln_onnx_input_dims(const kiln_onnx_model *m, int i, int64_t dims[KILN_MAX_DIMS],
                                  const char *names[KILN_MAX_DIMS]);

KILN_API int kiln_onnx_output_count(const kiln_onnx_model *m);
KILN_API const char *kiln_onnx_output_name(const kiln_onnx_model *m, int i);
KILN_API int kiln_onnx_output_onnx_dtype(const kiln_onnx_model *m, int i);

/* the operators the importer knows, one per line (malloc'd text) */
KILN_API char *kiln_onnx_operators(void);

#ifdef __cplusplus
}
#endif
#endif
