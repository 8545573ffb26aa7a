// Phi-3 (Phi3ForCausalLM: qkv_proj and gate_up_proj fused in the checkpoint) under both targets,
// loaded through the CLI and compared bit for bit, every rank, with the numpy reference written
// from docs/families/glm-dsv32-phi3-kimi.md section 3 alone (tests/python/phi3_reference.py);
// the layouts TensorRT-LLM's Phi-3 loader cannot load, refused with the reason; and the real
// Phi-3-mini layout planned complete.
#include <gtest/gtest.h>

#include "test_util.h"

namespace wmap::test {
namespace {

std::filesystem::path synth_phi3(const TempDir& dir, const std::string& name, const std::string& args) {
  return synth_checkpoint(dir.path(), "phi3", name, args);
}

// tiny: 8 heads, 2 KV heads (duplicated at T = 4 under vllm), vocabulary 250 (uneven over 4),
// intermediate 176. `mha`: 4 KV heads = T at 4 (trtllm's case). `wide_head`: head_dim 16 with
// hidden 64 (nh * hd = 128 != H: q and k/v cut where vLLM cuts them).
TEST(Phi3Load, VllmBitExactAtEveryRankFusedPartsCutBeforeTheSplit) {
  TempDir dir;
  const auto tiny = synth_phi3(dir, "tiny", "--preset tiny");
  for (uint32_t t : {1u, 2u, 4u}) expect_every_rank_matches(tiny, t, "--target vllm");
  expect_every_rank_matches(synth_phi3(dir, "wide_head", "--preset tiny --head-dim 16"), 2, "--target vllm");
  expect_every_rank_matches(synth_phi3(dir, "small", "--preset small --tie-embeddings"), 4, "--target vllm");
}

TEST(Phi3Load, TrtllmBitExactAtEveryRankWithoutKvDuplication) {
  TempDir dir;
  const auto tiny = synth_phi3(dir, "tiny", "--preset tiny");
  for (uint32_t t : {1u, 2u}) expect_every_rank_matches(tiny, t, "--target trtllm");
  expect_every_rank_matches(synth_phi3(dir, "mha", "--preset tiny --kv-heads 4"), 4, "--target trtllm");
  expect_every_rank_matches(synth_phi3(dir, "small", "--preset small --tie-embeddings"), 2, "--target trtllm");
}

TEST(Phi3Load, LayoutsTheEnginesCannotLoadAreRefusedWithTheReason) {
  TempDir dir;
  const std::string tiny = shell_quote(synth_phi3(dir, "tiny", "--preset tiny").string());
  const std::string wide = shell_quote(synth_phi3(dir, "wide", "--preset tiny --head-dim 16").string());
  const struct {
    std::string ckpt, args, says;
  } cases[] = {
      {tiny, "--tp-size 4 --tp-rank 1",
       "2 KV heads cannot be split over tp_size 4 under target trtllm: its Phi-3 loader "
       "(modeling_phi3.py Phi3ForCausalLM.load_weights) does not duplicate KV heads"},
      {wide, "--target trtllm", "TensorRT-LLM's Phi-3 loader cuts q at hidden_size"},
      {tiny, "--target vllm --tp-size 3 --tp-rank 0", "tp_size 3"},
      {tiny, "--tp-size 2 --tp-rank 0 --attention-dp", "attention_dp has no meaning for a dense model"},
  };
  for (const auto& c : cases) {
    const auto r = run_wmap("plan " + c.ckpt + " " + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
  }
  // A quantised Phi-3 is refused by name, not loaded with its scales left behind.
  const auto cfg_path = dir / "tiny" / "config.json";
  std::string cfg = read_file(cfg_path);
  cfg.insert(cfg.find('{') + 1, "\n  \"quantization_config\": {\"quant_method\": \"fp8\"},");
  write_file(cfg_path, cfg);
  const auto q = run_wmap("plan " + tiny + " --target vllm");
  EXPECT_NE(q.exit_code, 0);
  EXPECT_NE(q.err.find("quantised Phi3ForCausalLM checkpoints (quant_method 'fp8') are not served"), std::string::npos)
      << q.err;
}

// The real Phi-3-mini-4k-instruct layout (tests/data/layouts/phi-3-mini-4k-instruct: 32 heads,
// 32 KV heads, hd 96, I 8192, V 32064) as sparse files: complete under both targets, with the
// parameter bytes per rank computed here from the rules (section 3), not from our output.
TEST(Phi3Load, RealPhi3MiniLayoutPlansCompleteUnderBothTargets) {
  TempDir dir;
  const auto ckpt = dir / "phi3";
  const auto built = run_command(
      shell_quote(python()) + " " + shell_quote((source_dir() / "tests/python/sparse_layout.py").string()) + " " +
      shell_quote((testdata_dir() / "layouts/phi-3-mini-4k-instruct").string()) + " " + shell_quote(ckpt.string()));
  ASSERT_EQ(built.exit_code, 0) << built.err;
  const uint64_t H = 3072, hd = 96, nh = 32, nkv = 32, I = 8192, V = 32064, L = 32, b = 2;
  for (const char* target : {"vllm", "trtllm"}) {
    for (uint64_t t : {1u, 8u}) {
      const auto r = run_wmap("plan " + shell_quote(ckpt.string()) + " --target " + target + " --tp-size " +
                              std::to_string(t) + " --tp-rank " + std::to_string(t - 1));
      ASSERT_EQ(r.exit_code, 0) << target << " " << t << "\n" << r.err;
      EXPECT_NE(r.out.find("plan: complete: "), std::string::npos) << r.out;
      // Per layer: qkv (nh/t + 2 nkv/t) hd x H, o H x nh hd/t, gate_up 2I/t x H, down H x I/t, 2 norms.
      const uint64_t layer = ((nh + 2 * nkv) / t * hd * H + H * nh * hd / t + 2 * I / t * H + H * I / t + 2 * H) * b;
      // Vocabulary: vllm pads to 64 then splits (32064 is a multiple of 64); trtllm ceil(V/t) rows.
      const uint64_t vocab_rows = std::string(target) == "vllm" ? V / t : (V + t - 1) / t;
      const uint64_t total = L * layer + H * b + 2 * vocab_rows * H * b;
      EXPECT_NE(r.out.find("(" + std::to_string(total) + " bytes)"), std::string::npos) << target << " " << t << "\n"
                                                                                        << r.out;
    }
  }
}

}  // namespace
}  // namespace wmap::test
