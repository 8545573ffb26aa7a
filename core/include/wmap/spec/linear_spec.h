#pragma once
// Spec builders for linears (plain, FP8 block-scaled, NVFP4) and routed MoE experts: the
// parameters of one possibly fused, possibly stacked linear and its quantisation companions.
// Pure functions of their arguments; thread-safe. Part of the plugin ABI (hashed into the build id).

#include <cstdint>
#include <string>
#include <vector>

#include "wmap/spec/key_probe.h"
#include "wmap/spec/layout.h"
#include "wmap/spec/model_config.h"
#include "wmap/spec/model_spec.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap::spec {

// A slice of one checkpoint linear (`linear` is its prefix: `linear + ".weight"`).
struct LinearSlice {
  std::string linear;
  std::vector<uint64_t> shape;  // the weight's [out, in]
  Range rows;
  Range cols;
};
LinearSlice whole_linear(std::string linear, std::vector<uint64_t> shape);
LinearSlice linear_rows(std::string linear, std::vector<uint64_t> shape, Range rows);  // column-parallel part
LinearSlice linear_cols(std::string linear, std::vector<uint64_t> shape, Range cols);  // row-parallel part
// This rank's part under split `s` (exact under target vllm: the error names `linear`.weight).
LinearSlice linear_rows(std::string linear, std::vector<uint64_t> shape, const Split& s);
LinearSlice linear_cols(std::string linear, std::vector<uint64_t> shape, const Split& s);
// A part of a linear the checkpoint stores fused (Phi-3's qkv_proj rows [q; k; v], gate_up_proj
// [gate; up]): the part is rows `part` of the fused weight `shape`, cut before the split, and
// `rows` are rows of the part (this rank's, as for an unfused linear). Throws kInvalidArgument
// naming the weight when `part` is not inside it or `rows` not inside the part.
LinearSlice fused_part_rows(std::string linear, std::vector<uint64_t> shape, Range part, Range rows);
// The same with the part split by `s` (exact under target vllm: the error names the part).
LinearSlice fused_part_rows(std::string linear, std::vector<uint64_t> shape, Range part, const Split& s);

// FP8 block quantisation: `weight_scale_inv` holds one F32 per [rows x cols] block of the weight.
struct BlockScales {
  uint64_t rows = 128;
  uint64_t cols = 128;
};
// The block range covering weight range r along a dim of block size b: [r.begin/b, ceil(r.end/b)).
Range block_range(Range r, uint64_t b);

// How a checkpoint's linears are quantised, and so which companion tensors follow each weight.
struct LinearQuant {
  enum class Kind { kNone, kFp8Block, kNvfp4 };
  Kind kind = Kind::kNone;
  BlockScales blocks;         // kFp8Block: `weight_scale_inv` F32 per block
  bool strict_global = true;  // kNvfp4: dense layers reject a non-finite or <= 0 global scale
  // kFp8Block: the parameter's name for the checkpoint's `weight_scale_inv` (TensorRT-LLM:
  // `weight_scale`, experts `weight_scaling_factor`; vLLM keeps `weight_scale_inv`).
  std::string scale_name = "weight_scale_inv";
  // kFp8Block: every split part, and every fused part but the last, must cover whole blocks
  // (vLLM refuses other partitions: fp8_utils.py, validate_fp8_block_shape); an error names the
  // linear otherwise. Off: a part takes every block it touches.
  bool whole_blocks = false;
  // kFp8Block: the dtype the checkpoint stores `weight_scale_inv` in (F32, BF16 or F16: Qwen3's
  // dense FP8 releases store BF16); the parameter is F32 either way, widened exactly, as both
  // engines' F32 scale parameters take the checkpoint's scale through copy_.
  DType scale_dtype = DType::kF32;
  // kNvfp4 (compressed-tensors, after the mapping's renames): `weight` U8 [out, in/2] (two FP4
  // values a byte), `weight_scale` F8_E4M3 [out, in/16], `weight_scale_2` and `input_scale`
  // F32 [1] (global scales, inverted on load; the sources of one fused parameter must match).

