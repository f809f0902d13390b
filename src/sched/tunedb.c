/* tunedb.c — the tuning database: one text file of the winning schedules,
 * shared by every kiln process on the machine (DESIGN.md section 5).
 *
 * ---- file format (version 1) ----------------------------------------------
 *
 * The first line is the header "# kiln tune db v1". Other lines that start
 * with '#' are comments and blank lines are ignored; every other line is one
 * record, eleven fields in this fixed order, separated by one space:
 *
 *   fp="..." key="..." bucket="..." sched="..." best=G base=G tried=N
 *   rejected=N date="..." ir=N sum=HHHHHHHHHHHHHHHH
 *
 *   fp        the hardware fingerprint (rt_cpu_fingerprint or a GPU's)
 *   key       the kernel key (hash of its loop IR and dtypes)
 *   bucket    the shape bucket, e.g. "m=1,n=640,k=2048"
 *   sched     the winning schedule as readable text
 *   best      the winner's time in seconds (C "%.15g" to "%.17g", the
 *             shortest that reads back exactly)
 *   base      the untuned default schedule's time in seconds
 *   tried     candidates measured
 *   rejected  candidates disqualified by the reference check
 *   date      when it was stored, UTC, ISO 8601 ("2025-01-31T12:00:00Z")
 *   ir        kiln IR version the key was made with
 *   sum       FNV-1a 64 of every byte of the line before " sum=", as 16
 *             lowercase hex digits
 *
 * Text fields are always in double quotes. Inside them printable ASCII
 * stands for itself (so ';' ',' '=' and spaces need nothing), except '"' and
 * '\' which are written \" and \\; every other byte (control, DEL, non-ASCII)
 * is written \xHH. A file is therefore plain ASCII, one record per line, and
 * a record never contains a raw newline. Numbers are bare, non-negative and
 * finite. A line that fails its checksum or does not parse exactly like this
 * is damaged: it is skipped (one warning on stderr per load, naming the file
 * and the first such line) and never trusted. A header naming another
 * version makes the whole file unreadable to this kiln (and unwritable, so
 * an older kiln never destroys a newer kiln's records).
 *
 * ---- invariants -----------------------------------------------------------
 *
 * - Readers take no lock: writers replace the file with rename(), so a
 *   reader sees a whole old file or a whole new one.
 * - Writers hold an fcntl write lock on "<db>.lock" (and, since fcntl locks
 *   belong to the process, a mutex against the process's own threads) while
 *   they re-read the file, merge their records in, and write "<db>.tmp.XXXXXX"
 *   in the same directory, fsync it and rename it over the DB. Two processes
 *   storing at once therefore both land their records.
 * - Records are unique by identity (fingerprint, key, bucket): a later
 *   record replaces an earlier one in place, in the file and in loads.
 * - A write drops damaged lines from the DB but first appends them, raw, to
 *   "<db>.damaged", so nothing is silently lost.
 */
#include "tunedb.h"
#include "loop.h" /* KILN_IR_VERSION */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "config.h"

#define TUNEDB_HEADER "# kiln tune db v1"
#define TUNEDB_HEADER_PREFIX "# kiln tune db v"
#define TUNEDB_PATH_MAX 4096
/* a valid line is at most ~4 x 4 x 512 escaped bytes; anything far longer is garbage */
#define TUNEDB_LINE_MAX 16384

/* ---- small helpers ------------------------------------------------------ */

static uint64_t fnv1a64(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* name=number, in the fewest digits that read back to exactly v (%.17g
 * always does, but writes 1e-05 as 1.0000000000000001e-05) */
static void sb_num(kiln_sb *b, const char *name, double v) {
    char tmp[64];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) break;
    }
    kiln_sb_puts(b, name);
    kiln_sb_puts(b, tmp);
}

/* name="escaped text" */
static void sb_field_str(kiln_sb *b, const char *name, const char *s) {
    kiln_sb_puts(b, name);
    kiln_sb_puts(b, "=\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char e[2] = {'\\', (char)*c};
            kiln_sb_putn(b, e, 2);
        } else if (*c < 0x20 || *c >= 0x7f) {
            kiln_sb_printf(b, "\\x%02x", (unsigned)*c);
        } else {
            kiln_sb_putn(b, (const char *)c, 1);
        }
    }
    kiln_sb_putn(b, "\"", 1);
}

