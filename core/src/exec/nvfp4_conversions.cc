#include "wmap/exec/nvfp4_conversions.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "wmap/format/layout_transforms.h"
#include "wmap/util/error.h"

namespace wmap {

void block_scale_swizzle(std::span<const std::byte> in, std::span<std::byte> out, uint64_t rows, uint64_t cols,
                         uint64_t pad_rows, uint64_t pad_cols, const std::string& key) {
  const uint64_t matrix = rows * cols, padded = pad_rows * pad_cols;
  if (rows == 0 || cols == 0 || rows > pad_rows || cols > pad_cols || pad_rows % 128 != 0 || pad_cols % 4 != 0 ||
      in.size() % matrix != 0 || out.size() != in.size() / matrix * padded) {
    throw Error(ErrorCode::kValidation, key + ": block-scale swizzle of [" + std::to_string(rows) + ", " +
                                            std::to_string(cols) + "] matrices padded to [" + std::to_string(pad_rows) +
                                            ", " + std::to_string(pad_cols) + "] got " + std::to_string(in.size()) +
                                            " assembled bytes for " + std::to_string(out.size()));
  }
  for (uint64_t m = 0, n = in.size() / matrix; m < n; ++m) {
    const std::byte* src = in.data() + m * matrix;
    std::byte* dst = out.data() + m * padded;
    for (uint64_t r = 0; r < pad_rows; r += 128) {
      const uint64_t band_rows = r < rows ? std::min<uint64_t>(128, rows - r) : 0;  // 0: a band of padding
      block_scale_swizzle_band(src + std::min(r, rows) * cols, band_rows, cols, cols, pad_cols, dst + r * pad_cols);
    }
  }
}

namespace {

float value_at(std::span<const std::byte> in, uint64_t i, const std::string& key) {
  float v;
  std::memcpy(&v, in.data() + 4 * i, 4);
  if (!std::isfinite(v) || v < 0.0f) {
    throw Error(ErrorCode::kValidation, key + ": NVFP4 global scale " + std::to_string(i) + " of its sources is " +
                                            std::to_string(v) + "; expected a finite value >= 0");
  }
  return v;
}

// torch.allclose's default tolerance (rtol 1e-5, atol 1e-8), as TensorRT-LLM compares w1 and w3.
bool close(float a, float b) {
  return std::fabs(static_cast<double>(a) - b) <= 1e-8 + 1e-5 * std::fabs(static_cast<double>(b));
}

}  // namespace

void nvfp4_scales(std::span<const std::byte> in, std::span<std::byte> out, Conversion::ScaleOp op, uint64_t group,
                  uint64_t tail, const std::string& key) {
  using Op = Conversion::ScaleOp;
  const uint64_t n = out.size() / 4;
  if (group == 0 || out.size() % 4 != 0 || in.size() != 4 * (n * group + tail)) {
    throw Error(ErrorCode::kValidation, key + ": NVFP4 scales over groups of " + std::to_string(group) + " (+" +
                                            std::to_string(tail) + ") got " + std::to_string(in.size()) +
                                            " assembled bytes for " + std::to_string(n) + " values");
  }
  float tail_max = 0.0f;
  for (uint64_t i = 0; i < tail; ++i) tail_max = std::max(tail_max, value_at(in, n * group + i, key));
  const float one = 1.0f, sixth = one / 6.0f;
  for (uint64_t i = 0; i < n; ++i) {
    float m = 0.0f;
    for (uint64_t k = 0; k < group; ++k) m = std::max(m, value_at(in, i * group + k, key));
    float v = m;
    switch (op) {
      case Op::kMax: break;
      case Op::kInvMax: v = one / m; break;
      case Op::kMaxProduct: v = m * tail_max; break;
      case Op::kInvSixth: v = (one / m) * sixth; break;  // on CUDA, x / 6.0 multiplies by f32(1/6)
      case Op::kExpertAlpha: {
        // load_all_fp4_weight_scales_and_alphas: w1's weight_scale_2 when w3's is close to it,
        // else the larger; alpha = 1 / (input_scale * (1 / weight_scale_2)), input_scale = 1 / max.
        const float first = value_at(in, i * group, key);
        bool all_close = true;
        for (uint64_t k = 1; k < group; ++k) all_close = all_close && close(value_at(in, i * group + k, key), first);
        const float w = all_close ? first : m;
        const float input = one / tail_max;
        v = one / (input * (one / w));
        break;
      }
    }
    std::memcpy(out.data() + 4 * i, &v, 4);
  }
}

}  // namespace wmap
