#pragma once
// The one I/O interface of wmap, with two implementations: read-only memory maps (zero-copy
// views) and pread (for files that may change under us: a truncated mapped file raises SIGBUS,
// a pread returns an error). A FileSystem opens files, so tests can inject faults.
// RandomAccessFile objects are thread-safe for concurrent reads.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

namespace wmap {

enum class IoMode { kMmap, kPread };

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  virtual const std::string& path() const = 0;
  virtual uint64_t size() const = 0;
  // Reads exactly dst.size() bytes at `offset`; throws kIo naming the file and offset.
  virtual void read(uint64_t offset, std::span<std::byte> dst) const = 0;
  // A zero-copy view of [offset, offset + len) when the file is memory-mapped; empty otherwise.
  virtual std::span<const std::byte> view(uint64_t offset, uint64_t len) const = 0;
  // Hints that [offset, offset + len) is no longer needed (its pages may be dropped).
  virtual void release(uint64_t offset, uint64_t len) const = 0;
  // Hints that [offset, offset + len) will be read soon.
  virtual void will_need(uint64_t offset, uint64_t len) const = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  virtual std::unique_ptr<RandomAccessFile> open(const std::filesystem::path& path, IoMode mode) const = 0;
  // The process-wide POSIX file system.
  static const FileSystem& posix();
};

// Identity of a file on disk, used to refuse shards changed since a catalog was saved.
struct FileSignature {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;
  bool operator==(const FileSignature&) const = default;
};
FileSignature stat_signature(const std::filesystem::path& path);

}  // namespace wmap
