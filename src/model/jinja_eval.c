/* jinja_eval.c — rendering a parsed chat template (jinja_impl.h) against a
 * context (jinja.h): values with Python's semantics where the templates
 * rely on them (truthiness, ==, +, slices, str methods, repr), Jinja's
 * scoping (a for loop's body is its own scope, so a set inside it is gone
 * after the loop; namespace() objects carry values out), filters, tests.
 *
 * Invariants: an undefined name is falsy and prints as ""; an attribute of
 * an undefined value is an error, as in Jinja; every render is bounded by
 * JINJA_MAX_STEPS, JINJA_MAX_OUT and JINJA_MAX_MEM and ends with an error
 * past them; nothing is freed before the render's arena.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base.h"
#include "jinja_impl.h"

/* ---- the context ---- */

struct jinja_ctx {
    jarena a;
    const char **names;
    jv *vals;
    int n, cap;
};

jinja_ctx *jinja_ctx_new(void) { return kiln_xcalloc(1, sizeof(jinja_ctx)); }

void jinja_ctx_free(jinja_ctx *c) {
    if (!c) return;
    ja_free(&c->a);
    free(c->names);
    free(c->vals);
    free(c);
}

static void ctx_set(jinja_ctx *c, const char *name, jv v) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->names[i], name)) {
            c->vals[i] = v;
            return;
        }
    KILN_GROW(c->names, c->cap, c->n + 1);
    c->vals = kiln_xrealloc(c->vals, (size_t)c->cap * sizeof *c->vals);
    c->names[c->n] = ja_strndup(&c->a, name, strlen(name));
    c->vals[c->n++] = v;
}

static jv mkstr(jarena *a, const char *s, size_t n) {
    jv v = {.k = JV_STR};
    v.u.str.s = ja_strndup(a, s, n);
    v.u.str.n = n;
    return v;
}

void jinja_set_str(jinja_ctx *c, const char *name, const char *value) {
    ctx_set(c, name, mkstr(&c->a, value, strlen(value)));
}

void jinja_set_bool(jinja_ctx *c, const char *name, int value) {
    jv v = {.k = JV_BOOL};
    v.u.b = value != 0;
    ctx_set(c, name, v);
}

static void list_push(jarena *a, jlist *l, jv v) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        jv *nv = ja_alloc(a, (size_t)cap * sizeof *nv);
        if (l->n) memcpy(nv, l->v, (size_t)l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

static jv *dict_find(jdict *d, const char *k, size_t n) {
    for (int i = 0; i < d->n; i++)
        if (d->keys[i].u.str.n == n && memcmp(d->keys[i].u.str.s, k, n) == 0) return &d->vals[i];
    return NULL;
}

static void dict_put(jarena *a, jdict *d, jv key, jv val) {
    jv *old = dict_find(d, key.u.str.s, key.u.str.n);
    if (old) {
        *old = val;
        return;
    }
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 8;
        jv *nk = ja_alloc(a, (size_t)cap * sizeof *nk), *nv = ja_alloc(a, (size_t)cap * sizeof *nv);
        if (d->n) memcpy(nk, d->keys, (size_t)d->n * sizeof *nk), memcpy(nv, d->vals, (size_t)d->n * sizeof *nv);
        d->keys = nk, d->vals = nv, d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n++] = val;
}

void jinja_set_records(jinja_ctx *c, const char *name, const char *const *keys, int nk, const char *const *vals,
                       int n) {
    jv l = {.k = JV_LIST};
    l.u.list = ja_alloc(&c->a, sizeof(jlist));
    for (int i = 0; i < n; i++) {
        jv d = {.k = JV_DICT};
        d.u.dict = ja_alloc(&c->a, sizeof(jdict));
        for (int k = 0; k < nk; k++)
            if (vals[(size_t)i * (size_t)nk + (size_t)k])
                dict_put(&c->a, d.u.dict, mkstr(&c->a, keys[k], strlen(keys[k])),
                         mkstr(&c->a, vals[(size_t)i * (size_t)nk + (size_t)k], strlen(vals[(size_t)i * (size_t)nk + (size_t)k])));
        list_push(&c->a, l.u.list, d);
    }
    ctx_set(c, name, l);
}

/* ---- the evaluator ---- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

typedef struct ev {
    jarena *a;
    const jinja_ctx *ctx;
    const char **names; /* the scope stack: entries from frame starts up */
    jv *vals;
    int n, cap;
    int *frames, nframes, fcap;
    sbuf out;
    long long steps;
    int failed, brk, cont;
    char *err;
    size_t errlen;
} ev;

static jv undef(void) { return (jv){.k = JV_UNDEF}; }
static jv jbool(int b) { return (jv){.k = JV_BOOL, .u.b = b != 0}; }
static jv jint(long long i) { return (jv){.k = JV_INT, .u.i = i}; }
static jv jfloat(double f) { return (jv){.k = JV_FLOAT, .u.f = f}; }

