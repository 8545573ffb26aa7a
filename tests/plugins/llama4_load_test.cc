// Llama 4 text under both targets (Llama4ForConditionalGeneration with its vision tower declared
// skipped, and Llama4ForCausalLM), loaded through the CLI and compared bit for bit, every rank,
// with the numpy reference written from docs/families/llama4-qwen3next.md section 1 alone
// (tests/python/llama4_reference.py); and the layouts the engines cannot load, refused.
#include <gtest/gtest.h>

#include "test_util.h"

namespace wmap::test {
namespace {

std::filesystem::path synth_llama4(const TempDir& dir, const std::string& family, const std::string& preset) {
  const auto ckpt = dir / (family + "_" + preset);
  auto r = run_wmap("synth " + family + " " + shell_quote(ckpt.string()) + " --preset " + preset);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return ckpt;
}

// tiny: Maverick-like (layer 0 dense, layer 1 MoE), 2 KV heads (duplicated at tp 4), 4 experts.
TEST(Llama4Load, VllmBitExactAtEveryRankWithRotaryHalvesAndThePrefixKept) {
  TempDir dir;
  for (const char* family : {"llama4", "llama4_text"}) {
    const auto tiny = synth_llama4(dir, family, "tiny");
    for (uint32_t t : {1u, 2u, 4u}) {
      expect_every_rank_matches(tiny, t, "--target vllm");
      if (t > 1) expect_every_rank_matches(tiny, t, "--target vllm --ep-size " + std::to_string(t));
    }
  }
  expect_every_rank_matches(synth_llama4(dir, "llama4", "small"), 4, "--target vllm");
}

TEST(Llama4Load, TrtllmBitExactAtEveryRankUpFirstAndAttentionDp) {
  TempDir dir;
  for (const char* family : {"llama4", "llama4_text"}) {
    const auto tiny = synth_llama4(dir, family, "tiny");
    for (uint32_t t : {1u, 2u, 4u}) expect_every_rank_matches(tiny, t, "--target trtllm");
    expect_every_rank_matches(tiny, 4, "--target trtllm --ep-size 2");
    expect_every_rank_matches(tiny, 4, "--target trtllm --ep-size 4");
    expect_every_rank_matches(tiny, 4, "--target trtllm --ep-size 2 --attention-dp");
  }
  expect_every_rank_matches(synth_llama4(dir, "llama4", "small"), 4, "--target trtllm --ep-size 2");
}

TEST(Llama4Load, VisionTowerIsDeclaredSkippedAndNamesFollowTheTarget) {
  TempDir dir;
  const std::string ckpt = shell_quote(synth_llama4(dir, "llama4", "tiny").string());
  const auto vllm = run_wmap("plan " + ckpt + " --target vllm --json");
  ASSERT_EQ(vllm.exit_code, 0) << vllm.err;
  EXPECT_NE(vllm.out.find("\"name\":\"language_model.model.layers.1.feed_forward.experts.w13_weight\""),
            std::string::npos);
  const auto trt = run_wmap("plan " + ckpt);
  ASSERT_EQ(trt.exit_code, 0) << trt.err;
  EXPECT_NE(trt.out.find("3 skipped"), std::string::npos) << trt.out;  // vision_model.*, multi_modal_projector.*
  const auto trt_json = run_wmap("plan " + ckpt + " --json");
  EXPECT_NE(trt_json.out.find("\"name\":\"model.layers.1.feed_forward.experts.backend.w3_w1_weight\""),
            std::string::npos);
  EXPECT_EQ(trt_json.out.find("\"name\":\"language_model."), std::string::npos);
}

TEST(Llama4Load, LayoutsTheEnginesCannotLoadAreRefusedWithTheReason) {
  TempDir dir;
  const std::string ckpt = shell_quote(synth_llama4(dir, "llama4", "tiny").string());
  const struct {
    std::string args, says;
  } cases[] = {
      {"--target vllm --tp-size 4 --tp-rank 0 --ep-size 2", "ep_size"},
      {"--tp-size 8 --tp-rank 0", "4 attention heads cannot be split over tp_size 8"},
      {"--moe-backend cutlass", "moe_backend 'cutlass': Llama 4's BF16 experts have one layout per target"},
      {"--target vllm --tp-size 3 --tp-rank 0", "tp_size 3"},
  };
  for (const auto& c : cases) {
    const auto r = run_wmap("plan " + ckpt + " " + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
  }
}

}  // namespace
}  // namespace wmap::test
