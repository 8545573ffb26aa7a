// Qwen3-Next (Qwen3NextForCausalLM): gated-delta linear-attention layers and, every
// full_attention_interval-th layer, gated full attention; a MoE on every layer (router, one shared
// expert with its gate, routed experts). Each rank's parameters as each engine's load_weights
// leaves them (docs/families/llama4-qwen3next.md section 2), from the core's building blocks only:
//   - in_proj_qkvz [nk groups x (q, k, v, z)] and in_proj_ba [nk x (b, a)] are grouped per key
//     head in the checkpoint. vLLM keeps the rank's groups as one row range; TensorRT-LLM (its
//     qwen3_next_weight_mapper.py since PR #16314) reorders them to dense [Q | K | V | Z] /
//     [b | a]: one piece per component over the rank's groups (a view [groups, rows, H]).
//   - conv1d [Q | K | V, 1, kernel]: three ranges of one source into one parameter (2-D under
//     TensorRT-LLM: a view without the unit dim).
//   - A_log and dt_bias split by value head; held in F32 where the engine does (a widening cast).
//   - q_proj holds q and the output gate interleaved per head: whole head pairs split as they are
//     (both engines), k/v with KV-head duplication.

#include <optional>
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
using wmap::Piece;
using wmap::Range;
namespace spec = wmap::spec;

// What differs between the engines for this family, in one place.
struct TargetRules {
  bool dense_in_proj;   // TensorRT-LLM _permute_in_proj_to_dense: rank rows reordered to [Q|K|V|Z], [b|a]
  bool conv1d_2d;       // TensorRT-LLM squeezes conv1d's unit dim
  bool a_log_f32;       // A_log held in float32
  bool dt_bias_f32;     // dt_bias held in float32
  const char* experts;  // routed experts' runtime module after "mlp."
  spec::ExpertNames names;
};

const TargetRules& rules_for(wmap::Target t) {
  // TensorRT-LLM: qwen3_next_weight_mapper.py preprocess_weights (dense permutation, conv1d
  // squeeze + per-rank Q/K/V split, A_log/dt_bias `.to(float32)`), qwen2_moe_weight_mapper.py
  // (gate/up/down -> w1/w3/w2), VANILLA MoE `experts.backend` w3_w1 = [up; gate].
  static const TargetRules kTrtllm{.dense_in_proj = true,
                                   .conv1d_2d = true,
                                   .a_log_f32 = true,
                                   .dt_bias_f32 = true,
                                   .experts = "experts.backend",
                                   .names = {.fused = "w3_w1", .down = "w2", .gate_first = false}};
  // vLLM: qwen_gdn_linear_attn.py QwenGatedDeltaNetAttention (in_proj rows contiguous, conv1d
  // mamba_v2_sharded_weight_loader over [Kd, Kd, Vd], A_log float32, dt_bias model dtype),
  // FusedMoE w13 = [gate; up].
  static const TargetRules kVllm{.dense_in_proj = false,
                                 .conv1d_2d = false,
                                 .a_log_f32 = true,
                                 .dt_bias_f32 = false,
                                 .experts = "experts",
                                 .names = {.fused = "w13", .down = "w2", .gate_first = true, .globals_close = false}};
  return t == wmap::Target::kVllm ? kVllm : kTrtllm;
}

struct Qwen3NextShape {
  uint64_t hidden, layers, vocab, interval;
  uint64_t nk, nv, dk, dv, kernel;            // linear attention
  uint64_t heads, kv_heads, head_dim;         // full attention
  uint64_t experts, moe_inter, shared_inter;  // MoE
  bool tie;
  uint64_t rho() const { return nv / nk; }
  uint64_t group_rows() const { return 2 * dk + 2 * rho() * dv; }
  bool full_attention(uint64_t i) const { return (i + 1) % interval == 0; }
};

