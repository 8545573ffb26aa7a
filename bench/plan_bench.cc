// In-process timing of what `wmap plan` does after start-up: the catalog (every shard header) and
// the plan (plugin spec, renames, plan, validation, read schedule), repeated in one process so
// the figure is the work and not the process start. malloc keeps what it was given (no trim, no
// mmap'd chunks), so runs after the first reuse warm heap pages as a Python reader timed in a
// loop does; the first run, which pays the first touch of every page, is printed apart.
// Prints the first, best and median of --runs.
//
//   wmap_plan_bench DIR [--runs N] [--tp-size T --tp-rank R --ep-size P] [--target vllm|trtllm]
#include <malloc.h>

#include <algorithm>
#include <climits>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "wmap/loader/loader.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [--runs N] [--tp-size T] [--tp-rank R] [--ep-size P] [--target T]\n", argv[0]);
    return 2;
  }
  wmap::LoaderOptions options;
  options.checkpoint = argv[1];
  options.progress = false;
  int runs = 20;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* v = argv[i + 1];
    if (flag == "--runs") {
      runs = std::atoi(v);
    } else if (flag == "--tp-size") {
      options.layout.tp_size = std::atoi(v);
    } else if (flag == "--tp-rank") {
      options.layout.tp_rank = std::atoi(v);
    } else if (flag == "--ep-size") {
      options.layout.ep_size = std::atoi(v);
    } else if (flag == "--target") {
      options.layout.target = wmap::parse_target(v).value_or(wmap::Target::kTrtllm);
    } else {
      std::fprintf(stderr, "unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  ::mallopt(M_TRIM_THRESHOLD, INT_MAX);
  ::mallopt(M_MMAP_MAX, 0);
  try {
    wmap::LoaderSession session(options);
    std::vector<double> total, catalog, plan;
    for (int r = 0; r < runs; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      auto prepared = session.prepare();
      total.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      catalog.push_back(prepared->catalog_seconds);
      plan.push_back(prepared->plan_seconds);
    }
    auto show = [](const char* what, std::vector<double> v) {
      const double first = v.front();
      std::sort(v.begin(), v.end());
      std::printf("%s first %.6f best %.6f median %.6f\n", what, first, v.front(), v[v.size() / 2]);
    };
    show("catalog", catalog);
    show("plan", plan);
    show("prepare", total);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wmap_plan_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
