/* loop.h — kiln's loop IR: the kernels of a compiled graph as loop nests over
 * symbolic bounds, with scalar expression trees for the values they store.
 *
 * A program (sch_program) is a list of buffers and an ordered list of
 * kernels. Each MAP/REDUCE/SCATTER kernel is
 *
 *     for (i0 < dim0) ... for (i{n-1} < dim{n-1}):       -- the domain
 *         [acc = init; for (r < rdim): acc = acc (+|max) expr]   -- REDUCE
 *         out[store_off] = expr | acc
 *
 * where loop variables are sym variables bounded by their dims, so every
 * index (store offsets, view offsets of loads, validity predicates) is a sym
 * expression over loop variables and the graph's size variables. Expressions
 * (lx) form a tree per kernel: constants, loads (through an offset
 * expression), index values (IOTA), unary/binary ops, casts, guards
 * (GUARD: the operand is only evaluated where the validity expression holds,
 * else the value is 0 — so a masked view never loads out of bounds) and lets
 * (LET: an integer value read at run time, range-checked against a bound,
 * that later index expressions use as a variable — GATHER and SCATTER).
 *
 * Invariants: lx ids are indices into prog->lx, operands always have smaller
 * ids than their users; every lx in a kernel tree is used exactly once (a
 * tree, not a DAG), so the emitter may evaluate each in place. Values of
 * block-format dtype are dequantised floats; only CAST reads them.
 *
 * Fused reductions (stages): a reduction that kernelize did not give a buffer
 * is computed inside the kernel that consumes it, as a stage: its own reduce
 * loop (own reduce variable, own expression tree) whose scalar result the
 * kernel's trees read through LX_STAGE leaves. A stage is keyed by (node,
 * coordinates), so every read of the same reduction value in one kernel
 * shares one computation. A stage's coordinates only use the kernel's loop
 * variables; a "row" stage does not depend on the last loop variable and is
 * evaluated once per outer row, before the innermost loop (softmax: max and
 * sum per row, then the scaled exponentials — the row stays in cache, so the
 * input is read from memory once); an "element" stage is evaluated per
 * domain point. Stages are listed in evaluation order (a stage may read
 * earlier ones). kernelize only keeps stages that are evaluated exactly as
 * many times as the reduction has elements, so fusing never repeats work,
 * and none that are read only under a GUARD (a stage is computed
 * unconditionally, so its coordinates must always be in range).
 */
#ifndef KILN_SCHED_LOOP_H
#define KILN_SCHED_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "graph.h"

/* the loop IR's version: part of every hardware fingerprint and tuning
 * record, so that schedules recorded for an older IR (or an older schedule
 * space: 2 added the packed form, prefetch and int8; 3 the packed int8
 * form and AMX tiles, and m chosen as the symbolic A-only loop; 4 the
 * packed f32 strip prefetch, decode prefetch 32 and decode candidates timed
 * with B flushed from 64 KiB up; 5 the integer-scale q4_k and two-block
 * q8_0/q4_0/q5_0 decode tiles, whose best tile widths differ) are not used
 * as they are, only as seeds */
#define KILN_IR_VERSION 5

typedef enum sch_buf_kind {
    SCH_BUF_INPUT = 0, /* the caller's buffer of an input (read only) */
    SCH_BUF_STATE,     /* the caller's buffer of a state tensor (read, written in place) */
    SCH_BUF_NODE,      /* an intermediate in the arena */
    SCH_BUF_RESULT,    /* an output's dense result (handed to the graph) */
    SCH_BUF_TEMP       /* f32 staging of a value quantised into a block format */
} sch_buf_kind;

typedef struct sch_buf {
    sch_buf_kind kind;
    kiln_dtype dtype;
    sym_id numel;   /* elements */
    int32_t node;   /* the node whose value it holds (-1 for none) */
    int32_t output; /* RESULT: index into g->outputs */
} sch_buf;

typedef enum lx_kind {
    LX_CONST = 0, /* value (already rounded to dtype) */
    LX_LOAD,      /* buf[s] */
    LX_INDEX,     /* the integer value of sym s, converted to dtype */
    LX_UNARY,     /* op(a) */
    LX_BINARY,    /* op(a, b) */
    LX_CAST,      /* a converted to dtype */
    LX_GUARD,     /* s ? a : 0 (a evaluated only when s holds) */
    LX_LET,       /* var s := integer value of a, 0 <= s < s2 (else a range error); then b */
    LX_STAGE      /* the value of stage `stage` of the enclosing kernel (a leaf) */
} lx_kind;

