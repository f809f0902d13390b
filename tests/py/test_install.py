"""test_install.py — `make install` into temporary prefixes, and a C program
built against the installed kiln through pkg-config that generates text
through include/kiln_llm.h.

What is checked:
  - `make install PREFIX=$tmp` puts the public headers, libkiln.a,
    libkiln.so.MAJOR.MINOR.PATCH with its libkiln.so.MAJOR and libkiln.so
    links, the kiln CLI and lib/pkgconfig/kiln.pc in place;
  - `cc tests/install/example.c $(pkg-config --cflags --libs kiln)` builds
    against that prefix alone, the program finds libkiln.so.MAJOR there (its
    SONAME) and streams the greedy text and ids `kiln run --temp 0 --json`
    (the installed CLI) gives on a tiny model the test writes;
  - `make install PREFIX=/opt/kiln DESTDIR=$tmp2` stages under $tmp2 with a
    kiln.pc that names /opt/kiln.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as kc  # noqa: E402
import tiny_llm  # noqa: E402

BUILD = os.environ.get("KILN_BUILD") or os.path.join(kc.REPO, "build")
TMP = tempfile.mkdtemp(prefix="kiln_install_")
ENV = dict(os.environ)
ENV.pop("LD_PRELOAD", None)
ENV.setdefault("XDG_CACHE_HOME", "/tmp/kiln-test-cache-%d" % os.getuid())
SAN = ["-fsanitize=address,undefined"] if os.environ.get("KILN_ASAN") else []
# make install first makes `all`: under make test-asan the sanitizer flags come
# with MAKEFLAGS; run by hand with KILN_ASAN, the test passes make test-asan's own
MAKE_ARGS = []
if SAN and "SAN=" not in os.environ.get("MAKEFLAGS", ""):
    MAKE_ARGS = ["OPT=-O1", "SAN=-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"]

suite = kc.Suite("test_install")
MODEL = tiny_llm.write(os.path.join(TMP, "tiny.gguf"))
PROMPT = "the cat sat on a mat"


def run(args, env=None, cwd=None, timeout=300):
    r = subprocess.run(args, capture_output=True, text=True, env=env or ENV, cwd=cwd, timeout=timeout)
    assert r.returncode == 0, "%s: exit %d: %s" % (" ".join(args), r.returncode, (r.stderr or r.stdout)[-600:])
    return r.stdout


def install(prefix, destdir=""):
    run(["make", "-s", "install", "BUILD=" + BUILD, "PREFIX=" + prefix, "DESTDIR=" + destdir] + MAKE_ARGS, cwd=kc.REPO)


def version():
    lib = kc.load().dll
    lib.kiln_version.restype = __import__("ctypes").c_char_p
    return lib.kiln_version().decode()


def t_install_tree():
    pfx = os.path.join(TMP, "prefix")
    install(pfx)
    v = version()
    major = v.split(".")[0]
    for h in os.listdir(os.path.join(kc.REPO, "include")):
        assert os.path.isfile(os.path.join(pfx, "include", h)), "header %s not installed" % h
    lib = os.path.join(pfx, "lib")
    assert os.path.isfile(os.path.join(lib, "libkiln.a"))
    real = os.path.join(lib, "libkiln.so." + v)
    assert os.path.isfile(real) and not os.path.islink(real), real
    for link in ("libkiln.so", "libkiln.so." + major):
        assert os.readlink(os.path.join(lib, link)) == "libkiln.so." + v, link
    assert os.access(os.path.join(pfx, "bin", "kiln"), os.X_OK)
    pc = open(os.path.join(lib, "pkgconfig", "kiln.pc")).read()
    assert "prefix=%s" % pfx in pc and "Version: %s" % v in pc and "-lkiln" in pc, pc


def t_pkg_config_example():
    pfx = os.path.join(TMP, "prefix")
    if not os.path.isdir(pfx):
        install(pfx)
    if not shutil.which("pkg-config"):
        raise AssertionError("pkg-config is not installed (the install test needs it)")
    env = dict(ENV, PKG_CONFIG_PATH=os.path.join(pfx, "lib", "pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "kiln"], env=env).split()
    assert "-I%s/include" % pfx in flags and "-L%s/lib" % pfx in flags and "-lkiln" in flags, flags
    exe = os.path.join(TMP, "example")
    src = os.path.join(kc.REPO, "tests", "install", "example.c")
    run([os.environ.get("CC", "cc"), "-std=c11", "-Wall", "-Werror", src] + flags + SAN + ["-o", exe], env=env)
    renv = dict(ENV, LD_LIBRARY_PATH=os.path.join(pfx, "lib"))
    needed = run(["readelf", "-d", exe]) if shutil.which("readelf") else ""
    assert not needed or "libkiln.so.%s" % version().split(".")[0] in needed, needed[-400:]
    out = run([exe, MODEL, PROMPT, "8"], env=renv).split("\n")
    cli = json.loads(run([os.path.join(pfx, "bin", "kiln"), "run", "-m", MODEL, "-p", PROMPT, "-n", "8", "--temp", "0",
                          "-t", "1", "--json"], env=renv))
    assert out[0].startswith("kiln " + version()), out[0]
    assert out[1] == cli["text"] and cli["text"].strip(), (out[1], cli["text"])
    assert out[2] == "ids: " + " ".join(map(str, cli["ids"])) and len(cli["ids"]) == 8, (out[2], cli["ids"])


def t_destdir():
    stage = os.path.join(TMP, "stage")
    install("/opt/kiln", stage)
    pc = open(os.path.join(stage, "opt", "kiln", "lib", "pkgconfig", "kiln.pc")).read()
    assert "prefix=/opt/kiln" in pc and stage not in pc, pc
    assert os.path.isfile(os.path.join(stage, "opt", "kiln", "include", "kiln_llm.h"))


suite.case("install_tree", t_install_tree)
suite.case("pkg_config_example_generates", t_pkg_config_example)
suite.case("destdir_staging", t_destdir)
suite.finish()
