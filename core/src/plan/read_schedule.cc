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

ReadSchedule ReadSchedule::build(const std::vector<PlannedParam>& params, uint64_t chunk_bytes) {
  ReadSchedule s;
  const uint64_t chunk = std::max(chunk_bytes, kMinChunkBytes);
  s.chunk_bytes_ = chunk;
  std::vector<UnitSegment>& segs = s.segments_;
  std::vector<ReadUnit> copies;
  for (size_t i = 0; i < params.size(); ++i) {
    const PlannedParam& p = params[i];
    if (p.absent || p.broken || !p.alias_of.empty()) continue;
    const auto pi = static_cast<uint32_t>(i);
    uint64_t at = 0;
    for (size_t j = 0; j < p.pieces.size(); ++j) {
      const PlannedPiece& piece = p.pieces[j];
      const auto pj = static_cast<uint32_t>(j);
      if (!piece.record) {
        if (piece.out_bytes) s.units_.push_back({.kind = ReadUnit::Kind::kZero, .param = pi, .piece = pj, .dst_off = at});
      } else if (piece.out_bytes > 0 && reads_in_runs(piece)) {
        const TensorRecord& r = *piece.record;
        uint64_t dst = at;
        for_each_run(piece, [&](uint64_t off, uint64_t len) {
          for (uint64_t done = 0; done < len;) {
            const uint64_t n = std::min(chunk, len - done);
            segs.push_back({r.offset + off + done, n, dst, pi, r.shard});
            done += n;
            dst += n;
          }
        });
      } else if (piece.out_bytes > 0) {
        copies.push_back({.kind = ReadUnit::Kind::kCopy, .shard = piece.record->shard, .begin = piece.span_begin,
                          .end = piece.span_end, .param = pi, .piece = pj, .dst_off = at});
      }
      at += piece.out_bytes;
    }
  }
  std::stable_sort(segs.begin(), segs.end(), [](const UnitSegment& a, const UnitSegment& b) {
    return a.shard != b.shard ? a.shard < b.shard : a.offset < b.offset;
  });
  // Neighbouring tensors and the strided runs of a row-parallel slice share a unit while its
  // file span stays within one chunk (read_segments then batches them into few calls).
  std::vector<ReadUnit> reads;
  for (size_t b = 0; b < segs.size();) {
    size_t e = b + 1;
    while (e < segs.size() && segs[e].shard == segs[b].shard && segs[e].offset >= segs[e - 1].offset + segs[e - 1].len &&
           segs[e].offset + segs[e].len - segs[b].offset <= chunk) {
      ++e;
    }
    reads.push_back({.kind = ReadUnit::Kind::kRead, .shard = segs[b].shard, .begin = segs[b].offset,
                     .end = segs[e - 1].offset + segs[e - 1].len, .seg_begin = b, .seg_end = e});
    b = e;
  }
  reads.insert(reads.end(), copies.begin(), copies.end());
  std::stable_sort(reads.begin(), reads.end(),
                   [](const ReadUnit& a, const ReadUnit& b) { return a.shard != b.shard ? a.shard < b.shard : a.begin < b.begin; });
  s.units_.insert(s.units_.end(), reads.begin(), reads.end());
  s.assign_releases();
  return s;
}

void ReadSchedule::assign_releases() {
  // Spans by (shard, begin); a sweep gives each byte the largest unit index whose span covers it.
  std::vector<uint32_t> order;
  for (size_t i = 0; i < units_.size(); ++i) {
    if (units_[i].kind != ReadUnit::Kind::kZero && units_[i].end > units_[i].begin) order.push_back(static_cast<uint32_t>(i));
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
      for (const UnitSegment& s : segments(u)) see(s.param);
    }
  }
  for (size_t i = 0; i < count; ++i) {
    if (!seen[i]) order.push_back(i);
  }
  return order;
}

}  // namespace wmap
