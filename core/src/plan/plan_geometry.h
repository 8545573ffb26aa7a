#pragma once
// A piece's geometry resolved against its source record: the view, box, permutation and zero
// padding in addressable units, and the file span it reads. Internal to the plan stage.

#include <string>

#include "wmap/plan/load_plan.h"

namespace wmap::plan_detail {

// F4, F6, F8: a dtype whose values need scales.
bool quantised_dtype(DType d);
// A piece's zero padding, in addressable units; returns an error text (empty when fine).
std::string resolve_pad(const Piece& p, unsigned bits, PlannedPiece& out);
// The view, box and permutation of `p` over a source of `dtype`; returns an error text.
std::string resolve_geometry(const Piece& p, DType dtype, PlannedPiece& out);
// The file span a resolved piece reads.
void resolve_span(PlannedPiece& p);

}  // namespace wmap::plan_detail
