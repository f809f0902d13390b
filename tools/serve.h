/* serve.h — what the parts of `kiln serve` share.
 *
 *   serve.c         the command: flags, loading, start and stop
 *   serve_engine.c  slots and the queue: one thread runs the model for every
 *                   request, each slot with its own KV cache
 *   serve_api.c     OpenAI request JSON -> a checked srv_request; responses
 *                   and errors as OpenAI-shaped JSON (cJSON)
 *   serve_http.c    HTTP (libmicrohttpd): routes, limits, auth, streaming
 *
 * A request is shared by the HTTP thread that made it and the engine thread
 * that runs it; both hold a reference and the last release frees it. Every
 * field after "results" is written by the engine under mu and read by the
 * HTTP side under mu; cancelled is the HTTP side's only write.
 */
#ifndef KILN_SERVE_H
#define KILN_SERVE_H

#ifdef KILN_HAVE_SERVE

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "sampler.h"
#include "tokenizer.h"

#define SRV_MAX_STOP 4

typedef struct srv_request {
    /* what to run (set before the request is queued, then read-only) */
    int chat, stream, echo;
    int32_t *prompt; /* prompt token ids */
    int n_prompt;
    int max_tokens;  /* generated tokens at most */
    sampler_params sp;
    float presence_penalty, frequency_penalty;
    int logprobs;    /* 1: the chosen token's log-probability per token */
    char *stop[SRV_MAX_STOP];
    int n_stop;
    char id[48];
    long long created;
    double deadline;  /* CLOCK_MONOTONIC seconds: past it the request ends ("length"); 0: none */

    /* results */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text;        /* generated text so far (complete UTF-8) */
    size_t len, cap;
    size_t safe;       /* text[0 .. safe) cannot become part of a stop string */
    double *lp;        /* logprobs: per generated token */
    size_t *off;       /* per generated token: where its text starts in text */
    int n_gen;
    int n_cached;      /* prompt tokens whose keys and values the slot held (usage.prompt_tokens_details.cached_tokens) */
    int done;          /* finished: finish is set */
    const char *finish; /* "stop", "length", or NULL while running */
    char error[256];   /* a failure inside the engine */
    int cancelled;     /* the client went away */
    int refs;
} srv_request;

srv_request *srv_request_new(void);
void srv_request_release(srv_request *r);

typedef struct srv_engine srv_engine;

typedef struct srv_engine_opts {
    int slots;       /* concurrent sequences */
    int queue;       /* requests waiting for a slot, at most */
} srv_engine_opts;

/* the engine owns nothing of m and tk; it starts its thread */
srv_engine *srv_engine_start(model *m, const tokenizer *tk, const srv_engine_opts *o, char *err, size_t cap);
/* stop: finish every request (waiters wake with an error), refuse new ones;
 * free after the HTTP side has stopped */
void srv_engine_stop(srv_engine *e);
void srv_engine_free(srv_engine *e);
/* 0 queued; -1 the queue is full (the caller answers 503) */
int srv_engine_submit(srv_engine *e, srv_request *r);
/* what the engine is doing, for /health and logs */
typedef struct srv_load {
    int busy, waiting;     /* slots running a request; requests queued for one */
    long long batched_calls; /* forward passes that decoded two or more slots in one call */
    long long batched_rows;  /* the rows (slot tokens) those passes decoded */
} srv_load;
void srv_engine_load(srv_engine *e, srv_load *out);

/* the server's fixed facts, for the API side */
typedef struct srv_info {
    const char *model_id;
    gguf_file *gguf;
    const tokenizer *tk;
    pthread_mutex_t *tk_mu; /* encodes are serialised */
    const char *chat_template; /* NULL: the model's own or the guess */
    int64_t n_ctx;
    int64_t n_vocab;
    int default_max_tokens;
} srv_info;

/* parse and check a request body for endpoint chat (1) or completion (0):
 * NULL and an HTTP status and message on bad input */
srv_request *srv_api_parse(const srv_info *info, int chat, const char *body, size_t len, int *status, char *msg,
                           size_t cap);
/* OpenAI-shaped JSON bodies, malloc'd */
char *srv_api_error_json(int status, const char *msg);
char *srv_api_models_json(const srv_info *info);
/* the finished response (non-streaming); r->mu held by the caller */
char *srv_api_result_json(const srv_info *info, const srv_request *r);
/* one server-sent event: "data: {...}\n\n" with text[from..to) (and the role on
 * the first chat chunk); final != 0: the finish_reason chunk */
char *srv_api_chunk(const srv_info *info, const srv_request *r, size_t from, size_t to, int first, int final);

double srv_now(void); /* CLOCK_MONOTONIC seconds */

typedef struct srv_http_opts {
    const char *host;
    int port;
    const char *api_key;
    int timeout_s;          /* idle connections are closed after this */
    int request_timeout_s;  /* a request's whole time: waiting for a slot and generating */
    int max_connections;
    size_t max_body;
} srv_http_opts;

typedef struct srv_http srv_http;
srv_http *srv_http_start(const srv_info *info, srv_engine *e, const srv_http_opts *o, char *err, size_t cap);
void srv_http_stop(srv_http *h);

#endif
#endif
