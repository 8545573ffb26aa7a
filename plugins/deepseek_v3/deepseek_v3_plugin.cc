// DeepSeek-V3 / R1 (DeepseekV3ForCausalLM), BF16 or FP8 with block scales: MLA attention
// (fused_a, q_b_proj or q_proj, kv_b_proj split into kv_b_proj / k_b_proj_trans / v_b_proj),
// dense layers below first_k_dense_replace, MoE layers (router, shared experts, routed experts as
// `mlp.experts.backend`), and MTP layers: model layer L+k reads checkpoint layer
// L + k % num_nextn_predict_layers (`--mtp-layers K`; K = 0 declares the MTP tensors skipped).

#include <optional>
#include <string>
#include <vector>

#include "wmap/abi/plugin_api.h"
#include "wmap/spec/linear_spec.h"

namespace {

using wmap::Layout;
using wmap::ModelConfig;
using wmap::ModelSpec;
using wmap::ModuleSpec;
using wmap::ParamSpec;
using wmap::Range;
namespace spec = wmap::spec;

struct DeepseekShape {
  uint64_t hidden, heads, layers, vocab, intermediate;
  std::optional<uint64_t> q_lora;
  uint64_t kv_lora, nope, rope, v;
  uint64_t experts = 0, moe_intermediate = 0, shared_experts = 0, first_dense = 0, moe_freq = 1;
  uint64_t mtp_in_checkpoint = 0, mtp = 0;
  bool tie = false;
  std::optional<spec::BlockScales> fp8;

