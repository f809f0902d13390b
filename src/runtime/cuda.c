/* cuda.c — the CUDA device interface (gpu.h): CUDA C compiled with NVRTC,
 * loaded and launched through the driver API.
 *
 * Both libraries are opened with dlopen at first use (libcuda.so.1 for the
 * driver; libnvrtc.so, or the versioned names of CUDA 11-13, or
 * $KILN_NVRTC), so kiln builds without the CUDA toolkit and reports a clear
 * error without it. NVRTC alone is enough to compile-check generated code
 * for any architecture (rt_cuda_compile_check), which is what the test suite
 * does on machines without a GPU. The few API types, constants and
 * prototypes are declared below from the CUDA documentation.
 *
 * A device is used through its primary context, made current on every call
 * (callers may come from any thread). Programs are compiled to a cubin for
 * the device's exact architecture (sm_<major><minor>), with --fmad=false so
 * no multiply-add is fused (the interpreter's numerics; NVRTC's defaults
 * already keep division and square root correctly rounded and denormals).
 * Launches use the default stream: in order, finish() synchronises.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "config.h"
#include "gpu.h"

#define RT_GPU_IR_VERSION KILN_IR_VERSION

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

#define CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK 1
#define CU_DEVICE_ATTRIBUTE_CLOCK_RATE 13
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE 36
#define CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH 37
#define CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE 38
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76

typedef struct cu_api {
    CUresult (*Init)(unsigned);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxSynchronize)(void);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    CUresult (*GetErrorString)(CUresult, const char **);
} cu_api;

typedef struct nvrtc_api {
    nvrtcResult (*Version)(int *, int *);
    nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                                 const char *const *);
    nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
    nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetPTX)(nvrtcProgram, char *);
    nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *); /* CUDA >= 11.1; may be NULL */
    nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
    nvrtcResult (*DestroyProgram)(nvrtcProgram *);
    const char *(*GetErrorString)(nvrtcResult);
} nvrtc_api;

static pthread_mutex_t cu_mu = PTHREAD_MUTEX_INITIALIZER;
static cu_api cu;
static nvrtc_api nv;
static int cu_state, nv_state; /* 0 untried, 1 loaded, -1 failed */
static char cu_why[512], nv_why[512], nv_version[32];

static int load_sym(void *h, const char *name, void *fnptr) {
    void *f = dlsym(h, name);
    if (!f) return -1;
    /* dlsym returns data pointers; POSIX guarantees the conversion */
    memcpy(fnptr, &f, sizeof f);
    return 0;
}

static int cu_load(char *err, size_t errcap) {
    pthread_mutex_lock(&cu_mu);
    if (cu_state == 0) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h) h = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *why = dlerror();
            snprintf(cu_why, sizeof cu_why, "cuda: cannot load the driver library libcuda.so.1 (%s); is an NVIDIA driver installed?",
                     why ? why : "not found");
            cu_state = -1;
        } else {
            int bad = 0;
            bad |= load_sym(h, "cuInit", &cu.Init);
            bad |= load_sym(h, "cuDriverGetVersion", &cu.DriverGetVersion);
            bad |= load_sym(h, "cuDeviceGetCount", &cu.DeviceGetCount);
            bad |= load_sym(h, "cuDeviceGet", &cu.DeviceGet);
            bad |= load_sym(h, "cuDeviceGetName", &cu.DeviceGetName);
            bad |= load_sym(h, "cuDeviceGetAttribute", &cu.DeviceGetAttribute);
            bad |= load_sym(h, "cuDeviceTotalMem_v2", &cu.DeviceTotalMem);
            bad |= load_sym(h, "cuDevicePrimaryCtxRetain", &cu.DevicePrimaryCtxRetain);
            bad |= load_sym(h, "cuDevicePrimaryCtxRelease_v2", &cu.DevicePrimaryCtxRelease) &&
                   load_sym(h, "cuDevicePrimaryCtxRelease", &cu.DevicePrimaryCtxRelease);
            bad |= load_sym(h, "cuCtxSetCurrent", &cu.CtxSetCurrent);
            bad |= load_sym(h, "cuCtxSynchronize", &cu.CtxSynchronize);
            bad |= load_sym(h, "cuModuleLoadData", &cu.ModuleLoadData);
            bad |= load_sym(h, "cuModuleUnload", &cu.ModuleUnload);
            bad |= load_sym(h, "cuModuleGetFunction", &cu.ModuleGetFunction);
            bad |= load_sym(h, "cuMemAlloc_v2", &cu.MemAlloc);
            bad |= load_sym(h, "cuMemFree_v2", &cu.MemFree);
            bad |= load_sym(h, "cuMemcpyHtoD_v2", &cu.MemcpyHtoD);
            bad |= load_sym(h, "cuMemcpyDtoH_v2", &cu.MemcpyDtoH);
            bad |= load_sym(h, "cuMemcpyDtoD_v2", &cu.MemcpyDtoD);
            bad |= load_sym(h, "cuLaunchKernel", &cu.LaunchKernel);
            bad |= load_sym(h, "cuGetErrorString", &cu.GetErrorString);
            if (bad) {
                snprintf(cu_why, sizeof cu_why, "cuda: libcuda.so.1 lacks driver API entry points kiln needs");
                cu_state = -1;
            } else if (cu.Init(0) != 0) {
                snprintf(cu_why, sizeof cu_why, "cuda: cuInit failed: no usable NVIDIA GPU or driver");
                cu_state = -1;
            } else {
                cu_state = 1;
            }
        }
    }
    int ok = cu_state == 1;
    if (!ok && err && errcap) snprintf(err, errcap, "%s", cu_why);
    pthread_mutex_unlock(&cu_mu);
    return ok ? 0 : -1;
}

