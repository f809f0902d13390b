/* tokenizer_bpe.c — byte-level BPE (gpt2-style) encoding of one raw-text
 * fragment: the pre-tokenizer split, the byte -> printable-character alphabet,
 * and merges by rank.
 *
 * Pre-tokenizers are hand-written scanners equivalent to these regexes (the
 * leftmost alternative that matches at the current position wins, with the
 * regex's backtracking worked out by hand; see the comments in each scanner):
 *   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   qwen2:  as llama3 with \p{N} (one digit per piece) instead of \p{N}{1,3}
 * \p{L} and \p{N} are Unicode general categories L* and N*, from range tables
 * generated with Python's unicodedata (Unicode 14.0):
 *     ranges(lambda c: unicodedata.category(chr(c))[0] == 'L')   (and 'N')
 * \s is the Unicode White_Space set. Bytes that are not valid UTF-8 count as
 * punctuation ([^\s\p{L}\p{N}]) and keep their byte value, so every input
 * byte reaches the BPE and decodes back to itself.
 *
 * Each piece's bytes become gpt2 alphabet characters (printable Latin-1 bytes
 * stand for themselves, the 68 others for U+0100.. in byte order); the piece is
 * then merged lowest rank first, leftmost on ties (tok_merge_word). With the
 * llama3 pre-tokenizer a piece that is itself a vocabulary string is emitted
 * without merging, as Llama 3's tokenizer does (ignore_merges).
 */
#include <string.h>

#include "base.h"
#include "tokenizer_impl.h"

/* ------------------------------------------------------ byte alphabet */

static int byte_printable(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

/* the non-printable bytes 0x00-0x20, 0x7F-0xA0 and 0xAD take U+0100.. in order */
static uint32_t byte_cp(unsigned b) {
    if (byte_printable(b)) return b;
    if (b <= 0x20) return 256 + b;
    if (b <= 0xA0) return 256 + 33 + (b - 0x7F);
    return 256 + 67; /* 0xAD */
}

int tok_bpe_byte_char(unsigned b, char out[2]) {
    uint32_t cp = byte_cp(b & 0xFF);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

int tok_bpe_char_byte(uint32_t cp) {
    if (cp < 256) return byte_printable(cp) ? (int)cp : -1;
    if (cp < 256 + 33) return (int)(cp - 256);
    if (cp < 256 + 67) return (int)(cp - 256 - 33 + 0x7F);
    if (cp == 256 + 67) return 0xAD;
    return -1;
}

/* ------------------------------------------------------ unicode classes */

#include "tokenizer_unicode.h"

enum { CP_OTHER = 0, CP_LETTER = 1, CP_NUMBER = 2, CP_SPACE = 3 };

static int in_ranges(uint32_t cp, const uint32_t (*r)[2], size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

int tok_unicode_class(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CP_LETTER;
        if (cp >= '0' && cp <= '9') return CP_NUMBER;
        if (cp == ' ' || (cp >= 9 && cp <= 13)) return CP_SPACE;
        return CP_OTHER;
    }
    if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
        cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000)
        return CP_SPACE;
    if (in_ranges(cp, uni_letter, sizeof uni_letter / sizeof uni_letter[0])) return CP_LETTER;
    if (in_ranges(cp, uni_number, sizeof uni_number / sizeof uni_number[0])) return CP_NUMBER;
    return CP_OTHER;
}

/* ------------------------------------------------------ pre-tokenizers */

typedef struct cps {
    uint32_t *cp;   /* [n] code points (an invalid byte: its byte value, class other) */
    uint8_t *cls;   /* [n] */
    uint32_t *off;  /* [n+1] byte offset of each code point */
    size_t n;
} cps;

static void decode_cps(const char *s, size_t n, cps *c) {
    c->cp = kiln_xmalloc((n + 1) * sizeof *c->cp);
    c->cls = kiln_xmalloc(n + 1);
    c->off = kiln_xmalloc((n + 1) * sizeof *c->off);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        const unsigned char *p = (const unsigned char *)s + i;
        int l = tok_utf8_len(p, n - i);
        uint32_t cp;
        uint8_t cls;
        if (l == 0) {
            cp = p[0];
            cls = CP_OTHER;
            l = 1;
        } else {
            if (l == 1) cp = p[0];
            else if (l == 2) cp = ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3Fu);
            else if (l == 3) cp = ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3Fu);
            else
                cp = ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) |
                     ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3Fu);
            cls = (uint8_t)tok_unicode_class(cp);
        }
        c->cp[k] = cp;
        c->cls[k] = cls;
        c->off[k] = (uint32_t)i;
        k++;
        i += (size_t)l;
    }
    c->off[k] = (uint32_t)n;
    c->n = k;
}

