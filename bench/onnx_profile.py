"""onnx_profile.py — where kiln's second thread goes on an ONNX model: the
model compiled once per thread count (-t 1,2), every program's per-kernel
times collected (the profiler, kiln_program_kernel_times) over interleaved
rounds (one run of each program in turn, so load drifts hit all alike),
then per kernel and per kernel class: ms at each thread count, the speed-up,
and the time lost against a perfect split (t_n - t_1 / n).

Kernel classes come from the program's kernel listing (kiln explain
--kernels): a contraction fed by a pack (a KxK convolution), another
contraction (a 1x1 convolution, a Gemm), a pack, Relu (MAX over a stacked
pair: bias + Relu after a contraction), other MAX/SUM reductions (pools),
and maps (elementwise, concatenation copies). The launches' count is also
printed; fork/join costs show up inside each kernel's time.

    KILN_LIB=build/libkiln.so python bench/onnx_profile.py MODEL.onnx [-t 1,2] [-r 20] [--budget 0] [--rows 25]

The same kernels must come out at each thread count (they do: kernelize does
not look at threads); the script checks the listings agree.
"""
import argparse
import ctypes
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "onnx"))
import numpy as np  # noqa: E402

import kiln_onnx_run as kr  # noqa: E402


def feeds_of(m):
    rng = np.random.default_rng(0)
    feeds = {}
    for name, kt, dims in m.inputs:
        shape = [s if s > 0 else 1 for s, _ in dims]
        feeds[name] = rng.random(shape, np.float32) if kt == kr.F32 else np.zeros(shape, np.int32)
    return feeds


