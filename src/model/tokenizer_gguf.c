/* tokenizer_gguf.c — fill a tok_config from GGUF metadata and build the
 * tokenizer (see tokenizer_gguf.h for the keys and defaults).
 *
 * Invariants: the config's token and merge texts point into the file (valid
 * while it is open; tok_new copies them); the scratch arrays made here are
 * freed before returning on every path. Arrays whose length differs from the
 * vocabulary, non-string tokens, out-of-range ids and flags of the wrong type
 * are errors that name the key.
 */
#include "tokenizer_gguf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

/* a string-array key as tok_strs; NULL kv (absent) gives *n = 0 */
static kiln_status str_array(gguf_file *f, const char *key, int required, tok_str **out, int64_t *n, char *err,
                             size_t cap) {
    *out = NULL;
    *n = 0;
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) {
        if (required) return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: the model file has no %s", key);
        return KILN_OK;
    }
    if (kv->type != GGUF_TYPE_ARRAY || kv->elem != GGUF_TYPE_STRING || !kv->strs)
        return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: %s is not an array of strings", key);
    if (kv->count > (uint64_t)(1 << 28))
        return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: %s has too many entries (%llu)", key,
                       (unsigned long long)kv->count);
    tok_str *s = kiln_xcalloc(kv->count ? (size_t)kv->count : 1, sizeof *s);
    for (uint64_t i = 0; i < kv->count; i++) {
        if (kv->strs[i].len > UINT32_MAX) {
            free(s);
            return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: %s[%llu] is too long", key, (unsigned long long)i);
        }
        s[i].s = kv->strs[i].ptr;
        s[i].n = (uint32_t)kv->strs[i].len;
    }
    *out = s;
    *n = (int64_t)kv->count;
    return KILN_OK;
}

/* an optional id key: absent -> -1 */
static kiln_status id_key(gguf_file *f, const char *key, int64_t n_vocab, int32_t *out, char *err, size_t cap) {
    int64_t v = -1;
    kiln_status s = gguf_get_int_or(f, key, -1, INT64_MAX, -1, &v);
    if (s) return kiln_fail(err, cap, s, "tokenizer: %s", gguf_error(f));
    if (v >= n_vocab)
        return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: %s = %lld is outside the vocabulary of %lld tokens", key,
                       (long long)v, (long long)n_vocab);
    *out = (int32_t)v;
    return KILN_OK;
}

static kiln_status bool_key(gguf_file *f, const char *key, int dflt, int *out, char *err, size_t cap) {
    kiln_status s = gguf_get_bool_or(f, key, dflt, out);
    if (s) return kiln_fail(err, cap, s, "tokenizer: %s", gguf_error(f));
    return KILN_OK;
}

