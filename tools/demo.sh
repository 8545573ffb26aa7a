#!/usr/bin/env bash
# Fresh Debian 12 machine -> wmap built -> a synthetic checkpoint written -> the main job run on
# it: inspect the catalog, validate the plan of a 2-way tensor-parallel rank, load it.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
BUILD=${WMAP_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWMAP_BUILD_TESTS=OFF
cmake --build "$BUILD"
DEMO=${WMAP_DEMO_DIR:-$BUILD/demo-checkpoint}
rm -rf "$DEMO"
"$BUILD/bin/wmap" synth llama "$DEMO" --preset small
"$BUILD/bin/wmap" inspect "$DEMO"
"$BUILD/bin/wmap" plan "$DEMO" --tp-size 2 --tp-rank 1
"$BUILD/bin/wmap" load "$DEMO" --tp-size 2 --tp-rank 1 --dump "$BUILD/demo-rank1.safetensors"
