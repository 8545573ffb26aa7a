#include "wmap/catalog/shard_set.h"

#include <simdjson.h>

#include <algorithm>
#include <map>
#include <set>

#include "wmap/util/error.h"
#include "wmap/format/torch_checkpoint.h"

namespace fs = std::filesystem;

namespace wmap {
namespace {

constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kTorchIndexName = "pytorch_model.bin.index.json";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A shard named by an index must be a plain relative path inside the checkpoint directory.
void check_shard_name(const std::string& name, const std::string& file) {
  const fs::path p(name);
  bool bad = name.empty() || p.is_absolute();
  for (const auto& part : p) bad = bad || part == "..";
  if (bad) throw Error(ErrorCode::kMalformedInput, file + ": weight_map names shard '" + name + "', which is not a relative path inside the checkpoint");
}

}  // namespace

namespace {
ShardIndex parse_index_impl(std::string_view json, bool padded, const std::string& file, std::vector<std::string>& shard_names);
}

ShardIndex parse_shard_index(std::string_view json, const std::string& file, std::vector<std::string>& shard_names) {
  return parse_index_impl(json, false, file, shard_names);
}

namespace {
// `padded`: json is followed by SIMDJSON_PADDING readable bytes, so it is parsed in place.
ShardIndex parse_index_impl(std::string_view json, bool padded, const std::string& file, std::vector<std::string>& shard_names) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto err = parser.parse(json.data(), json.size(), !padded).get(root)) {
    throw Error(ErrorCode::kMalformedInput, file + ": not valid JSON: " + simdjson::error_message(err));
  }
  simdjson::dom::object weight_map;
  if (root.type() != simdjson::dom::element_type::OBJECT) {
    throw Error(ErrorCode::kMalformedInput, file + ": not a JSON object");
  }
  if (root["weight_map"].get_object().get(weight_map)) {
    throw Error(ErrorCode::kMalformedInput, file + ": missing \"weight_map\" object");
  }
  ShardIndex index;
  index.file = file;
  std::map<std::string, uint32_t, std::less<>> shard_ids;
  index.weight_map.reserve(weight_map.size());
  // Neighbouring keys usually live in the same shard: remember the last one looked up.
  auto last = shard_ids.end();
  for (auto field : weight_map) {
    std::string_view shard;
    if (field.value.get_string().get(shard)) {
      throw Error(ErrorCode::kMalformedInput, file + ": weight_map entry '" + std::string(field.key) +
                                                  "' is " + simdjson::minify(field.value) + ", not a file name");
    }
    auto it = (last != shard_ids.end() && last->first == shard) ? last : shard_ids.find(shard);
    if (it == shard_ids.end()) {
      check_shard_name(std::string(shard), file);
      it = shard_ids.emplace(std::string(shard), static_cast<uint32_t>(shard_names.size())).first;
      shard_names.emplace_back(shard);
    }
    last = it;
    index.weight_map.emplace_back(std::string(field.key), it->second);
  }
  // Shards in name order, whatever order the weight_map lists them in.
  const size_t first_new = shard_names.size() - shard_ids.size();
  std::vector<std::string> sorted(shard_names.begin() + static_cast<ptrdiff_t>(first_new), shard_names.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint32_t> remap(shard_names.size());
  for (size_t i = 0; i < sorted.size(); ++i) remap[shard_ids[sorted[i]]] = static_cast<uint32_t>(first_new + i);
  std::copy(sorted.begin(), sorted.end(), shard_names.begin() + static_cast<ptrdiff_t>(first_new));
  for (auto& [name, shard] : index.weight_map) shard = remap[shard];
  // Index files are usually written sorted by key already; sorting 100k strings is not free.
  if (!std::is_sorted(index.weight_map.begin(), index.weight_map.end())) {
    std::sort(index.weight_map.begin(), index.weight_map.end());
  }
  for (size_t i = 1; i < index.weight_map.size(); ++i) {
    if (index.weight_map[i].first == index.weight_map[i - 1].first) {
      throw Error(ErrorCode::kMalformedInput, file + ": weight_map names tensor '" + index.weight_map[i].first + "' twice");
    }
  }
  return index;
}
}  // namespace

