// Bounded resources: a header claiming a huge size, a shape with an enormous element product, a
// mapping with 100k rules, a checkpoint with 200k tensors (sparse files, data never touched). Each
// fails fast with a clear error naming the file, or runs within measured time and memory bounds.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "reliability/reliability_util.h"
#include "wmap/mapping/mapping_file.h"
#include "wmap/mapping/rename_table.h"
#include "wmap/format/safetensors_header.h"
#include "wmap/catalog/shard_set.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double rss_mib() { return static_cast<double>(rss_pages()) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20); }

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// Catalogues one file; returns the error (code and message) it must raise.
Error catalog_error(const fs::path& file) {
  try {
    Catalog::build(discover_shards(file, {}));
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << file << " was catalogued";
  return Error(ErrorCode::kInternal, "");
}

TEST(BoundedResources, HeaderClaimingAHugeSizeFailsFastWithoutAllocating) {
  TempDir dir;
  const auto t0 = Clock::now();
  const double rss0 = rss_mib();
  for (uint64_t claim : std::initializer_list<uint64_t>{~0ull, 1ull << 40, kMaxHeaderBytes + 1}) {
    const auto file = dir / ("huge-" + std::to_string(claim) + ".safetensors");
    write_file(file, le64(claim) + "{}");
    const Error e = catalog_error(file);
    EXPECT_EQ(e.code(), ErrorCode::kHeaderTooLarge) << e.what();
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("exceeds the limit"), std::string::npos) << e.what();
    auto r = run_wmap("inspect " + shell_quote(file.string()));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(file.filename().string()), std::string::npos) << r.err;
  }
  // Under the limit but past the end of the (tiny) file: refused before the header is read.
  const auto file = dir / "short.safetensors";
  write_file(file, le64(kMaxHeaderBytes - 8) + "{}");
  EXPECT_EQ(catalog_error(file).code(), ErrorCode::kInvalidHeaderLength);
  EXPECT_LT(rss_mib() - rss0, 50.0) << "a claimed size was allocated";
  EXPECT_LT(seconds_since(t0), 20.0);
}

TEST(BoundedResources, HeaderAtTheSizeLimitIsReadOnceAndRejected) {
  // A sparse file whose header is as large as allowed and all zero bytes: one bounded read.
  TempDir dir;
  const auto file = dir / "zeros.safetensors";
  write_file(file, le64(kMaxHeaderBytes));
  fs::resize_file(file, kMaxHeaderBytes + 8);
  const auto t0 = Clock::now();
  const Error e = catalog_error(file);
  EXPECT_NE(e.code(), ErrorCode::kInternal) << e.what();
  EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  EXPECT_LT(seconds_since(t0), 30.0);
}

TEST(BoundedResources, ShapeWithAnEnormousProductIsAnOverflowError) {
  TempDir dir;
  struct Case {
    std::string shape;
    ErrorCode code;
  };
  for (const auto& c : {Case{"[4294967296,4294967296,16]", ErrorCode::kOverflow},
                        Case{"[18446744073709551615,2]", ErrorCode::kOverflow},
                        Case{"[2305843009213693952]", ErrorCode::kOverflow},  // 2^61 F32 = 2^63 bytes... x4 overflows
                        Case{"[1048576,1048576]", ErrorCode::kInvalidTensorInfo}}) {  // 4 TiB claimed, 4 bytes stored
    const auto file = dir / "shape.safetensors";
    write_file(file, safetensors_bytes(R"({"t":{"dtype":"F32","shape":)" + c.shape + R"(,"data_offsets":[0,4]}})",
                                       std::string(4, '\0')));
    const Error e = catalog_error(file);
    EXPECT_TRUE(e.code() == c.code || e.code() == ErrorCode::kOverflow || e.code() == ErrorCode::kInvalidTensorInfo)
        << c.shape << ": " << error_code_name(e.code()) << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("'t'"), std::string::npos) << "names the tensor: " << e.what();
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
}

