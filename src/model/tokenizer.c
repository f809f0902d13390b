/* tokenizer.c — the parts of the tokenizer both kinds share: construction from
 * a tok_config (copy, validate, index), the vocabulary hash, cutting the text at
 * special tokens, the heap-driven symbol merge engine, and decoding (whole and
 * streaming). The kind-specific algorithms live in tokenizer_spm.c and
 * tokenizer_bpe.c; see tokenizer.h for the behaviour and tokenizer_impl.h for
 * the layout and its invariants.
 *
 * Compatibility choices (llama.cpp is the reference kiln is compared with):
 *  - in SPM merging any vocabulary string may be formed, whatever its type;
 *  - decoding prints user-defined tokens verbatim, control and unknown tokens
 *    only with `special`, unused/undefined ones never;
 *  - specials are cut leftmost-longest (llama.cpp cuts longest-first over the
 *    whole text; the two differ only for overlapping special strings).
 */
#include "tokenizer_impl.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "base.h"

/* ------------------------------------------------------------------ utils */

static uint64_t tok_hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return h ^ (h >> 29);
}

/* 1..4: a complete valid character; 0: invalid; -1: a valid but cut-off start */
static int utf8_check(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    for (int k = 1; k < need; k++) {
        if ((size_t)k >= n) return -1;
        unsigned b = p[k];
        unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (b < l || b > h) return 0;
    }
    return need;
}

int tok_utf8_len(const unsigned char *p, size_t n) {
    if (n == 0) return 0;
    int r = utf8_check(p, n);
    return r > 0 ? r : 0;
}

/* ------------------------------------------------------------ vocab hash */

int32_t tok_lookup(const tokenizer *t, const char *s, size_t n) {
    if (!t || (!s && n)) return -1;
    uint64_t h = tok_hash_bytes(s, n);
    for (uint32_t i = (uint32_t)h & t->hash_mask;; i = (i + 1) & t->hash_mask) {
        int32_t id = t->hash[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->text + t->off[id], s, n) == 0) return id;
    }
}

static void hash_insert(tokenizer *t, int32_t id) {
    uint64_t h = tok_hash_bytes(t->text + t->off[id], t->len[id]);
    for (uint32_t i = (uint32_t)h & t->hash_mask;; i = (i + 1) & t->hash_mask) {
        int32_t o = t->hash[i];
        if (o < 0 || (t->len[o] == t->len[id] && memcmp(t->text + t->off[o], t->text + t->off[id], t->len[id]) == 0)) {
            t->hash[i] = id; /* a repeated string maps to its last id */
            return;
        }
    }
}

/* rank of the BPE merge joining a (na bytes) and b (nb bytes), or -1 */
static int32_t merge_find(const tokenizer *t, const char *a, size_t na, const char *b, size_t nb) {
    if (!t->merge_hash) return -1;
    uint64_t h = kiln_hash_mix(tok_hash_bytes(a, na), tok_hash_bytes(b, nb));
    for (uint32_t i = (uint32_t)h & t->merge_hash_mask;; i = (i + 1) & t->merge_hash_mask) {
        int32_t r = t->merge_hash[i];
        if (r < 0) return -1;
        const char *m = t->merge_text + t->m_off[r];
        if (t->m_llen[r] == na && t->m_rlen[r] == nb && memcmp(m, a, na) == 0 && memcmp(m + na, b, nb) == 0)
            return r;
    }
}

int32_t tok_bpe_merge_rank(const tokenizer *t, const char *a, size_t na, const char *b, size_t nb) {
    return merge_find(t, a, na, b, nb);
}

/* ---------------------------------------------------------- construction */

void tok_config_init(tok_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = TOK_KIND_SPM;
    cfg->bos_id = cfg->eos_id = cfg->unk_id = cfg->pad_id = cfg->eot_id = -1;
}

int tok_kind_from_name(const char *name) {
    if (!name) return -1;
    if (strcmp(name, "llama") == 0) return TOK_KIND_SPM;
    if (strcmp(name, "gpt2") == 0) return TOK_KIND_BPE;
    return -1;
}

