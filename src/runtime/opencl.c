/* opencl.c — the OpenCL device interface (gpu.h) through the ICD loader.
 *
 * libOpenCL.so.1 is opened with dlopen at first use, so kiln builds and runs
 * without OpenCL headers or libraries; without them every call returns a
 * clear error. The few API types, constants and prototypes used here are
 * declared below from the OpenCL specification.
 *
 * Devices are numbered across every platform the loader reports, in order
 * (KILN_DEVICE picks one). A device gets one context and one in-order queue,
 * so launches and copies run in the order they are enqueued and only
 * finish() waits. Kernels of a built program are created on first launch
 * and kept by name.
 *
 * Build options: correctly rounded f32 division and square root where the
 * device offers it (the reference interpreter's numerics); contraction is
 * turned off in the source itself (FP_CONTRACT pragma). KILN_OPENCL_OPTIONS
 * adds options (e.g. -cl-opt-disable, which makes PoCL's builds several
 * times faster for the test suites' small graphs).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "config.h"
#include "gpu.h"

/* ---- the API subset (OpenCL 1.2) ---- */
typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_ulong;
typedef cl_ulong cl_bitfield;
typedef cl_uint cl_bool;
typedef struct _cl_platform_id *cl_platform_id;
typedef struct _cl_device_id *cl_device_id;
typedef struct _cl_context *cl_context;
typedef struct _cl_command_queue *cl_command_queue;
typedef struct _cl_mem *cl_mem;
typedef struct _cl_program *cl_program;
typedef struct _cl_kernel *cl_kernel;
typedef struct _cl_event *cl_event;
typedef intptr_t cl_context_properties;

#define CL_SUCCESS 0
#define CL_DEVICE_NOT_FOUND (-1)
#define CL_PLATFORM_VERSION 0x0901
#define CL_PLATFORM_NAME 0x0902
#define CL_DEVICE_TYPE_ALL 0xFFFFFFFFu
#define CL_DEVICE_TYPE 0x1000
#define CL_DEVICE_MAX_COMPUTE_UNITS 0x1002
#define CL_DEVICE_MAX_WORK_GROUP_SIZE 0x1004
#define CL_DEVICE_MAX_CLOCK_FREQUENCY 0x100C
#define CL_DEVICE_MAX_MEM_ALLOC_SIZE 0x1010
#define CL_DEVICE_SINGLE_FP_CONFIG 0x101B
#define CL_DEVICE_GLOBAL_MEM_SIZE 0x101F
#define CL_DEVICE_LOCAL_MEM_SIZE 0x1023
#define CL_DEVICE_NAME 0x102B
#define CL_DEVICE_VENDOR 0x102C
#define CL_DRIVER_VERSION 0x102D
#define CL_DEVICE_VERSION 0x102F
#define CL_DEVICE_EXTENSIONS 0x1030
#define CL_DEVICE_OPENCL_C_VERSION 0x103D
#define CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT (1u << 7)
#define CL_MEM_READ_WRITE (1u << 0)
#define CL_PROGRAM_BUILD_LOG 0x1183
#define CL_TRUE 1u

#define RT_GPU_IR_VERSION KILN_IR_VERSION

