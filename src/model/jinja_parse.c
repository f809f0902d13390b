/* jinja_parse.c — a chat template's text to its syntax tree (jinja_impl.h):
 * the lexer (text, tags, whitespace control with trim_blocks and
 * lstrip_blocks as Hugging Face sets them) and a recursive-descent parser
 * with Jinja's operator precedence:
 *   x if c else y  <  or  <  and  <  not  <  comparisons, in  <  + -  <  ~
 *   <  * / // %  <  **  <  unary -  <  primary with .attr [i] (args),
 *   then | filters and "is" tests
 * Filters bind tighter than arithmetic, so a + b | trim is a + (b | trim).
 *
 * Invariants: every token and node is in the render's arena; nesting
 * deeper than JINJA_MAX_DEPTH is an error, not a stack overflow; errors
 * name the template line.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_impl.h"

/* ---- arena ---- */

void *ja_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->used + n > a->head->cap) {
        size_t cap = n > 65536 ? n : 65536;
        jarena_block *b = calloc(1, sizeof *b + cap);
        if (!b) abort(); /* as kiln_xmalloc: out of memory is not recoverable */
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    a->total += n;
    memset(p, 0, n);
    return p;
}

char *ja_strndup(jarena *a, const char *s, size_t n) {
    char *p = ja_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void ja_free(jarena *a) {
    while (a->head) {
        jarena_block *b = a->head;
        a->head = b->next;
        free(b);
    }
}

/* ---- lexer ---- */

typedef enum tt { T_TEXT, T_EXPR_OPEN, T_EXPR_CLOSE, T_STMT_OPEN, T_STMT_CLOSE, T_NAME, T_STR, T_INT, T_FLOAT, T_OP, T_EOF } tt;

typedef struct tok {
    tt t;
    const char *s; /* T_TEXT, T_NAME, T_STR (unescaped), T_OP: text; NUL-terminated except T_TEXT */
    size_t n;
    long long i;
    double f;
    int line;
} tok;

typedef struct parser {
    jarena *a;
    tok *toks;
    int n, cap, pos, depth;
    char *err;
    size_t errlen;
    int failed;
} parser;

static int pfail(parser *p, int line, const char *fmt, ...) {
    if (p->failed) return 0;
    p->failed = 1;
    int k = snprintf(p->err, p->errlen, "chat template line %d: ", line);
    if (k < 0) k = 0;
    if ((size_t)k < p->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return 0;
}

static tok *push(parser *p, tt t, const char *s, size_t n, int line) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        tok *nt = ja_alloc(p->a, (size_t)cap * sizeof *nt);
        if (p->n) memcpy(nt, p->toks, (size_t)p->n * sizeof *nt);
        p->toks = nt;
        p->cap = cap;
    }
    tok *k = &p->toks[p->n++];
    memset(k, 0, sizeof *k);
    k->t = t, k->s = s, k->n = n, k->line = line;
    return k;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int hexval(char c) {
    return is_digit(c) ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xe0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 63)), o[2] = (char)(0x80 | (cp & 63)), 3;
    return o[0] = (char)(0xf0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 63)),
           o[2] = (char)(0x80 | ((cp >> 6) & 63)), o[3] = (char)(0x80 | (cp & 63)), 4;
}