int tok_pre_from_name(const char *name) {
    if (!name || !*name || strcmp(name, "default") == 0 || strcmp(name, "gpt2") == 0 ||
        strcmp(name, "gpt-2") == 0 || strcmp(name, "smollm") == 0)
        return TOK_PRE_GPT2;
    if (strcmp(name, "llama-bpe") == 0 || strcmp(name, "llama3") == 0 || strcmp(name, "llama-v3") == 0)
        return TOK_PRE_LLAMA3;
    if (strcmp(name, "qwen2") == 0) return TOK_PRE_QWEN2;
    return -1;
}

typedef struct special_key {
    unsigned first;
    uint32_t len;
    int32_t id;
} special_key;

static int special_cmp(const void *pa, const void *pb) {
    const special_key *a = pa, *b = pb;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* the byte of an SPM byte token "<0xXX>", or -1 */
static int byte_token_value(const char *s, uint32_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static uint32_t pow2_at_least(uint64_t n) {
    uint64_t p = 16;
    while (p < n) p *= 2;
    return (uint32_t)p;
}

static kiln_status check_id(const char *what, int32_t id, int32_t n_vocab, char *err, size_t cap) {
    if (id < -1 || id >= n_vocab)
        return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: %s id %d is outside the vocabulary (0..%d)", what,
                        (int)id, (int)n_vocab - 1);
    return KILN_OK;
}

kiln_status tok_new(const tok_config *cfg, tokenizer **out, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!out) return kiln_fail(err, cap, KILN_ERR_INVALID, "tokenizer: no output pointer");
    *out = NULL;
    if (!cfg) return kiln_fail(err, cap, KILN_ERR_INVALID, "tokenizer: no config");
    if (cfg->kind != TOK_KIND_SPM && cfg->kind != TOK_KIND_BPE)
        return kiln_fail(err, cap, KILN_ERR_UNSUPPORTED, "tokenizer: unknown kind %d", (int)cfg->kind);
    int32_t nv = cfg->n_vocab;
    if (nv <= 0 || !cfg->tokens)
        return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: empty vocabulary (%d tokens)", (int)nv);
    if (nv > (1 << 28)) return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: vocabulary too large (%d)", (int)nv);
    int pre = TOK_PRE_GPT2;
    if (cfg->kind == TOK_KIND_BPE) {
        pre = tok_pre_from_name(cfg->pre);
        if (pre < 0)
            return kiln_fail(err, cap, KILN_ERR_UNSUPPORTED,
                            "tokenizer: unsupported BPE pre-tokenizer '%s' (kiln knows gpt2/default, llama-bpe, qwen2)",
                            cfg->pre);
        if (cfg->n_merges < 0 || (cfg->n_merges > 0 && !cfg->merges))
            return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: bad merge list (%d merges)", (int)cfg->n_merges);
    }
    uint64_t total = 0;
    for (int32_t i = 0; i < nv; i++) {
        if (cfg->tokens[i].n && !cfg->tokens[i].s)
            return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: token %d has no text", (int)i);
        total += cfg->tokens[i].n;
        if (cfg->token_types && (cfg->token_types[i] < 0 || cfg->token_types[i] > TOK_TYPE_BYTE))
            return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: token %d has unknown type %d", (int)i,
                            (int)cfg->token_types[i]);
        if (cfg->scores && isnan(cfg->scores[i]))
            return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: token %d has a NaN score", (int)i);
    }
    if (total >= UINT32_MAX) return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: vocabulary text too large");
    kiln_status st;
    if ((st = check_id("BOS", cfg->bos_id, nv, err, cap)) != KILN_OK) return st;
    if ((st = check_id("EOS", cfg->eos_id, nv, err, cap)) != KILN_OK) return st;
    if ((st = check_id("unknown-token", cfg->unk_id, nv, err, cap)) != KILN_OK) return st;
    if ((st = check_id("end-of-turn", cfg->eot_id, nv, err, cap)) != KILN_OK) return st;
    if (cfg->add_bos && cfg->bos_id < 0)
        return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: add_bos is set but there is no BOS token");
    if (cfg->add_eos && cfg->eos_id < 0)
        return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: add_eos is set but there is no EOS token");

    tokenizer *t = kiln_xcalloc(1, sizeof *t);
    t->kind = cfg->kind;
    t->pre = (tok_pre)pre;
    t->n_vocab = nv;
    t->text = kiln_xmalloc((size_t)total + 1);
    t->off = kiln_xmalloc((size_t)nv * sizeof *t->off);
    t->len = kiln_xmalloc((size_t)nv * sizeof *t->len);
    t->scores = kiln_xmalloc((size_t)nv * sizeof *t->scores);
    t->types = kiln_xmalloc((size_t)nv);
    uint32_t pos = 0;
    for (int32_t i = 0; i < nv; i++) {
        uint32_t n = cfg->tokens[i].n;
        if (n) memcpy(t->text + pos, cfg->tokens[i].s, n);
        t->off[i] = pos;
        t->len[i] = n;
        pos += n;
        t->scores[i] = cfg->scores ? cfg->scores[i] : 0.0f;
        int ty = cfg->token_types ? cfg->token_types[i] : TOK_TYPE_NORMAL;
        if (!cfg->token_types && cfg->kind == TOK_KIND_SPM && byte_token_value(cfg->tokens[i].s, n) >= 0)
            ty = TOK_TYPE_BYTE;
        t->types[i] = (uint8_t)ty;
    }
    t->text[pos] = 0;

    t->hash_mask = pow2_at_least((uint64_t)nv * 2) - 1;
    t->hash = kiln_xmalloc(((size_t)t->hash_mask + 1) * sizeof *t->hash);
    memset(t->hash, 0xff, ((size_t)t->hash_mask + 1) * sizeof *t->hash);
    for (int32_t i = 0; i < nv; i++) hash_insert(t, i);

    for (int b = 0; b < 256; b++) t->byte_tok[b] = -1;
    if (t->kind == TOK_KIND_SPM) {
        for (int32_t i = 0; i < nv; i++) {
            int b = t->types[i] == TOK_TYPE_BYTE ? byte_token_value(t->text + t->off[i], t->len[i]) : -1;
            if (b >= 0 && t->byte_tok[b] < 0) t->byte_tok[b] = i;
        }
    } else {
        for (unsigned b = 0; b < 256; b++) {
            char c[2];
            int n = tok_bpe_byte_char(b, c);
            t->byte_tok[b] = tok_lookup(t, c, (size_t)n);
        }
    }

    /* specials, grouped by first byte, longest first */
    special_key *keys = kiln_xmalloc((size_t)nv * sizeof *keys);
    int32_t ns = 0;
    for (int32_t i = 0; i < nv; i++) {
        int ty = t->types[i];
        if (t->len[i] && (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN || ty == TOK_TYPE_USER_DEFINED)) {
            keys[ns].first = (unsigned char)t->text[t->off[i]];
            keys[ns].len = t->len[i];
            keys[ns].id = i;
            ns++;
        }
    }
    qsort(keys, (size_t)ns, sizeof *keys, special_cmp);
    t->specials = kiln_xmalloc((size_t)(ns ? ns : 1) * sizeof *t->specials);
    for (int32_t i = 0; i < ns; i++) t->specials[i] = keys[i].id;
    int32_t k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < ns && (int)keys[k].first < b) k++;
        t->special_start[b] = k;
    }
    free(keys);

    if (t->kind == TOK_KIND_BPE && cfg->n_merges > 0) {
        int32_t nm = cfg->n_merges;
        uint64_t mtotal = 0;
        for (int32_t i = 0; i < nm; i++) mtotal += cfg->merges[i].n;
        if (mtotal >= UINT32_MAX) {
            tok_free(t);
            return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: merge text too large");
        }
        t->n_merges = nm;
        t->merge_text = kiln_xmalloc((size_t)mtotal + 1);
        t->m_off = kiln_xmalloc((size_t)nm * sizeof *t->m_off);
        t->m_llen = kiln_xmalloc((size_t)nm * sizeof *t->m_llen);
        t->m_rlen = kiln_xmalloc((size_t)nm * sizeof *t->m_rlen);
        t->merge_hash_mask = pow2_at_least((uint64_t)nm * 2) - 1;
        t->merge_hash = kiln_xmalloc(((size_t)t->merge_hash_mask + 1) * sizeof *t->merge_hash);
        memset(t->merge_hash, 0xff, ((size_t)t->merge_hash_mask + 1) * sizeof *t->merge_hash);
        uint32_t mpos = 0;
        for (int32_t r = 0; r < nm; r++) {
            const char *s = cfg->merges[r].s;
            uint32_t n = cfg->merges[r].n;
            const char *sp = n > 1 && s ? memchr(s + 1, ' ', n - 1) : NULL;
            if (!sp || sp + 1 == s + n) {
                tok_free(t);
                return kiln_fail(err, cap, KILN_ERR_FORMAT, "tokenizer: merge %d is not of the form 'left right'",
                                (int)r);
            }
            uint32_t nl = (uint32_t)(sp - s), nr = n - nl - 1;
            memcpy(t->merge_text + mpos, s, nl);
            memcpy(t->merge_text + mpos + nl, sp + 1, nr);
            t->m_off[r] = mpos;
            t->m_llen[r] = nl;
            t->m_rlen[r] = nr;
            mpos += nl + nr;
            if (merge_find(t, s, nl, sp + 1, nr) >= 0) continue; /* a repeated merge keeps its first rank */
            uint64_t h = kiln_hash_mix(tok_hash_bytes(s, nl), tok_hash_bytes(sp + 1, nr));
            uint32_t i = (uint32_t)h & t->merge_hash_mask;
            while (t->merge_hash[i] >= 0) i = (i + 1) & t->merge_hash_mask;
            t->merge_hash[i] = r;
        }
    }

    t->bos = cfg->bos_id;
    t->eos = cfg->eos_id;
    t->unk = cfg->unk_id;
    t->pad = cfg->pad_id >= 0 && cfg->pad_id < nv ? cfg->pad_id : -1; /* unused by kiln: tolerate junk */
    t->eot = cfg->eot_id;
    t->add_bos = cfg->add_bos != 0;
    t->add_eos = cfg->add_eos != 0;
    t->add_space_prefix = cfg->kind == TOK_KIND_SPM && cfg->add_space_prefix;
    *out = t;
    return KILN_OK;
}

