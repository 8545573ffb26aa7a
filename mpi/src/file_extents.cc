#include "wmap/mpi/file_extents.h"

#include <algorithm>
#include <cstring>

#include "wmap/util/error.h"
#include "wmap/plan/piece_runs.h"

namespace wmap::mpi {

std::vector<FileExtent> merge_extents(std::vector<FileExtent> e) {
  std::sort(e.begin(), e.end(), [](const FileExtent& a, const FileExtent& b) {
    return a.shard != b.shard ? a.shard < b.shard : a.begin < b.begin;
  });
  std::vector<FileExtent> out;
  for (const FileExtent& x : e) {
    if (x.begin >= x.end) continue;
    if (!out.empty() && out.back().shard == x.shard && x.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, x.end);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

std::vector<FileExtent> needed_extents(const LoadPlan& plan) {
  std::vector<FileExtent> e;
  for (const PlannedParam& p : plan.params()) {
    if (p.absent || p.broken || !p.alias_of.empty()) continue;
    for (const PlannedPiece& piece : p.pieces) {
      if (!piece.record || piece.out_bytes == 0) continue;
      const TensorRecord& r = *piece.record;
      if (reads_in_runs(piece)) {
        for_each_run(piece, [&](uint64_t off, uint64_t len) { e.push_back({r.shard, r.offset + off, r.offset + off + len}); });
      } else {
        e.push_back({r.shard, piece.span_begin, piece.span_end});
      }
    }
    for (const auto& [a, b] : p.must_match) {
      e.push_back({a->shard, a->offset, a->offset + a->span_bytes()});
      e.push_back({b->shard, b->offset, b->offset + b->span_bytes()});
    }
  }
  return merge_extents(std::move(e));
}

uint64_t extent_bytes(const std::vector<FileExtent>& extents) {
  uint64_t n = 0;
  for (const FileExtent& x : extents) n += x.size();
  return n;
}

std::string encode_extents(const std::vector<FileExtent>& extents) {
  std::string out(extents.size() * 24, '\0');
  char* p = out.data();
  for (const FileExtent& x : extents) {
    const uint64_t v[3] = {x.shard, x.begin, x.end};
    std::memcpy(p, v, sizeof v);  // every rank of one job shares the byte order
    p += sizeof v;
  }
  return out;
}

std::vector<FileExtent> decode_extents(const std::string& bytes) {
  if (bytes.size() % 24 != 0) throw Error(ErrorCode::kInternal, "extent list of " + std::to_string(bytes.size()) + " bytes");
  std::vector<FileExtent> out(bytes.size() / 24);
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t v[3];
    std::memcpy(v, bytes.data() + i * 24, sizeof v);
    out[i] = {static_cast<uint32_t>(v[0]), v[1], v[2]};
  }
  return out;
}

Chunking chunk_extents(const std::vector<FileExtent>& extents, uint64_t max_bytes) {
  Chunking c;
  for (const FileExtent& x : extents) {
    for (uint64_t b = x.begin; b < x.end; b += max_bytes) c.pieces.push_back({x.shard, b, std::min(x.end, b + max_bytes)});
  }
  for (size_t i = 0; i < c.pieces.size();) {
    const FileExtent& first = c.pieces[i];
    size_t j = i + 1;
    while (j < c.pieces.size() && c.pieces[j].shard == first.shard && c.pieces[j].end - first.begin <= max_bytes) ++j;
    c.chunks.push_back({first.shard, first.begin, c.pieces[j - 1].end, i, j});
    i = j;
  }
  return c;
}

ExtentCursor::ExtentCursor(const std::vector<FileExtent>& extents) : extents_(extents), offsets_(extents.size() + 1, 0) {
  for (size_t i = 0; i < extents.size(); ++i) offsets_[i + 1] = offsets_[i] + extents[i].size();
}

}  // namespace wmap::mpi
