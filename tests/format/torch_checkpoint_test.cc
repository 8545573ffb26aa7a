// PyTorch (.bin / .pth) checkpoints written by PyTorch itself (Debian's python3-torch): catalogued
// through the restricted pickle interpreter, loaded bit-exact at every tensor-parallel rank, and
// malicious pickles refused without running anything. Skips when `import torch` fails.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <filesystem>
#include <set>
#include <string>

#include "test_util.h"
#include "wmap/catalog/catalog.h"
#include "wmap/util/error.h"
#include "wmap/catalog/shard_set.h"
#include "wmap/format/torch_checkpoint.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

std::string maker() { return (source_dir() / "tests/format/make_torch_checkpoints.py").string(); }
std::string reference_py() { return (source_dir() / "tests/python/reference.py").string(); }

// Runs the checkpoint maker; skips the test when torch is missing (exit 77).
#define MAKE_OR_SKIP(args)                                                                               \
  do {                                                                                                   \
    const CommandResult _r = run_command(python() + " " + shell_quote(maker()) + " " + (args));          \
    if (_r.exit_code == 77 * 256 || _r.exit_code == 77) GTEST_SKIP() << "torch unavailable: " << _r.err; \
    ASSERT_EQ(_r.exit_code, 0) << _r.out << _r.err;                                                      \
  } while (0)

std::string file_bytes(const fs::path& p, uint64_t offset, uint64_t len) {
  const std::string all = read_file(p);
  EXPECT_LE(offset + len, all.size()) << p;
  return all.substr(offset, len);
}

// Every tensor of the catalog holds exactly the bytes PyTorch had (expected/<name>.raw).
void expect_catalog_matches(const Catalog& cat, const fs::path& expected, size_t count) {
  ASSERT_EQ(cat.size(), count);
  for (const auto& t : cat.tensors()) {
    const std::string want = read_file(expected / (t.name + ".raw"));
    EXPECT_EQ(t.nbytes, want.size()) << t.name;
    EXPECT_EQ(file_bytes(cat.shard_path(t.shard), t.offset, t.nbytes), want) << t.name;
  }
}

// Loads `ckpt` at `layout` (+ `extra` flags), dumps to `dump`, and checks the dump with the
// numpy reference run on the safetensors checkpoint `reference`.
void expect_rank_bit_exact(const fs::path& ckpt, const fs::path& reference, const std::string& layout,
                           const fs::path& dump, const std::string& extra = "") {
  const CommandResult load =
      run_wmap("load " + shell_quote(ckpt.string()) + layout + extra + " --dump " + shell_quote(dump.string()));
  ASSERT_EQ(load.exit_code, 0) << layout << extra << ": " << load.err;
  const CommandResult check = run_command(python() + " " + shell_quote(reference_py()) + " check " +
                                          shell_quote(reference.string()) + " " + shell_quote(dump.string()) + layout);
  EXPECT_EQ(check.exit_code, 0) << layout << extra << ":\n" << check.out << check.err;
  EXPECT_NE(check.out.find(" 0 mismatches"), std::string::npos) << layout << extra << ": " << check.out;
}

class TorchCheckpointTest : public ::testing::Test {
 protected:
  TempDir dir;
};

