/* test_interp.c — the reference interpreter (src/ref/interp.c) on tiny graphs
 * built through the public API. Expected values are computed here by plain
 * loops over the same inputs (never copied from the interpreter), so each case
 * checks the op's stated semantics: f32 arithmetic, integer wrap-around, views
 * read through (zeros where padded), reductions, GATHER/SCATTER with state
 * write-back, casts through q8_0, and every run-time error path (unbound
 * symbol, missing or wrongly sized buffer, out-of-range index) without a crash.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "kiln.h"
#include "quant.h"

/* run g and copy output `name` into dst (bytes); returns the run status */
static kiln_status eval_read(kiln_graph *g, const char *name, void *dst, size_t bytes) {
    kiln_status s = kiln_eval_reference(g);
    if (s != KILN_OK) return s;
    return kiln_read_output(g, name, dst, bytes);
}

static int same_f32(float a, float b) { return (isnan(a) && isnan(b)) || a == b; }

static void test_unary(void) {
    CASE_BEGIN("interp_unary_f32");
    float x[6] = {0.5f, 1.0f, 2.0f, 3.25f, 10.0f, 0.125f};
    kiln_tensor (*fn[5])(kiln_graph *, kiln_tensor) = {kiln_exp2, kiln_log2, kiln_sin, kiln_sqrt, kiln_recip};
    const char *names[5] = {"exp2", "log2", "sin", "sqrt", "recip"};
    kiln_graph *g = kiln_graph_new();
    kiln_tensor in = kiln_input(g, "x", KILN_F32, "6");
    for (int k = 0; k < 5; k++) kiln_output(g, fn[k](g, in), names[k]);
    CHECK(kiln_graph_status(g) == KILN_OK, "builder: %s", kiln_graph_error(g));
    kiln_bind_input(g, "x", x, sizeof x);
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    for (int k = 0; k < 5; k++) {
        float y[6];
        CHECK(kiln_read_output(g, names[k], y, sizeof y) == KILN_OK, "%s", kiln_graph_error(g));
        for (int i = 0; i < 6; i++) {
            float want = k == 0 ? exp2f(x[i]) : k == 1 ? log2f(x[i]) : k == 2 ? sinf(x[i])
                       : k == 3 ? sqrtf(x[i]) : 1.0f / x[i];
            CHECK(same_f32(y[i], want), "%s(%g) = %g, want %g", names[k], (double)x[i], (double)y[i], (double)want);
        }
    }
    kiln_graph_free(g);
    CASE_END();

    /* f16: computed in f32, rounded once to f16 */
    CASE_BEGIN("interp_unary_f16");
    g = kiln_graph_new();
    uint16_t h[4];
    float hv[4] = {2.0f, 3.0f, 0.1f, 7.5f};
    for (int i = 0; i < 4; i++) h[i] = dtype_f32_to_f16(hv[i]);
    kiln_output(g, kiln_sqrt(g, kiln_input(g, "h", KILN_F16, "4")), "y");
    kiln_bind_input(g, "h", h, sizeof h);
    uint16_t y16[4];
    CHECK(eval_read(g, "y", y16, sizeof y16) == KILN_OK, "%s", kiln_graph_error(g));
    for (int i = 0; i < 4; i++) {
        uint16_t want = dtype_f32_to_f16(sqrtf(dtype_f16_to_f32(h[i])));
        CHECK(y16[i] == want, "sqrt f16 [%d]: 0x%04x want 0x%04x", i, y16[i], want);
    }
    kiln_graph_free(g);
    CASE_END();
}

static void test_binary_f32(void) {
    CASE_BEGIN("interp_binary_f32_broadcast");
    float a[6] = {1.5f, -2.0f, 7.25f, 0.0f, -5.5f, 3.0f}; /* (2, 3) */
    float b[3] = {2.0f, -1.5f, 0.5f};                     /* (3), broadcast over rows */
    kiln_graph *g = kiln_graph_new();
    kiln_tensor ta = kiln_input(g, "a", KILN_F32, "2, 3");
    kiln_tensor tb = kiln_input(g, "b", KILN_F32, "3");
    kiln_output(g, kiln_add(g, ta, tb), "add");
    kiln_output(g, kiln_mul(g, ta, tb), "mul");
    kiln_output(g, kiln_mod(g, ta, tb), "mod");
    kiln_output(g, kiln_lt(g, ta, tb), "lt");
    kiln_output(g, kiln_lt(g, tb, ta), "gt");
    CHECK(kiln_graph_status(g) == KILN_OK, "builder: %s", kiln_graph_error(g));
    kiln_bind_input(g, "a", a, sizeof a);
    kiln_bind_input(g, "b", b, sizeof b);
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    float add[6], mul[6], mod[6], lt[6], gt[6];
    CHECK(kiln_read_output(g, "add", add, sizeof add) == KILN_OK, "read add");
    CHECK(kiln_read_output(g, "mul", mul, sizeof mul) == KILN_OK, "read mul");
    CHECK(kiln_read_output(g, "mod", mod, sizeof mod) == KILN_OK, "read mod");
    CHECK(kiln_read_output(g, "lt", lt, sizeof lt) == KILN_OK, "read lt");
    CHECK(kiln_read_output(g, "gt", gt, sizeof gt) == KILN_OK, "read gt");
    int nd = -1;
    int64_t dims[KILN_MAX_DIMS];
    CHECK(kiln_output_shape(g, "add", &nd, dims) == KILN_OK && nd == 2 && dims[0] == 2 && dims[1] == 3,
          "shape ndim %d", nd);
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 3; j++) {
            float x = a[i * 3 + j], y = b[j];
            CHECK(add[i * 3 + j] == x + y, "add[%d,%d]", i, j);
            CHECK(mul[i * 3 + j] == x * y, "mul[%d,%d]", i, j);
            CHECK(mod[i * 3 + j] == fmodf(x, y), "mod[%d,%d] = %g", i, j, (double)mod[i * 3 + j]);
            CHECK(lt[i * 3 + j] == (x < y ? 1.0f : 0.0f), "lt[%d,%d]", i, j);
            CHECK(gt[i * 3 + j] == (y < x ? 1.0f : 0.0f), "gt[%d,%d]", i, j);
        }
    }
    kiln_graph_free(g);
    CASE_END();
}

