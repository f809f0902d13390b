/* autotune.c — a model's schedule search, steered by where its time goes
 * (DESIGN.md section 5: "the budget is a promise ... spent where the time
 * goes"). Used by `kiln tune -m` and by the first `kiln run` / `kiln bench`
 * of a model on a machine.
 *
 * The steps, all on the model's own program and cache:
 *  1. warm-up, untimed: one decode step and a short prefill build the weight
 *     copies the schedules read (as kiln run does before its prompt);
 *  2. profile with the schedules the program has (the DB's, else the
 *     defaults): a prefill of `prompt` tokens (fewer in proportion for
 *     weights past 1 GB, at least 32), then two decode steps; steps 1-2
 *     count against the budget;
 *  3. the plan: kernel k's weight in the workload is its decode time x the
 *     tokens generated plus its prefill time x (the prompt / the profiled
 *     prompt), the workload being llama-bench's default one (a 512-token
 *     prompt, 128 generated); a kernel group under 2% of a decode step or of
 *     a prefill keeps its schedule (kiln_program_search);
 *  4. the searches: a decode step and a prefill run again (decode first,
 *     the cheaper run; both runs counted in the budget), and each kernel
 *     searches at its first launch within its share of what is left; then,
 *     while time is left, the heaviest groups search again from the rank
 *     where they stopped (kiln_program_search_more);
 *  5. the recompile with the winners (kiln_program_search_finish), the
 *     streaming form's program too (steps 1-5 run the main program only);
 *  6. a program compiled with both attention forms times each on a prefill
 *     of the workload's prompt (forms_prompt: the profile's rows when a
 *     round of it would not fit) and decode steps after it (and on a long
 *     prompt when the time left pays for it); the faster per bucket is
 *     recorded, a tie the cost model's pick (measure_forms), in
 *     as many rounds (at most 2) as an eighth of the budget pays for (the
 *     second only when the time left still pays for one), none
 *     at all for a model whose prefill is too slow for that (8B shapes);
 *     where the streaming program has the streaming-bf16 form (avx512_bf16,
 *     KILN_STREAM_BF16=search), its prefills are timed too (prompts only,
 *     no decode steps), after their last row's logits passed a check
 *     against the f32 streaming form's (AUTOTUNE_BF16_KL), and it wins a
 *     prompt bucket only when more than 3% faster (kiln_program_form_record3).
 * A model built with all_logits (kiln perplexity) gets these steps twice:
 * as kiln run's model (2/3 of the budget), then with prefills that output
 * their second half's logits (1/3), for the output head's many-row shape.
 * The cache rows the runs wrote are garbage afterwards: every caller starts
 * its prompt at position 0, and a step writes its rows before reading them.
 *
 * The tokens are a fixed pseudo-random sequence: kernel times do not depend
 * on their values, and the same ids give the same runs on every machine.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune.h"
#include "base.h"
#include "kiln_compile.h"

/* later passes (step 4b): at most this many, over the heaviest groups, each
 * started when the time left after its runs pays one group's minimum search
 * (kiln_program_search_more decides): a budget too short for any group's
 * fair share then still searches the heaviest one (a 4 s first-run search
 * of a tiny model under load passed every group over, measured nothing,
 * recorded nothing, and the next run searched again) */
#define AUTOTUNE_MAX_PASSES 3
#define AUTOTUNE_PASS_GROUPS 4

model_tune_options model_tune_defaults(void) {
    model_tune_options o;
    memset(&o, 0, sizeof o);
    o.budget_s = 30;
    o.prompt = 256;
    o.workload_prompt = 512;
    o.workload_gen = 128;
    o.min_share = 0.02;
    return o;
}

static void phase(const model_tune_options *o, const char *what) {
    if (o->phase) o->phase(o->ctx, what);
}

static kiln_status fail(model *m, char *err, size_t cap, const char *what) {
    snprintf(err, cap, "%s: %s", what, model_error(m));
    return KILN_ERR_INVALID;
}

/* seconds of the best of `reps` runs of a prefill of n rows from position
 * pos (n = 1: a decode step) in the form forced; < 0 when a run failed */
