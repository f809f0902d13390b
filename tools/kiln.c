/* kiln.c — the kiln command line.
 *
 *   kiln graph --example NAME [--dot]   build an example graph through the public
 *                                       API and print it as text (or DOT)
 *   kiln graph --list                   the example names
 *   kiln explain --example NAME [--graph] [--egraph] [--optimized] [--json]
 *                [--kernels] [--source]  what the compiler decided for a graph
 *   kiln device [--json]                hardware fingerprint and measured peaks
 *   kiln run -m MODEL.gguf -p PROMPT [...]
 *                                       generate text with a GGUF language model
 *   kiln bench -m MODEL.gguf [-p 512] [-n 128] [-d 0] [-t 1,2] [-r 5] [--json]
 *                                       prompt/generation throughput table
 *   kiln tune [--show [--json]] [--export F | --import F]
 *             [-m MODEL.gguf [--budget S] [-t N]] | --space
 *                                       the tuning DB's winners; tune a model
 *   kiln --help | --version
 *
 * Exit status: 0 success; 1 the library reported an error (bad model file,
 * unsupported architecture or tensor type, failed compile); 2 usage errors
 * (unknown flags, bad flag values) and subcommands that do not exist yet (so
 * scripts never mistake them for work that was done). Messages for people go
 * to stderr, one line per error; results (graphs, generated text, tables,
 * JSON) go to stdout. Graphs use the public API (kiln.h, kiln_compile.h);
 * run and bench use the model layer (src/model: model.h, tokenizer.h,
 * sampler.h), which is not installed as public API yet.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "gpu.h"
#include "kiln.h"
#include "kiln_compile.h"
#include "autotune.h"
#include "kiln_cli.h"
#include "model.h"
#include "sampler.h"
#include "tokenizer.h"
#include "tokenizer_gguf.h"
#include "tunedb.h"

#define KILN_CLI_VERSION "0.1.0-dev"
#ifndef KILN_COMMIT /* the Makefile passes git's short commit */
#define KILN_COMMIT "unknown"
#endif

/* ---- example graphs ----------------------------------------------------- */

/* an example builder reports failure only through the graph's sticky error */
typedef void (*example_fn)(kiln_graph *g);

static void ex_softmax(kiln_graph *g) {
    kiln_tensor x = kiln_input(g, "logits", KILN_F32, "seq, 64"); /* (seq, 64) */
    kiln_output(g, kiln_softmax(g, x, 1), "probs");
}

static void ex_rmsnorm(kiln_graph *g) {
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "seq, 64");  /* (seq, 64) */
    kiln_tensor w = kiln_input(g, "weight", KILN_F32, "64");  /* (64) */
    kiln_output(g, kiln_rmsnorm(g, x, w, 1e-6), "y");
}

static void ex_mlp(kiln_graph *g) {
    kiln_tensor x = kiln_input(g, "x", KILN_F32, "seq, 64");        /* (seq, 64) */
    kiln_tensor w1 = kiln_input(g, "w1", KILN_F32, "256, 64");      /* (out, in), as in GGUF */
    kiln_tensor b1 = kiln_input(g, "b1", KILN_F32, "256");
    kiln_tensor w2 = kiln_input(g, "w2", KILN_F32, "64, 256");
    kiln_tensor h = kiln_gelu_tanh(g, kiln_linear(g, x, w1, b1));   /* (seq, 256) */
    kiln_output(g, kiln_linear(g, h, w2, KILN_NONE), "y");          /* (seq, 64) */
}

static void ex_attention(kiln_graph *g) {
    /* grouped-query attention: 8 query heads share 2 key/value heads; the new
     * tokens (seq of them) follow `pos` cached ones */
    kiln_tensor q = kiln_input(g, "q", KILN_F32, "seq, 8, 64");      /* (seq, hq, d) */
    kiln_tensor k = kiln_input(g, "k", KILN_F32, "pos+seq, 2, 64");  /* (kv_len, hkv, d) */
    kiln_tensor v = kiln_input(g, "v", KILN_F32, "pos+seq, 2, 64");
    kiln_sym pos = kiln_sym_var(g, "pos");
    kiln_output(g, kiln_attention(g, q, k, v, pos, 0.125, 0), "out"); /* 1/sqrt(64) */
}

static const struct example {
    const char *name;
    const char *what;
    example_fn build;
} examples[] = {
    {"softmax", "softmax over the last axis of a (seq, 64) input", ex_softmax},
    {"mlp", "two linear layers with a tanh-GELU between them", ex_mlp},
    {"attention", "causal grouped-query attention over a symbolic seq and pos", ex_attention},
    {"rmsnorm", "RMS normalisation with a learned weight", ex_rmsnorm},
};
#define NEXAMPLES (sizeof examples / sizeof examples[0])

/* ---- usage -------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: kiln <command> [options]\n"
            "\n"
            "kiln is a search-based ML compiler and inference runtime.\n"
            "\n"
            "commands:\n"
            "  graph --example NAME [--dot]  print an example graph (text or Graphviz DOT)\n"
            "  graph --list                  list the example graphs\n"
            "  run     -m MODEL.gguf -p PROMPT   generate text (see 'kiln run --help')\n"
            "  bench   -m MODEL.gguf [-p 512] [-n 128] [-d 0] [-t 1,2] [-r 5] [--json]\n"
            "                                prompt-processing and generation tokens/s\n"
            "  serve   -m MODEL.gguf [--port 8080] [--parallel N]\n"
            "                                an OpenAI-compatible HTTP server (see 'kiln serve --help')\n"
            "  perplexity -m MODEL.gguf -f TEXT [-c 512] [--kl-divergence-base F [--kl-divergence]]\n"
            "                                perplexity and KL divergence, as llama-perplexity\n"
            "  tune    [--show [--json]] [--export F | --import F] [-m MODEL.gguf [--budget S]]\n"
            "                                the tuning DB's winning schedules; with -m, search\n"
            "                                a model's kernels first\n"
            "  explain (--example NAME | -m MODEL.gguf) [--graph] [--egraph] [--optimized] [--json]\n"
            "          [--kernels] [--source]\n"
            "                                show what the compiler decided (e-graph run,\n"
            "                                extracted graph, kernels, generated C) for an\n"
            "                                example graph or a GGUF model\n"
            "  run|bench|explain -m MODEL.onnx  ONNX models: run --input NAME=F.npy [--output-dir D],\n"
            "                                bench [--dim NAME=N] [-t 1,2] [-r 20], explain [--kernels]\n"
            "  device [--json]               hardware fingerprint and measured peaks; every\n"
            "                                backend's devices with their fingerprints\n"
            "\n"
            "options:\n"
            "  --backend cpu|opencl|cuda  where compiled code runs (any command; default cpu,\n"
            "                  or $KILN_BACKEND); GPU backends load their driver at run time\n"
            "  --exact         kiln's exact evaluation (run, bench, perplexity): f32 contractions,\n"
            "                  no tuning DB, no schedule search\n"
            "  -h, --help      this text\n"
            "  --version       print the version\n");
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "kiln: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(try 'kiln --help')\n");
    return 2;
}

/* ---- graph -------------------------------------------------------------- */

/* the named example graph, or NULL with *rc set (2 unknown name, 1 build error) */
static kiln_graph *build_example(const char *cmd, const char *name, int *rc) {
    const struct example *ex = NULL;
    for (size_t i = 0; i < NEXAMPLES; i++)
        if (strcmp(examples[i].name, name) == 0) ex = &examples[i];
    if (!ex) {
        fprintf(stderr, "kiln: %s: unknown example '%s'; the examples are:", cmd, name);
        for (size_t i = 0; i < NEXAMPLES; i++) fprintf(stderr, " %s", examples[i].name);
        fprintf(stderr, "\n");
        *rc = 2;
        return NULL;
    }
    kiln_graph *g = kiln_graph_new();
    if (!g) {
        fprintf(stderr, "kiln: out of memory\n");
        *rc = 1;
        return NULL;
    }
    ex->build(g);
    if (kiln_graph_status(g) != KILN_OK) {
        fprintf(stderr, "kiln: %s: building '%s' failed: %s: %s\n", cmd, name,
                kiln_status_name(kiln_graph_status(g)), kiln_graph_error(g));
        kiln_graph_free(g);
        *rc = 1;
        return NULL;
    }
    return g;
}

/* print a malloc'd string and free it; 1 if it is NULL */
static int put_text(const char *cmd, const char *what, char *text) {
    if (!text) {
        fprintf(stderr, "kiln: %s: could not produce the %s\n", cmd, what);
        return 1;
    }
    fputs(text, stdout);
    free(text);
    return 0;
}

static int cmd_graph(int argc, char **argv) {
    const char *name = NULL;
    int dot = 0, list = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--example") == 0) {
            if (i + 1 >= argc) return usage_error("graph: %s needs a name", a);
            name = argv[++i];
        } else if (strncmp(a, "--example=", 10) == 0) {
            name = a + 10;
        } else if (strcmp(a, "--dot") == 0) {
            dot = 1;
        } else if (strcmp(a, "--list") == 0) {
            list = 1;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("usage: kiln graph --example NAME [--dot] | kiln graph --list\n");
            return 0;
        } else {
            return usage_error("graph: unknown option '%s'", a);
        }
    }
    if (list) {
        for (size_t i = 0; i < NEXAMPLES; i++) printf("%-10s %s\n", examples[i].name, examples[i].what);
        return 0;
    }
    if (!name) return usage_error("graph: %s", "which graph? use --example NAME or --list");

    int rc = 0;
    kiln_graph *g = build_example("graph", name, &rc);
    if (!g) return rc;
    char *text = dot ? kiln_graph_dot(g) : kiln_graph_text(g);
    if (!text) {
        fprintf(stderr, "kiln: graph: could not print the graph\n");
        rc = 1;
    } else {
        fputs(text, stdout);
        free(text);
    }
    kiln_graph_free(g);
    if (fflush(stdout) != 0) rc = 1;
    return rc;
}

/* ---- explain ------------------------------------------------------------ */

