// DeepSeek-V3 / R1 (DeepseekV3ForCausalLM), BF16 or FP8 with block scales: MLA attention
// (the fused A projection, q_b_proj or q_proj, kv_b_proj), dense layers below
// first_k_dense_replace, MoE layers (router, shared experts, routed experts), and MTP layers:
// model layer L+k reads checkpoint layer L + k % num_nextn_predict_layers (`--mtp-layers K`;
// K = 0 declares the MTP tensors skipped).
//
// Both targets (DESIGN.md "Targets"); what differs between them is in TargetRules below, in one
// place: TensorRT-LLM (tensorrt_llm/_torch/models/modeling_deepseekv3.py) replicates
// embed_tokens, splits kv_b_proj into k_b_proj_trans / v_b_proj, splits the dense MLP and the
// shared experts over a gcd of the ranks, and loads MTP layers; vLLM
// (vllm/model_executor/models/deepseek_v2.py) splits everything exactly over tp_size, pads the
// vocabulary, keeps kv_b_proj whole per head and loads no MTP layer. Attention data parallelism
// (TensorRT-LLM's enable_attention_dp) replicates all but the routed experts.
//
// DeepSeek-V3.2 (DeepseekV32ForCausalLM) is V3 with F32 RMSNorm weights in the checkpoint (both
// engines hold BF16: round to nearest even) and a lightning indexer in every layer (MTP
// included): wq_b (FP8) replicated; vLLM fuses wk (dequantized to BF16) and weights_proj into
// `indexer.wk_weights_proj` (deepseek_v2.py @002d6073, PR #38684: the newest layout, followed
// here); TensorRT-LLM holds wk in F32 dequantized with its block scale, as its fix (PR #18665) for
// issue #18658 does (releases with the bug copy the FP8 codes without the scale), and
// weights_proj in F32 (docs/families/glm-dsv32-phi3-kimi.md section 2).
//
// GLM-4.5 / 4.6 / 4.5-Air (Glm4MoeForCausalLM) is this family's MoE, dense layers, shared experts
// and MTP layers with Llama-style attention (q/k/v biases fused, optional q/k norms, head_dim from
// the config): TensorRT-LLM's modeling_glm.py builds it from DeepSeek-V3's gate, MoE and MTP;
// vLLM's glm4_moe.py keeps its router in F32 and always has e_score_correction_bias
// (docs/families/glm-dsv32-phi3-kimi.md section 1).

#include <algorithm>
#include <optional>
#include <span>
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
  const char* fused_a;       // concat(q_a_proj, kv_a_proj_with_mqa): the MLA module's name for it
  const char* scale;         // FP8 block scales of a linear: `<linear>.<scale>`
  const char* expert_scale;  // ... of the stacked routed experts: `<w3_w1|w13>_<expert_scale>`
  spec::ExpertNames experts;
  const char* experts_module;      // after "mlp."
  bool replicated_embedding;       // embed_tokens whole on every rank (else vocabulary-parallel)
  bool split_kv_b;                 // kv_b_proj also as k_b_proj_trans [Hl, R, nope] and v_b_proj [Hl, v, R]
  bool gcd_mlp_split;              // dense MLP and shared experts over gcd(width/block, tp_size) ranks
  bool loads_mtp;                  // MTP layers are parameters (else declared skipped)
  bool score_bias_needs_noaux_tc;  // mlp.gate.e_score_correction_bias only when topk_method is noaux_tc
  bool whole_fp8_blocks;           // FP8 partitions must be whole blocks (LinearQuant::whole_blocks)
  bool glm_router_f32;             // GLM's mlp.gate.weight held in F32
  // FP8 kv_b_proj dequantised to BF16 (kv_b_proj.weight, k_b_proj_trans, v_b_proj, no scales):
  // current TensorRT-LLM excludes *kv_b_proj* from FP8 for every HF block-FP8 checkpoint.
  bool dequant_kv_b;
};

