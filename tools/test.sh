#!/usr/bin/env bash
# Fresh Debian 12 machine -> everything installed, built from scratch, the whole suite run:
# unit/integration tests (ctest), then the bounded fuzz runs.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
BUILD=${WMAP_BUILD_DIR:-build-test}
JOBS=${WMAP_JOBS:-$(nproc)}
rm -rf "$BUILD"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD" -j "$JOBS"
(cd "$BUILD" && ctest --output-on-failure -j "$JOBS")
if [ -x fuzz/run_fuzzers.sh ]; then
  FUZZ_BUILD="$BUILD-fuzz"
  rm -rf "$FUZZ_BUILD"
  CC=clang CXX=clang++ cmake -S . -B "$FUZZ_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DWMAP_BUILD_FUZZERS=ON -DWMAP_BUILD_TESTS=OFF
  cmake --build "$FUZZ_BUILD" -j "$JOBS"
  fuzz/run_fuzzers.sh "$FUZZ_BUILD" "${WMAP_FUZZ_SECONDS:-30}"
fi
echo "wmap: all test stages passed"
