// `wmap load --json`: one line, one JSON object, the documented keys in the documented order
// (docs/cli.md), each once, with the documented value types.
#include <gtest/gtest.h>
#include <unistd.h>
#include <simdjson.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace wmap::test {
namespace {

TEST(LoadJson, KeysInOrderOnceWithTheirTypes) {
  TempDir dir;
  const auto ckpt = dir / "ckpt";
  ASSERT_EQ(run_wmap("synth llama " + shell_quote(ckpt.string())).exit_code, 0);
  const CommandResult r = run_wmap("load " + shell_quote(ckpt.string()) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line: " << r.out;
  simdjson::dom::parser parser;
  simdjson::dom::object obj;
  ASSERT_EQ(parser.parse(simdjson::padded_string(r.out)).get(obj), simdjson::SUCCESS) << r.out;
  std::vector<std::string> keys;
  for (auto field : obj) keys.emplace_back(field.key);
  const std::vector<std::string> want = {
      "params", "bytes_loaded", "bytes_read", "bytes_needed", "reads", "seconds", "gbps", "stream_gbps", "setup_seconds",
      "device_open_seconds", "peak_rss", "io_path",
      "io_requested", "io_reason", "load_workers", "read_workers", "prefetch", "prefault", "phases", "device",
      "catalog_seconds", "plan_seconds", "plan_id", "layout", "rank", "world_size", "host", "node", "node_rank", "node_size",
      "io_policy_requested", "io_policy", "io_policy_reason", "storage_bytes", "received_bytes", "sent_bytes",
      "received_off_node_bytes", "sent_off_node_bytes", "needed_bytes", "needed_extents", "union_bytes",
      "os_read_bytes", "io_policy_seconds", "end_to_end_gbps"};
  EXPECT_EQ(keys, want) << r.out;
  EXPECT_TRUE(obj["params"].is_uint64());
  EXPECT_TRUE(obj["seconds"].is_double());
  EXPECT_TRUE(obj["prefetch"].is_bool());
  EXPECT_TRUE(obj["device"].is_string());
  EXPECT_TRUE(obj["plan_id"].is_string());
  EXPECT_EQ(std::string_view(obj["layout"]["target"].get_string().value()), "trtllm");
  EXPECT_TRUE(obj["layout"]["gpus_per_node"].is_uint64());
  EXPECT_TRUE(obj["load_workers"]["effective"].is_uint64());
  EXPECT_TRUE(obj["phases"]["copy"].is_double());
  EXPECT_EQ(std::string_view(obj["io_policy"].get_string().value()), "native");
  // A single process is its node's only rank, on this host.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  EXPECT_EQ(std::string_view(obj["host"].get_string().value()), host);
  EXPECT_EQ(obj["node_rank"].get_uint64().value(), 0u);
  EXPECT_EQ(obj["node_size"].get_uint64().value(), 1u);
  EXPECT_EQ(obj["sent_off_node_bytes"].get_uint64().value(), 0u);
}

}  // namespace
}  // namespace wmap::test