typedef struct cl_api {
    cl_int (*GetPlatformIDs)(cl_uint, cl_platform_id *, cl_uint *);
    cl_int (*GetPlatformInfo)(cl_platform_id, cl_uint, size_t, void *, size_t *);
    cl_int (*GetDeviceIDs)(cl_platform_id, cl_bitfield, cl_uint, cl_device_id *, cl_uint *);
    cl_int (*GetDeviceInfo)(cl_device_id, cl_uint, size_t, void *, size_t *);
    cl_context (*CreateContext)(const cl_context_properties *, cl_uint, const cl_device_id *,
                                void (*)(const char *, const void *, size_t, void *), void *, cl_int *);
    cl_command_queue (*CreateCommandQueue)(cl_context, cl_device_id, cl_bitfield, cl_int *);
    cl_mem (*CreateBuffer)(cl_context, cl_bitfield, size_t, void *, cl_int *);
    cl_int (*ReleaseMemObject)(cl_mem);
    cl_program (*CreateProgramWithSource)(cl_context, cl_uint, const char **, const size_t *, cl_int *);
    cl_int (*BuildProgram)(cl_program, cl_uint, const cl_device_id *, const char *, void (*)(cl_program, void *),
                           void *);
    cl_int (*GetProgramBuildInfo)(cl_program, cl_device_id, cl_uint, size_t, void *, size_t *);
    cl_kernel (*CreateKernel)(cl_program, const char *, cl_int *);
    cl_int (*SetKernelArg)(cl_kernel, cl_uint, size_t, const void *);
    cl_int (*EnqueueNDRangeKernel)(cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *,
                                   const size_t *, cl_uint, const cl_event *, cl_event *);
    cl_int (*EnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint,
                                 const cl_event *, cl_event *);
    cl_int (*EnqueueReadBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint, const cl_event *,
                                cl_event *);
    cl_int (*EnqueueCopyBuffer)(cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint, const cl_event *,
                                cl_event *);
    cl_int (*Finish)(cl_command_queue);
    cl_int (*ReleaseKernel)(cl_kernel);
    cl_int (*ReleaseProgram)(cl_program);
    cl_int (*ReleaseCommandQueue)(cl_command_queue);
    cl_int (*ReleaseContext)(cl_context);
} cl_api;

static pthread_mutex_t cl_mu = PTHREAD_MUTEX_INITIALIZER;
static cl_api cl;
static int cl_state; /* 0 untried, 1 loaded, -1 failed */
static char cl_why[512];

static int load_sym(void *h, const char *name, void *fnptr) {
    void *f = dlsym(h, name);
    if (!f) return -1;
    /* dlsym returns data pointers; POSIX guarantees the conversion */
    memcpy(fnptr, &f, sizeof f);
    return 0;
}

static int cl_load(char *err, size_t errcap) {
    pthread_mutex_lock(&cl_mu);
    if (cl_state == 0) {
        void *h = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h) h = dlopen("libOpenCL.so", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *why = dlerror();
            snprintf(cl_why, sizeof cl_why,
                     "opencl: cannot load libOpenCL.so.1 (%s); install an OpenCL ICD loader and a driver "
                     "(e.g. apt-get install ocl-icd-libopencl1 pocl-opencl-icd)",
                     why ? why : "not found");
            cl_state = -1;
        } else {
            int bad = 0;
#define L(f) bad |= load_sym(h, "cl" #f, &cl.f)
            L(GetPlatformIDs);
            L(GetPlatformInfo);
            L(GetDeviceIDs);
            L(GetDeviceInfo);
            L(CreateContext);
            L(CreateCommandQueue);
            L(CreateBuffer);
            L(ReleaseMemObject);
            L(CreateProgramWithSource);
            L(BuildProgram);
            L(GetProgramBuildInfo);
            L(CreateKernel);
            L(SetKernelArg);
            L(EnqueueNDRangeKernel);
            L(EnqueueWriteBuffer);
            L(EnqueueReadBuffer);
            L(EnqueueCopyBuffer);
            L(Finish);
            L(ReleaseKernel);
            L(ReleaseProgram);
            L(ReleaseCommandQueue);
            L(ReleaseContext);
#undef L
            if (bad) {
                snprintf(cl_why, sizeof cl_why, "opencl: libOpenCL.so.1 lacks OpenCL 1.2 entry points");
                cl_state = -1;
            } else {
                cl_state = 1;
            }
        }
    }
    int ok = cl_state == 1;
    if (!ok && err && errcap) snprintf(err, errcap, "%s", cl_why);
    pthread_mutex_unlock(&cl_mu);
    return ok ? 0 : -1;
}

