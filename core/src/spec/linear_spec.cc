// Spec builders for linears with FP8 block scales and for MoE experts, shared by the plugins.
#include "wmap/spec/linear_spec.h"

#include "wmap/format/tensor_record.h"
#include "wmap/spec/config_bounds.h"
#include "wmap/spec/fp8_format.h"
#include "wmap/spec/int4_format.h"
#include "wmap/spec/nvfp4_format.h"
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

namespace {

void require_scale_dtype(const std::string& key, DType dtype, const char* what) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    throw Error(ErrorCode::kInvalidArgument, key + ": " + what + " stored as " + std::string(dtype_name(dtype)) +
                                                 "; expected F32, BF16 or F16 (both engines widen them to F32)");
  }
}

LinearQuant block_quant(const Fp8Format& f, const Layout& l, const KeyProbe& probe, const std::string& linear,
                        LinearRole role, bool whole_blocks) {
  const std::string scale = linear + ".weight_scale_inv";
  auto dtype = probe.dtype_of(scale);
  // No scale: an unquantised module (modules_to_not_convert) unless the weight is F8, whose
  // missing scale the plan then names (not "holds quantised values but declares no scales").
  if (!dtype && probe.dtype_of(linear + ".weight") != DType::kF8_E4M3) return LinearQuant::none();
  if (!dtype) dtype = DType::kF32;
  require_scale_dtype(scale, *dtype, "FP8 block scales");
  // TensorRT-LLM: FP8BlockScalesLinearMethod names it weight_scale, the fused MoE
  // w3_w1_weight_scaling_factor; vLLM's BlockQuantScaleParameter keeps weight_scale_inv.
  const char* name = l.target == Target::kVllm     ? "weight_scale_inv"
                     : role == LinearRole::kExpert ? "weight_scaling_factor"
                                                   : "weight_scale";
  return LinearQuant::fp8(BlockScales{f.block_rows, f.block_cols}, name, whole_blocks, *dtype);
}

// Per-tensor and per-channel FP8 (fp8.md sections 6 to 8).
LinearQuant scaled_quant(const ModelConfig& c, const Fp8Format& f, const Layout& l, const KeyProbe& probe,
                         const std::string& linear, LinearRole role) {
  const std::string scale = linear + ".weight_scale";
  auto dtype = probe.dtype_of(scale);
  if (f.lists_ignored()) {
    const bool ignored = f.ignores(linear);
    const char* list = f.source == Fp8Format::Source::kModelOpt ? "exclude_modules" : "ignore";
    if (ignored && dtype) {
      throw Error(ErrorCode::kInvalidArgument,
                  scale + ": the checkpoint quantises " + linear + ", but quantization_config." + list +
                      " leaves it unquantised: the engine would load its FP8 codes as plain values");
    }
    if (!ignored && !dtype) {
      throw Error(ErrorCode::kInvalidArgument, linear + ": quantization_config (" + f.name() +
                                                   ") quantises it (not in " + list + "), but the checkpoint has no " +
                                                   scale +
                                                   ": the engine's scale parameter would keep its "
                                                   "initial value");
    }
  }
  if (!dtype && probe.dtype_of(linear + ".weight") != DType::kF8_E4M3) return LinearQuant::none();
  // An F8 weight without its scale (AutoFP8 lists nothing): the plan names the missing scale.
  if (!dtype) dtype = DType::kF32;
  require_scale_dtype(scale, *dtype,
                      f.scheme == Fp8Format::Scheme::kTensor ? "FP8 per-tensor scale" : "FP8 per-channel scales");
  const bool trtllm = l.target == Target::kTrtllm;
  LinearQuant q;
  q.scale_name = "weight_scale";
  q.scale_dtype = *dtype;
  if (f.scheme == Fp8Format::Scheme::kChannel) {
    if (trtllm && role == LinearRole::kExpert) {
      c.fail("quantization_config", linear +
                                        ": TensorRT-LLM has no per-channel FP8 method for fused MoE experts "
                                        "(CutlassFusedMoE._get_quant_method raises 'Unsupported quantization "
                                        "mode'); use --target vllm");
    }
    q.kind = LinearQuant::Kind::kFp8Channel;
    q.flat_channel = trtllm;
    return q;
  }
  q.kind = LinearQuant::Kind::kFp8Tensor;
  q.scalar_shape = probe.shape_of(scale).value_or(
      f.source == Fp8Format::Source::kCompressedTensors ? std::vector<uint64_t>{1} : std::vector<uint64_t>{});
  uint64_t numel = 1;
  for (auto d : q.scalar_shape) numel *= d;
  if (numel != 1 || q.scalar_shape.size() > 1) {
    throw Error(ErrorCode::kInvalidArgument,
                scale + ": a per-tensor FP8 scale is one value ([] or [1]), not " + shape_text(q.scalar_shape));
  }
  if (q.scalar_shape.empty() && *dtype != DType::kF32) {
    throw Error(ErrorCode::kInvalidArgument, scale + ": a 0-d per-tensor scale stored as " +
                                                 std::string(dtype_name(*dtype)) + " is not served (F32)");
  }
  q.input_scale = f.static_input;
  if (q.input_scale) {
    const std::string in = linear + ".input_scale";
    const auto in_dtype = probe.dtype_of(in);
    if (in_dtype && *in_dtype != *dtype) {
      throw Error(ErrorCode::kInvalidArgument, in + ": stored as " + std::string(dtype_name(*in_dtype)) +
                                                   ", its weight_scale as " + std::string(dtype_name(*dtype)) +
                                                   "; expected one dtype for a linear's scales");
    }
  }
  q.requantise = trtllm;
  if (trtllm && role == LinearRole::kExpert && !q.input_scale) {
    c.fail("quantization_config", linear +
                                      ": per-tensor FP8 experts without static input scales are not served "
                                      "under TensorRT-LLM (FP8QDQFusedMoEMethod reads an input_scale per expert)");
  }
  return q;
}

// NVFP4 (int4-nvfp4.md section 6): the list and the checkpoint's scales must agree, as for FP8.
LinearQuant nvfp4_quant(const Nvfp4Format& f, const Layout& l, const KeyProbe& probe, const std::string& linear,
                        bool strict) {
  const std::string scale = linear + ".weight_scale";
  const bool has_scale = probe.contains(scale), ignored = f.ignores(linear);
  const char* list = f.source == Nvfp4Format::Source::kModelOpt ? "exclude_modules" : "ignore";
  if (ignored && has_scale) {
    throw Error(ErrorCode::kInvalidArgument,
                scale + ": the checkpoint quantises " + linear + ", but quantization_config." + list +
                    " leaves it unquantised: the engine would load its FP4 codes as plain values");
  }
  if (!has_scale) {
    if (!ignored && probe.dtype_of(linear + ".weight") == DType::kU8) {
      throw Error(ErrorCode::kInvalidArgument, linear + ": quantization_config (" + f.name() +
                                                   ") quantises it (not in " + list + "), but the checkpoint has no " +
                                                   scale);
    }
    return LinearQuant::none();
  }
  if (const auto dtype = probe.dtype_of(linear + ".weight"); dtype && *dtype != DType::kU8) {
    throw Error(ErrorCode::kInvalidArgument, linear + ".weight: stored as " + std::string(dtype_name(*dtype)) +
                                                 ", but quantization_config (" + f.name() +
                                                 ") packs NVFP4 weights as U8 (two FP4 codes a byte)");
  }
  using P = LinearQuant::Nvfp4Params;
  const P params = l.target == Target::kTrtllm                           ? P::kTrtllm
                   : f.source == Nvfp4Format::Source::kCompressedTensors ? P::kVllmCompressed
                                                                         : P::kVllmModelOpt;
  LinearQuant q = LinearQuant::nvfp4(params, f.inverted_globals(), strict);
  for (const char* global : {".weight_scale_2", ".input_scale"}) {
    const std::string key = linear + global;
    const auto dtype = probe.dtype_of(key);
    const auto shape =
        probe.shape_of(key).value_or(f.inverted_globals() ? std::vector<uint64_t>{1} : std::vector<uint64_t>{});
    uint64_t numel = 1;
    for (auto d : shape) numel *= d;
    if ((dtype && *dtype != DType::kF32) || numel != 1 || shape.size() > 1) {
      throw Error(ErrorCode::kInvalidArgument, key + ": an NVFP4 global scale is one F32 value ([] or [1]), not " +
                                                   std::string(dtype ? dtype_name(*dtype) : "F32") + shape_text(shape));
    }
    q.scalar_shape = shape;
  }
  return q;
}

