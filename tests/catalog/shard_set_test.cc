// Shard discovery (DESIGN.md, ShardSet): index.json honoured, sorted discovery without one,
// sharded files preferred over consolidated ones, and the errors that name what is wrong.
#include <gtest/gtest.h>

#include <algorithm>

#include "core_test_helpers.h"
#include "test_util.h"
#include "wmap/catalog/catalog.h"
#include "wmap/catalog/shard_set.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;

// A shard holding one U8 tensor per name, each of 2 bytes.
void write_shard(const fs::path& file, const std::vector<std::string>& names) {
  std::vector<KnownTensor> ts;
  for (const auto& n : names) ts.push_back({n, DType::kU8, {2}, pattern_bytes(2, static_cast<unsigned>(n.size()))});
  write_known(file, ts);
}

bool has_warning_naming(const ShardSet& set, const std::string& file) {
  return std::any_of(set.warnings.begin(), set.warnings.end(),
                     [&](const std::string& w) { return w.find(file) != std::string::npos; });
}

TEST(ShardSetTest, IndexHonouredWithUnsortedWeightMap) {
  TempDir dir;
  write_shard(dir / "model-00002-of-00003.safetensors", {"b.x", "b.y"});
  write_shard(dir / "model-00001-of-00003.safetensors", {"a.x"});
  write_shard(dir / "model-00003-of-00003.safetensors", {"c.x"});
  write_file(dir / "model.safetensors.index.json", R"({
    "metadata": {"total_size": 8},
    "weight_map": {
      "c.x": "model-00003-of-00003.safetensors",
      "b.y": "model-00002-of-00003.safetensors",
      "a.x": "model-00001-of-00003.safetensors",
      "b.x": "model-00002-of-00003.safetensors"
    }})");
  const ShardSet set = discover_shards(dir.path());
  ASSERT_TRUE(set.index.has_value());
  EXPECT_EQ(set.files, (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                                 "model-00003-of-00003.safetensors"}));
  const std::vector<std::pair<std::string_view, uint32_t>> want = {{"a.x", 0}, {"b.x", 1}, {"b.y", 1}, {"c.x", 2}};
  EXPECT_EQ(set.index->weight_map, want);
  EXPECT_TRUE(set.warnings.empty());
  const Catalog cat = Catalog::build(set);
  ASSERT_EQ(cat.size(), 4u);
  EXPECT_EQ(cat.shards()[cat.require("b.y").shard].file, "model-00002-of-00003.safetensors");
}

TEST(ShardSetTest, IndexNamesMissingShard) {
  TempDir dir;
  write_shard(dir / "model-00001-of-00002.safetensors", {"a"});
  write_file(dir / "model.safetensors.index.json",
             R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  EXPECT_WMAP_ERROR(discover_shards(dir.path()), ErrorCode::kNotFound, "model-00002-of-00002.safetensors",
                    "model.safetensors.index.json");
}

TEST(ShardSetTest, FileNotNamedByIndexIgnoredWithWarning) {
  TempDir dir;
  write_shard(dir / "model-00001-of-00001.safetensors", {"a"});
  write_shard(dir / "extra.safetensors", {"zzz"});
  write_file(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "model-00001-of-00001.safetensors"}})");
  const ShardSet set = discover_shards(dir.path());
  EXPECT_EQ(set.files, std::vector<std::string>{"model-00001-of-00001.safetensors"});
  EXPECT_TRUE(has_warning_naming(set, "extra.safetensors"));
  const Catalog cat = Catalog::build(set);
  EXPECT_EQ(cat.size(), 1u);
  EXPECT_FALSE(cat.contains("zzz"));
}

TEST(ShardSetTest, KeyMappedToWrongShardNamesBoth) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"a"});
  write_shard(dir / "s2.safetensors", {"b"});
  write_file(dir / "model.safetensors.index.json",
             R"({"weight_map": {"a": "s2.safetensors", "b": "s2.safetensors", "c": "s1.safetensors"}})");
  // `a` is in s1 but mapped to s2 (s1 is named by the index through `c`).
  write_shard(dir / "s1.safetensors", {"a", "c"});
  EXPECT_WMAP_ERROR(Catalog::build(discover_shards(dir.path())), ErrorCode::kMalformedInput,
                    "model.safetensors.index.json", "'a'", "s1.safetensors", "s2.safetensors");
}

