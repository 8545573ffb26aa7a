// The parallel layout of one rank, the shard rule and the divisibility rules of each split.
#include "wmap/spec/layout.h"

#include <algorithm>

#include "wmap/util/error.h"

namespace wmap {

namespace {

std::string str(uint64_t v) { return std::to_string(v); }

[[noreturn]] void invalid(std::string message) { throw Error(ErrorCode::kInvalidArgument, std::move(message)); }

}  // namespace

void Layout::validate() const {
  if (tp_size == 0) invalid("tp_size must be at least 1");
  if (tp_rank >= tp_size) invalid("tp_rank " + str(tp_rank) + " is not below tp_size " + str(tp_size));
  if (ep_size == 0 || tp_size % ep_size != 0) invalid("ep_size " + str(ep_size) + " must divide tp_size " + str(tp_size));
}

std::string Layout::to_string() const {
  std::string s = "tp " + str(tp_rank) + "/" + str(tp_size) + ", ep " + str(ep_size);
  if (mtp_layers) s += ", mtp " + str(*mtp_layers);
  return s;
}

Range Layout::tp_slice(uint64_t width) const { return shard_range(width, tp_size, tp_rank); }

uint64_t Layout::tp_block(uint64_t width) const { return ceil_div(width, tp_size); }

Range Layout::moe_tp_slice(uint64_t width) const { return shard_range(width, moe_tp_size(), moe_tp_rank()); }

std::optional<std::string> Layout::experts_error(uint64_t experts) const {
  if (ep_size != 0 && experts % ep_size == 0) return std::nullopt;
  return str(experts) + " experts cannot be split over ep_size " + str(ep_size);
}

std::optional<std::string> Layout::heads_error(uint64_t heads) const {
  if (tp_size != 0 && heads % tp_size == 0) return std::nullopt;
  return str(heads) + " attention heads cannot be split over tp_size " + str(tp_size);
}

std::optional<std::string> Layout::kv_heads_error(uint64_t kv_heads) const {
  if (tp_size != 0 && kv_heads != 0 && (kv_heads >= tp_size ? kv_heads % tp_size == 0 : tp_size % kv_heads == 0)) {
    return std::nullopt;
  }
  return str(kv_heads) + " KV heads cannot be split or replicated over tp_size " + str(tp_size);
}

Range Layout::local_experts(uint64_t experts) const {
  if (auto e = experts_error(experts)) invalid(*e);
  const uint64_t per = experts / ep_size, first = uint64_t{moe_ep_rank()} * per;
  return {first, first + per};
}

Range Layout::local_heads(uint64_t heads) const {
  if (auto e = heads_error(heads)) invalid(*e);
  const uint64_t per = heads / tp_size, first = uint64_t{tp_rank} * per;
  return {first, first + per};
}

Range Layout::local_kv_heads(uint64_t kv_heads) const {
  if (auto e = kv_heads_error(kv_heads)) invalid(*e);
  if (kv_heads >= tp_size) {
    const uint64_t per = kv_heads / tp_size, first = uint64_t{tp_rank} * per;
    return {first, first + per};
  }
  const uint64_t head = tp_rank / (tp_size / kv_heads);  // each head repeated on tp_size/kv_heads ranks
  return {head, head + 1};
}

Layout layout_from_options(uint32_t tp_size, uint32_t tp_rank, uint32_t ep_size, std::optional<uint32_t> mtp_layers) {
  Layout l;
  l.tp_size = tp_size;
  l.tp_rank = tp_rank;
  l.ep_size = ep_size;
  l.mtp_layers = mtp_layers;
  l.validate();
  return l;
}

Range shard_range(uint64_t width, uint32_t parts, uint32_t part) {
  const uint64_t w = ceil_div(width, parts);
  const uint64_t begin = std::min<uint64_t>(width, part * w);
  return {begin, std::min<uint64_t>(width, begin + w)};
}

}  // namespace wmap