static int cmd_explain(int argc, char **argv) {
    const char *name = NULL, *model_path = NULL;
    int show_graph = 0, show_egraph = 0, show_opt = 0, json = 0, show_kernels = 0, show_source = 0, threads = 0;
    kiln_dtype kv_type = KILN_F32;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            char *end = NULL;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || !end || *end || v < 1 || v > 1024)
                return usage_error("explain: %s needs a thread count from 1 to 1024", a);
            threads = (int)v;
            i++;
        } else if (strcmp(a, "--example") == 0) {
            if (i + 1 >= argc) return usage_error("explain: %s needs a name", a);
            name = argv[++i];
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            if (i + 1 >= argc) return usage_error("explain: %s needs a GGUF file", a);
            model_path = argv[++i];
        } else if (strcmp(a, "--graph") == 0) {
            show_graph = 1;
        } else if (strcmp(a, "--egraph") == 0) {
            show_egraph = 1;
        } else if (strcmp(a, "--optimized") == 0) {
            show_opt = 1;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--kernels") == 0) {
            show_kernels = 1;
        } else if (strcmp(a, "--source") == 0) {
            show_source = 1;
        } else if (strcmp(a, "--kv-type") == 0) {
            if (i + 1 >= argc || (strcmp(argv[i + 1], "f16") && strcmp(argv[i + 1], "f32")))
                return usage_error("explain: %s needs f16 or f32", a);
            kv_type = strcmp(argv[++i], "f16") == 0 ? KILN_F16 : KILN_F32;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("usage: kiln explain (--example NAME | -m MODEL.gguf) [--graph] [--egraph] [--optimized] [--json]\n"
                   "                    [--kernels] [--source] [-t N] [--kv-type f32|f16]\n"
                   "  --graph      the graph as built\n"
                   "  --egraph     the e-graph run: classes, nodes, iterations, time, stop reason, rule firings\n"
                   "  --optimized  the graph extracted after saturation\n"
                   "  --json       the e-graph report as JSON\n"
                   "  --kernels    the compiled kernels: inputs, outputs, fused ops, loop nests\n"
                   "  --source     the generated C\n"
                   "  -t N         compile for N threads (default: every core): the schedules and the\n"
                   "               attention forms measured for that thread count\n"
                   "  --kv-type T  the KV cache's type the model is built with, as run and bench take it\n"
                   "with no selection, --egraph is shown\n");
            return 0;
        } else {
            return usage_error("explain: unknown option '%s'", a);
        }
    }
    if (!name && !model_path)
        return usage_error("explain: %s", "which graph? use --example NAME (see 'kiln graph --list') or -m MODEL.gguf");
    if (name && model_path) return usage_error("explain: %s", "--example and -m exclude each other");
    if (!show_graph && !show_opt && !show_kernels && !show_source) show_egraph = 1;
    if (json && (show_graph || show_opt || show_kernels || show_source)) return usage_error("explain: %s", "--json goes with --egraph alone");
    int rc = 0;
    model *m = NULL;
    kiln_graph *g = NULL;
    if (model_path) {
        /* the model's graph as the loader builds it (weights bound, sizes
         * symbolic); the interpreter mode compiles nothing at load */
        model_options mo = model_default_options();
        mo.compiled = 0;
        mo.kv_dtype = kv_type;
        char err[512];
        if (model_load_ex(model_path, &mo, &m, err, sizeof err) != KILN_OK) {
            fprintf(stderr, "kiln explain: %s\n", err);
            return 1;
        }
        g = model_graph(m);
    } else {
        g = build_example("explain", name, &rc);
        if (!g) return rc;
    }
    if (show_graph) rc |= put_text("explain", "graph text", kiln_graph_text(g));
    if (show_egraph) rc |= put_text("explain", "e-graph report", kiln_graph_egraph_report(g, json));
    if (show_opt) {
        kiln_graph *o = kiln_graph_optimize(g);
        if (!o) {
            fprintf(stderr, "kiln explain: optimising failed: %s\n", kiln_graph_error(g));
            rc = 1;
        } else {
            rc |= put_text("explain", "extracted graph", kiln_graph_text(o));
            kiln_graph_free(o);
        }
    }
    if (show_kernels || show_source) {
        kiln_status st = KILN_OK;
        kiln_compile_options co = kiln_compile_defaults();
        if (threads > 0) co.threads = threads;
        if (model_path && co.stream < 0) co.stream = 2; /* as a model is compiled: both attention forms */
        kiln_program *p = kiln_compile(g, &co, &st);
        if (!p) {
            fprintf(stderr, "kiln explain: compiling failed: %s: %s\n", kiln_status_name(st), kiln_graph_error(g));
            rc = 1;
        } else {
            if (show_kernels) rc |= put_text("explain", "kernel list", kiln_program_kernels(p));
            if (show_kernels) rc |= put_text("explain", "attention forms", kiln_program_forms(p));
            if (show_source) {
                const char *src = kiln_program_source(p);
                if (src) fputs(src, stdout);
                else rc = 1;
            }
            kiln_program_free(p);
        }
    }
    if (m) model_free(m);
    else kiln_graph_free(g);
    if (fflush(stdout) != 0) rc = 1;
    return rc;
}

/* ---- device ------------------------------------------------------------- */

static int cmd_device(int argc, char **argv) {
    int json = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: kiln device [--json]\n"
                   "the hardware fingerprint (CPU, ISA flags, cores, caches, compiler) and measured\n"
                   "peaks: read bandwidth per thread count from DRAM (a buffer of at least 4x the\n"
                   "last-level cache) and from cache (half of it), FP32 FMA, int8 dot product, the\n"
                   "AMX tiles' int8 and bf16 rates where the CPU has them, and the fastest int8 unit\n");
            return 0;
        } else return usage_error("device: unknown option '%s'", argv[i]);
    }
    if (!json && isatty(2)) fprintf(stderr, "kiln device: measuring peaks (a few seconds) ...\n");
    return put_text("device", "device report", kiln_device_report(json));
}

/* ---- shared by run and bench -------------------------------------------- */

static double now_s(void) { return kiln_now_s(); /* src/base/clock.c */ }

/* one line on stderr and the usage exit status; the hint is on the same line
 * so that scripts and people see a single clear message */
static int cmd_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kiln %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'kiln %s --help')\n", cmd);
    va_end(ap);
    return 2;
}

/* a whole-string integer in [lo, hi]; 0 on success */
static int parse_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-' || *s == '+') return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || end == s) return -1;
    *out = (uint64_t)v;
    return 0;
}