typedef struct lx {
    lx_kind kind;
    kiln_dtype dtype; /* dtype of the value */
    op_kind op;
    int32_t a, b;
    sym_id s, s2;
    int32_t buf;
    int32_t stage;
    int32_t node;     /* the graph node whose value this tree computes (-1: none) */
    double value;
} lx;

/* a reduction fused into its consumer kernel (see the top of this file) */
typedef struct sch_stage {
    int32_t node;       /* the SUM/MAX node it computes */
    op_kind red_op;
    kiln_dtype dtype;   /* of the value (the node's dtype) */
    sym_id rdim, rvar;
    int32_t expr;       /* the reduced value at reduce position rvar */
    int ncoord;
    sym_id coord[KILN_MAX_DIMS]; /* the node coordinates it is computed at */
    int row;            /* 1: once per outer row; 0: per domain point */
    int guarded;        /* only read under a GUARD: its coordinates may be out of range */
} sch_stage;

typedef enum sch_kernel_kind {
    SCH_K_MAP = 0, /* out[row-major domain index] = expr */
    SCH_K_REDUCE,  /* out[row-major domain index] = reduce over r of expr */
    SCH_K_SCATTER, /* domain = values shape; expr is LET(row, ...); out[store_off] = value; serial */
    SCH_K_QUANTIZE, /* host step: out (block dtype) = quantise(src_buf, f32) */
    SCH_K_COPY,    /* host step: out = src_buf, bytes */
    SCH_K_STREAM   /* SOFTMAX_CONTRACT streamed along the last domain axis (stream.c): expr is
                      BINARY(SOFTMAX_CONTRACT, logits, values), rvar/rdim the value axis */
} sch_kernel_kind;

/* the largest value axis (attention's head size) a stream kernel keeps in registers/stack */
#define SCH_STREAM_MAX_N 1024

/* A contraction schedule (the CPU micro-kernel family, see contract.h):
 * register tile mr x nr (rows of A x rows of B), B rows per work item nc (the
 * thread split; 0 = chosen at run time from N and the thread count), A rows
 * per cache block mc, and the arithmetic. */
typedef enum sch_arith {
    SCH_ARITH_F32 = 0, /* dequantise B to f32, multiply-add in f32 */
    SCH_ARITH_I8,      /* quantise A rows to int8 per 32, integer dot products (an approximation) */
    SCH_ARITH_BF16     /* A and dequantised B rounded to bf16, f32 sums (an approximation; AMX and packed forms) */
} sch_arith;

typedef enum sch_form {
    SCH_FORM_DOT = 0, /* mr x nr dot products along K (emit_contract.c): B read in place */
    SCH_FORM_PACKED,  /* B panels dequantised into a packed [k][n] buffer, outer products
                         of broadcast A with 16-lane rows of B (emit_gemm.c) */
    SCH_FORM_AMX      /* Intel AMX tiles: int8 (B packed as in the packed form, 16x16
                         int32 tiles of tdpbssd, rescaled per block: emit_gemm_amx.c) or
                         bf16 (16x16 f32 tiles of tdpbf16ps: emit_gemm_amx_bf16.c) */
} sch_form;

typedef struct sch_contract_sched {
    int mr, nr, nc, mc;
    sch_arith arith;
    sch_form form;
    int kc; /* PACKED: K per packed panel (0: all of K) */
    int pf; /* software prefetch of B this many 32-element chunks ahead (0: none) */
    int direct; /* PACKED, f32 B strided along K only: the micro-kernel reads B's rows in
                   place (a partial last strip is still copied); 0: B packed into strips.
                   For decode, where each strip is used by one row of A (last, so
                   positional initialisers written before it leave it 0) */
    int serial; /* the whole kernel on the calling thread (1), whatever the pool's size: for
                   small products whose split costs more than it saves (the wake-up and
                   barrier, and operands just written by the other core); 0: items over the
                   pool. Last, as direct */
    int rp;     /* DOT, int8, q4_0 / q5_0 B, nr = 8, mr = 1: the tiles read B from a copy
                   repacked once (8 rows interleaved per block, see sched/repack_layout.h), which
                   the runtime builds for a weight bound with kiln_bind_weight; strips the
                   copy does not cover (another binding, a partial last strip) read B as it
                   is. Last, as serial */
    int pf2;    /* rp tiles only: B's lines also prefetched into L2 this many 32-element
                   chunks ahead (0: none; else past pf), the far level of a two-level
                   prefetch (emit_contract_i8.c). Last, as rp */
} sch_contract_sched;