TEST(BoundedResources, TensorClaimingTerabytesInASparseFileIsCataloguedWithoutReadingIt) {
  TempDir dir;
  const auto file = dir / "sparse.safetensors";
  const uint64_t nbytes = 1ull << 42;  // 4 TiB of F32, never touched
  const std::string header =
      R"({"t":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,)" + std::to_string(nbytes) + "]}}";
  write_file(file, le64(header.size()) + header);
  std::error_code ec;
  fs::resize_file(file, 8 + header.size() + nbytes, ec);
  if (ec) GTEST_SKIP() << "this file system cannot hold a 4 TiB sparse file: " << ec.message();
  const auto t0 = Clock::now();
  const Catalog cat = Catalog::build(discover_shards(file, {}));
  EXPECT_EQ(cat.require("t").nbytes, nbytes);
  EXPECT_LT(seconds_since(t0), 5.0);
  fs::remove(file);
}

std::string rules_yaml(int rules) {
  std::string yaml = "architectures: [HugeForCausalLM]\nplugin: llama\nrename:\n";
  for (int i = 0; i < rules; ++i) {
    yaml += "  - match: '^model\\.layers\\." + std::to_string(i) + "\\.mlp\\.w(\\d)\\.weight$'\n";
    yaml += "    replace: 'model.layers." + std::to_string(i) + ".mlp.proj\\1.weight'\n";
  }
  return yaml;
}

// 100k rename rules: refused up front (file size, then rule count), before YAML or RE2 work.
// Measured without the limit: parse 7.7 s, compile 4.6 s, 25 ms per key to apply, +317 MiB; on a
// 92k-key checkpoint that is ~40 minutes of regex matching.
TEST(BoundedResources, MappingWith100kRulesFailsFast) {
  const std::string yaml = rules_yaml(100000);
  ASSERT_GT(yaml.size(), kMaxMappingFileBytes);
  auto t0 = Clock::now();
  const std::string msg =
      expect_wmap_error([&] { parse_mapping_text(yaml, "huge.yaml"); },
                        {"huge.yaml:1:", "over the limit of " + std::to_string(kMaxMappingFileBytes)});
  EXPECT_LT(seconds_since(t0), 2.0) << msg;
  // Under the size limit but over the rule limit (short rules): refused naming the first rule over it.
  std::string many = "architectures: [A]\nplugin: llama\nignore:\n";
  for (size_t i = 0; i <= kMaxMappingRules; ++i) many += "- x" + std::to_string(i) + "\n";
  ASSERT_LT(many.size(), kMaxMappingFileBytes);
  t0 = Clock::now();
  expect_wmap_error(
      [&] { parse_mapping_text(many, "many.yaml"); },
      {"many.yaml:" + std::to_string(kMaxMappingRules + 4) + ":", "more than " + std::to_string(kMaxMappingRules)});
  EXPECT_LT(seconds_since(t0), 5.0);
  // Through the CLI: a mapping folder holding such a file is refused with exit 2, naming it.
  TempDir dir;
  write_file(dir / "huge.yaml", yaml);
  const auto ckpt = dir / "ckpt";
  synth("llama", ckpt);
  auto r = run_wmap("plan " + shell_quote(ckpt.string()) + " --mappings " + shell_quote(dir.path().string()));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("huge.yaml"), std::string::npos) << r.err;
}

