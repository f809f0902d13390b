/* cpu.c — the CPU backend: C source compiled by the system C compiler into a
 * shared object, cached on disk, loaded with dlopen, launched over a thread
 * pool.
 *
 * Cache: $XDG_CACHE_HOME/kiln (default ~/.cache/kiln; /tmp/kiln-cache-<uid>
 * when neither can be created) holds kiln-<hash>.c and kiln-<hash>.so, the
 * hash covering the source, the compiler command, its identity (first line
 * of --version) and the flags. Files are written to a temporary name and
 * renamed, so concurrent processes never load a half-written object; a .so
 * that fails to load is rebuilt. The source is kept next to the object so a
 * compiler failure can point at it. A hit touches the object's mtime; the
 * directory is trimmed to $KILN_CACHE_MAX_MB (default 1024), least recently
 * used pairs first (cache_trim.c), after a process's first new object and
 * then every 1/16 of the bound it adds (trim_cache).
 *
 * These are the host-code members of rt_cpu_backend (backend.h), whose
 * program-level members are in cpu_run.c.
 *
 * Errors are the world's (no compiler, compiler failure, unwritable cache):
 * reported as a kiln_status with a message, never a crash.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "base.h"
#include "config.h"
#include "cache_trim.h"
#include "cc_dedup.h"
#include "cc_pair.h"
#include "cc_split.h"
#include "progress.h"

struct rt_module {
    void *handle;
    char path[1024];
    long offset; /* kernel kiln_k<N> is the object's kiln_k<N + offset> (a pair's second program, cc_pair.c) */
};

/* ---- compiler identity ------------------------------------------------ */

const char *rt_cc(void) {
    kiln_env e;
    kiln_env_read(&e);
    return e.host.cc;
}

static pthread_mutex_t ident_mu = PTHREAD_MUTEX_INITIALIZER;
static char ident_cc[512], ident_line[512];
static int ident_ok;

const char *rt_cc_identity(void) {
    const char *cc = rt_cc();
    pthread_mutex_lock(&ident_mu);
    if (strcmp(ident_cc, cc) != 0) {
        snprintf(ident_cc, sizeof ident_cc, "%s", cc);
        ident_ok = 0;
        ident_line[0] = 0;
        char cmd[700];
        snprintf(cmd, sizeof cmd, "%s --version 2>/dev/null", cc);
        FILE *f = popen(cmd, "r");
        if (f) {
            if (fgets(ident_line, sizeof ident_line, f)) {
                size_t n = strlen(ident_line);
                while (n && (ident_line[n - 1] == '\n' || ident_line[n - 1] == '\r')) ident_line[--n] = 0;
            }
            int st = pclose(f);
            ident_ok = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0 && ident_line[0];
        }
    }
    const char *r = ident_ok ? ident_line : NULL;
    pthread_mutex_unlock(&ident_mu);
    return r;
}

/* ---- ISA from the fingerprint ----------------------------------------- */

int rt_retune(void) {
    kiln_env e;
    kiln_env_read(&e);
    return e.host.retune;
}

int rt_cpu_has(const char *flag) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[8192];
    int found = 0;
    size_t fl = strlen(flag);
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0 && strncmp(line, "Features", 8) != 0) continue;
        char *p = strchr(line, ':');
        if (!p) continue;
        for (char *q = p + 1; *q;) {
            while (*q == ' ' || *q == '\t') q++;
            char *end = q;
            while (*end && *end != ' ' && *end != '\n' && *end != '\t') end++;
            if ((size_t)(end - q) == fl && strncmp(q, flag, fl) == 0) found = 1;
            q = end;
            if (*q == '\n') break;
        }
        break; /* the first cpu's flags are enough */
    }
    fclose(f);
    return found;
}

