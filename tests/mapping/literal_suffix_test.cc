// The rename prefilter (core/src/mapping/literal_suffix.h) must never answer "no rule matches" for
// a key a rule matches: checked here against RE2 itself, on hand-picked patterns, on thousands of
// generated ones over every short key of a small alphabet, and on every mapping file of the
// repository over the real checkpoint layouts' keys.
#include "literal_suffix.h"

#include <gtest/gtest.h>
#include <re2/re2.h>
#include <simdjson.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "wmap/mapping/mapping_file.h"
#include "wmap/mapping/rename_table.h"

namespace wmap {
namespace {

TEST(LiteralSuffix, ReadsTheTrailingLiteralsOfAPattern) {
  const struct {
    const char* pattern;
    const char* suffix;
  } cases[] = {
      {R"(^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$)", ".self_attn.rotary_emb.inv_freq"},
      {R"(^(.+)\.weight_packed$)", ".weight_packed"},
      {R"(w1)", "w1"},
      {R"(^(?:gate|up)_proj\.weight$)", "_proj.weight"},
      {R"(^(?P<layer>\d+)\.bias$)", ".bias"},
      {R"(ab+cd$)", "cd"},
      {R"(a{2}bc)", "bc"},
      {R"(a{2,}b)", "b"},
      {R"(a{b)", "b"},  // not a repetition: a literal `{`, left out (a shorter suffix is still one)
      {R"(x[]a]y$)", "y"},
      {R"(x[[:alpha:]]z)", "z"},
      {R"(a\.b\$)", "a.b$"},  // an escaped `$` is text
      {R"(foo\x{2e}bar)", "bar"},
      {R"(foo\p{Greek}x)", "x"},
      {R"(\Qa.b\Ec)", "c"},
      {R"(-/:}])", "-/:}]"},
      // Nothing can be read off these: the caller runs the regex on every key.
      {R"(^(.+)$)", ""},
      {R"(^a|b$)", ""},  // the first branch ends with `a`
      {R"((?i)foo$)", ""},
      {R"(^x(?i:a)b$)", ""},
      {R"(abc?$)", ""},
      {R"(ab*)", ""},
      {R"(a.)", ""},
      {R"([a-z]$)", ""},
      {R"(foo\x2e)", ""},
      {R"(foo\pN)", ""},
      {R"(foo\012)", ""},
      {R"(foo\d)", ""},
      {R"(a\z)", ""},
      {R"(\Qa.b\E)", ""},
      {R"(a(b))", ""},
      {R"()", ""},
  };
  for (const auto& c : cases) {
    ASSERT_TRUE(RE2(c.pattern).ok()) << c.pattern;
    EXPECT_EQ(required_literal_suffix(c.pattern), c.suffix) << c.pattern;
  }
}

// Every key up to `len` characters over `alphabet`.
std::vector<std::string> all_keys(const std::string& alphabet, size_t len) {
  std::vector<std::string> keys{""};
  for (size_t begin = 0, n = 1; n <= len; ++n) {
    const size_t end = keys.size();
    for (size_t i = begin; i < end; ++i) {
      for (char c : alphabet) keys.push_back(keys[i] + c);
    }
    begin = end;
  }
  return keys;
}

// Random patterns built from pieces that exercise each branch of the reader (escapes, classes,
// groups, flags, repetitions, alternations, anchors); each is checked against RE2 on every key of
// five characters or fewer over an alphabet those pieces can match.
TEST(LiteralSuffix, NeverExcludesAKeyRe2Matches) {
  const std::vector<std::string> pieces = {
      "a",        "b",     "\\.",         ".",   "1",     "_",       "\\d",   "[ab]",   "[^a]",
      "[]a]",     "(a|b)", "(?:ab|b)",    "a*",  "b+",    "a?",      "a{2}",  "a{1,}",  "b{",
      "(a)",      "(?i)a", "(?i:b)",      "|",   "\\x61", "\\x{62}", "\\141", "\\pN",   "\\Qa.\\E",
      "(?P<n>b)", "\\b",   "[[:digit:]]", "\\$", "\\z",   "(?s:.)",  "a*?",   "(a|b)+", "\\."};
  const std::vector<std::string> keys = all_keys("ab1._A$", 5);
  std::mt19937 rng(42);
  size_t checked = 0, with_suffix = 0;
  for (int n = 0; n < 1500; ++n) {
    std::string pattern = rng() % 3 == 0 ? "^" : "";
    const size_t count = 1 + rng() % 5;
    for (size_t k = 0; k < count; ++k) pattern += pieces[rng() % pieces.size()];
    if (rng() % 2 == 0) pattern += "$";
    const RE2 re(pattern, RE2::Quiet);
    if (!re.ok()) continue;
    const std::string suffix = required_literal_suffix(pattern);
    ++checked;
    if (suffix.empty()) continue;
    ++with_suffix;
    for (const std::string& key : keys) {
      if (RE2::FullMatch(key, re)) {
        ASSERT_TRUE(key.ends_with(suffix))
            << "pattern '" << pattern << "' matches '" << key << "', which does not end with '" << suffix << "'";
      }
    }
  }
  EXPECT_GT(checked, 1000u);
  EXPECT_GT(with_suffix, 200u);  // the check above is not vacuous
}

// Every mapping file of the repository, with the prefilter, against RE2 run rule by rule on the
// keys of every checkpoint layout kept under tests/data (and the same keys as NVFP4 and RoPE
// checkpoints name them, so the renaming and ignoring rules are hit too).
TEST(LiteralSuffix, EveryShippedMappingRenamesAsRe2DoesRuleByRule) {
  std::vector<std::string> keys;
  simdjson::dom::parser parser;
  for (const auto& dir : std::filesystem::directory_iterator(test::testdata_dir() / "layouts")) {
    const auto index = dir.path() / "model.safetensors.index.json";
    if (!std::filesystem::exists(index)) continue;
    simdjson::dom::element doc = parser.load(index.string());
    for (auto [key, value] : doc["weight_map"].get_object()) {
      const std::string k(key);
      keys.push_back(k);
      if (k.ends_with(".weight")) {
        const std::string stem = k.substr(0, k.size() - 7);
        keys.push_back(stem + ".weight_packed");
        keys.push_back(stem + ".weight_global_scale");
        keys.push_back(stem + ".input_global_scale");
      }
    }
  }
  keys.push_back("model.layers.7.self_attn.rotary_emb.inv_freq");
  ASSERT_GT(keys.size(), 100000u);
  size_t mappings = 0, renamed = 0, ignored = 0;
  for (const auto& file : std::filesystem::directory_iterator(test::source_dir() / "mappings")) {
    if (file.path().extension() != ".yaml") continue;
    ++mappings;
    const MappingFile m = load_mapping_file(file.path());
    const RenameTable table(m);
    std::vector<std::unique_ptr<RE2>> rename, ignore;
    for (const auto& r : m.rename) rename.push_back(std::make_unique<RE2>(r.pattern));
    for (const auto& r : m.ignore) ignore.push_back(std::make_unique<RE2>(r.pattern));
    for (const std::string& key : keys) {
      std::string expected = key;
      for (size_t i = 0; i < rename.size(); ++i) {
        if (RE2::FullMatch(key, *rename[i])) {
          ASSERT_TRUE(RE2::Replace(&expected, *rename[i], m.rename[i].replace));
          ++renamed;
          break;
        }
      }
      bool expect_ignored = false;
      for (const auto& re : ignore) expect_ignored = expect_ignored || RE2::FullMatch(key, *re);
      ignored += expect_ignored;
      ASSERT_EQ(table.canonical(key), expected) << file.path() << ": " << key;
      ASSERT_EQ(table.ignored(key), expect_ignored) << file.path() << ": " << key;
    }
  }
  EXPECT_GE(mappings, 6u);
  EXPECT_GT(renamed, 1000u);
  EXPECT_GT(ignored, 0u);
}

}  // namespace
}  // namespace wmap