// 4-bit integer W4A16 (int4-nvfp4.md sections 3 to 5): vLLM only, dense linears.
LinearQuant int4_quant(const ModelConfig& c, const Int4Format& f, const Layout& l, const KeyProbe& probe,
                       const std::string& linear) {
  f.refuse_for(c, l.target);
  const bool ct = f.source == Int4Format::Source::kCompressedTensors;
  // compressed-tensors' weight_packed reaches the plan as `weight` (mappings/rules/nvfp4.yaml).
  const std::string packed = linear + (ct ? ".weight" : ".qweight"),
                    scale = linear + (ct ? ".weight_scale" : ".scales");
  const auto dtype = probe.dtype_of(packed);
  const bool quantised = ct ? dtype == DType::kI32 : dtype.has_value();
  if (!quantised) {
    // AutoAWQ: vLLM derives the unquantised modules from the header when modules_to_not_convert
    // is null (AutoAWQConfig.maybe_update_config: a layer whose tensors are all float).
    if (f.ignores(linear) || f.source == Int4Format::Source::kAwq) return LinearQuant::none();
    throw Error(ErrorCode::kInvalidArgument,
                linear + ": quantization_config (" + f.name() + ") quantises it, but the checkpoint has no " + packed);
  }
  if (f.ignores(linear)) {
    throw Error(ErrorCode::kInvalidArgument,
                packed + ": the checkpoint quantises " + linear + ", but quantization_config leaves it unquantised");
  }
  if (dtype != DType::kI32) {
    throw Error(ErrorCode::kInvalidArgument, packed + ": stored as " + std::string(dtype_name(*dtype)) +
                                                 "; 4-bit weights are packed eight to an I32");
  }
  LinearQuant q;
  q.kind = LinearQuant::Kind::kInt4;
  q.int4_source = f.source == Int4Format::Source::kAwq    ? LinearQuant::Int4Source::kAwq
                  : f.source == Int4Format::Source::kGptq ? LinearQuant::Int4Source::kGptq
                                                          : LinearQuant::Int4Source::kCompressedTensors;
  q.group = f.group;
  q.symmetric = f.symmetric;
  q.act_order = f.act_order;
  q.scale_dtype = probe.dtype_of(scale).value_or(DType::kF16);
  // vLLM creates the scales (and compressed-tensors MoE's weight_shape) in the model dtype and
  // copy_ rounds the checkpoint's into it; a plan holds them as stored, so they must agree.
  const std::string model = c.get_string("torch_dtype", c.get_string("dtype", ""));
  const std::optional<DType> model_dtype = dtype_from_torch_name(model);
  if (model_dtype && *model_dtype != q.scale_dtype) {
    throw Error(ErrorCode::kInvalidArgument,
                scale + ": stored as " + std::string(dtype_name(q.scale_dtype)) +
                    ", but config.json's torch_dtype is " + model +
                    ": vLLM holds the scales in the model dtype and rounds them into it while loading, " +
                    "which wmap does not build; serve the checkpoint in its scales' dtype");
  }
  return q;
}

// A per-tensor scale (`key`, stored as `shape` [] or [1] in `dtype`) as one F32 value.
Piece scalar_scale(const std::string& key, const std::vector<uint64_t>& shape, DType dtype) {
  Piece p = whole(key, shape);
  p.view = {1};  // one value either way, so a BF16/F16 [1] scale widens like any cut
  p.source_dtype = DType::kF32;
  if (dtype == DType::kBF16) p = widened_bf16_to_f32(std::move(p));
  if (dtype == DType::kF16) p = widened_f16_to_f32(std::move(p));
  return p;
}

ParamSpec f32_param(std::string name, std::vector<uint64_t> shape, std::vector<Piece> pieces) {
  ParamSpec p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.dtype = DType::kF32;
  p.pieces = std::move(pieces);
  return p;
}

// F32 `name` [shape] = max over each group of `group` of the pieces (1/max when `invert`), times
// the max of the `tail` pieces after them (TensorRT-LLM's reduced FP8 scales, fp8.md section 7).
ParamSpec scale_max(std::string name, std::vector<uint64_t> shape, std::vector<Piece> pieces, uint64_t group,
                    uint64_t tail = 0, bool invert = false) {
  ParamSpec p = f32_param(std::move(name), std::move(shape), std::move(pieces));
  p.convert.kind = Conversion::Kind::kScaleMax;
  p.convert.group = group;
  p.convert.tail = tail;
  p.convert.invert = invert;
  return p;
}

// The weight just appended (params.back()) with its parts requantised to each group's largest
// scale, as TensorRT-LLM's load_weights leaves it: pieces = the parts, then one scale per part.
void requantised(ParamSpec& weight, std::vector<Piece> scales, uint64_t group) {
  std::vector<uint64_t> parts;
  for (const Piece& piece : weight.pieces) {
    uint64_t n = 1;
    for (const Range& r : piece.box) n *= r.size();
    parts.push_back(n);  // F8: one byte an element
  }
  weight.pieces.insert(weight.pieces.end(), std::make_move_iterator(scales.begin()),
                       std::make_move_iterator(scales.end()));
  weight.dtype = DType::kF8_E4M3;
  weight.convert.kind = Conversion::Kind::kFp8Requant;
  weight.convert.parts = std::move(parts);
  weight.convert.group = group;
}

// Per-tensor / per-channel FP8 companions of the weight just appended (fp8.md sections 6-8).
void add_fp8_scaled(std::vector<ParamSpec>& params, const std::string& dst, const std::string& sep,
                    const std::vector<LinearSlice>& slices, const LinearQuant& quant,
                    const std::vector<uint64_t>& leading) {
  using Kind = LinearQuant::Kind;
  const std::string ws = dst + sep + "weight_scale", is = dst + sep + "input_scale";
  uint64_t groups = 1;
  for (auto d : leading) groups = checked_mul(groups, d, dst + ": leading dimensions");
  const uint64_t per = groups ? slices.size() / groups : 0;
  if (quant.kind == Kind::kFp8Channel) {
    // One F32 per output row: the weight's rows of each part's [out, 1] scale (a row-parallel
    // linear's whole column); TensorRT-LLM flattens it to [out] (FP8RowwiseLinearMethod).
    std::vector<Piece> pieces;
    uint64_t total = 0;
    for (const LinearSlice& sl : slices) {
      Piece p = box_piece(sl.linear + ".weight_scale", {sl.shape[0], 1}, sl.rows, {0, 1});
      p.source_dtype = DType::kF32;
      if (quant.scale_dtype == DType::kBF16) p = widened_bf16_to_f32(std::move(p));
      if (quant.scale_dtype == DType::kF16) p = widened_f16_to_f32(std::move(p));
      pieces.push_back(std::move(p));
      total += sl.rows.size();
    }
    std::vector<uint64_t> shape = leading;
    shape.push_back(groups ? total / groups : 0);
    if (!quant.flat_channel) shape.push_back(1);
    params.back().scales = {ws};
    params.push_back(f32_param(ws, std::move(shape), std::move(pieces)));
    return;
  }
  auto scales_of = [&](const char* suffix) {
    std::vector<Piece> out;
    for (const LinearSlice& sl : slices)
      out.push_back(scalar_scale(sl.linear + suffix, quant.scalar_shape, quant.scale_dtype));
    return out;
  };
  if (!quant.requantise) {
    // vLLM: one slot per part (PerTensorScaleParameter [3] / [2] / [1]); experts [E, 2] and [E].
    std::vector<uint64_t> shape = leading;
    if (leading.empty() || per > 1) shape.push_back(per);
    params.back().scales = {ws};
    if (quant.input_scale) params.back().scales.push_back(is);
    params.push_back(f32_param(ws, shape, scales_of(".weight_scale")));
    if (!quant.input_scale) return;
    if (leading.empty()) {
      params.push_back(f32_param(is, shape, scales_of(".input_scale")));
      return;
    }
    // FusedMoE keeps one input-scale slot per expert for both gate and up (_load_single_value:
    // the last writer wins): the two must agree, or which one survives depends on read order.
    ParamSpec in = f32_param(is, leading, {});
    for (uint64_t g = 0; g < groups; ++g) {
      const LinearSlice& first = slices[g * per];
      in.pieces.push_back(scalar_scale(first.linear + ".input_scale", quant.scalar_shape, quant.scale_dtype));
      for (uint64_t k = 1; k < per; ++k) {
        in.must_match.emplace_back(first.linear + ".input_scale", slices[g * per + k].linear + ".input_scale");
      }
    }
    params.push_back(std::move(in));
    return;
  }
  if (!leading.empty()) {
    throw Error(ErrorCode::kInternal, dst + ": TensorRT-LLM per-tensor FP8 experts are built by moe_experts");
  }
  // TensorRT-LLM (FP8QDQLinearMethod): a fused weight requantised to max(s_i); scalars reduced.
  ParamSpec& weight = params.back();
  weight.scales = {ws};
  if (quant.input_scale) weight.scales.insert(weight.scales.end(), {is, dst + sep + "inv_input_scale"});
  if (per > 1) requantised(weight, scales_of(".weight_scale"), per);
  params.push_back(scale_max(ws, {}, scales_of(".weight_scale"), per));
  if (!quant.input_scale) return;
  params.push_back(scale_max(is, {}, scales_of(".input_scale"), per));
  params.push_back(scale_max(dst + sep + "inv_input_scale", {}, scales_of(".input_scale"), per, 0, true));
}