/* every device of every platform, in order; returns the count (<= cap) */
static int cl_devices(cl_device_id *out, cl_platform_id *plat_out, int cap) {
    cl_platform_id plats[16];
    cl_uint np = 0;
    if (cl.GetPlatformIDs(16, plats, &np) != CL_SUCCESS) return 0;
    int n = 0;
    for (cl_uint i = 0; i < np && i < 16 && n < cap; i++) {
        cl_device_id devs[32];
        cl_uint nd = 0;
        if (cl.GetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 32, devs, &nd) != CL_SUCCESS) continue;
        for (cl_uint j = 0; j < nd && j < 32 && n < cap; j++) {
            out[n] = devs[j];
            if (plat_out) plat_out[n] = plats[i];
            n++;
        }
    }
    return n;
}

static int ocl_count(char *err, size_t errcap) {
    if (cl_load(err, errcap)) return 0;
    cl_device_id d[64];
    int n = cl_devices(d, NULL, 64);
    if (n == 0 && err && errcap) snprintf(err, errcap, "opencl: the ICD loader reports no OpenCL platform or device");
    return n;
}

typedef struct cl_kent {
    char name[32];
    cl_kernel k;
} cl_kent;

struct rt_gpu_prog {
    cl_program prog;
    cl_kent *ks;
    int nks, capks;
};

struct rt_gpu {
    cl_platform_id plat;
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    size_t max_group;
    int correct_div;
    char name[256], vendor[256], version[256], driver[256], platform[256], cversion[256];
    cl_uint cus, clock_mhz;
    cl_ulong gmem, lmem;
    int fp64;
};

static void dev_str(cl_device_id d, cl_uint what, char *out, size_t cap) {
    out[0] = 0;
    if (cl.GetDeviceInfo(d, what, cap - 1, out, NULL) != CL_SUCCESS) out[0] = 0;
    out[cap - 1] = 0;
    size_t n = strlen(out);
    while (n && out[n - 1] == ' ') out[--n] = 0;
}

static kiln_status ocl_open(int index, rt_gpu **out, char *err, size_t errcap) {
    *out = NULL;
    if (cl_load(err, errcap)) return KILN_ERR_UNSUPPORTED;
    cl_device_id devs[64];
    cl_platform_id plats[64];
    int n = cl_devices(devs, plats, 64);
    if (n == 0) {
        snprintf(err, errcap, "opencl: the ICD loader reports no OpenCL platform or device");
        return KILN_ERR_UNSUPPORTED;
    }
    if (index < 0 || index >= n) {
        snprintf(err, errcap, "opencl: no device %d (there are %d)", index, n);
        return KILN_ERR_INVALID;
    }
    rt_gpu *d = kiln_xcalloc(1, sizeof *d);
    d->dev = devs[index];
    d->plat = plats[index];
    dev_str(d->dev, CL_DEVICE_NAME, d->name, sizeof d->name);
    dev_str(d->dev, CL_DEVICE_VENDOR, d->vendor, sizeof d->vendor);
    dev_str(d->dev, CL_DEVICE_VERSION, d->version, sizeof d->version);
    dev_str(d->dev, CL_DRIVER_VERSION, d->driver, sizeof d->driver);
    dev_str(d->dev, CL_DEVICE_OPENCL_C_VERSION, d->cversion, sizeof d->cversion);
    if (cl.GetPlatformInfo(d->plat, CL_PLATFORM_NAME, sizeof d->platform - 1, d->platform, NULL) != CL_SUCCESS)
        d->platform[0] = 0;
    size_t mg = 0;
    if (cl.GetDeviceInfo(d->dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof mg, &mg, NULL) != CL_SUCCESS || mg == 0) mg = 1;
    d->max_group = mg;
    cl_bitfield fp = 0;
    if (cl.GetDeviceInfo(d->dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) == CL_SUCCESS)
        d->correct_div = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
    if (cl.GetDeviceInfo(d->dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof d->cus, &d->cus, NULL) != CL_SUCCESS) d->cus = 0;
    if (cl.GetDeviceInfo(d->dev, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof d->clock_mhz, &d->clock_mhz, NULL) != CL_SUCCESS)
        d->clock_mhz = 0;
    if (cl.GetDeviceInfo(d->dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof d->gmem, &d->gmem, NULL) != CL_SUCCESS) d->gmem = 0;
    if (cl.GetDeviceInfo(d->dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof d->lmem, &d->lmem, NULL) != CL_SUCCESS) d->lmem = 0;
    size_t extn = 0;
    if (cl.GetDeviceInfo(d->dev, CL_DEVICE_EXTENSIONS, 0, NULL, &extn) == CL_SUCCESS && extn) {
        char *ext = kiln_xcalloc(extn + 1, 1);
        if (cl.GetDeviceInfo(d->dev, CL_DEVICE_EXTENSIONS, extn, ext, NULL) == CL_SUCCESS)
            d->fp64 = strstr(ext, "cl_khr_fp64") != NULL;
        free(ext);
    }
    cl_int e = 0;
    d->ctx = cl.CreateContext(NULL, 1, &d->dev, NULL, NULL, &e);
    if (!d->ctx || e != CL_SUCCESS) {
        snprintf(err, errcap, "opencl: cannot create a context on %s (error %d)", d->name, (int)e);
        free(d);
        return KILN_ERR_UNSUPPORTED;
    }
    d->q = cl.CreateCommandQueue(d->ctx, d->dev, 0, &e);
    if (!d->q || e != CL_SUCCESS) {
        snprintf(err, errcap, "opencl: cannot create a command queue on %s (error %d)", d->name, (int)e);
        cl.ReleaseContext(d->ctx);
        free(d);
        return KILN_ERR_UNSUPPORTED;
    }
    *out = d;
    return KILN_OK;
}

