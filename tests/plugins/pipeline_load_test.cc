// Pipeline parallelism (Layout::pp_size, PipelineSpec): every stage of every family at PP 2 and
// 3 with an uneven layer count, under both targets, loaded through the CLI and compared bit for
// bit with the independent numpy reference (tests/python/reference.py keep_stage, written from
// each engine's split rule); TP x PP layouts; what a stage reads; the partition override; and
// the errors a user gets for a layout that does not fit.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "test_util.h"

namespace wmap::test {
namespace {

struct StageCase {
  std::string family;
  std::string synth_flags;
};

std::string name_of(const StageCase& c) {
  std::string n = c.family;
  for (char& ch : n) {
    if (ch == '_') ch = 'X';
  }
  return n + (c.synth_flags.find("--fp8") != std::string::npos ? "Fp8" : "") +
         (c.synth_flags.find("--tie") != std::string::npos ? "Tied" : "");
}

nlohmann::json plan_json(const std::filesystem::path& ckpt, const std::string& layout) {
  auto r = run_wmap("plan " + shell_quote(ckpt.string()) + " --json " + layout);
  EXPECT_EQ(r.exit_code, 0) << layout << "\n" << r.err;
  return nlohmann::json::parse(r.out, nullptr, false);
}

std::set<std::string> names_of(const nlohmann::json& plan) {
  std::set<std::string> out;
  for (const auto& p : plan["params"]) out.insert(p["name"].get<std::string>());
  return out;
}

class PipelineStages : public ::testing::TestWithParam<StageCase> {};

// Every stage at PP 2 and PP 3 of 7 layers, each target: 4+3 under both, and 3+2+2 under trtllm
// (torch.tensor_split) but 2+3+2 under vllm (get_pp_indices), so a stage that took the other
// engine's split fails; the stages together hold every parameter of the unsplit model exactly
// once (the embedding twice where vLLM ties it).
TEST_P(PipelineStages, EveryStageBitExactAtPp2And3BothTargets) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), GetParam().family, "ckpt", GetParam().synth_flags);
  for (const std::string target : {"trtllm", "vllm"}) {
    const std::string t = " --target " + target;
    const std::set<std::string> whole = names_of(plan_json(ckpt, t));
    for (uint32_t pp : {2u, 3u}) {
      std::multiset<std::string> together;
      for (uint32_t s = 0; s < pp; ++s) {
        const std::string layout = "--pp-size " + std::to_string(pp) + " --pp-rank " + std::to_string(s) + t;
        expect_rank_matches(ckpt, 1, 0, layout);
        for (const auto& n : names_of(plan_json(ckpt, "--tp-size 1 " + layout))) together.insert(n);
      }
      for (const auto& n : whole) {
        const size_t copies = together.count(n);
        const bool tied_embedding_vllm = target == "vllm" && n.find("embed_tokens.weight") != std::string::npos &&
                                         GetParam().synth_flags.find("--tie") != std::string::npos;
        EXPECT_EQ(copies, tied_embedding_vllm ? 2u : 1u) << n << " pp " << pp << t;
      }
      EXPECT_EQ(std::set<std::string>(together.begin(), together.end()), whole) << "pp " << pp << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PipelineStages,
                         ::testing::Values(StageCase{"llama", "--layers 7"},
                                           StageCase{"qwen3", "--layers 7 --tie-embeddings"},
                                           StageCase{"qwen2", "--layers 7"}, StageCase{"qwen3_moe", "--layers 7"},
                                           StageCase{"mixtral", "--layers 7"}, StageCase{"phi3", "--layers 7"},
                                           StageCase{"deepseek_v3", "--layers 7"},
                                           StageCase{"deepseek_v3", "--layers 7 --fp8"},
                                           StageCase{"kimi_k2", "--layers 7"}, StageCase{"glm4_moe", "--layers 7"},
                                           StageCase{"deepseek_v32", "--layers 7"}, StageCase{"gpt_oss", "--layers 7"},
                                           StageCase{"llama4", "--layers 7"}, StageCase{"llama4_text", "--layers 7"},
                                           StageCase{"qwen3_next", "--layers 7"}),
                         [](const auto& info) { return name_of(info.param); });

// TP x PP: every rank of tp 2 x pp 2 (and EP where the family has experts), both targets.
TEST(PipelineLayouts, TensorTimesPipelineEveryRankBothTargets) {
  TempDir dir;
  for (const auto& [family, flags, extra] :
       {std::tuple<std::string, std::string, std::string>{"llama", "--layers 5", ""},
        {"qwen3", "--layers 3 --tie-embeddings", ""},
        {"qwen3_moe", "--layers 5", "--ep-size 2"},
        // vLLM refuses FP8 splits that cut a 128 block: dims that hold whole blocks per rank.
        {"deepseek_v3", "--layers 5 --fp8 --heads 8 --intermediate 512 --moe-intermediate 512", "--ep-size 2"},
        {"gpt_oss", "--layers 3", ""}}) {
    const auto ckpt = synth_checkpoint(dir.path(), family, family + "_tp_pp", flags);
    for (const std::string target : {"trtllm", "vllm"}) {
      for (uint32_t s = 0; s < 2; ++s) {
        expect_every_rank_matches(ckpt, 2,
                                  "--pp-size 2 --pp-rank " + std::to_string(s) + " --target " + target + " " + extra);
      }
    }
  }
}

// The engines split an uneven count differently: 4 layers over 3 stages are 2+1+1 in
// TensorRT-LLM (torch.tensor_split) and 1+2+1 in vLLM (get_pp_indices); an explicit partition
// (VLLM_PP_LAYER_PARTITION / pp_partition) overrides both.
TEST(PipelineLayouts, EachTargetsSplitAndThePartitionOverride) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), "llama", "ckpt", "--layers 4");
  auto layers_of = [&](const std::string& layout) {
    std::set<std::string> layers;
    for (const auto& n : names_of(plan_json(ckpt, layout))) {
      if (n.rfind("model.layers.", 0) == 0) layers.insert(n.substr(13, n.find('.', 13) - 13));
    }
    return layers;
  };
  using S = std::set<std::string>;
  EXPECT_EQ(layers_of("--pp-size 3 --pp-rank 0"), (S{"0", "1"}));
  EXPECT_EQ(layers_of("--pp-size 3 --pp-rank 1"), (S{"2"}));
  EXPECT_EQ(layers_of("--pp-size 3 --pp-rank 0 --target vllm"), (S{"0"}));
  EXPECT_EQ(layers_of("--pp-size 3 --pp-rank 1 --target vllm"), (S{"1", "2"}));
  EXPECT_EQ(layers_of("--pp-size 3 --pp-rank 2 --target vllm"), (S{"3"}));
  EXPECT_EQ(layers_of("--pp-size 3 --pp-rank 2 --pp-partition 1,0,3"), (S{"1", "2", "3"}));
  EXPECT_EQ(layers_of("--pp-size 3 --pp-rank 1 --pp-partition 1,0,3 --target vllm"), S{});
  for (const std::string target : {"trtllm", "vllm"}) {
    for (uint32_t s = 0; s < 3; ++s) {
      expect_rank_matches(ckpt, 1, 0,
                          "--pp-size 3 --pp-rank " + std::to_string(s) + " --pp-partition 1,0,3 --target " + target);
    }
  }
  // The layout names the stage and the partition; the plan id differs per stage.
  const auto plan = plan_json(ckpt, "--pp-size 3 --pp-rank 2 --pp-partition 1,0,3");
  EXPECT_EQ(plan["layout"]["pp_size"], 3);
  EXPECT_EQ(plan["layout"]["pp_rank"], 2);
  EXPECT_EQ(plan["layout"]["pp_partition"], nlohmann::json::parse("[1,0,3]"));
  EXPECT_NE(plan["plan_id"], plan_json(ckpt, "--pp-size 3 --pp-rank 1 --pp-partition 1,0,3")["plan_id"]);
}

