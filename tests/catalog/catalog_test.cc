// Catalog: lookups, prefix ranges, JSON round trip with content id, refusal of edited catalogs,
// and detection of shards changed since a catalog was saved.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <set>

#include "core_test_helpers.h"
#include "test_util.h"
#include "wmap/catalog/catalog.h"
#include "wmap/util/sha256.h"
#include "wmap/catalog/shard_set.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;

// Two shards with a mix of names that stress prefix boundaries.
class CatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_known(dir_ / "model-00001-of-00002.safetensors",
                {{"model.layers.1.a", DType::kF32, {2, 2}, pattern_bytes(16, 1)},
                 {"model.layers.1", DType::kU8, {1}, "x"},
                 {"model.layers.10.a", DType::kBF16, {3}, pattern_bytes(6, 2)},
                 {"model.layers.1x", DType::kU8, {2}, "yz"}},
                {{"format", "pt"}});
    write_known(dir_ / "model-00002-of-00002.safetensors",
                {{"model.layers.1.b.c", DType::kI64, {}, pattern_bytes(8, 3)},
                 {"model.layers.0.z", DType::kF16, {0, 4}, ""},
                 {"model.layers.1-", DType::kU8, {1}, "-"},
                 {"model.layers.1/", DType::kU8, {1}, "/"},
                 {"model.layers.2.a", DType::kU8, {4}, "abcd"},
                 {"lm_head.weight", DType::kF4, {2, 4}, "1234"}});
    cat_ = Catalog::build(discover_shards(dir_.path()));
  }

  std::vector<std::string> names(std::span<const TensorRecord> rs) {
    std::vector<std::string> out;
    for (const auto& r : rs) out.push_back(r.name);
    return out;
  }

  TempDir dir_;
  Catalog cat_;
};

TEST_F(CatalogTest, RecordsMatchTheHeaders) {
  ASSERT_EQ(cat_.size(), 10u);
  ASSERT_EQ(cat_.shards().size(), 2u);
  // Sorted by name.
  for (size_t i = 1; i < cat_.size(); ++i) EXPECT_LT(cat_.tensors()[i - 1].name, cat_.tensors()[i].name);
  for (uint32_t s = 0; s < 2; ++s) {
    const auto path = cat_.shard_path(s);
    const SafetensorsHeader h = read_header_file(path);
    const ShardRecord& sr = cat_.shards()[s];
    EXPECT_EQ(sr.header_bytes, h.header_bytes);
    EXPECT_EQ(sr.tensor_count, h.tensors.size());
    EXPECT_EQ(sr.metadata, h.metadata);
    EXPECT_EQ(sr.signature, stat_signature(path));
    for (const auto& t : h.tensors) {
      const TensorRecord& r = cat_.require(t.name);
      EXPECT_EQ(r.shard, s);
      EXPECT_EQ(r.dtype, t.dtype);
      EXPECT_EQ(r.shape, t.shape);
      EXPECT_EQ(r.offset, h.data_start() + t.begin);
      EXPECT_EQ(r.nbytes, t.end - t.begin);
    }
  }
  EXPECT_EQ(cat_.require("model.layers.1.b.c").numel(), 1u);
  EXPECT_EQ(cat_.require("model.layers.0.z").numel(), 0u);
  EXPECT_EQ(cat_.require("lm_head.weight").nbytes, 4u);
  EXPECT_EQ(cat_.total_bytes(), 16u + 1 + 6 + 2 + 8 + 0 + 1 + 1 + 4 + 4);
  EXPECT_EQ(cat_.shards()[0].metadata, (std::vector<std::pair<std::string, std::string>>{{"format", "pt"}}));
  EXPECT_EQ(cat_.root(), dir_.path());
}

