/* chat_cli.c — the command line's side of chat (kiln run --chat, -sys, -f,
 * --chat-template, -i) and of `kiln serve`: reading a prompt file, turning a
 * conversation into prompt tokens through chat_render (src/model/chat.h),
 * and the warning when a model has no template of its own.
 *
 * Invariants: functions print their own errors on stderr as "kiln CMD: ..."
 * and return NULL / -1 on failure; what they return is malloc'd and the
 * caller's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "chat.h"
#include "kiln_cli.h"

char *kiln_cli_read_text(const char *cmd, const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "kiln %s: cannot open %s: %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    size_t n = 0, cap = 4096;
    char *buf = kiln_xmalloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, fp)) > 0) {
        n += got;
        if (n + 1 >= cap) {
            if (cap > ((size_t)1 << 30)) {
                fprintf(stderr, "kiln %s: %s is larger than 1 GiB\n", cmd, path);
                free(buf);
                fclose(fp);
                return NULL;
            }
            buf = kiln_xrealloc(buf, cap *= 2);
        }
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        fprintf(stderr, "kiln %s: reading %s failed\n", cmd, path);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    if (strlen(buf) != n) {
        fprintf(stderr, "kiln %s: %s contains a NUL byte: not a text prompt\n", cmd, path);
        free(buf);
        return NULL;
    }
    return buf;
}

void kiln_cli_chat_announce(const char *cmd, gguf_file *f, const char *tmpl) {
    if (tmpl) fprintf(stderr, "kiln %s: chat template %s (built-in, as asked)\n", cmd, tmpl);
    else if (chat_has_template(f)) fprintf(stderr, "kiln %s: chat template from the model (tokenizer.chat_template)\n", cmd);
    else
        fprintf(stderr,
                "kiln %s: warning: the model has no chat template (a base model?): chat template %s, a built-in"
                " format guessed from its vocabulary (--chat-template NAME chooses one)\n",
                cmd, chat_fallback_name(f));
}

char *kiln_cli_chat_text(const char *cmd, gguf_file *f, const char *tmpl, const chat_msg *msgs, int n) {
    char *out = NULL, err[512];
    if (chat_render(f, tmpl, msgs, n, 1, &out, err, sizeof err) == KILN_OK) return out;
    if (tmpl || !chat_has_template(f)) {
        fprintf(stderr, "kiln %s: %s\n", cmd, err);
        return NULL;
    }
    /* the model's own template uses what kiln's Jinja subset lacks, or refused
     * the conversation: say so, and use the built-in format of its family */
    const char *name = chat_fallback_name(f);
    fprintf(stderr, "kiln %s: warning: the model's chat template failed (%s); using the built-in '%s' format\n", cmd,
            err, name);
    if (chat_render(f, name, msgs, n, 1, &out, err, sizeof err) == KILN_OK) return out;
    fprintf(stderr, "kiln %s: %s\n", cmd, err);
    return NULL;
}

int kiln_cli_encode(const tokenizer *tk, const char *text, int special, int32_t **out) {
    *out = NULL;
    int n = tok_encode(tk, text, strlen(text), 1, special, NULL, 0);
    if (n <= 0) return n;
    int32_t *ids = kiln_xmalloc((size_t)n * sizeof *ids);
    tok_encode(tk, text, strlen(text), 1, special, ids, n);
    /* a template that writes {{ bos_token }} and a tokenizer that adds BOS: one BOS */
    int32_t bos = tok_bos(tk);
    if (n >= 2 && bos >= 0 && ids[0] == bos && ids[1] == bos) {
        memmove(ids, ids + 1, (size_t)(n - 1) * sizeof *ids);
        n--;
    }
    *out = ids;
    return n;
}
