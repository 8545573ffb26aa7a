// ConfigBounds and the catalog queries behind it: the highest index under a prefix (numeric, not
// lexicographic; non-numeric and zero-padded components ignored), the largest tensor dimension,
// and the messages that name the key, its value and the checkpoint's figure.
#include "wmap/spec/config_bounds.h"

#include <gtest/gtest.h>

#include "core_test_helpers.h"
#include "wmap/mapping/rename_table.h"

namespace wmap::test {
namespace {

Catalog catalog_of(const std::vector<std::pair<std::string, std::vector<uint64_t>>>& tensors) {
  std::vector<TensorRecord> recs;
  for (const auto& [name, shape] : tensors) {
    TensorRecord r;
    r.name = name;
    r.dtype = DType::kU8;
    r.shape = shape;
    r.nbytes = 1;
    for (auto d : shape) r.nbytes *= d;
    recs.push_back(r);
  }
  ShardRecord shard;
  shard.file = "x.safetensors";
  for (const auto& r : recs) shard.signature.size = std::max(shard.signature.size, r.nbytes);
  return Catalog::from_parts("/nowhere", {shard}, recs);
}

class CatalogExtent final : public CheckpointExtent {
 public:
  explicit CatalogExtent(const RenamedCatalog& c) : c_(c) {}
  std::optional<uint64_t> highest_index(std::string_view prefix) const override {
    return wmap::highest_index(c_, prefix);
  }
  TensorDim largest_dim() const override { return wmap::largest_dim(c_); }

 private:
  const RenamedCatalog& c_;
};

const Catalog& test_catalog() {
  static const Catalog c = catalog_of({{"lm_head.weight", {250, 64}},
                                       {"model.layers.0.a.weight", {64}},
                                       {"model.layers.10.a.weight", {64}},
                                       {"model.layers.2.a.weight", {64}},
                                       {"model.layers.2.mlp.experts.7.up_proj.weight", {16, 64}},
                                       {"model.layers.2.mlp.experts.11.up_proj.weight", {16, 64}},
                                       {"model.layers.x.a.weight", {64}},
                                       {"model.layers.011.a.weight", {64}},
                                       {"model.layers.99", {64}},
                                       {"model.layersX.12.a.weight", {64}},
                                       {"model.norm.weight", {64}}});
  return c;
}

TEST(HighestIndex, NumericNotLexicographicAndOnlyWholeComponents) {
  const RenamedCatalog r = RenameTable().apply(test_catalog());
  EXPECT_EQ(highest_index(r, "model.layers."), 10u);  // not "x", not zero-padded "011", not the key "model.layers.99"
  EXPECT_EQ(highest_index(r, "model.layers.2.mlp.experts."), 11u);
  EXPECT_EQ(highest_index(r, "model.layers.3.mlp.experts."), std::nullopt);
  EXPECT_EQ(highest_index(r, "h."), std::nullopt);
  EXPECT_EQ(highest_index(RenameTable().apply(Catalog()), "model.layers."), std::nullopt);
}

// Many components a prefix, a few keys each (how a MoE checkpoint looks): the skip from one
// component to the next lands on each, whatever the run lengths.
TEST(HighestIndex, SkipsComponentRunsOfEveryLength) {
  std::vector<std::pair<std::string, std::vector<uint64_t>>> keys;
  for (uint64_t e = 0; e < 300; ++e) {
    if (e == 257) continue;  // a hole changes nothing
    for (uint64_t k = 0; k < 1 + e % 9; ++k) {
      keys.push_back({"model.layers.4.mlp.experts." + std::to_string(e) + ".w" + std::to_string(k) + ".weight", {8}});
    }
  }
  keys.push_back({"model.layers.4.mlp.experts.x.weight", {8}});
  keys.push_back({"model.layers.4.mlp.gate.weight", {8}});
  keys.push_back({"model.layers.40.mlp.experts.900.w0.weight", {8}});
  const Catalog c = catalog_of(keys);  // outlives r, which points into it
  const RenamedCatalog r = RenameTable().apply(c);
  EXPECT_EQ(highest_index(r, "model.layers.4.mlp.experts."), 299u);
  EXPECT_EQ(highest_index(r, "model.layers.40.mlp.experts."), 900u);
  EXPECT_EQ(highest_index(r, "model.layers."), 40u);
}

TEST(LargestDim, NamesATensorHavingIt) {
  const TensorDim d = largest_dim(RenameTable().apply(test_catalog()));
  EXPECT_EQ(d.size, 250u);
  EXPECT_EQ(d.tensor, "lm_head.weight [250, 64]");
  EXPECT_EQ(largest_dim(RenameTable().apply(Catalog())).size, 0u);
}

TEST(ConfigBounds, CountsAndDimsNameKeyValueAndTheCheckpointsFigure) {
  const RenamedCatalog r = RenameTable().apply(test_catalog());
  const CatalogExtent extent(r);
  const auto c =
      ModelConfig::parse(R"({"num_hidden_layers": 11, "too_many": 12, "vocab_size": 250, "huge": 1000000000000000,
                                        "zero": 0})",
                         "/x/config.json");
  const ConfigBounds b(c, extent);
  EXPECT_EQ(b.count("num_hidden_layers", "model.layers.", "layer"), 11u);
  EXPECT_WMAP_ERROR(
      b.count("too_many", "model.layers.", "layer"), ErrorCode::kMalformedInput,
      "/x/config.json: too_many: 12 layers, but the checkpoint's highest layer index is 10 (model.layers.10.*)");
  EXPECT_WMAP_ERROR(b.count("too_many", "h.", "layer"), ErrorCode::kMalformedInput,
                    "/x/config.json: too_many: 12 layers, but the checkpoint has no key h.<N>.*");
  EXPECT_WMAP_ERROR(b.count("zero", "model.layers.", "layer"), ErrorCode::kMalformedInput,
                    "zero: expected a positive integer");
  const std::vector<std::string> moe{"model.layers.1.mlp.experts.", "model.layers.2.mlp.experts."};
  EXPECT_EQ(b.count("num_experts", 12, moe, "expert"), 12u);
  EXPECT_WMAP_ERROR(
      b.count("num_experts", 13, moe, "expert"), ErrorCode::kMalformedInput,
      "num_experts: 13 experts, but the checkpoint's highest expert index is 11 (model.layers.2.mlp.experts.11.*)");

