#!/bin/sh
# bench/serve.sh — kiln serve against llama-server, side by side on the same
# model, threads and slots: total generated tokens/s for 1 and for PARALLEL
# concurrent greedy clients (bench/serve_load.py), interleaved, medians of
# REPS, printed as a table with the CPU's name; and each server's generated
# tokens per second of its own CPU time (what a token costs in work, which a
# loaded machine disturbs less than the wall-clock rate).
#
#   sh bench/serve.sh                       # models/gemma-3-270m-q4_k_m.gguf, 2 threads
#   MODEL=path.gguf THREADS=4 PARALLEL=4 TOKENS=64 REPS=3 sh bench/serve.sh
#   KILN_SERVE_PROFILE=1 sh bench/serve.sh  # also where kiln's engine thread's time went
#
# The peer: $LLAMA_SERVER, else bench/.peers/llama.cpp/bin/llama-server
# (WITH_SERVER=1 sh bench/install_llamacpp.sh builds it with llama.cpp's
# other tools). Without
# it only kiln's rows are printed. Both servers read the weights into memory
# (llama-server --no-mmap, or --load-mode none where it has no --no-mmap), have PARALLEL slots of CTX tokens each
# (llama-server's -c is the total it splits between slots), and the same
# threads.
set -eu
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/gemma-3-270m-q4_k_m.gguf}
THREADS=${THREADS:-2}
PARALLEL=${PARALLEL:-4}
TOKENS=${TOKENS:-64}
ROUNDS=${ROUNDS:-2}
REPS=${REPS:-3}
CTX=${CTX:-1024}
KILN=${KILN:-build/kiln}
LLAMA_SERVER=${LLAMA_SERVER:-bench/.peers/llama.cpp/bin/llama-server}
PY=${PYTHON:-python3}
KPORT=${KPORT:-18301}
LPORT=${LPORT:-18302}
out=$(mktemp -d)
kpid=; lpid=
cleanup() {
    [ -n "$kpid" ] && kill "$kpid" 2>/dev/null || true
    [ -n "$lpid" ] && kill "$lpid" 2>/dev/null || true
    rm -rf "$out"
}
trap cleanup EXIT INT TERM

[ -f "$MODEL" ] || { echo "serve.sh: no model $MODEL (tools/fetch_model.sh fetches the default)" >&2; exit 1; }
[ -x "$KILN" ] || { echo "serve.sh: no $KILN: make first" >&2; exit 1; }

wait_up() { # port pid log
    i=0
    while [ $i -lt 600 ]; do
        if ! kill -0 "$2" 2>/dev/null; then echo "serve.sh: the server on port $1 died:" >&2; tail -5 "$3" >&2; exit 1; fi
        if "$PY" -c "import http.client,sys; c=http.client.HTTPConnection('127.0.0.1',$1,timeout=2); c.request('GET','/health'); sys.exit(c.getresponse().status!=200)" 2>/dev/null; then return 0; fi
        sleep 1; i=$((i + 1))
    done
    echo "serve.sh: the server on port $1 did not come up" >&2; exit 1
}

"$KILN" serve -m "$MODEL" --port "$KPORT" -t "$THREADS" --parallel "$PARALLEL" -c "$CTX" >"$out/kiln.log" 2>&1 &
kpid=$!
wait_up "$KPORT" "$kpid" "$out/kiln.log"
have_peer=0
if [ -x "$LLAMA_SERVER" ]; then
    # weights read, not mapped: --no-mmap, which newer llama.cpp spells --load-mode none
    nommap="--no-mmap"
    "$LLAMA_SERVER" --help 2>&1 | grep -q -- "--no-mmap" || nommap="--load-mode none"
    # shellcheck disable=SC2086
    "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$LPORT" -t "$THREADS" -tb "$THREADS" -np "$PARALLEL" \
        -c $((CTX * PARALLEL)) $nommap -ngl 0 >"$out/llama.log" 2>&1 &
    lpid=$!
    wait_up "$LPORT" "$lpid" "$out/llama.log"
    have_peer=1
else
    echo "serve.sh: no llama-server at $LLAMA_SERVER: kiln's rows only" >&2
fi

