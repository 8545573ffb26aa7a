// config.json errors: malformed JSON, missing or mistyped hyper-parameters, values the layout
// cannot split, sizes the checkpoint cannot hold (ConfigBounds). Each is one line on stderr naming
// the file and the field, exit 2; the library throws a wmap::Error (kMalformedInput) with the same
// text. For llama and deepseek_v3.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>

#include "reliability/reliability_util.h"
#include "wmap/catalog/shard_set.h"
#include "wmap/spec/model_config.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;

// Renames `"field":` so the field is absent (and can be re-added with a new value).
std::string drop(std::string text, const std::string& field) {
  const std::regex key("\"" + field + "\"\\s*:");
  EXPECT_TRUE(std::regex_search(text, key)) << field << " not in config";
  return std::regex_replace(text, key, "\"removed_" + field + "\":", std::regex_constants::format_first_only);
}
std::string set(std::string text, const std::string& field, const std::string& json_value) {
  if (std::regex_search(text, std::regex("\"" + field + "\"\\s*:"))) text = drop(std::move(text), field);
  return "{\"" + field + "\": " + json_value + ", " + text.substr(text.find('{') + 1);
}
int64_t value_of(const std::string& text, const std::string& field) {
  return ModelConfig::parse(text, "config.json").require_int(field);
}
// The CLI under a 2 GB address-space limit, so a config the checks miss fails the test instead of
// taking the machine's memory (no limit under ASan, which reserves terabytes of address space).
CommandResult run_wmap_limited(const std::string& args) {
#if defined(__SANITIZE_ADDRESS__)
  const std::string limit;
#else
  const std::string limit = "ulimit -v 2000000; ";
#endif
  return run_command(limit + shell_quote(WMAP_CLI_PATH) + " -q " + args);
}

