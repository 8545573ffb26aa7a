// Inputs found by the fuzzers (fuzz/), kept as regression tests. Each runs in a child process with
// a time limit, so a hang fails the test instead of stalling the suite.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "core_test_helpers.h"
#include "test_util.h"
#include "wmap/catalog/shard_set.h"
#include "wmap/util/error.h"
#include "wmap/mapping/mapping_file.h"
#include "wmap/mapping/rename_table.h"

namespace wmap::test {
namespace {

// Runs fn in a child; true when it returned (or threw wmap::Error) within `seconds`.
template <typename Fn>
bool finishes_cleanly(Fn&& fn, unsigned seconds) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(seconds);
    try {
      fn();
    } catch (const Error&) {
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// mapping_fuzzer, 60 s run: this 332-byte YAML (invalid UTF-8 in a comment, a broken flow list)
// never finishes: yaml-cpp 0.7's YAML::LoadAll (called by parse_mapping_text) loops forever,
// appending empty documents until memory runs out (gdb: LoadAll -> vector<Node>::_M_realloc_insert).
// mapping_file.cc now loads one document with YAML::Load and finds a second one by its marker.
TEST(FuzzRegression, MappingYamlHangFinishes) {
  const std::string yaml = read_file(source_dir() / "tests/reliability/data/mapping_fuzz_hang.yaml");
  EXPECT_TRUE(finishes_cleanly(
      [&] {
        const MappingFile m = parse_mapping_text(yaml, "hang.yaml");
        RenameTable table(m);
      },
      10));
}

// shard_index_fuzzer (differential, 150 s): an index whose weight_map has `"k": "v"   : "w"` and
// more damage after it. The fast on-demand parser read it as two entries with garbled names, where
// a DOM parse refuses it; on-demand iteration does not check what follows a value it was only
// asked for the raw bytes of. Now refused, as not valid JSON, like the DOM parse refuses it.
TEST(FuzzRegression, IndexWithAValueFollowedByAColonIsRefused) {
  const std::string json = read_file(source_dir() / "tests/reliability/data/index_fuzz_value_then_colon.json");
  std::vector<std::string> shards;
  EXPECT_WMAP_ERROR(parse_shard_index(json, "fuzz.index.json", shards), ErrorCode::kMalformedInput, "fuzz.index.json",
                    "not valid JSON");
  // The smallest forms of the same damage, and an unescaped control character in a key.
  for (const std::string& bad :
       std::vector<std::string>{R"({"weight_map": {"a": "x.safetensors" : "y.safetensors"}})",
                                R"({"weight_map": {"a": "x.safetensors" "b": "y.safetensors"}})",
                                std::string("{\"weight_map\": {\"a\tb\": \"x.safetensors\"}}")}) {
    SCOPED_TRACE(bad);
    shards.clear();
    EXPECT_WMAP_ERROR(parse_shard_index(bad, "f.json", shards), ErrorCode::kMalformedInput, "f.json");
  }
  // Escapes are still read: a quote and a backslash inside a key.
  shards.clear();
  const ShardIndex ok = parse_shard_index(R"({"weight_map": {"a\"b\\c": "x.safetensors"}})", "f.json", shards);
  ASSERT_EQ(ok.weight_map.size(), 1u);
  EXPECT_EQ(ok.weight_map[0].first, "a\"b\\c");
}

}  // namespace
}  // namespace wmap::test
