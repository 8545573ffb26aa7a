#pragma once
// Bounds on what a config.json may declare, proven by the checkpoint, so a config whose sizes
// cannot fit the checkpoint (num_hidden_layers: 200000000 on a 4-layer checkpoint, vocab_size:
// 10**15) is refused in milliseconds, before a plugin builds millions of modules or a plan of
// 10^18 bytes. Plugins read their config through ConfigBounds (docs/plugins.md, "Sizes from
// config.json"):
//   - counts that the spec loops over (layers, experts) may not exceed the highest index the
//     checkpoint holds + 1 (`model.layers.<N>.`): every layer beyond it would have no tensors;
//   - a dimension (hidden_size, vocab_size, a product such as heads x head_dim) that is a dimension
//     of some tensor the spec reads may not exceed the largest dimension of any checkpoint tensor;
//   - every product of config values is overflow-checked.
// Errors name the file, the key, its value and the checkpoint's figure, as ModelConfig::fail()
// (kMalformedInput, exit 2). Part of the plugin ABI (hashed into the build id). A ConfigBounds
// holds references to its config and checkpoint, which must outlive it; thread-safe as they are.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wmap/spec/model_config.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

class RenamedCatalog;

// A tensor dimension and one tensor that has it.
struct TensorDim {
  uint64_t size = 0;
  std::string tensor;  // "model.embed_tokens.weight [1003, 256]"; empty when the checkpoint has no tensor
};

// What the checkpoint can tell about sizes; the core answers over the (renamed) catalog
// (KeyProbe derives from it).
class CheckpointExtent {
 public:
  virtual ~CheckpointExtent() = default;
  // The highest N such that some canonical key starts with `prefix` + N + "." (`prefix`
  // "model.layers." gives the highest layer index); nullopt when no key does. One binary search
  // per distinct index.
  virtual std::optional<uint64_t> highest_index(std::string_view prefix) const = 0;
  // The largest dimension of any tensor.
  virtual TensorDim largest_dim() const = 0;
};

// The core's answers over a renamed catalog (the loader's KeyProbe forwards to these).
std::optional<uint64_t> highest_index(const RenamedCatalog& catalog, std::string_view prefix);
TensorDim largest_dim(const RenamedCatalog& catalog);

class ConfigBounds {
 public:
  ConfigBounds(const ModelConfig& config, const CheckpointExtent& checkpoint)
      : config_(config), checkpoint_(checkpoint) {}

  // A positive count the spec loops over (require_positive(key)), at most the checkpoint's
  // highest index under `prefix` + 1: "num_hidden_layers: 200000000 layers, but the checkpoint's
  // highest layer index is 3 (model.layers.3.*)". `what` names one item ("layer").
  uint64_t count(std::string_view key, std::string_view prefix, std::string_view what) const;
  // `value` of `key` checked as count() does, against the highest index under any of `prefixes`
  // (e.g. each MoE layer's "model.layers.<i>.mlp.experts."); the message names the first prefix
  // when none holds an index.
  uint64_t count(std::string_view key, uint64_t value, std::span<const std::string> prefixes,
                 std::string_view what) const;
  // A positive size (require_positive(key)) that is a dimension of a tensor the spec reads: at
  // most the largest dimension of any checkpoint tensor.
  uint64_t dim(std::string_view key) const;
  // `value`, described by `what` ("num_attention_heads x head_dim"), checked as dim() does.
  uint64_t dim(std::string_view what, uint64_t value) const;
  // a * b, failing naming `what` ("num_attention_heads x head_dim") when it overflows 64 bits.
  uint64_t mul(uint64_t a, uint64_t b, std::string_view what) const;

  const ModelConfig& config() const { return config_; }

 private:
  const ModelConfig& config_;
  const CheckpointExtent& checkpoint_;
};

namespace spec {
// a * b for sizes not read from a config (spec builders): throws kOverflow naming `what`.
uint64_t checked_mul(uint64_t a, uint64_t b, std::string_view what);
// The checkpoint's routed-experts module of each layer i < `layers` that has one, as the plugin
// names it (`experts_of(i)`: "model.layers.3.mlp.experts", or nullopt for a dense layer), with a
// "." appended: the prefixes ConfigBounds::count bounds a routed-expert count by (fewer than
// `layers`: some layer is dense, so the dense MLP's sizes are dimensions of checkpoint tensors).
// The plugin passes the same function it builds its expert modules from, so the key pattern is
// written once.
std::vector<std::string> moe_expert_prefixes(uint64_t layers,
                                             const std::function<std::optional<std::string>(uint64_t)>& experts_of);
}  // namespace spec

}  // namespace wmap
WMAP_PUBLIC_END