/* a whole-string finite number in [lo, hi]; 0 on success */
static int parse_num(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return -1;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* a comma-separated list of integers in [lo, hi] (at most cap); its length, or -1 */
static int parse_int_list(const char *s, long long lo, long long hi, long long *out, int cap) {
    int n = 0;
    char buf[256];
    if (!s || strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    char *p = buf;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        if (n >= cap || parse_int(p, lo, hi, &out[n])) return -1;
        n++;
        if (!comma) break;
        p = comma + 1;
    }
    return n;
}

/* The value of option argv[*i] ("--flag value" or "--flag=value"): NULL and
 * *missing set when there is none. name is the flag without "=...". */
static const char *opt_value(int argc, char **argv, int *i, const char *eq, int *missing) {
    *missing = 0;
    if (eq) return eq + 1;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

/* A ticker on stderr while a long step (load + compile) runs: nothing for the
 * first second, then (on a terminal) the elapsed seconds on one rewritten
 * line, or (otherwise) a single line saying what is going on. */
typedef struct ticker {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, running, tty;
    const char *what;
    double t0;
    char stage[64];  /* the compile's stage (kiln_set_compile_observer), "" before the first */
    int compiled;    /* units the C compiler built (0: every one came from the cache) */
    int cached;      /* compiled code found in the kernel cache */
} ticker;

/* the compile observer while a ticker runs: the stage it shows */
static void ticker_stage(void *ctx, const char *stage, int done, int total) {
    ticker *tk = ctx;
    pthread_mutex_lock(&tk->mu);
    if (strcmp(stage, "cc") == 0) {
        snprintf(tk->stage, sizeof tk->stage, "cc: %s%d unit%s of C", done < total ? "building " : "built ", total,
                 total == 1 ? "" : "s");
        if (done == total) tk->compiled += total;
    } else if (strcmp(stage, "cached") == 0) {
        snprintf(tk->stage, sizeof tk->stage, "compiled code from the cache");
        tk->cached = 1;
    } else {
        snprintf(tk->stage, sizeof tk->stage, "%s", stage);
    }
    pthread_mutex_unlock(&tk->mu);
}

static void *ticker_main(void *arg) {
    ticker *tk = arg;
    int printed = 0;
    pthread_mutex_lock(&tk->mu);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 1;
    while (!tk->done) {
        int rc = pthread_cond_timedwait(&tk->cv, &tk->mu, &dl);
        if (tk->done) break;
        if (rc != ETIMEDOUT) continue;
        if (tk->tty) {
            fprintf(stderr, "\r\033[K%s ... %s%s%.0f s", tk->what, tk->stage, tk->stage[0] ? ", " : "",
                    now_s() - tk->t0);
            printed = 1;
        } else if (!printed) {
            fprintf(stderr, "%s ...\n", tk->what);
            printed = 1;
        }
        fflush(stderr);
        dl.tv_sec += 1;
    }
    if (printed && tk->tty) fprintf(stderr, "\r\033[K");
    pthread_mutex_unlock(&tk->mu);
    return NULL;
}

static void ticker_start(ticker *tk, const char *what) {
    memset(tk, 0, sizeof *tk);
    tk->what = what;
    tk->t0 = now_s();
    tk->tty = isatty(2);
    pthread_mutex_init(&tk->mu, NULL);
    pthread_cond_init(&tk->cv, NULL);
    kiln_set_compile_observer(ticker_stage, tk);
    tk->running = pthread_create(&tk->th, NULL, ticker_main, tk) == 0;
}

static void ticker_stop(ticker *tk) {
    kiln_set_compile_observer(NULL, NULL);
    if (tk->running) {
        pthread_mutex_lock(&tk->mu);
        tk->done = 1;
        pthread_cond_signal(&tk->cv);
        pthread_mutex_unlock(&tk->mu);
        pthread_join(tk->th, NULL);
    }
    pthread_cond_destroy(&tk->cv);
    pthread_mutex_destroy(&tk->mu);
}

static int online_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

/* load (and compile unless interp) with a ticker; n_ctx: cache rows (0: the
 * model's default; < 0: at least -n_ctx, the default when that holds them).
 * Prints the error and
 * returns NULL on failure */
/* the KV cache's dtype: --kv-type of run and bench (default f32) */
static kiln_dtype cli_kv_type = KILN_F32;

/* --kv-type's value: 0 when it names f16 or f32 */
static int parse_kv_type(const char *v) {
    if (strcmp(v, "f16") == 0) cli_kv_type = KILN_F16;
    else if (strcmp(v, "f32") == 0) cli_kv_type = KILN_F32;
    else return 1;
    return 0;
}

static model *load_model(const char *cmd, const char *path, int64_t n_ctx, int mmap_file, int interp, int threads,
                         double *secs) {
    model_options o = model_default_options();
    o.kv_dtype = cli_kv_type;
    /* n_ctx < 0: at least -n_ctx rows, the model's default when that holds them */
    o.n_ctx = n_ctx > 0 ? n_ctx : 0;
    o.n_ctx_min = n_ctx < 0 ? -n_ctx : 0;
    o.gguf_flags = mmap_file ? 0u : (unsigned)GGUF_OPEN_READ;
    o.compiled = !interp;
    o.threads = threads;
    char what[160];
    snprintf(what, sizeof what, "kiln %s: %s the model%s", cmd, interp ? "loading" : "loading and compiling",
             interp ? "" : " (the first compile of a model takes a while; later runs reuse the cache)");
    ticker tk;
    double t0 = now_s();
    ticker_start(&tk, what);
    model *m = NULL;
    char err[1024];
    kiln_status st = model_load_ex(path, &o, &m, err, sizeof err);
    ticker_stop(&tk);
    *secs = now_s() - t0;
    if (st != KILN_OK) {
        /* the reader's messages already name the file; others get it prefixed */
        if (err[0] && strstr(err, path)) fprintf(stderr, "kiln %s: %s\n", cmd, err);
        else fprintf(stderr, "kiln %s: %s: %s\n", cmd, path, err[0] ? err : kiln_status_name(st));
        return NULL;
    }
    /* why it took long: the compiled code is cached by its source, which is
     * a function of the model, the schedules and kiln (not the context length) */
    if (tk.compiled)
        fprintf(stderr,
                "kiln %s: compiled the kernels (%d unit%s of C): the kernel cache had no code for this model "
                "with these schedules and this kiln build\n",
                cmd, tk.compiled, tk.compiled == 1 ? "" : "s");
    return m;
}

/* the first-run schedule search (below, with kiln tune's) */
static int first_run_search(const char *cmd, model *m, int no_tune);
static double first_run_budget(void);

/* the CPU's model name (/proc/cpuinfo), or "unknown" */
static void cpu_model(char *out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        c[strcspn(c, "\n")] = 0;
        snprintf(out, cap, "%s", c);
        break;
    }
    fclose(f);
}

/* total weight bytes and parameters of the file's tensors */
static void model_size(gguf_file *f, uint64_t *bytes, uint64_t *params) {
    *bytes = *params = 0;
    for (int64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        *bytes += t->bytes;
        *params += (uint64_t)t->numel;
    }
}

/* llama.cpp's names of general.file_type values */
static const char *file_type_name(int64_t ft) {
    switch (ft) {
    case 0: return "all F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K - Medium";
    case 11: return "Q3_K - Small";
    case 12: return "Q3_K - Medium";
    case 13: return "Q3_K - Large";
    case 14: return "Q4_K - Small";
    case 15: return "Q4_K - Medium";
    case 16: return "Q5_K - Small";
    case 17: return "Q5_K - Medium";
    case 18: return "Q6_K";
    case 32: return "BF16";
    default: return NULL;
    }
}

/* "gemma3 270M Q4_K - Medium": architecture, size label, file type (or the
 * type holding most of the bytes) */
static void model_desc(gguf_file *f, const arch_hparams *hp, char *out, size_t cap) {
    gguf_str label = {"", 0};
    if (gguf_find(f, "general.size_label") && gguf_get_str(f, "general.size_label", &label)) label.len = 0;
    if (label.len > 32) label.len = 32;
    int64_t ft = -1;
    const char *type = NULL;
    if (gguf_get_int_or(f, "general.file_type", 0, 1 << 20, -1, &ft) == KILN_OK) type = file_type_name(ft);
    if (!type) {
        uint64_t best = 0;
        for (int64_t i = 0; i < gguf_tensor_count(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            uint64_t sum = 0;
            for (int64_t j = 0; j < gguf_tensor_count(f); j++)
                if (gguf_tensor_at(f, j)->ggml_type == t->ggml_type) sum += gguf_tensor_at(f, j)->bytes;
            if (sum > best) best = sum, type = gguf_ggml_type_name(t->ggml_type);
        }
    }
    int printable = 1;
    for (uint64_t i = 0; i < label.len; i++)
        if ((unsigned char)label.ptr[i] < 0x20 || (unsigned char)label.ptr[i] > 0x7e) printable = 0;
    if (!printable) label.len = 0;
    snprintf(out, cap, "%s%s%.*s %s", hp->name, label.len ? " " : "", (int)label.len, label.ptr, type ? type : "?");
}

static void human_bytes(uint64_t b, char *out, size_t cap) {
    if (b >= (1ull << 30)) snprintf(out, cap, "%.2f GiB", (double)b / (double)(1ull << 30));
    else snprintf(out, cap, "%.2f MiB", (double)b / (double)(1ull << 20));
}

static void human_count(uint64_t n, char *out, size_t cap) {
    if (n >= 1000000000ull) snprintf(out, cap, "%.2f B", (double)n / 1e9);
    else if (n >= 1000000ull) snprintf(out, cap, "%.2f M", (double)n / 1e6);
    else snprintf(out, cap, "%.2f K", (double)n / 1e3);
}

/* a JSON string (text is valid UTF-8 or any bytes: control and non-ASCII
 * bytes that are not part of valid UTF-8 are escaped as \u00XX) */
static void json_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* 64 random bits for an unseeded run: /dev/urandom, else the clock and pid */
static uint64_t random_seed(void) {
    uint64_t s = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&s, sizeof s, 1, f) != 1) s = 0;
        fclose(f);
    }
    if (!s) s = (uint64_t)(now_s() * 1e9) ^ ((uint64_t)getpid() << 32);
    /* keep it printable and re-typeable as a plain decimal */
    return s % 1000000000000ull;
}

/* ---- run ---------------------------------------------------------------- */

typedef struct run_opts {
    const char *model, *prompt, *prompt_file, *sys, *chat_template;
    long long n_predict, threads, top_k, n_ctx, repeat_last_n;
    double temp, top_p, min_p, repeat_penalty;
    uint64_t seed;
    int seed_set, chat, interp, use_mmap, json, echo, no_tune, interactive;
} run_opts;

static void run_help(void) {
    printf("usage: kiln run -m MODEL.gguf -p PROMPT [options]\n"
           "generate text: the prompt is prefilled in one batched forward pass, then tokens\n"
           "are decoded one at a time and streamed to stdout; statistics go to stderr.\n"
           "  -m, --model FILE        GGUF model\n"
           "  -p, --prompt TEXT       the prompt\n"
           "  -n, --n-predict N       tokens to generate at most (default 64; stops early at\n"
           "                          end-of-generation tokens)\n"
           "  -t, --threads N         worker threads (default: online cores)\n"
           "  --temp X                temperature; 0 = greedy (default 0.8)\n"
           "  --top-k K               keep the K most likely tokens; 0 = off (default 40)\n"
           "  --top-p P               nucleus sampling; 1 = off (default 0.95)\n"
           "  --min-p P               drop tokens below P x the best; 0 = off (default 0.05)\n"
           "  --repeat-penalty R      penalise recent tokens; 1 = off (default 1.0)\n"
           "  --repeat-last-n N       how many recent tokens the penalty sees (default 64)\n"
           "  -s, --seed S            sampling seed (default: random, printed)\n"
           "  -f, --file FILE         read the prompt from FILE\n"
           "  --chat                  wrap the prompt in the model's chat template (its\n"
           "                          tokenizer.chat_template; a warning and a built-in\n"
           "                          format guessed from the vocabulary when it has none)\n"
           "  --chat-template NAME    use the built-in format NAME: gemma, chatml, llama3, llama2\n"
           "  -sys, --system TEXT     the system message (implies --chat)\n"
           "  -i, --interactive       with --chat: a conversation, one user turn per line on\n"
           "                          stdin (an empty line or end of input ends it)\n"
           "  -c, --ctx N             context (KV cache) length (default: min(training, 4096))\n"
           "  --kv-type T             the KV cache's type: f32 (default) or f16 (half the\n"
           "                          memory; --exact keeps f32)\n"
           "  --mmap                  map the file instead of reading it into memory\n"
           "  --interp                run the reference interpreter instead of compiled code\n"
           "  --no-tune               no schedule search on a model's first run on this machine\n"
           "                          (else up to 30 s, or $KILN_TUNE seconds; KILN_TUNE=0 is off)\n"
           "  --echo                  print the prompt on stdout before the generated text\n"
           "                          (after the loading lines on stderr, so a terminal\n"
           "                          shows them apart)\n"
           "  --json                  no streaming: print one JSON object (text, token ids,\n"
           "                          timings) on stdout\n");
}

