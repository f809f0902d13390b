/* sym.c — symbolic integer expressions: hash-consed nodes, canonical smart
 * constructors, interval bounds, evaluation, printing and parsing.
 *
 * Canonical form (what the smart constructors return):
 *  - A polynomial is c0 + sum(coef_i * mono_i). A monomial is a left-deep MUL
 *    chain of "atoms" (VAR, DIV, MOD, MIN, MAX, LT, AND nodes) sorted by id.
 *    A term is mono (coef 1) or MUL(mono, CONST coef). A sum is a left-deep ADD
 *    chain of terms sorted by monomial id with the constant (if non-zero) last.
 *    Products of sums are expanded (distribution) unless the expansion would
 *    exceed EXPAND_CAP terms; then the sums stay as opaque factors (still sound
 *    and deterministic, only less canonical).
 *  - DIV/MOD by a constant always have a divisor >= 2, a dividend with no term
 *    whose coefficient is a multiple of the divisor, a constant in [0, d) and
 *    no common factor with the divisor.
 *  - MIN/MAX/AND operands are ordered by id.
 * Because atoms are hash-consed and have canonical children, equal polynomials
 * get equal ids.
 *
 * Arithmetic: coefficients and evaluation wrap modulo 2^64 (never signed
 * overflow UB), so ring rewrites (a+b-b = a, distribution) stay exact even on
 * overflow. Rewrites of DIV/MOD/MIN/MAX/LT that use bounds assume variables lie
 * within their declared ranges and that no intermediate value overflows.
 *
 * Bounds are computed once per node when it is interned (nodes are immutable
 * and a variable's range never changes: re-declaring a name keeps the first
 * declaration), so sym_bounds is O(1). Ranges use saturation at +-SYM_INF: an
 * upper bound of SYM_INF or a lower bound of -SYM_INF means "unbounded".
 */
#include "sym.h"

#include "base.h"

#include <limits.h>
#include <string.h>

#define EXPAND_CAP 256u
#define PARSE_MAX_DEPTH 256
#define EMPTY UINT32_MAX

typedef struct sym_varinfo {
    char *name;
    int64_t lo, hi;
    sym_id bound; /* SYM_NONE for size variables */
    sym_id node;
} sym_varinfo;

struct sym_pool {
    sym_node *nodes;
    int64_t *lo, *hi; /* per-node bounds */
    uint32_t n, cap;
    uint32_t *table; /* open addressing over node ids; EMPTY when free */
    uint32_t tcap;   /* power of two */
    sym_varinfo *vars;
    uint32_t nvars, vcap;
    uint32_t *vtable; /* open addressing over variable numbers by name */
    uint32_t vtcap;
};

/* ---------------------------------------------------------------- integers */

static int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static int64_t wneg(int64_t a) { return (int64_t)(0u - (uint64_t)a); }

