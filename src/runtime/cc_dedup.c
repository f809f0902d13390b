/* cc_dedup.c — compile each distinct kernel body once. A model's program
 * repeats itself: the kernels of its 18 (or 32) layers are the same code but
 * for the buffers they name (B[12] in one layer, B[57] in the next), and the
 * C compiler spent most of a first run compiling those copies (gemma3-270m:
 * 396 kernels, 3.1 MB of C, 26 s at -O2 on one loaded core).
 *
 * The rewrite, on the text the emitter made (which stays the cache key):
 * each kernel function `int kiln_kN(<signature>) {...}` has its buffer
 * references B[<n>] replaced, in order of first use, by B[kiln_bs_[i]], the
 * pointers named after them (b<n>) and its numbered locals (r20, i0: one or
 * two letters and digits, never called, not used by the prelude) renamed in
 * order of first use, and
 * its comments dropped (short_name says which locals: t1423_i too);
 * kernels whose rewritten text is the same share one
 * `int kiln_body_G(kiln_bs_, <signature>)` (declared after the prelude,
 * defined beside the first of them, hidden from the object's exports) and
 * become two-line wrappers that pass their own slot table. A kernel that is not exactly one
 * function in the expected form (another top-level line inside it) is kept
 * as it was, and so is a body no other kernel shares. The functions, their
 * names and their results are those of the source; only the translation
 * unit is smaller.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "cc_dedup.h"

#define SIG_REST "(void *const *B, const int64_t *v, int64_t lo, int64_t hi, int64_t chunk, int64_t flags) {\n"
#define MAX_SLOTS 256

typedef struct kernel_text {
    const char *start; /* "int kiln_kN(...)" */
    size_t len;        /* through the closing "}\n" */
    long id;           /* N */
    char *canon;       /* the body after the signature line, B[n] -> B[kiln_bs_[i]]; NULL: kept as is */
    int slots[MAX_SLOTS], nslots;
    uint64_t hash;
    int group;         /* index of the first kernel with the same canon (itself when first) */
    int shared;        /* its group has two kernels or more */
} kernel_text;

static uint64_t fnv(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
    return h;
}

