#!/usr/bin/env bash
# Fresh Debian 12 machine -> everything installed, built from scratch, the whole suite run:
#   1. ctest: unit, interop, bit-exact family loads vs the numpy reference, plugins, mappings,
#      reliability, executor, PyTorch checkpoints, the Python module
#   2. the out-of-tree GPT-2 plugin built and tested against `cmake --install` of step 1
#   3. ASan + UBSan build of the whole suite (tools/sanitize.sh)
#   4. TSan build of the parallel executor tests (tools/tsan.sh)
#   5. every libFuzzer target for a bounded time (fuzz/run_fuzzers.sh)
# WMAP_SKIP="asan tsan fuzz gpt2" skips stages locally; CI runs them all.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
BUILD=${WMAP_BUILD_DIR:-build-test}
JOBS=${WMAP_JOBS:-$(nproc)}
SKIP=" ${WMAP_SKIP:-} "
t0=$(date +%s)
stage() { echo; echo "=== wmap test: $* ($(( $(date +%s) - t0 ))s elapsed) ==="; }
skipped() { [[ "$SKIP" == *" $1 "* ]]; }

stage "build and ctest"
rm -rf "$BUILD"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD" -j "$JOBS"
(cd "$BUILD" && ctest --output-on-failure -j "$JOBS")

if ! skipped gpt2; then
  stage "out-of-tree GPT-2 plugin against an installed prefix"
  PREFIX=$PWD/$BUILD-prefix
  rm -rf "$PREFIX" "$BUILD-gpt2"
  cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
  cmake -S examples/gpt2_plugin -B "$BUILD-gpt2" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$PREFIX" -DWMAP_REFERENCE_PY="$PWD/tests/python/reference.py"
  cmake --build "$BUILD-gpt2" -j "$JOBS"
  ctest --test-dir "$BUILD-gpt2" --output-on-failure
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
  stage "libFuzzer targets, ${WMAP_FUZZ_SECONDS:-20}s each"
  FUZZ_BUILD="$BUILD-fuzz"
  rm -rf "$FUZZ_BUILD"
  CC=clang CXX=clang++ cmake -S . -B "$FUZZ_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DWMAP_BUILD_FUZZERS=ON -DWMAP_BUILD_TESTS=OFF -DWMAP_BUILD_PYTHON=OFF >/dev/null
  cmake --build "$FUZZ_BUILD" -j "$JOBS" --target wmap_fuzzers wmap_cli
  fuzz/run_fuzzers.sh "$FUZZ_BUILD" "${WMAP_FUZZ_SECONDS:-20}"
fi

stage "done"
echo "wmap: all test stages passed in $(( $(date +%s) - t0 ))s"
