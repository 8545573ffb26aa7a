#include "wmap/format/dtype.h"

#include <array>
#include <map>
#include <string>

namespace wmap {
namespace {

struct DTypeInfo {
  std::string_view name;
  unsigned bits;
};

// Indexed by DType; the order must match the enum.
constexpr std::array<DTypeInfo, kDTypeCount> kInfo = {{
    {"BOOL", 8},    {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},   {"I8", 8},    {"F8_E5M2", 8},
    {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16},    {"U16", 16},    {"F16", 16}, {"BF16", 16}, {"I32", 32},
    {"U32", 32},    {"F32", 32},    {"C64", 64},    {"F64", 64},    {"I64", 64}, {"U64", 64},
}};

}  // namespace

std::string_view dtype_name(DType dtype) { return kInfo[static_cast<size_t>(dtype)].name; }

unsigned dtype_bits(DType dtype) { return kInfo[static_cast<size_t>(dtype)].bits; }

std::optional<uint64_t> checked_numel(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

std::optional<uint64_t> checked_nbits(DType dtype, const std::vector<uint64_t>& shape) {
  const auto numel = checked_numel(shape);
  uint64_t bits = 0;
  if (!numel || __builtin_mul_overflow(*numel, uint64_t{dtype_bits(dtype)}, &bits)) return std::nullopt;
  return bits;
}

std::optional<uint64_t> checked_nbytes(DType dtype, const std::vector<uint64_t>& shape) {
  const auto bits = checked_nbits(dtype, shape);
  if (!bits || *bits % 8 != 0) return std::nullopt;
  return *bits / 8;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (size_t i = 0; i < kInfo.size(); ++i) {
    if (kInfo[i].name == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_torch_name(std::string_view name) {
  if (name.rfind("torch.", 0) == 0) name.remove_prefix(6);
  static const std::map<std::string, DType, std::less<>> kNames = {{"bfloat16", DType::kBF16},
                                                                   {"float16", DType::kF16},
                                                                   {"half", DType::kF16},
                                                                   {"float32", DType::kF32},
                                                                   {"float", DType::kF32},
                                                                   {"float64", DType::kF64},
                                                                   {"double", DType::kF64},
                                                                   {"float8_e4m3fn", DType::kF8_E4M3},
                                                                   {"float8_e5m2", DType::kF8_E5M2},
                                                                   {"uint8", DType::kU8},
                                                                   {"int8", DType::kI8},
                                                                   {"int16", DType::kI16},
                                                                   {"int32", DType::kI32},
                                                                   {"int64", DType::kI64},
                                                                   {"bool", DType::kBOOL},
                                                                   {"uint16", DType::kU16},
                                                                   {"uint32", DType::kU32},
                                                                   {"uint64", DType::kU64}};
  if (auto it = kNames.find(name); it != kNames.end()) return it->second;
  return std::nullopt;
}

}  // namespace wmap