static jv efail(ev *e, int line, const char *fmt, ...) {
    if (!e->failed) {
        e->failed = 1;
        int k = snprintf(e->err, e->errlen, "chat template line %d: ", line);
        if (k < 0) k = 0;
        if ((size_t)k < e->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(e->err + k, e->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return undef();
}

static int sb_add(ev *e, sbuf *b, const char *s, size_t n) {
    if (b->n + n > JINJA_MAX_OUT) {
        efail(e, 0, "the output is larger than %zu MiB", JINJA_MAX_OUT >> 20);
        return 0;
    }
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n + 64);
        b->p = kiln_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 1;
}

static const char *kind_name(jv_kind k) {
    static const char *const names[] = {"undefined", "none", "boolean", "integer", "float",
                                        "string", "list", "dict", "function"};
    return names[k];
}

static int truthy(jv v) {
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.str.n > 0;
    case JV_LIST: return v.u.list->n > 0;
    case JV_DICT: return v.u.dict->n > 0;
    default: return 1;
    }
}

static void repr(ev *e, sbuf *b, jv v, int quoted);

static void fmt_float(ev *e, sbuf *b, double f) {
    char buf[64];
    if (isnan(f)) snprintf(buf, sizeof buf, "nan");
    else if (isinf(f)) snprintf(buf, sizeof buf, f > 0 ? "inf" : "-inf");
    else {
        snprintf(buf, sizeof buf, "%.17g", f);
        /* the shortest text that reads back the same, as Python's repr */
        for (int prec = 1; prec <= 17; prec++) {
            char t[64];
            snprintf(t, sizeof t, "%.*g", prec, f);
            if (strtod(t, NULL) == f) {
                memcpy(buf, t, sizeof t);
                break;
            }
        }
        if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
    }
    sb_add(e, b, buf, strlen(buf));
}

/* str(v) (quoted = 0) or repr(v) (quoted = 1), Python's spelling */
static void repr(ev *e, sbuf *b, jv v, int quoted) {
    char buf[32];
    switch (v.k) {
    case JV_UNDEF: break;
    case JV_NONE: sb_add(e, b, "None", 4); break;
    case JV_BOOL: v.u.b ? sb_add(e, b, "True", 4) : sb_add(e, b, "False", 5); break;
    case JV_INT: snprintf(buf, sizeof buf, "%lld", v.u.i), sb_add(e, b, buf, strlen(buf)); break;
    case JV_FLOAT: fmt_float(e, b, v.u.f); break;
    case JV_STR:
        if (quoted) sb_add(e, b, "'", 1);
        sb_add(e, b, v.u.str.s, v.u.str.n);
        if (quoted) sb_add(e, b, "'", 1);
        break;
    case JV_LIST:
        sb_add(e, b, "[", 1);
        for (int i = 0; i < v.u.list->n && !e->failed; i++) {
            if (i) sb_add(e, b, ", ", 2);
            repr(e, b, v.u.list->v[i], 1);
        }
        sb_add(e, b, "]", 1);
        break;
    case JV_DICT:
        sb_add(e, b, "{", 1);
        for (int i = 0; i < v.u.dict->n && !e->failed; i++) {
            if (i) sb_add(e, b, ", ", 2);
            repr(e, b, v.u.dict->keys[i], 1);
            sb_add(e, b, ": ", 2);
            repr(e, b, v.u.dict->vals[i], 1);
        }
        sb_add(e, b, "}", 1);
        break;
    case JV_FUNC: sb_add(e, b, "<function>", 10); break;
    }
}

/* the value as a string value in the arena */
static jv to_str(ev *e, jv v) {
    if (v.k == JV_STR) return v;
    sbuf b = {0};
    repr(e, &b, v, 0);
    jv s = mkstr(e->a, b.p ? b.p : "", b.n);
    free(b.p);
    return s;
}

static void tojson(ev *e, sbuf *b, jv v, int line) {
    char buf[32];
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: sb_add(e, b, "null", 4); break;
    case JV_BOOL: v.u.b ? sb_add(e, b, "true", 4) : sb_add(e, b, "false", 5); break;
    case JV_INT: snprintf(buf, sizeof buf, "%lld", v.u.i), sb_add(e, b, buf, strlen(buf)); break;
    case JV_FLOAT:
        if (!isfinite(v.u.f)) efail(e, line, "tojson: %g is not a JSON number", v.u.f);
        else fmt_float(e, b, v.u.f);
        break;
    case JV_STR:
        sb_add(e, b, "\"", 1);
        for (size_t i = 0; i < v.u.str.n; i++) {
            unsigned char c = (unsigned char)v.u.str.s[i];
            if (c == '"' || c == '\\') sb_add(e, b, "\\", 1), sb_add(e, b, (char *)&c, 1);
            else if (c == '\n') sb_add(e, b, "\\n", 2);
            else if (c == '\t') sb_add(e, b, "\\t", 2);
            else if (c == '\r') sb_add(e, b, "\\r", 2);
            else if (c < 0x20) snprintf(buf, sizeof buf, "\\u%04x", c), sb_add(e, b, buf, 6);
            else sb_add(e, b, (char *)&c, 1);
        }
        sb_add(e, b, "\"", 1);
        break;
    case JV_LIST:
        sb_add(e, b, "[", 1);
        for (int i = 0; i < v.u.list->n && !e->failed; i++) {
            if (i) sb_add(e, b, ", ", 2);
            tojson(e, b, v.u.list->v[i], line);
        }
        sb_add(e, b, "]", 1);
        break;
    case JV_DICT:
        sb_add(e, b, "{", 1);
        for (int i = 0; i < v.u.dict->n && !e->failed; i++) {
            if (i) sb_add(e, b, ", ", 2);
            tojson(e, b, v.u.dict->keys[i], line);
            sb_add(e, b, ": ", 2);
            tojson(e, b, v.u.dict->vals[i], line);
        }
        sb_add(e, b, "}", 1);
        break;
    case JV_FUNC: efail(e, line, "tojson: a function is not JSON"); break;
    }
}

static int is_num(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }
static double num(jv v) { return v.k == JV_FLOAT ? v.u.f : v.k == JV_INT ? (double)v.u.i : (double)v.u.b; }
static long long inum(jv v) { return v.k == JV_INT ? v.u.i : v.k == JV_BOOL ? v.u.b : (long long)v.u.f; }

static int equal(jv a, jv b) {
    if (is_num(a) && is_num(b)) return num(a) == num(b);
    if (a.k != b.k) return (a.k == JV_UNDEF || a.k == JV_NONE) && (b.k == JV_UNDEF || b.k == JV_NONE) && a.k == b.k;
    switch (a.k) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a.u.str.n == b.u.str.n && memcmp(a.u.str.s, b.u.str.s, a.u.str.n) == 0;
    case JV_LIST:
        if (a.u.list->n != b.u.list->n) return 0;
        for (int i = 0; i < a.u.list->n; i++)
            if (!equal(a.u.list->v[i], b.u.list->v[i])) return 0;
        return 1;
    case JV_DICT:
        if (a.u.dict->n != b.u.dict->n) return 0;
        for (int i = 0; i < a.u.dict->n; i++) {
            jv *o = dict_find(b.u.dict, a.u.dict->keys[i].u.str.s, a.u.dict->keys[i].u.str.n);
            if (!o || !equal(a.u.dict->vals[i], *o)) return 0;
        }
        return 1;
    case JV_FUNC: return a.u.func == b.u.func;
    default: return 0;
    }
}

