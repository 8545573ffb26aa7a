#include "wmap/mpi/extent_store_fs.h"

#include <algorithm>
#include <cstring>

#include "wmap/util/error.h"

namespace wmap::mpi {
namespace {

class StoreFile final : public RandomAccessFile {
 public:
  StoreFile(const ExtentStoreFileSystem& fs, uint32_t shard, std::string path, FileSignature signature)
      : fs_(fs), shard_(shard), path_(std::move(path)), signature_(std::move(signature)) {}
  const std::string& path() const override { return path_; }
  uint64_t size() const override { return signature_.size; }
  // The received bytes are the catalog's version: the rank that read them checked its file
  // against its catalog (extent_exchange.cc), and the ranks' identities were compared first.
  FileSignature signature() const override { return signature_; }
  void read(uint64_t offset, std::span<std::byte> dst) const override {
    if (!dst.empty()) std::memcpy(dst.data(), fs_.find(shard_, offset, dst.size()), dst.size());
  }
  // No views: the mmap path views whole read units, gaps between strided runs included, and
  // those bytes were never received. Loads from the store run with IoMode::kPread.
  std::span<const std::byte> view(uint64_t, uint64_t) const override { return {}; }
  void release(uint64_t, uint64_t) const override {}
  void will_need(uint64_t, uint64_t) const override {}
  void populate(uint64_t, uint64_t) const override {}

 private:
  const ExtentStoreFileSystem& fs_;
  uint32_t shard_;
  std::string path_;
  FileSignature signature_;
};

}  // namespace

ExtentStoreFileSystem::ExtentStoreFileSystem(const Catalog& catalog, std::vector<FileExtent> extents)
    : catalog_(catalog), extents_(std::move(extents)) {
  offsets_.reserve(extents_.size());
  for (const FileExtent& e : extents_) {
    offsets_.push_back(size_);
    size_ += e.size();
  }
  // Not value-initialised: every byte is overwritten by what the peers send.
  bytes_.reset(new std::byte[std::max<uint64_t>(size_, 1)]);
}

std::unique_ptr<RandomAccessFile> ExtentStoreFileSystem::open(const std::filesystem::path& path, IoMode) const {
  for (uint32_t s = 0; s < catalog_.shards().size(); ++s) {
    if (catalog_.shard_path(s) == path)
      return std::make_unique<StoreFile>(*this, s, path.string(), catalog_.shards()[s].signature);
  }
  throw Error(ErrorCode::kInternal,
              path.string() + ": not a shard of this load's catalog (nothing was received for it)");
}

const std::byte* ExtentStoreFileSystem::find(uint32_t shard, uint64_t offset, uint64_t len) const {
  // The last extent starting at or before (shard, offset): spans are disjoint, so only it can hold it.
  auto it = std::upper_bound(extents_.begin(), extents_.end(), std::pair(shard, offset),
                             [](const auto& key, const FileExtent& e) {
                               return key.first != e.shard ? key.first < e.shard : key.second < e.begin;
                             });
  if (it != extents_.begin()) {
    const FileExtent& e = *--it;
    if (e.shard == shard && offset < e.end()) {
      const uint64_t row = (offset - e.begin) / e.stride, in_row = (offset - e.begin) % e.stride;
      if (in_row + len <= e.row_bytes) {
        return bytes_.get() + offsets_[static_cast<size_t>(it - extents_.begin())] + row * e.row_bytes + in_row;
      }
    }
  }
  throw Error(ErrorCode::kInternal, catalog_.shard_path(shard).string() + ": bytes [" + std::to_string(offset) + ", " +
                                        std::to_string(offset + len) +
                                        ") are not within one row of the extents received from the other ranks");
}

}  // namespace wmap::mpi
