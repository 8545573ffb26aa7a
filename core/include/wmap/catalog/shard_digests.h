#pragma once
// Each shard's expected SHA-256 and where it came from, and the checks of a shard's bytes
// against it (`wmap verify`, `load --verify`).
//
// Sources, tried in this order for each shard; the first that knows the shard wins and is named
// in every report line:
//   1. A Hugging Face cache snapshot: `snapshots/<rev>/<file>` is a symlink to `blobs/<etag>`,
//      and an LFS file's etag is its SHA-256 (huggingface_hub, file_download.py: the cache
//      layout in hf_hub_download's docstring, "blobs ... identified by their git-sha or sha256,
//      depending on whether they're LFS files or not").
//   2. A `hf download --local-dir` folder: `.cache/huggingface/download/<file>.metadata` holds
//      three lines, commit hash, etag, timestamp (huggingface_hub, _local_folder.py:
//      write_download_metadata / read_download_metadata); the etag of an LFS file is its SHA-256.
//      huggingface_hub re-hashes a file newer than its metadata (mtime - 1 s > timestamp); here
//      the digest is still used and the report says the file was modified after the download.
//   3. A manifest in `sha256sum` format (`<64 hex>  <name>` or `<64 hex> *<name>`), names
//      relative to the checkpoint folder or bare file names.
//   4. A saved catalog's recorded digests (`inspect --save-catalog --digests`), and the digests
//      the storage published when the catalog was built (the hub's LFS SHA-256).
//   5. The storage's own, asked for now (FileSystem::published_sha256: S3's checksum).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "wmap/catalog/catalog.h"
#include "wmap/io/file_io.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct ExpectedDigest {
  std::string sha256;  // lowercase hex
  std::string source;  // where it came from, for reports: "hf-cache blob", "manifest FILE:LINE", ...
};

struct DigestSources {
  std::filesystem::path manifest;            // empty: none
  const Catalog* saved_catalog = nullptr;    // a catalog loaded from a file, with its digests
  std::filesystem::path saved_catalog_file;  // for reports
};

// For each of `paths` (in order), the first source that knows it, or nullopt. A malformed
// manifest or an unreadable metadata file throws (kMalformedInput / kIo) naming the file and line.
std::vector<std::optional<ExpectedDigest>> expected_digests(const std::filesystem::path& root,
                                                            const std::vector<std::string>& files,
                                                            const DigestSources& sources);

// The same for a catalog's shards (catalog order); the catalog's own recorded digests (a saved
// catalog, `catalog_file` names it) are the last source.
// `fs`, when given, is asked for what the other sources do not know (5.).
std::vector<std::optional<ExpectedDigest>> expected_digests(const Catalog& catalog,
                                                            const std::filesystem::path& manifest = {},
                                                            const std::filesystem::path& catalog_file = {},
                                                            const FileSystem* fs = nullptr);

// What one shard's check found.
struct ShardCheck {
  enum class Status {
    kMatch,     // hashed, equal to the expected digest
    kMismatch,  // hashed, different (or the file's size differs from the catalogued one)
    kNoDigest,  // hashed, nothing to compare with
    kPartial,   // this rank read only part of the file: not hashed (`--verify=full` reads the rest)
  };
  std::string file;  // the shard's path
  Status status = Status::kNoDigest;
  std::string expected, actual, source;
  uint64_t bytes = 0;        // bytes hashed (the file size when hashed)
  uint64_t extra_bytes = 0;  // bytes read only to complete the hash (load --verify)
  std::string note;          // why partial / what else differs

  bool failed() const { return status == Status::kMismatch; }
  std::string_view status_name() const;  // "ok", "MISMATCH", "no digest", "not verified"
  std::string line() const;              // one report line
  std::string json() const;
};

struct VerifyOptions {
  unsigned jobs = 0;                           // files hashed at once; 0: hardware threads
  uint64_t chunk_bytes = uint64_t{256} << 10;  // per read (L2-sized: hashed while cached); memory is jobs x it
  const FileSystem* fs = nullptr;              // default FileSystem::standard()
  IoMode io = IoMode::kPread;                  // kMmap: hashed out of the mapping, no copy (measured slower)
  // Bytes hashed so far over all files, of total; called from workers, serialised.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Hashes every file whole (files in parallel, each read sequentially in chunks) and compares.
std::vector<ShardCheck> verify_files(const std::filesystem::path& root, const std::vector<std::string>& files,
                                     const std::vector<std::optional<ExpectedDigest>>& expected,
                                     const VerifyOptions& options = {});

// SHA-256 of a whole file, read in chunks of `chunk_bytes`.
std::string sha256_file(const RandomAccessFile& file, uint64_t chunk_bytes = uint64_t{4} << 20,
                        const std::function<void(uint64_t)>& on_bytes = {});

// The check of a file whose digest `actual` was computed over `bytes` bytes.
ShardCheck compare_digest(std::string file, std::string actual, uint64_t bytes,
                          const std::optional<ExpectedDigest>& expected);

}  // namespace wmap
WMAP_PUBLIC_END
