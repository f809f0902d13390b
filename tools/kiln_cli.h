/* kiln_cli.h — what the command line's files share: kiln.c (every command
 * but perplexity) and perplexity.c (`kiln perplexity`, and the line that
 * says which arithmetic a program's contractions use, which run and bench
 * print too).
 *
 * Invariants: the functions print their own errors on stderr, one line,
 * prefixed "kiln CMD: "; they return 0 on success and the exit status
 * otherwise (1 library errors, 2 usage errors).
 */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include "chat.h"
#include "model.h"
#include "sampler.h"
#include "tokenizer.h"

/* kiln.c: a model new to this machine is searched before it runs (no_tune,
 * KILN_TUNE=0 or an exact program skips it) */
int kiln_cli_first_run_search(const char *cmd, model *m, int no_tune);

/* kiln.c: load (and compile unless interp) with a progress ticker; prints
 * the error and returns NULL on failure */
model *kiln_cli_load_model(const char *cmd, const char *path, int64_t n_ctx, int mmap_file, int interp, int threads,
                           double *secs);

/* serve.c */
int cmd_serve(int argc, char **argv);

/* perplexity.c */
int cmd_perplexity(int argc, char **argv);
/* "kiln CMD: N contractions: decode ... ; prefill ..." on stderr (compiled models only) */
void kiln_cli_print_arith(const char *cmd, model *m);

/* onnx_cli.c: `run`, `bench` and `explain` with -m MODEL.onnx */
int kiln_onnx_cli_wants(int argc, char **argv);
int kiln_onnx_cli(const char *cmd, int argc, char **argv);

/* chat_cli.c: chat for run and serve */
char *kiln_cli_read_text(const char *cmd, const char *path); /* whole file, NUL-terminated */
/* one stderr line: which template --chat uses; a warning when the model has none */
void kiln_cli_chat_announce(const char *cmd, gguf_file *f, const char *tmpl);
/* the conversation rendered with the generation prompt (chat_render) */
char *kiln_cli_chat_text(const char *cmd, gguf_file *f, const char *tmpl, const chat_msg *msgs, int n);
/* text to ids with BOS as the tokenizer adds it (one, even when the template
 * wrote one too); special: parse control tokens. Returns the count (ids in *out)
 * or <= 0 with *out NULL. */
int kiln_cli_encode(const tokenizer *tk, const char *text, int special, int32_t **out);

/* chat_loop.c: kiln run --chat -i; first (may be NULL) is the first user turn */
int kiln_cli_chat_loop(model *m, const tokenizer *tk, const char *tmpl, const char *sys, const char *first,
                       const sampler_params *sp, long long n_predict);

#endif
