/* test_sym.c — symbolic integer expressions.
 *
 * The core check is differential: thousands of random expressions are built
 * with sym_raw (no simplification) and evaluated by a naive evaluator written
 * here from the documented semantics (floor division, matching modulo, x/0 =
 * x%0 = 0); the simplified form (sym_simplify) must give the same value under
 * random bindings that respect the variable ranges, and that value must lie
 * within sym_bounds. Samples whose reference evaluation leaves +-2^40 are
 * skipped (simplification is only claimed exact without overflow). Further
 * cases pin canonical forms (equal ids), parse/print round trips, parse errors
 * and pool behaviour.
 */
#include "sym.h"

#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------- helpers */

static uint64_t rng_s = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void) {
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return rng_s;
}
static int64_t rint_in(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

#define LIMIT (INT64_C(1) << 40)

/* reference floor division written independently of the library: normalise
 * the divisor to positive, then round towards -inf by hand */
static int64_t ref_div(int64_t a, int64_t b) {
    if (b == 0) return 0;
    if (b < 0) a = -a, b = -b;
    if (a >= 0) return a / b;
    return -((-a + b - 1) / b);
}
static int64_t ref_mod(int64_t a, int64_t b) {
    if (b == 0) return 0;
    return a - b * ref_div(a, b);
}

/* naive evaluation over the raw tree; sets *big when a value leaves +-LIMIT */
static int64_t naive(const sym_pool *p, sym_id s, const int64_t *v, int *big) {
    const sym_node *n = sym_get(p, s);
    if (*big) return 0;
    if (n->kind == SYM_CONST) return n->c;
    if (n->kind == SYM_VAR) return v[n->c];
    int64_t a = naive(p, n->a, v, big), b = naive(p, n->b, v, big), r = 0;
    if (*big) return 0;
    switch (n->kind) {
    case SYM_ADD: r = a + b; break;
    case SYM_MUL:
        if (__builtin_mul_overflow(a, b, &r)) *big = 1;
        break;
    case SYM_DIV: r = ref_div(a, b); break;
    case SYM_MOD: r = ref_mod(a, b); break;
    case SYM_MIN: r = a < b ? a : b; break;
    case SYM_MAX: r = a > b ? a : b; break;
    case SYM_LT: r = a < b ? 1 : 0; break;
    case SYM_AND: r = (a != 0 && b != 0) ? 1 : 0; break;
    default: *big = 1; break;
    }
    if (r > LIMIT || r < -LIMIT) *big = 1;
    return r;
}

static int in_bounds(int64_t v, int64_t lo, int64_t hi) {
    return (lo <= -SYM_INF || v >= lo) && (hi >= SYM_INF || v <= hi) && lo <= hi;
}

/* ------------------------------------------------------ random generator */

typedef struct gen {
    sym_id leaves[16];
    int nleaves;
    sym_id divs[16]; /* extra symbolic divisors */
    int ndivs;
} gen;

static sym_id rconst(sym_pool *p, int64_t lo, int64_t hi) { return sym_const(p, rint_in(lo, hi)); }

static sym_id gen_expr(sym_pool *p, const gen *g, int depth) {
    if (depth == 0 || rnd() % 5 == 0) {
        if (rnd() % 4 == 0) return rconst(p, -9, 9);
        return g->leaves[rnd() % (uint64_t)g->nleaves];
    }
    sym_id a = gen_expr(p, g, depth - 1);
    switch (rnd() % 11) {
    case 0:
    case 1: return sym_raw(p, SYM_ADD, a, gen_expr(p, g, depth - 1));
    case 2: /* a - b */
        return sym_raw(p, SYM_ADD, a, sym_raw(p, SYM_MUL, gen_expr(p, g, depth - 1), sym_const(p, -1)));
    case 3:
        if (rnd() % 2) return sym_raw(p, SYM_MUL, a, rconst(p, -4, 9));
        return sym_raw(p, SYM_MUL, a, gen_expr(p, g, depth - 1));
    case 4:
    case 5: {
        static const int64_t dv[] = {-3, -2, -1, 0, 1, 2, 3, 4, 5, 8, 16};
        sym_id d;
        uint64_t r = rnd() % 4;
        if (r < 2) d = sym_const(p, dv[rnd() % (sizeof dv / sizeof dv[0])]);
        else if (r == 2 && g->ndivs) d = g->divs[rnd() % (uint64_t)g->ndivs];
        else d = gen_expr(p, g, depth - 1);
        if (rnd() % 3 == 0) /* dividend with a multiple of the divisor: (d*q + a) */
            a = sym_raw(p, SYM_ADD, sym_raw(p, SYM_MUL, (rnd() % 2) ? d : sym_raw(p, SYM_MUL, d, rconst(p, -3, 3)),
                                            gen_expr(p, g, depth - 1)),
                        a);
        return sym_raw(p, (rnd() % 2) ? SYM_DIV : SYM_MOD, a, d);
    }
    case 6: return sym_raw(p, SYM_MIN, a, gen_expr(p, g, depth - 1));
    case 7: return sym_raw(p, SYM_MAX, a, gen_expr(p, g, depth - 1));
    case 8: return sym_raw(p, SYM_LT, a, gen_expr(p, g, depth - 1));
    case 9: return sym_raw(p, SYM_AND, a, gen_expr(p, g, depth - 1));
    default: return sym_raw(p, SYM_ADD, a, rconst(p, -9, 9));
    }
}

/* statistics of one random run, per property */
typedef struct stats {
    long exprs, samples, compared, eval_bad, simp_bad, bounds_bad, idem_bad, rt_bad, rt_parse_fail;
    char first[4096];
} stats;

static void note(stats *st, const char *what, const sym_pool *p, sym_id raw, sym_id simp) {
    if (st->first[0]) return;
    char a[1536], b[1536];
    sym_print(p, raw, a, sizeof a);
    sym_print(p, simp, b, sizeof b);
    snprintf(st->first, sizeof st->first, "%s: raw %s simplified %s", what, a, b);
}

typedef void (*binder)(int64_t *vals);

static void check_expr(sym_pool *p, sym_id raw, binder bind, stats *st) {
    sym_id s = sym_simplify(p, raw);
    st->exprs++;
    if (sym_simplify(p, s) != s) {
        st->idem_bad++;
        note(st, "not idempotent", p, raw, s);
    }
    /* print/parse round trip of both forms */
    static char txt[1 << 16], err[256];
    sym_id rt[2] = {SYM_NONE, SYM_NONE};
    sym_id src[2] = {raw, s};
    for (int k = 0; k < 2; k++) {
        int len = sym_print(p, src[k], txt, sizeof txt);
        if (len < (int)sizeof txt) {
            rt[k] = sym_parse(p, txt, err, sizeof err);
            if (rt[k] == SYM_NONE) {
                st->rt_parse_fail++;
                if (!st->first[0]) snprintf(st->first, sizeof st->first, "parse failed on '%.2000s': %s", txt, err);
            }
        }
    }
    int64_t lo_r, hi_r, lo_s, hi_s;
    sym_bounds(p, raw, &lo_r, &hi_r);
    sym_bounds(p, s, &lo_s, &hi_s);
    for (int t = 0; t < 4; t++) {
        int64_t vals[16];
        bind(vals);
        st->samples++;
        int big = 0;
        int64_t want = naive(p, raw, vals, &big);
        if (big) continue;
        st->compared++;
        int64_t got_raw = 0, got_s = 0, got_rt = 0;
        uint32_t miss = 0;
        if (sym_eval(p, raw, vals, NULL, &got_raw, &miss) != 0 || got_raw != want) {
            st->eval_bad++;
            note(st, "sym_eval(raw) differs from the naive evaluator", p, raw, s);
        }
        if (sym_eval(p, s, vals, NULL, &got_s, &miss) != 0 || got_s != want) {
            st->simp_bad++;
            if (!st->first[0]) {
                char a[1536], b[1536];
                sym_print(p, raw, a, sizeof a);
                sym_print(p, s, b, sizeof b);
                snprintf(st->first, sizeof st->first, "raw %s = %lld but simplified %s = %lld", a,
                         (long long)want, b, (long long)got_s);
            }
        }
        if (!in_bounds(want, lo_r, hi_r) || !in_bounds(want, lo_s, hi_s)) {
            st->bounds_bad++;
            if (!st->first[0]) {
                char a[1536], b[1536];
                sym_print(p, raw, a, sizeof a);
                sym_print(p, s, b, sizeof b);
                snprintf(st->first, sizeof st->first,
                         "value %lld outside bounds raw [%lld,%lld] %s / simplified [%lld,%lld] %s",
                         (long long)want, (long long)lo_r, (long long)hi_r, a, (long long)lo_s,
                         (long long)hi_s, b);
            }
        }
        for (int k = 0; k < 2; k++) {
            if (rt[k] == SYM_NONE) continue;
            if (sym_eval(p, rt[k], vals, NULL, &got_rt, &miss) != 0 || got_rt != want) {
                st->rt_bad++;
                note(st, "parse(print(e)) evaluates differently", p, src[k], rt[k]);
            }
        }
    }
}

/* generic variables: a in [-10,10], b in [0,7], c in [-5,3], n in [1,16] */
static void bind_generic(int64_t *v) {
    v[0] = rint_in(-10, 10);
    v[1] = rint_in(0, 7);
    v[2] = rint_in(-5, 3);
    v[3] = rint_in(1, 16);
}

/* index variables: s in [1,8], m in [1,6], i < s, j < m, k < s*m, t < m,
 * g in [-3,3] */
static void bind_index(int64_t *v) {
    v[6] = rint_in(-3, 3);
    v[0] = rint_in(1, 8);
    v[1] = rint_in(1, 6);
    v[2] = rint_in(0, v[0] - 1);
    v[3] = rint_in(0, v[1] - 1);
    v[4] = rint_in(0, v[0] * v[1] - 1);
    v[5] = rint_in(0, v[1] - 1);
}

static void report(const char *name, const stats *st, long bad, long min_exprs) {
    CASE_BEGIN(name);
    CHECK(st->exprs >= min_exprs, "only %ld expressions", st->exprs);
    CHECK(st->compared * 10 >= st->samples * 7, "only %ld of %ld samples compared", st->compared, st->samples);
    CHECK(bad == 0, "%ld bad; first: %s", bad, st->first);
    CASE_END();
}

static void random_runs(void) {
    stats g = {0}, x = {0};
    {
        sym_pool *p = sym_pool_new();
        gen gn = {{0}, 0, {0}, 0};
        gn.leaves[gn.nleaves++] = sym_var(p, "a", -10, 10);
        gn.leaves[gn.nleaves++] = sym_var(p, "b", 0, 7);
        gn.leaves[gn.nleaves++] = sym_var(p, "c", -5, 3);
        gn.leaves[gn.nleaves++] = sym_var(p, "n", 1, 16);
        gn.divs[gn.ndivs++] = gn.leaves[3];
        gn.divs[gn.ndivs++] = gn.leaves[1];
        gn.divs[gn.ndivs++] = sym_raw(p, SYM_MUL, gn.leaves[3], sym_const(p, 2));
        for (int e = 0; e < 4000; e++) check_expr(p, gen_expr(p, &gn, 1 + (int)(rnd() % 5)), bind_generic, &g);
        sym_pool_free(p);
    }
    {
        sym_pool *p = sym_pool_new();
        sym_id s = sym_var(p, "s", 1, 8), m = sym_var(p, "m", 1, 6);
        sym_id sm = sym_mul(p, s, m);
        sym_id i = sym_var_bounded(p, "i", s), j = sym_var_bounded(p, "j", m);
        sym_id k = sym_var_bounded(p, "k", sm), t = sym_var_bounded(p, "t", m);
        gen gn = {{0}, 0, {0}, 0};
        gn.leaves[gn.nleaves++] = s;
        gn.leaves[gn.nleaves++] = m;
        gn.leaves[gn.nleaves++] = i;
        gn.leaves[gn.nleaves++] = j;
        gn.leaves[gn.nleaves++] = k;
        gn.leaves[gn.nleaves++] = t;
        gn.leaves[gn.nleaves++] = sym_var(p, "g", -3, 3);
        /* index-like composites: i + s*j, i + s*(j + m*t), k % s, (i + s*j) * m */
        sym_id isj = sym_raw(p, SYM_ADD, i, sym_raw(p, SYM_MUL, s, j));
        gn.leaves[gn.nleaves++] = isj;
        gn.leaves[gn.nleaves++] = sym_raw(p, SYM_ADD, i, sym_raw(p, SYM_MUL, s, sym_raw(p, SYM_ADD, j, sym_raw(p, SYM_MUL, m, t))));
        gn.leaves[gn.nleaves++] = sym_raw(p, SYM_MOD, k, s);
        gn.leaves[gn.nleaves++] = sym_raw(p, SYM_MUL, isj, m);
        gn.divs[gn.ndivs++] = s;
        gn.divs[gn.ndivs++] = m;
        gn.divs[gn.ndivs++] = sym_raw(p, SYM_MUL, s, m);
        gn.divs[gn.ndivs++] = sym_raw(p, SYM_MUL, m, s);
        gn.divs[gn.ndivs++] = sym_raw(p, SYM_MUL, s, sym_const(p, 4));
        gn.divs[gn.ndivs++] = sym_raw(p, SYM_ADD, s, sym_const(p, 1));
        for (int e = 0; e < 3000; e++) check_expr(p, gen_expr(p, &gn, 1 + (int)(rnd() % 4)), bind_index, &x);
        sym_pool_free(p);
    }
    report("random_generic_eval_vs_naive", &g, g.eval_bad + g.simp_bad, 4000);
    report("random_index_eval_vs_naive", &x, x.eval_bad + x.simp_bad, 3000);
    stats both = g;
    both.exprs += x.exprs, both.samples += x.samples, both.compared += x.compared;
    if (!both.first[0]) memcpy(both.first, x.first, sizeof both.first);
    report("random_simplify_idempotent", &both, g.idem_bad + x.idem_bad, 7000);
    report("random_bounds_sound", &both, g.bounds_bad + x.bounds_bad, 7000);
    report("random_print_parse_roundtrip", &both, g.rt_bad + x.rt_bad + g.rt_parse_fail + x.rt_parse_fail, 7000);
}

/* ------------------------------------------------------- canonical forms */

static void canonical(void) {
    sym_pool *p = sym_pool_new();
    sym_id a = sym_var(p, "a", -100, 100), b = sym_var(p, "b", 0, 7), x = sym_var(p, "x", -SYM_INF, SYM_INF);
    sym_id c = sym_var(p, "c", 1, 1000);
    sym_id K[20];
    for (int v = 0; v < 20; v++) K[v] = sym_const(p, v - 10); /* K[v] = v - 10 */
#define C(v) sym_const(p, (v))

    CASE_BEGIN("canonical_commutative");
    CHECK(sym_add(p, a, b) == sym_add(p, b, a), "a+b");
    CHECK(sym_mul(p, a, b) == sym_mul(p, b, a), "a*b");
    CHECK(sym_add(p, sym_add(p, a, b), c) == sym_add(p, a, sym_add(p, c, b)), "assoc");
    CHECK(sym_mul(p, sym_mul(p, a, c), b) == sym_mul(p, c, sym_mul(p, b, a)), "assoc mul");
    CHECK(sym_min(p, a, x) == sym_min(p, x, a), "min");
    CHECK(sym_max(p, a, x) == sym_max(p, x, a), "max");
    CHECK(sym_and(p, sym_lt(p, a, x), sym_lt(p, x, c)) == sym_and(p, sym_lt(p, x, c), sym_lt(p, a, x)), "and");
    CASE_END();

    CASE_BEGIN("canonical_like_terms");
    CHECK(sym_add(p, sym_mul(p, C(2), a), sym_mul(p, a, C(3))) == sym_mul(p, C(5), a), "2a+3a");
    CHECK(sym_sub(p, a, a) == C(0), "a-a");
    CHECK(sym_sub(p, sym_add(p, a, x), x) == a, "a+x-x");
    CHECK(sym_add(p, sym_neg(p, a), a) == C(0), "-a+a");
    CHECK(sym_mul(p, C(3), sym_add(p, a, C(2))) == sym_add(p, sym_mul(p, a, C(3)), C(6)), "3(a+2)");
    sym_id apb = sym_add(p, a, b), amb = sym_sub(p, a, b);
    CHECK(sym_mul(p, apb, amb) == sym_sub(p, sym_mul(p, a, a), sym_mul(p, b, b)), "(a+b)(a-b)");
    CHECK(sym_mul(p, a, C(0)) == C(0), "a*0");
    CHECK(sym_mul(p, a, C(1)) == a, "a*1");
    CHECK(sym_add(p, a, C(0)) == a, "a+0");
    CASE_END();

    CASE_BEGIN("canonical_constant_folding");
    int64_t v = 0;
    CHECK(sym_add(p, C(2), C(3)) == C(5), "2+3");
    CHECK(sym_mul(p, C(-4), C(6)) == C(-24), "-4*6");
    CHECK(sym_is_const(p, sym_div(p, C(-7), C(2)), &v) && v == -4, "-7/2 = %lld", (long long)v);
    CHECK(sym_is_const(p, sym_mod(p, C(-7), C(2)), &v) && v == 1, "-7%%2 = %lld", (long long)v);
    CHECK(sym_is_const(p, sym_div(p, C(7), C(-2)), &v) && v == -4, "7/-2");
    CHECK(sym_is_const(p, sym_mod(p, C(7), C(-2)), &v) && v == -1, "7%%-2");
    CHECK(sym_div(p, C(7), C(0)) == C(0) && sym_mod(p, C(7), C(0)) == C(0), "by zero");
    CHECK(sym_div(p, x, C(0)) == C(0) && sym_mod(p, x, C(0)) == C(0), "x by zero");
    CHECK(sym_min(p, C(3), C(-2)) == C(-2) && sym_max(p, C(3), C(-2)) == C(3), "min/max");
    CHECK(sym_lt(p, C(3), C(4)) == C(1) && sym_lt(p, C(4), C(4)) == C(0), "lt");
    CHECK(sym_le(p, C(4), C(4)) == C(1) && sym_le(p, C(5), C(4)) == C(0), "le");
    CHECK(sym_and(p, C(3), C(-1)) == C(1) && sym_and(p, C(3), C(0)) == C(0), "and");
    CHECK(sym_is_const(p, sym_add(p, C(INT64_MAX), C(1)), &v) && v == INT64_MIN, "wraps");
    CASE_END();

    CASE_BEGIN("canonical_div_mod_const");
    sym_id a8b = sym_add(p, sym_mul(p, C(8), a), b);
    CHECK(sym_div(p, a8b, C(8)) == a, "(8a+b)/8");
    CHECK(sym_mod(p, a8b, C(8)) == b, "(8a+b)%%8");
    CHECK(sym_div(p, b, C(8)) == C(0) && sym_mod(p, b, C(8)) == b, "b/8, b%%8");
    sym_id x8 = sym_add(p, sym_mul(p, C(8), x), sym_mul(p, x, x));
    CHECK(sym_div(p, sym_add(p, x8, b), C(8)) == sym_add(p, x, sym_div(p, sym_add(p, sym_mul(p, x, x), b), C(8))),
          "(8x + x*x + b)/8 = x + (x*x+b)/8");
    CHECK(sym_div(p, sym_div(p, x, C(4)), C(2)) == sym_div(p, x, C(8)), "(x/4)/2");
    CHECK(sym_mod(p, sym_mod(p, x, C(8)), C(4)) == sym_mod(p, x, C(4)), "(x%%8)%%4");
    CHECK(sym_mod(p, sym_mod(p, x, C(4)), C(8)) == sym_mod(p, x, C(4)), "(x%%4)%%8");
    CHECK(sym_div(p, sym_mul(p, x, C(6)), C(3)) == sym_mul(p, x, C(2)), "6x/3");
    CHECK(sym_div(p, sym_mul(p, x, C(2)), C(4)) == sym_div(p, x, C(2)), "2x/4");
    CHECK(sym_mod(p, sym_add(p, sym_mul(p, x, C(8)), C(11)), C(8)) == C(3), "(8x+11)%%8");
    CHECK(sym_div(p, x, C(-2)) == sym_div(p, sym_neg(p, x), C(2)), "x/-2");
    CHECK(sym_div(p, sym_add(p, b, C(-8)), C(8)) == C(-1), "(b-8)/8 = -1");
    CASE_END();

    CASE_BEGIN("canonical_div_mod_symbolic");
    sym_id s = sym_var(p, "s", 1, 64), t = sym_var(p, "t", 1, 64);
    sym_id i = sym_var_bounded(p, "i", s), j = sym_var_bounded(p, "j", t), k = sym_var_bounded(p, "k", C(5));
    sym_id isj = sym_add(p, i, sym_mul(p, s, j));
    CHECK(sym_div(p, isj, s) == j, "(i + s*j)/s");
    CHECK(sym_mod(p, isj, s) == i, "(i + s*j)%%s");
    CHECK(sym_div(p, sym_mul(p, s, j), s) == j && sym_mod(p, sym_mul(p, s, j), s) == C(0), "s*j / s");
    CHECK(sym_div(p, s, s) == C(1) && sym_mod(p, s, s) == C(0), "s/s");
    /* two levels: i + s*j + s*t*k over s*t */
    sym_id st = sym_mul(p, s, t);
    sym_id three = sym_add(p, isj, sym_mul(p, st, k));
    CHECK(sym_div(p, three, st) == k, "(i + s*j + s*t*k)/(s*t)");
    CHECK(sym_mod(p, three, st) == isj, "(i + s*j + s*t*k)%%(s*t)");
    CHECK(sym_div(p, isj, st) == C(0), "(i + s*j)/(s*t)");
    CHECK(sym_div(p, sym_mod(p, x, s), s) == C(0), "(x%%s)/s");
    CHECK(sym_div(p, k, C(5)) == C(0) && sym_mod(p, k, C(5)) == k, "k < 5");
    /* unravelling a merged index, as views do: l = i0*(s1*s2) + i1*s2 + i2 */
    sym_id s1 = sym_var(p, "s1", 1, 512), s2 = sym_var(p, "s2", 1, 512);
    sym_id u0 = sym_var_bounded(p, "u0", s), u1 = sym_var_bounded(p, "u1", s1), u2 = sym_var_bounded(p, "u2", s2);
    sym_id lin = sym_add(p, sym_add(p, sym_mul(p, u0, sym_mul(p, s1, s2)), sym_mul(p, u1, s2)), u2);
    CHECK(sym_div(p, lin, sym_mul(p, s2, s1)) == u0, "l / (s1*s2)");
    CHECK(sym_mod(p, sym_div(p, lin, s2), s1) == u1, "(l / s2) %% s1");
    CHECK(sym_mod(p, lin, s2) == u2, "l %% s2");
    CHECK(sym_mod(p, lin, sym_mul(p, s1, s2)) == sym_add(p, sym_mul(p, u1, s2), u2), "l %% (s1*s2)");
    sym_id w1 = sym_var_bounded(p, "w1", C(3)), w2 = sym_var_bounded(p, "w2", C(4));
    sym_id clin = sym_add(p, sym_add(p, sym_mul(p, u0, C(12)), sym_mul(p, w1, C(4))), w2);
    CHECK(sym_div(p, clin, C(12)) == u0 && sym_mod(p, sym_div(p, clin, C(4)), C(3)) == w1 &&
              sym_mod(p, clin, C(4)) == w2,
          "constant-size unravel");
    /* i is not known to be < t: must stay a division */
    sym_id keep = sym_div(p, sym_add(p, i, sym_mul(p, t, j)), t);
    CHECK(sym_get(p, keep)->kind != SYM_VAR, "(i + t*j)/t must not simplify to a variable");
    CASE_END();

    /* a channel shuffle's merged index divided by a multiple of a term's
     * coefficient: (3136*c + 56*h + w) / 12544 is c / 4, since 56*h + w <
     * 3136 (floor(x/(a*k)) = floor(floor(x/a)/k)); the mod keeps the rest */
    CASE_BEGIN("canonical_div_mod_staged");
    sym_id ch = sym_var_bounded(p, "ch", C(112)), h = sym_var_bounded(p, "h", C(56)), w = sym_var_bounded(p, "w", C(56));
    sym_id hw = sym_add(p, sym_mul(p, h, C(56)), w);
    sym_id shuf = sym_add(p, sym_mul(p, ch, C(3136)), hw);
    CHECK(sym_div(p, shuf, C(12544)) == sym_div(p, ch, C(4)), "(3136c + 56h + w)/12544 = c/4");
    CHECK(sym_mod(p, shuf, C(12544)) == sym_add(p, sym_mul(p, sym_mod(p, ch, C(4)), C(3136)), hw),
          "(3136c + 56h + w) %% 12544 = 3136*(c%%4) + 56h + w");
    /* a constant that stays inside one bucket of the coefficient: (3136c + w + 7)/12544 */
    CHECK(sym_div(p, sym_add(p, sym_add(p, sym_mul(p, ch, C(3136)), w), C(7)), C(12544)) == sym_div(p, ch, C(4)),
          "(3136c + w + 7)/12544 = c/4");
    /* 56h + w + 3100 crosses a bucket of 3136: must stay a division of the whole */
    sym_id cross = sym_div(p, sym_add(p, shuf, C(3100)), C(12544));
    CHECK(cross != sym_div(p, ch, C(4)) && cross != sym_div(p, sym_add(p, ch, C(1)), C(4)),
          "(3136c + 56h + w + 3100)/12544 not staged");
    for (int64_t cv = 0; cv < 112; cv += 5)
        for (int64_t hv = 0; hv < 56; hv += 11)
            for (int64_t wv = 0; wv < 56; wv += 13) {
                int64_t vals[64] = {0}, got = 0;
                uint32_t miss = 0;
                vals[sym_get(p, ch)->c] = cv, vals[sym_get(p, h)->c] = hv, vals[sym_get(p, w)->c] = wv;
                int64_t xv = 3136 * cv + 56 * hv + wv + 3100;
                CHECK(sym_eval(p, cross, vals, NULL, &got, &miss) == 0 && got == xv / 12544, "crossing value");
                CHECK(sym_eval(p, sym_mod(p, sym_add(p, shuf, C(3100)), C(12544)), vals, NULL, &got, &miss) == 0 &&
                          got == xv % 12544,
                      "crossing mod value");
            }
    CASE_END();

    CASE_BEGIN("canonical_bounds_decisions");
    CHECK(sym_min(p, b, sym_add(p, b, C(1))) == b, "min(b, b+1)");
    CHECK(sym_max(p, b, C(100)) == C(100), "max(b,100)");
    CHECK(sym_min(p, b, C(-1)) == C(-1), "min(b,-1)");
    CHECK(sym_lt(p, b, C(8)) == C(1) && sym_lt(p, b, C(0)) == C(0), "lt by bounds");
    CHECK(sym_lt(p, sym_add(p, x, C(1)), x) == C(0), "x+1 < x");
    CHECK(sym_le(p, x, x) == C(1), "x <= x");
    sym_id l = sym_lt(p, a, x);
    CHECK(sym_and(p, l, C(1)) == l && sym_and(p, C(1), l) == l, "and(l,1)");
    CHECK(sym_and(p, l, C(0)) == C(0) && sym_and(p, x, C(0)) == C(0), "and(l,0)");
    CHECK(sym_and(p, l, l) == l, "and(l,l)");
    CHECK(sym_and(p, l, c) == l, "and(l, c>=1)");
    CASE_END();
    (void)K;
#undef C
    sym_pool_free(p);
}

/* ------------------------------------------------------------ pool API */

static void pool_api(void) {
    sym_pool *p = sym_pool_new();
    CASE_BEGIN("pool_hash_consing_and_vars");
    sym_id a = sym_var(p, "a", 0, 10), a2 = sym_var(p, "a", -5, 5);
    CHECK(a == a2, "same name, same var");
    int64_t lo, hi;
    sym_bounds(p, a, &lo, &hi);
    CHECK(lo == 0 && hi == 10, "first declaration kept: [%lld,%lld]", (long long)lo, (long long)hi);
    CHECK(sym_var(p, "bad", 5, 1) == SYM_NONE, "lo > hi");
    sym_id b = sym_var(p, "b", 1, 4);
    CHECK(sym_raw(p, SYM_ADD, b, a) == sym_raw(p, SYM_ADD, b, a), "raw hash-consed");
    CHECK(sym_const(p, 42) == sym_const(p, 42), "const hash-consed");
    CHECK(sym_find_var(p, "b") == 1 && sym_find_var(p, "zz") == -1, "find_var");
    CHECK(sym_var_count(p) == 2 && strcmp(sym_var_name(p, 1), "b") == 0, "names");
    CHECK(sym_var_node(p, 0) == a, "var node");
    const sym_node *n = sym_get(p, b);
    CHECK(n && n->kind == SYM_VAR && n->c == 1, "get");
    CHECK(sym_get(p, SYM_NONE) == NULL && sym_get(p, sym_count(p)) == NULL, "get out of range");
    CHECK(sym_add(p, a, SYM_NONE) == SYM_NONE && sym_div(p, SYM_NONE, a) == SYM_NONE, "NONE propagates");
    sym_id i = sym_var_bounded(p, "i", sym_add(p, b, sym_const(p, 2)));
    sym_bounds(p, i, &lo, &hi);
    CHECK(lo == 0 && hi == 5, "bounded var range [%lld,%lld]", (long long)lo, (long long)hi);
    CHECK(sym_var_bound(p, 2) == sym_add(p, b, sym_const(p, 2)) && sym_var_bound(p, 0) == SYM_NONE, "var_bound");
    sym_var_range(p, 2, &lo, &hi);
    CHECK(lo == 0 && hi == 5, "var_range");
    CHECK(sym_prove_nonneg(p, sym_mul(p, a, b)) && !sym_prove_nonneg(p, sym_neg(p, b)), "prove_nonneg");
    CASE_END();

    CASE_BEGIN("pool_eval_and_subst");
    sym_id e = sym_add(p, sym_mul(p, a, sym_const(p, 3)), sym_div(p, b, sym_const(p, 2)));
    int64_t vals[3] = {4, 3, 0}, out = -1;
    uint8_t bound[3] = {1, 0, 1};
    uint32_t miss = 99;
    CHECK(sym_eval(p, e, vals, NULL, &out, &miss) == 0 && out == 13, "eval %lld", (long long)out);
    CHECK(sym_eval(p, e, vals, bound, &out, &miss) == -1 && miss == 1, "missing var %u", miss);
    bound[1] = 1;
    CHECK(sym_eval(p, e, vals, bound, &out, &miss) == 0 && out == 13, "all bound");
    sym_id map[2] = {SYM_NONE, sym_const(p, 7)};
    sym_id f = sym_subst(p, e, map, 2);
    CHECK(f == sym_add(p, sym_mul(p, a, sym_const(p, 3)), sym_const(p, 3)), "subst b=7");
    sym_id map2[1] = {sym_const(p, 2)};
    CHECK(sym_subst(p, f, map2, 1) == sym_const(p, 9), "subst a=2");
    CHECK(sym_subst(p, e, map2, 1) == sym_add(p, sym_div(p, b, sym_const(p, 2)), sym_const(p, 6)), "partial");
    CASE_END();

    CASE_BEGIN("pool_saturating_bounds");
    sym_id big = sym_var(p, "big", 1, SYM_INF);
    sym_id sq = sym_mul(p, big, big);
    sym_bounds(p, sq, &lo, &hi);
    CHECK(lo == 1 && hi == SYM_INF, "big*big [%lld,%lld]", (long long)lo, (long long)hi);
    sym_bounds(p, sym_neg(p, sq), &lo, &hi);
    CHECK(lo == -SYM_INF && hi == -1, "-(big*big)");
    sym_bounds(p, sym_sub(p, big, sym_const(p, INT64_MAX)), &lo, &hi);
    CHECK(lo <= hi, "sub of huge constant");
    sym_id huge = sym_mul(p, sym_const(p, INT64_MAX), sym_const(p, 2)); /* wraps, no UB */
    CHECK(sym_is_const(p, huge, NULL), "huge const");
    sym_bounds(p, sym_div(p, sq, sym_var(p, "q", 1, 3)), &lo, &hi);
    CHECK(lo >= 0 && hi == SYM_INF, "div of unbounded stays unbounded [%lld,%lld]", (long long)lo, (long long)hi);
    sym_bounds(p, sym_mod(p, sq, sym_const(p, 7)), &lo, &hi);
    CHECK(lo == 0 && hi == 6, "mod");
    CASE_END();
    sym_pool_free(p);
}

/* ---------------------------------------------------------- print/parse */

static void print_parse(void) {
    sym_pool *p = sym_pool_new();
    char buf[256], err[128];
    sym_id pos = sym_var(p, "pos", 0, 4096), seq = sym_var(p, "seq", 1, 4096);
    sym_id i0 = sym_var(p, "i0", 0, 100), i1 = sym_var(p, "i1", 0, 63);

    CASE_BEGIN("print_readable");
    sym_print(p, sym_add(p, seq, pos), buf, sizeof buf);
    CHECK(strcmp(buf, "(pos + seq)") == 0, "got '%s'", buf);
    sym_print(p, sym_add(p, i1, sym_mul(p, i0, sym_const(p, 64))), buf, sizeof buf);
    CHECK(strcmp(buf, "((i0 * 64) + i1)") == 0, "got '%s'", buf);
    sym_print(p, seq, buf, sizeof buf);
    CHECK(strcmp(buf, "seq") == 0, "got '%s'", buf);
    int need = sym_print(p, sym_add(p, seq, pos), buf, 4);
    CHECK(need == 11 && strcmp(buf, "(po") == 0, "truncation: %d '%s'", need, buf);
    CHECK(sym_print(p, pos, NULL, 0) == 3, "size query");
    CASE_END();

    CASE_BEGIN("parse_basic");
    sym_id e = sym_parse(p, " 2*(pos+seq) - seq % 4 + min(pos, 3) / -2 ", err, sizeof err);
    CHECK(e != SYM_NONE, "err %s", err);
    int64_t vals[4] = {5, 9, 0, 0}, out = 0, want = 2 * (5 + 9) - 9 % 4 + ref_div(3, -2);
    CHECK(e != SYM_NONE && sym_eval(p, e, vals, NULL, &out, NULL) == 0 && out == want, "%lld vs %lld",
          (long long)out, (long long)want);
    CHECK(sym_parse(p, "seq + pos", err, sizeof err) == sym_add(p, pos, seq), "same id as built");
    CHECK(sym_parse(p, "pos < seq", err, sizeof err) == sym_lt(p, pos, seq), "lt");
    CHECK(sym_parse(p, "max(pos, seq)", err, sizeof err) == sym_max(p, seq, pos), "max");
    sym_id fresh = sym_parse(p, "newvar * 2", err, sizeof err);
    int nv = sym_find_var(p, "newvar");
    int64_t lo, hi;
    sym_bounds(p, sym_var_node(p, (uint32_t)(nv < 0 ? 0 : nv)), &lo, &hi);
    CHECK(fresh != SYM_NONE && nv >= 0 && lo == 1 && hi == SYM_INF, "unknown name -> var [1,INF]");
    CHECK(sym_parse(p, "9223372036854775807", err, sizeof err) == sym_const(p, INT64_MAX), "max literal");
    sym_id mn = sym_const(p, INT64_MIN);
    sym_print(p, mn, buf, sizeof buf);
    CHECK(sym_parse(p, buf, err, sizeof err) == mn, "INT64_MIN round trip '%s'", buf);
    CASE_END();

    CASE_BEGIN("parse_errors");
    static const char *bad[] = {"",       "(",     "a+",        "min(a",  "3 $ 4", ")",      "a b",
                                "min(a,)", "foo(1,2)", "1 +* 2", "((a)",  "a)",    "99999999999999999999",
                                "max(1 2)", "-",     "a < < b",   "\x01",   "min(a, b, c)"};
    for (size_t q = 0; q < sizeof bad / sizeof bad[0]; q++) {
        err[0] = '\0';
        sym_id r = sym_parse(p, bad[q], err, sizeof err);
        CHECK(r == SYM_NONE, "'%s' parsed", bad[q]);
        CHECK(strncmp(err, "sym: ", 5) == 0 && strstr(err, "column") != NULL, "'%s' message '%s'", bad[q], err);
    }
    sym_parse(p, "a + b)", err, sizeof err);
    CHECK(strstr(err, "')'") && strstr(err, "column 6"), "message '%s'", err);
    sym_parse(p, "3 $ 4", err, sizeof err);
    CHECK(strstr(err, "'$'") && strstr(err, "column 3"), "message '%s'", err);
    CHECK(sym_parse(p, NULL, err, sizeof err) == SYM_NONE, "NULL");
    CHECK(sym_parse(p, "(", NULL, 0) == SYM_NONE, "no err buffer");
    /* very long inputs: deep nesting is refused, long flat input works */
    size_t L = 200000;
    char *deep = malloc(L + 1);
    memset(deep, '(', L);
    deep[L] = '\0';
    CHECK(sym_parse(p, deep, err, sizeof err) == SYM_NONE, "deep nesting");
    memset(deep, '-', L);
    deep[L - 1] = '1';
    CHECK(sym_parse(p, deep, err, sizeof err) == SYM_NONE, "deep unary");
    for (size_t q = 0; q + 2 < L; q += 2) deep[q] = '1', deep[q + 1] = '+';
    deep[L - 2] = '1';
    deep[L - 1] = '\0';
    sym_id sum = sym_parse(p, deep, err, sizeof err);
    CHECK(sum == sym_const(p, (int64_t)(L / 2)), "long sum: %s", err);
    memset(deep, 'z', L);
    deep[L] = '\0';
    sym_id longname = sym_parse(p, deep, err, sizeof err);
    CHECK(longname != SYM_NONE && sym_get(p, longname)->kind == SYM_VAR, "long name");
    /* a flat sum of 60000 distinct variables: parse, print, eval, simplify */
    size_t cap = 60000 * 10, at = 0;
    char *flat = malloc(cap);
    for (int q = 0; q < 60000; q++) at += (size_t)snprintf(flat + at, cap - at, "%sw%d", q ? (q % 3 ? "+" : "-") : "", q);
    sym_id fs = sym_parse(p, flat, err, sizeof err);
    CHECK(fs != SYM_NONE, "flat sum: %s", err);
    if (fs != SYM_NONE) {
        int len = sym_print(p, fs, NULL, 0);
        char *back = malloc((size_t)len + 1);
        sym_print(p, fs, back, (size_t)len + 1);
        CHECK(sym_parse(p, back, err, sizeof err) == fs, "flat sum round trip");
        CHECK(sym_simplify(p, fs) == fs, "flat sum simplify");
        int64_t *wv = calloc(sym_var_count(p), sizeof(int64_t));
        int64_t sum_want = 0, got = 0;
        for (int q = 0; q < 60000; q++) {
            char nm[16];
            snprintf(nm, sizeof nm, "w%d", q);
            int vn = sym_find_var(p, nm);
            if (vn >= 0) wv[vn] = q;
            sum_want += (q == 0 || q % 3) ? q : -q;
        }
        CHECK(sym_eval(p, fs, wv, NULL, &got, NULL) == 0 && got == sum_want, "flat sum eval");
        free(wv);
        free(back);
    }
    free(flat);
    free(deep);
    CASE_END();
    sym_pool_free(p);
}

/* products too large to distribute stay factored, and stay correct */
static void expansion_cap(void) {
    CASE_BEGIN("canonical_large_product");
    sym_pool *p = sym_pool_new();
    sym_id X = sym_const(p, 1), Y = sym_const(p, -2);
    char nm[16];
    for (int q = 0; q < 20; q++) {
        snprintf(nm, sizeof nm, "x%d", q);
        X = sym_add(p, X, sym_mul(p, sym_var(p, nm, -5, 5), sym_const(p, q + 1)));
        snprintf(nm, sizeof nm, "y%d", q);
        Y = sym_add(p, Y, sym_var(p, nm, 0, 9));
    }
    sym_id XY = sym_mul(p, X, Y), YX = sym_mul(p, Y, X);
    CHECK(XY == YX, "commutes");
    CHECK(sym_simplify(p, XY) == XY, "idempotent");
    sym_id small = sym_mul(p, sym_add(p, sym_var(p, "x0", 0, 0), sym_const(p, 1)), sym_var(p, "y0", 0, 0));
    CHECK(sym_get(p, small)->kind == SYM_ADD, "small products still distribute");
    int64_t vals[40];
    for (int t = 0; t < 50; t++) {
        int64_t x = 1, y = -2;
        for (int q = 0; q < 20; q++) {
            vals[2 * q] = rint_in(-5, 5);
            vals[2 * q + 1] = rint_in(0, 9);
            x += vals[2 * q] * (q + 1);
            y += vals[2 * q + 1];
        }
        int64_t got = 0;
        CHECK(sym_eval(p, XY, vals, NULL, &got, NULL) == 0 && got == x * y, "eval %lld vs %lld", (long long)got,
              (long long)(x * y));
        sym_id sq = sym_mul(p, XY, sym_const(p, 3));
        CHECK(sym_eval(p, sym_sub(p, sq, XY), vals, NULL, &got, NULL) == 0 && got == 2 * x * y, "2xy");
    }
    sym_pool_free(p);
    CASE_END();
}

/* ----------------------------------------------------------- performance */

static void performance(void) {
    CASE_BEGIN("perf_large_pool");
    clock_t t0 = clock();
    sym_pool *p = sym_pool_new();
    sym_id s = sym_var(p, "s", 1, 4096);
    sym_id i = sym_var_bounded(p, "i", s);
    sym_id acc = sym_const(p, 0);
    /* tens of thousands of distinct nodes, index-like */
    for (int64_t k = 0; k < 40000; k++) {
        sym_id e = sym_add(p, sym_mul(p, i, sym_const(p, k + 2)), sym_const(p, k));
        e = sym_mod(p, sym_div(p, e, s), sym_const(p, 7));
        if (k % 1000 == 0) acc = sym_add(p, acc, e);
    }
    uint32_t n = sym_count(p);
    /* re-building the same expressions creates nothing new */
    for (int64_t k = 0; k < 40000; k++) {
        sym_id e = sym_add(p, sym_mul(p, i, sym_const(p, k + 2)), sym_const(p, k));
        (void)sym_mod(p, sym_div(p, e, s), sym_const(p, 7));
    }
    /* a sum of 2000 distinct terms built incrementally */
    sym_id vsum = sym_const(p, 0);
    char name[32];
    for (int k = 0; k < 2000; k++) {
        snprintf(name, sizeof name, "v%d", k);
        vsum = sym_add(p, vsum, sym_var(p, name, 0, 10));
    }
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK(n > 40000, "only %u nodes", n);
    CHECK(sym_count(p) - n < 10000, "rebuild grew the pool to %u", sym_count(p));
    CHECK(secs < 20.0, "took %.2f s", secs);
    CHECK(sym_simplify(p, vsum) == vsum && acc != SYM_NONE, "simplify large sum");
    sym_pool_free(p);
    CASE_END();
}

int main(void) {
    canonical();
    pool_api();
    print_parse();
    random_runs();
    expansion_cap();
    performance();
    return check_exit();
}
