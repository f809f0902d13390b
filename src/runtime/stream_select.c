/* stream_select.c — which attention form a compilation extracts from the
 * e-graph (exec.c asks once per compilation), and, for a program compiled
 * with both forms, which one each run uses.
 *
 * The streaming form (SOFTMAX_CONTRACT as one stream kernel, no probability
 * matrix stored, masked key blocks skipped) exists for the CPU backend only;
 * GPU emitters have no stream kernel. The option stream (kiln_compile_options,
 * KILN_STREAM) picks: 0 the materialised form, 1 the streaming one, 2 both:
 * the materialised program plus the streaming one as its alternative
 * (kiln_program.alt, rt_stream_compile_alt), and each kiln_run picks one by
 * the shape bucket of the run (rt_stream_pick). A stream the kernel layer
 * cannot take (stream.c's conditions) falls back to the primitive form inside
 * kiln_compile (rt_stream_kernelizes: a trial kernelize of the extracted
 * graph), so asking is always safe; with 2 and no stream kernel there is no
 * alternative.
 *
 * The pick is a cost model, not a measurement: streaming when the run's
 * longest stream has at least RT_STREAM_LONG keys (the score matrix of a long
 * prompt, and the keys a window lets a stream skip) or its rows are at most
 * RT_STREAM_FEW (decode: a few query rows over the whole cache); materialised
 * otherwise (short prompts, where two tuned contractions around a softmax
 * beat the stream kernel's key-at-a-time loop). Measured on the default
 * model's attention shapes (4 query heads, 1 kv head, head size 256; AMD
 * EPYC, 2 threads, loaded): prefill 512 materialised 1.5-3x faster, prefill
 * 2048 and 4000 streaming 1.3x and 2x faster, decode at depth 4000 streaming
 * 2.5x faster.
 */
#include "stream_select.h"

#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "loop.h"
#include "program.h"
#include "rewrite.h"

#define RT_STREAM_LONG 1024
#define RT_STREAM_FEW 16

static int is_cpu(const char *backend) { return !backend || strcmp(backend, "cpu") == 0; }

int rt_stream_extract_mode(const char *backend, int stream) {
    return is_cpu(backend) && stream == 1 ? EG_EXTRACT_STREAM : EG_EXTRACT_PRIMITIVES;
}

static int has_stream_kernel(const kiln_program *p) {
    for (int32_t k = 0; k < p->plan.sp.nkernels; k++)
        if (p->plan.sp.kernels[k].kind == SCH_K_STREAM) return 1;
    return 0;
}

kiln_program *rt_stream_compile_alt(kiln_graph *g, const kiln_compile_options *o, const char *backend) {
    if (o->stream != 2 || !is_cpu(backend) || o->profile) return NULL; /* a profile covers one program */
    kiln_status was = g->status;
    char err[sizeof g->error];
    memcpy(err, g->error, sizeof err);
    kiln_compile_options a = *o;
    a.stream = 1;
    kiln_program *alt = kiln_compile(g, &a, NULL);
    if (!alt || !has_stream_kernel(alt)) {
        kiln_program_free(alt);
        alt = NULL;
        g->status = was; /* no alternative: the materialised program stands alone */
        memcpy(g->error, err, sizeof err);
    }
    return alt;
}

int rt_stream_pick(kiln_program *alt, const kiln_graph *user) {
    kiln_graph *work = alt->plan.g;
    if (work != user) eg_copy_bindings(user, work);
    const sch_program *sp = &alt->plan.sp;
    uint32_t n = sym_var_count(work->syms);
    int64_t *values = kiln_xcalloc((size_t)n + 1, sizeof *values);
    uint8_t *bound = kiln_xcalloc((size_t)n + 1, 1);
    for (uint32_t v = 0; v < n && v < work->ndim_values; v++) {
        values[v] = work->dim_values[v];
        bound[v] = work->dim_bound[v];
    }
    int64_t keys = 0, rows = -1;
    int ok = 1;
    for (int32_t k = 0; k < sp->nkernels && ok; k++) {
        const sch_kernel *K = &sp->kernels[k];
        if (K->kind != SCH_K_STREAM) continue;
        int64_t r = 1, v = 0;
        for (int d = 0; d < K->ndim && ok; d++) {
            ok = sym_eval(work->syms, K->dim[d], values, bound, &v, NULL) == 0;
            if (d < K->ndim - 1) r *= v;
        }
        if (v > keys) keys = v;
        if (rows < 0 || r > rows) rows = r;
    }
    free(values);
    free(bound);
    return ok && rows >= 0 && (keys >= RT_STREAM_LONG || rows <= RT_STREAM_FEW);
}

int rt_stream_kernelizes(kiln_graph *g) {
    int any = 0;
    for (int32_t i = 0; i < g->nnodes && !any; i++) any = g->nodes[i].op == OP_SOFTMAX_CONTRACT;
    if (!any) return 1;
    sch_program sp;
    char err[256];
    kiln_status s = sch_kernelize(g, &sp, err, sizeof err);
    sch_program_free(&sp);
    return s != KILN_ERR_UNSUPPORTED;
}

char *kiln_program_forms(const kiln_program *p) {
    if (!p) return NULL;
    kiln_sb b = {0};
    int streams = has_stream_kernel(p);
    kiln_sb_puts(&b, "attention forms (src/runtime/stream_select.c):\n");
    if (p->alt) {
        kiln_sb_printf(&b,
                       "  short prompts (more than %d query rows over fewer than %d keys): materialised "
                       "(score and value contractions around a softmax kernel); runner-up: streaming\n"
                       "  decode (at most %d rows) and long prompts (at least %d keys): streaming "
                       "(SOFTMAX_CONTRACT stream kernels, masked key blocks skipped); runner-up: materialised\n"
                       "  chosen by the cost model's thresholds, not measured per run\n",
                       RT_STREAM_FEW, RT_STREAM_LONG, RT_STREAM_FEW, RT_STREAM_LONG);
        int n = 0;
        for (int32_t k = 0; k < p->alt->plan.sp.nkernels; k++) n += p->alt->plan.sp.kernels[k].kind == SCH_K_STREAM;
        kiln_sb_printf(&b, "  the streaming program: %d kernels, %d of them stream kernels\n",
                       (int)p->alt->plan.sp.nkernels, n);
    } else if (streams) {
        kiln_sb_puts(&b, "  every run: streaming (SOFTMAX_CONTRACT stream kernels; option stream 1)\n");
    } else {
        kiln_sb_puts(&b, "  every run: materialised (no streaming alternative: option stream 0, another "
                         "backend, or no softmax-times-values the stream kernel takes)\n");
    }
    return kiln_sb_take(&b);
}
