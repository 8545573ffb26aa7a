// Drives Run:ai Model Streamer's C API (cpp/streamer/streamer.h, built by bench/peers.sh) the way
// its Python FileStreamer does for a local safetensors checkpoint: one request covering every
// shard, each shard's data section split into one sub-request per tensor (file order, no gaps),
// all landing in one malloc'd host buffer; then one runai_response per tensor.
//
//   runai_harness DIR [fresh|refit] [ROUNDS]
//
// Headers are parsed and runai_start (its thread pool) runs untimed. Timed, per round: fresh:
// malloc of the buffer (fresh pages, faulted by the streamer's reads), the request and every
// response; refit: the buffer is malloc'd and touched first, untimed, and only the request and
// responses are timed. Afterwards every byte is checked against a pread of the shard.
// Prints one JSON line: {"peer","mode","bytes","seconds" (best round),"runs","concurrency",
// "anon_huge_bytes" (THP-backed anonymous memory with the last round's buffer landed),
// "malloc_thp" (whether glibc.malloc.hugetlb=1 took effect, see malloc_thp())}.
// Huge pages come from the caller: GLIBC_TUNABLES=glibc.malloc.hugetlb=1.
#define _RUNAI_STREAMER_SO  // the exported extern "C" symbols
#include "streamer/streamer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace rs = runai::llm::streamer;