/* floor division and matching remainder; by zero -> 0; MIN/-1 wraps */
static int64_t fdiv(int64_t a, int64_t b) {
    if (b == 0) return 0;
    if (b == -1) return wneg(a);
    int64_t q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
static int64_t fmod_(int64_t a, int64_t b) {
    if (b == 0 || b == -1) return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

static uint64_t gcd_u(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}
static uint64_t mag(int64_t v) { return v < 0 ? 0u - (uint64_t)v : (uint64_t)v; }

/* ------------------------------------------------------ saturating ranges */

static int64_t clampi(int64_t v) { return v > SYM_INF ? SYM_INF : (v < -SYM_INF ? -SYM_INF : v); }
static int64_t sat_add_lo(int64_t a, int64_t b) {
    if (a <= -SYM_INF || b <= -SYM_INF) return -SYM_INF;
    return clampi(clampi(a) + clampi(b));
}
static int64_t sat_add_hi(int64_t a, int64_t b) {
    if (a >= SYM_INF || b >= SYM_INF) return SYM_INF;
    return clampi(clampi(a) + clampi(b));
}
static int64_t sat_mul(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return ((a < 0) != (b < 0)) ? -SYM_INF : SYM_INF;
    return clampi(r);
}
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int is_inf(int64_t v) { return v >= SYM_INF || v <= -SYM_INF; }

static void rng_mul(int64_t alo, int64_t ahi, int64_t blo, int64_t bhi, int64_t *lo, int64_t *hi) {
    int64_t c[4] = {sat_mul(alo, blo), sat_mul(alo, bhi), sat_mul(ahi, blo), sat_mul(ahi, bhi)};
    *lo = min64(min64(c[0], c[1]), min64(c[2], c[3]));
    *hi = max64(max64(c[0], c[1]), max64(c[2], c[3]));
}

/* one corner of floor(x/b); an unbounded x stays unbounded */
static int64_t div_corner(int64_t x, int64_t b) {
    if (is_inf(x)) return ((x < 0) != (b < 0)) ? -SYM_INF : SYM_INF;
    return clampi(fdiv(x, b));
}

static void rng_div(int64_t alo, int64_t ahi, int64_t blo, int64_t bhi, int64_t *lo, int64_t *hi) {
    if (blo >= 1 || bhi <= -1) {
        /* floor(x/b) is monotone in x and in b on each sign of b: corners */
        int64_t c[4] = {div_corner(alo, blo), div_corner(alo, bhi), div_corner(ahi, blo),
                        div_corner(ahi, bhi)};
        *lo = min64(min64(c[0], c[1]), min64(c[2], c[3]));
        *hi = max64(max64(c[0], c[1]), max64(c[2], c[3]));
        return;
    }
    /* divisor may be 0 (result 0) or any |b| >= 1: |floor(x/b)| <= |x| */
    int64_t l = clampi(alo), h = clampi(ahi);
    int64_t m = max64(l < 0 ? -l : l, h < 0 ? -h : h);
    *lo = -m;
    *hi = m;
}

static void rng_mod(int64_t alo, int64_t ahi, int64_t blo, int64_t bhi, int64_t *lo, int64_t *hi) {
    if (blo >= 1) {
        if (alo >= 0 && ahi < blo) {
            *lo = alo;
            *hi = ahi;
        } else {
            *lo = 0;
            *hi = sat_add_hi(bhi, -1);
            if (alo >= 0) *hi = min64(*hi, ahi);
        }
    } else if (bhi <= -1) {
        *lo = sat_add_lo(blo, 1);
        *hi = 0;
        if (ahi <= 0) *lo = max64(*lo, alo);
    } else {
        *lo = min64(0, sat_add_lo(blo, 1));
        *hi = max64(0, sat_add_hi(bhi, -1));
    }
}

/* 1: provably non-zero, 0: provably zero, -1: unknown */
static int rng_truth(int64_t lo, int64_t hi) {
    if (lo >= 1 || hi <= -1) return 1;
    if (lo == 0 && hi == 0) return 0;
    return -1;
}

/* ------------------------------------------------------------------ pool */

static uint64_t node_hash(sym_kind k, int64_t c, sym_id a, sym_id b) {
    uint64_t h = 0xcbf29ce484222325ULL;
    h = kiln_hash_mix(h, (uint64_t)k);
    h = kiln_hash_mix(h, (uint64_t)c);
    h = kiln_hash_mix(h, (uint64_t)a);
    h = kiln_hash_mix(h, (uint64_t)b);
    return h ^ (h >> 29);
}

static void table_insert(uint32_t *table, uint32_t tcap, uint64_t h, uint32_t id) {
    uint32_t mask = tcap - 1, i = (uint32_t)h & mask;
    while (table[i] != EMPTY) i = (i + 1) & mask;
    table[i] = id;
}

static void table_grow(sym_pool *p) {
    uint32_t ncap = p->tcap * 2;
    uint32_t *t = kiln_xmalloc((size_t)ncap * sizeof(uint32_t));
    memset(t, 0xff, (size_t)ncap * sizeof(uint32_t));
    for (uint32_t i = 0; i < p->n; i++) {
        const sym_node *nd = &p->nodes[i];
        table_insert(t, ncap, node_hash(nd->kind, nd->c, nd->a, nd->b), i);
    }
    free(p->table);
    p->table = t;
    p->tcap = ncap;
}

static void node_bounds(sym_pool *p, const sym_node *nd, int64_t *lo, int64_t *hi) {
    int64_t alo = 0, ahi = 0, blo = 0, bhi = 0;
    if (nd->a != SYM_NONE) alo = p->lo[nd->a], ahi = p->hi[nd->a];
    if (nd->b != SYM_NONE) blo = p->lo[nd->b], bhi = p->hi[nd->b];
    switch (nd->kind) {
    case SYM_CONST: *lo = clampi(nd->c), *hi = clampi(nd->c); break;
    case SYM_VAR: {
        const sym_varinfo *v = &p->vars[nd->c];
        if (v->bound == SYM_NONE) {
            *lo = v->lo, *hi = v->hi;
        } else {
            int64_t bh = p->hi[v->bound];
            *lo = 0;
            *hi = bh >= SYM_INF ? SYM_INF : max64(0, bh - 1);
        }
        break;
    }
    case SYM_ADD: *lo = sat_add_lo(alo, blo), *hi = sat_add_hi(ahi, bhi); break;
    case SYM_MUL: rng_mul(alo, ahi, blo, bhi, lo, hi); break;
    case SYM_DIV: rng_div(alo, ahi, blo, bhi, lo, hi); break;
    case SYM_MOD: rng_mod(alo, ahi, blo, bhi, lo, hi); break;
    case SYM_MIN: *lo = min64(alo, blo), *hi = min64(ahi, bhi); break;
    case SYM_MAX: *lo = max64(alo, blo), *hi = max64(ahi, bhi); break;
    case SYM_LT:
        if (ahi < blo) *lo = *hi = 1;
        else if (alo >= bhi) *lo = *hi = 0;
        else *lo = 0, *hi = 1;
        break;
    case SYM_AND: {
        int ta = rng_truth(alo, ahi), tb = rng_truth(blo, bhi);
        if (ta == 0 || tb == 0) *lo = *hi = 0;
        else if (ta == 1 && tb == 1) *lo = *hi = 1;
        else *lo = 0, *hi = 1;
        break;
    }
    default: *lo = -SYM_INF, *hi = SYM_INF; break;
    }
}

static sym_id intern(sym_pool *p, sym_kind k, int64_t c, sym_id a, sym_id b) {
    uint64_t h = node_hash(k, c, a, b);
    uint32_t mask = p->tcap - 1, i = (uint32_t)h & mask;
    while (p->table[i] != EMPTY) {
        const sym_node *nd = &p->nodes[p->table[i]];
        if (nd->kind == k && nd->c == c && nd->a == a && nd->b == b) return p->table[i];
        i = (i + 1) & mask;
    }
    KILN_ASSERT(p->n < UINT32_MAX - 1);
    if (p->n + 1 > p->cap) {
        uint32_t ncap = p->cap ? p->cap * 2 : 256;
        if (ncap < p->cap) ncap = UINT32_MAX; /* ids stop below UINT32_MAX anyway */
        p->nodes = kiln_xrealloc(p->nodes, (size_t)ncap * sizeof(sym_node));
        p->lo = kiln_xrealloc(p->lo, (size_t)ncap * sizeof(int64_t));
        p->hi = kiln_xrealloc(p->hi, (size_t)ncap * sizeof(int64_t));
        p->cap = ncap;
    }
    sym_id id = p->n++;
    sym_node *nd = &p->nodes[id];
    nd->kind = k, nd->c = c, nd->a = a, nd->b = b;
    node_bounds(p, nd, &p->lo[id], &p->hi[id]);
    p->table[i] = id;
    if ((uint64_t)p->n * 2 > p->tcap) table_grow(p);
    return id;
}

sym_pool *sym_pool_new(void) {
    sym_pool *p = kiln_xcalloc(1, sizeof(*p));
    p->tcap = 256;
    p->table = kiln_xmalloc((size_t)p->tcap * sizeof(uint32_t));
    memset(p->table, 0xff, (size_t)p->tcap * sizeof(uint32_t));
    p->vtcap = 64;
    p->vtable = kiln_xmalloc((size_t)p->vtcap * sizeof(uint32_t));
    memset(p->vtable, 0xff, (size_t)p->vtcap * sizeof(uint32_t));
    return p;
}

void sym_pool_free(sym_pool *p) {
    if (!p) return;
    for (uint32_t i = 0; i < p->nvars; i++) free(p->vars[i].name);
    free(p->vars);
    free(p->vtable);
    free(p->nodes);
    free(p->lo);
    free(p->hi);
    free(p->table);
    free(p);
}

const sym_node *sym_get(const sym_pool *p, sym_id s) { return (p && s < p->n) ? &p->nodes[s] : NULL; }
uint32_t sym_count(const sym_pool *p) { return p->n; }

static void check_id(const sym_pool *p, sym_id s) { KILN_ASSERT(s < p->n); }
static const sym_node *N(const sym_pool *p, sym_id s) { return &p->nodes[s]; }

sym_id sym_const(sym_pool *p, int64_t v) { return intern(p, SYM_CONST, v, SYM_NONE, SYM_NONE); }

int sym_is_const(const sym_pool *p, sym_id s, int64_t *v) {
    if (s >= p->n || p->nodes[s].kind != SYM_CONST) return 0;
    if (v) *v = p->nodes[s].c;
    return 1;
}

/* --------------------------------------------------------------- variables */

static uint64_t str_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

int sym_find_var(const sym_pool *p, const char *name) {
    if (!name) return -1;
    uint32_t mask = p->vtcap - 1, i = (uint32_t)str_hash(name) & mask;
    while (p->vtable[i] != EMPTY) {
        uint32_t v = p->vtable[i];
        if (strcmp(p->vars[v].name, name) == 0) return (int)v;
        i = (i + 1) & mask;
    }
    return -1;
}

static sym_id new_var(sym_pool *p, const char *name, int64_t lo, int64_t hi, sym_id bound) {
    KILN_ASSERT(p->nvars < (uint32_t)INT_MAX);
    if ((uint64_t)(p->nvars + 1) * 2 > p->vtcap) {
        uint32_t ncap = p->vtcap * 2;
        uint32_t *t = kiln_xmalloc((size_t)ncap * sizeof(uint32_t));
        memset(t, 0xff, (size_t)ncap * sizeof(uint32_t));
        for (uint32_t v = 0; v < p->nvars; v++) table_insert(t, ncap, str_hash(p->vars[v].name), v);
        free(p->vtable);
        p->vtable = t;
        p->vtcap = ncap;
    }
    KILN_GROW(p->vars, p->vcap, p->nvars + 1);
    uint32_t v = p->nvars++;
    p->vars[v].name = kiln_xstrdup(name);
    p->vars[v].lo = lo;
    p->vars[v].hi = hi;
    p->vars[v].bound = bound;
    table_insert(p->vtable, p->vtcap, str_hash(name), v);
    p->vars[v].node = intern(p, SYM_VAR, (int64_t)v, SYM_NONE, SYM_NONE);
    return p->vars[v].node;
}

sym_id sym_var(sym_pool *p, const char *name, int64_t lo, int64_t hi) {
    if (!name) return SYM_NONE;
    int v = sym_find_var(p, name);
    if (v >= 0) return p->vars[v].node; /* first declaration wins */
    lo = clampi(lo), hi = clampi(hi);
    if (lo > hi) return SYM_NONE;
    return new_var(p, name, lo, hi, SYM_NONE);
}

sym_id sym_var_bounded(sym_pool *p, const char *name, sym_id bound) {
    if (!name || bound == SYM_NONE) return SYM_NONE;
    check_id(p, bound);
    int v = sym_find_var(p, name);
    if (v >= 0) return p->vars[v].node;
    return new_var(p, name, 0, SYM_INF, bound);
}

uint32_t sym_var_count(const sym_pool *p) { return p->nvars; }
const char *sym_var_name(const sym_pool *p, uint32_t var) { return var < p->nvars ? p->vars[var].name : NULL; }
sym_id sym_var_node(const sym_pool *p, uint32_t var) { return var < p->nvars ? p->vars[var].node : SYM_NONE; }
sym_id sym_var_bound(const sym_pool *p, uint32_t var) { return var < p->nvars ? p->vars[var].bound : SYM_NONE; }
void sym_var_range(const sym_pool *p, uint32_t var, int64_t *lo, int64_t *hi) {
    if (var >= p->nvars) {
        *lo = -SYM_INF, *hi = SYM_INF;
        return;
    }
    sym_bounds(p, p->vars[var].node, lo, hi);
}

void sym_bounds(const sym_pool *p, sym_id s, int64_t *lo, int64_t *hi) {
    if (s >= p->n) {
        *lo = -SYM_INF, *hi = SYM_INF;
        return;
    }
    *lo = p->lo[s], *hi = p->hi[s];
}

int sym_prove_nonneg(const sym_pool *p, sym_id s) { return s < p->n && p->lo[s] >= 0; }

/* ------------------------------------------------------------ id vectors */

typedef struct idvec {
    sym_id *v;
    uint32_t n, cap;
} idvec;

static void iv_push(idvec *iv, sym_id x) {
    KILN_GROW(iv->v, iv->cap, iv->n + 1);
    iv->v[iv->n++] = x;
}
static int cmp_id(const void *a, const void *b) {
    sym_id x = *(const sym_id *)a, y = *(const sym_id *)b;
    return (x > y) - (x < y);
}

static void flatten_mul(const sym_pool *p, sym_id s, idvec *out) {
    while (N(p, s)->kind == SYM_MUL) {
        flatten_mul(p, N(p, s)->a, out);
        s = N(p, s)->b;
    }
    iv_push(out, s);
}

/* left-deep MUL over sorted atoms; SYM_NONE for the empty monomial (1) */
static sym_id mono_build(sym_pool *p, sym_id *f, uint32_t n) {
    if (n == 0) return SYM_NONE;
    qsort(f, n, sizeof(sym_id), cmp_id);
    sym_id acc = f[0];
    for (uint32_t i = 1; i < n; i++) acc = intern(p, SYM_MUL, 0, acc, f[i]);
    return acc;
}

static sym_id mono_mul(sym_pool *p, sym_id m1, sym_id m2) {
    idvec f = {0};
    flatten_mul(p, m1, &f);
    flatten_mul(p, m2, &f);
    sym_id r = mono_build(p, f.v, f.n);
    free(f.v);
    return r;
}

/* ------------------------------------------------------------ polynomials */

typedef struct sterm {
    int64_t c;
    sym_id m; /* canonical monomial */
} sterm;

typedef struct poly {
    int64_t c0;
    sterm *t;
    uint32_t n, cap;
} poly;

static void poly_free(poly *P) {
    free(P->t);
    memset(P, 0, sizeof(*P));
}
static void poly_push(poly *P, int64_t c, sym_id m) {
    if (c == 0) return;
    KILN_GROW(P->t, P->cap, P->n + 1);
    P->t[P->n].c = c;
    P->t[P->n].m = m;
    P->n++;
}
static int cmp_term(const void *a, const void *b) {
    sym_id x = ((const sterm *)a)->m, y = ((const sterm *)b)->m;
    return (x > y) - (x < y);
}
static void poly_norm(poly *P) {
    if (P->n > 1) qsort(P->t, P->n, sizeof(sterm), cmp_term);
    uint32_t w = 0;
    for (uint32_t i = 0; i < P->n;) {
        sym_id m = P->t[i].m;
        int64_t c = 0;
        while (i < P->n && P->t[i].m == m) c = wadd(c, P->t[i++].c);
        if (c != 0) P->t[w].c = c, P->t[w].m = m, w++;
    }
    P->n = w;
}
/* P += k * Q */
static void poly_addp(poly *P, const poly *Q, int64_t k) {
    P->c0 = wadd(P->c0, wmul(k, Q->c0));
    for (uint32_t i = 0; i < Q->n; i++) poly_push(P, wmul(k, Q->t[i].c), Q->t[i].m);
}
static void poly_mul(sym_pool *p, const poly *A, const poly *B, poly *out) {
    poly R = {0};
    R.c0 = wmul(A->c0, B->c0);
    for (uint32_t i = 0; i < A->n; i++) poly_push(&R, wmul(A->t[i].c, B->c0), A->t[i].m);
    for (uint32_t j = 0; j < B->n; j++) poly_push(&R, wmul(B->t[j].c, A->c0), B->t[j].m);
    for (uint32_t i = 0; i < A->n; i++)
        for (uint32_t j = 0; j < B->n; j++)
            poly_push(&R, wmul(A->t[i].c, B->t[j].c), mono_mul(p, A->t[i].m, B->t[j].m));
    poly_norm(&R);
    *out = R;
}

static sym_id term_node(sym_pool *p, int64_t c, sym_id m) {
    return c == 1 ? m : intern(p, SYM_MUL, 0, m, sym_const(p, c));
}

static sym_id poly_build(sym_pool *p, poly *P) {
    poly_norm(P);
    if (P->n == 0) return sym_const(p, P->c0);
    sym_id acc = term_node(p, P->t[0].c, P->t[0].m);
    for (uint32_t i = 1; i < P->n; i++) acc = intern(p, SYM_ADD, 0, acc, term_node(p, P->t[i].c, P->t[i].m));
    if (P->c0 != 0) acc = intern(p, SYM_ADD, 0, acc, sym_const(p, P->c0));
    return acc;
}

static void poly_bounds(const sym_pool *p, const poly *P, int64_t *lo, int64_t *hi) {
    int64_t l = clampi(P->c0), h = clampi(P->c0);
    for (uint32_t i = 0; i < P->n; i++) {
        int64_t tl, th;
        rng_mul(P->t[i].c, P->t[i].c, p->lo[P->t[i].m], p->hi[P->t[i].m], &tl, &th);
        l = sat_add_lo(l, tl);
        h = sat_add_hi(h, th);
    }
    *lo = l, *hi = h;
}

static void to_poly(sym_pool *p, sym_id s, int64_t k, poly *P);

/* P += k * product(ids) */
static void poly_of_factors(sym_pool *p, const sym_id *ids, uint32_t nids, int64_t k, poly *P) {
    idvec f = {0};
    for (uint32_t i = 0; i < nids; i++) flatten_mul(p, ids[i], &f);
    poly *fp = kiln_xcalloc(f.n, sizeof(poly));
    uint64_t size = 1;
    for (uint32_t i = 0; i < f.n; i++) {
        to_poly(p, f.v[i], 1, &fp[i]);
        poly_norm(&fp[i]);
        uint64_t sz = fp[i].n + (fp[i].c0 != 0);
        size = size * sz;
        if (size > EXPAND_CAP) size = EXPAND_CAP + 1;
        if (sz == 0) size = 0;
    }
    if (size == 0) {
        /* a zero factor: contributes nothing */
    } else if (size <= EXPAND_CAP) {
        poly acc = {0};
        acc.c0 = 1;
        for (uint32_t i = 0; i < f.n; i++) {
            poly r;
            poly_mul(p, &acc, &fp[i], &r);
            poly_free(&acc);
            acc = r;
        }
        poly_addp(P, &acc, k);
        poly_free(&acc);
    } else {
        /* too big to expand: keep the sums as opaque factors */
        int64_t coef = k;
        idvec atoms = {0};
        for (uint32_t i = 0; i < f.n; i++) {
            if (fp[i].n == 0) {
                coef = wmul(coef, fp[i].c0);
            } else if (fp[i].n == 1 && fp[i].c0 == 0) {
                coef = wmul(coef, fp[i].t[0].c);
                flatten_mul(p, fp[i].t[0].m, &atoms);
            } else {
                iv_push(&atoms, poly_build(p, &fp[i]));
            }
        }
        poly_push(P, coef, mono_build(p, atoms.v, atoms.n));
        free(atoms.v);
    }
    for (uint32_t i = 0; i < f.n; i++) poly_free(&fp[i]);
    free(fp);
    free(f.v);
}

/* P += k * s. Sums are left-deep, so walking the left spine in a loop keeps
 * the recursion depth independent of the number of terms. */
static void to_poly(sym_pool *p, sym_id s, int64_t k, poly *P) {
    for (;;) {
        const sym_node *nd = N(p, s);
        switch (nd->kind) {
        case SYM_CONST: P->c0 = wadd(P->c0, wmul(k, nd->c)); return;
        case SYM_ADD: {
            sym_id a = nd->a;
            to_poly(p, nd->b, k, P);
            s = a;
            continue;
        }
        case SYM_MUL: poly_of_factors(p, &s, 1, k, P); return;
        default: poly_push(P, k, s); return;
        }
    }
}

/* poly of b - a, and its bounds */
static void diff_bounds(sym_pool *p, sym_id a, sym_id b, int64_t *lo, int64_t *hi) {
    poly D = {0};
    to_poly(p, b, 1, &D);
    to_poly(p, a, -1, &D);
    poly_norm(&D);
    poly_bounds(p, &D, lo, hi);
    poly_free(&D);
}

/* ------------------------------------------------------ smart constructors */

#define NONE2(a, b)                                                                \
    do {                                                                           \
        if ((a) == SYM_NONE || (b) == SYM_NONE) return SYM_NONE;                   \
        check_id(p, (a));                                                          \
        check_id(p, (b));                                                          \
    } while (0)

sym_id sym_add(sym_pool *p, sym_id a, sym_id b) {
    NONE2(a, b);
    poly P = {0};
    to_poly(p, a, 1, &P);
    to_poly(p, b, 1, &P);
    sym_id r = poly_build(p, &P);
    poly_free(&P);
    return r;
}

sym_id sym_sub(sym_pool *p, sym_id a, sym_id b) {
    NONE2(a, b);
    poly P = {0};
    to_poly(p, a, 1, &P);
    to_poly(p, b, -1, &P);
    sym_id r = poly_build(p, &P);
    poly_free(&P);
    return r;
}

sym_id sym_neg(sym_pool *p, sym_id a) {
    if (a == SYM_NONE) return SYM_NONE;
    check_id(p, a);
    poly P = {0};
    to_poly(p, a, -1, &P);
    sym_id r = poly_build(p, &P);
    poly_free(&P);
    return r;
}

sym_id sym_mul(sym_pool *p, sym_id a, sym_id b) {
    NONE2(a, b);
    sym_id ids[2] = {a, b};
    poly P = {0};
    poly_of_factors(p, ids, 2, 1, &P);
    sym_id r = poly_build(p, &P);
    poly_free(&P);
    return r;
}

/* R += k*(B - 1)*rest, the symbolic upper bound of k*f*rest when 0 <= f < B */
static void add_bound_term(sym_pool *p, poly *U, int64_t k, sym_id B, const sym_id *rest, uint32_t nrest) {
    poly PB = {0}, PR = {0}, T;
    to_poly(p, B, 1, &PB);
    PB.c0 = wadd(PB.c0, -1);
    poly_norm(&PB);
    sym_id *tmp = kiln_xmalloc((nrest ? nrest : 1) * sizeof(sym_id));
    memcpy(tmp, rest, nrest * sizeof(sym_id));
    sym_id m = mono_build(p, tmp, nrest);
    free(tmp);
    if (m == SYM_NONE) PR.c0 = 1;
    else poly_push(&PR, 1, m);
    poly_mul(p, &PB, &PR, &T);
    poly_addp(U, &T, k);
    poly_free(&PB);
    poly_free(&PR);
    poly_free(&T);
}

/* 1 if 0 <= R < d provably. d must be provably >= 1. Besides plain intervals
 * this uses a symbolic upper bound U(R): a term k*f*rest with k > 0, rest >= 0
 * and f an index variable bounded by B (or f = y % B) is at most k*(B-1)*rest,
 * so e.g. i0 + s0*i1 < s0*s1 when i0 < s0 and i1 < s1. */
static int prove_in_range(sym_pool *p, const poly *R, sym_id d) {
    int64_t lo, hi;
    poly_bounds(p, R, &lo, &hi);
    if (lo < 0) return 0;
    if (hi < p->lo[d]) return 1;
    poly U = {0};
    U.c0 = R->c0;
    int ok = 1;
    idvec f = {0};
    for (uint32_t i = 0; i < R->n && ok; i++) {
        int64_t c = R->t[i].c;
        sym_id m = R->t[i].m;
        int done = 0;
        if (c > 0) {
            f.n = 0;
            flatten_mul(p, m, &f);
            for (uint32_t j = 0; j < f.n && !done; j++) {
                const sym_node *fn = N(p, f.v[j]);
                sym_id B = SYM_NONE;
                if (fn->kind == SYM_VAR && p->vars[fn->c].bound != SYM_NONE) B = p->vars[fn->c].bound;
                else if (fn->kind == SYM_MOD && p->lo[fn->b] >= 1) B = fn->b;
                if (B == SYM_NONE) continue;
                /* rest of the factors must be >= 0 */
                int64_t rl = 1, rh = 1;
                sym_id *rest = kiln_xmalloc(f.n * sizeof(sym_id));
                uint32_t nr = 0;
                for (uint32_t q = 0; q < f.n; q++) {
                    if (q == j) continue;
                    rest[nr++] = f.v[q];
                    rng_mul(rl, rh, p->lo[f.v[q]], p->hi[f.v[q]], &rl, &rh);
                }
                if (rl >= 0) {
                    add_bound_term(p, &U, c, B, rest, nr);
                    done = 1;
                }
                free(rest);
            }
        }
        if (!done) {
            int64_t tl, th;
            rng_mul(c, c, p->lo[m], p->hi[m], &tl, &th);
            if (th >= SYM_INF) ok = 0;
            else U.c0 = wadd(U.c0, th);
        }
    }
    free(f.v);
    if (ok) {
        /* d - 1 - U >= 0 */
        poly D = {0};
        to_poly(p, d, 1, &D);
        D.c0 = wadd(D.c0, -1);
        poly_addp(&D, &U, -1);
        poly_norm(&D);
        int64_t dl, dh;
        poly_bounds(p, &D, &dl, &dh);
        ok = dl >= 0;
        poly_free(&D);
    }
    poly_free(&U);
    return ok;
}

static sym_id div_const(sym_pool *p, sym_id x, int64_t d);
static sym_id mod_const(sym_pool *p, sym_id x, int64_t d);

/* Q + node */
static sym_id poly_plus_node(sym_pool *p, poly *Q, sym_id node) {
    poly_push(Q, 1, node);
    return poly_build(p, Q);
}

/* x = d*Q + R with Q taking every term whose coefficient is a multiple of d
 * and the constant normalised into [0, d) */
static void split_const(const poly *X, int64_t d, poly *Q, poly *R) {
    for (uint32_t i = 0; i < X->n; i++) {
        if (X->t[i].c % d == 0) poly_push(Q, X->t[i].c / d, X->t[i].m);
        else poly_push(R, X->t[i].c, X->t[i].m);
    }
    Q->c0 = fdiv(X->c0, d);
    R->c0 = fmod_(X->c0, d);
}

static int64_t poly_gcd(const poly *R, int64_t d) {
    uint64_t g = (uint64_t)d;
    g = gcd_u(g, mag(R->c0));
    for (uint32_t i = 0; i < R->n && g > 1; i++) g = gcd_u(g, mag(R->t[i].c));
    return (int64_t)g;
}

static void poly_divexact(poly *R, int64_t g) {
    R->c0 /= g;
    for (uint32_t i = 0; i < R->n; i++) R->t[i].c /= g;
}

/* floor(x / d), d >= 2 */
static sym_id div_const(sym_pool *p, sym_id x, int64_t d);

/* a divisor c of d (1 < c < d) that is the coefficient of a term of R and
 * splits R = c*Q + S with floor(S/c) one constant t over S's whole range:
 * then floor(R/c) = Q + t, which lets floor(R/d) = floor(floor(R/c)/(d/c))
 * and R mod d = c*((Q + t) mod (d/c)) + S - c*t (a channel shuffle's
 * (3136*i1 + 56*i2 + i3) / 12544 is i1 / 4). Returns 0 when no term's
 * coefficient does it; Q and S are then left empty. */
static int64_t staged_divisor(const sym_pool *p, const poly *R, int64_t d, poly *Q, poly *S, int64_t *t) {
    int64_t best = 0;
    for (uint32_t i = 0; i < R->n; i++) {
        int64_t c = R->t[i].c;
        if (c <= best || c >= d || c < 2 || d % c != 0) continue;
        poly q = {0}, s = {0};
        split_const(R, c, &q, &s);
        int64_t lo, hi;
        poly_bounds(p, &s, &lo, &hi);
        if (!is_inf(lo) && !is_inf(hi) && fdiv(lo, c) == fdiv(hi, c)) {
            poly_free(Q);
            poly_free(S);
            *Q = q;
            *S = s;
            *t = fdiv(lo, c);
            best = c;
        } else {
            poly_free(&q);
            poly_free(&s);
        }
    }
    return best;
}

/* floor(x / d), d >= 2 */
static sym_id div_const(sym_pool *p, sym_id x, int64_t d) {
    int64_t lo = p->lo[x], hi = p->hi[x];
    if (!is_inf(lo) && !is_inf(hi) && fdiv(lo, d) == fdiv(hi, d)) return sym_const(p, fdiv(lo, d));
    poly X = {0}, Q = {0}, R = {0};
    to_poly(p, x, 1, &X);
    poly_norm(&X);
    split_const(&X, d, &Q, &R);
    poly_free(&X);
    sym_id r;
    poly_bounds(p, &R, &lo, &hi);
    if (!is_inf(lo) && !is_inf(hi) && fdiv(lo, d) == fdiv(hi, d)) {
        Q.c0 = wadd(Q.c0, fdiv(lo, d));
        r = poly_build(p, &Q);
        goto out;
    }
    int64_t g = poly_gcd(&R, d);
    if (g > 1) {
        poly_divexact(&R, g);
        d /= g;
    }
    if (R.n == 1 && R.t[0].c == 1 && N(p, R.t[0].m)->kind == SYM_DIV) {
        /* floor((floor(y/a) + r)/d) = floor((y + r*a) / (a*d)) for a, d > 0 */
        const sym_node *in = N(p, R.t[0].m);
        int64_t a, ad, ra;
        if (sym_is_const(p, in->b, &a) && a > 0 && !__builtin_mul_overflow(a, d, &ad) &&
            !__builtin_mul_overflow(R.c0, a, &ra)) {
            sym_id y = in->a;
            sym_id inner = div_const(p, sym_add(p, y, sym_const(p, ra)), ad);
            r = poly_plus_node(p, &Q, inner);
            goto out;
        }
    }
    {
        poly q = {0}, s = {0};
        int64_t t = 0, c = staged_divisor(p, &R, d, &q, &s, &t);
        poly_free(&s);
        if (c) {
            /* floor(R/d) = floor((q + t) / (d/c)) */
            q.c0 = wadd(q.c0, t);
            sym_id inner = div_const(p, poly_build(p, &q), d / c);
            poly_free(&q);
            r = poly_plus_node(p, &Q, inner);
            goto out;
        }
    }
    r = poly_plus_node(p, &Q, intern(p, SYM_DIV, 0, poly_build(p, &R), sym_const(p, d)));
out:
    poly_free(&Q);
    poly_free(&R);
    return r;
}

/* x mod d, d >= 2 */
static sym_id mod_const(sym_pool *p, sym_id x, int64_t d) {
    int64_t lo = p->lo[x], hi = p->hi[x];
    if (!is_inf(lo) && !is_inf(hi) && fdiv(lo, d) == fdiv(hi, d))
        return sym_add(p, x, sym_const(p, wneg(wmul(fdiv(lo, d), d))));
    poly X = {0}, Q = {0}, R = {0};
    to_poly(p, x, 1, &X);
    poly_norm(&X);
    split_const(&X, d, &Q, &R);
    poly_free(&X);
    poly_free(&Q);
    sym_id r;
    poly_bounds(p, &R, &lo, &hi);
    if (!is_inf(lo) && !is_inf(hi) && fdiv(lo, d) == fdiv(hi, d)) {
        R.c0 = wadd(R.c0, wneg(wmul(fdiv(lo, d), d)));
        r = poly_build(p, &R);
        goto out;
    }
    int64_t g = poly_gcd(&R, d);
    if (g > 1) {
        /* (g*y) mod (g*k) = g * (y mod k) */
        poly_divexact(&R, g);
        sym_id inner = mod_const(p, poly_build(p, &R), d / g);
        r = sym_mul(p, inner, sym_const(p, g));
        goto out;
    }
    if (R.n == 1 && R.t[0].c == 1 && R.c0 == 0 && N(p, R.t[0].m)->kind == SYM_MOD) {
        /* (y mod a) mod d = y mod d when d divides a */
        const sym_node *in = N(p, R.t[0].m);
        int64_t a;
        if (sym_is_const(p, in->b, &a) && a > 0 && a % d == 0) {
            r = mod_const(p, in->a, d);
            goto out;
        }
    }
    {
        poly q = {0}, s = {0};
        int64_t t = 0, c = staged_divisor(p, &R, d, &q, &s, &t);
        if (c) {
            /* R mod d = c*((q + t) mod (d/c)) + s - c*t */
            q.c0 = wadd(q.c0, t);
            sym_id inner = mod_const(p, poly_build(p, &q), d / c);
            s.c0 = wadd(s.c0, wneg(wmul(c, t)));
            r = sym_add(p, sym_mul(p, inner, sym_const(p, c)), poly_build(p, &s));
            poly_free(&q);
            poly_free(&s);
            goto out;
        }
    }
    r = intern(p, SYM_MOD, 0, poly_build(p, &R), sym_const(p, d));
out:
    poly_free(&R);
    return r;
}

/* x = D*A + R for a divisor D of several terms (pos + seq): while a term
 * of R is a multiple of D's first term, move that multiple of D into A (the
 * identity x = D*A + R holds after every step, so the result is exact
 * whatever it proves); 0 when the steps do not end within a few rounds */
static int divide_poly(sym_pool *p, const poly *X, const poly *D, poly *A, poly *R) {
    if (D->n < 2 || D->t[0].c < 1) return 0;
    int64_t k = D->t[0].c;
    idvec fd = {0}, fm = {0}, rest = {0};
    flatten_mul(p, D->t[0].m, &fd);
    qsort(fd.v, fd.n, sizeof(sym_id), cmp_id);
    poly_addp(R, X, 1);
    poly_norm(R);
    int done = 0;
    for (int round = 0; round < 16 && !done; round++) {
        int found = 0;
        for (uint32_t i = 0; i < R->n && !found; i++) {
            if (R->t[i].c % k != 0) continue;
            fm.n = rest.n = 0;
            flatten_mul(p, R->t[i].m, &fm);
            qsort(fm.v, fm.n, sizeof(sym_id), cmp_id);
            uint32_t a = 0;
            for (uint32_t q = 0; q < fm.n; q++) {
                if (a < fd.n && fd.v[a] == fm.v[q]) a++;
                else iv_push(&rest, fm.v[q]);
            }
            if (a != fd.n) continue;
            poly Q = {0}, QD;
            sym_id m = mono_build(p, rest.v, rest.n);
            if (m == SYM_NONE) Q.c0 = R->t[i].c / k;
            else poly_push(&Q, R->t[i].c / k, m);
            poly_mul(p, &Q, D, &QD);
            poly_addp(A, &Q, 1);
            poly_addp(R, &QD, -1);
            poly_norm(R);
            poly_free(&Q);
            poly_free(&QD);
            found = 1;
        }
        done = !found;
    }
    free(fd.v);
    free(fm.v);
    free(rest.v);
    poly_norm(A);
    return done;
}

/* x = d*A + R where d = k*md is a monomial and A takes the terms that have d
 * as a factor; d must be provably >= 1 */
static sym_id divmod_sym(sym_pool *p, sym_id x, sym_id d, int is_mod) {
    if (x == d) return sym_const(p, is_mod ? 0 : 1);
    poly X = {0}, D = {0}, A = {0}, R = {0};
    to_poly(p, x, 1, &X);
    poly_norm(&X);
    to_poly(p, d, 1, &D);
    poly_norm(&D);
    if (D.n == 1 && D.c0 == 0 && D.t[0].c >= 1) {
        int64_t k = D.t[0].c;
        idvec fd = {0}, fm = {0}, rest = {0};
        flatten_mul(p, D.t[0].m, &fd);
        qsort(fd.v, fd.n, sizeof(sym_id), cmp_id);
        for (uint32_t i = 0; i < X.n; i++) {
            int64_t c = X.t[i].c;
            int taken = 0;
            if (c % k == 0) {
                fm.n = rest.n = 0;
                flatten_mul(p, X.t[i].m, &fm);
                qsort(fm.v, fm.n, sizeof(sym_id), cmp_id);
                /* multiset inclusion fd <= fm, rest = fm - fd */
                uint32_t a = 0;
                for (uint32_t q = 0; q < fm.n; q++) {
                    if (a < fd.n && fd.v[a] == fm.v[q]) a++;
                    else iv_push(&rest, fm.v[q]);
                }
                if (a == fd.n) {
                    sym_id m = mono_build(p, rest.v, rest.n);
                    if (m == SYM_NONE) A.c0 = wadd(A.c0, c / k);
                    else poly_push(&A, c / k, m);
                    taken = 1;
                }
            }
            if (!taken) poly_push(&R, c, X.t[i].m);
        }
        R.c0 = X.c0;
        free(fd.v);
        free(fm.v);
        free(rest.v);
    } else if (!divide_poly(p, &X, &D, &A, &R)) {
        poly_free(&A);
        poly_free(&R);
        memset(&A, 0, sizeof A);
        poly_addp(&R, &X, 1);
    }
    sym_id r;
    if (prove_in_range(p, &R, d)) {
        r = is_mod ? poly_build(p, &R) : poly_build(p, &A);
    } else if (is_mod) {
        r = intern(p, SYM_MOD, 0, poly_build(p, &R), d);
    } else {
        r = poly_plus_node(p, &A, intern(p, SYM_DIV, 0, poly_build(p, &R), d));
    }
    poly_free(&X);
    poly_free(&D);
    poly_free(&A);
    poly_free(&R);
    return r;
}

sym_id sym_div(sym_pool *p, sym_id a, sym_id b) {
    NONE2(a, b);
    int64_t x, d;
    int ac = sym_is_const(p, a, &x), bc = sym_is_const(p, b, &d);
    if (ac && bc) return sym_const(p, fdiv(x, d));
    if (ac && x == 0) return a;
    if (bc) {
        if (d == 0) return sym_const(p, 0);
        if (d == 1) return a;
        if (d == INT64_MIN) return intern(p, SYM_DIV, 0, a, b);
        if (d < 0) return sym_div(p, sym_neg(p, a), sym_const(p, -d)); /* floor(x/d) = floor(-x/-d) */
        return div_const(p, a, d);
    }
    if (p->lo[b] >= 1) return divmod_sym(p, a, b, 0);
    if (p->hi[b] <= -1) return sym_div(p, sym_neg(p, a), sym_neg(p, b));
    return intern(p, SYM_DIV, 0, a, b);
}

sym_id sym_mod(sym_pool *p, sym_id a, sym_id b) {
    NONE2(a, b);
    int64_t x, d;
    int ac = sym_is_const(p, a, &x), bc = sym_is_const(p, b, &d);
    if (ac && bc) return sym_const(p, fmod_(x, d));
    if (ac && x == 0) return a;
    if (bc) {
        if (d == 0 || d == 1 || d == -1) return sym_const(p, 0);
        if (d == INT64_MIN) return intern(p, SYM_MOD, 0, a, b);
        /* x mod d = -((-x) mod -d) */
        if (d < 0) return sym_neg(p, sym_mod(p, sym_neg(p, a), sym_const(p, -d)));
        return mod_const(p, a, d);
    }
    if (p->lo[b] >= 1) return divmod_sym(p, a, b, 1);
    if (p->hi[b] <= -1) return sym_neg(p, sym_mod(p, sym_neg(p, a), sym_neg(p, b)));
    return intern(p, SYM_MOD, 0, a, b);
}

sym_id sym_min(sym_pool *p, sym_id a, sym_id b) {
    NONE2(a, b);
    if (a == b) return a;
    int64_t lo, hi;
    diff_bounds(p, a, b, &lo, &hi); /* of b - a */
    if (lo >= 0) return a;
    if (hi <= 0) return b;
    return a < b ? intern(p, SYM_MIN, 0, a, b) : intern(p, SYM_MIN, 0, b, a);
}

sym_id sym_max(sym_pool *p, sym_id a, sym_id b) {
    NONE2(a, b);
    if (a == b) return a;
    int64_t lo, hi;
    diff_bounds(p, a, b, &lo, &hi);
    if (lo >= 0) return b;
    if (hi <= 0) return a;
    return a < b ? intern(p, SYM_MAX, 0, a, b) : intern(p, SYM_MAX, 0, b, a);
}

sym_id sym_lt(sym_pool *p, sym_id a, sym_id b) {
    NONE2(a, b);
    if (a == b) return sym_const(p, 0);
    int64_t lo, hi;
    diff_bounds(p, a, b, &lo, &hi);
    if (lo >= 1) return sym_const(p, 1);
    if (hi <= 0) return sym_const(p, 0);
    return intern(p, SYM_LT, 0, a, b);
}

sym_id sym_le(sym_pool *p, sym_id a, sym_id b) {
    NONE2(a, b);
    int64_t v;
    if (sym_is_const(p, b, &v) && v == INT64_MAX) return sym_const(p, 1);
    return sym_lt(p, a, sym_add(p, b, sym_const(p, 1)));
}

/* x as 0/1 */
static sym_id to_bool(sym_pool *p, sym_id x) {
    if (p->lo[x] >= 0 && p->hi[x] <= 1) return x;
    sym_id one = sym_const(p, 1);
    return x < one ? intern(p, SYM_AND, 0, x, one) : intern(p, SYM_AND, 0, one, x);
}

sym_id sym_and(sym_pool *p, sym_id a, sym_id b) {
    NONE2(a, b);
    int ta = rng_truth(p->lo[a], p->hi[a]), tb = rng_truth(p->lo[b], p->hi[b]);
    if (ta == 0 || tb == 0) return sym_const(p, 0);
    if (ta == 1 && tb == 1) return sym_const(p, 1);
    if (ta == 1) return to_bool(p, b);
    if (tb == 1) return to_bool(p, a);
    if (a == b) return to_bool(p, a);
    return a < b ? intern(p, SYM_AND, 0, a, b) : intern(p, SYM_AND, 0, b, a);
}

sym_id sym_raw(sym_pool *p, sym_kind k, sym_id a, sym_id b) {
    if (k <= SYM_VAR || k >= SYM_KIND_COUNT) return SYM_NONE;
    if (a >= p->n || b >= p->n) return SYM_NONE;
    return intern(p, k, 0, a, b);
}

/* ------------------------------------------------------ rebuild and subst */

typedef struct idmap {
    uint32_t *k, *v;
    uint32_t cap, n;
} idmap;

static uint32_t im_slot(const idmap *m, uint32_t key) {
    uint32_t mask = m->cap - 1, i = (uint32_t)(kiln_hash_mix(0, key) >> 7) & mask;
    while (m->k[i] != EMPTY && m->k[i] != key) i = (i + 1) & mask;
    return i;
}
static uint32_t im_get(const idmap *m, uint32_t key) {
    if (m->cap == 0) return EMPTY;
    uint32_t i = im_slot(m, key);
    return m->k[i] == key ? m->v[i] : EMPTY;
}
static void im_put(idmap *m, uint32_t key, uint32_t val) {
    if ((m->n + 1) * 2 > m->cap) {
        idmap o = *m;
        m->cap = o.cap ? o.cap * 2 : 64;
        m->k = kiln_xmalloc(m->cap * sizeof(uint32_t));
        m->v = kiln_xmalloc(m->cap * sizeof(uint32_t));
        memset(m->k, 0xff, m->cap * sizeof(uint32_t));
        m->n = 0;
        for (uint32_t i = 0; i < o.cap; i++)
            if (o.k[i] != EMPTY) im_put(m, o.k[i], o.v[i]);
        free(o.k);
        free(o.v);
    }
    uint32_t i = im_slot(m, key);
    if (m->k[i] == EMPTY) m->n++;
    m->k[i] = key;
    m->v[i] = val;
}

static sym_id rebuild(sym_pool *p, sym_id s, const sym_id *map, uint32_t nvars, idmap *memo) {
    const sym_node *nd = N(p, s);
    if (nd->kind == SYM_CONST) return s;
    if (nd->kind == SYM_VAR) {
        uint32_t v = (uint32_t)nd->c;
        if (map && v < nvars && map[v] != SYM_NONE) return map[v];
        return s;
    }
    sym_id got = im_get(memo, s);
    if (got != EMPTY) return got;
    sym_kind k = nd->kind;
    sym_id a0 = nd->a, b0 = nd->b;
    if (k == SYM_ADD) {
        /* a whole left-deep sum at once: no recursion along the spine */
        poly P = {0};
        sym_id cur = s;
        while (N(p, cur)->kind == SYM_ADD && (cur == s || im_get(memo, cur) == EMPTY)) {
            sym_id right = N(p, cur)->b, left = N(p, cur)->a;
            to_poly(p, rebuild(p, right, map, nvars, memo), 1, &P);
            cur = left;
        }
        to_poly(p, rebuild(p, cur, map, nvars, memo), 1, &P);
        sym_id r = poly_build(p, &P);
        poly_free(&P);
        im_put(memo, s, r);
        return r;
    }
    sym_id a = rebuild(p, a0, map, nvars, memo);
    sym_id b = rebuild(p, b0, map, nvars, memo);
    sym_id r = sym_build(p, k, a, b);
    if (r == SYM_NONE) r = s;
    im_put(memo, s, r);
    return r;
}

sym_id sym_simplify(sym_pool *p, sym_id s) {
    if (s == SYM_NONE) return SYM_NONE;
    check_id(p, s);
    idmap memo = {0};
    sym_id r = rebuild(p, s, NULL, 0, &memo);
    free(memo.k);
    free(memo.v);
    return r;
}

sym_id sym_subst(sym_pool *p, sym_id s, const sym_id *map, uint32_t nvars) {
    if (s == SYM_NONE) return SYM_NONE;
    check_id(p, s);
    for (uint32_t i = 0; i < nvars; i++)
        if (map[i] != SYM_NONE) check_id(p, map[i]);
    idmap memo = {0};
    sym_id r = rebuild(p, s, map, nvars, &memo);
    free(memo.k);
    free(memo.v);
    return r;
}

sym_id sym_subst_var(sym_pool *p, sym_id s, sym_id var, sym_id with) {
    uint32_t nv = sym_var_count(p);
    sym_id *map = kiln_xmalloc(((size_t)nv + 1) * sizeof *map);
    for (uint32_t i = 0; i < nv; i++) map[i] = SYM_NONE;
    map[N(p, var)->c] = with;
    sym_id r = sym_subst(p, s, map, nv);
    free(map);
    return r;
}

sym_id sym_step(sym_pool *p, sym_id s, sym_id var) {
    return sym_sub(p, sym_subst_var(p, s, var, sym_add(p, var, sym_const(p, 1))), s);
}

/* -------------------------------------------------------------- evaluation */

static int eval_rec(const sym_pool *p, sym_id s, const int64_t *values, const uint8_t *bound, int64_t *out,
                    uint32_t *missing) {
    const sym_node *nd = N(p, s);
    int64_t a, b;
    switch (nd->kind) {
    case SYM_CONST: *out = nd->c; return 0;
    case SYM_VAR: {
        uint32_t v = (uint32_t)nd->c;
        if (bound && !bound[v]) {
            if (missing) *missing = v;
            return -1;
        }
        *out = values[v];
        return 0;
    }
    case SYM_ADD: {
        /* left-deep sums iterate along the spine */
        int64_t acc = 0;
        while (N(p, s)->kind == SYM_ADD) {
            if (eval_rec(p, N(p, s)->b, values, bound, &b, missing) < 0) return -1;
            acc = wadd(acc, b);
            s = N(p, s)->a;
        }
        if (eval_rec(p, s, values, bound, &a, missing) < 0) return -1;
        *out = wadd(acc, a);
        return 0;
    }
    default: break;
    }
    if (eval_rec(p, nd->a, values, bound, &a, missing) < 0) return -1;
    if (eval_rec(p, nd->b, values, bound, &b, missing) < 0) return -1;
    switch (nd->kind) {
    case SYM_ADD: *out = wadd(a, b); break;
    case SYM_MUL: *out = wmul(a, b); break;
    case SYM_DIV: *out = fdiv(a, b); break;
    case SYM_MOD: *out = fmod_(a, b); break;
    case SYM_MIN: *out = min64(a, b); break;
    case SYM_MAX: *out = max64(a, b); break;
    case SYM_LT: *out = a < b; break;
    case SYM_AND: *out = (a != 0 && b != 0); break;
    default: KILN_ASSERT(0 && "bad sym kind");
    }
    return 0;
}

int sym_eval(const sym_pool *p, sym_id s, const int64_t *values, const uint8_t *bound, int64_t *out,
             uint32_t *missing_var) {
    if (s >= p->n) return -1;
    int64_t v = 0;
    if (eval_rec(p, s, values, bound, &v, missing_var) < 0) return -1;
    *out = v;
    return 0;
}

/* ---------------------------------------------------------------- printing */

typedef struct writer {
    char *buf;
    size_t cap, len;
} writer;

static void w_str(writer *w, const char *s) {
    for (; *s; s++) {
        if (w->len + 1 < w->cap) w->buf[w->len] = *s;
        w->len++;
    }
}
static void w_i64(writer *w, int64_t v) {
    char tmp[32];
    if (v == INT64_MIN) {
        w_str(w, "(-9223372036854775807 - 1)");
        return;
    }
    snprintf(tmp, sizeof(tmp), "%lld", (long long)v);
    w_str(w, tmp);
}

static void print_rec(const sym_pool *p, sym_id s, writer *w);

/* the " + b" part of a sum; a + (-k)*m and a + (-k) read better as minus */
static void print_add_tail(const sym_pool *p, const sym_node *nd, writer *w) {
    const sym_node *b = N(p, nd->b);
    int64_t k;
    if (b->kind == SYM_CONST && b->c < 0 && b->c != INT64_MIN) {
        w_str(w, " - ");
        w_i64(w, -b->c);
    } else if (b->kind == SYM_MUL && sym_is_const(p, b->b, &k) && k < 0 && k != INT64_MIN) {
        w_str(w, " - ");
        if (k != -1) w_str(w, "(");
        print_rec(p, b->a, w);
        if (k != -1) {
            w_str(w, " * ");
            w_i64(w, -k);
            w_str(w, ")");
        }
    } else {
        w_str(w, " + ");
        print_rec(p, nd->b, w);
    }
}

static void print_rec(const sym_pool *p, sym_id s, writer *w) {
    const sym_node *nd = N(p, s);
    const char *op = NULL;
    switch (nd->kind) {
    case SYM_CONST: w_i64(w, nd->c); return;
    case SYM_VAR: w_str(w, p->vars[nd->c].name); return;
    case SYM_MIN:
    case SYM_MAX:
    case SYM_AND:
        w_str(w, nd->kind == SYM_MIN ? "min(" : nd->kind == SYM_MAX ? "max(" : "and(");
        print_rec(p, nd->a, w);
        w_str(w, ", ");
        print_rec(p, nd->b, w);
        w_str(w, ")");
        return;
    case SYM_ADD: {
        /* a left-deep sum prints flat, "(t0 + t1 - t2 + t3)": + and - are
         * left-associative, so this parses back to the same sum, and neither
         * printing nor parsing recurses along the spine */
        idvec spine = {0};
        sym_id cur = s;
        while (N(p, cur)->kind == SYM_ADD) {
            iv_push(&spine, cur);
            cur = N(p, cur)->a;
        }
        w_str(w, "(");
        print_rec(p, cur, w);
        for (uint32_t i = spine.n; i-- > 0;) print_add_tail(p, N(p, spine.v[i]), w);
        w_str(w, ")");
        free(spine.v);
        return;
    }
    case SYM_MUL: op = " * "; break;
    case SYM_DIV: op = " / "; break;
    case SYM_MOD: op = " % "; break;
    case SYM_LT: op = " < "; break;
    default: KILN_ASSERT(0 && "bad sym kind");
    }
    w_str(w, "(");
    print_rec(p, nd->a, w);
    w_str(w, op);
    print_rec(p, nd->b, w);
    w_str(w, ")");
}

int sym_print(const sym_pool *p, sym_id s, char *buf, size_t cap) {
    writer w = {buf, buf ? cap : 0, 0};
    if (s == SYM_NONE || s >= p->n) w_str(&w, "<none>");
    else print_rec(p, s, &w);
    if (w.cap) buf[w.len < w.cap ? w.len : w.cap - 1] = '\0';
    return w.len > (size_t)INT_MAX ? INT_MAX : (int)w.len;
}

/* ----------------------------------------------------------------- parsing */

typedef struct parser {
    sym_pool *p;
    const char *s;
    size_t pos;
    char *err;
    size_t errcap;
    int failed;
    int depth;
} parser;

static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static void skip_ws(parser *ps) {
    while (ps->s[ps->pos] == ' ' || ps->s[ps->pos] == '\t' || ps->s[ps->pos] == '\n' || ps->s[ps->pos] == '\r')
        ps->pos++;
}

static sym_id perr(parser *ps, const char *what) {
    if (!ps->failed && ps->err && ps->errcap) {
        char c = ps->s[ps->pos];
        unsigned long col = (unsigned long)ps->pos + 1;
        if (what) snprintf(ps->err, ps->errcap, "sym: %s at column %lu", what, col);
        else if (c == '\0') snprintf(ps->err, ps->errcap, "sym: unexpected end of input at column %lu", col);
        else if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f)
            snprintf(ps->err, ps->errcap, "sym: unexpected '%c' at column %lu", c, col);
        else snprintf(ps->err, ps->errcap, "sym: unexpected byte 0x%02x at column %lu", (unsigned)(unsigned char)c, col);
    }
    ps->failed = 1;
    return SYM_NONE;
}

static int expect(parser *ps, char c) {
    skip_ws(ps);
    if (ps->s[ps->pos] != c) {
        perr(ps, NULL);
        return 0;
    }
    ps->pos++;
    return 1;
}

static sym_id parse_cmp(parser *ps);

static sym_id parse_primary(parser *ps) {
    skip_ws(ps);
    char c = ps->s[ps->pos];
    if (is_digit(c)) {
        uint64_t v = 0;
        size_t start = ps->pos;
        while (is_digit(ps->s[ps->pos])) {
            uint64_t dgt = (uint64_t)(ps->s[ps->pos] - '0');
            if (v > ((uint64_t)INT64_MAX - dgt) / 10) {
                ps->pos = start;
                return perr(ps, "integer too large");
            }
            v = v * 10 + dgt;
            ps->pos++;
        }
        return sym_const(ps->p, (int64_t)v);
    }
    if (is_alpha(c)) {
        size_t start = ps->pos;
        while (is_alpha(ps->s[ps->pos]) || is_digit(ps->s[ps->pos])) ps->pos++;
        size_t len = ps->pos - start;
        size_t save = ps->pos;
        skip_ws(ps);
        if (ps->s[ps->pos] == '(') {
            int fn = -1;
            if (len == 3 && !strncmp(ps->s + start, "min", 3)) fn = SYM_MIN;
            else if (len == 3 && !strncmp(ps->s + start, "max", 3)) fn = SYM_MAX;
            else if (len == 3 && !strncmp(ps->s + start, "and", 3)) fn = SYM_AND;
            if (fn < 0) {
                ps->pos = start;
                return perr(ps, "unknown function");
            }
            ps->pos++;
            sym_id a = parse_cmp(ps);
            if (ps->failed || !expect(ps, ',')) return SYM_NONE;
            sym_id b = parse_cmp(ps);
            if (ps->failed || !expect(ps, ')')) return SYM_NONE;
            return fn == SYM_MIN ? sym_min(ps->p, a, b) : fn == SYM_MAX ? sym_max(ps->p, a, b) : sym_and(ps->p, a, b);
        }
        ps->pos = save;
        char *name = kiln_xmalloc(len + 1);
        memcpy(name, ps->s + start, len);
        name[len] = '\0';
        int v = sym_find_var(ps->p, name);
        sym_id r = v >= 0 ? sym_var_node(ps->p, (uint32_t)v) : sym_var(ps->p, name, 1, SYM_INF);
        free(name);
        return r;
    }
    if (c == '(') {
        ps->pos++;
        sym_id r = parse_cmp(ps);
        if (ps->failed || !expect(ps, ')')) return SYM_NONE;
        return r;
    }
    return perr(ps, NULL);
}

static sym_id parse_unary(parser *ps) {
    skip_ws(ps);
    if (ps->depth > PARSE_MAX_DEPTH) return perr(ps, "expression nested too deeply");
    ps->depth++;
    sym_id r;
    if (ps->s[ps->pos] == '-') {
        ps->pos++;
        sym_id a = parse_unary(ps);
        r = ps->failed ? SYM_NONE : sym_neg(ps->p, a);
    } else {
        r = parse_primary(ps);
    }
    ps->depth--;
    return r;
}

static sym_id parse_term(parser *ps) {
    sym_id a = parse_unary(ps);
    while (!ps->failed) {
        skip_ws(ps);
        char c = ps->s[ps->pos];
        if (c != '*' && c != '/' && c != '%') break;
        ps->pos++;
        sym_id b = parse_unary(ps);
        if (ps->failed) break;
        a = c == '*' ? sym_mul(ps->p, a, b) : c == '/' ? sym_div(ps->p, a, b) : sym_mod(ps->p, a, b);
    }
    return ps->failed ? SYM_NONE : a;
}

/* terms accumulate in one polynomial, so a long flat sum costs O(n log n) */
static sym_id parse_sum(parser *ps) {
    sym_id a = parse_term(ps);
    if (ps->failed) return SYM_NONE;
    poly P = {0};
    to_poly(ps->p, a, 1, &P);
    int nterms = 1;
    while (!ps->failed) {
        skip_ws(ps);
        char c = ps->s[ps->pos];
        if (c != '+' && c != '-') break;
        ps->pos++;
        sym_id b = parse_term(ps);
        if (ps->failed) break;
        to_poly(ps->p, b, c == '+' ? 1 : -1, &P);
        nterms++;
    }
    sym_id r = ps->failed ? SYM_NONE : nterms == 1 ? a : poly_build(ps->p, &P);
    poly_free(&P);
    return r;
}

static sym_id parse_cmp(parser *ps) {
    sym_id a = parse_sum(ps);
    if (ps->failed) return SYM_NONE;
    skip_ws(ps);
    if (ps->s[ps->pos] == '<') {
        ps->pos++;
        int le = 0;
        if (ps->s[ps->pos] == '=') ps->pos++, le = 1;
        sym_id b = parse_sum(ps);
        if (ps->failed) return SYM_NONE;
        return le ? sym_le(ps->p, a, b) : sym_lt(ps->p, a, b);
    }
    return a;
}

sym_id sym_parse(sym_pool *p, const char *text, char *err, size_t errcap) {
    if (err && errcap) err[0] = '\0';
    if (!text) {
        if (err && errcap) snprintf(err, errcap, "sym: no input");
        return SYM_NONE;
    }
    parser ps = {p, text, 0, err, errcap, 0, 0};
    sym_id r = parse_cmp(&ps);
    if (ps.failed) return SYM_NONE;
    skip_ws(&ps);
    if (ps.s[ps.pos] != '\0') return perr(&ps, NULL);
    if (r == SYM_NONE) {
        if (err && errcap) snprintf(err, errcap, "sym: invalid expression");
        return SYM_NONE;
    }
    return r;
}

sym_id sym_build(sym_pool *p, sym_kind k, sym_id a, sym_id b) {
    switch (k) {
    case SYM_ADD: return sym_add(p, a, b);
    case SYM_MUL: return sym_mul(p, a, b);
    case SYM_DIV: return sym_div(p, a, b);
    case SYM_MOD: return sym_mod(p, a, b);
    case SYM_MIN: return sym_min(p, a, b);
    case SYM_MAX: return sym_max(p, a, b);
    case SYM_LT: return sym_lt(p, a, b);
    case SYM_AND: return sym_and(p, a, b);
    default: return SYM_NONE;
    }
}

int sym_uses_var(const sym_pool *p, sym_id s, sym_id var) {
    if (s == SYM_NONE) return 0;
    if (s == var) return 1;
    const sym_node *n = sym_get(p, s);
    if (n->kind == SYM_CONST || n->kind == SYM_VAR) return 0;
    return sym_uses_var(p, n->a, var) || sym_uses_var(p, n->b, var);
}

sym_id sym_transfer(const sym_pool *from, sym_id s, sym_pool *to, sym_id *memo) {
    if (s == SYM_NONE) return SYM_NONE;
    if (memo[s] != SYM_NONE) return memo[s];
    const sym_node *n = sym_get(from, s);
    sym_id a = n->a != SYM_NONE ? sym_transfer(from, n->a, to, memo) : SYM_NONE;
    sym_id b = n->b != SYM_NONE ? sym_transfer(from, n->b, to, memo) : SYM_NONE, r;
    switch (n->kind) {
    case SYM_CONST: r = sym_const(to, n->c); break;
    case SYM_VAR: {
        int64_t lo, hi;
        sym_bounds(from, s, &lo, &hi);
        r = sym_var(to, sym_var_name(from, (uint32_t)n->c), lo, hi);
        break;
    }
    default: r = sym_build(to, n->kind, a, b); break;
    }
    return memo[s] = r;
}

sym_id *sym_transfer_begin(const sym_pool *from, sym_pool *to) {
    uint32_t ns = sym_count(from);
    sym_id *memo = kiln_xmalloc(sizeof(sym_id) * (ns ? ns : 1));
    for (uint32_t i = 0; i < ns; i++) memo[i] = SYM_NONE;
    for (uint32_t v = 0; v < sym_var_count(from); v++) sym_transfer(from, sym_var_node(from, v), to, memo);
    return memo;
}
