/* test_tunedb.c — the tuning database (src/sched/tunedb.c): round trips of
 * awkward text, replacement by identity, exact vs seed lookups, survival of
 * damaged files (flipped bytes, truncation, binary garbage, empty files,
 * lines with a valid checksum but bad fields, another version's header),
 * the path rules, concurrent writers in two processes, export/import.
 *
 * Every case points KILN_TUNEDB at a fresh file in a private temporary
 * directory. Lines with a valid checksum are made here with an FNV-1a of
 * this file's own, from the format described at the top of tunedb.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "tunedb.h"

static char tmpdir[256];
static int file_no;

/* a fresh DB path in tmpdir, set as KILN_TUNEDB; returned in static storage */
static const char *fresh_db(void) {
    static char path[512];
    snprintf(path, sizeof path, "%s/db%d/tune.db", tmpdir, ++file_no);
    setenv("KILN_TUNEDB", path, 1);
    return path;
}

static sch_tune_record make_rec(const char *fp, const char *key, const char *bucket, const char *sched,
                                double best, double base, const char *date) {
    sch_tune_record r;
    memset(&r, 0, sizeof r);
    snprintf(r.fingerprint, sizeof r.fingerprint, "%s", fp);
    snprintf(r.key, sizeof r.key, "%s", key);
    snprintf(r.bucket, sizeof r.bucket, "%s", bucket);
    snprintf(r.schedule, sizeof r.schedule, "%s", sched);
    snprintf(r.date, sizeof r.date, "%s", date);
    r.best_s = best;
    r.base_s = base;
    r.tried = 17;
    r.rejected = 3;
    r.ir_version = 1;
    return r;
}

static int same_rec(const sch_tune_record *a, const sch_tune_record *b) {
    return strcmp(a->fingerprint, b->fingerprint) == 0 && strcmp(a->key, b->key) == 0 &&
           strcmp(a->bucket, b->bucket) == 0 && strcmp(a->schedule, b->schedule) == 0 &&
           strcmp(a->date, b->date) == 0 && a->best_s == b->best_s && a->base_s == b->base_s &&
           a->tried == b->tried && a->rejected == b->rejected && a->ir_version == b->ir_version;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int c;
    while ((c = fgetc(f)) != EOF) {
        if (n + 2 > cap) buf = realloc(buf, cap = cap ? cap * 2 : 1024);
        buf[n++] = (char)c;
    }
    fclose(f);
    if (!buf) buf = malloc(1);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

/* (creating the file's directory; the DB's does not exist before a store) */
static void write_file(const char *path, const char *data, size_t n) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0, mkdir(dir, 0755);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) printf("# writing %s failed\n", path);
    if (f) fclose(f);
}

static int count_char(const char *s, size_t n, char ch) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == ch;
    return k;
}

/* the file offset of the start of line `line` (1-based) */
static size_t line_start(const char *s, size_t n, int line) {
    size_t i = 0;
    for (int l = 1; l < line && i < n; i++)
        if (s[i] == '\n') l++;
    return i;
}

/* stderr captured into a file while a piece of the test runs */
static char err_path[300];
static int saved_stderr = -1;

static void capture_begin(void) {
    fflush(stderr);
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", tmpdir);
    int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    saved_stderr = dup(2);
    dup2(fd, 2);
    close(fd);
}

static char *capture_end(void) {
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    return read_file(err_path, NULL);
}

/* lines of s that contain needle */
static int count_lines_with(const char *s, const char *needle) {
    int k = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p++) k++;
    return k;
}

static uint64_t my_fnv(const char *s, size_t n) {
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ULL;
    return h;
}

/* a record line carrying a correct checksum of body */
static void signed_line(char *out, size_t cap, const char *body) {
    snprintf(out, cap, "%s sum=%016llx\n", body, (unsigned long long)my_fnv(body, strlen(body)));
}

/* ---- cases ---------------------------------------------------------------- */

static const char *AWKWARD_FP =
    "cpu=Intel(R) Xeon(R);isa=avx2,fma,avx512f;cores=2;l1d=48K;cc=cc (Debian 12.2.0) 12.2.0;ir=1 \"q\" \\b\\";
static const char *AWKWARD_SCHED = "contract mr=4 nr=2 kc=256; order=(i,j,k) \"x\"=\\ \ttab\nnl \xc3\xa9 end";

