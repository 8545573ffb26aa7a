// Differential fuzzing of the model.safetensors.index.json parser. The catalog parses indexes
// with simdjson's on-demand API and hand-walked tokens (fast, shard_set.cc); this target checks it
// against a plain DOM parse written here from the index's rules, so both must accept and refuse
// the same inputs and, when they accept, name the same tensors in the same shards. Any exception
// other than wmap::Error, or any disagreement, aborts.
#include <simdjson.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wmap/catalog/shard_set.h"
#include "wmap/util/error.h"

namespace {

using Entries = std::vector<std::pair<std::string, std::string>>;  // (tensor, shard), sorted

// The index's rules, from a DOM: a JSON object whose first "weight_map" member is an object of
// string values; a tensor named once; each shard a relative path inside the checkpoint.
std::optional<Entries> reference_parse(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(json.data(), json.size(), true).get(root)) return std::nullopt;
  simdjson::dom::object object, weight_map;
  if (root.get_object().get(object)) return std::nullopt;
  if (object["weight_map"].get_object().get(weight_map)) return std::nullopt;
  Entries entries;
  for (auto field : weight_map) {
    std::string_view shard;
    if (field.value.get_string().get(shard)) return std::nullopt;
    const std::filesystem::path p(shard);
    if (shard.empty() || p.is_absolute()) return std::nullopt;
    for (const auto& part : p) {
      if (part == "..") return std::nullopt;
    }
    entries.emplace_back(std::string(field.key), std::string(shard));
  }
  std::sort(entries.begin(), entries.end());
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].first == entries[i - 1].first) return std::nullopt;
  }
  return entries;
}

[[noreturn]] void disagree(const char* what, std::string_view detail) {
  std::fprintf(stderr, "shard index parsers disagree: %s: %.*s\n", what, static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> shards;
  std::optional<Entries> fast;
  std::string fast_error;
  try {
    const wmap::ShardIndex index = wmap::parse_shard_index(json, "fuzz.index.json", shards);
    Entries entries;
    for (const auto& [key, shard] : index.weight_map) entries.emplace_back(std::string(key), shards.at(shard));
    std::sort(entries.begin(), entries.end());
    fast = std::move(entries);
  } catch (const wmap::Error& e) {
    fast_error = e.what();
  }
  const std::optional<Entries> reference = reference_parse(json);
  if (fast.has_value() != reference.has_value()) {
    disagree(fast ? "the fast parser accepts what the DOM reference refuses"
                  : "the fast parser refuses what the DOM reference accepts",
             fast_error);
  }
  if (fast && *fast != *reference) disagree("both accept but read different entries", "");
  return 0;
}
