#pragma once
// Spec builders for linears (plain, FP8 block-scaled, NVFP4) and routed MoE experts: the
// parameters of one possibly fused, possibly stacked linear and its quantisation companions.
// Pure functions of their arguments; thread-safe. Part of the plugin ABI (hashed into the build id).

#include <cstdint>
#include <optional>
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
  // kFp8Tensor: one F32 `weight_scale` per weight (ModelOpt, AutoFP8, compressed-tensors
  // strategy tensor); kFp8Channel: `weight_scale` [out, 1] (compressed-tensors strategy channel).
  enum class Kind { kNone, kFp8Block, kNvfp4, kFp8Tensor, kFp8Channel, kInt4 };
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
  // kNvfp4 (int4-nvfp4.md section 6; after mappings/rules/nvfp4.yaml renamed compressed-tensors'
  // keys to ModelOpt's): `weight` U8 [out, in/2] (two FP4 values a byte), `weight_scale`
  // F8_E4M3 [out, in/16], `weight_scale_2` and `input_scale` F32 global scales.
  enum class Nvfp4Params {
    kVllmModelOpt,    // ModelOptNvFp4LinearMethod / FusedMoE: raw bytes, one global-scale slot per part
    kVllmCompressed,  // CompressedTensorsW4A4Fp4: the same under the checkpoint's names (weight_packed, ...)
    kTrtllm,          // NVFP4LinearMethod / NVFP4CutlassFusedMoEMethod: swizzled scales, inverted input scale, alpha
  };
  Nvfp4Params nvfp4_params = Nvfp4Params::kTrtllm;
  // kNvfp4: the checkpoint's global scales are 1 / ModelOpt's (compressed-tensors); TensorRT-LLM
  // inverts them on load (x > 0 ? 1/x : 0), vLLM keeps them as stored.
  bool inverted_globals = false;

  // kFp8Tensor: a static per-tensor `input_scale` follows each weight (F32, the stored shape
  // `scalar_shape` as the weight_scale's).
  bool input_scale = false;
  // kFp8Tensor: the stored shape of each per-tensor scale: [] (ModelOpt, AutoFP8) or [1]
  // (compressed-tensors).
  std::vector<uint64_t> scalar_shape;
  // kFp8Tensor under TensorRT-LLM (FP8QDQLinearMethod, FP8QDQFusedMoEMethod): inside its
  // load_weights the parts of a fused weight are requantised to their largest scale, and the
  // scale parameters are the reductions it stores (fp8.md section 7). vLLM keeps one scale per
  // part ([3] for q/k/v, [2] for gate/up) and the raw weight bytes.
  bool requantise = false;
  // kFp8Channel under TensorRT-LLM (FP8RowwiseLinearMethod): `weight_scale` flattened to [out].
  bool flat_channel = false;

  // kInt4 (int4-nvfp4.md sections 3 to 5; vLLM only): slices are in the weight's logical
  // [out, in] units, the layouts are the format's (Int4Format).
  enum class Int4Source { kAwq, kGptq, kCompressedTensors };
  Int4Source int4_source = Int4Source::kAwq;
  uint64_t group = 0;      // kInt4: inputs per scale (0: one per output channel)
  bool symmetric = true;   // kInt4 compressed-tensors: no weight_zero_point
  bool act_order = false;  // kInt4: a g_idx per input; a row-parallel rank holds every group's scales

  static LinearQuant none() { return {}; }
  static LinearQuant fp8(BlockScales b, std::string scale_name, bool whole_blocks, DType scale_dtype = DType::kF32) {
    LinearQuant q;
    q.kind = Kind::kFp8Block;
    q.blocks = b;
    q.scale_name = std::move(scale_name);
    q.whole_blocks = whole_blocks;
    q.scale_dtype = scale_dtype;
    return q;
  }
  static LinearQuant nvfp4(Nvfp4Params params, bool inverted_globals, bool strict) {
    LinearQuant q;
    q.kind = Kind::kNvfp4;
    q.nvfp4_params = params;
    q.inverted_globals = inverted_globals;
    q.strict_global = strict;
    return q;
  }
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
// - NVFP4 (ModelOpt quant_algo NVFP4, compressed-tensors nvfp4-pack-quantized) with the linear's
//   `weight_scale`: kNvfp4 as the target's load_weights leaves it (`strict` for a dense layer's
//   global scales); a linear the exclude_modules / ignore list names must have no scale, any
//   other one must have it.
// - per-tensor FP8 (ModelOpt quant_algo FP8, AutoFP8, compressed-tensors strategy tensor) and
//   per-channel FP8 (compressed-tensors strategy channel) with the linear's `weight_scale`:
//   kFp8Tensor / kFp8Channel as the target's load_weights leaves them (requantised fused parts
//   under trtllm). A linear the config's exclude_modules / ignore lists must have no scale, any
//   other one must have it: an engine decides from the list, so a disagreement would load wrong.
// Throws kInvalidArgument (naming the config field or the tensor) for a block size that is not
// two positive integers, a scale dtype other than F32/BF16/F16, a per-tensor scale that is not
// one value, a list/scale disagreement, or a combination the target refuses (trtllm per-channel
// experts: no rowwise FP8 MoE method).
// `whole_blocks` false: a block-FP8 part takes every block it touches (TensorRT-LLM's DeepSeek
// loader splits by whole blocks itself, the gcd rule), so no partition is refused for it.
enum class LinearRole { kDense, kExpert };
LinearQuant linear_quant(const ModelConfig& config, const Layout& l, const KeyProbe& probe, const std::string& linear,
                         LinearRole role, bool strict = true, bool whole_blocks = true);

