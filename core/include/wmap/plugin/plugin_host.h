#pragma once
// Loads plugin libraries (plugin_api.h) from the plugin search path and hands out their model
// builders and transforms.
//
// load() works folder by folder, in order; inside a folder every `*.so` in name order. Discovery,
// verification and registration are kept apart:
//   1. open the library (RTLD_NOW | RTLD_LOCAL); a library that does not open is refused with the
//      loader's message; one without `wmap_plugin_info` is skipped with a note (not a plugin);
//   2. verify the info struct before any registration code runs, collecting EVERY mismatch into
//      one message (ABI version, struct size, null fields, core build id);
//   3. resolve clashes: two plugins of ONE folder with the same name or serving the same
//      architecture are both refused (the message names both files); across folders the earlier
//      folder wins and the shadowed plugin or architecture claim is noted in a warning;
//   4. call register_plugin; a non-zero return (or a plugin that registers no model builder) is a
//      refusal naming the plugin, its file and its message.
// Refusals and notes are logged as warnings and kept (refused(), notes()); a bad plugin never makes
// load() throw, so the host survives every broken library.
//
// Ownership: the host owns every library handle and every object a plugin created (builders,
// transforms). Handles are released last, after those objects, when the host dies; everything
// returned by reference or pointer lives as long as the host. Plain data a builder returned
// (ModelSpec) holds no plugin code and may outlive the host. A moved-from host may only be
// destroyed or assigned to.
//
// Thread-safety: load() and add_builtin_transform() are not thread-safe; once set up, the const
// members may be called from any thread (builders and transforms must then be thread-safe too).

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wmap/abi/plugin_api.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct LoadedPlugin {
  std::string name;
  std::string version;
  std::filesystem::path file;
  std::vector<std::string> architectures;  // as the plugin listed them (shadowed claims included)
  std::vector<std::string> targets;        // the engine targets it serves ("trtllm", "vllm")
  ModelBuilder builder;
};

class PluginHost {
 public:
  PluginHost();  // no plugins, no transforms
  ~PluginHost();
  PluginHost(PluginHost&&) noexcept;
  PluginHost& operator=(PluginHost&&) noexcept;
  PluginHost(const PluginHost&) = delete;
  PluginHost& operator=(const PluginHost&) = delete;

  // Loads every plugin of `folders` (see above). A folder that does not exist is skipped; one
  // listed twice is read once. Never throws for a bad plugin.
  static PluginHost load(const std::vector<std::filesystem::path>& folders);

  const LoadedPlugin* find_by_name(std::string_view name) const;
  // The plugin serving `architecture` in its info struct (earliest folder wins); null when none.
  const LoadedPlugin* find_by_architecture(std::string_view architecture) const;
  // Like find_by_name(), but throws kNotFound listing the loaded plugins and, for a refused plugin
  // of that name, its file and the reasons it was refused.
  const LoadedPlugin& require_by_name(std::string_view name) const;

  // Calls the plugin's builder. Any exception it throws becomes a wmap::Error prefixed
  // "plugin 'NAME' (FILE): ": a wmap::Error keeps its own code (a config error stays malformed
  // input, exit 2), anything else becomes kInternal.
  // The returned spec records `layout` (ModelSpec::layout), whatever the plugin set there. A
  // layout whose target the plugin does not serve is refused (kInvalidArgument) naming those it serves.
  ModelSpec build_spec(const LoadedPlugin& plugin, const ModelConfig& config, const Layout& layout,
                       const KeyProbe& probe) const;

  // A transform by name: built-ins first, then plugins' (the first registration wins, later ones
  // are noted). Null when unknown.
  const TransformFn* find_transform(std::string_view name) const;
  // Registers one of the core's generic transforms. A built-in registered twice is a programmer
  // error (throws kInternal); a plugin transform of the same name is shadowed with a note.
  void add_builtin_transform(const std::string& name, TransformFn fn);

  // Loaded plugins, in load order.
  std::vector<const LoadedPlugin*> plugins() const;
  // Informational messages: skipped non-plugin libraries, shadowed plugins/architectures/transforms.
  const std::vector<std::string>& notes() const;
  // One line per refused library: "FILE: reason[; reason...]" (plugin name included when known).
  const std::vector<std::string>& refused() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The plugin search path, by search_path()'s rules (install_paths.h): `cli_dir` (--plugin-dir)
// when given, then each entry of the colon-separated WMAP_PLUGIN_PATH, then `default_dir`. Folders
// that do not exist are dropped silently, except `cli_dir`: one that is not a directory throws
// kNotFound.
std::vector<std::filesystem::path> plugin_search_path(const std::optional<std::filesystem::path>& cli_dir,
                                                      const std::filesystem::path& default_dir);
// The same with default_plugin_dir() (install_paths.h) as the default folder.
std::vector<std::filesystem::path> plugin_search_path(const std::optional<std::filesystem::path>& cli_dir);

}  // namespace wmap
WMAP_PUBLIC_END
