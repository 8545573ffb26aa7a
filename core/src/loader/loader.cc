#include "wmap/loader/loader.h"
#include "wmap/loader/weight_cache.h"

#include <chrono>
#include <set>

#include "wmap/format/layout_transforms.h"
#include "wmap/util/error.h"
#include "wmap/util/install_paths.h"
#include "logger.h"
#include "wmap/util/progress.h"
#include "wmap/catalog/shard_set.h"
#include "wmap/spec/config_bounds.h"
#include "wmap/device/scale_inversion.h"

namespace wmap {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

class RenamedProbe final : public KeyProbe {
 public:
  explicit RenamedProbe(const RenamedCatalog& renamed) : renamed_(renamed) {}
  bool contains(std::string_view key) const override { return renamed_.find(key) != nullptr; }
  std::optional<uint64_t> highest_index(std::string_view prefix) const override {
    return wmap::highest_index(renamed_, prefix);
  }
  TensorDim largest_dim() const override {
    if (!largest_) largest_ = wmap::largest_dim(renamed_);  // one pass over the catalog, on first use
    return *largest_;
  }

 private:
  const RenamedCatalog& renamed_;
  mutable std::optional<TensorDim> largest_;
};

}  // namespace

void register_builtin_transforms(PluginHost& host) {
  host.add_builtin_transform("invert_scale", [](std::span<std::byte> d, DType t, const std::string& k,
                                                std::span<const uint64_t>) { invert_scale_lenient(d, t, k); });
  host.add_builtin_transform("invert_scale_strict", [](std::span<std::byte> d, DType t, const std::string& k,
                                                       std::span<const uint64_t>) { invert_scale_strict(d, t, k); });
  host.add_builtin_transform("bf16_to_f32", widen_bf16_to_f32);
  host.add_builtin_transform("block_scale_interleave_128x4", block_scale_interleave_128x4);
}

std::optional<Error> as_load_failure(const Error& e) {
  if (e.code() == ErrorCode::kIo || e.code() == ErrorCode::kNotFound) return Error(ErrorCode::kValidation, e.what());
  return std::nullopt;
}

LoaderSession::LoaderSession(const LoaderOptions& options) : options_(options) {
  if (!options_.checkpoint && !options_.catalog_file) {
    throw Error(ErrorCode::kInvalidArgument,
                "nothing to load: give a checkpoint (a directory or .safetensors file) or a saved catalog (catalog)");
  }
  options_.layout.validate();
  const auto plugin_folders = plugin_search_path(options_.plugin_dir);
  plugins_ = PluginHost::load(plugin_folders);
  register_builtin_transforms(plugins_);
  // Mapping files: --mappings, WMAP_MAPPINGS_PATH, then files beside the plugins, then the default.
  std::vector<std::filesystem::path> mapping_defaults = plugin_folders;
  mapping_defaults.push_back(default_mapping_dir());
  mappings_ = MappingRegistry::load(mapping_search_path(options_.mappings_dir, mapping_defaults), file_system());
}

