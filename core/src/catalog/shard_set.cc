#include "wmap/catalog/shard_set.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "wmap/io/remote.h"
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
  if (bad)
    throw Error(ErrorCode::kMalformedInput,
                file + ": weight_map names shard '" + name + "', which is not a relative path inside the checkpoint");
}

}  // namespace

namespace {
// The index owns `text`: its bytes followed by SIMDJSON_PADDING readable bytes.
ShardIndex parse_index_impl(std::shared_ptr<const std::string> text, const std::string& file,
                            std::vector<std::string>& shard_names);
}  // namespace

ShardIndex parse_shard_index(std::string_view json, const std::string& file, std::vector<std::string>& shard_names) {
  std::string text(json.size() + simdjson::SIMDJSON_PADDING, '\0');
  std::copy(json.begin(), json.end(), text.begin());
  return parse_index_impl(std::make_shared<const std::string>(std::move(text)), file, shard_names);
}

namespace {

// The slow, thorough path, taken only when the fast one met something it does not accept: a DOM
// parse of the whole text that names what is wrong. Returns normally only when it finds nothing.
void explain_index_error(std::string_view json, const std::string& file) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto err = parser.parse(json.data(), json.size(), true).get(root)) {
    throw Error(ErrorCode::kMalformedInput, file + ": not valid JSON: " + simdjson::error_message(err));
  }
  if (root.type() != simdjson::dom::element_type::OBJECT) {
    throw Error(ErrorCode::kMalformedInput, file + ": not a JSON object");
  }
  simdjson::dom::object weight_map;
  if (root["weight_map"].get_object().get(weight_map)) {
    throw Error(ErrorCode::kMalformedInput, file + ": missing \"weight_map\" object");
  }
  for (auto field : weight_map) {
    if (!field.value.is_string()) {
      throw Error(ErrorCode::kMalformedInput, file + ": weight_map entry '" + std::string(field.key) + "' is " +
                                                  simdjson::minify(field.value) + ", not a file name");
    }
  }
}

bool json_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The bytes of one weight_map entry as written (between the quotes, escapes not decoded), found
// from simdjson's structural positions rather than by walking the text byte by byte (which was
// the index parse's largest cost: 8.9 MB for DeepSeek-R1). `key_raw` points just past the key's
// opening quote; `value_token` is the value's raw token (from its first byte to the next
// structural: the closing quote plus any whitespace). False when the value is not a string
// (or, defensively, when the bytes between key and value are not `"`, whitespace, `:`).
struct RawEntry {
  std::string_view key, value;
  bool key_escaped = false, value_escaped = false;
};
// The bytes between a string's quotes as JSON allows them: no unescaped quote, no control
// character. simdjson's on-demand API does not check what it is not asked to read, so the raw
// bytes taken here are checked here (found by fuzz/shard_index_fuzzer, differential).
bool json_string_body(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      ++i;  // the escaped character; simdjson decodes (and checks) escapes where they occur
    } else if (c == '"' || c < 0x20) {
      return false;
    }
  }
  return true;
}

bool raw_entry(const char* key_raw, std::string_view value_token, RawEntry& out) {
  // The value's token runs to the next structural character: after a member value only `,` or
  // `}` may follow (`"k": "v" : "w"` is not JSON, and on-demand iteration does not say so).
  const char next = value_token.data()[value_token.size()];  // in the text or its padding
  if (next != ',' && next != '}') return false;
  while (!value_token.empty() && json_space(value_token.back())) value_token.remove_suffix(1);
  if (value_token.size() < 2 || value_token.front() != '"' || value_token.back() != '"') return false;
  out.value = value_token.substr(1, value_token.size() - 2);
  // Back from the value over `ws : ws` to the key's closing quote.
  const char* q = value_token.data() - 1;
  while (q > key_raw && json_space(*q)) --q;
  if (*q != ':') return false;  // simdjson has checked it is there: defensive
  --q;
  while (q > key_raw && json_space(*q)) --q;
  if (q < key_raw || *q != '"') return false;
  out.key = {key_raw, static_cast<size_t>(q - key_raw)};
  if (!json_string_body(out.key) || !json_string_body(out.value)) return false;
  out.key_escaped = std::memchr(out.key.data(), '\\', out.key.size()) != nullptr;
  out.value_escaped = std::memchr(out.value.data(), '\\', out.value.size()) != nullptr;
  return true;
}

