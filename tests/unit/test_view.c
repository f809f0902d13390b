/* test_view.c — movement views against a naive materialising oracle.
 *
 * The oracle keeps a dense array holding, for every element of the current
 * tensor, the buffer element it reads (or -1 for a padded zero), and applies
 * each movement op with plain coordinate loops. Random chains of movement ops
 * are run through both; after every op each output element's view_num_index
 * (and, at the end of a chain, view_expr evaluated by sym_eval) must agree with
 * the oracle. A second family has a dimension that is a variable "n", checked
 * for several values of n from the one symbolic view. When a view op answers
 * -1 (too many layers) the test does what the graph builder does: materialise
 * (the oracle array becomes the new buffer) and continue from an identity.
 * Fixed cases check layer counts, the simplified expressions of simple views,
 * the layer limit and printing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "check.h"
#include "sym.h"
#include "view.h"

/* ---- rng ---------------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t rnext(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
/* uniform in [lo, hi] */
static int64_t rr(int64_t lo, int64_t hi) { return lo + (int64_t)(rnext() % (uint64_t)(hi - lo + 1)); }

/* ---- the naive oracle --------------------------------------------------- */

enum { OP_RESHAPE, OP_PERMUTE, OP_EXPAND, OP_SLICE, OP_PAD, OP_WINDOW, OP_FLIP, OP_KINDS };
static const char *op_names[] = {"reshape", "permute", "expand", "slice", "pad", "window", "flip"};

typedef struct nt {
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    int64_t numel;
    int64_t *data; /* buffer element read, or -1 */
} nt;

/* one op with numeric arguments */
typedef struct nop {
    int kind, axis, ndim;
    int64_t shape[KILN_MAX_DIMS];
    int perm[KILN_MAX_DIMS];
    int64_t a, b, c;
} nop;

static int64_t numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

static void unravel(int64_t e, int ndim, const int64_t *shape, int64_t *c) {
    for (int d = ndim - 1; d >= 0; d--) {
        c[d] = e % shape[d];
        e /= shape[d];
    }
}

static int64_t ravel(int ndim, const int64_t *shape, const int64_t *c) {
    int64_t e = 0;
    for (int d = 0; d < ndim; d++) e = e * shape[d] + c[d];
    return e;
}

/* the output shape of op on in, as plain arithmetic from the op's definition */
static void nop_shape(const nt *in, const nop *op, int *ndim, int64_t *shape) {
    *ndim = in->ndim;
    memcpy(shape, in->shape, sizeof in->shape);
    switch (op->kind) {
    case OP_RESHAPE:
    case OP_EXPAND:
        *ndim = op->ndim;
        memcpy(shape, op->shape, sizeof op->shape);
        break;
    case OP_PERMUTE:
        for (int d = 0; d < in->ndim; d++) shape[d] = in->shape[op->perm[d]];
        break;
    case OP_SLICE: shape[op->axis] = (op->b - op->a + op->c - 1) / op->c; break;
    case OP_PAD: shape[op->axis] = in->shape[op->axis] + op->a + op->b; break;
    case OP_WINDOW:
        *ndim = in->ndim + 1;
        for (int d = in->ndim - 1; d > op->axis; d--) shape[d + 1] = in->shape[d];
        shape[op->axis] = (in->shape[op->axis] - op->c * (op->a - 1) - 1) / op->b + 1;
        shape[op->axis + 1] = op->a;
        break;
    case OP_FLIP: break;
    }
}

static void nt_apply(const nt *in, const nop *op, nt *out) {
    nop_shape(in, op, &out->ndim, out->shape);
    out->numel = numel_of(out->ndim, out->shape);
    out->data = kiln_xmalloc((size_t)out->numel * sizeof(int64_t));
    int64_t oc[KILN_MAX_DIMS], ic[KILN_MAX_DIMS];
    for (int64_t e = 0; e < out->numel; e++) {
        unravel(e, out->ndim, out->shape, oc);
        int64_t v = -2;
        int ok = 1;
        switch (op->kind) {
        case OP_RESHAPE: v = in->data[e]; break;
        case OP_PERMUTE:
            for (int d = 0; d < in->ndim; d++) ic[op->perm[d]] = oc[d];
            break;
        case OP_EXPAND:
            for (int d = 0; d < in->ndim; d++) ic[d] = in->shape[d] == 1 ? 0 : oc[d];
            break;
        case OP_SLICE:
            memcpy(ic, oc, sizeof ic);
            ic[op->axis] = op->a + oc[op->axis] * op->c;
            break;
        case OP_PAD:
            memcpy(ic, oc, sizeof ic);
            ic[op->axis] = oc[op->axis] - op->a;
            ok = ic[op->axis] >= 0 && ic[op->axis] < in->shape[op->axis];
            break;
        case OP_WINDOW:
            for (int d = 0; d < in->ndim; d++) ic[d] = d < op->axis ? oc[d] : oc[d + 1];
            ic[op->axis] = oc[op->axis] * op->b + oc[op->axis + 1] * op->c;
            break;
        case OP_FLIP:
            memcpy(ic, oc, sizeof ic);
            ic[op->axis] = in->shape[op->axis] - 1 - oc[op->axis];
            break;
        }
        if (op->kind != OP_RESHAPE) v = ok ? in->data[ravel(in->ndim, in->shape, ic)] : -1;
        out->data[e] = v;
    }
}

/* ---- chains ------------------------------------------------------------- */

/* coverage of the random chains, so a generator bug that stops drawing some
 * op (or never builds multi-layer views) fails instead of passing vacuously */
static struct {
    long ops[OP_KINDS], elements, expr_checks, multilayer, materialised, chains;
    long max_layers[VIEW_MAX_LAYERS + 1];
} stats;

#define MAX_WORLDS 3
#define MAX_ATOMS 24
#define NUMEL_CAP 600

/* one value of the size variable and what the oracle knows under it */
typedef struct world {
    int64_t nval;
    nt t;
    int64_t *buf; /* buffer contents: source element ids (or -1 after a materialised pad) */
    int64_t buflen;
} world;

