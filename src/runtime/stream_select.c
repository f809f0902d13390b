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

#include <stdio.h>

#include "base.h"
#include "loop.h"
#include "threadpool.h"
#include "tunedb.h"
#include "program.h"
#include "rewrite.h"

#define RT_STREAM_LONG 1024
#define RT_STREAM_FEW 16
#define KILN_STR_(x) #x
#define KILN_STR(x) KILN_STR_(x)

static int is_cpu(const char *backend) { return !backend || strcmp(backend, "cpu") == 0; }

int rt_stream_extract_mode(const char *backend, int stream) {
    return is_cpu(backend) && stream == 1 ? EG_EXTRACT_STREAM : EG_EXTRACT_PRIMITIVES;
}

static int has_stream_kernel(const kiln_program *p) {
    for (int32_t k = 0; k < p->plan.sp.nkernels; k++)
        if (p->plan.sp.kernels[k].kind == SCH_K_STREAM) return 1;
    return 0;
}

int rt_stream_alt_wanted(const kiln_compile_options *o, const char *backend) {
    return o->stream == 2 && is_cpu(backend) && !o->profile; /* a profile covers one program */
}

kiln_program *rt_stream_alt(kiln_program *p) {
    if (p->alt_pending) {
        p->alt_pending = 0;
        p->alt = rt_stream_compile_alt(p->plan.user, &p->plan.opt, p->plan.be->name);
        if (p->alt) rt_cpu_share_copies(p, p->alt); /* one set of weight copies for both forms */
    }
    return p->alt;
}

