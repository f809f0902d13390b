/* test_compile_fuzz.c — random graphs compiled vs interpreted.
 *
 * A generator builds random DAGs of primitive ops (every op of ops.def:
 * unary, binary, reductions, GATHER, SCATTER into a state, CAST, CONTIGUOUS,
 * IOTA, CONST) and movement views (permute, flip, slice with steps, pad,
 * expand, reshape, window, squeeze/unsqueeze) over shapes that mix constants
 * with the symbolic sizes n and m. Many graphs ("subgraphs", each with its own
 * inputs and outputs) are batched into one kiln_graph so one C compile covers
 * many of them. Each batch is run by the reference interpreter and by the
 * compiled program — scalar code (compared bit-exactly, NaN == NaN) and, on
 * every KILN_FUZZ_VECTOR_EVERY-th batch (default 3), the machine's vector
 * code (float results within 1e-6 relative; the vector path only reorders
 * double-precision sums and computes EXP2 by a polynomial within 2 ulp) — then the sizes are rebound (n up to 80, so rows
 * reach the vector loops) and both run again without recompiling. State
 * tensors are compared after each run.
 *
 * KILN_FUZZ_GRAPHS (default 500) graphs, KILN_FUZZ_SEED (default 1); a
 * failure prints the graph's seed: rerun it alone with KILN_FUZZ_SEED=<seed>
 * KILN_FUZZ_GRAPHS=1 KILN_FUZZ_BATCH=1 (KILN_FUZZ_VERBOSE=1 prints it).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "dtype.h"
#include "graph.h"
#include "kiln.h"
#include "kiln_compile.h"

#define MAX_POOL 64
#define MAX_INPUTS 1024
#define MAX_OUTS 512

typedef struct rng {
    uint64_t s;
} rng;
static uint64_t rnext(rng *r) {
    r->s += 0x9e3779b97f4a7c15ULL;
    uint64_t z = r->s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static int rint_(rng *r, int n) { return (int)(rnext(r) % (uint64_t)n); }
static double runi(rng *r, double lo, double hi) { return lo + (hi - lo) * (double)(rnext(r) >> 11) / 9007199254740992.0; }

typedef enum in_kind { IN_DATA = 0, IN_INDEX, IN_STATE } in_kind;
typedef struct fz_input {
    char name[48];
    kiln_tensor t;
    in_kind kind;
    kiln_dtype dtype;
    sym_id rows;  /* IN_INDEX: indices in [0, rows) */
    int distinct; /* IN_INDEX for scatters: distinct values */
    int sub;
    void *orig, *ref, *got; /* initial values; the reference's and the compiled side's copies */
    size_t bytes;
} fz_input;

typedef struct fz_output {
    char name[48];
    kiln_dtype dtype;
    int sub;
} fz_output;

typedef struct fz {
    kiln_graph *g;
    rng r;
    int sub;
    kiln_tensor pool[MAX_POOL];
    int npool;
    int ninputs_sub;
    fz_input *inputs;
    int ninputs;
    fz_output *outs;
    int nouts;
} fz;

static kiln_dtype tdt(fz *f, kiln_tensor t) { return kiln_tensor_dtype(f->g, t); }
static int tnd(fz *f, kiln_tensor t) { return kiln_ndim(f->g, t); }
static int is_const_dim(fz *f, kiln_sym s, int64_t *v) { return kiln_sym_const_value(f->g, s, v); }

static kiln_sym rand_dim(fz *f) {
    static const char *choices[] = {"1", "2", "3", "4", "5", "7", "8", "n", "m", "n+1"};
    return kiln_sym_parse(f->g, choices[rint_(&f->r, 10)]);
}

static kiln_dtype rand_dtype(fz *f) {
    int x = rint_(&f->r, 20);
    if (x < 11) return KILN_F32;
    if (x < 14) return KILN_F16;
    if (x < 16) return KILN_BF16;
    if (x < 19) return KILN_I32;
    return KILN_U8;
}

