/* chat.h — a conversation (role, content pairs) rendered as the prompt text a
 * chat model was trained on.
 *
 * The model's own tokenizer.chat_template (a Jinja template, rendered by
 * kiln's Jinja-subset interpreter, jinja.h) is used when the file has one;
 * otherwise, or when a name is given, one of the built-in formats: "gemma",
 * "chatml" (qwen), "llama3", "llama2". Without a template and without a name
 * the format is guessed from the architecture and the vocabulary's special
 * tokens; callers warn about that (chat_has_template).
 *
 * Invariants: the output is exactly what the template produces, special
 * tokens as text (the caller tokenizes with special-token parsing on). A
 * template's {{ bos_token }} is rendered as the BOS token's text, so a caller
 * whose tokenizer also adds BOS must drop one of the two.
 */
#ifndef KILN_CHAT_H
#define KILN_CHAT_H

#include <stddef.h>

#include "gguf.h"
#include "kiln.h"

typedef struct chat_msg {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
} chat_msg;

/* Renders msgs with the model's tokenizer.chat_template when it has one, else with the
 * named template ("gemma", "chatml", "llama3", "llama2"); template_name non-NULL forces it.
 * add_generation_prompt appends the assistant turn's opening. On KILN_OK *out is a malloc'd
 * NUL-terminated string the caller frees; on error err gets the message. */
kiln_status chat_render(const gguf_file *f, const char *template_name, const chat_msg *msgs, int n_msgs,
                        int add_generation_prompt, char **out, char *err, size_t errlen);

/* 1 when the file has a tokenizer.chat_template string */
int chat_has_template(const gguf_file *f);
/* the built-in format chat_render falls back to for f (f may be NULL: "chatml") */
const char *chat_fallback_name(const gguf_file *f);
/* 1 when name is a built-in format */
int chat_is_builtin(const char *name);

#endif
