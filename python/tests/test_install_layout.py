"""`cmake --install` puts an importable wmap package in the prefix's site-packages: imported from
there (no build tree on the path, no WMAP_* variable set), it loads libwmap, the default plugins
and the mapping files of the install prefix, found relative to the installed libwmap.so."""

import os
import subprocess
import sys

from wmap_test_util import TempDir, check, eq, run_tests, synth

CMAKE = os.environ.get("CMAKE_COMMAND", "cmake")
BUILD_DIR = os.environ.get("WMAP_BUILD_DIR")
PY_DIR = os.environ.get("WMAP_PYTHON_INSTALL_DIR")

PROBE = r"""
import json, os, sys
import wmap
ck = sys.argv[1]
params = wmap.load(ck, tp_size=2, tp_rank=1, quiet=True)
p = wmap.plan(ck, tp_size=2, tp_rank=1)
maps = open("/proc/self/maps").read()
libs = sorted({l.split()[-1] for l in maps.splitlines() if "libwmap" in l and "/" in l})
print(json.dumps({"module": wmap.__file__, "ext": wmap._wmap.__file__, "libs": libs, "params": len(params),
                  "ok": p.ok, "mapping": p.mapping}))
"""


def test_install_and_import():
    if not BUILD_DIR or not PY_DIR:
        print("  WMAP_BUILD_DIR / WMAP_PYTHON_INSTALL_DIR not set")
        return "skip"
    with TempDir() as d:
        prefix = os.path.join(d, "prefix")
        r = subprocess.run([CMAKE, "--install", BUILD_DIR, "--prefix", prefix], capture_output=True, text=True)
        eq(r.returncode, 0, "cmake --install (stderr: %s)" % r.stderr)
        site = os.path.join(prefix, PY_DIR)
        pkg = os.path.join(site, "wmap")
        names = sorted(os.listdir(pkg))
        check("__init__.py" in names and any(n.startswith("_wmap") and n.endswith(".so") for n in names),
              "installed package: %s" % names)
        ck = synth(os.path.join(d, "llama"), "llama")
        env = {k: v for k, v in os.environ.items() if not k.startswith("WMAP_") and k != "PYTHONPATH"}
        env["PYTHONPATH"] = site
        env.pop("LD_LIBRARY_PATH", None)
        r = subprocess.run([sys.executable, "-c", PROBE, ck], capture_output=True, text=True, env=env, cwd=d)
        eq(r.returncode, 0, "import from the install (stderr: %s)" % r.stderr)
        import json
        got = json.loads(r.stdout)
        real = os.path.realpath(prefix)
        check(os.path.realpath(got["module"]).startswith(real), "wmap imported from the prefix: %s" % got["module"])
        check(os.path.realpath(got["ext"]).startswith(real), "extension from the prefix: %s" % got["ext"])
        check(got["libs"], "libwmap and plugins mapped")
        for lib in got["libs"]:
            check(os.path.realpath(lib).startswith(real), "%s is not from the install prefix" % lib)
        check(any("/wmap/plugins/" in l for l in got["libs"]), "a default plugin was loaded: %s" % got["libs"])
        check(got["mapping"] and os.path.realpath(got["mapping"]).startswith(real), "mapping from the prefix: %s" % got["mapping"])
        check(got["ok"] and got["params"] > 0, "plan ok and parameters loaded")


if __name__ == "__main__":
    run_tests([("cmake --install to a prefix, import and load from there", test_install_and_import)])
