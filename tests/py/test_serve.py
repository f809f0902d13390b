"""test_serve.py — `kiln serve` end to end with the unmodified `openai` client
(PyPI, pinned in tests/requirements.txt) and raw HTTP, on a tiny random
gemma3 model (tests/py/tiny_llm.py: a SentencePiece vocabulary) written with
the published gemma3 chat template from tests/data/chat in its metadata.

What is checked:
  - /health and /v1/models; the API key (401 without it, accepted with it);
  - /v1/completions at temperature 0 gives exactly the text `kiln run --temp 0`
    prints for the same prompt and context;
  - chat completions streamed (several chunks, ending with a finish reason)
    join to the non-streamed text of the same request;
  - 4 concurrent greedy clients on --parallel 4 each get exactly the text the
    same request got alone;
  - stop strings cut the text before the stop and finish with "stop";
  - a client that disconnects mid-stream frees its slot (the server reports no
    busy slot soon after, and answers the next request);
  - requests beyond the slots and the queue get 503, the rest complete;
  - KILN_SERVE_PROFILE=1's table counts the tokens sampled and the prompt
    tokens prefilled (a prompt its slot holds computes one);
  - malformed JSON, wrong types, unknown fields, huge numbers, invalid UTF-8,
    a prompt longer than the context, a too large body, huge headers, unknown
    paths and methods: each a 4xx with an OpenAI-shaped error, and the server
    answers /health after each; a few hundred mutated request bodies and a
    crowd of slow clients (headers never finished) leave it answering.

Skipped, with a SKIP line, when kiln was built without the server's
libraries (libmicrohttpd, cJSON).
"""
import http.client
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as kc  # noqa: E402
import tiny_llm  # noqa: E402

BUILD = os.environ.get("KILN_BUILD") or os.path.join(kc.REPO, "build")
KILN = os.environ.get("KILN_BIN") or os.path.join(BUILD, "kiln")
TMP = tempfile.mkdtemp(prefix="kiln_serve_")
ENV = dict(os.environ)
ENV.pop("LD_PRELOAD", None)
ENV.setdefault("XDG_CACHE_HOME", "/tmp/kiln-test-cache-%d" % os.getuid())
CTX = 256
KEY = "sk-kiln-test"

suite = kc.Suite("test_serve")

probe = subprocess.run([KILN, "serve", "--help"], capture_output=True, env=ENV)
if probe.returncode != 0 and b"built without the server" in probe.stderr:
    print("SKIP test_serve: kiln was built without the server (needs libmicrohttpd and cJSON: "
          "apt-get install libmicrohttpd-dev libcjson-dev)")
    sys.exit(0)
import openai  # noqa: E402  (pinned in tests/requirements.txt: a missing one is a failure)

def write_model(path):
    """the tiny gemma3 of tiny_llm.py with the published gemma3 chat template"""
    with open(os.path.join(kc.REPO, "tests", "data", "chat", "gemma3.jinja")) as f:
        return tiny_llm.write(path, seed=7, n_ctx=CTX, chat_template=f.read())


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """kiln serve in the background; its stderr collected"""

    def __init__(self, *args, env=None):
        self.port = free_port()
        self.p = subprocess.Popen([KILN, "serve", "-m", MODEL, "--port", str(self.port), "-c", str(CTX), "-t", "1"]
                                  + [str(a) for a in args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  env=dict(ENV, **(env or {})))
        self.err = []
        ready = threading.Event()

        def pump():
            for line in self.p.stderr:
                self.err.append(line.decode("utf-8", "replace"))
                if "listening on" in self.err[-1]:
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(240) or self.p.poll() is not None:
            self.stop()
            raise AssertionError("kiln serve did not start: %s" % "".join(self.err)[-800:])

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
                raise AssertionError("kiln serve did not stop on SIGTERM")
        return self.p.returncode

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Authorization": "Bearer " + KEY}
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def healthy(self):
        st, data = self.request("GET", "/health")
        return st == 200 and json.loads(data)["status"] == "ok"

    def client(self):
        return openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % self.port, api_key=KEY, max_retries=0, timeout=120)