  static LinearQuant none() { return {}; }
  static LinearQuant fp8(BlockScales b, std::string scale_name, bool whole_blocks, DType scale_dtype = DType::kF32) {
    return {Kind::kFp8Block, b, true, std::move(scale_name), whole_blocks, scale_dtype};
  }
  static LinearQuant nvfp4(bool strict) { return {Kind::kNvfp4, {}, strict}; }
  // Columns of the stored weight for `in` input features (packed bytes for NVFP4).
  uint64_t stored_cols(uint64_t in) const { return kind == Kind::kNvfp4 ? in / 2 : in; }
};

// Appends the parameters of one (possibly fused, possibly stacked) linear: `dst + sep + "weight"`
// = the concatenation (dim 0) of the slices' weights, shaped `leading` + [rows, cols]
// (rows = total / prod(leading)); and the quantisation's companions under the same prefix
// (quant.scale_name; or `weight_scale`, `weight_scale_2`, `input_scale`). Slices are in the
// stored weight's units (packed bytes for NVFP4 columns). With `leading`, the slices form
// prod(leading) equal groups (e.g. experts), each contributing one global scale. A quantised
// weight names its companions in ParamSpec::scales.
void add_linear(std::vector<ParamSpec>& params, const std::string& dst, const std::string& sep,
                const std::vector<LinearSlice>& slices, const LinearQuant& quant,
                const std::vector<uint64_t>& leading = {});

// What the checkpoint's quantisation format makes of one linear, for every family (the format is
// core knowledge, a plugin only says which linear and whether it is a routed expert's):
// - quant_method "fp8" with weight_block_size (block FP8) and the linear's `weight_scale_inv`
//   present: kFp8Block, its scale named as the target names it (trtllm: `weight_scale`, a routed
//   expert's `weight_scaling_factor`; vllm: `weight_scale_inv`), parts of whole blocks only
//   (vLLM's validate_fp8_block_shape; TensorRT-LLM copies block scales by ceil-split offsets, so
//   a part cutting a block would load misaligned scales), the scale's dtype from the checkpoint;
// - a linear without its scale: none (a module the checkpoint leaves unquantised:
//   modules_to_not_convert / ignore);
// - compressed-tensors with `weight_scale` (after the mapping's renames): kNvfp4 (`strict` for a
//   dense layer's global scales).
// Throws kInvalidArgument (naming the config field or the tensor) for a block size that is not
// two positive integers, quant_method "fp8" without weight_block_size (per-tensor FP8, not served
// yet) or a scale dtype other than F32/BF16/F16.
enum class LinearRole { kDense, kExpert };
LinearQuant linear_quant(const ModelConfig& config, const Layout& l, const KeyProbe& probe, const std::string& linear,
                         LinearRole role, bool strict = true);

// How an engine names and orders a routed-expert layer's stacked parameters.
struct ExpertNames {
  std::string fused = "w3_w1";  // `dst.<fused>_weight`: per expert concat of up and gate rows
  std::string down = "w2";      // `dst.<down>_weight`
  bool gate_first = false;      // TensorRT-LLM: [up; gate] (w3_w1); vLLM: [gate; up] (w13)
  // NVFP4: the fused sources' global scales need only agree within torch.allclose's default
  // tolerance (TensorRT-LLM's fused-MoE weight loading asserts allclose, not equality).
  bool globals_close = true;
};

// Routed experts of one MoE layer (DESIGN.md "MoE experts"): this rank's experts
// (Layout::local_experts) in order; `dst` + "." + names.fused + "_weight" [E_r, 2*I/moe_tp, H] =
// per expert concat of up and gate rows of moe_tp_rank (in names' order); `dst` + "." +
// names.down + "_weight" [E_r, H, I/moe_tp] = down, row-split; quantisation companions likewise
// (`<fused>_<quant.scale_name>`, ...). Sources are `src.j.{gate,up,down}_proj`. Throws
// kInvalidArgument when the layout cannot split the experts (Layout::local_experts) or, under
// exact splits, the intermediate size.
std::vector<ParamSpec> moe_experts(const std::string& dst, const std::string& src, uint64_t experts,
                                   uint64_t intermediate, uint64_t hidden, const Layout& l, const LinearQuant& quant,
                                   const ExpertNames& names = {});

}  // namespace wmap::spec
WMAP_PUBLIC_END
