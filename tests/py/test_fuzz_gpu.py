"""test_fuzz_gpu.py — the random-graph fuzz (tests/unit/test_compile_fuzz.c)
again with every graph compiled for the OpenCL backend (PoCL in CI) and
compared with the reference interpreter. Its PASS/FAIL lines are relayed.

Without an OpenCL device (`kiln device` lists none) it prints a SKIP line and
checks nothing; KILN_TEST_OPENCL=0 skips it on purpose.
"""
import os
import subprocess
import sys

build = os.environ.get("KILN_BUILD", "build")
kiln = os.environ.get("KILN_BIN", os.path.join(build, "kiln"))
fuzz = os.path.join(build, "tests", "test_compile_fuzz")

if os.environ.get("KILN_TEST_OPENCL") == "0":
    print("# test_fuzz_gpu: skipped (KILN_TEST_OPENCL=0)")
    sys.exit(0)
dev = subprocess.run([kiln, "device"], capture_output=True, text=True, timeout=600)
if "backend opencl: 0 devices" in dev.stdout or "backend opencl" not in dev.stdout:
    print("# test_fuzz_gpu: SKIP: no OpenCL device (kiln device lists none)")
    sys.exit(0)
env = dict(os.environ, KILN_BACKEND="opencl", KILN_FUZZ_GRAPHS="100")
env.pop("LD_PRELOAD", None)  # the fuzz binary carries its own sanitizer runtime when built with one
r = subprocess.run([fuzz], capture_output=True, text=True, env=env, timeout=1800)
lines = [l for l in r.stdout.splitlines() if l.startswith("PASS ") or l.startswith("FAIL ")]
for l in lines:
    print(l.replace("PASS ", "PASS opencl_", 1).replace("FAIL ", "FAIL opencl_", 1))
if r.returncode != 0 and not any(l.startswith("FAIL") for l in lines):
    print("FAIL opencl_fuzz: exit status %d: %s" % (r.returncode, (r.stdout + r.stderr)[-600:]))
    sys.exit(1)
if not lines:
    print("FAIL opencl_fuzz: no result lines: %s" % (r.stdout + r.stderr)[-600:])
    sys.exit(1)
sys.exit(0 if r.returncode == 0 else 1)
