/* fuzz_serve_api.c — libFuzzer target for kiln serve's request parser
 * (tools/serve_api.c): any bytes as the body of /v1/completions or
 * /v1/chat/completions (the first byte picks) must give a checked request or
 * an HTTP status with a message; never crash, hang or read out of bounds. A
 * parsed request's response, stream chunks and error bodies are printed too,
 * over made-up generated text, so the JSON writers run on what the parser let
 * through.
 *
 *   make fuzz-serve                  # 60 s
 *   make fuzz-serve FUZZ_SECONDS=600
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* a SentencePiece-style vocabulary of controls and the 256 byte tokens */
static tokenizer *tiny_tokenizer(void) {
    static char names[256][8];
    static tok_str toks[259];
    toks[0] = (tok_str){"<unk>", 5}, toks[1] = (tok_str){"<s>", 3}, toks[2] = (tok_str){"</s>", 4};
    for (int b = 0; b < 256; b++) {
        snprintf(names[b], sizeof names[b], "<0x%02X>", b);
        toks[3 + b] = (tok_str){names[b], 6};
    }
    tok_config c;
    tok_config_init(&c);
    c.kind = TOK_KIND_SPM;
    c.n_vocab = 259;
    c.tokens = toks;
    c.unk_id = 0, c.bos_id = 1, c.eos_id = 2;
    c.add_bos = 1;
    tokenizer *t = NULL;
    char err[256];
    if (tok_new(&c, &t, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "fuzz_serve_api: %s\n", err);
        abort();
    }
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static tokenizer *tk;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    if (!tk) tk = tiny_tokenizer();
    if (size < 1) return 0;
    srv_info info = {.model_id = "fuzz", .gguf = NULL, .tk = tk, .tk_mu = &mu, .n_ctx = 512, .n_vocab = 259,
                     .default_max_tokens = -1};
    int status = 0;
    char msg[512];
    msg[0] = 0;
    srv_request *r = srv_api_parse(&info, data[0] & 1, (const char *)data + 1, size - 1, &status, msg, sizeof msg);
    if (!r) {
        if (status < 400 || status > 499 || !msg[0]) abort(); /* a refusal is a 4xx with a message */
        free(srv_api_error_json(status, msg));
        return 0;
    }
    if (r->n_prompt < 1 || r->n_prompt >= info.n_ctx || r->max_tokens < 0) abort();
    static const char text[] = "gen\xc3\xa9rated \"text\"\n";
    r->text = realloc(r->text, sizeof text);
    memcpy(r->text, text, sizeof text);
    r->len = r->safe = sizeof text - 1;
    r->n_gen = r->max_tokens < 3 ? r->max_tokens : 3;
    for (int i = 0; i < r->n_gen; i++) {
        r->off[i] = (size_t)i * 4;
        if (r->lp) r->lp[i] = -0.5 * i;
    }
    r->finish = "length";
    free(srv_api_result_json(&info, r));
    free(srv_api_chunk(&info, r, 0, r->len / 2, 1, 0));
    free(srv_api_chunk(&info, r, r->len / 2, r->len, 0, 1));
    srv_request_release(r);
    return 0;
}
