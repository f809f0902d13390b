/* sym.h — symbolic integer expressions: the language of shapes and indices.
 *
 * A sym_pool owns hash-consed expression nodes with 32-bit ids: structurally
 * equal expressions built through the smart constructors get the same id, and
 * the smart constructors keep expressions in a canonical simplified form
 * (constants folded, sums of like terms combined with sorted terms, products
 * with sorted factors, div/mod reduced with known bounds, e.g. (8a+b)/8 -> a
 * when 0 <= b < 8). So for the polynomial part, equal ids <=> equal values.
 *
 * Semantics (also of sym_eval): integers are int64; DIV is floor division and
 * MOD the matching remainder (a - b*floor(a/b), sign of b); division or modulo
 * by zero evaluates to 0. LT yields 1/0; AND yields 1 when both are non-zero.
 *
 * Variables carry a range: size variables ("seq", "pos") are [lo, hi] with
 * constants; index variables may instead have a symbolic exclusive bound
 * (0 <= i < bound), which lets (i + s*j)/s simplify to j when i < s.
 */
#ifndef KILN_SYM_H
#define KILN_SYM_H

#include <stddef.h>
#include <stdint.h>

typedef uint32_t sym_id;
#define SYM_NONE UINT32_MAX
#define SYM_INF INT64_C(0x3fffffffffffffff) /* "unbounded" in ranges; saturating */

typedef enum sym_kind {
    SYM_CONST = 0, /* value c */
    SYM_VAR,       /* variable number c (0..sym_var_count-1) */
    SYM_ADD,       /* a + b */
    SYM_MUL,       /* a * b */
    SYM_DIV,       /* floor(a / b) */
    SYM_MOD,       /* a - b*floor(a/b) */
    SYM_MIN,       /* min(a, b) */
    SYM_MAX,       /* max(a, b) */
    SYM_LT,        /* a < b ? 1 : 0 */
    SYM_AND,       /* (a != 0 && b != 0) ? 1 : 0 */
    SYM_KIND_COUNT
} sym_kind;

typedef struct sym_node {
    sym_kind kind;
    int64_t c;     /* CONST: value; VAR: variable number */
    sym_id a, b;   /* operands (SYM_NONE when unused) */
} sym_node;

typedef struct sym_pool sym_pool;

sym_pool *sym_pool_new(void);
void sym_pool_free(sym_pool *p);

const sym_node *sym_get(const sym_pool *p, sym_id s);
uint32_t sym_count(const sym_pool *p);

/* smart constructors: canonical, simplified, hash-consed */
sym_id sym_const(sym_pool *p, int64_t v);
/* a named variable in [lo, hi]; the same name returns the same variable (a
 * re-declaration, plain or bounded, keeps the first range/bound). lo > hi or a
 * NULL name give SYM_NONE. */
sym_id sym_var(sym_pool *p, const char *name, int64_t lo, int64_t hi);
/* an index variable 0 <= v < bound (bound any expression >= 1; simplifications
 * assume values respect it) */
sym_id sym_var_bounded(sym_pool *p, const char *name, sym_id bound);
sym_id sym_add(sym_pool *p, sym_id a, sym_id b);
sym_id sym_sub(sym_pool *p, sym_id a, sym_id b);
sym_id sym_neg(sym_pool *p, sym_id a);
sym_id sym_mul(sym_pool *p, sym_id a, sym_id b);
sym_id sym_div(sym_pool *p, sym_id a, sym_id b);
sym_id sym_mod(sym_pool *p, sym_id a, sym_id b);
sym_id sym_min(sym_pool *p, sym_id a, sym_id b);
sym_id sym_max(sym_pool *p, sym_id a, sym_id b);
sym_id sym_lt(sym_pool *p, sym_id a, sym_id b);
sym_id sym_le(sym_pool *p, sym_id a, sym_id b); /* a < b + 1 */
sym_id sym_and(sym_pool *p, sym_id a, sym_id b);

/* the smart constructor of binary kind k (ADD .. AND); SYM_NONE for others */
sym_id sym_build(sym_pool *p, sym_kind k, sym_id a, sym_id b);
/* a node exactly as given, without simplification (for tests) */
sym_id sym_raw(sym_pool *p, sym_kind k, sym_id a, sym_id b);
/* rebuild s through the smart constructors */
sym_id sym_simplify(sym_pool *p, sym_id s);
/* replace variable number i by map[i] (SYM_NONE keeps it); nvars entries */
sym_id sym_subst(sym_pool *p, sym_id s, const sym_id *map, uint32_t nvars);
/* replace the one variable `var` (a variable node) by `with` */
sym_id sym_subst_var(sym_pool *p, sym_id s, sym_id var, sym_id with);
/* how s changes when variable `var` grows by one: s[var := var + 1] - s
 * (simplified; a constant when s is affine in var) */
sym_id sym_step(sym_pool *p, sym_id s, sym_id var);
/* 1 when expression s mentions variable node var (SYM_NONE: 0) */
int sym_uses_var(const sym_pool *p, sym_id s, sym_id var);

/* s of pool `from` rebuilt in pool `to` through the smart constructors
 * (variables by name and range); memo has sym_count(from) entries, SYM_NONE
 * where not yet translated, and caches the answers */
sym_id sym_transfer(const sym_pool *from, sym_id s, sym_pool *to, sym_id *memo);
/* a memo for sym_transfer (free it), with every variable of `from` declared
 * in `to` in from's order first, so that both pools number them alike */
sym_id *sym_transfer_begin(const sym_pool *from, sym_pool *to);

/* variables */
uint32_t sym_var_count(const sym_pool *p);
const char *sym_var_name(const sym_pool *p, uint32_t var);
int sym_find_var(const sym_pool *p, const char *name); /* variable number or -1 */
sym_id sym_var_node(const sym_pool *p, uint32_t var);
/* the symbolic exclusive bound of an index variable (SYM_NONE for size vars) */
sym_id sym_var_bound(const sym_pool *p, uint32_t var);
/* the variable's range: [lo, hi] of a size var, [0, hi(bound)-1] of an index var */
void sym_var_range(const sym_pool *p, uint32_t var, int64_t *lo, int64_t *hi);

/* queries */
int sym_is_const(const sym_pool *p, sym_id s, int64_t *v); /* 1 and *v if constant */
/* conservative range of s: lo <= s <= hi (SYM_INF / -SYM_INF when unknown) */
void sym_bounds(const sym_pool *p, sym_id s, int64_t *lo, int64_t *hi);
/* 1 if s provably >= 0 / provably equal */
int sym_prove_nonneg(const sym_pool *p, sym_id s);

/* evaluation: values[i] is the value of variable number i. Returns 0 and sets
 * *out, or -1 if a variable used by s is marked unbound (bound[i] == 0;
 * bound may be NULL to mean all bound), writing its number to *missing_var. */
int sym_eval(const sym_pool *p, sym_id s, const int64_t *values, const uint8_t *bound,
             int64_t *out, uint32_t *missing_var);

/* text: infix with minimal parentheses, e.g. "((i0 + 8*i1) / 4)"; returns the
 * number of characters the full text needs (like snprintf) */
int sym_print(const sym_pool *p, sym_id s, char *buf, size_t cap);
/* parse: integers, names, + - * / % ( ), min(a,b), max(a,b), <. Unknown names
 * become size variables in [1, SYM_INF]. On error returns SYM_NONE and writes
 * a message into err. */
sym_id sym_parse(sym_pool *p, const char *text, char *err, size_t errcap);

#endif