void tok_free(tokenizer *t) {
    if (!t) return;
    free(t->text);
    free(t->off);
    free(t->len);
    free(t->scores);
    free(t->types);
    free(t->hash);
    free(t->specials);
    free(t->merge_text);
    free(t->m_off);
    free(t->m_llen);
    free(t->m_rlen);
    free(t->merge_hash);
    free(t);
}

int32_t tok_n_vocab(const tokenizer *t) { return t->n_vocab; }
int32_t tok_bos(const tokenizer *t) { return t->bos; }
int32_t tok_eos(const tokenizer *t) { return t->eos; }

int tok_token_type(const tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab) return -1;
    return t->types[id];
}

int tok_is_eog(const tokenizer *t, int32_t id) {
    static const char *const names[] = {"<end_of_turn>", "<|eot_id|>", "<|im_end|>", "<|endoftext|>",
                                        "<|end_of_text|>", "</s>", "<eos>", "<|end|>"};
    if (!t || id < 0 || id >= t->n_vocab) return 0;
    if (id == t->eos || id == t->eot) return 1;
    if (t->types[id] != TOK_TYPE_CONTROL) return 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == t->len[id] && memcmp(names[i], t->text + t->off[id], t->len[id]) == 0) return 1;
    return 0;
}

/* --------------------------------------------------------- merge engine */

