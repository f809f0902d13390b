/* kiln_tokenizer.h — kiln's tokenizers on their own, built from plain arrays
 * (no GGUF file): SentencePiece-style ("llama") and byte-level BPE ("gpt2",
 * with the gpt2 / llama-bpe / qwen2 pre-tokenizers). A model's own
 * tokenizer is reached through kiln_llm.h; this header is for tokenizing
 * without a model and for testing the tokenizers against references.
 * Include after kiln.h (it includes it).
 *
 * Invariants: kiln_tok_new copies the configuration (the arrays may go
 * away after it); a tokenizer is immutable and may be shared between
 * threads; every function is safe on any input bytes, and an id out of
 * range is an error (-1), never a crash. The semantics are those of
 * src/model/tokenizer.h, which these functions wrap.
 */
#ifndef KILN_TOKENIZER_H_PUBLIC
#define KILN_TOKENIZER_H_PUBLIC

#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_tok_kind { KILN_TOK_SPM = 0, KILN_TOK_BPE = 1 } kiln_tok_kind;

/* a byte string that need not be NUL-terminated */
typedef struct kiln_tok_str {
    const char *s;
    uint32_t n;
} kiln_tok_str;

typedef struct kiln_tok_config {
    kiln_tok_kind kind;
    int32_t n_vocab;
    const kiln_tok_str *tokens;  /* [n_vocab] (SPM: "▁" for spaces; BPE: gpt2 byte alphabet) */
    const float *scores;         /* [n_vocab] SPM merge priority, higher first; NULL: all 0 */
    const int32_t *token_types;  /* [n_vocab] GGUF token types (1 normal, 2 unknown, 3 control,
                                    4 user-defined, 5 unused, 6 byte); NULL: normal */
    int32_t n_merges;
    const kiln_tok_str *merges;  /* [n_merges] BPE merges "left right", rank = index */
    int32_t bos_id, eos_id, unk_id, pad_id, eot_id; /* -1: none */
    int add_bos, add_eos;        /* what add_special adds in kiln_tok_encode */
    int add_space_prefix;        /* SPM: prefix "▁" to the text */
    const char *pre;             /* BPE pre-tokenizer (tokenizer.ggml.pre); NULL or "" = gpt2 */
} kiln_tok_config;

typedef struct kiln_tokenizer kiln_tokenizer;
typedef struct kiln_tok_stream kiln_tok_stream;

/* build a tokenizer; on error *out is NULL and err says why */
KILN_API kiln_status kiln_tok_new(const kiln_tok_config *cfg, kiln_tokenizer **out, char *err, size_t errlen);
KILN_API void kiln_tok_free(kiln_tokenizer *t);
/* encode len bytes: writes at most cap ids, returns the full count (-1: too long) */
KILN_API int kiln_tok_encode(const kiln_tokenizer *t, const char *text, size_t len, int add_special,
                             int parse_special, int32_t *out, int cap);
/* decode ids: the full byte length (writes at most cap), or -1 with *bad_index */
KILN_API long kiln_tok_decode(const kiln_tokenizer *t, const int32_t *ids, int n, int special, char *buf,
                              size_t cap, int *bad_index);
/* one token's raw bytes: the full length, or -1 when id is out of range */
KILN_API int kiln_tok_token_to_piece(const kiln_tokenizer *t, int32_t id, int special, char *buf, int cap);
/* the id of an exact vocabulary string, or -1 */
KILN_API int32_t kiln_tok_lookup(const kiln_tokenizer *t, const char *s, size_t n);
/* 1 when id ends a generation (eos, eot or an end-of-turn control token) */
KILN_API int kiln_tok_is_eog(const kiln_tokenizer *t, int32_t id);
/* BPE: the pre-tokenizer alone; end offsets of the pieces (at most cap),
 * returns the count, or -1 for an SPM tokenizer */
KILN_API int kiln_tok_pretokenize(const kiln_tokenizer *t, const char *text, size_t len, int32_t *ends, int cap);
/* the pre-tokenizers' class of a code point: 0 other, 1 letter, 2 number, 3 whitespace */
KILN_API int kiln_tok_unicode_class(uint32_t cp);

/* streaming decode: only complete UTF-8 comes out (the start of a character
 * is held until its end arrives) */
KILN_API kiln_tok_stream *kiln_tok_stream_new(const kiln_tokenizer *t, int special, int at_start);
KILN_API void kiln_tok_stream_free(kiln_tok_stream *s);
/* 0 and the newly complete text (valid until the next call), or -1 for a bad id */
KILN_API int kiln_tok_stream_push(kiln_tok_stream *s, int32_t id, const char **text, size_t *len);
/* what is held back comes out as U+FFFD; the stream starts over */
KILN_API void kiln_tok_stream_flush(kiln_tok_stream *s, const char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
