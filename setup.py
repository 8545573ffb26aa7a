"""Builds the `wmap` Python package with the project's own CMake build (docs/python.md "pip install").

    pip install --no-build-isolation .          # or: pip wheel --no-build-isolation . -w dist/

The package is self-contained under site-packages/wmap/:

    wmap/__init__.py, engines/, _cli.py    pure Python (python/wmap/)
    wmap/_wmap.cpython-*.so                the extension (RPATH $ORIGIN/lib)
    wmap/lib/libwmap.so.*                  the core
    wmap/lib/wmap/plugins/*.so             the default family plugins (found relative to libwmap)
    wmap/share/wmap/mappings/*.yaml        the rename tables (found relative to libwmap)
    wmap/bin/wmap                          the CLI, run by the `wmap` console script
    wmap/libexec/wmap/wmap-mpi             its MPI build, which `wmap` hands over to under mpirun
    wmap/include, wmap/lib/cmake/wmap      headers and wmapConfig.cmake, to build plugins against

It is exactly `cmake --install` of a build, rearranged: every run-time path in wmap is relative to
libwmap.so, so moving the prefix as a whole keeps them working.

Environment:
  WMAP_PIP_BUILD_DIR   the CMake build folder (default build-pip/ in the source tree; configured
                       Release without tests on first use). An existing build (e.g. the one a
                       `cmake -B build` made) is used as it is: built, then installed; it must
                       have the Python module for this interpreter and CMAKE_INSTALL_LIBDIR=lib.
  WMAP_CMAKE_ARGS      extra arguments for the first configure (e.g. "-DWMAP_CUDA=OFF")
  WMAP_JOBS            parallel build jobs (default: the CPU count)
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(\s*wmap\s+VERSION\s+([0-9][0-9.]*)", f.read())
    if not m:
        raise RuntimeError("CMakeLists.txt: no `project(wmap VERSION x.y.z ...)` line to take the version from")
    return m.group(1)


class BinaryDistribution(Distribution):
    """A platform wheel (cp3X-cp3X-linux_x86_64): the package holds compiled code."""

    def has_ext_modules(self):
        return True


def cmake_cache(build_dir):
    """{name: value} of build_dir/CMakeCache.txt."""
    out = {}
    with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
        for line in f:
            m = re.match(r"^([A-Za-z0-9_.\-]+):[A-Z]+=(.*)$", line.rstrip("\n"))
            if m:
                out[m.group(1)] = m.group(2)
    return out


def fail(message):
    raise SystemExit("wmap setup.py: " + message)


def run(cmd, **kw):
    print("wmap setup.py: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    r = subprocess.run(cmd, **kw)
    if r.returncode != 0:
        fail("%s exited with %d" % (cmd[0] if len(cmd) < 3 else " ".join(cmd[:3]), r.returncode))


class BuildWithCMake(build_py):
    """build_py, then the CMake build and install, rearranged into build_lib/wmap."""

    def run(self):
        super().run()
        build_dir = os.path.abspath(os.environ.get("WMAP_PIP_BUILD_DIR") or os.path.join(ROOT, "build-pip"))
        cmake = shutil.which("cmake") or fail("cmake not found on PATH (Debian: apt-get install cmake)")
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            cmd = [cmake, "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DWMAP_BUILD_TESTS=OFF",
                   "-DCMAKE_INSTALL_LIBDIR=lib", "-DPython3_EXECUTABLE=" + sys.executable]
            if shutil.which("ninja"):
                cmd += ["-G", "Ninja"]
            cmd += shlex.split(os.environ.get("WMAP_CMAKE_ARGS", ""))
            run(cmd)
        cache = cmake_cache(build_dir)
        self.check_build(build_dir, cache)
        jobs = os.environ.get("WMAP_JOBS") or str(os.cpu_count() or 1)
        run([cmake, "--build", build_dir, "-j", jobs, "--target", "wmap_runtime"])
        staging = tempfile.mkdtemp(prefix="wmap-install-", dir=build_dir)
        try:
            run([cmake, "--install", build_dir, "--prefix", staging], stdout=subprocess.DEVNULL)
            self.arrange(staging, cache["WMAP_PYTHON_INSTALL_DIR"], os.path.join(self.build_lib, "wmap"))
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    @staticmethod
    def check_build(build_dir, cache):
        where = "WMAP_PIP_BUILD_DIR " + build_dir
        if cache.get("CMAKE_INSTALL_LIBDIR", "lib") != "lib":
            fail("%s: CMAKE_INSTALL_LIBDIR is %r; the package's layout (extension RPATH $ORIGIN/lib) needs 'lib'"
                 % (where, cache["CMAKE_INSTALL_LIBDIR"]))
        if "WMAP_PYTHON_INSTALL_DIR" not in cache:
            fail("%s: the build has no Python module (pybind11 not found, or -DWMAP_BUILD_PYTHON=OFF): "
                 "apt-get install pybind11-dev python3-pybind11, then build again" % where)
        built_for = cache.get("Python3_EXECUTABLE", "")
        probe = "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"
        theirs = subprocess.run([built_for, "-c", probe], capture_output=True, text=True).stdout.strip() \
            if os.path.exists(built_for) else ""
        ours = sysconfig.get_config_var("EXT_SUFFIX")
        if theirs != ours:
            fail("%s: the module is built for %s (extension suffix %r), not for this interpreter %s (%r): "
                 "use another WMAP_PIP_BUILD_DIR" % (where, built_for or "no interpreter", theirs, sys.executable, ours))

    @staticmethod
    def arrange(staging, python_dir, package):
        """The install prefix `staging` laid out inside the package folder."""
        pkg_src = os.path.join(staging, python_dir, "wmap")
        if not os.path.isdir(pkg_src):
            fail("cmake --install put no wmap package in <prefix>/%s" % python_dir)
        for name in os.listdir(pkg_src):
            src = os.path.join(pkg_src, name)
            if os.path.isfile(src) and not name.endswith(".py"):  # the extension; the .py files came from build_py
                shutil.copy2(src, os.path.join(package, name))
        shutil.rmtree(pkg_src)
        try:
            os.removedirs(os.path.dirname(pkg_src))  # lib/python3/dist-packages, now empty
        except OSError:
            pass
        for part in ("lib", "libexec", "bin", "share", "include"):  # libexec: wmap-mpi (tools/wmap/mpi_handoff.h)
            src = os.path.join(staging, part)
            if not os.path.isdir(src):
                continue
            dst = os.path.join(package, part)
            shutil.rmtree(dst, ignore_errors=True)
            # symlinks=True: libwmap.so -> libwmap.so.0 -> libwmap.so.0.1.0 stay links (a wheel stores
            # them as copies, which the loader finds by their SONAME all the same).
            shutil.copytree(src, dst, symlinks=True)


setup(
    version=project_version(),
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildWithCMake},
)
