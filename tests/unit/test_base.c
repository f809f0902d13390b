/* test_base.c — src/base's shared pieces: the environment reader
 * (config.c: every knob lands in its option field, with the reading it had
 * where it used to be read), kiln_compile_defaults reflecting the
 * environment at the call, the growable string, the error writer and the
 * monotonic clock. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "check.h"
#include "config.h"
#include "kiln.h"
#include "kiln_compile.h"

/* every variable kiln_env_read knows, so a case starts from a clean slate */
static const char *const all_vars[] = {
    "KILN_BACKEND", "KILN_EXACT", "KILN_EGRAPH", "KILN_EG_PLAIN", "KILN_FUSE", "KILN_CONTRACT", "KILN_SPLIT",
    "KILN_PACK_COPY", "KILN_STREAM_MIN", "KILN_PROFILE", "KILN_POISON_RESULTS", "KILN_TUNEDB_OFF",
    "KILN_TUNE_VERBOSE", "KILN_TUNE_WARM", "KILN_TUNE_INJECT_WRONG", "KILN_GTUNE_INJECT_WRONG",
    "KILN_CONTRACT_SCHED_SMALL", "KILN_CONTRACT_SCHED_LARGE", "KILN_GPU_CONTRACT", "KILN_GPU_GROUP",
    "KILN_GPU_RESIDENT", "KILN_GPU_EMIT_ONLY", "KILN_CUDA_ARCHS", "KILN_CC", "KILN_ISA", "KILN_CACHE_MAX_MB",
    "KILN_RETUNE", "KILN_TUNEDB", "XDG_CACHE_HOME", "HOME", "KILN_DEVICE", "KILN_OPENCL_OPTIONS", "KILN_NVRTC", "KILN_TUNE", "KILN_FIXED_DEFAULTS",
};

static void clear_all(void) {
    for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++) unsetenv(all_vars[i]);
}

static void test_defaults(void) {
    CASE_BEGIN("env_unset_gives_defaults");
    clear_all();
    kiln_env e;
    memset(&e, 0x5a, sizeof e);
    kiln_env_read(&e);
    const kiln_compile_options *o = &e.compile;
    CHECK(o->backend == NULL && o->threads == 0 && o->search_budget == 0 && o->vector == 0 && o->exact == 0, "base");
    CHECK(o->fixed_defaults == 0, "fixed_defaults");
    CHECK(!o->no_egraph && !o->eg_plain && !o->no_fuse && !o->no_contract && !o->no_split && !o->no_pack_copy,
          "switches");
    CHECK(o->stream_min == 0 && o->profile == 0 && o->poison == 0 && o->tunedb_off == 0, "run knobs");
    CHECK(!o->tune_verbose && !o->tune_warm && !o->inject_wrong && !o->gtune_inject_wrong, "search knobs");
    CHECK(!o->contract_sched_small && !o->contract_sched_large && !o->gpu_contract && !o->cuda_archs, "strings");
    CHECK(!o->gpu_group && !o->gpu_resident && !o->gpu_emit_only, "gpu");
    CHECK(strcmp(e.host.cc, "cc") == 0, "cc %s", e.host.cc);
    CHECK(e.host.isa == NULL && e.host.tunedb == NULL && e.host.xdg_cache_home == NULL && e.host.home == NULL,
          "host strings");
    CHECK(e.host.cache_max_bytes == (uint64_t)1024 << 20, "cache %llu", (unsigned long long)e.host.cache_max_bytes);
    CHECK(!e.host.retune && e.host.device == 0 && !e.host.opencl_options && !e.host.nvrtc, "host");
    CHECK(e.host.tune_s == 30, "tune_s %g", e.host.tune_s);
    CASE_END();
}

