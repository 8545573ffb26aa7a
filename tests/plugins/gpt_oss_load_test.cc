// gpt-oss under both targets, loaded through the CLI and compared bit for bit, every rank, with
// the numpy reference written from docs/families/gpt-oss.md alone (tests/python/
// gpt_oss_reference.py); and each layout the engines cannot load refused with the reason.
#include <gtest/gtest.h>

#include "test_util.h"

namespace wmap::test {
namespace {

std::filesystem::path synth_gpt_oss(const TempDir& dir, const std::string& preset, const std::string& flags = "") {
  const auto ckpt = dir / ("gpt_oss_" + preset);
  auto r = run_wmap("synth gpt_oss " + shell_quote(ckpt.string()) + " --preset " + preset + " " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return ckpt;
}

// tiny: H 64 (padded to 128 by TensorRT-LLM), I 96 = 3 MXFP4 groups (uneven over 2 and 4 ranks;
// vLLM's rank 3 of 4 holds no rows), 4 experts, 2 KV heads.
TEST(GptOssLoad, VllmTritonLayoutBitExactAtEveryRank) {
  TempDir dir;
  const auto tiny = synth_gpt_oss(dir, "tiny");
  for (uint32_t t : {1u, 2u, 4u}) {
    expect_every_rank_matches(tiny, t, "--target vllm");
    if (t > 1) expect_every_rank_matches(tiny, t, "--target vllm --ep-size " + std::to_string(t));
  }
  expect_every_rank_matches(synth_gpt_oss(dir, "small"), 4, "--target vllm");
}

TEST(GptOssLoad, TrtllmCutlassLayoutBitExactAtEveryRank) {
  TempDir dir;
  const auto tiny = synth_gpt_oss(dir, "tiny");
  expect_every_rank_matches(tiny, 1, "--target trtllm");
  expect_every_rank_matches(tiny, 2, "--target trtllm");
  expect_every_rank_matches(tiny, 2, "--target trtllm --ep-size 2");
  // More ranks than KV heads only with attention replicated (attention-DP).
  expect_every_rank_matches(tiny, 4, "--target trtllm --attention-dp --ep-size 2");
  expect_every_rank_matches(tiny, 4, "--target trtllm --attention-dp --ep-size 4");
  const auto small = synth_gpt_oss(dir, "small");
  expect_every_rank_matches(small, 4, "--target trtllm");
  expect_every_rank_matches(small, 4, "--target trtllm --ep-size 2");
}

TEST(GptOssLoad, MoreRanksThanKvHeadsIsRefusedForTrtllmAsTheEngineWouldFail) {
  TempDir dir;
  const auto r = run_wmap("plan " + shell_quote(synth_gpt_oss(dir, "tiny").string()) + " --tp-size 4 --tp-rank 0");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("num_key_value_heads: 2 KV heads do not split over tp_size 4: TensorRT-LLM does not "
                       "duplicate gpt-oss KV heads"),
            std::string::npos)
      << r.err;
}

TEST(GptOssLoad, VllmExpertParallelOtherThanOneOrTpIsRefused) {
  TempDir dir;
  const auto r = run_wmap("plan " + shell_quote(synth_gpt_oss(dir, "tiny").string()) +
                          " --target vllm --tp-size 4 --tp-rank 0 --ep-size 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("ep_size"), std::string::npos) << r.err;
}

TEST(GptOssLoad, MoeBackendsNotServedAreRefusedByName) {
  TempDir dir;
  const std::string ckpt = shell_quote(synth_gpt_oss(dir, "tiny").string());
  const struct {
    std::string args, says;
  } cases[] = {
      {"--target trtllm --moe-backend trtllmgen", "moe_backend 'trtllmgen' is not served yet"},
      {"--target trtllm --moe-backend triton", "moe_backend 'triton' is not served"},
      {"--target trtllm --moe-backend wfp4a16", "moe_backend 'wfp4a16' (Hopper CUTLASS W4A16) is not served"},
      {"--target vllm --moe-backend marlin", "moe_backend 'marlin' is a vLLM gpt-oss MoE backend whose padding"},
      {"--target vllm --moe-backend cutlass", "moe_backend 'cutlass' is not a gpt-oss MoE backend of target vllm"},
  };
  for (const auto& c : cases) {
    const auto r = run_wmap("plan " + ckpt + " " + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
  }
  // A family without a backend choice refuses any name.
  TempDir llama_dir;
  const auto llama = llama_dir / "llama";
  ASSERT_EQ(run_wmap("synth llama " + shell_quote(llama.string())).exit_code, 0);
  const auto r = run_wmap("plan " + shell_quote(llama.string()) + " --moe-backend cutlass");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("does not serve moe_backend 'cutlass' for LlamaForCausalLM: it has no MoE backend choice"),
            std::string::npos)
      << r.err;
}

// The backend is part of the layout: in the plan's JSON (and so its id), with each padded piece
// and its transform.
TEST(GptOssLoad, PlanJsonNamesTheBackendThePaddingAndTheSwizzle) {
  TempDir dir;
  const std::string ckpt = shell_quote(synth_gpt_oss(dir, "tiny").string());
  const auto trt = run_wmap("plan " + ckpt + " --tp-size 2 --tp-rank 1 --json");
  ASSERT_EQ(trt.exit_code, 0) << trt.err;
  EXPECT_NE(trt.out.find("\"moe_backend\":\"cutlass\""), std::string::npos);
  EXPECT_NE(trt.out.find("\"transform\":\"block_scale_interleave_128x4\""), std::string::npos);
  EXPECT_NE(trt.out.find("\"transform\":\"bf16_to_f32\""), std::string::npos);
  // w3_w1: 4 experts x [up; gate] (the stream dim walked backwards), 128 rows a rank (I 96 padded
  // to 256 before the split), H 64 -> 128 (4 groups of 16 bytes).
  EXPECT_NE(trt.out.find("\"pad\":[4,2,128,4,16],\"reverse\":[2]"), std::string::npos);
  const auto vllm = run_wmap("plan " + ckpt + " --tp-size 2 --tp-rank 1 --json --target vllm");
  ASSERT_EQ(vllm.exit_code, 0) << vllm.err;
  EXPECT_NE(vllm.out.find("\"moe_backend\":\"triton\""), std::string::npos);
  // w13: rows [64, 96) x 2 interleaved -> 64 rows of a 2 * rup(48, 64) = 128-row parameter.
  EXPECT_NE(vllm.out.find("\"pad\":[4,128,2,16]"), std::string::npos);
  const auto id = [](const std::string& json) { return json.substr(json.find("\"plan_id\""), 76); };
  EXPECT_NE(id(trt.out), id(vllm.out));
}

// Offline, from a saved catalog and config.json alone: the same plan, the same id.
TEST(GptOssLoad, PlansOfflineFromASavedCatalogWithTheSameId) {
  TempDir dir;
  const auto ckpt = synth_gpt_oss(dir, "tiny");
  const auto catalog = dir / "gpt_oss.catalog";
  ASSERT_EQ(
      run_wmap("inspect " + shell_quote(ckpt.string()) + " --save-catalog " + shell_quote(catalog.string())).exit_code,
      0);
  for (const char* target : {"trtllm", "vllm"}) {
    const std::string layout = std::string(" --target ") + target + " --tp-size 2 --tp-rank 1 --json";
    const auto online = run_wmap("plan " + shell_quote(ckpt.string()) + layout);
    const auto offline = run_wmap("plan --catalog " + shell_quote(catalog.string()) + " --config " +
                                  shell_quote((ckpt / "config.json").string()) + layout);
    ASSERT_EQ(offline.exit_code, 0) << offline.err;
    EXPECT_EQ(online.out.substr(0, 120), offline.out.substr(0, 120)) << "format, version and plan id";
  }
}

TEST(GptOssLoad, NonMxfp4CheckpointsAreRefusedNamingTheField) {
  TempDir dir;
  const auto ckpt = synth_gpt_oss(dir, "tiny");
  std::string config = read_file(ckpt / "config.json");
  const auto at = config.find("\"mxfp4\"");
  ASSERT_NE(at, std::string::npos);
  config.replace(at, 7, "\"fp8\"");
  write_file(ckpt / "config.json", config);
  const auto r = run_wmap("plan " + shell_quote(ckpt.string()));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("quantization_config.quant_method: 'fp8': only the MXFP4 gpt-oss checkpoints"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace wmap::test
