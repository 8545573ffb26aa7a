// Qwen3-Next (Qwen3NextForCausalLM) under both targets: `wmap synth qwen3_next` (key/value head
// ratio 2, 2 KV heads duplicated at 4 ranks, gated full attention every 2nd layer, MoE with a
// shared expert, an mtp.* module) loaded through the CLI and compared bit for bit, every rank,
// with the numpy reference written from docs/families/llama4-qwen3next.md section 2 alone
// (tests/python/qwen3_next_reference.py); the layouts refused with the reason; and the real
// Qwen3-Next-80B-A3B shape (tensor list generated from its config) planned complete, with the
// tensors each rank consumes counted from the rules.
#include <gtest/gtest.h>

#include "test_util.h"

namespace wmap::test {
namespace {

std::filesystem::path synth_qwen3_next(const TempDir& dir) { return synth_checkpoint(dir.path(), "qwen3_next", "q3n"); }

TEST(Qwen3NextLoad, VllmBitExactAtEveryRankGroupedRows) {
  TempDir dir;
  const auto ckpt = synth_qwen3_next(dir);
  for (uint32_t t : {1u, 2u, 4u}) expect_every_rank_matches(ckpt, t, "--target vllm");
  expect_every_rank_matches(ckpt, 4, "--target vllm --ep-size 4");
}

TEST(Qwen3NextLoad, TrtllmBitExactAtEveryRankDenseRowsAndF32Gates) {
  TempDir dir;
  const auto ckpt = synth_qwen3_next(dir);
  for (uint32_t t : {1u, 2u, 4u}) expect_every_rank_matches(ckpt, t, "--target trtllm");
  expect_every_rank_matches(ckpt, 4, "--target trtllm --ep-size 2");
  expect_every_rank_matches(ckpt, 4, "--target trtllm --ep-size 4");
  // The dense reorder is four pieces over the rank's groups; vLLM's grouped rows one.
  const auto trt = run_wmap("plan " + shell_quote(ckpt.string()) + " --tp-size 2 --tp-rank 1 --json");
  const auto at = trt.out.find("\"name\":\"model.layers.0.linear_attn.in_proj_qkvz.weight\"");
  ASSERT_NE(at, std::string::npos);
  const std::string entry = trt.out.substr(at, trt.out.find('\n', at) - at);
  size_t pieces = 0;
  for (size_t p = 0; (p = entry.find("\"source\":", p)) != std::string::npos; ++p) ++pieces;
  EXPECT_EQ(pieces, 4u) << entry;
}

TEST(Qwen3NextLoad, LayoutsTheEnginesCannotLoadAreRefusedWithTheReason) {
  TempDir dir;
  const std::string ckpt = shell_quote(synth_qwen3_next(dir).string());
  const struct {
    std::string args, says;
  } cases[] = {
      {"--tp-size 8 --tp-rank 0", "4 attention heads cannot be split over tp_size 8"},
      {"--tp-size 3 --tp-rank 0", "tp_size 3"},
      {"--tp-size 2 --tp-rank 0 --attention-dp", "attention_dp is not served for Qwen3NextForCausalLM"},
      {"--mtp-layers 1", "the tensor-parallel split of Qwen3NextMTP's fc has not been read"},
      {"--target vllm --tp-size 4 --tp-rank 0 --ep-size 2", "ep_size"},
  };
  for (const auto& c : cases) {
    const auto r = run_wmap("plan " + ckpt + " " + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
  }
  const auto cfg_path = dir / "q3n" / "config.json";
  std::string cfg = read_file(cfg_path);
  cfg.insert(cfg.find('{') + 1, "\n  \"quantization_config\": {\"quant_method\": \"fp8\"},");
  write_file(cfg_path, cfg);
  const auto q = run_wmap("plan " + ckpt);
  EXPECT_NE(q.exit_code, 0);
  EXPECT_NE(q.err.find("quantised Qwen3NextForCausalLM checkpoints (quant_method 'fp8') are not served"),
            std::string::npos)
      << q.err;
}

// Qwen3-Next-80B-A3B: 48 layers (every 4th full attention), 512 experts, 75,944 tensors with the
// mtp.* module (1,553 tensors, skipped by both). Each rank consumes the 663 other non-expert
// tensors and its 512 / P experts' 3 weights in 48 layers.
TEST(Qwen3NextLoad, RealQwen3Next80bShapePlansCompleteUnderBothTargets) {
  TempDir dir;
  const auto ckpt = dir / "q3n";
  const auto built = run_command(
      shell_quote(python()) + " " + shell_quote((source_dir() / "tests/python/sparse_layout.py").string()) + " " +
      shell_quote((testdata_dir() / "layouts/Qwen3-Next-80B-A3B").string()) + " " + shell_quote(ckpt.string()));
  ASSERT_EQ(built.exit_code, 0) << built.err;
  for (const char* target : {"trtllm", "vllm"}) {
    for (const auto& [t, p] : {std::pair<uint64_t, uint64_t>{8, 8}, {16, 16}, {8, 1}}) {
      const std::string layout = std::string("--target ") + target + " --tp-size " + std::to_string(t) +
                                 " --tp-rank 3 --ep-size " + std::to_string(p);
      const auto r = run_wmap("plan " + shell_quote(ckpt.string()) + " " + layout);
      ASSERT_EQ(r.exit_code, 0) << layout << "\n" << r.err;
      const uint64_t consumed = 663 + 512 / p * 3 * 48, others = 75944 - 1553 - consumed;
      EXPECT_NE(r.out.find("from " + std::to_string(consumed) + " of 75944 checkpoint tensors, 1553 skipped" +
                           (others ? ", " + std::to_string(others) + " left to other ranks" : std::string())),
                std::string::npos)
          << layout << "\n"
          << r.out;
    }
  }
}

}  // namespace
}  // namespace wmap::test
