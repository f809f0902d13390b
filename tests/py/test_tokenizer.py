"""test_tokenizer.py — kiln's tokenizers (src/model/tokenizer*.c) against
independent Python implementations written here.

Calls the C functions through ctypes from KILN_LIB (default build/libkiln.so):
kiln_tok_new / kiln_tok_encode / kiln_tok_decode / kiln_tok_token_to_piece /
kiln_tok_stream_* and kiln_tok_unicode_class (the BPE pre-tokenizer's
character classes): the public include/kiln_tokenizer.h.

Cases:
  SPM, on the real gemma3 vocabulary (262144 tokens, scores, token types) read
  with gguf.GGUFReader from models/gemma-3-270m-q4_k_m.gguf:
    - known answers: ids equal a quadratic Python implementation of the
      SentencePiece merge (repeatedly join the adjacent pair whose concatenation
      is a vocabulary string of highest score, leftmost on ties; byte fallback;
      user-defined tokens cut out first, control tokens with parse_special)
      on ~35 texts
    - hand-checkable facts (BOS first, "▁Hello" used, "<start_of_turn>",
      newline runs, byte fallback ids)
    - round trips decode(encode(t)) == t, also on long texts (and O(n log n)
      in practice: 300 kB encodes in well under the time limit)
    - streaming decode: valid UTF-8 at every step, holds back split characters
  BPE, on a tiny byte-level vocabulary trained here on a paragraph:
    - ids equal a Python gpt2-style BPE (merge all occurrences of the best
      ranked pair) after a `re` pre-tokenizer with the gpt2, llama3 and qwen2
      patterns (\\p{L} / \\p{N} spelled out from unicodedata), ~30 texts each
    - round trips, special tokens
  Bad input: invalid UTF-8 text, out-of-range ids, broken configs.
Prints "PASS name" / "FAIL name: why" per case; exits non-zero on failure.
"""
import ctypes
import os
import re
import sys
import time
import traceback
import unicodedata

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.environ.get("KILN_LIB", os.path.join(ROOT, "build", "libkiln.so"))
MODEL = os.environ.get("KILN_MODEL", os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))

failures = 0


def report(name, ok, why=""):
    global failures
    if ok:
        print(f"PASS {name}")
    else:
        failures += 1
        print(f"FAIL {name}: {why}")
    sys.stdout.flush()


def case(name):
    """decorator: run the function now; an exception is a FAIL with its message"""
    def run(fn):
        try:
            r = fn()
            if r is None or r is True:
                report(name, True)
            else:
                report(name, False, str(r))
        except Exception as e:  # noqa: BLE001 — any error is a failure of this case
            traceback.print_exc()
            report(name, False, f"{type(e).__name__}: {e}")
        return fn
    return run


# ------------------------------------------------------------------ binding

lib = ctypes.CDLL(LIB)
c_i32p = ctypes.POINTER(ctypes.c_int32)

# tok_str {const char *s; uint32_t n;} as a numpy record, so 262144 of them are cheap
TOKSTR = np.dtype({"names": ["s", "n"], "formats": ["<u8", "<u4"], "offsets": [0, 8], "itemsize": 16})


class TokConfig(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("n_vocab", ctypes.c_int32), ("tokens", ctypes.c_void_p),
                ("scores", ctypes.c_void_p), ("token_types", ctypes.c_void_p), ("n_merges", ctypes.c_int32),
                ("merges", ctypes.c_void_p), ("bos_id", ctypes.c_int32), ("eos_id", ctypes.c_int32),
                ("unk_id", ctypes.c_int32), ("pad_id", ctypes.c_int32), ("eot_id", ctypes.c_int32),
                ("add_bos", ctypes.c_int), ("add_eos", ctypes.c_int), ("add_space_prefix", ctypes.c_int),
                ("pre", ctypes.c_char_p)]


lib.kiln_tok_new.argtypes = [ctypes.POINTER(TokConfig), ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t]
lib.kiln_tok_new.restype = ctypes.c_int
lib.kiln_tok_free.argtypes = [ctypes.c_void_p]
lib.kiln_tok_encode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, c_i32p,
                           ctypes.c_int]
lib.kiln_tok_encode.restype = ctypes.c_int
lib.kiln_tok_decode.argtypes = [ctypes.c_void_p, c_i32p, ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                           ctypes.POINTER(ctypes.c_int)]
lib.kiln_tok_decode.restype = ctypes.c_long
lib.kiln_tok_token_to_piece.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
lib.kiln_tok_token_to_piece.restype = ctypes.c_int
lib.kiln_tok_stream_new.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
lib.kiln_tok_stream_new.restype = ctypes.c_void_p
lib.kiln_tok_stream_free.argtypes = [ctypes.c_void_p]
lib.kiln_tok_stream_push.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p),
                                ctypes.POINTER(ctypes.c_size_t)]
