// The core's whole-file reads (config.json, mapping files, a saved catalog, index.json) go through
// the FileSystem, so injected faults reach them: an EIO is a clear error naming the file.
#include <gtest/gtest.h>

#include <fstream>

#include "core_test_helpers.h"
#include "reliability/fault_injection_fs.h"
#include "reliability/reliability_util.h"
#include "wmap/catalog/catalog.h"
#include "wmap/catalog/shard_set.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;

class WholeFileFault : public ::testing::Test {
 protected:
  void SetUp() override {
    ckpt_ = dir_ / "ckpt";
    synth("llama", ckpt_);
  }
  // Prepares a load of `o` through `faulty_`, expecting a kIo error naming `file` and EIO.
  void expect_eio(LoaderOptions o, const fs::path& file) {
    SCOPED_TRACE(file.string());
    faulty_.fail_at(file.filename().string(), 0);
    o.fs = &faulty_;
    const uint64_t reads = faulty_.whole_file_reads();
    try {
      LoaderSession session(o);
      session.prepare();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kIo) << e.what();
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << "names the file: " << e.what();
      EXPECT_NE(std::string(e.what()).find("Input/output error"), std::string::npos) << e.what();
    }
    EXPECT_GT(faulty_.whole_file_reads(), reads);
    EXPECT_GT(faulty_.faults(), 0u);
    faulty_.clear();
  }
  TempDir dir_;
  fs::path ckpt_;
  FaultInjectionFs faulty_;
};

TEST_F(WholeFileFault, EioOnConfigJsonNamesIt) { expect_eio(loader_options(ckpt_), ckpt_ / "config.json"); }

TEST_F(WholeFileFault, EioOnTheShardIndexNamesIt) {
  expect_eio(loader_options(ckpt_), ckpt_ / "model.safetensors.index.json");
}

TEST_F(WholeFileFault, EioOnAMappingFileNamesIt) {
  const fs::path maps = dir_ / "maps";
  fs::create_directories(maps);
  fs::copy_file(source_dir() / "mappings" / "llama.yaml", maps / "llama.yaml");
  LoaderOptions o = loader_options(ckpt_);
  o.mappings_dir = maps;
  expect_eio(o, maps / "llama.yaml");
}

TEST_F(WholeFileFault, EioOnASavedCatalogNamesIt) {
  const fs::path saved = dir_ / "saved_catalog.json";
  Catalog::build(discover_shards(ckpt_)).save_json_file(saved);
  LoaderOptions o = loader_options(ckpt_);
  o.catalog_file = saved;
  expect_eio(o, saved);
  // Without the fault the same session loads the catalog through the fault-injection FS.
  o.fs = &faulty_;
  const uint64_t reads = faulty_.whole_file_reads();
  EXPECT_NO_THROW(LoaderSession(o).prepare());
  EXPECT_GE(faulty_.whole_file_reads(), reads + 2);  // the catalog and config.json at least
}

// A file read whole is refused over its limit before anything is allocated (review F12): a shard
// passed as a config.json costs a stat, not its size in memory.
TEST_F(WholeFileFault, AFileOverItsWholeReadLimitIsRefusedNamingSizeAndLimit) {
  const fs::path big = dir_ / "big.json";
  {
    std::ofstream out(big);
    out << std::string(4096, ' ') << "{}";
  }
  EXPECT_EQ(FileSystem::posix().read_whole_file(big, 4098).size(), 4098u);
  EXPECT_WMAP_ERROR(FileSystem::posix().read_whole_file(big, 4097), ErrorCode::kMalformedInput, big.string(),
                    "4098 bytes", "over the limit of 4097 bytes");
  // config.json through a session: the same refusal, naming the file.
  fs::resize_file(ckpt_ / "config.json", kMaxConfigFileBytes + 1);
  EXPECT_WMAP_ERROR(LoaderSession(loader_options(ckpt_)).prepare(), ErrorCode::kMalformedInput,
                    (ckpt_ / "config.json").string(), "over the limit of " + std::to_string(kMaxConfigFileBytes));
}

// A shard's signature is its open descriptor's (fstat), through the FileSystem (review F7): a
// shard replaced on disk right after the catalog opened it is recorded as the file that was
// read, so the replacement is then seen as a change rather than silently trusted.
TEST_F(WholeFileFault, CatalogSignaturesComeFromTheOpenFileSoAReplacedShardIsSeenAsChanged) {
  const ShardSet set = discover_shards(ckpt_);
  CatalogBuildOptions options;
  options.fs = &faulty_;
  const Catalog clean = Catalog::build(set, options);
  EXPECT_EQ(faulty_.signatures(), set.files.size());  // one per shard, from its open file
  EXPECT_TRUE(clean.changed_shards(ckpt_).empty());

  faulty_.replace_after_open(set.files.front());
  const Catalog raced = Catalog::build(set, options);
  EXPECT_GT(faulty_.faults(), 0u);
  // The recorded signature is the file the header was read from, not the one now on disk.
  EXPECT_EQ(raced.shards().front().signature, clean.shards().front().signature);
  const auto changes = raced.changed_shards(ckpt_);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_NE(changes.front().find(set.files.front()), std::string::npos) << changes.front();
}

}  // namespace
}  // namespace wmap::test