TEST_F(CatalogTest, FindAndRequire) {
  const TensorRecord* r = cat_.find("model.layers.2.a");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->name, "model.layers.2.a");
  EXPECT_EQ(&cat_.tensors()[cat_.index_of(*r)], r);
  EXPECT_EQ(cat_.find("model.layers.2"), nullptr);
  EXPECT_EQ(cat_.find(""), nullptr);
  EXPECT_EQ(cat_.find("zzz"), nullptr);
  EXPECT_EQ(cat_.find("a"), nullptr);
  EXPECT_TRUE(cat_.contains("lm_head.weight"));
  EXPECT_FALSE(cat_.contains("lm_head"));
  EXPECT_WMAP_ERROR(cat_.require("model.layers.3.a"), ErrorCode::kNotFound, "'model.layers.3.a'");
}

TEST_F(CatalogTest, PrefixIsExactlyTheDottedSubtree) {
  EXPECT_EQ(names(cat_.prefix("model.layers.1")), (std::vector<std::string>{"model.layers.1.a", "model.layers.1.b.c"}));
  EXPECT_EQ(names(cat_.prefix("model.layers.10")), std::vector<std::string>{"model.layers.10.a"});
  EXPECT_EQ(names(cat_.prefix("model.layers.1.b")), std::vector<std::string>{"model.layers.1.b.c"});
  EXPECT_TRUE(cat_.prefix("model.layers.1x").empty());
  EXPECT_TRUE(cat_.prefix("model.layers.3").empty());
  EXPECT_TRUE(cat_.prefix("zzz").empty());
  EXPECT_TRUE(cat_.prefix("model.layers.1.a").empty());  // a leaf has no subtree
  EXPECT_EQ(cat_.prefix("model").size(), 9u);
  EXPECT_EQ(cat_.prefix("model.layers").size(), 9u);
}

// A one-byte U8 record named `name`, and a catalog of such records in one shard.
TensorRecord one_byte_record(std::string name) {
  TensorRecord r;
  r.name = std::move(name);
  r.dtype = DType::kU8;
  r.shape = {1};
  r.nbytes = 1;
  return r;
}

Catalog one_shard_catalog(std::vector<TensorRecord> recs) {
  ShardRecord shard;
  shard.file = "x.safetensors";
  shard.signature.size = 1;  // every record is byte [0, 1)
  return Catalog::from_parts("/nowhere", {shard}, std::move(recs));
}

// A saved catalog names its shards as an index does: relative paths inside the checkpoint. A
// crafted one pointing a load elsewhere is refused naming the entry (review, lesser notes).
TEST(CatalogJson, ASavedCatalogNamingAFileOutsideTheCheckpointIsRefused) {
  TempDir dir;
  const auto ckpt = synth_checkpoint(dir.path(), "llama", "ck");
  const std::string json = Catalog::build(discover_shards(ckpt)).to_json(true);
  const std::string name = "model-00001-of-00002.safetensors";
  ASSERT_NE(json.find(name), std::string::npos);
  for (const std::string bad : {"../outside.safetensors", "/etc/passwd", "a/../../b.safetensors"}) {
    std::string text = json;
    for (size_t at; (at = text.find("\"" + name + "\"")) != std::string::npos;) text.replace(at + 1, name.size(), bad);
    EXPECT_WMAP_ERROR(Catalog::parse_json(text, "crafted.json"), ErrorCode::kMalformedInput, "crafted.json",
                      "'" + bad + "' is not a relative path inside the checkpoint");
  }
}

TEST(CatalogPrefix, MatchesBruteForceOnRandomNames) {
  std::mt19937 rng(1234);
  const std::string alphabet = "ab.1-/";
  std::vector<TensorRecord> recs;
  std::set<std::string> seen;
  while (recs.size() < 400) {
    std::string n;
    const int len = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < len; ++i) n += alphabet[rng() % alphabet.size()];
    if (!seen.insert(n).second) continue;
    recs.push_back(one_byte_record(n));
  }
  const Catalog cat = one_shard_catalog(recs);
  std::vector<std::string> probes(seen.begin(), seen.end());
  probes.push_back("");
  probes.push_back("a.");
  for (const auto& p : probes) {
    std::vector<std::string> want;
    for (const auto& n : seen) {
      if (n.size() > p.size() && n.compare(0, p.size() + 1, p + ".") == 0) want.push_back(n);
    }
    std::vector<std::string> got;
    for (const auto& r : cat.prefix(p)) got.push_back(r.name);
    EXPECT_EQ(got, want) << "prefix '" << p << "'";
  }
}