/* ---- records as lines --------------------------------------------------- */

/* the whole line, newline included, into b */
static void format_line(kiln_sb *b, const sch_tune_record *r) {
    size_t start = b->len;
    sb_field_str(b, "fp", r->fingerprint);
    sb_field_str(b, " key", r->key);
    sb_field_str(b, " bucket", r->bucket);
    sb_field_str(b, " sched", r->schedule);
    sb_num(b, " best=", r->best_s);
    sb_num(b, " base=", r->base_s);
    kiln_sb_printf(b, " tried=%d rejected=%d", r->tried, r->rejected);
    sb_field_str(b, " date", r->date);
    kiln_sb_printf(b, " ir=%d", r->ir_version);
    uint64_t h = fnv1a64(b->s + start, b->len - start);
    kiln_sb_printf(b, " sum=%016llx\n", (unsigned long long)h);
}

typedef struct cursor {
    const char *p, *end;
} cursor;

/* consume the literal text s */
static int cur_lit(cursor *c, const char *s) {
    size_t n = strlen(s);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0) return -1;
    c->p += n;
    return 0;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* a quoted, escaped string into out[cap] (NUL-terminated); -1 when malformed
 * or too long */
static int cur_str(cursor *c, char *out, size_t cap) {
    size_t n = 0;
    if (c->p >= c->end || *c->p != '"') return -1;
    c->p++;
    for (;;) {
        if (c->p >= c->end) return -1;
        unsigned char ch = (unsigned char)*c->p++;
        if (ch == '"') break;
        if (ch < 0x20 || ch >= 0x7f) return -1; /* the writer escapes these */
        if (ch == '\\') {
            if (c->p >= c->end) return -1;
            char e = *c->p++;
            if (e == '"' || e == '\\') {
                ch = (unsigned char)e;
            } else if (e == 'x') {
                if (c->end - c->p < 2) return -1;
                int hi = hexval(c->p[0]), lo = hexval(c->p[1]);
                if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) return -1;
                ch = (unsigned char)(hi * 16 + lo);
                c->p += 2;
            } else {
                return -1;
            }
        }
        if (n + 1 >= cap) return -1;
        out[n++] = (char)ch;
    }
    out[n] = 0;
    return 0;
}

/* a bare token (up to the next space or the end) into tok[cap] */
static int cur_token(cursor *c, char *tok, size_t cap) {
    size_t n = 0;
    while (c->p < c->end && *c->p != ' ') {
        if (n + 1 >= cap) return -1;
        tok[n++] = *c->p++;
    }
    tok[n] = 0;
    return n ? 0 : -1;
}

static int cur_double(cursor *c, double *out) {
    char tok[64];
    if (cur_token(c, tok, sizeof tok)) return -1;
    char *e = NULL;
    errno = 0;
    double v = strtod(tok, &e);
    if (errno || !e || *e || !isfinite(v) || v < 0) return -1;
    *out = v;
    return 0;
}

static int cur_int(cursor *c, int *out) {
    char tok[32];
    if (cur_token(c, tok, sizeof tok)) return -1;
    if (tok[0] < '0' || tok[0] > '9') return -1; /* no sign, no space */
    char *e = NULL;
    errno = 0;
    long v = strtol(tok, &e, 10);
    if (errno || !e || *e || v < 0 || v > INT_MAX) return -1;
    *out = (int)v;
    return 0;
}

