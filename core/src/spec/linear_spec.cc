// Spec builders for linears with FP8 block scales and for MoE experts, shared by the plugins.
#include "wmap/spec/linear_spec.h"

#include "wmap/spec/config_bounds.h"
#include "wmap/spec/quant_format.h"
#include "wmap/util/error.h"

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

LinearSlice linear_rows(std::string linear, std::vector<uint64_t> shape, const Split& s) {
  const Range r = s.slice(shape.at(0), linear + ".weight");
  return linear_rows(std::move(linear), std::move(shape), r);
}

LinearSlice linear_cols(std::string linear, std::vector<uint64_t> shape, const Split& s) {
  const Range c = s.slice(shape.at(1), linear + ".weight");
  return linear_cols(std::move(linear), std::move(shape), c);
}

LinearSlice fused_part_rows(std::string linear, std::vector<uint64_t> shape, Range part, Range rows) {
  const std::string weight = linear + ".weight";
  if (shape.size() != 2 || part.begin > part.end || part.end > shape[0]) {
    throw Error(ErrorCode::kInvalidArgument,
                weight + ": fused part rows [" + std::to_string(part.begin) + ", " + std::to_string(part.end) +
                    ") are not inside its " + (shape.empty() ? std::string("0") : std::to_string(shape[0])) + " rows");
  }
  if (rows.begin > rows.end || rows.end > part.size()) {
    throw Error(ErrorCode::kInvalidArgument, weight + ": rows [" + std::to_string(rows.begin) + ", " +
                                                 std::to_string(rows.end) + ") are not inside its fused part of " +
                                                 std::to_string(part.size()) + " rows");
  }
  return linear_rows(std::move(linear), std::move(shape), Range{part.begin + rows.begin, part.begin + rows.end});
}

LinearSlice fused_part_rows(std::string linear, std::vector<uint64_t> shape, Range part, const Split& s) {
  const Range r = s.slice(
      part.size(), linear + ".weight rows [" + std::to_string(part.begin) + ", " + std::to_string(part.end) + ")");
  return fused_part_rows(std::move(linear), std::move(shape), part, r);
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
  for (auto d : leading) lead = checked_mul(lead, d, name + ": leading dimensions");
  ParamSpec p;
  p.name = name;
  p.shape = leading;
  p.shape.push_back(lead ? total_rows / lead : 0);
  p.shape.push_back(cols);
  p.pieces = std::move(pieces);
  return p;
}

// whole_blocks (vLLM's fp8_utils.py, validate_fp8_block_shape): a split part must hold whole
// blocks, and so must every part of a merged (fused) linear but the last.
void require_whole_blocks(const LinearSlice& s, const BlockScales& b, bool last_part) {
  auto fail = [&](const char* what, Range r, uint64_t block) {
    throw Error(ErrorCode::kInvalidArgument,
                s.linear + ".weight: this rank's " + what + " [" + std::to_string(r.begin) + ", " +
                    std::to_string(r.end) + ") are not whole " + std::to_string(block) +
                    "-wide FP8 blocks (both engines refuse such a partition: vLLM's validate_fp8_block_shape; "
                    "TensorRT-LLM would load misaligned block scales)");
  };
  const bool rows_split = s.rows.size() != s.shape[0], cols_split = s.cols.size() != s.shape[1];
  if ((rows_split || !last_part) && s.rows.size() % b.rows != 0) fail("rows", s.rows, b.rows);
  if (cols_split && s.cols.size() % b.cols != 0) fail("columns", s.cols, b.cols);
}

}  // namespace

