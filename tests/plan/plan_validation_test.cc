// `wmap plan` and `wmap load` catch every mapping problem before data moves: missing tensors,
// wrong shapes and dtypes, unconsumed tensors, offline from a saved catalog, and a YAML-only
// architecture that needs no rebuild.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "checkpoint_edit.h"
#include "test_util.h"

namespace wmap::test {
namespace {

const std::string kQ0 = "model.layers.0.self_attn.q_proj.weight";

class PlanValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    ckpt_ = dir_ / "good";
    ASSERT_EQ(run_wmap("synth llama " + shell_quote(ckpt_.string())).exit_code, 0);
  }
  std::filesystem::path edited(const std::string& name, const std::function<TensorEdit(const std::string&)>& edit,
                               const std::vector<std::string>& extra = {}) {
    const auto out = dir_ / name;
    copy_checkpoint(ckpt_, out, edit, {}, extra);
    return out;
  }
  TempDir dir_;
  std::filesystem::path ckpt_;
};

TEST_F(PlanValidation, CompletePlanExitsZero) {
  auto r = run_wmap("plan " + shell_quote(ckpt_.string()) + " --tp-size 2 --tp-rank 1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("complete"), std::string::npos) << r.out;
}

TEST_F(PlanValidation, MissingTensorIsNamed) {
  const auto dir = edited("missing", [](const std::string& n) { return TensorEdit{.drop = n == kQ0}; });
  auto r = run_wmap("plan " + shell_quote(dir.string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing: '" + kQ0 + "' is not in the checkpoint"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("qkv_proj.weight"), std::string::npos) << r.err;
}

TEST_F(PlanValidation, WrongShapeNamesExpectedAndActual) {
  const auto dir = edited("shape", [](const std::string& n) {
    TensorEdit e;
    if (n == kQ0) e.reshape = std::vector<uint64_t>{32, 128};  // 64x64 stored as 32x128
    return e;
  });
  auto r = run_wmap("plan " + shell_quote(dir.string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("has shape [32, 128] but model.layers.0.self_attn.qkv_proj.weight expects [64, 64]"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("model-0000"), std::string::npos) << "names the shard: " << r.err;
}

TEST_F(PlanValidation, ExtraTensorIsUnconsumed) {
  const auto dir = edited("extra", [](const std::string&) { return TensorEdit{}; }, {"model.layers.0.mystery.weight"});
  auto r = run_wmap("plan " + shell_quote(dir.string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unconsumed: 'model.layers.0.mystery.weight'"), std::string::npos) << r.err;
}

TEST_F(PlanValidation, ProblemsAreAllReportedAndSorted) {
  const auto dir = edited("many",
                          [](const std::string& n) {
                            TensorEdit e;
                            e.drop = n == kQ0 || n == "model.norm.weight";
                            if (n == "model.layers.1.mlp.down_proj.weight") e.reshape = std::vector<uint64_t>{176, 64};
                            return e;
                          },
                          {"zzz.extra", "aaa.extra"});
  auto r = run_wmap("plan " + shell_quote(dir.string()) + " --json");
  EXPECT_EQ(r.exit_code, 1);
  const size_t m1 = r.err.find("missing: '" + kQ0), m2 = r.err.find("missing: 'model.norm.weight'"),
               s = r.err.find("shape: 'model.layers.1.mlp.down_proj.weight'"),
               u1 = r.err.find("unconsumed: 'aaa.extra'"), u2 = r.err.find("unconsumed: 'zzz.extra'");
  ASSERT_NE(m1, std::string::npos) << r.err;
  ASSERT_NE(m2, std::string::npos) << r.err;
  ASSERT_NE(s, std::string::npos) << r.err;
  ASSERT_NE(u1, std::string::npos) << r.err;
  ASSERT_NE(u2, std::string::npos) << r.err;
  EXPECT_LT(m1, m2);
  EXPECT_LT(m2, s);
  EXPECT_LT(s, u1);
  EXPECT_LT(u1, u2);
  EXPECT_NE(r.out.find("\"ok\":false"), std::string::npos);
  EXPECT_NE(r.out.find("\"kind\":\"missing\""), std::string::npos);
}

TEST_F(PlanValidation, LoadRefusesAnInvalidPlanUnlessPartialIsAsked) {
  const auto dir = edited("missing", [](const std::string& n) { return TensorEdit{.drop = n == kQ0}; });
  const auto dump = dir_ / "partial.safetensors";
  auto r = run_wmap("load " + shell_quote(dir.string()) + " --dump " + shell_quote(dump.string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("refusing to load"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(kQ0), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dump));

  r = run_wmap("load " + shell_quote(dir.string()) + " --allow-partial --dump " + shell_quote(dump.string()));
  EXPECT_EQ(r.exit_code, 1) << "a partial load still reports failure";
  ASSERT_TRUE(std::filesystem::exists(dump)) << r.err;
  auto inspect = run_wmap("inspect --json " + shell_quote(dump.string()));
  EXPECT_EQ(inspect.out.find("layers.0.self_attn.qkv_proj.weight"), std::string::npos) << "broken param left out";
  EXPECT_NE(inspect.out.find("layers.1.self_attn.qkv_proj.weight"), std::string::npos);
}

TEST_F(PlanValidation, OfflineFromSavedCatalogWithoutWeights) {
  const auto catalog = dir_ / "catalog.json";
  ASSERT_EQ(
      run_wmap("inspect " + shell_quote(ckpt_.string()) + " --save-catalog " + shell_quote(catalog.string())).exit_code,
      0);
  // Only the catalog and config travel to the planning machine.
  const auto offline = dir_ / "offline";
  std::filesystem::create_directories(offline);
  std::filesystem::copy_file(catalog, offline / "catalog.json");
  std::filesystem::copy_file(ckpt_ / "config.json", offline / "config.json");
  auto r = run_wmap("plan --catalog " + shell_quote((offline / "catalog.json").string()) + " --config " +
                    shell_quote((offline / "config.json").string()) + " --tp-size 4 --tp-rank 3");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("complete"), std::string::npos) << r.out;

  // A catalog of a broken checkpoint reports the same problem offline.
  const auto broken = edited("missing", [](const std::string& n) { return TensorEdit{.drop = n == kQ0}; });
  const auto broken_catalog = offline / "broken.json";
  ASSERT_EQ(
      run_wmap("inspect " + shell_quote(broken.string()) + " --save-catalog " + shell_quote(broken_catalog.string()))
          .exit_code,
      0);
  r = run_wmap("plan --catalog " + shell_quote(broken_catalog.string()) + " --config " +
               shell_quote((offline / "config.json").string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(kQ0), std::string::npos) << r.err;

  // --catalog without --config and without a checkpoint is a usage error.
  r = run_wmap("plan --catalog " + shell_quote(broken_catalog.string()));
  EXPECT_EQ(r.exit_code, 2);
}

TEST_F(PlanValidation, LoadWithCatalogRefusesAChangedShard) {
  const auto catalog = dir_ / "catalog.json";
  ASSERT_EQ(
      run_wmap("inspect " + shell_quote(ckpt_.string()) + " --save-catalog " + shell_quote(catalog.string())).exit_code,
      0);
  auto r = run_wmap("load " + shell_quote(ckpt_.string()) + " --catalog " + shell_quote(catalog.string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Rewrite one shard (same content, new inode and mtime).
  const auto shard = ckpt_ / "model-00002-of-00002.safetensors";
  const std::string bytes = read_file(shard);
  std::filesystem::remove(shard);
  write_file(shard, bytes);
  r = run_wmap("load " + shell_quote(ckpt_.string()) + " --catalog " + shell_quote(catalog.string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("model-00002-of-00002.safetensors: changed since the catalog was saved"), std::string::npos)
      << r.err;
}

// An architecture nobody serves: the error lists every known architecture once, sorted, though
// the llama plugin and llama.yaml both claim LlamaForCausalLM.
TEST_F(PlanValidation, UnknownArchitectureListsKnownOnesOnceSorted) {
  const auto dir = dir_ / "unknown_arch";
  std::filesystem::copy(ckpt_, dir, std::filesystem::copy_options::recursive);
  std::string config = read_file(dir / "config.json");
  const size_t at = config.find("LlamaForCausalLM");
  ASSERT_NE(at, std::string::npos) << config;
  config.replace(at, std::string("LlamaForCausalLM").size(), "NobodyForCausalLM");
  write_file(dir / "config.json", config);
  auto r = run_wmap("plan " + shell_quote(dir.string()));
  EXPECT_NE(r.exit_code, 0);
  const size_t open = r.err.find("(known: ");
  ASSERT_NE(open, std::string::npos) << r.err;
  const size_t close = r.err.find(')', open);
  ASSERT_NE(close, std::string::npos) << r.err;
  std::vector<std::string> known;
  std::stringstream list(r.err.substr(open + 8, close - open - 8));
  for (std::string a; std::getline(list, a, ',');) known.push_back(a.substr(a.find_first_not_of(' ')));
  EXPECT_TRUE(std::is_sorted(known.begin(), known.end())) << r.err;
  EXPECT_EQ(std::adjacent_find(known.begin(), known.end()), known.end()) << "listed twice: " << r.err;
  EXPECT_EQ(std::count(known.begin(), known.end(), "LlamaForCausalLM"), 1) << r.err;
  EXPECT_EQ(std::count(known.begin(), known.end(), "DeepseekV3ForCausalLM"), 1) << r.err;
}

TEST_F(PlanValidation, YamlOnlyArchitectureLoadsWithoutRebuild) {
  // A made-up architecture with its own key convention: blocks.N.attn.wq, ..., served by the
  // existing llama plugin through a mapping file dropped into a user folder.
  const auto dir = dir_ / "fancy";
  auto rekey = [](const std::string& n) {
    std::string s = n;
    auto sub = [&s](const std::string& from, const std::string& to) {
      for (size_t at; (at = s.find(from)) != std::string::npos;) s.replace(at, from.size(), to);
    };
    sub("model.layers.", "blocks.");
    sub("self_attn.q_proj", "attn.wq");
    sub("self_attn.k_proj", "attn.wk");
    sub("self_attn.v_proj", "attn.wv");
    sub("self_attn.o_proj", "attn.wo");
    sub("mlp.gate_proj", "ffn.w1");
    sub("mlp.up_proj", "ffn.w3");
    sub("mlp.down_proj", "ffn.w2");
    sub("model.embed_tokens", "tok_embeddings");
    sub("model.norm", "final_norm");
    sub("lm_head", "output");
    return TensorEdit{.rename = s};
  };
  copy_checkpoint(ckpt_, dir, rekey,
                  [](std::string c) {
                    c.replace(c.find("LlamaForCausalLM"), 16, "FancyLmForCausalLM");
                    return c;
                  },
                  {"blocks.0.attn.rotary.inv_freq"});
  const auto maps = dir_ / "maps";
  std::filesystem::create_directories(maps);
  write_file(maps / "fancy.yaml", R"(architectures: [FancyLmForCausalLM]
plugin: llama
rename:
  - match: '^blocks\.(\d+)\.attn\.w([qkvo])\.(weight|bias)$'
    replace: 'model.layers.\1.self_attn.\2_proj.\3'
  - match: '^blocks\.(\d+)\.ffn\.w1\.weight$'
    replace: 'model.layers.\1.mlp.gate_proj.weight'
  - match: '^blocks\.(\d+)\.ffn\.w3\.weight$'
    replace: 'model.layers.\1.mlp.up_proj.weight'
  - match: '^blocks\.(\d+)\.ffn\.w2\.weight$'
    replace: 'model.layers.\1.mlp.down_proj.weight'
  - match: '^blocks\.(\d+)\.(.+)$'
    replace: 'model.layers.\1.\2'
  - match: '^tok_embeddings\.weight$'
    replace: 'model.embed_tokens.weight'
  - match: '^final_norm\.weight$'
    replace: 'model.norm.weight'
  - match: '^output\.weight$'
    replace: 'lm_head.weight'
ignore:
  - '^blocks\.\d+\.attn\.rotary\.inv_freq$'
)");
  for (uint32_t r = 0; r < 4; ++r) {
    const auto a = dir_ / ("fancy" + std::to_string(r) + ".safetensors"),
               b = dir_ / ("orig" + std::to_string(r) + ".safetensors");
    const std::string layout = " --tp-size 4 --tp-rank " + std::to_string(r);
    auto fancy = run_wmap("load " + shell_quote(dir.string()) + layout + " --mappings " + shell_quote(maps.string()) +
                          " --dump " + shell_quote(a.string()));
    ASSERT_EQ(fancy.exit_code, 0) << fancy.err;
    ASSERT_EQ(run_wmap("load " + shell_quote(ckpt_.string()) + layout + " --dump " + shell_quote(b.string())).exit_code,
              0);
    EXPECT_EQ(read_file(a), read_file(b)) << "rank " << r << " differs from the original convention";
  }
  // Without the mapping folder the architecture is unknown: a clear error, exit 1.
  auto r = run_wmap("plan " + shell_quote(dir.string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("FancyLmForCausalLM"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace wmap::test
