/* cc_split.c — build one large generated C program as several translation
 * units compiled at once, then linked into one shared object: the C compiler
 * runs on one core, and a model's program (2 MB of C for gemma3-270m, ~15 s
 * at -O2) is most of a first `kiln run`'s wait.
 *
 * The cut: the prelude is everything before the first line that starts a
 * kernel function ("int kiln_k"); every part is the prelude followed by
 * whole kernels (in the source's order), each with the text before it back
 * to the kernel before it (segments), the kernels given to parts by
 * their cost: their own bytes and those of the prelude functions they call
 * that the part does not call yet (assign_parts). The prelude holds only
 * static (internal) definitions, so each part has its own copy and the link
 * sees each kernel once. A source that does not have this shape, a part
 * that fails to compile (a part calling a function that another part
 * defines is an error: -Werror=implicit-function-declaration) or link, or
 * an object that does not load with every symbol resolved (RTLD_NOW), makes
 * rt_cc_split_build return nonzero and
 * the caller compiles the source whole (which also gives the compiler's
 * message for a real error). The object is the same program either way:
 * the cache key (cpu.c) is the hash of the whole source.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base.h"
#include "cc_dedup.h"
#include "cc_pair.h"
#include "cc_split.h"

#define KERNEL_MARK "\nint kiln_k"
#define MAX_PARTS 8

/* a kernel's text: from the end of the kernel before it (the line after
 * that function's closing "}" at column 0) through its own closing "}"
 * line, so that what the emitter prints between two kernels goes with the
 * kernel after it: the static bodies a kernel calls (the streaming tile's
 * f32 and bf16 bodies) and a guarded block of helpers (the tile prelude);
 * a shared body (cc_dedup.c) defined right after the kernel stays with it,
 * beside the text before that kernel, which it may use. Cut at the
 * kernel lines instead, those fell to the kernel before, and a build whose
 * parts separated the two failed and was compiled whole: gemma3-270m's
 * recompile after a search 3.4 s in parts, 8-12 s after a failed split
 * (2-core Intel Xeon). The last kernel's text runs to the end. */
typedef struct segment {
    size_t at, len;
    double cost; /* its bytes and the bytes of the prelude functions it calls */
} segment;

static segment *segments(const char *src, size_t pre, int *n) {
    int cap = 256;
    segment *v = kiln_xcalloc((size_t)cap, sizeof *v);
    *n = 0;
    size_t at = pre, total = strlen(src);
    while (at < total) {
        const char *k = strstr(src + (at ? at - 1 : 0), KERNEL_MARK); /* this segment's kernel line */
        const char *kline = k ? k + 1 : src + total;
        const char *next = kline < src + total ? strstr(kline, KERNEL_MARK) : NULL;
        const char *close = kline < src + total ? strstr(kline, "\n}\n") : NULL;
        /* a shared body defined right after its first kernel stays with it */
        while (close && next && close < next && strncmp(close + 3, RT_CC_BODY_MARK, strlen(RT_CC_BODY_MARK)) == 0)
            close = strstr(close + 3, "\n}\n");
        size_t end = !next ? total : close && close < next ? (size_t)(close - src) + 3 : (size_t)(next - src) + 1;
        if (*n == cap) {
            cap *= 2;
            v = kiln_xrealloc(v, (size_t)cap * sizeof *v);
        }
        v[*n].at = at;
        v[*n].len = end - at;
        v[*n].cost = 0;
        (*n)++;
        at = end;
    }
    return v;
}

static int is_id(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

/* the index of the prelude part named by the identifier [a, a+l), or -1:
 * an open-addressed table of the parts' names */
typedef struct name_table {
    int *slot; /* part index + 1; 0 empty */
    size_t cap;
    const rt_cc_part *parts;
} name_table;

static uint64_t name_hash(const char *a, size_t l) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < l; i++) h = (h ^ (uint8_t)a[i]) * 0x100000001b3ULL;
    return h;
}

static int name_find(const name_table *t, const char *a, size_t l) {
    for (size_t i = name_hash(a, l) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        int p = t->slot[i] - 1;
        if (p < 0) return -1;
        if (strlen(t->parts[p].name) == l && memcmp(t->parts[p].name, a, l) == 0) return p;
    }
}

