#pragma once
// What a plugin says a model is, for one rank: its modules in pre-order, each parameter's
// name, per-rank shape, dtype, and how it is filled from checkpoint tensors. Plain data built
// by a plugin and read by the planner; no tensor data is touched.
//
// A parameter's bytes are the concatenation of its pieces. A piece takes one source tensor
// (by canonical key, i.e. after YAML renames), views it with `view` (a reshape), cuts the box
// (one range per view dim), permutes the dims (`perm`, output dim k = view dim perm[k]) and
// appends the result in row-major order; or it appends `zero_elements` zeros (vocabulary
// padding). With `pad`, the cut lands at the leading corner of a larger zero block (an
// engine's padded parameter, or a source padded before its split: docs/plugins.md "Building
// blocks"). An optional named transform then runs in place over the piece's bytes.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wmap/format/dtype.h"
#include "wmap/spec/layout.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct Piece {
  std::string source;                  // canonical key; empty for a zero piece
  std::vector<uint64_t> source_shape;  // the shape the source must have
  std::optional<DType> source_dtype;   // unset: must equal the parameter's dtype
  std::vector<uint64_t> view;          // empty: source_shape
  std::vector<Range> box;              // empty: the whole view
  std::vector<uint32_t> perm;          // empty: identity
  uint64_t zero_elements = 0;          // for a zero piece
  // Zero padding: the output's extent along each output dim (after perm), each at least the
  // box's size along it; the cut fills the leading corner, zeros the rest. Empty: no padding.
  // A box that is empty along a dim (a rank past the end of a padded source) gives all zeros.
  std::vector<uint64_t> pad;
  // View dims whose box is walked backwards (last index first): an engine that stores two
  // streams in the other order ([up; gate] of a [gate, up] dim) takes both in one piece.
  std::vector<uint32_t> reverse;
  std::string transform;  // "" or a registered in-place transform

  bool is_zero() const { return source.empty(); }
};

// A dtype conversion of a whole parameter, done once all its pieces have landed: the pieces are
// assembled one after the other in their source dtypes (their `source_dtype`), then converted
// into the parameter's dtype. For the engines that hold a checkpoint's F32 tensor as BF16, or
// dequantize an FP8 weight while loading it (docs/plugins.md "Building blocks").
struct Conversion {
  enum class Kind : uint8_t {
    kNone,
    kF32ToBf16,        // F32 -> BF16, round to nearest even (torch's copy_); assembled = 2 x the parameter
    kFp8BlockDequant,  // F8_E4M3 [rows, cols] x its F32 block scales -> F32, then the parameter's dtype
    // TensorRT-LLM's per-tensor FP8 load (fp8.md section 7): the F8_E4M3 parts (`parts` bytes
    // each) then one F32 scale per part; each group of `group` parts requantised to its largest
    // scale (format/dtype_convert.h fp8_requant_to_group_max). The parameter: the parts.
    kFp8Requant,
    // F32 max over each `group` of the assembled scales (its reciprocal when `invert`), times the
    // max of the `tail` scales after them when tail > 0: the fused weight/input scale,
    // inv_input_scale, and the fused MoE's fc31_dequant / fc2_dequant / fc2_quant.
    kScaleMax,
    // KV-cache scales [k, v] -> [1, k, v] (`invert`: [1, 1/k, 1/v]): TensorRT-LLM's qkv_proj
    // kv_scales / inv_kv_scales (FP8QDQLinearMethod.load_kv_scales; index 0 is the query's 1.0).
    kKvScales,
    // NVFP4 block scales (bytes) as TensorRT-LLM's load_weights leaves them: the assembled
    // matrices of [rows, cols] bytes (as many as fit), each zero-padded to [pad_rows, pad_cols]
    // and swizzled 128x4 (block_scale_interleave; format/layout_transforms.h).
    kBlockScaleSwizzle,
    // TensorRT-LLM's NVFP4 global-scale arithmetic over F32 values (`scale_op`, groups of `group`
    // assembled values, then `tail` values; exec/nvfp4_conversions.h).
    kNvfp4Scales,
    // torch.cat along the last dim: the assembled blocks (as many as fit) each hold the parts
    // one after the other, part i `rows` x parts[i] bytes; each block becomes `rows` rows of the
    // parts' row bytes side by side (a fused linear whose outputs are its last stored dim: AWQ's
    // and GPTQ's qweight, qzeros and scales). When every piece is one whole part with the block's
    // rows outermost, the executor writes its rows straight into their columns (no second pass).
    kConcatColumns,
    // I64 values -> the parameter's dtype by value (torch's copy_ into a float tensor): vLLM's
    // compressed-tensors Marlin MoE keeps each expert's weight_shape in the model dtype.
    kIntToFloat,
  };
  // kNvfp4Scales: out[i] from group i (g_i) and the tail (t):
  enum class ScaleOp : uint8_t {
    kMax,          // max(g_i): weight_scale_2
    kInvMax,       // 1 / max(g_i): input_scale, fc31_input_scale, fc2_input_scale
    kMaxProduct,   // max(g_i) * max(t): alpha = input_scale x weight_scale_2
    kExpertAlpha,  // 1 / ((1 / max(t)) * (1 / w_i)), w_i = g_i[0], or max(g_i) unless all close to it
    kInvSixth,     // (1 / max(g_i)) * f32(1 / 6): inv_input_scale = input_scale / 6 (E2M1_MAX)
  };
  Kind kind = Kind::kNone;
  // kFp8BlockDequant: the assembled bytes start with the F8_E4M3 weight [rows, cols], then its F32
  // scales [ceil(rows / block_rows), ceil(cols / block_cols)]; they give the parameter's first
  // rows x cols elements (F32 or BF16, RNE). Assembled bytes after them are copied unchanged
  // into the rest of the parameter (vLLM's fused indexer wk_weights_proj: [dequantized wk; weights_proj]).
  uint64_t rows = 0, cols = 0, block_rows = 0, block_cols = 0;
  // kFp8BlockDequant: how many pieces assemble the weight and then its scales (a weight cut from
  // several parts of its source, each with its scale rows).
  uint64_t weight_pieces = 1, scale_pieces = 1;
  uint64_t group = 0, tail = 0;         // kFp8Requant (group), kScaleMax
  bool invert = false;                  // kScaleMax, kKvScales
  std::vector<uint64_t> parts;          // kFp8Requant: bytes of each F8 part, in piece order
  uint64_t pad_rows = 0, pad_cols = 0;  // kBlockScaleSwizzle (rows, cols: each matrix as assembled)
  ScaleOp scale_op = ScaleOp::kMax;     // kNvfp4Scales
  bool operator==(const Conversion&) const = default;
};
// "", "f32_to_bf16", "fp8_block_dequant", "fp8_requant", "scale_max", "kv_scales",
// "block_scale_swizzle", "nvfp4_scales", "concat_columns", "int_to_float"
std::string_view conversion_name(Conversion::Kind kind);
// "max", "inv_max", "max_product", "expert_alpha", "inv_sixth"
std::string_view scale_op_name(Conversion::ScaleOp op);

