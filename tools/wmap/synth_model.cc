#include "synth_model.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "wmap/util/error.h"
#include "wmap/util/progress.h"
#include "wmap/format/safetensors_writer.h"

namespace fs = std::filesystem;

namespace wmap::cli {
namespace {

struct Family {
  const char* name;
  const char* architecture;
  const char* model_type;
  bool qkv_bias;
  bool qk_norm;
  bool default_tie;
  bool moe;
};

constexpr Family kFamilies[] = {
    {"llama", "LlamaForCausalLM", "llama", false, false, false, false},
    {"mistral", "MistralForCausalLM", "mistral", false, false, false, false},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", true, false, false, false},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", false, true, true, false},
    {"qwen3_moe", "Qwen3MoeForCausalLM", "qwen3_moe", false, true, false, true},
    {"mixtral", "MixtralForCausalLM", "mixtral", false, false, false, true},
    {"deepseek_v3", "DeepseekV3ForCausalLM", "deepseek_v3", false, false, false, true},
    {"gpt_oss", "GptOssForCausalLM", "gpt_oss", true, false, false, true},
    {"llama4", "Llama4ForConditionalGeneration", "llama4", false, true, false, true},
    {"llama4_text", "Llama4ForCausalLM", "llama4_text", false, true, false, true},
    {"phi3", "Phi3ForCausalLM", "phi3", false, false, false, false},
    {"kimi_k2", "DeepseekV3ForCausalLM", "kimi_k2", false, false, false, true},
    {"glm4_moe", "Glm4MoeForCausalLM", "glm4_moe", true, false, false, true},
    {"qwen3_next", "Qwen3NextForCausalLM", "qwen3_next", false, true, false, true},
    {"deepseek_v32", "DeepseekV32ForCausalLM", "deepseek_v32", false, false, false, true},
};

// DeepSeek-V3's layout; Kimi K2 is that architecture with its own data (model_type kimi_k2, no
// MTP layer, a rotary_emb.inv_freq tensor in every layer's attention).
// GLM-4.5 is DeepSeek-V3's MoE, dense layers and MTP with Llama-style attention.
bool deepseek_like(const std::string& family) {
  return family == "deepseek_v3" || family == "kimi_k2" || family == "glm4_moe" || family == "deepseek_v32";
}

const Family& family_of(const std::string& name) {
  for (const auto& f : kFamilies) {
    if (name == f.name) return f;
  }
  std::string known;
  for (const auto& f : kFamilies) known += (known.empty() ? "" : ", ") + std::string(f.name);
  throw Error(ErrorCode::kInvalidArgument, "synth: unknown family '" + name + "' (known: " + known + ")");
}

constexpr const char* kPresets[] = {"tiny", "small", "1g", "4g"};

uint64_t fnv1a(std::string_view s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

void fill_random(std::span<std::byte> dst, uint64_t state);

// Random positive normal values in [2^-8, 2) (the range of real block scales), every mantissa bit
// random: F32, BF16 or F16 scale tensors with no NaN, infinity or subnormal among them.
void fill_positive(std::span<std::byte> dst, DType dtype, uint64_t state) {
  fill_random(dst, state);
  if (dtype == DType::kF32) {
    for (size_t k = 0; k + 4 <= dst.size(); k += 4) {
      uint32_t v;
      std::memcpy(&v, dst.data() + k, 4);
      v = ((119u + (v >> 29)) << 23) | (v & 0x7fffffu);  // exponent 119..126
      std::memcpy(dst.data() + k, &v, 4);
    }
    return;
  }
  for (size_t k = 0; k + 2 <= dst.size(); k += 2) {
    uint16_t v;
    std::memcpy(&v, dst.data() + k, 2);
    v = dtype == DType::kBF16 ? static_cast<uint16_t>(((119u + (v >> 13)) << 7) | (v & 0x7fu))   // exponent 119..126
                              : static_cast<uint16_t>(((7u + (v >> 13)) << 10) | (v & 0x3ffu));  // exponent 7..14
    std::memcpy(dst.data() + k, &v, 2);
  }
}

// splitmix64 stream: fast, deterministic per tensor name and seed.
void fill_random(std::span<std::byte> dst, uint64_t state) {
  size_t i = 0;
  auto next = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  for (; i + 8 <= dst.size(); i += 8) {
    const uint64_t v = next();
    std::memcpy(dst.data() + i, &v, 8);
  }
  if (i < dst.size()) {
    const uint64_t v = next();
    std::memcpy(dst.data() + i, &v, dst.size() - i);
  }
}

uint64_t nbytes_of(const SynthTensor& t) {
  uint64_t n = 1;
  for (auto d : t.shape) n *= d;
  return n * dtype_bits(t.dtype) / 8;
}

}  // namespace

void apply_synth_preset(const std::string& preset, SynthConfig& c) {
  if (c.family == "llama4" || c.family == "llama4_text") {
    // tiny: Maverick's shape (interleave_moe_layer_step 2: layer 0 dense, layer 1 MoE); small:
    // Scout's (every layer MoE). 2 KV heads: duplicated at tp 4.
    if (preset == "tiny") {
      c.hidden = 64, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.head_dim = 16, c.intermediate = 48, c.vocab = 100,
      c.experts = 4, c.moe_intermediate = 32, c.moe_step = 2, c.shards = 2;
    } else if (preset == "small") {
      c.hidden = 256, c.layers = 4, c.heads = 8, c.kv_heads = 2, c.head_dim = 32, c.intermediate = 512, c.vocab = 1003,
      c.experts = 8, c.moe_intermediate = 128, c.moe_step = 1, c.shards = 3;
    } else {
      throw Error(ErrorCode::kInvalidArgument, "synth: " + c.family + " has the tiny and small presets");
    }
    return;
  }
  if (c.family == "qwen3_next") {
    // Linear attention: 4 key heads, 8 value heads (2 per group: ρ = 2), dk 8, dv 6, kernel 4;
    // full attention every 2nd layer: 4 heads of 16 (q and its gate interleaved), 2 KV heads
    // (duplicated at 4 ranks); 8 experts of 32, one shared expert of 48.
    if (preset != "tiny") throw Error(ErrorCode::kInvalidArgument, "synth: qwen3_next has only the tiny preset");
    c.hidden = 64, c.layers = 4, c.heads = 4, c.kv_heads = 2, c.head_dim = 16, c.intermediate = 96, c.vocab = 250;
    c.experts = 8, c.moe_intermediate = 32, c.shards = 2;
    return;
  }
  if (c.family == "gpt_oss") {
    // Sizes that make the engines' uneven MXFP4 splits and padding appear: tiny I = 96 is 3
    // groups of 32 (a rank of 4 holds none under vLLM; TensorRT-LLM pads it to 256 at T = 2),
    // H = 64 pads to 128 under TensorRT-LLM. `small` is 15 groups over 8 experts.
    if (preset == "tiny") {
      c.hidden = 64, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.head_dim = 16, c.intermediate = 96, c.vocab = 100,
      c.experts = 4, c.shards = 2;
    } else if (preset == "small") {
      c.hidden = 512, c.layers = 4, c.heads = 8, c.kv_heads = 4, c.head_dim = 64, c.intermediate = 480, c.vocab = 1003,
      c.experts = 8, c.shards = 3;
    } else {
      throw Error(ErrorCode::kInvalidArgument, "synth: gpt_oss has the tiny and small presets");
    }
    c.moe_intermediate = c.intermediate;
    return;
  }
  if (deepseek_like(c.family)) {
    if (preset != "tiny") throw Error(ErrorCode::kInvalidArgument, "synth: " + c.family + " has only the tiny preset");
    // 128-multiples so FP8 128x128 blocks line up as in the real model.
    c.hidden = 128, c.layers = 3, c.heads = 4, c.kv_heads = 4, c.intermediate = 256, c.vocab = 250, c.shards = 3;
    c.experts = 8, c.moe_intermediate = 128;
    if (c.family == "kimi_k2") c.experts = 12, c.mtp = 0;  // 384 = 12 x 32 experts in the real one; no MTP
    if (c.family == "glm4_moe") {
      // GLM-4.5-Air's shape in small: head_dim (24) is not hidden/heads, 2 KV heads (duplicated
      // at 4 ranks), biases, layer 0 dense, one MTP layer.
      c.hidden = 64, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.head_dim = 24, c.intermediate = 96, c.vocab = 250;
      c.experts = 8, c.moe_intermediate = 32, c.shards = 2;
    }
    return;
  }
  if (preset == "tiny") {
    c.hidden = 64, c.layers = 2, c.heads = 8, c.kv_heads = 2, c.head_dim = 8, c.intermediate = 176, c.vocab = 250,
    c.shards = 2;
  } else if (preset == "small") {
    c.hidden = 256, c.layers = 4, c.heads = 8, c.kv_heads = 2, c.head_dim = 32, c.intermediate = 704, c.vocab = 1003,
    c.shards = 3;
  } else if (preset == "1g") {
    c.hidden = 2048, c.layers = 8, c.heads = 16, c.kv_heads = 4, c.head_dim = 128, c.intermediate = 5632,
    c.vocab = 32000, c.shards = 4;
  } else if (preset == "4g") {
    c.hidden = 2048, c.layers = 40, c.heads = 16, c.kv_heads = 4, c.head_dim = 128, c.intermediate = 5632,
    c.vocab = 32000, c.shards = 8;
  } else {
    throw Error(ErrorCode::kInvalidArgument, "synth: unknown preset '" + preset + "' (known: tiny, small, 1g, 4g)");
  }
}

// One linear in the configured format (below).
void add_linear(std::vector<SynthTensor>& out, const SynthConfig& c, const std::string& name, uint64_t rows,
                uint64_t cols, float g);

namespace {

// DeepSeek-V3: MLA attention, dense then MoE layers, MTP layers after the last one.
std::vector<SynthTensor> deepseek_tensors(const SynthConfig& c) {
  const DType d = c.dtype, w = c.fp8 ? DType::kF8_E4M3 : c.dtype;
  // DeepSeek-V3.2 keeps its RMSNorm weights in F32, and an indexer in every layer.
  const bool v32 = c.family == "deepseek_v32";
  const DType nd = v32 ? DType::kF32 : d;
  const uint64_t index_heads = 4, index_dim = 128;
  const uint64_t h = c.hidden;
  std::vector<SynthTensor> out;
  auto lin = [&](const std::string& name, uint64_t rows, uint64_t cols) {
    out.push_back({name + ".weight", {rows, cols}, w});
    if (c.fp8) out.push_back({name + ".weight_scale_inv", {(rows + 127) / 128, (cols + 127) / 128}, DType::kF32});
  };
  // NVFP4 (nvidia/DeepSeek-R1-FP4): the MLPs and experts of the model's layers; attention and the
  // MTP layers stay BF16 (hf_quant_config.json exclude_modules).
  bool fp4_layer = false;
  auto mlp = [&](const std::string& p, uint64_t inter) {
    if (fp4_layer) {
      add_linear(out, c, p + "gate_proj", inter, h, 3.0f);
      add_linear(out, c, p + "up_proj", inter, h, 3.0f);
      add_linear(out, c, p + "down_proj", h, inter, 5.0f);
      return;
    }
    lin(p + "gate_proj", inter, h);
    lin(p + "up_proj", inter, h);
    lin(p + "down_proj", h, inter);
  };
  out.push_back({"model.embed_tokens.weight", {c.vocab, h}, d});
  for (uint64_t i = 0; i < c.layers + c.mtp; ++i) {
    fp4_layer = c.nvfp4 && i < c.layers;
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string a = p + "self_attn.";
    if (i >= c.layers) {
      out.push_back({p + "embed_tokens.weight", {c.vocab, h}, d});
      out.push_back({p + "enorm.weight", {h}, nd});
      out.push_back({p + "hnorm.weight", {h}, nd});
      out.push_back({p + "eh_proj.weight", {h, 2 * h}, d});
      out.push_back({p + "shared_head.norm.weight", {h}, nd});
      out.push_back({p + "shared_head.head.weight", {c.vocab, h}, d});
    }
    out.push_back({p + "input_layernorm.weight", {h}, nd});
    if (c.family == "kimi_k2") out.push_back({a + "rotary_emb.inv_freq", {56}, DType::kBF16});  // as Kimi-K2-Instruct
    if (c.family == "glm4_moe") {  // Llama-style attention with q/k/v biases
      const uint64_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
      for (const auto& [n, rows] : {std::pair{"q_proj", q}, std::pair{"k_proj", kv}, std::pair{"v_proj", kv}}) {
        out.push_back({a + n + ".weight", {rows, h}, d});
        out.push_back({a + n + ".bias", {rows}, d});
      }
      if (c.qk_norm) {
        out.push_back({a + "q_norm.weight", {c.head_dim}, d});
        out.push_back({a + "k_norm.weight", {c.head_dim}, d});
      }
      out.push_back({a + "o_proj.weight", {h, q}, d});
    } else if (c.q_lora) {
      lin(a + "q_a_proj", c.q_lora, h);
      out.push_back({a + "q_a_layernorm.weight", {c.q_lora}, nd});
      lin(a + "q_b_proj", c.heads * (c.nope + c.rope), c.q_lora);
    } else {
      lin(a + "q_proj", c.heads * (c.nope + c.rope), h);
    }
    if (c.family != "glm4_moe") {
      lin(a + "kv_a_proj_with_mqa", c.kv_lora + c.rope, h);
      out.push_back({a + "kv_a_layernorm.weight", {c.kv_lora}, nd});
      lin(a + "kv_b_proj", c.heads * (c.nope + c.v_head), c.kv_lora);
      lin(a + "o_proj", h, c.heads * c.v_head);
    }
    if (v32) {
      lin(a + "indexer.wq_b", index_heads * index_dim, c.q_lora ? c.q_lora : h);
      lin(a + "indexer.wk", index_dim, h);
      out.push_back({a + "indexer.k_norm.weight", {index_dim}, DType::kF32});
      out.push_back({a + "indexer.k_norm.bias", {index_dim}, DType::kF32});
      out.push_back({a + "indexer.weights_proj.weight", {index_heads, h}, d});  // never quantised
    }
    out.push_back({p + "post_attention_layernorm.weight", {h}, nd});
    if (i < c.first_dense) {
      mlp(p + "mlp.", c.intermediate);
      continue;
    }
    out.push_back({p + "mlp.gate.weight", {c.experts, h}, d});
    out.push_back({p + "mlp.gate.e_score_correction_bias", {c.experts}, DType::kF32});
    if (c.shared_experts) mlp(p + "mlp.shared_experts.", c.moe_intermediate * c.shared_experts);
    for (uint64_t j = 0; j < c.experts; ++j) mlp(p + "mlp.experts." + std::to_string(j) + ".", c.moe_intermediate);
  }
  out.push_back({"model.norm.weight", {h}, nd});
  out.push_back({"lm_head.weight", {c.vocab, h}, d});
  return out;
}

// gpt-oss as the Hugging Face MXFP4 checkpoints ship it (docs/families/gpt-oss.md section 1):
// stacked experts with U8 blocks [E, rows, cols/32, 16] and E8M0 scales [E, rows, cols/32],
// gate/up rows interleaved; everything else BF16.
std::vector<SynthTensor> gpt_oss_tensors(const SynthConfig& c) {
  const DType d = DType::kBF16, u8 = DType::kU8;
  const uint64_t h = c.hidden, i = c.intermediate, e = c.experts, q = c.heads * c.head_dim,
                 kv = c.kv_heads * c.head_dim;
  std::vector<SynthTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab, h}, d});
  for (uint64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.", x = p + "mlp.experts.";
    out.push_back({p + "input_layernorm.weight", {h}, d});
    out.push_back({a + "q_proj.weight", {q, h}, d});
    out.push_back({a + "q_proj.bias", {q}, d});
    out.push_back({a + "k_proj.weight", {kv, h}, d});
    out.push_back({a + "k_proj.bias", {kv}, d});
    out.push_back({a + "v_proj.weight", {kv, h}, d});
    out.push_back({a + "v_proj.bias", {kv}, d});
    out.push_back({a + "o_proj.weight", {h, q}, d});
    out.push_back({a + "o_proj.bias", {h}, d});
    out.push_back({a + "sinks", {c.heads}, d});
    out.push_back({p + "post_attention_layernorm.weight", {h}, d});
    out.push_back({p + "mlp.router.weight", {e, h}, d});
    out.push_back({p + "mlp.router.bias", {e}, d});
    out.push_back({x + "gate_up_proj_blocks", {e, 2 * i, h / 32, 16}, u8});
    out.push_back({x + "gate_up_proj_scales", {e, 2 * i, h / 32}, u8});
    out.push_back({x + "gate_up_proj_bias", {e, 2 * i}, d});
    out.push_back({x + "down_proj_blocks", {e, h, i / 32, 16}, u8});
    out.push_back({x + "down_proj_scales", {e, h, i / 32}, u8});
    out.push_back({x + "down_proj_bias", {e, h}, d});
  }
  out.push_back({"model.norm.weight", {h}, d});
  out.push_back({"lm_head.weight", {c.vocab, h}, d});
  return out;
}