static void test_every_knob(void) {
    CASE_BEGIN("env_every_knob_lands_in_its_field");
    clear_all();
    setenv("KILN_BACKEND", "opencl", 1);
    setenv("KILN_EXACT", "1", 1);
    setenv("KILN_FIXED_DEFAULTS", "1", 1);
    setenv("KILN_EGRAPH", "0", 1);
    setenv("KILN_EG_PLAIN", "1", 1);
    setenv("KILN_FUSE", "0", 1);
    setenv("KILN_CONTRACT", "0", 1);
    setenv("KILN_SPLIT", "0", 1);
    setenv("KILN_PACK_COPY", "0", 1);
    setenv("KILN_STREAM_MIN", "4096", 1);
    setenv("KILN_PROFILE", "quiet", 1);
    setenv("KILN_POISON_RESULTS", "1", 1);
    setenv("KILN_TUNEDB_OFF", "1", 1);
    setenv("KILN_TUNE_VERBOSE", "", 1); /* presence switches: set at all */
    setenv("KILN_TUNE_WARM", "1", 1);
    setenv("KILN_TUNE_INJECT_WRONG", "3", 1);
    setenv("KILN_GTUNE_INJECT_WRONG", "2", 1);
    setenv("KILN_CONTRACT_SCHED_SMALL", "mr=1 nr=4", 1);
    setenv("KILN_CONTRACT_SCHED_LARGE", "mr=4 nr=2", 1);
    setenv("KILN_GPU_CONTRACT", "form=tile", 1);
    setenv("KILN_GPU_GROUP", "96", 1);
    setenv("KILN_GPU_RESIDENT", "1", 1);
    setenv("KILN_GPU_EMIT_ONLY", "1", 1);
    setenv("KILN_CUDA_ARCHS", "sm_80,sm_90", 1);
    setenv("KILN_CC", "clang", 1);
    setenv("KILN_ISA", "avx2", 1);
    setenv("KILN_CACHE_MAX_MB", "0.5", 1);
    setenv("KILN_RETUNE", "1", 1);
    setenv("KILN_TUNEDB", "/x/t.db", 1);
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    setenv("HOME", "/h", 1);
    setenv("KILN_DEVICE", "2", 1);
    setenv("KILN_OPENCL_OPTIONS", "-cl-mad-enable", 1);
    setenv("KILN_NVRTC", "/lib/libnvrtc.so", 1);
    setenv("KILN_TUNE", "2.5", 1);
    kiln_env e;
    kiln_env_read(&e);
    const kiln_compile_options *o = &e.compile;
    CHECK(o->backend && strcmp(o->backend, "opencl") == 0 && o->exact == 1, "backend, exact");
    CHECK(o->fixed_defaults == 1, "fixed_defaults");
    CHECK(o->no_egraph && o->eg_plain && o->no_fuse && o->no_contract && o->no_split && o->no_pack_copy, "switches");
    CHECK(o->stream_min == 4096, "stream_min %lld", o->stream_min);
    CHECK(o->profile == 2 && o->poison == 1 && o->tunedb_off == 1, "profile %d poison %d", o->profile, o->poison);
    CHECK(o->tune_verbose && o->tune_warm && o->inject_wrong == 3 && o->gtune_inject_wrong == 2, "search");
    CHECK(o->contract_sched_small && strcmp(o->contract_sched_small, "mr=1 nr=4") == 0, "small");
    CHECK(o->contract_sched_large && strcmp(o->contract_sched_large, "mr=4 nr=2") == 0, "large");
    CHECK(o->gpu_contract && strcmp(o->gpu_contract, "form=tile") == 0, "gpu contract");
    CHECK(o->gpu_group == 96 && o->gpu_resident == 1 && o->gpu_emit_only == 1, "gpu");
    CHECK(o->cuda_archs && strcmp(o->cuda_archs, "sm_80,sm_90") == 0, "archs");
    CHECK(strcmp(e.host.cc, "clang") == 0 && e.host.isa && strcmp(e.host.isa, "avx2") == 0, "cc, isa");
    CHECK(e.host.cache_max_bytes == (uint64_t)(0.5 * 1024 * 1024), "cache %llu",
          (unsigned long long)e.host.cache_max_bytes);
    CHECK(e.host.retune == 1 && e.host.device == 2, "retune, device");
    CHECK(e.host.tunedb && strcmp(e.host.tunedb, "/x/t.db") == 0, "tunedb");
    CHECK(e.host.xdg_cache_home && strcmp(e.host.xdg_cache_home, "/x/cache") == 0, "xdg");
    CHECK(e.host.home && strcmp(e.host.home, "/h") == 0, "home");
    CHECK(e.host.opencl_options && strcmp(e.host.opencl_options, "-cl-mad-enable") == 0, "opencl options");
    CHECK(e.host.nvrtc && strcmp(e.host.nvrtc, "/lib/libnvrtc.so") == 0, "nvrtc");
    CHECK(e.host.tune_s == 2.5, "tune_s %g", e.host.tune_s);
    /* kiln_compile_defaults is the compile part, read at the call */
    kiln_compile_options d = kiln_compile_defaults();
    CHECK(d.no_fuse && d.profile == 2 && d.inject_wrong == 3 && d.exact == 1, "defaults follow the environment");
    clear_all();
    d = kiln_compile_defaults();
    CHECK(!d.no_fuse && d.profile == 0 && d.inject_wrong == 0 && d.exact == 0, "defaults after unset");
    CASE_END();
}

