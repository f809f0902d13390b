"""onnx_ab.py — two builds of libkiln on one ONNX model in one process, runs
interleaved (one run of A, one of B, repeated), so that load drifts on a
shared machine hit both alike: per-run wall time and process CPU time
(medians; at one thread the CPU time does not count the time the thread
waited for a core, so it holds under load) and per kernel
class the profiler's time (kernel classes as in onnx_profile.py), for each
build and each thread count, and B's speed-up over A.

Each library is loaded under its own ctypes handle (dlopen RTLD_LOCAL, so
two copies of kiln's symbols coexist) through its own copy of
tests/onnx/kiln_onnx_run.py. Generated kernels are cached by their source's
hash, so each build compiles only what it emits differently.

    python bench/onnx_ab.py A/libkiln.so B/libkiln.so MODEL.onnx [-t 1,2] [-r 20] [--budget 0]

Copy A's library out of a build folder first if that folder will be
rebuilt (the file is replaced in place).
"""
import argparse
import ctypes
import importlib.util
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(os.path.dirname(HERE), "tests", "onnx", "kiln_onnx_run.py")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(RUNNER))
import numpy as np  # noqa: E402

import onnx_profile as op  # noqa: E402


def runner_for(libpath, tag):
    """a private copy of kiln_onnx_run bound to libpath"""
    spec = importlib.util.spec_from_file_location("kiln_onnx_run_" + tag, RUNNER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.LIB_PATH = os.path.abspath(libpath)
    L = mod.lib()
    L.kiln_program_kernel_times.restype = ctypes.c_int
    L.kiln_program_kernel_times.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double), ctypes.c_int]
    L.kiln_program_profile_reset.argtypes = [ctypes.c_void_p]
    L.kiln_program_profile_on.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib_a")
    ap.add_argument("lib_b")
    ap.add_argument("model")
    ap.add_argument("-t", default="1")
    ap.add_argument("-r", type=int, default=20)
    ap.add_argument("--budget", type=float, default=0.0)
    a = ap.parse_args()
    threads = [int(x) for x in a.t.split(",")]
    mods = [runner_for(a.lib_a, "a"), runner_for(a.lib_b, "b")]
    progs = []  # (side, threads, model, listing, walls)
    outs = {}
    for t in threads:
        for side, kr in zip("AB", mods):
            m = kr.Model(path=a.model)
            feeds = op.feeds_of(m)
            out = m.compiled(feeds, t, f32=False)
            if a.budget > 0:
                m.search(a.budget)
            outs[(side, t)] = out
            L = kr.lib()
            L.kiln_program_profile_on(m.prog, 1)
            for _ in range(3):
                m.run_again()
            L.kiln_program_profile_reset(m.prog)
            progs.append((side, t, m, kr, m.kernels(), []))
    for _ in range(a.r):
        for side, t, m, kr, _lst, walls in progs:
            t0, c0 = time.perf_counter(), time.process_time()
            m.run_again()
            walls.append((time.perf_counter() - t0, time.process_time() - c0))
    print("model %s, %d rounds, CPU %s, load %s" % (os.path.basename(a.model), a.r, op.cpu(),
                                                     open("/proc/loadavg").read().split()[0]))
    for t in threads:
        oa = outs[("A", t)]
        ob = outs[("B", t)]
        diff = max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
                   for x, y in zip(oa.values(), ob.values())) if isinstance(oa, dict) else float("nan")
        cls_times = {}
        for side, tt, m, kr, lst, walls in progs:
            if tt != t:
                continue
            nk = 1 << 16
            buf = (ctypes.c_double * nk)()
            n = kr.lib().kiln_program_kernel_times(m.prog, buf, nk)
            times = np.array(buf[:n]) / a.r * 1e3
            cls = op.classify(lst)
            per = {}
            for k in range(n):
                per[cls.get(k, ("?",))[0]] = per.get(cls.get(k, ("?",))[0], 0.0) + times[k]
            per["all kernels"] = float(times.sum())
            cls_times[side] = (per, float(np.median([w for w, _ in walls])) * 1e3, n,
                               float(np.median([c for _, c in walls])) * 1e3)
        pa, wa, na, ca = cls_times["A"]
        pb, wb, nb, cb = cls_times["B"]
        print("\nthreads %d: run median A %.3f ms, B %.3f ms, B speed-up %.2fx; process CPU time per run "
              "(load-proof at 1 thread; counts spinning at more) A %.3f ms, B %.3f ms, %.2fx; kernels A %d, B %d; "
              "max |A-B| of the outputs %.3g" % (t, wa, wb, wa / wb if wb else 0, ca, cb, ca / cb if cb else 0,
                                                 na, nb, diff))
        print("| class | A ms | B ms | A/B |")
        print("|---|---|---|---|")
        for g in sorted(set(pa) | set(pb), key=lambda g: -pa.get(g, 0.0)):
            x, y = pa.get(g, 0.0), pb.get(g, 0.0)
            print("| %s | %.3f | %.3f | %s |" % (g, x, y, "%.2f" % (x / y) if y > 0 else "-"))
    for side, t, m, kr, lst, walls in progs:
        m.close()


if __name__ == "__main__":
    main()
