#pragma once
// The whole path from a checkpoint (or a saved catalog and a config) to a validated plan and a
// load, as the CLI and embedding engines use it: discover, catalog, pick the plugin and the
// mapping file for config.json's architecture, build the rank's ModelSpec, plan, validate,
// execute. A LoaderSession owns the plugins (and their library handles), so it must outlive
// every spec, plan and loaded model made through it, and (unless given a FileSystem) the
// RemoteFileSystem its plans read through: what it remembers of remote objects lives from a
// prepare() to the end of the load after it, so every new plan sees the servers' current objects.
// Not thread-safe (one session per thread), but cancel() may be called from any thread.

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wmap/catalog/catalog.h"
#include "wmap/exec/destinations.h"
#include "wmap/exec/executor.h"
#include "wmap/io/remote.h"
#include "wmap/spec/layout.h"
#include "wmap/plan/load_plan.h"
#include "wmap/mapping/mapping_registry.h"
#include "wmap/spec/model_config.h"
#include "wmap/plugin/plugin_host.h"
#include "wmap/mapping/rename_table.h"
#include "wmap/util/error.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct LoaderOptions {
  std::optional<std::filesystem::path> checkpoint;    // directory or .safetensors file
  std::optional<std::filesystem::path> catalog_file;  // a saved catalog (offline, or to pin a load)
  std::optional<std::filesystem::path> config_file;   // default: <checkpoint>/config.json
  std::optional<std::filesystem::path> plugin_dir;    // --plugin-dir
  std::optional<std::filesystem::path> mappings_dir;  // --mappings
  Layout layout;
  bool prefer_consolidated = false;
  bool progress = true;
  PlanOptions plan;  // read chunking of the schedule; the unconsumed policy
  // Every file the session reads (mapping files, a saved catalog, index.json, shard headers,
  // config.json) and, unless ExecOptions::fs says otherwise, the tensor data. Must outlive the
  // session. Default: a RemoteFileSystem the session owns, made from `remote`.
  const FileSystem* fs = nullptr;
  // How the session's own RemoteFileSystem reaches remote paths (when `fs` is not given).
  // Default: RemoteOptions::from_environment(), read when the session is made.
  std::optional<RemoteOptions> remote;
};

// A plan with everything it was made from. Neither copyable nor movable: held by the unique_ptr
// prepare() returns, so nothing inside it can be left behind by a move (the plan shares the
// catalog; `plugin` and `mapping` point into the session, which must outlive it).
struct PreparedLoad {
  PreparedLoad() = default;
  PreparedLoad(const PreparedLoad&) = delete;
  PreparedLoad& operator=(const PreparedLoad&) = delete;

  std::shared_ptr<const Catalog> catalog;  // the one the plan shares
  ModelConfig config;
  std::string architecture;
  const LoadedPlugin* plugin = nullptr;
  const MappingFile* mapping = nullptr;  // null: identity renames
  RenameTable renames;
  ModelSpec spec;
  std::unique_ptr<LoadPlan> plan;
  double catalog_seconds = 0, plan_seconds = 0;
};

class LoaderSession {
 public:
  explicit LoaderSession(const LoaderOptions& options);
  const LoaderOptions& options() const { return options_; }
  const PluginHost& plugins() const { return plugins_; }
  const MappingRegistry& mappings() const { return mappings_; }

  // Catalog + spec + plan; never reads tensor data. Throws for unusable input; plan problems
  // are reported through plan->problems(), not thrown.
  std::unique_ptr<PreparedLoad> prepare() const;
  // Executes a prepared plan (execute_plan refuses an invalid one unless exec.allow_partial).
  // With `cached`, a host load is answered from the process's WeightCache when it holds this plan
  // over these shards with every byte unchanged (stats.cache "hit", nothing read), and kept there
  // after a miss; the buffers are then shared with the cache: hand them out read-only.
  LoadedModel load(const PreparedLoad& prepared, Device& device, ExecOptions exec, bool cached = false) const;
  // Executes a prepared plan into the caller's buffers (execute_into: the table is checked first,
  // and nothing is written when it does not fit). Again with the same buffers: a reload in place.
  LoadIntoReport load_into(const PreparedLoad& prepared, Device& device, const std::vector<Destination>& destinations,
                           ExecOptions exec, const DestinationOptions& dest_options = {}) const;
  // The same plan over the shards as they are now (refit: the trainer wrote the next step): the
  // headers are read again and the plan rebuilt; when every tensor is where it was (same
  // catalog content id: names, dtypes, shapes, files, offsets), the fresh plan is returned, with
  // the shards' new identities. Otherwise kValidation naming the first tensor that moved: the
  // old plan's offsets are not the files', plan again.
  std::unique_ptr<PreparedLoad> refresh(const PreparedLoad& prepared) const;
  // Refuses (kValidation, "changed since it was planned") a prepared load whose shards are no
  // longer the ones it was planned from (each shard's identity taken again now).
  void require_unchanged(const PreparedLoad& prepared) const;
  // The file system the session reads through (its own RemoteFileSystem unless given one).
  const FileSystem& file_system() const { return options_.fs ? *options_.fs : *remote_; }
  // Ends the prepare() or load running on another thread: remote transfers within a tenth of a
  // second, the executor's workers at their next read; it throws kCancelled. clear_cancel()
  // makes the session usable again.
  void cancel() const;
  void clear_cancel() const;

 private:
  ExecOptions session_exec(ExecOptions exec) const;  // the session's transforms and file system
  void forget_remote_objects() const;                // after a load: the next plan asks the servers again

  LoaderOptions options_;
  std::unique_ptr<RemoteFileSystem> remote_;  // when options_.fs is not given
  mutable std::atomic<bool> cancelled_{false};
  PluginHost plugins_;
  MappingRegistry mappings_;
};

// Whether a load's verification (its stats: `verified`, `verification`) meets what `wanted`
// asks for: as strong a mode, against the same expected digests (a weight-cache hit replays it).
bool verification_met(const LoadStats& made, const ExecOptions& wanted);

// The core's generic in-place transforms (scale inversion), registered on every session.
void register_builtin_transforms(PluginHost& host);

// An I/O error (kIo, kNotFound) while reading tensor data or writing a dump is a load failure
// (kValidation: exit 1), not unusable input (exit 2, which an unreadable header or config still
// is). as_load_failure(e) is that kValidation error with the same message; nullopt for any other
// error, which run_as_load_failure() rethrows as it is.
// The CLI's `wmap load` and the Python module's load() run the load (and dump) through
// run_as_load_failure() so both report the same code.
std::optional<Error> as_load_failure(const Error& e);
template <class Fn>
auto run_as_load_failure(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const PartialWriteError& e) {
    if (auto failure = as_load_failure(e)) throw PartialWriteError(failure->code(), e.what(), e.written());
    throw;
  } catch (const Error& e) {
    if (auto failure = as_load_failure(e)) throw *failure;
    throw;
  }
}

}  // namespace wmap
WMAP_PUBLIC_END
