#!/usr/bin/env bash
# Fresh Debian 12 machine -> everything installed, built from scratch, the whole suite run:
#   0. every C++ source formatted as .clang-format says (tools/check_format.sh)
#   1. ctest: unit, interop, bit-exact family loads vs the numpy reference, plugins, mappings,
#      reliability, executor, PyTorch checkpoints, the Python module
#   2. the out-of-tree GPT-2 plugin built and tested against `cmake --install` of step 1
#   2b. `pip install --no-build-isolation .` of step 1's build into a fresh venv, and the Python and
#      engine-adapter tests against the installed package (tools/pip_test.sh)
#   3. ASan + UBSan build of the whole suite (tools/sanitize.sh)
#   4. TSan build of the parallel executor tests (tools/tsan.sh)
#   5. every libFuzzer target for a bounded time (fuzz/run_fuzzers.sh)
# WMAP_SKIP="asan tsan fuzz gpt2 pip" skips stages locally; CI runs them all.
#
# Every stage runs from an export of HEAD (`git archive`, committed files only) in a fresh temp
# folder with no `shared` folder beside the tree: the suite must need nothing but the committed
# tree (test data lives in tests/data), and no tracked file but the docs may name the parent's
# shared folder. WMAP_KEEP_TEST_TREE=1 keeps the temp folder.
# Warnings are errors in the main, GPT-2 and fuzz builds (-DWMAP_WERROR=ON, -Werror).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${WMAP_TEST_EXPORTED:-}" ]] && ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "wmap test: warning: not a git checkout: running in place, without the export and the shared-folder check" >&2
elif [[ -z "${WMAP_TEST_EXPORTED:-}" ]]; then
  if refs=$(git grep -n '\.\./shared' -- ':!*.md'); then
    echo "$refs" >&2
    echo "wmap test: the files above reference the parent's shared folder: test data belongs in tests/data" >&2
    exit 1
  fi
  if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
    echo "wmap test: warning: uncommitted changes are not tested (the run uses HEAD $(git rev-parse --short HEAD))" >&2
  fi
  tree=$(mktemp -d "${TMPDIR:-/tmp}/wmap-test.XXXXXX")
  [[ ${WMAP_KEEP_TEST_TREE:-0} == 1 ]] || trap 'rm -rf "$tree"' EXIT
  mkdir "$tree/wmap"
  git archive --format=tar HEAD | tar -x -C "$tree/wmap"
  [[ ! -e "$tree/shared" ]]
  echo "wmap test: running from $tree/wmap (HEAD $(git rev-parse --short HEAD), no shared folder beside it)"
  WMAP_TEST_EXPORTED=1 "$tree/wmap/tools/test.sh" "$@"
  exit $?
fi
tools/setup.sh
BUILD=${WMAP_BUILD_DIR:-build-test}
JOBS=${WMAP_JOBS:-$(nproc)}
SKIP=" ${WMAP_SKIP:-} "
t0=$(date +%s)
stage() { echo; echo "=== wmap test: $* ($(( $(date +%s) - t0 ))s elapsed) ==="; }
skipped() { [[ "$SKIP" == *" $1 "* ]]; }

stage "format (.clang-format, every C++ source)"
tools/check_format.sh

stage "build and ctest"
rm -rf "$BUILD"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWMAP_WERROR=ON  # the build type the README tells users to make
cmake --build "$BUILD" -j "$JOBS"
(cd "$BUILD" && ctest --output-on-failure -j "$JOBS")

if ! skipped gpt2; then
  stage "out-of-tree GPT-2 plugin against an installed prefix"
  PREFIX=$PWD/$BUILD-prefix
  rm -rf "$PREFIX" "$BUILD-gpt2"
  cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
  cmake -S examples/gpt2_plugin -B "$BUILD-gpt2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-Werror \
    -DCMAKE_PREFIX_PATH="$PREFIX" -DWMAP_REFERENCE_PY="$PWD/tests/python/reference.py"
  cmake --build "$BUILD-gpt2" -j "$JOBS"
  ctest --test-dir "$BUILD-gpt2" --output-on-failure --no-tests=error
fi

if ! skipped pip; then
  stage "pip install into a fresh venv: Python and engine-adapter tests against the installed package"
  tools/pip_test.sh "$BUILD"
fi

if ! skipped asan; then
  stage "ASan + UBSan: whole suite"
  WMAP_SANITIZE_FRESH=1 tools/sanitize.sh "$BUILD-asan"
fi

if ! skipped tsan; then
  stage "TSan: parallel executor"
  rm -rf "$BUILD-tsan"
  tools/tsan.sh "$BUILD-tsan"
fi

if ! skipped fuzz; then
  stage "libFuzzer targets, ${WMAP_FUZZ_SECONDS:-10}s each"
  FUZZ_BUILD="$BUILD-fuzz"
  rm -rf "$FUZZ_BUILD"
  CC=clang CXX=clang++ cmake -S . -B "$FUZZ_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DWMAP_BUILD_FUZZERS=ON -DWMAP_BUILD_TESTS=OFF -DWMAP_BUILD_PYTHON=OFF -DWMAP_CUDA=OFF -DWMAP_WERROR=ON >/dev/null
  cmake --build "$FUZZ_BUILD" -j "$JOBS" --target wmap_fuzzers
  WMAP_SEED_CLI="$PWD/$BUILD/bin/wmap" fuzz/run_fuzzers.sh "$FUZZ_BUILD" "${WMAP_FUZZ_SECONDS:-10}"
fi

stage "done"
echo "wmap: all test stages passed in $(( $(date +%s) - t0 ))s"
