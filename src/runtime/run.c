/* run.c — the one executor: kiln_run binds, sizes and runs a compiled plan
 * on any backend, through the program-level members of rt_backend.
 *
 * A run, in order: the caller's conditions; the symbolic values under the
 * bindings; every buffer's size; the caller's inputs and states bound (found
 * by name, checked for size and NULL, then handed to the backend's bind:
 * in place on host memory, uploaded on a device); the arena of
 * intermediates placed by liveness (again only when a buffer outgrew its
 * place: sizes are rounded up to an eighth of their next power of two, so
 * decode's growing attention buffers do not re-plan every token); the
 * result buffers (the previous run's are taken over when their size
 * matches); the kernels in order (COPY and QUANTIZE as host steps, the rest
 * through the backend's run_kernel); sync, and the kernel error flags a
 * device reports; results and states fetched back (nothing to do on host
 * memory).
 *
 * Invariants: results are handed to the graph (g->results, terminated by
 * ndim -1, as the reference interpreter leaves them) only after every
 * kernel succeeded. On host memory state updated in place before a failing
 * kernel stays updated; on a device states are written back only on success.
 * Errors go to the graph with graph_run_error; a hook that reported its own
 * (err left empty) is not worded twice.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "dtype.h"
#include "program.h"
#include "stream_select.h"
#include "quant.h"
#include "rewrite.h"
#include "view.h"

/* sym_eval under the run's values and bound mask; the message (which
 * names `what`) goes to the graph only when a symbol is unbound */
kiln_status rt_run_eval(kiln_program *p, sym_id s, int64_t *out, const char *what) {
    uint32_t missing = 0;
    kiln_graph *g = p->plan.g;
    if (sym_eval(g->syms, s, p->run.values, p->run.bound, out, &missing) == 0) return KILN_OK;
    const char *nm = sym_var_name(g->syms, missing);
    graph_run_error(g, KILN_ERR_UNBOUND, "kiln_run: unbound symbol '%s' (needed by %s)", nm ? nm : "?", what);
    return KILN_ERR_UNBOUND;
}

/* a hook's failure: worded here ("kiln_run: " prefix err) unless the hook
 * already told the graph (err empty) */
static kiln_status hook_failed(kiln_program *p, kiln_status s, const char *err, const char *prefix) {
    if (s != KILN_OK && err[0]) graph_run_error(p->plan.g, s, "kiln_run: %s%s", prefix, err);
    return s;
}

static void load_values(kiln_program *p) {
    kiln_graph *g = p->plan.g;
    rt_run *r = &p->run;
    uint32_t n = sym_var_count(g->syms);
    if (n > r->nvalues || !r->values) {
        r->values = kiln_xrealloc(r->values, ((size_t)n + 1) * sizeof *r->values);
        r->bound = kiln_xrealloc(r->bound, (size_t)n + 1);
        r->nvalues = n;
    }
    for (uint32_t v = 0; v < n; v++) {
        r->values[v] = v < g->ndim_values ? g->dim_values[v] : 0;
        r->bound[v] = v < g->ndim_values ? g->dim_bound[v] : 0;
    }
}

/* every buffer's bytes under this run's values */
static kiln_status size_buffers(kiln_program *p) {
    const sch_program *sp = &p->plan.sp;
    kiln_graph *g = p->plan.g;
    for (int32_t b = 0; b < sp->nbufs; b++) {
        const sch_buf *B = &sp->bufs[b];
        int64_t numel = 0;
        if (sym_eval(g->syms, B->numel, p->run.values, p->run.bound, &numel, NULL) != 0) {
            /* the message only when it is needed: this loop runs for every buffer of every run */
            char what[64];
            snprintf(what, sizeof what, "the size of buffer %d", (int)b);
            return rt_run_eval(p, B->numel, &numel, what);
        }
        if (numel < 0) {
            graph_run_error(g, KILN_ERR_SHAPE, "kiln_run: buffer %d has a negative size", (int)b);
            return KILN_ERR_SHAPE;
        }
        size_t bytes = kiln_dtype_bytes(B->dtype, numel);
        if (bytes == 0 && numel != 0) {
            graph_run_error(g, KILN_ERR_SHAPE, "kiln_run: %lld elements of %s are not a whole number of blocks",
                            (long long)numel, kiln_dtype_name(B->dtype));
            return KILN_ERR_SHAPE;
        }
        p->run.bytes[b] = bytes;
    }
    return KILN_OK;
}

