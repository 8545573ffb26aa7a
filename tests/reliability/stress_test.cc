// 50 consecutive loads in one process through the library API (a fresh LoaderSession each time,
// so plugins are loaded and unloaded too, alternating mmap and pread): no growth in open file
// descriptors, memory mappings or resident memory, and every load bit-identical to the first.
#include <gtest/gtest.h>
#include <malloc.h>

#include <fstream>

#include "reliability/reliability_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define WMAP_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WMAP_TEST_ASAN 1
#endif
#endif

namespace wmap::test {
namespace {

int mapping_count() {
  std::ifstream in("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

TEST(Stress, FiftyLoadsDoNotGrowRssFdsOrMappings) {
  // One malloc arena: glibc gives a thread that finds the arenas busy a new one (a new heap
  // mapping each, up to 8 per core), which under a loaded ctest -j2 grew the mapping count by
  // up to 6 over the 50 loads and looked like a leak. The leaks this test looks for (shard
  // maps, plugins, parameter buffers) are mappings of their own either way.
  ::mallopt(M_ARENA_MAX, 1);
  TempDir dir;
  const auto ckpt = dir / "ckpt";
  synth("llama", ckpt, "--preset small --shards 3");
  std::vector<std::byte> first;
  uint64_t first_bytes = 0;
  auto load_once = [&](int i) {
    LoaderSession session(loader_options(ckpt));
    auto prepared = session.prepare();
    auto device = make_device("host");
    ExecOptions exec;
    exec.io = i % 2 ? IoMode::kMmap : IoMode::kPread;
    exec.load_workers = 1 + i % 3;
    LoadedModel model = session.load(*prepared, *device, exec);
    ASSERT_FALSE(model.params.empty());
    // A digest of every parameter: all bytes, folded.
    std::vector<std::byte> digest(64);
    uint64_t bytes = 0;
    for (const auto& p : model.params) {
      std::vector<std::byte> host(p.buffer->size());
      device->copy_to_host(*p.buffer, host);
      for (size_t k = 0; k < host.size(); ++k) digest[k % 64] ^= host[k] ^ std::byte(k * 131);
      bytes += host.size();
    }
    if (first.empty()) {
      first = digest;
      first_bytes = bytes;
    }
    ASSERT_EQ(bytes, first_bytes) << "load " << i;
    ASSERT_EQ(digest, first) << "load " << i << " differs from the first";
  };
  for (int i = 0; i < 4; ++i) load_once(i);  // warm-up: allocator arenas, plugin first use
  const uint64_t rss0 = rss_pages();
  const int fds0 = open_fds(), maps0 = mapping_count();
  for (int i = 0; i < 50; ++i) {
    load_once(i);
    if (HasFatalFailure()) return;
  }
  const uint64_t rss1 = rss_pages();
  const int fds1 = open_fds(), maps1 = mapping_count();
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const double grown_mib = (static_cast<double>(rss1) - static_cast<double>(rss0)) * page / (1 << 20);
  RecordProperty("rss_growth_kib", std::to_string(static_cast<int64_t>(grown_mib * 1024)));
  std::printf("50 loads of %.1f MiB: RSS %+.1f MiB, fds %d -> %d, mappings %d -> %d\n",
              static_cast<double>(first_bytes) / (1 << 20), grown_mib, fds0, fds1, maps0, maps1);
  EXPECT_EQ(fds1, fds0) << "file descriptors leaked";
#ifndef WMAP_TEST_ASAN
  EXPECT_LE(maps1, maps0 + 4) << "memory mappings leaked (shards or plugins not unmapped)";
  // One leaked model is ~first_bytes; 50 loads leaking anything per load grow far beyond this.
  EXPECT_LT(grown_mib, 8.0 + static_cast<double>(first_bytes) / (1 << 20) / 2) << "RSS grew over 50 loads";
#else
  // ASan keeps freed memory in quarantine (and maps new regions for it), so RSS and the mapping
  // count are meaningless; LeakSanitizer checks leaks at exit.
  std::printf("(ASan build: RSS and mapping bounds not checked; LeakSanitizer checks leaks at exit)\n");
#endif
}

}  // namespace
}  // namespace wmap::test