static void test_binary_int(void) {
    CASE_BEGIN("interp_binary_i32_wrap_mod");
    int32_t a[8] = {INT32_MAX, INT32_MIN, 7, -7, 7, -7, 123456789, 5};
    int32_t b[8] = {1, -1, 3, 3, -3, 0, 1000, -9};
    kiln_graph *g = kiln_graph_new();
    kiln_tensor ta = kiln_input(g, "a", KILN_I32, "8");
    kiln_tensor tb = kiln_input(g, "b", KILN_I32, "8");
    kiln_output(g, kiln_add(g, ta, tb), "add");
    kiln_output(g, kiln_mul(g, ta, tb), "mul");
    kiln_output(g, kiln_mod(g, ta, tb), "mod");
    kiln_output(g, kiln_lt(g, ta, tb), "lt");
    kiln_bind_input(g, "a", a, sizeof a);
    kiln_bind_input(g, "b", b, sizeof b);
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    int32_t add[8], mul[8], mod[8], lt[8];
    CHECK(kiln_read_output(g, "add", add, sizeof add) == KILN_OK, "read add");
    CHECK(kiln_read_output(g, "mul", mul, sizeof mul) == KILN_OK, "read mul");
    CHECK(kiln_read_output(g, "mod", mod, sizeof mod) == KILN_OK, "read mod");
    CHECK(kiln_read_output(g, "lt", lt, sizeof lt) == KILN_OK, "read lt");
    for (int i = 0; i < 8; i++) {
        /* two's complement wrap, computed through uint32 */
        uint32_t s = (uint32_t)a[i] + (uint32_t)b[i], p = (uint32_t)a[i] * (uint32_t)b[i];
        int32_t ws, wp;
        memcpy(&ws, &s, 4);
        memcpy(&wp, &p, 4);
        int32_t m = (b[i] == 0 || (a[i] == INT32_MIN && b[i] == -1)) ? 0 : a[i] % b[i];
        CHECK(add[i] == ws, "add[%d] = %d want %d", i, add[i], ws);
        CHECK(mul[i] == wp, "mul[%d] = %d want %d", i, mul[i], wp);
        CHECK(mod[i] == m, "mod[%d] = %d want %d", i, mod[i], m);
        CHECK(lt[i] == (a[i] < b[i]), "lt[%d]", i);
    }
    kiln_graph_free(g);
    CASE_END();

    CASE_BEGIN("interp_binary_u8_wrap");
    uint8_t ua[4] = {250, 3, 16, 0}, ub[4] = {10, 4, 17, 0};
    g = kiln_graph_new();
    ta = kiln_input(g, "a", KILN_U8, "4");
    tb = kiln_input(g, "b", KILN_U8, "4");
    kiln_output(g, kiln_add(g, ta, tb), "add");
    kiln_output(g, kiln_mul(g, ta, tb), "mul");
    kiln_bind_input(g, "a", ua, sizeof ua);
    kiln_bind_input(g, "b", ub, sizeof ub);
    uint8_t uadd[4], umul[4];
    CHECK(eval_read(g, "add", uadd, sizeof uadd) == KILN_OK, "%s", kiln_graph_error(g));
    CHECK(kiln_read_output(g, "mul", umul, sizeof umul) == KILN_OK, "read mul");
    for (int i = 0; i < 4; i++) {
        CHECK(uadd[i] == (uint8_t)(ua[i] + ub[i]), "u8 add[%d] = %d", i, uadd[i]);
        CHECK(umul[i] == (uint8_t)(ua[i] * ub[i]), "u8 mul[%d] = %d", i, umul[i]);
    }
    kiln_graph_free(g);
    CASE_END();
}