/* a quoted string at src[*i] (the quote); Python's escapes */
static int lex_string(parser *p, const char *src, size_t n, size_t *i, int line) {
    char q = src[*i];
    size_t j = *i + 1;
    char *o = ja_alloc(p->a, n - *i + 1); /* the unescaped text is never longer */
    size_t m = 0;
    while (j < n && src[j] != q) {
        char c = src[j++];
        if (c != '\\' || j >= n) {
            o[m++] = c;
            continue;
        }
        char e = src[j++];
        switch (e) {
        case 'n': o[m++] = '\n'; break;
        case 't': o[m++] = '\t'; break;
        case 'r': o[m++] = '\r'; break;
        case 'b': o[m++] = '\b'; break;
        case 'f': o[m++] = '\f'; break;
        case 'v': o[m++] = '\v'; break;
        case '0': o[m++] = '\0'; break;
        case '\\': case '\'': case '"': o[m++] = e; break;
        case 'x': case 'u': {
            int want = e == 'x' ? 2 : 4;
            unsigned cp = 0;
            int k = 0;
            for (; k < want && j + (size_t)k < n && hexval(src[j + (size_t)k]) >= 0; k++)
                cp = cp * 16 + (unsigned)hexval(src[j + (size_t)k]);
            if (k < want) return pfail(p, line, "bad \\%c escape in a string", e);
            j += (size_t)want;
            if (cp >= 0xd800 && cp < 0xe000) cp = 0xfffd;
            m += put_utf8(o + m, cp);
            break;
        }
        default: o[m++] = '\\', o[m++] = e;
        }
    }
    if (j >= n) return pfail(p, line, "a string is not closed");
    o[m] = 0;
    push(p, T_STR, o, m, line);
    *i = j + 1;
    return 1;
}

static const char *const ops3[] = {"**", "//", "==", "!=", "<=", ">=", NULL};

/* the tokens inside one tag, up to its closer; *i at the first byte after the opener */
static int lex_tag(parser *p, const char *src, size_t n, size_t *i, int *line, char kind, int *strip_after) {
    int braces = 0;
    for (;;) {
        while (*i < n && is_space(src[*i])) *line += src[(*i)++] == '\n';
        if (*i >= n) return pfail(p, *line, "a {%c tag is not closed", kind);
        const char *s = src + *i;
        size_t left = n - *i;
        char close = kind == '{' ? '}' : '%';
        if (braces == 0 && left >= 3 && s[0] == '-' && s[1] == close && s[2] == '}') {
            *strip_after = 1, *i += 3;
            return 1;
        }
        if (braces == 0 && left >= 2 && s[0] == close && s[1] == '}') {
            *strip_after = 0, *i += 2;
            return 1;
        }
        if (s[0] == '\'' || s[0] == '"') {
            if (!lex_string(p, src, n, i, *line)) return 0;
            continue;
        }
        if (is_alpha(s[0])) {
            size_t k = 1;
            while (k < left && (is_alpha(s[k]) || is_digit(s[k]))) k++;
            push(p, T_NAME, ja_strndup(p->a, s, k), k, *line);
            *i += k;
            continue;
        }
        if (is_digit(s[0])) {
            size_t k = 0;
            while (k < left && is_digit(s[k])) k++;
            int flt = k + 1 < left && s[k] == '.' && is_digit(s[k + 1]);
            if (flt) {
                k++;
                while (k < left && is_digit(s[k])) k++;
            }
            char *num = ja_strndup(p->a, s, k);
            tok *t = push(p, flt ? T_FLOAT : T_INT, num, k, *line);
            if (flt) t->f = strtod(num, NULL);
            else {
                if (k > 18) return pfail(p, *line, "the integer %s is too large", num);
                t->i = strtoll(num, NULL, 10);
            }
            *i += k;
            continue;
        }
        size_t k = 1;
        for (int o = 0; ops3[o]; o++)
            if (left >= 2 && s[0] == ops3[o][0] && s[1] == ops3[o][1]) k = 2;
        if (k == 1 && !strchr("()[]{},:.|+-*/%~<>=", s[0]))
            return pfail(p, *line, "unexpected character '%c' in a tag", s[0]);
        /* a dict literal's closing braces are not the tag's closer */
        if (s[0] == '{') braces++;
        if (s[0] == '}' && braces > 0) braces--;
        push(p, T_OP, ja_strndup(p->a, s, k), k, *line);
        *i += k;
    }
}

