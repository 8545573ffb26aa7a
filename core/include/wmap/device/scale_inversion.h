#pragma once
// Scale inversion (`invert_scale`, `invert_scale_strict`): x > 0 ? 1/x : 0 computed in fp32 and
// rounded to nearest-even back to the element type, NaN/Inf -> 0. The host transforms and the CUDA
// kernel (cuda_kernels.cu) share these rules so both devices give the same bits. Stateless.

#include <span>
#include <string>

#include "wmap/format/dtype.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

// F32, BF16 and F16 are supported; anything else is an error naming `key`.
void check_scale_dtype(DType dtype, const std::string& key);
// Dense layers: the first non-finite or <= 0 element is an error naming `key` and the element.
void check_scales_positive(std::span<const std::byte> data, DType dtype, const std::string& key);
// In place, lenient (bad elements become 0); `dtype` already checked.
void invert_scales(std::span<std::byte> data, DType dtype);

// The built-in transforms, as TransformFn (the loader registers them by name):
// `invert_scale` (experts' global scales): x > 0 ? 1/x : 0, NaN/Inf -> 0.
void invert_scale_lenient(std::span<std::byte> data, DType dtype, const std::string& key);
// `invert_scale_strict` (dense layers): a non-finite or <= 0 scale is an error naming `key`.
void invert_scale_strict(std::span<std::byte> data, DType dtype, const std::string& key);

}  // namespace wmap
WMAP_PUBLIC_END