// Records arrive as sorted runs (one per shard) whose ranges interleave, as shards that split a
// layer's experts do; the merge must give exactly std::sort's order for any run structure: many
// runs, long blocks, single-name runs (a descending list), one run, and a name in two runs.
TEST(CatalogFromParts, MergesInterleavedSortedRunsLikeASort) {
  std::vector<std::string> all;
  for (int l = 0; l < 12; ++l) {
    for (int e = 0; e < 64; ++e) {
      for (const char* w : {"down_proj", "gate_proj", "up_proj"}) {
        all.push_back("model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + "." + w + ".weight");
      }
    }
    all.push_back("model.layers." + std::to_string(l) + ".input_layernorm.weight");
  }
  auto check = [&](const std::vector<std::vector<std::string>>& runs, const std::string& what) {
    std::vector<TensorRecord> recs;
    for (const auto& run : runs) {
      for (const auto& n : run) recs.push_back(one_byte_record(n));
    }
    const Catalog cat = one_shard_catalog(recs);
    std::vector<std::string> want;
    for (const auto& run : runs) want.insert(want.end(), run.begin(), run.end());
    std::sort(want.begin(), want.end());
    std::vector<std::string> got;
    for (const auto& r : cat.tensors()) got.push_back(r.name);
    EXPECT_EQ(got, want) << what;
  };
  std::mt19937 rng(7);
  for (size_t shards : {size_t{1}, size_t{2}, size_t{37}, size_t{163}, all.size()}) {
    // Contiguous chunks of the layer-major list (whole layers, experts split across shards)...
    std::vector<std::vector<std::string>> runs(shards);
    for (size_t i = 0; i < all.size(); ++i) runs[i * shards / all.size()].push_back(all[i]);
    for (auto& r : runs) std::sort(r.begin(), r.end());
    check(runs, std::to_string(shards) + " contiguous shards");
    // ... and random assignment, every run sorted.
    for (auto& r : runs) r.clear();
    for (const auto& n : all) runs[rng() % shards].push_back(n);
    for (auto& r : runs) std::sort(r.begin(), r.end());
    check(runs, std::to_string(shards) + " random shards");
  }
  std::vector<std::string> descending = all;
  std::sort(descending.rbegin(), descending.rend());
  check({descending}, "descending: every name its own run");

  // Runs [b] and [a, b]: the duplicate sits in two runs.
  const std::vector<TensorRecord> dup = {one_byte_record("model.layers.0.b"), one_byte_record("model.layers.0.a"),
                                         one_byte_record("model.layers.0.b")};
  try {
    one_shard_catalog(dup);
    FAIL() << "a name in two runs was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDuplicateTensor);
    EXPECT_NE(std::string(e.what()).find("model.layers.0.b"), std::string::npos) << e.what();
  }
}

TEST_F(CatalogTest, JsonRoundTripPreservesContentAndId) {
  const std::string json = cat_.to_json(true);
  const Catalog back = Catalog::parse_json(json, "saved.json");
  EXPECT_EQ(back.content_id(), cat_.content_id());
  EXPECT_EQ(back.to_json(true), json);
  ASSERT_EQ(back.size(), cat_.size());
  for (size_t i = 0; i < cat_.size(); ++i) {
    const auto &a = cat_.tensors()[i], &b = back.tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.shard, b.shard);
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.offset, b.offset);
    EXPECT_EQ(a.nbytes, b.nbytes);
  }
  for (size_t s = 0; s < cat_.shards().size(); ++s) {
    EXPECT_EQ(back.shards()[s].file, cat_.shards()[s].file);
    EXPECT_EQ(back.shards()[s].signature, cat_.shards()[s].signature);
    EXPECT_EQ(back.shards()[s].header_bytes, cat_.shards()[s].header_bytes);
    EXPECT_EQ(back.shards()[s].tensor_count, cat_.shards()[s].tensor_count);
    EXPECT_EQ(back.shards()[s].metadata, cat_.shards()[s].metadata);
  }
  // The id is the SHA-256 of the canonical form, which leaves out the signatures.
  EXPECT_EQ(cat_.content_id(), sha256_hex(cat_.to_json(false)));
  EXPECT_EQ(cat_.content_id().size(), 64u);
  EXPECT_EQ(cat_.to_json(false).find("mtime_ns"), std::string::npos);
}

