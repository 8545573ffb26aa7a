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
  std::optional<DType> dtype_of(std::string_view key) const override {
    const RenamedTensor* t = renamed_.find(key);
    return t ? std::optional<DType>(t->source->dtype) : std::nullopt;
  }
  std::optional<std::vector<uint64_t>> shape_of(std::string_view key) const override {
    const RenamedTensor* t = renamed_.find(key);
    return t ? std::optional<std::vector<uint64_t>>(t->source->shape) : std::nullopt;
  }
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

// A ModelOpt export states its quantisation in hf_quant_config.json beside config.json (both
// engines read it first: TensorRT-LLM ModelConfig.from_pretrained, vLLM's modelopt config): it
// becomes config.json's quantization_config {quant_method "modelopt", quant_algo, ...}, from the
// legacy {"producer", "quantization": {...}} shape or the flat one. A config.json that already
// has a quantization_config (ModelOpt >= 0.31 inlines it) is kept as it is.
ModelConfig with_hf_quant_config(ModelConfig config, const std::filesystem::path& config_file, const FileSystem& fs) {
  const std::filesystem::path file = config_file.parent_path() / "hf_quant_config.json";
  if (config.has("quantization_config") || fs.status(file).kind != PathStatus::Kind::kFile) return config;
  const ModelConfig hf = ModelConfig::load(file, fs);
  const std::string base = hf.has("quantization") ? "quantization" : "";
  std::string fields = "\"quant_method\":\"modelopt\"";
  for (const std::string& key : hf.keys(base)) {
    if (key == "producer" || key == "quant_method" || key.find_first_of("\"\\.") != std::string::npos) continue;
    fields += ",\"" + key + "\":" + *hf.json_at(base.empty() ? key : base + "." + key);
  }
  return config.with_field("quantization_config", "{" + fields + "}");
}

}  // namespace

void register_builtin_transforms(PluginHost& host) {
  host.add_builtin_transform("invert_scale", [](std::span<std::byte> d, DType t, const std::string& k,
                                                std::span<const uint64_t>) { invert_scale_lenient(d, t, k); });
  host.add_builtin_transform("invert_scale_strict", [](std::span<std::byte> d, DType t, const std::string& k,
                                                       std::span<const uint64_t>) { invert_scale_strict(d, t, k); });
  host.add_builtin_transform("bf16_to_f32", widen_bf16_to_f32);
  host.add_builtin_transform("f16_to_f32", widen_f16_to_f32);
  host.add_builtin_transform("block_scale_interleave_128x4", block_scale_interleave_128x4);
  host.add_builtin_transform("fill_one", fill_one);
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
  if (!options_.fs)
    remote_ = std::make_unique<RemoteFileSystem>(options_.remote.value_or(RemoteOptions::from_environment()));
  // From here on the checkpoint is named without a URL's credentials or query (review F4).
  if (options_.checkpoint) options_.checkpoint = file_system().location(*options_.checkpoint);
  if (options_.config_file) options_.config_file = file_system().location(*options_.config_file);
  options_.layout.validate();
  const auto plugin_folders = plugin_search_path(options_.plugin_dir);
  plugins_ = PluginHost::load(plugin_folders);
  register_builtin_transforms(plugins_);
  // Mapping files: --mappings, WMAP_MAPPINGS_PATH, then files beside the plugins, then the default.
  std::vector<std::filesystem::path> mapping_defaults = plugin_folders;
  mapping_defaults.push_back(default_mapping_dir());
  mappings_ = MappingRegistry::load(mapping_search_path(options_.mappings_dir, mapping_defaults), file_system());
}

void LoaderSession::cancel() const {
  cancelled_ = true;
  if (remote_) remote_->cancel();
}

void LoaderSession::clear_cancel() const {
  cancelled_ = false;
  if (remote_) remote_->clear_cancel();
}

void LoaderSession::forget_remote_objects() const {
  if (remote_) remote_->forget();
}

std::unique_ptr<PreparedLoad> LoaderSession::prepare() const {
  // A new plan asks the servers again: nothing about a remote object outlives the plan and the
  // load after it (review F2).
  forget_remote_objects();
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
  out->config = with_hf_quant_config(ModelConfig::load(config_path, file_system()), config_path, file_system());
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
  PlanOptions plan_options = options_.plan;
  plan_options.format = QuantFormat::detect(out->config);
  out->plan = std::make_unique<LoadPlan>(LoadPlan::build(out->spec, out->catalog, renamed, plan_options));
  out->plan_seconds = seconds_since(t0);
  log().debug(
      "plan phase: config and mapping {:.3f}s, renames {:.3f}s, plugin spec {:.3f}s, plan and validation {:.3f}s",
      setup_seconds, rename_seconds, spec_seconds, out->plan_seconds - setup_seconds - rename_seconds - spec_seconds);
  return out;
}

namespace {
int verify_rank(ExecOptions::Verify v) {
  switch (v) {
    case ExecOptions::Verify::kOff: return 0;
    case ExecOptions::Verify::kBestEffort: return 1;
    case ExecOptions::Verify::kRead: return 2;
    case ExecOptions::Verify::kFull: return 3;
  }
  return 0;
}
}  // namespace

