/* tokenizer_impl.h — what tokenizer.c, tokenizer_spm.c and tokenizer_bpe.c
 * share: the tokenizer's layout, the vocabulary hash, and the one symbol-merge
 * engine both kinds use (they differ only in how a pair of adjacent symbols is
 * scored). Not part of the API; nothing outside src/model/tokenizer*.c includes it.
 *
 * Invariants: token text lives in one blob (text + off[i], len[i] bytes);
 * the hash maps every token string to its id (the last id for a string that
 * appears twice, as llama.cpp does); specials[] holds the ids of control /
 * unknown / user-defined tokens with non-empty text, grouped by first byte
 * (special_start[b] .. special_start[b+1]) and longest first within a group.
 */
#ifndef KILN_TOKENIZER_IMPL_H
#define KILN_TOKENIZER_IMPL_H

#include "tokenizer.h"

struct tokenizer {
    tok_kind kind;
    tok_pre pre;
    int32_t n_vocab;
    char *text;          /* all token strings back to back */
    uint32_t *off, *len; /* [n_vocab] */
    float *scores;       /* [n_vocab] */
    uint8_t *types;      /* [n_vocab] tok_type */
    int32_t *hash;       /* open addressing, hash_mask+1 slots of ids, -1 empty */
    uint32_t hash_mask;
    int32_t byte_tok[256]; /* SPM: id of "<0xXX>"; BPE: id of the byte's alphabet char; -1 none */

    int32_t *specials;        /* ids, see above */
    int32_t special_start[257];

    /* BPE merges: rank i joins left text (merge_text + m_off[i], m_llen[i])
     * with the right text that follows it (m_rlen[i]) */
    int32_t n_merges;
    char *merge_text;
    uint32_t *m_off, *m_llen, *m_rlen;
    int32_t *merge_hash;
    uint32_t merge_hash_mask;

    int32_t bos, eos, unk, pad, eot;
    int add_bos, add_eos, add_space_prefix;
};

/* one symbol of a word being merged: bytes [start, start+n) of the word */
typedef struct tok_sym {
    int32_t prev, next; /* -1 at the ends; n == 0 marks a symbol merged away */
    uint32_t start, n;
} tok_sym;

/* Score of joining adjacent symbols a (n_left bytes at s) and b (the following
 * n_total - n_left bytes). Returns 0 if they may not be joined; higher score
 * merges first. */
typedef int (*tok_pair_fn)(const tokenizer *t, const char *s, uint32_t n_left, uint32_t n_total,
                           double *score);

/* Merge the symbols of word (n bytes, symbols already split into sym[0..nsym),
 * linked in order) until no adjacent pair scores; leftmost wins ties. Uses a
 * heap, O(n log n). Afterwards follow sym[0].next... for the result. */
void tok_merge_word(const tokenizer *t, const char *word, tok_sym *sym, int32_t nsym, tok_pair_fn fn);

/* length of the valid UTF-8 character at p (max n bytes), or 0 if the bytes
 * there do not start one (the caller then treats one byte on its own) */
int tok_utf8_len(const unsigned char *p, size_t n);

/* a growable output of ids; count keeps running past cap so the caller learns
 * the size it needs */
typedef struct tok_out {
    int32_t *ids;
    int cap;
    long count;
} tok_out;

static inline void tok_out_push(tok_out *o, int32_t id) {
    if (o->count < o->cap) o->ids[o->count] = id;
    o->count++;
}

/* kind-specific encoders of one raw-text fragment (no special tokens inside) */
void tok_spm_encode_fragment(const tokenizer *t, const char *s, size_t n, int prefix_space, tok_out *o);
void tok_bpe_encode_fragment(const tokenizer *t, const char *s, size_t n, tok_out *o);
/* BPE: the gpt2 alphabet character of byte b as UTF-8 (1 or 2 bytes) into out;
 * returns its length. The inverse: the byte of code point cp, or -1. */
int tok_bpe_byte_char(unsigned b, char out[2]);
int tok_bpe_char_byte(uint32_t cp);
/* class of a code point for the pre-tokenizers: 0 other, 1 letter (\p{L}),
 * 2 number (\p{N}), 3 whitespace (\s) */
int tok_unicode_class(uint32_t cp);
/* rank of the BPE merge "a b", or -1 */
int32_t tok_bpe_merge_rank(const tokenizer *t, const char *a, size_t na, const char *b, size_t nb);

#endif
