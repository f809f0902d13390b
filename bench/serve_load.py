"""serve_load.py — load an OpenAI-compatible server with C concurrent greedy
clients and print one JSON line: total and per-client generated tokens/s.

    python3 bench/serve_load.py --port 8080 --clients 4 --tokens 64 --rounds 2

Each client sends --rounds non-streaming /v1/completions requests in turn
(temperature 0, max_tokens --tokens, one of a few prompts); tokens are the
server's usage.completion_tokens; the wall time is from the first request to
the last answer. Only the standard library, so it runs with any python3.
"""
import argparse
import http.client
import json
import threading
import time

PROMPTS = ["Once upon a time, in a small village by the sea,", "The history of the printing press begins",
           "Here is a recipe for bread: first", "The three laws of motion state that"]


def one(port, prompt, n, out, i, key):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0})
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    c.request("POST", "/v1/completions", body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError("status %d: %s" % (r.status, data[:200]))
    j = json.loads(data)
    out[i] += j["usage"]["completion_tokens"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--key", default="")
    a = ap.parse_args()
    got = [0] * a.clients
    errors = []

    def client(i):
        try:
            for r in range(a.rounds):
                one(a.port, PROMPTS[(i + r) % len(PROMPTS)], a.tokens, got, i, a.key)
        except Exception as e:  # reported, not hidden
            errors.append(str(e))

    t0 = time.time()
    ts = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.time() - t0
    total = sum(got)
    print(json.dumps({"clients": a.clients, "tokens": total, "wall_s": round(wall, 3),
                      "total_tps": round(total / wall, 2) if wall > 0 else 0,
                      "per_client_tps": round(total / wall / a.clients, 2) if wall > 0 else 0,
                      "errors": errors[:3]}))


if __name__ == "__main__":
    main()