static kiln_tensor new_input(fz *f, kiln_dtype t, int ndim, const kiln_sym *shape, in_kind kind, sym_id rows) {
    if (f->ninputs >= MAX_INPUTS) return KILN_NONE;
    fz_input *in = &f->inputs[f->ninputs];
    memset(in, 0, sizeof *in);
    snprintf(in->name, sizeof in->name, "s%d_x%d", f->sub, f->ninputs_sub++);
    in->t = kind == IN_STATE ? KILN_NONE : kiln_input_dims(f->g, in->name, t, ndim, shape);
    if (kind == IN_STATE) {
        char sh[128] = "";
        size_t n = 0;
        for (int d = 0; d < ndim; d++) {
            char b[64];
            n += (size_t)snprintf(sh + n, sizeof sh - n, "%s%s", d ? "," : "", kiln_sym_str(f->g, shape[d], b, sizeof b));
        }
        in->t = kiln_state(f->g, in->name, t, sh);
    }
    in->kind = kind;
    in->dtype = t;
    in->rows = rows;
    in->sub = f->sub;
    f->ninputs++;
    return in->t;
}

static void push(fz *f, kiln_tensor t) {
    if (t == KILN_NONE) return;
    if (f->npool < MAX_POOL) f->pool[f->npool++] = t;
    else f->pool[rint_(&f->r, MAX_POOL)] = t;
}

static kiln_tensor pick(fz *f) { return f->pool[rint_(&f->r, f->npool)]; }

static kiln_tensor data_input(fz *f) {
    int nd = 1 + rint_(&f->r, 3);
    kiln_sym sh[3];
    for (int d = 0; d < nd; d++) sh[d] = rand_dim(f);
    return new_input(f, rand_dtype(f), nd, sh, IN_DATA, SYM_NONE);
}

