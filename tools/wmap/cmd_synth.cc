// `wmap synth FAMILY OUT_DIR [--preset P] [shape overrides]`
#include <cstdio>

#include "commands.h"
#include "synth_model.h"
#include "wmap/util/error.h"

namespace wmap::cli {
namespace {

struct SynthOptions {
  SynthConfig cfg;
  std::string out;
  std::string preset = "tiny";
  std::string scale_dtype;  // --scale-dtype: empty for the default (F32)
  std::string dtype = "BF16";
  bool tie = false, no_tie = false;  // neither: the family's default
  uint64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0, vocab = 0;
  uint64_t experts = 0, moe_intermediate = 0;
  int64_t mtp = -1, q_lora = -1;
  unsigned shards = 0;
};

int run_synth(SynthOptions& o) {
  SynthConfig& c = o.cfg;
  apply_synth_preset(o.preset, c);
  if (c.nvfp4 && o.preset == "tiny") {
    // Sizes both engines accept for NVFP4 up to tp 8: whole 16-value blocks a rank (o_proj's 128
    // inputs, 16 a rank at tp 8), TensorRT-LLM's CUTLASS MoE needing hidden % 128 and 16 expert
    // rows a rank.
    c.hidden = 128, c.head_dim = 16, c.intermediate = 256, c.moe_intermediate = 128;
  }
  if (o.tie && o.no_tie)
    throw Error(ErrorCode::kInvalidArgument, "synth: --tie-embeddings and --no-tie-embeddings conflict");
  c.tie_embeddings = o.tie || (!o.no_tie && c.family == "qwen3");
  auto set = [](uint64_t v, uint64_t& field) {
    if (v) field = v;
  };
  set(o.hidden, c.hidden), set(o.layers, c.layers), set(o.heads, c.heads), set(o.kv_heads, c.kv_heads);
  set(o.head_dim, c.head_dim), set(o.intermediate, c.intermediate), set(o.vocab, c.vocab);
  set(o.experts, c.experts), set(o.moe_intermediate, c.moe_intermediate);
  if (o.mtp >= 0) c.mtp = static_cast<uint64_t>(o.mtp);
  if (o.q_lora >= 0) c.q_lora = static_cast<uint64_t>(o.q_lora);
  if (c.qk_norm && c.family != "glm4_moe") throw Error(ErrorCode::kInvalidArgument, "synth: --qk-norm is for glm4_moe");
  const bool llama_family = c.family == "llama" || c.family == "mistral" || c.family == "qwen2" ||
                            c.family == "qwen3" || c.family == "qwen3_moe" || c.family == "mixtral";
  if (c.fp8 && !llama_family && c.family != "deepseek_v3" && c.family != "kimi_k2" && c.family != "deepseek_v32")
    throw Error(ErrorCode::kInvalidArgument,
                "synth: --fp8 is for deepseek_v3, deepseek_v32, kimi_k2 and the llama family (llama, mistral, qwen2, "
                "qwen3, qwen3_moe, mixtral)");
  if (c.fp8 && c.nvfp4) throw Error(ErrorCode::kInvalidArgument, "synth: --fp8 and --nvfp4 are two formats");
  if (c.fp8_format != "block" && (!c.fp8 || !llama_family)) {
    throw Error(ErrorCode::kInvalidArgument, "synth: --fp8-format is for --fp8 checkpoints of the llama family");
  }
  if (c.kv_scales && (!c.fp8 || c.fp8_format == "block")) {
    throw Error(ErrorCode::kInvalidArgument,
                "synth: --kv-scales is for --fp8 --fp8-format modelopt, autofp8, ct-tensor or ct-channel");
  }
  if (!o.scale_dtype.empty()) {
    if (!c.fp8 || !llama_family)
      throw Error(ErrorCode::kInvalidArgument, "synth: --scale-dtype is for --fp8 checkpoints of the llama family");
    if (c.fp8_format == "modelopt" || c.fp8_format == "autofp8")
      throw Error(ErrorCode::kInvalidArgument, "synth: --scale-dtype: " + c.fp8_format + " scales are 0-d F32");
    c.scale_dtype = o.scale_dtype == "BF16" ? DType::kBF16 : o.scale_dtype == "F16" ? DType::kF16 : DType::kF32;
  }
  if (!c.int4.empty() && (c.fp8 || c.nvfp4 || !llama_family)) {
    throw Error(ErrorCode::kInvalidArgument, "synth: --int4 is one format, for the llama family");
  }
  if ((c.int4_act_order && c.int4 != "gptq" && c.int4 != "ct") || (c.int4_asym && c.int4 != "ct")) {
    throw Error(ErrorCode::kInvalidArgument, "synth: --int4-act-order is for gptq and ct, --int4-asym for ct");
  }
  if (c.nvfp4_format != "ct" && !c.nvfp4) {
    throw Error(ErrorCode::kInvalidArgument, "synth: --nvfp4-format is for --nvfp4 checkpoints");
  }
  if (c.nvfp4 && (c.family == "deepseek_v32" || c.family == "kimi_k2" || c.family == "glm4_moe" ||
                  c.family == "gpt_oss" || c.family == "phi3" || c.family == "qwen3_next")) {
    throw Error(ErrorCode::kInvalidArgument,
                "synth: --nvfp4 is for llama, mistral, qwen2, qwen3, qwen3_moe, mixtral and deepseek_v3");
  }
  if (c.nvfp4 && c.family == "deepseek_v3" && c.nvfp4_format != "modelopt") {
    throw Error(ErrorCode::kInvalidArgument, "synth: deepseek_v3 --nvfp4 is --nvfp4-format modelopt (nvidia's R1-FP4)");
  }
  if (c.family == "gpt_oss" && (c.hidden % 32 || c.intermediate % 32)) {
    throw Error(ErrorCode::kInvalidArgument,
                "synth: gpt_oss --hidden and --intermediate must be multiples of the "
                "MXFP4 group 32 (are " +
                    std::to_string(c.hidden) + ", " + std::to_string(c.intermediate) + ")");
  }
  if (o.shards) c.shards = o.shards;
  c.dtype = *parse_dtype(o.dtype);                                 // one of BF16, F16, F32: checked when parsing
  if (c.int4 == "awq" || c.int4 == "gptq") c.dtype = DType::kF16;  // their F16 scales: an F16 model
  const uint64_t bytes = write_synth_checkpoint(c, o.out, true);
  std::printf("wrote %s checkpoint to %s: %llu layers, %llu bytes of tensors in %u shard(s)\n", c.family.c_str(),
              o.out.c_str(), static_cast<unsigned long long>(c.layers), static_cast<unsigned long long>(bytes),
              c.shards);
  return 0;
}

}  // namespace

Runner add_synth(CLI::App& app) {
  auto o = std::make_shared<SynthOptions>();
  auto* sub = app.add_subcommand("synth", "Write a synthetic checkpoint (real key names and config, random data)");
  sub->add_option(
         "FAMILY", o->cfg.family,
         "llama (GQA), mistral, qwen2 (q/k/v biases), qwen3 (q/k norms, tied embeddings), qwen3_moe, mixtral, "
         "deepseek_v3, gpt_oss (MXFP4 stacked experts, BF16 elsewhere; presets tiny, small), llama4 "
         "(Llama4ForConditionalGeneration: tiny Maverick-like, small Scout-like), llama4_text "
         "(Llama4ForCausalLM), phi3 "
         "(Phi3ForCausalLM: fused qkv_proj and gate_up_proj), kimi_k2 (DeepseekV3ForCausalLM with rotary_emb.inv_freq "
         "keys, no MTP), glm4_moe (Glm4MoeForCausalLM: GLM-4.5-Air-like, tiny only), qwen3_next "
         "(Qwen3NextForCausalLM: gated-delta and gated full attention, tiny only), deepseek_v32 "
         "(DeepseekV32ForCausalLM: F32 norms, an indexer per layer)")
      ->check(CLI::IsMember(synth_family_names()))
      ->required();
  sub->add_option("OUT_DIR", o->out, "Directory to write")->required();
  sub->add_option("--preset,--size", o->preset, "tiny (~70 KB), small (~10 MB), 1g (~1 GB), 4g (~4 GB)")
      ->check(CLI::IsMember(synth_preset_names()))
      ->capture_default_str();
  sub->add_option("--dtype", o->dtype, "BF16, F16 or F32")
      ->check(CLI::IsMember({"BF16", "F16", "F32"}))
      ->capture_default_str();
  sub->add_option("--shards", o->shards, "Number of shard files");
  sub->add_option("--seed", o->cfg.seed, "Seed of the random data")->capture_default_str();
  sub->add_option("--hidden", o->hidden, "hidden_size");
  sub->add_option("--layers", o->layers, "num_hidden_layers");
  sub->add_option("--heads", o->heads, "num_attention_heads");
  sub->add_option("--kv-heads", o->kv_heads, "num_key_value_heads");
  sub->add_option("--head-dim", o->head_dim, "head_dim");
  sub->add_option("--intermediate", o->intermediate, "intermediate_size");
  sub->add_option("--vocab", o->vocab, "vocab_size");
  sub->add_option("--experts", o->experts, "Routed experts per MoE layer");
  sub->add_option("--moe-intermediate", o->moe_intermediate, "Expert intermediate size");
  sub->add_option("--mtp", o->mtp, "deepseek_v3: MTP layers in the checkpoint");
  sub->add_option("--q-lora-rank", o->q_lora, "deepseek_v3: q_lora_rank (0: none, V2-Lite style q_proj)");
  sub->add_flag("--fp8", o->cfg.fp8,
                "deepseek_v3 and the llama family: F8_E4M3 linears with 128x128 weight_scale_inv blocks "
                "(quant_method fp8, as Qwen3's -FP8 releases)");
  sub->add_option("--scale-dtype", o->scale_dtype,
                  "llama family --fp8: the scales' dtype for block, ct-tensor and ct-channel (default F32)")
      ->check(CLI::IsMember({"F32", "BF16", "F16"}));
  sub->add_option("--fp8-format", o->cfg.fp8_format,
                  "llama family --fp8: block (quant_method fp8, 128x128 weight_scale_inv; default), modelopt "
                  "(hf_quant_config.json, per-tensor), autofp8 (quant_method fp8 per-tensor, static activations), "
                  "ct-tensor / ct-channel (compressed-tensors float-quantized, strategy tensor / channel)")
      ->check(CLI::IsMember({"block", "modelopt", "autofp8", "ct-tensor", "ct-channel"}));
  sub->add_flag("--kv-scales", o->cfg.kv_scales,
                "--fp8 per-tensor / channel formats: FP8 KV-cache k_scale and v_scale per attention layer");
  sub->add_flag("--nvfp4", o->cfg.nvfp4, "llama family / qwen3_moe: NVFP4 linears (expert 1 has a zero global scale)");
  sub->add_option("--int4", o->cfg.int4,
                  "llama family: 4-bit integer W4A16 linears: awq (AutoAWQ GEMM), gptq (v1, symmetric), ct "
                  "(compressed-tensors pack-quantized)")
      ->check(CLI::IsMember({"awq", "gptq", "ct"}));
  sub->add_option("--int4-group", o->cfg.int4_group, "--int4: inputs per scale (default 128)");
  sub->add_flag("--int4-act-order", o->cfg.int4_act_order, "--int4 gptq / ct: activation order (g_idx per input)");
  sub->add_flag("--int4-asym", o->cfg.int4_asym, "--int4 ct: asymmetric (weight_zero_point)");
  sub->add_option("--nvfp4-format", o->cfg.nvfp4_format,
                  "--nvfp4: ct (compressed-tensors nvfp4-pack-quantized; default) or modelopt (hf_quant_config.json "
                  "quant_algo NVFP4, 0-d global scales)")
      ->check(CLI::IsMember({"ct", "modelopt"}));
  sub->add_flag("--qk-norm", o->cfg.qk_norm, "glm4_moe: use_qk_norm with q_norm/k_norm weights (GLM-4.5/4.6)");
  sub->add_flag("--tie-embeddings", o->tie, "Tie lm_head to embed_tokens (qwen3's default)");
  sub->add_flag("--no-tie-embeddings", o->no_tie, "Store a separate lm_head");
  return [o] { return run_synth(*o); };
}

}  // namespace wmap::cli