static void case_roundtrip(void) {
    CASE_BEGIN("store_lookup_roundtrip_awkward_text");
    const char *db = fresh_db();
    sch_tune_record r = make_rec(AWKWARD_FP, "0123abcd=,; key", "m=1, n=640,k=2048", AWKWARD_SCHED,
                                 1.2345678901234567e-5, 0.1 + 0.2, "2025-01-31T12:00:00Z");
    r.tried = 123456;
    r.rejected = 7;
    r.ir_version = 42;
    char err[256] = "";
    CHECK(sch_tunedb_store(&r, err, sizeof err) == KILN_OK, "store: %s", err);
    CHECK(strcmp(sch_tunedb_path(), db) == 0, "path %s, want %s", sch_tunedb_path(), db);
    sch_tune_record got;
    int exact = -1;
    CHECK(sch_tunedb_lookup(AWKWARD_FP, r.key, r.bucket, &got, &exact) == 1, "not found");
    CHECK(exact == 1, "exact %d", exact);
    CHECK(same_rec(&got, &r), "fields differ: sched '%s' fp '%s' best %.17g base %.17g", got.schedule,
          got.fingerprint, got.best_s, got.base_s);
    /* one header line and one record line: the newline in the schedule is escaped */
    size_t n = 0;
    char *text = read_file(db, &n);
    CHECK(text && count_char(text, n, '\n') == 2, "file has %d lines", text ? count_char(text, n, '\n') : -1);
    CHECK(text && strncmp(text, "# kiln tune db v1\n", 18) == 0, "no header");
    /* the schedule is readable in the file: its plain words appear as they are */
    CHECK(text && strstr(text, "contract mr=4 nr=2 kc=256; order=(i,j,k)"), "schedule not readable in the file");
    for (size_t i = 0; text && i < n; i++) CHECK((unsigned char)text[i] < 0x80, "non-ASCII byte at %zu", i);
    free(text);
    /* a different bucket or key is not found */
    CHECK(sch_tunedb_lookup(AWKWARD_FP, r.key, "m=2, n=640,k=2048", &got, &exact) == 0, "wrong bucket found");
    CHECK(sch_tunedb_lookup(AWKWARD_FP, "other", r.bucket, &got, &exact) == 0, "wrong key found");
    /* an empty date is filled in with the time of storing */
    sch_tune_record nodate = make_rec("fpX", "k2", "b", "s", 1e-3, 2e-3, "");
    CHECK(sch_tunedb_store(&nodate, err, sizeof err) == KILN_OK, "store: %s", err);
    CHECK(sch_tunedb_lookup("fpX", "k2", "b", &got, &exact) == 1, "dateless record not found");
    CHECK(strlen(got.date) == 20 && got.date[4] == '-' && got.date[10] == 'T' && got.date[19] == 'Z', "date '%s'",
          got.date);
    CASE_END();
}

static void case_replace(void) {
    CASE_BEGIN("store_replaces_same_identity");
    fresh_db();
    char err[256] = "";
    sch_tune_record a = make_rec("fp1", "k", "b", "first", 2e-3, 3e-3, "2025-01-01T00:00:00Z");
    sch_tune_record b = make_rec("fp1", "k", "b", "second", 1e-3, 3e-3, "2025-01-02T00:00:00Z");
    sch_tune_record c = make_rec("fp1", "k", "b2", "other bucket", 1e-3, 3e-3, "2025-01-02T00:00:00Z");
    CHECK(sch_tunedb_store(&a, err, sizeof err) == KILN_OK, "%s", err);
    CHECK(sch_tunedb_store(&c, err, sizeof err) == KILN_OK, "%s", err);
    CHECK(sch_tunedb_store(&b, err, sizeof err) == KILN_OK, "%s", err);
    int n = -1, dmg = -1;
    sch_tune_record *all = sch_tunedb_load(&n, &dmg);
    CHECK(n == 2 && dmg == 0, "n %d damaged %d", n, dmg);
    int saw_second = 0, saw_first = 0, saw_c = 0;
    for (int i = 0; i < n; i++) {
        saw_second += strcmp(all[i].schedule, "second") == 0;
        saw_first += strcmp(all[i].schedule, "first") == 0;
        saw_c += same_rec(&all[i], &c);
    }
    CHECK(saw_second == 1 && saw_first == 0 && saw_c == 1, "second %d first %d c %d", saw_second, saw_first, saw_c);
    free(all);
    CASE_END();
}

