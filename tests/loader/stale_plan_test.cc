// State that outlives its files (review F1): a plan holds absolute file offsets from the headers
// it was made from. Shards rewritten since (a trainer's next step with one more `__metadata__`
// entry shifts every offset) must be refused by every reader, naming the shard, never read at
// stale offsets; LoaderSession::refresh() re-reads the headers and fails when the offsets moved.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <map>

#include "core_test_helpers.h"
#include "test_util.h"
#include "wmap/loader/loader.h"
#include "wmap/loader/weight_cache.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;

// `src` rewritten into `dst` (atomically, as a trainer publishes: write then rename) with
// `metadata` added to its header's `__metadata__`, the header padded to 8 bytes again; the
// tensors' bytes are src's.
void publish_with_metadata(const fs::path& src, const fs::path& dst, const nlohmann::json& metadata) {
  const std::string bytes = read_file(src);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(bytes.substr(8, n));
  for (const auto& [k, v] : metadata.items()) header["__metadata__"][k] = v;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  out += text;
  out += bytes.substr(8 + n);
  write_file(dst.string() + ".tmp", out);
  fs::rename(dst.string() + ".tmp", dst);
}

class StalePlan : public ::testing::Test {
 protected:
  void SetUp() override {
    WeightCache::process().clear();
    ckpt_ = synth_checkpoint(dir_.path(), "llama", "ck", "--seed 1");
    next_ = synth_checkpoint(dir_.path(), "llama", "next", "--seed 2");
    session_ = std::make_unique<LoaderSession>(rank_options(ckpt_, 2, 1));
    prepared_ = session_->prepare();
  }
  void TearDown() override { WeightCache::process().clear(); }

  // The trainer's next step: new values and a longer header (every data offset moves).
  void publish_next_step_with_metadata() {
    for (const auto& s : shard_files(next_)) publish_with_metadata(next_ / s, ckpt_ / s, {{"step", "2000"}});
  }
  // The next step with byte-identical headers (new values at the same offsets).
  void publish_next_step_same_headers() {
    for (const auto& s : shard_files(next_)) {
      write_file((ckpt_ / s).string() + ".tmp", read_file(next_ / s));
      fs::rename((ckpt_ / s).string() + ".tmp", ckpt_ / s);
    }
  }
  std::map<std::string, std::vector<std::byte>> load(const PreparedLoad& p, bool cached = false) {
    auto device = make_device("host");
    const LoadedModel m = session_->load(p, *device, {}, cached);
    std::map<std::string, std::vector<std::byte>> out;
    for (const auto& param : m.params)
      out[param.name].assign(param.buffer->host_data(), param.buffer->host_data() + param.buffer->size());
    return out;
  }
  // A fresh session's load of the files as they are now: what a correct load returns.
  std::map<std::string, std::vector<std::byte>> fresh_load() {
    LoaderSession s(rank_options(ckpt_, 2, 1));
    auto p = s.prepare();
    auto device = make_device("host");
    const LoadedModel m = s.load(*p, *device, {});
    std::map<std::string, std::vector<std::byte>> out;
    for (const auto& param : m.params)
      out[param.name].assign(param.buffer->host_data(), param.buffer->host_data() + param.buffer->size());
    return out;
  }

  TempDir dir_;
  fs::path ckpt_, next_;
  std::unique_ptr<LoaderSession> session_;
  std::unique_ptr<PreparedLoad> prepared_;
};

TEST_F(StalePlan, ALoadOfAPlanWhoseShardsWereRewrittenIsRefusedNamingTheShard) {
  const auto before = load(*prepared_);
  EXPECT_EQ(before, fresh_load());
  publish_next_step_with_metadata();
  const std::string shard = shard_files(ckpt_).front();
  EXPECT_WMAP_ERROR(load(*prepared_), ErrorCode::kValidation, shard, "changed since it was planned", "inode",
                    "plan again");
  // Into the caller's buffers (refit), the same refusal, before any byte is written.
  HostDestinations held = host_destinations(*prepared_->plan, std::byte{0x5A});
  auto device = make_device("host");
  EXPECT_WMAP_ERROR(session_->load_into(*prepared_, *device, held.table, {}), ErrorCode::kValidation, shard,
                    "changed since it was planned");
  for (const auto& [name, h] : held.memory)
    EXPECT_TRUE(std::all_of(h.begin(), h.end(), [](std::byte b) { return b == std::byte{0x5A}; }))
        << name << ": a refused refit wrote it";
  // The weight cache's key is the plan's identities: a reused plan must not find the old weights.
  EXPECT_WMAP_ERROR(load(*prepared_, /*cached=*/true), ErrorCode::kValidation, shard, "changed since it was planned");
  // refresh(): the headers moved, so the plan cannot be kept.
  EXPECT_WMAP_ERROR(session_->refresh(*prepared_), ErrorCode::kValidation, "headers changed since the plan was made",
                    "data offset", "plan again");
  // Planning again (headers only) gives the new weights.
  auto again = session_->prepare();
  EXPECT_EQ(load(*again), fresh_load());
  EXPECT_NE(load(*again), before);
}

TEST_F(StalePlan, RefreshKeepsAPlanWhoseHeadersAreUnchanged) {
  const auto before = load(*prepared_);
  publish_next_step_same_headers();
  // The files are other files (inode, mtime): the old plan is refused even though its offsets
  // would still be right, because nothing short of reading the headers again can tell.
  EXPECT_WMAP_ERROR(load(*prepared_), ErrorCode::kValidation, "changed since it was planned");
  auto fresh = session_->refresh(*prepared_);
  EXPECT_EQ(fresh->plan->plan_id(), prepared_->plan->plan_id());
  const auto now = load(*fresh);
  EXPECT_EQ(now, fresh_load());
  EXPECT_NE(now, before);
}

TEST_F(StalePlan, AShardTouchedInPlaceIsRefusedToo) {
  // An in-place rewrite keeps the inode; the mtime tells.
  const fs::path shard = ckpt_ / shard_files(ckpt_).front();
  const auto t = fs::last_write_time(shard);
  fs::last_write_time(shard, t + std::chrono::seconds(2));
  EXPECT_WMAP_ERROR(load(*prepared_), ErrorCode::kValidation, shard.filename().string(), "mtime_ns");
}

}  // namespace
}  // namespace wmap::test
