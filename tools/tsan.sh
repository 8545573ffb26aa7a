#!/usr/bin/env bash
# ThreadSanitizer run of the executor tests (both pools, both I/O paths, the SIGBUS guard) and the
# CUDA device's staging ring:
# configures BUILD_DIR (default build-tsan) with -DWMAP_SANITIZE=thread, builds the library, the
# CLI, the plugins and wmap_tests, and runs the executor tests. The CLI loads those tests start
# are TSan builds too, so a race in a child load fails its test (TSan exits 66). Any report fails.
#
#   tools/tsan.sh [BUILD_DIR]      WMAP_JOBS=N (default nproc), WMAP_TSAN_FILTER=<gtest filter>,
#                                  WMAP_TSAN_SOURCES=<regex of the test files that hold those tests>
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-${WMAP_TSAN_BUILD_DIR:-build-tsan}}
JOBS=${WMAP_JOBS:-$(nproc)}
# RemoteFaults.*: the remote reads (libcurl on every read worker, resumed retries) in a TSan CLI.
FILTER=${WMAP_TSAN_FILTER:-'Executor*:PlanSchedule*:FamilyLoad.IoPathsAndWorkerCountsGiveTheSameBytes:StagingRing.*:Destinations.*:WeightCacheTest.*:FakeCuda.*:RemoteFaults.AResetOrAShortBody*:RemoteFaults.ServerErrors*:RemoteFaults.ASavedCatalog*:RemoteState.AServerThatTrickles*:StalePlan.*'}
# -O1 -g1 as in tools/sanitize.sh (line tables suffice for reports, and build faster).
# No CUDA: TSan cannot see the synchronisation inside the (uninstrumented) CUDA driver and runtime.
# The CUDA device's staging ring is CUDA-free and runs here with fake fences (StagingRing.*).
# Only the test files the filter's suites live in are compiled (WMAP_TEST_SOURCES_REGEX).
SOURCES=${WMAP_TSAN_SOURCES:-'exec/|device/(staging_ring|fake_cuda)_test|loader/(weight_cache|stale_plan)_test|plugins/family_load_test|remote/remote_(load|state)_test'}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" \
  -DWMAP_SANITIZE=thread -DWMAP_BUILD_PYTHON=OFF -DWMAP_CUDA=OFF "-DWMAP_TEST_SOURCES_REGEX=$SOURCES" >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target wmap_tests wmap_cli wmap_plugin_llama wmap_plugin_deepseek_v3 \
  wmap_plugin_gpt_oss wmap_plugin_llama4 wmap_plugin_qwen3_next
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
"$BUILD/tests/wmap_tests" --gtest_filter="$FILTER"
echo "wmap: TSan executor tests passed"
