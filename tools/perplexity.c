/* perplexity.c — `kiln perplexity`: perplexity over a text and KL divergence
 * against a base run, with llama-perplexity's method, printout and base
 * file (the measurements and the file layout: src/model/perplexity.h).
 *
 *   kiln perplexity -m MODEL -f TEXT [-c 512] [--chunks N] [-b N] [-t N]
 *                   [--json] [--exact] [--interp] [--no-tune]
 *                   [--kl-divergence-base FILE [--kl-divergence]]
 *
 * Each chunk of n_ctx tokens is one batched forward pass (or n_ctx / -b
 * passes) from an empty cache through a graph that outputs the logits of
 * the scored rows (model_forward_rows), not one pass per token. Per-row
 * log-softmaxes are computed on -t threads into per-row slots and summed in
 * row order, so the numbers do not depend on the thread count.
 *
 * Output: results on stdout (the running PPL "[1]x,[2]y,..." and "Final
 * estimate: PPL = X +/- Y", or one JSON object with --json), everything else
 * on stderr; on a terminal a progress line is redrawn on stderr and the
 * running list is printed at the end. Exit status: 0, 1 (the model, the
 * text or the base file is wrong), 2 (usage).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "kiln.h"
#include "kiln_cli.h"
#include "kiln_compile.h"
#include "model.h"
#include "perplexity.h"
#include "tokenizer.h"
#include "tokenizer_gguf.h"

static double ppl_now(void) { return kiln_now_s(); /* src/base/clock.c */ }

static int perr(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kiln perplexity: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

static int pusage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kiln perplexity: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'kiln perplexity --help')\n");
    va_end(ap);
    return 2;
}

void kiln_cli_print_arith(const char *cmd, model *m) {
    kiln_program *p = model_program(m);
    if (!p) return;
    char *t = kiln_program_arith_text(p);
    fprintf(stderr, "kiln %s: %s\n", cmd, t);
    free(t);
}

static void ppl_help(void) {
    printf("usage: kiln perplexity -m MODEL.gguf -f TEXT [options]\n"
           "\n"
           "Perplexity of a model over a text, as llama.cpp's llama-perplexity measures it:\n"
           "chunks of -c tokens (BOS first when the model adds one), the second half of each\n"
           "chunk scored, one batched forward pass per chunk. Needs at least 2 chunks of text.\n"
           "\n"
           "options:\n"
           "  -m, --model FILE          the GGUF model\n"
           "  -f, --file FILE           the text (with --kl-divergence: optional, then checked\n"
           "                            to give the base file's tokens)\n"
           "  -c, --ctx-size N          tokens per chunk (default 512; at most the model's context)\n"
           "      --chunks N            at most N chunks (default: all)\n"
           "  -b, --batch-size N        tokens per forward pass (default: the chunk)\n"
           "  -t, --threads N           worker threads (default: online cores)\n"
           "      --kl-divergence-base FILE\n"
           "                            write this run's log-probabilities there (llama-perplexity's\n"
           "                            layout); with --kl-divergence, read them\n"
           "      --kl-divergence       KL divergence, same top token, dp and PPL ratio against the\n"
           "                            base file (its tokens and context are used)\n"
           "      --exact               kiln's exact evaluation: f32 contractions, no tuning DB,\n"
           "                            no search (also 'kiln run/bench --exact')\n"
           "      --interp              the reference interpreter (slow; for tests)\n"
           "      --no-tune             no first-run schedule search\n"
           "      --json                one JSON object on stdout\n"
           "  -h, --help                this text\n");
}

typedef struct ppl_opts {
    const char *model, *text, *base;
    long long n_ctx, chunks, batch, threads;
    int ctx_set, kl, json, interp, no_tune, exact;
} ppl_opts;

