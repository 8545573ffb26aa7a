// 4-bit integer weight-only (W4A16) checkpoints for the llama family's dense linears under
// vLLM: AutoAWQ GEMM (qweight [in, out/8] in AWQ's nibble order, fused along the outputs, its
// last dim), GPTQ v1 with and without act-order (desc_act: every row-parallel rank holds the full
// scales and zeros and its slice of g_idx), compressed-tensors pack-quantized symmetric,
// asymmetric and actorder group. Every rank at T 1/2/4 bit for bit against the independent numpy
// reference (tests/python/reference.py, written from int4-nvfp4.md sections 3 to 5), 2 KV heads
// over 4 ranks duplicated; TensorRT-LLM's refusals of each named before any read.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "plan_json.h"
#include "test_util.h"

namespace wmap::test {
namespace {

const std::string kDims = "--hidden 256 --heads 4 --kv-heads 2 --head-dim 128 --intermediate 512";

struct Int4Case {
  std::string family, flags;
};

class Int4Families : public ::testing::TestWithParam<Int4Case> {};

TEST_P(Int4Families, EveryRankBitExactUnderVllm) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), GetParam().family, "ckpt", kDims + " --int4 " + GetParam().flags);
  for (uint32_t t : {1u, 2u, 4u}) expect_every_rank_matches(ckpt, t, "--target vllm");
}