MODEL = write_model(os.path.join(TMP, "gemma3_chat.gguf"))
PROMPTS = ["the cat sat on a mat", "a big red dog", "the dog is big", "a cat on the mat is red"]
SRV = None


def complete(cl, prompt, n=10, **kw):
    r = cl.completions.create(model="m", prompt=prompt, max_tokens=n, temperature=0, **kw)
    return r.choices[0].text, r.choices[0].finish_reason


def chat(cl, text, n=10, **kw):
    r = cl.chat.completions.create(model="m", messages=[{"role": "user", "content": text}], max_tokens=n,
                                   temperature=0, **kw)
    return r.choices[0].message.content, r.choices[0].finish_reason


def t_start():
    global SRV
    SRV = Server("--parallel", 4, "--api-key", KEY)
    assert any("chat template from the model" in ln for ln in SRV.err), SRV.err


def t_health_models_auth():
    assert SRV.healthy()
    ids = [m.id for m in SRV.client().models.list().data]
    assert ids == ["gemma3_chat.gguf"], ids
    st, data = SRV.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
    assert st == 401 and json.loads(data)["error"]["type"] == "authentication_error", (st, data)
    c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % SRV.port, api_key="nope", max_retries=0)
    try:
        c.models.list()
        raise AssertionError("a wrong key was accepted")
    except openai.AuthenticationError:
        pass


def t_completion_matches_run():
    text, fin = complete(SRV.client(), PROMPTS[0], n=12)
    r = subprocess.run([KILN, "run", "-m", MODEL, "-p", PROMPTS[0], "-n", "12", "--temp", "0", "-c", str(CTX),
                        "-t", "1", "--json"], capture_output=True, env=ENV, timeout=240)
    assert r.returncode == 0, r.stderr.decode()[-400:]
    want = json.loads(r.stdout)
    assert text == want["text"], "server %r, kiln run %r" % (text, want["text"])
    assert fin == ("length" if want["stop"] == "length" else "stop"), (fin, want["stop"])
    assert len(text) > 0


def t_chat_stream():
    cl = SRV.client()
    whole, fin = chat(cl, "the cat", n=12)
    pieces, finish, n_chunks, role = [], None, 0, None
    for ch in cl.chat.completions.create(model="m", messages=[{"role": "user", "content": "the cat"}], max_tokens=12,
                                         temperature=0, stream=True):
        n_chunks += 1
        d = ch.choices[0].delta
        role = role or d.role
        if d.content:
            pieces.append(d.content)
        if ch.choices[0].finish_reason:
            finish = ch.choices[0].finish_reason
    assert "".join(pieces) == whole, ("".join(pieces), whole)
    assert n_chunks >= 3 and role == "assistant" and finish == fin, (n_chunks, role, finish, fin)
    # completions stream too
    text, _ = complete(cl, PROMPTS[1], n=8)
    got = "".join(ch.choices[0].text for ch in cl.completions.create(model="m", prompt=PROMPTS[1], max_tokens=8,
                                                                     temperature=0, stream=True))
    assert got == text, (got, text)


def health():
    st, data = SRV.request("GET", "/health")
    assert st == 200, (st, data[:200])
    return json.loads(data)


def t_concurrent():
    cl = SRV.client()
    lone = [complete(cl, p, n=16)[0] for p in PROMPTS] + [chat(cl, p, n=16)[0] for p in PROMPTS]
    assert health()["batched_calls"] == 0  # one at a time: never two slots decoding together
    got = [None] * len(lone)

    def one(i):
        c = SRV.client()
        p = PROMPTS[i % len(PROMPTS)]
        got[i] = complete(c, p, n=16)[0] if i < len(PROMPTS) else chat(c, p, n=16)[0]

    # 4 at a time, so that the slots decode together. Whether two requests'
    # decoding overlaps depends on the clients' timing (on a fast machine a
    # 16-token request can end before the next one arrives): repeat the rounds
    # until the server has counted a batched call, at most 8 times.
    for attempt in range(8):
        for round_ in range(2):
            idx = range(round_ * 4, round_ * 4 + 4)
            ts = [threading.Thread(target=one, args=(i,)) for i in idx]
            for t in ts:
                t.start()
            for t in ts:
                t.join(240)
        assert got == lone, "concurrent %s\nlone %s" % (got, lone)
        if health()["batched_calls"] > 0:
            break
    h = health()
    assert h["batched_calls"] > 0 and h["batched_rows"] >= 2 * h["batched_calls"], (attempt, h)
    # the batched program was compiled before the server listened
    # (tools/serve_engine.c), not when two clients first overlapped
    ready = [i for i, ln in enumerate(SRV.err) if "batched decoding ready" in ln]
    listening = [i for i, ln in enumerate(SRV.err) if "listening on" in ln]
    assert ready and listening and ready[0] < listening[0], SRV.err[:8]


