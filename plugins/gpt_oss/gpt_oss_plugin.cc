// gpt-oss (GptOssForCausalLM, the Hugging Face MXFP4 checkpoints openai/gpt-oss-20b and -120b):
// each rank's parameters as each engine's own load_weights leaves them
// (docs/families/gpt-oss.md, read from the engines' source; DESIGN.md "Families beyond Llama
// and DeepSeek"). Built only from the core's building blocks (docs/plugins.md): stacked 3-D
// experts cut per rank, the gate/up row interleave kept (vLLM) or undone (TensorRT-LLM), MXFP4
// splits on 32-element groups, zero padding before or after the split, a rank-dependent zero,
// an exact BF16 -> F32 widening and TensorRT-LLM's 128x4 block-scale interleave.

#include <numeric>
#include <string>
#include <vector>

#include "wmap/abi/plugin_api.h"
#include "wmap/spec/config_bounds.h"
#include "wmap/spec/linear_spec.h"
#include "wmap/util/error.h"

namespace {

using wmap::Layout;
using wmap::ModelConfig;
using wmap::ModelSpec;
using wmap::ModuleSpec;
using wmap::ParamSpec;
using wmap::Piece;
using wmap::Range;
namespace spec = wmap::spec;
using wmap::DType;

constexpr uint64_t kGroup = 32;  // MXFP4: 32 FP4 values (16 bytes) share one E8M0 scale

uint64_t rup(uint64_t x, uint64_t m) { return wmap::ceil_div(x, m) * m; }

// What differs between the engines for this family, in one place.
struct TargetRules {
  const char* layers;     // the decoder layer's runtime prefix
  const char* attention;  // the attention module under it
  const char* router;     // the router module under "mlp."
  const char* experts;    // the routed experts' module under "mlp."
  const char* default_backend;
  bool duplicates_kv_heads;  // vLLM QKVParallelLinear repeats KV heads when nkv < T
  bool sinks_f32;            // TensorRT-LLM: attn.sinks .to(torch.float32)
  bool norm_twice;           // TensorRT-LLM: input_layernorm and attn.norm, post_attention_layernorm and mlp.norm
};

const TargetRules& rules_for(wmap::Target t) {
  // vLLM gpt_oss.py (hf_to_vllm_mapper: .self_attn. -> .attn., embed_tokens -> embedding;
  // OAIAttention, MLPBlock; _load_weights_mxfp4 with FusedMoE.weight_loader's mxfp4 branch).
  // The experts keep vLLM's FusedMoE names `mlp.experts.w13_weight` as this project's other vLLM
  // families do (vLLM's 2026 MoERunner refactor #41184 moves them under `routed_experts.`: not
  // followed here, docs/families/gpt-oss.md section 3 "Names").
  static const TargetRules kVllm{.layers = "model.layers.",
                                 .attention = "attn.",
                                 .router = "router",
                                 .experts = "experts",
                                 .default_backend = "triton",
                                 .duplicates_kv_heads = true,
                                 .sinks_f32 = false,
                                 .norm_twice = false};
  // TensorRT-LLM modeling_gpt_oss.py GptOssForCausalLM.load_hf_weights (hf_params_map: block ->
  // layers, attn -> self_attn, gate -> router, attn.norm / mlp.norm); the CUTLASS MoE behind
  // ConfigurableMoE's `.backend` (fused_moe/quantization.py MXFP4WeightCutlassFusedMoEMethod).
  static const TargetRules kTrtllm{.layers = "model.block.",
                                   .attention = "attn.",
                                   .router = "gate",
                                   .experts = "experts.backend",
                                   .default_backend = "cutlass",
                                   .duplicates_kv_heads = false,
                                   .sinks_f32 = true,
                                   .norm_twice = true};
  return t == wmap::Target::kVllm ? kVllm : kTrtllm;
}

// The MoE backends each engine has for gpt-oss (docs/families/gpt-oss.md sections 2-4); only
// the served ones build, the rest are refused by name with what is missing.
const char* unserved_backend_reason(wmap::Target t, const std::string& b) {
  if (t == wmap::Target::kVllm) {
    if (b == "marlin" || b == "flashinfer_trtllm" || b == "flashinfer_cutlass" || b == "aiter" || b == "triton_unfused")
      return "is a vLLM gpt-oss MoE backend whose padding is not served yet (served: triton)";
    return nullptr;
  }
  if (b == "trtllmgen") return "is not served yet: its row shuffles (shuffle_matrix_a) were not read from the C++ op";
  if (b == "triton") return "is not served: its final layout is triton_kernels' convert_layout, not reproduced";
  if (b == "wfp4a16") return "(Hopper CUTLASS W4A16) is not served yet (served: cutlass)";
  return nullptr;
}

struct GptOssShape {
  uint64_t hidden, inter, experts, heads, kv_heads, head_dim, vocab, layers;
  std::string backend;
};

GptOssShape read_shape(const ModelConfig& c, const Layout& l, const wmap::KeyProbe& probe) {
  const wmap::ConfigBounds b(c, probe);
  GptOssShape s{};
  s.layers = b.count("num_hidden_layers", "model.layers.", "layer");
  s.hidden = b.dim("hidden_size");
  s.inter = b.dim("intermediate_size");
  s.experts = b.dim("num_local_experts");
  s.heads = c.require_positive("num_attention_heads");
  s.kv_heads = c.require_positive("num_key_value_heads");
  s.head_dim = c.require_positive("head_dim");
  b.dim("num_attention_heads * head_dim", b.mul(s.heads, s.head_dim, "num_attention_heads * head_dim"));
  b.dim("num_key_value_heads * head_dim", b.mul(s.kv_heads, s.head_dim, "num_key_value_heads * head_dim"));
  s.vocab = b.dim("vocab_size");
  const std::string method = c.get_string("quantization_config.quant_method", "");
  if (method != "mxfp4" && method != "gpt_oss_mxfp4")
    c.fail("quantization_config.quant_method",
           "'" + method + "': only the MXFP4 gpt-oss checkpoints (quant_method mxfp4) are served");
  if (c.get_bool("tie_word_embeddings", false)) c.fail("tie_word_embeddings", "gpt-oss has an untied lm_head");
  if (s.hidden % kGroup) c.fail("hidden_size", std::to_string(s.hidden) + " is not a multiple of the MXFP4 group 32");
  if (s.inter % kGroup)
    c.fail("intermediate_size", std::to_string(s.inter) + " is not a multiple of the MXFP4 group 32");
  if (s.heads % s.kv_heads)
    c.fail("num_key_value_heads",
           std::to_string(s.kv_heads) + " does not divide num_attention_heads " + std::to_string(s.heads));
  if (auto e = l.heads_error(s.heads)) c.fail("num_attention_heads", *e);
  if (auto e = l.experts_error(s.experts)) c.fail("num_local_experts", *e);
  const TargetRules& rules = rules_for(l.target);
  const wmap::Split attn = l.attention();
  if (rules.duplicates_kv_heads) {
    if (auto e = l.kv_heads_error(s.kv_heads)) c.fail("num_key_value_heads", *e);
  } else if (s.kv_heads % attn.size) {
    // load_hf_weights cuts q, k and v with the plain row split (no _duplicate_kv): the engine
    // fails on a row-count mismatch.
    c.fail("num_key_value_heads", std::to_string(s.kv_heads) + " KV heads do not split over tp_size " +
                                      std::to_string(attn.size) +
                                      ": TensorRT-LLM does not duplicate gpt-oss KV heads (load_hf_weights)");
  }
  if (l.target == wmap::Target::kVllm && s.inter % l.tp_size) {
    c.fail("intermediate_size", std::to_string(s.inter) + " is not divisible by tp_size " + std::to_string(l.tp_size) +
                                    " (vLLM's gpt-oss MLPBlock asserts it)");
  }
  if (l.mtp_layers.value_or(0) > 0) c.fail("num_hidden_layers", "gpt-oss has no MTP layers");
  s.backend = l.moe_backend.empty() ? rules.default_backend : l.moe_backend;
  if (s.backend != rules.default_backend) {
    const char* why = unserved_backend_reason(l.target, s.backend);
    throw wmap::Error(wmap::ErrorCode::kInvalidArgument,
                      "moe_backend '" + s.backend + "' " +
                          (why ? std::string(why)
                               : "is not a gpt-oss MoE backend of target " + std::string(wmap::target_name(l.target)) +
                                     " (served: " + rules.default_backend + ")"));
  }
  return s;
}

ModuleSpec module(std::string name, std::vector<ParamSpec> params, std::vector<std::string> subtrees = {}) {
  return {std::move(name), std::move(params), std::move(subtrees)};
}

ParamSpec param(std::string name, std::vector<uint64_t> shape, DType dtype, std::vector<Piece> pieces) {
  ParamSpec p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.dtype = dtype;
  p.pieces = std::move(pieces);
  return p;
}

// An MXFP4 weight (packed FP4 blocks), which the plan refuses without its E8M0 block scales.
ParamSpec mxfp4(ParamSpec weight, std::string scale) {
  weight.scales = {std::move(scale)};
  return weight;
}

// vLLM (Triton MoE backend): rows [s, e) of I for moe tp rank rm, Ir = cdiv(I/32, Tm) * 32 (a
// rank past I holds none), landing in the top-left corner of zero params padded to
// Ip = rup(I / Tm, 64) (mxfp4_round_up_hidden_size_and_intermediate_size); the gate/up
// interleave kept; w2_bias on moe tp rank 0 only (weight.zero_() elsewhere).
std::vector<ParamSpec> vllm_experts(const std::string& dst, const std::string& src, const GptOssShape& s,
                                    const Layout& l) {
  const uint64_t H = s.hidden, I = s.inter, E = s.experts, tm = l.moe_tp_size(), rm = l.moe_tp_rank();
  const Range ex = l.local_experts(E);
  const uint64_t El = ex.size();
  const uint64_t ir = wmap::ceil_div(I / kGroup, tm) * kGroup;
  const Range rows{std::min(rm * ir, I), std::min((rm + 1) * ir, I)};
  const uint64_t ip = rup(I / tm, 64);
  const Range g = spec::whole_groups(rows, kGroup, I, src + ".down_proj_blocks");
  const Range all_h{0, H};
  auto cut = [&](const std::string& key, std::vector<uint64_t> shape, std::vector<Range> box,
                 std::vector<uint64_t> pad) {
    Piece p;
    p.source = key;
    p.source_shape = std::move(shape);
    p.box = std::move(box);
    return spec::padded(std::move(p), std::move(pad));
  };
  const Range r2{2 * rows.begin, 2 * rows.end};
  std::vector<ParamSpec> out;
  {
    Piece w = cut(src + ".gate_up_proj_blocks", {E, 2 * I, H / kGroup, 16}, {ex, r2, {0, H / kGroup}, {0, 16}},
                  {El, 2 * ip, H / kGroup, 16});
    out.push_back(mxfp4(param(dst + ".w13_weight", {El, 2 * ip, H / 2}, DType::kU8, {w}), dst + ".w13_weight_scale"));
  }
  out.push_back(param(dst + ".w13_weight_scale", {El, 2 * ip, H / kGroup}, DType::kU8,
                      {cut(src + ".gate_up_proj_scales", {E, 2 * I, H / kGroup}, {ex, r2, {0, H / kGroup}},
                           {El, 2 * ip, H / kGroup})}));
  out.push_back(param(dst + ".w13_bias", {El, 2 * ip}, DType::kBF16,
                      {cut(src + ".gate_up_proj_bias", {E, 2 * I}, {ex, r2}, {El, 2 * ip})}));
  out.push_back(mxfp4(param(dst + ".w2_weight", {El, H, ip / 2}, DType::kU8,
                            {cut(src + ".down_proj_blocks", {E, H, I / kGroup, 16}, {ex, all_h, g, {0, 16}},
                                 {El, H, ip / kGroup, 16})}),
                      dst + ".w2_weight_scale"));
  out.push_back(param(dst + ".w2_weight_scale", {El, H, ip / kGroup}, DType::kU8,
                      {cut(src + ".down_proj_scales", {E, H, I / kGroup}, {ex, all_h, g}, {El, H, ip / kGroup})}));
  Piece bias;
  bias.source = src + ".down_proj_bias";
  bias.source_shape = {E, H};
  bias.box = {ex, all_h};
  out.push_back(spec::zero_unless(rm == 0, param(dst + ".w2_bias", {El, H}, DType::kBF16, {bias})));
  return out;
}

// TensorRT-LLM's _get_weight_alignment(weight_alignment 128, scaling_vector_size 32, tp, I).
uint64_t trtllm_alignment(uint64_t tp, uint64_t width) {
  const uint64_t a0 = std::lcm(std::lcm(uint64_t{128}, kGroup), tp);
  const uint64_t per = rup(width, a0) / tp;
  return per % 128 ? 128 * wmap::ceil_div(per, 128) * tp : a0;
}

// TensorRT-LLM CUTLASS (MXFP4WeightCutlassFusedMoEMethod): each of gate and up, de-interleaved,
// padded before the split (rows to A = _get_weight_alignment, H to 128), ceil-split over moe tp,
// stored [up; gate] per expert as int64 words; down padded likewise and row-split; biases BF16,
// w2_bias whole on every rank; scales padded the same way and 128x4-interleaved inside
// load_weights (load_quant_scales -> block_scale_interleave).
std::vector<ParamSpec> trtllm_experts(const std::string& dst, const std::string& src, const GptOssShape& s,
                                      const Layout& l, const ModelConfig& c) {
  const uint64_t H = s.hidden, I = s.inter, E = s.experts, tm = l.moe_tp_size();
  const Range ex = l.local_experts(E);
  const uint64_t El = ex.size(), hp = rup(H, 128);
  const uint64_t a = trtllm_alignment(tm, I);
  const spec::PaddedPart part = spec::padded_split(I, rup(I, a), l.moe_tp());
  const uint64_t ipad = part.size;
  // create_weights allocates rup(I / tm, 128) rows; the down scales are padded with their own
  // alignment (_get_weight_alignment over I / 32). Both must agree with the weights' split.
  const uint64_t a2 = trtllm_alignment(tm, I / kGroup);
  if (ipad != rup(I / tm, 128) || rup(I / kGroup, a2 / kGroup) / tm != ipad / kGroup) {
    c.fail("intermediate_size", std::to_string(I) + " over moe_tp_size " + std::to_string(tm) + " pads to " +
                                    std::to_string(ipad) +
                                    " rows a rank, which TensorRT-LLM's create_weights and scale padding do not match");
  }
  const Range g = spec::whole_groups(part.source, kGroup, I, src + ".down_proj_blocks");
  const uint64_t hg = H / kGroup, hpg = hp / kGroup;
  // One piece per parameter over the rank's experts: the interleaved rows viewed as
  // [E, I, 2(gate, up), ...], the stream dim moved before the rows and walked backwards, so each
  // expert is [up; gate], each padded to ipad rows and hp columns (one read of each expert's rows).
  auto up_gate = [&](const std::string& key, std::vector<uint64_t> view, std::vector<uint64_t> pad) {
    Piece p;
    p.source = key;
    p.source_shape = view;
    p.source_shape[1] *= 2;
    p.source_shape.erase(p.source_shape.begin() + 2);
    p.view = std::move(view);
    p.box = {ex, part.source, {0, 2}};
    p.perm = {0, 2, 1};
    for (size_t d = 3; d < p.view.size(); ++d) {
      p.box.push_back({0, p.view[d]});
      p.perm.push_back(static_cast<uint32_t>(d));
    }
    p.reverse = {2};
    return spec::padded(std::move(p), std::move(pad));
  };
  Piece w13 = up_gate(src + ".gate_up_proj_blocks", {E, I, 2, hg, 16}, {El, 2, ipad, hpg, 16});
  w13.source_dtype = DType::kU8;
  Piece s13 = up_gate(src + ".gate_up_proj_scales", {E, I, 2, hg}, {El, 2, ipad, hpg});
  s13.source_dtype = DType::kU8;
  s13.transform = "block_scale_interleave_128x4";  // per expert and stream: ipad is a multiple of 128
  std::vector<ParamSpec> out;
  out.push_back(
      mxfp4(param(dst + ".w3_w1_weight", {El, 2 * ipad, hp / 16}, DType::kI64, {w13}), dst + ".w3_w1_weight_scale"));
  out.push_back(param(dst + ".w3_w1_bias", {El, 2 * ipad}, DType::kBF16,
                      {up_gate(src + ".gate_up_proj_bias", {E, I, 2}, {El, 2, ipad})}));
  out.push_back(param(dst + ".w3_w1_weight_scale", {El, 2 * ipad, hp / 128}, DType::kI32, {s13}));
  Piece w2;
  w2.source = src + ".down_proj_blocks";
  w2.source_shape = {E, H, I / kGroup, 16};
  w2.source_dtype = DType::kU8;
  w2.box = {ex, {0, H}, g, {0, 16}};
  out.push_back(mxfp4(
      param(dst + ".w2_weight", {El, hp, ipad / 16}, DType::kI64, {spec::padded(w2, {El, hp, ipad / kGroup, 16})}),
      dst + ".w2_weight_scale"));
  Piece b2;
  b2.source = src + ".down_proj_bias";
  b2.source_shape = {E, H};
  b2.box = {ex, {0, H}};
  out.push_back(param(dst + ".w2_bias", {El, hp}, DType::kBF16, {spec::padded(b2, {El, hp})}));
  Piece s2;
  s2.source = src + ".down_proj_scales";
  s2.source_shape = {E, H, I / kGroup};
  s2.source_dtype = DType::kU8;
  s2.box = {ex, {0, H}, g};
  s2 = spec::padded(s2, {El, hp, ipad / kGroup});
  s2.transform = "block_scale_interleave_128x4";  // per expert: hp is a multiple of 128
  out.push_back(param(dst + ".w2_weight_scale", {El, hp, ipad / 128}, DType::kI32, {s2}));
  // TensorRT-LLM picks W4A8MXFP4MXFP8CutlassFusedMoEMethod for mxfp4 checkpoints on CUTLASS
  // (model_config.py get_mxfp4_quant_algo, SM >= 100): its create_weights makes fake_input_scale
  // with torch.empty([experts per rank], float32) and load_quant_scales fills it with 1.0
  // (_torch/modules/fused_moe/quantization.py, commit 002366a4). A load into the engine's buffers
  // bypasses load_quant_scales, so the plan writes it (review, issue 38).
  out.push_back(param(dst + ".fake_input_scale", {El}, DType::kF32, {spec::ones(El)}));
  return out;
}

ModelSpec build_gpt_oss(const ModelConfig& c, const Layout& l, const wmap::KeyProbe& probe) {
  const GptOssShape s = read_shape(c, l, probe);
  const TargetRules& rules = rules_for(l.target);
  const wmap::Split attn = l.attention();
  const uint64_t H = s.hidden, hd = s.head_dim, q_rows = s.heads * hd, kv_rows = s.kv_heads * hd;
  ModelSpec m;
  m.plugin = "gpt_oss";
  m.architecture = c.architecture();
  m.layout.moe_backend = s.backend;  // recorded by the host in the plan's layout
  m.modules.push_back(
      module("model.embedding",
             {spec::vocab_parallel("model.embedding.weight", "model.embed_tokens.weight", {s.vocab, H}, l, attn)}));
  const Range heads = attn.items(s.heads, "attention heads");
  const Range q{heads.begin * hd, heads.end * hd};
  const Range kv = rules.duplicates_kv_heads ? spec::kv_head_rows(s.kv_heads, hd, l)
                                             : attn.slice(kv_rows, "self_attn.k_proj.weight");
  for (uint64_t i = 0; i < s.layers; ++i) {
    const std::string src = "model.layers." + std::to_string(i) + ".";
    const std::string dst = rules.layers + std::to_string(i) + ".";
    const std::string a = dst + rules.attention, sa = src + "self_attn.";
    std::vector<ParamSpec> norm1{spec::replicated(dst + "input_layernorm.weight", src + "input_layernorm.weight", {H})};
    if (rules.norm_twice) norm1.push_back(spec::replicated(a + "norm.weight", src + "input_layernorm.weight", {H}));
    m.modules.push_back(module(dst + "input_layernorm", std::move(norm1)));
    ParamSpec qkv_w =
        param(a + "qkv_proj.weight", {q.size() + 2 * kv.size(), H}, DType::kBF16,
              {spec::rows(sa + "q_proj.weight", {q_rows, H}, q), spec::rows(sa + "k_proj.weight", {kv_rows, H}, kv),
               spec::rows(sa + "v_proj.weight", {kv_rows, H}, kv)});
    ParamSpec qkv_b = param(a + "qkv_proj.bias", {q.size() + 2 * kv.size()}, DType::kBF16,
                            {spec::rows(sa + "q_proj.bias", {q_rows}, q), spec::rows(sa + "k_proj.bias", {kv_rows}, kv),
                             spec::rows(sa + "v_proj.bias", {kv_rows}, kv)});
    m.modules.push_back(module(a + "qkv_proj", {qkv_w, qkv_b}));
    m.modules.push_back(module(a + "o_proj", {param(a + "o_proj.weight", {H, q.size()}, DType::kBF16,
                                                    {spec::cols(sa + "o_proj.weight", {H, q_rows}, q)}),
                                              spec::replicated(a + "o_proj.bias", sa + "o_proj.bias", {H})}));
    Piece sinks = spec::rows(sa + "sinks", {s.heads}, heads);
    if (rules.sinks_f32) sinks = spec::widened_bf16_to_f32(sinks);  // .to(torch.float32)
    m.modules.push_back(module(
        a + "sinks", {param(a + "sinks", {heads.size()}, rules.sinks_f32 ? DType::kF32 : DType::kBF16, {sinks})}));
    std::vector<ParamSpec> norm2{
        spec::replicated(dst + "post_attention_layernorm.weight", src + "post_attention_layernorm.weight", {H})};
    if (rules.norm_twice)
      norm2.push_back(spec::replicated(dst + "mlp.norm.weight", src + "post_attention_layernorm.weight", {H}));
    m.modules.push_back(module(dst + "post_attention_layernorm", std::move(norm2)));
    const std::string router = dst + "mlp." + rules.router;
    m.modules.push_back(module(router, {spec::replicated(router + ".weight", src + "mlp.router.weight", {s.experts, H}),
                                        spec::replicated(router + ".bias", src + "mlp.router.bias", {s.experts})}));
    const std::string experts = dst + "mlp." + rules.experts, esrc = src + "mlp.experts";
    m.modules.push_back(module(
        experts,
        l.target == wmap::Target::kVllm ? vllm_experts(experts, esrc, s, l) : trtllm_experts(experts, esrc, s, l, c),
        {esrc}));
  }
  m.modules.push_back(module("model.norm", {spec::replicated("model.norm.weight", "model.norm.weight", {H})}));
  m.modules.push_back(
      module("lm_head", {spec::vocab_parallel("lm_head.weight", "lm_head.weight", {s.vocab, H}, l, attn)}));
  spec::place_stages(m, s.layers, "model.embedding", "model.norm", false, l, rules.layers);
  return m;
}

void register_gpt_oss(wmap::PluginRegistrar& registrar) { registrar.set_model_builder(build_gpt_oss); }

}  // namespace

WMAP_DEFINE_PLUGIN("gpt_oss", "1.0", register_gpt_oss, ("trtllm", "vllm"), "GptOssForCausalLM")
