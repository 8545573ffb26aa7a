#pragma once
// Element conversions a parameter's Conversion runs once its pieces are assembled
// (spec/model_spec.h): F32 -> BF16 rounded to nearest even, and FP8 (E4M3, "fn": no infinities,
// S.1111.111 is NaN) block dequantization w x scale in F32. Bit-exact with torch: `copy_` of an
// F32 tensor into BF16, `(w.to(float32) * s).to(out)`. Pure functions; thread-safe.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "wmap/format/dtype.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

// Round to nearest, ties to even; any NaN becomes 0x7fc0 (c10::detail::round_to_nearest_even).
uint16_t f32_bits_to_bf16_rne(uint32_t f);
float fp8_e4m3_to_f32(uint8_t v);

// n F32 values (4n bytes) -> n BF16 values (2n bytes).
void f32_to_bf16_rne(std::span<const std::byte> in, std::span<std::byte> out);
// F32 -> F16 round to nearest even, overflow to infinity, NaN -> 0x7e00 with its sign
// (c10::detail::fp16_ieee_from_fp32_value).
uint16_t f32_bits_to_f16_rne(uint32_t f);
// I64 values -> `dtype` (F32, BF16 or F16) by value, through F32 as torch's copy_ of an int64
// tensor into a float one does (static_cast<float>, then that dtype's round to nearest even).
// Throws kValidation naming `key` when the sizes do not fit or the dtype is another.
void i64_to_float(std::span<const std::byte> in, std::span<std::byte> out, DType dtype, const std::string& key);
// weight: F8_E4M3 [rows, cols]; scales: F32 [ceil(rows/br), ceil(cols/bc)]; out: rows x cols of
// `out_dtype` (F32 or BF16). Throws kValidation naming `key` when the sizes do not fit.
void fp8_block_dequant(std::span<const std::byte> weight, std::span<const std::byte> scales, uint64_t rows,
                       uint64_t cols, uint64_t br, uint64_t bc, DType out_dtype, std::span<std::byte> out,
                       const std::string& key);

// F32 -> FP8 E4M3 ("fn"), round to nearest even, finite values saturating at +-448 (CUDA's
// __nv_cvt_*_to_fp8(.., __NV_SATFINITE, __NV_E4M3); torch's software Float8_e4m3fn agrees below
// 464); the sign of zero kept; NaN -> 0x7f with its sign.
uint8_t f32_to_fp8_e4m3_rne(float x);
// BF16 round to nearest even of an F32 value, as an F32 value.
float bf16_round(float x);

// TensorRT-LLM's per-tensor FP8 requantisation of one fused parameter inside its load_weights
// (linear.py rescale_fused_weights; fused_moe quantization.py
// requantize_expert_w3_w1_weight_fp8_qdq): `weights` holds the F8_E4M3 parts (parts[i] bytes each,
// one after the other), `scales` one F32 scale per part; `out` may be `weights` itself (in
// place); parts form groups of `group` (a fused q/k/v,
// gate/up, or one expert's w3/w1) and each part is requantised to its group's largest scale:
//   t = bf16(f32(w) * bf16(s_i)),  u = bf16(t / bf16(s_max)),  w' = e4m3_rne(u)
// (the scales are 0-d CUDA tensors, loaded as the bf16 of the weight in torch's CUDA loops;
// fp8.md section 7). `out` receives the requantised parts. Throws kValidation naming `key`
// and the element for a NaN weight code or a scale that is not finite and positive.
void fp8_requant_to_group_max(std::span<const std::byte> weights, std::span<const std::byte> scales,
                              std::span<std::byte> out, const std::vector<uint64_t>& parts, uint64_t group,
                              const std::string& key);

// Scale reductions of TensorRT-LLM's FP8 per-tensor methods, over F32 values: out[i] = the max
// of in[i*group, (i+1)*group) (its F32 reciprocal when `invert`), times the max of the `tail`
// values after them when tail > 0 (the fused MoE's fc31_dequant / fc2_dequant). Throws
// kValidation naming `key` for a scale that is not finite and positive.
void f32_group_max(std::span<const std::byte> in, std::span<std::byte> out, uint64_t group, uint64_t tail, bool invert,
                   const std::string& key);

}  // namespace wmap
WMAP_PUBLIC_END
