#pragma once
// The `rank-striped` I/O policy's read-ahead (as TensorRT-LLM's rank-striped loading does): the
// ranks of one node split the union of the bytes they need (read_ranges) round-robin by chunk,
// each reads its chunks through a small reused buffer so they land in the node's shared page
// cache, and after a node barrier every rank loads natively from the warm cache. Collective over the node
// communicator; call it on the thread that owns the MpiWorld. Read errors are left to the load
// that follows (which reports them with its own context), so they only end this rank's warming.

#include <cstdint>
#include <vector>

#include "wmap/catalog/catalog.h"
#include "wmap/mpi/file_extents.h"
#include "wmap/mpi/mpi_world.h"

namespace wmap::mpi {

struct WarmupStats {
  uint64_t storage_bytes = 0;     // read from the shard files by this rank
  uint64_t node_union_bytes = 0;  // read_ranges of the node's needs
  double seconds = 0;
};

// `node_needed[i]`: the extents of the node's rank i (identical on the node's ranks).
// The shards are read through `fs` (the load's FileSystem).
WarmupStats striped_warmup(const MpiWorld& world, const Catalog& catalog,
                           const std::vector<std::vector<FileExtent>>& node_needed, const FileSystem& fs);

}  // namespace wmap::mpi
