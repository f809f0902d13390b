/* serve_engine.c — kiln serve's slots: one thread runs the one loaded,
 * compiled model for every request.
 *
 * Each slot has its own KV cache, a view of one buffer per layer that holds
 * every slot's (model_batch, src/model/model_batch.c), and remembers the
 * tokens it holds. A request that starts with what its slot already holds
 * (a conversation's next turn, a repeated prompt) keeps the held rows up to
 * a multiple of the model's prompt pass (model_ubatch: a fresh prompt runs
 * in passes starting at those multiples) that an earlier prompt's prefill
 * computed, and prefills the rest: every kept row was computed by the very
 * pass a fresh prompt runs for it (same rows, same shape, same schedules),
 * so a reused prefix changes no bit of the answer, and a request's text is
 * the text `kiln run --temp 0` prints (generated rows, made by decode
 * steps, are never kept: a fresh prompt computes them in a prefill pass).
 * A prompt of one token is a row of the step's decode call with the other
 * slots' tokens, as a 1-row pass computes it. Requests beyond the
 * slots wait in a bounded queue; past it, submit refuses (the HTTP side
 * answers 503).
 *
 * Each turn of the loop gives every busy slot one step: a slot whose client
 * went away is freed; a new request is prefilled by the model's own program
 * on its slot's view; then each slot samples its next token from its logits.
 * The tokens of every slot still decoding then go through the model in one
 * call: the batched-decode program (arch_build_batch: one row per decoding
 * slot, with its position and slot; idle slots are not rows, so not
 * computed), compiled before the server listens, or the
 * model's own program when only one slot decodes. Both compute a row the
 * same way whatever the other rows (tests/py/test_serve_batch.py checks the
 * texts and the logits), so a client's greedy text does not depend on who
 * else is served. A batched row's logits are read (and penalised) where the
 * call wrote them, and a greedy row without penalties is an argmax over
 * them (sampler.c), so what a step does outside the model is per row, not
 * a copy of the vocabulary. A request's waiter is woken per token only when
 * it streams; a whole answer's waiter wakes once, when it is done.
 *
 * KILN_SERVE_PROFILE=1 prints at stop where this thread's wall time went
 * from the first request on (idle, prefill, sampling, text, 1-slot and
 * batched decode calls by rows): a measurement aid nothing depends on.
 *
 * Invariants: only this thread touches the model; a request's results are
 * written under its mutex and broadcast; every request the engine took is
 * released exactly once, finished (done = 1) on every path.
 */
#ifdef KILN_HAVE_SERVE

#include <math.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "serve.h"

typedef struct slot {
    model_kv *kv;      /* a view of the batch's caches (model_batch_kv) */
    int32_t *cache;    /* tokens whose keys and values the cache holds */
    int n_cache;
    int n_exact;       /* cache[0 .. n_exact) was computed by a prompt's prefill (in passes aligned as a fresh prompt's) */
    srv_request *r;    /* running, or NULL */
    sampler *smp;
    tok_stream *ts;
    int32_t *counts;   /* per vocabulary id: times generated (penalties) */
    int32_t *gen;      /* generated ids */
    int prefilled;
    int32_t next;      /* want: the sampled token the next forward pass runs */
    int want;
    float *logits;     /* this step's logits: own, or the slot's row of a batched call's */
    float *own;        /* the single program's logits (prefill, a lone decode) */
} slot;

/* the engine thread's wall time by what it did, printed at stop when
 * KILN_SERVE_PROFILE=1 (a measurement aid: nothing depends on it). Each
 * acct_mark charges the time since the last mark to a phase. */
enum { AC_IDLE, AC_PREFILL, AC_SAMPLE, AC_TEXT, AC_DECODE1, AC_DECODEN, AC_ROWS, AC_OTHER, AC_N, AC_BEFORE = AC_N };
static const char *acct_names[AC_N] = {"idle (no request)", "prefill", "sampling", "text, stops, waking clients",
                                       "decode, 1 slot", "decode, batched", "rows' results", "rest of the loop"};
