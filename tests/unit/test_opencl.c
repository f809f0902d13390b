/* test_opencl.c — the GPU device interface (gpu.h) on OpenCL, the GPU
 * emitter's two dialects, and backend selection.
 *
 * Device cases need an OpenCL driver (PoCL in CI); without one they print a
 * SKIP line naming the reason and count as nothing. The rest needs no
 * device: emitted source text for both dialects, the backend table, the
 * error for an unknown backend, and a CUDA compile check of a hand-written
 * kernel with NVRTC when the library is there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gpu.h"
#include "kiln.h"
#include "kiln_compile.h"
#include "backend.h"

static const char *probe_src =
    "__kernel void scale(__global float *x, const long n, const long k) {\n"
    "  long i = (long)get_global_id(0);\n"
    "  if (i < n) x[i] = x[i] * (float)k + 0.5f;\n"
    "}\n";

/* a graph with a reduction, a fused softmax-style stage, a block-format
 * load and a gather: the emitter's main paths */
static kiln_graph *sample_graph(void) {
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "n, 64");
    kiln_tensor s = kiln_softmax(g, x, 1);
    kiln_tensor r = kiln_sum(g, s, 1);
    kiln_output(g, s, "s");
    kiln_output(g, r, "r");
    return g;
}

int main(void) {
    char err[4096] = "";

    CASE_BEGIN("gpu_backend_table");
    CHECK(rt_backend_find("opencl") == &rt_opencl_backend && rt_opencl_backend.gpu == &rt_opencl_ops, "%s", err);
    CHECK(rt_backend_find("cuda") == &rt_cuda_backend && rt_cuda_backend.gpu == &rt_cuda_ops, "%s", err);
    CHECK(rt_backend_find("cpu") == &rt_cpu_backend && rt_cpu_backend.gpu == NULL, "%s", err);
    CHECK(rt_backend_find("tpu") == NULL, "%s", err);
    CHECK(strcmp(rt_backend_names(), "cpu, opencl, cuda") == 0, "%s", rt_backend_names());
    CASE_END();

    CASE_BEGIN("registry_entries_fill_every_program_member");
    int nbe = 0;
    for (; rt_backends[nbe]; nbe++) {
        const rt_backend *be = rt_backends[nbe];
        CHECK(be->name && be->label && rt_backend_find(be->name) == be, "entry %d", nbe);
        CHECK(kiln_backend_name(nbe) && strcmp(kiln_backend_name(nbe), be->name) == 0, "entry %d", nbe);
        CHECK(strcmp(kiln_backend_label(be->name), be->label) == 0, "%s", be->name);
        CHECK(be->fingerprint && be->supports && be->prepare && be->release && be->bind && be->place && be->result &&
                  be->begin && be->copy && be->host_step && be->run_kernel && be->sync && be->fetch,
              "%s: a program-level member is missing", be->name);
        int host_code = (be->caps & RT_CAP_HOST_CODE) != 0;
        CHECK(host_code == (be->isa && be->emit && be->compile && be->symbol && be->module_path && be->module_free &&
                            be->launch),
              "%s: host-code members disagree with its caps", be->name);
        CHECK(kiln_backend_host_memory(be->name) == ((be->caps & RT_CAP_HOST_MEMORY) != 0), "%s", be->name);
        CHECK((be->gpu != NULL) == (be->devices != NULL), "%s: a device backend lists its devices", be->name);
    }
    CHECK(nbe == 3 && kiln_backend_name(nbe) == NULL && kiln_backend_name(-1) == NULL, "%d backends", nbe);
    CHECK(kiln_backend_label("tpu") == NULL, "unknown label");
    CASE_END();

    CASE_BEGIN("unknown_backend_is_a_clear_error");
    {
        kiln_graph *g = sample_graph();
        kiln_compile_options o = kiln_compile_defaults();
        o.backend = "tpu";
        kiln_status st = KILN_OK;
        kiln_program *p = kiln_compile(g, &o, &st);
        CHECK(p == NULL, "%s", err);
        CHECK(st == KILN_ERR_UNSUPPORTED, "%s", err);
        CHECK(strstr(kiln_graph_error(g), "opencl") && strstr(kiln_graph_error(g), "cuda"), "%s", err);
        kiln_program_free(p);
        kiln_graph_free(g);
    }
    CASE_END();

    CASE_BEGIN("emit_gpu_both_dialects");
    {
        setenv("KILN_GPU_EMIT_ONLY", "1", 1);
        const char *names[2] = {"opencl", "cuda"};
        for (int d = 0; d < 2; d++) {
            kiln_graph *g = sample_graph();
            kiln_compile_options o = kiln_compile_defaults();
            o.backend = names[d];
            kiln_status st = KILN_OK;
            kiln_program *p = kiln_compile(g, &o, &st);
            CHECK(p != NULL, "%s", err);
            if (p) {
                const char *src = kiln_program_source(p);
                CHECK(strstr(src, d ? "extern \"C\" __global__" : "__kernel void") != NULL, "%s", err);
                CHECK(strstr(src, "KKERNEL kiln_k0(") != NULL, "%s", err);
                /* no C-only spellings: OpenCL C has no `LL` literals or int64_t */
                CHECK(strstr(src, "LL)") == NULL && strstr(src, "int64_t") == NULL, "%s", err);
                /* the program refuses to run without a device, with a message */
                kiln_bind_dim(g, "n", 3);
                float x[3 * 64] = {0};
                kiln_bind_input(g, "x", x, sizeof x);
                CHECK(kiln_run(p) == KILN_ERR_UNSUPPORTED, "%s", err);
                CHECK(strstr(kiln_graph_error(g), "KILN_GPU_EMIT_ONLY") != NULL, "%s", err);
            }
            kiln_program_free(p);
            kiln_graph_free(g);
        }
        unsetenv("KILN_GPU_EMIT_ONLY");
    }
    CASE_END();

    err[0] = 0;
    int ndev = rt_opencl_ops.count(err, sizeof err);
    if (ndev == 0) {
        printf("SKIP opencl device cases: %s\n", err);
    } else {
        rt_gpu *d = NULL;
        CASE_BEGIN("opencl_device_fingerprint");
        CHECK(rt_gpu_default_device(&rt_opencl_ops, &d, err, sizeof err) == KILN_OK, "%s", err);
        if (d) {
            char *fp = rt_opencl_ops.fingerprint(d);
            CHECK(strncmp(fp, "opencl;", 7) == 0 && strstr(fp, "device=") && strstr(fp, ";ir="), "%s", err);
            free(fp);
        }
        CASE_END();

        CASE_BEGIN("opencl_build_launch_roundtrip");
        if (d) {
            rt_gpu_prog *pr = NULL;
            CHECK(rt_opencl_ops.build(d, probe_src, &pr, err, sizeof err) == KILN_OK, "%s", err);
            rt_gpu_mem m = 0;
            CHECK(rt_opencl_ops.alloc(d, 1000 * sizeof(float), &m, err, sizeof err) == KILN_OK, "%s", err);
            float h[1000], back[1000];
            for (int i = 0; i < 1000; i++) h[i] = (float)i;
            CHECK(rt_opencl_ops.upload(d, m, 0, h, sizeof h, err, sizeof err) == KILN_OK, "%s", err);
            rt_gpu_arg args[3] = {{RT_GPU_ARG_MEM, m, 0}, {RT_GPU_ARG_I64, 0, 999}, {RT_GPU_ARG_I64, 0, 3}};
            if (pr) CHECK(rt_opencl_ops.launch(d, pr, "scale", args, 3, 999, 64, err, sizeof err) == KILN_OK, "%s", err);
            CHECK(rt_opencl_ops.finish(d, err, sizeof err) == KILN_OK, "%s", err);
            CHECK(rt_opencl_ops.download(d, m, 0, back, sizeof back, err, sizeof err) == KILN_OK, "%s", err);
            int bad = 0;
            for (int i = 0; i < 999; i++) bad += back[i] != (float)i * 3.0f + 0.5f;
            CHECK(bad == 0, "%s", err);
            CHECK(back[999] == 999.0f, "%s", err); /* item 999 was not launched */
            /* a missing kernel is an error with its name, not a crash */
            if (pr) CHECK(rt_opencl_ops.launch(d, pr, "nope", args, 3, 1, 1, err, sizeof err) != KILN_OK, "%s", err);
            CHECK(strstr(err, "nope") != NULL, "%s", err);
            rt_opencl_ops.free(d, m);
            rt_opencl_ops.prog_free(pr);
        }
        CASE_END();

        CASE_BEGIN("opencl_build_error_has_the_log");
        if (d) {
            rt_gpu_prog *pr = NULL;
            CHECK(rt_opencl_ops.build(d, "__kernel void broken(__global float *x) { x[0] = y; }", &pr, err,
                                      sizeof err) != KILN_OK, "%s", err);
            CHECK(pr == NULL, "%s", err);
            CHECK(strstr(err, "building the program") != NULL && strstr(err, "y") != NULL, "%s", err);
        }
        CASE_END();

        CASE_BEGIN("opencl_compiled_graph_matches_reference");
        {
            kiln_graph *g = sample_graph();
            kiln_bind_dim(g, "n", 5);
            float x[5 * 64];
            for (int i = 0; i < 5 * 64; i++) x[i] = (float)((i * 37) % 101) / 17.0f - 2.0f;
            kiln_bind_input(g, "x", x, sizeof x);
            CHECK(kiln_eval_reference(g) == KILN_OK, "%s", err);
            float rs[5 * 64], rr[5], cs[5 * 64], cr[5];
            kiln_read_output(g, "s", rs, sizeof rs);
            kiln_read_output(g, "r", rr, sizeof rr);
            kiln_compile_options o = kiln_compile_defaults();
            o.backend = "opencl";
            kiln_program *p = kiln_compile(g, &o, NULL);
            CHECK(p != NULL, "%s", err);
            if (p) {
                CHECK(kiln_run(p) == KILN_OK, "%s", err);
                kiln_read_output(g, "s", cs, sizeof cs);
                kiln_read_output(g, "r", cr, sizeof cr);
                double worst = 0;
                for (int i = 0; i < 5 * 64; i++) {
                    double e = rs[i] > cs[i] ? rs[i] - cs[i] : cs[i] - rs[i];
                    if (e > worst) worst = e;
                }
                CHECK(worst <= 1e-6, "%s", err);
                for (int i = 0; i < 5; i++) CHECK(cr[i] > 0.9999f && cr[i] < 1.0001f, "%s", err);
                /* rebinding a size reruns without recompiling */
                kiln_bind_dim(g, "n", 2);
                kiln_bind_input(g, "x", x, 2 * 64 * sizeof(float));
                CHECK(kiln_run(p) == KILN_OK, "%s", err);
                float cr2[2];
                CHECK(kiln_read_output(g, "r", cr2, sizeof cr2) == KILN_OK, "%s", err);
                CHECK(cr2[1] > 0.9999f && cr2[1] < 1.0001f, "%s", err);
            }
            kiln_program_free(p);
            kiln_graph_free(g);
        }
        CASE_END();
    }

    CASE_BEGIN("cuda_nvrtc_compile_check");
    {
        const char *v = rt_cuda_nvrtc_version();
        if (!v) {
            printf("SKIP cuda_nvrtc_compile_check: NVRTC cannot be loaded\n");
        } else {
            size_t n = 0;
            const char *ok = "extern \"C\" __global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n";
            CHECK(rt_cuda_compile_check(ok, "sm_80", &n, err, sizeof err) == KILN_OK, "%s", err);
            CHECK(n > 0, "%s", err);
            CHECK(rt_cuda_compile_check("extern \"C\" __global__ void k() { undefined_thing(); }", "sm_90", &n, err,
                                        sizeof err) != KILN_OK, "%s", err);
            CHECK(strstr(err, "undefined_thing") != NULL, "%s", err);
        }
    }
    CASE_END();

    return check_exit();
}