// Reads a value through to its end, checking what on-demand parsing would otherwise skip
// unchecked: every key, string, number and literal inside it.
simdjson::error_code read_through(simdjson::ondemand::value value, int depth) {
  if (depth > 1024) return simdjson::DEPTH_ERROR;  // the DOM parser's default depth
  simdjson::ondemand::json_type type;
  if (auto err = value.type().get(type)) return err;
  switch (type) {
    case simdjson::ondemand::json_type::object: {
      simdjson::ondemand::object object;
      if (auto err = value.get_object().get(object)) return err;
      for (auto field_result : object) {
        simdjson::ondemand::field field;
        std::string_view key;
        if (auto err = std::move(field_result).get(field)) return err;
        if (auto err = field.unescaped_key().get(key)) return err;
        if (auto err = read_through(field.value(), depth + 1)) return err;
      }
      return simdjson::SUCCESS;
    }
    case simdjson::ondemand::json_type::array: {
      simdjson::ondemand::array array;
      if (auto err = value.get_array().get(array)) return err;
      for (auto element_result : array) {
        simdjson::ondemand::value element;
        if (auto err = std::move(element_result).get(element)) return err;
        if (auto err = read_through(element, depth + 1)) return err;
      }
      return simdjson::SUCCESS;
    }
    case simdjson::ondemand::json_type::number: {
      simdjson::ondemand::number number;
      return value.get_number().get(number);
    }
    case simdjson::ondemand::json_type::string: {
      std::string_view text;
      return value.get_string().get(text);
    }
    case simdjson::ondemand::json_type::boolean: {
      bool b = false;
      return value.get_bool().get(b);
    }
    case simdjson::ondemand::json_type::null: {
      bool null = false;
      if (auto err = value.is_null().get(null)) return err;
      return null ? simdjson::SUCCESS : simdjson::N_ATOM_ERROR;
    }
  }
  return simdjson::INCORRECT_TYPE;
}

// Reads the weight_map object's entries into `index` (keys as string_views into the text) and
// names each distinct shard once in `shard_names` / `shard_ids`. Returns the first parse error.
simdjson::error_code read_weight_map(simdjson::ondemand::object& weight_map, size_t text_size, const std::string& file,
                                     ShardIndex& index, std::vector<std::string>& shard_names,
                                     std::map<std::string, uint32_t, std::less<>>& shard_ids) {
  // An entry takes at least 8 bytes (`"k":"v",`): an upper bound, reserved once. Pages past
  // the entries written are never touched, so the slack costs address space, not memory.
  index.weight_map.reserve(text_size / 8 + 1);
  // Neighbouring keys usually live in the same shard: remember the last one (as written).
  std::string_view last_raw;
  uint32_t last_id = 0;
  for (auto field_result : weight_map) {
    simdjson::ondemand::field field;
    if (auto err = std::move(field_result).get(field)) return err;
    const std::string_view token = field.value().raw_json_token();
    RawEntry entry;
    if (!raw_entry(field.key().raw(), token, entry)) return simdjson::INCORRECT_TYPE;
    std::string_view key = entry.key;
    if (entry.key_escaped) {
      std::string_view decoded;
      if (auto err = field.unescaped_key().get(decoded)) return err;
      key = index.unescaped->emplace_back(decoded);
    }
    const std::string_view shard_raw = entry.value;
    if (last_raw.data() == nullptr || shard_raw != last_raw || entry.value_escaped) {
      std::string shard(shard_raw);
      if (entry.value_escaped) {
        // Rare: decode through a one-string DOM parse of the value as written.
        simdjson::dom::parser one;
        std::string_view decoded;
        if (auto err = one.parse("\"" + shard + "\"").get_string().get(decoded)) return err;
        shard = std::string(decoded);
      }
      auto it = shard_ids.find(shard);
      if (it == shard_ids.end()) {
        check_shard_name(shard, file);
        it = shard_ids.emplace(shard, static_cast<uint32_t>(shard_names.size())).first;
        shard_names.push_back(shard);
      }
      last_raw = shard_raw;
      last_id = it->second;
    }
    index.weight_map.emplace_back(key, last_id);
  }
  return simdjson::SUCCESS;
}