typedef struct acct {
    int on;
    double t;                        /* the last mark */
    double secs[AC_N + 1]; /* [AC_BEFORE]: before the first request, not shown */
    double rows_secs[MODEL_BATCH_MAX_ROWS + 1]; /* decode calls by rows */
    long long rows_calls[MODEL_BATCH_MAX_ROWS + 1];
    long long prefill_tokens, reused_tokens, prefills, tokens;
} acct;

static void acct_mark(acct *a, int phase) {
    if (!a->on) return;
    double now = srv_now();
    a->secs[phase] += now - a->t;
    a->t = now;
}

struct srv_engine {
    model *m;
    const tokenizer *tk;
    int64_t n_ctx, n_vocab;
    int ubatch;        /* model_ubatch: kept prefixes are multiples of it */
    slot *slots;
    int n_slots;
    model_batch *batch;  /* the slots' caches and the batched program */
    int32_t *rslot, *rtok, *rpos; /* a batched call's rows */
    float *blogits;      /* its logits (n_slots * n_vocab) */
    srv_request **queue;
    int qhead, qn, qcap;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    int stop, busy;
    long long batched_calls, batched_rows; /* under mu */
    acct ac;             /* KILN_SERVE_PROFILE=1: the engine thread's time */
};


double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

srv_request *srv_request_new(void) {
    srv_request *r = kiln_xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 1;
    r->text = kiln_xmalloc(1);
    r->text[0] = 0;
    r->cap = 1;
    return r;
}

void srv_request_release(srv_request *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->text);
    free(r->lp);
    free(r->off);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* ---- one slot's work ---- */

static void append(srv_request *r, const char *s, size_t n) {
    if (r->len + n + 1 > r->cap) {
        r->cap = 2 * (r->len + n + 64);
        r->text = kiln_xrealloc(r->text, r->cap);
    }
    memcpy(r->text + r->len, s, n);
    r->len += n;
    r->text[r->len] = 0;
}

/* after text grew: cut at a stop string (1), else move safe up to where no
 * stop string can start any more */
static int check_stop(srv_request *r) {
    for (int i = 0; i < r->n_stop; i++) {
        char *at = strstr(r->text, r->stop[i]);
        if (at) {
            r->len = (size_t)(at - r->text);
            r->text[r->len] = 0;
            r->safe = r->len;
            return 1;
        }
    }
    size_t hold = 0; /* the longest tail of text that begins some stop string */
    for (int i = 0; i < r->n_stop; i++) {
        size_t k = strlen(r->stop[i]);
        for (size_t t = k - 1; t > hold; t--)
            if (t <= r->len && memcmp(r->text + r->len - t, r->stop[i], t) == 0) {
                hold = t;
                break;
            }
    }
    r->safe = r->len - hold;
    return 0;
}

static void slot_finish(srv_engine *e, slot *s, const char *finish, const char *error) {
    srv_request *r = s->r;
    const char *tail = NULL;
    size_t tlen = 0;
    if (s->ts) tok_stream_flush(s->ts, &tail, &tlen);
    pthread_mutex_lock(&r->mu);
    if (!strcmp(finish, "length") && tlen) {
        append(r, tail, tlen);
        if (check_stop(r)) finish = "stop";
    }
    if (error) snprintf(r->error, sizeof r->error, "%s", error);
    r->safe = r->len;
    r->finish = finish;
    r->done = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < r->n_gen && s->counts; i++) s->counts[s->gen[i]] = 0;
    sampler_free(s->smp);
    tok_stream_free(s->ts);
    s->smp = NULL, s->ts = NULL, s->r = NULL;
    srv_request_release(r);
    pthread_mutex_lock(&e->mu);
    e->busy--;
    pthread_mutex_unlock(&e->mu);
}

static int slot_forward(srv_engine *e, slot *s, const int32_t *ids, int n) {
    s->logits = s->own;
    if (model_kv_use(e->m, s->kv) != KILN_OK || model_forward(e->m, ids, n, s->n_cache, s->logits) != KILN_OK) {
        s->n_cache = s->n_exact = 0; /* what the cache holds is no longer known */
        return -1;
    }
    memcpy(s->cache + s->n_cache, ids, (size_t)n * sizeof *ids);
    s->n_cache += n;
    return 0;
}

