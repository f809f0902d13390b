/* gpu.h — the GPU device interface, and the executor of kernelized programs
 * on such a device.
 *
 * A GPU backend (opencl.c, cuda.c) loads its vendor library with dlopen at
 * first use and fills an rt_gpu_ops table: open a device, fingerprint it,
 * build a program from source (emit_gpu.h's dialect), allocate / free /
 * upload / download device memory, launch a kernel by name with buffer and
 * scalar arguments, wait for the queue. Device memory is named by an opaque
 * 64-bit handle (a cl_mem or a CUdeviceptr); 0 is "none".
 *
 * Errors are the world's (no library, no device, a build log, out of
 * memory): every call returns a kiln_status with a message in err, never
 * crashes, never exits.
 *
 * The program-level members of every GPU backend's rt_backend (backend.h)
 * are gpu_exec.c's, over its rt_gpu_ops: one device arena (placed by the
 * executor's liveness plan), a device copy of every input, state and
 * result, inputs and states uploaded in bind, kernels enqueued in
 * run_kernel, results and states downloaded in fetch. A backend's file
 * defines its table with RT_GPU_BACKEND and lists it in registry.c.
 */
#ifndef KILN_RUNTIME_GPU_H
#define KILN_RUNTIME_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "../codegen/emit_gpu.h"
#include "backend.h"
#include "kiln.h"
#include "kiln_compile.h"

typedef struct rt_gpu rt_gpu;           /* an opened device with its context and queue */
typedef struct rt_gpu_prog rt_gpu_prog; /* a built program */
typedef uint64_t rt_gpu_mem;            /* device memory handle; 0 = none */

typedef enum rt_gpu_arg_kind { RT_GPU_ARG_MEM = 0, RT_GPU_ARG_I64 } rt_gpu_arg_kind;
typedef struct rt_gpu_arg {
    rt_gpu_arg_kind kind;
    rt_gpu_mem mem;
    int64_t i64;
} rt_gpu_arg;

/* what the executor needs to know to pick entry points */
typedef struct rt_gpu_caps {
    int max_group;  /* work items a group may have */
    int tensor_mma; /* 1: mma.sync with bf16 / f16 / s8 operands (CUDA sm_80 and later) */
} rt_gpu_caps;

typedef struct rt_gpu_ops {
    cg_gpu_dialect dialect;
    /* how many devices the driver reports (0 with a message when the library
     * or driver is missing) */
    int (*count)(char *err, size_t errcap);
    kiln_status (*open)(int index, rt_gpu **out, char *err, size_t errcap);
    void (*close)(rt_gpu *d);
    /* one line: device name, architecture, driver, kiln IR version (malloc'd) */
    char *(*fingerprint)(rt_gpu *d);
    /* a few lines on the device for `kiln device` (malloc'd) */
    char *(*describe)(rt_gpu *d);
    kiln_status (*build)(rt_gpu *d, const char *src, rt_gpu_prog **out, char *err, size_t errcap);
    void (*prog_free)(rt_gpu_prog *p);
    kiln_status (*alloc)(rt_gpu *d, size_t bytes, rt_gpu_mem *out, char *err, size_t errcap);
    void (*free)(rt_gpu *d, rt_gpu_mem m);
    kiln_status (*upload)(rt_gpu *d, rt_gpu_mem m, size_t off, const void *src, size_t bytes, char *err, size_t errcap);
    kiln_status (*download)(rt_gpu *d, rt_gpu_mem m, size_t off, void *dst, size_t bytes, char *err, size_t errcap);
    kiln_status (*copy)(rt_gpu *d, rt_gpu_mem dst, size_t doff, rt_gpu_mem src, size_t soff, size_t bytes, char *err,
                        size_t errcap);
    /* enqueue kernel `name` over `items` work items in groups of `group` */
    kiln_status (*launch)(rt_gpu *d, rt_gpu_prog *p, const char *name, const rt_gpu_arg *args, int nargs,
                          int64_t items, int group, char *err, size_t errcap);
    kiln_status (*finish)(rt_gpu *d, char *err, size_t errcap);
    void (*caps)(rt_gpu *d, rt_gpu_caps *out);
} rt_gpu_ops;

extern const rt_gpu_ops rt_opencl_ops;
extern const rt_gpu_ops rt_cuda_ops;

/* the device a GPU backend uses: $KILN_DEVICE (index, default 0), opened
 * once per process and shared (closed at exit by the OS) */
kiln_status rt_gpu_default_device(const rt_gpu_ops *ops, rt_gpu **out, char *err, size_t errcap);

/* ---- the program-level members of a GPU backend (gpu_exec.c) ---- */
kiln_status rt_gpu_prepare(kiln_program *p, const kiln_compile_options *o, char *err, size_t errcap);
void rt_gpu_release(kiln_program *p);
kiln_status rt_gpu_bind(kiln_program *p, int32_t b, const void *host, size_t bytes, char *err, size_t errcap);
kiln_status rt_gpu_place(kiln_program *p, size_t arena_bytes, char *err, size_t errcap);
kiln_status rt_gpu_result(kiln_program *p, int32_t b, void *host, char *err, size_t errcap);
kiln_status rt_gpu_begin(kiln_program *p, char *err, size_t errcap);
kiln_status rt_gpu_copy(kiln_program *p, int32_t dst, int32_t src, size_t bytes, char *err, size_t errcap);
kiln_status rt_gpu_host_step(kiln_program *p, int32_t b, int to_host, void *host, void **out, char *err,
                             size_t errcap);
kiln_status rt_gpu_run_kernel(kiln_program *p, int32_t k, const rt_extent *e, char *err, size_t errcap);
kiln_status rt_gpu_sync(kiln_program *p, char *err, size_t errcap);
kiln_status rt_gpu_fetch(kiln_program *p, int32_t b, void *host, size_t bytes, char *err, size_t errcap);
void rt_gpu_abandon(kiln_program *p);
int rt_gpu_supports(const sch_program *p, int32_t kernel);
char *rt_gpu_fingerprint(const rt_backend *be);
char *rt_gpu_devices(const rt_backend *be, int json);

/* a GPU backend's table (in the backend's own file, the one place its name
 * is spelt in src/): its name, its label for tables and its device
 * interface; every other member is gpu_exec.c's */
#define RT_GPU_BACKEND(NAME, LABEL, OPS)                                                                          \
    {                                                                                                            \
        .name = NAME, .label = LABEL, .caps = 0, .gpu = OPS, .fingerprint = rt_gpu_fingerprint,                 \
        .supports = rt_gpu_supports, .devices = rt_gpu_devices, .prepare = rt_gpu_prepare,                       \
        .release = rt_gpu_release, .bind = rt_gpu_bind, .place = rt_gpu_place, .result = rt_gpu_result,           \
        .begin = rt_gpu_begin, .copy = rt_gpu_copy, .host_step = rt_gpu_host_step, .run_kernel = rt_gpu_run_kernel, \
        .sync = rt_gpu_sync, .fetch = rt_gpu_fetch, .abandon = rt_gpu_abandon,                                   \
    }

/* compile CUDA source with NVRTC for `arch` ("sm_80", "sm_90"): KILN_OK when
 * NVRTC accepts it (*bin_bytes: the size of the cubin or PTX), else the log
 * in err; KILN_ERR_UNSUPPORTED when libnvrtc cannot be loaded. Needs no GPU. */
kiln_status rt_cuda_compile_check(const char *src, const char *arch, size_t *bin_bytes, char *err, size_t errcap);
/* NVRTC's version as "major.minor", or NULL when libnvrtc cannot be loaded */
const char *rt_cuda_nvrtc_version(void);

#endif