Qwen3NextShape read_shape(const ModelConfig& c, const Layout& l, const wmap::KeyProbe& probe) {
  const wmap::ConfigBounds b(c, probe);
  Qwen3NextShape s{};
  if (c.has("quantization_config")) {
    c.fail("quantization_config", "quantised Qwen3NextForCausalLM checkpoints (quant_method '" +
                                      c.get_string("quantization_config.quant_method", "?") +
                                      "') are not served: their layout has not been read");
  }
  s.layers = b.count("num_hidden_layers", "model.layers.", "layer");
  s.hidden = b.dim("hidden_size");
  s.vocab = b.dim("vocab_size");
  s.interval = c.require_positive("full_attention_interval");
  s.nk = c.require_positive("linear_num_key_heads");
  s.nv = c.require_positive("linear_num_value_heads");
  s.dk = b.dim("linear_key_head_dim");
  s.dv = b.dim("linear_value_head_dim");
  s.kernel = b.dim("linear_conv_kernel_dim");
  if (s.nv % s.nk != 0) {
    c.fail("linear_num_value_heads",
           std::to_string(s.nv) + " is not a multiple of linear_num_key_heads " + std::to_string(s.nk));
  }
  b.dim("in_proj_qkvz rows", b.mul(s.nk, 2 * s.dk + 2 * (s.nv / s.nk) * s.dv, "in_proj_qkvz rows"));
  s.heads = c.require_positive("num_attention_heads");
  s.kv_heads = c.require_positive("num_key_value_heads");
  s.head_dim = b.dim("head_dim");
  b.dim("2 * num_attention_heads * head_dim", b.mul(2 * s.heads, s.head_dim, "2 * num_attention_heads * head_dim"));
  s.experts = b.count("num_experts", c.require_positive("num_experts"),
                      spec::moe_expert_prefixes(s.layers,
                                                [](uint64_t i) -> std::optional<std::string> {
                                                  return "model.layers." + std::to_string(i) + ".mlp.experts";
                                                }),
                      "expert");
  s.moe_inter = b.dim("moe_intermediate_size");
  s.shared_inter = b.dim("shared_expert_intermediate_size");
  s.tie = c.get_bool("tie_word_embeddings", false);
  // TensorRT-LLM builds a MoE on every layer; vLLM honours these. Served only where they agree.
  if (c.get_non_negative("decoder_sparse_step", 1) != 1 || !c.get_int_list("mlp_only_layers").empty()) {
    c.fail("mlp_only_layers",
           "dense Qwen3-Next layers are not served: TensorRT-LLM builds a MoE on every layer "
           "(modeling_qwen3_next.py) while vLLM honours decoder_sparse_step and mlp_only_layers");
  }
  if (l.attention_dp) {
    c.fail("architectures",
           "attention_dp is not served for Qwen3NextForCausalLM (the shared expert's split under "
           "attention data parallelism has not been read)");
  }
  if (l.mtp_layers && *l.mtp_layers > 0) {
    c.fail("architectures",
           l.target == wmap::Target::kVllm
               ? std::string("vLLM loads Qwen3-Next's mtp.* in a separate draft model (Qwen3NextMTP), not here")
               : std::string("MTP layers of Qwen3-Next are not served under target trtllm: the tensor-parallel "
                             "split of Qwen3NextMTP's fc has not been read from its source"));
  }
  if (auto e = l.heads_error(s.heads)) c.fail("num_attention_heads", *e);
  if (auto e = l.kv_heads_error(s.kv_heads)) c.fail("num_key_value_heads", *e);
  if (s.nk % l.tp_size != 0) {
    c.fail("linear_num_key_heads", std::to_string(s.nk) + " key-head groups cannot be split over tp_size " +
                                       std::to_string(l.tp_size) + " (both engines split whole groups)");
  }
  if (auto e = l.experts_error(s.experts)) c.fail("num_experts", *e);
  return s;
}

ModuleSpec module(std::string name, std::vector<ParamSpec> params) { return {std::move(name), std::move(params), {}}; }

ParamSpec param(std::string name, std::vector<uint64_t> shape, std::vector<Piece> pieces,
                std::optional<wmap::DType> dtype = std::nullopt) {
  ParamSpec p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.pieces = std::move(pieces);
  p.dtype = dtype;
  return p;
}

// Components `parts` (row ranges within a group) of groups `groups` of a grouped [g x rows, H]
// tensor: dense (each component over all the groups, in turn) or, grouped, one row range.
std::vector<Piece> grouped_rows(const std::string& source, uint64_t groups_total, uint64_t rows, uint64_t h,
                                Range groups, const std::vector<Range>& parts, bool dense) {
  if (!dense) return {spec::rows(source, {groups_total * rows, h}, {groups.begin * rows, groups.end * rows})};
  std::vector<Piece> out;
  for (const Range& part : parts) {
    Piece p = spec::whole(source, {groups_total * rows, h});
    p.view = {groups_total, rows, h};
    p.box = {groups, part, {0, h}};
    out.push_back(std::move(p));
  }
  return out;
}