/* the held rows r keeps: the longest prefix of r's prompt (less its last
 * token) that the slot holds from a prefill, cut to a multiple of the
 * model's prompt pass, so r's passes from there are a fresh prompt's */
static int slot_keep(const srv_engine *e, const slot *s, const srv_request *r) {
    int match = 0, held = s->n_exact < s->n_cache ? s->n_exact : s->n_cache;
    while (match < held && match < r->n_prompt - 1 && s->cache[match] == r->prompt[match]) match++;
    return e->ubatch > 0 ? match / e->ubatch * e->ubatch : 0;
}

static int slot_prefill(srv_engine *e, slot *s) {
    srv_request *r = s->r;
    int keep = slot_keep(e, s, r);
    s->n_cache = s->n_exact = keep;
    int left = r->n_prompt - keep;
    e->ac.prefill_tokens += left;
    e->ac.reused_tokens += keep;
    pthread_mutex_lock(&r->mu);
    r->n_cached = keep;
    pthread_mutex_unlock(&r->mu);
    if (left == 1 && r->max_tokens > 0) {
        /* a one-token prompt: a row of this step's decode call like the
         * other slots' next tokens, the arithmetic of a 1-token pass
         * whichever program runs it */
        s->next = r->prompt[keep];
        s->want = 1;
    } else if (slot_forward(e, s, r->prompt + keep, left)) {
        return -1;
    }
    s->n_exact = r->n_prompt;
    char err[256];
    if (sampler_new(&r->sp, (int32_t)e->n_vocab, &s->smp, err, sizeof err) != KILN_OK) return -1;
    for (int i = 0; i < r->n_prompt; i++) sampler_accept(s->smp, r->prompt[i]);
    s->ts = tok_stream_new(e->tk, 0, 0);
    s->prefilled = 1;
    return 0;
}

/* log-probability of id under logits (log-softmax, in double) */
static double logprob(const float *logits, int64_t n, int32_t id) {
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int64_t i = 0; i < n; i++) sum += exp((double)logits[i] - mx);
    return (double)logits[id] - mx - log(sum);
}

/* one step: the prefill, or one token */
static void slot_step(srv_engine *e, slot *s) {
    srv_request *r = s->r;
    pthread_mutex_lock(&r->mu);
    int cancelled = r->cancelled;
    pthread_mutex_unlock(&r->mu);
    if (cancelled) {
        slot_finish(e, s, "cancelled", NULL);
        return;
    }
    if (!s->prefilled) {
        acct_mark(&e->ac, AC_OTHER);
        int failed = slot_prefill(e, s);
        e->ac.prefills++;
        acct_mark(&e->ac, AC_PREFILL);
        if (failed) {
            slot_finish(e, s, "error", model_error(e->m));
            return;
        }
        if (s->want) return; /* the prompt's last token runs in decode_all; its logits are sampled next turn */
    }
    if (r->n_gen >= r->max_tokens || (r->deadline > 0 && srv_now() > r->deadline)) {
        slot_finish(e, s, "length", NULL);
        return;
    }
    acct_mark(&e->ac, AC_OTHER);
    /* OpenAI's penalties: logit -= frequency * count + presence * (count > 0),
     * once per distinct generated id (counts[t] is negated while done) */
    if (r->presence_penalty != 0 || r->frequency_penalty != 0) {
        for (int i = 0; i < r->n_gen; i++) {
            int32_t t = s->gen[i];
            if (s->counts[t] <= 0) continue;
            s->logits[t] -= r->frequency_penalty * (float)s->counts[t] + r->presence_penalty;
            s->counts[t] = -s->counts[t];
        }
        for (int i = 0; i < r->n_gen; i++)
            if (s->counts[s->gen[i]] < 0) s->counts[s->gen[i]] = -s->counts[s->gen[i]];
    }
    int32_t id = sampler_sample(s->smp, s->logits);
    if (id < 0 || id >= tok_n_vocab(e->tk)) {
        slot_finish(e, s, "error", "the model chose a token the tokenizer does not have");
        return;
    }
    if (tok_is_eog(e->tk, id)) {
        slot_finish(e, s, "stop", NULL);
        return;
    }
    double lp = r->logprobs ? logprob(s->logits, e->n_vocab, id) : 0;
    acct_mark(&e->ac, AC_SAMPLE);
    e->ac.tokens++;
    sampler_accept(s->smp, id);
    const char *piece;
    size_t plen = 0;
    tok_stream_push(s->ts, id, &piece, &plen);
    pthread_mutex_lock(&r->mu);
    s->gen[r->n_gen] = id;
    s->counts[id]++;
    if (r->logprobs) r->lp[r->n_gen] = lp;
    r->off[r->n_gen] = r->len;
    r->n_gen++;
    append(r, piece, plen);
    int stopped = check_stop(r);
    if (r->stream) pthread_cond_broadcast(&r->cv); /* a whole answer's waiter wakes once, when done */
    pthread_mutex_unlock(&r->mu);
    acct_mark(&e->ac, AC_TEXT);
    if (stopped) {
        slot_finish(e, s, "stop", NULL);
        return;
    }
    if (r->n_gen >= r->max_tokens || s->n_cache >= e->n_ctx) {
        slot_finish(e, s, "length", NULL);
        return;
    }
    s->next = id; /* run by decode_all with the other slots' tokens */
    s->want = 1;
}

