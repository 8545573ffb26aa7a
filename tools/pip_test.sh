#!/usr/bin/env bash
# `pip install --no-build-isolation .` into a fresh virtual environment, then the Python module's
# tests and the engine-adapter tests (python/tests/test_*.py) against the installed package, not
# the build tree: no PYTHONPATH to the build, the CLI they run is the package's `wmap` console
# script, and test_engines.py requires --load-format wmap to be found through the installed
# `vllm.general_plugins` entry point (WMAP_EXPECT_INSTALLED=1). `pip wheel` must give a platform
# wheel. The venv sees Debian's numpy, torch and setuptools (--system-site-packages): nothing is
# downloaded (--no-index).
#
#   tools/pip_test.sh [BUILD_DIR]   BUILD_DIR: an existing CMake build to install from (its runtime
#                                   targets are built, then installed: setup.py WMAP_PIP_BUILD_DIR);
#                                   default: setup.py's own build-pip/ (a full Release build)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[[ $# -ge 1 ]] && export WMAP_PIP_BUILD_DIR=$(cd "$1" && pwd)
PY=${WMAP_PIP_PYTHON:-/usr/bin/python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/wmap-pip.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
"$PY" -m venv --system-site-packages "$work/venv"
VPY=$work/venv/bin/python
"$VPY" -m pip install --no-build-isolation --no-index --no-deps -q .
"$VPY" -m pip wheel --no-build-isolation --no-index --no-deps -q -w "$work/dist" .
wheel=$(ls "$work"/dist/wmap-*.whl)
tag=$("$VPY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
case "$(basename "$wheel")" in
  *-"$tag"-"$tag"-linux_*.whl) echo "wmap pip: wheel $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)" ;;
  *) echo "wmap pip: $(basename "$wheel") is not a $tag platform wheel" >&2; exit 1 ;;
esac
installed=$(date +%s)
failed=0 passed=0 skipped=0
for t in python/tests/test_*.py; do
  set +e
  (cd "$work" && env -u PYTHONPATH -u LD_LIBRARY_PATH PYTHONDONTWRITEBYTECODE=1 WMAP_EXPECT_INSTALLED=1 \
     WMAP_CLI="$work/venv/bin/wmap" WMAP_REFERENCE_DIR="$ROOT/tests/python" WMAP_STANDIN_DIR="$ROOT/tests/engines/standin" \
     "$VPY" "$ROOT/$t") > "$work/out.txt" 2>&1
  rc=$?
  set -e
  case $rc in
    0) passed=$((passed + 1)); echo "wmap pip: ok   $t" ;;
    77) skipped=$((skipped + 1)); echo "wmap pip: skip $t" ;;
    *) failed=$((failed + 1)); echo "wmap pip: FAIL $t"; cat "$work/out.txt" ;;
  esac
done
end=$(date +%s)
echo "wmap pip: $passed passed, $skipped skipped, $failed failed against the installed package" \
     "(install + wheel $((installed - start))s, tests $((end - installed))s)"
[[ $failed == 0 ]]
