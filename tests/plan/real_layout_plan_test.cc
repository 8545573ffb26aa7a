// Plans for real published layouts (tests/data/layouts rebuilt as sparse files: real
// headers, no data): they validate completely, or report exactly what is not supported.
#include <gtest/gtest.h>

#include "test_util.h"

namespace wmap::test {
namespace {

class RealLayoutPlan : public ::testing::Test {
 protected:
  std::filesystem::path rebuild(const std::string& layout) {
    const auto out = dir_ / layout;
    auto r = run_command(python() + " " + shell_quote((source_dir() / "tests/python/sparse_layout.py").string()) + " " +
                         shell_quote((testdata_dir() / "layouts" / layout).string()) + " " + shell_quote(out.string()));
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return out;
  }
  void expect_complete(const std::filesystem::path& dir, const std::string& layout) {
    auto r = run_wmap("plan " + shell_quote(dir.string()) + " " + layout);
    EXPECT_EQ(r.exit_code, 0) << layout << "\n" << r.err;
    EXPECT_NE(r.out.find("plan: complete"), std::string::npos) << r.out;
  }
  TempDir dir_;
};

TEST_F(RealLayoutPlan, DeepSeekR1AtTp8Ep8Tp8Ep2Mtp3AndTp1) {
  const auto dir = rebuild("deepseek-r1");
  for (const char* rank : {"0", "7"}) expect_complete(dir, std::string("--tp-size 8 --ep-size 8 --tp-rank ") + rank);
  expect_complete(dir, "--tp-size 8 --ep-size 2 --tp-rank 5 --mtp-layers 3");
  expect_complete(dir, "");
}

TEST_F(RealLayoutPlan, Mixtral8x7bThroughItsYamlMapping) {
  const auto dir = rebuild("mixtral-8x7b");
  expect_complete(dir, "--tp-size 8 --ep-size 8 --tp-rank 3");
  expect_complete(dir, "--tp-size 4 --ep-size 2 --tp-rank 1");
  expect_complete(dir, "");
}

TEST_F(RealLayoutPlan, DenseFamilies) {
  for (const char* layout : {"llama3-8b", "llama3.2-3b-instruct", "qwen2.5-14b_cogito", "qwen3-1.7b_mlx-bf16"}) {
    const auto dir = rebuild(layout);
    expect_complete(dir, "");
    expect_complete(dir, "--tp-size 2 --tp-rank 1");
  }
}

TEST_F(RealLayoutPlan, UnsupportedArchitecturesAreNamedNotGuessed) {
  // Qwen3.5-MoE (linear attention, a `model.language_model.` prefix) and DeepSeek-OCR-2 have
  // no plugin or mapping yet: the plan says so, naming the architecture.
  for (const auto& [layout, arch] : {std::pair{"qwen3.5-moe-25b-a3b-reap", "Qwen3_5MoeForConditionalGeneration"},
                                     std::pair{"deepseek-ocr2_deepseek-v2-moe", "DeepseekOCR2ForCausalLM"}}) {
    const auto dir = rebuild(layout);
    auto r = run_wmap("plan " + shell_quote(dir.string()));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(std::string("architecture '") + arch + "' is served by no plugin"), std::string::npos)
        << r.err;
  }
}

}  // namespace
}  // namespace wmap::test
