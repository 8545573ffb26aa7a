#pragma once
// The checkpoint bytes a rank's plan reads, described per tensor piece rather than per run, and
// the contiguous ranges a multi-rank load reads from storage. Plain values; no MPI.
//   needs   FileExtent: `count` rows of `row_bytes`, `stride` apart (a row-parallel slice is one
//           extent, not one entry per row), so what ranks exchange scales with tensor pieces.
//   reads   FileRange: contiguous [begin, end) spans read once from storage (the union of the
//           ranks' needs), cut into chunks that one rank reads and sends.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "wmap/plan/load_plan.h"
#include "wmap/plan/piece_runs.h"

namespace wmap::mpi {

// Row i holds the file bytes [begin + i * stride, begin + i * stride + row_bytes) of `shard`.
// Normalised by make(): an empty extent has count 0; a contiguous one count 1 and
// stride == row_bytes (touching rows are one row).
struct FileExtent {
  uint32_t shard = 0;
  uint64_t begin = 0, row_bytes = 0, stride = 0, count = 0;

  static FileExtent make(uint32_t shard, uint64_t begin, uint64_t row_bytes, uint64_t stride, uint64_t count);
  static FileExtent span(uint32_t shard, uint64_t begin, uint64_t end) {
    return make(shard, begin, end - begin, end - begin, 1);
  }
  uint64_t end() const { return count == 0 ? begin : begin + (count - 1) * stride + row_bytes; }  // of the span
  uint64_t size() const { return row_bytes * count; }                                             // bytes held
  bool contiguous() const { return count <= 1; }
  bool operator==(const FileExtent&) const = default;
};

struct FileRange {
  uint32_t shard = 0;
  uint64_t begin = 0, end = 0;
  uint64_t size() const { return end - begin; }
  bool operator==(const FileRange&) const = default;
};

// One rank's list as its store holds it: sorted by (shard, begin), spans disjoint, duplicates
// dropped, continuations joined (touching spans; a strided extent followed by more rows of the
// same stride). Extents whose spans interleave become one: a strided extent when they share
// stride and count and their rows tile one row per period (a head's k and v rows), else the
// contiguous span (held whole; plans do not produce this, see the file_extents tests).
std::vector<FileExtent> merge_extents(std::vector<FileExtent> extents);
// Calls fn(shard, begin, len, first) for each contiguous range execute_plan reads for `plan`:
// the runs of identity pieces (for_each_run, in file order within a piece), the spans of
// rearranged ones, the tensors compared by must_match; `first` is true for the first range of
// each piece (or tensor). Ranges of different pieces may overlap.
template <class Fn>
void for_each_read(const LoadPlan& plan, Fn&& fn);
// Those bytes, exactly, as merged extents (consecutive runs of one length and step folded).
std::vector<FileExtent> needed_extents(const LoadPlan& plan);
uint64_t extent_bytes(const std::vector<FileExtent>& extents);

// Flat binary form for MPI collectives: kEncodedExtentBytes per extent (5 uint64 in the byte
// order every rank of one job shares).
constexpr size_t kEncodedExtentBytes = 40;
std::string encode_extents(const std::vector<FileExtent>& extents);
// Throws kInternal for a size that is not a whole number of extents.
std::vector<FileExtent> decode_extents(const std::string& bytes);

// What to read from storage so every rank of `needs` gets its bytes, each byte once: the union
// of the extents' spans, except that rows `gap` bytes or more apart are read row by row (nobody
// may need what lies between); ranges less than `gap` apart are joined (one read through a
// sub-page gap instead of two reads, as the executor's preadv does). Sorted, disjoint.
// Every rank computes the same ranges from the same lists, hence a constant, not the page size
// of each host.
constexpr uint64_t kReadGapBytes = 4096;
std::vector<FileRange> read_ranges(const std::vector<std::vector<FileExtent>>& needs, uint64_t gap = kReadGapBytes);
uint64_t range_bytes(const std::vector<FileRange>& ranges);

// `ranges` (sorted, disjoint) cut to at most `max_bytes` each and grouped into chunks:
// consecutive pieces of one shard whose file span stays within max_bytes. A chunk is the unit
// one rank reads and sends.
struct Chunk {
  uint32_t shard = 0;
  uint64_t begin = 0, end = 0;            // file span
  size_t piece_begin = 0, piece_end = 0;  // into the pieces vector
};
struct Chunking {
  std::vector<FileRange> pieces;
  std::vector<Chunk> chunks;
};
Chunking chunk_ranges(const std::vector<FileRange>& ranges, uint64_t max_bytes);

// A rank's store holds its (merged) extents' rows back to back in file order; this maps a file
// span to the part of the store it overlaps. Since the store is in file order, the rows a span
// overlaps are one contiguous part of it. Sweeps forward: call with spans in increasing
// (shard, begin) order.
class ExtentCursor {
 public:
  explicit ExtentCursor(const std::vector<FileExtent>& extents);
  uint64_t total() const { return offsets_.back(); }
  // Calls fn(file offset, store offset, length) for each row (part) of the extents inside the
  // span, in file order; returns the bytes.
  template <class Fn>
  uint64_t overlap(uint32_t shard, uint64_t begin, uint64_t end, Fn&& fn);

 private:
  const std::vector<FileExtent>& extents_;
  std::vector<uint64_t> offsets_;
  size_t at_ = 0;
};

template <class Fn>
void for_each_read(const LoadPlan& plan, Fn&& fn) {
  for (const PlannedParam& p : plan.params()) {
    if (p.absent || p.broken || !p.alias_of.empty()) continue;
    for (const PlannedPiece& piece : p.pieces) {
      if (!piece.reads_source()) continue;
      const uint32_t shard = piece.record->shard;
      const uint64_t base = piece.record->offset;
      if (reads_in_runs(piece)) {
        bool first = true;
        for_each_run(piece, [&](uint64_t off, uint64_t len) {
          fn(shard, base + off, len, first);
          first = false;
        });
      } else {
        fn(shard, piece.span_begin, piece.span_end - piece.span_begin, true);
      }
    }
    for (const auto& pair : p.must_match) {
      for (const TensorRecord* t : {pair.first, pair.second}) fn(t->shard, t->offset, t->span_bytes(), true);
    }
  }
}

template <class Fn>
uint64_t ExtentCursor::overlap(uint32_t shard, uint64_t begin, uint64_t end, Fn&& fn) {
  auto before = [&](const FileExtent& e) { return e.shard < shard || (e.shard == shard && e.end() <= begin); };
  while (at_ < extents_.size() && before(extents_[at_])) ++at_;
  uint64_t n = 0;
  for (size_t i = at_; i < extents_.size() && extents_[i].shard == shard && extents_[i].begin < end; ++i) {
    const FileExtent& x = extents_[i];
    for (uint64_t r = begin > x.begin ? (begin - x.begin) / x.stride : 0; r < x.count; ++r) {
      const uint64_t row = x.begin + r * x.stride;
      if (row >= end) break;
      const uint64_t b = std::max(begin, row), e = std::min(end, row + x.row_bytes);
      if (b >= e) continue;
      fn(b, offsets_[i] + r * x.row_bytes + (b - row), e - b);
      n += e - b;
    }
  }
  return n;
}

}  // namespace wmap::mpi
