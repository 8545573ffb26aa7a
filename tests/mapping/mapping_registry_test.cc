#include "wmap/mapping/mapping_registry.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "test_util.h"
#include "wmap/util/error.h"
#include "wmap/mapping/rename_table.h"

namespace wmap {
namespace {

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

void write_mapping(const std::filesystem::path& path, const std::string& archs, const std::string& plugin) {
  test::write_file(path, "architectures: [" + archs + "]\nplugin: " + plugin + "\n");
}

// Sets an environment variable for the life of the object, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = ::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(MappingRegistryTest, LoadsEveryYamlFile) {
  test::TempDir dir;
  write_mapping(dir / "a.yaml", "A1, A2", "pa");
  write_mapping(dir / "b.yaml", "B", "pb");
  test::write_file(dir / "notes.txt", "not a mapping");
  test::write_file(dir / "c.yml", "not read: only *.yaml");
  const MappingRegistry reg = MappingRegistry::load({dir.path()});
  EXPECT_EQ(reg.architectures(), (std::vector<std::string>{"A1", "A2", "B"}));
  EXPECT_EQ(reg.files().size(), 2u);
  ASSERT_NE(reg.find("A2"), nullptr);
  EXPECT_EQ(reg.find("A2")->plugin, "pa");
  EXPECT_EQ(reg.find("A2")->file, dir / "a.yaml");
  EXPECT_EQ(reg.require("B").plugin, "pb");
  EXPECT_EQ(reg.find("C"), nullptr);
  EXPECT_TRUE(reg.warnings().empty());
}

TEST(MappingRegistryTest, RequireListsKnownArchitectures) {
  test::TempDir dir;
  write_mapping(dir / "a.yaml", "A1, A2", "pa");
  const MappingRegistry reg = MappingRegistry::load({dir.path()});
  try {
    reg.require("GPT2LMHeadModel");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_TRUE(contains(e.what(), "no mapping file serves architecture 'GPT2LMHeadModel'"));
    EXPECT_TRUE(contains(e.what(), "known architectures: A1, A2"));
    EXPECT_TRUE(contains(e.what(), dir.path().string()));
  }
}

TEST(MappingRegistryTest, ArchitectureServedTwiceInOneFolder) {
  test::TempDir dir;
  write_mapping(dir / "a.yaml", "A, Shared", "pa");
  test::write_file(dir / "b.yaml", "# second file\narchitectures: [B, Shared]\nplugin: pb\n");
  try {
    MappingRegistry::load({dir.path()});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMalformedInput);
    EXPECT_TRUE(contains(e.what(), "architecture 'Shared' is served by two mapping files"));
    EXPECT_TRUE(contains(e.what(), (dir / "a.yaml").string() + ":1"));
    EXPECT_TRUE(contains(e.what(), (dir / "b.yaml").string() + ":2"));
  }
}

TEST(MappingRegistryTest, EarlierFolderWinsAndShadowedFileIsNamed) {
  test::TempDir user, defaults;
  write_mapping(user / "my_llama.yaml", "LlamaForCausalLM", "custom");
  write_mapping(defaults / "llama.yaml", "LlamaForCausalLM, MistralForCausalLM", "llama");
  const MappingRegistry reg = MappingRegistry::load({user.path(), defaults.path()});
  EXPECT_EQ(reg.require("LlamaForCausalLM").plugin, "custom");
  EXPECT_EQ(reg.require("MistralForCausalLM").plugin, "llama");  // not shadowed: still served
  ASSERT_EQ(reg.warnings().size(), 1u);
  EXPECT_TRUE(contains(reg.warnings()[0], "architecture 'LlamaForCausalLM'"));
  EXPECT_TRUE(contains(reg.warnings()[0],
                       (defaults / "llama.yaml").string() + " is shadowed by " + (user / "my_llama.yaml").string()));
}

TEST(MappingRegistryTest, MissingFolderWarnsAndRepeatedFolderIsReadOnce) {
  test::TempDir dir;
  write_mapping(dir / "a.yaml", "A", "pa");
  const MappingRegistry reg = MappingRegistry::load({dir / "nope", dir.path(), dir.path() / "."});
  EXPECT_EQ(reg.files().size(), 1u);
  EXPECT_EQ(reg.folders().size(), 1u);
  ASSERT_EQ(reg.warnings().size(), 1u);
  EXPECT_TRUE(contains(reg.warnings()[0], "does not exist"));
}