// A [n] vector split by value head, F32 when the engine holds it so.
ParamSpec per_value_head(const std::string& name, const std::string& source, uint64_t nv, Range heads, bool f32) {
  Piece p = spec::rows(source, {nv}, heads);
  if (f32) return param(name, {heads.size()}, {spec::widened_bf16_to_f32(p)}, wmap::DType::kF32);
  return param(name, {heads.size()}, {p});
}

void linear_attention(ModelSpec& m, const std::string& p, const Qwen3NextShape& s, const Layout& l) {
  const TargetRules& rules = rules_for(l.target);
  const std::string a = p + "linear_attn.";
  const uint64_t h = s.hidden, rho = s.rho(), g = s.group_rows(), kd = s.nk * s.dk, vd = s.nv * s.dv;
  const Range groups = l.tp().items(s.nk, "linear attention key heads");
  const uint64_t ng = groups.size();
  const Range vheads{groups.begin * rho, groups.end * rho};
  m.modules.push_back(module(
      a + "in_proj_qkvz",
      {param(a + "in_proj_qkvz.weight", {ng * g, h},
             grouped_rows(a + "in_proj_qkvz.weight", s.nk, g, h, groups,
                          {{0, s.dk}, {s.dk, 2 * s.dk}, {2 * s.dk, 2 * s.dk + rho * s.dv}, {2 * s.dk + rho * s.dv, g}},
                          rules.dense_in_proj))}));
  m.modules.push_back(module(a + "in_proj_ba", {param(a + "in_proj_ba.weight", {ng * 2 * rho, h},
                                                      grouped_rows(a + "in_proj_ba.weight", s.nk, 2 * rho, h, groups,
                                                                   {{0, rho}, {rho, 2 * rho}}, rules.dense_in_proj))}));
  // conv1d [Q | K | V, 1, kernel]: the rank's rows of each, one after the other.
  const uint64_t conv = 2 * kd + vd, kl = ng * s.dk, vl = vheads.size() * s.dv;
  std::vector<Piece> conv_pieces;
  for (const Range rows :
       {Range{groups.begin * s.dk, groups.end * s.dk}, Range{kd + groups.begin * s.dk, kd + groups.end * s.dk},
        Range{2 * kd + vheads.begin * s.dv, 2 * kd + vheads.end * s.dv}}) {
    Piece piece = spec::whole(a + "conv1d.weight", {conv, 1, s.kernel});
    if (rules.conv1d_2d) {
      piece.view = {conv, s.kernel};
      piece.box = {rows, {0, s.kernel}};
    } else {
      piece.box = {rows, {0, 1}, {0, s.kernel}};
    }
    conv_pieces.push_back(std::move(piece));
  }
  std::vector<uint64_t> conv_shape{2 * kl + vl, s.kernel};
  if (!rules.conv1d_2d) conv_shape = {2 * kl + vl, 1, s.kernel};
  m.modules.push_back(module(a + "conv1d", {param(a + "conv1d.weight", conv_shape, std::move(conv_pieces))}));
  m.modules.push_back(module(a + "A_log", {per_value_head(a + "A_log", a + "A_log", s.nv, vheads, rules.a_log_f32)}));
  m.modules.push_back(
      module(a + "dt_bias", {per_value_head(a + "dt_bias", a + "dt_bias", s.nv, vheads, rules.dt_bias_f32)}));
  m.modules.push_back(module(a + "norm", {spec::replicated(a + "norm.weight", a + "norm.weight", {s.dv})}));
  m.modules.push_back(module(
      a + "out_proj", {param(a + "out_proj.weight", {h, vl},
                             {spec::cols(a + "out_proj.weight", {h, vd}, {vheads.begin * s.dv, vheads.end * s.dv})})}));
}