static void case_exact_seed(void) {
    CASE_BEGIN("lookup_exact_vs_seed");
    fresh_db();
    char err[256] = "";
    sch_tune_record recs[] = {
        make_rec("fpA", "k", "b", "sched A", 1e-3, 2e-3, "2024-06-01T00:00:00Z"),
        make_rec("fpB", "k", "b", "sched B newest", 1e-3, 2e-3, "2025-03-01T00:00:00Z"),
        make_rec("fpC", "k", "b", "sched C", 1e-3, 2e-3, "2023-01-01T00:00:00Z"),
        make_rec("fpD", "k", "other", "sched D other bucket", 1e-3, 2e-3, "2026-01-01T00:00:00Z"),
    };
    for (size_t i = 0; i < sizeof recs / sizeof recs[0]; i++)
        CHECK(sch_tunedb_store(&recs[i], err, sizeof err) == KILN_OK, "%s", err);
    sch_tune_record got;
    int exact = -1;
    CHECK(sch_tunedb_lookup("fpA", "k", "b", &got, &exact) == 1 && exact == 1 && same_rec(&got, &recs[0]),
          "exact A: exact %d sched '%s'", exact, got.schedule);
    CHECK(sch_tunedb_lookup("fpC", "k", "b", &got, &exact) == 1 && exact == 1 && same_rec(&got, &recs[2]),
          "exact C (older than others): exact %d sched '%s'", exact, got.schedule);
    CHECK(sch_tunedb_lookup("fpZ", "k", "b", &got, &exact) == 1 && exact == 0 && same_rec(&got, &recs[1]),
          "seed: exact %d sched '%s'", exact, got.schedule);
    CHECK(sch_tunedb_lookup("fpZ", "k", "missing", &got, &exact) == 0, "missing bucket found");
    /* NULL out / exact are allowed */
    CHECK(sch_tunedb_lookup("fpZ", "k", "other", NULL, NULL) == 1, "lookup with NULL outputs");
    CASE_END();
}

/* a bucket with no record of its own is seeded from this machine's record
 * at another thread count first, else from the nearest shape (within 4x in
 * n and k) at the same M bucket, batch and threads; never from another
 * machine, another key or an unparsable bucket */
static void case_near(void) {
    CASE_BEGIN("lookup_near_threads_and_shapes");
    fresh_db();
    char err[256] = "";
    sch_tune_record recs[] = {
        make_rec("fpA", "k", "m<=4,n=640,k=2048,b=1,t=1", "t1 same shape", 1e-3, 2e-3, "2025-01-01T00:00:00Z"),
        make_rec("fpA", "k", "m<=4,n=1024,k=2048,b=1,t=2", "t2 near shape", 1e-3, 2e-3, "2025-01-01T00:00:00Z"),
        make_rec("fpA", "k", "m<=4,n=4096,k=2048,b=1,t=2", "t2 far shape", 1e-3, 2e-3, "2025-01-01T00:00:00Z"),
        make_rec("fpA", "k", "m>4,n=640,k=2048,b=1,t=2", "large M", 1e-3, 2e-3, "2025-01-01T00:00:00Z"),
        make_rec("fpB", "k", "m<=4,n=640,k=2048,b=1,t=3", "other machine", 1e-3, 2e-3, "2026-01-01T00:00:00Z"),
        make_rec("fpA", "other", "m<=4,n=640,k=2048,b=1,t=4", "other key", 1e-3, 2e-3, "2026-01-01T00:00:00Z"),
    };
    for (size_t i = 0; i < sizeof recs / sizeof recs[0]; i++)
        CHECK(sch_tunedb_store(&recs[i], err, sizeof err) == KILN_OK, "%s", err);
    sch_tune_record got;
    memset(&got, 0, sizeof got);
    CHECK(sch_tunedb_lookup_near("fpA", "k", "m<=4,n=640,k=2048,b=1,t=2", &got) == 1 &&
              strcmp(got.schedule, "t1 same shape") == 0,
          "another thread count first: '%s'", got.schedule);
    CHECK(sch_tunedb_lookup_near("fpA", "k", "m<=4,n=800,k=2048,b=1,t=2", &got) == 1 &&
              strcmp(got.schedule, "t2 near shape") == 0,
          "nearest shape: '%s'", got.schedule);
    CHECK(sch_tunedb_lookup_near("fpA", "k", "m<=4,n=100,k=2048,b=1,t=2", &got) == 0, "a shape 6x away seeded");
    CHECK(sch_tunedb_lookup_near("fpA", "k", "m>4,n=640,k=2048,b=1,t=1", &got) == 1 &&
              strcmp(got.schedule, "large M") == 0,
          "large M at another thread count: '%s'", got.schedule);
    CHECK(sch_tunedb_lookup_near("fpA", "k", "m<=4,n=640,k=2048,b=2,t=2", &got) == 0, "another batch seeded");
    CHECK(sch_tunedb_lookup_near("fpC", "k", "m<=4,n=640,k=2048,b=1,t=2", &got) == 0, "another machine seeded");
    CHECK(sch_tunedb_lookup_near("fpA", "k", "not a bucket", &got) == 0, "unparsable bucket");
    CHECK(sch_tunedb_lookup_near("fpA", "k", "m<=4,n=640,k=2048,b=1,t=2x", &got) == 0, "trailing text");
    CASE_END();
}