static int parse_ll(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* 0 ok, -1 help printed, else the exit status */
static int ppl_parse(int argc, char **argv, ppl_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_ctx = 512;
    o->chunks = -1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = cores < 1 ? 1 : cores > 1024 ? 1024 : cores;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        char flag[64];
        const char *eq = strchr(a, '=');
        size_t fl = eq && a[0] == '-' && a[1] == '-' ? (size_t)(eq - a) : strlen(a);
        if (fl >= sizeof flag) fl = sizeof flag - 1;
        memcpy(flag, a, fl);
        flag[fl] = 0;
        if (!(eq && a[1] == '-')) eq = NULL;
#define IS(s) (strcmp(flag, s) == 0)
        if (IS("-h") || IS("--help")) {
            ppl_help();
            return -1;
        }
        if (IS("--json")) o->json = 1;
        else if (IS("--kl-divergence")) o->kl = 1;
        else if (IS("--interp")) o->interp = 1;
        else if (IS("--no-tune")) o->no_tune = 1;
        else if (IS("--exact")) o->exact = 1;
        else if (IS("-m") || IS("--model") || IS("-f") || IS("--file") || IS("-c") || IS("--ctx-size") ||
                 IS("--chunks") || IS("-b") || IS("--batch-size") || IS("-t") || IS("--threads") ||
                 IS("--kl-divergence-base")) {
            const char *v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
            if (!v) return pusage("%s needs a value", flag);
            int bad = 0;
            const char *want = "";
            if (IS("-m") || IS("--model")) o->model = v;
            else if (IS("-f") || IS("--file")) o->text = v;
            else if (IS("--kl-divergence-base")) o->base = v;
            else if (IS("-c") || IS("--ctx-size"))
                bad = parse_ll(v, 4, 1 << 20, &o->n_ctx), o->ctx_set = 1, want = "an integer in 4..1048576";
            else if (IS("--chunks")) bad = parse_ll(v, 1, 1 << 24, &o->chunks), want = "a positive integer";
            else if (IS("-b") || IS("--batch-size")) bad = parse_ll(v, 1, 1 << 20, &o->batch), want = "a positive integer";
            else bad = parse_ll(v, 1, 1024, &o->threads), want = "an integer in 1..1024";
            if (bad) return pusage("%s '%s' is not %s", flag, v, want);
        } else if (a[0] == '-') {
            return pusage("unknown option '%s'", a);
        } else {
            return pusage("unexpected argument '%s'", a);
        }
#undef IS
    }
    if (!o->model) return pusage("-m MODEL is required");
    if (o->kl && !o->base) return pusage("--kl-divergence needs --kl-divergence-base FILE (the base run's log-probabilities)");
    if (!o->kl && !o->text) return pusage("-f TEXT is required");
    if (o->exact) setenv("KILN_EXACT", "1", 1);
    return 0;
}

