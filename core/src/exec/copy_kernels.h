#pragma once
// The executor's copy kernels, private to core/src/exec: piece geometry, the strided copy, and
// the context structs of guarded copies (a SIGBUS inside one is left with siglongjmp, so they
// own nothing with a destructor). Pure functions over caller-owned memory; thread-safe.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

#include "wmap/format/strided_copy.h"
#include "wmap/plan/load_plan.h"
#include "wmap/util/error.h"

namespace wmap::exec_detail {

// --- copy geometry --------------------------------------------------------------------------
// Computed before a guarded copy so the copy itself owns nothing that needs a destructor (a
// SIGBUS inside it is left with siglongjmp).
constexpr size_t kMaxDims = 15;

struct CopyGeometry {
  size_t dims = 0;  // output dims walked (innermost run excluded)
  uint64_t extent[kMaxDims + 1];
  int64_t stride[kMaxDims + 1];       // source bytes between neighbours along a walked dim (< 0: reversed)
  uint64_t dst_stride[kMaxDims + 1];  // destination bytes likewise (wider than the cut when padded)
  uint64_t run = 0;                   // bytes copied by one memcpy
  uint64_t origin = 0;                // byte offset of the box origin from the tensor start
  uint64_t zero_bytes = 0;            // a padded piece: output bytes zeroed before the copy
};

// `outer`: a band of the box's outermost dim to copy instead of the whole box (a banded copy
// unit, ReadUnit::rows_begin/rows_end, in view coordinates).
// `pitch`: destination bytes between the output's outermost rows when they are not packed (a
// piece landing as a column block of a wider matrix: PlanRunner's direct column concatenation).
inline CopyGeometry copy_geometry(const PlannedPiece& p, std::optional<Range> outer = std::nullopt,
                                  uint64_t pitch = 0) {
  CopyGeometry g;
  const size_t n = p.view.size();
  if (n == 0) {
    g.run = p.elem_bytes;
    return g;
  }
  if (n > kMaxDims)
    throw Error(ErrorCode::kInternal, p.source + ": " + std::to_string(n) + "-d views are not supported");
  const std::vector<uint64_t> view_stride = p.source_strides();
  auto box = [&](size_t d) { return d == 0 && outer ? *outer : p.box[d]; };
  // A reversed dim starts at its box's last index and steps back (ReadSchedule never bands it).
  auto reversed = [&](size_t d) { return !p.reverse.empty() && p.reverse[d]; };
  for (size_t d = 0; d < n; ++d) {
    if (box(d).size() > 0) g.origin += (reversed(d) ? box(d).end - 1 : box(d).begin) * view_stride[d];
  }
  // Output dim k walks view dim perm[k].
  uint64_t extent[kMaxDims], dst_stride[kMaxDims];
  int64_t stride[kMaxDims];
  for (size_t k = 0; k < n; ++k) {
    extent[k] = box(p.perm[k]).size();
    const auto s = static_cast<int64_t>(view_stride[p.perm[k]]);
    stride[k] = reversed(p.perm[k]) ? -s : s;
  }
  // The destination is row-major over the padded extents (a band keeps the outer dim unpadded:
  // ReadSchedule bands only such pieces).
  auto padded = [&](size_t k) { return p.padded() && !(k == 0 && outer) ? p.pad[k] : extent[k]; };
  dst_stride[n - 1] = p.elem_bytes;
  for (size_t k = n - 1; k-- > 0;) dst_stride[k] = dst_stride[k + 1] * padded(k + 1);
  if (p.padded()) g.zero_bytes = dst_stride[0] * padded(0);
  if (pitch && n > 1) dst_stride[0] = pitch;  // never padded (PlanRunner::direct_concat)
  // Merge trailing output dims that are contiguous in both the source and the destination into
  // one memcpy run.
  uint64_t run = p.elem_bytes;
  size_t run_dims = 0;
  while (run_dims < n && stride[n - 1 - run_dims] == static_cast<int64_t>(run) && dst_stride[n - 1 - run_dims] == run) {
    run *= extent[n - 1 - run_dims];
    ++run_dims;
  }
  g.dims = n - run_dims;
  g.run = run;  // with run_dims == 0 (innermost dim strided: a transpose) one element at a time
  for (size_t k = 0; k < g.dims; ++k) {
    g.extent[k] = extent[k];
    g.stride[k] = stride[k];
    g.dst_stride[k] = dst_stride[k];
  }
  return g;
}

inline void copy_dims(const std::byte* src, const CopyGeometry& g, size_t k, std::byte* dst) {
  if (k + 2 == g.dims && g.run <= 64 && g.dst_stride[k + 1] == g.run && g.dst_stride[k] >= g.extent[k + 1] * g.run &&
      g.stride[k] > 0 && g.stride[k + 1] > 0) {
    // The last two walked dims of a transpose (short runs) into an unpadded block (its rows
    // possibly spread: a column block): a tiled copy, not one run at a time.
    copy_2d_strided(src, g.extent[k], g.extent[k + 1], static_cast<uint64_t>(g.stride[k]),
                    static_cast<uint64_t>(g.stride[k + 1]), g.run, dst, g.dst_stride[k]);
    return;
  }
  if (k == g.dims) {
    std::memcpy(dst, src, g.run);
    return;
  }
  for (uint64_t i = 0; i < g.extent[k]; ++i) {
    copy_dims(src + static_cast<int64_t>(i) * g.stride[k], g, k + 1, dst + i * g.dst_stride[k]);
  }
}

inline void run_copy(const std::byte* tensor, const CopyGeometry& g, std::byte* dst) {
  if (g.zero_bytes) std::memset(dst, 0, g.zero_bytes);  // the padding; the cut overwrites its corner
  copy_dims(tensor + g.origin, g, 0, dst);
}

// Segments whose gaps hold no whole page share one populate/readahead call.
template <class Fn>
void for_each_page_batch(std::span<const UnitSegment> s, uint64_t page, Fn&& fn) {
  const size_t n = s.size();
  for (size_t b = 0; b < n;) {
    size_t e = b + 1;
    uint64_t end = s[b].offset + s[b].len;
    while (e < n && s[e].offset / page <= (end - 1) / page + 1) {
      end = std::max(end, s[e].offset + s[e].len);
      ++e;
    }
    fn(s[b].offset, end - s[b].offset);
    b = e;
  }
}

struct CopySegmentsCtx {
  const UnitSegment* segs;
  size_t n;
  const std::byte* base;  // view of the file at absolute offset `base_offset`
  uint64_t base_offset;
  std::byte* const* dsts;  // per segment
};

inline void copy_segments(void* p) {
  auto* c = static_cast<CopySegmentsCtx*>(p);
  for (size_t i = 0; i < c->n; ++i)
    std::memcpy(c->dsts[i], c->base + (c->segs[i].offset - c->base_offset), c->segs[i].len);
}

struct CopyPieceCtx {
  const std::byte* tensor;
  const CopyGeometry* g;
  std::byte* dst;
  const TensorRecord* strided = nullptr;  // set: `tensor` is its span, gathered into `gathered` first
  std::byte* gathered = nullptr;
};

inline void copy_piece_guarded(void* p) {
  auto* c = static_cast<CopyPieceCtx*>(p);
  if (c->strided) {
    gather_tensor(*c->strided, c->tensor, c->gathered);
    run_copy(c->gathered, *c->g, c->dst);
  } else {
    run_copy(c->tensor, *c->g, c->dst);
  }
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

// Faults a destination in ahead of the copy (ExecOptions::prefault).
inline void prefault(std::span<std::byte> dst) {
  if (dst.empty()) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(dst.data()) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(dst.data()) + dst.size()) / page * page;
  if (end <= begin) return;
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0) return;
  for (uintptr_t a = begin; a < end; a += page) *reinterpret_cast<volatile std::byte*>(a) = std::byte{0};
}

}  // namespace wmap::exec_detail