/* five good records in a fresh DB; returns its path */
static const char *five_records(sch_tune_record recs[5]) {
    const char *db = fresh_db();
    char err[256] = "";
    for (int i = 0; i < 5; i++) {
        char key[32], sched[64];
        snprintf(key, sizeof key, "key%d", i);
        snprintf(sched, sizeof sched, "sched number %d; x=%d", i, i);
        recs[i] = make_rec("fp;a=1,b=2", key, "m=1,n=2", sched, 1e-4 * (i + 1), 1e-3, "2025-01-01T00:00:00Z");
        if (sch_tunedb_store(&recs[i], err, sizeof err) != KILN_OK) printf("# store failed: %s\n", err);
    }
    return db;
}

/* which of the five are found, as a bit mask */
static int found_mask(const sch_tune_record recs[5]) {
    int mask = 0;
    for (int i = 0; i < 5; i++) {
        sch_tune_record got;
        int exact = 0;
        if (sch_tunedb_lookup(recs[i].fingerprint, recs[i].key, recs[i].bucket, &got, &exact) && exact &&
            same_rec(&got, &recs[i]))
            mask |= 1 << i;
    }
    return mask;
}

static void case_corrupt(void) {
    sch_tune_record recs[5];
    char err[256] = "";

    CASE_BEGIN("damaged_flipped_byte");
    {
        const char *db = five_records(recs);
        size_t n = 0;
        char *text = read_file(db, &n);
        /* line 1 is the header; line 4 holds the third record: flip a byte of its schedule */
        size_t at = line_start(text, n, 4) + 30;
        CHECK(at < n, "file too short");
        text[at] ^= 0x01;
        write_file(db, text, n);
        free(text);
        capture_begin();
        int cnt = -1, dmg = -1;
        sch_tune_record *all = sch_tunedb_load(&cnt, &dmg);
        char *msg = capture_end();
        CHECK(cnt == 4 && dmg == 1, "n %d damaged %d", cnt, dmg);
        CHECK(msg && count_lines_with(msg, "tune db") == 1, "want one warning, got: %s", msg ? msg : "");
        CHECK(msg && strstr(msg, db) && strstr(msg, "line 4"), "warning does not name file and line: %s",
              msg ? msg : "");
        free(msg);
        free(all);
        capture_begin();
        int mask = found_mask(recs);
        free(capture_end());
        CHECK(mask == (0x1f & ~(1 << 2)), "found mask %x", mask);
    }
    CASE_END();

    CASE_BEGIN("damaged_lines_set_aside_on_store");
    {
        /* the DB of the previous case still has its damaged line 4 */
        const char *db = sch_tunedb_path();
        size_t n = 0;
        char *before = read_file(db, &n);
        size_t s4 = line_start(before, n, 4), e4 = line_start(before, n, 5);
        char *bad = strndup(before + s4, e4 - s4 - 1);
        free(before);
        sch_tune_record extra = make_rec("fp;a=1,b=2", "key9", "m=1,n=2", "new", 1e-5, 1e-3, "2025-02-01T00:00:00Z");
        capture_begin();
        kiln_status st = sch_tunedb_store(&extra, err, sizeof err);
        free(capture_end());
        CHECK(st == KILN_OK, "store: %s", err);
        int cnt = -1, dmg = -1;
        sch_tune_record *all = sch_tunedb_load(&cnt, &dmg);
        CHECK(cnt == 5 && dmg == 0, "after store: n %d damaged %d", cnt, dmg);
        free(all);
        char side[600];
        snprintf(side, sizeof side, "%s.damaged", db);
        char *aside = read_file(side, NULL);
        CHECK(aside && strstr(aside, bad), "damaged line not in %s", side);
        free(aside);
        free(bad);
    }
    CASE_END();

    CASE_BEGIN("damaged_truncated_mid_line");
    {
        const char *db = five_records(recs);
        size_t n = 0;
        char *text = read_file(db, &n);
        size_t s6 = line_start(text, n, 6); /* the last record */
        write_file(db, text, s6 + (n - s6) / 2);
        free(text);
        capture_begin();
        int cnt = -1, dmg = -1;
        sch_tune_record *all = sch_tunedb_load(&cnt, &dmg);
        char *msg = capture_end();
        CHECK(cnt == 4 && dmg == 1, "n %d damaged %d", cnt, dmg);
        CHECK(msg && strstr(msg, "line 6"), "warning: %s", msg ? msg : "");
        free(msg);
        free(all);
        capture_begin();
        int mask = found_mask(recs);
        free(capture_end());
        CHECK(mask == 0x0f, "found mask %x", mask);
    }
    CASE_END();

    CASE_BEGIN("damaged_binary_garbage");
    {
        const char *db = five_records(recs);
        size_t n = 0;
        char *text = read_file(db, &n);
        /* garbage (NUL bytes, newlines, high bytes) spliced in after line 3 */
        size_t cut = line_start(text, n, 4);
        size_t glen = 5000;
        char *mixed = malloc(n + glen);
        memcpy(mixed, text, cut);
        uint64_t s = 0x1234567;
        for (size_t i = 0; i < glen; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            mixed[cut + i] = (char)(s >> 56);
        }
        mixed[cut + glen - 1] = '\n';
        memcpy(mixed + cut + glen, text + cut, n - cut);
        write_file(db, mixed, n + glen);
        capture_begin();
        int cnt = -1, dmg = -1;
        sch_tune_record *all = sch_tunedb_load(&cnt, &dmg);
        char *msg = capture_end();
        CHECK(cnt == 5 && dmg >= 1, "n %d damaged %d", cnt, dmg);
        CHECK(msg && count_lines_with(msg, "tune db") == 1, "want one warning: %s", msg ? msg : "");
        free(msg);
        free(all);
        capture_begin();
        int mask = found_mask(recs);
        free(capture_end());
        CHECK(mask == 0x1f, "found mask %x", mask);
        /* nothing but garbage, no newline at all */
        write_file(db, mixed + cut, glen - 1);
        capture_begin();
        all = sch_tunedb_load(&cnt, &dmg);
        sch_tune_record got;
        int exact = 0;
        int found = sch_tunedb_lookup(recs[0].fingerprint, recs[0].key, recs[0].bucket, &got, &exact);
        /* a store over it keeps nothing of the garbage but works */
        kiln_status st = sch_tunedb_store(&recs[0], err, sizeof err);
        free(capture_end());
        CHECK(all == NULL && cnt == 0 && dmg >= 1, "all-garbage: n %d damaged %d", cnt, dmg);
        CHECK(!found, "found a record in garbage");
        CHECK(st == KILN_OK, "store over garbage: %s", err);
        all = sch_tunedb_load(&cnt, &dmg);
        CHECK(cnt == 1 && dmg == 0 && all && same_rec(&all[0], &recs[0]), "after store: n %d damaged %d", cnt, dmg);
        free(all);
        free(mixed);
        free(text);
    }
    CASE_END();

    CASE_BEGIN("damaged_empty_missing_directory");
    {
        const char *db = fresh_db();
        int cnt = -1, dmg = -1;
        sch_tune_record *all = sch_tunedb_load(&cnt, &dmg);
        CHECK(all == NULL && cnt == 0 && dmg == 0, "missing: n %d damaged %d", cnt, dmg);
        CHECK(sch_tunedb_lookup("a", "b", "c", NULL, NULL) == 0, "found in a missing file");
        /* the directory does not exist yet: a store creates it */
        char err2[256] = "";
        sch_tune_record r = make_rec("fp", "k", "b", "s", 1e-3, 1e-3, "2025-01-01T00:00:00Z");
        CHECK(sch_tunedb_store(&r, err2, sizeof err2) == KILN_OK, "store into a new directory: %s", err2);
        write_file(db, "", 0);
        capture_begin();
        all = sch_tunedb_load(&cnt, &dmg);
        char *msg = capture_end();
        CHECK(all == NULL && cnt == 0 && dmg == 0, "empty: n %d damaged %d", cnt, dmg);
        CHECK(msg && msg[0] == 0, "empty file warned: %s", msg ? msg : "");
        free(msg);
        /* a directory where the file should be: no records, and a store fails cleanly */
        unlink(db);
        mkdir(db, 0755);
        capture_begin();
        all = sch_tunedb_load(&cnt, &dmg);
        kiln_status st = sch_tunedb_store(&r, err2, sizeof err2);
        free(capture_end());
        CHECK(all == NULL && cnt == 0, "directory: n %d", cnt);
        CHECK(st == KILN_ERR_IO && err2[0], "store over a directory: status %d", (int)st);
        rmdir(db);
    }
    CASE_END();

    CASE_BEGIN("damaged_valid_checksum_bad_fields");
    {
        const char *db = fresh_db();
        static const char *bodies[] = {
            /* good */
            "fp=\"F\" key=\"K0\" bucket=\"B\" sched=\"s\" best=0.001 base=0.002 tried=1 rejected=0 date=\"d\" ir=1",
            /* negative time */
            "fp=\"F\" key=\"K1\" bucket=\"B\" sched=\"s\" best=-0.001 base=0.002 tried=1 rejected=0 date=\"d\" ir=1",
            /* not a number */
            "fp=\"F\" key=\"K2\" bucket=\"B\" sched=\"s\" best=nan base=0.002 tried=1 rejected=0 date=\"d\" ir=1",
            /* unterminated string */
            "fp=\"F\" key=\"K3\" bucket=\"B\" sched=\"s base=0.002 tried=1 rejected=0 date=\"d\" ir=1",
            /* field missing */
            "fp=\"F\" key=\"K4\" bucket=\"B\" sched=\"s\" best=0.001 tried=1 rejected=0 date=\"d\" ir=1",
            /* bad escape */
            "fp=\"F\" key=\"K5\" bucket=\"B\" sched=\"\\q\" best=0.001 base=0.002 tried=1 rejected=0 date=\"d\" ir=1",
            /* key longer than its field */
            "fp=\"F\" key=\"K6xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
            "xxxxxxxxxxxxxxxxxxx\" bucket=\"B\" sched=\"s\" best=0.001 base=0.002 tried=1 rejected=0 date=\"d\" ir=1",
            /* trailing junk */
            "fp=\"F\" key=\"K7\" bucket=\"B\" sched=\"s\" best=0.001 base=0.002 tried=1 rejected=0 date=\"d\" ir=1 x=2",
            /* good, with escapes */
            "fp=\"F;x=1,y\" key=\"K8\" bucket=\"B\" sched=\"a \\\"b\\\" \\\\ \\x0a\" best=1e-05 base=0.002 tried=1 "
            "rejected=0 date=\"d\" ir=1",
        };
        char file[8192] = "# kiln tune db v1\n";
        for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
            char line[1024];
            signed_line(line, sizeof line, bodies[i]);
            strcat(file, line);
        }
        write_file(db, file, strlen(file));
        capture_begin();
        int cnt = -1, dmg = -1;
        sch_tune_record *all = sch_tunedb_load(&cnt, &dmg);
        char *msg = capture_end();
        CHECK(cnt == 2 && dmg == 7, "n %d damaged %d", cnt, dmg);
        CHECK(msg && strstr(msg, "line 3"), "first damaged line is 3: %s", msg ? msg : "");
        CHECK(all && strcmp(all[0].key, "K0") == 0 && all[0].best_s == 0.001 && all[0].base_s == 0.002,
              "K0 fields");
        CHECK(cnt == 2 && all && strcmp(all[1].fingerprint, "F;x=1,y") == 0 &&
                  strcmp(all[1].schedule, "a \"b\" \\ \n") == 0 && all[1].best_s == 1e-5,
              "K8 fields: '%s'", cnt == 2 && all ? all[1].schedule : "");
        free(msg);
        free(all);
    }
    CASE_END();

    CASE_BEGIN("other_version_not_read_or_rewritten");
    {
        const char *db = fresh_db();
        char line[1024];
        signed_line(line, sizeof line,
                    "fp=\"F\" key=\"K0\" bucket=\"B\" sched=\"s\" best=0.001 base=0.002 tried=1 rejected=0 "
                    "date=\"d\" ir=1");
        char file[2048];
        snprintf(file, sizeof file, "# kiln tune db v2\n%s", line);
        write_file(db, file, strlen(file));
        capture_begin();
        int found = sch_tunedb_lookup("F", "K0", "B", NULL, NULL);
        sch_tune_record r = make_rec("fp", "k", "b", "s", 1e-3, 1e-3, "2025-01-01T00:00:00Z");
        kiln_status st = sch_tunedb_store(&r, err, sizeof err);
        char *msg = capture_end();
        CHECK(!found, "a v2 file's record was used");
        CHECK(st == KILN_ERR_FORMAT, "store over a v2 file: status %d", (int)st);
        char *after = read_file(db, NULL);
        CHECK(after && strcmp(after, file) == 0, "the v2 file was changed");
        CHECK(msg && strstr(msg, "version"), "no warning: %s", msg ? msg : "");
        free(after);
        free(msg);
    }
    CASE_END();
}