typedef struct chain {
    sym_pool *p;
    sym_id n;   /* the size variable, SYM_NONE in the constant family */
    int nvar;   /* its variable number */
    view v;
    int nworlds;
    world w[MAX_WORLDS];
    /* each outer dim as a product of atoms (primes, or symbolic expressions),
     * from which random factorisations are drawn */
    int natoms[KILN_MAX_DIMS];
    sym_id atoms[KILN_MAX_DIMS][MAX_ATOMS];
    char hist[1024];
    int deep;  /* bias draws towards permute, reshape, mask: builds layer stacks */
    int step;
    int materialised, layers_seen;
} chain;

static int64_t *values_for(chain *c, const world *w) {
    uint32_t nv = sym_var_count(c->p);
    int64_t *vals = kiln_xcalloc(nv + 1, sizeof(int64_t));
    if (c->n != SYM_NONE) vals[c->nvar] = w->nval;
    return vals;
}

static int64_t eval_in(chain *c, const world *w, sym_id s) {
    int64_t *vals = values_for(c, w), out = 0;
    uint32_t miss = 0;
    int rc = sym_eval(c->p, s, vals, NULL, &out, &miss);
    free(vals);
    KILN_ASSERT(rc == 0);
    return out;
}

static void set_atoms(chain *c, int d, sym_id s) {
    int64_t v;
    c->natoms[d] = 0;
    if (sym_is_const(c->p, s, &v)) {
        for (int64_t f = 2; v > 1 && f <= v; f++)
            while (v % f == 0 && c->natoms[d] < MAX_ATOMS) {
                c->atoms[d][c->natoms[d]++] = sym_const(c->p, f);
                v /= f;
            }
    } else {
        c->atoms[d][c->natoms[d]++] = s;
    }
}

static int64_t min_dim(const chain *c, int d) {
    int64_t m = c->w[0].t.shape[d];
    for (int i = 1; i < c->nworlds; i++)
        if (c->w[i].t.shape[d] < m) m = c->w[i].t.shape[d];
    return m;
}

/* compares every element of the view with the oracle in every world; with
 * exprs also view_expr under bound index variables */
static int check_chain(chain *c, int exprs, char *why, size_t whycap) {
    int nd = view_ndim(&c->v);
    const sym_id *vs = view_shape(&c->v);
    sym_id idx[KILN_MAX_DIMS], off_e = SYM_NONE, val_e = SYM_NONE;
    int idx_var[KILN_MAX_DIMS];
    if (exprs) {
        static int counter;
        for (int d = 0; d < nd; d++) {
            char name[32];
            snprintf(name, sizeof name, "i%d_%d", d, counter++);
            /* half bounded by the dim (lets the simplifier work), half plain */
            idx[d] = (counter & 1) ? sym_var_bounded(c->p, name, vs[d]) : sym_var(c->p, name, 0, 1 << 20);
            idx_var[d] = (int)sym_get(c->p, idx[d])->c;
        }
        view_expr(&c->v, c->p, idx, &off_e, &val_e);
    }
    for (int wi = 0; wi < c->nworlds; wi++) {
        world *w = &c->w[wi];
        int64_t *vals = values_for(c, w);
        uint32_t miss = 0;
        view_num vn;
        if (view_eval(&vn, &c->v, c->p, vals, NULL, &miss) != 0) {
            snprintf(why, whycap, "view_eval failed (var %u)", miss);
            free(vals);
            return 0;
        }
        if (vn.layer[vn.nlayers - 1].ndim != w->t.ndim || nd != w->t.ndim) {
            snprintf(why, whycap, "ndim %d vs oracle %d", nd, w->t.ndim);
            free(vals);
            return 0;
        }
        for (int d = 0; d < nd; d++)
            if (vn.layer[vn.nlayers - 1].shape[d] != w->t.shape[d]) {
                snprintf(why, whycap, "n=%ld dim %d is %ld, oracle %ld", (long)w->nval, d,
                         (long)vn.layer[vn.nlayers - 1].shape[d], (long)w->t.shape[d]);
                free(vals);
                return 0;
            }
        int64_t co[KILN_MAX_DIMS];
        for (int64_t e = 0; e < w->t.numel; e++) {
            unravel(e, nd, w->t.shape, co);
            int64_t off = -7, got = -1;
            int valid = view_num_index(&vn, co, &off);
            if (valid) {
                if (off < 0 || off >= w->buflen) {
                    snprintf(why, whycap, "n=%ld element %ld: offset %ld outside buffer of %ld",
                             (long)w->nval, (long)e, (long)off, (long)w->buflen);
                    free(vals);
                    return 0;
                }
                got = w->buf[off];
            }
            if (got != w->t.data[e]) {
                snprintf(why, whycap, "n=%ld element %ld: view reads %ld (valid %d offset %ld), oracle %ld",
                         (long)w->nval, (long)e, (long)got, valid, (long)off, (long)w->t.data[e]);
                free(vals);
                return 0;
            }
            if (exprs) {
                int64_t eo = 0, ev = 0;
                for (int d = 0; d < nd; d++) vals[idx_var[d]] = co[d];
                int r1 = sym_eval(c->p, off_e, vals, NULL, &eo, &miss);
                int r2 = sym_eval(c->p, val_e, vals, NULL, &ev, &miss);
                if (r1 || r2 || ev != valid || (valid && eo != off)) {
                    snprintf(why, whycap, "n=%ld element %ld: view_expr gives valid %ld offset %ld, index gives %d %ld",
                             (long)w->nval, (long)e, (long)ev, (long)eo, valid, (long)off);
                    free(vals);
                    return 0;
                }
            }
        }
        free(vals);
    }
    return 1;
}

/* what the graph builder does on -1: copy into a dense buffer, start over */
static void materialise(chain *c) {
    for (int wi = 0; wi < c->nworlds; wi++) {
        world *w = &c->w[wi];
        free(w->buf);
        w->buflen = w->t.numel;
        w->buf = kiln_xmalloc((size_t)(w->buflen ? w->buflen : 1) * sizeof(int64_t));
        /* the tensor's values do not change, only where they are read from */
        memcpy(w->buf, w->t.data, (size_t)w->buflen * sizeof(int64_t));
    }
    sym_id shp[KILN_MAX_DIMS];
    memcpy(shp, view_shape(&c->v), sizeof shp);
    view_identity(&c->v, c->p, view_ndim(&c->v), shp);
    c->materialised++;
    stats.materialised++;
}