/* kernels to parts: the costliest first, each to the part where it adds
 * least to the largest load, a prelude function a part already calls
 * costing it nothing more (a static function is compiled once per unit
 * that calls it). The C compiler's time follows the prelude's micro-kernels
 * a kernel calls more than its own bytes: gemma3-270m's two programs as one
 * unit (cc_pair.c) cut at half the bytes were 12.0 and 3.8 s of compile,
 * one kernel calling 160 KB of them 3.5 s alone. The number of parts made */
static int assign_parts(const char *src, segment *seg, int nseg, int nparts, int *part_of) {
    rt_cc_part *pp = NULL;
    int np = rt_cc_prelude_parts(src, &pp);
    name_table t = {0};
    t.cap = 64;
    while (t.cap < 2 * (size_t)np + 2) t.cap *= 2;
    t.slot = kiln_xcalloc(t.cap, sizeof *t.slot);
    t.parts = pp;
    for (int p = 0; p < np; p++) {
        size_t l = strlen(pp[p].name);
        if (!l || strcmp(pp[p].name, "?") == 0 || name_find(&t, pp[p].name, l) >= 0) continue;
        size_t i = name_hash(pp[p].name, l) & (t.cap - 1);
        while (t.slot[i]) i = (i + 1) & (t.cap - 1);
        t.slot[i] = p + 1;
    }
    /* each kernel's calls into the prelude, as part indices */
    int **refs = kiln_xcalloc((size_t)nseg + 1, sizeof *refs);
    int *nref = kiln_xcalloc((size_t)nseg + 1, sizeof *nref);
    uint8_t *seen = kiln_xcalloc((size_t)np + 1, 1);
    for (int k = 0; k < nseg; k++) {
        const char *a = src + seg[k].at, *e = a + seg[k].len;
        int cap = 0;
        seg[k].cost = (double)seg[k].len;
        for (const char *c = a; c < e;) {
            if (!is_id(*c) || (c > a && is_id(c[-1]))) {
                c++;
                continue;
            }
            const char *d = c;
            while (d < e && is_id(*d)) d++;
            int p = np ? name_find(&t, c, (size_t)(d - c)) : -1;
            if (p >= 0 && !seen[p]) {
                seen[p] = 1;
                if (nref[k] == cap) {
                    cap = cap ? 2 * cap : 8;
                    refs[k] = kiln_xrealloc(refs[k], (size_t)cap * sizeof **refs);
                }
                refs[k][nref[k]++] = p;
                seg[k].cost += (double)pp[p].len;
            }
            c = d;
        }
        for (int r = 0; r < nref[k]; r++) seen[refs[k][r]] = 0;
    }
    int *order = kiln_xcalloc((size_t)nseg + 1, sizeof *order);
    for (int k = 0; k < nseg; k++) order[k] = k;
    for (int i = 1; i < nseg; i++) { /* by cost, largest first (insertion: stable, few hundred) */
        int k = order[i], j = i;
        while (j > 0 && seg[order[j - 1]].cost < seg[k].cost) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = k;
    }
    double load[MAX_PARTS] = {0};
    uint8_t *has = kiln_xcalloc((size_t)nparts * (size_t)(np + 1), 1); /* part x prelude part */
    int used = 0;
    for (int i = 0; i < nseg; i++) {
        int k = order[i], best = 0;
        double best_load = 0;
        for (int q = 0; q < nparts; q++) {
            double add = (double)seg[k].len;
            for (int r = 0; r < nref[k]; r++)
                if (!has[(size_t)q * (size_t)(np + 1) + (size_t)refs[k][r]]) add += (double)pp[refs[k][r]].len;
            if (q == 0 || load[q] + add < best_load) best = q, best_load = load[q] + add;
        }
        part_of[k] = best;
        load[best] = best_load;
        for (int r = 0; r < nref[k]; r++) has[(size_t)best * (size_t)(np + 1) + (size_t)refs[k][r]] = 1;
        if (best + 1 > used) used = best + 1;
    }
    for (int k = 0; k < nseg; k++) free(refs[k]);
    free(refs);
    free(nref);
    free(seen);
    free(order);
    free(has);
    free(t.slot);
    free(pp);
    return used;
}

/* part q's unit: the prelude, then its kernels in the source's order */
static int write_part(const char *path, const char *src, size_t pre, const segment *seg, int nseg,
                      const int *part_of, int q) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int bad = fwrite(src, 1, pre, f) != pre;
    for (int k = 0; k < nseg && !bad; k++)
        if (part_of[k] == q) bad = fwrite(src + seg[k].at, 1, seg[k].len, f) != seg[k].len;
    return fclose(f) != 0 || bad ? -1 : 0;
}