/* one forward pass for the token of every slot that wants one: the model's
 * own program for a single slot, else one batched call */
static void decode_all(srv_engine *e) {
    int nb = 0;
    slot *one = NULL;
    for (int i = 0; i < e->n_slots; i++) {
        slot *s = &e->slots[i];
        if (!s->want) continue;
        s->want = 0;
        if (!s->r) continue;
        e->rslot[nb] = i;
        e->rtok[nb] = s->next;
        e->rpos[nb] = s->n_cache;
        nb++;
        one = s;
    }
    acct_mark(&e->ac, AC_OTHER);
    if (nb == 1) {
        double t0 = srv_now();
        if (slot_forward(e, one, &one->next, 1)) slot_finish(e, one, "error", model_error(e->m));
        e->ac.rows_calls[1]++;
        e->ac.rows_secs[1] += srv_now() - t0;
        acct_mark(&e->ac, AC_DECODE1);
        return;
    }
    if (nb == 0) return;
    double t0 = srv_now();
    kiln_status st = model_batch_decode(e->batch, nb, e->rslot, e->rtok, e->rpos, e->blogits);
    if (st == KILN_OK) {
        pthread_mutex_lock(&e->mu);
        e->batched_calls++;
        e->batched_rows += nb;
        pthread_mutex_unlock(&e->mu);
    }
    if (nb <= MODEL_BATCH_MAX_ROWS) {
        e->ac.rows_calls[nb]++;
        e->ac.rows_secs[nb] += srv_now() - t0;
    }
    acct_mark(&e->ac, AC_DECODEN);
    for (int b = 0; b < nb; b++) {
        slot *s = &e->slots[e->rslot[b]];
        if (st != KILN_OK) {
            s->n_cache = s->n_exact = 0; /* what the cache holds is no longer known */
            slot_finish(e, s, "error", model_batch_error(e->batch));
            continue;
        }
        s->logits = e->blogits + (size_t)b * (size_t)e->n_vocab; /* read (and penalised) in place until the next call */
        s->cache[s->n_cache++] = s->next;
    }
    acct_mark(&e->ac, AC_ROWS);
}

/* KILN_SERVE_PROFILE=1's table, on stderr */
static void acct_print(acct *a) {
    if (!a->on) return;
    acct_mark(a, AC_OTHER);
    double total = 0;
    for (int i = 0; i < AC_N; i++) total += a->secs[i];
    fprintf(stderr, "kiln serve profile: the engine thread's %.3f s from the first request; %lld tokens sampled, %lld prefills computing %lld tokens (%lld held tokens kept)\n",
            total, a->tokens, a->prefills, a->prefill_tokens, a->reused_tokens);
    for (int i = 0; i < AC_N; i++)
        fprintf(stderr, "  %-28s %9.3f s %5.1f%%\n", acct_names[i], a->secs[i], total > 0 ? 100 * a->secs[i] / total : 0.0);
    for (int n = 1; n <= MODEL_BATCH_MAX_ROWS; n++)
        if (a->rows_calls[n])
            fprintf(stderr, "  decode calls of %d row%s: %lld, %.3f ms each\n", n, n > 1 ? "s" : "", a->rows_calls[n],
                    1e3 * a->rows_secs[n] / (double)a->rows_calls[n]);
}