class ConfigError : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ckpt_ = dir_ / "ckpt";
    synth(GetParam(), ckpt_);
    original_ = read_file(ckpt_ / "config.json");
  }
  void expect_error(const std::string& text, const std::string& field, const std::string& message,
                    const std::string& layout = "") {
    SCOPED_TRACE(field + ": " + message);
    write_file(ckpt_ / "config.json", text);
    const std::string config = (ckpt_ / "config.json").string();
    for (const std::string cmd : {"plan", "load"}) {
      auto r = run_wmap(cmd + " " + shell_quote(ckpt_.string()) + " " + layout);
      EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
      EXPECT_NE(r.err.find(config), std::string::npos) << "names the file: " << r.err;
      EXPECT_NE(r.err.find(field), std::string::npos) << "names the field: " << r.err;
      EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
      EXPECT_EQ(r.out.find("loaded"), std::string::npos) << r.out;
    }
    LoaderOptions o = loader_options(ckpt_);
    if (!layout.empty()) {
      std::smatch m;
      ASSERT_TRUE(std::regex_search(layout, m, std::regex("--tp-size (\\d+)")));
      o.layout.tp_size = static_cast<uint32_t>(std::stoul(m[1]));
      if (std::regex_search(layout, m, std::regex("--ep-size (\\d+)")))
        o.layout.ep_size = static_cast<uint32_t>(std::stoul(m[1]));
    }
    try {
      LoaderSession(o).prepare();
      ADD_FAILURE() << "prepare() accepted the config";
    } catch (const Error& e) {
      EXPECT_EQ(exit_code_for(e.code()), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find(config + ": "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
  // A config that cannot fit the checkpoint: refused by plan, load and an offline plan from a saved
  // catalog (run_wmap_limited), then by the library.
  void expect_refused(const std::string& text, const std::string& field, const std::string& message) {
    SCOPED_TRACE(field + ": " + message);
    const auto catalog = dir_ / "catalog.json";
    if (!fs::exists(catalog)) {
      ASSERT_EQ(run_wmap("inspect " + shell_quote(ckpt_.string()) + " --save-catalog " + shell_quote(catalog.string()))
                    .exit_code,
                0);
    }
    write_file(ckpt_ / "config.json", text);
    const std::string config = (ckpt_ / "config.json").string(), ckpt = shell_quote(ckpt_.string());
    for (const std::string& cmd :
         {"plan " + ckpt, "load " + ckpt,
          "plan --catalog " + shell_quote(catalog.string()) + " --config " + shell_quote(config)}) {
      auto r = run_wmap_limited(cmd);
      EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
      EXPECT_NE(r.err.find(config + ": " + field + ": " + message), std::string::npos) << cmd << ": " << r.err;
    }
    if (HasFailure()) return;  // the library call would take what the CLI was refused
    try {
      LoaderSession(loader_options(ckpt_)).prepare();
      ADD_FAILURE() << "prepare() accepted the config";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMalformedInput) << e.what();
      EXPECT_NE(std::string(e.what()).find(config + ": " + field + ": " + message), std::string::npos) << e.what();
    }
  }
  // The checkpoint's highest layer index and largest tensor dimension, from its own catalog.
  uint64_t highest_layer() const {
    const auto c = ModelConfig::parse(original_, "config.json");
    return static_cast<uint64_t>(c.require_int("num_hidden_layers") + c.get_int("num_nextn_predict_layers", 0) - 1);
  }
  uint64_t largest_dim() const {
    uint64_t d = 0;
    const Catalog catalog = Catalog::build(discover_shards(ckpt_));
    for (const auto& t : catalog.tensors()) {
      for (auto x : t.shape) d = std::max(d, x);
    }
    return d;
  }
  TempDir dir_;
  fs::path ckpt_;
  std::string original_;
};

TEST_P(ConfigError, MalformedJson) {
  expect_error(original_.substr(0, original_.size() / 2), "config.json", "not valid JSON");
  expect_error("[1, 2, 3]", "config.json", "not a JSON object");
  expect_error("", "config.json", "not valid JSON");
}

TEST_P(ConfigError, ArchitecturesMissingOrMistyped) {
  expect_error(drop(original_, "architectures"), "architectures", "missing");
  expect_error(set(original_, "architectures", "[]"), "architectures", "expected a non-empty list of strings");
  expect_error(set(original_, "architectures", "\"LlamaForCausalLM\""), "architectures",
               "expected a non-empty list of strings");
  expect_error(set(original_, "architectures", "[42]"), "architectures", "expected a non-empty list of strings");
}

TEST_P(ConfigError, HiddenSizeMissingStringNegativeOrFloat) {
  expect_error(drop(original_, "hidden_size"), "hidden_size", "required integer field is missing");
  expect_error(set(original_, "hidden_size", "\"4096\""), "hidden_size", "expected an integer");
  expect_error(set(original_, "hidden_size", "-64"), "hidden_size", "expected a positive integer");
  expect_error(set(original_, "hidden_size", "64.5"), "hidden_size", "expected an integer");
  // Out of double range: simdjson rejects the whole document (names the file, not the field).
  expect_error(set(original_, "hidden_size", "1e400"), "config.json", "not valid JSON");
  expect_error(set(original_, "hidden_size", "null"), "hidden_size", "");
}

TEST_P(ConfigError, NumLayersAndVocabMistyped) {
  expect_error(set(original_, "num_hidden_layers", "0"), "num_hidden_layers", "expected a positive integer");
  expect_error(set(original_, "vocab_size", "[32000]"), "vocab_size", "expected an integer");
  expect_error(drop(original_, "num_attention_heads"), "num_attention_heads", "missing");
}

TEST_P(ConfigError, HeadsNotDivisibleByTensorParallelSize) {
  const int64_t heads = value_of(original_, "num_attention_heads");
  const std::string t = std::to_string(heads + 1);  // never divides `heads`
  expect_error(original_, "num_attention_heads",
               std::to_string(heads) + " attention heads cannot be split over tp_size " + t,
               "--tp-size " + t + " --tp-rank 0");
}

// Sizes the checkpoint cannot hold are refused before the spec is built (ConfigBounds).
TEST_P(ConfigError, LayerCountBeyondTheCheckpoint) {
  const std::string h = std::to_string(highest_layer());
  const std::string beyond = ", but the checkpoint's highest layer index is " + h + " (model.layers." + h + ".*)";
  expect_refused(set(original_, "num_hidden_layers", "200000000"), "num_hidden_layers", "200000000 layers" + beyond);
  // The line: one layer beyond the checkpoint's highest index + 1 is refused the same way (its
  // tensors would all be missing); a layer missing inside the range is the plan's to report.
  const std::string one_more = std::to_string(highest_layer() + 2);
  expect_refused(set(original_, "num_hidden_layers", one_more), "num_hidden_layers", one_more + " layers" + beyond);
}

TEST_P(ConfigError, SizesBeyondTheLargestTensorDimension) {
  const std::string largest =
      ", but the largest dimension of any tensor in the checkpoint is " + std::to_string(largest_dim()) + " (";
  expect_refused(set(original_, "vocab_size", "1000000000000000"), "vocab_size", "1000000000000000" + largest);
  expect_refused(set(original_, "hidden_size", "1000000000000000"), "hidden_size", "1000000000000000" + largest);
  expect_refused(set(original_, "intermediate_size", "1000000000000000"), "intermediate_size",
                 "1000000000000000" + largest);
}

TEST_P(ConfigError, SizeProductsOverflowingSixtyFourBits) {
  // 2^62 heads: positive and within int64, but heads * head_dim is not a 64-bit number.
  const std::string heads = "4611686018427387904";
  const auto c = ModelConfig::parse(original_, "config.json");
  const std::string what = GetParam() == "llama" ? "num_attention_heads * head_dim"
                                                 : "num_attention_heads * (qk_nope_head_dim + qk_rope_head_dim)";
  const int64_t per_head = GetParam() == "llama"
                               ? c.require_int("head_dim")
                               : c.require_int("qk_nope_head_dim") + c.require_int("qk_rope_head_dim");
  expect_refused(set(original_, "num_attention_heads", heads), what,
                 heads + " * " + std::to_string(per_head) + " overflows 64 bits");
}

INSTANTIATE_TEST_SUITE_P(Families, ConfigError, ::testing::Values("llama", "deepseek_v3"));

// DeepSeek-V3's own fields.
class DeepseekConfigError : public ConfigError {};

TEST_P(DeepseekConfigError, MlaFieldsMissingOrMistyped) {
  expect_error(drop(original_, "kv_lora_rank"), "kv_lora_rank", "missing");
  expect_error(set(original_, "qk_nope_head_dim", "\"128\""), "qk_nope_head_dim", "expected an integer");
  expect_error(set(original_, "v_head_dim", "-1"), "v_head_dim", "expected a positive integer");
  expect_error(set(original_, "moe_layer_freq", "0"), "moe_layer_freq", "must be at least 1");
  expect_error(set(original_, "quantization_config", R"({"quant_method": "fp8", "weight_block_size": [128]})"),
               "quantization_config.weight_block_size", "expected two positive integers");
}

TEST_P(DeepseekConfigError, ExpertsNotDivisibleByExpertParallelSize) {
  ASSERT_EQ(value_of(original_, "num_attention_heads") % 2, 0);
  expect_error(set(original_, "n_routed_experts", "3"), "n_routed_experts", "3 experts cannot be split over ep_size 2",
               "--tp-size 2 --tp-rank 0 --ep-size 2");
}

TEST_P(DeepseekConfigError, CountsBeyondTheCheckpointAndNegativeCounts) {
  const std::string h = std::to_string(highest_layer());
  expect_refused(set(original_, "num_nextn_predict_layers", "100000000"), "num_nextn_predict_layers",
                 "100000000 layers, but the checkpoint's highest layer index is " + h + " (model.layers." + h + ".*)");
  // Layer 0 is dense (first_k_dense_replace 1): the first MoE layer names the highest expert.
  const std::string e = std::to_string(value_of(original_, "n_routed_experts") - 1);
  expect_refused(set(original_, "n_routed_experts", "1000000000"), "n_routed_experts",
                 "1000000000 experts, but the checkpoint's highest expert index is " + e +
                     " (model.layers.1.mlp.experts." + e + ".*)");
  expect_refused(
      set(original_, "n_shared_experts", "4611686018427387904"), "moe_intermediate_size * n_shared_experts",
      std::to_string(value_of(original_, "moe_intermediate_size")) + " * 4611686018427387904 overflows 64 bits");
  for (const char* field :
       {"n_shared_experts", "first_k_dense_replace", "num_nextn_predict_layers", "moe_layer_freq"}) {
    expect_error(set(original_, field, "-1"), field, "expected a non-negative integer, found -1");
  }
}

INSTANTIATE_TEST_SUITE_P(Deepseek, DeepseekConfigError, ::testing::Values("deepseek_v3"));

// The llama plugin's MoE variants bound their expert count by the checkpoint's experts too.
TEST(MoeConfigError, ExpertCountBeyondTheCheckpoint) {
  TempDir dir;
  for (const std::string family : {"qwen3_moe", "mixtral"}) {
    SCOPED_TRACE(family);
    const fs::path ckpt = dir / family;
    synth(family, ckpt);
    const std::string config = (ckpt / "config.json").string(), original = read_file(ckpt / "config.json");
    const std::string key = family == "mixtral" ? "num_local_experts" : "num_experts";
    const std::string e = std::to_string(value_of(original, key) - 1);
    const std::string first_moe = family == "mixtral" ? "0" : "1";  // qwen3_moe: mlp_only_layers [0]
    write_file(ckpt / "config.json", set(original, key, "1000000000"));
    auto r = run_wmap_limited("plan " + shell_quote(ckpt.string()));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(config + ": " + key + ": 1000000000 experts, but the checkpoint's highest expert index is " +
                         e + " (model.layers." + first_moe + ".mlp.experts." + e + ".*)"),
              std::string::npos)
        << r.err;
    write_file(ckpt / "config.json", set(original, key == "num_experts" ? "decoder_sparse_step" : key, "-1"));
    r = run_wmap("plan " + shell_quote(ckpt.string()));
    EXPECT_EQ(r.exit_code, 2) << r.err;
  }
}

// Library level: the accessors name the file and the dotted field path.
TEST(ConfigAccessors, ErrorsNameFileAndDottedField) {
  const auto c = ModelConfig::parse(R"({"a": {"b": "x"}, "n": -3, "l": [1, "2"], "f": 1.5})", "/x/config.json");
  auto expect = [](auto fn, const std::string& text) {
    try {
      fn();
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMalformedInput);
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  };
  expect([&] { c.require_int("a.b"); }, "/x/config.json: a.b: expected an integer");
  expect([&] { c.require_positive("n"); }, "/x/config.json: n: expected a positive integer");
  expect([&] { c.get_int_list("l"); }, "/x/config.json: l: expected a list of integers");
  expect([&] { c.require_int("f"); }, "/x/config.json: f: expected an integer");
  expect([&] { c.require_string("a.c"); }, "/x/config.json: a.c: required string field is missing");
  expect([&] { c.architecture(); }, "/x/config.json: architectures: missing");
  // Deep nesting and huge documents parse or fail cleanly.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect([&] { ModelConfig::parse(deep, "/x/deep.json"); }, "/x/deep.json");
}

}  // namespace
}  // namespace wmap::test