lib.kiln_tok_stream_push.restype = ctypes.c_int
lib.kiln_tok_stream_flush.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
lib.kiln_tok_lookup.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
lib.kiln_tok_lookup.restype = ctypes.c_int32
lib.kiln_tok_is_eog.argtypes = [ctypes.c_void_p, ctypes.c_int32]
lib.kiln_tok_is_eog.restype = ctypes.c_int
lib.kiln_tok_pretokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, c_i32p, ctypes.c_int]
lib.kiln_tok_pretokenize.restype = ctypes.c_int
lib.kiln_tok_unicode_class.argtypes = [ctypes.c_uint32]
lib.kiln_tok_unicode_class.restype = ctypes.c_int

SPM, BPE = 0, 1
T_NORMAL, T_UNKNOWN, T_CONTROL, T_USER, T_UNUSED, T_BYTE = 1, 2, 3, 4, 5, 6


def str_array(items):
    """(numpy tok_str records, keep-alive) for a list of bytes"""
    blob = np.frombuffer(b"".join(items) + b"\0", dtype=np.uint8).copy()
    lens = np.array([len(x) for x in items], dtype=np.int64)
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]]) if len(items) else np.zeros(0, np.int64)
    arr = np.zeros(len(items), dtype=TOKSTR)
    arr["s"] = blob.ctypes.data + offs
    arr["n"] = lens
    return arr, blob


class Tok:
    def __init__(self, kind, tokens, scores=None, types=None, merges=None, bos=-1, eos=-1, unk=-1, eot=-1,
                 add_bos=0, add_eos=0, add_space_prefix=0, pre=None):
        self.ptr = None
        toks, keep1 = str_array(tokens)
        cfg = TokConfig(kind=kind, n_vocab=len(tokens), tokens=toks.ctypes.data, bos_id=bos, eos_id=eos,
                        unk_id=unk, pad_id=-1, eot_id=eot, add_bos=add_bos, add_eos=add_eos,
                        add_space_prefix=add_space_prefix, pre=pre.encode() if pre is not None else None)
        keep = [toks, keep1]
        if scores is not None:
            sc = np.ascontiguousarray(scores, dtype=np.float32)
            keep.append(sc)
            cfg.scores = sc.ctypes.data
        if types is not None:
            ty = np.ascontiguousarray(types, dtype=np.int32)
            keep.append(ty)
            cfg.token_types = ty.ctypes.data
        if merges is not None:
            m, keep2 = str_array(merges)
            keep += [m, keep2]
            cfg.merges = m.ctypes.data
            cfg.n_merges = len(merges)
        err = ctypes.create_string_buffer(512)
        out = ctypes.c_void_p()
        self.status = lib.kiln_tok_new(ctypes.byref(cfg), ctypes.byref(out), err, 512)
        self.error = err.value.decode(errors="replace")
        if self.status == 0:
            self.ptr = out.value
        del keep  # tok_new copies: the arrays may go now

    def __del__(self):
        if self.ptr:
            lib.kiln_tok_free(self.ptr)

    def encode(self, text, add_special=False, parse_special=False):
        b = text if isinstance(text, bytes) else text.encode()
        n = lib.kiln_tok_encode(self.ptr, b, len(b), int(add_special), int(parse_special), None, 0)
        assert n >= 0, "tok_encode failed"
        buf = (ctypes.c_int32 * max(n, 1))()
        m = lib.kiln_tok_encode(self.ptr, b, len(b), int(add_special), int(parse_special), buf, n)
        assert m == n, f"count changed {n} -> {m}"
        return list(buf[:n])

    def decode(self, ids, special=False):
        arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        bad = ctypes.c_int(-1)
        n = lib.kiln_tok_decode(self.ptr, arr, len(ids), int(special), None, 0, ctypes.byref(bad))
        if n < 0:
            return None, bad.value
        buf = ctypes.create_string_buffer(max(n, 1))
        m = lib.kiln_tok_decode(self.ptr, arr, len(ids), int(special), buf, n, None)
        assert m == n
        return buf.raw[:n], -1

    def pretokenize(self, text):
        b = text.encode()
        n = lib.kiln_tok_pretokenize(self.ptr, b, len(b), None, 0)
        assert n >= 0, "tok_pretokenize failed"
        ends = (ctypes.c_int32 * max(n, 1))()
        lib.kiln_tok_pretokenize(self.ptr, b, len(b), ends, n)
        starts = [0] + list(ends[:n])
        return [b[a:z].decode() for a, z in zip(starts, ends[:n])]

    def lookup(self, s):
        b = s.encode() if isinstance(s, str) else s
        return lib.kiln_tok_lookup(self.ptr, b, len(b))

    def stream(self, ids, special=False):
        """push ids one at a time; returns (chunks, status of each push, flushed tail)"""
        st = lib.kiln_tok_stream_new(self.ptr, int(special), 1)
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        chunks, rcs = [], []
        for i in ids:
            rc = lib.kiln_tok_stream_push(st, i, ctypes.byref(p), ctypes.byref(n))
            rcs.append(rc)
            chunks.append(ctypes.string_at(p.value, n.value) if n.value else b"")
        lib.kiln_tok_stream_flush(st, ctypes.byref(p), ctypes.byref(n))
        tail = ctypes.string_at(p.value, n.value) if n.value else b""
        lib.kiln_tok_stream_free(st)
        return chunks, rcs, tail


