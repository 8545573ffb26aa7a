// Round-trip property test: random tensors (every dtype, sub-byte ones where byte-aligned, zero
// dims, scalars) and random metadata written by write_safetensors, read back through the header
// parser, the Catalog and both I/O modes (mmap views and pread), byte-exact. Seeded.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "core_test_helpers.h"
#include "listing.h"
#include "test_util.h"
#include "wmap/catalog/catalog.h"
#include "wmap/io/file_io.h"
#include "wmap/format/safetensors_writer.h"
#include "wmap/util/sha256.h"
#include "wmap/catalog/shard_set.h"

namespace wmap::test {
namespace {

constexpr int kIterations = 200;
constexpr int kReferenceEvery = 20;  // also cross-check with the Python reader every N files

// Pieces of names and metadata: plain ASCII, JSON escapes, control bytes, multi-byte UTF-8.
const std::vector<std::string> kPieces = {"a",
                                          "b",
                                          "z",
                                          "0",
                                          "9",
                                          ".",
                                          "_",
                                          "-",
                                          "/",
                                          "layers",
                                          "weight",
                                          "\"",
                                          "\\",
                                          "\n",
                                          "\t",
                                          "\x01",
                                          "\x1f",
                                          " ",
                                          "\xc3\xa9",
                                          "\xe4\xb8\xad",
                                          "\xf0\x9f\x98\x80",
                                          "{",
                                          "}",
                                          ":",
                                          ","};

std::string random_text(std::mt19937_64& rng, int max_pieces) {
  std::string s;
  const int n = 1 + static_cast<int>(rng() % max_pieces);
  for (int i = 0; i < n; ++i) s += kPieces[rng() % kPieces.size()];
  return s;
}

struct Generated {
  std::vector<KnownTensor> tensors;
  std::vector<std::pair<std::string, std::string>> metadata;
};

Generated generate(std::mt19937_64& rng) {
  Generated g;
  std::set<std::string> names;
  const int count = static_cast<int>(rng() % 7);  // 0..6 tensors
  while (static_cast<int>(g.tensors.size()) < count) {
    std::string name = random_text(rng, 6);
    if (name == "__metadata__" || !names.insert(name).second) continue;
    const auto dtype = static_cast<DType>(rng() % kDTypeCount);
    std::vector<uint64_t> shape;
    uint64_t numel = 1;
    for (int attempt = 0;; ++attempt) {
      shape.clear();
      const int rank = static_cast<int>(rng() % 5);  // 0 (scalar) .. 4
      numel = 1;
      for (int d = 0; d < rank; ++d) {
        // Mostly small, sometimes zero.
        const uint64_t dim = (rng() % 8 == 0) ? 0 : 1 + rng() % 6;
        shape.push_back(dim);
        numel *= dim;
      }
      if (numel * dtype_bits(dtype) % 8 == 0) break;
      if (attempt > 50) {  // fall back to a shape every dtype can hold
        shape = {8};
        numel = 8;
        break;
      }
    }
    const uint64_t nbytes = numel * dtype_bits(dtype) / 8;
    std::string bytes(nbytes, '\0');
    for (auto& c : bytes) c = static_cast<char>(rng());
    g.tensors.push_back({name, dtype, shape, bytes});
  }
  std::set<std::string> keys;
  const int meta = static_cast<int>(rng() % 4);
  while (static_cast<int>(g.metadata.size()) < meta) {
    std::string k = random_text(rng, 4);
    if (!keys.insert(k).second) continue;
    g.metadata.emplace_back(k, rng() % 5 == 0 ? std::string() : random_text(rng, 8));
  }
  return g;
}

std::string as_string(std::span<const std::byte> s) {
  return std::string(reinterpret_cast<const char*>(s.data()), s.size());
}

TEST(RoundTripTest, RandomTensorsReadBackByteExact) {
  std::mt19937_64 rng(0x5eed'2024);
  TempDir dir;
  std::set<DType> dtypes_seen;
  size_t zero_sized = 0, scalars = 0, tensors = 0;
  for (int iter = 0; iter < kIterations; ++iter) {
    SCOPED_TRACE("iteration " + std::to_string(iter));
    const Generated g = generate(rng);
    const auto file = dir / ("rt" + std::to_string(iter) + ".safetensors");
    const uint64_t written = write_known(file, g.tensors, g.metadata);
    ASSERT_EQ(written, std::filesystem::file_size(file));

    // Header: padded to 8, metadata kept, tensors sorted by name.
    const SafetensorsHeader h = read_header_file(file);
    EXPECT_EQ(h.data_start() % 8, 0u);
    auto want_meta = g.metadata;
    std::sort(want_meta.begin(), want_meta.end());
    EXPECT_EQ(h.metadata, want_meta);
    ASSERT_EQ(h.tensors.size(), g.tensors.size());

    const Catalog cat = Catalog::build(discover_shards(file));
    ASSERT_EQ(cat.size(), g.tensors.size());
    EXPECT_EQ(cat.shards()[0].metadata, want_meta);
    auto mm = FileSystem::posix().open(file, IoMode::kMmap);
    auto pr = FileSystem::posix().open(file, IoMode::kPread);
    std::map<std::string, std::string> digests;
    for (const KnownTensor& t : g.tensors) {
      SCOPED_TRACE("tensor '" + t.name + "' " + std::string(dtype_name(t.dtype)));
      const TensorRecord* r = cat.find(t.name);
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(r->dtype, t.dtype);
      EXPECT_EQ(r->shape, t.shape);
      ASSERT_EQ(r->nbytes, t.bytes.size());
      EXPECT_GE(r->offset, h.data_start());
      digests[t.name] = sha256_hex(t.bytes);
      // mmap: a zero-copy view.
      const auto view = mm->view(r->offset, r->nbytes);
      EXPECT_EQ(as_string(view), t.bytes);
      // pread: into a buffer.
      std::string buf(r->nbytes, '\0');
      pr->read(r->offset, std::as_writable_bytes(std::span(buf.data(), buf.size())));
      EXPECT_EQ(buf, t.bytes);
      // A row range of the mapped tensor is the matching slice of the written bytes.
      if (!t.shape.empty() && t.shape[0] > 0 && r->nbytes > 0 && r->nbytes % t.shape[0] == 0) {
        const uint64_t rb = r->nbytes / t.shape[0];
        const uint64_t b = rng() % t.shape[0], e = b + rng() % (t.shape[0] - b + 1);
        const auto rows = mm->view(r->offset + b * rb, (e - b) * rb);
        EXPECT_EQ(as_string(rows), t.bytes.substr(b * rb, (e - b) * rb));
      }
      dtypes_seen.insert(t.dtype);
      zero_sized += r->nbytes == 0;
      scalars += t.shape.empty();
      ++tensors;
    }
    if (iter % kReferenceEvery == 0) {
      const CommandResult ref = run_reference({file.string()}, true);
      ASSERT_EQ(ref.exit_code, 0) << ref.err;
      const Listing l = parse_listing(ref.out);
      ASSERT_EQ(l.tensors.size(), cat.size());
      for (size_t i = 0; i < l.tensors.size(); ++i) {
        const TensorRecord& r = cat.tensors()[i];
        EXPECT_EQ(l.tensors[i].name, r.name);
        EXPECT_EQ(l.tensors[i].offset, r.offset);
        EXPECT_EQ(l.tensors[i].nbytes, r.nbytes);
        EXPECT_EQ(l.tensors[i].sha256, digests[r.name]);
      }
    }
  }
  // The generator really covered the space it claims to.
  EXPECT_EQ(dtypes_seen.size(), static_cast<size_t>(kDTypeCount));
  EXPECT_GT(zero_sized, 0u);
  EXPECT_GT(scalars, 0u);
  EXPECT_GT(tensors, 300u);
}

TEST(WriterTest, HeaderIsPaddedWithSpaces) {
  const std::string empty = make_safetensors_header({}, {});
  EXPECT_EQ(empty, "{}      ");
  const std::string h = make_safetensors_header({{"a", DType::kU8, {3}, 3, nullptr}}, {{"k", "v"}});
  EXPECT_EQ(h.size() % 8, 0u);
  EXPECT_EQ(h.rfind('}') + 1 + (h.size() - h.rfind('}') - 1), h.size());
  for (size_t i = h.rfind('}') + 1; i < h.size(); ++i) EXPECT_EQ(h[i], ' ');
}

TEST(WriterTest, TensorWithoutFillIsZeros) {
  TempDir dir;
  write_safetensors(dir / "z.safetensors", {{"a", DType::kF32, {2}, 8, nullptr}});
  const Catalog cat = Catalog::build(discover_shards(dir / "z.safetensors"));
  const auto& r = cat.require("a");
  EXPECT_EQ(read_file(dir / "z.safetensors").substr(r.offset), std::string(8, '\0'));
}

TEST(WriterTest, UnwritableFileNamesIt) {
  TempDir dir;
  EXPECT_WMAP_ERROR(write_safetensors(dir / "no/such/dir/x.safetensors", {}), ErrorCode::kNotFound, "x.safetensors");
}

}  // namespace
}  // namespace wmap::test
