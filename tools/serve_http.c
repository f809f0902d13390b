/* serve_http.c — kiln serve's HTTP side on libmicrohttpd: routes, limits,
 * the API key, and server-sent events for stream: true.
 *
 * Why libmicrohttpd: a small, long-maintained C HTTP/1.1 server packaged by
 * every distribution, with the limits a public socket needs built in (header
 * memory, connection count, idle timeout); kiln writes no HTTP parser.
 *
 * Threads: one per connection (MHD_USE_THREAD_PER_CONNECTION), so a handler
 * may block: a non-streaming request waits for its result; a stream's reader
 * waits for the next text, and sends an SSE comment after a second without
 * any, which both keeps proxies awake and finds a client that went away (the
 * write fails, MHD ends the request, and the request-completed callback marks
 * it cancelled: the engine frees its slot at its next step).
 *
 * Limits: body (max_body; 413), headers (MHD's connection memory; 431),
 * connections (max_connections, beyond which MHD refuses), idle time
 * (timeout_s), a request's whole time (request_timeout_s: a queued request
 * is refused, a running one ends with finish_reason "length"). Every answer other than a stream is JSON.
 */
#ifdef KILN_HAVE_SERVE

#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include "base.h"
#include "serve.h"

struct srv_http {
    struct MHD_Daemon *d;
    const srv_info *info;
    srv_engine *engine;
    srv_http_opts o;
};

typedef struct conn {
    srv_http *h;
    int route;          /* ROUTE_* */
    char *body;
    size_t len, cap;
    int too_big;
    srv_request *r;     /* streaming: the request being sent */
    size_t sent;        /* streaming: text bytes sent */
    int first, finished;
    char *pending;      /* streaming: an event not yet fully copied out */
    size_t pend_len, pend_at;
} conn;

enum { ROUTE_NONE, ROUTE_HEALTH, ROUTE_MODELS, ROUTE_COMPLETIONS, ROUTE_CHAT };

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, char *body /* malloc'd, taken */) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result respond_error(struct MHD_Connection *c, unsigned status, const char *msg) {
    return respond(c, status, srv_api_error_json((int)status, msg));
}

static int route_of(const char *url, const char *method, int *wrong_method) {
    static const struct {
        const char *path, *method;
        int route;
    } routes[] = {
        {"/health", "GET", ROUTE_HEALTH},
        {"/v1/health", "GET", ROUTE_HEALTH},
        {"/v1/models", "GET", ROUTE_MODELS},
        {"/models", "GET", ROUTE_MODELS},
        {"/v1/completions", "POST", ROUTE_COMPLETIONS},
        {"/completions", "POST", ROUTE_COMPLETIONS},
        {"/v1/chat/completions", "POST", ROUTE_CHAT},
        {"/chat/completions", "POST", ROUTE_CHAT},
    };
    *wrong_method = 0;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) {
            if (!strcmp(method, routes[i].method)) return routes[i].route;
            *wrong_method = 1;
        }
    return ROUTE_NONE;
}

static int authorized(srv_http *h, struct MHD_Connection *c) {
    if (!h->o.api_key) return 1;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!a || strncmp(a, "Bearer ", 7)) return 0;
    const char *k = a + 7, *want = h->o.api_key;
    size_t n = strlen(k), m = strlen(want);
    unsigned diff = (unsigned)(n != m);
    for (size_t i = 0; i < m; i++) diff |= (unsigned)(i < n ? k[i] : 0) ^ (unsigned)want[i];
    return diff == 0;
}

/* ---- streaming ---- */

static void set_pending(conn *k, char *ev) {
    free(k->pending);
    k->pending = ev;
    k->pend_len = strlen(ev);
    k->pend_at = 0;
}

static void append_pending(conn *k, const char *s) {
    size_t n = strlen(s);
    k->pending = kiln_xrealloc(k->pending, k->pend_len + n + 1);
    memcpy(k->pending + k->pend_len, s, n + 1);
    k->pend_len += n;
}

/* the next event of the stream, waiting up to a second for text */
static void next_event(conn *k) {
    srv_request *r = k->r;
    const srv_info *info = k->h->info;
    pthread_mutex_lock(&r->mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    while (!r->done && r->safe <= k->sent)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &until)) break;
    if (r->done && r->error[0]) {
        char *err = srv_api_error_json(500, r->error);
        size_t n = strlen(err);
        char *ev = kiln_xmalloc(n + 9);
        snprintf(ev, n + 9, "data: %s\n\n", err);
        free(err);
        set_pending(k, ev);
        append_pending(k, "data: [DONE]\n\n");
        k->finished = 1;
    } else if (r->safe > k->sent) {
        /* one event per token, as the text came, even when several are ready */
        size_t to = r->safe;
        for (int i = 0; i < r->n_gen; i++)
            if (r->off[i] > k->sent) {
                if (r->off[i] < to) to = r->off[i];
                break;
            }
        set_pending(k, srv_api_chunk(info, r, k->sent, to, k->first, 0));
        k->sent = to;
        k->first = 0;
    } else if (r->done) { /* every token sent: the finish reason */
        set_pending(k, srv_api_chunk(info, r, k->sent, r->len, k->first, 1));
        append_pending(k, "data: [DONE]\n\n");
        k->sent = r->len;
        k->finished = 1;
    } else set_pending(k, kiln_xstrdup(": keep-alive\n\n"));
    pthread_mutex_unlock(&r->mu);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    conn *k = cls;
    if (k->pend_at >= k->pend_len) {
        if (k->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        next_event(k);
    }
    size_t n = k->pend_len - k->pend_at;
    if (n > max) n = max;
    memcpy(buf, k->pending + k->pend_at, n);
    k->pend_at += n;
    return (ssize_t)n;
}

