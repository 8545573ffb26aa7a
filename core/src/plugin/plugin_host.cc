#include "wmap/plugin/plugin_host.h"

#include "pipeline_stage.h"
#include "wmap/spec/fp8_format.h"
#include "wmap/spec/int4_format.h"
#include "wmap/spec/nvfp4_format.h"
#include "wmap/spec/quant_format.h"

#include <dlfcn.h>

#include <algorithm>
#include <boost/dll/shared_library.hpp>
#include <cstddef>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <utility>

#include "wmap/build_info.h"
#include "wmap/util/error.h"
#include "wmap/util/install_paths.h"
#include "logger.h"

namespace wmap {
namespace {

namespace fs = std::filesystem;

constexpr const char* kEntrySymbol = "wmap_plugin_info";
// A plugin listing more architectures than this is treated as having an unterminated list.
constexpr size_t kMaxArchitectures = 4096;

struct PluginTransform {
  TransformFn fn;
  const LoadedPlugin* owner = nullptr;
};

// A library that opened and exports the entry, between verification and registration.
struct Candidate {
  fs::path file;
  boost::dll::shared_library library;
  const WmapPluginInfo* info = nullptr;
  std::string name;  // empty when the info struct does not give one
  std::string version;
  std::vector<std::string> architectures;
  std::vector<std::string> targets;
  std::vector<std::string> reasons;  // non-empty: refused
};

// The registrar a plugin's register_plugin talks to. It only collects: nothing reaches the host
// until registration returned 0. Throws on misuse; the plugin's entry turns that into its message.
class StagingRegistrar final : public PluginRegistrar {
 public:
  void set_model_builder(ModelBuilder builder) override {
    if (!builder) throw Error(ErrorCode::kInvalidArgument, "set_model_builder: empty builder");
    if (builder_) throw Error(ErrorCode::kInvalidArgument, "set_model_builder called twice");
    builder_ = std::move(builder);
  }
  void add_transform(const std::string& name, TransformFn fn) override {
    if (name.empty()) throw Error(ErrorCode::kInvalidArgument, "add_transform: empty transform name");
    if (!fn) throw Error(ErrorCode::kInvalidArgument, "add_transform: empty function for transform '" + name + "'");
    for (const auto& t : transforms_) {
      if (t.first == name)
        throw Error(ErrorCode::kInvalidArgument, "add_transform: transform '" + name + "' added twice");
    }
    transforms_.emplace_back(name, std::move(fn));
  }