TEST_F(CatalogTest, SaveAndLoadFile) {
  TempDir out;
  cat_.save_json_file(out / "cat.json");
  const Catalog back = Catalog::load_json_file(out / "cat.json");
  EXPECT_EQ(back.content_id(), cat_.content_id());
  EXPECT_EQ(back.root(), out.path());
  EXPECT_EQ(back.size(), cat_.size());
  EXPECT_WMAP_ERROR(Catalog::load_json_file(out / "missing.json"), ErrorCode::kNotFound, "missing.json");
}

TEST_F(CatalogTest, ContentIdIgnoresWhereAndWhenTheFilesLive) {
  TempDir copy;
  for (const auto& s : cat_.shards()) fs::copy_file(dir_ / s.file, copy / s.file);
  const Catalog other = Catalog::build(discover_shards(copy.path()));
  EXPECT_EQ(other.content_id(), cat_.content_id());
  EXPECT_NE(other.shards()[0].signature.inode, cat_.shards()[0].signature.inode);
}

TEST_F(CatalogTest, ContentIdChangesWithContent) {
  write_known(dir_ / "model-00002-of-00002.safetensors", {{"model.layers.2.a", DType::kU8, {4}, "abcd"}});
  const Catalog other = Catalog::build(discover_shards(dir_.path()));
  EXPECT_NE(other.content_id(), cat_.content_id());
}

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST_F(CatalogTest, EditedCatalogRefused) {
  const std::string json = cat_.to_json(true);
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"\"name\":\"model.layers.2.a\"", "\"name\":\"model.layers.2.b\""},
      {"\"dtype\":\"BF16\"", "\"dtype\":\"F16\""},
      {"\"format\":\"pt\"}", "\"format\":\"pt\"}"},  // no-op edit: must still load
  };
  for (const auto& [from, to] : edits) {
    const std::string edited = replace_once(json, from, to);
    if (edited == json) {
      EXPECT_EQ(Catalog::parse_json(edited, "edited.json").content_id(), cat_.content_id());
      continue;
    }
    EXPECT_WMAP_ERROR(Catalog::parse_json(edited, "edited.json"), ErrorCode::kMalformedInput, "edited.json",
                      "content id", cat_.content_id());
  }
  // A changed offset that stays inside the file.
  const TensorRecord& r = cat_.require("model.layers.1x");
  const std::string off = "\"offset\":" + std::to_string(r.offset) + ",\"nbytes\":2}";
  EXPECT_WMAP_ERROR(
      Catalog::parse_json(replace_once(json, off, "\"offset\":" + std::to_string(r.offset - 1) + ",\"nbytes\":2}"),
                          "edited.json"),
      ErrorCode::kMalformedInput, "edited.json", "content id");
  // A forged content id.
  EXPECT_WMAP_ERROR(Catalog::parse_json(replace_once(json, cat_.content_id(), std::string(64, '0')), "edited.json"),
                    ErrorCode::kMalformedInput, "edited.json", std::string(64, '0'));
}

TEST_F(CatalogTest, MalformedCatalogRefused) {
  const std::string json = cat_.to_json(true);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "not valid JSON"},
      {"[]", "not a JSON object"},
      {R"({"format":"other","version":1})", "format"},
      {replace_once(json, "\"version\":1", "\"version\":2"), "version 2"},
      {replace_once(json, "\"content_id\"", "\"content_idx\""), "content_id"},
      {replace_once(json, "\"dtype\":\"BF16\"", "\"dtype\":\"BF17\""), "unknown dtype"},
      {replace_once(json, "\"file\":\"model-00002-of-00002.safetensors\",\"offset\"",
                    "\"file\":\"model-00009.safetensors\",\"offset\""),
       "model-00009.safetensors"},
      {replace_once(json, ",\"nbytes\":16}", ",\"nbytes\":17}"), "nbytes 17"},
      {replace_once(json, "\"shape\":[2,2]", "\"shape\":[-2,2]"), "shape"},
  };
  for (const auto& c : cases) {  // not a structured binding: clang cannot capture one in the macro's lambda
    EXPECT_WMAP_ERROR(Catalog::parse_json(c.first, "bad.json"), ErrorCode::kMalformedInput, "bad.json", c.second);
  }
}