static void ocl_close(rt_gpu *d) {
    if (!d) return;
    if (d->q) cl.ReleaseCommandQueue(d->q);
    if (d->ctx) cl.ReleaseContext(d->ctx);
    free(d);
}

static char *ocl_fingerprint(rt_gpu *d) {
    char *s = kiln_xmalloc(1400);
    snprintf(s, 1400, "opencl;platform=%s;device=%s;vendor=%s;version=%s;driver=%s;cu=%u;fp64=%d;ir=%d", d->platform,
             d->name, d->vendor, d->version, d->driver, (unsigned)d->cus, d->fp64, RT_GPU_IR_VERSION);
    return s;
}

static char *ocl_describe(rt_gpu *d) {
    char *s = kiln_xmalloc(1800);
    snprintf(s, 1800,
             "  device       %s (%s)\n  platform     %s\n  version      %s; %s; driver %s\n"
             "  compute      %u units at %u MHz, work groups up to %zu\n  memory       %.2f GiB global, "
             "%.0f KiB local; fp64 %s\n",
             d->name, d->vendor, d->platform, d->version, d->cversion, d->driver, (unsigned)d->cus,
             (unsigned)d->clock_mhz, d->max_group, (double)d->gmem / (1024.0 * 1024 * 1024), (double)d->lmem / 1024.0,
             d->fp64 ? "yes" : "no");
    return s;
}