/* ---- the loop ---- */

/* a free slot for r: the one that keeps most of r's prompt (slot_keep),
 * then the one whose cache shares the longest prefix with it */
static slot *pick_slot(srv_engine *e, const srv_request *r) {
    slot *best = NULL;
    int best_keep = -1, best_match = -1;
    for (int i = 0; i < e->n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->r) continue;
        int keep = slot_keep(e, s, r), match = 0;
        while (match < s->n_cache && match < r->n_prompt && s->cache[match] == r->prompt[match]) match++;
        if (keep > best_keep || (keep == best_keep && match > best_match)) best = s, best_keep = keep, best_match = match;
    }
    return best;
}

static void refuse(srv_request *r, const char *why);

static void *engine_main(void *arg) {
    srv_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        while (e->qn > 0) {
            srv_request *q = e->queue[e->qhead];
            if (q->deadline > 0 && srv_now() > q->deadline) { /* waited its whole time for a slot */
                e->qhead = (e->qhead + 1) % e->qcap;
                e->qn--;
                refuse(q, "the request waited longer than the server's --request-timeout for a slot");
                continue;
            }
            slot *s = pick_slot(e, q);
            if (!s) break;
            s->r = e->queue[e->qhead];
            s->prefilled = 0;
            e->qhead = (e->qhead + 1) % e->qcap;
            e->qn--;
            e->busy++;
        }
        if (!e->busy) {
            acct_mark(&e->ac, AC_OTHER);
            pthread_cond_wait(&e->cv, &e->mu);
            acct_mark(&e->ac, e->ac.tokens || e->ac.prefills ? AC_IDLE : AC_BEFORE);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        for (int i = 0; i < e->n_slots; i++)
            if (e->slots[i].r) slot_step(e, &e->slots[i]);
        decode_all(e);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* one 8-token prompt and one decode step through the single program on
 * slot 0's cache (srv_engine_start); 1 when both ran */
static int warm_single(srv_engine *e) {
    int n = e->n_ctx > 9 ? 8 : (int)e->n_ctx - 1;
    if (n < 1) return 1;
    int32_t ids[8];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((7919u * (unsigned)i + 13u) % (unsigned)e->n_vocab);
    slot *s = &e->slots[0];
    int ok = model_kv_use(e->m, s->kv) == KILN_OK && model_forward(e->m, ids, n, 0, s->own) == KILN_OK &&
             model_forward(e->m, ids, 1, n, s->own) == KILN_OK;
    s->n_cache = s->n_exact = 0;
    return ok;
}

srv_engine *srv_engine_start(model *m, const tokenizer *tk, const srv_engine_opts *o, char *err, size_t cap) {
    srv_engine *e = kiln_xcalloc(1, sizeof *e);
    e->m = m;
    e->tk = tk;
    e->n_ctx = model_n_ctx(m);
    e->ubatch = model_ubatch(m);
    e->n_vocab = model_n_vocab(m);
    e->n_slots = o->slots;
    e->qcap = o->queue > 0 ? o->queue : 1;
    e->queue = kiln_xcalloc((size_t)e->qcap, sizeof *e->queue);
    e->slots = kiln_xcalloc((size_t)e->n_slots, sizeof *e->slots);
    e->batch = model_batch_new(m, e->n_slots);
    e->rslot = kiln_xmalloc((size_t)e->n_slots * sizeof *e->rslot);
    e->rtok = kiln_xmalloc((size_t)e->n_slots * sizeof *e->rtok);
    e->rpos = kiln_xmalloc((size_t)e->n_slots * sizeof *e->rpos);
    e->blogits = kiln_xmalloc((size_t)e->n_slots * (size_t)e->n_vocab * sizeof *e->blogits);
    for (int i = 0; i < e->n_slots; i++) {
        slot *s = &e->slots[i];
        s->kv = model_batch_kv(e->batch, i);
        s->cache = kiln_xmalloc((size_t)e->n_ctx * sizeof *s->cache);
        s->gen = kiln_xmalloc((size_t)e->n_ctx * sizeof *s->gen);
        s->counts = kiln_xcalloc((size_t)e->n_vocab, sizeof *s->counts);
        s->own = s->logits = kiln_xmalloc((size_t)e->n_vocab * sizeof *s->own);
    }
    const char *prof = getenv("KILN_SERVE_PROFILE");
    e->ac.on = prof && prof[0] && strcmp(prof, "0") != 0;
    e->ac.t = srv_now();
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (e->n_slots > 1) {
        /* the batched program now, not when two clients first overlap (a
         * stall of every client for the compile: 19-53 s on gemma3-270m) */
        double t0 = srv_now();
        fprintf(stderr, "kiln serve: compiling the batched-decode program for %d slots...\n", e->n_slots);
        if (model_batch_prepare(e->batch) != KILN_OK) {
            snprintf(err, cap, "%s", model_batch_error(e->batch));
            e->stop = 1;
            srv_engine_stop(e);
            srv_engine_free(e);
            return NULL;
        }
        fprintf(stderr, "kiln serve: batched decoding ready (%.1f s)\n", srv_now() - t0);
    }
    /* the single program's first short prompt and decode step now, not at
     * the first client's prefill (its first run of the prompt bucket's
     * code and the other attention form's program: 0.8 s of the first
     * request on gemma3-270m, Intel Xeon, 2 threads): 8 rows and a row
     * on slot 0's cache from position 0, which its first prefill writes
     * again before reading (n_cache stays 0) */
    if (!warm_single(e)) {
        snprintf(err, cap, "warming the model: %s", model_error(e->m));
        e->stop = 1;
        srv_engine_stop(e);
        srv_engine_free(e);
        return NULL;
    }
    if (pthread_create(&e->th, NULL, engine_main, e)) {
        snprintf(err, cap, "cannot start the engine thread");
        e->stop = 1;
        srv_engine_stop(e);
        srv_engine_free(e);
        return NULL;
    }
    return e;
}

static void refuse(srv_request *r, const char *why) {
    pthread_mutex_lock(&r->mu);
    snprintf(r->error, sizeof r->error, "%s", why);
    r->finish = "error";
    r->done = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    srv_request_release(r);
}

void srv_engine_stop(srv_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    int running = !e->stop;
    e->stop = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (running) pthread_join(e->th, NULL);
    acct_print(&e->ac);
    for (; e->qn > 0; e->qn--, e->qhead = (e->qhead + 1) % e->qcap) refuse(e->queue[e->qhead], "the server is shutting down");
    for (int i = 0; i < e->n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->r) slot_finish(e, s, "error", "the server is shutting down");
        free(s->cache);
        free(s->gen);
        free(s->counts);
        free(s->own);
    }
    model_kv_use(e->m, NULL); /* before the views' buffers go */
    model_batch_free(e->batch);
    e->batch = NULL;
}

void srv_engine_free(srv_engine *e) {
    if (!e) return;
    free(e->rslot);
    free(e->rtok);
    free(e->rpos);
    free(e->blogits);
    free(e->slots);
    free(e->queue);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

int srv_engine_submit(srv_engine *e, srv_request *r) {
    pthread_mutex_lock(&e->mu);
    int full = e->stop || e->qn >= e->qcap;
    if (!full) {
        pthread_mutex_lock(&r->mu);
        r->refs++;
        pthread_mutex_unlock(&r->mu);
        e->queue[(e->qhead + e->qn) % e->qcap] = r;
        e->qn++;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return full ? -1 : 0;
}

void srv_engine_load(srv_engine *e, srv_load *out) {
    pthread_mutex_lock(&e->mu);
    out->busy = e->busy;
    out->waiting = e->qn;
    out->batched_calls = e->batched_calls;
    out->batched_rows = e->batched_rows;
    pthread_mutex_unlock(&e->mu);
}

#endif