/* one random step; returns the new tensor or KILN_NONE when it made none */
static kiln_tensor step(fz *f) {
    kiln_graph *g = f->g;
    kiln_tensor x = pick(f);
    int nd = tnd(f, x);
    kiln_dtype t = tdt(f, x);
    int isf = kiln_dtype_is_float(t);
    int op = rint_(&f->r, 20);
    int64_t c;
    switch (op) {
    case 0:
    case 1: { /* unary */
        if (!isf) return kiln_cast(g, x, KILN_F32);
        kiln_tensor (*fn[5])(kiln_graph *, kiln_tensor) = {kiln_exp2, kiln_log2, kiln_sin, kiln_sqrt, kiln_recip};
        return fn[rint_(&f->r, 5)](g, x);
    }
    case 2:
    case 3:
    case 4: { /* binary */
        kiln_tensor (*fn[4])(kiln_graph *, kiln_tensor, kiln_tensor) = {kiln_add, kiln_mul, kiln_mod, kiln_lt};
        int k = rint_(&f->r, 10);
        int which = k < 4 ? 0 : k < 8 ? 1 : k < 9 ? 2 : 3;
        kiln_tensor y = KILN_NONE;
        int how = rint_(&f->r, 3);
        if (how == 0) { /* a pool tensor of the same shape and dtype */
            for (int i = 0; i < f->npool && y == KILN_NONE; i++) {
                kiln_tensor cand = f->pool[(i + rint_(&f->r, f->npool)) % f->npool];
                if (tdt(f, cand) != t || tnd(f, cand) != nd) continue;
                int same = 1;
                for (int d = 0; d < nd; d++) same &= kiln_dim(g, cand, d) == kiln_dim(g, x, d);
                if (same) y = cand;
            }
        }
        if (y == KILN_NONE && how == 1) {
            y = kiln_const(g, isf ? runi(&f->r, -2, 2) : (double)(1 + rint_(&f->r, 5)), t);
        }
        if (y == KILN_NONE) { /* a new input broadcast along random axes */
            kiln_sym sh[KILN_MAX_DIMS];
            for (int d = 0; d < nd; d++) sh[d] = rint_(&f->r, 3) == 0 ? kiln_sym_int(g, 1) : kiln_dim(g, x, d);
            y = new_input(f, t, nd, sh, IN_DATA, SYM_NONE);
        }
        return rint_(&f->r, 2) ? fn[which](g, x, y) : fn[which](g, y, x);
    }
    case 5:
    case 6: /* reduce */
        if (nd == 0) return KILN_NONE;
        return rint_(&f->r, 2) ? kiln_sum(g, x, rint_(&f->r, nd)) : kiln_max(g, x, rint_(&f->r, nd));
    case 7: { /* permute / transpose */
        if (nd < 2) return KILN_NONE;
        int perm[KILN_MAX_DIMS];
        for (int d = 0; d < nd; d++) perm[d] = d;
        for (int d = nd - 1; d > 0; d--) {
            int j = rint_(&f->r, d + 1), tmp = perm[d];
            perm[d] = perm[j];
            perm[j] = tmp;
        }
        return kiln_permute(g, x, perm);
    }
    case 8:
        if (nd == 0) return KILN_NONE;
        return kiln_flip(g, x, rint_(&f->r, nd));
    case 9: { /* slice */
        if (nd == 0) return KILN_NONE;
        int a = rint_(&f->r, nd);
        kiln_sym dim = kiln_dim(g, x, a);
        if (is_const_dim(f, dim, &c)) {
            if (c < 1) return KILN_NONE;
            int64_t st = rint_(&f->r, (int)c), sp = st + 1 + rint_(&f->r, (int)(c - st));
            return kiln_slice(g, x, a, kiln_sym_int(g, st), kiln_sym_int(g, sp), 1 + rint_(&f->r, 2));
        }
        /* symbolic: drop the first element (sizes are >= 2 when bound) */
        return kiln_slice(g, x, a, kiln_sym_int(g, 1), dim, 1 + rint_(&f->r, 2));
    }
    case 10: /* pad */
        if (nd == 0) return KILN_NONE;
        return kiln_pad(g, x, rint_(&f->r, nd), kiln_sym_int(g, rint_(&f->r, 3)), kiln_sym_int(g, rint_(&f->r, 3)));
    case 11: { /* expand a size-1 axis, or unsqueeze then expand */
        if (nd >= 4) return KILN_NONE;
        kiln_tensor u = kiln_unsqueeze(g, x, rint_(&f->r, nd + 1));
        kiln_sym sh[KILN_MAX_DIMS];
        for (int d = 0; d <= nd; d++) {
            kiln_sym s = kiln_dim(g, u, d);
            sh[d] = is_const_dim(f, s, &c) && c == 1 ? rand_dim(f) : s;
        }
        return kiln_expand(g, u, nd + 1, sh);
    }
    case 12: { /* reshape: merge two adjacent axes, or split a constant one */
        if (nd >= 2 && rint_(&f->r, 2)) {
            int a = rint_(&f->r, nd - 1);
            kiln_sym sh[KILN_MAX_DIMS];
            int k = 0;
            for (int d = 0; d < nd; d++) {
                if (d == a) {
                    sh[k++] = kiln_sym_mul(g, kiln_dim(g, x, d), kiln_dim(g, x, d + 1));
                    d++;
                } else {
                    sh[k++] = kiln_dim(g, x, d);
                }
            }
            return kiln_reshape(g, x, k, sh);
        }
        for (int d = 0; d < nd; d++) {
            if (is_const_dim(f, kiln_dim(g, x, d), &c) && (c == 4 || c == 8 || c == 6)) {
                kiln_sym sh[KILN_MAX_DIMS];
                int k = 0;
                for (int e = 0; e < nd; e++) {
                    if (e == d) {
                        sh[k++] = kiln_sym_int(g, 2);
                        sh[k++] = kiln_sym_int(g, c / 2);
                    } else {
                        sh[k++] = kiln_dim(g, x, e);
                    }
                }
                if (k > 4) return KILN_NONE;
                return kiln_reshape(g, x, k, sh);
            }
        }
        return KILN_NONE;
    }
    case 13: { /* window */
        if (nd == 0 || nd >= 4) return KILN_NONE;
        int a = rint_(&f->r, nd);
        if (!is_const_dim(f, kiln_dim(g, x, a), &c) || c < 3) return KILN_NONE;
        return kiln_window(g, x, a, 2, 1 + rint_(&f->r, 2), 1);
    }
    case 14: { /* cast */
        kiln_dtype to = rand_dtype(f);
        if (to == t) return KILN_NONE;
        return kiln_cast(g, x, to);
    }
    case 15:
        return kiln_contiguous(g, x);
    case 16: { /* gather rows of x by a new index input */
        if (nd == 0 || nd >= 3) return KILN_NONE;
        kiln_sym ish[2];
        int ni = 1 + rint_(&f->r, 2);
        for (int d = 0; d < ni; d++) ish[d] = rand_dim(f);
        kiln_tensor idx = new_input(f, KILN_I32, ni, ish, IN_INDEX, (sym_id)kiln_dim(g, x, 0));
        return kiln_gather(g, x, idx);
    }
    case 17: { /* iota / full of x's shape, combined with x */
        kiln_sym sh[KILN_MAX_DIMS];
        for (int d = 0; d < nd; d++) sh[d] = kiln_dim(g, x, d);
        if (nd == 0 || (t != KILN_I32 && !isf)) return kiln_add(g, x, kiln_const(g, 3, t));
        kiln_tensor io = kiln_iota(g, t, nd, sh, rint_(&f->r, nd));
        return kiln_mul(g, x, io);
    }
    case 18: { /* scatter rows into a new state tensor */
        if (nd < 1 || nd > 2 || !isf) return KILN_NONE;
        /* values: x's first axis becomes the row count of the update */
        kiln_sym ssh[2];
        ssh[0] = kiln_sym_int(g, 9);
        if (nd == 2) ssh[1] = kiln_dim(g, x, 1);
        if (nd == 2 && !is_const_dim(f, ssh[1], &c)) return KILN_NONE; /* state shapes are text */
        kiln_tensor st = new_input(f, t, nd, ssh, IN_STATE, SYM_NONE);
        kiln_sym ish[1] = {kiln_dim(g, x, 0)};
        if (!is_const_dim(f, ish[0], &c) || c > 9) return KILN_NONE;
        kiln_tensor idx = new_input(f, KILN_I32, 1, ish, IN_INDEX, (sym_id)ssh[0]);
        f->inputs[f->ninputs - 1].distinct = rint_(&f->r, 2);
        return kiln_scatter(g, st, idx, x);
    }
    default:
        return data_input(f);
    }
}

