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
 * The executor (gpu_exec.c) is what kiln_compile / kiln_run delegate to when
 * the backend is a GPU one: it keeps one device arena (planned by liveness
 * like the CPU's), a device copy of every input, state and result, uploads
 * inputs and states before each run, launches the kernels in order (host
 * steps — QUANTIZE, COPY — run on the host or as device copies), downloads
 * results and writes states back.
 */
#ifndef KILN_RUNTIME_GPU_H
#define KILN_RUNTIME_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "../codegen/emit_gpu.h"
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
    const char *name; /* "opencl", "cuda" */
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

/* the GPU backend called name ("opencl", "cuda"), or NULL (e.g. for "cpu") */
const rt_gpu_ops *rt_gpu_find(const char *name);
extern const rt_gpu_ops rt_opencl_ops;
extern const rt_gpu_ops rt_cuda_ops;

/* the device a GPU backend uses: $KILN_DEVICE (index, default 0), opened
 * once per process and shared (closed at exit by the OS) */
kiln_status rt_gpu_default_device(const rt_gpu_ops *ops, rt_gpu **out, char *err, size_t errcap);

/* ---- the executor (gpu_exec.c) ---- */
typedef struct rt_gpu_program rt_gpu_program;

/* emit, build and prepare sp for the backend under opt's GPU knobs
 * (gpu_contract, gpu_group, gpu_resident, gpu_emit_only, cuda_archs,
 * tune_verbose); NULL with a message on failure. *source_out receives the
 * generated source (malloc'd) either way. */
rt_gpu_program *rt_gpu_program_new(const rt_gpu_ops *ops, const sch_program *sp, const kiln_compile_options *opt,
                                   char **source_out, kiln_status *st, char *err, size_t errcap);
void rt_gpu_program_free(rt_gpu_program *gp);
/* one run of sp on g's current bindings (as run_work in exec.c): results land
 * in g->results, states are written back; errors go to g via graph_run_error */
kiln_status rt_gpu_program_run(rt_gpu_program *gp, kiln_graph *g, const sch_program *sp);
/* search contraction schedules on first runs within budget_s seconds in all
 * (0: none; the DB's records are used either way); inject_wrong makes one
 * candidate wrong on purpose (KILN_TUNE_INJECT_WRONG, tests) */
void rt_gpu_program_set_search(rt_gpu_program *gp, double budget_s, int inject_wrong);
/* candidates measured by its searches so far */
int rt_gpu_program_measurements(const rt_gpu_program *gp);
/* "opencl: <device name>" (owned by gp) */
const char *rt_gpu_program_device(const rt_gpu_program *gp);

/* the backend-table entry of GPU backend `name` ("opencl", "cuda"), or NULL */
struct rt_backend;
const struct rt_backend *rt_gpu_backend_find(const char *name);

/* compile CUDA source with NVRTC for `arch` ("sm_80", "sm_90"): KILN_OK when
 * NVRTC accepts it (*bin_bytes: the size of the cubin or PTX), else the log
 * in err; KILN_ERR_UNSUPPORTED when libnvrtc cannot be loaded. Needs no GPU. */
kiln_status rt_cuda_compile_check(const char *src, const char *arch, size_t *bin_bytes, char *err, size_t errcap);
/* NVRTC's version as "major.minor", or NULL when libnvrtc cannot be loaded */
const char *rt_cuda_nvrtc_version(void);

/* `kiln device` part for the GPU backends: every device with its
 * fingerprint, or why there is none (malloc'd) */
char *rt_gpu_device_report(int json);

#endif
