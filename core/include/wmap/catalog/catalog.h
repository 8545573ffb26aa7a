#pragma once
// Every tensor of a checkpoint, built from the headers alone (no tensor data is read).
// Immutable after construction and therefore safe to share across threads.
//
// One array of records sorted by name: exact lookup and `prefix.` range lookup are binary
// searches. The catalog saves to and loads from JSON with a content id (SHA-256 of its canonical
// form) and each shard's size/mtime/inode signature, so plans can be validated offline.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wmap/format/dtype.h"
#include "wmap/format/tensor_record.h"
#include "wmap/io/file_io.h"
#include "wmap/catalog/shard_set.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct ShardRecord {
  std::string file;           // file name relative to the catalog root
  FileSignature signature;    // size, mtime, inode when catalogued
  uint64_t header_bytes = 0;  // safetensors: JSON length N; PyTorch: size of data.pkl
  uint64_t tensor_count = 0;
  std::vector<std::pair<std::string, std::string>> metadata;  // `__metadata__`
  // The file's SHA-256 (hex) when recorded (`inspect --save-catalog --digests`): an expected
  // digest for `verify` and `load --verify`. Like the signature, not part of the content id.
  std::string sha256;
  // Where `sha256` came from when the storage published it (the hub's X-Linked-Etag, S3's
  // x-amz-checksum-sha256, recorded when the shard was catalogued); empty for a recorded digest.
  std::string sha256_source;
};

struct CatalogBuildOptions {
  const FileSystem* fs = nullptr;                           // default: FileSystem::standard()
  unsigned threads = 0;                                     // 0: min(hardware threads, 8)
  std::function<void(size_t done, size_t total)> progress;  // called from the caller's thread
};

class Catalog {
 public:
  Catalog() = default;

  static Catalog build(const ShardSet& shards, const CatalogBuildOptions& options = {});
  // Builds from already-parsed parts (loaders of other formats, tests), checking each record as
  // a parsed header is checked: its shard exists, nbytes is dtype x shape without overflow, strides
  // fit, and its bytes lie inside the shard's signature.size. Errors (kMalformedInput) start with
  // `label`.
  static Catalog from_parts(std::filesystem::path root, std::vector<ShardRecord> shards,
                            std::vector<TensorRecord> tensors, const std::string& label = "catalog parts");

  // Reads a saved catalog through `fs` (fault injection reaches it); errors name the file.
  static Catalog load_json_file(const std::filesystem::path& file, const FileSystem& fs = FileSystem::standard());
  static Catalog parse_json(std::string_view json, const std::string& label);
  std::string to_json(bool with_signatures = true) const;
  void save_json_file(const std::filesystem::path& file) const;

  // SHA-256 (hex) of the canonical form: shards (file, size, header_bytes) and tensors (name,
  // dtype, shape, file, offset, nbytes). Signatures (mtime, inode) are not part of it.
  // Computed on first use (hashing ~16 MB for a 92k-tensor checkpoint is not free).
  const std::string& content_id() const;

  const std::filesystem::path& root() const { return root_; }
  // Points a catalog loaded from JSON at the directory holding its shards.
  void set_root(std::filesystem::path root) { root_ = std::move(root); }
  // Records a shard's SHA-256 (64 hex digits, stored lowercase) to be saved with the catalog.
  void set_shard_sha256(uint32_t shard, std::string_view hex);
  std::filesystem::path shard_path(uint32_t shard) const { return root_ / shards_[shard].file; }
  std::span<const ShardRecord> shards() const { return shards_; }
  std::span<const TensorRecord> tensors() const { return tensors_; }
  size_t size() const { return tensors_.size(); }
  uint64_t total_bytes() const;

  // Exact lookup: find() may return null, require() throws kNotFound naming the key.
  const TensorRecord* find(std::string_view name) const;
  const TensorRecord& require(std::string_view name) const;
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  // Every tensor whose name starts with `prefix + "."`, in name order.
  std::span<const TensorRecord> prefix(std::string_view prefix) const;
  // Index of a record inside tensors(), for consumption bookkeeping.
  size_t index_of(const TensorRecord& record) const { return static_cast<size_t>(&record - tensors_.data()); }

  // Refuses (kValidation, "changed since it was planned: plan again", naming the shard and what
  // differs) a shard whose current signature is not the catalogued one: every reader that opens
  // a shard to read at catalogued offsets checks the file it opened (RandomAccessFile::signature).
  // A catalog saved without signatures has nothing to compare and passes.
  void require_unchanged(uint32_t shard, const FileSignature& now) const;
  // Shards whose size, mtime or inode differ from the catalogued signature, one message each.
  std::vector<std::string> changed_shards(const std::filesystem::path& root,
                                          const FileSystem& fs = FileSystem::standard()) const;

 private:
  void finish(bool sorted = false);  // sorts (unless `sorted`), checks duplicates, resets the content id

  std::filesystem::path root_;
  std::vector<ShardRecord> shards_;
  std::vector<TensorRecord> tensors_;
  struct IdCache;
  std::shared_ptr<IdCache> id_;  // shared by copies, which have the same content
};

}  // namespace wmap
WMAP_PUBLIC_END
