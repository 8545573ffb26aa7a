#include "wmap/format/layout_transforms.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

namespace {

// Line r32 of a tile: the 4-byte groups of the band's rows r32, 32 + r32, 64 + r32, 96 + r32.
// Built in a register: four 4-byte stores read back as one 16-byte load stall store forwarding.
inline void store_line(std::byte* dst, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
#if defined(__x86_64__)
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                   _mm_setr_epi32(static_cast<int>(a), static_cast<int>(b), static_cast<int>(c), static_cast<int>(d)));
#else
  const uint32_t line[4] = {a, b, c, d};
  std::memcpy(dst, line, 16);
#endif
}

uint32_t group_of(const std::byte* p, uint64_t n) {  // n (<= 4) bytes, zero above
  uint32_t v = 0;
  if (n == 4) {
    std::memcpy(&v, p, 4);  // a plain load, not a call
  } else {
    for (uint64_t i = 0; i < n; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);  // little-endian, as memcpy
  }
  return v;
}

#if defined(__x86_64__)
// Line r32 of four consecutive tiles at once: 16 bytes (four groups) of each of the four rows,
// transposed as a 4 x 4 matrix of 4-byte groups; tile i's line lands 512 i bytes on.
inline void store_lines4(const std::byte* src, uint64_t pitch, std::byte* dst) {
  const auto load = [&](uint64_t g) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32 * g * pitch)); };
  const __m128i a = load(0), b = load(1), c = load(2), d = load(3);
  const __m128i ab0 = _mm_unpacklo_epi32(a, b), ab1 = _mm_unpackhi_epi32(a, b);  // a0 b0 a1 b1 | a2 b2 a3 b3
  const __m128i cd0 = _mm_unpacklo_epi32(c, d), cd1 = _mm_unpackhi_epi32(c, d);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_unpacklo_epi64(ab0, cd0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 512), _mm_unpackhi_epi64(ab0, cd0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 1024), _mm_unpacklo_epi64(ab1, cd1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 1536), _mm_unpackhi_epi64(ab1, cd1));
}
#endif

}  // namespace

void block_scale_swizzle_band(const std::byte* src, uint64_t rows, uint64_t cols, uint64_t src_pitch, uint64_t pad_cols,
                              std::byte* dst) {
  // Tile q (bytes 512q..512q+511) holds columns 4q..4q+3 of the band's rows; its 16-byte line
  // r32 holds rows r32, 32 + r32, 64 + r32, 96 + r32, 4 bytes each.
  uint64_t k = 0;
#if defined(__x86_64__)
  if (rows == 128) {  // a whole band (every band but a matrix's last): four tiles a step
    for (; k + 16 <= cols; k += 16, dst += 2048) {
      for (uint64_t r32 = 0; r32 < 32; ++r32) store_lines4(src + r32 * src_pitch + k, src_pitch, dst + 16 * r32);
    }
  }
#endif
  for (; k < pad_cols; k += 4, dst += 512) {
    const uint64_t n = k >= cols ? 0 : std::min<uint64_t>(4, cols - k);  // source bytes of this group
    for (uint64_t r32 = 0; r32 < 32; ++r32) {
      uint32_t g[4] = {0, 0, 0, 0};
      for (uint64_t i = 0; i < 4; ++i) {
        if (32 * i + r32 < rows) g[i] = group_of(src + (32 * i + r32) * src_pitch + k, n);
      }
      store_line(dst + 16 * r32, g[0], g[1], g[2], g[3]);
    }
  }
}

void block_scale_interleave_128x4(std::span<std::byte> data, DType, const std::string& key,
                                  std::span<const uint64_t> shape) {
  const uint64_t cols = shape.empty() ? 0 : shape.back();
  if (cols == 0 || cols % 4 != 0 || data.size() % cols != 0 || (data.size() / cols) % 128 != 0)
    throw Error(ErrorCode::kValidation, key +
                                            ": block_scale_interleave_128x4 needs a [rows, cols] byte matrix with "
                                            "rows a multiple of 128 and cols of 4 (got " +
                                            std::to_string(data.size()) + " bytes, cols " + std::to_string(cols) + ")");
  // In place band by band: each band's bytes are copied aside (128 rows, in cache) and swizzled
  // back over themselves, not the whole parameter copied into a fresh heap buffer first.
  const uint64_t band = 128 * cols;
  thread_local std::vector<std::byte> rows;
  if (rows.size() < band) rows.resize(band);
  for (uint64_t at = 0; at < data.size(); at += band) {
    std::memcpy(rows.data(), data.data() + at, band);
    block_scale_swizzle_band(rows.data(), 128, cols, cols, cols, data.data() + at);
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