struct ParamSpec {
  std::string name;
  std::vector<uint64_t> shape;  // per rank
  std::optional<DType> dtype;   // unset: the dtype of the first source
  std::vector<Piece> pieces;
  std::string alias_of;   // shares that parameter's data (tied embeddings); no pieces
  bool optional = false;  // when its sources are absent the parameter is not loaded
  // Pairs of source keys whose bytes must be equal (e.g. the global scales of fused NVFP4
  // sources); checked when the data is read, a difference is an error naming both keys.
  std::vector<std::pair<std::string, std::string>> must_match;
  // The pairs need only agree as F32 values within |a-b| <= 1e-8 + 1e-5*|b| (torch.allclose's
  // default), as TensorRT-LLM compares a routed expert's w3/w1 global scales.
  bool must_match_close = false;
  Conversion convert;  // none: the pieces' bytes are the parameter's
  // The parameters (by name, in this spec) that hold this one's quantisation scales: an FP8
  // weight's `weight_scale_inv`, an NVFP4 weight's `weight_scale`, `weight_scale_2` and
  // `input_scale`, an MXFP4 weight's block scales. The plan refuses the weight unless each is
  // declared and loaded (not absent, not broken), and refuses an F4/F6/F8 parameter (held as
  // such) that declares none and is no parameter's scale (LoadPlan's coverage certificate).
  std::vector<std::string> scales;
};

struct ModuleSpec {
  std::string name;
  std::vector<ParamSpec> params;
  // Checkpoint subtrees (canonical prefixes) this module is handed whole: keys under them that
  // this rank does not read (e.g. other ranks' experts) count as consumed.
  std::vector<std::string> subtrees;
};

// Which pipeline stage holds each module (Layout::pp_size > 1), as the target engine places it.
// Decoder layer i, a module named `<layer_prefix><i>` or below `<layer_prefix><i>.`, is on the
// stage whose Layout::pp_layers(layers) holds i; a layer numbered `layers` or more (an MTP
// layer, which both engines run after the last decoder layer) is on the last stage. Modules
// named in `first` are on the first stage, in `last` on the last (in both: on both, as vLLM
// keeps a tied embedding). The host (PluginHost::build_spec) keeps this stage's modules and
// lists the others' checkpoint keys in ModelSpec::other_ranks, so a stage reads only its own bytes; a kept
// alias of a dropped parameter (TensorRT-LLM's tied lm_head on a last stage without the
// embedding) becomes a copy of its pieces. Under pp_size > 1 a spec with `layers` 0, or a
// module placed nowhere, is refused: the plugin does not say where the engine puts it.
struct PipelineSpec {
  uint64_t layers = 0;  // the decoder layers split over the stages (config num_hidden_layers)
  std::string layer_prefix = "model.layers.";
  std::vector<std::string> first;  // module names
  std::vector<std::string> last;   // module names
};