def classify(listing):
    """kernel index -> (class, short description) from a kernel listing"""
    out = {}
    blocks = re.split(r"\n(?=kernel \d+: )", listing)
    pack_bufs = set()
    for b in blocks:
        h = re.match(r"kernel (\d+): (\w+)\s*(.*)", b)
        if not h:
            continue
        k, kind, rest = int(h.group(1)), h.group(2), h.group(3)
        ob = re.search(r"out: (b\d+)", b)
        loops = [int(x) for x in re.findall(r"for i\d+ in \[0, (\d+)\)", b)]
        rr = re.search(r"for r in \[0, (\d+)\)", b)
        pts = int(np.prod(loops)) if loops else 1
        c = re.search(r"contraction \S+: A (b\d+) \(\w+\), B (b\d+)", b)
        if kind == "map" and rest.startswith("pack"):
            cls = "pack"
            if ob:
                pack_bufs.add(ob.group(1))
        elif c:
            cls = "conv KxK (packed)" if c.group(2) in pack_bufs else "conv 1x1 / gemm"
        elif kind == "reduce" and "MAX" in rest and rr and rr.group(1) == "2":
            cls = "relu (max of pair)"
        elif kind == "reduce" and "MAX" in rest:
            cls = "max pool / max"
        elif kind == "reduce":
            cls = "sum (pool, norm)"
        else:
            cls = "map (eltwise, concat)"
        desc = "%s %s" % (kind, rest[:30])
        if c:
            mm = re.search(r"m = i(\d), n = i(\d)", b)
            dims = [int(x) for x in re.findall(r"for i\d+ in \[0, (\d+)\)", b)]
            if mm and len(dims) > max(int(mm.group(1)), int(mm.group(2))):
                desc = "contract m=%d n=%d k=%s" % (dims[int(mm.group(1))], dims[int(mm.group(2))],
                                                    rr.group(1) if rr else "?")
        out[k] = (cls, "%s pts=%d" % (desc, pts) if not c else desc)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-t", default="1,2")
    ap.add_argument("-r", type=int, default=20, help="interleaved rounds (one run of each program per round)")
    ap.add_argument("--budget", type=float, default=0.0, help="first-run search seconds per program (0: none)")
    ap.add_argument("--rows", type=int, default=25)
    a = ap.parse_args()
    L = kr.lib()
    L.kiln_program_kernel_times.restype = ctypes.c_int
    L.kiln_program_kernel_times.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double), ctypes.c_int]
    L.kiln_program_profile_reset.argtypes = [ctypes.c_void_p]
    L.kiln_program_profile_on.argtypes = [ctypes.c_void_p, ctypes.c_int]
    has_ms = hasattr(L, "kiln_program_msplit_launches")
    if has_ms:
        L.kiln_program_msplit_launches.restype = ctypes.c_longlong
        L.kiln_program_msplit_launches.argtypes = [ctypes.c_void_p]
    threads = [int(x) for x in a.t.split(",")]
    models, listing = [], None
    for t in threads:
        m = kr.Model(path=a.model)
        feeds = feeds_of(m)
        m.compiled(feeds, t, f32=False)
        if a.budget > 0:
            m.search(a.budget)
        lst = m.kernels()
        if listing is None:
            listing = lst
        elif len(re.findall(r"\nkernel \d+:", lst)) != len(re.findall(r"\nkernel \d+:", listing)):
            sys.exit("onnx_profile: the kernel count differs between thread counts")
        L.kiln_program_profile_on(m.prog, 1)
        for _ in range(3):
            m.run_again()
        L.kiln_program_profile_reset(m.prog)
        models.append(m)
    ms0 = [L.kiln_program_msplit_launches(m.prog) if has_ms else 0 for m in models]
    for _ in range(a.r):
        for m in models:
            m.run_again()
    nk = 1 << 16
    times = []
    for m in models:
        buf = (ctypes.c_double * nk)()
        n = L.kiln_program_kernel_times(m.prog, buf, nk)
        times.append(np.array(buf[:n]) / a.r * 1e3)
    cls = classify(listing)
    n = len(times[0])
    t1 = times[0]
    print("model %s, %d kernels, %d rounds; CPU %s" % (os.path.basename(a.model), n, a.r, cpu()))
    hdr = "| kernel | class | what | " + " | ".join("ms t=%d" % t for t in threads) + " | " + \
          " | ".join("x t=%d" % t for t in threads[1:]) + " | " + " | ".join("lost t=%d" % t for t in threads[1:]) + " |"
    print(hdr)
    print("|" + "---|" * (3 + len(threads) + 2 * (len(threads) - 1)))
    lost = lambda j, k: times[j][k] - t1[k] / threads[j] * threads[0]  # noqa: E731
    order = sorted(range(n), key=lambda k: -max(lost(j, k) for j in range(1, len(threads))) if len(threads) > 1 else -t1[k])
    for k in order[:a.rows]:
        c, d = cls.get(k, ("?", "?"))
        print("| %d | %s | %s | %s | %s | %s |" % (
            k, c, d, " | ".join("%.3f" % times[j][k] for j in range(len(threads))),
            " | ".join("%.2f" % (t1[k] / times[j][k] if times[j][k] > 0 else 0) for j in range(1, len(threads))),
            " | ".join("%.3f" % lost(j, k) for j in range(1, len(threads)))))
    print()
    print("| class | kernels | " + " | ".join("ms t=%d" % t for t in threads) + " | " +
          " | ".join("x t=%d" % t for t in threads[1:]) + " | " + " | ".join("lost t=%d" % t for t in threads[1:]) + " |")
    print("|" + "---|" * (2 + len(threads) + 2 * (len(threads) - 1)))
    groups = {}
    for k in range(n):
        groups.setdefault(cls.get(k, ("?",))[0], []).append(k)
    for g, ks in sorted(groups.items(), key=lambda kv: -sum(t1[k] for k in kv[1])):
        s = [sum(times[j][k] for k in ks) for j in range(len(threads))]
        print("| %s | %d | %s | %s | %s |" % (
            g, len(ks), " | ".join("%.3f" % x for x in s),
            " | ".join("%.2f" % (s[0] / s[j] if s[j] else 0) for j in range(1, len(threads))),
            " | ".join("%.3f" % (s[j] - s[0] / threads[j] * threads[0]) for j in range(1, len(threads)))))
    tot = [float(x.sum()) for x in times]
    print("| all | %d | %s | %s | %s |" % (n, " | ".join("%.3f" % x for x in tot),
                                           " | ".join("%.2f" % (tot[0] / tot[j]) for j in range(1, len(threads))),
                                           " | ".join("%.3f" % (tot[j] - tot[0] / threads[j] * threads[0])
                                                      for j in range(1, len(threads)))))
    if has_ms:
        print("contraction launches split along M per run: " + ", ".join(
            "t=%d %.1f" % (t, (L.kiln_program_msplit_launches(m.prog) - m0) / a.r)
            for t, m, m0 in zip(threads, models, ms0)))
    for m in models:
        m.close()


def cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


if __name__ == "__main__":
    main()
