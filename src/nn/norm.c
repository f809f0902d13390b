/* norm.c — normalisations over the last axis: rmsnorm and layernorm.
 *
 * Both compute in x's dtype; weight and bias (shape (n), or KILN_NONE) are
 * converted to x's dtype when they differ (GGUF stores norms in f32 even for
 * half-precision models). The statistics use kiln_mean/kiln_var, so a
 * symbolic last axis works.
 */
#include "nn_util.h"

static int check_vec(kiln_graph *g, const char *fn, kiln_tensor v, kiln_tensor x, const char *what) {
    if (v == KILN_NONE) return 1;
    if (!nn_float(g, fn, v)) return 0;
    if (kiln_ndim(g, v) != 1 || kiln_dim(g, v, 0) != kiln_dim(g, x, -1)) {
        char a[128], b[128];
        graph_error(g, KILN_ERR_SHAPE, "%s: %s %s does not match the last axis of x %s", fn, what,
                    kiln_shape_str(g, v, a, sizeof a), kiln_shape_str(g, x, b, sizeof b));
        return 0;
    }
    return 1;
}

static kiln_tensor affine(kiln_graph *g, kiln_tensor y, kiln_tensor w, kiln_tensor b) {
    if (w != KILN_NONE) y = kiln_mul(g, y, nn_as(g, w, y));
    if (b != KILN_NONE) y = kiln_add(g, y, nn_as(g, b, y));
    return y;
}

/* x / sqrt(mean(x^2) + eps) * weight */
kiln_tensor kiln_rmsnorm(kiln_graph *g, kiln_tensor x, kiln_tensor weight, double eps) {
    const char *fn = "kiln_rmsnorm";
    if (!nn_float(g, fn, x) || !check_vec(g, fn, weight, x, "weight")) return KILN_NONE;
    if (kiln_ndim(g, x) < 1) {
        graph_error(g, KILN_ERR_SHAPE, "%s: x needs at least one axis", fn);
        return KILN_NONE;
    }
    kiln_tensor ms = kiln_mean(g, kiln_mul(g, x, x), -1);
    kiln_tensor r = kiln_recip(g, kiln_sqrt(g, nn_shift(g, ms, eps)));
    return affine(g, kiln_mul(g, x, nn_keep(g, r, -1)), weight, KILN_NONE);
}

/* (x - mean) / sqrt(var + eps) * weight + bias */
kiln_tensor kiln_layernorm(kiln_graph *g, kiln_tensor x, kiln_tensor weight, kiln_tensor bias, double eps) {
    const char *fn = "kiln_layernorm";
    if (!nn_float(g, fn, x) || !check_vec(g, fn, weight, x, "weight") || !check_vec(g, fn, bias, x, "bias"))
        return KILN_NONE;
    if (kiln_ndim(g, x) < 1) {
        graph_error(g, KILN_ERR_SHAPE, "%s: x needs at least one axis", fn);
        return KILN_NONE;
    }
    kiln_tensor d = kiln_sub(g, x, nn_keep(g, kiln_mean(g, x, -1), -1));
    kiln_tensor var = kiln_mean(g, kiln_mul(g, d, d), -1);
    kiln_tensor r = kiln_recip(g, kiln_sqrt(g, nn_shift(g, var, eps)));
    return affine(g, kiln_mul(g, d, nn_keep(g, r, -1)), weight, bias);
}