/* ---- requests ---- */

static enum MHD_Result run_request(srv_http *h, struct MHD_Connection *c, conn *k) {
    int status = 400;
    char msg[512];
    srv_request *r = srv_api_parse(h->info, k->route == ROUTE_CHAT, k->body ? k->body : "", k->len, &status, msg, sizeof msg);
    if (!r) return respond_error(c, (unsigned)status, msg);
    r->deadline = srv_now() + h->o.request_timeout_s;
    if (srv_engine_submit(h->engine, r)) {
        srv_request_release(r);
        return respond_error(c, 503, "the server is busy: every slot is in use and the queue is full; retry later");
    }
    if (r->stream) {
        k->r = r;
        k->first = 1;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, k, NULL);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    /* wait for the result; a client that closed its connection meanwhile
     * cancels the request (its slot is freed at the engine's next step) */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int fd = ci ? ci->connect_fd : -1;
    pthread_mutex_lock(&r->mu);
    while (!r->done) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 200 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        if (!pthread_cond_timedwait(&r->cv, &r->mu, &until) || fd < 0) continue;
        char b;
        if (recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) r->cancelled = 1;
    }
    char *body = r->error[0] ? srv_api_error_json(500, r->error) : srv_api_result_json(h->info, r);
    int failed = r->error[0] != 0;
    pthread_mutex_unlock(&r->mu);
    srv_request_release(r);
    return respond(c, failed ? 500 : MHD_HTTP_OK, body);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv_http *h = cls;
    conn *k = *con_cls;
    if (!k) {
        k = kiln_xcalloc(1, sizeof *k);
        k->h = h;
        *con_cls = k;
        int wrong_method;
        k->route = route_of(url, method, &wrong_method);
        if (k->route == ROUTE_NONE)
            return wrong_method ? respond_error(c, 405, "method not allowed on this path")
                                : respond_error(c, 404, "no such endpoint (kiln serves /v1/models, /v1/completions,"
                                                        " /v1/chat/completions, /health)");
        if (k->route != ROUTE_HEALTH && !authorized(h, c))
            return respond_error(c, 401, "a valid API key is required: Authorization: Bearer KEY");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > h->o.max_body) {
            char msg[128];
            snprintf(msg, sizeof msg, "the body is larger than the server's limit of %zu bytes", h->o.max_body);
            return respond_error(c, 413, msg);
        }
        if (k->route == ROUTE_HEALTH) {
            srv_load ld;
            srv_engine_load(h->engine, &ld);
            char *b = kiln_xmalloc(256);
            snprintf(b, 256,
                     "{\"status\":\"ok\",\"slots_processing\":%d,\"requests_waiting\":%d,"
                     "\"batched_calls\":%lld,\"batched_rows\":%lld}",
                     ld.busy, ld.waiting, ld.batched_calls, ld.batched_rows);
            return respond(c, MHD_HTTP_OK, b);
        }
        if (k->route == ROUTE_MODELS) return respond(c, MHD_HTTP_OK, srv_api_models_json(h->info));
        return MHD_YES; /* the body comes next */
    }
    if (*upload_size) {
        if (!k->too_big && k->len + *upload_size > h->o.max_body) {
            k->too_big = 1;
            free(k->body);
            k->body = NULL;
            k->len = 0;
        }
        if (!k->too_big) {
            if (k->len + *upload_size + 1 > k->cap) {
                k->cap = 2 * (k->len + *upload_size + 1);
                k->body = kiln_xrealloc(k->body, k->cap);
            }
            memcpy(k->body + k->len, upload, *upload_size);
            k->len += *upload_size;
            k->body[k->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (k->r) return MHD_YES; /* a stream already queued */
    if (k->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the body is larger than the server's limit of %zu bytes", h->o.max_body);
        return respond_error(c, 413, msg);
    }
    return run_request(h, c, k);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    conn *k = *con_cls;
    if (!k) return;
    if (k->r) {
        pthread_mutex_lock(&k->r->mu);
        if (!k->r->done) k->r->cancelled = 1; /* the client went away: the engine frees the slot */
        pthread_mutex_unlock(&k->r->mu);
        srv_request_release(k->r);
    }
    free(k->pending);
    free(k->body);
    free(k);
    *con_cls = NULL;
}

srv_http *srv_http_start(const srv_info *info, srv_engine *e, const srv_http_opts *o, char *err, size_t cap) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int gai = getaddrinfo(o->host, port, &hints, &ai);
    if (gai || !ai) {
        snprintf(err, cap, "cannot resolve host '%s': %s", o->host, gai_strerror(gai));
        return NULL;
    }
    srv_http *h = kiln_xcalloc(1, sizeof *h);
    h->info = info;
    h->engine = e;
    h->o = *o;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    h->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, h,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout_s,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d) {
        snprintf(err, cap, "cannot listen on %s:%d (in use, or not an address of this machine?)", o->host, o->port);
        free(h);
        return NULL;
    }
    return h;
}

void srv_http_stop(srv_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->d);
    free(h);
}

#endif
