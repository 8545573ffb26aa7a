// The catalog at the real scale: real checkpoints' layouts rebuilt as sparse files by
// tests/python/sparse_layout.py (real headers, holes for data), up to DeepSeek-R1's 163 shards and
// 91,991 tensors, catalogued from the headers and checked against the index and the known shapes.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "test_util.h"
#include "wmap/catalog/catalog.h"
#include "wmap/format/dtype.h"
#include "wmap/catalog/shard_set.h"

namespace wmap {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

fs::path layout_dir(const std::string& name) { return test::testdata_dir() / "layouts" / name; }

// Runs sparse_layout.py and returns its `key value` summary lines.
std::map<std::string, uint64_t> build_sparse(const std::string& layout, const fs::path& out) {
  const auto script = test::source_dir() / "tests" / "python" / "sparse_layout.py";
  const auto r =
      test::run_command(test::shell_quote(test::python()) + " " + test::shell_quote(script.string()) + " " +
                        test::shell_quote(layout_dir(layout).string()) + " " + test::shell_quote(out.string()));
  EXPECT_EQ(r.exit_code, 0) << layout << ": " << r.err;
  std::map<std::string, uint64_t> summary;
  size_t pos = 0;
  while (pos < r.out.size()) {
    const size_t eol = r.out.find('\n', pos);
    const std::string line = r.out.substr(pos, eol - pos);
    const size_t sp = line.find(' ');
    if (sp != std::string::npos) summary[line.substr(0, sp)] = std::stoull(line.substr(sp + 1));
    pos = eol == std::string::npos ? r.out.size() : eol + 1;
  }
  return summary;
}

uint64_t disk_bytes(const fs::path& dir) {
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    struct stat st;
    if (::stat(e.path().c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

// Every record's byte range matches its dtype and shape and lies in its shard; each shard's
// tensors tile its data section exactly, from 8 + N to the end of the file.
void expect_consistent_offsets(const Catalog& cat) {
  std::vector<std::vector<const TensorRecord*>> by_shard(cat.shards().size());
  for (const auto& t : cat.tensors()) {
    ASSERT_LT(t.shard, cat.shards().size());
    EXPECT_EQ(t.nbytes, t.numel() * dtype_bits(t.dtype) / 8) << t.name;
    by_shard[t.shard].push_back(&t);
  }
  uint64_t counted = 0;
  for (size_t s = 0; s < by_shard.size(); ++s) {
    const auto& shard = cat.shards()[s];
    auto& ts = by_shard[s];
    EXPECT_EQ(ts.size(), shard.tensor_count) << shard.file;
    std::sort(ts.begin(), ts.end(), [](const TensorRecord* a, const TensorRecord* b) { return a->offset < b->offset; });
    uint64_t expected = 8 + shard.header_bytes;
    EXPECT_EQ(shard.header_bytes % 8, 0u) << shard.file << ": header not padded to 8 bytes";
    for (const TensorRecord* t : ts) {
      EXPECT_EQ(t->offset, expected) << shard.file << ": " << t->name;
      expected = t->offset + t->nbytes;
    }
    EXPECT_EQ(expected, shard.signature.size) << shard.file;
    counted += ts.size();
  }
  EXPECT_EQ(counted, cat.size());
}

void expect_tensor(const Catalog& cat, const std::string& name, DType dtype, std::vector<uint64_t> shape) {
  const TensorRecord* t = cat.find(name);
  ASSERT_NE(t, nullptr) << name;
  EXPECT_EQ(dtype_name(t->dtype), dtype_name(dtype)) << name;
  EXPECT_EQ(t->shape, shape) << name;
}

class DeepSeekR1Scale : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir;
    dir_ = tmp_->path() / "deepseek-r1";
    summary_ = build_sparse("deepseek-r1", dir_);
    set_ = new ShardSet(discover_shards(dir_));
    cat_ = new Catalog(Catalog::build(*set_));  // throws if the index disagrees with the shards
  }
  static void TearDownTestSuite() {
    delete cat_;
    delete set_;
    delete tmp_;
  }
  static TempDir* tmp_;
  static fs::path dir_;
  static std::map<std::string, uint64_t> summary_;
  static ShardSet* set_;
  static Catalog* cat_;
};
TempDir* DeepSeekR1Scale::tmp_ = nullptr;
fs::path DeepSeekR1Scale::dir_;
std::map<std::string, uint64_t> DeepSeekR1Scale::summary_;
ShardSet* DeepSeekR1Scale::set_ = nullptr;
Catalog* DeepSeekR1Scale::cat_ = nullptr;

TEST_F(DeepSeekR1Scale, SparseFilesCostNoDisk) {
  EXPECT_EQ(summary_["tensors"], 91991u);
  EXPECT_EQ(summary_["shards"], 163u);
  // 688,586,727,753 bytes in the real checkpoint; only the headers may differ.
  const double real = 688586727753.0;
  EXPECT_NEAR(static_cast<double>(summary_["apparent_bytes"]), real, real * 1e-4);
  EXPECT_LT(disk_bytes(dir_), 64u << 20) << "the shards are not sparse";
}

TEST_F(DeepSeekR1Scale, ShardsAndTensorCounts) {
  ASSERT_EQ(cat_->shards().size(), 163u);
  EXPECT_EQ(cat_->shards().front().file, "model-00001-of-000163.safetensors");
  EXPECT_EQ(cat_->shards()[99].file, "model-00100-of-000163.safetensors");
  EXPECT_EQ(cat_->shards().back().file, "model-00163-of-000163.safetensors");
  EXPECT_EQ(cat_->size(), 91991u);
  uint64_t apparent = 0;
  for (const auto& s : cat_->shards()) {
    EXPECT_GT(s.tensor_count, 0u) << s.file;
    apparent += s.signature.size;
  }
  EXPECT_EQ(apparent, summary_["apparent_bytes"]);
  EXPECT_EQ(cat_->total_bytes(), summary_["data_bytes"]);
}

TEST_F(DeepSeekR1Scale, OffsetsAndByteLengthsAreConsistent) { expect_consistent_offsets(*cat_); }

TEST_F(DeepSeekR1Scale, IndexCrossCheck) {
  ASSERT_TRUE(set_->index.has_value());
  ASSERT_EQ(set_->index->weight_map.size(), 91991u);
  for (const auto& [name, shard] : set_->index->weight_map) {
    const TensorRecord* t = cat_->find(name);
    ASSERT_NE(t, nullptr) << name;
    ASSERT_EQ(cat_->shards()[t->shard].file, set_->files[shard]) << name;
  }
}

TEST_F(DeepSeekR1Scale, PrefixRanges) {
  // MoE layer (14 attention/norm + router 2 + shared experts 6 + 256 experts x 6) + 6 MTP extras.
  EXPECT_EQ(cat_->prefix("model.layers.61").size(), 1564u);
  EXPECT_EQ(cat_->prefix("model.layers.6").size(), 1558u);  // not 6x
  EXPECT_EQ(cat_->prefix("model.layers.0").size(), 20u);    // dense
  EXPECT_EQ(cat_->prefix("model.layers.61.mlp.experts").size(), 256u * 6);
  EXPECT_EQ(cat_->prefix("model.layers.61.mlp.experts.25").size(), 6u);
  EXPECT_EQ(cat_->prefix("model.layers").size(), 91991u - 3);
  EXPECT_TRUE(cat_->prefix("model.layers.62").empty());
  for (const auto& t : cat_->prefix("model.layers.61")) EXPECT_EQ(t.name.rfind("model.layers.61.", 0), 0u) << t.name;
}

TEST_F(DeepSeekR1Scale, KnownTensors) {
  const Catalog& c = *cat_;
  expect_tensor(c, "model.embed_tokens.weight", DType::kBF16, {129280, 7168});
  expect_tensor(c, "lm_head.weight", DType::kBF16, {129280, 7168});
  expect_tensor(c, "model.norm.weight", DType::kBF16, {7168});
  expect_tensor(c, "model.layers.0.self_attn.q_a_proj.weight", DType::kF8_E4M3, {1536, 7168});
  expect_tensor(c, "model.layers.0.self_attn.q_a_proj.weight_scale_inv", DType::kF32, {12, 56});
  expect_tensor(c, "model.layers.0.self_attn.q_b_proj.weight", DType::kF8_E4M3, {24576, 1536});
  expect_tensor(c, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", DType::kF8_E4M3, {576, 7168});
  expect_tensor(c, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv", DType::kF32, {5, 56});
  expect_tensor(c, "model.layers.0.self_attn.kv_a_layernorm.weight", DType::kBF16, {512});
  expect_tensor(c, "model.layers.0.self_attn.kv_b_proj.weight", DType::kF8_E4M3, {32768, 512});
  expect_tensor(c, "model.layers.0.self_attn.kv_b_proj.weight_scale_inv", DType::kF32, {256, 4});
  expect_tensor(c, "model.layers.0.self_attn.o_proj.weight", DType::kF8_E4M3, {7168, 16384});
  expect_tensor(c, "model.layers.2.mlp.gate_proj.weight", DType::kF8_E4M3, {18432, 7168});
  expect_tensor(c, "model.layers.2.mlp.down_proj.weight_scale_inv", DType::kF32, {56, 144});
  EXPECT_EQ(c.find("model.layers.2.mlp.gate.weight"), nullptr);
  expect_tensor(c, "model.layers.3.mlp.gate.weight", DType::kBF16, {256, 7168});
  expect_tensor(c, "model.layers.3.mlp.gate.e_score_correction_bias", DType::kF32, {256});
  expect_tensor(c, "model.layers.3.mlp.shared_experts.up_proj.weight", DType::kF8_E4M3, {2048, 7168});
  expect_tensor(c, "model.layers.60.mlp.experts.255.down_proj.weight", DType::kF8_E4M3, {7168, 2048});
  expect_tensor(c, "model.layers.60.mlp.experts.255.down_proj.weight_scale_inv", DType::kF32, {56, 16});
  expect_tensor(c, "model.layers.61.embed_tokens.weight", DType::kBF16, {129280, 7168});
  expect_tensor(c, "model.layers.61.enorm.weight", DType::kBF16, {7168});
  expect_tensor(c, "model.layers.61.hnorm.weight", DType::kBF16, {7168});
  expect_tensor(c, "model.layers.61.eh_proj.weight", DType::kBF16, {7168, 14336});
  expect_tensor(c, "model.layers.61.shared_head.norm.weight", DType::kBF16, {7168});
  expect_tensor(c, "model.layers.61.shared_head.head.weight", DType::kBF16, {129280, 7168});
  expect_tensor(c, "model.layers.61.mlp.experts.0.gate_proj.weight_scale_inv", DType::kF32, {16, 56});
  EXPECT_EQ(c.require("model.embed_tokens.weight").shard, 0u);
  EXPECT_EQ(c.require("model.layers.61.shared_head.head.weight").shard, 162u);
}

TEST_F(DeepSeekR1Scale, CatalogJsonRoundTrip) {
  const Catalog again = Catalog::parse_json(cat_->to_json(true), "round trip");
  EXPECT_EQ(again.content_id(), cat_->content_id());
  EXPECT_EQ(again.size(), 91991u);
  EXPECT_EQ(again.prefix("model.layers.61").size(), 1564u);
}

TEST_F(DeepSeekR1Scale, InspectCli) {
  const auto r = test::run_wmap("inspect " + test::shell_quote(dir_.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("shards: 163"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensors: 91991"), std::string::npos) << r.out;
}

// The layouts that come with their real index.json: tensor and shard counts from the README, and
// the derived shapes must add up to the index's metadata.total_size (exact_total).
struct IndexedLayout {
  const char* name;
  size_t tensors;
  size_t shards;
  bool exact_total;
};

class IndexedLayoutScale : public ::testing::TestWithParam<IndexedLayout> {};

TEST_P(IndexedLayoutScale, CatalogMatchesIndex) {
  const IndexedLayout& p = GetParam();
  TempDir tmp;
  const fs::path dir = tmp / p.name;
  auto summary = build_sparse(p.name, dir);
  ASSERT_EQ(summary["tensors"], p.tensors);
  EXPECT_LT(disk_bytes(dir), 16u << 20);
  const ShardSet set = discover_shards(dir);
  ASSERT_TRUE(set.index.has_value());
  EXPECT_TRUE(set.warnings.empty());
  const Catalog cat = Catalog::build(set);
  EXPECT_EQ(cat.size(), p.tensors);
  EXPECT_EQ(cat.shards().size(), p.shards);
  EXPECT_EQ(set.index->weight_map.size(), p.tensors);
  expect_consistent_offsets(cat);
  for (const auto& [name, shard] : set.index->weight_map) {
    const TensorRecord* t = cat.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shard, shard) << name;
  }
  if (p.exact_total) {
    const std::string index = test::read_file(layout_dir(p.name) / "model.safetensors.index.json");
    EXPECT_NE(index.find("\"total_size\": " + std::to_string(cat.total_bytes())), std::string::npos)
        << "derived shapes hold " << cat.total_bytes() << " bytes";
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, IndexedLayoutScale,
                         ::testing::Values(IndexedLayout{"llama3-8b", 291, 4, true},
                                           IndexedLayout{"llama3.2-3b-instruct", 254, 2, true},
                                           IndexedLayout{"mixtral-8x7b", 995, 19, true},
                                           IndexedLayout{"qwen2.5-14b_cogito", 579, 6, true},
                                           IndexedLayout{"qwen3-1.7b_mlx-bf16", 310, 1, true},
                                           IndexedLayout{"qwen3.5-moe-25b-a3b-reap", 22213, 10, true},
                                           IndexedLayout{"deepseek-ocr2_deepseek-v2-moe", 2707, 1, false}),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

TEST(SparseLayout, UnknownTensorNameFailsNamingTheKey) {
  TempDir tmp;
  const fs::path layout = tmp / "layout";
  fs::create_directories(layout);
  fs::copy_file(layout_dir("llama3-8b") / "config.json", layout / "config.json");
  test::write_file(
      layout / "model.safetensors.index.json",
      R"({"metadata": {}, "weight_map": {"model.layers.0.mystery.weight": "model-00001-of-00001.safetensors"}})");
  const auto script = test::source_dir() / "tests" / "python" / "sparse_layout.py";
  const auto r =
      test::run_command(test::shell_quote(test::python()) + " " + test::shell_quote(script.string()) + " " +
                        test::shell_quote(layout.string()) + " " + test::shell_quote((tmp / "out").string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("model.layers.0.mystery.weight"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace wmap