// The F32 global scale `suffix` of each slice, as ModelOpt's value: compressed-tensors' reciprocal
// inverted on read where TensorRT-LLM inverts it (its compressed_tensors.py, x > 0 ? 1/x : 0;
// strict dense layers refuse a non-finite or non-positive one), as stored for vLLM.
std::vector<Piece> nvfp4_globals(const std::vector<LinearSlice>& slices, const char* suffix, const LinearQuant& q,
                                 bool modelopt_value) {
  std::vector<Piece> out;
  for (const LinearSlice& sl : slices) {
    Piece p = scalar_scale(sl.linear + suffix, q.scalar_shape, DType::kF32);
    if (modelopt_value && q.inverted_globals) p.transform = q.strict_global ? "invert_scale_strict" : "invert_scale";
    out.push_back(std::move(p));
  }
  return out;
}

ParamSpec nvfp4_scales_param(std::string name, std::vector<uint64_t> shape, std::vector<Piece> pieces,
                             Conversion::ScaleOp op, uint64_t group, uint64_t tail = 0) {
  ParamSpec p = f32_param(std::move(name), std::move(shape), std::move(pieces));
  p.convert.kind = Conversion::Kind::kNvfp4Scales;
  p.convert.scale_op = op;
  p.convert.group = group;
  p.convert.tail = tail;
  return p;
}

// A parameter holding the assembled [rows, cols] scale matrices, each padded to [pad_rows,
// pad_cols] and swizzled 128x4 (Conversion::kBlockScaleSwizzle), viewed as `dtype` words.
ParamSpec swizzled_param(std::string name, std::vector<uint64_t> shape, DType dtype, std::vector<Piece> pieces,
                         uint64_t rows, uint64_t cols, uint64_t pad_rows, uint64_t pad_cols) {
  ParamSpec p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.dtype = dtype;
  p.pieces = std::move(pieces);
  p.convert.kind = Conversion::Kind::kBlockScaleSwizzle;
  p.convert.rows = rows;
  p.convert.cols = cols;
  p.convert.pad_rows = pad_rows;
  p.convert.pad_cols = pad_cols;
  return p;
}

// The F8 block scales (one per 16 values = 8 packed bytes) of the slices' rows, in slice order.
std::vector<Piece> nvfp4_block_scales(const std::vector<LinearSlice>& slices, uint64_t& rows, uint64_t& cols) {
  std::vector<Piece> scale;
  rows = cols = 0;
  for (const auto& s : slices) {
    const Range bc = block_range(s.cols, 8);
    Piece p = box_piece(s.linear + ".weight_scale", {s.shape[0], s.shape[1] / 8}, s.rows, bc);
    p.source_dtype = DType::kF8_E4M3;
    scale.push_back(std::move(p));
    rows += s.rows.size();
    cols = bc.size();
  }
  return scale;
}

// Both engines need whole 16-value blocks a rank (vLLM's create_weights raises on in_p % 16,
// TensorRT-LLM asserts in_features % 16): the stored columns are bytes, two values each.
void require_nvfp4_blocks(const std::vector<LinearSlice>& slices) {
  for (const LinearSlice& s : slices) {
    if (s.cols.size() % 8 != 0 || s.cols.begin % 8 != 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  s.linear + ".weight: this rank's " + std::to_string(2 * s.cols.size()) +
                      " input features are not whole 16-value NVFP4 blocks (both engines refuse it: vLLM's "
                      "create_weights, TensorRT-LLM's in_features % 16 assert); use a tp_size that keeps them whole");
    }
  }
}

// NVFP4 companions of the weight just appended (int4-nvfp4.md sections 6.1 to 6.3).
void add_nvfp4(std::vector<ParamSpec>& params, const std::string& dst, const std::string& sep,
               const std::vector<LinearSlice>& slices, const LinearQuant& quant, const std::vector<uint64_t>& leading) {
  using P = LinearQuant::Nvfp4Params;
  using Op = Conversion::ScaleOp;
  require_nvfp4_blocks(slices);
  uint64_t groups = 1;
  for (auto d : leading) groups = checked_mul(groups, d, dst + ": leading dimensions");
  const uint64_t per = groups ? slices.size() / groups : 0;
  uint64_t srows = 0, scols = 0;
  std::vector<Piece> block = nvfp4_block_scales(slices, srows, scols);
  const std::string ws = dst + sep + "weight_scale";
  if (quant.nvfp4_params != P::kTrtllm) {
    // vLLM: F8 scales [rows, in/16]; one global-scale slot per part (PerTensorScaleParameter; a
    // fused MoE's [E, 2] / [E]), as stored: ModelOpt's scales, or compressed-tensors' reciprocals
    // under its own names.
    const bool ct = quant.nvfp4_params == P::kVllmCompressed;
    const std::string ws2 = dst + sep + (ct ? "weight_global_scale" : "weight_scale_2"),
                      is = dst + sep + (ct ? "input_global_scale" : "input_scale");
    params.back().scales = {ws, ws2, is};
    ParamSpec sp = concat_param(ws, std::move(block), srows, scols, leading);
    sp.dtype = DType::kF8_E4M3;
    params.push_back(std::move(sp));
    std::vector<uint64_t> shape = leading;
    if (leading.empty() || per > 1) shape.push_back(per);
    params.push_back(f32_param(ws2, shape, nvfp4_globals(slices, ".weight_scale_2", quant, false)));
    ParamSpec in = f32_param(is, shape, nvfp4_globals(slices, ".input_scale", quant, false));
    if (!ct && !leading.empty()) {
      // ModelOpt experts: FusedMoE's input_scale branch (_load_single_value) writes each of gate
      // and up over the expert's whole [2] row, the last one read winning: they must agree.
      for (uint64_t g = 0; g < groups; ++g) {
        for (uint64_t k = 1; k < per; ++k) {
          in.must_match.emplace_back(slices[g * per].linear + ".input_scale",
                                     slices[g * per + k].linear + ".input_scale");
        }
      }
    }
    params.push_back(std::move(in));
    return;
  }
  if (!leading.empty()) {
    throw Error(ErrorCode::kInternal, dst + ": TensorRT-LLM NVFP4 experts are built by moe_experts");
  }
  // TensorRT-LLM (NVFP4LinearMethod.load_weight_scales / load_weights_*): the parts' scales
  // concatenated and swizzled 128x4 into a 1-D U8 [rup(out, 128) * rup(in / 16, 4)]; the parts'
  // input_scale and weight_scale_2 asserted equal; input_scale = 1 / ckpt, alpha = ckpt input_scale
  // x weight_scale_2, and (vanilla linears only) inv_input_scale = input_scale / 6.
  const std::string ws2 = dst + sep + "weight_scale_2", is = dst + sep + "input_scale", alpha = dst + sep + "alpha",
                    inv = dst + sep + "inv_input_scale";
  params.back().scales = {ws, is, ws2, alpha};
  if (per == 1) params.back().scales.push_back(inv);
  const uint64_t pad_rows = ceil_div(srows, 128) * 128, pad_cols = ceil_div(scols, 4) * 4;
  params.push_back(
      swizzled_param(ws, {pad_rows * pad_cols}, DType::kU8, std::move(block), srows, scols, pad_rows, pad_cols));
  std::vector<std::pair<std::string, std::string>> equal;
  for (const char* global : {".input_scale", ".weight_scale_2"}) {
    for (size_t k = 1; k < slices.size(); ++k) equal.emplace_back(slices[0].linear + global, slices[k].linear + global);
  }
  ParamSpec in = nvfp4_scales_param(is, {1}, nvfp4_globals(slices, ".input_scale", quant, true), Op::kInvMax, per);
  in.must_match = std::move(equal);
  params.push_back(std::move(in));
  params.push_back(nvfp4_scales_param(ws2, {1}, nvfp4_globals(slices, ".weight_scale_2", quant, true), Op::kMax, per));
  std::vector<Piece> both = nvfp4_globals(slices, ".weight_scale_2", quant, true);
  for (Piece& p : nvfp4_globals(slices, ".input_scale", quant, true)) both.push_back(std::move(p));
  params.push_back(nvfp4_scales_param(alpha, {1}, std::move(both), Op::kMaxProduct, per, per));
  if (per == 1) {
    params.push_back(
        nvfp4_scales_param(inv, {1}, nvfp4_globals(slices, ".input_scale", quant, true), Op::kInvSixth, 1));
  }
}

}  // namespace