static void test_reduce(void) {
    CASE_BEGIN("interp_sum_max_axes");
    enum { A = 2, B = 3, C = 4 };
    float x[A * B * C];
    for (int i = 0; i < A * B * C; i++) x[i] = (float)((i * 7) % 11) - 4.5f;
    kiln_graph *g = kiln_graph_new();
    kiln_tensor in = kiln_input(g, "x", KILN_F32, "2, 3, 4");
    for (int ax = 0; ax < 3; ax++) {
        char n1[16], n2[16];
        snprintf(n1, sizeof n1, "sum%d", ax);
        snprintf(n2, sizeof n2, "max%d", ax);
        kiln_output(g, kiln_sum(g, in, ax), n1);
        kiln_output(g, kiln_max(g, in, ax), n2);
    }
    kiln_bind_input(g, "x", x, sizeof x);
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    int dims[3] = {A, B, C};
    for (int ax = 0; ax < 3; ax++) {
        char n1[16], n2[16];
        snprintf(n1, sizeof n1, "sum%d", ax);
        snprintf(n2, sizeof n2, "max%d", ax);
        int n_out = A * B * C / dims[ax];
        float s[24], m[24];
        CHECK(kiln_read_output(g, n1, s, (size_t)n_out * 4) == KILN_OK, "read %s: %s", n1, kiln_graph_error(g));
        CHECK(kiln_read_output(g, n2, m, (size_t)n_out * 4) == KILN_OK, "read %s", n2);
        int o = 0;
        for (int i = 0; i < A; i++)
            for (int j = 0; j < B; j++)
                for (int k = 0; k < C; k++) {
                    int c[3] = {i, j, k};
                    if (c[ax] != 0) continue; /* one output per reduced line */
                    double acc = 0;
                    float mx = -INFINITY;
                    for (int r = 0; r < dims[ax]; r++) {
                        c[ax] = r;
                        float v = x[(c[0] * B + c[1]) * C + c[2]];
                        acc += v;
                        if (v > mx) mx = v;
                    }
                    CHECK(s[o] == (float)acc, "%s[%d] = %g want %g", n1, o, (double)s[o], acc);
                    CHECK(m[o] == mx, "%s[%d] = %g want %g", n2, o, (double)m[o], (double)mx);
                    o++;
                }
    }
    kiln_graph_free(g);
    CASE_END();

    CASE_BEGIN("interp_max_nan_and_empty_axis");
    float y[6] = {1.0f, NAN, 3.0f, 4.0f, 5.0f, 6.0f};
    g = kiln_graph_new();
    kiln_output(g, kiln_max(g, kiln_input(g, "y", KILN_F32, "2, 3"), 1), "m");
    kiln_tensor e = kiln_input(g, "e", KILN_F32, "0, 3");
    kiln_output(g, kiln_sum(g, e, 0), "esum");
    kiln_output(g, kiln_max(g, e, 0), "emax");
    kiln_bind_input(g, "y", y, sizeof y);
    float dummy = 0;
    kiln_bind_input(g, "e", &dummy, 0);
    float m2[2], es[3], em[3];
    CHECK(eval_read(g, "m", m2, sizeof m2) == KILN_OK, "%s", kiln_graph_error(g));
    CHECK(isnan(m2[0]) && m2[1] == 6.0f, "max with NaN: %g %g", (double)m2[0], (double)m2[1]);
    CHECK(kiln_read_output(g, "esum", es, sizeof es) == KILN_OK, "read esum");
    CHECK(kiln_read_output(g, "emax", em, sizeof em) == KILN_OK, "read emax");
    for (int i = 0; i < 3; i++) CHECK(es[i] == 0.0f && isinf(em[i]) && em[i] < 0, "empty [%d]", i);
    kiln_graph_free(g);
    CASE_END();

    /* the documented contract: float sums accumulate in double, round once */
    CASE_BEGIN("interp_sum_f32_double_accumulation");
    float big[4] = {1e8f, 1.0f, -1e8f, 1.0f};
    g = kiln_graph_new();
    kiln_output(g, kiln_sum(g, kiln_input(g, "b", KILN_F32, "4"), 0), "s");
    kiln_bind_input(g, "b", big, sizeof big);
    float sb = 0;
    CHECK(eval_read(g, "s", &sb, sizeof sb) == KILN_OK, "%s", kiln_graph_error(g));
    double dacc = 0;
    for (int i = 0; i < 4; i++) dacc += big[i];
    CHECK(sb == (float)dacc, "sum %g want %g", (double)sb, dacc);
    kiln_graph_free(g);
    CASE_END();

    CASE_BEGIN("interp_sum_i32_wraps");
    int32_t v[3] = {INT32_MAX, 5, 10};
    g = kiln_graph_new();
    kiln_output(g, kiln_sum(g, kiln_input(g, "v", KILN_I32, "3"), 0), "s");
    kiln_bind_input(g, "v", v, sizeof v);
    int32_t sv = 0;
    CHECK(eval_read(g, "s", &sv, sizeof sv) == KILN_OK, "%s", kiln_graph_error(g));
    uint32_t want = (uint32_t)v[0] + (uint32_t)v[1] + (uint32_t)v[2];
    int32_t wi;
    memcpy(&wi, &want, 4);
    CHECK(sv == wi, "sum %d want %d", sv, wi);
    kiln_graph_free(g);
    CASE_END();
}

