/* stream_select.h — which attention form a compilation extracts: the
 * materialised one (primitives: two contractions around a softmax kernel) or
 * the streaming SOFTMAX_CONTRACT kernel (src/sched/stream.c); with both, which
 * one a run uses (see stream_select.c). */
#ifndef KILN_RUNTIME_STREAM_SELECT_H
#define KILN_RUNTIME_STREAM_SELECT_H

#include "graph.h"
#include "kiln_compile.h"

/* the e-graph extraction mode (EG_EXTRACT_*, src/rewrite/rewrite.h) for a
 * compilation on backend `backend` */
int rt_stream_extract_mode(const char *backend, int stream);
/* 0 when graph g (extracted with EG_EXTRACT_STREAM) holds a SOFTMAX_CONTRACT
 * the kernel layer cannot stream (src/sched/stream.c), so the compilation
 * extracts primitives instead; 1 otherwise */
int rt_stream_kernelizes(kiln_graph *g);
/* option stream 2 on the CPU: g compiled again in the streaming form, the
 * alternative of the materialised program; NULL when there is none (no
 * stream kernel, another backend, a profiled program, or its compilation
 * failed: g's status is then as before) */
kiln_program *rt_stream_compile_alt(kiln_graph *g, const kiln_compile_options *o, const char *backend);
/* the form (KILN_FORM_MATERIALISED ...) that serves the run under user's
 * bindings: the form forced, else the bucket's pin, else its measured choice
 * from the tuning DB, else the cost model's (streaming for decode and long
 * prompts); > 0: p's streaming alternative (p->alt) runs it, with its tiles
 * in bf16 for KILN_FORM_STREAMING_BF16 */
int rt_stream_pick(kiln_program *p, const kiln_graph *user);
/* a form record's schedule text ("streaming", "materialised runner-up=
 * streaming-bf16", ...): 1 and the winner and runner-up forms, 0 when it
 * names a form this kiln does not know or is malformed (set aside) */
int rt_form_record_read(const char *schedule, int *winner, int *runner_up);
/* 1 when a compilation with these options on this backend has a streaming
 * alternative to compile (option stream 2 on the CPU, no profile) */
int rt_stream_alt_wanted(const kiln_compile_options *o, const char *backend);
/* p's streaming alternative, compiled at the first call that needs it
 * (rt_stream_compile_alt of p's graph and options), or NULL: there is none */
kiln_program *rt_stream_alt(kiln_program *p);

#endif
