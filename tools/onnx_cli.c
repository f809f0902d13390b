/* onnx_cli.c — `kiln run|bench|explain -m MODEL.onnx`: ONNX models on the
 * command line (tools/kiln.c hands over any of those commands whose -m
 * names a file ending in .onnx).
 *
 *   kiln run -m M.onnx --input NAME=FILE.npy ... [--output-dir D] [-t N] [--interp]
 *       runs the model once on the given inputs (compiled, or the reference
 *       interpreter with --interp) and writes each output as D/NAME.npy
 *   kiln bench -m M.onnx [--dim NAME=VALUE ...] [-t 1,2] [-r 20] [--no-tune] [--json] [--profile]
 *       random inputs of the declared shapes (symbolic dims from --dim);
 *       warm-up, then the median of -r timed runs per thread count; the
 *       first-run schedule search applies (KILN_TUNE seconds, default 30);
 *       --profile prints the timed runs' per-kernel times and thread use
 *   kiln explain -m M.onnx [--graph] [--kernels] [--source]
 *       inputs, outputs, the graph, the kernels and the generated C
 *
 * Invariants: errors are one line on stderr prefixed "kiln CMD: ", exit 1
 * for library errors (a bad model, an unsupported operator), 2 for usage.
 * .npy files are read and written by this file (format version 1-3,
 * little-endian, C order); integer arrays reach kiln as int32 (checked).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kiln.h"
#include "kiln_cli.h"
#include "kiln_compile.h"
#include "kiln_onnx.h"

#define MAX_IO 64

static int err1(const char *cmd, const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "kiln %s: ", cmd);
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return 1;
}

static int usage2(const char *cmd, const char *what, const char *arg) {
    fprintf(stderr, "kiln %s: %s '%s'\n(try 'kiln --help')\n", cmd, what, arg);
    return 2;
}

int kiln_onnx_cli_wants(int argc, char **argv) {
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            size_t n = strlen(argv[i + 1]);
            return n > 5 && !strcmp(argv[i + 1] + n - 5, ".onnx");
        }
    return 0;
}

/* ---- .npy ------------------------------------------------------------------- */

typedef struct npy {
    char kind;       /* 'f' 'i' 'u' 'b' */
    int size;        /* bytes per element */
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    int64_t n;
    void *data;
} npy;

static int npy_read(const char *path, npy *a, char *err, size_t cap) {
    memset(a, 0, sizeof *a);
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, cap, "cannot open %s: %s", path, strerror(errno)); return 0; }
    unsigned char h[10];
    int ok = fread(h, 1, 10, f) == 10 && !memcmp(h, "\x93NUMPY", 6);
    size_t hl = 0;
    if (ok && h[6] == 1) hl = (size_t)h[8] | (size_t)h[9] << 8;
    else if (ok && (h[6] == 2 || h[6] == 3)) {
        unsigned char e[2];
        ok = fread(e, 1, 2, f) == 2;
        hl = (size_t)h[8] | (size_t)h[9] << 8 | (size_t)e[0] << 16 | (size_t)e[1] << 24;
    } else ok = 0;
    char *hd = ok && hl < 65536 ? calloc(1, hl + 1) : NULL;
    if (!hd || fread(hd, 1, hl, f) != hl) {
        free(hd);
        fclose(f);
        snprintf(err, cap, "%s is not a .npy file", path);
        return 0;
    }
    const char *d = strstr(hd, "'descr'"), *fo = strstr(hd, "'fortran_order'"), *sh = strstr(hd, "'shape'");
    ok = d && fo && sh;
    if (ok) {
        d = strchr(d + 7, '\'');
        ok = d && (d[1] == '<' || d[1] == '|') && strchr("fiub", d[2]) && d[3] >= '1' && d[3] <= '8' && d[4] == '\'';
    }
    if (ok) {
        a->kind = d[2];
        a->size = d[3] - '0';
        ok = !strstr(fo, "True");
    }
    if (ok) {
        const char *p = strchr(sh, '(');
        ok = p != NULL;
        a->n = 1;
        while (ok && *++p && *p != ')') {
            if (*p == ' ' || *p == ',') continue;
            char *e;
            long long v = strtoll(p, &e, 10);
            if (e == p || v < 0 || a->ndim >= KILN_MAX_DIMS) { ok = 0; break; }
            a->dims[a->ndim++] = v;
            a->n *= v;
            p = e - 1;
        }
    }
    free(hd);
    if (!ok || a->n > ((int64_t)1 << 34)) {
        fclose(f);
        snprintf(err, cap, "%s: unsupported .npy header (need little-endian C-order numbers, at most %d dims)", path,
                 KILN_MAX_DIMS);
        return 0;
    }
    size_t bytes = (size_t)a->n * (size_t)a->size;
    a->data = malloc(bytes ? bytes : 1);
    if (!a->data || fread(a->data, 1, bytes, f) != bytes) {
        fclose(f);
        free(a->data);
        a->data = NULL;
        snprintf(err, cap, "%s: truncated data", path);
        return 0;
    }
    fclose(f);
    return 1;
}

