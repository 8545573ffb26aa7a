// TensorRT-LLM's NVFP4 conversions (wmap/exec/nvfp4_conversions.h) on small hand-checked inputs: the
// 128x4 swizzle's destination of every byte and its zero padding, per matrix; the global-scale
// operations in float32 with the engine's order; the checks that refuse a bad size or a NaN.
// The arithmetic on real plans is checked bit for bit against the numpy reference by
// tests/plugins/nvfp4_load_test.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "wmap/exec/nvfp4_conversions.h"
#include "wmap/util/error.h"

namespace wmap {
namespace {

TEST(BlockScaleSwizzle, EveryByteLandsWhereTheFormulaSaysAndPaddingIsZero) {
  // {rows, cols, padded rows, padded cols}: both dims padded (a band of 2 rows, a 1-byte column
  // group); a band of padding only, gpt-oss's 90 scale columns; whole bands and groups.
  const uint64_t cases[][4] = {{130, 5, 256, 8}, {100, 90, 256, 92}, {256, 8, 256, 8}};
  for (const auto& [rows, cols, pr, pc] : cases) {
    std::vector<std::byte> in(2 * rows * cols), out(2 * pr * pc, std::byte{0xee});
    for (size_t i = 0; i < in.size(); ++i) in[i] = std::byte(static_cast<uint8_t>(1 + i % 251));
    block_scale_swizzle(in, out, rows, cols, pr, pc, "s");
    std::vector<bool> hit(out.size());
    for (uint64_t e = 0; e < 2; ++e) {
      for (uint64_t m = 0; m < rows; ++m) {
        for (uint64_t k = 0; k < cols; ++k) {
          const uint64_t at =
              e * pr * pc + k % 4 + (k / 4) * 512 + (m % 32) * 16 + ((m % 128) / 32) * 4 + (m / 128) * 128 * pc;
          ASSERT_EQ(out[at], in[e * rows * cols + m * cols + k]) << rows << " " << e << " " << m << " " << k;
          hit[at] = true;
        }
      }
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (!hit[i]) {
        ASSERT_EQ(out[i], std::byte{0}) << rows << " " << i;
      }
    }
  }
  const uint64_t rows = 130, cols = 5, pr = 256, pc = 8;
  std::vector<std::byte> in(2 * rows * cols), out(2 * pr * pc);
  EXPECT_THROW(block_scale_swizzle(in, std::span(out).subspan(1), rows, cols, pr, pc, "s"), Error);
  EXPECT_THROW(block_scale_swizzle(in, out, rows, cols, 130, pc, "s"), Error);  // rows not a multiple of 128
}

std::vector<std::byte> f32s(std::initializer_list<float> v) {
  std::vector<std::byte> out(4 * v.size());
  std::memcpy(out.data(), v.begin(), out.size());
  return out;
}

float at(const std::vector<std::byte>& b, size_t i) {
  float v;
  std::memcpy(&v, b.data() + 4 * i, 4);
  return v;
}

TEST(Nvfp4Scales, EachOperationInFloat32AsTheEngineOrdersIt) {
  using Op = Conversion::ScaleOp;
  std::vector<std::byte> one(4), two(8);
  nvfp4_scales(f32s({3.0f, 3.0f}), one, Op::kInvMax, 2, 0, "s");
  EXPECT_EQ(at(one, 0), 1.0f / 3.0f);
  nvfp4_scales(f32s({0.25f, 0.5f, 3.0f}), one, Op::kMaxProduct, 2, 1, "s");  // max(group) x max(tail)
  EXPECT_EQ(at(one, 0), 1.5f);
  nvfp4_scales(f32s({3.0f}), one, Op::kInvSixth, 1, 0, "s");
  EXPECT_EQ(at(one, 0), (1.0f / 3.0f) * (1.0f / 6.0f));
  // Per expert: w1's weight_scale_2 when w3's is close, else the larger; the tail's max input scale.
  nvfp4_scales(f32s({0.5f, 0.5000001f, 0.5f, 0.75f, 0.2f, 0.4f}), two, Op::kExpertAlpha, 2, 2, "s");
  const float input = 1.0f / 0.4f;
  EXPECT_EQ(at(two, 0), 1.0f / (input * (1.0f / 0.5f)));
  EXPECT_EQ(at(two, 1), 1.0f / (input * (1.0f / 0.75f)));
  nvfp4_scales(f32s({0.0f, 0.0f, 0.4f}), one, Op::kExpertAlpha, 2, 1, "s");  // a zero scale: alpha 0
  EXPECT_EQ(at(one, 0), 0.0f);
  EXPECT_THROW(nvfp4_scales(f32s({-1.0f}), one, Op::kMax, 1, 0, "s"), Error);
  EXPECT_THROW(nvfp4_scales(f32s({1.0f, 2.0f}), one, Op::kMax, 1, 0, "s"), Error);  // size
}

}  // namespace
}  // namespace wmap
