"""test_op_switches.py — no switch over kiln's ops has a `default:`.

A switch over op_kind that lists its cases without `default:` lets the
compiler's -Wswitch (in -Wall, an error in CI) name every place a new op of
src/ir/ops.def has not been taught yet; a `default:` silently gives the new
op some other op's meaning. (-Wswitch-enum would say the same of switches
with a default, but it also flags every switch over dtypes, sym kinds and
loop-IR kinds, 66 sites when it was tried; this check is narrower.)

Every `switch (...) { ... }` of src/*/*.c and *.h whose own case labels (not
those of a switch nested in it) include an `OP_` name must have no `default:`
label of its own. Comments and string literals are blanked first. The checker
is tested on a small sample with a default, so a checker that finds nothing
cannot pass, and it must find the tree's op switches (at least 12; 14 once
the unary ops became rows of ops.def's KILN_UNARY_OPS). OP_UNARY_CASES (the
case labels of every unary op, graph.h) counts as an op label.

And no switch of src/ names a unary op of KILN_UNARY_OPS in a case label:
the class is named by OP_UNARY_CASES, and what differs per op is a column
of the table, so a new unary op touches no switch.
"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiln_ctypes import REPO, Suite  # noqa: E402

suite = Suite("test_op_switches")


def blank(text):
    """comments, string and character literals replaced by spaces (newlines kept)"""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


SWITCH = re.compile(r"\bswitch\s*\(")
LABEL = re.compile(r"\b(case\s+([A-Za-z_][A-Za-z_0-9]*)|default\s*:|(OP_UNARY_CASES)\b)")


def switches(text):
    """(line, labels) of every switch: labels are its own case names and
    'default', not those of switches nested in it"""
    text = blank(text)
    found = []
    for m in SWITCH.finditer(text):
        i = m.end()
        depth = 1
        while i < len(text) and depth:  # the controlling expression
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        while i < len(text) and text[i] != "{":
            i += 1
        start, depth, j = i + 1, 1, i + 1
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        body = text[start:j - 1]
        # blank nested switches' bodies so their labels are not ours
        for inner in SWITCH.finditer(body):
            k = body.find("{", inner.end())
            if k < 0:
                continue
            d, e = 1, k + 1
            while e < len(body) and d:
                d += {"{": 1, "}": -1}.get(body[e], 0)
                e += 1
            body = body[:k + 1] + re.sub(r"[^\n]", " ", body[k + 1:e - 1]) + body[e - 1:]
        labels = ["default" if lm.group(1).startswith("default") else lm.group(2) or lm.group(3)
                  for lm in LABEL.finditer(body)]
        found.append((text.count("\n", 0, m.start()) + 1, labels))
    return found


def op_switch_defaults(text):
    """(lines of op switches with a default, number of op switches)"""
    bad, nops = [], 0
    for line, labels in switches(text):
        if any(lb.startswith("OP_") for lb in labels if lb != "default"):
            nops += 1
            if "default" in labels:
                bad.append(line)
    return bad, nops


SAMPLE = """
static int f(op_kind op, int k) {
    switch (op) {              /* line 3: an op switch with a default */
    case OP_ADD: return 1;
    default: return 0;
    }
}
static int g(op_kind op, int k) {
    switch (op) {              /* line 9: fine; the default below is the inner switch's */
    case OP_ADD:
        switch (k) { case 1: return 2; default: return 3; }
    case OP_MUL: return 0;
    }
    switch (k) { case 0: return 1; default: return 2; }   /* not over ops */
    return "default:"[0];
}
"""


def test_checker_finds_a_default():
    bad, nops = op_switch_defaults(SAMPLE)
    assert nops == 2, "the sample has 2 op switches, the checker saw %d" % nops
    assert bad == [3], "the sample's default is on line 3, the checker says %s" % bad


def test_no_default_in_op_switches():
    files = sorted(glob.glob(os.path.join(REPO, "src", "*", "*.c")) + glob.glob(os.path.join(REPO, "src", "*", "*.h")))
    total, bad = 0, []
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines, n = op_switch_defaults(f.read())
        total += n
        bad += ["%s:%d" % (os.path.relpath(path, REPO), ln) for ln in lines]
    assert total >= 12, "only %d switches over ops found in src/: is the checker blind?" % total
    assert not bad, "switches over ops with a default (list the cases instead): %s" % ", ".join(bad)


def unary_ops():
    """the names of ops.def's KILN_UNARY_OPS rows"""
    with open(os.path.join(REPO, "src", "ir", "ops.def"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("#define KILN_UNARY_OPS(U)")
    return re.findall(r"\bU\(([A-Z0-9_]+),", text[start:])


def test_no_switch_names_a_unary_op():
    names = unary_ops()
    assert len(names) >= 5, "only %d unary rows read from ops.def" % len(names)
    files = sorted(glob.glob(os.path.join(REPO, "src", "*", "*.c")) + glob.glob(os.path.join(REPO, "src", "*", "*.h")))
    bad = []
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line, labels in switches(f.read()):
                named = sorted(set(lb[3:] for lb in labels if lb and lb.startswith("OP_")) & set(names))
                if named:
                    bad.append("%s:%d (%s)" % (os.path.relpath(path, REPO), line, ", ".join(named)))
    sample = "switch (op) { OP_UNARY_CASES return 1; case OP_EXP2: return 2; case OP_ADD: return 3; }"
    labels = switches(sample)[0][1]
    assert "OP_UNARY_CASES" in labels and "OP_EXP2" in labels, "the checker misreads %s" % labels
    assert not bad, "switches naming a unary op (use OP_UNARY_CASES or a column of ops.def): %s" % ", ".join(bad)


suite.case("checker_finds_a_default", test_checker_finds_a_default)
suite.case("no_switch_names_a_unary_op", test_no_switch_names_a_unary_op)
suite.case("no_default_in_op_switches", test_no_default_in_op_switches)
suite.finish()