const TargetRules& rules_for(wmap::Target t) {
  // TensorRT-LLM: MLA keeps `kv_a_proj_with_mqa` for the fused A projection (older releases
  // called it `fused_a`); FP8 block-scale linears hold `weight_scale`, the fused MoE
  // `w3_w1_weight_scaling_factor`. vLLM: `fused_qkv_a_proj`, scales keep `weight_scale_inv`,
  // FusedMoE `experts.w13_weight` = [gate; up].
  static const TargetRules kTrtllm{
      .fused_a = "kv_a_proj_with_mqa",
      .scale = "weight_scale",
      .expert_scale = "weight_scaling_factor",
      .experts = {.fused = "w3_w1", .down = "w2", .gate_first = false, .globals_close = true},
      .experts_module = "experts.backend",
      .replicated_embedding = true,
      .split_kv_b = true,
      .gcd_mlp_split = true,
      .loads_mtp = true,
      .score_bias_needs_noaux_tc = false,
      .whole_fp8_blocks = false,
      .glm_router_f32 = false,
      .dequant_kv_b = true,
  };
  static const TargetRules kVllm{
      .fused_a = "fused_qkv_a_proj",
      .scale = "weight_scale_inv",
      .expert_scale = "weight_scale_inv",
      .experts = {.fused = "w13", .down = "w2", .gate_first = true, .globals_close = false},
      .experts_module = "experts",
      .replicated_embedding = false,
      .split_kv_b = false,
      .gcd_mlp_split = false,
      .loads_mtp = false,
      .score_bias_needs_noaux_tc = true,
      .whole_fp8_blocks = true,
      .glm_router_f32 = true,
      .dequant_kv_b = false,
  };
  return t == wmap::Target::kVllm ? kVllm : kTrtllm;
}

struct DeepseekShape {
  uint64_t hidden, heads, layers, vocab, intermediate;
  std::optional<uint64_t> q_lora;
  uint64_t kv_lora = 0, nope = 0, rope = 0, v = 0;  // MLA (DeepSeek)
  // GLM-4.5: Llama-style attention instead of MLA.
  bool glm = false, attention_bias = false, qk_norm = false;
  // DeepSeek-V3.2: F32 norms held as BF16, and the indexer.
  bool v32 = false;
  uint64_t index_heads = 0, index_head_dim = 0;
  uint64_t kv_heads = 0, head_dim = 0;
  uint64_t experts = 0, moe_intermediate = 0, shared_experts = 0, first_dense = 0, moe_freq = 1;
  uint64_t mtp_in_checkpoint = 0, mtp = 0;
  bool tie = false;
  bool noaux_tc = false;  // config topk_method
  std::optional<spec::BlockScales> fp8;
  bool nvfp4 = false;  // an NVFP4 checkpoint (some linears may be excluded)
  // What the core's spec::linear_quant asks about each linear (its format and scale).
  const ModelConfig* config = nullptr;
  const wmap::KeyProbe* probe = nullptr;

  bool is_moe(uint64_t layer) const { return experts > 0 && layer >= first_dense && layer % moe_freq == 0; }
  // The checkpoint's routed-experts module of `layer`, nullopt when the layer is dense: the one
  // place the key pattern is written (bounds and modules both use it).
  std::optional<std::string> experts_of(uint64_t layer) const {
    if (!is_moe(layer)) return std::nullopt;
    return "model.layers." + std::to_string(layer) + ".mlp.experts";
  }
};

// The rows of one quantisation block TensorRT-LLM's gcd split keeps whole: the FP8 block's, 16
// values for NVFP4 (trtllm-semantics-notes, int4-nvfp4.md 6.5), 1 otherwise.
uint64_t split_block(const DeepseekShape& s) { return s.fp8 ? s.fp8->rows : s.nvfp4 ? 16 : 1; }

