#pragma once
// The checkpoint's quantisation format, detected once from config.json's quantization_config
// (quant_method, and compressed-tensors' config groups' format) for the whole plan, so checks
// that depend on the format key on it rather than on a tensor's dtype: MXFP4 blocks and NVFP4 or
// int4 packed weights are stored as U8/I32 and look like any byte tensor (review F9.4). Plain
// value; thread-safe.

#include <string>
#include <string_view>

#include "wmap/format/dtype.h"
#include "wmap/spec/model_config.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct QuantFormat {
  enum class Kind {
    kNone,               // no quantization_config
    kFp8,                // quant_method "fp8" (block or per-tensor): F8 weights
    kMxfp4,              // quant_method "mxfp4": *_blocks (U8) with *_scales
    kCompressedTensors,  // quant_method "compressed-tensors": *.weight_packed with weight_scale(s)
    kGptqAwq,            // quant_method "gptq" / "awq": *.qweight (I32) with scales, zeros
    kModelOpt,           // quant_method "modelopt": NVFP4 U8 *.weight with weight_scale
    kOther,              // another quant_method, named in `method`
  };
  Kind kind = Kind::kNone;
  std::string method;  // quant_method as config.json writes it ("" for kNone)
  // How the plan JSON and messages name the scheme: "block FP8 128x128", "ModelOpt per-tensor
  // FP8", "compressed-tensors per-channel FP8", "compressed-tensors NVFP4", "MXFP4", ...
  std::string scheme;
  bool nvfp4 = false;  // ModelOpt NVFP4 or compressed-tensors nvfp4-pack-quantized (Nvfp4Format)

  static QuantFormat detect(const ModelConfig& config);
  // Whether checkpoint tensor `key` of `dtype` holds packed quantised values in this format: a
  // weight whose bytes alone are not its values (the plan refuses one that declares no scales).
  bool packed_weight(std::string_view key, DType dtype) const;
};

}  // namespace wmap
WMAP_PUBLIC_END