// Llama 4 text as transformers saves it (docs/families/llama4-qwen3next.md section 1.1): stacked
// experts [E, H, 2I] / [E, I, H] without `.weight`, a shared expert, dense layers between MoE
// layers; the multimodal variant under `language_model.` with a stub vision tower and projector.
std::vector<SynthTensor> llama4_tensors(const SynthConfig& c) {
  const DType d = DType::kBF16;
  const std::string pre = c.family == "llama4" ? "language_model." : "";
  const uint64_t h = c.hidden, q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim, i = c.moe_intermediate;
  std::vector<SynthTensor> out;
  out.push_back({pre + "model.embed_tokens.weight", {c.vocab, h}, d});
  for (uint64_t l = 0; l < c.layers; ++l) {
    const std::string p = pre + "model.layers." + std::to_string(l) + ".", f = p + "feed_forward.";
    out.push_back({p + "input_layernorm.weight", {h}, d});
    out.push_back({p + "self_attn.q_proj.weight", {q, h}, d});
    out.push_back({p + "self_attn.k_proj.weight", {kv, h}, d});
    out.push_back({p + "self_attn.v_proj.weight", {kv, h}, d});
    out.push_back({p + "self_attn.o_proj.weight", {h, q}, d});
    out.push_back({p + "post_attention_layernorm.weight", {h}, d});
    const bool moe = c.moe_step > 0 && (l + 1) % c.moe_step == 0;
    const uint64_t mi = moe ? i : c.intermediate;
    const std::string mlp = moe ? f + "shared_expert." : f;
    if (moe) {
      out.push_back({f + "router.weight", {c.experts, h}, d});
      out.push_back({f + "experts.gate_up_proj", {c.experts, h, 2 * i}, d});
      out.push_back({f + "experts.down_proj", {c.experts, i, h}, d});
    }
    out.push_back({mlp + "gate_proj.weight", {mi, h}, d});
    out.push_back({mlp + "up_proj.weight", {mi, h}, d});
    out.push_back({mlp + "down_proj.weight", {h, mi}, d});
  }
  out.push_back({pre + "model.norm.weight", {h}, d});
  out.push_back({pre + "lm_head.weight", {c.vocab, h}, d});
  if (!pre.empty()) {
    out.push_back({"vision_model.patch_embedding.linear.weight", {h, 48}, d});
    out.push_back({"vision_model.model.layers.0.mlp.fc1.weight", {2 * h, h}, d});
    out.push_back({"multi_modal_projector.linear_1.weight", {h, h}, d});
  }
  return out;
}

}  // namespace

