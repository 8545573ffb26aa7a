// The extent arithmetic of multi-rank loads (no MPI needed): merging, chunking, the cursor that
// maps file spans to a rank's buffer, and the in-memory FileSystem a rank loads from.
#include <gtest/gtest.h>

#include "wmap/mpi/extent_store_fs.h"
#include "wmap/mpi/file_extents.h"

namespace wmap::mpi {
namespace {

TEST(FileExtents, MergeSortsAndJoinsTouchingExtents) {
  auto m = merge_extents({{1, 10, 20}, {0, 5, 8}, {1, 20, 25}, {1, 30, 31}, {0, 6, 7}, {0, 9, 9}});
  std::vector<FileExtent> want{{0, 5, 8}, {1, 10, 25}, {1, 30, 31}};
  EXPECT_EQ(m, want);
  EXPECT_EQ(extent_bytes(m), 3u + 15u + 1u);
  EXPECT_EQ(decode_extents(encode_extents(m)), m);
}

TEST(FileExtents, ChunksStayWithinOneShardAndTheirSize) {
  const auto c = chunk_extents({{0, 0, 10}, {0, 12, 14}, {0, 30, 33}, {1, 0, 25}}, 10);
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

TEST(FileExtents, CursorGivesContiguousBufferRanges) {
  const std::vector<FileExtent> mine{{0, 0, 4}, {0, 8, 12}, {1, 0, 4}};
  ExtentCursor cur(mine);
  EXPECT_EQ(cur.total(), 12u);
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> got;
  auto take = [&](uint64_t f, uint64_t b, uint64_t n) { got.emplace_back(f, b, n); };
  EXPECT_EQ(cur.overlap(0, 2, 10, take), 4u);
  EXPECT_EQ(cur.overlap(0, 10, 100, take), 2u);
  EXPECT_EQ(cur.overlap(1, 1, 2, take), 1u);
  const std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> want{{2, 2, 2}, {8, 4, 2}, {10, 6, 2}, {1, 9, 1}};
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace wmap::mpi