// Root fields in order: weight_map is read; everything else (metadata; a second weight_map,
// which the DOM path ignores as well) is read through, so an index that is not valid JSON is
// refused here as a DOM parse would refuse it.
simdjson::error_code read_index_root(const std::string& text, size_t size, const std::string& file, ShardIndex& index,
                                     std::vector<std::string>& shard_names,
                                     std::map<std::string, uint32_t, std::less<>>& shard_ids) {
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc;
  simdjson::ondemand::object root;
  if (auto err = parser.iterate(simdjson::padded_string_view(text.data(), size, text.size())).get(doc)) return err;
  if (auto err = doc.get_object().get(root)) return err;
  bool seen_weight_map = false;
  for (auto root_field_result : root) {
    simdjson::ondemand::field root_field;
    if (auto err = std::move(root_field_result).get(root_field)) return err;
    std::string_view root_key;
    if (auto err = root_field.unescaped_key().get(root_key)) return err;
    if (root_key != "weight_map" || seen_weight_map) {
      if (auto err = read_through(root_field.value(), 0)) return err;
      continue;
    }
    seen_weight_map = true;
    simdjson::ondemand::object weight_map;
    if (auto err = root_field.value().get_object().get(weight_map)) return err;
    if (auto err = read_weight_map(weight_map, size, file, index, shard_names, shard_ids)) return err;
  }
  if (!seen_weight_map) return simdjson::NO_SUCH_FIELD;
  // A token after the root object (current_location fails only at the end of the text).
  if (const char* rest = nullptr; doc.current_location().get(rest) == simdjson::SUCCESS)
    return simdjson::TRAILING_CONTENT;
  return simdjson::SUCCESS;
}

