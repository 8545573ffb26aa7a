// The core's whole-file reads (config.json, mapping files, a saved catalog, index.json) go through
// the FileSystem, so injected faults reach them: an EIO is a clear error naming the file.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace wmap::test
