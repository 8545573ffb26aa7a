// The I/O policy every rank runs, decided from the facts they gathered (no MPI needed): each
// reason a policy cannot run makes all ranks fall back to native, saying why.
#include <gtest/gtest.h>

#include "wmap/mpi/policy_decision.h"

namespace wmap::mpi {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

// `n` ranks on one host asking for `policy`, each with 1 GiB to hold and 100 GiB available.
std::vector<RankFacts> job(const std::string& policy, int n) {
  RankFacts f;
  f.policy = policy;
  f.host = "node0";
  f.exchange_bytes = kGiB;
  f.available = 100 * kGiB;
  f.extents_bytes = 1 << 20;
  f.thread_level = "MPI_THREAD_FUNNELED";
  f.shards = {"model-00001-of-00002.safetensors size 10 mtime_ns 1",
              "model-00002-of-00002.safetensors size 20 mtime_ns 2"};
  return std::vector<RankFacts>(static_cast<size_t>(n), f);
}

IoPolicy decide(const std::vector<RankFacts>& facts, std::string& reason) { return decide_io_policy(facts, reason); }

TEST(PolicyDecision, FactsRoundTripThroughTheirText) {
  RankFacts f = job("exchange", 1)[0];
  f.params_on_host = false;
  f.threads_ok = false;
  f.thread_level = "MPI_THREAD_SINGLE";
  const RankFacts g = RankFacts::decode(f.encode());
  EXPECT_EQ(g.encode(), f.encode());
  EXPECT_FALSE(g.params_on_host);
  EXPECT_FALSE(g.threads_ok);
  EXPECT_EQ(g.shards, f.shards);
}

TEST(PolicyDecision, EveryRankCanFollow) {
  std::string reason;
  for (const char* policy : {"native", "rank-striped", "exchange"}) {
    EXPECT_EQ(io_policy_name(decide(job(policy, 4), reason)), policy);
    EXPECT_EQ(reason, "");
  }
  EXPECT_EQ(decide(job("exchange", 1), reason), IoPolicy::kNative);
  EXPECT_EQ(reason, "a single rank has nothing to share");
}

// Two nodes, each with its own copy of the files: a copy that differs on one node names that
// node's rank and host and the file. Under rank-striped only a node's own ranks must agree, so a
// node whose copies agree among themselves is fine even when the other node's differ.
TEST(PolicyDecision, ACopyThatDiffersOnOneNodeNamesTheNodeAndTheFile) {
  auto facts = job("exchange", 4);
  facts[2].host = facts[3].host = "nodeB";
  for (int r : {0, 1}) facts[static_cast<size_t>(r)].host = "nodeA";
  facts[2].shards[1] = "model-00002-of-00002.safetensors size 20 mtime_ns 7";
  std::string reason;
  EXPECT_EQ(decide(facts, reason), IoPolicy::kNative);
  EXPECT_EQ(reason,
            "rank 2 on host nodeB: shard 'model-00002-of-00002.safetensors size 20 mtime_ns 7' differs from rank 0 on "
            "host nodeA: "
            "'model-00002-of-00002.safetensors size 20 mtime_ns 2'");
  for (auto& f : facts) f.policy = "rank-striped";
  EXPECT_EQ(decide(facts, reason), IoPolicy::kNative);  // rank 3 on nodeB still has the other copy
  EXPECT_EQ(reason,
            "rank 3 on host nodeB: shard 'model-00002-of-00002.safetensors size 20 mtime_ns 2' differs from rank 2 on "
            "host nodeB: "
            "'model-00002-of-00002.safetensors size 20 mtime_ns 7'");
  facts[3].shards = facts[2].shards;  // nodeB's ranks agree: each node warms its own page cache
  EXPECT_EQ(decide(facts, reason), IoPolicy::kRankStriped);
  EXPECT_EQ(reason, "");
}

TEST(PolicyDecision, AThreadLevelBelowFunneledKeepsTheExchangeOnly) {
  auto facts = job("exchange", 4);
  facts[2].threads_ok = false;
  facts[2].thread_level = "MPI_THREAD_SINGLE";
  std::string reason;
  EXPECT_EQ(decide(facts, reason), IoPolicy::kNative);
  EXPECT_EQ(reason,
            "rank 2's MPI granted MPI_THREAD_SINGLE, the exchange needs MPI_THREAD_FUNNELED (it reads on a thread "
            "beside the MPI thread)");
  for (auto& f : facts) f.policy = "rank-striped";  // no thread of its own: unaffected
  EXPECT_EQ(decide(facts, reason), IoPolicy::kRankStriped);
}

TEST(PolicyDecision, MetadataOverOneAllgatherFallsBack) {
  auto facts = job("exchange", 4);
  for (auto& f : facts) f.extents_bytes = kGiB / 2 + 1;  // 2 GiB + 4 bytes together
  std::string reason;
  EXPECT_EQ(decide(facts, reason), IoPolicy::kNative);
  EXPECT_NE(reason.find("the ranks' needed-extent lists take 2.00 GiB, over the 2 GiB one MPI_Allgatherv carries"),
            std::string::npos)
      << reason;
  // rank-striped gathers per host: two hosts of two ranks each stay within the limit.
  for (auto& f : facts) f.policy = "rank-striped";
  facts[2].host = facts[3].host = "node1";
  EXPECT_EQ(decide(facts, reason), IoPolicy::kRankStriped) << reason;
  facts[2].host = facts[3].host = "node0";
  EXPECT_EQ(decide(facts, reason), IoPolicy::kNative);
  EXPECT_NE(reason.find("host node0's ranks' needed-extent lists take 2.00 GiB"), std::string::npos) << reason;
}

TEST(PolicyDecision, HostMemoryCountsWhatLandsThere) {
  // 4 ranks x 30 GiB against 100 GiB: too much when the parameters are on the host too.
  auto facts = job("exchange", 4);
  for (auto& f : facts) f.exchange_bytes = 30 * kGiB;
  std::string reason;
  EXPECT_EQ(decide(facts, reason), IoPolicy::kNative);
  EXPECT_EQ(reason, "host node0 needs 120.0 GiB for its 4 ranks' exchanged bytes and parameters, 100.0 GiB available");
  // With --device cuda each rank counts only its store and buffers (15 GiB here): it fits.
  for (auto& f : facts) {
    f.params_on_host = false;
    f.exchange_bytes = 15 * kGiB;
  }
  EXPECT_EQ(decide(facts, reason), IoPolicy::kExchange) << reason;
  for (auto& f : facts) f.exchange_bytes = 25 * kGiB;
  EXPECT_EQ(decide(facts, reason), IoPolicy::kNative);
  EXPECT_EQ(reason, "host node0 needs 100.0 GiB for its 4 ranks' exchanged bytes, 100.0 GiB available");
}

}  // namespace
}  // namespace wmap::mpi