/* build subgraph `sub` from seed; returns 0 when the builder refused it */
static int gen_sub(fz *f, uint64_t seed, int sub) {
    f->r.s = seed;
    f->sub = sub;
    f->npool = 0;
    f->ninputs_sub = 0;
    int first_out = f->nouts;
    int n0 = 1 + rint_(&f->r, 2);
    for (int i = 0; i < n0; i++) push(f, data_input(f));
    int steps = 3 + rint_(&f->r, 10);
    kiln_tensor last = f->pool[0];
    for (int i = 0; i < steps; i++) {
        kiln_tensor t = step(f);
        if (kiln_graph_status(f->g) != KILN_OK) return 0;
        if (t != KILN_NONE) {
            push(f, t);
            last = t;
        }
    }
    kiln_tensor outs[2] = {last, pick(f)};
    int nout = outs[1] == outs[0] ? 1 : 2;
    for (int o = 0; o < nout && f->nouts < MAX_OUTS; o++) {
        fz_output *fo = &f->outs[f->nouts];
        snprintf(fo->name, sizeof fo->name, "s%d_out%d", sub, o);
        fo->dtype = tdt(f, outs[o]);
        fo->sub = sub;
        kiln_output(f->g, outs[o], fo->name);
        if (kiln_graph_status(f->g) != KILN_OK) return 0;
        f->nouts++;
    }
    (void)first_out;
    return 1;
}

static int64_t eval_sym(kiln_graph *g, sym_id s) {
    int64_t v = 0;
    uint32_t miss;
    sym_eval(g->syms, s, g->dim_values, g->dim_bound, &v, &miss);
    return v;
}

