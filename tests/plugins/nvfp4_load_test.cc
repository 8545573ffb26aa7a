// NVFP4 for the llama family, as the hub ships it: ModelOpt exports (hf_quant_config.json
// quant_algo NVFP4: `weight` U8, `weight_scale` F8, 0-d `weight_scale_2` / `input_scale`) and
// compressed-tensors nvfp4-pack-quantized (`weight_packed`, [1] global scales = 1 / ModelOpt's).
// Every rank at T 1/2/4 and EP, under both targets, bit for bit against the independent numpy
// reference (tests/python/reference.py, written from int4-nvfp4.md section 6): vLLM keeps the
// checkpoint's bytes and one global-scale slot per part; TensorRT-LLM's load_weights swizzles the
// block scales 128x4, inverts the input scale, adds alpha (and inv_input_scale on unfused
// linears), and its CUTLASS MoE keeps int64/int32 views padded to 128 rows, input scales reduced
// over every expert and one alpha per expert.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "checkpoint_edit.h"
#include "plan_json.h"
#include "test_util.h"

namespace wmap::test {
namespace {

const std::string kDims = "--nvfp4 --hidden 256 --heads 4 --kv-heads 2 --head-dim 128 --intermediate 512";

struct Nvfp4Case {
  std::string family;
  std::string format;  // synth --nvfp4-format
  std::string extra;   // MoE sizes
};

class Nvfp4Families : public ::testing::TestWithParam<Nvfp4Case> {};

// 2 KV heads over 4 ranks: each KV head's weight and block scales duplicated with it.
TEST_P(Nvfp4Families, EveryRankBitExactUnderBothTargets) {
  TempDir dir;
  const auto& c = GetParam();
  const bool moe = !c.extra.empty();
  const auto ckpt =
      synth_checkpoint(dir.path(), c.family, "ckpt", kDims + " --nvfp4-format " + c.format + " " + c.extra);
  for (const std::string target : {"trtllm", "vllm"}) {
    const std::string t = "--target " + target;
    expect_every_rank_matches(ckpt, 1, t);
    expect_every_rank_matches(ckpt, 2, t);
    expect_every_rank_matches(ckpt, 4, t);
    if (moe) expect_every_rank_matches(ckpt, 4, t + " --ep-size 4");
    if (moe && target == "trtllm") expect_every_rank_matches(ckpt, 4, t + " --ep-size 2");
  }
}

// moe-intermediate 192: 96 rows a rank at T 2 pad to A = 256 (64 zero rows), 48 at T 4 to 128.
// (llama differs from qwen2 in nothing NVFP4 touches; Mixtral's ModelOpt keys rename as its BF16 ones.)
// compressed-tensors qwen3_moe: expert 1's global scales are 0 (inverted to 0 for experts, where
// TensorRT-LLM's alpha is then 0). Mixtral's keys (block_sparse_moe.experts.J.w1.weight_packed)
// reach the engines' names through mixtral.yaml and the rule set it includes.
INSTANTIATE_TEST_SUITE_P(Formats, Nvfp4Families,
                         ::testing::Values(Nvfp4Case{"qwen3", "modelopt", ""}, Nvfp4Case{"qwen3", "ct", ""},
                                           Nvfp4Case{"qwen2", "modelopt", ""},
                                           Nvfp4Case{"qwen3_moe", "modelopt", "--experts 4 --moe-intermediate 256"},
                                           Nvfp4Case{"qwen3_moe", "ct", "--experts 4 --moe-intermediate 192"},
                                           Nvfp4Case{"mixtral", "ct", "--experts 4 --moe-intermediate 256"}),
                         [](const auto& info) { return info.param.family + "_" + info.param.format; });

// DeepSeek-V3/R1 NVFP4 as nvidia's R1-FP4 ships it: the MLPs, shared and routed experts NVFP4,
// attention and the MTP layer BF16 (exclude_modules). TensorRT-LLM splits the dense MLP and the
// shared experts over gcd(width / 16, T) ranks; vLLM exactly.
TEST(Nvfp4, DeepseekV3AsR1Fp4UnderBothTargets) {
  TempDir dir;
  const auto ckpt =
      synth_checkpoint(dir.path(), "deepseek_v3", "ds",
                       "--nvfp4 --nvfp4-format modelopt --hidden 256 --intermediate 512 --moe-intermediate 256");
  for (const std::string target : {"trtllm", "vllm"}) {
    expect_every_rank_matches(ckpt, 1, "--target " + target);
    expect_every_rank_matches(ckpt, 2, "--target " + target);
    expect_every_rank_matches(ckpt, 2, "--target " + target + " --ep-size 2");
  }
}

// The plan names the format, each weight's companions and the engine's own conversions.
TEST(Nvfp4, PlanNamesTheFormatAndTheEnginesParameters) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), "qwen3_moe", "ckpt",
                                     kDims + " --nvfp4-format modelopt --experts 4 --moe-intermediate 192");
  const auto trt = plan_json(ckpt, "--tp-size 2");
  EXPECT_EQ(trt["version"], 10);
  EXPECT_EQ(trt["quantization"]["method"], "modelopt");
  EXPECT_EQ(trt["quantization"]["scheme"], "ModelOpt NVFP4");
  EXPECT_TRUE(trt["certificate"]["ok"].get<bool>()) << trt["certificate"];
  auto p = params_of(trt);
  const std::string a = "model.layers.0.self_attn.", e = "model.layers.1.mlp.experts.backend.";
  // q 256 + k 128 + v 128 rows a rank (2 KV heads over 2 ranks: one each), 16 scale columns.
  EXPECT_EQ(p.at(a + "qkv_proj.weight_scale")["dtype"], "U8");
  EXPECT_EQ(p.at(a + "qkv_proj.weight_scale")["shape"], nlohmann::json::array({512 * 16}));
  EXPECT_EQ(p.at(a + "qkv_proj.weight_scale")["convert"]["kind"], "block_scale_swizzle");
  EXPECT_EQ(p.at(a + "qkv_proj.input_scale")["convert"]["op"], "inv_max");
  EXPECT_EQ(p.at(a + "qkv_proj.alpha")["convert"]["op"], "max_product");
  EXPECT_EQ(p.at(a + "qkv_proj.input_scale")["must_match"].size(), 4u);  // k, v against q, for both globals
  EXPECT_EQ(p.count(a + "qkv_proj.inv_input_scale"), 0u) << "fused linears never set it (torch.empty)";
  EXPECT_EQ(p.at(a + "o_proj.inv_input_scale")["convert"]["op"], "inv_sixth");
  EXPECT_EQ(p.at(e + "w3_w1_weight")["dtype"], "I64");
  EXPECT_EQ(p.at(e + "w3_w1_weight")["shape"], nlohmann::json::array({4, 256, 16}));  // A = rup(2 x 96, 128)
  EXPECT_EQ(p.at(e + "w2_weight")["shape"], nlohmann::json::array({4, 256, 8}));
  EXPECT_EQ(p.at(e + "w3_w1_weight_scale")["shape"], nlohmann::json::array({4, 256, 4}));
  EXPECT_EQ(p.at(e + "w2_weight_scale")["shape"], nlohmann::json::array({4, 256, 2}));
  EXPECT_EQ(p.at(e + "fc31_input_scale")["shape"], nlohmann::json::array());
  EXPECT_EQ(p.at(e + "fc31_alpha")["shape"], nlohmann::json::array({4}));
  EXPECT_EQ(p.at(e + "w3_w1_weight")["scales"],
            nlohmann::json::array({e + "w3_w1_weight_scale", e + "fc31_input_scale", e + "fc31_alpha"}));

  const auto vllm = plan_json(ckpt, "--tp-size 2 --target vllm");
  EXPECT_TRUE(vllm["certificate"]["ok"].get<bool>());
  p = params_of(vllm);
  EXPECT_EQ(p.at(a + "qkv_proj.weight_scale")["dtype"], "F8_E4M3");
  EXPECT_EQ(p.at(a + "qkv_proj.weight_scale")["shape"], nlohmann::json::array({512, 16}));
  EXPECT_EQ(p.at(a + "qkv_proj.weight_scale_2")["shape"], nlohmann::json::array({3}));
  EXPECT_EQ(p.at(a + "qkv_proj.input_scale")["shape"], nlohmann::json::array({3}));
  EXPECT_EQ(p.at("model.layers.1.mlp.experts.w13_input_scale")["shape"], nlohmann::json::array({4, 2}));
  EXPECT_EQ(p.at("model.layers.1.mlp.experts.w13_input_scale")["must_match"].size(), 4u);

  const auto ct = synth_checkpoint(dir.path(), "qwen3", "ct", kDims);
  const auto ctp = plan_json(ct, "--target vllm");
  EXPECT_EQ(ctp["quantization"]["scheme"], "compressed-tensors NVFP4");
  p = params_of(ctp);
  EXPECT_EQ(p.at(a + "qkv_proj.weight_packed")["dtype"], "U8");
  EXPECT_EQ(p.at(a + "qkv_proj.weight_global_scale")["shape"], nlohmann::json::array({3}));
  EXPECT_EQ(p.at(a + "qkv_proj.input_global_scale")["shape"], nlohmann::json::array({3}));
}

