"""test_backend_opencl_models.py — tiny random models (llama, qwen2, qwen3,
gemma3; f32/f16/bf16/q8_0 weights, and k-quant / q4_0 / q5_0 weights) compiled
for the OpenCL backend and run through the KV cache: 16 greedy steps give the
reference interpreter's tokens with close logits (test_models.py's check,
with the library's default backend set to "opencl" through KILN_BACKEND, the
way `kiln run --backend opencl` selects it). Also `kiln run --backend opencl`
end to end, and the clear error of an unknown backend.

Without an OpenCL driver the file prints a SKIP line saying why and checks
nothing. KILN_TEST_OPENCL=0 skips it on purpose.
"""
import os
import subprocess
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import kiln_ctypes as kc  # noqa: E402

BACKEND = os.environ.get("KILN_TEST_GPU_BACKEND", "opencl")
if os.environ.get("KILN_TEST_OPENCL") == "0":
    print("# test_backend_opencl_models: skipped (KILN_TEST_OPENCL=0)")
    sys.exit(0)
os.environ.setdefault("XDG_CACHE_HOME", "/tmp/kiln-test-cache-%d" % os.getuid())


def _probe():
    g = kc.Graph()
    x = g.input("x", kc.F32, "3")
    g.output(g.add(x, x), "y")
    g.bind("x", np.array([1, 2, 3], np.float32))
    try:
        p = g.compile(backend=BACKEND)
    except kc.KilnError as e:
        return str(e)
    p.free()
    return None


why = _probe()
if why is not None:
    print("SKIP test_backend_%s_models: no usable %s device: %s" % (BACKEND, BACKEND, why))
    sys.exit(0)

os.environ["KILN_BACKEND"] = BACKEND  # model_load compiles with the default backend
import kiln_gguf as kg  # noqa: E402
import test_models as tm  # noqa: E402

BUILD = os.environ.get("KILN_BUILD") or os.path.join(kc.REPO, "build")
KILN = os.environ.get("KILN_BIN") or os.path.join(BUILD, "kiln")


def greedy_equals_reference(arch, dtypes=tm.mixed_dtypes, steps=16):
    path, _ = tm.model_file(arch, dtypes=dtypes, seed=13)
    comp, interp = kg.Model(path, compiled=True), kg.Model(path)
    try:
        if not comp.compiled or interp.compiled:
            raise AssertionError("compiled flags: %s %s" % (comp.compiled, interp.compiled))
        seq = list(tm.PROMPT[:4])
        lc, li = comp.forward(seq, 0), interp.forward(seq, 0)
        for step in range(steps):
            tm.check_close(lc, li, "step %d %s vs interpreter" % (step, BACKEND))
            tc, ti = int(np.argmax(lc)), int(np.argmax(li))
            if tc != ti:
                raise AssertionError("step %d: %s chose %d, interpreter %d" % (step, BACKEND, tc, ti))
            seq.append(tc)
            lc, li = comp.forward([tc], len(seq) - 1), interp.forward([tc], len(seq) - 1)
    finally:
        comp.free()
        interp.free()


def quant_dtypes(name, shape):
    """matrices cycle through the block formats models use; norms f32"""
    if len(shape) == 1:
        return kc.F32
    if shape[-1] % 256 == 0:
        return [kc.Q4_K, kc.Q6_K][hash(name) % 2]
    return [kc.Q4_0, kc.Q5_0, kc.Q8_0][sum(map(ord, name)) % 3]


def write_spm_model(path):
    """a tiny random llama with a minimal SentencePiece-style vocabulary
    (controls, the 256 byte tokens, letters and a few words), so `kiln run`
    can tokenize a prompt and print text"""
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    normal = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581the", "\u2581cat", "at"]
    toks += normal
    types += [1] * len(normal)
    scores = [0.0] * 259 + [float(len(t)) - 1e-3 * i for i, t in enumerate(normal)]
    c = kg.tiny_config("llama", n_vocab=len(toks))
    rng = np.random.default_rng(3)
    w = kg.Writer()
    w.scalar("general.architecture", kg.T_STR, "llama")
    w.scalar("general.name", kg.T_STR, "tiny opencl cli llama")
    for key, val in (("context_length", c["n_ctx"]), ("embedding_length", c["n_embd"]), ("block_count", c["n_layer"]),
                     ("feed_forward_length", c["n_ff"]), ("attention.head_count", c["n_head"]),
                     ("attention.head_count_kv", c["n_head_kv"]), ("attention.key_length", c["head_dim"]),
                     ("attention.value_length", c["head_dim"])):
        w.scalar("llama." + key, kg.T_U32, val)
    w.scalar("llama.attention.layer_norm_rms_epsilon", kg.T_F32, c["eps"])
    w.scalar("llama.rope.freq_base", kg.T_F32, c["rope_base"])
    w.scalar("tokenizer.ggml.model", kg.T_STR, "llama")
    w.array("tokenizer.ggml.tokens", kg.T_STR, toks)
    w.array("tokenizer.ggml.token_type", kg.T_I32, types)
    w.array("tokenizer.ggml.scores", kg.T_F32, scores)
    w.scalar("tokenizer.ggml.bos_token_id", kg.T_U32, 1)
    w.scalar("tokenizer.ggml.eos_token_id", kg.T_U32, 2)
    w.scalar("tokenizer.ggml.unknown_token_id", kg.T_U32, 0)
    w.scalar("tokenizer.ggml.add_bos_token", kg.T_BOOL, 1)
    for name, shape in kg.tensor_list(c):
        if name.endswith("norm.weight"):
            x = 1.0 + 0.2 * rng.standard_normal(shape)
        else:
            x = rng.standard_normal(shape) / np.sqrt(shape[-1]) * (3.0 if name == "token_embd.weight" else 1.0)
        if name == "output.weight":
            x[:259] = 0.0  # no control or byte tokens: the text stays printable
        w.tensor_f32(name, kc.F32 if len(shape) == 1 or name == "output.weight" else kc.Q8_0, x.astype(np.float32))
    w.write(path)
    w.free()


