#pragma once
// The parallel layout of one rank and the shard arithmetic every family shares (DESIGN.md,
// "Targets" and "Reference semantics"). A layout is decided once: built (and validated) by
// layout_from_options() for the CLI and the Python module, recorded in the ModelSpec built for
// it, and read by the plan from there. Plugins ask it which slice of a dimension, which
// experts, heads and vocabulary rows this rank holds, instead of recomputing the shard rule;
// each divisibility rule lives in one place here, and each target's rule with it. Messages name
// the settings (`tp_size`), never a command-line flag. Plain value type; thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

// Half-open index range.
struct Range {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

// Whose parameters a load produces (DESIGN.md "Targets"): TensorRT-LLM's PyTorch backend or vLLM,
// as each engine's load_weights leaves them.
enum class Target : uint8_t { kTrtllm, kVllm };
std::string_view target_name(Target t);                     // "trtllm", "vllm"
std::optional<Target> parse_target(std::string_view name);  // nullopt when unknown
std::vector<std::string> target_names();                    // every target, in enum order

// How one dimension is split on this rank: `size` parts, this rank takes part `rank`. `exact`
// (target vllm) makes a width not divisible by `size` an error naming the tensor, as vLLM
// asserts; otherwise the shard rule allows uneven widths. `name` says what `size` is ("tp_size").
struct Split {
  uint32_t size = 1;
  uint32_t rank = 0;
  bool exact = false;
  const char* name = "tp_size";

  // The shard rule: w = ceil(width / size); part `rank` gets [rank*w, min((rank+1)*w, width)).
  // Throws kInvalidArgument with slice_error() when the split must be exact and is not.
  Range slice(uint64_t width, std::string_view tensor = {}) const;
  // "model.layers.0.mlp.gate_proj.weight: 170 rows ... tp_size 4 (target vllm splits exactly)".
  std::optional<std::string> slice_error(uint64_t width, std::string_view tensor) const;
  // `count` whole items (heads), count/size each: throws kInvalidArgument with count_error().
  Range items(uint64_t count, std::string_view what) const;
  std::optional<std::string> count_error(
      uint64_t count, std::string_view what) const;  // "6 attention heads cannot be split over tp_size 4"
  bool replicated() const { return size == 1; }
};

// The vocabulary rows one rank holds: `rows` in all, the first `source.size()` of them copied
// from checkpoint rows `source`, the rest zero (padding).
struct VocabShard {
  uint64_t rows = 0;
  Range source;
};

struct Layout {
  uint32_t tp_size = 1;
  uint32_t tp_rank = 0;
  uint32_t ep_size = 1;
  std::optional<uint32_t> mtp_layers;  // unset: the checkpoint's own count (target vllm: none)
  Target target = Target::kTrtllm;
  bool attention_dp = false;   // TensorRT-LLM's enable_attention_dp: attention (and more) replicated
  uint32_t gpus_per_node = 8;  // caps TensorRT-LLM's gcd split of DeepSeek's dense MLP
  // The engine MoE backend whose parameter layout a family produces (gpt-oss: "triton" under
  // vllm, "cutlass" under trtllm). Empty: the family's default for the target. A plugin
  // records the backend it built for in its spec's `layout.moe_backend` (the one field of
  // ModelSpec::layout a plugin sets; the host keeps it), so the plan's layout, its JSON and its
  // id name the effective backend; a family with no choice leaves it empty and any name asked
  // for is refused.
  std::string moe_backend;
  // Pipeline parallelism: the decoder layers split over pp_size stages, this rank on stage
  // pp_rank (pp_layers()). pp_partition, when set, gives each stage's layer count, first stage
  // first (vLLM's VLLM_PP_LAYER_PARTITION, TensorRT-LLM's Mapping.pp_partition); empty: the
  // target's own split.
  uint32_t pp_size = 1;
  uint32_t pp_rank = 0;
  std::vector<uint32_t> pp_partition;

  uint32_t moe_tp_size() const { return tp_size / ep_size; }
  uint32_t moe_tp_rank() const { return tp_rank / ep_size; }
  uint32_t moe_ep_rank() const { return tp_rank % ep_size; }
  bool exact_splits() const { return target == Target::kVllm; }
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank + 1 == pp_size; }

  // The decoder layers of `layers` this rank's pipeline stage holds, by the target's rule:
  // vllm (vllm/distributed/utils.py, get_pp_indices): layers // pp_size each, the remainder one
  // each to the stages before the last, last-but-one first ([2, 2, 1] for 5 over 3: the last
  // stage also computes the head); trtllm (tensorrt_llm/mapping.py, Mapping.pp_layers:
  // torch.tensor_split): the remainder one each to the first stages. pp_partition overrides
  // both; throws kInvalidArgument unless its counts add up to `layers`.
  Range pp_layers(uint64_t layers) const;

  // Throws kInvalidArgument unless tp_size >= 1, tp_rank < tp_size, ep_size divides tp_size,
  // gpus_per_node >= 1, pp_size >= 1, pp_rank < pp_size, pp_partition empty or one count per
  // stage, and the target allows the rest (vllm: ep_size 1 or tp_size, no attention_dp, no MTP
  // layers): "tp_rank 2 is not below tp_size 2".
  void validate() const;
  std::string to_string() const;  // "tp 2/4, ep 2, pp 1/2, target trtllm" style, for messages
  // The one JSON form of a layout, every field always present (mtp_layers null when unset):
  // {"tp_size":4,"tp_rank":1,"ep_size":2,"pp_size":1,"pp_rank":0,"pp_partition":null,"mtp_layers":null,
  // "target":"trtllm","attention_dp":false,"gpus_per_node":8,"moe_backend":null} (pp_partition and
  // moe_backend null when unset). `wmap plan --json`, `wmap load --json`, the Python reports and
  // the plan id all use it.
  std::string to_json() const;

