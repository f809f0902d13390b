/* pattern.c — rules as data: s-expression patterns compiled to small arrays,
 * side conditions by name, top-down backtracking e-matching and
 * instantiation of right-hand sides.
 *
 * Pattern text:  ?x                     a class variable (a repeat must match the same class)
 *                (OP kid ...)           an e-node of that op, payload unconstrained (lhs only)
 *                (OP[?k] kid ...)       payload bound to / taken from payload variable ?k
 *                (OP[3] kid ...)        payload arg must be / is 3
 *                (FULL 0 ?x)            rhs only: constant 0 with ?x's shape and dtype
 *                (FULL ?c ?x)           rhs only: ?c's constant value with ?x's shape and dtype
 * Conditions:    "name ?a ?b N, name ..." — see the table in kdomain.c.
 *
 * Invariants: compiled patterns reference only declared variables; every rhs
 * op that needs a payload has one; e-matching reads the e-graph only (the
 * caller must have rebuilt it), instantiation adds nodes but never unions.
 */
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "base.h"
#include "rewrite.h"

/* ---- parsing ------------------------------------------------------------------ */

typedef struct parser {
    const char *s;
    size_t i;
    eg_rule *r;
    int is_rhs;
    char *err;
    size_t cap;
    int failed;
} parser;

static void perr(parser *p, const char *msg, const char *what) {
    if (p->failed) return;
    p->failed = 1;
    snprintf(p->err, p->cap, "%s: %s '%s' at offset %zu of \"%s\"", p->r->def.name, msg, what, p->i, p->s);
}

static void skip_ws(parser *p) {
    while (p->s[p->i] && isspace((unsigned char)p->s[p->i])) p->i++;
}

/* reads an atom (letters, digits, _ ? . - +) into buf */
static int atom(parser *p, char *buf, size_t cap) {
    skip_ws(p);
    size_t n = 0;
    while (p->s[p->i] && !isspace((unsigned char)p->s[p->i]) && !strchr("()[],", p->s[p->i])) {
        if (n + 1 < cap) buf[n++] = p->s[p->i];
        p->i++;
    }
    buf[n] = 0;
    return n > 0;
}