  ModelBuilder builder_;
  std::vector<std::pair<std::string, TransformFn>> transforms_;
};

std::string describe(const std::string& name, const fs::path& file) {
  return "plugin '" + name + "' (" + file.string() + ")";
}

// Boost reports "boost::dll::shared_library::load() failed (dlerror system message: X)"; keep X.
std::string loader_message(const std::exception& e) {
  const std::string what = e.what();
  const std::string marker = "(dlerror system message: ";
  const size_t at = what.find(marker);
  if (at == std::string::npos) return what;
  std::string msg = what.substr(at + marker.size());
  const size_t close = msg.rfind(')');  // what() ends with "): <error_code message>"
  if (close != std::string::npos) msg.erase(close);
  return msg;
}

// Plugin discovery (dlopen, dlsym, dladdr) is serialised process-wide: dladdr hands back the
// loader's own strings, which a concurrent dlopen in another PluginHost writes; the dynamic
// loader's internal lock orders them, but ThreadSanitizer cannot see that lock (two sessions
// loading at once, FakeCuda.ConcurrentLoadsOnOneDeviceKeepTheirOwnArenas). Loading is rare and short.
std::mutex& discovery_mutex() {
  static std::mutex m;
  return m;
}

// True when the resolved entry lives in `file` itself rather than in one of its dependencies
// (dlsym on a handle also searches the library's dependencies).
bool defined_in(const void* symbol, const fs::path& file) {
  Dl_info dl{};
  if (dladdr(symbol, &dl) == 0 || dl.dli_fname == nullptr) return false;
  std::error_code ec;
  const bool same = fs::equivalent(fs::path(dl.dli_fname), file, ec);
  return !ec && same;
}

template <typename Field>
bool has_field(const WmapPluginInfo& info, size_t offset) {
  return static_cast<size_t>(info.struct_size) >= offset + sizeof(Field);
}

// Checks the info struct before any plugin registration code runs. Reads only the fields the
// plugin's struct_size says it has, and records every mismatch.
void verify(Candidate& c) {
  const WmapPluginInfo& info = *c.info;
  auto& reasons = c.reasons;
  if (info.abi_version != WMAP_PLUGIN_ABI_VERSION) {
    reasons.push_back("plugin ABI version " + std::to_string(info.abi_version) +
                      " does not match the host's ABI version " + std::to_string(WMAP_PLUGIN_ABI_VERSION));
  }
  if (info.struct_size < sizeof(WmapPluginInfo)) {
    reasons.push_back("info struct_size " + std::to_string(info.struct_size) + " is smaller than the host's " +
                      std::to_string(sizeof(WmapPluginInfo)));
  }
  if (!has_field<const char*>(info, offsetof(WmapPluginInfo, name))) {
    // nothing more can be read safely
  } else if (info.name == nullptr || info.name[0] == '\0') {
    reasons.push_back(info.name == nullptr ? "name is null" : "name is empty");
  } else {
    c.name = info.name;
  }
  if (has_field<const char*>(info, offsetof(WmapPluginInfo, version)) && info.version != nullptr)
    c.version = info.version;
  if (has_field<const char* const*>(info, offsetof(WmapPluginInfo, architectures))) {
    if (info.architectures == nullptr) {
      reasons.push_back("architectures is null");
    } else {
      size_t i = 0;
      for (; i < kMaxArchitectures && info.architectures[i] != nullptr; ++i) {
        if (info.architectures[i][0] == '\0') {
          reasons.push_back("architecture " + std::to_string(i) + " is empty");
        } else {
          c.architectures.emplace_back(info.architectures[i]);
        }
      }
      if (i == kMaxArchitectures) reasons.push_back("architectures list is not null-terminated");
    }
  }
  if (has_field<const char*>(info, offsetof(WmapPluginInfo, core_build_id))) {
    const char* host_id = wmap_core_build_id();
    if (info.core_build_id == nullptr) {
      reasons.push_back("core_build_id is null (host build id \"" + std::string(host_id) + "\")");
    } else if (std::string_view(info.core_build_id) != host_id) {
      reasons.push_back("built against core build id \"" + std::string(info.core_build_id) +
                        "\" but the host's core build id is \"" + host_id + "\"");
    }
  }
  if (has_field<void*>(info, offsetof(WmapPluginInfo, register_plugin)) && info.register_plugin == nullptr) {
    reasons.push_back("register_plugin is null");
  }
  if (has_field<const char* const*>(info, offsetof(WmapPluginInfo, targets))) {
    if (info.targets == nullptr || info.targets[0] == nullptr) {
      reasons.push_back("serves no target (targets is " + std::string(info.targets == nullptr ? "null" : "empty") +
                        ")");
    } else {
      size_t i = 0;
      for (; i < kMaxArchitectures && info.targets[i] != nullptr; ++i) {
        if (parse_target(info.targets[i])) {
          c.targets.emplace_back(info.targets[i]);
        } else {
          reasons.push_back("declares unknown target \"" + std::string(info.targets[i]) + "\" (known: trtllm, vllm)");
        }
      }
      if (i == kMaxArchitectures) reasons.push_back("targets list is not null-terminated");
    }
  }
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::vector<fs::path> shared_libraries_in(const fs::path& folder) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    std::error_code type_ec;
    if (p.extension() == ".so" && fs::is_regular_file(p, type_ec)) out.push_back(p);
  }
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  return out;
}

}  // namespace

