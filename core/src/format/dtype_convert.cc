#include "wmap/format/dtype_convert.h"

#include <array>
#include <cmath>
#include <cstring>

#include "wmap/util/error.h"

namespace wmap {

uint16_t f32_bits_to_bf16_rne(uint32_t f) {
  if ((f & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // any NaN: torch's canonical BF16 NaN
  return static_cast<uint16_t>((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
}

namespace {

std::array<float, 256> fp8_table() {
  std::array<float, 256> t{};
  for (unsigned v = 0; v < 256; ++v) {
    const unsigned sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 7;
    float x;
    if (exp == 0xf && man == 7) {
      // The NaN torch's e4m3fn -> f32 gives (c10 fp8e4m3fn_to_fp32_value: the 7 bits shifted in
      // under an all-ones exponent), sign kept: 0x7ff00000 / 0xfff00000 (review, lesser notes).
      const uint32_t bits = (sign ? 0x80000000u : 0u) | 0x7ff00000u;
      std::memcpy(&t[v], &bits, 4);
      continue;
    } else if (exp == 0) {
      x = std::ldexp(static_cast<float>(man) / 8.0f, -6);  // subnormal
    } else {
      x = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, static_cast<int>(exp) - 7);
    }
    t[v] = sign ? -x : x;
  }
  return t;
}

}  // namespace

float fp8_e4m3_to_f32(uint8_t v) {
  static const std::array<float, 256> table = fp8_table();
  return table[v];
}

void f32_to_bf16_rne(std::span<const std::byte> in, std::span<std::byte> out) {
  const size_t n = in.size() / 4;
  for (size_t i = 0; i < n; ++i) {
    uint32_t f;
    std::memcpy(&f, in.data() + 4 * i, 4);
    const uint16_t h = f32_bits_to_bf16_rne(f);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
}

void fp8_block_dequant(std::span<const std::byte> weight, std::span<const std::byte> scales, uint64_t rows,
                       uint64_t cols, uint64_t br, uint64_t bc, DType out_dtype, std::span<std::byte> out,
                       const std::string& key) {
  const uint64_t srows = (rows + br - 1) / br, scols = (cols + bc - 1) / bc;
  const uint64_t esize = out_dtype == DType::kF32 ? 4 : out_dtype == DType::kBF16 ? 2 : 0;
  if (br == 0 || bc == 0 || esize == 0 || weight.size() != rows * cols || scales.size() != srows * scols * 4 ||
      out.size() != rows * cols * esize) {
    throw Error(ErrorCode::kValidation,
                key + ": fp8_block_dequant needs an F8_E4M3 [" + std::to_string(rows) + ", " + std::to_string(cols) +
                    "] weight (" + std::to_string(weight.size()) + " bytes given), F32 [" + std::to_string(srows) +
                    ", " + std::to_string(scols) + "] scales (" + std::to_string(scales.size()) +
                    " bytes given) and an F32 or BF16 output (" + std::string(dtype_name(out_dtype)) + ", " +
                    std::to_string(out.size()) + " bytes)");
  }
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) {
      float s;
      std::memcpy(&s, scales.data() + ((r / br) * scols + c / bc) * 4, 4);
      const float w = fp8_e4m3_to_f32(static_cast<uint8_t>(weight[r * cols + c]));
      // torch's `weight.float() * scale` on the host keeps a NaN operand's payload, the weight's
      // first (x86 MULPS returns its first NaN source); the compiler may not reorder that here.
      const float x = std::isnan(w) ? w : std::isnan(s) ? s : w * s;
      uint32_t f;
      std::memcpy(&f, &x, 4);
      if (std::isnan(x)) f |= 0x00400000u;  // quieted, as the multiply would
      if (esize == 4) {
        std::memcpy(out.data() + (r * cols + c) * 4, &f, 4);
      } else {
        const uint16_t h = f32_bits_to_bf16_rne(f);
        std::memcpy(out.data() + (r * cols + c) * 2, &h, 2);
      }
    }
  }
}

}  // namespace wmap
