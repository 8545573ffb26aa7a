#!/usr/bin/env bash
# GPU benchmark of the CUDA backend (docs/cuda.md), for a machine with an NVIDIA GPU:
#   1. builds BUILD_DIR (default build-gpu) with -DWMAP_CUDA=ON, Release, -j WMAP_JOBS (default 16);
#   2. measures plain copies from pinned memory first (a too-old driver stops it in seconds),
#      then builds the rest and runs the GPU tests (GpuLoad.*, GpuDevice.*) and the
#      staging-ring/scale-inversion unit tests (bounded by timeouts; failures do not stop it);
#   3. measures host-to-device throughput in the same run: plain copies from pinned memory
#      (wmap_h2d_bench: one cudaMemcpy, and 256 MiB pieces over 4 streams) against
#      `wmap load --device cuda:0` (and --device host) of synthetic Llama checkpoints in /tmp,
#      warm page cache, median of WMAP_GPU_RUNS (default 3) runs;
#   4. prints a table with ratios, and writes it to $OUT/gpu_bench.txt when $OUT is set.
# Checkpoints: `4g` (every parameter fits a 256 MiB staging slab) and `big-params` (1g with a
# 131072-token vocabulary: 512 MiB embeddings, streamed through the ring in 64 MiB chunks).
# Without a GPU the tests skip and the script stops before measuring (exit 3). About 5 minutes.
#
#   bench/gpu.sh [BUILD_DIR]     WMAP_JOBS, WMAP_BUILD_TYPE (Release), WMAP_GPU_RUNS, WMAP_GPU_PRESETS ("4g big-params")
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
JOBS=${WMAP_JOBS:-16}
RUNS=${WMAP_GPU_RUNS:-3}
PRESETS=${WMAP_GPU_PRESETS:-4g big-params}
t0=$(date +%s)
say() { echo "=== gpu.sh: $* ($(( $(date +%s) - t0 ))s) ==="; }

say "build ($BUILD, ${WMAP_BUILD_TYPE:-Release}, -j$JOBS)"
mkdir -p "$BUILD"
[[ -n ${OUT:-} ]] && mkdir -p "$OUT"
LOG="$BUILD/gpu_bench_build.log"
nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader 2>/dev/null || true
# The copy-engine baseline first (one small target): a driver too old for this CUDA toolkit
# (CUDA 13 needs driver >= 580) is found in seconds, not after the whole build.
if ! { cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE="${WMAP_BUILD_TYPE:-Release}" -DWMAP_CUDA=ON -DWMAP_BUILD_PYTHON=OFF \
  -DWMAP_MPI=OFF && cmake --build "$BUILD" -j "$JOBS" --target wmap_h2d_bench; } >"$LOG" 2>&1; then
  tail -n 60 "$LOG"
  echo "gpu.sh: build of wmap_h2d_bench failed (log: $LOG)"
  exit 1
fi
say "copy-engine baseline"
if ! H2D=$(timeout 120 "$BUILD/bin/wmap_h2d_bench" 1024 5 2>"$BUILD/h2d_error.txt"); then
  cat "$BUILD/h2d_error.txt"
  echo "gpu.sh: no usable GPU (wmap_h2d_bench failed): nothing to measure"
  [[ -n ${OUT:-} ]] && { echo "no measurement: $(cat "$BUILD/h2d_error.txt")"; } >"$OUT/gpu_bench.txt"
  exit 3
fi
echo "$H2D"
[[ -n ${OUT:-} ]] && echo "$H2D" >"$OUT/h2d_baseline.txt"
say "build the rest"
if ! cmake --build "$BUILD" -j "$JOBS" >>"$LOG" 2>&1; then
  tail -n 60 "$LOG"
  echo "gpu.sh: build failed (log: $LOG)"
  exit 1
fi
WMAP="$BUILD/bin/wmap"

# A failing test does not stop the measurements (device time is scarce); it fails the run at the end.
say "GPU tests"
TESTS_OK=1
TEST_LOG="$BUILD/gpu_tests.log"
timeout 300 "$BUILD/tests/wmap_tests" --gtest_filter='GpuLoad.*:GpuDevice.*:StagingRing.*:ScaleInversion.*' --gtest_brief=1 \
  >"$TEST_LOG" 2>&1 || TESTS_OK=0
