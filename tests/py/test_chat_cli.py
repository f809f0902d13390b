"""test_chat_cli.py — `kiln run`'s chat flags end to end on tiny gemma3 models
(tests/py/tiny_llm.py), one with the published gemma3 chat template in its
metadata and one without any.

What is checked:
  - a model without a template: --chat warns and names the built-in format it
    guessed (gemma, from the vocabulary);
  - a model with one: --chat says it uses the model's template, and the prompt
    ids equal those of the built-in gemma format (the same published text);
  - -sys adds the system text to the first user turn; --chat-template NAME
    forces a format (and names it); -f FILE reads the prompt;
  - --chat -i: one reply per stdin line, the first equal to the one-shot
    --chat reply to the same line; the conversation's second turn answers;
  - usage errors: -i without --chat, -p with -f, an unknown template name
    (exit 2); a missing -f file (exit 1).
"""
import json
import os
import subprocess
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as kc  # noqa: E402
import tiny_llm  # noqa: E402

BUILD = os.environ.get("KILN_BUILD") or os.path.join(kc.REPO, "build")
KILN = os.environ.get("KILN_BIN") or os.path.join(BUILD, "kiln")
TMP = tempfile.mkdtemp(prefix="kiln_chat_cli_")
ENV = dict(os.environ)
ENV.pop("LD_PRELOAD", None)
ENV.setdefault("XDG_CACHE_HOME", "/tmp/kiln-test-cache-%d" % os.getuid())

suite = kc.Suite("test_chat_cli")
with open(os.path.join(kc.REPO, "tests", "data", "chat", "gemma3.jinja")) as f:
    GEMMA_TMPL = f.read()
PLAIN = tiny_llm.write(os.path.join(TMP, "plain.gguf"), n_ctx=128)
CHAT = tiny_llm.write(os.path.join(TMP, "chat.gguf"), n_ctx=128, chat_template=GEMMA_TMPL)
TOKS = tiny_llm.vocab()[0]


def kiln(*args, stdin=None):
    r = subprocess.run([KILN] + [str(a) for a in args], input=stdin, capture_output=True, env=ENV, timeout=240)
    r.out = r.stdout.decode("utf-8", "replace")
    r.err = r.stderr.decode("utf-8", "replace")
    return r


def run_json(model, *args):
    r = kiln("run", "-m", model, "--json", "--temp", 0, "-n", 3, "-t", 1, *args)
    assert r.returncode == 0, (args, r.err[-400:])
    return json.loads(r.out), r.err


def t_no_template_warns():
    got, err = run_json(PLAIN, "-p", "the cat", "--chat")
    assert "warning: the model has no chat template" in err and "chat template gemma" in err, err
    sot = TOKS.index("<start_of_turn>")
    assert got["prompt_ids"][:2] == [2, sot], got["prompt_ids"][:4]


def t_model_template():
    got, err = run_json(CHAT, "-p", "the cat", "--chat")
    assert "chat template from the model" in err, err
    builtin, err2 = run_json(CHAT, "-p", "the cat", "--chat-template", "gemma")
    assert "chat template gemma (built-in, as asked)" in err2, err2
    assert got["prompt_ids"] == builtin["prompt_ids"], (got["prompt_ids"], builtin["prompt_ids"])
    assert got["prompt_ids"].count(2) == 1, "one BOS: %s" % got["prompt_ids"]


def t_system_and_file():
    plain, _ = run_json(CHAT, "-p", "the cat", "--chat")
    sys_, _ = run_json(CHAT, "-p", "the cat", "-sys", "a big dog")
    ids, base = sys_["prompt_ids"], plain["prompt_ids"]
    dog = TOKS.index("▁dog")
    assert dog in ids and dog not in base and len(ids) > len(base), (ids, base)
    path = os.path.join(TMP, "prompt.txt")
    with open(path, "w") as f:
        f.write("the cat")
    from_file, _ = run_json(CHAT, "-f", path, "--chat")
    assert from_file["prompt_ids"] == base, (from_file["prompt_ids"], base)
    other, err = run_json(CHAT, "-p", "the cat", "--chat-template", "chatml")
    assert "chat template chatml" in err and other["prompt_ids"] != base, err


def t_interactive():
    one, _ = run_json(CHAT, "-p", "the cat", "--chat")
    r = kiln("run", "-m", CHAT, "--temp", 0, "-n", 3, "-t", 1, "--chat", "-i", stdin=b"the cat\nthe dog\n")
    assert r.returncode == 0, r.err[-400:]
    lines = r.out.split("\n")
    assert len(lines) >= 3 and lines[0] == one["text"] and lines[1], (lines, one["text"])


def t_usage_errors():
    for args, code, msg in [(["-m", CHAT, "-i"], 2, "--chat"), (["-m", CHAT, "-p", "a", "-f", "x"], 2, "not both"),
                            (["-m", CHAT, "-p", "a", "--chat-template", "vicuna"], 2, "vicuna"),
                            (["-m", CHAT, "-f", os.path.join(TMP, "nope.txt")], 1, "nope.txt")]:
        r = kiln("run", *args)
        assert r.returncode == code and msg in r.err, (args, r.returncode, r.err)


suite.case("no_template_warns", t_no_template_warns)
suite.case("model_template", t_model_template)
suite.case("system_and_file", t_system_and_file)
suite.case("interactive", t_interactive)
suite.case("usage_errors", t_usage_errors)
suite.finish()
