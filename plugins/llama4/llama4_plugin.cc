// Llama 4 text (Llama4ForConditionalGeneration, whose text keys sit under `language_model.` and
// whose vision tower and projector are declared skipped; Llama4ForCausalLM): each rank's
// parameters as each engine's load_weights leaves them (docs/families/llama4-qwen3next.md
// section 1; DESIGN.md "Families beyond Llama and DeepSeek"). Built from the core's building
// blocks: stacked [E, H, 2I] / [E, I, H] experts transposed per expert (a rank reads only its
// experts), the within-head pair permutation of q and k under vllm, GQA KV-head duplication.
// Scout: every layer MoE; Maverick: interleave_moe_layer_step 2, qk-norm off (qk-norm has no
// weight either way).

#include <optional>
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

// What differs between the engines for this family, in one place.
struct TargetRules {
  bool keeps_prefix;    // vLLM keeps `language_model.` (mllama4.py); TensorRT-LLM's mapper strips it
  bool rotary_halves;   // vLLM permute_qk_weight_for_rotary: q/k rows interleaved pairs -> halves
  bool gate_first;      // vLLM w13 = [gate; up]; TensorRT-LLM w3_w1 = [up; gate]
  const char* experts;  // the routed experts' runtime module under feed_forward.
  const char* fused;    // its fused gate/up parameter
};

const TargetRules& rules_for(wmap::Target t) {
  // vLLM llama4.py (Llama4Model.load_moe_expert_weights, Llama4ForCausalLM.load_weights /
  // permute_qk_weight_for_rotary), mllama4.py (language_model. kept), fused_moe weight_loader.
  static const TargetRules kVllm{
      .keeps_prefix = true, .rotary_halves = true, .gate_first = true, .experts = "experts", .fused = "w13_weight"};
  // TensorRT-LLM modeling_llama.py (Llama4MoE, Llama4ForConditionalGeneration.load_weights),
  // llama4_weight_mapper.py (prefix stripped), fused_moe/quantization.py
  // (load_expert_w3_w1_weight: w3 first), ConfigurableMoE `.backend`.
  static const TargetRules kTrtllm{.keeps_prefix = false,
                                   .rotary_halves = false,
                                   .gate_first = false,
                                   .experts = "experts.backend",
                                   .fused = "w3_w1_weight"};
  return t == wmap::Target::kVllm ? kVllm : kTrtllm;
}

struct Llama4Shape {
  std::string cfg;  // "text_config." for the multimodal config, "" for Llama4ForCausalLM
  std::string src;  // checkpoint prefix: "language_model." or ""
  uint64_t hidden, heads, kv_heads, head_dim, inter, inter_mlp, experts, vocab, layers, step;
  bool is_moe(uint64_t i) const { return step > 0 && (i + 1) % step == 0; }
  std::optional<std::string> experts_of(uint64_t i) const {
    if (!is_moe(i)) return std::nullopt;
    return src + "model.layers." + std::to_string(i) + ".feed_forward.experts";
  }
};

Llama4Shape read_shape(const ModelConfig& c, const Layout& l, const wmap::KeyProbe& probe) {
  Llama4Shape s{};
  const bool multimodal = c.architecture() == "Llama4ForConditionalGeneration";
  s.cfg = multimodal ? "text_config." : "";
  s.src = multimodal ? "language_model." : "";
  const wmap::ConfigBounds b(c, probe);
  auto key = [&](const char* k) { return s.cfg + k; };
  s.layers = b.count(key("num_hidden_layers"), s.src + "model.layers.", "layer");
  s.hidden = b.dim(key("hidden_size"));
  s.heads = c.require_positive(key("num_attention_heads"));
  s.kv_heads = c.require_positive(key("num_key_value_heads"));
  s.head_dim = c.require_positive(key("head_dim"));
  b.dim(key("num_attention_heads") + " * head_dim", b.mul(s.heads, s.head_dim, "num_attention_heads * head_dim"));
  s.vocab = b.dim(key("vocab_size"));
  s.step = static_cast<uint64_t>(c.get_non_negative(key("interleave_moe_layer_step"), 1));
  if (c.get_bool(key("tie_word_embeddings"), false))
    c.fail(key("tie_word_embeddings"), "Llama 4 has an untied lm_head");
  if (!l.moe_backend.empty())
    throw wmap::Error(wmap::ErrorCode::kInvalidArgument,
                      "moe_backend '" + l.moe_backend + "': Llama 4's BF16 experts have one layout per target");
  if (s.head_dim % 2)
    c.fail(key("head_dim"), std::to_string(s.head_dim) + " is odd: rotary pairs need an even head_dim");
  if (s.heads % s.kv_heads)
    c.fail(key("num_key_value_heads"),
           std::to_string(s.kv_heads) + " does not divide num_attention_heads " + std::to_string(s.heads));
  const wmap::Split attn = l.attention();
  if (auto e = attn.count_error(s.heads, "attention heads")) c.fail(key("num_attention_heads"), *e);
  if (!l.attention_dp) {
    if (auto e = l.kv_heads_error(s.kv_heads)) c.fail(key("num_key_value_heads"), *e);
  }
  if (l.mtp_layers.value_or(0) > 0) c.fail(key("num_hidden_layers"), "Llama 4 has no MTP layers");
  const auto moe = spec::moe_expert_prefixes(s.layers, [&s](uint64_t i) { return s.experts_of(i); });
  if (!moe.empty()) {
    s.experts = b.dim(key("num_local_experts"));
    s.inter = b.dim(key("intermediate_size"));
    if (auto e = l.experts_error(s.experts)) c.fail(key("num_local_experts"), *e);
  }
  if (moe.size() < s.layers) s.inter_mlp = b.dim(key("intermediate_size_mlp"));
  return s;
}

