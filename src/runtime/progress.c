/* progress.c — the process's compile observer (kiln_set_compile_observer):
 * kiln_compile and the CPU backend's compiler call rt_compile_stage at each
 * stage, and a CLI's ticker shows it.
 *
 * Invariants: one observer per process, set before compiling (it is read,
 * not locked, on the compiling thread); with none set a stage costs a load
 * and a branch. */
#include "progress.h"

static kiln_compile_observer observer;
static void *observer_ctx;

void kiln_set_compile_observer(kiln_compile_observer fn, void *ctx) {
    observer = fn;
    observer_ctx = ctx;
}

void rt_compile_stage(const char *stage, int done, int total) {
    if (observer) observer(observer_ctx, stage, done, total);
}