/* buffer b's binding (an input or a state), NULL when none: where the last
 * run found it first (one strcmp instead of a search of every binding for
 * every buffer: 100,000 per decode step of a model with 300 weights) */
const input_binding *rt_run_binding(kiln_program *p, int32_t b) {
    kiln_graph *g = p->plan.g;
    const char *name = g->nodes[p->plan.sp.bufs[b].node].name;
    int32_t at = p->run.bind_at[b];
    if (at >= 0 && at < g->ninputs && strcmp(g->inputs[at].name, name) == 0) return &g->inputs[at];
    for (int32_t i = 0; i < g->ninputs; i++)
        if (strcmp(g->inputs[i].name, name) == 0) {
            p->run.bind_at[b] = i;
            return &g->inputs[i];
        }
    return NULL;
}

/* the caller's inputs and states, checked and handed to the backend */
static kiln_status bind_inputs(kiln_program *p) {
    const sch_program *sp = &p->plan.sp;
    kiln_graph *g = p->plan.g;
    char err[1024] = "";
    for (int32_t b = 0; b < sp->nbufs; b++) {
        const sch_buf *B = &sp->bufs[b];
        if (B->kind != SCH_BUF_INPUT && B->kind != SCH_BUF_STATE) continue;
        const char *name = g->nodes[B->node].name, *kind = B->kind == SCH_BUF_STATE ? "state" : "input";
        const input_binding *bind = rt_run_binding(p, b);
        if (!bind) {
            graph_run_error(g, KILN_ERR_UNBOUND, "kiln_run: %s '%s' has no bound buffer", kind, name);
            return KILN_ERR_UNBOUND;
        }
        if (bind->bytes != p->run.bytes[b]) {
            graph_run_error(g, KILN_ERR_INVALID, "kiln_run: %s '%s': expected %zu bytes, the bound buffer has %zu",
                            kind, name, p->run.bytes[b], bind->bytes);
            return KILN_ERR_INVALID;
        }
        if (!bind->data && bind->bytes) {
            graph_run_error(g, KILN_ERR_INVALID, "kiln_run: input '%s': NULL buffer", name);
            return KILN_ERR_INVALID;
        }
        kiln_status s = p->plan.be->bind(p, b, bind->data, bind->bytes, err, sizeof err);
        if (s != KILN_OK) {
            if (err[0]) graph_run_error(g, s, "kiln_run: %s '%s': %s", kind, name, err);
            return s;
        }
    }
    return KILN_OK;
}

static void touch(rt_live *l, int32_t k) {
    if (l->first > l->last) {
        l->first = l->last = k;
        return;
    }
    if (k < l->first) l->first = k;
    if (k > l->last) l->last = k;
}

static void touch_expr(const sch_program *sp, rt_live *live, int32_t id, int32_t k) {
    if (id < 0) return;
    const lx *x = &sp->lx[id];
    if (x->kind == LX_LOAD) touch(&live[x->buf], k);
    touch_expr(sp, live, x->a, k);
    touch_expr(sp, live, x->b, k);
}

static int in_arena(const sch_program *sp, int32_t b) {
    sch_buf_kind kk = sp->bufs[b].kind;
    return kk == SCH_BUF_NODE || kk == SCH_BUF_TEMP;
}