typedef struct bigram {
    double score;
    int32_t left, right;
    uint32_t n;
} bigram;

/* a comes out of the heap before b */
static int bigram_before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct heap {
    bigram *v;
    size_t n, cap;
} heap;

static void heap_push(heap *h, bigram b) {
    KILN_GROW(h->v, h->cap, h->n + 1);
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
}

static bigram heap_pop(heap *h) {
    bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bigram_before(&h->v[c + 1], &h->v[c])) c++;
        if (!bigram_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static void try_pair(const tokenizer *t, const char *word, const tok_sym *sym, int32_t l, int32_t r, tok_pair_fn fn,
                     heap *h) {
    if (l < 0 || r < 0) return;
    uint32_t n = sym[l].n + sym[r].n;
    double score;
    if (!fn(t, word + sym[l].start, sym[l].n, n, &score)) return;
    bigram b = {score, l, r, n};
    heap_push(h, b);
}

void tok_merge_word(const tokenizer *t, const char *word, tok_sym *sym, int32_t nsym, tok_pair_fn fn) {
    heap h = {0};
    for (int32_t i = 0; i + 1 < nsym; i++) try_pair(t, word, sym, i, i + 1, fn, &h);
    while (h.n) {
        bigram b = heap_pop(&h);
        tok_sym *l = &sym[b.left], *r = &sym[b.right];
        /* stale: one side already merged elsewhere since this pair was scored */
        if (l->n == 0 || r->n == 0 || l->next != b.right || l->n + r->n != b.n) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        try_pair(t, word, sym, l->prev, b.left, fn, &h);
        try_pair(t, word, sym, b.left, l->next, fn, &h);
    }
    free(h.v);
}

/* --------------------------------------------------------------- encode */

/* the special token starting at s, longest first, or -1 */
static int32_t match_special(const tokenizer *t, const char *s, size_t n, int parse_special) {
    unsigned c = (unsigned char)s[0];
    for (int32_t k = t->special_start[c]; k < t->special_start[c + 1]; k++) {
        int32_t id = t->specials[k];
        if (t->types[id] != TOK_TYPE_USER_DEFINED && !parse_special) continue;
        if (t->len[id] <= n && memcmp(t->text + t->off[id], s, t->len[id]) == 0) return id;
    }
    return -1;
}

static void encode_fragment(const tokenizer *t, const char *s, size_t n, int after_special, tok_out *o) {
    if (t->kind == TOK_KIND_SPM) tok_spm_encode_fragment(t, s, n, t->add_space_prefix && after_special, o);
    else tok_bpe_encode_fragment(t, s, n, o);
}

int tok_encode(const tokenizer *t, const char *text, size_t len, int add_special, int parse_special, int32_t *out,
               int cap) {
    /* every byte yields at most one token (byte fallback), plus BOS/EOS */
    if (!t || (!text && len) || len > (size_t)INT_MAX - 8) return -1;
    if (!out || cap < 0) cap = 0;
    tok_out o = {out, cap, 0};
    if (add_special && t->add_bos) tok_out_push(&o, t->bos);
    size_t frag = 0, i = 0;
    int after_special = 1;
    while (i < len) {
        int32_t id = match_special(t, text + i, len - i, parse_special);
        if (id < 0) {
            i++;
            continue;
        }
        if (i > frag) encode_fragment(t, text + frag, i - frag, after_special, &o);
        tok_out_push(&o, id);
        i += t->len[id];
        frag = i;
        after_special = 1;
    }
    if (frag < len) encode_fragment(t, text + frag, len - frag, after_special, &o);
    if (add_special && t->add_eos) tok_out_push(&o, t->eos);
    return o.count > INT_MAX ? -1 : (int)o.count;
}

/* --------------------------------------------------------------- decode */

static void piece_append(const tokenizer *t, int32_t id, int special, kiln_sb *b) {
    const char *s = t->text + t->off[id];
    uint32_t n = t->len[id];
    switch (t->types[id]) {
    case TOK_TYPE_CONTROL:
    case TOK_TYPE_UNKNOWN:
        if (special) kiln_sb_putn(b, s, n);
        return;
    case TOK_TYPE_USER_DEFINED:
        kiln_sb_putn(b, s, n);
        return;
    case TOK_TYPE_BYTE: {
        int v = byte_token_value(s, n);
        if (v >= 0) {
            char c = (char)v;
            kiln_sb_putn(b, &c, 1);
        } else
            kiln_sb_putn(b, s, n);
        return;
    }
    case TOK_TYPE_NORMAL:
        break;
    default:
        return; /* unused / undefined: never printed */
    }
    if (t->kind == TOK_KIND_SPM) {
        uint32_t i = 0;
        while (i < n) {
            if (i + 3 <= n && (unsigned char)s[i] == 0xE2 && (unsigned char)s[i + 1] == 0x96 &&
                (unsigned char)s[i + 2] == 0x81) {
                kiln_sb_putn(b, " ", 1);
                i += 3;
            } else {
                kiln_sb_putn(b, s + i, 1);
                i++;
            }
        }
        return;
    }
    /* BPE: each alphabet character stands for one byte; others pass through */
    uint32_t i = 0;
    while (i < n) {
        int l = tok_utf8_len((const unsigned char *)s + i, n - i);
        int byte = -1;
        if (l == 1) byte = tok_bpe_char_byte((unsigned char)s[i]);
        else if (l == 2)
            byte = tok_bpe_char_byte(((uint32_t)(s[i] & 0x1F) << 6) | (uint32_t)(s[i + 1] & 0x3F));
        if (l == 0) l = 1;
        if (byte >= 0) {
            char c = (char)byte;
            kiln_sb_putn(b, &c, 1);
        } else
            kiln_sb_putn(b, s + i, (size_t)l);
        i += (uint32_t)l;
    }
}

int tok_token_to_piece(const tokenizer *t, int32_t id, int special, char *buf, int cap) {
    if (!t || id < 0 || id >= t->n_vocab) return -1;
    kiln_sb b = {0};
    piece_append(t, id, special, &b);
    if (buf && cap > 0 && b.len) memcpy(buf, b.s, b.len < (size_t)cap ? b.len : (size_t)cap);
    int n = b.len > INT_MAX ? INT_MAX : (int)b.len;
    free(b.s);
    return n;
}

long tok_decode(const tokenizer *t, const int32_t *ids, int n, int special, char *buf, size_t cap,
                int *bad_index) {
    if (!t || n < 0 || (!ids && n)) return -1;
    kiln_sb b = {0};
    int strip = t->add_space_prefix;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            if (bad_index) *bad_index = i;
            free(b.s);
            return -1;
        }
        size_t before = b.len;
        piece_append(t, ids[i], special, &b);
        if (strip && b.len > before) {
            if (b.s[before] == ' ') {
                memmove(b.s + before, b.s + before + 1, b.len - before - 1);
                b.len--;
            }
            strip = 0;
        }
    }
    if (buf && cap && b.len) memcpy(buf, b.s, b.len < cap ? b.len : cap);
    long r = (long)b.len;
    free(b.s);
    return r;
}

