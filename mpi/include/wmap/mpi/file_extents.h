#pragma once
// The checkpoint bytes a rank's plan reads, as sorted, merged [begin, end) extents per shard:
// what a multi-rank load splits, exchanges and warms. Plain values; no MPI.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "wmap/plan/load_plan.h"

namespace wmap::mpi {

struct FileExtent {
  uint32_t shard = 0;
  uint64_t begin = 0, end = 0;  // absolute file bytes
  uint64_t size() const { return end - begin; }
  bool operator==(const FileExtent&) const = default;
};

// Sorts by (shard, begin) and merges overlapping or touching extents.
std::vector<FileExtent> merge_extents(std::vector<FileExtent> extents);
// Exactly the bytes execute_plan reads for `plan` (the runs of identity pieces, the spans of
// rearranged ones, the tensors compared by must_match), merged.
std::vector<FileExtent> needed_extents(const LoadPlan& plan);
uint64_t extent_bytes(const std::vector<FileExtent>& extents);

// Flat binary form for MPI collectives (3 little-endian uint64 per extent).
std::string encode_extents(const std::vector<FileExtent>& extents);
std::vector<FileExtent> decode_extents(const std::string& bytes);

// [begin, end) pieces of `extents` (sorted, merged) cut to at most `max_bytes` each and grouped
// into chunks: consecutive pieces of one shard whose file span stays within max_bytes. A chunk
// is the unit one rank reads and sends.
struct Chunk {
  uint32_t shard = 0;
  uint64_t begin = 0, end = 0;       // file span
  size_t piece_begin = 0, piece_end = 0;  // into the pieces vector
};
struct Chunking {
  std::vector<FileExtent> pieces;
  std::vector<Chunk> chunks;
};
Chunking chunk_extents(const std::vector<FileExtent>& extents, uint64_t max_bytes);

// Where each extent of a rank's (sorted, merged) list starts in a buffer that holds them back to
// back, and the part of that buffer overlapping a file span. Sweeps forward: call with spans in
// increasing (shard, begin) order.
class ExtentCursor {
 public:
  explicit ExtentCursor(const std::vector<FileExtent>& extents);
  uint64_t total() const { return offsets_.back(); }
  // Calls fn(file offset, buffer offset, length) for each overlap of the extents with the span.
  template <class Fn>
  uint64_t overlap(uint32_t shard, uint64_t begin, uint64_t end, Fn&& fn);

 private:
  const std::vector<FileExtent>& extents_;
  std::vector<uint64_t> offsets_;
  size_t at_ = 0;
};

template <class Fn>
uint64_t ExtentCursor::overlap(uint32_t shard, uint64_t begin, uint64_t end, Fn&& fn) {
  auto before = [&](const FileExtent& e) { return e.shard < shard || (e.shard == shard && e.end <= begin); };
  while (at_ < extents_.size() && before(extents_[at_])) ++at_;
  uint64_t n = 0;
  for (size_t i = at_; i < extents_.size() && extents_[i].shard == shard && extents_[i].begin < end; ++i) {
    const uint64_t b = std::max(begin, extents_[i].begin), e = std::min(end, extents_[i].end);
    if (b >= e) continue;
    fn(b, offsets_[i] + (b - extents_[i].begin), e - b);
    n += e - b;
  }
  return n;
}

}  // namespace wmap::mpi
