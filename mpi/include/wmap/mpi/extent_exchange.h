#pragma once
// The `exchange` I/O policy's transfer: the union of the bytes every rank needs is cut into
// chunks; chunk c is read from storage by rank c mod N alone and each rank is sent (point to
// point) exactly its overlap with the chunk, straight into its ExtentStoreFileSystem. Storage
// traffic is the union once, however many ranks load. Collective over the world communicator;
// call it on the thread that owns the MpiWorld (the only one that calls MPI: a reader thread of
// its own does the preads, so reads and transfers overlap). In flight per rank: kExchangeSlots
// chunks, i.e. at most 4 x 32 MiB of read buffers plus their packed copies.

#include <cstdint>
#include <vector>

#include "wmap/catalog/catalog.h"
#include "wmap/mpi/extent_store_fs.h"
#include "wmap/mpi/file_extents.h"
#include "wmap/mpi/mpi_world.h"

namespace wmap::mpi {

struct ExchangeStats {
  uint64_t storage_bytes = 0;   // read from the shard files by this rank (its chunks)
  uint64_t received_bytes = 0;  // sent to this rank by the others
  uint64_t sent_bytes = 0;      // sent by this rank to the others
  uint64_t chunks_owned = 0;
  double seconds = 0;
};

// Chunks in flight per rank: one per slot; a slot is reused once its sends completed.
constexpr int kExchangeSlots = 4;

// Chunk size for a union of `union_bytes` over `ranks` ranks: about 8 chunks per rank (so the
// reads spread evenly), between 1 and 32 MiB (bounded buffers, counts within an MPI int).
uint64_t exchange_chunk_bytes(uint64_t union_bytes, int ranks);

// `needed[r]` is rank r's sorted, merged extents (identical on every rank); `store` was built
// from needed[world.rank()]. Every rank returns after every transfer completed, even when some
// owner failed to read: such an owner sends empty messages (error markers) for the rest of its
// chunks and then throws its read error, which the caller's agree() reports on every rank.
ExchangeStats exchange_extents(const MpiWorld& world, const Catalog& catalog, const std::vector<std::vector<FileExtent>>& needed,
                               ExtentStoreFileSystem& store);

}  // namespace wmap::mpi
