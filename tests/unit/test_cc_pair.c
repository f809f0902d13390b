/* test_cc_pair.c — two programs compiled as one unit (runtime/cc_pair.c and
 * rt_cc_companion in runtime/cpu.c): the joint text keeps one copy of the
 * prelude parts both have, adds the second's own parts, renumbers the
 * second's kernels and carries its marker; anything that could change a
 * program's meaning (a name the first defines otherwise, a conditional, a
 * kernel number past the offset) refuses the join. A build with a
 * companion leaves an alias through which the companion's later compile
 * loads its kernels from the pair's object, each program computing its own
 * results; a damaged alias, or one naming an object without the marker, is
 * set aside and the program compiled alone.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "base.h"
#include "cc_pair.h"
#include "cc_split.h"
#include "check.h"

static const char *FIRST =
    "/* first */\n#include <stdint.h>\n"
    "static int64_t ha(int64_t x) { return x + 1; }\n"
    "int kiln_k0(int64_t *out) {\n  *out = ha(10);\n  return 0;\n}\n"
    "int kiln_k1(int64_t *out) {\n  *out = ha(20);\n  return 0;\n}\n";

static const char *SECOND =
    "/* second */\n#include <stdint.h>\n"
    "static int64_t ha(int64_t x) { return x + 1; }\n"
    "static int64_t hb(int64_t x) {\n  return 2 * x;\n}\n"
    "#ifndef KG\n#define KG\nstatic int64_t hg(int64_t x) { return x - 3; }\n#endif\n"
    "int kiln_k0(int64_t *out) {\n  *out = hb(10);\n  return 0;\n}\n"
    "int kiln_k1(int64_t *out) {\n  *out = hg(ha(20));\n  return 0;\n}\n";

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *c = strstr(s, what); c; c = strstr(c + 1, what)) n++;
    return n;
}

static void case_joint_text(void) {
    CASE_BEGIN("cc_pair_joint_text");
    char *j = rt_cc_pair_source(FIRST, SECOND, 0xab);
    CHECK(j != NULL, "two compatible sources were not joined");
    CHECK(count(j, "static int64_t ha(") == 1, "the shared helper is not there once:\n%s", j);
    CHECK(count(j, "static int64_t hb(") == 1 && count(j, "#define KG") == 1, "the second's own parts are missing");
    CHECK(count(j, "kiln_pair_00000000000000ab") == 1, "no marker");
    CHECK(count(j, "int kiln_k0(") == 1 && count(j, "int kiln_k1000000(") == 1 && count(j, "int kiln_k1000001(") == 1,
          "the kernels are not both programs' with the second renumbered:\n%s", j);
    CHECK(strstr(j, "int kiln_k1000000(") > strstr(j, "int kiln_k1("), "the second's kernels come before the first's");
    free(j);
    CASE_END();
}

static void case_refusals(void) {
    CASE_BEGIN("cc_pair_refuses_what_could_change_meaning");
    /* a helper of the same name with another body */
    const char *other = "#include <stdint.h>\nstatic int64_t ha(int64_t x) { return x + 2; }\n"
                        "int kiln_k0(int64_t *out) {\n  *out = ha(1);\n  return 0;\n}\n";
    CHECK(rt_cc_pair_source(FIRST, other, 1) == NULL, "a redefined helper was joined");
    /* a macro the first defines, with another value */
    const char *f2 = "#include <stdint.h>\n#define KV 1\nint kiln_k0(int64_t *out) {\n  *out = KV;\n  return 0;\n}\n";
    const char *s2 = "#include <stdint.h>\n#define KV 2\nint kiln_k0(int64_t *out) {\n  *out = KV;\n  return 0;\n}\n";
    CHECK(rt_cc_pair_source(f2, s2, 1) == NULL, "a redefined macro was joined");
    /* a conditional that is not an include guard */
    const char *s3 = "#include <stdint.h>\n#if defined(__AVX2__)\nstatic int z(void) { return 1; }\n#endif\n"
                     "int kiln_k0(int64_t *out) {\n  *out = 0;\n  return 0;\n}\n";
    CHECK(rt_cc_pair_source(FIRST, s3, 1) == NULL, "a conditional part was joined");
    /* a kernel already numbered past the offset */
    const char *s4 = "#include <stdint.h>\nint kiln_k1000000(int64_t *out) {\n  *out = 0;\n  return 0;\n}\n";
    CHECK(rt_cc_pair_source(FIRST, s4, 1) == NULL, "a kernel past the offset was joined");
    CHECK(rt_cc_pair_source(FIRST, "int main(void) { return 0; }\n", 1) == NULL, "a source without kernels");
    /* a prelude the same in both: nothing added, still joined */
    char *j = rt_cc_pair_source(FIRST, FIRST, 7);
    CHECK(j && count(j, "static int64_t ha(") == 1 && count(j, "int kiln_k1000001(") == 1, "a source with itself");
    free(j);
    CASE_END();
}

