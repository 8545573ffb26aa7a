// The extent arithmetic of multi-rank loads (no MPI needed): strided extents and their merging,
// the ranges read from storage, chunking, the cursor that maps file spans to a rank's store, and
// the in-memory FileSystem a rank loads from.
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

#include "wmap/mpi/extent_store_fs.h"
#include "wmap/mpi/file_extents.h"
#include "wmap/util/error.h"

namespace wmap::mpi {
namespace {

FileExtent rows(uint32_t shard, uint64_t begin, uint64_t row, uint64_t stride, uint64_t count) {
  return FileExtent::make(shard, begin, row, stride, count);
}
FileExtent span(uint32_t shard, uint64_t begin, uint64_t end) { return FileExtent::span(shard, begin, end); }

TEST(FileExtents, MakeNormalisesContiguousAndEmptyExtents) {
  EXPECT_EQ(rows(0, 10, 4, 4, 3), span(0, 10, 22)) << "touching rows are one row";
  EXPECT_EQ(rows(0, 10, 4, 100, 1), span(0, 10, 14));
  EXPECT_EQ(rows(0, 10, 0, 8, 3).count, 0u);
  const FileExtent x = rows(1, 100, 4, 16, 3);
  EXPECT_EQ(x.end(), 100u + 2 * 16 + 4);
  EXPECT_EQ(x.size(), 12u);
  EXPECT_FALSE(x.contiguous());
}

TEST(FileExtents, MergeSortsAndJoinsTouchingExtents) {
  auto m =
      merge_extents({span(1, 10, 20), span(0, 5, 8), span(1, 20, 25), span(1, 30, 31), span(0, 6, 7), span(0, 9, 9)});
  std::vector<FileExtent> want{span(0, 5, 8), span(1, 10, 25), span(1, 30, 31)};
  EXPECT_EQ(m, want);
  EXPECT_EQ(extent_bytes(m), 3u + 15u + 1u);
}

TEST(FileExtents, MergeKeepsStridedRowsAndJoinsTheirContinuation) {
  // Two halves of one row-parallel slice (as two pieces, or two outer indexes of a 3-D box),
  // a duplicate (a tensor read by two parameters), and rows of the same step after them.
  auto m =
      merge_extents({rows(0, 1000, 4, 16, 5), rows(0, 1080, 4, 16, 5), rows(0, 1000, 4, 16, 5), span(0, 1160, 1164)});
  std::vector<FileExtent> want{rows(0, 1000, 4, 16, 11)};
  EXPECT_EQ(m, want);
  // Rows that never touch a neighbour's span stay apart, exactly.
  m = merge_extents({rows(0, 0, 4, 16, 2), rows(0, 100, 8, 32, 2), span(0, 50, 60)});
  want = {rows(0, 0, 4, 16, 2), span(0, 50, 60), rows(0, 100, 8, 32, 2)};
  EXPECT_EQ(m, want);
}

TEST(FileExtents, InterleavedExtentsOfOneRankBecomeOne) {
  // A head's k rows then its v rows, head after head: they tile one row per period.
  auto m = merge_extents({rows(0, 0, 6, 16, 4), rows(0, 6, 4, 16, 4)});
  std::vector<FileExtent> want{rows(0, 0, 10, 16, 4)};
  EXPECT_EQ(m, want);
  // Interleaved but not tiling (a gap between them within the period): the whole span is held.
  m = merge_extents({rows(0, 0, 4, 16, 4), rows(0, 8, 4, 16, 4)});
  want = {span(0, 0, 60)};
  EXPECT_EQ(m, want);
  // A contiguous extent inside a strided one's span: the span.
  m = merge_extents({rows(0, 0, 4, 16, 4), span(0, 4, 20)});
  want = {span(0, 0, 52)};
  EXPECT_EQ(m, want);
}

TEST(FileExtents, EncodingIsFortyBytesAnExtentAndRoundTrips) {
  const std::vector<FileExtent> m{span(0, 5, 8), rows(3, 1 << 20, 256, 2048, 7168),
                                  rows(162, uint64_t{5} << 32, 1, 3, 2)};
  const std::string bytes = encode_extents(m);
  EXPECT_EQ(bytes.size(), 3 * kEncodedExtentBytes);
  EXPECT_EQ(decode_extents(bytes), m);
  try {
    decode_extents(bytes.substr(1));
    FAIL() << "a cut list decoded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
  }
}

TEST(FileExtents, ReadRangesReadDenseSpansOnceAndSparseRowsAlone) {
  // Two ranks' complementary halves of each 16-byte row: one read over the tensor.
  auto r = read_ranges({{rows(0, 0, 8, 16, 100)}, {rows(0, 8, 8, 16, 100)}});
  std::vector<FileRange> want{{0, 0, 1600}};
  EXPECT_EQ(r, want);
  // One rank's rows with page-sized gaps nobody needs: row by row (joined with the neighbour
  // that starts within a page of one).
  r = read_ranges({{rows(0, 0, 100, 10000, 3)}, {span(0, 20200, 20300)}});
  want = {{0, 0, 100}, {0, 10000, 10100}, {0, 20000, 20300}};
  EXPECT_EQ(r, want);
  // Sub-page gaps between ranks' spans are read through; other shards stay apart.
  r = read_ranges({{span(0, 0, 10), span(1, 0, 10)}, {span(0, 100, 110), span(0, 9000, 9010)}});
  want = {{0, 0, 110}, {0, 9000, 9010}, {1, 0, 10}};
  EXPECT_EQ(r, want);
  EXPECT_EQ(range_bytes(r), 110u + 10u + 10u);
}

TEST(FileExtents, ChunksStayWithinOneShardAndTheirSize) {
  const auto c = chunk_ranges({{0, 0, 10}, {0, 12, 14}, {0, 30, 33}, {1, 0, 25}}, 10);
  ASSERT_EQ(c.chunks.size(), 6u);
  uint64_t bytes = 0;
  for (const Chunk& k : c.chunks) {
    EXPECT_LE(k.end - k.begin, 10u);
    for (size_t p = k.piece_begin; p < k.piece_end; ++p) {
      EXPECT_EQ(c.pieces[p].shard, k.shard);
      bytes += c.pieces[p].size();
    }
  }
  EXPECT_EQ(bytes, 10u + 2u + 3u + 25u);
  EXPECT_EQ(c.chunks[1].begin, 12u);  // [12,14) and [30,33) span 21 bytes: two chunks
  EXPECT_EQ(c.chunks[1].end, 14u);
}

using Overlaps = std::vector<std::tuple<uint64_t, uint64_t, uint64_t>>;  // file offset, store offset, length

TEST(FileExtents, CursorGivesContiguousStoreRanges) {
  const std::vector<FileExtent> mine{span(0, 0, 4), span(0, 8, 12), span(1, 0, 4)};
  ExtentCursor cur(mine);
  EXPECT_EQ(cur.total(), 12u);
  Overlaps got;
  auto take = [&](uint64_t f, uint64_t b, uint64_t n) { got.emplace_back(f, b, n); };
  EXPECT_EQ(cur.overlap(0, 2, 10, take), 4u);
  EXPECT_EQ(cur.overlap(0, 10, 100, take), 2u);
  EXPECT_EQ(cur.overlap(1, 1, 2, take), 1u);
  const Overlaps want{{2, 2, 2}, {8, 4, 2}, {10, 6, 2}, {1, 9, 1}};
  EXPECT_EQ(got, want);
}

TEST(FileExtents, CursorCutsStridedRowsAtChunkBoundaries) {
  // Rows [100,104) [116,120) [132,136) [148,152), then a contiguous extent.
  const std::vector<FileExtent> mine{rows(0, 100, 4, 16, 4), span(0, 200, 210)};
  ExtentCursor cur(mine);
  EXPECT_EQ(cur.total(), 26u);
  Overlaps got;
  auto take = [&](uint64_t f, uint64_t b, uint64_t n) { got.emplace_back(f, b, n); };
  EXPECT_EQ(cur.overlap(0, 0, 118, take), 6u);    // a chunk ending inside the second row
  EXPECT_EQ(cur.overlap(0, 118, 140, take), 6u);  // the rest of it and the third row
  EXPECT_EQ(cur.overlap(0, 140, 145, take), 0u);  // inside a gap
  EXPECT_EQ(cur.overlap(0, 145, 205, take), 9u);
  const Overlaps want{{100, 0, 4}, {116, 4, 2}, {118, 6, 2}, {132, 8, 4}, {148, 12, 4}, {200, 16, 5}};
  EXPECT_EQ(got, want);
  // What a chunk overlaps is one contiguous part of the store (one receive lands it).
  for (size_t i = 1; i < got.size(); ++i)
    EXPECT_EQ(std::get<1>(got[i]), std::get<1>(got[i - 1]) + std::get<2>(got[i - 1]));
}

TEST(ExtentStore, ServesReadsInsideOneRowAndNamesAnythingElse) {
  ShardRecord shard;
  shard.file = "model-00001-of-00001.safetensors";
  const Catalog catalog = Catalog::from_parts("/ckpt", {shard}, {});
  ExtentStoreFileSystem store(catalog, {rows(0, 100, 4, 16, 3), span(0, 200, 208)});
  ASSERT_EQ(store.size(), 20u);
  for (uint64_t i = 0; i < store.size(); ++i) store.data()[i] = static_cast<std::byte>(i);
  EXPECT_EQ(store.find(0, 116, 4), store.data() + 4);
  EXPECT_EQ(store.find(0, 134, 2), store.data() + 10);
  EXPECT_EQ(store.find(0, 201, 7), store.data() + 13);
  const auto file = store.open("/ckpt/model-00001-of-00001.safetensors", IoMode::kPread);
  std::byte got[3];
  file->read(133, got);
  EXPECT_EQ(std::to_integer<int>(got[0]), 9);
  EXPECT_EQ(std::to_integer<int>(got[2]), 11);
  const std::vector<std::pair<uint64_t, uint64_t>> outside{{102, 4}, {104, 1}, {99, 2}, {150, 1}, {205, 4}, {300, 1}};
  for (const auto& [offset, len] : outside) {
    try {
      store.find(0, offset, len);
      ADD_FAILURE() << "[" << offset << ", +" << len << ") served";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInternal);
      const std::string want = "model-00001-of-00001.safetensors: bytes [" + std::to_string(offset) + ", " +
                               std::to_string(offset + len) + ")";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace wmap::mpi
