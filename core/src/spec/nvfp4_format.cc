// NVFP4 variants from quantization_config (int4-nvfp4.md sections 1, 2; the engines' config
// parsers: vLLM ModelOptNvFp4Config._from_config and CompressedTensorsConfig, TensorRT-LLM
// model_config.py load_hf_quant_config / _build_modelopt_quant_config and
// quant_config_utils.py _quant_config_from_config_group).
#include "wmap/spec/nvfp4_format.h"

namespace wmap {

std::optional<Nvfp4Format> Nvfp4Format::detect(const ModelConfig& c) {
  if (!c.has("quantization_config")) return std::nullopt;
  const std::string method = c.get_string("quantization_config.quant_method", "");
  Nvfp4Format f;
  if (method == "modelopt") {
    if (c.get_string("quantization_config.quant_algo", "") != "NVFP4") return std::nullopt;
    // Both engines build NVFP4 with 16-value blocks; ModelOpt writes group_size 16.
    if (c.has("quantization_config.group_size") && c.get_int("quantization_config.group_size", 0) != 16) {
      c.fail("quantization_config.group_size", "NVFP4 blocks are 16 values; " +
                                                   std::to_string(c.get_int("quantization_config.group_size", 0)) +
                                                   " is not served");
    }
    f.ignore.patterns = c.get_string_list("quantization_config.exclude_modules");
    for (auto& s : c.get_string_list("quantization_config.ignore")) f.ignore.patterns.push_back(s);
    return f;
  }
  // A compressed-tensors config without `format` is taken for NVFP4, as QuantFormat names it.
  if (method != "compressed-tensors" ||
      c.get_string("quantization_config.format", "nvfp4-pack-quantized") != "nvfp4-pack-quantized") {
    return std::nullopt;
  }
  f.source = Source::kCompressedTensors;
  f.ignore = {ModuleList::Style::kCompressedTensors, c.get_string_list("quantization_config.ignore")};
  for (const std::string& g : c.keys("quantization_config.config_groups")) {
    const std::string at = "quantization_config.config_groups." + g;
    if (c.get_string_list(at + ".targets") != std::vector<std::string>{"Linear"}) {
      c.fail(at + ".targets", "only [\"Linear\"] is served (every linear module; ignore lists the exceptions)");
    }
    const int64_t bits = c.get_int(at + ".weights.num_bits", 4), group = c.get_int(at + ".weights.group_size", 16);
    const std::string type = c.get_string(at + ".weights.type", "float");
    if (bits != 4 || type != "float" || group != 16) {
      c.fail(at + ".weights", "num_bits " + std::to_string(bits) + " type '" + type + "' group_size " +
                                  std::to_string(group) +
                                  " is not NVFP4 (num_bits 4, type float, group_size 16), which "
                                  "nvfp4-pack-quantized stores");
    }
  }
  return f;
}

std::string Nvfp4Format::name() const {
  return source == Source::kModelOpt ? "ModelOpt NVFP4" : "compressed-tensors NVFP4";
}

}  // namespace wmap
