/* tokenizer_spm.c — SentencePiece-style encoding of one raw-text fragment
 * (llama / gemma vocabularies with scores and byte fallback).
 *
 * The fragment is normalised (every ' ' becomes "▁" U+2581; a leading "▁" is
 * added when the caller asks, i.e. add_space_prefix at the start of the text or
 * after a special token), split into UTF-8 characters, and adjacent symbols are
 * merged while some adjacent pair concatenates to a vocabulary string, the one
 * with the highest score first, leftmost on ties (tok_merge_word). A symbol left
 * that is not in the vocabulary is a single character (merges only ever form
 * vocabulary strings): it becomes one byte token "<0xXX>" per byte, or the
 * unknown token when the vocabulary has no byte tokens.
 *
 * Invalid UTF-8 bytes are single-byte symbols, so they too reach the byte
 * tokens and decode back to the same bytes.
 */
#include <string.h>

#include "base.h"
#include "tokenizer_impl.h"

static int spm_pair(const tokenizer *t, const char *s, uint32_t n_left, uint32_t n_total, double *score) {
    (void)n_left;
    int32_t id = tok_lookup(t, s, n_total);
    if (id < 0) return 0;
    *score = (double)t->scores[id];
    return 1;
}

void tok_spm_encode_fragment(const tokenizer *t, const char *s, size_t n, int prefix_space, tok_out *o) {
    /* normalised text: at most 3 bytes per input byte, plus the prefix */
    char *w = kiln_xmalloc(3 * n + 4);
    size_t wn = 0;
    if (prefix_space) {
        memcpy(w, "\xE2\x96\x81", 3);
        wn = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(w + wn, "\xE2\x96\x81", 3);
            wn += 3;
        } else
            w[wn++] = s[i];
    }
    if (wn == 0) {
        free(w);
        return;
    }
    tok_sym *sym = kiln_xmalloc(wn * sizeof *sym);
    int32_t ns = 0;
    for (size_t i = 0; i < wn;) {
        int l = tok_utf8_len((const unsigned char *)w + i, wn - i);
        if (l == 0) l = 1;
        sym[ns].prev = ns - 1;
        sym[ns].next = -1;
        if (ns > 0) sym[ns - 1].next = ns;
        sym[ns].start = (uint32_t)i;
        sym[ns].n = (uint32_t)l;
        ns++;
        i += (size_t)l;
    }
    tok_merge_word(t, w, sym, ns, spm_pair);
    for (int32_t k = 0; k >= 0; k = sym[k].next) {
        int32_t id = tok_lookup(t, w + sym[k].start, sym[k].n);
        if (id >= 0) {
            tok_out_push(o, id);
            continue;
        }
        int all_bytes = 1;
        for (uint32_t j = 0; j < sym[k].n; j++)
            if (t->byte_tok[(unsigned char)w[sym[k].start + j]] < 0) all_bytes = 0;
        if (all_bytes) {
            for (uint32_t j = 0; j < sym[k].n; j++) tok_out_push(o, t->byte_tok[(unsigned char)w[sym[k].start + j]]);
        } else if (t->unk >= 0)
            tok_out_push(o, t->unk);
        /* else: the character cannot be represented in this vocabulary at all
         * (no byte tokens, no unknown token) and is dropped */
    }
    free(sym);
    free(w);
}
