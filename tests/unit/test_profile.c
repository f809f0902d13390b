/* test_profile.c — the per-kernel profile (src/runtime/profile.c) across a
 * search's own profiling: kiln_program_profile_on(p, 0) keeps a profile the
 * program was compiled with (kiln_compile_options.profile, as `kiln bench
 * --profile` sets through KILN_PROFILE), its counts reset, so the runs after
 * a first-run search are still profiled; a program compiled without one has
 * its counters freed. Counts only, never times compared. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kiln.h"
#include "kiln_compile.h"

/* y = x W^T, x 2 x 64, W 32 x 64 in f32 */
static kiln_graph *small_linear(float **bufs) {
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "2, 64");
    kiln_tensor w = kiln_input(g, "w", KILN_F32, "32, 64");
    kiln_output(g, kiln_linear(g, x, w, KILN_NONE), "y");
    bufs[0] = malloc(2 * 64 * sizeof(float));
    bufs[1] = malloc(32 * 64 * sizeof(float));
    for (int i = 0; i < 2 * 64; i++) bufs[0][i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 32 * 64; i++) bufs[1][i] = (float)(i % 5) * 0.25f;
    kiln_bind_input(g, "x", bufs[0], 2 * 64 * sizeof(float));
    kiln_bind_weight(g, "w", bufs[1], 32 * 64 * sizeof(float));
    return g;
}

static void check_profile_kept(int compiled_with) {
    CASE_BEGIN(compiled_with ? "profile_kept_after_search_profiling" : "profile_off_frees_counters");
    float *bufs[2] = {NULL, NULL};
    kiln_graph *g = small_linear(bufs);
    kiln_compile_options o = kiln_compile_defaults();
    o.threads = 1;
    o.profile = compiled_with ? 2 : 0; /* 2: collected quietly, no table at free */
    kiln_status st;
    kiln_program *p = kiln_compile(g, &o, &st);
    CHECK(p != NULL, "compile: %s", kiln_graph_error(g));
    if (p) {
        int nk = kiln_program_kernel_count(p);
        double *t = calloc((size_t)nk + 1, sizeof *t);
        /* what the first-run search does (autotune.c): on, a run, off */
        kiln_program_profile_on(p, 1);
        CHECK(kiln_run(p) == KILN_OK, "run: %s", kiln_graph_error(g));
        CHECK(kiln_program_kernel_times(p, t, nk) == nk, "no kernel times while on");
        kiln_program_profile_on(p, 0);
        int after_off = kiln_program_kernel_times(p, t, nk);
        double sum = 0;
        for (int i = 0; i < after_off; i++) sum += t[i];
        if (compiled_with) {
            CHECK(after_off == nk, "the compiled-with profile was dropped: %d of %d kernels", after_off, nk);
            CHECK(sum == 0.0, "the counts were not reset: %g s", sum);
            CHECK(kiln_run(p) == KILN_OK, "run: %s", kiln_graph_error(g));
            char *rep = kiln_program_profile(p, 10.0, 10.0, 10.0, 5);
            CHECK(rep && strstr(rep, "over 1 runs") != NULL, "the user's run is not in the profile: [%s]", rep ? rep : "");
            free(rep);
        } else {
            CHECK(after_off == 0, "counters kept without a profile asked for: %d", after_off);
            CHECK(kiln_run(p) == KILN_OK, "run: %s", kiln_graph_error(g));
            char *rep = kiln_program_profile(p, 10.0, 10.0, 10.0, 5);
            CHECK(rep && rep[0] == 0, "a profile without one asked for: [%s]", rep ? rep : "");
            free(rep);
        }
        free(t);
        kiln_program_free(p);
    }
    kiln_graph_free(g);
    free(bufs[0]);
    free(bufs[1]);
    CASE_END();
}

int main(void) {
    check_profile_kept(1);
    check_profile_kept(0);
    return check_exit();
}
