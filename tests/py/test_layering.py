"""test_layering.py — the folders of src/ form layers: no include cycle
between them.

Every `#include "..."` line of src/*/*.c, *.h and *.def is resolved the way
the compiler resolves it (the including file's folder first, then the
Makefile's -I list in order), and names an edge from the including file's
folder to the folder of the file it includes. The folder graph must have no
cycle: a folder may use the folders below it and never, by any path, one
that uses it. A cycle fails with its folders and the include lines that make
each step of it. The checker itself is tested on a small tree with a cycle,
so a checker that finds nothing cannot pass.

The layers as they stand (docs/ARCHITECTURE.md, "Folder layering"):
    base < ir < {ref, nn, rewrite, model, sched} < codegen < runtime
    nn < onnx (the ONNX importer sits at the model layer)
(model reaches the compiler only through the public API in
include/kiln_compile.h, which is outside src/ and so no folder edge).
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiln_ctypes import REPO, Suite  # noqa: E402

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

suite = Suite("test_layering")


def include_dirs(repo):
    """the -I folders of the Makefile's CFLAGS_BASE, in order"""
    with open(os.path.join(repo, "Makefile")) as f:
        text = f.read()
    m = re.search(r"^CFLAGS_BASE\s*=(.*?)(?<!\\)\n", text, re.S | re.M)
    assert m, "no CFLAGS_BASE in the Makefile"
    return re.findall(r"-I(\S+)", m.group(1))


def src_files(repo):
    out = []
    src = os.path.join(repo, "src")
    for folder in sorted(os.listdir(src)):
        d = os.path.join(src, folder)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h", ".def")):
                out.append(os.path.join("src", folder, name))
    return out


def folder_of(path):
    """src/<folder>/... -> folder; anything outside src/ (include/) -> None"""
    parts = os.path.normpath(path).split(os.sep)
    return parts[1] if len(parts) >= 3 and parts[0] == "src" else None


def resolve(repo, including, name, idirs):
    """the repository-relative path the compiler opens for `#include "name"`
    in file `including`, or None (a system header)"""
    for d in [os.path.dirname(including)] + idirs:
        cand = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(os.path.join(repo, cand)):
            return cand
    return None


def folder_edges(repo):
    """{(from_folder, to_folder): [include lines]} over src/"""
    idirs = include_dirs(repo)
    edges = {}
    for f in src_files(repo):
        with open(os.path.join(repo, f), errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = resolve(repo, f, m.group(1), idirs)
                a, b = folder_of(f), folder_of(target) if target else None
                if a and b and a != b:
                    edges.setdefault((a, b), []).append("%s:%d includes %s" % (f, lineno, target))
    return edges


def find_cycle(edges):
    """one cycle of the folder graph as a list of folders [a, b, ..., a], or None"""
    succ = {}
    for a, b in edges:
        succ.setdefault(a, set()).add(b)
        succ.setdefault(b, set())
    state = {}  # 1: on the DFS path, 2: done
    path = []

    def dfs(u):
        state[u] = 1
        path.append(u)
        for v in sorted(succ[u]):
            if state.get(v) == 1:
                return path[path.index(v):] + [v]
            if v not in state:
                c = dfs(v)
                if c:
                    return c
        path.pop()
        state[u] = 2
        return None

    for u in sorted(succ):
        if u not in state:
            c = dfs(u)
            if c:
                return c
    return None


def describe(cycle, edges):
    steps = []
    for a, b in zip(cycle, cycle[1:]):
        lines = edges[(a, b)]
        steps.append("%s -> %s (%s%s)" % (a, b, lines[0], ", +%d more" % (len(lines) - 1) if len(lines) > 1 else ""))
    return " -> ".join(cycle) + ": " + "; ".join(steps)


def test_no_folder_cycle():
    edges = folder_edges(REPO)
    assert edges, "no include between folders of src/ was found: the parser is broken"
    cycle = find_cycle(edges)
    assert cycle is None, "include cycle between folders: " + describe(cycle, edges)


def test_checker_finds_a_cycle():
    """a tree where a -> b by the -I list and b -> a by a relative path"""
    with tempfile.TemporaryDirectory() as tmp:
        for folder in ("a", "b", "c"):
            os.makedirs(os.path.join(tmp, "src", folder))
        with open(os.path.join(tmp, "Makefile"), "w") as f:
            f.write("CFLAGS_BASE = -std=c11 -Iinclude -Isrc/a \\\n              -Isrc/b -Isrc/c\n")
        files = {
            "src/a/x.c": '#include "x.h"\n#include "y.h"\n',
            "src/a/x.h": "",
            "src/b/y.h": '#include <stdio.h>\n#include "z.h"\n',
            "src/c/z.h": '  #  include "../a/x.h"\n',
        }
        for p, text in files.items():
            with open(os.path.join(tmp, p), "w") as f:
                f.write(text)
        edges = folder_edges(tmp)
        assert set(edges) == {("a", "b"), ("b", "c"), ("c", "a")}, "edges %r" % sorted(edges)
        cycle = find_cycle(edges)
        assert cycle and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}, "cycle %r" % cycle
        assert "src/c/z.h:1 includes src/a/x.h" in describe(cycle, edges), describe(cycle, edges)
        # without the back edge the same tree is acyclic
        del edges[("c", "a")]
        assert find_cycle(edges) is None


suite.case("checker_finds_a_cycle", test_checker_finds_a_cycle)
suite.case("no_folder_cycle", test_no_folder_cycle)
suite.finish()