// One linear [rows, cols]: a plain weight, or NVFP4 (compressed-tensors) with global scale `g`
// (0 allowed: experts treat it as "no scale").
void add_linear(std::vector<SynthTensor>& out, const SynthConfig& c, const std::string& name, uint64_t rows,
                uint64_t cols, float g) {
  if (c.fp8 && c.fp8_format != "block") {  // per-tensor or per-channel FP8 (fp8.md section 1)
    SynthTensor weight(name + ".weight", {rows, cols}, DType::kF8_E4M3);
    weight.finite_fp8 = true;  // real weights hold no NaN: TensorRT-LLM requantises them
    out.push_back(std::move(weight));
    const bool channel = c.fp8_format == "ct-channel";
    const std::vector<uint64_t> scalar =
        c.fp8_format == "ct-tensor" ? std::vector<uint64_t>{1} : std::vector<uint64_t>{};
    SynthTensor scale(name + ".weight_scale", channel ? std::vector<uint64_t>{rows, 1} : scalar,
                      scalar.empty() && !channel ? DType::kF32 : c.scale_dtype);
    scale.positive = true;
    out.push_back(std::move(scale));
    if (!channel) {
      // One input scale per module; an expert's gate and up share theirs (vLLM's fused MoE keeps
      // one slot for both and requires them equal).
      std::string key = name;
      if (key.find(".experts.") != std::string::npos) {
        for (const auto& [from, to] : {std::pair{"up_proj", "gate_proj"}, std::pair{".w3", ".w1"}}) {
          if (const size_t at = key.rfind(from); at != std::string::npos) key.replace(at, std::strlen(from), to);
        }
      }
      const float a = 0.01f + static_cast<float>(fnv1a(key, 7) % 4096) / 4096.0f;
      out.push_back({name + ".input_scale", scalar, scalar.empty() ? DType::kF32 : c.scale_dtype});
      if (out.back().dtype == DType::kF32)
        out.back().value = a;
      else
        out.back().positive = true;
    }
    return;
  }
  if (c.fp8) {  // block FP8 as Qwen3's -FP8 releases: F8_E4M3 weight, one scale per 128x128 block
    out.push_back({name + ".weight", {rows, cols}, DType::kF8_E4M3});
    SynthTensor scale(name + ".weight_scale_inv", {(rows + 127) / 128, (cols + 127) / 128}, c.scale_dtype);
    scale.positive = true;
    out.push_back(std::move(scale));
    return;
  }
  if (!c.int4.empty()) {  // int4-nvfp4.md section 1 (a) to (c)
    const uint64_t g = c.int4_group, groups = (cols + g - 1) / g;
    auto scale = [&](std::vector<uint64_t> shape, DType d) {
      SynthTensor t(name + (c.int4 == "ct" ? ".weight_scale" : ".scales"), std::move(shape), d);
      t.positive = true;
      out.push_back(std::move(t));
    };
    if (c.int4 == "awq") {
      out.push_back({name + ".qweight", {cols, rows / 8}, DType::kI32});
      out.push_back({name + ".qzeros", {groups, rows / 8}, DType::kI32});
      scale({groups, rows}, DType::kF16);
    } else if (c.int4 == "gptq") {
      out.push_back({name + ".qweight", {cols / 8, rows}, DType::kI32});
      out.push_back({name + ".qzeros", {groups, rows / 8}, DType::kI32});
      scale({groups, rows}, DType::kF16);
      out.push_back({name + ".g_idx", {cols}, DType::kI32});
      out.back().group_ids = g, out.back().act_order = c.int4_act_order;
    } else {
      out.push_back({name + ".weight_packed", {rows, cols / 8}, DType::kI32});
      scale({rows, groups}, c.dtype);
      if (c.int4_asym) out.push_back({name + ".weight_zero_point", {rows / 8, groups}, DType::kI32});
      if (c.int4_act_order) {
        out.push_back({name + ".weight_g_idx", {cols}, DType::kI32});
        out.back().group_ids = g, out.back().act_order = true;
      }
      out.push_back({name + ".weight_shape", {2}, DType::kI64});  // the unpacked [out, in]
      out.back().i64 = {static_cast<int64_t>(rows), static_cast<int64_t>(cols)};
    }
    return;
  }
  if (!c.nvfp4) {
    out.push_back({name + ".weight", {rows, cols}, c.dtype});
    return;
  }
  if (c.nvfp4_format == "modelopt") {  // amax / (6 x 448), as ModelOpt calibrates them
    out.push_back({name + ".weight", {rows, cols / 2}, DType::kU8});
    out.push_back({name + ".weight_scale", {rows, cols / 16}, DType::kF8_E4M3});
    out.push_back({name + ".weight_scale_2", {}, DType::kF32, g / 2688.0f});
    out.push_back({name + ".input_scale", {}, DType::kF32, g * 0.5f / 2688.0f});
    return;
  }
  out.push_back({name + ".weight_packed", {rows, cols / 2}, DType::kU8});
  out.push_back({name + ".weight_scale", {rows, cols / 16}, DType::kF8_E4M3});
  out.push_back({name + ".weight_global_scale", {1}, DType::kF32, g});
  out.push_back({name + ".input_global_scale", {1}, DType::kF32, g * 0.5f});
}

