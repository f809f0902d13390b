/* stream_select.h — which attention form a compilation extracts: the
 * materialised one (primitives: two contractions around a softmax kernel) or
 * the streaming SOFTMAX_CONTRACT kernel (src/sched/stream.c). */
#ifndef KILN_RUNTIME_STREAM_SELECT_H
#define KILN_RUNTIME_STREAM_SELECT_H

#include "graph.h"

/* the e-graph extraction mode (EG_EXTRACT_*, src/rewrite/rewrite.h) for a
 * compilation on backend `backend` */
int rt_stream_extract_mode(const char *backend, int stream);
/* 0 when graph g (extracted with EG_EXTRACT_STREAM) holds a SOFTMAX_CONTRACT
 * the kernel layer cannot stream (src/sched/stream.c), so the compilation
 * extracts primitives instead; 1 otherwise */
int rt_stream_kernelizes(kiln_graph *g);

#endif
