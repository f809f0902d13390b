/* tunedb_public.c — the tuning DB's records as JSON for callers outside the
 * library (kiln_tunedb_json in include/kiln_compile.h; the Python package's
 * kiln.tune_records), over sch_tunedb_load.
 *
 * Invariant: strings are escaped so the result always parses as JSON
 * (control bytes as \u00XX; other bytes as they are).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "kiln_compile.h"
#include "tunedb.h"

typedef struct jbuf {
    char *s;
    size_t n, cap;
} jbuf;

static void put(jbuf *b, const char *t, size_t n) {
    if (b->n + n + 1 > b->cap) b->s = kiln_xrealloc(b->s, b->cap = 2 * (b->n + n + 64));
    memcpy(b->s + b->n, t, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void puts_(jbuf *b, const char *t) { put(b, t, strlen(t)); }

static void put_str(jbuf *b, const char *t) {
    put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
        char e[8];
        if (*p == '"' || *p == '\\') {
            e[0] = '\\';
            e[1] = (char)*p;
            put(b, e, 2);
        } else if (*p < 0x20) {
            snprintf(e, sizeof e, "\\u%04x", *p);
            put(b, e, 6);
        } else {
            put(b, (const char *)p, 1);
        }
    }
    put(b, "\"", 1);
}

static void put_field(jbuf *b, const char *name, const char *value, int first) {
    if (!first) puts_(b, ", ");
    put_str(b, name);
    puts_(b, ": ");
    put_str(b, value);
}

static void put_num(jbuf *b, const char *name, double v, int integer) {
    char t[64];
    if (integer) snprintf(t, sizeof t, ", \"%s\": %lld", name, (long long)v);
    else snprintf(t, sizeof t, ", \"%s\": %.9g", name, v);
    puts_(b, t);
}

char *kiln_tunedb_json(void) {
    int n = 0, damaged = 0;
    sch_tune_record *r = sch_tunedb_load(&n, &damaged);
    jbuf b = {NULL, 0, 0};
    puts_(&b, "{\"path\": ");
    put_str(&b, sch_tunedb_path());
    char t[64];
    snprintf(t, sizeof t, ", \"damaged\": %d, \"records\": [", damaged);
    puts_(&b, t);
    for (int i = 0; i < n; i++) {
        puts_(&b, i ? ",\n  {" : "\n  {");
        put_field(&b, "fingerprint", r[i].fingerprint, 1);
        put_field(&b, "key", r[i].key, 0);
        put_field(&b, "bucket", r[i].bucket, 0);
        put_field(&b, "schedule", r[i].schedule, 0);
        put_num(&b, "best_s", r[i].best_s, 0);
        put_num(&b, "base_s", r[i].base_s, 0);
        put_num(&b, "tried", r[i].tried, 1);
        put_num(&b, "rejected", r[i].rejected, 1);
        put_field(&b, "date", r[i].date, 0);
        put_num(&b, "ir_version", r[i].ir_version, 1);
        puts_(&b, "}");
    }
    puts_(&b, "]}\n");
    free(r);
    return b.s;
}