static double time_forward(model *m, const int32_t *toks, int n, int pos, int reps, float *logits) {
    double best = -1;
    for (int r = 0; r < reps; r++) {
        double t = kiln_now_s();
        if (model_forward(m, toks, n, pos, logits)) return -1;
        t = kiln_now_s() - t;
        if (best < 0 || t < best) best = t;
    }
    return best;
}

/* 6: the attention forms measured, for a program compiled with both: a
 * prefill of n rows (a short prompt) in each form, then decode steps after
 * it in each (both forms write the same cache), the forms taking turns for
 * AUTOTUNE_FORM_ROUNDS rounds, each form's best counting; long prompts and decode over
 * a long cache likewise (RT_STREAM_LONG in stream_select.c: 1024 keys) when
 * the time left pays for them: the same n rows run as the pass of a long
 * prompt that ends at AUTOTUNE_LONG keys (at position AUTOTUNE_LONG - n, the
 * cache rows before it whatever earlier runs left there: the time of a pass
 * does not depend on the values it reads), then decode steps after it; each
 * form's long pass is estimated at AUTOTUNE_LONG_GROWTH times its short one
 * (gemma3-270m, 2 threads, Intel Xeon with AMX, first-run searches: the
 * pass ending at 2048 keys took 1.57x and 1.49x (materialised, streaming)
 * the pass from position 0, 1.72x and 1.42x in another search), and the
 * second form is not started when the first one's run has left too little
 * time. A long pass costs what a short one does, where a long prompt from
 * position 0 (2048 rows) cost 10 short ones and was never paid for by a
 * 30 s first-run search: the long buckets kept the cost model's pick.
 * The faster form per bucket goes to the tuning DB (kiln_program_form_record). */
#define AUTOTUNE_LONG 2048
#define AUTOTUNE_LONG_GROWTH 1.75
#define AUTOTUNE_FORM_ROUNDS 2
/* the short measurement may take at most this part of the budget: at 8B
 * (Llama-8B-shaped q4_k, 2 threads) a round of a 63-row prefill and three
 * decode steps in each form came to 6.4 s
 * (from the profile), and two rounds were reserved out of
 * a 30 s first-run search, leaving the searches 3 s; where the forms' one
 * difference (attention) is that small a part of a step, fewer rounds, or
 * none (the cost model's choice stays: decode streams, short prompts
 * materialise) */
#define AUTOTUNE_FORMS_SHARE 0.125

/* rounds of the short forms measurement a budget pays for, one round
 * costing round_s (a prefill and three decode steps in each form) */
static int forms_rounds(double budget_s, double round_s) {
    if (!(round_s > 0)) return AUTOTUNE_FORM_ROUNDS;
    int r = (int)(AUTOTUNE_FORMS_SHARE * budget_s / round_s);
    return r < AUTOTUNE_FORM_ROUNDS ? r : AUTOTUNE_FORM_ROUNDS;
}

/* the prompt rows the short forms are timed on: the workload's prompt
 * (its record serves kiln bench's pp512 and every prompt under 1024 keys),
 * when the context holds it and one round at that length fits the forms'
 * share, else the profile's n rows. A round at `rows` is estimated from the
 * profile (pre_s: a prefill of n rows, dec_s: a decode step) with the
 * attention part growing faster than the rows (AUTOTUNE_FORMS_GROWTH).
 * The forms' difference grows with the prompt: gemma3-270m at 2 threads
 * (AMD EPYC Zen 4, 12 alternating rounds in one process, loaded), the
 * streaming form over the materialised one: 1.05x the time at 256 rows
 * (rounds 0.80-1.30: a coin toss), 1.28x at 512 (1.06-1.52). The 256-row
 * measurement recorded streaming in one search and materialised in the
 * next, and pp512 followed it (the first run at 0.92 of the 120 s tune). */
#define AUTOTUNE_FORMS_GROWTH 1.15
static int forms_prompt(const model_tune_options *o, model *m, int n, double pre_s, double dec_s, double *round_s) {
    int rows = o->workload_prompt;
    /* the prefills of a round: one per form (the streaming-bf16 form's too
     * where it may exist: prompts only, no decode steps) */
    double np = kiln_program_form_bf16_possible(model_program(m)) ? 3 : 2;
    *round_s = np * pre_s + 6 * dec_s;
    if (rows <= n || rows + 4 > AUTOTUNE_LONG || model_n_ctx(m) < rows + 4) return n;
    double at = np * pre_s * rows / n * AUTOTUNE_FORMS_GROWTH + 6 * dec_s;
    if (forms_rounds(o->budget_s, at) < 1) return n;
    *round_s = at;
    return rows;
}

