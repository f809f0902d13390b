/* serve.c — `kiln serve`: an OpenAI-compatible HTTP server for one model.
 *
 *   kiln serve -m MODEL.gguf [--host 127.0.0.1] [--port 8080] [--parallel N]
 *              [--ctx N] [--api-key K] [-t N] [--chat-template NAME] ...
 *
 * Loads and compiles the model once (with the first-run schedule search, as
 * kiln run), starts the engine (serve_engine.c: N slots, a bounded queue) and
 * the HTTP server (serve_http.c), prints one line "kiln serve: listening on
 * http://HOST:PORT" on stderr, and serves until SIGINT or SIGTERM. Binds to
 * 127.0.0.1 unless --host says otherwise.
 *
 * Built only with libmicrohttpd and cJSON (the Makefile looks for them with
 * pkg-config); without them `kiln serve` says which packages to install.
 */
#include <stdio.h>

#include "kiln_cli.h"

#ifndef KILN_HAVE_SERVE

int cmd_serve(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "kiln serve: this kiln was built without the server: it needs libmicrohttpd and cJSON"
                    " (Debian: apt-get install libmicrohttpd-dev libcjson-dev), then make\n");
    return 1;
}

#else

#include <errno.h>
#include <stddef.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "chat.h"
#include "serve.h"
#include "tokenizer_gguf.h"

typedef struct serve_opts {
    const char *model, *host, *api_key, *chat_template, *alias;
    long long port, parallel, n_ctx, threads, n_predict, timeout, request_timeout, queue, max_body, max_conn;
    int use_mmap, interp, no_tune;
} serve_opts;

static void serve_help(void) {
    printf("usage: kiln serve -m MODEL.gguf [options]\n"
           "an OpenAI-compatible HTTP server: /v1/chat/completions and /v1/completions (stream: true\n"
           "as server-sent events), /v1/models, /health. Logs go to stderr.\n"
           "  -m, --model FILE        GGUF model\n"
           "  --host ADDR             address to listen on (default 127.0.0.1: this machine only)\n"
           "  --port N                port (default 8080)\n"
           "  -np, --parallel N       slots: requests decoded concurrently, each with its own KV\n"
           "                          cache of --ctx tokens (default 1)\n"
           "  -c, --ctx N             context per slot (default: min(training, 4096))\n"
           "  --queue N               requests that wait for a slot, at most (default 16; beyond: 503)\n"
           "  -n, --n-predict N       tokens a request generates when it gives no max_tokens\n"
           "                          (default -1: until the context is full)\n"
           "  --api-key KEY           require 'Authorization: Bearer KEY' on /v1/ endpoints\n"
           "  --alias NAME            the model's id in the API (default: the file's name)\n"
           "  --chat-template NAME    use the built-in format NAME (gemma, chatml, llama3, llama2)\n"
           "                          instead of the model's own template\n"
           "  -t, --threads N         worker threads (default: online cores)\n"
           "  --timeout S             close connections idle for S seconds (default 600)\n"
           "  --request-timeout S     a request's whole time, waiting for a slot and generating: a\n"
           "                          queued one is refused, a running one ends (default 600)\n"
           "  --max-body BYTES        largest request body (default 8388608)\n"
           "  --max-connections N     open connections at most (default 256)\n"
           "  --mmap                  map the model file instead of reading it\n"
           "  --interp                run the reference interpreter instead of compiled code\n"
           "  --no-tune               no schedule search on the model's first run on this machine\n");
}

