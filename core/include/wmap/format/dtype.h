#pragma once
// Every dtype of the safetensors format with its size in bits. Stateless, thread-safe.

#include <cstdint>
#include <optional>
#include <vector>
#include <string_view>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

enum class DType : uint8_t {
  kBOOL,
  kF4,
  kF6_E2M3,
  kF6_E3M2,
  kU8,
  kI8,
  kF8_E5M2,
  kF8_E4M3,
  kF8_E8M0,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kC64,
  kF64,
  kI64,
  kU64,
};
inline constexpr int kDTypeCount = 20;

std::string_view dtype_name(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);
// The dtype torch (or numpy) names `name`, with or without "torch." ("bfloat16", "torch.half",
// "float8_e4m3fn"; config.json's torch_dtype); nullopt when unknown.
std::optional<DType> dtype_from_torch_name(std::string_view name);
// Bits per element: 4 and 6 for the sub-byte float kinds, 8 for BOOL.
unsigned dtype_bits(DType dtype);

// The one rule for a tensor's size, bytes = elements x bits / 8, each step checked against 64-bit
// overflow. nullopt when the product overflows.
std::optional<uint64_t> checked_numel(const std::vector<uint64_t>& shape);
std::optional<uint64_t> checked_nbits(DType dtype, const std::vector<uint64_t>& shape);
// Whole bytes: nullopt on overflow, or when the bits are not a whole number of bytes (an odd
// count of a 4-bit dtype).
std::optional<uint64_t> checked_nbytes(DType dtype, const std::vector<uint64_t>& shape);

}  // namespace wmap
WMAP_PUBLIC_END