cg_isa rt_cpu_isa(void) {
    cg_isa best = CG_ISA_SCALAR;
#if defined(__x86_64__) || defined(__i386__)
    if (rt_cpu_has("avx2") && rt_cpu_has("fma") && rt_cpu_has("f16c")) best = CG_ISA_AVX2;
    if (best == CG_ISA_AVX2 && rt_cpu_has("avx512f") && rt_cpu_has("avx512bw") && rt_cpu_has("avx512vl") &&
        rt_cpu_has("avx512dq"))
        best = CG_ISA_AVX512;
#endif
    kiln_env e;
    kiln_env_read(&e);
    const char *want = e.host.isa;
    if (want) {
        cg_isa w = best;
        if (strcmp(want, "scalar") == 0) w = CG_ISA_SCALAR;
        else if (strcmp(want, "avx2") == 0) w = CG_ISA_AVX2;
        else if (strcmp(want, "avx512") == 0) w = CG_ISA_AVX512;
        if (w < best) best = w; /* never above what the machine has */
    }
    return best;
}


/* ---- cache and compile ------------------------------------------------ */

static int mkdir_p(const char *path) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    struct stat st;
    return stat(tmp, &st) == 0 && S_ISDIR(st.st_mode) && access(tmp, W_OK) == 0 ? 0 : -1;
}

static int cache_dir(char *out, size_t cap) {
    kiln_env e;
    kiln_env_read(&e);
    const char *xdg = e.host.xdg_cache_home, *home = e.host.home;
    if (xdg) {
        snprintf(out, cap, "%s/kiln", xdg);
        if (mkdir_p(out) == 0) return 0;
    } else if (home) {
        snprintf(out, cap, "%s/.cache/kiln", home);
        if (mkdir_p(out) == 0) return 0;
    }
    snprintf(out, cap, "/tmp/kiln-cache-%ld", (long)getuid());
    return mkdir_p(out);
}

static uint64_t fnv(uint64_t h, const char *s) {
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    h ^= 0xff;
    h *= 0x100000001b3ULL;
    return h;
}

static int write_file_atomic(const char *path, const char *data, size_t n) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, n, f) == n;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return -1;
    }
    return 0;
}

/* single-quote a path for sh */
static void shell_quote(char *out, size_t cap, const char *s) {
    size_t n = 0;
    if (cap < 3) return;
    out[n++] = '\'';
    for (; *s && n + 5 < cap; s++) {
        if (*s == '\'') {
            memcpy(out + n, "'\\''", 4);
            n += 4;
        } else {
            out[n++] = *s;
        }
    }
    out[n++] = '\'';
    out[n] = 0;
}

static char *read_text(const char *path, size_t max) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = kiln_xmalloc(max + 1);
    size_t n = fread(buf, 1, max, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* The trim reads the whole directory (thousands of entries after a tuning
 * search), so a process does it after its first new object and then each
 * time its new objects add up to 1/16 of the bound, not after every compile
 * of a search's hundreds. */
static void trim_cache(const char *dir, const char *sopath) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int trimmed;
    static uint64_t since;
    uint64_t limit = rt_cache_limit();
    struct stat st;
    if (limit == 0) return;
    pthread_mutex_lock(&mu);
    since += stat(sopath, &st) == 0 ? (uint64_t)st.st_size : 0;
    int now = !trimmed || since > limit / 16;
    if (now) trimmed = 1, since = 0;
    pthread_mutex_unlock(&mu);
    if (now) rt_cache_trim(dir, limit, sopath);
}

/* wall seconds a program's build takes per byte of the unit the compiler is
 * given (the deduplicated text, cc_dedup.c; split as cpu_compile builds
 * it): first a guess from a 2-core AMD EPYC Zen 4 at -O2 (gemma3-270m's
 * 0.58 MB unit of 4.9 MB of C: 6.1 s of one core's time, so about half of
 * that on the 2 cores its parts use), then learnt from this process's real
 * compiles of programs (a cache hit teaches nothing) */