std::optional<BlockScales> fp8_block_scales(const ModelConfig& c) {
  const auto fp8 = Fp8Format::detect(c);
  if (!fp8 || fp8->scheme != Fp8Format::Scheme::kBlock) return std::nullopt;
  return BlockScales{fp8->block_rows, fp8->block_cols};
}

bool nvfp4_checkpoint(const ModelConfig& c) { return Nvfp4Format::detect(c).has_value(); }

LinearQuant linear_quant(const ModelConfig& c, const Layout& l, const KeyProbe& probe, const std::string& linear,
                         LinearRole role, bool strict, bool whole_blocks) {
  if (const auto fp8 = Fp8Format::detect(c)) {
    fp8->refuse_for(c, l.target);
    if (fp8->scheme == Fp8Format::Scheme::kBlock) return block_quant(*fp8, l, probe, linear, role, whole_blocks);
    return scaled_quant(c, *fp8, l, probe, linear, role);
  }
  if (const auto nvfp4 = Nvfp4Format::detect(c)) return nvfp4_quant(*nvfp4, l, probe, linear, strict);
  if (const auto int4 = Int4Format::detect(c)) return int4_quant(c, *int4, l, probe, linear);
  return LinearQuant::none();
}

std::optional<std::string> fp8_kv_duplication_error(const ModelConfig& c, const Layout& l, uint64_t kv_heads,
                                                    bool mapper_duplicates_block_scales) {
  if (l.target != Target::kTrtllm || kv_heads >= l.tp_size) return std::nullopt;
  const auto fp8 = Fp8Format::detect(c);
  if (!fp8 || fp8->scheme == Fp8Format::Scheme::kTensor) return std::nullopt;
  if (fp8->scheme == Fp8Format::Scheme::kBlock && mapper_duplicates_block_scales) return std::nullopt;
  return std::to_string(kv_heads) + " KV heads under tp_size " + std::to_string(l.tp_size) + ": TensorRT-LLM's " +
         "weight mapper for " + c.architecture() + " does not duplicate a KV head's " +
         (fp8->scheme == Fp8Format::Scheme::kBlock ? "FP8 block scales" : "FP8 per-channel scales") +
         " (HfWeightMapper._duplicate_kv_weights), so its own load of this " + fp8->name() +
         " checkpoint fails; use tp_size <= " + std::to_string(kv_heads) + " or target vllm";
}