ModuleSpec module(std::string name, std::vector<ParamSpec> params, std::vector<std::string> subtrees = {}) {
  return {std::move(name), std::move(params), std::move(subtrees)};
}

// q or k rows of `heads` (of `n` heads of `hd` rows): as stored, or each head's rows reordered
// from interleaved rotary pairs to halves (vLLM).
Piece head_rows(const std::string& key, uint64_t n, uint64_t hd, uint64_t hidden, Range heads, bool halves) {
  if (halves) return spec::pairs_to_halves(key, {n * hd, hidden}, hd, heads);
  return spec::rows(key, {n * hd, hidden}, {heads.begin * hd, heads.end * hd});
}

// A Llama-style gated MLP (shared expert or dense feed-forward): [gate; up] rows and down columns.
void add_gated_mlp(ModelSpec& m, const std::string& dst, const std::string& src, uint64_t inter, uint64_t hidden,
                   const wmap::Split& s) {
  std::vector<ParamSpec> gate_up, down;
  spec::add_linear(gate_up, dst + "gate_up_proj", ".",
                   {spec::linear_rows(src + "gate_proj", {inter, hidden}, s),
                    spec::linear_rows(src + "up_proj", {inter, hidden}, s)},
                   spec::LinearQuant::none());
  spec::add_linear(down, dst + "down_proj", ".", {spec::linear_cols(src + "down_proj", {hidden, inter}, s)},
                   spec::LinearQuant::none());
  m.modules.push_back(module(dst + "gate_up_proj", std::move(gate_up)));
  m.modules.push_back(module(dst + "down_proj", std::move(down)));
}

// Routed experts: per local expert x, the fused [gate; up] (or [up; gate]) rows of
// gate_up_proj[x].T (a transposed slab: each output row is a column of the checkpoint's
// [H, 2I] expert), and down_proj[x].T's columns (one transposed piece over the rank's experts).
std::vector<ParamSpec> routed_experts(const std::string& dst, const std::string& src, const Llama4Shape& s,
                                      const Layout& l, const TargetRules& rules) {
  const uint64_t E = s.experts, H = s.hidden, I = s.inter;
  const Range ex = l.local_experts(E);
  const Range part = l.moe_tp_slice(I, src + ".gate_up_proj");
  // One piece over the rank's experts: the slab viewed [E, H, 2(gate, up), I], each expert's
  // stream dim outermost and its columns transposed to rows; TensorRT-LLM walks the stream dim
  // backwards ([up; gate]). Each expert's slab is read once.
  ParamSpec w13;
  w13.name = dst + "." + rules.fused;
  w13.shape = {ex.size(), 2 * part.size(), H};
  Piece gate_up;
  gate_up.source = src + ".gate_up_proj";
  gate_up.source_shape = {E, H, 2 * I};
  gate_up.view = {E, H, 2, I};
  gate_up.box = {ex, {0, H}, {0, 2}, part};
  gate_up.perm = {0, 2, 3, 1};
  if (!rules.gate_first) gate_up.reverse = {2};
  w13.pieces.push_back(std::move(gate_up));
  ParamSpec w2;
  w2.name = dst + ".w2_weight";
  w2.shape = {ex.size(), H, part.size()};
  Piece down;
  down.source = src + ".down_proj";
  down.source_shape = {E, I, H};
  down.box = {ex, part, {0, H}};
  down.perm = {0, 2, 1};
  w2.pieces.push_back(std::move(down));
  return {std::move(w13), std::move(w2)};
}

