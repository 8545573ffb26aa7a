// search_path(): the one rule plugins and mapping files are found by.
#include <gtest/gtest.h>

#include <cstdlib>

#include "test_util.h"
#include "wmap/util/error.h"
#include "wmap/util/install_paths.h"

namespace wmap {
namespace {

namespace fs = std::filesystem;

TEST(SearchPath, ExplicitThenEnvironmentThenDefaultsWithoutEmptiesMissingOrDuplicates) {
  test::TempDir a, b, c, d;
  const std::string env = ":" + b.path().string() + "::" + (a / "missing").string() + ":" + a.path().string() + ":" +
                          (c.path() / ".").string() + ":";
  ::setenv("WMAP_TEST_SEARCH_PATH", env.c_str(), 1);
  // a is explicit and in the environment; c is in the environment (as c/.) and a default.
  EXPECT_EQ(search_path({a.path(), ""}, "--dir", "WMAP_TEST_SEARCH_PATH", {c.path(), d.path(), d / "missing", ""}),
            (std::vector<fs::path>{a.path(), b.path(), c.path() / ".", d.path()}));
  ::unsetenv("WMAP_TEST_SEARCH_PATH");
  EXPECT_EQ(search_path({}, "--dir", "WMAP_TEST_SEARCH_PATH", {d.path()}), std::vector<fs::path>{d.path()});
  EXPECT_TRUE(search_path({}, "--dir", "WMAP_TEST_SEARCH_PATH", {}).empty());
}

TEST(SearchPath, AnExplicitFolderMustExist) {
  test::TempDir a;
  try {
    search_path({a / "nope"}, "plugin_dir", "WMAP_TEST_SEARCH_PATH", {a.path()});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find((a / "nope").string() + ": plugin_dir folder"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wmap