#define CC_RATE_GUESS 5.5e-6
static double cc_rate = CC_RATE_GUESS;
static int cc_rate_learnt; /* a real compile of this process set cc_rate */
/* the next rt_cpu_compile on this thread builds a whole program
 * (rt_cc_next_is_program): only such a build teaches cc_rate. A search's
 * candidate units (dense micro-kernels, one unit of up to 24: 0.3-0.5 MB
 * for gemma3-270m's quantised contractions) compile at about twice a
 * program's seconds per byte; one of them taught the rate, and the
 * recompile's reserve came to 13.2 s where the recompile took 7.5 s (2-core
 * AMD EPYC Zen 4, 2 threads), 5.7 s the prefill searches never got */
static _Thread_local int cc_next_program;

/* this machine's rate, remembered across processes: the kernel cache's
 * cc-rate-<compiler hash> file holds the seconds per unit byte a program's
 * recompile took here, over the stretch the estimate applied then
 * (exec.c's guess_stretch; rt_cc_rate_remember,
 * after a search's recompile). A process that compiles no program (a warm
 * kernel cache) starts from it instead of the guess, which is another
 * machine's: a shared 2-core Intel Xeon (AMX) took 8.1e-6 s a byte against
 * the 5.5e-6 guessed, so the recompile overran its reserve by 1.5 s when
 * quiet. A file that does not parse, or holds a rate out of range, is set
 * aside (.bad) and the guess stands. */
static const char *cc_extra_flags(const char *ident);
static int cc_rate_file(char *out, size_t cap) {
    char dir[900];
    const char *ident = rt_cc_identity();
    if (!ident || cache_dir(dir, sizeof dir) != 0) return -1;
    uint64_t h = fnv(fnv(0xcbf29ce484222325ULL, rt_cc()), ident);
    if (cc_extra_flags(ident)[0]) h = fnv(h, cc_extra_flags(ident)); /* another rate than without them */
    snprintf(out, cap, "%s/cc-rate-%016llx", dir, (unsigned long long)h);
    return 0;
}

static double cc_rate_read(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    double r = 0;
    int ok = fscanf(f, "kiln-cc-rate 1 %lf", &r) == 1 && r >= 1e-8 && r <= 1e-3;
    fclose(f);
    if (!ok) {
        char bad[1100];
        snprintf(bad, sizeof bad, "%s.bad", path);
        rename(path, bad);
        return 0;
    }
    return r;
}

/* the file's program entries: after the machine's line, up to
 * CC_RATE_PROGRAMS lines "p <16 hex> <rate>", the most recent first: one
 * model's program (rt_cc_program_key) compiles at its own rate (the
 * micro-kernels its kernels call set it: gemma3-270m's recompile took
 * 4.6e-6 s a byte where the Llama-1B-shaped q4_k's took more, and the
 * machine's average of the two kept 18 s aside for gemma's 6 s) */
#define CC_RATE_PROGRAMS 16
typedef struct cc_rates {
    double machine;
    int n;
    unsigned long long key[CC_RATE_PROGRAMS];
    double rate[CC_RATE_PROGRAMS];
} cc_rates;

static int rate_ok(double r) { return r >= 1e-8 && r <= 1e-3; }

/* a remembered rate and a new measurement: their mean, but up by at most a
 * quarter at a time. A slow recompile is rarer than a fast one (a search
 * whose winners are in the cache takes none), and a reserve taken from
 * one kept 17.8 s aside of a 30 s budget for recompiles that then took
 * 0.6 s (gemma3-270m, 2 threads, Intel Xeon: two searches had recompiled
 * in 16 s); an underestimate costs an overrun of the recompile's error */
static double rate_update(double old, double now) {
    double r = 0.5 * old + 0.5 * now;
    return r > 1.25 * old ? 1.25 * old : r;
}

/* the machine's line read by cc_rate_read; the program lines that parse
 * and hold a rate in range (the others are dropped at the next write) */
