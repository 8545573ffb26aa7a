// Block FP8 (quant_method "fp8", weight_block_size [128, 128]) for the llama family, as Qwen3's
// -FP8 releases ship it: F8_E4M3 weights with weight_scale_inv per 128x128 block stored as F32,
// BF16 or F16 (the engines' F32 scale parameters widen them exactly). Every rank of each family at
// T 1/2/4 and EP, under both targets, bit for bit against the independent numpy reference; the
// refusals each engine makes (a split cutting a block, TensorRT-LLM's generic mapper with fewer
// KV heads than ranks, another format's config over these tensors, an unknown quant_method), each
// before anything is read.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace wmap::test {
namespace {

// Block-aligned sizes: head_dim 128 (a KV head is one block row), hidden 256, intermediate 512.
const std::string kDims = "--fp8 --hidden 256 --heads 4 --kv-heads 2 --head-dim 128 --intermediate 512";

struct Fp8Case {
  std::string family;
  std::string scale_dtype;
};

class Fp8BlockFamilies : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8BlockFamilies, EveryRankBitExactBothTargets) {
  TempDir dir;
  const auto& c = GetParam();
  const bool moe = c.family == "qwen3_moe" || c.family == "mixtral";
  const auto ckpt =
      synth_checkpoint(dir.path(), c.family, "ckpt",
                       kDims + " --scale-dtype " + c.scale_dtype + (moe ? " --experts 4 --moe-intermediate 256" : ""));
  for (const std::string target : {"trtllm", "vllm"}) {
    const std::string t = "--target " + target;
    expect_every_rank_matches(ckpt, 1, t);
    expect_every_rank_matches(ckpt, 2, t);
    // 2 KV heads over 4 ranks: vLLM duplicates the scale rows with the head; so does TensorRT-LLM's
    // Qwen3-MoE mapper, its generic one does not (refused: FP8BlockRefusals).
    if (target == "vllm" || c.family == "qwen3_moe") {
      if (!moe) expect_every_rank_matches(ckpt, 4, t);
      // Experts: 256 / moe_tp must stay whole blocks, so T 4 needs EP (vLLM: all or nothing).
      if (moe) expect_every_rank_matches(ckpt, 4, t + (target == "vllm" ? " --ep-size 4" : " --ep-size 2"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Fp8BlockFamilies,
                         ::testing::Values(Fp8Case{"qwen3", "BF16"}, Fp8Case{"qwen3", "F16"}, Fp8Case{"qwen3", "F32"},
                                           Fp8Case{"llama", "BF16"}, Fp8Case{"qwen3_moe", "BF16"},
                                           Fp8Case{"qwen3_moe", "F32"}, Fp8Case{"mixtral", "F16"}),
                         [](const auto& info) { return info.param.family + info.param.scale_dtype; });

// The plan names each scale as the target does, F32 whatever the checkpoint stores, and the
// certificate proves every quantised weight has its scale.
TEST(Fp8Block, ScaleNamesAndDtypesPerTarget) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), "qwen3_moe", "ckpt",
                                     kDims + " --scale-dtype BF16 --experts 4 --moe-intermediate 256");
  auto params_of = [&](const std::string& layout) {
    auto r = run_wmap("plan " + shell_quote(ckpt.string()) + " --json " + layout);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::map<std::string, std::string> out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_TRUE(j["certificate"]["ok"].get<bool>()) << j["certificate"];
    EXPECT_GT(j["certificate"]["scaled"].get<uint64_t>(), 0u) << j["certificate"];
    for (const auto& p : j["params"]) out[p["name"]] = p["dtype"];
    return out;
  };
  const auto trt = params_of("--tp-size 2");
  EXPECT_EQ(trt.at("model.layers.0.self_attn.qkv_proj.weight"), "F8_E4M3");
  EXPECT_EQ(trt.at("model.layers.0.self_attn.qkv_proj.weight_scale"), "F32");
  EXPECT_EQ(trt.at("model.layers.1.mlp.experts.backend.w3_w1_weight_scaling_factor"), "F32");
  EXPECT_EQ(trt.at("model.layers.1.mlp.experts.backend.w2_weight_scaling_factor"), "F32");
  EXPECT_EQ(trt.at("model.layers.1.mlp.gate.weight"), "BF16");  // the router stays unquantised
  const auto vllm = params_of("--tp-size 2 --target vllm");
  EXPECT_EQ(vllm.at("model.layers.0.mlp.gate_up_proj.weight_scale_inv"), "F32");
  EXPECT_EQ(vllm.at("model.layers.1.mlp.experts.w13_weight_scale_inv"), "F32");
  EXPECT_EQ(vllm.count("model.layers.0.mlp.gate_up_proj.weight_scale"), 0u);
}

TEST(Fp8Block, RefusalsNameTheReasonBeforeAnyRead) {
  TempDir dir;
  const auto dense = synth_checkpoint(dir.path(), "qwen3", "dense", kDims);
  const auto cutting = synth_checkpoint(dir.path(), "qwen3", "cutting",
                                        "--fp8 --hidden 256 --heads 4 --kv-heads 4 --head-dim 128 --intermediate 384");
  auto refused = [](const std::filesystem::path& ckpt, const std::string& layout, const std::string& words) {
    const auto r = run_wmap("load " + shell_quote(ckpt.string()) + " " + layout);
    EXPECT_EQ(r.exit_code, 2) << layout << "\n" << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << layout << "\n" << r.err;
  };
  // TensorRT-LLM's generic mapper does not duplicate a KV head's block scales.
  refused(dense, "--tp-size 4 --tp-rank 0",
          "num_key_value_heads: 2 KV heads under tp_size 4: TensorRT-LLM's weight mapper for Qwen3ForCausalLM does "
          "not duplicate a KV head's FP8 block scales");
  // 384 / 2 = 192 rows per rank cut a 128 block: both engines refuse.
  for (const std::string target : {"trtllm", "vllm"}) {
    refused(cutting, "--tp-size 2 --tp-rank 1 --target " + target,
            "model.layers.0.mlp.gate_proj.weight: this rank's rows [192, 384) are not whole 128-wide FP8 blocks");
    EXPECT_NE(reference_mismatches(cutting, dir / "none.safetensors", "--tp-size 2 --tp-rank 1 --target " + target)
                  .find("not a multiple of the FP8 block 128"),
              std::string::npos);
  }
  // Per-tensor FP8 (AutoFP8: no weight_block_size) and formats no building block serves: by name.
  auto with_quant = [&](const std::string& name, const std::string& quantization_config) {
    const auto copy = dir / name;
    std::filesystem::copy(dense, copy);
    auto cfg = nlohmann::json::parse(read_file(copy / "config.json"));
    cfg["quantization_config"] = nlohmann::json::parse(quantization_config);
    write_file(copy / "config.json", cfg.dump());
    return copy;
  };
  // Another format's config over these tensors names what it misses (fp8_scaled_load_test.cc
  // loads those formats): AutoFP8 is refused under TensorRT-LLM as the engine refuses it, a
  // compressed-tensors FP8-dynamic config asks for its per-channel scales (not NVFP4's
  // weight_scale_2), a ModelOpt one without quant_algo names the field.
  refused(with_quant("per_tensor", R"({"quant_method": "fp8", "activation_scheme": "static"})"), "",
          "quant_method 'fp8' without weight_block_size (AutoFP8 per-tensor) does not load under TensorRT-LLM");
  refused(with_quant("fp8_dynamic", R"({"quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float",
      "strategy": "channel"}}}, "ignore": ["lm_head"]})"),
          "",
          "quantization_config (compressed-tensors per-channel FP8) quantises it (not in ignore), but the checkpoint "
          "has no model.layers.0.self_attn.q_proj.weight_scale");
  refused(with_quant("modelopt", R"({"quant_method": "modelopt"})"), "",
          "quantization_config.quant_algo: ModelOpt '' is not served (only 'FP8', per-tensor, and 'NVFP4')");
  // A family whose quantised layout has not been read refuses any quantization_config by name.
  const auto llama4 = synth_checkpoint(dir.path(), "llama4_text", "llama4", "");
  auto cfg4 = nlohmann::json::parse(read_file(llama4 / "config.json"));
  cfg4["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  write_file(llama4 / "config.json", cfg4.dump());
  refused(llama4, "", "quantised Llama 4 checkpoints (quant_method 'fp8') are not served yet");
  refused(with_quant("bitsandbytes", R"({"quant_method": "bitsandbytes"})"), "",
          "quantization_config.quant_method: 'bitsandbytes' is not served; served: fp8 (block");
  // AWQ and GPTQ are served under vLLM (int4_load_test.cc); over BF16 tensors they name what is missing.
  refused(with_quant("awq", R"({"quant_method": "awq"})"), "", "AutoAWQ checkpoints do not load under TensorRT-LLM");
  refused(with_quant("gptq", R"({"quant_method": "gptq"})"), "--target vllm",
          "quantises it, but the checkpoint has no model.layers.0.self_attn.q_proj.qweight");
}

}  // namespace
}  // namespace wmap::test