struct ModelSpec {
  std::string plugin;
  std::string architecture;
  // The layout the spec was built for, recorded by the plugin host (PluginHost::build_spec);
  // the plan takes it from here, never from a second copy.
  Layout layout;
  std::vector<ModuleSpec> modules;            // pre-order
  std::vector<std::string> skipped_prefixes;  // checkpoint subtrees declared not loaded ("x" covers "x.*")
  std::vector<std::string> skipped_keys;      // single checkpoint keys declared not loaded
  // Checkpoint subtrees other ranks load ("x" covers "x.*"): another pipeline stage's modules.
  // Consumed here, never read; the coverage counts them as left to other ranks.
  std::vector<std::string> other_ranks;
  PipelineSpec pipeline;
};

// Builders for the common pieces and parameters, so plugins state semantics, not arithmetic.
namespace spec {

Piece whole(std::string source, std::vector<uint64_t> shape);
Piece rows(std::string source, std::vector<uint64_t> shape, Range r);  // dim 0 range
Piece cols(std::string source, std::vector<uint64_t> shape, Range c);  // dim 1 range
Piece zeros(uint64_t elements);
// `elements` values of 1.0 in the parameter's dtype (F32, BF16, F16; set ParamSpec::dtype): a
// constant the engine writes inside its own load_weights into a parameter it created empty
// (TensorRT-LLM's fake_input_scale.fill_(1.)), which a load into the engine's buffers must write.
Piece ones(uint64_t elements);

ParamSpec replicated(std::string name, std::string source, std::vector<uint64_t> shape);
// Column-parallel: dim 0 split by `s` (the shard rule; exact under target vllm).
ParamSpec column_parallel(std::string name, std::string source, std::vector<uint64_t> shape, const Split& s);
// Row-parallel: dim 1 split by `s`; a 1-D tensor is replicated.
ParamSpec row_parallel(std::string name, std::string source, std::vector<uint64_t> shape, const Split& s);
// Vocabulary-parallel: dim 0 split by `s` with the target's padding (Layout::vocab_shard): the
// rank's checkpoint rows, then zero rows up to the padded size.
ParamSpec vocab_parallel(std::string name, std::string source, std::vector<uint64_t> shape, const Layout& l,
                         const Split& s);
ParamSpec vocab_parallel(std::string name, std::string source, std::vector<uint64_t> shape,
                         const Layout& l);  // split by l.tp()
// Concatenation (along dim 0) of the column-parallel slices of several sources.
ParamSpec fused_column_parallel(std::string name,
                                const std::vector<std::pair<std::string, std::vector<uint64_t>>>& sources,
                                const Split& s);
ParamSpec alias(std::string name, std::string of, std::vector<uint64_t> shape);

// --- Building blocks for source layouts beyond Llama's (docs/plugins.md "Building blocks") ---
// Zero padding: `p` with its output padded to `extents` (Piece::pad, one per output dim).
Piece padded(Piece p, std::vector<uint64_t> extents);
// An exact cast of a BF16 cut into an F32 parameter (an engine holding a checkpoint's BF16
// tensor as float32: vLLM's GLM router, TensorRT-LLM's gpt-oss sinks): the piece's output is
// padded to twice its outermost extent, so its BF16 values stay contiguous ahead of room for the
// widening, and the built-in `bf16_to_f32` transform widens them in place (bits << 16). The
// parameter's dtype must be F32 and its shape the cut's. Throws kInvalidArgument for a piece
// already padded or transformed, or a scalar.
Piece widened_bf16_to_f32(Piece p);
// The same for an F16 cut (transform `f16_to_f32`, exact: subnormals normalised, NaN payloads kept).
Piece widened_f16_to_f32(Piece p);
// `p` (whose pieces are F32 cuts) held as BF16, rounded to nearest even once assembled.
ParamSpec narrowed_to_bf16(ParamSpec p);
// An F8_E4M3 weight cut [rows, cols] and its F32 block-scale cut, dequantized (w x scale in F32)
// into the first rows x cols elements of a BF16 or F32 parameter; pieces after these two are
// copied after them. `p`'s shape and dtype are the parameter's; its first two pieces the weight and the scales.
ParamSpec fp8_block_dequantized(ParamSpec p, uint64_t rows, uint64_t cols, uint64_t block_rows, uint64_t block_cols);
// The same with the weight assembled from its first `weight_pieces` pieces and the scales from
// the next `scale_pieces` (each part's block rows, so the assembled scales are the assembled
// weight's blocks).
ParamSpec fp8_block_dequantized(ParamSpec p, uint64_t rows, uint64_t cols, uint64_t block_rows, uint64_t block_cols,
                                uint64_t weight_pieces, uint64_t scale_pieces);
// A split of a dimension padded before the split (TensorRT-LLM pads MXFP4 experts to an
// alignment, then ceil-splits): part s.rank of `padded_width` split by `s`, as the source range
// it covers (clipped to `width`, possibly empty) and the part's size (rows past `width` are zeros).
struct PaddedPart {
  Range source;
  uint64_t size = 0;
};
PaddedPart padded_split(uint64_t width, uint64_t padded_width, const Split& s);
// Row interleave: stream `phase` of `ways` streams interleaved along dim `dim` of `shape` (row
// i*ways + phase is row i of the stream; gpt-oss gate/up rows 2j, 2j+1). The piece's view
// splits that dim into [shape[dim]/ways, ways]; `rows` are stream rows, `box` gives the other
// dims of `shape` (empty: whole; else one range per dim of shape, the one at `dim` ignored).
// The output keeps the split (a dim of 1 after `dim`): pad it with rank + 1 extents.
Piece interleaved(std::string source, std::vector<uint64_t> shape, size_t dim, uint64_t ways, uint64_t phase,
                  Range rows, std::vector<Range> box = {});
// A permutation within heads: rows of a [heads * head_rows, cols...] tensor viewed as
// [heads, head_rows / pairs..., ...]: the rows of `heads`, each head's rows reordered from
// interleaved pairs (2i, 2i+1) to halves (even rows, then odd: vLLM's Llama 4 q/k rotary order,
// permute_qk_weight_for_rotary).
Piece pairs_to_halves(std::string source, std::vector<uint64_t> shape, uint64_t head_rows, Range heads);
// Packed groups (MXFP4: one E8M0 scale per 32 elements): the groups covering elements `r` of a
// dimension of `width`. Throws kInvalidArgument naming `tensor` unless r starts on a group
// boundary and ends on one or at `width`.
Range whole_groups(Range r, uint64_t group, uint64_t width, std::string_view tensor);
// A rank-dependent zero: `p` as it is when `keep`, else all zeros of its shape (vLLM's gpt-oss
// w2_bias on tensor-parallel ranks other than 0). `p.dtype` must be set (zeros have no source
// to take it from); hand the sources to the module as a subtree so they still count as consumed.
ParamSpec zero_unless(bool keep, ParamSpec p);

// Appends the `lm_head` module, vocabulary-parallel over `s`: `lm_head.weight` from the
// checkpoint, or, when tied, (trtllm) an alias of `embed_param` (read once and still listed as a
// parameter) or (vllm: LlamaForCausalLM ties lm_head to embed_tokens, so load_weights fills
// embed_tokens only) no lm_head parameter at all. Tied, a stray checkpoint `lm_head.weight` is
// declared skipped.
void add_lm_head(ModelSpec& m, const std::string& embed_param, uint64_t vocab, uint64_t hidden, bool tie,
                 const Layout& l, const Split& s);
void add_lm_head(ModelSpec& m, const std::string& embed_param, uint64_t vocab, uint64_t hidden, bool tie,
                 const Layout& l);  // over l.tp()

// The stage placement (ModelSpec::pipeline) of a decoder-only family: `layers` decoder layers
// under `layer_prefix`, `embed_module` on the first stage, `norm_module` and `head_module`
// (when the spec has one) on the last. Tied embeddings under target vllm put the
// embedding on the last stage too (vLLM builds embed_tokens where lm_head ties to it); under
// trtllm the last stage's lm_head alias becomes a copy of the embedding (keep_pipeline_stage).
void place_stages(ModelSpec& m, uint64_t layers, const std::string& embed_module, const std::string& norm_module,
                  bool tie, const Layout& l, const std::string& layer_prefix = "model.layers.",
                  const std::string& head_module = "lm_head");

// KV-head duplication: the rows (of a [kv_heads * unit_rows, ...] tensor) of this rank's KV
// heads (Layout::local_kv_heads, which throws kInvalidArgument when neither of kv_heads and
// tp_size divides the other).
Range kv_head_rows(uint64_t kv_heads, uint64_t unit_rows, const Layout& l);

}  // namespace spec
}  // namespace wmap
WMAP_PUBLIC_END
