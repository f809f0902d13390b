/* tokenizer_public.c — include/kiln_tokenizer.h over tokenizer.h: the public
 * names, the configuration copied field by field, NULL checks.
 *
 * Invariant: a kiln_tokenizer is a tokenizer and a kiln_tok_stream a
 * tok_stream; kiln_tok_str has tok_str's layout (checked below), so string
 * arrays pass through without copies (tok_new copies them itself).
 */
#include <stddef.h>

#include "kiln_tokenizer.h"
#include "tokenizer.h"
#include "tokenizer_impl.h"

_Static_assert(sizeof(kiln_tok_str) == sizeof(tok_str) && offsetof(kiln_tok_str, n) == offsetof(tok_str, n),
               "kiln_tok_str has tok_str's layout");
_Static_assert((int)KILN_TOK_SPM == (int)TOK_KIND_SPM && (int)KILN_TOK_BPE == (int)TOK_KIND_BPE, "kinds");

#define T(t) ((const tokenizer *)(t))

kiln_status kiln_tok_new(const kiln_tok_config *c, kiln_tokenizer **out, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!out) return KILN_ERR_INVALID;
    *out = NULL;
    if (!c) return KILN_ERR_INVALID;
    tok_config t;
    tok_config_init(&t);
    t.kind = (tok_kind)c->kind;
    t.n_vocab = c->n_vocab;
    t.tokens = (const tok_str *)(const void *)c->tokens;
    t.scores = c->scores;
    t.token_types = c->token_types;
    t.n_merges = c->n_merges;
    t.merges = (const tok_str *)(const void *)c->merges;
    t.bos_id = c->bos_id;
    t.eos_id = c->eos_id;
    t.unk_id = c->unk_id;
    t.pad_id = c->pad_id;
    t.eot_id = c->eot_id;
    t.add_bos = c->add_bos;
    t.add_eos = c->add_eos;
    t.add_space_prefix = c->add_space_prefix;
    t.pre = c->pre;
    tokenizer *tk = NULL;
    kiln_status s = tok_new(&t, &tk, err, errlen);
    *out = (kiln_tokenizer *)tk;
    return s;
}

void kiln_tok_free(kiln_tokenizer *t) { tok_free((tokenizer *)t); }

int kiln_tok_encode(const kiln_tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                    int32_t *out, int cap) {
    if (!t || (!text && len) || cap < 0 || (!out && cap)) return -1;
    return tok_encode(T(t), text ? text : "", len, add_special, parse_special, out, cap);
}

long kiln_tok_decode(const kiln_tokenizer *t, const int32_t *ids, int n, int special, char *buf, size_t cap,
                     int *bad_index) {
    if (!t || n < 0 || (!ids && n) || (!buf && cap)) return -1;
    return tok_decode(T(t), ids, n, special, buf, cap, bad_index);
}

int kiln_tok_token_to_piece(const kiln_tokenizer *t, int32_t id, int special, char *buf, int cap) {
    if (!t || cap < 0 || (!buf && cap)) return -1;
    return tok_token_to_piece(T(t), id, special, buf, cap);
}

int32_t kiln_tok_lookup(const kiln_tokenizer *t, const char *s, size_t n) {
    return t && (s || !n) ? tok_lookup(T(t), s ? s : "", n) : -1;
}

int kiln_tok_is_eog(const kiln_tokenizer *t, int32_t id) { return t ? tok_is_eog(T(t), id) : 0; }

int kiln_tok_pretokenize(const kiln_tokenizer *t, const char *text, size_t len, int32_t *ends, int cap) {
    if (!t || (!text && len) || cap < 0 || (!ends && cap)) return -1;
    return tok_pretokenize(T(t), text ? text : "", len, ends, cap);
}

int kiln_tok_unicode_class(uint32_t cp) { return tok_unicode_class(cp); }

kiln_tok_stream *kiln_tok_stream_new(const kiln_tokenizer *t, int special, int at_start) {
    return t ? (kiln_tok_stream *)tok_stream_new(T(t), special, at_start) : NULL;
}

void kiln_tok_stream_free(kiln_tok_stream *s) { tok_stream_free((tok_stream *)s); }

int kiln_tok_stream_push(kiln_tok_stream *s, int32_t id, const char **text, size_t *len) {
    if (!s || !text || !len) return -1;
    return tok_stream_push((tok_stream *)s, id, text, len);
}

void kiln_tok_stream_flush(kiln_tok_stream *s, const char **text, size_t *len) {
    if (!s || !text || !len) return;
    tok_stream_flush((tok_stream *)s, text, len);
}