static int nv_load(char *err, size_t errcap) {
    pthread_mutex_lock(&cu_mu);
    if (nv_state == 0) {
        kiln_env env;
        kiln_env_read(&env);
        const char *names[] = {env.host.nvrtc, "libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                               "libnvrtc.so.11.2", "/usr/local/cuda/lib64/libnvrtc.so", "/usr/local/cuda/lib/libnvrtc.so"};
        void *h = NULL;
        for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
            if (names[i] && names[i][0]) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(nv_why, sizeof nv_why,
                     "cuda: cannot load NVRTC (libnvrtc.so); install the CUDA toolkit or set KILN_NVRTC to the library");
            nv_state = -1;
        } else {
            int bad = 0;
            bad |= load_sym(h, "nvrtcVersion", &nv.Version);
            bad |= load_sym(h, "nvrtcCreateProgram", &nv.CreateProgram);
            bad |= load_sym(h, "nvrtcCompileProgram", &nv.CompileProgram);
            bad |= load_sym(h, "nvrtcGetProgramLogSize", &nv.GetProgramLogSize);
            bad |= load_sym(h, "nvrtcGetProgramLog", &nv.GetProgramLog);
            bad |= load_sym(h, "nvrtcGetPTXSize", &nv.GetPTXSize);
            bad |= load_sym(h, "nvrtcGetPTX", &nv.GetPTX);
            bad |= load_sym(h, "nvrtcDestroyProgram", &nv.DestroyProgram);
            bad |= load_sym(h, "nvrtcGetErrorString", &nv.GetErrorString);
            if (load_sym(h, "nvrtcGetCUBINSize", &nv.GetCUBINSize) || load_sym(h, "nvrtcGetCUBIN", &nv.GetCUBIN)) {
                nv.GetCUBINSize = NULL;
                nv.GetCUBIN = NULL;
            }
            int maj = 0, min = 0;
            if (bad) {
                snprintf(nv_why, sizeof nv_why, "cuda: the NVRTC library lacks entry points kiln needs");
                nv_state = -1;
            } else {
                if (nv.Version(&maj, &min) == 0) snprintf(nv_version, sizeof nv_version, "%d.%d", maj, min);
                else snprintf(nv_version, sizeof nv_version, "?");
                nv_state = 1;
            }
        }
    }
    int ok = nv_state == 1;
    if (!ok && err && errcap) snprintf(err, errcap, "%s", nv_why);
    pthread_mutex_unlock(&cu_mu);
    return ok ? 0 : -1;
}

const char *rt_cuda_nvrtc_version(void) { return nv_load(NULL, 0) ? NULL : nv_version; }

static const char *cu_err(CUresult r) {
    const char *s = NULL;
    if (cu.GetErrorString && cu.GetErrorString(r, &s) == 0 && s) return s;
    return "unknown CUDA error";
}

/* NVRTC compile of src for arch ("sm_90"): the cubin (or, without
 * nvrtcGetCUBIN, PTX for compute_<arch>) in *bin (malloc'd) */