/* Parse one record line (without its newline). 0 ok; else -1 and *why. */
static int parse_line(const char *line, size_t len, sch_tune_record *r, const char **why) {
    /* the checksum first: nothing of a line that fails it is looked at */
    static const char sum_tag[] = " sum=";
    const size_t tail = sizeof sum_tag - 1 + 16;
    if (len < tail || memcmp(line + len - tail, sum_tag, sizeof sum_tag - 1) != 0) {
        *why = "no checksum";
        return -1;
    }
    uint64_t want = 0;
    for (size_t i = len - 16; i < len; i++) {
        int v = hexval(line[i]);
        if (v < 0 || (line[i] >= 'A' && line[i] <= 'F')) {
            *why = "bad checksum field";
            return -1;
        }
        want = want * 16 + (uint64_t)v;
    }
    size_t body = len - tail;
    if (memchr(line, 0, body)) {
        *why = "NUL byte";
        return -1;
    }
    if (fnv1a64(line, body) != want) {
        *why = "checksum mismatch";
        return -1;
    }
    memset(r, 0, sizeof *r);
    cursor c = {line, line + body};
    *why = "malformed fields";
    if (cur_lit(&c, "fp=") || cur_str(&c, r->fingerprint, sizeof r->fingerprint)) return -1;
    if (cur_lit(&c, " key=") || cur_str(&c, r->key, sizeof r->key)) return -1;
    if (cur_lit(&c, " bucket=") || cur_str(&c, r->bucket, sizeof r->bucket)) return -1;
    if (cur_lit(&c, " sched=") || cur_str(&c, r->schedule, sizeof r->schedule)) return -1;
    if (cur_lit(&c, " best=") || cur_double(&c, &r->best_s)) return -1;
    if (cur_lit(&c, " base=") || cur_double(&c, &r->base_s)) return -1;
    if (cur_lit(&c, " tried=") || cur_int(&c, &r->tried)) return -1;
    if (cur_lit(&c, " rejected=") || cur_int(&c, &r->rejected)) return -1;
    if (cur_lit(&c, " date=") || cur_str(&c, r->date, sizeof r->date)) return -1;
    if (cur_lit(&c, " ir=") || cur_int(&c, &r->ir_version)) return -1;
    if (c.p != c.end) return -1;
    if (!r->fingerprint[0] || !r->key[0]) {
        *why = "empty fingerprint or key";
        return -1;
    }
    return 0;
}

/* ---- an in-memory image of a file --------------------------------------- */

typedef struct bad_line {
    char *text; /* raw bytes as read, newline stripped */
    size_t len;
    long lineno;
} bad_line;

typedef struct db_image {
    sch_tune_record *recs;
    int n, cap;
    /* open-addressing index of recs by identity; slots hold index + 1 */
    int *slots;
    size_t nslots;
    bad_line *bad; /* kept only when asked for: nkept of the nbad */
    int nbad, nkept, badcap;
    long first_bad;
    const char *first_why;
    int other_version; /* the header names a version this kiln cannot read */
} db_image;

static uint64_t ident_hash(const sch_tune_record *r) {
    uint64_t h = fnv1a64(r->fingerprint, strlen(r->fingerprint));
    h = kiln_hash_mix(h, fnv1a64(r->key, strlen(r->key)));
    return kiln_hash_mix(h, fnv1a64(r->bucket, strlen(r->bucket)));
}

static int same_ident(const sch_tune_record *a, const sch_tune_record *b) {
    return strcmp(a->fingerprint, b->fingerprint) == 0 && strcmp(a->key, b->key) == 0 &&
           strcmp(a->bucket, b->bucket) == 0;
}

static void index_insert(db_image *img, int idx) {
    size_t mask = img->nslots - 1, s = (size_t)ident_hash(&img->recs[idx]) & mask;
    while (img->slots[s]) s = (s + 1) & mask;
    img->slots[s] = idx + 1;
}

/* insert r, or replace the record of the same identity in place */
static void image_put(db_image *img, const sch_tune_record *r) {
    if ((size_t)(img->n + 1) * 2 > img->nslots) {
        size_t ns = img->nslots ? img->nslots * 2 : 64;
        while ((size_t)(img->n + 1) * 2 > ns) ns *= 2;
        free(img->slots);
        img->slots = kiln_xcalloc(ns, sizeof *img->slots);
        img->nslots = ns;
        for (int i = 0; i < img->n; i++) index_insert(img, i);
    }
    size_t mask = img->nslots - 1, s = (size_t)ident_hash(r) & mask;
    for (; img->slots[s]; s = (s + 1) & mask) {
        sch_tune_record *old = &img->recs[img->slots[s] - 1];
        if (same_ident(old, r)) {
            *old = *r;
            return;
        }
    }
    KILN_GROW(img->recs, img->cap, img->n + 1);
    img->recs[img->n] = *r;
    img->slots[s] = img->n + 1;
    img->n++;
}

static void image_free(db_image *img) {
    free(img->recs);
    free(img->slots);
    for (int i = 0; i < img->nkept; i++) free(img->bad[i].text);
    free(img->bad);
    memset(img, 0, sizeof *img);
}

