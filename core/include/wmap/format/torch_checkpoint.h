#pragma once
// Legacy PyTorch checkpoints (`torch.save` zip format: `.bin` / `.pth` / `.pt`), catalogued
// without reading tensor data and without ever running code.
//
// Three pieces, one per source file:
//  - ZipArchive (zip_reader.cc): a bounded reader of a zip central directory (ZIP64 aware).
//    Only stored (uncompressed, unencrypted) entries can be located; a compressed one is a
//    kMalformedInput error (exit 2) naming the file and the entry.
//  - parse_torch_pickle (pickle_reader.cc): an interpreter for the subset of pickle opcodes that
//    `torch.save(state_dict)` emits. GLOBAL / STACK_GLOBAL are restricted to an allowlist
//    (collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter,
//    torch.*Storage); REDUCE only calls the allowlisted rebuild functions, which are interpreted
//    as data constructors. Any other global is a kMalformedInput error (exit 2) naming the file and
//    `module.name`. Nothing is imported, called or evaluated. Stack depth, memo size, object
//    count, nesting and string lengths are bounded.
//  - read_torch_checkpoint (torch_checkpoint.cc): ties both together into HeaderTensor-style
//    records whose byte ranges are absolute offsets in the checkpoint file, so a contiguous
//    tensor is read lazily exactly like a safetensors one. Views at an offset into a shared
//    storage are fine; non-contiguous views (a transpose, a column slice, an expand) keep their
//    strides and are gathered into row-major order when read (gather_tensor in tensor_record.h).
//
// All functions are thread-safe (no shared state).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wmap/format/dtype.h"
#include "wmap/io/file_io.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;  // 0: stored; anything else is compressed
  uint16_t flags = 0;   // general purpose bit flags (bit 0: encrypted)
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t local_header_offset = 0;
};

class ZipArchive {
 public:
  // Reads the end-of-central-directory record and the central directory. Throws
  // kMalformedInput naming `label` when the file is not a zip or is truncated.
  static ZipArchive read(const RandomAccessFile& file, const std::string& label);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(std::string_view name) const;
  // Absolute file offset of a stored entry's data, checked to lie inside the file. Throws
  // kMalformedInput for a compressed or encrypted entry and for a bad or truncated local header.
  uint64_t data_offset(const RandomAccessFile& file, const ZipEntry& entry) const;
  // The whole data of a stored entry (at most `max_bytes`).
  std::string read_entry(const RandomAccessFile& file, const ZipEntry& entry, uint64_t max_bytes) const;

 private:
  std::string label_;
  std::vector<ZipEntry> entries_;
};

// A tensor as the pickle describes it: a view into a storage.
struct TorchTensorRef {
  std::string name;
  DType dtype = DType::kU8;     // the storage's element type
  std::string storage_key;      // `archive/data/<key>`
  uint64_t storage_numel = 0;   // elements the pickle claims the storage holds
  uint64_t storage_offset = 0;  // in elements
  std::vector<uint64_t> shape;
  std::vector<int64_t> strides;  // in elements
};

// Interprets a `data.pkl`; `label` names the file in errors. The top level must be a dict
// (or OrderedDict) from strings to tensors. Throws Error (kMalformedInput).
std::vector<TorchTensorRef> parse_torch_pickle(std::span<const std::byte> pickle, const std::string& label);

// True when every stride is the row-major stride of `shape` (dimensions of size 1 ignored).
bool torch_is_contiguous(const std::vector<uint64_t>& shape, const std::vector<int64_t>& strides);

struct TorchCatalogTensor {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  uint64_t offset = 0;            // absolute byte offset in the checkpoint file (of element 0)
  uint64_t nbytes = 0;            // dtype x shape
  std::vector<uint64_t> strides;  // element strides of a non-contiguous view; empty when contiguous
};

struct TorchCheckpoint {
  std::vector<TorchCatalogTensor> tensors;  // in pickle order
  uint64_t pickle_bytes = 0;                // size of data.pkl
};

// Catalogues a torch.save zip checkpoint: reads only the zip directory and data.pkl.
// `label` (the file path) is named in every error.
TorchCheckpoint read_torch_checkpoint(const RandomAccessFile& file, const std::string& label);

// True for the file names discovery treats as PyTorch checkpoints (.bin, .pth, .pt).
bool is_torch_checkpoint_name(std::string_view file_name);

}  // namespace wmap
WMAP_PUBLIC_END