static int is_crlf(const cps *c, size_t i) { return c->cls[i] == CP_SPACE && (c->cp[i] == '\r' || c->cp[i] == '\n'); }

static uint32_t ascii_lower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

/* length of 's 't 're 've 'm 'll 'd at i (0 if none); ci: case-insensitive */
static size_t contraction(const cps *c, size_t i, int ci) {
    if (c->cp[i] != '\'' || c->cls[i] != CP_OTHER || i + 1 >= c->n) return 0;
    uint32_t a = c->cp[i + 1], b = i + 2 < c->n ? c->cp[i + 2] : 0;
    if (ci) {
        a = ascii_lower(a);
        b = ascii_lower(b);
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

static size_t run_of(const cps *c, size_t i, int cls) {
    while (i < c->n && c->cls[i] == cls) i++;
    return i;
}

/* \s+(?!\S)|\s+ at i, where i is whitespace: the run, minus its last
 * character when a non-space follows (that one joins the next piece), but
 * never less than one character */
static size_t space_tail(const cps *c, size_t i, size_t j) {
    if (j == c->n || j - i < 2) return j;
    return j - 1;
}

static size_t scan_gpt2(const cps *c, size_t i) {
    size_t k = contraction(c, i, 0);
    if (k) return i + k;
    /*  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+ : an optional single space, then a run */
    size_t s = c->cp[i] == ' ' && i + 1 < c->n ? i + 1 : i;
    if (c->cls[s] != CP_SPACE) return run_of(c, s, c->cls[s]);
    return space_tail(c, i, run_of(c, i, CP_SPACE));
}

static size_t scan_llama3(const cps *c, size_t i, int digits) {
    size_t k = contraction(c, i, 1);
    if (k) return i + k;
    int cl = c->cls[i];
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (cl == CP_LETTER) return run_of(c, i, CP_LETTER);
    if (cl != CP_NUMBER && !is_crlf(c, i) && i + 1 < c->n && c->cls[i + 1] == CP_LETTER)
        return run_of(c, i + 1, CP_LETTER);
    /* \p{N}{1,digits} */
    if (cl == CP_NUMBER) {
        size_t j = i + 1;
        while (j < c->n && j - i < (size_t)digits && c->cls[j] == CP_NUMBER) j++;
        return j;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t s = c->cp[i] == ' ' && i + 1 < c->n ? i + 1 : i;
    if (c->cls[s] == CP_OTHER) {
        size_t j = run_of(c, s, CP_OTHER);
        while (j < c->n && is_crlf(c, j)) j++;
        return j;
    }
    /* whitespace: \s*[\r\n]+ backtracks to end just after the run's last
     * CR/LF; without one, \s+(?!\S) and \s+ */
    size_t j = run_of(c, i, CP_SPACE);
    for (size_t q = j; q > i; q--)
        if (is_crlf(c, q - 1)) return q;
    return space_tail(c, i, j);
}

/* ------------------------------------------------------------ merging */

static int bpe_pair(const tokenizer *t, const char *s, uint32_t n_left, uint32_t n_total, double *score) {
    int32_t r = tok_bpe_merge_rank(t, s, n_left, s + n_left, n_total - n_left);
    if (r < 0) return 0;
    *score = -(double)r;
    return 1;
}

static void bpe_word(const tokenizer *t, const char *s, size_t n, tok_out *o) {
    char *w = kiln_xmalloc(2 * n + 1);
    tok_sym *sym = kiln_xmalloc(n * sizeof *sym);
    size_t wn = 0;
    for (size_t i = 0; i < n; i++) {
        char ch[2];
        int l = tok_bpe_byte_char((unsigned char)s[i], ch);
        int32_t k = (int32_t)i;
        sym[k].prev = k - 1;
        sym[k].next = i + 1 < n ? k + 1 : -1;
        sym[k].start = (uint32_t)wn;
        sym[k].n = (uint32_t)l;
        memcpy(w + wn, ch, (size_t)l);
        wn += (size_t)l;
    }
    int32_t whole = t->pre == TOK_PRE_LLAMA3 ? tok_lookup(t, w, wn) : -1;
    if (whole >= 0) {
        tok_out_push(o, whole);
    } else {
        tok_merge_word(t, w, sym, (int32_t)n, bpe_pair);
        for (int32_t k = 0; k >= 0; k = sym[k].next) {
            int32_t id = tok_lookup(t, w + sym[k].start, sym[k].n);
            if (id >= 0) {
                tok_out_push(o, id);
                continue;
            }
            /* a vocabulary without every alphabet character: per byte, else unknown */
            for (uint32_t q = sym[k].start; q < sym[k].start + sym[k].n;) {
                int l = tok_utf8_len((const unsigned char *)w + q, wn - q);
                uint32_t cp = l == 1 ? (unsigned char)w[q]
                                     : ((uint32_t)(w[q] & 0x1F) << 6) | (uint32_t)(w[q + 1] & 0x3F);
                int byte = tok_bpe_char_byte(cp);
                int32_t b = byte >= 0 ? t->byte_tok[byte] : -1;
                if (b >= 0) tok_out_push(o, b);
                else if (t->unk >= 0) tok_out_push(o, t->unk);
                q += (uint32_t)(l ? l : 1);
            }
        }
    }
    free(sym);
    free(w);
}

/* calls piece(t, bytes, n, ctx) for each pre-tokenizer piece of s[0..n) */
static void pre_split(const tokenizer *t, const char *s, size_t n,
                      void (*piece)(const tokenizer *, const char *, size_t, const char *, void *), void *ctx) {
    if (n == 0) return;
    cps c;
    decode_cps(s, n, &c);
    for (size_t i = 0; i < c.n;) {
        size_t j = t->pre == TOK_PRE_GPT2 ? scan_gpt2(&c, i) : scan_llama3(&c, i, t->pre == TOK_PRE_LLAMA3 ? 3 : 1);
        KILN_ASSERT(j > i && j <= c.n);
        piece(t, s + c.off[i], c.off[j] - c.off[i], s, ctx);
        i = j;
    }
    free(c.cp);
    free(c.cls);
    free(c.off);
}

static void piece_encode(const tokenizer *t, const char *p, size_t n, const char *base, void *ctx) {
    (void)base;
    bpe_word(t, p, n, ctx);
}

void tok_bpe_encode_fragment(const tokenizer *t, const char *s, size_t n, tok_out *o) {
    pre_split(t, s, n, piece_encode, o);
}

static void piece_end(const tokenizer *t, const char *p, size_t n, const char *base, void *ctx) {
    (void)t;
    tok_out_push(ctx, (int32_t)(p + n - base));
}

int tok_pretokenize(const tokenizer *t, const char *text, size_t len, int32_t *ends, int cap) {
    if (!t || t->kind != TOK_KIND_BPE || (!text && len) || len > (size_t)INT32_MAX - 8) return -1;
    tok_out o = {ends, ends && cap > 0 ? cap : 0, 0};
    pre_split(t, text, len, piece_end, &o);
    return (int)o.count;
}