/* liveness over kernel indices: the same every run, computed at the first */
static void plan_liveness(kiln_program *p) {
    const sch_program *sp = &p->plan.sp;
    rt_live *live = p->run.live;
    p->run.live_ready = 1;
    for (int32_t b = 0; b < sp->nbufs; b++) {
        live[b].first = 1;
        live[b].last = 0;
    }
    for (int32_t k = 0; k < sp->nkernels; k++) {
        const sch_kernel *K = &sp->kernels[k];
        /* an epilogue (sched/epilogue.c) may run inside kernel k - 1's items,
         * a prologue inside kernel k + 1's: its buffers are live there too */
        for (int32_t at = K->in_host ? k - 1 : k; at <= (K->in_next ? k + 1 : k); at++) {
            touch(&live[K->out_buf], at);
            if (K->src_buf >= 0) touch(&live[K->src_buf], at);
            touch_expr(sp, live, K->expr, at);
            for (int32_t i = 0; i < K->nstages; i++) touch_expr(sp, live, K->stages[i].expr, at);
        }
    }
    for (int32_t b = 0; b < sp->nbufs; b++)
        if (!in_arena(sp, b)) {
            live[b].first = 1;
            live[b].last = 0;
        }
}

/* the arena, planned with each buffer's size rounded up to a multiple of an
 * eighth of its next power of two (at most 12.5% more), and again only when
 * some buffer outgrows its place or the last placing failed: a plan per
 * decode token cost about 1% of a small model's step */
static kiln_status place_arena(kiln_program *p) {
    const sch_program *sp = &p->plan.sp;
    rt_run *r = &p->run;
    int replan = !r->live_ready || r->replanned < 0;
    for (int32_t b = 0; b < sp->nbufs && !replan; b++) replan = r->bytes[b] > r->live[b].bytes;
    if (!replan) {
        r->replanned = 0;
        return KILN_OK;
    }
    for (int32_t b = 0; b < sp->nbufs; b++) {
        size_t c = 64;
        while (c < r->bytes[b]) c *= 2;
        size_t q = c / 8 > 64 ? c / 8 : 64;
        r->live[b].bytes = r->bytes[b] ? (r->bytes[b] + q - 1) / q * q : 0;
    }
    if (!r->live_ready) plan_liveness(p);
    size_t need = rt_memplan(r->live, sp->nbufs);
    char err[1024] = "";
    r->arena_used = need;
    r->replanned = -1; /* until placed */
    kiln_status s = p->plan.be->place(p, need, err, sizeof err);
    if (s != KILN_OK) return hook_failed(p, s, err, "");
    r->replanned = 1;
    return KILN_OK;
}

static void free_results(output_value *r, int32_t n) {
    if (!r) return;
    for (int32_t i = 0; i < n; i++) free(r[i].data);
    free(r);
}

/* output `o` (buffer b): its shape, and host memory for it (the previous
 * run's when the size matches, so a repeated run does not fault fresh
 * pages in for every output) */
static kiln_status make_result(kiln_program *p, int32_t b, output_value *r, int32_t nold) {
    kiln_graph *g = p->plan.g;
    const sch_buf *B = &p->plan.sp.bufs[b];
    const view *V = graph_tensor_view(g, g->outputs[B->output].tensor);
    r->ndim = view_ndim(V);
    for (int d = 0; d < r->ndim; d++) {
        char what[160];
        snprintf(what, sizeof what, "the shape of output '%s'", g->outputs[B->output].name);
        kiln_status s = rt_run_eval(p, view_shape(V)[d], &r->dims[d], what);
        if (s != KILN_OK) return s;
    }
    r->dtype = B->dtype;
    r->bytes = p->run.bytes[b];
    r->data = NULL;
    if (B->output < nold && g->results[B->output].data && g->results[B->output].bytes == r->bytes) {
        r->data = g->results[B->output].data;
        g->results[B->output].data = NULL;
    } else {
        /* 64-byte aligned for whole-line vector stores; free() releases it */
        void *mem = NULL;
        r->data = posix_memalign(&mem, 64, r->bytes ? r->bytes : 1) == 0 ? mem : NULL;
    }
    if (!r->data) {
        graph_run_error(g, KILN_ERR_NOMEM, "kiln_run: cannot allocate %zu bytes for output '%s'", r->bytes,
                        g->outputs[B->output].name);
        return KILN_ERR_NOMEM;
    }
    /* KILN_POISON_RESULTS (the tests): all bits set (an f32/f16 NaN) before
     * the kernels run, so that an element no kernel writes shows, even in a
     * buffer taken over from the reference run */
    if (p->run.poison) memset(r->data, 0xff, r->bytes);
    char err[1024] = "", pre[600];
    kiln_status s = p->plan.be->result(p, b, r->data, err, sizeof err);
    snprintf(pre, sizeof pre, "output '%s': ", g->outputs[B->output].name);
    return hook_failed(p, s, err, pre);
}

