// GLM-4.5 / 4.5-Air (Glm4MoeForCausalLM): DeepSeek-V3's MoE, dense layers and MTP with Llama-style
// attention, served by the deepseek_v3 plugin. `wmap synth glm4_moe` (head_dim 24 != hidden/heads,
// 2 KV heads duplicated at 4 ranks, q/k/v biases, optional q/k norms, one MTP layer) loaded
// through the CLI and compared bit for bit, every rank, with the numpy reference written from
// docs/families/glm-dsv32-phi3-kimi.md section 1 alone (tests/python/glm4_moe_reference.py);
// refusals; and the GLM-4.5-Air layout (reconstructed: tests/data/layouts/glm-4.5-air) planned
// complete with the tensors each rank consumes counted from the rules.
#include <gtest/gtest.h>

#include "test_util.h"

namespace wmap::test {
namespace {

std::filesystem::path synth_glm(const TempDir& dir, const std::string& name, const std::string& args) {
  return synth_checkpoint(dir.path(), "glm4_moe", name, args);
}

TEST(Glm4MoeLoad, VllmBitExactAtEveryRankWithAnF32Router) {
  TempDir dir;
  const auto air = synth_glm(dir, "air", "");
  for (uint32_t t : {1u, 2u, 4u}) expect_every_rank_matches(air, t, "--target vllm");
  expect_every_rank_matches(air, 4, "--target vllm --ep-size 4");
  expect_every_rank_matches(synth_glm(dir, "qk_norm", "--qk-norm"), 2, "--target vllm --ep-size 2");
  const auto plan = run_wmap("plan " + shell_quote(air.string()) + " --target vllm --json");
  EXPECT_NE(plan.out.find("\"name\":\"model.layers.1.mlp.gate.weight\",\"module\":\"model.layers.1.mlp.gate\","
                          "\"dtype\":\"F32\""),
            std::string::npos);
}

TEST(Glm4MoeLoad, TrtllmBitExactAtEveryRankWithMtpAndAttentionDp) {
  TempDir dir;
  const auto air = synth_glm(dir, "air", "");
  for (uint32_t t : {1u, 2u, 4u}) expect_every_rank_matches(air, t, "--target trtllm");
  expect_every_rank_matches(air, 4, "--target trtllm --ep-size 2");
  expect_every_rank_matches(air, 4, "--target trtllm --ep-size 4 --attention-dp");
  expect_every_rank_matches(synth_glm(dir, "qk_norm", "--qk-norm"), 4, "--target trtllm --ep-size 4");
}

TEST(Glm4MoeLoad, LayoutsTheEnginesCannotLoadAreRefusedWithTheReason) {
  TempDir dir;
  const std::string air = shell_quote(synth_glm(dir, "air", "").string());
  const std::string six = shell_quote(synth_glm(dir, "six", "--experts 6").string());
  const std::string tied = shell_quote(synth_glm(dir, "tied", "--tie-embeddings").string());
  const struct {
    std::string ckpt, args, says;
  } cases[] = {
      {air, "--tp-size 8 --tp-rank 0", "4 attention heads cannot be split over tp_size 8"},
      {six, "--tp-size 4 --tp-rank 0 --ep-size 4", "6 experts"},
      {tied, "--tp-size 2 --tp-rank 0", "a tied lm_head cannot share TensorRT-LLM's replicated embed_tokens"},
      {air, "--target vllm --mtp-layers 1", "target vllm loads no MTP layers"},
  };
  for (const auto& c : cases) {
    const auto r = run_wmap("plan " + c.ckpt + " " + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
  }
  // A quantised GLM is refused by name until its layout has been read.
  const auto cfg_path = dir / "air" / "config.json";
  std::string cfg = read_file(cfg_path);
  cfg.insert(cfg.find('{') + 1, "\n  \"quantization_config\": {\"quant_method\": \"fp8\"},");
  write_file(cfg_path, cfg);
  const auto q = run_wmap("plan " + air);
  EXPECT_NE(q.exit_code, 0);
  EXPECT_NE(q.err.find("quantised Glm4MoeForCausalLM checkpoints (quant_method 'fp8') are not served"),
            std::string::npos)
      << q.err;
}

// GLM-4.5-Air: 46 layers (layer 0 dense) + MTP layer 46, 128 experts, 18,329 tensors in 47 shards.
// trtllm consumes every non-expert tensor but the MTP layer's embed_tokens and shared_head.head
// (663) and its experts' 3 weights in 46 MoE layers (the MTP layer's included); vLLM skips the
// whole MTP layer (404 tensors): 645 non-expert tensors and its experts in 45 layers.
TEST(Glm4MoeLoad, Glm45AirLayoutPlansCompleteUnderBothTargets) {
  TempDir dir;
  const auto ckpt = dir / "air";
  const auto built = run_command(
      shell_quote(python()) + " " + shell_quote((source_dir() / "tests/python/sparse_layout.py").string()) + " " +
      shell_quote((testdata_dir() / "layouts/glm-4.5-air").string()) + " " + shell_quote(ckpt.string()));
  ASSERT_EQ(built.exit_code, 0) << built.err;
  for (const char* target : {"trtllm", "vllm"}) {
    const bool vllm = std::string(target) == "vllm";
    for (const auto& [t, p] : {std::pair<uint64_t, uint64_t>{8, 8}, {16, 16}, {8, 1}}) {
      const std::string layout = std::string("--target ") + target + " --tp-size " + std::to_string(t) +
                                 " --tp-rank 3 --ep-size " + std::to_string(p);
      const auto r = run_wmap("plan " + shell_quote(ckpt.string()) + " " + layout);
      ASSERT_EQ(r.exit_code, 0) << layout << "\n" << r.err;
      const uint64_t consumed = vllm ? 645 + 128 / p * 3 * 45 : 663 + 128 / p * 3 * 46;
      const uint64_t skipped = vllm ? 404 : 2;
      const uint64_t others = 18329 - skipped - consumed;
      EXPECT_NE(
          r.out.find("from " + std::to_string(consumed) + " of 18329 checkpoint tensors, " + std::to_string(skipped) +
                     " skipped" + (others ? ", " + std::to_string(others) + " left to other ranks" : std::string())),
          std::string::npos)
          << layout << "\n"
          << r.out;
    }
  }
}

}  // namespace
}  // namespace wmap::test