/* -1, 0, 1; *ok = 0 when the two do not order */
static int compare(jv a, jv b, int *ok) {
    *ok = 1;
    if (is_num(a) && is_num(b)) return num(a) < num(b) ? -1 : num(a) > num(b);
    if (a.k == JV_STR && b.k == JV_STR) {
        size_t n = a.u.str.n < b.u.str.n ? a.u.str.n : b.u.str.n;
        int c = memcmp(a.u.str.s, b.u.str.s, n);
        return c ? (c < 0 ? -1 : 1) : a.u.str.n < b.u.str.n ? -1 : a.u.str.n > b.u.str.n;
    }
    *ok = 0;
    return 0;
}

static int contains(ev *e, jv hay, jv needle, int line) {
    if (hay.k == JV_STR) {
        if (needle.k != JV_STR) return efail(e, line, "'in <string>' needs a string on the left"), 0;
        size_t n = needle.u.str.n, h = hay.u.str.n;
        for (size_t i = 0; n <= h && i <= h - n; i++)
            if (memcmp(hay.u.str.s + i, needle.u.str.s, n) == 0) return 1;
        return 0;
    }
    if (hay.k == JV_LIST) {
        for (int i = 0; i < hay.u.list->n; i++)
            if (equal(hay.u.list->v[i], needle)) return 1;
        return 0;
    }
    if (hay.k == JV_DICT) return needle.k == JV_STR && dict_find(hay.u.dict, needle.u.str.s, needle.u.str.n) != NULL;
    if (hay.k == JV_UNDEF) return 0;
    return efail(e, line, "'in' needs a string, list or dict on the right, not %s", kind_name(hay.k)), 0;
}

/* ---- scopes ---- */

static jv lookup(ev *e, const char *name) {
    for (int i = e->n - 1; i >= 0; i--)
        if (!strcmp(e->names[i], name)) return e->vals[i];
    for (int i = 0; i < e->ctx->n; i++)
        if (!strcmp(e->ctx->names[i], name)) return e->ctx->vals[i];
    static const char *const funcs[JF_COUNT] = {"raise_exception", "namespace", "range", "strftime_now"};
    for (int f = 0; f < JF_COUNT; f++)
        if (!strcmp(funcs[f], name)) return (jv){.k = JV_FUNC, .u.func = f};
    return undef();
}

static void assign(ev *e, const char *name, jv v) {
    int base = e->nframes ? e->frames[e->nframes - 1] : 0;
    for (int i = e->n - 1; i >= base; i--)
        if (!strcmp(e->names[i], name)) {
            e->vals[i] = v;
            return;
        }
    KILN_GROW(e->names, e->cap, e->n + 1);
    e->vals = kiln_xrealloc(e->vals, (size_t)e->cap * sizeof *e->vals);
    e->names[e->n] = name;
    e->vals[e->n++] = v;
}

static void push_frame(ev *e) {
    KILN_GROW(e->frames, e->fcap, e->nframes + 1);
    e->frames[e->nframes++] = e->n;
}

static void pop_frame(ev *e) { e->n = e->frames[--e->nframes]; }

/* ---- expressions ---- */

static jv eval(ev *e, const jexpr *x);

static int step(ev *e, int line) {
    if (++e->steps > JINJA_MAX_STEPS) return efail(e, line, "the template runs too long (over %lld steps)", JINJA_MAX_STEPS), 0;
    if (e->a->total > JINJA_MAX_MEM) return efail(e, line, "the template uses too much memory"), 0;
    return !e->failed;
}

static jv str_cat(ev *e, const char *a, size_t an, const char *b, size_t bn, int line) {
    if (an + bn > JINJA_MAX_OUT) return efail(e, line, "a string longer than %zu MiB", JINJA_MAX_OUT >> 20);
    jv v = {.k = JV_STR};
    char *s = ja_alloc(e->a, an + bn + 1);
    memcpy(s, a, an);
    memcpy(s + an, b, bn);
    v.u.str.s = s, v.u.str.n = an + bn;
    return v;
}

static jv arith(ev *e, jop op, jv a, jv b, int line) {
    if (op == JOP_CONCAT) {
        jv sa = to_str(e, a), sb = to_str(e, b);
        return str_cat(e, sa.u.str.s, sa.u.str.n, sb.u.str.s, sb.u.str.n, line);
    }
    if (op == JOP_ADD && a.k == JV_STR && b.k == JV_STR) return str_cat(e, a.u.str.s, a.u.str.n, b.u.str.s, b.u.str.n, line);
    if (op == JOP_ADD && a.k == JV_LIST && b.k == JV_LIST) {
        jv l = {.k = JV_LIST};
        l.u.list = ja_alloc(e->a, sizeof(jlist));
        for (int i = 0; i < a.u.list->n; i++) list_push(e->a, l.u.list, a.u.list->v[i]);
        for (int i = 0; i < b.u.list->n; i++) list_push(e->a, l.u.list, b.u.list->v[i]);
        return l;
    }
    if (op == JOP_MUL && (a.k == JV_STR || b.k == JV_STR) && (a.k == JV_INT || b.k == JV_INT)) {
        jv s = a.k == JV_STR ? a : b;
        long long k = a.k == JV_INT ? a.u.i : b.u.i;
        if (k <= 0 || !s.u.str.n) return mkstr(e->a, "", 0);
        if ((unsigned long long)k > JINJA_MAX_OUT / s.u.str.n) return efail(e, line, "a string longer than %zu MiB", JINJA_MAX_OUT >> 20);
        char *p = ja_alloc(e->a, s.u.str.n * (size_t)k + 1);
        for (long long i = 0; i < k; i++) memcpy(p + s.u.str.n * (size_t)i, s.u.str.s, s.u.str.n);
        jv r = {.k = JV_STR};
        r.u.str.s = p, r.u.str.n = s.u.str.n * (size_t)k;
        return r;
    }
    if (!is_num(a) || !is_num(b))
        return efail(e, line, "cannot apply an arithmetic operator to %s and %s", kind_name(a.k), kind_name(b.k));
    int ints = a.k != JV_FLOAT && b.k != JV_FLOAT;
    long long x = inum(a), y = inum(b);
    double fx = num(a), fy = num(b);
    switch (op) {
    case JOP_ADD:
        if (ints && !__builtin_add_overflow(x, y, &x)) return jint(x);
        return jfloat(fx + fy);
    case JOP_SUB:
        if (ints && !__builtin_sub_overflow(x, y, &x)) return jint(x);
        return jfloat(fx - fy);
    case JOP_MUL:
        if (ints && !__builtin_mul_overflow(x, y, &x)) return jint(x);
        return jfloat(fx * fy);
    case JOP_DIV:
        if (fy == 0) return efail(e, line, "division by zero");
        return jfloat(fx / fy);
    case JOP_FLOORDIV: case JOP_MOD:
        if (fy == 0) return efail(e, line, "division by zero");
        if (ints && !(x == INT64_MIN && y == -1)) {
            long long q = x / y, r = x % y;
            if (r && ((r < 0) != (y < 0))) q--, r += y; /* Python floors */
            return jint(op == JOP_MOD ? r : q);
        }
        return op == JOP_MOD ? jfloat(fx - fy * floor(fx / fy)) : jfloat(floor(fx / fy));
    case JOP_POW: return jfloat(pow(fx, fy));
    default: return efail(e, line, "bad operator");
    }
}

