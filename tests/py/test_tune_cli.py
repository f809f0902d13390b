"""test_tune_cli.py — `kiln tune` end to end: the tuning DB as the CLI shows,
exports and imports it.

The DB files are written and read here by an encoder/decoder of this file's
own, made from the format documented at the top of src/sched/tunedb.c
(quoted, escaped text fields; FNV-1a 64 checksum of the line before
" sum="), so the C side is checked against the documentation, not itself.

What is checked:
  - --show and --show --json on a missing DB: exit 0, no rows, JSON [];
  - --show --json gives every field of every record, the speedup base/best,
    and this_machine true exactly for the records with this machine's
    fingerprint (kiln_device_fingerprint through ctypes); the text table has
    one row per record with the speedup and yes/no;
  - --export writes a file whose lines all carry valid checksums and decode
    to the records; --import of it into an empty DB gives the same --json;
    the counts are printed; importing twice does not double records;
  - a DB with a flipped byte and binary garbage: --show exits 0, warns once on
    stderr naming the file and the first damaged line, and still shows the
    good records;
  - bad flags and flag combinations exit 2 with one line on stderr; a missing
    import file or model exits 1; --space prints the schedule space (exit 0);
  - -m on a tiny random model with --budget 0 compiles and shows the table.
"""
import json
import re
import os
import shutil
import subprocess
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as kc  # noqa: E402

BUILD = os.environ.get("KILN_BUILD") or os.path.join(kc.REPO, "build")
KILN = os.environ.get("KILN_BIN") or os.path.join(BUILD, "kiln")
TMP = tempfile.mkdtemp(prefix="kiln_tune_cli_")
ENV = dict(os.environ)
ENV.pop("LD_PRELOAD", None)  # see test_cli_run.py: kiln carries its own sanitizers
ENV.setdefault("XDG_CACHE_HOME", "/tmp/kiln-test-cache-%d" % os.getuid())

suite = kc.Suite("test_tune_cli")
_n = [0]


def fresh_db():
    _n[0] += 1
    return os.path.join(TMP, "db%d" % _n[0], "tune.db")


