"""test_quant.py — kiln's element types and GGUF block formats against the
`gguf` package's numpy reference (gguf.quants), bit for bit.

Calls kiln's C functions through ctypes from KILN_LIB (default
build/libkiln.so): kiln_dequantize / kiln_quantize, kiln_f32_to_f16 / kiln_f32_to_bf16
and kiln_dtype_bytes (the public include/kiln.h).

Cases:
  - decoding random blocks of q8_0, q4_0, q4_k, q6_k (sane f16 scales, and
    fully random bytes including inf/NaN/subnormal scales) is bit-identical
  - encoding f32 to q8_0 / q4_0 gives the reference's bytes (random data of
    several sizes and scales, exact ties, clamp cases, zero/constant blocks)
  - kiln's own q4_k / q6_k encodings decode identically in both, with a small
    error
  - f16 and bf16 conversions agree with numpy's float16 and gguf's BF16
Prints "PASS name" / "FAIL name: why" per case; exits non-zero on failure.
"""
import ctypes
import os
import re
import sys

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QT
    from gguf import quants as gq
except ImportError as e:  # the reference is required: say so as a failure
    print(f"FAIL import_gguf: {e} (pip install gguf numpy)")
    sys.exit(1)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.environ.get("KILN_LIB", os.path.join(ROOT, "build", "libkiln.so"))

failures = 0


def report(name, ok, why=""):
    global failures
    if ok:
        print(f"PASS {name}")
    else:
        failures += 1
        print(f"FAIL {name}: {why}")
    sys.stdout.flush()