/* the better of a best-so-far (0: none yet; < 0: a run failed) and a new time */
static double best_of(double best, double t) {
    if (best < 0 || t < 0) return -1;
    return best == 0 || t < best ? t : best;
}

/* KL(softmax(a) || softmax(b)) over n logits, in nats; a non-finite logit
 * gives +inf (the check fails) */
double model_logits_kl(const float *a, const float *b, int n) {
    double ma = -1e300, mb = -1e300, sa = 0, sb = 0, kl = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        if (a[i] > ma) ma = a[i];
        if (b[i] > mb) mb = b[i];
    }
    for (int i = 0; i < n; i++) sa += exp(a[i] - ma), sb += exp(b[i] - mb);
    double la = ma + log(sa), lb = mb + log(sb); /* log-sum-exp */
    for (int i = 0; i < n; i++) kl += exp(a[i] - la) * ((a[i] - la) - (b[i] - lb));
    return kl;
}

/* the streaming-bf16 form (KILN_FORM_STREAMING_BF16, approximate) is a
 * candidate like any other: before it may win, the last row's logits of its
 * prefill are checked against those of the f32 streaming form on the same
 * tokens (its reference: exact up to f32 rounding against the materialised
 * form, the rewrite-soundness suite's); a KL divergence past this
 * disqualifies it. The project's yardstick for approximate arithmetic is a
 * mean KL of 0.0043 against --exact over a perplexity run (gemma3-270m's bf16
 * tile: 0.00385, the f32 tile 0.00381); one row of pseudo-random tokens
 * scatters more than a mean, hence the margin */
#define AUTOTUNE_BF16_KL 0.02
int model_bf16_form_ok(double kl) { return kl <= AUTOTUNE_BF16_KL; }

/* seconds since t0, less the streaming form's compile in that time (its
 * first forced run compiles it; kiln_search_status.baseline_s): that
 * compile is the model's, not the measurement's, and counting it left the
 * long buckets unmeasured after a first-run search (8 s of gemma3-270m's) */
static double forms_elapsed(kiln_program *p, double t0, double base0) {
    kiln_search_status st;
    kiln_program_search_status(p, &st);
    return kiln_now_s() - t0 - (st.baseline_s - base0);
}