/* Read path into img. keep_bad keeps the damaged lines' bytes. Returns 0
 * (a missing file is an empty one, *exists = 0) or -1 with err set when the
 * file exists but cannot be read. */
static int image_read(const char *path, db_image *img, int keep_bad, int *exists, char *err, size_t errcap) {
    memset(img, 0, sizeof *img);
    *exists = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return 0;
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db %s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    *exists = 1;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db %s: is a directory", path);
        return -1;
    }
    char *line = NULL;
    size_t lcap = 0;
    long lineno = 0;
    ssize_t got;
    errno = 0;
    while ((got = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)got;
        if (len && line[len - 1] == '\n') len--;
        if (len == 0) continue;
        if (line[0] == '#') {
            /* the header's version is checked; a header of another version
             * means the records are not ours to read or rewrite */
            size_t hp = sizeof TUNEDB_HEADER_PREFIX - 1;
            if (lineno == 1 && len >= hp && memcmp(line, TUNEDB_HEADER_PREFIX, hp) == 0 &&
                !(len == sizeof TUNEDB_HEADER - 1 && memcmp(line, TUNEDB_HEADER, len) == 0))
                img->other_version = 1;
            continue;
        }
        sch_tune_record r;
        const char *why = "line too long";
        if (len <= TUNEDB_LINE_MAX && parse_line(line, len, &r, &why) == 0) {
            image_put(img, &r);
            continue;
        }
        if (!img->nbad) {
            img->first_bad = lineno;
            img->first_why = why;
        }
        if (keep_bad) {
            KILN_GROW(img->bad, img->badcap, img->nkept + 1);
            bad_line *b = &img->bad[img->nkept++];
            b->text = kiln_xmalloc(len + 1);
            memcpy(b->text, line, len);
            b->text[len] = 0;
            b->len = len;
            b->lineno = lineno;
        }
        img->nbad++;
    }
    int rd_err = ferror(f);
    free(line);
    fclose(f);
    if (rd_err) {
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db %s: read error", path);
        return -1;
    }
    return 0;
}

/* the one warning of a load */
static void image_warn(const char *path, const db_image *img) {
    if (img->other_version)
        fprintf(stderr, "kiln: tune db %s: written by another kiln version (its header is not \"%s\"); ignored\n", path,
                TUNEDB_HEADER);
    if (!img->nbad) return;
    if (img->nbad == 1)
        fprintf(stderr, "kiln: tune db %s: line %ld is damaged (%s); skipped\n", path, img->first_bad, img->first_why);
    else
        fprintf(stderr, "kiln: tune db %s: line %ld is damaged (%s); skipped, with %d damaged lines in all\n", path,
                img->first_bad, img->first_why, img->nbad);
}

/* ---- the path ----------------------------------------------------------- */

static void path_into(char *buf, size_t cap) {
    kiln_env env;
    kiln_env_read(&env);
    const kiln_host_options *h = &env.host;
    if (h->tunedb) {
        snprintf(buf, cap, "%s", h->tunedb);
        return;
    }
    if (h->xdg_cache_home && h->xdg_cache_home[0] == '/') { /* the XDG spec: a relative value is to be ignored */
        snprintf(buf, cap, "%s/kiln/tune.db", h->xdg_cache_home);
        return;
    }
    if (h->home) {
        snprintf(buf, cap, "%s/.cache/kiln/tune.db", h->home);
        return;
    }
    buf[0] = 0;
}