def cli_run():
    """kiln run --backend opencl generates text; the same greedy tokens as on the CPU"""
    path = os.path.join(tm.TMP, "cli_llama.gguf")
    write_spm_model(path)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("KILN_BACKEND", None)
    outs = {}
    for be in ("cpu", BACKEND):
        r = subprocess.run([KILN, "run", "--backend", be, "-m", path, "-p", "the cat sat", "-n", "8", "--temp", "0",
                            "--json"], capture_output=True, env=env, timeout=300)
        if r.returncode != 0:
            raise AssertionError("kiln run --backend %s: exit %d: %s" % (be, r.returncode, r.stderr.decode()[-600:]))
        outs[be] = r.stdout.decode()
    import json
    got = {be: json.loads(o) for be, o in outs.items()}
    if len(got["cpu"]["ids"]) != 8:
        raise AssertionError("the CPU run generated %r" % (got["cpu"]["ids"],))
    if got["cpu"]["ids"] != got[BACKEND]["ids"] or got["cpu"]["text"] != got[BACKEND]["text"]:
        raise AssertionError("cpu generated %r, %s %r" % (got["cpu"]["ids"], BACKEND, got[BACKEND]["ids"]))
    if got[BACKEND]["backend"] != BACKEND:
        raise AssertionError("the JSON names backend %r" % got[BACKEND]["backend"])


def cli_bench_names_backend():
    """kiln bench --backend names the backend it ran on, in the table and in --json"""
    path = os.path.join(tm.TMP, "cli_llama.gguf")
    if not os.path.exists(path):
        write_spm_model(path)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("KILN_BACKEND", None)
    label = {"opencl": "OpenCL", "cuda": "CUDA"}[BACKEND]
    for js in (False, True):
        cmd = [KILN, "bench", "--backend", BACKEND, "-m", path, "-p", "4", "-n", "2", "-r", "1", "-t", "1"]
        r = subprocess.run(cmd + (["--json"] if js else []), capture_output=True, env=env, timeout=300)
        if r.returncode != 0:
            raise AssertionError("kiln bench --backend %s: exit %d: %s" % (BACKEND, r.returncode, r.stderr.decode()[-600:]))
        out = r.stdout.decode()
        if js:
            import json
            recs = json.loads(out)
            if len(recs) != 2 or any(x["backend"] != BACKEND for x in recs):
                raise AssertionError("bench --json names %r" % [x.get("backend") for x in recs])
        else:
            import re
            rows = [l for l in out.splitlines() if re.search(r"\|\s+(pp4|tg2)\s+\|", l)]
            if len(rows) != 2 or any("| %s " % label not in l for l in rows) or any("| CPU " in l for l in rows):
                raise AssertionError("bench table rows %r" % rows)


def bad_backend():
    """an unknown backend is a usage error that lists the available ones"""
    r = subprocess.run([KILN, "run", "--backend", "tpu", "-m", "x.gguf", "-p", "hi"], capture_output=True, timeout=60)
    err = r.stderr.decode()
    if r.returncode != 2 or "cpu, opencl, cuda" not in err:
        raise AssertionError("exit %d, stderr %r" % (r.returncode, err))


s = kc.Suite("test_backend_%s_models" % BACKEND)
for arch in ("llama", "qwen2", "qwen3", "gemma3"):
    s.case("%s_%s_greedy_16_equals_interpreter" % (BACKEND, arch), greedy_equals_reference, arch)
s.case("%s_llama_block_formats_greedy_equals_interpreter" % BACKEND, greedy_equals_reference, "llama", quant_dtypes)
s.case("%s_cli_run_generates" % BACKEND, cli_run)
s.case("%s_cli_bench_names_backend" % BACKEND, cli_bench_names_backend)
s.case("%s_cli_unknown_backend" % BACKEND, bad_backend)
s.finish()
