#include "wmap/mpi/file_extents.h"

#include <cstring>
#include <span>
#include <tuple>

#include "wmap/util/error.h"

namespace wmap::mpi {
namespace {

bool file_order(const FileExtent& a, const FileExtent& b) {
  return std::tie(a.shard, a.begin, a.row_bytes, a.stride, a.count) <
         std::tie(b.shard, b.begin, b.row_bytes, b.stride, b.count);
}

// Extents of one shard whose spans interleave (sorted, distinct, at least one), as one extent:
// strided when they share stride and count and their rows, seen within one period, tile
// [0, R) with R <= stride; otherwise their whole span.
FileExtent merge_interleaved(std::span<const FileExtent> group) {
  const FileExtent& first = group.front();
  uint64_t end = 0;
  for (const FileExtent& x : group) end = std::max(end, x.end());
  if (group.size() == 1) return first;
  uint64_t reach = 0;
  bool tiles = first.count > 1;
  for (const FileExtent& x : group) {
    const uint64_t at = x.begin - first.begin;  // sorted by begin: the first one is at 0
    if (!tiles || x.stride != first.stride || x.count != first.count || at > reach) {
      tiles = false;
      break;
    }
    reach = std::max(reach, at + x.row_bytes);
  }
  if (tiles && reach <= first.stride)
    return FileExtent::make(first.shard, first.begin, reach, first.stride, first.count);
  return FileExtent::span(first.shard, first.begin, end);
}

// Folds one piece's runs (in file order) into strided extents: a run of the current extent's
// length one step further extends it. Pieces are folded apart: an extent joining two pieces'
// runs could interleave with a third piece's and make merge_extents hold the span between.
class RunFolder {
 public:
  explicit RunFolder(std::vector<FileExtent>& out) : out_(out) {}
  ~RunFolder() { flush(); }
  void add(uint32_t shard, uint64_t begin, uint64_t len, bool first_of_piece) {
    if (!first_of_piece && cur_.count > 0 && len == cur_.row_bytes) {
      if (cur_.count == 1 && begin >= cur_.begin + len) {
        cur_.stride = begin - cur_.begin;
        cur_.count = 2;
        return;
      }
      if (cur_.count > 1 && begin == cur_.begin + cur_.count * cur_.stride) {
        ++cur_.count;
        return;
      }
    }
    flush();
    cur_ = {shard, begin, len, len, 1};
  }
  void flush() {
    if (cur_.count > 0)
      out_.push_back(FileExtent::make(cur_.shard, cur_.begin, cur_.row_bytes, cur_.stride, cur_.count));
    cur_ = {};
  }

 private:
  std::vector<FileExtent>& out_;
  FileExtent cur_;
};

}  // namespace

FileExtent FileExtent::make(uint32_t shard, uint64_t begin, uint64_t row_bytes, uint64_t stride, uint64_t count) {
  if (row_bytes == 0 || count == 0) return {shard, begin, 0, 0, 0};
  if (count == 1 || stride == row_bytes) return {shard, begin, row_bytes * count, row_bytes * count, 1};
  return {shard, begin, row_bytes, stride, count};
}

std::vector<FileExtent> merge_extents(std::vector<FileExtent> e) {
  std::erase_if(e, [](const FileExtent& x) { return x.count == 0; });
  std::sort(e.begin(), e.end(), file_order);
  e.erase(std::unique(e.begin(), e.end()), e.end());
  std::vector<FileExtent> out;
  for (size_t i = 0; i < e.size();) {
    uint64_t end = e[i].end();
    size_t j = i + 1;
    for (; j < e.size() && e[j].shard == e[i].shard && e[j].begin < end; ++j) end = std::max(end, e[j].end());
    const FileExtent x = merge_interleaved(std::span(e.data() + i, j - i));
    i = j;
    if (!out.empty() && out.back().shard == x.shard) {
      // Nothing lies between two neighbours, so joining them keeps the spans disjoint.
      FileExtent& a = out.back();
      if (a.contiguous() && x.contiguous() && a.end() == x.begin) {
        a = FileExtent::span(a.shard, a.begin, x.end());
        continue;
      }
      const uint64_t step = a.count > 1 ? a.stride : x.begin - a.begin;
      if (x.row_bytes == a.row_bytes && x.begin == a.begin + a.count * step && (x.count == 1 || x.stride == step)) {
        a = FileExtent::make(a.shard, a.begin, a.row_bytes, step, a.count + x.count);
        continue;
      }
    }
    out.push_back(x);
  }
  return out;
}

std::vector<FileExtent> needed_extents(const LoadPlan& plan) {
  std::vector<FileExtent> e;
  {
    RunFolder fold(e);
    for_each_read(
        plan, [&](uint32_t shard, uint64_t begin, uint64_t len, bool first) { fold.add(shard, begin, len, first); });
  }
  return merge_extents(std::move(e));
}

uint64_t extent_bytes(const std::vector<FileExtent>& extents) {
  uint64_t n = 0;
  for (const FileExtent& x : extents) n += x.size();
  return n;
}

std::string encode_extents(const std::vector<FileExtent>& extents) {
  std::string out(extents.size() * kEncodedExtentBytes, '\0');
  char* p = out.data();
  for (const FileExtent& x : extents) {
    const uint64_t v[5] = {x.shard, x.begin, x.row_bytes, x.stride, x.count};
    static_assert(sizeof v == kEncodedExtentBytes);
    std::memcpy(p, v, sizeof v);  // every rank of one job shares the byte order
    p += sizeof v;
  }
  return out;
}

std::vector<FileExtent> decode_extents(const std::string& bytes) {
  if (bytes.size() % kEncodedExtentBytes != 0) {
    throw Error(ErrorCode::kInternal, "extent list of " + std::to_string(bytes.size()) + " bytes (not a multiple of " +
                                          std::to_string(kEncodedExtentBytes) + ")");
  }
  std::vector<FileExtent> out(bytes.size() / kEncodedExtentBytes);
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t v[5];
    std::memcpy(v, bytes.data() + i * kEncodedExtentBytes, sizeof v);
    out[i] = {static_cast<uint32_t>(v[0]), v[1], v[2], v[3], v[4]};
  }
  return out;
}