def kiln(args, db, timeout=120, **extra):
    env = dict(ENV, KILN_TUNEDB=db, **extra)
    p = subprocess.run([KILN, "tune"] + args, env=env, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


# ---------------------------------------------------------------- the format


def esc(s):
    out = []
    for b in s.encode("utf-8"):
        if b in (0x22, 0x5c):
            out.append("\\" + chr(b))
        elif b < 0x20 or b >= 0x7f:
            out.append("\\x%02x" % b)
        else:
            out.append(chr(b))
    return '"' + "".join(out) + '"'


def encode(r):
    body = "fp=%s key=%s bucket=%s sched=%s best=%r base=%r tried=%d rejected=%d date=%s ir=%d" % (
        esc(r["fingerprint"]), esc(r["key"]), esc(r["bucket"]), esc(r["schedule"]), r["best_s"], r["base_s"],
        r["tried"], r["rejected"], esc(r["date"]), r["ir_version"])
    return "%s sum=%016x\n" % (body, kc.fnv1a64(body.encode()))


def unquote(s, i):
    """the quoted string at s[i] -> (text, index after it)"""
    assert s[i] == '"', s[i:i + 20]
    i += 1
    out = bytearray()
    while s[i] != '"':
        if s[i] == "\\":
            if s[i + 1] == "x":
                out.append(int(s[i + 2:i + 4], 16))
                i += 4
            else:
                out.append(ord(s[i + 1]))
                i += 2
        else:
            out.append(ord(s[i]))
            i += 1
    return out.decode("utf-8"), i + 1


def decode(line):
    """one record line -> dict; raises on a bad checksum"""
    line = line.rstrip("\n")
    body, _, tail = line.rpartition(" sum=")
    assert len(tail) == 16 and int(tail, 16) == kc.fnv1a64(body.encode()), "bad checksum: " + line[:60]
    names = [("fp", "fingerprint", str), ("key", "key", str), ("bucket", "bucket", str), ("sched", "schedule", str),
             ("best", "best_s", float), ("base", "base_s", float), ("tried", "tried", int),
             ("rejected", "rejected", int), ("date", "date", str), ("ir", "ir_version", int)]
    r, i = {}, 0
    for k, (tag, name, typ) in enumerate(names):
        pre = ("" if k == 0 else " ") + tag + "="
        assert body.startswith(pre, i), (pre, body[i:i + 30])
        i += len(pre)
        if typ is str:
            r[name], i = unquote(body, i)
        else:
            j = body.find(" ", i)
            j = len(body) if j < 0 else j
            r[name], i = typ(body[i:j]), j
    assert i == len(body)
    return r


def write_db(path, recs, extra=b""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"# kiln tune db v1\n")
        for r in recs:
            f.write(encode(r).encode())
        f.write(extra)


def this_fingerprint():
    return kc._take_string(kc.lib.kiln_device_fingerprint())


def records():
    here = this_fingerprint()
    return [
        dict(fingerprint=here, key="a1b2c3d4e5f60718293a", bucket="m=1,n=640,k=2048",
             schedule="contract mr=4 nr=2 kc=256 arith=f32", best_s=1.25e-5, base_s=5e-5, tried=40, rejected=2,
             date="2025-03-01T10:00:00Z", ir_version=1),
        dict(fingerprint=here, key="ffee0011", bucket="rows=4096; cols=64",
             schedule='loop order=(i, j) vec=j:16 "unroll"=2 \\ done', best_s=0.003, base_s=0.0045, tried=7,
             rejected=0, date="2025-03-02T10:00:00Z", ir_version=1),
        dict(fingerprint="cpu=Other CPU;isa=avx2,fma;cores=8;cc=gcc 13;ir=1", key="a1b2c3d4e5f60718293a",
             bucket="m=1,n=640,k=2048", schedule="contract mr=6 nr=2 kc=512 arith=f32", best_s=2e-5,
             base_s=2e-5, tried=12, rejected=1, date="2024-11-30T00:00:00Z", ir_version=1),
    ]


def same(a, b):
    keys = ["fingerprint", "key", "bucket", "schedule", "best_s", "base_s", "tried", "rejected", "date", "ir_version"]
    return all(a[k] == b[k] for k in keys)


def by_ident(recs):
    return {(r["fingerprint"], r["key"], r["bucket"]): r for r in recs}


# ---------------------------------------------------------------- cases


def case_show_empty():
    db = fresh_db()
    rc, out, err = kiln(["--show"], db)
    assert rc == 0, (rc, err)
    assert out == "", out
    assert "no records" in err, err
    rc, out, err = kiln(["--show", "--json"], db)
    assert rc == 0, (rc, err)
    assert json.loads(out) == [], out
    rc, out, err = kiln([], db)  # no options: --show
    assert rc == 0 and out == "", (rc, out)
    assert not os.path.exists(db), "showing created the DB"


def case_show_records():
    db = fresh_db()
    recs = records()
    write_db(db, recs)
    rc, out, err = kiln(["--show", "--json"], db)
    assert rc == 0, (rc, err)
    got = json.loads(out)
    assert len(got) == len(recs), got
    want = by_ident(recs)
    here = this_fingerprint()
    for g in got:
        r = want[(g["fingerprint"], g["key"], g["bucket"])]
        assert same(g, r), (g, r)
        assert g["this_machine"] == (r["fingerprint"] == here), g
        assert abs(g["speedup"] - r["base_s"] / r["best_s"]) < 1e-5 * g["speedup"], g
    rc, out, err = kiln(["--show"], db)
    assert rc == 0, (rc, err)
    rows = [l for l in out.splitlines() if l.startswith("|") and not l.startswith("|-")]
    assert len(rows) == 1 + len(recs), out  # header + records
    assert "kernel" in rows[0] and "speedup" in rows[0], rows[0]
    assert sum(" yes " in l for l in rows[1:]) == 2 and sum(" no " in l for l in rows[1:]) == 1, out
    assert any("4.00x" in l and "contract mr=4 nr=2 kc=256 arith=f32" in l and "m=1,n=640,k=2048" in l
               for l in rows), out
    assert any("1.50x" in l and '"unroll"=2' in l for l in rows), out
    assert "3 records" in err, err


def case_show_keys_apart():
    """the table cuts a key's hash, never its dtype: q4_0 and q4_k keys with
    the same hash show as two different kernels"""
    db = fresh_db()
    base = records()[0]
    recs = [dict(base, key="contract-q4_0-1111111122222222"), dict(base, key="contract-q4_k-1111111122222222")]
    write_db(db, recs)
    rc, out, err = kiln(["--show"], db)
    assert rc == 0, (rc, err)
    assert "| contract-q4_0-11111111 " in out and "| contract-q4_k-11111111 " in out, out


def case_export_import():
    db = fresh_db()
    recs = records()
    write_db(db, recs)
    exported = os.path.join(TMP, "exported.db")
    rc, out, err = kiln(["--export", exported], db)
    assert rc == 0, (rc, err)
    assert "exported 3 records" in out, out
    with open(exported) as f:
        lines = [l for l in f if l.strip() and not l.startswith("#")]
    dec = [decode(l) for l in lines]
    assert len(dec) == 3, lines
    want = by_ident(recs)
    for d in dec:
        assert same(d, want[(d["fingerprint"], d["key"], d["bucket"])]), d
    db2 = fresh_db()
    rc, out, err = kiln(["--import", exported], db2)
    assert rc == 0, (rc, err)
    assert "imported 3 records" in out, out
    rc, show1, _ = kiln(["--show", "--json"], db)
    rc2, show2, _ = kiln(["--show", "--json"], db2)
    assert rc == 0 and rc2 == 0
    assert json.loads(show1) == json.loads(show2), (show1, show2)
    # again: same identities are replaced, nothing doubles; --json keeps stdout JSON
    rc, out, err = kiln(["--import", exported, "--show", "--json"], db2)
    assert rc == 0, (rc, err)
    assert len(json.loads(out)) == 3, out
    assert "imported 3 records" in err, err
    rc, out, err = kiln(["--import", os.path.join(TMP, "no-such.db")], db2)
    assert rc == 1 and err.strip(), (rc, err)


def case_corrupt():
    db = fresh_db()
    recs = records()
    write_db(db, recs, extra=b"\x00\xff\x13garbage \"fp=\n" + bytes(range(256)) + b"\n")
    with open(db, "rb") as f:
        data = bytearray(f.read())
    # flip a byte inside the second record (file line 3)
    start = data.index(b"\n", data.index(b"\n") + 1) + 1
    data[start + 10] ^= 0x04
    with open(db, "wb") as f:
        f.write(data)
    rc, out, err = kiln(["--show", "--json"], db)
    assert rc == 0, (rc, err)
    got = json.loads(out)
    assert len(got) == 2, got
    assert {g["schedule"] for g in got} == {recs[0]["schedule"], recs[2]["schedule"]}, got
    warn = [l for l in err.splitlines() if "damaged" in l]
    assert len(warn) == 1, err
    assert db in warn[0] and "line 3" in warn[0], warn
    rc, out, err = kiln(["--show"], db)
    assert rc == 0, (rc, err)
    # a file of nothing but garbage
    with open(db, "wb") as f:
        f.write(bytes((i * 37 + 11) % 256 for i in range(3000)))
    rc, out, err = kiln(["--show", "--json"], db)
    assert rc == 0 and json.loads(out) == [], (rc, out, err)


def case_bad_flags():
    db = fresh_db()
    for args in (["--bogus"], ["--show=yes"], ["--export"], ["--import"], ["--budget", "5"],
                 ["-m", "x.gguf", "--budget", "soon"], ["-m", "x.gguf", "--budget", "-3"],
                 ["--export", "a", "--import", "b"], ["--json", "--export", os.path.join(TMP, "x")],
                 ["--space", "--show"], ["-t", "0", "-m", "x.gguf"], ["-m"], ["--retune"], ["--retune=1", "-m", "x.gguf"],
                 ["-p", "64"], ["-m", "x.gguf", "-p", "3"], ["-m", "x.gguf", "--prompt", "many"]):
        rc, out, err = kiln(args, db)
        assert rc == 2, (args, rc, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "kiln tune" in lines[0], (args, err)
    rc, out, err = kiln(["--space"], db)
    # one line per micro-kernel family of src/sched/family.c, then the sizes
    fams = re.findall(r'\[SCH_FAM_[A-Z0-9_]+\] = \{SCH_FAM_[A-Z0-9_]+, "([a-z0-9-]+)"',
                      open(os.path.join(kc.REPO, "src", "sched", "family.c"), encoding="utf-8").read())
    assert len(fams) >= 9 and all(("\n  %s " % f) in out for f in fams), (fams, out)
    assert rc == 0 and "schedules" in out, (rc, out, err)
    rc, out, err = kiln(["-m", os.path.join(TMP, "missing.gguf"), "--budget", "1"], db)
    assert rc == 1 and "missing.gguf" in err, (rc, err)
    rc, out, err = kiln(["--help"], db)
    assert rc == 0 and "--export" in out, (rc, out)


# the model case's search budget: under the sanitizers the profile and the
# recompile's reserve (the streaming form's pair included) can take all of
# 5 s, and a starved search records no contraction, which the case's
# "records used as they are" step needs (seen once in three runs under ASan)
MODEL_BUDGET = "10s" if os.environ.get("KILN_ASAN") else "5s"


def case_tune_model():
    import kiln_gguf as kg
    path = os.path.join(TMP, "tiny.gguf")
    kg.write_random_model(path, kg.tiny_config("llama"), lambda name, shape: kc.F32)
    db = fresh_db()
    rc, out, err = kiln(["-m", path, "--budget", "0s", "-t", "1", "--json"], db, timeout=600)
    assert rc == 0, (rc, err)
    assert json.loads(out) == [], out  # no budget: no search, no records
    rc, out, err = kiln(["-m", path, "--budget", MODEL_BUDGET, "-t", "1", "--json"], db, timeout=600)
    assert rc == 0, (rc, err)
    recs = json.loads(out)
    assert len(recs) >= 1, (out, err)  # the tiny model's projections were searched
    # measured records (a spent budget may stop at the default), or kept ones:
    # a kernel the plan passed over or did not reach, recorded with tried 0
    assert all((r["tried"] >= 1 and r["best_s"] > 0) or (r["tried"] == 0 and r["best_s"] == 0) for r in recs), recs
    assert any(r["tried"] >= 1 for r in recs), recs
    # decode steps are profiled in the program the search runs (the
    # streaming form, which decode would pick, used to run them unseen by
    # the profile: every decode kernel then weighed 0 and kept its default)
    prof = re.search(r"a (\d+)-row prefill ([0-9.]+) ms, a decode step ([0-9.]+) ms", err)
    assert prof and float(prof.group(2)) > 0 and float(prof.group(3)) > 0, err[-2000:]
    # the attention forms, timed after the search: short prompts and decode,
    # each the faster of the two with the runner-up's time beside it, or on
    # a tie (within 3%) the cost model's pick (materialised for short prompts)
    forms = {r["bucket"].split(",")[0]: r for r in recs if r["key"].startswith("attn-form-")}
    assert set(forms) >= {"short", "decode"}, (sorted(forms), err)
    # Where the CPU has avx512_bf16, prompts have a third form,
    # streaming-bf16: the schedule then names the runner-up when it is not
    # the other f32 form ("<winner> runner-up=<form>"), bf16 never for decode,
    # and a tie with it keeps the f32 form
    for b, r in forms.items():
        winner, _, rest = r["schedule"].partition(" ")
        assert winner in ("streaming", "materialised", "streaming-bf16"), r
        runner = rest[len("runner-up="):] if rest.startswith("runner-up=") else None
        assert rest == "" or runner in ("streaming", "materialised", "streaming-bf16"), r
        assert winner != "streaming-bf16" or runner is not None, r
        if "streaming-bf16" in (winner, runner):
            assert b in ("short", "long"), r
        assert r["best_s"] > 0 and r["base_s"] > 0, r
        pick = "materialised" if b == "short" else "streaming"
        tie = r["best_s"] <= r["base_s"] * 1.03 * (1 + 1e-5)
        assert r["best_s"] <= r["base_s"] or (tie and (winner == pick or runner == "streaming-bf16")), r
    env = dict(ENV, KILN_TUNEDB=db)
    p = subprocess.run([KILN, "explain", "-m", path, "--kernels", "-t", "1"], env=env, capture_output=True, timeout=300)
    text = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert text.count("(measured, tuning DB)") >= 2, text[text.find("attention forms"):][:2000]
    # tuned again: this machine's records are used as they are (a bucket the
    # first budget did not reach may be searched now)
    rc, out, err = kiln(["-m", path, "--budget", MODEL_BUDGET, "-t", "1", "--json"], db, timeout=600)
    assert rc == 0, (rc, err)
    key = lambda r: (r["key"], r["bucket"])
    first = {key(r): r["best_s"] for r in recs}
    again = {key(r): r["best_s"] for r in json.loads(out)}
    kept = [k for k in first if again.get(k) == first[k]]
    assert kept, (first, again)
    # --retune: the measured ones are searched again and replaced by new
    # measurements (kept ones may stay kept: a share too small to pay for a
    # search passes its group over rather than overrun the budget)
    rc, out, err = kiln(["-m", path, "--budget", MODEL_BUDGET, "-t", "1", "--retune", "--json"], db, timeout=600)
    assert rc == 0, (rc, err)
    retuned = {key(r): r["best_s"] for r in json.loads(out)}
    assert set(again) <= set(retuned), (retuned, again)
    measured = [k for k in kept if first[k] > 0]
    assert measured, (first, again)
    changed = [k for k in measured if retuned[k] != again[k]]
    m = re.search(r"searched (\d+) kernels?", err)
    assert m, err[-2000:]
    if int(m.group(1)) > 0:
        assert changed, (measured, err[-2000:])
    else:  # a machine so loaded that the recompile's reserve took the 5 s
        print("note: --retune searched nothing (a loaded machine): " + err.strip().splitlines()[-2][:300])


def cpu_flags():
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def case_tune_bf16_form():
    # the streaming-bf16 attention form in a search's form rounds: a tiny
    # llama with head_dim 32 (the bf16 tile's shapes). Where the CPU has
    # avx512_bf16 its prefill is checked against the f32 streaming form's
    # logits (the phase line with the KL) and timed; a record naming it is
    # for prompts only, names its runner-up, and wins only beyond 3%.
    # Elsewhere the form is not offered.
    import kiln_gguf as kg
    path = os.path.join(TMP, "tiny32.gguf")
    kg.write_random_model(path, kg.tiny_config("llama", head_dim=32), lambda name, shape: kc.F32)
    db = fresh_db()
    # the form is searched only when asked for (src/base/config.c)
    rc, out, err = kiln(["-m", path, "--budget", "8s", "-t", "1", "--json"], db, timeout=600, KILN_STREAM_BF16="search")
    assert rc == 0, (rc, err)
    has = {"avx512_bf16", "avx512bw", "avx512f"} <= cpu_flags()
    timed = re.search(r"timing the attention forms \(([^)]*)\)", err)
    check = re.search(r"streaming-bf16 form's (\d+)-row prefill against the f32 streaming form's: KL ([0-9.e+-]+|inf|nan) "
                      r"\(at most ([0-9.]+)\)(: disqualified)?", err)
    if not timed:
        print("note: the forms were not timed (a loaded machine): " + err.strip()[-300:])
        return
    assert ("streaming-bf16" in timed.group(1)) == has, (has, timed.group(0))
    assert (check is not None) == has, (has, err[-2000:])
    forms = {r["bucket"].split(",")[0]: r for r in json.loads(out) if r["key"].startswith("attn-form-")}
    assert "short" in forms, (sorted(forms), err[-2000:])
    for b, r in forms.items():
        winner, _, rest = r["schedule"].partition(" ")
        if "streaming-bf16" in r["schedule"]:
            assert has and b in ("short", "long"), r
            assert rest.startswith("runner-up=") and r["tried"] == 3, r
        if winner == "streaming-bf16":
            assert not check.group(4), (r, check.group(0))  # disqualified: it may not win
            assert r["best_s"] * 1.03 < r["base_s"], r
    if has:
        kl = float(check.group(2))
        assert (kl <= float(check.group(3))) == (not check.group(4)), check.group(0)
    # by default the form is not offered at all: no bf16 tile is compiled
    rc, out, err = kiln(["-m", path, "--budget", "8s", "-t", "1", "--json"], fresh_db(), timeout=600)
    assert rc == 0, (rc, err)
    timed = re.search(r"timing the attention forms \(([^)]*)\)", err)
    assert "streaming-bf16" not in err, err[-2000:]
    assert timed is None or "streaming" in timed.group(1), timed.group(0)


suite.case("show_empty_db", case_show_empty)
suite.case("show_records_table_and_json", case_show_records)
suite.case("show_keys_apart", case_show_keys_apart)
suite.case("export_import_roundtrip", case_export_import)
suite.case("corrupt_db_warns_and_shows_good_records", case_corrupt)
suite.case("bad_flags_exit_2", case_bad_flags)
suite.case("tune_model_budget", case_tune_model)
suite.case("tune_bf16_form", case_tune_bf16_form)
if not suite.failed:
    shutil.rmtree(TMP, ignore_errors=True)
sys.exit(suite.finish())