ShardSet discover_shards(const fs::path& path, const ShardSetOptions& options) {
  const FileSystem& fsys = options.fs ? *options.fs : FileSystem::posix();
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) throw Error(ErrorCode::kNotFound, path.string() + ": no such file or directory");
  ShardSet set;
  if (fs::is_regular_file(status)) {
    set.root = path.parent_path().empty() ? fs::path(".") : path.parent_path();
    set.files.push_back(path.filename().string());
    if (is_torch_checkpoint_name(set.files.front())) set.format = ShardFormat::kTorch;
    return set;
  }
  if (!fs::is_directory(status)) throw Error(ErrorCode::kInvalidArgument, path.string() + ": not a file or directory");
  set.root = path;

  std::vector<std::string> sharded, consolidated;
  std::vector<std::string> torch_model, torch_bin, torch_pth;  // pytorch_model*.bin, other *.bin, *.pth
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    const bool st = ends_with(name, ".safetensors");
    const bool bin = ends_with(name, ".bin"), pth = ends_with(name, ".pth");
    if (!st && !bin && !pth) continue;
    std::error_code fec;
    if (!entry.is_regular_file(fec)) continue;
    if (bin) {
      if (name.rfind("pytorch_model", 0) == 0) {
        torch_model.push_back(name);
      } else if (name != "training_args.bin") {
        torch_bin.push_back(name);
      }
      continue;
    }
    if (pth) {
      if (name.rfind("rng_state", 0) != 0) torch_pth.push_back(name);
      continue;
    }
    (name.rfind("consolidated", 0) == 0 ? consolidated : sharded).push_back(name);
  }
  if (ec) throw Error(ErrorCode::kIo, path.string() + ": cannot list directory: " + ec.message());
  std::sort(sharded.begin(), sharded.end());
  std::sort(consolidated.begin(), consolidated.end());
  for (auto* v : {&torch_model, &torch_bin, &torch_pth}) std::sort(v->begin(), v->end());

  const fs::path index_path = path / kIndexName;
  const fs::path torch_index_path = path / kTorchIndexName;
  if (sharded.empty() && consolidated.empty() && !fs::exists(index_path)) {
    // No safetensors at all: a PyTorch checkpoint, if there is one.
    set.format = ShardFormat::kTorch;
    if (fs::exists(torch_index_path)) {
      const std::string text = fsys.read_whole_file(torch_index_path, simdjson::SIMDJSON_PADDING);
      set.index = parse_index_impl(std::string_view(text.data(), text.size() - simdjson::SIMDJSON_PADDING), true,
                                   torch_index_path.string(), set.files);
      for (const auto& f : set.files) {
        if (!fs::is_regular_file(path / f, ec)) {
          throw Error(ErrorCode::kNotFound, torch_index_path.string() + ": names shard '" + f + "', which does not exist in " + path.string());
        }
      }
      if (set.files.empty()) throw Error(ErrorCode::kMalformedInput, torch_index_path.string() + ": weight_map names no shard");
      const std::set<std::string> named(set.files.begin(), set.files.end());
      for (auto* v : {&torch_model, &torch_bin, &torch_pth}) {
        for (const auto& f : *v) {
          if (!named.count(f)) set.warnings.push_back(f + ": ignored (not named by " + std::string(kTorchIndexName) + ")");
        }
      }
      return set;
    }
    set.files = !torch_model.empty() ? torch_model : !torch_bin.empty() ? torch_bin : torch_pth;
    if (!set.files.empty()) {
      const auto& others = !torch_model.empty() ? torch_bin : std::vector<std::string>{};
      for (const auto& f : others) set.warnings.push_back(f + ": ignored (pytorch_model*.bin files were chosen)");
      if (!torch_model.empty() || !torch_bin.empty()) {
        for (const auto& f : torch_pth) set.warnings.push_back(f + ": ignored (.bin files were chosen)");
      }
      return set;
    }
    throw Error(ErrorCode::kNotFound, path.string() + ": no .safetensors file in this directory (nor a PyTorch pytorch_model*.bin / *.bin / *.pth checkpoint)");
  }
  // Safetensors win: PyTorch files beside them are never mixed in.
  for (auto* v : {&torch_model, &torch_bin, &torch_pth}) {
    for (const auto& f : *v) set.warnings.push_back(f + ": ignored (safetensors files were chosen; PyTorch checkpoints are not mixed in)");
  }
  if (fs::exists(torch_index_path)) {
    set.warnings.push_back(std::string(kTorchIndexName) + ": ignored (safetensors files were chosen)");
  }
  const bool use_consolidated = !consolidated.empty() && (options.prefer_consolidated || (sharded.empty() && !fs::exists(index_path)));
  if (use_consolidated) {
    set.files = consolidated;
    for (const auto& f : sharded) set.warnings.push_back(f + ": ignored (consolidated files were chosen)");
    return set;
  }
  if (fs::exists(index_path)) {
    const std::string text = fsys.read_whole_file(index_path, simdjson::SIMDJSON_PADDING);
    set.index = parse_index_impl(std::string_view(text.data(), text.size() - simdjson::SIMDJSON_PADDING), true,
                                 index_path.string(), set.files);
    for (const auto& f : set.files) {
      if (!fs::is_regular_file(path / f, ec)) {
        throw Error(ErrorCode::kNotFound, index_path.string() + ": names shard '" + f + "', which does not exist in " + path.string());
      }
    }
    const std::set<std::string> named(set.files.begin(), set.files.end());
    for (const auto& f : sharded) {
      if (!named.count(f)) set.warnings.push_back(f + ": ignored (not named by " + std::string(kIndexName) + ")");
    }
    for (const auto& f : consolidated) {
      if (!named.count(f)) set.warnings.push_back(f + ": ignored (not named by " + std::string(kIndexName) + ")");
    }
    if (set.files.empty()) throw Error(ErrorCode::kMalformedInput, index_path.string() + ": weight_map names no shard");
    return set;
  }
  if (sharded.empty()) throw Error(ErrorCode::kNotFound, path.string() + ": no .safetensors file in this directory");
  set.files = sharded;
  for (const auto& f : consolidated) set.warnings.push_back(f + ": ignored (sharded files were chosen)");
  return set;
}

}  // namespace wmap