/* parse run's flags; 0 ok, else the exit status (help: -1) */
static int run_parse(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = 64;
    o->threads = online_cores();
    o->temp = 0.8;
    o->top_k = 40;
    o->top_p = 0.95;
    o->min_p = 0.05;
    o->repeat_penalty = 1.0;
    o->repeat_last_n = 64;
    for (int i = 0; i < argc; i++) {
        char flag[64];
        const char *a = argv[i], *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t fl = eq ? (size_t)(eq - a) : strlen(a);
        if (fl >= sizeof flag) return cmd_usage_error("run", "unknown option '%s'", a);
        memcpy(flag, a, fl);
        flag[fl] = 0;
#define IS(s) (strcmp(flag, s) == 0)
        int missing = 0;
        const char *v = NULL;
        if (IS("-h") || IS("--help")) {
            run_help();
            return -1;
        }
        if (IS("--chat") || IS("--interp") || IS("--mmap") || IS("--json") || IS("--echo") || IS("--no-tune") ||
            IS("-i") || IS("--interactive")) {
            if (eq) return cmd_usage_error("run", "%s takes no value", flag);
            if (IS("--chat")) o->chat = 1;
            else if (IS("-i") || IS("--interactive")) o->interactive = 1;
            else if (IS("--no-tune")) o->no_tune = 1;
            else if (IS("--interp")) o->interp = 1;
            else if (IS("--mmap")) o->use_mmap = 1;
            else if (IS("--echo")) o->echo = 1;
            else o->json = 1;
            continue;
        }
        static const char *const valued[] = {"-m", "--model", "-p", "--prompt", "-n", "--n-predict", "-t",
                                             "--threads", "--temp", "--top-k", "--top-p", "--min-p",
                                             "--repeat-penalty", "--repeat-last-n", "-s", "--seed", "-c", "--ctx",
                                             "-f", "--file", "-sys", "--system", "--chat-template", "--kv-type"};
        int known = 0;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known |= IS(valued[k]);
        if (!known) return cmd_usage_error("run", "unknown option '%s'", a);
        v = opt_value(argc, argv, &i, eq, &missing);
        if (missing) return cmd_usage_error("run", "%s needs a value", flag);
        int bad = 0;
        const char *want = "";
        if (IS("-m") || IS("--model")) o->model = v;
        else if (IS("-p") || IS("--prompt")) o->prompt = v;
        else if (IS("-f") || IS("--file")) o->prompt_file = v;
        else if (IS("-sys") || IS("--system")) o->sys = v, o->chat = 1;
        else if (IS("--chat-template")) {
            o->chat_template = v, o->chat = 1;
            if (!chat_is_builtin(v)) return cmd_usage_error("run", "unknown chat template '%s' (known: gemma, chatml, llama3, llama2)", v);
        }
        else if (IS("-n") || IS("--n-predict")) bad = parse_int(v, 0, 1 << 30, &o->n_predict), want = "an integer >= 0";
        else if (IS("-t") || IS("--threads")) bad = parse_int(v, 1, 1024, &o->threads), want = "an integer in 1..1024";
        else if (IS("--temp")) bad = parse_num(v, 0, 1e6, &o->temp), want = "a number >= 0";
        else if (IS("--top-k")) bad = parse_int(v, 0, INT32_MAX, &o->top_k), want = "an integer >= 0";
        else if (IS("--top-p")) bad = parse_num(v, 0, 1, &o->top_p), want = "a number in [0, 1]";
        else if (IS("--min-p")) bad = parse_num(v, 0, 1, &o->min_p), want = "a number in [0, 1]";
        else if (IS("--repeat-penalty")) bad = parse_num(v, 1e-6, 1e6, &o->repeat_penalty), want = "a number > 0";
        else if (IS("--repeat-last-n"))
            bad = parse_int(v, 0, 1 << 20, &o->repeat_last_n), want = "an integer >= 0";
        else if (IS("-s") || IS("--seed")) bad = parse_u64(v, &o->seed), o->seed_set = 1, want = "an integer >= 0";
        else if (IS("-c") || IS("--ctx")) bad = parse_int(v, 1, 1 << 24, &o->n_ctx), want = "an integer >= 1";
        else if (IS("--kv-type")) bad = parse_kv_type(v), want = "f16 or f32";
#undef IS
        if (bad) return cmd_usage_error("run", "bad value '%s' for %s: want %s", v, flag, want);
    }
    if (!o->model) return cmd_usage_error("run", "which model? give -m MODEL.gguf");
    if (o->prompt && o->prompt_file) return cmd_usage_error("run", "give -p TEXT or -f FILE, not both");
    if (o->interactive && !o->chat) return cmd_usage_error("run", "-i is a conversation: give --chat too");
    if (o->interactive && o->json) return cmd_usage_error("run", "-i prints as it goes: no --json");
    if (!o->prompt && !o->prompt_file && !o->interactive)
        return cmd_usage_error("run", "no prompt: give -p TEXT or -f FILE");
    return 0;
}

/* fwrite that remembers a failure (closed pipe, full disk) */
static int out_write(const char *s, size_t n, int *failed) {
    if (n && fwrite(s, 1, n, stdout) != n) *failed = 1;
    return *failed;
}

static void run_sampler_params(const run_opts *o, sampler_params *sp) {
    sampler_params_init(sp);
    sp->temperature = (float)o->temp;
    sp->top_k = (int32_t)o->top_k;
    sp->top_p = (float)o->top_p;
    sp->min_p = (float)o->min_p;
    sp->repeat_penalty = (float)o->repeat_penalty;
    sp->repeat_last_n = (int32_t)o->repeat_last_n;
    sp->seed = o->seed;
}

static int cmd_run(int argc, char **argv) {
    run_opts o;
    int rc = run_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if (!o.seed_set) o.seed = random_seed();
    char *file_text = NULL;
    if (o.prompt_file && !(o.prompt = file_text = kiln_cli_read_text("run", o.prompt_file))) return 1;

    double load_s = 0;
    model *m = load_model("run", o.model, (int64_t)o.n_ctx, o.use_mmap, o.interp, (int)o.threads, &load_s);
    if (!m) {
        free(file_text);
        return 1;
    }
    if (first_run_search("run", m, o.no_tune)) {
        model_free(m);
        free(file_text);
        return 1;
    }
    kiln_cli_print_arith("run", m);
    const arch_hparams *hp = model_hparams(m);
    gguf_file *f = model_gguf(m);
    char err[1024];
    tokenizer *tk = NULL;
    if (tok_from_gguf(f, &tk, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "kiln run: %s: %s\n", o.model, err);
        model_free(m);
        free(file_text);
        return 1;
    }
    if (tok_n_vocab(tk) > model_n_vocab(m)) {
        fprintf(stderr, "kiln run: %s: the tokenizer has %d tokens but the model only %lld embeddings\n", o.model,
                (int)tok_n_vocab(tk), (long long)model_n_vocab(m));
        tok_free(tk);
        model_free(m);
        free(file_text);
        return 1;
    }
    char desc[160], size[32];
    uint64_t bytes, params;
    model_size(f, &bytes, &params);
    model_desc(f, hp, desc, sizeof desc);
    human_bytes(bytes, size, sizeof size);
    char how[64];
    if (o.interp) snprintf(how, sizeof how, "loaded in %.2f s (reference interpreter)", load_s);
    else snprintf(how, sizeof how, "loaded and compiled in %.2f s (%lld thread%s)", load_s, o.threads,
                  o.threads == 1 ? "" : "s");
    fprintf(stderr, "kiln run: %s, %s, %lld layers, vocab %lld, context %lld; %s\n", desc, size,
            (long long)hp->n_layer, (long long)model_n_vocab(m), (long long)model_n_ctx(m), how);
    if (o.interactive) { /* a conversation on stdin (chat_loop.c) */
        sampler_params isp;
        run_sampler_params(&o, &isp);
        kiln_cli_chat_announce("run", f, o.chat_template);
        rc = kiln_cli_chat_loop(m, tk, o.chat_template, o.sys, o.prompt, &isp, o.n_predict);
        free(file_text);
        tok_free(tk);
        model_free(m);
        return rc;
    }

    /* the prompt, rendered with the chat template when --chat; special tokens
     * are parsed only in templated text */
    const char *text = o.prompt;
    char *wrapped = NULL;
    if (o.chat) {
        kiln_cli_chat_announce("run", f, o.chat_template);
        chat_msg msgs[2];
        int n_msgs = 0;
        if (o.sys) msgs[n_msgs++] = (chat_msg){"system", o.sys};
        msgs[n_msgs++] = (chat_msg){"user", o.prompt};
        wrapped = kiln_cli_chat_text("run", f, o.chat_template, msgs, n_msgs);
        if (!wrapped) {
            free(file_text);
            tok_free(tk);
            model_free(m);
            return 1;
        }
        text = wrapped;
    }
    int32_t *ptoks = NULL;
    int n_prompt = kiln_cli_encode(tk, text, o.chat, &ptoks);
    free(wrapped);
    rc = 0;
    if (n_prompt <= 0) {
        fprintf(stderr, "kiln run: the prompt is %s\n", n_prompt < 0 ? "too long" : "empty (and the model adds no BOS)");
        rc = 1;
    } else if (n_prompt >= model_n_ctx(m)) {
        fprintf(stderr, "kiln run: the prompt has %d tokens, which leaves no room to generate in a context of %lld"
                        " (use --ctx)\n",
                n_prompt, (long long)model_n_ctx(m));
        rc = 1;
    }
    sampler_params sp;
    run_sampler_params(&o, &sp);
    sampler *smp = NULL;
    if (!rc && sampler_new(&sp, (int32_t)model_n_vocab(m), &smp, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "kiln run: %s\n", err);
        rc = 1;
    }
    if (rc) {
        free(ptoks);
        free(file_text);
        tok_free(tk);
        model_free(m);
        return rc;
    }
    if (o.temp > 0)
        fprintf(stderr, "kiln run: seed %llu, temp %.2f, top-k %lld, top-p %.2f, min-p %.2f, repeat-penalty %.2f\n",
                (unsigned long long)o.seed, o.temp, o.top_k, o.top_p, o.min_p, o.repeat_penalty);
    else fprintf(stderr, "kiln run: seed %llu, greedy (temp 0)\n", (unsigned long long)o.seed);

    long long room = model_n_ctx(m) - n_prompt; /* decode steps that fit after the prompt */
    long long n_max = o.n_predict;
    const char *stop = "length";
    float *logits = kiln_xmalloc((size_t)model_n_vocab(m) * sizeof *logits);
    int32_t *gen = kiln_xmalloc((size_t)(n_max > 0 ? n_max : 1) * sizeof *gen);
    char *textbuf = NULL;
    size_t textlen = 0, textcap = 0;
    int n_gen = 0, n_decode = 0, out_failed = 0;
    double t_prompt = 0, t_gen = 0;

    /* the first run of a program builds the copies of the weights its
     * schedules read (runtime/repack.h: the decode step's interleaved
     * copies, ~0.2 s for gemma3-270m; the prompt's packed strips) and
     * touches its buffers for the first time: an untimed decode step, and
     * for a prompt of more than 4 tokens an untimed prefill of up to 8 of
     * its tokens, do that now, as llama.cpp repacks its weights at load.
     * Every cache position they write is written again before any step
     * reads it (a step writes its own positions before its attention). */
    if (!o.interp && n_prompt > 0) {
        double tw = now_s();
        kiln_status ws = n_max > 1 ? model_forward(m, ptoks, 1, 0, logits) : KILN_OK;
        if (ws == KILN_OK && n_prompt > 4) ws = model_forward(m, ptoks, n_prompt < 8 ? n_prompt : 8, 0, logits);
        if (ws == KILN_OK) fprintf(stderr, "kiln run: prepared the programs in %.2f s (untimed)\n", now_s() - tw);
    }
    for (int i = 0; i < n_prompt; i++) sampler_accept(smp, ptoks[i]);
    double t0 = now_s();
    kiln_status st = model_forward(m, ptoks, n_prompt, 0, logits);
    t_prompt = now_s() - t0;
    tok_stream *ts = tok_stream_new(tk, 0, 0);
    /* the log lines above went to stderr; stdout's text starts after them,
     * and the statistics below start on a line of their own (a terminal
     * shows both streams interleaved) */
    fflush(stderr);
    if (o.echo && !o.json && !out_write(o.prompt, strlen(o.prompt), &out_failed)) fflush(stdout);
    t0 = now_s();
    while (!st && n_gen < n_max) {
        int32_t id = sampler_sample(smp, logits);
        if (id < 0 || id >= tok_n_vocab(tk)) {
            fprintf(stderr, "\nkiln run: the model chose token %d, which the tokenizer does not have\n", id);
            st = KILN_ERR_RANGE;
            break;
        }
        if (tok_is_eog(tk, id)) {
            stop = "eos";
            break;
        }
        sampler_accept(smp, id);
        gen[n_gen++] = id;
        const char *piece;
        size_t plen = 0;
        tok_stream_push(ts, id, &piece, &plen);
        if (o.json) {
            if (textlen + plen + 1 > textcap) {
                textcap = 2 * (textlen + plen + 64);
                textbuf = kiln_xrealloc(textbuf, textcap);
            }
            memcpy(textbuf + textlen, piece, plen);
            textlen += plen;
        } else if (!out_write(piece, plen, &out_failed)) {
            fflush(stdout);
        }
        if (n_gen >= n_max) break;
        if (n_decode >= room) {
            stop = "context";
            break;
        }
        st = model_forward(m, &id, 1, n_prompt + n_decode, logits);
        n_decode++;
    }
    t_gen = now_s() - t0;
    const char *tail;
    size_t tlen = 0;
    tok_stream_flush(ts, &tail, &tlen);
    if (o.json) {
        if (textlen + tlen + 1 > textcap) textbuf = kiln_xrealloc(textbuf, textcap = textlen + tlen + 1);
        memcpy(textbuf + textlen, tail, tlen);
        textlen += tlen;
    } else {
        out_write(tail, tlen, &out_failed);
        out_write("\n", 1, &out_failed);
        fflush(stdout);
    }
    if (st) {
        fprintf(stderr, "kiln run: %s\n", model_error(m));
        rc = 1;
    }
    double pp_tps = t_prompt > 0 ? n_prompt / t_prompt : 0;
    double tg_tps = n_decode > 0 && t_gen > 0 ? n_decode / t_gen : 0;
    fprintf(stderr, "kiln run: prompt     %5d tokens in %9.2f ms: %9.2f tokens/s\n", n_prompt, 1e3 * t_prompt, pp_tps);
    fprintf(stderr, "kiln run: generated  %5d tokens in %9.2f ms: %9.2f tokens/s (%d decode steps; stop: %s)\n", n_gen,
            1e3 * t_gen, tg_tps, n_decode, stop);
    if (o.json && !st) {
        printf("{\"model\": ");
        json_str(stdout, desc, strlen(desc));
        printf(", \"arch\": \"%s\", \"backend\": \"%s\", \"threads\": %lld, \"seed\": %llu, \"temp\": %g,\n", hp->name,
               o.interp ? "interp" : getenv("KILN_BACKEND") ? getenv("KILN_BACKEND") : "cpu", o.threads, (unsigned long long)o.seed, o.temp);
        printf(" \"load_s\": %.6f, \"prompt_tokens\": %d, \"prompt_s\": %.6f, \"prompt_tps\": %.3f,\n", load_s, n_prompt,
               t_prompt, pp_tps);
        printf(" \"generated_tokens\": %d, \"decode_steps\": %d, \"gen_s\": %.6f, \"gen_tps\": %.3f, \"stop\": \"%s\",\n",
               n_gen, n_decode, t_gen, tg_tps, stop);
        printf(" \"prompt_ids\": [");
        for (int i = 0; i < n_prompt; i++) printf("%s%d", i ? ", " : "", ptoks[i]);
        printf("],\n \"ids\": [");
        for (int i = 0; i < n_gen; i++) printf("%s%d", i ? ", " : "", gen[i]);
        printf("],\n \"text\": ");
        json_str(stdout, textbuf ? textbuf : "", textlen);
        printf("}\n");
    }
    if (fflush(stdout) != 0 || out_failed || ferror(stdout)) {
        if (!rc) fprintf(stderr, "kiln run: writing the output failed\n");
        rc = 1;
    }
    free(textbuf);
    free(gen);
    free(logits);
    free(ptoks);
    free(file_text);
    tok_stream_free(ts);
    sampler_free(smp);
    tok_free(tk);
    model_free(m);
    return rc;
}