static double npy_get(const npy *a, int64_t i) {
    const unsigned char *p = (const unsigned char *)a->data + (size_t)i * (size_t)a->size;
    switch (a->kind) {
    case 'f':
        if (a->size == 4) { float v; memcpy(&v, p, 4); return v; }
        if (a->size == 8) { double v; memcpy(&v, p, 8); return v; }
        if (a->size == 2) {
            uint16_t h; memcpy(&h, p, 2);
            int e = (h >> 10) & 31, m = h & 1023;
            double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
            return (h & 0x8000) ? -v : v;
        }
        return NAN;
    case 'i': {
        int64_t v = 0;
        if (a->size == 1) v = *(const int8_t *)p;
        else if (a->size == 2) { int16_t x; memcpy(&x, p, 2); v = x; }
        else if (a->size == 4) { int32_t x; memcpy(&x, p, 4); v = x; }
        else { memcpy(&v, p, 8); }
        return (double)v;
    }
    default: {
        uint64_t v = 0;
        memcpy(&v, p, (size_t)a->size);
        return (double)v;
    }
    }
}

static int npy_write(const char *path, const char *descr, int ndim, const int64_t *dims, const void *data,
                     size_t bytes) {
    char hd[256];
    int n = snprintf(hd, sizeof hd, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < ndim; d++) n += snprintf(hd + n, sizeof hd - (size_t)n, "%lld,%s", (long long)dims[d], d + 1 < ndim ? " " : "");
    n += snprintf(hd + n, sizeof hd - (size_t)n, "), }");
    int total = ((10 + n + 1 + 63) / 64) * 64;
    while (10 + n + 1 < total) hd[n++] = ' ';
    hd[n++] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 255), (unsigned char)(n >> 8)};
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hd, 1, (size_t)n, f) == (size_t)n && fwrite(data, 1, bytes, f) == bytes;
    return (fclose(f) == 0) && ok;
}

/* ---- shared ----------------------------------------------------------------- */

typedef struct opts {
    const char *model, *outdir;
    const char *in_name[MAX_IO], *in_file[MAX_IO];
    int n_in;
    const char *dim_name[MAX_IO];
    int64_t dim_val[MAX_IO];
    int n_dim;
    int threads[8], n_threads, reps, interp, no_tune, json, graph, kernels, source, profile;
} opts;

