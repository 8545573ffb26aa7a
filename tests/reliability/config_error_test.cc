// config.json errors: malformed JSON, missing or mistyped hyper-parameters, values the layout
// cannot split. Each is one line on stderr naming the file and the field, exit 2; the library
// throws a wmap::Error (kMalformedInput) with the same text. For llama and deepseek_v3.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>

#include "reliability/reliability_util.h"
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
      if (std::regex_search(layout, m, std::regex("--ep-size (\\d+)"))) o.layout.ep_size = static_cast<uint32_t>(std::stoul(m[1]));
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
  expect_error(set(original_, "architectures", "\"LlamaForCausalLM\""), "architectures", "expected a non-empty list of strings");
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
  expect_error(original_, "num_attention_heads", std::to_string(heads) + " attention heads cannot be split over tp_size " + t,
               "--tp-size " + t + " --tp-rank 0");
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

INSTANTIATE_TEST_SUITE_P(Deepseek, DeepseekConfigError, ::testing::Values("deepseek_v3"));

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