// Every count and size is bounded by the checkpoint (ConfigBounds) before anything loops over it.
DeepseekShape read_shape(const ModelConfig& c, const Layout& l, const wmap::KeyProbe& probe) {
  DeepseekShape s{};
  const wmap::ConfigBounds bounds(c, probe);
  s.layers = bounds.count("num_hidden_layers", "model.layers.", "layer");
  s.hidden = bounds.dim("hidden_size");
  s.heads = c.require_positive("num_attention_heads");
  s.vocab = bounds.dim("vocab_size");
  s.intermediate = c.require_positive("intermediate_size");
  s.glm = c.architecture() == "Glm4MoeForCausalLM";
  s.v32 = c.architecture() == "DeepseekV32ForCausalLM";
  if (s.v32) {
    s.index_heads = c.require_positive("index_n_heads");
    s.index_head_dim = bounds.dim("index_head_dim");
    bounds.dim("index_n_heads * index_head_dim",
               bounds.mul(s.index_heads, s.index_head_dim, "index_n_heads * index_head_dim"));
    if (c.get_non_negative("index_topk_freq", 1) != 1) {
      c.fail("index_topk_freq",
             "indexers on only some layers (IndexCache) are not served: DeepSeek-V3.2 has one in every layer");
    }
  }
  if (s.glm) {
    // GLM FP8 checkpoints (zai-org/GLM-4.5-FP8) have not been read: their scales would be lost.
    if (c.has("quantization_config")) {
      c.fail("quantization_config", "quantised Glm4MoeForCausalLM checkpoints (quant_method '" +
                                        c.get_string("quantization_config.quant_method", "?") +
                                        "') are not served: their layout has not been read");
    }
    s.kv_heads = c.has("num_key_value_heads") ? c.require_positive("num_key_value_heads") : s.heads;
    s.head_dim = c.has("head_dim") ? c.require_positive("head_dim") : s.hidden / s.heads;
    s.attention_bias = c.get_bool("attention_bias", false);
    s.qk_norm = c.get_bool("use_qk_norm", false);
    bounds.dim("num_attention_heads * head_dim", bounds.mul(s.heads, s.head_dim, "num_attention_heads * head_dim"));
    bounds.dim("num_key_value_heads * head_dim", bounds.mul(s.kv_heads, s.head_dim, "num_key_value_heads * head_dim"));
    if (s.heads % s.kv_heads != 0) {
      c.fail("num_key_value_heads",
             std::to_string(s.kv_heads) + " does not divide num_attention_heads " + std::to_string(s.heads));
    }
    if (!l.attention_dp) {
      if (auto e = l.kv_heads_error(s.kv_heads)) c.fail("num_key_value_heads", *e);
    }
  } else {
    if (c.has("q_lora_rank")) s.q_lora = bounds.dim("q_lora_rank");
    s.kv_lora = bounds.dim("kv_lora_rank");
    s.nope = c.require_positive("qk_nope_head_dim");
    s.rope = c.require_positive("qk_rope_head_dim");
    s.v = c.require_positive("v_head_dim");
    // q_b_proj's (or q_proj's) rows, o_proj's columns, kv_b_proj's rows, kv_a_proj_with_mqa's rows.
    bounds.dim("num_attention_heads * (qk_nope_head_dim + qk_rope_head_dim)",
               bounds.mul(s.heads, s.nope + s.rope, "num_attention_heads * (qk_nope_head_dim + qk_rope_head_dim)"));
    bounds.dim("num_attention_heads * v_head_dim", bounds.mul(s.heads, s.v, "num_attention_heads * v_head_dim"));
    bounds.dim("num_attention_heads * (qk_nope_head_dim + v_head_dim)",
               bounds.mul(s.heads, s.nope + s.v, "num_attention_heads * (qk_nope_head_dim + v_head_dim)"));
    bounds.dim("kv_lora_rank + qk_rope_head_dim", s.kv_lora + s.rope);
  }
  if (c.has("n_routed_experts")) {
    s.experts = c.require_positive("n_routed_experts");
    s.moe_intermediate = c.require_positive("moe_intermediate_size");
    s.shared_experts = c.get_non_negative("n_shared_experts", 0);
    s.first_dense = c.get_non_negative("first_k_dense_replace", 0);
    s.moe_freq = c.get_non_negative("moe_layer_freq", 1);
    if (s.moe_freq == 0) c.fail("moe_layer_freq", "must be at least 1");
    if (auto e = l.experts_error(s.experts)) c.fail("n_routed_experts", *e);
  }
  s.tie = c.get_bool("tie_word_embeddings", false);
  s.noaux_tc = c.get_string("topk_method", "") == "noaux_tc";
  // MTP layers follow the model's layers; the checkpoint may have dropped them, but cannot
  // declare more of them than it holds layers.
  s.mtp_in_checkpoint = c.get_non_negative("num_nextn_predict_layers", 0);
  if (s.mtp_in_checkpoint > 0) {
    const std::string layers = "model.layers.";
    bounds.count("num_nextn_predict_layers", s.mtp_in_checkpoint, std::span<const std::string>(&layers, 1), "layer");
  }
  s.mtp = l.mtp_layers ? *l.mtp_layers : rules_for(l.target).loads_mtp ? s.mtp_in_checkpoint : 0;
  if (s.mtp > 0 && s.mtp_in_checkpoint == 0) {
    c.fail("num_nextn_predict_layers", "is 0, but mtp_layers " + std::to_string(s.mtp) + " asks for MTP layers");
  }
  // The layers this spec may build (MTP layers read checkpoint layers layers..layers+mtp-1): only
  // the sizes they use are dimensions of checkpoint tensors.
  const uint64_t built = s.layers + std::min(s.mtp, s.mtp_in_checkpoint);
  const auto moe_layers = spec::moe_expert_prefixes(built, [&s](uint64_t i) { return s.experts_of(i); });
  if (moe_layers.size() < built) bounds.dim("intermediate_size", s.intermediate);
  if (!moe_layers.empty()) {
    bounds.count("n_routed_experts", s.experts, moe_layers, "expert");
    bounds.dim("moe_intermediate_size", s.moe_intermediate);
    if (s.shared_experts) {
      bounds.dim("moe_intermediate_size * n_shared_experts",
                 bounds.mul(s.moe_intermediate, s.shared_experts, "moe_intermediate_size * n_shared_experts"));
    }
  }
  if (auto e = l.heads_error(s.heads)) c.fail("num_attention_heads", *e);
  // Block FP8 (fp8.md) and NVFP4 (int4-nvfp4.md 6.5: nvidia/DeepSeek-R1-FP4, whose attention and
  // MTP layers its exclude_modules leaves BF16) have been read for the MLA family.
  s.fp8 = spec::fp8_block_scales(c);
  s.nvfp4 = spec::nvfp4_checkpoint(c);
  if (s.nvfp4 && c.get_string("quantization_config.quant_method", "") != "modelopt") {
    c.fail("quantization_config",
           "compressed-tensors NVFP4 DeepSeek checkpoints are not served (ModelOpt's "
           "nvidia/DeepSeek-R1-FP4 layout is)");
  }
  if (s.nvfp4 && s.v32) {
    c.fail("quantization_config",
           "NVFP4 DeepSeek-V3.2 checkpoints are not served (the indexer's quantised layout "
           "was not read)");
  }
  if (c.has("quantization_config") && !s.fp8 && !s.nvfp4) {
    c.fail("quantization_config",
           "quantised " + c.architecture() + " checkpoints other than block FP8 and NVFP4 (quant_method '" +
               c.get_string("quantization_config.quant_method", "?") + "' here) are not served yet");
  }
  s.config = &c;
  s.probe = &probe;
  if (s.fp8) {
    if (!s.glm && (s.nope % s.fp8->rows || s.v % s.fp8->rows || s.kv_lora % s.fp8->cols)) {
      c.fail("quantization_config.weight_block_size",
             "qk_nope_head_dim, v_head_dim and kv_lora_rank must be multiples of the block");
    }
  }
  if (rules_for(l.target).gcd_mlp_split) {
    // TensorRT-LLM asserts this of the widths it splits by whole blocks (16 values for NVFP4).
    const uint64_t b = split_block(s);
    if (s.intermediate % b)
      c.fail("intermediate_size",
             std::to_string(s.intermediate) + " is not a multiple of the " + std::to_string(b) + "-row FP8 block");
    const uint64_t shared =
        bounds.mul(s.moe_intermediate, s.shared_experts, "moe_intermediate_size * n_shared_experts");
    if (s.experts && shared % b) {
      c.fail("moe_intermediate_size", "the shared experts' width " + std::to_string(shared) +
                                          " is not a multiple of the " + std::to_string(b) + "-row FP8 block");
    }
  }
  if (s.tie && rules_for(l.target).replicated_embedding && !l.attention_dp && l.tp_size > 1) {
    c.fail("tie_word_embeddings",
           "a tied lm_head cannot share TensorRT-LLM's replicated embed_tokens while lm_head is split over tp_size " +
               std::to_string(l.tp_size));
  }
  return s;
}

