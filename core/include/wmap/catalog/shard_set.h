#pragma once
// Which files make up a checkpoint. Built once by discover_shards(); immutable afterwards.
//
// Rules (DESIGN.md): `model.safetensors.index.json` when present (every shard it names must
// exist; a .safetensors file it does not name is ignored with a warning); else `*.safetensors`
// sorted by name. Sharded files win over `consolidated*.safetensors` unless asked otherwise.
// No shard: an error naming the directory. PATH may also be a single .safetensors file.
//
// Without any safetensors file, PyTorch checkpoints (format kTorch): `pytorch_model.bin.index.json`
// and the shards it names, else `pytorch_model*.bin` (else any other `*.bin` but
// training_args.bin, else `*.pth` but rng_state*.pth) sorted by name. With safetensors present,
// .bin/.pth files are ignored with a warning naming them: the formats are never mixed.
// A single file ending in .bin, .pth or .pt is a PyTorch checkpoint.

#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "wmap/io/file_io.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct ShardSetOptions {
  bool prefer_consolidated = false;  // take consolidated*.safetensors over sharded files
  const FileSystem* fs = nullptr;    // reads the index.json; default: FileSystem::standard()
};

struct ShardIndex {
  std::filesystem::path file;  // the index.json read
  // tensor -> shard, sorted by tensor. The names are views into `text` (the index's own bytes:
  // 40 MB and 400k keys for the largest MoE checkpoints, so no string per key), or into
  // `unescaped` for the rare key written with JSON escapes. Copies share both.
  std::vector<std::pair<std::string_view, uint32_t>> weight_map;
  std::shared_ptr<const std::string> text;
  std::shared_ptr<std::deque<std::string>> unescaped;
};

enum class ShardFormat : uint8_t {
  kSafetensors,  // *.safetensors
  kTorch,        // torch.save zip checkpoints (*.bin, *.pth, *.pt), see torch_checkpoint.h
};

struct ShardSet {
  std::filesystem::path root;                      // directory holding the shards
  std::vector<std::string> files;                  // shard file names relative to root, in catalog order
  std::optional<ShardIndex> index;                 // present when an index.json was used
  std::vector<std::string> warnings;               // ignored files and the like
  ShardFormat format = ShardFormat::kSafetensors;  // every file of a set has the same format

  std::filesystem::path path_of(uint32_t shard) const { return root / files[shard]; }
};

ShardSet discover_shards(const std::filesystem::path& path, const ShardSetOptions& options = {});

// Parses an index.json text (exposed for tests and fuzzing; the text is copied). `shard_names` receives the distinct
// shard file names in order of first appearance. Throws kMalformedInput naming `file`.
ShardIndex parse_shard_index(std::string_view json, const std::string& file, std::vector<std::string>& shard_names);

}  // namespace wmap
WMAP_PUBLIC_END
