/* emit_stream.h — C for a stream kernel (SCH_K_STREAM, src/sched/stream.c):
 * SOFTMAX_CONTRACT in one pass along the stream axis. Same ABI as every CPU
 * kernel (emit_c.h); its work items are rows only (the runtime passes no
 * chunks). */
#ifndef KILN_CODEGEN_EMIT_STREAM_H
#define KILN_CODEGEN_EMIT_STREAM_H

#include "print_lx.h"
#include "stream_mask.h"
#include "stream_tile.h"

/* a launch's flag for a stream tile compiled with both bodies
 * (SCH_STREAM_BF16_BOTH): run the bf16 one (the other flag bits: emit_c.h's
 * 1 streaming stores, CG_KF_PREP 2 and CG_KF_SHARED 4, the M parts from bit
 * 16: contraction kernels' only) */
#define CG_KF_BF16 8

/* keys per skippable block */
#define KILN_STREAM_KB 32

/* append kernel kid (a STREAM kernel) as the function `name`, through pr (the
 * C emitter's printer: its reduction hook vectorises the fused stages) */
void cg_emit_stream(cg_printer *pr, int32_t kid, const char *name);
/* the same, kernel kid in the tile form t (emit_stream_tile.c) */
void cg_emit_stream_tile(cg_printer *pr, int32_t kid, const char *name, const sch_stream_tile *t);
/* shared by both: the buffers' declarations; the mask's outcome tables */
void cg_stream_declare_bufs(cg_printer *pr, const sch_kernel *k);
void cg_stream_print_mask_table(cg_printer *pr, const sch_stream_mask *m);

#endif
