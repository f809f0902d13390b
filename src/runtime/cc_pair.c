/* cc_pair.c — two generated programs joined into one translation unit.
 *
 * A model has two programs (materialised and streaming attention,
 * kiln_program.alt), and after a schedule search both are rebuilt with the
 * winners, one after the other: gemma3-270m's were 6.2 s and 8.1 s of C
 * compiles on a 2-core Intel Xeon, though most of their kernel bodies are
 * the same text (the layers' contractions, norms, projections). Joined,
 * cc_dedup.c finds the bodies the two share and the compiler sees each once
 * (62 distinct bodies where the two units held 37 + 45).
 *
 * The text: a source is its prelude (everything before the first line that
 * starts a kernel function, "int kiln_k") and its kernels. The joint source
 * is first's prelude, then every top-level part of second's prelude that
 * first's lacks (a part is a run of lines from one that starts at column 0
 * outside any brace, comment or macro continuation to the next), then the
 * marker `const int kiln_pair_<16 hex> = 1;` (which says, to a later
 * process, that this object holds the pair), then first's kernels as they
 * were and second's with every kiln_k<N> renamed kiln_k<N + RT_CC_PAIR_OFFSET>
 * (its kernels' own helpers, named after them, follow).
 *
 * Invariants: nothing is joined that could change either program's meaning.
 * A part of second's prelude that first lacks must name what it defines
 * (a #define, a function, an object, a typedef), and that name must not be
 * defined by any part of first's prelude (a same-named helper with another
 * body, a macro with another value); a conditional (#if, #undef, ...) or a
 * part without a name refuses the join, and so does a kernel number past
 * the offset. A refused join returns NULL and the caller compiles the two
 * apart, as before; a join that does not compile is the caller's to drop.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "cc_pair.h"

#define KERNEL_MARK "\nint kiln_k"
#define NAME_MAX_LEN 128

typedef rt_cc_part part;

typedef struct parts {
    part *v;
    int n, cap;
} parts;

static int is_ident(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

static size_t prelude_len(const char *s) {
    const char *k = strstr(s, KERNEL_MARK);
    return k ? (size_t)(k - s) + 1 : 0;
}

/* the identifier that ends just before e (spaces skipped), into out; 0 when none */
static int ident_before(const char *start, const char *e, char *out) {
    while (e > start && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n')) e--;
    const char *b = e;
    while (b > start && is_ident(b[-1])) b--;
    size_t l = (size_t)(e - b);
    if (l == 0 || l >= NAME_MAX_LEN || (*b >= '0' && *b <= '9')) return 0;
    memcpy(out, b, l);
    out[l] = 0;
    return 1;
}

/* what a top-level part defines: a macro's name, a function's, an object's,
 * a typedef's; "" for what defines nothing (an #include, a comment); "?" for
 * what this reader does not know (a conditional, an #undef, odd text) */
static void part_name(const char *t, size_t len, char *out) {
    const char *end = t + len;
    strcpy(out, "?");
    while (t < end && (*t == ' ' || *t == '\t' || *t == '\n')) t++;
    if (t >= end || (end - t >= 2 && t[0] == '/' && t[1] == '*')) {
        /* a comment alone (the chunker starts a part at its first line) */
        const char *c = t < end ? strstr(t, "*/") : NULL;
        if (t >= end || (c && c + 2 <= end)) {
            const char *r = t < end ? c + 2 : end;
            while (r < end && (*r == ' ' || *r == '\t' || *r == '\n')) r++;
            if (r >= end) strcpy(out, "");
        }
        return;
    }
    if (*t == '#') {
        /* an include guard, "#ifndef G\n#define G\n...#endif", is named G */
        if (strncmp(t, "#ifndef ", 8) == 0) {
            const char *b = t + 8, *e = b;
            while (e < end && is_ident(*e)) e++;
            size_t l = (size_t)(e - b);
            if (l && l < NAME_MAX_LEN && e < end && *e == '\n' && (size_t)(end - e) > 9 + l &&
                strncmp(e + 1, "#define ", 8) == 0 && strncmp(e + 9, b, l) == 0 && (e[9 + l] == '\n' || e[9 + l] == ' ')) {
                memcpy(out, b, l);
                out[l] = 0;
            }
            return;
        }
        if (strncmp(t, "#include", 8) == 0) strcpy(out, "");
        else if (strncmp(t, "#define ", 8) == 0) {
            const char *b = t + 8, *e = b;
            while (e < end && is_ident(*e)) e++;
            if (e > b && (size_t)(e - b) < NAME_MAX_LEN) {
                memcpy(out, b, (size_t)(e - b));
                out[e - b] = 0;
            }
        }
        return;
    }
    if (strncmp(t, "typedef", 7) == 0 && !is_ident(t[7])) {
        const char *semi = end;
        while (semi > t && semi[-1] != ';') semi--;
        if (semi > t && !ident_before(t, semi - 1, out)) strcpy(out, "?");
        return;
    }
    /* a declaration: the identifier before the first '(' '[' '=' ';' '{',
     * attribute groups skipped */
    for (const char *c = t; c < end; c++) {
        if (*c == '/' && c + 1 < end && c[1] == '*') {
            const char *z = strstr(c + 2, "*/");
            if (!z || z >= end) return;
            c = z + 1;
            continue;
        }
        if (*c != '(' && *c != '[' && *c != '=' && *c != ';' && *c != '{') continue;
        char id[NAME_MAX_LEN];
        if (!ident_before(t, c, id)) return;
        if (*c == '(' && (strcmp(id, "__attribute__") == 0 || strcmp(id, "__declspec") == 0)) {
            int depth = 0;
            for (; c < end; c++) {
                if (*c == '(') depth++;
                else if (*c == ')' && --depth == 0) break;
            }
            continue;
        }
        if (strcmp(id, "struct") == 0 || strcmp(id, "union") == 0 || strcmp(id, "enum") == 0) return;
        strcpy(out, id);
        return;
    }
}

static void parts_push(parts *ps, const char *at, size_t len) {
    if (ps->n == ps->cap) {
        ps->cap = ps->cap ? 2 * ps->cap : 64;
        ps->v = kiln_xrealloc(ps->v, (size_t)ps->cap * sizeof *ps->v);
    }
    part *p = &ps->v[ps->n++];
    p->at = at;
    p->len = len;
    part_name(at, len, p->name);
}

/* the prelude's top-level parts, in order */
static void split_parts(const char *s, size_t len, parts *out) {
    const char *end = s + len, *cur = s, *ln = s;
    int depth = 0, in_comment = 0, cont = 0, cond = 0; /* cond: #if nesting, one part to its #endif */
    while (ln < end) {
        const char *nl = memchr(ln, '\n', (size_t)(end - ln));
        const char *le = nl ? nl + 1 : end;
        int starts = depth == 0 && !in_comment && !cont && cond == 0 && ln > cur && *ln != ' ' && *ln != '\t' &&
                     *ln != '}' && *ln != '\n';
        if (!in_comment && !cont && strncmp(ln, "#if", 3) == 0) cond++;
        else if (!in_comment && !cont && strncmp(ln, "#endif", 6) == 0 && cond > 0) cond--;
        if (starts) {
            parts_push(out, cur, (size_t)(ln - cur));
            cur = ln;
        }
        int in_str = 0;
        char q = 0;
        for (const char *c = ln; c < le; c++) {
            if (in_comment) {
                if (*c == '*' && c + 1 < le && c[1] == '/') in_comment = 0, c++;
            } else if (in_str) {
                if (*c == '\\') c++;
                else if (*c == q) in_str = 0;
            } else if (*c == '/' && c + 1 < le && c[1] == '*') in_comment = 1, c++;
            else if (*c == '/' && c + 1 < le && c[1] == '/') break;
            else if (*c == '"' || *c == '\'') in_str = 1, q = *c;
            else if (*c == '{') depth++;
            else if (*c == '}') depth--;
        }
        const char *last = le > ln && le[-1] == '\n' ? le - 2 : le - 1;
        cont = last >= ln && *last == '\\';
        ln = le;
    }
    if (end > cur) parts_push(out, cur, (size_t)(end - cur));
}

int rt_cc_prelude_parts(const char *src, rt_cc_part **out) {
    size_t pl = prelude_len(src);
    parts ps = {0};
    if (pl) split_parts(src, pl, &ps);
    *out = ps.v;
    return ps.n;
}

static int same_part(const part *a, const part *b) { return a->len == b->len && memcmp(a->at, b->at, a->len) == 0; }

/* second's kernels with kiln_k<N> renamed kiln_k<N + offset>, appended to
 * out; 0 when a number is already past the offset */
static int renumbered(kiln_sb *out, const char *t) {
    const char *c = t;
    for (;;) {
        const char *k = strstr(c, "kiln_k");
        if (!k) break;
        const char *d = k + 6;
        if ((k > t && is_ident(k[-1])) || *d < '0' || *d > '9') {
            kiln_sb_putn(out, c, (size_t)(d - c));
            c = d;
            continue;
        }
        long n = 0;
        while (*d >= '0' && *d <= '9' && n < RT_CC_PAIR_OFFSET) n = n * 10 + (*d++ - '0');
        if (n >= RT_CC_PAIR_OFFSET) return 0;
        kiln_sb_putn(out, c, (size_t)(k - c));
        kiln_sb_printf(out, "kiln_k%ld", n + RT_CC_PAIR_OFFSET);
        c = d;
    }
    kiln_sb_putn(out, c, strlen(c));
    return 1;
}

char *rt_cc_pair_source(const char *first, const char *second, uint64_t marker) {
    size_t pa = prelude_len(first), pb = prelude_len(second);
    if (!pa || !pb) return NULL;
    parts A = {0}, B = {0};
    split_parts(first, pa, &A);
    split_parts(second, pb, &B);
    kiln_sb out = {0};
    kiln_sb_putn(&out, first, pa);
    int ok = 1;
    for (int i = 0; i < B.n && ok; i++) {
        int have = 0;
        for (int j = 0; j < A.n && !have; j++) have = same_part(&B.v[i], &A.v[j]);
        if (have) continue;
        const char *nm = B.v[i].name;
        if (strcmp(nm, "?") == 0) ok = 0;
        for (int j = 0; j < A.n && ok && nm[0]; j++) ok = strcmp(nm, A.v[j].name) != 0;
        if (ok) kiln_sb_putn(&out, B.v[i].at, B.v[i].len);
        if (ok && B.v[i].len && B.v[i].at[B.v[i].len - 1] != '\n') kiln_sb_putn(&out, "\n", 1);
    }
    free(A.v);
    free(B.v);
    if (ok) {
        kiln_sb_printf(&out, "__attribute__((weak)) const int kiln_pair_%016llx = 1;\n", (unsigned long long)marker);
        kiln_sb_putn(&out, first + pa, strlen(first + pa));
        if (out.len && out.s[out.len - 1] != '\n') kiln_sb_putn(&out, "\n", 1);
        ok = renumbered(&out, second + pb);
    }
    if (!ok) {
        free(out.s);
        return NULL;
    }
    return kiln_sb_take(&out);
}