static void measure_forms(model *m, kiln_program *p, int n, int short_rounds, double left, float *logits,
                          const model_tune_options *o) {
    if (short_rounds <= 0 || n + 4 > AUTOTUNE_LONG || !kiln_program_form_force(p, 0)) return; /* one form only */
    double t0 = kiln_now_s();
    kiln_search_status st0;
    kiln_program_search_status(p, &st0);
    double base0 = st0.baseline_s;
    int32_t *toks = kiln_xmalloc(((size_t)AUTOTUNE_LONG + 1) * sizeof *toks);
    for (int i = 0; i <= AUTOTUNE_LONG; i++) toks[i] = (int32_t)((7919u * (unsigned)i + 13u) % (unsigned)model_n_vocab(m));
    int nv = (int)model_n_vocab(m);
    float *ref = kiln_xmalloc((size_t)nv * sizeof *ref);
    int at[2] = {0, AUTOTUNE_LONG - n}; /* where each bucket's pass starts */
    int buckets[2][2] = {{KILN_FORM_SHORT, KILN_FORM_DECODE}, {KILN_FORM_LONG, KILN_FORM_DECODE_LONG}};
    /* the third form (prompts only: decode stays f32) where the streaming
     * program has it */
    int nforms = kiln_program_form_force(p, KILN_FORM_STREAMING_BF16) ? 3 : 2;
    kiln_program_form_force(p, 0);
    double pre[3] = {0, 0, 0}, dec[2] = {0, 0};
    for (int l = 0; l < 2; l++) {
        int len = n, pos = at[l];
        double est[3];
        for (int f = 0; f < 3; f++) est[f] = pre[f] > 0 ? pre[f] * AUTOTUNE_LONG_GROWTH : 0;
        if (l == 1 && (model_n_ctx(m) < AUTOTUNE_LONG + 4 || !(pre[0] > 0 && pre[1] > 0) ||
                       est[0] + est[1] + 3 * (dec[0] + dec[1]) > left - forms_elapsed(p, t0, base0)))
            break;
        /* the short bucket in alternating rounds (one form, then the other,
         * twice), each form's best kept: the forms differ by a few percent at
         * short prompts, less than one run's drift on a shared machine */
        /* the long bucket too: a form's first pass at a new length grows its
         * buffers (the materialised form's scores: 16 MB a layer at 2048
         * keys), and one pass each timed that: 361 ms materialised against
         * 349 streaming on an Intel Xeon where the materialised form's
         * pp4000 is ahead (1800 against 1390 t/s) */
        int rounds = short_rounds;
        int nf = nforms == 3 && (l == 0 || pre[2] > 0) ? 3 : 2;
        pre[0] = pre[1] = pre[2] = dec[0] = dec[1] = 0;
        double kl = 0;
        int checked = 0;
        double e_round = forms_elapsed(p, t0, base0);
        for (int r = 0; r < rounds; r++) {
            /* a later round only when the time left pays for one as long as
             * the last: the plan sized the rounds from the profile, and a
             * load that rose since stretches them (each form's best so far
             * stands) */
            double e = forms_elapsed(p, t0, base0);
            if (r > 0 && e + (e - e_round) > left) break;
            e_round = e;
            for (int f = 0; f < nf; f++) {
                if (l == 1 && r == 0 && f >= 1 && est[f] > left - forms_elapsed(p, t0, base0)) {
                    pre[f] = -1; /* the first forms' runs took the time: no record for this one */
                    if (f == 1) pre[2] = dec[1] = -1;
                    break;
                }
                kiln_program_form_force(p, f);
                double tp = time_forward(m, toks, len, pos, 1, logits);
                pre[f] = best_of(pre[f], tp);
                if (f == 1 && tp > 0) memcpy(ref, logits, (size_t)nv * sizeof *ref);
                if (f == 2 && tp > 0) {
                    double k = model_logits_kl(ref, logits, nv);
                    if (!model_bf16_form_ok(k)) pre[2] = -1; /* wrong: it may not win */
                    if (!(k <= kl)) kl = k;
                    checked = 1;
                }
                if (f == 2) continue; /* decode stays f32 */
                double td = time_forward(m, toks + len, 1, pos + len, 3, logits);
                dec[f] = best_of(dec[f], td);
            }
        }
        if (checked && o->phase) {
            char what[200];
            snprintf(what, sizeof what, "the streaming-bf16 form's %d-row prefill against the f32 streaming form's: KL %.2g (at most %g)%s",
                     len, kl, AUTOTUNE_BF16_KL, pre[2] < 0 ? ": disqualified" : "");
            o->phase(o->ctx, what);
        }
        if (pre[0] > 0 && pre[1] > 0)
            kiln_program_form_record3(p, buckets[l][0], pre[0], pre[1], pre[2] > 0 ? pre[2] : 0);
        if (dec[0] > 0 && dec[1] > 0) kiln_program_form_record(p, buckets[l][1], dec[0], dec[1]);
    }
    kiln_program_form_force(p, -1);
    free(ref);
    free(toks);
}

/* one profile, plan and search; all_rows: the prefills output the logits of
 * their second half (model_forward_rows), as kiln perplexity runs them */
