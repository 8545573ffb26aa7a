#pragma once
// Copies a strided 2-D block of elements into row-major order: out[i * cols + j] =
// src[i * row_step + j * col_step] (steps in bytes, `elem` bytes per element); with
// `out_row_step` (bytes, 0: cols * elem) the output rows are that far apart (a column block of a
// wider matrix). Tiled so that both
// the reads and the writes stay within a few cache lines per row: an element-by-element walk of
// a transposed matrix misses the cache on nearly every read. Used by the gather of strided
// (PyTorch view) sources and by the executor's transposing copies. Pure function.
#include <cstddef>
#include <cstdint>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

void copy_2d_strided(const std::byte* src, uint64_t rows, uint64_t cols, uint64_t row_step, uint64_t col_step,
                     uint64_t elem, std::byte* out, uint64_t out_row_step = 0);

}  // namespace wmap
WMAP_PUBLIC_END