/* A REDUCE kernel that is a contraction: out[..., m, ..., n, ...] = sum over r
 * of A[a_base + r] * B[b_base + r] (or B[b_base + r * b_kstride], see
 * below), A an f32 buffer, B a buffer of any float or block dtype, where
 * a_base depends on the m loop variable but not on n, and b_base on n but
 * not on m (every other loop variable is a batch loop).
 * Set by kernelize (contract.c); only the CPU backend uses it: other
 * backends emit the kernel's generic expression. */
#define SCH_SMALL_M 4 /* sched[0] serves M <= SCH_SMALL_M (decode), sched[1] larger M */
/* ... and up to this many rows where sched[0] is the int8 tiles on B's
 * repacked copy (dot-i8-rp) and the launch asks (CG_KF_DECODE_ROWS,
 * src/runtime/cpu_run.c): a short prompt's rows take the decode tiles, each
 * weight group read once for all of them, not the prefill bucket's pack and
 * tile machinery (gemma3-270m, Intel Xeon with AMX, 2 threads: 5 rows took
 * 27 ms a pass against 11 ms at 4; with the decode tiles pp24 845 t/s
 * against 705, equal at 32 rows, behind at 48: docs/ARCHITECTURE.md) */
#define SCH_DECODE_TILE_ROWS 24
typedef struct sch_contract {
    int32_t a_buf, b_buf;
    sym_id a_base, b_base; /* the operands' offsets at r = 0 */
    sym_id b_kstride;      /* SYM_NONE: B[b_base + r] (contiguous along r); else B is f32,
                              B[b_base + r * b_kstride] and contiguous along n (b_base at
                              n + 1 is b_base + 1): only the packed form takes it */
    int mdim, ndim;        /* domain positions of m (-1: none, M = 1) and n */
    sch_contract_sched sched[2];
    int b_computed;        /* B is not a caller's input (an intermediate, or a state such as
                              the KV cache): search.h b_activation */
    sym_id n_lim_off;      /* SYM_NONE, or: the consumers multiply output (m, n) by zero where
                              n >= m + n_lim_off (attention's causal mask), so a kernel may
                              store 0 there instead of the sum (demand.c) */
    char key[32];          /* tuning key: hash of the kernel's shape-free structure */
} sch_contract;

/* The schedule of a generic (MAP / REDUCE) kernel: the knobs of the vector
 * paths of emit_c.c and of the runtime's work split. Every field's 0 is the
 * fixed behaviour kiln had before the search existed, so a zeroed kernel
 * (what kernelize makes) is emitted exactly as before.
 *   vec:    lanes of the vector paths: 0 = the ISA's width, 1 = scalar (the
 *           reference-exact path for the whole kernel), 8 = 256-bit, 16 =
 *           512-bit (capped by the ISA: 16 on an AVX2 machine emits 8)
 *   nacc:   vectors in flight per step of a vectorised reduction, each with
 *           its own accumulator(s) (a SUM keeps two double vectors per
 *           slot): 0 = the default (SUM 2, MAX 4), else 1, 2, 4 or 8
 *   unroll: vectors stored per step of a vectorised MAP row: 0 = 1, 2 or 4
 *   chunk:  elements of the last loop per work item (the thread split):
 *           0 = the runtime's heuristic (exec.c), else that many
 *   serial: 1 = the kernel runs on the calling thread alone even on a pool
 *           (a kernel whose fork and join cost more than its second
 *           thread saves); 0 = split as the runtime does
 * Text form (sch_generic_sched_print/parse, space_generic.c):
 * "vec=V nacc=A unroll=U chunk=C", then " serial=1" when set. Searched by
 * src/runtime/tune_generic.c. */
typedef struct sch_generic_sched {
    int vec, nacc, unroll;
    int64_t chunk;
    int serial;
} sch_generic_sched;