TEST_F(CatalogTest, CatalogBytesOutsideTheShardRefused) {
  // A saved catalog whose tensor claims bytes past its shard's size is refused before its id is
  // even compared (from_parts refuses such parts too, so the JSON is edited).
  ShardRecord s;
  s.file = "s.safetensors";
  s.signature.size = 100;
  TensorRecord t;
  t.name = "w";
  t.dtype = DType::kU8;
  t.shape = {8};
  t.offset = 92;
  t.nbytes = 8;
  std::string json = Catalog::from_parts("/x", {s}, {t}).to_json(true);
  const size_t at = json.find("\"offset\":92");
  ASSERT_NE(at, std::string::npos) << json;
  json.replace(at, std::string_view("\"offset\":92").size(), "\"offset\":96");
  EXPECT_WMAP_ERROR(Catalog::parse_json(json, "c.json"), ErrorCode::kMalformedInput, "c.json", "'w'", "s.safetensors",
                    "100 bytes");
}

TEST(CatalogFromParts, BadShardIndexAndDuplicates) {
  ShardRecord a, b;
  a.file = "a.safetensors";
  b.file = "b.safetensors";
  TensorRecord t;
  t.name = "w";
  t.shape = {0};
  t.shard = 2;
  EXPECT_WMAP_ERROR(Catalog::from_parts("/x", {a, b}, {t}), ErrorCode::kMalformedInput, "'w'");
  TensorRecord u = t, v = t;
  u.shard = 0;
  v.shard = 1;
  EXPECT_WMAP_ERROR(Catalog::from_parts("/x", {a, b}, {u, v}), ErrorCode::kDuplicateTensor, "'w'", "a.safetensors",
                    "b.safetensors");
}

TEST_F(CatalogTest, ThreadsAndProgressDoNotChangeTheResult) {
  for (unsigned threads : {1u, 2u, 7u}) {
    size_t last_done = 0, last_total = 0;
    CatalogBuildOptions o;
    o.threads = threads;
    o.progress = [&](size_t done, size_t total) { last_done = done, last_total = total; };
    const Catalog c = Catalog::build(discover_shards(dir_.path()), o);
    EXPECT_EQ(c.content_id(), cat_.content_id());
    EXPECT_EQ(last_done, 2u);
    EXPECT_EQ(last_total, 2u);
  }
}

TEST_F(CatalogTest, ChangedShardsReportsNothingWhenUnchanged) {
  EXPECT_TRUE(cat_.changed_shards(dir_.path()).empty());
  const Catalog loaded = Catalog::parse_json(cat_.to_json(true), "c.json");
  EXPECT_TRUE(loaded.changed_shards(dir_.path()).empty());
}

TEST_F(CatalogTest, ChangedShardsReportsSize) {
  const fs::path p = dir_ / "model-00002-of-00002.safetensors";
  const auto before = fs::last_write_time(p);
  { std::ofstream(p, std::ios::binary | std::ios::app) << "x"; }
  fs::last_write_time(p, before);  // only the size differs
  const auto changes = cat_.changed_shards(dir_.path());
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_NE(changes[0].find("model-00002-of-00002.safetensors"), std::string::npos) << changes[0];
  EXPECT_NE(changes[0].find("size"), std::string::npos) << changes[0];
  EXPECT_EQ(changes[0].find("inode"), std::string::npos) << changes[0];
}