def dtype_enum():
    """kiln_dtype values, read from include/kiln.h so the test follows the header."""
    text = open(os.path.join(ROOT, "include", "kiln.h")).read()
    body = re.search(r"typedef enum kiln_dtype \{(.*?)\} kiln_dtype;", text, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    names = [n.strip() for n in body.split(",") if n.strip()]
    values, v = {}, 0
    for n in names:
        if "=" in n:
            n, val = [p.strip() for p in n.split("=")]
            v = int(val)
        values[n] = v
        v += 1
    return values


try:
    lib = ctypes.CDLL(LIB)
except OSError as e:
    print(f"FAIL load_library: {e}")
    sys.exit(1)

DT = dtype_enum()
FMT = {  # name -> (kiln dtype, gguf type, block elements, block bytes)
    "q8_0": (DT["KILN_Q8_0"], QT.Q8_0, 32, 34),
    "q4_0": (DT["KILN_Q4_0"], QT.Q4_0, 32, 18),
    "q4_k": (DT["KILN_Q4_K"], QT.Q4_K, 256, 144),
    "q6_k": (DT["KILN_Q6_K"], QT.Q6_K, 256, 210),
    "q5_0": (DT["KILN_Q5_0"], QT.Q5_0, 32, 22),
}
# offsets of the f16 scale fields inside each block
F16_FIELDS = {"q8_0": [0], "q4_0": [0], "q4_k": [0, 2], "q6_k": [208], "q5_0": [0]}

lib.kiln_dequantize.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
lib.kiln_dequantize.restype = ctypes.c_int
lib.kiln_quantize.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
lib.kiln_quantize.restype = ctypes.c_int
lib.kiln_dtype_bytes.argtypes = [ctypes.c_int, ctypes.c_int64]
lib.kiln_dtype_bytes.restype = ctypes.c_size_t
lib.kiln_f32_to_f16.argtypes = [ctypes.c_float]
lib.kiln_f32_to_f16.restype = ctypes.c_uint16
lib.kiln_f32_to_bf16.argtypes = [ctypes.c_float]
lib.kiln_f32_to_bf16.restype = ctypes.c_uint16


def kiln_dequant(fmt, data):
    t, _, blk, nb = FMT[fmt]
    data = np.ascontiguousarray(data, dtype=np.uint8)
    n = data.size // nb * blk
    out = np.empty(n, dtype=np.float32)
    lib.kiln_dequantize(t, data.ctypes.data, out.ctypes.data, n)
    return out


def kiln_quant(fmt, x):
    t, _, blk, nb = FMT[fmt]
    x = np.ascontiguousarray(x, dtype=np.float32).ravel()
    out = np.zeros(x.size // blk * nb, dtype=np.uint8)
    rc = lib.kiln_quantize(t, x.ctypes.data, out.ctypes.data, x.size)
    if rc != 0:
        raise RuntimeError(f"kiln_quantize({fmt}) returned {rc}")
    return out


def ref_dequant(fmt, data):
    nb = FMT[fmt][3]
    return gq.dequantize(data.reshape(-1, nb), FMT[fmt][1]).ravel().astype(np.float32)


def ref_quant(fmt, x):
    blk = FMT[fmt][2]
    return gq.quantize(np.asarray(x, dtype=np.float32).reshape(-1, blk), FMT[fmt][1]).ravel()


def bits_equal(a, b):
    """same float32 values bit for bit; any NaN matches any NaN"""
    if a.shape != b.shape:
        return False, f"shapes {a.shape} vs {b.shape}"
    na, nb_ = np.isnan(a), np.isnan(b)
    if not np.array_equal(na, nb_):
        i = int(np.argmax(na != nb_))
        return False, f"NaN mismatch at {i}: {a[i]} vs {b[i]}"
    ua, ub = a.view(np.uint32), b.view(np.uint32)
    diff = (ua != ub) & ~na
    if diff.any():
        i = int(np.argmax(diff))
        return False, f"{int(diff.sum())} differ, first at {i}: kiln {a[i]!r} ref {b[i]!r}"
    return True, ""


def random_blocks(fmt, nblocks, rng, scale_exp=(-12, 4)):
    """random bytes with every f16 scale field set to a finite, sane value"""
    nb = FMT[fmt][3]
    data = rng.integers(0, 256, size=(nblocks, nb), dtype=np.uint8)
    for off in F16_FIELDS[fmt]:
        mant = rng.uniform(1.0, 2.0, size=nblocks) * rng.choice([-1.0, 1.0], size=nblocks)
        s = (mant * np.exp2(rng.integers(*scale_exp, size=nblocks))).astype(np.float16)
        data[:, off:off + 2] = s.view(np.uint8).reshape(nblocks, 2)
    return data.ravel()


def case(name, fn):
    try:
        ok, why = fn()
    except Exception as e:  # a crash in one case must not hide the others
        ok, why = False, f"{type(e).__name__}: {e}"
    report(name, ok, why)


rng = np.random.default_rng(20240611)

# ---- decoding ---------------------------------------------------------------
for fmt in FMT:
    case(f"dequant_{fmt}_random_blocks_bit_exact",
         lambda fmt=fmt: bits_equal(kiln_dequant(fmt, d := random_blocks(fmt, 300, rng)), ref_dequant(fmt, d)))


def raw_bytes_all():
    # fully random bytes: scales may be inf, NaN, subnormal or zero
    for fmt in FMT:
        d = rng.integers(0, 256, size=400 * FMT[fmt][3], dtype=np.uint8)
        for off in F16_FIELDS[fmt]:  # force some special scales in every run
            specials = np.array([0x7c00, 0xfc00, 0x7e00, 0x0001, 0x8000, 0x03ff], dtype=np.uint16)
            blocks = d.reshape(400, FMT[fmt][3])
            blocks[:len(specials), off:off + 2] = specials.view(np.uint8).reshape(-1, 2)
        with np.errstate(all="ignore"):
            ok, why = bits_equal(kiln_dequant(fmt, d), ref_dequant(fmt, d))
        if not ok:
            return False, f"{fmt}: {why}"
    return True, ""


case("dequant_all_formats_raw_bytes_special_scales", raw_bytes_all)

# ---- q8_0 / q4_0 encoders: identical bytes ------------------------------------


def same_bytes(fmt, x):
    k, r = kiln_quant(fmt, x), ref_quant(fmt, x)
    if k.shape != r.shape:
        return False, f"sizes {k.shape} vs {r.shape}"
    if not np.array_equal(k, r):
        i = int(np.argmax(k != r))
        nb = FMT[fmt][3]
        return False, f"{int((k != r).sum())} bytes differ, first at byte {i} (block {i // nb}, offset {i % nb})"
    return True, ""


def random_values(n, rng, spread=True):
    x = rng.standard_normal(n).astype(np.float32)
    if spread:  # each block a different magnitude, from tiny to large
        blocks = n // 32
        x = (x.reshape(blocks, 32) * np.exp2(rng.integers(-20, 12, size=(blocks, 1)))).ravel()
    return x.astype(np.float32)


def tie_values(fmt, blocks, rng):
    """blocks where x/d lands exactly on the format's rounding boundaries"""
    k = np.exp2(rng.integers(-10, 6, size=(blocks, 1))).astype(np.float32)
    if fmt == "q8_0":
        # amax = 127*k gives d = k exactly; x = (n + 0.5)*k are exact ties
        n = rng.integers(-127, 127, size=(blocks, 32)).astype(np.float32) + np.float32(0.5)
        x = n * k
        x[:, 7] = np.where(rng.random(blocks) < 0.5, 127, -127)[:] * k[:, 0]
    else:
        # signed max -8k (or +8k) gives d = -+k; x*id + 8.5 lands on integers,
        # and +-8k on the other side hits the clamp at 16
        sign = np.where(rng.random((blocks, 1)) < 0.5, -1.0, 1.0).astype(np.float32)
        n = rng.integers(-16, 16, size=(blocks, 32)).astype(np.float32) * np.float32(0.5)
        x = n * k
        x[:, 0] = -8 * sign[:, 0] * k[:, 0]
        x[:, 1:][np.abs(x[:, 1:]) >= 8 * k] = 0
        x[:, 5] = 8 * sign[:, 0] * k[:, 0]  # equal magnitude, later: must not win
    return x.astype(np.float32).ravel()


def special_blocks():
    rows = [np.zeros(32), np.full(32, 3.25), np.full(32, -1e-3), np.linspace(-1, 1, 32),
            np.linspace(5, -7, 32), np.r_[np.full(31, 1e-8), 100.0], np.full(32, 6.0e4),
            np.r_[-2.0, np.full(31, 2.0)], np.r_[np.full(16, 1e-30), np.full(16, -1e-30)]]
    return np.concatenate(rows).astype(np.float32)


for fmt in ("q8_0", "q4_0", "q5_0"):
    for nblocks in (1, 7, 256):
        case(f"quant_{fmt}_random_{nblocks}_blocks_same_bytes",
             lambda fmt=fmt, nb=nblocks: same_bytes(fmt, random_values(32 * nb, rng)))
    case(f"quant_{fmt}_uniform_2d_same_bytes",
         lambda fmt=fmt: same_bytes(fmt, rng.uniform(-1, 1, size=(64, 128)).astype(np.float32)))
    case(f"quant_{fmt}_exact_ties_same_bytes", lambda fmt=fmt: same_bytes(fmt, tie_values(fmt, 200, rng)))
    case(f"quant_{fmt}_special_blocks_same_bytes", lambda fmt=fmt: same_bytes(fmt, special_blocks()))

# ---- q4_k / q6_k: kiln's encoder, decoded by the reference --------------------


def k_roundtrip(fmt):
    blocks = 64
    x = rng.standard_normal((blocks, 256)).astype(np.float32)
    x *= np.exp2(rng.integers(-8, 8, size=(blocks, 1))).astype(np.float32)
    x[::4] += np.float32(1.5) * np.abs(x[::4]).max(axis=1, keepdims=True)  # one-sided blocks
    x[3] = 0.0                                                              # all-zero block
    x[5] = np.float32(-0.75)                                                # constant block
    x = x.ravel()
    q = kiln_quant(fmt, x)
    ok, why = bits_equal(kiln_dequant(fmt, q), ref_dequant(fmt, q))
    if not ok:
        return False, "decoders disagree on kiln's encoding: " + why
    y = ref_dequant(fmt, q)
    rel_rms = float(np.sqrt(np.mean((x - y) ** 2) / np.mean(x ** 2)))
    if fmt == "q4_k":
        # asymmetric 4-bit: each 32-slice spans [min(lo, 0), max(hi, 0)] in 15 steps;
        # half a step plus the rounding of the 6-bit scale and min
        xs, ys = x.reshape(-1, 32), y.reshape(-1, 32)
        step = (np.maximum(xs.max(axis=1), 0) - np.minimum(xs.min(axis=1), 0)) / 15
        d = np.abs(q.reshape(blocks, 144)[:, 0:4].copy().view(np.float16).astype(np.float32)).max(axis=1)
        slack = np.repeat(d, 8) * 40  # a constant block: only dmin*m's rounding
        bound, rms_bound = step + slack, 0.08
    else:
        # symmetric 6-bit: each 16-group's step is about max|x|/32; the 8-bit group
        # scale may be off by 1.5 units of the f16 super-scale d (nearest +-1)
        xs, ys = x.reshape(-1, 16), y.reshape(-1, 16)
        d = np.abs(q.reshape(blocks, 210)[:, 208:210].copy().view(np.float16).astype(np.float32)).ravel()
        bound = np.abs(xs).max(axis=1) / 32 + 50 * np.repeat(d, 16) + 1e-30
        rms_bound = 0.02
    err = np.abs(xs - ys).max(axis=1)
    if not np.all(err <= bound):
        i = int(np.argmax(err - bound))
        return False, f"group {i}: max error {err[i]:.4g} > bound {bound[i]:.4g}"
    if rel_rms > rms_bound:
        return False, f"relative rms error {rel_rms:.4f} > {rms_bound}"
    if not (np.all(y.reshape(blocks, 256)[3] == 0) and np.allclose(y.reshape(blocks, 256)[5], -0.75, rtol=0, atol=1e-3)):
        return False, "zero/constant block not reproduced"
    print(f"  {fmt}: relative rms error {rel_rms:.4f}")
    return True, ""


case("quant_q4_k_kiln_encoder_reference_decodes", lambda: k_roundtrip("q4_k"))
case("quant_q6_k_kiln_encoder_reference_decodes", lambda: k_roundtrip("q6_k"))

# ---- scalar conversions ---------------------------------------------------------


def f16_decode_all():
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    out = np.empty(65536, dtype=np.float32)
    lib.kiln_dequantize(DT["KILN_F16"], h.ctypes.data, out.ctypes.data, 65536)
    return bits_equal(out, h.view(np.float16).astype(np.float32))


def bf16_decode_all():
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    out = np.empty(65536, dtype=np.float32)
    lib.kiln_dequantize(DT["KILN_BF16"], h.ctypes.data, out.ctypes.data, 65536)
    return bits_equal(out, gq.dequantize(h.view(np.uint8), QT.BF16).ravel())


def random_f32_patterns(n):
    u = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
    # bias half of them into f16's interesting range (subnormals up to overflow)
    e = rng.integers(127 - 26, 127 + 17, size=n // 2).astype(np.uint32)
    u[: n // 2] = (u[: n // 2] & np.uint32(0x807fffff)) | (e << np.uint32(23))
    f = u.view(np.float32)
    return f[~np.isnan(f)]  # NaN payloads do not survive ctypes' float<->double trip


def f16_encode_random():
    f = random_f32_patterns(200000)
    k = np.array([lib.kiln_f32_to_f16(float(v)) for v in f], dtype=np.uint16)
    with np.errstate(over="ignore"):
        r = f.astype(np.float16).view(np.uint16)
    if not np.array_equal(k, r):
        i = int(np.argmax(k != r))
        return False, f"{int((k != r).sum())} differ; {f[i]!r}: kiln 0x{k[i]:04x} numpy 0x{r[i]:04x}"
    nan = lib.kiln_f32_to_f16(float("nan"))
    return ((nan & 0x7c00) == 0x7c00 and (nan & 0x3ff) != 0), "NaN not kept"


def bf16_encode_random():
    f = random_f32_patterns(200000)
    k = np.array([lib.kiln_f32_to_bf16(float(v)) for v in f], dtype=np.uint16)
    r = gq.quantize(f, QT.BF16).view(np.uint16).ravel()
    if not np.array_equal(k, r):
        i = int(np.argmax(k != r))
        return False, f"{int((k != r).sum())} differ; {f[i]!r}: kiln 0x{k[i]:04x} gguf 0x{r[i]:04x}"
    return True, ""


def sizes_match_gguf():
    for fmt, (t, qt, blk, nb) in FMT.items():
        ref_blk, ref_nb = gguf.GGML_QUANT_SIZES[qt]
        if (ref_blk, ref_nb) != (blk, nb):
            return False, f"{fmt}: gguf says {(ref_blk, ref_nb)}"
        for n in (blk, 5 * blk):
            if lib.kiln_dtype_bytes(t, n) != n // ref_blk * ref_nb:
                return False, f"{fmt}: kiln_dtype_bytes({n}) = {lib.kiln_dtype_bytes(t, n)}"
        if lib.kiln_dtype_bytes(t, blk + 1) != 0:
            return False, f"{fmt}: partial block not rejected"
    return True, ""


case("f16_decode_all_65536_matches_numpy", f16_decode_all)
case("bf16_decode_all_65536_matches_gguf", bf16_decode_all)
case("f16_encode_200k_random_matches_numpy", f16_encode_random)
case("bf16_encode_200k_random_matches_gguf", bf16_encode_random)
case("block_sizes_match_gguf", sizes_match_gguf)

sys.exit(1 if failures else 0)
