// DeepSeek-V3.2 (DeepseekV32ForCausalLM): DeepSeek-V3 with F32 RMSNorm weights held as BF16 (round
// to nearest even) and a lightning indexer in every layer: vLLM's fused wk_weights_proj with wk
// dequantized to BF16, TensorRT-LLM's F32 wk dequantized with its block scale and F32
// weights_proj. `wmap synth deepseek_v32 [--fp8]` loaded through the CLI and compared bit for bit,
// every rank, with the numpy reference written from docs/families/glm-dsv32-phi3-kimi.md section 2
// alone (tests/python/deepseek_v32_reference.py); and the real DeepSeek-V3.2 layout planned
// complete with the tensors each rank consumes counted from the rules.
#include <gtest/gtest.h>

#include "test_util.h"

namespace wmap::test {
namespace {

std::filesystem::path synth_v32(const TempDir& dir, const std::string& name, const std::string& args) {
  return synth_checkpoint(dir.path(), "deepseek_v32", name, args);
}

TEST(DeepseekV32Load, VllmBitExactWithTheFusedDequantizedIndexer) {
  TempDir dir;
  const auto fp8 = synth_v32(dir, "fp8", "--fp8 --moe-intermediate 256");  // whole FP8 blocks at T = 2
  expect_every_rank_matches(fp8, 1, "--target vllm");
  expect_every_rank_matches(fp8, 2, "--target vllm");
  expect_every_rank_matches(fp8, 2, "--target vllm --ep-size 2");
  const auto bf16 = synth_v32(dir, "bf16", "");
  for (uint32_t t : {1u, 2u}) expect_every_rank_matches(bf16, t, "--target vllm --ep-size " + std::to_string(t));
  expect_every_rank_matches(bf16, 4, "--target vllm");  // BF16: no FP8 block to keep whole at T = 4
  const auto plan = run_wmap("plan " + shell_quote(fp8.string()) + " --target vllm --json");
  EXPECT_NE(
      plan.out.find("\"name\":\"model.layers.0.self_attn.indexer.wk_weights_proj.weight\",\"module\":"
                    "\"model.layers.0.self_attn.indexer.wk_weights_proj\",\"dtype\":\"BF16\",\"shape\":[132,128]"),
      std::string::npos);
  EXPECT_NE(plan.out.find("\"convert\":{\"kind\":\"fp8_block_dequant\",\"rows\":128,\"cols\":128,\"block\":[128,128]"),
            std::string::npos);
  EXPECT_NE(plan.out.find("\"name\":\"model.norm.weight\",\"module\":\"model.norm\",\"dtype\":\"BF16\""),
            std::string::npos);
}

TEST(DeepseekV32Load, TrtllmBitExactWithF32IndexerWeightsAndMtp) {
  TempDir dir;
  for (const auto& ckpt : {synth_v32(dir, "fp8", "--fp8"), synth_v32(dir, "bf16", "")}) {
    for (uint32_t t : {1u, 2u}) expect_every_rank_matches(ckpt, t, "--target trtllm");
    expect_every_rank_matches(ckpt, 4, "--target trtllm --ep-size 4");
    expect_every_rank_matches(ckpt, 4, "--target trtllm --ep-size 2 --attention-dp");
  }
}

TEST(DeepseekV32Load, WhatIsNotServedIsRefusedWithTheReason) {
  TempDir dir;
  const auto ckpt = synth_v32(dir, "fp8", "--fp8");
  const auto mtp = run_wmap("plan " + shell_quote(ckpt.string()) + " --target vllm --mtp-layers 1");
  EXPECT_NE(mtp.exit_code, 0);
  EXPECT_NE(mtp.err.find("target vllm loads no MTP layers"), std::string::npos) << mtp.err;
  const auto cfg_path = ckpt / "config.json";
  std::string cfg = read_file(cfg_path);
  cfg.insert(cfg.find('{') + 1, "\n  \"index_topk_freq\": 2,");
  write_file(cfg_path, cfg);
  const auto r = run_wmap("plan " + shell_quote(ckpt.string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("index_topk_freq: indexers on only some layers (IndexCache) are not served"), std::string::npos)
      << r.err;
}

// DeepSeek-V3.2's header inventory: 92,425 tensors in 163 shards, layers 0-2 dense, 3-60 MoE, 61
// the MTP layer (with its indexer). Of the 1,801 non-expert tensors TensorRT-LLM consumes all
// but the MTP layer's embed_tokens and shared_head.head (1,799), and 6 tensors (3 FP8 weights, 3
// scales) of each of its 256 / P experts in 59 MoE layers; vLLM skips layer 61 (1,571 tensors):
// 1,766 non-expert tensors and its experts in 58 layers.
TEST(DeepseekV32Load, RealLayoutPlansCompleteAtTp8Ep8UnderBothTargets) {
  TempDir dir;
  const auto ckpt = sparse_layout("deepseek-v3.2", dir / "v32");
  for (const char* target : {"trtllm", "vllm"}) {
    const bool vllm = std::string(target) == "vllm";
    for (uint64_t p : {8u, 16u}) {
      const std::string layout = std::string("--target ") + target + " --tp-size " + std::to_string(p) +
                                 " --tp-rank 3 --ep-size " + std::to_string(p);
      const auto r = run_wmap("plan " + shell_quote(ckpt.string()) + " " + layout);
      ASSERT_EQ(r.exit_code, 0) << layout << "\n" << r.err;
      const uint64_t consumed = vllm ? 1766 + 256 / p * 6 * 58 : 1799 + 256 / p * 6 * 59;
      const uint64_t skipped = vllm ? 1571 : 2;
      EXPECT_NE(
          r.out.find("from " + std::to_string(consumed) + " of 92425 checkpoint tensors, " + std::to_string(skipped) +
                     " skipped, " + std::to_string(92425 - skipped - consumed) + " left to other ranks"),
          std::string::npos)
          << layout << "\n"
          << r.out;
    }
  }
}

}  // namespace
}  // namespace wmap::test