static jv index_of(ev *e, jv obj, jv key, int line) {
    if (obj.k == JV_DICT) {
        if (key.k != JV_STR) return undef();
        jv *v = dict_find(obj.u.dict, key.u.str.s, key.u.str.n);
        return v ? *v : undef();
    }
    if (obj.k == JV_LIST || obj.k == JV_STR) {
        if (key.k != JV_INT) return efail(e, line, "an index must be an integer, not %s", kind_name(key.k));
        long long n = obj.k == JV_LIST ? obj.u.list->n : (long long)obj.u.str.n, i = key.u.i;
        if (i < 0) i += n;
        if (i < 0 || i >= n) return undef();
        return obj.k == JV_LIST ? obj.u.list->v[i] : mkstr(e->a, obj.u.str.s + i, 1);
    }
    if (obj.k == JV_UNDEF) return efail(e, line, "indexing an undefined value");
    return undef();
}

static jv slice(ev *e, jv obj, jv lo, jv hi, jv st, int line) {
    if (obj.k != JV_LIST && obj.k != JV_STR) return efail(e, line, "cannot slice %s", kind_name(obj.k));
    long long n = obj.k == JV_LIST ? obj.u.list->n : (long long)obj.u.str.n;
    long long s = st.k == JV_UNDEF || st.k == JV_NONE ? 1 : inum(st);
    if (s == 0) return efail(e, line, "slice step cannot be zero");
    long long b, en;
    if (lo.k == JV_UNDEF || lo.k == JV_NONE) b = s > 0 ? 0 : n - 1;
    else b = inum(lo), b = b < 0 ? b + n : b, b = s > 0 ? (b < 0 ? 0 : b > n ? n : b) : (b < -1 ? -1 : b > n - 1 ? n - 1 : b);
    if (hi.k == JV_UNDEF || hi.k == JV_NONE) en = s > 0 ? n : -1;
    else en = inum(hi), en = en < 0 ? en + n : en, en = s > 0 ? (en < 0 ? 0 : en > n ? n : en) : (en < -1 ? -1 : en > n - 1 ? n - 1 : en);
    if (obj.k == JV_LIST) {
        jv l = {.k = JV_LIST};
        l.u.list = ja_alloc(e->a, sizeof(jlist));
        for (long long i = b; s > 0 ? i < en : i > en; i += s) list_push(e->a, l.u.list, obj.u.list->v[i]);
        return l;
    }
    sbuf out = {0};
    for (long long i = b; s > 0 ? i < en : i > en; i += s) sb_add(e, &out, obj.u.str.s + i, 1);
    jv r = mkstr(e->a, out.p ? out.p : "", out.n);
    free(out.p);
    return r;
}

static int ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* s stripped of chars (NULL: white space) on the left and/or right */
static jv strip(ev *e, jv s, int left, int right, const jv *chars) {
    const char *p = s.u.str.s;
    size_t n = s.u.str.n;
#define STRIPPABLE(c) (chars ? memchr(chars->u.str.s, (c), chars->u.str.n) != NULL : ws(c))
    while (left && n && STRIPPABLE(*p)) p++, n--;
    while (right && n && STRIPPABLE(p[n - 1])) n--;
#undef STRIPPABLE
    return mkstr(e->a, p, n);
}

static jv case_map(ev *e, jv s, int mode) { /* 0 lower, 1 upper, 2 capitalize, 3 title */
    char *p = ja_strndup(e->a, s.u.str.s, s.u.str.n);
    int start = 1;
    for (size_t i = 0; i < s.u.str.n; i++) {
        char c = p[i];
        int up = mode == 1 || ((mode == 2 && i == 0) || (mode == 3 && start));
        if (up && c >= 'a' && c <= 'z') p[i] = (char)(c - 32);
        else if (!up && c >= 'A' && c <= 'Z') p[i] = (char)(c + 32);
        start = !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'));
    }
    jv r = {.k = JV_STR};
    r.u.str.s = p, r.u.str.n = s.u.str.n;
    return r;
}

static jv replace(ev *e, jv s, jv from, jv to, int line) {
    if (from.k != JV_STR || to.k != JV_STR) return efail(e, line, "replace needs two strings");
    if (!from.u.str.n) return s;
    sbuf out = {0};
    size_t i = 0;
    while (i < s.u.str.n && !e->failed) {
        if (i + from.u.str.n <= s.u.str.n && !memcmp(s.u.str.s + i, from.u.str.s, from.u.str.n)) {
            sb_add(e, &out, to.u.str.s, to.u.str.n);
            i += from.u.str.n;
        } else sb_add(e, &out, s.u.str.s + i++, 1);
    }
    jv r = mkstr(e->a, out.p ? out.p : "", out.n);
    free(out.p);
    return r;
}

static jv split(ev *e, jv s, const jv *sep) {
    jv l = {.k = JV_LIST};
    l.u.list = ja_alloc(e->a, sizeof(jlist));
    const char *p = s.u.str.s, *end = p + s.u.str.n;
    if (!sep) {
        while (p < end) {
            while (p < end && ws(*p)) p++;
            const char *q = p;
            while (q < end && !ws(*q)) q++;
            if (q > p) list_push(e->a, l.u.list, mkstr(e->a, p, (size_t)(q - p)));
            p = q;
        }
        return l;
    }
    size_t k = sep->u.str.n;
    for (;;) {
        const char *q = p;
        while (q + k <= end && memcmp(q, sep->u.str.s, k)) q++;
        if (q + k > end) {
            list_push(e->a, l.u.list, mkstr(e->a, p, (size_t)(end - p)));
            return l;
        }
        list_push(e->a, l.u.list, mkstr(e->a, p, (size_t)(q - p)));
        p = q + k;
    }
}