// A stage reads only its own layers' bytes: the other stages' tensors are left to other ranks
// (consumed, never read), and the bytes of the stages add up to the whole model's.
TEST(PipelineLayouts, AStageReadsOnlyItsOwnTensors) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), "qwen3_moe", "ckpt", "--layers 5 --shards 5");
  const uint64_t total = plan_json(ckpt, "")["bytes_to_load"];
  uint64_t sum = 0;
  for (uint32_t s = 0; s < 3; ++s) {
    const auto plan = plan_json(ckpt, "--pp-size 3 --pp-rank " + std::to_string(s));
    const std::string coverage = plan["coverage"];
    EXPECT_NE(coverage.find("complete"), std::string::npos) << coverage;
    EXPECT_NE(coverage.find("left to other ranks"), std::string::npos) << coverage;
    const uint64_t bytes = plan["bytes_to_load"];
    sum += bytes;
    EXPECT_LT(bytes, total / 2) << s;
  }
  EXPECT_EQ(sum, total);
}

// MTP layers run after the decoder stack: on the last stage only (TensorRT-LLM; vLLM loads none).
TEST(PipelineLayouts, MtpLayersOnTheLastStage) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), "deepseek_v3", "ckpt", "--layers 4");
  const auto first = names_of(plan_json(ckpt, "--pp-size 2 --pp-rank 0"));
  const auto last = names_of(plan_json(ckpt, "--pp-size 2 --pp-rank 1"));
  EXPECT_EQ(first.count("model.layers.4.eh_proj.weight"), 0u);
  EXPECT_EQ(last.count("model.layers.4.eh_proj.weight"), 1u);
  EXPECT_EQ(first.count("model.embed_tokens.weight"), 1u);
  EXPECT_EQ(last.count("model.embed_tokens.weight"), 0u);
  EXPECT_EQ(last.count("lm_head.weight"), 1u);
}

