#include "wmap/device/scale_inversion.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "wmap/util/error.h"

namespace wmap {
namespace {

size_t element_bytes(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

// IEEE binary16 by hand: _Float16 is not available with every compiler we build with (clang 14).
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in fp32
    const float f = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -f : f;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round to nearest even; NaN is never stored here.
uint16_t float_to_half(float y) {
  const uint32_t bits = std::bit_cast<uint32_t>(y);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t u = bits & 0x7fffffffu;
  if (u >= 0x477ff000u) return sign | 0x7c00;  // at or past halfway from 65504 to 65536: infinity
  if (u < 0x38800000u) {                       // below 2^-14: a subnormal (or zero) of 2^-24 steps
    const float steps = std::nearbyint(std::bit_cast<float>(u) * 16777216.0f);  // exact scaling, RNE
    return sign | static_cast<uint16_t>(steps);  // 1024 steps is the smallest normal: same bits
  }
  uint32_t h = (((u >> 23) - 112) << 10) | ((u & 0x7fffffu) >> 13);
  const uint32_t rest = u & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry rolls into the exponent
  return sign | static_cast<uint16_t>(h);
}

float load(const std::byte* p, DType dtype) {
  if (dtype == DType::kF32) {
    float x;
    std::memcpy(&x, p, 4);
    return x;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (dtype == DType::kBF16) return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
  return half_to_float(h);
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
    h = float_to_half(y);
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

void invert_scale_lenient(std::span<std::byte> data, DType dtype, const std::string& key) {
  check_scale_dtype(dtype, key);
  invert_scales(data, dtype);
}

void invert_scale_strict(std::span<std::byte> data, DType dtype, const std::string& key) {
  check_scale_dtype(dtype, key);
  check_scales_positive(data, dtype, key);
  invert_scales(data, dtype);
}

}  // namespace wmap