static void case_store_rejects(void) {
    CASE_BEGIN("store_rejects_bad_records");
    const char *db = fresh_db();
    char err[256] = "";
    sch_tune_record r = make_rec("fp", "k", "b", "s", NAN, 1e-3, "2025-01-01T00:00:00Z");
    CHECK(sch_tunedb_store(&r, err, sizeof err) == KILN_ERR_INVALID && err[0], "NaN accepted");
    r = make_rec("fp", "k", "b", "s", 1e-3, -1, "2025-01-01T00:00:00Z");
    CHECK(sch_tunedb_store(&r, err, sizeof err) == KILN_ERR_INVALID, "negative base accepted");
    r = make_rec("fp", "", "b", "s", 1e-3, 1e-3, "2025-01-01T00:00:00Z");
    CHECK(sch_tunedb_store(&r, err, sizeof err) == KILN_ERR_INVALID, "empty key accepted");
    r = make_rec("fp", "k", "b", "s", 1e-3, 1e-3, "2025-01-01T00:00:00Z");
    memset(r.schedule, 'x', sizeof r.schedule); /* not NUL-terminated */
    CHECK(sch_tunedb_store(&r, err, sizeof err) == KILN_ERR_INVALID, "unterminated schedule accepted");
    CHECK(sch_tunedb_store(NULL, err, sizeof err) == KILN_ERR_INVALID, "NULL accepted");
    struct stat st;
    CHECK(stat(db, &st) != 0, "a rejected store wrote the DB");
    CASE_END();
}

