/* kiln.h — the public API of kiln, a search-based ML compiler and runtime.
 *
 * A kiln_graph holds a computation built from ~15 primitive tensor ops (see
 * src/ir/ops.def) plus free movement views (reshape, permute, expand, slice,
 * pad, window, flip). Higher-level functions (softmax, matmul, attention, ...)
 * build primitive subgraphs. Shapes are symbolic: a dimension is an integer
 * expression over named variables such as "seq" or "pos", bound at run time.
 *
 * Invariants and conventions:
 *  - Handles are opaque. Tensors are small integer ids into their graph
 *    (kiln_tensor); KILN_NONE (-1) means "no tensor" and is what builder calls
 *    return after an error.
 *  - Builder misuse (mismatched shapes, wrong dtype, bad axis) sets a sticky
 *    error on the graph: the first error's message is kept, and every later
 *    builder call does nothing and returns KILN_NONE. Check it once, at the end,
 *    with kiln_graph_status()/kiln_graph_error().
 *  - Binary ops broadcast numpy-style; the graph itself always stores equal
 *    shapes, with broadcasting expressed as expand views.
 *  - Functions that can fail because of the world (bad data, unbound symbols,
 *    out-of-range indices) return a kiln_status and leave a message in the graph.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* KILN_API marks what libkiln.so exports; everything else is hidden
 * (-fvisibility=hidden). Every public header's functions carry it. */
#if defined(__GNUC__) || defined(__clang__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

/* the library's version; kiln_version() is the one libkiln was built as,
 * "MAJOR.MINOR.PATCH" (the SONAME is libkiln.so.MAJOR) */
#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_STRING "0.1.0"

#define KILN_MAX_DIMS 8
#define KILN_NONE (-1)

typedef enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_INVALID,   /* invalid argument or API misuse */
    KILN_ERR_SHAPE,     /* shapes do not agree */
    KILN_ERR_DTYPE,     /* dtype not allowed for this op */
    KILN_ERR_UNBOUND,   /* a symbol or input has no value at run time */
    KILN_ERR_RANGE,     /* an index is out of range at run time */
    KILN_ERR_NOMEM,     /* allocation failed */
    KILN_ERR_IO,        /* file or external tool failure */
    KILN_ERR_FORMAT,    /* malformed file or data */
    KILN_ERR_UNSUPPORTED
} kiln_status;

typedef enum kiln_dtype {
    KILN_F32 = 0,
    KILN_F16,
    KILN_BF16,
    KILN_I32,
    KILN_U8,
    /* storage-only GGUF block formats, reached only through kiln_cast; the
     * last axis is the quantised one and must be a multiple of the block size */
    KILN_Q8_0,
    KILN_Q4_0,
    KILN_Q4_K,
    KILN_Q6_K,
    KILN_Q5_0,          /* appended: the default model uses it */
    KILN_DTYPE_COUNT
} kiln_dtype;

typedef struct kiln_graph kiln_graph;
typedef int32_t kiln_tensor; /* id of a tensor (a node seen through a view) */
typedef int32_t kiln_sym;    /* id of a symbolic integer expression; -1 = none */

KILN_API const char *kiln_version(void);
/* releases a string or buffer the library malloc'd for the caller (NULL is fine) */
KILN_API void kiln_free(void *p);
KILN_API const char *kiln_status_name(kiln_status s);
KILN_API const char *kiln_dtype_name(kiln_dtype t);
/* bytes used by n elements of dtype t (n a multiple of the block size for block
 * formats); 0 if n is not */
KILN_API size_t kiln_dtype_bytes(kiln_dtype t, int64_t n);
KILN_API int kiln_dtype_is_float(kiln_dtype t);  /* f32 f16 bf16 */
KILN_API int kiln_dtype_is_block(kiln_dtype t);  /* q8_0 q4_0 q4_k q6_k q5_0 */
/* n elements of dtype t (any dtype: the block formats decode per block,
 * n a multiple of the block size) into floats; KILN_ERR_INVALID for a bad
 * dtype, a negative n or one that is not a multiple of the block size */
