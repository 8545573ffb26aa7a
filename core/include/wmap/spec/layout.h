#pragma once
// The parallel layout of one rank and the shard arithmetic every family shares (DESIGN.md,
// "Reference semantics"). Plain value type; thread-safe.

#include <cstdint>
#include <optional>
#include <string>

namespace wmap {

struct Layout {
  uint32_t tp_size = 1;
  uint32_t tp_rank = 0;
  uint32_t ep_size = 1;
  std::optional<uint32_t> mtp_layers;  // unset: the checkpoint's own count

  uint32_t moe_tp_size() const { return tp_size / ep_size; }
  uint32_t moe_tp_rank() const { return tp_rank / ep_size; }
  uint32_t moe_ep_rank() const { return tp_rank % ep_size; }

  // Throws kInvalidArgument unless 0 <= tp_rank < tp_size and ep_size divides tp_size.
  void validate() const;
  std::string to_string() const;  // "tp 2/4, ep 2" style, for messages
};

// Half-open index range.
struct Range {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
};

// The shard rule: w = ceil(width / parts); part p gets [p*w, min((p+1)*w, width)), possibly empty.
Range shard_range(uint64_t width, uint32_t parts, uint32_t part);
inline uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

}  // namespace wmap
