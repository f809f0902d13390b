"""test_function_length.py — no function in src/runtime/*.c is longer than
120 lines (issue 33: functions that read top to bottom).

A function is a definition that starts at column 0 (a return type and a
name followed by a parameter list, on one line or a few) and ends at the
first line that is a lone `}` at column 0, as clang-format lays kiln's code
out; its length counts both of those lines. The counter is itself tested on
a made-up file with one long and one short function, and a struct and a
table that are not functions, so a counter that finds nothing cannot pass.

ALLOWED names the functions over the limit that belong to other work in
flight (the search's measuring loops, issue 26); each entry names its file.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiln_ctypes import REPO, Suite  # noqa: E402

LIMIT = 120
ALLOWED = set()  # (file, function) pairs let past the limit: none

HEAD = re.compile(r"^[A-Za-z_][^;=]*\(")
NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")

suite = Suite("test_function_length")


def functions(text):
    """[(name, first line, length in lines)] of the function definitions in C text"""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if HEAD.match(line) and not line.startswith(("typedef", "struct ", "#")):
            j, header = i, line
            if re.search(r"\)\s*\{.*\}$", line.rstrip()):  # a one-line function
                out.append((NAME.search(line).group(1), i + 1, 1))
                i += 1
                continue
            while not header.rstrip().endswith(("{", ";", "}")) and j + 1 < len(lines) and j - i < 8:
                j += 1
                header += " " + lines[j].strip()
            if re.search(r"\)\s*\{$", header.rstrip()):
                k = j + 1
                while k < len(lines) and lines[k] != "}":
                    k += 1
                out.append((NAME.search(line).group(1), i + 1, k - i + 1))
                i = k + 1
                continue
        i += 1
    return out


def too_long(folder):
    bad = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".c"):
            continue
        with open(os.path.join(folder, name), errors="replace") as f:
            for fn, line, n in functions(f.read()):
                if n > LIMIT and (name, fn) not in ALLOWED:
                    bad.append("%s:%d %s is %d lines" % (name, line, fn, n))
    return bad


def test_counter_on_a_made_up_file():
    body = "\n".join("    x += %d;" % i for i in range(130))
    text = (
        "/* a file */\n#include <stdio.h>\n"
        "typedef struct s {\n    int a;\n} s;\n"
        "static const int table[] = {\n    1,\n    2,\n};\n"
        "static int long_one(int x,\n                    int y) {\n" + body + "\n    return x + y;\n}\n\n"
        "int short_one(void) { return 1; }\n"
        "int two(void) {\n    return 2;\n}\n"
    )
    fns = {name: n for name, _, n in functions(text)}
    assert fns.get("long_one") == 134, fns  # header (2 lines) + 130 + return + brace
    assert fns.get("two") == 3 and fns.get("short_one") == 1, fns
    assert "table" not in fns and "s" not in fns, fns
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "x.c"), "w") as f:
            f.write(text)
        bad = too_long(tmp)
        assert len(bad) == 1 and "long_one is 134 lines" in bad[0], bad


def test_runtime_functions_are_short():
    folder = os.path.join(REPO, "src", "runtime")
    assert any(n > 40 for name in os.listdir(folder) if name.endswith(".c")
               for _, _, n in functions(open(os.path.join(folder, name), errors="replace").read())), \
        "no function of src/runtime was found: the counter is broken"
    bad = too_long(folder)
    assert not bad, "over %d lines: %s" % (LIMIT, "; ".join(bad))


suite.case("counter_on_a_made_up_file", test_counter_on_a_made_up_file)
suite.case("runtime_functions_are_short", test_runtime_functions_are_short)
suite.finish()