LinearQuant linear_quant(const ModelConfig& c, const Layout& l, const KeyProbe& probe, const std::string& linear,
                         LinearRole role, bool strict) {
  const QuantFormat format = QuantFormat::detect(c);
  if (format.kind == QuantFormat::Kind::kFp8) {
    const std::string scale = linear + ".weight_scale_inv";
    if (!c.has("quantization_config.weight_block_size")) {
      c.fail("quantization_config",
             "quant_method 'fp8' without weight_block_size is per-tensor FP8 (AutoFP8), not served yet; served: "
             "block FP8 (weight_block_size [128, 128]), compressed-tensors NVFP4, MXFP4 (gpt-oss)");
    }
    const auto block = c.get_int_list("quantization_config.weight_block_size");
    if (block.size() != 2 || block[0] <= 0 || block[1] <= 0) {
      c.fail("quantization_config.weight_block_size", "expected two positive integers");
    }
    const auto dtype = probe.dtype_of(scale);
    if (!dtype) return LinearQuant::none();  // an unquantised module (modules_to_not_convert)
    if (*dtype != DType::kF32 && *dtype != DType::kBF16 && *dtype != DType::kF16) {
      throw Error(ErrorCode::kInvalidArgument, scale + ": FP8 block scales stored as " +
                                                   std::string(dtype_name(*dtype)) +
                                                   "; expected F32, BF16 or F16 (both engines widen them to F32)");
    }
    const bool vllm = l.target == Target::kVllm;
    // TensorRT-LLM: FP8BlockScalesLinearMethod names it weight_scale, the fused MoE
    // w3_w1_weight_scaling_factor; vLLM's BlockQuantScaleParameter keeps weight_scale_inv.
    const char* name = vllm                          ? "weight_scale_inv"
                       : role == LinearRole::kExpert ? "weight_scaling_factor"
                                                     : "weight_scale";
    return LinearQuant::fp8(BlockScales{static_cast<uint64_t>(block[0]), static_cast<uint64_t>(block[1])}, name, true,
                            *dtype);
  }
  if (format.kind == QuantFormat::Kind::kCompressedTensors && probe.contains(linear + ".weight_scale")) {
    return LinearQuant::nvfp4(strict);
  }
  return LinearQuant::none();
}

