#pragma once
// Element conversions a parameter's Conversion runs once its pieces are assembled
// (spec/model_spec.h): F32 -> BF16 rounded to nearest even, and FP8 (E4M3, "fn": no infinities,
// S.1111.111 is NaN) block dequantization w x scale in F32. Bit-exact with torch: `copy_` of an
// F32 tensor into BF16, `(w.to(float32) * s).to(out)`. Pure functions; thread-safe.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "wmap/format/dtype.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

// Round to nearest, ties to even; any NaN becomes 0x7fc0 (c10::detail::round_to_nearest_even).
uint16_t f32_bits_to_bf16_rne(uint32_t f);
float fp8_e4m3_to_f32(uint8_t v);

// n F32 values (4n bytes) -> n BF16 values (2n bytes).
void f32_to_bf16_rne(std::span<const std::byte> in, std::span<std::byte> out);
// weight: F8_E4M3 [rows, cols]; scales: F32 [ceil(rows/br), ceil(cols/bc)]; out: rows x cols of
// `out_dtype` (F32 or BF16). Throws kValidation naming `key` when the sizes do not fit.
void fp8_block_dequant(std::span<const std::byte> weight, std::span<const std::byte> scales, uint64_t rows,
                       uint64_t cols, uint64_t br, uint64_t bc, DType out_dtype, std::span<std::byte> out,
                       const std::string& key);

}  // namespace wmap
WMAP_PUBLIC_END
