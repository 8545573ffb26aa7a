// Spec builders for linears with FP8 block scales and for MoE experts, shared by the plugins.
#include "wmap/error.h"
#include "wmap/model_spec.h"

namespace wmap::spec {

LinearSlice whole_linear(std::string linear, std::vector<uint64_t> shape) {
  const Range rows{0, shape.at(0)}, cols{0, shape.at(1)};
  return {std::move(linear), std::move(shape), rows, cols};
}

LinearSlice linear_rows(std::string linear, std::vector<uint64_t> shape, Range rows) {
  LinearSlice s = whole_linear(std::move(linear), std::move(shape));
  s.rows = rows;
  return s;
}

LinearSlice linear_cols(std::string linear, std::vector<uint64_t> shape, Range cols) {
  LinearSlice s = whole_linear(std::move(linear), std::move(shape));
  s.cols = cols;
  return s;
}

Range block_range(Range r, uint64_t b) {
  if (r.end <= r.begin) return {r.begin / b, r.begin / b};
  return {r.begin / b, ceil_div(r.end, b)};
}

namespace {

Piece box_piece(const std::string& source, const std::vector<uint64_t>& shape, Range rows, Range cols) {
  Piece p = whole(source, shape);
  p.box = {rows, cols};
  return p;
}

ParamSpec concat_param(const std::string& name, std::vector<Piece> pieces, uint64_t total_rows, uint64_t cols,
                       const std::vector<uint64_t>& leading) {
  uint64_t lead = 1;
  for (auto d : leading) lead *= d;
  ParamSpec p;
  p.name = name;
  p.shape = leading;
  p.shape.push_back(lead ? total_rows / lead : 0);
  p.shape.push_back(cols);
  p.pieces = std::move(pieces);
  return p;
}

}  // namespace

void add_linear(std::vector<ParamSpec>& params, const std::string& weight_name, const std::string& scale_name,
                const std::vector<LinearSlice>& slices, const std::optional<BlockScales>& scales,
                const std::vector<uint64_t>& leading) {
  std::vector<Piece> weight, scale;
  uint64_t rows = 0, scale_rows = 0;
  const uint64_t cols = slices.empty() ? 0 : slices[0].cols.size();
  uint64_t scale_cols = 0;
  for (const auto& s : slices) {
    weight.push_back(box_piece(s.linear + ".weight", s.shape, s.rows, s.cols));
    rows += s.rows.size();
    if (scales) {
      const std::vector<uint64_t> sshape{ceil_div(s.shape[0], scales->rows), ceil_div(s.shape[1], scales->cols)};
      const Range br = block_range(s.rows, scales->rows), bc = block_range(s.cols, scales->cols);
      Piece p = box_piece(s.linear + ".weight_scale_inv", sshape, br, bc);
      p.source_dtype = DType::kF32;
      scale.push_back(std::move(p));
      scale_rows += br.size();
      scale_cols = bc.size();
    }
  }
  params.push_back(concat_param(weight_name, std::move(weight), rows, cols, leading));
  if (scales) {
    ParamSpec p = concat_param(scale_name, std::move(scale), scale_rows, scale_cols, leading);
    p.dtype = DType::kF32;
    params.push_back(std::move(p));
  }
}

std::vector<ParamSpec> moe_experts(const std::string& dst, const std::string& src, uint64_t experts, uint64_t intermediate,
                                   uint64_t hidden, const Layout& l, const std::optional<BlockScales>& scales) {
  if (experts % l.ep_size != 0) {
    throw Error(ErrorCode::kInvalidArgument, std::to_string(experts) + " experts cannot be split over ep_size " + std::to_string(l.ep_size));
  }
  const uint64_t per = experts / l.ep_size, first = l.moe_ep_rank() * per;
  const Range inter = shard_range(intermediate, l.moe_tp_size(), l.moe_tp_rank());
  std::vector<LinearSlice> w31, w2;
  for (uint64_t j = first; j < first + per; ++j) {
    const std::string e = src + "." + std::to_string(j) + ".";
    w31.push_back(linear_rows(e + "up_proj", {intermediate, hidden}, inter));
    w31.push_back(linear_rows(e + "gate_proj", {intermediate, hidden}, inter));
    w2.push_back(linear_cols(e + "down_proj", {hidden, intermediate}, inter));
  }
  std::vector<ParamSpec> params;
  add_linear(params, dst + ".w3_w1_weight", dst + ".w3_w1_weight_scale_inv", w31, scales, {per});
  add_linear(params, dst + ".w2_weight", dst + ".w2_weight_scale_inv", w2, scales, {per});
  return params;
}

}  // namespace wmap::spec