KILN_API kiln_status kiln_dequantize(kiln_dtype t, const void *src, float *dst, int64_t n);
/* n floats into dtype t (round to nearest even; block formats as GGUF's
 * reference quantisers); the same errors, KILN_ERR_UNSUPPORTED where t has
 * no encoder */
KILN_API kiln_status kiln_quantize(kiln_dtype t, const float *src, void *dst, int64_t n);
/* one float as f16 / bf16 bits (round to nearest even; NaN stays NaN) */
KILN_API uint16_t kiln_f32_to_f16(float f);
KILN_API uint16_t kiln_f32_to_bf16(float f);

/* ---- graph lifetime and errors ------------------------------------------ */
KILN_API kiln_graph *kiln_graph_new(void);
/* the nodes built from here on start a new block (a repeated layer, say):
 * a hint, never a change of meaning. kiln_compile's rewrite step saturates
 * each distinct block once and reuses the result for its identical siblings
 * (blocks that differ only in the digits of their input names), so rewrite
 * time grows with the distinct blocks, not the depth */
KILN_API void kiln_graph_mark_block(kiln_graph *g);
KILN_API void kiln_graph_free(kiln_graph *g);
KILN_API kiln_status kiln_graph_status(const kiln_graph *g); /* sticky builder status or last run status */
KILN_API const char *kiln_graph_error(const kiln_graph *g);  /* "" when OK */
KILN_API void kiln_graph_clear_error(kiln_graph *g);         /* for callers that recover */

/* ---- symbolic dimensions ------------------------------------------------- */
KILN_API kiln_sym kiln_sym_int(kiln_graph *g, int64_t value);
KILN_API kiln_sym kiln_sym_var(kiln_graph *g, const char *name); /* a named size, >= 1 */
/* parse an expression: integers, names, + - * / % ( ), min(a,b), max(a,b) */
KILN_API kiln_sym kiln_sym_parse(kiln_graph *g, const char *expr);
KILN_API kiln_sym kiln_sym_add(kiln_graph *g, kiln_sym a, kiln_sym b);
KILN_API kiln_sym kiln_sym_sub(kiln_graph *g, kiln_sym a, kiln_sym b);
KILN_API kiln_sym kiln_sym_mul(kiln_graph *g, kiln_sym a, kiln_sym b);
KILN_API kiln_sym kiln_sym_div(kiln_graph *g, kiln_sym a, kiln_sym b); /* floor division */
/* writes the expression as text into buf (always NUL-terminated); returns buf */
KILN_API char *kiln_sym_str(const kiln_graph *g, kiln_sym s, char *buf, size_t cap);
/* the constant value of s, if it is one: returns 1 and sets *value */
KILN_API int kiln_sym_const_value(const kiln_graph *g, kiln_sym s, int64_t *value);

/* ---- leaves -------------------------------------------------------------- */
/* a named runtime tensor; shape is text: comma-separated dim expressions,
 * e.g. "seq, 64" or "pos+seq, 8, 64"; "" is a scalar */
KILN_API kiln_tensor kiln_input(kiln_graph *g, const char *name, kiln_dtype t, const char *shape);
KILN_API kiln_tensor kiln_input_dims(kiln_graph *g, const char *name, kiln_dtype t, int ndim, const kiln_sym *shape);
/* a persistent state tensor (e.g. a KV cache): like an input, but SCATTERs into
 * it are written back into the bound buffer when a run ends */
KILN_API kiln_tensor kiln_state(kiln_graph *g, const char *name, kiln_dtype t, const char *shape);
KILN_API kiln_tensor kiln_const(kiln_graph *g, double value, kiln_dtype t);  /* 0-d scalar */
/* value filled to a shape (an expanded scalar constant: no memory) */
KILN_API kiln_tensor kiln_full(kiln_graph *g, double value, kiln_dtype t, int ndim, const kiln_sym *shape);
/* integer index along `axis` of a tensor of the given shape (dtype i32 or float) */
KILN_API kiln_tensor kiln_iota(kiln_graph *g, kiln_dtype t, int ndim, const kiln_sym *shape, int axis);