static int parse(const char *cmd, int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->outdir = ".";
    o->reps = 20;
    int i = 0;
    while (i < argc) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = !strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--input") || !strcmp(a, "--output-dir") ||
                    !strcmp(a, "--dim") || !strcmp(a, "-t") || !strcmp(a, "--threads") || !strcmp(a, "-r");
        if (takes && !v) return usage2(cmd, "missing value after", a);
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--output-dir")) o->outdir = v;
        else if (!strcmp(a, "--input") || !strcmp(a, "--dim")) {
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || !eq[1]) return usage2(cmd, "expected NAME=VALUE, got", v);
            char *name = strndup(v, (size_t)(eq - v));
            if (!name) return 1;
            if (!strcmp(a, "--input")) {
                if (o->n_in == MAX_IO) { free(name); return usage2(cmd, "too many inputs at", v); }
                o->in_name[o->n_in] = name;
                o->in_file[o->n_in++] = eq + 1;
            } else {
                char *e;
                long long x = strtoll(eq + 1, &e, 10);
                if (*e || x < 1 || o->n_dim == MAX_IO) { free(name); return usage2(cmd, "bad --dim", v); }
                o->dim_name[o->n_dim] = name;
                o->dim_val[o->n_dim++] = x;
            }
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            const char *p = v;
            while (*p) {
                char *e;
                long x = strtol(p, &e, 10);
                if (e == p || x < 0 || x > 1024 || o->n_threads == 8) return usage2(cmd, "bad thread list", v);
                o->threads[o->n_threads++] = (int)x;
                p = *e == ',' ? e + 1 : e;
                if (*e && *e != ',') return usage2(cmd, "bad thread list", v);
            }
        } else if (!strcmp(a, "-r")) {
            char *e;
            long x = strtol(v, &e, 10);
            if (*e || x < 1 || x > 100000) return usage2(cmd, "bad repeat count", v);
            o->reps = (int)x;
        } else if (!strcmp(a, "--interp")) o->interp = 1;
        else if (!strcmp(a, "--no-tune")) o->no_tune = 1;
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--graph")) o->graph = 1;
        else if (!strcmp(a, "--kernels")) o->kernels = 1;
        else if (!strcmp(a, "--source")) o->source = 1;
        else if (!strcmp(a, "--profile")) o->profile = 1;
        else return usage2(cmd, "unknown option", a);
        i += takes ? 2 : 1;
    }
    if (!o->model) return usage2(cmd, "missing", "-m MODEL.onnx");
    if (!o->n_threads) o->threads[o->n_threads++] = 0;
    return 0;
}

static void free_opts(opts *o) {
    for (int i = 0; i < o->n_in; i++) free((void *)o->in_name[i]);
    for (int i = 0; i < o->n_dim; i++) free((void *)o->dim_name[i]);
}

static kiln_onnx_model *load(const char *cmd, const char *path) {
    char err[1024];
    kiln_status st;
    kiln_onnx_model *m = kiln_onnx_load(path, NULL, &st, err, sizeof err);
    if (!m) fprintf(stderr, "kiln %s: %s (%s)\n", cmd, err, kiln_status_name(st));
    return m;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* a kiln buffer of input i's dtype from an .npy array (values converted,
 * integers range-checked) */
static void *to_kiln(const npy *a, kiln_dtype t, size_t *bytes, const char **why) {
    *bytes = kiln_dtype_bytes(t, a->n);
    void *buf = malloc(*bytes ? *bytes : 1);
    if (!buf) { *why = "out of memory"; return NULL; }
    for (int64_t i = 0; i < a->n; i++) {
        double v = npy_get(a, i);
        switch (t) {
        case KILN_F32: ((float *)buf)[i] = (float)v; break;
        case KILN_I32:
            if (!(v >= -2147483648.0 && v <= 2147483647.0) || v != floor(v)) { free(buf); *why = "a value does not fit int32"; return NULL; }
            ((int32_t *)buf)[i] = (int32_t)v;
            break;
        default: free(buf); *why = "the input's dtype is not supported by the command line (f32 and integer inputs are)"; return NULL;
        }
    }
    return buf;
}

/* ---- run -------------------------------------------------------------------- */