static int usage_err(const char *fmt, const char *a) {
    fprintf(stderr, "kiln serve: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, " (see 'kiln serve --help')\n");
    return 2;
}

static int int_arg(const char *v, long long lo, long long hi, long long *out) {
    if (!v || !*v) return -1;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

/* 0 ok, -1 help, else the exit status */
static int serve_parse(int argc, char **argv, serve_opts *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->parallel = 1;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = n < 1 ? 1 : n > 1024 ? 1024 : n;
    o->n_predict = -1;
    o->timeout = 600;
    o->request_timeout = 600;
    o->queue = 16;
    o->max_body = 8 << 20;
    o->max_conn = 256;
    static const struct {
        const char *name, *alias;
        long long lo, hi;
        size_t off;
    } ints[] = {
        {"--port", NULL, 1, 65535, offsetof(serve_opts, port)},
        {"--parallel", "-np", 1, 256, offsetof(serve_opts, parallel)},
        {"--ctx", "-c", 2, 1 << 24, offsetof(serve_opts, n_ctx)},
        {"--threads", "-t", 1, 1024, offsetof(serve_opts, threads)},
        {"--n-predict", "-n", -1, 1 << 30, offsetof(serve_opts, n_predict)},
        {"--timeout", NULL, 1, 86400, offsetof(serve_opts, timeout)},
        {"--request-timeout", NULL, 1, 86400, offsetof(serve_opts, request_timeout)},
        {"--queue", NULL, 0, 1 << 16, offsetof(serve_opts, queue)},
        {"--max-body", NULL, 1024, 1LL << 30, offsetof(serve_opts, max_body)},
        {"--max-connections", NULL, 4, 65536, offsetof(serve_opts, max_conn)},
    };
    static const struct {
        const char *name, *alias;
        size_t off;
    } strs[] = {
        {"--model", "-m", offsetof(serve_opts, model)},
        {"--host", NULL, offsetof(serve_opts, host)},
        {"--api-key", NULL, offsetof(serve_opts, api_key)},
        {"--chat-template", NULL, offsetof(serve_opts, chat_template)},
        {"--alias", "-a", offsetof(serve_opts, alias)},
    };
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_help();
            return -1;
        }
        if (!strcmp(a, "--mmap")) o->use_mmap = 1;
        else if (!strcmp(a, "--interp")) o->interp = 1;
        else if (!strcmp(a, "--no-tune")) o->no_tune = 1;
        else {
            int known = 0;
            for (size_t k = 0; k < sizeof ints / sizeof ints[0] && !known; k++)
                if (!strcmp(a, ints[k].name) || (ints[k].alias && !strcmp(a, ints[k].alias))) {
                    known = 1;
                    if (i + 1 >= argc) return usage_err("%s needs a value", a);
                    if (int_arg(argv[++i], ints[k].lo, ints[k].hi, (long long *)((char *)o + ints[k].off)))
                        return usage_err("bad value for %s", a);
                }
            for (size_t k = 0; k < sizeof strs / sizeof strs[0] && !known; k++)
                if (!strcmp(a, strs[k].name) || (strs[k].alias && !strcmp(a, strs[k].alias))) {
                    known = 1;
                    if (i + 1 >= argc) return usage_err("%s needs a value", a);
                    *(const char **)((char *)o + strs[k].off) = argv[++i];
                }
            if (!known) return usage_err("unknown option '%s'", a);
        }
    }
    if (!o->model) return usage_err("%s", "which model? give -m MODEL.gguf");
    if (o->chat_template && !chat_is_builtin(o->chat_template))
        return usage_err("unknown chat template '%s' (known: gemma, chatml, llama3, llama2)", o->chat_template);
    if (o->api_key && !o->api_key[0]) return usage_err("%s", "--api-key must not be empty");
    return 0;
}

