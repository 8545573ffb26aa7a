#include "plan_geometry.h"

#include <algorithm>
#include <numeric>

#include "wmap/util/error.h"

namespace wmap {
namespace plan_detail {

// Dtypes whose values mean nothing without a scale: a parameter held in one is a quantised weight
// (or a scale of one, as NVFP4's F8_E4M3 block scales are).
bool quantised_dtype(DType d) {
  return d == DType::kF4 || d == DType::kF6_E2M3 || d == DType::kF6_E3M2 || d == DType::kF8_E5M2 ||
         d == DType::kF8_E4M3;
}

// A piece's zero padding, in addressable units: each output dim's extent at least the box's
// (padding only grows a piece), sub-byte last dims in whole bytes. An unpadded extent list is
// dropped so such a piece is scheduled like any other. Returns an error text.
std::string resolve_pad(const Piece& p, unsigned bits, PlannedPiece& out) {
  const size_t n = out.view.size();
  if (p.pad.size() != n)
    return "pad " + shape_text(p.pad) + " has " + std::to_string(p.pad.size()) + " extents for a view of rank " +
           std::to_string(n);
  out.pad = p.pad;
  if (bits < 8) {
    if ((out.pad.back() * bits) % 8) return "pad of a " + std::to_string(bits) + "-bit dtype must end on a whole byte";
    out.pad.back() = out.pad.back() * bits / 8;
  }
  bool grows = false;
  for (size_t k = 0; k < n; ++k) {
    const uint64_t have = out.box[out.perm[k]].size();
    if (out.pad[k] < have)
      return "pad " + shape_text(p.pad) + " is smaller than the cut along output dim " + std::to_string(k) + " (" +
             std::to_string(have) + ")";
    grows = grows || out.pad[k] > have;
  }
  const auto padded = checked_numel(out.pad);
  if (!padded || *padded > UINT64_MAX / out.elem_bytes) return "pad " + shape_text(p.pad) + " overflows 2^64 bytes";
  if (!grows) {
    out.pad.clear();
    return "";
  }
  out.out_bytes = *padded * out.elem_bytes;
  return "";
}

// Fills a PlannedPiece's geometry. Returns an error text for a spec that does not fit.
std::string resolve_geometry(const Piece& p, DType dtype, PlannedPiece& out) {
  out.view = p.view.empty() ? p.source_shape : p.view;
  const auto view_elements = checked_numel(out.view), source_elements = checked_numel(p.source_shape);
  if (!view_elements || !source_elements)
    return "view " + shape_text(out.view) + " or source shape " + shape_text(p.source_shape) +
           " has more than 2^64 elements";
  if (*view_elements != *source_elements) {
    return "view " + shape_text(out.view) + " does not have the elements of source shape " + shape_text(p.source_shape);
  }
  const size_t n = out.view.size();
  out.box = p.box;
  if (out.box.empty()) {
    for (auto d : out.view) out.box.push_back({0, d});
  }
  if (out.box.size() != n)
    return "box has " + std::to_string(out.box.size()) + " ranges for a view of rank " + std::to_string(n);
  for (size_t d = 0; d < n; ++d) {
    if (out.box[d].begin > out.box[d].end || out.box[d].end > out.view[d]) {
      return "box range [" + std::to_string(out.box[d].begin) + ", " + std::to_string(out.box[d].end) +
             ") exceeds dim " + std::to_string(d) + " of view " + shape_text(out.view);
    }
  }
  out.perm = p.perm;
  if (out.perm.empty()) {
    out.perm.resize(n);
    std::iota(out.perm.begin(), out.perm.end(), 0u);
  }
  std::vector<uint32_t> sorted = out.perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t d = 0; d < sorted.size(); ++d) {
    if (sorted.size() != n || sorted[d] != d) return "perm is not a permutation of the view's dims";
  }
  const unsigned bits = dtype_bits(dtype);
  if (bits >= 8) {
    out.elem_bytes = bits / 8;
  } else {
    // Sub-byte dtypes are addressed as bytes along the last dim, which must stay last and whole bytes.
    out.elem_bytes = 1;
    if (n == 0) return "a sub-byte scalar cannot be addressed";
    auto& last = out.view.back();
    auto& lb = out.box.back();
    if ((last * bits) % 8 || (lb.begin * bits) % 8 || (lb.end * bits) % 8 || out.perm.back() != n - 1) {
      return "slices of " + std::string(dtype_name(dtype)) + " must cover whole bytes of the last dim";
    }
    last = last * bits / 8;
    lb = {lb.begin * bits / 8, lb.end * bits / 8};
  }
  if (!p.reverse.empty()) {
    out.reverse.assign(n, false);
    for (const uint32_t d : p.reverse) {
      if (d >= n) return "reverse names dim " + std::to_string(d) + " of a view of rank " + std::to_string(n);
      if (bits < 8 && d == n - 1) return "the last dim of a sub-byte dtype cannot be reversed (its bytes pack pairs)";
      out.reverse[d] = true;
    }
  }
  uint64_t elems = 1;
  for (const auto& r : out.box) elems *= r.size();
  out.out_bytes = elems * out.elem_bytes;
  return p.pad.empty() ? "" : resolve_pad(p, bits, out);
}

// The absolute file bytes a piece touches: from its first to its last element.
void resolve_span(PlannedPiece& p) {
  if (p.box_bytes() == 0) {
    p.span_begin = p.span_end = p.record->offset;
    return;
  }
  if (p.gathers_source()) {
    p.span_begin = p.record->offset;
    p.span_end = p.record->offset + p.record->span_bytes();
    return;
  }
  const std::vector<uint64_t> stride = p.source_strides();
  uint64_t first = 0, last = 0;
  for (size_t d = 0; d < stride.size(); ++d) {
    first += p.box[d].begin * stride[d];
    last += (p.box[d].end - 1) * stride[d];
  }
  p.span_begin = p.record->offset + first;
  p.span_end = p.record->offset + last + p.elem_bytes;
}

}  // namespace plan_detail

std::vector<uint64_t> PlannedPiece::out_shape() const {
  if (!record) return {out_bytes};
  if (padded()) return pad;
  std::vector<uint64_t> s;
  for (const uint32_t d : perm) s.push_back(box[d].size());
  return s;
}

uint64_t PlannedPiece::box_bytes() const {
  if (!padded()) return out_bytes;
  uint64_t n = elem_bytes;
  for (const Range& r : box) n *= r.size();
  return n;
}

bool PlannedPiece::gathers_source() const { return record && record->strided() && view != record->shape; }

std::vector<uint64_t> PlannedPiece::source_strides() const {
  const size_t n = view.size();
  std::vector<uint64_t> stride(n, elem_bytes);
  if (record && record->strided() && !gathers_source()) {
    for (size_t d = 0; d < n; ++d) stride[d] = record->strides[d] * elem_bytes;
    return stride;
  }
  for (size_t d = n; d-- > 1;) stride[d - 1] = stride[d] * view[d];
  return stride;
}

}  // namespace wmap
