// The CLI contract of `wmap inspect` and `wmap synth` (DESIGN.md, CLI contract): exit codes,
// the --json fields, --save-catalog, and synthetic checkpoints that are valid and family-correct.
#include <gtest/gtest.h>

#include <fstream>
#include <simdjson.h>

#include <algorithm>
#include <set>

#include "core_test_helpers.h"
#include "listing.h"
#include "test_util.h"
#include "wmap/catalog/catalog.h"
#include "wmap/catalog/shard_set.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

std::set<std::string> keys_of(simdjson::dom::object o) {
  std::set<std::string> out;
  for (auto f : o) out.insert(std::string(f.key));
  return out;
}

class InspectCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    const CommandResult r = run_wmap("synth llama " + shell_quote((dir_->path() / "llama").string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static fs::path ckpt() { return dir_->path() / "llama"; }
  static TempDir* dir_;
};
TempDir* InspectCliTest::dir_ = nullptr;

// inspect and plan put malloc's main heap on transparent huge pages (tools/wmap/huge_pages.h);
// load does not (its parameter buffers are huge-page mappings), WMAP_HUGE_PAGES=0 turns it off,
// and a GLIBC_TUNABLES that names glibc.malloc.hugetlb is left to glibc. The debug log says
// which, and the command's result is the same every way.
TEST_F(InspectCliTest, HugePagesForMetadataCommandsOnlyAndOffOnRequest) {
  const std::string cli = shell_quote(WMAP_CLI_PATH);
  const std::string path = shell_quote(ckpt().string());
  const CommandResult on = run_command("env -u GLIBC_TUNABLES -u WMAP_HUGE_PAGES " + cli + " -v inspect " + path);
  const CommandResult off = run_command("env -u GLIBC_TUNABLES WMAP_HUGE_PAGES=0 " + cli + " -v inspect " + path);
  const CommandResult glibc =
      run_command("env -u WMAP_HUGE_PAGES GLIBC_TUNABLES=glibc.malloc.hugetlb=1 " + cli + " -v inspect " + path);
  const CommandResult load = run_command("env -u GLIBC_TUNABLES -u WMAP_HUGE_PAGES " + cli + " -v load " + path);
  for (const auto* r : {&on, &off, &glibc, &load}) ASSERT_EQ(r->exit_code, 0) << r->err;
  EXPECT_EQ(on.out, off.out);
  EXPECT_EQ(on.out, glibc.out);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  EXPECT_NE(on.err.find("malloc huge pages: off (sanitizer build"), std::string::npos) << on.err;
#else
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  const bool never = !std::getline(thp, mode) || mode.find("[never]") != std::string::npos;
  EXPECT_NE(on.err.find(never ? "malloc huge pages: off (transparent huge pages [never])"
                              : "MiB of malloc's main heap advised MADV_HUGEPAGE)"),
            std::string::npos)
      << on.err;
  EXPECT_NE(off.err.find("malloc huge pages: off (WMAP_HUGE_PAGES=0)"), std::string::npos) << off.err;
  EXPECT_NE(glibc.err.find("malloc huge pages: as GLIBC_TUNABLES says (glibc.malloc.hugetlb=1)"), std::string::npos)
      << glibc.err;
  EXPECT_NE(load.err.find("malloc huge pages: off (only inspect and plan use them"), std::string::npos) << load.err;
  if (!never) {
    // A data limit below the reserve: the heap cannot grow by it, and malloc carries on as usual.
    const CommandResult limited =
        run_command("ulimit -d 300000 && env -u GLIBC_TUNABLES -u WMAP_HUGE_PAGES " + cli + " -v inspect " + path);
    ASSERT_EQ(limited.exit_code, 0) << limited.err;
    EXPECT_EQ(limited.out, on.out);
    EXPECT_NE(limited.err.find("malloc huge pages: off (the heap could not grow by the reserve"), std::string::npos)
        << limited.err;
  }
#endif
}

TEST_F(InspectCliTest, HumanOutput) {
  const CommandResult r = run_wmap("inspect " + shell_quote(ckpt().string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Catalog cat = Catalog::build(discover_shards(ckpt()));
  EXPECT_NE(r.out.find("shards: " + std::to_string(cat.shards().size())), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensors: " + std::to_string(cat.size())), std::string::npos) << r.out;
  // The content id costs a hash of the whole catalog: shown with --save-catalog / --json only.
  EXPECT_EQ(r.out.find(cat.content_id()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("BF16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model-00001-of-00002.safetensors"), std::string::npos) << r.out;
}

TEST_F(InspectCliTest, JsonContract) {
  const CommandResult r = run_wmap("inspect --json " + shell_quote(ckpt().string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::padded_string padded(r.out);
  simdjson::dom::element root;
  ASSERT_FALSE(parser.parse(padded).get(root)) << r.out.substr(0, 200);
  simdjson::dom::array shards, tensors;
  ASSERT_FALSE(root["shards"].get(shards));
  ASSERT_FALSE(root["tensors"].get(tensors));
  const Catalog cat = Catalog::build(discover_shards(ckpt()));
  ASSERT_EQ(shards.size(), cat.shards().size());
  size_t i = 0;
  for (simdjson::dom::object s : shards) {
    // The contract's fields, with their types; other fields may follow them.
    std::string_view file;
    uint64_t size, header_bytes, count;
    ASSERT_FALSE(s["file"].get(file));
    ASSERT_FALSE(s["size"].get(size));
    ASSERT_FALSE(s["header_bytes"].get(header_bytes));
    ASSERT_FALSE(s["tensors"].get(count));
    EXPECT_EQ(file, cat.shards()[i].file);
    EXPECT_EQ(file.find('/'), std::string_view::npos);  // a file name, not a path
    EXPECT_EQ(size, fs::file_size(ckpt() / std::string(file)));
    EXPECT_EQ(header_bytes, read_header_file(ckpt() / std::string(file)).header_bytes);
    EXPECT_EQ(count, cat.shards()[i].tensor_count);
    ++i;
  }
  ASSERT_EQ(tensors.size(), cat.size());
  std::string prev;
  i = 0;
  const std::set<std::string> want_keys = {"name", "dtype", "shape", "file", "offset", "nbytes"};
  for (simdjson::dom::object t : tensors) {
    EXPECT_EQ(keys_of(t), want_keys);
    const std::string name(t["name"].get_string().value());
    EXPECT_LT(prev, name);  // sorted by name
    prev = name;
    const TensorRecord& rec = cat.tensors()[i++];
    EXPECT_EQ(name, rec.name);
    EXPECT_EQ(t["dtype"].get_string().value(), dtype_name(rec.dtype));
    std::vector<uint64_t> shape;
    const simdjson::dom::array d_list = t["shape"].get_array().value();
    for (auto d : d_list) shape.push_back(d.get_uint64().value());
    EXPECT_EQ(shape, rec.shape);
    const std::string file(t["file"].get_string().value());
    EXPECT_EQ(file, cat.shards()[rec.shard].file);
    // `offset` is absolute in the file: 8 + N + begin.
    const SafetensorsHeader h = read_header_file(ckpt() / file);
    const auto it =
        std::find_if(h.tensors.begin(), h.tensors.end(), [&](const HeaderTensor& x) { return x.name == name; });
    ASSERT_NE(it, h.tensors.end());
    EXPECT_EQ(t["offset"].get_uint64().value(), h.data_start() + it->begin);
    EXPECT_EQ(t["nbytes"].get_uint64().value(), it->end - it->begin);
  }
}

TEST_F(InspectCliTest, JsonMatchesReference) {
  const CommandResult r = run_wmap("inspect --json " + shell_quote(ckpt().string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const CommandResult ref = run_reference({ckpt().string()}, false);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const Listing got = parse_listing(r.out), want = parse_listing(ref.out);
  EXPECT_EQ(got.shards, want.shards);
  ASSERT_EQ(got.tensors.size(), want.tensors.size());
  for (size_t i = 0; i < got.tensors.size(); ++i)
    EXPECT_TRUE(got.tensors[i].same_layout(want.tensors[i])) << describe(got.tensors[i]);
}

TEST_F(InspectCliTest, SingleFile) {
  const fs::path file = ckpt() / "model-00002-of-00002.safetensors";
  const CommandResult r = run_wmap("inspect --json " + shell_quote(file.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Listing l = parse_listing(r.out);
  ASSERT_EQ(l.shards.size(), 1u);
  EXPECT_EQ(l.shards[0].file, "model-00002-of-00002.safetensors");
  for (const auto& t : l.tensors) EXPECT_EQ(t.file, "model-00002-of-00002.safetensors");
}

TEST_F(InspectCliTest, SaveCatalogWritesALoadableCatalog) {
  TempDir out;
  const fs::path saved = out / "catalog.json";
  const CommandResult r =
      run_wmap("inspect " + shell_quote(ckpt().string()) + " --save-catalog " + shell_quote(saved.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::exists(saved));
  const Catalog loaded = Catalog::load_json_file(saved);
  const Catalog built = Catalog::build(discover_shards(ckpt()));
  EXPECT_EQ(loaded.content_id(), built.content_id());
  EXPECT_EQ(loaded.size(), built.size());
  EXPECT_TRUE(loaded.changed_shards(ckpt()).empty());
  EXPECT_NE(r.out.find(built.content_id()), std::string::npos);
  // --json and --save-catalog together.
  const fs::path saved2 = out / "catalog2.json";
  const CommandResult j =
      run_wmap("inspect --json " + shell_quote(ckpt().string()) + " --save-catalog " + shell_quote(saved2.string()));
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(Catalog::load_json_file(saved2).content_id(), built.content_id());
}

TEST_F(InspectCliTest, SaveCatalogToUnwritablePathFails) {
  const CommandResult r =
      run_wmap("inspect " + shell_quote(ckpt().string()) + " --save-catalog /nonexistent-dir/x/c.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("/nonexistent-dir/x/c.json"), std::string::npos) << r.err;
}

TEST(InspectCliErrors, MissingPath) {
  TempDir dir;
  const CommandResult r = run_wmap("inspect " + shell_quote((dir / "nope").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find((dir / "nope").string()), std::string::npos) << r.err;
}

TEST(InspectCliErrors, EmptyDirectory) {
  TempDir dir;
  const CommandResult r = run_wmap("inspect " + shell_quote(dir.path().string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(dir.path().string()), std::string::npos) << r.err;
}

TEST(InspectCliErrors, CorruptFilesExitTwoWithOneLine) {
  TempDir dir;
  const std::vector<std::string> bad = {
      "",
      safetensors_bytes("{", ""),
      safetensors_bytes("{" + entry("w", "F32", "[2]", 0, 8) + "}", "1234"),
      safetensors_bytes("{" + entry("w", "F33", "[2]", 0, 8) + "}", "12345678"),
      safetensors_bytes("{" + entry("w", "F32", "[4294967296,4294967296]", 0, 8) + "}", "12345678"),
      std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8),
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    const fs::path f = dir / ("bad" + std::to_string(i) + ".safetensors");
    write_file(f, bad[i]);
    const CommandResult r = run_wmap("inspect " + shell_quote(f.string()));
    EXPECT_EQ(r.exit_code, 2) << i;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(f.string()), std::string::npos) << r.err;
  }
}

TEST(InspectCliErrors, BadUsage) {
  EXPECT_EQ(run_wmap("inspect").exit_code, 2);
  EXPECT_EQ(run_wmap("inspect --no-such-flag x").exit_code, 2);
  EXPECT_EQ(run_wmap("frobnicate").exit_code, 2);
  EXPECT_EQ(run_wmap("").exit_code, 2);
}

// --- synth --------------------------------------------------------------------------------------

struct SynthCase {
  const char* family;
  const char* architecture;
  bool lm_head, qk_norm, qkv_bias;
};

void PrintTo(const SynthCase& c, std::ostream* os) { *os << c.family; }

class SynthTest : public ::testing::TestWithParam<SynthCase> {};

TEST_P(SynthTest, ProducesAValidCheckpoint) {
  const SynthCase& c = GetParam();
  TempDir dir;
  const fs::path out = dir / c.family;
  const CommandResult r = run_wmap(std::string("synth ") + c.family + " " + shell_quote(out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::exists(out / "config.json"));
  ASSERT_TRUE(fs::exists(out / "model.safetensors.index.json"));
  const ShardSet set = discover_shards(out);
  ASSERT_TRUE(set.index.has_value());
  EXPECT_TRUE(set.warnings.empty());
  const Catalog cat = Catalog::build(set);  // also checks every index key against its shard
  EXPECT_EQ(cat.size(), set.index->weight_map.size());

  simdjson::dom::parser parser;
  const std::string config = read_file(out / "config.json");
  simdjson::padded_string padded(config);
  simdjson::dom::element cfg = parser.parse(padded).value();
  EXPECT_EQ(cfg["architectures"].at(0).get_string().value(), c.architecture);
  const uint64_t layers = cfg["num_hidden_layers"].get_uint64().value();
  const uint64_t hidden = cfg["hidden_size"].get_uint64().value();
  const uint64_t vocab = cfg["vocab_size"].get_uint64().value();
  const uint64_t head_dim = cfg["head_dim"].get_uint64().value();
  EXPECT_EQ(cfg["tie_word_embeddings"].get_bool().value(), !c.lm_head);

  EXPECT_EQ(cat.require("model.embed_tokens.weight").shape, (std::vector<uint64_t>{vocab, hidden}));
  EXPECT_EQ(cat.contains("lm_head.weight"), c.lm_head);
  EXPECT_TRUE(cat.contains("model.norm.weight"));
  for (uint64_t i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* k : {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
                          "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
      EXPECT_TRUE(cat.contains(p + k)) << p + k;
    }
    EXPECT_EQ(cat.contains(p + "self_attn.q_norm.weight"), c.qk_norm);
    EXPECT_EQ(cat.contains(p + "self_attn.k_norm.weight"), c.qk_norm);
    if (c.qk_norm) {
      EXPECT_EQ(cat.require(p + "self_attn.q_norm.weight").shape, std::vector<uint64_t>{head_dim});
    }
    EXPECT_EQ(cat.contains(p + "self_attn.q_proj.bias"), c.qkv_bias);
    EXPECT_EQ(cat.prefix("model.layers." + std::to_string(i)).size(), 9u + (c.qk_norm ? 2 : 0) + (c.qkv_bias ? 3 : 0));
  }
  for (const auto& t : cat.tensors()) EXPECT_EQ(t.dtype, DType::kBF16) << t.name;

  // The independent reader agrees with the catalog.
  const CommandResult ref = run_reference({out.string()}, false);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  EXPECT_EQ(parse_listing(ref.out).tensors.size(), cat.size());
}

INSTANTIATE_TEST_SUITE_P(Families, SynthTest,
                         ::testing::Values(SynthCase{"llama", "LlamaForCausalLM", true, false, false},
                                           SynthCase{"qwen3", "Qwen3ForCausalLM", false, true, false},
                                           SynthCase{"qwen2", "Qwen2ForCausalLM", true, false, true},
                                           SynthCase{"mistral", "MistralForCausalLM", true, false, false}),
                         [](const auto& info) { return std::string(info.param.family); });

TEST(SynthErrors, UnknownFamilyExitsTwo) {
  TempDir dir;
  const CommandResult r = run_wmap("synth gpt9 " + shell_quote((dir / "out").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(
      r.err.find(
          "FAMILY: gpt9 not in {llama,mistral,qwen2,qwen3,qwen3_moe,mixtral,deepseek_v3,gpt_oss,llama4,llama4_text,"
          "phi3,kimi_k2,glm4_moe,qwen3_next,deepseek_v32}"),
      std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir / "out" / "model.safetensors.index.json"));
}

TEST(SynthErrors, BadOptionsExitTwo) {
  TempDir dir;
  CommandResult r = run_wmap("synth llama " + shell_quote((dir / "a").string()) + " --dtype I8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--dtype: I8 not in {BF16,F16,F32}"), std::string::npos) << r.err;
  r = run_wmap("synth llama " + shell_quote((dir / "b").string()) + " --preset huge");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--preset: huge not in {tiny,small,1g,4g}"), std::string::npos) << r.err;
  EXPECT_EQ(run_wmap("synth llama").exit_code, 2);
}

TEST(SynthOptions, SeedAndShardsAreHonoured) {
  TempDir dir;
  ASSERT_EQ(run_wmap("synth qwen2 " + shell_quote((dir / "a").string()) + " --shards 3 --seed 7").exit_code, 0);
  ASSERT_EQ(run_wmap("synth qwen2 " + shell_quote((dir / "b").string()) + " --shards 3 --seed 7").exit_code, 0);
  ASSERT_EQ(run_wmap("synth qwen2 " + shell_quote((dir / "c").string()) + " --shards 3 --seed 8").exit_code, 0);
  const Catalog a = Catalog::build(discover_shards(dir / "a"));
  EXPECT_EQ(a.shards().size(), 3u);
  EXPECT_EQ(read_file(dir / "a" / "model-00002-of-00003.safetensors"),
            read_file(dir / "b" / "model-00002-of-00003.safetensors"));
  EXPECT_NE(read_file(dir / "a" / "model-00002-of-00003.safetensors"),
            read_file(dir / "c" / "model-00002-of-00003.safetensors"));
}

}  // namespace
}  // namespace wmap::test