/* the whole file; NULL after an error message */
static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perr("%s: cannot open the text: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = kiln_xmalloc(cap + 1);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            buf = kiln_xrealloc(buf, cap + 1);
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        perr("%s: reading the text failed", path);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* ---- per-row work on threads ---- */
typedef struct row_job {
    const float *logits; /* rows x n_vocab */
    int64_t n_vocab;
    const int32_t *next; /* [rows]: the token each row predicts */
    int rows;
    uint16_t *qrows;       /* base written: rows x nv, else NULL */
    const uint16_t *brows; /* KL: the base's rows, else NULL */
    double *nll;           /* [rows] */
    ppl_kl_row *kl;        /* [rows] (KL) */
    int t, nt;
} row_job;

static void *row_worker(void *arg) {
    row_job *j = arg;
    int64_t nv = ppl_row_u16(j->n_vocab);
    int r0 = (int)((int64_t)j->rows * j->t / j->nt), r1 = (int)((int64_t)j->rows * (j->t + 1) / j->nt);
    for (int r = r0; r < r1; r++) {
        const float *l = j->logits + (size_t)r * (size_t)j->n_vocab;
        if (j->brows) {
            ppl_row_kl(l, j->n_vocab, j->next[r], j->brows + (size_t)r * (size_t)nv, &j->kl[r]);
            j->nll[r] = j->kl[r].nll;
        } else if (j->qrows) {
            j->nll[r] = ppl_row_quantize(l, j->n_vocab, j->next[r], j->qrows + (size_t)r * (size_t)nv);
        } else {
            j->nll[r] = ppl_row_nll(l, j->n_vocab, j->next[r]);
        }
    }
    return NULL;
}

static void score_rows(row_job *proto, int nthreads) {
    if (nthreads > proto->rows) nthreads = proto->rows > 0 ? proto->rows : 1;
    row_job jobs[64];
    pthread_t th[64];
    int started[64] = {0};
    if (nthreads > 64) nthreads = 64;
    for (int t = 0; t < nthreads; t++) {
        jobs[t] = *proto;
        jobs[t].t = t;
        jobs[t].nt = nthreads;
    }
    for (int t = 1; t < nthreads; t++) started[t] = pthread_create(&th[t], NULL, row_worker, &jobs[t]) == 0;
    row_worker(&jobs[0]);
    for (int t = 1; t < nthreads; t++) {
        if (started[t]) pthread_join(th[t], NULL);
        else row_worker(&jobs[t]);
    }
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void print_kl_summary(const ppl_kl_summary *s) {
    printf("====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", s->ppl, s->ppl_unc);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", s->ppl_base, s->ppl_base_unc);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * s->cor);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", s->ln_ratio, s->ln_ratio_unc);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", s->ratio, s->ratio_unc);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", s->diff, s->diff_unc);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", s->kld_mean, s->kld_unc);
    printf("Maximum KLD: %10.6f\n", s->kld_max);
    printf("99.9%%   KLD: %10.6f\n", s->kld_999);
    printf("99.0%%   KLD: %10.6f\n", s->kld_99);
    printf("95.0%%   KLD: %10.6f\n", s->kld_95);
    printf("90.0%%   KLD: %10.6f\n", s->kld_90);
    printf("Median  KLD: %10.6f\n", s->kld_median);
    printf("10.0%%   KLD: %10.6f\n", s->kld_10);
    printf(" 5.0%%   KLD: %10.6f\n", s->kld_5);
    printf(" 1.0%%   KLD: %10.6f\n", s->kld_1);
    printf(" 0.1%%   KLD: %10.6f\n", s->kld_01);
    printf("Minimum KLD: %10.6f\n", s->kld_min);
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100.0 * s->dp_mean, 100.0 * s->dp_unc);
    printf("Maximum Δp: %6.3f%%\n", 100.0 * s->dp_max);
    printf("99.9%%   Δp: %6.3f%%\n", 100.0 * s->dp_999);
    printf("99.0%%   Δp: %6.3f%%\n", 100.0 * s->dp_99);
    printf("95.0%%   Δp: %6.3f%%\n", 100.0 * s->dp_95);
    printf("90.0%%   Δp: %6.3f%%\n", 100.0 * s->dp_90);
    printf("75.0%%   Δp: %6.3f%%\n", 100.0 * s->dp_75);
    printf("Median  Δp: %6.3f%%\n", 100.0 * s->dp_median);
    printf("25.0%%   Δp: %6.3f%%\n", 100.0 * s->dp_25);
    printf("10.0%%   Δp: %6.3f%%\n", 100.0 * s->dp_10);
    printf(" 5.0%%   Δp: %6.3f%%\n", 100.0 * s->dp_5);
    printf(" 1.0%%   Δp: %6.3f%%\n", 100.0 * s->dp_1);
    printf(" 0.1%%   Δp: %6.3f%%\n", 100.0 * s->dp_01);
    printf("Minimum Δp: %6.3f%%\n", 100.0 * s->dp_min);
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * s->dp_rms, 100.0 * s->dp_rms_unc);
    printf("Same top p: %6.3f ± %5.3f %%\n", 100.0 * s->same_top, 100.0 * s->same_top_unc);
}

static void json_kl(const ppl_kl_summary *s) {
    printf(",\n  \"kl\": {\"ppl_base\": %.6f, \"ppl_base_unc\": %.6f, \"ln_ppl_ratio\": %.6f, \"ln_ppl_ratio_unc\": %.6f, "
           "\"ppl_ratio\": %.6f, \"ppl_ratio_unc\": %.6f, \"ppl_diff\": %.6f, \"cor\": %.6f,\n"
           "    \"kld_mean\": %.8g, \"kld_unc\": %.8g, \"kld_max\": %.8g, \"kld_99_9\": %.8g, \"kld_99\": %.8g, "
           "\"kld_95\": %.8g, \"kld_90\": %.8g, \"kld_median\": %.8g, \"kld_min\": %.8g,\n"
           "    \"dp_mean\": %.8g, \"dp_max\": %.8g, \"dp_min\": %.8g, \"dp_rms\": %.8g, \"dp_rms_unc\": %.8g, "
           "\"same_top_p\": %.8g, \"same_top_p_unc\": %.8g}",
           s->ppl_base, s->ppl_base_unc, s->ln_ratio, s->ln_ratio_unc, s->ratio, s->ratio_unc, s->diff, s->cor,
           s->kld_mean, s->kld_unc, s->kld_max, s->kld_999, s->kld_99, s->kld_95, s->kld_90, s->kld_median,
           s->kld_min, s->dp_mean, s->dp_max, s->dp_min, s->dp_rms, s->dp_rms_unc, s->same_top, s->same_top_unc);
}