std::unique_ptr<PreparedLoad> LoaderSession::prepare() const {
  auto out = std::make_unique<PreparedLoad>();
  auto t0 = std::chrono::steady_clock::now();
  if (options_.catalog_file) {
    Catalog catalog = Catalog::load_json_file(*options_.catalog_file, file_system());
    if (options_.checkpoint) {
      // The weights are here: refuse shards that changed since the catalog was saved.
      const auto dir = file_system().status(*options_.checkpoint).kind == PathStatus::Kind::kDirectory
                           ? *options_.checkpoint
                           : options_.checkpoint->parent_path();
      const auto changed = catalog.changed_shards(dir, file_system());
      if (!changed.empty()) {
        std::string msg = "the checkpoint changed since " + options_.catalog_file->string() + " was saved:";
        for (const auto& c : changed) msg += "\n  " + c;
        throw Error(ErrorCode::kValidation, msg);
      }
      catalog.set_root(dir);
    }
    out->catalog = std::make_shared<const Catalog>(std::move(catalog));
  } else {
    ShardSet set = discover_shards(*options_.checkpoint,
                                   {.prefer_consolidated = options_.prefer_consolidated, .fs = &file_system()});
    for (const auto& w : set.warnings) log().warn("{}", w);
    Progress progress("catalog", set.files.size(), options_.progress, " shards");
    CatalogBuildOptions build;
    build.fs = &file_system();
    build.progress = [&](size_t done, size_t) { progress.update(done); };
    out->catalog = std::make_shared<const Catalog>(Catalog::build(set, build));
  }
  out->catalog_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();

  std::filesystem::path config_path;
  if (options_.config_file) {
    config_path = *options_.config_file;
  } else if (options_.checkpoint) {
    config_path = (file_system().status(*options_.checkpoint).kind == PathStatus::Kind::kDirectory
                       ? *options_.checkpoint
                       : options_.checkpoint->parent_path()) /
                  "config.json";
  } else {
    throw Error(ErrorCode::kInvalidArgument, "a saved catalog needs the checkpoint's config.json (config)");
  }
  out->config = ModelConfig::load(config_path, file_system());
  out->architecture = out->config.architecture();

  // The mapping file names the plugin; without one, the plugin claiming the architecture.
  out->mapping = mappings_.find(out->architecture);
  if (out->mapping) {
    out->plugin = &plugins_.require_by_name(out->mapping->plugin);
    out->renames = RenameTable(*out->mapping);
  } else {
    out->plugin = plugins_.find_by_architecture(out->architecture);
    if (!out->plugin) {
      // Plugins and mapping files may claim the same architecture: list each once, sorted.
      std::set<std::string> architectures;
      for (const auto* p : plugins_.plugins()) architectures.insert(p->architectures.begin(), p->architectures.end());
      for (const auto& a : mappings_.architectures()) architectures.insert(a);
      std::string known;
      for (const auto& a : architectures) known += (known.empty() ? "" : ", ") + a;
      std::string msg = config_path.string() + ": architecture '" + out->architecture +
                        "' is served by no plugin and no mapping file (known: " + (known.empty() ? "none" : known) +
                        ")";
      for (const auto& r : plugins_.refused()) msg += "; refused plugin " + r;
      throw Error(ErrorCode::kUnsupported, msg);
    }
  }
  const double setup_seconds = seconds_since(t0);
  const RenamedCatalog renamed = out->renames.apply(*out->catalog);
  const double rename_seconds = seconds_since(t0) - setup_seconds;
  RenamedProbe probe(renamed);
  out->spec = plugins_.build_spec(*out->plugin, out->config, options_.layout, probe);
  if (out->spec.plugin.empty()) out->spec.plugin = out->plugin->name;
  if (out->spec.architecture.empty()) out->spec.architecture = out->architecture;
  const double spec_seconds = seconds_since(t0) - setup_seconds - rename_seconds;
  out->plan = std::make_unique<LoadPlan>(LoadPlan::build(out->spec, out->catalog, renamed, options_.plan));
  out->plan_seconds = seconds_since(t0);
  log().debug(
      "plan phase: config and mapping {:.3f}s, renames {:.3f}s, plugin spec {:.3f}s, plan and validation {:.3f}s",
      setup_seconds, rename_seconds, spec_seconds, out->plan_seconds - setup_seconds - rename_seconds - spec_seconds);
  return out;
}

ExecOptions LoaderSession::session_exec(ExecOptions exec) const {
  if (!exec.transforms) {
    exec.transforms = [this](std::string_view name) { return plugins_.find_transform(name); };
  }
  if (!exec.fs) exec.fs = options_.fs;
  return exec;
}

LoadedModel LoaderSession::load(const PreparedLoad& prepared, Device& device, ExecOptions exec, bool cached) const {
  if (!cached) return execute_plan(*prepared.plan, device, session_exec(std::move(exec)));
  if (!device.spec().is_host()) {
    throw Error(ErrorCode::kInvalidArgument,
                "the weight cache keeps host parameter sets: load onto host, or without the cache");
  }
  prepared.plan->require_runnable(exec.allow_partial);  // a hit must not bypass it
  const WeightCache::Limits limits = WeightCache::limits_from_env();
  WeightCache& cache = WeightCache::process();
  const std::string key = WeightCache::key_of(*prepared.plan);
  if (limits.max_entries > 0) {
    if (auto hit = cache.lookup(key)) {
      // Nothing is read on a hit: no shard is hashed (stats.verification stays empty); the
      // parameters' digests are still what the caller asked for.
      if (exec.digests) hit->digests = param_digests(*hit, device);
      return std::move(*hit);
    }
  }
  LoadedModel model = execute_plan(*prepared.plan, device, session_exec(std::move(exec)));
  const bool kept = cache.insert(key, model, limits);
  model.stats.cache = kept ? "miss" : limits.max_entries > 0 ? "too-large" : "off";
  return model;
}

LoadIntoReport LoaderSession::load_into(const PreparedLoad& prepared, Device& device,
                                        const std::vector<Destination>& destinations, ExecOptions exec,
                                        const DestinationOptions& dest_options) const {
  return execute_into(*prepared.plan, device, destinations, session_exec(std::move(exec)), dest_options);
}

}  // namespace wmap
