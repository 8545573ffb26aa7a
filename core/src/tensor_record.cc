// TensorRecord geometry: element counts, the file span of a strided view, and the gather that
// materialises a non-contiguous view (PyTorch checkpoints) in row-major order.
#include <algorithm>
#include <cstring>

#include "wmap/catalog.h"

namespace wmap {

uint64_t TensorRecord::numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // validated against overflow when catalogued
  return n;
}

uint64_t TensorRecord::span_bytes() const {
  if (strides.empty() || nbytes == 0) return nbytes;
  // Strides are non-negative, so element (0, ..., 0) is the lowest address and the last
  // element the highest; overflow was ruled out when the record was catalogued.
  uint64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) last += (shape[d] - 1) * strides[d];
  return (last + 1) * (dtype_bits(dtype) / 8);
}

namespace {

// The last two dims when the innermost one is strided (a transpose): copied in square tiles so
// both the reads and the writes stay within a few cache lines per row (an element-by-element
// walk of a transposed matrix misses the cache on nearly every read).
template <class T>
void gather_tile_2d(const std::byte* src, uint64_t rows, uint64_t cols, uint64_t row_step, uint64_t col_step, std::byte* out) {
  constexpr uint64_t kTile = 32;
  T* dst = reinterpret_cast<T*>(out);
  for (uint64_t i0 = 0; i0 < rows; i0 += kTile) {
    const uint64_t i1 = std::min(rows, i0 + kTile);
    for (uint64_t j0 = 0; j0 < cols; j0 += kTile) {
      const uint64_t j1 = std::min(cols, j0 + kTile);
      for (uint64_t i = i0; i < i1; ++i) {
        const std::byte* row = src + i * row_step;
        for (uint64_t j = j0; j < j1; ++j) std::memcpy(dst + i * cols + j, row + j * col_step, sizeof(T));
      }
    }
  }
}

void gather_last_two(const std::byte* src, uint64_t rows, uint64_t cols, uint64_t row_step, uint64_t col_step, uint64_t elem,
                     std::byte* out) {
  switch (elem) {
    case 1: return gather_tile_2d<uint8_t>(src, rows, cols, row_step, col_step, out);
    case 2: return gather_tile_2d<uint16_t>(src, rows, cols, row_step, col_step, out);
    case 4: return gather_tile_2d<uint32_t>(src, rows, cols, row_step, col_step, out);
    case 8: return gather_tile_2d<uint64_t>(src, rows, cols, row_step, col_step, out);
    default:
      for (uint64_t i = 0; i < rows; ++i) {
        for (uint64_t j = 0; j < cols; ++j) std::memcpy(out + (i * cols + j) * elem, src + i * row_step + j * col_step, elem);
      }
  }
}

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
      gather_last_two(src, 1, r.shape[d], 0, r.strides[d] * elem, elem, out);
      out += r.shape[d] * elem;
    }
    return;
  }
  if (d + 2 == n && r.strides[d + 1] != 1) {
    gather_last_two(src, r.shape[d], r.shape[d + 1], r.strides[d] * elem, r.strides[d + 1] * elem, elem, out);
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

}  // namespace wmap
