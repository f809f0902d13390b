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
 *
 * A third form, streaming-bf16 (form 2): the streaming program run with its
 * stream tiles' products on vdpbf16ps (emit_stream_tile.c; approximate: bf16
 * queries, keys, values and weights, f32 sums and softmax). It is no program
 * of its own: where the CPU has avx512_bf16 and the compile option
 * stream_bf16 is 0 or 2, the streaming alternative is compiled with both
 * bodies in each tile that fits (SCH_STREAM_BF16_BOTH) and a run in this
 * form sets the launch flag CG_KF_BF16 (kiln_program.stream_bf16_run,
 * cpu_run.c). It serves prompts only (the short and long buckets): decode
 * stays f32 (kiln serve's batched decoding pins it to the f32 streaming
 * form), a record naming it for a decode bucket is set aside, and the cost
 * model never picks it: only a measurement does, when it is more than 3%
 * faster than the faster f32 form. The records: schedule "materialised",
 * "streaming" or "streaming-bf16", then " runner-up=<form>" unless the
 * runner-up is the other f32 form (the two-form records as before); best_s
 * the winner's time, base_s the runner-up's; a schedule this kiln does not
 * know is set aside (the cost model picks).
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
#include "stream_tile.h"
#include "emit_c.h"

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
    if (a.stream_bf16 == 0) a.stream_bf16 = 2; /* both tile bodies: streaming-bf16 a form the search measures */
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

static const char *const form_names[KILN_FORMS] = {"materialised", "streaming", "streaming-bf16"};

static int is_prompt_bucket(int b) { return b == KILN_FORM_SHORT || b == KILN_FORM_LONG; }

/* the form a record's schedule text names (its first word, or after
 * "runner-up="), -1 none this kiln knows */
int rt_form_parse(const char *text, size_t len) {
    for (int f = 0; f < KILN_FORMS; f++)
        if (strlen(form_names[f]) == len && strncmp(text, form_names[f], len) == 0) return f;
    return -1;
}

int rt_form_record_read(const char *schedule, int *winner, int *runner_up) {
    size_t w = strcspn(schedule, " ");
    *winner = rt_form_parse(schedule, w);
    if (*winner < 0) return 0;
    if (!schedule[w]) {
        if (*winner == KILN_FORM_STREAMING_BF16) return 0; /* always written with its runner-up */
        *runner_up = 1 - *winner;
        return 1;
    }
    static const char tag[] = " runner-up=";
    if (strncmp(schedule + w, tag, sizeof tag - 1) != 0) return 0;
    const char *r = schedule + w + sizeof tag - 1;
    *runner_up = rt_form_parse(r, strlen(r));
    return *runner_up >= 0 && *runner_up != *winner;
}

/* 1 when p's streaming alternative can run its tiles in bf16 (form 2):
 * compiled with both bodies (the CPU has avx512_bf16), AVX-512 code, and a
 * tile whose shapes fit */
static int bf16_form_ok(kiln_program *p) {
    kiln_program *a = rt_stream_alt(p);
    return a && a->plan.isa == CG_ISA_AVX512 && sch_stream_bf16_selectable(&a->plan.sp);
}