/* ---- bench -------------------------------------------------------------- */

static void bench_help(void) {
    printf("usage: kiln bench -m MODEL.gguf [-p 512] [-n 128] [-d 0] [-t 1,2] [-r 5] [--json]\n"
           "llama-bench-style throughput: for every thread count, the model is loaded and\n"
           "compiled once (not timed); then each test runs r times on a fresh KV cache with\n"
           "random token ids, after one untimed warm-up. With a depth d > 0 the cache first\n"
           "holds d tokens (one untimed prefill per test; the timed runs start at position d).\n"
           "  -m, --model FILE        GGUF model\n"
           "  -p, --n-prompt N[,N..]  prompt processing tests: ppN = N tokens in one batch (0: none)\n"
           "  -n, --n-gen N[,N..]     generation tests: tgN = N single-token decode steps (0: none)\n"
           "  -d, --n-depth D[,D..]   tokens already in the KV cache before each test (default 0)\n"
           "  -t, --threads T[,T..]   thread counts (default 1,2)\n"
           "  -r, --repetitions R     timed runs per test (default 5)\n"
           "  --kv-type T             the KV cache's type: f32 (default) or f16 (half the memory)\n"
           "  --mmap                  map the file instead of reading it into memory\n"
           "  --interp                the reference interpreter instead of compiled code\n"
           "  --no-tune               no schedule search on a model's first run on this machine\n"
           "                          and thread count (else up to 30 s each, or $KILN_TUNE s)\n"
           "  --json                  a JSON array of records instead of the table\n"
           "  --profile               after each test, where the time went: per kernel ms, GB/s and\n"
           "                          GFLOP/s against this machine's measured peaks\n");
}

typedef struct bench_rec {
    int threads, n_prompt, n_gen, n_depth;
    int slots, untuned; /* contraction (kernel, bucket) slots, and those with no schedule from a search */
    double search_s;    /* the first-run search before this record's runs (0: none) */
    double mean, sd, load_s;
    double samples[64];
    int nsamples;
} bench_rec;

