// PluginHost against real shared libraries built by tests/plugin/CMakeLists.txt: one good plugin
// and one broken library per failure mode, each scenario in its own folder.
#include "wmap/plugin/plugin_host.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "plugin_fixture_paths.h"
#include "test_util.h"
#include "wmap/build_info.h"
#include "wmap/util/error.h"
#include "wmap/util/install_paths.h"

namespace wmap {
namespace {

namespace fs = std::filesystem;

fs::path fixture_dir(const std::string& scenario) { return fs::path(WMAP_PLUGIN_FIXTURE_DIR) / scenario; }

class SetProbe final : public KeyProbe {
 public:
  explicit SetProbe(std::set<std::string> keys = {}) : keys_(std::move(keys)) {}
  bool contains(std::string_view key) const override { return keys_.count(std::string(key)) > 0; }
  std::optional<DType> dtype_of(std::string_view key) const override {
    return contains(key) ? std::optional<DType>(DType::kBF16) : std::nullopt;
  }
  std::optional<std::vector<uint64_t>> shape_of(std::string_view) const override { return std::nullopt; }
  std::optional<uint64_t> highest_index(std::string_view) const override { return std::nullopt; }
  TensorDim largest_dim() const override { return {}; }

 private:
  std::set<std::string> keys_;
};

ModelConfig fixture_config() {
  return ModelConfig::parse(R"({"architectures": ["FixtureForCausalLM"]})", "config.json");
}

Layout layout(uint32_t tp_size, uint32_t tp_rank) {
  Layout l;
  l.tp_size = tp_size;
  l.tp_rank = tp_rank;
  return l;
}

std::optional<Error> capture(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-wmap exception escaped: " << e.what();
    return std::nullopt;
  } catch (...) {
    ADD_FAILURE() << "non-exception escaped";
    return std::nullopt;
  }
  ADD_FAILURE() << "expected a wmap::Error";
  return std::nullopt;
}

// The one entry of `lines` containing `needle` (a test failure when there is not exactly one).
std::string line_with(const std::vector<std::string>& lines, const std::string& needle) {
  std::vector<std::string> hits;
  for (const auto& l : lines) {
    if (l.find(needle) != std::string::npos) hits.push_back(l);
  }
  if (hits.size() != 1) {
    ADD_FAILURE() << hits.size() << " lines contain '" << needle << "'";
    return "";
  }
  return hits.front();
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

void expect_good_plugin_works(const PluginHost& host) {
  const LoadedPlugin* good = host.find_by_name("fixture_good");
  ASSERT_NE(good, nullptr);
  EXPECT_EQ(host.find_by_architecture("FixtureForCausalLM"), good);
  const ModelSpec spec = host.build_spec(*good, fixture_config(), layout(1, 0), SetProbe());
  ASSERT_EQ(spec.modules.size(), 1u);
  EXPECT_EQ(spec.modules[0].params.size(), 1u);
}

TEST(PluginHost, GoodPluginLoadsAndBuilds) {
  const PluginHost host = PluginHost::load({fixture_dir("good")});
  EXPECT_NE(test::read_file("/proc/self/maps").find("libfixture_good.so"), std::string::npos);
  EXPECT_TRUE(host.refused().empty());
  EXPECT_TRUE(host.notes().empty());
  ASSERT_EQ(host.plugins().size(), 1u);
  const LoadedPlugin& p = host.require_by_name("fixture_good");
  EXPECT_EQ(p.name, "fixture_good");
  EXPECT_EQ(p.version, "1.0");
  EXPECT_EQ(p.file.filename(), "libfixture_good.so");
  EXPECT_EQ(p.architectures, std::vector<std::string>{"FixtureForCausalLM"});
  EXPECT_EQ(p.targets, (std::vector<std::string>{"trtllm", "vllm"}));
  EXPECT_EQ(host.find_by_architecture("FixtureForCausalLM"), &p);
  EXPECT_EQ(host.find_by_architecture("LlamaForCausalLM"), nullptr);
  EXPECT_EQ(host.find_by_name("llama"), nullptr);

  // The layout and the probe reach the plugin.
  const ModelSpec spec = host.build_spec(p, fixture_config(), layout(2, 1), SetProbe({"model.embed.bias"}));
  // The host records the layout in the spec (the plan reads it from there).
  EXPECT_EQ(spec.layout.tp_size, 2u);
  EXPECT_EQ(spec.layout.tp_rank, 1u);
  EXPECT_EQ(spec.plugin, "fixture_good");
  EXPECT_EQ(spec.architecture, "FixtureForCausalLM");
  ASSERT_EQ(spec.modules.size(), 1u);
  ASSERT_EQ(spec.modules[0].params.size(), 2u);
  const ParamSpec& w = spec.modules[0].params[0];
  EXPECT_EQ(w.name, "model.embed.weight");
  EXPECT_EQ(w.shape, (std::vector<uint64_t>{4, 4}));
  ASSERT_EQ(w.pieces.size(), 1u);
  ASSERT_EQ(w.pieces[0].box.size(), 2u);
  EXPECT_EQ(w.pieces[0].box[0].begin, 4u);
  EXPECT_EQ(w.pieces[0].box[0].end, 8u);
  EXPECT_EQ(spec.modules[0].params[1].name, "model.embed.bias");
  EXPECT_EQ(spec.skipped_keys, std::vector<std::string>{"model.rotary.inv_freq"});
}

TEST(PluginHost, GoodPluginTransformWorks) {
  const PluginHost host = PluginHost::load({fixture_dir("good")});
  const TransformFn* fn = host.find_transform("fixture_invert_bytes");
  ASSERT_NE(fn, nullptr);
  std::vector<std::byte> data = {std::byte{0x00}, std::byte{0x0f}, std::byte{0xff}};
  (*fn)(data, DType::kU8, "model.embed.weight", {});
  EXPECT_EQ(data, (std::vector<std::byte>{std::byte{0xff}, std::byte{0xf0}, std::byte{0x00}}));
  // A transform's own wmap::Error comes through with its key.
  auto err = capture([&] { (*fn)({}, DType::kU8, "some.key", {}); });
  ASSERT_TRUE(err);
  EXPECT_HAS(err->what(), "some.key");
  EXPECT_EQ(host.find_transform("no_such_transform"), nullptr);
}

TEST(PluginHost, WrongAbiAndBuildIdAreReportedTogetherBeforeRegistration) {
  // register_plugin of this fixture aborts: reaching the assertions proves it never ran.
  const PluginHost host = PluginHost::load({fixture_dir("wrong_abi"), fixture_dir("good")});
  ASSERT_EQ(host.refused().size(), 1u);
  const std::string& msg = host.refused()[0];
  EXPECT_HAS(msg, "libfixture_wrong_abi.so");
  EXPECT_HAS(msg, "fixture_wrong_abi");
  EXPECT_HAS(msg, "ABI version 999");
  EXPECT_HAS(msg, "host's ABI version " + std::to_string(WMAP_PLUGIN_ABI_VERSION));
  EXPECT_HAS(msg, "wmap-0.0.0-abi999-OtherCompiler-0");
  EXPECT_HAS(msg, "declares unknown target \"sglang\" (known: trtllm, vllm)");  // listed with the rest
  EXPECT_HAS(msg, std::string(wmap_core_build_id()));
  EXPECT_EQ(host.find_by_name("fixture_wrong_abi"), nullptr);
  EXPECT_EQ(host.find_by_architecture("WrongAbiForCausalLM"), nullptr);

  // The host survives and the good plugin still works.
  expect_good_plugin_works(host);

  // Asking for the refused plugin explains why it is missing.
  auto err = capture([&] { host.require_by_name("fixture_wrong_abi"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::kNotFound);
  EXPECT_HAS(err->what(), "no plugin named 'fixture_wrong_abi'");
  EXPECT_HAS(err->what(), "libfixture_wrong_abi.so was refused");
  EXPECT_HAS(err->what(), "999");
  EXPECT_HAS(err->what(), "fixture_good (");
}

TEST(PluginHost, TruncatedStructAndNullFieldsAreAllReported) {
  const PluginHost host = PluginHost::load({fixture_dir("bad_fields")});
  ASSERT_EQ(host.refused().size(), 1u);
  const std::string& msg = host.refused()[0];
  EXPECT_HAS(msg, "libfixture_bad_fields.so");
  EXPECT_HAS(msg, "struct_size " + std::to_string(sizeof(WmapPluginInfo) - sizeof(void*)));
  EXPECT_HAS(msg, std::to_string(sizeof(WmapPluginInfo)));
  EXPECT_HAS(msg, "name is null");
  EXPECT_HAS(msg, "architectures is null");
  EXPECT_EQ(msg.find("ABI version"), std::string::npos) << msg;
  EXPECT_TRUE(host.plugins().empty());
}

TEST(PluginHost, LibrariesWithoutTheEntryAreNotedNotRefused) {
  const PluginHost host =
      PluginHost::load({fixture_dir("missing_entry"), fixture_dir("not_plugin"), fixture_dir("good")});
  EXPECT_TRUE(host.refused().empty());
  ASSERT_EQ(host.notes().size(), 2u);
  EXPECT_HAS(line_with(host.notes(), "libfixture_missing_entry.so"), "not a wmap plugin");
  EXPECT_HAS(line_with(host.notes(), "libfixture_not_plugin.so"), "not a wmap plugin");
  expect_good_plugin_works(host);
}

TEST(PluginHost, LibraryThatDoesNotOpenIsRefusedWithTheLoaderMessage) {
  test::TempDir dir;
  test::write_file(dir / "libgarbage.so", std::string(256, 'x'));
  test::write_file(dir / "README.txt", "not a library, not even looked at");
  const PluginHost host = PluginHost::load({dir.path(), fixture_dir("good")});
  ASSERT_EQ(host.refused().size(), 1u);
  const std::string& msg = host.refused()[0];
  EXPECT_HAS(msg, (dir / "libgarbage.so").string() + ": refused: cannot be loaded: ");
  EXPECT_HAS(msg, "ELF");  // dlerror(): "invalid ELF header"
  EXPECT_TRUE(host.notes().empty());
  expect_good_plugin_works(host);
}

TEST(PluginHost, FailedRegistrationIsRefusedWithPluginFileAndMessage) {
  const PluginHost host = PluginHost::load({fixture_dir("register_fails"), fixture_dir("good")});
  ASSERT_EQ(host.refused().size(), 3u);

  const std::string thrown = line_with(host.refused(), "libfixture_register_throws.so");
  EXPECT_HAS(thrown, "plugin 'fixture_register_throws'");
  EXPECT_HAS(thrown, "fixture: cannot open the resource table");

  const std::string returned = line_with(host.refused(), "libfixture_register_error.so");
  EXPECT_HAS(returned, "plugin 'fixture_register_error'");
  EXPECT_HAS(returned, "code 7");
  EXPECT_HAS(returned, "fixture: registration refused on purpose");

  const std::string no_builder = line_with(host.refused(), "libfixture_no_builder.so");
  EXPECT_HAS(no_builder, "plugin 'fixture_no_builder'");
  EXPECT_HAS(no_builder, "did not set a model builder");

  // Nothing a refused plugin staged reaches the host.
  EXPECT_EQ(host.find_transform("fixture_register_error_noop"), nullptr);
  EXPECT_EQ(host.find_transform("fixture_no_builder_noop"), nullptr);
  EXPECT_EQ(host.find_by_architecture("RegisterErrorForCausalLM"), nullptr);
  EXPECT_EQ(host.plugins().size(), 1u);
  expect_good_plugin_works(host);
}

TEST(PluginHost, ClashesInsideOneFolderRefuseBothSides) {
  const PluginHost host = PluginHost::load({fixture_dir("clash"), fixture_dir("good")});
  ASSERT_EQ(host.refused().size(), 4u);

  const std::string a = line_with(host.refused(), "libfixture_clash_a.so: ");
  EXPECT_HAS(a, "architecture 'ClashForCausalLM'");
  EXPECT_HAS(a, "libfixture_clash_b.so");
  const std::string b = line_with(host.refused(), "libfixture_clash_b.so: ");
  EXPECT_HAS(b, "libfixture_clash_a.so");
  EXPECT_EQ(host.find_by_architecture("ClashForCausalLM"), nullptr);

  const std::string d1 = line_with(host.refused(), "libfixture_dup_1.so: ");
  EXPECT_HAS(d1, "plugin name 'fixture_dup'");
  EXPECT_HAS(d1, "libfixture_dup_2.so");
  const std::string d2 = line_with(host.refused(), "libfixture_dup_2.so: ");
  EXPECT_HAS(d2, "libfixture_dup_1.so");
  EXPECT_EQ(host.find_by_name("fixture_dup"), nullptr);
  EXPECT_EQ(host.find_by_architecture("Dup1ForCausalLM"), nullptr);

  auto err = capture([&] { host.require_by_name("fixture_dup"); });
  ASSERT_TRUE(err);
  EXPECT_HAS(err->what(), "libfixture_dup_1.so was refused");
  EXPECT_HAS(err->what(), "libfixture_dup_2.so was refused");

  EXPECT_EQ(host.plugins().size(), 1u);
  expect_good_plugin_works(host);
}

TEST(PluginHost, ThrowingBuilderBecomesAnErrorNamingPluginAndFile) {
  const PluginHost host = PluginHost::load({fixture_dir("throwing_builder")});
  const LoadedPlugin& p = host.require_by_name("fixture_throws");
  const std::string prefix = "plugin 'fixture_throws' (" + p.file.string() + "): ";
  EXPECT_HAS(prefix, "libfixture_throws.so");

  // An exception type defined in the plugin.
  auto err = capture([&] { host.build_spec(p, fixture_config(), layout(1, 0), SetProbe()); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::kInternal);
  EXPECT_EQ(std::string(err->what()), prefix + "fixture builder exploded");

  // A wmap::Error keeps its code (a config error stays malformed input, exit 2).
  err = capture([&] { host.build_spec(p, fixture_config(), layout(1, 0), SetProbe({"throw.wmap_error"})); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::kMalformedInput);
  EXPECT_EQ(std::string(err->what()), prefix + "config.json: hidden_size: expected an integer");

  // Not even an exception.
  err = capture([&] { host.build_spec(p, fixture_config(), layout(1, 0), SetProbe({"throw.int"})); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::kInternal);
  EXPECT_EQ(std::string(err->what()), prefix + "unknown exception");
}

TEST(PluginHost, AnUnservedTargetIsRefusedNamingTheServedOnes) {
  const PluginHost host = PluginHost::load({fixture_dir("throwing_builder")});  // serves trtllm only
  const LoadedPlugin& p = host.require_by_name("fixture_throws");
  EXPECT_EQ(p.targets, std::vector<std::string>{"trtllm"});
  Layout vllm = layout(1, 0);
  vllm.target = Target::kVllm;
  auto err =
      capture([&] { host.build_spec(p, fixture_config(), vllm, SetProbe()); });  // refused before the builder runs
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(std::string(err->what()), "plugin 'fixture_throws' (" + p.file.string() +
                                          "): does not serve target vllm for FixtureForCausalLM; it serves: trtllm");
}

TEST(PluginHost, EarlierFolderWinsAndTheShadowedPluginIsNoted) {
  {
    const PluginHost host = PluginHost::load({fixture_dir("good"), fixture_dir("newer")});
    EXPECT_TRUE(host.refused().empty());
    ASSERT_EQ(host.plugins().size(), 1u);
    EXPECT_EQ(host.require_by_name("fixture_good").version, "1.0");
    ASSERT_EQ(host.notes().size(), 1u);
    EXPECT_HAS(host.notes()[0], "libfixture_good_v2.so: plugin 'fixture_good' is shadowed by");
    EXPECT_HAS(host.notes()[0], (fixture_dir("good") / "libfixture_good.so").string());
  }
  {
    const PluginHost host = PluginHost::load({fixture_dir("newer"), fixture_dir("good")});
    EXPECT_EQ(host.require_by_name("fixture_good").version, "2.0");
    EXPECT_EQ(host.find_by_architecture("FixtureForCausalLM")->version, "2.0");
  }
}

TEST(PluginHost, ArchitectureAndTransformClaimsAcrossFoldersGoToTheEarlierPlugin) {
  const PluginHost host = PluginHost::load({fixture_dir("good"), fixture_dir("alt")});
  EXPECT_TRUE(host.refused().empty());
  ASSERT_EQ(host.plugins().size(), 2u);
  EXPECT_EQ(host.plugins()[0]->name, "fixture_good");
  EXPECT_EQ(host.plugins()[1]->name, "fixture_alt");
  EXPECT_EQ(host.find_by_architecture("FixtureForCausalLM")->name, "fixture_good");
  EXPECT_EQ(host.find_by_architecture("AltForCausalLM")->name, "fixture_alt");
  EXPECT_HAS(line_with(host.notes(), "architecture 'FixtureForCausalLM'"), "libfixture_alt.so");
  EXPECT_HAS(line_with(host.notes(), "transform 'fixture_invert_bytes'"), "libfixture_good.so");
  EXPECT_NE(host.find_transform("fixture_invert_bytes"), nullptr);
}

TEST(PluginHost, BuiltinTransformsWinOverPluginTransforms) {
  PluginHost host = PluginHost::load({fixture_dir("good")});
  int calls = 0;
  host.add_builtin_transform("fixture_invert_bytes", [&](std::span<std::byte>, DType, const std::string&,
                                                         std::span<const uint64_t>) { ++calls; });
  host.add_builtin_transform(
      "invert_scale", [&](std::span<std::byte>, DType, const std::string&, std::span<const uint64_t>) { calls += 10; });
  EXPECT_HAS(line_with(host.notes(), "fixture_invert_bytes"), "shadowed by the built-in");
  std::vector<std::byte> data(2);
  (*host.find_transform("fixture_invert_bytes"))(data, DType::kU8, "k", {});
  (*host.find_transform("invert_scale"))(data, DType::kU8, "k", {});
  EXPECT_EQ(calls, 11);
  EXPECT_EQ(data, std::vector<std::byte>(2));

  auto err = capture([&] {
    host.add_builtin_transform("invert_scale",
                               [](std::span<std::byte>, DType, const std::string&, std::span<const uint64_t>) {});
  });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::kInternal);

  // An empty host (no plugins at all) takes built-ins too.
  PluginHost empty;
  empty.add_builtin_transform("invert_scale",
                              [](std::span<std::byte>, DType, const std::string&, std::span<const uint64_t>) {});
  EXPECT_NE(empty.find_transform("invert_scale"), nullptr);
  EXPECT_TRUE(empty.plugins().empty());
  auto missing = capture([&] { empty.require_by_name("llama"); });
  ASSERT_TRUE(missing);
  EXPECT_HAS(missing->what(), "loaded plugins: none");
}

TEST(PluginHost, FolderListedTwiceAndMissingFoldersAreHarmless) {
  const PluginHost host =
      PluginHost::load({fixture_dir("good"), fixture_dir("good") / ".", fixture_dir("does_not_exist")});
  EXPECT_TRUE(host.refused().empty());
  EXPECT_EQ(host.plugins().size(), 1u);
  EXPECT_EQ(host.notes().size(), 1u);
  EXPECT_HAS(line_with(host.notes(), "does_not_exist"), "does not exist");
}

// Sets (or unsets) an environment variable for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name), old_(env_value(name)) {
    set(value);
  }
  ~ScopedEnv() { set(old_); }

 private:
  void set(const std::optional<std::string>& v) {
    if (v) {
      ::setenv(name_, v->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  const char* name_;
  std::optional<std::string> old_;
};

TEST(PluginSearchPath, CliDirThenEnvironmentThenDefault) {
  test::TempDir cli, env_a, env_b, def;
  ScopedEnv env("WMAP_PLUGIN_PATH",
                env_a.path().string() + "::" + (env_a / "missing").string() + ":" + env_b.path().string());
  EXPECT_EQ(plugin_search_path(cli.path(), def.path()),
            (std::vector<fs::path>{cli.path(), env_a.path(), env_b.path(), def.path()}));
  EXPECT_EQ(plugin_search_path(std::nullopt, def.path()),
            (std::vector<fs::path>{env_a.path(), env_b.path(), def.path()}));
  // A default folder that does not exist is dropped silently.
  EXPECT_EQ(plugin_search_path(std::nullopt, def / "missing"), (std::vector<fs::path>{env_a.path(), env_b.path()}));
}

TEST(PluginSearchPath, MissingCliDirIsAnError) {
  test::TempDir dir;
  ScopedEnv env("WMAP_PLUGIN_PATH", std::nullopt);
  auto err = capture([&] { plugin_search_path(dir / "nope", dir.path()); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::kNotFound);
  EXPECT_HAS(err->what(), (dir / "nope").string());
  EXPECT_HAS(err->what(), "plugin_dir folder");  // the setting, not a CLI flag
  test::write_file(dir / "file", "x");
  EXPECT_TRUE(capture([&] { plugin_search_path(dir / "file", dir.path()); }));
}

TEST(PluginSearchPath, DefaultsToTheInstallPluginFolder) {
  ScopedEnv env("WMAP_PLUGIN_PATH", std::nullopt);
  const auto path = plugin_search_path(std::nullopt);
  if (fs::is_directory(default_plugin_dir())) {
    EXPECT_EQ(path, std::vector<fs::path>{default_plugin_dir()});
  } else {
    EXPECT_TRUE(path.empty());
  }
}

TEST(PluginSearchPath, OrderDecidesWhichPluginLoads) {
  ScopedEnv env("WMAP_PLUGIN_PATH", fixture_dir("good").string());
  {
    const PluginHost host = PluginHost::load(plugin_search_path(fixture_dir("newer"), fixture_dir("does_not_exist")));
    EXPECT_EQ(host.require_by_name("fixture_good").version, "2.0");  // --plugin-dir first
  }
  {
    ScopedEnv env2("WMAP_PLUGIN_PATH", fixture_dir("good").string() + ":" + fixture_dir("newer").string());
    const PluginHost host = PluginHost::load(plugin_search_path(std::nullopt, fixture_dir("newer")));
    EXPECT_EQ(host.require_by_name("fixture_good").version, "1.0");  // WMAP_PLUGIN_PATH before the default
  }
}

TEST(PluginHost, SpecsAndErrorsOutliveTheHost) {
  std::optional<ModelSpec> spec;
  std::optional<Error> err;
  for (int round = 0; round < 3; ++round) {
    PluginHost host = PluginHost::load({fixture_dir("good"), fixture_dir("throwing_builder")});
    spec = host.build_spec(host.require_by_name("fixture_good"), fixture_config(), layout(1, 0), SetProbe());
    err = capture(
        [&] { host.build_spec(host.require_by_name("fixture_throws"), fixture_config(), layout(1, 0), SetProbe()); });
    // Move-assigning a host over another unloads the old one's libraries after its objects.
    host = PluginHost::load({fixture_dir("newer")});
    EXPECT_EQ(host.require_by_name("fixture_good").version, "2.0");
    PluginHost moved(std::move(host));
    expect_good_plugin_works(moved);
  }
  // Every library is unloaded now (so the checks above would have crashed had a builder outlived
  // its library); the plain data and the error message are still intact.
  const std::string maps = test::read_file("/proc/self/maps");
  EXPECT_EQ(maps.find("libfixture_good.so"), std::string::npos);
  EXPECT_EQ(maps.find("libfixture_good_v2.so"), std::string::npos);
  EXPECT_EQ(maps.find("libfixture_throws.so"), std::string::npos);
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->plugin, "fixture_good");
  EXPECT_EQ(spec->modules.at(0).params.at(0).pieces.at(0).transform, "fixture_invert_bytes");
  ASSERT_TRUE(err);
  EXPECT_HAS(err->what(), "fixture builder exploded");
}

}  // namespace
}  // namespace wmap