def t_stop_strings():
    cl = SRV.client()
    text, _ = complete(cl, PROMPTS[2], n=16)
    words = text.split()
    assert len(words) >= 3, text
    stop = " " + words[2]
    cut, fin = complete(cl, PROMPTS[2], n=16, stop=[stop, "zzzz"])
    assert cut == text[:text.index(stop)] and fin == "stop", (cut, fin, text, stop)
    # streamed: the stop string never shows, even in pieces
    got = "".join(ch.choices[0].text or "" for ch in cl.completions.create(
        model="m", prompt=PROMPTS[2], max_tokens=16, temperature=0, stop=stop, stream=True))
    assert got == cut, (got, cut)
    # a repeated "stop" key: the last counts (once an overflow of the stop list, found by make fuzz-serve)
    body = '{"prompt": "the cat", "max_tokens": 4, ' + ", ".join(['"stop": ["a", "b", "c", "d"]'] * 3) + "}"
    st, data = SRV.request("POST", "/v1/completions", body)
    assert st == 200, (st, data[:200])


def t_sampling_fields():
    cl = SRV.client()
    # seeded sampling repeats itself; another seed (almost surely) differs somewhere
    a = [cl.completions.create(model="m", prompt=PROMPTS[3], max_tokens=16, temperature=1.5, top_p=1, extra_body={"top_k": 0, "min_p": 0},
                               seed=s).choices[0].text for s in (5, 5, 6)]
    assert a[0] == a[1], a
    # the chosen tokens' log-probabilities: they spell the text, each <= 0
    r = cl.completions.create(model="m", prompt=PROMPTS[0], max_tokens=8, temperature=0, logprobs=0)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text and len(lp.token_logprobs) == r.usage.completion_tokens, lp
    assert all(x <= 1e-9 for x in lp.token_logprobs), lp.token_logprobs
    c = cl.chat.completions.create(model="m", messages=[{"role": "user", "content": "the cat"}], max_tokens=6,
                                   temperature=0, logprobs=True)
    items = c.choices[0].logprobs.content
    assert "".join(t.token for t in items) == c.choices[0].message.content and all(t.logprob <= 1e-9 for t in items)
    # penalties change what greedy decoding picks once tokens repeat
    r0 = cl.completions.create(model="m", prompt=PROMPTS[0], max_tokens=24, temperature=0, logprobs=0)
    plain, toks = r0.choices[0].text, r0.choices[0].logprobs.tokens
    pen, _ = complete(cl, PROMPTS[0], n=24, frequency_penalty=2.0, presence_penalty=2.0)
    assert len(set(toks)) < len(toks), "24 greedy tokens of a tiny vocabulary repeat one: %r" % toks
    assert pen != plain, (pen, plain)
    assert r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def raw_stream(port, body, read_events=1):
    """start a streaming request over a raw socket, read a few events, return the socket"""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    b = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b)
    buf = b""
    while buf.count(b"data: ") < read_events:
        d = s.recv(4096)
        if not d:
            break
        buf += d
    return s, buf


def wait_idle(srv, secs=20):
    t0 = time.time()
    while time.time() - t0 < secs:
        st, data = srv.request("GET", "/health")
        j = json.loads(data)
        if j["slots_processing"] == 0 and j["requests_waiting"] == 0:
            return True
        time.sleep(0.05)
    return False