namespace {

// compressed-tensors' I64 [2] `weight_shape` of `linear`; one that vLLM reads and then overwrites
// with a later part's (`kept` false) is consumed with no bytes.
Piece weight_shape_piece(const std::string& linear, bool kept) {
  Piece p = whole(linear + ".weight_shape", {2});
  p.source_dtype = DType::kI64;
  if (!kept) p.box = {{0, 0}};
  return p;
}

// A parameter of the slices' boxes (pieces in slice order) and, when there are several slices
// whose outputs are the last stored dim, their torch.cat(dim=-1) (Conversion::kConcatColumns).
ParamSpec int4_param(const std::string& name, DType dtype, uint64_t rows, std::vector<Piece> pieces,
                     const std::vector<uint64_t>& part_cols, bool concat_columns) {
  ParamSpec p;
  p.name = name;
  p.dtype = dtype;
  p.pieces = std::move(pieces);
  uint64_t cols = 0;
  for (auto c : part_cols) cols += c;
  p.shape = {rows, cols};
  if (concat_columns && part_cols.size() > 1) {
    p.convert.kind = Conversion::Kind::kConcatColumns;
    p.convert.rows = rows;
    for (auto c : part_cols) p.convert.parts.push_back(c * dtype_bits(dtype) / 8);
  }
  return p;
}

// vLLM's W4A16 linears (int4-nvfp4.md 3.1, 4.1, 5.1): each slice is a part's logical [out, in]
// rows and columns; the checkpoint's layout decides what is cut and how the parts are fused.
void add_int4(std::vector<ParamSpec>& params, const std::string& dst, const std::string& sep,
              const std::vector<LinearSlice>& slices, const LinearQuant& q) {
  using S = LinearQuant::Int4Source;
  const LinearSlice& first = slices.at(0);
  const uint64_t in = first.shape[1], g = q.group ? q.group : in, groups = ceil_div(in, g);
  const Range c = first.cols;
  const bool row_parallel = c.size() != in;
  // GPTQ desc_act / compressed-tensors actorder group on a row-parallel linear, or per-channel
  // scales there: every rank holds every group's scales (marlin_repeat_scales_on_all_ranks).
  const bool full_groups = row_parallel && (q.act_order || q.group == 0);
  auto fail = [&](const LinearSlice& s, const std::string& why) {
    throw Error(ErrorCode::kInvalidArgument,
                s.linear + ": " + why +
                    " (vLLM's create_weights refuses it: \"can be caused by too large tensor "
                    "parallel size\"); use a tp_size that keeps them whole");
  };
  if (!full_groups && (c.begin % g != 0 || c.size() % g != 0)) {
    fail(first, "this rank's inputs [" + std::to_string(c.begin) + ", " + std::to_string(c.end) + ") are not whole " +
                    std::to_string(g) + "-input groups");
  }
  const Range sr = full_groups ? Range{0, groups} : Range{c.begin / g, ceil_div(c.end, g)};
  for (const LinearSlice& s : slices) {
    if (s.rows.begin % 8 != 0 || s.rows.size() % 8 != 0) {
      fail(s, "this rank's outputs [" + std::to_string(s.rows.begin) + ", " + std::to_string(s.rows.end) +
                  ") are not whole words of 8 packed values");
    }
  }
  if (c.begin % 8 != 0 || c.size() % 8 != 0) fail(first, "this rank's inputs are not whole words of 8 packed values");
  const Range c8{c.begin / 8, c.end / 8};
  std::vector<Piece> w, z, sc;
  std::vector<uint64_t> out8, out1;
  for (const LinearSlice& s : slices) {
    const uint64_t o = s.shape[0];
    const Range r = s.rows, r8{r.begin / 8, r.end / 8};
    out8.push_back(r8.size());
    out1.push_back(r.size());
    if (q.int4_source == S::kAwq) {  // [in, out/8], [in/g, out/8], [in/g, out]
      w.push_back(box_piece(s.linear + ".qweight", {in, o / 8}, c, r8));
      z.push_back(box_piece(s.linear + ".qzeros", {groups, o / 8}, sr, r8));
      sc.push_back(box_piece(s.linear + ".scales", {groups, o}, sr, r));
    } else if (q.int4_source == S::kGptq) {  // [in/8, out], [G, out/8], [G, out]
      w.push_back(box_piece(s.linear + ".qweight", {in / 8, o}, c8, r));
      z.push_back(box_piece(s.linear + ".qzeros", {groups, o / 8}, sr, r8));
      sc.push_back(box_piece(s.linear + ".scales", {groups, o}, sr, r));
    } else {  // [out, in/8], [out/8, G] (asymmetric), [out, G]
      w.push_back(box_piece(s.linear + ".weight", {o, in / 8}, r, c8));
      if (!q.symmetric) z.push_back(box_piece(s.linear + ".weight_zero_point", {o / 8, groups}, r8, sr));
      sc.push_back(box_piece(s.linear + ".weight_scale", {o, groups}, r, sr));
    }
  }
  for (auto* pieces : {&w, &z}) {
    for (Piece& p : *pieces) p.source_dtype = DType::kI32;
  }
  const std::string base = dst + sep;
  auto g_idx = [&](const std::string& name, const std::string& suffix) {
    // Column-parallel parts share their input: vLLM copies each part's whole g_idx into one
    // parameter, the last one read winning, so they must agree; a row-parallel rank its slice.
    ParamSpec p;
    p.name = base + name;
    p.shape = {c.size()};
    p.dtype = DType::kI32;
    Piece piece = whole(slices.back().linear + suffix, {in});
    piece.box = {c};
    piece.source_dtype = DType::kI32;
    p.pieces.push_back(std::move(piece));
    for (size_t k = 0; k + 1 < slices.size(); ++k) {
      p.must_match.emplace_back(slices[k].linear + suffix, slices.back().linear + suffix);
    }
    return p;
  };
  if (q.int4_source == S::kCompressedTensors) {
    uint64_t rows = 0;
    for (auto o : out1) rows += o;
    ParamSpec wp = int4_param(base + "weight_packed", DType::kI32, rows, std::move(w), {c8.size()}, false);
    wp.scales = {base + "weight_scale", base + "weight_shape"};
    if (!q.symmetric) wp.scales.push_back(base + "weight_zero_point");
    if (q.act_order) wp.scales.push_back(base + "weight_g_idx");
    params.push_back(std::move(wp));
    params.push_back(int4_param(base + "weight_scale", q.scale_dtype, rows, std::move(sc), {sr.size()}, false));
    if (!q.symmetric) {
      params.push_back(int4_param(base + "weight_zero_point", DType::kI32, rows / 8, std::move(z), {sr.size()}, false));
    }
    // weight_shape: every part copies its whole [out, in]; the parameter keeps the last one read
    // (v_proj, up_proj: sorted keys in one file; int4-nvfp4.md section 9.3).
    ParamSpec shape;
    shape.name = base + "weight_shape";
    shape.shape = {2};
    shape.dtype = DType::kI64;
    for (const LinearSlice& sl : slices) shape.pieces.push_back(weight_shape_piece(sl.linear, &sl == &slices.back()));
    params.push_back(std::move(shape));
    if (q.act_order) params.push_back(g_idx("weight_g_idx", ".weight_g_idx"));
    return;
  }
  const bool awq = q.int4_source == S::kAwq;
  ParamSpec qw =
      int4_param(base + "qweight", DType::kI32, awq ? c.size() : c8.size(), std::move(w), awq ? out8 : out1, true);
  qw.scales = {base + "qzeros", base + "scales"};
  if (!awq) qw.scales.push_back(base + "g_idx");
  params.push_back(std::move(qw));
  params.push_back(int4_param(base + "qzeros", DType::kI32, sr.size(), std::move(z), out8, true));
  params.push_back(int4_param(base + "scales", q.scale_dtype, sr.size(), std::move(sc), out1, true));
  if (!awq) params.push_back(g_idx("g_idx", ".g_idx"));
}

}  // namespace

void add_linear(std::vector<ParamSpec>& params, const std::string& dst, const std::string& sep,
                const std::vector<LinearSlice>& slices, const LinearQuant& quant,
                const std::vector<uint64_t>& leading) {
  using Kind = LinearQuant::Kind;
  if (quant.kind == Kind::kInt4) {
    if (!leading.empty()) throw Error(ErrorCode::kInternal, dst + ": 4-bit integer experts are not built");
    add_int4(params, dst, sep, slices, quant);
    return;
  }
  const uint64_t cols = slices.empty() ? 0 : slices[0].cols.size();
  std::vector<Piece> weight;
  uint64_t rows = 0;
  for (const auto& s : slices) {
    weight.push_back(box_piece(s.linear + ".weight", s.shape, s.rows, s.cols));
    rows += s.rows.size();
  }
  // vLLM's compressed-tensors NVFP4 scheme keeps the checkpoint's name (CompressedTensorsW4A4Fp4).
  const bool ct_names = quant.kind == Kind::kNvfp4 && quant.nvfp4_params == LinearQuant::Nvfp4Params::kVllmCompressed;
  params.push_back(
      concat_param(dst + sep + (ct_names ? "weight_packed" : "weight"), std::move(weight), rows, cols, leading));
  if (quant.kind == Kind::kFp8Tensor || quant.kind == Kind::kFp8Channel) {
    add_fp8_scaled(params, dst, sep, slices, quant, leading);
    return;
  }
  if (quant.kind == Kind::kNvfp4) {
    add_nvfp4(params, dst, sep, slices, quant, leading);
    return;
  }
  // The weight names its scale parameters (ParamSpec::scales): the plan refuses it without them.
  if (quant.kind == Kind::kFp8Block) params.back().scales = {dst + sep + quant.scale_name};

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
  }
}