// Fused AWQ / GPTQ parameters land as column blocks of their destination straight from the
// file (PlanRunner::direct_concat): through mmap copies and through pread into the destination,
// whose segments are cut at each part's rows (a whole-tensor GPTQ qweight at T 1 is one segment).
TEST(Int4, ColumnConcatenationsUnderBothReadPaths) {
  TempDir dir;
  const auto awq = synth_checkpoint(dir.path(), "qwen2", "awq", kDims + " --int4 awq");
  const auto gptq = synth_checkpoint(dir.path(), "llama", "gptq", kDims + " --int4 gptq");
  for (const char* io : {"--io pread", "--io mmap"}) {
    for (uint32_t r : {0u, 1u}) expect_rank_matches(awq, 2, r, "--target vllm", io);
    expect_rank_matches(gptq, 1, 0, "--target vllm", io);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Int4Families,
                         ::testing::Values(Int4Case{"qwen2", "awq"}, Int4Case{"qwen3", "awq --int4-group 64"},
                                           Int4Case{"llama", "gptq"}, Int4Case{"qwen3", "gptq --int4-act-order"},
                                           Int4Case{"qwen2", "ct"}, Int4Case{"qwen3", "ct --int4-asym"},
                                           Int4Case{"llama", "ct --int4-act-order --int4-asym"}),
                         [](const auto& info) {
                           std::string n = info.param.family + "_" + info.param.flags;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

// The plan names the format, fuses AWQ's outputs along its last dim, and the certificate proves
// every packed weight's scales, zeros and g_idx present.
TEST(Int4, PlanNamesTheFormatAndProvesEachWeightsCompanions) {
  TempDir dir;
  const auto gptq = synth_checkpoint(dir.path(), "qwen3", "gptq", kDims + " --int4 gptq --int4-act-order");
  const auto plan = plan_json(gptq, "--target vllm --tp-size 2");
  EXPECT_EQ(plan["quantization"]["method"], "gptq");
  EXPECT_EQ(plan["quantization"]["scheme"], "GPTQ W4A16 g128 act-order");
  EXPECT_TRUE(plan["certificate"]["ok"].get<bool>()) << plan["certificate"];
  EXPECT_GT(plan["certificate"]["scaled"].get<uint64_t>(), 0u);
  std::map<std::string, nlohmann::json> p;
  for (const auto& x : plan["params"]) p[x["name"]] = x;
  const std::string a = "model.layers.0.self_attn.", m = "model.layers.0.mlp.";
  EXPECT_EQ(p.at(a + "qkv_proj.qweight")["shape"], nlohmann::json::array({32, 512}));  // 256 inputs / 8
  EXPECT_EQ(p.at(a + "qkv_proj.qweight")["convert"]["kind"], "concat_columns");
  EXPECT_EQ(p.at(a + "qkv_proj.g_idx")["must_match"].size(), 2u);  // q and k against v
  // Row-parallel with act-order: every group's scales (512 / 128 = 4), this rank's g_idx.
  EXPECT_EQ(p.at(a + "o_proj.scales")["shape"], nlohmann::json::array({4, 256}));
  EXPECT_EQ(p.at(a + "o_proj.g_idx")["shape"], nlohmann::json::array({256}));
  EXPECT_EQ(p.at(m + "down_proj.qzeros")["shape"], nlohmann::json::array({4, 32}));
  EXPECT_EQ(p.at(m + "down_proj.qweight")["scales"],
            nlohmann::json::array({m + "down_proj.qzeros", m + "down_proj.scales", m + "down_proj.g_idx"}));

  const auto awq = synth_checkpoint(dir.path(), "qwen3", "awq", kDims + " --int4 awq");
  const auto ap = plan_json(awq, "--target vllm --tp-size 2");
  EXPECT_EQ(ap["quantization"]["scheme"], "AWQ W4A16 g128");
  p.clear();
  for (const auto& x : ap["params"]) p[x["name"]] = x;
  EXPECT_EQ(p.at(a + "qkv_proj.qweight")["shape"], nlohmann::json::array({256, 64}));  // (256 + 128 + 128) / 8
  EXPECT_EQ(p.at(a + "o_proj.scales")["shape"], nlohmann::json::array({2, 256}));      // its 2 of 4 groups
  EXPECT_EQ(p.at(a + "o_proj.scales")["dtype"], "F16");
}

// `plan --expect` accepts vLLM's parameter list: the reference's, plus the names its GPTQ MoE
// creates at construction that no load writes (w13_bias / w2_bias zeros, the g_idx sort indices).
TEST(Int4, PlanMatchesVllmsParameterList) {
  TempDir dir;
  const auto awq = synth_checkpoint(dir.path(), "qwen2", "awq", kDims + " --int4 awq");
  const auto moe = synth_checkpoint(dir.path(), "qwen3_moe", "moe",
                                    kDims + " --int4 gptq --int4-act-order --experts 4 --moe-intermediate 256");
  const auto ct =
      synth_checkpoint(dir.path(), "qwen3_moe", "ct", kDims + " --int4 ct --experts 4 --moe-intermediate 256");
  const auto ct_dense =
      synth_checkpoint(dir.path(), "qwen3", "ct_dense", kDims + " --int4 ct --int4-asym --int4-act-order");
  for (const auto& [ck, layout] : {std::pair{awq, std::string("--tp-size 2 --tp-rank 1 --target vllm")},
                                   std::pair{moe, std::string("--tp-size 2 --tp-rank 0 --target vllm")},
                                   std::pair{ct, std::string("--tp-size 2 --tp-rank 1 --ep-size 2 --target vllm")},
                                   std::pair{ct_dense, std::string("--tp-size 4 --tp-rank 3 --target vllm")}}) {
    const auto dump = run_command(python() + " " + shell_quote((source_dir() / "tests/python/reference.py").string()) +
                                  " list --json " + shell_quote(ck.string()) + " " + layout);
    ASSERT_EQ(dump.exit_code, 0) << dump.err;
    auto list = nlohmann::json::parse(dump.out);
    if (ck == moe) {
      const std::string e = "model.layers.1.mlp.experts.";
      list[e + "w13_bias"] = {{"shape", {4, 256}}, {"dtype", "F16"}};
      list[e + "w2_bias"] = {{"shape", {4, 256}}, {"dtype", "F16"}};
      list[e + "w13_g_idx_sort_indices"] = {{"shape", {4, 256}}, {"dtype", "I32"}};
      list[e + "w2_g_idx_sort_indices"] = {{"shape", {4, 128}}, {"dtype", "I32"}};
    }
    if (ck == ct) {  // without actorder: created empty, replaced after loading ([2 local experts, H or Ip])
      const std::string e = "model.layers.1.mlp.experts.";
      for (const char* w : {"w13_", "w2_"}) {
        list[e + w + "weight_g_idx"] = {{"shape", {2, 256}}, {"dtype", "I32"}};
        list[e + w + "g_idx_sort_indices"] = {{"shape", {2, 256}}, {"dtype", "I32"}};
      }
    }
    write_file(dir / "params.json", list.dump());
    const auto r = run_wmap("plan " + shell_quote(ck.string()) + " " + layout + " --expect " +
                            shell_quote((dir / "params.json").string()));
    EXPECT_EQ(r.exit_code, 0) << layout << "\n" << r.err;
  }
}

void refused(const std::filesystem::path& ckpt, const std::string& layout, const std::string& words) {
  const auto r = run_wmap("load " + shell_quote(ckpt.string()) + " " + layout);
  EXPECT_EQ(r.exit_code, 2) << layout << "\n" << r.err;
  EXPECT_NE(r.err.find(words), std::string::npos) << layout << "\n" << r.err;
  EXPECT_EQ(r.err.find("not consumed"), std::string::npos) << r.err;
}

TEST(Int4, RefusalsNameTheirReasonBeforeAnyRead) {
  TempDir dir;
  const auto awq = synth_checkpoint(dir.path(), "qwen3", "awq", kDims + " --int4 awq");
  refused(awq, "", "AutoAWQ checkpoints do not load under TensorRT-LLM");
  const auto gptq = synth_checkpoint(dir.path(), "qwen3", "gptq", kDims + " --int4 gptq");
  refused(gptq, "", "GPTQ under TensorRT-LLM is not served yet");
  const auto ct = synth_checkpoint(dir.path(), "qwen3", "ct", kDims + " --int4 ct");
  refused(ct, "", "compressed-tensors W4A16 (pack-quantized int) does not load under TensorRT-LLM");
  // Groups cut by the split: 512 / 8 = 64 inputs a rank of 128-input groups (vLLM refuses it);
  // with act-order GPTQ every rank holds every group instead, so it loads.
  const std::string eight = "--hidden 256 --heads 8 --kv-heads 2 --head-dim 64 --intermediate 512 --int4 gptq";
  const auto cut = synth_checkpoint(dir.path(), "qwen3", "cut", eight);
  refused(cut, "--target vllm --tp-size 8",
          "model.layers.0.self_attn.o_proj: this rank's inputs [0, 64) are not whole 128-input groups");
  const auto act = synth_checkpoint(dir.path(), "qwen3", "act", eight + " --int4-act-order");
  expect_every_rank_matches(act, 8, "--target vllm");
  // Asymmetric GPTQ: current vLLM refuses the config.
  auto cfg = nlohmann::json::parse(read_file(gptq / "config.json"));
  cfg["quantization_config"]["sym"] = false;
  write_file(gptq / "config.json", cfg.dump());
  refused(gptq, "--target vllm", "asymmetric GPTQ is not served: current vLLM refuses it");
  // compressed-tensors experts whose rank rows cut the groups: 384 / 2 = 192 rows of 128-input
  // groups (vLLM's "Scale groups would otherwise cross TP shard boundaries").
  const auto moe =
      synth_checkpoint(dir.path(), "qwen3_moe", "moe", kDims + " --int4 ct --experts 4 --moe-intermediate 384");
  refused(moe, "--target vllm --tp-size 2", "192 expert rows a rank are not whole 128-input groups");
  // AWQ experts with fewer rows a rank than the group: vLLM's ValueError.
  const auto small =
      synth_checkpoint(dir.path(), "qwen3_moe", "small", kDims + " --int4 awq --experts 4 --moe-intermediate 256");
  refused(small, "--target vllm --tp-size 4", "64 expert rows a rank are fewer than the group 128");
}

// Routed experts (vLLM's AutoAWQMoEMethod, AutoGPTQMoEMethod, CompressedTensorsWNA16MarlinMoEMethod):
// every rank at T 1/2 and EP; moe-intermediate 384 splits into 192 rows a rank at T 2, not whole
// 128-input groups, so AWQ's w2 group halves to 64 (each scale and zero row repeated twice) while
// GPTQ act-order and compressed-tensors actorder group keep every group, and load at T 4 too (96
// rows a rank) and EP 4 (one expert a rank).
TEST(Int4, ExpertsBitExactUnderVllm) {
  TempDir dir;
  for (const std::string flags : {"awq", "gptq --int4-act-order", "gptq", "ct", "ct --int4-act-order --int4-asym"}) {
    const std::string inter = flags == "gptq" || flags == "ct" ? "256" : "384";
    const auto ckpt = synth_checkpoint(dir.path(), "qwen3_moe", "moe_" + std::to_string(flags.size()),
                                       kDims + " --int4 " + flags + " --experts 4 --moe-intermediate " + inter);
    expect_every_rank_matches(ckpt, 1, "--target vllm");
    expect_every_rank_matches(ckpt, 2, "--target vllm");
    expect_every_rank_matches(ckpt, 2, "--target vllm --ep-size 2");
    if (flags.find("act-order") != std::string::npos) {
      expect_every_rank_matches(ckpt, 4, "--target vllm");
      expect_every_rank_matches(ckpt, 4, "--target vllm --ep-size 4");
    }
  }
}

}  // namespace
}  // namespace wmap::test