static jv dict_items(ev *e, jv d, int which) { /* 0 items, 1 keys, 2 values */
    jv l = {.k = JV_LIST};
    l.u.list = ja_alloc(e->a, sizeof(jlist));
    for (int i = 0; i < d.u.dict->n; i++) {
        if (which == 1) list_push(e->a, l.u.list, d.u.dict->keys[i]);
        else if (which == 2) list_push(e->a, l.u.list, d.u.dict->vals[i]);
        else {
            jv pair = {.k = JV_LIST};
            pair.u.list = ja_alloc(e->a, sizeof(jlist));
            list_push(e->a, pair.u.list, d.u.dict->keys[i]);
            list_push(e->a, pair.u.list, d.u.dict->vals[i]);
            list_push(e->a, l.u.list, pair);
        }
    }
    return l;
}

/* a string's characters (UTF-8 sequences) as a list of strings */
static jv chars_of(ev *e, jv s) {
    jv l = {.k = JV_LIST};
    l.u.list = ja_alloc(e->a, sizeof(jlist));
    for (size_t i = 0; i < s.u.str.n;) {
        size_t k = 1;
        while (i + k < s.u.str.n && ((unsigned char)s.u.str.s[i + k] & 0xc0) == 0x80) k++;
        list_push(e->a, l.u.list, mkstr(e->a, s.u.str.s + i, k));
        i += k;
    }
    return l;
}

static jv eval_args(ev *e, const jexpr *x, jv *args, int max) {
    if (x->nargs > max) return efail(e, x->line, "too many arguments");
    for (int i = 0; i < x->nargs; i++) args[i] = eval(e, x->args[i]);
    for (int i = x->nargs; i < max; i++) args[i] = undef();
    return undef();
}

static int is_str(jv v) { return v.k == JV_STR; }

/* obj.name(args) for strings and dicts */
static jv call_method(ev *e, jv obj, const char *name, const jexpr *x) {
    jv a[3];
    eval_args(e, x, a, 3);
    if (e->failed) return undef();
    int n = x->nargs;
    if (obj.k == JV_STR) {
        if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
            if (n && !is_str(a[0]) && a[0].k != JV_NONE) return efail(e, x->line, "%s takes a string", name);
            return strip(e, obj, name[0] != 'r', name[0] != 'l', n && is_str(a[0]) ? &a[0] : NULL);
        }
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
            if (n != 1 || !is_str(a[0])) return efail(e, x->line, "%s takes one string", name);
            size_t k = a[0].u.str.n;
            if (k > obj.u.str.n) return jbool(0);
            const char *at = name[0] == 's' ? obj.u.str.s : obj.u.str.s + obj.u.str.n - k;
            return jbool(memcmp(at, a[0].u.str.s, k) == 0);
        }
        if (!strcmp(name, "split")) {
            if (n && (!is_str(a[0]) || !a[0].u.str.n) && a[0].k != JV_NONE) return efail(e, x->line, "split takes a non-empty string");
            return split(e, obj, n && is_str(a[0]) ? &a[0] : NULL);
        }
        if (!strcmp(name, "lower")) return case_map(e, obj, 0);
        if (!strcmp(name, "upper")) return case_map(e, obj, 1);
        if (!strcmp(name, "capitalize")) return case_map(e, obj, 2);
        if (!strcmp(name, "title")) return case_map(e, obj, 3);
        if (!strcmp(name, "replace")) return n == 2 ? replace(e, obj, a[0], a[1], x->line) : efail(e, x->line, "replace takes two strings");
    }
    if (obj.k == JV_DICT) {
        if (!strcmp(name, "get")) {
            if (n < 1) return efail(e, x->line, "get takes a key");
            jv v = index_of(e, obj, a[0], x->line);
            return v.k == JV_UNDEF ? (n > 1 ? a[1] : (jv){.k = JV_NONE}) : v;
        }
        if (!strcmp(name, "items")) return dict_items(e, obj, 0);
        if (!strcmp(name, "keys")) return dict_items(e, obj, 1);
        if (!strcmp(name, "values")) return dict_items(e, obj, 2);
    }
    return efail(e, x->line, "%s has no method '%s'", kind_name(obj.k), name);
}

static jv call_func(ev *e, int f, const jexpr *x) {
    if (f == JF_NAMESPACE) {
        jv d = {.k = JV_DICT};
        d.u.dict = ja_alloc(e->a, sizeof(jdict));
        for (int i = 0; i < x->nargs; i++) {
            if (!x->kwnames[i]) return efail(e, x->line, "namespace() takes name=value arguments");
            dict_put(e->a, d.u.dict, mkstr(e->a, x->kwnames[i], strlen(x->kwnames[i])), eval(e, x->args[i]));
        }
        return d;
    }
    jv a[3];
    eval_args(e, x, a, 3);
    if (e->failed) return undef();
    if (f == JF_RAISE) {
        jv s = to_str(e, a[0]);
        return efail(e, x->line, "the template raised: %.*s", (int)(s.u.str.n > 400 ? 400 : s.u.str.n), s.u.str.s);
    }
    if (f == JF_RANGE) {
        long long lo = 0, hi, st = 1;
        if (x->nargs == 1) hi = inum(a[0]);
        else if (x->nargs >= 2) lo = inum(a[0]), hi = inum(a[1]), st = x->nargs > 2 ? inum(a[2]) : 1;
        else return efail(e, x->line, "range takes 1 to 3 integers");
        for (int i = 0; i < x->nargs; i++)
            if (a[i].k != JV_INT) return efail(e, x->line, "range takes integers");
        if (st == 0) return efail(e, x->line, "range step cannot be zero");
        double count = ((double)hi - (double)lo) / (double)st;
        if (count > 1000000) return efail(e, x->line, "range of more than a million");
        jv l = {.k = JV_LIST};
        l.u.list = ja_alloc(e->a, sizeof(jlist));
        for (long long i = lo; st > 0 ? i < hi : i > hi; i += st) list_push(e->a, l.u.list, jint(i));
        return l;
    }
    /* strftime_now(format): the local time */
    if (!is_str(a[0])) return efail(e, x->line, "strftime_now takes a format string");
    char fmt[128], buf[256];
    snprintf(fmt, sizeof fmt, "%.*s", (int)(a[0].u.str.n < 127 ? a[0].u.str.n : 127), a[0].u.str.s);
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    size_t k = strftime(buf, sizeof buf, fmt, &tm);
    return mkstr(e->a, buf, k);
}

