/* llm_chat.c — chat templates for include/kiln_llm.h: kiln_llm_chat_apply
 * and the prompt text of a chat generation, through chat_render
 * (src/model/chat.h: the model's tokenizer.chat_template, else a built-in
 * format).
 *
 * Invariant: a chat prompt is tokenized with BOS added by the tokenizer, so
 * a BOS the template wrote as text at the start is dropped here (never two).
 */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "llm.h"

#if defined(__has_include)
#if __has_include("chat.h")
#define LLM_HAVE_CHAT 1
#include "chat.h"
#endif
#endif

kiln_status kiln_llm_chat_apply(kiln_llm *m, const char *template_name, const kiln_chat_msg *msgs, int n_msgs,
                                int add_generation_prompt, char **out) {
    if (!m) return KILN_ERR_INVALID;
    if (!out || n_msgs < 0 || (!msgs && n_msgs))
        return llm_fail(m, KILN_ERR_INVALID, "kiln_llm_chat_apply: %s", !out ? "no place for the text" : "bad messages");
    *out = NULL;
    for (int i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content)
            return llm_fail(m, KILN_ERR_INVALID, "kiln_llm_chat_apply: message %d has no %s", i,
                            !msgs[i].role ? "role" : "content");
#ifdef LLM_HAVE_CHAT
    /* kiln_chat_msg and chat_msg are the same two pointers */
    chat_msg *cm = kiln_xcalloc((size_t)(n_msgs > 0 ? n_msgs : 1), sizeof *cm);
    for (int i = 0; i < n_msgs; i++) cm[i] = (chat_msg){msgs[i].role, msgs[i].content};
    kiln_status s = chat_render(model_gguf(m->model), template_name, cm, n_msgs, add_generation_prompt, out, m->err,
                                sizeof m->err);
    free(cm);
    return s;
#else
    (void)template_name;
    (void)add_generation_prompt;
    return llm_fail(m, KILN_ERR_UNSUPPORTED, "kiln_llm_chat_apply: this build has no chat templates (src/model/chat.c)");
#endif
}

/* drop the BOS token's text at the start of s (the tokenizer adds BOS) */
static void drop_leading_bos(kiln_llm *m, char *s) {
    int32_t bos = tok_bos(m->tok);
    if (bos < 0 || !tok_encode(m->tok, "", 0, 1, 0, NULL, 0)) return; /* no BOS added */
    char piece[64];
    int n = tok_token_to_piece(m->tok, bos, 1, piece, (int)sizeof piece);
    if (n <= 0 || n > (int)sizeof piece || strncmp(s, piece, (size_t)n) != 0) return;
    memmove(s, s + n, strlen(s + n) + 1);
}

kiln_status llm_prompt_text(kiln_llm *m, const char *prompt, const kiln_gen_params *p, char **out) {
    if (!p->chat) {
        *out = kiln_xstrdup(prompt);
        return KILN_OK;
    }
    kiln_chat_msg msg = {"user", prompt};
    kiln_status s = kiln_llm_chat_apply(m, p->chat_template, &msg, 1, 1, out);
    if (!s) drop_leading_bos(m, *out);
    return s;
}
