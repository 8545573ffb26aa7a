// What the weight cache's full digest costs (issue 26, review F2): XXH3-64 over a buffer, against
// the machine's own limit measured in the same run (memcpy of the same bytes, and a plain read
// of them summing 64-bit words). Prints GB/s, the ratio digest / read, and milliseconds per GB:
// what a cache hit of a rank's parameters pays per GB held.
//   wmap_digest_bench [MiB=1024] [runs=7]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "wmap/util/xxh3.h"

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

}  // namespace

int main(int argc, char** argv) {
  const uint64_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 7;
  const uint64_t bytes = mib << 20;
  std::vector<std::byte> src(bytes), dst(bytes);
  for (uint64_t i = 0; i < bytes; i += 8) {
    const uint64_t v = i * 0x9E3779B97F4A7C15ull;
    std::memcpy(src.data() + i, &v, std::min<uint64_t>(8, bytes - i));
  }
  std::memset(dst.data(), 1, bytes);  // faulted in: the copy measures bandwidth, not page faults
  volatile uint64_t sink = 0;
  const double copy = best_seconds(runs, [&] { std::memcpy(dst.data(), src.data(), bytes); });
  const double read = best_seconds(runs, [&] {
    uint64_t s = 0;
    const auto* w = reinterpret_cast<const uint64_t*>(src.data());
    for (uint64_t i = 0; i < bytes / 8; ++i) s += w[i];
    sink = sink + s;
  });
  const double digest = best_seconds(runs, [&] { sink = sink + wmap::xxh3_64(src); });
  const double gb = static_cast<double>(bytes) / 1e9;
  std::printf("buffer %llu MiB, best of %d runs\n", static_cast<unsigned long long>(mib), runs);
  std::printf("  memcpy          %7.2f GB/s\n", gb / copy);
  std::printf("  read (sum u64)  %7.2f GB/s\n", gb / read);
  std::printf("  xxh3_64         %7.2f GB/s  = %.2fx the read, %.2fx memcpy; %.1f ms per GB held\n", gb / digest,
              read / digest, copy / digest, digest / gb * 1e3);
  return sink == 42 ? 1 : 0;
}