/* this machine's records for p's buckets, read once */
static void load_forms(kiln_program *p) {
    p->forms.loaded = 1;
    char *fp = kiln_device_fingerprint(), key[64], bucket[64];
    form_key(p->alt, key, sizeof key);
    for (int b = 0; fp && b < KILN_FORM_BUCKETS; b++) {
        sch_tune_record r;
        int exact = 0, f, ru;
        form_bucket_text(p, b, bucket, sizeof bucket);
        if (!sch_tunedb_lookup(fp, key, bucket, &r, &exact) || !exact) continue;
        if (!rt_form_record_read(r.schedule, &f, &ru)) continue; /* not a form this kiln knows: the cost model picks */
        /* the bf16 form serves prompts only, and only a program that has it */
        if ((f == KILN_FORM_STREAMING_BF16 || ru == KILN_FORM_STREAMING_BF16) && (!is_prompt_bucket(b) || !bf16_form_ok(p)))
            continue;
        p->forms.choice[b] = (int8_t)f;
        memset(p->forms.t[b], 0, sizeof p->forms.t[b]);
        p->forms.t[b][f] = r.best_s;
        p->forms.t[b][ru] = r.base_s;
        p->forms.runner_up[b] = (int8_t)ru;
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
    if (!p || form < -1 || form >= KILN_FORMS) return 0;
    /* the materialised form (or none) forced needs no alternative compiled */
    if (form >= 1 ? !rt_stream_alt(p) : !p->alt && !p->alt_pending) return 0;
    if (form == KILN_FORM_STREAMING_BF16 && !bf16_form_ok(p)) return 0;
    p->forms.force = form;
    return 1;
}

int kiln_program_form_bf16_possible(const kiln_program *p) {
    if (!p || (!p->alt && !p->alt_pending)) return 0;
    if (p->alt) return bf16_form_ok((kiln_program *)p);
    int bf = p->plan.opt.stream_bf16;
    return (bf == 0 || bf == 2) && p->plan.isa == CG_ISA_AVX512 && rt_cpu_has("avx512_bf16");
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
    return kiln_program_form_record3(p, bucket, materialised_s, streaming_s, 0);
}

kiln_status kiln_program_form_record3(kiln_program *p, int bucket, double materialised_s, double streaming_s,
                                      double streaming_bf16_s) {
    if (!p || !p->alt || bucket < 0 || bucket >= KILN_FORM_BUCKETS || !(materialised_s > 0) || !(streaming_s > 0) ||
        !(streaming_bf16_s >= 0))
        return KILN_ERR_INVALID;
    /* the bf16 form: prompts only, and only a program that has it */
    if (streaming_bf16_s > 0 && (!is_prompt_bucket(bucket) || !bf16_form_ok(p))) return KILN_ERR_INVALID;
    if (!p->forms.loaded) load_forms(p);
    double lo = materialised_s < streaming_s ? materialised_s : streaming_s;
    double hi = materialised_s < streaming_s ? streaming_s : materialised_s;
    int f = hi <= lo * (1 + RT_FORM_TIE) ? bucket != KILN_FORM_SHORT : streaming_s < materialised_s;
    int ru = 1 - f;
    double t[KILN_FORMS] = {materialised_s, streaming_s, streaming_bf16_s};
    /* the bf16 form wins only when more than the tie's 3% faster than the
     * f32 form that won (a tie keeps f32: the exact arithmetic); the
     * runner-up is then the faster f32 form, else the faster of the rest */
    if (streaming_bf16_s > 0) {
        if (t[f] > streaming_bf16_s * (1 + RT_FORM_TIE)) ru = f, f = KILN_FORM_STREAMING_BF16;
        else if (streaming_bf16_s < t[ru]) ru = KILN_FORM_STREAMING_BF16;
    }
    p->forms.choice[bucket] = (int8_t)f;
    p->forms.runner_up[bucket] = (int8_t)ru;
    memcpy(p->forms.t[bucket], t, sizeof t);
    char *fp = kiln_device_fingerprint(), key[64], bucket_text[64], err[512];
    if (!fp) return KILN_ERR_IO;
    form_key(p->alt, key, sizeof key);
    form_bucket_text(p, bucket, bucket_text, sizeof bucket_text);
    sch_tune_record r;
    sch_tune_record_new(&r, fp, key, bucket_text);
    if (f + ru == 1) snprintf(r.schedule, sizeof r.schedule, "%s", form_names[f]); /* as two-form records were */
    else snprintf(r.schedule, sizeof r.schedule, "%s runner-up=%s", form_names[f], form_names[ru]);
    r.best_s = t[f];
    r.base_s = t[ru];
    r.tried = streaming_bf16_s > 0 ? 3 : 2;
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
        static const char *const form[KILN_FORMS] = {
            "materialised (score and value contractions around a softmax kernel)",
            "streaming (SOFTMAX_CONTRACT stream kernels, masked key blocks skipped)",
            "streaming-bf16 (the streaming form's tiles on vdpbf16ps, f32 sums and softmax; approximate)"};
        kiln_program *q = (kiln_program *)p;
        if (!q->forms.loaded) load_forms(q);
        for (int bk = 0; bk < KILN_FORM_BUCKETS; bk++) {
            int f = q->forms.choice[bk], ru = q->forms.runner_up[bk];
            if (q->forms.pin[bk] >= 0) {
                kiln_sb_printf(&b, "  %s: %s (pinned by the caller: kiln serve's batched decoding runs this form)\n",
                               what[bk], form[q->forms.pin[bk]]);
            } else if (f >= 0) {
                kiln_sb_printf(&b, "  %s: %s, %.3f ms; runner-up: %s, %.3f ms", what[bk], form[f],
                               q->forms.t[bk][f] * 1e3, form_names[ru], q->forms.t[bk][ru] * 1e3);
                int third = 3 - f - ru;
                if (q->forms.t[bk][third] > 0)
                    kiln_sb_printf(&b, "; %s, %.3f ms", form_names[third], q->forms.t[bk][third] * 1e3);
                kiln_sb_puts(&b, " (measured, tuning DB)\n");
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
        if (bf16_form_ok(q))
            kiln_sb_puts(&b, "  streaming-bf16: the streaming program's tiles also hold bf16 products, a form for "
                             "prompts only (picked when measured more than 3% faster)\n");
    } else if (streams) {
        kiln_sb_puts(&b, "  every run: streaming (SOFTMAX_CONTRACT stream kernels; option stream 1)\n");
    } else {
        kiln_sb_puts(&b, "  every run: materialised (no streaming alternative: option stream 0, another "
                         "backend, or no softmax-times-values the stream kernel takes)\n");
    }
    return kiln_sb_take(&b);
}