void sch_tune_record_new(sch_tune_record *r, const char *fingerprint, const char *key, const char *bucket) {
    memset(r, 0, sizeof *r);
    snprintf(r->fingerprint, sizeof r->fingerprint, "%s", fingerprint ? fingerprint : "");
    snprintf(r->key, sizeof r->key, "%s", key);
    snprintf(r->bucket, sizeof r->bucket, "%s", bucket);
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(r->date, sizeof r->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    r->ir_version = KILN_IR_VERSION;
}

const char *sch_tunedb_path(void) {
    static _Thread_local char buf[TUNEDB_PATH_MAX];
    path_into(buf, sizeof buf);
    return buf;
}

/* mkdir -p of path's parent directory */
static int make_parent(const char *path, char *err, size_t errcap) {
    char tmp[TUNEDB_PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    char *slash = strrchr(tmp, '/');
    if (!slash || slash == tmp) return 0;
    *slash = 0;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
            kiln_fail(err, errcap, KILN_ERR_IO, "tune db: cannot create directory %s: %s", tmp, strerror(errno));
            return -1;
        }
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db: cannot create directory %s: %s", tmp, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- writing ------------------------------------------------------------ */

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* write the header and recs to a temporary file next to path and rename it
 * over path */
static int write_atomic(const char *path, const sch_tune_record *recs, int n, char *err, size_t errcap) {
    char tmp[TUNEDB_PATH_MAX + 16];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= (int)sizeof tmp) {
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db %s: path too long", path);
        return -1;
    }
    int fd = mkstemp(tmp);
    if (fd < 0) {
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db %s: cannot create a temporary file: %s", path, strerror(errno));
        return -1;
    }
    (void)fchmod(fd, 0644); /* mkstemp's 0600 would hide a shared cache from its readers */
    kiln_sb b = {0};
    kiln_sb_puts(&b, TUNEDB_HEADER "\n");
    for (int i = 0; i < n; i++) format_line(&b, &recs[i]);
    int bad = write_all(fd, b.s, b.len) != 0 || fsync(fd) != 0;
    int saved = errno;
    free(b.s);
    if (close(fd) != 0 && !bad) bad = 1, saved = errno;
    if (!bad && rename(tmp, path) != 0) bad = 1, saved = errno;
    if (bad) {
        unlink(tmp);
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db %s: writing failed: %s", path, strerror(saved));
        return -1;
    }
    return 0;
}

/* append the damaged lines of img to "<path>.damaged" */
static void set_aside(const char *path, const db_image *img) {
    char side[TUNEDB_PATH_MAX + 16];
    snprintf(side, sizeof side, "%s.damaged", path);
    int fd = open(side, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "kiln: tune db %s: cannot set the damaged lines aside in %s: %s\n", path, side,
                strerror(errno));
        return;
    }
    char stamp[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    kiln_sb b = {0};
    for (int i = 0; i < img->nkept; i++) {
        char head[64];
        snprintf(head, sizeof head, "# %s: line %ld of ", stamp, img->bad[i].lineno);
        kiln_sb_puts(&b, head);
        kiln_sb_puts(&b, path);
        kiln_sb_putn(&b, "\n", 1);
        kiln_sb_putn(&b, img->bad[i].text, img->bad[i].len);
        kiln_sb_putn(&b, "\n", 1);
    }
    if (write_all(fd, b.s, b.len) != 0)
        fprintf(stderr, "kiln: tune db %s: writing %s failed: %s\n", path, side, strerror(errno));
    free(b.s);
    close(fd);
}

/* fcntl locks are per process: threads of one process take this first */
static pthread_mutex_t tunedb_mu = PTHREAD_MUTEX_INITIALIZER;

/* merge recs[0..n) into the DB at path under the lock */
static kiln_status db_update(const char *path, const sch_tune_record *recs, int n, char *err, size_t errcap) {
    if (!path[0]) {
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db: no path (set KILN_TUNEDB, XDG_CACHE_HOME or HOME)");
        return KILN_ERR_IO;
    }
    if (make_parent(path, err, errcap)) return KILN_ERR_IO;
    char lockpath[TUNEDB_PATH_MAX + 16];
    snprintf(lockpath, sizeof lockpath, "%s.lock", path);
    pthread_mutex_lock(&tunedb_mu);
    kiln_status st = KILN_OK;
    int fd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db %s: cannot open the lock file %s: %s", path, lockpath, strerror(errno));
        pthread_mutex_unlock(&tunedb_mu);
        return KILN_ERR_IO;
    }
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    int rc;
    while ((rc = fcntl(fd, F_SETLKW, &fl)) != 0 && errno == EINTR) {
    }
    if (rc != 0) {
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db %s: cannot lock %s: %s", path, lockpath, strerror(errno));
        close(fd);
        pthread_mutex_unlock(&tunedb_mu);
        return KILN_ERR_IO;
    }
    db_image img;
    int exists = 0;
    if (image_read(path, &img, 1, &exists, err, errcap)) {
        st = KILN_ERR_IO;
    } else if (img.other_version) {
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db %s: written by another kiln version (header is not \"%s\"); not changed", path,
                TUNEDB_HEADER);
        st = KILN_ERR_FORMAT;
    } else {
        image_warn(path, &img);
        for (int i = 0; i < n; i++) image_put(&img, &recs[i]);
        if (img.nkept) set_aside(path, &img);
        if (write_atomic(path, img.recs, img.n, err, errcap)) st = KILN_ERR_IO;
    }
    image_free(&img);
    /* closing the descriptor releases the fcntl lock */
    close(fd);
    pthread_mutex_unlock(&tunedb_mu);
    return st;
}

