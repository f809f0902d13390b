#!/bin/sh
# bench/agreement.sh — does kiln agree with llama.cpp on the real default model?
# (Issue 6 item 8; a bench, not a CI test: it needs the llama.cpp peer
# binaries from bench/install_llamacpp.sh and takes minutes.)
#
# (a) Tokenisation of bench/agreement_text.txt (many scripts, emoji with ZWJ
#     sequences, code with tabs, runs of spaces, blank lines) must be
#     identical: the whole file, then each line on its own. llama.cpp side:
#     llama-tokenize --ids --no-escape (text fed on stdin, byte for byte).
#     kiln side: the tokenizer `kiln run` uses (tok_from_gguf + tok_encode from
#     build/libkiln.so through ctypes), because prefilling ~660 tokens through
#     `kiln run -n 0` costs ~7 minutes on a 2-core machine; `kiln run`'s own
#     prompt ids are still compared in (b). BOS is added on both sides.
# (b) Greedy continuations: for 5 fixed prompts, 32 tokens from llama-simple
#     (greedy sampler) and from `kiln run --temp 0 --json`. llama-simple prints
#     text only, so its continuation (text after the echoed prompt) is
#     re-tokenised with llama-tokenize --no-bos; a token that is a byte
#     fragment or merges across the boundary could differ there, which the
#     report would show as a mismatch, never hide. Reports per prompt the
#     matching leading tokens and matching positions, then a summary.
#
# usage: sh bench/agreement.sh [-m MODEL.gguf] [-n 32] [--skip-gen]
# Environment: KILN (build/kiln), KILN_LIB (build/libkiln.so), LLAMA_BIN
# (bench/.peers/llama.cpp/bin).
# Exit status: 0 when tokenisation is identical (generation agreement is
# reported, not judged: float summation order may legitimately flip a
# near-tie), 1 when tokenisation differs, 2 on setup errors.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
MODEL="$here/models/gemma-3-270m-q4_k_m.gguf" N=32 GEN=1
KILN=${KILN:-$here/build/kiln}
KILN_LIB=${KILN_LIB:-$here/build/libkiln.so}
LLAMA_BIN=${LLAMA_BIN:-$here/bench/.peers/llama.cpp/bin}
TEXT="$here/bench/agreement_text.txt"
die() { echo "agreement.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        -m) [ $# -ge 2 ] || die "-m needs a value"; MODEL=$2; shift ;;
        -n) [ $# -ge 2 ] || die "-n needs a value"; N=$2; shift ;;
        --skip-gen) GEN=0 ;;
        -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
    shift
done
[ -f "$MODEL" ] || die "model not found: $MODEL"
[ -f "$TEXT" ] || die "text not found: $TEXT"
[ -x "$KILN" ] || die "kiln binary not found: $KILN (run make)"
[ -f "$KILN_LIB" ] || die "kiln library not found: $KILN_LIB (run make)"
for b in llama-tokenize llama-simple; do
    [ -x "$LLAMA_BIN/$b" ] || die "$LLAMA_BIN/$b not found (run sh bench/install_llamacpp.sh)"
done
command -v python3 >/dev/null || die "python3 not found"
[ -f "$LLAMA_BIN/../VERSION" ] && echo "llama.cpp: $(sed -n 2p "$LLAMA_BIN/../VERSION")"
echo "model: $MODEL"

export MODEL N GEN KILN KILN_LIB LLAMA_BIN TEXT
exec python3 - <<'PY'
import ctypes, json, os, subprocess, sys, time
E = os.environ
MODEL, TEXT, KILN, BIN = E["MODEL"], E["TEXT"], E["KILN"], E["LLAMA_BIN"]
N, GEN = int(E["N"]), E["GEN"] == "1"

def llama_ids(text, bos=True):
    cmd = [BIN + "/llama-tokenize", "-m", MODEL, "--stdin", "--ids", "--log-disable", "--no-escape"]
    if not bos:
        cmd.append("--no-bos")
    r = subprocess.run(cmd, input=text.encode(), capture_output=True)
    if r.returncode != 0:
        sys.exit("agreement.sh: llama-tokenize failed: " + r.stderr.decode(errors="replace")[-500:])
    return json.loads(r.stdout.decode().strip().splitlines()[-1])

lib = ctypes.CDLL(E["KILN_LIB"])
# the model's tokenizer through the public include/kiln_llm.h: loaded on the
# reference interpreter (nothing compiled), the file mapped, a 16-row cache
class LlmParams(ctypes.Structure):
    _fields_ = [("n_ctx", ctypes.c_int64), ("threads", ctypes.c_int), ("interpreter", ctypes.c_int),
                ("use_mmap", ctypes.c_int), ("kv_dtype", ctypes.c_int), ("exact", ctypes.c_int),
                ("tune_s", ctypes.c_double), ("progress", ctypes.c_void_p), ("progress_ctx", ctypes.c_void_p)]