ModuleSpec module(std::string name, std::vector<ParamSpec> params) { return {std::move(name), std::move(params), {}}; }

// The quantisation of a linear under target `t`, its scales named `scale_name`.
// The quantisation of checkpoint linear `linear`, as the core's building block makes it (block
// FP8 scales named per target; TensorRT-LLM's DeepSeek loader takes every touched block).
spec::LinearQuant quant(const DeepseekShape& s, const Layout& l, const std::string& linear, spec::LinearRole role) {
  return spec::linear_quant(*s.config, l, *s.probe, linear, role, true, rules_for(l.target).whole_fp8_blocks);
}

// A linear's parameters under `dst` (dst.weight and its FP8 or NVFP4 companions). Slices are in
// the weight's logical [out, in] units; an NVFP4 weight stores two values a byte.
std::vector<ParamSpec> linear(const std::string& dst, std::vector<spec::LinearSlice> slices, const DeepseekShape& s,
                              const Layout& l) {
  std::vector<ParamSpec> out;
  const spec::LinearQuant q = quant(s, l, slices.at(0).linear, spec::LinearRole::kDense);
  for (spec::LinearSlice& sl : slices) {
    sl.shape[1] = q.stored_cols(sl.shape[1]);
    sl.cols = {q.stored_cols(sl.cols.begin), q.stored_cols(sl.cols.end)};
  }
  spec::add_linear(out, dst, ".", slices, q);
  return out;
}