static void case_path(void) {
    CASE_BEGIN("path_from_environment");
    char *saved_db = getenv("KILN_TUNEDB") ? strdup(getenv("KILN_TUNEDB")) : NULL;
    char *saved_xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
    char *saved_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    unsetenv("KILN_TUNEDB");
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    setenv("HOME", "/h", 1);
    CHECK(strcmp(sch_tunedb_path(), "/x/cache/kiln/tune.db") == 0, "xdg: %s", sch_tunedb_path());
    setenv("XDG_CACHE_HOME", "relative/cache", 1);
    CHECK(strcmp(sch_tunedb_path(), "/h/.cache/kiln/tune.db") == 0, "relative xdg: %s", sch_tunedb_path());
    unsetenv("XDG_CACHE_HOME");
    CHECK(strcmp(sch_tunedb_path(), "/h/.cache/kiln/tune.db") == 0, "home: %s", sch_tunedb_path());
    setenv("KILN_TUNEDB", "/some/where.db", 1);
    CHECK(strcmp(sch_tunedb_path(), "/some/where.db") == 0, "KILN_TUNEDB: %s", sch_tunedb_path());
    /* the XDG location is created on the first store */
    char xdg[400];
    snprintf(xdg, sizeof xdg, "%s/xdg/deeper", tmpdir);
    unsetenv("KILN_TUNEDB");
    setenv("XDG_CACHE_HOME", xdg, 1);
    char err[256] = "";
    sch_tune_record r = make_rec("fp", "k", "b", "s", 1e-3, 1e-3, "2025-01-01T00:00:00Z");
    CHECK(sch_tunedb_store(&r, err, sizeof err) == KILN_OK, "store: %s", err);
    char want[500];
    snprintf(want, sizeof want, "%s/kiln/tune.db", xdg);
    struct stat st;
    CHECK(stat(want, &st) == 0 && S_ISREG(st.st_mode), "%s not created", want);
    if (saved_db) setenv("KILN_TUNEDB", saved_db, 1);
    else unsetenv("KILN_TUNEDB");
    if (saved_xdg) setenv("XDG_CACHE_HOME", saved_xdg, 1);
    else unsetenv("XDG_CACHE_HOME");
    if (saved_home) setenv("HOME", saved_home, 1);
    else unsetenv("HOME");
    free(saved_db);
    free(saved_xdg);
    free(saved_home);
    CASE_END();
}

