/* kiln.c — the kiln command line.
 *
 *   kiln graph --example NAME [--dot]   build an example graph through the public
 *                                       API and print it as text (or DOT)
 *   kiln graph --list                   the example names
 *   kiln explain --example NAME [--graph] [--egraph] [--optimized] [--json]
 *                [--kernels] [--source]  what the compiler decided for a graph
 *   kiln device [--json]                hardware fingerprint and measured peaks
 *   kiln run | bench | tune
 *                                       not implemented yet: say so, exit 2
 *   kiln --help | --version
 *
 * Exit status: 0 success; 1 the library reported an error; 2 usage errors and
 * subcommands that do not exist yet (so scripts never mistake them for work
 * that was done). Messages for people go to stderr; the graph goes to stdout.
 * Only the public API (kiln.h) is used: the CLI is a client like any other.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "kiln_compile.h"

#define KILN_CLI_VERSION "0.1.0-dev"

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
            "  run     -m MODEL.gguf -p PROMPT   generate text      (not implemented yet)\n"
            "  bench   -m MODEL.gguf             benchmark          (not implemented yet)\n"
            "  tune    -m MODEL.gguf             search schedules   (not implemented yet)\n"
            "  explain --example NAME [--graph] [--egraph] [--optimized] [--json] [--kernels] [--source]\n"
            "                                show what the compiler decided (e-graph run,\n"
            "                                extracted graph, kernels, generated C);\n"
            "                                models: not implemented yet\n"
            "  device [--json]               hardware fingerprint and measured peaks\n"
            "\n"
            "options:\n"
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
    const char *name = NULL;
    int show_graph = 0, show_egraph = 0, show_opt = 0, json = 0, show_kernels = 0, show_source = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--example") == 0) {
            if (i + 1 >= argc) return usage_error("explain: %s needs a name", a);
            name = argv[++i];
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            fprintf(stderr, "kiln explain: models are not supported yet (GGUF loading is issue 6); use --example NAME\n");
            return 2;
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
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("usage: kiln explain --example NAME [--graph] [--egraph] [--optimized] [--json]\n"
                   "  --graph      the graph as built\n"
                   "  --egraph     the e-graph run: classes, nodes, iterations, time, stop reason, rule firings\n"
                   "  --optimized  the graph extracted after saturation\n"
                   "  --json       the e-graph report as JSON\n"
                   "  --kernels    the compiled kernels: inputs, outputs, fused ops, loop nests\n"
                   "  --source     the generated C\n"
                   "with no selection, --egraph is shown\n");
            return 0;
        } else {
            return usage_error("explain: unknown option '%s'", a);
        }
    }
    if (!name) return usage_error("explain: %s", "which graph? use --example NAME (see 'kiln graph --list')");
    if (!show_graph && !show_opt && !show_kernels && !show_source) show_egraph = 1;
    if (json && (show_graph || show_opt || show_kernels || show_source)) return usage_error("explain: %s", "--json goes with --egraph alone");
    int rc = 0;
    kiln_graph *g = build_example("explain", name, &rc);
    if (!g) return rc;
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
        kiln_program *p = kiln_compile(g, NULL, &st);
        if (!p) {
            fprintf(stderr, "kiln explain: compiling failed: %s: %s\n", kiln_status_name(st), kiln_graph_error(g));
            rc = 1;
        } else {
            if (show_kernels) rc |= put_text("explain", "kernel list", kiln_program_kernels(p));
            if (show_source) {
                const char *src = kiln_program_source(p);
                if (src) fputs(src, stdout);
                else rc = 1;
            }
            kiln_program_free(p);
        }
    }
    kiln_graph_free(g);
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
                   "peaks (read bandwidth per thread count, FP32 FMA, int8 dot product)\n");
            return 0;
        } else return usage_error("device: unknown option '%s'", argv[i]);
    }
    if (!json && isatty(2)) fprintf(stderr, "kiln device: measuring peaks (a few seconds) ...\n");
    return put_text("device", "device report", kiln_device_report(json));
}

/* ---- commands that do not exist yet ------------------------------------- */

static int not_yet(const char *cmd) {
    if (strcmp(cmd, "run") == 0)
        fprintf(stderr, "kiln run: GGUF model execution is not implemented yet (see issue 6)\n");
    else
        fprintf(stderr, "kiln %s: not implemented yet\n", cmd);
    return 2;
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
    if (strcmp(cmd, "graph") == 0) return cmd_graph(argc - 2, argv + 2);
    if (strcmp(cmd, "explain") == 0) return cmd_explain(argc - 2, argv + 2);
    if (strcmp(cmd, "device") == 0) return cmd_device(argc - 2, argv + 2);
    static const char *const pending[] = {"run", "bench", "tune"};
    for (size_t i = 0; i < sizeof pending / sizeof pending[0]; i++)
        if (strcmp(cmd, pending[i]) == 0) return not_yet(cmd);
    if (cmd[0] == '-') return usage_error("unknown option '%s'", cmd);
    return usage_error("unknown command '%s'", cmd);
}