/* symbolic op with the sym arguments the view takes */
typedef struct sop {
    int kind, axis, ndim;
    sym_id shape[KILN_MAX_DIMS]; /* reshape / expand */
    int perm[KILN_MAX_DIMS];
    sym_id sa, sb;               /* slice start/stop, pad before/after */
    int64_t a, b, c;             /* slice step; window size/stride/dilation */
} sop;

static int apply_view(chain *c, const sop *o) {
    view *in = &c->v, res;
    view *out = (rnext() & 1) ? in : &res; /* half the time out aliases in */
    int rc = -2;
    switch (o->kind) {
    case OP_RESHAPE: rc = view_reshape(out, in, c->p, o->ndim, o->shape); break;
    case OP_PERMUTE: rc = view_permute(out, in, c->p, o->perm); break;
    case OP_EXPAND: rc = view_expand(out, in, c->p, o->shape); break;
    case OP_SLICE: rc = view_slice(out, in, c->p, o->axis, o->sa, o->sb, o->a); break;
    case OP_PAD: rc = view_pad(out, in, c->p, o->axis, o->sa, o->sb); break;
    case OP_WINDOW: rc = view_window(out, in, c->p, o->axis, o->a, o->b, o->c); break;
    case OP_FLIP: rc = view_flip(out, in, c->p, o->axis); break;
    }
    if (rc == 0 && out == &res) *in = res;
    return rc;
}

/* draws a random op valid in every world; 0 if the drawn kind does not fit */
static int draw_op(chain *c, sop *o) {
    sym_pool *p = c->p;
    int nd = view_ndim(&c->v);
    const sym_id *vs = view_shape(&c->v);
    memset(o, 0, sizeof *o);
    o->kind = (int)rr(0, OP_KINDS - 1);
    if (c->deep && rr(0, 4) < 3) {
        static const int cycle[3] = {OP_PERMUTE, OP_RESHAPE, OP_PAD};
        o->kind = cycle[c->step % 3];
        if (o->kind == OP_PAD && (rnext() & 1)) o->kind = OP_FLIP;
    }
    if (nd == 0 && o->kind != OP_RESHAPE) return 0;
    o->axis = nd ? (int)rr(0, nd - 1) : 0;
    int64_t m = nd ? min_dim(c, o->axis) : 0;
    switch (o->kind) {
    case OP_RESHAPE: {
        sym_id all[KILN_MAX_DIMS * MAX_ATOMS];
        int na = 0;
        for (int d = 0; d < nd; d++)
            for (int k = 0; k < c->natoms[d]; k++) all[na++] = c->atoms[d][k];
        if (rnext() & 1)
            for (int i = na - 1; i > 0; i--) {
                int j = (int)rr(0, i);
                sym_id t = all[i];
                all[i] = all[j];
                all[j] = t;
            }
        int groups = na ? (int)rr(1, na < 5 ? na : 5) : 0;
        int ones = (int)rr(0, 2);
        if (groups + ones > 6) ones = 6 - groups;
        if (groups + ones == 0 && rnext() % 3) ones = 1;
        /* cut points: group g takes atoms [cut[g], cut[g+1]) */
        int cut[KILN_MAX_DIMS + 1];
        cut[0] = 0;
        cut[groups] = na;
        for (int g = 1; g < groups; g++) cut[g] = 0;
        if (groups > 1) {
            /* choose groups-1 distinct points in 1..na-1 */
            int chosen[MAX_ATOMS * KILN_MAX_DIMS] = {0}, got = 0;
            while (got < groups - 1) {
                int q = (int)rr(1, na - 1);
                if (!chosen[q]) chosen[q] = 1, got++;
            }
            int g = 1;
            for (int q = 1; q < na; q++)
                if (chosen[q]) cut[g++] = q;
        }
        o->ndim = groups + ones;
        int gi = 0, placed_ones = 0;
        for (int d = 0; d < o->ndim; d++) {
            int one = placed_ones < ones && (gi == groups || rr(0, 2) == 0);
            if (one) {
                o->shape[d] = sym_const(p, 1);
                placed_ones++;
            } else {
                sym_id s = sym_const(p, 1);
                for (int k = cut[gi]; k < cut[gi + 1]; k++) s = sym_mul(p, s, all[k]);
                o->shape[d] = s;
                gi++;
            }
        }
        if (gi != groups) return 0;
        return 1;
    }
    case OP_PERMUTE:
        if (nd < 2) return 0;
        for (int d = 0; d < nd; d++) o->perm[d] = d;
        for (int i = nd - 1; i > 0; i--) {
            int j = (int)rr(0, i), t = o->perm[i];
            o->perm[i] = o->perm[j];
            o->perm[j] = t;
        }
        return 1;
    case OP_EXPAND: {
        int any = 0;
        o->ndim = nd;
        for (int d = 0; d < nd; d++) {
            o->shape[d] = vs[d];
            int64_t v;
            if (sym_is_const(p, vs[d], &v) && v == 1 && (rnext() % 4)) {
                o->shape[d] = (c->n != SYM_NONE && rr(0, 2) == 0) ? c->n : sym_const(p, rr(2, 4));
                any = 1;
            }
        }
        return any;
    }
    case OP_SLICE: {
        int64_t start = rr(0, m - 1);
        o->a = rr(1, 3);
        o->sa = sym_const(p, start);
        int64_t v;
        if (sym_is_const(p, vs[o->axis], &v) || rnext() % 2) {
            o->sb = sym_const(p, rr(start + 1, m));
        } else {
            o->sb = sym_sub(p, vs[o->axis], sym_const(p, rr(0, m - start - 1)));
        }
        return 1;
    }
    case OP_PAD:
        o->sa = sym_const(p, rr(0, 2));
        o->sb = sym_const(p, rr(0, 2));
        if (c->n != SYM_NONE && rr(0, 5) == 0) o->sb = c->n;
        return 1;
    case OP_WINDOW:
        if (nd >= 6) return 0;
        o->a = rr(1, 3);
        o->b = rr(1, 3);
        o->c = rr(1, 2);
        return o->c * (o->a - 1) + 1 <= m;
    case OP_FLIP: return 1;
    }
    return 0;
}