// The checkpoint's FP8 blocks when it is block-FP8 (quant_method "fp8" with weight_block_size),
// nullopt otherwise: for a family's own block arithmetic (DeepSeek's MLA head splits). Throws
// kMalformedInput naming the field for a block size that is not two positive integers.
std::optional<BlockScales> fp8_block_scales(const ModelConfig& config);
// Whether the checkpoint is NVFP4 (ModelOpt quant_algo NVFP4 or compressed-tensors
// nvfp4-pack-quantized), for a family's own split arithmetic (DeepSeek's 16-value gcd block).
bool nvfp4_checkpoint(const ModelConfig& config);

// The refusal, if any, of an FP8 checkpoint whose KV heads are duplicated over the ranks
// (kv_heads < tp_size) under target trtllm: TensorRT-LLM's generic HfWeightMapper
// (_duplicate_kv_weights) duplicates a KV head's weight and bias but not its block or channel
// scales, so its own load fails; Qwen3MoeHfWeightMapper duplicates block scales
// (`mapper_duplicates_block_scales`). nullopt otherwise (per-tensor scales stay one value).
std::optional<std::string> fp8_kv_duplication_error(const ModelConfig& config, const Layout& l, uint64_t kv_heads,
                                                    bool mapper_duplicates_block_scales);

// The KV-cache scales of one attention layer (`attn` = "model.layers.N.self_attn.") when the
// checkpoint has them (ModelOpt `k_proj.k_scale` / `v_proj.v_scale`, compressed-tensors and
// AutoFP8 `k_scale` / `v_scale`), in each engine's place: vLLM `attn.k_scale` / `attn.v_scale`
// F32 [] (weight_utils.py maybe_remap_kv_scale_name); TensorRT-LLM `qkv_proj.kv_scales` and
// `inv_kv_scales` F32 [3] = [1, k, v] and its reciprocals (FP8QDQLinearMethod.load_kv_scales,
// TRTLLM_LOAD_KV_SCALES on). `qkv` is the fused linear's quantisation: TensorRT-LLM keeps KV
// scales only on per-tensor FP8 linears, so any other is refused by name. Empty without scales.
std::vector<ParamSpec> kv_cache_scales(const ModelConfig& config, const Layout& l, const KeyProbe& probe,
                                       const std::string& attn, const LinearQuant& qkv);

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