typedef struct sch_kernel {
    sch_kernel_kind kind;
    int32_t root;    /* the node it computes (-1 for output copies) */
    int32_t out_buf;
    int32_t src_buf; /* QUANTIZE, COPY */
    int ndim;
    sym_id dim[KILN_MAX_DIMS];
    sym_id var[KILN_MAX_DIMS];
    op_kind red_op; /* REDUCE: OP_SUM or OP_MAX */
    sym_id rdim, rvar;
    int32_t expr;
    sym_id store_off;
    int32_t *fused; /* nodes computed inside this kernel (for explain) */
    int32_t nfused, cap_fused;
    sch_stage *stages; /* fused reductions, in evaluation order */
    int32_t nstages, cap_stages;
    sch_contract *contract; /* REDUCE only: non-NULL when it is a contraction */
    sch_generic_sched gsched; /* MAP/REDUCE emitted generically: all zero = the default */
    int disjoint;             /* SCATTER: every domain point writes its own element, so it may
                                 run in parallel (scatter.c) */
    double stream_c;          /* STREAM: the softmax's scale c (exp2((x - max) c)) */
    int pack;                 /* MAP: writes an operand of the contraction kernel after it densely
                                 (pack.c); root is that contraction's */
    int32_t epilogue;         /* contraction: the kernel (k + 1) that reads only the block each of
                                 this kernel's work items wrote, run inside the item where the
                                 contraction's code is emitted (epilogue.c); 0: none */
    int in_host;              /* 1: this kernel is kernels[k - 1]'s epilogue (see epilogue) */
    int prologue;             /* contraction: 1 when kernels[k - 1], the pack of its B (pack.c), is run
                                 inside its work items, each packing the columns it reads
                                 (epilogue.c) */
    int in_next;              /* 1: this kernel is kernels[k + 1]'s prologue */
} sch_kernel;

/* how the emitter names a variable of the sym pool inside a kernel */
typedef enum sch_var_role { SCH_VAR_LOOP = 0, SCH_VAR_REDUCE, SCH_VAR_LET } sch_var_role;
typedef struct sch_var {
    uint32_t var; /* variable number in the graph's sym pool */
    sch_var_role role;
    int index;    /* LOOP: depth; LET: program-wide number; REDUCE: 0 for a kernel's
                     own reduction, a program-wide number >= 1 for a stage's */
} sch_var;

typedef struct sch_program {
    kiln_graph *g;
    int no_stream_tile; /* sch_options.no_stream_tile: contract.c gives every stream kernel's dot product a kernel */
    int stream_bf16;    /* sch_options.stream_bf16: SCH_STREAM_BF16_* (emit_stream_tile.c) */
    sch_buf *bufs;
    int32_t nbufs, cap_bufs;
    sch_kernel *kernels;
    int32_t nkernels, cap_kernels;
    lx *lx;
    int32_t nlx, cap_lx;
    sch_var *vars;
    int32_t nvars, cap_vars;
    int32_t *node_buf; /* per node: its buffer, or -1 when computed inline */
    int32_t nlets;
    int32_t nstage_vars;
    int guard_depth;   /* while building: how many GUARDs enclose the tree being built */
    unsigned tag;      /* makes this program's variable names unique in the pool */
    /* state write-back: state input node -> buffer holding its final value */
    int32_t *state_final; /* per node (only INPUT state nodes meaningful), -1 none */
} sch_program;

/* ---- building (loop.c) ---- */
int32_t lx_new(sch_program *p, lx_kind k, kiln_dtype dt);
int32_t lx_const(sch_program *p, kiln_dtype dt, double v); /* rounds v to dt */
/* a fresh loop / reduce / let variable bounded by `bound` */
sym_id sch_new_var(sch_program *p, sch_var_role role, int index, sym_id bound);
/* the value of tensor t at coordinates idx (its view's outer shape) */
int32_t lx_tensor(sch_program *p, sch_kernel *k, kiln_tensor t, const sym_id *idx);
/* the value of node n at coordinates c of its own shape */
int32_t lx_node(sch_program *p, sch_kernel *k, int32_t n, const sym_id *c);
/* the C name of a reduce variable ("r" or "r<n>") */
void sch_rvar_name(const sch_program *p, sym_id rvar, char *buf, size_t cap);
/* row-major linear index of coordinates c in shape */
sym_id sch_rowmajor(sym_pool *sp, int ndim, const sym_id *shape, const sym_id *c);
const sch_var *sch_var_lookup(const sch_program *p, uint32_t var);