static kiln_status make_results(kiln_program *p, output_value **out) {
    kiln_graph *g = p->plan.g;
    const sch_program *sp = &p->plan.sp;
    output_value *res = kiln_xcalloc((size_t)g->noutputs + 1, sizeof *res);
    *out = res;
    int32_t nold = 0;
    while (g->results && g->results[nold].ndim >= 0) nold++;
    res[g->noutputs].ndim = -1;
    for (int32_t b = 0; b < sp->nbufs; b++) {
        if (sp->bufs[b].kind != SCH_BUF_RESULT) continue;
        kiln_status s = make_result(p, b, &res[sp->bufs[b].output], nold);
        if (s != KILN_OK) return s;
    }
    return KILN_OK;
}

/* QUANTIZE: f32 into a block format, on the host */
static kiln_status quantize_step(kiln_program *p, const sch_kernel *K, char *err, size_t errcap) {
    const rt_backend *be = p->plan.be;
    kiln_dtype t = p->plan.sp.bufs[K->out_buf].dtype;
    size_t sb = p->run.bytes[K->src_buf], db = p->run.bytes[K->out_buf];
    /* on a device: the f32 source and the blocks staged in host memory */
    void *tmp = be->caps & RT_CAP_HOST_MEMORY ? NULL : kiln_xmalloc(sb + db + 16);
    void *src = NULL, *dst = NULL;
    kiln_status s = be->host_step(p, K->src_buf, 1, tmp, &src, err, errcap);
    if (s == KILN_OK) s = be->host_step(p, K->out_buf, 2, tmp ? (char *)tmp + sb : NULL, &dst, err, errcap);
    if (s == KILN_OK && quant_quantize(t, src, dst, (int64_t)(sb / sizeof(float))) != 0) {
        graph_run_error(p->plan.g, KILN_ERR_UNSUPPORTED, "kiln_run: kiln has no %s encoder", kiln_dtype_name(t));
        err[0] = 0;
        s = KILN_ERR_UNSUPPORTED;
    }
    if (s == KILN_OK) s = be->host_step(p, K->out_buf, 0, dst, &dst, err, errcap);
    free(tmp);
    return s;
}

/* a kernel's loops under the run's values (the message only when needed) */
kiln_status rt_kernel_extent(kiln_program *p, int32_t k, rt_extent *e) {
    const sch_kernel *K = &p->plan.sp.kernels[k];
    kiln_graph *g = p->plan.g;
    e->outer = e->inner = e->total = 1;
    for (int d = 0; d < K->ndim; d++) {
        int64_t v = 0;
        if (sym_eval(g->syms, K->dim[d], p->run.values, p->run.bound, &v, NULL) != 0) {
            char what[64];
            snprintf(what, sizeof what, "the loops of kernel %d", (int)k);
            kiln_status s = rt_run_eval(p, K->dim[d], &v, what);
            if (s != KILN_OK) return s;
        }
        e->dim[d] = v;
        if (d + 1 < K->ndim) e->outer *= v;
        else e->inner = v;
    }
    e->total = K->ndim > 0 ? e->outer * e->inner : 1;
    return KILN_OK;
}

