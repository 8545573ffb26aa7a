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

// Output rows of `bytes` (a multiple of 16) from an aligned panel: streaming stores where `stream`
// (they bypass the cache, so a row's lines are not read for ownership first).
inline void store_row(std::byte* dst, const std::byte* row, uint64_t bytes, bool stream) {
#if defined(__x86_64__)
  if (stream) {
    for (uint64_t q = 0; q < bytes; q += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + q), _mm_load_si128(reinterpret_cast<const __m128i*>(row + q)));
    return;
  }
#endif
  (void)stream;
  std::memcpy(dst, row, bytes);
}

// Streaming stores pay from here (measured: a 512 x 1024 BF16 transpose, 1 MiB, was already
// 10 % faster streamed; a 1024 x 16384 one, 32 MiB, 4.5x).
constexpr uint64_t kStreamBytes = 1 << 20;

template <class T>
void gather_tile_2d(const std::byte* src, uint64_t rows, uint64_t cols, uint64_t row_step, uint64_t col_step,
                    std::byte* out, uint64_t pitch);

// A transpose of at least one whole panel. Tiles of 32 x 32 read 32 source rows that are a
// power of two apart (a checkpoint's [H, 2I] rows are 4-32 KiB), so their lines share cache sets
// and are evicted before the tile has used them, and writing 64 bytes into each of 32 output rows
// reads every output line for ownership: 1.5 GB/s on a 5120 x 16384 BF16 slab against memcpy's
// 4.6-5. Panels instead: each of kPanelCols source rows is read whole (128 bytes) into an aligned
// panel, transposed there by 8 x 8 blocks, and each output row leaves as one 128-256 byte run,
// streamed for large outputs; panels walk along the source rows (kPanelCols sequential streams
// the prefetcher follows). bench/transpose_bench.cc, same window: that slab 3.1-3.3 GB/s, a
// 2048 x 2048 one 1.7-2.3 -> 5.9-6.9, 4-byte words 4096 x 1536 0.9-1.1 -> 4.8-5.3.
template <class T>
void transpose_panels(const std::byte* src, uint64_t rows, uint64_t cols, uint64_t col_step, T* dst, uint64_t pitch,
                      Block8<T> block) {
  constexpr uint64_t kPanelRows = 128 / sizeof(T);  // output rows: 128 contiguous source bytes
  constexpr uint64_t kPanelCols = 64;               // output columns: source rows
  alignas(64) T in[kPanelCols * kPanelRows];        // in[j][i]: source row j
  alignas(64) T panel[kPanelRows * kPanelCols];     // panel[i][j]: output row i
  const uint64_t ri = rows / kPanelRows * kPanelRows, cj = cols / kPanelCols * kPanelCols;
  const bool stream = reinterpret_cast<uintptr_t>(dst) % 16 == 0 && pitch * sizeof(T) % 16 == 0 &&
                      rows * cols * sizeof(T) >= kStreamBytes;
  for (uint64_t j0 = 0; j0 < cj; j0 += kPanelCols) {
    for (uint64_t i0 = 0; i0 < ri; i0 += kPanelRows) {
      const std::byte* s = src + i0 * sizeof(T) + j0 * col_step;
      for (uint64_t j = 0; j < kPanelCols; ++j)
        std::memcpy(in + j * kPanelRows, s + j * col_step, sizeof(in) / kPanelCols);
      for (uint64_t j = 0; j < kPanelCols; j += 8) {
        for (uint64_t i = 0; i < kPanelRows; i += 8)
          block(reinterpret_cast<const std::byte*>(in + j * kPanelRows + i), kPanelRows * sizeof(T),
                panel + i * kPanelCols + j, kPanelCols);
      }
      for (uint64_t i = 0; i < kPanelRows; ++i)
        store_row(reinterpret_cast<std::byte*>(dst + (i0 + i) * pitch + j0),
                  reinterpret_cast<const std::byte*>(panel + i * kPanelCols), kPanelCols * sizeof(T), stream);
    }
  }
#if defined(__x86_64__)
  if (stream) _mm_sfence();  // streaming stores are weakly ordered: visible before the caller hands the buffer on
#endif
  // The edges, by tiles: the output rows past the last whole panel, and the columns right of it.
  if (ri < rows)
    gather_tile_2d<T>(src + ri * sizeof(T), rows - ri, cols, sizeof(T), col_step,
                      reinterpret_cast<std::byte*>(dst + ri * pitch), pitch);
  if (cj < cols)
    gather_tile_2d<T>(src + cj * col_step, ri, cols - cj, sizeof(T), col_step, reinterpret_cast<std::byte*>(dst + cj),
                      pitch);
}

// 32 x 32 tiles; one instantiation per element size so each element is one load and store. A
// transpose (elements contiguous along the output rows' source: row_step == sizeof(T)) takes
// whole 8 x 8 blocks through the vector kernel where there is one, and whole panels
// (transpose_panels) where it is that large.
template <class T>
void gather_tile_2d(const std::byte* src, uint64_t rows, uint64_t cols, uint64_t row_step, uint64_t col_step,
                    std::byte* out, uint64_t pitch) {
  constexpr uint64_t kTile = 32;
  T* dst = reinterpret_cast<T*>(out);  // row i at dst + i * pitch (elements)
  const Block8<T> block = row_step == sizeof(T) ? block8<T>() : nullptr;
  if (block && rows >= 128 / sizeof(T) && cols >= 64)
    return transpose_panels<T>(src, rows, cols, col_step, dst, pitch, block);
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
