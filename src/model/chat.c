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
#include "jinja.h"

/* The families' published templates (Hugging Face tokenizer_config.json),
 * text-only parts; rendered like a model's own. */
static const char GEMMA_TMPL[] =
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n";

static const char CHATML_TMPL[] =
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

static const char LLAMA3_TMPL[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
    " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

static const char LLAMA2_TMPL[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

static const struct builtin {
    const char *name, *marker, *tmpl;
} builtins[] = {
    {"gemma", "<start_of_turn>", GEMMA_TMPL},
    {"llama3", "<|start_header_id|>", LLAMA3_TMPL},
    {"chatml", "<|im_start|>", CHATML_TMPL},
    {"llama2", "[INST]", LLAMA2_TMPL},
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

/* the text of the token whose id is the value of key ("" when there is none) */
static const char *token_text(const gguf_file *f, const char *key, char *buf, size_t cap) {
    buf[0] = 0;
    const gguf_kv *id = f ? gguf_find(f, key) : NULL, *toks = f ? gguf_find(f, "tokenizer.ggml.tokens") : NULL;
    if (!id || id->type == GGUF_TYPE_ARRAY || id->type == GGUF_TYPE_STRING || !id->data || !toks || !toks->strs ||
        toks->elem != GGUF_TYPE_STRING)
        return buf;
    int64_t v;
    if (gguf_arr_int(id, 0, &v) != KILN_OK || v < 0 || (uint64_t)v >= toks->count) return buf;
    gguf_str s = toks->strs[v];
    snprintf(buf, cap, "%.*s", (int)(s.len < cap ? s.len : cap - 1), s.ptr);
    return buf;
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
    const gguf_str *own = template_name ? NULL : kv_str(f, "tokenizer.chat_template");
    const char *tmpl;
    size_t tlen;
    if (own) {
        tmpl = own->ptr, tlen = (size_t)own->len;
    } else {
        const char *name = template_name ? template_name : chat_fallback_name(f);
        const struct builtin *bt = builtin_named(name);
        if (!bt) {
            snprintf(err, errlen, "chat: unknown chat template '%s' (known: gemma, chatml, llama3, llama2)", name);
            return KILN_ERR_INVALID;
        }
        tmpl = bt->tmpl, tlen = strlen(bt->tmpl);
    }
    const char **vals = kiln_xmalloc((size_t)(n_msgs ? n_msgs : 1) * 2 * sizeof *vals);
    for (int i = 0; i < n_msgs; i++) vals[2 * i] = msgs[i].role, vals[2 * i + 1] = msgs[i].content;
    static const char *const keys[] = {"role", "content"};
    jinja_ctx *c = jinja_ctx_new();
    jinja_set_records(c, "messages", keys, 2, vals, n_msgs);
    jinja_set_bool(c, "add_generation_prompt", add_generation_prompt);
    char tok[256];
    jinja_set_str(c, "bos_token", token_text(f, "tokenizer.ggml.bos_token_id", tok, sizeof tok));
    jinja_set_str(c, "eos_token", token_text(f, "tokenizer.ggml.eos_token_id", tok, sizeof tok));
    kiln_status st = jinja_render(tmpl, tlen, c, out, err, errlen);
    jinja_ctx_free(c);
    free(vals);
    return st;
}
