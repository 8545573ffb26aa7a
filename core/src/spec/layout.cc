// The parallel layout of one rank, the shard rule, each target's split rules and the
// divisibility rules of each split.
#include "wmap/spec/layout.h"

#include <algorithm>
#include <numeric>

#include "wmap/util/error.h"
#include "wmap/util/json_text.h"

namespace wmap {

namespace {

std::string str(uint64_t v) { return std::to_string(v); }

[[noreturn]] void invalid(std::string message) { throw Error(ErrorCode::kInvalidArgument, std::move(message)); }

constexpr uint64_t kVllmVocabPadding = 64;  // vocab_parallel_embedding.py: DEFAULT_VOCAB_PADDING_SIZE

}  // namespace

std::string_view target_name(Target t) { return t == Target::kVllm ? "vllm" : "trtllm"; }

std::optional<Target> parse_target(std::string_view name) {
  if (name == "trtllm") return Target::kTrtllm;
  if (name == "vllm") return Target::kVllm;
  return std::nullopt;
}

std::vector<std::string> target_names() { return {"trtllm", "vllm"}; }

// --- Split ----------------------------------------------------------------------------------

std::optional<std::string> Split::slice_error(uint64_t width, std::string_view tensor) const {
  if (!exact || size == 0 || width % size == 0) return std::nullopt;
  return (tensor.empty() ? std::string("a dimension") : std::string(tensor)) + ": width " + str(width) +
         " is not divisible by " + name + " " + str(size) +
         " (target vllm splits every tensor exactly, as vLLM asserts)";
}

Range Split::slice(uint64_t width, std::string_view tensor) const {
  if (auto e = slice_error(width, tensor)) invalid(*e);
  return shard_range(width, size, rank);
}

std::optional<std::string> Split::count_error(uint64_t count, std::string_view what) const {
  if (size != 0 && count % size == 0) return std::nullopt;
  return str(count) + " " + std::string(what) + " cannot be split over " + name + " " + str(size);
}

Range Split::items(uint64_t count, std::string_view what) const {
  if (auto e = count_error(count, what)) invalid(*e);
  const uint64_t per = count / size, first = uint64_t{rank} * per;
  return {first, first + per};
}

// --- Layout ---------------------------------------------------------------------------------

namespace {
constexpr uint32_t kMaxMtpLayers = 64;
}  // namespace

void Layout::validate() const {
  if (tp_size == 0) invalid("tp_size must be at least 1");
  if (tp_rank >= tp_size) invalid("tp_rank " + str(tp_rank) + " is not below tp_size " + str(tp_size));
  if (ep_size == 0 || tp_size % ep_size != 0)
    invalid("ep_size " + str(ep_size) + " must divide tp_size " + str(tp_size));
  if (gpus_per_node == 0) invalid("gpus_per_node must be at least 1");
  if (pp_size == 0) invalid("pp_size must be at least 1");
  if (pp_rank >= pp_size) invalid("pp_rank " + str(pp_rank) + " is not below pp_size " + str(pp_size));
  if (!pp_partition.empty() && pp_partition.size() != pp_size) {
    invalid("pp_partition has " + str(pp_partition.size()) + " stage" + (pp_partition.size() == 1 ? "" : "s") +
            ", pp_size is " + str(pp_size) + ": give one layer count per pipeline stage");
  }
  // Each MTP layer is a whole decoder layer (all its experts) in the spec: a typo must not build
  // millions of them. DeepSeek-V3/R1 declare one; shared-weight MTP stacks use a few.
  if (mtp_layers && *mtp_layers > kMaxMtpLayers) {
    invalid("mtp_layers " + str(*mtp_layers) + " is more than " + str(kMaxMtpLayers) +
            " (each MTP layer is a whole decoder layer; DeepSeek-V3 declares 1)");
  }
  if (target == Target::kVllm) {
    // vLLM's expert parallelism is all or nothing: its MoE layers run at tp 1 over ep = tp_size
    // ranks, or split every expert over tp_size (FusedMoEParallelConfig.make).
    if (ep_size != 1 && ep_size != tp_size) {
      invalid("ep_size " + str(ep_size) + " is not allowed with target vllm at tp_size " + str(tp_size) +
              ": vLLM's expert parallelism is all or nothing (ep_size 1 or " + str(tp_size) + ")");
    }
    if (attention_dp) invalid("attention_dp is a TensorRT-LLM layout (target trtllm); target vllm has none");
    if (mtp_layers && *mtp_layers > 0) {
      invalid("mtp_layers " + str(*mtp_layers) +
              ": target vllm loads no MTP layers (vLLM loads them in a separate draft model)");
    }
  }
}

std::string Layout::to_string() const {
  std::string s = "tp " + str(tp_rank) + "/" + str(tp_size) + ", ep " + str(ep_size);
  if (pp_size > 1) s += ", pp " + str(pp_rank) + "/" + str(pp_size);
  if (!pp_partition.empty()) {
    s += " (partition ";
    for (size_t i = 0; i < pp_partition.size(); ++i) s += (i ? "," : "") + str(pp_partition[i]);
    s += ")";
  }
  if (mtp_layers) s += ", mtp " + str(*mtp_layers);
  if (attention_dp) s += ", attention-dp";
  return s + ", target " + std::string(target_name(target));
}

Range Layout::pp_layers(uint64_t layers) const {
  std::vector<uint64_t> counts(pp_size, layers / pp_size);
  if (!pp_partition.empty()) {
    // vLLM (get_pp_indices) raises "sum(partitions)=... does not match num_hidden_layers=...";
    // TensorRT-LLM's Mapping asserts the same sum.
    uint64_t sum = 0;
    for (size_t i = 0; i < counts.size(); ++i) sum += counts[i] = pp_partition.at(i);
    if (sum != layers) {
      invalid("pp_partition adds up to " + str(sum) + " layers; the model has " + str(layers) +
              " decoder layers (num_hidden_layers)");
    }
  } else if (const uint64_t extra = layers % pp_size; extra != 0) {
    if (target == Target::kVllm) {
      // vllm/distributed/utils.py get_pp_indices (5a6541db): `for i in range(2, remaining_layers + 2):
      // partitions[-i] += 1`: never the last stage, which also holds the norm and lm_head.
      for (uint64_t i = 2; i < extra + 2; ++i) ++counts[pp_size - i];
    } else {
      // tensorrt_llm/mapping.py Mapping.pp_layers (b35ac1b6): torch.tensor_split(arange(L), pp_size):
      // the first L % pp_size stages hold one layer more.
      for (uint64_t i = 0; i < extra; ++i) ++counts[i];
    }
  }
  uint64_t begin = 0;
  for (uint32_t s = 0; s < pp_rank; ++s) begin += counts[s];
  return {begin, begin + counts[pp_rank]};
}

Split Layout::tp() const { return {tp_size, tp_rank, exact_splits(), "tp_size"}; }

Split Layout::moe_tp() const { return {moe_tp_size(), moe_tp_rank(), exact_splits(), "moe_tp_size"}; }

Split Layout::attention() const { return attention_dp ? replicated() : tp(); }

Split Layout::replicated() const { return {1, 0, exact_splits(), "1"}; }

Split Layout::gcd_split(uint64_t units, bool node_cap) const {
  uint64_t t = std::gcd(units, uint64_t{tp_size});
  if (t == 0) t = 1;  // zero units: nothing to split
  if (node_cap && t > gpus_per_node) t = std::gcd(t, uint64_t{gpus_per_node});
  const auto parts = static_cast<uint32_t>(t);
  return {parts, tp_rank % parts, exact_splits(), "the gcd split"};
}

Range Layout::tp_slice(uint64_t width, std::string_view tensor) const { return tp().slice(width, tensor); }

Range Layout::moe_tp_slice(uint64_t width, std::string_view tensor) const { return moe_tp().slice(width, tensor); }

VocabShard Layout::vocab_shard(uint64_t vocab, const Split& s) const {
  if (target == Target::kVllm) {
    const uint64_t padded = ceil_div(vocab, kVllmVocabPadding) * kVllmVocabPadding;
    if (padded % s.size != 0) {
      invalid("vocab_size " + str(vocab) + " padded to " + str(padded) +
              " (a multiple of 64, as vLLM pads) cannot be split over " + s.name + " " + str(s.size));
    }
    const uint64_t rows = padded / s.size;
    return {rows, {std::min(vocab, s.rank * rows), std::min(vocab, (s.rank + 1) * rows)}};
  }
  return {ceil_div(vocab, s.size), shard_range(vocab, s.size, s.rank)};
}

std::optional<std::string> Layout::experts_error(uint64_t experts) const {
  if (target == Target::kVllm) return std::nullopt;  // the remainder goes to the first ranks
  if (ep_size != 0 && experts % ep_size == 0) return std::nullopt;
  return str(experts) + " experts cannot be split over ep_size " + str(ep_size);
}

std::optional<std::string> Layout::heads_error(uint64_t heads) const {
  return attention().count_error(heads, "attention heads");
}

std::optional<std::string> Layout::kv_heads_error(uint64_t kv_heads) const {
  if (tp_size != 0 && kv_heads != 0 && (kv_heads >= tp_size ? kv_heads % tp_size == 0 : tp_size % kv_heads == 0)) {
    return std::nullopt;
  }
  return str(kv_heads) + " KV heads cannot be split or replicated over tp_size " + str(tp_size);
}

Range Layout::local_experts(uint64_t experts) const {
  if (auto e = experts_error(experts)) invalid(*e);
  const uint64_t ep_rank = moe_ep_rank();
  if (target == Target::kVllm) {
    const uint64_t base = experts / ep_size, extra = experts % ep_size;
    const uint64_t first = ep_rank * base + std::min(ep_rank, extra);
    return {first, first + base + (ep_rank < extra ? 1 : 0)};
  }
  const uint64_t per = experts / ep_size, first = ep_rank * per;
  return {first, first + per};
}

Range Layout::local_heads(uint64_t heads) const { return attention().items(heads, "attention heads"); }

Range Layout::local_kv_heads(uint64_t kv_heads) const {
  if (auto e = kv_heads_error(kv_heads)) invalid(*e);
  if (kv_heads >= tp_size) {
    const uint64_t per = kv_heads / tp_size, first = uint64_t{tp_rank} * per;
    return {first, first + per};
  }
  const uint64_t head = tp_rank / (tp_size / kv_heads);  // each head repeated on tp_size/kv_heads ranks
  return {head, head + 1};
}

std::string Layout::to_json() const {
  std::string partition = "null";
  if (!pp_partition.empty()) {
    partition = "[";
    for (size_t i = 0; i < pp_partition.size(); ++i) partition += (i ? "," : "") + str(pp_partition[i]);
    partition += "]";
  }
  return "{\"tp_size\":" + str(tp_size) + ",\"tp_rank\":" + str(tp_rank) + ",\"ep_size\":" + str(ep_size) +
         ",\"pp_size\":" + str(pp_size) + ",\"pp_rank\":" + str(pp_rank) + ",\"pp_partition\":" + partition +
         ",\"mtp_layers\":" + (mtp_layers ? str(*mtp_layers) : std::string("null")) + ",\"target\":\"" +
         std::string(target_name(target)) + "\",\"attention_dp\":" + (attention_dp ? "true" : "false") +
         ",\"gpus_per_node\":" + str(gpus_per_node) +
         ",\"moe_backend\":" + (moe_backend.empty() ? std::string("null") : json_string(moe_backend)) + "}";
}

const std::vector<std::string>& LayoutOptions::names() {
  static const std::vector<std::string> n = {"tp_size",      "tp_rank",       "ep_size",    "pp_size",
                                             "pp_rank",      "pp_partition",  "mtp_layers", "target",
                                             "attention_dp", "gpus_per_node", "moe_backend"};
  return n;
}

Layout layout_from_options(const LayoutOptions& o) {
  Layout l;
  l.tp_size = o.tp_size;
  l.tp_rank = o.tp_rank.value_or(l.tp_rank);
  l.ep_size = o.ep_size;
  l.pp_size = o.pp_size;
  l.pp_rank = o.pp_rank.value_or(l.pp_rank);
  l.pp_partition = o.pp_partition;
  l.mtp_layers = o.mtp_layers;
  const auto target = parse_target(o.target);
  if (!target) {
    std::string known;
    for (const auto& t : target_names()) known += (known.empty() ? "" : ", ") + t;
    invalid("target '" + o.target + "' is not one of " + known);
  }
  l.target = *target;
  l.attention_dp = o.attention_dp;
  l.gpus_per_node = o.gpus_per_node.value_or(l.gpus_per_node);
  l.moe_backend = o.moe_backend;
  l.validate();
  return l;
}

std::vector<uint32_t> parse_pp_partition(std::string_view text, std::string_view what) {
  std::vector<uint32_t> out;
  size_t at = 0;
  while (true) {
    const size_t comma = std::min(text.find(',', at), text.size());
    std::string_view item = text.substr(at, comma - at);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    uint64_t v = 0;
    bool ok = !item.empty() && item.size() <= 9;
    for (char c : item) ok = ok && c >= '0' && c <= '9';
    if (ok) {
      for (char c : item) v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    if (!ok) {
      invalid(std::string(what) + " '" + std::string(text) +
              "': expected layer counts separated by commas, one per pipeline stage (e.g. 3,2,2)");
    }
    out.push_back(static_cast<uint32_t>(v));
    if (comma >= text.size()) break;
    at = comma + 1;
  }
  return out;
}

Range shard_range(uint64_t width, uint32_t parts, uint32_t part) {
  const uint64_t w = ceil_div(width, parts);
  const uint64_t begin = std::min<uint64_t>(width, part * w);
  return {begin, std::min<uint64_t>(width, begin + w)};
}

}  // namespace wmap