/* single quotes for sh; a path with a quote is refused (the cache paths kiln
 * makes never have one) */
static int quoted(char *out, size_t cap, const char *s) {
    if (strchr(s, '\'')) return -1;
    int n = snprintf(out, cap, "'%s'", s);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int rt_cc_split_parts(size_t src_len, int cores) {
    if (cores < 2 || src_len < ((size_t)256 << 10)) return 1;
    int n = cores < MAX_PARTS ? cores : MAX_PARTS;
    /* parts of at least 128 KB: below that the prelude's copies cost more than they save */
    while (n > 1 && src_len / (size_t)n < ((size_t)128 << 10)) n--;
    return n;
}

int rt_cc_split_build(const char *src, int nparts, const char *cc, const char *flags, const char *out_so,
                      const char *tmp_base) {
    if (nparts < 2 || nparts > MAX_PARTS) return -1;
    const char *first = strstr(src, KERNEL_MARK);
    if (!first) return -1;
    size_t pre = (size_t)(first - src) + 1;
    int nseg = 0;
    segment *seg = segments(src, pre, &nseg);
    int *part_of = kiln_xcalloc((size_t)nseg + 1, sizeof *part_of);
    int n = assign_parts(src, seg, nseg, nparts, part_of);
    if (n < 2) {
        free(seg);
        free(part_of);
        return -1;
    }

    char cmd[16384], q[1200], qo[1200];
    size_t used = 0;
    int ok = 1;
    /* every part in the background, then wait for each: the status of the
     * whole command is nonzero when any part failed */
    used += (size_t)snprintf(cmd + used, sizeof cmd - used, "fail=0; ");
    for (int i = 0; i < n && ok; i++) {
        char cpath[1100], opath[1100];
        snprintf(cpath, sizeof cpath, "%s.p%d.c", tmp_base, i);
        snprintf(opath, sizeof opath, "%s.p%d.o", tmp_base, i);
        if (write_part(cpath, src, pre, seg, nseg, part_of, i) != 0 || quoted(q, sizeof q, cpath) != 0 ||
            quoted(qo, sizeof qo, opath) != 0) {
            ok = 0;
            break;
        }
        int w = snprintf(cmd + used, sizeof cmd - used,
                         "%s %s -Werror=implicit-function-declaration -c -o %s %s 2>/dev/null & p%d=$!; ", cc, flags,
                         qo, q, i);
        if (w < 0 || (size_t)w >= sizeof cmd - used) ok = 0;
        else used += (size_t)w;
    }
    for (int i = 0; i < n && ok; i++) {
        int w = snprintf(cmd + used, sizeof cmd - used, "wait $p%d || fail=1; ", i);
        if (w < 0 || (size_t)w >= sizeof cmd - used) ok = 0;
        else used += (size_t)w;
    }
    if (ok) {
        char qso[1200];
        ok = quoted(qso, sizeof qso, out_so) == 0;
        int w = snprintf(cmd + used, sizeof cmd - used, "[ $fail = 0 ] && %s -shared -o %s", cc, qso);
        if (!ok || w < 0 || (size_t)w >= sizeof cmd - used) ok = 0;
        else used += (size_t)w;
        for (int i = 0; i < n && ok; i++) {
            char opath[1100];
            snprintf(opath, sizeof opath, "%s.p%d.o", tmp_base, i);
            ok = quoted(qo, sizeof qo, opath) == 0;
            w = snprintf(cmd + used, sizeof cmd - used, " %s", qo);
            if (!ok || w < 0 || (size_t)w >= sizeof cmd - used) ok = 0;
            else used += (size_t)w;
        }
        if (ok) {
            w = snprintf(cmd + used, sizeof cmd - used, " 2>/dev/null");
            if (w < 0 || (size_t)w >= sizeof cmd - used) ok = 0;
        }
    }
    int st = ok ? system(cmd) : -1;
    free(seg);
    free(part_of);
    for (int i = 0; i < n; i++) {
        char path[1100];
        snprintf(path, sizeof path, "%s.p%d.c", tmp_base, i);
        remove(path);
        snprintf(path, sizeof path, "%s.p%d.o", tmp_base, i);
        remove(path);
    }
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        remove(out_so);
        return -1;
    }
    /* a symbol one part needs from another would link (a shared object may
     * leave symbols undefined) and fail at load: load it now to know */
    void *h = dlopen(out_so, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        remove(out_so);
        return -1;
    }
    dlclose(h);
    return 0;
}