static kiln_status nvrtc_compile(const char *src, const char *arch, char **bin, size_t *bin_bytes, char *err,
                                 size_t errcap) {
    *bin = NULL;
    *bin_bytes = 0;
    if (nv_load(err, errcap)) return KILN_ERR_UNSUPPORTED;
    int cubin = nv.GetCUBIN != NULL;
    char archopt[64];
    if (cubin) snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
    else snprintf(archopt, sizeof archopt, "--gpu-architecture=compute_%s", strncmp(arch, "sm_", 3) == 0 ? arch + 3 : arch);
    const char *opts[] = {archopt, "--fmad=false", "--std=c++17"};
    nvrtcProgram prog = NULL;
    nvrtcResult r = nv.CreateProgram(&prog, src, "kiln.cu", 0, NULL, NULL);
    if (r != 0) {
        snprintf(err, errcap, "cuda: nvrtcCreateProgram: %s", nv.GetErrorString(r));
        return KILN_ERR_IO;
    }
    r = nv.CompileProgram(prog, 3, opts);
    if (r != 0) {
        size_t n = 0;
        char *log = NULL;
        if (nv.GetProgramLogSize(prog, &n) == 0 && n) {
            log = kiln_xcalloc(n + 1, 1);
            if (nv.GetProgramLog(prog, log) != 0) log[0] = 0;
        }
        snprintf(err, errcap, "cuda: NVRTC failed for %s (%s): %.3000s", arch, nv.GetErrorString(r),
                 log ? log : "(no log)");
        free(log);
        nv.DestroyProgram(&prog);
        return KILN_ERR_IO;
    }
    size_t n = 0;
    r = cubin ? nv.GetCUBINSize(prog, &n) : nv.GetPTXSize(prog, &n);
    if (r == 0 && n) {
        *bin = kiln_xmalloc(n + 1);
        r = cubin ? nv.GetCUBIN(prog, *bin) : nv.GetPTX(prog, *bin);
    }
    nv.DestroyProgram(&prog);
    if (r != 0 || !n) {
        free(*bin);
        *bin = NULL;
        snprintf(err, errcap, "cuda: NVRTC produced no code for %s", arch);
        return KILN_ERR_IO;
    }
    *bin_bytes = n;
    return KILN_OK;
}

kiln_status rt_cuda_compile_check(const char *src, const char *arch, size_t *bin_bytes, char *err, size_t errcap) {
    char *bin = NULL;
    size_t n = 0;
    kiln_status s = nvrtc_compile(src, arch, &bin, &n, err, errcap);
    free(bin);
    if (bin_bytes) *bin_bytes = n;
    return s;
}

/* ---- devices ---- */

typedef struct cu_fent {
    char name[32];
    CUfunction f;
} cu_fent;

struct rt_gpu_prog {
    CUmodule mod;
    cu_fent *fs;
    int nfs, capfs;
};

struct rt_gpu {
    CUdevice dev;
    CUcontext ctx;
    char name[256];
    int cc_major, cc_minor, sms, clock_khz, mem_clock_khz, bus_bits, l2, max_threads, driver;
    size_t total_mem;
};

static int cuda_count(char *err, size_t errcap) {
    if (cu_load(err, errcap)) return 0;
    int n = 0;
    if (cu.DeviceGetCount(&n) != 0) n = 0;
    if (n == 0 && err && errcap) snprintf(err, errcap, "cuda: the driver reports no CUDA device");
    return n;
}

static kiln_status cuda_open(int index, rt_gpu **out, char *err, size_t errcap) {
    *out = NULL;
    int n = cuda_count(err, errcap);
    if (n == 0) return KILN_ERR_UNSUPPORTED;
    if (index < 0 || index >= n) {
        snprintf(err, errcap, "cuda: no device %d (there are %d)", index, n);
        return KILN_ERR_INVALID;
    }
    rt_gpu *d = kiln_xcalloc(1, sizeof *d);
    CUresult r = cu.DeviceGet(&d->dev, index);
    if (r == 0) r = cu.DevicePrimaryCtxRetain(&d->ctx, d->dev);
    if (r == 0) r = cu.CtxSetCurrent(d->ctx);
    if (r != 0) {
        snprintf(err, errcap, "cuda: cannot open device %d: %s", index, cu_err(r));
        free(d);
        return KILN_ERR_UNSUPPORTED;
    }
    if (cu.DeviceGetName(d->name, (int)sizeof d->name - 1, d->dev) != 0) snprintf(d->name, sizeof d->name, "?");
    cu.DeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev);
    cu.DeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev);
    cu.DeviceGetAttribute(&d->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev);
    cu.DeviceGetAttribute(&d->clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, d->dev);
    cu.DeviceGetAttribute(&d->mem_clock_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, d->dev);
    cu.DeviceGetAttribute(&d->bus_bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, d->dev);
    cu.DeviceGetAttribute(&d->l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d->dev);
    cu.DeviceGetAttribute(&d->max_threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, d->dev);
    cu.DriverGetVersion(&d->driver);
    cu.DeviceTotalMem(&d->total_mem, d->dev);
    *out = d;
    return KILN_OK;
}