#define PER_PROC 200

static void case_concurrent(void) {
    CASE_BEGIN("concurrent_processes_all_land");
    fresh_db();
    pid_t kids[2];
    for (int p = 0; p < 2; p++) {
        kids[p] = fork();
        if (kids[p] == 0) {
            int bad = 0;
            for (int i = 0; i < PER_PROC; i++) {
                char key[32], err[256];
                snprintf(key, sizeof key, "proc%d-rec%d", p, i);
                sch_tune_record r = make_rec("fp;shared=1", key, "m=1", "s x=1", 1e-6 * (i + 1), 1e-3,
                                             "2025-01-01T00:00:00Z");
                if (sch_tunedb_store(&r, err, sizeof err) != KILN_OK) {
                    fprintf(stderr, "child %d: %s\n", p, err);
                    bad = 1;
                }
            }
            _exit(bad);
        }
    }
    for (int p = 0; p < 2; p++) {
        int status = 0;
        CHECK(kids[p] > 0 && waitpid(kids[p], &status, 0) == kids[p], "fork/wait failed");
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d failed (status %d)", p, status);
    }
    int cnt = -1, dmg = -1;
    sch_tune_record *all = sch_tunedb_load(&cnt, &dmg);
    CHECK(cnt == 2 * PER_PROC && dmg == 0, "n %d damaged %d", cnt, dmg);
    int seen[2][PER_PROC];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < cnt; i++) {
        int p = -1, k = -1;
        if (sscanf(all[i].key, "proc%d-rec%d", &p, &k) == 2 && p >= 0 && p < 2 && k >= 0 && k < PER_PROC)
            seen[p][k]++;
    }
    int missing = 0;
    for (int p = 0; p < 2; p++)
        for (int k = 0; k < PER_PROC; k++) missing += seen[p][k] != 1;
    CHECK(missing == 0, "%d records missing or duplicated", missing);
    free(all);
    CASE_END();
}