static kiln_status ocl_build(rt_gpu *d, const char *src, rt_gpu_prog **out, char *err, size_t errcap) {
    *out = NULL;
    cl_int e = 0;
    const char *srcs[1] = {src};
    size_t lens[1] = {strlen(src)};
    cl_program pr = cl.CreateProgramWithSource(d->ctx, 1, srcs, lens, &e);
    if (!pr || e != CL_SUCCESS) {
        snprintf(err, errcap, "opencl: clCreateProgramWithSource failed (error %d)", (int)e);
        return KILN_ERR_IO;
    }
    char opts[512];
    kiln_env env;
    kiln_env_read(&env);
    const char *extra = env.host.opencl_options;
    snprintf(opts, sizeof opts, "%s %s", d->correct_div ? "-cl-fp32-correctly-rounded-divide-sqrt" : "",
             extra ? extra : "");
    e = cl.BuildProgram(pr, 1, &d->dev, opts, NULL, NULL);
    if (e != CL_SUCCESS) {
        size_t n = 0;
        char *log = NULL;
        if (cl.GetProgramBuildInfo(pr, d->dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) == CL_SUCCESS && n) {
            log = kiln_xcalloc(n + 1, 1);
            if (cl.GetProgramBuildInfo(pr, d->dev, CL_PROGRAM_BUILD_LOG, n, log, NULL) != CL_SUCCESS) log[0] = 0;
        }
        snprintf(err, errcap, "opencl: building the program for %s failed (error %d): %.3000s", d->name, (int)e,
                 log ? log : "(no build log)");
        free(log);
        cl.ReleaseProgram(pr);
        return KILN_ERR_IO;
    }
    rt_gpu_prog *p = kiln_xcalloc(1, sizeof *p);
    p->prog = pr;
    *out = p;
    return KILN_OK;
}

static void ocl_prog_free(rt_gpu_prog *p) {
    if (!p) return;
    for (int i = 0; i < p->nks; i++) cl.ReleaseKernel(p->ks[i].k);
    free(p->ks);
    if (p->prog) cl.ReleaseProgram(p->prog);
    free(p);
}

static cl_mem as_mem(rt_gpu_mem m) { return (cl_mem)(uintptr_t)m; }

static kiln_status ocl_alloc(rt_gpu *d, size_t bytes, rt_gpu_mem *out, char *err, size_t errcap) {
    cl_int e = 0;
    /* zero-sized buffers are invalid in OpenCL; a small one stands in */
    cl_mem m = cl.CreateBuffer(d->ctx, CL_MEM_READ_WRITE, bytes ? bytes : 64, NULL, &e);
    if (!m || e != CL_SUCCESS) {
        snprintf(err, errcap, "opencl: cannot allocate %zu bytes on %s (error %d)", bytes, d->name, (int)e);
        *out = 0;
        return KILN_ERR_NOMEM;
    }
    *out = (rt_gpu_mem)(uintptr_t)m;
    return KILN_OK;
}

static void ocl_free(rt_gpu *d, rt_gpu_mem m) {
    (void)d;
    if (m) cl.ReleaseMemObject(as_mem(m));
}

static kiln_status ocl_upload(rt_gpu *d, rt_gpu_mem m, size_t off, const void *src, size_t bytes, char *err,
                              size_t errcap) {
    if (!bytes) return KILN_OK;
    cl_int e = cl.EnqueueWriteBuffer(d->q, as_mem(m), CL_TRUE, off, bytes, src, 0, NULL, NULL);
    if (e != CL_SUCCESS) {
        snprintf(err, errcap, "opencl: writing %zu bytes to the device failed (error %d)", bytes, (int)e);
        return KILN_ERR_IO;
    }
    return KILN_OK;
}

static kiln_status ocl_download(rt_gpu *d, rt_gpu_mem m, size_t off, void *dst, size_t bytes, char *err,
                                size_t errcap) {
    if (!bytes) return KILN_OK;
    cl_int e = cl.EnqueueReadBuffer(d->q, as_mem(m), CL_TRUE, off, bytes, dst, 0, NULL, NULL);
    if (e != CL_SUCCESS) {
        snprintf(err, errcap, "opencl: reading %zu bytes from the device failed (error %d)", bytes, (int)e);
        return KILN_ERR_IO;
    }
    return KILN_OK;
}

