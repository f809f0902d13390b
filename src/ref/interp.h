/* interp.h — internal entry points of the reference interpreter (src/ref/interp.c)
 * that other modules call; the public ones (kiln_eval_reference,
 * kiln_output_shape, kiln_read_output) are declared in kiln.h.
 */
#ifndef KILN_INTERP_H
#define KILN_INTERP_H

#include "kiln.h"

/* free the results of the last run (g->results); safe to call when there are
 * none. kiln_graph_free calls it. */
void interp_free_results(kiln_graph *g);

#endif
