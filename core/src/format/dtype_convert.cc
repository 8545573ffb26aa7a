#include "wmap/format/dtype_convert.h"

#include <array>
#include <cmath>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <algorithm>

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

uint16_t f32_bits_to_f16_rne(uint32_t f) {
  const auto sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  const uint32_t a = f & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and above round to infinity
  if (a < 0x38800000u) {                        // below 2^-14: an F16 subnormal (or zero)
    float v;
    std::memcpy(&v, &a, 4);
    return sign | static_cast<uint16_t>(std::nearbyint(v * 16777216.0f));  // units of 2^-24, ties to even
  }
  const uint32_t x = a - 0x38000000u;  // rebias the exponent (127 -> 15)
  return sign | static_cast<uint16_t>((x + 0xfffu + ((x >> 13) & 1u)) >> 13);
}

void i64_to_float(std::span<const std::byte> in, std::span<std::byte> out, DType dtype, const std::string& key) {
  const uint64_t esize = dtype == DType::kF32 ? 4 : (dtype == DType::kBF16 || dtype == DType::kF16) ? 2 : 0;
  const uint64_t n = in.size() / 8;
  if (esize == 0 || in.size() % 8 != 0 || out.size() != n * esize) {
    throw Error(ErrorCode::kValidation, key + ": I64 -> " + std::string(dtype_name(dtype)) + " of " +
                                            std::to_string(in.size()) + " bytes into " + std::to_string(out.size()));
  }
  for (uint64_t i = 0; i < n; ++i) {
    int64_t v;
    std::memcpy(&v, in.data() + 8 * i, 8);
    const auto f = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (esize == 4) {
      std::memcpy(out.data() + 4 * i, &f, 4);
      continue;
    }
    const uint16_t h = dtype == DType::kBF16 ? f32_bits_to_bf16_rne(bits) : f32_bits_to_f16_rne(bits);
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

uint8_t f32_to_fp8_e4m3_rne(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  if (std::isnan(x)) return sign | 0x7f;
  const double a = std::fabs(static_cast<double>(x));
  if (a < 0x1p-6) {  // subnormal (and zero): steps of 2^-9; 8 steps is the smallest normal, code 0x08
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0));
  }
  if (a >= 512.0) return sign | 0x7e;  // saturates (finite): 448
  int e = 0;
  const double f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int exponent = e - 1;
  double m = std::nearbyint((2.0 * f - 1.0) * 8.0);  // ties to even under the default rounding mode
  if (m == 8.0) {
    m = 0.0;
    ++exponent;
  }
  const int code = ((exponent + 7) << 3) | static_cast<int>(m);
  return sign | static_cast<uint8_t>(std::min(code, 0x7e));  // 0x7f would be NaN: 448 is the largest finite
}

float bf16_round(float x) {
  uint32_t f;
  std::memcpy(&f, &x, 4);
  const uint32_t r = static_cast<uint32_t>(f32_bits_to_bf16_rne(f)) << 16;
  float out;
  std::memcpy(&out, &r, 4);
  return out;
}

namespace {

// dst[k] = table[src[k] & 0x7f] | (src[k] & 0x80): the requantisation is odd in the weight (every
// step rounds to nearest even, symmetric in sign), so 128 entries serve both signs. Returns
// whether any code was NaN (0x7f / 0xff).
bool map_magnitudes_scalar(const uint8_t* src, uint8_t* dst, uint64_t n, const uint8_t* table) {
  unsigned nan = 0;
  for (uint64_t k = 0; k < n; ++k) {
    const uint8_t c = src[k];
    nan |= (c & 0x7fu) == 0x7fu;
    dst[k] = static_cast<uint8_t>(table[c & 0x7f] | (c & 0x80));
  }
  return nan != 0;
}

#if defined(__x86_64__)
// The same 32 bytes at a time: eight 16-entry pshufb lookups selected by the magnitude's high
// nibble (~6x the scalar loop on one core; the load's requantisation is CPU-bound).
__attribute__((target("avx2"))) bool map_magnitudes_avx2(const uint8_t* src, uint8_t* dst, uint64_t n,
                                                         const uint8_t* table) {
  __m256i t[8];
  for (int h = 0; h < 8; ++h) {
    t[h] = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table + 16 * h)));
  }
  const __m256i nibble = _mm256_set1_epi8(0x0f), magnitude = _mm256_set1_epi8(0x7f);
  const __m256i sign = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i nan = _mm256_setzero_si256();
  uint64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k));
    const __m256i mag = _mm256_and_si256(v, magnitude);
    nan = _mm256_or_si256(nan, _mm256_cmpeq_epi8(mag, magnitude));
    const __m256i lo = _mm256_and_si256(mag, nibble);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(mag, 4), nibble);
    __m256i r = _mm256_and_si256(v, sign);
    for (int h = 0; h < 8; ++h) {
      const __m256i pick = _mm256_cmpeq_epi8(hi, _mm256_set1_epi8(static_cast<char>(h)));
      r = _mm256_or_si256(r, _mm256_and_si256(pick, _mm256_shuffle_epi8(t[h], lo)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), r);
  }
  const bool tail = map_magnitudes_scalar(src + k, dst + k, n - k, table);
  return tail || !_mm256_testz_si256(nan, nan);
}
#endif

