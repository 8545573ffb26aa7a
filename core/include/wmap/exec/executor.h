#pragma once
// Runs a validated LoadPlan's schedule (wmap/plan/read_schedule.h): its read units in its order,
// reading exactly the planned bytes; applies transforms, writes each parameter once into device
// memory, and releases each source range after its last reader (the schedule's release points).
// One call is one load; it is thread-safe with respect to other loads.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wmap/catalog/catalog.h"
#include "wmap/catalog/shard_digests.h"
#include "wmap/device/device.h"
#include "wmap/io/file_io.h"
#include "wmap/plan/load_plan.h"
#include "wmap/spec/transform_fn.h"
#include "wmap/util/error.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct LoadedParam {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  std::shared_ptr<DeviceBuffer> buffer;  // shared between aliases (tied embeddings)
};

struct LoadStats {
  double seconds = 0;                   // wall time of execute_plan
  uint64_t bytes_loaded = 0;            // parameter bytes written
  uint64_t bytes_read = 0;              // file bytes read (wanted bytes plus gaps read through to save calls)
  uint64_t bytes_needed = 0;            // source bytes the plan's pieces need
  uint64_t reads = 0;                   // read calls (pread/preadv batches) or populated mmap windows
  unsigned load_workers = 1;            // load (copy/transform) workers, effective
  unsigned load_workers_requested = 0;  // 0: default
  unsigned read_workers = 1;            // reads in flight, effective
  unsigned read_workers_requested = 0;
  std::string io_path;            // "mmap" or "pread": the path used
  std::string io_requested;       // "auto", "mmap" or "pread"
  std::string io_reason;          // why auto chose io_path
  bool prefetch = false;          // asynchronous readahead ahead of the readers
  bool prefault = false;          // some destination's pages were faulted in before the copy
  std::string prefault_decision;  // why: "on (requested)", or auto's rule and the fault cost measured
  double setup_seconds = 0;       // within `seconds`: deciding and reserving device memory (Device::reserve)
  // The weight cache (LoaderSession::load's `cached`): "off"; "miss" (loaded and kept) or "hit"
  // (answered from it): the buffers are shared with the cache; "too-large" (loaded, not kept:
  // over WMAP_WEIGHT_CACHE_MAX_BYTES).
  std::string cache = "off";
  // Busy seconds summed over the workers of each pool (so they can exceed `seconds`).
  double read_seconds = 0, copy_seconds = 0, transform_seconds = 0;
  // ExecOptions::verify: one check per shard (catalog order), and the bytes read only to hash
  // (headers, skipped tensors; whole shards under kFull when the plan's reads cannot feed a hash).
  std::vector<ShardCheck> verification;
  uint64_t verify_extra_bytes = 0;
  // What the load verified: verify_mode_name of ExecOptions::verify ("off" when nothing was).
  // A weight-cache hit replays the checks its entry was made with (`verification`) and their mode.
  std::string verified = "off";
};

struct ExecOptions {
  IoMode io = IoMode::kAuto;       // kAuto: choose_io_mode()
  unsigned load_workers = 0;       // load pool: pieces copied/transformed at once; 0: default_load_workers()
  unsigned read_workers = 0;       // read pool: byte ranges in flight; 0: default_(staged_)read_workers()
  const FileSystem* fs = nullptr;  // default FileSystem::standard()
  bool allow_partial = false;      // run a plan with problems, skipping its broken parameters
  std::function<const TransformFn*(std::string_view)> transforms;  // looks up named transforms
  std::function<void(uint64_t done, uint64_t total)> progress;     // bytes; called from workers, serialised
  // Destination pages faulted in ahead of the read (MADV_POPULATE_WRITE, by the read worker that
  // first touches a parameter, so in parallel) rather than by the read or copy itself. true/false
  // force it; nullopt (the default) decides per buffer from measurement (docs/performance.md
  // "Fresh buffers: when to prefault"): 4 KiB buffers wmap allocates, on machines where a fresh
  // page faults in slowly (over 4 us: PVM guests); never huge-page or caller-owned buffers.
  std::optional<bool> prefault;
  // Readahead ahead of the readers: kAuto enables it when the bytes to read fit in 90 % of the
  // memory available (cgroup-aware); the window ahead is bounded by prefetch_window_bytes.
  enum class Prefetch { kAuto, kOff, kOn } prefetch = Prefetch::kAuto;
  uint64_t prefetch_window_bytes = uint64_t{256} << 20;
  // SHA-256 of every shard from the bytes the load reads (core/src/exec/shard_hasher.h). kRead
  // hashes the shards this rank reads (nearly) whole; kFull also reads what the plan does not,
  // to hash every shard. Both are requirements (review F3): a shard this rank reads that cannot
  // be hashed (a partial read under kRead) or has no expected digest fails the load before any
  // byte is read, naming it. kBestEffort hashes as kRead and reports those shards instead
  // ("not verified", "no digest"). A digest that differs from `expected_sha256` (per catalog
  // shard; see wmap/catalog/shard_digests.h) fails every mode, naming the shard, both digests and
  // their source, before any parameter is handed over.
  enum class Verify { kOff, kBestEffort, kRead, kFull } verify = Verify::kOff;
  std::vector<std::optional<ExpectedDigest>> expected_sha256;
  // Where the hash reads what the plan does not (headers, skipped bytes, `kFull`'s rest): the
  // storage. Default `fs`; a multi-rank policy that serves the plan's bytes from elsewhere (the
  // exchange's received extents) sets it to the storage's FileSystem.
  const FileSystem* verify_fs = nullptr;
  // LoadedModel::digests: each parameter's XXH3-64 over its final bytes (param_digests).
  bool digests = false;
  // On a failure, name the destinations already written (execute_into: the caller's buffers).
  bool name_written_on_failure = false;
  // Set (by another thread): the workers stop at their next unit and the load throws
  // kCancelled. LoaderSession points it at its own flag (LoaderSession::cancel).
  const std::atomic<bool>* cancel = nullptr;
};

