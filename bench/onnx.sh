#!/bin/sh
# bench/onnx.sh — kiln vs onnxruntime (CPU execution provider) on ONNX models:
# the nine light models of the onnx package, or --models A.onnx,B.onnx; same
# thread counts, both warmed up, interleaved rounds, medians, and the ratio
# (bench/onnx_bench.py says how). onnxruntime is pinned in
# bench/onnx_requirements.txt and installed from PyPI into
# build/bench-onnx-venv once (not into the tests' environment).
#   sh bench/onnx.sh [-t 1,2] [-r 5] [--rounds 3] [--budget S] [--models ...] [--json OUT]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/build/bench-onnx-venv"
req="$root/bench/onnx_requirements.txt"
if [ ! -f "$venv/.stamp" ] || [ "$(cat "$venv/.stamp")" != "$(cksum < "$req")" ]; then
    echo "onnx.sh: installing the peer into build/bench-onnx-venv (once)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
    cksum < "$req" > "$venv/.stamp"
fi
[ -f "$root/build/libkiln.so" ] || make -C "$root" build/libkiln.so >&2
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores" >&2
KILN_LIB="$root/build/libkiln.so" exec "$venv/bin/python" "$root/bench/onnx_bench.py" "$@"