TEST_F(CatalogTest, ChangedShardsReportsMtime) {
  const fs::path p = dir_ / "model-00001-of-00002.safetensors";
  fs::last_write_time(p, fs::last_write_time(p) + std::chrono::seconds(5));
  const auto changes = cat_.changed_shards(dir_.path());
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_NE(changes[0].find("model-00001-of-00002.safetensors"), std::string::npos) << changes[0];
  EXPECT_NE(changes[0].find("mtime_ns"), std::string::npos) << changes[0];
  EXPECT_EQ(changes[0].find("size"), std::string::npos) << changes[0];
}

TEST_F(CatalogTest, ChangedShardsReportsInode) {
  // Same bytes and mtime, new file (a replaced shard).
  const fs::path p = dir_ / "model-00001-of-00002.safetensors";
  const auto mtime = fs::last_write_time(p);
  fs::copy_file(p, dir_ / "tmp");
  fs::last_write_time(dir_ / "tmp", mtime);
  fs::rename(dir_ / "tmp", p);
  const auto changes = cat_.changed_shards(dir_.path());
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_NE(changes[0].find("model-00001-of-00002.safetensors"), std::string::npos) << changes[0];
  EXPECT_NE(changes[0].find("inode"), std::string::npos) << changes[0];
  EXPECT_EQ(changes[0].find("size"), std::string::npos) << changes[0];
}

TEST_F(CatalogTest, ChangedShardsReportsMissingShard) {
  fs::remove(dir_ / "model-00002-of-00002.safetensors");
  const auto changes = cat_.changed_shards(dir_.path());
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_NE(changes[0].find("model-00002-of-00002.safetensors"), std::string::npos) << changes[0];
}

// from_parts checks each record as the header parser does (review F8): parts handed in by an
// engine or another format's loader cannot make a catalog whose records lie.
TEST(CatalogFromParts, ChecksEveryRecordAsTheParserDoes) {
  ShardRecord s;
  s.file = "s.safetensors";
  s.signature.size = 64;
  TensorRecord good{
      .name = "w", .shard = 0, .dtype = DType::kF32, .shape = {4, 2}, .offset = 8, .nbytes = 32, .strides = {}};
  EXPECT_EQ(Catalog::from_parts("/x", {s}, {good}).tensors().size(), 1u);

  TensorRecord r = good;
  r.nbytes = 31;
  EXPECT_WMAP_ERROR(Catalog::from_parts("/x", {s}, {r}, "parts"), ErrorCode::kMalformedInput, "parts: tensor 'w'",
                    "nbytes 31 does not match F32 [4, 2]");
  r = good;
  r.offset = 40;
  EXPECT_WMAP_ERROR(Catalog::from_parts("/x", {s}, {r}), ErrorCode::kMalformedInput, "'w'", "[40, +32)",
                    "s.safetensors", "64 bytes");
  r = good;
  r.shape = {uint64_t{1} << 40, uint64_t{1} << 40};
  EXPECT_WMAP_ERROR(Catalog::from_parts("/x", {s}, {r}), ErrorCode::kMalformedInput, "more than 2^64 elements");
  r = good;
  r.strides = {1};
  EXPECT_WMAP_ERROR(Catalog::from_parts("/x", {s}, {r}), ErrorCode::kMalformedInput, "1 strides for a 2-d shape");
  r = good;
  r.strides = {UINT64_MAX / 2, 1};
  EXPECT_WMAP_ERROR(Catalog::from_parts("/x", {s}, {r}), ErrorCode::kMalformedInput,
                    "strided extent overflows 64 bits");
  r = good;
  r.dtype = DType::kF4;
  r.nbytes = 4;
  r.strides = {2, 1};
  EXPECT_WMAP_ERROR(Catalog::from_parts("/x", {s}, {r}), ErrorCode::kMalformedInput, "strides on a sub-byte dtype");
  // A record no catalog accepted still answers span_bytes() with an error, never a bad optional.
  r = good;
  r.strides = {UINT64_MAX / 2, 1};
  EXPECT_WMAP_ERROR(r.span_bytes(), ErrorCode::kOverflow, "'w'");
}

}  // namespace
}  // namespace wmap::test