struct PluginHost::Impl {
  // Declared first so it is destroyed last: every builder and transform below is code (and
  // std::function managers) living in these libraries. ~Impl also clears them explicitly first.
  std::vector<boost::dll::shared_library> libraries;

  std::vector<std::unique_ptr<LoadedPlugin>> plugins;                       // load order
  std::map<std::string, const LoadedPlugin*, std::less<>> by_architecture;  // first claim wins
  std::map<std::string, PluginTransform, std::less<>> plugin_transforms;    // first registration wins
  std::map<std::string, TransformFn, std::less<>> builtin_transforms;
  std::vector<fs::path> folders;
  std::vector<std::string> notes;
  std::vector<std::string> refused;
  struct Refusal {
    std::string name;
    fs::path file;
    std::string reasons;
  };
  std::vector<Refusal> refusals;

  ~Impl() {
    plugin_transforms.clear();
    by_architecture.clear();
    plugins.clear();
    builtin_transforms.clear();
    libraries.clear();
  }

  void note(std::string message) {
    log().warn("{}", message);
    notes.push_back(std::move(message));
  }
  void refuse(const std::string& name, const fs::path& file, const std::vector<std::string>& reasons) {
    std::string line = file.string() + ": ";
    if (!name.empty()) line += "plugin '" + name + "' ";
    line += "refused: " + join(reasons, "; ");
    log().warn("{}", line);
    refused.push_back(line);
    refusals.push_back({name, file, join(reasons, "; ")});
  }

  void load_folder(const fs::path& folder);
  void resolve_clashes(std::vector<Candidate>& candidates);
  void install(Candidate& c);
};

void PluginHost::Impl::load_folder(const fs::path& folder) {
  // 1. Discover and verify; no plugin registration code runs here.
  std::vector<Candidate> candidates;
  std::unique_lock discovery(discovery_mutex());
  for (const fs::path& file : shared_libraries_in(folder)) {
    Candidate c;
    c.file = file;
    try {
      c.library.load(boost::dll::fs::path(file.string()),
                     boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
    } catch (const std::exception& e) {
      refuse("", file, {"cannot be loaded: " + loader_message(e)});
      continue;
    }
    if (!c.library.has(kEntrySymbol)) {
      notes.push_back(file.string() + ": not a wmap plugin (no " + kEntrySymbol + "), skipped");
      log().info("{}", notes.back());
      continue;
    }
    WmapPluginInfoFn entry = c.library.get<const WmapPluginInfo*()>(kEntrySymbol);
    if (!defined_in(reinterpret_cast<const void*>(entry), file)) {
      notes.push_back(file.string() + ": not a wmap plugin (" + kEntrySymbol +
                      " comes from a library it depends on), skipped");
      log().info("{}", notes.back());
      continue;
    }
    try {
      c.info = entry();
    } catch (const std::exception& e) {
      refuse("", file, {std::string(kEntrySymbol) + " threw: " + e.what()});
      continue;
    } catch (...) {
      refuse("", file, {std::string(kEntrySymbol) + " threw an unknown exception"});
      continue;
    }
    if (c.info == nullptr) {
      refuse("", file, {std::string(kEntrySymbol) + " returned null"});
      continue;
    }
    verify(c);
    candidates.push_back(std::move(c));
  }
  discovery.unlock();

  // 2. Clashes inside this folder refuse both sides.
  resolve_clashes(candidates);

  // 3. Register the survivors, in name order.
  for (Candidate& c : candidates) {
    if (!c.reasons.empty()) {
      refuse(c.name, c.file, c.reasons);
      continue;
    }
    install(c);
  }
}

void PluginHost::Impl::resolve_clashes(std::vector<Candidate>& candidates) {
  std::map<std::string, std::vector<size_t>> by_name;
  std::map<std::string, std::vector<size_t>> by_arch;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!candidates[i].name.empty()) by_name[candidates[i].name].push_back(i);
    std::set<std::string> seen;  // a plugin listing one architecture twice is harmless
    for (const std::string& a : candidates[i].architectures) {
      if (seen.insert(a).second) by_arch[a].push_back(i);
    }
  }
  for (const auto& [name, idx] : by_name) {
    if (idx.size() < 2) continue;
    for (size_t i : idx) {
      for (size_t j : idx) {
        if (i != j) {
          candidates[i].reasons.push_back("plugin name '" + name + "' is also used by " + candidates[j].file.string() +
                                          " in the same folder");
        }
      }
    }
  }
  for (const auto& [arch, idx] : by_arch) {
    if (idx.size() < 2) continue;
    for (size_t i : idx) {
      for (size_t j : idx) {
        if (i != j) {
          candidates[i].reasons.push_back("architecture '" + arch + "' is also claimed by " +
                                          describe(candidates[j].name, candidates[j].file) + " in the same folder");
        }
      }
    }
  }
}