static uint64_t bench_rng(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* the backend a bench row ran on: "interp", or $KILN_BACKEND (set by
 * --backend), "cpu" by default; upper-case for the table (llama-bench's "CPU") */
static const char *bench_backend_label(int interp, int upper) {
    if (interp) return "interp";
    const char *label = kiln_backend_label(NULL), *name = getenv("KILN_BACKEND");
    if (!label) return name; /* unknown: as given */
    return upper ? label : name && *name ? name : kiln_backend_name(0);
}

/* fills a fresh cache with depth random tokens (untimed): the context of the
 * timed runs of one test. Those runs write positions depth.. only, and a row
 * reads positions before its own, so the filled rows stay valid across runs. */
static kiln_status bench_fill(model *m, int depth, int32_t *toks, float *logits, uint64_t *rng) {
    int64_t nv = model_n_vocab(m);
    model_reset(m);
    if (depth == 0) return KILN_OK;
    for (int i = 0; i < depth; i++) toks[i] = (int32_t)(bench_rng(rng) % (uint64_t)nv);
    return model_forward(m, toks, depth, 0, logits);
}

/* one timed run: pp (n tokens at once) or tg (n single-token steps) from
 * position depth; at depth 0 on a fresh cache */
static kiln_status bench_once(model *m, int pp, int n, int depth, int32_t *toks, float *logits, uint64_t *rng,
                              double *secs) {
    int64_t nv = model_n_vocab(m);
    for (int i = 0; i < n; i++) toks[i] = (int32_t)(bench_rng(rng) % (uint64_t)nv);
    if (depth == 0) model_reset(m);
    kiln_status st = KILN_OK;
    double t0 = now_s();
    if (pp) st = model_forward(m, toks, n, depth, logits);
    else
        for (int i = 0; i < n && !st; i++) st = model_forward(m, &toks[i], 1, depth + i, logits);
    *secs = now_s() - t0;
    return st;
}

static int cmd_bench(int argc, char **argv) {
    const char *path = NULL;
    long long pps[16] = {512}, tgs[16] = {128}, ths[16] = {1, 2}, dps[16] = {0}, reps = 5;
    int npp = 1, ntg = 1, nth = 2, ndp = 1, json = 0, interp = 0, use_mmap = 0, profile = 0, no_tune = 0;
    for (int i = 0; i < argc; i++) {
        char flag[64];
        const char *a = argv[i], *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t fl = eq ? (size_t)(eq - a) : strlen(a);
        if (fl >= sizeof flag) return cmd_usage_error("bench", "unknown option '%s'", a);
        memcpy(flag, a, fl);
        flag[fl] = 0;
#define IS(s) (strcmp(flag, s) == 0)
        if (IS("-h") || IS("--help")) {
            bench_help();
            return 0;
        }
        if (IS("--profile")) {
            profile = 1;
            continue;
        }
        if (IS("--json") || IS("--interp") || IS("--mmap") || IS("--no-tune")) {
            if (eq) return cmd_usage_error("bench", "%s takes no value", flag);
            if (IS("--json")) json = 1;
            else if (IS("--interp")) interp = 1;
            else if (IS("--no-tune")) no_tune = 1;
            else use_mmap = 1;
            continue;
        }
        int missing = 0, bad = 0;
        const char *v;
        if (!(IS("-m") || IS("--model") || IS("-p") || IS("--n-prompt") || IS("-n") || IS("--n-gen") || IS("-d") ||
              IS("--n-depth") || IS("-t") ||
              IS("--threads") || IS("-r") || IS("--repetitions") || IS("--kv-type")))
            return cmd_usage_error("bench", "unknown option '%s'", a);
        v = opt_value(argc, argv, &i, eq, &missing);
        if (missing) return cmd_usage_error("bench", "%s needs a value", flag);
        const char *want = "";
        if (IS("-m") || IS("--model")) path = v;
        else if (IS("-p") || IS("--n-prompt"))
            bad = (npp = parse_int_list(v, 0, 1 << 20, pps, 16)) < 0, want = "integers >= 0, comma-separated";
        else if (IS("-n") || IS("--n-gen"))
            bad = (ntg = parse_int_list(v, 0, 1 << 20, tgs, 16)) < 0, want = "integers >= 0, comma-separated";
        else if (IS("-d") || IS("--n-depth"))
            bad = (ndp = parse_int_list(v, 0, 1 << 20, dps, 16)) < 0, want = "integers >= 0, comma-separated";
        else if (IS("-t") || IS("--threads"))
            bad = (nth = parse_int_list(v, 1, 1024, ths, 16)) < 0, want = "integers in 1..1024, comma-separated";
        else if (IS("--kv-type")) bad = parse_kv_type(v), want = "f16 or f32";
        else bad = parse_int(v, 1, 64, &reps), want = "an integer in 1..64";
#undef IS
        if (bad) return cmd_usage_error("bench", "bad value '%s' for %s: want %s", v, flag, want);
    }
    if (!path) return cmd_usage_error("bench", "which model? give -m MODEL.gguf");
    int any_test = 0;
    for (int i = 0; i < npp; i++) any_test |= pps[i] > 0;
    for (int i = 0; i < ntg; i++) any_test |= tgs[i] > 0;
    if (!any_test) return cmd_usage_error("bench", "nothing to run: every -p and -n is 0 (give -p N or -n N above 0)");
    long long maxlen = 1;
    for (int i = 0; i < npp; i++) maxlen = pps[i] > maxlen ? pps[i] : maxlen;
    for (int i = 0; i < ntg; i++) maxlen = tgs[i] > maxlen ? tgs[i] : maxlen;
    long long maxdepth = 0;
    for (int i = 0; i < ndp; i++) maxdepth = dps[i] > maxdepth ? dps[i] : maxdepth;
    if (maxlen + maxdepth > (1 << 20))
        return cmd_usage_error("bench", "depth %lld + test %lld tokens is over the limit of %d", maxdepth, maxlen, 1 << 20);
    long long maxtest = maxlen;
    maxlen += maxdepth;

    if (profile && interp) return cmd_usage_error("bench", "--profile needs compiled code (not --interp)");
    if (profile) setenv("KILN_PROFILE", "quiet", 1); /* collect per-kernel times; report below, not at exit */
    bench_rec *recs = kiln_xcalloc(2 * 16 * 16 * 16, sizeof *recs); /* (pp + tg tests) x depths x thread counts */
    int nrec = 0, rc = 0;
    char desc[160] = "", size[32] = "", params_s[32] = "";
    uint64_t bytes = 0, params = 0;
    int header = 0;
    for (int ti = 0; ti < nth && !rc; ti++) {
        double load_s = 0;
        /* the model's default context when it holds the longest test, else
         * just that (the compiled code is the same for every length) */
        model *m = load_model("bench", path, -(int64_t)maxlen, use_mmap, interp, (int)ths[ti], &load_s);
        if (!m) {
            rc = 1;
            break;
        }
        double ts0 = now_s();
        int searched = model_is_compiled(m) && !no_tune && first_run_budget() > 0 && model_needs_search(m);
        if (first_run_search("bench", m, no_tune)) {
            model_free(m);
            rc = 1;
            break;
        }
        kiln_cli_print_arith("bench", m);
        double search_s = searched ? now_s() - ts0 : 0;
        kiln_search_status sst;
        kiln_program_search_status(model_program(m), &sst);
        if (!header) {
            model_size(model_gguf(m), &bytes, &params);
            model_desc(model_gguf(m), model_hparams(m), desc, sizeof desc);
            human_bytes(bytes, size, sizeof size);
            human_count(params, params_s, sizeof params_s);
        }
        fprintf(stderr, "kiln bench: %d thread%s: %s in %.2f s\n", (int)ths[ti], ths[ti] == 1 ? "" : "s",
                interp ? "loaded" : "loaded and compiled", load_s);
        if (!json && !header) {
            printf("| %-28s | %10s | %9s | %-7s | %7s | %14s | %20s |\n", "model", "size", "params", "backend",
                   "threads", "test", "t/s");
            printf("| %.28s | %.10s | %.9s | %.7s | %.7s | %.14s | %.20s |\n", "----------------------------",
                   "---------:", "--------:", "-------", "------:", "-------------:", "-------------------:");
            fflush(stdout);
        }
        header = 1;
        int32_t *toks = kiln_xmalloc((size_t)(maxtest > maxdepth ? maxtest : maxdepth) * sizeof *toks);
        float *logits = kiln_xmalloc((size_t)model_n_vocab(m) * sizeof *logits);
        uint64_t rng = 0x6b696c6e; /* same token ids for every thread count */
        for (int kind = 0; kind < 2 && !rc; kind++) {
            int cnt = (kind == 0 ? npp : ntg) * ndp;
            for (int k = 0; k < cnt && !rc; k++) {
                int n = (int)(kind == 0 ? pps[k / ndp] : tgs[k / ndp]), depth = (int)dps[k % ndp];
                if (n == 0) continue;
                bench_rec *r = &recs[nrec++];
                memset(r, 0, sizeof *r);
                r->threads = (int)ths[ti];
                r->slots = sst.slots;
                r->untuned = sst.untuned;
                r->search_s = search_s;
                r->load_s = load_s;
                if (kind == 0) r->n_prompt = n;
                else r->n_gen = n;
                r->n_depth = depth;
                double secs;
                /* the depth, then a warm-up (untimed): first touches of buffers and pages */
                kiln_status st = bench_fill(m, depth, toks, logits, &rng);
                if (!st) st = bench_once(m, kind == 0, kind == 0 ? n : 1, depth, toks, logits, &rng, &secs);
                if (profile) kiln_program_profile_reset(model_program(m));
                for (int rep = 0; rep < reps && !st; rep++) {
                    st = bench_once(m, kind == 0, n, depth, toks, logits, &rng, &secs);
                    r->samples[r->nsamples++] = secs > 0 ? n / secs : 0;
                }
                if (st) {
                    fprintf(stderr, "kiln bench: %s\n", model_error(m));
                    rc = 1;
                    break;
                }
                double sum = 0, sq = 0;
                for (int j = 0; j < r->nsamples; j++) sum += r->samples[j];
                r->mean = sum / r->nsamples;
                for (int j = 0; j < r->nsamples; j++) sq += (r->samples[j] - r->mean) * (r->samples[j] - r->mean);
                r->sd = r->nsamples > 1 ? sqrt(sq / (r->nsamples - 1)) : 0;
                if (!json) {
                    char test[40], ts[48];
                    int tl = snprintf(test, sizeof test, "%s%d", kind == 0 ? "pp" : "tg", n);
                    if (depth) snprintf(test + tl, sizeof test - (size_t)tl, " @ d%d", depth);
                    snprintf(ts, sizeof ts, "%.2f ± %.2f", r->mean, r->sd);
                    /* "±" is two bytes wide in UTF-8 but one column: pad by one more */
                    printf("| %-28.28s | %10s | %9s | %-7s | %7d | %14s | %21s |\n", desc, size, params_s,
                           bench_backend_label(interp, 1), r->threads, test, ts);
                    fflush(stdout);
                }
                if (profile && model_program(m)) {
                    double bw = 0, fma = 0, dot = 0;
                    kiln_device_peaks((int)ths[ti], &bw, &fma, &dot);
                    char *rep = kiln_program_profile(model_program(m), bw, fma, dot, getenv("KILN_PROFILE_ROWS") ? atoi(getenv("KILN_PROFILE_ROWS")) : 20);
                    FILE *o = json ? stderr : stdout;
                    fprintf(o, "\nprofile of %s%d at depth %d, %d thread%s (measured peaks: read %.1f GB/s, f32 FMA %.1f "
                               "GFLOP/s, int8 dot %.1f GOP/s); per run = %s:\n%s\n",
                            kind == 0 ? "pp" : "tg", n, depth, (int)ths[ti], ths[ti] == 1 ? "" : "s", bw, fma, dot,
                            kind == 0 ? "one forward pass of at most KILN_UBATCH (512) rows: a longer prompt is several"
                                      : "per token",
                            rep);
                    free(rep);
                }
            }
        }
        free(toks);
        free(logits);
        model_free(m);
    }
    if (json && !rc) {
        char cpu[128];
        cpu_model(cpu, sizeof cpu);
        printf("[\n");
        for (int i = 0; i < nrec; i++) {
            const bench_rec *r = &recs[i];
            printf("  {\"model\": ");
            json_str(stdout, desc, strlen(desc));
            printf(", \"model_file\": ");
            json_str(stdout, path, strlen(path));
            printf(", \"model_size\": %llu, \"model_n_params\": %llu, \"backend\": \"%s\", \"n_threads\": %d,"
                   " \"test\": \"%s%d\", \"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, \"load_s\": %.6f, \"avg_ts\": %.6f,"
                   " \"stddev_ts\": %.6f, \"samples_ts\": [",
                   (unsigned long long)bytes, (unsigned long long)params, bench_backend_label(interp, 0), r->threads,
                   r->n_prompt ? "pp" : "tg", r->n_prompt ? r->n_prompt : r->n_gen, r->n_prompt, r->n_gen, r->n_depth, r->load_s,
                   r->mean, r->sd);
            for (int j = 0; j < r->nsamples; j++) printf("%s%.6f", j ? ", " : "", r->samples[j]);
            printf("], \"kiln_version\": \"%s\", \"kiln_commit\": \"%s\", \"cpu\": ", KILN_CLI_VERSION, KILN_COMMIT);
            json_str(stdout, cpu, strlen(cpu));
            printf(", \"tuned_slots\": %d, \"slots\": %d, \"search_s\": %.3f}%s\n", r->slots - r->untuned, r->slots,
                   r->search_s, i + 1 < nrec ? "," : "");
        }
        printf("]\n");
    }
    free(recs);
    if (fflush(stdout) != 0) rc = 1;
    return rc;
}

/* ---- tune --------------------------------------------------------------- */

static void tune_help(void) {
    printf("usage: kiln tune [--show [--json]] [--export FILE | --import FILE]\n"
           "       kiln tune -m MODEL.gguf [--budget SECONDS] [-t N] [-p N] [--retune] [--json]\n"
           "       kiln tune --space [-m MODEL.gguf [-t N]]\n"
           "the tuning DB: the winning schedule of every searched kernel, per hardware\n"
           "fingerprint ($KILN_TUNEDB, else $XDG_CACHE_HOME/kiln/tune.db, else\n"
           "~/.cache/kiln/tune.db). With no options, --show.\n"
           "  --show                  the records: kernel key, shape bucket, schedule, time,\n"
           "                          baseline, speedup, candidates tried, and whether the\n"
           "                          record was made on this machine's fingerprint\n"
           "  --json                  the records as a JSON array\n"
           "  --export FILE           copy every valid record to FILE\n"
           "  --import FILE           merge FILE's records into the DB (same fingerprint,\n"
           "                          kernel and bucket: replaced)\n"
           "  -m, --model FILE        compile the GGUF model with a schedule search, then show\n"
           "  --budget SECONDS        the search's time budget (suffix s, m or h; default 60s)\n"
           "  -t, --threads N         threads the kernels are tuned for (default: online cores)\n"
           "  -p, --prompt N          prompt tokens the prefill kernels are tuned at (default 256;\n"
           "                          one schedule then serves every prompt of more than 4)\n"
           "  --retune                search again where this machine already has records (after\n"
           "                          a kiln upgrade widened the search); the records seed it\n"
           "  --space                 the schedule space: its axes, and with -m each contraction's size\n");
}

/* "60", "60s", "1.5m", "2h": seconds in [0, 1e7]; 0 on success */
static int parse_budget(const char *s, double *out) {
    char buf[64];
    size_t n = s ? strlen(s) : 0;
    if (!n || n >= sizeof buf) return -1;
    memcpy(buf, s, n + 1);
    double scale = 1;
    char last = buf[n - 1];
    if (last == 's' || last == 'm' || last == 'h') {
        scale = last == 'h' ? 3600 : last == 'm' ? 60 : 1;
        buf[n - 1] = 0;
    }
    double v;
    if (parse_num(buf, 0, 1e7, &v)) return -1;
    if (v * scale > 1e7) return -1;
    *out = v * scale;
    return 0;
}

/* "1.23 ms" */
static void fmt_secs(double s, char *out, size_t cap) {
    if (s <= 0) snprintf(out, cap, "-");
    else if (s < 1e-6) snprintf(out, cap, "%.1f ns", s * 1e9);
    else if (s < 1e-3) snprintf(out, cap, "%.2f us", s * 1e6);
    else if (s < 1) snprintf(out, cap, "%.3f ms", s * 1e3);
    else snprintf(out, cap, "%.3f s", s);
}

/* text for a table cell: control and non-ASCII bytes as \xHH (the DB keeps
 * any bytes; the table must stay one line per record) */
static void cell_text(const char *s, size_t maxlen, char *out, size_t cap) {
    size_t n = 0;
    for (const unsigned char *c = (const unsigned char *)s; *c && n + 5 < cap && n < maxlen; c++) {
        if (*c < 0x20 || *c >= 0x7f) n += (size_t)snprintf(out + n, cap - n, "\\x%02x", *c);
        else out[n++] = (char)*c;
    }
    out[n] = 0;
}

typedef struct tune_row {
    const sch_tune_record *r;
    int here; /* made on this machine's fingerprint */
} tune_row;

/* this machine's records first, then by kernel key and bucket */
static int tune_row_cmp(const void *pa, const void *pb) {
    const tune_row *a = pa, *b = pb;
    if (a->here != b->here) return b->here - a->here;
    int c = strcmp(a->r->key, b->r->key);
    if (c) return c;
    c = strcmp(a->r->bucket, b->r->bucket);
    return c ? c : strcmp(a->r->fingerprint, b->r->fingerprint);
}

/* a key's table form: its kind and dtype whole, its hash cut to 8 digits
 * ("contract-q4_0-2308cd3e"; q4_0 and q4_k once both read "contract-q4_") */
static size_t tune_key_short(const char *key) {
    const char *dash = strrchr(key, '-');
    size_t n = dash ? (size_t)(dash - key) + 1 + 8 : 12;
    return n < strlen(key) ? n : strlen(key);
}

/* the fingerprint records must carry to be this machine's: the CPU's, or
 * with --backend opencl|cuda that backend's device's (NULL without one) */
static char *backend_fingerprint(void) { return kiln_backend_fingerprint(NULL); }

static int tune_show(int json) {
    int n = 0, damaged = 0;
    sch_tune_record *recs = sch_tunedb_load(&n, &damaged);
    char *fp = backend_fingerprint();
    tune_row *rows = kiln_xcalloc((size_t)(n > 0 ? n : 1), sizeof *rows);
    int nhere = 0;
    for (int i = 0; i < n; i++) {
        rows[i].r = &recs[i];
        rows[i].here = fp && strcmp(recs[i].fingerprint, fp) == 0;
        nhere += rows[i].here;
    }
    if (n > 1) qsort(rows, (size_t)n, sizeof *rows, tune_row_cmp);
    const char *path = sch_tunedb_path();
    if (json) {
        printf("[");
        for (int i = 0; i < n; i++) {
            const sch_tune_record *r = rows[i].r;
            printf("%s\n  {\"key\": ", i ? "," : "");
            json_str(stdout, r->key, strlen(r->key));
            printf(", \"bucket\": ");
            json_str(stdout, r->bucket, strlen(r->bucket));
            printf(", \"schedule\": ");
            json_str(stdout, r->schedule, strlen(r->schedule));
            printf(", \"best_s\": %.17g, \"base_s\": %.17g, ", r->best_s, r->base_s);
            if (r->best_s > 0) printf("\"speedup\": %.6g, ", r->base_s / r->best_s);
            else printf("\"speedup\": null, ");
            printf("\"tried\": %d, \"rejected\": %d, \"date\": ", r->tried, r->rejected);
            json_str(stdout, r->date, strlen(r->date));
            printf(", \"ir_version\": %d, \"this_machine\": %s, \"fingerprint\": ", r->ir_version,
                   rows[i].here ? "true" : "false");
            json_str(stdout, r->fingerprint, strlen(r->fingerprint));
            printf("}");
        }
        printf("%s]\n", n ? "\n" : "");
    } else if (n) {
        /* column widths from the contents, so that nothing is cut */
        enum { NCOL = 8 };
        static const char *const head[NCOL] = {"kernel", "bucket", "schedule", "time", "baseline", "speedup",
                                                "tried", "here"};
        size_t w[NCOL];
        for (int c = 0; c < NCOL; c++) w[c] = strlen(head[c]);
        char cell[NCOL][4 * SCH_TUNE_TEXT + 8];
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 1) {
                for (int c = 0; c < NCOL; c++) printf("| %-*s ", (int)w[c], head[c]);
                printf("|\n");
                for (int c = 0; c < NCOL; c++) {
                    printf("|");
                    for (size_t k = 0; k < w[c] + 2; k++) putchar('-');
                }
                printf("|\n");
            }
            for (int i = 0; i < n; i++) {
                const sch_tune_record *r = rows[i].r;
                cell_text(r->key, tune_key_short(r->key), cell[0], sizeof cell[0]);
                cell_text(r->bucket, SIZE_MAX, cell[1], sizeof cell[1]);
                cell_text(r->schedule, SIZE_MAX, cell[2], sizeof cell[2]);
                fmt_secs(r->best_s, cell[3], sizeof cell[3]);
                fmt_secs(r->base_s, cell[4], sizeof cell[4]);
                if (r->best_s > 0) snprintf(cell[5], sizeof cell[5], "%.2fx", r->base_s / r->best_s);
                else snprintf(cell[5], sizeof cell[5], "-");
                snprintf(cell[6], sizeof cell[6], "%d", r->tried);
                snprintf(cell[7], sizeof cell[7], "%s", rows[i].here ? "yes" : "no");
                for (int c = 0; c < NCOL; c++) {
                    size_t len = strlen(cell[c]);
                    if (pass == 0 && len > w[c]) w[c] = len;
                    /* numbers right-aligned, text left-aligned */
                    if (pass == 1) printf(c >= 3 && c <= 6 ? "| %*s " : "| %-*s ", (int)w[c], cell[c]);
                }
                if (pass == 1) printf("|\n");
            }
        }
    }
    if (n) fprintf(stderr, "kiln tune: %d record%s in %s, %d for this machine\n", n, n == 1 ? "" : "s", path, nhere);
    else fprintf(stderr, "kiln tune: no records in %s\n", path[0] ? path : "(no path: set KILN_TUNEDB or HOME)");
    free(rows);
    free(recs);
    free(fp);
    return fflush(stdout) != 0 ? 1 : 0;
}