ModelSpec build_llama4(const ModelConfig& c, const Layout& l, const wmap::KeyProbe& probe) {
  // Its quantised releases (Maverick FP8: compressed-tensors channel FP8) need building blocks the
  // core does not have yet; refused by name rather than reported as unconsumed scales (issue 40).
  if (c.has("quantization_config")) {
    c.fail("quantization_config", "quantised Llama 4 checkpoints (quant_method '" +
                                      c.get_string("quantization_config.quant_method", "?") + "') are not served yet");
  }
  const Llama4Shape s = read_shape(c, l, probe);
  const TargetRules& rules = rules_for(l.target);
  const wmap::Split attn = l.attention();
  const uint64_t H = s.hidden, hd = s.head_dim, q_rows = s.heads * hd;
  const std::string src = s.src, dst = rules.keeps_prefix ? s.src : "";
  ModelSpec m;
  m.plugin = "llama4";
  m.architecture = c.architecture();
  if (!s.src.empty()) m.skipped_prefixes = {"vision_model", "multi_modal_projector"};
  m.modules.push_back(module(dst + "model.embed_tokens",
                             {spec::vocab_parallel(dst + "model.embed_tokens.weight", src + "model.embed_tokens.weight",
                                                   {s.vocab, H}, l, attn)}));
  const Range heads = attn.items(s.heads, "attention heads");
  // KV heads: split, or one head repeated on several ranks (vLLM QKVParallelLinear, TensorRT-LLM
  // _duplicate_kv); whole under attention-DP.
  const Range kv = l.attention_dp ? Range{0, s.kv_heads} : l.local_kv_heads(s.kv_heads);
  for (uint64_t i = 0; i < s.layers; ++i) {
    const std::string si = src + "model.layers." + std::to_string(i) + ".";
    const std::string di = dst + "model.layers." + std::to_string(i) + ".";
    const std::string sa = si + "self_attn.", da = di + "self_attn.";
    m.modules.push_back(module(di + "input_layernorm",
                               {spec::replicated(di + "input_layernorm.weight", si + "input_layernorm.weight", {H})}));
    ParamSpec qkv;
    qkv.name = da + "qkv_proj.weight";
    qkv.shape = {(heads.size() + 2 * kv.size()) * hd, H};
    qkv.pieces = {head_rows(sa + "q_proj.weight", s.heads, hd, H, heads, rules.rotary_halves),
                  head_rows(sa + "k_proj.weight", s.kv_heads, hd, H, kv, rules.rotary_halves),
                  head_rows(sa + "v_proj.weight", s.kv_heads, hd, H, kv, false)};
    m.modules.push_back(module(da + "qkv_proj", {qkv}));
    ParamSpec o;
    o.name = da + "o_proj.weight";
    o.shape = {H, heads.size() * hd};
    o.pieces = {spec::cols(sa + "o_proj.weight", {H, q_rows}, {heads.begin * hd, heads.end * hd})};
    m.modules.push_back(module(da + "o_proj", {o}));
    m.modules.push_back(module(
        di + "post_attention_layernorm",
        {spec::replicated(di + "post_attention_layernorm.weight", si + "post_attention_layernorm.weight", {H})}));
    const std::string sf = si + "feed_forward.", df = di + "feed_forward.";
    if (const auto experts = s.experts_of(i)) {
      m.modules.push_back(
          module(df + "router", {spec::replicated(df + "router.weight", sf + "router.weight", {s.experts, H})}));
      const std::string de = df + rules.experts;
      m.modules.push_back(module(de, routed_experts(de, *experts, s, l, rules), {*experts}));
      add_gated_mlp(m, df + "shared_expert.", sf + "shared_expert.", s.inter, H, attn);
    } else {
      add_gated_mlp(m, df, sf, s.inter_mlp, H, attn);
    }
  }
  m.modules.push_back(
      module(dst + "model.norm", {spec::replicated(dst + "model.norm.weight", src + "model.norm.weight", {H})}));
  m.modules.push_back(module(
      dst + "lm_head", {spec::vocab_parallel(dst + "lm_head.weight", src + "lm_head.weight", {s.vocab, H}, l, attn)}));
  spec::place_stages(m, s.layers, dst + "model.embed_tokens", dst + "model.norm", false, l, dst + "model.layers.",
                     dst + "lm_head");
  return m;
}

void register_llama4(wmap::PluginRegistrar& registrar) { registrar.set_model_builder(build_llama4); }

}  // namespace

WMAP_DEFINE_PLUGIN("llama4", "1.0", register_llama4, ("trtllm", "vllm"), "Llama4ForConditionalGeneration",
                   "Llama4ForCausalLM")