// TensorRT-LLM's kv_b_proj: [H*(nope+v), R] viewed [H, nope+v, R]; this rank's heads split into
// k_nope and v (MLA's k_b_proj_trans / v_b_proj), and the weight keeps [k_nope rows; v rows].
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
    if (rules_for(l.target).dequant_kv_b) {
      // Current TensorRT-LLM: load_hf_quant_config always excludes *kv_b_proj* from FP8 for HF
      // block-FP8 checkpoints (model_config.py @008e0af8), so MLA creates BF16 kv_b_proj,
      // k_b_proj_trans and v_b_proj without scales, and DeepseekV3WeightLoader.load_weights
      // (modeling_deepseekv3.py @a43cf9e3, load_kv_b_proj_and_k_b_proj_trans_dequant) fills them
      // from weight_dequant(w, s) = bf16(f32(w) x s) of the whole kv_b_proj, then the same head
      // split. Each part's scale rows come with it (nope, v and R are multiples of the block).
      auto dequantized = [&](ParamSpec p, std::vector<wmap::Piece> scales, uint64_t rows, uint64_t cols) {
        const uint64_t weight_pieces = p.pieces.size(), scale_pieces = scales.size();
        for (auto& piece : scales) p.pieces.push_back(std::move(piece));
        p.dtype = wmap::DType::kBF16;
        return spec::fp8_block_dequantized(std::move(p), rows, cols, s.fp8->rows, s.fp8->cols, weight_pieces,
                                           scale_pieces);
      };
      out[0] = dequantized(std::move(out[0]),
                           {part(k, sshape, sview, {0, ns}, {}), part(k, sshape, sview, {ns, ns + vs}, {})}, hl * rows,
                           s.kv_lora);
      out[1] = dequantized(std::move(out[1]), {part(k, sshape, sview, {0, ns}, {0, 2, 1})}, hl * s.kv_lora, s.nope);
      out[2] = dequantized(std::move(out[2]), {part(k, sshape, sview, {ns, ns + vs}, {})}, hl * s.v, s.kv_lora);
      return out;
    }
    scale(d + "kv_b_proj." + rules_for(l.target).scale, {hl * (ns + vs), rs},
          {part(k, sshape, sview, {0, ns}, {}), part(k, sshape, sview, {ns, ns + vs}, {})});
    scale(d + "k_b_proj_trans_scale", {hl, rs, ns}, {part(k, sshape, sview, {0, ns}, {0, 2, 1})});
    scale(d + "v_b_proj_scale", {hl, vs, rs}, {part(k, sshape, sview, {ns, ns + vs}, {})});
    for (size_t i = 0; i < 3; ++i) out[i].scales = {out[3 + i].name};  // each FP8 weight and its scales
  }
  return out;
}

// Llama-style gated MLP over split `sp`: gate_up_proj = concat(gate rows, up rows); down_proj row-parallel.
void gated_mlp(std::vector<ModuleSpec>& modules, const std::string& dst, const std::string& src, uint64_t inter,
               const wmap::Split& sp, const DeepseekShape& s, const Layout& l) {
  const uint64_t h = s.hidden;
  modules.push_back(module(dst + ".gate_up_proj", linear(dst + ".gate_up_proj",
                                                         {spec::linear_rows(src + ".gate_proj", {inter, h}, sp),
                                                          spec::linear_rows(src + ".up_proj", {inter, h}, sp)},
                                                         s, l)));
  modules.push_back(module(dst + ".down_proj",
                           linear(dst + ".down_proj", {spec::linear_cols(src + ".down_proj", {h, inter}, sp)}, s, l)));
}

// How a dense MLP (node_cap) or the shared experts of `width` rows are split on this rank.
wmap::Split mlp_split(uint64_t width, bool node_cap, const DeepseekShape& s, const Layout& l) {
  if (l.attention_dp || !rules_for(l.target).gcd_mlp_split) return l.attention();
  return l.gcd_split(width / split_block(s), node_cap);
}

// An RMSNorm weight: replicated; DeepSeek-V3.2's are F32 in the checkpoint and BF16 in both
// engines (RMSNorm in the model dtype, filled by copy_: round to nearest even).
ParamSpec norm(const std::string& dst, const std::string& src, uint64_t width, const DeepseekShape& s) {
  ParamSpec p = spec::replicated(dst, src, {width});
  return s.v32 ? spec::narrowed_to_bf16(std::move(p)) : p;
}