static int64_t call(const rt_backend *be, rt_module *m, const char *name) {
    void *f = be->symbol(m, name);
    if (!f) return -999999;
    int (*fn)(int64_t *);
    memcpy(&fn, &f, sizeof f);
    int64_t v = -1;
    fn(&v);
    return v;
}

/* the cache's one file ending in suffix, into out; 0 when not exactly one */
static int one_file(const char *dir, const char *suffix, char *out, size_t cap) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t l = strlen(e->d_name), ls = strlen(suffix);
        if (l > ls && strcmp(e->d_name + l - ls, suffix) == 0) {
            snprintf(out, cap, "%s/%s", dir, e->d_name);
            n++;
        }
    }
    if (d) closedir(d);
    return n == 1;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void case_pair_build_and_alias(void) {
    CASE_BEGIN("cc_pair_build_alias_and_damage");
    char dir[] = "/tmp/kiln_cc_pair_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    setenv("XDG_CACHE_HOME", dir, 1);
    char kdir[128];
    snprintf(kdir, sizeof kdir, "%s/kiln", dir);
    const rt_backend *be = rt_backend_find("cpu");
    CHECK(be != NULL, "no cpu backend");
    char err[2048];
    rt_module *m1 = NULL, *m2 = NULL, *m3 = NULL;
    rt_cc_paired_seconds(NULL);
    rt_cc_next_is_program();
    rt_cc_companion(SECOND, "-O1");
    CHECK(be->compile(FIRST, "-O1", &m1, err, sizeof err) == KILN_OK, "the pair did not build: %s", err);
    size_t unit = 0;
    CHECK(rt_cc_paired_seconds(&unit) > 0 && unit > 0, "the build was not a pair");
    char alias[512];
    CHECK(one_file(kdir, ".alias", alias, sizeof alias), "no alias for the companion in %s", kdir);
    rt_cc_next_is_program();
    CHECK(be->compile(SECOND, "-O1", &m2, err, sizeof err) == KILN_OK, "the companion did not load: %s", err);
    CHECK(rt_cc_last_seconds() == 0, "the companion was compiled again (%.2f s)", rt_cc_last_seconds());
    CHECK(call(be, m1, "kiln_k0") == 11 && call(be, m1, "kiln_k1") == 21, "the first program's results");
    CHECK(call(be, m2, "kiln_k0") == 20 && call(be, m2, "kiln_k1") == 18, "the second program's results (%lld, %lld)",
          (long long)call(be, m2, "kiln_k0"), (long long)call(be, m2, "kiln_k1"));
    be->module_free(m2);
    m2 = NULL;
    /* damaged: set aside, compiled alone, right results */
    write_text(alias, "kiln-zz.so 12\n");
    rt_cc_next_is_program();
    CHECK(be->compile(SECOND, "-O1", &m2, err, sizeof err) == KILN_OK, "after a damaged alias: %s", err);
    CHECK(rt_cc_last_seconds() > 0, "a damaged alias was trusted");
    CHECK(access(alias, F_OK) != 0, "the damaged alias was kept");
    CHECK(call(be, m2, "kiln_k0") == 20 && call(be, m2, "kiln_k1") == 18, "the second program alone");
    be->module_free(m2);
    m2 = NULL;
    /* an alias naming an object that does not hold the pair's marker */
    char so[512], text[600];
    snprintf(so, sizeof so, "%s", alias);
    strcpy(so + strlen(so) - strlen(".alias"), ".so");
    remove(so); /* the second's own object: gone, so the alias is what a compile would find */
    const char *third = "#include <stdint.h>\nint kiln_k1000000(int64_t *out) {\n  *out = 5;\n  return 0;\n}\n"
                        "int kiln_k1000001(int64_t *out) {\n  *out = 6;\n  return 0;\n}\n";
    CHECK(be->compile(third, "-O1", &m3, err, sizeof err) == KILN_OK, "the third program: %s", err);
    const char *slash = strrchr(be->module_path(m3), '/');
    snprintf(text, sizeof text, "%s 1000000\n", slash ? slash + 1 : "?");
    write_text(alias, text);
    rt_cc_next_is_program();
    CHECK(be->compile(SECOND, "-O1", &m2, err, sizeof err) == KILN_OK, "after a foreign alias: %s", err);
    CHECK(call(be, m2, "kiln_k0") == 20 && call(be, m2, "kiln_k1") == 18,
          "an alias to an object without the marker was trusted (%lld)", (long long)call(be, m2, "kiln_k0"));
    CHECK(access(alias, F_OK) != 0, "the foreign alias was kept");
    if (m1) be->module_free(m1);
    if (m2) be->module_free(m2);
    if (m3) be->module_free(m3);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    CASE_END();
}

int main(void) {
    case_joint_text();
    case_refusals();
    case_pair_build_and_alias();
    return check_exit();
}