TEST(ShardSetTest, KeyMappedToNoShard) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"a"});
  write_file(dir / "model.safetensors.index.json",
             R"({"weight_map": {"a": "s1.safetensors", "ghost": "s1.safetensors"}})");
  EXPECT_WMAP_ERROR(Catalog::build(discover_shards(dir.path())), ErrorCode::kMalformedInput,
                    "model.safetensors.index.json", "'ghost'", "s1.safetensors");
}

TEST(ShardSetTest, TensorsMissingFromIndexAreStillCatalogued) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"a", "unlisted"});
  write_file(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors"}})");
  const Catalog cat = Catalog::build(discover_shards(dir.path()));
  EXPECT_TRUE(cat.contains("unlisted"));
}

TEST(ShardSetTest, UnknownIndexKeysIgnored) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"a"});
  write_file(dir / "model.safetensors.index.json", R"({
    "metadata": {"total_size": 2, "total_parameters": 2, "format": {"nested": [1, 2, 3]}},
    "producer": "someone", "version": 3.5, "list": [null, true],
    "weight_map": {"a": "s1.safetensors"}})");
  const ShardSet set = discover_shards(dir.path());
  EXPECT_EQ(set.files, std::vector<std::string>{"s1.safetensors"});
  EXPECT_EQ(Catalog::build(set).size(), 1u);
}

TEST(ShardSetTest, ShardNameEscapingTheDirectoryRejected) {
  for (const std::string bad : {"../outside.safetensors", "sub/../../outside.safetensors", "/etc/passwd", ""}) {
    TempDir dir;
    write_file(dir / "model.safetensors.index.json", R"({"weight_map": {"a": ")" + bad + R"("}})");
    EXPECT_WMAP_ERROR(discover_shards(dir.path()), ErrorCode::kMalformedInput, "model.safetensors.index.json",
                      "'" + bad + "'");
  }
}

TEST(ShardSetTest, MalformedIndexRefused) {
  const std::pair<std::string, std::string> cases[] = {
      {"{", "not valid JSON"},
      {"[]", "not a JSON object"},
      {R"({"metadata": {}})", "weight_map"},
      {R"({"weight_map": []})", "weight_map"},
      {R"({"weight_map": {"a": 3}})", "'a'"},
      {R"({"weight_map": {"a": "s.safetensors", "a": "s.safetensors"}})", "'a'"},
      {R"({"weight_map": {}})", "no shard"},
      // Fields beside weight_map are read through (the fast path would skip them), and nothing may follow the object.
      {R"({"metadata": {1 2}, "weight_map": {"a": "s.safetensors"}})", "not valid JSON"},
      {R"({"metadata": {"total_size": 12x}, "weight_map": {"a": "s.safetensors"}})", "not valid JSON"},
      {R"({"weight_map": {"a": "s.safetensors"}, "metadata": {"note": "\q"}})", "not valid JSON"},
      {R"({"weight_map": {"a": "s.safetensors"}, "metadata": [tru]})", "not valid JSON"},
      {R"({"weight_map": {"a": "s.safetensors"}} {})", "not valid JSON"},
      {R"({"weight_map": {"a": "s.safetensors"}} x)", "not valid JSON"},
  };
  for (const auto& [text, needle] : cases) {
    TempDir dir;
    write_shard(dir / "s.safetensors", {"a"});
    write_file(dir / "model.safetensors.index.json", text);
    EXPECT_WMAP_ERROR(discover_shards(dir.path()), ErrorCode::kMalformedInput, "model.safetensors.index.json", needle);
  }
}

TEST(ShardSetTest, ParseShardIndexDirectly) {
  std::vector<std::string> names;
  const ShardIndex idx =
      parse_shard_index(R"({"weight_map": {"z": "b.st", "y": "a.st", "x": "b.st"}})", "idx.json", names);
  EXPECT_EQ(names, (std::vector<std::string>{"a.st", "b.st"}));
  const std::vector<std::pair<std::string_view, uint32_t>> want = {{"x", 1}, {"y", 0}, {"z", 1}};
  EXPECT_EQ(idx.weight_map, want);
  EXPECT_EQ(idx.file, "idx.json");
}