  bool is_moe(uint64_t layer) const { return experts > 0 && layer >= first_dense && layer % moe_freq == 0; }
};

DeepseekShape read_shape(const ModelConfig& c, const Layout& l) {
  DeepseekShape s{};
  s.hidden = c.require_positive("hidden_size");
  s.heads = c.require_positive("num_attention_heads");
  s.layers = c.require_positive("num_hidden_layers");
  s.vocab = c.require_positive("vocab_size");
  s.intermediate = c.require_positive("intermediate_size");
  if (c.has("q_lora_rank")) s.q_lora = c.require_positive("q_lora_rank");
  s.kv_lora = c.require_positive("kv_lora_rank");
  s.nope = c.require_positive("qk_nope_head_dim");
  s.rope = c.require_positive("qk_rope_head_dim");
  s.v = c.require_positive("v_head_dim");
  if (c.has("n_routed_experts")) {
    s.experts = c.require_positive("n_routed_experts");
    s.moe_intermediate = c.require_positive("moe_intermediate_size");
    s.shared_experts = static_cast<uint64_t>(c.get_int("n_shared_experts", 0));
    s.first_dense = static_cast<uint64_t>(c.get_int("first_k_dense_replace", 0));
    s.moe_freq = static_cast<uint64_t>(c.get_int("moe_layer_freq", 1));
    if (s.moe_freq == 0) c.fail("moe_layer_freq", "must be at least 1");
    if (auto e = l.experts_error(s.experts)) c.fail("n_routed_experts", *e);
  }
  s.tie = c.get_bool("tie_word_embeddings", false);
  s.mtp_in_checkpoint = static_cast<uint64_t>(c.get_int("num_nextn_predict_layers", 0));
  s.mtp = l.mtp_layers ? *l.mtp_layers : s.mtp_in_checkpoint;
  if (s.mtp > 0 && s.mtp_in_checkpoint == 0) {
    c.fail("num_nextn_predict_layers", "is 0, but mtp_layers " + std::to_string(s.mtp) + " asks for MTP layers");
  }
  if (auto e = l.heads_error(s.heads)) c.fail("num_attention_heads", *e);
  if (c.get_string("quantization_config.quant_method", "") == "fp8") {
    const auto block = c.get_int_list("quantization_config.weight_block_size");
    if (block.size() != 2 || block[0] <= 0 || block[1] <= 0) {
      c.fail("quantization_config.weight_block_size", "expected two positive integers");
    }
    s.fp8 = spec::BlockScales{static_cast<uint64_t>(block[0]), static_cast<uint64_t>(block[1])};
    if (s.nope % s.fp8->rows || s.v % s.fp8->rows || s.kv_lora % s.fp8->cols) {
      c.fail("quantization_config.weight_block_size", "qk_nope_head_dim, v_head_dim and kv_lora_rank must be multiples of the block");
    }
  }
  return s;
}

ModuleSpec module(std::string name, std::vector<ParamSpec> params) { return {std::move(name), std::move(params), {}}; }

// A linear's parameters under `dst` (dst.weight, dst.weight_scale_inv).
std::vector<ParamSpec> linear(const std::string& dst, std::vector<spec::LinearSlice> slices, const DeepseekShape& s) {
  std::vector<ParamSpec> out;
  spec::add_linear(out, dst, ".", slices, s.fp8 ? spec::LinearQuant::fp8(*s.fp8) : spec::LinearQuant::none());
  return out;
}

// kv_b_proj [H*(nope+v), R] viewed [H, nope+v, R]; this rank's heads split into k_nope and v.
std::vector<ParamSpec> kv_b(const std::string& d, const std::string& src, const DeepseekShape& s, const Layout& l) {
  const Range heads = l.local_heads(s.heads);
  const uint64_t hl = heads.size();
  auto part = [&](const std::string& key, std::vector<uint64_t> shape, std::vector<uint64_t> view, Range inner,
                  std::vector<uint32_t> perm) {
    wmap::Piece p = spec::whole(key, std::move(shape));
    p.view = std::move(view);
    p.box = {heads, inner, {0, p.view[2]}};
    p.perm = std::move(perm);
    return p;
  };
  const uint64_t rows = s.nope + s.v;
  const std::string w = src + ".weight";
  const std::vector<uint64_t> wshape{s.heads * rows, s.kv_lora}, wview{s.heads, rows, s.kv_lora};
  std::vector<ParamSpec> out(3);
  out[0].name = d + "kv_b_proj.weight";
  out[0].shape = {hl * rows, s.kv_lora};
  out[0].pieces = {part(w, wshape, wview, {0, s.nope}, {}), part(w, wshape, wview, {s.nope, rows}, {})};
  out[1].name = d + "k_b_proj_trans";
  out[1].shape = {hl, s.kv_lora, s.nope};
  out[1].pieces = {part(w, wshape, wview, {0, s.nope}, {0, 2, 1})};
  out[2].name = d + "v_b_proj";
  out[2].shape = {hl, s.v, s.kv_lora};
  out[2].pieces = {part(w, wshape, wview, {s.nope, rows}, {})};
  if (s.fp8) {
    const uint64_t ns = s.nope / s.fp8->rows, vs = s.v / s.fp8->rows, rs = s.kv_lora / s.fp8->cols;
    const std::string k = src + ".weight_scale_inv";
    const std::vector<uint64_t> sshape{s.heads * (ns + vs), rs}, sview{s.heads, ns + vs, rs};
    auto scale = [&](std::string name, std::vector<uint64_t> shape, std::vector<wmap::Piece> pieces) {
      ParamSpec p;
      p.name = std::move(name);
      p.shape = std::move(shape);
      p.dtype = wmap::DType::kF32;
      for (auto& piece : pieces) piece.source_dtype = wmap::DType::kF32;
      p.pieces = std::move(pieces);
      out.push_back(std::move(p));
    };
    scale(d + "kv_b_proj.weight_scale_inv", {hl * (ns + vs), rs},
          {part(k, sshape, sview, {0, ns}, {}), part(k, sshape, sview, {ns, ns + vs}, {})});
    scale(d + "k_b_proj_trans_scale", {hl, rs, ns}, {part(k, sshape, sview, {0, ns}, {0, 2, 1})});
    scale(d + "v_b_proj_scale", {hl, vs, rs}, {part(k, sshape, sview, {ns, ns + vs}, {})});
  }
  return out;
}

// Llama-style gated MLP: gate_up_proj = concat(gate rows r, up rows r); down_proj row-parallel.
void gated_mlp(std::vector<ModuleSpec>& modules, const std::string& dst, const std::string& src, uint64_t inter,
               const DeepseekShape& s, const Layout& l) {
  const Range r = l.tp_slice(inter);
  const uint64_t h = s.hidden;
  modules.push_back(module(dst + ".gate_up_proj", linear(dst + ".gate_up_proj",
                                                         {spec::linear_rows(src + ".gate_proj", {inter, h}, r),
                                                          spec::linear_rows(src + ".up_proj", {inter, h}, r)},
                                                         s)));
  modules.push_back(module(dst + ".down_proj", linear(dst + ".down_proj", {spec::linear_cols(src + ".down_proj", {h, inter}, r)}, s)));
}

// One decoder layer: model layer `dst_i` from checkpoint layer `src_i`.
void add_layer(ModelSpec& m, uint64_t dst_i, uint64_t src_i, const DeepseekShape& s, const Layout& l) {
  const std::string d = "model.layers." + std::to_string(dst_i) + ".", c = "model.layers." + std::to_string(src_i) + ".";
  const std::string da = d + "self_attn.", ca = c + "self_attn.";
  const uint64_t h = s.hidden, qk = s.nope + s.rope;
  auto rep = [&](const std::string& name, std::vector<uint64_t> shape) {
    m.modules.push_back(module(d + name, {spec::replicated(d + name + ".weight", c + name + ".weight", std::move(shape))}));
  };
  rep("input_layernorm", {h});
  if (s.q_lora) {
    m.modules.push_back(module(da + "fused_a", linear(da + "fused_a",
                                                      {spec::whole_linear(ca + "q_a_proj", {*s.q_lora, h}),
                                                       spec::whole_linear(ca + "kv_a_proj_with_mqa", {s.kv_lora + s.rope, h})},
                                                      s)));
    rep("self_attn.q_a_layernorm", {*s.q_lora});
    const std::vector<uint64_t> qb{s.heads * qk, *s.q_lora};
    m.modules.push_back(module(da + "q_b_proj", linear(da + "q_b_proj",
                                                       {spec::linear_rows(ca + "q_b_proj", qb, l.tp_slice(qb[0]))}, s)));
  } else {
    // V2-Lite style: no q LoRA; kv_a_proj_with_mqa alone is the replicated down-projection.
    const std::vector<uint64_t> q{s.heads * qk, h};
    m.modules.push_back(module(da + "q_proj", linear(da + "q_proj",
                                                     {spec::linear_rows(ca + "q_proj", q, l.tp_slice(q[0]))}, s)));
    m.modules.push_back(module(da + "kv_a_proj_with_mqa",
                               linear(da + "kv_a_proj_with_mqa", {spec::whole_linear(ca + "kv_a_proj_with_mqa", {s.kv_lora + s.rope, h})}, s)));
  }
  rep("self_attn.kv_a_layernorm", {s.kv_lora});
  m.modules.push_back(module(da + "kv_b_proj", kv_b(da, ca + "kv_b_proj", s, l)));
  const std::vector<uint64_t> o{h, s.heads * s.v};
  m.modules.push_back(module(da + "o_proj", linear(da + "o_proj",
                                                   {spec::linear_cols(ca + "o_proj", o, l.tp_slice(o[1]))}, s)));
  rep("post_attention_layernorm", {h});
  if (!s.is_moe(src_i)) {
    gated_mlp(m.modules, d + "mlp", c + "mlp", s.intermediate, s, l);
    return;
  }
  ParamSpec bias = spec::replicated(d + "mlp.gate.e_score_correction_bias", c + "mlp.gate.e_score_correction_bias", {s.experts});
  bias.optional = true;  // absent from some V3-style checkpoints
  m.modules.push_back(module(d + "mlp.gate", {spec::replicated(d + "mlp.gate.weight", c + "mlp.gate.weight", {s.experts, h}), bias}));
  if (s.shared_experts) gated_mlp(m.modules, d + "mlp.shared_experts", c + "mlp.shared_experts", s.moe_intermediate * s.shared_experts, s, l);
  m.modules.push_back({d + "mlp.experts.backend",
                       spec::moe_experts(d + "mlp.experts.backend", c + "mlp.experts", s.experts, s.moe_intermediate, h, l,
                                         s.fp8 ? spec::LinearQuant::fp8(*s.fp8) : spec::LinearQuant::none()),
                       {c + "mlp.experts"}});
}

ModelSpec build_deepseek(const ModelConfig& c, const Layout& l, const wmap::KeyProbe&) {
  const DeepseekShape s = read_shape(c, l);
  ModelSpec m;
  m.plugin = "deepseek_v3";
  m.architecture = c.architecture();
  const uint64_t h = s.hidden;
  m.modules.push_back(module("model.embed_tokens", {spec::vocab_parallel("model.embed_tokens.weight", "model.embed_tokens.weight", {s.vocab, h}, l)}));
  for (uint64_t i = 0; i < s.layers; ++i) add_layer(m, i, i, s, l);
  for (uint64_t k = 0; k < s.mtp; ++k) {
    const uint64_t dst = s.layers + k, src = s.layers + k % s.mtp_in_checkpoint;
    const std::string d = "model.layers." + std::to_string(dst) + ".", c2 = "model.layers." + std::to_string(src) + ".";
    ParamSpec embed = spec::vocab_parallel(d + "embed_tokens.weight", c2 + "embed_tokens.weight", {s.vocab, h}, l);
    ParamSpec head = spec::vocab_parallel(d + "shared_head.head.weight", c2 + "shared_head.head.weight", {s.vocab, h}, l);
    embed.optional = head.optional = true;  // some exports share the main model's instead
    m.modules.push_back(module(d + "embed_tokens", {embed}));
    m.modules.push_back(module(d + "enorm", {spec::replicated(d + "enorm.weight", c2 + "enorm.weight", {h})}));
    m.modules.push_back(module(d + "hnorm", {spec::replicated(d + "hnorm.weight", c2 + "hnorm.weight", {h})}));
    // eh_proj stays BF16 in FP8 checkpoints (no weight_scale_inv).
    m.modules.push_back(module(d + "eh_proj", {spec::replicated(d + "eh_proj.weight", c2 + "eh_proj.weight", {h, 2 * h})}));
    m.modules.push_back(module(d + "shared_head.norm", {spec::replicated(d + "shared_head.norm.weight", c2 + "shared_head.norm.weight", {h})}));
    m.modules.push_back(module(d + "shared_head.head", {head}));
    add_layer(m, dst, src, s, l);
  }
  if (s.mtp == 0) {
    for (uint64_t k = 0; k < s.mtp_in_checkpoint; ++k) m.skipped_prefixes.push_back("model.layers." + std::to_string(s.layers + k));
  }
  m.modules.push_back(module("model.norm", {spec::replicated("model.norm.weight", "model.norm.weight", {h})}));
  spec::add_lm_head(m, "model.embed_tokens.weight", s.vocab, h, s.tie, l);
  return m;
}

void register_deepseek(wmap::PluginRegistrar& registrar) { registrar.set_model_builder(build_deepseek); }

}  // namespace

WMAP_DEFINE_PLUGIN("deepseek_v3", "1.0", register_deepseek, "DeepseekV3ForCausalLM")