static int find_name(char names[][16], int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

/* a variable's index; the lhs declares, the rhs and conditions only refer */
static int var_index(parser *p, const char *name, int payload) {
    char(*names)[16] = payload ? p->r->pvars : p->r->vars;
    int *n = payload ? &p->r->npvars : &p->r->nvars;
    int i = find_name(names, *n, name);
    if (i >= 0) return i;
    if (p->is_rhs) {
        perr(p, payload ? "unbound payload variable" : "unbound variable", name);
        return -1;
    }
    if (*n >= EG_MAX_VARS || strlen(name) >= 16) {
        perr(p, "too many or too long variables", name);
        return -1;
    }
    strcpy(names[*n], name);
    return (*n)++;
}

static uint32_t pnew(parser *p, eg_pattern *pat) {
    if (pat->nn >= EG_MAX_PNODES) {
        perr(p, "pattern too large", "");
        return 0;
    }
    memset(&pat->n[pat->nn], 0, sizeof pat->n[0]);
    return pat->nn++;
}

static int parse_num(const char *s, double *v) {
    char *end;
    *v = strtod(s, &end);
    return end != s && *end == 0;
}

static uint32_t parse_expr(parser *p, eg_pattern *pat) {
    char buf[64];
    skip_ws(p);
    if (p->failed) return 0;
    if (p->s[p->i] == '?') {
        atom(p, buf, sizeof buf);
        uint32_t k = pnew(p, pat);
        pat->n[k].op = EG_P_VAR;
        pat->n[k].var = var_index(p, buf, 0);
        return k;
    }
    if (p->s[p->i] != '(') {
        atom(p, buf, sizeof buf);
        perr(p, "expected ( or ?var, got", buf);
        return 0;
    }
    p->i++;
    if (!atom(p, buf, sizeof buf)) {
        perr(p, "missing op name", "");
        return 0;
    }
    uint32_t k = pnew(p, pat);
    if (p->failed) return 0;
    eg_pnode *n = &pat->n[k];
    if (strcmp(buf, "FULL") == 0) {
        if (!p->is_rhs) {
            perr(p, "FULL only builds, it cannot be matched", buf);
            return 0;
        }
        n->op = EG_P_FULL;
        n->var = -1;
        atom(p, buf, sizeof buf);
        if (buf[0] == '?') n->var = var_index(p, buf, 0);
        else if (!parse_num(buf, &n->num)) perr(p, "FULL needs a number or ?var, got", buf);
        uint32_t kid = parse_expr(p, pat);
        pat->n[k].kids[0] = kid;
        pat->n[k].nkids = 1;
    } else {
        int op = eg_op_lookup(buf);
        if (op < 0) {
            perr(p, "unknown op", buf);
            return 0;
        }
        n->op = (uint16_t)op;
        if (p->s[p->i] == '[') {
            p->i++;
            atom(p, buf, sizeof buf);
            if (buf[0] == '?') {
                n->pkind = 2;
                n->var = var_index(p, buf, 1);
            } else {
                double v;
                if (!parse_num(buf, &v) || v != floor(v)) perr(p, "bad payload", buf);
                n->pkind = 1;
                n->lit = (int64_t)v;
            }
            skip_ws(p);
            if (p->s[p->i] != ']') perr(p, "expected ]", "");
            else p->i++;
        }
        uint8_t nk = 0;
        skip_ws(p);
        while (!p->failed && p->s[p->i] && p->s[p->i] != ')') {
            if (nk >= EG_MAX_KIDS) {
                perr(p, "too many operands for", eg_op_name(op));
                return 0;
            }
            uint32_t kid = parse_expr(p, pat);
            pat->n[k].kids[nk++] = kid;
            skip_ws(p);
        }
        pat->n[k].nkids = nk;
        if (!p->failed && nk != eg_op_arity(op)) perr(p, "wrong number of operands for", eg_op_name(op));
        int needs_payload = op == OP_SUM || op == OP_MAX || op_is_compound(op) || op == EG_OP_VIEW || op == OP_CAST ||
                            op == OP_INPUT || op == OP_CONST || op == OP_IOTA;
        if (!p->failed && p->is_rhs && needs_payload && pat->n[k].pkind == 0)
            perr(p, "a built op needs its payload ([?k] or [N])", eg_op_name(op));
    }
    skip_ws(p);
    if (p->s[p->i] != ')') {
        perr(p, "expected )", "");
        return 0;
    }
    p->i++;
    return k;
}

static int parse_pattern(parser *p, const char *text, eg_pattern *pat) {
    p->s = text;
    p->i = 0;
    pat->nn = 0;
    pat->root = parse_expr(p, pat);
    skip_ws(p);
    if (!p->failed && p->s[p->i]) perr(p, "trailing text", p->s + p->i);
    return p->failed ? -1 : 0;
}

static int parse_conds(parser *p, const char *text) {
    char buf[64];
    p->s = text ? text : "";
    p->i = 0;
    p->r->ncond = 0;
    skip_ws(p);
    while (!p->failed && p->s[p->i]) {
        if (p->r->ncond >= EG_MAX_CONDS) {
            perr(p, "too many conditions", "");
            break;
        }
        eg_clause *c = &p->r->cond[p->r->ncond++];
        memset(c, 0, sizeof *c);
        atom(p, buf, sizeof buf);
        int nargs;
        const char *sig;
        c->kind = ek_cond_lookup(buf, &nargs, &sig);
        if (c->kind < 0) {
            perr(p, "unknown condition", buf);
            break;
        }
        for (int a = 0; sig[a] && !p->failed; a++) {
            atom(p, buf, sizeof buf);
            if (sig[a] == 'n') {
                if (!parse_num(buf, &c->num)) perr(p, "condition needs a number, got", buf);
                c->has_num = 1;
            } else if (buf[0] != '?') {
                perr(p, "condition needs a variable, got", buf);
            } else {
                c->args[c->nargs++] = var_index(p, buf, sig[a] == 'p');
            }
        }
        skip_ws(p);
        if (p->s[p->i] == ',') p->i++;
        else if (p->s[p->i]) perr(p, "expected , between conditions", p->s + p->i);
        skip_ws(p);
    }
    return p->failed ? -1 : 0;
}

int eg_rule_compile(const eg_rule_def *def, eg_rule *out, char *err, size_t cap) {
    memset(out, 0, sizeof *out);
    out->def = *def;
    parser p = {NULL, 0, out, 0, err, cap, 0};
    if (parse_pattern(&p, def->lhs, &out->lhs)) return -1;
    if (out->lhs.n[out->lhs.root].op == EG_P_VAR) {
        perr(&p, "a left side must be an op, not", def->lhs);
        return -1;
    }
    p.is_rhs = 1;
    if (parse_conds(&p, def->cond)) return -1;
    if (def->rhs[0] == '@') {
        out->fn = eg_applier_lookup(def->rhs + 1);
        if (!out->fn) {
            p.s = def->rhs;
            perr(&p, "unknown applier", def->rhs);
            return -1;
        }
        return 0;
    }
    return parse_pattern(&p, def->rhs, &out->rhs);
}

/* ---- e-matching ------------------------------------------------------------------ */

typedef struct todo_item { uint32_t p; eg_id c; } todo_item;

typedef struct matcher {
    eg_kiln *ek;
    const eg_rule *r;
    eg_subst s;
    uint8_t bound[EG_MAX_VARS], pbound[EG_MAX_VARS];
    todo_item todo[EG_MAX_PNODES + 4];
    int ntodo;
    eg_subst **out;
    uint32_t *n, *cap, limit, found;
} matcher;

static void mrec(matcher *m) {
    if (*m->n >= m->limit) return;
    if (m->ntodo == 0) {
        if (!eg_cond_check(m->ek, m->r, &m->s)) return;
        KILN_GROW(*m->out, *m->cap, *m->n + 1);
        (*m->out)[(*m->n)++] = m->s;
        m->found++;
        return;
    }
    egraph *eg = m->ek->eg;
    todo_item it = m->todo[--m->ntodo];
    const eg_pnode *pn = &m->r->lhs.n[it.p];
    eg_id c = eg_find(eg, it.c);
    if (pn->op == EG_P_VAR) {
        int v = pn->var;
        if (m->bound[v]) {
            if (eg_find(eg, m->s.cls[v]) == c) mrec(m);
        } else {
            m->bound[v] = 1;
            m->s.cls[v] = c;
            mrec(m);
            m->bound[v] = 0;
        }
    } else {
        const eg_class *k = &eg->classes[c];
        for (uint32_t i = 0; i < k->nnodes && *m->n < m->limit; i++) {
            const eg_node *n = &eg->nodes[k->nodes[i]];
            if (n->op != pn->op || n->nkids != pn->nkids) continue;
            int bound_here = 0;
            if (pn->pkind == 1 && n->arg != pn->lit) continue;
            if (pn->pkind == 2) {
                eg_payload *pv = &m->s.pv[pn->var];
                if (m->pbound[pn->var]) {
                    if (pv->arg != n->arg || pv->arg2 != n->arg2 || pv->dtype != n->dtype) continue;
                } else {
                    pv->arg = n->arg;
                    pv->arg2 = n->arg2;
                    pv->dtype = n->dtype;
                    m->pbound[pn->var] = 1;
                    bound_here = 1;
                }
            }
            int base = m->ntodo;
            for (int kk = n->nkids - 1; kk >= 0; kk--) m->todo[m->ntodo++] = (todo_item){pn->kids[kk], n->kids[kk]};
            mrec(m);
            m->ntodo = base;
            if (bound_here) m->pbound[pn->var] = 0;
        }
    }
    m->todo[m->ntodo++] = it;
}

uint32_t eg_match(eg_kiln *ek, const eg_rule *r, eg_id c, eg_subst **out, uint32_t *n, uint32_t *cap,
                  uint32_t limit) {
    matcher m;
    memset(&m, 0, sizeof m);
    m.ek = ek;
    m.r = r;
    m.out = out;
    m.n = n;
    m.cap = cap;
    m.limit = limit;
    m.s.root = eg_find(ek->eg, c);
    m.todo[m.ntodo++] = (todo_item){r->lhs.root, m.s.root};
    mrec(&m);
    return m.found;
}

int eg_cond_check(eg_kiln *ek, const eg_rule *r, const eg_subst *s) {
    for (int i = 0; i < r->ncond; i++)
        if (!ek_cond_eval(ek, &r->cond[i], s)) return 0;
    return 1;
}

/* ---- instantiation ------------------------------------------------------------------ */

static eg_id inst(eg_kiln *ek, const eg_pattern *p, uint32_t idx, const eg_subst *s) {
    const eg_pnode *pn = &p->n[idx];
    egraph *eg = ek->eg;
    if (pn->op == EG_P_VAR) return eg_find(eg, s->cls[pn->var]);
    eg_id kids[EG_MAX_KIDS];
    for (int i = 0; i < pn->nkids; i++) {
        kids[i] = inst(ek, p, pn->kids[i], s);
        if (kids[i] == EG_NONE) return EG_NONE;
    }
    if (pn->op == EG_P_FULL) {
        const eg_data *d = eg_data_of(eg, kids[0]);
        double v = pn->num;
        if (pn->var >= 0) {
            const eg_data *cd = eg_data_of(eg, s->cls[pn->var]);
            if (!cd->has_const) return EG_NONE;
            v = cd->cval;
        }
        return ek_full(ek, v, (kiln_dtype)d->dtype, d->ndim, d->shape);
    }
    int64_t arg = 0;
    int32_t arg2 = 0;
    uint8_t dtype = 0;
    if (pn->pkind == 1) arg = pn->lit;
    if (pn->pkind == 2) {
        arg = s->pv[pn->var].arg;
        arg2 = s->pv[pn->var].arg2;
        dtype = s->pv[pn->var].dtype;
    }
    /* a computed op's dtype follows its first operand (LT too: 1/0 in the operands' dtype) */
    if (pn->nkids > 0 && pn->op != OP_CAST) dtype = eg_data_of(eg, kids[0])->dtype;
    eg_node n = eg_mk(pn->op, dtype, arg, arg2, pn->nkids, kids);
    return eg_add(eg, &n);
}

eg_id eg_instantiate(eg_kiln *ek, const eg_pattern *p, const eg_subst *s) { return inst(ek, p, p->root, s); }

eg_id eg_rule_apply(eg_kiln *ek, const eg_rule *r, const eg_subst *s) {
    return r->fn ? r->fn(ek, s) : eg_instantiate(ek, &r->rhs, s);
}
