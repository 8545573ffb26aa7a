// The Llama family: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (q/k/v biases),
// Qwen3ForCausalLM (q_norm/k_norm), and their MoE variants Qwen3MoeForCausalLM and
// MixtralForCausalLM (whose block_sparse_moe keys are renamed by mappings/mixtral.yaml). Fused
// qkv_proj with GQA KV-head duplication, fused gate_up_proj, vocabulary-parallel and tied
// embeddings, routed experts as `mlp.experts.backend` (w3_w1_weight / w2_weight).
// Phi3ForCausalLM (Phi-3, Phi-3.5-mini, Phi-4-mini) stores qkv_proj and gate_up_proj fused; its
// parts are cut from them before the split (spec::fused_part_rows), then the Llama rules apply
// (docs/families/glm-dsv32-phi3-kimi.md section 3).
// A YAML-only architecture mapped to `plugin: llama` gets its features from config.json:
// `attention_bias` (q/k/v biases, and o_proj.bias unless Qwen2), `use_qk_norm` (q/k norms).
//
// Targets (DESIGN.md): both engines name the dense parameters alike (qkv_proj, gate_up_proj);
// they differ in the rules kTargets below lists, in vocabulary padding and exact splits (the
// core's Layout), and in the routed experts' layout. Qwen2's q/k/v biases keep whole KV heads
// under both targets: TensorRT-LLM repeats single bias elements when kv_heads < tp_size, which
// its own code calls a probable bug; vLLM keeps heads whole, and so do we.

#include <string>
#include <vector>

#include "wmap/abi/plugin_api.h"
#include "wmap/spec/config_bounds.h"
#include "wmap/spec/linear_spec.h"

namespace {

using wmap::Layout;
using wmap::ModelConfig;
using wmap::ModelSpec;
using wmap::ModuleSpec;
using wmap::ParamSpec;
namespace spec = wmap::spec;

// What differs between the engines for this family, in one place.
struct TargetRules {
  spec::ExpertNames experts;            // stacked routed-expert parameters
  const char* experts_module;           // runtime module of the routed experts, after "mlp."
  bool mixtral_keeps_block_sparse_moe;  // Mixtral's MoE parameters under `block_sparse_moe.`
  bool bias_flag;           // config `bias` also turns on q/k/v/o biases (vLLM llama.py: attention_bias or bias)
  bool skip_unused_biases;  // checkpoint biases the model does not use are declared skipped
  // Phi-3's k/v parts are split without KV-head duplication: kv heads must divide tp_size.
  bool phi3_duplicates_kv;
};

const TargetRules& rules_for(wmap::Target t) {
  // TensorRT-LLM: modeling_qwen3_moe.py / modeling_mixtral.py fused MoE `experts.backend` with
  // w3_w1_weight = [up; gate] (fused_moe weight loading). vLLM: FusedMoE `experts` with
  // w13_weight = [gate; up] (FusedMoE.weight_loader, shard ids w1 then w3); mixtral.py keeps
  // `block_sparse_moe`; llama.py's load_weights skips checkpoint biases it has no parameter for.
  // Phi-3: TensorRT-LLM's modeling_phi3.py Phi3ForCausalLM.load_weights cuts q/k/v and gate/up
  // itself and hands them to the fused modules, bypassing HfWeightMapper._duplicate_kv_weights;
  // vLLM's phi3.py is LlamaForCausalLM, whose QKVParallelLinear.weight_loader (loaded_shard_id
  // None) narrows the fused weight into q, k, v and loads each as its own shard (KV replicas too).
  static const TargetRules kTrtllm{
      .experts = {.fused = "w3_w1", .down = "w2", .gate_first = false, .globals_close = true},
      .experts_module = "experts.backend",
      .mixtral_keeps_block_sparse_moe = false,
      .bias_flag = false,
      .skip_unused_biases = false,
      .phi3_duplicates_kv = false,
  };
  static const TargetRules kVllm{
      .experts = {.fused = "w13", .down = "w2", .gate_first = true, .globals_close = false},
      .experts_module = "experts",
      .mixtral_keeps_block_sparse_moe = true,
      .bias_flag = true,
      .skip_unused_biases = true,
      .phi3_duplicates_kv = true,
  };
  return t == wmap::Target::kVllm ? kVllm : kTrtllm;
}

struct LlamaShape {
  uint64_t hidden, heads, kv_heads, head_dim, intermediate, vocab, layers;
  bool tie, qkv_bias, o_bias, qk_norm;
  bool fused_source = false;  // Phi-3: qkv_proj and gate_up_proj are fused in the checkpoint
  // MoE: experts per layer (0: dense), their intermediate size, which layers are sparse.
  uint64_t experts = 0, moe_intermediate = 0, sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;