namespace {

// TensorRT-LLM's FP8QDQFusedMoEMethod (fp8.md section 7): each expert's [w3; w1] requantised to
// max(s_w1, s_w3); fc31_dequant = that max x a13, fc2_dequant = s_w2 x a2, fc2_quant = 1 / a2,
// fc31_input_dequant = a13, with a13 / a2 the max input scale over *all* experts
// (load_activation_scales_fp8_qdq loops over num_experts), the same on every rank.
void add_fp8_qdq_experts(std::vector<ParamSpec>& params, const std::string& dst, const std::string& src,
                         uint64_t experts, Range local, const std::vector<LinearSlice>& fused,
                         const std::vector<LinearSlice>& down, const LinearQuant& quant, const ExpertNames& names) {
  const uint64_t per = local.size();
  auto scalar = [&](const std::string& key) { return scalar_scale(key, quant.scalar_shape, quant.scale_dtype); };
  auto weight = [&](const std::string& name, const std::vector<LinearSlice>& slices) {
    std::vector<Piece> pieces;
    uint64_t rows = 0;
    for (const LinearSlice& sl : slices) {
      pieces.push_back(box_piece(sl.linear + ".weight", sl.shape, sl.rows, sl.cols));
      rows += sl.rows.size();
    }
    return concat_param(name, std::move(pieces), rows, slices.empty() ? 0 : slices[0].cols.size(), {per});
  };
  std::vector<Piece> fused_scales, down_scales, fused_inputs, down_inputs;
  for (const LinearSlice& sl : fused) fused_scales.push_back(scalar(sl.linear + ".weight_scale"));
  for (const LinearSlice& sl : down) down_scales.push_back(scalar(sl.linear + ".weight_scale"));
  for (uint64_t j = 0; j < experts; ++j) {
    const std::string e = src + "." + std::to_string(j) + ".";
    fused_inputs.push_back(scalar(e + "gate_proj.input_scale"));
    fused_inputs.push_back(scalar(e + "up_proj.input_scale"));
    down_inputs.push_back(scalar(e + "down_proj.input_scale"));
  }
  const std::string f = dst + "." + names.fused + "_weight", d = dst + "." + names.down + "_weight";
  const std::string fc31 = dst + ".fc31_dequant", fc2 = dst + ".fc2_dequant", fc2q = dst + ".fc2_quant",
                    fc31i = dst + ".fc31_input_dequant";
  ParamSpec w13 = weight(f, fused);
  requantised(w13, fused_scales, 2);
  w13.scales = {fc31, fc31i};
  params.push_back(std::move(w13));
  ParamSpec w2 = weight(d, down);
  w2.scales = {fc2, fc2q};
  params.push_back(std::move(w2));
  std::vector<Piece> fc31_pieces = fused_scales, fc2_pieces = down_scales;
  fc31_pieces.insert(fc31_pieces.end(), fused_inputs.begin(), fused_inputs.end());
  fc2_pieces.insert(fc2_pieces.end(), down_inputs.begin(), down_inputs.end());
  params.push_back(scale_max(fc31, {per}, std::move(fc31_pieces), 2, 2 * experts));
  params.push_back(scale_max(fc2, {per}, std::move(fc2_pieces), 1, experts));
  params.push_back(scale_max(fc2q, {}, down_inputs, experts, 0, true));
  params.push_back(scale_max(fc31i, {}, fused_inputs, 2 * experts));
}

// TensorRT-LLM's NVFP4CutlassFusedMoEMethod (int4-nvfp4.md section 6.4): per local expert
// [up; gate] (Ipp rows each) as int64 words with zero rows to A = rup(2 Ipp, 128) at the end;
// down's Ipp/2 bytes a row padded to A/4; the block scales likewise, each expert's matrix
// swizzled 128x4; fc31/fc2_input_scale = 1 / the max input scale over *all* experts (w3's
// asserted close to w1's), fc31/fc2_alpha per local expert.
void add_nvfp4_cutlass_experts(std::vector<ParamSpec>& params, const std::string& dst, const std::string& src,
                               uint64_t experts, uint64_t hidden, Range local, const std::vector<LinearSlice>& fused,
                               const std::vector<LinearSlice>& down, const LinearQuant& quant,
                               const ExpertNames& names) {
  using Op = Conversion::ScaleOp;
  const uint64_t per = local.size();
  const uint64_t ipp = fused.empty() ? 0 : fused[0].rows.size();
  const uint64_t a = ceil_div(2 * ipp, 128) * 128;
  if (ipp % 16 != 0 || hidden % 128 != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                dst + ": " + std::to_string(ipp) + " expert rows a rank and hidden size " + std::to_string(hidden) +
                    " do not fit TensorRT-LLM's NVFP4 CUTLASS MoE (it views down's rows as int64 words and the "
                    "scales as int32 in 128-row tiles: it needs rows a rank % 16 and hidden % 128)");
  }
  require_nvfp4_blocks(fused);
  require_nvfp4_blocks(down);
  const std::string f = dst + "." + names.fused, d = dst + "." + names.down;
  // Weights: the second part of each expert (gate) carries the zero rows after it.
  std::vector<Piece> w13, s13, w2, s2;
  for (size_t i = 0; i < fused.size(); ++i) {
    const LinearSlice& sl = fused[i];
    Piece p = box_piece(sl.linear + ".weight", sl.shape, sl.rows, sl.cols);
    p.source_dtype = DType::kU8;
    if (i % 2 == 1) p = padded(std::move(p), {a - ipp, sl.cols.size()});
    w13.push_back(std::move(p));
    Piece q = box_piece(sl.linear + ".weight_scale", {sl.shape[0], sl.shape[1] / 8}, sl.rows, block_range(sl.cols, 8));
    q.source_dtype = DType::kF8_E4M3;
    s13.push_back(std::move(q));
  }
  for (const LinearSlice& sl : down) {
    Piece p = box_piece(sl.linear + ".weight", sl.shape, sl.rows, sl.cols);
    p.source_dtype = DType::kU8;
    w2.push_back(padded(std::move(p), {sl.rows.size(), a / 4}));
    Piece q = box_piece(sl.linear + ".weight_scale", {sl.shape[0], sl.shape[1] / 8}, sl.rows, block_range(sl.cols, 8));
    q.source_dtype = DType::kF8_E4M3;
    s2.push_back(std::move(q));
  }
  auto weight = [&](const std::string& name, std::vector<uint64_t> shape, std::vector<Piece> pieces) {
    ParamSpec p;
    p.name = name;
    p.shape = std::move(shape);
    p.dtype = DType::kI64;
    p.pieces = std::move(pieces);
    return p;
  };
  const std::string fis = dst + ".fc31_input_scale", f2is = dst + ".fc2_input_scale", fa = dst + ".fc31_alpha",
                    f2a = dst + ".fc2_alpha";
  ParamSpec pw13 = weight(f + "_weight", {per, a, hidden / 16}, std::move(w13));
  pw13.scales = {f + "_weight_scale", fis, fa};
  params.push_back(std::move(pw13));
  ParamSpec pw2 = weight(d + "_weight", {per, hidden, a / 32}, std::move(w2));
  pw2.scales = {d + "_weight_scale", f2is, f2a};
  params.push_back(std::move(pw2));
  params.push_back(swizzled_param(f + "_weight_scale", {per, a, hidden / 64}, DType::kI32, std::move(s13), 2 * ipp,
                                  hidden / 16, a, hidden / 16));
  params.push_back(swizzled_param(d + "_weight_scale", {per, hidden, a / 128}, DType::kI32, std::move(s2), hidden,
                                  ipp / 16, hidden, a / 32));
  // Input scales of every expert (load_quant_scales loops over num_experts); w1 is gate, w3 up.
  std::vector<LinearSlice> gates, downs;
  for (uint64_t j = 0; j < experts; ++j) {
    const std::string e = src + "." + std::to_string(j) + ".";
    gates.push_back(whole_linear(e + "gate_proj", {1, 1}));
    downs.push_back(whole_linear(e + "down_proj", {1, 1}));
  }
  ParamSpec in13 = nvfp4_scales_param(fis, {}, nvfp4_globals(gates, ".input_scale", quant, true), Op::kInvMax, experts);
  for (uint64_t j = 0; j < experts; ++j) {
    const std::string e = src + "." + std::to_string(j) + ".";
    in13.must_match.emplace_back(e + "gate_proj.input_scale", e + "up_proj.input_scale");
  }
  in13.must_match_close = true;  // load_expert_fc31_input_scale_nvfp4: torch.allclose
  params.push_back(std::move(in13));
  params.push_back(
      nvfp4_scales_param(f2is, {}, nvfp4_globals(downs, ".input_scale", quant, true), Op::kInvMax, experts));
  // fc31_alpha: per local expert (w1's weight_scale_2, w3's) then every expert's w1 input scale.
  std::vector<LinearSlice> w1w3;
  for (size_t i = 0; i < fused.size(); i += 2) {
    const bool up_first = !names.gate_first;
    w1w3.push_back(fused[up_first ? i + 1 : i]);
    w1w3.push_back(fused[up_first ? i : i + 1]);
  }
  std::vector<Piece> a13 = nvfp4_globals(w1w3, ".weight_scale_2", quant, true);
  for (Piece& p : nvfp4_globals(gates, ".input_scale", quant, true)) a13.push_back(std::move(p));
  params.push_back(nvfp4_scales_param(fa, {per}, std::move(a13), Op::kExpertAlpha, 2, experts));
  std::vector<Piece> a2 = nvfp4_globals(down, ".weight_scale_2", quant, true);
  for (Piece& p : nvfp4_globals(downs, ".input_scale", quant, true)) a2.push_back(std::move(p));
  params.push_back(nvfp4_scales_param(f2a, {per}, std::move(a2), Op::kExpertAlpha, 1, experts));
}

}  // namespace