  // --- Splits -------------------------------------------------------------------------------
  Split tp() const;          // {tp_size, tp_rank}
  Split moe_tp() const;      // a routed expert's dims: {moe_tp_size, moe_tp_rank}
  Split attention() const;   // tp(), or replicated under attention_dp
  Split replicated() const;  // {1, 0}
  // TensorRT-LLM's split of DeepSeek's dense MLP and shared experts (modeling_deepseekv3.py,
  // DeepseekV3DecoderLayer._compute_mlp_tp_size): over t = gcd(units, tp_size) ranks, where
  // `units` is the width in quantisation blocks; with `node_cap`, t = gcd(t, gpus_per_node) when
  // t exceeds gpus_per_node. This rank is part tp_rank % t (ranks r and r + t hold the same slice).
  Split gcd_split(uint64_t units, bool node_cap) const;

  // --- Tensor-parallel dimensions -------------------------------------------------------------
  // This rank's slice of a dimension of `width` split over tp_size (tp().slice()).
  Range tp_slice(uint64_t width, std::string_view tensor = {}) const;
  // This rank's slice of a routed expert's dimension of `width`, split over moe_tp_size.
  Range moe_tp_slice(uint64_t width, std::string_view tensor = {}) const;
  // Vocabulary-parallel rows of a [vocab, ...] tensor split by `s`, by the target's padding mode:
  // trtllm pads to s.size blocks of ceil(V/size) rows (the last block zero-padded); vllm pads V
  // to Vp = 64*ceil(V/64) (also unsplit) and gives every part Vp/size rows (vocab_parallel_embedding.py,
  // pad_vocab_size and VocabParallelEmbedding): throws kInvalidArgument when size does not divide Vp.
  VocabShard vocab_shard(uint64_t vocab, const Split& s) const;

  // --- Exact splits (each rule checked here, and only here) ---------------------------------
  // The experts this rank holds. trtllm: [moe_ep_rank*E/P, (moe_ep_rank+1)*E/P), throws with
  // experts_error() unless ep_size divides E. vllm (fused_moe/layer.py, determine_expert_map):
  // E//P experts, the E%P extra ones on the first ranks, contiguous.
  Range local_experts(uint64_t experts) const;
  // The attention heads this rank holds: attention().items(heads).
  Range local_heads(uint64_t heads) const;
  // The KV heads this rank holds: with kv_heads >= tp_size, kv_heads/tp_size contiguous heads;
  // else the one head r / (tp_size/kv_heads) (each head repeated on tp_size/kv_heads ranks).
  // Throws kInvalidArgument with kv_heads_error() when neither divides the other.
  Range local_kv_heads(uint64_t kv_heads) const;

  // The same rules as messages, for a caller that reports them against its own context (a
  // plugin names the config.json field): nullopt when the split is possible.
  std::optional<std::string> experts_error(uint64_t experts) const;  // "3 experts cannot be split over ep_size 2"
  std::optional<std::string> heads_error(uint64_t heads) const;  // "6 attention heads cannot be split over tp_size 4"
  std::optional<std::string> kv_heads_error(
      uint64_t kv_heads) const;  // "3 KV heads cannot be split or replicated over tp_size 2"
};

// What a front end asks for: the CLI binds its options to these fields, the Python module its
// keyword arguments (python/wmap_module.cc, layout_options_from). Unset fields take Layout's
// defaults, except under mpirun, where the launcher decides them (tp_rank and pp_rank from the
// MPI rank, stage-major as both engines number ranks: rank = pp_rank * tp_size + tp_rank;
// gpus_per_node: the node's rank count).
struct LayoutOptions {
  uint32_t tp_size = Layout{}.tp_size;
  std::optional<uint32_t> tp_rank;
  uint32_t ep_size = Layout{}.ep_size;
  uint32_t pp_size = Layout{}.pp_size;
  std::optional<uint32_t> pp_rank;
  std::vector<uint32_t> pp_partition;
  std::optional<uint32_t> mtp_layers;
  std::string target = std::string(target_name(Layout{}.target));
  bool attention_dp = Layout{}.attention_dp;
  std::optional<uint32_t> gpus_per_node;
  std::string moe_backend;

  // The option names, in the order Layout::to_json writes them (front ends list them in errors).
  static const std::vector<std::string>& names();
};

// The one front-end helper: a validated layout. Throws kInvalidArgument as Layout::validate(),
// or naming an unknown target and the known ones.
Layout layout_from_options(const LayoutOptions& o);

// "3,2,2" (VLLM_PP_LAYER_PARTITION's form, and --pp-partition's): the counts, or kInvalidArgument
// naming `what` and the text.
std::vector<uint32_t> parse_pp_partition(std::string_view text, std::string_view what);

// The shard rule: w = ceil(width / parts); part p gets [p*w, min((p+1)*w, width)), possibly empty.
Range shard_range(uint64_t width, uint32_t parts, uint32_t part);
inline uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

}  // namespace wmap
WMAP_PUBLIC_END
