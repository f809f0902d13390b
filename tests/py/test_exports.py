"""test_exports.py — what libkiln.so exports, and its name.

What is checked:
  - `nm -D --defined-only` lists only kiln_* symbols (the library is built
    with -fvisibility=hidden; KILN_API marks the public functions);
  - every function declared in include/*.h carries KILN_API, and every one of
    them is exported (a declared function missing from the library fails);
  - the SONAME is libkiln.so.MAJOR with MAJOR = KILN_VERSION_MAJOR, and
    libkiln.so and libkiln.so.MAJOR are links to libkiln.so.MAJOR.MINOR.PATCH
    (when KILN_LIB is build/libkiln.so, as in make test);
  - kiln_version() returns the headers' KILN_VERSION_STRING.
"""
import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as kc  # noqa: E402

suite = kc.Suite("test_exports")
LIB = os.path.realpath(kc.LIB_PATH)
HEADERS = sorted(glob.glob(os.path.join(kc.REPO, "include", "*.h")))


def tool(*args):
    r = subprocess.run(list(args), capture_output=True, text=True)
    assert r.returncode == 0, "%s: %s" % (" ".join(args), r.stderr[-400:])
    return r.stdout


def exported():
    out = tool("nm", "-D", "--defined-only", LIB)
    return {ln.split()[-1] for ln in out.splitlines() if ln.strip()}


def declared():
    """(name, has KILN_API) of every function declared in a public header:
    a top-level statement (comments and preprocessor lines removed) with a
    parameter list that is not a typedef"""
    out = []
    for h in HEADERS:
        text = open(h, encoding="utf-8").read()
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)
        text = re.sub(r'extern\s+"C"\s*\{', " ", text)
        depth, stmt = 0, ""
        for ch in text:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                stmt = ""
                continue
            if depth:
                continue
            if ch == ";":
                s = " ".join(stmt.split())
                m = re.search(r"(\w+)\s*\(", s)
                if m and not s.startswith("typedef") and not s.startswith("}"):
                    out.append((os.path.basename(h), m.group(1), "KILN_API" in s))
                stmt = ""
            else:
                stmt += ch
    return out


def t_only_kiln_symbols():
    syms = exported()
    bad = sorted(s for s in syms if not s.startswith("kiln_"))
    assert len(syms) > 100, "only %d symbols exported" % len(syms)
    assert not bad, "%d exported symbols are not kiln_*: %s" % (len(bad), ", ".join(bad[:20]))


def t_headers_marked_and_exported():
    decl = declared()
    assert len(decl) > 150, "found only %d declarations in %s" % (len(decl), HEADERS)
    unmarked = ["%s: %s" % (h, n) for h, n, api in decl if not api]
    assert not unmarked, "declared without KILN_API: %s" % ", ".join(unmarked[:20])
    syms = exported()
    missing = ["%s: %s" % (h, n) for h, n, _ in decl if n not in syms]
    assert not missing, "declared but not exported: %s" % ", ".join(missing[:20])


def version():
    text = open(os.path.join(kc.REPO, "include", "kiln.h")).read()
    v = [int(re.search(r"#define KILN_VERSION_%s (\d+)" % k, text).group(1)) for k in ("MAJOR", "MINOR", "PATCH")]
    s = re.search(r'#define KILN_VERSION_STRING "([^"]+)"', text).group(1)
    return v, s


def t_soname_and_links():
    (major, minor, patch), s = version()
    assert s == "%d.%d.%d" % (major, minor, patch), s
    if not shutil.which("readelf"):
        print("# no readelf: SONAME not read")
    else:
        dyn = tool("readelf", "-d", LIB)
        m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", dyn)
        assert m and m.group(1) == "libkiln.so.%d" % major, dyn[:400]
    assert os.path.basename(LIB) == "libkiln.so.%s" % s, LIB
    d = os.path.dirname(LIB)
    for link in ("libkiln.so", "libkiln.so.%d" % major):
        p = os.path.join(d, link)
        assert os.path.islink(p) and os.path.realpath(p) == LIB, "%s is not a link to %s" % (p, LIB)


def t_version_call():
    lib = ctypes.CDLL(LIB)
    lib.kiln_version.restype = ctypes.c_char_p
    _, s = version()
    assert lib.kiln_version().decode() == s, (lib.kiln_version(), s)


suite.case("only_kiln_symbols", t_only_kiln_symbols)
suite.case("headers_marked_and_exported", t_headers_marked_and_exported)
suite.case("soname_and_links", t_soname_and_links)
suite.case("kiln_version", t_version_call)
suite.finish()