// Qwen3-Next: gated-delta layers (in_proj_qkvz / in_proj_ba grouped per key head, conv1d
// [Q | K | V, 1, kernel]) and every 2nd layer gated full attention; a MoE on every layer; mtp.*.
std::vector<SynthTensor> qwen3_next_tensors(const SynthConfig& c) {
  const DType d = c.dtype;
  const uint64_t h = c.hidden, nk = 4, nv = 8, dk = 8, dv = 6, kernel = 4, shared = 48;
  const uint64_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  std::vector<SynthTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab, h}, d});
  auto layer = [&](const std::string& p, bool full) {
    out.push_back({p + "input_layernorm.weight", {h}, d});
    if (full) {
      const std::string a = p + "self_attn.";
      out.push_back({a + "q_proj.weight", {2 * q, h}, d});
      out.push_back({a + "k_proj.weight", {kv, h}, d});
      out.push_back({a + "v_proj.weight", {kv, h}, d});
      out.push_back({a + "o_proj.weight", {h, q}, d});
      out.push_back({a + "q_norm.weight", {c.head_dim}, d});
      out.push_back({a + "k_norm.weight", {c.head_dim}, d});
    } else {
      const std::string a = p + "linear_attn.";
      out.push_back({a + "in_proj_qkvz.weight", {2 * nk * dk + 2 * nv * dv, h}, d});
      out.push_back({a + "in_proj_ba.weight", {2 * nv, h}, d});
      out.push_back({a + "conv1d.weight", {2 * nk * dk + nv * dv, 1, kernel}, d});
      out.push_back({a + "A_log", {nv}, d});
      out.push_back({a + "dt_bias", {nv}, d});
      out.push_back({a + "norm.weight", {dv}, d});
      out.push_back({a + "out_proj.weight", {h, nv * dv}, d});
    }
    out.push_back({p + "post_attention_layernorm.weight", {h}, d});
    out.push_back({p + "mlp.gate.weight", {c.experts, h}, d});
    out.push_back({p + "mlp.shared_expert_gate.weight", {1, h}, d});
    out.push_back({p + "mlp.shared_expert.gate_proj.weight", {shared, h}, d});
    out.push_back({p + "mlp.shared_expert.up_proj.weight", {shared, h}, d});
    out.push_back({p + "mlp.shared_expert.down_proj.weight", {h, shared}, d});
    for (uint64_t j = 0; j < c.experts; ++j) {
      const std::string e = p + "mlp.experts." + std::to_string(j) + ".";
      out.push_back({e + "gate_proj.weight", {c.moe_intermediate, h}, d});
      out.push_back({e + "up_proj.weight", {c.moe_intermediate, h}, d});
      out.push_back({e + "down_proj.weight", {h, c.moe_intermediate}, d});
    }
  };
  for (uint64_t i = 0; i < c.layers; ++i) layer("model.layers." + std::to_string(i) + ".", (i + 1) % 2 == 0);
  out.push_back({"model.norm.weight", {h}, d});
  out.push_back({"lm_head.weight", {c.vocab, h}, d});
  // The MTP module: fc, norms and one full-attention MoE layer (loaded by neither engine here).
  out.push_back({"mtp.fc.weight", {h, 2 * h}, d});
  out.push_back({"mtp.norm.weight", {h}, d});
  out.push_back({"mtp.pre_fc_norm_embedding.weight", {h}, d});
  out.push_back({"mtp.pre_fc_norm_hidden.weight", {h}, d});
  layer("mtp.layers.0.", true);
  return out;
}

