/* config.c — the one function that reads the environment (see config.h).
 *
 * Each variable keeps the reading it had where it used to be read: "off"
 * switches (KILN_EGRAPH, KILN_FUSE, ...) are off only for the exact text
 * "0"; presence switches (KILN_TUNE_VERBOSE, KILN_TUNE_WARM, KILN_EG_PLAIN)
 * are on when set at all; KILN_EXACT and KILN_RETUNE only for "1";
 * KILN_TUNEDB_OFF when it starts with '1'.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

static const char *str(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

static int is_zero(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "0") == 0;
}

static int is_one(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "1") == 0;
}

static int is_set(const char *name) { return getenv(name) != NULL; }

static int num(const char *name, int dflt) {
    const char *v = str(name);
    return v ? atoi(v) : dflt;
}

static void read_compile(kiln_compile_options *o) {
    memset(o, 0, sizeof *o);
    o->backend = str("KILN_BACKEND");
    o->exact = is_one("KILN_EXACT");
    o->fixed_defaults = is_one("KILN_FIXED_DEFAULTS");
    o->no_egraph = is_zero("KILN_EGRAPH");
    o->eg_plain = is_set("KILN_EG_PLAIN");
    o->no_fuse = is_zero("KILN_FUSE");
    o->no_contract = is_zero("KILN_CONTRACT");
    o->no_split = is_zero("KILN_SPLIT");
    o->no_epilogue = is_zero("KILN_EPILOGUE");
    o->no_stream_tile = is_zero("KILN_STREAM_TILE");
    /* the streaming-bf16 form: off unless asked for (=1 forced, =search a
     * form the first-run search measures): its second tile body made a
     * model's first compile 1.7x longer on an Intel Xeon where it was 3-13%
     * slower than the f32 tile and never won (bench/results, session 23) */
    const char *bf = str("KILN_STREAM_BF16");
    o->stream_bf16 = is_one("KILN_STREAM_BF16") ? 1 : bf && !strcmp(bf, "search") ? 0 : -1;
    o->no_pack_copy = is_zero("KILN_PACK_COPY");
    o->decode_tile_rows = num("KILN_DECODE_TILE_ROWS", 0);
    const char *sm = str("KILN_STREAM_MIN");
    if (sm) {
        long long v = strtoll(sm, NULL, 10);
        o->stream_min = v > 0 ? v : -1; /* 0 (or junk, as strtoull read it): every output */
    }
    const char *prof = str("KILN_PROFILE");
    if (prof && prof[0] != '0') o->profile = strcmp(prof, "quiet") == 0 ? 2 : 1;
    const char *poison = getenv("KILN_POISON_RESULTS");
    o->poison = poison && strcmp(poison, "0") != 0;
    const char *off = getenv("KILN_TUNEDB_OFF");
    o->tunedb_off = off && off[0] == '1';
    o->tune_verbose = is_set("KILN_TUNE_VERBOSE") ? (num("KILN_TUNE_VERBOSE", 1) > 1 ? 2 : 1) : 0; /* 2: each candidate's time too */
    o->tune_warm = is_set("KILN_TUNE_WARM");
    o->inject_wrong = num("KILN_TUNE_INJECT_WRONG", 0);
    o->gtune_inject_wrong = num("KILN_GTUNE_INJECT_WRONG", 0);
    o->contract_sched_small = str("KILN_CONTRACT_SCHED_SMALL");
    o->contract_sched_large = str("KILN_CONTRACT_SCHED_LARGE");
    o->gpu_contract = str("KILN_GPU_CONTRACT");
    o->gpu_group = num("KILN_GPU_GROUP", 0);
    o->gpu_resident = num("KILN_GPU_RESIDENT", 0) != 0;
    const char *eo = str("KILN_GPU_EMIT_ONLY");
    o->gpu_emit_only = eo && eo[0] != '0';
    o->cuda_archs = str("KILN_CUDA_ARCHS");
    const char *st = str("KILN_STREAM");
    o->stream = !st ? -1 : strcmp(st, "1") == 0 ? 1 : strcmp(st, "2") == 0 ? 2 : 0;
}

static void read_host(kiln_host_options *h) {
    memset(h, 0, sizeof *h);
    h->cc = str("KILN_CC");
    if (!h->cc) h->cc = "cc";
    h->isa = str("KILN_ISA");
    h->cache_max_bytes = (uint64_t)1024 << 20;
    const char *mb = str("KILN_CACHE_MAX_MB");
    if (mb) {
        char *end;
        double v = strtod(mb, &end);
        if (end != mb && v >= 0) h->cache_max_bytes = (uint64_t)(v * 1024.0 * 1024.0);
    }
    h->retune = is_one("KILN_RETUNE");
    h->tunedb = str("KILN_TUNEDB");
    h->xdg_cache_home = str("XDG_CACHE_HOME");
    h->home = str("HOME");
    h->device = num("KILN_DEVICE", 0);
    h->opencl_options = str("KILN_OPENCL_OPTIONS");
    h->nvrtc = str("KILN_NVRTC");
    h->no_stream_split = is_zero("KILN_STREAM_SPLIT");
    h->ubatch = num("KILN_UBATCH", 512);
    if (h->ubatch < 0) h->ubatch = 512;
    h->tune_s = 30;
    const char *tune = str("KILN_TUNE");
    if (tune) {
        char *end;
        double b = strtod(tune, &end);
        if (!*end && b >= 0) h->tune_s = b;
    }
}

void kiln_env_read(kiln_env *e) {
    read_compile(&e->compile);
    read_host(&e->host);
}
