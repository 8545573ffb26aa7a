#pragma once
// Synthetic checkpoints for demos, tests and benchmarks: the real key names, shapes and
// config.json of each family, filled with deterministic pseudo-random bytes.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "wmap/format/dtype.h"

namespace wmap::cli {

struct SynthConfig {
  std::string family;  // synth_family_names()
  uint64_t hidden = 64;
  uint64_t layers = 2;
  uint64_t heads = 8;
  uint64_t kv_heads = 2;
  uint64_t head_dim = 8;
  uint64_t intermediate = 176;
  uint64_t vocab = 250;
  bool tie_embeddings = false;
  DType dtype = DType::kBF16;
  unsigned shards = 2;
  uint64_t seed = 1;
  // MoE (qwen3_moe, mixtral, deepseek_v3).
  uint64_t experts = 8;
  uint64_t moe_intermediate = 48;
  uint64_t moe_step = 1;  // llama4: interleave_moe_layer_step
  // DeepSeek-V3 MLA and layer kinds.
  uint64_t q_lora = 128, kv_lora = 128, nope = 128, rope = 64, v_head = 128;
  uint64_t shared_experts = 1, first_dense = 1, mtp = 1;
  bool fp8 = false;                 // F8_E4M3 linears with weight_scale_inv blocks of 128x128
  DType scale_dtype = DType::kF32;  // llama family --fp8: the blocks' dtype (F32, BF16 or F16, as Qwen3 releases vary)
  // llama family --fp8: block (weight_scale_inv per 128x128), modelopt (hf_quant_config.json, 0-d
  // weight_scale / input_scale), autofp8 (quant_method fp8, activation_scheme static, 0-d scales),
  // ct-tensor (compressed-tensors strategy tensor, [1] scales), ct-channel (strategy channel,
  // weight_scale [out, 1], dynamic per-token activations).
  std::string fp8_format = "block";
  bool kv_scales = false;  // per-tensor FP8 / ct formats: FP8 KV-cache k_scale / v_scale per attention layer
  bool nvfp4 = false;      // NVFP4 linears (packed U8, F8 scales, F32 global scales)
  // --nvfp4: ct (compressed-tensors nvfp4-pack-quantized: weight_packed, [1] global scales = 1 /
  // ModelOpt's) or modelopt (hf_quant_config.json quant_algo NVFP4: weight, 0-d weight_scale_2 /
  // input_scale shared by the parts of a fused q/k/v, gate/up and each expert's gate/up).
  std::string nvfp4_format = "ct";
  // 4-bit integer W4A16 linears: "" (none), awq (AutoAWQ GEMM), gptq (v1, symmetric), ct
  // (compressed-tensors pack-quantized); F16 model and scales for awq / gptq, as their releases.
  std::string int4;
  uint64_t int4_group = 128;    // inputs per scale
  bool int4_act_order = false;  // gptq desc_act / ct actorder group: a g_idx per input
  bool int4_asym = false;       // ct: weight_zero_point
  bool qk_norm = false;         // glm4_moe: use_qk_norm (GLM-4.5/4.6; Air has none)
};

struct SynthTensor {
  SynthTensor(std::string n, std::vector<uint64_t> s, DType d, std::optional<float> v = std::nullopt)
      : name(std::move(n)), shape(std::move(s)), dtype(d), value(v) {}
  std::string name;
  std::vector<uint64_t> shape;
  DType dtype;
  std::optional<float> value;  // F32 tensors filled with this value instead of random bits
  bool positive = false;       // F32/BF16/F16 filled with random positive normal values (scales), not random bits
  bool finite_fp8 = false;     // F8_E4M3 random codes with the NaN codes (0x7f, 0xff) replaced by +-448
  // I32 [n] group ids (a GPTQ g_idx): k / group, or with `act_order` a fixed permutation's
  // ((37 k) mod n) / group; the same for every linear of the same input.
  uint64_t group_ids = 0;
  bool act_order = false;
  std::vector<int64_t> i64;  // I64 tensors holding these values (compressed-tensors' weight_shape)
};

// The family and preset names `wmap synth` takes (the CLI validates FAMILY and --preset with them).
std::vector<std::string> synth_family_names();
std::vector<std::string> synth_preset_names();
// Applies a named size preset (tiny, small, 1g, 4g) to `cfg`; throws on an unknown name.
void apply_synth_preset(const std::string& preset, SynthConfig& cfg);
std::vector<SynthTensor> synth_tensors(const SynthConfig& cfg);
std::string synth_config_json(const SynthConfig& cfg);
// Writes config.json, the shards and model.safetensors.index.json; returns bytes of tensor data.
uint64_t write_synth_checkpoint(const SynthConfig& cfg, const std::filesystem::path& out_dir, bool progress);

}  // namespace wmap::cli
