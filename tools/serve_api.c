/* serve_api.c — the OpenAI API's JSON for kiln serve (cJSON): a request body
 * checked field by field into an srv_request, and the response, stream chunk,
 * model list and error bodies.
 *
 * Checks: the body is valid UTF-8 without NUL bytes and one JSON object;
 * every field is known (an unknown one is a 400 naming it), of its type, and
 * in its range (integers exact, no NaN or huge values); messages have known
 * roles and text content; the prompt fits the context with room for one
 * token. Errors carry the HTTP status to answer with.
 *
 * Invariants: nothing here touches the model; the tokenizer is used under
 * info->tk_mu; every returned string is malloc'd.
 */
#ifdef KILN_HAVE_SERVE

#include <cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base.h"
#include "chat.h"
#include "kiln_cli.h"
#include "serve.h"

static int bad(int *status, char *msg, size_t cap, int code, const char *fmt, ...) {
    *status = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return -1;
}

/* strict UTF-8: no overlongs, no surrogates, nothing past U+10FFFF, no NUL */
static int utf8_ok(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = p[i], cp;
        size_t k;
        if (c == 0) return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) k = 1, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef) k = 2, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4) k = 3, cp = c & 0x07;
        else return 0;
        if (n - i <= k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (p[i + j] & 0x3f);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* a number field in [lo, hi] (integer: exact) */
static int get_num(const cJSON *it, double lo, double hi, int integer, double *out, int *status, char *msg,
                   size_t cap) {
    if (!cJSON_IsNumber(it))
        return bad(status, msg, cap, 400, "'%s' must be a number", it->string);
    double v = it->valuedouble;
    if (!isfinite(v) || v < lo || v > hi || (integer && v != floor(v)))
        return bad(status, msg, cap, 400, "'%s' must be %s in [%.17g, %.17g]", it->string, integer ? "an integer" : "a number",
                   lo, hi);
    *out = v;
    return 0;
}

/* message content: a string, or a list of {"type": "text", "text": ...} parts */
static char *content_text(const cJSON *c, int i, int *status, char *msg, size_t cap) {
    if (cJSON_IsString(c)) return kiln_xstrdup(c->valuestring);
    if (cJSON_IsNull(c)) return kiln_xstrdup("");
    if (!cJSON_IsArray(c)) {
        bad(status, msg, cap, 400, "messages[%d].content must be a string or a list of text parts", i);
        return NULL;
    }
    size_t n = 1;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type"), *x = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") || !cJSON_IsString(x)) {
            bad(status, msg, cap, 400, "messages[%d].content: only {\"type\": \"text\", \"text\": ...} parts are supported", i);
            return NULL;
        }
        n += strlen(x->valuestring);
    }
    char *s = kiln_xmalloc(n);
    s[0] = 0;
    cJSON_ArrayForEach(part, c) strcat(s, cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring);
    return s;
}

/* messages -> prompt text through the chat template */
static char *render_messages(const srv_info *info, const cJSON *msgs, int *status, char *msg, size_t cap) {
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) < 1) {
        bad(status, msg, cap, 400, "'messages' must be a non-empty list");
        return NULL;
    }
    int n = cJSON_GetArraySize(msgs);
    if (n > 4096) {
        bad(status, msg, cap, 400, "'messages' has %d entries; at most 4096", n);
        return NULL;
    }
    chat_msg *cm = kiln_xcalloc((size_t)n, sizeof *cm);
    char **owned = kiln_xcalloc((size_t)n, sizeof *owned);
    char *out = NULL;
    int i = 0, ok = 1;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"), *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            ok = bad(status, msg, cap, 400, "messages[%d] must be an object with a string 'role'", i) == 0;
            break;
        }
        const char *r = role->valuestring;
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool") && strcmp(r, "developer")) {
            ok = bad(status, msg, cap, 400, "messages[%d].role '%.40s' is not system, user, assistant or tool", i, r) == 0;
            break;
        }
        const cJSON *f;
        cJSON_ArrayForEach(f, m) {
            if (strcmp(f->string, "role") && strcmp(f->string, "content") && strcmp(f->string, "name")) {
                ok = bad(status, msg, cap, 400, "messages[%d]: unknown field '%.40s'", i, f->string) == 0;
                break;
            }
        }
        if (!ok) break;
        if (!c) {
            ok = bad(status, msg, cap, 400, "messages[%d] has no 'content'", i) == 0;
            break;
        }
        if (!(owned[i] = content_text(c, i, status, msg, cap))) {
            ok = 0;
            break;
        }
        cm[i].role = strcmp(r, "developer") ? r : "system";
        cm[i].content = owned[i];
        i++;
    }
    if (ok) {
        char err[512];
        if (chat_render(info->gguf, info->chat_template, cm, n, 1, &out, err, sizeof err) != KILN_OK)
            bad(status, msg, cap, 400, "the chat template refused the messages: %s", err);
    }
    for (int k = 0; k < n; k++) free(owned[k]);
    free(owned);
    free(cm);
    return out;
}