static int onnx_run(const char *cmd, opts *o) {
    kiln_onnx_model *m = load(cmd, o->model);
    if (!m) return 1;
    kiln_graph *g = kiln_onnx_graph(m);
    void *bufs[MAX_IO] = {0};
    int rc = 0;
    int nin = kiln_onnx_input_count(m);
    for (int i = 0; i < nin && !rc; i++) {
        const char *name = kiln_onnx_input_name(m, i);
        int k = 0;
        while (k < o->n_in && strcmp(o->in_name[k], name)) k++;
        if (k == o->n_in) { rc = err1(cmd, "the model's input '%s' has no --input %s=FILE.npy", name, name); break; }
        npy a;
        char err[512];
        if (!npy_read(o->in_file[k], &a, err, sizeof err)) { rc = err1(cmd, "%s%s", err, ""); break; }
        int64_t dims[KILN_MAX_DIMS];
        const char *syms[KILN_MAX_DIMS];
        int nd = kiln_onnx_input_dims(m, i, dims, syms);
        if (nd != a.ndim) rc = err1(cmd, "input '%s': %s has another rank than the model's", name, o->in_file[k]);
        for (int d = 0; !rc && d < nd; d++) {
            if (syms[d]) kiln_bind_dim(g, syms[d], a.dims[d]);
            else if (dims[d] != a.dims[d]) rc = err1(cmd, "input '%s': %s has another shape than the model's", name, o->in_file[k]);
        }
        const char *why = NULL;
        size_t bytes = 0;
        if (!rc && !(bufs[i] = to_kiln(&a, kiln_onnx_input_dtype(m, i), &bytes, &why))) rc = err1(cmd, "input '%s': %s", name, why);
        if (!rc && kiln_bind_input(g, name, bufs[i], bytes) != KILN_OK) rc = err1(cmd, "input '%s': %s", name, kiln_graph_error(g));
        free(a.data);
    }
    for (int k = 0; !rc && k < o->n_in; k++) {
        int found = 0;
        for (int i = 0; i < nin; i++) found |= !strcmp(kiln_onnx_input_name(m, i), o->in_name[k]);
        if (!found) rc = err1(cmd, "the model has no input '%s'%s", o->in_name[k], "");
    }
    kiln_program *p = NULL;
    if (!rc) {
        kiln_status st;
        if (o->interp) st = kiln_eval_reference(g);
        else {
            kiln_compile_options co = kiln_compile_defaults();
            co.threads = o->threads[0];
            co.fixed_defaults = 1; /* ONNX's f32 arithmetic, not the cost model's bf16/int8 pick */
            p = kiln_compile(g, &co, &st);
            if (p) st = kiln_run(p);
        }
        if (st != KILN_OK) rc = err1(cmd, "%s (%s)", kiln_graph_error(g), kiln_status_name(st));
    }
    if (!rc) mkdir(o->outdir, 0777);
    for (int i = 0; !rc && i < kiln_onnx_output_count(m); i++) {
        const char *name = kiln_onnx_output_name(m, i);
        int nd;
        int64_t dims[KILN_MAX_DIMS];
        kiln_output_shape(g, name, &nd, dims);
        int od = kiln_onnx_output_onnx_dtype(m, i);
        int is_f = od == 1, is_int = od != 1 && od != 10 && od != 16;
        if (!is_f && !is_int) { rc = err1(cmd, "output '%s': only float and integer outputs are written%s", name, ""); break; }
        int64_t n = 1;
        for (int d = 0; d < nd; d++) n *= dims[d];
        size_t bytes = (size_t)n * 4;
        void *buf = malloc(bytes ? bytes : 1);
        if (!buf || kiln_read_output(g, name, buf, bytes) != KILN_OK) { free(buf); rc = err1(cmd, "output '%s': %s", name, kiln_graph_error(g)); break; }
        char path[4096], safe[256];
        snprintf(safe, sizeof safe, "%s", name);
        for (char *s = safe; *s; s++)
            if (*s == '/' || *s == '\\' || *s == ':') *s = '_';
        snprintf(path, sizeof path, "%s/%s.npy", o->outdir, safe);
        if (!npy_write(path, is_f ? "<f4" : "<i4", nd, dims, buf, bytes)) rc = err1(cmd, "cannot write %s%s", path, "");
        else {
            printf("%s: (", name);
            for (int d = 0; d < nd; d++) printf("%lld%s", (long long)dims[d], d + 1 < nd ? ", " : "");
            printf(") %s -> %s\n", is_f ? "float32" : "int32", path);
        }
        free(buf);
    }
    if (p) kiln_program_free(p);
    for (int i = 0; i < nin && i < MAX_IO; i++) free(bufs[i]);
    kiln_onnx_free(m);
    return rc;
}