// DeepSeek-V3.2's lightning indexer of one layer (replicated under every layout).
void indexer(ModelSpec& m, const std::string& da, const std::string& ca, const DeepseekShape& s, const Layout& l) {
  const std::string d = da + "indexer.", c = ca + "indexer.";
  const uint64_t h = s.hidden, dim = s.index_head_dim, heads = s.index_heads;
  m.modules.push_back(module(
      d + "wq_b", linear(d + "wq_b", {spec::whole_linear(c + "wq_b", {heads * dim, s.q_lora.value_or(h)})}, s, l)));
  std::vector<Piece> wk{spec::whole(c + "wk.weight", {dim, h})};
  if (s.fp8) {
    wk.push_back(
        spec::whole(c + "wk.weight_scale_inv", {wmap::ceil_div(dim, s.fp8->rows), wmap::ceil_div(h, s.fp8->cols)}));
  }
  const Piece proj = spec::whole(c + "weights_proj.weight", {heads, h});
  auto dequantized = [&](ParamSpec p) {
    return s.fp8 ? spec::fp8_block_dequantized(std::move(p), dim, h, s.fp8->rows, s.fp8->cols) : p;
  };
  if (l.target == wmap::Target::kVllm) {
    // deepseek_v2.py Indexer: MergedColumnParallelLinear([dim, heads], disable_tp) in BF16, wk
    // dequantized (_try_load_fp8_indexer_wk: scaled_dequantize, then the model dtype).
    ParamSpec p;
    p.name = d + "wk_weights_proj.weight";
    p.shape = {dim + heads, h};
    p.dtype = wmap::DType::kBF16;
    p.pieces = wk;
    p.pieces.push_back(proj);
    p.pieces.back().source_dtype = wmap::DType::kBF16;
    m.modules.push_back(module(d + "wk_weights_proj", {dequantized(std::move(p))}));
  } else {
    // TensorRT-LLM indexer.py: wk = Linear(dtype=float32); weights_proj F32 (PR #9243).
    ParamSpec p;
    p.name = d + "wk.weight";
    p.shape = {dim, h};
    p.dtype = wmap::DType::kF32;
    p.pieces = wk;
    if (!s.fp8) p.pieces[0] = spec::widened_bf16_to_f32(p.pieces[0]);
    m.modules.push_back(module(d + "wk", {dequantized(std::move(p))}));
    ParamSpec w;
    w.name = d + "weights_proj.weight";
    w.shape = {heads, h};
    w.dtype = wmap::DType::kF32;
    w.pieces = {spec::widened_bf16_to_f32(proj)};
    m.modules.push_back(module(d + "weights_proj", {std::move(w)}));
  }
  // A LayerNorm with a bias: F32 in the checkpoint and in vLLM (layernorm.py LayerNorm); kept F32
  // under TensorRT-LLM too (its dtype there has not been read).
  m.modules.push_back(module(d + "k_norm", {spec::replicated(d + "k_norm.weight", c + "k_norm.weight", {dim}),
                                            spec::replicated(d + "k_norm.bias", c + "k_norm.bias", {dim})}));
}

// DeepSeek's multi-head latent attention.
void mla_attention(ModelSpec& m, const std::string& da, const std::string& ca, const DeepseekShape& s,
                   const Layout& l) {
  const uint64_t h = s.hidden, qk = s.nope + s.rope;
  const TargetRules& rules = rules_for(l.target);
  const wmap::Split attn = l.attention();
  auto rep = [&](const std::string& name, std::vector<uint64_t> shape) {
    m.modules.push_back(module(da + name, {norm(da + name + ".weight", ca + name + ".weight", shape.at(0), s)}));
  };
  // Kimi K2 checkpoints carry each layer's rotary inv_freq; no engine loads it (vLLM
  // deepseek_v2.py load_weights: `if "rotary_emb.inv_freq" in name: continue`; TensorRT-LLM loads
  // by module and has none). Absent in DeepSeek-V3's own checkpoints: a skip of nothing.
  m.skipped_keys.push_back(ca + "rotary_emb.inv_freq");
  if (s.q_lora) {
    m.modules.push_back(
        module(da + rules.fused_a, linear(da + rules.fused_a,
                                          {spec::whole_linear(ca + "q_a_proj", {*s.q_lora, h}),
                                           spec::whole_linear(ca + "kv_a_proj_with_mqa", {s.kv_lora + s.rope, h})},
                                          s, l)));
    rep("q_a_layernorm", {*s.q_lora});
    const std::vector<uint64_t> qb{s.heads * qk, *s.q_lora};
    m.modules.push_back(
        module(da + "q_b_proj", linear(da + "q_b_proj", {spec::linear_rows(ca + "q_b_proj", qb, attn)}, s, l)));
  } else {
    // V2-Lite style: no q LoRA; kv_a_proj_with_mqa alone is the replicated down-projection.
    const std::vector<uint64_t> q{s.heads * qk, h};
    m.modules.push_back(
        module(da + "q_proj", linear(da + "q_proj", {spec::linear_rows(ca + "q_proj", q, attn)}, s, l)));
    m.modules.push_back(module(da + "kv_a_proj_with_mqa",
                               linear(da + "kv_a_proj_with_mqa",
                                      {spec::whole_linear(ca + "kv_a_proj_with_mqa", {s.kv_lora + s.rope, h})}, s, l)));
  }
  rep("kv_a_layernorm", {s.kv_lora});
  if (rules.split_kv_b) {
    if (quant(s, l, ca + "kv_b_proj", spec::LinearRole::kDense).kind == spec::LinearQuant::Kind::kNvfp4) {
      s.config->fail("quantization_config", ca + "kv_b_proj: an NVFP4 kv_b_proj is not served under TensorRT-LLM "
                                                 "(its MLA split of FP4 codes and block scales was not read; "
                                                 "nvidia's R1-FP4 exports leave attention BF16)");
    }
    m.modules.push_back(module(da + "kv_b_proj", kv_b(da, ca + "kv_b_proj", s, l)));
  } else {
    // vLLM: column-parallel by rows, each head's [nope; v] rows kept as in the checkpoint.
    const std::vector<uint64_t> kvb{s.heads * (s.nope + s.v), s.kv_lora};
    m.modules.push_back(
        module(da + "kv_b_proj", linear(da + "kv_b_proj", {spec::linear_rows(ca + "kv_b_proj", kvb, attn)}, s, l)));
  }
  const std::vector<uint64_t> o{h, s.heads * s.v};
  m.modules.push_back(module(da + "o_proj", linear(da + "o_proj", {spec::linear_cols(ca + "o_proj", o, attn)}, s, l)));
  if (s.v32) indexer(m, da, ca, s, l);
}

