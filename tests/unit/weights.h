/* weights.h — test helpers shared by the contraction tests: seeded random
 * floats and weight buffers of any dtype (quantised by kiln's encoders, or
 * converted by the reference interpreter's cast). Header-only; each test
 * seeds its own generator. */
#ifndef KILN_TESTS_WEIGHTS_H
#define KILN_TESTS_WEIGHTS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "quant.h"

static uint64_t weights_rng = 0x9e3779b97f4a7c15ull;

static double urand(void) {
    weights_rng ^= weights_rng << 13;
    weights_rng ^= weights_rng >> 7;
    weights_rng ^= weights_rng << 17;
    return (double)(weights_rng >> 11) / 9007199254740992.0;
}

static float *rand_f32(int64_t n, double lo, double hi) {
    float *x = malloc((size_t)n * sizeof *x + 1);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * urand());
    return x;
}

/* weights of dtype t from f32 values (quantised or converted) */
static void *make_weights(kiln_dtype t, const float *src, int64_t n, size_t *bytes) {
    *bytes = kiln_dtype_bytes(t, n);
    void *w = malloc(*bytes + 1);
    if (kiln_dtype_is_block(t)) {
        quant_quantize(t, src, w, n);
    } else if (t == KILN_F32) {
        memcpy(w, src, *bytes);
    } else {
        /* f16 / bf16 through the library's own cast: a tiny graph */
        kiln_graph *g = kiln_graph_new();
        char shape[32];
        snprintf(shape, sizeof shape, "%lld", (long long)n);
        kiln_output(g, kiln_cast(g, kiln_input(g, "x", KILN_F32, shape), t), "y");
        kiln_bind_input(g, "x", (void *)src, (size_t)n * sizeof(float));
        kiln_eval_reference(g);
        kiln_read_output(g, "y", w, *bytes);
        kiln_graph_free(g);
    }
    return w;
}

#endif
