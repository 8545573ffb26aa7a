// FP8 E4M3 encoding and TensorRT-LLM's per-tensor requantisation (format/dtype_convert.h): every
// finite code round-trips, midpoints go to the even code, finite values saturate at 448, the
// sign of zero is kept; a part at its group's maximum scale comes back unchanged; a NaN code or a
// bad scale is refused naming the parameter, the part and the element. The arithmetic itself is
// checked bit for bit against the independent numpy reference by the FP8 load tests, and the
// reference against exact rational arithmetic by Reference.SelfTest.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "wmap/format/dtype_convert.h"
#include "wmap/util/error.h"

namespace wmap {
namespace {

TEST(Fp8Encode, EveryFiniteCodeRoundTripsAndMidpointsGoToTheEvenCode) {
  for (unsigned c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(f32_to_fp8_e4m3_rne(fp8_e4m3_to_f32(static_cast<uint8_t>(c))), c) << c;
  }
  for (unsigned c = 0; c + 1 < 0x7f; ++c) {
    const float mid = (fp8_e4m3_to_f32(static_cast<uint8_t>(c)) + fp8_e4m3_to_f32(static_cast<uint8_t>(c + 1))) / 2;
    EXPECT_EQ(f32_to_fp8_e4m3_rne(mid), c % 2 == 0 ? c : c + 1) << c;
    EXPECT_EQ(f32_to_fp8_e4m3_rne(-mid), 0x80 | (c % 2 == 0 ? c : c + 1)) << c;
  }
  EXPECT_EQ(f32_to_fp8_e4m3_rne(463.9f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3_rne(1e30f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3_rne(-600.0f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3_rne(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8_e4m3_rne(0x1p-11f), 0x00);  // below half the smallest subnormal
}

std::vector<std::byte> bytes_of(const void* data, size_t n) {
  std::vector<std::byte> out(n);
  std::memcpy(out.data(), data, n);
  return out;
}

TEST(Fp8Requant, ThePartAtTheMaximumComesBackUnchangedTheOthersAreRescaled) {
  std::vector<uint8_t> codes;
  for (unsigned c = 0; c < 256; ++c) {
    if ((c & 0x7f) != 0x7f) codes.push_back(static_cast<uint8_t>(c));
  }
  const uint64_t n = codes.size();
  std::vector<uint8_t> both = codes;
  both.insert(both.end(), codes.begin(), codes.end());
  const float s[2] = {0.25f, 0.5f};
  auto in = bytes_of(both.data(), both.size());
  const auto scales = bytes_of(s, 8);
  std::vector<std::byte> out(2 * n);
  fp8_requant_to_group_max(in, scales, out, {n, n}, 2, "w");
  fp8_requant_to_group_max(in, scales, in, {n, n}, 2, "w");  // in place: the same bytes
  EXPECT_EQ(in, out);
  EXPECT_EQ(std::memcmp(out.data() + n, codes.data(), n), 0) << "the part at the maximum scale";
  // Halving the scale ratio halves each value (exact here: powers of two, away from the ends).
  EXPECT_EQ(static_cast<uint8_t>(out[0x38]), f32_to_fp8_e4m3_rne(0.5f));  // 1.0 x 0.25 / 0.5
}

TEST(Fp8Requant, RefusesNanCodesAndBadScalesNamingTheElement) {
  const uint8_t codes[2] = {0x10, 0xff};
  const float one = 1.0f, zero = 0.0f;
  const auto nan = bytes_of(codes, 2), ones = bytes_of(&one, 4), zeros = bytes_of(&zero, 4);
  std::vector<std::byte> out(2);
  try {
    fp8_requant_to_group_max(nan, ones, out, {2}, 1, "layers.0.qkv_proj.weight");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.qkv_proj.weight: part 0 holds a NaN FP8 code (0xff) at element 1"),
              std::string::npos)
        << e.what();
  }
  const uint8_t finite[2] = {0x10, 0x10};
  EXPECT_THROW(fp8_requant_to_group_max(bytes_of(finite, 2), zeros, out, {2}, 1, "w"), Error);
  std::vector<std::byte> small(1);
  EXPECT_THROW(fp8_requant_to_group_max(nan, ones, small, {2}, 1, "w"), Error);
}

TEST(Fp8ScaleMax, GroupsTailAndInversion) {
  const std::vector<float> v{0.5f, 2.0f, 1.0f, 0.25f, 3.0f, 4.0f};  // groups {0.5, 2}, {1, 0.25}; tail {3, 4}
  std::vector<std::byte> in(4 * v.size()), out(8);
  std::memcpy(in.data(), v.data(), in.size());
  f32_group_max(in, out, 2, 2, false, "fc31_dequant");
  float got[2];
  std::memcpy(got, out.data(), 8);
  EXPECT_EQ(got[0], 8.0f);
  EXPECT_EQ(got[1], 4.0f);
  std::vector<std::byte> one(4);
  f32_group_max(std::span(in).subspan(0, 16), one, 4, 0, true, "inv_input_scale");
  std::memcpy(got, one.data(), 4);
  EXPECT_EQ(got[0], 0.5f);
  const std::vector<float> bad{1.0f, -1.0f};
  std::memcpy(in.data(), bad.data(), 8);
  EXPECT_THROW(f32_group_max(std::span(in).subspan(0, 8), one, 2, 0, false, "s"), Error);
}

}  // namespace
}  // namespace wmap