TEST_F(TorchCheckpointTest, SingleFileShardedAndPathCatalogueBitExact) {
  MAKE_OR_SKIP("basic " + shell_quote(dir.path().string()));
  const auto expected = dir / "expected";
  {
    ShardSet set = discover_shards(dir / "single");
    EXPECT_EQ(set.format, ShardFormat::kTorch);
    ASSERT_EQ(set.files, std::vector<std::string>{"pytorch_model.bin"});
    expect_catalog_matches(Catalog::build(set), expected, 9);
  }
  {
    ShardSet set = discover_shards(dir / "sharded");
    EXPECT_EQ(set.format, ShardFormat::kTorch);
    ASSERT_TRUE(set.index.has_value());
    EXPECT_EQ(set.files.size(), 2u);  // training_args.bin is not a shard
    const Catalog cat = Catalog::build(set);
    expect_catalog_matches(cat, expected, 9);
    // dtypes and shapes as PyTorch saved them.
    EXPECT_EQ(cat.require("bf16.weight").dtype, DType::kBF16);
    EXPECT_EQ(cat.require("f16.weight").dtype, DType::kF16);
    EXPECT_EQ(cat.require("i64.ids").dtype, DType::kI64);
    EXPECT_EQ(cat.require("f32.bias").dtype, DType::kF32);
    EXPECT_EQ(cat.require("f16.weight").shape, (std::vector<uint64_t>{3, 4, 2}));
    EXPECT_TRUE(cat.require("f32.scalar").shape.empty());
    // Tied weights: one storage, both records point at the same bytes.
    const auto& a = cat.require("model.embed_tokens.weight");
    const auto& b = cat.require("lm_head.weight");
    EXPECT_EQ(a.shard, b.shard);
    EXPECT_EQ(a.offset, b.offset);
  }
  {
    ShardSet set = discover_shards(dir / "model.pth");
    EXPECT_EQ(set.format, ShardFormat::kTorch);
    const Catalog cat = Catalog::build(set);
    expect_catalog_matches(cat, expected, 9);
    // Two slices of one storage: records inside the same zip entry, at their element offsets.
    const auto& sa = cat.require("slice.a");
    const auto& sb = cat.require("slice.b");
    EXPECT_EQ(sb.offset - sa.offset, (20u - 3u) * 4u);
  }
}

