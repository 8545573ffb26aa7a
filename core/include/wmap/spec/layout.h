#pragma once
// The parallel layout of one rank and the shard arithmetic every family shares (DESIGN.md,
// "Reference semantics"). A layout is decided once: built (and validated) by
// layout_from_options() for the CLI and the Python module, recorded in the ModelSpec built for
// it, and read by the plan from there. Plugins ask it which slice of a dimension, which
// experts and which heads this rank holds, instead of recomputing the shard rule; each
// divisibility rule lives in one place here. Messages name the settings (`tp_size`), never
// a command-line flag. Plain value type; thread-safe.

#include <cstdint>
#include <optional>
#include <string>

namespace wmap {

// Half-open index range.
struct Range {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

struct Layout {
  uint32_t tp_size = 1;
  uint32_t tp_rank = 0;
  uint32_t ep_size = 1;
  std::optional<uint32_t> mtp_layers;  // unset: the checkpoint's own count

  uint32_t moe_tp_size() const { return tp_size / ep_size; }
  uint32_t moe_tp_rank() const { return tp_rank / ep_size; }
  uint32_t moe_ep_rank() const { return tp_rank % ep_size; }

  // Throws kInvalidArgument unless tp_size >= 1, tp_rank < tp_size and ep_size divides tp_size
  // ("tp_rank 2 is not below tp_size 2", "ep_size 3 must divide tp_size 4").
  void validate() const;
  std::string to_string() const;  // "tp 2/4, ep 2" style, for messages

  // --- Tensor-parallel dimensions (the shard rule; uneven widths allowed) -------------------
  // This rank's slice of a dimension of `width` split over tp_size (possibly short or empty
  // on the last ranks).
  Range tp_slice(uint64_t width) const;
  // The rows every rank holds of a dimension of `width` padded to tp_size equal blocks
  // (vocabulary-parallel): ceil(width / tp_size).
  uint64_t tp_block(uint64_t width) const;
  // This rank's slice of a routed expert's dimension of `width`, split over moe_tp_size.
  Range moe_tp_slice(uint64_t width) const;

  // --- Exact splits (each rule checked here, and only here) ---------------------------------
  // The experts this rank holds: [moe_ep_rank*E/P, (moe_ep_rank+1)*E/P). Throws
  // kInvalidArgument with experts_error() unless ep_size divides `experts`.
  Range local_experts(uint64_t experts) const;
  // The attention heads this rank holds: heads/tp_size contiguous heads. Throws
  // kInvalidArgument with heads_error() unless tp_size divides `heads`.
  Range local_heads(uint64_t heads) const;
  // The KV heads this rank holds: with kv_heads >= tp_size, kv_heads/tp_size contiguous heads;
  // else the one head r / (tp_size/kv_heads) (each head repeated on tp_size/kv_heads ranks).
  // Throws kInvalidArgument with kv_heads_error() when neither divides the other.
  Range local_kv_heads(uint64_t kv_heads) const;

  // The same rules as messages, for a caller that reports them against its own context (a
  // plugin names the config.json field): nullopt when the split is possible.
  std::optional<std::string> experts_error(uint64_t experts) const;   // "3 experts cannot be split over ep_size 2"
  std::optional<std::string> heads_error(uint64_t heads) const;       // "6 attention heads cannot be split over tp_size 4"
  std::optional<std::string> kv_heads_error(uint64_t kv_heads) const; // "3 KV heads cannot be split or replicated over tp_size 2"
};

// The one front-end helper (the CLI's options and the Python module's keyword arguments): a
// validated layout. Throws kInvalidArgument as Layout::validate().
Layout layout_from_options(uint32_t tp_size, uint32_t tp_rank, uint32_t ep_size, std::optional<uint32_t> mtp_layers);

// The shard rule: w = ceil(width / parts); part p gets [p*w, min((p+1)*w, width)), possibly empty.
Range shard_range(uint64_t width, uint32_t parts, uint32_t part);
inline uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

}  // namespace wmap
