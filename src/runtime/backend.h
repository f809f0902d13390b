/* backend.h — the one backend interface, and the registry of backends.
 *
 * A backend is one table, rt_backend, filled with designated initialisers in
 * the backend's own file (cpu_run.c, with cpu.c's host code; opencl.c and
 * cuda.c through RT_GPU_BACKEND in gpu.h, whose members gpu_exec.c holds). The executor (run.c) drives every backend
 * through the program-level members alone:
 *
 *   prepare   emit and compile the plan, make the backend's state (p->dev)
 *   bind      copy the caller's input or state bytes in (in place on the CPU)
 *   place     make the arena of intermediates (offsets in p->run.live)
 *   result    a result buffer, copied out after the run (in place on the CPU)
 *   begin     before the first kernel of a run (device: upload the sizes)
 *   copy      a COPY step between two buffers
 *   host_step a QUANTIZE step's buffers as host memory, and back
 *   run_kernel one kernel over its loop extents
 *   sync      wait for the run; kernel error flags into p->run.kerr
 *   fetch     a result or a state back into the caller's memory
 *   abandon   a run failed: device copies of the caller's buffers are stale
 *   release   free the backend's state
 *
 * Capabilities (caps) say what the executor may skip: RT_CAP_HOST_MEMORY
 * backends keep buffers where the caller's memory is, so fetch is a no-op;
 * RT_CAP_HOST_CODE backends also fill the host-code members (emit C, cc,
 * dlsym, launch over a thread pool) that the CPU's schedule search
 * (tune.c, tune_generic.c) and the device probe (device.c) call.
 *
 * The registry (registry.c) is the one list of backends: every lookup by
 * name, the CLI's --backend check and `kiln device` read it, and a
 * backend's name is spelt once in src/, in its table.
 *
 * Errors are the world's (no compiler, no device, out of memory): every
 * program-level member returns a kiln_status with a message in err.
 */
#ifndef KILN_RUNTIME_BACKEND_H
#define KILN_RUNTIME_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "../codegen/emit_c.h"
#include "../sched/loop.h"
#include "kiln_compile.h"
#include "threadpool.h"

typedef struct rt_module rt_module; /* loaded host code */
struct rt_gpu_ops;

/* the ABI of a generated kernel function (see emit_c.h) */
typedef int (*rt_kernel_fn)(void *const *bufs, const int64_t *vars, int64_t lo, int64_t hi, int64_t chunk,
                            int64_t flags);

/* a kernel's loop extents under the run's bindings (run.c evaluates them) */
typedef struct rt_extent {
    int64_t dim[KILN_MAX_DIMS]; /* per loop of the kernel */
    int64_t outer;              /* the product of every loop but the last */
    int64_t inner;              /* the last loop */
    int64_t total;              /* outer * inner (1 for a kernel without loops) */
} rt_extent;

/* what a device reports for a kernel after the run (p->run.kerr) */
enum { RT_KERR_NONE = 0, RT_KERR_RANGE = 1, RT_KERR_NO_MMA = 2 };

enum {
    RT_CAP_HOST_MEMORY = 1, /* buffers are host memory: bound and fetched in place */
    RT_CAP_HOST_CODE = 2,   /* isa, emit, compile, symbol, module_*, launch are filled */
};

typedef struct rt_backend rt_backend;
struct rt_backend {
    const char *name;  /* "cpu", ...: the one spelling of the name in src/ */
    const char *label; /* for tables ("CPU") */
    unsigned caps;     /* RT_CAP_* */
    const struct rt_gpu_ops *gpu; /* device backends: the device interface (gpu.h); NULL otherwise */
    /* one-line hardware fingerprint (malloc'd); NULL when there is no device */
    char *(*fingerprint)(const rt_backend *be);
    /* 1 when the backend can run this kernel */
    int (*supports)(const sch_program *p, int32_t kernel);
    /* `kiln device`: this backend's devices as text or a JSON member (malloc'd); NULL: none to list */
    char *(*devices)(const rt_backend *be, int json);

