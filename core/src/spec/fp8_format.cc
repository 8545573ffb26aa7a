// FP8 variants from quantization_config (fp8.md sections 1, 2, 8; the engines' config parsers:
// vLLM Fp8Config / ModelOptFp8Config / CompressedTensorsConfig, TensorRT-LLM
// model_config.py load_hf_quant_config and quant_config_utils.py _quant_config_from_config_group).
#include "wmap/spec/fp8_format.h"

#include "wmap/util/error.h"

namespace wmap {
namespace {

constexpr const char* kServed =
    "served: fp8 (block [128, 128]; AutoFP8 per-tensor, target vllm), modelopt FP8 (per-tensor), compressed-tensors "
    "float-quantized (per-tensor target vllm; per-channel with dynamic per-token activations), modelopt NVFP4, "
    "compressed-tensors nvfp4-pack-quantized, awq / gptq / compressed-tensors pack-quantized W4A16 (target vllm), "
    "mxfp4 (gpt-oss)";

// compressed-tensors: every config group must describe the same FP8 scheme for Linear targets.
Fp8Format compressed_tensors(const ModelConfig& c) {
  Fp8Format f;
  f.source = Fp8Format::Source::kCompressedTensors;
  const std::vector<std::string> groups = c.keys("quantization_config.config_groups");
  if (groups.empty()) c.fail("quantization_config.config_groups", "a float-quantized checkpoint needs config groups");
  std::string strategy;
  for (const std::string& g : groups) {
    const std::string at = "quantization_config.config_groups." + g;
    const std::vector<std::string> targets = c.get_string_list(at + ".targets");
    if (targets != std::vector<std::string>{"Linear"}) {
      c.fail(at + ".targets", "only [\"Linear\"] is served (every linear module; ignore lists the exceptions)");
    }
    const int64_t bits = c.get_int(at + ".weights.num_bits", 0);
    const std::string type = c.get_string(at + ".weights.type", "");
    if (bits != 8 || type != "float") {
      c.fail(at + ".weights", "num_bits " + std::to_string(bits) + " type '" + type +
                                  "' is not FP8 (num_bits 8, type float); " + kServed);
    }
    const std::string s = c.get_string(at + ".weights.strategy", "");
    if (!strategy.empty() && s != strategy) {
      c.fail(at + ".weights.strategy", "groups with different strategies ('" + strategy + "', '" + s +
                                           "') are not served: every linear must share one FP8 scheme");
    }
    strategy = s;
    const bool has_input = c.has(at + ".input_activations");
    const bool dynamic = c.get_bool(at + ".input_activations.dynamic", true);
    const std::string input = c.get_string(at + ".input_activations.strategy", "");
    if (s == "tensor") {
      f.scheme = Fp8Format::Scheme::kTensor;
      f.static_input = has_input && !dynamic;
    } else if (s == "channel") {
      f.scheme = Fp8Format::Scheme::kChannel;
      if (has_input && (!dynamic || input != "token")) {
        c.fail(at + ".input_activations",
               "per-channel FP8 weights with '" + input + "' " + (dynamic ? "dynamic" : "static") +
                   " activations are not served: the hub's channel releases (FP8-dynamic) use dynamic per-token "
                   "activations, and vLLM's MoE refuses static ones");
      }
    } else if (s == "block") {
      c.fail(at + ".weights.strategy", "compressed-tensors block FP8 is not served yet; " + std::string(kServed));
    } else {
      c.fail(at + ".weights.strategy", "'" + s + "' is not an FP8 weight strategy (tensor, channel, block)");
    }
  }
  f.ignore = {ModuleList::Style::kCompressedTensors, c.get_string_list("quantization_config.ignore")};
  return f;
}

}  // namespace

std::optional<Fp8Format> Fp8Format::detect(const ModelConfig& c) {
  if (!c.has("quantization_config")) return std::nullopt;
  const std::string method = c.get_string("quantization_config.quant_method", "");
  Fp8Format f;
  if (method == "fp8") {
    if (c.has("quantization_config.weight_block_size")) {
      const auto block = c.get_int_list("quantization_config.weight_block_size");
      if (block.size() != 2 || block[0] <= 0 || block[1] <= 0) {
        c.fail("quantization_config.weight_block_size", "expected two positive integers");
      }
      f.block_rows = static_cast<uint64_t>(block[0]);
      f.block_cols = static_cast<uint64_t>(block[1]);
      return f;
    }
    // AutoFP8 (neuralmagic): one scale per tensor, input scales when activations are static.
    f.scheme = Scheme::kTensor;
    f.static_input = c.get_string("quantization_config.activation_scheme", "dynamic") == "static";
    return f;
  }
  if (method == "modelopt") {
    const std::string algo = c.get_string("quantization_config.quant_algo", "");
    if (algo == "NVFP4") return std::nullopt;  // Nvfp4Format's
    if (algo != "FP8") {
      c.fail("quantization_config.quant_algo",
             "ModelOpt '" + algo + "' is not served (only 'FP8', per-tensor, and 'NVFP4'); " + std::string(kServed));
    }
    f.source = Source::kModelOpt;
    f.scheme = Scheme::kTensor;
    f.static_input = true;  // ModelOpt FP8 calibrates an input_scale for every quantised linear
    f.ignore.patterns = c.get_string_list("quantization_config.exclude_modules");
    for (auto& s : c.get_string_list("quantization_config.ignore")) f.ignore.patterns.push_back(s);
    return f;
  }
  if (method == "compressed-tensors" && c.get_string("quantization_config.format", "") == "float-quantized") {
    return compressed_tensors(c);
  }
  return std::nullopt;
}

void Fp8Format::refuse_for(const ModelConfig& c, Target target) const {
  if (target != Target::kTrtllm || scheme != Scheme::kTensor) return;
  if (source == Source::kCompressedTensors) {
    c.fail("quantization_config.config_groups",
           "compressed-tensors per-tensor FP8 (strategy 'tensor') does not load under TensorRT-LLM: its "
           "_quant_config_from_config_group raises \"Unsupported weights_quant_strategy: tensor. Supported "
           "strategies: 'channel', 'block'.\" (models/quant_config_utils.py); use --target vllm");
  }
  if (source == Source::kFp8) {
    c.fail("quantization_config",
           "quant_method 'fp8' without weight_block_size (AutoFP8 per-tensor) does not load under TensorRT-LLM: its "
           "load_hf_quant_config takes activation_scheme 'static' for 128x128 block scales and 'dynamic' for an "
           "unquantised model (model_config.py); use --target vllm");
  }
}

bool Fp8Format::ignores(std::string_view linear) const { return ignore.contains(linear); }

std::string Fp8Format::name() const {
  if (scheme == Scheme::kBlock) {
    return "block FP8 " + std::to_string(block_rows) + "x" + std::to_string(block_cols);
  }
  const char* who = source == Source::kModelOpt            ? "ModelOpt"
                    : source == Source::kCompressedTensors ? "compressed-tensors"
                                                           : "AutoFP8";
  return std::string(who) + (scheme == Scheme::kTensor ? " per-tensor FP8" : " per-channel FP8");
}

}  // namespace wmap