namespace {

struct Shard {
  std::string path;
  size_t offset = 0;          // file offset of the first tensor's bytes
  std::vector<size_t> sizes;  // tensor byte sizes in file order, contiguous from offset
  size_t bytes = 0;
};

Shard parse_shard(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  uint64_t hlen = 0;
  if (!f.read(reinterpret_cast<char*>(&hlen), 8)) throw std::runtime_error(path + ": short file");
  std::string header(hlen, '\0');
  if (!f.read(header.data(), static_cast<std::streamsize>(hlen))) throw std::runtime_error(path + ": short header");
  std::vector<std::pair<size_t, size_t>> spans;
  const auto json = nlohmann::json::parse(header);
  for (const auto& [name, info] : json.items()) {
    if (name != "__metadata__") spans.emplace_back(info["data_offsets"][0], info["data_offsets"][1]);
  }
  std::sort(spans.begin(), spans.end());
  Shard s{path, 8 + hlen + (spans.empty() ? 0 : spans.front().first), {}, 0};
  for (size_t i = 0; i < spans.size(); ++i) {
    // Sub-requests are chained from the file offset, so a gap would shift every later tensor
    // (the Python streamer rejects such files too).
    if (i > 0 && spans[i].first != spans[i - 1].second) throw std::runtime_error(path + ": gap between tensors");
    s.sizes.push_back(spans[i].second - spans[i].first);
    s.bytes += s.sizes.back();
  }
  return s;
}

void check(int rc, const char* what) {
  if (rc != 0) throw std::runtime_error(std::string(what) + ": " + rs::runai_response_str(rc));
}

// One request for every shard into buf, then one response per tensor.
void land(void* streamer, std::vector<Shard>& shards, char* buf) {
  std::vector<const char*> paths;
  std::vector<size_t> offsets, bytesizes;
  std::vector<void*> dsts;
  std::vector<unsigned> counts;
  std::vector<size_t*> sizes;
  size_t at = 0, chunks = 0;
  for (auto& s : shards) {
    paths.push_back(s.path.c_str());
    offsets.push_back(s.offset);
    bytesizes.push_back(s.bytes);
    dsts.push_back(buf + at);  // each file's slice of the one buffer, as FileStreamer passes them
    counts.push_back(static_cast<unsigned>(s.sizes.size()));
    sizes.push_back(s.sizes.data());
    at += s.bytes;
    chunks += s.sizes.size();
  }
  check(
      rs::runai_request(streamer, static_cast<unsigned>(shards.size()), paths.data(), offsets.data(), bytesizes.data(),
                        dsts.data(), counts.data(), sizes.data(), nullptr, nullptr, nullptr, nullptr, nullptr),
      "runai_request");
  for (size_t i = 0; i < chunks; ++i) {
    unsigned file = 0, index = 0;
    check(rs::runai_response(streamer, &file, &index), "runai_response");
  }
}

void verify(const std::vector<Shard>& shards, const char* buf) {
  std::vector<char> tmp(16 << 20);
  size_t at = 0;
  for (const auto& s : shards) {
    int fd = open(s.path.c_str(), O_RDONLY);
    if (fd < 0) throw std::runtime_error(s.path + ": open failed");
    for (size_t done = 0; done < s.bytes;) {
      size_t n = std::min(tmp.size(), s.bytes - done);
      if (pread(fd, tmp.data(), n, static_cast<off_t>(s.offset + done)) != static_cast<ssize_t>(n) ||
          std::memcmp(tmp.data(), buf + at + done, n) != 0) {
        throw std::runtime_error(s.path + ": landed bytes differ from pread at " + std::to_string(s.offset + done));
      }
      done += n;
    }
    close(fd);
    at += s.bytes;
  }
}

// Bytes of this process's anonymous memory on transparent huge pages (smaps_rollup).
size_t anon_huge_bytes() {
  std::ifstream f("/proc/self/smaps_rollup");
  for (std::string key; f >> key;) {
    size_t kib = 0;
    if (key == "AnonHugePages:" && f >> kib) return kib << 10;
  }
  return 0;
}

// Whether glibc.malloc.hugetlb=1 took effect: glibc then advises its heap MADV_HUGEPAGE ("hg").
// Debian 12's glibc 2.36 compares the THP mode it reads from sysfs without NUL-terminating it,
// so the tunable works in some processes only; the caller reruns those where it did not.
bool malloc_thp() {
  std::ifstream f("/proc/self/smaps");
  bool heap = false;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmFlags:", 0) == 0) {
      if (heap) return line.find(" hg") != std::string::npos;
    } else if (line.find('-') == line.find_first_not_of("0123456789abcdef")) {
      heap = line.size() >= 6 && line.compare(line.size() - 6, 6, "[heap]") == 0;  // a mapping's first line
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: runai_harness DIR [fresh|refit] [ROUNDS]\n");
    return 2;
  }
  const std::string mode = argc > 2 ? argv[2] : "fresh";
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 1;
  if ((mode != "fresh" && mode != "refit") || rounds < 1) throw std::runtime_error("bad mode or rounds");
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::directory_iterator(argv[1])) {
    if (e.path().extension() == ".safetensors") paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<Shard> shards;
  size_t total = 0;
  for (const auto& p : paths) {
    shards.push_back(parse_shard(p));
    total += shards.back().bytes;
  }
  void* streamer = nullptr;
  check(rs::runai_start(&streamer), "runai_start");
  std::vector<double> runs;
  size_t huge = 0;
  for (int r = 0; r < rounds; ++r) {
    char* buf = nullptr;
    if (mode == "refit") {
      buf = static_cast<char*>(std::malloc(total));
      std::memset(buf, 1, total);  // touched once by user space, as a refit's destination is
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (!buf) buf = static_cast<char*>(std::malloc(total));
    if (!buf) throw std::runtime_error("malloc failed");
    land(streamer, shards, buf);
    runs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    huge = anon_huge_bytes();
    verify(shards, buf);
    std::free(buf);
  }
  rs::runai_end(streamer);
  const char* conc = std::getenv("RUNAI_STREAMER_CONCURRENCY");
  nlohmann::json out = {{"peer", "runai"},
                        {"mode", mode},
                        {"bytes", total},
                        {"seconds", *std::min_element(runs.begin(), runs.end())},
                        {"runs", runs},
                        {"concurrency", conc ? std::atoi(conc) : 16},
                        {"anon_huge_bytes", huge},
                        {"malloc_thp", malloc_thp()}};
  std::puts(out.dump().c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "runai_harness: %s\n", e.what());
  return 1;
}
