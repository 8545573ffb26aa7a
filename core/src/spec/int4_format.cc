// 4-bit integer W4A16 variants from quantization_config (int4-nvfp4.md sections 1 and 2; the
// engines' config parsers: vLLM AutoAWQConfig / AutoGPTQConfig.from_config and TYPE_MAP,
// CompressedTensorsConfig with CompressedTensorsWNA16; TensorRT-LLM model_config.py
// load_hf_quant_config and quant_config_utils.py _quant_config_from_config_group).
#include "wmap/spec/int4_format.h"

namespace wmap {
namespace {

uint64_t group_of(const ModelConfig& c, const std::string& field, int64_t g) {
  if (g == -1) return 0;
  if (g <= 0) c.fail(field, std::to_string(g) + " is not a group size (a positive count of inputs, or -1)");
  return static_cast<uint64_t>(g);
}

Int4Format compressed_tensors(const ModelConfig& c) {
  Int4Format f;
  f.source = Int4Format::Source::kCompressedTensors;
  const std::vector<std::string> groups = c.keys("quantization_config.config_groups");
  if (groups.size() != 1) {
    c.fail("quantization_config.config_groups",
           std::to_string(groups.size()) + " config groups: one W4A16 group for every Linear is served");
  }
  const std::string at = "quantization_config.config_groups." + groups[0];
  if (c.get_string_list(at + ".targets") != std::vector<std::string>{"Linear"}) {
    c.fail(at + ".targets", "only [\"Linear\"] is served (every linear module; ignore lists the exceptions)");
  }
  const int64_t bits = c.get_int(at + ".weights.num_bits", 0);
  const std::string type = c.get_string(at + ".weights.type", "");
  if (bits != 4 || type != "int") {
    c.fail(at + ".weights", "num_bits " + std::to_string(bits) + " type '" + type +
                                "' is not served: pack-quantized is served for 4-bit int weights (W4A16)");
  }
  if (const auto act = c.json_at(at + ".input_activations"); act && *act != "null") {
    c.fail(at + ".input_activations", "quantised activations (W4A8) are not served; W4A16 has none");
  }
  const std::string strategy = c.get_string(at + ".weights.strategy", "group");
  if (strategy == "group") {
    f.group = group_of(c, at + ".weights.group_size", c.get_int(at + ".weights.group_size", 0));
    if (f.group == 0) c.fail(at + ".weights.group_size", "strategy group needs a group_size");
  } else if (strategy == "channel") {
    f.group = 0;
  } else {
    c.fail(at + ".weights.strategy", "'" + strategy + "' is not served (group, channel)");
  }
  f.symmetric = c.get_bool(at + ".weights.symmetric", true);
  const std::string actorder = c.get_string(at + ".weights.actorder", "");
  // "weight" reorders the weights offline and stores no g_idx: the layout of no actorder.
  if (actorder == "group") {
    f.act_order = true;
  } else if (!actorder.empty() && actorder != "weight") {
    c.fail(at + ".weights.actorder", "'" + actorder + "' is not an actorder (group, weight, null)");
  }
  f.ignore = {ModuleList::Style::kCompressedTensors, c.get_string_list("quantization_config.ignore")};
  return f;
}

}  // namespace

std::optional<Int4Format> Int4Format::detect(const ModelConfig& c) {
  if (!c.has("quantization_config")) return std::nullopt;
  const std::string method = c.get_string("quantization_config.quant_method", "");
  Int4Format f;
  f.ignore.style = ModuleList::Style::kSubstring;
  if (method == "awq") {
    const int64_t bits = c.get_int("quantization_config.bits", c.get_int("quantization_config.w_bit", 4));
    if (bits != 4) {
      c.fail("quantization_config.bits",
             std::to_string(bits) + "-bit AWQ is not served (vLLM's AutoAWQConfig takes 4 bits only)");
    }
    const std::string version = c.get_string("quantization_config.version", "gemm");
    if (version != "gemm" && version != "GEMM") {
      c.fail("quantization_config.version", "AutoAWQ '" + version + "' is not served (the GEMM layout is)");
    }
    if (!c.get_bool("quantization_config.zero_point", true)) {
      c.fail("quantization_config.zero_point", "AWQ without zero points is not served");
    }
    f.source = Source::kAwq;
    f.symmetric = false;
    f.group = group_of(c, "quantization_config.group_size",
                       c.get_int("quantization_config.group_size", c.get_int("quantization_config.q_group_size", 128)));
    f.ignore.patterns = c.get_string_list("quantization_config.modules_to_not_convert");
    return f;
  }
  if (method == "gptq") {
    const int64_t bits = c.get_int("quantization_config.bits", 4);
    if (bits != 4) c.fail("quantization_config.bits", std::to_string(bits) + "-bit GPTQ is not served (4-bit is)");
    if (!c.get_bool("quantization_config.sym", true)) {
      c.fail("quantization_config.sym",
             "asymmetric GPTQ is not served: current vLLM refuses it (AutoGPTQConfig: \"Unsupported quantization "
             "config: bits=4, sym=False\")");
    }
    const std::string format = c.get_string("quantization_config.checkpoint_format", "gptq");
    if (format != "gptq") {
      c.fail("quantization_config.checkpoint_format",
             "'" + format + "' is not served (GPTQ v1, checkpoint_format gptq, stores zero - 1)");
    }
    if (c.has("quantization_config.dynamic") && !c.keys("quantization_config.dynamic").empty()) {
      c.fail("quantization_config.dynamic", "per-module dynamic GPTQ configs are not served");
    }
    f.source = Source::kGptq;
    f.group = group_of(c, "quantization_config.group_size", c.get_int("quantization_config.group_size", 128));
    f.act_order = c.get_bool("quantization_config.desc_act", false);
    f.ignore.patterns = c.get_string_list("quantization_config.modules_to_not_convert");
    return f;
  }
  if (method == "compressed-tensors" && c.get_string("quantization_config.format", "") == "pack-quantized") {
    return compressed_tensors(c);
  }
  return std::nullopt;
}

void Int4Format::refuse_for(const ModelConfig& c, Target target) const {
  if (target != Target::kTrtllm) return;
  switch (source) {
    case Source::kAwq:
      c.fail("quantization_config.quant_method",
             "AutoAWQ checkpoints do not load under TensorRT-LLM: its load_hf_quant_config has no 'awq' branch, so "
             "the model is built unquantised and qweight/qzeros/scales match no parameter (it serves ModelOpt's "
             "own W4A16_AWQ export from hf_quant_config.json); use --target vllm");
    case Source::kGptq:
      c.fail("quantization_config.quant_method",
             "GPTQ under TensorRT-LLM is not served yet: its 2026 HF mapper converts each linear "
             "(convert_gptq_weights), but the W4A16_GPTQ linear method's final parameters were not read from "
             "source (int4-nvfp4.md section 9.1), and older releases refuse GPTQ; use --target vllm");
    case Source::kCompressedTensors:
      c.fail("quantization_config.config_groups",
             "compressed-tensors W4A16 (pack-quantized int) does not load under TensorRT-LLM: its "
             "_quant_config_from_config_group reads 4-bit weights only as type float (MXFP4, NVFP4) and fails "
             "on input_activations null (models/quant_config_utils.py); use --target vllm");
  }
}

std::string Int4Format::name() const {
  const char* who = source == Source::kAwq ? "AWQ" : source == Source::kGptq ? "GPTQ" : "compressed-tensors";
  std::string n = std::string(who) + " W4A16 " + (group ? "g" + std::to_string(group) : std::string("per-channel"));
  if (act_order) n += " act-order";
  if (source == Source::kCompressedTensors && !symmetric) n += " asymmetric";
  return n;
}

}  // namespace wmap