  bool is_moe(uint64_t layer) const {
    if (experts == 0) return false;
    for (auto l : mlp_only_layers) {
      if (l == static_cast<int64_t>(layer)) return false;
    }
    return (layer + 1) % sparse_step == 0;
  }
  // The checkpoint's routed-experts module of `layer`, nullopt when the layer is dense: the one
  // place the key pattern is written (bounds and modules both use it).
  std::optional<std::string> experts_of(uint64_t layer) const {
    if (!is_moe(layer)) return std::nullopt;
    return "model.layers." + std::to_string(layer) + ".mlp.experts";
  }
};

// Every count and size is bounded by the checkpoint (ConfigBounds) before anything loops over it.
LlamaShape read_shape(const ModelConfig& c, const Layout& l, const wmap::KeyProbe& probe) {
  LlamaShape s{};
  const wmap::ConfigBounds b(c, probe);
  const std::string arch = c.architecture();
  const std::string model_type = c.get_string("model_type", "");
  s.layers = b.count("num_hidden_layers", "model.layers.", "layer");
  s.hidden = b.dim("hidden_size");
  s.heads = c.require_positive("num_attention_heads");
  s.kv_heads = c.has("num_key_value_heads") ? c.require_positive("num_key_value_heads") : s.heads;
  if (c.has("head_dim")) {
    s.head_dim = c.require_positive("head_dim");
  } else {
    if (s.hidden % s.heads != 0)
      c.fail("hidden_size", std::to_string(s.hidden) + " is not a multiple of num_attention_heads " +
                                std::to_string(s.heads) + " and head_dim is not given");
    s.head_dim = s.hidden / s.heads;
  }
  // q_proj's and k_proj's rows.
  b.dim("num_attention_heads * head_dim", b.mul(s.heads, s.head_dim, "num_attention_heads * head_dim"));
  b.dim("num_key_value_heads * head_dim", b.mul(s.kv_heads, s.head_dim, "num_key_value_heads * head_dim"));
  s.intermediate = c.require_positive("intermediate_size");
  s.vocab = b.dim("vocab_size");
  s.tie = c.get_bool("tie_word_embeddings", false);
  const bool qwen2 = arch == "Qwen2ForCausalLM" || model_type == "qwen2";
  const bool qwen3 =
      arch == "Qwen3ForCausalLM" || model_type == "qwen3" || arch == "Qwen3MoeForCausalLM" || model_type == "qwen3_moe";
  const bool mixtral = arch == "MixtralForCausalLM" || model_type == "mixtral";
  const char* experts_key = mixtral ? "num_local_experts" : "num_experts";
  if (mixtral) {
    s.experts = c.require_positive("num_local_experts");
    s.moe_intermediate = s.intermediate;
  } else if (c.get_int("num_experts", 0) > 0) {
    s.experts = c.require_positive("num_experts");
    s.moe_intermediate = c.require_positive("moe_intermediate_size");
    s.sparse_step = c.get_non_negative("decoder_sparse_step", 1);
    if (s.sparse_step == 0) c.fail("decoder_sparse_step", "must be at least 1");
    s.mlp_only_layers = c.get_int_list("mlp_only_layers");
  }
  if (s.experts) {
    if (auto e = l.experts_error(s.experts)) c.fail(experts_key, *e);
  }
  // Only the sizes the layers use are dimensions of checkpoint tensors (a MoE config may carry an
  // unused intermediate_size).
  const auto moe_layers = spec::moe_expert_prefixes(s.layers, [&s](uint64_t i) { return s.experts_of(i); });
  if (moe_layers.size() < s.layers) b.dim("intermediate_size", s.intermediate);
  if (!moe_layers.empty()) {
    b.count(experts_key, s.experts, moe_layers, "expert");
    b.dim(mixtral ? "intermediate_size" : "moe_intermediate_size", s.moe_intermediate);
  }
  // vLLM's llama.py reads `bias` too; its qwen2.py / qwen3.py only their own fields.
  const bool bias = c.get_bool("attention_bias", false) ||
                    (rules_for(l.target).bias_flag && !qwen2 && !qwen3 && c.get_bool("bias", false));
  s.qkv_bias = qwen2 || bias;
  s.o_bias = !qwen2 && !qwen3 && bias;
  s.qk_norm = qwen3 || c.get_bool("use_qk_norm", false);

  s.fused_source = arch == "Phi3ForCausalLM" || model_type == "phi3";
  if (s.fused_source) {
    // Phi-3's scales would be cut with the fused tensors; no quantised Phi-3 has been read.
    if (c.has("quantization_config")) {
      c.fail("quantization_config",
             "quantised " + arch + " checkpoints (quant_method '" +
                 c.get_string("quantization_config.quant_method", "?") +
                 "') are not served: only BF16/F16/F32 Phi-3 weights are cut from fused tensors");
    }
    if (bias || c.get_bool("mlp_bias", false)) {
      c.fail(c.get_bool("mlp_bias", false) ? "mlp_bias" : "attention_bias",
             "biases of " + arch + "'s fused projections are not served (no Phi-3 checkpoint has them)");
    }
    if (l.target == wmap::Target::kTrtllm) {
      // modeling_phi3.py cuts q at hidden_size, with head_dim = hidden_size / num_attention_heads.
      if (s.heads * s.head_dim != s.hidden) {
        c.fail("head_dim", "num_attention_heads " + std::to_string(s.heads) + " x head_dim " +
                               std::to_string(s.head_dim) + " is not hidden_size " + std::to_string(s.hidden) +
                               ": TensorRT-LLM's Phi-3 loader cuts q at hidden_size and would load other rows");
      }
      if (!rules_for(l.target).phi3_duplicates_kv && s.kv_heads % l.tp_size != 0) {
        c.fail("num_key_value_heads",
               std::to_string(s.kv_heads) + " KV heads cannot be split over tp_size " + std::to_string(l.tp_size) +
                   " under target trtllm: its Phi-3 loader (modeling_phi3.py Phi3ForCausalLM.load_weights) does not "
                   "duplicate KV heads, so the engine's own load fails (use a tp_size dividing " +
                   std::to_string(s.kv_heads) + ", or target vllm)");
      }
    }
  }
  if (l.attention_dp) {
    c.fail("architectures",
           s.experts ? "attention_dp is not served for " + arch +
                           " (the llama plugin has no attention-data-parallel layout; DeepseekV3ForCausalLM has)"
                     : "attention_dp has no meaning for a dense model such as " + arch +
                           ": it would replicate every parameter (load it with tp_size 1 instead)");
  }
  if (auto e = l.heads_error(s.heads)) c.fail("num_attention_heads", *e);
  if (s.heads % s.kv_heads != 0) {
    c.fail("num_key_value_heads",
           std::to_string(s.kv_heads) + " does not divide num_attention_heads " + std::to_string(s.heads));
  }
  if (auto e = l.kv_heads_error(s.kv_heads)) c.fail("num_key_value_heads", *e);
  // TensorRT-LLM's generic weight mapper does not duplicate a KV head's FP8 block or channel
  // scales; Qwen3MoeHfWeightMapper duplicates block scales (fp8.md sections 5, 8.2).
  if (auto e = spec::fp8_kv_duplication_error(c, l, s.kv_heads,
                                              arch == "Qwen3MoeForCausalLM" || model_type == "qwen3_moe")) {
    c.fail("num_key_value_heads", *e);
  }
  return s;
}

// concat(q rows of rank r, k heads of rank r, v heads of rank r) of the 1-D q/k/v biases.
ParamSpec fused_qkv_bias(const std::string& name, const std::string& prefix, const LlamaShape& s, const Layout& l) {
  const uint64_t q_rows = s.heads * s.head_dim, kv_rows = s.kv_heads * s.head_dim;
  const wmap::Range q = l.tp_slice(q_rows, prefix + "q_proj.bias");
  const wmap::Range kv = spec::kv_head_rows(s.kv_heads, s.head_dim, l);
  ParamSpec p;
  p.name = name;
  p.shape = {q.size() + 2 * kv.size()};
  p.pieces.push_back(spec::rows(prefix + "q_proj.bias", {q_rows}, q));
  p.pieces.push_back(spec::rows(prefix + "k_proj.bias", {kv_rows}, kv));
  p.pieces.push_back(spec::rows(prefix + "v_proj.bias", {kv_rows}, kv));
  return p;
}

// The quantisation of one checkpoint linear, as the checkpoint's format makes it (the core's
// spec::linear_quant: block FP8, compressed-tensors NVFP4, or none for an unquantised linear).
spec::LinearQuant quant_of(const ModelConfig& c, const Layout& l, const wmap::KeyProbe& probe,
                           const std::string& linear, spec::LinearRole role) {
  return spec::linear_quant(c, l, probe, linear, role, role == spec::LinearRole::kDense);
}

ModuleSpec module(std::string name, std::vector<ParamSpec> params) { return {std::move(name), std::move(params), {}}; }

ModelSpec build_llama(const ModelConfig& c, const Layout& l, const wmap::KeyProbe& probe) {
  const LlamaShape s = read_shape(c, l, probe);
  const TargetRules& rules = rules_for(l.target);
  const bool mixtral = c.architecture() == "MixtralForCausalLM" || c.get_string("model_type", "") == "mixtral";
  // Mixtral's canonical (renamed) `mlp.` keys go back under `block_sparse_moe.` where the engine keeps them.
  const std::string moe = mixtral && rules.mixtral_keeps_block_sparse_moe ? "block_sparse_moe." : "mlp.";
  const wmap::Split tp = l.tp();
  ModelSpec m;
  m.plugin = "llama";
  m.architecture = c.architecture();
  const uint64_t h = s.hidden, q_rows = s.heads * s.head_dim, inter = s.intermediate;
  m.modules.push_back(
      module("model.embed_tokens",
             {spec::vocab_parallel("model.embed_tokens.weight", "model.embed_tokens.weight", {s.vocab, h}, l)}));
  for (uint64_t i = 0; i < s.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string a = p + "self_attn.";
    m.modules.push_back(module(p + "input_layernorm",
                               {spec::replicated(p + "input_layernorm.weight", p + "input_layernorm.weight", {h})}));
    const spec::LinearQuant qq = quant_of(c, l, probe, a + "q_proj", spec::LinearRole::kDense);
    const uint64_t hc = qq.stored_cols(h);
    const uint64_t kv_rows = s.kv_heads * s.head_dim;
    const wmap::Range kv = spec::kv_head_rows(s.kv_heads, s.head_dim, l);
    std::vector<ParamSpec> qkv;
    if (s.fused_source) {  // rows [q; k; v] of the checkpoint's qkv_proj, each part split as if alone
      const std::vector<uint64_t> fused{q_rows + 2 * kv_rows, h};
      const std::string src = a + "qkv_proj";
      spec::add_linear(qkv, src, ".",
                       {spec::fused_part_rows(src, fused, {0, q_rows}, tp),
                        spec::fused_part_rows(src, fused, {q_rows, q_rows + kv_rows}, kv),
                        spec::fused_part_rows(src, fused, {q_rows + kv_rows, q_rows + 2 * kv_rows}, kv)},
                       qq);
    } else {
      spec::add_linear(
          qkv, a + "qkv_proj", ".",
          {spec::linear_rows(a + "q_proj", {q_rows, hc}, tp), spec::linear_rows(a + "k_proj", {kv_rows, hc}, kv),
           spec::linear_rows(a + "v_proj", {kv_rows, hc}, kv)},
          qq);
    }
    if (s.qkv_bias) qkv.push_back(fused_qkv_bias(a + "qkv_proj.bias", a, s, l));
    for (auto& kv_scale : spec::kv_cache_scales(c, l, probe, a, qq)) qkv.push_back(std::move(kv_scale));
    if (rules.skip_unused_biases && !s.qkv_bias) {
      for (const char* b : {"q_proj.bias", "k_proj.bias", "v_proj.bias"}) m.skipped_keys.push_back(a + b);
    }
    if (rules.skip_unused_biases && !s.o_bias) m.skipped_keys.push_back(a + "o_proj.bias");
    m.modules.push_back(module(a + "qkv_proj", std::move(qkv)));
    if (s.qk_norm) {
      m.modules.push_back(
          module(a + "q_norm", {spec::replicated(a + "q_norm.weight", a + "q_norm.weight", {s.head_dim})}));
      m.modules.push_back(
          module(a + "k_norm", {spec::replicated(a + "k_norm.weight", a + "k_norm.weight", {s.head_dim})}));
    }
    const spec::LinearQuant oq = quant_of(c, l, probe, a + "o_proj", spec::LinearRole::kDense);
    const uint64_t oc = oq.stored_cols(q_rows);
    std::vector<ParamSpec> o;
    spec::add_linear(o, a + "o_proj", ".", {spec::linear_cols(a + "o_proj", {h, oc}, tp)}, oq);
    if (s.o_bias) o.push_back(spec::replicated(a + "o_proj.bias", a + "o_proj.bias", {h}));
    m.modules.push_back(module(a + "o_proj", std::move(o)));
    m.modules.push_back(
        module(p + "post_attention_layernorm",
               {spec::replicated(p + "post_attention_layernorm.weight", p + "post_attention_layernorm.weight", {h})}));
    if (const auto source = s.experts_of(i)) {
      // The runtime module (trtllm `mlp.experts.backend`) is read from checkpoint prefix `mlp.experts`.
      const std::string experts = p + moe + rules.experts_module;
      m.modules.push_back(
          module(p + moe + "gate", {spec::replicated(p + moe + "gate.weight", p + "mlp.gate.weight", {s.experts, h})}));
      m.modules.push_back(
          {experts,
           spec::moe_experts(experts, *source, s.experts, s.moe_intermediate, h, l,
                             quant_of(c, l, probe, *source + ".0.up_proj", spec::LinearRole::kExpert), rules.experts),
           {*source}});
      continue;
    }
    const spec::LinearQuant gq = quant_of(c, l, probe, p + "mlp.gate_proj", spec::LinearRole::kDense);
    std::vector<ParamSpec> gate_up, down;
    if (s.fused_source) {  // rows [gate; up] of the checkpoint's gate_up_proj
      const std::string src = p + "mlp.gate_up_proj";
      const std::vector<uint64_t> fused{2 * inter, h};
      spec::add_linear(gate_up, src, ".",
                       {spec::fused_part_rows(src, fused, {0, inter}, tp),
                        spec::fused_part_rows(src, fused, {inter, 2 * inter}, tp)},
                       gq);
    } else {
      spec::add_linear(gate_up, p + "mlp.gate_up_proj", ".",
                       {spec::linear_rows(p + "mlp.gate_proj", {inter, gq.stored_cols(h)}, tp),
                        spec::linear_rows(p + "mlp.up_proj", {inter, gq.stored_cols(h)}, tp)},
                       gq);
    }
    m.modules.push_back(module(p + "mlp.gate_up_proj", std::move(gate_up)));
    const spec::LinearQuant dq = quant_of(c, l, probe, p + "mlp.down_proj", spec::LinearRole::kDense);
    const uint64_t dc = dq.stored_cols(inter);
    spec::add_linear(down, p + "mlp.down_proj", ".", {spec::linear_cols(p + "mlp.down_proj", {h, dc}, tp)}, dq);
    m.modules.push_back(module(p + "mlp.down_proj", std::move(down)));
  }
  m.modules.push_back(module("model.norm", {spec::replicated("model.norm.weight", "model.norm.weight", {h})}));
  spec::add_lm_head(m, "model.embed_tokens.weight", s.vocab, h, s.tie, l);
  spec::place_stages(m, s.layers, "model.embed_tokens", "model.norm", s.tie, l);
  return m;
}

void register_llama(wmap::PluginRegistrar& registrar) { registrar.set_model_builder(build_llama); }

}  // namespace

WMAP_DEFINE_PLUGIN("llama", "1.1", register_llama, ("trtllm", "vllm"), "LlamaForCausalLM", "MistralForCausalLM",
                   "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM",
                   "Phi3ForCausalLM")
