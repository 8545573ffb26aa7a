#include "wmap/format/layout_transforms.h"

#include <cstring>
#include <vector>

#include "wmap/util/error.h"

namespace wmap {

namespace {

// Widens the 16-bit elements read into the front of an F32 piece in place. Backwards: F32 element
// i overwrites 16-bit elements 2i and 2i+1, both already widened (i > 0) or read first (i = 0).
template <class Widen>
void widen_16_to_f32(std::span<std::byte> data, DType dtype, const std::string& key, const char* name, Widen widen) {
  if (dtype != DType::kF32 || data.size() % 4 != 0)
    throw Error(ErrorCode::kValidation, key + ": " + name + " needs an F32 parameter piece of whole elements (got " +
                                            std::string(dtype_name(dtype)) + ", " + std::to_string(data.size()) +
                                            " bytes)");
  for (uint64_t i = data.size() / 4; i-- > 0;) {
    uint16_t h;
    std::memcpy(&h, data.data() + 2 * i, 2);
    const uint32_t f = widen(h);
    std::memcpy(data.data() + 4 * i, &f, 4);
  }
}

}  // namespace

void widen_bf16_to_f32(std::span<std::byte> data, DType dtype, const std::string& key, std::span<const uint64_t>) {
  widen_16_to_f32(data, dtype, key, "bf16_to_f32", [](uint16_t h) { return uint32_t{h} << 16; });
}

uint32_t f16_bits_to_f32_bits(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return sign | 0x7f800000u | (man << 13);  // inf, NaN (payload kept)
  if (exp != 0) return sign | ((exp + 112) << 23) | (man << 13);
  if (man == 0) return sign;  // signed zero
  // Subnormal: man x 2^-24; normalise so the leading one becomes the implicit bit.
  uint32_t e = 113, m = man;
  while ((m & 0x400u) == 0) m <<= 1, --e;
  return sign | (e << 23) | ((m & 0x3ffu) << 13);
}

void widen_f16_to_f32(std::span<std::byte> data, DType dtype, const std::string& key, std::span<const uint64_t>) {
  widen_16_to_f32(data, dtype, key, "f16_to_f32", f16_bits_to_f32_bits);
}

void fill_one(std::span<std::byte> data, DType dtype, const std::string& key, std::span<const uint64_t>) {
  uint32_t one = 0;
  size_t size = 0;
  switch (dtype) {
    case DType::kF32: one = 0x3f800000u, size = 4; break;
    case DType::kBF16: one = 0x3f80u, size = 2; break;
    case DType::kF16: one = 0x3c00u, size = 2; break;
    default:
      throw Error(ErrorCode::kValidation,
                  key + ": fill_one fills F32, BF16 or F16 parameters, not " + std::string(dtype_name(dtype)));
  }
  if (data.size() % size != 0)
    throw Error(ErrorCode::kValidation, key + ": fill_one over " + std::to_string(data.size()) + " bytes, not whole " +
                                            std::string(dtype_name(dtype)) + " elements");
  for (size_t at = 0; at < data.size(); at += size) std::memcpy(data.data() + at, &one, size);  // little-endian
}

uint64_t block_scale_interleave_index(uint64_t m, uint64_t k, uint64_t cols) {
  return k % 4 + (k / 4) * 512 + (m % 32) * 16 + ((m % 128) / 32) * 4 + (m / 128) * 128 * cols;
}

void block_scale_interleave_128x4(std::span<std::byte> data, DType, const std::string& key,
                                  std::span<const uint64_t> shape) {
  const uint64_t cols = shape.empty() ? 0 : shape.back();
  if (cols == 0 || cols % 4 != 0 || data.size() % cols != 0 || (data.size() / cols) % 128 != 0)
    throw Error(ErrorCode::kValidation, key +
                                            ": block_scale_interleave_128x4 needs a [rows, cols] byte matrix with "
                                            "rows a multiple of 128 and cols of 4 (got " +
                                            std::to_string(data.size()) + " bytes, cols " + std::to_string(cols) + ")");
  const uint64_t rows = data.size() / cols;
  const std::vector<std::byte> in(data.begin(), data.end());
  // Bytes k..k+3 (k a multiple of 4) of a row stay together: move them 4 at a time.
  for (uint64_t m = 0; m < rows; ++m) {
    const std::byte* src = in.data() + m * cols;
    std::byte* dst = data.data() + block_scale_interleave_index(m, 0, cols);
    for (uint64_t k = 0; k < cols; k += 4) std::memcpy(dst + (k / 4) * 512, src + k, 4);
  }
}

void concat_columns(std::span<const std::byte> in, std::span<std::byte> out, uint64_t rows,
                    const std::vector<uint64_t>& parts, const std::string& key) {
  uint64_t row = 0;
  for (uint64_t b : parts) row += b;
  const uint64_t block = row * rows;
  if (block == 0 || in.size() != out.size() || in.size() % block != 0) {
    throw Error(ErrorCode::kValidation, key + ": concatenating " + std::to_string(parts.size()) + " parts of " +
                                            std::to_string(rows) + " rows (" + std::to_string(row) +
                                            " bytes a row) got " + std::to_string(in.size()) + " assembled bytes for " +
                                            std::to_string(out.size()));
  }
  for (uint64_t at = 0; at < in.size(); at += block) {
    const std::byte* src = in.data() + at;
    uint64_t offset = 0;  // of the part within an output row
    for (uint64_t part : parts) {
      for (uint64_t r = 0; r < rows; ++r) std::memcpy(out.data() + at + r * row + offset, src + r * part, part);
      src += rows * part;
      offset += part;
    }
  }
}

}  // namespace wmap