/* ---- the schedule search of a model (autotune.c) --------------------- */

typedef struct tune_view {
    const char *cmd;
    int tty;
    int shown; /* a progress line is on the terminal */
} tune_view;

static void tune_phase(void *ctx, const char *what) {
    tune_view *v = ctx;
    if (v->shown) fprintf(stderr, "\r\033[K");
    v->shown = 0;
    fprintf(stderr, "kiln %s: %s ...\n", v->cmd, what);
}

/* on a terminal, one line redrawn after each kernel search */
static void tune_bar(void *ctx, const kiln_search_status *st) {
    tune_view *v = ctx;
    if (!v->tty) return;
    double left = st->budget_s - st->spent_s;
    int bar = st->budget_s > 0 ? (int)(20 * st->spent_s / st->budget_s) : 20;
    char b[21];
    for (int i = 0; i < 20; i++) b[i] = i < bar ? '#' : '.';
    b[20] = 0;
    fprintf(stderr, "\r\033[Kkiln %s: [%s] %d kernels searched, %d contraction slots to go, best %.2fx, %.0f s left",
            v->cmd, b, st->searched, st->untuned, st->best_speedup, left > 0 ? left : 0);
    fflush(stderr);
    v->shown = 1;
}

/* search m's schedules within budget seconds; 0, or 1 after printing why not */
static int search_schedules(const char *cmd, model *m, double budget, int prompt) {
    tune_view v = {cmd, isatty(2), 0};
    model_tune_options o = model_tune_defaults();
    o.budget_s = budget;
    if (prompt > 0) o.prompt = prompt;
    o.phase = tune_phase;
    o.ctx = &v;
    kiln_program_search_progress(model_program(m), tune_bar, &v);
    kiln_search_status st;
    char err[1024];
    double t0 = now_s();
    kiln_status s = model_autotune(m, &o, &st, err, sizeof err);
    kiln_program_search_progress(model_program(m), NULL, NULL);
    if (v.shown) fprintf(stderr, "\r\033[K");
    if (s != KILN_OK) {
        fprintf(stderr, "kiln %s: the schedule search failed: %s\n", cmd, err);
        return 1;
    }
    fprintf(stderr,
            "kiln %s: searched %d kernel%s in %.1f s of a %.0f s budget (%.1f s in all: the profile, the search and the recompile), %d candidates "
            "measured, best %.2fx over the default; %d kept as they were (under %.0f%% of a step)\n",
            cmd, st.searched, st.searched == 1 ? "" : "s", st.spent_s, budget, now_s() - t0 - st.baseline_s, st.measurements,
            st.best_speedup, st.skipped, 100 * o.min_share);
    /* what the budget cannot cut: the recompile is one compiler run, sized
     * in advance (the reserve) and not stopped when it overruns that */
    if (st.recompile_s > 0)
        fprintf(stderr, "kiln %s: the recompile with the winners took %.1f s (%.1f s kept aside for it)\n", cmd,
                st.recompile_s, st.reserve_s);
    if (st.baseline_s > 0)
        fprintf(stderr, "kiln %s: compiled the streaming attention form with the winners in %.1f s (the model's compile, after the search)\n",
                cmd, st.baseline_s);
    return 0;
}