static void test_leaves_and_views(void) {
    CASE_BEGIN("interp_const_full_iota");
    kiln_graph *g = kiln_graph_new();
    kiln_sym sh[2] = {kiln_sym_int(g, 3), kiln_sym_int(g, 4)};
    kiln_output(g, kiln_const(g, 2.5, KILN_F32), "c");
    kiln_output(g, kiln_full(g, -1.25, KILN_F32, 2, sh), "full");
    kiln_output(g, kiln_iota(g, KILN_I32, 2, sh, 0), "iota0");
    kiln_output(g, kiln_iota(g, KILN_F32, 2, sh, 1), "iota1");
    CHECK(kiln_graph_status(g) == KILN_OK, "builder: %s", kiln_graph_error(g));
    float c = 0, full[12], i1[12];
    int32_t i0[12];
    CHECK(eval_read(g, "c", &c, sizeof c) == KILN_OK, "%s", kiln_graph_error(g));
    CHECK(c == 2.5f, "const %g", (double)c);
    CHECK(kiln_read_output(g, "full", full, sizeof full) == KILN_OK, "read full");
    CHECK(kiln_read_output(g, "iota0", i0, sizeof i0) == KILN_OK, "read iota0");
    CHECK(kiln_read_output(g, "iota1", i1, sizeof i1) == KILN_OK, "read iota1");
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            CHECK(full[i * 4 + j] == -1.25f, "full[%d,%d]", i, j);
            CHECK(i0[i * 4 + j] == i, "iota0[%d,%d] = %d", i, j, i0[i * 4 + j]);
            CHECK(i1[i * 4 + j] == (float)j, "iota1[%d,%d]", i, j);
        }
    kiln_graph_free(g);
    CASE_END();

    CASE_BEGIN("interp_views_transpose_slice_pad_flip");
    float x[12];
    for (int i = 0; i < 12; i++) x[i] = (float)(i * i) - 3.0f; /* (3, 4) */
    g = kiln_graph_new();
    kiln_tensor in = kiln_input(g, "x", KILN_F32, "3, 4");
    kiln_output(g, kiln_contiguous(g, kiln_transpose(g, in, 0, 1)), "t");
    kiln_output(g, kiln_slice(g, in, 1, kiln_sym_int(g, 1), kiln_sym_int(g, 4), 2), "s");
    kiln_output(g, kiln_pad(g, in, 0, kiln_sym_int(g, 1), kiln_sym_int(g, 2)), "p");
    kiln_output(g, kiln_flip(g, in, 1), "f");
    /* a view read by an op, not only by an output */
    kiln_output(g, kiln_add(g, kiln_transpose(g, in, 0, 1), kiln_flip(g, kiln_transpose(g, in, 0, 1), 0)), "tf");
    CHECK(kiln_graph_status(g) == KILN_OK, "builder: %s", kiln_graph_error(g));
    kiln_bind_input(g, "x", x, sizeof x);
    float t[12], s[6], p[24], f[12], tf[12];
    CHECK(eval_read(g, "t", t, sizeof t) == KILN_OK, "%s", kiln_graph_error(g));
    CHECK(kiln_read_output(g, "s", s, sizeof s) == KILN_OK, "read s: %s", kiln_graph_error(g));
    CHECK(kiln_read_output(g, "p", p, sizeof p) == KILN_OK, "read p: %s", kiln_graph_error(g));
    CHECK(kiln_read_output(g, "f", f, sizeof f) == KILN_OK, "read f");
    CHECK(kiln_read_output(g, "tf", tf, sizeof tf) == KILN_OK, "read tf");
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < 3; i++) {
            CHECK(t[j * 3 + i] == x[i * 4 + j], "t[%d,%d]", j, i);
            CHECK(tf[j * 3 + i] == x[i * 4 + j] + x[i * 4 + (3 - j)], "tf[%d,%d]", j, i);
        }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) CHECK(s[i * 2 + j] == x[i * 4 + 1 + 2 * j], "s[%d,%d]", i, j);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 4; j++) {
            float want = (i >= 1 && i < 4) ? x[(i - 1) * 4 + j] : 0.0f;
            CHECK(p[i * 4 + j] == want, "p[%d,%d] = %g want %g", i, j, (double)p[i * 4 + j], (double)want);
        }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) CHECK(f[i * 4 + j] == x[i * 4 + 3 - j], "f[%d,%d]", i, j);
    kiln_graph_free(g);
    CASE_END();
}

