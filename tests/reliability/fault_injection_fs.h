#pragma once
// A FileSystem for tests that wraps another one (FileSystem::posix() by default) and injects
// faults, in the spirit of LevelDB's ErrorEnv and RocksDB's FaultInjectionTestFS:
//   - seeded one-in-N read errors (every read() and view() is a candidate),
//   - an error (EIO by default) for any read or view covering a given byte of a given file,
//   - short reads: a file that ends early, at a given offset, as a file shrunk under us would,
//   - errors when opening a given file,
//   - a real truncation of the file on disk right after it was opened (for the SIGBUS test).
// Injected errors look like the real ones: a wmap::Error (kIo) "PATH: pread at offset N failed:
// Input/output error", naming the file and the faulting byte.
//
// Files are matched by a substring of their path ("" matches every file). Thread-safe: the
// executor and the catalog read from several threads at once. Must outlive the files it opened.
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "wmap/io/file_io.h"

namespace wmap::test {

class FaultInjectionFs final : public FileSystem {
 public:
  explicit FaultInjectionFs(const FileSystem& base = FileSystem::posix()) : base_(base) {}

  // Each read/view fails with `err` with probability 1/n, from a generator seeded with `seed`.
  void fail_one_in(uint32_t n, uint64_t seed, int err = EIO);
  // A read or view of a file whose path contains `file` that covers byte `offset` fails with `err`.
  void fail_at(std::string file, uint64_t offset, int err = EIO);
  // Reads of `file` return end-of-file at `offset`: a read covering it gets the bytes before it
  // and then "unexpected end of file", as pread on a file shrunk after it was opened.
  void short_read_at(std::string file, uint64_t offset);
  // open() of a file whose path contains `file` fails with `err`.
  void fail_open(std::string file, int err = EIO);
  // After opening `file`, truncate it on disk to `size` bytes (the open file keeps its old size).
  void truncate_after_open(std::string file, uint64_t size);
  // After opening `file`, replace it on disk by a different file (a copy with one byte appended,
  // renamed over it: a new inode), as a download or a conversion finishing under a reader would.
  void replace_after_open(std::string file);
  // Turns every fault off (counters are kept).
  void clear();

  std::unique_ptr<RandomAccessFile> open(const std::filesystem::path& path, IoMode mode) const override;
  // Counted, then read through this file system's open() and read(), so every fault above
  // reaches the core's whole-file reads (catalog, config.json, mapping files, index.json).
  std::string read_whole_file(const std::filesystem::path& path, uint64_t max_bytes, size_t padding = 0) const override;

  // What happened so far: calls seen and faults injected (tests assert a fault was really hit).
  uint64_t opens() const { return opens_; }
  uint64_t reads() const { return reads_; }
  uint64_t views() const { return views_; }  // view() and populate() calls: mapped-range accesses
  uint64_t faults() const { return faults_; }
  uint64_t whole_file_reads() const { return whole_reads_; }
  uint64_t signatures() const { return signatures_; }  // RandomAccessFile::signature() calls
  // Paths of the files currently open through this file system.
  int open_files() const { return open_files_; }

 private:
  friend class FaultFile;
  struct Fault {
    enum Kind { kError, kShortRead, kOpen, kTruncate, kReplace } kind;
    std::string file;
    uint64_t offset = 0;
    int err = EIO;
  };
  // Throws when [offset, offset + len) of `path` must fail; `len` bytes were asked.
  void check(const std::string& path, uint64_t offset, uint64_t len, bool view) const;

  const FileSystem& base_;
  mutable std::mutex mu_;
  std::vector<Fault> faults_list_;
  uint32_t one_in_ = 0;
  int one_in_err_ = EIO;
  mutable std::mt19937_64 rng_;
  mutable std::atomic<uint64_t> opens_{0}, reads_{0}, views_{0}, faults_{0}, whole_reads_{0}, signatures_{0};
  mutable std::atomic<int> open_files_{0};
};

}  // namespace wmap::test