static int parse_stop(srv_request *r, const cJSON *it, int *status, char *msg, size_t cap) {
    /* a repeated "stop" key: the last one counts, as for every other field */
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    r->n_stop = 0;
    if (cJSON_IsNull(it)) return 0;
    if (cJSON_IsString(it)) {
        if (!it->valuestring[0]) return bad(status, msg, cap, 400, "'stop' strings must not be empty");
        r->stop[r->n_stop++] = kiln_xstrdup(it->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) > SRV_MAX_STOP)
        return bad(status, msg, cap, 400, "'stop' must be a string or a list of at most %d strings", SRV_MAX_STOP);
    const cJSON *s;
    cJSON_ArrayForEach(s, it) {
        if (!cJSON_IsString(s) || !s->valuestring[0] || strlen(s->valuestring) > 256)
            return bad(status, msg, cap, 400, "'stop' entries must be non-empty strings of at most 256 bytes");
        r->stop[r->n_stop++] = kiln_xstrdup(s->valuestring);
    }
    return 0;
}

/* one field of the body into r (prompt and messages are handled by the caller) */
static int parse_field(const srv_info *info, int chat, srv_request *r, const cJSON *it, long long *max_tokens,
                       int *seed_set, int *status, char *msg, size_t cap) {
    const char *k = it->string;
    double v;
#define NUM(lo, hi, integer) (get_num(it, lo, hi, integer, &v, status, msg, cap))
    if (!strcmp(k, "model") || !strcmp(k, "user")) {
        if (!cJSON_IsString(it) && !cJSON_IsNull(it)) return bad(status, msg, cap, 400, "'%s' must be a string", k);
    } else if (!strcmp(k, "stream")) {
        if (!cJSON_IsBool(it) && !cJSON_IsNull(it)) return bad(status, msg, cap, 400, "'stream' must be true or false");
        r->stream = cJSON_IsTrue(it);
    } else if (!strcmp(k, "stream_options")) {
        if (!cJSON_IsObject(it) && !cJSON_IsNull(it)) return bad(status, msg, cap, 400, "'stream_options' must be an object");
    } else if (!strcmp(k, "max_tokens") || !strcmp(k, "max_completion_tokens") || !strcmp(k, "n_predict")) {
        if (cJSON_IsNull(it)) return 0;
        if (NUM(0, 1 << 30, 1)) return -1;
        *max_tokens = (long long)v;
    } else if (!strcmp(k, "temperature")) {
        if (cJSON_IsNull(it)) return 0;
        if (NUM(0, 100, 0)) return -1;
        r->sp.temperature = (float)v;
    } else if (!strcmp(k, "top_p")) {
        if (cJSON_IsNull(it)) return 0;
        if (NUM(0, 1, 0)) return -1;
        r->sp.top_p = (float)v;
    } else if (!strcmp(k, "min_p")) {
        if (NUM(0, 1, 0)) return -1;
        r->sp.min_p = (float)v;
    } else if (!strcmp(k, "top_k")) {
        if (NUM(0, (double)info->n_vocab, 1)) return -1;
        r->sp.top_k = (int32_t)v;
    } else if (!strcmp(k, "repeat_penalty")) {
        if (NUM(1e-3, 100, 0)) return -1;
        r->sp.repeat_penalty = (float)v;
    } else if (!strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty")) {
        if (cJSON_IsNull(it)) return 0;
        if (NUM(-2, 2, 0)) return -1;
        if (k[0] == 'p') r->presence_penalty = (float)v;
        else r->frequency_penalty = (float)v;
    } else if (!strcmp(k, "seed")) {
        if (cJSON_IsNull(it)) return 0;
        if (NUM(-9007199254740992.0, 9007199254740992.0, 1)) return -1; /* exact in a double */
        r->sp.seed = (uint64_t)(long long)v;
        *seed_set = 1;
    } else if (!strcmp(k, "stop")) {
        return parse_stop(r, it, status, msg, cap);
    } else if (!strcmp(k, "n")) {
        if (cJSON_IsNull(it)) return 0;
        if (NUM(1, 1, 1)) return bad(status, msg, cap, 400, "'n' must be 1 (one choice per request)");
    } else if (!strcmp(k, "logprobs")) {
        if (cJSON_IsNull(it)) return 0;
        if (chat) {
            if (!cJSON_IsBool(it)) return bad(status, msg, cap, 400, "'logprobs' must be true or false");
            r->logprobs = cJSON_IsTrue(it);
        } else {
            if (NUM(0, 0, 1)) return bad(status, msg, cap, 400, "'logprobs' must be 0 or null: kiln returns the chosen token's log-probability only");
            r->logprobs = 1;
        }
    } else if (!strcmp(k, "top_logprobs")) {
        if (cJSON_IsNull(it)) return 0;
        if (NUM(0, 0, 1)) return bad(status, msg, cap, 400, "'top_logprobs' must be 0: kiln returns the chosen token's log-probability only");
    } else if (!strcmp(k, "logit_bias")) {
        if (!cJSON_IsNull(it) && !(cJSON_IsObject(it) && !it->child))
            return bad(status, msg, cap, 400, "'logit_bias' is not supported (only {} or null)");
    } else if (!strcmp(k, "echo") && !chat) {
        if (!cJSON_IsBool(it) || cJSON_IsTrue(it)) return bad(status, msg, cap, 400, "'echo' must be false (not supported)");
    } else {
        return bad(status, msg, cap, 400, "unknown field '%.60s'", k);
    }
#undef NUM
    return 0;
}