// Shards in name order, whatever order the weight_map lists them in; keys sorted; a key named
// twice refused.
void sort_index(ShardIndex& index, const std::string& file, std::vector<std::string>& shard_names,
                std::map<std::string, uint32_t, std::less<>>& shard_ids) {
  const size_t first_new = shard_names.size() - shard_ids.size();
  std::vector<std::string> sorted(shard_names.begin() + static_cast<ptrdiff_t>(first_new), shard_names.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint32_t> remap(shard_names.size());
  for (size_t i = 0; i < sorted.size(); ++i) remap[shard_ids[sorted[i]]] = static_cast<uint32_t>(first_new + i);
  std::copy(sorted.begin(), sorted.end(), shard_names.begin() + static_cast<ptrdiff_t>(first_new));
  for (auto& entry : index.weight_map) entry.second = remap[entry.second];
  // Index files are usually written sorted by key already; sorting 100k strings is not free.
  if (!std::is_sorted(index.weight_map.begin(), index.weight_map.end())) {
    std::sort(index.weight_map.begin(), index.weight_map.end());
  }
  for (size_t i = 1; i < index.weight_map.size(); ++i) {
    if (index.weight_map[i].first == index.weight_map[i - 1].first) {
      throw Error(ErrorCode::kMalformedInput,
                  file + ": weight_map names tensor '" + std::string(index.weight_map[i].first) + "' twice");
    }
  }
}

// simdjson's on-demand API: one structural pass over the text and no DOM; keys stay in the text
// (a DeepSeek-V3 layout with 1,152 experts writes 410k keys in 40 MB of index: a string per key
// and a DOM were the catalog's largest cost there, docs/performance.md). On any error the DOM
// parser explains where (explain_index_error), else the fast path's own error is reported.
ShardIndex parse_index_impl(std::shared_ptr<const std::string> text, const std::string& file,
                            std::vector<std::string>& shard_names) {
  const size_t size = text->size() - simdjson::SIMDJSON_PADDING;
  ShardIndex index;
  index.file = file;
  index.unescaped = std::make_shared<std::deque<std::string>>();
  std::map<std::string, uint32_t, std::less<>> shard_ids;
  if (auto err = read_index_root(*text, size, file, index, shard_names, shard_ids)) {
    explain_index_error(std::string_view(text->data(), size), file);
    throw Error(ErrorCode::kMalformedInput, file + ": not valid JSON: " + simdjson::error_message(err));
  }
  index.text = std::move(text);
  sort_index(index, file, shard_names, shard_ids);
  return index;
}

// The checkpoint's files by kind, each list sorted.
struct DirectoryListing {
  std::vector<std::string> sharded, consolidated;              // *.safetensors, consolidated*.safetensors
  std::vector<std::string> torch_model, torch_bin, torch_pth;  // pytorch_model*.bin, other *.bin, *.pth
  bool has_index = false, has_torch_index = false;
  // False where the storage cannot list (plain HTTP): the index files are then looked up by name
  // and the shards an index names are not checked here (opening one that is missing names it).
  bool listed = true;
};

DirectoryListing list_checkpoint_files(const FileSystem& fsys, const fs::path& path) {
  DirectoryListing l;
  const auto names = fsys.list(path);
  l.listed = names.has_value();
  if (!names) return l;
  for (const std::string& name : *names) {
    const bool st = ends_with(name, ".safetensors");
    const bool bin = ends_with(name, ".bin"), pth = ends_with(name, ".pth");
    if (bin) {
      if (name.rfind("pytorch_model", 0) == 0) {
        l.torch_model.push_back(name);
      } else if (name != "training_args.bin") {
        l.torch_bin.push_back(name);
      }
    } else if (pth) {
      if (name.rfind("rng_state", 0) != 0) l.torch_pth.push_back(name);
    } else if (st) {
      (name.rfind("consolidated", 0) == 0 ? l.consolidated : l.sharded).push_back(name);
    }
    if (name == kIndexName) l.has_index = true;
    if (name == kTorchIndexName) l.has_torch_index = true;
  }
  for (auto* v : {&l.sharded, &l.consolidated, &l.torch_model, &l.torch_bin, &l.torch_pth})
    std::sort(v->begin(), v->end());
  return l;
}

// The one index.json rule, for safetensors and PyTorch indexes alike: parse it, refuse an empty
// map and a named shard that does not exist, and warn about each listed file it does not name.
void use_index(ShardSet& set, const fs::path& index_path, const FileSystem& fsys, const DirectoryListing& l,
               std::initializer_list<const std::vector<std::string>*> unnamed_candidates) {
  const std::string index_name = index_path.filename().string();
  set.index = parse_index_impl(std::make_shared<const std::string>(
                                   fsys.read_whole_file(index_path, kMaxIndexFileBytes, simdjson::SIMDJSON_PADDING)),
                               display_path(index_path), set.files);
  if (set.files.empty())
    throw Error(ErrorCode::kMalformedInput, display_path(index_path) + ": weight_map names no shard");
  for (const auto& f : set.files) {
    if (l.listed && fsys.status(set.root / f).kind != PathStatus::Kind::kFile) {
      throw Error(ErrorCode::kNotFound, display_path(index_path) + ": names shard '" + f +
                                            "', which does not exist in " + display_path(set.root));
    }
  }
  const std::set<std::string> named(set.files.begin(), set.files.end());
  for (const auto* v : unnamed_candidates) {
    for (const auto& f : *v) {
      if (!named.count(f)) set.warnings.push_back(f + ": ignored (not named by " + index_name + ")");
    }
  }
}

// No safetensors at all: a PyTorch checkpoint, if there is one.
ShardSet choose_torch_files(ShardSet set, const DirectoryListing& l, const FileSystem& fsys) {
  set.format = ShardFormat::kTorch;
  const fs::path torch_index_path = set.root / kTorchIndexName;
  if (l.has_torch_index) {
    use_index(set, torch_index_path, fsys, l, {&l.torch_model, &l.torch_bin, &l.torch_pth});
    return set;
  }
  set.files = !l.torch_model.empty() ? l.torch_model : !l.torch_bin.empty() ? l.torch_bin : l.torch_pth;
  if (set.files.empty()) {
    throw Error(
        ErrorCode::kNotFound,
        display_path(set.root) +
            ": no .safetensors file in this directory (nor a PyTorch pytorch_model*.bin / *.bin / *.pth checkpoint)");
  }
  if (!l.torch_model.empty()) {
    for (const auto& f : l.torch_bin) set.warnings.push_back(f + ": ignored (pytorch_model*.bin files were chosen)");
  }
  if (!l.torch_model.empty() || !l.torch_bin.empty()) {
    for (const auto& f : l.torch_pth) set.warnings.push_back(f + ": ignored (.bin files were chosen)");
  }
  return set;
}
}  // namespace