/* ------------------------------------------------------------ streaming */

struct tok_stream {
    const tokenizer *t;
    int special, at_start, strip;
    kiln_sb pending; /* bytes not yet handed out: an unfinished character */
    kiln_sb out;
};

tok_stream *tok_stream_new(const tokenizer *t, int special, int at_start) {
    if (!t) return NULL;
    tok_stream *s = kiln_xcalloc(1, sizeof *s);
    s->t = t;
    s->special = special;
    s->at_start = at_start;
    s->strip = at_start && t->add_space_prefix;
    return s;
}

void tok_stream_free(tok_stream *s) {
    if (!s) return;
    free(s->pending.s);
    free(s->out.s);
    free(s);
}

static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

int tok_stream_push(tok_stream *s, int32_t id, const char **text, size_t *len) {
    *text = "";
    *len = 0;
    if (!s || id < 0 || id >= s->t->n_vocab) return -1;
    size_t before = s->pending.len;
    piece_append(s->t, id, s->special, &s->pending);
    if (s->strip && s->pending.len > before) {
        if (s->pending.s[before] == ' ') {
            memmove(s->pending.s + before, s->pending.s + before + 1, s->pending.len - before - 1);
            s->pending.len--;
        }
        s->strip = 0;
    }
    s->out.len = 0;
    const unsigned char *p = (const unsigned char *)s->pending.s;
    size_t n = s->pending.len, i = 0;
    while (i < n) {
        int r = utf8_check(p + i, n - i);
        if (r > 0) {
            kiln_sb_putn(&s->out, (const char *)p + i, (size_t)r);
            i += (size_t)r;
        } else if (r == 0) {
            kiln_sb_putn(&s->out, replacement, 3);
            i++;
        } else
            break; /* a character still missing bytes: wait for them */
    }
    if (i && i < n) memmove(s->pending.s, s->pending.s + i, n - i);
    s->pending.len = n - i;
    *text = s->out.len ? s->out.s : "";
    *len = s->out.len;
    return 0;
}

void tok_stream_flush(tok_stream *s, const char **text, size_t *len) {
    *text = "";
    *len = 0;
    if (!s) return;
    s->out.len = 0;
    if (s->pending.len) kiln_sb_putn(&s->out, replacement, 3);
    s->pending.len = 0;
    s->strip = s->at_start && s->t->add_space_prefix;
    *text = s->out.len ? s->out.s : "";
    *len = s->out.len;
}
