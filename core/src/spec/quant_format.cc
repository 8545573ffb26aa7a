#include "wmap/spec/quant_format.h"

#include "wmap/spec/fp8_format.h"
#include "wmap/spec/int4_format.h"
#include "wmap/spec/nvfp4_format.h"
#include "wmap/util/error.h"

namespace wmap {
namespace {
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
}  // namespace

QuantFormat QuantFormat::detect(const ModelConfig& config) {
  QuantFormat f;
  if (!config.has("quantization_config")) return f;
  f.method = config.get_string("quantization_config.quant_method", "");
  if (f.method == "fp8")
    f.kind = Kind::kFp8;
  else if (f.method == "mxfp4" || f.method == "gpt_oss_mxfp4")
    f.kind = Kind::kMxfp4;
  else if (f.method == "compressed-tensors")
    f.kind = Kind::kCompressedTensors;
  else if (f.method == "gptq" || f.method == "awq")
    f.kind = Kind::kGptqAwq;
  else if (f.method == "modelopt")
    f.kind = Kind::kModelOpt;
  else
    f.kind = Kind::kOther;
  f.scheme = f.method;
  if (f.kind == Kind::kMxfp4) f.scheme = "MXFP4";
  if (f.kind == Kind::kCompressedTensors) {
    f.scheme = "compressed-tensors " + config.get_string("quantization_config.format", "nvfp4-pack-quantized");
    if (f.scheme == "compressed-tensors nvfp4-pack-quantized") f.scheme = "compressed-tensors NVFP4";
  }
  try {
    if (const auto fp8 = Fp8Format::detect(config)) f.scheme = fp8->name();
  } catch (const Error&) {
    // An FP8 variant no building block serves: the plugin host refuses it by name.
  }
  try {
    if (const auto nvfp4 = Nvfp4Format::detect(config)) {
      f.scheme = nvfp4->name();
      f.nvfp4 = true;
    }
  } catch (const Error&) {
    // Refused by name where a linear asks for it.
  }
  try {
    if (const auto int4 = Int4Format::detect(config)) f.scheme = int4->name();
  } catch (const Error&) {
    // Refused by name by the plugin host.
  }
  return f;
}

bool QuantFormat::packed_weight(std::string_view key, DType dtype) const {
  switch (kind) {
    case Kind::kMxfp4: return ends_with(key, "_blocks");
    case Kind::kCompressedTensors: return ends_with(key, ".weight_packed");
    case Kind::kGptqAwq: return ends_with(key, ".qweight");
    case Kind::kModelOpt: return ends_with(key, ".weight") && dtype == DType::kU8;
    default: return false;
  }
}

}  // namespace wmap
