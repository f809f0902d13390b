"""test_config_table.py — the table of environment variables in
docs/ARCHITECTURE.md (section 6) is the truth about what the code reads.

Names the code reads: every env-variable string literal of
src/base/config.c (the one reader of the environment in the library) and
every getenv("...") of the other src/ files and of tools/. The table's
first column must list exactly those names; each row's field must exist:
`compile.x` a member of kiln_compile_options (include/kiln_compile.h),
`host.x` a member of kiln_host_options (src/base/config.h), a `tools/...`
path a file that reads the variable. And getenv appears in at most two
files of src/ (issue 33). The ctypes mirrors of kiln_compile_options
(tests/py/kiln_ctypes.py, python/kiln/_lib.py) list its fields in order: the
struct is returned by value, so a shorter mirror is written past its end. The comparison itself is tested on made-up
inputs, so a checker that reads nothing cannot pass.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiln_ctypes import REPO, Suite  # noqa: E402

suite = Suite("test_config_table")

ENV_NAME = re.compile(r'^(KILN_[A-Z0-9_]+|XDG_CACHE_HOME|HOME)$')
GETENV = re.compile(r'getenv\(\s*"([A-Za-z0-9_]+)"\s*\)')
LITERAL = re.compile(r'"([A-Za-z0-9_]+)"')


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def read(path):
    with open(os.path.join(REPO, path)) as f:
        return f.read()


def c_files(folder):
    out = []
    for root, _, files in os.walk(os.path.join(REPO, folder)):
        for n in files:
            if n.endswith((".c", ".h")):
                out.append(os.path.relpath(os.path.join(root, n), REPO))
    return sorted(out)


def code_reads():
    """{name: set of files that read it}"""
    reads = {}
    for path in c_files("src") + c_files("tools"):
        text = strip_comments(read(path))
        if path == "src/base/config.c":
            names = [n for n in LITERAL.findall(text) if ENV_NAME.match(n)]
        else:
            names = GETENV.findall(text)
        for n in names:
            reads.setdefault(n, set()).add(path)
    return reads


def getenv_files():
    return [p for p in c_files("src") if "getenv(" in strip_comments(read(p))]


def table_rows(doc):
    """[(names, field)] of the table in section 6"""
    start = doc.index("## 6.")
    end = doc.index("\n## ", start + 1)
    rows = []
    for line in doc[start:end].splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`([^`]+)`", cells[0])
        field = re.findall(r"`([^`]+)`", cells[-1])
        rows.append((names, field[0] if field else ""))
    return rows


def struct_members(text, name):
    m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), strip_comments(text), re.S)
    assert m, "no struct %s" % name
    return set(re.findall(r"(\w+)\s*[,;]", m.group(1)))


def compare(rows, reads, compile_members, host_members, tool_reads):
    """the list of problems (empty when table and code agree)"""
    problems = []
    in_table = {}
    for names, field in rows:
        for n in names:
            in_table[n] = field
    for n in sorted(set(reads) - set(in_table)):
        problems.append("%s is read (%s) but not in the table" % (n, ", ".join(sorted(reads[n]))))
    for n in sorted(set(in_table) - set(reads)):
        problems.append("%s is in the table but nothing reads it" % n)
    for n, field in sorted(in_table.items()):
        if field.startswith("compile."):
            ok = field[len("compile."):] in compile_members
        elif field.startswith("host."):
            ok = field[len("host."):] in host_members
        elif field.startswith("tools/"):
            ok = n in tool_reads.get(field, set())
        else:
            ok = False
        if not ok:
            problems.append("%s: field %r does not exist or does not read it" % (n, field))
    return problems


def tool_reads_of(reads):
    out = {}
    for n, files in reads.items():
        for f in files:
            if f.startswith("tools/"):
                out.setdefault(f, set()).add(n)
    return out


def test_table_matches_code():
    rows = table_rows(read("docs/ARCHITECTURE.md"))
    reads = code_reads()
    assert len(rows) >= 20 and len(reads) >= 20, "%d rows, %d names read: the parser is broken" % (
        len(rows), len(reads))
    compile_members = struct_members(read("include/kiln_compile.h"), "kiln_compile_options")
    host_members = struct_members(read("src/base/config.h"), "kiln_host_options")
    assert {"backend", "exact", "no_fuse", "stream_min", "cuda_archs"} <= compile_members, sorted(compile_members)
    assert {"cc", "isa", "home", "nvrtc"} <= host_members, sorted(host_members)
    problems = compare(rows, reads, compile_members, host_members, tool_reads_of(reads))
    assert not problems, "; ".join(problems)


def test_getenv_in_at_most_two_src_files():
    files = getenv_files()
    assert "src/base/config.c" in files, "config.c does not read the environment: %r" % files
    assert len(files) <= 2, "getenv in %d files of src/: %s" % (len(files), ", ".join(files))


def struct_members_in_order(text, name):
    m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), strip_comments(text), re.S)
    assert m, "no struct %s" % name
    return re.findall(r"(\w+)\s*[,;]", m.group(1))


def ctypes_fields(text, cls):
    m = re.search(r"class %s\(ctypes\.Structure\):.*?_fields_ = \[(.*?)\]\n" % cls, text, re.S)
    assert m, "no %s in the file" % cls
    return re.findall(r'\("(\w+)",', m.group(1))


def test_ctypes_mirrors_match():
    want = struct_members_in_order(read("include/kiln_compile.h"), "kiln_compile_options")
    assert len(want) > 20 and want[:2] == ["backend", "threads"], want
    for path in ("tests/py/kiln_ctypes.py", "python/kiln/_lib.py"):
        if not os.path.exists(os.path.join(REPO, path)):
            continue
        got = ctypes_fields(read(path), "CompileOptions")
        assert got == want, "%s: CompileOptions fields %r, kiln_compile_options has %r" % (path, got, want)


def test_compare_finds_differences():
    rows = [(["KILN_A"], "compile.a"), (["KILN_B", "KILN_C"], "host.b"), (["KILN_T"], "tools/x.c"),
            (["KILN_Z"], "compile.nope")]
    reads = {"KILN_A": {"src/base/config.c"}, "KILN_B": {"src/base/config.c"}, "KILN_D": {"src/x.c"},
             "KILN_T": {"tools/x.c"}, "KILN_Z": {"src/base/config.c"}}
    p = compare(rows, reads, {"a"}, {"b"}, {"tools/x.c": {"KILN_T"}})
    text = " ".join(p)
    assert "KILN_D is read" in text, p
    assert "KILN_C is in the table but nothing reads it" in text, p
    assert "KILN_Z: field 'compile.nope'" in text, p
    assert not any("KILN_A" in x or "KILN_T" in x for x in p), p
    assert compare([(["KILN_A"], "compile.a")], {"KILN_A": {"f"}}, {"a"}, set(), {}) == []


suite.case("config_table_matches_code", test_table_matches_code)
suite.case("getenv_in_at_most_two_src_files", test_getenv_in_at_most_two_src_files)
suite.case("config_table_checker_finds_differences", test_compare_finds_differences)
suite.case("compile_options_ctypes_mirrors_match", test_ctypes_mirrors_match)
suite.finish()