def t_disconnect():
    s, buf = raw_stream(SRV.port, {"prompt": "the cat", "max_tokens": CTX, "temperature": 0.8, "stream": True})
    assert b"data: " in buf, buf[:200]
    s.close()
    assert wait_idle(SRV), "the slot of a client that went away is still busy"
    # not streaming: the server notices the closed connection while it waits
    s = socket.create_connection(("127.0.0.1", SRV.port), timeout=30)
    b = json.dumps({"prompt": "the cat", "max_tokens": CTX, "temperature": 0.8}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b)
    s.close()
    assert wait_idle(SRV), "the slot of a non-streaming client that went away is still busy"
    assert complete(SRV.client(), PROMPTS[0], n=4)[0]


def t_profile_counts():
    """KILN_SERVE_PROFILE=1's table at stop counts what the engine did, and
    a prompt its slot already holds keeps only whole prompt passes (here
    KILN_UBATCH=4 rows) that a prefill computed, so the texts are a fresh
    prompt's: every generated token sampled once; every prompt token either
    computed or kept (usage.prompt_tokens_details.cached_tokens, a multiple
    of 4); the same request twice, and a longer prompt that starts with it,
    give the texts of `kiln run --temp 0` with the same passes"""
    ub = {"KILN_UBATCH": "4"}
    srv = Server("--parallel", 1, env=dict(ub, KILN_SERVE_PROFILE="1"))
    longer = PROMPTS[3] + " and " + PROMPTS[2]
    try:
        gen = prompt = kept = calls = 0
        texts = []
        for p in (PROMPTS[3], PROMPTS[3], longer):
            st, data = srv.request("POST", "/v1/completions", {"prompt": p, "max_tokens": 6, "temperature": 0})
            assert st == 200, data
            j = json.loads(data)
            u = j["usage"]
            gen += u["completion_tokens"]
            prompt += u["prompt_tokens"]
            cached = u["prompt_tokens_details"]["cached_tokens"]
            assert cached % 4 == 0 and 0 <= cached < u["prompt_tokens"], u
            kept += cached
            texts.append(j["choices"][0]["text"])
            # a decode call after each sampled token but one that ends the request by length
            calls += u["completion_tokens"] - (j["choices"][0]["finish_reason"] == "length")
        assert kept >= 8, "the repeated and the longer prompt kept %d held tokens" % kept
        assert srv.stop() == 0, "".join(srv.err)[-400:]
    finally:
        srv.stop()
    for p, text in ((PROMPTS[3], texts[0]), (PROMPTS[3], texts[1]), (longer, texts[2])):
        r = subprocess.run([KILN, "run", "-m", MODEL, "-p", p, "-n", "6", "--temp", "0", "-c", str(CTX), "-t", "1",
                            "--json"], capture_output=True, env=dict(ENV, **ub), timeout=240)
        assert r.returncode == 0, r.stderr.decode()[-400:]
        assert text == json.loads(r.stdout)["text"], (p, text, json.loads(r.stdout)["text"])
    for _ in range(100):  # the stderr reader's thread may still be reading the table
        if any("decode calls of" in ln for ln in srv.err):
            break
        time.sleep(0.1)
    line = [ln for ln in srv.err if "kiln serve profile:" in ln]
    assert line, srv.err[-5:]
    m = re.search(r"(\d+) tokens sampled, (\d+) prefills computing (\d+) tokens \((\d+) held tokens kept\)", line[0])
    assert m, line[0]
    assert int(m.group(1)) == gen and int(m.group(2)) == 3, (line[0], gen)
    assert int(m.group(3)) == prompt - kept and int(m.group(4)) == kept, (line[0], prompt, kept)
    one = [ln for ln in srv.err if "decode calls of 1 row:" in ln]
    assert one and int(re.search(r"1 row: (\d+),", one[0]).group(1)) == calls, (one, calls)


