#pragma once
// The NVFP4 variant a checkpoint is quantised in, read once from config.json's
// quantization_config (after the loader merged a ModelOpt export's hf_quant_config.json into it):
// ModelOpt (quant_algo "NVFP4": `weight` U8, `weight_scale` F8_E4M3 per 16 values,
// `weight_scale_2` and `input_scale` F32 global scales) or compressed-tensors
// nvfp4-pack-quantized (the same bytes as `weight_packed`, with `weight_global_scale` =
// 1 / weight_scale_2 and `input_global_scale` = 1 / input_scale; mappings/rules/nvfp4.yaml
// renames them to ModelOpt's names). Which modules it leaves unquantised. int4-nvfp4.md sections
// 1, 2 and 6. Plain value; thread-safe.

#include <optional>
#include <string>
#include <string_view>

#include "wmap/spec/model_config.h"
#include "wmap/spec/module_list.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct Nvfp4Format {
  enum class Source { kModelOpt, kCompressedTensors };
  Source source = Source::kModelOpt;
  ModuleList ignore;  // ModelOpt exclude_modules, compressed-tensors ignore

  // nullopt when the checkpoint is not NVFP4. Throws kMalformedInput naming the config field for
  // an NVFP4 config no building block serves (a group size other than 16, a compressed-tensors
  // group that is not 4-bit float tensor_group weights on Linear targets).
  static std::optional<Nvfp4Format> detect(const ModelConfig& config);

  // Whether the checkpoint stores the global scales inverted (compressed-tensors' global scale is
  // the reciprocal of ModelOpt's scale).
  bool inverted_globals() const { return source == Source::kCompressedTensors; }
  bool ignores(std::string_view linear) const { return ignore.contains(linear); }
  // "ModelOpt NVFP4" or "compressed-tensors NVFP4".
  std::string name() const;
};

}  // namespace wmap
WMAP_PUBLIC_END