/* does the tokenizer add BOS (and nothing else) to a text? */
static int adds_bos(const tokenizer *tk, int *adds_eos) {
    int32_t ids[4];
    int n = tok_encode(tk, "", 0, 1, 0, ids, 4);
    int bos = tok_bos(tk), eos = tok_eos(tk);
    *adds_eos = 0;
    for (int i = 0; i < n && i < 4; i++)
        if (ids[i] == eos && eos >= 0 && !(i == 0 && eos == bos)) *adds_eos = 1;
    return n >= 1 && bos >= 0 && ids[0] == bos;
}

/* the text's tokens as llama-perplexity makes them (BOS first when the model
 * adds it, special tokens not parsed); NULL after an error message */
static int32_t *tokenize(const tokenizer *tk, const char *text, size_t len, int add_bos, int64_t *n_out) {
    int n = tok_encode(tk, text, len, 0, 0, NULL, 0);
    if (n < 0) {
        perr("the text is too long to tokenize");
        return NULL;
    }
    int32_t *ids = kiln_xmalloc(((size_t)n + 2) * sizeof *ids);
    int off = add_bos ? 1 : 0;
    if (add_bos) ids[0] = tok_bos(tk);
    tok_encode(tk, text, len, 0, 0, ids + off, n);
    *n_out = n + off;
    return ids;
}

