#include "rank_context.h"

#include <algorithm>
#include <cstdio>

#include "commands.h"
#include "loader_options.h"
#include "mpi_handoff.h"
#include "wmap/device/device.h"
#include "wmap/io/remote.h"
#include "wmap/mpi/io_policy.h"
#include "wmap/mpi/launch_env.h"
#ifdef WMAP_HAVE_MPI
#include "wmap/mpi/mpi_world.h"
#include "wmap/mpi/rank_io.h"
#endif

namespace wmap::cli {

using mpi::IoPolicy;

#ifdef WMAP_HAVE_MPI
bool built_with_mpi() { return true; }
#else
bool built_with_mpi() { return false; }
#endif

struct RankContext::Impl {
  mpi::RankIoReport io_report;  // the policy step's; a single process keeps the defaults
  Layout layout;                // the layout this process loads
  uint32_t rank = 0, world_size = 1;
  // Where the rank runs: its host name, its node (the world rank of the node's first rank) and
  // its place among the node's ranks (the GPU index `--device cuda` picks).
  std::string host;
  uint32_t node = 0, node_rank = 0, node_size = 1;
  RemoteCounters job_remote;  // remote storage traffic summed over the job's ranks (after the load)
#ifdef WMAP_HAVE_MPI
  std::unique_ptr<mpi::MpiWorld> world;  // null: not launched under MPI
  std::unique_ptr<mpi::RankIo> io;       // declared after `world`: freed before MPI_Finalize
#endif
};

RankContext::RankContext(const std::string& io_policy, const LayoutOptions& requested)
    : impl_(std::make_unique<Impl>()) {
  impl_->io_report.requested = mpi::parse_io_policy(io_policy);
  impl_->host = mpi::host_name();
#ifdef WMAP_HAVE_MPI
  if (mpi::launched_under_mpi()) {
    impl_->world = std::make_unique<mpi::MpiWorld>();
    mpi::MpiWorld& w = *impl_->world;
    impl_->rank = static_cast<uint32_t>(w.rank());
    impl_->world_size = static_cast<uint32_t>(w.size());
    impl_->node = static_cast<uint32_t>(w.node_id());
    impl_->node_rank = static_cast<uint32_t>(w.node_rank());
    impl_->node_size = static_cast<uint32_t>(w.node_size());
    std::exception_ptr error;
    try {
      const uint64_t ranks = uint64_t{requested.tp_size} * requested.pp_size;
      if (ranks != impl_->world_size) {
        const std::string np = std::to_string(ranks);
        throw Error(ErrorCode::kInvalidArgument,
                    (requested.pp_size > 1 ? "--tp-size " + std::to_string(requested.tp_size) + " x --pp-size " +
                                                 std::to_string(requested.pp_size) + " = " + np
                                           : "--tp-size " + std::to_string(requested.tp_size)) +
                        " does not match the " + std::to_string(impl_->world_size) +
                        " MPI ranks launched: run one rank per tensor-parallel rank and pipeline stage (mpirun -np " +
                        np + ")");
      }
      // Stage-major, as both engines number ranks (vLLM's rank = pp_rank * tp_size + tp_rank;
      // TensorRT-LLM's Mapping: tp_rank = rank % tp_size, pp_rank = rank // tp_size).
      const uint32_t tp_size = std::max<uint32_t>(requested.tp_size, 1);
      const uint32_t tp_rank = impl_->rank % tp_size, pp_rank = impl_->rank / tp_size;
      if (requested.tp_rank && *requested.tp_rank != tp_rank) {
        throw Error(ErrorCode::kInvalidArgument, "--tp-rank " + std::to_string(*requested.tp_rank) +
                                                     " differs from MPI rank " + std::to_string(impl_->rank) +
                                                     "'s tensor-parallel rank " + std::to_string(tp_rank) +
                                                     " (under mpirun the rank comes from MPI; drop --tp-rank)");
      }
      if (requested.pp_rank && *requested.pp_rank != pp_rank) {
        throw Error(ErrorCode::kInvalidArgument, "--pp-rank " + std::to_string(*requested.pp_rank) +
                                                     " differs from MPI rank " + std::to_string(impl_->rank) +
                                                     "'s pipeline stage " + std::to_string(pp_rank) +
                                                     " (under mpirun the stage comes from MPI; drop --pp-rank)");
      }
      LayoutOptions mine = requested;
      mine.tp_rank = tp_rank;
      mine.pp_rank = pp_rank;
      if (!mine.gpus_per_node) mine.gpus_per_node = static_cast<uint32_t>(w.node_size());
      impl_->layout = layout_from_options(mine);
    } catch (...) {
      error = std::current_exception();
    }
    agree("the launch", error);
    return;
  }
#else
  if (mpi::launched_under_mpi()) {
    std::fprintf(stderr,
                 "wmap: warning: launched by an MPI launcher, but this wmap has no MPI build beside it (built with "
                 "WMAP_MPI=OFF, or libexec/wmap/wmap-mpi missing): "
                 "loading as a single process with --tp-rank %u\n",
                 requested.tp_rank.value_or(0));
  }
#endif
  impl_->layout = layout_from_options(requested);
  impl_->rank = impl_->layout.pp_rank * impl_->layout.tp_size + impl_->layout.tp_rank;
  if (impl_->io_report.requested != IoPolicy::kNative)
    impl_->io_report.reason = "not launched under MPI: a single process has nothing to share";
}

RankContext::~RankContext() = default;

const Layout& RankContext::layout() const { return impl_->layout; }

int after_error(int exit_code) {
#ifdef WMAP_HAVE_MPI
  mpi::abort_if_unagreed(exit_code);
#endif
  return exit_code;
}

bool RankContext::multi_rank() const {
#ifdef WMAP_HAVE_MPI
  return impl_->world != nullptr;
#else
  return false;
#endif
}

DeviceSpec RankContext::device_spec(const DeviceSpec& requested) const {
  if (!requested.is_cuda() || requested.index_given) return requested;
  int local = 0;
#ifdef WMAP_HAVE_MPI
  if (impl_->world) local = impl_->world->node_rank();
#endif
  // A launcher that gives each rank exactly one visible GPU (CUDA_VISIBLE_DEVICES per rank, as
  // SLURM's --gpus-per-task does) numbers it 0 in every rank.
  if (cuda_device_count() == 1) local = 0;
  return DeviceSpec::cuda(local);
}

void RankContext::agree(std::string_view phase, std::exception_ptr error) {
#ifdef WMAP_HAVE_MPI
  try {
    impl_->world->agree(phase, error);
  } catch (const mpi::AgreedFailure& f) {
    throw ReportedFailure{f.exit_code};
  }
#else
  (void)phase;
  if (error) std::rethrow_exception(error);
#endif
}

void RankContext::before_load(const PreparedLoad& prepared, const Device& device, ExecOptions& exec) {
#ifdef WMAP_HAVE_MPI
  if (!multi_rank()) return;
  try {
    impl_->io = std::make_unique<mpi::RankIo>(*impl_->world, impl_->io_report.requested, prepared,
                                              device.name() == "host", exec.fs ? *exec.fs : FileSystem::standard());
  } catch (const mpi::AgreedFailure& f) {
    throw ReportedFailure{f.exit_code};
  }
  impl_->io_report = impl_->io->report();
  // --verify's own reads (what this rank's plan does not read) go to the storage, not to the
  // exchanged bytes.
  if (impl_->io->file_system() && !exec.verify_fs) exec.verify_fs = exec.fs ? exec.fs : &FileSystem::standard();
  exec.fs = impl_->io->file_system();
  // The exchanged bytes are in memory already, and only they: read (copy) them, never map.
  if (exec.fs) exec.io = IoMode::kPread;
#else
  (void)prepared;
  (void)device;
  (void)exec;
#endif
}

void RankContext::after_load(const LoadStats& stats) {
  // Native loads (and single processes) read storage in the load itself; the other policies
  // read it before, and the load hits the page cache or the exchanged bytes.
  mpi::RankIoReport& r = impl_->io_report;
  if (r.effective == IoPolicy::kNative) r.storage_bytes += stats.bytes_read;
  if (r.needed_bytes == 0) r.needed_bytes = stats.bytes_needed;
#ifdef WMAP_HAVE_MPI
  // Every rank gets here (a failed load ended them all): the job's remote traffic, one figure.
  const RemoteCounters mine = remote_counters();
  if (multi_rank()) {
    for (uint64_t b : impl_->world->allgather(mine.bytes, impl_->world->world())) impl_->job_remote.bytes += b;
    for (uint64_t q : impl_->world->allgather(mine.requests, impl_->world->world())) impl_->job_remote.requests += q;
    for (uint64_t t : impl_->world->allgather(mine.retries, impl_->world->world())) impl_->job_remote.retries += t;
  }
#endif
}

void RankContext::add_json_fields(nlohmann::ordered_json& out, const LoadStats& stats) const {
  const Impl& m = *impl_;
  const mpi::RankIoReport& r = m.io_report;
  const double seconds = r.seconds + stats.seconds;
  const double gbps = seconds > 0 ? static_cast<double>(stats.bytes_loaded) / seconds / 1e9 : 0;
  out["rank"] = m.rank;
  out["world_size"] = m.world_size;
  out["host"] = m.host;
  out["node"] = m.node;
  out["node_rank"] = m.node_rank;
  out["node_size"] = m.node_size;
  out["io_policy_requested"] = std::string(mpi::io_policy_name(r.requested));
  out["io_policy"] = std::string(mpi::io_policy_name(r.effective));
  out["io_policy_reason"] = r.reason;
  out["storage_bytes"] = r.storage_bytes;
  out["received_bytes"] = r.received_bytes;
  out["sent_bytes"] = r.sent_bytes;
  out["received_off_node_bytes"] = r.received_off_node_bytes;
  out["sent_off_node_bytes"] = r.sent_off_node_bytes;
  out["needed_bytes"] = r.needed_bytes;
  out["needed_extents"] = r.extents;
  out["union_bytes"] = r.union_bytes;
  out["os_read_bytes"] = os_storage_read_bytes();
  out["io_policy_seconds"] = r.seconds;
  if (m.job_remote.requests) {
    out["remote_job"] = {
        {"requests", m.job_remote.requests}, {"retries", m.job_remote.retries}, {"bytes", m.job_remote.bytes}};
  }
  out["end_to_end_gbps"] = gbps;
}

void RankContext::print_summary(const LoadStats& stats) const {
  const Impl& m = *impl_;
  const mpi::RankIoReport& r = m.io_report;
  if (!multi_rank() && r.requested == IoPolicy::kNative) return;  // the single-process output is unchanged
  const double mib = 1 << 20;
  const double seconds = r.seconds + stats.seconds;
  const double gbps = seconds > 0 ? static_cast<double>(stats.bytes_loaded) / seconds / 1e9 : 0;
  const std::string tag =
      multi_rank() ? "wmap[rank " + std::to_string(m.rank) + "/" + std::to_string(m.world_size) + "]" : "wmap";
  const std::string where = multi_rank() ? "on " + m.host + " as node rank " + std::to_string(m.node_rank) + "/" +
                                               std::to_string(m.node_size) + ", "
                                         : "";
  char across[128] = "";
  if (r.effective == IoPolicy::kExchange) {
    std::snprintf(across, sizeof across, " (%.1f MiB across nodes in, %.1f MiB out)",
                  static_cast<double>(r.received_off_node_bytes) / mib,
                  static_cast<double>(r.sent_off_node_bytes) / mib);
  }
  std::fprintf(stderr,
               "%s: %sio-policy %s (requested %s%s%s): needed %.1f MiB in %llu extents, read from storage %.1f MiB, "
               "received %.1f MiB, "
               "sent %.1f MiB%s; %s %.3fs + load %.3fs: %.2f GB/s\n",
               tag.c_str(), where.c_str(), std::string(mpi::io_policy_name(r.effective)).c_str(),
               std::string(mpi::io_policy_name(r.requested)).c_str(),
               r.reason.empty() ? "" : "; fell back: ", r.reason.c_str(), static_cast<double>(r.needed_bytes) / mib,
               static_cast<unsigned long long>(r.extents), static_cast<double>(r.storage_bytes) / mib,
               static_cast<double>(r.received_bytes) / mib, static_cast<double>(r.sent_bytes) / mib, across,
               r.effective == IoPolicy::kExchange      ? "exchange"
               : r.effective == IoPolicy::kRankStriped ? "read-ahead"
                                                       : "pre-load",
               r.seconds, stats.seconds, gbps);
}

}  // namespace wmap::cli
