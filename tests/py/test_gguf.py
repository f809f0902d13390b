"""test_gguf.py — kiln's GGUF reader and writer against the gguf PyPI package:
files written by gguf.GGUFWriter are read by kiln with identical metadata
(keys, types, values, string bytes) and tensor tables (name, type, shape,
data offset, bytes, content hash); files written by kiln's writer are read by
gguf.GGUFReader identically and hold exactly what was written; the real
default model (when present) agrees too.

kiln's side is read through kiln_gguf_dump_json (src/model/gguf.h), whose
strings escape every byte that is not printable ASCII as \\u00XX.
"""
import os
import shutil
import tempfile

import numpy as np
import gguf
from gguf import GGUFReader, GGUFValueType as VT, GGMLQuantizationType as QT

import kiln_ctypes as kc
import kiln_gguf as kg

TMP = tempfile.mkdtemp(prefix="kiln_gguf_")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf")

KILN_TYPE = {VT.UINT8: "uint8", VT.INT8: "int8", VT.UINT16: "uint16", VT.INT16: "int16", VT.UINT32: "uint32",
             VT.INT32: "int32", VT.FLOAT32: "float32", VT.BOOL: "bool", VT.STRING: "string", VT.ARRAY: "array",
             VT.UINT64: "uint64", VT.INT64: "int64", VT.FLOAT64: "float64"}