// At the limit: 4096 rules compile and apply in bounded time and memory.
TEST(BoundedResources, MappingAtTheRuleLimitIsBounded) {
  constexpr int kRules = static_cast<int>(kMaxMappingRules);
  const std::string yaml = rules_yaml(kRules);
  ASSERT_LE(yaml.size(), kMaxMappingFileBytes);
  const double rss0 = rss_mib();
  auto t0 = Clock::now();
  const MappingFile mapping = parse_mapping_text(yaml, "limit.yaml");
  const RenameTable table(mapping);
  const double compile_s = seconds_since(t0);
  ASSERT_EQ(table.rule_count(), static_cast<size_t>(kRules));
  // 2000 keys, half matching the last rules (the worst case: first match wins, all rules tried).
  std::vector<TensorRecord> tensors;
  for (int i = 0; i < 2000; ++i) {
    TensorRecord r;
    r.name =
        i % 2 ? "model.layers." + std::to_string(kRules - 1 - i) + ".mlp.w1.weight" : "unmatched." + std::to_string(i);
    r.dtype = DType::kF32;
    r.shape = {1};
    r.offset = 4 * static_cast<uint64_t>(i);
    r.nbytes = 4;
    tensors.push_back(std::move(r));
  }
  ShardRecord shard;
  shard.file = "x.safetensors";
  shard.signature.size = 4 * tensors.size();
  const Catalog cat = Catalog::from_parts("/nonexistent", {shard}, std::move(tensors));
  t0 = Clock::now();
  const RenamedCatalog renamed = table.apply(cat);
  const double apply_s = seconds_since(t0);
  EXPECT_EQ(renamed.size(), 2000u);
  EXPECT_NE(renamed.find("model.layers." + std::to_string(kRules - 2) + ".mlp.proj1.weight"), nullptr);
  const double grown = rss_mib() - rss0;
  std::printf("%d rules: parse+compile %.2fs, apply to 2000 keys %.2fs, RSS %+.0f MiB\n", kRules, compile_s, apply_s,
              grown);
  EXPECT_LT(compile_s + apply_s, 60.0);
  EXPECT_LT(grown, 512.0);
}

// 200k tensors in two sparse shards (1 MiB each, 200 GiB claimed, never read).
TEST(BoundedResources, CheckpointWith200kTensorsCataloguesInBoundedTimeAndMemory) {
  TempDir dir;
  const auto ckpt = dir / "ckpt";
  fs::create_directories(ckpt);
  constexpr int kTensors = 200000, kShards = 2;
  constexpr uint64_t kBytes = 1 << 20;
  std::string index = R"({"metadata": {}, "weight_map": {)";
  for (int s = 0; s < kShards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, kShards);
    std::string header = "{";
    uint64_t offset = 0;
    for (int i = s; i < kTensors; i += kShards) {
      const std::string key = "model.layers." + std::to_string(i / 100) + ".t" + std::to_string(i % 100) + ".weight";
      if (offset) header += ",";
      header += "\"" + key + R"(":{"dtype":"BF16","shape":[512,1024],"data_offsets":[)" + std::to_string(offset) + "," +
                std::to_string(offset + kBytes) + "]}";
      index += (i ? ",\"" : "\"") + key + "\":\"" + name + "\"";
      offset += kBytes;
    }
    header += "}";
    header.append((8 - header.size() % 8) % 8, ' ');
    const auto file = ckpt / name;
    write_file(file, le64(header.size()) + header);
    std::error_code ec;
    fs::resize_file(file, 8 + header.size() + offset, ec);
    if (ec) GTEST_SKIP() << "no sparse files here: " << ec.message();
  }
  write_file(ckpt / "model.safetensors.index.json", index + "}}");
  const double rss0 = rss_mib();
  auto t0 = Clock::now();
  const Catalog cat = Catalog::build(discover_shards(ckpt, {}));
  const double build_s = seconds_since(t0);
  ASSERT_EQ(cat.size(), static_cast<size_t>(kTensors));
  EXPECT_EQ(cat.total_bytes(), kTensors * kBytes);
  EXPECT_EQ(cat.prefix("model.layers.1999").size(), 100u);
  t0 = Clock::now();
  const std::string json = cat.to_json();
  const Catalog back = Catalog::parse_json(json, "200k.json");
  const double json_s = seconds_since(t0);
  EXPECT_EQ(back.content_id(), cat.content_id());
  const double grown = rss_mib() - rss0;
  std::printf("200k tensors: catalogue %.2fs, JSON round trip %.2fs (%.0f MiB), RSS %+.0f MiB\n", build_s, json_s,
              static_cast<double>(json.size()) / (1 << 20), grown);
  EXPECT_LT(build_s, 60.0);
  EXPECT_LT(grown, 1024.0);
  // The CLI too: inspect in bounded time, data never read (200 GiB would take minutes).
  t0 = Clock::now();
  auto r = run_wmap("inspect " + shell_quote(ckpt.string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("200000"), std::string::npos) << r.out;
  EXPECT_LT(seconds_since(t0), 60.0);
}

}  // namespace
}  // namespace wmap::test