static nop numeric_op(chain *c, const world *w, const sop *o) {
    nop r;
    memset(&r, 0, sizeof r);
    r.kind = o->kind;
    r.axis = o->axis;
    r.ndim = o->ndim;
    memcpy(r.perm, o->perm, sizeof r.perm);
    r.a = o->a;
    r.b = o->b;
    r.c = o->c;
    if (o->kind == OP_RESHAPE || o->kind == OP_EXPAND)
        for (int d = 0; d < o->ndim; d++) r.shape[d] = eval_in(c, w, o->shape[d]);
    if (o->kind == OP_SLICE) {
        r.a = eval_in(c, w, o->sa);
        r.b = eval_in(c, w, o->sb);
        r.c = o->a;
    }
    if (o->kind == OP_PAD) {
        r.a = eval_in(c, w, o->sa);
        r.b = eval_in(c, w, o->sb);
    }
    return r;
}

/* keeps the atom lists in step with the op (they only drive reshape draws) */
static void update_atoms(chain *c, const sop *o) {
    const sym_id *vs = view_shape(&c->v);
    int nd = view_ndim(&c->v);
    int nat[KILN_MAX_DIMS];
    sym_id at[KILN_MAX_DIMS][MAX_ATOMS];
    memcpy(nat, c->natoms, sizeof nat);
    memcpy(at, c->atoms, sizeof at);
    switch (o->kind) {
    case OP_PERMUTE:
        for (int d = 0; d < nd; d++) {
            c->natoms[d] = nat[o->perm[d]];
            memcpy(c->atoms[d], at[o->perm[d]], sizeof at[0]);
        }
        break;
    case OP_WINDOW:
        for (int d = nd - 1; d > o->axis + 1; d--) {
            c->natoms[d] = nat[d - 1];
            memcpy(c->atoms[d], at[d - 1], sizeof at[0]);
        }
        set_atoms(c, o->axis, vs[o->axis]);
        set_atoms(c, o->axis + 1, vs[o->axis + 1]);
        break;
    case OP_FLIP: break;
    default:
        for (int d = 0; d < nd; d++)
            if (o->kind == OP_RESHAPE || o->kind == OP_EXPAND || d == o->axis) set_atoms(c, d, vs[d]);
        break;
    }
}

/* runs one random chain; returns 1 if everything agreed */
static int run_chain(int symbolic, int deep, int nops, char *why, size_t whycap) {
    chain *c = kiln_xcalloc(1, sizeof *c);
    c->deep = deep;
    c->p = sym_pool_new();
    c->n = SYM_NONE;
    int ok = 1;
    int nd = (int)rr(1, 4);
    sym_id shp[KILN_MAX_DIMS];
    int64_t cdim[KILN_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        cdim[d] = rr(1, 6);
        shp[d] = sym_const(c->p, cdim[d]);
    }
    int symdim = -1;
    static const int64_t nsets[3][MAX_WORLDS] = {{1, 2, 4}, {2, 3, 5}, {3, 4, 7}};
    int set = (int)rr(0, 2);
    if (symbolic) {
        c->n = sym_var(c->p, "n", 1, 64);
        c->nvar = sym_find_var(c->p, "n");
        symdim = (int)rr(0, nd - 1);
        shp[symdim] = c->n;
        c->nworlds = MAX_WORLDS;
    } else {
        c->nworlds = 1;
    }
    for (int wi = 0; wi < c->nworlds; wi++) {
        world *w = &c->w[wi];
        w->nval = symbolic ? nsets[set][wi] : 0;
        w->t.ndim = nd;
        for (int d = 0; d < nd; d++) w->t.shape[d] = d == symdim ? w->nval : cdim[d];
        w->t.numel = numel_of(nd, w->t.shape);
        w->t.data = kiln_xmalloc((size_t)w->t.numel * sizeof(int64_t));
        w->buf = kiln_xmalloc((size_t)w->t.numel * sizeof(int64_t));
        w->buflen = w->t.numel;
        for (int64_t e = 0; e < w->t.numel; e++) w->t.data[e] = w->buf[e] = e;
    }
    view_identity(&c->v, c->p, nd, shp);
    for (int d = 0; d < nd; d++) set_atoms(c, d, shp[d]);

    for (int i = 0; i < nops && ok; i++) {
        sop o;
        int tries = 0;
        for (;;) {
            tries++;
            if (draw_op(c, &o)) {
                /* keep the oracle small */
                int fits = 1;
                for (int wi = 0; wi < c->nworlds && fits; wi++) {
                    nop r = numeric_op(c, &c->w[wi], &o);
                    int ndim;
                    int64_t shape[KILN_MAX_DIMS];
                    nop_shape(&c->w[wi].t, &r, &ndim, shape);
                    int64_t ne = numel_of(ndim, shape);
                    if (ne > NUMEL_CAP || ne < 1) fits = 0;
                    if (o.kind == OP_RESHAPE && ne != c->w[wi].t.numel) {
                        snprintf(why, whycap, "test bug: reshape changes numel");
                        ok = 0;
                    }
                }
                if (fits) break;
            }
            if (tries > 200) break;
        }
        if (!ok) break;
        if (tries > 200) break;
        {
            char rec[96];
            snprintf(rec, sizeof rec, "%s(ax%d a%ld b%ld c%ld) ", op_names[o.kind], o.axis, (long)o.a,
                     (long)o.b, (long)o.c);
            if (strlen(c->hist) + strlen(rec) + 1 < sizeof c->hist) strcat(c->hist, rec);
        }

        /* a reshape of a view whose top layer is contiguous never adds a layer */
        view top1;
        top1.nlayers = 1;
        top1.layer[0] = c->v.layer[c->v.nlayers - 1];
        int top_contig = view_is_identity(&top1, c->p);
        int layers_before = c->v.nlayers;

        int rc = apply_view(c, &o);
        if (rc == -1) {
            if (c->v.nlayers != VIEW_MAX_LAYERS) {
                snprintf(why, whycap, "-1 with only %d layers", c->v.nlayers);
                ok = 0;
                break;
            }
            materialise(c);
            rc = apply_view(c, &o);
        }
        if (rc != 0) {
            snprintf(why, whycap, "%s returned %d", op_names[o.kind], rc);
            ok = 0;
            break;
        }
        if (o.kind == OP_RESHAPE && top_contig && c->v.nlayers > layers_before) {
            snprintf(why, whycap, "reshape of a contiguous top layer added a layer");
            ok = 0;
            break;
        }
        if (c->v.nlayers < 1 || c->v.nlayers > VIEW_MAX_LAYERS) {
            snprintf(why, whycap, "nlayers %d", c->v.nlayers);
            ok = 0;
            break;
        }
        for (int wi = 0; wi < c->nworlds; wi++) {
            world *w = &c->w[wi];
            nop r = numeric_op(c, w, &o);
            nt nx;
            nt_apply(&w->t, &r, &nx);
            free(w->t.data);
            w->t = nx;
        }
        update_atoms(c, &o);
        c->step++;
        if (c->v.nlayers > c->layers_seen) c->layers_seen = c->v.nlayers;
        stats.ops[o.kind]++;
        int last = i == nops - 1, exprs = last || (rnext() % 4 == 0);
        if (!check_chain(c, exprs, why, whycap)) ok = 0;
        for (int wi = 0; wi < c->nworlds; wi++) stats.elements += c->w[wi].t.numel;
        if (exprs) stats.expr_checks++;
    }
    stats.chains++;
    if (c->layers_seen > 1) stats.multilayer++;
    stats.max_layers[c->layers_seen]++;
    if (!ok) {
        char vb[2048];
        view_print(&c->v, c->p, vb, sizeof vb);
        size_t len = strlen(why);
        snprintf(why + len, whycap - len, " | ops: %s| view: %s", c->hist, vb);
    }
    for (int wi = 0; wi < c->nworlds; wi++) {
        free(c->w[wi].t.data);
        free(c->w[wi].buf);
    }
    sym_pool_free(c->p);
    free(c);
    return ok;
}

