"""setup.py — the one step pyproject.toml cannot say: building libkiln.so
with the project's Makefile and putting the library file inside the
package (kiln/libkiln.so), where kiln._lib looks first after $KILN_LIB.

The build directory is $KILN_BUILD, else build/ (make is incremental: a tree
already built with `make` is reused as is). The wheel is marked as
platform-specific, since it carries a native library.
"""
import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithLibkiln(build_py):
    def run(self):
        super().run()
        build = os.environ.get("KILN_BUILD") or os.path.join(HERE, "build")
        jobs = os.environ.get("KILN_MAKE_JOBS", "2")
        subprocess.check_call(["make", "-j" + jobs, "BUILD=" + build, build + "/libkiln.so"], cwd=HERE)
        real = os.path.realpath(os.path.join(build, "libkiln.so"))
        dest = os.path.join(self.build_lib, "kiln")
        os.makedirs(dest, exist_ok=True)
        for old in glob.glob(os.path.join(dest, "libkiln.so*")):
            os.remove(old)
        shutil.copyfile(real, os.path.join(dest, "libkiln.so"))


class NativeDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibkiln}, distclass=NativeDistribution)