/* an index out of range, or a device's missing instructions, in kernel k */
static kiln_status kernel_error(kiln_program *p, int32_t k, int code) {
    const sch_kernel *K = &p->plan.sp.kernels[k];
    if (code == RT_KERR_NO_MMA) {
        graph_run_error(p->plan.g, KILN_ERR_UNSUPPORTED,
                        "kiln_run: kernel %d: this device lacks the tensor-core instructions of its entry point",
                        (int)k);
        return KILN_ERR_UNSUPPORTED;
    }
    graph_run_error(p->plan.g, KILN_ERR_RANGE, "kiln_run: a %s index is out of range (kernel %d, node %d)",
                    K->kind == SCH_K_SCATTER ? "SCATTER" : "GATHER", (int)k, (int)K->root);
    return KILN_ERR_RANGE;
}

/* the kernels in order; host steps (COPY, QUANTIZE) between them */
static kiln_status run_kernels_in_order(kiln_program *p) {
    const rt_backend *be = p->plan.be;
    const sch_program *sp = &p->plan.sp;
    char err[4096] = "";
    for (int32_t k = 0; k < sp->nkernels; k++) {
        const sch_kernel *K = &sp->kernels[k];
        kiln_status s = KILN_OK;
        err[0] = 0;
        if (K->kind == SCH_K_COPY) {
            size_t n = p->run.bytes[K->src_buf] < p->run.bytes[K->out_buf] ? p->run.bytes[K->src_buf]
                                                                           : p->run.bytes[K->out_buf];
            s = be->copy(p, K->out_buf, K->src_buf, n, err, sizeof err);
        } else if (K->kind == SCH_K_QUANTIZE) {
            s = quantize_step(p, K, err, sizeof err);
        } else {
            rt_extent e;
            s = rt_kernel_extent(p, k, &e);
            if (s != KILN_OK) return s;
            if (e.outer == 0 || (K->ndim > 0 && e.inner == 0)) continue;
            s = be->run_kernel(p, k, &e, err, sizeof err);
            if (s == KILN_ERR_RANGE && !err[0]) return kernel_error(p, k, RT_KERR_RANGE);
        }
        if (s != KILN_OK) {
            char what[32]; /* worded only on failure: this loop runs for every kernel of every run */
            snprintf(what, sizeof what, "kernel %d: ", (int)k);
            return hook_failed(p, s, err, what);
        }
    }
    return KILN_OK;
}

/* the same with the pool held (threadpool.h: its workers do not sleep
 * between this run's kernels), except while a search is open: its
 * compiles and timings run inside launches, and a worker spinning through
 * a compile would take a core from it */
static kiln_status run_kernels(kiln_program *p) {
    int hold = p->plan.pool && !(p->tune.budget > p->tune.spent);
    if (hold) rt_pool_hold(p->plan.pool, 1);
    kiln_status s = run_kernels_in_order(p);
    if (hold) rt_pool_hold(p->plan.pool, 0);
    return s;
}

/* sync, then the first kernel a device flagged */
static kiln_status finish_kernels(kiln_program *p) {
    char err[4096] = "";
    memset(p->run.kerr, 0, ((size_t)p->plan.sp.nkernels + 1) * sizeof *p->run.kerr);
    kiln_status s = p->plan.be->sync(p, err, sizeof err);
    if (s != KILN_OK) return hook_failed(p, s, err, "");
    for (int32_t k = 0; k < p->plan.sp.nkernels; k++)
        if (p->run.kerr[k]) return kernel_error(p, k, p->run.kerr[k]);
    return KILN_OK;
}

