/* print_lx.h — the one loop-IR printer (print_lx.c) and the languages it
 * prints (dialect.c): C for the CPU, OpenCL C and CUDA C for GPUs.
 *
 * The printer walks the loop IR (src/sched/loop.h) the same way for every
 * language: values live in locals named after their lx id (t<id>), floats as
 * `float`, i32/u8 as a 64-bit integer holding an in-range value; a GUARD
 * opens an `if` so nothing below it runs at masked-out positions; a LET
 * declares its index variable in the enclosing block; fused stage j's result
 * is the local s<j>. A language is a row of data (cg_dialect): the names of
 * its types, constants and math functions, how it spells an index
 * expression, and the prologue every program starts with. What is not
 * spelling (a kernel's outer loops and ABI, the CPU's vector path) stays
 * with the emitter of that backend (emit_c.c, emit_gpu.c), which reaches the
 * printer through a cg_printer.
 *
 * Invariant: the text is a function of (program, dialect, schedule) only;
 * the runtimes cache compiled code by a hash of it, so a change of spelling
 * in a table is a change of every cache key of that language.
 */
#ifndef KILN_CODEGEN_PRINT_LX_H
#define KILN_CODEGEN_PRINT_LX_H

#include "../sched/loop.h"

typedef struct cg_dialect {
    const char *name;   /* "C", "OpenCL C", "CUDA C" */
    const char *header; /* the prologue's first part: includes, or the type and qualifier names */
    const char *helpers; /* its second: conversions and block-format loads every program may call */
    const sch_sym_spelling *sym; /* index expressions */
    const char *int_pre, *int_suf; /* around an integer constant's digits (either sign) */
    const char *i64, *u64;         /* a value's integer type, and the one its wrapping arithmetic uses */
    const char *i32, *u16, *u8;    /* storage types of i32, f16/bf16 and u8 elements */
    const char *wide, *wide_zero;  /* the float sum's accumulator type and its zero */
    const char *nan, *inf;         /* f32 NaN and +infinity */
    op_lang lang;       /* its column of ops.def's unary spellings */
    const char *exp2, *fmod; /* the f32 functions the printer and the stream emitter call themselves */
    const char *i32_min, *i32_max, *zero, *u8_max, *minus_one; /* int64 constants of clamps and sentinels */
    const char *err;    /* the local flag an out-of-range gather index sets */
    int stage_comments; /* a comment line naming the node before each fused stage */
} cg_dialect;

extern const cg_dialect cg_dialect_c, cg_dialect_opencl, cg_dialect_cuda;

/* one reduction for the printer: expr over rvar in [0, rdim) into the new
 * local res; stage: the row stage it computes (-1: an element stage or the
 * kernel's own reduction) */
typedef struct cg_reduction {
    op_kind op;
    sym_id rdim, rvar;
    int32_t expr;
    const char *res;
    int stage;
} cg_reduction;

typedef struct cg_printer cg_printer;
struct cg_printer {
    const sch_program *p;
    const cg_dialect *d;
    char *s; /* the text so far (malloc'd, grows) */
    size_t len, cap;
    /* optional: prints reduction r another way (the CPU's vector path) and
     * returns 1, or returns 0 and the printer prints the scalar loop */
    int (*reduce)(cg_printer *pr, const cg_reduction *r, int ind);
    void *owner; /* the emitter that set reduce */
};

void cg_printer_init(cg_printer *pr, const sch_program *p, const cg_dialect *d);
/* the header and helpers of pr's dialect */
void cg_print_prologue(cg_printer *pr);
void cg_print_indent(cg_printer *pr, int n);
void cg_print_sym(cg_printer *pr, sym_id s);
/* a constant of dtype t (an integer dtype: the integer; else f32) */
void cg_print_const(cg_printer *pr, kiln_dtype t, double v);
/* the statements computing lx tree id into the local t<id> */
void cg_print_lx(cg_printer *pr, int32_t id, int ind);
/* a reduction into a new local holding the value as stored-then-loaded
 * (float sums rounded once from the accumulator, integer sums wrapped) */
void cg_print_reduce(cg_printer *pr, const cg_reduction *r, int ind);
/* kernel k's fused stages that are per row (row 1) or per point (row 0) */
void cg_print_stages(cg_printer *pr, const sch_kernel *k, int row, int ind);
/* the body at one domain point: element stages, the value, its store to out[] */
void cg_print_point(cg_printer *pr, const sch_kernel *k, int ind);
/* the element type of a buffer of dtype t in memory */
const char *cg_storage_type(const cg_dialect *d, kiln_dtype t);
/* marks used[b] = 1 for every buffer the tree id loads */
void cg_lx_collect_bufs(const sch_program *p, int32_t id, uint8_t *used);

#endif
