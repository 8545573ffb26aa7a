#include "pipeline_stage.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <set>
#include <unordered_map>

#include "wmap/util/error.h"

namespace wmap {

namespace {

// The decoder layer a module belongs to: "model.layers.12" or "model.layers.12.mlp" -> 12.
std::optional<uint64_t> layer_of(const std::string& module, const std::string& prefix) {
  if (prefix.empty() || module.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const char* begin = module.data() + prefix.size();
  const char* end = module.data() + module.size();
  uint64_t index = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, index);
  if (ec != std::errc() || ptr == begin || (ptr != end && *ptr != '.')) return std::nullopt;
  return index;
}

bool listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

void keep_pipeline_stage(ModelSpec& spec, const std::string& who) {
  const Layout& l = spec.layout;
  if (l.pp_size <= 1) return;
  const PipelineSpec& pp = spec.pipeline;
  if (pp.layers == 0) {
    throw Error(ErrorCode::kInvalidArgument, who + "does not place " + spec.architecture +
                                                 "'s modules on pipeline stages: pp_size " + std::to_string(l.pp_size) +
                                                 " is not served for it (use pp_size 1)");
  }
  const Range mine = l.pp_layers(pp.layers);
  std::vector<ModuleSpec> kept, dropped;
  for (ModuleSpec& m : spec.modules) {
    bool here = false;
    if (const auto layer = layer_of(m.name, pp.layer_prefix)) {
      // Layers past the decoder stack are MTP layers: on the last stage, after the last decoder layer.
      here = *layer >= pp.layers ? l.last_stage() : (*layer >= mine.begin && *layer < mine.end);
    } else {
      const bool first = listed(pp.first, m.name), last = listed(pp.last, m.name);
      if (!first && !last) {
        throw Error(ErrorCode::kInvalidArgument,
                    who + "places module " + m.name + " on no pipeline stage (it is no decoder layer under '" +
                        pp.layer_prefix + "', nor listed for the first or the last stage)");
      }
      here = (first && l.first_stage()) || (last && l.last_stage());
    }
    (here ? kept : dropped).push_back(std::move(m));
  }
  // A kept alias of a dropped parameter holds a copy of it (TensorRT-LLM's tied lm_head on a
  // last stage that has no embedding is filled from the embedding's checkpoint tensor).
  std::unordered_map<std::string, const ParamSpec*> dropped_params;
  for (const ModuleSpec& m : dropped) {
    for (const ParamSpec& p : m.params) dropped_params.emplace(p.name, &p);
  }
  std::set<std::string> read_here;
  for (ModuleSpec& m : kept) {
    for (ParamSpec& p : m.params) {
      if (!p.alias_of.empty()) {
        if (auto it = dropped_params.find(p.alias_of); it != dropped_params.end()) {
          ParamSpec copy = *it->second;
          copy.name = p.name;
          copy.optional = p.optional;
          p = std::move(copy);
        }
      }
      for (const Piece& piece : p.pieces) {
        if (!piece.is_zero()) read_here.insert(piece.source);
      }
    }
  }
  // The other stages' tensors are left to other ranks: consumed for coverage, never read here.
  for (const ModuleSpec& m : dropped) {
    for (const ParamSpec& p : m.params) {
      for (const Piece& piece : p.pieces) {
        if (!piece.is_zero() && !read_here.count(piece.source)) {
          spec.other_ranks.push_back(piece.source);
          read_here.insert(piece.source);  // once
        }
      }
    }
    for (const std::string& subtree : m.subtrees) spec.other_ranks.push_back(subtree);
  }
  spec.modules = std::move(kept);
}

}  // namespace wmap