# -------------------------------------------------------- Python references

SP = "\u2581"


def split_specials(text, specials):
    """llama.cpp's order: each special string, longest first, is cut out of the
    raw fragments left so far (left to right, non-overlapping)"""
    frags = [(None, text)] if text else []  # empty text: no fragment, so no "▁" either
    for s, tid in specials:
        out = []
        for tid0, f in frags:
            if tid0 is not None or s not in f:
                out.append((tid0, f))
                continue
            parts = f.split(s)
            for k, part in enumerate(parts):
                if k:
                    out.append((tid, s))
                if part:
                    out.append((None, part))
        frags = out
    return frags


class SpmRef:
    def __init__(self, tokens, scores, types, bos, eos, add_bos, add_eos, add_space_prefix):
        self.vocab = {}
        for i, t in enumerate(tokens):
            self.vocab[t.decode("utf-8", "surrogateescape")] = i
        self.scores, self.types = scores, types
        self.bos, self.eos, self.add_bos, self.add_eos, self.asp = bos, eos, add_bos, add_eos, add_space_prefix
        self.byte = {}
        for i, t in enumerate(tokens):
            if types[i] == T_BYTE:
                self.byte[int(t[3:5], 16)] = i
        sp = [(t.decode(), i) for i, t in enumerate(tokens) if types[i] in (T_CONTROL, T_UNKNOWN, T_USER) and t]
        sp.sort(key=lambda x: (-len(x[0].encode()), x[1]))
        self.user = [x for x in sp if types[x[1]] == T_USER]
        self.all_specials = sp

    def merge(self, s):
        syms = list(s)
        while True:
            best, best_score = -1, None
            for i in range(len(syms) - 1):
                j = self.vocab.get(syms[i] + syms[i + 1])
                if j is not None and (best_score is None or self.scores[j] > best_score):
                    best, best_score = i, self.scores[j]
            if best < 0:
                break
            syms[best:best + 2] = [syms[best] + syms[best + 1]]
        out = []
        for s_ in syms:
            if s_ in self.vocab:
                out.append(self.vocab[s_])
            else:
                out += [self.byte[b] for b in s_.encode()]
        return out

    def encode(self, text, add_special=False, parse_special=False):
        out = [self.bos] if add_special and self.add_bos else []
        prev_special = True
        for tid, f in split_specials(text, self.all_specials if parse_special else self.user):
            if tid is not None:
                out.append(tid)
                prev_special = True
                continue
            norm = (SP if self.asp and prev_special else "") + f.replace(" ", SP)
            out += self.merge(norm)
            prev_special = False
        if add_special and self.add_eos:
            out.append(self.eos)
        return out


def unicode_classes():
    """regex character-class bodies for \\p{L}, \\p{N} and \\s, from unicodedata"""
    def ranges(first):
        out, start = [], None
        for c in range(0x110000):
            ok = unicodedata.category(chr(c))[0] == first
            if ok and start is None:
                start = c
            if not ok and start is not None:
                out.append((start, c - 1))
                start = None
        return "".join(("\\U%08x" % a) if a == b else ("\\U%08x-\\U%08x" % (a, b)) for a, b in out)
    ws = "\\t\\n\\x0b\\x0c\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
    return ranges("L"), ranges("N"), ws


