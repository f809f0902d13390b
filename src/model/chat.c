/* chat.c — conversations rendered as prompt text (chat.h).
 *
 * The built-in formats are written out here from the families' documented
 * prompt formats; the model's own template, when it has one, is rendered by
 * the Jinja-subset interpreter (jinja.h) with the variables the published
 * templates read: messages, add_generation_prompt, bos_token, eos_token.
 *
 * Invariants: every path returns a malloc'd string or an error with a message;
 * nothing here keeps state between calls.
 */
#include "chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

/* a growable string (freed by the caller on every path) */
typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_addn(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n + 16);
        b->p = kiln_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_add(sbuf *b, const char *s) { sb_addn(b, s, strlen(s)); }

/* s without leading and trailing white space, as Python's str.strip() */
static void sb_add_trim(sbuf *b, const char *s) {
    size_t n = strlen(s);
    while (n && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) n--;
    sb_addn(b, s, n);
}

static int is_role(const chat_msg *m, const char *r) { return m->role && strcmp(m->role, r) == 0; }

/* gemma: no system role; a system message is prepended to the first user
 * turn, separated by a blank line; the assistant's role is "model" */
static void render_gemma(sbuf *b, const chat_msg *msgs, int n, int gen) {
    const char *sys = NULL;
    int i = 0;
    if (n > 0 && is_role(&msgs[0], "system")) sys = msgs[0].content, i = 1;
    for (; i < n; i++) {
        sb_add(b, "<start_of_turn>");
        sb_add(b, is_role(&msgs[i], "assistant") ? "model" : msgs[i].role);
        sb_add(b, "\n");
        if (sys) {
            sb_add(b, sys);
            sb_add(b, "\n\n");
            sys = NULL;
        }
        sb_add_trim(b, msgs[i].content);
        sb_add(b, "<end_of_turn>\n");
    }
    if (gen) sb_add(b, "<start_of_turn>model\n");
}

static void render_chatml(sbuf *b, const chat_msg *msgs, int n, int gen) {
    for (int i = 0; i < n; i++) {
        sb_add(b, "<|im_start|>");
        sb_add(b, msgs[i].role);
        sb_add(b, "\n");
        sb_add(b, msgs[i].content);
        sb_add(b, "<|im_end|>\n");
    }
    if (gen) sb_add(b, "<|im_start|>assistant\n");
}

static void render_llama3(sbuf *b, const chat_msg *msgs, int n, int gen) {
    for (int i = 0; i < n; i++) {
        sb_add(b, "<|start_header_id|>");
        sb_add(b, msgs[i].role);
        sb_add(b, "<|end_header_id|>\n\n");
        sb_add_trim(b, msgs[i].content);
        sb_add(b, "<|eot_id|>");
    }
    if (gen) sb_add(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* llama2: [INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ...;
 * the first BOS is the tokenizer's */
static void render_llama2(sbuf *b, const chat_msg *msgs, int n, int gen) {
    (void)gen; /* the generation prompt is the [/INST] every user turn ends with */
    const char *sys = NULL;
    int i = 0, first = 1;
    if (n > 0 && is_role(&msgs[0], "system")) sys = msgs[0].content, i = 1;
    for (; i < n; i++) {
        if (is_role(&msgs[i], "assistant")) {
            sb_add(b, " ");
            sb_add_trim(b, msgs[i].content);
            sb_add(b, " </s>");
            continue;
        }
        sb_add(b, first ? "[INST] " : "<s>[INST] ");
        first = 0;
        if (sys) {
            sb_add(b, "<<SYS>>\n");
            sb_add_trim(b, sys);
            sb_add(b, "\n<</SYS>>\n\n");
            sys = NULL;
        }
        sb_add_trim(b, msgs[i].content);
        sb_add(b, " [/INST]");
    }
}

static const struct builtin {
    const char *name, *marker;
    void (*render)(sbuf *, const chat_msg *, int, int);
} builtins[] = {
    {"gemma", "<start_of_turn>", render_gemma},
    {"llama3", "<|start_header_id|>", render_llama3},
    {"chatml", "<|im_start|>", render_chatml},
    {"llama2", "[INST]", render_llama2},
};
#define N_BUILTIN (sizeof builtins / sizeof builtins[0])

static const struct builtin *builtin_named(const char *name) {
    for (size_t i = 0; i < N_BUILTIN; i++)
        if (strcmp(builtins[i].name, name) == 0) return &builtins[i];
    return NULL;
}

int chat_is_builtin(const char *name) { return name && builtin_named(name) != NULL; }

/* the file's string value for key, or NULL */
static const gguf_str *kv_str(const gguf_file *f, const char *key) {
    const gguf_kv *kv = f ? gguf_find(f, key) : NULL;
    return kv && kv->type == GGUF_TYPE_STRING && kv->strs ? &kv->strs[0] : NULL;
}

int chat_has_template(const gguf_file *f) { return kv_str(f, "tokenizer.chat_template") != NULL; }

static int bytes_contain(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; k <= n && i <= n - k; i++)
        if (memcmp(s + i, needle, k) == 0) return 1;
    return 0;
}

static int vocab_has(const gguf_file *f, const char *tok) {
    const gguf_kv *kv = gguf_find(f, "tokenizer.ggml.tokens");
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->elem != GGUF_TYPE_STRING || !kv->strs) return 0;
    size_t n = strlen(tok);
    for (uint64_t i = 0; i < kv->count; i++)
        if (kv->strs[i].len == n && memcmp(kv->strs[i].ptr, tok, n) == 0) return 1;
    return 0;
}

const char *chat_fallback_name(const gguf_file *f) {
    if (!f) return "chatml";
    const gguf_str *tpl = kv_str(f, "tokenizer.chat_template");
    if (tpl)
        for (size_t i = 0; i < N_BUILTIN; i++)
            if (bytes_contain(tpl->ptr, (size_t)tpl->len, builtins[i].marker)) return builtins[i].name;
    const gguf_str *a = kv_str(f, "general.architecture");
    if (a && (gguf_str_eq(*a, "gemma3") || gguf_str_eq(*a, "gemma2") || gguf_str_eq(*a, "gemma"))) return "gemma";
    if (a && (gguf_str_eq(*a, "qwen2") || gguf_str_eq(*a, "qwen3"))) return "chatml";
    if (vocab_has(f, "<|start_header_id|>")) return "llama3";
    if (vocab_has(f, "<|im_start|>")) return "chatml";
    if (vocab_has(f, "<start_of_turn>")) return "gemma";
    return "llama2";
}

kiln_status chat_render(const gguf_file *f, const char *template_name, const chat_msg *msgs, int n_msgs,
                        int add_generation_prompt, char **out, char *err, size_t errlen) {
    *out = NULL;
    if (n_msgs < 0 || (n_msgs > 0 && !msgs)) {
        snprintf(err, errlen, "chat: no messages");
        return KILN_ERR_INVALID;
    }
    for (int i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content) {
            snprintf(err, errlen, "chat: message %d has no %s", i, msgs[i].role ? "content" : "role");
            return KILN_ERR_INVALID;
        }
    const char *name = template_name ? template_name : chat_fallback_name(f);
    const struct builtin *bt = builtin_named(name);
    if (!bt) {
        snprintf(err, errlen, "chat: unknown chat template '%s' (known: gemma, chatml, llama3, llama2)", name);
        return KILN_ERR_INVALID;
    }
    sbuf b = {0};
    sb_add(&b, "");
    bt->render(&b, msgs, n_msgs, add_generation_prompt);
    *out = b.p;
    return KILN_OK;
}
