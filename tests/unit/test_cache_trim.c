/* test_cache_trim.c — the kernel cache's size bound (cache_trim.c): whole
 * .so/.c pairs go in least recently used order down to 3/4 of the bound,
 * the object just written and foreign files stay, a dead compiler's
 * leftovers go once they are an hour old; and through the CPU backend, a
 * small KILN_CACHE_MAX_MB keeps the directory bounded while every program
 * still compiles, runs and gives the right answer. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "kiln.h"
#include "kiln_compile.h"
#include "cache_trim.h"

static void put(const char *dir, const char *name, size_t bytes, time_t age) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    for (size_t i = 0; i < bytes; i++) fputc('x', f);
    fclose(f);
    struct timespec ts[2];
    ts[0].tv_sec = ts[1].tv_sec = time(NULL) - age;
    ts[0].tv_nsec = ts[1].tv_nsec = 0;
    utimensat(AT_FDCWD, path, ts, 0);
}

static int there(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* bytes of kiln-*.so and kiln-*.c files in dir, and how many objects */
static long long cache_bytes(const char *dir, int *objects) {
    DIR *d = opendir(dir);
    long long total = 0;
    *objects = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (strncmp(de->d_name, "kiln-", 5) != 0 || l < 4) continue;
        int so = strcmp(de->d_name + l - 3, ".so") == 0, c = strcmp(de->d_name + l - 2, ".c") == 0;
        if (!so && !c) continue;
        char path[512];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (stat(path, &st) == 0) total += st.st_size;
        *objects += so;
    }
    if (d) closedir(d);
    return total;
}

static void test_trim_order(void) {
    CASE_BEGIN("cache_trim_lru_pairs");
    char dir[] = "/tmp/kiln-test-trim-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    /* four pairs of 1000 + 200 bytes, oldest a; d is the one just written */
    put(dir, "kiln-000000000000000a.so", 1000, 400);
    put(dir, "kiln-000000000000000a.c", 200, 400);
    put(dir, "kiln-000000000000000b.so", 1000, 300);
    put(dir, "kiln-000000000000000b.c", 200, 300);
    put(dir, "kiln-000000000000000c.so", 1000, 200);
    put(dir, "kiln-000000000000000c.c", 200, 200);
    put(dir, "kiln-000000000000000d.so", 1000, 500);
    put(dir, "kiln-000000000000000d.c", 200, 500);
    put(dir, "notes.so", 5000, 900);                        /* not the cache's */
    put(dir, "kiln-000000000000000e.so.tmp.123.so", 50, 7200); /* a dead compiler's */
    put(dir, "kiln-000000000000000f.so.err.124", 50, 60);      /* a live one's */
    put(dir, "kiln-00000000000000a1.alias", 0, 60);            /* its object is trimmed below */
    put(dir, "kiln-00000000000000c1.alias", 0, 60);            /* its object stays */
    put(dir, "kiln-00000000000000e1.alias", 0, 60);            /* damaged */
    char apath[512];
    const char *alias_text[3][2] = {{"kiln-00000000000000a1.alias", "kiln-000000000000000a.so 1000000\n"},
                                    {"kiln-00000000000000c1.alias", "kiln-000000000000000c.so 1000000\n"},
                                    {"kiln-00000000000000e1.alias", "garbage"}};
    for (int i = 0; i < 3; i++) {
        snprintf(apath, sizeof apath, "%s/%s", dir, alias_text[i][0]);
        FILE *af = fopen(apath, "wb");
        CHECK(af && fputs(alias_text[i][1], af) >= 0 && fclose(af) == 0, "writing %s", apath);
    }
    char keep[512];
    snprintf(keep, sizeof keep, "%s/kiln-000000000000000d.so", dir);
    /* counted without d: 3600 bytes; bound 3000 trims to 2250: a, then b */
    int removed = rt_cache_trim(dir, 3000, keep);
    CHECK(removed == 2, "removed %d pairs, expected 2", removed);
    CHECK(!there(dir, "kiln-000000000000000a.so") && !there(dir, "kiln-000000000000000a.c"), "oldest pair kept");
    CHECK(!there(dir, "kiln-000000000000000b.so") && !there(dir, "kiln-000000000000000b.c"), "second oldest kept");
    CHECK(there(dir, "kiln-000000000000000c.so") && there(dir, "kiln-000000000000000c.c"), "newest pair removed");
    CHECK(there(dir, "kiln-000000000000000d.so"), "the object just written was removed");
    CHECK(there(dir, "notes.so"), "a file not of the cache's form was removed");
    CHECK(!there(dir, "kiln-000000000000000e.so.tmp.123.so"), "an hour-old temporary stayed");
    CHECK(there(dir, "kiln-000000000000000f.so.err.124"), "a fresh error file was removed");
    CHECK(!there(dir, "kiln-00000000000000a1.alias"), "an alias to a trimmed object stayed");
    CHECK(there(dir, "kiln-00000000000000c1.alias"), "an alias to a kept object was removed");
    CHECK(!there(dir, "kiln-00000000000000e1.alias"), "a damaged alias stayed");
    /* under the bound: nothing goes; 0 disables */
    CHECK(rt_cache_trim(dir, 1 << 20, NULL) == 0, "trimmed under the bound");
    CHECK(rt_cache_trim(dir, 0, NULL) == 0, "trimmed with the bound off");
    CHECK(rt_cache_trim("/nonexistent/kiln-dir", 10, NULL) == 0, "a missing directory");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
    CASE_END();
}

static void test_backend_bounded(void) {
    CASE_BEGIN("cache_trim_backend_bounded");
    char dir[] = "/tmp/kiln-test-trimc-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    setenv("XDG_CACHE_HOME", dir, 1);
    setenv("KILN_CACHE_MAX_MB", "0.06", 1); /* ~63 KB: two or three small programs */
    char kdir[600];
    snprintf(kdir, sizeof kdir, "%s/kiln", dir);
    long long most = 0;
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 6; i++) {
            /* y = x * c_i + i: a different source per i */
            kiln_graph *g = kiln_graph_new();
            kiln_tensor x = kiln_input(g, "x", KILN_F32, "64");
            kiln_output(g, kiln_add(g, kiln_mul(g, x, kiln_const(g, 1.5 + i, KILN_F32)), kiln_const(g, (double)i, KILN_F32)), "y");
            float xb[64], yb[64];
            for (int e = 0; e < 64; e++) xb[e] = (float)e;
            kiln_bind_input(g, "x", xb, sizeof xb);
            kiln_status st;
            kiln_program *p = kiln_compile(g, NULL, &st);
            CHECK(p && kiln_run(p) == KILN_OK, "program %d (round %d): %s", i, round, kiln_graph_error(g));
            kiln_read_output(g, "y", yb, sizeof yb);
            for (int e = 0; e < 64; e++)
                CHECK(yb[e] == xb[e] * (1.5f + (float)i) + (float)i, "program %d element %d: %g", i, e, yb[e]);
            kiln_program_free(p);
            kiln_graph_free(g);
            int objects;
            long long b = cache_bytes(kdir, &objects);
            if (b > most) most = b;
        }
    int objects;
    cache_bytes(kdir, &objects);
    CHECK(objects >= 1 && objects < 6, "%d objects in the cache, expected fewer than the 6 programs", objects);
    /* the bound plus the object just written (never removed) */
    CHECK(most <= 63000 + 40000, "the cache grew to %lld bytes", most);
    unsetenv("KILN_CACHE_MAX_MB");
    unsetenv("XDG_CACHE_HOME");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
    CASE_END();
}

int main(void) {
    test_trim_order();
    test_backend_bounded();
    return check_exit();
}
