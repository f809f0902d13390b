#!/bin/sh
# bench/install_llamacpp.sh — build llama.cpp as a benchmark peer, from PyPI.
#
# llama.cpp is the peer kiln's LLM numbers are compared against (DESIGN.md 10).
# This machine reaches PyPI but not GitHub, so the source comes from the
# `llama-cpp-python` source distribution, which vendors a pinned llama.cpp in
# vendor/llama.cpp. We build only llama.cpp's own tools from it (nothing of it
# is copied into kiln): llama-bench, llama-simple, llama-tokenize and
# llama-completion, CPU only, tuned for this CPU (GGML_NATIVE), Release, no
# network code (no CURL/OpenSSL), static so the binaries do not depend on the
# build tree; llama-perplexity for bench/accuracy.sh. llama-cli pulls in the
# whole server; set WITH_CLI=1 to build it. WITH_SERVER=1 also builds
# llama-server (bench/serve.sh's peer; plain HTTP, no web UI).
#
# AMX: on where the CPU has it (the amx_int8 flag in /proc/cpuinfo), so kiln is
# measured against llama.cpp's best working build there. The pinned llama.cpp
# dies with SIGSEGV at its first AMX tile instruction (upstream issue
# ggml-org/llama.cpp#20824) for the two reasons upstream PR #26954 describes:
# Linux grants AMX tile data per request (arch_prctl ARCH_REQ_XCOMP_PERM for
# XTILEDATA) and ggml asks only on the main thread, while the worker threads run
# the tiles; and the 64-byte tile configuration is built on the stack, where
# the compiler drops the stores before ldtilecfg reads it. patch_amx() below
# rewrites ggml's ggml_tile_config_init (kiln's own few lines, not upstream's
# patch): each thread asks for the permission, and the configuration is a
# constant 64-byte table in read-only data. LLAMA_AMX=0 compiles AMX out
# (-mno-amx-*) for comparison, into bench/.peers/llama.cpp-noamx unless
# LLAMA_PEER_DIR says otherwise; bench/llama_amx_check.sh builds both and
# compares their greedy tokens before the AMX build's speed is trusted.
#
# Everything lands in bench/.peers/llama.cpp (gitignored):
#   src/     the vendored llama.cpp source      build/  cmake build tree
#   bin/     the binaries                       VERSION the pin and the AMX
#                                               setting, printed on every run
# Idempotent: when VERSION matches the pin and every binary exists, it only
# prints the version. Rebuild with FORCE=1.
#
# Environment: LLAMA_CPP_PYTHON_VERSION (the pin), JOBS (default: nproc),
# WITH_CLI=1, WITH_SERVER=1, FORCE=1, LLAMA_AMX=0|1 (default: 1 where the CPU has AMX),
# LLAMA_PEER_DIR (where it lands).
set -eu

PIN=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
here=$(cd "$(dirname "$0")/.." && pwd)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
WITH_CLI=${WITH_CLI:-0}
WITH_SERVER=${WITH_SERVER:-0}
cpu_amx=0
grep -qw amx_int8 /proc/cpuinfo 2>/dev/null && cpu_amx=1
LLAMA_AMX=${LLAMA_AMX:-$cpu_amx}
if [ "$LLAMA_AMX" = 1 ]; then
    xflags=""
    if [ "$cpu_amx" = 1 ]; then amx="AMX on (patched: per-thread XTILEDATA permission, tile config in rodata)"
    else amx="AMX on (patched; this CPU has no AMX, so AMX code is not used)"; fi
    default_peer="$here/bench/.peers/llama.cpp"
else
    xflags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    amx="AMX off"
    # on an AMX CPU the AMX-off build is the comparison build, kept apart
    if [ "$cpu_amx" = 1 ]; then default_peer="$here/bench/.peers/llama.cpp-noamx"
    else default_peer="$here/bench/.peers/llama.cpp"; fi
fi
peer=${LLAMA_PEER_DIR:-$default_peer}
targets="llama-bench llama-simple llama-tokenize llama-completion llama-perplexity"
[ "$WITH_CLI" = 1 ] && targets="$targets llama-cli"
[ "$WITH_SERVER" = 1 ] && targets="$targets llama-server"
server_on=OFF
if [ "$WITH_CLI" = 1 ] || [ "$WITH_SERVER" = 1 ]; then server_on=ON; fi

die() { echo "install_llamacpp.sh: $*" >&2; exit 1; }

built() {
    [ -f "$peer/VERSION" ] || return 1
    grep -q "^llama-cpp-python $PIN\$" "$peer/VERSION" || return 1
    grep -qF "$amx" "$peer/VERSION" || return 1
    for t in $targets; do [ -x "$peer/bin/$t" ] || return 1; done
    return 0
}

if [ "${FORCE:-0}" != 1 ] && built; then
    sed 's/^/llama.cpp peer: /' "$peer/VERSION"
    echo "llama.cpp peer: $peer/bin (already built; FORCE=1 rebuilds)"
    exit 0
fi

for tool in python3 cmake c++ cc tar; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' is required (apt-get install cmake g++ python3-pip)"
done