/* ---- bench ------------------------------------------------------------------ */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int onnx_bench(const char *cmd, opts *o) {
    kiln_onnx_model *m = load(cmd, o->model);
    if (!m) return 1;
    kiln_graph *g = kiln_onnx_graph(m);
    int rc = 0, nin = kiln_onnx_input_count(m);
    void *bufs[MAX_IO] = {0};
    uint64_t seed = 12345;
    for (int i = 0; i < nin && i < MAX_IO && !rc; i++) {
        int64_t dims[KILN_MAX_DIMS];
        const char *syms[KILN_MAX_DIMS];
        int nd = kiln_onnx_input_dims(m, i, dims, syms);
        int64_t n = 1;
        for (int d = 0; d < nd; d++) {
            if (syms[d]) {
                int k = 0;
                while (k < o->n_dim && strcmp(o->dim_name[k], syms[d])) k++;
                if (k == o->n_dim) { rc = err1(cmd, "input dim '%s' is symbolic: give --dim %s=VALUE", syms[d], syms[d]); break; }
                dims[d] = o->dim_val[k];
                kiln_bind_dim(g, syms[d], dims[d]);
            }
            n *= dims[d];
        }
        if (rc) break;
        kiln_dtype t = kiln_onnx_input_dtype(m, i);
        size_t bytes = kiln_dtype_bytes(t, n);
        bufs[i] = calloc(1, bytes ? bytes : 1);
        if (!bufs[i]) { rc = err1(cmd, "out of memory%s%s", "", ""); break; }
        if (t == KILN_F32)
            for (int64_t e = 0; e < n; e++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                ((float *)bufs[i])[e] = (float)((double)(seed >> 40) / (double)(1 << 24) * 2.0 - 1.0);
            }
        /* integer inputs stay 0: a valid index for any gather */
        kiln_bind_input(g, kiln_onnx_input_name(m, i), bufs[i], bytes);
    }
    if (!rc && o->json) printf("[");
    for (int ti = 0; !rc && ti < o->n_threads; ti++) {
        kiln_compile_options co = kiln_compile_defaults();
        co.threads = o->threads[ti];
        kiln_status st;
        double t0 = now_s();
        kiln_program *p = kiln_compile(g, &co, &st);
        if (!p) { rc = err1(cmd, "%s (%s)", kiln_graph_error(g), kiln_status_name(st)); break; }
        double compile_s = now_s() - t0;
        const char *tv = getenv("KILN_TUNE");
        double budget = tv ? atof(tv) : 30.0;
        if (!o->no_tune && budget > 0 && kiln_program_untuned(p) > 0) {
            /* the first-run search: settled during the next runs, then one recompile */
            kiln_program_search(p, budget, NULL, 0.0);
            double ts = now_s();
            kiln_search_status ss;
            kiln_program_search_status(p, &ss);
            /* until the budget is spent, every slot is settled, or a run
             * searched nothing: a slot whose bucket this model never
             * launches (the decode-sized M of a convolution) stays open */
            for (;;) {
                int seen = ss.measurements, open = ss.untuned;
                if (kiln_run(p) != KILN_OK) break;
                kiln_program_search_status(p, &ss);
                if (now_s() - ts >= budget * 1.5 || ss.spent_s >= ss.budget_s || ss.untuned == 0) break;
                if (ss.measurements == seen && ss.untuned == open) break;
            }
            kiln_program_search_finish(p);
            fprintf(stderr, "kiln %s: searched %d kernels, %d candidates, in %.1f s\n", cmd, ss.searched, ss.measurements,
                    now_s() - ts);
        }
        for (int w = 0; w < 3 && st == KILN_OK; w++) st = kiln_run(p);
        if (o->profile) kiln_program_profile_on(p, 1); /* the timed runs' per-kernel times, printed after them */
        double *ts = calloc((size_t)o->reps, sizeof *ts);
        for (int r = 0; ts && r < o->reps && st == KILN_OK; r++) {
            double a = now_s();
            st = kiln_run(p);
            ts[r] = now_s() - a;
        }
        if (st != KILN_OK || !ts) rc = err1(cmd, "%s (%s)", kiln_graph_error(g), kiln_status_name(st));
        else {
            qsort(ts, (size_t)o->reps, sizeof *ts, cmp_d);
            double med = ts[o->reps / 2] * 1e3, best = ts[0] * 1e3;
            if (o->json)
                printf("%s{\"model\": \"%s\", \"threads\": %d, \"median_ms\": %.4f, \"min_ms\": %.4f, \"runs\": %d, \"compile_s\": %.2f}",
                       ti ? ", " : "", o->model, o->threads[ti], med, best, o->reps, compile_s);
            else
                printf("%s  threads %d  median %.3f ms  min %.3f ms  (%d runs; compile %.1f s)\n", o->model, o->threads[ti], med,
                       best, o->reps, compile_s);
        }
        if (!rc && o->profile) {
            char *rep = kiln_program_profile(p, 0, 0, 0, 25);
            fprintf(stderr, "%s", rep ? rep : "");
            kiln_free(rep);
        }
        free(ts);
        kiln_program_free(p);
    }
    if (!rc && o->json) printf("]\n");
    for (int i = 0; i < nin && i < MAX_IO; i++) free(bufs[i]);
    kiln_onnx_free(m);
    return rc;
}

