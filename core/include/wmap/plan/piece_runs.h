#pragma once
// The contiguous source runs of a planned piece: what the executor reads for an identity-permuted
// piece, and what a multi-rank load must deliver to a rank (mpi/). One definition for both, so
// the bytes exchanged between ranks are exactly the bytes the executor asks for. Pure functions.

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "wmap/plan/load_plan.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

inline bool is_identity(const PlannedPiece& p) {
  if (p.perm.size() != p.view.size() || p.box.size() != p.view.size() || !p.reverse.empty()) return false;
  for (size_t k = 0; k < p.perm.size(); ++k) {
    if (p.perm[k] != k) return false;
  }
  return true;
}

// True when the executor reads a piece as its contiguous runs (for_each_run) straight into the
// destination; otherwise it reads [span_begin, span_end) whole and cuts the piece from it (a
// transpose, a padded piece, or a strided source that is gathered first).
// A padded piece is a copy (its output rows are not contiguous in the destination).
inline bool reads_in_runs(const PlannedPiece& p) {
  return p.record && !p.record->strided() && !p.padded() && is_identity(p);
}

// Calls fn(offset from the tensor start, length) for each contiguous source run of an
// identity-permuted piece's box, in source order (which is then also output order).
template <class Fn>
void for_each_run(const PlannedPiece& p, Fn&& fn) {
  const size_t n = p.view.size();
  if (n == 0) return fn(uint64_t{0}, p.elem_bytes);
  std::vector<uint64_t> s(n);
  s[n - 1] = p.elem_bytes;
  for (size_t d = n - 1; d-- > 0;) s[d] = s[d + 1] * p.view[d + 1];
  for (size_t d = 0; d < n; ++d) {
    if (p.box[d].size() == 0) return;
  }
  size_t d = n - 1;
  uint64_t run = p.box[d].size() * s[d];
  while (d > 0 && p.box[d].begin == 0 && p.box[d].size() == p.view[d]) {
    --d;
    run = p.box[d].size() * s[d];
  }
  // Odometer over the outer dims [0, d).
  std::vector<uint64_t> idx(d);
  for (size_t k = 0; k < d; ++k) idx[k] = p.box[k].begin;
  while (true) {
    uint64_t off = p.box[d].begin * s[d];
    for (size_t k = 0; k < d; ++k) off += idx[k] * s[k];
    fn(off, run);
    size_t k = d;
    while (k > 0) {
      --k;
      if (++idx[k] < p.box[k].end) break;
      idx[k] = p.box[k].begin;
      if (k == 0) return;
    }
    if (d == 0) return;
  }
}

}  // namespace wmap

namespace wmap {

// The bytes of each contiguous source run of an identity-permuted piece (for_each_run's `run`,
// RunCursor::run_bytes), without a cursor: the innermost box range, times the view dims after it,
// widened over inner dims the box covers whole. 0 when the box is empty along a dim.
inline uint64_t piece_run_bytes(const PlannedPiece& p) {
  const size_t n = p.view.size();
  if (n == 0) return p.elem_bytes;
  for (size_t d = 0; d < n; ++d) {
    if (p.box[d].size() == 0) return 0;
  }
  size_t d = n - 1;
  uint64_t stride = p.elem_bytes;  // of dim d: elem_bytes x the view dims after d
  while (d > 0 && p.box[d].begin == 0 && p.box[d].size() == p.view[d]) stride *= p.view[d--];
  return p.box[d].size() * stride;
}

// The runs of for_each_run() as a cursor, in the same order: seek to run k, then step. Lets a
// read unit name a slice of a piece's runs (first, count) instead of listing them.
class RunCursor {
 public:
  explicit RunCursor(const PlannedPiece& p) : p_(p) {
    const size_t n = p.view.size();
    if (n == 0) {
      run_ = p.elem_bytes;
      count_ = 1;
      return;
    }
    stride_.resize(n);
    stride_[n - 1] = p.elem_bytes;
    for (size_t d = n - 1; d-- > 0;) stride_[d] = stride_[d + 1] * p.view[d + 1];
    for (size_t d = 0; d < n; ++d) {
      if (p.box[d].size() == 0) return;  // no runs
    }
    d_ = n - 1;
    while (d_ > 0 && p.box[d_].begin == 0 && p.box[d_].size() == p.view[d_]) --d_;
    run_ = piece_run_bytes(p);
    count_ = 1;
    for (size_t k = 0; k < d_; ++k) count_ *= p.box[k].size();
    idx_.assign(d_, 0);
  }
  uint64_t run_bytes() const { return run_; }
  uint64_t count() const { return count_; }
  // Positions the cursor on run k (k < count()).
  void seek(uint64_t k) {
    for (size_t j = d_; j-- > 0;) {
      const uint64_t size = p_.box[j].size();
      idx_[j] = k % size;
      k /= size;
    }
  }
  // The current run's offset from the tensor start.
  uint64_t offset() const {
    if (stride_.empty()) return 0;
    uint64_t off = p_.box[d_].begin * stride_[d_];
    for (size_t k = 0; k < d_; ++k) off += (p_.box[k].begin + idx_[k]) * stride_[k];
    return off;
  }
  void next() {
    for (size_t k = d_; k-- > 0;) {
      if (++idx_[k] < p_.box[k].size()) return;
      idx_[k] = 0;
    }
  }
  // The widest gap between one run's end and the next one's start, over all the piece's runs
  // (0 with one run): a carry at outer dim j moves by its stride less the inner dims' extent.
  uint64_t widest_gap() const {
    uint64_t widest = 0, inner = 0;
    for (size_t j = d_; j-- > 0;) {
      if (p_.box[j].size() > 1) widest = std::max(widest, stride_[j] - inner - run_);
      inner += (p_.box[j].size() - 1) * stride_[j];
    }
    return widest;
  }
  // The runs from the current one on that are evenly spaced in the source: (how many, the
  // distance from one's start to the next's). Runs step along the innermost outer dim; where the
  // box covers that dim whole, the step into the next outer index is the same distance, so the
  // outer dims merge until one the box covers in part (a row-parallel slice of every expert of a
  // stacked tensor is one even sequence). Lets a walk take many runs per step.
  std::pair<uint64_t, uint64_t> even_runs() const {
    if (d_ == 0) return {1, 0};
    uint64_t left = 0, radix = 1;
    for (size_t j = d_; j-- > 0;) {
      left += (p_.box[j].size() - 1 - idx_[j]) * radix;
      radix *= p_.box[j].size();
      if (j == 0 || p_.box[j].begin != 0 || p_.box[j].size() != p_.view[j]) break;
    }
    return {left + 1, stride_[d_ - 1]};
  }

 private:
  const PlannedPiece& p_;
  std::vector<uint64_t> stride_, idx_;  // idx_: outer dims [0, d_), relative to the box
  size_t d_ = 0;
  uint64_t run_ = 0, count_ = 0;
};

}  // namespace wmap
WMAP_PUBLIC_END