void full_attention(ModelSpec& m, const std::string& p, const Qwen3NextShape& s, const Layout& l) {
  const std::string a = p + "self_attn.";
  const uint64_t h = s.hidden, hd = s.head_dim, q_rows = 2 * s.heads * hd, kv_rows = s.kv_heads * hd;
  const Range heads = l.local_heads(s.heads);  // whole [q_h | gate_h] pairs
  const Range kv = spec::kv_head_rows(s.kv_heads, hd, l);
  std::vector<ParamSpec> qkv;
  spec::add_linear(
      qkv, a + "qkv_proj", ".",
      {spec::linear_rows(a + "q_proj", {q_rows, h}, Range{heads.begin * 2 * hd, heads.end * 2 * hd}),
       spec::linear_rows(a + "k_proj", {kv_rows, h}, kv), spec::linear_rows(a + "v_proj", {kv_rows, h}, kv)},
      spec::LinearQuant::none());
  m.modules.push_back(module(a + "qkv_proj", std::move(qkv)));
  for (const char* n : {"q_norm", "k_norm"}) {
    m.modules.push_back(module(a + n, {spec::replicated(a + n + ".weight", a + n + ".weight", {hd})}));
  }
  m.modules.push_back(module(
      a + "o_proj", {param(a + "o_proj.weight", {h, heads.size() * hd},
                           {spec::cols(a + "o_proj.weight", {h, s.heads * hd}, {heads.begin * hd, heads.end * hd})})}));
}

void moe(ModelSpec& m, const std::string& p, const Qwen3NextShape& s, const Layout& l) {
  const TargetRules& rules = rules_for(l.target);
  const uint64_t h = s.hidden;
  const std::string mp = p + "mlp.";
  m.modules.push_back(module(mp + "gate", {spec::replicated(mp + "gate.weight", mp + "gate.weight", {s.experts, h})}));
  m.modules.push_back(module(mp + "shared_expert_gate", {spec::replicated(mp + "shared_expert_gate.weight",
                                                                          mp + "shared_expert_gate.weight", {1, h})}));
  const wmap::Split tp = l.tp();
  std::vector<ParamSpec> gate_up, down;
  spec::add_linear(gate_up, mp + "shared_expert.gate_up_proj", ".",
                   {spec::linear_rows(mp + "shared_expert.gate_proj", {s.shared_inter, h}, tp),
                    spec::linear_rows(mp + "shared_expert.up_proj", {s.shared_inter, h}, tp)},
                   spec::LinearQuant::none());
  spec::add_linear(down, mp + "shared_expert.down_proj", ".",
                   {spec::linear_cols(mp + "shared_expert.down_proj", {h, s.shared_inter}, tp)},
                   spec::LinearQuant::none());
  m.modules.push_back(module(mp + "shared_expert.gate_up_proj", std::move(gate_up)));
  m.modules.push_back(module(mp + "shared_expert.down_proj", std::move(down)));
  const std::string experts = mp + rules.experts, source = mp + "experts";
  m.modules.push_back(
      {experts,
       spec::moe_experts(experts, source, s.experts, s.moe_inter, h, l, spec::LinearQuant::none(), rules.names),
       {source}});
}

ModelSpec build_qwen3_next(const ModelConfig& c, const Layout& l, const wmap::KeyProbe& probe) {
  const Qwen3NextShape s = read_shape(c, l, probe);
  ModelSpec m;
  m.plugin = "qwen3_next";
  m.architecture = c.architecture();
  const uint64_t h = s.hidden;
  m.modules.push_back(
      module("model.embed_tokens",
             {spec::vocab_parallel("model.embed_tokens.weight", "model.embed_tokens.weight", {s.vocab, h}, l)}));
  for (uint64_t i = 0; i < s.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    m.modules.push_back(module(p + "input_layernorm",
                               {spec::replicated(p + "input_layernorm.weight", p + "input_layernorm.weight", {h})}));
    if (s.full_attention(i)) {
      full_attention(m, p, s, l);
    } else {
      linear_attention(m, p, s, l);
    }
    m.modules.push_back(
        module(p + "post_attention_layernorm",
               {spec::replicated(p + "post_attention_layernorm.weight", p + "post_attention_layernorm.weight", {h})}));
    moe(m, p, s, l);
  }
  m.modules.push_back(module("model.norm", {spec::replicated("model.norm.weight", "model.norm.weight", {h})}));
  spec::add_lm_head(m, "model.embed_tokens.weight", s.vocab, h, s.tie, l);
  spec::place_stages(m, s.layers, "model.embed_tokens", "model.norm", s.tie, l);
  // The MTP module (mtp.*): a separate draft model in vLLM; under TensorRT-LLM its fc split is
  // unread, so it is not loaded (--mtp-layers K > 0 is refused above).
  m.skipped_prefixes.push_back("mtp");
  return m;
}

void register_qwen3_next(wmap::PluginRegistrar& registrar) { registrar.set_model_builder(build_qwen3_next); }

}  // namespace

WMAP_DEFINE_PLUGIN("qwen3_next", "1.0", register_qwen3_next, ("trtllm", "vllm"), "Qwen3NextForCausalLM")