static kiln_status autotune_once(model *m, const model_tune_options *opt, int all_rows, kiln_search_status *out,
                                 char *err, size_t cap) {
    model_tune_options o = *opt;
    kiln_program *p = model_program(m);
    if (out) memset(out, 0, sizeof *out);
    if (!p) {
        snprintf(err, cap, "the schedule search needs compiled code (not the interpreter)");
        return KILN_ERR_INVALID;
    }
    if (kiln_program_exact(p)) {
        snprintf(err, cap, "an exact program (--exact, KILN_EXACT=1) is not searched: its contractions stay f32");
        return KILN_ERR_INVALID;
    }
    if (!(o.budget_s > 0)) return KILN_OK; /* no budget: nothing searched, nothing recorded */
    int n = o.prompt;
    /* a prefill reads every weight: for weights past 1 GB, fewer rows in
     * proportion (at least 32), so that profiling an 8B model does not take
     * the budget (256 rows of the 4 GB q4_k one: minutes on 2 cores) */
    uint64_t file_bytes = 0;
    if (model_gguf(m) && gguf_bytes(model_gguf(m), &file_bytes) && file_bytes > UINT64_C(1000000000)) {
        double scaled = (double)n * 1e9 / (double)file_bytes;
        n = scaled < 32 ? 32 : (int)scaled;
    }
    if (n > model_n_ctx(m) - 3) n = (int)model_n_ctx(m) - 3;
    /* the prefill bucket starts above 4 rows (above SCH_DECODE_TILE_ROWS
     * for contractions whose decode schedule is the rp tiles: cpu_run.c
     * contract_bucket; a context too short for such a prompt never runs
     * their prefill code, so it is neither profiled nor searched) */
    if (n < 5) n = 5;
    if (model_n_ctx(m) < n + 3) {
        snprintf(err, cap, "a context of %lld rows is too short to search schedules", (long long)model_n_ctx(m));
        return KILN_ERR_INVALID;
    }
    int32_t *toks = kiln_xmalloc((size_t)n * sizeof *toks);
    for (int i = 0; i < n; i++) toks[i] = (int32_t)((7919u * (unsigned)i + 13u) % (unsigned)model_n_vocab(m));
    int from = all_rows ? n / 2 : n - 1;
    float *logits = kiln_xmalloc((size_t)(n - from) * (size_t)model_n_vocab(m) * sizeof *logits);
    int32_t nk = kiln_program_kernel_count(p);
    double *dec = kiln_xcalloc((size_t)nk + 1, sizeof *dec), *pre = kiln_xcalloc((size_t)nk + 1, sizeof *pre);
    double *w = kiln_xcalloc((size_t)nk * 2 + 1, sizeof *w);
    kiln_status s = KILN_OK;

    /* 1-2: warm up, then profile the schedules the program has; their time
     * is the search's too (the budget bounds the whole search's wall time).
     * Steps 1-5 run the main program (the materialised form): the profile
     * and the searches see only the kernels of the program that runs, and
     * the streaming form (where a model has one) would take decode steps
     * away from it; it adopts the winners at step 5 (they share the
     * contractions' and most kernels' keys) */
    double t_start = kiln_now_s();
    kiln_program_search_coming(p); /* the warm-up's copies give no weight back before the plan */
    kiln_program_form_force(p, 0);
    phase(&o, "measuring where the time goes (a prefill and two decode steps)");
    if (model_forward(m, toks, 1, 0, logits) || model_forward(m, toks, 5, 0, logits)) {
        s = fail(m, err, cap, "warm-up");
        goto done;
    }
    double warm_s = kiln_now_s() - t_start; /* mostly the weight copies: 8B q8_0's took over half a 60 s budget */
    kiln_program_profile_on(p, 1);
    kiln_program_profile_reset(p);
    if (model_forward_rows(m, toks, n, 0, from, logits)) {
        s = fail(m, err, cap, "profiling a prefill");
        goto done;
    }
    kiln_program_kernel_times(p, pre, nk);
    kiln_program_profile_reset(p);
    if (model_forward(m, toks, 1, n, logits) || model_forward(m, toks + 1, 1, n + 1, logits)) {
        s = fail(m, err, cap, "profiling a decode step");
        goto done;
    }
    kiln_program_kernel_times(p, dec, nk);
    kiln_program_profile_on(p, 0);

    /* 3: the plan */
    for (int32_t k = 0; k < nk; k++) {
        w[2 * k] = dec[k] / 2 * o.workload_gen;
        w[2 * k + 1] = pre[k] * o.workload_prompt / n;
    }
    /* step 6's measurement is kept out of the search's time: a prefill and
     * three decode steps in each form, twice, and the long buckets' round
     * (estimated at AUTOTUNE_LONG_GROWTH short ones) (a program with one
     * form: none; the main form stays forced) */
    double forms_s = 0;
    int form_rounds = 0, form_rows = n;
    if (!all_rows && kiln_program_form_force(p, 0)) {
        double pre_all = 0, dec_one = 0;
        for (int32_t k = 0; k < nk; k++) pre_all += pre[k], dec_one += dec[k] / 2;
        form_rows = forms_prompt(&o, m, n, pre_all, dec_one, &forms_s);
        form_rounds = forms_rounds(o.budget_s, forms_s);
        /* and the long buckets' one round (step 6), where the context has room */
        int long_ok = form_rounds > 0 && model_n_ctx(m) >= AUTOTUNE_LONG + 4 && form_rows + 4 <= AUTOTUNE_LONG;
        forms_s *= form_rounds * (1 + (long_ok ? AUTOTUNE_LONG_GROWTH : 0));
    }
    /* the runs that carry the searches (a decode step and a prefill, as
     * profiled) are the search's time too: at 8B on a loaded 2-core machine
     * the prefill alone took 14 s of a 60 s budget, unaccounted */
    double runs_s = 0;
    for (int32_t k = 0; k < nk; k++) runs_s += pre[k] + dec[k] / 2;
    double left = o.budget_s - (kiln_now_s() - t_start) - forms_s - runs_s;
    if ((s = kiln_program_search(p, left > 0 ? left : 0, w, o.min_share)) != KILN_OK) {
        snprintf(err, cap, "bad search options (budget %g s, min share %g)", o.budget_s, o.min_share);
        goto done;
    }
    /* 4: the searches, decode shapes first (a decode step costs little to
     * run: at 8B 0.1-0.5 s against 3-14 s for the prefill, and the decode
     * groups used to come after the prefill's run and searches had taken
     * the time: Llama-8B's decode projections got no search in 60 s), then
     * prefill; each group's share is its weight's part of what is left, so
     * the order does not favour either; the phase says what the profile saw
     * in the kernels of the program searched */
    double pre_s = 0, dec_s = 0;
    for (int32_t k = 0; k < nk; k++) pre_s += pre[k], dec_s += dec[k] / 2;
    char what[256];
    /* nothing left to search with: the runs that would carry the searches
     * would only take more time (at 8B q8_0 on a loaded machine the warm-up
     * and the profile took the whole 60 s and the prefill run then 12 s more) */
    if (!(left > 0)) {
        snprintf(what, sizeof what, "no time left to search (the warm-up, the weight copies, took %.1f s; a %d-row prefill %.2f ms, a decode step %.3f ms)",
                 warm_s, n, 1e3 * pre_s, 1e3 * dec_s);
        phase(&o, what);
        goto finish;
    }
    snprintf(what, sizeof what, "searching decode schedules (profiled in the kernels: a %d-row prefill %.2f ms, a decode step %.3f ms; the warm-up, the weight copies, %.1f s)",
             n, 1e3 * pre_s, 1e3 * dec_s, warm_s);
    phase(&o, what);
    if (model_forward(m, toks, 1, n, logits)) {
        s = fail(m, err, cap, "searching decode schedules");
        kiln_program_search_finish(p);
        goto done;
    }
    phase(&o, "searching prefill schedules");
    if (model_forward_rows(m, toks, n, 0, from, logits)) {
        s = fail(m, err, cap, "searching prefill schedules");
        kiln_program_search_finish(p);
        goto done;
    }
    /* 4b: time left (each search stops at the candidates its share paid
     * for, and a share is an estimate): the heaviest groups search again
     * from the rank where they stopped, seeded with their winners, for what
     * is left after the runs that carry them (a prefill and a decode step,
     * as profiled) */
    for (int pass = 0; pass < AUTOTUNE_MAX_PASSES; pass++) {
        double more = o.budget_s - (kiln_now_s() - t_start) - runs_s - forms_s;
        if (!(more > 0) || kiln_program_search_more(p, more, AUTOTUNE_PASS_GROUPS) == 0) break;
        phase(&o, "searching again with the time left (the heaviest kernels, their next candidates)");
        if (model_forward(m, toks, 1, n, logits) || model_forward_rows(m, toks, n, 0, from, logits)) {
            s = fail(m, err, cap, "searching again");
            kiln_program_search_finish(p);
            goto done;
        }
    }
    /* 5: the program with the winners */
finish:
    phase(&o, "compiling the program with the winners");
    if ((s = kiln_program_search_finish(p)) != KILN_OK) {
        snprintf(err, cap, "%s", model_error(m));
        goto done;
    }
    kiln_program_form_force(p, -1);
    /* 6: which attention form serves which bucket, measured */
    if (!all_rows && form_rounds == 0 && forms_s == 0 && kiln_program_form_force(p, 0)) {
        kiln_program_form_force(p, -1);
        phase(&o, "not timing the attention forms (a round would take over an eighth of the budget; the cost model picks)");
    } else if (!all_rows) {
        phase(&o, kiln_program_form_bf16_possible(p) ? "timing the attention forms (materialised, streaming, streaming-bf16 for prompts)"
                                                       : "timing the attention forms (materialised, streaming)");
        kiln_search_status st;
        kiln_program_search_status(p, &st); /* the streaming form's deferred compile is not the search's */
        /* at least the time reserved for it: the recompile before it may
         * overrun its estimate (12.0 s for 10.8 kept aside, gemma3-270m on
         * a loaded Intel Xeon), and taking the forms' reserve left the long
         * buckets unmeasured, to the cost model's pick, 1.3x slower at
         * pp4000 there; the overrun is then the recompile's, at most forms_s */
        double forms_left = o.budget_s - (kiln_now_s() - t_start - st.baseline_s);
        measure_forms(m, p, form_rows, form_rounds, forms_left > forms_s ? forms_left : forms_s, logits, &o);
    }
done:
    kiln_program_form_force(p, -1);
    model_reset(m); /* the runs' cache rows are of no use to anyone */
    if (out) kiln_program_search_status(p, out);
    kiln_program_profile_on(p, 0);
    free(toks);
    free(logits);
    free(dec);
    free(pre);
    free(w);
    return s;
}