/* the template to tokens, with whitespace control applied to the text tokens */
static int lex(parser *p, const char *src, size_t n) {
    size_t i = 0;
    int line = 1, strip_next = 0, trim_nl = 0;
    while (i < n) {
        size_t start = i;
        while (i < n && !(src[i] == '{' && i + 1 < n && (src[i + 1] == '{' || src[i + 1] == '%' || src[i + 1] == '#')))
            i++;
        const char *t = src + start;
        size_t tn = i - start;
        if (strip_next)
            while (tn && is_space(*t)) t++, tn--;
        else if (trim_nl && tn && *t == '\n') t++, tn--;
        else if (trim_nl && tn >= 2 && t[0] == '\r' && t[1] == '\n') t += 2, tn -= 2;
        strip_next = trim_nl = 0;
        int text_line = line;
        for (size_t k = start; k < i; k++) line += src[k] == '\n';
        if (i >= n) {
            if (tn) push(p, T_TEXT, t, tn, text_line);
            break;
        }
        char kind = src[i + 1];
        char mod = i + 2 < n ? src[i + 2] : 0;
        if (mod == '-') {
            while (tn && is_space(t[tn - 1])) tn--;
        } else if (kind != '{' && mod != '+') { /* lstrip_blocks */
            size_t k = tn;
            while (k && (t[k - 1] == ' ' || t[k - 1] == '\t')) k--;
            if (k == 0 ? (t == src || t[-1] == '\n') : t[k - 1] == '\n') tn = k;
        }
        if (tn) push(p, T_TEXT, t, tn, text_line);
        i += (mod == '-' || mod == '+') ? 3u : 2u;
        if (kind == '#') {
            size_t j = i;
            while (j + 1 < n && !(src[j] == '#' && src[j + 1] == '}')) line += src[j++] == '\n';
            if (j + 1 >= n) return pfail(p, line, "a {# comment is not closed");
            strip_next = j > i && src[j - 1] == '-';
            trim_nl = !strip_next;
            i = j + 2;
            continue;
        }
        push(p, kind == '{' ? T_EXPR_OPEN : T_STMT_OPEN, NULL, 0, line);
        int strip_after = 0;
        if (!lex_tag(p, src, n, &i, &line, kind, &strip_after)) return 0;
        push(p, kind == '{' ? T_EXPR_CLOSE : T_STMT_CLOSE, NULL, 0, line);
        strip_next = strip_after;
        trim_nl = !strip_after && kind == '%'; /* trim_blocks */
    }
    push(p, T_EOF, NULL, 0, line);
    return 1;
}

/* ---- parser: expressions ---- */

static tok *peek(parser *p) { return &p->toks[p->pos]; }
static tok *next(parser *p) {
    tok *t = &p->toks[p->pos];
    if (t->t != T_EOF) p->pos++;
    return t;
}
static int is_op(parser *p, const char *op) { return peek(p)->t == T_OP && strcmp(peek(p)->s, op) == 0; }
static int is_name(parser *p, const char *nm) { return peek(p)->t == T_NAME && strcmp(peek(p)->s, nm) == 0; }
static int accept_op(parser *p, const char *op) { return is_op(p, op) ? (next(p), 1) : 0; }
static int accept_name(parser *p, const char *nm) { return is_name(p, nm) ? (next(p), 1) : 0; }

static const char *tok_desc(const tok *t) {
    switch (t->t) {
    case T_NAME: case T_OP: return t->s;
    case T_STR: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    case T_EXPR_CLOSE: return "}}";
    case T_STMT_CLOSE: return "%}";
    case T_EOF: return "the end of the template";
    default: return "text";
    }
}

static int expect_op(parser *p, const char *op) {
    if (accept_op(p, op)) return 1;
    return pfail(p, peek(p)->line, "expected '%s', found '%s'", op, tok_desc(peek(p)));
}

static jexpr *mk(parser *p, je_kind k, int line) {
    jexpr *e = ja_alloc(p->a, sizeof *e);
    e->k = k;
    e->line = line;
    return e;
}

static jexpr *parse_expr(parser *p);

