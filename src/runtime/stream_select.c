/* stream_select.c — which attention form kiln_compile extracts from the
 * e-graph (exec.c asks once per compilation).
 *
 * The streaming form (SOFTMAX_CONTRACT as one stream kernel, no score or
 * probability matrix stored) exists for the CPU backend only; GPU emitters
 * have no stream kernel. Until the search measures both forms per shape
 * bucket, the materialised form is the default and the option stream
 * (KILN_STREAM=1) asks for the streaming one (unset: materialised). A stream the
 * kernel layer cannot take (stream.c's conditions) falls back to the
 * primitive form inside kiln_compile (rt_stream_kernelizes: a trial
 * kernelize of the extracted graph), so asking is always safe.
 */
#include "stream_select.h"

#include <stdlib.h>
#include <string.h>

#include "loop.h"
#include "rewrite.h"

int rt_stream_extract_mode(const char *backend, int stream) {
    int cpu = !backend || strcmp(backend, "cpu") == 0;
    return cpu && stream ? EG_EXTRACT_STREAM : EG_EXTRACT_PRIMITIVES;
}

int rt_stream_kernelizes(kiln_graph *g) {
    int any = 0;
    for (int32_t i = 0; i < g->nnodes && !any; i++) any = g->nodes[i].op == OP_SOFTMAX_CONTRACT;
    if (!any) return 1;
    sch_program sp;
    char err[256];
    kiln_status s = sch_kernelize(g, &sp, err, sizeof err);
    sch_program_free(&sp);
    return s != KILN_ERR_UNSUPPORTED;
}