static jv length_of(ev *e, jv v, int line) {
    switch (v.k) {
    case JV_STR: {
        long long n = 0; /* characters, not bytes */
        for (size_t i = 0; i < v.u.str.n; i++) n += ((unsigned char)v.u.str.s[i] & 0xc0) != 0x80;
        return jint(n);
    }
    case JV_LIST: return jint(v.u.list->n);
    case JV_DICT: return jint(v.u.dict->n);
    case JV_UNDEF: return jint(0);
    default: return efail(e, line, "%s has no length", kind_name(v.k));
    }
}

static int run_test(ev *e, const char *name, jv v, const jv *arg, int line);

/* selectattr / rejectattr (attr[, test[, arg]]) and map(attribute=) */
static jv select_attr(ev *e, jv l, const jexpr *x, int reject) {
    jv a[3];
    eval_args(e, x, a, 3);
    if (e->failed) return undef();
    if (l.k != JV_LIST || x->nargs < 1 || !is_str(a[0])) return efail(e, x->line, "%s needs a list and an attribute name", x->name);
    jv out = {.k = JV_LIST};
    out.u.list = ja_alloc(e->a, sizeof(jlist));
    for (int i = 0; i < l.u.list->n && !e->failed; i++) {
        jv item = l.u.list->v[i];
        jv at = item.k == JV_DICT ? index_of(e, item, a[0], x->line) : undef();
        int ok;
        if (x->nargs < 2) ok = truthy(at);
        else if (!is_str(a[1])) return efail(e, x->line, "the test of %s must be a name", x->name);
        else ok = run_test(e, ja_strndup(e->a, a[1].u.str.s, a[1].u.str.n), at, x->nargs >= 3 ? &a[2] : NULL, x->line);
        if (ok != reject) list_push(e->a, out.u.list, item);
    }
    return out;
}

static jv apply_filter(ev *e, const jexpr *x) {
    jv v = eval(e, x->a);
    if (e->failed) return undef();
    const char *f = x->name;
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr")) return select_attr(e, v, x, f[0] == 'r');
    if (!strcmp(f, "map")) {
        if (x->nargs != 1 || !x->kwnames[0] || strcmp(x->kwnames[0], "attribute"))
            return efail(e, x->line, "only map(attribute=NAME) is supported");
        jv at = eval(e, x->args[0]);
        if (v.k != JV_LIST) return efail(e, x->line, "map needs a list");
        jv out = {.k = JV_LIST};
        out.u.list = ja_alloc(e->a, sizeof(jlist));
        for (int i = 0; i < v.u.list->n; i++)
            list_push(e->a, out.u.list, v.u.list->v[i].k == JV_DICT ? index_of(e, v.u.list->v[i], at, x->line) : undef());
        return out;
    }
    jv a[2];
    eval_args(e, x, a, 2);
    if (e->failed) return undef();
    if (!strcmp(f, "default") || !strcmp(f, "d"))
        return v.k == JV_UNDEF || (x->nargs > 1 && truthy(a[1]) && !truthy(v)) ? (x->nargs ? a[0] : mkstr(e->a, "", 0)) : v;
    if (!strcmp(f, "length") || !strcmp(f, "count")) return length_of(e, v, x->line);
    if (!strcmp(f, "string")) return to_str(e, v);
    if (!strcmp(f, "safe")) return v;
    if (!strcmp(f, "tojson")) {
        sbuf b = {0};
        tojson(e, &b, v, x->line);
        jv r = mkstr(e->a, b.p ? b.p : "", b.n);
        free(b.p);
        return r;
    }
    if (!strcmp(f, "list")) {
        if (v.k == JV_LIST) return v;
        if (v.k == JV_DICT) return dict_items(e, v, 1);
        if (v.k == JV_STR) return chars_of(e, v);
        return efail(e, x->line, "list of %s", kind_name(v.k));
    }
    if (!strcmp(f, "items")) return v.k == JV_DICT ? dict_items(e, v, 0) : efail(e, x->line, "items of %s", kind_name(v.k));
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        if (v.k != JV_LIST && v.k != JV_STR) return efail(e, x->line, "%s of %s", f, kind_name(v.k));
        return index_of(e, v, jint(f[0] == 'f' ? 0 : -1), x->line);
    }
    if (!strcmp(f, "reverse")) return slice(e, v, undef(), undef(), jint(-1), x->line);
    if (!strcmp(f, "join")) {
        if (v.k != JV_LIST) return efail(e, x->line, "join needs a list");
        jv sep = x->nargs ? to_str(e, a[0]) : mkstr(e->a, "", 0);
        sbuf b = {0};
        for (int i = 0; i < v.u.list->n && !e->failed; i++) {
            if (i) sb_add(e, &b, sep.u.str.s, sep.u.str.n);
            jv s = to_str(e, v.u.list->v[i]);
            sb_add(e, &b, s.u.str.s, s.u.str.n);
        }
        jv r = mkstr(e->a, b.p ? b.p : "", b.n);
        free(b.p);
        return r;
    }
    if (!strcmp(f, "int")) {
        if (is_num(v)) return jint(v.k == JV_FLOAT ? (isfinite(v.u.f) && fabs(v.u.f) < 9e18 ? (long long)v.u.f : 0) : inum(v));
        if (v.k == JV_STR) {
            char buf[32];
            snprintf(buf, sizeof buf, "%.*s", (int)(v.u.str.n < 31 ? v.u.str.n : 31), v.u.str.s);
            return jint(strtoll(buf, NULL, 10));
        }
        return jint(0);
    }
    if (!strcmp(f, "float")) {
        if (is_num(v)) return jfloat(num(v));
        if (v.k == JV_STR) {
            char buf[64];
            snprintf(buf, sizeof buf, "%.*s", (int)(v.u.str.n < 63 ? v.u.str.n : 63), v.u.str.s);
            return jfloat(strtod(buf, NULL));
        }
        return jfloat(0);
    }
    if (!strcmp(f, "abs")) {
        if (v.k == JV_INT && v.u.i != INT64_MIN) return jint(v.u.i < 0 ? -v.u.i : v.u.i);
        return is_num(v) ? jfloat(fabs(num(v))) : efail(e, x->line, "abs of %s", kind_name(v.k));
    }
    /* string filters */
    if (v.k == JV_UNDEF) v = mkstr(e->a, "", 0);
    if (!strcmp(f, "trim") || !strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "capitalize") ||
        !strcmp(f, "title") || !strcmp(f, "replace")) {
        v = to_str(e, v);
        if (f[0] == 't' && f[1] == 'r') return strip(e, v, 1, 1, x->nargs && is_str(a[0]) ? &a[0] : NULL);
        if (!strcmp(f, "lower")) return case_map(e, v, 0);
        if (!strcmp(f, "upper")) return case_map(e, v, 1);
        if (!strcmp(f, "capitalize")) return case_map(e, v, 2);
        if (!strcmp(f, "title")) return case_map(e, v, 3);
        return x->nargs == 2 ? replace(e, v, a[0], a[1], x->line) : efail(e, x->line, "replace takes two strings");
    }
    return efail(e, x->line, "unknown filter '%s'", f);
}

