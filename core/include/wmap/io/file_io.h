#pragma once
// The one I/O interface of wmap, with two implementations: read-only memory maps (zero-copy
// views) and pread (for files that may change under us: a truncated mapped file raises SIGBUS,
// a pread returns an error). A FileSystem opens files, so tests can inject faults.
// RandomAccessFile objects are thread-safe for concurrent reads.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

// kAuto is resolved by the executor (see choose_io_mode) into the path its reads take; files are
// then opened with kAuto: reads by pread, and a view() maps a file that can be mapped (a local
// one; empty elsewhere), which the executor asks for its rearranging copies only.
enum class IoMode { kMmap, kPread, kAuto };
std::string_view io_mode_name(IoMode mode);

// One contiguous piece of a scattered read: `len` file bytes at `offset` land at `dst`.
struct ReadSegment {
  uint64_t offset = 0;
  uint64_t len = 0;
  std::byte* dst = nullptr;
};

// Identity of a file, used to refuse shards changed since a catalog was saved: size, mtime and
// inode on a disk; size and the server's ETag for a remote object (mtime and inode 0).
struct FileSignature {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;
  std::string etag;  // remote objects only, as the server sent it (quotes included)
  bool operator==(const FileSignature&) const = default;
  // Nothing recorded (a catalog saved without signatures): there is nothing to compare with.
  bool unknown() const { return *this == FileSignature{}; }
};

// What differs between a recorded signature and the current one, "size 10 -> 12; inode 5 -> 9",
// for messages; empty when they are equal.
std::string signature_change(const FileSignature& then, const FileSignature& now);

// What a path names, for discovery (FileSystem::status).
struct PathStatus {
  enum class Kind { kNone, kFile, kDirectory };
  Kind kind = Kind::kNone;
};