/* ---- text (loop.c) ---- */
/* How a language spells an index expression (int64 arithmetic, floor
 * division): C here, OpenCL C and CUDA C in src/codegen/dialect.c, plain text
 * for the kernel listings. A constant c is int_pre c int_suf (c >= 0) or
 * neg_pre c neg_suf (c < 0), INT64_MIN is int_min when given; a comparison
 * (LT, AND) is cmp_pre(a < b); floor_fns: kfdiv/kfmod where / and % would not
 * floor; var_names: unbound variables by name, else as v[<number>]. */
typedef struct sch_sym_spelling {
    const char *int_pre, *int_suf, *neg_pre, *neg_suf, *int_min, *cmp_pre;
    int floor_fns, var_names;
} sch_sym_spelling;
extern const sch_sym_spelling sch_sym_c;
/* print a sym expression as C (sch_sym_c) or in another spelling */
void sch_print_sym(const sch_program *p, sym_id s, char **buf, size_t *len, size_t *cap);
void sch_print_sym_as(const sch_program *p, sym_id s, const sch_sym_spelling *sp, char **buf, size_t *len,
                      size_t *cap);
/* 1 when tree id loads buffer b */
int sch_lx_reads(const sch_program *p, int32_t id, int32_t b);
/* 1 when kernel K reads buffer b: a load in its tree or stages, a
 * contraction's operand, a host step's source */
int sch_kernel_reads(const sch_program *p, const sch_kernel *K, int32_t b);
/* one kernel as readable text, appended to the growable string */
void sch_kernel_print(const sch_program *p, int32_t k, char **buf, size_t *len, size_t *cap);
/* printf into a growable string */
void sch_appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- kernelize (kernelize.c) ---- */
/* what kernelize may do; all 0 is the normal behaviour (the fields of
 * kiln_compile_options of the same names) */
typedef struct sch_options {
    int no_fuse;     /* every reduction in a kernel of its own (to compare) */
    int no_contract; /* no contraction recognition: generic reductions only */
    int no_split;    /* no splitting of MAP kernels at guard boundaries */
    int no_stream_tile; /* stream kernels keep the one-row form (their scores a kernel of their own) */
    int stream_bf16;    /* stream tiles' products on vdpbf16ps (approximate; the caller checked the CPU has
                           avx512_bf16): 0 never (SCH_STREAM_BF16_NONE), SCH_STREAM_BF16_ONLY always,
                           SCH_STREAM_BF16_BOTH both bodies, each launch's flags picking (CG_KF_BF16) */
    int no_epilogue;    /* no kernel runs as a contraction's epilogue (epilogue.c) */
} sch_options;
enum { SCH_STREAM_BF16_NONE, SCH_STREAM_BF16_ONLY, SCH_STREAM_BF16_BOTH };
/* cut g into kernels. Returns KILN_OK or an error with a message in err.
 * sch_kernelize is sch_kernelize_ex with every option 0 (o may be NULL). */
kiln_status sch_kernelize(kiln_graph *g, sch_program *out, char *err, size_t errcap);
kiln_status sch_kernelize_ex(kiln_graph *g, sch_program *out, const sch_options *o, char *err, size_t errcap);
/* split MAP kernels at the constant points where guards on their last loop
 * variable switch (split.c; sch_kernelize calls it unless no_split); returns
 * how many were split. */
int sch_split_guards(sch_program *p);
/* mark the elementwise kernels that can run as their contraction's
 * epilogue (sch_kernel.epilogue / in_host) and the packs that can run as
 * its prologue (prologue / in_next; epilogue.c); returns how many */
int sch_mark_epilogues(sch_program *p);

/* 1 when SCATTER kernel k provably writes a distinct element at every point
 * of its domain (scatter.c; sch_kernelize sets k->disjoint from it) */
int sch_scatter_disjoint(const sch_program *p, const sch_kernel *k);
/* the streaming kernel of SOFTMAX_CONTRACT node n into out_buf (stream.c);
 * KILN_ERR_UNSUPPORTED with a reason in err when the node has no such form */
kiln_status sch_stream_kernel(sch_program *p, int32_t n, int32_t out_buf, char *err, size_t cap);
/* marks in force[] what stream kernels' fused stages would recompute at every
 * stream position (operands that do not depend on it); returns how many
 * nodes it newly marked (kernelize rebuilds while this is not 0) */
int sch_stream_analyse(sch_program *p, uint8_t *force);
void sch_program_free(sch_program *p);

#endif