static void test_gather(void) {
    CASE_BEGIN("interp_gather_rows");
    float table[15]; /* (5, 3) */
    for (int i = 0; i < 15; i++) table[i] = (float)i * 0.5f + 1.0f;
    int32_t idx[4] = {4, 0, 2, 4}; /* (2, 2) */
    kiln_graph *g = kiln_graph_new();
    kiln_tensor tt = kiln_input(g, "table", KILN_F32, "5, 3");
    kiln_tensor ti = kiln_input(g, "idx", KILN_I32, "2, 2");
    kiln_output(g, kiln_gather(g, tt, ti), "y");
    /* through a transposed table: rows of the transpose are columns */
    kiln_output(g, kiln_gather(g, kiln_transpose(g, tt, 0, 1), kiln_input(g, "c", KILN_I32, "1")), "col");
    kiln_bind_input(g, "table", table, sizeof table);
    kiln_bind_input(g, "idx", idx, sizeof idx);
    int32_t col = 1;
    kiln_bind_input(g, "c", &col, sizeof col);
    float y[12], yc[5];
    CHECK(eval_read(g, "y", y, sizeof y) == KILN_OK, "%s", kiln_graph_error(g));
    CHECK(kiln_read_output(g, "col", yc, sizeof yc) == KILN_OK, "read col: %s", kiln_graph_error(g));
    int nd = 0;
    int64_t dims[KILN_MAX_DIMS];
    CHECK(kiln_output_shape(g, "y", &nd, dims) == KILN_OK && nd == 3 && dims[0] == 2 && dims[1] == 2 && dims[2] == 3,
          "gather shape");
    for (int j = 0; j < 4; j++)
        for (int e = 0; e < 3; e++) CHECK(y[j * 3 + e] == table[idx[j] * 3 + e], "y[%d,%d]", j, e);
    for (int r = 0; r < 5; r++) CHECK(yc[r] == table[r * 3 + col], "col[%d]", r);

    /* out of range (too big, then negative): an error, not a crash */
    idx[2] = 5;
    CHECK(kiln_eval_reference(g) == KILN_ERR_RANGE, "status %d", (int)kiln_graph_status(g));
    CHECK(strstr(kiln_graph_error(g), "out of range") != NULL, "message '%s'", kiln_graph_error(g));
    CHECK(kiln_read_output(g, "y", y, sizeof y) == KILN_ERR_INVALID, "no results after a failed run");
    idx[2] = -1;
    CHECK(kiln_eval_reference(g) == KILN_ERR_RANGE, "negative index");
    idx[2] = 1;
    CHECK(kiln_eval_reference(g) == KILN_OK, "run after fixing: %s", kiln_graph_error(g));
    CHECK(kiln_graph_status(g) == KILN_OK && kiln_graph_error(g)[0] == 0, "status not cleared");
    kiln_graph_free(g);
    CASE_END();

    CASE_BEGIN("interp_gather_q8_0_rows");
    enum { R = 4, D = 64 };
    float w[R * D], back[R * D];
    for (int i = 0; i < R * D; i++) w[i] = sinf((float)i * 0.37f) * (float)(1 + i % 5);
    size_t qbytes = kiln_dtype_bytes(KILN_Q8_0, R * D);
    uint8_t q[R * D / 32 * 34];
    CHECK(qbytes == sizeof q, "q8_0 size %zu", qbytes);
    CHECK(quant_quantize(KILN_Q8_0, w, q, R * D) == 0, "quantize");
    quant_dequantize(KILN_Q8_0, q, back, R * D);
    int32_t ids[3] = {2, 3, 0};
    g = kiln_graph_new();
    kiln_tensor tq = kiln_input(g, "w", KILN_Q8_0, "4, 64");
    kiln_tensor rows = kiln_gather(g, tq, kiln_input(g, "ids", KILN_I32, "3"));
    CHECK(kiln_tensor_dtype(g, rows) == KILN_Q8_0, "gather keeps the block dtype");
    kiln_output(g, rows, "raw");
    kiln_output(g, kiln_cast(g, rows, KILN_F32), "f");
    CHECK(kiln_graph_status(g) == KILN_OK, "builder: %s", kiln_graph_error(g));
    kiln_bind_input(g, "w", q, sizeof q);
    kiln_bind_input(g, "ids", ids, sizeof ids);
    uint8_t raw[3 * 2 * 34];
    float f[3 * D];
    CHECK(eval_read(g, "raw", raw, sizeof raw) == KILN_OK, "%s", kiln_graph_error(g));
    CHECK(kiln_read_output(g, "f", f, sizeof f) == KILN_OK, "read f");
    for (int j = 0; j < 3; j++) {
        CHECK(memcmp(raw + j * 68, q + ids[j] * 68, 68) == 0, "raw row %d", j);
        for (int e = 0; e < D; e++) CHECK(f[j * D + e] == back[ids[j] * D + e], "f[%d,%d]", j, e);
    }
    kiln_graph_free(g);
    CASE_END();
}

