#pragma once
// Built-in in-place transforms that change a piece's layout rather than its values, registered
// under the names plugins put in Piece::transform (docs/plugins.md "Building blocks"):
//   "bf16_to_f32"                   exact widening of BF16 values into the F32 parameter room the
//                                   piece reserves with Piece::pad (its first half holds the BF16s)
//   "block_scale_interleave_128x4"  TensorRT-LLM's block-scale swizzle of a [rows, cols] byte matrix
//                                   (thop/fp4Op.cpp BlockScaleInterleave), done inside its MoE load
//   "fill_one"                      every element 1.0 (F32, BF16, F16): a parameter the engine creates
//                                   empty and fills with a constant inside its own load_weights, which
//                                   a load into its buffers bypasses (spec::ones)
// Each throws kValidation naming `key` when the piece's geometry does not fit. Thread-safe.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "wmap/format/dtype.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

// data: 4n bytes whose first 2n hold n BF16 values; afterwards n F32 values (bits << 16).
void widen_bf16_to_f32(std::span<std::byte> data, DType dtype, const std::string& key, std::span<const uint64_t> shape);
// data: 4n bytes whose first 2n hold n F16 values; afterwards n F32 values of the same value
// (exact: subnormals normalised, infinities kept, NaN payloads shifted as torch and numpy do).
void widen_f16_to_f32(std::span<std::byte> data, DType dtype, const std::string& key, std::span<const uint64_t> shape);

// data: a row-major [rows, cols] byte matrix, cols = shape.back(), rows a multiple of 128 and
// cols of 4; byte (m, k) moves to k%4 + (k/4)*512 + (m%32)*16 + ((m%128)/32)*4 + (m/128)*128*cols.
void block_scale_interleave_128x4(std::span<std::byte> data, DType dtype, const std::string& key,
                                  std::span<const uint64_t> shape);
// data: whole elements of `dtype` (F32, BF16 or F16), each set to 1.0.
void fill_one(std::span<std::byte> data, DType dtype, const std::string& key, std::span<const uint64_t> shape);

// The destination of byte (m, k) of a [rows, cols] matrix under that swizzle.
uint64_t block_scale_interleave_index(uint64_t m, uint64_t k, uint64_t cols);

// One 128-row band of that swizzle, out of place: `rows` (<= 128) source rows of `cols` bytes,
// `src_pitch` bytes apart, into the band's 128 x pad_cols bytes at `dst` (pad_cols a multiple of 4
// and >= cols), zero where the band has no source row or column. A band's swizzled bytes occupy
// exactly its own row-major bytes, so a matrix is swizzled band by band; `dst` is written in
// order, 16 bytes at a time, and the 128 source rows a band reads stay in cache.
void block_scale_swizzle_band(const std::byte* src, uint64_t rows, uint64_t cols, uint64_t src_pitch, uint64_t pad_cols,
                              std::byte* dst);

// torch.cat(dim=-1) of assembled parts: `in` holds blocks, each the parts one after the other
// (part i: `rows` rows of parts[i] bytes); `out` the same blocks with each row the parts' row
// bytes side by side. Throws kValidation naming `key` when the sizes do not fit.
void concat_columns(std::span<const std::byte> in, std::span<std::byte> out, uint64_t rows,
                    const std::vector<uint64_t>& parts, const std::string& key);

}  // namespace wmap
WMAP_PUBLIC_END
