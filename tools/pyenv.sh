#!/bin/sh
# tools/pyenv.sh — the project-local Python environment that `make test` (and the
# fuzz corpus maker) use, so that a fresh clone tests itself with nothing installed
# beside it. Prints the path of the environment's python on stdout; everything
# else goes to stderr.
#
# Invariants:
# - The environment is a venv under build/pyenv (KILN_PYENV overrides) that does
#   NOT see the system's or the user's site-packages: what the machine has
#   installed neither helps nor hurts the tests.
# - It is filled from PyPI once, from tests/requirements.txt (pinned versions),
#   and reused after without touching the network: the stamp file records the
#   requirements and the python it was made for, and is written last, so an
#   environment whose creation was cut short has no stamp and is made anew.
# - No root needed. Where python3's venv module has no pip (Debian without
#   python3-venv), the environment is made without pip and pip is taken from
#   python3 itself or, failing that, from pip's wheel on PyPI.
# - Two runs at once (make test beside make test-asan) serialise on a lock.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
env=${KILN_PYENV:-$root/build/pyenv}
req="$root/tests/requirements.txt"
py_base=${KILN_PYTHON:-python3}

say() { echo "pyenv: $*" >&2; }

if ! command -v "$py_base" >/dev/null 2>&1; then
    say "no $py_base on PATH: the Python tests need Python 3 (apt-get install python3)"
    exit 1
fi
want=$("$py_base" -c 'import sys; print(sys.version.split()[0])')
want="python $want | $(cksum < "$req")"

stamp_ok() {
    [ -x "$env/bin/python" ] && [ -f "$env/.kiln-stamp" ] &&
        [ "$(cat "$env/.kiln-stamp")" = "$want" ]
}

if stamp_ok; then echo "$env/bin/python"; exit 0; fi

mkdir -p "$(dirname "$env")"
lock="$env.lock"
# a lock directory: mkdir is atomic everywhere; a stale one (older than 30 min,
# left by a killed run) is removed
tries=0
while ! mkdir "$lock" 2>/dev/null; do
    if [ -n "$(find "$lock" -maxdepth 0 -mmin +30 2>/dev/null)" ]; then rm -rf "$lock"; continue; fi
    tries=$((tries + 1))
    if [ "$tries" -gt 900 ]; then say "waited 15 minutes for $lock; remove it if no other run is filling $env"; exit 1; fi
    sleep 1
done
trap 'rmdir "$lock" 2>/dev/null || true' EXIT INT TERM

# another run may have filled it while we waited
if stamp_ok; then echo "$env/bin/python"; exit 0; fi

say "making the tests' Python environment in ${env#"$root"/} (once; from PyPI: $(grep -v '^#' "$req" | tr '\n' ' '))"
rm -rf "$env"
if ! "$py_base" -m venv "$env" >/dev/null 2>&1; then
    rm -rf "$env"
    "$py_base" -m venv --without-pip "$env" || { say "$py_base -m venv failed"; exit 1; }
fi
py="$env/bin/python"

if ! "$py" -m pip --version >/dev/null 2>&1; then
    if "$py_base" -m pip --version >/dev/null 2>&1; then
        # the base python's pip installs into the venv's site-packages
        site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        "$py_base" -m pip install --quiet --disable-pip-version-check --target "$site" pip >&2 ||
            { say "could not install pip into $env from $py_base's pip"; exit 1; }
    else
        # no pip anywhere: pip's own wheel from PyPI runs from the zip file
        cat > "$env/getpip.py" <<'PY'
import json, sys, urllib.parse, urllib.request
index = "https://pypi.org/pypi/pip/json"
meta = json.load(urllib.request.urlopen(index, timeout=60))
url = next(u["url"] for u in meta["urls"] if u["filename"].endswith(".whl"))
url = urllib.parse.urljoin(index, url)   # mirrors may answer with relative links
path = sys.argv[1] + "/" + url.rsplit("/", 1)[1].split("#")[0]   # pip checks the wheel's name
with urllib.request.urlopen(url, timeout=120) as r, open(path, "wb") as f:
    f.write(r.read())
print(path)
PY
        whl=$("$py" "$env/getpip.py" "$env") || { say "could not download pip's wheel from PyPI (is pypi.org reachable?)"; exit 1; }
        "$py" "$whl/pip" install --quiet --disable-pip-version-check "$whl" >&2 ||
            { say "could not install pip from its wheel"; exit 1; }
        rm -f "$whl" "$env/getpip.py"
    fi
fi

"$py" -m pip install --quiet --disable-pip-version-check -r "$req" >&2 || {
    say "could not install the tests' Python packages from PyPI (is pypi.org reachable?): see pip's message above"
    exit 1
}
"$py" -c 'import numpy, gguf' || { say "the packages installed but do not import"; exit 1; }
printf '%s\n' "$want" > "$env/.kiln-stamp.tmp" && mv "$env/.kiln-stamp.tmp" "$env/.kiln-stamp"
say "ready: $py"
echo "$py"
