#!/bin/sh
# tests/run.sh — runs every C test binary and every Python test file (or those
# TESTS names), counts the
# "PASS name" / "FAIL name: why" lines they print, and ends with "N passed, N failed".
# A test program that crashes or exits non-zero without a FAIL line counts as one failure.
# The Python tests run in the project-local environment of tools/pyenv.sh (made
# from PyPI on first use, reused after), never in the system's python: what the
# machine has installed neither helps nor hurts.
BUILD=${BUILD:-build}
export KILN_LIB="$PWD/$BUILD/libkiln.so"
export KILN_BIN="$PWD/$BUILD/kiln"
export KILN_BUILD="$PWD/$BUILD"
# every compiled run starts with its outputs all ones-bits (NaN), so an
# element no kernel writes fails the comparison with the reference (exec.c)
export KILN_POISON_RESULTS=1
# no first-run schedule search in `kiln run`/`kiln bench` (tests that check
# it turn it on themselves)
export KILN_TUNE=0
# contractions without a record keep the fixed f32 default schedule, so that
# compiled results can be held to the reference at f32 tolerances (the cost
# model's defaults, int8/bf16 arithmetic included, have their own tests:
# test_contract's contract_cost_defaults_*)
export KILN_FIXED_DEFAULTS=1
# the tests never read or write the user's tuning DB
tunedir=$(mktemp -d)
export KILN_TUNEDB="$tunedir/tune.db"
if [ -n "$KILN_ASAN" ]; then
    # the Python tests load an ASan-built libkiln.so: the runtime must come first
    export LD_PRELOAD="$(${CC:-cc} -print-file-name=libasan.so) $(${CC:-cc} -print-file-name=libubsan.so)"
    export ASAN_OPTIONS=detect_leaks=0
fi
log=$(mktemp)
pass=0; fail=0
if ! PY=$(sh tools/pyenv.sh); then
    echo "FAIL python environment: tools/pyenv.sh could not make build/pyenv (see its message above); the Python tests cannot run"
    PY=
    fail=1
fi
# TESTS: the tests to run, C binaries and tests/py files (all of them
# when unset): `TESTS="build/tests/test_x tests/py/test_y.py" sh tests/run.sh`
for t in ${TESTS:-"$BUILD"/tests/test_* tests/py/test_*.py}; do
    case $t in
        *.py) [ -f "$t" ] && [ -n "$PY" ] || continue; set -- "$PY" "$t" ;;
        *) [ -x "$t" ] || continue; set -- "$t" ;;
    esac
    echo "== $t"
    t0=$(date +%s)
    "$@" > "$log" 2>&1; rc=$?
    secs=$(( $(date +%s) - t0 ))
    grep -E '^(FAIL)' "$log"
    p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "FAIL $t: exit status $rc"; tail -5 "$log"; f=1; fi
    echo "   $p passed, $f failed ($secs s)"
    pass=$((pass + p)); fail=$((fail + f))
done
rm -f "$log"
rm -rf "$tunedir"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