static void case_export_import(void) {
    CASE_BEGIN("export_import_roundtrip");
    fresh_db();
    char err[256] = "";
    enum { N = 30 };
    sch_tune_record recs[N];
    for (int i = 0; i < N; i++) {
        char key[64], bucket[64], sched[128];
        snprintf(key, sizeof key, "key \"%d\"", i);
        snprintf(bucket, sizeof bucket, "m=%d, n=7,k=%d", i, 3 * i);
        snprintf(sched, sizeof sched, "%s mr=%d\\nr=%d\t;", i % 2 ? "contract" : "loop", i % 5, i % 3);
        recs[i] = make_rec(i % 3 ? AWKWARD_FP : "gpu=H200;drv=1,2", key, bucket, sched, 1.0 / (i + 3),
                           1.0 / (i + 1) + 1e-9, i % 2 ? "2025-05-05T05:05:05Z" : "2024-12-31T23:59:59Z");
        recs[i].tried = i * 11;
        recs[i].rejected = i % 4;
        recs[i].ir_version = 1 + i % 2;
        CHECK(sch_tunedb_store(&recs[i], err, sizeof err) == KILN_OK, "store %d: %s", i, err);
    }
    char out[400];
    snprintf(out, sizeof out, "%s/exported.db", tmpdir);
    int n = -1;
    CHECK(sch_tunedb_export(out, &n, err, sizeof err) == KILN_OK && n == N, "export: n %d %s", n, err);
    fresh_db(); /* an empty DB */
    CHECK(sch_tunedb_import(out, &n, err, sizeof err) == KILN_OK && n == N, "import: n %d %s", n, err);
    int cnt = -1, dmg = -1;
    sch_tune_record *all = sch_tunedb_load(&cnt, &dmg);
    CHECK(cnt == N && dmg == 0, "n %d damaged %d", cnt, dmg);
    int matched = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < cnt; j++) matched += same_rec(&recs[i], &all[j]);
    CHECK(matched == N, "%d of %d records round-trip exactly", matched, N);
    free(all);
    /* importing again merges: same identities are replaced, nothing doubles */
    sch_tune_record extra = make_rec("local", "k", "b", "s", 1e-3, 1e-3, "2025-01-01T00:00:00Z");
    CHECK(sch_tunedb_store(&extra, err, sizeof err) == KILN_OK, "%s", err);
    CHECK(sch_tunedb_import(out, &n, err, sizeof err) == KILN_OK && n == N, "re-import: n %d %s", n, err);
    all = sch_tunedb_load(&cnt, &dmg);
    CHECK(cnt == N + 1, "after re-import n %d", cnt);
    free(all);
    /* a missing source is an error, not an empty import */
    char missing[400];
    snprintf(missing, sizeof missing, "%s/no-such-file", tmpdir);
    CHECK(sch_tunedb_import(missing, &n, err, sizeof err) == KILN_ERR_IO && n == 0, "missing import");
    CASE_END();
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "%s/kiln_tunedb_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL setup: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    case_roundtrip();
    case_replace();
    case_exact_seed();
    case_near();
    case_corrupt();
    case_store_rejects();
    case_path();
    case_concurrent();
    case_export_import();
    if (!check_failed_cases) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) printf("# could not remove %s\n", tmpdir);
    } else {
        printf("# files kept in %s\n", tmpdir);
    }
    return check_exit();
}
