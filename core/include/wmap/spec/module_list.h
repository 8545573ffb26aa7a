#pragma once
// A quantisation config's list of modules it leaves unquantised, matched the way the engines
// match it: ModelOpt `exclude_modules` as fnmatch wildcards over the module or any module that
// holds it (vLLM ModelOptQuantConfigBase.is_layer_excluded, TensorRT-LLM's fnmatch exclusions);
// compressed-tensors `ignore` as exact names or "re:" + a regular expression matched from the
// start (vLLM's _is_equal_or_regex_match); AutoAWQ / GPTQ `modules_to_not_convert` as names
// contained in the module's name (vLLM is_layer_skipped_awq). Plain value; thread-safe.

#include <string>
#include <string_view>
#include <vector>

#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct ModuleList {
  enum class Style { kFnmatch, kCompressedTensors, kSubstring };
  Style style = Style::kFnmatch;
  std::vector<std::string> patterns;

  // Whether module `linear` (a checkpoint prefix such as model.layers.0.self_attn.q_proj) is listed.
  bool contains(std::string_view linear) const;
};

}  // namespace wmap
WMAP_PUBLIC_END