static kiln_status ocl_copy(rt_gpu *d, rt_gpu_mem dst, size_t doff, rt_gpu_mem src, size_t soff, size_t bytes,
                            char *err, size_t errcap) {
    if (!bytes) return KILN_OK;
    cl_int e = cl.EnqueueCopyBuffer(d->q, as_mem(src), as_mem(dst), soff, doff, bytes, 0, NULL, NULL);
    if (e != CL_SUCCESS) {
        snprintf(err, errcap, "opencl: a device copy of %zu bytes failed (error %d)", bytes, (int)e);
        return KILN_ERR_IO;
    }
    return KILN_OK;
}

static kiln_status ocl_launch(rt_gpu *d, rt_gpu_prog *p, const char *name, const rt_gpu_arg *args, int nargs,
                              int64_t items, int group, char *err, size_t errcap) {
    if (items <= 0) return KILN_OK;
    cl_kernel k = NULL;
    for (int i = 0; i < p->nks && !k; i++)
        if (strcmp(p->ks[i].name, name) == 0) k = p->ks[i].k;
    if (!k) {
        cl_int e = 0;
        k = cl.CreateKernel(p->prog, name, &e);
        if (!k || e != CL_SUCCESS) {
            snprintf(err, errcap, "opencl: kernel %s is missing from the program (error %d)", name, (int)e);
            return KILN_ERR_IO;
        }
        if (p->nks == p->capks) {
            p->capks = p->capks ? 2 * p->capks : 16;
            p->ks = kiln_xrealloc(p->ks, (size_t)p->capks * sizeof *p->ks);
        }
        snprintf(p->ks[p->nks].name, sizeof p->ks[p->nks].name, "%s", name);
        p->ks[p->nks++].k = k;
    }
    for (int i = 0; i < nargs; i++) {
        cl_int e;
        if (args[i].kind == RT_GPU_ARG_MEM) {
            cl_mem m = as_mem(args[i].mem);
            e = cl.SetKernelArg(k, (cl_uint)i, sizeof m, &m);
        } else {
            int64_t v = args[i].i64;
            e = cl.SetKernelArg(k, (cl_uint)i, sizeof v, &v);
        }
        if (e != CL_SUCCESS) {
            snprintf(err, errcap, "opencl: setting argument %d of %s failed (error %d)", i, name, (int)e);
            return KILN_ERR_IO;
        }
    }
    size_t local = group > 0 ? (size_t)group : 64;
    if (local > d->max_group) local = d->max_group;
    size_t global = ((size_t)items + local - 1) / local * local;
    cl_int e = cl.EnqueueNDRangeKernel(d->q, k, 1, NULL, &global, &local, 0, NULL, NULL);
    if (e != CL_SUCCESS) {
        snprintf(err, errcap, "opencl: launching %s over %lld items failed (error %d)", name, (long long)items, (int)e);
        return KILN_ERR_IO;
    }
    return KILN_OK;
}

static kiln_status ocl_finish(rt_gpu *d, char *err, size_t errcap) {
    cl_int e = cl.Finish(d->q);
    if (e != CL_SUCCESS) {
        snprintf(err, errcap, "opencl: clFinish failed (error %d)", (int)e);
        return KILN_ERR_IO;
    }
    return KILN_OK;
}

static void ocl_caps(rt_gpu *d, rt_gpu_caps *out) {
    out->max_group = d->max_group > 1024 ? 1024 : (int)d->max_group;
    out->tensor_mma = 0;
}

const rt_gpu_ops rt_opencl_ops = {
    .dialect = CG_GPU_OPENCL,
    .count = ocl_count,
    .open = ocl_open,
    .close = ocl_close,
    .fingerprint = ocl_fingerprint,
    .describe = ocl_describe,
    .build = ocl_build,
    .prog_free = ocl_prog_free,
    .alloc = ocl_alloc,
    .free = ocl_free,
    .upload = ocl_upload,
    .download = ocl_download,
    .copy = ocl_copy,
    .launch = ocl_launch,
    .finish = ocl_finish,
    .caps = ocl_caps,
};

const rt_backend rt_opencl_backend = RT_GPU_BACKEND("opencl", "OpenCL", &rt_opencl_ops);