static void cuda_close(rt_gpu *d) {
    if (!d) return;
    if (d->ctx) cu.DevicePrimaryCtxRelease(d->dev);
    free(d);
}

static char *cuda_fingerprint(rt_gpu *d) {
    char *s = kiln_xmalloc(600);
    snprintf(s, 600, "cuda;device=%s;arch=sm_%d%d;sms=%d;driver=%d;nvrtc=%s;ir=%d", d->name, d->cc_major, d->cc_minor,
             d->sms, d->driver, rt_cuda_nvrtc_version() ? rt_cuda_nvrtc_version() : "none", RT_GPU_IR_VERSION);
    return s;
}

static char *cuda_describe(rt_gpu *d) {
    char *s = kiln_xmalloc(1000);
    /* DDR: two transfers per memory clock */
    double bw = 2.0 * (double)d->mem_clock_khz * 1e3 * (double)d->bus_bits / 8.0 / 1e9;
    snprintf(s, 1000,
             "  device       %s, compute capability %d.%d\n  compute      %d SMs at %.0f MHz, blocks up to %d threads\n"
             "  memory       %.2f GiB, %d-bit bus, about %.0f GB/s peak; L2 %d KiB\n  driver       %d.%d, NVRTC %s\n",
             d->name, d->cc_major, d->cc_minor, d->sms, (double)d->clock_khz / 1e3, d->max_threads,
             (double)d->total_mem / (1024.0 * 1024 * 1024), d->bus_bits, bw, d->l2 / 1024, d->driver / 1000,
             (d->driver % 1000) / 10, rt_cuda_nvrtc_version() ? rt_cuda_nvrtc_version() : "not found");
    return s;
}

static kiln_status cuda_build(rt_gpu *d, const char *src, rt_gpu_prog **out, char *err, size_t errcap) {
    *out = NULL;
    char arch[16];
    snprintf(arch, sizeof arch, "sm_%d%d", d->cc_major, d->cc_minor);
    char *bin = NULL;
    size_t n = 0;
    kiln_status s = nvrtc_compile(src, arch, &bin, &n, err, errcap);
    if (s != KILN_OK) return s;
    cu.CtxSetCurrent(d->ctx);
    CUmodule mod = NULL;
    CUresult r = cu.ModuleLoadData(&mod, bin);
    free(bin);
    if (r != 0) {
        snprintf(err, errcap, "cuda: loading the compiled module on %s failed: %s", d->name, cu_err(r));
        return KILN_ERR_IO;
    }
    rt_gpu_prog *p = kiln_xcalloc(1, sizeof *p);
    p->mod = mod;
    *out = p;
    return KILN_OK;
}

static void cuda_prog_free(rt_gpu_prog *p) {
    if (!p) return;
    if (p->mod) cu.ModuleUnload(p->mod);
    free(p->fs);
    free(p);
}

static kiln_status cuda_alloc(rt_gpu *d, size_t bytes, rt_gpu_mem *out, char *err, size_t errcap) {
    cu.CtxSetCurrent(d->ctx);
    CUdeviceptr m = 0;
    CUresult r = cu.MemAlloc(&m, bytes ? bytes : 64);
    if (r != 0) {
        snprintf(err, errcap, "cuda: cannot allocate %zu bytes on %s: %s", bytes, d->name, cu_err(r));
        *out = 0;
        return KILN_ERR_NOMEM;
    }
    *out = m;
    return KILN_OK;
}

static void cuda_free(rt_gpu *d, rt_gpu_mem m) {
    if (!m) return;
    cu.CtxSetCurrent(d->ctx);
    cu.MemFree(m);
}

static kiln_status cuda_upload(rt_gpu *d, rt_gpu_mem m, size_t off, const void *src, size_t bytes, char *err,
                               size_t errcap) {
    if (!bytes) return KILN_OK;
    cu.CtxSetCurrent(d->ctx);
    CUresult r = cu.MemcpyHtoD(m + off, src, bytes);
    if (r != 0) {
        snprintf(err, errcap, "cuda: writing %zu bytes to the device failed: %s", bytes, cu_err(r));
        return KILN_ERR_IO;
    }
    return KILN_OK;
}