static int64_t input_numel(kiln_graph *g, kiln_tensor t) {
    int64_t n = 1;
    for (int d = 0; d < kiln_ndim(g, t); d++) n *= eval_sym(g, (sym_id)kiln_dim(g, t, d));
    return n;
}

/* (re)fill and bind every input for the current sizes */
static void bind_all(fz *f, rng *r) {
    for (int i = 0; i < f->ninputs; i++) {
        fz_input *in = &f->inputs[i];
        free(in->ref);
        free(in->got);
        free(in->orig);
        int64_t n = input_numel(f->g, in->t);
        in->bytes = kiln_dtype_bytes(in->dtype, n);
        in->ref = malloc(in->bytes + 1);
        in->got = malloc(in->bytes + 1);
        in->orig = malloc(in->bytes + 1);
        int64_t rows = in->kind == IN_INDEX ? eval_sym(f->g, in->rows) : 0;
        for (int64_t e = 0; e < n; e++) {
            double v;
            if (in->kind == IN_INDEX) {
                v = rows > 0 ? (double)(int64_t)(rnext(r) % (uint64_t)rows) : 0;
                if (in->distinct && rows >= n) v = (double)((e * 7 + 3) % rows);
            } else if (in->dtype == KILN_U8) {
                v = (double)(rnext(r) % 256);
            } else if (in->dtype == KILN_I32) {
                v = (double)((int64_t)(rnext(r) % 41) - 20);
            } else {
                v = runi(r, -3, 3);
            }
            dtype_store(in->dtype, in->ref, e, v);
        }
        memcpy(in->got, in->ref, in->bytes);
        memcpy(in->orig, in->ref, in->bytes);
        kiln_bind_input(f->g, in->name, in->ref, in->bytes);
    }
}

static void rebind_side(fz *f, int got) {
    for (int i = 0; i < f->ninputs; i++) {
        fz_input *in = &f->inputs[i];
        kiln_bind_input(f->g, in->name, got && in->kind == IN_STATE ? in->got : in->ref, in->bytes);
    }
}

/* a GPU backend (KILN_BACKEND=opencl|cuda) computes EXP2/LOG2/SIN in double
 * and rounds once, which differs from libm's float functions by an ulp at
 * times: its "scalar" programs are compared with the vector tolerance */
static int gpu_backend;

static int values_match(kiln_dtype t, const void *a, const void *b, size_t bytes, int exact, char *why, size_t cap) {
    if (!kiln_dtype_is_float(t)) {
        if (memcmp(a, b, bytes) == 0) return 1;
        snprintf(why, cap, "integer data differs");
        return 0;
    }
    int64_t n = (int64_t)(bytes / (t == KILN_F32 ? 4 : 2));
    double tol = exact ? 0 : t == KILN_F32 ? 1e-6 : t == KILN_F16 ? 1e-3 : 8e-3;
    for (int64_t i = 0; i < n; i++) {
        double x = dtype_load(t, a, i), y = dtype_load(t, b, i);
        if ((isnan(x) && isnan(y)) || x == y) continue;
        if (!isinf(x) && !isinf(y) && fabs(x - y) <= tol * fabs(x)) continue;
        snprintf(why, cap, "element %lld: reference %.9g, compiled %.9g", (long long)i, x, y);
        return 0;
    }
    return 1;
}