ShardSet discover_shards(const fs::path& given, const ShardSetOptions& options) {
  const FileSystem& fsys = options.fs ? *options.fs : FileSystem::standard();
  // A URL's credentials and query stay in the file system: the root, every shard's path and so
  // every message and saved catalog hold the path without them (review F4).
  const fs::path path = fsys.location(given);
  const PathStatus status = fsys.status(path);
  if (status.kind == PathStatus::Kind::kNone)
    throw Error(ErrorCode::kNotFound, display_path(path) + ": no such file or directory");
  ShardSet set;
  if (status.kind == PathStatus::Kind::kFile) {
    set.root = path.parent_path().empty() ? fs::path(".") : path.parent_path();
    set.files.push_back(path.filename().string());
    if (is_torch_checkpoint_name(set.files.front())) set.format = ShardFormat::kTorch;
    return set;
  }
  set.root = path;
  DirectoryListing l = list_checkpoint_files(fsys, path);
  const fs::path index_path = path / kIndexName;
  if (!l.listed) {
    // Storage without listings: the index by name, else the one-file checkpoint's usual name.
    l.has_index = fsys.status(index_path).kind == PathStatus::Kind::kFile;
    if (!l.has_index && fsys.status(path / kTorchIndexName).kind == PathStatus::Kind::kFile) l.has_torch_index = true;
    if (!l.has_index && !l.has_torch_index && fsys.status(path / "model.safetensors").kind == PathStatus::Kind::kFile)
      l.sharded.push_back("model.safetensors");
    if (!l.has_index && !l.has_torch_index && l.sharded.empty()) {
      throw Error(ErrorCode::kNotFound, display_path(path) + ": neither " + std::string(kIndexName) + " nor " +
                                            std::string(kTorchIndexName) +
                                            " nor model.safetensors is there, and this storage cannot list a folder: "
                                            "name the .safetensors file, or serve the index");
    }
  }
  const bool has_index = l.has_index;
  if (l.sharded.empty() && l.consolidated.empty() && !has_index) return choose_torch_files(std::move(set), l, fsys);
  // Safetensors win: PyTorch files beside them are never mixed in.
  for (auto* v : {&l.torch_model, &l.torch_bin, &l.torch_pth}) {
    for (const auto& f : *v)
      set.warnings.push_back(f + ": ignored (safetensors files were chosen; PyTorch checkpoints are not mixed in)");
  }
  if (l.has_torch_index) {
    set.warnings.push_back(std::string(kTorchIndexName) + ": ignored (safetensors files were chosen)");
  }
  if (!l.consolidated.empty() && (options.prefer_consolidated || (l.sharded.empty() && !has_index))) {
    set.files = l.consolidated;
    for (const auto& f : l.sharded) set.warnings.push_back(f + ": ignored (consolidated files were chosen)");
    return set;
  }
  if (has_index) {
    use_index(set, index_path, fsys, l, {&l.sharded, &l.consolidated});
    return set;
  }
  if (l.sharded.empty())
    throw Error(ErrorCode::kNotFound, display_path(path) + ": no .safetensors file in this directory");
  set.files = l.sharded;
  for (const auto& f : l.consolidated) set.warnings.push_back(f + ": ignored (sharded files were chosen)");
  return set;
}

}  // namespace wmap
