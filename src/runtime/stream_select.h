/* stream_select.h — which attention form a compilation extracts: the
 * materialised one (primitives: two contractions around a softmax kernel) or
 * the streaming SOFTMAX_CONTRACT kernel (src/sched/stream.c). */
#ifndef KILN_RUNTIME_STREAM_SELECT_H
#define KILN_RUNTIME_STREAM_SELECT_H

/* the e-graph extraction mode (EG_EXTRACT_*, src/rewrite/rewrite.h) for a
 * compilation on backend `backend` */
int rt_stream_extract_mode(const char *backend);

#endif
