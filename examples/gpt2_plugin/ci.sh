#!/usr/bin/env bash
# End-to-end CI for the out-of-tree GPT-2 plugin:
#   0. snapshot WMAP_SRC into SCRATCH/wmap-src (without .git and top-level build*/ folders), so a
#      source tree edited while this runs cannot give a library and headers that disagree;
#   1. configure, build and install wmap from the snapshot into SCRATCH/prefix (Release, tests off);
#   2. configure and build this example against that prefix (CMAKE_PREFIX_PATH only);
#   3. run its ctest (every rank of tp 1/2/4 checked against tests/python/reference.py);
#   4. install the example into SCRATCH/gpt2-install and check the .so and gpt2.yaml lie side by side.
#
#   ci.sh WMAP_SRC SCRATCH          (JOBS=N to change the build parallelism; default 2)
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 WMAP_SOURCE_DIR SCRATCH_DIR" >&2
  exit 2
fi
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$2"
SRC=$(cd "$1" && pwd)
SCRATCH=$(cd "$2" && pwd)
JOBS=${JOBS:-2}
GEN=()
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
PREFIX=$SCRATCH/prefix

step() { echo; echo "=== $* ==="; }

step "wmap: snapshot $SRC"
SNAP=$SCRATCH/wmap-src
mkdir -p "$SNAP"
if command -v rsync >/dev/null 2>&1; then
  rsync -a --delete --exclude '/.git' --exclude '/build*' "$SRC/" "$SNAP/"
else
  # tar keeps modification times, so unchanged files do not rebuild on a rerun.
  find "$SNAP" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
  tar -C "$SRC" --exclude='./.git' --exclude='./build*' -cf - . | tar -C "$SNAP" -xf -
fi
SRC=$SNAP

step "wmap: configure $SRC"
cmake -S "$SRC" -B "$SCRATCH/wmap-build" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DWMAP_BUILD_TESTS=OFF
step "wmap: build (-j$JOBS)"
cmake --build "$SCRATCH/wmap-build" -j "$JOBS"
step "wmap: install into $PREFIX"
rm -rf "$PREFIX"
cmake --install "$SCRATCH/wmap-build" --prefix "$PREFIX"

step "gpt2 plugin: configure against $PREFIX"
rm -rf "$SCRATCH/gpt2-build"
cmake -S "$HERE" -B "$SCRATCH/gpt2-build" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$PREFIX" -DWMAP_REFERENCE_PY="$SRC/tests/python/reference.py"
step "gpt2 plugin: build"
cmake --build "$SCRATCH/gpt2-build" -j "$JOBS"
step "gpt2 plugin: test"
ctest --test-dir "$SCRATCH/gpt2-build" --output-on-failure

step "gpt2 plugin: install"
rm -rf "$SCRATCH/gpt2-install"
cmake --install "$SCRATCH/gpt2-build" --prefix "$SCRATCH/gpt2-install"
so=$(find "$SCRATCH/gpt2-install" -name libwmap_plugin_gpt2.so)
[ -n "$so" ] || { echo "ci: libwmap_plugin_gpt2.so was not installed" >&2; exit 1; }
[ -f "$(dirname "$so")/gpt2.yaml" ] || { echo "ci: gpt2.yaml is not installed beside $so" >&2; exit 1; }
echo "installed: $so and $(dirname "$so")/gpt2.yaml"

echo
echo "ci: OK"
