"""test_architecture.py — docs/ARCHITECTURE.md must name what exists.

1. Every path the map names in backticks exists, relative to the repository
   root: an inline code span (outside fenced blocks) made only of path
   characters that contains a '/' or ends in a source extension (.c .h .def
   .py .sh .md .txt .svg). A trailing '/' is allowed for folders. Spans with
   spaces, globs, placeholders (<...>, $VAR, ~, a segment N or NAME) or other
   punctuation are not paths and are skipped; so are absolute paths.
2. Every folder under src/ is described: the text `src/<folder>/` appears.
3. Section 7 has the steps to add a unary op, any other op, a backend and a
   micro-kernel family, each naming files that exist; the unary op's own
   files (those named before "Nothing else names it") are at most five.
The checker itself is tested on a small text with a bogus path and a missing
folder, so a checker that finds nothing cannot pass.

Runs with the plain python3 (no numpy): python3 tests/py/test_architecture.py
"""
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(REPO, "docs", "ARCHITECTURE.md")

EXTS = (".c", ".h", ".def", ".py", ".sh", ".md", ".txt", ".svg")
PATH_CHARS = re.compile(r"^[A-Za-z0-9_.\-/]+$")
PLACEHOLDER_SEGMENTS = {"N", "NAME", "X", "...", "..."}
FENCE = re.compile(r"^\s*(```|~~~)")
SPAN = re.compile(r"(`+)(.+?)\1")

passed = failed = 0


def case(name, fn):
    global passed, failed
    try:
        fn()
    except Exception as e:  # a failing case must not stop the others
        why = " ".join(str(e).split()) or type(e).__name__
        print("FAIL %s: %s" % (name, why[:900]))
        failed += 1
    else:
        print("PASS %s" % name)
        passed += 1
    sys.stdout.flush()


def code_spans(text):
    """(line number, span text) of every inline code span outside fenced blocks"""
    out = []
    fenced = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for m in SPAN.finditer(line):
            out.append((lineno, m.group(2).strip()))
    return out


def path_like(span):
    """the span as a repository path, or None when it is not one"""
    if not span or not PATH_CHARS.match(span) or span.startswith("/"):
        return None
    if "/" not in span and not span.endswith(EXTS):
        return None
    segments = [s for s in span.rstrip("/").split("/") if s]
    if not segments or any(s in PLACEHOLDER_SEGMENTS for s in segments):
        return None
    return span


def missing_paths(text, root):
    """['line N: `path`'] for every path-like span that does not exist under root"""
    bad = []
    for lineno, span in code_spans(text):
        p = path_like(span)
        if p is None:
            continue
        full = os.path.join(root, p.rstrip("/"))
        ok = os.path.isdir(full) if p.endswith("/") else os.path.exists(full)
        if not ok:
            bad.append("line %d: `%s`" % (lineno, p))
    return bad


def undescribed_folders(text, root):
    """folders under root/src that the text never names as src/<folder>/"""
    src = os.path.join(root, "src")
    folders = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)) and not d.startswith("."))
    return [d for d in folders if "src/%s/" % d not in text]


def read_doc():
    assert os.path.isfile(DOC), "docs/ARCHITECTURE.md is missing"
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def test_paths_exist():
    text = read_doc()
    spans = [s for _, s in code_spans(text) if path_like(s)]
    assert len(spans) > 50, "only %d paths found in backticks: the span parser is broken" % len(spans)
    bad = missing_paths(text, REPO)
    assert not bad, "%d path(s) named in docs/ARCHITECTURE.md do not exist: %s" % (len(bad), "; ".join(bad))


def test_src_folders_described():
    missing = undescribed_folders(read_doc(), REPO)
    assert not missing, "folders of src/ not described in docs/ARCHITECTURE.md: %s" % ", ".join(
        "src/%s/" % d for d in missing)


def test_checker_catches_mistakes():
    """a text with a bogus path and a tree with an undescribed folder fail; the
    things that are not paths are left alone"""
    text = "\n".join([
        "- `src/ir/graph.c` and `src/ir/` exist; `src/ir/nope.c` does not",
        "- `README.md` exists, `NOPE.md` does not; `tests/py/test_*.py` is a glob",
        "- `kiln_k<k>` `$KILN_TUNEDB` `~/.cache/kiln/tune.db` `a b/c.c` `/proc/cpuinfo` `src/N/x.c`",
        "```",
        "`src/in/a/fence.c`",
        "```",
        "- `src/ir/graph.c/` is not a folder",
    ])
    bad = missing_paths(text, REPO)
    assert bad == ["line 1: `src/ir/nope.c`", "line 2: `NOPE.md`", "line 7: `src/ir/graph.c/`"], bad
    folders = set(d for d in os.listdir(os.path.join(REPO, "src")) if os.path.isdir(os.path.join(REPO, "src", d)))
    assert "ir" in folders, "no src/ir/ in this checkout"
    missing = undescribed_folders("only `src/ir/` here", REPO)
    assert "ir" not in missing and set(missing) == folders - {"ir"}, missing


RECIPES = ("**A unary op**", "**Any other op.**", "**A backend.**", "**A micro-kernel family**")


def recipe(text, title):
    """the paragraph of section 7 that starts with title"""
    sec = text.find("## 7. How to add")
    assert sec >= 0, "no section 7 (How to add ...)"
    end = text.find("\n## ", sec + 1)
    body = text[sec:end if end > 0 else len(text)]
    i = body.find(title)
    assert i >= 0, "section 7 has no recipe %s" % title
    j = body.find("\n**", i + len(title))
    return body[i:j if j > 0 else len(body)]


def recipe_paths(par):
    return sorted(set(p for p in (path_like(s) for _, s in code_spans(par)) if p))


def test_recipes_name_their_files():
    """the steps to add an op, a backend and a micro-kernel family each name
    files that exist; a unary op touches at most five (the files its recipe
    names before 'Nothing else names it')"""
    text = read_doc()
    for title in RECIPES:
        paths = recipe_paths(recipe(text, title))
        assert len(paths) >= 3, "%s names %d files" % (title, len(paths))
        bad = [p for p in paths if not os.path.exists(os.path.join(REPO, p.rstrip("/")))]
        assert not bad, "%s names missing files: %s" % (title, ", ".join(bad))
    par = recipe(text, "**A unary op**")
    cut = par.find("Nothing else names it")
    assert cut > 0, "the unary recipe does not say where its files end"
    touched = recipe_paths(par[:cut])
    assert 1 <= len(touched) <= 5, "a unary op touches %d files: %s" % (len(touched), ", ".join(touched))
    assert "src/ir/ops.def" in touched, touched


case("checker_catches_mistakes", test_checker_catches_mistakes)
case("architecture_recipes_name_their_files", test_recipes_name_their_files)
case("architecture_paths_exist", test_paths_exist)
case("architecture_src_folders_described", test_src_folders_described)
print("test_architecture: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
