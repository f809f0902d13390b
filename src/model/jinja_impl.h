/* jinja_impl.h — what jinja_parse.c and jinja_eval.c share: the arena, the
 * values, and the syntax tree of a template.
 *
 * Invariants: everything a render allocates (tokens, nodes, values, strings)
 * lives in one arena freed when the render ends, so no value is ever freed
 * on its own and values may share parts freely. Strings are byte ranges
 * (not NUL-terminated). The parser bounds its nesting depth and the
 * evaluator its steps and output, so a hostile template ends with an error.
 */
#ifndef KILN_JINJA_IMPL_H
#define KILN_JINJA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

/* ---- arena ---- */
typedef struct jarena_block {
    struct jarena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} jarena_block;

typedef struct jarena {
    jarena_block *head;
    size_t total; /* bytes handed out, for the render's memory bound */
} jarena;

void *ja_alloc(jarena *a, size_t n); /* zeroed, 16-aligned */
char *ja_strndup(jarena *a, const char *s, size_t n);
void ja_free(jarena *a);

/* ---- values ---- */
typedef enum jv_kind {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_FUNC
} jv_kind;

typedef struct jlist jlist;
typedef struct jdict jdict;

typedef struct jv {
    jv_kind k;
    union {
        int b;
        long long i;
        double f;
        struct {
            const char *s;
            size_t n;
        } str;
        jlist *list;
        jdict *dict;
        int func; /* a jfunc */
    } u;
} jv;

struct jlist {
    jv *v;
    int n, cap;
};

struct jdict {
    jv *keys; /* strings */
    jv *vals;
    int n, cap;
};

typedef enum jfunc { JF_RAISE, JF_NAMESPACE, JF_RANGE, JF_STRFTIME, JF_COUNT } jfunc;

/* ---- syntax tree ---- */
typedef enum je_kind {
    JE_LIT, JE_VAR, JE_ATTR, JE_INDEX, JE_SLICE, JE_CALL, JE_FILTER, JE_TEST, JE_NOT, JE_NEG,
    JE_BIN, JE_AND, JE_OR, JE_COND, JE_LIST, JE_DICT
} je_kind;

typedef enum jop {
    JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN
} jop;

typedef struct jexpr jexpr;
struct jexpr {
    je_kind k;
    jop op;
    int negate;           /* JE_TEST: "is not" */
    jv lit;               /* JE_LIT */
    const char *name;     /* JE_VAR, JE_ATTR, JE_FILTER, JE_TEST (NUL-terminated) */
    jexpr *a, *b, *c;     /* operands; JE_SLICE: a[b:c] with step in args[0] */
    jexpr **args;         /* JE_CALL, JE_FILTER, JE_TEST, JE_LIST; JE_DICT: key, value pairs */
    const char **kwnames; /* JE_CALL, JE_FILTER: NULL for positional args */
    int nargs;
    int line;
};

typedef enum jn_kind { JN_TEXT, JN_OUT, JN_IF, JN_FOR, JN_SET, JN_BREAK, JN_CONTINUE } jn_kind;

typedef struct jnode jnode;
typedef struct jbody {
    jnode **n;
    int count;
} jbody;

struct jnode {
    jn_kind k;
    const char *text; /* JN_TEXT */
    size_t len;
    jexpr *e;         /* JN_OUT, JN_SET value, JN_IF cond, JN_FOR iterable */
    jexpr *filter;    /* JN_FOR: "for x in xs if cond" */
    const char *target, *attr; /* JN_SET: name or name.attr; JN_FOR: first loop variable */
    const char *target2;       /* JN_FOR: "for k, v in ..." */
    jbody body, alt;           /* JN_IF: then/else (elif is a nested if); JN_FOR: body/else */
    int line;
};

/* parse src into a body; NULL and a message in err on a syntax error */
jbody *jinja_parse_tree(jarena *a, const char *src, size_t n, char *err, size_t errlen);

#define JINJA_MAX_DEPTH 128                 /* nesting of expressions and blocks */
#define JINJA_MAX_STEPS 5000000LL           /* evaluation steps in one render */
#define JINJA_MAX_OUT ((size_t)64 << 20)    /* bytes of output, and of any one string */
#define JINJA_MAX_MEM ((size_t)128 << 20)   /* bytes of the render's arena */

#endif