// GLM-4.5's attention: Llama's fused qkv_proj (biases head-wise, KV heads duplicated when fewer
// than the ranks: modeling_glm.py Glm4WeightLoader duplicate_kv_weight on weight and bias, vLLM
// QKVParallelLinear), q/k norms when use_qk_norm, o_proj row-parallel without a bias. Attention-DP
// replicates it.
void glm_attention(ModelSpec& m, const std::string& da, const std::string& ca, const DeepseekShape& s,
                   const Layout& l) {
  const uint64_t h = s.hidden, q_rows = s.heads * s.head_dim, kv_rows = s.kv_heads * s.head_dim;
  const wmap::Split attn = l.attention();
  const Range kv_heads = l.attention_dp ? Range{0, s.kv_heads} : l.local_kv_heads(s.kv_heads);
  const Range kv{kv_heads.begin * s.head_dim, kv_heads.end * s.head_dim};
  std::vector<ParamSpec> qkv =
      linear(da + "qkv_proj",
             {spec::linear_rows(ca + "q_proj", {q_rows, h}, attn), spec::linear_rows(ca + "k_proj", {kv_rows, h}, kv),
              spec::linear_rows(ca + "v_proj", {kv_rows, h}, kv)},
             s, l);
  if (s.attention_bias) {
    const Range q = attn.slice(q_rows, ca + "q_proj.bias");
    ParamSpec b;
    b.name = da + "qkv_proj.bias";
    b.shape = {q.size() + 2 * kv.size()};
    b.pieces = {spec::rows(ca + "q_proj.bias", {q_rows}, q), spec::rows(ca + "k_proj.bias", {kv_rows}, kv),
                spec::rows(ca + "v_proj.bias", {kv_rows}, kv)};
    qkv.push_back(std::move(b));
  }
  m.modules.push_back(module(da + "qkv_proj", std::move(qkv)));
  if (s.qk_norm) {
    for (const char* n : {"q_norm", "k_norm"}) {
      m.modules.push_back(module(da + n, {spec::replicated(da + n + ".weight", ca + n + ".weight", {s.head_dim})}));
    }
  }
  m.modules.push_back(
      module(da + "o_proj", linear(da + "o_proj", {spec::linear_cols(ca + "o_proj", {h, q_rows}, attn)}, s, l)));
}

// A layer's MLP: dense below first_k_dense_replace, else router, shared and routed experts.
void add_mlp(ModelSpec& m, const std::string& d, const std::string& c, uint64_t src_i, const DeepseekShape& s,
             const Layout& l) {
  const uint64_t h = s.hidden;
  const TargetRules& rules = rules_for(l.target);
  const std::optional<std::string> source = s.experts_of(src_i);
  if (!source) {
    gated_mlp(m.modules, d + "mlp", c + "mlp", s.intermediate, mlp_split(s.intermediate, true, s, l), s, l);
    return;
  }
  std::vector<ParamSpec> gate{spec::replicated(d + "mlp.gate.weight", c + "mlp.gate.weight", {s.experts, h})};
  if (s.glm && rules.glm_router_f32) {
    // vLLM glm4_moe.py: nn.Linear(H, E, dtype=float32) filled by default_weight_loader (copy_
    // widens BF16 exactly).
    gate[0].dtype = wmap::DType::kF32;
    gate[0].pieces[0] = spec::widened_bf16_to_f32(gate[0].pieces[0]);
  }
  const std::string score_bias = "mlp.gate.e_score_correction_bias";
  if (rules.score_bias_needs_noaux_tc && !s.noaux_tc && !s.glm) {  // GLM's vLLM gate always has it
    m.skipped_keys.push_back(c + score_bias);
  } else {
    gate.push_back(spec::replicated(d + score_bias, c + score_bias, {s.experts}));
    gate.back().optional = true;  // absent from some V3-style checkpoints
  }
  m.modules.push_back(module(d + "mlp.gate", std::move(gate)));
  if (s.shared_experts) {
    const uint64_t width = s.moe_intermediate * s.shared_experts;  // overflow-checked by read_shape
    gated_mlp(m.modules, d + "mlp.shared_experts", c + "mlp.shared_experts", width, mlp_split(width, false, s, l), s,
              l);
  }
  const std::string experts = d + "mlp." + rules.experts_module;
  m.modules.push_back({experts,
                       spec::moe_experts(experts, *source, s.experts, s.moe_intermediate, h, l,
                                         quant(s, l, *source + ".0.up_proj", spec::LinearRole::kExpert), rules.experts),
                       {*source}});
}

