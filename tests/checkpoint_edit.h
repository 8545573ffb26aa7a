#pragma once
// Test helper: copies a checkpoint while dropping, renaming or reshaping tensors, to build the
// broken and re-keyed checkpoints the plan and mapping tests need.

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace wmap::test {

struct TensorEdit {
  bool drop = false;
  // Every field has a default, so designated initializers may name only what they change.
  std::optional<std::string> rename = std::nullopt;
  std::optional<std::vector<uint64_t>> reshape = std::nullopt;  // must keep the element count
  std::optional<std::string> bytes = std::nullopt;              // new data (same size)
};

// Writes `dst` with every tensor of `src` passed through `edit`, one shard per source shard,
// a matching index.json, config.json copied (then `config_edit` applied to its text), and
// `extra` tensors (name, F32 1-D of 4 elements) added to the first shard.
void copy_checkpoint(const std::filesystem::path& src, const std::filesystem::path& dst,
                     const std::function<TensorEdit(const std::string&)>& edit,
                     const std::function<std::string(std::string)>& config_edit = {},
                     const std::vector<std::string>& extra = {});

}  // namespace wmap::test