/* ---- primitive ops ------------------------------------------------------- */
KILN_API kiln_tensor kiln_exp2(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_log2(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_sin(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_sqrt(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_recip(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_add(kiln_graph *g, kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_mul(kiln_graph *g, kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_mod(kiln_graph *g, kiln_tensor a, kiln_tensor b); /* C fmod / % semantics: sign of a */
KILN_API kiln_tensor kiln_lt(kiln_graph *g, kiln_tensor a, kiln_tensor b);  /* 1 or 0, in the operands' dtype */
KILN_API kiln_tensor kiln_sum(kiln_graph *g, kiln_tensor x, int axis);      /* axis removed */
KILN_API kiln_tensor kiln_max(kiln_graph *g, kiln_tensor x, int axis);      /* axis removed */
/* rows of table (R, ...) picked by integer idx (...I): result (...I, ...) */
KILN_API kiln_tensor kiln_gather(kiln_graph *g, kiln_tensor table, kiln_tensor idx);
/* state (R, ...) with rows idx (n) replaced by values (n, ...); the result is
 * the updated state. Out-of-range indices are a run-time error. */
KILN_API kiln_tensor kiln_scatter(kiln_graph *g, kiln_tensor state, kiln_tensor idx, kiln_tensor values);
KILN_API kiln_tensor kiln_cast(kiln_graph *g, kiln_tensor x, kiln_dtype t);
KILN_API kiln_tensor kiln_contiguous(kiln_graph *g, kiln_tensor x);

/* ---- movement views (no copies) ------------------------------------------ */
KILN_API kiln_tensor kiln_reshape(kiln_graph *g, kiln_tensor x, int ndim, const kiln_sym *shape);
KILN_API kiln_tensor kiln_reshape_str(kiln_graph *g, kiln_tensor x, const char *shape);
KILN_API kiln_tensor kiln_permute(kiln_graph *g, kiln_tensor x, const int *perm);   /* out axis i = in axis perm[i] */
KILN_API kiln_tensor kiln_transpose(kiln_graph *g, kiln_tensor x, int a, int b);     /* swap two axes */
/* broadcast size-1 axes to `shape` (same ndim) */
KILN_API kiln_tensor kiln_expand(kiln_graph *g, kiln_tensor x, int ndim, const kiln_sym *shape);
/* elements start, start+step, ... < stop along axis (step >= 1) */
KILN_API kiln_tensor kiln_slice(kiln_graph *g, kiln_tensor x, int axis, kiln_sym start, kiln_sym stop, int64_t step);
/* zeros added before and after along axis */
KILN_API kiln_tensor kiln_pad(kiln_graph *g, kiln_tensor x, int axis, kiln_sym before, kiln_sym after);
/* sliding windows of `size` elements (spaced `dilation`) every `stride` along
 * axis: axis n becomes two axes (windows, size), the window axis right after */
KILN_API kiln_tensor kiln_window(kiln_graph *g, kiln_tensor x, int axis, int64_t size, int64_t stride, int64_t dilation);
KILN_API kiln_tensor kiln_flip(kiln_graph *g, kiln_tensor x, int axis);
KILN_API kiln_tensor kiln_unsqueeze(kiln_graph *g, kiln_tensor x, int axis);  /* new size-1 axis */
KILN_API kiln_tensor kiln_squeeze(kiln_graph *g, kiln_tensor x, int axis);    /* drop a size-1 axis */

/* ---- tensor info --------------------------------------------------------- */
KILN_API int kiln_ndim(const kiln_graph *g, kiln_tensor x);
KILN_API kiln_sym kiln_dim(const kiln_graph *g, kiln_tensor x, int axis); /* negative axis counts from the end */
KILN_API kiln_dtype kiln_tensor_dtype(const kiln_graph *g, kiln_tensor x);
/* the graph's text form of a tensor's shape, e.g. "(seq, 64)" */
KILN_API char *kiln_shape_str(const kiln_graph *g, kiln_tensor x, char *buf, size_t cap);

/* ---- nn: functions built only from primitives (src/nn/) ------------------ */
KILN_API kiln_tensor kiln_neg(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_sub(kiln_graph *g, kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_div(kiln_graph *g, kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_exp(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_log(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_pow(kiln_graph *g, kiln_tensor x, kiln_tensor y);  /* x > 0, or integer y */
KILN_API kiln_tensor kiln_tanh(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_sigmoid(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_relu(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_gelu_tanh(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_gelu_erf(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_silu(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_softplus(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_abs(kiln_graph *g, kiln_tensor x);
KILN_API kiln_tensor kiln_maximum(kiln_graph *g, kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_minimum(kiln_graph *g, kiln_tensor a, kiln_tensor b);
/* cond != 0 ? a : b; exact for all finite and infinite values, but a NaN in
 * either branch propagates */
KILN_API kiln_tensor kiln_where(kiln_graph *g, kiln_tensor cond, kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_eq(kiln_graph *g, kiln_tensor a, kiln_tensor b);  /* 1 or 0 */
KILN_API kiln_tensor kiln_clamp(kiln_graph *g, kiln_tensor x, double lo, double hi);
KILN_API kiln_tensor kiln_mean(kiln_graph *g, kiln_tensor x, int axis);     /* axis removed */
KILN_API kiln_tensor kiln_var(kiln_graph *g, kiln_tensor x, int axis);      /* population variance, axis removed */
KILN_API kiln_tensor kiln_softmax(kiln_graph *g, kiln_tensor x, int axis);
KILN_API kiln_tensor kiln_log_softmax(kiln_graph *g, kiln_tensor x, int axis);
/* over the last axis; weight (n) may be KILN_NONE */
KILN_API kiln_tensor kiln_rmsnorm(kiln_graph *g, kiln_tensor x, kiln_tensor weight, double eps);
KILN_API kiln_tensor kiln_layernorm(kiln_graph *g, kiln_tensor x, kiln_tensor weight, kiln_tensor bias, double eps);
/* (..., m, k) x (..., k, n) -> (..., m, n), batch dims broadcast; a 1-D b is a vector */
KILN_API kiln_tensor kiln_matmul(kiln_graph *g, kiln_tensor a, kiln_tensor b);
/* x (..., in) with weight (out, in) as stored in GGUF, bias (out) or KILN_NONE */
KILN_API kiln_tensor kiln_linear(kiln_graph *g, kiln_tensor x, kiln_tensor weight, kiln_tensor bias);
/* table (vocab, dim) rows for ids (...): (..., dim); block-format tables are dequantised */
KILN_API kiln_tensor kiln_embedding(kiln_graph *g, kiln_tensor table, kiln_tensor ids);
typedef enum kiln_rope_mode { KILN_ROPE_INTERLEAVED = 0, KILN_ROPE_NEOX = 1 } kiln_rope_mode;
/* x (seq, heads, head_dim); position of row i is pos + i; rotary dims = head_dim,
 * which must be a constant even number; angles are computed in f32 */
KILN_API kiln_tensor kiln_rope(kiln_graph *g, kiln_tensor x, kiln_sym pos, double freq_base, kiln_rope_mode mode);
/* q (seq, hq, d), k and v (kv_len, hkv, d) with hq a multiple of hkv; query i
 * sits at position q_pos + i and key j at position j; causal; window > 0 keeps
 * keys with q_position - key_position < window; result (seq, hq, d) */
KILN_API kiln_tensor kiln_attention(kiln_graph *g, kiln_tensor q, kiln_tensor k, kiln_tensor v,
                           kiln_sym q_pos, double scale, int64_t window);
/* batched decoding, one query row per sequence: x (rows, heads, head_dim) with
 * row b at position pos[b] (pos: i32 (rows)); otherwise kiln_rope */
KILN_API kiln_tensor kiln_rope_rows(kiln_graph *g, kiln_tensor x, kiln_tensor pos, double freq_base, kiln_rope_mode mode);
/* q (rows, hq, d); k and v (slots, kv_len, hkv, d), the caches of every
 * sequence; row b attends to the keys 0 .. pos[b] of sequence slot[b] (slot,
 * pos: i32 (rows)); window as kiln_attention; result (rows, hq, d) */
KILN_API kiln_tensor kiln_attention_rows(kiln_graph *g, kiln_tensor q, kiln_tensor k, kiln_tensor v, kiln_tensor slot,
                                kiln_tensor pos, double scale, int64_t window);
/* the same result computed per slot (each slot's cache read in place, the
 * rows moved to their slots and back): every slot's attention is computed,
 * named by a row or not, so for a few slots; slots must be distinct */
KILN_API kiln_tensor kiln_attention_slots(kiln_graph *g, kiln_tensor q, kiln_tensor k, kiln_tensor v, kiln_tensor slot,
                                 kiln_tensor pos, double scale, int64_t window);
KILN_API kiln_tensor kiln_argmax(kiln_graph *g, kiln_tensor x, int axis);  /* i32, axis removed, first max */
KILN_API kiln_tensor kiln_cumsum(kiln_graph *g, kiln_tensor x, int axis);
KILN_API kiln_tensor kiln_concat(kiln_graph *g, kiln_tensor a, kiln_tensor b, int axis);
/* x (n, c_in, h, w), w (c_out, c_in, kh, kw), bias (c_out) or KILN_NONE */
KILN_API kiln_tensor kiln_conv2d(kiln_graph *g, kiln_tensor x, kiln_tensor w, kiln_tensor bias,
                        int stride, int padding, int dilation);

/* ---- outputs, bindings and the reference interpreter --------------------- */
KILN_API kiln_status kiln_output(kiln_graph *g, kiln_tensor x, const char *name);
KILN_API kiln_status kiln_bind_dim(kiln_graph *g, const char *name, int64_t value);
/* a caller-owned buffer for an input or state, dense row-major in its dtype;
 * it must stay valid until the run ends; bytes must match at run time */
KILN_API kiln_status kiln_bind_input(kiln_graph *g, const char *name, void *data, size_t bytes);
/* the same for an input whose contents stay unchanged while it is bound (a
 * model's weights): kiln may build and keep copies derived from it, such as
 * a repacked layout a tuned schedule reads. Any later bind of the name (of
 * either kind) drops them; to change the contents, bind it again. */
KILN_API kiln_status kiln_bind_weight(kiln_graph *g, const char *name, const void *data, size_t bytes);
/* The owner of weights bound with kiln_bind_weight may let kiln say when a
 * compiled program no longer reads a weight's bytes as a whole (every kernel
 * reading it reads a copy it made, e.g. the 8-row interleave of a decode
 * schedule, or gathers the rows its indices name, as a tied embedding
 * table): fn(ctx, data, bytes) is then called once per binding, with the
 * binding's own data and bytes, or, when the copy gives the weight back as
 * it is made, on consecutive parts of them, in order, that together are the
 * binding's bytes (each page-aligned at its end but the last). The hook may release the memory behind
 * them (give the pages back) but must keep them readable with the same
 * contents: a later search, the reference interpreter or a new schedule may
 * still read them (slowly). NULL fn: never called (the default). */
typedef void (*kiln_weight_release_fn)(void *ctx, const void *data, size_t bytes);
KILN_API kiln_status kiln_graph_on_weight_release(kiln_graph *g, kiln_weight_release_fn fn, void *ctx);
/* evaluate every output with the naive reference interpreter */
KILN_API kiln_status kiln_eval_reference(kiln_graph *g);
/* after a run: an output's concrete shape, and a copy of its dense data */
KILN_API kiln_status kiln_output_shape(const kiln_graph *g, const char *name, int *ndim, int64_t dims[KILN_MAX_DIMS]);
KILN_API kiln_status kiln_read_output(const kiln_graph *g, const char *name, void *dst, size_t bytes);

/* ---- the rewrite stage (e-graph) ---------------------------------------- */
/* graph -> e-graph -> equality saturation -> cheapest extraction: a new,
 * equivalent graph with the same inputs and outputs, carrying g's bindings.
 * NULL on error (message in g). Free it with kiln_graph_free. */
KILN_API kiln_graph *kiln_graph_optimize(kiln_graph *g);
/* the e-graph run on g as text (json = 0) or JSON: classes, nodes,
 * iterations, time, stop reason, firing counts per rule; malloc'd */
KILN_API char *kiln_graph_egraph_report(kiln_graph *g, int json);

/* ---- text forms ---------------------------------------------------------- */
/* the graph as readable text / as Graphviz DOT; returned string is malloc'd */
KILN_API char *kiln_graph_text(const kiln_graph *g);
KILN_API char *kiln_graph_dot(const kiln_graph *g);

#ifdef __cplusplus
}
#endif
#endif
