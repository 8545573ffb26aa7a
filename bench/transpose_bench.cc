// What a transposing copy costs (issue 42, "transforms at memory speed"): copy_2d_strided of a
// row-major [R, C] slab into [C, R] (Llama 4's per-expert [H, 2I] BF16 gate/up, 4-byte packed
// int4 words), against the machine's own limit in the same run: memcpy of the same bytes between
// the same two huge-page buffers. Prints GB/s (bytes of the slab per second) and the ratio.
//   wmap_transpose_bench [runs=7] [R C ELEM]...   (default: 2048 2048 2, 5120 16384 2, 4096 1536 4)
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "wmap/format/strided_copy.h"

namespace {

template <class Fn>
double best_seconds(int runs, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// Touched, huge-page backed where the kernel gives them (as wmap's host buffers are).
std::byte* buffer(uint64_t bytes) {
  constexpr uint64_t kHuge = 2 << 20;
  const uint64_t n = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, n);
  if (p == nullptr) {
    std::fprintf(stderr, "cannot allocate %llu bytes\n", static_cast<unsigned long long>(n));
    std::exit(1);
  }
  ::madvise(p, n, MADV_HUGEPAGE);
  std::memset(p, 1, n);
  return static_cast<std::byte*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  std::vector<uint64_t> shapes;
  for (int i = 2; i + 2 < argc; i += 3) {
    for (int k = 0; k < 3; ++k) shapes.push_back(std::strtoull(argv[i + k], nullptr, 10));
  }
  if (shapes.empty()) shapes = {2048, 2048, 2, 5120, 16384, 2, 4096, 1536, 4};
  std::printf(
      "| slab [R, C] | elem | MiB | transpose GB/s | memcpy GB/s | transpose / memcpy |\n|---|---|---|---|---|---|\n");
  for (size_t s = 0; s + 2 < shapes.size(); s += 3) {
    const uint64_t rows = shapes[s], cols = shapes[s + 1], elem = shapes[s + 2];
    const uint64_t bytes = rows * cols * elem;
    std::byte* src = buffer(bytes);
    std::byte* dst = buffer(bytes);
    for (uint64_t i = 0; i < bytes; ++i) src[i] = static_cast<std::byte>(i * 131 + i / 7);
    // out[j][i] = src[i][j]: C output rows, each gathering one element of every source row.
    const double t = best_seconds(runs, [&] { wmap::copy_2d_strided(src, cols, rows, elem, cols * elem, elem, dst); });
    for (uint64_t i = 0; i < rows; i += rows / 7 + 1) {  // a spot check that it transposed
      for (uint64_t j = 0; j < cols; j += cols / 5 + 1) {
        if (std::memcmp(dst + (j * rows + i) * elem, src + (i * cols + j) * elem, elem) != 0) {
          std::fprintf(stderr, "wrong element at [%llu, %llu]\n", static_cast<unsigned long long>(i),
                       static_cast<unsigned long long>(j));
          return 1;
        }
      }
    }
    const double m = best_seconds(runs, [&] { std::memcpy(dst, src, bytes); });
    std::printf("| %llu x %llu | %llu | %.0f | %.2f | %.2f | %.2f |\n", static_cast<unsigned long long>(rows),
                static_cast<unsigned long long>(cols), static_cast<unsigned long long>(elem), bytes / 1048576.0,
                bytes / t / 1e9, bytes / m / 1e9, m / t);
    std::free(src);
    std::free(dst);
  }
  return 0;
}