/* run a batch: returns the number of failing subgraphs (their seeds printed) */
static int run_batch(fz *f, uint64_t *seeds, int nsub, int *bad_sub, int with_vector) {
    kiln_graph *g = f->g;
    int failures = 0;
    rng r = {seeds[0] ^ 0x5555};
    kiln_program *prog[2] = {NULL, NULL};
    for (int pass = 0; pass < 2; pass++) {
        /* small sizes, then long rows that reach the vector loops */
        int64_t nv = pass == 0 ? 2 + rint_(&r, 3) : 33 + rint_(&r, 48);
        int64_t mv = pass == 0 ? 3 + rint_(&r, 3) : 2 + rint_(&r, 2);
        if (sym_find_var(g->syms, "n") >= 0) kiln_bind_dim(g, "n", nv);
        if (sym_find_var(g->syms, "m") >= 0) kiln_bind_dim(g, "m", mv);
        bind_all(f, &r);
        if (kiln_eval_reference(g) != KILN_OK) {
            printf("FAIL fuzz_reference (seed %llu): %s\n", (unsigned long long)seeds[0], kiln_graph_error(g));
            return nsub;
        }
        void **ref = calloc((size_t)f->nouts + 1, sizeof *ref);
        size_t *bytes = calloc((size_t)f->nouts + 1, sizeof *bytes);
        for (int o = 0; o < f->nouts; o++) {
            int nd;
            int64_t dims[KILN_MAX_DIMS], n = 1;
            kiln_output_shape(g, f->outs[o].name, &nd, dims);
            for (int d = 0; d < nd; d++) n *= dims[d];
            bytes[o] = kiln_dtype_bytes(f->outs[o].dtype, n);
            ref[o] = malloc(bytes[o] + 1);
            kiln_read_output(g, f->outs[o].name, ref[o], bytes[o]);
        }
        for (int vec = 0; vec < 1 + with_vector; vec++) {
            if (!prog[vec]) {
                kiln_compile_options opt = kiln_compile_defaults();
                opt.vector = vec ? 0 : -1;
                prog[vec] = kiln_compile(g, &opt, NULL);
                if (prog[vec] && getenv("KILN_FUZZ_VERBOSE")) {
                    char *k = kiln_program_kernels(prog[vec]);
                    printf("%s\n%s\n", k, getenv("KILN_FUZZ_VERBOSE")[0] == '2' ? kiln_program_source(prog[vec]) : "");
                    free(k);
                }
                if (!prog[vec]) {
                    printf("FAIL fuzz_compile (seed %llu): %s\n", (unsigned long long)seeds[0], kiln_graph_error(g));
                    failures = nsub;
                    break;
                }
            }
            for (int i = 0; i < f->ninputs; i++)
                if (f->inputs[i].kind == IN_STATE) memcpy(f->inputs[i].got, f->inputs[i].orig, f->inputs[i].bytes);
            rebind_side(f, 1);
            kiln_status s = kiln_run(prog[vec]);
            rebind_side(f, 0);
            if (s != KILN_OK) {
                printf("FAIL fuzz_run (seed %llu): %s\n", (unsigned long long)seeds[0], kiln_graph_error(g));
                failures = nsub;
                break;
            }
            for (int o = 0; o < f->nouts; o++) {
                if (bad_sub[f->outs[o].sub]) continue;
                void *got = malloc(bytes[o] + 1);
                char why[256] = "";
                int ok = kiln_read_output(g, f->outs[o].name, got, bytes[o]) == KILN_OK &&
                         values_match(f->outs[o].dtype, ref[o], got, bytes[o], !vec && !gpu_backend, why, sizeof why);
                if (!ok) {
                    bad_sub[f->outs[o].sub] = 1;
                    printf("FAIL fuzz_graph_seed_%llu: output %s (%s code, n/m pass %d): %s\n",
                           (unsigned long long)seeds[f->outs[o].sub], f->outs[o].name, vec ? "vector" : "scalar", pass,
                           why);
                    failures++;
                }
                free(got);
            }
            /* states: the reference wrote back into ref; the compiled run into got */
            for (int i = 0; i < f->ninputs; i++) {
                fz_input *in = &f->inputs[i];
                if (in->kind != IN_STATE || bad_sub[in->sub]) continue;
                char why[256] = "";
                if (!values_match(in->dtype, in->ref, in->got, in->bytes, !vec && !gpu_backend, why, sizeof why)) {
                    bad_sub[in->sub] = 1;
                    printf("FAIL fuzz_graph_seed_%llu: state %s (%s code): %s\n", (unsigned long long)seeds[in->sub],
                           in->name, vec ? "vector" : "scalar", why);
                    failures++;
                }
            }
        }
        for (int o = 0; o < f->nouts; o++) free(ref[o]);
        free(ref);
        free(bytes);
        if (failures >= nsub) break;
    }
    kiln_program_free(prog[0]);
    kiln_program_free(prog[1]);
    return failures;
}