/* the first-run search's budget: $KILN_TUNE seconds (0: off), default 30 */
static double first_run_budget(void) {
    const char *e = getenv("KILN_TUNE");
    if (!e || !e[0]) return 30;
    char *end;
    double b = strtod(e, &end);
    return *end || !(b >= 0) ? 30 : b;
}

/* a model new to this machine is searched before it runs (no_tune, or
 * KILN_TUNE=0, skips); 0, or 1 after printing an error */
static int first_run_search(const char *cmd, model *m, int no_tune) {
    double budget = first_run_budget();
    if (no_tune || budget <= 0 || !model_is_compiled(m) || !model_needs_search(m)) {
        if (model_is_compiled(m)) model_compile_forms(m);
        return 0;
    }
    fprintf(stderr,
            "kiln %s: this model has no tuned schedules for this machine and thread count: searching for up to "
            "%.0f s first (--no-tune skips it; 'kiln tune' searches longer)\n",
            cmd, budget);
    return search_schedules(cmd, m, budget, 0);
}

/* compile the model and search its schedules within budget seconds, spent
 * where its time goes (autotune.c) */
static int tune_model(const char *path, double budget, int threads, int prompt) {
    double load_s = 0;
    model *m = load_model("tune", path, 0, 0, 0, threads, &load_s);
    if (!m) return 1;
    fprintf(stderr, "kiln tune: %s: loaded and compiled in %.2f s (%d thread%s)\n", path, load_s, threads,
            threads == 1 ? "" : "s");
    int rc = search_schedules("tune", m, budget, prompt);
    model_free(m);
    return rc;
}

static int cmd_tune(int argc, char **argv) {
    const char *model_path = NULL, *export_path = NULL, *import_path = NULL;
    int show = 0, json = 0, space = 0, budget_set = 0, threads_set = 0, retune = 0, prompt_set = 0;
    long long prompt = 256;
    double budget = 60;
    long long threads = online_cores();
    for (int i = 0; i < argc; i++) {
        char flag[64];
        const char *a = argv[i], *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t fl = eq ? (size_t)(eq - a) : strlen(a);
        if (fl >= sizeof flag) return cmd_usage_error("tune", "unknown option '%s'", a);
        memcpy(flag, a, fl);
        flag[fl] = 0;
#define IS(s) (strcmp(flag, s) == 0)
        if (IS("-h") || IS("--help")) {
            tune_help();
            return 0;
        }
        if (IS("--show") || IS("--json") || IS("--space") || IS("--retune")) {
            if (eq) return cmd_usage_error("tune", "%s takes no value", flag);
            if (IS("--show")) show = 1;
            else if (IS("--json")) json = 1;
            else if (IS("--retune")) retune = 1;
            else space = 1;
            continue;
        }
        if (!(IS("-m") || IS("--model") || IS("--budget") || IS("--export") || IS("--import") || IS("-t") ||
              IS("--threads") || IS("-p") || IS("--prompt")))
            return cmd_usage_error("tune", "unknown option '%s'", a);
        int missing = 0;
        const char *v = opt_value(argc, argv, &i, eq, &missing);
        if (missing) return cmd_usage_error("tune", "%s needs a value", flag);
        if (!*v && !(IS("--budget") || IS("-t") || IS("--threads") || IS("-p") || IS("--prompt")))
            return cmd_usage_error("tune", "%s needs a file name", flag);
        if (IS("-m") || IS("--model")) model_path = v;
        else if (IS("--export")) export_path = v;
        else if (IS("--import")) import_path = v;
        else if (IS("--budget")) {
            if (parse_budget(v, &budget))
                return cmd_usage_error("tune", "bad value '%s' for --budget: want seconds >= 0 (e.g. 60, 60s, 2m)", v);
            budget_set = 1;
        } else if (IS("-p") || IS("--prompt")) {
            if (parse_int(v, 5, 65536, &prompt))
                return cmd_usage_error("tune", "bad value '%s' for %s: want an integer in 5..65536", v, flag);
            prompt_set = 1;
        } else {
            if (parse_int(v, 1, 1024, &threads))
                return cmd_usage_error("tune", "bad value '%s' for %s: want an integer in 1..1024", v, flag);
            threads_set = 1;
        }
#undef IS
    }
    if (space) {
        if (show || json || export_path || import_path || budget_set)
            return cmd_usage_error("tune", "--space goes alone or with -m MODEL.gguf [-t N]");
        int rc = put_text("tune", "schedule space", kiln_schedule_space());
        if (rc || !model_path) return rc;
        model_options o = model_default_options();
        o.gguf_flags = (unsigned)GGUF_OPEN_READ;
        o.compiled = 1;
        o.threads = (int)threads;
        model *m = NULL;
        char lerr[1024];
        kiln_status ls = model_load_ex(model_path, &o, &m, lerr, sizeof lerr);
        if (ls != KILN_OK) {
            fprintf(stderr, "kiln tune: %s: %s\n", model_path, lerr[0] ? lerr : kiln_status_name(ls));
            return 1;
        }
        printf("%s (%d threads):\n", model_path, (int)threads);
        rc = put_text("tune", "schedule space", kiln_program_space_report(model_program(m)));
        model_free(m);
        return rc;
    }
    if (export_path && import_path) return cmd_usage_error("tune", "give --export or --import, not both");
    if ((budget_set || threads_set || retune || prompt_set) && !model_path)
        return cmd_usage_error("tune", "--budget, --threads, --prompt and --retune go with -m MODEL.gguf");
    /* the search reads it (exec.c, tune_generic.c): this machine's records seed it */
    if (retune && setenv("KILN_RETUNE", "1", 1) != 0) {
        fprintf(stderr, "kiln tune: cannot set KILN_RETUNE\n");
        return 1;
    }
    /* the table is shown when asked for, after tuning, or when nothing else is asked */
    if (model_path || (!export_path && !import_path)) show = 1;
    if (json && !show) return cmd_usage_error("tune", "--json goes with --show");

    char err[1024];
    int n = 0;
    /* the counts are results, but must not break the JSON that follows them */
    FILE *note = json ? stderr : stdout;
    if (import_path) {
        kiln_status st = sch_tunedb_import(import_path, &n, err, sizeof err);
        if (st != KILN_OK) {
            fprintf(stderr, "kiln tune: %s\n", err);
            return 1;
        }
        fprintf(note, "imported %d record%s from %s into %s\n", n, n == 1 ? "" : "s", import_path, sch_tunedb_path());
    }
    if (model_path && tune_model(model_path, budget, (int)threads, (int)prompt)) return 1;
    if (export_path) {
        kiln_status st = sch_tunedb_export(export_path, &n, err, sizeof err);
        if (st != KILN_OK) {
            fprintf(stderr, "kiln tune: %s\n", err);
            return 1;
        }
        fprintf(note, "exported %d record%s from %s to %s\n", n, n == 1 ? "" : "s", sch_tunedb_path(), export_path);
    }
    if (show) return tune_show(json);
    return fflush(stdout) != 0 ? 1 : 0;
}

/* `--backend cpu|opencl|cuda` (or --backend=NAME), taken out of argv for
 * every command: the library reads the choice from $KILN_BACKEND when a
 * compile does not name a backend (the model loader does not). On GPU
 * backends model weights and the KV cache stay on the device between
 * forward passes (KILN_GPU_RESIDENT, see gpu_exec.c): the CLI never changes
 * them behind kiln's back. `--exact` is taken out the same way and sets
 * $KILN_EXACT=1, which kiln_compile_defaults reads (kiln's exact evaluation).
 * Returns 0, or the usage exit status. */
static int take_backend_option(int *argc, char **argv) {
    int out = 2;
    for (int i = 2; i < *argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (strcmp(a, "--backend") == 0) {
            if (i + 1 >= *argc) return cmd_usage_error(argv[1], "--backend needs a value (cpu, opencl or cuda)");
            v = argv[++i];
        } else if (strncmp(a, "--backend=", 10) == 0) {
            v = a + 10;
        } else if (strcmp(a, "--exact") == 0) {
            setenv("KILN_EXACT", "1", 1); /* kiln_compile_defaults reads it: f32 only, no DB, no search */
            continue;
        } else {
            argv[out++] = argv[i];
            continue;
        }
        if (!v[0] || !kiln_backend_label(v))
            return cmd_usage_error(argv[1], "unknown backend '%s' (available: %s)", v, kiln_backend_names());
        setenv("KILN_BACKEND", v, 1);
        if (!kiln_backend_host_memory(v)) setenv("KILN_GPU_RESIDENT", "1", 0);
    }
    *argc = out;
    argv[out] = NULL;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("kiln %s\n", KILN_CLI_VERSION);
        return 0;
    }
    int brc = take_backend_option(&argc, argv);
    if (brc) return brc;
    if ((!strcmp(cmd, "run") || !strcmp(cmd, "bench") || !strcmp(cmd, "explain")) && kiln_onnx_cli_wants(argc - 2, argv + 2))
        return kiln_onnx_cli(cmd, argc - 2, argv + 2);
    if (strcmp(cmd, "graph") == 0) return cmd_graph(argc - 2, argv + 2);
    if (strcmp(cmd, "explain") == 0) return cmd_explain(argc - 2, argv + 2);
    if (strcmp(cmd, "device") == 0) return cmd_device(argc - 2, argv + 2);
    if (strcmp(cmd, "run") == 0) return cmd_run(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 2, argv + 2);
    if (strcmp(cmd, "tune") == 0) return cmd_tune(argc - 2, argv + 2);
    if (strcmp(cmd, "perplexity") == 0) return cmd_perplexity(argc - 2, argv + 2);
    if (strcmp(cmd, "serve") == 0) return cmd_serve(argc - 2, argv + 2);
    if (cmd[0] == '-') return usage_error("unknown option '%s'", cmd);
    return usage_error("unknown command '%s'", cmd);
}

/* for serve.c (kiln_cli.h) */
model *kiln_cli_load_model(const char *cmd, const char *path, int64_t n_ctx, int mmap_file, int interp, int threads,
                           double *secs) {
    return load_model(cmd, path, n_ctx, mmap_file, interp, threads, secs);
}

/* for perplexity.c (kiln_cli.h) */
int kiln_cli_first_run_search(const char *cmd, model *m, int no_tune) { return first_run_search(cmd, m, no_tune); }
