// Tiled copy of a strided 2-D block into row-major order (strided_copy.h).
#include "wmap/format/strided_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace wmap {
namespace {

// 32 x 32 tiles; one instantiation per element size so each element is one load and store.
template <class T>
void gather_tile_2d(const std::byte* src, uint64_t rows, uint64_t cols, uint64_t row_step, uint64_t col_step,
                    std::byte* out, uint64_t pitch) {
  constexpr uint64_t kTile = 32;
  T* dst = reinterpret_cast<T*>(out);  // row i at dst + i * pitch (elements)
  for (uint64_t i0 = 0; i0 < rows; i0 += kTile) {
    const uint64_t i1 = std::min(rows, i0 + kTile);
    for (uint64_t j0 = 0; j0 < cols; j0 += kTile) {
      const uint64_t j1 = std::min(cols, j0 + kTile);
      for (uint64_t i = i0; i < i1; ++i) {
        const std::byte* row = src + i * row_step;
        for (uint64_t j = j0; j < j1; ++j) std::memcpy(dst + i * pitch + j, row + j * col_step, sizeof(T));
      }
    }
  }
}

}  // namespace

void copy_2d_strided(const std::byte* src, uint64_t rows, uint64_t cols, uint64_t row_step, uint64_t col_step,
                     uint64_t elem, std::byte* out, uint64_t out_row_step) {
  const uint64_t pitch = out_row_step ? out_row_step : cols * elem;
  if (pitch % elem == 0) {
    switch (elem) {
      case 1: return gather_tile_2d<uint8_t>(src, rows, cols, row_step, col_step, out, pitch);
      case 2: return gather_tile_2d<uint16_t>(src, rows, cols, row_step, col_step, out, pitch / 2);
      case 4: return gather_tile_2d<uint32_t>(src, rows, cols, row_step, col_step, out, pitch / 4);
      case 8: return gather_tile_2d<uint64_t>(src, rows, cols, row_step, col_step, out, pitch / 8);
      default: break;
    }
  }
  for (uint64_t i = 0; i < rows; ++i) {
    for (uint64_t j = 0; j < cols; ++j)
      std::memcpy(out + i * pitch + j * elem, src + i * row_step + j * col_step, elem);
  }
}

}  // namespace wmap
