// Kimi K2 (DeepseekV3ForCausalLM, model_type kimi_k2): every DeepSeek-V3 rule, with a
// rotary_emb.inv_freq tensor in every layer that no engine loads and no MTP layer
// (docs/families/glm-dsv32-phi3-kimi.md section 4). `wmap synth kimi_k2` (12 experts, BF16 or
// --fp8) loaded through the CLI and compared bit for bit, every rank, with the numpy reference
// (tests/python/reference.py's DeepSeek-V3 builder: the inv_freq keys are never read).
#include <gtest/gtest.h>

#include "test_util.h"

namespace wmap::test {
namespace {

std::filesystem::path synth_kimi(const TempDir& dir, const std::string& name, const std::string& args) {
  return synth_checkpoint(dir.path(), "kimi_k2", name, args);
}

TEST(KimiK2Load, BitExactAtEveryRankUnderBothTargetsWithInvFreqIgnored) {
  TempDir dir;
  const auto bf16 = synth_kimi(dir, "bf16", ""), fp8 = synth_kimi(dir, "fp8", "--fp8");
  for (uint32_t t : {1u, 2u}) {
    expect_every_rank_matches(bf16, t, "--target vllm");
    expect_every_rank_matches(bf16, t, "--target vllm --ep-size " + std::to_string(t));
  }
  expect_every_rank_matches(fp8, 1, "--target vllm");
  for (const auto& ckpt : {bf16, fp8}) {
    expect_every_rank_matches(ckpt, 2, "--target trtllm");
    expect_every_rank_matches(ckpt, 4, "--target trtllm --ep-size 2");
    expect_every_rank_matches(ckpt, 4, "--target trtllm --ep-size 4 --attention-dp");
  }
  // The 3 layers' inv_freq are ignored, nothing is left unconsumed.
  for (const char* target : {"trtllm", "vllm"}) {
    const auto r = run_wmap("plan " + shell_quote(bf16.string()) + " --target " + target);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("checkpoint tensors, 3 ignored\n"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace wmap::test
