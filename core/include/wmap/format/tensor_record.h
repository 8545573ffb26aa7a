#pragma once
// One tensor of a checkpoint as its header describes it: name, shard, dtype, shape, where its
// bytes are, and (PyTorch views) their strides. Plain value type; thread-safe to read.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "wmap/format/dtype.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct TensorRecord {
  std::string name;
  uint32_t shard = 0;  // index into Catalog::shards()
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  uint64_t offset = 0;  // absolute byte offset of the data in the shard file
  uint64_t nbytes = 0;  // bytes of the tensor's elements (dtype x shape)
  // Element strides of a non-contiguous view (PyTorch checkpoints); empty when the data is
  // row-major contiguous, which is always the case for safetensors. A strided record's bytes
  // are [offset, offset + span_bytes()) and are gathered into row-major order when read.
  std::vector<uint64_t> strides;

  uint64_t numel() const;
  bool strided() const { return !strides.empty(); }
  // File bytes the tensor's data covers: nbytes when contiguous, from the first to the last
  // element (gaps included) when strided.
  uint64_t span_bytes() const;
};

// A shape as messages print it: "[2, 64]".
std::string shape_text(const std::vector<uint64_t>& shape);

// Elements a strided view spans, from its first to its last (0 when it has none); nullopt when
// that overflows 64 bits. Strides are in elements and non-negative.
std::optional<uint64_t> strided_extent(std::span<const uint64_t> shape, std::span<const uint64_t> strides);

// Gathers a strided record's elements from `span` (its bytes [offset, offset + span_bytes()))
// into `out` (nbytes, row-major). For a contiguous record, a plain copy.
void gather_tensor(const TensorRecord& record, const std::byte* span, std::byte* out);

}  // namespace wmap
WMAP_PUBLIC_END