std::vector<FileRange> read_ranges(const std::vector<std::vector<FileExtent>>& needs, uint64_t gap) {
  std::vector<const FileExtent*> all;
  for (const auto& list : needs) {
    for (const FileExtent& x : list) {
      if (x.count > 0) all.push_back(&x);
    }
  }
  std::sort(all.begin(), all.end(), [](const FileExtent* a, const FileExtent* b) { return file_order(*a, *b); });
  auto sparse = [gap](const FileExtent& x) { return x.count > 1 && x.stride - x.row_bytes >= gap; };
  auto join = [gap](std::vector<FileRange>& out, const FileRange& r) {
    if (!out.empty() && out.back().shard == r.shard && r.begin < out.back().end + gap) {
      out.back().end = std::max(out.back().end, r.end);
    } else {
      out.push_back(r);
    }
  };
  std::vector<FileRange> out, rows;
  // Groups of spans less than `gap` apart: one read each, unless a sparse extent is in it; then
  // its rows and the group's other spans are joined where they come within `gap`.
  for (size_t i = 0; i < all.size();) {
    const uint32_t shard = all[i]->shard;
    uint64_t end = all[i]->end();
    bool has_sparse = sparse(*all[i]);
    size_t j = i + 1;
    for (; j < all.size() && all[j]->shard == shard && all[j]->begin < end + gap; ++j) {
      end = std::max(end, all[j]->end());
      has_sparse = has_sparse || sparse(*all[j]);
    }
    if (!has_sparse) {
      join(out, {shard, all[i]->begin, end});
    } else {
      rows.clear();
      for (size_t k = i; k < j; ++k) {
        const FileExtent& x = *all[k];
        if (!sparse(x)) {
          rows.push_back({shard, x.begin, x.end()});
          continue;
        }
        for (uint64_t r = 0; r < x.count; ++r)
          rows.push_back({shard, x.begin + r * x.stride, x.begin + r * x.stride + x.row_bytes});
      }
      std::sort(rows.begin(), rows.end(), [](const FileRange& a, const FileRange& b) { return a.begin < b.begin; });
      for (const FileRange& r : rows) join(out, r);
    }
    i = j;
  }
  return out;
}

uint64_t range_bytes(const std::vector<FileRange>& ranges) {
  uint64_t n = 0;
  for (const FileRange& r : ranges) n += r.size();
  return n;
}

Chunking chunk_ranges(const std::vector<FileRange>& ranges, uint64_t max_bytes) {
  Chunking c;
  for (const FileRange& x : ranges) {
    for (uint64_t b = x.begin; b < x.end; b += max_bytes)
      c.pieces.push_back({x.shard, b, std::min(x.end, b + max_bytes)});
  }
  for (size_t i = 0; i < c.pieces.size();) {
    const FileRange& first = c.pieces[i];
    size_t j = i + 1;
    while (j < c.pieces.size() && c.pieces[j].shard == first.shard && c.pieces[j].end - first.begin <= max_bytes) ++j;
    c.chunks.push_back({first.shard, first.begin, c.pieces[j - 1].end, i, j});
    i = j;
  }
  return c;
}

ExtentCursor::ExtentCursor(const std::vector<FileExtent>& extents)
    : extents_(extents), offsets_(extents.size() + 1, 0) {
  for (size_t i = 0; i < extents.size(); ++i) offsets_[i + 1] = offsets_[i] + extents[i].size();
}

}  // namespace wmap::mpi
