#include "wmap/tensor_view.h"

#include <cstring>

#include "wmap/error.h"

namespace wmap {

uint64_t TensorView::numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // shapes come from validated headers
  return n;
}

uint64_t TensorView::row_bytes() const {
  if (shape.empty() || shape[0] == 0) return 0;
  return bytes.size() / shape[0];
}

TensorView TensorView::rows(uint64_t begin, uint64_t end) const {
  if (shape.empty() || begin > end || end > shape[0]) {
    throw Error(ErrorCode::kInvalidArgument, "tensor '" + name + "': row range [" + std::to_string(begin) + ", " +
                                                 std::to_string(end) + ") is outside dim 0 of size " +
                                                 (shape.empty() ? std::string("(scalar)") : std::to_string(shape[0])));
  }
  const uint64_t rb = row_bytes();
  if (rb * shape[0] != bytes.size()) {
    throw Error(ErrorCode::kUnsupported, "tensor '" + name + "': rows of " + std::string(dtype_name(dtype)) +
                                             " are not whole bytes");
  }
  TensorView out{dtype, shape, bytes.subspan(begin * rb, (end - begin) * rb), name};
  out.shape[0] = end - begin;
  return out;
}

void StridedBlock::copy_to(std::byte* dst) const {
  if (rows == 0 || run_bytes == 0) return;
  if (stride == run_bytes) {
    std::memcpy(dst, base, rows * run_bytes);
    return;
  }
  for (uint64_t r = 0; r < rows; ++r) std::memcpy(dst + r * run_bytes, base + r * stride, run_bytes);
}

StridedBlock column_block(const TensorView& view, uint64_t begin, uint64_t end) {
  if (view.shape.size() < 2 || begin > end || end > view.shape[1]) {
    throw Error(ErrorCode::kInvalidArgument,
                "tensor '" + view.name + "': column range [" + std::to_string(begin) + ", " + std::to_string(end) +
                    ") needs a tensor of rank >= 2 with dim 1 >= " + std::to_string(end));
  }
  const uint64_t outer = view.shape[0];
  uint64_t inner = 1;  // elements per dim-1 step
  for (size_t i = 2; i < view.shape.size(); ++i) inner *= view.shape[i];
  const uint64_t bits = dtype_bits(view.dtype);
  const uint64_t col_bits = inner * bits;
  // Every row must start on a byte too, or a byte stride cannot describe the block.
  if ((col_bits * view.shape[1]) % 8 != 0 || (col_bits * begin) % 8 != 0 || (col_bits * end) % 8 != 0) {
    throw Error(ErrorCode::kUnsupported, "tensor '" + view.name + "': column range [" + std::to_string(begin) + ", " +
                                             std::to_string(end) + ") of " + std::string(dtype_name(view.dtype)) +
                                             " does not fall on byte boundaries");
  }
  StridedBlock b;
  b.rows = outer;
  b.stride = outer ? view.bytes.size() / outer : 0;
  b.base = view.bytes.data() + col_bits * begin / 8;
  b.run_bytes = col_bits * (end - begin) / 8;
  return b;
}

}  // namespace wmap