static int run_test(ev *e, const char *name, jv v, const jv *arg, int line) {
    if (!strcmp(name, "defined")) return v.k != JV_UNDEF;
    if (!strcmp(name, "undefined")) return v.k == JV_UNDEF;
    if (!strcmp(name, "none")) return v.k == JV_NONE;
    if (!strcmp(name, "string")) return v.k == JV_STR;
    if (!strcmp(name, "number")) return v.k == JV_INT || v.k == JV_FLOAT;
    if (!strcmp(name, "integer")) return v.k == JV_INT;
    if (!strcmp(name, "float")) return v.k == JV_FLOAT;
    if (!strcmp(name, "boolean")) return v.k == JV_BOOL;
    if (!strcmp(name, "true")) return v.k == JV_BOOL && v.u.b;
    if (!strcmp(name, "false")) return v.k == JV_BOOL && !v.u.b;
    if (!strcmp(name, "mapping")) return v.k == JV_DICT;
    if (!strcmp(name, "iterable")) return v.k == JV_LIST || v.k == JV_DICT || v.k == JV_STR;
    if (!strcmp(name, "sequence")) return v.k == JV_LIST || v.k == JV_STR || v.k == JV_DICT;
    if (!strcmp(name, "callable")) return v.k == JV_FUNC;
    if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (v.k != JV_INT) return efail(e, line, "'%s' needs an integer", name), 0;
        return (int)((v.u.i % 2 != 0) == (name[0] == 'o'));
    }
    if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==") || !strcmp(name, "sameas")) {
        if (!arg) return efail(e, line, "'%s' needs a value", name), 0;
        return equal(v, *arg);
    }
    if (!strcmp(name, "ne") || !strcmp(name, "!=")) return arg ? !equal(v, *arg) : (efail(e, line, "'ne' needs a value"), 0);
    if (!strcmp(name, "in")) return arg ? contains(e, *arg, v, line) : (efail(e, line, "'in' needs a value"), 0);
    return efail(e, line, "unknown test '%s'", name), 0;
}

static jv eval(ev *e, const jexpr *x) {
    if (!step(e, x->line)) return undef();
    switch (x->k) {
    case JE_LIT: return x->lit;
    case JE_VAR: return lookup(e, x->name);
    case JE_ATTR: {
        jv o = eval(e, x->a);
        if (e->failed) return undef();
        if (o.k == JV_UNDEF) return efail(e, x->line, "'%s' of an undefined value", x->name);
        if (o.k != JV_DICT) return undef();
        jv *v = dict_find(o.u.dict, x->name, strlen(x->name));
        return v ? *v : undef();
    }
    case JE_INDEX: {
        jv o = eval(e, x->a), k = eval(e, x->b);
        return e->failed ? undef() : index_of(e, o, k, x->line);
    }
    case JE_SLICE: {
        jv o = eval(e, x->a);
        jv lo = x->b ? eval(e, x->b) : undef(), hi = x->c ? eval(e, x->c) : undef();
        jv st = x->args[0] ? eval(e, x->args[0]) : undef();
        return e->failed ? undef() : slice(e, o, lo, hi, st, x->line);
    }
    case JE_CALL: {
        if (x->a->k == JE_ATTR) {
            jv o = eval(e, x->a->a);
            if (e->failed) return undef();
            if (o.k == JV_STR || o.k == JV_DICT) {
                jv *field = o.k == JV_DICT ? dict_find(o.u.dict, x->a->name, strlen(x->a->name)) : NULL;
                if (!field || field->k != JV_FUNC) return call_method(e, o, x->a->name, x);
            }
        }
        jv f = eval(e, x->a);
        if (e->failed) return undef();
        if (f.k != JV_FUNC) return efail(e, x->line, "calling %s, which is not a function", kind_name(f.k));
        return call_func(e, f.u.func, x);
    }
    case JE_FILTER: return apply_filter(e, x);
    case JE_TEST: {
        jv v = eval(e, x->a), arg = x->nargs ? eval(e, x->args[0]) : undef();
        if (e->failed) return undef();
        int r = run_test(e, x->name, v, x->nargs ? &arg : NULL, x->line);
        return jbool(x->negate ? !r : r);
    }
    case JE_NOT: return jbool(!truthy(eval(e, x->a)));
    case JE_NEG: {
        jv v = eval(e, x->a);
        if (v.k == JV_INT && v.u.i != INT64_MIN) return jint(-v.u.i);
        return is_num(v) ? jfloat(-num(v)) : efail(e, x->line, "cannot negate %s", kind_name(v.k));
    }
    case JE_AND: {
        jv l = eval(e, x->a);
        return truthy(l) ? eval(e, x->b) : l;
    }
    case JE_OR: {
        jv l = eval(e, x->a);
        return truthy(l) || e->failed ? l : eval(e, x->b);
    }
    case JE_COND: return truthy(eval(e, x->b)) ? eval(e, x->a) : x->c ? eval(e, x->c) : undef();
    case JE_LIST: {
        jv l = {.k = JV_LIST};
        l.u.list = ja_alloc(e->a, sizeof(jlist));
        for (int i = 0; i < x->nargs; i++) list_push(e->a, l.u.list, eval(e, x->args[i]));
        return l;
    }
    case JE_DICT: {
        jv d = {.k = JV_DICT};
        d.u.dict = ja_alloc(e->a, sizeof(jdict));
        for (int i = 0; i + 1 < x->nargs; i += 2) {
            jv k = eval(e, x->args[i]), v = eval(e, x->args[i + 1]);
            if (k.k != JV_STR) return efail(e, x->line, "dict keys must be strings");
            dict_put(e->a, d.u.dict, k, v);
        }
        return d;
    }
    case JE_BIN: {
        jv l = eval(e, x->a), r = eval(e, x->b);
        if (e->failed) return undef();
        int ok = 1, c;
        switch (x->op) {
        case JOP_EQ: return jbool(equal(l, r));
        case JOP_NE: return jbool(!equal(l, r));
        case JOP_IN: return jbool(contains(e, r, l, x->line));
        case JOP_NOTIN: return jbool(!contains(e, r, l, x->line));
        case JOP_LT: case JOP_LE: case JOP_GT: case JOP_GE:
            c = compare(l, r, &ok);
            if (!ok) return efail(e, x->line, "cannot order %s and %s", kind_name(l.k), kind_name(r.k));
            return jbool(x->op == JOP_LT ? c < 0 : x->op == JOP_LE ? c <= 0 : x->op == JOP_GT ? c > 0 : c >= 0);
        default: return arith(e, x->op, l, r, x->line);
        }
    }
    }
    return efail(e, x->line, "bad expression");
}

