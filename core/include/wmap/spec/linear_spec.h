#pragma once
// Spec builders for linears (plain, FP8 block-scaled, NVFP4) and routed MoE experts: the
// parameters of one possibly fused, possibly stacked linear and its quantisation companions.
// Pure functions of their arguments; thread-safe. Part of the plugin ABI (hashed into the build id).

#include <cstdint>
#include <string>
#include <vector>

#include "wmap/spec/layout.h"
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
  // kNvfp4 (compressed-tensors, after the mapping's renames): `weight` U8 [out, in/2] (two FP4
  // values a byte), `weight_scale` F8_E4M3 [out, in/16], `weight_scale_2` and `input_scale`
  // F32 [1] (global scales, inverted on load; the sources of one fused parameter must match).

  static LinearQuant none() { return {}; }
  static LinearQuant fp8(BlockScales b, std::string scale_name, bool whole_blocks) {
    return {Kind::kFp8Block, b, true, std::move(scale_name), whole_blocks};
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