static void test_random_chains(const char *name, int symbolic, int deep, int count, int minops, int maxops) {
    char why[4096];
    int failures = 0;
    CASE_BEGIN(name);
    memset(&stats, 0, sizeof stats);
    for (int i = 0; i < count && failures < 3; i++) {
        why[0] = 0;
        if (!run_chain(symbolic, deep, (int)rr(minops, maxops), why, sizeof why)) {
            CHECK(0, "chain %d: %s", i, why);
            failures++;
        }
    }
    printf("# %s: %ld chains, %ld elements, %ld expr checks, %ld multi-layer, %ld materialised; ops",
           check_case_name, stats.chains, stats.elements, stats.expr_checks, stats.multilayer,
           stats.materialised);
    for (int k = 0; k < OP_KINDS; k++) printf(" %s %ld", op_names[k], stats.ops[k]);
    printf("; chains by most layers:");
    for (int k = 1; k <= VIEW_MAX_LAYERS; k++) printf(" %ld", stats.max_layers[k]);
    printf("\n");
    CHECK(stats.chains == count, "ran %ld of %d chains", stats.chains, count);
    for (int k = 0; k < OP_KINDS; k++) CHECK(stats.ops[k] >= count / 20, "only %ld %s ops", stats.ops[k], op_names[k]);
    CHECK(stats.multilayer >= count / 20, "only %ld chains built multi-layer views", stats.multilayer);
    if (deep)
        CHECK(stats.max_layers[VIEW_MAX_LAYERS] + stats.max_layers[VIEW_MAX_LAYERS - 1] >= 3,
              "too few chains reached %d layers", VIEW_MAX_LAYERS - 1);
    CASE_END();
}

/* ---- fixed cases ---------------------------------------------------------- */

static sym_id K(sym_pool *p, int64_t v) { return sym_const(p, v); }

/* checks a view (over a buffer 0..) against an expected list of buffer
 * elements (-1 = zero) in row-major order of its constant shape */
static int agrees(const view *v, const sym_pool *p, const int64_t *expect, int64_t count) {
    view_num vn;
    uint32_t miss;
    if (view_eval(&vn, v, p, NULL, NULL, &miss) != 0) return 0;
    const view_num_layer *T = &vn.layer[vn.nlayers - 1];
    if (numel_of(T->ndim, T->shape) != count) return 0;
    int64_t co[KILN_MAX_DIMS];
    for (int64_t e = 0; e < count; e++) {
        unravel(e, T->ndim, T->shape, co);
        int64_t off = 0;
        int valid = view_num_index(&vn, co, &off);
        if ((valid ? off : -1) != expect[e]) return 0;
    }
    return 1;
}

