#pragma once
// Which files make up a checkpoint. Built once by discover_shards(); immutable afterwards.
//
// Rules (DESIGN.md): `model.safetensors.index.json` when present (every shard it names must
// exist; a .safetensors file it does not name is ignored with a warning); else `*.safetensors`
// sorted by name. Sharded files win over `consolidated*.safetensors` unless asked otherwise.
// No shard: an error naming the directory. PATH may also be a single .safetensors file.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace wmap {

struct ShardSetOptions {
  bool prefer_consolidated = false;  // take consolidated*.safetensors over sharded files
};

struct ShardIndex {
  std::filesystem::path file;                              // the index.json read
  std::vector<std::pair<std::string, uint32_t>> weight_map;  // tensor -> shard, sorted by tensor
};

struct ShardSet {
  std::filesystem::path root;          // directory holding the shards
  std::vector<std::string> files;      // shard file names relative to root, in catalog order
  std::optional<ShardIndex> index;     // present when an index.json was used
  std::vector<std::string> warnings;   // ignored files and the like

  std::filesystem::path path_of(uint32_t shard) const { return root / files[shard]; }
};

ShardSet discover_shards(const std::filesystem::path& path, const ShardSetOptions& options = {});

// Parses an index.json text (exposed for tests and fuzzing). `shard_names` receives the distinct
// shard file names in order of first appearance. Throws kMalformedInput naming `file`.
ShardIndex parse_shard_index(std::string_view json, const std::string& file,
                             std::vector<std::string>& shard_names);

}  // namespace wmap