void PluginHost::Impl::install(Candidate& c) {
  for (const auto& p : plugins) {
    if (p->name == c.name) {
      note(c.file.string() + ": plugin '" + c.name + "' is shadowed by " + p->file.string() +
           " from an earlier folder; not loaded");
      return;
    }
  }

  auto plugin = std::make_unique<LoadedPlugin>();
  {
    // The registrar holds the plugin's objects; it dies (on every path) before `c.library`.
    StagingRegistrar registrar;
    char message[2048] = {};
    int rc = 0;
    try {
      rc = c.info->register_plugin(static_cast<PluginRegistrar*>(&registrar), message, sizeof(message));
    } catch (const std::exception& e) {  // a hand-written entry that let an exception escape
      rc = -1;
      std::snprintf(message, sizeof(message), "register_plugin threw: %s", e.what());
    } catch (...) {
      rc = -1;
      std::snprintf(message, sizeof(message), "register_plugin threw an unknown exception");
    }
    message[sizeof(message) - 1] = '\0';
    if (rc != 0) {
      std::string why = message[0] != '\0' ? std::string(message) : "no message";
      refuse(c.name, c.file, {"registration failed (code " + std::to_string(rc) + "): " + why});
      return;
    }
    if (!registrar.builder_) {
      refuse(c.name, c.file, {"registration did not set a model builder"});
      return;
    }
    plugin->name = c.name;
    plugin->version = c.version;
    plugin->file = c.file;
    plugin->architectures = c.architectures;
    plugin->targets = c.targets;
    plugin->builder = std::move(registrar.builder_);
    for (auto& [name, fn] : registrar.transforms_) {
      if (builtin_transforms.count(name)) {
        note(describe(c.name, c.file) + ": transform '" + name + "' is shadowed by the built-in of that name");
        continue;
      }
      auto it = plugin_transforms.find(name);
      if (it != plugin_transforms.end()) {
        note(describe(c.name, c.file) + ": transform '" + name + "' is shadowed by " +
             describe(it->second.owner->name, it->second.owner->file));
        continue;
      }
      plugin_transforms.emplace(name, PluginTransform{std::move(fn), plugin.get()});
    }
  }

  for (const std::string& arch : plugin->architectures) {
    auto [it, inserted] = by_architecture.emplace(arch, plugin.get());
    if (!inserted && it->second != plugin.get()) {
      note(describe(plugin->name, plugin->file) + ": architecture '" + arch + "' is served by " +
           describe(it->second->name, it->second->file) + " from an earlier folder");
    }
  }
  log().debug("loaded {} version {}", describe(plugin->name, plugin->file), plugin->version);
  libraries.push_back(std::move(c.library));
  plugins.push_back(std::move(plugin));
}

PluginHost::PluginHost() : impl_(std::make_unique<Impl>()) {}
PluginHost::~PluginHost() = default;
PluginHost::PluginHost(PluginHost&&) noexcept = default;
// Destroys the old Impl as a whole, so its objects still die before its libraries.
PluginHost& PluginHost::operator=(PluginHost&&) noexcept = default;

