#pragma once
// Helpers shared by the tests: scratch directories, raw file writing, running the CLI and
// the independent Python reference.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "wmap/loader/loader.h"

namespace wmap::test {

// A fresh directory under the system temp folder, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

void write_file(const std::filesystem::path& path, const std::string& bytes);
std::string read_file(const std::filesystem::path& path);

// The page cache, as fincore sees it: bytes of `file` resident (mincore over a read-only mapping;
// 0 when it cannot be opened), and dropping a file's clean pages (POSIX_FADV_DONTNEED). A tmpfs
// keeps its pages whatever we advise: callers check that evict() took before measuring.
uint64_t resident_bytes(const std::filesystem::path& file);
void evict(const std::filesystem::path& file);

// A raw safetensors file: 8-byte little-endian length, the header text as given, then `data`.
std::string safetensors_bytes(const std::string& header_json, const std::string& data);

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs `command` through /bin/sh, capturing stdout and stderr.
CommandResult run_command(const std::string& command);
// Runs the wmap CLI with the given (shell-quoted by the caller) arguments.
CommandResult run_wmap(const std::string& args);
// `wmap synth FAMILY DIR/NAME ARGS` (expects success); returns the checkpoint folder.
std::filesystem::path synth_checkpoint(const std::filesystem::path& dir, const std::string& family,
                                       const std::string& name, const std::string& args = "");
// tests/data/layouts/LAYOUT rebuilt as sparse files in OUT by tests/python/sparse_layout.py
// (expects success); returns OUT.
std::filesystem::path sparse_layout(const std::string& layout, const std::filesystem::path& out);
std::string shell_quote(const std::string& s);

std::filesystem::path testdata_dir();  // tests/data
std::filesystem::path source_dir();
std::string python();  // /usr/bin/python3

// Runs tests/python/reference.py on a dump of `ckpt` with `layout` (the CLI's layout flags):
// empty when every byte matches, else the reference's report.
std::string reference_mismatches(const std::filesystem::path& ckpt, const std::filesystem::path& dump,
                                 const std::string& layout);

// Loads rank `r` of `t` of `ckpt` through `wmap load` with more `layout` flags (given to the
// reference too, e.g. "--ep-size 2 --target vllm") and `load_flags` (wmap only, e.g. "--io
// pread"), and checks the dump bit for bit against the reference. Failures are EXPECTs naming
// the layout.
// `source`: what wmap loads when it is not `ckpt` itself (the same checkpoint behind a URL).
void expect_rank_matches(const std::filesystem::path& ckpt, uint32_t t, uint32_t r, const std::string& layout = "",
                         const std::string& load_flags = "", const std::string& source = "");
// Every rank 0..t-1 of `ckpt` as above.
void expect_every_rank_matches(const std::filesystem::path& ckpt, uint32_t t, const std::string& layout = "");

// Host memory for every planned parameter of `plan` (but tied aliases and absent ones), filled
// with `fill`, and the destination table over it: what an engine hands load_into. The memory
// does not move while the object lives (map nodes are stable).
struct HostDestinations {
  std::map<std::string, std::vector<std::byte>> memory;
  std::vector<Destination> table;
};
HostDestinations host_destinations(const LoadPlan& plan, std::byte fill = std::byte{0});

// The .safetensors files of a checkpoint folder, sorted by name.
std::vector<std::string> shard_files(const std::filesystem::path& ckpt);

// A LoaderSession's options for rank `rank` of `tp` of `ckpt`, without progress output.
LoaderOptions rank_options(const std::filesystem::path& ckpt, uint32_t tp, uint32_t rank, uint32_t ep = 1,
                           Target target = Target::kTrtllm);

}  // namespace wmap::test