# warm both (first requests repack weights, fill caches)
"$PY" bench/serve_load.py --port "$KPORT" --clients "$PARALLEL" --tokens 8 --rounds 1 >/dev/null
[ $have_peer = 1 ] && "$PY" bench/serve_load.py --port "$LPORT" --clients "$PARALLEL" --tokens 8 --rounds 1 >/dev/null

# the server's CPU time (user + system clock ticks of its process) over one
# load run: tokens per CPU second is the work a token costs, which the other
# processes' load on the machine disturbs far less than tokens per second
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
load_run() { # side port pid clients
    t0=$(ticks "$3")
    "$PY" bench/serve_load.py --port "$2" --clients "$4" --tokens "$TOKENS" --rounds "$ROUNDS" >>"$out/$1-$4.jsonl"
    echo $(($(ticks "$3") - t0)) >>"$out/$1-$4.ticks"
}
for rep in $(seq "$REPS"); do
    for c in 1 "$PARALLEL"; do
        load_run kiln "$KPORT" "$kpid" "$c"
        [ $have_peer = 1 ] && load_run llama "$LPORT" "$lpid" "$c"
    done
done

# KILN_SERVE_PROFILE=1: kiln's engine thread's time by what it did (idle,
# prefill, sampling, decode calls by rows), over the warm-up and every run,
# printed by the server when it stops
if [ -n "${KILN_SERVE_PROFILE:-}" ] && [ "${KILN_SERVE_PROFILE}" != 0 ]; then
    kill "$kpid" 2>/dev/null || true
    wait "$kpid" 2>/dev/null || true
    kpid=
    awk '/^kiln serve profile:/ {on = 1; print; next} on && /^  / && !/^  kernel/ {print; next} {on = 0}' "$out/kiln.log"
fi

"$PY" - "$out" "$PARALLEL" "$have_peer" "$MODEL" "$THREADS" "$TOKENS" "$REPS" <<'EOF'
import json, os, statistics, sys
out, par, peer, model, threads, tokens, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", *sys.argv[4:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
def med(side, c):
    p = os.path.join(out, "%s-%d.jsonl" % (side, c))
    if not os.path.exists(p):
        return None
    rows = [json.loads(l) for l in open(p)]
    errs = [e for r in rows for e in r["errors"]]
    if errs:
        print("errors on %s with %d clients: %s" % (side, c, errs[:2]))
    return statistics.median(r["total_tps"] for r in rows)
def med_cpu(side, c):  # generated tokens per second of the server's CPU time
    p = os.path.join(out, "%s-%d.jsonl" % (side, c))
    if not os.path.exists(p):
        return None
    rows = [json.loads(l) for l in open(p)]
    ticks = [int(l) for l in open(os.path.join(out, "%s-%d.ticks" % (side, c)))]
    hz = os.sysconf("SC_CLK_TCK")
    return statistics.median(r["tokens"] / max(t / hz, 1e-9) for r, t in zip(rows, ticks))
print("kiln serve vs llama-server: %s, %s threads, %d slots, %s tokens per request, median of %s" % (
    os.path.basename(model), threads, par, tokens, reps))
print("CPU: %s" % cpu)
print("| clients | kiln total t/s | llama-server total t/s | kiln / llama-server |")
print("|---:|---:|---:|---:|")
for c in (1, par):
    k, l = med("kiln", c), med("llama", c) if peer else None
    print("| %d | %.1f | %s | %s |" % (c, k, "%.1f" % l if l else "-", "%.2f" % (k / l) if l else "-"))
k1, kn = med("kiln", 1), med("kiln", par)
print("kiln: %d clients give %.2fx one client's total tokens/s" % (par, kn / k1))
c1, cn = med_cpu("kiln", 1), med_cpu("kiln", par)
print("kiln: tokens per second of the server's CPU time: %.1f with 1 client, %.1f with %d (%.2fx)" % (c1, cn, par, cn / c1))
if peer:
    l1, ln = med("llama", 1), med("llama", par)
    print("llama-server: %d clients give %.2fx one client's total tokens/s" % (par, ln / l1))
    c1, cn = med_cpu("llama", 1), med_cpu("llama", par)
    print("llama-server: tokens per second of its CPU time: %.1f with 1 client, %.1f with %d (%.2fx)" % (c1, cn, par, cn / c1))
EOF
