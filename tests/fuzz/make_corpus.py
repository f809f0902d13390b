"""make_corpus.py DIR — seed files for the GGUF fuzz target: tiny random
models of each architecture written by kiln's own writer (and a few cut
short), so the fuzzer starts from valid structure instead of random bytes."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "py"))
import kiln_gguf as kg  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for arch in ("llama", "qwen2", "qwen3", "gemma3"):
    path = os.path.join(out, "seed-%s.gguf" % arch)
    c = kg.tiny_config(arch)
    # small matrices in q8_0 where the row length allows it, f32 elsewhere:
    # both the scalar and the block-format paths of the reader get seeds
    kg.write_random_model(path, c, lambda name, shape: 5 if shape[-1] % 32 == 0 and len(shape) == 2 else 0)
    data = open(path, "rb").read()
    for frac in (0.25, 0.5, 0.9):
        with open(os.path.join(out, "seed-%s-cut%d.gguf" % (arch, int(frac * 100))), "wb") as f:
            f.write(data[: int(len(data) * frac)])
print("corpus:", len(os.listdir(out)), "files in", out)