mkdir -p "$peer"
dl="$peer/download"
rm -rf "${dl:?}" "${peer:?}/src" "${peer:?}/build" "${peer:?}/bin" "${peer:?}/VERSION"
mkdir -p "$dl"
echo "llama.cpp peer: downloading the llama-cpp-python $PIN source distribution from PyPI ..."
python3 -m pip download --quiet --disable-pip-version-check --no-binary :all: --no-deps \
    -d "$dl" "llama-cpp-python==$PIN" || die "pip could not download llama-cpp-python==$PIN (is PyPI reachable?)"
sdist=$(ls "$dl"/llama_cpp_python-*.tar.gz 2>/dev/null | head -n 1)
[ -n "$sdist" ] || die "no llama_cpp_python-*.tar.gz in $dl"
tar -xzf "$sdist" -C "$dl"
top=$(ls -d "$dl"/llama_cpp_python-*/ | head -n 1)
[ -f "$top/vendor/llama.cpp/CMakeLists.txt" ] || die "$sdist carries no vendor/llama.cpp"

# The sdist has no .git; llama-cpp-python's CHANGELOG names the llama.cpp
# commit each release vendors ("update llama.cpp to ggml-org/llama.cpp@HASH").
commit=$(awk -v v="[$PIN]" '
    $1 == "##" && $2 == v { insec = 1; next }
    $1 == "##" && insec { exit }
    insec && match($0, /llama\.cpp@[0-9a-f]+/) { print substr($0, RSTART + 10, RLENGTH - 10); exit }
' "$top/CHANGELOG.md" 2>/dev/null || true)
[ -n "$commit" ] || commit=unknown

mv "$top/vendor/llama.cpp" "$peer/src"
rm -rf "$dl"

# ggml's AMX tile setup, rewritten (see the head of this file). Found by its
# signature and replaced whole up to its closing brace at the start of a line;
# a pin whose source differs fails here, loudly, instead of building the crash.
patch_amx() {
    f="$peer/src/ggml/src/ggml-cpu/amx/mmq.cpp"
    [ -f "$f" ] || die "no $f in this pin: cannot apply the AMX fix (LLAMA_AMX=0 builds without AMX)"
    python3 - "$f" <<'PY' || die "the AMX fix does not apply to this pin's $f (LLAMA_AMX=0 builds without AMX)"
import re, sys
path = sys.argv[1]
src = open(path).read()
m = re.search(r"inline void ggml_tile_config_init\(void\) \{.*?\n\}\n", src, re.S)
if not m or "_tile_loadconfig" not in m.group(0):
    sys.exit("ggml_tile_config_init not found")
# The tile shapes are the ones ggml's kernels use (tmm0-1: B, 8 rows x 64
# bytes; tmm2-3: A, 16 x 32; tmm4-7: C, 16 x 64), laid out as the ISA's
# 64-byte ldtilecfg operand: byte 0 palette, 1 start row, 16..47 the bytes per
# row of tmm0..15 (16-bit little-endian), 48..63 the rows of tmm0..15.
fixed = """inline void ggml_tile_config_init(void) {
    static thread_local bool done = false;
    if (done) {
        return;
    }
    /* kiln's bench fix: tile data needs a permission per requesting thread
       (ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18) */
    syscall(SYS_arch_prctl, 0x1023, 18);
    alignas(64) static const uint8_t cfg[64] = {
        1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        64, 0, 64, 0, 32, 0, 32, 0, 64, 0, 64, 0, 64, 0, 64, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        8, 8, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0,
    };
    _tile_loadconfig(cfg);
    done = true;
}
"""
src = src[:m.start()] + fixed + src[m.end():]
src = "#include <sys/syscall.h>\n#include <unistd.h>\n" + src
open(path, "w").write(src)
PY
}
if [ "$LLAMA_AMX" = 1 ]; then patch_amx; fi

echo "llama.cpp peer: building $targets with $JOBS jobs (llama.cpp $commit) ..."
start=$(date +%s)
# The source sits inside kiln's git tree: keep llama.cpp's build-info from
# reporting kiln's commit as its own.
GIT_CEILING_DIRECTORIES="$peer" cmake -S "$peer/src" -B "$peer/build" \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DCMAKE_C_FLAGS="$xflags" -DCMAKE_CXX_FLAGS="$xflags" \
    -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER="$server_on" -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_COMMIT="$commit" -DLLAMA_BUILD_NUMBER=0 \
    >"$peer/cmake-configure.log" 2>&1 || { tail -n 30 "$peer/cmake-configure.log" >&2; die "cmake configure failed (log: $peer/cmake-configure.log)"; }
# shellcheck disable=SC2086
cmake --build "$peer/build" --config Release -j "$JOBS" --target $targets \
    >"$peer/cmake-build.log" 2>&1 || { tail -n 30 "$peer/cmake-build.log" >&2; die "build failed (log: $peer/cmake-build.log)"; }
secs=$(( $(date +%s) - start ))

mkdir -p "$peer/bin"
for t in $targets; do
    [ -x "$peer/build/bin/$t" ] || die "the build produced no $t"
    cp "$peer/build/bin/$t" "$peer/bin/$t"
done
{
    echo "llama-cpp-python $PIN"
    echo "llama.cpp commit $commit"
    echo "built with $(c++ --version | head -n 1), $JOBS jobs, ${secs}s, flags: GGML_NATIVE=ON Release static, $amx"
} >"$peer/VERSION"
sed 's/^/llama.cpp peer: /' "$peer/VERSION"
echo "llama.cpp peer: $peer/bin"
