/* chat_loop.c — `kiln run --chat -i`: a multi-turn conversation on stdin.
 *
 * Each turn appends the user's line to the conversation, renders the whole
 * conversation with the chat template (chat_render), and prefills only the
 * tokens after the longest prefix the KV cache already holds, so a turn costs
 * its own tokens, not the history's. The reply is streamed to stdout and added
 * to the conversation as the assistant's message.
 *
 * Invariants: cache[0 .. n_cache) are exactly the tokens whose keys and
 * values sit in the model's KV cache at positions 0 .. n_cache-1; a forward
 * pass that fails leaves n_cache at the prefix it kept.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "chat.h"
#include "kiln_cli.h"
#include "sampler.h"

typedef struct convo {
    chat_msg *msgs;
    char **owned; /* the strings msgs point at, freed at the end */
    int n, cap;
} convo;

static void convo_add(convo *c, const char *role, char *content) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 8;
        c->msgs = kiln_xrealloc(c->msgs, (size_t)c->cap * sizeof *c->msgs);
        c->owned = kiln_xrealloc(c->owned, (size_t)c->cap * sizeof *c->owned);
    }
    c->msgs[c->n] = (chat_msg){role, content};
    c->owned[c->n++] = content;
}

static void convo_free(convo *c) {
    for (int i = 0; i < c->n; i++) free(c->owned[i]);
    free(c->msgs);
    free(c->owned);
}

/* one line of stdin without its newline, or NULL at end of input */
static char *read_line(void) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    return line;
}

/* generate one reply after prompt ids[0..n); returns the reply text or NULL */
static char *turn(model *m, const tokenizer *tk, const sampler_params *sp, long long n_predict, const int32_t *ids,
                  int n, int32_t *cache, int *n_cache, float *logits) {
    int keep = 0;
    while (keep < *n_cache && keep < n - 1 && cache[keep] == ids[keep]) keep++;
    *n_cache = keep;
    if (model_forward(m, ids + keep, n - keep, keep, logits) != KILN_OK) {
        fprintf(stderr, "kiln run: %s\n", model_error(m));
        return NULL;
    }
    memcpy(cache + keep, ids + keep, (size_t)(n - keep) * sizeof *ids);
    *n_cache = n;
    sampler *smp = NULL;
    char err[256];
    if (sampler_new(sp, (int32_t)model_n_vocab(m), &smp, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "kiln run: %s\n", err);
        return NULL;
    }
    for (int i = 0; i < n; i++) sampler_accept(smp, ids[i]);
    tok_stream *ts = tok_stream_new(tk, 0, 0); /* as kiln run: text after a prompt */
    char *text = kiln_xmalloc(1);
    size_t len = 0;
    text[0] = 0;
    int ok = 1;
    for (long long g = 0; g < n_predict; g++) {
        int32_t id = sampler_sample(smp, logits);
        if (id < 0 || id >= tok_n_vocab(tk) || tok_is_eog(tk, id)) break;
        sampler_accept(smp, id);
        const char *piece;
        size_t plen = 0;
        tok_stream_push(ts, id, &piece, &plen);
        fwrite(piece, 1, plen, stdout);
        fflush(stdout);
        text = kiln_xrealloc(text, len + plen + 1);
        memcpy(text + len, piece, plen);
        text[len += plen] = 0;
        if (g + 1 == n_predict) break;
        if (*n_cache >= model_n_ctx(m)) {
            fprintf(stderr, "\nkiln run: the context (%lld tokens) is full\n", (long long)model_n_ctx(m));
            break;
        }
        if (model_forward(m, &id, 1, *n_cache, logits) != KILN_OK) {
            fprintf(stderr, "\nkiln run: %s\n", model_error(m));
            ok = 0;
            break;
        }
        cache[(*n_cache)++] = id;
    }
    const char *tail;
    size_t tlen = 0;
    tok_stream_flush(ts, &tail, &tlen);
    fwrite(tail, 1, tlen, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    tok_stream_free(ts);
    sampler_free(smp);
    if (!ok) {
        free(text);
        return NULL;
    }
    text = kiln_xrealloc(text, len + tlen + 1);
    memcpy(text + len, tail, tlen);
    text[len + tlen] = 0;
    return text;
}

int kiln_cli_chat_loop(model *m, const tokenizer *tk, const char *tmpl, const char *sys, const char *first,
                       const sampler_params *sp, long long n_predict) {
    gguf_file *f = model_gguf(m);
    convo c = {0};
    if (sys) convo_add(&c, "system", kiln_xstrdup(sys));
    int32_t *cache = kiln_xmalloc((size_t)model_n_ctx(m) * sizeof *cache);
    float *logits = kiln_xmalloc((size_t)model_n_vocab(m) * sizeof *logits);
    int n_cache = 0, rc = 0, tty = isatty(0);
    model_reset(m);
    for (;;) {
        if (tty) fputs("> ", stderr);
        char *line = first ? kiln_xstrdup(first) : read_line();
        first = NULL;
        if (!line || !line[0]) {
            free(line);
            break;
        }
        convo_add(&c, "user", line);
        char *text = kiln_cli_chat_text("run", f, tmpl, c.msgs, c.n);
        int32_t *ids = NULL;
        int n = text ? kiln_cli_encode(tk, text, 1, &ids) : -1;
        free(text);
        if (n <= 0 || n >= model_n_ctx(m)) {
            if (n > 0)
                fprintf(stderr, "kiln run: the conversation has %d tokens, more than the context of %lld holds"
                                " (use --ctx)\n",
                        n, (long long)model_n_ctx(m));
            else if (text) fprintf(stderr, "kiln run: the conversation encodes to no tokens\n");
            free(ids);
            rc = 1;
            break;
        }
        char *reply = turn(m, tk, sp, n_predict, ids, n, cache, &n_cache, logits);
        free(ids);
        if (!reply) {
            rc = 1;
            break;
        }
        convo_add(&c, "assistant", reply);
    }
    free(cache);
    free(logits);
    convo_free(&c);
    return rc;
}
