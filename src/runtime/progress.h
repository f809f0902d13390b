/* progress.h — report a compile's stage to the process's observer
 * (kiln_set_compile_observer in include/kiln_compile.h; progress.c). */
#ifndef KILN_RUNTIME_PROGRESS_H
#define KILN_RUNTIME_PROGRESS_H

#include "kiln_compile.h"

/* stage: "e-graph", "kernels", "cached" or "cc" (done of total units) */
void rt_compile_stage(const char *stage, int done, int total);

#endif