// vLLM's AutoAWQMoEMethod / AutoGPTQMoEMethod (int4-nvfp4.md 3.4, 4.3): per local expert, gate
// and up cut along their outputs (the last stored dim) and concatenated [gate, up]; down along
// its inputs. AWQ halves w2's group while the rank's rows are not whole groups, repeating each
// scale / zero row (make_group_size_adjusted_weight_loader); GPTQ act-order keeps every group.
// compressed-tensors (CompressedTensorsWNA16MarlinMoEMethod, 5.2): FusedMoE.weight_loader
// transposes each [out, in] tensor before cutting it, so every piece is a transposed box and
// gate / up meet along the transpose's last dim; each expert's weight_shape is kept in the model
// dtype (the scales' dtype here: int4_quant checks they agree).
void add_int4_experts(std::vector<ParamSpec>& params, const std::string& dst, Range local, uint64_t inter,
                      uint64_t hidden, const Split& moe, const LinearQuant& q, const ExpertNames& names,
                      const std::vector<std::string>& expert_prefixes) {
  using S = LinearQuant::Int4Source;
  const bool awq = q.int4_source == S::kAwq, ct = q.int4_source == S::kCompressedTensors;
  const uint64_t per = local.size(), H = hidden, I = inter;
  const Range r = moe.slice(I, dst + " experts' intermediate size");
  const uint64_t ip = r.size();
  const uint64_t g13 = q.group ? q.group : H, g2 = q.group ? q.group : I;
  const std::string f = dst + "." + names.fused + "_", d = dst + "." + names.down + "_";
  auto refuse = [&](const std::string& why) { throw Error(ErrorCode::kInvalidArgument, dst + ": " + why); };
  if (H % g13 != 0 || H % 8 != 0)
    refuse("hidden size " + std::to_string(H) + " is not whole groups of " + std::to_string(g13));
  if (r.begin % 8 != 0 || ip % 8 != 0) refuse("this rank's expert rows are not whole words of 8 packed values");
  // w2's group a rank: AWQ halves it (an Ip below the group is vLLM's ValueError); GPTQ needs
  // whole groups unless act-order (otherwise vLLM falls back to MoeWNA16, whose layout is not built);
  // compressed-tensors keeps every group with actorder group (load_full_w2) or per-channel scales.
  uint64_t ag = g2;
  bool full2 = false;
  if (awq) {
    if (ip < g2)
      refuse(std::to_string(ip) + " expert rows a rank are fewer than the group " + std::to_string(g2) +
             " (vLLM raises: smaller than group_size)");
    while (ip % ag != 0) ag /= 2;
  } else if (q.act_order || (ct && q.group == 0)) {
    full2 = true;
    if (ct && I % g2 != 0)
      refuse("intermediate size " + std::to_string(I) + " is not whole groups of " + std::to_string(g2));
  } else if (r.begin % g2 != 0 || ip % g2 != 0) {
    refuse(std::to_string(ip) + " expert rows a rank are not whole " + std::to_string(g2) + "-input groups: " +
           (ct ? std::string("vLLM refuses it (\"Scale groups would otherwise cross TP shard boundaries\")")
               : std::string("vLLM serves that layer with MoeWNA16, which is not built")));
  }
  const uint64_t G13 = H / g13, G2 = ceil_div(I, g2);
  std::vector<Piece> w13, z13, s13, w2, z2, s2, gi13, gi2, sh13, sh2;
  auto i32 = [](Piece p) {
    p.source_dtype = DType::kI32;
    return p;
  };
  auto transposed = [](Piece p) {
    p.perm = {1, 0};
    return p;
  };
  // Rows [begin, end) of w2's scales / zeros after repeating each source row g2/ag times.
  auto w2_rows = [&](const std::string& key, std::vector<uint64_t> shape, Range cols, std::vector<Piece>& out,
                     bool is_int) {
    const Range rows = full2 ? Range{0, G2} : Range{r.begin / ag, r.end / ag};
    const uint64_t repeat = g2 / ag;
    if (repeat == 1) {
      Piece p = box_piece(key, shape, rows, cols);
      out.push_back(is_int ? i32(std::move(p)) : std::move(p));
      return;
    }
    for (uint64_t j = rows.begin; j < rows.end; ++j) {
      Piece p = box_piece(key, shape, {j / repeat, j / repeat + 1}, cols);
      out.push_back(is_int ? i32(std::move(p)) : std::move(p));
    }
  };
  auto g_idx = [&](const std::string& key, uint64_t n, Range box, std::vector<Piece>& out) {
    Piece p = whole(key, {n});
    p.box = {box};
    out.push_back(i32(std::move(p)));
  };
  const Range r8{r.begin / 8, r.end / 8}, allh{0, H}, allh8{0, H / 8};
  const Range s2r = full2 ? Range{0, G2} : Range{r.begin / g2, r.end / g2};
  for (const std::string& e : expert_prefixes) {
    const std::string down = e + "down_proj";
    if (ct) {  // [out, in/8], [out, G], [out/8, G], each transposed before its cut
      for (const char* part : {"gate_proj", "up_proj"}) {
        const std::string l = e + part;
        w13.push_back(i32(transposed(box_piece(l + ".weight", {I, H / 8}, r, allh8))));
        s13.push_back(transposed(box_piece(l + ".weight_scale", {I, G13}, r, {0, G13})));
        if (!q.symmetric)
          z13.push_back(i32(transposed(box_piece(l + ".weight_zero_point", {I / 8, G13}, r8, {0, G13}))));
        // weight_shape: _load_single_value, the last of w1 / w3 read (up) kept.
        sh13.push_back(weight_shape_piece(l, std::string(part) == "up_proj"));
      }
      w2.push_back(i32(transposed(box_piece(down + ".weight", {H, I / 8}, allh, r8))));
      s2.push_back(transposed(box_piece(down + ".weight_scale", {H, G2}, allh, s2r)));
      if (!q.symmetric) z2.push_back(i32(transposed(box_piece(down + ".weight_zero_point", {H / 8, G2}, allh8, s2r))));
      sh2.push_back(weight_shape_piece(down, true));
      if (q.act_order) {
        g_idx(e + "up_proj.weight_g_idx", H, allh, gi13);  // _load_g_idx: the last of w1 / w3 read
        g_idx(down + ".weight_g_idx", I, r, gi2);
      }
      continue;
    }
    for (const char* part : {"gate_proj", "up_proj"}) {
      const std::string l = e + part;
      if (awq) {
        w13.push_back(i32(box_piece(l + ".qweight", {H, I / 8}, allh, r8)));
      } else {
        w13.push_back(i32(box_piece(l + ".qweight", {H / 8, I}, allh8, r)));
      }
      z13.push_back(i32(box_piece(l + ".qzeros", {G13, I / 8}, {0, G13}, r8)));
      s13.push_back(box_piece(l + ".scales", {G13, I}, {0, G13}, r));
    }
    if (awq) {
      w2.push_back(i32(box_piece(down + ".qweight", {I, H / 8}, r, allh8)));
    } else {
      w2.push_back(i32(box_piece(down + ".qweight", {I / 8, H}, r8, allh)));
      g_idx(e + "up_proj.g_idx", H, allh, gi13);  // _load_g_idx: the last of w1 / w3 read
      g_idx(down + ".g_idx", I, r, gi2);
    }
    w2_rows(down + ".qzeros", {G2, H / 8}, allh8, z2, true);
    w2_rows(down + ".scales", {G2, H}, allh, s2, false);
  }
  auto stacked = [&](const std::string& name, DType dtype, std::vector<uint64_t> shape, std::vector<Piece> pieces,
                     uint64_t rows, std::vector<uint64_t> part_cols) {
    ParamSpec p = int4_param(name, dtype, rows, std::move(pieces), part_cols, true);
    p.shape = std::move(shape);
    return p;
  };
  auto g_idx_params = [&](const std::string& name, const std::string& gate_key, const std::string& up_key) {
    ParamSpec g = stacked(f + name, DType::kI32, {per, H}, std::move(gi13), 1, {H});
    for (const std::string& e : expert_prefixes) g.must_match.emplace_back(e + gate_key, e + up_key);
    params.push_back(std::move(g));
    params.push_back(stacked(d + name, DType::kI32, {per, ip}, std::move(gi2), 1, {ip}));
  };
  const uint64_t s2rows = full2 ? G2 : ip / ag;
  const DType sd = q.scale_dtype;
  if (ct) {
    for (const std::string* w : {&f, &d}) {
      ParamSpec qw =
          *w == f ? stacked(f + "weight_packed", DType::kI32, {per, H / 8, 2 * ip}, std::move(w13), H / 8, {ip, ip})
                  : stacked(d + "weight_packed", DType::kI32, {per, ip / 8, H}, std::move(w2), ip / 8, {H});
      qw.scales = {*w + "weight_scale", *w + "weight_shape"};
      if (!q.symmetric) qw.scales.push_back(*w + "weight_zero_point");
      if (q.act_order) qw.scales.push_back(*w + "weight_g_idx");
      params.push_back(std::move(qw));
    }
    params.push_back(stacked(f + "weight_scale", sd, {per, G13, 2 * ip}, std::move(s13), G13, {ip, ip}));
    params.push_back(stacked(d + "weight_scale", sd, {per, s2rows, H}, std::move(s2), s2rows, {H}));
    if (!q.symmetric) {
      params.push_back(
          stacked(f + "weight_zero_point", DType::kI32, {per, G13, 2 * ip / 8}, std::move(z13), G13, {ip / 8, ip / 8}));
      params.push_back(
          stacked(d + "weight_zero_point", DType::kI32, {per, s2rows, H / 8}, std::move(z2), s2rows, {H / 8}));
    }
    for (auto [name, pieces] : {std::pair{f + "weight_shape", &sh13}, std::pair{d + "weight_shape", &sh2}}) {
      ParamSpec p;
      p.name = name;
      p.shape = {per, 2};
      p.dtype = sd;
      p.pieces = std::move(*pieces);
      p.convert.kind = Conversion::Kind::kIntToFloat;
      params.push_back(std::move(p));
    }
    if (q.act_order) g_idx_params("weight_g_idx", "gate_proj.weight_g_idx", "up_proj.weight_g_idx");
    return;
  }
  if (awq) {
    ParamSpec qw = stacked(f + "qweight", DType::kI32, {per, H, 2 * ip / 8}, std::move(w13), H, {ip / 8, ip / 8});
    qw.scales = {f + "qzeros", f + "scales"};
    params.push_back(std::move(qw));
    ParamSpec qw2 = stacked(d + "qweight", DType::kI32, {per, ip, H / 8}, std::move(w2), ip, {H / 8});
    qw2.scales = {d + "qzeros", d + "scales"};
    params.push_back(std::move(qw2));
  } else {
    ParamSpec qw = stacked(f + "qweight", DType::kI32, {per, H / 8, 2 * ip}, std::move(w13), H / 8, {ip, ip});
    qw.scales = {f + "qzeros", f + "scales", f + "g_idx"};
    params.push_back(std::move(qw));
    ParamSpec qw2 = stacked(d + "qweight", DType::kI32, {per, ip / 8, H}, std::move(w2), ip / 8, {H});
    qw2.scales = {d + "qzeros", d + "scales", d + "g_idx"};
    params.push_back(std::move(qw2));
  }
  params.push_back(stacked(f + "scales", sd, {per, G13, 2 * ip}, std::move(s13), G13, {ip, ip}));
  params.push_back(stacked(f + "qzeros", DType::kI32, {per, G13, 2 * ip / 8}, std::move(z13), G13, {ip / 8, ip / 8}));
  params.push_back(stacked(d + "scales", sd, {per, s2rows, H}, std::move(s2), s2rows, {H}));
  params.push_back(stacked(d + "qzeros", DType::kI32, {per, s2rows, H / 8}, std::move(z2), s2rows, {H / 8}));
  if (!awq) g_idx_params("g_idx", "gate_proj.g_idx", "up_proj.g_idx");
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
  if (quant.kind == LinearQuant::Kind::kFp8Tensor && quant.requantise) {
    add_fp8_qdq_experts(params, dst, src, experts, local, fused, down, quant, names);
    return params;
  }
  if (quant.kind == LinearQuant::Kind::kNvfp4 && quant.nvfp4_params == LinearQuant::Nvfp4Params::kTrtllm) {
    add_nvfp4_cutlass_experts(params, dst, src, experts, hidden, local, fused, down, quant, names);
    return params;
  }
  if (quant.kind == LinearQuant::Kind::kInt4) {
    std::vector<std::string> prefixes;
    for (uint64_t j = local.begin; j < local.end; ++j) prefixes.push_back(src + "." + std::to_string(j) + ".");
    add_int4_experts(params, dst, local, intermediate, hidden, moe, quant, names, prefixes);
    return params;
  }
  add_linear(params, dst + "." + names.fused, "_", fused, quant, {per});
  add_linear(params, dst + "." + names.down, "_", down, quant, {per});
  if (names.globals_close) {
    for (auto& p : params) p.must_match_close = !p.must_match.empty();
  }
  return params;
}