static uint64_t fresh_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    static unsigned long long counter;
    return ((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30)) + 0x9e3779b97f4a7c15ull * __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
}

srv_request *srv_api_parse(const srv_info *info, int chat, const char *body, size_t len, int *status, char *msg,
                           size_t cap) {
    if (!utf8_ok((const unsigned char *)body, len)) {
        bad(status, msg, cap, 400, "the body is not valid UTF-8 text");
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!j) {
        bad(status, msg, cap, 400, "the body is not valid JSON");
        return NULL;
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        bad(status, msg, cap, 400, "the body must be a JSON object");
        return NULL;
    }
    srv_request *r = srv_request_new();
    r->chat = chat;
    sampler_params_init(&r->sp);
    long long max_tokens = -1;
    int seed_set = 0, failed = 0;
    const cJSON *prompt = NULL, *msgs = NULL, *it;
    cJSON_ArrayForEach(it, j) {
        if (chat && !strcmp(it->string, "messages")) msgs = it;
        else if (!chat && !strcmp(it->string, "prompt")) prompt = it;
        else if (parse_field(info, chat, r, it, &max_tokens, &seed_set, status, msg, cap)) {
            failed = 1;
            break;
        }
    }
    char *text = NULL;
    if (!failed && chat) {
        if (!msgs) failed = bad(status, msg, cap, 400, "'messages' is required") != 0;
        else if (!(text = render_messages(info, msgs, status, msg, cap))) failed = 1;
    } else if (!failed) {
        if (prompt && cJSON_IsArray(prompt) && cJSON_GetArraySize(prompt) == 1) prompt = cJSON_GetArrayItem(prompt, 0);
        if (!prompt) failed = bad(status, msg, cap, 400, "'prompt' is required") != 0;
        else if (!cJSON_IsString(prompt)) failed = bad(status, msg, cap, 400, "'prompt' must be a string") != 0;
        else text = kiln_xstrdup(prompt->valuestring);
    }
    cJSON_Delete(j);
    if (!failed) {
        pthread_mutex_lock(info->tk_mu);
        r->n_prompt = kiln_cli_encode(info->tk, text, chat, &r->prompt);
        pthread_mutex_unlock(info->tk_mu);
        if (r->n_prompt <= 0)
            failed = bad(status, msg, cap, 400, "the prompt is %s", r->n_prompt < 0 ? "too long" : "empty") != 0;
        else if (r->n_prompt >= info->n_ctx)
            failed = bad(status, msg, cap, 400,
                         "the prompt has %d tokens; the context holds %lld, with room for at least one generated token",
                         r->n_prompt, (long long)info->n_ctx) != 0;
    }
    free(text);
    if (failed) {
        srv_request_release(r);
        return NULL;
    }
    if (!seed_set) r->sp.seed = fresh_seed();
    long long room = info->n_ctx - r->n_prompt;
    if (max_tokens < 0) max_tokens = info->default_max_tokens >= 0 ? info->default_max_tokens : room;
    r->max_tokens = (int)(max_tokens < room + 1 ? max_tokens : room + 1);
    if (r->logprobs) r->lp = kiln_xcalloc((size_t)r->max_tokens + 1, sizeof *r->lp);
    r->off = kiln_xcalloc((size_t)r->max_tokens + 1, sizeof *r->off);
    static unsigned long long next_id;
    snprintf(r->id, sizeof r->id, "%s-%llx%04llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)time(NULL),
             __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED) & 0xffff);
    r->created = (long long)time(NULL);
    return r;
}

/* ---- responses ---- */