TEST_F(TorchCheckpointTest, SafetensorsWinAndBinFilesAreNamedInAWarning) {
  MAKE_OR_SKIP("basic " + shell_quote(dir.path().string()));
  ASSERT_EQ(run_wmap("synth llama " + shell_quote((dir / "mixed").string()) + " --shards 1").exit_code, 0);
  fs::copy_file(dir / "single/pytorch_model.bin", dir / "mixed/pytorch_model.bin");
  const ShardSet set = discover_shards(dir / "mixed");
  EXPECT_EQ(set.format, ShardFormat::kSafetensors);
  for (const auto& f : set.files) EXPECT_EQ(f.find(".bin"), std::string::npos) << f;
  bool warned = false;
  for (const auto& w : set.warnings) warned = warned || w.find("pytorch_model.bin") != std::string::npos;
  EXPECT_TRUE(warned);
  const CommandResult r = run_wmap("inspect " + shell_quote((dir / "mixed").string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("pytorch_model.bin: ignored"), std::string::npos) << r.err;
}

TEST_F(TorchCheckpointTest, InspectJsonGivesTheSameFieldsAsSafetensors) {
  MAKE_OR_SKIP("basic " + shell_quote(dir.path().string()));
  ASSERT_EQ(run_wmap("synth llama " + shell_quote((dir / "st").string())).exit_code, 0);
  auto fields = [](const std::string& json) {
    std::set<std::string> keys;
    simdjson::dom::parser parser;
    simdjson::padded_string padded(json);
    simdjson::dom::element root;
    if (parser.parse(padded).get(root)) {
      ADD_FAILURE() << "not JSON: " << json.substr(0, 200);
      return keys;
    }
    simdjson::dom::object top;
    simdjson::dom::array shards, tensors;
    if (root.get(top) || root["shards"].get(shards) || root["tensors"].get(tensors)) {
      ADD_FAILURE() << "no shards/tensors: " << json.substr(0, 200);
      return keys;
    }
    for (auto f : top) keys.insert("top." + std::string(f.key));
    for (simdjson::dom::element s : shards) {
      simdjson::dom::object o;
      if (!s.get(o))
        for (auto f : o) keys.insert("shard." + std::string(f.key));
    }
    for (simdjson::dom::element t : tensors) {
      simdjson::dom::object o;
      if (!t.get(o))
        for (auto f : o) keys.insert("tensor." + std::string(f.key));
    }
    return keys;
  };
  const CommandResult bin = run_wmap("inspect --json " + shell_quote((dir / "sharded").string()));
  ASSERT_EQ(bin.exit_code, 0) << bin.err;
  const CommandResult st = run_wmap("inspect --json " + shell_quote((dir / "st").string()));
  ASSERT_EQ(st.exit_code, 0) << st.err;
  EXPECT_EQ(fields(bin.out), fields(st.out));
  EXPECT_NE(bin.out.find("\"bf16.weight\""), std::string::npos);
}

TEST_F(TorchCheckpointTest, LlamaBinShardsLoadBitExactAtEveryRank) {
  const auto st = dir / "st";
  const auto bin = dir / "bin";
  ASSERT_EQ(run_wmap("synth llama " + shell_quote(st.string()) + " --shards 3").exit_code, 0);
  MAKE_OR_SKIP("convert " + shell_quote(st.string()) + " " + shell_quote(bin.string()));
  ASSERT_TRUE(fs::exists(bin / "pytorch_model.bin.index.json"));
  ASSERT_FALSE(fs::exists(bin / "model.safetensors.index.json"));
  for (uint32_t t : {1u, 2u, 4u}) {
    for (uint32_t r = 0; r < t; ++r) {
      const auto dump = dir / ("rank" + std::to_string(t) + "_" + std::to_string(r) + ".safetensors");
      const std::string layout = " --tp-size " + std::to_string(t) + " --tp-rank " + std::to_string(r);
      // Checked against the ORIGINAL safetensors checkpoint: the same expected parameters.
      expect_rank_bit_exact(bin, st, layout, dump);
    }
  }
  // plan works on the .bin checkpoint too.
  const CommandResult plan = run_wmap("plan " + shell_quote(bin.string()) + " --tp-size 2 --tp-rank 1");
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
}

// Non-contiguous views (a transpose, a column slice, a step, a permute, an expand with stride
// 0, a transpose at a storage offset) keep their strides in the catalog and are gathered into
// exactly the bytes PyTorch's .contiguous() gives.
TEST_F(TorchCheckpointTest, NonContiguousViewsAreGatheredBitExact) {
  const auto root = dir / "views";
  MAKE_OR_SKIP("views " + shell_quote(root.string()));
  const Catalog cat = Catalog::build(discover_shards(root));
  ASSERT_EQ(cat.size(), 8u);
  const std::string file = read_file(root / "pytorch_model.bin");
  for (const auto& t : cat.tensors()) {
    const std::string want = read_file(root / "expected" / (t.name + ".raw"));
    ASSERT_EQ(t.nbytes, want.size()) << t.name;
    ASSERT_LE(t.offset + t.span_bytes(), file.size()) << t.name;
    std::string got(t.nbytes, '\0');
    gather_tensor(t, reinterpret_cast<const std::byte*>(file.data() + t.offset),
                  reinterpret_cast<std::byte*>(got.data()));
    EXPECT_EQ(got, want) << t.name;
  }
  EXPECT_FALSE(cat.require("w").strided());
  EXPECT_EQ(cat.require("w.t").strides, (std::vector<uint64_t>{1, 10}));
  EXPECT_EQ(cat.require("w.t").offset, cat.require("w").offset);  // one storage
  EXPECT_EQ(cat.require("cols").strides, (std::vector<uint64_t>{8, 1}));
  EXPECT_EQ(cat.require("cols").span_bytes(), (7u * 8u + 3u + 1u) * 4u);
  EXPECT_EQ(cat.require("expand").strides, (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(cat.require("expand").span_bytes(), 3u * 4u);
  EXPECT_EQ(cat.require("perm").shape, (std::vector<uint64_t>{4, 2, 3}));

  // The saved catalog keeps the strides (and the content id covers them).
  const auto saved = dir / "views.catalog.json";
  cat.save_json_file(saved);
  const Catalog back = Catalog::load_json_file(saved);
  EXPECT_EQ(back.content_id(), cat.content_id());
  EXPECT_EQ(back.require("w.t").strides, cat.require("w.t").strides);
  std::string json = read_file(saved);
  EXPECT_NE(json.find("\"strides\":[1,10]"), std::string::npos);
  // Edited strides that would read past the file are refused on load.
  const auto at = json.find("\"strides\":[8,1]");
  ASSERT_NE(at, std::string::npos);
  json.replace(at, 16, "\"strides\":[9000000,1]");
  EXPECT_THROW(Catalog::parse_json(json, "edited.json"), Error);

  const CommandResult r = run_wmap("inspect --json " + shell_quote(root.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"strides\":[1,10]"), std::string::npos) << r.out.substr(0, 400);
  const CommandResult text = run_wmap("inspect " + shell_quote(root.string()));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("data.pkl"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("data.pkl 0 bytes"), std::string::npos) << text.out;
}

// A checkpoint whose every 2-D weight is a column-major (transposed) view loads bit-exact at
// every rank through both I/O paths: the gather feeds column and row splits and the fused QKV.
TEST_F(TorchCheckpointTest, LlamaWithStridedViewsLoadsBitExactAtEveryRank) {
  const auto st = dir / "st";
  const auto bin = dir / "bin";
  ASSERT_EQ(run_wmap("synth llama " + shell_quote(st.string()) + " --shards 2").exit_code, 0);
  MAKE_OR_SKIP("convert " + shell_quote(st.string()) + " " + shell_quote(bin.string()) + " --views");
  const Catalog cat = Catalog::build(discover_shards(bin));
  size_t strided = 0;
  for (const auto& t : cat.tensors()) strided += t.strided();
  EXPECT_GT(strided, 10u);
  for (uint32_t t : {1u, 2u, 4u}) {
    for (uint32_t r = 0; r < t; ++r) {
      const std::string io = (r % 2) ? "mmap" : "pread";
      const auto dump = dir / ("views" + std::to_string(t) + "_" + std::to_string(r) + ".safetensors");
      const std::string layout = " --tp-size " + std::to_string(t) + " --tp-rank " + std::to_string(r);
      expect_rank_bit_exact(bin, st, layout, dump, " --io " + io);
    }
  }
}

// Expert and tensor parallelism from .bin shards: a Qwen3-MoE checkpoint (some weights saved as
// transposed views) at uneven and expert-parallel layouts.
TEST_F(TorchCheckpointTest, MoeBinLoadsBitExactWithExpertParallelism) {
  const auto st = dir / "moe_st";
  const auto bin = dir / "moe_bin";
  ASSERT_EQ(run_wmap("synth qwen3_moe " + shell_quote(st.string()) + " --shards 2").exit_code, 0);
  MAKE_OR_SKIP("convert " + shell_quote(st.string()) + " " + shell_quote(bin.string()) + " --views");
  for (const auto& [t, p] : std::vector<std::pair<uint32_t, uint32_t>>{{1, 1}, {2, 2}, {4, 2}}) {
    for (uint32_t r = 0; r < t; ++r) {
      const auto dump =
          dir / ("moe" + std::to_string(t) + "_" + std::to_string(p) + "_" + std::to_string(r) + ".safetensors");
      const std::string layout =
          " --tp-size " + std::to_string(t) + " --tp-rank " + std::to_string(r) + " --ep-size " + std::to_string(p);
      expect_rank_bit_exact(bin, st, layout, dump);
    }
  }
}

// DeepSeek-V3 from column-major .bin views: most pieces are copied straight out of the file with
// the view's strides (only the rows or columns a rank needs are read); kv_b_proj, which the spec
// reshapes to [heads, nope + v, rank], is gathered whole first. Both paths, bit-exact.
TEST_F(TorchCheckpointTest, DeepseekStridedViewsCopiedDirectlyOrGatheredBitExact) {
  const auto st = dir / "ds_st";
  const auto bin = dir / "ds_bin";
  ASSERT_EQ(run_wmap("synth deepseek_v3 " + shell_quote(st.string()) + " --shards 2").exit_code, 0);
  MAKE_OR_SKIP("convert " + shell_quote(st.string()) + " " + shell_quote(bin.string()) + " --views");
  for (uint32_t t : {1u, 2u, 4u}) {
    for (uint32_t r = 0; r < t; r += (t == 4 ? 3 : 1)) {
      const auto dump = dir / ("ds" + std::to_string(t) + "_" + std::to_string(r) + ".safetensors");
      const std::string layout = " --tp-size " + std::to_string(t) + " --tp-rank " + std::to_string(r);
      expect_rank_bit_exact(bin, st, layout, dump);
    }
  }
  // A rank of a column-parallel split reads only its columns' span of a column-major weight.
  const CommandResult plan = run_wmap("plan " + shell_quote(bin.string()) + " --tp-size 4 --tp-rank 3 --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const CommandResult whole = run_wmap("plan " + shell_quote(bin.string()) + " --tp-size 1 --tp-rank 0 --json");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  auto bytes_to_read = [](const std::string& json) {
    const auto at = json.find("\"bytes_to_read\":");
    return at == std::string::npos ? 0ull : std::stoull(json.substr(at + 16));
  };
  EXPECT_GT(bytes_to_read(plan.out), 0ull) << plan.out.substr(0, 300);
  EXPECT_LT(bytes_to_read(plan.out) * 2, bytes_to_read(whole.out));
}

TEST_F(TorchCheckpointTest, MaliciousPicklesAreRefusedAndNothingRuns) {
  const auto mal = dir / "mal";
  MAKE_OR_SKIP("malicious " + shell_quote(mal.string()));
  // The global each pickle names (protocol 2 writes Python 2 names for some of them).
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"os_system", "system'"}, {"eval", "eval'"}, {"popen", "Popen'"}};
  for (const auto& [kind, global] : cases) {
    const auto file = mal / (kind + ".bin");
    const auto marker = mal / ("marker-" + kind);
    const CommandResult r = run_wmap("inspect " + shell_quote(file.string()));
    EXPECT_EQ(r.exit_code, 2) << kind << ": " << r.err;
    EXPECT_NE(r.err.find(file.string()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("global '"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(global), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("nothing was executed"), std::string::npos) << r.err;
    // The load path too: a Llama config beside the malicious pytorch_model.bin.
    const auto ckpt = dir / ("load-" + kind);
    ASSERT_EQ(run_wmap("synth llama " + shell_quote(ckpt.string()) + " --shards 1").exit_code, 0);
    for (const auto& e : fs::directory_iterator(ckpt)) {
      if (e.path().extension() == ".safetensors") fs::remove(e.path());
    }
    fs::remove(ckpt / "model.safetensors.index.json");
    fs::copy_file(file, ckpt / "pytorch_model.bin");
    const CommandResult l = run_wmap("load " + shell_quote(ckpt.string()) + " --tp-size 1 --tp-rank 0");
    EXPECT_EQ(l.exit_code, 2) << l.err;
    EXPECT_NE(l.err.find(global), std::string::npos) << l.err;
    EXPECT_THROW(Catalog::build(discover_shards(file)), Error);
    EXPECT_FALSE(fs::exists(marker)) << kind << ": the pickle's payload ran";
    // Control: the unrestricted torch.load does run it, so the file really is malicious.
    const CommandResult control =
        run_command(python() + " " + shell_quote(maker()) + " torchload " + shell_quote(file.string()));
    (void)control;
    EXPECT_TRUE(fs::exists(marker)) << kind << ": control load did not run the payload: " << control.err;
  }
}

TEST_F(TorchCheckpointTest, BadInputIsAClearErrorWithExitCode2) {
  const auto bad = dir / "bad";
  MAKE_OR_SKIP("bad " + shell_quote(bad.string()));
  struct Case {
    std::string file;
    int exit_code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"truncated.bin", 2, "truncated"},
      {"compressed.bin", 2, "zip entry 'good/data/0' is compressed"},
      {"short_storage.bin", 2, "runs past its storage"},
      {"list.bin", 2, "not a state dict"},
      {"not_tensors.bin", 2, "'step' is a int, not a tensor"},
      {"short_strided.bin", 2, "(strided, spanning 60) at element offset 0 runs past its storage"},
  };
  for (const auto& c : cases) {
    const auto file = bad / c.file;
    const CommandResult r = run_wmap("inspect " + shell_quote(file.string()));
    EXPECT_EQ(r.exit_code, c.exit_code) << c.file << ": " << r.err;
    EXPECT_NE(r.err.find(file.string()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  const Catalog good = Catalog::build(discover_shards(bad / "good.bin"));
  const auto& gw = good.require("w");
  const std::string want = file_bytes(bad / "good.bin", gw.offset, gw.nbytes);
  for (const std::string ok : {"good.bin", "rezipped.bin", "zip64.bin", "zip64cd.bin"}) {
    const CommandResult r = run_wmap("inspect " + shell_quote((bad / ok).string()));
    EXPECT_EQ(r.exit_code, 0) << ok << ": " << r.err;
    const Catalog cat = Catalog::build(discover_shards(bad / ok));
    const auto& w = cat.require("w");
    EXPECT_EQ(file_bytes(bad / ok, w.offset, w.nbytes), want) << ok;
  }
}

// Hand-written pickles: the interpreter's bounds, without torch.
std::vector<TorchTensorRef> parse(const std::string& pkl) {
  return parse_torch_pickle(std::as_bytes(std::span<const char>(pkl.data(), pkl.size())), "t.pkl");
}

TEST(TorchPickle, RefusesGlobalsAndOpcodesOutsideTheSubset) {
  try {
    parse(
        "\x80\x02"
        "cos\nsystem\n"
        "X\x02\x00\x00\x00"
        "ls"
        "\x85R."s);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMalformedInput);
    EXPECT_NE(std::string(e.what()).find("'os.system'"), std::string::npos) << e.what();
  }
  // STACK_GLOBAL is checked the same way.
  try {
    parse(
        "\x80\x04\x8c\x08"
        "builtins"
        "\x8c\x04"
        "eval"
        "\x93."s);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'builtins.eval'"), std::string::npos) << e.what();
  }
  // REDUCE of an allowed global that is not a callable (a storage type).
  EXPECT_THROW(parse("\x80\x02"
                     "ctorch\nFloatStorage\n)R."s),
               Error);
  // INST / OBJ / string-escaped opcodes are not in the subset.
  EXPECT_THROW(parse("\x80\x02(iposix\nsystem\n."), Error);
  EXPECT_THROW(parse("\x80\x02S'x'\n."), Error);
}

TEST(TorchPickle, BoundsAndShape) {
  EXPECT_THROW(parse(""), Error);
  EXPECT_THROW(parse("\x80\x02X\xff\xff\xff\x7f"
                     "abc"s),
               Error);                            // string longer than the input
  EXPECT_THROW(parse("\x80\x02h\x05."s), Error);  // memo key never stored
  EXPECT_THROW(parse("\x80\x02s."), Error);       // stack underflow
  EXPECT_THROW(parse("\x80\x02(."), Error);       // STOP inside MARK
  EXPECT_THROW(parse("\x80\x02)."s), Error);      // a tuple is not a state dict
  // A dict that contains itself (through the memo) must neither leak nor recurse.
  EXPECT_THROW(parse("\x80\x02}q\x00X\x01\x00\x00\x00"
                     "ah\x00s."s),
               Error);
  EXPECT_TRUE(parse("\x80\x02}.").empty());  // an empty state dict is fine
}

TEST(TorchPickle, Contiguity) {
  EXPECT_TRUE(torch_is_contiguous({2, 3}, {3, 1}));
  EXPECT_TRUE(torch_is_contiguous({}, {}));
  EXPECT_TRUE(torch_is_contiguous({1, 3}, {7, 1}));
  EXPECT_TRUE(torch_is_contiguous({0, 3}, {5, 9}));
  EXPECT_FALSE(torch_is_contiguous({3, 2}, {1, 3}));
  EXPECT_FALSE(torch_is_contiguous({4}, {2}));
}

}  // namespace
}  // namespace wmap::test
