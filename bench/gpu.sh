#!/usr/bin/env bash
# GPU benchmark of the CUDA backend (docs/cuda.md), for a machine with an NVIDIA GPU. One command:
#   1. builds the copy-engine baseline alone (wmap_h2d_bench) and measures plain copies from pinned
#      memory (one cudaMemcpy; 256 MiB pieces over 4 streams): a driver too old for this toolkit
#      or a missing GPU stops it in seconds (exit 3);
#   2. builds the CLI, the plugins and the tests (Release, -DWMAP_CUDA=ON, no Python, no MPI) and
#      runs the GPU tests and the fake-runtime tests (failures are reported at the end, not fatal);
#   3. loads synthetic Llama checkpoints with a warm page cache, `--device cuda:0` (default workers
#      and 8 + 8) and `--device host`, median of WMAP_GPU_RUNS runs, and reports the streaming
#      rate (bytes / (load - set-up)) apart from the set-up (opening the device: pinning; reserving
#      the load's memory), with ratios to the pinned-copy ceiling and to the host load.
# Checkpoints: `4g`, and `big-params` (1g with a 131072-token vocabulary: 512 MiB embeddings,
# staged region by region).
# Bounded: everything runs against a budget of WMAP_GPU_BUDGET_S seconds (default 280); a step
# that would not fit is skipped and named. The table is written on every exit, with what was
# measured, to stdout and, when $OUT is set, to $OUT/gpu_bench.txt (with the per-run figures and
# the test log beside it).
#
#   bench/gpu.sh [BUILD_DIR]     WMAP_JOBS (nproc), WMAP_BUILD_TYPE (Release), WMAP_GPU_RUNS (3),
#                                WMAP_GPU_PRESETS ("4g big-params"), WMAP_GPU_BUDGET_S (280)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
JOBS=${WMAP_JOBS:-$(nproc)}
RUNS=${WMAP_GPU_RUNS:-3}
PRESETS=${WMAP_GPU_PRESETS:-4g big-params}
BUDGET=${WMAP_GPU_BUDGET_S:-280}
t0=$(date +%s)
elapsed() { echo $(($(date +%s) - t0)); }
left() { echo $((BUDGET - $(elapsed))); }
say() { echo "=== gpu.sh: $* ($(elapsed)s) ==="; }
mkdir -p "$BUILD"
[[ -n ${OUT:-} ]] && mkdir -p "$OUT"
SCRATCH=$(mktemp -d /tmp/wmap-gpu-bench.XXXXXX)
RESULTS="$SCRATCH/results.tsv"
NOTES="$SCRATCH/notes.txt"
H2D=""
STATUS=0
: >"$RESULTS"
: >"$NOTES"
note() { echo "gpu.sh: $*" | tee -a "$NOTES"; }