static void cc_rates_read(const char *path, cc_rates *t) {
    memset(t, 0, sizeof *t);
    t->machine = cc_rate_read(path);
    FILE *f = t->machine > 0 ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[128];
    if (!fgets(line, sizeof line, f)) line[0] = 0;
    while (t->n < CC_RATE_PROGRAMS && fgets(line, sizeof line, f)) {
        unsigned long long k;
        double r;
        if (sscanf(line, "p %16llx %lf", &k, &r) == 2 && rate_ok(r)) t->key[t->n] = k, t->rate[t->n++] = r;
    }
    fclose(f);
}

static unsigned long long cc_program_key;
static double cc_program_rate;

static int cc_rate_loaded;
double rt_cc_seconds_per_byte(void) {
    if (!cc_rate_loaded && !cc_rate_learnt) {
        char path[1024];
        cc_rate_loaded = 1;
        double r = cc_rate_file(path, sizeof path) == 0 ? cc_rate_read(path) : 0;
        if (r > 0) cc_rate = r;
    }
    return cc_rate;
}

double rt_cc_seconds_per_byte_for(unsigned long long key) {
    if (cc_rate_learnt || !key) return rt_cc_seconds_per_byte();
    if (key != cc_program_key) {
        char path[1024];
        cc_rates t;
        cc_program_key = key;
        cc_program_rate = 0;
        if (cc_rate_file(path, sizeof path) == 0) {
            cc_rates_read(path, &t);
            for (int i = 0; i < t.n; i++)
                if (t.key[i] == key) cc_program_rate = t.rate[i];
        }
    }
    return cc_program_rate > 0 ? cc_program_rate : rt_cc_seconds_per_byte();
}

void rt_cc_rate_remember(double alone_rate, unsigned long long key) {
    char path[1024], text[64 + CC_RATE_PROGRAMS * 48];
    if (!rate_ok(alone_rate) || cc_rate_file(path, sizeof path) != 0) return;
    cc_rates t;
    cc_rates_read(path, &t); /* averaged with what earlier searches found: one compile is noisy */
    double r = t.machine > 0 ? rate_update(t.machine, alone_rate) : alone_rate;
    int n = snprintf(text, sizeof text, "kiln-cc-rate 1 %.6g\n", r);
    if (key) {
        double own = alone_rate;
        for (int i = 0; i < t.n; i++)
            if (t.key[i] == key) own = rate_update(t.rate[i], alone_rate);
        n += snprintf(text + n, sizeof text - (size_t)n, "p %016llx %.6g\n", key, own);
        if (key == cc_program_key) cc_program_key = 0; /* read again when asked */
    }
    for (int i = 0, kept = 1; i < t.n && kept < CC_RATE_PROGRAMS; i++)
        if (t.key[i] != key) {
            n += snprintf(text + n, sizeof text - (size_t)n, "p %016llx %.6g\n", t.key[i], t.rate[i]);
            kept++;
        }
    if (n > 0 && (size_t)n < sizeof text) write_file_atomic(path, text, (size_t)n); /* a hint only: a failed write keeps the guess */
}
int rt_cc_rate_learnt(void) { return cc_rate_learnt; }
void rt_cc_next_is_program(void) { cc_next_program = 1; }

/* the program to compile with the next program's build on this thread
 * (rt_cc_companion), and the flags it is compiled with */
static _Thread_local char *companion_src, *companion_flags;

void rt_cc_companion(const char *src, const char *cflags) {
    free(companion_src);
    free(companion_flags);
    companion_src = src ? kiln_xstrdup(src) : NULL;
    companion_flags = src ? kiln_xstrdup(cflags ? cflags : "") : NULL;
}

/* what the compiler is given beyond the code and ISA flags: with GCC, RTL
 * combine tries pairs of instructions only (--param=max-combine-insns=2;
 * GCC's -O2 tries up to 4). The generated contraction tiles are long
 * unrolled blocks of intrinsics on which combine took over half of GCC
 * 12's time: Llama-1B-shaped q4_k's program compiled in 21.2 s, 8.6 s with
 * the param; gemma3-270m's 11.7 s, 8.3 s; one q4_k kernel with its four
 * repacked decode tiles 5.1 s, 2.2 s. Its speed stayed within the noise
 * (interleaved, --no-tune, Intel Xeon without AMX, 2 cores: gemma pp256
 * 979/998/945 -> 997/945/993 t/s and tg64 51/54/49 -> 56/50/51 at 1
 * thread; Llama-1B pp256 270/199/214 -> 287/255/248, tg32 34.8/32.6/35.3
 * -> 33.9/32.6/35.4 at 2). Clang (whose --version names it) gets nothing:
 * it would warn that the argument is unused */