static jexpr *bin(parser *p, jop op, jexpr *a, jexpr *b, int line) {
    jexpr *e = mk(p, JE_BIN, line);
    e->op = op, e->a = a, e->b = b;
    return e;
}

/* (args) after a callee or filter name: positional and name=value */
static int parse_args(parser *p, jexpr *e) {
    jexpr *args[64];
    const char *kw[64];
    int n = 0;
    if (!accept_op(p, "(")) return 1;
    while (!accept_op(p, ")")) {
        if (n && !expect_op(p, ",")) return 0;
        if (accept_op(p, ")")) break; /* trailing comma */
        if (n == 64) return pfail(p, peek(p)->line, "more than 64 arguments");
        kw[n] = NULL;
        if (peek(p)->t == T_NAME && p->toks[p->pos + 1].t == T_OP && strcmp(p->toks[p->pos + 1].s, "=") == 0) {
            kw[n] = next(p)->s;
            next(p);
        }
        if (!(args[n++] = parse_expr(p))) return 0;
    }
    e->nargs = n;
    e->args = ja_alloc(p->a, (size_t)(n ? n : 1) * sizeof *e->args);
    e->kwnames = ja_alloc(p->a, (size_t)(n ? n : 1) * sizeof *e->kwnames);
    memcpy(e->args, args, (size_t)n * sizeof *args);
    memcpy(e->kwnames, kw, (size_t)n * sizeof *kw);
    return 1;
}

/* [a, b], {k: v}, (a) */
static jexpr *parse_collection(parser *p, const char *close, int dict, int line) {
    jexpr *e = mk(p, dict ? JE_DICT : JE_LIST, line);
    int cap = 8, n = 0;
    jexpr **items = ja_alloc(p->a, (size_t)cap * sizeof *items);
    while (!accept_op(p, close)) {
        if (n && !expect_op(p, ",")) return NULL;
        if (accept_op(p, close)) break;
        if (n + 2 > cap) {
            jexpr **ni = ja_alloc(p->a, (size_t)(cap *= 2) * sizeof *ni);
            memcpy(ni, items, (size_t)n * sizeof *ni);
            items = ni;
        }
        if (!(items[n++] = parse_expr(p))) return NULL;
        if (dict && (!expect_op(p, ":") || !(items[n++] = parse_expr(p)))) return NULL;
    }
    e->args = items;
    e->nargs = n;
    return e;
}

static jexpr *parse_primary(parser *p) {
    tok *t = next(p);
    jexpr *e;
    switch (t->t) {
    case T_STR:
        e = mk(p, JE_LIT, t->line);
        e->lit.k = JV_STR, e->lit.u.str.s = t->s, e->lit.u.str.n = t->n;
        /* adjacent literals concatenate, as in Python */
        while (peek(p)->t == T_STR) {
            tok *u = next(p);
            char *s = ja_alloc(p->a, e->lit.u.str.n + u->n + 1);
            memcpy(s, e->lit.u.str.s, e->lit.u.str.n);
            memcpy(s + e->lit.u.str.n, u->s, u->n);
            e->lit.u.str.s = s, e->lit.u.str.n += u->n;
        }
        return e;
    case T_INT:
        e = mk(p, JE_LIT, t->line);
        e->lit.k = JV_INT, e->lit.u.i = t->i;
        return e;
    case T_FLOAT:
        e = mk(p, JE_LIT, t->line);
        e->lit.k = JV_FLOAT, e->lit.u.f = t->f;
        return e;
    case T_NAME:
        e = mk(p, JE_LIT, t->line);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) e->lit.k = JV_BOOL, e->lit.u.b = 1;
        else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) e->lit.k = JV_BOOL;
        else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) e->lit.k = JV_NONE;
        else e->k = JE_VAR, e->name = t->s;
        return e;
    case T_OP:
        if (!strcmp(t->s, "(")) {
            jexpr *in = parse_expr(p);
            if (!in) return NULL;
            if (is_op(p, ",")) { /* a tuple: a list here */
                jexpr *l = parse_collection(p, ")", 0, t->line);
                if (!l) return NULL;
                jexpr **items = ja_alloc(p->a, (size_t)(l->nargs + 1) * sizeof *items);
                items[0] = in;
                memcpy(items + 1, l->args, (size_t)l->nargs * sizeof *items);
                l->args = items, l->nargs++;
                return l;
            }
            return expect_op(p, ")") ? in : NULL;
        }
        if (!strcmp(t->s, "[")) return parse_collection(p, "]", 0, t->line);
        if (!strcmp(t->s, "{")) return parse_collection(p, "}", 1, t->line);
        /* fall through */
    default: pfail(p, t->line, "unexpected '%s' in an expression", tok_desc(t)); return NULL;
    }
}

