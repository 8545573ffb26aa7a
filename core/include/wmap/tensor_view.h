#pragma once
// A non-owning view of one tensor's bytes: {dtype, shape, bytes}. Sub-block views (a range of
// rows, or a range of columns of a 2-D tensor) are described without copying; a column range is
// strided and is materialised only by copy_to(). Views do not own memory: the mapping or buffer
// they point into must outlive them.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "wmap/dtype.h"

namespace wmap {

struct TensorView {
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  std::span<const std::byte> bytes;  // contiguous row-major data of the whole view
  std::string name;                  // for error messages

  uint64_t numel() const;
  uint64_t row_bytes() const;  // bytes of one dim-0 slice

  // Rows [begin, end) along dim 0; zero-copy.
  TensorView rows(uint64_t begin, uint64_t end) const;
};

// A strided 2-D block: `rows` runs of `run_bytes`, `stride` bytes apart.
struct StridedBlock {
  const std::byte* base = nullptr;
  uint64_t rows = 0;
  uint64_t run_bytes = 0;
  uint64_t stride = 0;
  uint64_t nbytes() const { return rows * run_bytes; }
  void copy_to(std::byte* dst) const;
};

// Columns [begin, end) of a 2-D (or higher, along dim 1 with the rest flattened) tensor.
StridedBlock column_block(const TensorView& view, uint64_t begin, uint64_t end);

}  // namespace wmap
