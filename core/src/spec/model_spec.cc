// The ModelSpec builders shared by every plugin.
#include "wmap/spec/model_spec.h"

#include <algorithm>

#include "wmap/format/tensor_record.h"
#include "wmap/spec/config_bounds.h"
#include "wmap/util/error.h"

namespace wmap {

std::string_view conversion_name(Conversion::Kind kind) {
  switch (kind) {
    case Conversion::Kind::kNone: return "";
    case Conversion::Kind::kF32ToBf16: return "f32_to_bf16";
    case Conversion::Kind::kFp8BlockDequant: return "fp8_block_dequant";
    case Conversion::Kind::kFp8Requant: return "fp8_requant";
    case Conversion::Kind::kScaleMax: return "scale_max";
    case Conversion::Kind::kKvScales: return "kv_scales";
    case Conversion::Kind::kBlockScaleSwizzle: return "block_scale_swizzle";
    case Conversion::Kind::kNvfp4Scales: return "nvfp4_scales";
    case Conversion::Kind::kConcatColumns: return "concat_columns";
    case Conversion::Kind::kIntToFloat: return "int_to_float";
  }
  return "?";
}

std::string_view scale_op_name(Conversion::ScaleOp op) {
  switch (op) {
    case Conversion::ScaleOp::kMax: return "max";
    case Conversion::ScaleOp::kInvMax: return "inv_max";
    case Conversion::ScaleOp::kMaxProduct: return "max_product";
    case Conversion::ScaleOp::kExpertAlpha: return "expert_alpha";
    case Conversion::ScaleOp::kInvSixth: return "inv_sixth";
  }
  return "?";
}

namespace spec {

Piece whole(std::string source, std::vector<uint64_t> shape) {
  Piece p;
  p.source = std::move(source);
  p.source_shape = std::move(shape);
  return p;
}

Piece rows(std::string source, std::vector<uint64_t> shape, Range r) {
  Piece p = whole(std::move(source), std::move(shape));
  p.box.resize(p.source_shape.size());
  for (size_t d = 0; d < p.box.size(); ++d) p.box[d] = {0, p.source_shape[d]};
  if (!p.box.empty()) p.box[0] = r;
  return p;
}

Piece cols(std::string source, std::vector<uint64_t> shape, Range c) {
  const Range all_rows{0, shape.empty() ? 0 : shape[0]};
  Piece p = rows(std::move(source), std::move(shape), all_rows);
  if (p.box.size() >= 2) p.box[1] = c;
  return p;
}

Piece zeros(uint64_t elements) {
  Piece p;
  p.zero_elements = elements;
  return p;
}

Piece ones(uint64_t elements) {
  Piece p = zeros(elements);
  p.transform = "fill_one";  // core/src/format/layout_transforms.cc
  return p;
}

ParamSpec replicated(std::string name, std::string source, std::vector<uint64_t> shape) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = shape;
  s.pieces.push_back(whole(std::move(source), std::move(shape)));
  return s;
}

ParamSpec column_parallel(std::string name, std::string source, std::vector<uint64_t> shape, const Split& sp) {
  const Range r = sp.slice(shape.at(0), source);
  ParamSpec s;
  s.name = std::move(name);
  s.shape = shape;
  s.shape[0] = r.size();
  s.pieces.push_back(rows(std::move(source), std::move(shape), r));
  return s;
}

ParamSpec row_parallel(std::string name, std::string source, std::vector<uint64_t> shape, const Split& sp) {
  if (shape.size() < 2) return replicated(std::move(name), std::move(source), std::move(shape));
  const Range c = sp.slice(shape[1], source);
  ParamSpec s;
  s.name = std::move(name);
  s.shape = shape;
  s.shape[1] = c.size();
  s.pieces.push_back(cols(std::move(source), std::move(shape), c));
  return s;
}

ParamSpec vocab_parallel(std::string name, std::string source, std::vector<uint64_t> shape, const Layout& l,
                         const Split& sp) {
  const VocabShard v = l.vocab_shard(shape.at(0), sp);
  uint64_t row_elements = 1;
  for (size_t d = 1; d < shape.size(); ++d)
    row_elements = checked_mul(row_elements, shape[d], source + ": a row's elements");
  const uint64_t padding = v.rows - v.source.size();
  const uint64_t padding_elements = padding ? checked_mul(padding, row_elements, source + ": padding elements") : 0;
  ParamSpec s;
  s.name = std::move(name);
  s.shape = shape;
  s.shape[0] = v.rows;
  s.pieces.push_back(rows(std::move(source), std::move(shape), v.source));
  if (padding) s.pieces.push_back(zeros(padding_elements));
  return s;
}

ParamSpec vocab_parallel(std::string name, std::string source, std::vector<uint64_t> shape, const Layout& l) {
  return vocab_parallel(std::move(name), std::move(source), std::move(shape), l, l.tp());
}

ParamSpec fused_column_parallel(std::string name,
                                const std::vector<std::pair<std::string, std::vector<uint64_t>>>& sources,
                                const Split& sp) {
  ParamSpec s;
  s.name = std::move(name);
  for (const auto& [source, shape] : sources) {
    const Range r = sp.slice(shape.at(0), source);
    if (s.shape.empty()) {
      s.shape = shape;
      s.shape[0] = 0;
    }
    s.shape[0] += r.size();
    s.pieces.push_back(rows(source, shape, r));
  }
  return s;
}

ParamSpec alias(std::string name, std::string of, std::vector<uint64_t> shape) {
  ParamSpec s;
  s.name = std::move(name);
  s.alias_of = std::move(of);
  s.shape = std::move(shape);
  return s;
}

Piece padded(Piece p, std::vector<uint64_t> extents) {
  p.pad = std::move(extents);
  return p;
}

namespace {
Piece widened_to_f32(Piece p, DType from, const char* transform) {
  const std::vector<uint64_t>& dims = p.view.empty() ? p.source_shape : p.view;
  if (!p.pad.empty() || !p.transform.empty() || dims.empty() || p.is_zero()) {
    throw Error(ErrorCode::kInvalidArgument,
                p.source + ": widening " + std::string(dtype_name(from)) +
                    " to F32 needs a plain cut of at least one dim (not a zero, padded or transformed piece)");
  }
  std::vector<uint64_t> out;
  for (size_t k = 0; k < dims.size(); ++k) {
    const size_t d = p.perm.empty() ? k : p.perm[k];
    out.push_back(p.box.empty() ? dims[d] : p.box[d].size());
  }
  out[0] *= 2;
  p.source_dtype = from;
  p.pad = std::move(out);
  p.transform = transform;
  return p;
}
}  // namespace

Piece widened_bf16_to_f32(Piece p) { return widened_to_f32(std::move(p), DType::kBF16, "bf16_to_f32"); }

Piece widened_f16_to_f32(Piece p) { return widened_to_f32(std::move(p), DType::kF16, "f16_to_f32"); }

ParamSpec narrowed_to_bf16(ParamSpec p) {
  for (Piece& piece : p.pieces) piece.source_dtype = DType::kF32;
  p.dtype = DType::kBF16;
  p.convert.kind = Conversion::Kind::kF32ToBf16;
  return p;
}

ParamSpec fp8_block_dequantized(ParamSpec p, uint64_t rows, uint64_t cols, uint64_t block_rows, uint64_t block_cols) {
  return fp8_block_dequantized(std::move(p), rows, cols, block_rows, block_cols, 1, 1);
}

ParamSpec fp8_block_dequantized(ParamSpec p, uint64_t rows, uint64_t cols, uint64_t block_rows, uint64_t block_cols,
                                uint64_t weight_pieces, uint64_t scale_pieces) {
  if (weight_pieces == 0 || scale_pieces == 0 || p.pieces.size() < weight_pieces + scale_pieces || block_rows == 0 ||
      block_cols == 0) {
    throw Error(ErrorCode::kInvalidArgument,
                p.name + ": fp8_block_dequantized needs weight pieces, scale pieces and non-zero blocks");
  }
  for (uint64_t i = 0; i < weight_pieces + scale_pieces; ++i) {
    p.pieces[i].source_dtype = i < weight_pieces ? DType::kF8_E4M3 : DType::kF32;
  }
  p.convert = Conversion{};
  p.convert.kind = Conversion::Kind::kFp8BlockDequant;
  p.convert.rows = rows;
  p.convert.cols = cols;
  p.convert.block_rows = block_rows;
  p.convert.block_cols = block_cols;
  p.convert.weight_pieces = weight_pieces;
  p.convert.scale_pieces = scale_pieces;
  return p;
}

PaddedPart padded_split(uint64_t width, uint64_t padded_width, const Split& s) {
  const Range part = shard_range(padded_width, s.size, s.rank);
  return {{std::min(part.begin, width), std::min(part.end, width)}, ceil_div(padded_width, s.size)};
}

Piece interleaved(std::string source, std::vector<uint64_t> shape, size_t dim, uint64_t ways, uint64_t phase,
                  Range rows, std::vector<Range> box) {
  if (dim >= shape.size() || ways == 0 || phase >= ways || shape[dim] % ways != 0)
    throw Error(ErrorCode::kInvalidArgument, source + ": cannot take stream " + std::to_string(phase) + " of " +
                                                 std::to_string(ways) + " along dim " + std::to_string(dim) +
                                                 " of shape " + shape_text(shape));
  Piece p;
  p.source = std::move(source);
  p.source_shape = shape;
  for (size_t d = 0; d < shape.size(); ++d) {
    p.view.push_back(d == dim ? shape[d] / ways : shape[d]);
    p.box.push_back(d == dim ? rows : box.empty() ? Range{0, shape[d]} : box.at(d));
    if (d == dim) {
      p.view.push_back(ways);
      p.box.push_back({phase, phase + 1});
    }
  }
  return p;
}

Piece pairs_to_halves(std::string source, std::vector<uint64_t> shape, uint64_t head_rows, Range heads) {
  if (shape.empty() || head_rows == 0 || head_rows % 2 != 0 || shape[0] % head_rows != 0)
    throw Error(ErrorCode::kInvalidArgument, source + ": rows " + shape_text(shape) + " are not whole heads of " +
                                                 std::to_string(head_rows) + " (an even count) rows");
  Piece p;
  p.source = std::move(source);
  p.source_shape = shape;
  p.view = {shape[0] / head_rows, head_rows / 2, 2};
  p.box = {heads, {0, head_rows / 2}, {0, 2}};
  p.perm = {0, 2, 1};
  for (size_t d = 1; d < shape.size(); ++d) {
    p.view.push_back(shape[d]);
    p.box.push_back({0, shape[d]});
    p.perm.push_back(static_cast<uint32_t>(d + 2));
  }
  return p;
}

Range whole_groups(Range r, uint64_t group, uint64_t width, std::string_view tensor) {
  if (group == 0 || r.begin % group != 0 || (r.end % group != 0 && r.end != width)) {
    throw Error(ErrorCode::kInvalidArgument, std::string(tensor) + ": elements [" + std::to_string(r.begin) + ", " +
                                                 std::to_string(r.end) + ") of " + std::to_string(width) +
                                                 " do not start and end on a group of " + std::to_string(group) +
                                                 " (each group shares one scale; a split must not cut one)");
  }
  return {r.begin / group, ceil_div(r.end, group)};
}

ParamSpec zero_unless(bool keep, ParamSpec p) {
  if (!p.dtype) throw Error(ErrorCode::kInvalidArgument, p.name + ": zero_unless needs the parameter's dtype");
  if (keep) return p;
  uint64_t n = 1;
  for (uint64_t d : p.shape) n *= d;
  p.pieces = {zeros(n)};
  p.must_match.clear();
  return p;
}

void add_lm_head(ModelSpec& m, const std::string& embed_param, uint64_t vocab, uint64_t hidden, bool tie,
                 const Layout& l, const Split& s) {
  if (!tie) {
    m.modules.push_back({"lm_head", {vocab_parallel("lm_head.weight", "lm_head.weight", {vocab, hidden}, l, s)}, {}});
    return;
  }
  m.skipped_keys.push_back("lm_head.weight");  // some tied checkpoints still carry a copy
  if (l.target == Target::kVllm) return;
  m.modules.push_back({"lm_head", {alias("lm_head.weight", embed_param, {l.vocab_shard(vocab, s).rows, hidden})}, {}});
}

void add_lm_head(ModelSpec& m, const std::string& embed_param, uint64_t vocab, uint64_t hidden, bool tie,
                 const Layout& l) {
  add_lm_head(m, embed_param, vocab, hidden, tie, l, l.tp());
}

void place_stages(ModelSpec& m, uint64_t layers, const std::string& embed_module, const std::string& norm_module,
                  bool tie, const Layout& l, const std::string& layer_prefix, const std::string& head_module) {
  m.pipeline.layers = layers;
  m.pipeline.layer_prefix = layer_prefix;
  m.pipeline.first.push_back(embed_module);
  // vllm/model_executor/models/llama.py (09f030ea) LlamaModel.__init__: `if get_pp_group().is_first_rank or
  // (config.tie_word_embeddings and get_pp_group().is_last_rank): self.embed_tokens = VocabParallelEmbedding(...)`;
  // LlamaForCausalLM then ties lm_head to it, so the last stage's only copy is embed_tokens.weight.
  if (tie && l.target == Target::kVllm) m.pipeline.last.push_back(embed_module);
  m.pipeline.last.push_back(norm_module);
  for (const ModuleSpec& mod : m.modules) {
    if (mod.name == head_module) m.pipeline.last.push_back(mod.name);
  }
}

Range kv_head_rows(uint64_t kv_heads, uint64_t unit_rows, const Layout& l) {
  const Range heads = l.local_kv_heads(kv_heads);
  return {heads.begin * unit_rows, heads.end * unit_rows};
}

}  // namespace spec
}  // namespace wmap
