// Interop with files written by other implementations (tests/data/interop): the format's
// own unit-test vectors, real files that must be catalogued exactly as the independent Python
// reader sees them, and invalid files that must be refused cleanly.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "core_test_helpers.h"
#include "listing.h"
#include "test_util.h"
#include "wmap/catalog/catalog.h"
#include "wmap/util/sha256.h"
#include "wmap/catalog/shard_set.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;

fs::path interop_dir() { return testdata_dir() / "interop"; }

std::string unhex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  return out;
}

// --- format_vectors.json ---------------------------------------------------------------------------

struct Vector {
  std::string test, expected, bytes;
};

std::vector<Vector> load_vectors() {
  const std::string text = read_file(interop_dir() / "format_vectors.json");
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::element root = parser.parse(padded).value();
  std::vector<Vector> out;
  const simdjson::dom::array v_list = root["vectors"].get_array().value();
  for (simdjson::dom::object v : v_list) {
    Vector x;
    x.test = std::string(v["rust_test"].get_string().value());
    x.expected = std::string(v["expected"].get_string().value());
    const std::string_view hex = v["hex"].get_string().value();
    EXPECT_EQ(hex.size() % 2, 0u) << x.test;
    x.bytes = unhex(hex);
    EXPECT_EQ(x.bytes.size(), v["len"].get_uint64().value()) << x.test;
    out.push_back(std::move(x));
  }
  return out;
}

TEST(FormatVectors, FileStructure) {
  const std::string text = read_file(interop_dir() / "format_vectors.json");
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::element root;
  ASSERT_FALSE(parser.parse(padded).get(root));
  ASSERT_TRUE(root.is_object());
  std::string_view source;
  EXPECT_FALSE(root["source"].get(source));
  EXPECT_NE(source.find("safetensors"), std::string_view::npos);
  simdjson::dom::array vectors;
  ASSERT_FALSE(root["vectors"].get(vectors));
  EXPECT_EQ(vectors.size(), 18u);
  for (auto v : vectors) {
    ASSERT_TRUE(v.is_object());
    for (const char* key : {"rust_test", "expected", "len", "hex"}) EXPECT_FALSE(v[key].error()) << key;
  }
  const auto vs = load_vectors();
  EXPECT_EQ(std::count_if(vs.begin(), vs.end(), [](const Vector& v) { return v.expected == "OK"; }), 7);
}

// The reference reader's error kinds and ours. `InvalidHeader` is the Rust name for non-UTF-8.
const std::map<std::string, ErrorCode> kKinds = {
    {"HeaderTooSmall", ErrorCode::kHeaderTooSmall},
    {"HeaderTooLarge", ErrorCode::kHeaderTooLarge},
    {"InvalidHeaderLength", ErrorCode::kInvalidHeaderLength},
    {"InvalidHeader", ErrorCode::kInvalidHeaderUtf8},
    {"InvalidHeaderDeserialization", ErrorCode::kInvalidHeaderJson},
    {"TensorInvalidInfo", ErrorCode::kInvalidTensorInfo},
    {"MetadataIncompleteBuffer", ErrorCode::kDataSizeMismatch},
    {"ValidationOverflow", ErrorCode::kOverflow},
    {"InvalidOffset", ErrorCode::kInvalidOffset},
};

TEST(FormatVectors, OkLoadsAndEveryOtherIsRefusedWithItsKind) {
  TempDir dir;
  int i = 0;
  for (const Vector& v : load_vectors()) {
    SCOPED_TRACE(v.test + " (expected " + v.expected + ")");
    const auto file = dir / ("v" + std::to_string(i++) + ".safetensors");
    write_file(file, v.bytes);
    if (v.expected == "OK") {
      EXPECT_NO_THROW(read_header_file(file));
      EXPECT_NO_THROW(Catalog::build(discover_shards(file)));
      continue;
    }
    auto it = kKinds.find(v.expected);
    ASSERT_NE(it, kKinds.end()) << "unmapped kind " << v.expected;
    EXPECT_WMAP_ERROR(read_header_file(file), it->second, file.string());
  }
}

