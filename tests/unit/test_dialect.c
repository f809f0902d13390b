/* test_dialect.c — the one loop-IR printer (src/codegen/print_lx.c) and its
 * language tables (src/codegen/dialect.c).
 *
 * A graph that makes every kind of loop-IR node (constants, loads of f32 and
 * block formats, iota indices, all unary and binary ops in float and
 * integer, casts to every storage dtype, guards from a pad, a gather's LET,
 * fused stages, SUM and MAX reductions) is kernelized and every kernel body
 * printed in C, OpenCL C and CUDA C. What is checked:
 *   - every row of the table fills every spelling (a new dialect that forgets
 *     one fails here, not in a device compiler);
 *   - each language's text carries none of the other's spellings, so no name
 *     is written into the printer instead of read from the table;
 *   - OpenCL C and CUDA C bodies are the same text (emit_gpu.h's contract:
 *     the dialects differ only in their headers);
 *   - the C text is what the C emitter's scalar path compiles: the whole
 *     program's source (cg_emit_c) contains each kernel's body verbatim.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "emit_c.h"
#include "kiln.h"
#include "print_lx.h"

static const cg_dialect *const dialects[3] = {&cg_dialect_c, &cg_dialect_opencl, &cg_dialect_cuda};

static int row_complete(const cg_dialect *d, char *why, size_t cap) {
    const char *f[] = {d->name,      d->header,    d->helpers, d->int_pre, d->int_suf, d->i64,       d->u64,
                       d->i32,       d->u16,       d->u8,      d->wide,    d->wide_zero, d->nan,     d->inf,
                       d->exp2,      d->fmod,      d->i32_min, d->i32_max, d->zero,    d->u8_max,    d->minus_one,
                       d->err};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!f[i] || (i >= 5 && !f[i][0])) {
            snprintf(why, cap, "%s: field %zu is empty", d->name ? d->name : "?", i);
            return 0;
        }
    /* every unary op of ops.def is spelt in the dialect's language: one operand */
    for (int op = 0; op < OP_COUNT; op++) {
        if (!(op_table[op].flags & OPF_UNARY)) continue;
        const char *fmt = (int)d->lang >= 0 && d->lang < OP_LANG_COUNT ? op_unary[op].spell[d->lang] : NULL;
        const char *at = fmt ? strstr(fmt, "%s") : NULL;
        if (!at || strstr(at + 2, "%") || !op_unary[op].f32 || !op_unary[op].f64) {
            snprintf(why, cap, "%s: unary op %s has no spelling of one operand", d->name, op_table[op].name);
            return 0;
        }
    }
    const sch_sym_spelling *s = d->sym;
    if (!s || !s->int_pre || !s->int_suf || !s->neg_pre || !s->neg_suf || !s->cmp_pre || !s->floor_fns) {
        snprintf(why, cap, "%s: index spelling incomplete", d->name);
        return 0;
    }
    return 1;
}

/* every kernel's point body (stages per row, then per point) in dialect d */
static char *bodies(const sch_program *p, const cg_dialect *d) {
    cg_printer pr;
    cg_printer_init(&pr, p, d);
    for (int32_t k = 0; k < p->nkernels; k++) {
        const sch_kernel *K = &p->kernels[k];
        if (K->kind != SCH_K_MAP && K->kind != SCH_K_REDUCE && K->kind != SCH_K_SCATTER) continue;
        cg_print_stages(&pr, K, 1, 4);
        cg_print_point(&pr, K, 4);
    }
    return pr.s;
}

/* the first of the words that occurs in text, or NULL */
static const char *any_of(const char *text, const char *const *words, int n) {
    for (int i = 0; i < n; i++)
        if (strstr(text, words[i])) return words[i];
    return NULL;
}

static kiln_graph *every_node_graph(void) {
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "n, 8");
    kiln_tensor w = kiln_input(g, "w", KILN_Q8_0, "16, 32");
    kiln_tensor ids = kiln_input(g, "ids", KILN_I32, "n");
    kiln_tensor h = kiln_input(g, "h", KILN_F16, "n, 8");
    /* unary and binary float ops, a constant, an f16 load and a cast back to f16 */
    kiln_tensor u = kiln_add(g, kiln_exp2(g, x), kiln_log2(g, kiln_sqrt(g, kiln_recip(g, x))));
    u = kiln_mul(g, kiln_sin(g, u), kiln_mod(g, x, kiln_const(g, 3.0, KILN_F32)));
    u = kiln_add(g, u, kiln_lt(g, x, kiln_cast(g, h, KILN_F32)));
    kiln_output(g, kiln_cast(g, u, KILN_F16), "f16");
    kiln_output(g, kiln_cast(g, u, KILN_BF16), "bf16");
    /* integers: an iota index, wrapping add and mul, mod, casts to i32 and u8 */
    kiln_sym shape[2] = {kiln_sym_var(g, "n"), kiln_sym_int(g, 8)};
    kiln_tensor io = kiln_iota(g, KILN_I32, 2, shape, 1);
    kiln_tensor iv = kiln_mul(g, kiln_add(g, io, kiln_cast(g, x, KILN_I32)), kiln_const(g, 7, KILN_I32));
    iv = kiln_mod(g, iv, kiln_const(g, 5, KILN_I32));
    kiln_output(g, kiln_cast(g, iv, KILN_U8), "u8");
    kiln_output(g, kiln_lt(g, iv, io), "i32");
    /* a gather of dequantised rows (LET), a pad (GUARD), reductions */
    kiln_tensor rows = kiln_gather(g, kiln_cast(g, w, KILN_F32), ids);
    kiln_output(g, kiln_sum(g, rows, 1), "gsum");
    kiln_output(g, kiln_max(g, kiln_pad(g, x, 1, kiln_sym_int(g, 1), kiln_sym_int(g, 2)), 1), "pmax");
    kiln_output(g, kiln_sum(g, iv, 1), "isum");
    /* softmax: fused row stages */
    kiln_output(g, kiln_softmax(g, x, 1), "softmax");
    return g;
}