static int is_ident(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

/* the number n of "B[n]" at t (a buffer index), or -1 */
static long buffer_ref(const char *t, const char *body, const char *end) {
    if (t + 3 >= end || t[0] != 'B' || t[1] != '[' || (t > body && is_ident(t[-1])) || t[2] < '0' || t[2] > '9')
        return -1;
    long n = 0;
    const char *d = t + 2;
    while (d < end && *d >= '0' && *d <= '9' && n < 100000000) n = n * 10 + (*d++ - '0');
    return d < end && *d == ']' ? n : -1;
}

/* the number n of an identifier "b<n>" at t (the emitter names a buffer's
 * pointer after it), or -1 */
static long buffer_name(const char *t, const char *body, const char *end, const char **after) {
    if (t + 1 >= end || t[0] != 'b' || (t > body && is_ident(t[-1])) || t[1] < '0' || t[1] > '9') return -1;
    long n = 0;
    const char *d = t + 1;
    while (d < end && *d >= '0' && *d <= '9' && n < 100000000) n = n * 10 + (*d++ - '0');
    if (d < end && is_ident(*d)) return -1;
    *after = d;
    return n;
}

static int slot_of(const kernel_text *k, long n) {
    for (int i = 0; i < k->nslots; i++)
        if (k->slots[i] == n) return i;
    return -1;
}

/* a name of one or two lower-case letters and digits (r5, i0, d1, s0),
 * with at most a suffix of an underscore and one or two lower-case letters
 * (t1423_i: the emitter's clamp temporaries, numbered after graph nodes:
 * without the suffix the streaming form's stream kernels, 25 KB each, were
 * compiled once per layer) at t, starting an identifier that is not a
 * member (after . or ->) and not called: its length, else 0 */
static size_t short_name(const char *text, const char *t) {
    if (!(*t >= 'a' && *t <= 'z') || (t > text && (is_ident(t[-1]) || t[-1] == '.' || t[-1] == '>'))) return 0;
    const char *d = t;
    while (*d >= 'a' && *d <= 'z' && d - t < 3) d++;
    const char *e = d;
    while (*e >= '0' && *e <= '9' && e - t < 11) e++;
    if (e != d && *e == '_' && e[1] >= 'a' && e[1] <= 'z') {
        const char *x = e + 1;
        while (*x >= 'a' && *x <= 'z' && x - e <= 2) x++;
        if (x - e <= 3 && !is_ident(*x)) e = x;
    }
    if (d - t > 2 || e == d || is_ident(*e)) return 0;
    const char *after = e;
    while (*after == ' ') after++;
    return *after == '(' ? 0 : (size_t)(e - t);
}

typedef struct name_set {
    char (*names)[12];
    int n, cap;
} name_set;

static int name_find(const name_set *ns, const char *t, size_t len) {
    for (int i = 0; i < ns->n; i++)
        if (strlen(ns->names[i]) == len && memcmp(ns->names[i], t, len) == 0) return i;
    return -1;
}

static int name_add(name_set *ns, const char *t, size_t len) {
    if (len >= sizeof ns->names[0]) return -1;
    if (ns->n == ns->cap) ns->names = kiln_xrealloc(ns->names, (size_t)(ns->cap = ns->cap ? 2 * ns->cap : 64) * sizeof *ns->names);
    memcpy(ns->names[ns->n], t, len);
    ns->names[ns->n][len] = 0;
    return ns->n++;
}

/* every short name the prelude uses (its helpers' locals, and any global
 * of that shape): never renamed in kernel bodies */
static void prelude_names(const char *src, size_t len, name_set *ns) {
    char *pre = kiln_xmalloc(len + 1);
    memcpy(pre, src, len);
    pre[len] = 0;
    for (const char *t = pre; *t; t++) {
        size_t n = short_name(pre, t);
        if (n && name_find(ns, t, n) < 0) name_add(ns, t, n);
        if (n) t += n - 1;
    }
    free(pre);
}

/* local names the emitter numbers after loop and node ids (r5, i0, d1, s0)
 * renamed kiln_l<i> in order of first use, except the prelude's (keep);
 * the body is the emitter's, whose helpers and globals have longer names
 * (and a call is never renamed). Frees text. */
static char *rename_locals(char *text, const name_set *keep) {
    name_set names = {0};
    kiln_sb out = {0};
    const char *q = text;
    for (const char *t = text; *t;) {
        size_t len = short_name(text, t);
        if (!len || name_find(keep, t, len) >= 0) {
            t += len ? len : 1;
            continue;
        }
        int id = name_find(&names, t, len);
        if (id < 0) id = name_add(&names, t, len);
        if (id < 0) {
            t += len;
            continue;
        }
        kiln_sb_putn(&out, q, (size_t)(t - q));
        kiln_sb_printf(&out, "kiln_l%d", id);
        q = t = t + len;
    }
    kiln_sb_putn(&out, q, strlen(q));
    free(names.names);
    free(text);
    return kiln_sb_take(&out);
}

/* a kernel's calls of itself (a stream kernel recomputes a row with no
 * visible key through one: `kiln_k102(B, v, row, row + 1, 0, flags)`) as
 * SELF_CALL, which a shared body spells as a call of itself with the slot
 * table it was given (the wrapper's call, inlined); without it every
 * layer's stream kernel differed by its own name. Frees text. */
#define SELF_CALL "kiln_self_("
static char *self_calls(char *text, long id) {
    char name[32];
    int nl = snprintf(name, sizeof name, "kiln_k%ld(", id);
    if (!strstr(text, name)) return text;
    kiln_sb out = {0};
    const char *q = text;
    for (const char *t = strstr(text, name); t; t = strstr(t, name)) {
        if (t > text && is_ident(t[-1])) {
            t += nl;
            continue;
        }
        kiln_sb_putn(&out, q, (size_t)(t - q));
        kiln_sb_putn(&out, SELF_CALL, strlen(SELF_CALL));
        q = t = t + nl;
    }
    kiln_sb_putn(&out, q, strlen(q));
    free(text);
    return kiln_sb_take(&out);
}

/* the body with its buffer indices as slots (B[n] -> B[kiln_bs_[i]], and
 * the pointer named b<n> -> kiln_b<i>), i in order of first use; 0 when it is
 * not one function in the expected form */
static int canonicalise(kernel_text *k, const name_set *keep) {
    const char *nl = memchr(k->start, '\n', k->len);
    if (!nl) return 0;
    const char *body = nl + 1, *end = k->start + k->len;
    while (end - body >= 2 && end[-1] == '\n' && end[-2] == '\n') end--; /* blank lines after the function */
    /* exactly one top-level function: no other line starts in column 0
     * except its closing brace, which ends the text */
    if (end - body < 2 || end[-1] != '\n' || end[-2] != '}') return 0;
    for (const char *q = body; q < end - 2; q++)
        if (q[-1] == '\n' && *q != ' ' && *q != '\n' && *q != '\t' && *q != '#') return 0;
    for (const char *t = body; t < end; t++) { /* the slots */
        long n = buffer_ref(t, body, end);
        if (n < 0 || slot_of(k, n) >= 0) continue;
        if (k->nslots == MAX_SLOTS) return 0;
        k->slots[k->nslots++] = (int)n;
    }
    kiln_sb c = {0};
    const char *q = body;
    for (const char *t = body; t < end;) {
        const char *after = NULL;
        long n = buffer_ref(t, body, end), m = n < 0 ? buffer_name(t, body, end, &after) : -1;
        int slot = n >= 0 ? slot_of(k, n) : m >= 0 ? slot_of(k, m) : -1;
        if (slot < 0) {
            t++;
            continue;
        }
        kiln_sb_putn(&c, q, (size_t)(t - q));
        if (n >= 0) {
            kiln_sb_printf(&c, "B[kiln_bs_[%d]]", slot);
            t = strchr(t, ']') + 1;
        } else {
            kiln_sb_printf(&c, "kiln_b%d", slot);
            t = after;
        }
        q = t;
    }
    kiln_sb_putn(&c, q, (size_t)(end - q));
    /* comments name graph nodes ("fused SUM#137"): they go, so that the
     * layers' copies compare equal (the emitter writes no string literals) */
    char *w = c.s, *r = c.s;
    while (*r) {
        if (r[0] == '/' && r[1] == '*') {
            char *close = strstr(r + 2, "*/");
            if (!close) break;
            r = close + 2;
            continue;
        }
        *w++ = *r++;
    }
    while (*r) *w++ = *r++;
    *w = 0;
    k->canon = self_calls(rename_locals(c.s, keep), k->id);
    k->hash = fnv(k->canon);
    return 1;
}

char *rt_cc_dedup(const char *src, int *distinct, int *kernels) {
    static const char mark[] = "\nint kiln_k";
    const char *first = strstr(src, mark);
    if (!first) return NULL;
    size_t cap = 64, n = 0;
    kernel_text *ks = kiln_xmalloc(cap * sizeof *ks);
    name_set keep = {0};
    prelude_names(src, (size_t)(first + 1 - src), &keep);
    const char *at = first + 1;
    while (at) {
        const char *next = strstr(at, mark);
        if (n == cap) ks = kiln_xrealloc(ks, (cap *= 2) * sizeof *ks);
        kernel_text *k = &ks[n++];
        memset(k, 0, sizeof *k);
        k->start = at;
        k->len = next ? (size_t)(next + 1 - at) : strlen(at);
        char *endp;
        k->id = strtol(at + strlen("int kiln_k"), &endp, 10);
        if (endp > at + strlen("int kiln_k") && strncmp(endp, SIG_REST, strlen(SIG_REST)) == 0) canonicalise(k, &keep);
        at = next ? next + 1 : NULL;
    }
    int ngroups = 0, nshared = 0;
    for (size_t i = 0; i < n; i++) {
        ks[i].group = (int)i;
        if (!ks[i].canon) continue;
        for (size_t j = 0; j < i; j++)
            if (ks[j].canon && ks[j].group == (int)j && ks[j].hash == ks[i].hash && strcmp(ks[j].canon, ks[i].canon) == 0) {
                ks[i].group = (int)j;
                ks[i].shared = ks[j].shared = 1;
                break;
            }
    }
    for (size_t i = 0; i < n; i++) {
        ngroups += ks[i].group == (int)i;
        nshared += ks[i].shared;
    }
    char *out = NULL;
    if (nshared > 0) {
        kiln_sb b = {0};
        kiln_sb_putn(&b, src, (size_t)(first + 1 - src));
        /* the shared bodies are declared up front and each defined after
         * its first kernel, so that a build in parts (cc_split.c: parts
         * start at kernels) compiles each once and the link joins them */
        for (size_t i = 0; i < n; i++)
            if (ks[i].shared && ks[i].group == (int)i) {
                kiln_sb_printf(&b, "int kiln_body_%ld(const int *kiln_bs_, ", (long)i);
                kiln_sb_putn(&b, &SIG_REST[1], strlen(SIG_REST) - 4);
                kiln_sb_putn(&b, ";\n", 2);
            }
        for (size_t i = 0; i < n; i++) {
            if (!ks[i].shared) {
                kiln_sb_putn(&b, ks[i].start, ks[i].len);
                continue;
            }
            kiln_sb_printf(&b, "int kiln_k%ld", ks[i].id);
            kiln_sb_putn(&b, SIG_REST, strlen(SIG_REST));
            kiln_sb_putn(&b, "  static const int kiln_bs_[] = {", strlen("  static const int kiln_bs_[] = {"));
            for (int j = 0; j < ks[i].nslots; j++) kiln_sb_printf(&b, j ? ", %d" : "%d", ks[i].slots[j]);
            if (ks[i].nslots == 0) kiln_sb_putn(&b, "0", 1);
            kiln_sb_printf(&b, "};\n  return kiln_body_%d(kiln_bs_, B, v, lo, hi, chunk, flags);\n}\n", ks[i].group);
            if (ks[i].group == (int)i) { /* after its first kernel: the part holding that kernel defines it */
                kiln_sb_printf(&b, RT_CC_BODY_MARK "%ld(const int *kiln_bs_, ", (long)i);
                kiln_sb_putn(&b, &SIG_REST[1], strlen(SIG_REST) - 1);
                char self[64];
                snprintf(self, sizeof self, "kiln_body_%ld(kiln_bs_, ", (long)i);
                for (const char *q = ks[i].canon, *t; q; q = t ? t + strlen(SELF_CALL) : NULL) {
                    t = strstr(q, SELF_CALL);
                    kiln_sb_putn(&b, q, t ? (size_t)(t - q) : strlen(q));
                    if (t) kiln_sb_putn(&b, self, strlen(self));
                }
            }
        }
        out = b.s;
    }
    if (distinct) *distinct = ngroups;
    if (kernels) *kernels = (int)n;
    for (size_t i = 0; i < n; i++) free(ks[i].canon);
    free(ks);
    free(keep.names);
    return out;
}

size_t rt_cc_unit_bytes(const char *src) {
    char *tu = rt_cc_dedup(src, NULL, NULL);
    size_t n = strlen(tu ? tu : src);
    free(tu);
    return n;
}
