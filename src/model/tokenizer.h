/* tokenizer.h — text <-> token ids for the language models kiln runs.
 *
 * Two kinds, chosen by the GGUF key tokenizer.ggml.model:
 *   "llama" -> TOK_KIND_SPM: SentencePiece-style. Spaces become U+2581 ("▁"),
 *              then adjacent symbols (starting from UTF-8 characters) are merged
 *              greedily, the pair whose concatenation is a vocabulary token with
 *              the highest score first (leftmost on ties); characters that are
 *              not in the vocabulary fall back to byte tokens "<0xXX>".
 *   "gpt2"  -> TOK_KIND_BPE: byte-level BPE. The text is split by the model's
 *              pre-tokenizer (tokenizer.ggml.pre: gpt2 / llama-bpe / qwen2
 *              regexes, implemented as hand-written scanners), each piece's bytes
 *              are mapped to the gpt2 printable alphabet, and merges are applied
 *              lowest rank first (leftmost on ties).
 *
 * The tokenizer does not know about GGUF: it is built from plain arrays
 * (tok_config), which the model loader fills from the file's metadata. tok_new
 * copies everything, so the caller's arrays (e.g. a mapped file) may go away.
 *
 * Special tokens: before the kind-specific algorithm, the text is cut at
 * literal occurrences of user-defined tokens (always) and of control/unknown
 * tokens (only with parse_special), leftmost and longest first; each such
 * occurrence becomes that single token.
 *
 * Decoding never fails on a valid id; an id outside [0, n_vocab) is an error
 * (-1), not a crash. tok_stream decodes one id at a time and only ever hands out
 * complete, valid UTF-8 (it holds back the start of a multi-byte character until
 * the rest arrives, and replaces bytes that can never form one with U+FFFD).
 *
 * All functions are safe on any input bytes (invalid UTF-8 included). A
 * tokenizer is immutable after tok_new and may be shared between threads.
 */
#ifndef KILN_TOKENIZER_H
#define KILN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

typedef enum tok_kind { TOK_KIND_SPM = 0, TOK_KIND_BPE = 1 } tok_kind;

/* token types, with the values GGUF's tokenizer.ggml.token_type uses */
typedef enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6
} tok_type;

/* BPE pre-tokenizers (the split regexes of the model families kiln supports) */
typedef enum tok_pre {
    TOK_PRE_GPT2 = 0, /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    TOK_PRE_LLAMA3,   /* (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
                         \s*[\r\n]+|\s+(?!\S)|\s+ ; whole-word vocabulary hits skip the merges */
    TOK_PRE_QWEN2     /* as LLAMA3 but \p{N} one digit at a time, merges never skipped */
} tok_pre;

/* a byte string that need not be NUL-terminated */
typedef struct tok_str {
    const char *s;
    uint32_t n;
} tok_str;

typedef struct tok_config {
    tok_kind kind;
    int32_t n_vocab;
    const tok_str *tokens;       /* [n_vocab] token text (SPM: with "▁" for spaces; BPE: gpt2 alphabet) */
    const float *scores;         /* [n_vocab] SPM merge priority (higher first); NULL: all 0 */
    const int32_t *token_types;  /* [n_vocab] tok_type values; NULL: NORMAL, except "<0xXX>" -> BYTE for SPM */
    int32_t n_merges;
    const tok_str *merges;       /* [n_merges] BPE merges "left right", rank = index */
    int32_t bos_id, eos_id, unk_id, pad_id, eot_id; /* -1: none */
    int add_bos, add_eos;        /* what add_special adds in tok_encode */
    int add_space_prefix;        /* SPM: prefix "▁" to text (and to text after a special token) */
    const char *pre;             /* BPE pre-tokenizer name (tokenizer.ggml.pre); NULL/"" = gpt2 */
} tok_config;

typedef struct tokenizer tokenizer;
typedef struct tok_stream tok_stream;

/* a config with no vocabulary, ids -1, flags 0 */
void tok_config_init(tok_config *cfg);

/* parse a tokenizer.ggml.model value ("llama" -> SPM, "gpt2" -> BPE); -1 if unknown */
int tok_kind_from_name(const char *name);
/* parse a tokenizer.ggml.pre value; -1 if unknown (NULL, "", "default", "gpt2" -> GPT2) */
int tok_pre_from_name(const char *name);

/* Build a tokenizer. On error returns a status with a message in err (cap bytes)
 * and sets *out to NULL. Checks: sizes, ids in range, merges naming known tokens. */
kiln_status tok_new(const tok_config *cfg, tokenizer **out, char *err, size_t cap);
void tok_free(tokenizer *t);

int32_t tok_n_vocab(const tokenizer *t);
int32_t tok_bos(const tokenizer *t);
int32_t tok_eos(const tokenizer *t);
/* is id an end-of-generation token (eos, eot, or a control token such as
 * "<end_of_turn>", "<|eot_id|>", "<|im_end|>", "<|endoftext|>")? */
int tok_is_eog(const tokenizer *t, int32_t id);
/* token id of an exact vocabulary string, or -1 */
int32_t tok_lookup(const tokenizer *t, const char *s, size_t n);
/* token type of id, or -1 if out of range */
int tok_token_type(const tokenizer *t, int32_t id);

/* Encode len bytes of text. add_special: add BOS/EOS as the config says;
 * parse_special: control tokens written in the text become single tokens.
 * Writes at most cap ids to out (out may be NULL when cap is 0) and returns the
 * full count, so a call with a too small buffer tells the size to retry with;
 * returns -1 if the text is too long to count in an int. */
int tok_encode(const tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
               int32_t *out, int cap);

/* BPE only, for tests and debugging: run the pre-tokenizer alone over text
 * (no special-token cutting) and write the end byte offset of each piece to
 * ends (at most cap). Returns the number of pieces, or -1 for an SPM tokenizer
 * or a text too long to count in an int. */
int tok_pretokenize(const tokenizer *t, const char *text, size_t len, int32_t *ends, int cap);

/* The bytes of one token (SPM "▁" -> ' ', byte tokens -> that byte, BPE
 * alphabet -> bytes); control tokens are empty unless special. Writes at most
 * cap bytes, returns the full length, or -1 if id is out of range. Raw bytes:
 * may be part of a UTF-8 character. */
int tok_token_to_piece(const tokenizer *t, int32_t id, int special, char *buf, int cap);

/* Decode a whole sequence: the concatenated pieces, minus the leading space
 * SPM's add_space_prefix put there. Returns the full byte length (writes at
 * most cap bytes), or -1 if an id is out of range (*bad_index set if not NULL). */
long tok_decode(const tokenizer *t, const int32_t *ids, int n, int special, char *buf, size_t cap,
                int *bad_index);

/* Streaming decode. at_start: the first ids pushed begin the text (so the
 * add_space_prefix space is dropped); 0 when continuing after a prompt. */
tok_stream *tok_stream_new(const tokenizer *t, int special, int at_start);
void tok_stream_free(tok_stream *s);
/* Push one id. On success returns 0 and sets *text and *len to the newly complete
 * UTF-8 (valid until the next call on s; may be empty). An out-of-range id
 * returns -1, changes nothing and sets *len = 0. */
int tok_stream_push(tok_stream *s, int32_t id, const char **text, size_t *len);
/* End of stream: whatever is held back (an unfinished character) comes out as
 * U+FFFD. The stream can then be reused from the start. */
void tok_stream_flush(tok_stream *s, const char **text, size_t *len);

#endif