static jexpr *parse_postfix(parser *p, jexpr *e) {
    while (e) {
        int line = peek(p)->line;
        if (accept_op(p, ".")) {
            tok *t = next(p);
            if (t->t != T_NAME && t->t != T_INT) {
                pfail(p, t->line, "expected a name after '.'");
                return NULL;
            }
            jexpr *a = mk(p, t->t == T_NAME ? JE_ATTR : JE_INDEX, line);
            a->a = e;
            if (t->t == T_NAME) a->name = t->s;
            else a->b = mk(p, JE_LIT, line), a->b->lit.k = JV_INT, a->b->lit.u.i = t->i;
            e = a;
        } else if (accept_op(p, "[")) {
            jexpr *lo = NULL, *hi = NULL, *step = NULL;
            if (!is_op(p, ":") && !(lo = parse_expr(p))) return NULL;
            if (accept_op(p, ":")) {
                if (!is_op(p, "]") && !is_op(p, ":") && !(hi = parse_expr(p))) return NULL;
                if (accept_op(p, ":") && !is_op(p, "]") && !(step = parse_expr(p))) return NULL;
                jexpr *s = mk(p, JE_SLICE, line);
                s->a = e, s->b = lo, s->c = hi;
                s->args = ja_alloc(p->a, sizeof *s->args);
                s->args[0] = step;
                e = s;
            } else {
                jexpr *ix = mk(p, JE_INDEX, line);
                ix->a = e, ix->b = lo;
                e = ix;
            }
            if (!expect_op(p, "]")) return NULL;
        } else if (is_op(p, "(")) {
            jexpr *c = mk(p, JE_CALL, line);
            c->a = e;
            if (!parse_args(p, c)) return NULL;
            e = c;
        } else break;
    }
    return e;
}

/* | filter(args) and is [not] test(args), left to right */
static jexpr *parse_filters(parser *p, jexpr *e) {
    while (e) {
        int line = peek(p)->line;
        if (accept_op(p, "|")) {
            tok *t = next(p);
            if (t->t != T_NAME) {
                pfail(p, t->line, "expected a filter name after '|'");
                return NULL;
            }
            jexpr *f = mk(p, JE_FILTER, line);
            f->a = e, f->name = t->s;
            if (!parse_args(p, f)) return NULL;
            e = f;
        } else if (accept_name(p, "is")) {
            jexpr *f = mk(p, JE_TEST, line);
            f->negate = accept_name(p, "not");
            tok *t = next(p);
            if (t->t != T_NAME) {
                pfail(p, t->line, "expected a test name after 'is'");
                return NULL;
            }
            f->a = e, f->name = t->s;
            if (is_op(p, "(")) {
                if (!parse_args(p, f)) return NULL;
            } else if (peek(p)->t == T_STR || peek(p)->t == T_INT || peek(p)->t == T_FLOAT) {
                /* "is equalto 3": one argument without parentheses */
                f->nargs = 1;
                f->args = ja_alloc(p->a, sizeof *f->args);
                f->kwnames = ja_alloc(p->a, sizeof *f->kwnames);
                if (!(f->args[0] = parse_primary(p))) return NULL;
            }
            e = f;
        } else break;
    }
    return e;
}