L_CLS, N_CLS, WS_CLS = unicode_classes()
CONTRACT_CS = "'s|'t|'re|'ve|'m|'ll|'d"
CONTRACT_CI = "'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]"
OTHER = f"[^{WS_CLS}{L_CLS}{N_CLS}]"
PRE_PATTERNS = {
    "gpt2": f"{CONTRACT_CS}| ?[{L_CLS}]+| ?[{N_CLS}]+| ?{OTHER}+|[{WS_CLS}]+(?![^{WS_CLS}])|[{WS_CLS}]+",
    "llama-bpe": f"(?:{CONTRACT_CI})|[^\\r\\n{L_CLS}{N_CLS}]?[{L_CLS}]+|[{N_CLS}]{{1,3}}| ?{OTHER}+[\\r\\n]*|"
                 f"[{WS_CLS}]*[\\r\\n]+|[{WS_CLS}]+(?![^{WS_CLS}])|[{WS_CLS}]+",
    "qwen2": f"(?:{CONTRACT_CI})|[^\\r\\n{L_CLS}{N_CLS}]?[{L_CLS}]+|[{N_CLS}]| ?{OTHER}+[\\r\\n]*|"
             f"[{WS_CLS}]*[\\r\\n]+|[{WS_CLS}]+(?![^{WS_CLS}])|[{WS_CLS}]+",
}
PRE_RE = {k: re.compile(v) for k, v in PRE_PATTERNS.items()}
# the original patterns, for the `regex` module when it is installed
PRE_ORIG = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+",
}


def byte_alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = byte_alphabet()
U2B = {v: k for k, v in B2U.items()}


def to_alpha(s):
    return "".join(B2U[b] for b in s.encode("utf-8", "surrogateescape"))


def train_bpe(corpus, n_merges):
    """a tiny byte-level BPE: most frequent pair first, ties by first seen"""
    words = {}
    for piece in PRE_RE["gpt2"].findall(corpus):
        w = tuple(to_alpha(piece))
        words[w] = words.get(w, 0) + 1
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + c
        if not counts:
            break
        best = max(counts.items(), key=lambda kv: kv[1])[0]
        merges.append(best)
        nw = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nw[tuple(out)] = nw.get(tuple(out), 0) + c
        words = nw
    return merges


class BpeRef:
    def __init__(self, vocab_list, merges, pre, specials):
        self.vocab = {t: i for i, t in enumerate(vocab_list)}
        self.ranks = {m: r for r, m in enumerate(merges)}
        self.pre = pre
        self.specials = sorted(specials, key=lambda x: (-len(x[0].encode()), x[1]))

    def bpe(self, word):
        """GPT-2's loop: merge every occurrence of the best-ranked pair"""
        w = list(word)
        while len(w) > 1:
            pairs = [(self.ranks.get((a, b), 1 << 30), (a, b)) for a, b in zip(w, w[1:])]
            rank, best = min(pairs)
            if rank == 1 << 30:
                break
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            w = out
        return w

    def encode(self, text, parse_special=True):
        out = []
        sp = self.specials if parse_special else [s for s in self.specials if s[2] == T_USER]
        for tid, f in split_specials(text, [(s, i) for s, i, _ in sp]):
            if tid is not None:
                out.append(tid)
                continue
            for piece in PRE_RE[self.pre].findall(f):
                a = to_alpha(piece)
                if self.pre == "llama-bpe" and a in self.vocab:
                    out.append(self.vocab[a])
                    continue
                out += [self.vocab[s] for s in self.bpe(a)]
        return out


# ------------------------------------------------------------------ texts

SPM_TEXTS = [
    "Hello", "Hello world", " Hello world", "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.", "  leading and trailing  ", "a  b   c    d",
    "tabs\tand\nnewlines\n\nand\r\nCRLF", "\n\n\n", "Numbers: 1234567890 3.14159 -42 1e-9",
    "Ça va? Été, garçon, naïve café, Übermäßig, señor", "Привет, мир! Как дела?", "日本語のテキストです。東京",
    "中文文本，测试一下分词器。", "한국어 텍스트", "नमस्ते दुनिया", "مرحبا بالعالم", "שלום עולם",
    "Emoji: 😀🎉👍🏽 👨‍👩‍👧 🧬", "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; i++) { a[i] += b[i]; }", "<start_of_turn>user\nHi there<end_of_turn>\n",
    "<b>bold</b> and <div>tags</div>", "URL: https://example.com/path?q=1&r=2#frag",
    "Math: ∑ x² ≤ ∞, √2 ≈ 1.414, α+β=γ", "Rare: \U00010000 \U0001D11E ꙮ \u0000 \U0010FFFD end",
    "mixed English和中文and русский", "''' \"quotes\" `backticks` 'single'", "x" * 200,
    " " * 45 + "deep indent", "\t\t\tindented with tabs", "ends with space ", "!!!???...---",
    "supercalifragilisticexpialidocious antidisestablishmentarianism", "",
]