// One decoder layer: model layer `dst_i` from checkpoint layer `src_i`.
void add_layer(ModelSpec& m, uint64_t dst_i, uint64_t src_i, const DeepseekShape& s, const Layout& l) {
  const std::string d = "model.layers." + std::to_string(dst_i) + ".",
                    c = "model.layers." + std::to_string(src_i) + ".";
  const std::string da = d + "self_attn.", ca = c + "self_attn.";
  const uint64_t h = s.hidden;
  auto rep = [&](const std::string& name, std::vector<uint64_t> shape) {
    m.modules.push_back(module(d + name, {norm(d + name + ".weight", c + name + ".weight", shape.at(0), s)}));
  };
  rep("input_layernorm", {h});
  if (s.glm) {
    glm_attention(m, da, ca, s, l);
  } else {
    mla_attention(m, da, ca, s, l);
  }
  rep("post_attention_layernorm", {h});
  add_mlp(m, d, c, src_i, s, l);
}

ModelSpec build_deepseek(const ModelConfig& c, const Layout& l, const wmap::KeyProbe& probe) {
  const DeepseekShape s = read_shape(c, l, probe);
  const TargetRules& rules = rules_for(l.target);
  ModelSpec m;
  m.plugin = "deepseek_v3";
  m.architecture = c.architecture();
  const uint64_t h = s.hidden;
  // lm_head (and vLLM's embed_tokens): split as attention is, so replicated under attention_dp.
  const wmap::Split vocab = l.attention();
  const std::string embed = "model.embed_tokens.weight";
  m.modules.push_back(module(
      "model.embed_tokens", {rules.replicated_embedding ? spec::replicated(embed, embed, {s.vocab, h})
                                                        : spec::vocab_parallel(embed, embed, {s.vocab, h}, l, vocab)}));
  for (uint64_t i = 0; i < s.layers; ++i) add_layer(m, i, i, s, l);
  for (uint64_t k = 0; k < s.mtp; ++k) {
    const uint64_t dst = s.layers + k, src = s.layers + k % s.mtp_in_checkpoint;
    const std::string d = "model.layers." + std::to_string(dst) + ".", c2 = "model.layers." + std::to_string(src) + ".";
    // An MTP layer uses the model's embed_tokens and lm_head: its own copies are not parameters.
    m.skipped_keys.push_back(c2 + "embed_tokens.weight");
    m.skipped_keys.push_back(c2 + "shared_head.head.weight");
    m.modules.push_back(module(d + "enorm", {norm(d + "enorm.weight", c2 + "enorm.weight", h, s)}));
    m.modules.push_back(module(d + "hnorm", {norm(d + "hnorm.weight", c2 + "hnorm.weight", h, s)}));
    // eh_proj stays BF16 in FP8 checkpoints (no weight_scale_inv); row-parallel in TensorRT-LLM's MTP.
    m.modules.push_back(module(
        d + "eh_proj", {spec::row_parallel(d + "eh_proj.weight", c2 + "eh_proj.weight", {h, 2 * h}, l.attention())}));
    m.modules.push_back(
        module(d + "shared_head.norm", {norm(d + "shared_head.norm.weight", c2 + "shared_head.norm.weight", h, s)}));
    add_layer(m, dst, src, s, l);
  }
  if (s.mtp == 0) {
    for (uint64_t k = 0; k < s.mtp_in_checkpoint; ++k)
      m.skipped_prefixes.push_back("model.layers." + std::to_string(s.layers + k));
  }
  m.modules.push_back(module("model.norm", {norm("model.norm.weight", "model.norm.weight", h, s)}));
  spec::add_lm_head(m, embed, s.vocab, h, s.tie, l, vocab);
  // MTP layers (model.layers.{L+k}) sit on the last stage, after the decoder stack (PipelineSpec).
  spec::place_stages(m, s.layers, "model.embed_tokens", "model.norm", s.tie, l);
  return m;
}

void register_deepseek(wmap::PluginRegistrar& registrar) { registrar.set_model_builder(build_deepseek); }

}  // namespace

WMAP_DEFINE_PLUGIN("deepseek_v3", "1.3", register_deepseek, ("trtllm", "vllm"), "DeepseekV3ForCausalLM",
                   "DeepseekV32ForCausalLM", "Glm4MoeForCausalLM")
