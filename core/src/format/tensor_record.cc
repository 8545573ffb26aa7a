// TensorRecord geometry: element counts, the file span of a strided view, and the gather that
// materialises a non-contiguous view (PyTorch checkpoints) in row-major order.
#include <cstring>

#include "wmap/format/strided_copy.h"
#include "wmap/format/tensor_record.h"
#include "wmap/util/error.h"

namespace wmap {

uint64_t TensorRecord::numel() const {
  const auto n = checked_numel(shape);
  if (!n)
    throw Error(ErrorCode::kOverflow,
                "tensor '" + name + "': shape " + shape_text(shape) + " has more than 2^64 elements");
  return *n;
}

std::optional<uint64_t> strided_extent(std::span<const uint64_t> shape, std::span<const uint64_t> strides) {
  // Strides are non-negative, so element (0, ..., 0) is the lowest address and the last element
  // the highest.
  uint64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return 0;
    uint64_t step;
    if (__builtin_mul_overflow(shape[d] - 1, strides[d], &step) || __builtin_add_overflow(last, step, &last))
      return std::nullopt;
  }
  if (last == UINT64_MAX) return std::nullopt;
  return last + 1;
}

uint64_t TensorRecord::span_bytes() const {
  if (strides.empty() || nbytes == 0) return nbytes;
  const auto elements = strided_extent(shape, strides);
  uint64_t span = 0;
  if (!elements || __builtin_mul_overflow(*elements, uint64_t{dtype_bits(dtype) / 8}, &span)) {
    throw Error(ErrorCode::kOverflow,
                "tensor '" + name + "': strided extent of " + shape_text(shape) + " overflows 64 bits");
  }
  return span;
}

namespace {

// Copies the sub-tensor at dims [d, n) to `out`: the innermost dim is one memcpy when its
// stride is 1, the last two dims a tiled copy otherwise.
void gather_dims(const TensorRecord& r, uint64_t elem, size_t d, const std::byte* src, std::byte*& out) {
  const size_t n = r.shape.size();
  if (d + 1 == n) {
    if (r.strides[d] == 1) {
      const uint64_t run = r.shape[d] * elem;
      std::memcpy(out, src, run);
      out += run;
    } else {
      copy_2d_strided(src, 1, r.shape[d], 0, r.strides[d] * elem, elem, out);
      out += r.shape[d] * elem;
    }
    return;
  }
  if (d + 2 == n && r.strides[d + 1] != 1) {
    copy_2d_strided(src, r.shape[d], r.shape[d + 1], r.strides[d] * elem, r.strides[d + 1] * elem, elem, out);
    out += r.shape[d] * r.shape[d + 1] * elem;
    return;
  }
  const uint64_t step = r.strides[d] * elem;
  for (uint64_t i = 0; i < r.shape[d]; ++i) gather_dims(r, elem, d + 1, src + i * step, out);
}

}  // namespace

void gather_tensor(const TensorRecord& record, const std::byte* span, std::byte* out) {
  if (record.nbytes == 0) return;
  if (record.strides.empty() || record.shape.empty()) {
    std::memcpy(out, span, record.nbytes);
    return;
  }
  gather_dims(record, dtype_bits(record.dtype) / 8, 0, span, out);
}

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace wmap