def fnv1a64(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def same_value(vt, kv, rv, what):
    if vt == VT.FLOAT32:
        ok = np.float32(kv) == np.float32(rv) or (np.isnan(kv) and np.isnan(rv))
    elif vt == VT.FLOAT64:
        ok = float(kv) == float(rv) or (np.isnan(kv) and np.isnan(rv))
    elif vt == VT.BOOL:
        ok = bool(kv) == bool(rv)
    else:
        ok = kv == rv and type(kv) is int
    if not ok:
        raise AssertionError("%s: kiln %r, gguf %r" % (what, kv, rv))


def compare(path, hash_limit=1 << 16):
    """kiln's dump of path equals what gguf.GGUFReader reads; returns both"""
    k = kg.dump(path)
    if "error" in k:
        raise AssertionError("kiln could not read %s: %s" % (path, k["error"]))
    r = GGUFReader(path)
    fields = [f for name, f in r.fields.items() if not name.startswith("GGUF.")]
    if [m["key"] for m in k["metadata"]] != [f.name for f in fields]:
        raise AssertionError("keys differ: kiln %s, gguf %s" % ([m["key"] for m in k["metadata"]][:8],
                                                               [f.name for f in fields][:8]))
    for m, f in zip(k["metadata"], fields):
        key = f.name
        if m["type"] != KILN_TYPE[f.types[0]]:
            raise AssertionError("%s: type %s, gguf %s" % (key, m["type"], f.types[0].name))
        if f.types[0] == VT.ARRAY:
            et = f.types[-1] if len(f.types) > 1 else None
            kvals = m["value"]
            if et is None:  # empty array: the reader keeps no element type
                if kvals:
                    raise AssertionError("%s: kiln has %d elements, gguf none" % (key, len(kvals)))
                continue
            if m["elem"] != KILN_TYPE[et]:
                raise AssertionError("%s: element type %s, gguf %s" % (key, m["elem"], et.name))
            if et == VT.STRING:
                rvals = [bytes(f.parts[i]) for i in f.data]
                if [kg.jbytes(v) for v in kvals] != rvals:
                    raise AssertionError("%s: string array differs" % key)
            else:
                rvals = f.contents()
                if len(kvals) != len(rvals):
                    raise AssertionError("%s: %d elements, gguf %d" % (key, len(kvals), len(rvals)))
                for i, (a, b) in enumerate(zip(kvals, rvals)):
                    same_value(et, a, b, "%s[%d]" % (key, i))
        elif f.types[0] == VT.STRING:
            if kg.jbytes(m["value"]) != bytes(f.parts[-1]):
                raise AssertionError("%s: string %r, gguf %r" % (key, m["value"], bytes(f.parts[-1])))
        else:
            same_value(f.types[0], m["value"], f.contents(), key)
    if len(k["tensors"]) != len(r.tensors):
        raise AssertionError("%d tensors, gguf %d" % (len(k["tensors"]), len(r.tensors)))
    for kt, rt in zip(k["tensors"], r.tensors):
        want = dict(name=rt.name, ggml_type=int(rt.tensor_type), shape=[int(s) for s in reversed(list(rt.shape))],
                    file_offset=int(rt.data_offset), bytes=int(rt.n_bytes), type=rt.tensor_type.name)
        got = {key: kt[key] for key in want}
        if got != want:
            raise AssertionError("tensor %s: kiln %s, gguf %s" % (rt.name, got, want))
        if rt.n_bytes <= hash_limit and kt["fnv1a64"] != fnv1a64(np.asarray(rt.data).tobytes()):
            raise AssertionError("tensor %s: data hash differs" % rt.name)
    return k, r


def _gguf_package_file(path):
    w = gguf.GGUFWriter(path, "llama")
    w.add_key_value("t.u8", 200, VT.UINT8)
    w.add_key_value("t.i8", -5, VT.INT8)
    w.add_key_value("t.u16", 60000, VT.UINT16)
    w.add_key_value("t.i16", -30000, VT.INT16)
    w.add_key_value("t.u32", 4000000000, VT.UINT32)
    w.add_key_value("t.i32", -2000000000, VT.INT32)
    w.add_key_value("t.f32", 3.14159, VT.FLOAT32)
    w.add_key_value("t.bool", True, VT.BOOL)
    w.add_key_value("t.str", "naïve ☃ \"quoted\" \\ tab\t", VT.STRING)
    w.add_key_value("t.u64", 2 ** 64 - 1, VT.UINT64)
    w.add_key_value("t.i64", -2 ** 63, VT.INT64)
    w.add_key_value("t.f64", 1e-300, VT.FLOAT64)
    w.add_key_value("t.f32inf", float("inf"), VT.FLOAT32)
    w.add_key_value("t.ai32", [1, -2, 3], VT.ARRAY, sub_type=VT.INT32)
    w.add_key_value("t.au8", [0, 255, 7], VT.ARRAY, sub_type=VT.UINT8)
    w.add_key_value("t.af32", [0.5, -1e-8, 7e20], VT.ARRAY, sub_type=VT.FLOAT32)
    w.add_key_value("t.af64", [0.1, -0.2], VT.ARRAY, sub_type=VT.FLOAT64)
    w.add_key_value("t.abool", [True, False], VT.ARRAY, sub_type=VT.BOOL)
    w.add_key_value("t.ai64", [-1, 2 ** 40], VT.ARRAY, sub_type=VT.INT64)
    w.add_key_value("t.astr", ["<s>", "", "日本語", "a b"], VT.ARRAY, sub_type=VT.STRING)
    rng = np.random.default_rng(1)
    w.add_tensor("w.f32", rng.standard_normal((2, 3, 32)).astype(np.float32))
    w.add_tensor("w.f16", rng.standard_normal((5, 64)).astype(np.float16))
    q8 = gguf.quants.quantize(rng.standard_normal((4, 64)).astype(np.float32), QT.Q8_0)
    w.add_tensor("w.q8_0", q8, raw_dtype=QT.Q8_0)
    w.add_tensor("w.q4_k", rng.integers(0, 256, (3, 144), dtype=np.uint8), raw_dtype=QT.Q4_K)
    w.add_tensor("w.q6_k", rng.integers(0, 256, (2, 210), dtype=np.uint8), raw_dtype=QT.Q6_K)
    w.add_tensor("w.q5_0", rng.integers(0, 256, (2, 44), dtype=np.uint8), raw_dtype=QT.Q5_0)
    w.add_tensor("w.bf16", rng.integers(0, 65536, (3, 8), dtype=np.uint16).view(np.uint8), raw_dtype=QT.BF16)
    w.add_tensor("w.i32", np.arange(7, dtype=np.int32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_package_file_read_by_kiln():
    path = os.path.join(TMP, "from_gguf.gguf")
    _gguf_package_file(path)
    k, _ = compare(path)
    dt = {t["name"]: t["dtype"] for t in k["tensors"]}
    want = {"w.f32": "f32", "w.f16": "f16", "w.q8_0": "q8_0", "w.q4_k": "q4_k", "w.q6_k": "q6_k", "w.q5_0": "q5_0",
            "w.bf16": "bf16", "w.i32": "i32"}
    if dt != want:
        raise AssertionError("kiln dtypes %s" % dt)
    if k["version"] != 3 or k["alignment"] != 32:
        raise AssertionError("version %s alignment %s" % (k["version"], k["alignment"]))


def unsupported_type_message():
    path = os.path.join(TMP, "q5_1.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_tensor("blk.3.ffn_up.weight", np.zeros((2, 24), dtype=np.uint8), raw_dtype=QT.Q5_1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    strict = kg.dump(path, 0)
    want = kc.load().kiln_status_name(kc.ERR_UNSUPPORTED).decode()
    if "error" not in strict or strict.get("status") != want:
        raise AssertionError("strict open: %s (want status %s)" % (strict, want))
    if "Q5_1" not in strict["error"] or "blk.3.ffn_up.weight" not in strict["error"]:
        raise AssertionError("message: %s" % strict["error"])
    k, _ = compare(path)  # listed when allowed
    if k["tensors"][0]["dtype"] is not None:
        raise AssertionError("Q5_1 has a kiln dtype?")


def kiln_file_read_by_gguf():
    path = os.path.join(TMP, "from_kiln.gguf")
    w = kg.Writer()
    w.scalar("general.architecture", kg.T_STR, "llama")
    vals = [("k.u8", kg.T_U8, 255), ("k.i8", kg.T_I8, -128), ("k.u16", kg.T_U16, 65535), ("k.i16", kg.T_I16, -1),
            ("k.u32", kg.T_U32, 2 ** 32 - 1), ("k.i32", kg.T_I32, -2 ** 31), ("k.f32", kg.T_F32, -0.1),
            ("k.bool", kg.T_BOOL, 0), ("k.u64", kg.T_U64, 2 ** 63 + 5), ("k.i64", kg.T_I64, -2 ** 50),
            ("k.f64", kg.T_F64, 2.0 / 3.0)]
    for key, t, v in vals:
        w.scalar(key, t, v)
    w.scalar("k.str", kg.T_STR, "ünïcode \x01 ctl".encode("utf-8"))
    w.array("k.ai16", kg.T_I16, [-3, 0, 3])
    w.array("k.af32", kg.T_F32, [1.5, 2.25])
    w.array("k.af64", kg.T_F64, [1e300, -5e-324])
    w.array("k.astr", kg.T_STR, ["a", "", "ß∂"])
    rng = np.random.default_rng(5)
    data = {"t.f32": (kc.F32, rng.standard_normal((3, 5, 7))), "t.f16": (kc.F16, rng.standard_normal((4, 32))),
            "t.q8_0": (kc.Q8_0, rng.standard_normal((2, 64))), "t.q4_0": (kc.Q4_0, rng.standard_normal((2, 32))),
            "t.q5_0": (kc.Q5_0, rng.standard_normal((1, 64))), "t.q4_k": (kc.Q4_K, rng.standard_normal((2, 256))),
            "t.q6_k": (kc.Q6_K, rng.standard_normal((1, 256))), "t.bf16": (kc.BF16, rng.standard_normal((16,)))}
    for name, (dt, v) in data.items():
        w.tensor_f32(name, dt, v.astype(np.float32))
    w.write(path)
    w.free()
    _, r = compare(path)
    f = r.fields
    for key, t, v in vals:
        got = f[key].contents()
        if t == kg.T_F32:
            ok = np.float32(got) == np.float32(v)
        else:
            ok = got == v
        if not ok:
            raise AssertionError("%s: gguf reads %r, wrote %r" % (key, got, v))
    if bytes(f["k.str"].parts[-1]) != "ünïcode \x01 ctl".encode("utf-8"):
        raise AssertionError("string bytes differ")
    if f["k.ai16"].contents() != [-3, 0, 3] or f["k.astr"].contents() != ["a", "", "ß∂"]:
        raise AssertionError("arrays differ")
    if f["k.af64"].contents() != [1e300, -5e-324]:
        raise AssertionError("f64 array differs: %s" % f["k.af64"].contents())
    for t in r.tensors:
        dt, v = data[t.name]
        got = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(v.shape)
        v32 = v.astype(np.float32).astype(np.float64)
        if dt == kc.F32:
            if not np.array_equal(got, v32):
                raise AssertionError("%s: f32 data differs" % t.name)
        elif dt == kc.F16:
            if not np.array_equal(got, v.astype(np.float16).astype(np.float64)):
                raise AssertionError("%s: f16 data differs" % t.name)
        else:
            # block formats: the gguf package's own quantiser where it has one gives the same bytes
            if dt in (kc.Q8_0, kc.Q4_0, kc.Q5_0):
                want = gguf.quants.quantize(v.astype(np.float32), t.tensor_type)
                if not np.array_equal(np.asarray(t.data).reshape(-1), want.reshape(-1)):
                    raise AssertionError("%s: bytes differ from gguf.quants.quantize" % t.name)
            err = np.abs(got - v32).max() / np.abs(v32).max()
            if err > {kc.BF16: 0.01, kc.Q8_0: 0.01}.get(dt, 0.2):
                raise AssertionError("%s: dequantised error %g" % (t.name, err))


def truncated_and_flipped_files():
    """gguf-package files, truncated or with flipped bytes, give kiln errors (or
    a valid read), never a crash (this case runs in a child process)"""
    path = os.path.join(TMP, "from_gguf2.gguf")
    _gguf_package_file(path)
    raw = open(path, "rb").read()
    # the end of the last tensor's data: cutting only trailing padding leaves a valid file
    end = max(int(t.data_offset) + int(t.n_bytes) for t in GGUFReader(path).tensors)
    rng = np.random.default_rng(9)
    bad = os.path.join(TMP, "bad.gguf")
    cuts = sorted(set([0, 1, 4, 8, 23, 24, end - 1] + list(rng.integers(0, end, 60))))
    for n in cuts:
        with open(bad, "wb") as fh:
            fh.write(raw[:n])
        k = kg.dump(bad)
        if "error" not in k:
            raise AssertionError("truncated to %d of %d bytes: no error" % (n, end))
    errors = 0
    for i in range(200):
        b = bytearray(raw)
        for _ in range(1 + i % 3):
            j = int(rng.integers(0, 700))
            b[j] ^= 1 << int(rng.integers(0, 8))
        with open(bad, "wb") as fh:
            fh.write(b)
        k = kg.dump(bad)
        errors += "error" in k
    if errors < 20:
        raise AssertionError("only %d of 200 corrupted headers were rejected" % errors)


def default_model_agrees():
    if not os.path.exists(DEFAULT_MODEL):
        raise AssertionError("default model missing at %s (make run installs it)" % DEFAULT_MODEL)
    k, r = compare(DEFAULT_MODEL, hash_limit=4096)
    for read in (0, kg.OPEN_READ):
        if kg.dump(DEFAULT_MODEL, read)["tensors"][5]["fnv1a64"] != k["tensors"][5]["fnv1a64"]:
            raise AssertionError("mapped and read-into-memory views differ")


def main():
    s = kc.Suite("test_gguf")
    s.case("gguf_package_file_read_by_kiln", gguf_package_file_read_by_kiln, isolate=True)
    s.case("kiln_file_read_by_gguf_package", kiln_file_read_by_gguf, isolate=True)
    s.case("unsupported_tensor_type_message", unsupported_type_message, isolate=True)
    s.case("truncated_and_flipped_files", truncated_and_flipped_files, isolate=True)
    if os.path.exists(DEFAULT_MODEL) or os.environ.get("KILN_REQUIRE_DEFAULT_MODEL"):
        s.case("default_model_agrees_with_gguf_package", default_model_agrees, isolate=True)
    shutil.rmtree(TMP, ignore_errors=True)
    s.finish()


if __name__ == "__main__":
    main()