static void test_scatter(void) {
    CASE_BEGIN("interp_scatter_writes_state_back");
    float state[8] = {0, 1, 2, 3, 4, 5, 6, 7}, orig[8]; /* (4, 2) */
    memcpy(orig, state, sizeof state);
    float vals[6] = {10, 11, 20, 21, 30, 31}; /* (3, 2) */
    int32_t idx[3] = {3, 1, 3};               /* repeated: the later row wins */
    kiln_graph *g = kiln_graph_new();
    kiln_tensor st = kiln_state(g, "kv", KILN_F32, "4, 2");
    kiln_tensor up = kiln_scatter(g, st, kiln_input(g, "idx", KILN_I32, "3"), kiln_input(g, "v", KILN_F32, "3, 2"));
    kiln_output(g, kiln_sum(g, up, 1), "rowsum");
    kiln_output(g, kiln_sum(g, st, 1), "old"); /* reads the state before the write-back */
    CHECK(kiln_graph_status(g) == KILN_OK, "builder: %s", kiln_graph_error(g));
    kiln_bind_input(g, "kv", state, sizeof state);
    kiln_bind_input(g, "idx", idx, sizeof idx);
    kiln_bind_input(g, "v", vals, sizeof vals);
    float rowsum[4], old[4];
    CHECK(eval_read(g, "rowsum", rowsum, sizeof rowsum) == KILN_OK, "%s", kiln_graph_error(g));
    CHECK(kiln_read_output(g, "old", old, sizeof old) == KILN_OK, "read old");
    float want[8];
    memcpy(want, orig, sizeof want);
    for (int j = 0; j < 3; j++)
        for (int e = 0; e < 2; e++) want[idx[j] * 2 + e] = vals[j * 2 + e];
    for (int i = 0; i < 8; i++) CHECK(state[i] == want[i], "state[%d] = %g want %g", i, (double)state[i], (double)want[i]);
    for (int r = 0; r < 4; r++) {
        CHECK(rowsum[r] == want[r * 2] + want[r * 2 + 1], "rowsum[%d]", r);
        CHECK(old[r] == orig[r * 2] + orig[r * 2 + 1], "old[%d] = %g", r, (double)old[r]);
    }
    kiln_graph_free(g);
    CASE_END();

    CASE_BEGIN("interp_scatter_not_an_output_still_updates");
    float cache[6] = {0}; /* (3, 2) */
    float x[2] = {1.5f, -2.5f};
    g = kiln_graph_new();
    kiln_tensor kv = kiln_state(g, "cache", KILN_F32, "3, 2");
    kiln_tensor xi = kiln_input(g, "x", KILN_F32, "1, 2");
    /* row index from a run-time scalar, two chained updates */
    kiln_tensor pos = kiln_input(g, "pos", KILN_I32, "1");
    kiln_tensor u1 = kiln_scatter(g, kv, pos, xi);
    kiln_tensor u2 = kiln_scatter(g, u1, kiln_add(g, pos, kiln_const(g, 1, KILN_I32)), kiln_mul(g, xi, xi));
    (void)u2;
    kiln_output(g, kiln_sum(g, xi, 1), "unrelated");
    CHECK(kiln_graph_status(g) == KILN_OK, "builder: %s", kiln_graph_error(g));
    int32_t p = 1;
    kiln_bind_input(g, "cache", cache, sizeof cache);
    kiln_bind_input(g, "x", x, sizeof x);
    kiln_bind_input(g, "pos", &p, sizeof p);
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    for (int r = 0; r < 3; r++)
        for (int e = 0; e < 2; e++) {
            float w = r == p ? x[e] : r == p + 1 ? x[e] * x[e] : 0.0f;
            CHECK(cache[r * 2 + e] == w, "cache[%d,%d] = %g want %g", r, e, (double)cache[r * 2 + e], (double)w);
        }
    /* out of range: error, and the state is left as it was */
    p = 2;
    float before[6];
    memcpy(before, cache, sizeof cache);
    CHECK(kiln_eval_reference(g) == KILN_ERR_RANGE, "scatter row 3 of 3: %d", (int)kiln_graph_status(g));
    CHECK(memcmp(before, cache, sizeof cache) == 0, "state changed by a failed run");
    kiln_graph_free(g);
    CASE_END();
}

static void test_scatter_views(void) {
    CASE_BEGIN("interp_scatter_state_views");
    float st[12] = {0}, v[3] = {1, 2, 3}; /* state (2, 6) seen as (2, 2, 3) */
    int32_t row = 1;
    kiln_graph *g = kiln_graph_new();
    kiln_tensor s = kiln_state(g, "s", KILN_F32, "2, 6");
    kiln_sym sh[3] = {kiln_sym_int(g, 2), kiln_sym_int(g, 2), kiln_sym_int(g, 3)};
    kiln_sym vs[3] = {kiln_sym_int(g, 1), kiln_sym_int(g, 2), kiln_sym_int(g, 3)};
    kiln_tensor vals = kiln_expand(g, kiln_reshape_str(g, kiln_input(g, "v", KILN_F32, "3"), "1, 1, 3"), 3, vs);
    kiln_scatter(g, kiln_reshape(g, s, 3, sh), kiln_input(g, "r", KILN_I32, "1"), vals);
    CHECK(kiln_graph_status(g) == KILN_OK, "builder: %s", kiln_graph_error(g));
    kiln_bind_input(g, "s", st, sizeof st);
    kiln_bind_input(g, "v", v, sizeof v);
    kiln_bind_input(g, "r", &row, sizeof row);
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    for (int i = 0; i < 12; i++) CHECK(st[i] == (i >= 6 ? v[i % 3] : 0.0f), "state[%d] = %g", i, (double)st[i]);
    kiln_graph_free(g);

    /* a transposed state cannot be written back in place: an error, no change */
    float t[6] = {0}, tv[3] = {4, 5, 6};
    g = kiln_graph_new();
    kiln_tensor ts = kiln_state(g, "t", KILN_F32, "3, 2");
    kiln_scatter(g, kiln_transpose(g, ts, 0, 1), kiln_input(g, "r", KILN_I32, "1"),
                 kiln_input(g, "v", KILN_F32, "1, 3"));
    kiln_bind_input(g, "t", t, sizeof t);
    kiln_bind_input(g, "v", tv, sizeof tv);
    kiln_bind_input(g, "r", &row, sizeof row);
    CHECK(kiln_eval_reference(g) == KILN_ERR_UNSUPPORTED, "transposed state: %d %s", (int)kiln_graph_status(g),
          kiln_graph_error(g));
    for (int i = 0; i < 6; i++) CHECK(t[i] == 0.0f, "state changed");
    kiln_graph_free(g);
    CASE_END();
}

