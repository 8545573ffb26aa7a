// Plans for real published layouts (tests/data/layouts rebuilt as sparse files: real
// headers, no data): they validate completely, or report exactly what is not supported.
#include <gtest/gtest.h>

#include <numeric>

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
    // The coverage certificate: every parameter's bytes written exactly once, quantised weights
    // (DeepSeek-R1's FP8 linears) with their scales.
    EXPECT_NE(r.out.find("certificate: certified: every destination byte of "), std::string::npos) << r.out;
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

// gpt-oss-120b (reconstructed: tests/data/layouts/gpt-oss-120b) and Llama-4-Maverick (derived from
// TensorRT-LLM's test config, 48 layers) plan complete at TP8/EP8 and TP8/EP1 under both targets;
// each rank's parameter count and bytes are computed here from docs/families/ rules, not read
// from a plan.
struct RankTotals {
  uint64_t params, bytes;
};
uint64_t rup(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

// gpt-oss-120b: E 128, 36 layers; gpt-oss-20b: E 32, 24 layers.
RankTotals gpt_oss(uint64_t E, uint64_t L, bool trt, uint64_t T, uint64_t P) {
  const uint64_t H = 2880, I = 2880, nh = 64, nkv = 8, hd = 64, V = 201088;
  const uint64_t El = E / P, tm = T / P;
  const uint64_t vocab_rows = trt ? (V + T - 1) / T : rup(V, 64) / T;
  const uint64_t qkv_rows = (nh / T + 2 * (nkv / T)) * hd;
  uint64_t layer = (trt ? 4 : 2) * H * 2 + qkv_rows * H * 2 + qkv_rows * 2 + H * (nh / T * hd) * 2 + H * 2 +
                   (nh / T) * (trt ? 4 : 2) + E * H * 2 + E * 2;
  if (!trt) {  // Triton: Ip = rup(I / tm, 64), H unpadded
    const uint64_t ip = rup(I / tm, 64);
    layer +=
        El * 2 * ip * H / 2 + El * 2 * ip * H / 32 + El * 2 * ip * 2 + El * H * ip / 2 + El * H * ip / 32 + El * H * 2;
  } else {  // CUTLASS: I padded to _get_weight_alignment before the split, H to 128
    const uint64_t a0 = std::lcm(std::lcm(uint64_t{128}, uint64_t{32}), tm), per = rup(I, a0) / tm;
    const uint64_t a = per % 128 ? 128 * ((per + 127) / 128) * tm : a0, ipad = rup(I, a) / tm, hp = rup(H, 128);
    layer += El * 2 * ipad * hp / 2 + El * 2 * ipad * 2 + El * 2 * ipad * hp / 32 + El * hp * ipad / 2 + El * hp * 2 +
             El * hp * ipad / 32 + El * 4;  // fake_input_scale F32 [El]
  }
  return {3 + L * (trt ? 18 : 15), 2 * vocab_rows * H * 2 + H * 2 + L * layer};
}

RankTotals maverick(uint64_t P) {
  // Both targets hold the same sizes: vocab 202048 = 64 * 8 * 394.6..., rup(V, 64) / 8 = ceil(V / 8).
  const uint64_t H = 5120, I = 8192, Im = 16384, E = 128, nh = 40, nkv = 8, hd = 128, V = 202048, L = 48, T = 8;
  const uint64_t vocab_rows = rup(V, 64) / T, qkv_rows = (nh / T + 2 * (nkv / T)) * hd;
  const uint64_t attention = 2 * H * 2 + qkv_rows * H * 2 + H * (nh / T * hd) * 2;
  const uint64_t dense = 3 * (Im / T) * H * 2;
  const uint64_t moe = E * H * 2 + (E / P) * 3 * (I / (T / P)) * H * 2 + 3 * (I / T) * H * 2;
  return {3 + (L / 2) * (4 + 2) + (L / 2) * (4 + 1 + 2 + 2),
          2 * vocab_rows * H * 2 + H * 2 + L * attention + (L / 2) * dense + (L / 2) * moe};
}

TEST_F(RealLayoutPlan, GptOss120bAndLlama4MaverickAtTp8Ep8AndTp8Ep1UnderBothTargets) {
  const auto gpt = rebuild("gpt-oss-120b"), mav = rebuild("Llama-4-Maverick-17B-128E");
  for (const char* target : {"trtllm", "vllm"}) {
    for (uint64_t P : {8u, 1u}) {
      const bool trt = std::string(target) == "trtllm";
      for (const auto& [dir, want] : {std::pair{gpt, gpt_oss(128, 36, trt, 8, P)}, std::pair{mav, maverick(P)}}) {
        const std::string layout =
            std::string("--target ") + target + " --tp-size 8 --tp-rank 3 --ep-size " + std::to_string(P);
        auto r = run_wmap("plan " + shell_quote(dir.string()) + " " + layout);
        EXPECT_EQ(r.exit_code, 0) << layout << "\n" << r.err;
        EXPECT_NE(r.out.find("plan: complete: " + std::to_string(want.params) + " parameters (" +
                             std::to_string(want.bytes) + " bytes)"),
                  std::string::npos)
            << dir.filename() << " " << layout << "\n"
            << r.out;
      }
    }
  }
}

TEST_F(RealLayoutPlan, GptOss20bAtTp1Tp2AndTp4Ep4UnderBothTargets) {
  const auto dir = rebuild("gpt-oss-20b");  // 3 shards named model-0000k-of-00002, as its converter names them
  for (const char* target : {"trtllm", "vllm"}) {
    for (const auto& [t, p] : {std::pair<uint64_t, uint64_t>{1, 1}, {2, 1}, {4, 4}}) {
      const RankTotals want = gpt_oss(32, 24, std::string(target) == "trtllm", t, p);
      const std::string layout = std::string("--target ") + target + " --tp-size " + std::to_string(t) + " --tp-rank " +
                                 std::to_string(t - 1) + " --ep-size " + std::to_string(p);
      auto r = run_wmap("plan " + shell_quote(dir.string()) + " " + layout);
      EXPECT_EQ(r.exit_code, 0) << layout << "\n" << r.err;
      EXPECT_NE(r.out.find("plan: complete: " + std::to_string(want.params) + " parameters (" +
                           std::to_string(want.bytes) + " bytes)"),
                std::string::npos)
          << layout << "\n"
          << r.out;
    }
  }
}

// Kimi-K2-Instruct (tests/data/layouts/kimi-k2-instruct: its header inventory, 139,644 tensors in
// 61 shards, 958.5 GiB): DeepseekV3ForCausalLM with 384 experts, 64 heads, no MTP layer, and a
// rotary_emb.inv_freq in every layer that no engine loads (declared ignored, never unconsumed).
// Each rank consumes the 1,343 non-expert tensors (1,404 less the 61 inv_freq) and the 6 tensors
// (3 weights, 3 FP8 scales) of each of its 384 / P experts in each of the 60 MoE layers.
TEST_F(RealLayoutPlan, KimiK2AtTp8Ep8AndTp16Ep16UnderBothTargets) {
  const auto dir = rebuild("kimi-k2-instruct");
  for (const char* target : {"trtllm", "vllm"}) {
    for (uint64_t p : {8u, 16u}) {
      const std::string layout = std::string("--target ") + target + " --tp-size " + std::to_string(p) +
                                 " --tp-rank 3 --ep-size " + std::to_string(p);
      auto r = run_wmap("plan " + shell_quote(dir.string()) + " " + layout);
      EXPECT_EQ(r.exit_code, 0) << layout << "\n" << r.err;
      const uint64_t consumed = 1343 + 384 / p * 6 * 60;
      EXPECT_NE(r.out.find("from " + std::to_string(consumed) + " of 139644 checkpoint tensors, 61 ignored, " +
                           std::to_string(139644 - 61 - consumed) + " left to other ranks"),
                std::string::npos)
          << layout << "\n"
          << r.out;
    }
  }
  auto mtp = run_wmap("plan " + shell_quote(dir.string()) + " --mtp-layers 1");
  EXPECT_NE(mtp.exit_code, 0);
  EXPECT_NE(mtp.err.find("num_nextn_predict_layers: is 0, but mtp_layers 1 asks for MTP layers"), std::string::npos)
      << mtp.err;
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
