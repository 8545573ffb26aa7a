// Tiled copy of a strided 2-D block into row-major order (strided_copy.h).
#include "wmap/format/strided_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace wmap {
namespace {

// An 8 x 8 block of a transpose: out row m (m < 8, `pitch` elements apart) = element m of the
// eight source rows at `src`, `src_row` bytes apart. Null where no vector kernel is built.
template <class T>
using Block8 = void (*)(const std::byte* src, uint64_t src_row, T* out, uint64_t pitch);

#if defined(__x86_64__)
// 2-byte elements (BF16 / F16 transposes: Llama 4's experts): three rounds of SSE2 unpacks.
void block8_u16(const std::byte* src, uint64_t src_row, uint16_t* out, uint64_t pitch) {
  __m128i r[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k * src_row));
  __m128i t[8], u[8];
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm_unpacklo_epi16(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm_unpackhi_epi16(r[2 * k], r[2 * k + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 0-3 (h 0) and 4-7 (h 1)
    __m128i* tt = t + 4 * h;
    u[4 * h + 0] = _mm_unpacklo_epi32(tt[0], tt[2]);
    u[4 * h + 1] = _mm_unpackhi_epi32(tt[0], tt[2]);
    u[4 * h + 2] = _mm_unpacklo_epi32(tt[1], tt[3]);
    u[4 * h + 3] = _mm_unpackhi_epi32(tt[1], tt[3]);
  }
  for (int k = 0; k < 4; ++k) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (2 * k) * pitch), _mm_unpacklo_epi64(u[k], u[k + 4]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (2 * k + 1) * pitch), _mm_unpackhi_epi64(u[k], u[k + 4]));
  }
}

// 4-byte elements (packed int4 words, F32): AVX2 unpacks and a lane swap.
__attribute__((target("avx2"))) void block8_u32(const std::byte* src, uint64_t src_row, uint32_t* out, uint64_t pitch) {
  __m256i r[8], t[8], u[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k * src_row));
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    const __m256i* tt = t + 4 * h;
    u[4 * h + 0] = _mm256_unpacklo_epi64(tt[0], tt[2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(tt[0], tt[2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(tt[1], tt[3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(tt[1], tt[3]);
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k * pitch), _mm256_permute2x128_si256(u[k], u[k + 4], 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (k + 4) * pitch),
                        _mm256_permute2x128_si256(u[k], u[k + 4], 0x31));
  }
}
#endif

template <class T>
Block8<T> block8() {
#if defined(__x86_64__)
  if constexpr (sizeof(T) == 2) return block8_u16;
  if constexpr (sizeof(T) == 4) {
    static const bool avx2 = __builtin_cpu_supports("avx2");
    return avx2 ? block8_u32 : nullptr;
  }
#endif
  return nullptr;
}

// 32 x 32 tiles; one instantiation per element size so each element is one load and store. A
// transpose (elements contiguous along the output rows' source: row_step == sizeof(T)) takes
// whole 8 x 8 blocks through the vector kernel where there is one.
template <class T>
void gather_tile_2d(const std::byte* src, uint64_t rows, uint64_t cols, uint64_t row_step, uint64_t col_step,
                    std::byte* out, uint64_t pitch) {
  constexpr uint64_t kTile = 32;
  T* dst = reinterpret_cast<T*>(out);  // row i at dst + i * pitch (elements)
  const Block8<T> block = row_step == sizeof(T) ? block8<T>() : nullptr;
  for (uint64_t i0 = 0; i0 < rows; i0 += kTile) {
    const uint64_t i1 = std::min(rows, i0 + kTile);
    for (uint64_t j0 = 0; j0 < cols; j0 += kTile) {
      const uint64_t j1 = std::min(cols, j0 + kTile);
      uint64_t iv = i0, jv = j0;  // [i0, iv) x [j0, jv): done by whole blocks
      if (block && i1 - i0 >= 8 && j1 - j0 >= 8) {
        iv = i0 + (i1 - i0) / 8 * 8;
        jv = j0 + (j1 - j0) / 8 * 8;
        for (uint64_t i = i0; i < iv; i += 8) {
          for (uint64_t j = j0; j < jv; j += 8)
            block(src + i * row_step + j * col_step, col_step, dst + i * pitch + j, pitch);
        }
      }
      for (uint64_t i = i0; i < i1; ++i) {
        const std::byte* row = src + i * row_step;
        for (uint64_t j = i < iv ? jv : j0; j < j1; ++j)
          std::memcpy(dst + i * pitch + j, row + j * col_step, sizeof(T));
      }
    }
  }
}

}  // namespace

void copy_2d_strided(const std::byte* src, uint64_t rows, uint64_t cols, uint64_t row_step, uint64_t col_step,
                     uint64_t elem, std::byte* out, uint64_t out_row_step) {
  const uint64_t pitch = out_row_step ? out_row_step : cols * elem;
  if (pitch % elem == 0) {
    switch (elem) {
      case 1: return gather_tile_2d<uint8_t>(src, rows, cols, row_step, col_step, out, pitch);
      case 2: return gather_tile_2d<uint16_t>(src, rows, cols, row_step, col_step, out, pitch / 2);
      case 4: return gather_tile_2d<uint32_t>(src, rows, cols, row_step, col_step, out, pitch / 4);
      case 8: return gather_tile_2d<uint64_t>(src, rows, cols, row_step, col_step, out, pitch / 8);
      default: break;
    }
  }
  for (uint64_t i = 0; i < rows; ++i) {
    for (uint64_t j = 0; j < cols; ++j)
      std::memcpy(out + i * pitch + j * elem, src + i * row_step + j * col_step, elem);
  }
}

}  // namespace wmap
