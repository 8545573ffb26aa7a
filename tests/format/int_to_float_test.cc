// I64 -> F32 / BF16 / F16 by value (format/dtype_convert.h i64_to_float), as torch's copy_ of an
// int64 tensor into a float one: through F32, then the dtype's round to nearest even, F16
// overflowing to infinity. vLLM's compressed-tensors Marlin MoE keeps each expert's weight_shape
// so (int4-nvfp4.md section 5.2); the loads themselves are checked against the numpy reference.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "wmap/format/dtype_convert.h"
#include "wmap/util/error.h"

namespace wmap {
namespace {

std::vector<uint16_t> convert16(const std::vector<int64_t>& v, DType dtype) {
  std::vector<std::byte> in(8 * v.size()), out(2 * v.size());
  std::memcpy(in.data(), v.data(), in.size());
  i64_to_float(in, out, dtype, "experts.w13_weight_shape");
  std::vector<uint16_t> r(v.size());
  std::memcpy(r.data(), out.data(), out.size());
  return r;
}

TEST(IntToFloat, Bf16RoundsToNearestEven) {
  // 256 = 0x4380; 257 is the midpoint of 256 and 258: the even mantissa (256) wins; 259 -> 260.
  EXPECT_EQ(convert16({0, 1, 256, 257, 259, 7168, 18432, -2}, DType::kBF16),
            (std::vector<uint16_t>{0x0000, 0x3f80, 0x4380, 0x4380, 0x4382, 0x45e0, 0x4690, 0xc000}));
}

TEST(IntToFloat, F16RoundsToNearestEvenAndOverflowsToInfinity) {
  // 2049: midpoint of 2048 and 2050 -> 2048 (even); 65504 is the largest finite, 65520 rounds up.
  EXPECT_EQ(convert16({2048, 2049, 2051, 65504, 65519, 65520, 1 << 20}, DType::kF16),
            (std::vector<uint16_t>{0x6800, 0x6800, 0x6802, 0x7bff, 0x7bff, 0x7c00, 0x7c00}));
  EXPECT_EQ(f32_bits_to_f16_rne(0x3f800000u), 0x3c00);  // 1.0
  EXPECT_EQ(f32_bits_to_f16_rne(0x33800000u), 0x0001);  // 2^-24: the smallest subnormal
  EXPECT_EQ(f32_bits_to_f16_rne(0x33000000u), 0x0000);  // 2^-25: the tie goes to even (zero)
  EXPECT_EQ(f32_bits_to_f16_rne(0xffc00000u), 0xfe00);  // NaN keeps its sign
}

TEST(IntToFloat, F32AndSizeErrorsNameTheParameter) {
  const std::vector<int64_t> v{16777217, 3};  // 2^24 + 1 is not an F32: rounds to 2^24
  std::vector<std::byte> in(16), out(8);
  std::memcpy(in.data(), v.data(), 16);
  i64_to_float(in, out, DType::kF32, "w");
  float f[2];
  std::memcpy(f, out.data(), 8);
  EXPECT_EQ(f[0], 16777216.0f);
  EXPECT_EQ(f[1], 3.0f);
  std::vector<std::byte> small(6);
  try {
    i64_to_float(in, small, DType::kBF16, "experts.w2_weight_shape");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts.w2_weight_shape: I64 -> BF16 of 16 bytes into 6"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(i64_to_float(in, out, DType::kI32, "w"), Error);
}

}  // namespace
}  // namespace wmap