kiln_status tok_from_gguf(gguf_file *f, tokenizer **out, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!out) return kiln_fail(err, cap, KILN_ERR_INVALID, "tokenizer: no output pointer");
    *out = NULL;
    if (!f) return kiln_fail(err, cap, KILN_ERR_INVALID, "tokenizer: no file");

    tok_config cfg;
    tok_config_init(&cfg);
    gguf_str name;
    if (gguf_get_name(f, "tokenizer.ggml.model", &name)) {
        if (!gguf_find(f, "tokenizer.ggml.model"))
            return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: the model file has no tokenizer (%s)", gguf_error(f));
        return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: %s", gguf_error(f));
    }
    char kind_name[64], pre_name[64] = "";
    snprintf(kind_name, sizeof kind_name, "%.*s", (int)(name.len < 63 ? name.len : 63), name.ptr);
    int kind = name.len < 63 ? tok_kind_from_name(kind_name) : -1;
    if (kind < 0)
        return kiln_fail(err, cap, KILN_ERR_UNSUPPORTED,
                       "tokenizer: tokenizer.ggml.model '%s' is not supported (kiln knows llama = SentencePiece, "
                       "gpt2 = byte-level BPE)",
                       kind_name);
    cfg.kind = (tok_kind)kind;
    if (gguf_find(f, "tokenizer.ggml.pre")) {
        gguf_str pre;
        if (gguf_get_name(f, "tokenizer.ggml.pre", &pre))
            return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: %s", gguf_error(f));
        if (pre.len >= sizeof pre_name)
            return kiln_fail(err, cap, KILN_ERR_UNSUPPORTED, "tokenizer: unsupported pre-tokenizer (name of %llu bytes)",
                           (unsigned long long)pre.len);
        memcpy(pre_name, pre.ptr, (size_t)pre.len);
        pre_name[pre.len] = 0;
        if (memchr(pre_name, 0, (size_t)pre.len))
            return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: tokenizer.ggml.pre contains a NUL byte");
    }
    cfg.pre = pre_name;

    tok_str *tokens = NULL, *merges = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    int64_t n_vocab = 0, n_merges = 0;
    kiln_status s = str_array(f, "tokenizer.ggml.tokens", 1, &tokens, &n_vocab, err, cap);
    if (!s && n_vocab == 0) s = kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens is empty");
    if (!s && cfg.kind == TOK_KIND_BPE) s = str_array(f, "tokenizer.ggml.merges", 0, &merges, &n_merges, err, cap);

    const gguf_kv *kv = s ? NULL : gguf_find(f, "tokenizer.ggml.scores");
    if (kv) {
        if (kv->type != GGUF_TYPE_ARRAY || (int64_t)kv->count != n_vocab)
            s = kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: tokenizer.ggml.scores must be an array of %lld numbers",
                        (long long)n_vocab);
        else {
            scores = kiln_xmalloc((size_t)n_vocab * sizeof *scores);
            for (int64_t i = 0; i < n_vocab && !s; i++) {
                double v;
                if (gguf_arr_float(kv, (uint64_t)i, &v))
                    s = kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: tokenizer.ggml.scores[%lld] is not a number",
                                (long long)i);
                scores[i] = (float)v;
            }
        }
    }
    kv = s ? NULL : gguf_find(f, "tokenizer.ggml.token_type");
    if (kv) {
        if (kv->type != GGUF_TYPE_ARRAY || (int64_t)kv->count != n_vocab)
            s = kiln_fail(err, cap, KILN_ERR_FORMAT,
                        "tokenizer: tokenizer.ggml.token_type must be an array of %lld integers", (long long)n_vocab);
        else {
            types = kiln_xmalloc((size_t)n_vocab * sizeof *types);
            for (int64_t i = 0; i < n_vocab && !s; i++) {
                int64_t v;
                if (gguf_arr_int(kv, (uint64_t)i, &v) || v < 0 || v > TOK_TYPE_BYTE)
                    s = kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: tokenizer.ggml.token_type[%lld] is not a token type",
                                (long long)i);
                else types[i] = (int32_t)v;
            }
        }
    }
    if (!s) s = id_key(f, "tokenizer.ggml.bos_token_id", n_vocab, &cfg.bos_id, err, cap);
    if (!s) s = id_key(f, "tokenizer.ggml.eos_token_id", n_vocab, &cfg.eos_id, err, cap);
    if (!s) s = id_key(f, "tokenizer.ggml.unknown_token_id", n_vocab, &cfg.unk_id, err, cap);
    if (!s) s = id_key(f, "tokenizer.ggml.padding_token_id", n_vocab, &cfg.pad_id, err, cap);
    if (!s) s = id_key(f, "tokenizer.ggml.eot_token_id", n_vocab, &cfg.eot_id, err, cap);
    int spm = cfg.kind == TOK_KIND_SPM;
    if (!s) s = bool_key(f, "tokenizer.ggml.add_bos_token", spm, &cfg.add_bos, err, cap);
    if (!s) s = bool_key(f, "tokenizer.ggml.add_eos_token", 0, &cfg.add_eos, err, cap);
    if (!s) s = bool_key(f, "tokenizer.ggml.add_space_prefix", spm, &cfg.add_space_prefix, err, cap);
    /* a flag that asks for a token the file does not name: do what can be done */
    if (cfg.add_bos && cfg.bos_id < 0) cfg.add_bos = 0;
    if (cfg.add_eos && cfg.eos_id < 0) cfg.add_eos = 0;

    if (!s) {
        cfg.n_vocab = (int32_t)n_vocab;
        cfg.tokens = tokens;
        cfg.scores = scores;
        cfg.token_types = types;
        cfg.n_merges = (int32_t)n_merges;
        cfg.merges = merges;
        s = tok_new(&cfg, out, err, cap);
    }
    free(tokens);
    free(merges);
    free(scores);
    free(types);
    return s;
}