// The same weights in both spellings give TensorRT-LLM the same parameters: the
// compressed-tensors path is the ModelOpt one after the engine's own renames and inversions.
TEST(Nvfp4, BothSpellingsGiveTensorRtLlmTheSameSwizzledScales) {
  TempDir dir;
  const auto mo = synth_checkpoint(dir.path(), "qwen3", "mo", kDims + " --nvfp4-format modelopt");
  const auto ct = synth_checkpoint(dir.path(), "qwen3", "ct", kDims);
  const auto a = dir / "a.safetensors", b = dir / "b.safetensors";
  ASSERT_EQ(run_wmap("load " + shell_quote(mo.string()) + " --dump " + shell_quote(a.string())).exit_code, 0);
  ASSERT_EQ(run_wmap("load " + shell_quote(ct.string()) + " --dump " + shell_quote(b.string())).exit_code, 0);
  const auto r = run_command(
      python() + " -c " +
      shell_quote("import sys; sys.path.insert(0, " + nlohmann::json((source_dir() / "tests/python").string()).dump() +
                  "); import reference as R; a = R.Checkpoint(sys.argv[1]); b = R.Checkpoint(sys.argv[2]); "
                  "k = 'model.layers.0.self_attn.qkv_proj.weight_scale'; "
                  "print(a.get(k).to_bytes() == b.get(k).to_bytes(), a.get(k).shape, a.get(k).dtype)") +
      " " + shell_quote(a.string()) + " " + shell_quote(b.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "True (16384,) U8\n");  // 1024 rows x 16: the same random codes, swizzled alike
}

// `plan --expect` accepts each engine's parameter list: the reference's, plus under TensorRT-LLM
// the names its NVFP4 linears hold that no load writes (kv_scales / inv_kv_scales torch.ones; a
// fused linear's inv_input_scale torch.empty and never set).
TEST(Nvfp4, PlanMatchesEachEnginesParameterList) {
  TempDir dir;
  const auto mo = synth_checkpoint(dir.path(), "qwen3_moe", "mo",
                                   kDims + " --nvfp4-format modelopt --experts 4 --moe-intermediate 192");
  const auto ct = synth_checkpoint(dir.path(), "qwen3", "ct", kDims);
  for (const auto& [ck, layout] : {std::pair{mo, std::string("--tp-size 2 --tp-rank 1")},
                                   std::pair{mo, std::string("--tp-size 4 --tp-rank 2 --ep-size 4 --target vllm")},
                                   std::pair{ct, std::string("--tp-size 4 --tp-rank 3")},
                                   std::pair{ct, std::string("--tp-size 2 --tp-rank 0 --target vllm")}}) {
    const auto dump = run_command(python() + " " + shell_quote((source_dir() / "tests/python/reference.py").string()) +
                                  " list --json " + shell_quote(ck.string()) + " " + layout);
    ASSERT_EQ(dump.exit_code, 0) << dump.err;
    auto list = nlohmann::json::parse(dump.out);
    if (layout.find("vllm") == std::string::npos) {
      for (const std::string a : {"model.layers.0.self_attn.", "model.layers.1.self_attn."}) {
        list[a + "qkv_proj.kv_scales"] = {{"shape", {3}}, {"dtype", "F32"}};
        list[a + "qkv_proj.inv_kv_scales"] = {{"shape", {3}}, {"dtype", "F32"}};
        list[a + "qkv_proj.inv_input_scale"] = {{"shape", {1}}, {"dtype", "F32"}};
      }
    }
    write_file(dir / "params.json", list.dump());
    const auto r = run_wmap("plan " + shell_quote(ck.string()) + " " + layout + " --expect " +
                            shell_quote((dir / "params.json").string()));
    EXPECT_EQ(r.exit_code, 0) << layout << "\n" << r.err;
  }
}

CommandResult load_edited(const TempDir& dir, const std::string& flags, const std::string& layout,
                          const std::function<TensorEdit(const std::string&)>& edit) {
  const auto ckpt = synth_checkpoint(dir.path(), "qwen3_moe", "moe", kDims + " " + flags);
  const auto broken = dir / "edited";
  copy_checkpoint(ckpt, broken, edit);
  if (std::filesystem::exists(ckpt / "hf_quant_config.json"))
    std::filesystem::copy_file(ckpt / "hf_quant_config.json", broken / "hf_quant_config.json");
  return run_wmap("load " + shell_quote(broken.string()) + " " + layout);
}

std::string f32_bytes(float v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}

// Each engine's own checks, before any weight reaches a parameter, naming the keys.
TEST(Nvfp4, EngineChecksNameTheKeys) {
  const std::string moe = " --experts 4 --moe-intermediate 256";
  {  // vLLM writes one input scale over both of an expert's gate/up slots: they must agree.
    TempDir dir;
    const std::string key = "model.layers.1.mlp.experts.2.up_proj.input_scale";
    const auto r = load_edited(dir, "--nvfp4-format modelopt" + moe, "--target vllm", [&](const std::string& n) {
      return TensorEdit{.bytes = n == key ? std::optional(f32_bytes(0.5f)) : std::nullopt};
    });
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(key), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("model.layers.1.mlp.experts.2.gate_proj.input_scale"), std::string::npos) << r.err;
  }
  {  // TensorRT-LLM asserts an expert's w1/w3 input scales allclose (its fc31_input_scale).
    TempDir dir;
    const std::string key = "model.layers.1.mlp.experts.3.up_proj.input_global_scale";
    const auto r = load_edited(dir, moe, "", [&](const std::string& n) {
      return TensorEdit{.bytes = n == key ? std::optional(f32_bytes(9.0f)) : std::nullopt};
    });
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("'" + key + "' = 9.0"), std::string::npos) << r.err;
  }
  {  // A part whose input features are not whole 16-value blocks a rank is refused by name.
    TempDir dir;
    const auto ckpt = synth_checkpoint(dir.path(), "qwen3", "odd", "--nvfp4 --hidden 256 --intermediate 176");
    for (const char* target : {"trtllm", "vllm"}) {
      const auto r = run_wmap("plan " + shell_quote(ckpt.string()) + " --tp-size 2 --target " + target);
      EXPECT_EQ(r.exit_code, 2) << r.err;
      EXPECT_NE(r.err.find("model.layers.0.mlp.down_proj.weight: this rank's 88 input features are not whole "
                           "16-value NVFP4 blocks"),
                std::string::npos)
          << r.err;
    }
  }
}

// TensorRT-LLM takes an expert's larger weight_scale_2 when w1's and w3's are not close (a
// warning, not an error): the checkpoint loads, bit-exact with the reference's max.
TEST(Nvfp4, ExpertWeightScalesNotCloseTakeTheLarger) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), "qwen3_moe", "moe",
                                     kDims + " --nvfp4-format modelopt --experts 4 --moe-intermediate 256");
  const std::string key = "model.layers.1.mlp.experts.0.gate_proj.weight_scale_2";
  for (const float v : {1.000004f / 2688.0f, 2.0f / 2688.0f}) {
    const auto edited = dir / ("v" + std::to_string(v));
    copy_checkpoint(ckpt, edited, [&](const std::string& n) {
      return TensorEdit{.bytes = n == key ? std::optional(f32_bytes(v)) : std::nullopt};
    });
    std::filesystem::copy_file(ckpt / "hf_quant_config.json", edited / "hf_quant_config.json");
    expect_every_rank_matches(edited, 2, "--ep-size 2");
  }
}

}  // namespace
}  // namespace wmap::test
