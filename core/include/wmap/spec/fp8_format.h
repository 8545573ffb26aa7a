#pragma once
// The FP8 variant a checkpoint is quantised in, read once from config.json's quantization_config
// (after the loader merged a ModelOpt export's hf_quant_config.json into it): how its weights are
// scaled (128x128 blocks, one scale per tensor, one per output channel), whether activations have
// static input scales, which modules it leaves unquantised, and the engine-wide refusals of each
// target (docs/cli.md "Quantisation formats served"; fp8.md sections 1, 2, 8, 10). Plain value;
// thread-safe.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wmap/spec/layout.h"
#include "wmap/spec/model_config.h"
#include "wmap/spec/module_list.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct Fp8Format {
  enum class Scheme { kBlock, kTensor, kChannel };
  // Which producer's config it is: quant_method "fp8" (DeepSeek / Qwen block releases, AutoFP8
  // per-tensor), ModelOpt (quant_algo "FP8"), compressed-tensors ("float-quantized").
  enum class Source { kFp8, kModelOpt, kCompressedTensors };
  Scheme scheme = Scheme::kBlock;
  Source source = Source::kFp8;
  uint64_t block_rows = 128, block_cols = 128;  // kBlock
  bool static_input = false;                    // a per-tensor `input_scale` follows each weight
  // Modules left unquantised, as the config writes them: ModelOpt `exclude_modules` (fnmatch
  // wildcards), compressed-tensors `ignore` (names, or "re:" + a regular expression).
  ModuleList ignore;

  // nullopt when the checkpoint is not FP8-quantised. Throws kMalformedInput naming the config
  // field for an FP8 variant no building block serves (ModelOpt quant_algo other than FP8,
  // compressed-tensors block or static-channel schemes, targets other than Linear, mixed groups).
  static std::optional<Fp8Format> detect(const ModelConfig& config);

  // The refusals each engine makes for the whole checkpoint, before any read: TensorRT-LLM
  // refuses compressed-tensors' per-tensor strategy and AutoFP8's per-tensor checkpoints (fp8.md
  // 8.1, 8.3). Throws naming the config field and the engine's reason.
  void refuse_for(const ModelConfig& config, Target target) const;

  // Whether the config leaves module `linear` (a checkpoint prefix such as
  // model.layers.0.self_attn.q_proj) unquantised. Only ModelOpt and compressed-tensors list them;
  // block and AutoFP8 checkpoints say it by the scale's absence.
  bool ignores(std::string_view linear) const;
  bool lists_ignored() const { return source != Source::kFp8; }

  // How docs and messages name it: "block FP8 128x128", "ModelOpt per-tensor FP8",
  // "compressed-tensors per-channel FP8", ...
  std::string name() const;
};

}  // namespace wmap
WMAP_PUBLIC_END