static void test_identity(void) {
    CASE_BEGIN("identity_basics");
    sym_pool *p = sym_pool_new();
    view v;
    sym_id shp[3] = {K(p, 2), K(p, 3), K(p, 4)};
    view_identity(&v, p, 3, shp);
    CHECK(view_ndim(&v) == 3, "ndim %d", view_ndim(&v));
    CHECK(view_shape(&v)[1] == shp[1], "shape");
    CHECK(view_is_identity(&v, p), "identity");
    int64_t s0 = 0, s1 = 0, s2 = 0;
    CHECK(sym_is_const(p, v.layer[0].stride[0], &s0) && s0 == 12, "stride0 %ld", (long)s0);
    CHECK(sym_is_const(p, v.layer[0].stride[1], &s1) && s1 == 4, "stride1 %ld", (long)s1);
    CHECK(sym_is_const(p, v.layer[0].stride[2], &s2) && s2 == 1, "stride2 %ld", (long)s2);
    view t;
    int perm[3] = {0, 2, 1};
    view_permute(&t, &v, p, perm);
    CHECK(!view_is_identity(&t, p), "permuted is not identity");
    view_slice(&t, &v, p, 0, K(p, 1), K(p, 2), 1);
    CHECK(!view_is_identity(&t, p), "offset slice is not identity");
    view_slice(&t, &v, p, 0, K(p, 0), K(p, 1), 1); /* (1,3,4), offset 0 */
    CHECK(view_is_identity(&t, p), "leading slice from 0 is identity");
    view_pad(&t, &v, p, 2, K(p, 1), K(p, 0));
    CHECK(!view_is_identity(&t, p), "padded is not identity");
    CHECK(t.layer[0].masked, "pad sets a mask");

    /* symbolic: strides are products of the shape */
    sym_id b = sym_var(p, "batch", 1, 64), seq = sym_var(p, "seq", 1, 4096);
    sym_id s4[3] = {b, seq, K(p, 64)};
    view_identity(&v, p, 3, s4);
    CHECK(view_is_identity(&v, p), "symbolic identity");
    CHECK(v.layer[0].stride[0] == sym_mul(p, seq, K(p, 64)), "stride0 is seq*64");
    /* strides that are sums once expanded: (b, pos+1, 64) has stride 64*pos + 64 */
    sym_id pos = sym_var(p, "pos", 0, 4096);
    sym_id s5[3] = {b, sym_add(p, pos, K(p, 1)), K(p, 64)};
    view_identity(&v, p, 3, s5);
    CHECK(view_is_identity(&v, p), "identity with stride (pos+1)*64");
    t = v;
    t.layer[0].stride[0] = sym_mul(p, pos, K(p, 64));
    CHECK(!view_is_identity(&t, p), "stride 64*pos is not (pos+1)*64");
    t.layer[0].stride[0] = sym_add(p, sym_mul(p, pos, K(p, 64)), K(p, 128));
    CHECK(!view_is_identity(&t, p), "stride 64*pos+128 is not (pos+1)*64");
    t.layer[0].stride[0] = sym_mul(p, sym_add(p, pos, K(p, 1)), K(p, 64));
    CHECK(view_is_identity(&t, p), "stride rebuilt as (pos+1)*64 is");
    view_slice(&t, &v, p, 1, K(p, 1), s5[1], 1);
    CHECK(!view_is_identity(&t, p), "slice of it is not");
    view_slice(&t, &v, p, 2, K(p, 0), K(p, 32), 1);
    CHECK(!view_is_identity(&t, p), "inner slice of it is not");
    sym_id s6[2] = {sym_mul(p, b, s5[1]), K(p, 64)};
    view_reshape(&t, &v, p, 2, s6);
    CHECK(t.nlayers == 1 && view_is_identity(&t, p), "flattened leading axes still identity");
    sym_pool_free(p);
    CASE_END();
}

static void test_expr_simple(void) {
    CASE_BEGIN("expr_simple");
    sym_pool *p = sym_pool_new();
    view v;
    sym_id shp[2] = {K(p, 4), K(p, 8)};
    view_identity(&v, p, 2, shp);
    sym_id idx[2] = {sym_var_bounded(p, "i0", shp[0]), sym_var_bounded(p, "i1", shp[1])};
    sym_id off, valid;
    view_expr(&v, p, idx, &off, &valid);
    CHECK(off == sym_add(p, sym_mul(p, idx[0], K(p, 8)), idx[1]), "offset is i0*8 + i1");
    CHECK(valid == K(p, 1), "valid is 1");

    /* a symbolic reshape stays one layer, so its expression stays linear */
    sym_id seq = sym_var(p, "seq", 1, 4096);
    sym_id s2[2] = {seq, K(p, 64)}, s3[3] = {seq, K(p, 8), K(p, 8)};
    view_identity(&v, p, 2, s2);
    CHECK(view_reshape(&v, &v, p, 3, s3) == 0, "reshape");
    sym_id j[3] = {sym_var_bounded(p, "j0", seq), sym_var_bounded(p, "j1", K(p, 8)),
                   sym_var_bounded(p, "j2", K(p, 8))};
    view_expr(&v, p, j, &off, &valid);
    sym_id want = sym_add(p, sym_add(p, sym_mul(p, j[0], K(p, 64)), sym_mul(p, j[1], K(p, 8))), j[2]);
    CHECK(off == want, "offset is j0*64 + j1*8 + j2");
    CHECK(valid == K(p, 1), "valid is 1");

    /* padding shows up in valid, not as garbage: a pad of 1 before on axis 1 */
    view_identity(&v, p, 2, shp);
    view_pad(&v, &v, p, 1, K(p, 1), K(p, 0));
    sym_id q[2] = {sym_var_bounded(p, "q0", K(p, 4)), sym_var_bounded(p, "q1", K(p, 9))};
    view_expr(&v, p, q, &off, &valid);
    int64_t vals[64] = {0}, r = -1;
    uint32_t miss;
    int vq0 = sym_find_var(p, "q0"), vq1 = sym_find_var(p, "q1");
    CHECK(vq0 >= 0 && vq1 >= 0 && sym_var_count(p) <= 64, "vars");
    vals[vq0] = 2;
    vals[vq1] = 0;
    CHECK(sym_eval(p, valid, vals, NULL, &r, &miss) == 0 && r == 0, "pad position invalid (%ld)", (long)r);
    vals[vq1] = 3;
    CHECK(sym_eval(p, valid, vals, NULL, &r, &miss) == 0 && r == 1, "data position valid");
    CHECK(sym_eval(p, off, vals, NULL, &r, &miss) == 0 && r == 2 * 8 + 2, "offset %ld", (long)r);
    sym_pool_free(p);
    CASE_END();
}