static const char *cc_extra_flags(const char *ident) {
    return ident && !strstr(ident, "clang") ? "--param=max-combine-insns=2" : "";
}

/* code_flags: how the code is compiled; -shared makes the object. The
 * hash covers both, as before the program could be built in parts */
static const char *code_flags = "-O2 -fPIC -fwrapv -ffp-contract=off -fno-math-errno";
static const char *base_flags = "-O2 -shared -fPIC -fwrapv -ffp-contract=off -fno-math-errno";

/* src (written at cpath) compiled into tmpso, its errors into errpath;
 * system()'s status (0: built) */
/* *unit_len: the bytes of the unit compiled (the deduplicated text, or src) */
static int cc_build(const char *src, const char *cpath, const char *cflags, const char *tmpso, const char *errpath,
                    size_t *unit_len_out, int raw_fallback) {
    const char *cc = rt_cc();
    char qc[1200], qtmp[1200], qerr[1200], cmd[5000];
    shell_quote(qc, sizeof qc, cpath);
    shell_quote(qtmp, sizeof qtmp, tmpso);
    shell_quote(qerr, sizeof qerr, errpath);
    snprintf(cmd, sizeof cmd, "%s %s %s -o %s %s 2>%s", cc, base_flags, cflags ? cflags : "", qtmp, qc, qerr);
    /* a large program is built in parts on all cores (cc_split.c); when that
     * cannot be done it is compiled whole, as a small one is */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int parts = rt_cc_split_parts(strlen(src), cores > 64 ? 64 : (int)cores);
    char part_flags[1200];
    snprintf(part_flags, sizeof part_flags, "%s %s", code_flags, cflags ? cflags : "");
    int st = -1;
    int units = parts > 1 ? parts : 1;
    rt_compile_stage("cc", 0, units);
    /* the layers' copies of one kernel compiled once (cc_dedup.c): the unit
     * the compiler sees, written beside the source; when it fails to build,
     * the source as emitted is compiled and its errors reported */
    char *tu = rt_cc_dedup(src, NULL, NULL);
    const char *unit = tu ? tu : src;
    size_t unit_len = strlen(unit);
    *unit_len_out = unit_len;
    if (tu) {
        char upath[1100], qu[1200], ucmd[5000];
        snprintf(upath, sizeof upath, "%s.%ld.dedup.c", cpath, (long)getpid());
        shell_quote(qu, sizeof qu, upath);
        snprintf(ucmd, sizeof ucmd, "%s %s %s -o %s %s 2>/dev/null", cc, base_flags, cflags ? cflags : "", qtmp, qu);
        int parts_u = rt_cc_split_parts(unit_len, cores > 64 ? 64 : (int)cores);
        if (parts_u > 1 && rt_cc_split_build(unit, parts_u, cc, part_flags, tmpso, tmpso) == 0) st = 0;
        else if (write_file_atomic(upath, unit, unit_len) == 0) st = system(ucmd);
        remove(upath);
    }
    if (st != 0 && (raw_fallback || !tu)) {
        *unit_len_out = strlen(src);
        st = parts > 1 && rt_cc_split_build(src, parts, cc, part_flags, tmpso, tmpso) == 0 ? 0 : system(cmd);
    }
    free(tu);
    rt_compile_stage("cc", units, units);
    return st;
}

static uint64_t source_hash(const char *src, const char *cc, const char *ident, const char *cflags) {
    uint64_t h = 0xcbf29ce484222325ULL;
    h = fnv(h, src);
    h = fnv(h, cc);
    h = fnv(h, ident);
    h = fnv(h, base_flags);
    return fnv(h, cflags ? cflags : "");
}