TEST(FormatVectors, OkVectorsContent) {
  // The vector from test_deserialization: one I32 [2,2] tensor "test" at data offset 0.
  TempDir dir;
  for (const Vector& v : load_vectors()) {
    if (v.test != "test_deserialization") continue;
    write_file(dir / "d.safetensors", v.bytes);
    const Catalog cat = Catalog::build(discover_shards(dir / "d.safetensors"));
    ASSERT_EQ(cat.size(), 1u);
    const auto& t = cat.require("test");
    EXPECT_EQ(t.dtype, DType::kI32);
    EXPECT_EQ(t.shape, (std::vector<uint64_t>{2, 2}));
    EXPECT_EQ(t.nbytes, 16u);
    EXPECT_EQ(t.offset + t.nbytes, v.bytes.size());
  }
}

// --- interop/valid: every file, individually, against the independent reader -------------------

std::vector<std::string> valid_files() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(interop_dir() / "valid", ec)) {
    if (e.is_regular_file() && e.path().extension() == ".safetensors") {
      out.push_back(fs::relative(e.path(), interop_dir() / "valid").string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = std::to_string(info.index) + "_";
  for (char c : info.param) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return s.substr(0, 60);
}

// Compares wmap's catalog (in-process and through `wmap inspect --json`) with the reference.
void expect_same_as_reference(const fs::path& path) {
  const CommandResult ref = run_reference({path.string()}, true);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const Listing want = parse_listing(ref.out);

  const CommandResult cli = run_wmap("inspect --json " + shell_quote(path.string()));
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  const Listing got = parse_listing(cli.out);
  EXPECT_EQ(got.shards, want.shards);
  ASSERT_EQ(got.tensors.size(), want.tensors.size());
  for (size_t i = 0; i < want.tensors.size(); ++i) {
    EXPECT_TRUE(got.tensors[i].same_layout(want.tensors[i]))
        << "wmap: " << describe(got.tensors[i]) << "\nref:  " << describe(want.tensors[i]);
  }

  // Every byte right: the data read through both I/O modes hashes as the reference's.
  const Catalog cat = Catalog::build(discover_shards(path));
  ASSERT_EQ(cat.size(), want.tensors.size());
  std::vector<std::unique_ptr<RandomAccessFile>> mm, pr;
  for (uint32_t s = 0; s < cat.shards().size(); ++s) {
    mm.push_back(FileSystem::posix().open(cat.shard_path(s), IoMode::kMmap));
    pr.push_back(FileSystem::posix().open(cat.shard_path(s), IoMode::kPread));
  }
  for (size_t i = 0; i < want.tensors.size(); ++i) {
    const TensorRecord& r = cat.tensors()[i];
    ASSERT_EQ(r.name, want.tensors[i].name);
    ASSERT_EQ(cat.shards()[r.shard].file, want.tensors[i].file);
    EXPECT_EQ(r.offset, want.tensors[i].offset) << r.name;
    const auto view = mm[r.shard]->view(r.offset, r.nbytes);
    EXPECT_EQ(sha256_hex(std::string_view(reinterpret_cast<const char*>(view.data()), view.size())),
              want.tensors[i].sha256)
        << r.name;
    std::string buf(r.nbytes, '\0');
    pr[r.shard]->read(r.offset, std::as_writable_bytes(std::span(buf.data(), buf.size())));
    EXPECT_EQ(sha256_hex(buf), want.tensors[i].sha256) << r.name;
  }
}

class ValidInterop : public ::testing::TestWithParam<std::string> {};

TEST_P(ValidInterop, CataloguedLikeTheReference) { expect_same_as_reference(interop_dir() / "valid" / GetParam()); }

INSTANTIATE_TEST_SUITE_P(Files, ValidInterop, ::testing::ValuesIn(valid_files()), param_name);

TEST(ValidInteropSet, TestDataIsPresent) {
  // Guards the parameterised suite against silently running over nothing.
  EXPECT_GE(valid_files().size(), 30u);
}

TEST(ValidInteropSet, ShardedDirectoryWithIndex) {
  const fs::path dir = interop_dir() / "valid" / "fluxml_sharded";
  const ShardSet set = discover_shards(dir);
  ASSERT_TRUE(set.index.has_value());
  EXPECT_EQ(set.files.size(), 6u);
  EXPECT_TRUE(std::is_sorted(set.files.begin(), set.files.end()));
  const Catalog cat = Catalog::build(set);
  EXPECT_EQ(cat.size(), set.index->weight_map.size());
  // The index's total_size is the sum of the data bytes.
  const std::string index = read_file(dir / "model.safetensors.index.json");
  simdjson::dom::parser parser;
  simdjson::padded_string padded(index);
  const uint64_t total = parser.parse(padded)["metadata"]["total_size"].get_uint64().value();
  EXPECT_EQ(cat.total_bytes(), total);
  expect_same_as_reference(dir);
}

TEST(ValidInteropSet, KnownValues) {
  // java_sample: I64 and F32 with known values; check them through a decoded read.
  const fs::path file = interop_dir() / "valid" / "misc" / "java_sample.safetensors";
  const Catalog cat = Catalog::build(discover_shards(file));
  std::set<DType> dtypes;
  for (const auto& t : cat.tensors()) dtypes.insert(t.dtype);
  EXPECT_TRUE(dtypes.count(DType::kI64));
  EXPECT_TRUE(dtypes.count(DType::kF32));
  // Values decoded by numpy in the reference must equal ours, element by element.
  const std::string script =
      "import numpy as np, json, struct, sys\n"
      "d = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', d[:8])[0]\n"
      "h = json.loads(d[8:8+n]); h.pop('__metadata__', None)\n"
      "m = {'I64': '<i8', 'F32': '<f4'}\n"
      "out = {k: np.frombuffer(d[8+n+v['data_offsets'][0]:8+n+v['data_offsets'][1]], m[v['dtype']]).tolist() for k, v "
      "in h.items()}\n"
      "print(json.dumps(out, sort_keys=True))\n";
  TempDir tmp;
  write_file(tmp / "decode.py", script);
  const CommandResult r = run_command(shell_quote(python()) + " " + shell_quote((tmp / "decode.py").string()) + " " +
                                      shell_quote(file.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::padded_string padded(r.out);
  simdjson::dom::object values = parser.parse(padded).get_object().value();
  auto f = FileSystem::posix().open(file, IoMode::kPread);
  for (const auto& t : cat.tensors()) {
    std::string buf(t.nbytes, '\0');
    f->read(t.offset, std::as_writable_bytes(std::span(buf.data(), buf.size())));
    simdjson::dom::array want = values[t.name].get_array().value();
    ASSERT_EQ(want.size(), t.numel()) << t.name;
    size_t i = 0;
    for (auto w : want) {
      if (t.dtype == DType::kI64) {
        int64_t v;
        std::memcpy(&v, buf.data() + 8 * i, 8);
        EXPECT_EQ(v, w.get_int64().value()) << t.name << "[" << i << "]";
      } else {
        float v;
        std::memcpy(&v, buf.data() + 4 * i, 4);
        EXPECT_EQ(static_cast<double>(v), w.get_double().value()) << t.name << "[" << i << "]";
      }
      ++i;
    }
  }
}

// --- interop/invalid ----------------------------------------------------------------------------

TEST(InvalidInterop, EveryFileRefusedWithOneLine) {
  size_t seen = 0;
  for (const auto& e : fs::directory_iterator(interop_dir() / "invalid")) {
    if (!e.is_regular_file()) continue;
    ++seen;
    SCOPED_TRACE(e.path().string());
    EXPECT_THROW(Catalog::build(discover_shards(e.path())), Error);
    const CommandResult r = run_wmap("inspect " + shell_quote(e.path().string()));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(e.path().filename().string()), std::string::npos) << r.err;
    const CommandResult j = run_wmap("inspect --json " + shell_quote(e.path().string()));
    EXPECT_EQ(j.exit_code, 2);
    EXPECT_EQ(std::count(j.err.begin(), j.err.end(), '\n'), 1) << j.err;
    // The reference refuses it as well.
    EXPECT_EQ(run_reference({e.path().string()}, false).exit_code, 2);
  }
  EXPECT_GE(seen, 1u);
}

TEST(InvalidInterop, HeaderLengthPastEnd) {
  const fs::path file = interop_dir() / "invalid" / "header_length_past_end.safetensors";
  EXPECT_WMAP_ERROR(read_header_file(file), ErrorCode::kInvalidHeaderLength, file.string(), "1000", "88 bytes");
}

}  // namespace
}  // namespace wmap::test