def t_queue_503():
    srv = Server("--parallel", 1, "--queue", 1)
    try:
        socks = []
        codes = []
        for i in range(6):  # long streams: one runs, one waits, the rest are refused
            s, buf = raw_stream(srv.port, {"prompt": PROMPTS[i % 4], "max_tokens": CTX, "stream": True,
                                           "temperature": 0.8, "seed": i}, read_events=0)
            socks.append(s)
        for s in socks:
            s.settimeout(30)
            head = b""
            while b"\r\n" not in head:
                d = s.recv(256)
                if not d:
                    break
                head += d
            codes.append(int(head.split()[1]) if head else 0)
            s.close()
        assert codes.count(503) >= 1 and codes.count(200) >= 1 and set(codes) <= {200, 503}, codes
        assert wait_idle(srv), "slots still busy after every client left"
        st, data = srv.request("POST", "/v1/completions", {"prompt": "a cat", "max_tokens": 3})
        assert st == 200, (st, data)
    finally:
        assert srv.stop() == 0


BAD = [
    ("POST", "/v1/completions", "{", 400),
    ("POST", "/v1/completions", "[1, 2]", 400),
    ("POST", "/v1/completions", "", 400),
    ("POST", "/v1/completions", '{"prompt": 5}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "max_tokens": "ten"}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "max_tokens": 1e300}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "max_tokens": -1}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "temperature": NaN}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "seed": 1.5}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "top_p": 7}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "frobnicate": true}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "stop": [1]}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "stop": ""}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "n": 3}', 400),
    ("POST", "/v1/completions", b'{"prompt": "\xff\xfe"}', 400),
    ("POST", "/v1/completions", b'{"prompt": "a\x00"}', 400),
    ("POST", "/v1/completions", '{"prompt": "\\ud800"}', 400),
    ("POST", "/v1/completions", json.dumps({"prompt": "the cat " * 400}), 400),
    ("POST", "/v1/completions", "[" * 5000 + "]" * 5000, 400),
    ("POST", "/v1/chat/completions", '{"messages": []}', 400),
    ("POST", "/v1/chat/completions", '{"messages": [{"role": "wizard", "content": "a"}]}', 400),
    ("POST", "/v1/chat/completions", '{"messages": [{"role": "user"}]}', 400),
    ("POST", "/v1/chat/completions", '{"messages": [{"role": "user", "content": 3}]}', 400),
    ("POST", "/v1/chat/completions", '{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}', 400),
    ("POST", "/v1/chat/completions", '{"prompt": "a"}', 400),
    ("POST", "/v1/nope", "{}", 404),
    ("GET", "/v1/completions", None, 405),
    ("DELETE", "/v1/models", None, 405),
]