lib.kiln_llm_default_params.restype = LlmParams
lib.kiln_llm_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(LlmParams), ctypes.POINTER(ctypes.c_void_p),
                              ctypes.c_char_p, ctypes.c_size_t]
lib.kiln_llm_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                  ctypes.POINTER(ctypes.c_int32), ctypes.c_int]
lib.kiln_llm_tokenize.restype = ctypes.c_int
err = ctypes.create_string_buffer(1024)
lp = lib.kiln_llm_default_params()
lp.n_ctx, lp.interpreter, lp.use_mmap, lp.tune_s = 16, 1, 1, 0.0
tk = ctypes.c_void_p()
if lib.kiln_llm_load(MODEL.encode(), ctypes.byref(lp), ctypes.byref(tk), err, 1024) != 0:
    sys.exit("agreement.sh: kiln_llm_load: " + err.value.decode(errors="replace"))

def kiln_ids(text):
    b = text.encode()
    n = lib.kiln_llm_tokenize(tk, b, len(b), 1, 1, None, 0)   # parse_special as llama-tokenize does by default
    buf = (ctypes.c_int32 * max(n, 1))()
    lib.kiln_llm_tokenize(tk, b, len(b), 1, 1, buf, n)
    return list(buf[:n])

def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))

text = open(TEXT, encoding="utf-8").read()
ok = True
L, K = llama_ids(text), kiln_ids(text)
d = first_diff(L, K)
if d is None:
    print(f"tokenisation: identical ({len(L)} tokens, BOS included)")
else:
    ok = False
    print(f"tokenisation: DIFFERS at token {d} (llama.cpp {len(L)} tokens, kiln {len(K)})")
    print(f"  llama.cpp [{max(d-3,0)}:{d+5}]: {L[max(d-3,0):d+5]}")
    print(f"  kiln      [{max(d-3,0)}:{d+5}]: {K[max(d-3,0):d+5]}")
lines = text.split("\n")
match, bad = 0, []
for i, ln in enumerate(lines):
    if llama_ids(ln) == kiln_ids(ln):
        match += 1
    else:
        bad.append(i + 1)
print(f"tokenisation by line: {match}/{len(lines)} lines identical" + (f" (differ: lines {bad})" if bad else ""))
ok = ok and not bad

if GEN:
    prompts = ["The capital of France is",
               "Once upon a time, in a small village,",
               "def fibonacci(n):",
               "The three primary colors are",
               "Water boils at a temperature of"]
    tot_lead = tot_pos = tot = 0
    pid_ok = 0
    for p in prompts:
        t0 = time.time()
        r = subprocess.run([BIN + "/llama-simple", "-m", MODEL, "-n", str(N), p], capture_output=True)
        if r.returncode != 0:
            sys.exit("agreement.sh: llama-simple failed: " + r.stderr.decode(errors="replace")[-500:])
        out = r.stdout.decode("utf-8", errors="surrogateescape")
        if out.endswith("\n"):
            out = out[:-1]   # llama-simple prints one newline after the generation
        k = out.find(p)
        cont = out[k + len(p):] if k >= 0 else out
        lg = llama_ids(cont, bos=False)[:N] if cont else []
        r = subprocess.run([KILN, "run", "-m", MODEL, "-p", p, "-n", str(N), "--temp", "0", "--json"],
                           capture_output=True)
        if r.returncode != 0:
            sys.exit("agreement.sh: kiln run failed: " + r.stderr.decode(errors="replace")[-500:])
        kj = json.loads(r.stdout)
        kg = kj["ids"]
        pid_ok += kj["prompt_ids"] == llama_ids(p)
        lead = first_diff(lg, kg)
        lead = min(len(lg), len(kg)) if lead is None else lead
        pos = sum(1 for x, y in zip(lg, kg) if x == y)
        n = max(len(lg), len(kg))
        tot_lead += lead; tot_pos += pos; tot += n
        print(f"prompt {p!r}: leading match {lead}/{n}, positions match {pos}/{n}"
              f" (llama.cpp {len(lg)} tokens, kiln {len(kg)}; {time.time()-t0:.0f} s)")
        if lead < n:
            print(f"  llama.cpp: {lg}\n  kiln:      {kg}")
    print(f"generation summary: {len(prompts)} prompts x {N} tokens greedy; leading-match tokens {tot_lead}/{tot}, "
          f"matching positions {tot_pos}/{tot} ({100.0*tot_pos/max(tot,1):.1f}%); "
          f"kiln run prompt ids identical to llama-tokenize on {pid_ok}/{len(prompts)} prompts")
sys.exit(0 if ok else 1)
PY