void add_linear(std::vector<ParamSpec>& params, const std::string& dst, const std::string& sep,
                const std::vector<LinearSlice>& slices, const LinearQuant& quant,
                const std::vector<uint64_t>& leading) {
  using Kind = LinearQuant::Kind;
  const uint64_t cols = slices.empty() ? 0 : slices[0].cols.size();
  std::vector<Piece> weight;
  uint64_t rows = 0;
  for (const auto& s : slices) {
    weight.push_back(box_piece(s.linear + ".weight", s.shape, s.rows, s.cols));
    rows += s.rows.size();
  }
  params.push_back(concat_param(dst + sep + "weight", std::move(weight), rows, cols, leading));
  // The weight names its scale parameters (ParamSpec::scales): the plan refuses it without them.
  if (quant.kind == Kind::kFp8Block) params.back().scales = {dst + sep + quant.scale_name};
  if (quant.kind == Kind::kNvfp4) {
    params.back().scales = {dst + sep + "weight_scale", dst + sep + "weight_scale_2", dst + sep + "input_scale"};
  }

  if (quant.kind == Kind::kFp8Block) {
    std::vector<Piece> scale;
    uint64_t scale_rows = 0, scale_cols = 0;
    for (size_t i = 0; i < slices.size(); ++i) {
      const LinearSlice& s = slices[i];
      if (quant.whole_blocks) require_whole_blocks(s, quant.blocks, i + 1 == slices.size());
      const std::vector<uint64_t> sshape{ceil_div(s.shape[0], quant.blocks.rows),
                                         ceil_div(s.shape[1], quant.blocks.cols)};
      const Range br = block_range(s.rows, quant.blocks.rows), bc = block_range(s.cols, quant.blocks.cols);
      Piece p = box_piece(s.linear + ".weight_scale_inv", sshape, br, bc);
      p.source_dtype = DType::kF32;
      if (quant.scale_dtype == DType::kBF16) p = widened_bf16_to_f32(std::move(p));
      if (quant.scale_dtype == DType::kF16) p = widened_f16_to_f32(std::move(p));
      scale.push_back(std::move(p));
      scale_rows += br.size();
      scale_cols = bc.size();
    }
    ParamSpec p = concat_param(dst + sep + quant.scale_name, std::move(scale), scale_rows, scale_cols, leading);
    p.dtype = DType::kF32;
    params.push_back(std::move(p));
  } else if (quant.kind == Kind::kNvfp4) {
    // weight_scale: one F8 per 16 values = per 8 packed bytes; rows follow the weight's rows.
    std::vector<Piece> scale;
    uint64_t scale_rows = 0, scale_cols = 0;
    for (const auto& s : slices) {
      const std::vector<uint64_t> sshape{s.shape[0], s.shape[1] / 8};
      const Range bc = block_range(s.cols, 8);
      Piece p = box_piece(s.linear + ".weight_scale", sshape, s.rows, bc);
      p.source_dtype = DType::kF8_E4M3;
      scale.push_back(std::move(p));
      scale_rows += s.rows.size();
      scale_cols = bc.size();
    }
    ParamSpec p = concat_param(dst + sep + "weight_scale", std::move(scale), scale_rows, scale_cols, leading);
    p.dtype = DType::kF8_E4M3;
    params.push_back(std::move(p));
    // Global scales: one per group (the whole linear, or each expert), inverted on load; every
    // source of a group must carry the same one.
    uint64_t groups = 1;
    for (auto d : leading) groups = checked_mul(groups, d, dst + ": leading dimensions");
    const size_t per_group = groups ? slices.size() / groups : 0;
    for (const char* global : {"weight_scale_2", "input_scale"}) {
      ParamSpec g;
      g.name = dst + sep + global;
      g.shape = leading;
      g.shape.push_back(1);
      g.dtype = DType::kF32;
      for (size_t grp = 0; grp < groups; ++grp) {
        const auto& first = slices[grp * per_group];
        Piece piece = whole(first.linear + "." + global, {1});
        piece.source_dtype = DType::kF32;
        piece.transform = quant.strict_global ? "invert_scale_strict" : "invert_scale";
        g.pieces.push_back(std::move(piece));
        for (size_t k = 1; k < per_group; ++k) {
          g.must_match.emplace_back(first.linear + "." + global, slices[grp * per_group + k].linear + "." + global);
        }
      }
      params.push_back(std::move(g));
    }
  }
}

std::vector<ParamSpec> moe_experts(const std::string& dst, const std::string& src, uint64_t experts,
                                   uint64_t intermediate, uint64_t hidden, const Layout& l, const LinearQuant& quant,
                                   const ExpertNames& names) {
  const Range local = l.local_experts(experts);
  const uint64_t per = local.size();
  const Split moe = l.moe_tp();
  // down_proj is split along its stored columns (packed bytes for NVFP4).
  const uint64_t down_cols = quant.stored_cols(intermediate), h_cols = quant.stored_cols(hidden);
  std::vector<LinearSlice> fused, down;
  for (uint64_t j = local.begin; j < local.end; ++j) {
    const std::string e = src + "." + std::to_string(j) + ".";
    LinearSlice up = linear_rows(e + "up_proj", {intermediate, h_cols}, moe);
    LinearSlice gate = linear_rows(e + "gate_proj", {intermediate, h_cols}, moe);
    if (names.gate_first) std::swap(up, gate);
    fused.push_back(std::move(up));  // the first part: up (w3) for TensorRT-LLM, gate (w1) for vLLM
    fused.push_back(std::move(gate));
    down.push_back(linear_cols(e + "down_proj", {hidden, down_cols}, moe));
  }
  std::vector<ParamSpec> params;
  add_linear(params, dst + "." + names.fused, "_", fused, quant, {per});
  add_linear(params, dst + "." + names.down, "_", down, quant, {per});
  if (names.globals_close) {
    for (auto& p : params) p.must_match_close = !p.must_match.empty();
  }
  return params;
}

}  // namespace wmap::spec
