/* backend.h — the backend vtable: what the runtime needs from a device.
 *
 * A backend turns a kernelized program into loaded code (emit + compile),
 * owns device memory (alloc/free/copy) and runs kernels (launch/sync). The
 * CPU backend (cpu.c) emits C, compiles it with the system compiler into a
 * cached shared object and launches kernel functions over a thread pool.
 * GPU backends (OpenCL, CUDA) will load their vendor libraries with dlopen
 * and fill the same table.
 */
#ifndef KILN_RUNTIME_BACKEND_H
#define KILN_RUNTIME_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "../codegen/emit_c.h"
#include "../sched/loop.h"
#include "threadpool.h"

typedef struct rt_module rt_module; /* loaded code */

/* the ABI of a generated kernel function (see emit_c.h) */
typedef int (*rt_kernel_fn)(void *const *bufs, const int64_t *vars, int64_t lo, int64_t hi, int64_t chunk,
                            int64_t flags);

typedef struct rt_backend {
    const char *name;
    /* one-line hardware fingerprint (malloc'd) */
    char *(*fingerprint)(void);
    /* 1 when the backend can run this kernel */
    int (*supports)(const sch_program *p, int32_t kernel);
    /* the ISA (code flavour) the backend will emit for on this machine */
    cg_isa (*isa)(void);
    char *(*emit)(const sch_program *p, const cg_options *opt);
    /* compile + load; on failure a message in err (never crashes) */
    kiln_status (*compile)(const char *src, const char *cflags, rt_module **out, char *err, size_t errcap);
    void *(*symbol)(rt_module *m, const char *name);
    const char *(*module_path)(const rt_module *m);
    void (*module_free)(rt_module *m);
    void *(*alloc)(size_t bytes);
    void (*dealloc)(void *ptr);
    void (*copy)(void *dst, const void *src, size_t bytes);
    /* run fn over n work items; returns the OR of the kernel's results */
    int (*launch)(rt_pool *pool, rt_kernel_fn fn, void *const *bufs, const int64_t *vars, int64_t n,
                  int64_t chunk, int64_t flags, int serial);
    void (*sync)(void);
} rt_backend;

/* the backend called `name` ("cpu"), or NULL */
const rt_backend *rt_backend_find(const char *name);

/* CPU helpers shared with the device probe (cpu.c) */
/* the C compiler command: $KILN_CC or "cc" */
const char *rt_cc(void);
/* first line of `$KILN_CC --version` (cached), or NULL if it cannot run */
const char *rt_cc_identity(void);
/* the ISA the fingerprint allows ($KILN_ISA = scalar|avx2|avx512 overrides downwards) */
cg_isa rt_cpu_isa(void);
/* 1 when /proc/cpuinfo (or cpuid) lists the flag */
int rt_cpu_has(const char *flag);
/* 1 when $KILN_RETUNE is 1 (`kiln tune --retune`): this machine's own
 * tuning records only seed the search instead of replacing it */
int rt_retune(void);

#endif
