"""serve_steps.py — what a batched decode step of N rows costs against a
1-row step, in one process: kiln serve's two programs (the model's own for
one slot, the batched-decode program for several) through libkiln.so
(kiln_llm_slots / kiln_llm_decode_slot / kiln_llm_decode_batch), in phases of
10 calls (N rows, then 1 row, three times each; the first 2 calls of a phase
not counted), medians of wall and process CPU time per call. With
KILN_PROFILE=1 each program's slowest kernels are printed at the end.

    KILN_TUNEDB=build/t.db KILN_LIB=build/libkiln.so python3 bench/serve_steps.py [MODEL] [--rows 4] [--threads 2]

Greedy token ids are fixed (the cost does not depend on them); each slot's
prompt is 10 tokens. The tuning DB should be one a server's first-run search
filled (KILN_TUNEDB): the programs then run the schedules kiln serve runs. The
per-call ratio is what bounds N clients' total over one client's: at most
N / ratio. Needs numpy.
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

import numpy as np

# kiln serve's settings, not the test suite's (tests/py/kiln_ctypes.py would
# otherwise give the fixed f32 defaults and poisoned outputs)
for _k, _v in (("KILN_FIXED_DEFAULTS", "0"), ("KILN_POISON_RESULTS", "0"), ("KILN_STREAM_TILE", "0")):
    os.environ.setdefault(_k, _v)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "py"))
import kiln_ctypes as kc  # noqa: E402

_vp, _cp, _i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
_fp, _ip = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int32)
PROGRESS = ctypes.CFUNCTYPE(None, _vp, _cp, ctypes.c_double)


class LlmParams(ctypes.Structure):
    _fields_ = [("n_ctx", ctypes.c_int64), ("threads", _i), ("interpreter", _i), ("use_mmap", _i),
                ("kv_dtype", _i), ("exact", _i), ("tune_s", ctypes.c_double), ("progress", PROGRESS),
                ("progress_ctx", _vp)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="models/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=1024)
    a = ap.parse_args()
    L = kc.load().dll
    for name, res, args in [
            ("kiln_llm_default_params", LlmParams, []),
            ("kiln_llm_load", _i, [_cp, ctypes.POINTER(LlmParams), ctypes.POINTER(_vp), _cp, ctypes.c_size_t]),
            ("kiln_llm_free", None, [_vp]), ("kiln_llm_error", _cp, [_vp]), ("kiln_llm_n_vocab", ctypes.c_int64, [_vp]),
            ("kiln_llm_slots", _i, [_vp, _i]), ("kiln_llm_decode_slot", _i, [_vp, _i, _ip, _i, _i, _fp]),
            ("kiln_llm_decode_batch", _i, [_vp, _i, _ip, _ip, _ip, _fp])]:
        f = getattr(L, name)
        f.restype, f.argtypes = res, args
    p = L.kiln_llm_default_params()
    p.use_mmap, p.threads, p.tune_s, p.n_ctx = 0, a.threads, 0.0, a.ctx
    m, err = _vp(), ctypes.create_string_buffer(1024)
    if L.kiln_llm_load(a.model.encode(), ctypes.byref(p), ctypes.byref(m), err, 1024) != 0:
        sys.exit("serve_steps.py: %s" % err.value.decode())
    n, nv = a.rows, L.kiln_llm_n_vocab(m)
    i32 = lambda x: np.ascontiguousarray(np.array(x, np.int32))  # noqa: E731
    ip = lambda x: x.ctypes.data_as(_ip)  # noqa: E731
    fp = lambda x: x.ctypes.data_as(_fp)  # noqa: E731
    if L.kiln_llm_slots(m, n) != 0:
        sys.exit("serve_steps.py: %s" % L.kiln_llm_error(m).decode())
    lg = np.zeros((n, nv), np.float32)
    pos = [10] * n
    for s in range(n):
        pr = i32([2] + [100 * (k + 1) + s for k in range(9)])
        if L.kiln_llm_decode_slot(m, s, ip(pr), len(pr), 0, fp(lg[0])) != 0:
            sys.exit("serve_steps.py: %s" % L.kiln_llm_error(m).decode())
    if pos[0] + 31 > a.ctx:
        sys.exit("serve_steps.py: --ctx too small")
    wall = {1: [], n: []}
    cpu = {1: [], n: []}
    for phase in range(6):
        rows = n if phase % 2 == 0 else 1
        for k in range(10):
            t0, c0 = time.perf_counter(), time.process_time()
            if rows == 1:
                st = L.kiln_llm_decode_slot(m, 0, ip(i32([9])), 1, pos[0], fp(lg[0]))
            else:
                st = L.kiln_llm_decode_batch(m, n, ip(i32(range(n))), ip(i32([5 + r for r in range(n)])),
                                             ip(i32(pos)), fp(lg))
            if st != 0:
                sys.exit("serve_steps.py: %s" % L.kiln_llm_error(m).decode())
            if k >= 2:
                wall[rows].append(time.perf_counter() - t0)
                cpu[rows].append(time.process_time() - c0)
            for r in range(rows):
                pos[r] += 1
    med = lambda x: 1e3 * statistics.median(x)  # noqa: E731
    cpu_name = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    print("CPU: %s, %d threads, load %s" % (cpu_name, a.threads, open("/proc/loadavg").read().split()[0]))
    print("1 row: %.2f ms wall, %.2f ms CPU; %d rows: %.2f ms wall, %.2f ms CPU; %d / 1: wall %.2fx, CPU %.2fx" % (
        med(wall[1]), med(cpu[1]), n, med(wall[n]), med(cpu[n]), n, med(wall[n]) / med(wall[1]),
        med(cpu[n]) / med(cpu[1])))
    sys.stdout.flush()
    L.kiln_llm_free(m)


if __name__ == "__main__":
    main()