bool verification_met(const LoadStats& made, const ExecOptions& wanted) {
  if (wanted.verify == ExecOptions::Verify::kOff) return true;
  const auto mode = parse_verify_mode(made.verified);
  if (!mode || verify_rank(*mode) < verify_rank(wanted.verify)) return false;
  // The same expected digests: a check against another manifest is another check.
  for (size_t i = 0; i < made.verification.size(); ++i) {
    const std::string want = i < wanted.expected_sha256.size() && wanted.expected_sha256[i]
                                 ? wanted.expected_sha256[i]->sha256
                                 : std::string();
    if (made.verification[i].expected != want) return false;
  }
  return true;
}

ExecOptions LoaderSession::session_exec(ExecOptions exec) const {
  if (!exec.transforms) {
    exec.transforms = [this](std::string_view name) { return plugins_.find_transform(name); };
  }
  if (!exec.fs) exec.fs = &file_system();
  if (!exec.cancel) exec.cancel = &cancelled_;
  return exec;
}

LoadedModel LoaderSession::load(const PreparedLoad& prepared, Device& device, ExecOptions exec, bool cached) const {
  struct Forget {
    const LoaderSession& s;
    ~Forget() { s.forget_remote_objects(); }
  } forget{*this};
  if (!cached) return execute_plan(*prepared.plan, device, session_exec(std::move(exec)));
  if (!device.spec().is_host()) {
    throw Error(ErrorCode::kInvalidArgument,
                "the weight cache keeps host parameter sets: load onto host, or without the cache");
  }
  prepared.plan->require_runnable(exec.allow_partial);  // a hit must not bypass it
  // The key is made of the plan's shard identities: a plan reused after its shards changed
  // would find the old weights under it (review F2), so the identities are taken again now.
  require_unchanged(prepared);
  const WeightCache::Limits limits = WeightCache::limits_from_env();
  WeightCache& cache = WeightCache::process();
  const std::string key = WeightCache::key_of(*prepared.plan);
  if (limits.max_entries > 0) {
    // A hit satisfies only the verification its entry was made with (review F3): as strong a
    // mode, against the same expected digests. Otherwise the shards are read and verified now.
    auto verified = [&](const LoadStats& s) { return verification_met(s, exec); };
    if (auto hit = cache.lookup(key, verified)) {
      // Nothing is read on a hit; the parameters' digests are still what the caller asked for.
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
  struct Forget {
    const LoaderSession& s;
    ~Forget() { s.forget_remote_objects(); }
  } forget{*this};
  return execute_into(*prepared.plan, device, destinations, session_exec(std::move(exec)), dest_options);
}

void LoaderSession::require_unchanged(const PreparedLoad& prepared) const {
  const Catalog& c = *prepared.catalog;
  for (uint32_t s = 0; s < c.shards().size(); ++s) {
    FileSignature now;
    try {
      now = file_system().signature(c.shard_path(s));
    } catch (const Error& e) {
      throw Error(ErrorCode::kValidation, c.shard_path(s).string() +
                                              ": changed since it was planned (it cannot be read now: " + e.what() +
                                              "): plan again");
    }
    c.require_unchanged(s, now);
  }
}

namespace {
// The first tensor whose record differs between two catalogs of one checkpoint, in words.
std::string first_moved_tensor(const Catalog& then, const Catalog& now) {
  const auto a = then.tensors(), b = now.tensors();
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const TensorRecord &x = a[i], &y = b[j];
    if (x.name != y.name) {
      return x.name < y.name ? "'" + x.name + "' is no longer in the checkpoint"
                             : "'" + y.name + "' is new in the checkpoint";
    }
    const std::string fx = then.shards()[x.shard].file, fy = now.shards()[y.shard].file;
    if (fx != fy) return "'" + x.name + "' moved from " + fx + " to " + fy;
    if (x.offset != y.offset)
      return "'" + x.name + "' in " + fx + ": data offset " + std::to_string(x.offset) + " -> " +
             std::to_string(y.offset);
    if (x.dtype != y.dtype || x.shape != y.shape)
      return "'" + x.name + "': " + std::string(dtype_name(x.dtype)) + " " + shape_text(x.shape) + " -> " +
             std::string(dtype_name(y.dtype)) + " " + shape_text(y.shape);
    ++i, ++j;
  }
  if (i < a.size()) return "'" + a[i].name + "' is no longer in the checkpoint";
  if (j < b.size()) return "'" + b[j].name + "' is new in the checkpoint";
  return "the shards' sizes or header lengths changed";
}
}  // namespace

std::unique_ptr<PreparedLoad> LoaderSession::refresh(const PreparedLoad& prepared) const {
  if (options_.catalog_file) {
    throw Error(ErrorCode::kInvalidArgument,
                "a plan made from a saved catalog (" + options_.catalog_file->string() +
                    ") is pinned to it: save the catalog again (wmap inspect --save-catalog), or plan from the "
                    "checkpoint");
  }
  auto fresh = prepare();
  if (fresh->catalog->content_id() != prepared.catalog->content_id()) {
    throw Error(ErrorCode::kValidation, prepared.catalog->root().string() +
                                            ": the shards' headers changed since the plan was made (" +
                                            first_moved_tensor(*prepared.catalog, *fresh->catalog) +
                                            "): its offsets are not the files', plan again");
  }
  return fresh;
}

}  // namespace wmap