/* results and states back into the caller's memory (devices only) */
static kiln_status fetch_outputs(kiln_program *p, output_value *res) {
    const sch_program *sp = &p->plan.sp;
    kiln_graph *g = p->plan.g;
    char err[4096] = "", pre[600];
    if (p->plan.be->caps & RT_CAP_HOST_MEMORY) return KILN_OK;
    for (int32_t b = 0; b < sp->nbufs; b++) {
        const sch_buf *B = &sp->bufs[b];
        kiln_status s = KILN_OK;
        if (B->kind == SCH_BUF_RESULT) {
            s = p->plan.be->fetch(p, b, res[B->output].data, res[B->output].bytes, err, sizeof err);
            if (s != KILN_OK) snprintf(pre, sizeof pre, "output '%s': ", g->outputs[B->output].name);
        } else if (B->kind == SCH_BUF_STATE) {
            const input_binding *bind = rt_run_binding(p, b);
            if (bind) s = p->plan.be->fetch(p, b, bind->data, p->run.bytes[b], err, sizeof err);
            if (s != KILN_OK) snprintf(pre, sizeof pre, "state '%s': ", g->nodes[B->node].name);
        }
        if (s != KILN_OK) return hook_failed(p, s, err, pre);
    }
    return KILN_OK;
}

kiln_status rt_program_run(kiln_program *p) {
    kiln_graph *g = p->plan.g;
    if (g->build_failed) return g->status;
    output_value *res = NULL;
    char err[1024] = "";
    load_values(p);
    kiln_status s = size_buffers(p);
    if (s == KILN_OK) s = bind_inputs(p);
    if (s == KILN_OK) s = place_arena(p);
    if (s == KILN_OK) s = make_results(p, &res);
    if (s == KILN_OK) s = hook_failed(p, p->plan.be->begin(p, err, sizeof err), err, "");
    if (s == KILN_OK) s = run_kernels(p);
    if (s == KILN_OK) s = finish_kernels(p);
    if (p->prof.secs) p->prof.runs++;
    if (s == KILN_OK) s = fetch_outputs(p, res);
    s = rt_tune_after_run(p, s);
    if (s != KILN_OK) {
        if (p->plan.be->abandon) p->plan.be->abandon(p);
        free_results(res, g->noutputs);
        graph_free_results(g);
        return s;
    }
    graph_free_results(g);
    g->results = res;
    g->status = KILN_OK;
    g->error[0] = 0;
    return KILN_OK;
}

/* the conditions the builder could not prove (a symbolic slice's stop <=
 * size, ...), checked on the caller's graph under its bindings: compiled code
 * must never read past a buffer because of a bad binding */
static kiln_status check_user_conditions(kiln_graph *user) {
    if (user->nchecks == 0) return KILN_OK;
    uint32_t n = sym_var_count(user->syms);
    int64_t *values = kiln_xcalloc((size_t)n + 1, sizeof *values);
    uint8_t *bound = kiln_xcalloc((size_t)n + 1, 1);
    for (uint32_t v = 0; v < n && v < user->ndim_values; v++) {
        values[v] = user->dim_values[v];
        bound[v] = user->dim_bound[v];
    }
    kiln_status s = graph_run_checks(user, values, bound);
    free(values);
    free(bound);
    return s;
}

kiln_status kiln_run(kiln_program *p) {
    if (!p) return KILN_ERR_INVALID;
    kiln_graph *user = p->plan.user, *work = p->plan.g;
    if (user->build_failed) return user->status;
    kiln_status cs = check_user_conditions(user);
    if (cs != KILN_OK) return cs;
    if (p->forms.force != 0 && rt_stream_alt(p)) {
        int form = rt_stream_pick(p, user);
        if (form > 0) {
            p->alt->stream_bf16_run = form == KILN_FORM_STREAMING_BF16;
            return kiln_run(p->alt);
        }
    }
    if (work == user) return rt_program_run(p);
    eg_copy_bindings(user, work);
    /* hand the previous results back so that their buffers are reused */
    graph_free_results(work);
    work->results = user->results;
    user->results = NULL;
    kiln_status s = rt_program_run(p);
    if (s != KILN_OK) {
        graph_run_error(user, s, "%s", work->error);
        return s;
    }
    user->results = work->results; /* outputs correspond by position (checked at compile) */
    work->results = NULL;
    user->status = KILN_OK;
    user->error[0] = 0;
    return KILN_OK;
}
