/* config.h — every KILN_* knob, read from the environment in one function.
 *
 * kiln_env_read is the only place in src/ that calls getenv: it fills the
 * compile options (kiln_compile_options in include/kiln_compile.h, the
 * per-program knobs) and the host options below (machine-wide settings that
 * have no program: the C compiler, the ISA cap, where the caches live, the
 * GPU device and libraries). kiln_compile_defaults returns its compile part;
 * code without a program calls kiln_env_read where it needs a host setting.
 * docs/ARCHITECTURE.md section 6 is the table of every variable (name,
 * meaning, default, field); tests/py/test_config_table.py checks that table
 * against the names this file and tools/ read.
 *
 * Invariants: the environment is read afresh at every call (tests set
 * variables between compiles), so a result reflects the environment at the
 * call; string fields point into the environment (valid until that variable
 * is changed) or at string literals; no field is ever NULL where a default
 * exists (cc is "cc" when KILN_CC is unset).
 */
#ifndef KILN_CONFIG_H
#define KILN_CONFIG_H

#include <stdint.h>

#include "kiln.h"
#include "kiln_compile.h"

typedef struct kiln_host_options {
    const char *cc;             /* the C compiler for kernels (KILN_CC; default "cc") */
    const char *isa;            /* "scalar", "avx2" or "avx512": cap the CPU code path; NULL: the best (KILN_ISA) */
    uint64_t cache_max_bytes;   /* the kernel cache's size bound (KILN_CACHE_MAX_MB; default 1024 MiB) */
    int retune;                 /* 1: this machine's DB records only seed a search (KILN_RETUNE=1) */
    const char *tunedb;         /* the tuning DB's path; NULL: under the cache home (KILN_TUNEDB) */
    const char *xdg_cache_home; /* XDG_CACHE_HOME (NULL when unset or empty) */
    const char *home;           /* HOME (NULL when unset or empty) */
    int device;                 /* GPU device index (KILN_DEVICE; default 0) */
    const char *opencl_options; /* extra OpenCL build options; NULL: none (KILN_OPENCL_OPTIONS) */
    const char *nvrtc;          /* the NVRTC library to try first; NULL: the usual names (KILN_NVRTC) */
    double tune_s;              /* seconds of a model's first-run search; 0: off (KILN_TUNE; default 30) */
    int ubatch;                 /* a model's prompt rows per forward pass; 0: all at once (KILN_UBATCH; default 512) */
    int no_stream_split;        /* 1: stream tiles never split their keys between threads (KILN_STREAM_SPLIT=0) */
} kiln_host_options;

typedef struct kiln_env {
    kiln_compile_options compile; /* backend, exact and the knobs; threads, budget, vector at 0 */
    kiln_host_options host;
} kiln_env;

/* read every KILN_* variable (and XDG_CACHE_HOME, HOME) into *e */
void kiln_env_read(kiln_env *e);

#endif