    /* ---- program level (every backend) ---- */
    kiln_status (*prepare)(kiln_program *p, const kiln_compile_options *o, char *err, size_t errcap);
    void (*release)(kiln_program *p);
    kiln_status (*bind)(kiln_program *p, int32_t b, const void *host, size_t bytes, char *err, size_t errcap);
    kiln_status (*place)(kiln_program *p, size_t arena_bytes, char *err, size_t errcap);
    kiln_status (*result)(kiln_program *p, int32_t b, void *host, char *err, size_t errcap);
    kiln_status (*begin)(kiln_program *p, char *err, size_t errcap);
    kiln_status (*copy)(kiln_program *p, int32_t dst, int32_t src, size_t bytes, char *err, size_t errcap);
    /* to_host 1: buffer b's bytes into host, *out = where to read them (on host
     * memory b's own memory, host unused); 2: *out = where to write b's new
     * bytes; 0: those bytes (at host) into b (nothing when written in place) */
    kiln_status (*host_step)(kiln_program *p, int32_t b, int to_host, void *host, void **out, char *err,
                             size_t errcap);
    /* KILN_ERR_RANGE when an index is out of range (the executor words it) */
    kiln_status (*run_kernel)(kiln_program *p, int32_t k, const rt_extent *e, char *err, size_t errcap);
    kiln_status (*sync)(kiln_program *p, char *err, size_t errcap);
    kiln_status (*fetch)(kiln_program *p, int32_t b, void *host, size_t bytes, char *err, size_t errcap);
    /* the run failed: forget what the device holds of the caller's buffers (NULL: nothing to forget) */
    void (*abandon)(kiln_program *p);

    /* ---- host code (RT_CAP_HOST_CODE; NULL otherwise) ---- */
    /* the ISA (code flavour) the backend will emit for on this machine */
    cg_isa (*isa)(void);
    char *(*emit)(const sch_program *p, const cg_options *opt);
    /* compile + load; on failure a message in err (never crashes) */
    kiln_status (*compile)(const char *src, const char *cflags, rt_module **out, char *err, size_t errcap);
    void *(*symbol)(rt_module *m, const char *name);
    const char *(*module_path)(const rt_module *m);
    void (*module_free)(rt_module *m);
    /* run fn over n work items; returns the OR of the kernel's results */
    int (*launch)(rt_pool *pool, rt_kernel_fn fn, void *const *bufs, const int64_t *vars, int64_t n, int64_t chunk,
                  int64_t flags, int serial);
};

/* ---- the registry (registry.c) ---- */
extern const rt_backend rt_cpu_backend, rt_opencl_backend, rt_cuda_backend;
/* every backend, the CPU first; NULL-terminated */
extern const rt_backend *const rt_backends[];
/* the backend called `name`; NULL or "" means $KILN_BACKEND, else the CPU; NULL when unknown */
const rt_backend *rt_backend_find(const char *name);
/* "cpu, opencl, cuda" (static) */
const char *rt_backend_names(void);
/* `kiln device`'s lists of every backend with devices: text, or JSON
 * members (malloc'd) */
char *rt_backend_devices_report(int json);

/* the CPU's host code (cpu.c): the host-code members of rt_cpu_backend */
kiln_status rt_cpu_compile(const char *src, const char *cflags, rt_module **out, char *err, size_t errcap);
void *rt_cpu_symbol(rt_module *m, const char *name);
const char *rt_cpu_module_path(const rt_module *m);
void rt_cpu_module_free(rt_module *m);
int rt_cpu_launch(rt_pool *pool, rt_kernel_fn fn, void *const *bufs, const int64_t *vars, int64_t n, int64_t chunk,
                  int64_t flags, int serial);
/* the same over `pieces` contiguous runs of items that the threads claim in
 * order (threadpool.h: rt_pool_run_claimed) */
int rt_cpu_launch_claimed(rt_pool *pool, rt_kernel_fn fn, void *const *bufs, const int64_t *vars, int64_t n,
                          int64_t chunk, int64_t flags, int pieces);
/* one-line CPU fingerprint (device.c; malloc'd) */
char *rt_cpu_fingerprint(void);

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