int cmd_serve(int argc, char **argv) {
    serve_opts o;
    int rc = serve_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;

    /* with several slots a lone request decodes in the single program and
     * concurrent ones in the batched program, and a client's text must not
     * depend on which. Up to MODEL_BATCH_SLOTS_PER_SLOT slots the batched
     * program's attention (per slot, src/nn/attention_slots.c) runs in the
     * stream tile's form as the single program's does (src/model/
     * model_batch.c pins both to the streaming form), so a text is also
     * `kiln run --temp 0`'s where the tuning DB did not choose the
     * materialised form for decode; with more slots its attention per row
     * (attention_rows.c: each row's cache gathered) is not in the tile's
     * form, so every program keeps the one-row stream kernel
     * (KILN_STREAM_TILE=0 unless set). tests/py/test_serve_batch.py checks
     * both bit for bit. */
    if (o.parallel > MODEL_BATCH_SLOTS_PER_SLOT) setenv("KILN_STREAM_TILE", "0", 0);
    double load_s = 0;
    model *m = kiln_cli_load_model("serve", o.model, (int64_t)o.n_ctx, o.use_mmap, o.interp, (int)o.threads, &load_s);
    if (!m) return 1;
    if (kiln_cli_first_run_search("serve", m, o.no_tune)) {
        model_free(m);
        return 1;
    }
    gguf_file *f = model_gguf(m);
    char err[1024];
    tokenizer *tk = NULL;
    if (tok_from_gguf(f, &tk, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "kiln serve: %s: %s\n", o.model, err);
        model_free(m);
        return 1;
    }
    kiln_cli_chat_announce("serve", f, o.chat_template);
    const char *tmpl = o.chat_template;
    if (!tmpl && chat_has_template(f)) {
        /* a template kiln's Jinja subset cannot render would refuse every
         * chat request: try it once, and use the family's built-in format */
        chat_msg hi = {"user", "Hi"};
        char *text = NULL;
        if (chat_render(f, NULL, &hi, 1, 1, &text, err, sizeof err) != KILN_OK) {
            tmpl = chat_fallback_name(f);
            fprintf(stderr, "kiln serve: warning: the model's chat template failed (%s); using the built-in '%s'"
                            " format\n", err, tmpl);
        }
        free(text);
    }

    /* SIGINT/SIGTERM end the server: blocked in every thread, awaited below */
    sigset_t stop_sigs;
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGINT);
    sigaddset(&stop_sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    pthread_mutex_t tk_mu = PTHREAD_MUTEX_INITIALIZER;
    const char *base = strrchr(o.model, '/');
    srv_info info = {
        .model_id = o.alias ? o.alias : base ? base + 1 : o.model,
        .gguf = f,
        .tk = tk,
        .tk_mu = &tk_mu,
        .chat_template = tmpl,
        .n_ctx = model_n_ctx(m),
        .n_vocab = model_n_vocab(m),
        .default_max_tokens = (int)o.n_predict,
    };
    srv_engine_opts eo = {.slots = (int)o.parallel, .queue = (int)o.queue};
    srv_engine *e = srv_engine_start(m, tk, &eo, err, sizeof err);
    srv_http *h = NULL;
    if (e) {
        srv_http_opts ho = {.host = o.host, .port = (int)o.port, .api_key = o.api_key, .timeout_s = (int)o.timeout,
                            .request_timeout_s = (int)o.request_timeout,
                            .max_connections = (int)o.max_conn, .max_body = (size_t)o.max_body};
        h = srv_http_start(&info, e, &ho, err, sizeof err);
    }
    if (!h) {
        fprintf(stderr, "kiln serve: %s\n", err);
        rc = 1;
    } else {
        char kv[32];
        double mib = (double)model_kv_bytes(m) * (double)o.parallel / (1024.0 * 1024.0);
        snprintf(kv, sizeof kv, "%.1f MiB", mib);
        fprintf(stderr,
                "kiln serve: %s: %lld slot%s of %lld tokens (KV caches %s), queue %lld, loaded in %.2f s\n"
                "kiln serve: listening on http://%s:%lld\n",
                info.model_id, o.parallel, o.parallel == 1 ? "" : "s", (long long)model_n_ctx(m), kv, o.queue, load_s,
                o.host, o.port);
        fflush(stderr);
        int sig = 0;
        sigwait(&stop_sigs, &sig);
        fprintf(stderr, "kiln serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    srv_engine_stop(e);
    srv_http_stop(h);
    srv_engine_free(e);
    tok_free(tk);
    model_free(m);
    return rc;
}

#endif