/* the readings each variable had where it used to be read */
static void test_readings(void) {
    CASE_BEGIN("env_readings_kept");
    clear_all();
    kiln_env e;
    setenv("KILN_FUSE", "1", 1);     /* "off" switches: only the text 0 turns them off */
    setenv("KILN_EGRAPH", "", 1);
    setenv("KILN_EXACT", "yes", 1);  /* KILN_EXACT, KILN_RETUNE: only "1" */
    setenv("KILN_RETUNE", "11", 1);
    setenv("KILN_PROFILE", "0", 1);  /* profile: off for 0 */
    setenv("KILN_STREAM_MIN", "0", 1); /* 0: every output, which the field spells -1 */
    setenv("KILN_TUNEDB_OFF", "0", 1);
    setenv("KILN_POISON_RESULTS", "0", 1);
    setenv("KILN_CACHE_MAX_MB", "junk", 1); /* unreadable: the default */
    setenv("KILN_CC", "", 1);               /* empty: the default */
    setenv("KILN_TUNE", "-1", 1);           /* negative: the default */
    kiln_env_read(&e);
    CHECK(!e.compile.no_fuse && !e.compile.no_egraph, "off switches");
    CHECK(!e.compile.exact && !e.host.retune, "exact %d retune %d", e.compile.exact, e.host.retune);
    CHECK(e.compile.profile == 0 && e.compile.stream_min == -1, "profile %d stream %lld", e.compile.profile,
          e.compile.stream_min);
    CHECK(!e.compile.tunedb_off && !e.compile.poison, "tunedb_off, poison");
    CHECK(e.host.cache_max_bytes == (uint64_t)1024 << 20 && strcmp(e.host.cc, "cc") == 0, "host defaults");
    CHECK(e.host.tune_s == 30, "tune_s %g", e.host.tune_s);
    setenv("KILN_PROFILE", "1", 1);
    kiln_env_read(&e);
    CHECK(e.compile.profile == 1, "profile=1 prints: %d", e.compile.profile);
    clear_all();
    CASE_END();
}

static void appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kiln_vappendf(buf, len, cap, fmt, ap);
    va_end(ap);
}

static void test_strbuf(void) {
    CASE_BEGIN("strbuf_appends_and_takes");
    kiln_sb b = {0};
    char *empty = kiln_sb_take(&b);
    CHECK(empty && empty[0] == 0, "empty take");
    free(empty);
    for (int i = 0; i < 1000; i++) kiln_sb_printf(&b, "%d,", i);
    kiln_sb_puts(&b, "end");
    kiln_sb_putn(&b, "xyz", 2);
    CHECK(b.s && b.len == strlen(b.s) && b.cap > b.len, "len %zu cap %zu", b.len, b.cap);
    CHECK(strncmp(b.s, "0,1,2,", 6) == 0, "head %.6s", b.s);
    CHECK(b.len >= 9 && strcmp(b.s + b.len - 9, "999,endxy") == 0, "tail %s", b.len >= 9 ? b.s + b.len - 9 : "");
    char *s = kiln_sb_take(&b);
    CHECK(b.s == NULL && b.len == 0 && b.cap == 0 && s && s[0] == '0', "taken");
    free(s);
    /* the (buf, len, cap) form under sch_appendf: one long piece past the first growth */
    char *buf = NULL;
    size_t len = 0, cap = 0;
    appendf(&buf, &len, &cap, "%s", "a");
    appendf(&buf, &len, &cap, "%0600d", 7);
    CHECK(buf && len == 601 && strlen(buf) == 601 && cap > 601 && buf[0] == 'a' && buf[600] == '7', "len %zu", len);
    free(buf);
    CASE_END();
}

static void test_errbuf(void) {
    CASE_BEGIN("errbuf_writes_truncates_and_returns_status");
    char err[8];
    kiln_status s = kiln_fail(err, sizeof err, KILN_ERR_IO, "cannot open %s", "file");
    CHECK(s == KILN_ERR_IO, "status %d", (int)s);
    CHECK(strcmp(err, "cannot ") == 0, "truncated to fit: '%s'", err);
    CHECK(kiln_fail(NULL, 0, KILN_ERR_INVALID, "dropped %d", 1) == KILN_ERR_INVALID, "NULL buffer");
    err[0] = 'x';
    CHECK(kiln_fail(err, 0, KILN_OK, "not written") == KILN_OK && err[0] == 'x', "cap 0 writes nothing");
    CASE_END();
}

static void test_clock(void) {
    CASE_BEGIN("clock_is_monotonic_and_agrees");
    double s0 = kiln_now_s();
    int64_t n0 = kiln_now_ns();
    volatile double x = 0;
    for (int i = 0; i < 2000000; i++) x += 1e-9 * i;
    double s1 = kiln_now_s();
    int64_t n1 = kiln_now_ns();
    CHECK(s1 >= s0 && n1 >= n0, "backwards");
    CHECK(s1 - s0 < 5.0 && (double)(n1 - n0) * 1e-9 < 5.0, "implausible %.3f s", s1 - s0);
    /* both read one clock: the ns reading taken between s0 and s1 lies between them */
    CHECK((double)n0 * 1e-9 >= s0 - 1e-6 && (double)n0 * 1e-9 <= s1 + 1e-6, "ns %.6f vs s %.6f..%.6f",
          (double)n0 * 1e-9, s0, s1);
    (void)x;
    CASE_END();
}

int main(void) {
    test_defaults();
    test_every_knob();
    test_readings();
    test_strbuf();
    test_errbuf();
    test_clock();
    return check_exit();
}
