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

#include "model.h"

/* kiln.c: a model new to this machine is searched before it runs (no_tune,
 * KILN_TUNE=0 or an exact program skips it) */
int kiln_cli_first_run_search(const char *cmd, model *m, int no_tune);

/* perplexity.c */
int cmd_perplexity(int argc, char **argv);
/* "kiln CMD: N contractions: decode ... ; prefill ..." on stderr (compiled models only) */
void kiln_cli_print_arith(const char *cmd, model *m);

/* onnx_cli.c: `run`, `bench` and `explain` with -m MODEL.onnx */
int kiln_onnx_cli_wants(int argc, char **argv);
int kiln_onnx_cli(const char *cmd, int argc, char **argv);

#endif