static void test_layer_counts(void) {
    CASE_BEGIN("layer_counts");
    sym_pool *p = sym_pool_new();
    view v, t;
    sym_id s64[2] = {K(p, 6), K(p, 4)}, s234[3] = {K(p, 2), K(p, 3), K(p, 4)};
    view_identity(&v, p, 2, s64);
    CHECK(view_reshape(&t, &v, p, 3, s234) == 0 && t.nlayers == 1, "(6,4)->(2,3,4) one layer");
    CHECK(view_is_identity(&t, p), "and still the identity");

    /* transpose, then merge the transposed axes: needs a layer */
    int tr[2] = {1, 0};
    sym_id s24[1] = {K(p, 24)}, s46[2] = {K(p, 4), K(p, 6)};
    view_permute(&t, &v, p, tr);
    view m;
    CHECK(view_reshape(&m, &t, p, 1, s24) == 0 && m.nlayers == 2, "transpose+merge adds a layer (%d)",
          m.nlayers);
    {
        int64_t expect[24];
        for (int i = 0; i < 24; i++) expect[i] = (i % 6) * 4 + i / 6;
        CHECK(agrees(&m, p, expect, 24), "transpose+merge reads the transpose");
    }
    /* and reshaping back undoes the push */
    view back;
    CHECK(view_reshape(&back, &m, p, 2, s46) == 0 && back.nlayers == 1, "reshape back is one layer (%d)",
          back.nlayers);
    {
        int64_t expect[24];
        for (int i = 0; i < 24; i++) expect[i] = (i % 6) * 4 + i / 6;
        CHECK(agrees(&back, p, expect, 24), "reshape back reads the transpose");
    }
    /* transpose then split (not merge) needs no layer */
    sym_id s4_23[3] = {K(p, 4), K(p, 2), K(p, 3)};
    CHECK(view_reshape(&m, &t, p, 3, s4_23) == 0 && m.nlayers == 1, "transpose+split one layer");

    /* symbolic (seq, 64) -> (seq, 8, 8) and -> (seq*64) */
    sym_id seq = sym_var(p, "seq", 1, 4096);
    sym_id q2[2] = {seq, K(p, 64)}, q3[3] = {seq, K(p, 8), K(p, 8)}, q1[1] = {sym_mul(p, seq, K(p, 64))};
    view_identity(&v, p, 2, q2);
    CHECK(view_reshape(&t, &v, p, 3, q3) == 0 && t.nlayers == 1, "(seq,64)->(seq,8,8) one layer");
    CHECK(view_is_identity(&t, p), "(seq,8,8) identity");
    CHECK(view_reshape(&t, &v, p, 1, q1) == 0 && t.nlayers == 1, "(seq,64)->(seq*64) one layer");
    /* a sliced symbolic view split further: (seq, 64)[:, 0:32] -> (seq, 4, 8) */
    sym_id q48[3] = {seq, K(p, 4), K(p, 8)};
    view_slice(&t, &v, p, 1, K(p, 0), K(p, 32), 1);
    CHECK(view_reshape(&t, &t, p, 3, q48) == 0 && t.nlayers == 1, "sliced symbolic split one layer");
    /* a leading-axis slice of a contiguous view stays contiguous in memory */
    sym_id s16[1] = {K(p, 16)};
    view_identity(&v, p, 2, s64);
    view_slice(&t, &v, p, 0, K(p, 1), K(p, 5), 1);
    CHECK(view_reshape(&t, &t, p, 1, s16) == 0 && t.nlayers == 1, "leading slice then flatten one layer");
    {
        int64_t expect[16];
        for (int i = 0; i < 16; i++) expect[i] = 4 + i;
        CHECK(agrees(&t, p, expect, 16), "leading slice then flatten reads rows 1..4");
    }
    /* a strided slice then a split: (6,8)[:, ::2] -> (6,2,2) and (2,3,4) */
    sym_id s68[2] = {K(p, 6), K(p, 8)}, s622[3] = {K(p, 6), K(p, 2), K(p, 2)};
    view_identity(&v, p, 2, s68);
    view_slice(&t, &v, p, 1, K(p, 0), K(p, 8), 2);
    CHECK(view_reshape(&m, &t, p, 3, s622) == 0 && m.nlayers == 1, "step slice then split one layer");
    CHECK(view_reshape(&m, &t, p, 3, s234) == 0 && m.nlayers == 1, "step slice then split rows one layer");
    {
        int64_t expect[24];
        for (int i = 0; i < 24; i++) expect[i] = (i / 4) * 8 + (i % 4) * 2;
        CHECK(agrees(&m, p, expect, 24), "step slice then split reads the right elements");
    }
    /* flattening it is still one stride (8 == 2*4) */
    CHECK(view_reshape(&m, &t, p, 1, s24) == 0 && m.nlayers == 1, "step slice then flatten one layer");
    {
        int64_t expect[24];
        for (int i = 0; i < 24; i++) expect[i] = 2 * i;
        CHECK(agrees(&m, p, expect, 24), "step slice then flatten reads every other element");
    }
    /* but (6,8)[:, 0:6:2] has rows 8 apart and 3 elements 2 apart: a layer */
    sym_id s18[1] = {K(p, 18)};
    view_slice(&t, &v, p, 1, K(p, 0), K(p, 6), 2);
    CHECK(view_reshape(&m, &t, p, 1, s18) == 0 && m.nlayers == 2, "gapped slice then flatten adds a layer");
    {
        int64_t expect[18];
        for (int i = 0; i < 18; i++) expect[i] = (i / 3) * 8 + (i % 3) * 2;
        CHECK(agrees(&m, p, expect, 18), "gapped slice then flatten reads the right elements");
    }
    /* pad then slice the padding away: the mask goes, and so the reshape is free */
    view_identity(&v, p, 2, s64);
    view_pad(&t, &v, p, 1, K(p, 1), K(p, 2));
    CHECK(t.layer[0].masked, "pad masked");
    view_slice(&t, &t, p, 1, K(p, 1), K(p, 5), 1);
    CHECK(!t.layer[0].masked, "slicing the pad away drops the mask");
    CHECK(view_reshape(&t, &t, p, 1, s24) == 0 && t.nlayers == 1, "and the reshape is free");
    CHECK(view_is_identity(&t, p), "and is the identity again");
    /* a masked axis that a reshape leaves alone keeps its mask in the same layer */
    sym_id s2_3_4[3] = {K(p, 2), K(p, 3), K(p, 7)};
    view_identity(&v, p, 2, s64);
    view_pad(&t, &v, p, 1, K(p, 1), K(p, 2)); /* (6,7) */
    CHECK(view_reshape(&m, &t, p, 3, s2_3_4) == 0 && m.nlayers == 1, "split beside a mask one layer");
    {
        int64_t expect[42];
        for (int i = 0; i < 42; i++) {
            int row = i / 7, col = i % 7 - 1;
            expect[i] = (col >= 0 && col < 4) ? row * 4 + col : -1;
        }
        CHECK(agrees(&m, p, expect, 42), "split beside a mask reads the padded rows");
    }
    /* conv-style: pad then window on the same axis pushes one layer */
    sym_id s5[1] = {K(p, 5)};
    view_identity(&v, p, 1, s5);
    view_pad(&t, &v, p, 0, K(p, 1), K(p, 1));
    CHECK(view_window(&t, &t, p, 0, 3, 1, 1) == 0 && t.nlayers == 2, "pad+window 2 layers (%d)", t.nlayers);
    {
        int64_t expect[15];
        for (int w = 0; w < 5; w++)
            for (int k = 0; k < 3; k++) {
                int i = w + k - 1;
                expect[w * 3 + k] = (i >= 0 && i < 5) ? i : -1;
            }
        CHECK(agrees(&t, p, expect, 15), "pad+window reads the padded windows");
    }
    sym_pool_free(p);
    CASE_END();
}

