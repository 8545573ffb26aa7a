#pragma once
// How the ranks of one MPI job read a checkpoint (`--io-policy`):
//   native        each rank reads what its own plan needs;
//   rank-striped  the ranks of a node warm the shared page cache with disjoint stripes of the
//                 bytes the node needs, then load natively (striped_warmup.h);
//   exchange      each needed byte is read by one rank and sent to the ranks that need it, which
//                 load from memory (extent_exchange.h, extent_store_fs.h).
// The effective policy is decided from facts every rank gathered (policy_decision.h: requested
// policy, shard names/sizes/mtimes, memory, metadata size, MPI's thread level), so every rank
// takes the same branch; when any rank cannot follow, all fall back to native together with one
// reason. Owns the exchange buffers, which must outlive the load that reads them. Use on the
// thread that owns the MpiWorld.

#include <memory>
#include <string>
#include <string_view>

#include "wmap/io/file_io.h"
#include "wmap/loader/loader.h"
#include "wmap/mpi/io_policy.h"
#include "wmap/mpi/extent_store_fs.h"
#include "wmap/mpi/mpi_world.h"

namespace wmap::mpi {

class RankIo {
 public:
  // Collective: agrees on the policy and runs its step before the load (agreeing on success).
  // `params_on_host`: the load's parameters land in host memory (a host device), so the
  // exchange's memory check counts them beside the exchanged bytes.
  // The shards are read through `fs`, the FileSystem the load would read them through.
  RankIo(MpiWorld& world, IoPolicy requested, const PreparedLoad& prepared, bool params_on_host,
         const FileSystem& fs = FileSystem::posix());
  // The FileSystem the load reads through: null for the real files.
  const FileSystem* file_system() const { return store_.get(); }
  const RankIoReport& report() const { return report_; }

 private:
  RankIoReport report_;
  std::unique_ptr<ExtentStoreFileSystem> store_;
};

}  // namespace wmap::mpi
