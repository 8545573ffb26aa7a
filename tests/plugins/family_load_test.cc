// Every rank of every dense Llama-family checkpoint, loaded through the CLI and compared bit
// for bit with the independent numpy reference (tests/python/reference.py).
#include <gtest/gtest.h>

#include "test_util.h"

namespace wmap::test {
namespace {

struct FamilyCase {
  std::string family;
  std::string synth_flags;
};

class FamilyLoadTest : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(FamilyLoadTest, EveryRankBitExactAtTp1248) {
  TempDir dir;
  const auto ckpt = dir / "ckpt";
  auto synth = run_wmap("synth " + GetParam().family + " " + shell_quote(ckpt.string()) + " " + GetParam().synth_flags);
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  for (uint32_t t : {1u, 2u, 4u, 8u}) {
    expect_every_rank_matches(ckpt, t);
  }
}

// tiny: 8 heads, 2 KV heads (kv < T at T=4, 8), vocab 250 (not divisible by 4 or 8).
INSTANTIATE_TEST_SUITE_P(Families, FamilyLoadTest,
                         ::testing::Values(FamilyCase{"llama", "--shards 3"}, FamilyCase{"mistral", "--kv-heads 8"},
                                           FamilyCase{"qwen2", "--kv-heads 4 --vocab 251"},
                                           FamilyCase{"qwen3", "--shards 1"},
                                           FamilyCase{"llama", "--dtype F32 --intermediate 170 --vocab 13"}),
                         [](const auto& info) { return info.param.family + std::to_string(info.index); });

TEST(FamilyLoad, IoPathsAndWorkerCountsGiveTheSameBytes) {
  TempDir dir;
  const auto ckpt = dir / "ckpt";
  ASSERT_EQ(run_wmap("synth llama " + shell_quote(ckpt.string()) + " --preset small").exit_code, 0);
  for (const std::string io : {"mmap", "pread"}) {
    for (const std::string workers : {"1", "2", "8"}) {
      expect_rank_matches(ckpt, 4, 1, "", "--io " + io + " --load-workers " + workers);
    }
  }
}

TEST(FamilyLoad, BadDeviceAndIoAreUsageErrors) {
  TempDir dir;
  const auto ckpt = dir / "ckpt";
  ASSERT_EQ(run_wmap("synth llama " + shell_quote(ckpt.string())).exit_code, 0);
  auto r = run_wmap("load " + shell_quote(ckpt.string()) + " --device tpu:0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("tpu:0"), std::string::npos) << r.err;
  // Enumerated options: exit 2 naming the option, the value and the allowed values.
  for (const auto& [flag, allowed] :
       {std::pair{"--io", "{auto,mmap,pread}"}, std::pair{"--prefetch", "{auto,on,off}"},
        std::pair{"--prefault", "{auto,on,off}"}, std::pair{"--io-policy", "{native,rank-striped,exchange}"}}) {
    r = run_wmap("load " + shell_quote(ckpt.string()) + " " + flag + " carrier-pigeon");
    EXPECT_EQ(r.exit_code, 2) << flag;
    EXPECT_NE(r.err.find(std::string(flag) + ": carrier-pigeon not in " + allowed), std::string::npos) << r.err;
  }
  r = run_wmap("load " + shell_quote(ckpt.string()) + " --tp-size 2 --tp-rank 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("tp_rank 2 is not below tp_size 2"), std::string::npos) << r.err;  // the core's words
  r = run_wmap("load " + shell_quote(ckpt.string()) + " --tp-size 16 --tp-rank 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("num_attention_heads"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("config.json"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace wmap::test