static char *print_free(cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) return kiln_xstrdup("{}");
    char *out = kiln_xstrdup(s); /* cJSON's allocator is not ours to free with */
    cJSON_free(s);
    return out;
}

char *srv_api_error_json(int status, const char *msg) {
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", msg);
    const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
                     : status == 503 ? "server_overloaded" : status >= 500 ? "server_error" : "invalid_request_error";
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    return print_free(j);
}

char *srv_api_models_json(const srv_info *info) {
    cJSON *j = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(j, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "object", "list");
    cJSON_AddStringToObject(m, "id", info->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "kiln");
    cJSON_AddItemToArray(d, m);
    return print_free(j);
}

static cJSON *head(const srv_info *info, const srv_request *r, int chunk) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", r->id);
    cJSON_AddStringToObject(j, "object", r->chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                 : "text_completion");
    cJSON_AddNumberToObject(j, "created", (double)r->created);
    cJSON_AddStringToObject(j, "model", info->model_id);
    return j;
}

static cJSON *str_n(const char *s, size_t n) {
    char *t = kiln_xmalloc(n + 1);
    memcpy(t, s, n);
    t[n] = 0;
    cJSON *j = cJSON_CreateString(t);
    free(t);
    return j;
}

/* the chosen tokens' log-probabilities among tokens [a, b) whose text ends by `to` */
static cJSON *logprobs_json(const srv_request *r, size_t to) {
    cJSON *lp = cJSON_CreateObject();
    if (r->chat) {
        cJSON *c = cJSON_AddArrayToObject(lp, "content");
        for (int i = 0; i < r->n_gen && r->off[i] < to; i++) {
            size_t end = i + 1 < r->n_gen ? r->off[i + 1] : r->len;
            if (end > to) end = to;
            cJSON *t = cJSON_CreateObject();
            cJSON_AddItemToObject(t, "token", str_n(r->text + r->off[i], end - r->off[i]));
            cJSON_AddNumberToObject(t, "logprob", r->lp[i]);
            cJSON_AddNullToObject(t, "bytes");
            cJSON_AddArrayToObject(t, "top_logprobs");
            cJSON_AddItemToArray(c, t);
        }
    } else {
        cJSON *toks = cJSON_AddArrayToObject(lp, "tokens"), *lps = cJSON_AddArrayToObject(lp, "token_logprobs");
        cJSON *offs = cJSON_AddArrayToObject(lp, "text_offset");
        for (int i = 0; i < r->n_gen && r->off[i] < to; i++) {
            size_t end = i + 1 < r->n_gen ? r->off[i + 1] : r->len;
            if (end > to) end = to;
            cJSON_AddItemToArray(toks, str_n(r->text + r->off[i], end - r->off[i]));
            cJSON_AddItemToArray(lps, cJSON_CreateNumber(r->lp[i]));
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)r->off[i]));
        }
        cJSON_AddNullToObject(lp, "top_logprobs");
    }
    return lp;
}

/* OpenAI's usage object; cached_tokens: the prompt's tokens the slot held */
static void add_usage(cJSON *j, const srv_request *r) {
    cJSON *u = cJSON_AddObjectToObject(j, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", r->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + r->n_gen);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", r->n_cached);
}
char *srv_api_result_json(const srv_info *info, const srv_request *r) {
    cJSON *j = head(info, r, 0), *ch = cJSON_AddArrayToObject(j, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (r->chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddItemToObject(m, "content", str_n(r->text, r->len));
    } else cJSON_AddItemToObject(c, "text", str_n(r->text, r->len));
    if (r->logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs_json(r, r->len));
    else cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", r->finish ? r->finish : "stop");
    cJSON_AddItemToArray(ch, c);
    add_usage(j, r);
    return print_free(j);
}

char *srv_api_chunk(const srv_info *info, const srv_request *r, size_t from, size_t to, int first, int final) {
    cJSON *j = head(info, r, 1), *ch = cJSON_AddArrayToObject(j, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (r->chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (first) cJSON_AddStringToObject(d, "role", "assistant");
        if (!final || to > from) cJSON_AddItemToObject(d, "content", str_n(r->text + from, to - from));
    } else cJSON_AddItemToObject(c, "text", str_n(r->text + from, to - from));
    cJSON_AddNullToObject(c, "logprobs");
    if (final) cJSON_AddStringToObject(c, "finish_reason", r->finish ? r->finish : "stop");
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(ch, c);
    if (final) {
        add_usage(j, r);
    }
    char *body = print_free(j);
    size_t n = strlen(body);
    char *ev = kiln_xmalloc(n + 9);
    memcpy(ev, "data: ", 6);
    memcpy(ev + 6, body, n);
    memcpy(ev + 6 + n, "\n\n", 3);
    free(body);
    return ev;
}

#endif
