// The parallel layout of one rank and the shard rule.
#include "wmap/spec/layout.h"

#include <algorithm>

#include "wmap/util/error.h"

namespace wmap {

void Layout::validate() const {
  if (tp_size == 0) throw Error(ErrorCode::kInvalidArgument, "--tp-size must be at least 1");
  if (tp_rank >= tp_size) {
    throw Error(ErrorCode::kInvalidArgument, "--tp-rank " + std::to_string(tp_rank) + " is not below --tp-size " + std::to_string(tp_size));
  }
  if (ep_size == 0 || tp_size % ep_size != 0) {
    throw Error(ErrorCode::kInvalidArgument, "--ep-size " + std::to_string(ep_size) + " must divide --tp-size " + std::to_string(tp_size));
  }
}

std::string Layout::to_string() const {
  std::string s = "tp " + std::to_string(tp_rank) + "/" + std::to_string(tp_size) + ", ep " + std::to_string(ep_size);
  if (mtp_layers) s += ", mtp " + std::to_string(*mtp_layers);
  return s;
}

Range shard_range(uint64_t width, uint32_t parts, uint32_t part) {
  const uint64_t w = ceil_div(width, parts);
  const uint64_t begin = std::min<uint64_t>(width, part * w);
  return {begin, std::min<uint64_t>(width, begin + w)};
}

}  // namespace wmap
