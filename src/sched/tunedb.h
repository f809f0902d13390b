/* tunedb.h — the per-hardware tuning database: the winning schedule of every
 * searched kernel, remembered across runs (DESIGN.md section 5).
 *
 * One text file, $KILN_TUNEDB or else $XDG_CACHE_HOME/kiln/tune.db (falling
 * back to $HOME/.cache/kiln/tune.db), one record per line; the format is
 * documented at the top of tunedb.c. Every line carries a checksum: a line
 * that fails it (or does not parse) is skipped with a warning and never
 * trusted. Writes take a file lock (fcntl, on a side lock file), re-read the
 * current file, merge, write a temporary file and rename it over the old one,
 * so two tuners at once lose nothing and a reader never sees half a file.
 *
 * Keys: a record is identified by (fingerprint, kernel key, shape bucket).
 * A later store with the same identity replaces the earlier one.
 */
#ifndef KILN_SCHED_TUNEDB_H
#define KILN_SCHED_TUNEDB_H

#include <stddef.h>

#include "kiln.h"

#define SCH_TUNE_TEXT 512

typedef struct sch_tune_record {
    char fingerprint[SCH_TUNE_TEXT]; /* rt_cpu_fingerprint() or a GPU's */
    char key[96];                    /* canonical hash of the kernel's loop IR and dtypes, hex */
    char bucket[96];                 /* shape bucket, e.g. "m=1,n=640,k=2048" */
    char schedule[SCH_TUNE_TEXT];    /* readable schedule text, e.g. "contract mr=4 nr=2 kc=256 arith=f32" */
    double best_s;                   /* time of the winner, seconds */
    double base_s;                   /* time of the untuned default schedule, seconds */
    int tried;                       /* candidates measured */
    int rejected;                    /* candidates disqualified by the reference check */
    char date[32];                   /* UTC, ISO 8601 */
    int ir_version;                  /* kiln IR version the key was made with */
} sch_tune_record;

/* r zeroed, then its identity (fingerprint, kernel key, bucket), today's
 * date (UTC) and the IR version filled in: what every searcher does before
 * setting the schedule and the times */
void sch_tune_record_new(sch_tune_record *r, const char *fingerprint, const char *key, const char *bucket);
/* the DB path in use (static storage, recomputed from the environment each call) */
const char *sch_tunedb_path(void);

/* Find the record for (key, bucket). *exact is set to 1 when it comes from
 * this fingerprint (use as is), 0 when from another (only a search seed).
 * Returns 1 when found, 0 when not (a missing or damaged file is "not found";
 * damaged lines give one warning on stderr per load). */
int sch_tunedb_lookup(const char *fingerprint, const char *key, const char *bucket, sch_tune_record *out,
                      int *exact);

/* For a kernel whose sizes are symbolic (attention over the positions so
 * far): this fingerprint's latest record for key whose bucket begins with
 * prefix (the M bucket, "m>4,") and ends with suffix (the threads, ",t=2"),
 * whatever sizes it was tuned at. Returns 1 when found. */
int sch_tunedb_lookup_latest(const char *fingerprint, const char *key, const char *prefix, const char *suffix,
                             sch_tune_record *out);

/* A seed for a bucket with no record of its own ("m<=4,n=640,k=2048,b=1,t=2"):
 * this fingerprint's record for key at the same sizes and another thread
 * count, else at the same M bucket, batch and thread count with the nearest
 * n and k (by |log n - log n'| + |log k - log k'|, within a factor 4 each);
 * the newest on ties. Returns 1 when found. A bucket text that does not
 * parse finds nothing. */
int sch_tunedb_lookup_near(const char *fingerprint, const char *key, const char *bucket, sch_tune_record *out);

/* Insert or replace a record (atomic, locked). Returns KILN_OK or KILN_ERR_IO
 * with a message in err. */
kiln_status sch_tunedb_store(const sch_tune_record *r, char *err, size_t errcap);

/* All valid records (malloc'd array, *n of them; NULL when none). *damaged
 * counts the lines skipped. */
sch_tune_record *sch_tunedb_load(int *n, int *damaged);

/* Copy every valid record to / merge every valid record from another file. */
kiln_status sch_tunedb_export(const char *path, int *n, char *err, size_t errcap);
kiln_status sch_tunedb_import(const char *path, int *n, char *err, size_t errcap);

#endif