/* ---- explain ---------------------------------------------------------------- */

static int onnx_explain(const char *cmd, opts *o) {
    kiln_onnx_model *m = load(cmd, o->model);
    if (!m) return 1;
    kiln_graph *g = kiln_onnx_graph(m);
    printf("ONNX model %s (opset %d)\ninputs:\n", o->model, kiln_onnx_opset(m));
    for (int i = 0; i < kiln_onnx_input_count(m); i++) {
        int64_t dims[KILN_MAX_DIMS];
        const char *syms[KILN_MAX_DIMS];
        int nd = kiln_onnx_input_dims(m, i, dims, syms);
        printf("  %s %s (", kiln_onnx_input_name(m, i), kiln_dtype_name(kiln_onnx_input_dtype(m, i)));
        for (int d = 0; d < nd; d++)
            if (syms[d]) printf("%s%s", syms[d], d + 1 < nd ? ", " : "");
            else printf("%lld%s", (long long)dims[d], d + 1 < nd ? ", " : "");
        printf(")\n");
    }
    printf("outputs:\n");
    for (int i = 0; i < kiln_onnx_output_count(m); i++) printf("  %s\n", kiln_onnx_output_name(m, i));
    int rc = 0;
    if (o->graph || (!o->kernels && !o->source)) {
        char *t = kiln_graph_text(g);
        if (t) printf("%s", t);
        free(t);
    }
    if (o->kernels || o->source) {
        kiln_status st;
        kiln_program *p = kiln_compile(g, NULL, &st);
        if (!p) rc = err1(cmd, "%s (%s)", kiln_graph_error(g), kiln_status_name(st));
        else {
            if (o->kernels) {
                char *k = kiln_program_kernels(p);
                if (k) printf("%s", k);
                free(k);
            }
            if (o->source) printf("%s", kiln_program_source(p));
            kiln_program_free(p);
        }
    }
    kiln_onnx_free(m);
    return rc;
}

int kiln_onnx_cli(const char *cmd, int argc, char **argv) {
    opts o;
    int rc = parse(cmd, argc, argv, &o);
    if (!rc) {
        if (!strcmp(cmd, "run")) rc = onnx_run(cmd, &o);
        else if (!strcmp(cmd, "bench")) rc = onnx_bench(cmd, &o);
        else rc = onnx_explain(cmd, &o);
    }
    free_opts(&o);
    return rc;
}