int main(void) {
    char why[256];
    CASE_BEGIN("dialect_rows_complete");
    for (int d = 0; d < 3; d++) CHECK(row_complete(dialects[d], why, sizeof why), "%s", why);
    CHECK(strcmp(cg_dialect_opencl.helpers, cg_dialect_cuda.helpers) == 0, "the GPU helpers differ");
    CASE_END();

    kiln_graph *g = every_node_graph();
    sch_program p;
    char err[512] = "";
    kiln_status st = sch_kernelize(g, &p, err, sizeof err);
    CASE_BEGIN("every_node_kind_made");
    CHECK(st == KILN_OK, "%s", err);
    if (st == KILN_OK) {
        int seen[LX_STAGE + 1] = {0};
        for (int32_t i = 0; i < p.nlx; i++) seen[p.lx[i].kind] = 1;
        for (int k = 0; k <= LX_STAGE; k++) CHECK(seen[k], "no lx of kind %d", k);
    }
    CASE_END();
    if (st != KILN_OK) {
        kiln_graph_free(g);
        return check_exit();
    }

    char *c = bodies(&p, &cg_dialect_c), *ocl = bodies(&p, &cg_dialect_opencl), *cu = bodies(&p, &cg_dialect_cuda);
    CASE_BEGIN("each_language_its_own_spellings");
    {
        static const char *const c_only[] = {"int64_t", "uint64_t", "LL", "exp2f", "log2f", "sinf", "sqrtf",
                                             "fmodf", "double", "INFINITY", "kerr", "int32_t", "uint8_t"};
        static const char *const gpu_only[] = {"i64", "u64", "kacc", "KEXP2", "KLOG2", "KSIN", "KSQRT",
                                               "KFMOD", "KINF", "KNAN", "kbad", "(i32)", "(u8)"};
        const char *bad = any_of(ocl, c_only, (int)(sizeof c_only / sizeof c_only[0]));
        CHECK(bad == NULL, "OpenCL C text has the C spelling '%s'", bad);
        bad = any_of(c, gpu_only, (int)(sizeof gpu_only / sizeof gpu_only[0]));
        CHECK(bad == NULL, "C text has the GPU spelling '%s'", bad);
        /* and each has its own: the walk reached the table's names */
        static const char *const c_has[] = {"int64_t", "LL", "exp2f", "double", "kerr", "kdq_q8_0", "kd16", "kw32"};
        static const char *const gpu_has[] = {"i64", "((i64)", "KEXP2", "kacc", "kbad", "kdq_q8_0", "kd16", "kw32"};
        for (size_t i = 0; i < sizeof c_has / sizeof c_has[0]; i++)
            CHECK(strstr(c, c_has[i]) != NULL, "C text lacks '%s'", c_has[i]);
        for (size_t i = 0; i < sizeof gpu_has / sizeof gpu_has[0]; i++)
            CHECK(strstr(ocl, gpu_has[i]) != NULL, "OpenCL C text lacks '%s'", gpu_has[i]);
    }
    CASE_END();

    CASE_BEGIN("opencl_and_cuda_bodies_identical");
    CHECK(ocl && cu && strcmp(ocl, cu) == 0, "the two GPU dialects print different bodies");
    CASE_END();

    CASE_BEGIN("c_emitter_uses_the_printer");
    {
        cg_options o = {0};
        o.isa = CG_ISA_SCALAR;
        char *src = cg_emit_c(&p, &o);
        CHECK(src && strncmp(src, cg_dialect_c.header, strlen(cg_dialect_c.header)) == 0, "no C header first");
        CHECK(src && strstr(src, cg_dialect_c.helpers) != NULL, "no C helpers");
        /* each kernel's point body, as printed above, is in the program */
        for (int32_t k = 0; src && k < p.nkernels; k++) {
            const sch_kernel *K = &p.kernels[k];
            if (K->kind != SCH_K_MAP && K->kind != SCH_K_REDUCE) continue;
            cg_printer pr;
            cg_printer_init(&pr, &p, &cg_dialect_c);
            cg_print_point(&pr, K, 6);
            CHECK(pr.s && strstr(src, pr.s) != NULL, "kernel %d's body is not in the C program", (int)k);
            free(pr.s);
        }
        free(src);
    }
    CASE_END();

    free(c);
    free(ocl);
    free(cu);
    sch_program_free(&p);
    kiln_graph_free(g);
    return check_exit();
}