def main():
    # ---------------------------------------------------------------- BPE
    corpus = ("Byte-level BPE was introduced with GPT-2. It never needs an unknown token: every byte has "
              "a symbol. The tokenizer first splits text with a regex, then merges the most frequent pairs. "
              "Llama 3 and Qwen2 use similar rules; they're careful about numbers like 12345 and 2024, "
              "contractions (don't, I'll, we've, she'd, I'm) and   runs of   spaces.\n\nNew lines too!\n"
              "Ünïcödé wörds, 日本語, and émojis 😀 show up as well. THE END, I'M DONE, WE'VE WON.")
    merges = train_bpe(corpus, 300)
    base = [B2U[b] for b in range(256)]
    vocab = base + [a + b for a, b in merges]
    vocab = list(dict.fromkeys(vocab))
    specials = [("<|endoftext|>", len(vocab), T_CONTROL), ("<|im_start|>", len(vocab) + 1, T_CONTROL),
                ("<tool>", len(vocab) + 2, T_USER)]
    vocab += [s for s, _, _ in specials]
    types = [T_NORMAL] * (len(vocab) - 3) + [T_CONTROL, T_CONTROL, T_USER]
    merge_strs = [(a + " " + b).encode() for a, b in merges]
    bpe_texts = SPM_TEXTS[:-1] + [
        "don't I'll we've she'd I'm they're it's", "DON'T I'LL WE'VE SHE'D I'M THEY'RE IT'S", "'hello 'x '",
        "12345 2024 1 22 333 4444 55555", "a1b2c3 ١٢٣ ⅫⅩ ²³", "  \n  \n\n   x", "x   \n", "tail spaces   ",
        "\u00a0nbsp\u3000ideographic space", "<|endoftext|>text<|im_start|>more<tool>x",
        "Ünïcödé wörds, 日本語, and émojis 😀", corpus,
    ]
    have_regex = True
    try:
        import regex  # noqa: F401 — optional cross-check of the oracle's own patterns
    except ImportError:
        have_regex = False

    for pre in ("gpt2", "llama-bpe", "qwen2"):
        tok = Tok(BPE, [v.encode() for v in vocab], types=types, merges=merge_strs, pre=pre,
                  bos=len(vocab) - 3, eos=len(vocab) - 3)
        ref = BpeRef(vocab, merges, pre, specials)

        @case(f"bpe_{pre}_create")
        def _():
            return tok.status == 0 or f"tok_new failed: {tok.error}"

        if tok.status != 0:
            continue

        if have_regex:
            @case(f"bpe_{pre}_oracle_pattern_matches_regex_module")
            def _():
                import regex
                r = regex.compile(PRE_ORIG[pre])
                for t in bpe_texts:
                    if r.findall(t) != PRE_RE[pre].findall(t):
                        return f"oracle split differs on {t!r}"

        @case(f"bpe_{pre}_splits")
        def _():
            split_texts = bpe_texts + [
                "a\n\n  b", "x \n \n y", "\r\n\r\n\tz", "  !!  ??\n\nok", "it's IT'S It'Ll 'LL", "\t\tfoo",
                " 123 4567 89", "x\u00a0\u00a0y", "end\n", "    ", "a!\n\n\nb", "..\r\n  ..", "٣٤٥ ١٢", "é'd"]
            for t in split_texts:
                got, want = tok.pretokenize(t), PRE_RE[pre].findall(t)
                if got != want:
                    return f"{t[:40]!r}: kiln {got[:8]} ref {want[:8]}"

        @case(f"bpe_{pre}_known_answers")
        def _():
            bad = []
            for t in bpe_texts:
                got, want = tok.encode(t, parse_special=True), ref.encode(t)
                if got != want:
                    bad.append(f"{t[:40]!r}: kiln {got[:12]} ref {want[:12]}")
            return not bad or f"{len(bad)}/{len(bpe_texts)} differ: " + "; ".join(bad[:3])

        @case(f"bpe_{pre}_round_trip")
        def _():
            for t in bpe_texts:
                for ps in (False, True):
                    ids = tok.encode(t, parse_special=ps)
                    got, _ = tok.decode(ids, special=True)
                    if got != t.encode():
                        return f"{t[:40]!r} (parse_special={ps}) -> {got[:60]!r}"
                    chunks, rcs, tail = tok.stream(ids, special=True)
                    if b"".join(chunks) + tail != t.encode() or any(rcs):
                        return f"stream of {t[:40]!r} differs"
                    for c in chunks:
                        c.decode("utf-8")

    @case("bpe_pre_tokenizer_splits")
    def _():
        # hand-checkable splits (ids of single-character pieces tell where cuts are)
        tok = Tok(BPE, [v.encode() for v in vocab], types=types, merges=[], pre="qwen2")
        ids = tok.encode("2024")  # qwen2: one digit per piece, no merges here
        if ids != [tok.lookup(c) for c in "2024"]:
            return f"qwen2 digits {ids}"
        tok3 = Tok(BPE, [v.encode() for v in vocab] + ["202".encode(), "4".encode()], types=types + [1, 1],
                   merges=[], pre="llama-bpe")
        ids = tok3.encode("2024")  # llama3: "202" "4", each a whole vocabulary hit
        if ids != [tok3.lookup("202"), tok3.lookup("4")]:
            return f"llama3 digit groups {ids}"

    @case("bpe_unicode_classes_match_unicodedata")
    def _():
        cls = np.array([lib.kiln_tok_unicode_class(c) for c in range(0x110000)], dtype=np.int8)
        ws = {9, 10, 11, 12, 13, 32, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000} | \
            set(range(0x2000, 0x200B))
        want = np.zeros(0x110000, dtype=np.int8)
        for c in range(0x110000):
            if c in ws:
                want[c] = 3
            else:
                k = unicodedata.category(chr(c))[0]
                want[c] = 1 if k == "L" else 2 if k == "N" else 0
        bad = np.nonzero(cls != want)[0]
        if unicodedata.unidata_version == "14.0.0":
            return len(bad) == 0 or f"{len(bad)} code points differ, first U+{bad[0]:04X}"
        # another Unicode version: only characters assigned since may differ
        newly = [c for c in bad if cls[c] == 0 and want[c] in (1, 2)]
        return (len(newly) == len(bad) and len(bad) < 5000) or \
            f"{len(bad)} differ (Unicode {unicodedata.unidata_version}), first U+{bad[0]:04X}"

    # ---------------------------------------------------------------- SPM
    if not os.path.exists(MODEL):
        print(f"SKIP spm_gemma3: {MODEL} not found (tools/fetch_model.sh fetches it)")
        return
    import gguf
    rd = gguf.GGUFReader(MODEL)
    f = rd.fields

    def scalar(k, default=None):
        return f[k].contents() if k in f else default

    tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]) for i in f["tokenizer.ggml.tokens"].data]
    scores = np.array(f["tokenizer.ggml.scores"].contents(), dtype=np.float32)
    types = np.array(f["tokenizer.ggml.token_type"].contents(), dtype=np.int32)
    bos, eos = scalar("tokenizer.ggml.bos_token_id", -1), scalar("tokenizer.ggml.eos_token_id", -1)
    unk = scalar("tokenizer.ggml.unknown_token_id", -1)
    add_bos = int(scalar("tokenizer.ggml.add_bos_token", True))
    add_eos = int(scalar("tokenizer.ggml.add_eos_token", False))
    asp = int(scalar("tokenizer.ggml.add_space_prefix", True))
    assert scalar("tokenizer.ggml.model") == "llama"
    del rd
    t0 = time.time()
    tok = Tok(SPM, tokens, scores=scores, types=types, bos=bos, eos=eos, unk=unk, add_bos=add_bos,
              add_eos=add_eos, add_space_prefix=asp)
    build_s = time.time() - t0
    print(f"# tok_new on {len(tokens)} tokens: {build_s:.2f}s")
    ref = SpmRef(tokens, scores, types, bos, eos, add_bos, add_eos, asp)

    @case("spm_gemma3_create")
    def _():
        return (tok.status == 0 and build_s < 10) or f"tok_new: {tok.error} ({build_s:.1f}s)"

    if tok.status != 0:
        return

    @case("spm_gemma3_known_answers")
    def _():
        bad = []
        for t in SPM_TEXTS:
            for add_special, ps in ((True, False), (False, True)):
                got, want = tok.encode(t, add_special, ps), ref.encode(t, add_special, ps)
                if got != want:
                    bad.append(f"{t[:30]!r} special={add_special},{ps}: kiln {got[:10]} ref {want[:10]}")
        return not bad or f"{len(bad)} differ: " + "; ".join(bad[:3])

    @case("spm_gemma3_facts")
    def _():
        ids = tok.encode("Hello", add_special=True)
        if ids[0] != 2 or bos != 2 or not add_bos:
            return f"BOS: {ids}"
        if tok.encode("Hello", add_special=False)[:1] == [2]:
            return "BOS without add_special"
        hid = tokens.index("▁Hello".encode())
        if tok.encode(" Hello") != [hid]:
            return f"' Hello' -> {tok.encode(' Hello')} (▁Hello is {hid})"
        if hid not in tok.encode("Say Hello to everyone"):
            return "▁Hello not used mid-sentence"
        sot = tokens.index(b"<start_of_turn>")
        if tok.encode("<start_of_turn>", parse_special=True) != [sot]:
            return "control token not parsed"
        plain = tok.encode("<start_of_turn>", parse_special=False)
        if sot in plain or len(plain) < 2:
            return f"control token parsed without parse_special: {plain}"
        nn = tokens.index(b"\n\n")
        if tok.encode("a\n\nb").count(nn) != 1:
            return "user-defined newline run not used"
        # byte fallback: a character with no token becomes its UTF-8 bytes
        if "ꙮ".encode() in set(tokens):
            return "test assumption: ꙮ has a token"
        want = [tokens.index(b"<0x%02X>" % b) for b in "ꙮ".encode()]
        if tok.encode("ꙮ") != want:
            return f"byte fallback {tok.encode('ꙮ')} want {want}"
        if not lib.kiln_tok_is_eog(tok.ptr, eos) or not lib.kiln_tok_is_eog(tok.ptr, tokens.index(b"<end_of_turn>")) \
                or lib.kiln_tok_is_eog(tok.ptr, hid):
            return "end-of-generation tokens"

    @case("spm_gemma3_round_trip")
    def _():
        extra = ["a" * 1000, "The end.\n" * 50, " ".join(SPM_TEXTS), "\U0001F600" * 30, "é" * 99]
        for t in SPM_TEXTS + extra:
            for add_special in (False, True):
                ids = tok.encode(t, add_special)
                got, _ = tok.decode(ids)
                if got != t.encode():
                    return f"{t[:40]!r} -> {got[:60]!r}"

    @case("spm_gemma3_long_text_n_log_n")
    def _():
        big = (" ".join(SPM_TEXTS) + "\n") * 300  # ~300 kB
        rep = "ab" * 100000  # one long word: the merge heap does all the work
        t1 = time.time()
        ids = tok.encode(big)
        ids2 = tok.encode(rep)
        dt = time.time() - t1
        if tok.decode(ids)[0] != big.encode() or tok.decode(ids2)[0] != rep.encode():
            return "round trip of long text"
        return dt < 10 or f"{len(big) + len(rep)} bytes took {dt:.1f}s"

    @case("spm_gemma3_stream_utf8")
    def _():
        texts = ["ꙮ𐀀ꙮ split bytes", "Emoji 😀🎉👨‍👩‍👧", "日本語ꙮ中文", "mixé ꙮ \U0001D11E end"] + SPM_TEXTS
        held = 0
        for t in texts:
            ids = tok.encode(t, True)
            chunks, rcs, tail = tok.stream(ids)
            if any(rcs):
                return "push failed"
            for c, i in zip(chunks, ids):
                c.decode("utf-8")  # raises on broken UTF-8
                if not c and types[i] == T_BYTE:
                    held += 1
            if b"".join(chunks) + tail != t.encode():
                return f"stream of {t[:30]!r}: {b''.join(chunks)[:60]!r}"
        return held >= 6 or f"only {held} byte tokens were held back: split characters not exercised"

    @case("spm_gemma3_invalid_utf8")
    def _():
        for raw in [b"abc\xff\xfe def", b"\xe2\x82", b"\x80\x80 x", b"ok \xf0\x9f\x98", b"\xc0\xaf \xed\xa0\x80"]:
            ids = tok.encode(raw, True)
            if any(i < 0 or i >= len(tokens) for i in ids):
                return "id out of range"
            got, _ = tok.decode(ids)
            if got != raw:
                return f"{raw!r} -> {got!r}"
            chunks, _, tail = tok.stream(ids)
            s = (b"".join(chunks) + tail).decode("utf-8")  # replacement characters, never broken
            if "\ufffd" not in s:
                return f"no U+FFFD for {raw!r}: {s!r}"

    @case("spm_add_space_prefix")
    def _():
        # the llama-2 convention on the same vocabulary: "▁" before the text
        # and after each special token; decoding drops the first one
        tok2 = Tok(SPM, tokens, scores=scores, types=types, bos=bos, eos=eos, unk=unk, add_bos=1,
                   add_space_prefix=1)
        ref2 = SpmRef(tokens, scores, types, bos, eos, 1, 0, 1)
        hid = tokens.index("▁Hello".encode())
        if tok2.encode("Hello") != [hid]:
            return f"'Hello' -> {tok2.encode('Hello')}"
        for t in SPM_TEXTS:
            for ps in (False, True):
                if tok2.encode(t, True, ps) != ref2.encode(t, True, ps):
                    return f"{t[:30]!r}: kiln {tok2.encode(t, True, ps)[:10]} ref {ref2.encode(t, True, ps)[:10]}"
        for t in ["Hello world", " two spaces at start", "x", "Ça va? 日本語 😀 ꙮ"]:
            ids = tok2.encode(t, True)
            if tok2.decode(ids)[0] != t.encode():
                return f"round trip {t!r}: {tok2.decode(ids)[0]!r}"
            chunks, _, tail = tok2.stream(ids)
            if b"".join(chunks) + tail != t.encode():
                return f"stream {t!r}: {b''.join(chunks)!r}"

    @case("spm_gemma3_random_bytes_and_ids")
    def _():
        rng = np.random.default_rng(7)
        pool = [b"<start_of_turn>", b"\n\n", b"  ", b"\xe2\x96", b"\xf0\x9f", " é中😀".encode(), b"<b>"]
        for k in range(200):
            parts = [rng.integers(0, 256, int(rng.integers(0, 12)), dtype=np.uint8).tobytes()
                     for _ in range(int(rng.integers(1, 6)))]
            raw = b"".join(p + pool[int(rng.integers(0, len(pool)))] for p in parts)
            raw = raw.replace("\u2581".encode(), b"_")  # a literal ▁ decodes as a space, by design
            ids = tok.encode(raw, add_special=bool(k & 1), parse_special=bool(k & 2))
            got, _ = tok.decode(ids, special=True)
            want = raw if not (k & 1) else b"<bos>" + raw
            if got != want:
                return f"{raw!r} -> {got!r}"
        for k in range(50):  # arbitrary id sequences still stream valid UTF-8
            ids = [int(x) for x in rng.integers(0, len(tokens), 40)] + [int(x) for x in rng.integers(238, 494, 40)]
            rng.shuffle(ids)
            chunks, rcs, tail = tok.stream(ids, special=bool(k & 1))
            (b"".join(chunks) + tail).decode("utf-8")
            if any(rcs):
                return "push failed on a valid id"

    @case("spm_gemma3_bad_ids")
    def _():
        n = len(tokens)
        for bad_ids in ([5, n], [-1], [1, 2, 1 << 30]):
            out, where = tok.decode(bad_ids)
            if out is not None or where != len(bad_ids) - 1:
                return f"decode {bad_ids} -> {out!r}, {where}"
        buf = ctypes.create_string_buffer(8)
        if lib.kiln_tok_token_to_piece(tok.ptr, n, 0, buf, 8) != -1 or lib.kiln_tok_token_to_piece(tok.ptr, -3, 0, buf, 8) != -1:
            return "token_to_piece out of range"
        chunks, rcs, tail = tok.stream([tokens.index(b"<0xE2>"), n, -7])
        if rcs != [0, -1, -1] or any(chunks) or tail != "\ufffd".encode():
            return f"stream bad ids: {rcs} {chunks} {tail!r}"
        # a small buffer is filled as far as it goes and the full length returned
        full = tok.decode(tok.encode("Hello world"))[0]
        arr = (ctypes.c_int32 * 8)(*tok.encode("Hello world"))
        small = ctypes.create_string_buffer(4)
        r = lib.kiln_tok_decode(tok.ptr, arr, len(tok.encode("Hello world")), 0, small, 4, None)
        if r != len(full) or small.raw[:4] != full[:4]:
            return f"short buffer: {r} {small.raw!r}"

    @case("tokenizer_bad_configs")
    def _():
        toks = [b"a", b"b", b"ab", b"<0x41>"]
        probs = [
            dict(kind=SPM, tokens=toks, bos=7),
            dict(kind=SPM, tokens=toks, types=[1, 1, 9, 6]),
            dict(kind=SPM, tokens=toks, scores=[0, float("nan"), 0, 0]),
            dict(kind=SPM, tokens=[]),
            dict(kind=SPM, tokens=toks, add_bos=1),
            dict(kind=BPE, tokens=toks, merges=[b"a b", b"ab"], pre="gpt2"),
            dict(kind=BPE, tokens=toks, merges=[b"a b"], pre="no-such-pre"),
            dict(kind=7, tokens=toks),
        ]
        for p in probs:
            kind = p.pop("kind")
            tk = Tok(kind, p.pop("tokens"), **p)
            if tk.status == 0 or not tk.error:
                return f"accepted {p}"
        ok = Tok(SPM, toks, scores=[0, 0, 1, 0])
        if ok.status != 0 or ok.encode("ab") != [2] or ok.encode("A") != [3] or ok.encode("ba") != [1, 0]:
            return f"small SPM: {ok.error} {ok.encode('ab')} {ok.encode('A')}"


if __name__ == "__main__":
    main()
    sys.exit(1 if failures else 0)
