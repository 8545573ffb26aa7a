#include "test_util.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace wmap::test {

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          ("wmap_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
           std::to_string(std::random_device{}()));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string safetensors_bytes(const std::string& header_json, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header_json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header_json + data;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

CommandResult run_command(const std::string& command) {
  TempDir tmp;
  const auto out_file = tmp / "stdout", err_file = tmp / "stderr";
  const std::string full = command + " >" + shell_quote(out_file.string()) + " 2>" + shell_quote(err_file.string());
  const int status = std::system(full.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.out = read_file(out_file);
  r.err = read_file(err_file);
  return r;
}

CommandResult run_wmap(const std::string& args) { return run_command(shell_quote(WMAP_CLI_PATH) + " -q " + args); }

std::filesystem::path synth_checkpoint(const std::filesystem::path& dir, const std::string& family,
                                       const std::string& name, const std::string& args) {
  const auto ckpt = dir / name;
  const auto r = run_wmap("synth " + family + " " + shell_quote(ckpt.string()) + " " + args);
  EXPECT_EQ(r.exit_code, 0) << family << " " << args << "\n" << r.err;
  return ckpt;
}

std::filesystem::path sparse_layout(const std::string& layout, const std::filesystem::path& out) {
  const auto r =
      run_command(shell_quote(python()) + " " + shell_quote((source_dir() / "tests/python/sparse_layout.py").string()) +
                  " " + shell_quote((testdata_dir() / "layouts" / layout).string()) + " " + shell_quote(out.string()));
  EXPECT_EQ(r.exit_code, 0) << layout << "\n" << r.err;
  return out;
}

std::filesystem::path testdata_dir() { return WMAP_TESTDATA_DIR; }
std::filesystem::path source_dir() { return WMAP_SOURCE_DIR; }
std::string python() { return WMAP_PYTHON; }

std::string reference_mismatches(const std::filesystem::path& ckpt, const std::filesystem::path& dump,
                                 const std::string& layout) {
  auto check = run_command(python() + " " + shell_quote((source_dir() / "tests/python/reference.py").string()) +
                           " check " + shell_quote(ckpt.string()) + " " + shell_quote(dump.string()) + " " + layout);
  return check.exit_code == 0 && check.out.find(" 0 mismatches") != std::string::npos ? "" : check.out + check.err;
}

void expect_rank_matches(const std::filesystem::path& ckpt, uint32_t t, uint32_t r, const std::string& layout,
                         const std::string& load_flags, const std::string& source) {
  TempDir out;
  const auto dump = out / "rank.safetensors";
  const std::string flags = "--tp-size " + std::to_string(t) + " --tp-rank " + std::to_string(r) + " " + layout;
  auto load = run_wmap("load " + shell_quote(source.empty() ? ckpt.string() : source) + " " + flags + " " + load_flags +
                       " --dump " + shell_quote(dump.string()));
  ASSERT_EQ(load.exit_code, 0) << source << " " << flags << " " << load_flags << "\n" << load.err;
  EXPECT_EQ(reference_mismatches(ckpt, dump, flags), "") << source << " " << flags << " " << load_flags;
}

void expect_every_rank_matches(const std::filesystem::path& ckpt, uint32_t t, const std::string& layout) {
  for (uint32_t r = 0; r < t; ++r) expect_rank_matches(ckpt, t, r, layout);
}

HostDestinations host_destinations(const LoadPlan& plan, std::byte fill) {
  HostDestinations out;
  for (const PlannedParam& p : plan.params()) {
    if (p.absent || !p.alias_of.empty()) continue;
    auto& bytes = out.memory[p.name];
    bytes.assign(p.nbytes, fill);
    Destination d;
    d.name = p.name;
    d.data = bytes.data();
    d.bytes = p.nbytes;
    d.shape = p.shape;
    d.dtype = p.dtype;
    d.element_bytes = (dtype_bits(p.dtype) + 7) / 8;
    d.device = "host";
    out.table.push_back(std::move(d));
  }
  return out;
}

std::vector<std::string> shard_files(const std::filesystem::path& ckpt) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(ckpt))
    if (e.path().extension() == ".safetensors") out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

LoaderOptions rank_options(const std::filesystem::path& ckpt, uint32_t tp, uint32_t rank, uint32_t ep, Target target) {
  LoaderOptions lo;
  lo.checkpoint = ckpt;
  lo.layout.tp_size = tp;
  lo.layout.tp_rank = rank;
  lo.layout.ep_size = ep;
  lo.layout.target = target;
  lo.progress = false;
  return lo;
}

uint64_t resident_bytes(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st {};
  uint64_t resident = 0;
  const auto size = ::fstat(fd, &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
  void* map = size > 0 ? ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (map != MAP_FAILED) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> in((size + page - 1) / page);
    if (::mincore(map, size, in.data()) == 0) {
      for (size_t i = 0; i < in.size(); ++i) {
        if (in[i] & 1) resident += std::min(page, size - i * page);
      }
    }
    ::munmap(map, size);
  }
  ::close(fd);
  return resident;
}

void evict(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace wmap::test