/* ---- statements ---- */

static void exec_body(ev *e, const jbody *b);

static void exec_for(ev *e, const jnode *n) {
    jv it = eval(e, n->e);
    if (e->failed) return;
    if (it.k == JV_DICT) it = dict_items(e, it, 1);
    else if (it.k == JV_STR) it = chars_of(e, it);
    if (it.k == JV_UNDEF || it.k == JV_NONE) it = (jv){.k = JV_LIST, .u.list = ja_alloc(e->a, sizeof(jlist))};
    if (it.k != JV_LIST) {
        efail(e, n->line, "cannot loop over %s", kind_name(it.k));
        return;
    }
    jlist *items = it.u.list;
    push_frame(e);
    if (n->filter) { /* "for x in xs if c": the loop sees only the kept items */
        jlist *kept = ja_alloc(e->a, sizeof(jlist));
        for (int i = 0; i < items->n && !e->failed; i++) {
            assign(e, n->target, items->v[i]);
            if (truthy(eval(e, n->filter))) list_push(e->a, kept, items->v[i]);
        }
        items = kept;
    }
    int count = items->n;
    jv loop = {.k = JV_DICT};
    loop.u.dict = ja_alloc(e->a, sizeof(jdict));
    static const char *const keys[] = {"index0", "index", "revindex0", "revindex", "first", "last", "length",
                                       "previtem", "nextitem"};
    jv kv[9];
    for (int k = 0; k < 9; k++) kv[k] = mkstr(e->a, keys[k], strlen(keys[k]));
    for (int i = 0; i < count && !e->failed; i++) {
        jv item = items->v[i];
        if (n->target2) {
            if (item.k != JV_LIST || item.u.list->n != 2) {
                efail(e, n->line, "cannot unpack %s into two loop variables", kind_name(item.k));
                break;
            }
            assign(e, n->target, item.u.list->v[0]);
            assign(e, n->target2, item.u.list->v[1]);
        } else assign(e, n->target, item);
        dict_put(e->a, loop.u.dict, kv[0], jint(i));
        dict_put(e->a, loop.u.dict, kv[1], jint(i + 1));
        dict_put(e->a, loop.u.dict, kv[2], jint(count - i - 1));
        dict_put(e->a, loop.u.dict, kv[3], jint(count - i));
        dict_put(e->a, loop.u.dict, kv[4], jbool(i == 0));
        dict_put(e->a, loop.u.dict, kv[5], jbool(i == count - 1));
        dict_put(e->a, loop.u.dict, kv[6], jint(count));
        dict_put(e->a, loop.u.dict, kv[7], i ? items->v[i - 1] : undef());
        dict_put(e->a, loop.u.dict, kv[8], i + 1 < count ? items->v[i + 1] : undef());
        assign(e, "loop", loop);
        exec_body(e, &n->body);
        e->cont = 0;
        if (e->brk) {
            e->brk = 0;
            break;
        }
    }
    pop_frame(e);
    if (!count && !e->failed) exec_body(e, &n->alt);
}

static void exec_node(ev *e, const jnode *n) {
    if (!step(e, n->line)) return;
    switch (n->k) {
    case JN_TEXT: sb_add(e, &e->out, n->text, n->len); break;
    case JN_OUT: {
        jv v = eval(e, n->e);
        if (!e->failed) repr(e, &e->out, v, 0);
        break;
    }
    case JN_IF: exec_body(e, truthy(eval(e, n->e)) ? &n->body : &n->alt); break;
    case JN_FOR: exec_for(e, n); break;
    case JN_SET: {
        jv v = eval(e, n->e);
        if (e->failed) break;
        if (!n->attr) {
            assign(e, n->target, v);
            break;
        }
        jv ns = lookup(e, n->target);
        if (ns.k != JV_DICT) {
            efail(e, n->line, "'set %s.%s': %s is not a namespace", n->target, n->attr, n->target);
            break;
        }
        dict_put(e->a, ns.u.dict, mkstr(e->a, n->attr, strlen(n->attr)), v);
        break;
    }
    case JN_BREAK: e->brk = 1; break;
    case JN_CONTINUE: e->cont = 1; break;
    }
}

static void exec_body(ev *e, const jbody *b) {
    for (int i = 0; i < b->count && !e->failed && !e->brk && !e->cont; i++) exec_node(e, b->n[i]);
}

kiln_status jinja_render(const char *tmpl, size_t n, const jinja_ctx *c, char **out, char *err, size_t errlen) {
    *out = NULL;
    if (errlen) err[0] = 0;
    jarena a = {0};
    jbody *root = jinja_parse_tree(&a, tmpl, n, err, errlen);
    if (!root) {
        ja_free(&a);
        return KILN_ERR_FORMAT;
    }
    jinja_ctx empty = {0};
    ev e = {.a = &a, .ctx = c ? c : &empty, .err = err, .errlen = errlen};
    sb_add(&e, &e.out, "", 0);
    exec_body(&e, root);
    free(e.names);
    free(e.vals);
    free(e.frames);
    ja_free(&a);
    if (e.failed) {
        free(e.out.p);
        return KILN_ERR_INVALID;
    }
    *out = e.out.p;
    return KILN_OK;
}
