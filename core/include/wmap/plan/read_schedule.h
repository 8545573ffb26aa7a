#pragma once
// The executor's program: what a load reads, in which units, in which order, and when each
// source range's pages may be dropped. Computed from a plan's parameters alone (no data read),
// so `wmap plan --json` shows exactly what a load will do and the plan id covers it.
//   - Identity pieces are read as their contiguous runs (for_each_run), cut at chunk_bytes.
//     Pieces are taken by (shard, source tensor offset), each reader of a shared tensor in turn,
//     and their segments share a read unit while its span fits in one chunk and no gap between
//     them exceeds max_read_gap (default 64 KiB: wider gaps are other ranks' rows, and a second
//     read beats reading them; narrower ones are read through, measured faster: bench/read_gap.c);
//     a piece whose span fits in one chunk, with no gap over max_read_gap, is never split across units. A unit lists
//     slices of its pieces' segments (not the segments: a row-parallel slice has thousands), segments() expands them.
//   - Pieces that must be rearranged (transposes) are copy units over their span, cut into bands
//     of rows of the view's outermost dim when that dim stays outermost in the output (perm[0] ==
//     0: a per-expert or per-head transpose), so a band's span fits in one chunk (or is one row):
//     its output is then a contiguous range of the parameter. Rows more than max_read_gap apart (a
//     rank's part of each expert of a stacked tensor) are banded one row each, so only they are read. A full transpose
//     of the outer dim, and a strided source gathered into row-major order, are one copy unit over the whole span. A
//     padded piece is a copy unit whose output includes its zeros (banded only when its outer dim is not padded). Zero
//     pieces, and padded pieces whose cut is empty, are zero units.
//   - Order: zero units first, then read and copy units by (shard, span begin).
//   - Releases: every byte any unit's span covers is released once, by the last unit in that
//     order whose span covers it (a source shared by several parameters: after its last reader).
// Immutable after build(); thread-safe to read.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct PlannedParam;

// One contiguous run of a read unit: `len` file bytes at absolute `offset` of `shard` land at
// byte `dst_off` of parameter `param` (an index into LoadPlan::params()).
struct UnitSegment {
  uint64_t offset = 0;
  uint64_t len = 0;
  uint64_t dst_off = 0;
  uint32_t param = 0;
  uint32_t shard = 0;
};

// Bytes [begin, end): absolute file bytes of the shard of the unit that releases them
// (releases()), or destination bytes of a parameter (unit_output(), slice_output()).
struct ByteRange {
  uint64_t begin = 0, end = 0;
};

// Segments [first, first + count) of one piece (segment k: run k / s, part k % s of the run
// cut at chunk_bytes, s = ceil(run / chunk_bytes)); `dst_off`: where the piece starts.
struct UnitSlice {
  uint32_t param = 0, piece = 0;
  uint64_t dst_off = 0;
  uint64_t first = 0, count = 0;
};

struct ReadUnit {
  enum class Kind : uint8_t { kRead, kCopy, kZero };
  Kind kind = Kind::kRead;
  uint32_t shard = 0;                           // kRead, kCopy
  uint64_t begin = 0, end = 0;                  // file span (kRead: first segment's start to last one's end)
  uint32_t param = 0, piece = 0;                // kCopy, kZero: the piece filled
  uint64_t dst_off = 0;                         // kCopy, kZero: where the unit's output starts in its parameter
  uint64_t rows_begin = 0, rows_end = 0;        // kCopy band: rows of the box's outer dim (rows_end 0: whole)
  uint64_t slice_begin = 0, slice_end = 0;      // kRead: ReadSchedule::slices()
  uint64_t segments = 0;                        // kRead: how many segments the slices hold
  uint64_t wanted = 0;                          // bytes the unit needs (its span minus gaps)
  uint64_t release_begin = 0, release_end = 0;  // ReadSchedule::releases()
};
std::string_view unit_kind_name(ReadUnit::Kind kind);

class ReadSchedule {
 public:
  static constexpr uint64_t kMinChunkBytes = uint64_t{1} << 16;
  static constexpr uint64_t kDefaultMaxReadGap = uint64_t{64} << 10;
  // Units for every parameter that is loaded: absent, broken and alias parameters read nothing.
  // chunk_bytes below kMinChunkBytes is raised to it, and rounded down to a multiple of 64.
  // max_read_gap: the widest run of unwanted bytes a unit reads through (wider: a new unit).
  static ReadSchedule build(const std::vector<PlannedParam>& params, uint64_t chunk_bytes,
                            uint64_t max_read_gap = kDefaultMaxReadGap);

  uint64_t chunk_bytes() const { return chunk_bytes_; }
  uint64_t max_read_gap() const { return max_read_gap_; }
  // In the order a load claims them.
  const std::vector<ReadUnit>& units() const { return units_; }
  std::span<const UnitSlice> slices(const ReadUnit& u) const {
    return {slices_.data() + u.slice_begin, static_cast<size_t>(u.slice_end - u.slice_begin)};
  }
  // A read unit's segments, in file order (sorted, not overlapping), into `out` (cleared);
  // `params` are the plan's, which the schedule was built from.
  void segments(const ReadUnit& u, const std::vector<PlannedParam>& params, std::vector<UnitSegment>& out) const;
  // The destination bytes of its parameter a copy or zero unit writes (the executor writes exactly
  // these): a zero unit's piece, a copy unit's band of rows or its whole piece.
  ByteRange unit_output(const ReadUnit& u, const std::vector<PlannedParam>& params) const;
  // The destination bytes a read unit's slice writes: the union of its segments, which abut
  // (segment k + 1 starts where k ends), from its first segment's start to its last one's end.
  // `run`: the piece's run bytes (RunCursor::run_bytes).
  ByteRange slice_output(const UnitSlice& s, uint64_t run) const;
  // The ranges whose last reader is `u`: released once `u` and every unit before it are consumed.
  std::span<const ByteRange> releases(const ReadUnit& u) const {
    return {releases_.data() + u.release_begin, static_cast<size_t>(u.release_end - u.release_begin)};
  }
  // Parameter indexes in the order their first byte is read (params with no read or copy
  // unit, e.g. zero-only or zero-size ones, follow in index order); `count` parameters.
  std::vector<size_t> param_order(size_t count) const;

 private:
  void group_runs(const std::vector<PlannedParam>& params, std::vector<ReadUnit>& reads);
  void assign_releases();
  uint64_t chunk_bytes_ = 0;
  uint64_t max_read_gap_ = kDefaultMaxReadGap;
  std::vector<ReadUnit> units_;
  std::vector<UnitSlice> slices_;
  std::vector<ByteRange> releases_;
};

}  // namespace wmap
WMAP_PUBLIC_END