std::vector<ParamSpec> kv_cache_scales(const ModelConfig& c, const Layout& l, const KeyProbe& probe,
                                       const std::string& attn, const LinearQuant& qkv) {
  // ModelOpt names them under the projection, compressed-tensors and AutoFP8 under the attention.
  auto source = [&](const char* proj, const char* scale) -> std::optional<std::string> {
    for (const std::string& key : {attn + proj + "." + scale, attn + scale}) {
      if (probe.contains(key)) return key;
    }
    return std::nullopt;
  };
  const auto k = source("k_proj", "k_scale"), v = source("v_proj", "v_scale");
  if (!k && !v) return {};
  if (!k || !v) {
    throw Error(ErrorCode::kInvalidArgument, attn + ": the checkpoint has " + (k ? *k : *v) + " but no " +
                                                 (k ? "v_scale" : "k_scale") + ": KV-cache scales come in pairs");
  }
  auto scalar = [&](const std::string& key) {
    const auto dtype = probe.dtype_of(key).value_or(DType::kF32);
    const auto shape = probe.shape_of(key).value_or(std::vector<uint64_t>{});
    if (dtype != DType::kF32 || shape.size() > 1 || (shape.size() == 1 && shape[0] != 1)) {
      throw Error(ErrorCode::kInvalidArgument, key + ": a KV-cache scale is one F32 value ([] or [1]), not " +
                                                   std::string(dtype_name(dtype)) + shape_text(shape));
    }
    return scalar_scale(key, shape, DType::kF32);
  };
  std::vector<ParamSpec> out;
  if (l.target == Target::kVllm) {
    out.push_back(f32_param(attn + "attn.k_scale", {}, {scalar(*k)}));
    out.push_back(f32_param(attn + "attn.v_scale", {}, {scalar(*v)}));
    return out;
  }
  if (qkv.kind != LinearQuant::Kind::kFp8Tensor) {
    c.fail("quantization_config", attn + ": the checkpoint has KV-cache scales (" + *k +
                                      "), which TensorRT-LLM keeps only on per-tensor FP8 (FP8QDQ) linears; its "
                                      "qkv_proj here is not one (use --target vllm)");
  }
  for (const bool invert : {false, true}) {
    ParamSpec p =
        f32_param(attn + (invert ? "qkv_proj.inv_kv_scales" : "qkv_proj.kv_scales"), {3}, {scalar(*k), scalar(*v)});
    p.convert.kind = Conversion::Kind::kKvScales;
    p.convert.invert = invert;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace wmap::spec