static void test_errors(void) {
    CASE_BEGIN("interp_unbound_missing_wrong_size");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "seq, 2");
    kiln_output(g, kiln_exp2(g, x), "y");
    float buf[6] = {0};
    kiln_bind_input(g, "x", buf, sizeof buf);
    CHECK(kiln_eval_reference(g) == KILN_ERR_UNBOUND, "unbound seq: %d", (int)kiln_graph_status(g));
    CHECK(strstr(kiln_graph_error(g), "seq") != NULL, "message '%s'", kiln_graph_error(g));
    CHECK(kiln_bind_dim(g, "seq", 2) == KILN_OK, "bind");
    CHECK(kiln_eval_reference(g) == KILN_ERR_INVALID, "6 floats for (2, 2): %d", (int)kiln_graph_status(g));
    CHECK(strstr(kiln_graph_error(g), "16") != NULL && strstr(kiln_graph_error(g), "24") != NULL,
          "message should give both sizes: '%s'", kiln_graph_error(g));
    CHECK(kiln_bind_dim(g, "seq", 3) == KILN_OK, "bind");
    CHECK(kiln_eval_reference(g) == KILN_OK, "%s", kiln_graph_error(g));
    float y[6];
    CHECK(kiln_read_output(g, "y", y, sizeof y - 4) == KILN_ERR_INVALID, "short read buffer");
    CHECK(kiln_read_output(g, "nope", y, sizeof y) == KILN_ERR_INVALID, "unknown output");
    CHECK(kiln_read_output(g, "y", y, sizeof y) == KILN_OK, "read");
    for (int i = 0; i < 6; i++) CHECK(y[i] == 1.0f, "exp2(0) = %g", (double)y[i]);
    kiln_graph_free(g);

    g = kiln_graph_new();
    kiln_output(g, kiln_sqrt(g, kiln_input(g, "missing", KILN_F32, "2")), "y");
    CHECK(kiln_eval_reference(g) == KILN_ERR_UNBOUND, "missing input: %d", (int)kiln_graph_status(g));
    CHECK(strstr(kiln_graph_error(g), "missing") != NULL, "message '%s'", kiln_graph_error(g));
    kiln_graph_free(g);

    /* a symbolic slice that runs past its buffer at run time: an error */
    g = kiln_graph_new();
    kiln_sym pos = kiln_sym_var(g, "pos");
    kiln_tensor v = kiln_input(g, "v", KILN_F32, "4");
    kiln_output(g, kiln_slice(g, v, 0, pos, kiln_sym_add(g, pos, kiln_sym_int(g, 2)), 1), "y");
    CHECK(kiln_graph_status(g) == KILN_OK, "builder: %s", kiln_graph_error(g));
    float vv[4] = {1, 2, 3, 4}, y2[2];
    kiln_bind_input(g, "v", vv, sizeof vv);
    kiln_bind_dim(g, "pos", 2);
    CHECK(eval_read(g, "y", y2, sizeof y2) == KILN_OK && y2[0] == 3 && y2[1] == 4, "slice [2:4]: %s",
          kiln_graph_error(g));
    kiln_bind_dim(g, "pos", 3);
    CHECK(kiln_eval_reference(g) == KILN_ERR_RANGE, "slice [3:5] of 4: %d", (int)kiln_graph_status(g));
    kiln_bind_dim(g, "pos", 1000000000);
    CHECK(kiln_eval_reference(g) == KILN_ERR_RANGE, "slice far away: %d", (int)kiln_graph_status(g));
    kiln_graph_free(g);

    /* a builder error is returned by the run as is */
    g = kiln_graph_new();
    kiln_tensor a = kiln_input(g, "a", KILN_F32, "2");
    kiln_tensor b = kiln_input(g, "b", KILN_F32, "3");
    kiln_output(g, kiln_add(g, a, b), "y");
    CHECK(kiln_graph_status(g) == KILN_ERR_SHAPE, "builder status %d", (int)kiln_graph_status(g));
    CHECK(kiln_eval_reference(g) == KILN_ERR_SHAPE, "eval returns the builder error");
    kiln_graph_free(g);
    CASE_END();
}

static void test_symbolic_reruns(void) {
    CASE_BEGIN("interp_symbolic_dims_two_runs");
    kiln_graph *g = kiln_graph_new();
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "seq, 2");
    kiln_tensor w = kiln_input(g, "w", KILN_F32, "2");
    kiln_output(g, kiln_sum(g, kiln_mul(g, x, w), 0), "colsum");
    kiln_output(g, kiln_slice(g, x, 0, kiln_sym_int(g, 1), kiln_sym_parse(g, "seq"), 1), "tail");
    CHECK(kiln_graph_status(g) == KILN_OK, "builder: %s", kiln_graph_error(g));
    float wv[2] = {2.0f, -1.0f};
    kiln_bind_input(g, "w", wv, sizeof wv);
    for (int seq = 3; seq <= 5; seq += 2) {
        float xv[10], cs[2], tail[8];
        for (int i = 0; i < seq * 2; i++) xv[i] = (float)(i + seq) * 0.25f;
        kiln_bind_dim(g, "seq", seq);
        kiln_bind_input(g, "x", xv, (size_t)seq * 2 * sizeof(float));
        CHECK(eval_read(g, "colsum", cs, sizeof cs) == KILN_OK, "seq=%d: %s", seq, kiln_graph_error(g));
        int nd = 0;
        int64_t dims[KILN_MAX_DIMS];
        CHECK(kiln_output_shape(g, "tail", &nd, dims) == KILN_OK && nd == 2 && dims[0] == seq - 1 && dims[1] == 2,
              "tail shape at seq=%d", seq);
        CHECK(kiln_read_output(g, "tail", tail, (size_t)(seq - 1) * 2 * sizeof(float)) == KILN_OK, "read tail");
        for (int e = 0; e < 2; e++) {
            double acc = 0;
            for (int r = 0; r < seq; r++) acc += (double)(xv[r * 2 + e] * wv[e]);
            CHECK(cs[e] == (float)acc, "seq=%d colsum[%d] = %g want %g", seq, e, (double)cs[e], acc);
        }
        for (int i = 0; i < (seq - 1) * 2; i++) CHECK(tail[i] == xv[2 + i], "seq=%d tail[%d]", seq, i);
    }
    kiln_graph_free(g);
    CASE_END();
}