PluginHost PluginHost::load(const std::vector<fs::path>& folders) {
  PluginHost host;
  Impl& impl = *host.impl_;
  std::set<fs::path> seen;
  for (const fs::path& folder : folders) {
    std::error_code ec;
    if (!fs::is_directory(folder, ec)) {
      impl.notes.push_back(folder.string() + ": plugin folder does not exist, skipped");
      continue;
    }
    fs::path key = fs::weakly_canonical(folder, ec);
    if (ec) key = folder;
    if (!seen.insert(key).second) continue;  // listed twice: read once
    impl.folders.push_back(folder);
    impl.load_folder(folder);
  }
  return host;
}

const LoadedPlugin* PluginHost::find_by_name(std::string_view name) const {
  for (const auto& p : impl_->plugins) {
    if (p->name == name) return p.get();
  }
  return nullptr;
}

const LoadedPlugin* PluginHost::find_by_architecture(std::string_view architecture) const {
  auto it = impl_->by_architecture.find(architecture);
  return it == impl_->by_architecture.end() ? nullptr : it->second;
}

const LoadedPlugin& PluginHost::require_by_name(std::string_view name) const {
  if (const LoadedPlugin* p = find_by_name(name)) return *p;
  std::string msg = "no plugin named '" + std::string(name) + "'";
  std::vector<std::string> refused_here;
  for (const auto& r : impl_->refusals) {
    if (r.name == name) refused_here.push_back(r.file.string() + " was refused: " + r.reasons);
  }
  if (!refused_here.empty()) msg += " (" + join(refused_here, "; ") + ")";
  std::vector<std::string> loaded;
  for (const auto& p : impl_->plugins) loaded.push_back(p->name + " (" + p->file.string() + ")");
  msg += "; loaded plugins: " + (loaded.empty() ? std::string("none") : join(loaded, ", "));
  std::vector<std::string> folders;
  for (const auto& f : impl_->folders) folders.push_back(f.string());
  msg += "; plugin folders searched: " + (folders.empty() ? std::string("none") : join(folders, ":"));
  throw Error(ErrorCode::kNotFound, msg);
}