// Tied embeddings: vLLM keeps embed_tokens on the last stage (its lm_head shares it);
// TensorRT-LLM's last stage holds lm_head.weight filled from the embedding's tensor.
TEST(PipelineLayouts, TiedEmbeddingsOnTheLastStagePerTarget) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), "qwen3", "ckpt", "--layers 4 --tie-embeddings");
  const auto trt_last = names_of(plan_json(ckpt, "--pp-size 2 --pp-rank 1"));
  EXPECT_EQ(trt_last.count("lm_head.weight"), 1u);
  EXPECT_EQ(trt_last.count("model.embed_tokens.weight"), 0u);
  const auto vllm_last = names_of(plan_json(ckpt, "--pp-size 2 --pp-rank 1 --target vllm"));
  EXPECT_EQ(vllm_last.count("lm_head.weight"), 0u);
  EXPECT_EQ(vllm_last.count("model.embed_tokens.weight"), 1u);
  const auto vllm_first = names_of(plan_json(ckpt, "--pp-size 2 --pp-rank 0 --target vllm"));
  EXPECT_EQ(vllm_first.count("model.embed_tokens.weight"), 1u);
  EXPECT_EQ(vllm_first.count("model.norm.weight"), 0u);
}

TEST(PipelineLayouts, BadLayoutsAreUsageErrorsNamingTheSettings) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), "llama", "ckpt", "--layers 4");
  const std::string c = shell_quote(ckpt.string());
  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--pp-size 2 --pp-rank 2", "pp_rank 2 is not below pp_size 2"},
           {"--pp-size 0", "pp_size must be at least 1"},
           {"--pp-size 3 --pp-partition 2,2", "pp_partition has 2 stages, pp_size is 3"},
           {"--pp-size 2 --pp-partition 3,2", "pp_partition adds up to 5 layers; the model has 4 decoder layers"},
           {"--pp-size 2 --pp-partition 2,x", "--pp-partition '2,x': expected layer counts separated by commas"}}) {
    const auto r = run_wmap("plan " + c + " " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << flags << "\n" << r.err;
  }
}

}  // namespace
}  // namespace wmap::test