static jexpr *parse_unary(parser *p) {
    int line = peek(p)->line;
    if (accept_op(p, "-") || accept_op(p, "+")) {
        int neg = p->toks[p->pos - 1].s[0] == '-';
        jexpr *in = parse_unary(p);
        if (!in || !neg) return in;
        jexpr *e = mk(p, JE_NEG, line);
        e->a = in;
        return e;
    }
    return parse_filters(p, parse_postfix(p, parse_primary(p)));
}

static jexpr *parse_pow(parser *p) {
    jexpr *e = parse_unary(p);
    while (e && is_op(p, "**")) {
        int line = next(p)->line;
        jexpr *r = parse_unary(p);
        e = r ? bin(p, JOP_POW, e, r, line) : NULL;
    }
    return e;
}

static jexpr *parse_math2(parser *p) {
    jexpr *e = parse_pow(p);
    while (e) {
        jop op;
        if (is_op(p, "*")) op = JOP_MUL;
        else if (is_op(p, "/")) op = JOP_DIV;
        else if (is_op(p, "//")) op = JOP_FLOORDIV;
        else if (is_op(p, "%")) op = JOP_MOD;
        else break;
        int line = next(p)->line;
        jexpr *r = parse_pow(p);
        e = r ? bin(p, op, e, r, line) : NULL;
    }
    return e;
}

static jexpr *parse_concat(parser *p) {
    jexpr *e = parse_math2(p);
    while (e && is_op(p, "~")) {
        int line = next(p)->line;
        jexpr *r = parse_math2(p);
        e = r ? bin(p, JOP_CONCAT, e, r, line) : NULL;
    }
    return e;
}

static jexpr *parse_math1(parser *p) {
    jexpr *e = parse_concat(p);
    while (e && (is_op(p, "+") || is_op(p, "-"))) {
        jop op = peek(p)->s[0] == '+' ? JOP_ADD : JOP_SUB;
        int line = next(p)->line;
        jexpr *r = parse_concat(p);
        e = r ? bin(p, op, e, r, line) : NULL;
    }
    return e;
}

static jexpr *parse_compare(parser *p) {
    jexpr *e = parse_math1(p);
    while (e) {
        jop op;
        if (is_op(p, "==")) op = JOP_EQ;
        else if (is_op(p, "!=")) op = JOP_NE;
        else if (is_op(p, "<")) op = JOP_LT;
        else if (is_op(p, "<=")) op = JOP_LE;
        else if (is_op(p, ">")) op = JOP_GT;
        else if (is_op(p, ">=")) op = JOP_GE;
        else if (is_name(p, "in")) op = JOP_IN;
        else if (is_name(p, "not") && p->toks[p->pos + 1].t == T_NAME && !strcmp(p->toks[p->pos + 1].s, "in")) {
            next(p);
            op = JOP_NOTIN;
        } else break;
        int line = next(p)->line;
        jexpr *r = parse_math1(p);
        e = r ? bin(p, op, e, r, line) : NULL;
    }
    return e;
}

static jexpr *parse_not(parser *p) {
    int line = peek(p)->line;
    if (accept_name(p, "not")) {
        if (++p->depth > JINJA_MAX_DEPTH) {
            pfail(p, line, "expressions nested too deeply");
            return NULL;
        }
        jexpr *in = parse_not(p);
        p->depth--;
        if (!in) return NULL;
        jexpr *e = mk(p, JE_NOT, line);
        e->a = in;
        return e;
    }
    return parse_compare(p);
}

static jexpr *parse_and(parser *p) {
    jexpr *e = parse_not(p);
    while (e && is_name(p, "and")) {
        int line = next(p)->line;
        jexpr *r = parse_not(p), *a = mk(p, JE_AND, line);
        a->a = e, a->b = r;
        e = r ? a : NULL;
    }
    return e;
}

