#include "scale_inversion.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "wmap/error.h"

namespace wmap {
namespace {

size_t element_bytes(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

float load(const std::byte* p, DType dtype) {
  if (dtype == DType::kF32) {
    float x;
    std::memcpy(&x, p, 4);
    return x;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (dtype == DType::kBF16) return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
  _Float16 f;
  std::memcpy(&f, &h, 2);
  return static_cast<float>(f);
}

// Round to nearest even, as CUDA's __float2bfloat16_rn / __float2half_rn. `y` is never NaN here.
void store(std::byte* p, DType dtype, float y) {
  if (dtype == DType::kF32) {
    std::memcpy(p, &y, 4);
    return;
  }
  uint16_t h;
  if (dtype == DType::kBF16) {
    const uint32_t u = std::bit_cast<uint32_t>(y);
    h = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  } else {
    const auto f = static_cast<_Float16>(y);
    std::memcpy(&h, &f, 2);
  }
  std::memcpy(p, &h, 2);
}

}  // namespace

void check_scale_dtype(DType dtype, const std::string& key) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    throw Error(ErrorCode::kValidation,
                "'" + key + "': scale inversion needs F32, BF16 or F16, not " + std::string(dtype_name(dtype)));
  }
}

void check_scales_positive(std::span<const std::byte> data, DType dtype, const std::string& key) {
  const size_t n = element_bytes(dtype);
  for (size_t i = 0; i + n <= data.size(); i += n) {
    const float x = load(data.data() + i, dtype);
    if (!std::isfinite(x) || x <= 0.0f) {
      throw Error(ErrorCode::kValidation, "'" + key + "': global scale element " + std::to_string(i / n) + " is " +
                                              std::to_string(x) + "; a dense layer needs a finite scale > 0");
    }
  }
}

void invert_scales(std::span<std::byte> data, DType dtype) {
  const size_t n = element_bytes(dtype);
  for (size_t i = 0; i + n <= data.size(); i += n) {
    const float x = load(data.data() + i, dtype);
    store(data.data() + i, dtype, (std::isfinite(x) && x > 0.0f) ? 1.0f / x : 0.0f);
  }
}

}  // namespace wmap