# The table, from whatever was measured: on every exit, so a failed or skipped step still leaves
# the figures of the others.
write_table() {
  local table
  table=$(python3 - "$RESULTS" "$H2D" "$RUNS" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
h2d = {l.split()[1]: float(l.split()[2]) for l in sys.argv[2].splitlines() if l.startswith("h2d ")}
base = h2d.get("pinned_memcpy")
if base:
    print(f"pinned cudaMemcpy H2D: {base:.2f} GB/s; 256 MiB pieces on 4 streams: {h2d.get('pinned_async_4streams', 0):.2f} GB/s "
          f"(wmap_h2d_bench, 1 GiB x 5)")
else:
    print("pinned-copy baseline: not measured")
print(f"wmap load, warm page cache, median of up to {sys.argv[3]} runs; streaming = bytes / (load - set-up)")
print("| checkpoint | device | workers | runs | MiB loaded | device open s | set-up s | load s | streaming GB/s | streaming / pinned memcpy | cuda / host (streaming) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
groups = {}
for preset, device, extra, gbps, stream, nbytes, secs, setup, opened in rows:
    groups.setdefault((preset, device, extra), []).append(
        dict(gbps=float(gbps), stream=float(stream), nbytes=int(nbytes), secs=float(secs), setup=float(setup), opened=float(opened)))
med = lambda v, k: statistics.median(x[k] for x in v)
for (preset, device, extra), v in groups.items():
    host = [x for (p, d, _), vv in groups.items() if p == preset and d == "host" for x in vv]
    vs_host = f"{med(v, 'stream') / med(host, 'stream'):.2f}" if host and device != "host" else "-"
    vs_pinned = f"{med(v, 'stream') / base:.2f}" if base else "-"
    print(f"| {preset} | {device} | {extra} | {len(v)} | {v[0]['nbytes'] / 2**20:.0f} | {med(v, 'opened'):.3f} | "
          f"{med(v, 'setup'):.3f} | {med(v, 'secs'):.3f} | {med(v, 'stream'):.2f} | {vs_pinned} | {vs_host} |")
PY
  )
  echo "$table"
  [[ -s $NOTES ]] && cat "$NOTES"
  if [[ -n ${OUT:-} ]]; then
    { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true; echo "$table"; cat "$NOTES"; } \
      >"$OUT/gpu_bench.txt"
    echo "gpu.sh: figures written to $OUT/gpu_bench.txt"
  fi
  rm -rf "$SCRATCH"
}
trap write_table EXIT

nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader 2>/dev/null || true
say "build wmap_h2d_bench ($BUILD, ${WMAP_BUILD_TYPE:-Release}, -j$JOBS)"
LOG="$BUILD/gpu_bench_build.log"
if ! { timeout "$(left)" cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE="${WMAP_BUILD_TYPE:-Release}" -DWMAP_CUDA=ON \
  -DWMAP_BUILD_PYTHON=OFF -DWMAP_MPI=OFF && timeout "$(left)" cmake --build "$BUILD" -j "$JOBS" --target wmap_h2d_bench; } >"$LOG" 2>&1; then
  tail -n 60 "$LOG"
  note "build of wmap_h2d_bench failed (log: $LOG)"
  exit 1
fi
say "copy-engine baseline"
if ! H2D=$(timeout 120 "$BUILD/bin/wmap_h2d_bench" 1024 5 2>"$SCRATCH/h2d_error.txt"); then
  note "no usable GPU (wmap_h2d_bench failed): $(cat "$SCRATCH/h2d_error.txt")"
  H2D=""
  exit 3
fi
echo "$H2D"
[[ -n ${OUT:-} ]] && echo "$H2D" >"$OUT/h2d_baseline.txt"

say "build the CLI, plugins and tests"
if ! timeout "$(left)" cmake --build "$BUILD" -j "$JOBS" --target wmap_cli wmap_tests >>"$LOG" 2>&1; then
  tail -n 60 "$LOG"
  note "build failed or ran out of budget after $(elapsed)s (log: $LOG)"
  exit 1
fi
WMAP="$BUILD/bin/wmap"

say "GPU and fake-runtime tests"
TEST_LOG="$BUILD/gpu_tests.log"
if ! timeout "$(($(left) > 150 ? 150 : $(left)))" "$BUILD/tests/wmap_tests" \
  --gtest_filter='GpuLoad.*:GpuDevice.*:FakeCuda*:StagingRing.*:ScaleInversion.*' --gtest_brief=1 >"$TEST_LOG" 2>&1; then
  STATUS=1
  note "GPU tests FAILED or timed out (log: $TEST_LOG)"
fi
tail -n 40 "$TEST_LOG"
[[ -n ${OUT:-} ]] && cp "$TEST_LOG" "$OUT/gpu_tests.log"

for preset in $PRESETS; do
  if (($(left) < 40)); then
    note "skipped $preset: $(left)s of the ${BUDGET}s budget left"
    continue
  fi
  ckpt="$SCRATCH/$preset"
  case $preset in
    big-params) synth_flags="--preset 1g --vocab 131072" ;;
    *) synth_flags="--preset $preset" ;;
  esac
  # shellcheck disable=SC2086
  if ! timeout "$(left)" "$WMAP" -q synth llama "$ckpt" $synth_flags >/dev/null; then
    note "synth $preset failed"
    STATUS=1
    continue
  fi
  say "load $preset ($(du -sh "$ckpt" | cut -f1))"
  cat "$ckpt"/*.safetensors >/dev/null  # warm page cache: the copy to the GPU is what is measured
  for ((r = 0; r < RUNS; r++)); do
    for variant in "cuda:0|" "cuda:0|--read-workers 8 --load-workers 8" "host|"; do
      device=${variant%%|*}
      extra=${variant#*|}
      if (($(left) < 15)); then
        note "skipped $preset --device $device $extra run $((r + 1)): out of budget"
        continue
      fi
      # A failed or hung load is reported and skipped: the other figures still come back.
      # shellcheck disable=SC2086
      if ! line=$(timeout "$(($(left) > 120 ? 120 : $(left)))" "$WMAP" -q load "$ckpt" --device "$device" --json $extra \
        2>"$SCRATCH/load_err.txt" | sed -n '$p') || [[ -z $line ]]; then
        note "load $preset --device $device $extra FAILED: $(tail -n 3 "$SCRATCH/load_err.txt")"
        STATUS=1
        continue
      fi
      python3 -c 'import json,sys; j=json.loads(sys.argv[4]); print(sys.argv[1], sys.argv[2], sys.argv[3], j["gbps"], j["stream_gbps"], j["bytes_loaded"], j["seconds"], j["setup_seconds"], j["device_open_seconds"], sep="\t")' \
        "$preset" "$device" "${extra:-defaults}" "$line" >>"$RESULTS"
      [[ -n ${OUT:-} ]] && cp "$RESULTS" "$OUT/gpu_bench_runs.tsv"
    done
  done
  rm -rf "$ckpt"
done

say "done"
exit $STATUS