kiln_status model_autotune(model *m, const model_tune_options *opt, kiln_search_status *out, char *err,
                           size_t cap) {
    model_tune_options o = opt ? *opt : model_tune_defaults();
    if (!model_all_logits(m) || !(o.budget_s > 0)) return autotune_once(m, &o, 0, out, err, cap);
    /* A model that outputs many rows' logits (kiln perplexity): first the
     * search kiln run's model gets (its prefills output the last row), so
     * the tuning DB ends up as kiln run's first search leaves it (a search
     * that spent the budget on the output head's many-row prefill would
     * record the decode kernels it did not reach as kept, and kiln run
     * would then never search them); then, with a third of the budget, the
     * prefills score their second half, so the output head's many-row shape
     * (most of a perplexity chunk's time) is searched too. */
    double budget = o.budget_s;
    o.budget_s = budget * 2 / 3;
    kiln_status s = autotune_once(m, &o, 0, out, err, cap);
    if (s != KILN_OK) return s;
    kiln_search_status first;
    memset(&first, 0, sizeof first);
    if (out) first = *out;
    o.budget_s = budget / 3;
    s = autotune_once(m, &o, 1, out, err, cap);
    if (s == KILN_OK && out) {
        out->budget_s = budget;
        out->spent_s += first.spent_s;
        out->searched += first.searched;
        out->measurements += first.measurements;
        if (first.best_speedup > out->best_speedup) out->best_speedup = first.best_speedup;
        out->baseline_s += first.baseline_s;
        out->recompile_s += first.recompile_s;
        out->reserve_s += first.reserve_s;
    }
    return s;
}

void model_compile_forms(model *m) {
    kiln_program *p = model_program(m);
    /* forcing the streaming form compiles it (kiln_program_form_force) */
    if (p && kiln_program_form_force(p, 1)) kiln_program_form_force(p, -1);
}

int model_needs_search(model *m) {
    kiln_program *p = model_program(m);
    if (!p) return 0;
    kiln_search_status st;
    kiln_program_search_status(p, &st);
    /* new to this machine (or thread count): most slots have no record. A
     * model tuned before keeps the few it passed over as they are */
    return st.slots > 0 && 2 * st.untuned > st.slots;
}
