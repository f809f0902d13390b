/* fuzz_chat.c — libFuzzer target for the chat-template renderer (jinja.h):
 * any byte string, taken as a template and rendered for a fixed
 * conversation, must give output or an error with a message; never crash,
 * hang or read out of bounds (the renderer's step, output and memory
 * bounds keep each input short).
 *
 *   make fuzz-chat                  # 60 s from the templates in tests/data/chat
 *   make fuzz-chat FUZZ_SECONDS=600
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const keys[] = {"role", "content"};
    static const char *const vals[] = {"system", "Be brief.", "user", "Hi", "assistant", "Hello", "user", "Bye"};
    jinja_ctx *c = jinja_ctx_new();
    jinja_set_records(c, "messages", keys, 2, vals, 4);
    jinja_set_bool(c, "add_generation_prompt", size & 1);
    jinja_set_str(c, "bos_token", "<s>");
    jinja_set_str(c, "eos_token", "</s>");
    char *out = NULL, err[256];
    err[0] = 0;
    if (jinja_render((const char *)data, size, c, &out, err, sizeof err) != KILN_OK) {
        if (!err[0] || out) abort(); /* an error comes with a message and no output */
    } else if (!out) abort();
    free(out);
    jinja_ctx_free(c);
    return 0;
}
