// `wmap --version [--json]`: the build, its plugin ABI, the plan format and the engine releases
// whose load_weights the --target rules follow (issue 40: DeepSeek's kv_b_proj under the current
// TensorRT-LLM release).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "wmap/abi/plugin_api.h"

namespace wmap::test {
namespace {

TEST(VersionCli, NamesTheBuildAndTheEngineReleasesFollowed) {
  const auto text = run_wmap("--version");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("--target trtllm follows TensorRT-LLM 1.3.0rc25"), std::string::npos) << text.out;
  const auto r = run_wmap("--version --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["plugin_abi"], WMAP_PLUGIN_ABI_VERSION);
  EXPECT_EQ(j["plan_format"], 9);
  EXPECT_NE(j["engines"]["trtllm"]["note"].get<std::string>().find("kv_b_proj dequantised to BF16"), std::string::npos);
  EXPECT_FALSE(j["engines"]["vllm"]["release"].get<std::string>().empty());
}

}  // namespace
}  // namespace wmap::test
