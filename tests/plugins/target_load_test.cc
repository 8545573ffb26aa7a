// Engine targets (DESIGN.md "Targets"): every rank loaded through the CLI under `--target trtllm`
// and `--target vllm`, compared bit for bit with the independent numpy reference (which writes
// each target's rules from DESIGN.md); the layouts only one target has (attention-DP, the gcd
// split and its node cap); every error the targets add; and DeepSeek-R1's real layout per target.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

#include "checkpoint_edit.h"
#include "test_util.h"

namespace wmap::test {
namespace {

std::filesystem::path synth(const TempDir& dir, const std::string& family, const std::string& flags = "",
                            const std::string& name = "") {
  const auto ckpt = dir / (name.empty() ? family : name);
  auto r = run_wmap("synth " + family + " " + shell_quote(ckpt.string()) + " " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return ckpt;
}

// `wmap plan --json` of one rank: the plan object (fails the test when the plan does not build).
nlohmann::json plan_json(const std::filesystem::path& ckpt, const std::string& layout) {
  auto r = run_wmap("plan " + shell_quote(ckpt.string()) + " --json " + layout);
  EXPECT_EQ(r.exit_code, 0) << layout << "\n" << r.err;
  return nlohmann::json::parse(r.out, nullptr, false);
}

const nlohmann::json* param(const nlohmann::json& plan, const std::string& name) {
  for (const auto& p : plan["params"]) {
    if (p["name"] == name) return &p;
  }
  return nullptr;
}

std::vector<uint64_t> shape_of(const nlohmann::json& plan, const std::string& name) {
  const nlohmann::json* p = param(plan, name);
  EXPECT_NE(p, nullptr) << name;
  return p ? (*p)["shape"].get<std::vector<uint64_t>>() : std::vector<uint64_t>{};
}

// --- target trtllm ----------------------------------------------------------------------------

// The (T, P, K) layouts issue 14 names, BF16 and FP8: (1,1,·), (2,1,·), (2,2,·), (4,2,2), (4,4,3), and
// attention-DP.
class TrtllmDeepseek : public ::testing::TestWithParam<std::string> {};

TEST_P(TrtllmDeepseek, EveryRankBitExact) {
  TempDir dir;
  const auto ckpt = synth(dir, "deepseek_v3", GetParam());
  expect_every_rank_matches(ckpt, 1);
  expect_every_rank_matches(ckpt, 2);
  expect_every_rank_matches(ckpt, 2, "--ep-size 2");
  expect_every_rank_matches(ckpt, 4, "--ep-size 2 --mtp-layers 2");
  expect_every_rank_matches(ckpt, 4, "--ep-size 4 --mtp-layers 3");
  // Attention data parallelism at (2, 2) and (4, 4).
  expect_every_rank_matches(ckpt, 2, "--ep-size 2 --attention-dp");
  expect_every_rank_matches(ckpt, 4, "--ep-size 4 --attention-dp");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, TrtllmDeepseek, ::testing::Values("", "--fp8"), [](const auto& info) {
  return info.param.empty() ? std::string("Bf16") : std::string("Fp8");
});

TEST(TrtllmTarget, AttentionDpReplicatesAllButTheRoutedExperts) {
  TempDir dir;
  const auto ckpt = synth(dir, "deepseek_v3");
  const auto adp = plan_json(ckpt, "--tp-size 4 --ep-size 4 --tp-rank 1 --attention-dp");
  const auto tp = plan_json(ckpt, "--tp-size 4 --ep-size 4 --tp-rank 1");
  EXPECT_EQ(adp["layout"]["attention_dp"], true);
  // 4 heads of (128 + 64) rows: all on every rank under attention-DP, one head per rank otherwise.
  EXPECT_EQ(shape_of(adp, "model.layers.0.self_attn.q_b_proj.weight"), (std::vector<uint64_t>{768, 128}));
  EXPECT_EQ(shape_of(tp, "model.layers.0.self_attn.q_b_proj.weight"), (std::vector<uint64_t>{192, 128}));
  EXPECT_EQ(shape_of(adp, "model.layers.0.self_attn.k_b_proj_trans"), (std::vector<uint64_t>{4, 128, 128}));
  EXPECT_EQ(shape_of(adp, "lm_head.weight"), (std::vector<uint64_t>{250, 128}));  // whole, no padding
  EXPECT_EQ(shape_of(tp, "lm_head.weight"), (std::vector<uint64_t>{63, 128}));
  EXPECT_EQ(shape_of(adp, "model.layers.3.eh_proj.weight"), (std::vector<uint64_t>{128, 256}));
  EXPECT_EQ(shape_of(tp, "model.layers.3.eh_proj.weight"), (std::vector<uint64_t>{128, 64}));  // row-parallel
  // Routed experts keep their split: 8 experts over ep 4.
  EXPECT_EQ(shape_of(adp, "model.layers.1.mlp.experts.backend.w3_w1_weight"), (std::vector<uint64_t>{2, 256, 128}));
}

TEST(TrtllmTarget, DeepseekNamesAndTheMtpLayersOwnEmbeddings) {
  TempDir dir;
  const auto plan = plan_json(synth(dir, "deepseek_v3", "--fp8"), "--tp-size 2 --tp-rank 0");
  for (const char* name :
       {"model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale", "model.layers.0.self_attn.kv_b_proj.weight",
        "model.layers.0.self_attn.k_b_proj_trans", "model.layers.1.mlp.experts.backend.w3_w1_weight_scaling_factor",
        "model.layers.1.mlp.experts.backend.w2_weight_scaling_factor"}) {
    EXPECT_NE(param(plan, name), nullptr) << name;
  }
  for (const char* name :
       {"model.layers.0.self_attn.fused_a.weight", "model.layers.0.self_attn.o_proj.weight_scale_inv",
        // Current TensorRT-LLM dequantises an FP8 kv_b_proj to BF16: no scales for it or its splits.
        "model.layers.0.self_attn.kv_b_proj.weight_scale", "model.layers.0.self_attn.k_b_proj_trans_scale",
        "model.layers.0.self_attn.v_b_proj_scale", "model.layers.3.embed_tokens.weight",
        "model.layers.3.shared_head.head.weight"}) {
    EXPECT_EQ(param(plan, name), nullptr) << name;
  }
  EXPECT_EQ(shape_of(plan, "model.embed_tokens.weight"), (std::vector<uint64_t>{250, 128}));  // replicated
  EXPECT_EQ(plan["layout"]["target"], "trtllm");
  EXPECT_NE(plan["coverage"].get<std::string>().find("2 skipped"), std::string::npos)
      << plan["coverage"];  // the MTP copies
}

TEST(TrtllmTarget, GcdSplitOfTheDenseMlpAndItsNodeCap) {
  TempDir dir;
  // 384 = 3 blocks at T = 2: gcd(3, 2) = 1, both ranks hold the whole dense MLP.
  const auto three = synth(dir, "deepseek_v3", "--fp8 --intermediate 384", "three_blocks");
  expect_every_rank_matches(three, 2);
  EXPECT_EQ(shape_of(plan_json(three, "--tp-size 2 --tp-rank 1"), "model.layers.0.mlp.gate_up_proj.weight"),
            (std::vector<uint64_t>{768, 128}));
  // 512 = 4 blocks at T = 4: 4 parts, or 2 with two GPUs a node (ranks r and r+2 hold the same slice).
  const auto four = synth(dir, "deepseek_v3", "--fp8 --intermediate 512", "four_blocks");
  expect_every_rank_matches(four, 4, "--gpus-per-node 2");
  EXPECT_EQ(shape_of(plan_json(four, "--tp-size 4 --tp-rank 3"), "model.layers.0.mlp.gate_up_proj.weight"),
            (std::vector<uint64_t>{256, 128}));
  const auto capped = plan_json(four, "--tp-size 4 --tp-rank 3 --gpus-per-node 2");
  EXPECT_EQ(shape_of(capped, "model.layers.0.mlp.gate_up_proj.weight"), (std::vector<uint64_t>{512, 128}));
  EXPECT_EQ(capped["layout"]["gpus_per_node"], 2);
  // The shared experts (128 = 1 block) are whole on every rank; they have no node cap.
  EXPECT_EQ(shape_of(capped, "model.layers.1.mlp.shared_experts.down_proj.weight"), (std::vector<uint64_t>{128, 128}));
}

// --- target vllm ------------------------------------------------------------------------------

struct VllmCase {
  std::string family, synth_flags;
};

class VllmFamilies : public ::testing::TestWithParam<VllmCase> {};

TEST_P(VllmFamilies, EveryRankBitExactAtTp124WithAndWithoutEp) {
  TempDir dir;
  const auto ckpt = synth(dir, GetParam().family, GetParam().synth_flags);
  for (uint32_t t : {1u, 2u, 4u}) {
    expect_every_rank_matches(ckpt, t, "--target vllm");
    if (t > 1) expect_every_rank_matches(ckpt, t, "--target vllm --ep-size " + std::to_string(t));
  }
}

// Vocabularies 250, 251, 200: none a multiple of 64. Mixtral's 6 experts over 4 ranks put the
// remainder on the first ranks.
INSTANTIATE_TEST_SUITE_P(Families, VllmFamilies,
                         ::testing::Values(VllmCase{"llama", ""}, VllmCase{"mistral", "--kv-heads 8"},
                                           VllmCase{"qwen2", "--kv-heads 4 --vocab 251"}, VllmCase{"qwen3", ""},
                                           VllmCase{"qwen3_moe", "--vocab 200"}, VllmCase{"mixtral", "--experts 6"},
                                           VllmCase{"deepseek_v3", ""},
                                           // FP8 under vLLM needs whole 128-blocks per rank at T = 4.
                                           VllmCase{"deepseek_v3",
                                                    "--fp8 --heads 8 --intermediate 512 --moe-intermediate 512"}),
                         [](const auto& info) { return info.param.family + std::to_string(info.index); });

TEST(VllmTarget, NamesAndShapesAreVllms) {
  TempDir dir;
  const auto mixtral =
      plan_json(synth(dir, "mixtral", "--experts 6"), "--target vllm --tp-size 4 --ep-size 4 --tp-rank 1");
  EXPECT_EQ(mixtral["layout"]["target"], "vllm");
  EXPECT_NE(param(mixtral, "model.layers.0.block_sparse_moe.gate.weight"), nullptr);
  EXPECT_EQ(shape_of(mixtral, "model.layers.0.block_sparse_moe.experts.w13_weight"),
            (std::vector<uint64_t>{2, 96, 64}));
  EXPECT_EQ(shape_of(mixtral, "model.embed_tokens.weight"), (std::vector<uint64_t>{64, 64}));  // 250 -> 256 rows / 4
  const auto qwen3 = plan_json(synth(dir, "qwen3"), "--target vllm --tp-size 2 --tp-rank 1");  // tied
  EXPECT_EQ(param(qwen3, "lm_head.weight"), nullptr);
  const auto ds =
      plan_json(synth(dir, "deepseek_v3", "--fp8 --heads 8 --intermediate 512 --moe-intermediate 512", "ds"),
                "--target vllm --tp-size 4 --tp-rank 2");
  for (const char* name :
       {"model.layers.0.self_attn.fused_qkv_a_proj.weight",
        "model.layers.0.self_attn.fused_qkv_a_proj.weight_scale_inv", "model.layers.1.mlp.experts.w13_weight_scale_inv",
        "model.layers.1.mlp.gate.e_score_correction_bias"}) {
    EXPECT_NE(param(ds, name), nullptr) << name;
  }
  EXPECT_EQ(shape_of(ds, "model.layers.0.self_attn.kv_b_proj.weight"),
            (std::vector<uint64_t>{512, 128}));  // 2 heads x [nope; v]
  for (const char* name :
       {"model.layers.0.self_attn.k_b_proj_trans", "model.layers.3.enorm.weight", "model.layers.3.eh_proj.weight"}) {
    EXPECT_EQ(param(ds, name), nullptr) << name;
  }
}

TEST(VllmTarget, ScoreCorrectionBiasOnlyWithNoauxTc) {
  TempDir dir;
  const auto ckpt = synth(dir, "deepseek_v3");
  std::string config = read_file(ckpt / "config.json");
  config.replace(config.find("\"noaux_tc\""), 10, "\"greedy\"");
  write_file(ckpt / "config.json", config);
  const auto plan = plan_json(ckpt, "--target vllm");
  EXPECT_EQ(plan["ok"], true);
  EXPECT_EQ(param(plan, "model.layers.1.mlp.gate.e_score_correction_bias"), nullptr);
  expect_every_rank_matches(ckpt, 2, "--target vllm");
}

// --- errors -------------------------------------------------------------------------------------

TEST(TargetErrors, EachNamesWhatIsWrong) {
  TempDir dir;
  const auto llama = synth(dir, "llama");
  const auto moe = synth(dir, "qwen3_moe");
  const auto ds = synth(dir, "deepseek_v3");
  const auto ds_fp8 = synth(dir, "deepseek_v3", "--fp8", "ds_fp8");
  const auto uneven = synth(dir, "llama", "--intermediate 170", "uneven");
  struct Case {
    std::filesystem::path ckpt;
    std::string flags, message;
  };
  const std::vector<Case> cases = {
      {moe, "--target vllm --tp-size 4 --ep-size 2",
       "ep_size 2 is not allowed with target vllm at tp_size 4: vLLM's expert parallelism is all or nothing (ep_size 1 "
       "or 4)"},
      {uneven, "--target vllm --tp-size 4",
       "model.layers.0.mlp.gate_proj.weight: width 170 is not divisible by tp_size 4 (target vllm splits every tensor "
       "exactly"},
      {ds_fp8, "--target vllm --tp-size 2",
       "model.layers.1.mlp.shared_experts.gate_proj.weight: this rank's rows [0, 64) are not whole 128-wide FP8 "
       "blocks"},
      {llama, "--attention-dp --tp-size 2", "attention_dp has no meaning for a dense model such as LlamaForCausalLM"},
      {moe, "--attention-dp --tp-size 2 --ep-size 2", "attention_dp is not served for Qwen3MoeForCausalLM"},
      {ds, "--attention-dp --target vllm --tp-size 2",
       "attention_dp is a TensorRT-LLM layout (target trtllm); target vllm has none"},
      {ds, "--target vllm --mtp-layers 1", "mtp_layers 1: target vllm loads no MTP layers"},
      {llama, "--gpus-per-node 0", "gpus_per_node must be at least 1"},
      {llama, "--target sglang", "--target: sglang not in {trtllm,vllm}"},
  };
  for (const auto& c : cases) {
    for (const char* cmd : {"plan ", "load "}) {
      auto r = run_wmap(cmd + shell_quote(c.ckpt.string()) + " " + c.flags);
      EXPECT_EQ(r.exit_code, 2) << cmd << c.flags << "\n" << r.err;
      EXPECT_NE(r.err.find(c.message), std::string::npos) << cmd << c.flags << "\n" << r.err;
    }
  }
}

// --- DeepSeek-R1's real layout ------------------------------------------------------------------

// What one rank of DeepSeek-R1 (FP8, 61 layers of which 3 dense, 256 experts, one MTP layer)
// holds, counted from DESIGN.md's rules independently of the plugin: parameters and bytes.
struct R1Rank {
  uint64_t params = 0, bytes = 0;
  void add(uint64_t elements, uint64_t element_bytes) {
    ++params;
    bytes += elements * element_bytes;
  }
  // An FP8 linear [out, in] and its F32 128x128 block scales.
  void fp8(uint64_t out, uint64_t in, uint64_t scale_rows, uint64_t lead = 1) {
    add(lead * out * in, 1);
    add(lead * scale_rows * ((in + 127) / 128), 4);
  }
};

R1Rank r1_expected(bool vllm, uint32_t t, uint32_t p, bool adp) {
  const uint64_t h = 7168, heads = 128, nope = 128, v = 128, rank_kv = 512, q_lora = 1536, rope = 64, inter = 18432,
                 moe_inter = 2048, experts = 256, vocab = 129280, layers = 61, dense = 3;
  const uint64_t a = adp ? 1 : t, hl = heads / a;
  R1Rank r;
  auto attention = [&] {
    r.add(h, 2), r.add(h, 2);                                     // input / post_attention layernorms
    r.add(q_lora, 2), r.add(rank_kv, 2);                          // q_a / kv_a layernorms
    r.fp8(q_lora + rank_kv + rope, h, 12 + 5);                    // fused A: 12 + ceil(576/128) scale rows
    r.fp8(hl * (nope + rope), q_lora, hl * (nope + rope) / 128);  // q_b_proj
    r.add(h * (heads * v / a), 1), r.add((h / 128) * (heads * v / a / 128), 4);  // o_proj, row-parallel
    if (vllm) {
      r.fp8(hl * (nope + v), rank_kv, hl * (nope + v) / 128);  // kv_b_proj
    } else {
      // Current TensorRT-LLM dequantises kv_b_proj to BF16 (no scales): the weight and its splits.
      r.add(hl * (nope + v) * rank_kv, 2);
      r.add(hl * rank_kv * nope, 2);  // k_b_proj_trans
      r.add(hl * v * rank_kv, 2);     // v_b_proj
    }
  };
  auto mlp = [&](uint64_t width, uint64_t parts) {
    const uint64_t w = width / parts;
    r.fp8(2 * w, h, 2 * w / 128);                      // gate_up_proj
    r.add(h * w, 1), r.add((h / 128) * (w / 128), 4);  // down_proj
  };
  auto gcd_parts = [&](uint64_t width, bool cap) -> uint64_t {
    if (vllm) return t;
    if (adp) return 1;
    uint64_t g = std::gcd(width / 128, uint64_t{t});
    if (cap && g > 8) g = std::gcd(g, uint64_t{8});
    return g;
  };
  auto moe = [&] {
    r.add(experts * h, 2), r.add(experts, 4);  // router, e_score_correction_bias
    mlp(moe_inter, gcd_parts(moe_inter, false));
    const uint64_t local = experts / p, ie = moe_inter / (t / p);
    r.fp8(2 * ie, h, 2 * ie / 128, local);                               // w3_w1 / w13 and their scales
    r.add(local * h * ie, 1), r.add(local * (h / 128) * (ie / 128), 4);  // w2
  };
  const uint64_t vocab_rows = vllm ? (vocab + 63) / 64 * 64 / t : adp ? vocab : (vocab + t - 1) / t;
  r.add((vllm ? vocab_rows : vocab) * h, 2);  // embed_tokens: replicated under trtllm
  for (uint64_t i = 0; i < layers; ++i) {
    attention();
    if (i < dense) {
      mlp(inter, gcd_parts(inter, true));
    } else {
      moe();
    }
  }
  if (!vllm) {  // the MTP layer: 3 norms, eh_proj (row-parallel BF16), a whole MoE decoder layer
    r.add(h, 2), r.add(h, 2), r.add(h, 2);
    r.add(h * 2 * h / a, 2);
    attention();
    moe();
  }
  r.add(h, 2);               // model.norm
  r.add(vocab_rows * h, 2);  // lm_head
  return r;
}

TEST(TargetR1, RealLayoutPlansCompleteUnderBothTargets) {
  TempDir dir;
  const auto out = dir / "r1";
  auto rebuilt =
      run_command(python() + " " + shell_quote((source_dir() / "tests/python/sparse_layout.py").string()) + " " +
                  shell_quote((testdata_dir() / "layouts" / "deepseek-r1").string()) + " " + shell_quote(out.string()));
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.err;
  struct Case {
    std::string flags;
    bool vllm, adp;
    uint32_t p;
  };
  for (const auto& c :
       {Case{"--ep-size 8", false, false, 8}, Case{"--ep-size 8 --attention-dp", false, true, 8},
        Case{"--ep-size 1 --attention-dp", false, true, 1}, Case{"--ep-size 8 --target vllm", true, false, 8},
        Case{"--ep-size 1 --target vllm", true, false, 1}}) {
    for (const char* rank : {"0", "5"}) {
      const auto plan = plan_json(out, "--tp-size 8 --tp-rank " + std::string(rank) + " " + c.flags);
      ASSERT_TRUE(plan.is_object()) << c.flags;
      EXPECT_EQ(plan["ok"], true) << c.flags << " " << plan["coverage"];
      const R1Rank want = r1_expected(c.vllm, 8, c.p, c.adp);
      EXPECT_EQ(plan["params"].size(), want.params) << c.flags;
      EXPECT_EQ(plan["bytes_to_load"].get<uint64_t>(), want.bytes) << c.flags;
    }
  }
}

}  // namespace
}  // namespace wmap::test