static kiln_status cuda_download(rt_gpu *d, rt_gpu_mem m, size_t off, void *dst, size_t bytes, char *err,
                                 size_t errcap) {
    if (!bytes) return KILN_OK;
    cu.CtxSetCurrent(d->ctx);
    CUresult r = cu.MemcpyDtoH(dst, m + off, bytes);
    if (r != 0) {
        snprintf(err, errcap, "cuda: reading %zu bytes from the device failed: %s", bytes, cu_err(r));
        return KILN_ERR_IO;
    }
    return KILN_OK;
}

static kiln_status cuda_copy(rt_gpu *d, rt_gpu_mem dst, size_t doff, rt_gpu_mem src, size_t soff, size_t bytes,
                             char *err, size_t errcap) {
    if (!bytes) return KILN_OK;
    cu.CtxSetCurrent(d->ctx);
    CUresult r = cu.MemcpyDtoD(dst + doff, src + soff, bytes);
    if (r != 0) {
        snprintf(err, errcap, "cuda: a device copy of %zu bytes failed: %s", bytes, cu_err(r));
        return KILN_ERR_IO;
    }
    return KILN_OK;
}

static kiln_status cuda_launch(rt_gpu *d, rt_gpu_prog *p, const char *name, const rt_gpu_arg *args, int nargs,
                               int64_t items, int group, char *err, size_t errcap) {
    if (items <= 0) return KILN_OK;
    cu.CtxSetCurrent(d->ctx);
    CUfunction f = NULL;
    for (int i = 0; i < p->nfs && !f; i++)
        if (strcmp(p->fs[i].name, name) == 0) f = p->fs[i].f;
    if (!f) {
        CUresult r = cu.ModuleGetFunction(&f, p->mod, name);
        if (r != 0) {
            snprintf(err, errcap, "cuda: kernel %s is missing from the module: %s", name, cu_err(r));
            return KILN_ERR_IO;
        }
        if (p->nfs == p->capfs) {
            p->capfs = p->capfs ? 2 * p->capfs : 16;
            p->fs = kiln_xrealloc(p->fs, (size_t)p->capfs * sizeof *p->fs);
        }
        snprintf(p->fs[p->nfs].name, sizeof p->fs[p->nfs].name, "%s", name);
        p->fs[p->nfs++].f = f;
    }
    /* kernel parameters: pointers to each value (CUdeviceptr and i64 are both 8 bytes) */
    uint64_t vals[256];
    void *params[256];
    if (nargs > 256) {
        snprintf(err, errcap, "cuda: kernel %s has too many arguments (%d)", name, nargs);
        return KILN_ERR_UNSUPPORTED;
    }
    for (int i = 0; i < nargs; i++) {
        vals[i] = args[i].kind == RT_GPU_ARG_MEM ? args[i].mem : (uint64_t)args[i].i64;
        params[i] = &vals[i];
    }
    int block = group > 0 ? group : 128;
    if (d->max_threads > 0 && block > d->max_threads) block = d->max_threads;
    int64_t grid = (items + block - 1) / block;
    if (grid > 2147483647) {
        snprintf(err, errcap, "cuda: kernel %s: %lld work items exceed one grid", name, (long long)items);
        return KILN_ERR_UNSUPPORTED;
    }
    CUresult r = cu.LaunchKernel(f, (unsigned)grid, 1, 1, (unsigned)block, 1, 1, 0, NULL, params, NULL);
    if (r != 0) {
        snprintf(err, errcap, "cuda: launching %s over %lld items failed: %s", name, (long long)items, cu_err(r));
        return KILN_ERR_IO;
    }
    return KILN_OK;
}

static kiln_status cuda_finish(rt_gpu *d, char *err, size_t errcap) {
    cu.CtxSetCurrent(d->ctx);
    CUresult r = cu.CtxSynchronize();
    if (r != 0) {
        snprintf(err, errcap, "cuda: a kernel failed: %s", cu_err(r));
        return KILN_ERR_IO;
    }
    return KILN_OK;
}

static void cuda_caps(rt_gpu *d, rt_gpu_caps *out) {
    out->max_group = d->max_threads > 0 ? d->max_threads : 1024;
    out->tensor_mma = d->cc_major >= 8;
}

const rt_gpu_ops rt_cuda_ops = {
    .dialect = CG_GPU_CUDA,
    .count = cuda_count,
    .open = cuda_open,
    .close = cuda_close,
    .fingerprint = cuda_fingerprint,
    .describe = cuda_describe,
    .build = cuda_build,
    .prog_free = cuda_prog_free,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .launch = cuda_launch,
    .finish = cuda_finish,
    .caps = cuda_caps,
};

const rt_backend rt_cuda_backend = RT_GPU_BACKEND("cuda", "CUDA", &rt_cuda_ops);