/* the program of hash h from another program's object (a pair, cc_pair.c):
 * kiln-<h>.alias names that object and the offset of h's kernels in it, and
 * the object must define kiln_pair_<h>. 1 when m holds it; an alias that
 * fails any of this is removed (the object was trimmed or rebuilt alone) */
static int load_alias(const char *dir, uint64_t h, rt_module *m) {
    char apath[1024], text[128], target[64], sym[64];
    snprintf(apath, sizeof apath, "%s/kiln-%016llx.alias", dir, (unsigned long long)h);
    FILE *f = fopen(apath, "rb");
    if (!f) return 0;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    long offset = 0;
    int used = 0;
    int ok = sscanf(text, "%40s %ld\n%n", target, &offset, &used) == 2 && used == (int)n &&
             strlen(target) == 5 + 16 + 3 && strncmp(target, "kiln-", 5) == 0 &&
             strspn(target + 5, "0123456789abcdef") == 16 && strcmp(target + 21, ".so") == 0 && offset > 0;
    if (ok) {
        snprintf(m->path, sizeof m->path, "%s/%s", dir, target);
        m->handle = dlopen(m->path, RTLD_NOW | RTLD_LOCAL);
        snprintf(sym, sizeof sym, "kiln_pair_%016llx", (unsigned long long)h);
        ok = m->handle && dlsym(m->handle, sym);
    }
    if (!ok) {
        if (m->handle) dlclose(m->handle);
        m->handle = NULL;
        remove(apath);
        return 0;
    }
    m->offset = offset;
    utimensat(AT_FDCWD, m->path, NULL, 0); /* recently used: the trim keeps it */
    return 1;
}

/* 1 when the program of hash h is in the cache (its own object or an alias) */
static int cached(const char *dir, uint64_t h) {
    char path[1024];
    snprintf(path, sizeof path, "%s/kiln-%016llx.so", dir, (unsigned long long)h);
    if (access(path, R_OK) == 0) return 1;
    snprintf(path, sizeof path, "%s/kiln-%016llx.alias", dir, (unsigned long long)h);
    return access(path, R_OK) == 0;
}

/* the companion of a program's build (rt_cc_companion), when it is compiled
 * with the same flags and is neither this program nor cached; malloc'd */
static char *take_companion(int program, const char *cflags, const char *dir, uint64_t h, const char *cc,
                            const char *ident, const char *flags, uint64_t *hc) {
    char *c = NULL;
    if (program && companion_src && strcmp(companion_flags, cflags ? cflags : "") == 0) {
        *hc = source_hash(companion_src, cc, ident, flags);
        if (*hc != h && !cached(dir, *hc)) {
            c = companion_src;
            companion_src = NULL;
        }
    }
    if (program) rt_cc_companion(NULL, NULL);
    return c;
}

/* the pair's object built: the second program's alias beside it */
static void write_alias(const char *dir, uint64_t hc, uint64_t h) {
    char apath[1024], text[128];
    snprintf(apath, sizeof apath, "%s/kiln-%016llx.alias", dir, (unsigned long long)hc);
    int n = snprintf(text, sizeof text, "kiln-%016llx.so %ld\n", (unsigned long long)h, RT_CC_PAIR_OFFSET);
    write_file_atomic(apath, text, (size_t)n); /* best effort: without it the second is compiled alone */
}

/* the program of hash h from the cache: its own object (a damaged one is
 * removed) or a pair's through its alias; 1 when m holds it */
static int load_cached(const char *dir, uint64_t h, const char *sopath, rt_module *m) {
    if (access(sopath, R_OK) == 0) {
        m->handle = dlopen(sopath, RTLD_NOW | RTLD_LOCAL);
        if (m->handle) {
            utimensat(AT_FDCWD, sopath, NULL, 0); /* recently used: the trim keeps it */
            return 1;
        }
        remove(sopath); /* damaged: rebuild it */
    }
    if (load_alias(dir, h, m)) return 1;
    snprintf(m->path, sizeof m->path, "%s", sopath);
    return 0;
}