ModelSpec PluginHost::build_spec(const LoadedPlugin& plugin, const ModelConfig& config, const Layout& layout,
                                 const KeyProbe& probe) const {
  const std::string prefix = describe(plugin.name, plugin.file) + ": ";
  if (!plugin.builder) throw Error(ErrorCode::kInternal, prefix + "has no model builder");
  const std::string_view target = target_name(layout.target);
  if (std::find(plugin.targets.begin(), plugin.targets.end(), target) == plugin.targets.end()) {
    throw Error(ErrorCode::kInvalidArgument, prefix + "does not serve target " + std::string(target) + " for " +
                                                 config.architecture() + "; it serves: " + join(plugin.targets, ", "));
  }
  // A quantisation format no building block serves is refused by name before any plugin runs,
  // not reported later as missing or unconsumed tensors (issue 40).
  constexpr const char* kServed =
      "served: fp8 (block [128, 128]; AutoFP8 per-tensor, target vllm), modelopt FP8 (per-tensor), "
      "compressed-tensors float-quantized (FP8 per-tensor target vllm, per-channel), modelopt NVFP4, "
      "compressed-tensors nvfp4-pack-quantized, awq / gptq / compressed-tensors pack-quantized W4A16 (target vllm), "
      "mxfp4 (gpt-oss)";
  const QuantFormat format = QuantFormat::detect(config);
  if (format.kind == QuantFormat::Kind::kOther) {
    config.fail("quantization_config.quant_method", "'" + format.method + "' is not served; " + kServed);
  }
  // compressed-tensors names its packing in `format`: FP8 (`float-quantized`), NVFP4 and int
  // W4A16 (`pack-quantized`) are served; any other packing is refused here rather than taken for
  // NVFP4 and reported as missing weight_scale_2 (issue 40).
  if (format.kind == QuantFormat::Kind::kCompressedTensors && config.has("quantization_config.format")) {
    const std::string packing = config.get_string("quantization_config.format", "");
    if (packing != "nvfp4-pack-quantized" && packing != "float-quantized" && packing != "pack-quantized") {
      config.fail("quantization_config.format", "compressed-tensors '" + packing + "' is not served; " + kServed);
    }
  }
  // FP8 variants no building block serves (ModelOpt NVFP4 or W4A16, compressed-tensors block).
  // Each target's refusals of a served variant come with the first linear a family asks about
  // (spec::linear_quant), so a family that serves no quantised checkpoint names itself first.
  (void)Fp8Format::detect(config);
  (void)Nvfp4Format::detect(config);
  (void)Int4Format::detect(config);
  ModelSpec spec;
  try {
    spec = plugin.builder(config, layout, probe);
  } catch (const Error& e) {
    // Keep the plugin's code: a config error stays a malformed-input error (exit 2).
    throw Error(e.code(), prefix + e.what());
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kInternal, prefix + e.what());
  } catch (...) {
    throw Error(ErrorCode::kInternal, prefix + "unknown exception");
  }
  if (spec.plugin.empty()) spec.plugin = plugin.name;
  // The MoE backend the plugin built for (Layout::moe_backend): the one layout field it sets.
  std::string built_for = std::move(spec.layout.moe_backend);
  if (!layout.moe_backend.empty() && built_for != layout.moe_backend) {
    throw Error(
        ErrorCode::kInvalidArgument,
        prefix + "does not serve moe_backend '" + layout.moe_backend + "' for " + config.architecture() +
            (built_for.empty() ? std::string(": it has no MoE backend choice") : ": it built for '" + built_for + "'"));
  }
  spec.layout = layout;  // recorded once, by the host: the plan reads it from the spec
  spec.layout.moe_backend = std::move(built_for);
  keep_pipeline_stage(spec, prefix);  // pp_size > 1: this stage's modules only
  return spec;
}

const TransformFn* PluginHost::find_transform(std::string_view name) const {
  if (auto it = impl_->builtin_transforms.find(name); it != impl_->builtin_transforms.end()) return &it->second;
  if (auto it = impl_->plugin_transforms.find(name); it != impl_->plugin_transforms.end()) return &it->second.fn;
  return nullptr;
}

void PluginHost::add_builtin_transform(const std::string& name, TransformFn fn) {
  if (name.empty() || !fn) throw Error(ErrorCode::kInternal, "add_builtin_transform: empty name or function");
  if (impl_->builtin_transforms.count(name)) {
    throw Error(ErrorCode::kInternal, "add_builtin_transform: transform '" + name + "' registered twice");
  }
  if (auto it = impl_->plugin_transforms.find(name); it != impl_->plugin_transforms.end()) {
    impl_->note(describe(it->second.owner->name, it->second.owner->file) + ": transform '" + name +
                "' is shadowed by the built-in of that name");
  }
  impl_->builtin_transforms.emplace(name, std::move(fn));
}

std::vector<const LoadedPlugin*> PluginHost::plugins() const {
  std::vector<const LoadedPlugin*> out;
  for (const auto& p : impl_->plugins) out.push_back(p.get());
  return out;
}

const std::vector<std::string>& PluginHost::notes() const { return impl_->notes; }
const std::vector<std::string>& PluginHost::refused() const { return impl_->refused; }

std::vector<fs::path> plugin_search_path(const std::optional<fs::path>& cli_dir, const fs::path& default_dir) {
  return search_path(cli_dir ? std::vector<fs::path>{*cli_dir} : std::vector<fs::path>{}, "plugin_dir",
                     "WMAP_PLUGIN_PATH", {default_dir});
}

std::vector<fs::path> plugin_search_path(const std::optional<fs::path>& cli_dir) {
  return plugin_search_path(cli_dir, default_plugin_dir());
}

}  // namespace wmap