std::vector<std::string> synth_family_names() {
  std::vector<std::string> out;
  for (const auto& f : kFamilies) out.emplace_back(f.name);
  return out;
}

std::vector<std::string> synth_preset_names() { return {std::begin(kPresets), std::end(kPresets)}; }

std::vector<SynthTensor> synth_tensors(const SynthConfig& c) {
  const Family& f = family_of(c.family);
  if (deepseek_like(c.family)) return deepseek_tensors(c);
  if (c.family == "qwen3_next") return qwen3_next_tensors(c);
  if (c.family == "gpt_oss") return gpt_oss_tensors(c);
  if (c.family == "llama4" || c.family == "llama4_text") return llama4_tensors(c);
  const uint64_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim, h = c.hidden;
  const DType d = c.dtype;
  std::vector<SynthTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab, h}, d});
  for (uint64_t i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {h}, d});
    const float layer_scale = 2.0f + static_cast<float>(i);  // q/k/v (and gate/up) share one
    if (c.family == "phi3") {                                // Phi-3 stores rows [q; k; v] and [gate; up] fused
      out.push_back({p + "self_attn.qkv_proj.weight", {q + 2 * kv, h}, d});
      out.push_back({p + "self_attn.o_proj.weight", {h, q}, d});
      out.push_back({p + "post_attention_layernorm.weight", {h}, d});
      out.push_back({p + "mlp.gate_up_proj.weight", {2 * c.intermediate, h}, d});
      out.push_back({p + "mlp.down_proj.weight", {h, c.intermediate}, d});
      continue;
    }
    add_linear(out, c, p + "self_attn.q_proj", q, h, layer_scale);
    add_linear(out, c, p + "self_attn.k_proj", kv, h, layer_scale);
    add_linear(out, c, p + "self_attn.v_proj", kv, h, layer_scale);
    if (f.qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q}, d});
      out.push_back({p + "self_attn.k_proj.bias", {kv}, d});
      out.push_back({p + "self_attn.v_proj.bias", {kv}, d});
    }
    if (f.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, d});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, d});
    }
    add_linear(out, c, p + "self_attn.o_proj", h, q, 4.0f);
    if (c.kv_scales) {  // ModelOpt names them under the projections, the others under the attention
      const bool modelopt = c.fp8_format == "modelopt";
      for (const char* kv : {"k", "v"}) {
        out.push_back({p + "self_attn." + (modelopt ? std::string(kv) + "_proj." : std::string()) + kv + "_scale",
                       {},
                       DType::kF32});
        out.back().positive = true;
      }
    }
    out.push_back({p + "post_attention_layernorm.weight", {h}, d});
    // qwen3_moe keeps layer 0 dense (mlp_only_layers: [0]); mixtral is sparse everywhere.
    if (f.moe && !(c.family == "qwen3_moe" && i == 0)) {
      const bool mixtral = c.family == "mixtral";
      const std::string m = p + (mixtral ? "block_sparse_moe." : "mlp.");
      out.push_back({m + "gate.weight", {c.experts, h}, d});
      for (uint64_t j = 0; j < c.experts; ++j) {
        const std::string e = m + "experts." + std::to_string(j) + ".";
        const float g = j == 1 ? 0.0f : 1.0f + static_cast<float>(j);  // expert 1: a zero global scale
        add_linear(out, c, e + (mixtral ? "w1" : "gate_proj"), c.moe_intermediate, h, g);
        add_linear(out, c, e + (mixtral ? "w3" : "up_proj"), c.moe_intermediate, h, g);
        add_linear(out, c, e + (mixtral ? "w2" : "down_proj"), h, c.moe_intermediate, g * 2.0f);
      }
      continue;
    }
    add_linear(out, c, p + "mlp.gate_proj", c.intermediate, h, 8.0f);
    add_linear(out, c, p + "mlp.up_proj", c.intermediate, h, 8.0f);
    add_linear(out, c, p + "mlp.down_proj", h, c.intermediate, 16.0f);
  }
  out.push_back({"model.norm.weight", {h}, d});
  if (!c.tie_embeddings) out.push_back({"lm_head.weight", {c.vocab, h}, d});
  return out;
}