int main(void) {
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/kiln-test-cache-%ld", (long)getuid());
    setenv("XDG_CACHE_HOME", dir, 1);
    /* the code generator is checked bit-exactly against the graph as built:
     * the e-graph step (which reassociates, so random graphs with cancellation
     * differ beyond any fixed tolerance) is off here; KILN_EGRAPH=1 turns it on */
    if (!getenv("KILN_EGRAPH")) setenv("KILN_EGRAPH", "0", 1);
    const char *be = getenv("KILN_BACKEND");
    gpu_backend = be && be[0] && strcmp(be, "cpu") != 0;
    int total = getenv("KILN_FUZZ_GRAPHS") ? atoi(getenv("KILN_FUZZ_GRAPHS")) : 500;
    uint64_t seed0 = getenv("KILN_FUZZ_SEED") ? strtoull(getenv("KILN_FUZZ_SEED"), NULL, 10) : 1;
    int batch = getenv("KILN_FUZZ_BATCH") ? atoi(getenv("KILN_FUZZ_BATCH")) : 50;
    int verbose = getenv("KILN_FUZZ_VERBOSE") != NULL;
    /* the vector code differs from the scalar code in few kernels: checking
     * it on every third batch keeps make test fast */
    int vec_every = getenv("KILN_FUZZ_VECTOR_EVERY") ? atoi(getenv("KILN_FUZZ_VECTOR_EVERY")) : 3;
    int batch_no = 0;
    if (vec_every < 1) vec_every = 1;
    if (batch < 1) batch = 1;
    int done = 0, refused = 0, failed = 0;
    uint64_t next_seed = seed0;
    while (done < total) {
        fz f;
        memset(&f, 0, sizeof f);
        f.inputs = calloc(MAX_INPUTS, sizeof *f.inputs);
        f.outs = calloc(MAX_OUTS, sizeof *f.outs);
        f.g = kiln_graph_new();
        uint64_t seeds[256];
        int nsub = 0;
        while (nsub < batch && nsub < 256 && done + nsub < total) {
            uint64_t sd = next_seed++;
            /* try the seed alone first: the builder may refuse a random graph
             * (e.g. a reshape it cannot prove), which must not poison the batch */
            fz probe;
            memset(&probe, 0, sizeof probe);
            probe.inputs = calloc(MAX_INPUTS, sizeof *probe.inputs);
            probe.outs = calloc(MAX_OUTS, sizeof *probe.outs);
            probe.g = kiln_graph_new();
            int ok = gen_sub(&probe, sd, 0);
            kiln_graph_free(probe.g);
            free(probe.inputs);
            free(probe.outs);
            if (!ok) {
                refused++;
                continue;
            }
            seeds[nsub] = sd;
            gen_sub(&f, sd, nsub);
            nsub++;
        }
        if (kiln_graph_status(f.g) != KILN_OK) {
            printf("FAIL fuzz_generator: %s\n", kiln_graph_error(f.g));
            return 1;
        }
        if (verbose) {
            char *txt = kiln_graph_text(f.g);
            printf("%s\n", txt);
            free(txt);
        }
        int bad_sub[256] = {0};
        failed += run_batch(&f, seeds, nsub, bad_sub, batch_no % vec_every == 0);
        batch_no++;
        done += nsub;
        for (int i = 0; i < f.ninputs; i++) {
            free(f.inputs[i].ref);
            free(f.inputs[i].got);
            free(f.inputs[i].orig);
        }
        free(f.inputs);
        free(f.outs);
        kiln_graph_free(f.g);
        if (refused > 20 * total + 100) break;
    }
    CASE_BEGIN("fuzz_random_graphs");
    CHECK(done >= total, "only %d of %d graphs generated", done, total);
    CHECK(failed == 0, "%d of %d random graphs disagree with the reference (seeds above)", failed, done);
    CASE_END();
    printf("# %d random graphs (%d refused by the builder and regenerated), %d failed\n", done, refused, failed);
    return check_exit();
}