// Keys stay views into the index text unless written with escapes; both forms must come out
// decoded, wherever weight_map sits in the object.
TEST(ShardSetTest, ParseShardIndexEscapesAndFieldOrder) {
  std::vector<std::string> names;
  const ShardIndex idx = parse_shard_index(
      R"({"weight_map": {"b\u002ex": "s\u002est", "a.\"q\"": "s.st", "c": "t.st"}, "metadata": {"total_size": 3}})",
      "idx.json", names);
  EXPECT_EQ(names, (std::vector<std::string>{"s.st", "t.st"}));
  const std::vector<std::pair<std::string_view, uint32_t>> want = {{"a.\"q\"", 0}, {"b.x", 0}, {"c", 1}};
  EXPECT_EQ(idx.weight_map, want);
  // A copy shares the text the names view.
  const ShardIndex copy = idx;
  EXPECT_EQ(copy.weight_map, want);
  std::vector<std::string> names2;
  EXPECT_EQ(parse_shard_index(R"({"metadata": {"x": [1, {"y": "}"}]}, "weight_map": {"k": "s.st"}})", "i", names2)
                .weight_map.size(),
            1u);
  // Keys and values are found from the structural positions around the colon: any whitespace
  // there, and structural characters inside the strings, are fine.
  std::vector<std::string> names4;
  const ShardIndex spaced = parse_shard_index(
      "{\"weight_map\" : { \"k1\"\n :\t\"s.st\" ,\r\n \"k:}2\"\t:\n\"t\\u002est\"  , \"\": \"s.st\"\n}\n}", "i",
      names4);
  EXPECT_EQ(names4, (std::vector<std::string>{"s.st", "t.st"}));
  const std::vector<std::pair<std::string_view, uint32_t>> want4 = {{"", 0}, {"k1", 0}, {"k:}2", 1}};
  EXPECT_EQ(spaced.weight_map, want4);
  // Whitespace after the object, nulls, booleans and nested arrays in metadata are fine.
  std::vector<std::string> names3;
  EXPECT_EQ(parse_shard_index(
                "{\"metadata\": {\"a\": [null, true, false, -1.5e3, [[]]]}, \"weight_map\": {\"k\": \"s.st\"}} \n\t ",
                "i", names3)
                .weight_map.size(),
            1u);
}

TEST(ShardSetTest, SortedDiscoveryWithoutIndex) {
  TempDir dir;
  // Created in reverse order so the directory order is unlikely to be sorted already.
  for (const char* n : {"c.safetensors", "b.safetensors", "a.safetensors", "a-2.safetensors"}) {
    write_shard(dir / n, {std::string("t.") + n});
  }
  write_file(dir / "notes.txt", "not a shard");
  write_file(dir / "x.safetensors.bak", "not a shard");
  fs::create_directory(dir / "d.safetensors");  // a directory, not a shard
  const ShardSet set = discover_shards(dir.path());
  EXPECT_FALSE(set.index.has_value());
  EXPECT_EQ(set.files,
            (std::vector<std::string>{"a-2.safetensors", "a.safetensors", "b.safetensors", "c.safetensors"}));
  EXPECT_EQ(set.root, dir.path());
  EXPECT_EQ(set.path_of(2), dir / "b.safetensors");
}

TEST(ShardSetTest, ShardedPreferredOverConsolidated) {
  TempDir dir;
  write_shard(dir / "model-00001-of-00002.safetensors", {"a"});
  write_shard(dir / "model-00002-of-00002.safetensors", {"b"});
  write_shard(dir / "consolidated.safetensors", {"a", "b"});
  const ShardSet set = discover_shards(dir.path());
  EXPECT_EQ(set.files,
            (std::vector<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
  EXPECT_TRUE(has_warning_naming(set, "consolidated.safetensors"));
  EXPECT_EQ(Catalog::build(set).size(), 2u);

  const ShardSet cons = discover_shards(dir.path(), {.prefer_consolidated = true});
  EXPECT_EQ(cons.files, std::vector<std::string>{"consolidated.safetensors"});
  EXPECT_TRUE(has_warning_naming(cons, "model-00001-of-00002.safetensors"));
  EXPECT_TRUE(has_warning_naming(cons, "model-00002-of-00002.safetensors"));
  EXPECT_EQ(Catalog::build(cons).size(), 2u);
}

TEST(ShardSetTest, IndexPreferredOverConsolidated) {
  TempDir dir;
  write_shard(dir / "model-00001-of-00001.safetensors", {"a"});
  write_shard(dir / "consolidated.00.safetensors", {"a"});
  write_file(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "model-00001-of-00001.safetensors"}})");
  const ShardSet set = discover_shards(dir.path());
  EXPECT_TRUE(set.index.has_value());
  EXPECT_EQ(set.files, std::vector<std::string>{"model-00001-of-00001.safetensors"});
  EXPECT_TRUE(has_warning_naming(set, "consolidated.00.safetensors"));
  EXPECT_EQ(discover_shards(dir.path(), {.prefer_consolidated = true}).files,
            std::vector<std::string>{"consolidated.00.safetensors"});
}