// Llama 4's text settings (the multimodal config nests them under text_config).
nlohmann::ordered_json llama4_text_config(const SynthConfig& c, const Family& f) {
  nlohmann::ordered_json t;
  t["model_type"] = f.model_type;
  t["hidden_size"] = c.hidden;
  t["intermediate_size"] = c.moe_intermediate;
  t["intermediate_size_mlp"] = c.intermediate;
  t["num_local_experts"] = c.experts;
  t["num_experts_per_tok"] = 1;
  t["interleave_moe_layer_step"] = c.moe_step;
  t["num_attention_heads"] = c.heads;
  t["num_key_value_heads"] = c.kv_heads;
  t["head_dim"] = c.head_dim;
  t["num_hidden_layers"] = c.layers;
  t["vocab_size"] = c.vocab;
  t["use_qk_norm"] = c.moe_step == 1;  // Scout on, Maverick off: no weight either way
  t["rms_norm_eps"] = 1e-05;
  t["tie_word_embeddings"] = false;
  t["torch_dtype"] = "bfloat16";
  return t;
}

std::string synth_config_json(const SynthConfig& c) {
  const Family& f = family_of(c.family);
  if (c.family == "llama4_text") {
    nlohmann::ordered_json j = llama4_text_config(c, f);
    j["architectures"] = nlohmann::ordered_json::array({f.architecture});
    return j.dump(2) + "\n";
  }
  if (c.family == "llama4") {
    nlohmann::ordered_json j;
    j["architectures"] = nlohmann::ordered_json::array({f.architecture});
    j["model_type"] = "llama4";
    j["text_config"] = llama4_text_config(c, f);
    j["vision_config"] = {{"model_type", "llama4_vision_model"}, {"hidden_size", c.hidden}};
    j["tie_word_embeddings"] = false;
    return j.dump(2) + "\n";
  }
  const char* torch_dtype = c.dtype == DType::kBF16 ? "bfloat16" : c.dtype == DType::kF16 ? "float16" : "float32";
  nlohmann::ordered_json j;
  j["architectures"] = nlohmann::ordered_json::array({f.architecture});
  j["model_type"] = f.model_type;
  j["hidden_size"] = c.hidden;
  j["intermediate_size"] = c.intermediate;
  j["num_attention_heads"] = c.heads;
  j["num_key_value_heads"] = c.kv_heads;
  // Phi-3 configs carry no head_dim (hidden_size / num_attention_heads); written when it differs.
  if (c.family != "phi3" || c.heads * c.head_dim != c.hidden) j["head_dim"] = c.head_dim;
  j["num_hidden_layers"] = c.layers;
  j["vocab_size"] = c.vocab;
  j["rms_norm_eps"] = 1e-06;
  j["attention_bias"] = f.qkv_bias;
  if (c.family == "qwen3_moe") {
    j["num_experts"] = c.experts;
    j["moe_intermediate_size"] = c.moe_intermediate;
    j["num_experts_per_tok"] = 2;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::ordered_json::array({0});
  } else if (c.family == "mixtral") {
    j["num_local_experts"] = c.experts;
    j["num_experts_per_tok"] = 2;
  } else if (c.family == "gpt_oss") {
    j["num_local_experts"] = c.experts;
    j["experts_per_token"] = 2;
    j["quantization_config"] = {{"quant_method", "mxfp4"},
                                {"modules_to_not_convert",
                                 nlohmann::ordered_json::array({"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                                "model.embed_tokens", "lm_head"})}};
  }
  if (c.fp8 && !deepseek_like(c.family) && c.fp8_format == "block") {
    j["quantization_config"] = {{"quant_method", "fp8"},
                                {"fmt", "e4m3"},
                                {"activation_scheme", "dynamic"},
                                {"weight_block_size", nlohmann::ordered_json::array({128, 128})}};
  }
  if (c.fp8 && c.fp8_format == "autofp8") {
    j["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "static"}};
  }
  if (c.fp8 && (c.fp8_format == "ct-tensor" || c.fp8_format == "ct-channel")) {
    const bool channel = c.fp8_format == "ct-channel";
    nlohmann::ordered_json group = {
        {"targets", nlohmann::ordered_json::array({"Linear"})},
        {"weights",
         {{"num_bits", 8}, {"type", "float"}, {"strategy", channel ? "channel" : "tensor"}, {"dynamic", false}}},
        {"input_activations",
         {{"num_bits", 8}, {"type", "float"}, {"strategy", channel ? "token" : "tensor"}, {"dynamic", channel}}}};
    j["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                {"format", "float-quantized"},
                                {"config_groups", {{"group_0", group}}},
                                {"ignore", nlohmann::ordered_json::array({"lm_head"})}};
    if (c.kv_scales) {
      j["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}};
    }
  }
  if (c.int4 == "awq") {
    j["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4},          {"group_size", c.int4_group},
                                {"version", "gemm"},     {"zero_point", true}, {"modules_to_not_convert", nullptr}};
  } else if (c.int4 == "gptq") {
    j["quantization_config"] = {{"quant_method", "gptq"},       {"bits", 4},   {"group_size", c.int4_group},
                                {"desc_act", c.int4_act_order}, {"sym", true}, {"checkpoint_format", "gptq"}};
  } else if (c.int4 == "ct") {
    nlohmann::ordered_json group = {{"targets", nlohmann::ordered_json::array({"Linear"})},
                                    {"weights",
                                     {{"num_bits", 4},
                                      {"type", "int"},
                                      {"strategy", "group"},
                                      {"group_size", c.int4_group},
                                      {"symmetric", !c.int4_asym},
                                      {"actorder", c.int4_act_order ? nlohmann::ordered_json("group") : nullptr}}},
                                    {"input_activations", nullptr}};
    j["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                {"format", "pack-quantized"},
                                {"config_groups", {{"group_0", group}}},
                                {"ignore", nlohmann::ordered_json::array({"lm_head"})}};
  }
  if (c.nvfp4 && c.nvfp4_format == "ct") {
    j["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                {"format", "nvfp4-pack-quantized"},
                                {"ignore", nlohmann::ordered_json::array({"lm_head"})}};
  }
  if (c.family == "qwen3_next") {
    j["full_attention_interval"] = 2;
    j["linear_num_key_heads"] = 4;
    j["linear_num_value_heads"] = 8;
    j["linear_key_head_dim"] = 8;
    j["linear_value_head_dim"] = 6;
    j["linear_conv_kernel_dim"] = 4;
    j["num_experts"] = c.experts;
    j["moe_intermediate_size"] = c.moe_intermediate;
    j["shared_expert_intermediate_size"] = 48;
    j["num_experts_per_tok"] = 2;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::ordered_json::array();
    j["partial_rotary_factor"] = 0.25;
  } else if (c.family == "glm4_moe") {
    j.erase("head_dim");  // written again below, with GLM's other fields, in its config's order
    j["head_dim"] = c.head_dim;
    j["use_qk_norm"] = c.qk_norm;
    j["partial_rotary_factor"] = 0.5;
    j["n_routed_experts"] = c.experts;
    j["moe_intermediate_size"] = c.moe_intermediate;
    j["n_shared_experts"] = c.shared_experts;
    j["first_k_dense_replace"] = c.first_dense;
    j["num_nextn_predict_layers"] = c.mtp;
    j["num_experts_per_tok"] = 2;
    j["n_group"] = 1;
    j["topk_group"] = 1;
  } else if (deepseek_like(c.family)) {
    if (c.family == "deepseek_v32") {
      j["index_n_heads"] = 4;
      j["index_head_dim"] = 128;
      j["index_topk"] = 64;
    }
    j["q_lora_rank"] = c.q_lora ? nlohmann::ordered_json(c.q_lora) : nlohmann::ordered_json(nullptr);
    j["kv_lora_rank"] = c.kv_lora;
    j["qk_nope_head_dim"] = c.nope;
    j["qk_rope_head_dim"] = c.rope;
    j["v_head_dim"] = c.v_head;
    j["n_routed_experts"] = c.experts;
    j["moe_intermediate_size"] = c.moe_intermediate;
    j["n_shared_experts"] = c.shared_experts;
    j["first_k_dense_replace"] = c.first_dense;
    j["moe_layer_freq"] = 1;
    j["num_nextn_predict_layers"] = c.mtp;
    j["num_experts_per_tok"] = 2;
    j["topk_method"] = "noaux_tc";  // as V3/R1: the router has an e_score_correction_bias
    if (c.fp8) {
      j["quantization_config"] = {{"quant_method", "fp8"},
                                  {"fmt", "e4m3"},
                                  {"activation_scheme", "dynamic"},
                                  {"weight_block_size", nlohmann::ordered_json::array({128, 128})}};
    }
  }
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

uint64_t write_synth_checkpoint(const SynthConfig& cfg_in, const fs::path& out_dir, bool progress) {
  SynthConfig cfg = cfg_in;
  if (cfg.family == "mixtral") cfg.intermediate = cfg.moe_intermediate;  // Mixtral's experts use intermediate_size
  if (cfg.shards == 0) throw Error(ErrorCode::kInvalidArgument, "synth: --shards must be at least 1");
  if (cfg.kv_heads == 0 || cfg.heads % cfg.kv_heads != 0) {
    throw Error(ErrorCode::kInvalidArgument, "synth: num_attention_heads " + std::to_string(cfg.heads) +
                                                 " is not a multiple of num_key_value_heads " +
                                                 std::to_string(cfg.kv_heads));
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw Error(ErrorCode::kIo, out_dir.string() + ": cannot create directory: " + ec.message());

  const auto tensors = synth_tensors(cfg);
  uint64_t total = 0;
  for (const auto& t : tensors) total += nbytes_of(t);
  // Greedy split in model order into shards of about total/shards bytes.
  const unsigned n = std::min<unsigned>(cfg.shards, static_cast<unsigned>(tensors.size()));
  std::vector<std::vector<const SynthTensor*>> shards(n);
  uint64_t acc = 0;
  for (const auto& t : tensors) {
    const unsigned s = std::min<unsigned>(n - 1, static_cast<unsigned>(acc * n / std::max<uint64_t>(total, 1)));
    shards[s].push_back(&t);
    acc += nbytes_of(t);
  }
  Progress bar("synth", total >> 20, progress, " MiB");
  uint64_t written = 0;
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  nlohmann::ordered_json& weight_map = index["weight_map"] = nlohmann::ordered_json::object();
  for (unsigned s = 0; s < n; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05u-of-%05u.safetensors", s + 1, n);
    std::vector<TensorToWrite> files;
    for (const SynthTensor* t : shards[s]) {
      const uint64_t state = fnv1a(t->name, cfg.seed);
      const std::optional<float> value = t->value;
      const bool positive = t->positive, finite_fp8 = t->finite_fp8, act_order = t->act_order;
      const DType dtype = t->dtype;
      const uint64_t group_ids = t->group_ids;
      const std::vector<int64_t> i64 = t->i64;
      files.push_back({t->name, t->dtype, t->shape, nbytes_of(*t),
                       [state, value, positive, finite_fp8, dtype, group_ids, act_order, i64, &written,
                        &bar](std::span<std::byte> dst) {
                         if (!i64.empty()) {
                           std::memcpy(dst.data(), i64.data(), std::min(dst.size(), 8 * i64.size()));
                         } else if (group_ids) {
                           const uint64_t n = dst.size() / 4;
                           for (uint64_t k = 0; k < n; ++k) {
                             const auto id = static_cast<int32_t>((act_order ? (37 * k) % n : k) / group_ids);
                             std::memcpy(dst.data() + 4 * k, &id, 4);
                           }
                         } else if (finite_fp8) {
                           fill_random(dst, state);
                           for (std::byte& b : dst) {
                             if ((static_cast<unsigned>(b) & 0x7fu) == 0x7fu) b ^= std::byte{1};
                           }
                         } else if (value) {
                           for (size_t k = 0; k + 4 <= dst.size(); k += 4) std::memcpy(dst.data() + k, &*value, 4);
                         } else if (positive) {
                           fill_positive(dst, dtype, state);
                         } else {
                           fill_random(dst, state);
                         }
                         written += dst.size();
                         bar.update(written >> 20);
                       }});
      weight_map[t->name] = name;
    }
    write_safetensors(out_dir / name, files, {{"format", "pt"}});
  }
  bar.finish();
  auto write_text = [](const fs::path& p, const std::string& text) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw Error(ErrorCode::kIo, p.string() + ": write failed");
  };
  write_text(out_dir / "model.safetensors.index.json", index.dump(2) + "\n");
  write_text(out_dir / "config.json", synth_config_json(cfg));
  if (cfg.fp8 && cfg.fp8_format == "modelopt") {  // ModelOpt's own file (legacy shape), config.json unquantised
    nlohmann::ordered_json q = {
        {"producer", {{"name", "modelopt"}, {"version", "0.29.0"}}},
        {"quantization",
         {{"quant_algo", "FP8"},
          {"kv_cache_quant_algo", cfg.kv_scales ? nlohmann::ordered_json("FP8") : nlohmann::ordered_json(nullptr)},
          {"exclude_modules", nlohmann::ordered_json::array({"lm_head"})}}}};
    write_text(out_dir / "hf_quant_config.json", q.dump(2) + "\n");
  }
  if (cfg.nvfp4 && cfg.nvfp4_format == "modelopt") {  // nvidia's NVFP4 exports (legacy shape)
    nlohmann::ordered_json exclude = nlohmann::ordered_json::array({"lm_head"});
    if (deepseek_like(cfg.family)) {  // as nvidia/DeepSeek-R1-FP4: attention and the MTP layers
      exclude.push_back("model.layers.*.self_attn*");
      for (uint64_t k = 0; k < cfg.mtp; ++k) exclude.push_back("model.layers." + std::to_string(cfg.layers + k) + "*");
    }
    nlohmann::ordered_json q = {{"producer", {{"name", "modelopt"}, {"version", "0.29.0"}}},
                                {"quantization",
                                 {{"quant_algo", "NVFP4"},
                                  {"kv_cache_quant_algo", nullptr},
                                  {"group_size", 16},
                                  {"exclude_modules", exclude}}}};
    write_text(out_dir / "hf_quant_config.json", q.dump(2) + "\n");
  }
  return total;
}

}  // namespace wmap::cli