static _Thread_local double cc_last_s, cc_paired_s;
static _Thread_local size_t cc_paired_unit;
double rt_cc_last_seconds(void) { return cc_last_s; }
double rt_cc_paired_seconds(size_t *unit_bytes) {
    double t = cc_paired_s;
    if (unit_bytes) *unit_bytes = cc_paired_unit;
    cc_paired_s = 0;
    cc_paired_unit = 0;
    return t;
}

kiln_status rt_cpu_compile(const char *src, const char *cflags, rt_module **out, char *err, size_t errcap) {
    *out = NULL;
    cc_last_s = 0;
    const char *cc = rt_cc();
    const char *ident = rt_cc_identity();
    if (!ident) {
        snprintf(err, errcap,
                 "no C compiler: '%s --version' did not run. kiln compiles kernels with the C compiler in "
                 "$KILN_CC (default 'cc'); install one or set KILN_CC to a working compiler",
                 cc);
        return KILN_ERR_IO;
    }
    char dir[900];
    if (cache_dir(dir, sizeof dir) != 0) {
        snprintf(err, errcap, "cannot create the kernel cache directory %s (set XDG_CACHE_HOME)", dir);
        return KILN_ERR_IO;
    }
    char flags[1024];
    snprintf(flags, sizeof flags, "%s %s", cc_extra_flags(ident), cflags ? cflags : "");
    const char *given_flags = cflags;
    cflags = flags;
    int program = cc_next_program; /* a program's build (rt_cc_next_is_program) */
    cc_next_program = 0;
    uint64_t h = source_hash(src, cc, ident, cflags);
    char cpath[1024], sopath[1024];
    snprintf(cpath, sizeof cpath, "%s/kiln-%016llx.c", dir, (unsigned long long)h);
    snprintf(sopath, sizeof sopath, "%s/kiln-%016llx.so", dir, (unsigned long long)h);

    rt_module *m = kiln_xcalloc(1, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s", sopath);
    if (load_cached(dir, h, sopath, m)) {
        if (program) rt_cc_companion(NULL, NULL);
        rt_compile_stage("cached", 1, 1);
        *out = m;
        return KILN_OK;
    }
    uint64_t hc = 0;
    char *comp = take_companion(program, given_flags, dir, h, cc, ident, cflags, &hc);
    if (write_file_atomic(cpath, src, strlen(src)) != 0) {
        snprintf(err, errcap, "cannot write the kernel source %s", cpath);
        free(comp);
        free(m);
        return KILN_ERR_IO;
    }
    char tmpso[1100], errpath[1100];
    snprintf(tmpso, sizeof tmpso, "%s.tmp.%ld.so", sopath, (long)getpid());
    snprintf(errpath, sizeof errpath, "%s.err.%ld", sopath, (long)getpid());
    double t_cc = kiln_now_s();
    size_t unit_len = 0;
    /* with a companion, the two programs as one unit (cc_pair.c): the
     * bodies they share compiled once; alone when they cannot be joined */
    char *joint = comp ? rt_cc_pair_source(src, comp, hc) : NULL;
    char jpath[1100];
    snprintf(jpath, sizeof jpath, "%s.%ld.pair.c", cpath, (long)getpid());
    if (joint && write_file_atomic(jpath, joint, strlen(joint)) != 0) {
        free(joint);
        joint = NULL;
    }
    int st = joint ? cc_build(joint, jpath, cflags, tmpso, errpath, &unit_len, 0) : -1;
    int paired = joint && st == 0;
    if (joint) remove(jpath);
    free(joint);
    free(comp);
    if (!paired) st = cc_build(src, cpath, cflags, tmpso, errpath, &unit_len, 1);
    t_cc = kiln_now_s() - t_cc;
    cc_last_s = t_cc;
    if (paired) {
        cc_paired_s += t_cc;
        cc_paired_unit = unit_len;
    }
    /* wall seconds per emitted byte of a whole program, for estimates
     * (rt_cc_seconds_per_byte): a search's candidate units are dense micro-
     * kernels with nothing to share and teach nothing about a program's
     * recompile (cc_next_program) */
    if (program && st == 0 && strlen(src) >= ((size_t)256 << 10) && unit_len > 0) {
        /* the first real compile replaces the guess; later ones average */
        double rate = t_cc / (double)unit_len;
        cc_rate = cc_rate_learnt ? 0.5 * cc_rate + 0.5 * rate : rate;
        cc_rate_learnt = 1;
    }
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char *msg = read_text(errpath, 3000);
        int code = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (code == 127)
            snprintf(err, errcap, "no C compiler: '%s' was not found. Set KILN_CC to a working C compiler", cc);
        else
            snprintf(err, errcap, "the C compiler failed (KILN_CC='%s', exit %d): %s\nsource kept at %s", cc, code,
                     msg && msg[0] ? msg : "(no message)", cpath);
        free(msg);
        remove(errpath);
        remove(tmpso);
        free(m);
        return KILN_ERR_IO;
    }
    remove(errpath);
    if (rename(tmpso, sopath) != 0) {
        snprintf(err, errcap, "cannot move the compiled kernels to %s", sopath);
        remove(tmpso);
        free(m);
        return KILN_ERR_IO;
    }
    m->handle = dlopen(sopath, RTLD_NOW | RTLD_LOCAL);
    if (!m->handle) {
        const char *de = dlerror();
        snprintf(err, errcap, "cannot load %s: %s (source kept at %s)", sopath, de ? de : "?", cpath);
        free(m);
        return KILN_ERR_IO;
    }
    if (paired) write_alias(dir, hc, h);
    trim_cache(dir, sopath);
    *out = m;
    return KILN_OK;
}