def t_bad_inputs():
    for method, path, body, want in BAD:
        st, data = SRV.request(method, path, body)
        assert st == want, "%s %s %r: %d %s (want %d)" % (method, path, body if body is None else body[:80], st,
                                                          data[:200], want)
        err = json.loads(data)["error"]
        assert err["message"] and err["type"], data
        assert SRV.healthy(), "the server stopped answering after %r" % (body[:80] if body else path)
    # a body over the limit: refused from its Content-Length, before it is sent
    s = socket.create_connection(("127.0.0.1", SRV.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n"
              % (KEY.encode(), 9 << 20))
    head = s.recv(4096)
    s.close()
    assert head.startswith(b"HTTP/1.1 413"), head[:200]
    # and one sent in chunks, without a length: refused when it has come
    c = http.client.HTTPConnection("127.0.0.1", SRV.port, timeout=60)
    c.request("POST", "/v1/completions", body=iter([b"x" * (1 << 20)] * 9), encode_chunked=True,
              headers={"Authorization": "Bearer " + KEY, "Transfer-Encoding": "chunked"})
    r = c.getresponse()
    assert r.status == 413, (r.status, r.read()[:200])
    c.close()
    st, _ = SRV.request("GET", "/health", headers={"X-Big": "y" * 100000})
    assert 400 <= st < 500, st
    assert SRV.healthy()


def t_fuzz_and_slow_clients():
    """mutated bodies (a few hundred here; bench/serve_fuzz.py runs 10,000) and
    clients that never finish their headers: the server keeps answering"""
    rng = random.Random(3)
    base = [json.dumps({"prompt": "the cat", "max_tokens": 2, "temperature": 0.5, "stop": ["x"]}),
            json.dumps({"messages": [{"role": "user", "content": "a dog"}], "max_tokens": 2, "stream": True})]
    slow = []
    for _ in range(40):
        s = socket.create_connection(("127.0.0.1", SRV.port), timeout=10)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
        slow.append(s)
    codes = {}
    for i in range(300):
        b = bytearray(base[i % 2].encode())
        for _ in range(rng.randint(1, 4)):
            op, at = rng.randrange(3), rng.randrange(len(b))
            if op == 0:
                del b[at:at + rng.randint(1, 6)]
            elif op == 1:
                b[at:at] = rng.choice([b"{", b"}", b"[", b"]", b'"', b",", b":", b"1e999", b"-", b"null", b"\xc3",
                                       b"\\u0000", b"true"])
            else:
                b[at] = rng.randrange(256)
        path = "/v1/completions" if i % 2 == 0 else "/v1/chat/completions"
        st, data = SRV.request("POST", path, bytes(b))
        codes[st] = codes.get(st, 0) + 1
        assert st in (200, 400), "status %d for %r: %s" % (st, bytes(b)[:120], data[:200])
    assert SRV.healthy(), "not answering with %d slow clients" % len(slow)
    for s in slow:
        s.close()
    assert codes.get(400, 0) > 0, codes


def t_stop_server():
    rc = SRV.stop()
    assert rc == 0, "exit %s: %s" % (rc, "".join(SRV.err)[-400:])
    assert any("stopping" in ln for ln in SRV.err), SRV.err[-3:]


def t_broken_template():
    """a template kiln cannot render: a warning at start, chat in the family's built-in format"""
    global MODEL
    good = MODEL
    MODEL = tiny_llm.write(os.path.join(TMP, "macro.gguf"), seed=7, n_ctx=CTX,
                           chat_template="{% macro turn(m) %}{{ m }}{% endmacro %}{{ turn(messages) }}")
    try:
        srv = Server()
    finally:
        MODEL = good
    try:
        assert any("chat template failed" in ln and "'gemma'" in ln for ln in srv.err), srv.err
        st, data = srv.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "a cat"}],
                                                               "max_tokens": 3, "temperature": 0})
        assert st == 200 and json.loads(data)["usage"]["prompt_tokens"] > 3, (st, data[:300])
    finally:
        assert srv.stop() == 0


def t_usage_errors():
    for args, msg in [(["--frobnicate"], "frobnicate"), (["-m"], "needs a value"), (["--port", "0"], "--port"),
                      ([], "which model"), (["-m", MODEL, "--chat-template", "vicuna"], "vicuna")]:
        r = subprocess.run([KILN, "serve"] + args, capture_output=True, env=ENV, timeout=60)
        assert r.returncode == 2 and msg in r.stderr.decode(), (args, r.returncode, r.stderr.decode())
    r = subprocess.run([KILN, "serve", "-m", os.path.join(TMP, "nope.gguf")], capture_output=True, env=ENV, timeout=60)
    assert r.returncode == 1 and b"nope.gguf" in r.stderr, r.stderr


suite.case("start", t_start)
if SRV:
    suite.case("health_models_auth", t_health_models_auth)
    suite.case("completion_matches_run", t_completion_matches_run)
    suite.case("chat_stream", t_chat_stream)
    suite.case("concurrent_greedy", t_concurrent)
    suite.case("stop_strings", t_stop_strings)
    suite.case("sampling_fields", t_sampling_fields)
    suite.case("disconnect_frees_slot", t_disconnect)
    suite.case("bad_inputs", t_bad_inputs)
    suite.case("fuzz_and_slow_clients", t_fuzz_and_slow_clients)
    suite.case("stop_server", t_stop_server)
suite.case("queue_503", t_queue_503)
suite.case("profile_counts", t_profile_counts)
suite.case("broken_template_fallback", t_broken_template)
suite.case("usage_errors", t_usage_errors)
suite.finish()
