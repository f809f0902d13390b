"""serve_fuzz.py — the robustness check of `kiln serve` (issue 34's "Done
when"): N fuzzed requests (default 10,000) and S slow clients (default 100)
against a running server, which must stay up and answering.

    python3 bench/serve_fuzz.py --port 8080 [--requests 10000] [--slow 100] [--key K]

Start the server with a small default max_tokens (kiln serve -n 16): a
mutation that drops max_tokens then asks for a short answer, not one to the
end of the context, which this client would wait for past its timeout.

Slow clients open a connection and send a partial request line by line, one
byte every few seconds, and never finish; meanwhile the fuzzer sends request
bodies mutated from valid ones (bytes deleted, inserted, flipped; JSON
fragments, huge numbers, broken UTF-8) to every endpoint, plus garbage
request lines and headers, and checks every answer is an HTTP status below
500 (503 counts as an answer: a full queue). At the end /health and one
real completion must succeed. Prints counts per status and exits 1 on any
failure. Standard library only.
"""
import argparse
import http.client
import json
import random
import socket
import sys
import threading
import time

VALID = [
    ("/v1/completions", {"prompt": "The cat", "max_tokens": 2, "temperature": 0.7, "top_k": 20, "stop": ["\n"]}),
    ("/v1/completions", {"prompt": "Hello", "max_tokens": 1, "stream": True, "seed": 3}),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "Hi"}], "max_tokens": 2}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                              "max_tokens": 1, "stream": True, "logprobs": True}),
]
FRAGS = [b"{", b"}", b"[", b"]", b'"', b",", b":", b"1e999", b"-1", b"null", b"\xc3", b"\xff", b"\\u0000",
         b"\\ud800", b"true", b"99999999999999999999999", b"NaN", b'"max_tokens": 1073741825', b"\x00",
         b'"role": "x"', b"[" * 64]


def mutate(rng, b):
    b = bytearray(b)
    for _ in range(rng.randint(1, 6)):
        if not b:
            break
        op, at = rng.randrange(3), rng.randrange(len(b))
        if op == 0:
            del b[at:at + rng.randint(1, 8)]
        elif op == 1:
            b[at:at] = rng.choice(FRAGS)
        else:
            b[at] = rng.randrange(256)
    return bytes(b)


def raw(port, data, timeout=20):
    """send raw bytes, return the status of the answer (0: connection closed without one)"""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)  # all of it: a body shorter than its length ends here
        head = b""
        while b"\r\n" not in head:
            d = s.recv(4096)
            if not d:
                break
            head += d
        parts = head.split(b" ")
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--slow", type=int, default=100)
    ap.add_argument("--key", default="")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    auth = ("Authorization: Bearer %s\r\n" % a.key).encode() if a.key else b""

    stop = threading.Event()
    slow_socks = []

    def slow_client():
        try:
            s = socket.create_connection(("127.0.0.1", a.port), timeout=60)
            slow_socks.append(s)
            msg = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
            for ch in msg:
                if stop.is_set():
                    break
                s.sendall(bytes([ch]))
                time.sleep(2)
        except OSError:
            pass  # the server closing an idle connection is its right

    slow = [threading.Thread(target=slow_client, daemon=True) for _ in range(a.slow)]
    for t in slow:
        t.start()
    time.sleep(1)

    counts, failures = {}, []
    t0 = time.time()
    for i in range(a.requests):
        if i and i % 1000 == 0:
            print("serve_fuzz: %d requests, %.0f s, statuses %s" % (i, time.time() - t0, counts), flush=True)
        kind = rng.randrange(10)
        try:
            if kind < 8:
                path, body = VALID[rng.randrange(len(VALID))]
                data = mutate(rng, json.dumps(body).encode())
                req = (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + auth +
                       b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
            elif kind == 8:  # a broken request line or headers
                req = mutate(rng, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 2\r\n\r\n{}")
            else:  # a lying Content-Length
                req = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 5\r\n\r\n{\"a\"}"
            st = raw(a.port, req)
        except OSError as e:
            failures.append("request %d: %s" % (i, e))
            st = -1
        counts[st] = counts.get(st, 0) + 1
        if st >= 500 and st not in (503, 505):  # 505: a mangled HTTP version, rightly refused
            failures.append("request %d: status %d for %r" % (i, st, req[:160]))
    secs = time.time() - t0

    c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=120)
    h = {"Authorization": "Bearer " + a.key} if a.key else {}
    c.request("GET", "/health", headers=h)
    health = c.getresponse()
    hb = health.read()
    c.request("POST", "/v1/completions", body=json.dumps({"prompt": "The cat", "max_tokens": 4, "temperature": 0}),
              headers=h)
    r = c.getresponse()
    rb = r.read()
    stop.set()
    for s in slow_socks:
        try:
            s.close()
        except OSError:
            pass
    print("serve_fuzz: %d requests in %.1f s with %d slow clients; statuses %s" %
          (a.requests, secs, a.slow, json.dumps({str(k): v for k, v in sorted(counts.items())})))
    print("serve_fuzz: after: /health %d %s; completion %d %s" % (health.status, hb.decode()[:80], r.status,
                                                                  rb.decode()[:120]))
    ok = not failures and health.status == 200 and r.status == 200
    for f in failures[:10]:
        print("serve_fuzz: FAIL", f)
    print("serve_fuzz: %s" % ("PASS: the server stayed up and answering" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
