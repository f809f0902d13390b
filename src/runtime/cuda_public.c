/* cuda_public.c — the device-free CUDA checks of include/kiln_compile.h
 * (kiln_cuda_compile_check, kiln_cuda_nvrtc_version) over cuda.c's NVRTC
 * loader, for tests and tools that check generated CUDA C without a GPU.
 */
#include "gpu.h"
#include "kiln_compile.h"

kiln_status kiln_cuda_compile_check(const char *src, const char *arch, size_t *bin_bytes, char *err, size_t errlen) {
    if (!src || !arch) return KILN_ERR_INVALID;
    size_t dummy = 0;
    return rt_cuda_compile_check(src, arch, bin_bytes ? bin_bytes : &dummy, err, errlen);
}

const char *kiln_cuda_nvrtc_version(void) { return rt_cuda_nvrtc_version(); }
