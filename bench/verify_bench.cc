// What shard verification costs, against limits measured in the same run (issue 29):
//   sha/core   one core's SHA-256 rate (OpenSSL, over a 64 MiB buffer already in memory)
//   read       every shard read with pread in 4 MiB chunks, files in parallel on every core,
//              nothing else done with the bytes (page cache warm: run after a first pass)
//   verify     verify_files (what `wmap verify` runs): the same reads, each chunk hashed
//   goal       verify >= 0.9 x min(read, cores x sha/core)
// and the cost of `load --verify` on a TP1 host load (in process, best of --runs):
//   load            LoaderSession::load, verify off
//   load --verify   hashed as read
//   load + verify   the naive alternative: load, then a second pass over every shard
//
//   wmap_verify_bench DIR [--runs N] [--chunk-kib N (verify's read size)] [--io pread|mmap]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "wmap/catalog/shard_digests.h"
#include "wmap/catalog/shard_set.h"
#include "wmap/loader/loader.h"
#include "wmap/util/sha256.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

template <class Fn>
double best_of(int runs, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, since(t0));
  }
  return best;
}

// Every file read in 4 MiB chunks, files claimed by `threads` workers: verify's access pattern
// without the hash.
void read_all(const std::vector<std::string>& paths, unsigned threads) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    std::vector<char> buf(4 << 20);
    for (size_t i; (i = next++) < paths.size();) {
      const int fd = ::open(paths[i].c_str(), O_RDONLY);
      if (fd < 0) std::abort();
      off_t at = 0;
      for (ssize_t n; (n = ::pread(fd, buf.data(), buf.size(), at)) > 0;) at += n;
      ::close(fd);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [--runs N]\n", argv[0]);
    return 2;
  }
  int runs = 5;
  wmap::VerifyOptions vo;  // verify's defaults unless --chunk-kib
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--runs") runs = std::max(1, std::atoi(argv[i + 1]));
    if (std::string(argv[i]) == "--chunk-kib") vo.chunk_bytes = uint64_t(std::atoi(argv[i + 1])) << 10;
    if (std::string(argv[i]) == "--io")
      vo.io = std::string(argv[i + 1]) == "mmap" ? wmap::IoMode::kMmap : wmap::IoMode::kPread;
  }
  try {
    const wmap::ShardSet set = wmap::discover_shards(argv[1]);
    std::vector<std::string> paths;
    uint64_t bytes = 0;
    for (size_t i = 0; i < set.files.size(); ++i) {
      paths.push_back(set.path_of(static_cast<uint32_t>(i)).string());
      bytes += std::filesystem::file_size(paths.back());
    }
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const double gb = static_cast<double>(bytes) / 1e9;

    std::vector<std::byte> block(64 << 20, std::byte{1});
    const double sha_s = best_of(runs, [&] {
      wmap::Sha256 sha;
      sha.update(block);
      (void)sha.hex();
    });
    const double sha_core = static_cast<double>(block.size()) / 1e9 / sha_s;

    read_all(paths, cores);  // warm the page cache
    const double read_s = best_of(runs, [&] { read_all(paths, cores); });
    const std::vector<std::optional<wmap::ExpectedDigest>> none(set.files.size());
    const double verify_s = best_of(runs, [&] { wmap::verify_files(set.root, set.files, none, vo); });
    const double limit = std::min(gb / read_s, cores * sha_core);

    wmap::LoaderOptions lo;
    lo.checkpoint = argv[1];
    lo.progress = false;
    wmap::LoaderSession session(lo);
    auto prepared = session.prepare();
    auto host = wmap::make_device(wmap::DeviceSpec::parse("host"));
    wmap::ExecOptions plain, verified;
    verified.verify = wmap::ExecOptions::Verify::kRead;
    double load_s = 1e30, load_verify_s = 1e30, load_then_verify_s = 1e30;
    for (int r = 0; r < runs; ++r) {  // interleaved, so drift hits all three alike
      auto t0 = Clock::now();
      { auto m = session.load(*prepared, *host, plain); }
      load_s = std::min(load_s, since(t0));
      t0 = Clock::now();
      { auto m = session.load(*prepared, *host, verified); }
      load_verify_s = std::min(load_verify_s, since(t0));
      t0 = Clock::now();
      {
        auto m = session.load(*prepared, *host, plain);
        wmap::verify_files(set.root, set.files, none);
      }
      load_then_verify_s = std::min(load_then_verify_s, since(t0));
    }
    std::printf("checkpoint %s: %zu shards, %.3f GB; %u cores; best of %d\n", argv[1], paths.size(), gb, cores, runs);
    std::printf("  sha256, one core       %7.2f GB/s\n", sha_core);
    std::printf("  read limit (warm)      %7.2f GB/s (pread, files in parallel on %u threads)\n", gb / read_s, cores);
    std::printf("  verify                 %7.2f GB/s = %.2fx min(read, %u x sha256) = %.2f GB/s (goal >= 0.9)\n",
                gb / verify_s, gb / verify_s / limit, cores, limit);
    std::printf("  TP1 load               %7.3f s (%.2f GB/s)\n", load_s, gb / load_s);
    std::printf("  TP1 load --verify      %7.3f s (%.2f GB/s): %.2fx the load's time\n", load_verify_s,
                gb / load_verify_s, load_verify_s / load_s);
    std::printf("  TP1 load, then verify  %7.3f s: %.2fx the load's time (the two-pass alternative)\n",
                load_then_verify_s, load_then_verify_s / load_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wmap_verify_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