  EXPECT_EQ(b.dim("vocab_size"), 250u);
  EXPECT_WMAP_ERROR(
      b.dim("huge"), ErrorCode::kMalformedInput,
      "/x/config.json: huge: 1000000000000000, but the largest dimension of any tensor in the checkpoint is 250 "
      "(lm_head.weight [250, 64])");
  EXPECT_WMAP_ERROR(b.dim("a * b", 251), ErrorCode::kMalformedInput, "a * b: 251, but the largest dimension");
}

TEST(ConfigBounds, ProductsAreOverflowChecked) {
  const RenamedCatalog r = RenameTable().apply(test_catalog());
  const CatalogExtent extent(r);
  const auto c = ModelConfig::parse("{}", "/x/config.json");
  const ConfigBounds b(c, extent);
  EXPECT_EQ(b.mul(uint64_t{1} << 32, (uint64_t{1} << 32) - 1, "a * b"),
            (uint64_t{1} << 32) * ((uint64_t{1} << 32) - 1));
  EXPECT_WMAP_ERROR(b.mul(uint64_t{1} << 32, uint64_t{1} << 32, "num_attention_heads * head_dim"),
                    ErrorCode::kMalformedInput,
                    "/x/config.json: num_attention_heads * head_dim: 4294967296 * 4294967296 overflows 64 bits");
  EXPECT_WMAP_ERROR(spec::checked_mul(uint64_t{3} << 62, 2, "w: a row's elements"), ErrorCode::kOverflow,
                    "w: a row's elements: 13835058055282163712 * 2 overflows 64 bits");
}

TEST(ModelConfig, NonNegativeCounts) {
  const auto c = ModelConfig::parse(R"({"n": -1, "z": 0, "s": "3"})", "/x/config.json");
  EXPECT_EQ(c.get_non_negative("z", 7), 0u);
  EXPECT_EQ(c.get_non_negative("absent", 7), 7u);
  EXPECT_WMAP_ERROR(c.get_non_negative("n", 0), ErrorCode::kMalformedInput,
                    "/x/config.json: n: expected a non-negative integer, found -1");
  EXPECT_WMAP_ERROR(c.get_non_negative("s", 0), ErrorCode::kMalformedInput, "s: expected an integer");
}

}  // namespace
}  // namespace wmap::test