// "off", "best-effort", "read", "full": the names front ends take (--verify=..., verify=...).
std::string_view verify_mode_name(ExecOptions::Verify mode);
std::optional<ExecOptions::Verify> parse_verify_mode(std::string_view name);

// Defaults from the core count: min(hardware threads, 4) for each pool.
unsigned default_read_workers();
unsigned default_load_workers();
// Read workers for a device that stages writes (CUDA): one GPU's copy engines drain faster than
// four readers fill (~50 GB/s on H200), so half the hardware threads, at least 4, at most 8.
unsigned default_staged_read_workers();
// Parses a worker count from the environment variable `name` (WMAP_READ_WORKERS,
// WMAP_LOAD_WORKERS): 0 when unset; a positive integer; anything else throws kInvalidArgument
// naming the variable and its value. Called by front ends (CLI, Python), not by the executor.
unsigned worker_count_from_env(const char* name);

// What kAuto resolves to: pread, for every plan (measured faster than mmap on every load in
// docs/performance.md; a shard truncated under a load is then an error, not a signal). The plan
// parameter keeps the decision per plan should a measurement ever favour mmap; `reason` says why.
IoMode choose_io_mode(const LoadPlan& plan, std::string* reason = nullptr);

struct LoadedModel {
  std::vector<LoadedParam> params;  // in plan order; absent optional params left out
  LoadStats stats;
  std::vector<uint64_t> digests;  // ExecOptions::digests: XXH3-64 of each params entry's bytes
  const LoadedParam* find(std::string_view name) const;
};

// A load into the caller's buffers (ExecOptions::name_written_on_failure) that failed after it
// had written some of them: the message names them (the first hundred), written() has them all.
class PartialWriteError : public Error {
 public:
  PartialWriteError(ErrorCode code, const std::string& message, std::vector<std::string> written)
      : Error(code, message), written_(std::move(written)) {}
  const std::vector<std::string>& written() const { return written_; }

 private:
  std::vector<std::string> written_;
};

// What `options.verify` (kRead, kFull) cannot meet for this plan, known before any byte is read:
// kValidation listing each shard the rank reads that will not be hashed (a partial read under
// kRead) or has no expected digest. execute_plan checks it first; a multi-rank front end checks
// it before its I/O policy reads anything.
void require_verification(const LoadPlan& plan, const ExecOptions& options);

// Refuses a plan that may not run (LoadPlan::require_runnable), then runs its schedule over the
// plan's own catalog.
LoadedModel execute_plan(const LoadPlan& plan, Device& device, const ExecOptions& options);

// XXH3-64 of each parameter's final bytes (after fusion, split, transforms and conversions), in
// model.params order, so two holders can compare weights without moving them. A buffer with host
// memory is hashed in place; a device buffer is copied back (Device::copy_to_host, one parameter
// at a time) and hashed on the host: the staged bytes are not final, since device kernels (scale
// inversions) run after staging. Equal bytes give equal digests on every device.
std::vector<uint64_t> param_digests(const LoadedModel& model, Device& device);

// Writes every parameter, under its name and sorted by name, as one safetensors file.
uint64_t dump_safetensors(const LoadedModel& model, Device& device, const std::filesystem::path& file);

}  // namespace wmap
WMAP_PUBLIC_END