bool map_magnitudes(const uint8_t* src, uint8_t* dst, uint64_t n, const uint8_t* table) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return map_magnitudes_avx2(src, dst, n, table);
#endif
  return map_magnitudes_scalar(src, dst, n, table);
}

float scale_at(std::span<const std::byte> in, uint64_t i, const std::string& key, const char* what) {
  float s;
  std::memcpy(&s, in.data() + 4 * i, 4);
  if (!std::isfinite(s) || s <= 0.0f) {
    throw Error(ErrorCode::kValidation, key + ": " + what + " " + std::to_string(i) + " is " + std::to_string(s) +
                                            "; FP8 per-tensor scales must be finite and positive");
  }
  return s;
}

}  // namespace

void fp8_requant_to_group_max(std::span<const std::byte> in, std::span<const std::byte> scales,
                              std::span<std::byte> out, const std::vector<uint64_t>& parts, uint64_t group,
                              const std::string& key) {
  uint64_t weights = 0;
  for (uint64_t p : parts) weights += p;
  if (group == 0 || parts.size() % group != 0 || in.size() != weights || scales.size() != 4 * parts.size() ||
      out.size() != weights) {
    throw Error(ErrorCode::kValidation, key + ": fp8 requantisation of " + std::to_string(parts.size()) +
                                            " parts in groups of " + std::to_string(group) + " got " +
                                            std::to_string(in.size()) + " weight and " + std::to_string(scales.size()) +
                                            " scale bytes for " + std::to_string(out.size()) + " out");
  }
  uint64_t at = 0;
  for (size_t g = 0; g < parts.size(); g += group) {
    float smax = 0.0f;
    for (size_t i = g; i < g + group; ++i) smax = std::max(smax, scale_at(scales, i, key, "weight scale of part"));
    const float mb = bf16_round(smax);
    for (size_t i = g; i < g + group; ++i) {
      const float sb = bf16_round(scale_at(scales, i, key, "weight scale of part"));
      // The result depends on the code alone: one table per part (its magnitudes), then a lookup.
      std::array<uint8_t, 128> table{};
      for (unsigned c = 0; c < 128; ++c) {
        const float t = bf16_round(fp8_e4m3_to_f32(static_cast<uint8_t>(c)) * sb);  // exact product, then bf16
        table[c] = c == 0x7f ? 0x7f : f32_to_fp8_e4m3_rne(bf16_round(t / mb));
      }
      const auto* src = reinterpret_cast<const uint8_t*>(in.data()) + at;
      auto* dst = reinterpret_cast<uint8_t*>(out.data()) + at;
      if (map_magnitudes(src, dst, parts[i], table.data())) {
        uint64_t k = 0;
        while ((src[k] & 0x7fu) != 0x7fu) ++k;
        throw Error(ErrorCode::kValidation, key + ": part " + std::to_string(i) + " holds a NaN FP8 code (0x" +
                                                (src[k] == 0xff ? std::string("ff") : std::string("7f")) +
                                                ") at element " + std::to_string(k) +
                                                "; TensorRT-LLM's requantisation to the fused maximum scale is "
                                                "defined for finite weights only");
      }
      at += parts[i];
    }
  }
}

void f32_group_max(std::span<const std::byte> in, std::span<std::byte> out, uint64_t group, uint64_t tail, bool invert,
                   const std::string& key) {
  const uint64_t n = out.size() / 4;
  if (group == 0 || out.size() % 4 != 0 || in.size() != 4 * (n * group + tail)) {
    throw Error(ErrorCode::kValidation, key + ": scale reduction over groups of " + std::to_string(group) + " (+" +
                                            std::to_string(tail) + ") got " + std::to_string(in.size()) +
                                            " assembled bytes for " + std::to_string(n) + " values");
  }
  float tail_max = 0.0f;
  for (uint64_t i = 0; i < tail; ++i) tail_max = std::max(tail_max, scale_at(in, n * group + i, key, "input scale"));
  for (uint64_t i = 0; i < n; ++i) {
    float m = 0.0f;
    for (uint64_t k = 0; k < group; ++k) m = std::max(m, scale_at(in, i * group + k, key, "scale"));
    float v = invert ? 1.0f / m : m;
    if (tail) v *= tail_max;
    std::memcpy(out.data() + 4 * i, &v, 4);
  }
}

}  // namespace wmap
