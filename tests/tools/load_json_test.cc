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
  const std::vector<std::string> want = {"params",
                                         "bytes_loaded",
                                         "bytes_read",
                                         "bytes_needed",
                                         "reads",
                                         "seconds",
                                         "gbps",
                                         "stream_gbps",
                                         "setup_seconds",
                                         "device_open_seconds",
                                         "peak_rss",
                                         "io_path",
                                         "io_requested",
                                         "io_reason",
                                         "load_workers",
                                         "read_workers",
                                         "prefetch",
                                         "prefault",
                                         "prefault_decision",
                                         "phases",
                                         "device",
                                         "catalog_seconds",
                                         "plan_seconds",
                                         "plan_id",
                                         "layout",
                                         "verified",
                                         "cache",
                                         "rank",
                                         "world_size",
                                         "host",
                                         "node",
                                         "node_rank",
                                         "node_size",
                                         "io_policy_requested",
                                         "io_policy",
                                         "io_policy_reason",
                                         "storage_bytes",
                                         "received_bytes",
                                         "sent_bytes",
                                         "received_off_node_bytes",
                                         "sent_off_node_bytes",
                                         "needed_bytes",
                                         "needed_extents",
                                         "union_bytes",
                                         "os_read_bytes",
                                         "io_policy_seconds",
                                         "end_to_end_gbps"};
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

// Review F4: `plan --json` and `load --json` print the one layout form for every option (load
// --json used to leave mtp_layers out, so --mtp-layers 0 and the default looked the same), and
// the plan id follows it.
TEST(LoadJson, PlanAndLoadPrintTheSameLayoutForEveryOption) {
  TempDir dir;
  const auto ckpt = dir / "ds";
  ASSERT_EQ(run_wmap("synth deepseek_v3 " + shell_quote(ckpt.string())).exit_code, 0);
  simdjson::dom::parser parser;
  auto layout_of = [&](const std::string& text, const std::string& what) {
    simdjson::dom::element doc;
    EXPECT_EQ(parser.parse(simdjson::padded_string(text)).get(doc), simdjson::SUCCESS) << what << ": " << text;
    return simdjson::minify(doc["layout"]);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"",
       R"({"tp_size":1,"tp_rank":0,"ep_size":1,"pp_size":1,"pp_rank":0,"pp_partition":null,"mtp_layers":null,"target":"trtllm","attention_dp":false,"gpus_per_node":8,"moe_backend":null})"},
      {"--mtp-layers 0",
       R"({"tp_size":1,"tp_rank":0,"ep_size":1,"pp_size":1,"pp_rank":0,"pp_partition":null,"mtp_layers":0,"target":"trtllm","attention_dp":false,"gpus_per_node":8,"moe_backend":null})"},
      {"--tp-size 4 --tp-rank 3 --ep-size 2 --mtp-layers 2 --gpus-per-node 2",
       R"({"tp_size":4,"tp_rank":3,"ep_size":2,"pp_size":1,"pp_rank":0,"pp_partition":null,"mtp_layers":2,"target":"trtllm","attention_dp":false,"gpus_per_node":2,"moe_backend":null})"},
      {"--tp-size 2 --tp-rank 1 --attention-dp",
       R"({"tp_size":2,"tp_rank":1,"ep_size":1,"pp_size":1,"pp_rank":0,"pp_partition":null,"mtp_layers":null,"target":"trtllm","attention_dp":true,"gpus_per_node":8,"moe_backend":null})"},
      {"--tp-size 2 --tp-rank 1 --pp-size 2 --pp-rank 1 --pp-partition 2,1",
       R"({"tp_size":2,"tp_rank":1,"ep_size":1,"pp_size":2,"pp_rank":1,"pp_partition":[2,1],"mtp_layers":null,"target":"trtllm","attention_dp":false,"gpus_per_node":8,"moe_backend":null})"},
      {"--tp-size 2 --tp-rank 1 --ep-size 2 --target vllm",
       R"({"tp_size":2,"tp_rank":1,"ep_size":2,"pp_size":1,"pp_rank":0,"pp_partition":null,"mtp_layers":null,"target":"vllm","attention_dp":false,"gpus_per_node":8,"moe_backend":null})"},
  };
  std::vector<std::string> ids;
  for (const auto& [flags, want] : cases) {
    const auto plan = run_wmap("plan " + shell_quote(ckpt.string()) + " --json " + flags);
    ASSERT_EQ(plan.exit_code, 0) << flags << "\n" << plan.err;
    const std::string planned = layout_of(plan.out, "plan " + flags);
    const auto load = run_wmap("-q load " + shell_quote(ckpt.string()) + " --json " + flags);
    ASSERT_EQ(load.exit_code, 0) << flags << "\n" << load.err;
    EXPECT_EQ(planned, want) << flags;
    EXPECT_EQ(layout_of(load.out, "load " + flags), planned) << flags;
    simdjson::dom::element doc;
    ASSERT_EQ(parser.parse(simdjson::padded_string(load.out)).get(doc), simdjson::SUCCESS);
    ids.emplace_back(std::string_view(doc["plan_id"].get_string().value()));
  }
  EXPECT_NE(ids[0], ids[1]) << "mtp_layers 0 and the checkpoint's default are two plans";
}

// Negative or absurd layout values are refused before anything runs, naming the option (review
// F4: --mtp-layers -7 used to mean "the checkpoint's default").
TEST(LoadJson, NegativeOrAbsurdLayoutValuesAreRefusedByName) {
  TempDir dir;
  const auto ckpt = dir / "ds";
  ASSERT_EQ(run_wmap("synth deepseek_v3 " + shell_quote(ckpt.string())).exit_code, 0);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--mtp-layers -7", "--mtp-layers: '-7' is not a non-negative integer"},
      {"--tp-size -1", "--tp-size: '-1' is not a non-negative integer"},
      {"--tp-rank -1", "--tp-rank: '-1' is not a non-negative integer"},
      {"--ep-size 1e3", "--ep-size: '1e3' is not a non-negative integer"},
      {"--gpus-per-node 99999999999", "--gpus-per-node: '99999999999' is larger than 4294967295"},
      {"--mtp-layers 100000", "mtp_layers 100000 is more than 64"},
      {"--tp-size 0", "tp_size must be at least 1"},
      {"--target tensorrt", "--target: tensorrt not in {trtllm,vllm}"},
  };
  for (const std::string cmd : {"plan", "load"}) {
    for (const auto& [flags, want] : bad) {
      const auto r = run_wmap(cmd + " " + shell_quote(ckpt.string()) + " " + flags);
      EXPECT_EQ(r.exit_code, 2) << cmd << " " << flags << "\n" << r.err;
      EXPECT_NE(r.err.find(want), std::string::npos) << cmd << " " << flags << "\n" << r.err;
    }
  }
}

}  // namespace
}  // namespace wmap::test