// A whole object's SHA-256 as its storage publishes it (the hub's LFS X-Linked-Etag, S3's
// x-amz-checksum-sha256): an expected digest for `verify` (shard_digests.h).
struct PublishedDigest {
  std::string sha256;  // lowercase hex
  std::string source;  // where it came from, for reports
};

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  virtual const std::string& path() const = 0;
  virtual uint64_t size() const = 0;
  // The signature of the file this object reads, taken when it was opened (fstat of its
  // descriptor), so what is recorded is what is read, with no gap between a stat and the open.
  // Default: stat_signature(path()), for wrappers with no descriptor of their own.
  virtual FileSignature signature() const;
  // Reads exactly dst.size() bytes at `offset`; throws kIo naming the file and offset.
  virtual void read(uint64_t offset, std::span<std::byte> dst) const = 0;
  // read() that tells the kernel nothing about what comes next: no readahead around it and no
  // readahead marker left in the pages it brings in (a header, a stripe another rank continues).
  // Without this, a header read at offset 0 opens a readahead window whose markers a later
  // sequential read trips, pulling megabytes nobody asked for (read_ahead_kb is 8 MiB on some
  // disks). Default: read(), so fault-injecting wrappers see it.
  virtual void read_random(uint64_t offset, std::span<std::byte> dst) const { read(offset, dst); }
  // A zero-copy view of [offset, offset + len) when the file is memory-mapped; empty otherwise.
  // Touching a view of a file that shrank raises SIGBUS: copy out of it under guard_sigbus().
  virtual std::span<const std::byte> view(uint64_t offset, uint64_t len) const = 0;
  // Hints that [offset, offset + len) is no longer needed: a mapped range is dropped from this
  // process (RSS); the page cache is left alone, so other ranks still find it warm.
  virtual void release(uint64_t offset, uint64_t len) const = 0;
  // Hints that [offset, offset + len) will be read soon (asynchronous readahead).
  virtual void will_need(uint64_t offset, uint64_t len) const = 0;

  // Reads segments sorted by offset, as few system calls as possible: segments whose gaps hold
  // no whole page are read in one preadv (gap bytes go to scratch), and strided reads do not
  // trigger readahead, so only the pages holding wanted bytes enter the page cache. The default
  // reads each segment through read() (so wrappers that inject faults see every byte range).
  // Returns the file bytes read (segments plus the gaps read through).
  virtual uint64_t read_segments(std::span<const ReadSegment> segments) const;
  // Bytes worth asking for in one read() when the whole file is read in order (verify): 0 for
  // local files (the reader's own chunk holds); remote objects want large concurrent ranges.
  virtual uint64_t preferred_read_bytes() const { return 0; }
  // The digest the storage publishes for this object; nullopt where it publishes none.
  virtual std::optional<PublishedDigest> published_sha256() const { return std::nullopt; }
  // Maps [offset, offset + len) in now (MADV_POPULATE_READ; WILLNEED where the kernel lacks it)
  // so a copy out of view() does not fault page by page. Throws kIo naming the file and offset
  // when the range is no longer backed by the file (it shrank). Default: will_need().
  virtual void populate(uint64_t offset, uint64_t len) const { will_need(offset, len); }
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  virtual std::unique_ptr<RandomAccessFile> open(const std::filesystem::path& path, IoMode mode) const = 0;
  // The whole of a small file (a catalog, config.json, a mapping file, an index.json) followed by
  // `padding` zero bytes, which count in the string's size (simdjson parses padded input in place).
  // A file over `max_bytes` is refused (kMalformedInput naming the file, its size and the limit)
  // before anything is allocated: a shard or a device passed where a small file belongs costs
  // nothing. Throws kNotFound (missing) or kIo, naming the file. The default opens the file with
  // kPread and reads it with one read(), so wrappers that inject faults into open() and read()
  // reach it.
  virtual std::string read_whole_file(const std::filesystem::path& path, uint64_t max_bytes, size_t padding = 0) const;
  // Discovery. status(): what `path` names (kNone when nothing). list(): the names of the regular
  // files directly in `dir`, sorted; nullopt where the storage cannot list (plain HTTP), so a
  // checkpoint there is found through its index.json. Defaults: std::filesystem.
  virtual PathStatus status(const std::filesystem::path& path) const;
  virtual std::optional<std::vector<std::string>> list(const std::filesystem::path& dir) const;
  // The SHA-256 the storage publishes for the object at `path` (S3's checksum, the hub's LFS
  // digest): an expected digest for verification. Default: none (a local file publishes none).
  virtual std::optional<PublishedDigest> published_sha256(const std::filesystem::path& path) const;
  // The identity of a file that is not open (a saved catalog checked against its shards).
  // Default: stat_signature().
  virtual FileSignature signature(const std::filesystem::path& path) const;
  // The path by which this file system names `path` from now on. A remote file system takes a
  // URL's credentials and query into itself here (wmap/io/remote.h), so they never enter a path
  // that could be printed or saved. Default: `path` as it is.
  virtual std::filesystem::path location(const std::filesystem::path& path) const { return path; }
  // Independent requests worth keeping in flight for `path` (the catalog's header fetch): 0 for
  // local storage, where the catalog's own default holds.
  virtual unsigned concurrency(const std::filesystem::path& path) const;
  // The process-wide POSIX file system: local paths only.
  static const FileSystem& posix();
  // What wmap uses unless told otherwise: posix() for local paths, remote storage for s3://,
  // http(s):// and hf:// paths (wmap/io/remote.h) with the environment's settings, remembering
  // nothing between calls. A LoaderSession owns a RemoteFileSystem of its own instead.
  static const FileSystem& standard();
};

// Limits of the small files read whole (FileSystem::read_whole_file). Each is far above what a real
// file holds: a DeepSeek-V3 index naming 410k keys is 40 MB; its catalog about 80 MB.
inline constexpr uint64_t kMaxConfigFileBytes = uint64_t{16} << 20;  // config.json
inline constexpr uint64_t kMaxIndexFileBytes = uint64_t{1} << 30;    // *.index.json
inline constexpr uint64_t kMaxCatalogFileBytes = uint64_t{2} << 30;  // a saved catalog
inline constexpr uint64_t kMaxParamTableBytes = uint64_t{1} << 30;   // an engine's parameter table (plan --expect)

// stat() of a path: for a file not open (a check that a catalog still matches its shards). A file
// being read takes its signature from its descriptor: RandomAccessFile::signature().
FileSignature stat_signature(const std::filesystem::path& path);

// Runs fn(ctx) on the calling thread. A SIGBUS raised inside it (a mapped file shrank under a
// copy) abandons fn and returns the faulting address instead of killing the process; nullptr
// when fn completed. fn must not own objects with destructors (it is left with siglongjmp).
// A SIGBUS outside a guarded call keeps its default action. Thread-safe; not re-entrant.
const void* guard_sigbus(void (*fn)(void*), void* ctx);

// Memory the process may still use without pressure: min(MemAvailable, cgroup limit - usage)
// (cgroup v2 memory.max, or v1 memory.limit_in_bytes). 0 when unknown.
uint64_t available_memory_bytes();

}  // namespace wmap
WMAP_PUBLIC_END
