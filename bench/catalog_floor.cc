// The floor under `wmap inspect` on this machine: what any C++ reader pays to read every
// safetensors header (and the index, with --index) of a checkpoint and parse them with simdjson
// on every core, keeping nothing: no names copied, no records, no sorting, no validation beyond
// the JSON itself. Built and run by bench/catalog_bench.py (c++ -O2 ... -lsimdjson), which times
// it as a whole process next to `wmap inspect` and Python's header parse.
//
//   catalog_floor DIR [--index] [--threads N]   prints the tensor count
#include <fcntl.h>
#include <sys/mman.h>
#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace {

bool pread_all(int fd, char* dst, size_t len, off_t at) {
  for (size_t done = 0; done < len;) {
    const ssize_t n = ::pread(fd, dst + done, len - done, at + static_cast<off_t>(done));
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Tensors in one header: every entry's dtype, shape and offsets are read (as a catalog must).
long parse_header(simdjson::ondemand::parser& parser, std::vector<char>& buf, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  uint64_t n = 0;
  char len[8];
  if (!pread_all(fd, len, 8, 0)) return ::close(fd), -1;
  std::memcpy(&n, len, 8);
  if (buf.size() < n + simdjson::SIMDJSON_PADDING) buf.resize(n + simdjson::SIMDJSON_PADDING);
  const bool ok = pread_all(fd, buf.data(), n, 8);
  ::close(fd);
  if (!ok) return -1;
  long tensors = 0;
  simdjson::ondemand::document doc;
  if (parser.iterate(buf.data(), n, buf.size()).get(doc)) return -1;
  simdjson::ondemand::object root;
  if (doc.get_object().get(root)) return -1;
  for (auto field : root) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return -1;
    if (key == "__metadata__") continue;
    simdjson::ondemand::object t;
    if (field.value().get_object().get(t)) return -1;
    uint64_t sum = 0;
    for (auto f : t) {
      std::string_view k;
      if (f.unescaped_key().get(k)) return -1;
      if (k == "dtype") {
        std::string_view d;
        if (f.value().get_string().get(d)) return -1;
        sum += d.size();
      } else {
        simdjson::ondemand::array a;
        if (f.value().get_array().get(a)) return -1;
        for (auto v : a) {
          uint64_t x;
          if (v.get_uint64().get(x)) return -1;
          sum += x;
        }
      }
    }
    tensors += sum != 0;
  }
  return tensors;
}

// The index read into one huge-page buffer: on these VMs a fresh 4 KiB page (anonymous, or a
// page-cache page mapped in) costs ~10 us, more than parsing what it holds, so the 8.9 MB of
// DeepSeek-R1's index is 5 faults this way and ~2,200 either other way.
long parse_index(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const size_t len = static_cast<size_t>(::lseek(fd, 0, SEEK_END));
  const size_t huge = size_t{2} << 20;
  const size_t cap = (len + simdjson::SIMDJSON_PADDING + huge - 1) / huge * huge;
  void* mem = ::mmap(nullptr, cap + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return ::close(fd), -1;
  char* text = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(mem) + huge - 1) / huge * huge);
  ::madvise(text, cap, MADV_HUGEPAGE);
  const bool ok = pread_all(fd, text, len, 0);
  ::close(fd);
  if (!ok) return -1;
  std::memset(text + len, 0, simdjson::SIMDJSON_PADDING);
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc;
  if (parser.iterate(simdjson::padded_string_view(text, len, cap)).get(doc)) return -1;
  simdjson::ondemand::object map;
  if (doc["weight_map"].get_object().get(map)) return -1;
  long keys = 0;
  for (auto field : map) {
    std::string_view k, v;
    if (field.unescaped_key().get(k) || field.value().get_string().get(v)) return -1;
    keys += !k.empty() && !v.empty();
  }
  return keys;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: catalog_floor DIR [--index] [--threads N]\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  bool index = false;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--index") == 0) index = true;
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = static_cast<unsigned>(std::atoi(argv[++i]));
  }
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  }
  std::atomic<size_t> next{0};
  std::atomic<long> tensors{0};
  std::atomic<bool> failed{false};
  auto work = [&](bool first) {
    if (first && index && parse_index((dir / "model.safetensors.index.json").string()) < 0) failed = true;
    simdjson::ondemand::parser parser;
    std::vector<char> buf;
    for (size_t i; (i = next.fetch_add(1)) < files.size();) {
      const long n = parse_header(parser, buf, files[i]);
      if (n < 0) failed = true;
      tensors += n;
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work, false);
  work(true);
  for (auto& t : pool) t.join();
  if (failed) {
    std::fprintf(stderr, "catalog_floor: a header or the index did not parse\n");
    return 1;
  }
  std::printf("%ld\n", tensors.load());
  return 0;
}
