#include "engine_owned.h"

namespace wmap::exec_detail {

std::vector<std::string> engine_owned_patterns(const LoadPlan& plan) {
  if (plan.layout().target == Target::kVllm) {
    // BaseKVCacheMethod.create_weights: torch.nn.Parameter(torch.tensor(-1.0)) for q/k/v/prob
    // scales ("not loaded"), set from the checkpoint only when it has them
    // (vllm/model_executor/layers/quantization/kv_cache.py, commit 190900b9).
    std::vector<std::string> owned{R"(.*\.(k_scale|v_scale|q_scale|prob_scale))"};
    // AutoGPTQMoEMethod.create_weights: w13_bias / w2_bias torch.zeros (dropped after loading
    // when the checkpoint has none), the g_idx sort indices torch.empty and never loaded
    // (int4-nvfp4.md section 4.3).
    if (plan.quant_format().kind == QuantFormat::Kind::kGptqAwq) {
      owned.push_back(R"(.*\.experts\.(w13_bias|w2_bias|w13_g_idx_sort_indices|w2_g_idx_sort_indices))");
    }
    // CompressedTensorsWNA16MarlinMoEMethod.create_weights: the g_idx sort indices torch.empty and
    // never loaded; w13/w2_weight_g_idx loaded only from a checkpoint with actorder group (the
    // plan then fills them), else left empty and replaced after loading (int4-nvfp4.md 5.2).
    if (plan.quant_format().kind == QuantFormat::Kind::kCompressedTensors && !plan.quant_format().nvfp4) {
      owned.push_back(R"(.*\.experts\.(w13|w2)_(g_idx_sort_indices|weight_g_idx))");
    }
    return owned;
  }
  // TensorRT-LLM's FP8 block-scale linears: input_scale and inv_input_scale are
  // torch.tensor(1., dtype=torch.float32) from create_weights, overwritten only when a checkpoint
  // has input_scale (_torch/modules/linear.py FP8BlockScalesLinearMethod, commit 00bbf71e).
  // Engine-owned for FP8 checkpoints only: NVFP4 linears create the same names with torch.empty
  // and fill them inside load_weights (an unplanned one is then a destination problem, never a
  // buffer left as it was).
  if (plan.quant_format().kind == QuantFormat::Kind::kFp8) return {R"(.*\.(input_scale|inv_input_scale))"};
  // TensorRT-LLM's NVFP4 linears (NVFP4LinearMethod.create_weights, linear.py commit 00bbf71e):
  // kv_scales / inv_kv_scales are torch.ones(3); inv_input_scale is torch.empty and only the
  // vanilla path (load_weights_vanilla) sets it, so a fused q/k/v or gate/up keeps whatever it
  // held: nothing a load could reproduce. The rest of their scales are written by the plan.
  if (plan.quant_format().nvfp4) {
    return {R"(.*\.(kv_scales|inv_kv_scales))", R"(.*\.(qkv_proj|gate_up_proj)\.inv_input_scale)"};
  }
  return {};
}

}  // namespace wmap::exec_detail
