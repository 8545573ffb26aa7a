// A shard changed since its catalog was saved (size, mtime or inode): `wmap load DIR --catalog F`
// and `wmap plan --catalog F DIR` both refuse, naming the shard; LoaderSession::prepare() too.
// Offline planning (no DIR) is unaffected: there are no weights to compare.
#include <gtest/gtest.h>

#include <chrono>

#include "reliability/reliability_util.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;
const std::string kShard2 = "model-00002-of-00002.safetensors";

class ChangedShard : public ::testing::Test {
 protected:
  void SetUp() override {
    ckpt_ = dir_ / "ckpt";
    synth("llama", ckpt_, "--shards 2");
    catalog_ = dir_ / "catalog.json";
    auto r = run_wmap("inspect " + shell_quote(ckpt_.string()) + " --save-catalog " + shell_quote(catalog_.string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  CommandResult plan() {
    return run_wmap("plan --catalog " + shell_quote(catalog_.string()) + " " + shell_quote(ckpt_.string()));
  }
  CommandResult load() {
    return run_wmap("load " + shell_quote(ckpt_.string()) + " --catalog " + shell_quote(catalog_.string()));
  }
  void expect_refused(const std::string& what) {
    for (auto r : {plan(), load()}) {
      EXPECT_EQ(r.exit_code, 1) << what << ": " << r.err;
      EXPECT_NE(r.err.find(kShard2 + ": changed since the catalog was saved"), std::string::npos)
          << what << ": " << r.err;
      EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
      EXPECT_EQ(r.out.find("loaded"), std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("complete"), std::string::npos) << r.out;
    }
    LoaderOptions o = loader_options(ckpt_);
    o.catalog_file = catalog_;
    LoaderSession session(o);
    expect_wmap_error([&] { session.prepare(); }, {kShard2, "changed since the catalog was saved", what});
  }
  TempDir dir_;
  fs::path ckpt_, catalog_;
};

TEST_F(ChangedShard, UnchangedCheckpointPlansAndLoads) {
  auto p = plan();
  EXPECT_EQ(p.exit_code, 0) << p.err;
  auto l = load();
  EXPECT_EQ(l.exit_code, 0) << l.err;
  LoaderOptions o = loader_options(ckpt_);
  o.catalog_file = catalog_;
  EXPECT_NO_THROW(LoaderSession(o).prepare());
}

TEST_F(ChangedShard, RewrittenShardNewInodeIsRefused) {
  const auto shard = ckpt_ / kShard2;
  const std::string bytes = read_file(shard);
  const auto mtime = fs::last_write_time(shard);
  // Written beside the old file and renamed over it: both exist at once, so the new inode
  // cannot be the old one recycled (remove-then-write sometimes got the same number back).
  const auto fresh = ckpt_ / (kShard2 + ".new");
  write_file(fresh, bytes);
  fs::last_write_time(fresh, mtime);  // same size and mtime: only the inode tells
  fs::rename(fresh, shard);
  expect_refused("inode");
}

TEST_F(ChangedShard, TouchedShardNewMtimeIsRefused) {
  const auto shard = ckpt_ / kShard2;
  fs::last_write_time(shard, fs::last_write_time(shard) + std::chrono::seconds(5));
  expect_refused("mtime_ns");
}

TEST_F(ChangedShard, GrownShardNewSizeIsRefused) {
  const auto shard = ckpt_ / kShard2;
  const auto mtime = fs::last_write_time(shard);
  fs::resize_file(shard, fs::file_size(shard) + 4096);
  fs::last_write_time(shard, mtime);
  expect_refused("size");
}

TEST_F(ChangedShard, MissingShardIsRefused) {
  fs::remove(ckpt_ / kShard2);
  for (auto r : {plan(), load()}) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(kShard2 + ": listed in the catalog but cannot be read"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace wmap::test