void *rt_cpu_symbol(rt_module *m, const char *name) {
    if (!m || !m->handle) return NULL;
    char moved[64];
    long n = 0;
    int used = 0;
    /* a pair's second program: its kernels are numbered past the offset */
    if (m->offset && sscanf(name, "kiln_k%ld%n", &n, &used) == 1 && name[used] == 0 && n >= 0) {
        snprintf(moved, sizeof moved, "kiln_k%ld", n + m->offset);
        name = moved;
    }
    return dlsym(m->handle, name);
}
const char *rt_cpu_module_path(const rt_module *m) { return m ? m->path : ""; }

void rt_cpu_module_free(rt_module *m) {
    if (!m) return;
    if (m->handle) dlclose(m->handle);
    free(m);
}

/* ---- launch ------------------------------------------------------------- */

typedef struct launch_ctx {
    rt_kernel_fn fn;
    void *const *bufs;
    const int64_t *vars;
    int64_t chunk, flags;
} launch_ctx;

static int launch_piece(void *ctx, int64_t lo, int64_t hi) {
    const launch_ctx *c = ctx;
    return c->fn(c->bufs, c->vars, lo, hi, c->chunk, c->flags);
}

int rt_cpu_launch(rt_pool *pool, rt_kernel_fn fn, void *const *bufs, const int64_t *vars, int64_t n, int64_t chunk,
                      int64_t flags, int serial) {
    launch_ctx c = {fn, bufs, vars, chunk, flags};
    if (serial || !pool) return fn(bufs, vars, 0, n, chunk, flags);
    return rt_pool_run(pool, n, 0, launch_piece, &c);
}

int rt_cpu_launch_claimed(rt_pool *pool, rt_kernel_fn fn, void *const *bufs, const int64_t *vars, int64_t n,
                          int64_t chunk, int64_t flags, int pieces) {
    launch_ctx c = {fn, bufs, vars, chunk, flags};
    if (!pool) return fn(bufs, vars, 0, n, chunk, flags);
    return rt_pool_run_claimed(pool, n, pieces, launch_piece, &c);
}