static void test_masks(void) {
    CASE_BEGIN("masks_expand_flip");
    sym_pool *p = sym_pool_new();
    view v, t;
    sym_id s3[1] = {K(p, 3)}, s5[1] = {K(p, 5)};
    view_identity(&v, p, 1, s3);
    view_pad(&v, &v, p, 0, K(p, 1), K(p, 0)); /* (4): -1 0 1 2 */
    view_slice(&t, &v, p, 0, K(p, 0), K(p, 1), 1); /* (1): the pad */
    view_expand(&t, &t, p, s5);
    {
        int64_t expect[5] = {-1, -1, -1, -1, -1};
        CHECK(agrees(&t, p, expect, 5), "expanding a padded position gives zeros");
    }
    view_slice(&t, &v, p, 0, K(p, 2), K(p, 3), 1); /* (1): element 1 */
    CHECK(!t.layer[0].masked, "a slice inside the data is unmasked");
    view_expand(&t, &t, p, s5);
    {
        int64_t expect[5] = {1, 1, 1, 1, 1};
        CHECK(agrees(&t, p, expect, 5), "expanding an element repeats it");
    }
    view_flip(&t, &v, p, 0);
    {
        int64_t expect[4] = {2, 1, 0, -1};
        CHECK(agrees(&t, p, expect, 4), "flip mirrors the mask");
    }
    view_slice(&t, &v, p, 0, K(p, 0), K(p, 4), 2);
    {
        int64_t expect[2] = {-1, 1};
        CHECK(agrees(&t, p, expect, 2), "step slice over a mask");
    }
    /* unbound variables are reported */
    sym_id n = sym_var(p, "n", 1, 64);
    sym_id sn[1] = {n};
    view_identity(&v, p, 1, sn);
    view_num vn;
    uint8_t bound[8] = {0};
    int64_t vals[8] = {0};
    uint32_t miss = 99;
    CHECK(view_eval(&vn, &v, p, vals, bound, &miss) == -1, "unbound fails");
    CHECK(miss == (uint32_t)sym_find_var(p, "n"), "missing var %u", miss);
    sym_pool_free(p);
    CASE_END();
}

static void test_layer_limit(void) {
    CASE_BEGIN("layer_limit");
    sym_pool *p = sym_pool_new();
    view v;
    sym_id s23[2] = {K(p, 2), K(p, 3)}, s6[1] = {K(p, 6)};
    int tr[2] = {1, 0};
    view_identity(&v, p, 2, s23);
    /* oracle: the array of buffer elements */
    int64_t cur[6] = {0, 1, 2, 3, 4, 5}, nxt[6];
    int64_t r = 0, c2 = 2, c3 = 3; /* current (r x c) shape: (2,3) */
    (void)r;
    int hit = 0;
    for (int round = 0; round < 10 && !hit; round++) {
        /* transpose: (a,b) -> (b,a) */
        view_permute(&v, &v, p, tr);
        for (int i = 0; i < c3; i++)
            for (int j = 0; j < c2; j++) nxt[i * c2 + j] = cur[j * c3 + i];
        memcpy(cur, nxt, sizeof cur);
        int64_t t = c2;
        c2 = c3;
        c3 = t;
        view before = v;
        int rc = view_reshape(&v, &v, p, 1, s6);
        if (rc == -1) {
            CHECK(before.nlayers == VIEW_MAX_LAYERS, "-1 at %d layers", before.nlayers);
            CHECK(memcmp(&before, &v, sizeof v) == 0, "failed reshape leaves out alone");
            hit = 1;
            break;
        }
        CHECK(v.nlayers == round + 2, "round %d: %d layers", round, v.nlayers);
        /* flip keeps the top layer from being a plain identity, then split
         * back to the transposed shape */
        view_flip(&v, &v, p, 0);
        for (int i = 0; i < 3; i++) {
            int64_t x = cur[i];
            cur[i] = cur[5 - i];
            cur[5 - i] = x;
        }
        sym_id back[2] = {K(p, c2), K(p, c3)};
        CHECK(view_reshape(&v, &v, p, 2, back) == 0, "split");
        CHECK(agrees(&v, p, cur, 6), "round %d reads the oracle", round);
    }
    CHECK(hit, "the layer limit was reached");
    sym_pool_free(p);
    CASE_END();
}

static void test_print(void) {
    CASE_BEGIN("print");
    sym_pool *p = sym_pool_new();
    view v;
    sym_id s[2] = {sym_var(p, "seq", 1, 4096), K(p, 64)};
    view_identity(&v, p, 2, s);
    char buf[256];
    const char *want = "[(seq, 64) strides (64, 1) offset 0]";
    int n = view_print(&v, p, buf, sizeof buf);
    CHECK(strcmp(buf, want) == 0, "got '%s'", buf);
    CHECK(n == (int)strlen(want), "length %d", n);
    char small[8];
    n = view_print(&v, p, small, sizeof small);
    CHECK(n == (int)strlen(want) && strlen(small) == sizeof small - 1, "truncation");
    view_pad(&v, &v, p, 1, K(p, 1), K(p, 0));
    view_print(&v, p, buf, sizeof buf);
    CHECK(strstr(buf, "mask") != NULL && strstr(buf, "[1, 65)") != NULL, "mask printed: '%s'", buf);
    sym_pool_free(p);
    CASE_END();
}

int main(int argc, char **argv) {
    if (argc > 1) rng = strtoull(argv[1], NULL, 0) | 1;
    test_identity();
    test_expr_simple();
    test_layer_counts();
    test_masks();
    test_layer_limit();
    test_print();
    test_random_chains("random_chains_constant", 0, 0, 2000, 1, 6);
    test_random_chains("random_chains_symbolic", 1, 0, 2000, 1, 6);
    /* long chains biased to stack layers reach the limit and go through
     * materialisation */
    test_random_chains("random_chains_deep_constant", 0, 1, 400, 10, 24);
    test_random_chains("random_chains_deep_symbolic", 1, 1, 400, 10, 24);
    return check_exit();
}