tail -n 40 "$TEST_LOG"
[[ -n ${OUT:-} ]] && cp "$TEST_LOG" "$OUT/gpu_tests.log"

SCRATCH=$(mktemp -d /tmp/wmap-gpu-bench.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT
RESULTS="$SCRATCH/results.tsv"
: >"$RESULTS"
for preset in $PRESETS; do
  ckpt="$SCRATCH/$preset"
  case $preset in
    big-params) "$WMAP" -q synth llama "$ckpt" --preset 1g --vocab 131072 >/dev/null || { echo "gpu.sh: synth $preset failed"; continue; } ;;
    *) "$WMAP" -q synth llama "$ckpt" --preset "$preset" >/dev/null || { echo "gpu.sh: synth $preset failed"; continue; } ;;
  esac
  say "load $preset ($(du -sh "$ckpt" | cut -f1))"
  cat "$ckpt"/*.safetensors >/dev/null  # warm page cache: the copy to the GPU is what is measured
  for variant in "cuda:0|" "cuda:0|--read-workers 8 --load-workers 8" "host|"; do
    device=${variant%%|*}
    extra=${variant#*|}
    for ((r = 0; r < RUNS; r++)); do
      # A failed or hung load is reported and skipped: the other figures still come back.
      # shellcheck disable=SC2086
      if ! line=$(timeout 180 "$WMAP" -q load "$ckpt" --device "$device" --json $extra 2>"$SCRATCH/load_err.txt" | sed -n '$p') ||
        [[ -z $line ]]; then
        echo "gpu.sh: load $preset --device $device $extra FAILED: $(tail -n 3 "$SCRATCH/load_err.txt")"
        TESTS_OK=0
        continue
      fi
      python3 -c 'import json,sys; j=json.loads(sys.argv[4]); print(sys.argv[1], sys.argv[2], sys.argv[3], j["gbps"], j["bytes_loaded"], j["seconds"], sep="\t")' \
        "$preset" "$device" "${extra:-defaults}" "$line" >>"$RESULTS"
      [[ -n ${OUT:-} ]] && cp "$RESULTS" "$OUT/gpu_bench_runs.tsv"
    done
  done
  rm -rf "$ckpt"
done

say "results"
TABLE=$(python3 - "$RESULTS" "$H2D" "$RUNS" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
h2d = {l.split()[1]: float(l.split()[2]) for l in sys.argv[2].splitlines() if l.startswith("h2d ")}
base = h2d["pinned_memcpy"]
groups = {}
for preset, device, extra, gbps, nbytes, secs in rows:
    groups.setdefault((preset, device, extra), []).append((float(gbps), int(nbytes)))
print(f"pinned cudaMemcpy H2D: {base:.2f} GB/s; 256 MiB pieces on 4 streams: {h2d['pinned_async_4streams']:.2f} GB/s "
      f"(wmap_h2d_bench, 1 GiB x 5)")
print(f"wmap load, warm page cache, median of {sys.argv[3]} runs")
print("| checkpoint | device | workers | MiB loaded | wmap GB/s | wmap / pinned memcpy | wmap cuda / wmap host |")
print("|---|---|---|---|---|---|---|")
for (preset, device, extra), v in groups.items():
    med = statistics.median(g for g, _ in v)
    host = [g for (p, d, _), vv in groups.items() if p == preset and d == "host" for g, _ in vv]
    vs_host = f"{med / statistics.median(host):.2f}" if host and device != "host" else "-"
    print(f"| {preset} | {device} | {extra} | {v[0][1] / 2**20:.0f} | {med:.2f} | {med / base:.2f} | {vs_host} |")
PY
)
echo "$TABLE"
if [[ -n ${OUT:-} ]]; then
  mkdir -p "$OUT"
  { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true; echo "$TABLE"; } >"$OUT/gpu_bench.txt"
  echo "gpu.sh: figures written to $OUT/gpu_bench.txt"
fi
if [[ $TESTS_OK != 1 ]]; then
  echo "gpu.sh: GPU tests FAILED (see above)"
  exit 1
fi
say "done"
