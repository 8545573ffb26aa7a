// The weight cache (LoaderOptions::cache): a hit reads nothing, an in-place change is detected and
// healed, a rewritten shard misses, the oldest entry goes first, and a bad entry limit is named.
#include "wmap/loader/weight_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "checkpoint_edit.h"
#include "test_util.h"
#include "wmap/loader/loader.h"

namespace wmap::test {
namespace {

class WeightCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WeightCache::process().clear();
    ::unsetenv("WMAP_WEIGHT_CACHE_MAX_ENTRIES");
    ckpt_ = dir_ / "llama";
    synth("1");
  }
  void TearDown() override {
    ::unsetenv("WMAP_WEIGHT_CACHE_MAX_ENTRIES");
    WeightCache::process().clear();
  }
  void synth(const std::string& seed) {
    std::filesystem::remove_all(ckpt_);
    auto r = run_wmap("synth llama " + shell_quote(ckpt_.string()) + " --seed " + seed);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // A fresh session and plan (as a new engine would make), loaded with the cache on.
  LoadedModel load(uint32_t tp = 2, uint32_t rank = 0, bool allow_partial = false) {
    LoaderOptions lo;
    lo.checkpoint = ckpt_;
    lo.allow_partial = allow_partial;
    lo.layout.tp_size = tp;
    lo.layout.tp_rank = rank;
    lo.progress = false;
    lo.cache = true;
    LoaderSession session(lo);
    auto prepared = session.prepare();
    auto device = make_device("host");
    return session.load(*prepared, *device, ExecOptions{});
  }
  static std::vector<std::byte> bytes_of(const LoadedModel& m, const std::string& name) {
    const LoadedParam* p = m.find(name);
    return {p->buffer->host_data(), p->buffer->host_data() + p->buffer->size()};
  }
  TempDir dir_;
  std::filesystem::path ckpt_;
};

TEST_F(WeightCacheTest, AHitReadsNoShardBytes) {
  const LoadedModel first = load();
  EXPECT_EQ(first.stats.cache, "miss");
  EXPECT_GT(first.stats.bytes_read, 0u);
  const LoadedModel second = load();
  EXPECT_EQ(second.stats.cache, "hit");
  EXPECT_EQ(second.stats.bytes_read, 0u);
  EXPECT_EQ(second.stats.reads, 0u);
  ASSERT_EQ(second.params.size(), first.params.size());
  for (const auto& p : first.params) EXPECT_EQ(bytes_of(second, p.name), bytes_of(first, p.name)) << p.name;
  const auto info = WeightCache::process().info();
  EXPECT_EQ(info.entries, 1u);
  EXPECT_EQ(info.hits, 1u);
}

TEST_F(WeightCacheTest, AnInPlaceChangeIsDetectedAndHealed) {
  const LoadedModel first = load();
  const std::string name = "model.layers.0.self_attn.qkv_proj.weight";
  const auto original = bytes_of(first, name);
  first.find(name)->buffer->host_data()[0] ^= std::byte{0x40};  // a consumer writes through its view
  const LoadedModel healed = load();
  EXPECT_EQ(healed.stats.cache, "miss");
  EXPECT_GT(healed.stats.bytes_read, 0u);
  EXPECT_EQ(bytes_of(healed, name), original);  // from the files again
  EXPECT_EQ(WeightCache::process().info().healed, 1u);
  EXPECT_EQ(load().stats.cache, "hit");
}

TEST_F(WeightCacheTest, ARewrittenShardMisses) {
  const LoadedModel first = load();
  synth("7");  // new values, same names and shapes
  const LoadedModel second = load();
  EXPECT_EQ(second.stats.cache, "miss");
  EXPECT_NE(bytes_of(second, "model.norm.weight"), bytes_of(first, "model.norm.weight"));
}

TEST_F(WeightCacheTest, TheOldestEntryIsEvictedFirst) {
  ::setenv("WMAP_WEIGHT_CACHE_MAX_ENTRIES", "2", 1);
  load(2, 0);
  load(2, 1);
  load(1, 0);  // evicts rank 0 of 2
  EXPECT_EQ(WeightCache::process().info().entries, 2u);
  EXPECT_EQ(WeightCache::process().info().evicted, 1u);
  EXPECT_EQ(load(1, 0).stats.cache, "hit");
  EXPECT_EQ(load(2, 1).stats.cache, "hit");
  EXPECT_EQ(load(2, 0).stats.cache, "miss");
  ::setenv("WMAP_WEIGHT_CACHE_MAX_ENTRIES", "0", 1);  // disabled
  EXPECT_EQ(load(2, 1).stats.cache, "off");
}

TEST_F(WeightCacheTest, AChangeNearTheEndOfAParameterIsSeen) {
  // The samples span the whole tensor: the last element of the largest parameter is sampled.
  const LoadedModel first = load();
  const LoadedParam* big = &first.params[0];
  for (const auto& p : first.params) big = p.buffer->size() > big->buffer->size() ? &p : big;
  const uint64_t elements = big->buffer->size() / 2, stride = (elements + 1023) / 1024;
  big->buffer->host_data()[((elements - 1) / stride * stride) * 2 + 1] ^= std::byte{0x01};
  EXPECT_EQ(load().stats.cache, "miss");
  EXPECT_EQ(WeightCache::process().info().healed, 1u);
}

TEST_F(WeightCacheTest, AHitDoesNotBypassThePlanCheck) {
  const auto broken = dir_ / "broken";
  copy_checkpoint(ckpt_, broken, [](const std::string& n) { return TensorEdit{.drop = n == "model.norm.weight"}; });
  ckpt_ = broken;
  EXPECT_EQ(load(2, 0, true).stats.cache, "miss");  // a partial load, cached
  try {
    load(2, 0, false);
    ADD_FAILURE() << "an incomplete plan was answered from the cache";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kValidation) << e.what();
  }
  EXPECT_EQ(load(2, 0, true).stats.cache, "hit");
}

TEST_F(WeightCacheTest, ALoweredLimitDropsWhatIsOverIt) {
  load(2, 0);
  ::setenv("WMAP_WEIGHT_CACHE_MAX_ENTRIES", "0", 1);
  load(2, 1);
  EXPECT_EQ(WeightCache::process().info().entries, 0u);
}

TEST_F(WeightCacheTest, ABadEntryLimitIsAnErrorNamingTheVariable) {
  for (const char* bad : {"-1", "two", "100000", ""}) {
    ::setenv("WMAP_WEIGHT_CACHE_MAX_ENTRIES", bad, 1);
    try {
      load();
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(std::string("WMAP_WEIGHT_CACHE_MAX_ENTRIES='") + bad + "': expected an integer 0..1024"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace wmap::test
