// MoE and DeepSeek-V3 ranks, loaded through the CLI and compared bit for bit with the numpy
// reference, at the (T, P, K) layouts issue 4 names; and the plan problems these families cause.
#include <gtest/gtest.h>

#include <cstring>

#include "checkpoint_edit.h"
#include "test_util.h"

namespace wmap::test {
namespace {

struct MoeLayout {
  uint32_t t, p;
  int mtp;  // -1: the checkpoint's count
};

void expect_all_ranks_match(const std::filesystem::path& ckpt, const std::vector<MoeLayout>& layouts) {
  for (const auto& l : layouts) {
    expect_every_rank_matches(
        ckpt, l.t, "--ep-size " + std::to_string(l.p) + (l.mtp >= 0 ? " --mtp-layers " + std::to_string(l.mtp) : ""));
  }
}

std::filesystem::path synth(const TempDir& dir, const std::string& family, const std::string& flags = "") {
  const auto ckpt = dir / family;
  auto r = run_wmap("synth " + family + " " + shell_quote(ckpt.string()) + " " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return ckpt;
}

const std::vector<MoeLayout> kMoeLayouts = {{1, 1, -1}, {2, 1, -1}, {2, 2, -1}, {4, 2, -1}, {8, 8, -1}};

TEST(MoeLoad, Qwen3MoeBitExact) {
  TempDir dir;
  expect_all_ranks_match(synth(dir, "qwen3_moe"), kMoeLayouts);
}

TEST(MoeLoad, MixtralBitExactThroughItsYamlMapping) {
  TempDir dir;
  expect_all_ranks_match(synth(dir, "mixtral"), kMoeLayouts);
}

TEST(MoeLoad, DeepseekV3Bf16BitExact) {
  TempDir dir;
  expect_all_ranks_match(synth(dir, "deepseek_v3"),
                         {{1, 1, -1}, {2, 1, -1}, {2, 2, -1}, {4, 2, 2}, {4, 4, 3}, {2, 1, 0}});
}

TEST(MoeLoad, DeepseekV3Fp8BitExact) {
  TempDir dir;
  expect_all_ranks_match(synth(dir, "deepseek_v3", "--fp8"), {{1, 1, -1}, {2, 1, -1}, {2, 2, 2}});
}

TEST(MoeLoad, DeepseekV2LiteStyleWithoutQLora) {
  TempDir dir;
  expect_all_ranks_match(synth(dir, "deepseek_v3", "--q-lora-rank 0 --fp8"), {{1, 1, -1}, {2, 2, -1}});
}

std::string f32_bytes(float v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}

class Nvfp4Problems : public ::testing::Test {
 protected:
  CommandResult load_edited(const std::string& family, const std::function<TensorEdit(const std::string&)>& edit) {
    const auto ckpt = synth(dir_, family, "--nvfp4");
    const auto broken = dir_ / (family + "_edited");
    copy_checkpoint(ckpt, broken, edit);
    return run_wmap("load " + shell_quote(broken.string()));
  }
  TempDir dir_;
};

TEST_F(Nvfp4Problems, DenseZeroGlobalScaleIsAnErrorNamingTheKey) {
  const std::string key = "model.layers.0.self_attn.o_proj.weight_global_scale";
  auto r = load_edited("llama", [&](const std::string& n) {
    return TensorEdit{.bytes = n == key ? std::optional(f32_bytes(0.0f)) : std::nullopt};
  });
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("'" + key + "'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("finite scale > 0"), std::string::npos) << r.err;
}

TEST_F(Nvfp4Problems, FusedSourcesWithDifferentGlobalScalesAreNamed) {
  const std::string key = "model.layers.1.self_attn.k_proj.weight_global_scale";
  auto r = load_edited("llama", [&](const std::string& n) {
    return TensorEdit{.bytes = n == key ? std::optional(f32_bytes(7.0f)) : std::nullopt};
  });
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("'model.layers.1.self_attn.q_proj.weight_global_scale' = 3.0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'" + key + "' = 7.0"), std::string::npos) << r.err;
}

TEST_F(Nvfp4Problems, RenameOntoAnExistingKeyIsAnError) {
  // A checkpoint carrying both `weight_packed` and `weight` for one linear.
  const auto ckpt = synth(dir_, "llama", "--nvfp4");
  const auto broken = dir_ / "both";
  copy_checkpoint(ckpt, broken, [](const std::string&) { return TensorEdit{}; }, {},
                  {"model.layers.0.mlp.down_proj.weight"});
  auto r = run_wmap("plan " + shell_quote(broken.string()));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("model.layers.0.mlp.down_proj.weight_packed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model.layers.0.mlp.down_proj.weight"), std::string::npos) << r.err;
}

class MoePlanProblems : public ::testing::Test {
 protected:
  std::string plan_of(const std::string& family, const std::string& synth_flags,
                      const std::function<TensorEdit(const std::string&)>& edit, const std::string& layout = "") {
    const auto ckpt = synth(dir_, family, synth_flags);
    const auto broken = dir_ / (family + "_broken");
    copy_checkpoint(ckpt, broken, edit);
    auto r = run_wmap("plan " + shell_quote(broken.string()) + " " + layout);
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    return r.err;
  }
  TempDir dir_;
};

TEST_F(MoePlanProblems, MissingExpertWeightIsNamed) {
  const std::string key = "model.layers.1.mlp.experts.5.down_proj.weight";
  const std::string err = plan_of("qwen3_moe", "", [&](const std::string& n) { return TensorEdit{.drop = n == key}; });
  EXPECT_NE(err.find("missing: '" + key + "'"), std::string::npos) << err;
  EXPECT_NE(err.find("mlp.experts.backend.w2_weight"), std::string::npos) << err;
}

TEST_F(MoePlanProblems, MissingExpertOfAnotherRankIsNotThisRanksProblem) {
  const auto ckpt = synth(dir_, "qwen3_moe");
  const auto broken = dir_ / "other_rank";
  copy_checkpoint(ckpt, broken, [](const std::string& n) {
    return TensorEdit{.drop = n == "model.layers.1.mlp.experts.7.up_proj.weight"};
  });
  EXPECT_EQ(run_wmap("plan " + shell_quote(broken.string()) + " --tp-size 2 --ep-size 2 --tp-rank 0").exit_code, 0);
  EXPECT_EQ(run_wmap("plan " + shell_quote(broken.string()) + " --tp-size 2 --ep-size 2 --tp-rank 1").exit_code, 1);
}

TEST_F(MoePlanProblems, MissingFp8ScaleIsNamed) {
  const std::string key = "model.layers.0.self_attn.o_proj.weight_scale_inv";
  const std::string err =
      plan_of("deepseek_v3", "--fp8", [&](const std::string& n) { return TensorEdit{.drop = n == key}; });
  EXPECT_NE(err.find("missing: '" + key + "'"), std::string::npos) << err;
}

TEST_F(MoePlanProblems, ScaleWhoseBlocksDoNotMatchItsWeight) {
  // o_proj [128, 512] in 128x128 blocks has a [1, 4] scale; a [2, 2] one does not line up.
  const std::string key = "model.layers.0.self_attn.o_proj.weight_scale_inv";
  const std::string err = plan_of("deepseek_v3", "--fp8", [&](const std::string& n) {
    TensorEdit e;
    if (n == key) e.reshape = std::vector<uint64_t>{2, 2};
    return e;
  });
  EXPECT_NE(err.find("'" + key + "'"), std::string::npos) << err;
  EXPECT_NE(err.find("has shape [2, 2] but model.layers.0.self_attn.o_proj.weight_scale expects [1, 4]"),
            std::string::npos)
      << err;  // trtllm: `weight_scale`
}

TEST_F(MoePlanProblems, MtpTensorMissingFromASharedLayerNamesEveryReader) {
  // Checkpoint layer 3 (the MTP layer) is read by model layers 3, 4 and 5 with --mtp-layers 3.
  const std::string key = "model.layers.3.enorm.weight";
  const std::string err = plan_of(
      "deepseek_v3", "", [&](const std::string& n) { return TensorEdit{.drop = n == key}; }, "--mtp-layers 3");
  for (const char* reader :
       {"model.layers.3.enorm.weight", "model.layers.4.enorm.weight", "model.layers.5.enorm.weight"}) {
    EXPECT_NE(err.find(std::string("needed by ") + reader), std::string::npos) << err;
  }
}

TEST_F(MoePlanProblems, NoMtpLayersDeclaresTheMtpTensorsSkipped) {
  const auto ckpt = synth(dir_, "deepseek_v3");
  auto r = run_wmap("plan " + shell_quote(ckpt.string()) + " --mtp-layers 0");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("skipped"), std::string::npos) << r.out;
}

TEST_F(MoePlanProblems, ExpertsNotDivisibleByEpSizeIsAConfigError) {
  const auto ckpt = synth(dir_, "qwen3_moe", "--experts 6");
  auto r = run_wmap("plan " + shell_quote(ckpt.string()) + " --tp-size 4 --ep-size 4 --tp-rank 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("num_experts"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("config.json"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace wmap::test
