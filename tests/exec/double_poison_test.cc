// The coverage certificate, checked by what the kernels write (review F9.4): the certificate is
// derived from the same schedule arithmetic the executor uses, so it proves the schedule agrees
// with itself, not that every byte is written. Here every destination of every family's plan is
// filled with 0xA5 and loaded, then filled with 0x5A and loaded again: a byte no copy, zero fill
// or transform wrote keeps its poison and the two results differ there.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>

#include "test_util.h"
#include "wmap/exec/destinations.h"
#include "wmap/loader/loader.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;

struct Case {
  const char* family;
  const char* name;        // the checkpoint's folder
  const char* synth_args;  // for `wmap synth`
  uint32_t tp, rank, ep;
  Target target;
};

// Every family, at least two layouts each (uneven splits and expert parallelism where the family
// has them), under each target it serves.
const Case kCases[] = {
    {"llama", "llama", "", 1, 0, 1, Target::kTrtllm},
    {"llama", "llama", "", 4, 3, 1, Target::kVllm},
    {"mistral", "mistral", "", 2, 1, 1, Target::kTrtllm},
    {"qwen2", "qwen2", "", 2, 1, 1, Target::kVllm},
    {"qwen3", "qwen3", "", 2, 0, 1, Target::kTrtllm},
    {"qwen3", "qwen3", "", 2, 1, 1, Target::kVllm},
    {"qwen3_moe", "qwen3_moe", "", 2, 1, 2, Target::kTrtllm},
    {"qwen3_moe", "qwen3_moe", "", 2, 0, 1, Target::kVllm},
    {"mixtral", "mixtral", "", 2, 0, 2, Target::kTrtllm},
    {"deepseek_v3", "deepseek_v3", "--fp8", 2, 1, 2, Target::kTrtllm},
    {"deepseek_v3", "deepseek_v3", "--fp8", 4, 2, 1, Target::kTrtllm},
    {"deepseek_v3", "deepseek_v3_vllm", "--fp8 --heads 8 --intermediate 512 --moe-intermediate 512", 2, 1, 2,
     Target::kVllm},
    {"kimi_k2", "kimi_k2", "", 2, 0, 1, Target::kTrtllm},
    {"deepseek_v32", "deepseek_v32", "", 2, 1, 1, Target::kTrtllm},
    {"glm4_moe", "glm4_moe", "", 2, 1, 2, Target::kTrtllm},
    {"gpt_oss", "gpt_oss", "", 2, 0, 1, Target::kTrtllm},
    {"gpt_oss", "gpt_oss", "", 2, 1, 2, Target::kVllm},
    {"llama4", "llama4", "", 2, 1, 1, Target::kVllm},
    {"llama4_text", "llama4_text", "", 2, 0, 1, Target::kTrtllm},
    {"phi3", "phi3", "", 2, 1, 1, Target::kTrtllm},
    {"qwen3_next", "qwen3_next", "", 2, 1, 1, Target::kTrtllm},
    {"llama", "llama_nvfp4", "--nvfp4", 2, 1, 1, Target::kTrtllm},
};

class DoublePoison : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new TempDir();
    for (const Case& c : kCases) {
      if (!fs::exists(root_->path() / c.name)) synth_checkpoint(root_->path(), c.family, c.name, c.synth_args);
    }
  }
  static void TearDownTestSuite() {
    delete root_;
    root_ = nullptr;
  }
  static TempDir* root_;
};
TempDir* DoublePoison::root_ = nullptr;

TEST_F(DoublePoison, EveryByteOfEveryFamilyPlanIsWrittenByTheLoad) {
  auto device = make_device("host");
  uint64_t checked = 0, params = 0;
  for (const Case& c : kCases) {
    const std::string label = std::string(c.name) + " " + std::string(target_name(c.target)) + " tp " +
                              std::to_string(c.rank) + "/" + std::to_string(c.tp) + " ep " + std::to_string(c.ep);
    SCOPED_TRACE(label);
    LoaderSession session(rank_options(root_->path() / c.name, c.tp, c.rank, c.ep, c.target));
    auto prepared = session.prepare();
    ASSERT_TRUE(prepared->plan->ok()) << prepared->plan->report(true);
    HostDestinations dests = host_destinations(*prepared->plan);
    auto& memory = dests.memory;
    ASSERT_FALSE(dests.table.empty());
    auto load_over = [&](std::byte poison) {
      for (auto& [name, bytes] : memory) std::fill(bytes.begin(), bytes.end(), poison);
      session.load_into(*prepared, *device, dests.table, ExecOptions{});
      return memory;  // a copy
    };
    const auto a5 = load_over(std::byte{0xA5});
    const auto x5a = load_over(std::byte{0x5A});
    size_t unwritten = 0;
    for (const auto& [name, bytes] : a5) {
      const auto& other = x5a.at(name);
      const auto diff = std::mismatch(bytes.begin(), bytes.end(), other.begin());
      if (diff.first == bytes.end()) continue;
      ++unwritten;
      ADD_FAILURE() << name << ": byte " << (diff.first - bytes.begin()) << " of " << bytes.size()
                    << " is the poison the load found there (no kernel wrote it)";
    }
    EXPECT_EQ(unwritten, 0u);
    for (const auto& [name, bytes] : a5) checked += bytes.size();
    params += a5.size();
  }
  // The families' plans are small but not empty: each case loads every parameter twice.
  EXPECT_GT(params, 20u * std::size(kCases));
  std::printf("double poison: %zu layouts, %llu parameters, %llu bytes each written twice\n", std::size(kCases),
              static_cast<unsigned long long>(params), static_cast<unsigned long long>(checked));
}

}  // namespace
}  // namespace wmap::test
