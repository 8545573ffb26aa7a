#include "wmap/mapping/mapping_file.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include "wmap/util/error.h"

namespace wmap {
namespace {

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

// The message of the kMalformedInput error parsing `yaml` raises (fails the test if none).
std::string parse_error(const std::string& yaml) {
  try {
    parse_mapping_text(yaml, "m.yaml");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMalformedInput) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << yaml;
  return {};
}

TEST(MappingFileTest, ParsesEveryKey) {
  const MappingFile m = parse_mapping_text(
      "# comment\n"
      "architectures: [MixtralForCausalLM, Other]\n"
      "plugin: moe\n"
      "rename:\n"
      "  - match: '^a\\.(\\d+)$'\n"
      "    replace: 'b.\\1'\n"
      "  - {match: '^c$', replace: 'd'}\n"
      "ignore:\n"
      "  - '^x$'\n",
      "m.yaml");
  EXPECT_EQ(m.file, "m.yaml");
  EXPECT_EQ(m.architectures, (std::vector<std::string>{"MixtralForCausalLM", "Other"}));
  EXPECT_EQ(m.line_of_architectures, 2);
  EXPECT_EQ(m.plugin, "moe");
  ASSERT_EQ(m.rename.size(), 2u);
  EXPECT_EQ(m.rename[0].pattern, "^a\\.(\\d+)$");
  EXPECT_EQ(m.rename[0].replace, "b.\\1");
  EXPECT_EQ(m.rename[0].line, 5);
  EXPECT_EQ(m.rename[1].pattern, "^c$");
  EXPECT_EQ(m.rename[1].line, 7);
  ASSERT_EQ(m.ignore.size(), 1u);
  EXPECT_EQ(m.ignore[0].pattern, "^x$");
  EXPECT_EQ(m.ignore[0].line, 9);
}

TEST(MappingFileTest, RenameAndIgnoreAreOptional) {
  const MappingFile m = parse_mapping_text("architectures: [A]\nplugin: llama\nrename:\nignore: []\n", "m.yaml");
  EXPECT_TRUE(m.rename.empty());
  EXPECT_TRUE(m.ignore.empty());
  const MappingFile n = parse_mapping_text("architectures:\n  - A\nplugin: llama\n", "m.yaml");
  EXPECT_EQ(n.architectures, std::vector<std::string>{"A"});
}

TEST(MappingFileTest, UnparsableYamlNamesFileAndLine) {
  const std::string msg = parse_error("architectures: [A]\nplugin: llama\nrename: [\n  {match: 'x', replace: 'y'\n");
  EXPECT_TRUE(contains(msg, "m.yaml:"));
  EXPECT_TRUE(contains(msg, "not valid YAML"));
  // A bad escape inside a double-quoted scalar on line 3.
  EXPECT_TRUE(contains(parse_error("architectures: [A]\nplugin: llama\nignore: [\"\\d\"]\n"), "m.yaml:3:"));
  // A mis-indented mapping on line 5.
  EXPECT_TRUE(contains(parse_error("architectures: [A]\nplugin: llama\nrename:\n  - match: a\n   replace: b: c\n"),
                       "m.yaml:5:"));
}

TEST(MappingFileTest, TopLevelShape) {
  EXPECT_TRUE(contains(parse_error(""), "m.yaml:1: empty mapping file"));
  EXPECT_TRUE(contains(parse_error("# only a comment\n"), "empty mapping file"));
  EXPECT_TRUE(contains(parse_error("- a\n- b\n"), "m.yaml:1: top level must be a mapping"));
  EXPECT_TRUE(contains(parse_error("just text\n"), "top level must be a mapping"));
  EXPECT_TRUE(contains(parse_error("architectures: [A]\nplugin: llama\n---\narchitectures: [B]\nplugin: x\n"),
                       "m.yaml:3: holds more than one YAML document"));
  EXPECT_TRUE(contains(parse_error("architectures: [A]\nplugin: llama\nplugin: moe\n"),
                       "m.yaml:3: key 'plugin' appears twice"));
}

TEST(MappingFileTest, UnknownTopLevelKeysAreNamed) {
  const std::string msg = parse_error("architectures: [A]\nplugin: llama\nrenames: []\nignores: []\n");
  EXPECT_TRUE(contains(msg, "m.yaml:3: unknown keys 'renames' (line 3), 'ignores' (line 4)"));
}

TEST(MappingFileTest, MissingOrMistypedArchitectures) {
  EXPECT_TRUE(contains(parse_error("plugin: llama\n"), "m.yaml:1: missing key 'architectures'"));
  EXPECT_TRUE(contains(parse_error("architectures: LlamaForCausalLM\nplugin: llama\n"),
                       "m.yaml:1: 'architectures' must be a list of strings, got a string"));
  EXPECT_TRUE(
      contains(parse_error("architectures: []\nplugin: llama\n"), "m.yaml:1: 'architectures' must not be empty"));
  EXPECT_TRUE(contains(parse_error("architectures:\nplugin: llama\n"),
                       "'architectures' must be a list of strings, got nothing"));
  EXPECT_TRUE(contains(parse_error("plugin: llama\narchitectures:\n  - A\n  - {x: 1}\n"),
                       "m.yaml:4: each entry of 'architectures' must be a string, got a mapping"));
  EXPECT_TRUE(contains(parse_error("architectures: [A, B, A]\nplugin: llama\n"), "architecture 'A' is listed twice"));
}

TEST(MappingFileTest, MissingOrMistypedPlugin) {
  EXPECT_TRUE(contains(parse_error("architectures: [A]\n"), "missing key 'plugin'"));
  EXPECT_TRUE(contains(parse_error("architectures: [A]\nplugin: [llama]\n"),
                       "m.yaml:2: 'plugin' must be a string, got a list"));
  EXPECT_TRUE(
      contains(parse_error("architectures: [A]\nplugin:\n"), "m.yaml:2: 'plugin' must be a string, got nothing"));
  EXPECT_TRUE(contains(parse_error("architectures: [A]\nplugin: ''\n"), "'plugin' must not be empty"));
}

TEST(MappingFileTest, MistypedRename) {
  EXPECT_TRUE(contains(parse_error("architectures: [A]\nplugin: p\nrename: {match: a, replace: b}\n"),
                       "m.yaml:3: 'rename' must be a list of {match, replace}, got a mapping"));
  EXPECT_TRUE(contains(parse_error("architectures: [A]\nplugin: p\nrename:\n  - '^a$'\n"),
                       "m.yaml:4: each 'rename' entry must be a mapping {match, replace}, got a string"));
  EXPECT_TRUE(contains(parse_error("architectures: [A]\nplugin: p\nrename:\n  - match: '^a$'\n"),
                       "m.yaml:4: 'rename' entry lacks 'replace'"));
  EXPECT_TRUE(contains(parse_error("architectures: [A]\nplugin: p\nrename:\n  - replace: b\n"),
                       "m.yaml:4: 'rename' entry lacks 'match'"));
  EXPECT_TRUE(
      contains(parse_error("architectures: [A]\nplugin: p\nrename:\n  - match: a\n    replace: b\n    flags: i\n"),
               "m.yaml:6: unknown key 'flags' in a 'rename' entry"));
  EXPECT_TRUE(contains(parse_error("architectures: [A]\nplugin: p\nrename:\n  - match: a\n    replace: [b]\n"),
                       "m.yaml:5: 'replace' must be a string, got a list"));
}

TEST(MappingFileTest, MistypedIgnore) {
  EXPECT_TRUE(contains(parse_error("architectures: [A]\nplugin: p\nignore: '^a$'\n"),
                       "m.yaml:3: 'ignore' must be a list of regexes, got a string"));
  EXPECT_TRUE(contains(parse_error("architectures: [A]\nplugin: p\nignore:\n  - '^a$'\n  - [b]\n"),
                       "m.yaml:5: each 'ignore' entry must be a string, got a list"));
}

TEST(MappingFileTest, LoadFileNamesPath) {
  test::TempDir dir;
  const auto path = dir / "bad.yaml";
  test::write_file(path, "architectures: [A]\nplugin: p\nbogus: 1\n");
  try {
    load_mapping_file(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), path.string() + ":3: unknown key 'bogus'"));
  }
  try {
    load_mapping_file(dir / "missing.yaml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
  test::write_file(path, "architectures: [A]\nplugin: p\n");
  EXPECT_EQ(load_mapping_file(path).file, path);
}

// `include:` (review F6f): rule sets shared between mapping files, resolved beside the file.
TEST(MappingFileTest, IncludedRuleSetsComeAfterTheFilesOwnRulesAndNameTheirOwnFile) {
  test::TempDir dir;
  std::filesystem::create_directories(dir / "rules");
  test::write_file(dir / "rules" / "a.yaml",
                   "rename:\n  - match: '^(.+)\\.x$'\n    replace: '\\1.y'\nignore: ['^skip$']\n");
  test::write_file(dir / "rules" / "b.yaml", "# nothing but an ignore\nignore:\n  - '^also$'\n");
  test::write_file(dir / "m.yaml",
                   "architectures: [A]\nplugin: p\nrename:\n  - {match: '^own\\.x$', replace: 'mine'}\n"
                   "ignore: ['^own_ignore$']\ninclude: [rules/a.yaml, rules/b.yaml]\n");
  const MappingFile m = load_mapping_file(dir / "m.yaml");
  ASSERT_EQ(m.rename.size(), 2u);
  EXPECT_EQ(m.rename[0].pattern, "^own\\.x$");  // the file's own rules first: first match wins
  EXPECT_EQ(m.rename[0].file, (dir / "m.yaml").string());
  EXPECT_EQ(m.rename[1].pattern, "^(.+)\\.x$");
  EXPECT_EQ(m.rename[1].file, (dir / "rules" / "a.yaml").string());
  EXPECT_EQ(m.rename[1].line, 2);
  ASSERT_EQ(m.ignore.size(), 3u);
  EXPECT_EQ(m.ignore[0].pattern, "^own_ignore$");
  EXPECT_EQ(m.ignore[1].pattern, "^skip$");
  EXPECT_EQ(m.ignore[2].pattern, "^also$");
  EXPECT_EQ(m.ignore[2].file, (dir / "rules" / "b.yaml").string());
  EXPECT_EQ(m.ignore[2].line, 3);
  EXPECT_EQ(m.includes, (std::vector<std::string>{"rules/a.yaml", "rules/b.yaml"}));
}

TEST(MappingFileTest, BadIncludesAreNamedWithTheIncludingLine) {
  test::TempDir dir;
  auto error_of = [&](const std::string& yaml) -> std::string {
    test::write_file(dir / "m.yaml", "architectures: [A]\nplugin: p\n" + yaml);
    try {
      load_mapping_file(dir / "m.yaml");
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "no error for " << yaml;
    return {};
  };
  const std::string m = (dir / "m.yaml").string();
  EXPECT_TRUE(contains(error_of("include: [missing.yaml]\n"), m + ":3: include 'missing.yaml': "));
  EXPECT_TRUE(contains(error_of("include: [missing.yaml]\n"), "missing.yaml"));
  EXPECT_TRUE(contains(error_of("include: ['../up.yaml']\n"),
                       m + ":3: include '../up.yaml' must be a relative path inside the mapping folder"));
  EXPECT_TRUE(contains(error_of("include: ['/etc/x.yaml']\n"), "must be a relative path inside the mapping folder"));
  EXPECT_TRUE(contains(error_of("include: [a.yaml, a.yaml]\n"), "include 'a.yaml' is listed twice"));
  EXPECT_TRUE(contains(error_of("include: a.yaml\n"), "'include' must be a list of rule-set file names"));
  // A rule set holds only rules: no architectures, plugin or nested include.
  test::write_file(dir / "set.yaml", "architectures: [B]\nrename: []\n");
  EXPECT_TRUE(contains(error_of("include: [set.yaml]\n"), m + ":3: include 'set.yaml': " + (dir / "set.yaml").string() +
                                                              ":1: key 'architectures' in a rule set"));
  test::write_file(dir / "set.yaml", "include: [other.yaml]\n");
  EXPECT_TRUE(contains(error_of("include: [set.yaml]\n"), "key 'include' in a rule set"));
  test::write_file(dir / "set.yaml", "rename: [{match: 'a'}]\n");
  EXPECT_TRUE(
      contains(error_of("include: [set.yaml]\n"), (dir / "set.yaml").string() + ":1: 'rename' entry lacks 'replace'"));
  // Text without a folder cannot resolve an include.
  EXPECT_TRUE(contains(parse_error("architectures: [A]\nplugin: p\ninclude: [x.yaml]\n"),
                       "m.yaml:3: 'include' names files relative to the mapping file"));
}

}  // namespace
}  // namespace wmap
