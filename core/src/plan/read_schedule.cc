#include "wmap/plan/read_schedule.h"

#include <algorithm>
#include <queue>

#include "wmap/plan/load_plan.h"
#include "wmap/plan/piece_runs.h"

namespace wmap {

std::string_view unit_kind_name(ReadUnit::Kind kind) {
  switch (kind) {
    case ReadUnit::Kind::kRead: return "read";
    case ReadUnit::Kind::kCopy: return "copy";
    case ReadUnit::Kind::kZero: return "zero";
  }
  return "?";
}

namespace {

// Segment k of a piece with `per_run` segments per run of `run` bytes: (offset in the run, length).
std::pair<uint64_t, uint64_t> part_of(uint64_t k, uint64_t per_run, uint64_t run, uint64_t chunk) {
  const uint64_t at = (k % per_run) * chunk;
  return {at, std::min(chunk, run - at)};
}

// Segment k of slice `sl`: its offset in its run, its length, and where it lands in its parameter.
// One arithmetic for what the executor writes (segments()) and what the plan certifies
// (slice_output()).
struct SegmentPart {
  uint64_t at, len, dst;
};
SegmentPart segment_part(const UnitSlice& sl, uint64_t k, uint64_t per_run, uint64_t run, uint64_t chunk) {
  const auto [at, len] = part_of(k, per_run, run, chunk);
  return {at, len, sl.dst_off + (k / per_run) * run + at};
}

// A copy piece can be cut into bands of rows of its outermost dim when that dim stays outermost
// in the output and is not padded (each band's output is then a contiguous, equal slice) and
// the source is row-major over the view (so a band's rows are neighbours in the file).
bool bandable(const PlannedPiece& piece) {
  return !piece.view.empty() && piece.perm.front() == 0 && !piece.record->strided() && piece.box.front().size() > 1 &&
         (piece.reverse.empty() || !piece.reverse.front()) &&
         (!piece.padded() || piece.pad.front() == piece.box.front().size());
}

// The copy units of a rearranged piece: one over its span, or bands of rows whose spans fit in
// `chunk` (one row at least).
void add_copy_units(const PlannedPiece& piece, uint32_t pi, uint32_t pj, uint64_t dst, uint64_t chunk, uint64_t max_gap,
                    std::vector<ReadUnit>& out) {
  const ReadUnit whole{.kind = ReadUnit::Kind::kCopy,
                       .shard = piece.record->shard,
                       .begin = piece.span_begin,
                       .end = piece.span_end,
                       .param = pi,
                       .piece = pj,
                       .dst_off = dst,
                       .wanted = piece.span_end - piece.span_begin};
  if (!bandable(piece)) {
    out.push_back(whole);
    return;
  }
  const std::vector<uint64_t> stride = piece.source_strides();
  const uint64_t rows = piece.box.front().size(), out_row = piece.out_bytes / rows;
  // Bytes between one outer row's last element and the next row's first: another rank's part
  // of a stacked tensor (its experts' other rows). Bands read through gaps up to max_gap (one
  // read beats two below it); past it every row is its own band, so a rank reads its own rows
  // only.
  const uint64_t row_span = (piece.span_end - piece.span_begin) - (rows - 1) * stride.front();
  const uint64_t gap = stride.front() > row_span ? stride.front() - row_span : 0;
  if (gap <= max_gap && piece.span_end - piece.span_begin <= chunk) {
    out.push_back(whole);
    return;
  }
  const uint64_t per_band = gap > max_gap ? 1 : std::max<uint64_t>(1, chunk / stride.front());
  for (uint64_t r0 = 0; r0 < rows; r0 += per_band) {
    const uint64_t r1 = std::min(rows, r0 + per_band);
    ReadUnit u = whole;
    // The band's first and last elements: the piece's, moved by whole rows of the outer dim.
    u.begin = piece.span_begin + r0 * stride.front();
    u.end = piece.span_end - (rows - r1) * stride.front();
    u.rows_begin = r0;
    u.rows_end = r1;
    u.dst_off = dst + r0 * out_row;
    u.wanted = u.end - u.begin;
    out.push_back(u);
  }
}

}  // namespace

ReadSchedule ReadSchedule::build(const std::vector<PlannedParam>& params, uint64_t chunk_bytes, uint64_t max_read_gap) {
  ReadSchedule s;
  // Whole 64-byte multiples: a run is cut at chunk boundaries, and a device that stages writes
  // per unit transforms each part on its own (an element must not straddle two parts).
  s.chunk_bytes_ = std::max(chunk_bytes, kMinChunkBytes) / 64 * 64;
  s.max_read_gap_ = max_read_gap;
  // One vector: zero units first (param order), then the read units, then the copy units, the
  // last two sorted by file position. Copies are noted as pieces and made after the reads, so
  // the schedule's units are written once (a plan's cold cost is the pages it first touches).
  struct CopyPiece {
    uint32_t param, piece;
    uint64_t dst;
  };
  std::vector<CopyPiece> copy_pieces;
  std::vector<ReadUnit>& units = s.units_;
  for (size_t i = 0; i < params.size(); ++i) {
    const PlannedParam& p = params[i];
    if (p.absent || p.broken || !p.alias_of.empty()) continue;
    const auto pi = static_cast<uint32_t>(i);
    uint64_t at = 0;
    for (size_t j = 0; j < p.pieces.size(); ++j) {
      const PlannedPiece& piece = p.pieces[j];
      const auto pj = static_cast<uint32_t>(j);
      if (!piece.reads_source()) {  // a zero piece, or a padded cut of nothing
        if (piece.out_bytes) units.push_back({.kind = ReadUnit::Kind::kZero, .param = pi, .piece = pj, .dst_off = at});
      } else if (piece.out_bytes > 0 && reads_in_runs(piece)) {
        s.slices_.push_back({pi, pj, at, 0, 0});  // grouped into units by group_runs()
      } else if (piece.out_bytes > 0) {
        copy_pieces.push_back({pi, pj, at});
      }
      at += piece.out_bytes;
    }
  }
  const size_t zeros = units.size();
  s.group_runs(params, units);
  for (const CopyPiece& c : copy_pieces) {
    add_copy_units(params[c.param].pieces[c.piece], c.param, c.piece, c.dst, s.chunk_bytes_, s.max_read_gap_, units);
  }
  std::stable_sort(
      units.begin() + static_cast<std::ptrdiff_t>(zeros), units.end(),
      [](const ReadUnit& a, const ReadUnit& b) { return a.shard != b.shard ? a.shard < b.shard : a.begin < b.begin; });
  s.assign_releases();
  return s;
}

// Turns the identity pieces collected in slices_ (one per piece) into read units over slices.
void ReadSchedule::group_runs(const std::vector<PlannedParam>& params, std::vector<ReadUnit>& reads) {
  const uint64_t chunk = chunk_bytes_, max_gap = max_read_gap_;
  auto piece_of = [&](const UnitSlice& sl) -> const PlannedPiece& { return params[sl.param].pieces[sl.piece]; };
  std::vector<UnitSlice> pieces = std::move(slices_);
  slices_.clear();
  std::stable_sort(pieces.begin(), pieces.end(), [&](const UnitSlice& a, const UnitSlice& b) {
    const TensorRecord &x = *piece_of(a).record, &y = *piece_of(b).record;
    return x.shard != y.shard ? x.shard < y.shard : x.offset < y.offset;
  });
  ReadUnit cur;
  bool open = false;
  auto close = [&] {
    if (!open) return;
    cur.slice_end = slices_.size();
    reads.push_back(cur);
    open = false;
  };
  // Adds segments [first, first + count) of piece `sl`, spanning file bytes [begin, end).
  auto add = [&](const UnitSlice& sl, uint32_t shard, uint64_t first, uint64_t count, uint64_t begin, uint64_t end,
                 uint64_t wanted) {
    // A gap wider than max_gap (another rank's part of a stacked or split tensor) ends the
    // unit: one more read is cheaper than reading through it.
    if (!open || shard != cur.shard || begin < cur.end || end - cur.begin > chunk || begin - cur.end > max_gap) {
      close();
      cur = {
          .kind = ReadUnit::Kind::kRead, .shard = shard, .begin = begin, .end = begin, .slice_begin = slices_.size()};
      open = true;
    }
    if (slices_.size() > cur.slice_begin && slices_.back().param == sl.param && slices_.back().piece == sl.piece &&
        slices_.back().first + slices_.back().count == first) {
      slices_.back().count += count;
    } else {
      slices_.push_back({sl.param, sl.piece, sl.dst_off, first, count});
    }
    cur.end = end;
    cur.segments += count;
    cur.wanted += wanted;
  };
  for (const UnitSlice& sl : pieces) {
    const PlannedPiece& piece = piece_of(sl);
    const TensorRecord& r = *piece.record;
    RunCursor runs(piece);
    const uint64_t run = runs.run_bytes(), per_run = (run + chunk - 1) / chunk, n = runs.count() * per_run;
    if (piece.span_end - piece.span_begin <= chunk && runs.widest_gap() <= max_gap) {  // whole, here or in a new unit
      add(sl, r.shard, 0, n, piece.span_begin, piece.span_end, piece.out_bytes);
      continue;
    }
    if (per_run > 1) {  // runs longer than a chunk: few, each cut into parts
      for (uint64_t k = 0; k < n; ++k) {
        if (k > 0 && k % per_run == 0) runs.next();
        const auto [at, len] = part_of(k, per_run, run, chunk);
        const uint64_t off = r.offset + runs.offset() + at;
        add(sl, r.shard, k, 1, off, off + len, len);
      }
      continue;
    }
    // Runs of at most a chunk: taken a sequence of evenly spaced runs at a time, as many per
    // step as the open unit can take (a row-parallel slice of a stacked tensor has ~10^5-10^6
    // runs; its units are what costs, not its runs).
    for (uint64_t k = 0; k < n;) {
      runs.seek(k);
      const auto [even, step] = runs.even_runs();
      const uint64_t first = r.offset + runs.offset();
      for (uint64_t i = 0; i < even;) {
        const uint64_t begin = first + i * step;
        uint64_t take = 1;
        // The unit open on this piece's previous run takes the next ones while they fit in it.
        if (i > 0 && step - run <= max_gap && open && cur.shard == r.shard && begin >= cur.end &&
            begin + run - cur.begin <= chunk) {
          take = std::min(even - i, (cur.begin + chunk - begin - run) / step + 1);
        }
        add(sl, r.shard, k + i, take, begin, begin + (take - 1) * step + run, take * run);
        i += take;
      }
      k += even;
    }
  }
  close();
}

void ReadSchedule::segments(const ReadUnit& u, const std::vector<PlannedParam>& params,
                            std::vector<UnitSegment>& out) const {
  out.clear();
  for (const UnitSlice& sl : slices(u)) {
    const PlannedPiece& piece = params[sl.param].pieces[sl.piece];
    const TensorRecord& r = *piece.record;
    RunCursor runs(piece);
    const uint64_t run = runs.run_bytes(), per_run = (run + chunk_bytes_ - 1) / chunk_bytes_;
    runs.seek(sl.first / per_run);
    for (uint64_t k = sl.first; k < sl.first + sl.count; ++k) {
      if (k > sl.first && k % per_run == 0) runs.next();
      const SegmentPart g = segment_part(sl, k, per_run, run, chunk_bytes_);
      out.push_back({r.offset + runs.offset() + g.at, g.len, g.dst, sl.param, r.shard});
    }
  }
}

ByteRange ReadSchedule::unit_output(const ReadUnit& u, const std::vector<PlannedParam>& params) const {
  const PlannedPiece& piece = params[u.param].pieces[u.piece];
  if (u.kind == ReadUnit::Kind::kCopy && u.rows_end > 0) {  // a band: rows of the outer dim (bandable())
    return {u.dst_off, u.dst_off + (u.rows_end - u.rows_begin) * (piece.out_bytes / piece.box.front().size())};
  }
  return {u.dst_off, u.dst_off + piece.out_bytes};
}

ByteRange ReadSchedule::slice_output(const UnitSlice& s, uint64_t run) const {
  if (s.count == 0 || run == 0) return {s.dst_off, s.dst_off};
  const uint64_t per_run = (run + chunk_bytes_ - 1) / chunk_bytes_;
  const SegmentPart last = segment_part(s, s.first + s.count - 1, per_run, run, chunk_bytes_);
  return {segment_part(s, s.first, per_run, run, chunk_bytes_).dst, last.dst + last.len};
}

void ReadSchedule::assign_releases() {
  // Spans by (shard, begin); a sweep gives each byte the largest unit index whose span covers it.
  std::vector<uint32_t> order;
  for (size_t i = 0; i < units_.size(); ++i) {
    if (units_[i].kind != ReadUnit::Kind::kZero && units_[i].end > units_[i].begin)
      order.push_back(static_cast<uint32_t>(i));
  }
  std::stable_sort(order.begin(), order.end(), [this](uint32_t a, uint32_t b) {
    const ReadUnit &x = units_[a], &y = units_[b];
    return x.shard != y.shard ? x.shard < y.shard : x.begin < y.begin;
  });
  struct Owned {
    uint32_t unit;
    ByteRange range;
  };
  std::vector<Owned> owned;
  using Active = std::pair<uint32_t, uint64_t>;  // (unit, span end); the largest unit on top
  for (size_t a = 0; a < order.size();) {
    size_t b = a;
    while (b < order.size() && units_[order[b]].shard == units_[order[a]].shard) ++b;
    std::priority_queue<Active> active;
    uint64_t pos = 0;
    size_t k = a;
    auto drop_ended = [&] {
      while (!active.empty() && active.top().second <= pos) active.pop();
    };
    while (true) {
      drop_ended();
      if (active.empty()) {
        if (k == b) break;
        pos = std::max(pos, units_[order[k]].begin);
      }
      for (; k < b && units_[order[k]].begin <= pos; ++k) active.push({order[k], units_[order[k]].end});
      drop_ended();
      if (active.empty()) continue;
      const uint32_t unit = active.top().first;
      const uint64_t next = k < b ? std::min(active.top().second, units_[order[k]].begin) : active.top().second;
      if (!owned.empty() && owned.back().unit == unit && owned.back().range.end == pos) {
        owned.back().range.end = next;
      } else {
        owned.push_back({unit, {pos, next}});
      }
      pos = next;
    }
    a = b;
  }
  // Grouped by unit, each unit's ranges in file order.
  std::vector<uint64_t> count(units_.size() + 1, 0);
  for (const Owned& o : owned) ++count[o.unit + 1];
  for (size_t i = 0; i < units_.size(); ++i) {
    count[i + 1] += count[i];
    units_[i].release_begin = count[i];
    units_[i].release_end = count[i + 1];
  }
  releases_.resize(owned.size());
  for (const Owned& o : owned) releases_[count[o.unit]++] = o.range;
}

std::vector<size_t> ReadSchedule::param_order(size_t count) const {
  std::vector<size_t> order;
  order.reserve(count);
  std::vector<bool> seen(count, false);
  auto see = [&](uint32_t p) {
    if (p < count && !seen[p]) seen[p] = true, order.push_back(p);
  };
  for (const ReadUnit& u : units_) {
    if (u.kind == ReadUnit::Kind::kCopy) see(u.param);
    if (u.kind == ReadUnit::Kind::kRead) {
      for (const UnitSlice& s : slices(u)) see(s.param);
    }
  }
  for (size_t i = 0; i < count; ++i) {
    if (!seen[i]) order.push_back(i);
  }
  return order;
}

}  // namespace wmap
