#pragma once
// A FileSystem serving a load from memory: the checkpoint bytes a rank received from its peers
// (its extents' rows, back to back in file order in one buffer) stand in for the shard files, so
// the executor runs unchanged (ExecOptions::fs). The executor reads run by run (read_segments
// through read(), a run cut at most at chunk boundaries), so a read lies inside one row of one
// extent; anything else (across a gap between rows, outside the extents) is an internal error
// naming the file and range: the extents are computed from the same plan, so it means a bug, not
// a bad checkpoint. Serves read() only (no mmap views): load from it with IoMode::kPread.
// Filled before the load, then read-only and thread-safe.

#include <filesystem>
#include <memory>
#include <vector>

#include "wmap/catalog/catalog.h"
#include "wmap/io/file_io.h"
#include "wmap/mpi/file_extents.h"

namespace wmap::mpi {

class ExtentStoreFileSystem final : public FileSystem {
 public:
  // `extents`: merged (merge_extents); the buffer holds their rows in that order.
  ExtentStoreFileSystem(const Catalog& catalog, std::vector<FileExtent> extents);
  const std::vector<FileExtent>& extents() const { return extents_; }
  std::byte* data() { return bytes_.get(); }
  uint64_t size() const { return size_; }

  std::unique_ptr<RandomAccessFile> open(const std::filesystem::path& path, IoMode mode) const override;

  // The bytes of [offset, offset + len) of `shard`, which must lie in one row of one extent;
  // throws kInternal naming the file and range otherwise.
  const std::byte* find(uint32_t shard, uint64_t offset, uint64_t len) const;

 private:
  const Catalog& catalog_;
  std::vector<FileExtent> extents_;
  std::vector<uint64_t> offsets_;  // of each extent in the buffer
  std::unique_ptr<std::byte[]> bytes_;
  uint64_t size_ = 0;
};

}  // namespace wmap::mpi