static jexpr *parse_or(parser *p) {
    jexpr *e = parse_and(p);
    while (e && is_name(p, "or")) {
        int line = next(p)->line;
        jexpr *r = parse_and(p), *o = mk(p, JE_OR, line);
        o->a = e, o->b = r;
        e = r ? o : NULL;
    }
    return e;
}

/* a if cond else b (else optional: undefined) */
static jexpr *parse_expr(parser *p) {
    if (++p->depth > JINJA_MAX_DEPTH) {
        pfail(p, peek(p)->line, "expressions nested too deeply");
        return NULL;
    }
    jexpr *e = parse_or(p);
    while (e && is_name(p, "if")) {
        int line = next(p)->line;
        jexpr *c = parse_or(p), *alt = NULL;
        if (!c) return NULL;
        if (accept_name(p, "else") && !(alt = parse_expr(p))) return NULL;
        jexpr *x = mk(p, JE_COND, line);
        x->a = e, x->b = c, x->c = alt;
        e = x;
    }
    p->depth--;
    return e;
}

/* ---- parser: statements ---- */

static int parse_body(parser *p, jbody *b, const char *const *ends, const char **which);

static void body_add(parser *p, jbody *b, int *cap, jnode *n) {
    if (b->count == *cap) {
        int nc = *cap ? 2 * *cap : 8;
        jnode **nn = ja_alloc(p->a, (size_t)nc * sizeof *nn);
        if (b->count) memcpy(nn, b->n, (size_t)b->count * sizeof *nn);
        b->n = nn;
        *cap = nc;
    }
    b->n[b->count++] = n;
}

static int end_tag(parser *p) {
    if (peek(p)->t == T_STMT_CLOSE) return next(p), 1;
    return pfail(p, peek(p)->line, "expected '%%}', found '%s'", tok_desc(peek(p)));
}

static jnode *mknode(parser *p, jn_kind k, int line) {
    jnode *n = ja_alloc(p->a, sizeof *n);
    n->k = k;
    n->line = line;
    return n;
}

/* after "if" (or "elif"): cond %} body {% elif/else/endif */
static jnode *parse_if(parser *p, int line) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jnode *n = mknode(p, JN_IF, line);
    const char *which = NULL;
    if (!(n->e = parse_expr(p)) || !end_tag(p) || !parse_body(p, &n->body, ends, &which)) return NULL;
    if (!strcmp(which, "elif")) {
        jnode *in = parse_if(p, peek(p)->line);
        if (!in) return NULL;
        n->alt.n = ja_alloc(p->a, sizeof *n->alt.n);
        n->alt.n[0] = in, n->alt.count = 1;
        return n;
    }
    if (!strcmp(which, "else")) {
        static const char *const ends2[] = {"endif", NULL};
        if (!end_tag(p) || !parse_body(p, &n->alt, ends2, &which)) return NULL;
    }
    return end_tag(p) ? n : NULL;
}

static jnode *parse_for(parser *p, int line) {
    jnode *n = mknode(p, JN_FOR, line);
    tok *t = next(p);
    if (t->t != T_NAME) return pfail(p, t->line, "expected a loop variable after 'for'"), NULL;
    n->target = t->s;
    if (accept_op(p, ",")) {
        t = next(p);
        if (t->t != T_NAME) return pfail(p, t->line, "expected a second loop variable"), NULL;
        n->target2 = t->s;
    }
    if (!accept_name(p, "in")) return pfail(p, peek(p)->line, "expected 'in' in a for loop"), NULL;
    if (!(n->e = parse_or(p))) return NULL; /* no "x if c else y" here: "if" filters the loop */
    if (accept_name(p, "if") && !(n->filter = parse_or(p))) return NULL;
    accept_name(p, "recursive");
    static const char *const ends[] = {"else", "endfor", NULL};
    const char *which = NULL;
    if (!end_tag(p) || !parse_body(p, &n->body, ends, &which)) return NULL;
    if (!strcmp(which, "else")) {
        static const char *const ends2[] = {"endfor", NULL};
        if (!end_tag(p) || !parse_body(p, &n->alt, ends2, &which)) return NULL;
    }
    return end_tag(p) ? n : NULL;
}

