#pragma once
// The NVFP4 conversions TensorRT-LLM's load_weights runs on a parameter's assembled pieces
// (Conversion kinds kBlockScaleSwizzle and kNvfp4Scales, spec/model_spec.h): the 128x4 block-scale
// swizzle of (padded) scale matrices, and the global-scale arithmetic in F32 with the engine's
// operation order (int4-nvfp4.md sections 6.3 and 6.4). Pure functions; thread-safe.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "wmap/spec/model_spec.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

// `in`: matrices of [rows, cols] bytes one after the other; `out`: each zero-padded to
// [pad_rows, pad_cols] (pad_rows a multiple of 128, pad_cols of 4) and swizzled, in order.
// Throws kValidation naming `key` when the sizes do not fit.
void block_scale_swizzle(std::span<const std::byte> in, std::span<std::byte> out, uint64_t rows, uint64_t cols,
                         uint64_t pad_rows, uint64_t pad_cols, const std::string& key);

// `in`: n groups of `group` F32 values then `tail` F32 values, n = out.size() / 4; out[i] as
// `op` says (Conversion::ScaleOp). Every value must be finite and >= 0 (a zero global scale is
// an expert without scale; its reciprocal is IEEE +inf, as torch computes it); throws
// kValidation naming `key` and the value otherwise.
void nvfp4_scales(std::span<const std::byte> in, std::span<std::byte> out, Conversion::ScaleOp op, uint64_t group,
                  uint64_t tail, const std::string& key);

}  // namespace wmap
WMAP_PUBLIC_END
