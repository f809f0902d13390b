#!/usr/bin/env python3
"""bench/deepen_gguf.py — a GGUF model with its blocks repeated: the same
file with N times the layers, for measuring what grows with depth (issue 27:
the whole-model rewrite time of the default model's 18 layers against a
36-layer variant must differ by < 20%, the block cache's reuse).

Block b of the output is block (b mod L) of the input (L the input's
block_count), so every layer's weights, shapes and formats exist in the
input; `<arch>.block_count` becomes N*L and every other key and tensor is
copied byte for byte. The text it generates means nothing; the compile path
and the kernels are the input's, depth times N.

Reads with kiln's own GGUF reader (the JSON dump) and writes with kiln's own
writer (tests/py/kiln_gguf.py); needs build/libkiln.so (make) or $KILN_LIB.

Usage: python3 bench/deepen_gguf.py IN.gguf OUT.gguf [--times N]   (N default 2)
"""
import argparse
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "py"))

import kiln_gguf as kg  # noqa: E402

SCALAR = {"uint8": kg.T_U8, "int8": kg.T_I8, "uint16": kg.T_U16, "int16": kg.T_I16, "uint32": kg.T_U32,
          "int32": kg.T_I32, "float32": kg.T_F32, "bool": kg.T_BOOL, "string": kg.T_STR, "uint64": kg.T_U64,
          "int64": kg.T_I64, "float64": kg.T_F64}


def value_of(t, v):
    if t == kg.T_STR:
        return kg.jbytes(v)
    if t == kg.T_BOOL:
        return 1 if v else 0
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--times", type=int, default=2)
    a = ap.parse_args()
    if a.times < 1:
        sys.exit("deepen_gguf.py: --times must be >= 1")
    d = kg.dump(a.src)
    if "error" in d:
        sys.exit("deepen_gguf.py: %s: %s" % (a.src, d["error"]))
    meta = {m["key"]: m for m in d["metadata"]}
    arch = meta.get("general.architecture", {}).get("value")
    key = "%s.block_count" % arch
    if key not in meta:
        sys.exit("deepen_gguf.py: %s has no %s" % (a.src, key))
    layers = int(meta[key]["value"])
    w = kg.Writer()
    for m in d["metadata"]:
        if m["type"] == "array":
            elem = SCALAR[m["elem"]]
            w.array(m["key"], elem, [value_of(elem, v) for v in m["value"]])
        else:
            t = SCALAR[m["type"]]
            w.scalar(m["key"], t, layers * a.times if m["key"] == key else value_of(t, m["value"]))
    data = np.memmap(a.src, dtype=np.uint8, mode="r")
    blk = re.compile(r"^blk\.(\d+)\.(.*)$")
    by_name = {t["name"]: t for t in d["tensors"]}
    names = [t["name"] for t in d["tensors"] if not blk.match(t["name"])]
    for b in range(layers * a.times):
        names += ["blk.%d.%s" % (b, blk.match(t["name"]).group(2)) for t in d["tensors"]
                  if blk.match(t["name"]) and int(blk.match(t["name"]).group(1)) == b % layers]
    for n in names:
        g = blk.match(n)
        t = by_name[n if not g else "blk.%d.%s" % (int(g.group(1)) % layers, g.group(2))]
        raw = data[t["file_offset"]:t["file_offset"] + t["bytes"]]
        w.tensor_raw(n, t["ggml_type"], t["shape"], raw)  # both outermost first
    w.write(a.dst)
    print("deepen_gguf.py: wrote %s (%d layers from %d)" % (a.dst, layers * a.times, layers))


if __name__ == "__main__":
    main()