kiln_program *rt_stream_compile_alt(kiln_graph *g, const kiln_compile_options *o, const char *backend) {
    if (!rt_stream_alt_wanted(o, backend)) return NULL;
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

/* the run's longest stream (keys) and its most rows, under user's bindings:
 * 0 when a size does not evaluate */
static int stream_extent(kiln_program *alt, const kiln_graph *user, int64_t *keys, int64_t *rows) {
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
    *keys = 0;
    *rows = -1;
    int ok = 1;
    for (int32_t k = 0; k < sp->nkernels && ok; k++) {
        const sch_kernel *K = &sp->kernels[k];
        if (K->kind != SCH_K_STREAM) continue;
        int64_t r = 1, v = 0;
        for (int d = 0; d < K->ndim && ok; d++) {
            ok = sym_eval(work->syms, K->dim[d], values, bound, &v, NULL) == 0;
            if (d < K->ndim - 1) r *= v;
        }
        if (v > *keys) *keys = v;
        if (*rows < 0 || r > *rows) *rows = r;
    }
    free(values);
    free(bound);
    return ok && *rows >= 0;
}

static int bucket_of(int64_t keys, int64_t rows) {
    if (rows <= RT_STREAM_FEW) return keys >= RT_STREAM_LONG ? KILN_FORM_DECODE_LONG : KILN_FORM_DECODE;
    return keys >= RT_STREAM_LONG ? KILN_FORM_LONG : KILN_FORM_SHORT;
}

static const char *const bucket_names[KILN_FORM_BUCKETS] = {"short", "long", "decode", "decode-long"};

/* the records' key: the stream kernels' sizes that are constants (heads,
 * head size, grouping) and dtypes, hashed: one model's attention shape */
static void form_key(const kiln_program *alt, char *out, size_t cap) {
    const sch_program *sp = &alt->plan.sp;
    uint64_t h = 1469598103934665603ULL;
    for (int32_t k = 0; k < sp->nkernels; k++) {
        const sch_kernel *K = &sp->kernels[k];
        if (K->kind != SCH_K_STREAM) continue;
        for (int d = 0; d < K->ndim; d++) {
            int64_t c = -1;
            if (!sym_is_const(alt->plan.g->syms, K->dim[d], &c)) c = -1;
            h = kiln_hash_mix(h, (uint64_t)c);
        }
        h = kiln_hash_mix(h, (uint64_t)sp->bufs[K->out_buf].dtype);
    }
    snprintf(out, cap, "attn-form-%016llx", (unsigned long long)h);
}

static void form_bucket_text(const kiln_program *p, int b, char *out, size_t cap) {
    snprintf(out, cap, "%s,t=%d", bucket_names[b], rt_pool_threads(p->plan.pool));
}

/* this machine's records for p's buckets, read once */
static void load_forms(kiln_program *p) {
    p->forms.loaded = 1;
    char *fp = kiln_device_fingerprint(), key[64], bucket[64];
    form_key(p->alt, key, sizeof key);
    for (int b = 0; fp && b < KILN_FORM_BUCKETS; b++) {
        sch_tune_record r;
        int exact = 0;
        form_bucket_text(p, b, bucket, sizeof bucket);
        if (!sch_tunedb_lookup(fp, key, bucket, &r, &exact) || !exact) continue;
        int f = strcmp(r.schedule, "streaming") == 0 ? 1 : strcmp(r.schedule, "materialised") == 0 ? 0 : -1;
        if (f < 0) continue; /* not a form this kiln knows: the cost model picks */
        p->forms.choice[b] = (int8_t)f;
        p->forms.t[b][f] = r.best_s;
        p->forms.t[b][1 - f] = r.base_s;
    }
    free(fp);
}

int rt_stream_pick(kiln_program *p, const kiln_graph *user) {
    if (p->forms.force >= 0) return p->forms.force;
    int64_t keys, rows;
    if (!stream_extent(p->alt, user, &keys, &rows)) return 0;
    if (!p->forms.loaded) load_forms(p);
    int b = bucket_of(keys, rows);
    if (p->forms.pin[b] >= 0) return p->forms.pin[b];
    if (p->forms.choice[b] >= 0) return p->forms.choice[b];
    return keys >= RT_STREAM_LONG || rows <= RT_STREAM_FEW;
}

int kiln_program_form_force(kiln_program *p, int form) {
    if (!p || form < -1 || form > 1) return 0;
    /* the materialised form (or none) forced needs no alternative compiled */
    if (form == 1 ? !rt_stream_alt(p) : !p->alt && !p->alt_pending) return 0;
    p->forms.force = form;
    return 1;
}

int kiln_program_form_pin(kiln_program *p, int bucket, int form) {
    if (!p || bucket < 0 || bucket >= KILN_FORM_BUCKETS || form < -1 || form > 1) return 0;
    if (!p->alt && !p->alt_pending) return 0; /* one form only: nothing to pick */
    p->forms.pin[bucket] = (int8_t)form;
    return 1;
}

/* two forms' times within this fraction of each other are a tie (one run's
 * drift on a shared machine): the cost model's pick for the bucket stands
 * (rt_stream_pick: materialised for short prompts, streaming for the rest),
 * so that a first-run search and a long tune decide alike */
#define RT_FORM_TIE 0.03

kiln_status kiln_program_form_record(kiln_program *p, int bucket, double materialised_s, double streaming_s) {
    if (!p || !p->alt || bucket < 0 || bucket >= KILN_FORM_BUCKETS || !(materialised_s > 0) || !(streaming_s > 0))
        return KILN_ERR_INVALID;
    if (!p->forms.loaded) load_forms(p);
    double lo = materialised_s < streaming_s ? materialised_s : streaming_s;
    double hi = materialised_s < streaming_s ? streaming_s : materialised_s;
    int f = hi <= lo * (1 + RT_FORM_TIE) ? bucket != KILN_FORM_SHORT : streaming_s < materialised_s;
    p->forms.choice[bucket] = (int8_t)f;
    p->forms.t[bucket][0] = materialised_s;
    p->forms.t[bucket][1] = streaming_s;
    char *fp = kiln_device_fingerprint(), key[64], bucket_text[64], err[512];
    if (!fp) return KILN_ERR_IO;
    form_key(p->alt, key, sizeof key);
    form_bucket_text(p, bucket, bucket_text, sizeof bucket_text);
    sch_tune_record r;
    sch_tune_record_new(&r, fp, key, bucket_text);
    snprintf(r.schedule, sizeof r.schedule, "%s", f ? "streaming" : "materialised");
    r.best_s = f ? streaming_s : materialised_s;
    r.base_s = f ? materialised_s : streaming_s;
    r.tried = 2;
    free(fp);
    kiln_status s = sch_tunedb_store(&r, err, sizeof err);
    if (s != KILN_OK) fprintf(stderr, "kiln: %s\n", err);
    return s;
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
    if (rt_stream_alt((kiln_program *)p)) {
        static const char *const what[KILN_FORM_BUCKETS] = {
            "short prompts (more than " KILN_STR(RT_STREAM_FEW) " rows, fewer than " KILN_STR(RT_STREAM_LONG) " keys)",
            "long prompts (at least " KILN_STR(RT_STREAM_LONG) " keys)",
            "decode (at most " KILN_STR(RT_STREAM_FEW) " rows, fewer than " KILN_STR(RT_STREAM_LONG) " keys)",
            "decode over at least " KILN_STR(RT_STREAM_LONG) " keys"};
        static const char *const form[2] = {"materialised (score and value contractions around a softmax kernel)",
                                            "streaming (SOFTMAX_CONTRACT stream kernels, masked key blocks skipped)"};
        kiln_program *q = (kiln_program *)p;
        if (!q->forms.loaded) load_forms(q);
        for (int bk = 0; bk < KILN_FORM_BUCKETS; bk++) {
            int f = q->forms.choice[bk];
            if (q->forms.pin[bk] >= 0) {
                kiln_sb_printf(&b, "  %s: %s (pinned by the caller: kiln serve's batched decoding runs this form)\n",
                               what[bk], form[q->forms.pin[bk]]);
            } else if (f >= 0) {
                kiln_sb_printf(&b, "  %s: %s, %.3f ms; runner-up: %s, %.3f ms (measured, tuning DB)\n", what[bk],
                               form[f], q->forms.t[bk][f] * 1e3, f ? "materialised" : "streaming",
                               q->forms.t[bk][1 - f] * 1e3);
            } else {
                f = bk != KILN_FORM_SHORT;
                kiln_sb_printf(&b, "  %s: %s; runner-up: %s (the cost model's pick: no measurement yet)\n", what[bk],
                               form[f], f ? "materialised" : "streaming");
            }
        }
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