int cmd_perplexity(int argc, char **argv) {
    ppl_opts o;
    int rc = ppl_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    char err[1024];

    /* the base file first: its context decides the model's */
    ppl_base base;
    memset(&base, 0, sizeof base);
    if (o.kl) {
        if (ppl_base_open(o.base, &base, err, sizeof err)) return perr("%s", err);
        if (o.ctx_set && o.n_ctx != base.n_ctx) {
            int32_t bctx = base.n_ctx;
            ppl_base_close(&base);
            return perr("%s was written with a context of %d tokens, but -c says %lld", o.base, bctx, o.n_ctx);
        }
        o.n_ctx = base.n_ctx;
    }
    size_t text_len = 0;
    char *text = NULL;
    if (o.text) {
        text = read_text(o.text, &text_len);
        if (!text) {
            ppl_base_close(&base);
            return 1;
        }
        if (text_len == 0) {
            free(text);
            ppl_base_close(&base);
            return perr("%s: the text is empty", o.text);
        }
    }
    /* the model's own context bounds -c (checked before the compile) */
    {
        gguf_file *gf = NULL;
        arch_hparams hp;
        if (gguf_open(o.model, 0, &gf, err, sizeof err) == KILN_OK &&
            arch_read_hparams(gf, &hp, err, sizeof err) == KILN_OK && o.n_ctx > hp.n_ctx_train) {
            gguf_close(gf);
            free(text);
            ppl_base_close(&base);
            return perr("-c %lld is above the model's context of %lld tokens", o.n_ctx, (long long)hp.n_ctx_train);
        }
        gguf_close(gf);
    }
    if (o.batch <= 0 || o.batch > o.n_ctx) o.batch = o.n_ctx;

    model_options mo = model_default_options();
    mo.n_ctx = o.n_ctx;
    mo.gguf_flags = (unsigned)GGUF_OPEN_READ;
    mo.compiled = !o.interp;
    mo.threads = (int)o.threads;
    mo.all_logits = 1;
    mo.exact = o.exact;
    if (!o.interp && isatty(2))
        fprintf(stderr, "kiln perplexity: loading and compiling the model (the first compile takes a while) ...\n");
    double t0 = ppl_now();
    model *m = NULL;
    kiln_status st = model_load_ex(o.model, &mo, &m, err, sizeof err);
    if (st != KILN_OK) {
        free(text);
        ppl_base_close(&base);
        if (err[0] && strstr(err, o.model)) return perr("%s", err);
        return perr("%s: %s", o.model, err[0] ? err : kiln_status_name(st));
    }
    double load_s = ppl_now() - t0;
    int exact = model_program(m) ? kiln_program_exact(model_program(m)) : 0;
    if (!exact && kiln_cli_first_run_search("perplexity", m, o.no_tune)) {
        model_free(m);
        free(text);
        ppl_base_close(&base);
        return 1;
    }
    kiln_cli_print_arith("perplexity", m);
    tokenizer *tk = NULL;
    if (tok_from_gguf(model_gguf(m), &tk, err, sizeof err) != KILN_OK) {
        model_free(m);
        free(text);
        ppl_base_close(&base);
        return perr("%s: %s", o.model, err);
    }
    int64_t n_vocab = model_n_vocab(m);
    int adds_eos = 0, add_bos = adds_bos(tk, &adds_eos);
    int32_t *tokens = NULL;
    int64_t ntok = 0;
    rc = 0;
    if (tok_n_vocab(tk) > n_vocab) rc = perr("%s: the tokenizer has %d tokens but the model only %lld embeddings", o.model,
                                            (int)tok_n_vocab(tk), (long long)n_vocab);
    else if (adds_eos) rc = perr("%s: the tokenizer adds EOS to a text; perplexity needs one that does not", o.model);
    if (!rc && text) {
        tokens = tokenize(tk, text, text_len, add_bos, &ntok);
        if (!tokens) rc = 1;
    }
    int64_t n_ctx = o.n_ctx;
    int64_t n_chunk = 0;
    if (!rc && o.kl) {
        if (base.n_vocab != n_vocab) {
            rc = perr("%s has log-probabilities over a vocabulary of %d, the model %s has %lld", o.base, base.n_vocab,
                      o.model, (long long)n_vocab);
        } else if (tokens) {
            int64_t nb = (int64_t)base.n_chunk * n_ctx;
            int64_t lim = ntok < nb ? ntok : nb;
            for (int64_t i = 0; i < lim && !rc; i++)
                if (tokens[i] != base.tokens[i])
                    rc = perr("the text's token %lld (chunk %lld) is %d, but %s has %d there: the base was made from "
                              "another text or tokenizer",
                              (long long)i, (long long)(i / n_ctx + 1), tokens[i], o.base, base.tokens[i]);
            if (!rc && ntok < nb)
                rc = perr("the text has %lld tokens, fewer than the %lld of %s (%d chunks of %lld)", (long long)ntok,
                          (long long)nb, o.base, base.n_chunk, (long long)n_ctx);
        }
        if (!rc) {
            free(tokens);
            ntok = (int64_t)base.n_chunk * n_ctx;
            tokens = kiln_xmalloc((size_t)ntok * sizeof *tokens);
            memcpy(tokens, base.tokens, (size_t)ntok * sizeof *tokens);
            n_chunk = base.n_chunk;
        }
    } else if (!rc) {
        if (ntok < 2 * n_ctx)
            rc = perr("%s tokenizes to %lld tokens; a context of %lld needs at least %lld (two chunks)", o.text,
                      (long long)ntok, (long long)n_ctx, (long long)(2 * n_ctx));
        n_chunk = ntok / n_ctx;
    }
    if (!rc && o.chunks > 0 && o.chunks < n_chunk) n_chunk = o.chunks;
    for (int64_t i = 0; i < ntok && !rc; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab) rc = perr("token %lld has id %d, outside the model's vocabulary", (long long)i, tokens[i]);
    FILE *bf = NULL;
    if (!rc && o.base && !o.kl) {
        if (ppl_base_create(o.base, (int32_t)n_ctx, (int32_t)n_vocab, (int32_t)n_chunk, tokens, &bf, err, sizeof err))
            rc = perr("%s", err);
    }
    if (rc) {
        tok_free(tk);
        model_free(m);
        free(text);
        free(tokens);
        ppl_base_close(&base);
        return rc;
    }

    const int first = ppl_first((int)n_ctx), scored = ppl_scored((int)n_ctx);
    const int64_t nv = ppl_row_u16(n_vocab);
    float *logits = kiln_xmalloc((size_t)(n_ctx - first) * (size_t)n_vocab * sizeof(float));
    float *scratch = kiln_xmalloc((size_t)n_vocab * sizeof(float));
    int32_t *ctoks = kiln_xmalloc((size_t)n_ctx * sizeof *ctoks);
    double *nll = kiln_xcalloc((size_t)scored, sizeof *nll);
    ppl_kl_row *klr = o.kl ? kiln_xcalloc((size_t)scored, sizeof *klr) : NULL;
    uint16_t *qrows = (o.base ? kiln_xmalloc((size_t)scored * (size_t)nv * sizeof *qrows) : NULL);
    ppl_acc acc = {0, 0, 0};
    ppl_kl_stats kls;
    memset(&kls, 0, sizeof kls);
    double *running = kiln_xcalloc((size_t)n_chunk, sizeof *running);
    int tty = isatty(2);
    if (!o.json)
        fprintf(stderr, "kiln perplexity: %lld chunks of %lld tokens (%lld of the text's %lld), %d scored per chunk, "
                        "batch %lld, %lld thread%s%s\n",
                (long long)n_chunk, (long long)n_ctx, (long long)(n_chunk * n_ctx), (long long)ntok, scored,
                o.batch, o.threads, o.threads == 1 ? "" : "s", add_bos ? ", BOS first" : "");
    if (o.kl && !o.json)
        printf("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS"
               "            Same top p\n");
    double te0 = ppl_now();
    for (int64_t c = 0; c < n_chunk && !rc; c++) {
        const int32_t *src = tokens + c * n_ctx;
        memcpy(ctoks, src, (size_t)n_ctx * sizeof *ctoks);
        if (add_bos) ctoks[0] = tok_bos(tk);
        model_reset(m);
        for (int64_t p = 0; p < n_ctx && !rc; p += o.batch) {
            int n = (int)(n_ctx - p < o.batch ? n_ctx - p : o.batch);
            int from = first > p ? (int)(first - p) : 0;
            float *dst;
            if (from >= n) {
                from = n - 1; /* no scored row in this batch: the last one, thrown away */
                dst = scratch;
            } else {
                dst = logits + (size_t)(p + from - first) * (size_t)n_vocab;
            }
            if (model_forward_rows(m, ctoks + p, n, (int)p, from, dst) != KILN_OK)
                rc = perr("chunk %lld: %s", (long long)(c + 1), model_error(m));
        }
        if (rc) break;
        if (o.kl && ppl_base_read_chunk(&base, qrows, err, sizeof err)) {
            rc = perr("%s", err);
            break;
        }
        row_job job;
        memset(&job, 0, sizeof job);
        job.logits = logits;
        job.n_vocab = n_vocab;
        job.next = src + first + 1;
        job.rows = scored;
        job.qrows = o.kl ? NULL : qrows;
        job.brows = o.kl ? qrows : NULL;
        job.nll = nll;
        job.kl = klr;
        score_rows(&job, (int)o.threads);
        for (int r = 0; r < scored; r++) {
            ppl_acc_add(&acc, nll[r]);
            if (o.kl) ppl_kl_add(&kls, &klr[r]);
        }
        if (bf && ppl_base_write_rows(bf, o.base, qrows, (size_t)scored * (size_t)nv, err, sizeof err)) {
            rc = perr("%s", err);
            break;
        }
        running[c] = ppl_acc_ppl(&acc, NULL);
        if (o.kl && !o.json) {
            if (tty) fprintf(stderr, "\r\033[K"); /* the row, then the progress line again */
            ppl_kl_summary s;
            ppl_kl_summarize(&kls, 0, &s);
            printf("%4lld    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%    %6.3f ± %6.3f %%\n",
                   (long long)(c + 1), s.ppl, s.ppl_unc, s.ln_ratio, s.ln_ratio_unc, s.kld_mean, s.kld_unc,
                   100 * s.dp_rms, 100 * s.dp_rms_unc, 100 * s.same_top, 100 * s.same_top_unc);
            fflush(stdout);
        } else if (!o.json && !tty) {
            printf("[%lld]%.4f,", (long long)(c + 1), running[c]);
            fflush(stdout);
        }
        if (tty) {
            double per = (ppl_now() - te0) / (double)(c + 1);
            fprintf(stderr, "\r\033[Kkiln perplexity: chunk %lld/%lld, %.2f s per chunk, %.0f s left, PPL so far %.4f",
                    (long long)(c + 1), (long long)n_chunk, per, per * (double)(n_chunk - c - 1), running[c]);
            fflush(stderr);
        }
    }
    double eval_s = ppl_now() - te0;
    if (tty) fprintf(stderr, "\r\033[K");
    if (bf && fclose(bf) != 0 && !rc) rc = perr("%s: writing failed", o.base);
    if (!rc) {
        double unc = 0, ppl = ppl_acc_ppl(&acc, &unc);
        ppl_kl_summary ks;
        memset(&ks, 0, sizeof ks);
        if (o.kl) ppl_kl_summarize(&kls, 1, &ks);
        int ac[2][3];
        int ncon = model_program(m) ? kiln_program_arith(model_program(m), ac) : 0;
        if (!model_program(m)) memset(ac, 0, sizeof ac);
        if (o.json) {
            printf("{\"model\": ");
            json_string(stdout, o.model);
            printf(", \"text\": ");
            json_string(stdout, o.text ? o.text : "");
            printf(", \"n_ctx\": %lld, \"n_batch\": %lld, \"threads\": %lld, \"n_vocab\": %lld, \"tokens\": %lld, "
                   "\"chunks\": %lld, \"scored\": %lld, \"add_bos\": %s,\n",
                   (long long)n_ctx, o.batch, o.threads, (long long)n_vocab, (long long)ntok, (long long)n_chunk,
                   (long long)acc.count, add_bos ? "true" : "false");
            printf("  \"backend\": \"%s\", \"exact\": %s, \"contractions\": %d, \"arith\": {\"decode\": {\"f32\": %d, "
                   "\"int8\": %d, \"bf16\": %d}, \"prefill\": {\"f32\": %d, \"int8\": %d, \"bf16\": %d}},\n",
                   o.interp ? "interp" : getenv("KILN_BACKEND") ? getenv("KILN_BACKEND") : "cpu",
                   exact || o.interp ? "true" : "false", ncon, ac[0][0], ac[0][1], ac[0][2], ac[1][0], ac[1][1],
                   ac[1][2]);
            printf("  \"ppl\": %.8g, \"ppl_unc\": %.8g, \"nll_mean\": %.10g, \"load_seconds\": %.3f, \"seconds\": %.3f, "
                   "\"running\": [",
                   ppl, unc, acc.count ? acc.nll / (double)acc.count : 0.0, load_s, eval_s);
            for (int64_t c = 0; c < n_chunk; c++) printf("%s%.6f", c ? ", " : "", running[c]);
            printf("]");
            if (o.kl) json_kl(&ks);
            printf("}\n");
        } else {
            if (!o.kl) {
                if (tty)
                    for (int64_t c = 0; c < n_chunk; c++) printf("[%lld]%.4f,", (long long)(c + 1), running[c]);
                printf("\n");
                printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, unc);
            } else {
                printf("\n");
                print_kl_summary(&ks);
            }
            fflush(stdout);
            fprintf(stderr, "kiln perplexity: %lld chunks in %.2f s (%.2f s per chunk, %.0f tokens/s); load%s %.2f s\n",
                    (long long)n_chunk, eval_s, eval_s / (double)n_chunk, (double)(n_chunk * n_ctx) / eval_s,
                    o.interp ? "" : " and compile", load_s);
            if (o.base && !o.kl) fprintf(stderr, "kiln perplexity: log-probabilities written to %s\n", o.base);
        }
        if (fflush(stdout) != 0) rc = 1;
    }
    free(running);
    free(qrows);
    free(klr);
    free(nll);
    free(ctoks);
    free(scratch);
    free(logits);
    ppl_kl_free(&kls);
    tok_free(tk);
    model_free(m);
    free(text);
    free(tokens);
    ppl_base_close(&base);
    return rc;
}
