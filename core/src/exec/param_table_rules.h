#pragma once
// The rules an engine's parameter table is compared with a plan by, written once so that
// `wmap plan --expect` (check_expected_params) and load_into (check_destinations) accept exactly
// the same tables (review F6b: only one of them took F8 held as uint8, only the other told float
// dtypes from integer containers). Private to core/src/exec.

#include <optional>
#include <string>
#include <string_view>

#include "wmap/format/dtype.h"

namespace wmap::exec_detail {

// The name a model built with torch.compile reports: named_parameters() of the wrapper prefixes
// every name with "_orig_mod." (torch._dynamo's OptimizedModule). TensorRT-LLM strips the
// wrapper's prefix the same way before it loads (tensorrt_llm/_torch/pyexecutor/model_loader.py,
// ModelLoader: `name.replace("_orig_mod.", "")`), so the table is matched without it.
inline std::string plain_param_name(std::string_view name) {
  static constexpr std::string_view kWrapper = "_orig_mod.";
  std::string out;
  out.reserve(name.size());
  for (size_t at = 0; at < name.size();) {
    const bool segment_start = at == 0 || name[at - 1] == '.';
    if (segment_start && name.substr(at).starts_with(kWrapper)) {
      at += kWrapper.size();
      continue;
    }
    out += name[at++];
  }
  return out;
}

inline bool is_floating(DType d) {
  switch (d) {
    case DType::kF16:
    case DType::kBF16:
    case DType::kF32:
    case DType::kF64:
    case DType::kF8_E4M3:
    case DType::kF8_E5M2:
    case DType::kF8_E8M0: return true;
    default: return false;
  }
}

// Whether an engine parameter of `engine` dtype (nullopt: unknown, only its element size is
// known) and `element_bytes` per element can hold what the plan builds as `planned`: a floating
// dtype must be the plan's; an integer one of the same element size is a bit container (numpy
// uint16 for BF16, uint8 for float8 before torch had it). Sub-byte dtypes are compared by bytes.
enum class DtypeFit { kFits, kElementSize, kOtherFloat };
inline DtypeFit dtype_fit(DType planned, std::optional<DType> engine, uint32_t element_bytes) {
  const uint32_t bits = dtype_bits(planned);
  if (bits % 8 == 0 && element_bytes != bits / 8) return DtypeFit::kElementSize;
  if (engine && *engine != planned && is_floating(*engine) && is_floating(planned)) return DtypeFit::kOtherFloat;
  return DtypeFit::kFits;
}

}  // namespace wmap::exec_detail