/* ---- the API ------------------------------------------------------------ */

static int field_ok(const char *s, size_t cap) { return memchr(s, 0, cap) != NULL; }

static int record_ok(const sch_tune_record *r, const char **why) {
    *why = "a text field is not NUL-terminated";
    if (!field_ok(r->fingerprint, sizeof r->fingerprint) || !field_ok(r->key, sizeof r->key) ||
        !field_ok(r->bucket, sizeof r->bucket) || !field_ok(r->schedule, sizeof r->schedule) ||
        !field_ok(r->date, sizeof r->date))
        return 0;
    *why = "empty fingerprint or key";
    if (!r->fingerprint[0] || !r->key[0]) return 0;
    *why = "a time is negative or not finite";
    if (!isfinite(r->best_s) || !isfinite(r->base_s) || r->best_s < 0 || r->base_s < 0) return 0;
    *why = "a count is negative";
    if (r->tried < 0 || r->rejected < 0 || r->ir_version < 0) return 0;
    return 1;
}

kiln_status sch_tunedb_store(const sch_tune_record *r, char *err, size_t errcap) {
    const char *why;
    if (!r || !record_ok(r, &why)) {
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db: bad record: %s", r ? why : "NULL");
        return KILN_ERR_INVALID;
    }
    sch_tune_record rec = *r;
    if (!rec.date[0]) {
        time_t now = time(NULL);
        struct tm tm;
        if (gmtime_r(&now, &tm)) strftime(rec.date, sizeof rec.date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    char path[TUNEDB_PATH_MAX];
    path_into(path, sizeof path);
    return db_update(path, &rec, 1, err, errcap);
}

/* the valid records of the DB (one warning when some lines are damaged) */
static void db_load(db_image *img) {
    char path[TUNEDB_PATH_MAX];
    path_into(path, sizeof path);
    int exists = 0;
    char err[TUNEDB_PATH_MAX + 128];
    if (!path[0]) {
        memset(img, 0, sizeof *img);
        return;
    }
    if (image_read(path, img, 0, &exists, err, sizeof err)) {
        fprintf(stderr, "kiln: %s; ignored\n", err);
        image_free(img);
        return;
    }
    image_warn(path, img);
    if (img->other_version) img->n = 0;
}

sch_tune_record *sch_tunedb_load(int *n, int *damaged) {
    db_image img;
    db_load(&img);
    if (n) *n = img.n;
    if (damaged) *damaged = img.nbad;
    sch_tune_record *out = img.n ? img.recs : NULL;
    if (!img.n) free(img.recs);
    free(img.slots);
    free(img.bad);
    return out;
}

int sch_tunedb_lookup(const char *fingerprint, const char *key, const char *bucket, sch_tune_record *out,
                      int *exact) {
    if (exact) *exact = 0;
    if (!key || !bucket) return 0;
    db_image img;
    db_load(&img);
    int hit = -1, seed = -1;
    for (int i = 0; i < img.n; i++) {
        const sch_tune_record *r = &img.recs[i];
        if (strcmp(r->key, key) != 0 || strcmp(r->bucket, bucket) != 0) continue;
        if (fingerprint && strcmp(r->fingerprint, fingerprint) == 0) hit = i;
        else if (seed < 0 || strcmp(r->date, img.recs[seed].date) >= 0) seed = i;
    }
    int found = hit >= 0 || seed >= 0;
    if (found) {
        if (out) *out = img.recs[hit >= 0 ? hit : seed];
        if (exact) *exact = hit >= 0;
    }
    image_free(&img);
    return found;
}

int sch_tunedb_lookup_latest(const char *fingerprint, const char *key, const char *prefix, const char *suffix,
                             sch_tune_record *out) {
    if (!fingerprint || !key || !prefix || !suffix) return 0;
    db_image img;
    db_load(&img);
    int hit = -1;
    size_t pl = strlen(prefix), sl = strlen(suffix);
    for (int i = 0; i < img.n; i++) {
        const sch_tune_record *r = &img.recs[i];
        size_t bl = strlen(r->bucket);
        if (strcmp(r->key, key) != 0 || strcmp(r->fingerprint, fingerprint) != 0) continue;
        if (bl < pl + sl || strncmp(r->bucket, prefix, pl) != 0 || strcmp(r->bucket + bl - sl, suffix) != 0) continue;
        if (hit < 0 || strcmp(r->date, img.recs[hit].date) >= 0) hit = i;
    }
    if (hit >= 0 && out) *out = img.recs[hit];
    image_free(&img);
    return hit >= 0;
}

kiln_status sch_tunedb_export(const char *path, int *n, char *err, size_t errcap) {
    if (n) *n = 0;
    if (!path || !*path) {
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db export: no file given");
        return KILN_ERR_INVALID;
    }
    db_image img;
    db_load(&img);
    kiln_status st = write_atomic(path, img.recs, img.n, err, errcap) ? KILN_ERR_IO : KILN_OK;
    if (!st && n) *n = img.n;
    image_free(&img);
    return st;
}

kiln_status sch_tunedb_import(const char *path, int *n, char *err, size_t errcap) {
    if (n) *n = 0;
    if (!path || !*path) {
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db import: no file given");
        return KILN_ERR_INVALID;
    }
    db_image src;
    int exists = 0;
    if (image_read(path, &src, 0, &exists, err, errcap)) return KILN_ERR_IO;
    if (!exists) {
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db import: %s: %s", path, strerror(ENOENT));
        return KILN_ERR_IO;
    }
    if (src.other_version) {
        kiln_fail(err, errcap, KILN_ERR_IO, "tune db import: %s: written by another kiln version (header is not \"%s\")", path,
                TUNEDB_HEADER);
        image_free(&src);
        return KILN_ERR_FORMAT;
    }
    image_warn(path, &src);
    char dbpath[TUNEDB_PATH_MAX];
    path_into(dbpath, sizeof dbpath);
    kiln_status st = db_update(dbpath, src.recs, src.n, err, errcap);
    if (!st && n) *n = src.n;
    image_free(&src);
    return st;
}

/* a contraction bucket's parts: "m<=4,n=640,k=2048,b=1,t=2" */
typedef struct bucket_parts {
    char m[16];
    long long n, k, b, t;
} bucket_parts;

static int bucket_parse(const char *text, bucket_parts *p) {
    int used = 0;
    memset(p, 0, sizeof *p);
    if (sscanf(text, "%15[^,],n=%lld,k=%lld,b=%lld,t=%lld%n", p->m, &p->n, &p->k, &p->b, &p->t, &used) != 5) return 0;
    return text[used] == '\0' && p->n > 0 && p->k > 0 && p->t > 0;
}

static double log_gap(long long a, long long b) {
    double r = (double)a / (double)b;
    return r >= 1 ? log(r) : -log(r);
}

int sch_tunedb_lookup_near(const char *fingerprint, const char *key, const char *bucket, sch_tune_record *out) {
    bucket_parts want;
    if (!fingerprint || !key || !bucket || !bucket_parse(bucket, &want)) return 0;
    db_image img;
    db_load(&img);
    int best = -1;
    double best_d = INFINITY;
    for (int i = 0; i < img.n; i++) {
        const sch_tune_record *r = &img.recs[i];
        bucket_parts have;
        if (strcmp(r->key, key) != 0 || strcmp(r->fingerprint, fingerprint) != 0) continue;
        if (!bucket_parse(r->bucket, &have) || strcmp(have.m, want.m) != 0 || have.b != want.b) continue;
        double d;
        if (have.n == want.n && have.k == want.k && have.t != want.t) d = 0; /* another thread count */
        else if (have.t == want.t && log_gap(have.n, want.n) <= log(4.0) && log_gap(have.k, want.k) <= log(4.0))
            d = 1 + log_gap(have.n, want.n) + log_gap(have.k, want.k); /* a neighbouring shape */
        else continue;
        if (d < best_d || (d == best_d && strcmp(r->date, img.recs[best].date) > 0)) {
            best = i;
            best_d = d;
        }
    }
    if (best >= 0 && out) *out = img.recs[best];
    image_free(&img);
    return best >= 0;
}
