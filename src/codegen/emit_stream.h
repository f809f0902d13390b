/* emit_stream.h — C for a stream kernel (SCH_K_STREAM, src/sched/stream.c):
 * SOFTMAX_CONTRACT in one pass along the stream axis. Same ABI as every CPU
 * kernel (emit_c.h); its work items are rows only (the runtime passes no
 * chunks). */
#ifndef KILN_CODEGEN_EMIT_STREAM_H
#define KILN_CODEGEN_EMIT_STREAM_H

#include "print_lx.h"

/* append kernel kid (a STREAM kernel) as the function `name`, through pr (the
 * C emitter's printer: its reduction hook vectorises the fused stages) */
void cg_emit_stream(cg_printer *pr, int32_t kid, const char *name);

#endif
