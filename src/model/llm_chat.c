/* llm_chat.c — chat templates for include/kiln_llm.h: kiln_llm_chat_apply
 * and the prompt text of a chat generation, through chat_render
 * (src/model/chat.h: the model's tokenizer.chat_template, else a built-in
 * format).
 *
 * Invariant: a chat prompt is tokenized with BOS added by the tokenizer; a
 * template that writes {{ bos_token }} too gives two, and llm_generate.c
 * drops one (as tools/chat_cli.c does).
 */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "llm.h"

#include "chat.h"

kiln_status kiln_llm_chat_apply(kiln_llm *m, const char *template_name, const kiln_chat_msg *msgs, int n_msgs,
                                int add_generation_prompt, char **out) {
    if (!m) return KILN_ERR_INVALID;
    if (out) *out = NULL;
    if (!out || n_msgs < 0 || (!msgs && n_msgs))
        return llm_fail(m, KILN_ERR_INVALID, "kiln_llm_chat_apply: %s", !out ? "no place for the text" : "bad messages");
    *out = NULL;
    for (int i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content)
            return llm_fail(m, KILN_ERR_INVALID, "kiln_llm_chat_apply: message %d has no %s", i,
                            !msgs[i].role ? "role" : "content");
    /* kiln_chat_msg and chat_msg are the same two pointers */
    chat_msg *cm = kiln_xcalloc((size_t)(n_msgs > 0 ? n_msgs : 1), sizeof *cm);
    for (int i = 0; i < n_msgs; i++) cm[i] = (chat_msg){msgs[i].role, msgs[i].content};
    kiln_status s = chat_render(model_gguf(m->model), template_name, cm, n_msgs, add_generation_prompt, out, m->err,
                                sizeof m->err);
    free(cm);
    return s;
}

kiln_status llm_prompt_text(kiln_llm *m, const char *prompt, const kiln_gen_params *p, char **out) {
    if (!p->chat) {
        *out = kiln_xstrdup(prompt);
        return KILN_OK;
    }
    kiln_chat_msg msg = {"user", prompt};
    kiln_status s = kiln_llm_chat_apply(m, p->chat_template, &msg, 1, 1, out);
    return s;
}