static void test_cast(void) {
    CASE_BEGIN("interp_cast_scalar");
    float x[6] = {1.9f, -1.9f, 3e9f, -3e9f, NAN, 0.1f};
    kiln_graph *g = kiln_graph_new();
    kiln_tensor in = kiln_input(g, "x", KILN_F32, "6");
    kiln_output(g, kiln_cast(g, in, KILN_I32), "i");
    kiln_output(g, kiln_cast(g, in, KILN_BF16), "bf");
    kiln_output(g, kiln_cast(g, kiln_cast(g, in, KILN_F16), KILN_F32), "h");
    kiln_bind_input(g, "x", x, sizeof x);
    int32_t iv[6];
    uint16_t bf[6];
    float hv[6];
    CHECK(eval_read(g, "i", iv, sizeof iv) == KILN_OK, "%s", kiln_graph_error(g));
    CHECK(kiln_read_output(g, "bf", bf, sizeof bf) == KILN_OK, "read bf");
    CHECK(kiln_read_output(g, "h", hv, sizeof hv) == KILN_OK, "read h");
    int32_t want_i[6] = {1, -1, INT32_MAX, INT32_MIN, 0, 0}; /* truncate, saturate, NaN -> 0 */
    for (int i = 0; i < 6; i++) {
        CHECK(iv[i] == want_i[i], "i32[%d] = %d", i, iv[i]);
        CHECK(bf[i] == dtype_f32_to_bf16(x[i]), "bf16[%d]", i);
        CHECK(same_f32(hv[i], dtype_f16_to_f32(dtype_f32_to_f16(x[i]))), "f16[%d]", i);
    }
    kiln_graph_free(g);
    CASE_END();

    CASE_BEGIN("interp_cast_q8_0_round_trip");
    enum { R = 3, D = 64 };
    float w[R * D], back[R * D];
    for (int i = 0; i < R * D; i++) w[i] = cosf((float)i * 0.91f) * (float)(1 + (i / 32) * 3);
    g = kiln_graph_new();
    kiln_tensor t = kiln_input(g, "w", KILN_F32, "3, 64");
    kiln_tensor q = kiln_cast(g, t, KILN_Q8_0);
    kiln_output(g, q, "q");
    kiln_output(g, kiln_cast(g, q, KILN_F32), "back");
    /* a row-selecting view of the block tensor, dequantised */
    kiln_output(g, kiln_cast(g, kiln_slice(g, q, 0, kiln_sym_int(g, 1), kiln_sym_int(g, 3), 1), KILN_F32), "rows");
    CHECK(kiln_graph_status(g) == KILN_OK, "builder: %s", kiln_graph_error(g));
    kiln_bind_input(g, "w", w, sizeof w);
    uint8_t qb[R * D / 32 * 34], qref[R * D / 32 * 34];
    float rows[2 * D];
    CHECK(eval_read(g, "back", back, sizeof back) == KILN_OK, "%s", kiln_graph_error(g));
    CHECK(kiln_read_output(g, "q", qb, sizeof qb) == KILN_OK, "read q");
    CHECK(kiln_read_output(g, "rows", rows, sizeof rows) == KILN_OK, "read rows: %s", kiln_graph_error(g));
    CHECK(quant_quantize(KILN_Q8_0, w, qref, R * D) == 0, "quantize");
    CHECK(memcmp(qb, qref, sizeof qb) == 0, "CAST to q8_0 matches quant_quantize");
    for (int blk = 0; blk < R * D / 32; blk++) {
        float amax = 0;
        for (int e = 0; e < 32; e++) amax = fmaxf(amax, fabsf(w[blk * 32 + e]));
        /* q8_0: step d = amax/127, error at most d/2; d is stored as f16
         * (relative error <= 2^-11), which moves q*d by up to 127*d*2^-11 */
        float bound = amax / 127.0f * 0.5f + amax / 1024.0f + 1e-6f;
        for (int e = 0; e < 32; e++) {
            int i = blk * 32 + e;
            CHECK(fabsf(back[i] - w[i]) <= bound, "q8_0 error at %d: %g vs %g (bound %g)", i, (double)back[i],
                  (double)w[i], (double)bound);
        }
    }
    for (int i = 0; i < 2 * D; i++) CHECK(rows[i] == back[D + i], "rows[%d]", i);
    kiln_graph_free(g);
    CASE_END();
}

int main(void) {
    test_unary();
    test_binary_f32();
    test_binary_int();
    test_reduce();
    test_leaves_and_views();
    test_gather();
    test_scatter();
    test_scatter_views();
    test_errors();
    test_symbolic_reruns();
    test_cast();
    return check_exit();
}