TEST(ShardSetTest, ConsolidatedFileNamedByIndexIsNotReportedIgnored) {
  TempDir dir;
  write_shard(dir / "consolidated.safetensors", {"a"});
  write_shard(dir / "consolidated.bak.safetensors", {"a"});
  write_file(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "consolidated.safetensors"}})");
  const ShardSet set = discover_shards(dir.path());
  EXPECT_EQ(set.files, std::vector<std::string>{"consolidated.safetensors"});
  ASSERT_EQ(set.warnings.size(), 1u);
  EXPECT_NE(set.warnings[0].find("consolidated.bak.safetensors"), std::string::npos) << set.warnings[0];
  EXPECT_EQ(Catalog::build(set).size(), 1u);
}

TEST(ShardSetTest, OnlyConsolidatedFilesAreUsed) {
  TempDir dir;
  write_shard(dir / "consolidated.01.safetensors", {"b"});
  write_shard(dir / "consolidated.00.safetensors", {"a"});
  const ShardSet set = discover_shards(dir.path());
  EXPECT_EQ(set.files, (std::vector<std::string>{"consolidated.00.safetensors", "consolidated.01.safetensors"}));
  EXPECT_EQ(Catalog::build(set).size(), 2u);
}

TEST(ShardSetTest, PreferConsolidatedWithoutConsolidatedFilesUsesShards) {
  TempDir dir;
  write_shard(dir / "model.safetensors", {"a"});
  EXPECT_EQ(discover_shards(dir.path(), {.prefer_consolidated = true}).files,
            std::vector<std::string>{"model.safetensors"});
}

TEST(ShardSetTest, EmptyDirectoryNamesTheDirectory) {
  TempDir dir;
  EXPECT_WMAP_ERROR(discover_shards(dir.path()), ErrorCode::kNotFound, dir.path().string(), "no .safetensors");
  write_file(dir / "config.json", "{}");
  EXPECT_WMAP_ERROR(discover_shards(dir.path()), ErrorCode::kNotFound, dir.path().string());
}

TEST(ShardSetTest, MissingPathNamesThePath) {
  TempDir dir;
  EXPECT_WMAP_ERROR(discover_shards(dir / "nope"), ErrorCode::kNotFound, (dir / "nope").string());
}

TEST(ShardSetTest, SingleFilePath) {
  TempDir dir;
  write_shard(dir / "one.safetensors", {"a", "b"});
  write_shard(dir / "other.safetensors", {"c"});
  const ShardSet set = discover_shards(dir / "one.safetensors");
  EXPECT_EQ(set.root, dir.path());
  EXPECT_EQ(set.files, std::vector<std::string>{"one.safetensors"});
  EXPECT_FALSE(set.index.has_value());
  const Catalog cat = Catalog::build(set);
  EXPECT_EQ(cat.size(), 2u);
  EXPECT_FALSE(cat.contains("c"));
}

TEST(ShardSetTest, SingleFileWithoutDirectoryPart) {
  TempDir dir;
  write_shard(dir / "m.safetensors", {"a"});
  const fs::path saved = fs::current_path();
  fs::current_path(dir.path());
  ShardSet set;
  try {
    set = discover_shards("m.safetensors");
  } catch (...) {
    fs::current_path(saved);
    throw;
  }
  const Catalog cat = Catalog::build(set);
  fs::current_path(saved);
  EXPECT_EQ(set.root, fs::path("."));
  EXPECT_EQ(set.files, std::vector<std::string>{"m.safetensors"});
  EXPECT_EQ(cat.size(), 1u);
}

TEST(ShardSetTest, DuplicateTensorAcrossShardsNamesBothFiles) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"a", "shared"});
  write_shard(dir / "s2.safetensors", {"shared", "b"});
  EXPECT_WMAP_ERROR(Catalog::build(discover_shards(dir.path())), ErrorCode::kDuplicateTensor, "'shared'",
                    "s1.safetensors", "s2.safetensors");
}

TEST(ShardSetTest, MalformedShardErrorNamesTheShard) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"a"});
  write_file(dir / "s2.safetensors", "short");
  EXPECT_WMAP_ERROR(Catalog::build(discover_shards(dir.path())), ErrorCode::kHeaderTooSmall,
                    (dir / "s2.safetensors").string());
}

}  // namespace
}  // namespace wmap::test