static jnode *parse_set(parser *p, int line) {
    jnode *n = mknode(p, JN_SET, line);
    tok *t = next(p);
    if (t->t != T_NAME) return pfail(p, t->line, "expected a name after 'set'"), NULL;
    n->target = t->s;
    if (accept_op(p, ".")) {
        t = next(p);
        if (t->t != T_NAME) return pfail(p, t->line, "expected an attribute name after '.'"), NULL;
        n->attr = t->s;
    }
    if (is_op(p, ",")) return pfail(p, line, "'set' with several targets is not supported"), NULL;
    if (!accept_op(p, "=")) return pfail(p, line, "block 'set' (without '=') is not supported"), NULL;
    if (!(n->e = parse_expr(p))) return NULL;
    return end_tag(p) ? n : NULL;
}

/* nodes up to one of ends (its name consumed, its tag not yet closed); ends
 * NULL: up to the end of the template */
static int parse_body(parser *p, jbody *b, const char *const *ends, const char **which) {
    int cap = 0, line0 = peek(p)->line;
    if (++p->depth > JINJA_MAX_DEPTH) return pfail(p, line0, "blocks nested too deeply");
    for (;;) {
        tok *t = next(p);
        if (t->t == T_EOF) {
            if (!ends) break;
            return pfail(p, t->line, "the template ends inside a block (expected {%% %s %%})", ends[0]);
        }
        if (t->t == T_TEXT) {
            jnode *n = mknode(p, JN_TEXT, t->line);
            n->text = t->s, n->len = t->n;
            body_add(p, b, &cap, n);
            continue;
        }
        if (t->t == T_EXPR_OPEN) {
            jnode *n = mknode(p, JN_OUT, t->line);
            if (!(n->e = parse_expr(p))) return 0;
            if (next(p)->t != T_EXPR_CLOSE) return pfail(p, t->line, "expected '}}' after an expression");
            body_add(p, b, &cap, n);
            continue;
        }
        if (t->t != T_STMT_OPEN) return pfail(p, t->line, "unexpected '%s'", tok_desc(t));
        tok *kw = next(p);
        if (kw->t != T_NAME) return pfail(p, kw->line, "expected a tag name after '{%%'");
        for (int e = 0; ends && ends[e]; e++)
            if (!strcmp(kw->s, ends[e])) {
                *which = ends[e];
                p->depth--;
                return 1;
            }
        jnode *n = NULL;
        if (!strcmp(kw->s, "if")) n = parse_if(p, kw->line);
        else if (!strcmp(kw->s, "for")) n = parse_for(p, kw->line);
        else if (!strcmp(kw->s, "set")) n = parse_set(p, kw->line);
        else if (!strcmp(kw->s, "break") || !strcmp(kw->s, "continue")) {
            n = mknode(p, kw->s[0] == 'b' ? JN_BREAK : JN_CONTINUE, kw->line);
            if (!end_tag(p)) return 0;
        } else if (!strcmp(kw->s, "generation") || !strcmp(kw->s, "endgeneration")) {
            /* Hugging Face's marker of assistant text: renders its body as is */
            if (!end_tag(p)) return 0;
            continue;
        } else return pfail(p, kw->line, "unsupported or misplaced tag '%s'", kw->s);
        if (!n) return 0;
        body_add(p, b, &cap, n);
    }
    p->depth--;
    return 1;
}

jbody *jinja_parse_tree(jarena *a, const char *src, size_t n, char *err, size_t errlen) {
    parser p = {.a = a, .err = err, .errlen = errlen};
    if (!lex(&p, src, n)) return NULL;
    jbody *b = ja_alloc(a, sizeof *b);
    if (!parse_body(&p, b, NULL, NULL)) return NULL;
    return b;
}