TEST(MappingRegistryTest, BadFileFailsTheLoad) {
  test::TempDir dir;
  write_mapping(dir / "a.yaml", "A", "pa");
  test::write_file(dir / "b.yaml", "architectures: [B\n");
  try {
    MappingRegistry::load({dir.path()});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMalformedInput);
    EXPECT_TRUE(contains(e.what(), (dir / "b.yaml").string() + ":"));
  }
  test::write_file(dir / "b.yaml", "x");
  EXPECT_THROW(MappingRegistry::load({dir / "a.yaml"}), Error);  // a file is not a folder
}

// Every shipped mapping file loads, compiles and serves what the design says.
TEST(MappingRegistryTest, ShippedMappings) {
  const MappingRegistry reg = MappingRegistry::load({test::source_dir() / "mappings"});
  EXPECT_TRUE(reg.warnings().empty());
  for (const char* arch : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    EXPECT_EQ(reg.require(arch).plugin, "llama") << arch;
  }
  // The MoE families' plugin name is not settled; whatever it is, both files name the same one.
  EXPECT_FALSE(reg.require("MixtralForCausalLM").plugin.empty());
  EXPECT_EQ(reg.require("MixtralForCausalLM").plugin, reg.require("Qwen3MoeForCausalLM").plugin);
  EXPECT_EQ(reg.require("DeepseekV3ForCausalLM").plugin, "deepseek_v3");
  for (const auto& file : reg.files()) EXPECT_NO_THROW(RenameTable{*file}) << file->file;
  const RenameTable llama(reg.require("LlamaForCausalLM"));
  EXPECT_TRUE(llama.ignored("model.layers.12.self_attn.rotary_emb.inv_freq"));
  EXPECT_EQ(llama.canonical("model.layers.12.mlp.gate_proj.weight"), "model.layers.12.mlp.gate_proj.weight");
}

TEST(MappingRegistryTest, SearchPathOrder) {
  // search_path()'s rules: --mappings, WMAP_MAPPINGS_PATH (empty entries skipped), the defaults;
  // folders that do not exist dropped, a folder reached twice kept at its first place.
  test::TempDir cli, one, two, def;
  {
    const std::string list = one.path().string() + "::/no/such/folder:" + two.path().string() + ":";
    ScopedEnv env("WMAP_MAPPINGS_PATH", list.c_str());
    const auto path = mapping_search_path(cli.path(), def.path());
    EXPECT_EQ(path, (std::vector<std::filesystem::path>{cli.path(), one.path(), two.path(), def.path()}));
    EXPECT_EQ(mapping_search_path(std::nullopt, def.path()),
              (std::vector<std::filesystem::path>{one.path(), two.path(), def.path()}));
    // The loader's defaults: the plugin folders, then the share folder; duplicates kept once.
    EXPECT_EQ(mapping_search_path(two.path(), std::vector<std::filesystem::path>{one.path(), def.path(), one.path()}),
              (std::vector<std::filesystem::path>{two.path(), one.path(), def.path()}));
  }
  {
    ScopedEnv env("WMAP_MAPPINGS_PATH", nullptr);
    EXPECT_EQ(mapping_search_path(std::nullopt, def.path()), std::vector<std::filesystem::path>{def.path()});
    EXPECT_EQ(mapping_search_path(std::nullopt, def / "missing"), std::vector<std::filesystem::path>{});
    try {
      mapping_search_path(cli / "missing", def.path());
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kNotFound);
      EXPECT_TRUE(contains(e.what(), (cli / "missing").string()));
      EXPECT_TRUE(contains(e.what(), "mappings folder"));  // the setting, not a CLI flag
    }
  }
}

TEST(MappingRegistryTest, UserFolderFromEnvironmentOverridesDefaults) {
  test::TempDir user;
  write_mapping(user / "mixtral.yaml", "MixtralForCausalLM", "my_moe");
  ScopedEnv env("WMAP_MAPPINGS_PATH", user.path().c_str());
  const MappingRegistry reg = MappingRegistry::load(mapping_search_path(std::nullopt, test::source_dir() / "mappings"));
  EXPECT_EQ(reg.require("MixtralForCausalLM").plugin, "my_moe");
  EXPECT_EQ(reg.require("LlamaForCausalLM").plugin, "llama");
  ASSERT_EQ(reg.warnings().size(), 1u);
  EXPECT_TRUE(contains(reg.warnings()[0], "mappings/mixtral.yaml is shadowed by"));
}

}  // namespace
}  // namespace wmap
