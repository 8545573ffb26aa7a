#pragma once
// The 4-bit integer weight-only variant a checkpoint is quantised in (W4A16), read once from
// config.json's quantization_config: AutoAWQ GEMM (quant_method "awq": qweight I32 [in, out/8] in
// AWQ's nibble order, qzeros, scales [in/g, out]), GPTQ v1 (quant_method "gptq": qweight I32
// [in/8, out], qzeros, scales, g_idx; desc_act for activation order) and compressed-tensors
// pack-quantized W4A16 (weight_packed I32 [out, in/8], weight_scale [out, in/g],
// weight_zero_point when asymmetric, weight_g_idx with actorder "group", weight_shape). Which
// modules it leaves unquantised, and each engine's refusals (int4-nvfp4.md sections 1 to 5).
// Plain value; thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "wmap/spec/layout.h"
#include "wmap/spec/model_config.h"
#include "wmap/spec/module_list.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct Int4Format {
  enum class Source { kAwq, kGptq, kCompressedTensors };
  Source source = Source::kAwq;
  uint64_t group = 128;    // inputs per scale; 0: one scale per output channel (group_size -1)
  bool symmetric = true;   // compressed-tensors: no weight_zero_point (AWQ is always asymmetric)
  bool act_order = false;  // GPTQ desc_act, compressed-tensors actorder "group": a g_idx per input
  ModuleList ignore;       // AWQ / GPTQ modules_to_not_convert, compressed-tensors ignore

  // nullopt when the checkpoint is not a 4-bit integer W4A16 one. Throws kMalformedInput naming
  // the config field for a variant no building block serves, with vLLM's reason where it refuses
  // it (asymmetric GPTQ, bits other than 4, AWQ GEMV, GPTQ v2 or dynamic configs, activations).
  static std::optional<Int4Format> detect(const ModelConfig& config);

  // TensorRT-LLM's refusals for the whole checkpoint, before any read (int4-nvfp4.md section 2):
  // it reads none of these layouts from a Hugging Face checkpoint. Throws naming the field.
  void refuse_for(const ModelConfig& config, Target target) const;

  bool ignores(std::string_view linear) const { return ignore.contains(linear); }
  // "AWQ W4A16 g128", "GPTQ W4A16 g128 act-order", "compressed-tensors W4A16 g128 asymmetric", ...
  std::string name() const;
};

}  // namespace wmap
WMAP_PUBLIC_END
